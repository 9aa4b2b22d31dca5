//! `herd doctor`: which agent CLIs are installed and at which versions (against the versions
//! herd was tested with), the filesystem sandbox, the state dir, SQLite. Non-zero when something
//! required is missing.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use herd_engine::sandbox::{self, Availability, Confinement, SandboxMode};
use herd_engine::service::{Service, ServiceOptions};
use serde_json::json;

use crate::cli::DoctorArgs;

/// An agent CLI herd can drive: its pin (binary, package, tested version, variable), how a run
/// selects it, whether runs need it.
struct Known {
    pin: &'static herd_backends::pins::Pin,
    /// `--cli claude`, `--cli acp -- codex-acp`, …
    run_with: &'static str,
    /// Its route carries permission requests to herd's gate.
    asks: bool,
    /// Runs need it (the default CLI); the others are reported but optional.
    required: bool,
}

fn known() -> Vec<Known> {
    let pin = |b: &str| herd_backends::pins::pin(b).expect("every known CLI has a pin");
    vec![
        Known { pin: pin("claude"), run_with: "--cli claude", asks: true, required: true },
        Known { pin: pin("codex"), run_with: "--cli codex", asks: false, required: false },
        Known {
            pin: pin("gemini"),
            run_with: "--cli gemini (gemini --acp)",
            asks: true,
            required: false,
        },
        Known {
            pin: pin("claude-code-acp"),
            run_with: "--cli acp -- claude-code-acp",
            asks: true,
            required: false,
        },
        Known {
            pin: pin("codex-acp"),
            run_with: "--cli acp -- codex-acp",
            asks: true,
            required: false,
        },
    ]
}

struct CliCheck {
    known: Known,
    path: Option<String>,
    version: Option<String>,
    problem: Option<String>,
}

impl CliCheck {
    fn of(k: Known) -> Self {
        let path = std::env::var("PATH").ok();
        let (name, var) = (k.pin.binary, k.pin.var);
        let found = herd_backends::resolve_program(
            name,
            var,
            path.as_deref(),
            std::env::var(var).ok().as_deref(),
        );
        match found {
            Err(e) => {
                let install = herd_backends::pins::install_command(name).unwrap_or_default();
                let problem = format!("{e}; install: {install}");
                Self { known: k, path: None, version: None, problem: Some(problem) }
            }
            Ok(p) => {
                let version = package_version(&p, k.pin.package).or_else(|| version_of(&p));
                let tested = k.pin.version;
                let problem = match &version {
                    None => Some(format!("`{name} --version` did not answer within 20s")),
                    Some(v) if !v.contains(tested) => Some(format!(
                        "version {v} was not tested with herd (tested: {tested}); stream formats may differ"
                    )),
                    _ => None,
                };
                Self { known: k, path: Some(p.display().to_string()), version, problem }
            }
        }
    }

    /// Missing and needed.
    fn fails(&self) -> bool {
        self.path.is_none() && self.known.required
    }

    /// A run of it would start (the binary is there).
    fn runnable(&self) -> bool {
        self.path.is_some()
    }
}

/// The version in the npm package a binary belongs to (the ACP agents have no `--version`).
fn package_version(bin: &Path, package: &str) -> Option<String> {
    let real = bin.canonicalize().ok()?;
    real.ancestors().skip(1).take(5).find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        (v["name"] == package).then(|| v["version"].as_str().map(str::to_owned)).flatten()
    })
}

/// The project's agent definitions that run on an ACP agent, with their program.
fn acp_definitions() -> Vec<(String, String, bool)> {
    let Ok(root) = crate::state::project_root() else { return Vec::new() };
    let cat =
        herd_engine::agents::discover(&root, herd_engine::agents::user_agents_dir().as_deref());
    let path = std::env::var("PATH").ok();
    cat.agents
        .iter()
        .filter(|f| f.def.cli == Some(herd_core::BackendKind::Acp))
        .filter_map(|f| {
            let program = f.def.acp.as_ref()?.command.first()?.clone();
            let found = herd_backends::resolve_program(&program, "PATH", path.as_deref(), None);
            Some((f.def.name.clone(), program, found.is_ok()))
        })
        .collect()
}

/// The sandbox agents get here: the configured mode, and whether bubblewrap works (and why not).
struct SandboxCheck {
    mode: Result<SandboxMode, String>,
    availability: &'static Availability,
}

impl SandboxCheck {
    fn new() -> Self {
        let mode = crate::state::project_root()
            .map_err(|e| e.to_string())
            .and_then(|root| herd_engine::config::load(&root).map_err(|e| e.to_string()))
            .and_then(|cfg| {
                let c = Confinement { mode: cfg.sandbox, ..Confinement::default() };
                c.effective_mode()
            });
        Self { mode, availability: sandbox::availability() }
    }

    /// Runs cannot start: `required` without a sandbox, or a config that does not load.
    fn fails(&self) -> bool {
        matches!(
            (&self.mode, self.availability),
            (Err(_), _) | (Ok(SandboxMode::Required), Availability::Missing(_))
        )
    }
}

fn version_of(p: &Path) -> Option<String> {
    let mut child = Command::new(p)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .spawn()
        .ok()?;
    let start = Instant::now();
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

pub fn run(state_dir: &Path, a: DoctorArgs) -> anyhow::Result<u8> {
    let clis: Vec<CliCheck> = known().into_iter().map(CliCheck::of).collect();
    let acp_agents = acp_definitions();
    let sbx = SandboxCheck::new();
    let mut opts = ServiceOptions { surface: "doctor".into(), ..Default::default() };
    if let Some(b) = super::STORE.get() {
        opts.store = b.clone();
    }
    let opened = Service::open(state_dir, opts);
    let state_ok = opened.is_ok();
    let state_problem = opened.err().map(|e| e.to_string());
    let ok = state_ok && !clis.iter().any(CliCheck::fails) && !sbx.fails();
    let mut out = std::io::stdout().lock();
    if a.json {
        let clis: Vec<_> = clis
            .iter()
            .map(|c| {
                json!({
                    "name": c.known.pin.binary, "path": c.path, "version": c.version,
                    "tested_version": c.known.pin.version, "required": c.known.required,
                    "problem": c.problem, "runnable": c.runnable(),
                    "run_with": c.known.run_with, "asks_permission": c.known.asks,
                })
            })
            .collect();
        let agents: Vec<_> = acp_agents
            .iter()
            .map(|(name, program, found)| {
                json!({"agent": name, "program": program, "runnable": found})
            })
            .collect();
        let v = json!({
            "clis": clis,
            "acp_agents": agents,
            "sandbox": {
                "mode": sbx.mode.as_ref().ok().map(|m| m.as_str()),
                "available": matches!(sbx.availability, Availability::Bwrap(_)),
                "mechanism": match sbx.availability {
                    Availability::Bwrap(_) => Some("bwrap"),
                    Availability::Missing(_) => None,
                },
                "path": match sbx.availability {
                    Availability::Bwrap(p) => Some(p.display().to_string()),
                    Availability::Missing(_) => None,
                },
                "problem": match (&sbx.mode, sbx.availability) {
                    (Err(e), _) => Some(e.clone()),
                    (_, Availability::Missing(why)) => Some(why.clone()),
                    _ => None,
                },
            },
            "state_dir": state_dir, "state_ok": state_ok, "state_problem": state_problem,
            "sqlite_version": Service::store_version(),
            "ok": ok,
        });
        writeln!(out, "{v}")?;
        return Ok(if ok { 0 } else { 1 });
    }
    writeln!(out, "herd {}", env!("CARGO_PKG_VERSION"))?;
    let mark = |ok: bool| if ok { "ok  " } else { "FAIL" };
    for c in &clis {
        let what = match (&c.path, &c.version) {
            (Some(p), Some(v)) => format!("{v} at {p}"),
            (Some(p), None) => p.clone(),
            _ => "not installed".into(),
        };
        let status = match (&c.path, &c.problem) {
            (Some(_), None) => "ok  ",
            (Some(_), Some(_)) => "warn",
            (None, _) if c.known.required => "FAIL",
            (None, _) => "--  ",
        };
        let (name, tested) = (c.known.pin.binary, c.known.pin.version);
        let run =
            if c.runnable() { format!("; runnable: {}", c.known.run_with) } else { String::new() };
        writeln!(out, "[{status}] {name}: {what} (tested with {tested}{run})")?;
        if let Some(p) = &c.problem {
            writeln!(out, "       {p}")?;
        }
    }
    for (agent, program, found) in &acp_agents {
        let (status, what) = if *found {
            ("ok  ", "runnable")
        } else {
            ("warn", "not runnable: its program is not on PATH")
        };
        writeln!(out, "[{status}] agent {agent}: ACP agent `{program}`, {what}")?;
    }
    writeln!(out, "[ok  ] command: any program on PATH")?;
    let mode = match &sbx.mode {
        Ok(m) => format!("sandbox: {}", m.as_str()),
        Err(e) => format!("config: {e}"),
    };
    match sbx.availability {
        Availability::Bwrap(p) => {
            writeln!(out, "[{}] sandbox: bwrap at {} ({mode})", mark(!sbx.fails()), p.display())?
        }
        Availability::Missing(why) => {
            let m = match &sbx.mode {
                Ok(SandboxMode::Off) => "ok  ",
                _ if sbx.fails() => "FAIL",
                _ => "warn",
            };
            writeln!(out, "[{m}] sandbox: none ({mode}): agents can write wherever you can")?;
            writeln!(out, "       {why}")?;
        }
    }
    writeln!(out, "[{}] state dir: {}", mark(state_ok), state_dir.display())?;
    if let Some(p) = &state_problem {
        writeln!(out, "       {p}")?;
    }
    writeln!(out, "[ok  ] sqlite {}", Service::store_version())?;
    Ok(if ok { 0 } else { 1 })
}

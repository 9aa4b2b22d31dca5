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

/// An agent CLI herd can drive: its binary, the variable that points at it, the version tested.
struct Known {
    name: &'static str,
    var: &'static str,
    tested: &'static str,
    /// Runs need it (the default CLI); the others are reported but optional.
    required: bool,
}

const KNOWN: &[Known] = &[
    Known {
        name: "claude",
        var: "HERD_CLAUDE_BIN",
        tested: herd_backends::claude::TESTED_VERSION,
        required: true,
    },
    Known {
        name: "codex",
        var: herd_backends::codex::PROGRAM_OVERRIDE_VAR,
        tested: herd_backends::codex::TESTED_VERSION,
        required: false,
    },
    Known {
        name: "gemini",
        var: herd_backends::gemini::PROGRAM_OVERRIDE_VAR,
        tested: herd_backends::gemini::TESTED_VERSION,
        required: false,
    },
];

struct CliCheck {
    known: &'static Known,
    path: Option<String>,
    version: Option<String>,
    problem: Option<String>,
}

impl CliCheck {
    fn of(k: &'static Known) -> Self {
        let path = std::env::var("PATH").ok();
        let found = herd_backends::resolve_program(
            k.name,
            k.var,
            path.as_deref(),
            std::env::var(k.var).ok().as_deref(),
        );
        match found {
            Err(e) => Self { known: k, path: None, version: None, problem: Some(e.to_string()) },
            Ok(p) => {
                let version = version_of(&p);
                let problem = match &version {
                    None => Some(format!("`{} --version` did not answer within 20s", k.name)),
                    Some(v) if !v.contains(k.tested) => Some(format!(
                        "version {v} was not tested with herd (tested: {}); stream formats may differ",
                        k.tested
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
    let clis: Vec<CliCheck> = KNOWN.iter().map(CliCheck::of).collect();
    let sbx = SandboxCheck::new();
    let opts = ServiceOptions { surface: "doctor".into(), ..Default::default() };
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
                    "name": c.known.name, "path": c.path, "version": c.version,
                    "tested_version": c.known.tested, "required": c.known.required,
                    "problem": c.problem,
                })
            })
            .collect();
        let v = json!({
            "clis": clis,
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
        writeln!(out, "[{status}] {}: {what} (tested with {})", c.known.name, c.known.tested)?;
        if let Some(p) = &c.problem {
            writeln!(out, "       {p}")?;
        }
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

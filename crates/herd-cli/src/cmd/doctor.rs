//! `herd doctor`: which agent CLIs are installed and at which versions (against the versions
//! herd was tested with), the filesystem sandbox, the state dir, SQLite. Non-zero when something
//! required is missing.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use herd_backends::BackendKind;
use herd_engine::sandbox::{self, Availability, Confinement, SandboxMode};
use herd_store::{StatePaths, Store};
use serde_json::json;

use crate::cli::DoctorArgs;

struct CliCheck {
    name: &'static str,
    path: Option<String>,
    version: Option<String>,
    tested: &'static str,
    problem: Option<String>,
}

fn check_claude() -> CliCheck {
    let backend = BackendKind::Claude.backend();
    let var = backend.program_override_var().unwrap_or("HERD_CLAUDE_BIN");
    let path = std::env::var("PATH").ok();
    let tested = herd_backends::claude::TESTED_VERSION;
    match herd_backends::resolve_program(
        "claude",
        var,
        path.as_deref(),
        std::env::var(var).ok().as_deref(),
    ) {
        Err(e) => CliCheck {
            name: "claude",
            path: None,
            version: None,
            tested,
            problem: Some(e.to_string()),
        },
        Ok(p) => {
            let version = version_of(&p);
            let problem = match &version {
                None => Some("`claude --version` did not answer within 20s".to_owned()),
                Some(v) if !v.contains(tested) => Some(format!(
                    "version {v} was not tested with herd (tested: {tested}); stream formats may differ"
                )),
                _ => None,
            };
            CliCheck {
                name: "claude",
                path: Some(p.display().to_string()),
                version,
                tested,
                problem,
            }
        }
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

fn version_of(p: &std::path::Path) -> Option<String> {
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

pub fn run(paths: StatePaths, a: DoctorArgs) -> anyhow::Result<u8> {
    let claude = check_claude();
    let sbx = SandboxCheck::new();
    let store = Store::open(paths.clone());
    let state_ok = store.is_ok();
    let state_problem = store.err().map(|e| e.to_string());
    let missing = claude.path.is_none();
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = json!({
            "clis": [{
                "name": claude.name, "path": claude.path, "version": claude.version,
                "tested_version": claude.tested, "problem": claude.problem,
            }],
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
            "state_dir": paths.root, "state_ok": state_ok, "state_problem": state_problem,
            "sqlite_version": Store::sqlite_version(),
            "ok": state_ok && !missing && !sbx.fails(),
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(out, "herd {}", env!("CARGO_PKG_VERSION"))?;
        let mark = |ok: bool| if ok { "ok  " } else { "FAIL" };
        let c = &claude;
        let what = match (&c.path, &c.version) {
            (Some(p), Some(v)) => format!("{v} at {p}"),
            (Some(p), None) => p.clone(),
            _ => "not installed".into(),
        };
        let warn =
            if c.problem.is_some() && c.path.is_some() { "warn" } else { mark(c.path.is_some()) };
        writeln!(out, "[{warn}] {}: {what} (tested with {})", c.name, c.tested)?;
        if let Some(p) = &c.problem {
            writeln!(out, "       {p}")?;
        }
        writeln!(out, "[ok  ] command: any program on PATH")?;
        let mode = match &sbx.mode {
            Ok(m) => format!("sandbox: {}", m.as_str()),
            Err(e) => format!("config: {e}"),
        };
        match sbx.availability {
            Availability::Bwrap(p) => writeln!(
                out,
                "[{}] sandbox: bwrap at {} ({mode})",
                mark(!sbx.fails()),
                p.display()
            )?,
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
        writeln!(out, "[{}] state dir: {}", mark(state_ok), paths.root.display())?;
        if let Some(p) = &state_problem {
            writeln!(out, "       {p}")?;
        }
        writeln!(out, "[ok  ] sqlite {}", Store::sqlite_version())?;
    }
    Ok(if state_ok && !missing && !sbx.fails() { 0 } else { 1 })
}

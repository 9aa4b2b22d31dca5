//! `herd doctor`: which agent CLIs are installed and at which versions (against the versions
//! herd was tested with), the state dir, SQLite. Non-zero when something required is missing.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use herd_backends::BackendKind;
use std::path::Path;

use herd_engine::service::{Service, ServiceOptions};
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
    let var = herd_backends::backend(BackendKind::Claude)
        .ok()
        .and_then(|b| b.program_override_var())
        .unwrap_or("HERD_CLAUDE_BIN");
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

pub fn run(state_dir: &Path, a: DoctorArgs) -> anyhow::Result<u8> {
    let claude = check_claude();
    let opened =
        Service::open(state_dir, ServiceOptions { surface: "doctor".into(), ..Default::default() });
    let state_ok = opened.is_ok();
    let state_problem = opened.err().map(|e| e.to_string());
    let missing = claude.path.is_none();
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = json!({
            "clis": [{
                "name": claude.name, "path": claude.path, "version": claude.version,
                "tested_version": claude.tested, "problem": claude.problem,
            }],
            "state_dir": state_dir, "state_ok": state_ok, "state_problem": state_problem,
            "sqlite_version": Service::store_version(),
            "ok": state_ok && !missing,
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
        writeln!(out, "[{}] state dir: {}", mark(state_ok), state_dir.display())?;
        if let Some(p) = &state_problem {
            writeln!(out, "       {p}")?;
        }
        writeln!(out, "[ok  ] sqlite {}", Service::store_version())?;
    }
    Ok(if state_ok && !missing { 0 } else { 1 })
}

//! End-to-end: the real `claude` CLI (found by `require_claude`) runs offline against the mock.
//! Each test uses its own scenario name so they can share `MockServer::shared()`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use herd_testkit::{MockServer, RecordedRequest, Script, claude_env, require_claude};
use serde_json::{Value, json};

struct Run {
    lines: Vec<Value>,
    stderr: String,
    code: Option<i32>,
    elapsed: Duration,
}

impl Run {
    fn result(&self) -> &Value {
        self.lines
            .iter()
            .find(|l| l["type"] == "result")
            .unwrap_or_else(|| panic!("no result line; stderr: {}\n{:#?}", self.stderr, self.lines))
    }
}

/// Runs `claude -p "SCENARIO=<scenario> go" --output-format stream-json --verbose <extra>` in `cwd`.
fn run_claude(bin: &Path, cwd: &Path, scenario: &str, extra: &[&str]) -> Run {
    let mock = MockServer::shared();
    let home = tempfile::tempdir().expect("temp HOME");
    let started = Instant::now();
    let out = Command::new(bin)
        .args([
            "-p",
            &format!("SCENARIO={scenario} go"),
            "--output-format",
            "stream-json",
            "--verbose",
        ])
        .args(extra)
        .env_clear()
        .envs(claude_env(mock, home.path()))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("spawn claude");
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON line {l:?}: {e}")))
        .collect();
    Run {
        lines,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
        elapsed,
    }
}

fn describe(requests: &[RecordedRequest]) -> Vec<String> {
    requests
        .iter()
        .map(|r| {
            format!(
                "{} {}{} stream={} scenario={:?} turns={} model={}",
                r.method,
                r.path,
                r.query.as_deref().map(|q| format!("?{q}")).unwrap_or_default(),
                r.streaming,
                r.scenario,
                r.assistant_turns(),
                r.body["model"],
            )
        })
        .collect()
}

#[test]
fn text_scenario_gives_successful_result() {
    let Some(bin) = require_claude() else { return };
    let mock = MockServer::shared();
    mock.script("kit-text", Script::new().text("hello from the mock, scenario {{scenario}}"));
    let cwd = tempfile::tempdir().unwrap();
    let run = run_claude(&bin, cwd.path(), "kit-text", &[]);
    eprintln!("kit-text: claude took {:?}, rc={:?}", run.elapsed, run.code);
    eprintln!("kit-text requests:\n{}", describe(&mock.requests_for("kit-text")).join("\n"));

    let result = run.result();
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], "hello from the mock, scenario kit-text");
    assert_eq!(run.code, Some(0));
    let init = &run.lines[0];
    assert_eq!((init["type"].as_str(), init["subtype"].as_str()), (Some("system"), Some("init")));
    assert_eq!(init["apiKeySource"], "ANTHROPIC_API_KEY");
}

#[test]
fn bash_tool_then_text_with_last_tool_result() {
    let Some(bin) = require_claude() else { return };
    let mock = MockServer::shared();
    mock.script(
        "kit-bash",
        Script::new()
            .tool_use("Bash", json!({"command": "echo hi-from-mock", "description": "x"}))
            .text("tool said: {{last_tool_result}}"),
    );
    let cwd = tempfile::tempdir().unwrap();
    let run = run_claude(&bin, cwd.path(), "kit-bash", &[]);
    eprintln!("kit-bash: claude took {:?}, rc={:?}", run.elapsed, run.code);

    let result = run.result();
    assert_eq!(result["is_error"], false, "{result}");
    let text = result["result"].as_str().unwrap_or_default();
    assert!(text.contains("hi-from-mock"), "{result}");
    assert_eq!(result["num_turns"], 2, "{result}");
    let tool_use = run
        .lines
        .iter()
        .find(|l| l["type"] == "assistant" && l["message"]["content"][0]["type"] == "tool_use")
        .expect("assistant tool_use line");
    assert!(tool_use["message"]["content"][0]["id"].as_str().unwrap().starts_with("toolu_mock_"));

    let requests = mock.requests_for("kit-bash");
    eprintln!("kit-bash requests:\n{}", describe(&requests).join("\n"));
    let streamed: Vec<_> = requests.iter().filter(|r| r.streaming).collect();
    assert_eq!(streamed.len(), 2, "{:#?}", describe(&requests));
    assert_eq!(streamed[1].assistant_turns(), 1);
}

#[test]
fn write_tool_creates_file_in_cwd() {
    let Some(bin) = require_claude() else { return };
    let mock = MockServer::shared();
    let cwd = tempfile::tempdir().unwrap();
    let target = cwd.path().join("hello.txt");
    mock.script(
        "kit-write",
        Script::new()
            .tool_use(
                "Write",
                json!({"file_path": target.display().to_string(), "content": "hi from mock\n"}),
            )
            .text("wrote: {{last_tool_result}}"),
    );
    let run = run_claude(&bin, cwd.path(), "kit-write", &["--allowedTools", "Write"]);
    let result = run.result();
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(
        std::fs::read_to_string(&target).ok().as_deref(),
        Some("hi from mock\n"),
        "{result}"
    );
    assert!(result["permission_denials"].as_array().is_some_and(Vec::is_empty), "{result}");
}

#[test]
fn http_500_is_an_error_result_quickly() {
    let Some(bin) = require_claude() else { return };
    let mock = MockServer::shared();
    mock.script("kit-500", Script::new().error(500, "mock: forced 500"));
    let cwd = tempfile::tempdir().unwrap();
    let run = run_claude(&bin, cwd.path(), "kit-500", &[]);
    eprintln!("kit-500: claude took {:?}, rc={:?}", run.elapsed, run.code);
    let result = run.result();
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["api_error_status"], 500, "{result}");
    assert!(result["result"].as_str().unwrap_or_default().contains("mock: forced 500"), "{result}");
    assert!(run.elapsed < Duration::from_secs(10), "took {:?}", run.elapsed);
    assert_eq!(run.code, Some(1));
    let retries = run.lines.iter().filter(|l| l["subtype"] == "api_retry").count();
    assert_eq!(retries, 1, "CLAUDE_CODE_MAX_RETRIES=1 means one retry");
    assert_eq!(mock.requests_for("kit-500").len(), 2);
}

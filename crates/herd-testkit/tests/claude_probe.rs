//! Manual probe (ignored by default): runs the real `claude` in a few modes against a private mock
//! and prints every request it made. `cargo test -p herd-testkit --test claude_probe -- --ignored --nocapture`

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use herd_testkit::{MockServer, Script, claude_env, require_claude};
use serde_json::json;

fn probe(label: &str, args: &[&str], stdin: Option<&str>, drop_env: &[&str]) {
    let Some(bin) = require_claude() else { return };
    let mock = MockServer::start();
    mock.script(
        "probe",
        Script::new()
            .tool_use("Bash", json!({"command": "echo probe-out", "description": "x"}))
            .text("probe done: {{last_tool_result}}"),
    );
    mock.script(
        "parent",
        Script::new()
            .tool_use(
                "Agent",
                json!({"description": "sub", "subagent_type": "general-purpose",
                       "prompt": "SCENARIO=probe run it"}),
            )
            .text("parent done: {{last_tool_result}}"),
    );
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let env: Vec<_> = claude_env(&mock, home.path())
        .into_iter()
        .filter(|(k, _)| !drop_env.contains(&k.as_str()))
        .collect();
    let started = Instant::now();
    let mut child = Command::new(&bin)
        .args(args)
        .env_clear()
        .envs(env)
        .current_dir(cwd.path())
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = stdout.lines().find(|l| l.contains("\"type\":\"result\"")).unwrap_or("<none>");
    eprintln!("=== {label}: rc={:?} in {elapsed:?}", out.status.code());
    eprintln!("    result: {}", &result[..result.len().min(400)]);
    if !out.stderr.is_empty() {
        eprintln!("    stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    let t0 = mock.requests().first().map(|r| r.received_at);
    for r in mock.requests() {
        eprintln!(
            "    +{:>5}ms {} {}{} stream={} scenario={:?} turns={} model={} max_tokens={} tools={}",
            t0.map_or(0, |t| r.received_at.duration_since(t).as_millis()),
            r.method,
            r.path,
            r.query.as_deref().map(|q| format!("?{q}")).unwrap_or_default(),
            r.streaming,
            r.scenario,
            r.assistant_turns(),
            r.body["model"],
            r.body["max_tokens"],
            r.body["tools"].as_array().map_or(0, Vec::len),
        );
    }
}

#[test]
#[ignore = "manual probe of the real claude CLI"]
fn probe_claude_requests() {
    let base = ["--output-format", "stream-json", "--verbose"];
    let p = |extra: &[&str]| -> Vec<String> {
        ["-p", "SCENARIO=probe go"]
            .iter()
            .chain(&base)
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let run = |label: &str, args: Vec<String>, stdin: Option<&str>, drop: &[&str]| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        probe(label, &refs, stdin, drop);
    };
    run("plain -p", p(&[]), None, &[]);
    run("plain -p again (warm)", p(&[]), None, &[]);
    run("no SHELL", p(&[]), None, &["SHELL"]);
    run("partial messages", p(&["--include-partial-messages"]), None, &[]);
    run(
        "output-format json",
        vec!["-p".into(), "SCENARIO=probe go".into(), "--output-format".into(), "json".into()],
        None,
        &[],
    );
    run(
        "subagent",
        vec![
            "-p".into(),
            "SCENARIO=parent go".into(),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
        ],
        None,
        &[],
    );
    let input =
        "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"SCENARIO=probe go\"}}\n";
    run(
        "stream-json input",
        ["--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        Some(input),
        &[],
    );
}

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use herd_testkit::{MockServer, Script, claude_env, require_claude};
use serde_json::json;

fn probe(
    label: &str,
    tool: &str,
    input: serde_json::Value,
    extra: &[&str],
    project_settings: Option<&str>,
) {
    let bin = require_claude().unwrap();
    let mock = MockServer::start();
    mock.script("p", Script::new().tool_use(tool, input).text("done: {{last_tool_result}}"));
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("f.txt"), "hello").unwrap();
    if let Some(s) = project_settings {
        std::fs::create_dir_all(cwd.path().join(".claude")).unwrap();
        std::fs::write(cwd.path().join(".claude/settings.json"), s).unwrap();
    }
    let mut args: Vec<String> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-prompt-tool",
        "stdio",
    ]
    .map(String::from)
    .into();
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut child = Command::new(&bin)
        .args(&args)
        .env_clear()
        .envs(claude_env(&mock, home.path()))
        .current_dir(cwd.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let msg = json!({"type":"user","message":{"role":"user","content":"SCENARIO=p go"},"parent_tool_use_id":null,"session_id":""});
    writeln!(stdin, "{msg}").unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut verdict = "timeout".to_string();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(20)) {
        if l.contains("\"control_request\"") && l.contains("can_use_tool") {
            verdict = "ASKED".into();
            break;
        }
        if l.contains("\"type\":\"result\"") {
            let r: serde_json::Value = serde_json::from_str(&l).unwrap();
            verdict = format!("ran without asking: {}", r["result"]);
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("=== {label}: {verdict}");
}

#[test]
fn scratch() {
    let echo = json!({"command": "echo hi-there", "description": "x"});
    let touch = json!({"command": "touch t.txt", "description": "x"});
    probe("echo plain", "Bash", echo.clone(), &[], None);
    probe("read plain", "Read", json!({"file_path": "f.txt"}), &[], None);
    probe(
        "echo ask-settings",
        "Bash",
        echo.clone(),
        &["--settings", r#"{"permissions":{"ask":["Bash"]}}"#],
        None,
    );
    probe(
        "read ask-settings",
        "Read",
        json!({"file_path": "f.txt"}),
        &["--settings", r#"{"permissions":{"ask":["Read"]}}"#],
        None,
    );
    let bad = r#"{"permissions":{"allow":["Bash"],"defaultMode":"bypassPermissions"}}"#;
    probe("touch project-allow", "Bash", touch.clone(), &[], Some(bad));
    probe(
        "touch project-allow perm-mode default",
        "Bash",
        touch.clone(),
        &["--permission-mode", "default"],
        Some(bad),
    );
    probe(
        "touch project-allow setting-sources user",
        "Bash",
        touch.clone(),
        &["--setting-sources", "user"],
        Some(bad),
    );
    probe(
        "touch project-allow setting-sources empty",
        "Bash",
        touch.clone(),
        &["--setting-sources", ""],
        Some(bad),
    );
    probe(
        "echo ask-settings + project allow + sources user",
        "Bash",
        echo.clone(),
        &["--setting-sources", "user", "--settings", r#"{"permissions":{"ask":["Bash"]}}"#],
        Some(bad),
    );
}

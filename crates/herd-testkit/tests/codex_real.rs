//! End-to-end: the real `codex exec --json` (found by `require_codex`) runs offline against the
//! mock's OpenAI Responses API. Each test has its own scenario name on the shared mock.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use herd_testkit::{Api, CODEX_MOCK_MODEL, MockServer, Script, codex_env, require_codex};
use serde_json::{Value, json};

struct Run {
    lines: Vec<Value>,
    stderr: String,
    code: Option<i32>,
    elapsed: Duration,
}

impl Run {
    fn of(out: Output, elapsed: Duration) -> Run {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines = stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSONL {l:?}: {e}")))
            .collect();
        Run {
            lines,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            code: out.status.code(),
            elapsed,
        }
    }

    fn of_type(&self, ty: &str) -> Vec<&Value> {
        self.lines.iter().filter(|l| l["type"] == ty).collect()
    }

    /// The single terminal event (`turn.completed` or `turn.failed`).
    fn terminal(&self) -> &Value {
        let t: Vec<&Value> = self
            .lines
            .iter()
            .filter(|l| l["type"] == "turn.completed" || l["type"] == "turn.failed")
            .collect();
        assert_eq!(t.len(), 1, "stderr: {}\n{:#?}", self.stderr, self.lines);
        t[0]
    }

    fn completed_items(&self, ty: &str) -> Vec<&Value> {
        self.lines
            .iter()
            .filter(|l| l["type"] == "item.completed" && l["item"]["type"] == ty)
            .map(|l| &l["item"])
            .collect()
    }
}

fn codex(bin: &Path, home: &Path, cwd: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env_clear().envs(codex_env(MockServer::shared(), home)).current_dir(cwd).stdin(Stdio::null());
    c
}

/// `codex exec --json --skip-git-repo-check <extra> -- "SCENARIO=<scenario> go"` in `cwd`.
fn run_codex(bin: &Path, cwd: &Path, scenario: &str, extra: &[&str]) -> Run {
    let home = tempfile::tempdir().expect("temp HOME");
    let started = Instant::now();
    let out = codex(bin, home.path(), cwd)
        .args(["exec", "--json", "--skip-git-repo-check"])
        .args(extra)
        .args(["--", &format!("SCENARIO={scenario} go")])
        .output()
        .expect("spawn codex");
    Run::of(out, started.elapsed())
}

#[test]
fn text_reply_completes_the_turn() {
    let Some(bin) = require_codex() else { return };
    let mock = MockServer::shared();
    mock.script("cx-text", Script::new().text("hello from the mock, scenario {{scenario}}"));
    let cwd = tempfile::tempdir().unwrap();
    let run = run_codex(&bin, cwd.path(), "cx-text", &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.lines[0]["type"], "thread.started");
    let messages = run.completed_items("agent_message");
    assert_eq!(messages.len(), 1, "{:#?}", run.lines);
    assert_eq!(messages[0]["text"], "hello from the mock, scenario cx-text");
    let done = run.terminal();
    assert_eq!(done["type"], "turn.completed");
    assert_eq!(done["usage"]["input_tokens"], 12);
    assert!(!run.stderr.contains("Refusing to create helper binaries"), "{}", run.stderr);

    let requests = mock.requests_for("cx-text");
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(
        (r.api, r.method.as_str(), r.path.as_str()),
        (Api::OpenAiResponses, "POST", "/v1/responses")
    );
    assert!(r.streaming);
    assert_eq!(r.body["model"], CODEX_MOCK_MODEL);
    assert_eq!(r.header("authorization"), Some("Bearer sk-mock"));
    assert_eq!(r.header("originator"), Some("codex_exec"));
    let tools: Vec<&str> =
        r.body["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(tools.contains(&"exec_command") && tools.contains(&"apply_patch"), "{tools:?}");
}

#[test]
fn shell_command_runs_and_the_model_sees_its_output() {
    let Some(bin) = require_codex() else { return };
    let mock = MockServer::shared();
    mock.script(
        "cx-bash",
        Script::new()
            .text_and_tool_use(
                "Calling exec.",
                "exec_command",
                json!({"cmd": "echo hello-from-bash"}),
            )
            .text("MOCK DONE last={{last_tool_result}}"),
    );
    let cwd = tempfile::tempdir().unwrap();
    let run = run_codex(&bin, cwd.path(), "cx-bash", &[]);
    assert_eq!(run.terminal()["type"], "turn.completed", "{:#?}", run.lines);
    let cmd = run.completed_items("command_execution");
    assert_eq!(cmd.len(), 1, "{:#?}", run.lines);
    assert_eq!(cmd[0]["command"], "/bin/bash -lc 'echo hello-from-bash'");
    assert_eq!(
        (cmd[0]["exit_code"].as_i64(), cmd[0]["status"].as_str()),
        (Some(0), Some("completed"))
    );
    assert_eq!(cmd[0]["aggregated_output"], "hello-from-bash\n");
    let started = run.of_type("item.started");
    assert_eq!(started.len(), 1);
    let texts = run.completed_items("agent_message");
    assert_eq!(texts[0]["text"], "Calling exec.");
    assert!(texts[1]["text"].as_str().unwrap().contains("hello-from-bash"));

    let requests = mock.requests_for("cx-bash");
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].assistant_turns(), 1);
    let input = requests[1].body["input"].as_array().unwrap();
    let call = input.iter().find(|i| i["type"] == "function_call").unwrap();
    assert_eq!(call["name"], "exec_command");
    let output = input.iter().find(|i| i["type"] == "function_call_output").unwrap();
    assert_eq!(output["call_id"], call["call_id"]);
    assert!(output["output"].as_str().unwrap().contains("hello-from-bash"));
}

#[test]
fn apply_patch_writes_a_file_in_workspace_write() {
    let Some(bin) = require_codex() else { return };
    let mock = MockServer::shared();
    let cwd = tempfile::tempdir().unwrap();
    let target = cwd.path().join("hello.txt");
    let patch = format!(
        "*** Begin Patch\n*** Add File: {}\n+hi from mock\n*** End Patch\n",
        target.display()
    );
    mock.script(
        "cx-patch",
        Script::new()
            .tool_use("apply_patch", json!(patch))
            .text("MOCK DONE last={{last_tool_result}}"),
    );
    let run = run_codex(&bin, cwd.path(), "cx-patch", &["--sandbox", "workspace-write"]);
    assert_eq!(run.terminal()["type"], "turn.completed", "{:#?}", run.lines);
    assert_eq!(std::fs::read_to_string(&target).ok().as_deref(), Some("hi from mock\n"));
    let change = run.completed_items("file_change");
    assert_eq!(change.len(), 1, "{:#?}", run.lines);
    assert_eq!(change[0]["status"], "completed");
    assert_eq!(change[0]["changes"][0]["kind"], "add");
    let input = mock.requests_for("cx-patch")[1].body["input"].clone();
    let out = input.as_array().unwrap().iter().find(|i| i["type"] == "custom_tool_call_output");
    assert!(
        out.is_some_and(|o| o["output"].as_str().unwrap_or("").contains("Success")),
        "{input:#}"
    );
}

#[test]
fn read_only_sandbox_refuses_writes() {
    let Some(bin) = require_codex() else { return };
    let mock = MockServer::shared();
    let cwd = tempfile::tempdir().unwrap();
    let target = cwd.path().join("touched.txt");
    mock.script(
        "cx-touch",
        Script::new()
            .tool_use("exec_command", json!({"cmd": format!("touch {}", target.display())}))
            .text("MOCK DONE last={{last_tool_result}}"),
    );
    let run = run_codex(&bin, cwd.path(), "cx-touch", &["--sandbox", "read-only"]);
    assert_eq!(run.terminal()["type"], "turn.completed");
    assert!(!target.exists());
    let last = run.completed_items("agent_message").last().unwrap()["text"].clone();
    assert!(last.as_str().unwrap().contains("Read-only file system"), "{last}");
}

#[test]
fn http_500_fails_the_turn_at_once() {
    let Some(bin) = require_codex() else { return };
    let mock = MockServer::shared();
    mock.script("cx-500", Script::new().error(500, "mock: forced 500"));
    let cwd = tempfile::tempdir().unwrap();
    let run = run_codex(&bin, cwd.path(), "cx-500", &[]);
    assert_eq!(run.code, Some(1));
    let failed = run.terminal();
    assert_eq!(failed["type"], "turn.failed");
    assert!(failed["error"]["message"].as_str().unwrap().contains("high demand"), "{failed}");
    assert_eq!(run.of_type("error").len(), 1);
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
    assert_eq!(mock.requests_for("cx-500").len(), 1, "no retries configured");
}

#[test]
fn resume_continues_the_thread_with_its_history() {
    let Some(bin) = require_codex() else { return };
    let mock = MockServer::shared();
    mock.script(
        "cx-resume",
        Script::new()
            .tool_use("exec_command", json!({"cmd": "echo first-turn"}))
            .text("first done")
            .text("second done: {{last_tool_result}}"),
    );
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let first = Run::of(
        codex(&bin, home.path(), cwd.path())
            .args(["exec", "--json", "--skip-git-repo-check", "--", "SCENARIO=cx-resume go"])
            .output()
            .unwrap(),
        Duration::ZERO,
    );
    let thread = first.lines[0]["thread_id"].as_str().unwrap().to_owned();
    let second = Run::of(
        codex(&bin, home.path(), cwd.path())
            .args([
                "exec",
                "--json",
                "--skip-git-repo-check",
                "resume",
                &thread,
                "--",
                "-follow up",
            ])
            .output()
            .unwrap(),
        Duration::ZERO,
    );
    assert_eq!(second.lines[0]["thread_id"], thread.as_str(), "{}", second.stderr);
    assert_eq!(second.terminal()["type"], "turn.completed");
    let text = second.completed_items("agent_message")[0]["text"].clone();
    assert!(text.as_str().unwrap().starts_with("second done: "), "{text}");
    assert!(text.as_str().unwrap().contains("first-turn"), "{text}");
    let last = mock.requests_for("cx-resume").pop().unwrap();
    assert_eq!(last.assistant_turns(), 2);
    let users: Vec<String> = last.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["role"] == "user")
        .map(|i| i["content"].to_string())
        .collect();
    assert!(users.last().unwrap().contains("-follow up"), "{users:?}");
}

#[test]
fn sigint_while_the_model_hangs_ends_without_a_terminal_event() {
    let Some(bin) = require_codex() else { return };
    let mock = MockServer::shared();
    mock.script("cx-hang", Script::new().text("too late").delay(Duration::from_secs(30)));
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let child = codex(&bin, home.path(), cwd.path())
        .args(["exec", "--json", "--skip-git-repo-check", "--", "SCENARIO=cx-hang go"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while mock.requests_for("cx-hang").is_empty() {
        assert!(Instant::now() < deadline, "codex never called the model");
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let run = Run::of(child.wait_with_output().unwrap(), started.elapsed());
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
    assert!(
        !run.lines.iter().any(|l| l["type"] == "turn.completed" || l["type"] == "turn.failed"),
        "{:#?}",
        run.lines
    );
    assert_ne!(run.code, Some(0));
}

/// Re-records `herd-backends/tests/fixtures/codex/recorded_run.jsonl`: one real run of 100
/// tool calls (text + `exec_command` each), then an answer.
/// `cargo test -p herd-testkit --test codex_real -- --ignored record`
#[test]
#[ignore = "re-records a herd-backends fixture"]
fn record_codex_stream() {
    let Some(bin) = require_codex() else { return };
    let mock = MockServer::shared();
    let mut script = Script::new();
    for i in 0..100 {
        script = script.text_and_tool_use(
            format!("Step {i}: listing."),
            "exec_command",
            json!({"cmd": format!("echo step-{i} && ls -a")}),
        );
    }
    mock.script("cx-record", script.text("All 100 steps done. Last: {{last_tool_result}}"));
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("README.md"), "fixture\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = codex(&bin, home.path(), cwd.path())
        .args(["exec", "--json", "--skip-git-repo-check", "--", "SCENARIO=cx-record go"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../herd-backends/tests/fixtures/codex/recorded_run.jsonl");
    std::fs::write(&dest, &out.stdout).unwrap();
    eprintln!(
        "wrote {} lines to {}",
        out.stdout.split(|&b| b == b'\n').count() - 1,
        dest.display()
    );
}

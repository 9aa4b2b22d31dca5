//! End-to-end: the real `gemini -p … -o stream-json` (found by `require_gemini`) runs offline
//! against the mock's Gemini API. Each test has its own scenario name on the shared mock.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use herd_testkit::{Api, MockServer, Script, gemini_env, require_gemini};
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

    fn result(&self) -> &Value {
        let r = self.of_type("result");
        assert_eq!(r.len(), 1, "stderr: {}\n{:#?}", self.stderr, self.lines);
        r[0]
    }

    /// The assistant text, deltas concatenated.
    fn assistant_text(&self) -> String {
        self.lines
            .iter()
            .filter(|l| l["type"] == "message" && l["role"] == "assistant")
            .filter_map(|l| l["content"].as_str())
            .collect()
    }
}

fn gemini(bin: &Path, home: &Path, cwd: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env_clear()
        .envs(gemini_env(MockServer::shared(), home))
        .current_dir(cwd)
        .stdin(Stdio::null());
    c
}

/// `gemini --prompt="SCENARIO=<scenario> go" -o stream-json <extra>` in `cwd`.
fn run_gemini(bin: &Path, cwd: &Path, scenario: &str, extra: &[&str]) -> Run {
    let home = tempfile::tempdir().expect("temp HOME");
    let started = Instant::now();
    let out = gemini(bin, home.path(), cwd)
        .args([&format!("--prompt=SCENARIO={scenario} go"), "-o", "stream-json"])
        .args(extra)
        .output()
        .expect("spawn gemini");
    Run::of(out, started.elapsed())
}

#[test]
fn text_reply_is_a_successful_result() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    mock.script("gm-text", Script::new().text("hello from the mock, scenario {{scenario}}"));
    let cwd = tempfile::tempdir().unwrap();
    let run = run_gemini(&bin, cwd.path(), "gm-text", &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.lines[0]["type"], "init");
    assert_eq!(run.lines[1]["role"], "user");
    assert_eq!(run.assistant_text(), "hello from the mock, scenario gm-text");
    let result = run.result();
    assert_eq!(result["status"], "success");
    assert!(result["stats"]["input_tokens"].as_u64().unwrap() > 0);

    // With model `auto` a router call comes first: one-shot, JSON schema, answered by the mock.
    let requests = mock.requests_for("gm-text");
    assert_eq!(requests.len(), 2, "{:?}", requests.iter().map(|r| &r.path).collect::<Vec<_>>());
    assert!(requests.iter().all(|r| r.api == Api::Gemini));
    assert!(!requests[0].streaming && requests[0].path.ends_with(":generateContent"));
    assert_eq!(requests[0].body["generationConfig"]["responseMimeType"], "application/json");
    assert!(requests[1].streaming && requests[1].path.ends_with(":streamGenerateContent"));
    assert_eq!(requests[1].query.as_deref(), Some("alt=sse"));
    assert_eq!(requests[1].header("x-goog-api-key"), Some("mock-key"));
}

#[test]
fn shell_tool_runs_in_yolo_mode() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    mock.script(
        "gm-bash",
        Script::new()
            .text_and_tool_use(
                "Calling run_shell_command.",
                "run_shell_command",
                json!({"command": "echo hello-from-bash", "description": "Print greeting"}),
            )
            .text("MOCK DONE last={{last_tool_result}}"),
    );
    let cwd = tempfile::tempdir().unwrap();
    let run = run_gemini(&bin, cwd.path(), "gm-bash", &["--approval-mode", "yolo"]);
    assert_eq!(run.result()["status"], "success", "{:#?}", run.lines);
    let tool_use = run.of_type("tool_use");
    assert_eq!(tool_use.len(), 1);
    assert_eq!(tool_use[0]["tool_name"], "run_shell_command");
    assert_eq!(tool_use[0]["parameters"]["command"], "echo hello-from-bash");
    let result = run.of_type("tool_result");
    assert_eq!(
        (result[0]["status"].as_str(), result[0]["output"].as_str()),
        (Some("success"), Some("hello-from-bash"))
    );
    assert_eq!(result[0]["tool_id"], tool_use[0]["tool_id"]);
    assert!(run.assistant_text().contains("Output: hello-from-bash"), "{}", run.assistant_text());

    let streamed: Vec<_> =
        mock.requests_for("gm-bash").into_iter().filter(|r| r.streaming).collect();
    assert_eq!(streamed.len(), 2);
    assert_eq!(streamed[1].assistant_turns(), 1);
    let response = streamed[1].body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap())
        .find_map(|p| p.get("functionResponse"))
        .cloned()
        .unwrap();
    assert_eq!(response["name"], "run_shell_command");
}

#[test]
fn write_file_creates_the_file_in_auto_edit() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    let cwd = tempfile::tempdir().unwrap();
    let target = cwd.path().join("hello.txt");
    mock.script(
        "gm-write",
        Script::new()
            .tool_use(
                "write_file",
                json!({"file_path": target.display().to_string(), "content": "hi from mock\n"}),
            )
            .text("MOCK DONE last={{last_tool_result}}"),
    );
    let run = run_gemini(&bin, cwd.path(), "gm-write", &["--approval-mode", "auto_edit"]);
    assert_eq!(run.result()["status"], "success", "{:#?}", run.lines);
    assert_eq!(std::fs::read_to_string(&target).ok().as_deref(), Some("hi from mock\n"));
    assert_eq!(run.of_type("tool_result")[0]["status"], "success");
}

#[test]
fn default_mode_removes_the_shell_unless_allowed() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    let cwd = tempfile::tempdir().unwrap();
    let touched = cwd.path().join("touched.txt");
    for (scenario, cmd) in [
        ("gm-noshell", "echo hi".to_owned()),
        ("gm-allowed", "echo hi".to_owned()),
        ("gm-policy", format!("touch {}", touched.display())),
    ] {
        mock.script(
            scenario,
            Script::new()
                .tool_use("run_shell_command", json!({"command": cmd, "description": "x"}))
                .text("MOCK DONE last={{last_tool_result}}"),
        );
    }
    let run = run_gemini(&bin, cwd.path(), "gm-noshell", &[]);
    let r = run.of_type("tool_result");
    assert_eq!(r[0]["status"], "error");
    assert_eq!(r[0]["error"]["type"], "tool_not_registered", "{:#?}", r[0]);

    let allow = ["--allowed-tools", "run_shell_command(echo)"];
    let run = run_gemini(&bin, cwd.path(), "gm-allowed", &allow);
    assert_eq!(run.of_type("tool_result")[0]["status"], "success", "{:#?}", run.lines);
    let run = run_gemini(&bin, cwd.path(), "gm-policy", &allow);
    let r = run.of_type("tool_result");
    assert_eq!(r[0]["error"]["type"], "policy_violation", "{:#?}", r[0]);
    assert!(!touched.exists());
}

#[test]
fn http_500_is_an_error_result_with_the_status_as_exit_code() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    mock.script("gm-500", Script::new().error(500, "mock: forced 500"));
    let cwd = tempfile::tempdir().unwrap();
    let run = run_gemini(&bin, cwd.path(), "gm-500", &[]);
    assert_eq!(run.code, Some(500 % 256));
    let result = run.result();
    assert_eq!(result["status"], "error");
    let message = result["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"code\":500") && message.contains("mock: forced 500"), "{message}");
    assert!(run.elapsed < Duration::from_secs(15), "{:?}", run.elapsed);
    assert_eq!(mock.requests_for("gm-500").iter().filter(|r| r.streaming).count(), 1);
}

/// A temporary directory gemini reads system settings from. It skips a file below a group- or
/// world-writable directory: "Security Warning: Skipping system settings file … Parent directory
/// '/tmp' is insecure" (measured). The target dir, unless the checkout is under /tmp; else a
/// directory in HOME's cache.
fn secure_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let secure = |p: &Path| {
        p.ancestors().all(|a| a.metadata().is_ok_and(|m| m.permissions().mode() & 0o022 == 0))
    };
    let home_cache = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache"));
    let candidates = [Some(Path::new(env!("CARGO_TARGET_TMPDIR")).to_path_buf()), home_cache];
    for dir in candidates.into_iter().flatten() {
        let _ = std::fs::create_dir_all(&dir);
        if let Ok(dir) = dir.canonicalize()
            && secure(&dir)
        {
            return tempfile::tempdir_in(dir).unwrap();
        }
    }
    panic!(
        "no directory gemini trusts for system settings: the target dir and ~/.cache are both below a group- or world-writable one"
    )
}

#[test]
fn turn_limit_from_system_settings_stops_the_run() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    let mut script = Script::new();
    for i in 0..10 {
        script = script.tool_use(
            "run_shell_command",
            json!({"command": format!("echo turn-{i}"), "description": "x"}),
        );
    }
    mock.script("gm-turns", script);
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let secure = secure_tempdir();
    let settings = secure.path().join("system-settings.json");
    std::fs::write(&settings, json!({"model": {"maxSessionTurns": 2}}).to_string()).unwrap();
    let out = gemini(&bin, home.path(), cwd.path())
        .env("GEMINI_CLI_SYSTEM_SETTINGS_PATH", &settings)
        .args(["--prompt=SCENARIO=gm-turns go", "-o", "stream-json", "--approval-mode", "yolo"])
        .output()
        .unwrap();
    let run = Run::of(out, Duration::ZERO);
    assert_eq!(run.code, Some(53), "{}", run.stderr);
    let result = run.result();
    assert_eq!(result["error"]["type"], "FatalTurnLimitedError", "{result}");
    assert_eq!(run.of_type("tool_use").len(), 2);
}

#[test]
fn resume_continues_the_session_with_its_history() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    mock.script("gm-resume", Script::new().text("first done").text("second done"));
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let first = Run::of(
        gemini(&bin, home.path(), cwd.path())
            .args(["--prompt=SCENARIO=gm-resume go", "-o", "stream-json"])
            .output()
            .unwrap(),
        Duration::ZERO,
    );
    let session = first.lines[0]["session_id"].as_str().unwrap().to_owned();
    let second = Run::of(
        gemini(&bin, home.path(), cwd.path())
            .args(["--prompt=-follow up", "-o", "stream-json", "--resume", &session])
            .output()
            .unwrap(),
        Duration::ZERO,
    );
    assert_eq!(second.lines[0]["session_id"], session.as_str(), "{}", second.stderr);
    assert_eq!(second.assistant_text(), "second done");
    let last = mock.requests_for("gm-resume").into_iter().rfind(|r| r.streaming).unwrap();
    assert_eq!(last.assistant_turns(), 1);
    assert!(last.body["contents"].to_string().contains("-follow up"));
}

#[test]
fn sigterm_while_the_model_hangs_exits_zero_without_a_result() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    mock.script("gm-hang", Script::new().text("too late").delay(Duration::from_secs(30)));
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let child = gemini(&bin, home.path(), cwd.path())
        .args(["--prompt=SCENARIO=gm-hang go", "-o", "stream-json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !mock.requests_for("gm-hang").iter().any(|r| r.streaming) {
        assert!(Instant::now() < deadline, "gemini never called the model");
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let run = Run::of(child.wait_with_output().unwrap(), started.elapsed());
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
    assert!(run.of_type("result").is_empty(), "{:#?}", run.lines);
    // protocols.md §3.5: rc 0 although nothing finished — never trust the exit code alone.
    assert_eq!(run.code, Some(0));
}

/// Re-records `herd-backends/tests/fixtures/gemini/recorded_run.jsonl`: one real yolo run of
/// 120 shell calls (every tenth with a line of text), then an answer. The text varies: gemini
/// stops a run whose assistant text repeats ("Loop detected, stopping execution").
/// `cargo test -p herd-testkit --test gemini_real -- --ignored record`
#[test]
#[ignore = "re-records a herd-backends fixture"]
fn record_gemini_stream() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    let mut script = Script::new();
    const WORDS: [&str; 12] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliet", "kilo", "lima",
    ];
    for i in 0..120 {
        let input = json!({"command": format!("echo step-{i} && ls -a"), "description": format!("Step {i}")});
        script = if i % 10 == 0 {
            let text = format!("Batch {} begins with {}.", i / 10, WORDS[i / 10]);
            script.text_and_tool_use(text, "run_shell_command", input)
        } else {
            script.tool_use("run_shell_command", input)
        };
    }
    mock.script("gm-record", script.text("All 120 steps done. Last: {{last_tool_result}}"));
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("README.md"), "fixture\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = gemini(&bin, home.path(), cwd.path())
        .args(["--prompt=SCENARIO=gm-record go", "-o", "stream-json", "--approval-mode", "yolo"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for r in mock.requests_for("gm-record").iter().filter(|r| !r.streaming) {
        eprintln!("side call {}: {}", r.path, r.body["generationConfig"]);
    }
    let dest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../herd-backends/tests/fixtures/gemini/recorded_run.jsonl");
    std::fs::write(&dest, &out.stdout).unwrap();
    eprintln!(
        "wrote {} lines to {}",
        out.stdout.split(|&b| b == b'\n').count() - 1,
        dest.display()
    );
}

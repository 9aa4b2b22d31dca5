//! End-to-end: real ACP agents (`gemini --acp`, `codex-acp`, `claude-code-acp`) on stdio, their
//! model the mock, driven by herd-backends' sans-IO `AcpClient`: prompt, permission round trips
//! (allow and deny), cancel, end on stdin EOF.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use herd_backends::acp::{self, AcpClient, AcpConfig, PERMISSION_METHOD};
use herd_backends::{Decoder, PermissionAnswer, PermissionRequest};
use herd_core::{AgentEvent, ResultInfo, ResultKind};
use herd_testkit::{
    MockServer, Script, claude_env, codex_env, gemini_env, require_claude_code_acp,
    require_codex_acp, require_gemini,
};
use serde_json::json;

/// One agent process, its own process group (the npm launchers start a native child).
struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    _home: tempfile::TempDir,
}

impl Agent {
    fn spawn(
        bin: &Path,
        args: &[String],
        env: Vec<(String, String)>,
        home: tempfile::TempDir,
        cwd: &Path,
    ) -> Agent {
        let mut child = Command::new(bin)
            .process_group(0)
            .args(args)
            .env_clear()
            .envs(env)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn agent");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Agent { child, stdin, lines: rx, _home: home }
    }

    fn write(&mut self, bytes: &[u8], transcript: &mut Vec<String>) {
        if bytes.is_empty() {
            return;
        }
        for l in String::from_utf8_lossy(bytes).lines() {
            transcript.push(format!("> {l}"));
        }
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin and waits up to `limit` for the process to exit by itself.
    fn close_and_wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        drop(self.stdin.take());
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Agent {
    /// SIGTERM to the agent's process group; waits up to `limit` for it to exit.
    fn terminate_group(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A run driven to its result.
struct Driven {
    agent: Agent,
    client: AcpClient,
    transcript: Vec<String>,
    events: Vec<AgentEvent>,
    requests: Vec<PermissionRequest>,
    result: ResultInfo,
}

impl Driven {
    fn tool_calls(&self) -> Vec<(&str, &serde_json::Value)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolCall { name, input, .. } => Some((name.as_str(), input)),
                _ => None,
            })
            .collect()
    }

    fn tool_results(&self) -> Vec<(&str, bool)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolResult { content, is_error, .. } => {
                    Some((content.as_str(), *is_error))
                }
                _ => None,
            })
            .collect()
    }
}

/// Starts `bin args` and drives it with an `AcpClient` until the prompt's result; each
/// permission request is answered by `decide`. `on_line` sees each stdout line first (for
/// cancelling mid-run).
fn drive(
    bin: &Path,
    args: &[String],
    env: Vec<(String, String)>,
    home: tempfile::TempDir,
    config: AcpConfig,
    decide: &mut dyn FnMut(&PermissionRequest) -> PermissionAnswer,
    on_tick: &mut dyn FnMut(&mut AcpClient) -> Vec<u8>,
) -> Driven {
    let cwd = PathBuf::from(&config.cwd);
    let mut agent = Agent::spawn(bin, args, env, home, &cwd);
    let mut client = AcpClient::new(config);
    let mut transcript = Vec::new();
    let (mut events, mut requests) = (Vec::new(), Vec::new());
    let start = client.start();
    agent.write(&start, &mut transcript);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let line = match agent.lines.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("agent closed stdout:\n{}", transcript.join("\n"))
            }
        };
        assert!(Instant::now() < deadline, "no result in time:\n{}", transcript.join("\n"));
        let extra = on_tick(&mut client);
        agent.write(&extra, &mut transcript);
        let Some(line) = line else { continue };
        transcript.push(format!("< {line}"));
        let mut out = Vec::new();
        client.decode(line.as_bytes(), &mut out);
        let mut answers = Vec::new();
        for d in &out {
            if let Some(req) = acp::permission_request(&d.event) {
                let answer = decide(&req);
                answers.extend(client.answer(&req.request_id, &answer).expect("pending request"));
                requests.push(req);
            }
        }
        let mut bytes = client.take_stdin();
        bytes.extend(answers);
        agent.write(&bytes, &mut transcript);
        let result = out.iter().find_map(|d| match &d.event {
            AgentEvent::Result(r) => Some(r.clone()),
            _ => None,
        });
        events.extend(out.into_iter().map(|d| d.event));
        if let Some(result) = result {
            return Driven { agent, client, transcript, events, requests, result };
        }
    }
}

fn allow(req: &PermissionRequest) -> PermissionAnswer {
    PermissionAnswer::Allow { input: req.input.clone() }
}

fn deny(_: &PermissionRequest) -> PermissionAnswer {
    PermissionAnswer::Deny { message: "denied by the test".into() }
}

fn no_tick(_: &mut AcpClient) -> Vec<u8> {
    Vec::new()
}

fn config(cwd: &Path, scenario: &str) -> AcpConfig {
    AcpConfig::new(cwd.display().to_string(), format!("SCENARIO={scenario} go"))
}

fn touch_script(tool: &str, cwd: &Path, extra: serde_json::Value) -> Script {
    let mut input = json!({format!("{}", if tool == "exec_command" { "cmd" } else { "command" }): format!("touch {}", cwd.join("touched.txt").display())});
    if let (Some(m), Some(e)) = (input.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    Script::new().tool_use(tool, input).text("MOCK DONE last={{last_tool_result}}")
}

#[test]
fn gemini_acp_asks_before_the_shell_allow_and_deny() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    for (scenario, answer) in
        [("ga-allow", allow as fn(&PermissionRequest) -> PermissionAnswer), ("ga-deny", deny)]
    {
        let cwd = tempfile::tempdir().unwrap();
        mock.script(
            scenario,
            touch_script(
                "run_shell_command",
                cwd.path(),
                json!({"description": "Create empty file"}),
            ),
        );
        let home = tempfile::tempdir().unwrap();
        let env = gemini_env(mock, home.path());
        let mut d = drive(
            &bin,
            &acp::AcpAgent::Gemini.args(),
            env,
            home,
            config(cwd.path(), scenario),
            &mut |r| answer(r),
            &mut no_tick,
        );
        let log = d.transcript.join("\n");
        assert_eq!(d.result.subtype, ResultKind::Success, "{log}");
        assert_eq!(d.requests.len(), 1, "{log}");
        let req = &d.requests[0];
        assert_eq!(
            (req.tool.claude.as_str(), req.tool.native.as_str()),
            ("Bash", "run_shell_command")
        );
        assert_eq!(
            req.input["command"],
            format!("touch {}", cwd.path().join("touched.txt").display())
        );
        assert_eq!(
            req.options.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
            ["proceed_always", "proceed_once", "cancel"]
        );
        let touched = cwd.path().join("touched.txt").exists();
        let text = d.result.text.clone().unwrap_or_default();
        if scenario == "ga-allow" {
            assert!(touched, "{log}");
            assert!(log.contains("\"optionId\":\"proceed_once\""));
            assert_eq!(d.tool_results(), [("", false)]);
        } else {
            assert!(!touched, "{log}");
            assert!(log.contains("\"optionId\":\"cancel\""));
            assert!(text.contains("was canceled by the user"), "{text}");
        }
        assert_eq!(d.tool_calls().len(), 1);
        assert!(d.client.session_id().is_some());
        // The agent ends when herd closes its stdin.
        assert!(
            d.agent.close_and_wait(Duration::from_secs(10)).is_some(),
            "gemini --acp stayed after EOF"
        );
    }
}

#[test]
fn codex_acp_asks_for_escalated_commands_and_patches() {
    let Some(bin) = require_codex_acp() else { return };
    let mock = MockServer::shared();
    let cases = [("ca-allow", true, false), ("ca-deny", false, false), ("ca-patch", true, true)];
    for (scenario, allowed, patch) in cases {
        let cwd = tempfile::tempdir().unwrap();
        let script = if patch {
            let p = format!(
                "*** Begin Patch\n*** Add File: {}\n+hi from mock\n*** End Patch\n",
                cwd.path().join("hello.txt").display()
            );
            Script::new()
                .tool_use("apply_patch", json!(p))
                .text("MOCK DONE last={{last_tool_result}}")
        } else {
            // codex asks only for a command that wants out of its sandbox.
            touch_script(
                "exec_command",
                cwd.path(),
                json!({"sandbox_permissions": "require_escalated", "justification": "The test needs a file"}),
            )
        };
        mock.script(scenario, script);
        let home = tempfile::tempdir().unwrap();
        let env = codex_env(mock, home.path());
        let decide = if allowed { allow } else { deny };
        let mut d = drive(
            &bin,
            &acp::AcpAgent::CodexAcp.args(),
            env,
            home,
            config(cwd.path(), scenario),
            &mut |r| decide(r),
            &mut no_tick,
        );
        let log = d.transcript.join("\n");
        // codex-acp offers no "deny and go on": its reject option `abort` ("No, and tell Codex
        // what to do differently") ends the turn, `stopReason: "cancelled"` (measured).
        if allowed {
            assert_eq!(d.result.subtype, ResultKind::Success, "{log}");
        } else {
            assert_eq!(d.result.terminal_reason.as_deref(), Some("cancelled"), "{log}");
            assert!(log.contains("\"optionId\":\"abort\""), "{log}");
        }
        assert_eq!(d.requests.len(), 1, "{log}");
        let req = &d.requests[0];
        let kinds: Vec<&str> = req.options.iter().map(|o| o.kind.as_str()).collect();
        assert!(
            kinds.contains(&"allow_once") && kinds.contains(&"reject_once"),
            "{:?}",
            req.options
        );
        if patch {
            assert_eq!(req.tool.claude, "Edit");
            assert_eq!(req.input["file_path"], cwd.path().join("hello.txt").display().to_string());
            assert_eq!(
                std::fs::read_to_string(cwd.path().join("hello.txt")).ok().as_deref(),
                Some("hi from mock\n")
            );
        } else {
            assert_eq!(req.tool.claude, "Bash");
            assert_eq!(
                req.input["command"],
                format!("touch {}", cwd.path().join("touched.txt").display())
            );
            assert_eq!(cwd.path().join("touched.txt").exists(), allowed, "{log}");
        }
        // codex-acp 0.16.0 does not exit on stdin EOF (measured: still there after 15 s); its
        // process group takes SIGTERM (the npm launcher alone would leave the native child).
        assert!(
            d.agent.close_and_wait(Duration::from_secs(2)).is_none(),
            "codex-acp now exits on EOF"
        );
        assert!(
            d.agent.terminate_group(Duration::from_secs(10)).is_some(),
            "codex-acp ignored SIGTERM"
        );
    }
}

#[test]
fn claude_code_acp_asks_before_bash() {
    let Some(bin) = require_claude_code_acp() else { return };
    let mock = MockServer::shared();
    let cwd = tempfile::tempdir().unwrap();
    mock.script(
        "cc-allow",
        touch_script("Bash", cwd.path(), json!({"description": "Create empty file"})),
    );
    let home = tempfile::tempdir().unwrap();
    let env = claude_env(mock, home.path());
    let mut d = drive(
        &bin,
        &acp::AcpAgent::ClaudeCodeAcp.args(),
        env,
        home,
        config(cwd.path(), "cc-allow"),
        &mut allow,
        &mut no_tick,
    );
    let log = d.transcript.join("\n");
    assert_eq!(d.result.subtype, ResultKind::Success, "{log}");
    assert_eq!(d.requests.len(), 1, "{log}");
    assert_eq!(d.requests[0].tool.native, "Bash");
    assert!(cwd.path().join("touched.txt").exists(), "{log}");
    // Announced twice (first without input): the call is reported again with its input.
    let calls = d.tool_calls();
    assert!(
        calls
            .last()
            .is_some_and(|(n, i)| *n == "Bash"
                && i["command"].as_str().is_some_and(|c| c.starts_with("touch "))),
        "{calls:?}"
    );
    // Like codex-acp, claude-code-acp 0.16.2 does not exit on stdin EOF; SIGTERM ends it.
    assert!(
        d.agent.close_and_wait(Duration::from_secs(2)).is_none(),
        "claude-code-acp now exits on EOF"
    );
    assert!(
        d.agent.terminate_group(Duration::from_secs(10)).is_some(),
        "claude-code-acp ignored SIGTERM"
    );
}

/// `session/cancel` while the model hangs: the prompt ends with `stopReason: "cancelled"`.
fn cancel_while_hanging(
    bin: &Path,
    agent: acp::AcpAgent,
    env_of: fn(&MockServer, &Path) -> Vec<(String, String)>,
    scenario: &str,
) -> Driven {
    let mock = MockServer::shared();
    mock.script(scenario, Script::new().text("too late").delay(Duration::from_secs(60)));
    let cwd = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let env = env_of(mock, home.path());
    let mut sent = false;
    let started = Instant::now();
    let d = drive(
        bin,
        &agent.args(),
        env,
        home,
        config(cwd.path(), scenario),
        &mut allow,
        &mut |client| {
            let asked = mock.requests_for(scenario).iter().any(|r| r.streaming);
            if asked && !sent {
                sent = true;
                return client.cancel();
            }
            Vec::new()
        },
    );
    assert!(sent);
    assert!(started.elapsed() < Duration::from_secs(30), "cancel took {:?}", started.elapsed());
    d
}

#[test]
fn session_cancel_ends_the_prompt_gracefully() {
    if let Some(bin) = require_gemini() {
        let d = cancel_while_hanging(&bin, acp::AcpAgent::Gemini, gemini_env, "ga-cancel");
        assert_eq!(
            d.result.terminal_reason.as_deref(),
            Some("cancelled"),
            "{}",
            d.transcript.join("\n")
        );
        assert!(d.result.is_error);
    }
    if let Some(bin) = require_codex_acp() {
        let d = cancel_while_hanging(&bin, acp::AcpAgent::CodexAcp, codex_env, "ca-cancel");
        assert_eq!(
            d.result.terminal_reason.as_deref(),
            Some("cancelled"),
            "{}",
            d.transcript.join("\n")
        );
    }
}

#[test]
fn gemini_acp_api_error_fails_the_prompt() {
    let Some(bin) = require_gemini() else { return };
    let mock = MockServer::shared();
    mock.script("ga-500", Script::new().error(500, "mock: forced 500"));
    let cwd = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let env = gemini_env(mock, home.path());
    let d = drive(
        &bin,
        &acp::AcpAgent::Gemini.args(),
        env,
        home,
        config(cwd.path(), "ga-500"),
        &mut allow,
        &mut no_tick,
    );
    let log = d.transcript.join("\n");
    // gemini answers `session/prompt` with a JSON-RPC error whose code is the HTTP status.
    assert!(d.result.is_error, "{log}");
    assert_eq!(d.result.api_error_status, Some(500), "{log}");
    assert!(log.contains("\"error\":{\"code\":500"), "{log}");
}

/// Re-records the ACP transcripts under `herd-backends/tests/fixtures/acp/`: each agent's
/// allow round trip (`> ` written, `< ` read), and a long gemini `--acp` run (80 shell calls,
/// each asked and allowed) for the decode benchmarks.
/// `cargo test -p herd-testkit --test acp_real -- --ignored record`
#[test]
#[ignore = "re-records herd-backends fixtures"]
fn record_acp_transcripts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../herd-backends/tests/fixtures/acp");
    let mock = MockServer::shared();
    let save = |name: &str, d: &Driven| {
        std::fs::write(dir.join(name), d.transcript.join("\n") + "\n").unwrap();
        eprintln!("wrote {} lines to {name}", d.transcript.len());
    };
    if let Some(bin) = require_gemini() {
        let cwd = tempfile::tempdir().unwrap();
        mock.script(
            "rec-ga",
            touch_script(
                "run_shell_command",
                cwd.path(),
                json!({"description": "Create empty file"}),
            ),
        );
        let home = tempfile::tempdir().unwrap();
        let env = gemini_env(mock, home.path());
        save(
            "gemini_allow.txt",
            &drive(
                &bin,
                &acp::AcpAgent::Gemini.args(),
                env,
                home,
                config(cwd.path(), "rec-ga"),
                &mut allow,
                &mut no_tick,
            ),
        );

        let mut script = Script::new();
        for i in 0..80 {
            let input = json!({"command": format!("echo step-{i} > out-{i}.txt"), "description": format!("Step {i}")});
            script = if i % 10 == 0 {
                script.text_and_tool_use(
                    format!("Batch {} starts.", i / 10),
                    "run_shell_command",
                    input,
                )
            } else {
                script.tool_use("run_shell_command", input)
            };
        }
        mock.script("rec-ga-long", script.text("All 80 steps done."));
        let cwd = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let env = gemini_env(mock, home.path());
        save(
            "gemini_long_run.txt",
            &drive(
                &bin,
                &acp::AcpAgent::Gemini.args(),
                env,
                home,
                config(cwd.path(), "rec-ga-long"),
                &mut allow,
                &mut no_tick,
            ),
        );
    }
    if let Some(bin) = require_codex_acp() {
        let cwd = tempfile::tempdir().unwrap();
        mock.script("rec-ca", touch_script("exec_command", cwd.path(), json!({"sandbox_permissions": "require_escalated", "justification": "The test needs a file"})));
        let home = tempfile::tempdir().unwrap();
        let env = codex_env(mock, home.path());
        save(
            "codex_acp_allow.txt",
            &drive(
                &bin,
                &acp::AcpAgent::CodexAcp.args(),
                env,
                home,
                config(cwd.path(), "rec-ca"),
                &mut allow,
                &mut no_tick,
            ),
        );
    }
    if let Some(bin) = require_claude_code_acp() {
        let cwd = tempfile::tempdir().unwrap();
        mock.script(
            "rec-cc",
            touch_script("Bash", cwd.path(), json!({"description": "Create empty file"})),
        );
        let home = tempfile::tempdir().unwrap();
        let env = claude_env(mock, home.path());
        save(
            "claude_code_acp_allow.txt",
            &drive(
                &bin,
                &acp::AcpAgent::ClaudeCodeAcp.args(),
                env,
                home,
                config(cwd.path(), "rec-cc"),
                &mut allow,
                &mut no_tick,
            ),
        );
    }
    let _ = PERMISSION_METHOD;
}

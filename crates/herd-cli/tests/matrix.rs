//! The acceptance matrix: the same runs through `herd task` on every agent CLI herd drives, each
//! the real pinned binary offline against the testkit mock (claude, codex exec, gemini --acp,
//! and claude-code-acp / codex-acp as ACP agents): a tool call writing a file, max turns, an
//! API error, a timeout that leaves nothing alive, and permission requests answered by a deny
//! rule, an allow rule and a person.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{World, procs_in, procs_with_cmdline, wait_until};
use herd_testkit::{AgentCli, MockServer, Script};
use serde_json::{Value, json};

/// One column of the matrix: how `herd task` selects the CLI and how its model calls tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cli {
    Claude,
    Codex,
    Gemini,
    /// `--cli acp -- claude-code-acp`.
    ClaudeCodeAcp,
    /// `--cli acp -- codex-acp`: codex with a permission round trip.
    CodexAcp,
}

impl Cli {
    fn agent(self) -> AgentCli {
        match self {
            Cli::Claude => AgentCli::Claude,
            Cli::Codex => AgentCli::Codex,
            Cli::Gemini => AgentCli::Gemini,
            Cli::ClaudeCodeAcp => AgentCli::ClaudeCodeAcp,
            Cli::CodexAcp => AgentCli::CodexAcp,
        }
    }

    /// `--cli …` (an ACP agent's program comes last, after `--`).
    fn select(self) -> Vec<&'static str> {
        match self {
            Cli::Claude => vec!["--cli", "claude"],
            Cli::Codex => vec!["--cli", "codex"],
            Cli::Gemini => vec!["--cli", "gemini"],
            Cli::ClaudeCodeAcp => vec!["--cli", "acp", "--", "claude-code-acp"],
            Cli::CodexAcp => vec!["--cli", "acp", "--", "codex-acp"],
        }
    }

    /// A model turn running `command` in the CLI's shell tool. codex-acp asks only for a
    /// command that wants out of codex's own sandbox.
    fn shell(self, script: Script, command: &str) -> Script {
        match self {
            Cli::Claude | Cli::ClaudeCodeAcp => {
                script.tool_use("Bash", json!({"command": command, "description": "step"}))
            }
            Cli::Gemini => script
                .tool_use("run_shell_command", json!({"command": command, "description": "step"})),
            Cli::Codex => script.tool_use("exec_command", json!({"cmd": command})),
            Cli::CodexAcp => script.tool_use(
                "exec_command",
                json!({"cmd": command, "sandbox_permissions": "require_escalated", "justification": "the test"}),
            ),
        }
    }

    /// A model turn writing `content` to `path` with the CLI's file-writing tool.
    fn write(self, script: Script, path: &Path, content: &str) -> Script {
        match self {
            Cli::Claude | Cli::ClaudeCodeAcp => {
                script.tool_use("Write", json!({"file_path": path, "content": content}))
            }
            Cli::Gemini => {
                script.tool_use("write_file", json!({"file_path": path, "content": content}))
            }
            Cli::Codex | Cli::CodexAcp => {
                let body: String = content.lines().map(|l| format!("+{l}\n")).collect();
                let patch = format!(
                    "*** Begin Patch\n*** Add File: {}\n{body}*** End Patch\n",
                    path.display()
                );
                script.tool_use("apply_patch", json!(patch))
            }
        }
    }

    /// Whether the CLI reports tokens. claude-code-acp 0.16.2 reports no usage at all;
    /// codex-acp 0.16.0 only how full the context window is (`usage_update {used, size}`), not
    /// tokens spent: herd invents none.
    fn reports_tokens(self) -> bool {
        matches!(self, Cli::Claude | Cli::Codex | Cli::Gemini)
    }

    /// Whether the CLI reports a cost (claude does; the others report tokens only).
    fn reports_cost(self) -> bool {
        self == Cli::Claude
    }
}

/// The real binary for `cli`, or `None` when it is missing and HERD_SKIP_REAL_CLIS=1.
fn require(cli: Cli) -> Option<PathBuf> {
    cli.agent().require()
}

/// `herd ARGS` in `w` with every CLI's offline environment and binary.
fn offline(w: &World, args: &[&str]) -> Command {
    let mock = MockServer::shared();
    let mut c = w.herd(args);
    c.envs(herd_testkit::codex_env(mock, &w.home))
        .envs(herd_testkit::gemini_env(mock, &w.home))
        .envs(herd_testkit::claude_code_acp_env(mock, &w.home));
    for a in AgentCli::ALL {
        if let Some(bin) = a.find() {
            c.env(a.override_var(), bin);
        }
    }
    c
}

/// `herd ARGS --cli …` for `cli` in `w`.
fn herd(w: &World, cli: Cli, args: &[&str]) -> Command {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(cli.select());
    offline(w, &all)
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn task(w: &World, cli: Cli, args: &[&str]) -> (i32, Value) {
    let out = herd(w, cli, &[&["task"][..], args, &["--json"]].concat()).output().unwrap();
    (out.status.code().unwrap_or(-1), json_of(&out))
}

fn decisions(w: &World, id: &str) -> Vec<Value> {
    w.audit(id).into_iter().filter(|r| r["event_type"] == "permission_decision").collect()
}

/// What the CLI printed (its stream, then its stderr), for a failing assertion's message.
fn log(w: &World, v: &Value) -> String {
    let id = v["id"].as_str().unwrap_or("?");
    let read = |ext: &str| {
        std::fs::read_to_string(w.state.join(format!("transcripts/{id}.{ext}"))).unwrap_or_default()
    };
    format!("{v}\n--- stream:\n{}\n--- stderr:\n{}", read("jsonl"), read("stderr.log"))
}

fn scenario(cli: Cli, what: &str) -> String {
    format!("mx_{cli:?}_{what}").to_lowercase()
}

fn success_with_a_written_file(cli: Cli) {
    if require(cli).is_none() {
        return;
    }
    let w = World::new();
    let s = scenario(cli, "write");
    let target = w.work.join("hello.txt");
    MockServer::shared().script(
        &s,
        cli.write(Script::new(), &target, "hi from herd\n").text("done: {{last_tool_result}}"),
    );
    let (code, v) =
        task(&w, cli, &[&format!("SCENARIO={s} go"), "--allow", "Write", "--allow", "Edit"]);
    assert_eq!(v["status"], "completed", "{}", log(&w, &v));
    assert_eq!(code, 0, "{v}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hi from herd\n");
    assert!(v["result"].as_str().unwrap().starts_with("done: "), "{v}");
    let tokens = v["usage"]["input_tokens"].as_u64().unwrap();
    assert_eq!(tokens > 0, cli.reports_tokens(), "{v}");
    assert_eq!(v["cost_usd"].is_number(), cli.reports_cost(), "{v}");
    let id = v["id"].as_str().unwrap();
    let kinds = w.kinds(id);
    for k in ["subagent_started", "tool_call", "tool_result", "result", "subagent_completed"] {
        assert!(kinds.iter().any(|x| x == k), "{cli:?}: no {k} in {kinds:?}");
    }
    // The transcript holds the CLI's own stream.
    let transcript =
        std::fs::read_to_string(w.state.join(format!("transcripts/{id}.jsonl"))).unwrap();
    assert!(transcript.lines().count() >= 3, "{transcript}");
    assert!(procs_in(&w.work).is_empty(), "{:?}", procs_in(&w.work));
}

fn max_turns(cli: Cli) {
    if require(cli).is_none() {
        return;
    }
    let w = World::new();
    let s = scenario(cli, "maxturns");
    // A tool that takes as long as a short real one: the mock answers at once, and herd (which
    // stops a CLI with no limit of its own when it sees a turn too many start) needs more than
    // the microseconds an `echo` leaves it on a loaded machine to stop the next request.
    MockServer::shared().script(&s, cli.shell(Script::new(), "sleep 0.5; echo again").forever());
    let (code, v) = task(
        &w,
        cli,
        &[&format!("SCENARIO={s} go"), "--allow", "Bash", "--max-turns", "2", "--timeout", "90s"],
    );
    assert_eq!(v["failure_reason"], "max_turns", "{}", log(&w, &v));
    assert_eq!(code, 1, "{v}");
    // The model was not asked a fourth time.
    let asked = MockServer::shared().requests_for(&s).iter().filter(|r| r.streaming).count();
    assert!(asked <= 3, "{cli:?}: {asked} model turns\n{}", log(&w, &v));
    assert!(procs_in(&w.work).is_empty(), "{:?}", procs_in(&w.work));
}

fn api_error(cli: Cli) {
    if require(cli).is_none() {
        return;
    }
    let w = World::new();
    let s = scenario(cli, "500");
    MockServer::shared().script(&s, Script::new().error(500, "mock: forced 500"));
    let start = Instant::now();
    let mut c = herd(&w, cli, &["task", &format!("SCENARIO={s} go"), "--timeout", "90s", "--json"]);
    if cli == Cli::Codex {
        // The person's own codex configuration (its provider retries nothing), not the
        // provider herd defines from OPENAI_BASE_URL (codex's five retries: 25 s).
        c.env_remove("OPENAI_BASE_URL");
    }
    let out = c.output().unwrap();
    let (code, v) = (out.status.code().unwrap_or(-1), json_of(&out));
    let reason = v["failure_reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("api_error"), "{cli:?}: {}", log(&w, &v));
    assert!(start.elapsed() < Duration::from_secs(40), "{cli:?} took {:?}", start.elapsed());
    assert_eq!(code, 1, "{v}");
    assert!(procs_in(&w.work).is_empty(), "{:?}", procs_in(&w.work));
}

fn timeout_leaves_nothing(cli: Cli, secs: &str) {
    if require(cli).is_none() {
        return;
    }
    let w = World::new();
    let s = scenario(cli, "timeout");
    let sleep = format!("sleep {secs}");
    MockServer::shared().script(&s, cli.shell(Script::new(), &sleep).text("woke"));
    let start = Instant::now();
    let (code, v) =
        task(&w, cli, &[&format!("SCENARIO={s} go"), "--allow", "Bash", "--timeout", "4s"]);
    assert_eq!(v["failure_reason"], "timeout", "{}", log(&w, &v));
    assert_eq!(code, 3, "{v}");
    assert!(start.elapsed() < Duration::from_secs(40), "{cli:?} took {:?}", start.elapsed());
    let gone = wait_until(Duration::from_secs(5), || {
        procs_with_cmdline(&sleep).is_empty() && procs_in(&w.work).is_empty()
    });
    assert!(gone, "{cli:?} left {:?} {:?}", procs_with_cmdline(&sleep), procs_in(&w.work));
    // The tool did start (the test proves the stop, not an early failure).
    let kinds = w.kinds(v["id"].as_str().unwrap());
    assert!(kinds.iter().any(|k| k == "tool_call"), "{cli:?}: {kinds:?}");
}

/// A deny rule refuses the call, an allow rule runs it; both audited in Claude's vocabulary
/// with the CLI's own tool name beside it.
fn rules_answer_requests(cli: Cli) {
    if require(cli).is_none() {
        return;
    }
    let w = World::new();
    for (what, rule) in [("deny", "--deny"), ("allow", "--allow")] {
        let s = scenario(cli, what);
        let made = w.work.join(format!("{what}.txt"));
        let cmd = format!("touch {}", made.display());
        MockServer::shared()
            .script(&s, cli.shell(Script::new(), &cmd).text("done: {{last_tool_result}}"));
        let (code, v) = task(
            &w,
            cli,
            &[&format!("SCENARIO={s} go"), rule, "Bash(touch *)", "--permission-timeout", "5s"],
        );
        let id = v["id"].as_str().unwrap();
        assert_eq!(made.exists(), what == "allow", "{cli:?} {what}: {}", log(&w, &v));
        let d = decisions(&w, id);
        assert_eq!(d.len(), 1, "{cli:?} {what}: {d:#?}");
        assert_eq!(d[0]["decision"], what, "{d:#?}");
        assert_eq!(d[0]["tool"], "Bash", "{d:#?}");
        assert!(d[0]["decided_by"].as_str().unwrap().contains(&format!("{what} rule")), "{d:#?}");
        if what == "allow" {
            assert_eq!(code, 0, "{v}");
        }
        // The CLI's own name beside Claude's, where they differ (codex-acp names no tool: its
        // ACP `kind`).
        let native = match cli {
            Cli::Gemini => json!("run_shell_command"),
            Cli::CodexAcp => json!("execute"),
            _ => Value::Null,
        };
        assert_eq!(d[0]["details"]["cli_tool"], native, "{d:#?}");
    }
}

/// No rule decides: the call waits for a person, who allows it with `herd approve`.
fn a_person_approves(cli: Cli) {
    if require(cli).is_none() {
        return;
    }
    let w = World::new();
    let s = scenario(cli, "approve");
    let made = w.work.join("approved.txt");
    let cmd = format!("touch {}", made.display());
    MockServer::shared()
        .script(&s, cli.shell(Script::new(), &cmd).text("done: {{last_tool_result}}"));
    let child = herd(
        &w,
        cli,
        &[
            "task",
            &format!("SCENARIO={s} go"),
            "--permission-timeout",
            "60s",
            "--wait-for-approval",
            "--json",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut request = None;
    let asked = wait_until(Duration::from_secs(60), || {
        let (_, v) = w.json(&["approve", "--json"]);
        request =
            v.as_array().and_then(|a| a.first()).and_then(|r| r["id"].as_str()).map(str::to_owned);
        request.is_some()
    });
    assert!(asked, "{cli:?}: no pending request");
    assert!(!made.exists(), "{cli:?}: the call ran before anyone approved it");
    let out = w.run(&["approve", &request.unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = child.wait_with_output().unwrap();
    let v = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert!(made.exists(), "{cli:?}");
    let d = decisions(&w, v["id"].as_str().unwrap());
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(d[0]["decided_by"].as_str().unwrap().starts_with("a person"), "{d:#?}");
}

macro_rules! matrix {
    ($($name:ident: $cli:expr, $sleep:literal;)*) => {
        $(
            mod $name {
                use super::*;

                #[test]
                fn success_with_a_written_file() {
                    super::success_with_a_written_file($cli);
                }

                #[test]
                fn max_turns() {
                    super::max_turns($cli);
                }

                #[test]
                fn api_error() {
                    super::api_error($cli);
                }

                #[test]
                fn timeout_leaves_nothing() {
                    super::timeout_leaves_nothing($cli, $sleep);
                }
            }
        )*
    };
}

matrix! {
    claude: Cli::Claude, "71.01";
    codex: Cli::Codex, "71.02";
    gemini: Cli::Gemini, "71.03";
    claude_code_acp: Cli::ClaudeCodeAcp, "71.04";
    codex_acp: Cli::CodexAcp, "71.05";
}

/// The CLIs whose route carries permission requests to herd's gate.
macro_rules! asking {
    ($($name:ident: $cli:expr;)*) => {
        $(
            mod $name {
                use super::*;

                #[test]
                fn rules_answer_requests() {
                    super::rules_answer_requests($cli);
                }

                #[test]
                fn a_person_approves() {
                    super::a_person_approves($cli);
                }
            }
        )*
    };
}

asking! {
    claude_asks: Cli::Claude;
    gemini_asks: Cli::Gemini;
    claude_code_acp_asks: Cli::ClaudeCodeAcp;
    codex_acp_asks: Cli::CodexAcp;
}

/// `codex exec` never asks: herd's rules become its sandbox (`read-only` unless a rule allows a
/// tool that writes), `--explain` says so, and its calls are audited as observed.
#[test]
fn codex_exec_maps_rules_onto_its_sandbox() {
    let cli = Cli::Codex;
    if require(cli).is_none() {
        return;
    }
    let w = World::new();
    for (what, rule, writable) in [("ro", "--deny", false), ("rw", "--allow", true)] {
        let s = scenario(cli, what);
        let made = w.work.join(format!("{what}.txt"));
        let cmd = format!("touch {}", made.display());
        MockServer::shared()
            .script(&s, cli.shell(Script::new(), &cmd).text("done: {{last_tool_result}}"));
        let out = herd(
            &w,
            cli,
            &["task", &format!("SCENARIO={s} go"), rule, "Bash(touch *)", "--explain", "--json"],
        )
        .output()
        .unwrap();
        let v = json_of(&out);
        assert_eq!(v["status"], "completed", "{}", log(&w, &v));
        assert_eq!(made.exists(), writable, "{what}: {}", log(&w, &v));
        let explain = String::from_utf8_lossy(&out.stderr);
        let mapped = if writable { "workspace-write" } else { "read-only" };
        assert!(
            explain.contains("codex exec never asks for permission")
                && explain.contains(&format!("its sandbox {mapped}")),
            "{explain}"
        );
        let rows = w.audit(v["id"].as_str().unwrap());
        assert!(decisions(&w, v["id"].as_str().unwrap()).is_empty(), "{rows:#?}");
        if writable {
            let seen = rows.iter().find(|r| r["event_type"] == "tool_call_observed");
            let seen = seen.unwrap_or_else(|| panic!("{rows:#?}"));
            assert_eq!(seen["tool"], "Bash");
            assert_eq!(seen["details"]["cli_tool"], "command_execution", "{seen}");
            assert!(seen["input_preview"].as_str().unwrap().contains(&cmd), "{seen}");
        }
    }
}

/// One plan on three CLIs: claude's result reaches codex, both reach gemini, and gemini's
/// reaches an ACP agent; each step's model call carries its dependencies' results.
#[test]
fn a_plan_mixing_clis_passes_results_downstream() {
    for cli in [Cli::Claude, Cli::Codex, Cli::Gemini, Cli::ClaudeCodeAcp] {
        if require(cli).is_none() {
            return;
        }
    }
    let w = World::new();
    let mock = MockServer::shared();
    mock.script("mx_plan_a", Script::new().text("alpha-from-claude"));
    mock.script("mx_plan_b", Script::new().text("beta-from-codex"));
    mock.script("mx_plan_c", Script::new().text("gamma-from-gemini"));
    mock.script("mx_plan_d", Script::new().text("delta-from-acp"));
    let plan = "name: mixed\n\
        defaults: {timeout: 90s}\n\
        steps:\n\
        \x20 - {id: a, cli: claude, prompt: \"SCENARIO=mx_plan_a go\"}\n\
        \x20 - {id: b, cli: codex, prompt: \"SCENARIO=mx_plan_b go\", depends_on: [a]}\n\
        \x20 - {id: c, cli: gemini, prompt: \"SCENARIO=mx_plan_c go\", depends_on: [a, b]}\n\
        \x20 - {id: d, cli: acp, acp: {command: [claude-code-acp]}, prompt: \"SCENARIO=mx_plan_d go\", depends_on: [c]}\n";
    std::fs::write(w.work.join("mixed.yml"), plan).unwrap();
    let out = offline(&w, &["run", "mixed.yml", "--json"]).output().unwrap();
    let v = json_of(&out);
    assert_eq!(v["status"], "completed", "{v}\n{}", String::from_utf8_lossy(&out.stderr));
    let step =
        |id: &str| v["steps"].as_array().unwrap().iter().find(|s| s["id"] == id).unwrap().clone();
    for (id, cli) in [("a", "claude"), ("b", "codex"), ("c", "gemini"), ("d", "acp")] {
        assert_eq!(step(id)["status"], "completed", "{id}: {v}");
        let run = w.json(&["show", step(id)["subagent_id"].as_str().unwrap(), "--json"]).1;
        assert_eq!(run["cli"], cli, "{id}: {run}");
    }
    let body = |s: &str| {
        mock.requests_for(s).iter().map(|r| r.body.to_string()).collect::<Vec<_>>().join("\n")
    };
    assert!(body("mx_plan_b").contains("alpha-from-claude"), "{}", body("mx_plan_b"));
    let c_body = body("mx_plan_c");
    assert!(c_body.contains("alpha-from-claude") && c_body.contains("beta-from-codex"), "{c_body}");
    assert!(body("mx_plan_d").contains("gamma-from-gemini"), "{}", body("mx_plan_d"));
}

/// A Codex TOML agent and a Gemini Markdown agent, imported with `herd agents import`, run on
/// their own CLIs with their instructions and model.
#[test]
fn imported_codex_and_gemini_agents_run_on_their_own_clis() {
    for cli in [Cli::Codex, Cli::Gemini] {
        if require(cli).is_none() {
            return;
        }
    }
    let w = World::new();
    let put = |rel: &str, text: &str| {
        let p = w.work.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    put(
        ".codex/agents/reviewer.toml",
        "name = \"reviewer\"\ndescription = \"Reviews\"\nmodel = \"gpt-5.4\"\n\
         developer_instructions = \"\"\"\nReview like an owner: mx-codex-instructions.\n\"\"\"\n",
    );
    put(
        ".gemini/agents/auditor.md",
        "---\nname: auditor\ndescription: Audits\nkind: local\ntools: [read_file, grep_search]\n\
         model: gemini-2.5-pro\n---\nYou are a ruthless auditor: mx-gemini-instructions.\n",
    );
    for from in ["codex", "gemini"] {
        let out = offline(&w, &["agents", "import", "--from", from]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let mock = MockServer::shared();
    for (agent, cli, s, instructions, model) in [
        ("reviewer", "codex", "mx_agent_codex", "mx-codex-instructions", "gpt-5.4"),
        ("auditor", "gemini", "mx_agent_gemini", "mx-gemini-instructions", "gemini-2.5-pro"),
    ] {
        mock.script(s, Script::new().text(format!("{agent} done")));
        let out = offline(
            &w,
            &["task", &format!("SCENARIO={s} go"), "--agent", agent, "--explain", "--json"],
        )
        .output()
        .unwrap();
        let v = json_of(&out);
        assert_eq!(v["status"], "completed", "{}", log(&w, &v));
        assert_eq!(v["cli"], cli, "{v}");
        assert_eq!(v["result"], format!("{agent} done"));
        let explain = String::from_utf8_lossy(&out.stderr);
        assert!(explain.contains(&format!("cli {cli}")), "{explain}");
        let reqs = mock.requests_for(s);
        let streamed: Vec<_> = reqs.iter().filter(|r| r.streaming).collect();
        assert!(!streamed.is_empty(), "{agent}: no model call");
        let body = streamed[0].body.to_string();
        assert!(body.contains(instructions), "{agent}: {body}");
        let path = &streamed[0].path;
        assert!(body.contains(model) || path.contains(model), "{agent} {path}: {body}");
    }
}

/// Claude's tool names mean the same on gemini: `--tools` leaves gemini without the others
/// (its own policy refuses them) and a Read rule binds gemini's `read_file`, which gemini would
/// otherwise run without asking.
#[test]
fn gemini_follows_tools_and_read_rules() {
    let cli = Cli::Gemini;
    if require(cli).is_none() {
        return;
    }
    let w = World::new();
    std::fs::create_dir_all(w.work.join("secret")).unwrap();
    std::fs::write(w.work.join("secret/key.txt"), "hunter2\n").unwrap();
    std::fs::write(w.work.join("notes.txt"), "plain notes\n").unwrap();
    let read = |p: &Path| json!({"absolute_path": p, "file_path": p});
    let mock = MockServer::shared();
    mock.script(
        "mx_gemini_tools",
        Script::new()
            .tool_use("read_file", read(&w.work.join("notes.txt")))
            .text("got: {{last_tool_result}}"),
    );
    let (_, v) = task(&w, cli, &["SCENARIO=mx_gemini_tools go", "--tools", "Bash,Write"]);
    let result = v["result"].as_str().unwrap_or_default();
    // Removed from gemini's registry, as --tools removes a tool from claude.
    assert!(result.contains("\\\"read_file\\\" not found in registry"), "{}", log(&w, &v));
    assert!(!result.contains("plain notes"), "{result}");
    // gemini refused it itself: herd was never asked.
    assert!(decisions(&w, v["id"].as_str().unwrap()).is_empty());

    mock.script(
        "mx_gemini_read",
        Script::new()
            .tool_use("read_file", read(&w.work.join("secret/key.txt")))
            .tool_use("read_file", read(&w.work.join("notes.txt")))
            .text("got: {{last_tool_result}}"),
    );
    let (code, v) = task(
        &w,
        cli,
        &["SCENARIO=mx_gemini_read go", "--deny", "Read(*/secret/*)", "--allow", "Read"],
    );
    assert_eq!(code, 0, "{}", log(&w, &v));
    let d = decisions(&w, v["id"].as_str().unwrap());
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_eq!((d[0]["decision"].as_str(), d[0]["tool"].as_str()), (Some("deny"), Some("Read")));
    assert_eq!(d[0]["details"]["cli_tool"], "read_file");
    assert_eq!(d[1]["decision"], "allow", "{d:#?}");
    let bodies: String =
        mock.requests_for("mx_gemini_read").iter().map(|r| r.body.to_string()).collect();
    assert!(!bodies.contains("hunter2"), "the denied file reached the model");
    assert!(v["result"].as_str().unwrap().contains("plain notes"), "{v}");
}

/// `herd task --resume` continues the CLI's own session: codex `exec resume`, and ACP
/// `session/load` (gemini, claude-code-acp, codex-acp); the model sees the earlier turns.
fn resume_continues_the_native_session(cli: Cli) {
    if require(cli).is_none() {
        return;
    }
    let w = World::new();
    let s = scenario(cli, "resume");
    MockServer::shared()
        .script(&s, Script::new().text("first-answer").text("second-answer after {{scenario}}"));
    let (code, first) = task(&w, cli, &[&format!("SCENARIO={s} start")]);
    assert_eq!(code, 0, "{}", log(&w, &first));
    let id = first["id"].as_str().unwrap();
    if cli == Cli::Gemini {
        // gemini 0.61.0 names a session's file by the minute it started and its id: a
        // session/load within that minute starts a recording of the same name over it and then
        // finds nothing to load (measured). A person resumes later; the test waits.
        let now = || {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
                as u64
        };
        // The run has completed: now is at or after its end.
        let next = (now() / 60_000 + 1) * 60_000 + 500;
        std::thread::sleep(Duration::from_millis(next.saturating_sub(now())));
    }
    // A resumed run takes its CLI from the run it continues: no --cli.
    let out = offline(&w, &["task", "and now?", "--resume", &id[..10], "--json"]).output().unwrap();
    let second = json_of(&out);
    assert_eq!(second["status"], "completed", "{}", log(&w, &second));
    assert_eq!(second["result"], format!("second-answer after {s}"), "{second}");
    assert_eq!(second["native_session_id"], first["native_session_id"]);
    let reqs = MockServer::shared().requests_for(&s);
    let last = reqs.iter().rfind(|r| r.streaming).unwrap().body.to_string();
    assert!(last.contains("first-answer") && last.contains("and now?"), "{cli:?}: {last}");
    // Natively: the earlier turns came from the CLI's session, not from herd's replay.
    assert!(!last.contains("herd:context"), "{cli:?}: {last}");
}

#[test]
fn resume_codex() {
    resume_continues_the_native_session(Cli::Codex);
}

#[test]
fn resume_gemini() {
    resume_continues_the_native_session(Cli::Gemini);
}

#[test]
fn resume_claude_code_acp() {
    resume_continues_the_native_session(Cli::ClaudeCodeAcp);
}

#[test]
fn resume_codex_acp() {
    resume_continues_the_native_session(Cli::CodexAcp);
}

/// `herd doctor` finds every pinned CLI at its tested version, says how a run selects it, and
/// lists the project's ACP agents with whether their program is there.
#[test]
fn doctor_reports_every_cli_and_the_projects_acp_agents() {
    for a in AgentCli::ALL {
        if a.require().is_none() {
            return;
        }
    }
    let w = World::new();
    std::fs::create_dir_all(w.work.join(".herd/agents")).unwrap();
    std::fs::write(
        w.work.join(".herd/agents/ghost.yml"),
        "description: x\ncli: acp\nacp: {command: [no-such-acp-agent]}\n",
    )
    .unwrap();
    let out = offline(&w, &["doctor", "--json"]).output().unwrap();
    let v = json_of(&out);
    let clis = v["clis"].as_array().unwrap();
    for a in AgentCli::ALL {
        let c = clis.iter().find(|c| c["name"] == a.binary()).unwrap_or_else(|| panic!("{v}"));
        let tested = a.pin().1;
        assert_eq!(c["tested_version"], tested, "{c}");
        assert!(c["version"].as_str().unwrap().contains(tested), "{c}");
        assert_eq!(c["problem"], Value::Null, "{c}");
        assert_eq!(c["runnable"], true, "{c}");
    }
    let gemini = clis.iter().find(|c| c["name"] == "gemini").unwrap();
    assert_eq!(gemini["asks_permission"], true);
    let codex = clis.iter().find(|c| c["name"] == "codex").unwrap();
    assert_eq!(codex["asks_permission"], false);
    assert_eq!(
        v["acp_agents"],
        json!([{"agent": "ghost", "program": "no-such-acp-agent", "runnable": false}])
    );
    let text =
        String::from_utf8_lossy(&offline(&w, &["doctor"]).output().unwrap().stdout).into_owned();
    assert!(text.contains("runnable: --cli acp -- codex-acp"), "{text}");
    assert!(text.contains("agent ghost: ACP agent `no-such-acp-agent`, not runnable"), "{text}");
}

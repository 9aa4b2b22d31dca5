//! The Claude Code backend: `claude -p` with stream-json in and out (protocols.md §1).
//! Argv building, the stdin messages (prompt, interrupt), and the verdict; decoding is in `decode`.

mod decode;

pub use decode::ClaudeDecoder;

use herd_core::{AgentEvent, FailureReason, ResultInfo, ResultKind};
use serde_json::{Value, json};

use std::path::Path;

use crate::{
    Backend, BackendError, BackendKind, Decoder, Exit, Invocation, Launch, PermissionAnswer,
    PermissionRequest, PermissionRoute, RunSpec, ToolName, Verdict,
};

/// The Claude Code version herd was tested with.
pub const TESTED_VERSION: &str = "2.1.197";

/// The variable that overrides the binary's location.
pub const PROGRAM_OVERRIDE_VAR: &str = "HERD_CLAUDE_BIN";

/// Prefixes of the variables claude needs passed through (its key and base URL, its own
/// settings variables).
pub const ENV_PREFIXES: &[&str] = &["ANTHROPIC_", "CLAUDE_CODE_", "DISABLE_"];

/// What under `~/.claude` configures claude (hooks, permission rules, MCP servers) or holds
/// code or instructions it runs. The two settings files get an empty placeholder directory when
/// missing: to claude (measured, 2.1.197) an empty directory is no configuration.
pub const PROTECTED_STATE: &[(&str, bool)] = &[
    ("settings.json", true),
    ("settings.local.json", true),
    ("CLAUDE.md", false),
    ("agents", false),
    ("commands", false),
    ("skills", false),
    ("plugins", false),
    ("hooks", false),
];

/// Claude Code (`@anthropic-ai/claude-code`).
#[derive(Debug, Clone, Copy)]
pub struct Claude;

impl Backend for Claude {
    fn kind(&self) -> BackendKind {
        BackendKind::Claude
    }

    fn fixed_program(&self) -> Option<(&'static str, &'static str)> {
        Some(("claude", PROGRAM_OVERRIDE_VAR))
    }

    fn invocation(&self, spec: &RunSpec, launch: &Launch<'_>) -> Result<Invocation, BackendError> {
        let program = self.program(spec, launch.var("PATH"), launch.override_bin)?;
        Ok(Invocation { program, args: args(spec) })
    }

    fn env_prefixes(&self, _spec: &RunSpec) -> &'static [&'static str] {
        ENV_PREFIXES
    }

    fn home_state(&self, _spec: &RunSpec) -> &'static [&'static str] {
        // Measured on 2.1.197: sessions, transcripts and shell snapshots under ~/.claude, and
        // its credentials' refresh there (a lock directory, a file renamed into place).
        // `~/.claude.json` it rewrites by a temporary file renamed over it, which would need
        // HOME itself writable; without that it goes on (checked) and keeps its changes in
        // memory, so that file (its MCP servers among them) stays read-only.
        &[".claude"]
    }

    fn protected_state(&self, _spec: &RunSpec) -> &'static [(&'static str, bool)] {
        PROTECTED_STATE
    }

    fn enforces_max_turns(&self) -> bool {
        true
    }

    fn resumes_natively(&self, _spec: &RunSpec) -> bool {
        true
    }

    fn permission_route(&self, _spec: &RunSpec, _confined: bool) -> PermissionRoute {
        PermissionRoute::Asks("claude's permission bridge (--permission-prompt-tool stdio)")
    }

    fn builtin_tools(&self) -> &'static [&'static str] {
        BUILTIN_TOOLS
    }

    fn tool_name(&self, normalised: &str) -> String {
        claude_tool_name(normalised, None)
    }

    fn initial_stdin(&self, spec: &RunSpec) -> Vec<u8> {
        user_message(&spec.prompt)
    }

    fn holds_stdin(&self) -> bool {
        true
    }

    fn follow_up(&self, text: &str) -> Option<Vec<u8>> {
        Some(user_message(text))
    }

    fn interrupt_message(&self) -> Option<Vec<u8>> {
        let mut m = serde_json::to_vec(&json!({
            "type": "control_request",
            "request_id": "herd_interrupt",
            "request": {"subtype": "interrupt"},
        }))
        .unwrap_or_default();
        m.push(b'\n');
        Some(m)
    }

    fn permission_request(&self, ev: &AgentEvent) -> Option<PermissionRequest> {
        permission_request(ev)
    }

    fn permission_answer(&self, request_id: &str, answer: &PermissionAnswer) -> Option<Vec<u8>> {
        // `updatedInput` is mandatory on allow, and never `updatedPermissions`: with the
        // localSettings destination claude writes rules into the user's repository.
        let response = match answer {
            PermissionAnswer::Allow { input } => {
                json!({"behavior": "allow", "updatedInput": input})
            }
            PermissionAnswer::Deny { message } => json!({"behavior": "deny", "message": message}),
        };
        let mut m = serde_json::to_vec(&json!({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_id, "response": response},
        }))
        .unwrap_or_default();
        m.push(b'\n');
        Some(m)
    }

    fn decoder(&self, _spec: &RunSpec, _cwd: &Path) -> Box<dyn Decoder> {
        Box::new(ClaudeDecoder::default())
    }

    fn verdict(&self, result: Option<&ResultInfo>, exit: Exit) -> Verdict {
        verdict(result, exit)
    }
}

/// The argv after the program name.
pub fn args(spec: &RunSpec) -> Vec<String> {
    let mut a: Vec<String> =
        ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
            .map(String::from)
            .into();
    let mut opt = |flag: &str, value: String| {
        a.push(flag.to_owned());
        a.push(value);
    };
    if let Some(m) = &spec.model {
        opt("--model", m.clone());
    }
    if let Some(n) = spec.max_turns {
        opt("--max-turns", n.to_string());
    }
    if let Some(t) = &spec.tools {
        opt("--tools", t.join(","));
    }
    // Every call claude would ask about comes to herd's permission gate, which applies the
    // allow / deny / ask rules, hooks and auto-approve limits and audits each decision. No rule
    // is pre-approved on claude's command line: a pre-approved call would bypass the gate.
    opt("--permission-prompt-tool", "stdio".into());
    // A `defaultMode` in the user's or the repository's settings (acceptEdits, bypassPermissions)
    // must not take calls away from the gate.
    opt("--permission-mode", "default".into());
    // What a repository brings does not load unless the project trusts it: its
    // `.claude/settings*.json` (hooks run even when every call is denied; permission rules) and
    // its `.mcp.json` servers. The user's own settings still apply (measured on 2.1.197: with
    // `--setting-sources user` a repository's SessionStart and PreToolUse hooks do not run).
    if !spec.trust_project_settings {
        opt("--setting-sources", "user".into());
    }
    // `ask` rules in the settings layer of the command line outrank allow rules from any other
    // settings file and claude's own read-only shortcuts (measured on 2.1.197: `echo` and Read
    // then ask too).
    // Only tools this claude has: a rule for another name is useless to it and makes it warn
    // on every run (`Permission ask rule "MultiEdit" matches no known tool`).
    let names: Vec<String> = spec
        .ask_first
        .iter()
        .map(|t| claude_tool_name(t, spec.tools.as_deref()))
        .filter(|t| knows_tool(t, spec.tools.as_deref()))
        .collect();
    if !names.is_empty() {
        opt("--settings", json!({"permissions": {"ask": names}}).to_string());
    }
    if let Some(p) = &spec.append_system_prompt {
        opt("--append-system-prompt", p.clone());
    }
    if let Some(r) = &spec.resume {
        opt("--resume", r.clone());
    }
    if !spec.trust_project_settings {
        a.push("--strict-mcp-config".into());
    }
    a
}

/// claude's built-in tools herd names by default (2.1.197 has each; `Task` is the older name
/// of `Agent`, still accepted). 2.1.197 has no `MultiEdit`.
pub const BUILTIN_TOOLS: &[&str] = &[
    "Agent",
    "Bash",
    "Edit",
    "Glob",
    "Grep",
    "NotebookEdit",
    "Read",
    "Task",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
    "Write",
];

/// Every tool name claude 2.1.197 takes in a permission rule without a warning (measured:
/// its init line's tools and the ones its rules also accept; `MultiEdit`, `NotebookRead` and
/// `LS` are warned about as matching no known tool).
const KNOWN_TOOLS: &[&str] = &[
    "Agent",
    "AskUserQuestion",
    "Bash",
    "BashOutput",
    "CronCreate",
    "CronDelete",
    "CronList",
    "Edit",
    "EnterPlanMode",
    "EnterWorktree",
    "ExitPlanMode",
    "ExitWorktree",
    "Glob",
    "Grep",
    "KillShell",
    "ListMcpResourcesTool",
    "LSP",
    "NotebookEdit",
    "Read",
    "ReportFindings",
    "ScheduleWakeup",
    "SendMessage",
    "Skill",
    "Task",
    "TaskCreate",
    "TaskGet",
    "TaskList",
    "TaskOutput",
    "TaskStop",
    "TaskUpdate",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
    "Workflow",
    "Write",
];

/// Whether this claude has tool `name` (as claude spells it): a known one, an MCP server's, or
/// one the run's own `--tools` names.
fn knows_tool(name: &str, tools: Option<&[String]>) -> bool {
    KNOWN_TOOLS.contains(&name)
        || name.starts_with("mcp__")
        || tools.is_some_and(|t| t.iter().any(|x| x == name))
}

/// A normalised tool name as claude spells it: a built-in's casing, else the spelling in the
/// run's `--tools`, else as given (MCP tools are `mcp__server__tool`).
fn claude_tool_name(normalised: &str, tools: Option<&[String]>) -> String {
    BUILTIN_TOOLS
        .iter()
        .map(|t| (*t).to_owned())
        .chain(tools.unwrap_or_default().iter().cloned())
        .find(|t| t.eq_ignore_ascii_case(normalised))
        .unwrap_or_else(|| normalised.to_owned())
}

/// The tool call in a `control_request` of subtype `can_use_tool` (protocols.md §1.2): claude's
/// names are herd's vocabulary already; `agent_id` is set inside claude's own subagents.
pub fn permission_request(ev: &AgentEvent) -> Option<PermissionRequest> {
    let AgentEvent::ControlRequest { request_id, subtype, request } = ev else { return None };
    if subtype != "can_use_tool" {
        return None;
    }
    let s = |k: &str| request.get(k).and_then(Value::as_str).map(str::to_owned);
    let tool = s("tool_name")?;
    Some(PermissionRequest {
        request_id: request_id.clone(),
        tool: ToolName { claude: tool.clone(), native: tool },
        input: request.get("input").cloned().unwrap_or(Value::Object(Default::default())),
        tool_use_id: s("tool_use_id"),
        agent_id: s("agent_id"),
        title: s("description"),
        options: Vec::new(),
    })
}

/// A stream-json user message carrying `text`, newline-terminated.
pub fn user_message(text: &str) -> Vec<u8> {
    let mut m = serde_json::to_vec(&json!({
        "type": "user",
        "message": {"role": "user", "content": text},
        "parent_tool_use_id": null,
        "session_id": "",
    }))
    .unwrap_or_default();
    m.push(b'\n');
    m
}

fn verdict(result: Option<&ResultInfo>, exit: Exit) -> Verdict {
    let Some(r) = result else {
        return Verdict::Failed(FailureReason::NoResult {
            exit_code: match exit {
                Exit::Code(c) => Some(c),
                Exit::Signal(_) => None,
            },
        });
    };
    let message =
        || r.text.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| r.errors.join("; "));
    match (&r.subtype, r.is_error) {
        (ResultKind::Success, false) => Verdict::Completed,
        (ResultKind::ErrorMaxTurns, _) => Verdict::Failed(FailureReason::MaxTurns),
        _ if r.api_error_status.is_some() => Verdict::Failed(FailureReason::ApiError {
            status: r.api_error_status,
            message: message(),
        }),
        (ResultKind::Success, true) => {
            Verdict::Failed(FailureReason::ApiError { status: None, message: message() })
        }
        _ => Verdict::Failed(FailureReason::AgentError { message: message() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_maps_the_vocabulary() {
        let spec = RunSpec {
            prompt: "p".into(),
            model: Some("sonnet".into()),
            tools: Some(vec!["Bash".into(), "Read".into()]),
            allow: vec!["Bash(cargo test *)".into(), "Write".into()],
            deny: vec!["Bash(rm *)".into()],
            max_turns: Some(3),
            append_system_prompt: Some("be brief".into()),
            resume: Some("abc".into()),
            replay_prompt: None,
            command: vec![],
            ask_first: vec!["bash".into(), "mcp__srv__do".into()],
            trust_project_settings: false,
        };
        assert_eq!(
            args(&spec).join(" "),
            "-p --input-format stream-json --output-format stream-json --verbose --model sonnet \
             --max-turns 3 --tools Bash,Read --permission-prompt-tool stdio \
             --permission-mode default --setting-sources user \
             --settings {\"permissions\":{\"ask\":[\"Bash\",\"mcp__srv__do\"]}} \
             --append-system-prompt be brief --resume abc --strict-mcp-config"
        );
        // Nothing to ask about: no settings layer.
        let plain = RunSpec { ask_first: vec![], ..spec.clone() };
        assert!(!args(&plain).contains(&"--settings".to_owned()));
        // Names this claude has not: left out (it would warn on every run).
        let unknown = RunSpec {
            ask_first: vec!["multiedit".into(), "bash".into(), "ls".into()],
            tools: None,
            ..spec.clone()
        };
        let a = args(&unknown);
        let at = a.iter().position(|x| x == "--settings").unwrap();
        assert_eq!(a[at + 1], r#"{"permissions":{"ask":["Bash"]}}"#);
        // A project that trusts its own settings gets them (and its MCP servers) loaded.
        let trusted = RunSpec { trust_project_settings: true, ..spec };
        let a = args(&trusted);
        assert!(!a.contains(&"--setting-sources".to_owned()), "{a:?}");
        assert!(!a.contains(&"--strict-mcp-config".to_owned()), "{a:?}");
    }

    #[test]
    fn can_use_tool_requests_become_permission_requests() {
        // protocols.md §1.2, verbatim (main agent, then inside a subagent).
        let lines = [
            r#"{"type":"control_request","request_id":"b8d0165a-4935-4cfe-829c-f031b49b8f12","request":{"subtype":"can_use_tool","tool_name":"Bash","display_name":"Bash","input":{"command":"rm -rf /repo/nonexistent-dir","description":"Delete a dir"},"description":"Delete a dir","permission_suggestions":[],"blocked_path":"/repo/nonexistent-dir","tool_use_id":"toolu_mock_rm_0"}}"#,
            r#"{"type":"control_request","request_id":"867f2255-6ca0-4267-8e84-03250aad3ef7","request":{"subtype":"can_use_tool","tool_name":"Bash","display_name":"Bash","input":{"command":"touch /repo/sub-touched.txt","description":"Sub touch"},"description":"Sub touch","permission_suggestions":[],"blocked_path":"/repo/sub-touched.txt","tool_use_id":"toolu_mock_subtouch_0","agent_id":"a29fd4f515bcc2ae7"}}"#,
        ];
        let mut decoder = Claude.decoder(&RunSpec::default(), Path::new("/"));
        let mut out = Vec::new();
        for l in lines {
            decoder.decode(l.as_bytes(), &mut out);
        }
        let reqs: Vec<PermissionRequest> =
            out.iter().filter_map(|d| Claude.permission_request(&d.event)).collect();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].request_id, "b8d0165a-4935-4cfe-829c-f031b49b8f12");
        assert_eq!(reqs[0].tool, ToolName { claude: "Bash".into(), native: "Bash".into() });
        assert_eq!(reqs[0].input["command"], "rm -rf /repo/nonexistent-dir");
        assert_eq!(reqs[0].tool_use_id.as_deref(), Some("toolu_mock_rm_0"));
        assert_eq!(
            (reqs[0].agent_id.as_deref(), reqs[0].title.as_deref()),
            (None, Some("Delete a dir"))
        );
        assert_eq!(reqs[1].agent_id.as_deref(), Some("a29fd4f515bcc2ae7"));

        // The answer is the same control_response as `permission_answer`.
        let allow = PermissionAnswer::Allow { input: reqs[0].input.clone() };
        assert_eq!(
            Claude.answer_permission(&reqs[0], &allow),
            Claude.permission_answer(&reqs[0].request_id, &allow)
        );

        // Not a tool call, or no tool name: no request.
        let other = AgentEvent::ControlRequest {
            request_id: "r".into(),
            subtype: "hook_callback".into(),
            request: json!({"tool_name": "Bash"}),
        };
        assert!(Claude.permission_request(&other).is_none());
        let nameless = AgentEvent::ControlRequest {
            request_id: "r".into(),
            subtype: "can_use_tool".into(),
            request: json!({"input": {}}),
        };
        assert!(Claude.permission_request(&nameless).is_none());
        assert!(Claude.permission_request(&AgentEvent::Text { text: "x".into() }).is_none());
    }

    #[test]
    fn stdin_messages_are_single_json_lines() {
        let m = user_message("hello \"there\"\nline two");
        assert_eq!(m.iter().filter(|&&b| b == b'\n').count(), 1);
        let v: serde_json::Value = serde_json::from_slice(&m).unwrap();
        assert_eq!(v["message"]["content"], "hello \"there\"\nline two");
        let i = Claude.interrupt_message().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&i).unwrap();
        assert_eq!(v["request"]["subtype"], "interrupt");
    }
}

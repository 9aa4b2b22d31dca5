//! The Codex backend: `codex exec --json` (protocols.md §2): argv for new and resumed runs, how
//! herd's rules map onto its sandbox, the verdict; decoding of its JSONL is in `decode`.

mod decode;

pub use decode::CodexDecoder;

use std::path::Path;

use herd_core::{BackendKind, FailureReason, ResultInfo, ResultKind};

use crate::{
    Backend, BackendError, Decoder, Exit, Invocation, Launch, PermissionRoute, RunSpec, Verdict,
};

/// The codex version herd was tested with.
pub const TESTED_VERSION: &str = "0.169.0";

/// The variable that overrides the binary's location.
pub const PROGRAM_OVERRIDE_VAR: &str = "HERD_CODEX_BIN";

/// Prefixes of the variables codex needs passed through: its home and keys, the OpenAI key and
/// base URL (read by herd, see [`CodexOptions::base_url`]).
pub const ENV_PREFIXES: &[&str] = &["CODEX_", "OPENAI_"];

/// The model provider id herd defines on the command line when it points codex at a base URL.
pub const HERD_PROVIDER: &str = "herd";

/// codex's `--sandbox` policies (codex exec has no approval round trip: the sandbox decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sandbox {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

impl Sandbox {
    pub const fn as_str(self) -> &'static str {
        match self {
            Sandbox::ReadOnly => "read-only",
            Sandbox::WorkspaceWrite => "workspace-write",
            Sandbox::DangerFullAccess => "danger-full-access",
        }
    }

    /// The narrowest policy that lets the run's allow rules work: `workspace-write` when a
    /// rule allows a tool that writes (Bash, Edit, Write, MultiEdit, NotebookEdit, in any
    /// spelling, with or without a pattern), else `read-only`. Never full access.
    pub fn for_spec(spec: &RunSpec) -> Sandbox {
        const WRITERS: [&str; 5] = ["bash", "edit", "write", "multiedit", "notebookedit"];
        let writes = spec.allow.iter().any(|rule| {
            let tool = rule.split('(').next().unwrap_or("").trim().to_ascii_lowercase();
            WRITERS.contains(&tool.as_str())
        });
        if writes { Sandbox::WorkspaceWrite } else { Sandbox::ReadOnly }
    }
}

/// What herd decides about a codex run beyond the [`RunSpec`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodexOptions {
    pub sandbox: Option<Sandbox>,
    /// The run's `OPENAI_BASE_URL`, if set: codex ignores that variable (protocols.md §2.0), so
    /// herd defines a provider `herd` with this `base_url` (Responses API, key from
    /// `OPENAI_API_KEY`) through `-c` overrides.
    pub base_url: Option<String>,
}

/// The variable naming codex's state directory (default `~/.codex`).
pub const HOME_VAR: &str = "CODEX_HOME";

/// What in codex's state directory configures it or holds what it runs: its config (model
/// providers, MCP servers, hooks), global instructions, exec-policy rules, prompts, skills,
/// plugins. None gets a placeholder: codex refuses a directory where `config.toml` should be.
pub const PROTECTED_STATE: &[(&str, bool)] = &[
    ("config.toml", false),
    ("AGENTS.md", false),
    ("AGENTS.override.md", false),
    ("rules", false),
    ("prompts", false),
    ("skills", false),
    ("plugins", false),
    ("hooks", false),
    ("hooks.json", false),
];

/// Codex CLI (`@openai/codex`), through `codex exec --json`.
#[derive(Debug, Clone, Copy)]
pub struct Codex;

impl Codex {
    /// The sandbox codex runs its commands in. Inside herd's own sandbox codex's cannot work
    /// (its bubblewrap needs to map users in a namespace herd's has no capability for; measured
    /// on 0.169.0: `bwrap: setting up uid map: Operation not permitted`), so it is off there and
    /// herd's sandbox does its job: the working directory writable or read-only as the rules
    /// map ([`Backend::workspace_writable`]). Unconfined, codex's own sandbox applies them.
    pub fn sandbox(spec: &RunSpec, confined: bool) -> Sandbox {
        if confined { Sandbox::DangerFullAccess } else { Sandbox::for_spec(spec) }
    }
}

impl Backend for Codex {
    fn kind(&self) -> BackendKind {
        BackendKind::Codex
    }

    fn fixed_program(&self) -> Option<(&'static str, &'static str)> {
        Some(("codex", PROGRAM_OVERRIDE_VAR))
    }

    fn invocation(&self, spec: &RunSpec, launch: &Launch<'_>) -> Result<Invocation, BackendError> {
        let program = self.program(spec, launch.var("PATH"), launch.override_bin)?;
        let opts = CodexOptions {
            sandbox: Some(Codex::sandbox(spec, launch.confined)),
            base_url: launch.var("OPENAI_BASE_URL").filter(|u| !u.is_empty()).map(str::to_owned),
        };
        Ok(Invocation { program, args: args(spec, &opts) })
    }

    fn env_prefixes(&self, _spec: &RunSpec) -> &'static [&'static str] {
        ENV_PREFIXES
    }

    fn home_state(&self, _spec: &RunSpec) -> &'static [&'static str] {
        // Measured on 0.169.0: sessions (rollouts), sqlite state and history, shell snapshots,
        // its credentials, all under CODEX_HOME; nothing else in HOME.
        &[".codex"]
    }

    fn state_dir_var(&self, _spec: &RunSpec) -> Option<&'static str> {
        Some(HOME_VAR)
    }

    fn protected_state(&self, _spec: &RunSpec) -> &'static [(&'static str, bool)] {
        PROTECTED_STATE
    }

    fn workspace_writable(&self, spec: &RunSpec) -> bool {
        Sandbox::for_spec(spec) == Sandbox::WorkspaceWrite
    }

    fn resumes_natively(&self, _spec: &RunSpec) -> bool {
        true
    }

    fn permission_route(&self, spec: &RunSpec, confined: bool) -> PermissionRoute {
        let mapped = Sandbox::for_spec(spec);
        let why = match mapped {
            Sandbox::WorkspaceWrite => "an allow rule names a tool that writes",
            _ => "no allow rule names a tool that writes (Bash, Edit, Write)",
        };
        let how = if confined {
            format!(
                "herd's sandbox keeps the working directory {} (codex's own sandbox cannot run \
                 inside herd's: --sandbox danger-full-access)",
                if mapped == Sandbox::WorkspaceWrite { "writable" } else { "read-only" }
            )
        } else {
            format!("codex runs with --sandbox {}", mapped.as_str())
        };
        PermissionRoute::Mapped(format!(
            "codex exec never asks for permission: herd's rules map to its sandbox {} ({why}); \
             {how}. Deny and ask rules and PreToolUse hooks cannot stop its calls (they are \
             audited as observed); for a gate use --cli acp -- codex-acp",
            mapped.as_str()
        ))
    }

    fn initial_stdin(&self, spec: &RunSpec) -> Vec<u8> {
        initial_stdin(spec)
    }

    fn holds_stdin(&self) -> bool {
        false
    }

    fn interrupt_message(&self) -> Option<Vec<u8>> {
        // SIGINT: the running command is killed with it (SIGTERM would orphan it, §2.4).
        None
    }

    fn decoder(&self, _spec: &RunSpec, _cwd: &Path) -> Box<dyn Decoder> {
        Box::new(CodexDecoder::default())
    }

    fn verdict(&self, result: Option<&ResultInfo>, exit: Exit) -> Verdict {
        verdict(result, exit)
    }
}

/// A TOML basic string (what `-c key=value` parses its value as).
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The argv after the program name (protocols.md §2.0, §2.3, measured on 0.169.0):
/// `exec --json --skip-git-repo-check [-m M] [-s S] [-c …] [resume THREAD] -- PROMPT`.
///
/// Options go before `resume` (codex applies them to the resumed thread too); `--` keeps a
/// prompt that starts with `-` a prompt. `--skip-git-repo-check`: herd chose the directory.
/// `append_system_prompt` becomes `-c developer_instructions=…` (a developer message in every
/// request). codex has no flags for tools, allow/deny rules or max turns: herd enforces turns
/// itself from [`CodexDecoder`]'s count, and the sandbox stands in for rules.
pub fn args(spec: &RunSpec, opts: &CodexOptions) -> Vec<String> {
    let mut a: Vec<String> = ["exec", "--json", "--skip-git-repo-check"].map(String::from).into();
    let mut opt = |flag: &str, value: String| {
        a.push(flag.to_owned());
        a.push(value);
    };
    if let Some(m) = &spec.model {
        opt("--model", m.clone());
    }
    if let Some(s) = opts.sandbox {
        opt("--sandbox", s.as_str().to_owned());
    }
    if let Some(url) = &opts.base_url {
        let p = HERD_PROVIDER;
        opt("-c", format!("model_provider={}", toml_string(p)));
        opt("-c", format!("model_providers.{p}.name={}", toml_string("herd")));
        opt("-c", format!("model_providers.{p}.base_url={}", toml_string(url)));
        opt("-c", format!("model_providers.{p}.wire_api={}", toml_string("responses")));
        opt("-c", format!("model_providers.{p}.env_key={}", toml_string("OPENAI_API_KEY")));
    }
    if let Some(p) = &spec.append_system_prompt {
        opt("-c", format!("developer_instructions={}", toml_string(p)));
    }
    if let Some(thread) = &spec.resume {
        a.push("resume".to_owned());
        a.push(thread.clone());
    }
    a.push("--".to_owned());
    a.push(spec.prompt.clone());
    a
}

/// codex gets its prompt on the command line; stdin is only ever `/dev/null` or closed at once
/// (a pipe left open is read and appended to the prompt as a `<stdin>` block).
pub fn initial_stdin(_spec: &RunSpec) -> Vec<u8> {
    Vec::new()
}

/// Success is `turn.completed` and nothing else (protocols.md §2): a run that exits without
/// `turn.completed`/`turn.failed` (SIGTERM 143, SIGINT 1, a crash) failed whatever its code.
/// `turn.failed` is the model call failing: an API error, with the HTTP status when codex's
/// message names one.
pub fn verdict(result: Option<&ResultInfo>, exit: Exit) -> Verdict {
    let Some(r) = result else {
        return Verdict::Failed(FailureReason::NoResult {
            exit_code: match exit {
                Exit::Code(c) => Some(c),
                Exit::Signal(_) => None,
            },
        });
    };
    match (&r.subtype, r.is_error) {
        (ResultKind::Success, false) => Verdict::Completed,
        (ResultKind::ErrorMaxTurns, _) => Verdict::Failed(FailureReason::MaxTurns),
        _ => Verdict::Failed(FailureReason::ApiError {
            status: r.api_error_status,
            message: r.errors.last().cloned().or_else(|| r.text.clone()).unwrap_or_default(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use herd_core::Usage;

    use super::*;

    fn spec() -> RunSpec {
        RunSpec { prompt: "-do it".into(), ..RunSpec::default() }
    }

    #[test]
    fn argv_for_new_and_resumed_runs() {
        assert_eq!(
            args(&spec(), &CodexOptions::default()).join(" "),
            "exec --json --skip-git-repo-check -- -do it"
        );
        let full = RunSpec {
            model: Some("gpt-5.5".into()),
            append_system_prompt: Some("be \"brief\"\n".into()),
            resume: Some("01a2-thread".into()),
            ..spec()
        };
        let opts = CodexOptions {
            sandbox: Some(Sandbox::WorkspaceWrite),
            base_url: Some("http://127.0.0.1:9/v1".into()),
        };
        assert_eq!(
            args(&full, &opts),
            [
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--model",
                "gpt-5.5",
                "--sandbox",
                "workspace-write",
                "-c",
                "model_provider=\"herd\"",
                "-c",
                "model_providers.herd.name=\"herd\"",
                "-c",
                "model_providers.herd.base_url=\"http://127.0.0.1:9/v1\"",
                "-c",
                "model_providers.herd.wire_api=\"responses\"",
                "-c",
                "model_providers.herd.env_key=\"OPENAI_API_KEY\"",
                "-c",
                "developer_instructions=\"be \\\"brief\\\"\\n\"",
                "resume",
                "01a2-thread",
                "--",
                "-do it",
            ]
        );
        assert!(initial_stdin(&full).is_empty());
    }

    #[test]
    fn sandbox_follows_the_allow_rules() {
        let with = |allow: &[&str]| RunSpec {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            ..RunSpec::default()
        };
        assert_eq!(Sandbox::for_spec(&with(&[])), Sandbox::ReadOnly);
        assert_eq!(Sandbox::for_spec(&with(&["Read", "Grep(*)"])), Sandbox::ReadOnly);
        assert_eq!(Sandbox::for_spec(&with(&["Bash(cargo test *)"])), Sandbox::WorkspaceWrite);
        assert_eq!(Sandbox::for_spec(&with(&["edit"])), Sandbox::WorkspaceWrite);
    }

    #[test]
    fn verdict_needs_turn_completed() {
        let ok = ResultInfo {
            subtype: ResultKind::Success,
            is_error: false,
            text: Some("done".into()),
            api_error_status: None,
            errors: vec![],
            num_turns: Some(1),
            native_session_id: None,
            usage: Usage::default(),
            cost_usd: None,
            duration_ms: None,
            permission_denials: vec![],
            terminal_reason: None,
        };
        assert_eq!(verdict(Some(&ok), Exit::Code(0)), Verdict::Completed);
        assert_eq!(
            verdict(None, Exit::Code(0)),
            Verdict::Failed(FailureReason::NoResult { exit_code: Some(0) })
        );
        assert_eq!(
            verdict(None, Exit::Signal(15)),
            Verdict::Failed(FailureReason::NoResult { exit_code: None })
        );
        let failed = ResultInfo {
            subtype: ResultKind::ErrorDuringExecution,
            is_error: true,
            api_error_status: Some(401),
            errors: vec!["unexpected status 401 Unauthorized".into()],
            ..ok
        };
        assert_eq!(
            verdict(Some(&failed), Exit::Code(1)),
            Verdict::Failed(FailureReason::ApiError {
                status: Some(401),
                message: "unexpected status 401 Unauthorized".into()
            })
        );
    }
}

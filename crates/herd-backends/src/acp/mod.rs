//! The ACP backend: any Agent Client Protocol agent on stdio (gemini `--acp`, codex-acp,
//! claude-code-acp, or any other), driven by the sans-IO [`AcpClient`]; what each known agent needs.
//!
//! How the engine drives one run (measured against the three agents, see herd-testkit's
//! `acp_real.rs`):
//! 1. spawn [`AcpAgent::args`] with stdin a pipe kept open; write [`AcpClient::start`]
//!    (`initialize`);
//! 2. feed every stdout line to the client ([`Decoder::decode`]) and after each write
//!    [`Decoder::take_stdin`]: the client answers `initialize` with `session/new` (or
//!    `session/load`), then `session/set_mode` if asked, then `session/prompt`;
//! 3. a `ControlRequest` event of subtype [`PERMISSION_METHOD`] is a permission request:
//!    [`permission_request`] gives it in neutral terms, [`answer_permission`] the line to write;
//! 4. the `Result` event ends the run (the prompt's answer); then close stdin — the agents
//!    exit on EOF;
//! 5. to stop gracefully write [`AcpClient::cancel`] (`session/cancel`, pending permission
//!    requests answered `cancelled`), wait for the `Result` (`stopReason: "cancelled"`), then
//!    close stdin / signal the process group.

mod client;
mod update;
mod wire;

pub use client::{AcpClient, AcpConfig, PERMISSION_METHOD, Step};
pub use wire::RpcError;

use std::path::{Path, PathBuf};

use herd_core::{AgentEvent, BackendKind, FailureReason, ResultInfo, ResultKind};

use crate::{
    Backend, BackendError, Decoder, Exit, Invocation, Launch, PermissionAnswer, PermissionRequest,
    PermissionRoute, RunFile, RunSpec, Verdict,
};

/// The ACP agents herd was tested with, and how each is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcpAgent {
    /// `gemini --acp` (gemini-cli 0.61.0): the environment of a gemini run (protocols.md §3.0).
    Gemini,
    /// `codex-acp` (`@zed-industries/codex-acp` 0.16.0): codex's `CODEX_HOME`/config.
    CodexAcp,
    /// `claude-code-acp` (`@zed-industries/claude-code-acp` 0.16.2): the Anthropic
    /// variables; it runs the Claude Agent SDK's own bundled claude, not herd's pinned one.
    ClaudeCodeAcp,
}

impl AcpAgent {
    /// The known agent a program is, by its file name (`/opt/bin/gemini` is gemini).
    pub fn detect(program: &str) -> Option<AcpAgent> {
        let name = Path::new(program).file_name()?.to_str()?;
        [AcpAgent::Gemini, AcpAgent::CodexAcp, AcpAgent::ClaudeCodeAcp]
            .into_iter()
            .find(|a| a.program() == name)
    }

    /// The program's name (on PATH or in `node_modules/.bin`).
    pub const fn program(self) -> &'static str {
        match self {
            AcpAgent::Gemini => "gemini",
            AcpAgent::CodexAcp => "codex-acp",
            AcpAgent::ClaudeCodeAcp => "claude-code-acp",
        }
    }

    /// The variable that overrides the binary's location.
    pub const fn program_override_var(self) -> &'static str {
        match self {
            AcpAgent::Gemini => "HERD_GEMINI_BIN",
            AcpAgent::CodexAcp => "HERD_CODEX_ACP_BIN",
            AcpAgent::ClaudeCodeAcp => "HERD_CLAUDE_CODE_ACP_BIN",
        }
    }

    /// The argv after the program name.
    pub fn args(self) -> Vec<String> {
        match self {
            AcpAgent::Gemini => vec!["--acp".to_owned()],
            AcpAgent::CodexAcp | AcpAgent::ClaudeCodeAcp => Vec::new(),
        }
    }

    /// Prefixes of the variables the agent needs passed through.
    pub const fn env_prefixes(self) -> &'static [&'static str] {
        match self {
            AcpAgent::Gemini => crate::gemini::ENV_PREFIXES,
            AcpAgent::CodexAcp => crate::codex::ENV_PREFIXES,
            AcpAgent::ClaudeCodeAcp => &["ANTHROPIC_", "CLAUDE_CODE_", "DISABLE_"],
        }
    }

    /// Variables herd sets for the agent's runs.
    pub const fn fixed_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            AcpAgent::Gemini => crate::gemini::REQUIRED_ENV,
            AcpAgent::CodexAcp | AcpAgent::ClaudeCodeAcp => &[],
        }
    }

    /// The directories under HOME the agent writes (measured: gemini its sessions, history and
    /// project list in `~/.gemini`; claude-code-acp its sessions, todos and debug logs in
    /// `~/.claude`; codex-acp codex's state).
    pub const fn home_state(self) -> &'static [&'static str] {
        match self {
            AcpAgent::Gemini => &[".gemini"],
            AcpAgent::CodexAcp => &[".codex"],
            AcpAgent::ClaudeCodeAcp => &[".claude", ".cache/claude-cli-nodejs"],
        }
    }

    /// What configures the agent in its state directories (read-only inside herd's sandbox).
    pub const fn protected_state(self) -> &'static [(&'static str, bool)] {
        match self {
            AcpAgent::Gemini => crate::gemini::PROTECTED_STATE,
            AcpAgent::CodexAcp => crate::codex::PROTECTED_STATE,
            AcpAgent::ClaudeCodeAcp => crate::claude::PROTECTED_STATE,
        }
    }

    /// Whether the agent exits when its stdin ends (measured: gemini does; codex-acp 0.16.0
    /// and claude-code-acp 0.16.2 stay until signalled).
    pub const fn exits_at_eof(self) -> bool {
        matches!(self, AcpAgent::Gemini)
    }

    /// The arguments that choose a model, for the agents that take one on the command line.
    pub fn model_args(self, model: &str) -> Option<Vec<String>> {
        match self {
            AcpAgent::Gemini => Some(vec!["-m".into(), model.into()]),
            AcpAgent::CodexAcp => Some(vec!["-c".into(), format!("model={}", toml_str(model))]),
            AcpAgent::ClaudeCodeAcp => None,
        }
    }

    /// The mode that makes the agent ask herd before risky calls (its `session/new` default,
    /// measured): gemini `default` (shell and edits ask), codex-acp `read-only` (edits and
    /// escalated commands ask), claude-code-acp `default`.
    pub const fn asking_mode(self) -> &'static str {
        match self {
            AcpAgent::Gemini | AcpAgent::ClaudeCodeAcp => "default",
            AcpAgent::CodexAcp => "read-only",
        }
    }
}

/// A fresh client for one run: the decoder the engine feeds, with its stdin bytes.
pub fn decoder(config: AcpConfig) -> (Box<dyn Decoder>, Vec<u8>) {
    let mut client = AcpClient::new(config);
    let start = client.start();
    (Box::new(client), start)
}

/// `s` as a TOML basic string (for codex-acp's `-c key=value`).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The client for one run of `spec` in `cwd` with `agent`'s asking mode; its first bytes
/// (`initialize`) wait in [`Decoder::take_stdin`].
pub(crate) fn run_decoder(agent: Option<AcpAgent>, spec: &RunSpec, cwd: &Path) -> Box<dyn Decoder> {
    let mut config = AcpConfig::new(cwd.display().to_string(), spec.prompt.clone());
    config.resume = spec.resume.clone();
    config.replay = spec.replay_prompt.clone();
    config.mode = agent.map(|a| a.asking_mode().to_owned());
    Box::new(AcpClient::starting(config))
}

/// Success is the prompt's answer with `stopReason: "end_turn"`; a run that ends without one
/// failed whatever its exit code (the agents that stay until signalled end on SIGTERM).
pub fn verdict(result: Option<&ResultInfo>, exit: Exit) -> Verdict {
    let Some(r) = result else {
        return Verdict::Failed(FailureReason::NoResult {
            exit_code: match exit {
                Exit::Code(c) => Some(c),
                Exit::Signal(_) => None,
            },
        });
    };
    let message = || r.errors.last().cloned().or_else(|| r.text.clone()).unwrap_or_default();
    match (&r.subtype, r.is_error) {
        (ResultKind::Success, false) => Verdict::Completed,
        (ResultKind::ErrorMaxTurns, _) => Verdict::Failed(FailureReason::MaxTurns),
        _ if r.api_error_status.is_some() => Verdict::Failed(FailureReason::ApiError {
            status: r.api_error_status,
            message: message(),
        }),
        _ => Verdict::Failed(FailureReason::AgentError { message: message() }),
    }
}

/// Any ACP agent: `herd task … --cli acp -- PROGRAM ARGS…` (or `acp: {command: […]}`). A known
/// agent ([`AcpAgent::detect`]) gets its variables, state directories and asking mode; any
/// other gets the base environment only (give it more with `--env`).
#[derive(Debug, Clone, Copy)]
pub struct Acp;

impl Acp {
    fn agent(spec: &RunSpec) -> Option<AcpAgent> {
        spec.command.first().and_then(|p| AcpAgent::detect(p))
    }
}

impl Backend for Acp {
    fn kind(&self) -> BackendKind {
        BackendKind::Acp
    }

    fn program_override_var(&self, spec: &RunSpec) -> Option<&'static str> {
        // Only a bare known name is redirected (`gemini` -> $HERD_GEMINI_BIN); a path is a path.
        let bare = spec.command.first().is_some_and(|p| !p.contains('/'));
        Acp::agent(spec).filter(|_| bare).map(AcpAgent::program_override_var)
    }

    fn install_command(&self, spec: &RunSpec) -> Option<String> {
        spec.command.first().and_then(|p| crate::pins::install_command(p))
    }

    fn program(
        &self,
        spec: &RunSpec,
        path_var: Option<&str>,
        override_bin: Option<&str>,
    ) -> Result<PathBuf, BackendError> {
        let Some(program) = spec.command.first() else {
            return Err(BackendError::Invalid(
                "cli acp needs the agent's program: herd task PROMPT --cli acp -- PROGRAM [ARGS…] \
                 (or acp: {command: [program, args…]} in an agent file or plan step)"
                    .into(),
            ));
        };
        let var = self.program_override_var(spec).unwrap_or("PATH");
        let override_bin = override_bin.filter(|_| var != "PATH");
        crate::resolve_program(program, var, path_var, override_bin).map_err(|source| {
            BackendError::NotFound { source, install: self.install_command(spec) }
        })
    }

    fn run_files(&self, spec: &RunSpec) -> Vec<RunFile> {
        match Acp::agent(spec) {
            Some(AcpAgent::Gemini) => crate::gemini::policy_file(spec).into_iter().collect(),
            _ => Vec::new(),
        }
    }

    fn invocation(&self, spec: &RunSpec, launch: &Launch<'_>) -> Result<Invocation, BackendError> {
        let program = self.program(spec, launch.var("PATH"), launch.override_bin)?;
        let mut args = spec.command[1..].to_vec();
        args.extend(crate::gemini::policy_args(launch));
        if let Some(m) = &spec.model {
            match Acp::agent(spec).and_then(|a| a.model_args(m)) {
                Some(more) => args.extend(more),
                None => {
                    return Err(BackendError::Invalid(format!(
                        "herd cannot choose a model for the ACP agent {} (it takes none on its \
                         command line); leave --model out, or set it in the agent's own config",
                        spec.command[0]
                    )));
                }
            }
        }
        Ok(Invocation { program, args })
    }

    fn env_prefixes(&self, spec: &RunSpec) -> &'static [&'static str] {
        Acp::agent(spec).map_or(&[], AcpAgent::env_prefixes)
    }

    fn fixed_env(&self, spec: &RunSpec) -> &'static [(&'static str, &'static str)] {
        Acp::agent(spec).map_or(&[], AcpAgent::fixed_env)
    }

    fn home_state(&self, spec: &RunSpec) -> &'static [&'static str] {
        Acp::agent(spec).map_or(&[], AcpAgent::home_state)
    }

    fn state_dir_var(&self, spec: &RunSpec) -> Option<&'static str> {
        (Acp::agent(spec) == Some(AcpAgent::CodexAcp)).then_some(crate::codex::HOME_VAR)
    }

    fn protected_state(&self, spec: &RunSpec) -> &'static [(&'static str, bool)] {
        Acp::agent(spec).map_or(&[], AcpAgent::protected_state)
    }

    fn takes_system_prompt(&self, _spec: &RunSpec) -> bool {
        false
    }

    fn resumes_natively(&self, _spec: &RunSpec) -> bool {
        // `session/load` where the agent offers it, else the replayed history
        // (`RunSpec::replay_prompt`): the client decides once the agent has said.
        true
    }

    fn permission_route(&self, _spec: &RunSpec, _confined: bool) -> PermissionRoute {
        PermissionRoute::Asks("ACP session/request_permission")
    }

    fn initial_stdin(&self, _spec: &RunSpec) -> Vec<u8> {
        // The client's `initialize` comes from the decoder (`take_stdin`).
        Vec::new()
    }

    fn holds_stdin(&self) -> bool {
        true
    }

    fn exits_at_eof(&self, spec: &RunSpec) -> bool {
        Acp::agent(spec).is_some_and(AcpAgent::exits_at_eof)
    }

    fn interrupt_message(&self) -> Option<Vec<u8>> {
        None
    }

    fn permission_request(&self, ev: &AgentEvent) -> Option<PermissionRequest> {
        permission_request(ev)
    }

    fn answer_permission(
        &self,
        req: &PermissionRequest,
        answer: &PermissionAnswer,
    ) -> Option<Vec<u8>> {
        Some(answer_permission(req, answer))
    }

    fn decoder(&self, spec: &RunSpec, cwd: &Path) -> Box<dyn Decoder> {
        run_decoder(Acp::agent(spec), spec, cwd)
    }

    fn verdict(&self, result: Option<&ResultInfo>, exit: Exit) -> Verdict {
        verdict(result, exit)
    }
}

/// The permission request a `ControlRequest` event of subtype [`PERMISSION_METHOD`] carries.
/// When the request does not name its tool but an earlier `tool_call` update did, the client
/// notes the name in the event's `toolCall._meta.herd`, so this stays a function of the event.
pub fn permission_request(ev: &AgentEvent) -> Option<PermissionRequest> {
    match ev {
        AgentEvent::ControlRequest { request_id, subtype, request }
            if subtype == PERMISSION_METHOD =>
        {
            Some(update::permission_request(request_id.clone(), request))
        }
        _ => None,
    }
}

/// The line answering `req`: the agent's own `allow_once` (else any allow) option for an allow,
/// its `reject_once` (else any reject) option for a deny, `cancelled` when it offered none.
/// ACP has no way to change the call's input: an allow with other input runs the call as asked.
pub fn answer_permission(req: &PermissionRequest, answer: &PermissionAnswer) -> Vec<u8> {
    client::encode_answer(req, Some(answer))
}

//! herd-backends: one adapter per agent CLI — how to start it, how to read its stream, what to
//! write to its stdin, and how to judge its end. Pure apart from finding the binary on PATH.

pub mod acp;
pub mod api_error;
pub mod claude;
pub mod codex;
pub mod command;
pub mod gemini;
mod lenient;
mod permission;
mod program;
pub mod tools;

use std::fmt;
use std::path::PathBuf;

use herd_core::{AgentEvent, Decoded, FailureReason, ResultInfo, Usage};

pub use permission::{PermissionOption, PermissionRequest};
pub use program::{ProgramNotFound, resolve_program};
pub use tools::ToolName;

pub use herd_core::BackendKind;

/// The CLIs this herd drives today.
pub const SUPPORTED: &[BackendKind] = &[BackendKind::Claude, BackendKind::Command];

/// A backend herd knows by name but cannot run yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cli {0} is not supported by this herd yet (supported: claude, command)")]
pub struct Unsupported(pub BackendKind);

/// The adapter for `kind`.
pub fn backend(kind: BackendKind) -> Result<&'static dyn Backend, Unsupported> {
    match kind {
        BackendKind::Claude => Ok(&claude::Claude),
        BackendKind::Command => Ok(&command::Command),
        other => Err(Unsupported(other)),
    }
}

/// What a subagent should do, in backend-neutral terms.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RunSpec {
    pub prompt: String,
    pub model: Option<String>,
    /// The tools the agent has at all (`None` = the CLI's default set).
    pub tools: Option<Vec<String>>,
    /// Rules for calls that run without asking.
    pub allow: Vec<String>,
    /// Rules for calls that are refused.
    pub deny: Vec<String>,
    pub max_turns: Option<u32>,
    pub append_system_prompt: Option<String>,
    /// The backend's native session id to continue.
    pub resume: Option<String>,
    /// For the command backend: the program and its arguments.
    pub command: Vec<String>,
    /// Tools (normalised names) the CLI must ask herd about on every call, even those it would
    /// run on its own (read-only ones, or ones the user's or the repository's settings allow),
    /// so herd's rules, hooks and limits see every call they speak about. Filled by the engine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask_first: Vec<String>,
    /// Let the CLI load what the repository brings (claude: `.claude/settings*.json` with its
    /// hooks and permission rules, `.mcp.json`); off unless the project's herd config says
    /// `trust_project_settings: true`. Filled by the engine.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trust_project_settings: bool,
}

/// herd's answer to a CLI's request to use a tool.
#[derive(Debug, Clone, PartialEq)]
pub enum PermissionAnswer {
    /// Run the tool with this input (the request's own input, unchanged).
    Allow { input: serde_json::Value },
    /// Refuse; the model sees `message`.
    Deny { message: String },
}

/// A program and its arguments, ready to spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// Why a command line could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    NotFound(#[from] ProgramNotFound),
    #[error("{0}")]
    Invalid(String),
}

/// How a process ended, as the supervisor saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// A backend's judgement of a finished run.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Completed,
    Failed(FailureReason),
}

/// Turns an agent's stdout, line by line, into herd events.
pub trait Decoder: Send + Sync {
    /// Decode one line (without its newline). Never panics, whatever the bytes.
    fn decode(&mut self, line: &[u8], out: &mut Vec<Decoded>);
    /// Model turns seen so far (top-level assistant messages).
    fn turns(&self) -> u32;
    /// Usage seen so far.
    fn usage(&self) -> Usage;
    /// Bytes to write to the CLI's stdin now, after the lines decoded so far: a two-way protocol
    /// (ACP) answers responses with its next request. Empty for one-way streams (the default).
    fn take_stdin(&mut self) -> Vec<u8> {
        Vec::new()
    }
}

/// One agent CLI.
pub trait Backend: Send + Sync + fmt::Debug {
    fn kind(&self) -> BackendKind;
    /// The environment variable that overrides the binary's location, if any.
    fn program_override_var(&self) -> Option<&'static str>;
    /// The command line for `spec`, with the binary resolved from `path_var` / the override.
    fn invocation(
        &self,
        spec: &RunSpec,
        path_var: Option<&str>,
        override_bin: Option<&str>,
    ) -> Result<Invocation, BackendError>;
    /// Prefixes of environment variables the CLI needs passed through (API keys, base URLs).
    fn env_prefixes(&self) -> &'static [&'static str];
    /// The directories under HOME the CLI itself writes while it runs (its sessions, its
    /// credentials): they stay writable inside herd's sandbox, the rest of HOME does not.
    fn home_state(&self) -> &'static [&'static str] {
        &[]
    }
    /// The tools the CLI has when the run names none (empty: it has no permission bridge).
    fn builtin_tools(&self) -> &'static [&'static str] {
        &[]
    }
    /// A normalised tool name as this CLI spells it.
    fn tool_name(&self, normalised: &str) -> String {
        normalised.to_owned()
    }
    /// Bytes written to stdin at start.
    fn initial_stdin(&self, spec: &RunSpec) -> Vec<u8>;
    /// Whether stdin stays open after the initial bytes until the terminal event.
    fn holds_stdin(&self) -> bool;
    /// A graceful stop message for stdin, if the CLI has one (else herd sends SIGINT).
    fn interrupt_message(&self) -> Option<Vec<u8>>;
    /// Another user message for a running agent, as its stdin takes it: only for a CLI that
    /// [holds its stdin](Self::holds_stdin) and answers each such message with a turn of its own
    /// ending in a terminal event.
    fn follow_up(&self, _text: &str) -> Option<Vec<u8>> {
        None
    }
    /// The stdin message answering the CLI's permission request `request_id`, if the CLI asks
    /// herd for permissions at all.
    fn permission_answer(&self, _request_id: &str, _answer: &PermissionAnswer) -> Option<Vec<u8>> {
        None
    }
    /// The CLI's request to use a tool carried by `ev` (decoded from its stream), in neutral
    /// terms, if `ev` is one and the CLI asks herd at all.
    fn permission_request(&self, _ev: &AgentEvent) -> Option<PermissionRequest> {
        None
    }
    /// The stdin message answering `req` (which may need more than its id: ACP answers with one
    /// of the option ids the request offered).
    fn answer_permission(
        &self,
        req: &PermissionRequest,
        answer: &PermissionAnswer,
    ) -> Option<Vec<u8>> {
        self.permission_answer(&req.request_id, answer)
    }
    /// A fresh stream decoder.
    fn decoder(&self) -> Box<dyn Decoder>;
    /// Success is an event, not an exit code: judge the run from its terminal event and exit.
    fn verdict(&self, result: Option<&ResultInfo>, exit: Exit) -> Verdict;
}

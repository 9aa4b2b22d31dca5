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
pub mod pins;
mod program;
pub mod tools;

use std::fmt;
use std::path::{Path, PathBuf};

use herd_core::{AgentEvent, Decoded, FailureReason, ResultInfo, Usage};

pub use permission::{PermissionOption, PermissionRequest};
pub use program::{ProgramNotFound, resolve_program};
pub use tools::ToolName;

pub use herd_core::BackendKind;

/// The CLIs this herd drives.
pub const SUPPORTED: &[BackendKind] = &BackendKind::ALL;

/// The adapter for `kind`.
pub fn backend(kind: BackendKind) -> &'static dyn Backend {
    match kind {
        BackendKind::Claude => &claude::Claude,
        BackendKind::Codex => &codex::Codex,
        BackendKind::Gemini => &gemini::Gemini,
        BackendKind::Acp => &acp::Acp,
        BackendKind::Command => &command::Command,
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
    /// With `resume`, for an ACP agent that turns out unable to load sessions: the prompt with
    /// the earlier run's history before the task, sent in a new session instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_prompt: Option<String>,
    /// For the command backend: the program and its arguments; for the ACP backend: the
    /// agent's program and its arguments.
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

/// A file a CLI reads for one run (gemini's policy), from [`Backend::run_files`]: the engine
/// writes it beside the run's transcript and passes its path in [`Launch::files`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFile {
    pub name: &'static str,
    pub contents: String,
}

/// What the engine knows when it starts a CLI, beyond the [`RunSpec`].
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    /// The agent's environment (the allowlist applied, explicit variables on top).
    pub env: &'a [(String, String)],
    /// The binary named by the override variable (`HERD_CODEX_BIN`, …) in herd's environment.
    pub override_bin: Option<&'a str>,
    /// herd's filesystem sandbox confines the run: what the agent may write is herd's to say.
    pub confined: bool,
    /// Where the engine wrote the backend's [`Backend::run_files`], by name.
    pub files: &'a [(&'static str, PathBuf)],
}

impl Launch<'_> {
    /// A variable of the agent's environment.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The path of the run file `name`, once written.
    pub fn file(&self, name: &str) -> Option<&Path> {
        self.files.iter().find(|(n, _)| *n == name).map(|(_, p)| p.as_path())
    }
}

/// Why a command line could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The binary is missing; `install` says how to get the version herd was tested with.
    #[error("{source}{}", install.as_ref().map(|i| format!(". Install it with: {i}")).unwrap_or_default())]
    NotFound { source: ProgramNotFound, install: Option<String> },
    #[error("{0}")]
    Invalid(String),
}

impl From<ProgramNotFound> for BackendError {
    fn from(source: ProgramNotFound) -> Self {
        Self::NotFound { source, install: None }
    }
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

/// Where a CLI's tool calls meet herd's permission gate (what `--explain` says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionRoute {
    /// The CLI asks herd before the calls it would ask a person about (claude's stdio bridge,
    /// ACP `session/request_permission`).
    Asks(&'static str),
    /// The CLI never asks: herd's rules become its own settings, described here.
    Mapped(String),
    /// Not an agent CLI (`command`): nothing to ask about.
    None,
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
    /// (ACP) starts with a request and answers responses with its next one. Empty for one-way
    /// streams (the default).
    fn take_stdin(&mut self) -> Vec<u8> {
        Vec::new()
    }
    /// The protocol's own graceful stop, from where the conversation stands (ACP
    /// `session/cancel`, pending permission requests answered `cancelled`); empty when it has
    /// none (then the backend's [`Backend::interrupt_message`] or a signal).
    fn interrupt(&mut self) -> Vec<u8> {
        Vec::new()
    }
    /// herd is about to answer permission request `request_id`: whether it still waits for an
    /// answer (a cancel may have answered it already; then herd sends nothing).
    fn answered(&mut self, _request_id: &str) -> bool {
        true
    }
    /// While the CLI has not finished its opening handshake (ACP: `initialize`, then
    /// `session/new` or `session/load`), what it still owes; `None` once it has (or for CLIs
    /// without one).
    fn handshake_pending(&self) -> Option<String> {
        None
    }
}

/// One agent CLI.
pub trait Backend: Send + Sync + fmt::Debug {
    fn kind(&self) -> BackendKind;
    /// The one binary this CLI always is, and the variable that overrides its location
    /// (`claude`, `HERD_CLAUDE_BIN`); `None` where the spec names the program, whose backend
    /// then says how to find it in the three methods below.
    fn fixed_program(&self) -> Option<(&'static str, &'static str)> {
        None
    }
    /// The environment variable that overrides the binary's location, if any.
    fn program_override_var(&self, _spec: &RunSpec) -> Option<&'static str> {
        self.fixed_program().map(|(_, var)| var)
    }
    /// How to install the version herd was tested with (for a missing binary's error).
    fn install_command(&self, _spec: &RunSpec) -> Option<String> {
        self.fixed_program().and_then(|(name, _)| pins::install_command(name))
    }
    /// The binary `spec` starts, found on `path_var` or through the override.
    fn program(
        &self,
        _spec: &RunSpec,
        path_var: Option<&str>,
        override_bin: Option<&str>,
    ) -> Result<PathBuf, BackendError> {
        let Some((name, var)) = self.fixed_program() else {
            return Err(BackendError::Invalid(format!("{:?} names no program", self.kind())));
        };
        resolve_program(name, var, path_var, override_bin).map_err(|source| {
            BackendError::NotFound { source, install: pins::install_command(name) }
        })
    }
    /// Files the CLI reads for this run (written before [`Self::invocation`]).
    fn run_files(&self, _spec: &RunSpec) -> Vec<RunFile> {
        Vec::new()
    }
    /// The command line for `spec`.
    fn invocation(&self, spec: &RunSpec, launch: &Launch<'_>) -> Result<Invocation, BackendError>;
    /// Prefixes of environment variables the CLI needs passed through (API keys, base URLs).
    fn env_prefixes(&self, spec: &RunSpec) -> &'static [&'static str];
    /// Variables herd sets for every run of the CLI (over the person's).
    fn fixed_env(&self, _spec: &RunSpec) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// The directories under HOME the CLI itself writes while it runs (its sessions, its
    /// credentials): they stay writable inside herd's sandbox, the rest of HOME does not.
    fn home_state(&self, _spec: &RunSpec) -> &'static [&'static str] {
        &[]
    }
    /// A variable naming the CLI's state directory in place of [`Self::home_state`] when set
    /// (codex: `CODEX_HOME`).
    fn state_dir_var(&self, _spec: &RunSpec) -> Option<&'static str> {
        None
    }
    /// Entries of the CLI's state directories that configure it (settings, hooks, instructions,
    /// MCP servers, code it loads), each with whether herd may stand an empty directory in its
    /// place while it does not exist (only where the CLI reads that as nothing): read-only
    /// inside herd's sandbox, so an agent cannot change what later runs do.
    fn protected_state(&self, _spec: &RunSpec) -> &'static [(&'static str, bool)] {
        &[]
    }
    /// Whether the run may write its working directory (codex exec under herd's sandbox: only
    /// when its rules map to `workspace-write`).
    fn workspace_writable(&self, _spec: &RunSpec) -> bool {
        true
    }
    /// The tools the CLI has when the run names none (empty: it has no permission bridge).
    fn builtin_tools(&self) -> &'static [&'static str] {
        &[]
    }
    /// A normalised tool name as this CLI spells it.
    fn tool_name(&self, normalised: &str) -> String {
        normalised.to_owned()
    }
    /// Whether the CLI stops itself at `max_turns` (claude `--max-turns`); otherwise herd stops
    /// it once a turn past the limit begins.
    fn enforces_max_turns(&self) -> bool {
        false
    }
    /// Whether `append_system_prompt` reaches the CLI as a system or developer prompt; when not,
    /// herd puts it before the task instead.
    fn takes_system_prompt(&self, _spec: &RunSpec) -> bool {
        true
    }
    /// Whether a run can continue the CLI's own session (`RunSpec::resume`).
    fn resumes_natively(&self, _spec: &RunSpec) -> bool {
        false
    }
    /// Where the CLI's tool calls meet herd's gate.
    fn permission_route(&self, spec: &RunSpec, confined: bool) -> PermissionRoute;
    /// Bytes written to stdin at start.
    fn initial_stdin(&self, spec: &RunSpec) -> Vec<u8>;
    /// Whether stdin stays open after the initial bytes until the terminal event.
    fn holds_stdin(&self) -> bool;
    /// Whether the CLI exits once herd closes its stdin after the terminal event; when not,
    /// herd ends its process group (ACP agents that serve sessions until killed).
    fn exits_at_eof(&self, _spec: &RunSpec) -> bool {
        true
    }
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
    /// A fresh stream decoder for one run of `spec` in `cwd`.
    fn decoder(&self, spec: &RunSpec, cwd: &Path) -> Box<dyn Decoder>;
    /// Success is an event, not an exit code: judge the run from its terminal event and exit.
    fn verdict(&self, result: Option<&ResultInfo>, exit: Exit) -> Verdict;
}

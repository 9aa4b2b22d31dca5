//! What a surface hands the service: who calls ([`Caller`]) and what it asks for ([`TaskSpec`],
//! [`PlanSpec`], answers, waits). The service's own vocabulary: no surface type crosses it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_core::BackendKind;
use herd_core::permission::{AutoApproveConfig, GrantKind, Policy};
use herd_core::workspace::{LockMode, WorkspaceMode};

use super::error::ApiError;

/// Who is calling: everything that used to be process-wide (project root, current directory,
/// spawn depth, the policies of the herds above), so one service can serve many callers.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The project: its `.herd/config.yml`, `AGENTS.md`, agent definitions and memory.
    pub project_root: PathBuf,
    /// Where the caller's relative paths resolve (its current directory).
    pub cwd: PathBuf,
    /// How deep in a chain of herds the caller runs (0 at the top).
    pub depth: u32,
    /// How deep a chain may go: a caller at this depth may not spawn.
    pub max_depth: u32,
    /// The policies above the caller's own requests, strictest wins: the herds above it and
    /// any ceiling its surface sets (`herd mcp --allow …`). A request only narrows them.
    pub inherited: Vec<Policy>,
    /// The session its runs are recorded under (`None`: the service's own).
    pub session: Option<String>,
    /// Who it is, as recorded when it answers, cancels or revokes.
    pub who: String,
    /// The directories its paths (cwd, plan files) must stay inside (`None`: anywhere, for a
    /// person at their own terminal).
    pub roots: Option<Vec<PathBuf>>,
}

/// The environment variables through which a herd tells the herds it starts where they stand.
pub const DEPTH_VAR: &str = "HERD_DEPTH";
pub const MAX_DEPTH_VAR: &str = "HERD_MAX_DEPTH";

impl Caller {
    /// A caller at the top of the tree (depth 0, one level of subagents, no inherited policy)
    /// working at `project_root`: a program that embeds the service, a test, a benchmark.
    pub fn top(project_root: &Path, who: impl Into<String>) -> Self {
        Self {
            project_root: project_root.to_path_buf(),
            cwd: project_root.to_path_buf(),
            depth: 0,
            max_depth: 1,
            inherited: Vec::new(),
            session: None,
            who: who.into(),
            roots: None,
        }
    }

    /// A caller in this process: depth and inherited policies from the environment a parent
    /// herd set (`HERD_DEPTH`, `HERD_MAX_DEPTH`, `HERD_POLICY_LAYERS`). Unreadable inherited
    /// policies are an error, never a silently wider policy.
    pub fn from_env(project_root: &Path, cwd: &Path, who: String) -> Result<Self, ApiError> {
        let var = crate::gate::POLICY_LAYERS_VAR;
        let inherited = match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => serde_json::from_str(&v).map_err(|e| {
                ApiError::invalid(format!(
                    "{var}: the policies inherited from the parent herd cannot be read ({e}); \
                     refusing to run with a wider policy"
                ))
            })?,
            _ => Vec::new(),
        };
        let num = |k: &str| std::env::var(k).ok().and_then(|v| v.trim().parse::<u32>().ok());
        Ok(Self {
            project_root: project_root.to_path_buf(),
            cwd: cwd.to_path_buf(),
            depth: num(DEPTH_VAR).unwrap_or(0),
            max_depth: num(MAX_DEPTH_VAR).unwrap_or(1),
            inherited,
            session: None,
            who,
            roots: None,
        })
    }

    /// `path` resolved against the caller's directory, checked against its roots.
    pub fn path(&self, path: &Path, what: &str) -> Result<PathBuf, ApiError> {
        let p = if path.is_absolute() { path.to_path_buf() } else { self.cwd.join(path) };
        let p = std::path::absolute(&p).unwrap_or(p);
        let Some(roots) = &self.roots else { return Ok(p) };
        let canonical = canonical_or_ancestor(&p);
        if roots.iter().any(|r| canonical.starts_with(canonical_or_ancestor(r))) {
            return Ok(p);
        }
        let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        Err(ApiError::new(
            super::Code::PermissionDenied,
            format!("{what} {}: outside the allowed roots ({})", path.display(), list.join(", ")),
        ))
    }
}

/// `p` with symlinks resolved: the longest existing ancestor canonicalised, the rest appended.
fn canonical_or_ancestor(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        if let Ok(c) = cur.canonicalize() {
            return rest.iter().rev().fold(c, |acc: PathBuf, part| acc.join(part));
        }
        match (cur.file_name().map(ToOwned::to_owned), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                cur = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// One subagent to run, as a user asks for it. Unset fields come from the agent definition
/// (when `agent` names one), then the project's config, then herd's defaults. Not `Clone`:
/// it may carry granted secrets.
#[derive(Debug, Default)]
pub struct TaskSpec {
    /// The task itself.
    pub prompt: String,
    /// A short label shown by `ps` and status (MCP's `description`).
    pub name: Option<String>,
    pub cli: Option<BackendKind>,
    /// For `cli: command`: the program and its arguments.
    pub command: Vec<String>,
    /// A named agent definition and the values for its prompt template.
    pub agent: Option<String>,
    pub inputs: BTreeMap<String, String>,
    pub model: Option<String>,
    /// The tools the agent has at all (`None`: the CLI's own set).
    pub tools: Option<Vec<String>>,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub ask: Vec<String>,
    pub max_turns: Option<u32>,
    pub timeout: Option<Duration>,
    /// Cut the stored result to this many KiB.
    pub max_output_kb: Option<u64>,
    /// Extra environment variables for the agent.
    pub env: Vec<(String, String)>,
    /// Where the agent works (relative to the caller's cwd); default the caller's cwd.
    pub cwd: Option<PathBuf>,
    pub workspace: WorkspaceSpec,
    /// Let herd approve calls no rule decides, within these limits.
    pub auto_approve: Option<AutoApproveConfig>,
    /// How long a call waits for a person.
    pub permission_timeout: Option<Duration>,
    /// Nobody can answer: a call that needs a person is denied at once (and counted in the
    /// run's `unanswered_denials`) instead of waiting.
    pub non_interactive: bool,
    /// TTL-bounded grants: tools, and secrets with the values the surface read.
    pub grants: Vec<(GrantKind, Duration)>,
    /// Continue this finished run (id or unique prefix).
    pub resume: Option<String>,
}

/// Where a task works.
#[derive(Debug, Clone, Default)]
pub struct WorkspaceSpec {
    pub mode: WorkspaceMode,
    /// For `locked`: shared or exclusive (the default).
    pub lock: Option<LockMode>,
    /// Wait for a lock held by another run instead of failing at once.
    pub wait: bool,
    /// For `isolated`: merge into this branch (default `herd/<id>/integration`).
    pub into: Option<String>,
    /// For `isolated`: the ref the worktree starts from (default HEAD).
    pub base: Option<String>,
    /// For `isolated`: a shell command run in the new worktree first.
    pub setup: Option<String>,
    /// For `isolated`: commit what the agent leaves uncommitted (default true).
    pub auto_commit: Option<bool>,
}

/// A plan to run.
#[derive(Debug, Clone)]
pub struct PlanSpec {
    pub source: PlanSource,
    /// At most this many of its steps at once (overrides `limits.max_concurrent`).
    pub max_concurrent: Option<usize>,
    /// Merge isolated steps into this branch (overrides the plan's `into`).
    pub into: Option<String>,
    /// Nobody can answer its steps' calls: a call that needs a person is denied at once.
    pub non_interactive: bool,
}

/// Where a plan comes from.
#[derive(Debug, Clone)]
pub enum PlanSource {
    /// A YAML or JSON file. Relative step `cwd`s resolve against the caller's directory.
    File(PathBuf),
    /// Plan text; `name` names it in errors.
    Text { name: String, text: String },
}

/// A person's (or a program's) answer to a tool call waiting for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub allow: bool,
    /// With allow: the same call (tool and input) is allowed for the rest of the run.
    pub always: bool,
    /// Why (for a deny, the agent's model sees it).
    pub reason: Option<String>,
}

/// Wait for the first of several jobs to end, or for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    Any,
    All,
}

/// How hard to stop something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelLevel {
    /// The stop ladder: the CLI's interrupt, then SIGTERM, then SIGKILL.
    Graceful,
    /// SIGKILL at once.
    Force,
}

//! What the service answers with: one shape per object — a run, a plan and its steps, a
//! permission request, a worktree — shared by every surface's JSON (CLI, MCP, later gRPC).

use std::path::PathBuf;

use herd_core::{FailureReason, Status, Usage};
use herd_store::{
    AuditRow, OrchestrationRow, PermissionRequestRow, StepRow, SubagentRow, WorktreeRow, now_ms,
};
use serde::Serialize;

/// One subagent run.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub id: String,
    /// The session it is recorded under (its caller's, else the service's own).
    #[serde(skip)]
    pub parent_session_id: String,
    pub name: String,
    pub cli: String,
    pub status: Status,
    pub failure_reason: Option<String>,
    /// The task as the caller gave it (without the context blocks herd put before it).
    pub prompt: String,
    pub model: Option<String>,
    pub cwd: String,
    pub native_session_id: Option<String>,
    pub result: Option<String>,
    pub result_truncated: bool,
    pub num_turns: Option<u32>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub pid: Option<u32>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub duration_ms: Option<i64>,
    /// Its worktree, when it worked in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeView>,
    /// Its tool calls waiting for a person.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_permissions: Vec<PermissionRequestView>,
    /// The typed failure (its string form is `failure_reason`).
    #[serde(skip)]
    pub failure: Option<FailureReason>,
    /// Closed: nothing more will happen to it.
    #[serde(skip)]
    pub closed: bool,
    /// Where its raw stream is kept.
    #[serde(skip)]
    pub transcript: PathBuf,
}

impl RunView {
    pub(crate) fn of(r: SubagentRow, transcript: PathBuf) -> Self {
        let duration_ms = r.duration_ms();
        Self {
            id: r.id,
            parent_session_id: r.parent_session_id,
            name: r.name,
            cli: r.cli,
            status: r.status,
            failure_reason: r.failure_reason,
            prompt: r.prompt,
            model: r.model,
            cwd: r.working_directory,
            native_session_id: r.native_session_id,
            result: r.result,
            result_truncated: r.result_truncated,
            num_turns: r.num_turns,
            usage: r.usage,
            cost_usd: r.cost_usd,
            pid: r.pid,
            exit_code: r.exit_code,
            exit_signal: r.exit_signal,
            created_at: r.created_at,
            started_at: r.started_at,
            completed_at: r.completed_at,
            duration_ms,
            worktree: None,
            pending_permissions: Vec::new(),
            failure: r.failure,
            closed: r.closed_at.is_some(),
            transcript,
        }
    }

    /// Ended (completed, failed, cancelled) — a run waiting for its merge has not.
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }
}

/// A worktree herd created: a step's or task's, or the integration worktree of a run.
#[derive(Debug, Clone, Serialize)]
pub struct WorktreeView {
    pub id: String,
    /// `step` (an agent works there) or `integration` (herd merges there).
    pub kind: String,
    pub run_id: String,
    pub step: String,
    pub subagent_id: Option<String>,
    pub repo: String,
    pub path: String,
    pub branch: String,
    pub base: String,
    pub integration_branch: Option<String>,
    /// `active`, `waiting_for_merge`, `merged`, `conflict`, `failed` or `removed`.
    pub status: String,
    pub head: Option<String>,
    pub merge_commit: Option<String>,
    pub created_at: i64,
    pub merged_at: Option<i64>,
    pub removed_at: Option<i64>,
}

impl From<WorktreeRow> for WorktreeView {
    fn from(w: WorktreeRow) -> Self {
        Self {
            id: w.id,
            kind: w.kind,
            run_id: w.run_id,
            step: w.step_key,
            subagent_id: w.subagent_id,
            repo: w.repo,
            path: w.path,
            branch: w.branch,
            base: w.base,
            integration_branch: w.integration_branch,
            status: w.status,
            head: w.head,
            merge_commit: w.merge_commit,
            created_at: w.created_at,
            merged_at: w.merged_at,
            removed_at: w.removed_at,
        }
    }
}

/// A tool call that waits (or waited) for a person.
#[derive(Debug, Clone, Serialize)]
pub struct PermissionRequestView {
    pub id: String,
    pub subagent_id: String,
    pub tool: String,
    pub input_preview: String,
    pub input_sha256: String,
    /// `pending`, `approved`, `denied`, `expired` or `closed`.
    pub status: String,
    pub created_at: i64,
    pub expires_at: i64,
    /// Seconds left to answer (0 once expired).
    pub expires_in_s: i64,
    pub always: bool,
    pub reason: Option<String>,
    pub decided_by: Option<String>,
}

impl From<PermissionRequestRow> for PermissionRequestView {
    fn from(r: PermissionRequestRow) -> Self {
        Self {
            expires_in_s: (r.expires_at - now_ms()).max(0) / 1000,
            id: r.id,
            subagent_id: r.subagent_id,
            tool: r.tool,
            input_preview: r.input_preview,
            input_sha256: r.input_sha256,
            status: r.status,
            created_at: r.created_at,
            expires_at: r.expires_at,
            always: r.always,
            reason: r.reason,
            decided_by: r.decided_by,
        }
    }
}

/// A plan run and its steps.
#[derive(Debug, Clone, Serialize)]
pub struct PlanView {
    pub id: String,
    pub name: String,
    pub strategy: String,
    pub status: String,
    pub total_steps: u32,
    pub completed_steps: u32,
    pub failed_steps: u32,
    pub cost_usd: f64,
    pub usage: PlanUsage,
    pub created_at: i64,
    pub completed_at: Option<i64>,
    pub steps: Vec<StepView>,
}

/// A plan's tokens.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PlanUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl PlanView {
    pub(crate) fn of(o: OrchestrationRow, steps: Vec<StepRow>) -> Self {
        Self {
            id: o.id,
            name: o.name,
            strategy: o.strategy,
            status: o.status,
            total_steps: o.total_steps,
            completed_steps: o.completed_steps,
            failed_steps: o.failed_steps,
            cost_usd: o.cost_usd,
            usage: PlanUsage { input_tokens: o.input_tokens, output_tokens: o.output_tokens },
            created_at: o.created_at,
            completed_at: o.completed_at,
            steps: steps.into_iter().map(StepView::from).collect(),
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled" | "interrupted")
    }
}

/// One step of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct StepView {
    pub id: String,
    pub name: String,
    pub status: String,
    pub failure_reason: Option<String>,
    /// The run of its last attempt.
    pub subagent_id: Option<String>,
    pub attempts: u32,
}

impl From<StepRow> for StepView {
    fn from(s: StepRow) -> Self {
        Self {
            id: s.step_key,
            name: s.name,
            status: s.status,
            failure_reason: s.failure_reason,
            subagent_id: s.subagent_id,
            attempts: s.attempts,
        }
    }
}

/// One audit log entry.
pub type AuditEntry = AuditRow;

//! What the MCP tools answer: the service's views as the JSON a model reads — a task's status
//! and result, a plan's — with the one shape of a worktree and of a waiting request.

use herd_engine::service::{JobState, PermissionRequestView, PlanView, RunView};
use serde_json::{Value, json};

/// A job's status; `background` says whether it was started with `background: true`.
pub fn status(s: &JobState, background: Option<bool>) -> Value {
    match s {
        JobState::Task(r) => {
            let mut v = json!({
                "id": r.id, "kind": "task", "description": r.name, "cli": r.cli,
                "status": r.status, "failure_reason": r.failure_reason,
                "background": background, "duration_ms": r.duration_ms,
                "cost_usd": r.cost_usd, "usage": usage(r),
            });
            add_details(r, &mut v);
            v
        }
        JobState::Plan(p) => plan_status(p, background),
        JobState::Error { id, error } => {
            let kind = if id.starts_with("pln_") { "plan" } else { "task" };
            json!({"id": id, "kind": kind, "status": "failed", "error": error.message})
        }
    }
}

fn plan_status(p: &PlanView, background: Option<bool>) -> Value {
    json!({
        "id": p.id, "kind": "plan", "name": p.name, "status": p.status,
        "background": background, "total_steps": p.total_steps,
        "completed_steps": p.completed_steps, "failed_steps": p.failed_steps,
        "cost_usd": p.cost_usd, "usage": p.usage,
    })
}

/// A finished task's full result.
pub fn task_result(r: &RunView) -> Value {
    let mut v = json!({
        "session_id": r.id, "status": r.status, "failure_reason": r.failure_reason,
        "output": r.result.clone().unwrap_or_default(), "output_truncated": r.result_truncated,
        "duration_ms": r.duration_ms, "usage": usage(r), "cost_usd": r.cost_usd,
        "num_turns": r.num_turns, "transcript": r.transcript,
    });
    add_details(r, &mut v);
    v
}

/// A finished plan's result: its status and every step with its output.
pub fn plan_result(p: &PlanView, outputs: &[Option<String>]) -> Value {
    let mut v = plan_status(p, None);
    let steps: Vec<Value> = p
        .steps
        .iter()
        .zip(outputs)
        .map(|(s, output)| {
            json!({
                "id": s.id, "status": s.status, "failure_reason": s.failure_reason,
                "session_id": s.subagent_id, "attempts": s.attempts, "output": output,
            })
        })
        .collect();
    v["steps"] = steps.into();
    v
}

fn usage(r: &RunView) -> Value {
    json!({"input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens})
}

/// A task's calls waiting for `approve`, and its worktree when it has one.
fn add_details(r: &RunView, v: &mut Value) {
    if !r.pending_permissions.is_empty() {
        v["pending_permissions"] = r.pending_permissions.iter().map(pending).collect();
    }
    if let Some(w) = &r.worktree {
        v["worktree"] = serde_json::to_value(w).unwrap_or_default();
    }
}

fn pending(p: &PermissionRequestView) -> Value {
    json!({
        "request_id": p.id, "tool": p.tool, "input": p.input_preview,
        "expires_in_s": p.expires_in_s,
    })
}

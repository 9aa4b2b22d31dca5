//! What the MCP tools answer: the service's views, the one JSON shape of a run, a plan (with
//! its steps), a waiting request and a worktree that every surface shares — with `kind`, and
//! for a task `session_id` and `background`, on top.

use herd_engine::service::{JobState, PlanView, RunView};
use serde_json::{Value, json};

/// A job's status; `background` says whether it was started with `background: true`.
pub fn status(s: &JobState, background: Option<bool>) -> Value {
    match s {
        JobState::Task(r) => task(r, background),
        JobState::Plan(p) => plan(p, background),
        JobState::Error { id, error } => {
            let kind = if id.starts_with("pln_") { "plan" } else { "task" };
            json!({"id": id, "kind": kind, "status": "failed", "error": error.message})
        }
    }
}

/// A run as [`RunView`], with `kind: "task"`, `background`, and `session_id`: the `task`
/// tool's parameter that continues a finished run is named so, and a model passes back what
/// it was given under that name.
pub fn task(r: &RunView, background: Option<bool>) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    v["kind"] = "task".into();
    v["session_id"] = r.id.clone().into();
    v["background"] = json!(background);
    v
}

/// A plan as [`PlanView`] (its steps, each with its result, when it has them), with
/// `kind: "plan"`, `plan_id` and `background`.
pub fn plan(p: &PlanView, background: Option<bool>) -> Value {
    let mut v = serde_json::to_value(p).unwrap_or_default();
    v["kind"] = "plan".into();
    v["plan_id"] = p.id.clone().into();
    v["background"] = json!(background);
    v
}

//! What one plan step asks of a run when it starts: its resolved request (the same path as a
//! task's) with its dependencies' results before its task, and its workspace for this attempt.

use std::collections::HashMap;

use herd_core::context::{Part, fair_share};
use herd_core::plan::{Plan, Step};
use herd_core::workspace::{LockMode, WorkspaceMode};

use crate::TaskRequest;
use crate::workspace::WorkspaceReq;

/// The run `step` asks for: its base request with `parts` (its dependencies' results) between
/// the agent's context and its task.
pub(super) fn step_request(step: &Step, base: &TaskRequest, parts: Vec<Part>) -> TaskRequest {
    let mut req = base.clone();
    req.assemble(parts);
    let f = &step.fields;
    req.workspace = match step.workspace() {
        WorkspaceMode::Shared => WorkspaceReq::Shared { lock: None, wait: f.wait.unwrap_or(false) },
        // Isolated steps get their worktree when they start (see `drive`).
        WorkspaceMode::Locked | WorkspaceMode::Isolated => WorkspaceReq::Shared {
            lock: Some(f.lock.unwrap_or(LockMode::Exclusive)),
            wait: f.wait.unwrap_or(false),
        },
    };
    req
}

/// The step's dependencies' results (untrusted, capped together, escaped when assembled).
pub(super) fn step_parts(
    plan: &Plan,
    step: usize,
    results: &HashMap<usize, String>,
    cap: usize,
) -> Vec<Part> {
    let s = &plan.steps[step];
    if s.deps.is_empty() {
        return Vec::new();
    }
    let texts: Vec<&str> =
        s.deps.iter().map(|d| results.get(d).map_or("", String::as_str)).collect();
    let shared = fair_share(&texts, cap);
    s.deps
        .iter()
        .zip(shared)
        .map(|(&d, text)| {
            let dep = &plan.steps[d];
            let mut content = format!("Result of step {}:\n{text}", dep.id);
            if let Some(outs) = dep.fields.outputs.as_ref().filter(|o| !o.is_empty()) {
                content.push_str(&format!("\nFiles this step produced: {}", outs.join(", ")));
            }
            Part { source: format!("step:{}", dep.id), trusted: false, content }
        })
        .collect()
}

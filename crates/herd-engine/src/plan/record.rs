//! A plan run as it is first stored: its row and one `pending` row per step with the step's
//! delegation contract — the same record whether this herd runs it or workers do.

use herd_core::plan::Plan;
use herd_store::{NewOrchestration, NewStep};

use super::contract::contract;
use crate::TaskRequest;

/// What is stored of plan `id` before any step starts; `requests` are its steps', in order.
pub(crate) fn new_orchestration(
    id: &str,
    plan: &Plan,
    requests: &[TaskRequest],
    session: String,
    source_file: Option<String>,
    (owner_pid, owner_start_time): (u32, Option<u64>),
) -> NewOrchestration {
    let steps = plan
        .steps
        .iter()
        .zip(requests)
        .enumerate()
        .map(|(i, (s, req))| NewStep {
            key: s.id.clone(),
            name: s.fields.name.clone().unwrap_or_else(|| s.id.clone()),
            prompt: s.fields.prompt.clone().unwrap_or_default(),
            model: s.fields.model.clone(),
            cwd: Some(req.cwd.display().to_string()),
            tools: s.fields.tools.clone(),
            depends_on: s.depends_on.clone(),
            contract: contract(id, plan, i, req.timeout),
        })
        .collect();
    NewOrchestration {
        id: id.to_owned(),
        session,
        name: plan.name.clone(),
        strategy: format!("{:?}", plan.strategy).to_lowercase(),
        plan: serde_json::to_string(plan).unwrap_or_default(),
        source_file,
        steps,
        owner_pid,
        owner_start_time,
    }
}

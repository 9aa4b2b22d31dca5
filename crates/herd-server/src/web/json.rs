//! The shapes the dashboard's JSON API answers with, beyond the service's own views: a run's
//! row in a long list, a plan with its graph and merges, a request with who asks and since when.

use herd_core::Usage;
use herd_engine::service::{PermissionRequestView, PlanView, RunView};
use serde::{Deserialize, Serialize};

/// A run in the list: what a row shows (no prompt or result, which may be long).
#[derive(Debug, Serialize)]
pub struct RunRow {
    pub id: String,
    pub name: String,
    pub cli: String,
    pub status: String,
    /// `status` refined (`waiting` for a person, `completed_with_denials`).
    pub state: String,
    pub plan_id: Option<String>,
    pub step: Option<String>,
    pub failure_reason: Option<String>,
    pub model: Option<String>,
    pub num_turns: Option<u32>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    #[serde(serialize_with = "herd_core::time::ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "herd_core::time::ser_opt_ms")]
    pub started_at: Option<i64>,
    #[serde(serialize_with = "herd_core::time::ser_opt_ms")]
    pub completed_at: Option<i64>,
    pub duration_ms: Option<i64>,
}

impl From<RunView> for RunRow {
    fn from(r: RunView) -> Self {
        Self {
            status: r.status.to_string(),
            state: r.state.to_string(),
            plan_id: r.plan_id,
            step: r.step,
            id: r.id,
            name: r.name,
            cli: r.cli,
            failure_reason: r.failure_reason,
            model: r.model,
            num_turns: r.num_turns,
            usage: r.usage,
            cost_usd: r.cost_usd,
            created_at: r.created_at,
            started_at: r.started_at,
            completed_at: r.completed_at,
            duration_ms: r.duration_ms,
        }
    }
}

/// The first page: runs and plans, newest first.
#[derive(Debug, Serialize)]
pub struct Overview {
    pub runs: Vec<RunRow>,
    pub plans: Vec<PlanView>,
    /// The service's clock (ms), so pages show ages without trusting the browser's.
    pub now: i64,
}

/// A tool call waiting for a person, with what the list shows of its run.
#[derive(Debug, Serialize)]
pub struct Pending {
    #[serde(flatten)]
    pub request: PermissionRequestView,
    pub run_cli: String,
    /// The internal subagent (Claude's Task tool call id) that asks; `None`: the agent itself.
    pub origin: Option<String>,
    pub now: i64,
}

/// An answer from the page.
#[derive(Debug, Deserialize)]
pub struct AnswerBody {
    pub decision: String,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct CancelBody {
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Deserialize)]
pub struct SendBody {
    pub message: String,
}

//! What a dashboard reads beyond a single run: the plan runs, a plan's dependency graph, one
//! permission request however it ended, and which internal subagent asked for it.

use herd_core::AgentEvent;
use serde::Serialize;

use super::Service;
use super::error::ApiError;
use super::views::{PermissionRequestView, PlanView};

/// A plan's dependency graph: each step with the steps it waits for.
#[derive(Debug, Clone, Serialize)]
pub struct PlanGraph {
    pub strategy: String,
    pub edges: Vec<GraphNode>,
}

/// One step of a [`PlanGraph`].
#[derive(Debug, Clone, Serialize)]
pub struct GraphNode {
    pub id: String,
    pub depends_on: Vec<String>,
}

/// Events read at once while looking for a request's event.
const SCAN_BATCH: usize = 2000;

impl Service {
    /// Plan runs, newest first, at most `limit` (0: all), without their steps.
    pub fn plans(&self, limit: usize) -> Result<Vec<PlanView>, ApiError> {
        let limit = if limit == 0 { usize::MAX } else { limit };
        let rows = self.engine.store().orchestrations(limit)?;
        Ok(rows.into_iter().map(|o| PlanView::of(o, Vec::new())).collect())
    }

    /// Plan `id`'s steps and what each depends on, as its stored plan says (a sequential plan's
    /// steps each wait for the one before; a parallel plan's for none).
    pub fn plan_graph(&self, id: &str) -> Result<PlanGraph, ApiError> {
        let store = self.engine.store();
        let o = store
            .orchestration(id.trim())?
            .ok_or_else(|| ApiError::not_found(format!("no plan {id}")))?;
        let (text, _) = store
            .orchestration_plan(&o.id)?
            .ok_or_else(|| ApiError::not_found(format!("no plan {id}")))?;
        graph_of(&text).map_err(|e| ApiError::internal(format!("plan {}: stored plan {e}", o.id)))
    }

    /// One permission request, pending or decided (who decided it, and how).
    pub fn request(&self, id: &str) -> Result<PermissionRequestView, ApiError> {
        let store = self.engine.store();
        let id = store.resolve_request(id.trim())?;
        store
            .permission_request(&id)?
            .map(PermissionRequestView::from)
            .ok_or_else(|| ApiError::not_found(format!("no permission request {id}")))
    }

    /// The `parent_tool_use_id` of the event that asked `request` of run `run`: the internal
    /// subagent (Claude's Task tool call) that wants the tool, `None` for the agent itself.
    pub fn request_origin(&self, run: &str, request: &str) -> Result<Option<String>, ApiError> {
        let store = self.engine.store();
        let sid = store.resolve(run.trim())?;
        let mut after = 0;
        loop {
            let batch = store.events_after(&sid, after, SCAN_BATCH)?;
            let Some(last) = batch.last() else { return Ok(None) };
            after = last.seq;
            for e in &batch {
                if let AgentEvent::PermissionRequested { request: r, .. } = &e.event
                    && r == request
                {
                    return Ok(e.parent_tool_use_id.clone());
                }
            }
            if batch.len() < SCAN_BATCH {
                return Ok(None);
            }
        }
    }
}

/// The graph of a stored plan (its JSON as the executor wrote it).
fn graph_of(text: &str) -> Result<PlanGraph, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let strategy = v["strategy"].as_str().unwrap_or("dag").to_owned();
    let steps = v["steps"].as_array().ok_or("has no steps")?;
    let mut edges = Vec::with_capacity(steps.len());
    let mut prev: Option<String> = None;
    for s in steps {
        let id = s["id"].as_str().ok_or("has a step without an id")?.to_owned();
        let depends_on = match strategy.as_str() {
            "parallel" => Vec::new(),
            "sequential" => prev.iter().cloned().collect(),
            _ => s["depends_on"]
                .as_array()
                .map(|a| a.iter().filter_map(|d| d.as_str().map(str::to_owned)).collect())
                .unwrap_or_default(),
        };
        prev = Some(id.clone());
        edges.push(GraphNode { id, depends_on });
    }
    Ok(PlanGraph { strategy, edges })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graphs_follow_the_strategy() {
        let dag = r#"{"strategy":"dag","steps":[{"id":"a","depends_on":[]},{"id":"b","depends_on":["a"]}]}"#;
        let g = graph_of(dag).unwrap();
        assert_eq!(g.edges[1].depends_on, ["a"]);
        let seq = r#"{"strategy":"sequential","steps":[{"id":"a"},{"id":"b"},{"id":"c"}]}"#;
        let g = graph_of(seq).unwrap();
        assert_eq!(g.edges[2].depends_on, ["b"]);
        assert!(g.edges[0].depends_on.is_empty());
        let par = r#"{"strategy":"parallel","steps":[{"id":"a"},{"id":"b","depends_on":["a"]}]}"#;
        assert!(graph_of(par).unwrap().edges[1].depends_on.is_empty());
        assert!(graph_of("{}").is_err());
        assert!(graph_of("not json").is_err());
    }
}

//! What a dashboard reads beyond the other surfaces: one permission request however it ended,
//! and which internal subagent of its run asked for it.

use herd_core::AgentEvent;

use super::Service;
use super::error::ApiError;
use super::views::PermissionRequestView;

/// Events read at once while looking for a request's event.
const SCAN_BATCH: usize = 2000;

impl Service {
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

//! The gate's view of a running agent's stream: permission requests become decisions in flight,
//! tool calls the CLI ran without asking are audited as observed, finished calls fire PostToolUse.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use herd_backends::{Backend, PermissionAnswer};
use herd_core::{AgentEvent, Decoded};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::{Gate, HookEvent, ToolRequest};

/// Decisions in flight and side work (hooks, audit of observed calls) of one run.
#[derive(Debug)]
pub(crate) struct Calls {
    pub gate: Arc<Gate>,
    /// Answers being decided, keyed by nothing: each yields its request (the backend encodes
    /// the answer from it).
    pub decisions: JoinSet<(ToolRequest, PermissionAnswer)>,
    side: JoinSet<()>,
    /// Tool calls seen, by tool_use id, until their result: the tool (as rules name it and as
    /// the CLI did) and its input.
    open: HashMap<String, (String, Option<String>, Value)>,
    /// tool_use ids the CLI asked about.
    asked: HashSet<String>,
}

impl Calls {
    pub fn new(gate: Arc<Gate>) -> Self {
        Self {
            gate,
            decisions: JoinSet::new(),
            side: JoinSet::new(),
            open: HashMap::new(),
            asked: HashSet::new(),
        }
    }

    /// Look at a batch of decoded events before they are stored; `backend` says which of them
    /// are permission requests (the gate never reads a CLI's own JSON).
    pub fn observe(&mut self, evs: &[Decoded], backend: &dyn Backend) {
        for d in evs {
            if let Some(req) = backend.permission_request(&d.event) {
                if let Some(t) = &req.tool_use_id {
                    self.asked.insert(t.clone());
                }
                self.decisions.spawn(self.gate.clone().decide(req));
                continue;
            }
            match &d.event {
                AgentEvent::ToolCall { id, name, input, cli_tool } => {
                    self.open.insert(id.clone(), (name.clone(), cli_tool.clone(), input.clone()));
                }
                AgentEvent::ToolResult { tool_use_id, is_error, content } => {
                    let Some((name, cli_tool, input)) = self.open.remove(tool_use_id) else {
                        continue;
                    };
                    let asked = self.asked.remove(tool_use_id);
                    let gate = self.gate.clone();
                    let post = gate.has_hooks(HookEvent::PostToolUse);
                    if asked && !post {
                        continue;
                    }
                    let payload = json!({
                        "hook_event_name": "PostToolUse", "subagent_id": gate.subagent.as_str(),
                        "tool_name": name, "tool_input": input, "is_error": is_error,
                        "tool_response": herd_core::truncate_str(content, 16 * 1024),
                    });
                    self.side.spawn(async move {
                        if !asked {
                            let _ = gate.observed(&name, cli_tool.as_deref(), &input).await;
                        }
                        if post {
                            gate.fire(HookEvent::PostToolUse, &name, payload).await;
                        }
                    });
                }
                _ => {}
            }
        }
    }

    /// Start a lifecycle hook in the background.
    pub fn fire(&mut self, event: HookEvent, payload: Value) {
        if self.gate.has_hooks(event) {
            let gate = self.gate.clone();
            self.side.spawn(async move {
                let subject = gate.names().subagent_name.clone();
                gate.fire(event, &subject, payload).await;
            });
        }
    }

    /// The run is over: undecided calls are dropped, side work is waited for.
    pub async fn close(&mut self) {
        self.decisions.abort_all();
        while self.side.join_next().await.is_some() {}
    }
}

//! What an ACP agent reports, as herd events: `session/update` notifications (message chunks,
//! tool calls and their updates, plans, …) and `session/request_permission` as a neutral request.

use std::collections::HashMap;

use herd_core::AgentEvent;
use serde_json::{Value, json};

use crate::tools::{ToolName, acp_kind_tool, claude_input, gemini_tool};
use crate::{PermissionOption, PermissionRequest};

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// The tool an ACP tool call is, as far as the agent says (or herd noted in `_meta.herd`, see
/// [`note_tool`]): claude-code-acp names it in
/// `_meta.claudeCode.toolName`, gemini prefixes its `toolCallId` with it (`run_shell_command__…`);
/// otherwise the protocol's `kind` (`execute` -> Bash, `edit` -> Edit, …).
pub(crate) fn tool_of(tc: &Value) -> ToolName {
    if let (Some(claude), Some(native)) = (
        tc.pointer("/_meta/herd/tool").and_then(Value::as_str),
        tc.pointer("/_meta/herd/nativeTool").and_then(Value::as_str),
    ) {
        return ToolName { claude: claude.to_owned(), native: native.to_owned() };
    }
    if let Some(name) = tc.pointer("/_meta/claudeCode/toolName").and_then(Value::as_str) {
        return ToolName::new(None, name);
    }
    if let Some((prefix, _)) = s(tc, "toolCallId").and_then(|id| id.split_once("__"))
        && !prefix.is_empty()
    {
        return gemini_tool(prefix);
    }
    let kind = s(tc, "kind").unwrap_or("other");
    ToolName::new(acp_kind_tool(kind), kind)
}

/// The call's input: `rawInput` when the agent sends one, completed from the title (the
/// command, for shells) and `locations` (the file), with Claude's keys added.
pub(crate) fn input_of(tc: &Value, tool: &ToolName) -> Value {
    let mut input = match tc.get("rawInput") {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => json!({}),
    };
    input = claude_input(&tool.claude, &input);
    if tool.claude == "Bash"
        && input.get("command").is_none()
        && let Some(title) = s(tc, "title")
    {
        input["command"] = json!(title);
    }
    if matches!(tool.claude.as_str(), "Edit" | "Write" | "Read")
        && input.get("file_path").is_none()
        && let Some(path) = tc.pointer("/locations/0/path").and_then(Value::as_str)
    {
        input["file_path"] = json!(path);
    }
    input
}

/// A tool call's output as text: its `content` blocks (text, and `diff <path>` for diffs), else
/// `rawOutput` (a string, or a command's `aggregated_output` / `stdout`, or the JSON).
fn output_of(tc: &Value) -> String {
    let from_content: Vec<String> = tc
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| match s(c, "type") {
            Some("content") => {
                c.pointer("/content/text").and_then(Value::as_str).map(str::to_owned)
            }
            Some("diff") => Some(format!("diff {}", s(c, "path").unwrap_or(""))),
            _ => None,
        })
        .collect();
    if !from_content.is_empty() {
        return from_content.join("\n");
    }
    match tc.get("rawOutput") {
        Some(Value::String(t)) => t.clone(),
        Some(o @ Value::Object(_)) => ["aggregated_output", "stdout", "formatted_output"]
            .iter()
            .find_map(|k| s(o, k))
            .map_or_else(|| o.to_string(), str::to_owned),
        Some(other) if !other.is_null() => other.to_string(),
        _ => String::new(),
    }
}

/// Whether `tool` is only a guess from the protocol's `kind` (or nothing at all).
fn unnamed(tool: &ToolName) -> bool {
    tool.claude == tool.native && acp_kind_tool(&tool.native).is_none()
}

/// Notes in `tc._meta.herd` the tool an earlier `tool_call` update named, when `tc` (a
/// permission request's `toolCall`) does not name one itself: claude-code-acp names its tools
/// only in updates. The event then carries everything [`permission_request`] needs.
pub(crate) fn note_tool(tc: &mut Value, known: &ToolName) {
    if unnamed(&tool_of(tc)) && tc.is_object() {
        tc["_meta"]["herd"] = json!({"tool": known.claude, "nativeTool": known.native});
    }
}

/// A `session/request_permission` (id as its key) in neutral terms.
pub(crate) fn permission_request(request_id: String, params: &Value) -> PermissionRequest {
    let tc = params.get("toolCall").unwrap_or(&Value::Null);
    let tool = tool_of(tc);
    let options = params
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| {
            Some(PermissionOption {
                id: s(o, "optionId")?.to_owned(),
                kind: s(o, "kind").unwrap_or("").to_owned(),
                name: s(o, "name").unwrap_or("").to_owned(),
            })
        })
        .collect();
    PermissionRequest {
        request_id,
        input: input_of(tc, &tool),
        tool,
        tool_use_id: s(tc, "toolCallId").map(str::to_owned),
        agent_id: None,
        title: s(tc, "title").map(str::to_owned),
        options,
    }
}

/// Per-session update state: announced tool calls (with the input announced), turn counting,
/// and the text of the current answer.
#[derive(Debug, Default)]
pub(crate) struct Updates {
    announced: HashMap<String, Value>,
    /// The tool each announced call is.
    names: HashMap<String, ToolName>,
    pub turns: u32,
    in_response: bool,
    /// Agent text since the last tool call: the answer when the prompt ends.
    pub answer: String,
}

impl Updates {
    fn model_output(&mut self) {
        if !self.in_response {
            self.turns += 1;
            self.in_response = true;
            self.answer.clear();
        }
    }

    /// The tool the call `id` was announced as.
    pub fn name_of(&self, id: &str) -> Option<&ToolName> {
        self.names.get(id)
    }

    /// A `ToolCall` for `tc` unless it was announced with the same input already (agents send
    /// a call again once its input is known, or first inside a permission request).
    pub fn tool_call(&mut self, tc: &Value) -> Option<AgentEvent> {
        let id = s(tc, "toolCallId")?.to_owned();
        let own = tool_of(tc);
        let tool = match self.names.get(&id) {
            // A later message without the tool's name keeps the name it was announced with.
            Some(k) if unnamed(&own) => k.clone(),
            _ => own,
        };
        self.names.insert(id.clone(), tool.clone());
        let input = input_of(tc, &tool);
        if self.announced.get(&id) == Some(&input) {
            return None;
        }
        self.model_output();
        self.announced.insert(id.clone(), input.clone());
        let cli_tool = (tool.native != tool.claude).then_some(tool.native);
        Some(AgentEvent::ToolCall { id, name: tool.claude, input, cli_tool })
    }

    /// The events of one `session/update`'s `update` object.
    pub fn update(&mut self, update: &Value, raw: &[u8]) -> Vec<AgentEvent> {
        let kind = s(update, "sessionUpdate").unwrap_or("");
        let text = || update.pointer("/content/text").and_then(Value::as_str).map(str::to_owned);
        match kind {
            "agent_message_chunk" => {
                let Some(t) = text() else { return vec![unknown(raw)] };
                self.model_output();
                self.answer.push_str(&t);
                vec![AgentEvent::Text { text: t }]
            }
            "agent_thought_chunk" => {
                self.model_output();
                vec![AgentEvent::Thinking { text: text().unwrap_or_default() }]
            }
            "user_message_chunk" => vec![AgentEvent::UserText { text: text().unwrap_or_default() }],
            "tool_call" => {
                let call = self.tool_call(update);
                let mut evs: Vec<AgentEvent> = call.into_iter().collect();
                evs.extend(self.finished(update));
                if evs.is_empty() {
                    evs.push(AgentEvent::System { subtype: "tool_call".into() });
                }
                evs
            }
            "tool_call_update" => {
                let mut evs = Vec::new();
                let id = s(update, "toolCallId").unwrap_or("");
                if !self.announced.contains_key(id) {
                    evs.extend(self.tool_call(update));
                }
                evs.extend(self.finished(update));
                if evs.is_empty() {
                    evs.push(AgentEvent::System { subtype: "tool_call_update".into() });
                }
                evs
            }
            "plan" => {
                let entries = update.get("entries").and_then(Value::as_array);
                let description = entries
                    .into_iter()
                    .flatten()
                    .map(|e| {
                        format!(
                            "[{}] {}",
                            s(e, "status").unwrap_or("?"),
                            s(e, "content").unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                vec![AgentEvent::Task {
                    subtype: "plan".into(),
                    task_id: None,
                    description: Some(description),
                    status: None,
                }]
            }
            "" => vec![unknown(raw)],
            other => vec![AgentEvent::System { subtype: other.to_owned() }],
        }
    }

    /// A `ToolResult` when `tc` reports the call finished (`completed` or `failed`).
    fn finished(&mut self, tc: &Value) -> Option<AgentEvent> {
        let status = s(tc, "status")?;
        if !matches!(status, "completed" | "failed") {
            return None;
        }
        self.in_response = false;
        Some(AgentEvent::ToolResult {
            tool_use_id: s(tc, "toolCallId").unwrap_or("").to_owned(),
            content: output_of(tc),
            is_error: status == "failed",
        })
    }
}

fn unknown(raw: &[u8]) -> AgentEvent {
    AgentEvent::Unknown { raw: String::from_utf8_lossy(raw).into_owned() }
}

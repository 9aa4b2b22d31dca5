//! The tolerant decoder for Claude Code's stream-json output (protocols.md §1.1).
//! Typed where the shape is known, `Unknown` with the raw line where not; never panics.

use herd_core::{AgentEvent, Decoded, PermissionDenial, ResultInfo, ResultKind, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::Decoder;
use crate::lenient::{Lenient, Scalar, not_typed};

type LStr = Scalar<String>;

#[derive(Deserialize, Default)]
#[serde(default)]
struct Line {
    #[serde(rename = "type")]
    ty: LStr,
    subtype: LStr,
    message: Option<Message>,
    parent_tool_use_id: LStr,
    session_id: LStr,
    // system/init
    model: LStr,
    tools: Lenient<Vec<String>>,
    // system/api_retry
    attempt: Scalar<u32>,
    max_retries: Scalar<u32>,
    error_status: Scalar<u16>,
    error: LStr,
    // system/task_*
    task_id: LStr,
    description: LStr,
    status: LStr,
    patch: Option<Value>,
    // result
    is_error: Scalar<bool>,
    api_error_status: Scalar<u16>,
    result: LStr,
    num_turns: Scalar<u32>,
    total_cost_usd: Scalar<f64>,
    duration_ms: Scalar<u64>,
    usage: Option<LUsage>,
    permission_denials: Lenient<Vec<PermissionDenial>>,
    errors: Lenient<Vec<String>>,
    terminal_reason: LStr,
    // stream_event
    event: Option<StreamEv>,
    // control_request / control_response
    request_id: LStr,
    request: Option<Value>,
    response: Option<Value>,
}

/// Usage, field by field lenient, without building a `Value`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct LUsage {
    input_tokens: Scalar<u64>,
    output_tokens: Scalar<u64>,
    cache_creation_input_tokens: Scalar<u64>,
    cache_read_input_tokens: Scalar<u64>,
}

impl LUsage {
    fn get(self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.0.unwrap_or(0),
            output_tokens: self.output_tokens.0.unwrap_or(0),
            cache_creation_input_tokens: self.cache_creation_input_tokens.0.unwrap_or(0),
            cache_read_input_tokens: self.cache_read_input_tokens.0.unwrap_or(0),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamEv {
    #[serde(rename = "type")]
    ty: LStr,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Message {
    id: LStr,
    model: LStr,
    content: Option<Content>,
    usage: Option<LUsage>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Block>),
    Other(serde::de::IgnoredAny),
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Block {
    #[serde(rename = "type")]
    ty: LStr,
    text: LStr,
    thinking: LStr,
    id: LStr,
    name: LStr,
    input: Value,
    tool_use_id: LStr,
    content: Value,
    is_error: Scalar<bool>,
}

/// Decoder state: turn counting and running usage.
#[derive(Debug, Default)]
pub struct ClaudeDecoder {
    turns: u32,
    last_message_id: Option<String>,
    usage: Usage,
}

impl Decoder for ClaudeDecoder {
    fn decode(&mut self, line: &[u8], out: &mut Vec<Decoded>) {
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return;
        }
        match serde_json::from_slice::<Line>(trimmed) {
            Ok(l) => self.decode_line(l, trimmed, out),
            Err(e) => out.push(Decoded::top(not_typed(trimmed, &e))),
        }
    }

    fn turns(&self) -> u32 {
        self.turns
    }

    fn usage(&self) -> Usage {
        self.usage
    }
}

fn unknown(line: &[u8]) -> AgentEvent {
    AgentEvent::Unknown { raw: String::from_utf8_lossy(line).into_owned() }
}

/// Tool-result content as text: a string, or the text blocks of a list joined by newlines.
fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl ClaudeDecoder {
    fn decode_line(&mut self, l: Line, raw: &[u8], out: &mut Vec<Decoded>) {
        let parent = l.parent_tool_use_id.0.clone();
        let push = |out: &mut Vec<Decoded>, event| {
            out.push(Decoded { parent_tool_use_id: parent.clone(), event })
        };
        let ty = l.ty.0.as_deref().unwrap_or("");
        match ty {
            "system" => {
                let sub = l.subtype.0.clone().unwrap_or_default();
                let ev = match sub.as_str() {
                    "init" => AgentEvent::Init {
                        native_session_id: l.session_id.get(),
                        model: l.model.get(),
                        tools: l.tools.get().unwrap_or_default(),
                    },
                    "api_retry" => AgentEvent::ApiRetry {
                        attempt: l.attempt.get(),
                        max_retries: l.max_retries.get(),
                        error_status: l.error_status.get(),
                        error: l.error.get(),
                    },
                    s if s.starts_with("task_") => AgentEvent::Task {
                        subtype: sub.clone(),
                        task_id: l.task_id.get(),
                        description: l.description.get(),
                        status: l.status.get().or_else(|| {
                            l.patch
                                .as_ref()
                                .and_then(|p| p.get("status"))
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                        }),
                    },
                    _ => AgentEvent::System { subtype: sub },
                };
                push(out, ev);
            }
            "assistant" => {
                let Some(msg) = l.message else { return push(out, unknown(raw)) };
                if parent.is_none()
                    && msg.model.0.as_deref() != Some("<synthetic>")
                    && let Some(id) = msg.id.0.as_deref()
                    && self.last_message_id.as_deref() != Some(id)
                {
                    self.turns += 1;
                    self.last_message_id = Some(id.to_owned());
                    if let Some(u) = msg.usage.map(LUsage::get) {
                        self.usage.add(&u);
                    }
                }
                blocks(msg.content, false, raw, &push, out);
            }
            "user" => {
                let Some(msg) = l.message else { return push(out, unknown(raw)) };
                blocks(msg.content, true, raw, &push, out);
            }
            "stream_event" => {
                let event_type = l.event.and_then(|e| e.ty.get()).unwrap_or_default();
                push(out, AgentEvent::StreamEvent { event_type });
            }
            "result" => {
                let subtype = match l.subtype.0.as_deref() {
                    Some("success") => ResultKind::Success,
                    Some("error_max_turns") => ResultKind::ErrorMaxTurns,
                    Some("error_during_execution") => ResultKind::ErrorDuringExecution,
                    other => ResultKind::Other(other.unwrap_or("").to_owned()),
                };
                let is_error = l.is_error.get().unwrap_or(subtype != ResultKind::Success);
                let usage = l.usage.map(LUsage::get).unwrap_or_default();
                self.usage = usage;
                push(
                    out,
                    AgentEvent::Result(ResultInfo {
                        subtype,
                        is_error,
                        text: l.result.get(),
                        api_error_status: l.api_error_status.get(),
                        errors: l.errors.get().unwrap_or_default(),
                        num_turns: l.num_turns.get(),
                        native_session_id: l.session_id.get(),
                        usage,
                        cost_usd: l.total_cost_usd.get(),
                        duration_ms: l.duration_ms.get(),
                        permission_denials: l.permission_denials.get().unwrap_or_default(),
                        terminal_reason: l.terminal_reason.get(),
                    }),
                );
            }
            "control_request" => {
                let request = l.request.unwrap_or(Value::Null);
                let subtype =
                    request.get("subtype").and_then(Value::as_str).unwrap_or_default().to_owned();
                let request_id = l.request_id.get().unwrap_or_default();
                push(out, AgentEvent::ControlRequest { request_id, subtype, request });
            }
            "control_response" => {
                let resp = l.response.unwrap_or(Value::Null);
                let field = |k: &str| resp.get(k).and_then(Value::as_str).map(str::to_owned);
                push(
                    out,
                    AgentEvent::ControlResponse {
                        request_id: field("request_id"),
                        subtype: field("subtype"),
                    },
                );
            }
            _ => push(out, unknown(raw)),
        }
    }
}

/// The events of a message's content; `user_side` text is the user's, not the model's.
fn blocks(
    content: Option<Content>,
    user_side: bool,
    raw: &[u8],
    push: &dyn Fn(&mut Vec<Decoded>, AgentEvent),
    out: &mut Vec<Decoded>,
) {
    match content {
        Some(Content::Text(text)) => push(out, AgentEvent::UserText { text }),
        Some(Content::Blocks(blocks)) => {
            for b in blocks {
                let ev = match b.ty.0.as_deref().unwrap_or("") {
                    "text" => match b.text.get() {
                        Some(text) if user_side => AgentEvent::UserText { text },
                        Some(text) => AgentEvent::Text { text },
                        None => unknown(raw),
                    },
                    "thinking" => AgentEvent::Thinking {
                        text: b.thinking.get().or(b.text.get()).unwrap_or_default(),
                    },
                    "tool_use" => AgentEvent::ToolCall {
                        id: b.id.get().unwrap_or_default(),
                        name: b.name.get().unwrap_or_default(),
                        input: b.input,
                        cli_tool: None,
                    },
                    "tool_result" => AgentEvent::ToolResult {
                        tool_use_id: b.tool_use_id.get().unwrap_or_default(),
                        content: content_text(&b.content),
                        is_error: b.is_error.get().unwrap_or(false),
                    },
                    _ => unknown(raw),
                };
                push(out, ev);
            }
        }
        Some(Content::Other(_)) | None => push(out, unknown(raw)),
    }
}

#[cfg(test)]
mod tests;

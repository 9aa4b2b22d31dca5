//! The tolerant decoder for gemini's `-o stream-json` (protocols.md §3.1): init, message,
//! tool_use, tool_result, error and result into herd events; unknown lines kept, never a panic.

use herd_core::{AgentEvent, Decoded, ResultInfo, ResultKind, Usage};
use serde::Deserialize;
use serde_json::Value;

use crate::Decoder;
use crate::api_error::http_status;
use crate::lenient::{Scalar, not_typed};
use crate::tools::{claude_input, gemini_tool};

type LStr = Scalar<String>;

#[derive(Deserialize, Default)]
#[serde(default)]
struct Line {
    #[serde(rename = "type")]
    ty: LStr,
    // init
    session_id: LStr,
    model: LStr,
    // message
    role: LStr,
    content: LStr,
    // tool_use / tool_result
    tool_name: LStr,
    tool_id: LStr,
    parameters: Value,
    status: LStr,
    output: LStr,
    error: Option<ErrorObj>,
    // error
    severity: LStr,
    message: LStr,
    // result
    stats: Option<Stats>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorObj {
    #[serde(rename = "type")]
    ty: LStr,
    message: LStr,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Stats {
    input_tokens: Scalar<u64>,
    /// Input tokens not served from the cache (0.61.0 reports it beside `input_tokens`).
    input: Scalar<u64>,
    output_tokens: Scalar<u64>,
    cached: Scalar<u64>,
    duration_ms: Scalar<u64>,
}

impl Stats {
    fn usage(&self) -> Usage {
        let cached = self.cached.0.unwrap_or(0);
        let input =
            self.input.0.unwrap_or_else(|| self.input_tokens.0.unwrap_or(0).saturating_sub(cached));
        Usage {
            input_tokens: input,
            output_tokens: self.output_tokens.0.unwrap_or(0),
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
        }
    }
}

/// Decoder state: turn counting, the answer's text since the last tool, errors, usage.
#[derive(Debug, Default)]
pub struct GeminiDecoder {
    session_id: Option<String>,
    turns: u32,
    in_response: bool,
    /// Assistant text since the last tool call: the final answer once `result` arrives.
    answer: String,
    errors: Vec<String>,
    usage: Usage,
}

impl Decoder for GeminiDecoder {
    fn decode(&mut self, line: &[u8], out: &mut Vec<Decoded>) {
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return;
        }
        match serde_json::from_slice::<Line>(trimmed) {
            Ok(l) => {
                let ev = self.decode_line(l, trimmed);
                out.push(Decoded::top(ev));
            }
            Err(e) => out.push(Decoded::top(not_typed(trimmed, &e))),
        }
    }

    /// Model responses: a response starts at the first assistant text or tool call after the
    /// prompt or a tool result.
    fn turns(&self) -> u32 {
        self.turns
    }

    /// Usage is only reported at the end (`result.stats`).
    fn usage(&self) -> Usage {
        self.usage
    }
}

impl GeminiDecoder {
    fn model_output(&mut self) {
        if !self.in_response {
            self.turns += 1;
            self.in_response = true;
            self.answer.clear();
        }
    }

    fn decode_line(&mut self, l: Line, raw: &[u8]) -> AgentEvent {
        match l.ty.0.as_deref().unwrap_or("") {
            "init" => {
                self.session_id = l.session_id.get();
                AgentEvent::Init {
                    native_session_id: self.session_id.clone(),
                    model: l.model.get(),
                    tools: Vec::new(),
                }
            }
            "message" => {
                let text = l.content.get().unwrap_or_default();
                if l.role.0.as_deref() == Some("assistant") {
                    self.model_output();
                    self.answer.push_str(&text);
                    AgentEvent::Text { text }
                } else {
                    self.in_response = false;
                    AgentEvent::UserText { text }
                }
            }
            "tool_use" => {
                self.model_output();
                let tool = gemini_tool(l.tool_name.0.as_deref().unwrap_or(""));
                AgentEvent::ToolCall {
                    id: l.tool_id.get().unwrap_or_default(),
                    input: claude_input(&tool.claude, &l.parameters),
                    cli_tool: (tool.native != tool.claude).then(|| tool.native.clone()),
                    name: tool.claude,
                }
            }
            "tool_result" => {
                self.in_response = false;
                let is_error = l.status.0.as_deref() != Some("success");
                let content = match (l.output.get(), l.error.and_then(|e| e.message.get())) {
                    (_, Some(err)) if is_error => err,
                    (Some(out), _) => out,
                    (None, err) => err.unwrap_or_default(),
                };
                AgentEvent::ToolResult {
                    tool_use_id: l.tool_id.get().unwrap_or_default(),
                    content,
                    is_error,
                }
            }
            "error" => {
                let severity = l.severity.get().unwrap_or_else(|| "error".into());
                if let Some(m) = l.message.get() {
                    self.errors.push(m);
                }
                AgentEvent::System { subtype: severity }
            }
            "result" => {
                if let Some(s) = &l.stats {
                    self.usage.add(&s.usage());
                }
                AgentEvent::Result(self.result(&l))
            }
            _ => AgentEvent::Unknown { raw: String::from_utf8_lossy(raw).into_owned() },
        }
    }

    fn result(&self, l: &Line) -> ResultInfo {
        let success = l.status.0.as_deref() == Some("success");
        let error_type = l.error.as_ref().and_then(|e| e.ty.0.clone());
        let error_message = l.error.as_ref().and_then(|e| e.message.0.clone());
        let subtype = match (success, error_type.as_deref()) {
            (true, _) => ResultKind::Success,
            (false, Some("FatalTurnLimitedError")) => ResultKind::ErrorMaxTurns,
            (false, _) => ResultKind::ErrorDuringExecution,
        };
        let mut errors = if success { Vec::new() } else { self.errors.clone() };
        errors.extend(error_message.clone().filter(|_| !success));
        ResultInfo {
            subtype,
            is_error: !success,
            text: if success { Some(self.answer.clone()) } else { error_message.clone() },
            api_error_status: error_message.as_deref().and_then(http_status),
            errors,
            num_turns: Some(self.turns),
            native_session_id: self.session_id.clone(),
            usage: self.usage,
            cost_usd: None,
            duration_ms: l.stats.as_ref().and_then(|s| s.duration_ms.0),
            permission_denials: Vec::new(),
            terminal_reason: error_type,
        }
    }
}

#[cfg(test)]
mod tests;

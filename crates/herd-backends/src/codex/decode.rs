//! The tolerant decoder for `codex exec --json` (protocols.md §2.1): thread, turn and item
//! events into herd events, turn counting and usage; unknown lines kept raw, never a panic.

use std::collections::HashSet;

use herd_core::{AgentEvent, Decoded, ResultInfo, ResultKind, Usage};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Decoder;
use crate::api_error::http_status;
use crate::lenient::Scalar;
use crate::tools::{claude_input, codex_tool};

type LStr = Scalar<String>;

#[derive(Deserialize, Default)]
#[serde(default)]
struct Line {
    #[serde(rename = "type")]
    ty: LStr,
    thread_id: LStr,
    item: Option<Item>,
    usage: Option<LUsage>,
    error: Option<ErrorObj>,
    message: LStr,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorObj {
    message: LStr,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct LUsage {
    input_tokens: Scalar<u64>,
    cached_input_tokens: Scalar<u64>,
    cache_write_input_tokens: Scalar<u64>,
    output_tokens: Scalar<u64>,
}

impl LUsage {
    /// In herd's (Anthropic's) terms: `input_tokens` without the cached part, which is
    /// `cache_read_input_tokens`; OpenAI counts reasoning tokens inside `output_tokens`.
    fn get(&self) -> Usage {
        let input = self.input_tokens.0.unwrap_or(0);
        let cached = self.cached_input_tokens.0.unwrap_or(0);
        Usage {
            input_tokens: input.saturating_sub(cached),
            output_tokens: self.output_tokens.0.unwrap_or(0),
            cache_creation_input_tokens: self.cache_write_input_tokens.0.unwrap_or(0),
            cache_read_input_tokens: cached,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Item {
    id: LStr,
    #[serde(rename = "type")]
    ty: LStr,
    status: LStr,
    // agent_message, reasoning, error
    text: LStr,
    message: LStr,
    // command_execution
    command: LStr,
    aggregated_output: LStr,
    exit_code: Scalar<i64>,
    // file_change
    changes: Value,
    // mcp_tool_call
    server: LStr,
    tool: LStr,
    arguments: Value,
    result: Value,
    error: Value,
    // web_search
    query: LStr,
    // todo_list
    items: Value,
}

/// Decoder state: the thread id, tool items already announced, turn counting, usage, and the
/// text and errors the terminal event reports.
#[derive(Debug, Default)]
pub struct CodexDecoder {
    thread_id: Option<String>,
    announced: HashSet<String>,
    turns: u32,
    /// Inside a model response (no tool item completed since its first item).
    in_response: bool,
    last_text: Option<String>,
    errors: Vec<String>,
    usage: Usage,
}

impl Decoder for CodexDecoder {
    fn decode(&mut self, line: &[u8], out: &mut Vec<Decoded>) {
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return;
        }
        match serde_json::from_slice::<Line>(trimmed) {
            Ok(l) => self.decode_line(l, trimmed, out),
            Err(e) => out.push(Decoded::top(crate::lenient::not_typed(trimmed, &e))),
        }
    }

    /// Model responses seen, a lower bound: codex's stream shows items, not API calls. A new
    /// response starts at the first item after a tool item completed; a response whose tool
    /// call the sandbox refused leaves no item at all (protocols.md §2.2) and is not counted.
    fn turns(&self) -> u32 {
        self.turns
    }

    fn usage(&self) -> Usage {
        self.usage
    }
}

/// `Reconnecting... 2/5 (…)` -> (2, 5).
fn retry_counts(message: &str) -> Option<(u32, u32)> {
    let rest = message.strip_prefix("Reconnecting... ")?;
    let frac = rest.split_whitespace().next()?;
    let (a, b) = frac.split_once('/')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn unknown(raw: &[u8]) -> AgentEvent {
    AgentEvent::Unknown { raw: String::from_utf8_lossy(raw).into_owned() }
}

/// The text of an MCP result's `content` blocks.
fn mcp_text(result: &Value) -> String {
    match result.get("content") {
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) if !other.is_null() => other.to_string(),
        _ => String::new(),
    }
}

impl CodexDecoder {
    fn decode_line(&mut self, l: Line, raw: &[u8], out: &mut Vec<Decoded>) {
        let mut push = |event| out.push(Decoded::top(event));
        match l.ty.0.as_deref().unwrap_or("") {
            "thread.started" => {
                self.thread_id = l.thread_id.get();
                push(AgentEvent::Init {
                    native_session_id: self.thread_id.clone(),
                    model: None,
                    tools: Vec::new(),
                });
            }
            "turn.started" => {
                self.in_response = false;
                push(AgentEvent::System { subtype: "turn.started".into() });
            }
            ty @ ("item.started" | "item.updated" | "item.completed") => {
                let Some(item) = l.item else { return push(unknown(raw)) };
                for ev in self.item(ty, item, raw) {
                    push(ev);
                }
            }
            "turn.completed" => {
                if let Some(u) = &l.usage {
                    self.usage.add(&u.get());
                }
                push(AgentEvent::Result(self.result(ResultKind::Success, None)));
            }
            "turn.failed" => {
                let message = l.error.and_then(|e| e.message.get()).unwrap_or_default();
                push(AgentEvent::Result(
                    self.result(ResultKind::ErrorDuringExecution, Some(message)),
                ));
            }
            "error" => {
                let message = l.message.get().unwrap_or_default();
                match retry_counts(&message) {
                    Some((attempt, max)) => push(AgentEvent::ApiRetry {
                        attempt: Some(attempt),
                        max_retries: Some(max),
                        error_status: http_status(&message),
                        error: Some(message),
                    }),
                    None => {
                        self.errors.push(message);
                        push(AgentEvent::System { subtype: "error".into() });
                    }
                }
            }
            _ => push(unknown(raw)),
        }
    }

    /// The terminal result: success on `turn.completed` only; a failure carries the turn's
    /// error messages and the API status they name.
    fn result(&self, subtype: ResultKind, failure: Option<String>) -> ResultInfo {
        let is_error = failure.is_some();
        let mut errors = self.errors.clone();
        if let Some(m) = &failure
            && errors.last() != Some(m)
        {
            errors.push(m.clone());
        }
        if !is_error {
            errors.clear();
        }
        ResultInfo {
            subtype,
            is_error,
            text: if is_error { failure.clone() } else { self.last_text.clone() },
            api_error_status: failure.as_deref().and_then(http_status),
            errors,
            num_turns: Some(self.turns),
            native_session_id: self.thread_id.clone(),
            usage: self.usage,
            cost_usd: None,
            duration_ms: None,
            permission_denials: Vec::new(),
            terminal_reason: None,
        }
    }

    /// The events of one item event (`started`, `updated`, `completed`).
    fn item(&mut self, event: &str, item: Item, raw: &[u8]) -> Vec<AgentEvent> {
        let id = item.id.0.clone().unwrap_or_default();
        let ty = item.ty.0.clone().unwrap_or_default();
        let completed = event == "item.completed";
        let is_tool = matches!(
            ty.as_str(),
            "command_execution" | "file_change" | "mcp_tool_call" | "web_search" | "todo_list"
        );
        let model_output = is_tool || matches!(ty.as_str(), "agent_message" | "reasoning");
        let first_sight = self.announced.insert(id.clone());
        if model_output && first_sight && !self.in_response {
            self.turns += 1;
            self.in_response = true;
        }
        if is_tool && completed {
            self.in_response = false;
        }
        let mut evs = Vec::new();
        match ty.as_str() {
            "agent_message" if completed => {
                let text = item.text.get().unwrap_or_default();
                self.last_text = Some(text.clone());
                evs.push(AgentEvent::Text { text });
            }
            "reasoning" if completed => {
                evs.push(AgentEvent::Thinking { text: item.text.get().unwrap_or_default() })
            }
            "agent_message" | "reasoning" => evs.push(AgentEvent::System { subtype: event.into() }),
            "error" => {
                let message = item.message.get().unwrap_or_default();
                evs.push(AgentEvent::System { subtype: "error".into() });
                self.errors.push(message);
            }
            _ if is_tool => {
                if first_sight {
                    evs.push(tool_call(&id, &ty, &item));
                }
                if completed {
                    evs.push(tool_result(id, &ty, &item));
                } else if !first_sight {
                    evs.push(AgentEvent::System { subtype: event.into() });
                }
            }
            _ => evs.push(unknown(raw)),
        }
        evs
    }
}

/// A tool item's call, named in Claude's vocabulary (MCP tools as `mcp__server__tool`).
fn tool_call(id: &str, ty: &str, item: &Item) -> AgentEvent {
    let (name, input) = match ty {
        "command_execution" => {
            let cmd = item.command.0.clone().unwrap_or_default();
            ("Bash".to_owned(), claude_input("Bash", &json!({"cmd": cmd})))
        }
        "file_change" => {
            let first = item.changes.get(0).and_then(|c| c.get("path")).cloned();
            let mut input = json!({"changes": item.changes});
            if let Some(p) = first {
                input["file_path"] = p;
            }
            (codex_tool(ty).claude, input)
        }
        "mcp_tool_call" => {
            let server = item.server.0.as_deref().unwrap_or("");
            let tool = item.tool.0.as_deref().unwrap_or("");
            (format!("mcp__{server}__{tool}"), item.arguments.clone())
        }
        "web_search" => ("WebSearch".to_owned(), json!({"query": item.query.0})),
        _ => (codex_tool(ty).claude, json!({"items": item.items})),
    };
    let cli_tool = (name != ty).then(|| ty.to_owned());
    AgentEvent::ToolCall { id: id.to_owned(), name, input, cli_tool }
}

/// A completed tool item's result; failed when codex says so or the command exited non-zero.
fn tool_result(id: String, ty: &str, item: &Item) -> AgentEvent {
    let failed = item.status.0.as_deref().is_some_and(|s| s != "completed")
        || item.exit_code.0.is_some_and(|c| c != 0)
        || !item.error.is_null();
    let content = match ty {
        "command_execution" => item.aggregated_output.0.clone().unwrap_or_default(),
        "file_change" => item
            .changes
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
                        format!("{} {}", s("kind"), s("path"))
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default(),
        "mcp_tool_call" => match item.error.get("message").and_then(Value::as_str) {
            Some(m) => m.to_owned(),
            None => mcp_text(&item.result),
        },
        _ => String::new(),
    };
    AgentEvent::ToolResult { tool_use_id: id, content, is_error: failed }
}

#[cfg(test)]
mod tests;

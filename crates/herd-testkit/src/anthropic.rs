//! Anthropic Messages API wire shapes the mock emits: message objects, the SSE event stream,
//! error bodies and token counts.

use serde_json::{Value, json};

/// Fixed usage figures reported for every mock message.
pub(crate) const INPUT_TOKENS: u64 = 12;
pub(crate) const OUTPUT_TOKENS: u64 = 5;

/// One content block of a mock assistant message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Block {
    Text(String),
    ToolUse { id: String, name: String, input: Value },
}

/// A complete mock assistant message.
#[derive(Clone, Debug)]
pub(crate) struct Message {
    pub id: String,
    pub model: String,
    pub blocks: Vec<Block>,
}

impl Message {
    fn stop_reason(&self) -> &'static str {
        if self.blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
            "tool_use"
        } else {
            "end_turn"
        }
    }

    fn block_json(block: &Block) -> Value {
        match block {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::ToolUse { id, name, input } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        }
    }

    /// The non-streaming response body.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.blocks.iter().map(Self::block_json).collect::<Vec<_>>(),
            "stop_reason": self.stop_reason(),
            "stop_sequence": null,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
        })
    }

    /// The whole `text/event-stream` body of a streaming response.
    pub fn to_sse(&self) -> String {
        let mut out = String::new();
        let mut event = |data: Value| {
            let name = data.get("type").and_then(Value::as_str).unwrap_or("unknown").to_owned();
            out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
        };
        event(json!({"type": "message_start", "message": {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1},
        }}));
        for (index, block) in self.blocks.iter().enumerate() {
            match block {
                Block::Text(text) => {
                    event(json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": ""}}));
                    event(json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": text}}));
                }
                Block::ToolUse { id, name, input } => {
                    event(json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}));
                    // Two fragments, so clients must concatenate like with the real API.
                    let input = input.to_string();
                    let (head, tail) = split_in_two(&input);
                    for part in [head, tail].into_iter().filter(|p| !p.is_empty()) {
                        event(json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": part}}));
                    }
                }
            }
            event(json!({"type": "content_block_stop", "index": index}));
        }
        event(json!({"type": "message_delta",
            "delta": {"stop_reason": self.stop_reason(), "stop_sequence": null},
            "usage": {"output_tokens": OUTPUT_TOKENS}}));
        event(json!({"type": "message_stop"}));
        out
    }
}

/// Splits `s` near its middle on a char boundary.
fn split_in_two(s: &str) -> (&str, &str) {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    s.split_at(mid)
}

/// The Anthropic error `type` for an HTTP status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// An Anthropic-style error body.
pub(crate) fn error_json(status: u16, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
}

/// A rough `count_tokens` answer: about four bytes of request body per token.
pub(crate) fn count_tokens_json(body_len: usize) -> Value {
    json!({"input_tokens": (body_len / 4).max(1)})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Message {
        Message {
            id: "msg_mock_1".into(),
            model: "m".into(),
            blocks: vec![
                Block::Text("hé".into()),
                Block::ToolUse {
                    id: "toolu_mock_2".into(),
                    name: "Bash".into(),
                    input: json!({"command": "ls ü"}),
                },
            ],
        }
    }

    #[test]
    fn sse_events_in_order_and_input_reassembles() {
        let sse = message().to_sse();
        let events: Vec<Value> = sse
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(name.strip_prefix("event: ").unwrap(), data["type"]);
                data
            })
            .collect();
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let partial: String =
            events.iter().filter_map(|e| e["delta"]["partial_json"].as_str()).collect();
        assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), json!({"command": "ls ü"}));
        assert_eq!(events[8]["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn json_message_and_errors() {
        let m = message().to_json();
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(m["content"][1]["id"], "toolu_mock_2");
        assert_eq!(error_json(500, "x")["error"]["type"], "api_error");
        assert_eq!(error_json(429, "x")["error"]["type"], "rate_limit_error");
    }
}

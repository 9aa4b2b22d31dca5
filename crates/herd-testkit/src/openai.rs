//! OpenAI Responses API shapes for codex (protocols.md §2.0): reading a request's `input` (marker,
//! model turns, last tool output) and writing one response as SSE or JSON, plus error bodies.

use serde_json::{Value, json};

use crate::conversation::find_marker;
use crate::script::Reply;

/// Fixed usage figures reported for every mock response.
pub(crate) const INPUT_TOKENS: u64 = 12;
pub(crate) const OUTPUT_TOKENS: u64 = 7;

fn input(body: &Value) -> &[Value] {
    body.get("input").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn item_type(item: &Value) -> &str {
    // A message may come without `type` (the API accepts `{role, content}` alone).
    match item.get("type").and_then(Value::as_str) {
        Some(t) => t,
        None if item.get("role").is_some() => "message",
        None => "",
    }
}

fn role(item: &Value) -> Option<&str> {
    item.get("role").and_then(Value::as_str)
}

/// The text pieces of a message `content`: a string, or the `text` of each part.
fn texts(content: &Value) -> Vec<&str> {
    match content {
        Value::String(s) => vec![s.as_str()],
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect()
        }
        _ => Vec::new(),
    }
}

/// Items the model itself produced (one response is a run of them).
fn is_model_output(item: &Value) -> bool {
    match item_type(item) {
        "message" => role(item) == Some("assistant"),
        "function_call" | "custom_tool_call" | "local_shell_call" | "reasoning"
        | "web_search_call" | "tool_search_call" => true,
        _ => false,
    }
}

/// The first `SCENARIO=` marker in the text of the request's user messages (codex sends its
/// `<environment_context>` as a user message before the prompt).
pub(crate) fn scenario_marker(body: &Value) -> Option<String> {
    input(body)
        .iter()
        .filter(|i| item_type(i) == "message" && role(i) == Some("user"))
        .filter_map(|i| i.get("content"))
        .flat_map(texts)
        .find_map(find_marker)
        .map(str::to_owned)
}

/// How many model responses the request's history holds: runs of consecutive model output
/// items (an assistant message, reasoning and tool calls of one response sit together).
pub(crate) fn assistant_turns(body: &Value) -> usize {
    let mut turns = 0;
    let mut in_run = false;
    for item in input(body) {
        let model = is_model_output(item);
        if model && !in_run {
            turns += 1;
        }
        in_run = model;
    }
    turns
}

/// The output of the last tool call in the history: a string `output`, or its text parts
/// joined by newlines.
pub(crate) fn last_tool_result(body: &Value) -> Option<String> {
    input(body)
        .iter()
        .rfind(|i| matches!(item_type(i), "function_call_output" | "custom_tool_call_output"))
        .map(|i| match i.get("output") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => {
                o.get("content").map(|c| texts(c).join("\n")).unwrap_or_default()
            }
            Some(other) => texts(other).join("\n"),
            None => String::new(),
        })
}

/// One output item of a mock response.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    Message { id: String, text: String },
    FunctionCall { id: String, call_id: String, name: String, arguments: String },
    CustomToolCall { id: String, call_id: String, name: String, input: String },
}

impl Item {
    fn json(&self, done: bool) -> Value {
        let status = if done { "completed" } else { "in_progress" };
        match self {
            Item::Message { id, text } => json!({
                "id": id, "type": "message", "status": status, "role": "assistant",
                "content": if done {
                    json!([{"type": "output_text", "text": text, "annotations": []}])
                } else {
                    json!([])
                },
            }),
            Item::FunctionCall { id, call_id, name, arguments } => json!({
                "id": id, "type": "function_call", "status": status, "call_id": call_id,
                "name": name, "arguments": if done { arguments.as_str() } else { "" },
            }),
            Item::CustomToolCall { id, call_id, name, input } => json!({
                "id": id, "type": "custom_tool_call", "status": status, "call_id": call_id,
                "name": name, "input": if done { input.as_str() } else { "" },
            }),
        }
    }
}

/// A complete mock response.
#[derive(Clone, Debug)]
pub(crate) struct Response {
    pub id: String,
    pub model: String,
    pub items: Vec<Item>,
}

impl Response {
    /// The items of a scripted (already rendered) reply; `next_id` gives unique numbers.
    /// `None` for an HTTP error reply.
    pub fn from_reply(
        id: String,
        model: String,
        reply: Reply,
        mut next_id: impl FnMut() -> u64,
    ) -> Option<Response> {
        let mut items = Vec::new();
        let mut message = |text: String, items: &mut Vec<Item>| {
            items.push(Item::Message { id: format!("msg_mock_{}", next_id()), text });
        };
        match reply {
            Reply::Text(text) => message(text, &mut items),
            Reply::ToolUse { text, name, input } => {
                if let Some(t) = text {
                    message(t, &mut items);
                }
                let n = next_id();
                let call_id = format!("call_mock_{n}");
                items.push(match input {
                    Value::String(input) => {
                        Item::CustomToolCall { id: format!("ctc_mock_{n}"), call_id, name, input }
                    }
                    args => Item::FunctionCall {
                        id: format!("fc_mock_{n}"),
                        call_id,
                        name,
                        arguments: args.to_string(),
                    },
                });
            }
            Reply::HttpError { .. } => return None,
        }
        Some(Response { id, model, items })
    }

    fn usage() -> Value {
        json!({
            "input_tokens": INPUT_TOKENS,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": OUTPUT_TOKENS,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
        })
    }

    fn envelope(&self, status: &str, output: Vec<Value>, usage: Value) -> Value {
        json!({
            "id": self.id, "object": "response", "created_at": 0, "status": status,
            "model": self.model, "output": output, "usage": usage,
        })
    }

    /// The non-streaming response body.
    pub fn to_json(&self) -> Value {
        let output = self.items.iter().map(|i| i.json(true)).collect();
        self.envelope("completed", output, Self::usage())
    }

    /// The whole `text/event-stream` body: created, in_progress, each item added / streamed in
    /// two deltas / done, then `response.completed` with usage.
    pub fn to_sse(&self) -> String {
        let mut out = String::new();
        let mut seq = 0u64;
        let mut event = |mut data: Value| {
            let name = data.get("type").and_then(Value::as_str).unwrap_or("unknown").to_owned();
            data["sequence_number"] = json!(seq);
            seq += 1;
            out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
        };
        let pending = self.envelope("in_progress", vec![], Value::Null);
        event(json!({"type": "response.created", "response": pending}));
        event(json!({"type": "response.in_progress", "response": pending}));
        for (index, item) in self.items.iter().enumerate() {
            event(json!({"type": "response.output_item.added", "output_index": index,
                "item": item.json(false)}));
            match item {
                Item::Message { id, text } => {
                    let part =
                        |t: &str| json!({"type": "output_text", "text": t, "annotations": []});
                    event(json!({"type": "response.content_part.added", "item_id": id,
                        "output_index": index, "content_index": 0, "part": part("")}));
                    for delta in halves(text) {
                        event(json!({"type": "response.output_text.delta", "item_id": id,
                            "output_index": index, "content_index": 0, "delta": delta}));
                    }
                    event(json!({"type": "response.output_text.done", "item_id": id,
                        "output_index": index, "content_index": 0, "text": text}));
                    event(json!({"type": "response.content_part.done", "item_id": id,
                        "output_index": index, "content_index": 0, "part": part(text)}));
                }
                Item::FunctionCall { id, arguments, .. } => {
                    for delta in halves(arguments) {
                        event(json!({"type": "response.function_call_arguments.delta",
                            "item_id": id, "output_index": index, "delta": delta}));
                    }
                    event(json!({"type": "response.function_call_arguments.done",
                        "item_id": id, "output_index": index, "arguments": arguments}));
                }
                Item::CustomToolCall { id, input, .. } => {
                    for delta in halves(input) {
                        event(json!({"type": "response.custom_tool_call_input.delta",
                            "item_id": id, "output_index": index, "delta": delta}));
                    }
                    event(json!({"type": "response.custom_tool_call_input.done",
                        "item_id": id, "output_index": index, "input": input}));
                }
            }
            event(json!({"type": "response.output_item.done", "output_index": index,
                "item": item.json(true)}));
        }
        let done = self.items.iter().map(|i| i.json(true)).collect();
        event(json!({"type": "response.completed",
            "response": self.envelope("completed", done, Self::usage())}));
        out
    }
}

/// `s` cut in two near its middle on a char boundary, empty halves left out (so clients must
/// concatenate deltas, as with the real API).
fn halves(s: &str) -> Vec<&str> {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    let (a, b) = s.split_at(mid);
    [a, b].into_iter().filter(|p| !p.is_empty()).collect()
}

/// An OpenAI-style error body.
pub(crate) fn error_json(status: u16, message: &str) -> Value {
    let ty = match status {
        400 | 404 | 413 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_exceeded",
        _ => "server_error",
    };
    json!({"error": {"type": ty, "message": message, "code": ty, "param": null}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(sse: &str) -> Vec<Value> {
        sse.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(name.strip_prefix("event: ").unwrap(), data["type"]);
                data
            })
            .collect()
    }

    #[test]
    fn request_reading() {
        let body = json!({"input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "SCENARIO=dev"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context/>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "SCENARIO=s1 go"}]},
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": "first"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "t"}]},
            {"type": "custom_tool_call", "name": "apply_patch", "input": "x", "call_id": "c2"},
            {"type": "custom_tool_call_output", "call_id": "c2",
             "output": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        ]});
        assert_eq!(scenario_marker(&body).as_deref(), Some("s1"));
        assert_eq!(assistant_turns(&body), 2);
        assert_eq!(last_tool_result(&body).as_deref(), Some("a\nb"));
        assert_eq!(assistant_turns(&Value::Null), 0);
        assert_eq!(scenario_marker(&json!({"input": "SCENARIO=x"})), None);
    }

    #[test]
    fn sse_streams_items_and_completes_with_usage() {
        let mut n = 0;
        let reply = Reply::ToolUse {
            text: Some("héllo".into()),
            name: "exec_command".into(),
            input: json!({"cmd": "echo hi"}),
        };
        let r = Response::from_reply("resp_1".into(), "gpt".into(), reply, || {
            n += 1;
            n
        })
        .unwrap();
        let ev = events(&r.to_sse());
        let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types.first(), Some(&"response.created"));
        assert_eq!(types.last(), Some(&"response.completed"));
        let text: String = ev
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(text, "héllo");
        let args: String = ev
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&args).unwrap(), json!({"cmd": "echo hi"}));
        let done = ev.last().unwrap();
        assert_eq!(done["response"]["usage"]["total_tokens"], INPUT_TOKENS + OUTPUT_TOKENS);
        assert_eq!(done["response"]["output"][1]["type"], "function_call");
        let seqs: Vec<u64> = ev.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));

        let patch =
            Reply::ToolUse { text: None, name: "apply_patch".into(), input: json!("*** P") };
        let r = Response::from_reply("r".into(), "m".into(), patch, || 7).unwrap();
        assert_eq!(r.to_json()["output"][0]["type"], "custom_tool_call");
        assert_eq!(r.to_json()["output"][0]["input"], "*** P");
        let err = Reply::HttpError { status: 500, message: "x".into() };
        assert!(Response::from_reply("r".into(), "m".into(), err, || 0).is_none());
        assert_eq!(error_json(500, "x")["error"]["type"], "server_error");
    }
}

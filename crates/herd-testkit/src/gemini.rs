//! Gemini API shapes for gemini-cli (protocols.md §3.0): routing `models/{model}:{action}`,
//! reading `contents`, streamed and one-shot answers, JSON-schema side calls, error bodies.

use serde_json::{Map, Value, json};

use crate::conversation::find_marker;
use crate::script::Reply;

/// Fixed usage figures reported for every mock answer.
pub(crate) const INPUT_TOKENS: u64 = 12;
pub(crate) const OUTPUT_TOKENS: u64 = 5;

/// What a `POST /v1beta/models/{model}:{action}` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    StreamGenerate,
    Generate,
    CountTokens,
    Other(String),
}

/// The model and action of a Gemini API path (`/v1beta/models/gemini-x:streamGenerateContent`),
/// or `None` when the path is not one.
pub(crate) fn route(path: &str) -> Option<(String, Action)> {
    let rest = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, action) = rest.rsplit_once(':')?;
    let action = match action {
        "streamGenerateContent" => Action::StreamGenerate,
        "generateContent" => Action::Generate,
        "countTokens" => Action::CountTokens,
        other => Action::Other(other.to_owned()),
    };
    Some((model.to_owned(), action))
}

fn contents(body: &Value) -> &[Value] {
    body.get("contents").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn role(c: &Value) -> Option<&str> {
    c.get("role").and_then(Value::as_str)
}

fn parts(c: &Value) -> &[Value] {
    c.get("parts").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The first `SCENARIO=` marker in the text parts of the user contents (gemini-cli may put its
/// session context in the first user content, before the prompt).
pub(crate) fn scenario_marker(body: &Value) -> Option<String> {
    contents(body)
        .iter()
        .filter(|c| role(c) == Some("user"))
        .flat_map(parts)
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .find_map(find_marker)
        .map(str::to_owned)
}

/// How many model contents the request's history holds.
pub(crate) fn assistant_turns(body: &Value) -> usize {
    contents(body).iter().filter(|c| role(c) == Some("model")).count()
}

/// The `response` of the last `functionResponse` part, as compact JSON.
pub(crate) fn last_tool_result(body: &Value) -> Option<String> {
    contents(body)
        .iter()
        .flat_map(parts)
        .filter_map(|p| p.get("functionResponse"))
        .next_back()
        .map(|f| f.get("response").map(Value::to_string).unwrap_or_default())
}

/// The response schema of a one-shot JSON call (gemini-cli's model router and other side
/// calls ask for `responseMimeType: application/json`).
pub(crate) fn json_schema(body: &Value) -> Option<&Value> {
    let config = body.get("generationConfig")?;
    if config.get("responseMimeType").and_then(Value::as_str) != Some("application/json") {
        return None;
    }
    Some(
        config
            .get("responseJsonSchema")
            .or_else(|| config.get("responseSchema"))
            .unwrap_or(&Value::Null),
    )
}

/// A value satisfying `schema` as far as gemini-cli's side calls need: the first enum value,
/// strings `"mock"`, numbers at their minimum (else 0), every declared property filled. Zero
/// matters: after 30 turns gemini asks the model whether the session loops and stops it at a
/// `confidence` of 0.9 or more.
pub(crate) fn value_for_schema(schema: &Value) -> Value {
    if let Some(first) = schema.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.clone();
    }
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("object").to_ascii_lowercase();
    match ty.as_str() {
        "string" => json!("mock"),
        "integer" | "number" => schema.get("minimum").cloned().unwrap_or(json!(0)),
        "boolean" => json!(false),
        "array" => json!([]),
        _ => {
            let props = schema.get("properties").and_then(Value::as_object);
            let filled: Map<String, Value> = props
                .into_iter()
                .flatten()
                .map(|(k, s)| (k.clone(), value_for_schema(s)))
                .collect();
            Value::Object(filled)
        }
    }
}

/// One answer: its parts, sent as one chunk per part; the last chunk carries `finishReason`.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    pub model: String,
    pub response_id: String,
    pub parts: Vec<Value>,
}

impl Answer {
    /// The parts of a scripted (already rendered) reply; `None` for an HTTP error reply.
    pub fn from_reply(model: String, response_id: String, reply: Reply) -> Option<Answer> {
        let parts = match reply {
            Reply::Text(text) => vec![json!({"text": text})],
            Reply::ToolUse { text, name, input } => text
                .map(|t| json!({"text": t}))
                .into_iter()
                .chain([json!({"functionCall": {"name": name, "args": input}})])
                .collect(),
            Reply::HttpError { .. } => return None,
        };
        Some(Answer { model, response_id, parts })
    }

    /// A one-part text answer (side calls).
    pub fn text(model: String, response_id: String, text: String) -> Answer {
        Answer { model, response_id, parts: vec![json!({"text": text})] }
    }

    fn chunk(&self, parts: Vec<Value>, last: bool) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut usage = json!({"promptTokenCount": INPUT_TOKENS});
        if last {
            candidate["finishReason"] = json!("STOP");
            usage = json!({
                "promptTokenCount": INPUT_TOKENS,
                "candidatesTokenCount": OUTPUT_TOKENS,
                "totalTokenCount": INPUT_TOKENS + OUTPUT_TOKENS,
            });
        }
        json!({"candidates": [candidate], "usageMetadata": usage,
               "modelVersion": self.model, "responseId": self.response_id})
    }

    /// The non-streaming body: every part in one candidate.
    pub fn to_json(&self) -> Value {
        self.chunk(self.parts.clone(), true)
    }

    /// The `alt=sse` body: text parts split in two chunks (clients concatenate), then each
    /// other part in its own chunk, `finishReason: STOP` on the last.
    pub fn to_sse(&self) -> String {
        let mut pieces: Vec<Value> = Vec::new();
        for p in &self.parts {
            match p.get("text").and_then(Value::as_str) {
                Some(t) if t.len() > 1 => {
                    let mut mid = t.len() / 2;
                    while !t.is_char_boundary(mid) {
                        mid += 1;
                    }
                    pieces.push(json!({"text": &t[..mid]}));
                    pieces.push(json!({"text": &t[mid..]}));
                }
                _ => pieces.push(p.clone()),
            }
        }
        let n = pieces.len();
        pieces
            .into_iter()
            .enumerate()
            .map(|(i, p)| format!("data: {}\r\n\r\n", self.chunk(vec![p], i + 1 == n)))
            .collect()
    }
}

/// A Gemini-style error body.
pub(crate) fn error_json(status: u16, message: &str) -> Value {
    let s = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    json!({"error": {"code": status, "message": message, "status": s}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_request_reading() {
        assert_eq!(
            route("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some(("gemini-2.5-flash".into(), Action::StreamGenerate))
        );
        assert_eq!(route("/v1beta/models/m:countTokens").unwrap().1, Action::CountTokens);
        assert_eq!(route("/v1/messages"), None);
        let body = json!({"contents": [
            {"role": "user", "parts": [{"text": "context"}, {"text": "SCENARIO=g1 go"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "x", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "x", "response": {"output": "o"}}}]},
            {"role": "model", "parts": [{"text": "t"}]},
            {"role": "user", "parts": [{"text": "SCENARIO=later"}]},
        ]});
        assert_eq!(scenario_marker(&body).as_deref(), Some("g1"));
        assert_eq!(assistant_turns(&body), 2);
        assert_eq!(last_tool_result(&body).as_deref(), Some(r#"{"output":"o"}"#));
        assert_eq!(last_tool_result(&json!({})), None);
    }

    #[test]
    fn schema_values() {
        let schema = json!({"type": "object", "properties": {
            "complexity_reasoning": {"type": "string"},
            "complexity_score": {"type": "INTEGER", "minimum": 1, "maximum": 100},
            "confidence": {"type": "NUMBER"},
            "next_speaker": {"type": "string", "enum": ["user", "model"]}}});
        assert_eq!(
            value_for_schema(&schema),
            json!({"complexity_reasoning": "mock", "complexity_score": 1, "confidence": 0,
                   "next_speaker": "user"})
        );
        let body = json!({"generationConfig": {"responseMimeType": "application/json",
            "responseJsonSchema": schema}});
        assert!(json_schema(&body).is_some());
        assert!(json_schema(&json!({"generationConfig": {}})).is_none());
    }

    #[test]
    fn sse_chunks_end_with_stop() {
        let reply = Reply::ToolUse {
            text: Some("héllo".into()),
            name: "run_shell_command".into(),
            input: json!({"command": "echo hi"}),
        };
        let a = Answer::from_reply("m".into(), "r1".into(), reply).unwrap();
        let chunks: Vec<Value> = a
            .to_sse()
            .split("\r\n\r\n")
            .filter(|c| !c.is_empty())
            .map(|c| serde_json::from_str(c.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        assert_eq!(chunks.len(), 3);
        let text: String = chunks[..2]
            .iter()
            .map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, "héllo");
        assert!(chunks[..2].iter().all(|c| c["candidates"][0].get("finishReason").is_none()));
        assert_eq!(chunks[2]["candidates"][0]["finishReason"], "STOP");
        assert_eq!(
            chunks[2]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"],
            "run_shell_command"
        );
        assert_eq!(error_json(500, "x")["error"]["status"], "INTERNAL");
    }
}

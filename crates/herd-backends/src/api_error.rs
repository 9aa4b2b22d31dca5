//! The HTTP status inside a CLI's error text, however it spells it: codex's `unexpected status
//! 401 …` / `last status: 429 …`, gemini's `[API Error: {"error":{"code":500,…}}]`, claude's
//! `API Error: 500 …`, codex-acp's `codex_error_info`, JSON bodies.

use serde_json::Value;

fn http(n: u64) -> Option<u16> {
    u16::try_from(n).ok().filter(|n| (100..=599).contains(n))
}

/// The status named in `message`, if any: `status NNN` / `status: NNN`, or a numeric `code` or
/// `status` in an embedded JSON error object (`{"error": {...}}` or the object itself).
pub fn http_status(message: &str) -> Option<u16> {
    for word in ["status", "API Error"] {
        for (at, _) in message.match_indices(word) {
            let rest = message[at + word.len()..].trim_start_matches([':', ' ', '"', '=']);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if let Some(n) = digits.parse().ok().and_then(http) {
                return Some(n);
            }
        }
    }
    for (start, _) in message.match_indices('{') {
        let mut objects =
            serde_json::Deserializer::from_str(&message[start..]).into_iter::<Value>();
        let Some(Ok(v)) = objects.next() else { continue };
        let e = v.get("error").unwrap_or(&v);
        if let Some(n) = ["code", "status"].iter().find_map(|k| e.get(*k).and_then(Value::as_u64)) {
            return http(n);
        }
        if let Some(n) = e.get("codex_error_info").and_then(codex_error_status) {
            return Some(n);
        }
    }
    None
}

/// The status a codex `CodexErrorInfo` stands for (codex-acp puts it in its JSON-RPC errors'
/// `data`): its `http_status_code` where it carries one, else what the kind means.
fn codex_error_status(info: &Value) -> Option<u16> {
    match info {
        Value::String(kind) => match kind.as_str() {
            "internal_server_error" => Some(500),
            "unauthorized" => Some(401),
            "bad_request" => Some(400),
            "usage_limit_exceeded" => Some(429),
            _ => None,
        },
        Value::Object(m) => m
            .values()
            .find_map(|v| v.get("http_status_code").and_then(Value::as_u64))
            .and_then(http),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_statuses() {
        assert_eq!(http_status("unexpected status 401 Unauthorized: x"), Some(401));
        assert_eq!(http_status("exceeded retry limit, last status: 429 Too Many"), Some(429));
        assert_eq!(
            http_status(r#"[API Error: {"error":{"code":500,"message":"m","status":"INTERNAL"}}]"#),
            Some(500)
        );
        assert_eq!(http_status(r#"{"status": 503}"#), Some(503));
        assert_eq!(
            http_status(r#"{"error": {"type": "invalid_request_error", "code": "x"}}"#),
            None
        );
        assert_eq!(http_status("status: 999, code 42"), None);
        assert_eq!(http_status("We're currently experiencing high demand"), None);
        assert_eq!(http_status("{ broken {\"code\": 404}"), Some(404));
        // claude-code-acp's and codex-acp's failed `session/prompt` (measured).
        assert_eq!(
            http_status(
                r#"Internal error: API Error: 500 {"error":{"message":"m","type":"api_error"}}"#
            ),
            Some(500)
        );
        assert_eq!(
            http_status(
                r#"Internal error ({"codex_error_info":"internal_server_error","message":"x"})"#
            ),
            Some(500)
        );
        assert_eq!(
            http_status(
                r#"({"codex_error_info":{"response_stream_disconnected":{"http_status_code":502}}})"#
            ),
            Some(502)
        );
        assert_eq!(http_status(r#"({"codex_error_info":"other"})"#), None);
    }
}

//! The HTTP status inside a CLI's error text, however it spells it: codex's `unexpected status
//! 401 …` / `last status: 429 …`, gemini's `[API Error: {"error":{"code":500,…}}]`, JSON bodies.

use serde_json::Value;

fn http(n: u64) -> Option<u16> {
    u16::try_from(n).ok().filter(|n| (100..=599).contains(n))
}

/// The status named in `message`, if any: `status NNN` / `status: NNN`, or a numeric `code` or
/// `status` in an embedded JSON error object (`{"error": {...}}` or the object itself).
pub fn http_status(message: &str) -> Option<u16> {
    for (at, _) in message.match_indices("status") {
        let rest = message[at + "status".len()..].trim_start_matches([':', ' ', '"', '=']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Some(n) = digits.parse().ok().and_then(http) {
            return Some(n);
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
    }
    None
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
    }
}

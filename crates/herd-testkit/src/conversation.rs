//! Reading a Messages API request body: the `SCENARIO=` marker, the assistant turn count and
//! the last tool result. Pure functions over `serde_json::Value`; malformed shapes read as absent.

use serde_json::Value;

const MARKER: &str = "SCENARIO=";

fn messages(body: &Value) -> &[Value] {
    body.get("messages").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

/// The text pieces of a `content` value: the string itself, or every `text` block of a list.
fn texts(content: &Value) -> Vec<&str> {
    match content {
        Value::String(s) => vec![s.as_str()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    }
}

/// The first `SCENARIO=<name>` (name = `[A-Za-z0-9_-]+`) in `text`.
pub fn find_marker(text: &str) -> Option<&str> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    text.match_indices(MARKER).find_map(|(at, _)| {
        let rest = &text[at + MARKER.len()..];
        let end = rest.find(|c: char| !is_name(c)).unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

/// The scenario named in the text of the request's first user message, if any.
pub fn scenario_marker(body: &Value) -> Option<String> {
    let first_user = messages(body).iter().find(|m| role(m) == Some("user"))?;
    let content = first_user.get("content")?;
    texts(content).into_iter().find_map(find_marker).map(str::to_owned)
}

/// How many messages with role `assistant` the request carries (= the index of the turn to play).
pub fn assistant_turns(body: &Value) -> usize {
    messages(body).iter().filter(|m| role(m) == Some("assistant")).count()
}

/// The text of the last `tool_result` block in the request (string content, or its text blocks
/// joined by newlines).
pub fn last_tool_result(body: &Value) -> Option<String> {
    messages(body)
        .iter()
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .rfind(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|block| block.get("content").map(|c| texts(c).join("\n")).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn marker_in_string_or_text_blocks_of_first_user_message() {
        assert_eq!(find_marker("xx SCENARIO=a_b-9. yy"), Some("a_b-9"));
        assert_eq!(find_marker("SCENARIO= SCENARIO=ok"), Some("ok"));
        assert_eq!(find_marker("SCENARIO=ünï"), None);
        assert_eq!(find_marker("nothing"), None);

        let plain = json!({"messages": [{"role": "user", "content": "SCENARIO=one go"}]});
        assert_eq!(scenario_marker(&plain).as_deref(), Some("one"));

        let blocks = json!({"messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>hi</system-reminder>"},
                {"type": "image", "text": "SCENARIO=notme"},
                {"type": "text", "text": "SCENARIO=two go"}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "SCENARIO=later"}]});
        assert_eq!(scenario_marker(&blocks).as_deref(), Some("two"));

        let later_only = json!({"messages": [
            {"role": "user", "content": "hello"},
            {"role": "user", "content": "SCENARIO=later"}]});
        assert_eq!(scenario_marker(&later_only), None);
        assert_eq!(scenario_marker(&json!({"messages": "bogus"})), None);
        assert_eq!(scenario_marker(&Value::Null), None);
    }

    #[test]
    fn counts_assistant_turns_and_reads_last_tool_result() {
        let body = json!({"messages": [
            {"role": "user", "content": "SCENARIO=x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "first"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t2"}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t2",
                 "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"type": "text", "text": "extra"}]}]});
        assert_eq!(assistant_turns(&body), 2);
        assert_eq!(last_tool_result(&body).as_deref(), Some("a\nb"));
        assert_eq!(assistant_turns(&Value::Null), 0);
        assert_eq!(
            last_tool_result(&json!({"messages": [{"role": "user", "content": "x"}]})),
            None
        );
    }
}

//! Scripted scenarios: what the mock model answers, turn by turn.
//! Owns `Script`, `Turn` and `Reply`, stateless turn selection and the `{{...}}` placeholders.

use std::time::Duration;

use serde_json::Value;

/// A scenario: the replies the mock gives, one per assistant turn of a conversation.
///
/// Turn `i` answers a request whose `messages` already hold `i` assistant messages, so the
/// choice depends only on the request (retries and concurrent conversations stay deterministic).
#[derive(Clone, Debug, Default)]
pub struct Script {
    pub turns: Vec<Turn>,
    /// Answer every request past the end of `turns` with the last turn (see [`Script::forever`]).
    pub repeat_last: bool,
}

/// One scripted reply plus how long the mock waits before sending it.
#[derive(Clone, Debug)]
pub struct Turn {
    pub delay: Duration,
    pub reply: Reply,
}

/// What the mock model says in one turn.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A plain text answer (`stop_reason: "end_turn"`).
    Text(String),
    /// An optional text block followed by one tool call (`stop_reason: "tool_use"`). `name` is
    /// the tool as the CLI under test declares it (claude `Bash`, codex `exec_command`, gemini
    /// `run_shell_command`). For the OpenAI Responses API a string `input` becomes a freeform
    /// `custom_tool_call` (codex `apply_patch`), anything else a `function_call`.
    ToolUse { text: Option<String>, name: String, input: Value },
    /// An HTTP error status with the API's own error body.
    HttpError { status: u16, message: String },
}

impl Turn {
    /// A turn sent without delay.
    pub fn new(reply: Reply) -> Self {
        Self { delay: Duration::ZERO, reply }
    }
}

impl Script {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a turn.
    pub fn turn(mut self, reply: Reply) -> Self {
        self.turns.push(Turn::new(reply));
        self
    }

    /// Appends a text reply. The text may use `{{scenario}}` and `{{last_tool_result}}`.
    pub fn text(self, t: impl Into<String>) -> Self {
        self.turn(Reply::Text(t.into()))
    }

    /// Appends a reply made of one `tool_use` block. String values inside `input` may use the
    /// same placeholders as text.
    pub fn tool_use(self, name: &str, input: Value) -> Self {
        self.turn(Reply::ToolUse { text: None, name: name.to_owned(), input })
    }

    /// Appends a reply made of a text block followed by a `tool_use` block.
    pub fn text_and_tool_use(self, text: impl Into<String>, name: &str, input: Value) -> Self {
        self.turn(Reply::ToolUse { text: Some(text.into()), name: name.to_owned(), input })
    }

    /// Appends an HTTP error reply.
    pub fn error(self, status: u16, message: &str) -> Self {
        self.turn(Reply::HttpError { status, message: message.to_owned() })
    }

    /// Sets the delay of the most recently added turn (no-op on an empty script).
    pub fn delay(mut self, d: Duration) -> Self {
        if let Some(turn) = self.turns.last_mut() {
            turn.delay = d;
        }
        self
    }

    /// Repeats the last turn for every later request.
    pub fn forever(mut self) -> Self {
        self.repeat_last = true;
        self
    }

    /// The turn answering a request that already holds `assistant_turns` assistant messages;
    /// `None` once the script is used up (the mock then answers `MOCK DONE scenario=<name>`).
    pub fn turn_at(&self, assistant_turns: usize) -> Option<&Turn> {
        match self.turns.get(assistant_turns) {
            Some(turn) => Some(turn),
            None if self.repeat_last => self.turns.last(),
            None => None,
        }
    }
}

/// The reply for a request: the scenario's turn, `MOCK DONE scenario=<name>` after the script's
/// end, or `mock: no scenario` when the request has no marker or names an unknown scenario.
pub(crate) fn select_turn(
    scenario: Option<&str>,
    script: Option<&Script>,
    assistant_turns: usize,
) -> Turn {
    match (scenario, script) {
        (Some(name), Some(script)) => script
            .turn_at(assistant_turns)
            .cloned()
            .unwrap_or_else(|| Turn::new(Reply::Text(format!("MOCK DONE scenario={name}")))),
        _ => Turn::new(Reply::Text("mock: no scenario".to_owned())),
    }
}

/// Values for the placeholders of one request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placeholders<'a> {
    pub scenario: &'a str,
    pub last_tool_result: &'a str,
}

impl Placeholders<'_> {
    /// Replaces `{{scenario}}`, then `{{last_tool_result}}` (so a tool result that itself holds
    /// a placeholder is not expanded again).
    pub fn render(&self, text: &str) -> String {
        text.replace("{{scenario}}", self.scenario)
            .replace("{{last_tool_result}}", self.last_tool_result)
    }

    /// The reply with every placeholder in its text and tool input filled in.
    pub fn render_reply(&self, reply: Reply) -> Reply {
        match reply {
            Reply::Text(text) => Reply::Text(self.render(&text)),
            Reply::ToolUse { text, name, input } => Reply::ToolUse {
                text: text.map(|t| self.render(&t)),
                name,
                input: self.render_value(&input),
            },
            error @ Reply::HttpError { .. } => error,
        }
    }

    /// Renders every string (not key) inside a JSON value.
    pub fn render_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.render(s)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.render_value(v)).collect())
            }
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), self.render_value(v))).collect())
            }
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text_of(turn: &Turn) -> &str {
        match &turn.reply {
            Reply::Text(t) => t,
            other => panic!("not text: {other:?}"),
        }
    }

    #[test]
    fn turns_by_index_then_done() {
        let script = Script::new().tool_use("Bash", json!({"command": "true"})).text("two");
        let s = Some(&script);
        assert!(matches!(select_turn(Some("x"), s, 0).reply, Reply::ToolUse { .. }));
        assert_eq!(text_of(&select_turn(Some("x"), s, 1)), "two");
        assert_eq!(text_of(&select_turn(Some("x"), s, 2)), "MOCK DONE scenario=x");
        assert_eq!(text_of(&select_turn(Some("x"), s, 9)), "MOCK DONE scenario=x");
    }

    #[test]
    fn forever_repeats_last_and_delay_hits_last_turn() {
        let script = Script::new().text("a").text("b").delay(Duration::from_millis(7)).forever();
        assert_eq!(script.turns[0].delay, Duration::ZERO);
        let t = select_turn(Some("x"), Some(&script), 5);
        assert_eq!(text_of(&t), "b");
        assert_eq!(t.delay, Duration::from_millis(7));
        assert!(Script::new().forever().turn_at(0).is_none());
        assert!(Script::new().delay(Duration::from_secs(1)).turns.is_empty());
    }

    #[test]
    fn unknown_or_missing_scenario_gets_default() {
        let script = Script::new().text("a");
        assert_eq!(text_of(&select_turn(None, Some(&script), 0)), "mock: no scenario");
        assert_eq!(text_of(&select_turn(Some("nope"), None, 0)), "mock: no scenario");
    }

    #[test]
    fn placeholders_expand_once() {
        let p = Placeholders { scenario: "s1", last_tool_result: "got {{scenario}}" };
        assert_eq!(p.render("[{{scenario}}] {{last_tool_result}}"), "[s1] got {{scenario}}");
        let v =
            p.render_value(&json!({"{{scenario}}": ["{{scenario}}", 3, {"a": "{{scenario}}"}]}));
        assert_eq!(v, json!({"{{scenario}}": ["s1", 3, {"a": "s1"}]}));
    }
}

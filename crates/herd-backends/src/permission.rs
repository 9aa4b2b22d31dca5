//! A CLI's request to use a tool, in protocol-neutral terms: what herd's gate decides on,
//! whatever the CLI (claude `can_use_tool`, ACP `session/request_permission`).

use serde_json::Value;

use crate::tools::ToolName;

/// One answer a CLI offers for a permission request (ACP `options[]`; claude offers none: its
/// answer is allow or deny).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionOption {
    /// The id to send back.
    pub id: String,
    /// `allow_once`, `allow_always`, `reject_once`, `reject_always`, or the CLI's own word.
    pub kind: String,
    pub name: String,
}

/// A CLI's request to use a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionRequest {
    /// The CLI's id for the request, echoed in the answer: claude's `request_id`; for ACP the
    /// JSON-RPC `id` as compact JSON (`0`, `"595adf42-…"`), so numbers and strings stay apart.
    pub request_id: String,
    /// The tool, in Claude Code's vocabulary and as the CLI named it.
    pub tool: ToolName,
    /// The call's input, with the keys herd's rules read (see [`crate::tools::claude_input`]).
    pub input: Value,
    /// The tool call asked about (claude `tool_use_id`, ACP `toolCallId`).
    pub tool_use_id: Option<String>,
    /// Which of the agent's own subagents asks (claude `agent_id`); `None` for the agent itself.
    pub agent_id: Option<String>,
    /// A one-line description from the CLI (ACP `title`, claude `description`).
    pub title: Option<String>,
    /// The answers the CLI offers (empty for claude).
    pub options: Vec<PermissionOption>,
}

impl PermissionRequest {
    /// The option to send for an allow: the first `allow_once`, else any `allow*`.
    pub fn allow_option(&self) -> Option<&PermissionOption> {
        self.option_of("allow_once")
            .or_else(|| self.options.iter().find(|o| o.kind.starts_with("allow")))
    }

    /// The option to send for a deny: the first `reject_once`, else any `reject*`.
    pub fn reject_option(&self) -> Option<&PermissionOption> {
        self.option_of("reject_once")
            .or_else(|| self.options.iter().find(|o| o.kind.starts_with("reject")))
    }

    fn option_of(&self, kind: &str) -> Option<&PermissionOption> {
        self.options.iter().find(|o| o.kind == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt(id: &str, kind: &str) -> PermissionOption {
        PermissionOption { id: id.into(), kind: kind.into(), name: id.into() }
    }

    #[test]
    fn picks_once_options_first() {
        let mut req = PermissionRequest {
            request_id: "0".into(),
            tool: ToolName::new(Some("Bash"), "run_shell_command"),
            input: Value::Null,
            tool_use_id: None,
            agent_id: None,
            title: None,
            options: vec![
                opt("proceed_always", "allow_always"),
                opt("proceed_once", "allow_once"),
                opt("cancel", "reject_once"),
            ],
        };
        assert_eq!(req.allow_option().unwrap().id, "proceed_once");
        assert_eq!(req.reject_option().unwrap().id, "cancel");
        req.options = vec![opt("a", "allow_always"), opt("r", "reject_always")];
        assert_eq!(req.allow_option().unwrap().id, "a");
        assert_eq!(req.reject_option().unwrap().id, "r");
        req.options.clear();
        assert!(req.allow_option().is_none() && req.reject_option().is_none());
    }
}

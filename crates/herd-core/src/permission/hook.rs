//! How hooks are written, in `.herd/config.yml` and in agent definitions: the event names and
//! one hook's fields, checked with errors that name the field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::plan::parse_duration;

/// The hook events, as written.
pub const HOOK_EVENTS: &[&str] = &["PreToolUse", "PostToolUse", "SubagentStart", "SubagentStop"];

/// One hook as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    /// Glob on the tool name (tool events) or the agent name (subagent events); none: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// Run with `sh -c`, the event's JSON on stdin.
    pub command: String,
    /// e.g. `10s` [default: 30s].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// Hooks by event name, as written under `hooks:`.
pub type HookSpecs = BTreeMap<String, Vec<HookSpec>>;

/// Check event names, commands and timeouts; the error names the field (`hooks.Event[i].…`).
pub fn check_hooks(hooks: &HookSpecs) -> Result<(), (String, String)> {
    for (event, list) in hooks {
        if !HOOK_EVENTS.contains(&event.as_str()) {
            let msg = format!("unknown hook event (expected one of {})", HOOK_EVENTS.join(", "));
            return Err((format!("hooks.{event}"), msg));
        }
        for (i, h) in list.iter().enumerate() {
            if h.command.trim().is_empty() {
                return Err((format!("hooks.{event}[{i}].command"), "empty".into()));
            }
            if let Some(t) = &h.timeout {
                parse_duration(t).map_err(|e| (format!("hooks.{event}[{i}].timeout"), e))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hooks(event: &str, command: &str, timeout: Option<&str>) -> HookSpecs {
        let spec =
            HookSpec { matcher: None, command: command.into(), timeout: timeout.map(Into::into) };
        BTreeMap::from([(event.to_owned(), vec![spec])])
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(check_hooks(&hooks("PreToolUse", "./check.sh", Some("5s"))), Ok(()));
        let (field, msg) = check_hooks(&hooks("PreTool", "x", None)).unwrap_err();
        assert_eq!(field, "hooks.PreTool");
        assert!(msg.contains("PreToolUse"), "{msg}");
        let (field, _) = check_hooks(&hooks("SubagentStop", " ", None)).unwrap_err();
        assert_eq!(field, "hooks.SubagentStop[0].command");
        let (field, _) = check_hooks(&hooks("PostToolUse", "x", Some("soon"))).unwrap_err();
        assert_eq!(field, "hooks.PostToolUse[0].timeout");
    }
}

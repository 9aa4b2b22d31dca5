//! Lifecycle hooks: shell commands run at PreToolUse (may veto), PostToolUse, SubagentStart and
//! SubagentStop, with the event as JSON on stdin. A failing hook is reported, never fatal.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::supervisor::child_env;

/// A hook's default time limit.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// At most this much of a hook's stderr is kept as a reason or message.
const MESSAGE_CAP: usize = 2048;

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HookEvent {
    PreToolUse,
    PostToolUse,
    SubagentStart,
    SubagentStop,
}

impl HookEvent {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::SubagentStart => "SubagentStart",
            Self::SubagentStop => "SubagentStop",
        }
    }
}

/// One configured hook.
#[derive(Debug, Clone, PartialEq)]
pub struct HookDef {
    pub event: HookEvent,
    /// Glob on the tool name (tool events) or the agent name (subagent events); None = all.
    pub matcher: Option<String>,
    /// Run with `sh -c`.
    pub command: String,
    pub timeout: Duration,
}

impl HookDef {
    /// Whether this hook runs for `event` on `subject` (a tool or agent name).
    pub fn applies(&self, event: HookEvent, subject: &str) -> bool {
        self.event == event
            && self.matcher.as_deref().is_none_or(|m| {
                herd_core::permission::glob_match(
                    &m.to_ascii_lowercase(),
                    &subject.to_ascii_lowercase(),
                )
            })
    }
}

/// How a hook run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    Ok,
    /// A PreToolUse hook exited 2: deny, with its stderr as the reason.
    Veto(String),
    /// It could not start, exited non-zero (other than a veto), or was killed.
    Failed(String),
    Timeout,
}

impl HookOutcome {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Veto(_) => "veto",
            Self::Failed(_) => "failed",
            Self::Timeout => "timeout",
        }
    }
    pub fn message(&self) -> Option<String> {
        match self {
            Self::Veto(m) | Self::Failed(m) => Some(m.clone()),
            Self::Ok => None,
            Self::Timeout => Some("timed out".into()),
        }
    }
}

/// Names a hook sees in its environment.
#[derive(Debug, Clone, Default)]
pub struct HookEnv {
    pub subagent_id: String,
    pub subagent_name: String,
    pub session_id: String,
    pub tool: Option<String>,
}

/// Run one hook with `payload` on stdin in `cwd`.
pub async fn run_hook(
    hook: &HookDef,
    payload: &serde_json::Value,
    names: &HookEnv,
    cwd: &Path,
) -> HookOutcome {
    let mut explicit = vec![
        ("HERD_HOOK_EVENT".to_owned(), hook.event.as_str().to_owned()),
        ("HERD_SUBAGENT_ID".to_owned(), names.subagent_id.clone()),
        ("HERD_SUBAGENT_NAME".to_owned(), names.subagent_name.clone()),
        ("HERD_SESSION_ID".to_owned(), names.session_id.clone()),
    ];
    if let Some(t) = &names.tool {
        explicit.push(("HERD_TOOL_NAME".to_owned(), t.clone()));
    }
    let env = child_env(std::env::vars(), &[], &explicit);
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(&hook.command)
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return HookOutcome::Failed(format!("cannot start sh: {e}")),
    };
    let body = payload.to_string();
    let mut stdin = child.stdin.take();
    let mut stderr = child.stderr.take();
    let run = async {
        if let Some(s) = stdin.as_mut() {
            // A hook that ignores its input may close stdin early: not an error.
            let _ = s.write_all(body.as_bytes()).await;
        }
        drop(stdin.take());
        let mut err = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(64 * 1024).read_to_end(&mut err).await;
        }
        (child.wait().await, err)
    };
    match tokio::time::timeout(hook.timeout, run).await {
        Err(_) => {
            if let Some(pid) = child.id() {
                crate::procfs::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
            }
            let _ = child.kill().await;
            HookOutcome::Timeout
        }
        Ok((Err(e), _)) => HookOutcome::Failed(format!("waiting for the hook: {e}")),
        Ok((Ok(status), err)) => {
            let text = String::from_utf8_lossy(&err).trim().to_owned();
            let text = herd_core::truncate_str(&text, MESSAGE_CAP).to_owned();
            match status.code() {
                Some(0) => HookOutcome::Ok,
                Some(2) if hook.event == HookEvent::PreToolUse => {
                    HookOutcome::Veto(if text.is_empty() {
                        "vetoed by a PreToolUse hook".into()
                    } else {
                        text
                    })
                }
                Some(c) => HookOutcome::Failed(format!("exit code {c}: {text}")),
                None => HookOutcome::Failed(format!("killed by a signal: {text}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(event: HookEvent, command: &str) -> HookDef {
        HookDef { event, matcher: None, command: command.into(), timeout: Duration::from_secs(5) }
    }

    #[tokio::test]
    async fn veto_failure_timeout_and_input() {
        let dir = tempfile::tempdir().unwrap();
        let names =
            HookEnv { subagent_name: "w".into(), tool: Some("Bash".into()), ..Default::default() };
        let payload = serde_json::json!({"tool": "Bash", "input": {"command": "rm -rf /"}});
        let veto = hook(
            HookEvent::PreToolUse,
            "grep -q 'rm -rf' && { echo 'no rm' >&2; exit 2; }; exit 0",
        );
        assert_eq!(
            run_hook(&veto, &payload, &names, dir.path()).await,
            HookOutcome::Veto("no rm".into())
        );
        let ok = serde_json::json!({"input": {"command": "ls"}});
        assert_eq!(run_hook(&veto, &ok, &names, dir.path()).await, HookOutcome::Ok);
        // Exit 2 vetoes only before a tool call.
        let post = hook(HookEvent::PostToolUse, "echo boom >&2; exit 2");
        assert!(
            matches!(run_hook(&post, &payload, &names, dir.path()).await, HookOutcome::Failed(m) if m.contains("boom"))
        );
        let env = hook(
            HookEvent::SubagentStart,
            "test \"$HERD_SUBAGENT_NAME/$HERD_HOOK_EVENT/$HERD_TOOL_NAME\" = w/SubagentStart/Bash",
        );
        assert_eq!(run_hook(&env, &payload, &names, dir.path()).await, HookOutcome::Ok);
        let missing = hook(HookEvent::SubagentStop, "/nonexistent/hook");
        assert!(matches!(
            run_hook(&missing, &payload, &names, dir.path()).await,
            HookOutcome::Failed(_)
        ));
        let mut slow = hook(HookEvent::SubagentStop, "sleep 30");
        slow.timeout = Duration::from_millis(200);
        let t = std::time::Instant::now();
        assert_eq!(run_hook(&slow, &payload, &names, dir.path()).await, HookOutcome::Timeout);
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn matchers() {
        let mut h = hook(HookEvent::PreToolUse, "true");
        assert!(h.applies(HookEvent::PreToolUse, "Bash"));
        assert!(!h.applies(HookEvent::PostToolUse, "Bash"));
        h.matcher = Some("Bash".into());
        assert!(h.applies(HookEvent::PreToolUse, "bash"));
        assert!(!h.applies(HookEvent::PreToolUse, "Write"));
        h.matcher = Some("mcp__*".into());
        assert!(h.applies(HookEvent::PreToolUse, "mcp__herd__task"));
    }
}

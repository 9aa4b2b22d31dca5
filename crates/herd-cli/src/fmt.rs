//! Human-readable formatting shared by the commands: durations, counts, costs, times, and
//! one-line summaries of events.

use herd_core::AgentEvent;
use herd_core::permission::{main_input, normalize_tool};
use herd_engine::service::PermissionRequestView;

pub fn duration_ms(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..=999 => format!("{ms}ms"),
        1000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
    }
}

pub fn count(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1000..=999_999 => format!("{:.1}k", n as f64 / 1000.0),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

pub fn cost(c: Option<f64>) -> String {
    c.map_or_else(|| "-".into(), |c| format!("${c:.4}"))
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of a Unix-millisecond timestamp.
pub fn time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.trim_end_matches('Z').replace('T', " ")
}

/// The first line of `s`, cut to `max` characters.
pub fn oneline(s: &str, max: usize) -> String {
    let first = s.lines().next().unwrap_or("");
    let mut out: String = first.chars().take(max).collect();
    if first.chars().count() > max || s.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

/// `Bash(rm -rf build)`: a call waiting for a person, as the tool and its main input (the
/// command, the file…) on one line.
pub fn call(r: &PermissionRequestView) -> String {
    let input = serde_json::from_str::<serde_json::Value>(&r.input_preview).ok();
    let main = input.as_ref().and_then(|v| main_input(&normalize_tool(&r.tool), v));
    let shown = main.unwrap_or_else(|| r.input_preview.clone());
    format!("{}({})", r.tool, oneline(&shown, 120))
}

/// A one-line description of an event for `herd logs`.
pub fn event_summary(ev: &AgentEvent) -> String {
    use AgentEvent as E;
    match ev {
        E::SubagentCreated { cli, cwd } => format!("{cli} in {cwd}"),
        E::SubagentStarted { pid, argv, .. } => {
            format!("pid {pid}: {}", oneline(&argv.join(" "), 160))
        }
        E::SubagentCompleted => String::new(),
        E::SubagentFailed { reason } => reason.clone(),
        E::SubagentCancelled { reason } => reason.clone(),
        E::SubagentClosed { final_status, close_reason } => {
            format!("{final_status} ({close_reason})")
        }
        E::StopRequested { step, why } => format!("{step} ({why})"),
        E::OutputTruncated { limit_bytes, total_bytes } => {
            format!("result cut to {limit_bytes} of {total_bytes} bytes")
        }
        E::OutputLimit { limit_bytes } => {
            format!("{} of output stored; the rest is not (max_stored_output)", count(*limit_bytes))
        }
        E::LeftoversKilled { count } => format!("{count} leftover process(es) killed"),
        E::PermissionRequested { request, tool, input_preview, timeout_ms } => format!(
            "{tool} {} — waiting for `herd approve {request}` or `herd deny {request}` ({}s)",
            oneline(input_preview, 120),
            timeout_ms / 1000
        ),
        E::PermissionDecided { tool, decision, by, .. } => format!("{decision} {tool}: {by}"),
        E::HookRan { hook, event, outcome, message } => format!(
            "{event} hook {hook}: {outcome}{}",
            message.as_deref().map(|m| format!(" ({})", oneline(m, 160))).unwrap_or_default()
        ),
        E::AutoApproveRevoked { reason } => format!("auto-approve revoked: {reason}"),
        E::WorktreeCreated { path, branch, base } => format!("{branch} at {path} from {base}"),
        E::LockWaiting { path, mode, holders } => {
            format!("{mode} lock on {path} waits for {}", holders.join(", "))
        }
        E::LockAcquired { path, mode } => format!("{mode} lock on {path}"),
        E::SubagentWaitingForMerge { branch, head, .. } => format!("{branch} at {head}"),
        E::WorktreeMerged { branch, into, commit } => format!("{branch} into {into} ({commit})"),
        E::NothingToMerge { branch, into, uncommitted } if uncommitted.is_empty() => {
            format!("{branch}: no commit that {into} lacks")
        }
        E::NothingToMerge { branch, uncommitted, .. } => format!(
            "{branch}: nothing committed; {} uncommitted path(s) kept in its worktree",
            uncommitted.len()
        ),
        E::Unconfined { reason } => format!("no sandbox: {reason}"),
        E::RefEscape { changes } => changes
            .iter()
            .map(|c| {
                let what = format!("{:?}", c.change).to_lowercase();
                match (&c.kept, &c.error) {
                    (_, Some(e)) => format!("{} {what}, not put back: {e}", c.name),
                    (Some(k), None) => format!("{} {what}, put back (kept as {k})", c.name),
                    (None, None) => format!("{} {what}, put back", c.name),
                }
            })
            .collect::<Vec<_>>()
            .join("; "),
        E::MergeConflict { branch, into, files, .. } => {
            format!("{branch} into {into}: {}", files.join(", "))
        }
        E::Init { native_session_id, model, .. } => format!(
            "session {} model {}",
            native_session_id.as_deref().unwrap_or("-"),
            model.as_deref().unwrap_or("-")
        ),
        E::Text { text } | E::Thinking { text } | E::UserText { text } => oneline(text, 200),
        E::ToolCall { name, input, .. } => {
            let main = input
                .get("command")
                .or_else(|| input.get("file_path"))
                .or_else(|| input.get("pattern"))
                .and_then(|v| v.as_str())
                .map_or_else(|| oneline(&input.to_string(), 160), |s| oneline(s, 160));
            format!("{name}: {main}")
        }
        E::ToolResult { content, is_error, .. } => {
            format!("{}{}", if *is_error { "error: " } else { "" }, oneline(content, 200))
        }
        E::ApiRetry { attempt, error_status, error, .. } => format!(
            "attempt {} after {} {}",
            attempt.unwrap_or(0),
            error_status.map_or_else(|| "-".into(), |s| s.to_string()),
            error.as_deref().unwrap_or("")
        ),
        E::Task { subtype, description, status, .. } => format!(
            "{subtype} {} {}",
            description.as_deref().unwrap_or(""),
            status.as_deref().unwrap_or("")
        ),
        E::StreamEvent { event_type } => event_type.clone(),
        E::System { subtype } => subtype.clone(),
        E::ControlRequest { subtype, request_id, .. } => format!("{subtype} {request_id}"),
        E::ControlResponse { subtype, request_id } => {
            format!("{} {}", subtype.as_deref().unwrap_or(""), request_id.as_deref().unwrap_or(""))
        }
        E::Result(r) => format!(
            "{}{} turns={} cost={} {}",
            if r.is_error { "error " } else { "" },
            serde_json::to_value(&r.subtype)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            r.num_turns.map_or_else(|| "-".into(), |n| n.to_string()),
            cost(r.cost_usd),
            oneline(r.text.as_deref().unwrap_or(&r.errors.join("; ")), 160)
        ),
        E::Stderr { line } => oneline(line, 200),
        E::Unknown { raw } => oneline(raw, 200),
        E::DecodeError { error, preview } => format!("{error}: {}", oneline(preview, 120)),
        E::LineTooLong { bytes, limit } => {
            format!(
                "a line of {bytes} bytes exceeded the {limit}-byte limit and was skipped (the transcript has it)"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(duration_ms(999), "999ms");
        assert_eq!(duration_ms(1500), "1.5s");
        assert_eq!(duration_ms(61_000), "1m01s");
        assert_eq!(count(1234), "1.2k");
        assert_eq!(cost(Some(0.000745)), "$0.0007");
        assert_eq!(oneline("ab\ncd", 10), "ab…");
        assert_eq!(time(0), "1970-01-01 00:00:00");
    }
}

//! `herd approve`, `deny`, `revoke`, `audit` and `gc`: answering tool calls that wait for a
//! person, switching auto-approve off, and reading and sweeping the audit log — from any terminal.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use herd_store::{Answered, AuditFilter, NewAudit, StatePaths, Store, now_ms};
use serde_json::json;

use super::open_store;
use crate::cli::{ApproveArgs, AuditArgs, DenyArgs, GcArgs, RevokeArgs};
use crate::{UsageError, fmt};

/// Who answered, as recorded.
fn answerer() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".into());
    format!("{user} via herd pid {}", std::process::id())
}

pub fn approve(paths: StatePaths, a: ApproveArgs) -> anyhow::Result<u8> {
    let mut store = open_store(paths)?;
    let Some(prefix) = a.id else {
        return list_pending(&store, a.json);
    };
    answer(&mut store, &prefix, true, a.always, None)
}

pub fn deny(paths: StatePaths, a: DenyArgs) -> anyhow::Result<u8> {
    let mut store = open_store(paths)?;
    answer(&mut store, &a.id, false, false, a.reason.as_deref())
}

fn answer(
    store: &mut Store,
    prefix: &str,
    approve: bool,
    always: bool,
    reason: Option<&str>,
) -> anyhow::Result<u8> {
    let id = store.resolve_request(prefix)?;
    let verb = if approve { "approved" } else { "denied" };
    match store.answer_request(&id, approve, always, reason, &answerer())? {
        Answered::Decided => {
            println!("{id} {verb}");
            Ok(0)
        }
        Answered::AlreadyDecided(status) => {
            Err(UsageError(format!("{id} was already decided ({status}); nothing changed")).into())
        }
    }
}

fn list_pending(store: &Store, json_out: bool) -> anyhow::Result<u8> {
    let rows = store.pending_requests(None)?;
    let mut out = std::io::stdout().lock();
    if json_out {
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
        return Ok(0);
    }
    if rows.is_empty() {
        writeln!(out, "no tool call is waiting for a person")?;
        return Ok(0);
    }
    for r in rows {
        let left = (r.expires_at - now_ms()).max(0) / 1000;
        writeln!(
            out,
            "{}  {}  {}: {}  ({left}s left)",
            r.id,
            &r.subagent_id[..r.subagent_id.len().min(12)],
            r.tool,
            fmt::oneline(&r.input_preview, 100)
        )?;
    }
    writeln!(out, "answer with: herd approve ID [--always] | herd deny ID [--reason TEXT]")?;
    Ok(0)
}

pub fn revoke(paths: StatePaths, a: RevokeArgs) -> anyhow::Result<u8> {
    let reason = a.reason.trim();
    if reason.chars().count() < 10 {
        return Err(UsageError(format!(
            "--reason {reason:?} is too short: say why in at least 10 characters (it is audited)"
        ))
        .into());
    }
    let mut store = open_store(paths)?;
    let id = store.resolve(&a.id)?;
    let row = store.get(&id)?;
    if !store.revoke_auto_approve(id.as_str(), reason)? {
        let status = row.map_or_else(|| "gone".into(), |r| r.status.to_string());
        return Err(UsageError(format!("{id} is not running ({status}); nothing to revoke")).into());
    }
    store.append_audit(&NewAudit {
        event_type: "permission_revoke",
        severity: "warn",
        subagent_id: Some(id.to_string()),
        decided_by: Some(answerer()),
        details: Some(json!({"reason": reason})),
        ..NewAudit::default()
    })?;
    println!("{id}: auto-approve revoked; its next tool calls ask a person");
    Ok(0)
}

pub fn audit(paths: StatePaths, a: AuditArgs) -> anyhow::Result<u8> {
    let store = open_store(paths)?;
    let subagent = a.subagent.as_deref().map(|p| store.resolve(p)).transpose()?;
    let since_ms = a.since.as_deref().map(parse_since).transpose()?;
    let rows = store.audit(&AuditFilter {
        subagent_id: subagent.map(|s| s.to_string()),
        since_ms,
        limit: a.limit,
    })?;
    let mut out = std::io::stdout().lock();
    for r in rows {
        if a.json {
            writeln!(out, "{}", serde_json::to_string(&r)?)?;
            continue;
        }
        let who = r.subagent_id.as_deref().map_or("-", |s| &s[..s.len().min(12)]);
        let mut line = format!("{}  {:<5} {:<22} {who}", fmt::time(r.ts), r.severity, r.event_type);
        if let Some(t) = &r.tool {
            line.push_str(&format!("  {t}"));
        }
        if let Some(d) = &r.decision {
            line.push_str(&format!("  {d}"));
        }
        if let Some(b) = &r.decided_by {
            line.push_str(&format!(" by {}", fmt::oneline(b, 120)));
        }
        if let Some(p) = &r.input_preview {
            line.push_str(&format!("  {}", fmt::oneline(p, 80)));
        }
        writeln!(out, "{line}")?;
    }
    Ok(0)
}

/// `1h`, `7d`, `90m` ago, or an RFC 3339 time.
fn parse_since(s: &str) -> Result<i64, UsageError> {
    let bad = || {
        UsageError(format!("--since {s:?}: expected a duration like 1h or 7d, or an RFC 3339 time"))
    };
    if let Ok(d) = humantime::parse_duration(s.trim()) {
        return Ok(now_ms() - d.as_millis() as i64);
    }
    let t = humantime::parse_rfc3339_weak(s.trim()).map_err(|_| bad())?;
    Ok(t.duration_since(UNIX_EPOCH).map_err(|_| bad())?.as_millis() as i64)
}

pub fn gc(paths: StatePaths, a: GcArgs) -> anyhow::Result<u8> {
    let mut store = open_store(paths.clone())?;
    let day = 86_400_000i64;
    let audit_cut = now_ms() - a.audit_days as i64 * day;
    let audit = store.gc_audit(audit_cut, a.dry_run)?;
    let cutoff = SystemTime::now() - Duration::from_secs(a.transcript_days * 86_400);
    let mut files = 0usize;
    let mut bytes = 0u64;
    if let Ok(dir) = std::fs::read_dir(paths.transcripts()) {
        for entry in dir.flatten() {
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
            let Some(id) = name.split('.').next().and_then(|i| i.parse().ok()) else { continue };
            // Only finished runs; a file of a running (or unknown) run is left alone.
            let finished = store.get(&id)?.is_some_and(|r| r.status.is_terminal());
            let Ok(meta) = entry.metadata() else { continue };
            let old = meta.modified().is_ok_and(|m| m < cutoff);
            if finished && old {
                files += 1;
                bytes += meta.len();
                if !a.dry_run {
                    std::fs::remove_file(&path)?;
                }
            }
        }
    }
    let verb = if a.dry_run { "would delete" } else { "deleted" };
    if a.json {
        println!(
            "{}",
            json!({"dry_run": a.dry_run, "audit_rows": audit, "transcript_files": files, "transcript_bytes": bytes})
        );
    } else {
        println!(
            "{verb} {audit} audit entr{} older than {} days and {files} transcript file(s) ({}) older than {} days",
            if audit == 1 { "y" } else { "ies" },
            a.audit_days,
            fmt::count(bytes),
            a.transcript_days
        );
    }
    Ok(0)
}

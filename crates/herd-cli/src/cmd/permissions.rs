//! `herd approve`, `deny`, `revoke`, `audit` and `gc`: answering tool calls that wait for a
//! person, switching auto-approve off, and reading and sweeping the audit log — from any terminal.

use std::io::Write;
use std::path::Path;
use std::time::UNIX_EPOCH;

use herd_engine::service::{Answer, AuditQuery, PermissionRequestView};

use crate::cli::{ApproveArgs, AuditArgs, DenyArgs, GcArgs, RevokeArgs};
use crate::{UsageError, fmt};

pub fn approve(state_dir: &Path, a: ApproveArgs) -> anyhow::Result<u8> {
    let Some(id) = a.id else {
        let rows = match super::remote::connect(state_dir)? {
            Some(daemon) => super::remote::pending(daemon)?,
            None => super::open_service(state_dir, "cli")?.pending(None)?,
        };
        return list_pending(rows, a.json);
    };
    answer(state_dir, &id, Answer { allow: true, always: a.always, reason: None })
}

pub fn deny(state_dir: &Path, a: DenyArgs) -> anyhow::Result<u8> {
    answer(state_dir, &a.id, Answer { allow: false, always: false, reason: a.reason })
}

/// Through a running daemon (its gate hears at once), else through the store.
fn answer(state_dir: &Path, id: &str, a: Answer) -> anyhow::Result<u8> {
    let verb = if a.allow { "approved" } else { "denied" };
    let r = match super::remote::connect(state_dir)? {
        Some(daemon) => super::remote::answer(daemon, id, a.allow, a.always, a.reason)?,
        None => {
            let svc = super::open_service(state_dir, "cli")?;
            let caller = super::caller(super::person())?;
            super::runtime()?.block_on(svc.answer(id, a, &caller))?
        }
    };
    println!("{} {verb}", r.id);
    Ok(0)
}

fn list_pending(rows: Vec<PermissionRequestView>, json_out: bool) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    if json_out {
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
        return Ok(0);
    }
    write!(out, "{}", crate::tables::pending(&rows))?;
    Ok(0)
}

pub fn revoke(state_dir: &Path, a: RevokeArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    let caller = super::caller(super::person())?;
    let rt = super::runtime()?;
    let run = rt.block_on(svc.revoke(&a.id, &a.reason, &caller))?;
    println!("{}: auto-approve revoked; its next tool calls ask a person", run.id);
    Ok(0)
}

pub fn audit(state_dir: &Path, a: AuditArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    let since_ms = a.since.as_deref().map(parse_since).transpose()?;
    let rows = svc.audit(&AuditQuery { run: a.subagent, since_ms, limit: a.limit })?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
        return Ok(0);
    }
    for r in rows {
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
    let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_err(|_| bad())?;
    if let Ok(d) = humantime::parse_duration(s.trim()) {
        return Ok(now.saturating_sub(d).as_millis() as i64);
    }
    let t = humantime::parse_rfc3339_weak(s.trim()).map_err(|_| bad())?;
    Ok(t.duration_since(UNIX_EPOCH).map_err(|_| bad())?.as_millis() as i64)
}

pub fn gc(state_dir: &Path, a: GcArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    let r = svc.gc(a.audit_days, a.transcript_days, a.dry_run)?;
    let verb = if a.dry_run { "would delete" } else { "deleted" };
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{verb} {} audit entr{} older than {} days and {} transcript file(s) ({}) older than {} days",
            r.audit_rows,
            if r.audit_rows == 1 { "y" } else { "ies" },
            a.audit_days,
            r.transcript_files,
            fmt::count(r.transcript_bytes),
            a.transcript_days
        );
    }
    Ok(0)
}

//! `herd ps`, `herd show`, `herd logs`: read the store (from any terminal, while runs go on).
//! Tables for people, `--json` for scripts; `logs --follow` polls until the run has closed.

use std::io::Write;
use std::time::Duration;

use herd_store::{StatePaths, Store, SubagentRow};
use serde_json::json;

use super::open_store;
use crate::cli::{LogsArgs, PsArgs, ShowArgs};
use crate::fmt;

fn row_json(r: &SubagentRow) -> serde_json::Value {
    json!({
        "id": r.id,
        "name": r.name,
        "cli": r.cli,
        "status": r.status,
        "failure_reason": r.failure_reason,
        "prompt": r.prompt,
        "model": r.model,
        "cwd": r.working_directory,
        "native_session_id": r.native_session_id,
        "result": r.result,
        "result_truncated": r.result_truncated,
        "num_turns": r.num_turns,
        "usage": r.usage,
        "cost_usd": r.cost_usd,
        "pid": r.pid,
        "exit_code": r.exit_code,
        "exit_signal": r.exit_signal,
        "created_at": r.created_at,
        "started_at": r.started_at,
        "completed_at": r.completed_at,
        "duration_ms": r.duration_ms(),
    })
}

pub fn ps(paths: StatePaths, a: PsArgs) -> anyhow::Result<u8> {
    let store = open_store(paths)?;
    let rows = store.list(a.all, a.limit)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        let v: Vec<_> = rows.iter().map(row_json).collect();
        writeln!(out, "{}", serde_json::Value::Array(v))?;
        return Ok(0);
    }
    if rows.is_empty() {
        let hint = if a.all { "" } else { " (--all shows finished ones)" };
        writeln!(out, "no subagents{hint}")?;
        return Ok(0);
    }
    writeln!(
        out,
        "{:<12}  {:<17}  {:<7}  {:<19}  {:>8}  {:>5}  {:>7}  {:>8}  PROMPT",
        "ID", "STATUS", "CLI", "CREATED", "DURATION", "TURNS", "TOKENS", "COST"
    )?;
    for r in rows {
        let status = match (&r.status, &r.failure) {
            (herd_core::Status::Failed, Some(f)) => format!("failed({})", f.code()),
            (s, _) => s.to_string(),
        };
        writeln!(
            out,
            "{:<12}  {:<17}  {:<7}  {:<19}  {:>8}  {:>5}  {:>7}  {:>8}  {}",
            &r.id[..12],
            status,
            r.cli,
            fmt::time(r.created_at),
            r.duration_ms().map_or_else(|| "-".into(), fmt::duration_ms),
            r.num_turns.map_or_else(|| "-".into(), |n| n.to_string()),
            fmt::count(r.usage.input_tokens + r.usage.output_tokens),
            fmt::cost(r.cost_usd),
            fmt::oneline(&r.prompt, 50)
        )?;
    }
    Ok(0)
}

pub fn show(paths: StatePaths, a: ShowArgs) -> anyhow::Result<u8> {
    let store = open_store(paths)?;
    let id = store.resolve(&a.id)?;
    let r = store.get(&id)?.ok_or_else(|| herd_store::StoreError::NotFound(a.id.clone()))?;
    let worktree = store.worktree_of(id.as_str())?;
    let mut out = std::io::stdout().lock();
    if a.json {
        let mut v = row_json(&r);
        if let Some(w) = &worktree {
            v["worktree"] = serde_json::json!({
                "id": w.id, "path": w.path, "branch": w.branch, "base": w.base,
                "integration_branch": w.integration_branch, "status": w.status,
                "merge_commit": w.merge_commit,
            });
        }
        writeln!(out, "{v}")?;
        return Ok(0);
    }
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let worktree_line = worktree.map_or_else(
        || "-".into(),
        |w| {
            let into = w.integration_branch.map(|b| format!(" → {b}")).unwrap_or_default();
            format!("{} ({}{into}, {})", w.path, w.branch, w.status)
        },
    );
    let lines = [
        ("id", r.id.clone()),
        ("status", r.status.to_string()),
        ("reason", opt(r.failure_reason.clone())),
        ("cli", r.cli.clone()),
        ("model", opt(r.model.clone())),
        ("cwd", r.working_directory.clone()),
        ("worktree", worktree_line),
        ("native session", opt(r.native_session_id.clone())),
        ("created", fmt::time(r.created_at)),
        ("duration", r.duration_ms().map_or_else(|| "-".into(), fmt::duration_ms)),
        ("turns", opt(r.num_turns.map(|n| n.to_string()))),
        (
            "tokens",
            format!(
                "{} in, {} out, {} cache read, {} cache write",
                r.usage.input_tokens,
                r.usage.output_tokens,
                r.usage.cache_read_input_tokens,
                r.usage.cache_creation_input_tokens
            ),
        ),
        ("cost", fmt::cost(r.cost_usd)),
        ("pid", opt(r.pid.map(|p| p.to_string()))),
        (
            "exit",
            opt(r
                .exit_code
                .map(|c| c.to_string())
                .or(r.exit_signal.map(|s| format!("signal {s}")))),
        ),
        ("transcript", store.paths().transcript(&id).display().to_string()),
        ("prompt", fmt::oneline(&r.prompt, 200)),
    ];
    for (k, v) in lines {
        writeln!(out, "{k:>15}: {v}")?;
    }
    if let Some(res) = &r.result {
        let note = if r.result_truncated { " (truncated)" } else { "" };
        writeln!(out, "\nresult{note}:\n{res}")?;
    }
    Ok(0)
}

pub fn logs(paths: StatePaths, a: LogsArgs) -> anyhow::Result<u8> {
    let store = open_store(paths)?;
    let id = store.resolve(&a.id)?;
    if a.raw {
        return raw(&store, &id, a.follow);
    }
    let mut after = 0;
    loop {
        let batch = store.events_after(&id, after, 1000)?;
        let mut out = std::io::stdout().lock();
        for e in &batch {
            if a.json {
                writeln!(out, "{}", serde_json::to_string(e)?)?;
            } else {
                let indent = if e.parent_tool_use_id.is_some() { "    " } else { "" };
                writeln!(
                    out,
                    "{:>5} {} {indent}{:<16} {}",
                    e.seq,
                    &fmt::time(e.ts)[11..],
                    e.event.kind(),
                    fmt::event_summary(&e.event)
                )?;
            }
            after = e.seq;
        }
        out.flush()?;
        if batch.len() == 1000 {
            continue;
        }
        if !a.follow || finished(&store, &id)? && store.events_after(&id, after, 1)?.is_empty() {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn finished(store: &Store, id: &herd_core::SubagentId) -> anyhow::Result<bool> {
    Ok(store.get(id)?.is_none_or(|r| r.closed_at.is_some() || r.status.is_terminal()))
}

/// The transcript as the agent wrote it.
fn raw(store: &Store, id: &herd_core::SubagentId, follow: bool) -> anyhow::Result<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let path = store.paths().transcript(id);
    let mut pos = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let done = finished(store, id)?;
        if let Ok(mut f) = std::fs::File::open(&path) {
            f.seek(SeekFrom::Start(pos))?;
            let mut out = std::io::stdout().lock();
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                out.write_all(&buf[..n])?;
                pos += n as u64;
            }
            out.flush()?;
        }
        if !follow || done {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

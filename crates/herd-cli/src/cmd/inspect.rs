//! `herd ps`, `herd show`, `herd logs`: what the service says of runs (from any terminal, while
//! runs go on). Tables for people, `--json` for scripts; `logs --follow` streams to the close.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use herd_engine::service::{RunFilter, Service, StoredEvent};

use crate::cli::{LogsArgs, PsArgs, ShowArgs};
use crate::fmt;

pub fn ps(state_dir: &Path, a: PsArgs) -> anyhow::Result<u8> {
    let rows = match super::remote::connect(state_dir)? {
        Some(daemon) => super::remote::ps(daemon, &a)?,
        None => {
            let svc = super::open_service(state_dir, "cli")?;
            svc.runs(RunFilter { all: a.all, limit: a.limit })?
        }
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
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
            r.duration_ms.map_or_else(|| "-".into(), fmt::duration_ms),
            r.num_turns.map_or_else(|| "-".into(), |n| n.to_string()),
            fmt::count(r.usage.input_tokens + r.usage.output_tokens),
            fmt::cost(r.cost_usd),
            fmt::oneline(&r.prompt, 50)
        )?;
    }
    Ok(0)
}

pub fn show(state_dir: &Path, a: ShowArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    let r = svc.run(&a.id)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&r)?)?;
        return Ok(0);
    }
    let worktree = r.worktree.clone();
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
        ("cwd", r.cwd.clone()),
        ("worktree", worktree_line),
        ("native session", opt(r.native_session_id.clone())),
        ("created", fmt::time(r.created_at)),
        ("duration", r.duration_ms.map_or_else(|| "-".into(), fmt::duration_ms)),
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
        ("transcript", r.transcript.display().to_string()),
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

pub fn logs(state_dir: &Path, a: LogsArgs) -> anyhow::Result<u8> {
    if a.follow
        && !a.raw
        && let Some(daemon) = super::remote::connect(state_dir)?
    {
        return super::remote::logs_follow(daemon, &a);
    }
    let svc = super::open_service(state_dir, "cli")?;
    let run = svc.run(&a.id)?;
    if a.raw {
        return raw(&svc, &run.id, a.follow);
    }
    if !a.follow {
        let mut after = 0;
        loop {
            let batch = svc.events(&run.id, after, 1000)?;
            let mut out = std::io::stdout().lock();
            for e in &batch {
                print_event(&mut out, e, a.json)?;
                after = e.seq;
            }
            out.flush()?;
            if batch.len() < 1000 {
                return Ok(0);
            }
        }
    }
    // Followed to its close: stored events, then new ones as they are stored.
    let rt = super::runtime()?;
    rt.block_on(async {
        let mut events = svc.watch(&run.id, 1)?;
        while let Some(e) = events.next().await {
            let e = e?;
            let mut out = std::io::stdout().lock();
            print_event(&mut out, &e, a.json)?;
            out.flush()?;
        }
        Ok(0)
    })
}

pub(crate) fn print_event(out: &mut impl Write, e: &StoredEvent, json: bool) -> anyhow::Result<()> {
    if json {
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
    Ok(())
}

/// The transcript as the agent wrote it.
fn raw(svc: &Service, id: &str, follow: bool) -> anyhow::Result<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let path = svc.run(id)?.transcript;
    let mut pos = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let done = svc.run(id)?.closed;
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

//! `herd ps`, `herd show`, `herd logs`: what the service says of runs (from any terminal, while
//! runs go on). Tables for people, `--json` for scripts (one array; `logs --follow --json`
//! streams JSON lines to the close). Plans' own views are in `plans`.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use herd_engine::service::{Service, StoredEvent};

use crate::cli::{LogsArgs, PsArgs, ShowArgs};
use crate::{UsageError, fmt, tables};

pub fn ps(state_dir: &Path, a: PsArgs) -> anyhow::Result<u8> {
    // Through a running daemon, its runs as it sees them; plans' unstarted steps are read here.
    let daemon = super::remote::connect(state_dir)?;
    let svc = super::open_service(state_dir, "cli")?;
    let rows = match daemon {
        Some(daemon) => super::remote::ps(daemon, &a)?,
        None => svc.runs(a.rows.into())?,
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
        return Ok(0);
    }
    // Steps that have no run (not started, or never will): of the plans listed.
    let plans = svc.plans(a.rows.into())?;
    let mut unstarted = Vec::new();
    for p in &plans {
        if p.pending_steps == 0 && !a.rows.all {
            continue;
        }
        let full = svc.plan(&p.id)?;
        for s in full.steps.into_iter().flatten().filter(|s| s.subagent_id.is_none()) {
            unstarted.push((p.id.clone(), s));
        }
    }
    let limit = a.rows.limit;
    let room = if limit == 0 { usize::MAX } else { limit.saturating_sub(rows.len()) };
    unstarted.truncate(room);
    if rows.is_empty() && unstarted.is_empty() {
        let hint = if a.rows.all { "" } else { " (--all shows finished ones)" };
        writeln!(out, "no subagents{hint}")?;
        return Ok(0);
    }
    write!(out, "{}", tables::ps(&rows, &unstarted))?;
    Ok(0)
}

pub fn show(state_dir: &Path, a: ShowArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    if super::plans::is_plan_id(&a.id) {
        return super::plans::show(&svc, &a.id, a.json);
    }
    let r = svc.run(&a.id)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&r)?)?;
        return Ok(0);
    }
    write!(out, "{}", tables::run(&r))?;
    Ok(0)
}

pub fn logs(state_dir: &Path, a: LogsArgs) -> anyhow::Result<u8> {
    if a.follow
        && !a.raw
        && !super::plans::is_plan_id(&a.id)
        && let Some(daemon) = super::remote::connect(state_dir)?
    {
        return super::remote::logs_follow(daemon, &a);
    }
    let svc = super::open_service(state_dir, "cli")?;
    if super::plans::is_plan_id(&a.id) {
        if a.raw {
            return Err(UsageError(
                "--raw is a run's stream; a plan has none (give a run id)".into(),
            )
            .into());
        }
        return super::plans::logs(&svc, &a.id, a.follow, a.json);
    }
    let run = svc.run(&a.id)?;
    if a.raw {
        return raw(&svc, &run.id, a.follow);
    }
    if !a.follow {
        let mut after = 0;
        let mut all = Vec::new();
        loop {
            let batch = svc.events(&run.id, after, 1000)?;
            let mut out = std::io::stdout().lock();
            for e in &batch {
                if !a.json {
                    print_event(&mut out, e, false)?;
                }
                after = e.seq;
            }
            out.flush()?;
            let full = batch.len() == 1000;
            if a.json {
                all.extend(batch);
            }
            if !full {
                break;
            }
        }
        if a.json {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", serde_json::to_string(&all)?)?;
        }
        return Ok(0);
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

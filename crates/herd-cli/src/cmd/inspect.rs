//! `herd ps`, `herd show`, `herd logs`: what the service says of runs (from any terminal, while
//! runs go on). Tables for people, `--json` for scripts (one array; `logs --follow --json`
//! streams JSON lines to the close). Plans' own views are in `plans`.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use herd_engine::service::{RunFilter, Service, StoredEvent};

use crate::cli::{LogsArgs, PsArgs, ShowArgs};
use crate::{UsageError, board, fmt};

pub fn ps(state_dir: &Path, a: PsArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    let rows = svc.runs(RunFilter { all: a.all, limit: a.limit })?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&rows)?)?;
        return Ok(0);
    }
    // Steps that have no run (not started, or never will): of the plans listed.
    let plans = svc.plans(RunFilter { all: a.all, limit: a.limit })?;
    let mut unstarted = Vec::new();
    for p in &plans {
        if p.pending_steps == 0 && !a.all {
            continue;
        }
        let full = svc.plan(&p.id)?;
        for s in full.steps.into_iter().flatten().filter(|s| s.subagent_id.is_none()) {
            unstarted.push((p.id.clone(), s));
        }
    }
    let room = if a.limit == 0 { usize::MAX } else { a.limit.saturating_sub(rows.len()) };
    unstarted.truncate(room);
    if rows.is_empty() && unstarted.is_empty() {
        let hint = if a.all { "" } else { " (--all shows finished ones)" };
        writeln!(out, "no subagents{hint}")?;
        return Ok(0);
    }
    let id_w = board::unique_len(rows.iter().map(|r| r.id.as_str()), board::MIN_ID);
    let plan_ids = rows.iter().filter_map(|r| r.plan_id.as_deref());
    let plan_w = board::unique_len(plan_ids.chain(unstarted.iter().map(|(p, _)| p.as_str())), 8);
    let name_w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .chain(unstarted.iter().map(|(_, s)| s.id.chars().count()))
        .max()
        .unwrap_or(4)
        .clamp(4, 20);
    let plan_col = plan_w.max(4);
    writeln!(
        out,
        "{:<id_w$}  {:<22}  {:<name_w$}  {:<plan_col$}  {:<7}  {:>8}  {:>5}  {:>7}  {:>8}  PROMPT",
        "ID", "STATUS", "NAME/STEP", "PLAN", "CLI", "DURATION", "TURNS", "TOKENS", "COST"
    )?;
    for r in &rows {
        let status = match (&r.status, &r.failure) {
            (herd_core::Status::Failed, Some(f)) => format!("failed({})", f.code()),
            _ => r.state.to_string(),
        };
        writeln!(
            out,
            "{:<id_w$}  {:<22}  {:<name_w$}  {:<plan_col$}  {:<7}  {:>8}  {:>5}  {:>7}  {:>8}  {}",
            board::prefix(&r.id, id_w),
            status,
            fmt::oneline(&r.name, name_w),
            r.plan_id.as_deref().map_or("-", |p| board::prefix(p, plan_w)),
            r.cli,
            r.duration_ms.map_or_else(|| "-".into(), fmt::duration_ms),
            r.num_turns.map_or_else(|| "-".into(), |n| n.to_string()),
            fmt::count(r.usage.input_tokens + r.usage.output_tokens),
            fmt::cost(r.cost_usd),
            fmt::oneline(&r.prompt, 50)
        )?;
    }
    for (plan, s) in &unstarted {
        let status = match &s.failure_reason {
            Some(r) if s.status == "failed" => {
                format!("failed({})", r.split('(').next().unwrap_or(r))
            }
            _ => s.state.clone(),
        };
        writeln!(
            out,
            "{:<id_w$}  {:<22}  {:<name_w$}  {:<plan_col$}  {:<7}  {:>8}  {:>5}  {:>7}  {:>8}  {}",
            "-",
            status,
            fmt::oneline(&s.id, name_w),
            board::prefix(plan, plan_w),
            "-",
            "-",
            "-",
            "-",
            "-",
            if s.depends_on.is_empty() {
                "(not started)".to_owned()
            } else {
                format!("(after {})", s.depends_on.join(", "))
            }
        )?;
    }
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
    let worktree = r.worktree.clone();
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let worktree_line = worktree.map_or_else(
        || "-".into(),
        |w| {
            let into = w.integration_branch.map(|b| format!(" → {b}")).unwrap_or_default();
            format!("{} ({}{into}, {})", w.path, w.branch, w.status)
        },
    );
    let plan =
        r.plan_id.as_ref().map(|p| format!("{p}, step {}", r.step.clone().unwrap_or_default()));
    let reason = match (&r.failure_reason, r.unanswered_denials) {
        (None, n) if n > 0 => Some(format!("{n} tool call(s) denied because nobody answered")),
        (f, _) => f.clone(),
    };
    let waiting: Vec<String> = r
        .pending_permissions
        .iter()
        .map(|p| format!("{} — herd approve {}", super::ask::call_text(p), p.id))
        .collect();
    let lines = [
        ("id", r.id.clone()),
        ("name", r.name.clone()),
        ("status", r.state.to_string()),
        ("reason", opt(reason)),
        ("plan", opt(plan)),
        ("waiting for", if waiting.is_empty() { "-".into() } else { waiting.join("; ") }),
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

pub(super) fn print_event(out: &mut impl Write, e: &StoredEvent, json: bool) -> anyhow::Result<()> {
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

//! `herd worktrees list | remove ID | prune`: the git worktrees herd made for isolated steps,
//! and their teardown — only herd's own, only when no work can be lost (see `teardown`).

use std::io::Write;

use herd_engine::workspace::teardown::{self, Verdict};
use herd_store::StatePaths;
use serde_json::json;

use super::open_store;
use crate::cli::WorktreesCommand;
use crate::{UsageError, exit, fmt};

pub fn run(paths: StatePaths, cmd: WorktreesCommand) -> anyhow::Result<u8> {
    let store = open_store(paths)?;
    let mut out = std::io::stdout().lock();
    match cmd {
        WorktreesCommand::List { json: json_out, all } => {
            let rows = store.worktrees(all)?;
            if json_out {
                writeln!(out, "{}", serde_json::to_string(&rows)?)?;
                return Ok(exit::COMPLETED);
            }
            writeln!(out, "{:<29}  {:<17}  {:<36}  PATH", "ID", "STATUS", "BRANCH")?;
            for r in &rows {
                writeln!(
                    out,
                    "{:<29}  {:<17}  {:<36}  {}",
                    r.id,
                    r.status,
                    fmt::oneline(&r.branch, 36),
                    r.path
                )?;
            }
            Ok(exit::COMPLETED)
        }
        WorktreesCommand::Remove { id } => {
            let id = if id.starts_with("wt_") { id } else { format!("wt_{id}") };
            let row = store.worktree(&id)?;
            match teardown::check(&store, &row, false)? {
                Verdict::Remove { delete_branch, why } => {
                    teardown::remove(&store, &row, delete_branch)?;
                    writeln!(out, "removed {} ({why})", row.path)?;
                    Ok(exit::COMPLETED)
                }
                Verdict::Refuse { why } => {
                    Err(UsageError(format!("refusing to remove {} ({}): {why}", row.id, row.path))
                        .into())
                }
            }
        }
        WorktreesCommand::Prune { dry_run, json: json_out } => {
            let mut report = Vec::new();
            let mut failed = false;
            for row in store.worktrees(false)? {
                // One worktree git cannot read must not stop the others being checked.
                let verdict = teardown::check(&store, &row, true)
                    .unwrap_or_else(|e| Verdict::Refuse { why: format!("cannot check it: {e}") });
                let mut done = None;
                if let Verdict::Remove { delete_branch, .. } = &verdict
                    && !dry_run
                {
                    done = Some(match teardown::remove(&store, &row, *delete_branch) {
                        Ok(()) => "removed".to_owned(),
                        Err(e) => {
                            failed = true;
                            format!("error: {e}")
                        }
                    });
                }
                report.push((row, verdict, done));
            }
            if json_out {
                let v: Vec<_> = report
                    .iter()
                    .map(|(r, v, d)| {
                        let mut o = json!({"id": r.id, "path": r.path, "branch": r.branch});
                        if let (Some(obj), Ok(serde_json::Value::Object(m))) =
                            (o.as_object_mut(), serde_json::to_value(v))
                        {
                            obj.extend(m);
                        }
                        o["result"] = json!(d.clone().unwrap_or_else(|| action(v, dry_run)));
                        o
                    })
                    .collect();
                writeln!(out, "{}", json!({"dry_run": dry_run, "worktrees": v}))?;
            } else {
                for (r, v, d) in &report {
                    let why = match v {
                        Verdict::Remove { why, .. } | Verdict::Refuse { why } => why,
                    };
                    let what = d.clone().unwrap_or_else(|| action(v, dry_run));
                    writeln!(out, "{} {what}: {} ({why})", r.id, r.path)?;
                }
                if report.is_empty() {
                    writeln!(out, "no worktrees to prune")?;
                }
            }
            Ok(if failed { exit::FAILED } else { exit::COMPLETED })
        }
    }
}

fn action(v: &Verdict, dry_run: bool) -> String {
    match (v, dry_run) {
        (Verdict::Remove { .. }, true) => "would remove".into(),
        (Verdict::Remove { .. }, false) => "removed".into(),
        (Verdict::Refuse { .. }, _) => "kept".into(),
    }
}

//! `herd worktrees list | remove ID | prune`: the git worktrees herd made for isolated runs,
//! and their teardown — only herd's own, only when no work can be lost.

use std::io::Write;
use std::path::Path;

use crate::cli::WorktreesCommand;
use crate::{exit, fmt};

pub fn run(state_dir: &Path, cmd: WorktreesCommand) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    let mut out = std::io::stdout().lock();
    match cmd {
        WorktreesCommand::List { json: json_out, all } => {
            let rows = svc.worktrees(all)?;
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
            writeln!(out, "{}", svc.remove_worktree(&id)?)?;
            Ok(exit::COMPLETED)
        }
        WorktreesCommand::Prune { dry_run, json: json_out } => {
            let report = svc.prune_worktrees(dry_run)?;
            let failed = report.iter().any(|p| p.result.starts_with("error"));
            if json_out {
                writeln!(out, "{}", serde_json::to_string(&report)?)?;
            } else {
                for p in &report {
                    let w = &p.worktree;
                    writeln!(out, "{} {}: {} ({})", w.id, p.result, w.path, p.why)?;
                }
                if report.is_empty() {
                    writeln!(out, "no worktrees to prune")?;
                }
            }
            Ok(if failed { exit::FAILED } else { exit::COMPLETED })
        }
    }
}

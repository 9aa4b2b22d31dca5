//! Teardown that never loses work: which herd-made worktrees may be removed (recorded, under
//! their root, unused, clean, merged or kept on a ref), removing them, and resetting one.

use std::path::Path;

use herd_store::{Store, WorktreeRow};
use serde::Serialize;

use super::{Git, WorkspaceError, absolute};
use crate::procfs;

/// What teardown may do with one worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Remove the worktree; delete its branch too when it is merged.
    Remove { delete_branch: bool, why: String },
    /// Leave it; the reason says why.
    Refuse { why: String },
}

/// Decide about `row`. `prune` removes only merged worktrees; an explicit remove also takes a
/// clean, unmerged one whose commits stay on its branch.
pub fn check(store: &Store, row: &WorktreeRow, prune: bool) -> Result<Verdict, WorkspaceError> {
    let refuse = |why: String| Ok(Verdict::Refuse { why });
    if row.status == "removed" {
        return refuse("already removed".into());
    }
    let path = Path::new(&row.path);
    let root = absolute(Path::new(&row.root));
    if !absolute(path).starts_with(&root) {
        return refuse(format!(
            "{} is not under herd's worktree root {}",
            row.path,
            root.display()
        ));
    }
    if let Some(sub) = &row.subagent_id
        && let Ok(id) = sub.parse()
        && let Some(s) = store.get(&id).map_err(|e| WorkspaceError::Invalid(e.to_string()))?
        && !s.status.is_terminal()
        && s.owner_pid.is_some_and(|p| procfs::is_same_process(p, s.owner_start_time))
    {
        return refuse(format!("in use by subagent {sub} ({})", s.status));
    }
    if row.kind == "integration"
        && row.owner_pid.is_some_and(|p| procfs::is_same_process(p, row.owner_start_time))
    {
        return refuse(format!("in use by the herd run {} (pid {:?})", row.run_id, row.owner_pid));
    }
    if !path.exists() {
        return Ok(Verdict::Remove {
            delete_branch: false,
            why: "the directory is gone; only git's record is pruned".into(),
        });
    }
    if let Some((pid, cmd)) = processes_in(path).into_iter().next() {
        return refuse(format!("in use by process {pid} ({cmd})"));
    }
    let wt = Git::new(path);
    let dirty = wt.dirty_paths()?;
    if !dirty.is_empty() {
        let shown: Vec<&str> = dirty.iter().take(5).map(String::as_str).collect();
        return refuse(format!(
            "has uncommitted changes ({}{}); commit them, or discard them with \
             herd cancel --cleanup-worktree",
            shown.join(", "),
            if dirty.len() > 5 { ", …" } else { "" }
        ));
    }
    if row.kind == "integration" {
        return Ok(Verdict::Remove {
            delete_branch: false,
            why: format!("integration worktree; branch {} keeps every merge", row.branch),
        });
    }
    let head = wt.commit_of("HEAD")?;
    let repo = Git::new(&row.repo);
    let into = row.integration_branch.as_deref().unwrap_or("");
    // Reachability, not commit counts: a squash or rebase elsewhere does not fool it.
    if !into.is_empty() && repo.branch_exists(into)? && repo.is_ancestor(&head, into)? {
        return Ok(Verdict::Remove { delete_branch: true, why: format!("merged into {into}") });
    }
    let on_branch = repo.branch_exists(&row.branch)? && repo.is_ancestor(&head, &row.branch)?;
    if !on_branch {
        return refuse(format!(
            "its HEAD {} is on no herd branch and not merged",
            &head[..12.min(head.len())]
        ));
    }
    if prune {
        return refuse(format!(
            "not merged into {}; its commits are only on {} (herd worktrees remove {} removes \
             the worktree and keeps the branch)",
            if into.is_empty() { "an integration branch" } else { into },
            row.branch,
            row.id
        ));
    }
    Ok(Verdict::Remove {
        delete_branch: false,
        why: format!("not merged; branch {} is kept with its commits", row.branch),
    })
}

/// Carry out a `Remove` verdict: `git worktree remove` (which itself refuses a dirty tree),
/// then `git branch -D` only if the branch is still reachable from the integration branch.
pub fn remove(store: &Store, row: &WorktreeRow, delete_branch: bool) -> Result<(), WorkspaceError> {
    let repo = Git::new(&row.repo);
    if Path::new(&row.path).exists() {
        repo.worktree(&["remove", &row.path])?;
    } else {
        repo.worktree(&["prune"])?;
    }
    if delete_branch
        && let Some(into) = row.integration_branch.as_deref()
        && repo.branch_exists(&row.branch)?
        && repo.is_ancestor(&row.branch, into)?
    {
        repo.run(&["branch", "-D", "--end-of-options", &row.branch])?;
    }
    store
        .set_worktree_status(&row.id, "removed", None, None)
        .map_err(|e| WorkspaceError::Invalid(e.to_string()))
}

/// Throw away uncommitted changes in a herd-made worktree (`git reset --hard`, `git clean
/// -fd`); refuses any other directory.
pub fn cleanup(store: &Store, dir: &Path) -> Result<WorktreeRow, WorkspaceError> {
    let shown = absolute(dir).display().to_string();
    let row = store
        .worktree_at(&shown)
        .map_err(|e| WorkspaceError::Invalid(e.to_string()))?
        .filter(|r| r.kind == "step" && absolute(dir).starts_with(absolute(Path::new(&r.root))))
        .ok_or_else(|| {
            WorkspaceError::Invalid(format!(
                "{shown} is not a worktree herd created; --cleanup-worktree only resets those"
            ))
        })?;
    let git = Git::new(dir);
    git.run(&["reset", "--hard", "--quiet", "HEAD"])?;
    git.run(&["clean", "-fd", "--quiet"])?;
    Ok(row)
}

/// Processes whose working directory is `dir` or below it.
fn processes_in(dir: &Path) -> Vec<(u32, String)> {
    let dir = absolute(dir);
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c.starts_with(&dir)) {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            out.push((pid, String::from_utf8_lossy(&raw).replace('\0', " ").trim().to_owned()));
        }
    }
    out
}

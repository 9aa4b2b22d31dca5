//! Workspace records: the git worktrees herd created (so teardown touches only those) and the
//! advisory directory locks, each acquired or refused in one SQLite transaction.

use herd_core::workspace::{Hold, admits};
use serde::Serialize;

use crate::db::{Db, Row, vals};
use crate::{Result, Store, StoreError, now_ms};

/// A worktree about to be created.
#[derive(Debug, Clone)]
pub struct NewWorktree {
    pub id: String,
    /// `step` (an agent's) or `integration` (where herd merges).
    pub kind: String,
    pub run_id: String,
    pub step_key: String,
    pub subagent_id: Option<String>,
    pub repo: String,
    pub root: String,
    pub path: String,
    pub branch: String,
    pub base: String,
    pub integration_branch: Option<String>,
    pub owner_pid: u32,
    pub owner_start_time: Option<u64>,
}

/// A worktree as stored.
#[derive(Debug, Clone, Serialize)]
pub struct WorktreeRow {
    pub id: String,
    pub kind: String,
    pub run_id: String,
    pub step_key: String,
    pub subagent_id: Option<String>,
    pub repo: String,
    pub root: String,
    pub path: String,
    pub branch: String,
    pub base: String,
    pub integration_branch: Option<String>,
    pub status: String,
    pub head: Option<String>,
    pub merge_commit: Option<String>,
    pub owner_pid: Option<u32>,
    pub owner_start_time: Option<u64>,
    pub created_at: i64,
    pub merged_at: Option<i64>,
    pub removed_at: Option<i64>,
}

/// One holder of a lock on a directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockHolder {
    pub path: String,
    pub holder: String,
    pub mode: String,
    pub owner_pid: Option<u32>,
    pub owner_start_time: Option<u64>,
    pub acquired_at: i64,
}

/// Whether a lock holder's owning process still runs: `(pid, start time)`.
pub type IsAlive<'a> = &'a dyn Fn(u32, Option<u64>) -> bool;
/// [`IsAlive`] as a plain function, to send to the writer.
pub type IsAliveFn = fn(u32, Option<u64>) -> bool;

const SELECT_WT: &str = "SELECT id, kind, run_id, step_key, subagent_id, repo, root, path, branch,
    base, integration_branch, status, head, merge_commit, owner_pid, owner_start_time, created_at,
    merged_at, removed_at FROM worktrees";

fn wt_row(r: &Row<'_>) -> Result<WorktreeRow> {
    Ok(WorktreeRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        run_id: r.get(2)?,
        step_key: r.get(3)?,
        subagent_id: r.get(4)?,
        repo: r.get(5)?,
        root: r.get(6)?,
        path: r.get(7)?,
        branch: r.get(8)?,
        base: r.get(9)?,
        integration_branch: r.get(10)?,
        status: r.get(11)?,
        head: r.get(12)?,
        merge_commit: r.get(13)?,
        owner_pid: r.get(14)?,
        owner_start_time: r.get(15)?,
        created_at: r.get(16)?,
        merged_at: r.get(17)?,
        removed_at: r.get(18)?,
    })
}

/// The holders of locks on `path` (only the exclusive ones if `exclusive_only`), oldest first.
fn holders(conn: &Db, path: &str, exclusive_only: bool) -> Result<Vec<LockHolder>> {
    // Sorted here, not by ORDER BY: SQLite (with STAT4) re-prepares a statement that orders
    // rows found by an equality on a bound value every time the value changes.
    let sql = if exclusive_only {
        "SELECT l.path, l.holder, l.lock_mode, l.owner_pid, l.owner_start_time, l.acquired_at
         FROM worktree_locks l WHERE l.path = ?1 AND l.lock_mode = 'exclusive'
           AND (l.owner_host IS NULL OR l.owner_host = ?2)"
    } else {
        "SELECT l.path, l.holder, l.lock_mode, l.owner_pid, l.owner_start_time, l.acquired_at
         FROM worktree_locks l WHERE l.path = ?1 AND (l.owner_host IS NULL OR l.owner_host = ?2)"
    };
    // A path names a directory of one machine: another machine's holders of the same path
    // hold another directory (and their processes cannot be judged from here).
    let mut rows = conn.query(sql, vals![path, crate::host_id()], |r| {
        Ok(LockHolder {
            path: r.get(0)?,
            holder: r.get(1)?,
            mode: r.get(2)?,
            owner_pid: r.get(3)?,
            owner_start_time: r.get(4)?,
            acquired_at: r.get(5)?,
        })
    })?;
    rows.sort_by_key(|h| h.acquired_at);
    Ok(rows)
}

/// A holder is live while its run is active and its owning herd process still runs.
fn is_live(conn: &Db, h: &LockHolder, alive: IsAlive<'_>) -> Result<bool> {
    // The status is compared here: an `IN (…)` list would build a temporary table per call.
    let status: Option<String> =
        conn.opt("SELECT status FROM subagents WHERE id = ?1", vals![&h.holder], |r| r.get(0))?;
    let active =
        matches!(status.as_deref(), Some("pending" | "queued" | "running" | "waiting_for_merge"));
    Ok(active && h.owner_pid.is_some_and(|p| alive(p, h.owner_start_time)))
}

/// Take `hold` on `path` for run `holder` inside the caller's write transaction: holders whose
/// run ended or whose owning process is dead are reclaimed first; then the seed-000 table
/// decides. `Ok(Err(holders))` names the live holders that block the request.
pub(crate) fn acquire_lock(
    conn: &Db,
    path: &str,
    holder: &str,
    hold: Hold,
    owner: (u32, Option<u64>),
    alive: IsAlive<'_>,
) -> Result<std::result::Result<(), Vec<LockHolder>>> {
    // Only an exclusive holder can block a shared or unlocked run (the seed-000 table): the
    // others need not be looked at, however many runs share the directory.
    if conn.is_pg() {
        // Several machines may take locks on one path at once: one at a time per path, until
        // this transaction ends (SQLite's write transaction already is one at a time).
        conn.one("SELECT pg_advisory_xact_lock(hashtext(?1))::TEXT", vals![path], |_| Ok(()))?;
    }
    let mut live = Vec::new();
    for h in holders(conn, path, hold != Hold::Exclusive)? {
        if h.holder == holder {
            continue;
        }
        if is_live(conn, &h, alive)? {
            live.push(h);
        } else {
            conn.exec(
                "DELETE FROM worktree_locks WHERE path = ?1 AND holder = ?2",
                vals![&h.path, &h.holder],
            )?;
        }
    }
    let held: Vec<Hold> = live.iter().filter_map(|h| h.mode.parse().ok()).collect();
    if !admits(&held, hold) {
        return Ok(Err(live));
    }
    let upsert = if conn.is_pg() {
        "INSERT INTO worktree_locks
            (path, holder, lock_mode, owner_pid, owner_start_time, acquired_at, owner_host)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (path, holder) DO UPDATE SET lock_mode = EXCLUDED.lock_mode,
            owner_pid = EXCLUDED.owner_pid, owner_start_time = EXCLUDED.owner_start_time,
            acquired_at = EXCLUDED.acquired_at, owner_host = EXCLUDED.owner_host"
    } else {
        "INSERT OR REPLACE INTO worktree_locks
            (path, holder, lock_mode, owner_pid, owner_start_time, acquired_at, owner_host)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    };
    conn.exec(
        upsert,
        vals![
            path,
            holder,
            hold.as_str(),
            owner.0,
            owner.1.map(|t| t as i64),
            now_ms(),
            crate::host_id()
        ],
    )?;
    Ok(Ok(()))
}

pub(crate) fn release_locks(conn: &Db, holder: &str) -> Result<usize> {
    conn.exec("DELETE FROM worktree_locks WHERE holder = ?1", vals![holder])
}

impl Store {
    /// Record a worktree before `git worktree add` runs, so a crash still leaves a record.
    pub fn record_worktree(&self, w: &NewWorktree) -> Result<()> {
        self.conn.exec(
            "INSERT INTO worktrees (id, kind, run_id, step_key, subagent_id, repo, root, path,
                branch, base, integration_branch, owner_pid, owner_start_time, created_at,
                owner_host)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            vals![
                &w.id,
                &w.kind,
                &w.run_id,
                &w.step_key,
                &w.subagent_id,
                &w.repo,
                &w.root,
                &w.path,
                &w.branch,
                &w.base,
                &w.integration_branch,
                w.owner_pid,
                w.owner_start_time.map(|t| t as i64),
                now_ms(),
                crate::host_id()
            ],
        )?;
        Ok(())
    }

    /// Set a worktree's status, and its branch head / merge commit when given.
    pub fn set_worktree_status(
        &self,
        id: &str,
        status: &str,
        head: Option<&str>,
        merge_commit: Option<&str>,
    ) -> Result<()> {
        let now = now_ms();
        let n = self.conn.exec(
            "UPDATE worktrees SET status = ?2, head = COALESCE(?3, head),
                merge_commit = COALESCE(?4, merge_commit),
                merged_at = CASE WHEN ?2 = 'merged' THEN ?5 ELSE merged_at END,
                removed_at = CASE WHEN ?2 = 'removed' THEN ?5 ELSE removed_at END
             WHERE id = ?1",
            vals![id, status, head, merge_commit, now],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound(id.into()));
        }
        Ok(())
    }

    /// Worktrees herd created on this machine, oldest first; removed ones only with `all`.
    pub fn worktrees(&self, all: bool) -> Result<Vec<WorktreeRow>> {
        let filter = if all { "" } else { " AND status != 'removed'" };
        let sql =
            format!("{SELECT_WT} WHERE {}{filter} ORDER BY created_at, id", crate::store::MINE);
        self.conn.query(&sql, vals![crate::host_id()], wt_row)
    }

    /// The worktree with this id (or unique id prefix).
    pub fn worktree(&self, prefix: &str) -> Result<WorktreeRow> {
        let p = prefix.trim();
        let sql = format!("{SELECT_WT} WHERE {} ORDER BY id LIMIT 6", self.conn.prefix_of("id"));
        let rows: Vec<WorktreeRow> = self.conn.query(&sql, vals![p], wt_row)?;
        match rows.as_slice() {
            [] => Err(StoreError::NotFound(prefix.into())),
            [one] => Ok(one.clone()),
            many => Err(StoreError::Ambiguous {
                prefix: prefix.into(),
                matches: many.iter().map(|r| r.id.as_str()).collect::<Vec<_>>().join(", "),
            }),
        }
    }

    /// The live (not removed) worktree herd made at `path`, if any.
    pub fn worktree_at(&self, path: &str) -> Result<Option<WorktreeRow>> {
        self.conn.opt(
            &format!("{SELECT_WT} WHERE path = ?1 AND status != 'removed' LIMIT 1"),
            vals![path],
            wt_row,
        )
    }

    /// The worktree of a subagent, if it ran in one.
    pub fn worktree_of(&self, subagent: &str) -> Result<Option<WorktreeRow>> {
        self.conn.opt(
            &format!("{SELECT_WT} WHERE subagent_id = ?1 LIMIT 1"),
            vals![subagent],
            wt_row,
        )
    }

    /// Take `hold` on `path` for run `holder`, in one transaction (see [`acquire_lock`]).
    pub fn acquire_lock(
        &mut self,
        path: &str,
        holder: &str,
        hold: Hold,
        owner: (u32, Option<u64>),
        alive: IsAlive<'_>,
    ) -> Result<std::result::Result<(), Vec<LockHolder>>> {
        self.conn.tx(|tx| acquire_lock(tx, path, holder, hold, owner, alive))
    }

    /// Release every lock `holder` has.
    pub fn release_locks(&self, holder: &str) -> Result<usize> {
        release_locks(&self.conn, holder)
    }

    /// Drop lock rows whose holder is no longer live; returns how many.
    pub fn reclaim_locks(&mut self, alive: IsAlive<'_>) -> Result<usize> {
        self.conn.tx(|tx| {
            let paths: Vec<String> =
                tx.query("SELECT DISTINCT path FROM worktree_locks", vals![], |r| r.get(0))?;
            let mut n = 0;
            for p in paths {
                for h in holders(tx, &p, false)? {
                    if !is_live(tx, &h, alive)? {
                        n += tx.exec(
                            "DELETE FROM worktree_locks WHERE path = ?1 AND holder = ?2",
                            vals![&h.path, &h.holder],
                        )?;
                    }
                }
            }
            Ok(n)
        })
    }

    /// Every lock row, for display.
    pub fn locks(&self) -> Result<Vec<LockHolder>> {
        let paths: Vec<String> = self.conn.query(
            "SELECT DISTINCT path FROM worktree_locks ORDER BY path",
            vals![],
            |r| r.get(0),
        )?;
        let mut out = Vec::new();
        for p in paths {
            out.extend(holders(&self.conn, &p, false)?);
        }
        Ok(out)
    }
}

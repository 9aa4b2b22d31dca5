//! The merge gate of plans served by workers (PostgreSQL only): a plan's repository, a step
//! that pushed its branch and waits for its merge, and one merger per plan at a time.
//!
//! A worker whose isolated step's agent finished pushes the step's branch and hands the step
//! over with [`Store::await_merge`]: its lease ends (nothing runs any more) and it stays
//! `running` with `merge_branch` set until merged, as on one machine. Any worker may merge: it
//! takes the plan's merge lock ([`Store::try_merge_lock`], a session advisory lock, released
//! by [`Store::merge_unlock`] or by its connection's end), merges the waiting steps in plan
//! order and ends each with [`Store::finish_merge`].

use herd_core::{AgentEvent, FailureReason, Status, SubagentId};

use crate::db::vals;
use crate::{Claim, Result, Store, Update};

/// Where a plan's isolated steps' work goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRepo {
    /// A URL (or path) every worker can fetch from and push to.
    pub url: String,
    /// The commit the steps start from.
    pub base: String,
    /// The branch their work is merged into.
    pub integration_branch: String,
}

/// A step of a queued plan, as the merge gate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeCandidate {
    pub key: String,
    pub status: String,
    /// The pushed branch, when the step waits for its merge.
    pub merge_branch: Option<String>,
    pub merge_head: Option<String>,
    pub subagent_id: Option<String>,
}

/// How a waiting step's merge ended.
#[derive(Debug, Clone)]
pub struct MergeEnd {
    pub status: Status,
    pub failure: Option<FailureReason>,
    /// The merge commit, when there is one.
    pub commit: Option<String>,
    /// Events for the step's run (`worktree_merged`, `merge_conflict`, …).
    pub events: Vec<AgentEvent>,
}

impl Store {
    /// The repository of queued plan `orch`, when it has isolated steps.
    pub fn plan_repo(&self, orch: &str) -> Result<Option<PlanRepo>> {
        let row: Option<(Option<String>, Option<String>, Option<String>)> = self.conn.opt(
            "SELECT repo_url, repo_base, integration_branch FROM orchestrations WHERE id = ?1",
            vals![orch],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        Ok(match row {
            Some((Some(url), Some(base), Some(integration_branch))) => {
                Some(PlanRepo { url, base, integration_branch })
            }
            _ => None,
        })
    }

    /// The holder of `c` pushed the step's work as `branch` at `head`: the step waits for its
    /// merge (its lease ends; it stays `running`). False if the lease was lost.
    pub fn await_merge(&self, c: &Claim, branch: &str, head: &str) -> Result<bool> {
        let db = self.pg()?;
        db.tx(|tx| {
            let n = tx.exec(
                "UPDATE orchestration_steps SET merge_branch = ?4, merge_head = ?5,
                     lease_owner = NULL, lease_expires_at = NULL
                 WHERE orchestration_id = ?1 AND step_key = ?2 AND fence = ?3 AND status = 'running'",
                vals![&c.orch, &c.key, c.fence, branch, head],
            )?;
            if n == 0 {
                return Ok(false);
            }
            crate::queue::lock_plan(tx, &c.orch)?;
            let payload = serde_json::json!({"branch": branch, "head": head, "fence": c.fence});
            crate::plans::append_plan_event(
                tx,
                &c.orch,
                crate::now_ms(),
                "step_waiting_for_merge",
                Some(&c.key),
                &payload,
            )?;
            crate::queue::notify(tx)?;
            Ok(true)
        })
    }

    /// Plans with a step waiting for its merge.
    pub fn plans_awaiting_merge(&self) -> Result<Vec<String>> {
        self.pg()?.query(
            "SELECT DISTINCT orchestration_id FROM orchestration_steps
             WHERE status = 'running' AND merge_branch IS NOT NULL",
            vals![],
            |r| r.get(0),
        )
    }

    /// Take plan `orch`'s merge lock on this connection, if no one holds it. It is held until
    /// [`Store::merge_unlock`] or until this connection ends (a merger that dies frees it).
    pub fn try_merge_lock(&self, orch: &str) -> Result<bool> {
        self.pg()?
            .one("SELECT pg_try_advisory_lock(hashtext('merge:' || ?1))", vals![orch], |r| r.get(0))
    }

    /// Give plan `orch`'s merge lock back.
    pub fn merge_unlock(&self, orch: &str) -> Result<()> {
        self.pg()?.one(
            "SELECT pg_advisory_unlock(hashtext('merge:' || ?1))::TEXT",
            vals![orch],
            |_| Ok(()),
        )
    }

    /// Plan `orch`'s steps as the merge gate sees them.
    pub fn merge_candidates(&self, orch: &str) -> Result<Vec<MergeCandidate>> {
        self.pg()?.query(
            "SELECT step_key, status, merge_branch, merge_head, subagent_id
             FROM orchestration_steps WHERE orchestration_id = ?1 ORDER BY sequence",
            vals![orch],
            |r| {
                Ok(MergeCandidate {
                    key: r.get(0)?,
                    status: r.get(1)?,
                    merge_branch: r.get(2)?,
                    merge_head: r.get(3)?,
                    subagent_id: r.get(4)?,
                })
            },
        )
    }

    /// End waiting step `key` of `orch` as its merge ended: the step, its run (events, final
    /// status), its worktree's record, its dependents and the plan. False if it was not
    /// waiting (another merger ended it).
    pub fn finish_merge(&self, orch: &str, key: &str, end: &MergeEnd) -> Result<bool> {
        let db = self.pg()?;
        let status = end.status.to_string();
        let reason = end.failure.as_ref().map(ToString::to_string);
        db.tx(|tx| {
            let subagent: Option<Option<String>> = tx.opt(
                "UPDATE orchestration_steps SET status = ?3, failure_reason = ?4,
                     completed_at = ?5, merge_branch = NULL
                 WHERE orchestration_id = ?1 AND step_key = ?2 AND status = 'running'
                   AND merge_branch IS NOT NULL
                 RETURNING subagent_id",
                vals![orch, key, &status, reason.as_deref(), crate::now_ms()],
                |r| r.get(0),
            )?;
            let Some(subagent) = subagent else { return Ok(false) };
            crate::queue::lock_plan(tx, orch)?;
            if let Some(id) = subagent.as_deref().and_then(|s| s.parse::<SubagentId>().ok()) {
                let mut events = end.events.clone();
                if let Some(f) = &end.failure {
                    events.push(AgentEvent::SubagentFailed { reason: f.to_string() });
                }
                let close_reason =
                    end.failure.as_ref().map_or_else(|| "merged".to_owned(), |f| f.code().into());
                events.push(AgentEvent::SubagentClosed {
                    final_status: status.clone(),
                    close_reason: close_reason.clone(),
                });
                let now = crate::now_ms();
                let u = Update {
                    status: Some(end.status),
                    failure: end.failure.clone(),
                    closed_at: Some(now),
                    close_reason: Some(close_reason),
                    events,
                    ..Update::default()
                };
                let mut seqs = std::collections::HashMap::new();
                crate::store::apply_update(tx, &mut seqs, &id, &u, now)?;
            }
            let wt_status = match &end.failure {
                None => "merged",
                Some(FailureReason::MergeConflict) => "conflict",
                Some(_) => "failed",
            };
            tx.exec(
                "UPDATE worktrees SET status = ?3, merge_commit = ?4
                 WHERE run_id = ?1 AND step_key = ?2 AND kind = 'step'
                   AND status = 'waiting_for_merge'",
                vals![orch, key, wt_status, end.commit.as_deref()],
            )?;
            let kind =
                if end.status == Status::Completed { "step_completed" } else { "step_failed" };
            let payload = serde_json::json!({
                "status": status, "reason": reason, "merge_commit": end.commit,
            });
            crate::plans::append_plan_event(tx, orch, crate::now_ms(), kind, Some(key), &payload)?;
            if end.status != Status::Completed {
                crate::queue::fail_dependents(tx, orch)?;
            }
            crate::queue::finish_plan_if_done(tx, orch)?;
            crate::queue::notify(tx)?;
            Ok(true)
        })
    }
}

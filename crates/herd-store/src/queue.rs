//! Plans served by workers on several machines (PostgreSQL only): submitting a plan to the
//! queue, claiming ready steps (`FOR UPDATE SKIP LOCKED`), leases, fencing, and the workers.
//!
//! A claimed step holds a lease (`lease_owner`, `lease_expires_at` on the database's clock) that
//! its worker renews; each claim bumps the step's `fence`, and every write of a lease holder
//! names the fence it got, so a worker whose lease expired (and whose step another worker
//! took) changes nothing. Every change that may make a step ready is announced with
//! `NOTIFY herd_steps`: workers sleep in `LISTEN`, not in a poll loop.

use serde::Serialize;

use crate::db::{Db, vals};
use crate::{NewOrchestration, PlanTotals, Result, Store, StoreError};

/// The channel workers listen on.
pub const STEPS_CHANNEL: &str = "herd_steps";

/// The database's clock in milliseconds (leases are compared on one clock, not each machine's).
const DB_NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::BIGINT";

/// A step's queue settings, beside its [`crate::NewStep`].
#[derive(Debug, Clone, Default)]
pub struct QueuedStep {
    /// Attempts after the first (lease expiries count as attempts).
    pub retries: u32,
    /// Labels a worker must have to take it.
    pub labels: Vec<String>,
}

/// A step a worker holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub orch: String,
    pub key: String,
    /// The step's fence after this claim: every write of this holder names it.
    pub fence: i64,
    pub attempt: u32,
}

/// A worker as registered.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerRow {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub labels: Vec<String>,
    pub max_concurrent: u32,
    pub running: u32,
    /// `active`, `draining` or `stopped`.
    pub status: String,
    pub started_at: i64,
    pub heartbeat_at: i64,
}

impl Store {
    pub(crate) fn pg(&self) -> Result<&Db> {
        if self.conn.is_pg() {
            Ok(&self.conn)
        } else {
            Err(StoreError::Corrupt(
                "workers share plans through PostgreSQL: give --store postgres://… (or HERD_STORE_URL)"
                    .into(),
            ))
        }
    }

    /// Store plan `o` for workers to run: its steps `pending`, queued, with the plan's text
    /// (each worker loads it again in its own project), then wake the workers.
    /// `repo`: where its isolated steps' work goes (workers clone it and push to it).
    pub fn submit_orchestration(
        &mut self,
        o: &NewOrchestration,
        text: &str,
        queued: &[QueuedStep],
        repo: Option<&crate::PlanRepo>,
    ) -> Result<()> {
        let db = self.pg()?;
        db.tx(|tx| {
            crate::plans::create_orchestration(tx, o)?;
            tx.exec(
                "UPDATE orchestrations SET status = 'running', source_text = ?2, repo_url = ?3,
                     repo_base = ?4, integration_branch = ?5
                 WHERE id = ?1",
                vals![
                    &o.id,
                    text,
                    repo.map(|r| r.url.as_str()),
                    repo.map(|r| r.base.as_str()),
                    repo.map(|r| r.integration_branch.as_str())
                ],
            )?;
            for (s, q) in o.steps.iter().zip(queued) {
                let labels = serde_json::to_string(&q.labels).unwrap_or_default();
                tx.exec(
                    "UPDATE orchestration_steps SET queued = 1, retries = ?3, labels = ?4
                     WHERE orchestration_id = ?1 AND step_key = ?2",
                    vals![&o.id, &s.key, q.retries, labels],
                )?;
            }
            notify(tx)
        })
    }

    /// Someone asked queued plan `orch` to stop (see [`Store::request_plan_cancel`]): its
    /// steps not yet claimed are `cancelled` (workers take no more of it; those running are
    /// stopped through their runs), and the plan ends once none runs. False if it is not a
    /// queued plan.
    pub fn cancel_queued(&self, orch: &str) -> Result<bool> {
        let db = self.pg()?;
        db.tx(|tx| {
            lock_plan(tx, orch)?;
            let skipped: Vec<String> = tx.query(
                "UPDATE orchestration_steps SET status = 'cancelled', failure_reason = 'cancelled',
                     completed_at = ?2
                 WHERE orchestration_id = ?1 AND queued = 1 AND status = 'pending'
                 RETURNING step_key",
                vals![orch, crate::now_ms()],
                |r| r.get(0),
            )?;
            for key in &skipped {
                let payload = serde_json::json!({"status": "cancelled", "reason": "cancelled"});
                crate::plans::append_plan_event(
                    tx,
                    orch,
                    crate::now_ms(),
                    "step_cancelled",
                    Some(key),
                    &payload,
                )?;
            }
            finish_plan_if_done(tx, orch)?;
            notify(tx)?;
            Ok(true)
        })
    }

    /// The text of a queued plan, as submitted.
    pub fn plan_text(&self, orch: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .opt("SELECT source_text FROM orchestrations WHERE id = ?1", vals![orch], |r| r.get(0))?
            .flatten())
    }

    /// Record worker `id` (or take its row again) as active.
    pub fn register_worker(
        &self,
        id: &str,
        host: &str,
        labels: &[String],
        max_concurrent: u32,
    ) -> Result<()> {
        let db = self.pg()?;
        let labels = serde_json::to_string(labels).unwrap_or_default();
        db.exec(
            &format!(
                "INSERT INTO workers (id, host, pid, labels, max_concurrent, running, status,
                     started_at, heartbeat_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0, 'active', {DB_NOW}, {DB_NOW})
                 ON CONFLICT (id) DO UPDATE SET status = 'active', heartbeat_at = {DB_NOW}"
            ),
            vals![id, host, std::process::id(), labels, max_concurrent],
        )?;
        Ok(())
    }

    /// The worker is alive, runs `running` steps, and is `status`; its leases last `lease_ms`
    /// more. Returns the claims it still holds (one it lost was taken over: stop its run).
    pub fn heartbeat(
        &self,
        worker: &str,
        running: u32,
        status: &str,
        lease_ms: i64,
    ) -> Result<Vec<Claim>> {
        let db = self.pg()?;
        db.exec(
            &format!(
                "UPDATE workers SET heartbeat_at = {DB_NOW}, running = ?2, status = ?3 WHERE id = ?1"
            ),
            vals![worker, running, status],
        )?;
        db.query(
            &format!(
                "UPDATE orchestration_steps SET lease_expires_at = {DB_NOW} + ?2
                 WHERE lease_owner = ?1 AND status = 'running'
                 RETURNING orchestration_id, step_key, fence, attempts"
            ),
            vals![worker, lease_ms],
            |r| Ok(Claim { orch: r.get(0)?, key: r.get(1)?, fence: r.get(2)?, attempt: r.get(3)? }),
        )
    }

    /// Take one ready step — queued, pending, every dependency completed, labels met, its plan
    /// running — that no other worker is taking right now (`SKIP LOCKED`). Oldest plan first,
    /// then plan order.
    ///
    /// The dependency check starts from the step's own `depends_on` keys and looks each up by
    /// `idx_orch_step_key`: starting from the plan's steps instead (`d.step_key IN (…)`) scanned
    /// every step of the plan for every pending one, so a claim cost grew with the plan's size
    /// squared (16 ms for a 300-step plan, against 0.4 ms this way; EXPLAIN ANALYZE).
    pub fn claim_step(
        &self,
        worker: &str,
        labels: &[String],
        lease_ms: i64,
        subagent: &str,
    ) -> Result<Option<Claim>> {
        let db = self.pg()?;
        let labels = serde_json::to_string(labels).unwrap_or_default();
        db.tx(|tx| {
            let claim = tx.opt(
                &format!(
                    "WITH ready AS (
                        SELECT s.id FROM orchestration_steps s
                        JOIN orchestrations o ON o.id = s.orchestration_id
                        WHERE s.queued = 1 AND s.status = 'pending' AND o.status = 'running'
                          AND o.cancel_requested_at IS NULL
                          AND NOT EXISTS (
                            SELECT 1 FROM json_array_elements_text(COALESCE(s.labels, '[]')::json) l
                            WHERE l.value NOT IN (SELECT json_array_elements_text(CAST(?2 AS TEXT)::json)))
                          AND NOT EXISTS (
                            SELECT 1 FROM json_array_elements_text(COALESCE(s.depends_on, '[]')::json) k
                            JOIN orchestration_steps d
                              ON d.orchestration_id = s.orchestration_id AND d.step_key = k.value
                            WHERE d.status != 'completed')
                        ORDER BY o.created_at, s.sequence
                        LIMIT 1
                        FOR UPDATE OF s SKIP LOCKED)
                     UPDATE orchestration_steps s SET status = 'running', lease_owner = ?1,
                         lease_expires_at = {DB_NOW} + ?3, fence = s.fence + 1,
                         attempts = s.attempts + 1, subagent_id = NULL
                     FROM ready WHERE s.id = ready.id
                     RETURNING s.orchestration_id, s.step_key, s.fence, s.attempts"
                ),
                vals![worker, labels, lease_ms],
                |r| {
                    Ok(Claim {
                        orch: r.get(0)?,
                        key: r.get(1)?,
                        fence: r.get(2)?,
                        attempt: r.get(3)?,
                    })
                },
            )?;
            if let Some(c) = &claim {
                let payload = serde_json::json!({
                    "status": "running", "worker": worker, "attempt": c.attempt,
                    "fence": c.fence, "subagent_id": subagent,
                });
                let kind = if c.attempt > 1 { "subagent_attempt" } else { "step_started" };
                crate::plans::append_plan_event(
                    tx,
                    &c.orch,
                    crate::now_ms(),
                    kind,
                    Some(&c.key),
                    &payload,
                )?;
            }
            Ok(claim)
        })
    }

    /// The holder of `c` names the run it started for it; false if it no longer holds it.
    pub fn claimed_run(&self, c: &Claim, subagent: &str) -> Result<bool> {
        let n = self.pg()?.exec(
            "UPDATE orchestration_steps SET subagent_id = ?4
             WHERE orchestration_id = ?1 AND step_key = ?2 AND fence = ?3 AND status = 'running'",
            vals![&c.orch, &c.key, c.fence, subagent],
        )?;
        Ok(n == 1)
    }

    /// End claimed step `c` as `status` (`completed`, `failed`, `cancelled`) — only if its
    /// fence is still `c.fence` (false: the lease was lost and another worker owns the step;
    /// nothing is written). A failure with attempts left makes it `pending` again; a final one
    /// fails its dependents; the plan ends with its last step. Wakes the workers.
    pub fn finish_claim(&self, c: &Claim, status: &str, reason: Option<&str>) -> Result<bool> {
        let db = self.pg()?;
        db.tx(|tx| {
            // The step's row before the plan's lock, as a claim takes them: a claimer may hold
            // this row locked (FOR UPDATE locks a row that changed since its snapshot, then
            // skips it, keeping the lock) while it waits for the plan's lock to log its claim.
            let retry = status == "failed"
                && tx
                    .opt(
                        "SELECT attempts <= retries FROM orchestration_steps
                         WHERE orchestration_id = ?1 AND step_key = ?2",
                        vals![&c.orch, &c.key],
                        |r| r.get::<bool>(0),
                    )?
                    .unwrap_or(false);
            let to = if retry { "pending" } else { status };
            let n = tx.exec(
                "UPDATE orchestration_steps SET status = ?4, failure_reason = ?5, lease_owner = NULL,
                     lease_expires_at = NULL,
                     completed_at = CASE WHEN ?6 THEN CAST(?7 AS BIGINT) ELSE NULL END
                 WHERE orchestration_id = ?1 AND step_key = ?2 AND fence = ?3 AND status = 'running'",
                vals![&c.orch, &c.key, c.fence, to, reason, !retry, crate::now_ms()],
            )?;
            if n == 0 {
                return Ok(false);
            }
            lock_plan(tx, &c.orch)?;
            let payload = serde_json::json!({"status": to, "reason": reason, "fence": c.fence});
            let kind = match to {
                "completed" => "step_completed",
                "failed" => "step_failed",
                "pending" => "step_retrying",
                _ => "step_cancelled",
            };
            crate::plans::append_plan_event(
                tx,
                &c.orch,
                crate::now_ms(),
                kind,
                Some(&c.key),
                &payload,
            )?;
            if to == "failed" {
                fail_dependents(tx, &c.orch)?;
            }
            finish_plan_if_done(tx, &c.orch)?;
            notify(tx)?;
            Ok(true)
        })
    }

    /// Steps whose lease expired (their worker died or lost the database): `pending` again
    /// while attempts are left (the next claim counts one more), else `failed(lease_expired)`.
    /// Returns how many were taken back.
    pub fn requeue_expired(&self) -> Result<usize> {
        let db = self.pg()?;
        db.tx(|tx| {
            let taken: Vec<(String, String, bool)> = tx.query(
                &format!(
                    "UPDATE orchestration_steps SET
                         status = CASE WHEN attempts <= retries THEN 'pending' ELSE 'failed' END,
                         failure_reason = CASE WHEN attempts <= retries THEN NULL
                                               ELSE 'lease_expired' END,
                         lease_owner = NULL, lease_expires_at = NULL, fence = fence + 1
                     WHERE id IN (SELECT id FROM orchestration_steps
                                  WHERE queued = 1 AND status = 'running'
                                    AND lease_expires_at < {DB_NOW}
                                  FOR UPDATE SKIP LOCKED)
                     RETURNING orchestration_id, step_key, status = 'pending'"
                ),
                vals![],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            for (orch, key, again) in &taken {
                lock_plan(tx, orch)?;
                let kind = if *again { "step_requeued" } else { "step_failed" };
                let payload = serde_json::json!({"reason": "lease_expired"});
                crate::plans::append_plan_event(
                    tx,
                    orch,
                    crate::now_ms(),
                    kind,
                    Some(key),
                    &payload,
                )?;
                if !again {
                    fail_dependents(tx, orch)?;
                    finish_plan_if_done(tx, orch)?;
                }
            }
            if !taken.is_empty() {
                notify(tx)?;
            }
            Ok(taken.len())
        })
    }

    /// The results of plan `orch`'s completed steps, by key (their dependents' context).
    pub fn step_results(&self, orch: &str) -> Result<Vec<(String, String)>> {
        self.conn.query(
            "SELECT s.step_key, COALESCE(a.result_summary, '') FROM orchestration_steps s
             JOIN subagents a ON a.id = s.subagent_id
             WHERE s.orchestration_id = ?1 AND s.status = 'completed'",
            vals![orch],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// Registered workers, most recent heartbeat first.
    pub fn workers(&self) -> Result<Vec<WorkerRow>> {
        self.pg()?.query(
            "SELECT id, host, pid, labels, max_concurrent, running, status, started_at, heartbeat_at
             FROM workers ORDER BY heartbeat_at DESC",
            vals![],
            |r| {
                let labels: String = r.get(3)?;
                Ok(WorkerRow {
                    id: r.get(0)?,
                    host: r.get(1)?,
                    pid: r.get(2)?,
                    labels: serde_json::from_str(&labels).unwrap_or_default(),
                    max_concurrent: r.get(4)?,
                    running: r.get(5)?,
                    status: r.get(6)?,
                    started_at: r.get(7)?,
                    heartbeat_at: r.get(8)?,
                })
            },
        )
    }

    /// Listen for [`STEPS_CHANNEL`] on this store's connection.
    pub fn listen_steps(&self) -> Result<()> {
        self.pg()?.batch(&format!("LISTEN {STEPS_CHANNEL}"))
    }

    /// Wait up to `timeout` for a notification this connection listens to; true if one came
    /// (any others already waiting are taken with it).
    pub fn wait_notification(&self, timeout: std::time::Duration) -> bool {
        match &self.conn {
            Db::Pg(c) => {
                let got = c.notification(timeout).is_some();
                while c.notification(std::time::Duration::ZERO).is_some() {}
                got
            }
            Db::Lite(_) => {
                std::thread::sleep(timeout);
                false
            }
        }
    }
}

/// Wake the workers (delivered when the transaction commits).
pub(crate) fn notify(tx: &Db) -> Result<()> {
    tx.one("SELECT pg_notify(?1, '')::TEXT", vals![STEPS_CHANNEL], |_| Ok(()))
}

/// One writer at a time per plan until the transaction ends (its dependents, its end).
pub(crate) fn lock_plan(tx: &Db, orch: &str) -> Result<()> {
    tx.one("SELECT pg_advisory_xact_lock(hashtext(?1))::TEXT", vals![orch], |_| Ok(()))
}

/// Pending steps of `orch` with a failed (or cancelled) dependency fail with
/// `dependency_failed(<it>)`, transitively.
pub(crate) fn fail_dependents(tx: &Db, orch: &str) -> Result<()> {
    loop {
        let failed: Vec<(String, String)> = tx.query(
            "UPDATE orchestration_steps s SET status = 'failed',
                 failure_reason = 'dependency_failed(' || d.step_key || ')', completed_at = ?2
             FROM orchestration_steps d
             WHERE s.orchestration_id = ?1 AND d.orchestration_id = ?1 AND s.status = 'pending'
               AND (d.status = 'failed' OR d.status = 'cancelled')
               AND d.step_key IN (SELECT json_array_elements_text(COALESCE(s.depends_on, '[]')::json))
             RETURNING s.step_key, s.failure_reason",
            vals![orch, crate::now_ms()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if failed.is_empty() {
            return Ok(());
        }
        for (key, reason) in failed {
            let payload = serde_json::json!({"status": "failed", "reason": reason});
            crate::plans::append_plan_event(
                tx,
                orch,
                crate::now_ms(),
                "step_failed",
                Some(&key),
                &payload,
            )?;
        }
    }
}

/// With every step of `orch` ended, the plan ends: `completed` if all completed, else
/// `failed`; its cost and tokens summed from its runs.
pub(crate) fn finish_plan_if_done(tx: &Db, orch: &str) -> Result<()> {
    let (open, completed, failed, total): (i64, i64, i64, i64) = tx.one(
        "SELECT COUNT(*) FILTER (WHERE status IN ('pending','running','blocked')),
                COUNT(*) FILTER (WHERE status = 'completed'),
                COUNT(*) FILTER (WHERE status = 'failed'), COUNT(*)
         FROM orchestration_steps WHERE orchestration_id = ?1",
        vals![orch],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let (running, cancelling): (bool, bool) = tx
        .opt(
            "SELECT status = 'running', cancel_requested_at IS NOT NULL FROM orchestrations
             WHERE id = ?1",
            vals![orch],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .unwrap_or((false, false));
    if open > 0 || !running {
        return Ok(());
    }
    let (cost, input, output): (f64, i64, i64) = tx.one(
        "SELECT COALESCE(SUM(a.cost_usd), 0)::DOUBLE PRECISION,
                COALESCE(SUM(a.input_tokens), 0)::BIGINT, COALESCE(SUM(a.output_tokens), 0)::BIGINT
         FROM subagents a JOIN orchestration_steps s ON s.subagent_id = a.id
         WHERE s.orchestration_id = ?1",
        vals![orch],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let totals = PlanTotals {
        cost_usd: cost,
        usage: herd_core::Usage {
            input_tokens: input as u64,
            output_tokens: output as u64,
            ..Default::default()
        },
        completed_steps: completed as usize,
        failed_steps: failed as usize,
    };
    let status = if cancelling && completed < total {
        "cancelled"
    } else if failed == 0 && completed > 0 {
        "completed"
    } else {
        "failed"
    };
    crate::plans::finish_orchestration(tx, orch, status, &totals)
}

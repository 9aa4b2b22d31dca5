//! Plan persistence: orchestrations, their steps (each with its delegation contract), and the
//! per-plan event log with its own sequence. Written by the plan executor, read by `herd`.

use serde::Serialize;

use crate::db::{Db, Row, vals};
use crate::store::{ROW_COLS, row_at};
use crate::{Result, Store, SubagentRow, now_ms};

/// A plan run as stored.
#[derive(Debug, Clone, Serialize)]
pub struct OrchestrationRow {
    pub id: String,
    pub name: String,
    pub strategy: String,
    pub status: String,
    pub total_steps: u32,
    pub completed_steps: u32,
    pub failed_steps: u32,
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub created_at: i64,
    pub completed_at: Option<i64>,
    pub source_file: Option<String>,
    /// Someone asked for the plan to stop (`herd cancel PLAN` from any process).
    pub cancel_requested_at: Option<i64>,
    pub owner_pid: Option<u32>,
    pub owner_start_time: Option<u64>,
}

/// A step as stored.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    pub step_key: String,
    pub name: String,
    pub status: String,
    pub failure_reason: Option<String>,
    pub subagent_id: Option<String>,
    pub attempts: u32,
    pub sequence: u32,
    /// The keys of the steps it waits for.
    pub depends_on: Vec<String>,
    pub working_directory: Option<String>,
    pub completed_at: Option<i64>,
}

/// How many of a plan's steps are in each status, and what its runs have cost so far.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StepTally {
    pub pending: u32,
    pub running: u32,
    pub blocked: u32,
    pub completed: u32,
    pub failed: u32,
    pub cancelled: u32,
    /// Over each step's latest run.
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A plan run that has not ended, and the herd process that owns it.
#[derive(Debug, Clone)]
pub struct ActivePlan {
    pub id: String,
    pub owner_pid: Option<u32>,
    pub owner_start_time: Option<u64>,
}

/// One entry of a plan's own event log.
#[derive(Debug, Clone, Serialize)]
pub struct PlanEvent {
    pub seq: i64,
    /// When it was stored: ms since the epoch, RFC 3339 text in JSON.
    #[serde(serialize_with = "herd_core::time::ser_ms")]
    pub ts: i64,
    pub kind: String,
    pub step: Option<String>,
    pub payload: String,
}

/// A step to insert with its plan.
#[derive(Debug, Clone)]
pub struct NewStep {
    pub key: String,
    pub name: String,
    pub prompt: String,
    pub model: Option<String>,
    pub cwd: Option<String>,
    pub tools: Option<Vec<String>>,
    pub depends_on: Vec<String>,
    /// The seed-003 delegation contract, as JSON text.
    pub contract: String,
}

/// A plan run to persist with its steps.
#[derive(Debug, Clone)]
pub struct NewOrchestration {
    pub id: String,
    pub session: String,
    pub name: String,
    pub strategy: String,
    /// The plan as run, as JSON text.
    pub plan: String,
    pub source_file: Option<String>,
    pub steps: Vec<NewStep>,
    pub owner_pid: u32,
    pub owner_start_time: Option<u64>,
}

/// Persist a plan run and all its steps (`pending`), inside the caller's transaction.
pub(crate) fn create_orchestration(tx: &Db, o: &NewOrchestration) -> Result<()> {
    let (id, steps) = (o.id.as_str(), &o.steps);
    let now = now_ms();
    tx.exec(
        "INSERT INTO orchestrations (id, parent_session_id, name, strategy, total_steps, plan,
                source_file, owner_pid, owner_start_time, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        vals![
            id,
            &o.session,
            &o.name,
            &o.strategy,
            steps.len() as i64,
            &o.plan,
            &o.source_file,
            o.owner_pid,
            o.owner_start_time.map(|v| v as i64),
            now
        ],
    )?;
    for (i, s) in steps.iter().enumerate() {
        tx.exec(
            "INSERT INTO orchestration_steps (id, orchestration_id, step_key, name, prompt, model,
                    working_directory, allowed_tools, depends_on, contract, sequence, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            vals![
                format!("{id}/{}", s.key),
                id,
                &s.key,
                &s.name,
                &s.prompt,
                &s.model,
                &s.cwd,
                s.tools.as_ref().map(|t| serde_json::to_string(t).unwrap_or_default()),
                serde_json::to_string(&s.depends_on).unwrap_or_default(),
                &s.contract,
                i as i64,
                now
            ],
        )?;
    }
    tx.exec(
        "INSERT INTO plan_events (orchestration_id, seq, ts, kind, step_key, payload)
             VALUES (?1, 1, ?2, 'plan_created', NULL, ?3)",
        vals![id, now, serde_json::json!({"steps": steps.len()}).to_string()],
    )?;
    Ok(())
}

/// A change to one step of a plan.
#[derive(Debug, Clone, Default)]
pub struct StepChange {
    pub orch: String,
    pub key: String,
    pub status: String,
    pub subagent: Option<String>,
    pub reason: Option<String>,
    pub attempt: Option<u32>,
}

impl StepChange {
    /// Step `key` of plan `orch` goes to `status` (and why); subagent and attempt unchanged.
    pub fn new(orch: &str, key: &str, status: &str, reason: Option<String>) -> Self {
        Self {
            orch: orch.into(),
            key: key.into(),
            status: status.into(),
            subagent: None,
            reason,
            attempt: None,
        }
    }
}

/// Update a step's status (and optionally its subagent, reason, attempts); appends a plan event.
pub(crate) fn set_step(tx: &Db, c: &StepChange) -> Result<()> {
    let (orch, key, status) = (c.orch.as_str(), c.key.as_str(), c.status.as_str());
    let (subagent, reason, attempt) = (c.subagent.as_deref(), c.reason.as_deref(), c.attempt);
    let now = now_ms();
    let done = matches!(status, "completed" | "failed" | "cancelled");
    tx.exec(
        "UPDATE orchestration_steps SET status = ?3,
                subagent_id = COALESCE(?4, subagent_id),
                failure_reason = COALESCE(?5, failure_reason),
                attempts = COALESCE(?6, attempts),
                completed_at = CASE WHEN ?7 THEN ?8 ELSE completed_at END
             WHERE orchestration_id = ?1 AND step_key = ?2",
        vals![orch, key, status, subagent, reason, attempt, done, now],
    )?;
    let kind = match (status, attempt) {
        ("running", Some(a)) if a > 1 => "subagent_attempt",
        ("running", _) => "step_started",
        ("completed", _) => "step_completed",
        ("failed", _) => "step_failed",
        ("blocked", _) => "step_blocked",
        _ => "step_cancelled",
    };
    let payload = serde_json::json!({
        "status": status, "subagent_id": subagent, "reason": reason, "attempt": attempt,
    });
    append_plan_event(tx, orch, now, kind, Some(key), &payload)?;
    Ok(())
}

/// A plan's roll-ups, as its run counted them.
#[derive(Debug, Clone, Default)]
pub struct PlanTotals {
    pub cost_usd: f64,
    pub usage: herd_core::Usage,
    pub completed_steps: usize,
    pub failed_steps: usize,
}

/// Set the plan's status and roll-ups (the step counts come from the run: counting them here
/// read every step row, thousands at the end of a large plan).
pub(crate) fn finish_orchestration(
    tx: &Db,
    orch: &str,
    status: &str,
    t: &PlanTotals,
) -> Result<()> {
    let now = now_ms();
    let terminal = matches!(status, "completed" | "failed" | "cancelled");
    tx.exec(
        "UPDATE orchestrations SET status = ?2, cost_usd = ?3, input_tokens = ?4, output_tokens = ?5,
                completed_steps = ?6, failed_steps = ?7,
                completed_at = CASE WHEN ?8 THEN ?9 ELSE completed_at END
             WHERE id = ?1",
        vals![
            orch,
            status,
            t.cost_usd,
            t.usage.input_tokens as i64,
            t.usage.output_tokens as i64,
            t.completed_steps as i64,
            t.failed_steps as i64,
            terminal,
            now
        ],
    )?;
    let payload = serde_json::json!({"status": status, "cost_usd": t.cost_usd});
    append_plan_event(tx, orch, now, &format!("plan_{status}"), None, &payload)?;
    Ok(())
}

impl Store {
    /// Active plan runs with their owner's identity.
    pub fn active_orchestrations(&self) -> Result<Vec<ActivePlan>> {
        self.conn().query(
            // A plan served by workers is not its submitter's: its steps' leases keep it.
            &format!(
                "SELECT id, owner_pid, owner_start_time FROM orchestrations
                 WHERE status IN ('pending','running') AND source_text IS NULL AND {}",
                crate::store::MINE
            ),
            vals![crate::host_id()],
            |r| Ok(ActivePlan { id: r.get(0)?, owner_pid: r.get(1)?, owner_start_time: r.get(2)? }),
        )
    }

    /// Mark a plan whose owner died `interrupted` (`herd run --resume` runs what had not
    /// completed), and its unfinished steps `failed(orphaned)` or, never started, cancelled.
    pub fn fail_orphaned_orchestration(&mut self, id: &str) -> Result<()> {
        self.conn.tx(|tx| {
            // Steps that were under way failed with their herd; those never started are cancelled.
            tx.exec(
                "UPDATE orchestration_steps SET status = 'failed', failure_reason = 'orphaned', completed_at = ?2
                 WHERE orchestration_id = ?1 AND status IN ('running','blocked')",
                vals![id, now_ms()],
            )?;
            tx.exec(
                "UPDATE orchestration_steps SET status = 'cancelled', failure_reason = 'orphaned', completed_at = ?2
                 WHERE orchestration_id = ?1 AND status = 'pending'",
                vals![id, now_ms()],
            )?;
            // Status only: the cost and token roll-ups written so far stay.
            tx.exec(
                "UPDATE orchestrations SET status = 'interrupted', completed_at = ?2 WHERE id = ?1",
                vals![id, now_ms()],
            )?;
            append_plan_event(
                tx,
                id,
                now_ms(),
                "plan_interrupted",
                None,
                &serde_json::json!({"reason": "orphaned"}),
            )
        })
    }

    /// The plan run with this exact id.
    pub fn orchestration(&self, id: &str) -> Result<Option<OrchestrationRow>> {
        self.conn().opt(
            &format!("SELECT {ORCH_COLS} FROM orchestrations WHERE id = ?1"),
            vals![id],
            orch_row,
        )
    }

    /// Plan runs, newest first: only those that have not ended unless `all`.
    pub fn orchestrations(&self, all: bool, limit: usize) -> Result<Vec<OrchestrationRow>> {
        let filter = if all { "" } else { " WHERE status = 'pending' OR status = 'running'" };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn().query(
            &format!("SELECT {ORCH_COLS} FROM orchestrations{filter} ORDER BY id DESC LIMIT ?1"),
            vals![limit],
            orch_row,
        )
    }

    /// The one plan run whose id starts with `prefix` (`pln_…`, or the part after `pln_`).
    pub fn resolve_plan(&self, prefix: &str) -> Result<String> {
        let p = prefix.trim().to_ascii_lowercase();
        let p = if p.starts_with("pln_") { p } else { format!("pln_{p}") };
        let tail = &p[4..];
        if tail.is_empty() || !herd_core::SubagentId::is_prefix_like(tail) {
            return Err(crate::StoreError::NotFound(prefix.into()));
        }
        let sql = format!(
            "SELECT id FROM orchestrations WHERE {} ORDER BY id LIMIT 6",
            self.conn().prefix_of("id")
        );
        let ids: Vec<String> = self.conn().query(&sql, vals![&p], |r| r.get(0))?;
        match ids.as_slice() {
            [] => Err(crate::StoreError::NotFound(prefix.into())),
            [one] => Ok(one.clone()),
            many => Err(crate::StoreError::Ambiguous {
                prefix: prefix.into(),
                matches: many.join(", "),
            }),
        }
    }

    /// The plan as it was run (its JSON text), for what its steps declare (outputs).
    pub fn orchestration_plan(&self, id: &str) -> Result<Option<String>> {
        self.conn().opt("SELECT plan FROM orchestrations WHERE id = ?1", vals![id], |r| r.get(0))
    }

    /// Ask the herd that runs plan `id` to stop it; false if it had already ended.
    pub fn request_plan_cancel(&self, id: &str) -> Result<bool> {
        let n = self.conn().exec(
            "UPDATE orchestrations SET cancel_requested_at = COALESCE(cancel_requested_at, ?2)
             WHERE id = ?1 AND (status = 'pending' OR status = 'running')",
            vals![id, now_ms()],
        )?;
        if n > 0 {
            append_plan_event(
                self.conn(),
                id,
                now_ms(),
                "plan_cancel_requested",
                None,
                &serde_json::json!({}),
            )?;
            // A plan served by workers has no owner to stop it: the queue does.
            let queued = self.conn().is_pg()
                && self
                    .conn()
                    .opt(
                        "SELECT source_text IS NOT NULL FROM orchestrations WHERE id = ?1",
                        vals![id],
                        |r| r.get::<bool>(0),
                    )?
                    .unwrap_or(false);
            if queued {
                self.cancel_queued(id)?;
            }
        }
        Ok(n > 0)
    }

    /// Whether someone asked for plan `id` to stop.
    pub fn plan_cancel_requested(&self, id: &str) -> Result<bool> {
        let v: Option<Option<i64>> = self.conn().opt(
            "SELECT cancel_requested_at FROM orchestrations WHERE id = ?1",
            vals![id],
            |r| r.get(0),
        )?;
        Ok(v.flatten().is_some())
    }

    /// How many of plan `orch`'s steps are in each status, and its runs' cost so far.
    pub fn step_tally(&self, orch: &str) -> Result<StepTally> {
        let mut t = StepTally::default();
        let counts: Vec<(String, u32)> = self.conn().query(
            "SELECT status, count(*) FROM orchestration_steps WHERE orchestration_id = ?1
             GROUP BY status",
            vals![orch],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        for (status, n) in counts {
            match status.as_str() {
                "pending" => t.pending = n,
                "running" => t.running = n,
                "blocked" => t.blocked = n,
                "completed" => t.completed = n,
                "failed" => t.failed = n,
                _ => t.cancelled += n,
            }
        }
        let (cost, input, output): (Option<f64>, Option<i64>, Option<i64>) = self.conn().one(
            "SELECT sum(s.cost_usd), CAST(sum(s.input_tokens) AS BIGINT),
                    CAST(sum(s.output_tokens) AS BIGINT)
             FROM orchestration_steps st JOIN subagents s ON s.id = st.subagent_id
             WHERE st.orchestration_id = ?1",
            vals![orch],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        t.cost_usd = cost.unwrap_or(0.0);
        t.input_tokens = input.unwrap_or(0) as u64;
        t.output_tokens = output.unwrap_or(0) as u64;
        Ok(t)
    }

    /// A plan's steps in plan order.
    pub fn steps(&self, orch: &str) -> Result<Vec<StepRow>> {
        Ok(self.steps_with_runs(orch)?.into_iter().map(|(s, _)| s).collect())
    }

    /// A plan's steps in plan order, each with its latest run (none before it started).
    pub fn steps_with_runs(&self, orch: &str) -> Result<Vec<(StepRow, Option<SubagentRow>)>> {
        self.conn().query(
            &format!(
                "SELECT st.step_key, st.name, st.status, st.failure_reason, st.subagent_id,
                        st.attempts, st.sequence, st.depends_on, st.working_directory,
                        st.completed_at, {ROW_COLS}
                 FROM orchestration_steps st LEFT JOIN subagents ON subagents.id = st.subagent_id
                 WHERE st.orchestration_id = ?1 ORDER BY st.sequence"
            ),
            vals![orch],
            |r| {
                let depends: Option<String> = r.get(7)?;
                let step = StepRow {
                    step_key: r.get(0)?,
                    name: r.get(1)?,
                    status: r.get(2)?,
                    failure_reason: r.get(3)?,
                    subagent_id: r.get(4)?,
                    attempts: r.get(5)?,
                    sequence: r.get(6)?,
                    depends_on: depends
                        .and_then(|d| serde_json::from_str(&d).ok())
                        .unwrap_or_default(),
                    working_directory: r.get(8)?,
                    completed_at: r.get(9)?,
                };
                let run = match r.get::<Option<String>>(STEP_COLS)? {
                    Some(_) => Some(row_at(r, STEP_COLS)?),
                    None => None,
                };
                Ok((step, run))
            },
        )
    }

    /// Plan events after sequence number `after`, at most `limit`, in order.
    pub fn plan_events_after(
        &self,
        orch: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<PlanEvent>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn().query(
            "SELECT seq, ts, kind, step_key, payload FROM plan_events
             WHERE orchestration_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            vals![orch, after, limit],
            |r| {
                Ok(PlanEvent {
                    seq: r.get(0)?,
                    ts: r.get(1)?,
                    kind: r.get(2)?,
                    step: r.get(3)?,
                    payload: r.get(4)?,
                })
            },
        )
    }

    /// Take up a plan that ended unfinished (`interrupted`, `failed`, `cancelled`) again, owned
    /// by `owner` now: its steps that had not completed are `pending` again (their runs stay
    /// recorded), a `plan_resumed` event says which had. False if it is not in such a state.
    pub fn reopen_orchestration(&mut self, id: &str, owner: (u32, Option<u64>)) -> Result<bool> {
        self.conn.tx(|tx| {
        let n = tx.exec(
            "UPDATE orchestrations SET status = 'running', completed_at = NULL, owner_pid = ?2,
                    owner_start_time = ?3, owner_host = ?4
             WHERE id = ?1 AND (status = 'interrupted' OR status = 'failed' OR status = 'cancelled')",
            vals![id, owner.0, owner.1.map(|v| v as i64), crate::host_id()],
        )?;
        if n == 0 {
            return Ok(false);
        }
        let kept: Vec<String> = tx.query(
            "SELECT step_key FROM orchestration_steps
             WHERE orchestration_id = ?1 AND status = 'completed' ORDER BY sequence",
            vals![id],
            |r| r.get(0),
        )?;
        tx.exec(
            "UPDATE orchestration_steps SET status = 'pending', failure_reason = NULL,
                    completed_at = NULL
             WHERE orchestration_id = ?1 AND status != 'completed'",
            vals![id],
        )?;
        let payload = serde_json::json!({"completed_steps": kept});
        append_plan_event(tx, id, now_ms(), "plan_resumed", None, &payload)?;
        Ok(true)
        })
    }

    /// Plan events in order.
    pub fn plan_events(&self, orch: &str) -> Result<Vec<PlanEvent>> {
        self.plan_events_after(orch, 0, usize::MAX)
    }
}

/// The columns [`orch_row`] reads.
const ORCH_COLS: &str = "id, name, strategy, status, total_steps, completed_steps, failed_steps,
    cost_usd, input_tokens, output_tokens, created_at, completed_at, source_file,
    cancel_requested_at, owner_pid, owner_start_time";

/// The step columns before a step's run's in [`Store::steps_with_runs`].
const STEP_COLS: usize = 10;

fn orch_row(r: &Row<'_>) -> Result<OrchestrationRow> {
    Ok(OrchestrationRow {
        id: r.get(0)?,
        name: r.get(1)?,
        strategy: r.get(2)?,
        status: r.get(3)?,
        total_steps: r.get(4)?,
        completed_steps: r.get(5)?,
        failed_steps: r.get(6)?,
        cost_usd: r.get(7)?,
        input_tokens: r.get(8)?,
        output_tokens: r.get(9)?,
        created_at: r.get(10)?,
        completed_at: r.get(11)?,
        source_file: r.get(12)?,
        cancel_requested_at: r.get(13)?,
        owner_pid: r.get(14)?,
        owner_start_time: r.get(15)?,
    })
}

pub(crate) fn append_plan_event(
    conn: &Db,
    orch: &str,
    ts: i64,
    kind: &str,
    step: Option<&str>,
    payload: &serde_json::Value,
) -> Result<()> {
    if conn.is_pg() {
        // Several processes (workers) add to one plan's log at once: one at a time per plan,
        // until this transaction ends, so each reads the last number the other wrote.
        conn.one("SELECT pg_advisory_xact_lock(hashtext(?1))::TEXT", vals![orch], |_| Ok(()))?;
    }
    // `CAST(?1 AS TEXT)` in the subquery: with a bare `?1` SQLite (STAT4) re-prepares the
    // statement on every call.
    conn.exec(
        "INSERT INTO plan_events (orchestration_id, seq, ts, kind, step_key, payload)
         VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM plan_events
                      WHERE orchestration_id = CAST(?1 AS TEXT)),
                 ?2, ?3, ?4, ?5)",
        vals![orch, ts, kind, step, payload.to_string()],
    )?;
    Ok(())
}

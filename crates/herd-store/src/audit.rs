//! The permission gate's records: the audit log, pending permission requests answered from any
//! terminal (`herd approve` / `herd deny`), and auto-approve revocation (`herd revoke`).

use crate::db::{Db, Row, V, vals};
use serde::Serialize;

use crate::sql::ACTIVE;
use crate::{Result, Store, StoreError, now_ms};

/// How long audit rows are kept by `herd gc` (seed 000: 90 days).
pub const AUDIT_RETENTION_DAYS: u64 = 90;

/// One audit entry to write.
#[derive(Debug, Clone, Default)]
pub struct NewAudit {
    /// `subagent_spawn`, `permission_decision`, `auto_approve_tool_call`, `rate_limit_exceeded`, …
    pub event_type: &'static str,
    /// `info`, `warn` or `error`.
    pub severity: &'static str,
    pub subagent_id: Option<String>,
    pub parent_session_id: Option<String>,
    pub tool: Option<String>,
    /// The tool input, at most 1 KiB.
    pub input_preview: Option<String>,
    pub input_sha256: Option<String>,
    /// `allow`, `deny`, `ask` or `observed`.
    pub decision: Option<&'static str>,
    /// The rule, limit, hook or person that decided.
    pub decided_by: Option<String>,
    pub rate_limit_state: Option<serde_json::Value>,
    pub details: Option<serde_json::Value>,
}

/// An audit entry as stored.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRow {
    pub id: i64,
    /// When it was written: ms since the epoch, RFC 3339 text in JSON.
    #[serde(serialize_with = "herd_core::time::ser_ms")]
    pub ts: i64,
    pub event_type: String,
    pub severity: String,
    pub subagent_id: Option<String>,
    pub parent_session_id: Option<String>,
    pub tool: Option<String>,
    pub input_preview: Option<String>,
    pub input_sha256: Option<String>,
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub rate_limit_state: Option<serde_json::Value>,
    pub details: Option<serde_json::Value>,
}

/// Which audit rows to read.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub subagent_id: Option<String>,
    /// Only rows at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
    pub limit: usize,
}

/// A tool call waiting for a person.
#[derive(Debug, Clone)]
pub struct NewPermissionRequest {
    pub id: String,
    pub subagent_id: String,
    /// The agent CLI's own request id, echoed in its answer.
    pub cli_request_id: String,
    pub tool: String,
    pub input_preview: String,
    pub input_sha256: String,
    pub expires_at: i64,
}

/// A permission request as stored.
#[derive(Debug, Clone, Serialize)]
pub struct PermissionRequestRow {
    pub id: String,
    pub subagent_id: String,
    pub tool: String,
    pub input_preview: String,
    pub input_sha256: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub status: String,
    pub always: bool,
    pub reason: Option<String>,
    pub decided_by: Option<String>,
    /// The name of the run that asks (a plan step's key).
    pub run_name: String,
    /// The plan and step the run is, when it is one.
    pub plan_id: Option<String>,
    pub step: Option<String>,
}

/// How `herd approve` / `herd deny` went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// This answer decided the request.
    Decided,
    /// Someone (or the timeout) decided it first: its status.
    AlreadyDecided(String),
}

pub(crate) fn insert_audit(c: &Db, a: &NewAudit) -> Result<()> {
    let json = |v: &Option<serde_json::Value>| v.as_ref().map(|v| v.to_string());
    c.exec(
        "INSERT INTO audit_log (ts, event_type, severity, subagent_id, parent_session_id, tool,
             input_preview, input_sha256, decision, decided_by, rate_limit_state, details)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        vals![
            now_ms(),
            &a.event_type,
            &a.severity,
            &a.subagent_id,
            &a.parent_session_id,
            &a.tool,
            &a.input_preview,
            &a.input_sha256,
            &a.decision,
            &a.decided_by,
            json(&a.rate_limit_state),
            json(&a.details),
        ],
    )?;
    Ok(())
}

pub(crate) fn insert_request(c: &Db, r: &NewPermissionRequest) -> Result<()> {
    c.exec(
        "INSERT INTO permission_requests (id, subagent_id, cli_request_id, tool, input_preview,
             input_sha256, created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        vals![
            &r.id,
            &r.subagent_id,
            &r.cli_request_id,
            &r.tool,
            &r.input_preview,
            &r.input_sha256,
            now_ms(),
            r.expires_at
        ],
    )?;
    Ok(())
}

/// Close a still-pending request (timeout, run ended) with `status`.
pub(crate) fn close_request(c: &Db, id: &str, status: &str, by: &str) -> Result<bool> {
    let n = c.exec(
        "UPDATE permission_requests SET status = ?2, decided_by = ?3, decided_at = ?4
         WHERE id = ?1 AND status = 'pending'",
        vals![id, status, by, now_ms()],
    )?;
    Ok(n > 0)
}

pub(crate) fn close_requests_of(c: &Db, subagent: &str) -> Result<()> {
    c.exec(
        "UPDATE permission_requests SET status = 'cancelled', decided_by = 'run ended',
             decided_at = ?2
         WHERE subagent_id = ?1 AND status = 'pending'",
        vals![subagent, now_ms()],
    )?;
    Ok(())
}

pub(crate) fn set_auto_approve(c: &Db, id: &str, on: bool) -> Result<()> {
    c.exec(
        "UPDATE subagents SET auto_approve_permissions = ?2 WHERE id = ?1",
        vals![id, on as i64],
    )?;
    Ok(())
}

const SELECT_REQUEST: &str =
    "SELECT r.id, r.subagent_id, r.tool, r.input_preview, r.input_sha256, r.created_at,
    r.expires_at, r.status, r.always, r.reason, r.decided_by, s.name,
    json_extract(s.spec, '$.plan.id'), json_extract(s.spec, '$.plan.step')
    FROM permission_requests r LEFT JOIN subagents s ON s.id = r.subagent_id";

fn request_row(r: &Row<'_>) -> Result<PermissionRequestRow> {
    Ok(PermissionRequestRow {
        id: r.get(0)?,
        subagent_id: r.get(1)?,
        tool: r.get(2)?,
        input_preview: r.get(3)?,
        input_sha256: r.get(4)?,
        created_at: r.get(5)?,
        expires_at: r.get(6)?,
        status: r.get(7)?,
        always: r.get(8)?,
        reason: r.get(9)?,
        decided_by: r.get(10)?,
        run_name: r.get::<Option<String>>(11)?.unwrap_or_default(),
        plan_id: r.get(12)?,
        step: r.get(13)?,
    })
}

/// The audit query for `f` and its parameters, with only the filters that are set:
/// `(?1 IS NULL OR subagent_id = ?1)` kept SQLite from using the index on (subagent_id, ts),
/// and one run's entries were a scan of the whole log. Numbered as bound (PostgreSQL must
/// know the type of every parameter it is given).
fn audit_query(f: &AuditFilter) -> (String, Vec<V<'_>>) {
    let mut terms = Vec::new();
    let mut params = Vec::new();
    if let Some(s) = &f.subagent_id {
        params.push(V::from(s));
        terms.push(format!("subagent_id = ?{}", params.len()));
    }
    if let Some(t) = f.since_ms {
        params.push(V::from(t));
        terms.push(format!("ts >= ?{}", params.len()));
    }
    let filter =
        if terms.is_empty() { String::new() } else { format!("WHERE {}", terms.join(" AND ")) };
    params.push(V::from(if f.limit == 0 { i64::MAX } else { f.limit as i64 }));
    let sql = format!(
        "SELECT id, ts, event_type, severity, subagent_id, parent_session_id, tool,
             input_preview, input_sha256, decision, decided_by, rate_limit_state, details
         FROM audit_log {filter} ORDER BY id LIMIT ?{}",
        params.len()
    );
    (sql, params)
}

impl Store {
    /// Audit rows, oldest first.
    pub fn audit(&self, f: &AuditFilter) -> Result<Vec<AuditRow>> {
        let (sql, params) = audit_query(f);
        let json = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
        self.conn.query(&sql, &params, |r| {
            Ok(AuditRow {
                id: r.get(0)?,
                ts: r.get(1)?,
                event_type: r.get(2)?,
                severity: r.get(3)?,
                subagent_id: r.get(4)?,
                parent_session_id: r.get(5)?,
                tool: r.get(6)?,
                input_preview: r.get(7)?,
                input_sha256: r.get(8)?,
                decision: r.get(9)?,
                decided_by: r.get(10)?,
                rate_limit_state: json(r.get(11)?),
                details: json(r.get(12)?),
            })
        })
    }

    /// Write one audit entry from outside a run (`herd revoke`, `herd cancel`).
    pub fn append_audit(&mut self, a: &NewAudit) -> Result<()> {
        insert_audit(&self.conn, a)
    }

    /// Delete audit rows older than `before_ms`; returns how many (or would, with `dry_run`).
    pub fn gc_audit(&mut self, before_ms: i64, dry_run: bool) -> Result<usize> {
        if dry_run {
            let n: i64 = self.conn.one(
                "SELECT COUNT(*) FROM audit_log WHERE ts < ?1",
                vals![before_ms],
                |r| r.get(0),
            )?;
            return Ok(n as usize);
        }
        self.conn.exec("DELETE FROM audit_log WHERE ts < ?1", vals![before_ms])
    }

    /// Permission requests: pending ones (of one subagent, or all), newest last.
    pub fn pending_requests(&self, subagent: Option<&str>) -> Result<Vec<PermissionRequestRow>> {
        self.conn.query(
            &format!(
                "{SELECT_REQUEST} WHERE r.status = 'pending'
                 AND (CAST(?1 AS TEXT) IS NULL OR r.subagent_id = ?1)
                 ORDER BY r.created_at"
            ),
            vals![subagent],
            request_row,
        )
    }

    /// Every permission request of run `subagent`, oldest first.
    pub fn requests_of(&self, subagent: &str) -> Result<Vec<PermissionRequestRow>> {
        self.conn.query(
            &format!("{SELECT_REQUEST} WHERE r.subagent_id = ?1 ORDER BY r.created_at"),
            vals![subagent],
            request_row,
        )
    }

    /// One request by exact id.
    pub fn permission_request(&self, id: &str) -> Result<Option<PermissionRequestRow>> {
        self.conn.opt(&format!("{SELECT_REQUEST} WHERE r.id = ?1"), vals![id], request_row)
    }

    /// The one request whose id starts with `prefix` (any status).
    pub fn resolve_request(&self, prefix: &str) -> Result<String> {
        let p = prefix.trim().to_ascii_lowercase();
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(StoreError::NotFound(prefix.into()));
        }
        let sql = format!(
            "SELECT id FROM permission_requests WHERE {} ORDER BY id LIMIT 6",
            self.conn.prefix_of("id")
        );
        let ids: Vec<String> = self.conn.query(&sql, vals![&p], |r| r.get(0))?;
        match ids.as_slice() {
            [] => Err(StoreError::NotFound(prefix.into())),
            [one] => Ok(one.clone()),
            many => Err(StoreError::Ambiguous { prefix: prefix.into(), matches: many.join(", ") }),
        }
    }

    /// Answer a pending request; the first answer wins.
    pub fn answer_request(
        &mut self,
        id: &str,
        approve: bool,
        always: bool,
        reason: Option<&str>,
        by: &str,
    ) -> Result<Answered> {
        let status = if approve { "approved" } else { "denied" };
        let n = self.conn.exec(
            "UPDATE permission_requests
             SET status = ?2, always = ?3, reason = ?4, decided_by = ?5, decided_at = ?6
             WHERE id = ?1 AND status = 'pending'",
            vals![id, status, always as i64, reason, by, now_ms()],
        )?;
        if n > 0 {
            return Ok(Answered::Decided);
        }
        match self.permission_request(id)? {
            Some(r) => Ok(Answered::AlreadyDecided(r.status)),
            None => Err(StoreError::NotFound(id.into())),
        }
    }

    /// Turn a running subagent's auto-approve off; false if it is not active.
    pub fn revoke_auto_approve(&mut self, id: &str, reason: &str) -> Result<bool> {
        let n = self.conn.exec(
            &format!(
                "UPDATE subagents SET auto_approve_permissions = 0,
                     auto_approve_revoked_at = COALESCE(auto_approve_revoked_at, ?2),
                     auto_approve_revoke_reason = COALESCE(auto_approve_revoke_reason, ?3)
                 WHERE id = ?1 AND {ACTIVE}"
            ),
            vals![id, now_ms(), reason],
        )?;
        Ok(n > 0)
    }

    /// Cancel and revocation requests for a run, read in one query by its poll.
    pub fn run_requests(&self, id: &str) -> Result<RunRequests> {
        Ok(self
            .conn
            .opt(
                "SELECT cancel_requested_at, auto_approve_revoke_reason, auto_approve_revoked_at
                 FROM subagents WHERE id = ?1",
                vals![id],
                |r| {
                    let revoked: Option<i64> = r.get(2)?;
                    Ok(RunRequests {
                        cancel: r.get::<Option<i64>>(0)?.is_some(),
                        revoked: revoked
                            .map(|_| r.get::<Option<String>>(1))
                            .transpose()?
                            .map(|reason| reason.unwrap_or_default()),
                    })
                },
            )?
            .unwrap_or_default())
    }
}

/// What other processes asked of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunRequests {
    pub cancel: bool,
    /// Auto-approve was revoked, with this reason.
    pub revoked: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(crate::StatePaths::new(dir.path())).unwrap();
        (dir, s)
    }

    crate::testing::both_backends!(audit_roundtrip_and_gc, first_answer_wins);

    fn audit_roundtrip_and_gc(fx: crate::testing::Fx) {
        let mut s = fx.store();
        s.append_audit(&NewAudit {
            event_type: "permission_decision",
            severity: "info",
            subagent_id: Some("a".into()),
            tool: Some("bash".into()),
            decision: Some("deny"),
            decided_by: Some("deny rule bash(rm *)".into()),
            rate_limit_state: Some(serde_json::json!({"tool_calls_remaining": 3})),
            ..NewAudit::default()
        })
        .unwrap();
        let rows = s.audit(&AuditFilter { subagent_id: Some("a".into()), ..Default::default() });
        let rows = rows.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].decision.as_deref(), Some("deny"));
        assert_eq!(rows[0].rate_limit_state.as_ref().unwrap()["tool_calls_remaining"], 3);
        let other = s.audit(&AuditFilter { subagent_id: Some("b".into()), ..Default::default() });
        assert!(other.unwrap().is_empty());
        let since = |ms| AuditFilter { since_ms: Some(ms), ..Default::default() };
        assert_eq!(s.audit(&since(now_ms() - 60_000)).unwrap().len(), 1);
        assert!(s.audit(&since(now_ms() + 60_000)).unwrap().is_empty());
        assert_eq!(s.gc_audit(now_ms() - 1000, false).unwrap(), 0);
        assert_eq!(s.gc_audit(now_ms() + 1000, true).unwrap(), 1);
        assert_eq!(s.gc_audit(now_ms() + 1000, false).unwrap(), 1);
        assert!(s.audit(&AuditFilter::default()).unwrap().is_empty());
    }

    #[test]
    fn one_runs_entries_are_found_through_their_index() {
        let (_d, s) = store();
        let f = AuditFilter { subagent_id: Some("a".into()), since_ms: Some(1), limit: 10 };
        let (sql, params) = audit_query(&f);
        let plan: Vec<String> =
            s.conn.query(&format!("EXPLAIN QUERY PLAN {sql}"), &params, |r| r.get(3)).unwrap();
        assert!(plan.iter().any(|p| p.contains("idx_audit_subagent")), "{plan:?}");
    }

    fn first_answer_wins(fx: crate::testing::Fx) {
        let mut s = fx.store();
        s.create_session("s1", "cli", fx.dir.path()).unwrap();
        let id = herd_core::SubagentId::generate();
        s.create_subagent(&crate::NewSubagent {
            id: id.clone(),
            parent_session_id: "s1".into(),
            name: "t".into(),
            cli: "command".into(),
            prompt: "p".into(),
            model: None,
            working_directory: "/tmp".into(),
            max_turns: None,
            timeout_ms: None,
            spec: serde_json::json!({}),
            owner_pid: 1,
            owner_start_time: None,
        })
        .unwrap();
        assert!(s.revoke_auto_approve(id.as_str(), "looks suspicious").unwrap());
        let req = s.run_requests(id.as_str()).unwrap();
        assert_eq!(req, RunRequests { cancel: false, revoked: Some("looks suspicious".into()) });
        insert_request(
            &s.conn,
            &NewPermissionRequest {
                id: "perm_abc".into(),
                subagent_id: id.to_string(),
                cli_request_id: "r1".into(),
                tool: "bash".into(),
                input_preview: "{}".into(),
                input_sha256: "00".into(),
                expires_at: now_ms() + 60_000,
            },
        )
        .unwrap();
        assert_eq!(s.pending_requests(None).unwrap().len(), 1);
        assert_eq!(s.resolve_request("perm_a").unwrap(), "perm_abc");
        assert_eq!(
            s.answer_request("perm_abc", true, true, None, "cli").unwrap(),
            Answered::Decided
        );
        assert_eq!(
            s.answer_request("perm_abc", false, false, Some("no"), "cli").unwrap(),
            Answered::AlreadyDecided("approved".into())
        );
        assert!(!close_request(&s.conn, "perm_abc", "expired", "timeout").unwrap());
        let r = s.permission_request("perm_abc").unwrap().unwrap();
        assert!(r.always);
        assert!(s.pending_requests(None).unwrap().is_empty());
        assert!(matches!(s.resolve_request("zz"), Err(StoreError::NotFound(_))));
    }
}

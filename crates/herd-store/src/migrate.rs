//! Versioned schema migrations, tracked in SQLite's `user_version` (PostgreSQL: `herd_schema`).
//! Append new steps to `MIGRATIONS`; never edit a released one.

use rusqlite::{Connection, OptionalExtension};

use crate::db::{Db, vals};
use crate::{Result, StoreError};

const MIGRATIONS: &[&str] = &[
    // 1: sessions, subagents (seed 000 + process identity, usage, cost), events.
    r#"
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    cwd         TEXT NOT NULL,
    pid         INTEGER,
    created_at  INTEGER NOT NULL
);
CREATE TABLE subagents (
    id                          TEXT PRIMARY KEY,
    parent_session_id           TEXT NOT NULL REFERENCES sessions(id),
    name                        TEXT NOT NULL,
    cli                         TEXT NOT NULL,
    status                      TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending','queued','running','waiting_for_merge','completed','failed','cancelled')),
    prompt                      TEXT NOT NULL,
    model                       TEXT,
    working_directory           TEXT NOT NULL,
    auto_approve_permissions    INTEGER NOT NULL DEFAULT 0,
    max_turns                   INTEGER,
    timeout_ms                  INTEGER,
    spec                        TEXT NOT NULL,
    result_summary              TEXT,
    result_truncated            INTEGER NOT NULL DEFAULT 0,
    failure_reason              TEXT,
    failure                     TEXT,
    native_session_id           TEXT,
    num_turns                   INTEGER,
    input_tokens                INTEGER NOT NULL DEFAULT 0,
    output_tokens               INTEGER NOT NULL DEFAULT 0,
    cache_creation_input_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_input_tokens     INTEGER NOT NULL DEFAULT 0,
    cost_usd                    REAL,
    owner_pid                   INTEGER,
    owner_start_time            INTEGER,
    pid                         INTEGER,
    pgid                        INTEGER,
    process_start_time          INTEGER,
    exit_code                   INTEGER,
    exit_signal                 INTEGER,
    cancel_requested_at         INTEGER,
    created_at                  INTEGER NOT NULL,
    started_at                  INTEGER,
    completed_at                INTEGER,
    closed_at                   INTEGER,
    close_reason                TEXT
);
CREATE INDEX idx_subagents_parent ON subagents(parent_session_id);
CREATE INDEX idx_subagents_active ON subagents(status)
    WHERE status IN ('pending','queued','running','waiting_for_merge');
-- A rowid table: rows carry whole JSON payloads, too big for a WITHOUT ROWID b-tree.
CREATE TABLE events (
    id                  INTEGER PRIMARY KEY,
    subagent_id         TEXT NOT NULL REFERENCES subagents(id),
    seq                 INTEGER NOT NULL,
    ts                  INTEGER NOT NULL,
    kind                TEXT NOT NULL,
    parent_tool_use_id  TEXT,
    payload             TEXT NOT NULL
);
CREATE UNIQUE INDEX idx_events_seq ON events(subagent_id, seq);
"#,
    // 2: plans (seed 000's orchestrations and orchestration_steps) and their own event log.
    r#"
CREATE TABLE orchestrations (
    id                  TEXT PRIMARY KEY,
    parent_session_id   TEXT NOT NULL REFERENCES sessions(id),
    name                TEXT NOT NULL,
    strategy            TEXT NOT NULL CHECK (strategy IN ('parallel','sequential','dag')),
    status              TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending','running','completed','failed','cancelled')),
    total_steps         INTEGER NOT NULL,
    completed_steps     INTEGER NOT NULL DEFAULT 0,
    failed_steps        INTEGER NOT NULL DEFAULT 0,
    plan                TEXT NOT NULL,
    source_file         TEXT,
    cost_usd            REAL NOT NULL DEFAULT 0,
    input_tokens        INTEGER NOT NULL DEFAULT 0,
    output_tokens       INTEGER NOT NULL DEFAULT 0,
    owner_pid           INTEGER,
    owner_start_time    INTEGER,
    created_at          INTEGER NOT NULL,
    completed_at        INTEGER
);
CREATE INDEX idx_orchestrations_parent ON orchestrations(parent_session_id);
CREATE TABLE orchestration_steps (
    id                          TEXT PRIMARY KEY,
    orchestration_id            TEXT NOT NULL REFERENCES orchestrations(id) ON DELETE CASCADE,
    step_key                    TEXT NOT NULL,
    subagent_id                 TEXT REFERENCES subagents(id),
    name                        TEXT NOT NULL,
    prompt                      TEXT NOT NULL,
    model                       TEXT,
    working_directory           TEXT,
    allowed_tools               TEXT,
    depends_on                  TEXT,
    auto_approve_permissions    INTEGER NOT NULL DEFAULT 0,
    status                      TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending','running','completed','failed','blocked','cancelled')),
    failure_reason              TEXT,
    attempts                    INTEGER NOT NULL DEFAULT 0,
    contract                    TEXT NOT NULL,
    sequence                    INTEGER NOT NULL,
    created_at                  INTEGER NOT NULL,
    completed_at                INTEGER
);
CREATE INDEX idx_orch_steps ON orchestration_steps(orchestration_id, sequence);
CREATE TABLE plan_events (
    orchestration_id    TEXT NOT NULL REFERENCES orchestrations(id),
    seq                 INTEGER NOT NULL,
    ts                  INTEGER NOT NULL,
    kind                TEXT NOT NULL,
    step_key            TEXT,
    payload             TEXT NOT NULL,
    PRIMARY KEY (orchestration_id, seq)
) WITHOUT ROWID;
"#,
    // 3: workspaces — the git worktrees herd created, and advisory locks per directory
    // (seed 000's worktree_locks, one row per holder so a dead holder can be reclaimed alone).
    r#"
CREATE TABLE worktrees (
    id                  TEXT PRIMARY KEY,
    kind                TEXT NOT NULL CHECK (kind IN ('step','integration')),
    run_id              TEXT NOT NULL,
    step_key            TEXT NOT NULL,
    subagent_id         TEXT REFERENCES subagents(id),
    repo                TEXT NOT NULL,
    root                TEXT NOT NULL,
    path                TEXT NOT NULL,
    branch              TEXT NOT NULL,
    base                TEXT NOT NULL,
    integration_branch  TEXT,
    status              TEXT NOT NULL DEFAULT 'active'
        CHECK (status IN ('active','waiting_for_merge','merged','conflict','failed','removed')),
    head                TEXT,
    merge_commit        TEXT,
    owner_pid           INTEGER,
    owner_start_time    INTEGER,
    created_at          INTEGER NOT NULL,
    merged_at           INTEGER,
    removed_at          INTEGER
);
CREATE INDEX idx_worktrees_path ON worktrees(path);
CREATE TABLE worktree_locks (
    path                TEXT NOT NULL,
    holder              TEXT NOT NULL,
    lock_mode           TEXT NOT NULL CHECK (lock_mode IN ('none','shared','exclusive')),
    owner_pid           INTEGER,
    owner_start_time    INTEGER,
    acquired_at         INTEGER NOT NULL,
    PRIMARY KEY (path, holder)
) WITHOUT ROWID;
"#,
    // 4: the permission gate: audit log, pending permission requests, auto-approve revocation.
    r#"
CREATE TABLE audit_log (
    id                  INTEGER PRIMARY KEY,
    ts                  INTEGER NOT NULL,
    event_type          TEXT NOT NULL,
    severity            TEXT NOT NULL CHECK (severity IN ('info','warn','error')),
    subagent_id         TEXT,
    parent_session_id   TEXT,
    tool                TEXT,
    input_preview       TEXT,
    input_sha256        TEXT,
    decision            TEXT CHECK (decision IS NULL OR decision IN ('allow','deny','ask','observed')),
    decided_by          TEXT,
    rate_limit_state    TEXT,
    details             TEXT
);
CREATE INDEX idx_audit_ts ON audit_log(ts);
CREATE INDEX idx_audit_subagent ON audit_log(subagent_id, ts);
CREATE TABLE permission_requests (
    id                  TEXT PRIMARY KEY,
    subagent_id         TEXT NOT NULL REFERENCES subagents(id),
    cli_request_id      TEXT NOT NULL,
    tool                TEXT NOT NULL,
    input_preview       TEXT NOT NULL,
    input_sha256        TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    expires_at          INTEGER NOT NULL,
    status              TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending','approved','denied','expired','cancelled')),
    always              INTEGER NOT NULL DEFAULT 0,
    reason              TEXT,
    decided_by          TEXT,
    decided_at          INTEGER
);
CREATE INDEX idx_permission_pending ON permission_requests(status, subagent_id);
ALTER TABLE subagents ADD COLUMN auto_approve_revoked_at INTEGER;
ALTER TABLE subagents ADD COLUMN auto_approve_revoke_reason TEXT;
"#,
    // 5: a plan's steps are updated by key, once or more per step: find them without a scan.
    r#"
CREATE UNIQUE INDEX idx_orch_step_key ON orchestration_steps(orchestration_id, step_key);
"#,
    // 6: CHECKs and the active-runs index as comparisons, not `IN (…)` lists (tables rebuilt).
    include_str!("migrations/006_check_comparisons.sql"),
    // 7: a plan can be asked to stop from any process (`herd cancel PLAN`): its owner polls
    // for this, as a run's does for `subagents.cancel_requested_at`.
    r#"
ALTER TABLE orchestrations ADD COLUMN cancel_requested_at INTEGER;
"#,
    // 8: plans may be `interrupted` (their herd died with steps unfinished).
    include_str!("migrations/008_plan_interrupted.sql"),
    // 9: plans served by workers (leases, fences, labels; the workers).
    include_str!("migrations/009_queue.sql"),
    // 10: a queued plan's repository; a queued step's pushed branch waiting for its merge;
    // the machine of every owning process.
    include_str!("migrations/010_repo.sql"),
];

/// PostgreSQL's own text for the migrations (numbered from 1) whose SQLite text it cannot run
/// as [`pg::ddl`](crate::db::pg::ddl) spells it: SQLite rebuilds a table to change a CHECK,
/// PostgreSQL alters the constraint. Every other migration is the same schema in both.
const POSTGRES_OWN: &[(usize, &str)] = &[
    (
        6,
        "DROP INDEX idx_subagents_active;
         CREATE INDEX idx_subagents_active ON subagents(status)
             WHERE (status = 'pending' OR status = 'queued' OR status = 'running'
                 OR status = 'waiting_for_merge');",
    ),
    (
        8,
        "ALTER TABLE orchestrations DROP CONSTRAINT orchestrations_status_check;
         ALTER TABLE orchestrations ADD CONSTRAINT orchestrations_status_check
             CHECK (status = 'pending' OR status = 'running' OR status = 'completed'
                 OR status = 'failed' OR status = 'cancelled' OR status = 'interrupted');",
    ),
];

/// Migration `n` (from 1) as PostgreSQL runs it.
fn postgres_text(n: usize) -> String {
    match POSTGRES_OWN.iter().find(|(i, _)| *i == n) {
        Some((_, sql)) => (*sql).to_owned(),
        None => crate::db::pg::ddl(MIGRATIONS[n - 1]),
    }
}

/// The advisory lock one migrating process holds (others wait, then find the work done).
const PG_MIGRATION_LOCK: i64 = 0x6865_7264_0001;

/// Bring a PostgreSQL database up to the latest schema, one transaction per step.
pub(crate) fn migrate_pg(db: &Db, shown: &str) -> Result<()> {
    db.one("SELECT pg_advisory_lock(?1)::TEXT", vals![PG_MIGRATION_LOCK], |_| Ok(()))?;
    let out = (|| {
        db.batch("CREATE TABLE IF NOT EXISTS herd_schema (version BIGINT NOT NULL)")?;
        let found: Option<i64> =
            db.opt("SELECT version FROM herd_schema", vals![], |r| r.get(0))?;
        let version = match found {
            Some(v) => v,
            None => {
                db.exec("INSERT INTO herd_schema (version) VALUES (0)", vals![])?;
                0
            }
        };
        if version > LATEST {
            return Err(StoreError::TooNew { path: shown.into(), found: version, known: LATEST });
        }
        for n in (version + 1)..=LATEST {
            let sql = postgres_text(n as usize);
            db.tx(|tx| {
                tx.batch(&sql).map_err(|e| {
                    StoreError::Corrupt(format!("{shown}: schema migration {n}: {e}"))
                })?;
                tx.exec("UPDATE herd_schema SET version = ?1", vals![n])?;
                Ok(())
            })?;
        }
        Ok(())
    })();
    let unlocked =
        db.one("SELECT pg_advisory_unlock(?1)::TEXT", vals![PG_MIGRATION_LOCK], |_| Ok(()));
    out.and(unlocked)
}

/// Migrations (numbered from 1) that rebuild tables. They run with foreign keys off: dropping a
/// table others refer to would fail otherwise. They are checked before their commit instead.
const REBUILDS: &[usize] = &[6, 8];

/// The schema version this build writes.
pub(crate) const LATEST: i64 = MIGRATIONS.len() as i64;

/// Bring `conn` up to the latest schema, one transaction per step.
pub(crate) fn migrate(conn: &mut Connection, path: &str) -> Result<()> {
    migrate_to(conn, path, LATEST)
}

/// Bring `conn` up to schema version `target`, one transaction per step.
fn migrate_to(conn: &mut Connection, path: &str, target: i64) -> Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > LATEST {
        return Err(StoreError::TooNew { path: path.into(), found: version, known: LATEST });
    }
    let todo = (target - version).max(0) as usize;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize).take(todo) {
        let rebuild = REBUILDS.contains(&(i + 1));
        // Set outside the transaction (SQLite ignores it inside), and put back as it was.
        let off = rebuild && conn.query_row("PRAGMA foreign_keys", [], |r| r.get::<_, bool>(0))?;
        if off {
            conn.pragma_update(None, "foreign_keys", false)?;
        }
        let out = step(conn, i, sql, rebuild);
        if off {
            conn.pragma_update(None, "foreign_keys", true)?;
        }
        out?;
    }
    Ok(())
}

/// Migration `i` (from 0) in one immediate transaction, unless another process did it first.
fn step(conn: &mut Connection, i: usize, sql: &str, rebuild: bool) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    // Another process may have migrated while we waited for the write lock: re-check.
    let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if now > i as i64 {
        return Ok(());
    }
    tx.execute_batch(sql)?;
    if rebuild {
        // Foreign keys were off while the tables were rebuilt: every reference must still
        // hold before this commits.
        let broken: Option<String> =
            tx.query_row("PRAGMA foreign_key_check", [], |r| r.get(0)).optional()?;
        if let Some(table) = broken {
            return Err(StoreError::Corrupt(format!(
                "schema migration {}: table {table} has rows referring to missing rows \
                 (PRAGMA foreign_key_check); nothing was changed",
                i + 1
            )));
        }
    }
    tx.pragma_update(None, "user_version", (i + 1) as i64)?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rusqlite::types::Value;

    use super::*;

    /// A database brought to `version` by the migrations, as a release of that version left it.
    fn at(version: usize) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..version] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", version as i64).unwrap();
        conn
    }

    const REBUILT: [&str; 7] = [
        "subagents",
        "orchestrations",
        "orchestration_steps",
        "worktrees",
        "worktree_locks",
        "audit_log",
        "permission_requests",
    ];

    /// Column names, rows (every value) and index names of `table`.
    fn dump(conn: &Connection, table: &str) -> (Vec<String>, Vec<Vec<Value>>, Vec<String>) {
        let cols: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let mut stmt = conn.prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2")).unwrap();
        let rows = stmt
            .query_map([], |r| (0..cols.len()).map(|i| r.get::<_, Value>(i)).collect())
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let indexes: Vec<String> = conn
            .prepare(&format!(
                "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = '{table}'
                 AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name"
            ))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        (cols, rows, indexes)
    }

    fn fill(conn: &Connection) {
        conn.execute_batch(
            "INSERT INTO sessions VALUES ('s', 'cli', '/w', 1, 10);
             INSERT INTO subagents (id, parent_session_id, name, cli, status, prompt,
                 working_directory, spec, created_at, cost_usd, auto_approve_revoked_at,
                 auto_approve_revoke_reason)
               VALUES ('a', 's', 'one', 'claude', 'running', 'p', '/w', '{}', 11, 0.5, 12, 'why'),
                      ('b', 's', 'two', 'codex', 'failed', 'q', '/w', '{}', 13, NULL, NULL, NULL);
             INSERT INTO events (subagent_id, seq, ts, kind, payload) VALUES ('a', 1, 11, 'k', '{}');
             INSERT INTO orchestrations (id, parent_session_id, name, strategy, status,
                 total_steps, plan, created_at) VALUES ('o', 's', 'plan', 'dag', 'running', 2, '{}', 14);
             INSERT INTO orchestration_steps (id, orchestration_id, step_key, subagent_id, name,
                 prompt, status, contract, sequence, created_at)
               VALUES ('o:x', 'o', 'x', 'a', 'x', 'p', 'blocked', '{}', 0, 15),
                      ('o:y', 'o', 'y', NULL, 'y', 'p', 'pending', '{}', 1, 15);
             INSERT INTO worktrees (id, kind, run_id, step_key, repo, root, path, branch, base,
                 status, created_at) VALUES ('w', 'step', 'o', 'x', '/r', '/t', '/t/x', 'b', 'main',
                 'conflict', 16);
             INSERT INTO worktree_locks (path, holder, lock_mode, owner_pid, owner_start_time,
                 acquired_at) VALUES ('/w', 'a', 'exclusive', 1, 2, 17);
             INSERT INTO audit_log (ts, event_type, severity, subagent_id, decision, details)
               VALUES (18, 'permission', 'warn', 'a', 'observed', '{}'),
                      (19, 'spawn', 'info', 'b', NULL, NULL);
             INSERT INTO permission_requests (id, subagent_id, cli_request_id, tool,
                 input_preview, input_sha256, created_at, expires_at, status)
               VALUES ('r', 'a', 'c', 'Bash', 'ls', 'h', 20, 21, 'expired');",
        )
        .unwrap();
    }

    #[test]
    fn upgrading_to_6_keeps_every_row_column_and_index() {
        let mut conn = at(5);
        fill(&conn);
        let before: Vec<_> = REBUILT.iter().map(|t| dump(&conn, t)).collect();
        let events_before = dump(&conn, "events");
        migrate_to(&mut conn, "test.db", 6).unwrap();
        let after: Vec<_> = REBUILT.iter().map(|t| dump(&conn, t)).collect();
        for ((t, b), a) in REBUILT.iter().zip(&before).zip(&after) {
            assert!(!b.1.is_empty(), "{t}: the test must fill it");
            assert_eq!(b, a, "{t}");
        }
        assert_eq!(dump(&conn, "events"), events_before);
        let left: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema WHERE name LIKE '%_v6'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(left, 0);
        let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
        // Foreign keys are on again, and still point at the rebuilt tables.
        let orphan = "INSERT INTO events (subagent_id, seq, ts, kind, payload)
                      VALUES ('nobody', 1, 1, 'k', '{}')";
        let err = conn.execute(orphan, []).unwrap_err().to_string();
        assert!(err.contains("FOREIGN KEY"), "{err}");
    }

    #[test]
    fn checks_still_refuse_what_they_refused() {
        let conn = at(LATEST as usize);
        fill(&conn);
        for bad in [
            "UPDATE subagents SET status = 'done' WHERE id = 'a'",
            "UPDATE orchestrations SET strategy = 'random'",
            "UPDATE orchestrations SET status = 'blocked'",
            "UPDATE orchestration_steps SET status = 'queued'",
            "UPDATE worktrees SET kind = 'other'",
            "UPDATE worktrees SET status = 'pending'",
            "UPDATE worktree_locks SET lock_mode = 'read'",
            "UPDATE audit_log SET severity = 'debug'",
            "UPDATE audit_log SET decision = 'maybe'",
            "UPDATE permission_requests SET status = 'running'",
        ] {
            let err = conn.execute(bad, []).unwrap_err().to_string();
            assert!(err.contains("CHECK constraint failed"), "{bad}: {err}");
        }
        conn.execute("UPDATE audit_log SET decision = NULL", []).unwrap();
    }

    /// Statements of the kind the writer runs for every run and step.
    const HOT: [&str; 7] = [
        "INSERT INTO subagents (id, parent_session_id, name, cli, status, prompt, working_directory,
             spec, created_at) VALUES (?1, 's', 'n', 'c', 'pending', 'p', '/w', '{}', 1)",
        "UPDATE subagents SET status = ?2, pid = 1 WHERE id = ?1",
        "INSERT INTO audit_log (ts, event_type, severity, subagent_id, decision, details)
             VALUES (1, 'spawn', 'info', ?1, 'allow', '{}')",
        "UPDATE orchestration_steps SET status = ?2 WHERE id = ?1",
        "INSERT INTO worktree_locks (path, holder, lock_mode, owner_pid, owner_start_time, acquired_at)
             VALUES ('/w', ?1, 'none', 1, 2, 3)",
        "UPDATE worktrees SET status = ?2 WHERE id = ?1",
        "UPDATE permission_requests SET status = ?2 WHERE id = ?1",
    ];

    fn temporary_tables(conn: &Connection, sql: &str) -> usize {
        let mut stmt = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
        // Parameters left unbound (NULL): the program is what counts, not a run of it.
        let mut rows = stmt.raw_query();
        let mut n = 0;
        while let Some(r) = rows.next().unwrap() {
            n += usize::from(r.get::<_, String>(1).unwrap() == "OpenEphemeral");
        }
        n
    }

    #[test]
    fn hot_writes_build_no_temporary_tables() {
        let old = at(5);
        let new = at(LATEST as usize);
        for sql in HOT {
            // The old schema's IN lists did (this is what the test would catch coming back).
            assert!(temporary_tables(&old, sql) > 0, "{sql}");
            assert_eq!(temporary_tables(&new, sql), 0, "{sql}");
        }
    }

    #[test]
    fn active_run_queries_use_the_partial_index() {
        let conn = at(LATEST as usize);
        let plan: Vec<String> = conn
            .prepare(&format!(
                "EXPLAIN QUERY PLAN SELECT id FROM subagents WHERE {}",
                crate::sql::ACTIVE
            ))
            .unwrap()
            .query_map([], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(plan.iter().any(|p| p.contains("idx_subagents_active")), "{plan:?}");
    }
}

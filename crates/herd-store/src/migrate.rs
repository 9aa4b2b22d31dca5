//! Versioned schema migrations, tracked in SQLite's `user_version`.
//! Append new steps to `MIGRATIONS`; never edit a released one.

use rusqlite::Connection;

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
];

/// The schema version this build writes.
pub(crate) const LATEST: i64 = MIGRATIONS.len() as i64;

/// Bring `conn` up to the latest schema, one transaction per step.
pub(crate) fn migrate(conn: &mut Connection, path: &str) -> Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > LATEST {
        return Err(StoreError::TooNew { path: path.into(), found: version, known: LATEST });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Another process may have migrated while we waited for the write lock: re-check.
        let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now > i as i64 {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

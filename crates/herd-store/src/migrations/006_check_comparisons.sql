-- 6: every CHECK on a closed set of names, and the active-runs index's condition, written as
-- comparisons instead of `IN (…)`. For an IN list of more than two values SQLite builds a
-- temporary b-tree each time a statement checks it: about fifteen per plan step (a row
-- written, updated twice, its audit entries, its step and lock rows), some 6% of a plan's CPU.
-- The allowed values are exactly those of migrations 1 to 4. Tables are rebuilt (SQLite
-- cannot alter a CHECK): new table, rows copied in their column order, old table dropped,
-- new one renamed, indexes made again under their names.

CREATE TABLE subagents_v6 (
    id                          TEXT PRIMARY KEY,
    parent_session_id           TEXT NOT NULL REFERENCES sessions(id),
    name                        TEXT NOT NULL,
    cli                         TEXT NOT NULL,
    status                      TEXT NOT NULL DEFAULT 'pending'
        CHECK (status = 'pending' OR status = 'queued' OR status = 'running'
            OR status = 'waiting_for_merge' OR status = 'completed' OR status = 'failed'
            OR status = 'cancelled'),
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
    close_reason                TEXT,
    auto_approve_revoked_at     INTEGER,
    auto_approve_revoke_reason  TEXT
);
INSERT INTO subagents_v6 SELECT * FROM subagents;
DROP TABLE subagents;
ALTER TABLE subagents_v6 RENAME TO subagents;
CREATE INDEX idx_subagents_parent ON subagents(parent_session_id);
-- Queries use this very condition (`sql::ACTIVE`), so the planner can use the index.
CREATE INDEX idx_subagents_active ON subagents(status)
    WHERE (status = 'pending' OR status = 'queued' OR status = 'running' OR status = 'waiting_for_merge');

CREATE TABLE orchestrations_v6 (
    id                  TEXT PRIMARY KEY,
    parent_session_id   TEXT NOT NULL REFERENCES sessions(id),
    name                TEXT NOT NULL,
    strategy            TEXT NOT NULL
        CHECK (strategy = 'parallel' OR strategy = 'sequential' OR strategy = 'dag'),
    status              TEXT NOT NULL DEFAULT 'pending'
        CHECK (status = 'pending' OR status = 'running' OR status = 'completed'
            OR status = 'failed' OR status = 'cancelled'),
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
INSERT INTO orchestrations_v6 SELECT * FROM orchestrations;
DROP TABLE orchestrations;
ALTER TABLE orchestrations_v6 RENAME TO orchestrations;
CREATE INDEX idx_orchestrations_parent ON orchestrations(parent_session_id);

CREATE TABLE orchestration_steps_v6 (
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
        CHECK (status = 'pending' OR status = 'running' OR status = 'completed'
            OR status = 'failed' OR status = 'blocked' OR status = 'cancelled'),
    failure_reason              TEXT,
    attempts                    INTEGER NOT NULL DEFAULT 0,
    contract                    TEXT NOT NULL,
    sequence                    INTEGER NOT NULL,
    created_at                  INTEGER NOT NULL,
    completed_at                INTEGER
);
INSERT INTO orchestration_steps_v6 SELECT * FROM orchestration_steps;
DROP TABLE orchestration_steps;
ALTER TABLE orchestration_steps_v6 RENAME TO orchestration_steps;
CREATE INDEX idx_orch_steps ON orchestration_steps(orchestration_id, sequence);
CREATE UNIQUE INDEX idx_orch_step_key ON orchestration_steps(orchestration_id, step_key);

CREATE TABLE worktrees_v6 (
    id                  TEXT PRIMARY KEY,
    kind                TEXT NOT NULL CHECK (kind = 'step' OR kind = 'integration'),
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
        CHECK (status = 'active' OR status = 'waiting_for_merge' OR status = 'merged'
            OR status = 'conflict' OR status = 'failed' OR status = 'removed'),
    head                TEXT,
    merge_commit        TEXT,
    owner_pid           INTEGER,
    owner_start_time    INTEGER,
    created_at          INTEGER NOT NULL,
    merged_at           INTEGER,
    removed_at          INTEGER
);
INSERT INTO worktrees_v6 SELECT * FROM worktrees;
DROP TABLE worktrees;
ALTER TABLE worktrees_v6 RENAME TO worktrees;
CREATE INDEX idx_worktrees_path ON worktrees(path);

CREATE TABLE worktree_locks_v6 (
    path                TEXT NOT NULL,
    holder              TEXT NOT NULL,
    lock_mode           TEXT NOT NULL
        CHECK (lock_mode = 'none' OR lock_mode = 'shared' OR lock_mode = 'exclusive'),
    owner_pid           INTEGER,
    owner_start_time    INTEGER,
    acquired_at         INTEGER NOT NULL,
    PRIMARY KEY (path, holder)
) WITHOUT ROWID;
INSERT INTO worktree_locks_v6 SELECT * FROM worktree_locks;
DROP TABLE worktree_locks;
ALTER TABLE worktree_locks_v6 RENAME TO worktree_locks;

CREATE TABLE audit_log_v6 (
    id                  INTEGER PRIMARY KEY,
    ts                  INTEGER NOT NULL,
    event_type          TEXT NOT NULL,
    severity            TEXT NOT NULL
        CHECK (severity = 'info' OR severity = 'warn' OR severity = 'error'),
    subagent_id         TEXT,
    parent_session_id   TEXT,
    tool                TEXT,
    input_preview       TEXT,
    input_sha256        TEXT,
    decision            TEXT CHECK (decision IS NULL OR decision = 'allow' OR decision = 'deny'
        OR decision = 'ask' OR decision = 'observed'),
    decided_by          TEXT,
    rate_limit_state    TEXT,
    details             TEXT
);
INSERT INTO audit_log_v6 SELECT * FROM audit_log;
DROP TABLE audit_log;
ALTER TABLE audit_log_v6 RENAME TO audit_log;
CREATE INDEX idx_audit_ts ON audit_log(ts);
CREATE INDEX idx_audit_subagent ON audit_log(subagent_id, ts);

CREATE TABLE permission_requests_v6 (
    id                  TEXT PRIMARY KEY,
    subagent_id         TEXT NOT NULL REFERENCES subagents(id),
    cli_request_id      TEXT NOT NULL,
    tool                TEXT NOT NULL,
    input_preview       TEXT NOT NULL,
    input_sha256        TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    expires_at          INTEGER NOT NULL,
    status              TEXT NOT NULL DEFAULT 'pending'
        CHECK (status = 'pending' OR status = 'approved' OR status = 'denied'
            OR status = 'expired' OR status = 'cancelled'),
    always              INTEGER NOT NULL DEFAULT 0,
    reason              TEXT,
    decided_by          TEXT,
    decided_at          INTEGER
);
INSERT INTO permission_requests_v6 SELECT * FROM permission_requests;
DROP TABLE permission_requests;
ALTER TABLE permission_requests_v6 RENAME TO permission_requests;
CREATE INDEX idx_permission_pending ON permission_requests(status, subagent_id);

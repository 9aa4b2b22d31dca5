-- 8: a plan whose herd died with steps unfinished is `interrupted` (not `failed`): nothing of
-- it runs, and `herd run --resume` runs what had not completed. The orchestrations table is
-- rebuilt for its CHECK, as in migration 6 (rows copied in column order, index made again).

CREATE TABLE orchestrations_v8 (
    id                  TEXT PRIMARY KEY,
    parent_session_id   TEXT NOT NULL REFERENCES sessions(id),
    name                TEXT NOT NULL,
    strategy            TEXT NOT NULL
        CHECK (strategy = 'parallel' OR strategy = 'sequential' OR strategy = 'dag'),
    status              TEXT NOT NULL DEFAULT 'pending'
        CHECK (status = 'pending' OR status = 'running' OR status = 'completed'
            OR status = 'failed' OR status = 'cancelled' OR status = 'interrupted'),
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
    completed_at        INTEGER,
    cancel_requested_at INTEGER
);
INSERT INTO orchestrations_v8 SELECT * FROM orchestrations;
DROP TABLE orchestrations;
ALTER TABLE orchestrations_v8 RENAME TO orchestrations;
CREATE INDEX idx_orchestrations_parent ON orchestrations(parent_session_id);

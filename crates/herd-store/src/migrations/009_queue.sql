-- 9: plans served by workers on several machines (used with PostgreSQL): a queued plan keeps
-- its text (each worker loads it in its own project); a queued step has retries, required
-- labels, and while claimed a lease (owner, expiry on the database's clock) and a fence that
-- every claim bumps. Workers register and beat.
ALTER TABLE orchestrations ADD COLUMN source_text TEXT;
ALTER TABLE orchestration_steps ADD COLUMN queued INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orchestration_steps ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orchestration_steps ADD COLUMN labels TEXT;
ALTER TABLE orchestration_steps ADD COLUMN lease_owner TEXT;
ALTER TABLE orchestration_steps ADD COLUMN lease_expires_at INTEGER;
ALTER TABLE orchestration_steps ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;
CREATE INDEX idx_orch_steps_queued ON orchestration_steps(status) WHERE queued = 1;
CREATE TABLE workers (
    id                  TEXT PRIMARY KEY,
    host                TEXT NOT NULL,
    pid                 INTEGER NOT NULL,
    labels              TEXT NOT NULL,
    max_concurrent      INTEGER NOT NULL,
    running             INTEGER NOT NULL DEFAULT 0,
    status              TEXT NOT NULL,
    started_at          INTEGER NOT NULL,
    heartbeat_at        INTEGER NOT NULL
);

//! The SQLite store: where the state dir is, opening with WAL and migrations, and the reads
//! and occasional writes of the CLI. Hot-path event writes go through [`crate::Writer`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_core::status::ALL_STATUSES;
use herd_core::{AgentEvent, Decoded, FailureReason, Status, SubagentId, Usage};

use crate::db::{Backend, Db, Row, V, vals};
use crate::sql::ACTIVE;
use crate::{NewSubagent, Result, StoreError, StoredEvent, SubagentRow, Update, migrate, now_ms};

/// The files of one state dir (`.herd/` by default).
#[derive(Debug, Clone)]
pub struct StatePaths {
    pub root: PathBuf,
    /// Where the database is: `herd.db` under `root` (the default), or PostgreSQL. Transcripts
    /// stay under `root` on the machine that ran the agent either way.
    pub store: Backend,
}

impl StatePaths {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), store: Backend::Sqlite }
    }

    /// The same state dir with its database elsewhere (`--store`, `HERD_STORE_URL`).
    pub fn with_store(mut self, store: Backend) -> Self {
        self.store = store;
        self
    }

    /// Where the database is, for messages.
    pub fn db_shown(&self) -> String {
        match &self.store {
            Backend::Sqlite => self.db().display().to_string(),
            b => b.shown(),
        }
    }
    pub fn db(&self) -> PathBuf {
        self.root.join("herd.db")
    }
    pub fn transcripts(&self) -> PathBuf {
        self.root.join("transcripts")
    }
    pub fn transcript(&self, id: &SubagentId) -> PathBuf {
        self.transcripts().join(format!("{id}.jsonl"))
    }
    pub fn meta(&self, id: &SubagentId) -> PathBuf {
        self.transcripts().join(format!("{id}.meta.json"))
    }
    pub fn stderr_log(&self, id: &SubagentId) -> PathBuf {
        self.transcripts().join(format!("{id}.stderr.log"))
    }
}

/// A running subagent whose owner may have died.
#[derive(Debug, Clone)]
pub struct OrphanCandidate {
    pub id: SubagentId,
    pub owner_pid: Option<u32>,
    pub owner_start_time: Option<u64>,
    pub pid: Option<u32>,
    pub pgid: Option<u32>,
    pub process_start_time: Option<u64>,
}

/// A connection to the store.
#[derive(Debug)]
pub struct Store {
    paths: StatePaths,
    pub(crate) conn: Db,
}

/// A connection to the store's database, migrated to the latest schema.
pub(crate) fn open_conn(paths: &StatePaths) -> Result<Db> {
    match &paths.store {
        Backend::Sqlite => open_sqlite(paths).map(Db::Lite),
        Backend::Postgres(url) => {
            let db = Db::Pg(crate::db::pg::PgConn::connect(url)?);
            migrate::migrate_pg(&db, &crate::redact(url))?;
            Ok(db)
        }
    }
}

fn open_sqlite(paths: &StatePaths) -> Result<rusqlite::Connection> {
    let db = paths.db();
    let shown = db.display().to_string();
    let wrap = |source| StoreError::Db { path: shown.clone(), source };
    let mut conn = rusqlite::Connection::open(&db).map_err(wrap)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(wrap)?;
    // Switching a fresh database to WAL needs a moment of exclusive access; SQLite reports
    // "busy" at once instead of waiting when several processes open it at the same time.
    let mut tries = 0;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && tries < 200 =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(25));
            }
            other => break other.map_err(wrap)?,
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(wrap)?;
    // No checkpoint when the last connection closes: the WAL stays beside the database (it is
    // the database's, read by every connection, and copied in by the writer's automatic
    // checkpoints as it grows), and a herd command does not spend its last moments copying
    // pages and syncing the file (30 ms at the end of a 2000-step plan).
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(wrap)?;
    conn.set_prepared_statement_cache_capacity(crate::sql::CACHE_CAPACITY);
    migrate::migrate(&mut conn, &shown)?;
    Ok(conn)
}

impl Store {
    /// Open (creating if needed) the store under `paths.root`.
    pub fn open(paths: StatePaths) -> Result<Self> {
        let created = !paths.root.exists();
        for dir in [paths.root.clone(), paths.transcripts()] {
            std::fs::create_dir_all(&dir)
                .map_err(|source| StoreError::Io { path: dir.display().to_string(), source })?;
        }
        if created {
            write_gitignore(&paths.root)?;
        }
        let conn = open_conn(&paths)?;
        Ok(Self { paths, conn })
    }

    pub fn paths(&self) -> &StatePaths {
        &self.paths
    }

    pub(crate) fn conn(&self) -> &Db {
        &self.conn
    }

    /// Whether this store is shared through PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.conn.is_pg()
    }

    /// SQLite's library version.
    pub fn sqlite_version() -> &'static str {
        rusqlite::version()
    }

    /// Record the session (one CLI invocation, MCP connection, …) that parents subagents.
    pub fn create_session(&self, id: &str, kind: &str, cwd: &Path) -> Result<()> {
        self.conn.exec(
            "INSERT INTO sessions (id, kind, cwd, pid, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            vals![id, kind, cwd.display().to_string(), std::process::id(), now_ms()],
        )?;
        Ok(())
    }

    /// Create session `id` unless it exists (a client's own session, named by the client).
    pub fn ensure_session(&self, id: &str, kind: &str, cwd: &Path) -> Result<()> {
        self.conn.exec(
            "INSERT OR IGNORE INTO sessions (id, kind, cwd, pid, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            vals![id, kind, cwd.display().to_string(), std::process::id(), now_ms()],
        )?;
        Ok(())
    }

    /// Persist a new subagent (status `pending`) and its `subagent_created` event.
    pub fn create_subagent(&mut self, n: &NewSubagent) -> Result<()> {
        self.conn.tx(|tx| create_subagent(tx, n))
    }

    /// The subagent with this exact id.
    pub fn get(&self, id: &SubagentId) -> Result<Option<SubagentRow>> {
        self.conn.opt(&format!("{} WHERE id = ?1", select_row()), vals![id.as_str()], row)
    }

    /// The one subagent whose id starts with `prefix`.
    pub fn resolve(&self, prefix: &str) -> Result<SubagentId> {
        let p = prefix.trim().to_ascii_lowercase();
        if !SubagentId::is_prefix_like(&p) {
            return Err(StoreError::NotFound(prefix.into()));
        }
        let sql = format!(
            "SELECT id FROM subagents WHERE {} ORDER BY id LIMIT 6",
            self.conn.prefix_of("id")
        );
        let ids: Vec<String> = self.conn.query(&sql, vals![&p], |r| r.get(0))?;
        match ids.as_slice() {
            [] => Err(StoreError::NotFound(prefix.into())),
            [one] => one.parse().map_err(|e| StoreError::Corrupt(format!("{e}"))),
            many => Err(StoreError::Ambiguous { prefix: prefix.into(), matches: many.join(", ") }),
        }
    }

    /// Subagents, newest first: only active ones unless `all`.
    pub fn list(&self, all: bool, limit: usize) -> Result<Vec<SubagentRow>> {
        let filter = if all { String::new() } else { format!(" WHERE {ACTIVE}") };
        self.conn.query(
            &format!("{}{filter} ORDER BY id DESC LIMIT ?1", select_row()),
            // No limit (usize::MAX) is the largest one: `as i64` made it -1, which SQLite
            // takes as none and PostgreSQL refuses.
            vals![i64::try_from(limit).unwrap_or(i64::MAX)],
            row,
        )
    }

    /// Events of a subagent with `seq > after`, in order.
    pub fn events_after(
        &self,
        id: &SubagentId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn.query(
            "SELECT seq, ts, parent_tool_use_id, payload FROM events
             WHERE subagent_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            vals![id.as_str(), after, limit],
            |r| {
                let payload: String = r.get(3)?;
                let event =
                    serde_json::from_str(&payload).unwrap_or(AgentEvent::Unknown { raw: payload });
                Ok(StoredEvent {
                    subagent_id: id.clone(),
                    seq: r.get(0)?,
                    ts: r.get(1)?,
                    parent_tool_use_id: r.get(2)?,
                    event,
                })
            },
        )
    }

    /// The tool the agent of run `id` called last (its own calls, not its subagents').
    pub fn last_tool_call(&self, id: &SubagentId) -> Result<Option<String>> {
        let payload: Option<String> = self.conn.opt(
            "SELECT payload FROM events WHERE subagent_id = ?1 AND kind = 'tool_call'
             AND parent_tool_use_id IS NULL ORDER BY seq DESC LIMIT 1",
            vals![id.as_str()],
            |r| r.get(0),
        )?;
        Ok(payload.and_then(|p| match serde_json::from_str(&p) {
            Ok(AgentEvent::ToolCall { name, .. }) => Some(name),
            _ => None,
        }))
    }

    /// Ask the owner of a run to stop it; returns false if it had already ended.
    pub fn request_cancel(&self, id: &SubagentId) -> Result<bool> {
        let n = self.conn.exec(
            &format!(
                "UPDATE subagents SET cancel_requested_at = COALESCE(cancel_requested_at, ?2)
                 WHERE id = ?1 AND {ACTIVE}"
            ),
            vals![id.as_str(), now_ms()],
        )?;
        Ok(n > 0)
    }

    /// Whether a cancel was requested for this run.
    pub fn cancel_requested(&self, id: &SubagentId) -> Result<bool> {
        let v: Option<Option<i64>> = self.conn.opt(
            "SELECT cancel_requested_at FROM subagents WHERE id = ?1",
            vals![id.as_str()],
            |r| r.get(0),
        )?;
        Ok(v.flatten().is_some())
    }

    /// Active runs with their owner's and process's identity, for the orphan check.
    pub fn active_runs(&self) -> Result<Vec<OrphanCandidate>> {
        self.conn.query(
            &format!(
                "SELECT id, owner_pid, owner_start_time, pid, pgid, process_start_time FROM subagents
                 WHERE {ACTIVE} AND {MINE}"
            ),
            vals![crate::host_id()],
            |r| {
                let id: String = r.get(0)?;
                Ok(OrphanCandidate {
                    id: id.parse().map_err(|e| StoreError::Corrupt(format!("{e}")))?,
                    owner_pid: r.get(1)?,
                    owner_start_time: r.get(2)?,
                    pid: r.get(3)?,
                    pgid: r.get(4)?,
                    process_start_time: r.get(5)?,
                })
            },
        )
    }

    /// Apply an update outside the writer (the CLI marking an orphan, say).
    pub fn update(&mut self, id: &SubagentId, u: &Update) -> Result<Vec<StoredEvent>> {
        // Sequence numbers read afresh by each attempt (a retried one must not reuse them).
        self.conn.tx(|tx| apply_update(tx, &mut HashMap::new(), id, u, now_ms()))
    }
}

/// A row owned by a process of this machine (`?1` is [`host_id`]); rows from before owners
/// were placed (NULL) are taken as this machine's.
pub(crate) const MINE: &str = "(owner_host IS NULL OR owner_host = ?1)";

/// This machine as the store records the owner of a run, plan, lock or worktree: a pid and
/// its start time identify a process only on its own machine (and boot). Its host name and
/// kernel boot id; the name alone if the boot id cannot be read.
pub fn host_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_owned()).ok();
        let host = read("/proc/sys/kernel/hostname").unwrap_or_else(|| "localhost".into());
        match read("/proc/sys/kernel/random/boot_id") {
            Some(boot) => format!("{host}/{boot}"),
            None => host,
        }
    })
}

/// What herd writes into a state dir it creates: nothing of herd's state shows up in `git
/// status`, and the project files a person keeps there (`config.yml`, `agents/`) still do.
pub const STATE_GITIGNORE: &str = "\
# Written by herd when it created this directory: its database, transcripts and logs are
# not the project's. The config, agent definitions and agent memory a person keeps here are.
*
!config.yml
!agents/
!agents/**
!memory/
!memory/**
";

fn write_gitignore(root: &Path) -> Result<()> {
    let path = root.join(".gitignore");
    std::fs::write(&path, STATE_GITIGNORE)
        .map_err(|source| StoreError::Io { path: path.display().to_string(), source })
}

/// The columns of a subagent row as [`row_at`] reads them (qualified: joins read them too),
/// then whether a call waits for a person and how many were denied for want of an answer.
pub(crate) const ROW_COLS: &str = "subagents.id, subagents.parent_session_id, subagents.name,
    subagents.cli, subagents.status, subagents.prompt, subagents.model,
    subagents.working_directory, subagents.max_turns, subagents.timeout_ms, subagents.spec,
    subagents.result_summary, subagents.result_truncated, subagents.failure_reason,
    subagents.failure, subagents.native_session_id, subagents.num_turns, subagents.input_tokens,
    subagents.output_tokens, subagents.cache_creation_input_tokens,
    subagents.cache_read_input_tokens, subagents.cost_usd, subagents.owner_pid,
    subagents.owner_start_time, subagents.pid, subagents.pgid, subagents.process_start_time,
    subagents.exit_code, subagents.exit_signal, subagents.cancel_requested_at,
    subagents.created_at, subagents.started_at, subagents.completed_at, subagents.closed_at,
    subagents.close_reason,
    EXISTS (SELECT 1 FROM permission_requests p
            WHERE p.status = 'pending' AND p.subagent_id = subagents.id),
    (SELECT count(*) FROM permission_requests p
            WHERE p.status = 'expired' AND p.subagent_id = subagents.id)";

fn select_row() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| format!("SELECT {ROW_COLS} FROM subagents"))
}

fn row(r: &Row<'_>) -> Result<SubagentRow> {
    row_at(r, 0)
}

/// The subagent row whose [`ROW_COLS`] start at column `base`.
pub(crate) fn row_at(r: &Row<'_>, base: usize) -> Result<SubagentRow> {
    let status: String = r.get(base + 4)?;
    let spec: String = r.get(base + 10)?;
    let failure: Option<String> = r.get(base + 14)?;
    let u64_opt = |i: usize| -> Result<Option<u64>> { r.get(base + i) };
    let at = |i: usize| base + i;
    Ok(SubagentRow {
        id: r.get(at(0))?,
        parent_session_id: r.get(at(1))?,
        name: r.get(at(2))?,
        cli: r.get(at(3))?,
        status: status.parse().unwrap_or(Status::Failed),
        prompt: r.get(at(5))?,
        model: r.get(at(6))?,
        working_directory: r.get(at(7))?,
        max_turns: r.get(at(8))?,
        timeout_ms: u64_opt(9)?,
        spec: serde_json::from_str(&spec).unwrap_or(serde_json::Value::Null),
        result: r.get(at(11))?,
        result_truncated: r.get(at(12))?,
        failure_reason: r.get(at(13))?,
        failure: failure.and_then(|f| serde_json::from_str(&f).ok()),
        native_session_id: r.get(at(15))?,
        num_turns: r.get(at(16))?,
        usage: Usage {
            input_tokens: r.get(at(17))?,
            output_tokens: r.get(at(18))?,
            cache_creation_input_tokens: r.get(at(19))?,
            cache_read_input_tokens: r.get(at(20))?,
        },
        cost_usd: r.get(at(21))?,
        owner_pid: r.get(at(22))?,
        owner_start_time: u64_opt(23)?,
        pid: r.get(at(24))?,
        pgid: r.get(at(25))?,
        process_start_time: u64_opt(26)?,
        exit_code: r.get(at(27))?,
        exit_signal: r.get(at(28))?,
        cancel_requested_at: r.get(at(29))?,
        created_at: r.get(at(30))?,
        started_at: r.get(at(31))?,
        completed_at: r.get(at(32))?,
        closed_at: r.get(at(33))?,
        close_reason: r.get(at(34))?,
        waiting: r.get(at(35))?,
        unanswered: r.get(at(36))?,
    })
}

/// Insert a new subagent row (status `pending`) and its `subagent_created` event.
pub(crate) fn create_subagent(tx: &Db, n: &NewSubagent) -> Result<()> {
    let now = now_ms();
    tx.exec(
        "INSERT INTO subagents (id, parent_session_id, name, cli, prompt, model, working_directory,
                max_turns, timeout_ms, spec, owner_pid, owner_start_time, created_at, owner_host)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        vals![
            n.id.as_str(),
            &n.parent_session_id,
            &n.name,
            &n.cli,
            &n.prompt,
            &n.model,
            &n.working_directory,
            n.max_turns,
            n.timeout_ms.map(|t| t as i64),
            n.spec.to_string(),
            n.owner_pid,
            n.owner_start_time.map(|t| t as i64),
            now,
            crate::host_id()
        ],
    )?;
    let ev = AgentEvent::SubagentCreated { cli: n.cli.clone(), cwd: n.working_directory.clone() };
    insert_event(tx, &n.id, 1, now, &Decoded::top(ev))?;
    Ok(())
}

/// Insert one event row.
pub(crate) fn insert_event(
    conn: &Db,
    id: &SubagentId,
    seq: i64,
    ts: i64,
    d: &Decoded,
) -> Result<()> {
    let payload =
        serde_json::to_string(&d.event).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    conn.exec(
        "INSERT INTO events (subagent_id, seq, ts, kind, parent_tool_use_id, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        vals![id.as_str(), seq, ts, d.event.kind(), &d.parent_tool_use_id, payload],
    )?;
    Ok(())
}

/// The next sequence number for `id`, cached per connection.
pub(crate) fn next_seq(
    conn: &Db,
    seqs: &mut HashMap<SubagentId, i64>,
    id: &SubagentId,
) -> Result<i64> {
    if let Some(s) = seqs.get_mut(id) {
        *s += 1;
        return Ok(*s);
    }
    // `CAST(?1 AS TEXT)`, not `?1`: SQLite (with STAT4) would re-prepare this statement for
    // every new id; the cast keeps the same plan (the index on (subagent_id, seq)).
    let max: i64 = conn.one(
        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE subagent_id = CAST(?1 AS TEXT)",
        vals![id.as_str()],
        |r| r.get(0),
    )?;
    seqs.insert(id.clone(), max + 1);
    Ok(max + 1)
}

/// Why an update of `id` changed no row: it does not exist, or its status may not become `to`.
fn refused(conn: &Db, id: &SubagentId, to: Option<Status>) -> StoreError {
    let current: Option<String> =
        match conn
            .opt("SELECT status FROM subagents WHERE id = ?1", vals![id.as_str()], |r| r.get(0))
        {
            Ok(c) => c,
            Err(e) => return e,
        };
    let Some(current) = current else { return StoreError::NotFound(id.to_string()) };
    let from: Status = match current.parse() {
        Ok(s) => s,
        Err(e) => return StoreError::Corrupt(format!("{e}")),
    };
    match to.map(|to| from.check_transition(to)) {
        Some(Err(source)) => StoreError::Transition { id: id.to_string(), source },
        // The row changed between the update and this read (another process).
        _ => StoreError::Corrupt(format!("{id}: update matched no row (status {from})")),
    }
}

/// Apply `u` to `id` inside the caller's transaction. The status transition is checked by the
/// UPDATE itself (it only matches a row whose status may become the new one), so a change is
/// one statement; only when it matched nothing is the row read, to say why.
pub(crate) fn apply_update(
    conn: &Db,
    seqs: &mut HashMap<SubagentId, i64>,
    id: &SubagentId,
    u: &Update,
    ts: i64,
) -> Result<Vec<StoredEvent>> {
    let mut sets: Vec<&str> = Vec::new();
    let mut values: Vec<V<'_>> = Vec::new();
    let mut set = |col: &'static str, v: V<'static>| {
        sets.push(col);
        values.push(v);
    };
    let int = |v: i64| V::Int(v);
    if let Some(s) = u.status {
        set("status", V::from(s.as_str()));
    }
    if let Some(f) = &u.failure {
        set("failure_reason", V::from(f.to_string()));
        set("failure", V::from(serde_json::to_string(f).unwrap_or_default()));
    }
    if let Some(v) = u.pid {
        set("pid", int(v.into()));
    }
    if let Some(v) = u.pgid {
        set("pgid", int(v.into()));
    }
    if let Some(v) = u.process_start_time {
        set("process_start_time", int(v as i64));
    }
    if let Some(v) = u.started_at {
        set("started_at", int(v));
    }
    if let Some(v) = u.completed_at {
        set("completed_at", int(v));
    }
    if let Some(v) = u.closed_at {
        set("closed_at", int(v));
    }
    if let Some(v) = &u.close_reason {
        set("close_reason", V::from(v.clone()));
    }
    if let Some(v) = u.exit_code {
        set("exit_code", int(v.into()));
    }
    if let Some(v) = u.exit_signal {
        set("exit_signal", int(v.into()));
    }
    if let Some(v) = &u.native_session_id {
        set("native_session_id", V::from(v.clone()));
    }
    if let Some(v) = &u.model {
        set("model", V::from(v.clone()));
    }
    if let Some(v) = &u.result {
        set("result_summary", V::from(v.clone()));
    }
    if let Some(v) = u.result_truncated {
        set("result_truncated", int(v.into()));
    }
    if let Some(v) = u.num_turns {
        set("num_turns", int(v.into()));
    }
    if let Some(us) = &u.usage {
        set("input_tokens", int(us.input_tokens as i64));
        set("output_tokens", int(us.output_tokens as i64));
        set("cache_creation_input_tokens", int(us.cache_creation_input_tokens as i64));
        set("cache_read_input_tokens", int(us.cache_read_input_tokens as i64));
    }
    if let Some(v) = u.cost_usd {
        set("cost_usd", V::Real(v));
    }
    if sets.is_empty() {
        // Events only: the row must exist.
        let found =
            conn.opt("SELECT 1 FROM subagents WHERE id = ?1", vals![id.as_str()], |_| Ok(()))?;
        if found.is_none() {
            return Err(StoreError::NotFound(id.to_string()));
        }
    } else {
        let assignments: Vec<String> =
            sets.iter().enumerate().map(|(i, c)| format!("{c} = ?{}", i + 2)).collect();
        // The statuses the new one may be reached from (fixed names, not input).
        let from = u.status.map(|to| {
            let names: Vec<String> = ALL_STATUSES
                .into_iter()
                .filter(|s| s.check_transition(to).is_ok())
                .map(|s| format!("status = '{}'", s.as_str()))
                .collect();
            // Comparisons, not `IN (…)`: SQLite builds a table for a longer IN list each time.
            format!(" AND ({})", names.join(" OR "))
        });
        let sql = format!(
            "UPDATE subagents SET {} WHERE id = ?1{}",
            assignments.join(", "),
            from.unwrap_or_default()
        );
        let mut all = vec![V::from(id.as_str())];
        all.extend(values);
        if conn.exec(&sql, &all)? == 0 {
            return Err(refused(conn, id, u.status));
        }
    }
    // A run whose process is gone (it ended, waits for its merge, or was swept as an orphan)
    // has nobody left to ask: its requests still waiting for a person are closed with it.
    let ended = u.status.is_some_and(|s| s.is_terminal() || s == Status::WaitingForMerge);
    if ended || u.closed_at.is_some() {
        crate::audit::close_requests_of(conn, id.as_str())?;
    }
    let mut stored = Vec::with_capacity(u.events.len());
    for ev in &u.events {
        let seq = next_seq(conn, seqs, id)?;
        let d = Decoded::top(ev.clone());
        insert_event(conn, id, seq, ts, &d)?;
        stored.push(StoredEvent {
            subagent_id: id.clone(),
            seq,
            ts,
            parent_tool_use_id: None,
            event: d.event,
        });
    }
    Ok(stored)
}

/// The failure used when an owner died with its run active.
pub fn orphaned_update() -> Update {
    let now = now_ms();
    Update {
        status: Some(Status::Failed),
        failure: Some(FailureReason::Orphaned),
        completed_at: Some(now),
        closed_at: Some(now),
        close_reason: Some("orphaned".into()),
        events: vec![
            AgentEvent::SubagentFailed { reason: FailureReason::Orphaned.to_string() },
            AgentEvent::SubagentClosed {
                final_status: "failed".into(),
                close_reason: "orphaned".into(),
            },
        ],
        ..Update::default()
    }
}

//! Statements through the connection's prepared-statement cache: the writer runs the same few
//! dozen statements for every run, and parsing them again each time was a quarter of its work.

use rusqlite::{Connection, Params, Row};

/// `execute` and `query_row`, with the statement prepared once per connection.
pub(crate) trait Cached {
    fn exec<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;
    fn one<T, P: Params>(
        &self,
        sql: &str,
        params: P,
        f: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T>;
}

impl Cached for Connection {
    fn exec<P: Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    fn one<T, P: Params>(
        &self,
        sql: &str,
        params: P,
        f: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.prepare_cached(sql)?.query_row(params, f)
    }
}

/// How many distinct statements a connection keeps prepared.
pub(crate) const CACHE_CAPACITY: usize = 64;

/// The condition of an active run, written exactly as `idx_subagents_active`'s (migration 6):
/// SQLite uses a partial index only for a query that states its very condition.
pub(crate) const ACTIVE: &str = "(status = 'pending' OR status = 'queued' OR status = 'running' OR status = 'waiting_for_merge')";

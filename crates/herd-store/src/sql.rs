//! SQL shared by the store's modules: the prepared-statement cache's size and the condition
//! of an active run (statements go through [`crate::db::Db`], prepared once per connection).

/// How many distinct statements a connection keeps prepared.
pub(crate) const CACHE_CAPACITY: usize = 64;

/// The condition of an active run, written exactly as `idx_subagents_active`'s (migration 6):
/// SQLite uses a partial index only for a query that states its very condition.
pub(crate) const ACTIVE: &str = "(status = 'pending' OR status = 'queued' OR status = 'running' OR status = 'waiting_for_merge')";

//! One connection to either database herd stores in — SQLite (embedded, one machine) or
//! PostgreSQL (shared by several machines) — with statements written once, `?N` placeholders.

use std::borrow::Cow;
use std::time::Duration;

use crate::{Result, StoreError};

pub(crate) mod pg;
mod value;

pub(crate) use value::{Param, Row, V};

/// Where the store lives: a SQLite file under the state dir, or a PostgreSQL database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    /// A `postgres://` / `postgresql://` URL (or libpq key=value string).
    Postgres(String),
}

impl Backend {
    /// Parse a `--store` / `HERD_STORE_URL` / `store:` value: `sqlite` (or empty) for the
    /// embedded default, a `postgres://…` or `postgresql://…` URL for PostgreSQL.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let t = s.trim();
        if t.is_empty() || t == "sqlite" {
            return Ok(Self::Sqlite);
        }
        if t.starts_with("postgres://") || t.starts_with("postgresql://") {
            return t
                .parse::<tokio_postgres::Config>()
                .map(|_| Self::Postgres(t.to_owned()))
                .map_err(|e| format!("store URL {}: {e}", redact(t)));
        }
        Err(format!(
            "store {:?}: expected `sqlite` or a postgres://… / postgresql://… URL",
            redact(t)
        ))
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }

    /// How to show where the store is (a URL's password is hidden).
    pub fn shown(&self) -> String {
        match self {
            Self::Sqlite => "sqlite".into(),
            Self::Postgres(u) => redact(u),
        }
    }
}

/// A URL with its password (if any) replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (auth, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((cred, host)) => match cred.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// A connection to the store's database.
#[derive(Debug)]
pub(crate) enum Db {
    Lite(rusqlite::Connection),
    Pg(pg::PgConn),
}

impl Db {
    pub(crate) fn is_pg(&self) -> bool {
        matches!(self, Db::Pg(_))
    }

    /// Run one statement; returns how many rows it changed.
    pub(crate) fn exec(&self, sql: &str, params: &[V<'_>]) -> Result<usize> {
        match self {
            Db::Lite(c) => {
                Ok(c.prepare_cached(sql)?.execute(rusqlite::params_from_iter(params))?)
            }
            Db::Pg(c) => c.exec(sql, params),
        }
    }

    /// Every row `sql` returns, each mapped by `f`.
    pub(crate) fn query<T>(
        &self,
        sql: &str,
        params: &[V<'_>],
        mut f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        match self {
            Db::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    out.push(f(&Row::Lite(r))?);
                }
                Ok(out)
            }
            Db::Pg(c) => c.query(sql, params)?.iter().map(|r| f(&Row::Pg(r))).collect(),
        }
    }

    /// The first row `sql` returns, if any.
    pub(crate) fn opt<T>(
        &self,
        sql: &str,
        params: &[V<'_>],
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        match self {
            Db::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
                match rows.next()? {
                    Some(r) => f(&Row::Lite(r)).map(Some),
                    None => Ok(None),
                }
            }
            Db::Pg(c) => match c.query(sql, params)?.first() {
                Some(r) => f(&Row::Pg(r)).map(Some),
                None => Ok(None),
            },
        }
    }

    /// The row a query that always returns one returns (a count, a maximum).
    pub(crate) fn one<T>(
        &self,
        sql: &str,
        params: &[V<'_>],
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        self.opt(sql, params, f)?
            .ok_or_else(|| StoreError::Corrupt(format!("no row from {}", first_line(sql))))
    }

    /// Statements without parameters, separated by `;` (schema changes).
    pub(crate) fn batch(&self, sql: &str) -> Result<()> {
        match self {
            Db::Lite(c) => Ok(c.execute_batch(sql)?),
            Db::Pg(c) => c.batch(sql),
        }
    }

    /// A statement without parameters, cached (transaction control, savepoints).
    pub(crate) fn fixed(&self, sql: &str) -> Result<()> {
        match self {
            Db::Lite(c) => {
                c.prepare_cached(sql)?.execute([])?;
                Ok(())
            }
            Db::Pg(c) => c.batch(sql),
        }
    }

    /// Open a write transaction: SQLite takes the database's write lock at once (`IMMEDIATE`).
    pub(crate) fn begin(&self) -> Result<()> {
        self.fixed(if self.is_pg() { "BEGIN" } else { "BEGIN IMMEDIATE" })
    }

    pub(crate) fn in_transaction(&self) -> bool {
        match self {
            Db::Lite(c) => !c.is_autocommit(),
            Db::Pg(c) => c.in_transaction(),
        }
    }

    /// Run `f` in one write transaction, committed if it succeeds, rolled back if not.
    ///
    /// On PostgreSQL a transaction that lost a serialization conflict or a deadlock (SQLSTATE
    /// `40001`, `40P01`: the server rolled it back, nothing of it happened) is run again from
    /// the start, up to [`TX_RETRIES`] times after a short random pause. So `f` may run more
    /// than once: it must do nothing but its statements, or undo what else it did when run
    /// again (a cache it filled, say).
    pub(crate) fn tx<T>(&self, mut f: impl FnMut(&Db) -> Result<T>) -> Result<T> {
        // A transaction inside another (no savepoint) is not ours to run again.
        let outermost = !self.in_transaction();
        let mut retries = 0;
        loop {
            let out = self.begin().and_then(|()| f(self));
            let out = out.and_then(|v| self.fixed("COMMIT").map(|()| v));
            if out.is_err() && self.in_transaction() {
                let _ = self.fixed("ROLLBACK");
            }
            match out {
                Err(e) if outermost && retries < TX_RETRIES && e.is_conflict() => {
                    retries += 1;
                    std::thread::sleep(backoff(retries));
                }
                out => return out,
            }
        }
    }

    /// `col` starts with `?1` (an id prefix), as each database can use an index for it.
    pub(crate) fn prefix_of(&self, col: &str) -> String {
        if self.is_pg() {
            format!("({col} COLLATE \"C\" >= ?1 AND {col} COLLATE \"C\" < (?1 || '~'))")
        } else {
            format!("{col} >= ?1 AND {col} < ?1 || '~'")
        }
    }
}

/// How many times [`Db::tx`] runs a transaction again that lost a conflict.
pub(crate) const TX_RETRIES: u32 = 5;

/// The pause before retry `n` (from 1): about 4 ms doubled each time (4, 8, … 64 ms), ±50 %
/// at random so that the transactions that collided do not meet again in step.
fn backoff(n: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let base = 4_000u64 << (n.saturating_sub(1)).min(4);
    // A per-call random key (std's own seeding): no dependency for a little jitter.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(n);
    Duration::from_micros(base / 2 + h.finish() % base)
}

impl StoreError {
    /// The database could not be reached: no connection could be opened, or the server
    /// closed it or is shutting down (SQLSTATE classes 08 and 57P). Worth waiting for.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Pg { .. } => true,
            StoreError::Postgres { code: Some(c), .. } => {
                c.starts_with("08") || c.starts_with("57P")
            }
            _ => false,
        }
    }

    /// A PostgreSQL serialization failure or deadlock: the transaction was rolled back and
    /// may simply be run again.
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Postgres { code: Some(c), .. } if c == "40001" || c == "40P01")
    }
}

fn first_line(sql: &str) -> Cow<'_, str> {
    let t = sql.trim();
    match t.find('\n') {
        Some(i) => Cow::Owned(format!("{}…", &t[..i])),
        None => Cow::Borrowed(t),
    }
}

/// Parameters for [`Db`] statements: `vals![a, b]` is `&[a.v(), b.v()]` ([`Param`]), each
/// borrowed — a closure binding its captures this way stays `FnMut`, so [`Db::tx`] can run it
/// again.
macro_rules! vals {
    () => { &[] as &[$crate::db::V<'_>] };
    ($($v:expr),+ $(,)?) => {
        &[$($crate::db::Param::v(&$v)),+] as &[$crate::db::V<'_>]
    };
}
pub(crate) use vals;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_parse_and_hide_passwords() {
        assert_eq!(Backend::parse("").unwrap(), Backend::Sqlite);
        assert_eq!(Backend::parse("sqlite").unwrap(), Backend::Sqlite);
        let b = Backend::parse("postgres://herd:secret@db.example:5432/herd").unwrap();
        assert!(b.is_postgres());
        assert_eq!(b.shown(), "postgres://herd:***@db.example:5432/herd");
        assert!(Backend::parse("postgresql:///herd?host=/tmp/s&port=5433").unwrap().is_postgres());
        let e = Backend::parse("mysql://x").unwrap_err();
        assert!(e.contains("mysql://x") && e.contains("postgres://"), "{e}");
        let e = Backend::parse("postgres://u:pw@h:notaport/db").unwrap_err();
        assert!(e.contains("u:***@h") && !e.contains("pw"), "{e}");
    }

    /// A connection to a fresh database of the test cluster (kept alive by the `PgDb`).
    fn pg_conn(pg: &herd_testkit::PgDb) -> Db {
        Db::Pg(pg::PgConn::connect(&pg.url).unwrap())
    }

    #[test]
    fn a_transaction_that_lost_a_deadlock_is_run_again() {
        use std::sync::{Arc, Barrier};
        let pg = herd_testkit::pg_db();
        let setup = pg_conn(&pg);
        setup
            .batch(
                "CREATE TABLE t (id BIGINT PRIMARY KEY, n BIGINT NOT NULL);
                 INSERT INTO t VALUES (1, 0), (2, 0)",
            )
            .unwrap();
        let both_hold_one = Arc::new(Barrier::new(2));
        // Two transactions updating the same two rows in opposite orders, each taking its
        // second row only once the other holds it: PostgreSQL rolls one back (40P01).
        let run = |first: i64, second: i64| {
            let (url, met) = (pg.url.clone(), Arc::clone(&both_hold_one));
            std::thread::spawn(move || {
                let db = Db::Pg(pg::PgConn::connect(&url).unwrap());
                let mut attempts = 0;
                db.tx(|tx| {
                    attempts += 1;
                    tx.exec("UPDATE t SET n = n + 1 WHERE id = ?1", vals![first])?;
                    if attempts == 1 {
                        met.wait();
                    }
                    tx.exec("UPDATE t SET n = n + 1 WHERE id = ?1", vals![second])?;
                    Ok(())
                })
                .map(|()| attempts)
            })
        };
        let (a, b) = (run(1, 2), run(2, 1));
        let a = a.join().unwrap().expect("the first transaction commits");
        let b = b.join().unwrap().expect("the second transaction commits");
        assert_eq!(a + b, 3, "one ran once, the deadlock's victim twice: {a} and {b}");
        let n: Vec<i64> =
            setup.query("SELECT n FROM t ORDER BY id", vals![], |r| r.get(0)).unwrap();
        assert_eq!(n, [2, 2], "each committed exactly once");

        // Any other failure is not run again.
        let mut attempts = 0;
        let e = setup
            .tx(|tx| {
                attempts += 1;
                tx.exec("INSERT INTO t VALUES (1, 0)", vals![])
            })
            .unwrap_err();
        assert!(matches!(&e, StoreError::Postgres { code: Some(c), .. } if c == "23505"), "{e}");
        assert_eq!(attempts, 1);
        assert!(!setup.in_transaction());
    }

    /// The server process behind `db`, ended from another connection; returns once `db` has
    /// seen its connection close.
    fn kill_backend(pg: &herd_testkit::PgDb, db: &Db) {
        let pid: i64 = db.one("SELECT pg_backend_pid()::BIGINT", vals![], |r| r.get(0)).unwrap();
        let killed = pg.rows(&format!("SELECT pg_terminate_backend({pid}, 10000)"));
        assert_eq!(killed, [[Some("t".to_owned())]]);
        let Db::Pg(c) = db else { unreachable!() };
        let t = std::time::Instant::now();
        while !c.is_closed() {
            assert!(t.elapsed() < Duration::from_secs(10), "the client never saw the kill");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_lost_connection_is_opened_again_by_the_next_call() {
        let pg = herd_testkit::pg_db();
        let db = pg_conn(&pg);
        db.batch("CREATE TABLE t (id BIGINT PRIMARY KEY)").unwrap();
        let pid = |db: &Db| -> i64 {
            db.one("SELECT pg_backend_pid()::BIGINT", vals![], |r| r.get(0)).unwrap()
        };
        let before = pid(&db);
        kill_backend(&pg, &db);
        // Outside a transaction: a new connection, its statements prepared again.
        assert_ne!(pid(&db), before);
        db.exec("INSERT INTO t VALUES (?1)", vals![1]).unwrap();

        // Inside one: the statements after the loss fail (they would run outside it), the
        // transaction ends, and the next call outside it connects again.
        let e = db
            .tx(|tx| {
                tx.exec("INSERT INTO t VALUES (?1)", vals![2])?;
                kill_backend(&pg, tx);
                tx.exec("INSERT INTO t VALUES (?1)", vals![3])
            })
            .unwrap_err();
        assert!(matches!(&e, StoreError::Postgres { code: Some(c), .. } if c == "08006"), "{e}");
        assert!(!e.is_conflict() && !db.in_transaction());
        let ids: Vec<i64> =
            db.query("SELECT id FROM t ORDER BY id", vals![], |r| r.get(0)).unwrap();
        assert_eq!(ids, [1], "nothing of the lost transaction was stored");
    }

    #[test]
    fn a_connection_lost_with_a_session_lock_says_so_once() {
        let pg = herd_testkit::pg_db();
        let (db, other) = (pg_conn(&pg), pg_conn(&pg));
        let try_lock = |db: &Db| -> bool {
            db.one("SELECT pg_try_advisory_lock(hashtext(?1))", vals!["merge:p"], |r| r.get(0))
                .unwrap()
        };
        let unlock = |db: &Db| {
            db.one("SELECT pg_advisory_unlock(hashtext(?1))::TEXT", vals!["merge:p"], |_| Ok(()))
                .unwrap()
        };
        // Taken and given back: a later loss is silent.
        assert!(try_lock(&db));
        assert!(!try_lock(&other), "held by the first connection");
        unlock(&db);
        kill_backend(&pg, &db);
        assert!(try_lock(&db), "connected again at once");
        // Lost while held: its holder hears of it once (another may hold the lock by then).
        kill_backend(&pg, &db);
        assert!(try_lock(&other), "the lock went with its connection");
        let e = db.one("SELECT 1::BIGINT", vals![], |r| r.get::<i64>(0)).unwrap_err();
        assert!(e.to_string().contains("advisory locks"), "{e}");
        assert_eq!(db.one("SELECT 1::BIGINT", vals![], |r| r.get::<i64>(0)).unwrap(), 1);
        assert!(!try_lock(&db), "the new connection does not hold it");
    }

    #[test]
    fn a_listener_listens_again_on_its_new_connection() {
        let pg = herd_testkit::pg_db();
        let db = pg_conn(&pg);
        db.batch("LISTEN herd_t").unwrap();
        kill_backend(&pg, &db);
        let Db::Pg(c) = &db else { unreachable!() };
        // The wait connects again (and listens) instead of failing at once, over and over.
        let t = std::time::Instant::now();
        assert!(c.notification(Duration::from_millis(300)).is_none());
        assert!(t.elapsed() >= Duration::from_millis(250), "{:?}", t.elapsed());
        pg.rows("NOTIFY herd_t, 'after'");
        let n = c.notification(Duration::from_secs(10)).expect("the notification");
        assert_eq!((n.channel(), n.payload()), ("herd_t", "after"));
    }
}

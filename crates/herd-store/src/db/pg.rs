//! The PostgreSQL connection behind [`super::Db`]: statements translated from the SQLite
//! spelling (`?N` → `$N`, `INSERT OR IGNORE`) once, prepared once per connection.

use std::cell::{Cell, Ref, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};

use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, NoTls, Notification, Statement};

use super::V;
use crate::{Result, StoreError};

/// One client connection and its prepared statements (keyed by the SQLite spelling). The
/// socket is driven by a thread of its own (a small runtime), so the calls here block the
/// calling thread only — whether or not it runs async code — like SQLite's do.
///
/// A connection the server closed (restarted, `pg_terminate_backend`, a dropped network) is
/// opened again by the next call outside a transaction, listening to the same channels; inside
/// one, every call fails until the transaction's `ROLLBACK` (the server rolled it back already).
/// A connection that held a session advisory lock (a plan's merge lock, the migration lock) is
/// not replaced silently: the next call fails, so that its holder learns the lock is gone, and
/// the one after connects again.
pub(crate) struct PgConn {
    url: String,
    link: RefCell<Link>,
    stmts: RefCell<HashMap<String, Statement>>,
    in_tx: Cell<bool>,
    /// The channels this connection `LISTEN`s to (listened to again on a new connection).
    channels: RefCell<Vec<String>>,
    /// Session advisory locks held (see [`PgConn::count_locks`]).
    session_locks: Cell<u32>,
}

/// The client of one server connection, and the `NOTIFY`s on the channels it `LISTEN`s to, as
/// they arrive (the sender goes with the connection).
struct Link {
    client: Client,
    notes: mpsc::Receiver<Notification>,
}

impl std::fmt::Debug for PgConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgConn")
    }
}

/// Wait for `f` on this thread (parked between polls). The client's futures need no runtime
/// of their own: they talk to the connection thread through channels.
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// Open a connection to `url` and the thread that drives it.
fn open(url: &str) -> Result<Link> {
    let fail = |source: tokio_postgres::Error| StoreError::Pg {
        url: super::redact(url),
        source: Box::new(source),
    };
    let (ready_tx, ready_rx) = mpsc::channel();
    let (notes_tx, notes) = mpsc::channel();
    let url = url.to_owned();
    std::thread::Builder::new()
        .name("herd-store-pg".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return drop(ready_tx.send(Err(Err(e)))),
            };
            rt.block_on(async move {
                let (client, mut conn) = match tokio_postgres::connect(&url, NoTls).await {
                    Ok(c) => c,
                    Err(e) => return drop(ready_tx.send(Err(Ok(e)))),
                };
                let _ = ready_tx.send(Ok(client));
                // Until the client is dropped (or the server goes): forward notifications.
                while let Some(msg) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                    match msg {
                        Ok(AsyncMessage::Notification(n)) => drop(notes_tx.send(n)),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            });
        })
        .map_err(|source| StoreError::Io { path: "postgres connection thread".into(), source })?;
    match ready_rx.recv() {
        Ok(Ok(client)) => Ok(Link { client, notes }),
        Ok(Err(Ok(e))) => Err(fail(e)),
        Ok(Err(Err(source))) => {
            Err(StoreError::Io { path: "postgres connection runtime".into(), source })
        }
        Err(_) => Err(StoreError::Corrupt("postgres connection thread died".into())),
    }
}

impl PgConn {
    /// Connect to `url` (no TLS: reach a remote server through a tunnel or a private network).
    pub(crate) fn connect(url: &str) -> Result<Self> {
        Ok(Self {
            link: RefCell::new(open(url)?),
            url: url.to_owned(),
            stmts: RefCell::default(),
            in_tx: Cell::new(false),
            channels: RefCell::default(),
            session_locks: Cell::new(0),
        })
    }

    /// The client, connected again first if the server closed the connection (see
    /// [`PgConn::revive`]).
    fn client(&self) -> Result<Ref<'_, Client>> {
        if self.link.borrow().client.is_closed() {
            self.revive()?;
        }
        Ok(Ref::map(self.link.borrow(), |l| &l.client))
    }

    /// A closed connection opened again — unless what was lost with it must be told first: an
    /// open transaction (its statements must not go on outside it; fails until its
    /// `ROLLBACK`), or session locks (fails once).
    fn revive(&self) -> Result<()> {
        if self.in_tx.get() {
            return Err(lost(LOST_IN_TRANSACTION));
        }
        if self.session_locks.replace(0) > 0 {
            return Err(lost(LOST_WITH_LOCKS));
        }
        self.reconnect()
    }

    /// A new connection in place of the closed one: statements are prepared again, channels
    /// listened to again (notifications sent in between are lost; listeners poll too).
    fn reconnect(&self) -> Result<()> {
        let link = open(&self.url)?;
        for ch in self.channels.borrow().iter() {
            block_on(link.client.batch_execute(&format!("LISTEN {ch}")))
                .map_err(|e| err(e, "LISTEN"))?;
        }
        self.stmts.borrow_mut().clear();
        *self.link.borrow_mut() = link;
        Ok(())
    }

    /// Wait up to `timeout` for a notification on a channel this connection listens to. A
    /// closed connection is opened again (listening again) for the rest of the wait.
    pub(crate) fn notification(&self, timeout: Duration) -> Option<Notification> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let got = self.link.borrow().notes.recv_timeout(left);
            match got {
                Ok(n) => return Some(n),
                Err(mpsc::RecvTimeoutError::Timeout) => return None,
                // The connection is gone (its thread dropped the sender).
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if self.revive().is_err() {
                        // Not now: no busy loop for a listener that calls again at once.
                        std::thread::sleep(left);
                        return None;
                    }
                }
            }
        }
    }

    /// `sql` prepared on `client` (the connection's current one).
    fn prepared(&self, client: &Client, sql: &str) -> Result<Statement> {
        if let Some(s) = self.stmts.borrow().get(sql) {
            return Ok(s.clone());
        }
        let translated = translate(sql);
        let stmt = block_on(client.prepare(&translated)).map_err(|e| StoreError::Postgres {
            message: format!("{e}: {}", source_of(&e)),
            code: e.code().map(|c| c.code().to_owned()),
            statement: Some(translated.clone()),
        })?;
        let mut cache = self.stmts.borrow_mut();
        // Statements built with values spelled in (rare) must not grow the cache forever.
        if cache.len() >= 512 {
            cache.clear();
        }
        cache.insert(sql.to_owned(), stmt.clone());
        Ok(stmt)
    }

    pub(crate) fn exec(&self, sql: &str, params: &[V<'_>]) -> Result<usize> {
        let client = self.client()?;
        let stmt = self.prepared(&client, sql)?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        let n = block_on(client.execute(&stmt, &refs)).map_err(|e| err(e, sql))?;
        Ok(n as usize)
    }

    pub(crate) fn query(&self, sql: &str, params: &[V<'_>]) -> Result<Vec<tokio_postgres::Row>> {
        let client = self.client()?;
        let stmt = self.prepared(&client, sql)?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        let rows = block_on(client.query(&stmt, &refs)).map_err(|e| err(e, sql))?;
        if sql.contains("advisory_") {
            self.count_locks(sql, &rows);
        }
        Ok(rows)
    }

    /// Count the session advisory locks `sql` took or gave back: `pg_advisory_lock` takes one,
    /// `pg_try_advisory_lock` one if it returned true, `pg_advisory_unlock` gives one back if
    /// it returned true (the result read as a boolean or as its text). Transaction-level locks
    /// (`_xact_`) end with their transaction and are not counted.
    fn count_locks(&self, sql: &str, rows: &[tokio_postgres::Row]) {
        let yes = || {
            rows.first().is_some_and(|r| {
                r.try_get::<_, bool>(0)
                    .or_else(|_| r.try_get::<_, String>(0).map(|t| t == "true" || t == "t"))
                    .unwrap_or(false)
            })
        };
        let n = self.session_locks.get();
        let n = if sql.contains("pg_advisory_unlock_all(") {
            0
        } else if sql.contains("pg_advisory_unlock(") {
            if yes() { n.saturating_sub(1) } else { n }
        } else if sql.contains("pg_advisory_lock(")
            || (sql.contains("pg_try_advisory_lock(") && yes())
        {
            n + 1
        } else {
            n
        };
        self.session_locks.set(n);
    }

    pub(crate) fn batch(&self, sql: &str) -> Result<()> {
        let t = sql.trim_start();
        let upper = t.to_ascii_uppercase();
        let word = upper.split_whitespace().next().unwrap_or("");
        // `ROLLBACK TO <savepoint>` keeps the transaction open.
        let rollback = word == "ROLLBACK" && !upper.starts_with("ROLLBACK TO");
        if rollback && self.link.borrow().client.is_closed() {
            // The server rolled it back when the connection went.
            self.in_tx.set(false);
            return Ok(());
        }
        block_on(self.client()?.batch_execute(sql)).map_err(|e| err(e, sql))?;
        match word {
            "BEGIN" => self.in_tx.set(true),
            "COMMIT" | "END" => self.in_tx.set(false),
            _ if rollback => self.in_tx.set(false),
            "LISTEN" => {
                let ch = t.split_whitespace().nth(1).unwrap_or("").trim_end_matches(';');
                let mut chans = self.channels.borrow_mut();
                if !ch.is_empty() && !chans.iter().any(|c| c == ch) {
                    chans.push(ch.to_owned());
                }
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn in_transaction(&self) -> bool {
        self.in_tx.get()
    }

    /// Whether the server closed this connection (the next call outside a transaction opens
    /// it again).
    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        self.link.borrow().client.is_closed()
    }
}

const LOST_IN_TRANSACTION: &str =
    "the connection to the server was lost in a transaction (the server rolled it back)";
const LOST_WITH_LOCKS: &str =
    "the connection to the server was lost, and with it this session's advisory locks";

/// What a call gets once its connection is gone with something the caller must know of.
fn lost(message: &str) -> StoreError {
    StoreError::Postgres {
        message: message.into(),
        code: Some(CONNECTION_FAILURE.into()),
        statement: None,
    }
}

/// SQLSTATE `connection_failure`.
const CONNECTION_FAILURE: &str = "08006";

fn source_of(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default()
}

fn err(e: tokio_postgres::Error, sql: &str) -> StoreError {
    let detail = match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => e.to_string(),
    };
    let code = match e.code() {
        Some(c) => Some(c.code().to_owned()),
        None if e.is_closed() => Some(CONNECTION_FAILURE.to_owned()),
        None => None,
    };
    StoreError::Postgres {
        message: detail,
        code,
        statement: Some(super::first_line(sql).into_owned()),
    }
}

/// The PostgreSQL spelling of a statement written for SQLite: `?N` → `$N` outside quotes,
/// `INSERT OR IGNORE INTO …` → `INSERT INTO … ON CONFLICT DO NOTHING`.
pub(crate) fn translate(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted && chars.peek().is_some_and(char::is_ascii_digit) => out.push('$'),
            _ => out.push(c),
        }
    }
    let out = json_paths(&out);
    let trimmed = out.trim_start();
    if let Some(rest) = trimmed.strip_prefix("INSERT OR IGNORE INTO") {
        return format!(
            "INSERT INTO{} ON CONFLICT DO NOTHING",
            rest.trim_end().trim_end_matches(';')
        );
    }
    out
}

/// SQLite's `json_extract(col, '$.a.b')` as PostgreSQL's `(col::json #>> '{a,b}')`.
fn json_paths(sql: &str) -> String {
    const F: &str = "json_extract(";
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(i) = rest.find(F) {
        let after = &rest[i + F.len()..];
        let parsed = after.split_once(", '$.").and_then(|(col, tail)| {
            let (path, tail) = tail.split_once("')")?;
            let simple = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || "_.".contains(c));
            (simple(col) && simple(path)).then_some((col, path, tail))
        });
        match parsed {
            Some((col, path, tail)) => {
                out.push_str(&rest[..i]);
                out.push_str(&format!("({col}::json #>> '{{{}}}')", path.replace('.', ",")));
                rest = tail;
            }
            None => {
                out.push_str(&rest[..i + F.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The PostgreSQL spelling of SQLite schema text: 64-bit integers, double precision, identity
/// keys for SQLite's rowid aliases, no `WITHOUT ROWID`.
pub(crate) fn ddl(sqlite: &str) -> String {
    let mut out = String::with_capacity(sqlite.len() + 64);
    for line in sqlite.lines() {
        let mut l = line
            .replace("INTEGER PRIMARY KEY", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY");
        l = replace_word(&l, "INTEGER", "BIGINT");
        l = replace_word(&l, "REAL", "DOUBLE PRECISION");
        l = l.replace(") WITHOUT ROWID;", ");");
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn replace_word(s: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(word) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        out.push_str(&rest[..i]);
        out.push_str(if ident(before) || ident(after) { word } else { with });
        rest = &rest[i + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_upserts_are_translated_outside_quotes() {
        assert_eq!(
            translate("SELECT '?1', x FROM t WHERE a = ?1 AND b < ?12 || '~'"),
            "SELECT '?1', x FROM t WHERE a = $1 AND b < $12 || '~'"
        );
        assert_eq!(
            translate("INSERT OR IGNORE INTO s (a) VALUES (?1)"),
            "INSERT INTO s (a) VALUES ($1) ON CONFLICT DO NOTHING"
        );
        assert_eq!(
            translate("SELECT json_extract(s.spec, '$.plan.id'), x FROM s"),
            "SELECT (s.spec::json #>> '{plan,id}'), x FROM s"
        );
    }

    #[test]
    fn schema_text_gets_postgres_types() {
        let d =
            ddl("CREATE TABLE e (\n id INTEGER PRIMARY KEY,\n n INTEGER NOT NULL,\n c REAL,\n \
                     integer_ish TEXT\n) WITHOUT ROWID;");
        assert!(d.contains("id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"), "{d}");
        assert!(d.contains("n BIGINT NOT NULL") && d.contains("c DOUBLE PRECISION"), "{d}");
        assert!(d.contains("integer_ish TEXT") && d.contains("\n);"), "{d}");
    }
}

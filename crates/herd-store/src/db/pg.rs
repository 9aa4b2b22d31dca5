//! The PostgreSQL connection behind [`super::Db`]: statements translated from the SQLite
//! spelling (`?N` → `$N`, `INSERT OR IGNORE`) once, prepared once per connection.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Wake};

use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, NoTls, Notification, Statement};

use super::V;
use crate::{Result, StoreError};

/// One client connection and its prepared statements (keyed by the SQLite spelling). The
/// socket is driven by a thread of its own (a small runtime), so the calls here block the
/// calling thread only — whether or not it runs async code — like SQLite's do.
pub(crate) struct PgConn {
    client: Client,
    stmts: RefCell<HashMap<String, Statement>>,
    in_tx: Cell<bool>,
    /// `NOTIFY`s on the channels this connection `LISTEN`s to, as they arrive.
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

impl PgConn {
    /// Connect to `url` (no TLS: reach a remote server through a tunnel or a private network).
    pub(crate) fn connect(url: &str) -> Result<Self> {
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
            .map_err(|source| StoreError::Io {
                path: "postgres connection thread".into(),
                source,
            })?;
        let client = match ready_rx.recv() {
            Ok(Ok(c)) => c,
            Ok(Err(Ok(e))) => return Err(fail(e)),
            Ok(Err(Err(source))) => {
                return Err(StoreError::Io { path: "postgres connection runtime".into(), source });
            }
            Err(_) => return Err(StoreError::Corrupt("postgres connection thread died".into())),
        };
        Ok(Self { client, stmts: RefCell::default(), in_tx: Cell::new(false), notes })
    }

    /// Wait up to `timeout` for a notification on a channel this connection listens to.
    pub(crate) fn notification(&self, timeout: std::time::Duration) -> Option<Notification> {
        self.notes.recv_timeout(timeout).ok()
    }

    fn prepared(&self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.stmts.borrow().get(sql) {
            return Ok(s.clone());
        }
        let translated = translate(sql);
        let stmt =
            block_on(self.client.prepare(&translated)).map_err(|e| StoreError::Postgres {
                message: format!("{e}: {}", source_of(&e)),
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
        let stmt = self.prepared(sql)?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        let n = block_on(self.client.execute(&stmt, &refs)).map_err(|e| err(e, sql))?;
        Ok(n as usize)
    }

    pub(crate) fn query(&self, sql: &str, params: &[V<'_>]) -> Result<Vec<tokio_postgres::Row>> {
        let stmt = self.prepared(sql)?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        block_on(self.client.query(&stmt, &refs)).map_err(|e| err(e, sql))
    }

    pub(crate) fn batch(&self, sql: &str) -> Result<()> {
        let t = sql.trim_start();
        let word = t.split_whitespace().next().unwrap_or("").to_ascii_uppercase();
        block_on(self.client.batch_execute(sql)).map_err(|e| err(e, sql))?;
        match word.as_str() {
            "BEGIN" => self.in_tx.set(true),
            "COMMIT" | "END" => self.in_tx.set(false),
            // `ROLLBACK TO <savepoint>` keeps the transaction open.
            "ROLLBACK" if !t.to_ascii_uppercase().starts_with("ROLLBACK TO") => {
                self.in_tx.set(false)
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn in_transaction(&self) -> bool {
        self.in_tx.get()
    }
}

fn source_of(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default()
}

fn err(e: tokio_postgres::Error, sql: &str) -> StoreError {
    let detail = match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => e.to_string(),
    };
    StoreError::Postgres { message: detail, statement: Some(super::first_line(sql).into_owned()) }
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

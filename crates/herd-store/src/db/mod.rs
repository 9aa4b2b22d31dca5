//! One connection to either database herd stores in — SQLite (embedded, one machine) or
//! PostgreSQL (shared by several machines) — with statements written once, `?N` placeholders.

use std::borrow::Cow;

use crate::{Result, StoreError};

pub(crate) mod pg;
mod value;

pub(crate) use value::{Row, V};

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
    pub(crate) fn tx<T>(&self, f: impl FnOnce(&Db) -> Result<T>) -> Result<T> {
        let out = self.begin().and_then(|()| f(self));
        let out = out.and_then(|v| self.fixed("COMMIT").map(|()| v));
        if out.is_err() && self.in_transaction() {
            let _ = self.fixed("ROLLBACK");
        }
        out
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

fn first_line(sql: &str) -> Cow<'_, str> {
    let t = sql.trim();
    match t.find('\n') {
        Some(i) => Cow::Owned(format!("{}…", &t[..i])),
        None => Cow::Borrowed(t),
    }
}

/// Parameters for [`Db`] statements: `vals![a, b]` is `&[V::from(a), V::from(b)]`.
macro_rules! vals {
    () => { &[] as &[$crate::db::V<'_>] };
    ($($v:expr),+ $(,)?) => { &[$($crate::db::V::from($v)),+] as &[$crate::db::V<'_>] };
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
}

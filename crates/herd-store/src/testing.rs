//! Test support inside the crate: a store on either backend (SQLite in a temp dir, or a fresh
//! PostgreSQL database from herd-testkit), and a macro running a test on both.

use crate::{Backend, StatePaths, Store};

/// A state dir, and the database a test's store uses.
pub(crate) struct Fx {
    pub dir: tempfile::TempDir,
    pub paths: StatePaths,
    _pg: Option<herd_testkit::PgDb>,
}

impl Fx {
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let paths = StatePaths::new(dir.path().join(".herd"));
        Self { dir, paths, _pg: None }
    }

    pub fn postgres() -> Self {
        let pg = herd_testkit::pg_db();
        let dir = tempfile::tempdir().unwrap();
        let paths =
            StatePaths::new(dir.path().join(".herd")).with_store(Backend::Postgres(pg.url.clone()));
        Self { dir, paths, _pg: Some(pg) }
    }

    pub fn store(&self) -> Store {
        Store::open(self.paths.clone()).unwrap()
    }
}

/// `both_backends!(a, b)`: tests `sqlite::a`, `postgres::a`, … each calling `a(Fx)`.
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name($crate::testing::Fx::sqlite()) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name($crate::testing::Fx::postgres()) } )*
        }
    };
}
pub(crate) use both_backends;

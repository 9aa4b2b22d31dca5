//! PostgreSQL for tests: `HERD_TEST_PG_URL` if set, else a throw-away cluster (initdb in a temp
//! dir, Unix socket only) shared by the test processes running now, torn down after the last.
//!
//! Each test gets a fresh database ([`PgDb`], dropped with it). The cluster is started by the
//! first test process that needs one, together with a small supervisor shell that waits for an
//! exclusive `flock` on `users.lock` — every test process holds a shared one while it lives —
//! then stops the server and removes the directory. So nothing is left behind, and a suite of
//! many test processes (nextest runs one per test) pays for `initdb` once.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where Debian keeps PostgreSQL's server programs, one directory per major version.
const PG_LIB: &str = "/usr/lib/postgresql";

/// The newest installed PostgreSQL's `bin/` (`HERD_TEST_PG_BIN` overrides).
fn pg_bin() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("HERD_TEST_PG_BIN") {
        return Some(PathBuf::from(b));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(PG_LIB)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b)
}

/// A database of its own for one test; dropped (connections and all) when this is.
#[derive(Debug)]
pub struct PgDb {
    /// The database's URL, as given to `--store`.
    pub url: String,
    name: String,
    admin: String,
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let (admin, sql) =
            (self.admin.clone(), format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        off_runtime(move || {
            if let Ok(mut c) = postgres::Client::connect(&admin, postgres::NoTls) {
                let _ = c.batch_execute(&sql);
            }
        });
    }
}

impl PgDb {
    /// The rows `sql` returns, each column as text (`None` for NULL): for tests that look at
    /// what herd wrote (lease holders, fences) beyond what the store's API shows.
    pub fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        self.try_rows(sql).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::rows`], or what the server said (a table herd has not created yet, say).
    pub fn try_rows(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let (url, sql) = (self.url.clone(), sql.to_owned());
        off_runtime(move || {
            let mut c = postgres::Client::connect(&url, postgres::NoTls)
                .map_err(|e| format!("test PostgreSQL at {url}: {e}"))?;
            let msgs = c.simple_query(&sql).map_err(|e| {
                let why = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_owned());
                format!("{sql}: {why}")
            })?;
            Ok(msgs
                .into_iter()
                .filter_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                    }
                    _ => None,
                })
                .collect())
        })
    }
}

impl PgDb {
    /// An outage of this database alone: while `up` is false nobody can connect to it, and
    /// every connection it had is closed; `true` lets connections in again.
    pub fn set_up(&self, up: bool) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        off_runtime(move || {
            let mut c = postgres::Client::connect(&admin, postgres::NoTls).expect("admin");
            c.batch_execute(&format!("ALTER DATABASE {name} WITH ALLOW_CONNECTIONS {up}"))
                .expect("ALTER DATABASE");
            if !up {
                c.batch_execute(&format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
                ))
                .expect("terminate");
            }
        })
    }
}

/// Run `f` on a thread of its own: the synchronous client starts a runtime, which panics on
/// a thread that already runs one (an async test's).
fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// A fresh, empty database. Panics (the test fails) with what to do when PostgreSQL is neither
/// reachable at `HERD_TEST_PG_URL` nor installed here.
pub fn pg_db() -> PgDb {
    static N: AtomicU32 = AtomicU32::new(0);
    let admin = admin_url();
    let name = format!(
        "herd_t{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    let (a, n) = (admin.clone(), name.clone());
    off_runtime(move || {
        let mut c = postgres::Client::connect(&a, postgres::NoTls)
            .unwrap_or_else(|e| panic!("test PostgreSQL at {a}: {e}"));
        c.batch_execute(&format!("CREATE DATABASE {n}"))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {n}: {e}"));
    });
    PgDb { url: with_dbname(&admin, &name), name, admin }
}

/// The URL of a database to create others from: `HERD_TEST_PG_URL`, or the shared cluster's.
fn admin_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("HERD_TEST_PG_URL") {
        Ok(u) if !u.trim().is_empty() => u,
        _ => off_runtime(cluster).unwrap_or_else(|e| {
            panic!(
                "no PostgreSQL for tests: {e}. Set HERD_TEST_PG_URL to a server where this user \
                 may CREATE DATABASE, or install Debian's postgresql (`.ci/test` does)"
            )
        }),
    })
    .clone()
}

/// `url` naming database `db` instead of its own.
fn with_dbname(url: &str, db: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return format!("{url} dbname={db}");
    };
    let (before_q, query) = match rest.split_once('?') {
        Some((a, q)) => (a, Some(q)),
        None => (rest, None),
    };
    let authority = before_q.split('/').next().unwrap_or("");
    match query {
        Some(q) => format!("{scheme}://{authority}/{db}?{q}"),
        None => format!("{scheme}://{authority}/{db}"),
    }
}

/// Start (or join) the shared throw-away cluster; returns its admin URL.
fn cluster() -> Result<String, String> {
    let bin = pg_bin().ok_or_else(|| format!("no {PG_LIB}/*/bin/initdb"))?;
    let bin = bin.as_path();
    let uid = nix_uid();
    let root = std::env::temp_dir().join(format!("herd-pg-{uid}"));
    let setup_path = std::env::temp_dir().join(format!("herd-pg-{uid}.setup.lock"));
    let url = format!("postgresql:///postgres?host={}&user=postgres", root.join("sock").display());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if Instant::now() > deadline {
            return Err("could not join or start the test cluster in 120 s".into());
        }
        let setup =
            File::create(&setup_path).map_err(|e| format!("{}: {e}", setup_path.display()))?;
        setup.lock().map_err(|e| format!("lock {}: {e}", setup_path.display()))?;
        if root.join("ready").exists() && reachable(&url) {
            // Join: hold `users.lock` shared while this process lives.
            let users = root.join("users.lock");
            let Ok(f) = File::open(&users) else { continue };
            f.lock_shared().map_err(|e| format!("lock {}: {e}", users.display()))?;
            // Torn down while we waited for the lock: the file we hold is gone, start again.
            let same = std::fs::metadata(&users)
                .ok()
                .zip(f.metadata().ok())
                .is_some_and(|(a, b)| a.ino() == b.ino() && a.dev() == b.dev());
            if !same || !reachable(&url) {
                continue;
            }
            hold(f);
            return Ok(url);
        }
        start(&root, bin, uid)?;
        let users = root.join("users.lock");
        let f = File::open(&users).map_err(|e| format!("{}: {e}", users.display()))?;
        f.lock_shared().map_err(|e| format!("lock {}: {e}", users.display()))?;
        hold(f);
        supervise(&root, bin, &setup_path, uid)?;
        let t = Instant::now();
        while !reachable(&url) {
            if t.elapsed() > Duration::from_secs(30) {
                let log = std::fs::read_to_string(root.join("log")).unwrap_or_default();
                return Err(format!("the test cluster did not start in 30 s: {log}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::write(root.join("ready"), b"").map_err(|e| format!("ready: {e}"))?;
        drop(setup);
        return Ok(url);
    }
}

fn hold(f: File) {
    static HELD: OnceLock<File> = OnceLock::new();
    let _ = HELD.set(f);
}

fn reachable(url: &str) -> bool {
    postgres::Client::connect(url, postgres::NoTls).is_ok()
}

fn nix_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0)
}

/// As the `postgres` user when we are root (the server refuses to run as root).
fn as_pg(uid: u32, program: &Path) -> Command {
    if uid == 0 {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// A new cluster directory: whatever a dead run left there first stopped and removed.
fn start(root: &Path, bin: &Path, uid: u32) -> Result<(), String> {
    let data = root.join("data");
    if root.exists() {
        let _ = as_pg(uid, &bin.join("pg_ctl"))
            .args(["-D"])
            .arg(&data)
            .args(["stop", "-m", "immediate"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        std::fs::remove_dir_all(root).map_err(|e| format!("remove {}: {e}", root.display()))?;
    }
    std::fs::create_dir_all(root.join("sock")).map_err(|e| format!("{}: {e}", root.display()))?;
    std::fs::write(root.join("users.lock"), b"").map_err(|e| format!("users.lock: {e}"))?;
    if uid == 0 {
        let ok = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(root)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(format!("chown postgres {}", root.display()));
        }
    }
    let out = as_pg(uid, &bin.join("initdb"))
        .args(["-D"])
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "--no-locale", "-E", "UTF8", "-N"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!("initdb: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// Start the server and its supervisor (detached): once no test process holds `users.lock`,
/// it stops the server and removes `root` — holding the `setup` lock meanwhile (and checking
/// again under it that nobody joined), so a test process starting the next cluster in `root`
/// waits for the teardown instead of having its new cluster removed by it.
fn supervise(root: &Path, bin: &Path, setup: &Path, uid: u32) -> Result<(), String> {
    let script = r#"
R="$1"; B="$2"; S="$3"
"$B/pg_ctl" -D "$R/data" -l "$R/log" -w -t 60 -o "-k $R/sock -c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c shared_buffers=32MB" start >/dev/null 2>&1
while :; do
  flock -x "$R/users.lock" true
  flock -x "$S" sh -c "flock -n -x '$R/users.lock' true || exit 1; rm -f '$R/ready'; '$B/pg_ctl' -D '$R/data' stop -m fast >/dev/null 2>&1; rm -rf '$R'" && break
done
"#;
    let mut c = as_pg(uid, Path::new("/bin/sh"));
    c.args(["-c", script, "herd-pg-supervisor"])
        .arg(root)
        .arg(bin)
        .arg(setup)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    c.spawn().map_err(|e| format!("start the test cluster: {e}"))?;
    Ok(())
}

/// Where the shared cluster lives (for a test that wants to look at its log).
pub fn cluster_dir() -> PathBuf {
    std::env::temp_dir().join(format!("herd-pg-{}", nix_uid()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_names_replace_the_urls_own() {
        assert_eq!(with_dbname("postgres://u:p@h:5/db?x=1", "t"), "postgres://u:p@h:5/t?x=1");
        assert_eq!(with_dbname("postgresql:///postgres?host=/s", "t"), "postgresql:///t?host=/s");
        assert_eq!(with_dbname("postgres://h", "t"), "postgres://h/t");
    }
}

//! `herd worker` processes for tests of plans served by several machines: each with a state
//! directory of its own (as on its own machine), on one PostgreSQL store.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use herd_testkit::PgDb;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use super::World;

/// A `herd worker` process as on a machine of its own.
pub struct Worker {
    pub child: Child,
    /// Its id in the store: `<host>-<pid>`.
    pub id: String,
    pub state: PathBuf,
    pub log: PathBuf,
}

impl Worker {
    pub fn start(w: &World, pg: &PgDb, dir: &Path, n: usize, extra: &[&str]) -> Worker {
        let state = dir.join(format!("machine{n}"));
        let log = dir.join(format!("worker{n}.log"));
        let mut args = vec!["worker", "--lease", "2s"];
        args.extend_from_slice(extra);
        let child = w
            .herd(&args)
            .env("HERD_STATE_DIR", &state)
            .env("HERD_STORE_URL", &pg.url)
            .stdout(Stdio::piped())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let id = format!("{}-{}", host(), child.id());
        Worker { child, id, state, log }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// SIGTERM (drain), then its summary line.
    pub fn drain(mut self) -> Value {
        kill(self.pid(), Signal::SIGTERM).unwrap();
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "worker {} did not drain", self.id);
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(status.success(), "worker {}: {status:?}\n{log}", self.id);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("worker summary ({e}): {out:?}"))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_owned()
}

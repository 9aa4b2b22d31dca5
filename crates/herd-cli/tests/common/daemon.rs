//! A real `herd serve` for a test world: started on the world's state directory, reached over
//! its socket with herd-server's tonic client, stopped with SIGTERM (its exit code returned).

use std::process::{Child, Stdio};
use std::time::Duration;

use herd_server::Client;
use herd_server::pb;

use super::{World, wait_until};

pub struct Daemon {
    pub child: Option<Child>,
    pub socket: std::path::PathBuf,
}

impl Daemon {
    /// Start `herd serve ARGS` in `w` and wait for its socket.
    pub fn start(w: &World, args: &[&str]) -> Self {
        let mut all = vec!["serve"];
        all.extend_from_slice(args);
        let child = w.herd(&all).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let socket = w.state.join("herd.sock");
        // A connection, not the file: a dead daemon's socket file may still be there.
        let up = wait_until(Duration::from_secs(20), || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        let mut d = Self { child: Some(child), socket };
        if !up {
            let (code, err) = d.stop();
            panic!("herd serve did not start ({code:?}): {err}");
        }
        d
    }

    /// The dashboard's URL with its token, once `--web` has written it.
    pub fn web_url(&self, w: &World) -> String {
        let mut url = None;
        let up = wait_until(Duration::from_secs(20), || {
            url = herd_server::web::read_url(&w.state);
            url.is_some()
        });
        assert!(up, "herd serve --web wrote no web.url");
        url.unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    pub async fn client(&self) -> Client {
        herd_server::client::connect_unix(&self.socket).await.unwrap()
    }

    /// SIGTERM, then wait: its exit code and stderr.
    pub fn stop(&mut self) -> (Option<i32>, String) {
        let Some(child) = self.child.take() else { return (None, String::new()) };
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let out = child.wait_with_output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// SIGKILL, as a crash: nothing of the daemon's runs down.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A claude task request with the defaults these tests use.
pub fn claude_task(prompt: &str) -> pb::SpawnSubagentRequest {
    pb::SpawnSubagentRequest {
        prompt: prompt.into(),
        cli: "claude".into(),
        permission_timeout_seconds: 120,
        timeout_seconds: 300,
        ..Default::default()
    }
}

/// Every event of a run from `from` on, to the end of its stream.
pub async fn watch_all(c: &mut Client, id: &str, from: u64) -> Vec<pb::AgentEvent> {
    let req =
        pb::WatchSubagentRequest { subagent_id: id.into(), from_sequence: from, with_json: false };
    let mut s = c.watch_subagent(req).await.unwrap().into_inner();
    let mut out = Vec::new();
    while let Some(e) = s.message().await.unwrap() {
        out.push(e);
    }
    out
}

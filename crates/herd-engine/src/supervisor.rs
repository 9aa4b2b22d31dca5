//! Starting an agent under its guard and talking to the guard: stdin bytes, signals, kill.
//! Owns the child's environment allowlist, so nothing from herd's environment leaks by accident.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;

use herd_backends::Invocation;
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{ChildStderr, ChildStdout};

use crate::guard::{GuardMsg, frame, tag};

/// How to start a guard: the herd binary and the arguments that select guard mode.
#[derive(Debug, Clone)]
pub struct GuardCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl GuardCommand {
    /// The running executable in guard mode (`<herd> __guard`).
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(Self { program: std::env::current_exe()?, args: vec![crate::guard::GUARD_ARG.into()] })
    }
}

/// Variables every child may see, whatever its backend.
const BASE_ALLOWLIST: &[&str] = &["PATH", "HOME", "LANG", "TERM", "TMPDIR", "USER"];

/// The child's environment: the allowlist and the backend's prefixes taken from `parent`,
/// then `explicit` (`--env K=V`) on top. Nothing else from `parent` gets through.
pub fn child_env(
    parent: impl IntoIterator<Item = (String, String)>,
    prefixes: &[&str],
    explicit: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = parent
        .into_iter()
        .filter(|(k, _)| {
            BASE_ALLOWLIST.contains(&k.as_str())
                || k.starts_with("LC_")
                || prefixes.iter().any(|p| k.starts_with(p))
        })
        .collect();
    for (k, v) in explicit {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    env.sort();
    env
}

/// Why a child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot start the process guard {program}: {source}")]
    Guard { program: String, source: std::io::Error },
    #[error("{0}")]
    Agent(String),
    #[error("the process guard exited before starting the agent")]
    GuardDied,
}

/// A running agent, seen through its guard.
#[derive(Debug)]
pub struct Child {
    pub pid: u32,
    pub start_time: Option<u64>,
    io: Option<(ChildStdout, ChildStderr)>,
    ctl: OwnedWriteHalf,
    msgs: Lines<BufReader<OwnedReadHalf>>,
    guard: tokio::process::Child,
    stdin_open: bool,
}

impl Child {
    /// Start `inv` in `cwd` with exactly `env`, under a guard.
    pub async fn spawn(
        guard: &GuardCommand,
        inv: &Invocation,
        cwd: &std::path::Path,
        env: &[(String, String)],
    ) -> Result<Child, SpawnError> {
        let gerr =
            |source| SpawnError::Guard { program: guard.program.display().to_string(), source };
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(gerr)?;
        ours.set_nonblocking(true).map_err(gerr)?;
        let mut cmd = tokio::process::Command::new(&guard.program);
        cmd.args(&guard.args)
            .arg("--")
            .arg(&inv.program)
            .args(&inv.args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(cwd)
            // Its own group: a Ctrl-C at herd's terminal is herd's to handle, not the child's.
            .process_group(0)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut g = cmd.spawn().map_err(gerr)?;
        let (Some(stdout), Some(stderr)) = (g.stdout.take(), g.stderr.take()) else {
            return Err(SpawnError::GuardDied);
        };
        let (r, w) = UnixStream::from_std(ours).map_err(gerr)?.into_split();
        let mut msgs = BufReader::new(r).lines();
        let first = msgs.next_line().await.ok().flatten();
        match first.and_then(|l| serde_json::from_str::<GuardMsg>(&l).ok()) {
            Some(GuardMsg::Started { pid, start_time }) => Ok(Child {
                pid,
                start_time,
                io: Some((stdout, stderr)),
                ctl: w,
                msgs,
                guard: g,
                stdin_open: true,
            }),
            Some(GuardMsg::SpawnError { message }) => {
                let _ = g.wait().await;
                Err(SpawnError::Agent(message))
            }
            _ => {
                let _ = g.wait().await;
                Err(SpawnError::GuardDied)
            }
        }
    }

    /// The agent's stdout and stderr (once).
    pub fn take_io(&mut self) -> Option<(ChildStdout, ChildStderr)> {
        self.io.take()
    }

    /// Write bytes to the agent's stdin (ignored once stdin is closed).
    pub async fn write_stdin(&mut self, bytes: &[u8]) {
        if self.stdin_open {
            let _ = self.ctl.write_all(&frame(tag::DATA, bytes)).await;
        }
    }

    /// Close the agent's stdin (EOF).
    pub async fn close_stdin(&mut self) {
        if std::mem::take(&mut self.stdin_open) {
            let _ = self.ctl.write_all(&frame(tag::CLOSE_STDIN, &[])).await;
        }
    }

    pub fn stdin_open(&self) -> bool {
        self.stdin_open
    }

    /// Signal the agent's process group.
    pub async fn signal(&mut self, sig: Signal) {
        let _ = self.ctl.write_all(&frame(tag::SIGNAL, &(sig as i32).to_be_bytes())).await;
    }

    /// SIGKILL the agent's group and every descendant.
    pub async fn kill(&mut self) {
        let _ = self.ctl.write_all(&frame(tag::KILL, &[])).await;
    }

    /// The next message from the guard; `None` once the guard is gone. Cancel-safe.
    pub async fn next_msg(&mut self) -> Option<GuardMsg> {
        loop {
            match self.msgs.next_line().await {
                Ok(Some(line)) => {
                    if let Ok(m) = serde_json::from_str(&line) {
                        return Some(m);
                    }
                }
                _ => return None,
            }
        }
    }

    /// Wait for the guard process itself to exit.
    pub async fn wait_guard(&mut self) {
        let _ = self.guard.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_is_an_allowlist() {
        let parent = [
            ("PATH", "/bin"),
            ("HOME", "/h"),
            ("LC_ALL", "C"),
            ("AWS_SECRET_ACCESS_KEY", "nope"),
            ("ANTHROPIC_API_KEY", "sk"),
            ("OPENAI_API_KEY", "nope"),
            ("CLAUDE_CODE_MAX_RETRIES", "1"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env =
            child_env(parent, &["ANTHROPIC_", "CLAUDE_CODE_"], &[("HOME".into(), "/x".into())]);
        let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["ANTHROPIC_API_KEY", "CLAUDE_CODE_MAX_RETRIES", "HOME", "LC_ALL", "PATH"]
        );
        assert!(env.contains(&("HOME".into(), "/x".into())));
    }
}

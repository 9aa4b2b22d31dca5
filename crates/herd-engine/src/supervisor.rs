//! herd's side of the guard: one guard process per engine (started on first use), agents
//! started through it with herd holding their pipes, signals and kills sent to it per run.
//! Owns the child's environment allowlist, so nothing from herd's environment leaks by accident.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use herd_backends::Invocation;
use nix::sys::signal::Signal;
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
use rustix::pipe::{PipeFlags, pipe_with};
use tokio::io::Interest;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

use crate::guard::{GuardMsg, MAX_PAYLOAD, Report, SpawnRequest, frame, tag};

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
    #[error("the process guard is gone (it exited before starting the agent)")]
    GuardDied,
}

/// One request to the guard, with the descriptors it hands over.
#[derive(Debug)]
struct Cmd {
    frame: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// Where the guard's reports go: one channel per run, while the guard is there.
#[derive(Debug, Default)]
struct Routes {
    open: bool,
    runs: HashMap<u64, mpsc::UnboundedSender<GuardMsg>>,
}

/// The guard of one engine: its process, a task writing requests, a task routing reports.
/// Dropped (with the engine and every [`Child`]), it closes the socket and the guard kills
/// whatever is left.
#[derive(Debug)]
pub(crate) struct Keeper {
    tx: mpsc::UnboundedSender<Cmd>,
    routes: Arc<Mutex<Routes>>,
    next_run: AtomicU64,
    process: tokio::process::Child,
}

fn lock(routes: &Mutex<Routes>) -> std::sync::MutexGuard<'_, Routes> {
    routes.lock().unwrap_or_else(|p| p.into_inner())
}

impl Keeper {
    /// Start the guard process and the two tasks that talk to it.
    pub(crate) fn start(guard: &GuardCommand) -> Result<Arc<Keeper>, SpawnError> {
        let gerr =
            |source| SpawnError::Guard { program: guard.program.display().to_string(), source };
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(gerr)?;
        ours.set_nonblocking(true).map_err(gerr)?;
        let process = tokio::process::Command::new(&guard.program)
            .args(&guard.args)
            .env_clear()
            // Nothing of the guard's own pins a directory; agents get theirs per request.
            .current_dir("/")
            // Its own group: a Ctrl-C at herd's terminal is herd's to handle.
            .process_group(0)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(gerr)?;
        let (r, w) = tokio::net::UnixStream::from_std(ours).map_err(gerr)?.into_split();
        let routes = Arc::new(Mutex::new(Routes { open: true, ..Routes::default() }));
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(w, rx));
        tokio::spawn(read_loop(r, routes.clone()));
        Ok(Arc::new(Keeper { tx, routes, next_run: AtomicU64::new(1), process }))
    }

    /// False once the guard's reports have ended (it died): start another.
    pub(crate) fn is_alive(&self) -> bool {
        lock(&self.routes).open && !self.tx.is_closed()
    }

    /// Close the socket and wait (a bounded time) for the guard to kill what is left and exit,
    /// so it is reaped, not left to init.
    pub(crate) async fn stop(self) {
        let Keeper { tx, mut process, .. } = self;
        drop(tx);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), process.wait()).await;
    }

    fn send(&self, tag: u8, run: u64, payload: &[u8]) {
        let _ = self.tx.send(Cmd { frame: frame(tag, run, payload), fds: Vec::new() });
    }
}

/// Requests go out in order; a spawn's descriptors ride on its frame's first byte.
async fn write_loop(mut w: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    while let Some(cmd) = rx.recv().await {
        let Ok(sent) = send_fds(w.as_ref(), &cmd).await else { break };
        let Cmd { mut frame, fds } = cmd;
        // Our copies of the agent's pipe ends close here: the agent holds its own.
        drop(fds);
        let written = w.write_all(&frame[sent..]).await;
        // A spawn frame holds the agent's environment (granted secrets too).
        zeroize::Zeroize::zeroize(&mut frame);
        if written.is_err() {
            break;
        }
    }
    // Dropping the write half shuts it down: the guard sees the end and kills what is left.
}

/// Send the start of `cmd.frame` with its descriptors; returns how many bytes went.
async fn send_fds(sock: &tokio::net::UnixStream, cmd: &Cmd) -> std::io::Result<usize> {
    if cmd.fds.is_empty() {
        return Ok(0);
    }
    let fds: Vec<BorrowedFd<'_>> = cmd.fds.iter().map(|f| f.as_fd()).collect();
    loop {
        sock.writable().await?;
        let res = sock.try_io(Interest::WRITABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
            let mut anc = SendAncillaryBuffer::new(&mut space);
            if !anc.push(SendAncillaryMessage::ScmRights(&fds)) {
                return Err(std::io::Error::other("too many descriptors for one frame"));
            }
            sendmsg(sock, &[IoSlice::new(&cmd.frame)], &mut anc, SendFlags::NOSIGNAL)
                .map_err(std::io::Error::from)
        });
        match res {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

/// Route each report to its run; at the end, every waiting run learns the guard is gone.
async fn read_loop(r: OwnedReadHalf, routes: Arc<Mutex<Routes>>) {
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(Report { run, msg }) = serde_json::from_str::<Report>(&line)
            && let Some(tx) = lock(&routes).runs.get(&run)
        {
            let _ = tx.send(msg);
        }
    }
    let mut routes = lock(&routes);
    routes.open = false;
    routes.runs.clear();
}

/// A running agent: its pipes are herd's; signals and kills go through the guard.
#[derive(Debug)]
pub struct Child {
    pub pid: u32,
    pub start_time: Option<u64>,
    io: Option<(pipe::Receiver, pipe::Receiver)>,
    stdin: Stdin,
    run: u64,
    keeper: Arc<Keeper>,
    msgs: mpsc::UnboundedReceiver<GuardMsg>,
    exited: bool,
}

impl Child {
    /// Start `inv` in `cwd` with exactly `env` (plus `marker` as the run marker), under the guard.
    /// `sandboxed`: `inv` is bwrap running herd's sandbox init (see [`crate::sandbox`]).
    pub(crate) async fn spawn(
        keeper: &Arc<Keeper>,
        marker: &str,
        inv: &Invocation,
        cwd: &Path,
        env: &[(String, String)],
        sandboxed: bool,
    ) -> Result<Child, SpawnError> {
        let perr = |e: std::io::Error| SpawnError::Agent(format!("cannot create pipes: {e}"));
        let pair = || pipe_with(PipeFlags::CLOEXEC).map_err(|e| perr(e.into()));
        let ((in_r, in_w), (out_r, out_w), (err_r, err_w)) = (pair()?, pair()?, pair()?);
        // Herd's ends only (the agent's stay blocking), each with one call: tokio's checked
        // conversion spends three (stat, get and set flags) per end, on every run.
        let ours = |fd: OwnedFd| {
            rustix::io::ioctl_fionbio(&fd, true).map(|()| fd).map_err(|e| perr(e.into()))
        };
        let stdout = pipe::Receiver::from_owned_fd_unchecked(ours(out_r)?).map_err(perr)?;
        let stderr = pipe::Receiver::from_owned_fd_unchecked(ours(err_r)?).map_err(perr)?;
        let stdin = pipe::Sender::from_owned_fd_unchecked(ours(in_w)?).map_err(perr)?;
        let mut req = SpawnRequest {
            marker: marker.as_bytes().to_vec(),
            program: inv.program.as_os_str().as_bytes().to_vec(),
            cwd: cwd.as_os_str().as_bytes().to_vec(),
            args: inv.args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: env.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect(),
            sandboxed,
        };
        // The request carries the environment (granted secrets too): every copy is wiped.
        let mut payload = req.encode();
        req.wipe();
        if payload.len() > MAX_PAYLOAD {
            let size = payload.len();
            zeroize::Zeroize::zeroize(&mut payload);
            return Err(SpawnError::Agent(format!(
                "the command line and environment take {size} bytes; at most {MAX_PAYLOAD} can be passed"
            )));
        }
        let run = keeper.next_run.fetch_add(1, Ordering::Relaxed);
        let (tx, mut msgs) = mpsc::unbounded_channel();
        {
            let mut routes = lock(&keeper.routes);
            if !routes.open {
                return Err(SpawnError::GuardDied);
            }
            routes.runs.insert(run, tx);
        }
        let cmd = Cmd { frame: frame(tag::SPAWN, run, &payload), fds: vec![in_r, out_w, err_w] };
        zeroize::Zeroize::zeroize(&mut payload);
        let sent = keeper.tx.send(cmd).is_ok();
        // Until the agent is ours (a Child), a cancelled spawn must not leave it running: the
        // kill is queued after the spawn request, so the guard sees them in that order.
        let mut unclaimed = Unclaimed { keeper: keeper.as_ref(), run, armed: sent };
        let first = if sent { msgs.recv().await } else { None };
        unclaimed.armed = false;
        let forget = || lock(&keeper.routes).runs.remove(&run);
        match first {
            Some(GuardMsg::Started { pid, start_time }) => Ok(Child {
                pid,
                start_time,
                io: Some((stdout, stderr)),
                stdin: Stdin::Direct(stdin),
                run,
                keeper: keeper.clone(),
                msgs,
                exited: false,
            }),
            Some(GuardMsg::SpawnError { message }) => {
                forget();
                Err(SpawnError::Agent(message))
            }
            _ => {
                forget();
                Err(SpawnError::GuardDied)
            }
        }
    }

    /// The agent's stdout and stderr (once).
    pub fn take_io(&mut self) -> Option<(pipe::Receiver, pipe::Receiver)> {
        self.io.take()
    }

    /// Write bytes to the agent's stdin without waiting: straight into the pipe while it takes
    /// them, else queued for a task of their own (a full pipe never stalls the caller). Ignored
    /// once stdin is closed; a broken pipe (the agent is gone) closes it.
    pub fn write_stdin(&mut self, bytes: &[u8]) {
        self.stdin = match std::mem::replace(&mut self.stdin, Stdin::Closed) {
            Stdin::Direct(pipe) => {
                let mut off = 0;
                loop {
                    if off == bytes.len() {
                        break Stdin::Direct(pipe);
                    }
                    match pipe.try_write(&bytes[off..]) {
                        Ok(n) => off += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            let (tx, rx) = mpsc::unbounded_channel();
                            let _ = tx.send(bytes[off..].to_vec());
                            tokio::spawn(stdin_loop(pipe, rx));
                            break Stdin::Queued(tx);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break Stdin::Closed,
                    }
                }
            }
            Stdin::Queued(tx) => {
                let _ = tx.send(bytes.to_vec());
                Stdin::Queued(tx)
            }
            Stdin::Closed => Stdin::Closed,
        };
    }

    /// Close the agent's stdin (EOF), after what was queued.
    pub fn close_stdin(&mut self) {
        self.stdin = Stdin::Closed;
    }

    pub fn stdin_open(&self) -> bool {
        !matches!(self.stdin, Stdin::Closed)
    }

    /// Signal the agent's process group.
    pub fn signal(&mut self, sig: Signal) {
        self.keeper.send(tag::SIGNAL, self.run, &(sig as i32).to_be_bytes());
    }

    /// SIGKILL the agent's group and every process of its run.
    pub fn kill(&mut self) {
        self.keeper.send(tag::KILL, self.run, &[]);
    }

    /// The next report about this agent; `None` once the guard is gone. Cancel-safe.
    pub async fn next_msg(&mut self) -> Option<GuardMsg> {
        let m = self.msgs.recv().await;
        if matches!(m, Some(GuardMsg::Exited { .. })) {
            self.exited = true;
        }
        m
    }

    /// Wait until the agent has exited (or the guard is gone).
    pub async fn wait_exit(&mut self) {
        while !self.exited && self.next_msg().await.is_some() {}
    }
}

impl Drop for Child {
    /// A run dropped before its agent exited (its task was aborted) takes the agent down.
    fn drop(&mut self) {
        if !self.exited {
            self.kill();
        }
        lock(&self.keeper.routes).runs.remove(&self.run);
    }
}

/// A spawn requested but not yet answered: dropped armed (its task was cancelled), it kills
/// whatever the guard starts for the run.
struct Unclaimed<'k> {
    keeper: &'k Keeper,
    run: u64,
    armed: bool,
}

impl Drop for Unclaimed<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.keeper.send(tag::KILL, self.run, &[]);
            lock(&self.keeper.routes).runs.remove(&self.run);
        }
    }
}

/// The agent's stdin, from herd's side.
#[derive(Debug)]
enum Stdin {
    /// Nothing waiting: writes go straight into the pipe.
    Direct(pipe::Sender),
    /// The pipe was full once: writes go, in order, through a task that waits for room.
    Queued(mpsc::UnboundedSender<Vec<u8>>),
    Closed,
}

async fn stdin_loop(mut stdin: pipe::Sender, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) {
    while let Some(bytes) = rx.recv().await {
        if stdin.write_all(&bytes).await.is_err() {
            return;
        }
    }
    // Every sender gone: the pipe closes here, after all that was queued.
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

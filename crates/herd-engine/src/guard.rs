//! The per-child guard process (`herd __guard -- PROGRAM ARGS…`): a child subreaper between herd
//! and the agent that kills the agent's whole tree when herd goes away, however herd died.
//!
//! Wire protocol on the guard's fd 0, a Unix socket shared with herd:
//! herd → guard: frames `[tag u8][len u32 BE][payload]` — `D` bytes for the agent's stdin,
//! `C` close the agent's stdin, `S` signal the agent's process group (payload: i32 BE),
//! `K` kill the agent's group and every descendant. End of stream = herd is gone: kill all.
//! guard → herd: JSON lines, [`GuardMsg`]. The agent's stdout/stderr are the guard's own.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::procfs;

/// The argument that selects guard mode in the herd binary.
pub const GUARD_ARG: &str = "__guard";

/// Messages from the guard to herd.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardMsg {
    Started { pid: u32, start_time: Option<u64> },
    SpawnError { message: String },
    Exited { code: Option<i32>, signal: Option<i32>, leftovers: u32 },
}

/// Frame tags from herd to the guard.
pub(crate) mod tag {
    pub const DATA: u8 = b'D';
    pub const CLOSE_STDIN: u8 = b'C';
    pub const SIGNAL: u8 = b'S';
    pub const KILL: u8 = b'K';
}

/// Encode one frame.
pub(crate) fn frame(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(5 + payload.len());
    f.push(tag);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

enum Ctl {
    Data(Vec<u8>),
    CloseStdin,
}

/// Run the guard. `args` are what follows `__guard` (`--`, then the program and its arguments).
pub fn guard_main(args: &[std::ffi::OsString]) -> ExitCode {
    let args = match args.first().and_then(|a| a.to_str()) {
        Some("--") => &args[1..],
        _ => args,
    };
    let Some((program, rest)) = args.split_first() else {
        eprintln!("herd __guard: missing program (internal use only)");
        return ExitCode::from(2);
    };
    let ctl = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => UnixStream::from(fd),
        Err(e) => {
            eprintln!("herd __guard: no control socket on stdin: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = match ctl.try_clone() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("herd __guard: {e}");
            return ExitCode::from(2);
        }
    };
    let mut send = move |m: &GuardMsg| {
        if let Ok(mut line) = serde_json::to_vec(m) {
            line.push(b'\n');
            let _ = out.write_all(&line);
        }
    };
    // Orphaned descendants (setsid'd tool commands) are re-parented to us, not to init.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("herd __guard: cannot become a child subreaper: {e}");
    }
    let mut child = match Command::new(program)
        .args(rest)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            send(&GuardMsg::SpawnError {
                message: format!("cannot start {}: {e}", program.to_string_lossy()),
            });
            return ExitCode::from(127);
        }
    };
    let agent = child.id();
    send(&GuardMsg::Started { pid: agent, start_time: procfs::start_time(agent) });

    let (stdin_tx, stdin_rx) = mpsc::channel::<Ctl>();
    if let Some(stdin) = child.stdin.take() {
        std::thread::spawn(move || stdin_writer(stdin, stdin_rx));
    }
    std::thread::spawn(move || control_reader(ctl, agent, stdin_tx));

    let (code, signal) = reap(agent);
    let leftovers = kill_leftovers();
    send(&GuardMsg::Exited { code, signal, leftovers });
    ExitCode::SUCCESS
}

fn stdin_writer(mut stdin: ChildStdin, rx: mpsc::Receiver<Ctl>) {
    while let Ok(msg) = rx.recv() {
        match msg {
            Ctl::Data(d) => {
                if stdin.write_all(&d).and_then(|()| stdin.flush()).is_err() {
                    return;
                }
            }
            Ctl::CloseStdin => return,
        }
    }
}

fn control_reader(ctl: UnixStream, agent: u32, stdin_tx: mpsc::Sender<Ctl>) {
    let mut r = std::io::BufReader::new(ctl);
    loop {
        let mut head = [0u8; 5];
        if r.read_exact(&mut head).is_err() {
            break;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut payload = vec![0u8; len.min(64 << 20)];
        if r.read_exact(&mut payload).is_err() {
            break;
        }
        match head[0] {
            tag::DATA => {
                let _ = stdin_tx.send(Ctl::Data(payload));
            }
            tag::CLOSE_STDIN => {
                let _ = stdin_tx.send(Ctl::CloseStdin);
            }
            tag::SIGNAL => {
                let n =
                    payload.get(..4).map_or(0, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                if let Ok(sig) = Signal::try_from(n) {
                    procfs::signal_group(agent, sig);
                }
            }
            tag::KILL => kill_tree(agent),
            _ => {}
        }
    }
    // herd is gone (or closed the socket): nothing it started may live on.
    kill_tree(agent);
}

/// SIGKILL the agent's group and every descendant of this guard.
fn kill_tree(agent: u32) {
    procfs::signal_group(agent, Signal::SIGKILL);
    for pid in procfs::descendants(std::process::id()) {
        procfs::signal_pid(pid, Signal::SIGKILL);
    }
}

/// Reap children until the agent itself has exited; returns its exit code or signal.
fn reap(agent: u32) -> (Option<i32>, Option<i32>) {
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(WaitStatus::Exited(pid, code)) if pid.as_raw() as u32 == agent => {
                return (Some(code), None);
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid.as_raw() as u32 == agent => {
                return (None, Some(sig as i32));
            }
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return (None, None),
        }
    }
}

/// Kill and reap whatever the agent left behind; returns how many processes that was.
fn kill_leftovers() -> u32 {
    let me = std::process::id();
    let mut killed: HashSet<u32> = HashSet::new();
    reap_exited();
    // No children at all means no descendants: orphans are re-parented to us (subreaper), so
    // every live descendant hangs below one of our children. Then skip the /proc walk.
    if matches!(waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)), Err(Errno::ECHILD)) {
        return 0;
    }
    // Bounded: a process stuck in uninterruptible sleep must not hang the guard forever.
    for _ in 0..1000 {
        reap_exited();
        let left = procfs::descendants(me);
        if left.is_empty() {
            break;
        }
        for pid in left {
            if procfs::signal_pid(pid, Signal::SIGKILL) {
                killed.insert(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    reap_exited();
    killed.len() as u32
}

/// Reap every child that has already exited, without blocking.
fn reap_exited() {
    while let Ok(s) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        if matches!(s, WaitStatus::StillAlive) {
            break;
        }
    }
}

//! The guard process's loop: starts agents on herd's request, reaps them and every re-parented
//! orphan, kills a run's leftovers when its agent exits, and everything when herd goes away.
//!
//! Single-threaded and blocking: `poll` on the control socket and a signalfd for SIGCHLD. A
//! re-parented process belongs to the run named by its [`RUN_MARKER_VAR`]; one whose run is over
//! is killed with its whole tree, one with no marker only once no agent runs (it could be anyone's).

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::io::{IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, recvmsg};
use rustix::pipe::{PipeFlags, pipe_with};

use super::{
    Frame, GuardMsg, ProtocolError, RUN_MARKER_VAR, Report, SpawnRequest, next_frame, tag,
};
use crate::procfs;

/// File descriptors accepted per read of the control socket (herd sends three per spawn).
const MAX_FDS: usize = 48;
/// How many ended agents' pids are remembered for telling whose a leftover is.
const ENDED_KEPT: usize = 1024;
/// After a sweep killed something, sweep again this often (children forked meanwhile are
/// re-parented to us once their parent dies) …
const RESWEEP_EVERY: Duration = Duration::from_millis(10);
/// … at most this many times in a row.
const RESWEEPS: u32 = 50;

struct Agent {
    pid: u32,
    marker: Vec<u8>,
    /// Started in a sandbox: the read end of the pipe its init reports on.
    sandbox: Option<OwnedFd>,
}

struct Guard {
    ctl: UnixStream,
    /// Live agents by run.
    runs: HashMap<u64, Agent>,
    /// Run by live agent pid.
    by_pid: HashMap<u32, u64>,
    /// Agents that ended lately (their pid is the group and maybe session of what they left).
    ended: VecDeque<u32>,
    /// Descriptors received and not yet given to an agent, in arrival order.
    fds: VecDeque<OwnedFd>,
    buf: Vec<u8>,
    /// What one read of the control socket lands in (allocated once, not per read).
    data: Vec<u8>,
    resweep: Option<(Instant, u32)>,
}

/// Run the guard until herd closes the control socket (fd 0), then kill everything.
pub fn guard_main(_args: &[OsString]) -> ExitCode {
    let ctl = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => UnixStream::from(fd),
        Err(e) => {
            eprintln!("herd __guard: no control socket on stdin: {e}");
            return ExitCode::from(2);
        }
    };
    // Orphaned descendants (setsid'd tool commands) are re-parented to us, not to init.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("herd __guard: cannot become a child subreaper: {e}");
    }
    // SIGCHLD arrives through a signalfd. So do the signals that would end the guard: it kills
    // every agent first. std's spawn keeps the parent's signal mask (rust-lang/rust#101077): an
    // unconfined agent starts with these blocked; a sandboxed one gets an empty mask from herd's
    // init (`sandbox::init_main`).
    let mut mask = SigSet::empty();
    for sig in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        mask.add(sig);
    }
    let sfd = mask
        .thread_block()
        .and_then(|()| SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC));
    let sfd = match sfd {
        Ok(s) => s,
        Err(e) => {
            eprintln!("herd __guard: cannot watch SIGCHLD: {e}");
            return ExitCode::from(2);
        }
    };
    let mut g = Guard {
        ctl,
        runs: HashMap::new(),
        by_pid: HashMap::new(),
        ended: VecDeque::new(),
        fds: VecDeque::new(),
        buf: Vec::new(),
        data: vec![0u8; 64 * 1024],
        resweep: None,
    };
    if let Err(e) = g.serve(&sfd) {
        eprintln!("herd __guard: {e}; stopping every agent");
    }
    g.kill_all();
    ExitCode::SUCCESS
}

impl Guard {
    /// The event loop; returns when herd is gone (`Ok`) or the protocol broke (`Err`).
    fn serve(&mut self, sfd: &SignalFd) -> Result<(), String> {
        loop {
            let timeout = match self.resweep {
                Some((at, _)) => {
                    let ms = at.saturating_duration_since(Instant::now()).as_millis();
                    PollTimeout::try_from(ms.min(1000) as i32).unwrap_or(PollTimeout::ZERO)
                }
                None => PollTimeout::NONE,
            };
            let mut pfds = [
                PollFd::new(self.ctl.as_fd(), PollFlags::POLLIN),
                PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut pfds, timeout) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(format!("poll: {e}")),
            }
            let ctl_ready = pfds[0].any().unwrap_or(false);
            let child_ready = pfds[1].any().unwrap_or(false);
            if child_ready {
                let mut told_to_end = false;
                while let Ok(Some(info)) = sfd.read_signal() {
                    told_to_end |= info.ssi_signo != Signal::SIGCHLD as u32;
                }
                if told_to_end {
                    return Err("told to stop by a signal".into());
                }
            }
            // Reap on every wake-up: SIGCHLDs coalesce, and reaping is cheap.
            self.reap();
            if let Some((at, left)) = self.resweep
                && Instant::now() >= at
            {
                self.resweep = None;
                if self.sweep() > 0 && left > 1 {
                    self.resweep = Some((Instant::now() + RESWEEP_EVERY, left - 1));
                }
            }
            if ctl_ready {
                if !self.read_ctl()? {
                    return Ok(());
                }
                while let Some(f) = next_frame(&mut self.buf).map_err(|e| e.to_string())? {
                    self.handle(f);
                }
            }
        }
    }

    /// Read what the control socket has; false at end of stream.
    fn read_ctl(&mut self) -> Result<bool, String> {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        // CMSG_CLOEXEC: a descriptor meant for one agent must never leak into another.
        let flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
        let got = match recvmsg(&self.ctl, &mut [IoSliceMut::new(&mut self.data)], &mut anc, flags)
        {
            Ok(m) => m,
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => return Ok(true),
            Err(e) => return Err(format!("reading the control socket: {e}")),
        };
        for msg in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = msg {
                self.fds.extend(fds);
            }
        }
        if got.flags.contains(ReturnFlags::CTRUNC) {
            return Err("descriptors were dropped by the kernel (control data truncated)".into());
        }
        if got.bytes == 0 {
            return Ok(false);
        }
        self.buf.extend_from_slice(&self.data[..got.bytes]);
        Ok(true)
    }

    fn handle(&mut self, f: Frame) {
        match f.tag {
            tag::SPAWN => {
                // Taken first, whatever happens next, so later requests get their own.
                let fds: Vec<OwnedFd> =
                    (0..3).filter_map(|_| self.fds.pop_front()).collect::<Vec<_>>();
                let mut payload = f.payload;
                let msg = match <[OwnedFd; 3]>::try_from(fds) {
                    Ok(fds) => match SpawnRequest::decode(&payload) {
                        Ok(req) => self.spawn(f.run, req, fds),
                        Err(e) => GuardMsg::SpawnError { message: format!("herd guard: {e}") },
                    },
                    Err(_) => GuardMsg::SpawnError {
                        message: format!("herd guard: {}", ProtocolError::BadSpawn),
                    },
                };
                // The environment may hold granted secrets.
                zeroize::Zeroize::zeroize(&mut payload);
                self.report(f.run, msg);
            }
            tag::SIGNAL => {
                let n = f.payload.first_chunk::<4>().map_or(0, |b| i32::from_be_bytes(*b));
                if let (Some(a), Ok(sig)) = (self.runs.get(&f.run), Signal::try_from(n)) {
                    match &a.sandbox {
                        // bwrap would die of a signal it does not catch (and take the sandbox
                        // with it at once): the agent's session is led by the init, bwrap's
                        // child; as pid 1 of its namespace the init ignores it, the agent not.
                        Some(_) => {
                            if let Some(&init) = procfs::children(a.pid).first() {
                                procfs::signal_group(init, sig);
                            }
                        }
                        None => {
                            procfs::signal_group(a.pid, sig);
                        }
                    }
                }
            }
            tag::KILL => self.kill_run(f.run),
            _ => {}
        }
    }

    fn spawn(
        &mut self,
        run: u64,
        req: SpawnRequest,
        [stdin, stdout, stderr]: [OwnedFd; 3],
    ) -> GuardMsg {
        let os = OsStr::from_bytes;
        // A sandboxed agent's init reports on this pipe; only its write end is inherited (this
        // thread starts one process at a time, so no other child gets it).
        let status = match req.sandboxed {
            true => match status_pipe() {
                Ok(p) => Some(p),
                Err(e) => {
                    return GuardMsg::SpawnError {
                        message: format!("herd guard: status pipe: {e}"),
                    };
                }
            },
            false => None,
        };
        let mut cmd = Command::new(os(&req.program));
        cmd.args(req.args.iter().map(|a| os(a)))
            .env_clear()
            .envs(req.env.iter().map(|(k, v)| (os(k), os(v))))
            .env(RUN_MARKER_VAR, os(&req.marker))
            .current_dir(os(&req.cwd))
            // Its own group, so signals reach the agent and what it starts, not us.
            .process_group(0)
            .stdin(Stdio::from(stdin))
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr));
        if let Some((_, w)) = &status {
            cmd.env(crate::sandbox::STATUS_FD_VAR, w.as_raw_fd().to_string());
        }
        // `cmd` holds our copies of the pipe ends; they are closed when it drops below.
        let spawned = cmd.spawn();
        let status = status.map(|(r, w)| {
            drop(w);
            r
        });
        let mut req = req;
        req.wipe();
        match spawned {
            Ok(child) => {
                let pid = child.id();
                self.runs.insert(run, Agent { pid, marker: req.marker, sandbox: status });
                self.by_pid.insert(pid, run);
                GuardMsg::Started { pid, start_time: procfs::start_time(pid) }
            }
            Err(e) => GuardMsg::SpawnError {
                message: format!("cannot start {}: {e}", os(&req.program).to_string_lossy()),
            },
        }
    }

    fn report(&mut self, run: u64, msg: GuardMsg) {
        if let Ok(mut line) = serde_json::to_vec(&Report { run, msg }) {
            line.push(b'\n');
            // herd gone: the next read of the socket ends the loop.
            let _ = self.ctl.write_all(&line);
        }
    }

    /// Reap every exited child; for each agent among them, sweep its leftovers and report.
    fn reap(&mut self) {
        let mut ended = Vec::new();
        loop {
            let (pid, code, signal) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, Some(code), None),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, None, Some(sig as i32)),
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(_) => break,
            };
            let pid = pid.as_raw() as u32;
            if let Some(run) = self.by_pid.remove(&pid) {
                let agent = self.runs.remove(&run);
                // A sandbox's init said how the agent itself ended, and what it left.
                let told = agent.and_then(|a| a.sandbox).and_then(|r| read_status(&r));
                let (code, signal, left) = match told {
                    Some(t) => (t.code, t.signal, t.leftovers),
                    None => (code, signal, 0),
                };
                ended.push((run, code, signal, left));
                if self.ended.len() >= ENDED_KEPT {
                    self.ended.pop_front();
                }
                self.ended.push_back(pid);
            }
        }
        for (run, code, signal, left) in ended {
            let leftovers = self.sweep() + left;
            if leftovers > 0 {
                self.resweep = Some((Instant::now() + RESWEEP_EVERY, RESWEEPS));
            }
            self.report(run, GuardMsg::Exited { code, signal, leftovers });
        }
    }

    /// Kill the trees of re-parented processes whose run is over (or unknown, once no agent
    /// runs). Returns how many processes that was.
    fn sweep(&mut self) -> u32 {
        let orphans: Vec<u32> =
            own_children().into_iter().filter(|p| !self.by_pid.contains_key(p)).collect();
        if orphans.is_empty() {
            return 0;
        }
        let live: HashSet<&[u8]> = self.runs.values().map(|a| a.marker.as_slice()).collect();
        let roots: Vec<u32> = orphans
            .into_iter()
            .filter(|&p| match procfs::env_var(p, RUN_MARKER_VAR) {
                Some(m) => !live.contains(m.as_slice()),
                // No marker (a cleared or rewritten environment): the process group or session
                // still names the agent that started it, if it was not set up anew.
                None => match self.leader_of(p) {
                    Some(leader) => !self.by_pid.contains_key(&leader),
                    None => self.runs.is_empty(),
                },
            })
            .collect();
        kill_trees(&roots)
    }

    /// The agent (live or lately ended) whose pid is `p`'s process group or session.
    fn leader_of(&self, p: u32) -> Option<u32> {
        let (pgrp, session) = procfs::group_and_session(p)?;
        [pgrp, session]
            .into_iter()
            .find(|id| self.by_pid.contains_key(id) || self.ended.contains(id))
    }

    /// SIGKILL one run: its agent's group and tree, and the processes re-parented from it.
    fn kill_run(&mut self, run: u64) {
        let Some(agent) = self.runs.get(&run) else { return };
        procfs::signal_group(agent.pid, Signal::SIGKILL);
        let mut roots = vec![agent.pid];
        let pid = agent.pid;
        roots.extend(own_children().into_iter().filter(|p| {
            !self.by_pid.contains_key(p)
                && match procfs::env_var(*p, RUN_MARKER_VAR) {
                    Some(m) => m == agent.marker,
                    None => self.leader_of(*p) == Some(pid),
                }
        }));
        kill_trees(&roots);
        self.resweep = Some((Instant::now() + RESWEEP_EVERY, RESWEEPS));
    }

    /// herd is gone: nothing it started may live on. Done only once we have no child left at
    /// all: a dying agent's children come to us only when its last thread has exited.
    fn kill_all(&mut self) {
        for a in self.runs.values() {
            procfs::signal_group(a.pid, Signal::SIGKILL);
        }
        let me = std::process::id();
        // Bounded (~5 s): a process stuck in uninterruptible sleep must not keep us forever.
        for _ in 0..1000 {
            for pid in procfs::descendants(me) {
                procfs::signal_pid(pid, Signal::SIGKILL);
            }
            loop {
                match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => break,
                    Ok(_) | Err(Errno::EINTR) => {}
                    // ECHILD: nothing left below us.
                    Err(_) => return,
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A pipe whose write end a child inherits (close-on-exec cleared) and whose read end stays ours.
fn status_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    rustix::io::fcntl_setfd(&w, rustix::io::FdFlags::empty())?;
    Ok((r, w))
}

/// What a sandbox's init reported (written before it exited, so before bwrap did).
#[derive(Debug, serde::Deserialize)]
struct InitStatus {
    code: Option<i32>,
    signal: Option<i32>,
    leftovers: u32,
}

fn read_status(r: &OwnedFd) -> Option<InitStatus> {
    let mut buf = [0u8; 512];
    let n = rustix::io::read(r, &mut buf).ok()?;
    let line = buf.get(..n)?.split(|&b| b == b'\n').next()?;
    serde_json::from_slice(line).ok()
}

/// The guard's live children: the guard is single-threaded, so its one thread's list is all.
fn own_children() -> Vec<u32> {
    procfs::own_thread_children().unwrap_or_else(|| procfs::children(std::process::id()))
}

/// SIGKILL `roots` and all their descendants; returns how many were signalled.
fn kill_trees(roots: &[u32]) -> u32 {
    if roots.is_empty() {
        return 0;
    }
    let mut targets: Vec<u32> = roots.to_vec();
    targets.extend(procfs::descendants_of(roots));
    let mut killed = 0;
    for pid in targets {
        if procfs::signal_pid(pid, Signal::SIGKILL) {
            killed += 1;
        }
    }
    killed
}

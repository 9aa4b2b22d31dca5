//! pid 1 of an agent's sandbox (`herd __sandbox-init PROGRAM ARGS…`): starts the agent, reaps
//! what is re-parented to it, and when the agent exits kills and counts what it left behind.
//!
//! It reports `{"code", "signal", "leftovers"}` on the descriptor named by [`STATUS_FD_VAR`] (the
//! guard's pipe), so the run's record keeps the agent's own exit (a signal stays a signal) and
//! the leftovers the guard would otherwise have counted: in a pid namespace they die with it.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, ExitCode};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::STATUS_FD_VAR;

/// Run the agent `args[0]` with `args[1..]`; returns its exit code (or 128 + its signal).
pub fn init_main(args: &[OsString]) -> ExitCode {
    // What it does at the end (kill -1) is only safe as pid 1 of a namespace of its own:
    // anywhere else it would reach every process its user may signal.
    if std::process::id() != 1 {
        eprintln!(
            "herd {}: runs only as pid 1 of an agent's sandbox (bwrap --unshare-pid --as-pid-1)",
            super::INIT_ARG
        );
        return ExitCode::from(2);
    }
    let mut status = take_status_fd();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("herd {}: no program to run", super::INIT_ARG);
        return ExitCode::from(2);
    };
    // We arrive with the guard's signal mask (INT, TERM, HUP blocked; std's spawn keeps a
    // parent's mask): the agent must get the stop ladder's signals. As pid 1 of the namespace
    // we ignore them ourselves all the same (no handlers).
    let _ = nix::sys::signal::SigSet::all().thread_unblock();
    let child = Command::new(program).args(rest).env_remove(STATUS_FD_VAR).spawn();
    let agent = match child {
        Ok(c) => Pid::from_raw(c.id() as i32),
        Err(e) => {
            eprintln!("herd: cannot start {}: {e}", program.to_string_lossy());
            report(&mut status, Some(127), None, 0);
            return ExitCode::from(127);
        }
    };
    // Reap everything (orphans are ours) until the agent itself has ended.
    let (code, signal) = loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(WaitStatus::Exited(p, c)) if p == agent => break (Some(c), None),
            Ok(WaitStatus::Signaled(p, s, _)) if p == agent => break (None, Some(s as i32)),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => break (None, Some(Signal::SIGKILL as i32)),
        }
    };
    let leftovers = others_alive();
    if leftovers > 0 {
        // As pid 1 of the namespace, -1 reaches every process in it but us.
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        // Bounded: a process stuck in the kernel must not hold the run forever.
        for _ in 0..2000 {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(1)),
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => break,
            }
        }
    }
    report(&mut status, code, signal, leftovers);
    ExitCode::from(match (code, signal) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        _ => 255,
    })
}

/// The status pipe the guard handed down (by number), re-opened as our own (close-on-exec) and
/// the inherited descriptor closed, so the agent never holds it.
fn take_status_fd() -> Option<std::fs::File> {
    let n: i32 = std::env::var(STATUS_FD_VAR).ok()?.parse().ok()?;
    let file = std::fs::OpenOptions::new().write(true).open(format!("/proc/self/fd/{n}")).ok();
    let _ = nix::unistd::close(n);
    file
}

fn report(status: &mut Option<std::fs::File>, code: Option<i32>, signal: Option<i32>, left: u32) {
    if let Some(f) = status.as_mut() {
        let line = serde_json::json!({"code": code, "signal": signal, "leftovers": left});
        let _ = writeln!(f, "{line}");
    }
}

/// Processes in this namespace other than pid 1 that have not exited (zombies are dead).
fn others_alive() -> u32 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let pid: u32 = std::str::from_utf8(OsStr::as_bytes(&name)).ok()?.parse().ok()?;
            (pid != 1).then_some(pid)
        })
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().chars().next()))
                .flatten()
                .is_some_and(|state| state != 'Z' && state != 'X')
        })
        .count() as u32
}

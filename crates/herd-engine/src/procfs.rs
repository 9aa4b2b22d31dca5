//! Process identity and trees from /proc: a pid's start time (so a recycled pid is never
//! mistaken for ours), liveness, and every descendant of a process.

use std::collections::HashMap;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

struct Stat {
    live: bool,
    ppid: u32,
    pgrp: u32,
    session: u32,
    start: u64,
}

/// The fields herd needs from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // f[0] is field 3 (state): ppid = 4, pgrp = 5, session = 6, starttime = 22.
    Some(Stat {
        live: !matches!(*f.first()?, "Z" | "X" | "x"),
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        session: f.get(3)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

/// The process group and session of `pid`.
pub fn group_and_session(pid: u32) -> Option<(u32, u32)> {
    stat(pid).map(|s| (s.pgrp, s.session))
}

/// The start time of `pid` in clock ticks since boot, or `None` if it does not exist.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start)
}

/// True if `pid` exists, is not a zombie, and (when given) started at `start`.
pub fn is_same_process(pid: u32, start: Option<u64>) -> bool {
    // This process is alive: no need to ask /proc (lock checks ask about it for every run).
    if pid == std::process::id() && start.is_some_and(|s| Some(s) == own_start_time()) {
        return true;
    }
    stat(pid).is_some_and(|s| s.live && start.is_none_or(|want| s.start == want))
}

/// This process's start time, read once.
pub fn own_start_time() -> Option<u64> {
    static START: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *START.get_or_init(|| start_time(std::process::id()))
}

/// Every live (non-zombie) descendant of `root`, parents before children.
pub fn descendants(root: u32) -> Vec<u32> {
    descendants_of(&[root])
}

/// Every live descendant of any of `roots` (not the roots themselves), parents before children.
/// The walk goes through zombies: a multi-threaded process whose main thread has exited shows
/// as one while its other threads still run, and its children are still its own.
pub fn descendants_of(roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<(u32, bool)>> = HashMap::new();
    for pid in all_pids() {
        if let Some(s) = stat(pid) {
            children.entry(s.ppid).or_default().push((pid, s.live));
        }
    }
    let mut out = Vec::new();
    let mut stack = roots.to_vec();
    while let Some(p) = stack.pop() {
        if let Some(kids) = children.get(&p) {
            for &(k, live) in kids {
                if live {
                    out.push(k);
                }
                stack.push(k);
            }
        }
    }
    out
}

fn all_pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
}

/// The live direct children of `pid`: from `/proc/<pid>/task/<tid>/children` (one file per
/// thread) where the kernel has them, from a scan of /proc otherwise.
pub fn children(pid: u32) -> Vec<u32> {
    let listed: std::io::Result<Vec<u32>> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .and_then(|tasks| {
            let mut kids = Vec::new();
            for t in tasks {
                let text = std::fs::read_to_string(t?.path().join("children"))?;
                kids.extend(text.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
            Ok(kids)
        });
    match listed {
        // The files list zombies too: only the live ones count.
        Ok(kids) => kids.into_iter().filter(|&k| is_same_process(k, None)).collect(),
        Err(_) => {
            all_pids().filter(|&p| stat(p).is_some_and(|s| s.live && s.ppid == pid)).collect()
        }
    }
}

/// The live direct children of the calling thread (for a single-threaded process: of the
/// process), from one file; `None` where the kernel does not list children.
pub fn own_thread_children() -> Option<Vec<u32>> {
    let me = std::process::id();
    let tid = nix::unistd::gettid();
    let text = std::fs::read_to_string(format!("/proc/{me}/task/{tid}/children")).ok()?;
    let kids = text.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok());
    Some(kids.filter(|&k| is_same_process(k, None)).collect())
}

/// The value of `name` in the environment `pid` was started with, if readable.
pub fn env_var(pid: u32, name: &str) -> Option<Vec<u8>> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| {
        kv.strip_prefix(name.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
            .map(<[u8]>::to_vec)
    })
}

/// Send `sig` to a process group; false if it no longer exists.
pub fn signal_group(pgid: u32, sig: Signal) -> bool {
    pgid > 1 && killpg(Pid::from_raw(pgid as i32), sig).is_ok()
}

/// Send `sig` to one process; false if it no longer exists.
pub fn signal_pid(pid: u32, sig: Signal) -> bool {
    pid > 1 && kill(Pid::from_raw(pid as i32), sig).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_identity_and_children_are_visible() {
        let me = std::process::id();
        let st = start_time(me).expect("own start time");
        assert!(is_same_process(me, Some(st)));
        assert!(!is_same_process(me, Some(st + 1)));
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert!(descendants(me).contains(&child.id()));
        assert!(children(me).contains(&child.id()));
        assert_eq!(env_var(child.id(), "PATH"), std::env::var("PATH").ok().map(String::into_bytes));
        assert_eq!(env_var(child.id(), "HERD_NO_SUCH_VARIABLE_X"), None);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_same_process(child.id(), None));
    }
}

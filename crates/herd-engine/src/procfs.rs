//! Process identity and trees from /proc: a pid's start time (so a recycled pid is never
//! mistaken for ours), liveness, and every descendant of a process.

use std::collections::HashMap;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

struct Stat {
    live: bool,
    ppid: u32,
    start: u64,
}

/// The fields herd needs from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // f[0] is field 3 (state): ppid = 4, starttime = 22.
    Some(Stat {
        live: !matches!(*f.first()?, "Z" | "X" | "x"),
        ppid: f.get(1)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

/// The start time of `pid` in clock ticks since boot, or `None` if it does not exist.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start)
}

/// True if `pid` exists, is not a zombie, and (when given) started at `start`.
pub fn is_same_process(pid: u32, start: Option<u64>) -> bool {
    stat(pid).is_some_and(|s| s.live && start.is_none_or(|want| s.start == want))
}

/// Every live (non-zombie) descendant of `root`, parents before children.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(s) = stat(pid).filter(|s| s.live) {
                children.entry(s.ppid).or_default().push(pid);
            }
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if let Some(kids) = children.get(&p) {
            for &k in kids {
                out.push(k);
                stack.push(k);
            }
        }
    }
    out
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
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_same_process(child.id(), None));
    }
}

//! Asking the person at the terminal about a foreground run's tool calls: a prompt on stderr,
//! the answer from stdin. `herd approve` / `herd deny` from another terminal may answer first.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herd_core::{AgentEvent, SubagentId};
use herd_store::{Answered, StatePaths, Store};
use tokio::sync::{broadcast, mpsc};

/// Answer `id`'s permission requests from this terminal until the run ends. `paused` is set
/// while a prompt is shown so the progress line leaves it alone.
pub fn spawn(
    paths: StatePaths,
    id: SubagentId,
    mut events: broadcast::Receiver<Arc<herd_store::StoredEvent>>,
    paused: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Ok(mut store) = Store::open(paths) else { return };
        // One reader of stdin for the whole run: lines arrive here whenever typed.
        let (line_tx, mut lines) = mpsc::channel::<String>(4);
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if line_tx.blocking_send(line).is_err() {
                    break;
                }
            }
        });
        loop {
            let ev = match events.recv().await {
                Ok(ev) => ev,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if ev.subagent_id != id {
                continue;
            }
            let AgentEvent::PermissionRequested { request, tool, input_preview, timeout_ms } =
                &ev.event
            else {
                continue;
            };
            paused.store(true, Ordering::SeqCst);
            eprint!(
                "\r\x1b[2Kherd: the agent wants to use {tool}: {}\n  allow? [y]es / [n]o / [a]lways for this call ({request}, {}s) ",
                crate::fmt::oneline(input_preview, 300),
                timeout_ms / 1000
            );
            let _ = std::io::stderr().flush();
            let mut check = tokio::time::interval(Duration::from_millis(200));
            let answer = loop {
                tokio::select! {
                    line = lines.recv() => match line {
                        None => break None,
                        Some(l) => match l.trim().to_ascii_lowercase().as_str() {
                            "y" | "yes" => break Some((true, false)),
                            "a" | "always" => break Some((true, true)),
                            "n" | "no" | "" => break Some((false, false)),
                            _ => eprint!("  y, n or a? "),
                        },
                    },
                    _ = check.tick() => {
                        // Answered elsewhere, expired, or the run ended.
                        let decided = store
                            .permission_request(request)
                            .ok()
                            .flatten()
                            .is_none_or(|r| r.status != "pending");
                        if decided {
                            eprintln!("(answered elsewhere)");
                            break None;
                        }
                    }
                }
            };
            if let Some((approve, always)) = answer {
                let by = format!("the terminal of herd pid {}", std::process::id());
                let reason = (!approve).then_some("denied at the terminal");
                match store.answer_request(request, approve, always, reason, &by) {
                    Ok(Answered::Decided) => {}
                    Ok(Answered::AlreadyDecided(s)) => eprintln!("herd: {request} was already {s}"),
                    Err(e) => eprintln!("herd: cannot record the answer: {e}"),
                }
            }
            paused.store(false, Ordering::SeqCst);
        }
    })
}

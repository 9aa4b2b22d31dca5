//! Asking the person at the terminal about a foreground run's tool calls: a prompt on stderr,
//! the answer from stdin. `herd approve` / `herd deny` from another terminal may answer first.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herd_core::{AgentEvent, SubagentId};
use herd_engine::service::{Answer, Caller, Service};
use tokio::sync::mpsc;

/// Answer `id`'s permission requests from this terminal until the run ends. `paused` is set
/// while a prompt is shown so the progress line leaves it alone.
pub fn spawn(
    svc: &Service,
    id: SubagentId,
    caller: Caller,
    paused: Arc<AtomicBool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut events = svc.watch(id.as_str(), 1)?;
    let svc = svc.clone();
    Ok(tokio::spawn(async move {
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
        while let Some(Ok(ev)) = events.next().await {
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
                        let waiting = svc
                            .pending(Some(id.as_str()))
                            .is_ok_and(|p| p.iter().any(|r| &r.id == request));
                        if !waiting {
                            eprintln!("(answered elsewhere)");
                            break None;
                        }
                    }
                }
            };
            if let Some((allow, always)) = answer {
                let reason = (!allow).then(|| "denied at the terminal".to_owned());
                if let Err(e) = svc.answer(request, Answer { allow, always, reason }, &caller).await
                {
                    eprintln!("herd: {e}");
                }
            }
            paused.store(false, Ordering::SeqCst);
        }
    }))
}

//! Ctrl-C for the foreground commands: the first SIGINT/SIGTERM asks the service for a graceful
//! stop of what this command runs, the second for a kill.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use herd_engine::service::{Caller, CancelLevel, Service};

/// What the signals asked for so far, for a display that says it itself: 0 nothing, 1 a
/// graceful stop, 2 a kill.
pub type Stopping = Arc<AtomicU8>;

/// First Ctrl-C (or SIGTERM): stop `id` gracefully. Second: kill it. With `shown`, a display
/// says "stopping…" (it owns the screen); otherwise it is said here, on a terminal.
pub async fn cancel_on_signal(svc: Service, id: String, caller: Caller, shown: Option<Stopping>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) =
        (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        return;
    };
    let mut level = None;
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        level = Some(match level {
            None => CancelLevel::Graceful,
            Some(_) => CancelLevel::Force,
        });
        let level = level.unwrap_or(CancelLevel::Force);
        match &shown {
            Some(s) => {
                s.store(if level == CancelLevel::Graceful { 1 } else { 2 }, Ordering::SeqCst)
            }
            None if level == CancelLevel::Graceful && std::io::stderr().is_terminal() => {
                eprintln!("\r\x1b[2Kherd: stopping… (Ctrl-C again to kill)");
            }
            None => {}
        }
        let (svc, id, caller) = (svc.clone(), id.clone(), caller.clone());
        // Not waited for here: a second signal must still be heard.
        tokio::spawn(async move {
            let why = "interrupted at the terminal";
            if let Err(e) = svc.cancel(&id, level, why, &caller).await {
                eprintln!("herd: cannot stop {id}: {e}");
            }
        });
    }
}

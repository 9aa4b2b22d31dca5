//! Ctrl-C for the foreground commands: the first SIGINT/SIGTERM asks the service for a graceful
//! stop of what this command runs, the second for a kill.

use std::io::IsTerminal;

use herd_engine::service::{Caller, CancelLevel, Service};

/// First Ctrl-C (or SIGTERM): stop `id` gracefully. Second: kill it.
pub async fn cancel_on_signal(svc: Service, id: String, caller: Caller) {
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
        if level == CancelLevel::Graceful && std::io::stderr().is_terminal() {
            eprintln!("\r\x1b[2Kherd: stopping… (Ctrl-C again to kill)");
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

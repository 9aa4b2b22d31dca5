//! Ctrl-C handling shared by the foreground commands: the first SIGINT/SIGTERM asks for a
//! graceful stop, the second for a kill.

use std::io::IsTerminal;

use herd_engine::StopLevel;
use tokio::sync::watch;

/// First Ctrl-C (or SIGTERM): stop gracefully. Second: kill.
pub async fn forward(stop: watch::Sender<StopLevel>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) =
        (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        return;
    };
    let mut level = StopLevel::None;
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        level = if level == StopLevel::None { StopLevel::Graceful } else { StopLevel::Force };
        if level == StopLevel::Graceful && std::io::stderr().is_terminal() {
            eprintln!("\r\x1b[2Kherd: stopping… (Ctrl-C again to kill)");
        }
        if stop.send(level).is_err() {
            return;
        }
    }
}

//! `herd mcp`'s log: stdout carries only the protocol, so what the server does goes to
//! `<state dir>/logs/mcp.log`, one timestamped line per event.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

#[derive(Debug)]
pub struct Log {
    file: Mutex<Option<File>>,
}

impl Log {
    /// Open (append) the log; a log that cannot be opened is silently off.
    pub fn open(state_dir: &Path) -> Self {
        let dir = state_dir.join("logs");
        let path = dir.join("mcp.log");
        let file = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::OpenOptions::new().create(true).append(true).open(&path))
            .ok();
        Self { file: Mutex::new(file) }
    }

    pub fn line(&self, msg: std::fmt::Arguments<'_>) {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = f.as_mut() {
            let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
            let _ = writeln!(f, "{now} [{}] {msg}", std::process::id());
        }
    }
}

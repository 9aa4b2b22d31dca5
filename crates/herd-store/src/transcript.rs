//! Per-subagent transcripts: the raw stdout stream appended verbatim to `<id>.jsonl` (from its
//! first byte), stderr to `<id>.stderr.log`, and a `<id>.meta.json` summary at the end of a run.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use herd_core::SubagentId;
use serde::{Deserialize, Serialize};

use crate::{Result, StatePaths, StoreError};

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.display().to_string(), source }
}

/// A transcript (append-only). The file is created with the first byte: a run that writes
/// nothing on stdout costs no file (short command steps are dispatched by the thousand).
#[derive(Debug)]
pub struct Transcript {
    path: PathBuf,
    out: Option<BufWriter<File>>,
    bytes: u64,
}

impl Transcript {
    /// The transcript of `id`, appended to from its first write.
    pub fn open(paths: &StatePaths, id: &SubagentId) -> Result<Self> {
        Ok(Self { path: paths.transcript(id), out: None, bytes: 0 })
    }

    /// Append raw bytes (part of a line, or lines with their newlines).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let out = match &mut self.out {
            Some(out) => out,
            None => {
                let f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .map_err(io_err(&self.path))?;
                self.out.insert(BufWriter::with_capacity(64 * 1024, f))
            }
        };
        self.bytes += bytes.len() as u64;
        out.write_all(bytes).map_err(io_err(&self.path))
    }

    /// Push buffered bytes to the file, so a watcher sees them.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.out {
            Some(out) => out.flush().map_err(io_err(&self.path)),
            None => Ok(()),
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The summary written next to a transcript at the end of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub id: String,
    pub cli: String,
    pub argv: Vec<String>,
    pub started_at: Option<i64>,
    pub ended_at: i64,
    pub status: String,
    pub exit_reason: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub turns: Option<u32>,
    pub transcript_bytes: u64,
    pub lines_over_limit: u64,
    /// Output events not stored once the run reached its bound (`max_stored_output`).
    #[serde(default)]
    pub output_dropped_events: u64,
    #[serde(default)]
    pub output_dropped_bytes: u64,
    /// The transcript or stderr log stopped growing at the same bound.
    #[serde(default)]
    pub files_cut: bool,
}

impl Meta {
    /// Write `<id>.meta.json` atomically (temp file, then rename): readers see the old file or
    /// the new one, never a torn one. Not fsynced: the database is the record of truth, and an
    /// fsync per run would dominate the cost of short runs.
    pub fn write(&self, paths: &StatePaths, id: &SubagentId) -> Result<()> {
        let path = paths.meta(id);
        let tmp = path.with_extension("json.partial");
        let body =
            serde_json::to_vec_pretty(self).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
        f.write_all(&body).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err(&path))
    }
}

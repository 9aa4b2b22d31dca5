//! Following a run's events: every event from a sequence number on, in order — those stored,
//! then live ones as they commit — with no gap and no duplicate, ending after its close.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use herd_core::{AgentEvent, SubagentId};
use herd_store::StoredEvent;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};

use super::Service;
use super::error::ApiError;
use crate::Engine;

/// Events read from the store at once.
const BATCH: usize = 500;
/// How often a run of another herd process is read for new events.
const OTHER_PROCESS_POLL: Duration = Duration::from_millis(200);

/// A run's events from a sequence number on. Pull-based: a slow reader never slows the agent
/// or other readers; when it falls behind the live feed it reads the store instead.
#[derive(Debug)]
pub struct Watch {
    engine: Arc<Engine>,
    id: SubagentId,
    /// The last sequence number handed out.
    last: i64,
    buffer: VecDeque<StoredEvent>,
    /// Events of this process's runs as they commit (subscribed before the first read).
    live: Option<broadcast::Receiver<Arc<StoredEvent>>>,
    /// The run belongs to this process: its events arrive on `live`.
    local: bool,
    ended: bool,
}

impl Service {
    /// Follow run `id` (id or unique prefix) from sequence number `from_seq` on (1 = all).
    pub fn watch(&self, id: &str, from_seq: i64) -> Result<Watch, ApiError> {
        let live = self.engine.writer().subscribe();
        let store = self.engine.store();
        let sid = store.resolve(id.trim())?;
        let row = store.get(&sid)?.ok_or_else(|| ApiError::not_found(format!("no run {id}")))?;
        let local = row.owner_pid == Some(std::process::id());
        Ok(Watch {
            engine: Arc::clone(&self.engine),
            id: sid,
            last: from_seq.max(1) - 1,
            buffer: VecDeque::new(),
            live: Some(live),
            local,
            ended: false,
        })
    }
}

impl Service {
    /// Changes after each commit to the store: wait on it, then read again (a plan's events, a
    /// status), instead of polling.
    pub fn commits(&self) -> watch::Receiver<u64> {
        self.engine.writer().commits()
    }

    /// Record the runs of callers naming session `id` under it (created, of `kind`, on first
    /// use; its id is the caller's).
    pub fn ensure_session(&self, id: &str, kind: &str) -> Result<(), ApiError> {
        if id.is_empty() || id.len() > 128 || id.chars().any(|c| c.is_control()) {
            return Err(ApiError::field(
                "parent_session_id",
                format!("parent_session_id {id:?}: 1-128 printable characters"),
            ));
        }
        let cwd = self.state_dir().to_path_buf();
        Ok(self.engine.store().ensure_session(id, kind, &cwd)?)
    }
}

impl Watch {
    /// The run being followed.
    pub fn id(&self) -> &SubagentId {
        &self.id
    }

    /// The next event; `None` once the run has closed and every event was handed out.
    pub async fn next(&mut self) -> Option<Result<StoredEvent, ApiError>> {
        loop {
            if let Some(e) = self.buffer.pop_front() {
                self.last = e.seq;
                if matches!(e.event, AgentEvent::SubagentClosed { .. }) {
                    self.ended = true;
                }
                return Some(Ok(e));
            }
            if self.ended {
                return None;
            }
            // Catch up from the record.
            let (batch, closed) = {
                let store = self.engine.store();
                let batch = match store.events_after(&self.id, self.last, BATCH) {
                    Ok(b) => b,
                    Err(e) => return Some(Err(e.into())),
                };
                let closed = batch.is_empty()
                    && store.get(&self.id).ok().flatten().is_none_or(|r| r.closed_at.is_some());
                (batch, closed)
            };
            if !batch.is_empty() {
                self.buffer.extend(batch);
                continue;
            }
            if closed {
                // Closed, and everything stored was handed out (a run closed by an orphan
                // sweep of an older herd may have no closing event of its own).
                self.ended = true;
                return None;
            }
            self.wait_for_more().await;
        }
    }

    /// Until something new may be stored: the run's next live event (kept when it follows on),
    /// a lag or gap (the store is read again), or for another process's run, a poll period.
    async fn wait_for_more(&mut self) {
        let poll = !self.local || self.live.is_none();
        let Some(live) = self.live.as_mut() else {
            tokio::time::sleep(OTHER_PROCESS_POLL).await;
            return;
        };
        loop {
            tokio::select! {
                r = live.recv() => match r {
                    Ok(e) if e.subagent_id == self.id && e.seq > self.last => {
                        // The next one is kept; after a gap the store is read again.
                        if e.seq == self.last + 1 {
                            self.buffer.push_back((*e).clone());
                        }
                        return;
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => return,
                    Err(RecvError::Closed) => {
                        self.live = None;
                        return;
                    }
                },
                _ = tokio::time::sleep(OTHER_PROCESS_POLL), if poll => return,
            }
        }
    }
}

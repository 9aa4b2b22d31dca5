//! Following a plan's own events: every event from a sequence number on, in order, in batches
//! read again after each store commit, ending once the plan has ended and all was handed out.

use std::time::Duration;

use tokio::sync::watch;

use super::Service;
use super::error::ApiError;
use super::views::PlanEventView;

/// Plan events read at once.
const BATCH: usize = 500;
/// How long a follower waits for a commit before reading anyway (a plan another herd process
/// runs commits through that process's writer, which does not wake this one).
const REREAD: Duration = Duration::from_millis(250);

/// A plan's events from a sequence number on (the gRPC `WatchOrchestration`, the dashboard's
/// plan feed). Pull-based: a slow reader reads the store at its own pace.
#[derive(Debug)]
pub struct PlanWatch {
    svc: Service,
    id: String,
    /// The last sequence number handed out.
    last: i64,
    commits: watch::Receiver<u64>,
    ended: bool,
}

impl Service {
    /// Follow plan `id` (`pln_…` or a unique prefix) from sequence number `from_seq` on
    /// (1 = all).
    pub fn watch_plan(&self, id: &str, from_seq: i64) -> Result<PlanWatch, ApiError> {
        let commits = self.commits();
        let id = self.plan_id(id)?;
        Ok(PlanWatch { svc: self.clone(), id, last: from_seq.max(1) - 1, commits, ended: false })
    }
}

impl PlanWatch {
    /// The plan being followed (its whole id).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The next events, waiting for a commit while there are none; `None` once the plan has
    /// ended (and not been resumed since) and every event was handed out.
    pub async fn next(&mut self) -> Option<Result<Vec<PlanEventView>, ApiError>> {
        loop {
            if self.ended {
                return None;
            }
            self.commits.borrow_and_update();
            // Read before the events: a plan that had ended then has its last event in them.
            let read = self
                .svc
                .plan_ended(&self.id)
                .and_then(|ended| Ok((ended, self.svc.plan_events(&self.id, self.last, BATCH)?)));
            let (ended, batch) = match read {
                Ok(r) => r,
                Err(e) => {
                    self.ended = true;
                    return Some(Err(e));
                }
            };
            if let Some(e) = batch.last() {
                self.last = e.seq;
            }
            self.ended = ended && batch.len() < BATCH;
            if !batch.is_empty() {
                return Some(Ok(batch));
            }
            if !self.ended {
                let _ = tokio::time::timeout(REREAD, self.commits.changed()).await;
            }
        }
    }
}

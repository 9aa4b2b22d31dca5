//! Process slots: how many agents may live at once. A plan's own pool and, under `herd mcp`,
//! the server's pool that its tasks share.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::StopLevel;

/// The pools a run's agent must get a place in before it starts.
#[derive(Debug)]
pub(crate) struct Slots {
    local: Arc<Semaphore>,
    bound: usize,
    shared: Option<Arc<Semaphore>>,
}

/// A place in every pool; given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _local: OwnedSemaphorePermit,
    _shared: Option<OwnedSemaphorePermit>,
}

impl Slots {
    pub fn new(bound: usize, shared: Option<Arc<Semaphore>>) -> Self {
        Self { local: Arc::new(Semaphore::new(bound)), bound, shared }
    }

    /// Wait for a place in each pool (this one first); `None` if the run is stopped first.
    pub async fn acquire(&self, stop: &watch::Receiver<StopLevel>) -> Option<Slot> {
        let mut stop = stop.clone();
        let all = async {
            let local = self.local.clone().acquire_owned().await.ok()?;
            let shared = match &self.shared {
                Some(s) => Some(s.clone().acquire_owned().await.ok()?),
                None => None,
            };
            Some(Slot { _local: local, _shared: shared })
        };
        tokio::select! {
            s = all => s,
            _ = stop.wait_for(|l| *l != StopLevel::None) => None,
        }
    }

    /// Agents holding a place in this pool.
    pub fn alive(&self) -> usize {
        self.bound - self.local.available_permits().min(self.bound)
    }
}

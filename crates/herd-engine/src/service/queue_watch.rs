//! Waking on changes to a shared store's queue: a connection of its own that listens to
//! `herd_steps`, for a process waiting on queued plans (`herd run --store`) without a fast poll.

use std::time::Duration;

use herd_store::Store;

use super::{ApiError, Service};

/// A connection listening to the queue's announcements (`NOTIFY herd_steps`: a plan
/// submitted, a step ended or re-queued, a plan ended).
#[derive(Debug)]
pub struct QueueWatch {
    store: Store,
}

impl QueueWatch {
    /// Wait up to `timeout` for a change; true if one was announced (any others waiting are
    /// taken with it). A change may be missed (its connection was lost meanwhile): wait with a
    /// timeout and read again after it too.
    pub fn wait(&self, timeout: Duration) -> bool {
        self.store.wait_notification(timeout)
    }
}

impl Service {
    /// Listen to this service's shared store's queue. Listen before the change waited for (a
    /// plan's submission, say) so that none is missed.
    pub fn watch_queue(&self) -> Result<QueueWatch, ApiError> {
        let store = Store::open(self.engine.paths().clone())?;
        store.listen_steps()?;
        Ok(QueueWatch { store })
    }
}

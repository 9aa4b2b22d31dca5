//! The service's pool: at most `max_concurrent` agents alive at once, tasks and plan steps
//! alike, and a bounded queue of tasks waiting for a place — the one admission check.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;

use super::error::ApiError;

#[derive(Debug)]
pub(crate) struct Pool {
    /// One permit per agent alive.
    pub places: Arc<Semaphore>,
    pub bound: usize,
    pub max_queue: usize,
    /// Tasks admitted and not ended (running and queued).
    admitted: Arc<AtomicUsize>,
}

/// One admitted task; dropping it frees its place in the count.
#[derive(Debug)]
pub(crate) struct Admission(Arc<AtomicUsize>);

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pool {
    pub fn new(bound: usize, max_queue: usize) -> Self {
        Self {
            places: Arc::new(Semaphore::new(bound)),
            bound,
            max_queue,
            admitted: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Agents holding a place now.
    pub fn running(&self) -> usize {
        self.bound - self.places.available_permits().min(self.bound)
    }

    /// Admit one task: it runs, or waits in the queue, or — both full — is refused.
    pub fn admit(&self) -> Result<Admission, ApiError> {
        let cap = self.bound + self.max_queue;
        match self
            .admitted
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < cap).then_some(n + 1))
        {
            Ok(_) => Ok(Admission(Arc::clone(&self.admitted))),
            Err(n) => Err(full(
                "the pool is full",
                self.running(),
                n.saturating_sub(self.running()),
                self.bound,
                self.max_queue,
                "wait for a task to end (task_wait, herd ps) or stop one (herd cancel), then try again",
            )),
        }
    }

    /// Admit a plan of `steps` steps that runs `bound` at once and queues at most `max_queue`
    /// ready steps: refused up front when it could never fit.
    pub fn admit_plan(&self, steps: usize, bound: usize, max_queue: usize) -> Result<(), ApiError> {
        if steps > bound + max_queue {
            return Err(full(
                &format!("the plan has {steps} steps"),
                bound,
                steps - bound,
                bound,
                max_queue,
                "raise the plan's limits.max_queue or split the plan",
            ));
        }
        Ok(())
    }
}

/// The one RESOURCE_EXHAUSTED message: what is full, how full, what the limits are, what to do.
fn full(
    what: &str,
    running: usize,
    queued: usize,
    bound: usize,
    max_queue: usize,
    todo: &str,
) -> ApiError {
    ApiError::exhausted(format!(
        "{what}: {running} running and {queued} queued (at most {bound} at once, {max_queue} \
         queued); {todo}"
    ))
    .with_details(serde_json::json!({
        "running": running, "queued": queued, "max_concurrent": bound, "max_queue": max_queue,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_counts_running_and_queued_and_frees_on_drop() {
        let p = Pool::new(1, 1);
        let a = p.admit().unwrap();
        let b = p.admit().unwrap();
        let e = p.admit().unwrap_err();
        assert_eq!(e.code, super::super::Code::ResourceExhausted);
        assert!(e.message.contains("at most 1 at once, 1 queued"), "{e}");
        drop(a);
        let _c = p.admit().unwrap();
        drop(b);
        assert!(p.admit_plan(3, 1, 2).is_ok());
        let e = p.admit_plan(4, 1, 2).unwrap_err();
        assert!(e.message.starts_with("the plan has 4 steps"), "{e}");
    }
}

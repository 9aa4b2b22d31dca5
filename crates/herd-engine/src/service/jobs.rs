//! The jobs this process runs — tasks and plans: how to stop each, how to learn it ended, and
//! waiting for any or all of several ids, woken by their ends (runs of other processes are read).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Notify, watch};

use super::error::ApiError;
use super::views::{PlanView, RunView};
use crate::StopLevel;
use crate::plan::PlanReport;

/// How a job of this process ended; what it produced is in the store.
#[derive(Debug)]
pub(crate) enum Ended {
    Task,
    Plan(Box<PlanReport>),
    /// herd itself failed (the store, a worktree it could not set up).
    Error(ApiError),
}

#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub stop: watch::Sender<StopLevel>,
    pub done: watch::Receiver<Option<Arc<Ended>>>,
}

impl Job {
    pub fn ended(&self) -> Option<Arc<Ended>> {
        self.done.borrow().clone()
    }
}

/// What a job's task holds: its stop signal and where to report its end.
pub(crate) struct Running {
    pub stop: watch::Receiver<StopLevel>,
    done: watch::Sender<Option<Arc<Ended>>>,
    changed: Arc<Notify>,
}

impl Running {
    /// Report the end: waiters wake.
    pub fn finish(self, ended: Ended) {
        self.done.send_replace(Some(Arc::new(ended)));
        self.changed.notify_waiters();
    }
}

/// Every job this process started.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    map: Mutex<BTreeMap<String, Job>>,
    /// Notified whenever one of them ends.
    pub changed: Arc<Notify>,
}

impl Jobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Job>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register job `id`; its task keeps the returned half.
    pub fn insert(&self, id: &str) -> Running {
        let (stop_tx, stop_rx) = watch::channel(StopLevel::None);
        let (done_tx, done_rx) = watch::channel(None);
        let job = Job { stop: stop_tx, done: done_rx };
        self.lock().insert(id.to_owned(), job);
        Running { stop: stop_rx, done: done_tx, changed: self.changed.clone() }
    }

    pub fn get(&self, id: &str) -> Option<Job> {
        self.lock().get(id).cloned()
    }

    /// The ids of every job, oldest first (ids are time-ordered).
    pub fn ids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Stop every job still going: the stop ladder for each, then kills; returns once all have
    /// ended or the ladder's time (and a margin) is over.
    pub async fn stop_all(&self, ladder: Duration) {
        let open: Vec<Job> =
            self.lock().values().filter(|j| j.ended().is_none()).cloned().collect();
        for (level, limit) in [(StopLevel::Graceful, ladder + MARGIN), (StopLevel::Force, MARGIN)] {
            for j in &open {
                j.stop.send_replace(level);
            }
            let all = async {
                for j in &open {
                    let _ = j.done.clone().wait_for(Option::is_some).await;
                }
            };
            if tokio::time::timeout(limit, all).await.is_ok() {
                break;
            }
        }
    }
}

/// Slack on top of the stop ladder for a run to record its end.
pub(crate) const MARGIN: Duration = Duration::from_secs(5);

/// Where one job stands.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobState {
    /// A subagent run.
    Task(Box<RunView>),
    Plan(Box<PlanView>),
    /// A job of this process that herd itself could not carry through.
    Error {
        id: String,
        error: ApiError,
    },
}

impl JobState {
    pub fn id(&self) -> &str {
        match self {
            Self::Task(r) => &r.id,
            Self::Plan(p) => &p.id,
            Self::Error { id, .. } => id,
        }
    }

    /// Ended: completed, failed or cancelled (or herd's own error).
    pub fn is_terminal(&self) -> bool {
        match self {
            Self::Task(r) => r.is_terminal(),
            Self::Plan(p) => p.is_terminal(),
            Self::Error { .. } => true,
        }
    }

    pub fn status(&self) -> &str {
        match self {
            Self::Task(r) => r.status.as_str(),
            Self::Plan(p) => &p.status,
            Self::Error { .. } => "failed",
        }
    }
}

/// What a wait saw.
#[derive(Debug, Clone, Serialize)]
pub struct Waited {
    /// The wait ended before what it waited for.
    pub timed_out: bool,
    /// How many of the jobs have ended.
    pub done: usize,
    pub jobs: Vec<JobState>,
}

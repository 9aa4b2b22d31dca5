//! A worker's side of isolated steps on several machines: its clone of a plan's repository,
//! each step's worktree from the right base, pushing its branch, and the plan's merge gate.
//!
//! The merge gate is the one on one machine (isolated steps merge in plan order, each once
//! every isolated step before it has merged or failed), run by whichever worker holds the
//! plan's merge lock in the database; its state — which steps wait, with which pushed branch —
//! is the database's, so a merger that dies leaves nothing half-known: the next one fetches
//! the integration branch and merges what still waits (a merge already pushed is then found
//! merged and recorded as such).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use herd_core::plan::Plan;
use herd_core::workspace::{WorkspaceMode, merge_order};
use herd_core::{AgentEvent, FailureReason, Status};
use herd_store::{MergeEnd, PlanRepo, Store};

use crate::workspace::remote::RepoClone;
use crate::workspace::{IsolationPlan, Merge, WorkspaceReq};
use crate::{EngineError, TaskRequest};

/// A queued plan's repository as one worker uses it.
pub(super) struct QueuedRepo {
    pub repo: PlanRepo,
    /// Where this worker's clones are.
    clones: PathBuf,
    /// Its clone, once made; the lock also keeps this worker's fetches one at a time.
    clone: tokio::sync::Mutex<Option<RepoClone>>,
    /// The isolated steps' keys in merge order.
    order: Vec<String>,
}

impl QueuedRepo {
    pub fn new(repo: PlanRepo, clones: PathBuf, plan: &Plan) -> Self {
        let deps: Vec<Vec<usize>> = plan.steps.iter().map(|s| s.deps.clone()).collect();
        let order = merge_order(&deps)
            .into_iter()
            .filter(|&i| plan.steps[i].workspace() == WorkspaceMode::Isolated)
            .map(|i| plan.steps[i].id.clone())
            .collect();
        QueuedRepo { repo, clones, clone: tokio::sync::Mutex::new(None), order }
    }

    /// The clone, made on first use and fetched now.
    async fn fetched(&self) -> Result<RepoClone, String> {
        let mut held = self.clone.lock().await;
        let (clones, url, have) = (self.clones.clone(), self.repo.url.clone(), held.clone());
        let c = blocking(move || {
            let c = match have {
                Some(c) => c,
                None => RepoClone::open(&clones, &url).map_err(|e| e.to_string())?,
            };
            c.fetch().map_err(|e| e.to_string())?;
            Ok(c)
        })
        .await?;
        *held = Some(c.clone());
        Ok(c)
    }

    /// Put step `step`'s `attempt` in its own worktree of this worker's clone: from its own
    /// `base`, else from the integration branch when it depends on isolated steps (it sees
    /// their merged work), else from the plan's base.
    pub async fn isolate(
        &self,
        plan: &Plan,
        orch: &str,
        step: usize,
        attempt: u32,
        req: &mut TaskRequest,
    ) -> Result<(), String> {
        let clone = self.fetched().await?;
        let iso = clone.isolation(orch, &self.repo);
        let s = &plan.steps[step];
        let after_isolated =
            s.deps.iter().any(|&d| plan.steps[d].workspace() == WorkspaceMode::Isolated);
        let base = match &s.fields.base {
            Some(b) => {
                let c = clone.resolve(b).map_err(|e| format!("step {}: base: {e}", s.id))?;
                (c, b.clone())
            }
            None if after_isolated => {
                let b = &self.repo.integration_branch;
                (clone.remote_commit(b).unwrap_or_else(|| self.repo.base.clone()), b.clone())
            }
            None => (self.repo.base.clone(), "the plan's base".into()),
        };
        let spec = crate::plan::attempt_spec(&iso, s, attempt, base, req);
        req.cwd = spec.path.clone();
        req.workspace = WorkspaceReq::Isolated(Box::new(spec));
        Ok(())
    }

    /// Merge plan `orch`'s waiting steps in order, as far as the order allows, if this worker
    /// gets the plan's merge lock (on `store`, a connection of the worker's own for merges).
    pub async fn merge_waiting(&self, store: Arc<Mutex<Store>>, orch: &str) -> Result<(), String> {
        let clone = self.fetched().await?;
        let iso = clone.isolation(orch, &self.repo);
        let (order, orch) = (self.order.clone(), orch.to_owned());
        // The clone's lock is held across the merge: it fetches too.
        let _held = self.clone.lock().await;
        blocking(move || {
            let store = store.lock().map_err(|_| "the merge connection is poisoned".to_owned())?;
            if !store.try_merge_lock(&orch).map_err(|e| e.to_string())? {
                return Ok(());
            }
            let out = merge_in_order(&store, &clone, &iso, &orch, &order);
            let _ = store.merge_unlock(&orch);
            out
        })
        .await
    }
}

/// Under the plan's merge lock: merge each waiting step in `order` until one is neither
/// ended nor waiting.
fn merge_in_order(
    store: &Store,
    clone: &RepoClone,
    iso: &IsolationPlan,
    orch: &str,
    order: &[String],
) -> Result<(), String> {
    let steps = store.merge_candidates(orch).map_err(|e| e.to_string())?;
    for key in order {
        let Some(c) = steps.iter().find(|c| &c.key == key) else { continue };
        match (c.status.as_str(), &c.merge_branch) {
            ("completed" | "failed" | "cancelled", _) => continue,
            ("running", Some(branch)) => {
                let into = iso.integration_branch.clone();
                let who = c.subagent_id.as_deref().unwrap_or("?");
                let message = format!("herd: merge step {key} ({who})");
                let end = match clone.merge(iso, branch, &message) {
                    Ok(Merge::Merged(commit)) => MergeEnd {
                        status: Status::Completed,
                        failure: None,
                        commit: Some(commit.clone()),
                        events: vec![AgentEvent::WorktreeMerged {
                            branch: branch.clone(),
                            into,
                            commit,
                        }],
                    },
                    Ok(Merge::NothingToMerge) => MergeEnd {
                        status: Status::Completed,
                        failure: None,
                        commit: None,
                        events: vec![AgentEvent::NothingToMerge {
                            branch: branch.clone(),
                            into,
                            uncommitted: Vec::new(),
                        }],
                    },
                    Ok(Merge::Conflict { files, output }) => MergeEnd {
                        status: Status::Failed,
                        failure: Some(FailureReason::MergeConflict),
                        commit: None,
                        events: vec![AgentEvent::MergeConflict {
                            branch: branch.clone(),
                            into,
                            files,
                            output,
                        }],
                    },
                    Err(e) => MergeEnd {
                        status: Status::Failed,
                        failure: Some(FailureReason::Workspace {
                            message: format!("merging {branch} into {into}: {e}"),
                        }),
                        commit: None,
                        events: Vec::new(),
                    },
                };
                store.finish_merge(orch, key, &end).map_err(|e| e.to_string())?;
            }
            _ => break,
        }
    }
    Ok(())
}

/// After an isolated step's agent finished (`waiting_for_merge`): push its branch from its
/// worktree; returns the branch and its head.
pub(super) async fn push_step(req: &TaskRequest) -> Result<(String, String), String> {
    let WorkspaceReq::Isolated(spec) = &req.workspace else {
        return Err("the step has no worktree".into());
    };
    let (path, branch) = (spec.path.clone(), spec.branch.clone());
    blocking(move || {
        let head = crate::workspace::Git::new(&path)
            .commit_of("HEAD")
            .map_err(|e| format!("the step's branch {branch}: {e}"))?;
        RepoClone::push_branch(&path, &branch)
            .map_err(|e| format!("cannot push the step's branch {branch}: {e}"))?;
        Ok((branch, head))
    })
    .await
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| EngineError::Task(e.to_string()).to_string())?
}

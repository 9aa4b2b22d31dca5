//! The workspace side of a run: take (or wait for) the directory lock, create and set up an
//! isolated worktree, and after the agent, merge its branch in the integration worktree.

use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_core::workspace::{Hold, commit_message, integration_branch, step_branch};
use herd_core::{AgentEvent, Decoded, FailureReason, Status, SubagentId};
use herd_store::{NewWorktree, Update, now_ms};
use tokio::sync::watch;

use super::{Git, GitError, IsolatedSpec, Merge, WorkspaceError, WorkspaceReq, absolute};
use crate::{Engine, EngineError, StopLevel, TaskRequest, procfs};

/// How often a run waiting for a lock tries again.
const LOCK_POLL: Duration = Duration::from_millis(200);

/// One run's isolation: the repository, the worktree root, the base commit, and the
/// integration worktree where herd merges (the user's own checkout is never touched).
#[derive(Debug, Clone)]
pub struct IsolationPlan {
    pub repo: PathBuf,
    pub root: PathBuf,
    pub run_id: String,
    /// HEAD of the repository when the run started.
    pub base: String,
    pub integration_branch: String,
    pub integration_path: PathBuf,
    integration_id: String,
}

fn new_wt_id() -> String {
    format!("wt_{}", SubagentId::generate())
}

impl IsolationPlan {
    /// The isolation of plan `run_id` in a worker's clone `repo` (its integration worktree is
    /// made when it first merges; see [`super::remote::RepoClone::merge`]).
    pub fn in_clone(
        repo: PathBuf,
        root: PathBuf,
        run_id: &str,
        base: String,
        integration_branch: String,
    ) -> Self {
        IsolationPlan {
            integration_path: root.join(run_id).join(".integration"),
            repo,
            root,
            run_id: run_id.to_owned(),
            base,
            integration_branch,
            integration_id: new_wt_id(),
        }
    }

    /// The base commit a step's own `base` names.
    pub fn resolve_base(&self, rev: &str) -> Result<String, GitError> {
        Git::new(&self.repo).commit_of(rev)
    }

    /// The integration branch's current commit.
    pub fn tip(&self) -> Result<String, GitError> {
        Git::new(&self.integration_path).commit_of("HEAD")
    }

    /// The spec of step `step`'s worktree; `cwd` is where the step would run unisolated (its
    /// place inside the repository is kept inside the worktree).
    #[allow(clippy::too_many_arguments)]
    pub fn spec(
        &self,
        step: &str,
        base: (String, String),
        setup: Option<String>,
        auto_commit: bool,
        prompt: &str,
        setup_timeout: Duration,
    ) -> IsolatedSpec {
        let path = self.root.join(&self.run_id).join(step);
        IsolatedSpec {
            worktree_id: new_wt_id(),
            run_id: self.run_id.clone(),
            step: step.to_owned(),
            repo: self.repo.clone(),
            root: self.root.clone(),
            branch: step_branch(&self.run_id, step),
            path,
            base: base.0,
            base_label: base.1,
            integration_branch: self.integration_branch.clone(),
            setup,
            setup_timeout,
            auto_commit,
            commit_message: commit_message(step, prompt),
        }
    }

    /// Where the agent of `spec` works: the worktree, at the same place `cwd` has in the repo.
    pub fn cwd_in(&self, spec: &IsolatedSpec, cwd: &Path) -> PathBuf {
        match absolute(cwd).strip_prefix(&self.repo) {
            Ok(rel) => spec.path.join(rel),
            Err(_) => spec.path.clone(),
        }
    }
}

impl Engine {
    /// Prepare isolation for run `run_id` of the repository holding `dir`: the worktree root
    /// (checked to be outside the working tree), the base commit (HEAD), and the integration
    /// worktree on `into` (created from the base if missing) or `herd/<run>/integration`.
    pub async fn open_isolation(
        &self,
        dir: &Path,
        run_id: &str,
        root: Option<&str>,
        into: Option<&str>,
    ) -> Result<IsolationPlan, EngineError> {
        let (dir, run_id) = (dir.to_path_buf(), run_id.to_owned());
        let (root, into) = (root.map(str::to_owned), into.map(str::to_owned));
        let (me, me_start) = self.owner();
        let plan = blocking(move || -> Result<(IsolationPlan, NewWorktree), WorkspaceError> {
            let repo = absolute(&Git::new(&dir).toplevel().map_err(|e| {
                WorkspaceError::Invalid(format!(
                    "workspace: isolated needs a git repository, and {} is not in one:\n{e}",
                    dir.display()
                ))
            })?);
            let root = absolute(&super::worktree_root(root.as_deref(), &dir, &repo));
            super::check_root(&repo, &root)?;
            std::fs::create_dir_all(&root).map_err(|source| WorkspaceError::Io {
                path: root.display().to_string(),
                source,
            })?;
            let root = absolute(&root);
            let git = Git::new(&repo);
            let base = git.commit_of("HEAD")?;
            let branch = into.clone().unwrap_or_else(|| integration_branch(&run_id));
            let path = root.join(&run_id).join(".integration");
            std::fs::create_dir_all(path.parent().unwrap_or(&root)).map_err(|source| {
                WorkspaceError::Io { path: root.display().to_string(), source }
            })?;
            let p = path.to_string_lossy().into_owned();
            // Left by a herd that died while it ran this plan (a resumed plan keeps its id):
            // its merges are commits on the branch, anything else in it was a merge cut short.
            if path.exists() {
                let _ = git.worktree(&["remove", "--force", &p]);
            }
            let added = if git.branch_exists(&branch)? {
                git.worktree(&["add", &p, &branch])
            } else {
                git.worktree(&["add", "-b", &branch, &p, &base])
            };
            added.map_err(|e| {
                WorkspaceError::Invalid(format!(
                    "cannot check out the integration branch {branch} in its own worktree \
                     (herd never merges in your checkout; if it is checked out there, pick \
                     another branch with --into):\n{e}"
                ))
            })?;
            let integration_id = new_wt_id();
            let row = NewWorktree {
                id: integration_id.clone(),
                kind: "integration".into(),
                run_id: run_id.clone(),
                step_key: ".integration".into(),
                subagent_id: None,
                repo: repo.display().to_string(),
                root: root.display().to_string(),
                path: p,
                branch: branch.clone(),
                base: base.clone(),
                integration_branch: Some(branch.clone()),
                owner_pid: me,
                owner_start_time: me_start,
            };
            let plan = IsolationPlan {
                repo,
                root,
                run_id,
                base,
                integration_branch: branch,
                integration_path: path,
                integration_id,
            };
            Ok((plan, row))
        })
        .await?;
        let (plan, row) = plan.map_err(|e| EngineError::Workspace(e.to_string()))?;
        self.store().record_worktree(&row)?;
        Ok(plan)
    }

    /// Remove the integration worktree at the end of a run (its branch keeps every merge).
    /// A worktree git would not remove is kept for `herd worktrees prune`; the returned
    /// warning says why.
    pub async fn close_isolation(
        &self,
        plan: &IsolationPlan,
    ) -> Result<Option<String>, EngineError> {
        let (repo, path) = (plan.repo.clone(), plan.integration_path.clone());
        let removed =
            blocking(move || Git::new(&repo).worktree(&["remove", &path.to_string_lossy()]))
                .await?;
        match removed {
            Ok(_) => {
                self.store().set_worktree_status(&plan.integration_id, "removed", None, None)?;
                Ok(None)
            }
            Err(e) => Ok(Some(format!("the integration worktree was kept: {e}"))),
        }
    }

    /// Before the agent starts: take the directory lock (waiting if asked), or create and set
    /// up the isolated worktree. `Some(outcome)` ends the run without starting the agent.
    pub(crate) async fn prepare_workspace(
        &self,
        id: &SubagentId,
        req: &TaskRequest,
        stop: &watch::Receiver<StopLevel>,
        registered: bool,
    ) -> Result<Option<(Status, Option<FailureReason>)>, EngineError> {
        match &req.workspace {
            WorkspaceReq::Shared { lock: None, .. } if registered => Ok(None),
            WorkspaceReq::Shared { lock, wait } => {
                self.take_lock(id, req, Hold::from(*lock), *wait, stop).await
            }
            WorkspaceReq::Isolated(spec) => self.create_isolated(id, spec).await,
        }
    }

    async fn take_lock(
        &self,
        id: &SubagentId,
        req: &TaskRequest,
        hold: Hold,
        wait: bool,
        stop: &watch::Receiver<StopLevel>,
    ) -> Result<Option<(Status, Option<FailureReason>)>, EngineError> {
        let path = lock_key(&req.cwd);
        let owner = self.owner();
        let mut waiting = false;
        loop {
            let got = self
                .writer()
                .acquire_lock(path.clone(), id.to_string(), hold, owner, procfs::is_same_process)
                .await?;
            let holders = match got {
                Ok(()) => {
                    if hold != Hold::None {
                        let ev = AgentEvent::LockAcquired { path, mode: hold.to_string() };
                        self.writer().append(id, vec![Decoded::top(ev)]).await?;
                    }
                    if waiting && let Some((orch, key)) = &req.plan_step {
                        self.writer()
                            .set_step(herd_store::StepChange::new(orch, key, "running", None))
                            .await?;
                    }
                    return Ok(None);
                }
                Err(h) => h,
            };
            let names: Vec<String> =
                holders.iter().map(|h| format!("{} ({})", h.holder, h.mode)).collect();
            if !wait {
                let message = format!(
                    "{path} is locked by {}; a {hold} request cannot share it (wait: false)",
                    names.join(", ")
                );
                return Ok(Some((
                    Status::Failed,
                    Some(FailureReason::ResourceExhausted { message }),
                )));
            }
            if !waiting {
                waiting = true;
                let ev = AgentEvent::LockWaiting {
                    path: path.clone(),
                    mode: hold.to_string(),
                    holders: names,
                };
                let update =
                    Update { status: Some(Status::Queued), events: vec![ev], ..Update::default() };
                self.writer().update(id, update).await?;
                if let Some((orch, key)) = &req.plan_step {
                    self.writer()
                        .set_step(herd_store::StepChange::new(orch, key, "blocked", None))
                        .await?;
                }
            }
            tokio::time::sleep(LOCK_POLL).await;
            if *stop.borrow() != StopLevel::None || self.store().cancel_requested(id)? {
                return Ok(Some((Status::Cancelled, None)));
            }
        }
    }

    async fn create_isolated(
        &self,
        id: &SubagentId,
        spec: &IsolatedSpec,
    ) -> Result<Option<(Status, Option<FailureReason>)>, EngineError> {
        let (me, me_start) = self.owner();
        self.store().record_worktree(&NewWorktree {
            id: spec.worktree_id.clone(),
            kind: "step".into(),
            run_id: spec.run_id.clone(),
            step_key: spec.step.clone(),
            subagent_id: Some(id.to_string()),
            repo: spec.repo.display().to_string(),
            root: spec.root.display().to_string(),
            path: spec.path.display().to_string(),
            branch: spec.branch.clone(),
            base: spec.base.clone(),
            integration_branch: Some(spec.integration_branch.clone()),
            owner_pid: me,
            owner_start_time: me_start,
        })?;
        let s = spec.clone();
        let created = blocking(move || super::create_worktree(&s)).await?;
        let failed = |message: String| {
            Ok(Some((Status::Failed, Some(FailureReason::Workspace { message }))))
        };
        if let Err(e) = created {
            self.store().set_worktree_status(&spec.worktree_id, "failed", None, None)?;
            return failed(format!("cannot create the worktree {}: {e}", spec.path.display()));
        }
        let ev = AgentEvent::WorktreeCreated {
            path: spec.path.display().to_string(),
            branch: spec.branch.clone(),
            base: format!("{} ({})", spec.base_label, short(&spec.base)),
        };
        self.writer().append(id, vec![Decoded::top(ev)]).await?;
        if let Err(message) = super::run_setup(spec).await {
            self.store().set_worktree_status(&spec.worktree_id, "failed", None, None)?;
            return failed(message);
        }
        Ok(None)
    }

    /// An isolated run that succeeded commits its work (auto_commit) and waits for the merge;
    /// one that did not keeps its worktree and branch for a person. Other runs pass through.
    pub(crate) async fn merge_gate(
        &self,
        spec: &IsolatedSpec,
        status: Status,
        failure: Option<FailureReason>,
    ) -> Result<(Status, Option<FailureReason>, Option<AgentEvent>), EngineError> {
        let store_status = |s: &str, head: Option<&str>| {
            self.store().set_worktree_status(&spec.worktree_id, s, head, None)
        };
        if status != Status::Completed {
            // A worktree never created has its record marked already.
            let _ = store_status("failed", None);
            return Ok((status, failure, None));
        }
        let s = spec.clone();
        let done = tokio::task::spawn_blocking(move || super::finish_branch(&s))
            .await
            .map_err(|e| EngineError::Task(e.to_string()))?;
        match done {
            Ok((head, auto_committed)) => {
                store_status("waiting_for_merge", Some(&head))?;
                let ev = AgentEvent::SubagentWaitingForMerge {
                    branch: spec.branch.clone(),
                    head,
                    auto_committed,
                };
                Ok((Status::WaitingForMerge, None, Some(ev)))
            }
            Err(e) => {
                store_status("failed", None)?;
                let message = format!("auto-commit in {}: {e}", spec.path.display());
                Ok((Status::Failed, Some(FailureReason::Workspace { message }), None))
            }
        }
    }

    /// Merge a `waiting_for_merge` run's branch into the integration branch and close the run:
    /// `completed` (event `worktree_merged`) or `failed(merge_conflict)` with the merge aborted
    /// and the branch kept.
    pub async fn merge_and_close(
        &self,
        id: &SubagentId,
        spec: &IsolatedSpec,
        plan: &IsolationPlan,
    ) -> Result<(Status, Option<FailureReason>), EngineError> {
        let message = format!("herd: merge step {} ({id})", spec.step);
        let (dir, branch) = (plan.integration_path.clone(), spec.branch.clone());
        let merged = blocking(move || Git::new(&dir).merge(&branch, &message)).await?;
        let into = plan.integration_branch.clone();
        let now = now_ms();
        let (status, failure, mut events) = match merged {
            Ok(Merge::Merged(commit)) => {
                self.store().set_worktree_status(
                    &spec.worktree_id,
                    "merged",
                    None,
                    Some(&commit),
                )?;
                let ev = AgentEvent::WorktreeMerged { branch: spec.branch.clone(), into, commit };
                (Status::Completed, None, vec![ev])
            }
            Ok(Merge::NothingToMerge) => {
                // Whatever the agent left uncommitted (auto_commit: false) stays in its
                // worktree, which is then dirty: prune keeps it.
                let path = spec.path.clone();
                let uncommitted =
                    blocking(move || Git::new(&path).dirty_paths()).await?.unwrap_or_default();
                self.store().set_worktree_status(&spec.worktree_id, "merged", None, None)?;
                let ev =
                    AgentEvent::NothingToMerge { branch: spec.branch.clone(), into, uncommitted };
                (Status::Completed, None, vec![ev])
            }
            Ok(Merge::Conflict { files, output }) => {
                self.store().set_worktree_status(&spec.worktree_id, "conflict", None, None)?;
                let ev =
                    AgentEvent::MergeConflict { branch: spec.branch.clone(), into, files, output };
                (Status::Failed, Some(FailureReason::MergeConflict), vec![ev])
            }
            Err(e) => {
                self.store().set_worktree_status(&spec.worktree_id, "failed", None, None)?;
                let message = format!("merging {} into {into}: {e}", spec.branch);
                (Status::Failed, Some(FailureReason::Workspace { message }), Vec::new())
            }
        };
        if let Some(f) = &failure {
            events.push(AgentEvent::SubagentFailed { reason: f.to_string() });
        }
        let close_reason =
            failure.as_ref().map_or_else(|| "merged".to_owned(), |f| f.code().into());
        events.push(AgentEvent::SubagentClosed {
            final_status: status.to_string(),
            close_reason: close_reason.clone(),
        });
        let update = Update {
            status: Some(status),
            failure: failure.clone(),
            closed_at: Some(now),
            close_reason: Some(close_reason),
            events,
            ..Update::default()
        };
        self.writer().update(id, update).await?;
        Ok((status, failure))
    }
}

/// What a lock is taken on: the working tree that holds `dir` (a lock on a worktree covers
/// all of it), else `dir` itself; canonical either way.
pub(crate) fn lock_key(dir: &Path) -> String {
    let d = absolute(dir);
    // A few `stat`s up the tree: cheaper than a hop to a blocking thread.
    super::git::worktree_top(&d).unwrap_or(d).display().to_string()
}

/// The first 12 characters of a commit id.
pub(crate) fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// Run blocking git/file work off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| EngineError::Task(e.to_string()))
}

//! A plan's isolated steps: one repository and integration worktree for the run, each step's
//! explicit base resolved up front, and the worktree spec of each attempt.

use std::collections::HashMap;

use herd_core::plan::Plan;
use herd_core::workspace::WorkspaceMode;

use super::PlanOptions;
use crate::workspace::{Git, IsolatedSpec, IsolationPlan, absolute};
use crate::{Engine, EngineError, TaskRequest};

/// Each isolated step's explicit `base`: (commit, as written), by step index.
pub(super) type Bases = HashMap<usize, (String, String)>;
/// A plan's isolation and its steps' bases.
pub(super) type Isolation = (IsolationPlan, Bases);

/// The worktree of `step`'s `attempt`: from its own `base`, else from the integration branch
/// when it depends on isolated steps (so it sees their merged work), else from the plan's base.
pub(super) fn isolated_spec(
    iso: &IsolationPlan,
    bases: &Bases,
    plan: &Plan,
    step: usize,
    attempt: u32,
    isolated: &[bool],
    req: &TaskRequest,
) -> Result<IsolatedSpec, EngineError> {
    let s = &plan.steps[step];
    let base = match bases.get(&step) {
        Some(b) => b.clone(),
        None if s.deps.iter().any(|&d| isolated[d]) => {
            let tip = iso.tip().map_err(|e| EngineError::Workspace(e.to_string()))?;
            (tip, iso.integration_branch.clone())
        }
        None => (iso.base.clone(), "HEAD".into()),
    };
    Ok(attempt_spec(iso, s, attempt, base, req))
}

/// The worktree of `s`'s `attempt`, from `base` (commit, as written).
pub(crate) fn attempt_spec(
    iso: &IsolationPlan,
    s: &herd_core::plan::Step,
    attempt: u32,
    base: (String, String),
    req: &TaskRequest,
) -> IsolatedSpec {
    // A retry gets a fresh worktree and branch; the failed attempt's stay for a person.
    let name = if attempt > 1 { format!("{}-attempt{attempt}", s.id) } else { s.id.clone() };
    let prompt = s.fields.prompt.as_deref().unwrap_or("");
    let mut spec = iso.spec(
        &name,
        base,
        s.fields.setup.clone(),
        s.fields.auto_commit.unwrap_or(true),
        prompt,
        req.timeout,
    );
    spec.step = s.id.clone();
    spec
}

impl Engine {
    /// For a plan with isolated steps: the repository (one for all of them), the integration
    /// worktree, and each step's explicit `base` resolved to a commit — all before any step
    /// starts, so a bad ref or a directory outside git fails the plan at once.
    pub(super) async fn plan_isolation(
        &self,
        plan: &Plan,
        opts: &PlanOptions,
        plan_id: &str,
    ) -> Result<Option<Isolation>, EngineError> {
        let isolated: Vec<usize> = (0..plan.steps.len())
            .filter(|&i| plan.steps[i].workspace() == WorkspaceMode::Isolated)
            .collect();
        let Some(&first) = isolated.first() else { return Ok(None) };
        let cwd = |i: usize| opts.requests[i].cwd.clone();
        let into = opts.into.as_deref().or(plan.into.as_deref());
        let root = plan.worktree_root.as_deref();
        let iso = self.open_isolation(&cwd(first), plan_id, root, into).await?;
        let mut bases = HashMap::new();
        let checked = (|| {
            for &i in &isolated {
                let s = &plan.steps[i];
                let top = Git::new(cwd(i)).toplevel().map_err(|e| e.to_string())?;
                if absolute(&top) != iso.repo {
                    return Err(format!(
                        "step {}: its directory is in the repository {}, not {}; isolated steps \
                         of one plan share one repository",
                        s.id,
                        top.display(),
                        iso.repo.display()
                    ));
                }
                if let Some(b) = &s.fields.base {
                    let c = iso.resolve_base(b).map_err(|e| format!("step {}: base: {e}", s.id))?;
                    bases.insert(i, (c, b.clone()));
                }
            }
            Ok(())
        })();
        if let Err(e) = checked {
            let _ = self.close_isolation(&iso).await?;
            return Err(EngineError::Workspace(e));
        }
        Ok(Some((iso, bases)))
    }
}

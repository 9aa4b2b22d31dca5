//! Plans through the service: read and validate a plan (file or text, size-capped), resolve
//! each step's request on the tasks' path, admit it, run it in the pool, report its end.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use herd_core::plan::{Plan, PlanFile, Step, parse_duration};
use herd_core::workspace::WorkspaceMode;
use herd_core::{BackendKind, SubagentId};
use serde::Serialize;
use tokio::sync::mpsc;

use super::Service;
use super::api::{Caller, PlanSource, PlanSpec, TaskSpec, WorkspaceSpec};
use super::error::ApiError;
use super::jobs::Ended;
use super::request::{Fallbacks, Project, resolve};
use crate::TaskRequest;
use crate::plan::{
    DEFAULT_MAX_QUEUE, DEFAULT_SUMMARY_CAP, PlanOptions, PlanReport, PlanUpdate, PriorStep, Resume,
    plan_bound,
};

/// The largest plan file herd reads.
pub const MAX_PLAN_BYTES: u64 = 4 << 20;

/// A plan that has been admitted and started.
#[derive(Debug)]
pub struct PlanStarted {
    pub id: String,
    pub name: String,
    pub steps: usize,
    /// Each change as it is stored: a step started, finished; the counts.
    pub updates: mpsc::UnboundedReceiver<PlanUpdate>,
}

/// What a plan would run, without running it (`herd run --dry-run`).
#[derive(Debug, Clone, Serialize)]
pub struct PlanOutline {
    pub name: String,
    pub steps: usize,
    /// Steps that can run together, in order; each step with its CLI and workspace.
    pub layers: Vec<Vec<OutlineStep>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutlineStep {
    pub id: String,
    pub cli: BackendKind,
    pub workspace: WorkspaceMode,
}

/// A validated plan and each step's resolved request.
pub(super) struct Loaded {
    pub(super) plan: Plan,
    pub(super) requests: Vec<TaskRequest>,
    pub(super) source_file: Option<String>,
    /// The project's `max_per_parent`.
    per_parent: Option<u32>,
}

impl Service {
    /// Validate `spec` and start it: returns once it is admitted; its steps run in the pool.
    pub async fn run_plan(&self, caller: &Caller, spec: PlanSpec) -> Result<PlanStarted, ApiError> {
        crate::RunCaller::of(caller).check_depth()?;
        let loaded = self.load_plan(caller, &spec)?;
        self.admit(&loaded, &spec)?;
        let id = format!("pln_{}", SubagentId::generate());
        self.start_plan(loaded, spec, id, None).await
    }

    /// Run again the steps of plan `id` that had not completed when it ended (its herd died:
    /// `interrupted`; or it failed or was cancelled), under the same id. Completed steps are not
    /// run again; their results still feed their dependents. Each step works where it did.
    pub async fn resume_plan(
        &self,
        caller: &Caller,
        id: &str,
        max_concurrent: Option<usize>,
        non_interactive: bool,
    ) -> Result<PlanStarted, ApiError> {
        crate::RunCaller::of(caller).check_depth()?;
        let (name, plan_id, text, done) = {
            let store = self.engine.store();
            let o = store
                .orchestration(id.trim())?
                .ok_or_else(|| ApiError::not_found(format!("no plan {id}")))?;
            match o.status.as_str() {
                "interrupted" | "failed" | "cancelled" => {}
                "completed" => {
                    return Err(ApiError::precondition(format!(
                        "plan {} completed; nothing to resume",
                        o.id
                    )));
                }
                s => {
                    return Err(ApiError::precondition(format!(
                        "plan {} is {s}: a herd still runs it (resume a plan once it has ended)",
                        o.id
                    )));
                }
            }
            let plan_json = store
                .orchestration_plan(&o.id)?
                .ok_or_else(|| ApiError::not_found(format!("no plan {id}")))?;
            let steps = store.steps(&o.id)?;
            let mut done = HashMap::new();
            let tried = steps
                .iter()
                .filter(|s| s.status != "completed" && s.attempts > 0)
                .map(|s| (s.step_key.clone(), s.attempts))
                .collect();
            for s in steps.iter().filter(|s| s.status == "completed") {
                let run = s.subagent_id.as_deref().and_then(|r| r.parse().ok());
                let Some(row) = run.and_then(|r| store.get(&r).ok().flatten()) else { continue };
                done.insert(
                    s.step_key.clone(),
                    PriorStep {
                        subagent_id: row.id.clone(),
                        result: row.result.unwrap_or_default(),
                        cost_usd: row.cost_usd.unwrap_or(0.0),
                        usage: row.usage,
                        attempts: s.attempts,
                    },
                );
            }
            (o.name, o.id, resumable_text(&plan_json, &steps)?, Resume { done, tried })
        };
        // Isolated steps merge where the completed ones did (`--into` is not in the plan).
        let into = self.plan(&plan_id).ok().and_then(|p| p.integration_branch);
        let spec = PlanSpec {
            source: PlanSource::Text { name, text },
            max_concurrent,
            into,
            non_interactive,
        };
        let loaded = self.load_plan(caller, &spec)?;
        self.admit(&loaded, &spec)?;
        if !self.engine.store().reopen_orchestration(&plan_id, self.engine.owner())? {
            return Err(ApiError::precondition(format!(
                "plan {plan_id} was taken up by another herd meanwhile"
            )));
        }
        self.start_plan(loaded, spec, plan_id, Some(done)).await
    }

    /// Refuse a plan that could never fit the pool.
    fn admit(&self, loaded: &Loaded, spec: &PlanSpec) -> Result<(), ApiError> {
        let plan = &loaded.plan;
        let bound = plan_bound(plan, spec.max_concurrent, loaded.per_parent);
        let max_queue = plan.limits.max_queue.map_or(DEFAULT_MAX_QUEUE, |q| q as usize);
        self.pool.admit_plan(plan.steps.len(), bound, max_queue)
    }

    /// Run a loaded plan as `id` in the pool; returns once it is stored.
    async fn start_plan(
        &self,
        loaded: Loaded,
        spec: PlanSpec,
        id: String,
        resume: Option<Resume>,
    ) -> Result<PlanStarted, ApiError> {
        let Loaded { plan, requests, source_file, per_parent } = loaded;
        let (stored_tx, stored) = tokio::sync::oneshot::channel();
        let opts = PlanOptions {
            max_concurrent: spec.max_concurrent,
            source_file,
            summary_cap: DEFAULT_SUMMARY_CAP,
            requests,
            id: Some(id.clone()),
            into: spec.into,
            pool: Some(Arc::clone(&self.pool.places)),
            pool_shared: self.shared,
            stored: Some(stored_tx),
            max_per_parent: per_parent,
            resume,
        };
        let (tx, updates) = mpsc::unbounded_channel();
        let running = self.jobs.insert(&id);
        let engine = Arc::clone(&self.engine);
        let (name, steps) = (plan.name.clone(), plan.steps.len());
        tokio::spawn(async move {
            let stop = running.stop.clone();
            let report = engine.run_plan(&plan, opts, stop, Some(tx)).await;
            running.finish(match report {
                Ok(r) => Ended::Plan(Box::new(r)),
                Err(e) => Ended::Error(e.into()),
            });
        });
        // Returned once it is stored (so its status can be read); a plan that fails before
        // (a worktree it cannot set up) is this call's error.
        if stored.await.is_err() {
            return Err(match self.plan_report(&id).await {
                Err(e) => e,
                Ok(_) => ApiError::internal(format!("plan {id} ended before it was stored")),
            });
        }
        Ok(PlanStarted { id, name, steps, updates })
    }

    /// What `spec` would run, checked as [`run_plan`](Self::run_plan) checks it.
    pub fn check_plan(&self, caller: &Caller, spec: &PlanSpec) -> Result<PlanOutline, ApiError> {
        let Loaded { plan, requests, .. } = self.load_plan(caller, spec)?;
        let layers = plan
            .layers()
            .iter()
            .map(|layer| {
                layer
                    .iter()
                    .map(|&i| OutlineStep {
                        id: plan.steps[i].id.clone(),
                        cli: requests[i].backend,
                        workspace: plan.steps[i].workspace(),
                    })
                    .collect()
            })
            .collect();
        Ok(PlanOutline { name: plan.name.clone(), steps: plan.steps.len(), layers })
    }

    /// The report of a plan this process runs, once it has ended.
    pub async fn plan_report(&self, id: &str) -> Result<PlanReport, ApiError> {
        let job = self
            .jobs
            .get(id)
            .ok_or_else(|| ApiError::not_found(format!("plan {id} is not run by this process")))?;
        let mut done = job.done.clone();
        let ended = done
            .wait_for(Option::is_some)
            .await
            .map_err(|_| ApiError::internal("the plan's task ended without a report"))?
            .clone();
        match ended.as_deref() {
            Some(Ended::Plan(r)) => Ok((**r).clone()),
            Some(Ended::Error(e)) => Err(e.clone()),
            _ => Err(ApiError::internal(format!("{id} is not a plan"))),
        }
    }

    pub(super) fn load_plan(&self, caller: &Caller, spec: &PlanSpec) -> Result<Loaded, ApiError> {
        let (file, text, base_dir, source_file) = match &spec.source {
            PlanSource::File(p) => {
                let path = caller.path(p, "plan")?;
                if caller.roots.is_some() && !has_plan_extension(&path) {
                    return Err(ApiError::invalid(format!(
                        "plan {}: a plan file ends in .yml, .yaml or .json",
                        p.display()
                    )));
                }
                let text = read_plan_file(&path, &p.display().to_string())?;
                let name = p.display().to_string();
                (name.clone(), text, caller.cwd.clone(), Some(name))
            }
            PlanSource::Text { name, text } => {
                if text.len() as u64 > MAX_PLAN_BYTES {
                    return Err(ApiError::invalid(format!(
                        "plan {name}: {} bytes; the limit is {MAX_PLAN_BYTES}",
                        text.len()
                    )));
                }
                (name.clone(), text.clone(), caller.cwd.clone(), None)
            }
        };
        let mut project = Project::open(&caller.project_root)?;
        let mut parsed =
            PlanFile::parse(&file, &text).map_err(|e| ApiError::invalid(e.to_string()))?;
        fill_agent_clis(&mut parsed, &file, &mut project)?;
        let plan = parsed.validate(&file, &text).map_err(|e| ApiError::invalid(e.to_string()))?;
        let plan_timeout = plan.limits.timeout.as_deref().and_then(|t| parse_duration(t).ok());
        let fallbacks = Fallbacks { timeout: plan_timeout, step: true };
        let mut requests = Vec::with_capacity(plan.steps.len());
        for (i, s) in plan.steps.iter().enumerate() {
            let at = |e: ApiError| {
                let field = e.field_name().map(|f| format!(".{f}")).unwrap_or_default();
                ApiError::invalid(format!(
                    "invalid plan {file}:\n  {file}: steps[{i}] ({}){field}: {}",
                    s.id, e.message
                ))
            };
            let mut step = step_spec(s, &base_dir);
            step.non_interactive = spec.non_interactive;
            let r = resolve(&mut project, caller, step, fallbacks).map_err(at)?;
            requests.push(r.req);
        }
        Ok(Loaded { plan, requests, source_file, per_parent: project.config.max_per_parent })
    }
}

fn has_plan_extension(p: &Path) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "yml" | "yaml" | "json"))
}

/// Read a plan file: a regular file (a FIFO or device is refused before it is opened for
/// reading), at most [`MAX_PLAN_BYTES`], UTF-8.
fn read_plan_file(path: &Path, shown: &str) -> Result<String, ApiError> {
    let fail = |m: String| ApiError::invalid(format!("cannot read plan {shown}: {m}"));
    let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    if meta.len() > MAX_PLAN_BYTES {
        return Err(fail(format!("{} bytes; the limit is {MAX_PLAN_BYTES}", meta.len())));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PLAN_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_PLAN_BYTES {
        return Err(fail(format!("more than {MAX_PLAN_BYTES} bytes")));
    }
    String::from_utf8(bytes).map_err(|e| {
        fail(format!(
            "not UTF-8 text (the first bad byte is at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Steps naming an agent run on the agent's CLI unless the step or the plan's defaults name
/// one: filled in before validation, which checks what a step's CLI allows (`command`).
fn fill_agent_clis(plan: &mut PlanFile, file: &str, project: &mut Project) -> Result<(), ApiError> {
    let default_agent = plan.defaults.agent.clone();
    let default_cli = plan.defaults.cli.is_some();
    for (i, step) in plan.steps.iter_mut().enumerate() {
        let Some(name) = step.fields.agent.clone().or_else(|| default_agent.clone()) else {
            continue;
        };
        let found = project.agent(&name).map_err(|e| {
            ApiError::invalid(format!(
                "invalid plan {file}:\n  {file}: steps[{i}] ({}).agent: {}",
                step.id, e.message
            ))
        })?;
        if step.fields.cli.is_none() && !default_cli {
            step.fields.cli = found.def.cli.map(|c| c.to_string());
        }
        // An ACP agent's program comes with it unless the step names one.
        if step.fields.cli.as_deref().or(plan.defaults.cli.as_deref()) == Some("acp")
            && step.fields.acp.is_none()
            && plan.defaults.acp.is_none()
        {
            step.fields.acp.clone_from(&found.def.acp);
        }
    }
    Ok(())
}

/// A step as a task request: its fields (with the plan's defaults), its directory relative to
/// the plan's.
fn step_spec(step: &Step, base_dir: &Path) -> TaskSpec {
    let f = &step.fields;
    let cwd: PathBuf = match &f.cwd {
        Some(c) if Path::new(c).is_absolute() => PathBuf::from(c),
        Some(c) => base_dir.join(c),
        None => base_dir.to_path_buf(),
    };
    TaskSpec {
        prompt: f.prompt.clone().unwrap_or_default(),
        name: Some(step.id.clone()),
        // Validated already.
        cli: f.cli.as_deref().and_then(|c| c.parse().ok()),
        // An ACP step's agent program travels as the command, like `--cli acp -- PROGRAM`.
        command: match (&f.command, &f.acp) {
            (Some(c), _) => c.clone(),
            (None, Some(a)) => a.command.clone(),
            (None, None) => Vec::new(),
        },
        agent: f.agent.clone(),
        inputs: f.inputs.clone().unwrap_or_default(),
        model: f.model.clone(),
        tools: f.tools.clone(),
        allow: f.allow.clone().unwrap_or_default(),
        deny: f.deny.clone().unwrap_or_default(),
        ask: f.ask.clone().unwrap_or_default(),
        max_turns: f.max_turns,
        timeout: f.timeout.as_deref().and_then(|t| parse_duration(t).ok()),
        cwd: Some(cwd),
        // The executor gives each attempt its lock or worktree.
        workspace: WorkspaceSpec::default(),
        auto_approve: (f.auto_approve == Some(true)).then(Default::default),
        ..TaskSpec::default()
    }
}

/// A stored plan (the JSON of the validated plan) as plan text again: each step's fields as
/// written in a plan file, its directory the one it worked in (absolute, as stored).
fn resumable_text(plan_json: &str, steps: &[herd_store::StepRow]) -> Result<String, ApiError> {
    use serde_json::{Map, Value};
    let bad =
        |why: &str| ApiError::internal(format!("the stored plan cannot be read again: {why}"));
    let mut plan: Value = serde_json::from_str(plan_json).map_err(|e| bad(&e.to_string()))?;
    let cwd: HashMap<&str, &str> = steps
        .iter()
        .filter_map(|s| Some((s.step_key.as_str(), s.working_directory.as_deref()?)))
        .collect();
    let without_nulls = |v: &Value| -> Map<String, Value> {
        v.as_object()
            .map(|o| {
                o.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = without_nulls(&plan);
    out.remove("steps");
    if let Some(limits) = plan.get("limits") {
        out.insert("limits".into(), Value::Object(without_nulls(limits)));
    }
    let Some(list) = plan.get_mut("steps").and_then(Value::as_array_mut) else {
        return Err(bad("it has no steps"));
    };
    let mut written = Vec::with_capacity(list.len());
    for s in list.iter() {
        let id = s["id"].as_str().ok_or_else(|| bad("a step has no id"))?;
        let mut step = without_nulls(&s["fields"]);
        step.insert("id".into(), Value::from(id));
        if s["depends_on"].as_array().is_some_and(|d| !d.is_empty()) {
            step.insert("depends_on".into(), s["depends_on"].clone());
        }
        if let Some(dir) = cwd.get(id) {
            step.insert("cwd".into(), Value::from(*dir));
        }
        written.push(Value::Object(step));
    }
    out.insert("steps".into(), Value::Array(written));
    Ok(Value::Object(out).to_string())
}

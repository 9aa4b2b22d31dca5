//! What one plan step asks of a run: its task request (backend, spec, cwd, environment,
//! limits, permissions, workspace) and its prompt with its dependencies' results before it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_backends::{BackendKind, RunSpec};
use herd_core::context::{Part, assemble, fair_share};
use herd_core::plan::{Plan, Step, parse_duration};
use herd_core::workspace::{LockMode, WorkspaceMode};

use super::{DEFAULT_TIMEOUT, PlanOptions, StepOverlay};
use crate::TaskRequest;
use crate::workspace::WorkspaceReq;

/// The run a step asks for, with `prompt` as its task.
pub(super) fn step_request(
    step: &Step,
    prompt: String,
    opts: &PlanOptions,
    plan_timeout: Option<Duration>,
) -> TaskRequest {
    let base = opts.base_dir.as_path();
    let overlay = opts.overlays.get(&step.id).cloned().unwrap_or_default();
    let f = &step.fields;
    let backend = match f.cli.as_deref() {
        Some("command") => BackendKind::Command,
        _ => BackendKind::Claude,
    };
    let cwd = match &f.cwd {
        Some(c) if Path::new(c).is_absolute() => PathBuf::from(c),
        Some(c) => base.join(c),
        None => base.to_path_buf(),
    };
    let permissions = step_permissions(step, opts, &overlay);
    TaskRequest {
        name: Some(step.id.clone()),
        backend,
        spec: RunSpec {
            prompt,
            model: f.model.clone(),
            tools: f.tools.clone(),
            allow: f.allow.clone().unwrap_or_default(),
            deny: f.deny.clone().unwrap_or_default(),
            max_turns: f.max_turns,
            append_system_prompt: overlay
                .system_prompt
                .clone()
                .filter(|_| backend != BackendKind::Command),
            resume: None,
            command: f.command.clone().unwrap_or_default(),
            ask_first: Vec::new(),
            trust_project_settings: false,
        },
        cwd,
        env: overlay
            .env
            .iter()
            .cloned()
            .chain(
                overlay
                    .system_prompt
                    .filter(|_| backend == BackendKind::Command)
                    .map(|p| ("HERD_SYSTEM_PROMPT".to_owned(), p)),
            )
            .collect(),
        timeout: f
            .timeout
            .as_deref()
            .and_then(|t| parse_duration(t).ok())
            .or(plan_timeout)
            .unwrap_or(DEFAULT_TIMEOUT),
        max_output_bytes: None,
        permissions,
        workspace: match step.workspace() {
            WorkspaceMode::Shared => {
                WorkspaceReq::Shared { lock: None, wait: f.wait.unwrap_or(false) }
            }
            // Isolated steps get their worktree when they start (see `drive`).
            WorkspaceMode::Locked | WorkspaceMode::Isolated => WorkspaceReq::Shared {
                lock: Some(f.lock.unwrap_or(LockMode::Exclusive)),
                wait: f.wait.unwrap_or(false),
            },
        },
        plan_step: None,
    }
}

/// The plan's base permissions (project config) with the step's own `ask` rules and
/// `auto_approve` on top.
fn step_permissions(
    step: &Step,
    opts: &PlanOptions,
    overlay: &StepOverlay,
) -> crate::gate::Permissions {
    let mut p = opts.permissions.clone();
    p.hooks.extend(overlay.hooks.iter().cloned());
    let f = &step.fields;
    for r in f.ask.iter().flatten() {
        // Rules were checked when the plan was validated.
        if let Ok(rule) = herd_core::permission::Rule::parse(r) {
            p.policy.ask.push(rule);
        }
    }
    if f.auto_approve == Some(true) && p.auto_approve.is_none() {
        p.auto_approve = Some(Default::default());
    }
    p
}

/// The step's prompt with its dependencies' results (untrusted, capped, escaped) before it.
pub(super) fn step_prompt(
    plan: &Plan,
    step: usize,
    results: &HashMap<usize, String>,
    cap: usize,
) -> String {
    let s = &plan.steps[step];
    let task = s.fields.prompt.clone().unwrap_or_default();
    if s.deps.is_empty() {
        return task;
    }
    let texts: Vec<&str> =
        s.deps.iter().map(|d| results.get(d).map_or("", String::as_str)).collect();
    let shared = fair_share(&texts, cap);
    let parts: Vec<Part> = s
        .deps
        .iter()
        .zip(shared)
        .map(|(&d, text)| {
            let dep = &plan.steps[d];
            let mut content = format!("Result of step {}:\n{text}", dep.id);
            if let Some(outs) = dep.fields.outputs.as_ref().filter(|o| !o.is_empty()) {
                content.push_str(&format!("\nFiles this step produced: {}", outs.join(", ")));
            }
            Part { source: format!("step:{}", dep.id), trusted: false, content }
        })
        .collect();
    assemble(&parts, &task)
}

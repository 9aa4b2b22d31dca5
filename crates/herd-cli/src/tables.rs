//! How herd's lists and records read in a terminal: `herd ps`, `herd plans`, `herd show` of a
//! run or a plan, the calls `herd approve` lists — pure functions of the service's views.

use herd_engine::service::{PermissionRequestView, PlanView, RunView, StepView};

use crate::{board, fmt};

/// The ID column of a list: as long as keeps every id shown unique, at least 12.
fn id_width<'a>(ids: impl IntoIterator<Item = &'a str>) -> usize {
    board::unique_len(ids, board::MIN_ID)
}

/// A column as wide as its widest cell (or its heading), within `min..=max`.
fn width_of<'a>(cells: impl IntoIterator<Item = &'a str>, min: usize, max: usize) -> usize {
    cells.into_iter().map(|c| c.chars().count()).max().unwrap_or(min).clamp(min, max)
}

/// `herd ps`: one row per run (its step and plan, when it is one), then the steps of the plans
/// shown that have no run yet, each as `(plan id, step)`.
pub fn ps(rows: &[RunView], unstarted: &[(String, StepView)]) -> String {
    /// One line of the table, whatever it shows.
    struct Row<'a> {
        id: &'a str,
        status: String,
        name: &'a str,
        plan: Option<&'a str>,
        cli: &'a str,
        duration: String,
        turns: String,
        tokens: String,
        cost: String,
        prompt: String,
    }
    let mut table: Vec<Row<'_>> = rows
        .iter()
        .map(|r| Row {
            id: &r.id,
            status: match (&r.status, &r.failure) {
                (herd_core::Status::Failed, Some(f)) => format!("failed({})", f.code()),
                _ => r.state.to_string(),
            },
            name: &r.name,
            plan: r.plan_id.as_deref(),
            cli: &r.cli,
            duration: r.duration_ms.map_or_else(|| "-".into(), fmt::duration_ms),
            turns: r.num_turns.map_or_else(|| "-".into(), |n| n.to_string()),
            tokens: fmt::count(r.usage.input_tokens + r.usage.output_tokens),
            cost: fmt::cost(r.cost_usd),
            prompt: fmt::oneline(&r.prompt, 50),
        })
        .collect();
    table.extend(unstarted.iter().map(|(plan, s)| Row {
        id: "-",
        status: match &s.failure_reason {
            Some(r) if s.status == "failed" => {
                format!("failed({})", r.split('(').next().unwrap_or(r))
            }
            _ => s.state.clone(),
        },
        name: &s.id,
        plan: Some(plan),
        cli: "-",
        duration: "-".into(),
        turns: "-".into(),
        tokens: "-".into(),
        cost: "-".into(),
        prompt: if s.depends_on.is_empty() {
            "(not started)".to_owned()
        } else {
            format!("(after {})", s.depends_on.join(", "))
        },
    }));
    let id_w = id_width(rows.iter().map(|r| r.id.as_str()));
    let plan_w = board::unique_len(table.iter().filter_map(|r| r.plan), 8);
    let plan_col = plan_w.max(4);
    let status_w = width_of(table.iter().map(|r| r.status.as_str()), 6, 40);
    let name_w = width_of(table.iter().map(|r| r.name), 9, 20);
    let cli_w = width_of(table.iter().map(|r| r.cli), 3, 12);
    let mut out = format!(
        "{:<id_w$}  {:<status_w$}  {:<name_w$}  {:<plan_col$}  {:<cli_w$}  {:>8}  {:>5}  {:>7}  \
         {:>8}  PROMPT\n",
        "ID", "STATUS", "NAME/STEP", "PLAN", "CLI", "DURATION", "TURNS", "TOKENS", "COST"
    );
    for r in &table {
        out.push_str(&format!(
            "{:<id_w$}  {:<status_w$}  {:<name_w$}  {:<plan_col$}  {:<cli_w$}  {:>8}  {:>5}  \
             {:>7}  {:>8}  {}\n",
            board::prefix(r.id, id_w),
            r.status,
            board::cut(r.name, name_w),
            r.plan.map_or("-", |p| board::prefix(p, plan_w)),
            r.cli,
            r.duration,
            r.turns,
            r.tokens,
            r.cost,
            r.prompt
        ));
    }
    out
}

/// `herd plans`: one row per plan, without its steps.
pub fn plans(plans: &[PlanView]) -> String {
    let id_w = id_width(plans.iter().map(|p| p.id.as_str()));
    let name_w = width_of(plans.iter().map(|p| p.name.as_str()), 4, 24);
    let state_w = width_of(plans.iter().map(|p| p.state.as_str()), 5, 12);
    let mut out = format!(
        "{:<id_w$}  {:<name_w$}  {:<state_w$}  {:>5}  {:>6}  {:>5}  {:>8}  {:>7}  {:>8}  \
         CREATED\n",
        "ID", "NAME", "STATE", "DONE", "FAILED", "STEPS", "DURATION", "TOKENS", "COST"
    );
    for p in plans {
        out.push_str(&format!(
            "{:<id_w$}  {:<name_w$}  {:<state_w$}  {:>5}  {:>6}  {:>5}  {:>8}  {:>7}  {:>8}  {}\n",
            board::prefix(&p.id, id_w),
            board::cut(&p.name, name_w),
            p.state,
            p.completed_steps,
            p.failed_steps,
            p.total_steps,
            fmt::duration_ms(p.duration_ms),
            fmt::count(p.usage.input_tokens + p.usage.output_tokens),
            fmt::cost(Some(p.cost_usd)),
            fmt::time(p.created_at)
        ));
    }
    out
}

/// `key: value` lines, the keys right-aligned.
fn record(lines: &[(&str, String)]) -> String {
    let key_w = width_of(lines.iter().map(|(k, _)| *k), 0, 40);
    lines.iter().map(|(k, v)| format!("{k:>key_w$}: {v}\n")).collect()
}

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

/// `herd show PLAN`: what the plan is, every step with its whole run id and whole reason,
/// and the merges of its isolated steps.
pub fn plan(p: &PlanView) -> String {
    let steps = format!(
        "{} completed, {} failed, {} cancelled, {} running, {} pending of {}",
        p.completed_steps,
        p.failed_steps,
        p.cancelled_steps,
        p.running_steps,
        p.pending_steps,
        p.total_steps
    );
    let mut out = record(&[
        ("plan", p.id.clone()),
        ("name", p.name.clone()),
        ("status", p.state.clone()),
        ("file", or_dash(p.source_file.clone())),
        ("created", fmt::time(p.created_at)),
        ("duration", fmt::duration_ms(p.duration_ms)),
        ("steps", steps),
        ("tokens", format!("{} in, {} out", p.usage.input_tokens, p.usage.output_tokens)),
        ("cost", fmt::cost(Some(p.cost_usd))),
        ("merged into", or_dash(p.integration_branch.clone())),
    ]);
    out.push('\n');
    // Reasons whole: this is where a cut one is read.
    out.push_str(&board::table(p, usize::MAX / 2, true));
    let merges: Vec<_> = p.worktrees.iter().filter(|w| w.kind == "step").collect();
    if !merges.is_empty() {
        out.push_str("\nmerges:\n");
        for w in merges {
            let into = w.integration_branch.as_deref().unwrap_or("-");
            let commit = w.merge_commit.as_deref().map(|c| format!(" ({c})")).unwrap_or_default();
            out.push_str(&format!(
                "  {:<16} {} → {into}: {}{commit}\n",
                w.step, w.branch, w.status
            ));
        }
    }
    out
}

/// `herd show RUN`: everything the record says of a run, then its result.
pub fn run(r: &RunView) -> String {
    let worktree = r.worktree.as_ref().map(|w| {
        let into = w.integration_branch.as_ref().map(|b| format!(" → {b}")).unwrap_or_default();
        format!("{} ({}{into}, {})", w.path, w.branch, w.status)
    });
    let plan =
        r.plan_id.as_ref().map(|p| format!("{p}, step {}", r.step.clone().unwrap_or_default()));
    let reason = match (&r.failure_reason, r.unanswered_denials) {
        (None, n) if n > 0 => Some(format!("{n} tool call(s) denied because nobody answered")),
        (f, _) => f.clone(),
    };
    let waiting: Vec<String> = r
        .pending_permissions
        .iter()
        .map(|p| format!("{} — herd approve {}", fmt::call(p), p.id))
        .collect();
    let exit = r.exit_code.map(|c| c.to_string()).or(r.exit_signal.map(|s| format!("signal {s}")));
    let mut out = record(&[
        ("id", r.id.clone()),
        ("name", r.name.clone()),
        ("status", r.state.to_string()),
        ("reason", or_dash(reason)),
        ("plan", or_dash(plan)),
        ("waiting for", if waiting.is_empty() { "-".into() } else { waiting.join("; ") }),
        ("cli", r.cli.clone()),
        ("model", or_dash(r.model.clone())),
        ("cwd", r.cwd.clone()),
        ("worktree", or_dash(worktree)),
        ("native session", or_dash(r.native_session_id.clone())),
        ("created", fmt::time(r.created_at)),
        ("duration", r.duration_ms.map_or_else(|| "-".into(), fmt::duration_ms)),
        ("turns", or_dash(r.num_turns.map(|n| n.to_string()))),
        (
            "tokens",
            format!(
                "{} in, {} out, {} cache read, {} cache write",
                r.usage.input_tokens,
                r.usage.output_tokens,
                r.usage.cache_read_input_tokens,
                r.usage.cache_creation_input_tokens
            ),
        ),
        ("cost", fmt::cost(r.cost_usd)),
        ("pid", or_dash(r.pid.map(|p| p.to_string()))),
        ("exit", or_dash(exit)),
        ("transcript", r.transcript.display().to_string()),
        ("prompt", fmt::oneline(&r.prompt, 200)),
    ]);
    if let Some(res) = &r.result {
        let note = if r.result_truncated { " (truncated)" } else { "" };
        out.push_str(&format!("\nresult{note}:\n{res}\n"));
    }
    out
}

/// The calls waiting for a person, each with who asks (the step and plan, when a step does)
/// and how to answer.
pub fn pending(rows: &[PermissionRequestView]) -> String {
    if rows.is_empty() {
        return "no tool call is waiting for a person\n".into();
    }
    let mut out = String::new();
    for r in rows {
        let who = match (&r.plan_id, &r.step) {
            (Some(plan), Some(step)) => format!("step {step} of {plan} ({})", r.subagent_id),
            _ => format!("{} ({})", r.run_name, r.subagent_id),
        };
        out.push_str(&format!(
            "{}  {who}\n    wants {}  ({}s left)\n",
            r.id,
            fmt::call(r),
            r.expires_in_s
        ));
    }
    out.push_str("answer with: herd approve ID [--always] | herd deny ID [--reason TEXT]\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{plan_view, request, run_of};

    /// The plan's runs as `herd ps` gets them, and its steps that have none.
    fn listed() -> (Vec<RunView>, Vec<(String, StepView)>) {
        let p = plan_view();
        let steps = p.steps.clone().unwrap_or_default();
        let runs = steps.iter().filter(|s| s.subagent_id.is_some()).map(|s| run_of(&p, s));
        let unstarted = steps.iter().filter(|s| s.subagent_id.is_none());
        (runs.collect(), unstarted.map(|s| (p.id.clone(), s.clone())).collect())
    }

    #[test]
    fn ps_names_each_run_by_its_step_and_plan_with_ids_that_differ() {
        let (runs, unstarted) = listed();
        let table = ps(&runs, &unstarted);
        insta::assert_snapshot!(table);
        let ids: Vec<&str> =
            table.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
        let shown: std::collections::HashSet<&&str> = ids.iter().filter(|i| **i != "-").collect();
        assert_eq!(shown.len(), runs.len(), "ids are not unique as shown:\n{table}");
        // Every column lines up: the PROMPT heading starts where each prompt does.
        let at = table.lines().next().unwrap().find("PROMPT").unwrap();
        for l in table.lines().skip(1) {
            let prompt = l.char_indices().nth(at - 1).map(|(i, _)| &l[i..]).unwrap();
            assert!(prompt.starts_with(" Do the") || prompt.starts_with(" ("), "{l}");
        }
    }

    #[test]
    fn plans_show_and_approve_read_well() {
        let mut p = plan_view();
        let mut ended = p.clone();
        ended.id = "pln_01kaq2zz00000000000000000".into();
        (ended.name, ended.status, ended.state) =
            ("nightly".into(), "completed".into(), "completed".into());
        p.steps = None;
        insta::assert_snapshot!("plans", plans(&[p, ended]));
        insta::assert_snapshot!("plan", plan(&plan_view()));
        let p = plan_view();
        let steps = p.steps.as_deref().unwrap_or_default();
        let mut r = run_of(&p, &steps[1]);
        r.pending_permissions = vec![request()];
        r.result = Some("clippy: 2 warnings".into());
        insta::assert_snapshot!("run", run(&r));
        let mut other = request();
        (other.id, other.plan_id, other.step) = ("perm_01kaq3vd".into(), None, None);
        other.run_name = "claude".into();
        other.input_preview = r#"{"file_path":"/work/app/src/main.rs","content":"…"}"#.into();
        other.tool = "Write".into();
        insta::assert_snapshot!("pending", pending(&[request(), other]));
        assert_eq!(pending(&[]), "no tool call is waiting for a person\n");
    }
}

//! Views as a run of herd leaves them, for the tests of what a person reads: a plan in the
//! middle of its run (every state a step can show), its runs, a call waiting for a person.

use std::path::PathBuf;

use herd_core::{FailureReason, Status};
use herd_engine::service::{PermissionRequestView, PlanView, RunState, RunView, StepView};

pub fn step(id: &str, status: &str, state: &str, run: Option<&str>) -> StepView {
    StepView {
        id: id.into(),
        name: id.into(),
        status: status.into(),
        state: state.into(),
        failure_reason: None,
        subagent_id: run.map(Into::into),
        attempts: u32::from(run.is_some()),
        depends_on: Vec::new(),
        model: None,
        num_turns: None,
        usage: Default::default(),
        cost_usd: None,
        unanswered_denials: 0,
        result: None,
        started_at: None,
        completed_at: None,
        duration_ms: None,
        outputs: Vec::new(),
    }
}

/// A plan in the middle of its run: every state a step can show.
pub fn plan_view() -> PlanView {
    let mut steps = vec![
        step("scan", "completed", "completed", Some("01kaq3v8d0m2x5c7e9g1j3l5n7")),
        // Started in the same millisecond as scan: the ids differ only near their end.
        step("lint", "running", "waiting", Some("01kaq3v8d0m2x5c7e9g1j4w6e8")),
        step(
            "build-the-release-artifacts",
            "running",
            "running",
            Some("01kaq3v8e4r6t8v0x2z4b6d8f0"),
        ),
        step("review", "running", "starting", Some("01kaq3v8e5h7k9m1p3r5t7v9x1")),
        step("fix", "failed", "failed", Some("01kaq3v9a1b3c5d7e9f1h3j5k7")),
        step("docs", "running", "queued", Some("01kaq3v9a2z8x6v4t2r0p8n6m4")),
        step("report", "pending", "pending", None),
        step("after-fix", "failed", "failed", None),
        step("notes", "completed", "completed_with_denials", Some("01kaq3vb7c5e3g1j9l7n5q3s1u")),
    ];
    steps[0].duration_ms = Some(4200);
    steps[0].num_turns = Some(2);
    steps[0].usage.input_tokens = 1200;
    steps[0].usage.output_tokens = 345;
    steps[0].cost_usd = Some(0.0123);
    steps[1].duration_ms = Some(2100);
    steps[1].num_turns = Some(1);
    steps[2].duration_ms = Some(61_000);
    steps[2].num_turns = Some(14);
    steps[2].usage.input_tokens = 123_456;
    steps[2].cost_usd = Some(1.5);
    steps[4].failure_reason = Some(
        "api_error(500): mock: forced 500 — the model API answered with an internal error \
         after 3 retries, giving up"
            .into(),
    );
    steps[4].duration_ms = Some(900);
    steps[7].failure_reason = Some("dependency_failed(fix)".into());
    steps[8].unanswered_denials = 2;
    steps[8].duration_ms = Some(3000);
    PlanView {
        id: "pln_01kaq3v8c2000000000000000".into(),
        name: "release".into(),
        strategy: "dag".into(),
        status: "running".into(),
        state: "running".into(),
        source_file: Some("release.yml".into()),
        total_steps: 9,
        completed_steps: 2,
        failed_steps: 2,
        cancelled_steps: 0,
        running_steps: 4,
        pending_steps: 1,
        cost_usd: 1.5123,
        usage: Default::default(),
        created_at: 1_763_870_335_000,
        completed_at: None,
        duration_ms: 65_000,
        integration_branch: None,
        steps: Some(steps),
        worktrees: Vec::new(),
    }
}

/// The run of one of [`plan_view`]'s steps, as `herd ps` lists it.
pub fn run_of(p: &PlanView, step: &StepView) -> RunView {
    let (status, failure) = match step.status.as_str() {
        "failed" => (
            Status::Failed,
            Some(FailureReason::ApiError { status: Some(500), message: "mock: forced 500".into() }),
        ),
        "completed" => (Status::Completed, None),
        _ if step.state == "queued" => (Status::Queued, None),
        _ => (Status::Running, None),
    };
    let state = match step.state.as_str() {
        "waiting" => RunState::Waiting,
        "completed_with_denials" => RunState::CompletedWithDenials,
        "queued" => RunState::Queued,
        _ => RunState::of(status, false, 0),
    };
    let id = step.subagent_id.clone().unwrap_or_default();
    RunView {
        transcript: PathBuf::from(format!("/work/app/.herd/transcripts/{id}.jsonl")),
        id,
        parent_session_id: "ses_fixture".into(),
        name: step.id.clone(),
        cli: "claude".into(),
        status,
        state,
        failure_reason: failure.as_ref().map(ToString::to_string),
        plan_id: Some(p.id.clone()),
        step: Some(step.id.clone()),
        prompt: format!("Do the {} part of the release\nwith care", step.id),
        model: Some("claude-sonnet-4-5".into()),
        cwd: "/work/app".into(),
        native_session_id: Some("6f1d9a52-0c1e-4a8b-9d51-3f2a7c0e8b44".into()),
        result: None,
        result_truncated: false,
        num_turns: step.num_turns,
        usage: step.usage,
        cost_usd: step.cost_usd,
        pid: None,
        exit_code: None,
        exit_signal: None,
        unanswered_denials: step.unanswered_denials,
        created_at: p.created_at,
        started_at: Some(p.created_at + 100),
        completed_at: None,
        duration_ms: step.duration_ms,
        worktree: None,
        pending_permissions: Vec::new(),
        failure,
        closed: false,
    }
}

/// A call of [`plan_view`]'s `lint` step waiting for a person.
pub fn request() -> PermissionRequestView {
    PermissionRequestView {
        id: "perm_01kaq3v9c4e6g8j0l2n4q6s8u0".into(),
        subagent_id: "01kaq3v8d0m2x5c7e9g1j4w6e8".into(),
        run_name: "lint".into(),
        plan_id: Some("pln_01kaq3v8c2000000000000000".into()),
        step: Some("lint".into()),
        tool: "Bash".into(),
        input_preview: r#"{"command":"rm -rf build && cargo clippy","description":"lint"}"#.into(),
        input_sha256: "0".repeat(64),
        status: "pending".into(),
        created_at: 1_763_870_400_000,
        expires_at: 1_763_870_520_000,
        expires_in_s: 97,
        always: false,
        reason: None,
        decided_by: None,
    }
}

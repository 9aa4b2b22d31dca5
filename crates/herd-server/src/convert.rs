//! Between the engine service's vocabulary and the wire's: every `ApiError` code to its gRPC
//! status (and back, for clients), views and stored events to their protobuf messages.

use herd_core::{AgentEvent, Status as RunStatus, Usage};
use herd_engine::service::{
    ApiError, Code, PermissionRequestView, PlanEventView, PlanView, RunState, RunView, StoredEvent,
    WorktreeView,
};

use crate::pb;

/// The gRPC code of a service error code: one to one.
pub fn grpc_code(code: Code) -> tonic::Code {
    match code {
        Code::InvalidArgument => tonic::Code::InvalidArgument,
        Code::NotFound => tonic::Code::NotFound,
        Code::ResourceExhausted => tonic::Code::ResourceExhausted,
        Code::FailedPrecondition => tonic::Code::FailedPrecondition,
        Code::PermissionDenied => tonic::Code::PermissionDenied,
        Code::Cancelled => tonic::Code::Cancelled,
        Code::DeadlineExceeded => tonic::Code::DeadlineExceeded,
        Code::Internal => tonic::Code::Internal,
    }
}

/// A service error as a gRPC status: its code, its message, its details (JSON) as the
/// status's binary details.
pub fn status(e: ApiError) -> tonic::Status {
    let code = grpc_code(e.code);
    match &e.details {
        Some(d) => tonic::Status::with_details(code, e.message, d.to_string().into_bytes().into()),
        None => tonic::Status::new(code, e.message),
    }
}

/// A gRPC status as the service error a local call would have returned (a client renders
/// and exits alike either way). Codes the service never uses become `INTERNAL`, saying so.
pub fn api_error(s: &tonic::Status) -> ApiError {
    let code = match s.code() {
        tonic::Code::InvalidArgument => Code::InvalidArgument,
        tonic::Code::NotFound => Code::NotFound,
        tonic::Code::ResourceExhausted => Code::ResourceExhausted,
        tonic::Code::FailedPrecondition => Code::FailedPrecondition,
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => Code::PermissionDenied,
        tonic::Code::Cancelled => Code::Cancelled,
        tonic::Code::DeadlineExceeded => Code::DeadlineExceeded,
        tonic::Code::Internal => Code::Internal,
        other => {
            return ApiError::internal(format!("the daemon answered {other:?}: {}", s.message()));
        }
    };
    let mut e = ApiError::new(code, s.message());
    if let Ok(v) = serde_json::from_slice(s.details()) {
        e = e.with_details(v);
    }
    e
}

pub fn run_status(s: RunStatus) -> pb::SubagentStatus {
    use pb::SubagentStatus as P;
    match s {
        RunStatus::Pending => P::Pending,
        RunStatus::Queued => P::Queued,
        RunStatus::Running => P::Running,
        RunStatus::WaitingForMerge => P::WaitingForMerge,
        RunStatus::Completed => P::Completed,
        RunStatus::Failed => P::Failed,
        RunStatus::Cancelled => P::Cancelled,
    }
}

/// The herd status a wire status names (`None` for unspecified).
pub fn from_run_status(s: pb::SubagentStatus) -> Option<RunStatus> {
    use pb::SubagentStatus as P;
    Some(match s {
        P::Unspecified => return None,
        P::Pending => RunStatus::Pending,
        P::Queued => RunStatus::Queued,
        P::Running => RunStatus::Running,
        P::WaitingForMerge => RunStatus::WaitingForMerge,
        P::Completed => RunStatus::Completed,
        P::Failed => RunStatus::Failed,
        P::Cancelled => RunStatus::Cancelled,
    })
}

pub fn usage(u: &Usage) -> pb::Usage {
    pb::Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_creation_input_tokens: u.cache_creation_input_tokens,
        cache_read_input_tokens: u.cache_read_input_tokens,
    }
}

pub fn run(r: &RunView) -> pb::SubagentInfo {
    pb::SubagentInfo {
        id: r.id.clone(),
        name: r.name.clone(),
        cli: r.cli.clone(),
        status: run_status(r.status) as i32,
        failure_reason: r.failure_reason.clone().unwrap_or_default(),
        prompt: r.prompt.clone(),
        model: r.model.clone().unwrap_or_default(),
        working_directory: r.cwd.clone(),
        native_session_id: r.native_session_id.clone().unwrap_or_default(),
        result: r.result.clone().unwrap_or_default(),
        result_truncated: r.result_truncated,
        num_turns: r.num_turns.unwrap_or(0),
        usage: Some(usage(&r.usage)),
        cost_usd: r.cost_usd.unwrap_or(0.0),
        pid: r.pid.unwrap_or(0),
        created_at: r.created_at,
        started_at: r.started_at.unwrap_or(0),
        completed_at: r.completed_at.unwrap_or(0),
        duration_ms: r.duration_ms.unwrap_or(0),
        worktree: r.worktree.as_ref().map(worktree),
        pending_permissions: r.pending_permissions.iter().map(permission).collect(),
        closed: r.closed,
        status_name: r.status.as_str().to_owned(),
        failure_json: r
            .failure
            .as_ref()
            .and_then(|f| serde_json::to_string(f).ok())
            .unwrap_or_default(),
        exit_code: r.exit_code,
        exit_signal: r.exit_signal,
        parent_session_id: r.parent_session_id.clone(),
        transcript: r.transcript.display().to_string(),
        state: r.state.as_str().to_owned(),
        plan_id: r.plan_id.clone().unwrap_or_default(),
        step: r.step.clone().unwrap_or_default(),
        unanswered_denials: r.unanswered_denials,
    }
}

/// A run as the daemon described it, as the view a local call returns (a client renders it
/// with the same code).
pub fn run_view(i: pb::SubagentInfo) -> Result<RunView, ApiError> {
    let status: RunStatus = i.status_name.parse().map_err(|e| {
        ApiError::internal(format!("the daemon sent status {:?}: {e}", i.status_name))
    })?;
    let opt = |s: String| (!s.is_empty()).then_some(s);
    let num = |n: i64| (n != 0).then_some(n);
    let u = i.usage.unwrap_or_default();
    Ok(RunView {
        state: RunState::of(status, i.state == "waiting", i.unanswered_denials),
        plan_id: opt(i.plan_id),
        step: opt(i.step),
        unanswered_denials: i.unanswered_denials,
        id: i.id,
        parent_session_id: i.parent_session_id,
        name: i.name,
        cli: i.cli,
        status,
        failure_reason: opt(i.failure_reason),
        prompt: i.prompt,
        model: opt(i.model),
        cwd: i.working_directory,
        native_session_id: opt(i.native_session_id),
        result: opt(i.result),
        result_truncated: i.result_truncated,
        num_turns: (i.num_turns != 0).then_some(i.num_turns),
        usage: Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_creation_input_tokens: u.cache_creation_input_tokens,
            cache_read_input_tokens: u.cache_read_input_tokens,
        },
        cost_usd: (i.cost_usd != 0.0).then_some(i.cost_usd),
        pid: (i.pid != 0).then_some(i.pid),
        exit_code: i.exit_code,
        exit_signal: i.exit_signal,
        created_at: i.created_at,
        started_at: num(i.started_at),
        completed_at: num(i.completed_at),
        duration_ms: num(i.duration_ms),
        worktree: i.worktree.map(worktree_view),
        pending_permissions: i.pending_permissions.into_iter().map(permission_view).collect(),
        failure: serde_json::from_str(&i.failure_json).ok(),
        closed: i.closed,
        transcript: i.transcript.into(),
    })
}

/// A permission request as the daemon described it, as the local view.
pub fn permission_view(p: pb::PermissionRequestInfo) -> PermissionRequestView {
    let opt = |s: String| (!s.is_empty()).then_some(s);
    PermissionRequestView {
        expires_in_s: (p.expires_at - herd_store::now_ms()).max(0) / 1000,
        id: p.id,
        subagent_id: p.subagent_id,
        run_name: p.run_name,
        plan_id: opt(p.plan_id),
        step: opt(p.step),
        tool: p.tool,
        input_preview: p.input_preview,
        input_sha256: p.input_sha256,
        status: p.status,
        created_at: p.created_at,
        expires_at: p.expires_at,
        always: p.always,
        reason: opt(p.reason),
        decided_by: opt(p.decided_by),
    }
}

fn worktree_view(w: pb::WorktreeInfo) -> WorktreeView {
    let opt = |s: String| (!s.is_empty()).then_some(s);
    WorktreeView {
        id: w.id,
        kind: w.kind,
        run_id: w.run_id,
        step: w.step,
        subagent_id: opt(w.subagent_id),
        repo: w.repo,
        path: w.path,
        branch: w.branch,
        base: w.base,
        integration_branch: opt(w.integration_branch),
        status: w.status,
        head: None,
        merge_commit: None,
        created_at: w.created_at,
        merged_at: None,
        removed_at: None,
    }
}

/// An event the daemon sent with its JSON (`with_json`), as stored.
pub fn stored_event(e: &pb::AgentEvent) -> Result<StoredEvent, ApiError> {
    let bad =
        |why: String| ApiError::internal(format!("the daemon sent event {}: {why}", e.sequence));
    Ok(StoredEvent {
        subagent_id: e.subagent_id.parse().map_err(|x| bad(format!("{x}")))?,
        seq: e.sequence as i64,
        ts: e.timestamp.map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000),
        parent_tool_use_id: (!e.parent_tool_use_id.is_empty())
            .then(|| e.parent_tool_use_id.clone()),
        event: serde_json::from_str(&e.json)
            .map_err(|x| bad(format!("{x} (asked without with_json?)")))?,
    })
}

pub fn permission(p: &PermissionRequestView) -> pb::PermissionRequestInfo {
    pb::PermissionRequestInfo {
        id: p.id.clone(),
        subagent_id: p.subagent_id.clone(),
        tool: p.tool.clone(),
        input_preview: p.input_preview.clone(),
        input_sha256: p.input_sha256.clone(),
        status: p.status.clone(),
        created_at: p.created_at,
        expires_at: p.expires_at,
        always: p.always,
        reason: p.reason.clone().unwrap_or_default(),
        decided_by: p.decided_by.clone().unwrap_or_default(),
        run_name: p.run_name.clone(),
        plan_id: p.plan_id.clone().unwrap_or_default(),
        step: p.step.clone().unwrap_or_default(),
    }
}

pub fn worktree(w: &WorktreeView) -> pb::WorktreeInfo {
    pb::WorktreeInfo {
        id: w.id.clone(),
        kind: w.kind.clone(),
        run_id: w.run_id.clone(),
        step: w.step.clone(),
        subagent_id: w.subagent_id.clone().unwrap_or_default(),
        repo: w.repo.clone(),
        path: w.path.clone(),
        branch: w.branch.clone(),
        base: w.base.clone(),
        integration_branch: w.integration_branch.clone().unwrap_or_default(),
        status: w.status.clone(),
        created_at: w.created_at,
    }
}

pub fn plan(p: &PlanView) -> pb::OrchestrationInfo {
    pb::OrchestrationInfo {
        id: p.id.clone(),
        name: p.name.clone(),
        strategy: p.strategy.clone(),
        status: p.status.clone(),
        total_steps: p.total_steps,
        completed_steps: p.completed_steps,
        failed_steps: p.failed_steps,
        cost_usd: p.cost_usd,
        created_at: p.created_at,
        completed_at: p.completed_at.unwrap_or(0),
        steps: p
            .steps
            .iter()
            .flatten()
            .map(|s| pb::StepInfo {
                id: s.id.clone(),
                name: s.name.clone(),
                status: s.status.clone(),
                failure_reason: s.failure_reason.clone().unwrap_or_default(),
                subagent_id: s.subagent_id.clone().unwrap_or_default(),
                attempts: s.attempts,
            })
            .collect(),
    }
}

pub fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A stored event as the wire's `AgentEvent`: the common kinds typed, the rest as JSON.
pub fn event(e: &StoredEvent) -> pb::AgentEvent {
    use pb::agent_event::Event as E;
    let text = |t: &str| pb::TextEvent { text: t.to_owned() };
    let status = |s: &str, reason: &str| pb::StatusChange {
        status: s.into(),
        reason: reason.into(),
        ..Default::default()
    };
    let typed = match &e.event {
        AgentEvent::Text { text: t } => E::Text(text(t)),
        AgentEvent::Thinking { text: t } => E::Thinking(text(t)),
        AgentEvent::UserText { text: t } => E::UserText(text(t)),
        AgentEvent::Stderr { line } => E::Stderr(text(line)),
        AgentEvent::ToolCall { id, name, input, .. } => E::ToolCall(pb::ToolCall {
            id: id.clone(),
            name: name.clone(),
            input_json: input.to_string(),
        }),
        AgentEvent::ToolResult { tool_use_id, content, is_error } => {
            E::ToolResult(pb::ToolResult {
                tool_use_id: tool_use_id.clone(),
                content: content.clone(),
                is_error: *is_error,
            })
        }
        AgentEvent::PermissionRequested { request, tool, input_preview, timeout_ms } => {
            E::PermissionRequested(pb::PermissionRequested {
                request_id: request.clone(),
                tool: tool.clone(),
                input_preview: input_preview.clone(),
                timeout_ms: *timeout_ms,
            })
        }
        AgentEvent::PermissionDecided { tool, decision, by, request } => {
            E::PermissionDecided(pb::PermissionDecided {
                request_id: request.clone().unwrap_or_default(),
                tool: tool.clone(),
                decision: decision.clone(),
                by: by.clone(),
            })
        }
        AgentEvent::SubagentCreated { .. } => E::Status(status("created", "")),
        AgentEvent::SubagentStarted { pid, argv, .. } => E::Status(pb::StatusChange {
            status: "started".into(),
            pid: *pid,
            argv: argv.clone(),
            ..Default::default()
        }),
        AgentEvent::SubagentCompleted => E::Status(status("completed", "")),
        AgentEvent::SubagentFailed { reason } => E::Status(status("failed", reason)),
        AgentEvent::SubagentCancelled { reason } => E::Status(status("cancelled", reason)),
        AgentEvent::SubagentClosed { final_status, close_reason } => E::Status(pb::StatusChange {
            status: "closed".into(),
            reason: format!("{final_status}: {close_reason}"),
            ..Default::default()
        }),
        AgentEvent::Result(r) => E::Result(pb::ResultEvent {
            subtype: serde_json::to_value(&r.subtype)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{:?}", r.subtype)),
            is_error: r.is_error,
            text: r.text.clone().unwrap_or_default(),
            num_turns: r.num_turns.unwrap_or(0),
            native_session_id: r.native_session_id.clone().unwrap_or_default(),
            cost_usd: r.cost_usd.unwrap_or(0.0),
            usage: Some(usage(&r.usage)),
        }),
        other => E::OtherJson(serde_json::to_string(other).unwrap_or_default()),
    };
    pb::AgentEvent {
        sequence: e.seq as u64,
        timestamp: Some(timestamp(e.ts)),
        parent_tool_use_id: e.parent_tool_use_id.clone().unwrap_or_default(),
        subagent_id: e.subagent_id.to_string(),
        kind: e.event.kind().to_owned(),
        json: String::new(),
        event: Some(typed),
    }
}

/// A stored plan event as the wire's `OrchestrationEvent`.
pub fn plan_event(orch: &str, e: &PlanEventView) -> pb::OrchestrationEvent {
    use pb::orchestration_event::Event as E;
    let payload: serde_json::Value = serde_json::from_str(&e.payload).unwrap_or_default();
    let s = |k: &str| payload[k].as_str().unwrap_or_default().to_owned();
    let step = e.step.clone().unwrap_or_default();
    let event = match e.kind.as_str() {
        "step_started" => E::StepStarted(pb::StepStarted {
            step_id: step,
            subagent_id: s("subagent_id"),
            attempt: payload["attempt"].as_u64().unwrap_or(1) as u32,
        }),
        "step_completed" => {
            E::StepCompleted(pb::StepCompleted { step_id: step, subagent_id: s("subagent_id") })
        }
        "step_failed" => E::StepFailed(pb::StepFailed {
            step_id: step,
            subagent_id: s("subagent_id"),
            reason: s("reason"),
        }),
        "plan_completed" => E::Completed(pb::OrchestrationCompleted {
            cost_usd: payload["cost_usd"].as_f64().unwrap_or(0.0),
        }),
        "plan_failed" | "plan_cancelled" | "plan_interrupted" => {
            E::Failed(pb::OrchestrationFailed {
                status: e.kind.trim_start_matches("plan_").to_owned(),
                reason: s("reason"),
                cost_usd: payload["cost_usd"].as_f64().unwrap_or(0.0),
            })
        }
        kind if e.step.is_some() => E::StepOther(pb::StepOther {
            step_id: step,
            kind: kind.to_owned(),
            status: s("status"),
            subagent_id: s("subagent_id"),
            reason: s("reason"),
        }),
        kind => E::Other(pb::OrchestrationOther {
            kind: kind.to_owned(),
            payload_json: e.payload.clone(),
        }),
    };
    pb::OrchestrationEvent {
        orchestration_id: orch.to_owned(),
        event: Some(event),
        sequence: e.seq as u64,
        timestamp: Some(timestamp(e.ts)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_service_code_maps_to_its_grpc_code_and_back() {
        // tonic's names are the service's: the numbers are gRPC's.
        assert_eq!(grpc_code(Code::FailedPrecondition) as i32, 9);
        assert_eq!(grpc_code(Code::ResourceExhausted) as i32, 8);
        for code in [
            Code::InvalidArgument,
            Code::NotFound,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::PermissionDenied,
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Internal,
        ] {
            let e = ApiError::new(code, "what was wrong")
                .with_details(serde_json::json!({"field": "prompt"}));
            let s = status(e.clone());
            assert_eq!(
                format!("{:?}", s.code()).to_lowercase(),
                format!("{code:?}").to_lowercase()
            );
            assert_eq!(s.message(), "what was wrong");
            assert_eq!(api_error(&s), e);
        }
        let odd = tonic::Status::unavailable("gone");
        assert_eq!(api_error(&odd).code, Code::Internal);
    }

    #[test]
    fn timestamps_split_milliseconds_exactly() {
        let t = timestamp(1_700_000_000_123);
        assert_eq!((t.seconds, t.nanos), (1_700_000_000, 123_000_000));
    }
}

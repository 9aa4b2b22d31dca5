//! The SubagentService: each RPC one call of the engine service, translated both ways — no
//! pool, lifecycle write or stop ladder of its own. The streams live in [`crate::streams`].

use std::pin::Pin;

use herd_core::{AgentEvent, Status as RunStatus};
use herd_engine::service::{
    Answer, ApiError, Caller, CancelLevel, JobState, PlanSource, PlanSpec, RunFilter, Service,
};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::convert::{self, status};
use crate::pb;
use crate::request::{self, Defaults};
use crate::streams;

type Reply<T> = Result<Response<T>, Status>;
pub type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The gRPC service over one engine service.
#[derive(Debug, Clone)]
pub struct Api {
    svc: Service,
    defaults: Defaults,
}

impl Api {
    pub fn new(svc: Service, defaults: Defaults) -> Self {
        Self { svc, defaults }
    }

    /// The caller of a request, its session created on first use.
    fn caller(&self, ctx: Option<&pb::CallerContext>, session: &str) -> Result<Caller, Status> {
        if !session.is_empty() {
            self.svc.ensure_session(session, "grpc").map_err(status)?;
        }
        request::caller(&self.defaults, ctx, session).map_err(status)
    }

    fn info(&self, id: &str) -> Result<pb::SubagentInfo, Status> {
        Ok(convert::run(&self.svc.run(id).map_err(status)?))
    }

    /// How many tool calls a run made, and how many of them auto-approve allowed.
    fn tool_counts(&self, id: &str) -> Result<(i32, i32), ApiError> {
        let (mut calls, mut auto, mut after) = (0, 0, 0);
        loop {
            let batch = self.svc.events(id, after, 1000)?;
            let Some(last) = batch.last() else { break };
            after = last.seq;
            for e in &batch {
                match &e.event {
                    AgentEvent::ToolCall { .. } => calls += 1,
                    AgentEvent::PermissionDecided { decision, by, .. }
                        if by == "auto-approve" && decision == "allow" =>
                    {
                        auto += 1
                    }
                    _ => {}
                }
            }
        }
        Ok((calls, auto))
    }
}

fn need(field: &str, v: &str) -> Result<(), Status> {
    if v.trim().is_empty() {
        return Err(status(ApiError::field(field, format!("{field}: required"))));
    }
    Ok(())
}

fn level(force: bool) -> CancelLevel {
    if force { CancelLevel::Force } else { CancelLevel::Graceful }
}

#[tonic::async_trait]
impl pb::subagent_service_server::SubagentService for Api {
    type WatchSubagentStream = EventStream<pb::AgentEvent>;
    type WatchOrchestrationStream = EventStream<pb::OrchestrationEvent>;

    async fn spawn_subagent(
        &self,
        req: Request<pb::SpawnSubagentRequest>,
    ) -> Reply<pb::SpawnSubagentResponse> {
        let r = req.into_inner();
        let caller = self.caller(r.caller.as_ref(), &r.parent_session_id)?;
        let spec = request::task_spec(r).map_err(status)?;
        let spawned = self.svc.spawn(&caller, spec).await.map_err(status)?;
        Ok(Response::new(pb::SpawnSubagentResponse {
            subagent_id: spawned.id.to_string(),
            session_id: String::new(),
            status: spawned.status.as_str().to_owned(),
            cli: spawned.cli.to_string(),
            cli_reason: spawned.cli_reason,
        }))
    }

    async fn watch_subagent(
        &self,
        req: Request<pb::WatchSubagentRequest>,
    ) -> Reply<Self::WatchSubagentStream> {
        let r = req.into_inner();
        need("subagent_id", &r.subagent_id)?;
        let from = i64::try_from(r.from_sequence)
            .map_err(|_| status(ApiError::field("from_sequence", "from_sequence: too large")))?;
        let watch = self.svc.watch(&r.subagent_id, from).map_err(status)?;
        Ok(Response::new(streams::subagent(watch, r.with_json)))
    }

    async fn send_to_subagent(
        &self,
        req: Request<pb::SubagentInput>,
    ) -> Reply<pb::SubagentInputResponse> {
        let r = req.into_inner();
        need("subagent_id", &r.subagent_id)?;
        let caller = self.caller(r.caller.as_ref(), "")?;
        match r.input {
            Some(pb::subagent_input::Input::Message(text)) => {
                let run = self.svc.send(&r.subagent_id, &text, &caller).await.map_err(status)?;
                Ok(Response::new(pb::SubagentInputResponse {
                    accepted: true,
                    subagent: Some(convert::run(&run)),
                    permission: None,
                }))
            }
            Some(pb::subagent_input::Input::Permission(a)) => {
                need("permission.request_id", &a.request_id)?;
                let run = self.svc.run(&r.subagent_id).map_err(status)?;
                // An answer through one run's input is for that run's requests only.
                let is = |p: &herd_engine::service::PermissionRequestView| {
                    p.id == a.request_id || p.id.starts_with(&a.request_id)
                };
                let elsewhere = self
                    .svc
                    .pending(None)
                    .map_err(status)?
                    .iter()
                    .any(|p| is(p) && p.subagent_id != run.id);
                if elsewhere {
                    return Err(status(ApiError::field(
                        "permission.request_id",
                        format!("{} is a request of another run, not of {}", a.request_id, run.id),
                    )));
                }
                let decided = self.answer(a, &caller).await?;
                Ok(Response::new(pb::SubagentInputResponse {
                    accepted: true,
                    subagent: Some(self.info(&run.id)?),
                    permission: Some(decided),
                }))
            }
            None => Err(status(ApiError::field(
                "input",
                "input: give a message or a permission answer",
            ))),
        }
    }

    async fn cancel_subagent(
        &self,
        req: Request<pb::CancelSubagentRequest>,
    ) -> Reply<pb::CancelSubagentResponse> {
        let r = req.into_inner();
        need("subagent_id", &r.subagent_id)?;
        need("reason", &r.reason)?;
        let caller = self.caller(r.caller.as_ref(), "")?;
        let before = self.svc.run(&r.subagent_id).map_err(status)?;
        self.svc.cancel(&before.id, level(r.force), &r.reason, &caller).await.map_err(status)?;
        if r.cleanup_worktree {
            self.svc.cleanup_worktree(&before.id).map_err(status)?;
        }
        let after = self.svc.run(&before.id).map_err(status)?;
        let (calls, auto) = self.tool_counts(&before.id).map_err(status)?;
        Ok(Response::new(pb::CancelSubagentResponse {
            cancelled: !before.is_terminal() && after.status == RunStatus::Cancelled,
            final_status: after.status.as_str().to_owned(),
            tool_calls_executed: calls,
            tool_calls_auto_approved: auto,
            subagent: Some(convert::run(&after)),
        }))
    }

    async fn list_subagents(
        &self,
        req: Request<pb::ListSubagentsRequest>,
    ) -> Reply<pb::ListSubagentsResponse> {
        let r = req.into_inner();
        let mut wanted = Vec::new();
        for s in &r.status {
            let parsed = pb::SubagentStatus::try_from(*s).ok().and_then(convert::from_run_status);
            wanted.push(parsed.ok_or_else(|| {
                status(ApiError::field("status", format!("status {s}: no such status")))
            })?);
        }
        let plan_runs: Option<Vec<String>> = match r.orchestration_id.as_str() {
            "" => None,
            id => Some(
                self.svc
                    .plan(id)
                    .map_err(status)?
                    .steps
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.subagent_id)
                    .collect(),
            ),
        };
        let all = r.all || !wanted.is_empty() || plan_runs.is_some();
        let size = match r.page_size {
            0 => 100,
            n => n.min(1000) as usize,
        };
        // Newest first; a page starts after the last id of the one before.
        let runs = self.svc.runs(RunFilter { all, limit: 0 }).map_err(status)?;
        let mut page: Vec<_> = runs
            .into_iter()
            .filter(|v| r.page_token.is_empty() || v.id < r.page_token)
            .filter(|v| {
                r.parent_session_id.is_empty() || v.parent_session_id == r.parent_session_id
            })
            .filter(|v| wanted.is_empty() || wanted.contains(&v.status))
            .filter(|v| plan_runs.as_ref().is_none_or(|ids| ids.contains(&v.id)))
            .take(size + 1)
            .collect();
        let more = page.len() > size;
        page.truncate(size);
        let next_page_token = if more {
            page.last().map(|v| v.id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListSubagentsResponse {
            subagents: page.iter().map(convert::run).collect(),
            next_page_token,
        }))
    }

    async fn get_subagent(&self, req: Request<pb::GetSubagentRequest>) -> Reply<pb::SubagentInfo> {
        let r = req.into_inner();
        need("subagent_id", &r.subagent_id)?;
        Ok(Response::new(self.info(&r.subagent_id)?))
    }

    async fn create_orchestration(
        &self,
        req: Request<pb::OrchestrationPlan>,
    ) -> Reply<pb::OrchestrationResponse> {
        let r = req.into_inner();
        let caller = self.caller(r.caller.as_ref(), &r.parent_session_id)?;
        let text = match (r.plan_text.trim().is_empty(), r.steps.is_empty()) {
            (false, true) => r.plan_text.clone(),
            (true, false) => request::plan_text(&r).map_err(status)?,
            (false, false) => {
                return Err(status(ApiError::field(
                    "plan_text",
                    "give plan_text or steps, not both",
                )));
            }
            (true, true) => {
                return Err(status(ApiError::field("steps", "steps: give plan_text or steps")));
            }
        };
        let name = if r.name.is_empty() { "plan".to_owned() } else { r.name.clone() };
        let spec = PlanSpec {
            source: PlanSource::Text { name, text },
            max_concurrent: (r.max_concurrent > 0).then_some(r.max_concurrent as usize),
            into: (!r.into.is_empty()).then(|| r.into.clone()),
            non_interactive: r.non_interactive,
        };
        let started = self.svc.run_plan(&caller, spec).await.map_err(status)?;
        Ok(Response::new(pb::OrchestrationResponse {
            orchestration_id: started.id,
            name: started.name,
            steps: started.steps as u32,
        }))
    }

    async fn watch_orchestration(
        &self,
        req: Request<pb::WatchOrchestrationRequest>,
    ) -> Reply<Self::WatchOrchestrationStream> {
        let r = req.into_inner();
        need("orchestration_id", &r.orchestration_id)?;
        let from = i64::try_from(r.from_sequence)
            .map_err(|_| status(ApiError::field("from_sequence", "from_sequence: too large")))?;
        let plan = self.svc.watch_plan(&r.orchestration_id, from).map_err(status)?;
        Ok(Response::new(streams::orchestration(plan, self.svc.clone(), r.include_agent_events)))
    }

    async fn resume_orchestration(
        &self,
        req: Request<pb::ResumeOrchestrationRequest>,
    ) -> Reply<pb::OrchestrationResponse> {
        let r = req.into_inner();
        need("orchestration_id", &r.orchestration_id)?;
        let caller = self.caller(r.caller.as_ref(), "")?;
        let max = (r.max_concurrent > 0).then_some(r.max_concurrent as usize);
        let started = self
            .svc
            .resume_plan(&caller, &r.orchestration_id, max, r.non_interactive)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::OrchestrationResponse {
            orchestration_id: started.id,
            name: started.name,
            steps: started.steps as u32,
        }))
    }

    async fn get_orchestration(
        &self,
        req: Request<pb::GetOrchestrationRequest>,
    ) -> Reply<pb::OrchestrationInfo> {
        let r = req.into_inner();
        need("orchestration_id", &r.orchestration_id)?;
        Ok(Response::new(convert::plan(&self.svc.plan(&r.orchestration_id).map_err(status)?)))
    }

    async fn cancel_orchestration(
        &self,
        req: Request<pb::CancelOrchestrationRequest>,
    ) -> Reply<pb::OrchestrationInfo> {
        let r = req.into_inner();
        need("orchestration_id", &r.orchestration_id)?;
        let caller = self.caller(r.caller.as_ref(), "")?;
        let plan = self.svc.plan(&r.orchestration_id).map_err(status)?;
        let reason = if r.reason.is_empty() { "CancelOrchestration" } else { &r.reason };
        match self.svc.cancel(&plan.id, level(r.force), reason, &caller).await.map_err(status)? {
            JobState::Error { error, .. } => Err(status(error)),
            _ => Ok(Response::new(convert::plan(&self.svc.plan(&plan.id).map_err(status)?))),
        }
    }

    async fn revoke_auto_approve(
        &self,
        req: Request<pb::RevokeAutoApproveRequest>,
    ) -> Reply<pb::RevokeAutoApproveResponse> {
        let r = req.into_inner();
        need("subagent_id", &r.subagent_id)?;
        let caller = self.caller(r.caller.as_ref(), "")?;
        let run = self.svc.revoke(&r.subagent_id, &r.reason, &caller).await.map_err(status)?;
        let pending = run.pending_permissions.len() as i32;
        let mut state = run.status;
        if r.terminate_if_pending && pending > 0 {
            let reason = format!("auto-approve revoked with a call pending: {}", r.reason.trim());
            self.svc
                .cancel(&run.id, CancelLevel::Graceful, &reason, &caller)
                .await
                .map_err(status)?;
            state = self.svc.run(&run.id).map_err(status)?.status;
        }
        Ok(Response::new(pb::RevokeAutoApproveResponse {
            revoked: true,
            pending_tool_calls: pending,
            subagent_status: state.as_str().to_owned(),
        }))
    }

    async fn list_permission_requests(
        &self,
        req: Request<pb::ListPermissionRequestsRequest>,
    ) -> Reply<pb::ListPermissionRequestsResponse> {
        let r = req.into_inner();
        let run = (!r.subagent_id.is_empty()).then_some(r.subagent_id.as_str());
        let pending = self.svc.pending(run).map_err(status)?;
        Ok(Response::new(pb::ListPermissionRequestsResponse {
            requests: pending.iter().map(convert::permission).collect(),
        }))
    }

    async fn answer_permission_request(
        &self,
        req: Request<pb::PermissionAnswer>,
    ) -> Reply<pb::PermissionRequestInfo> {
        let a = req.into_inner();
        need("request_id", &a.request_id)?;
        let caller = self.caller(a.caller.as_ref(), "")?;
        Ok(Response::new(self.answer(a, &caller).await?))
    }

    async fn list_worktrees(
        &self,
        req: Request<pb::ListWorktreesRequest>,
    ) -> Reply<pb::ListWorktreesResponse> {
        let all = req.into_inner().all;
        let list = self.svc.worktrees(all).map_err(status)?;
        Ok(Response::new(pb::ListWorktreesResponse {
            worktrees: list.iter().map(convert::worktree).collect(),
        }))
    }

    async fn remove_worktree(
        &self,
        req: Request<pb::RemoveWorktreeRequest>,
    ) -> Reply<pb::RemoveWorktreeResponse> {
        let r = req.into_inner();
        need("worktree_id", &r.worktree_id)?;
        let detail = self.svc.remove_worktree(&r.worktree_id).map_err(status)?;
        Ok(Response::new(pb::RemoveWorktreeResponse { detail }))
    }
}

impl Api {
    /// Answer a permission request: the first answer wins.
    async fn answer(
        &self,
        a: pb::PermissionAnswer,
        caller: &Caller,
    ) -> Result<pb::PermissionRequestInfo, Status> {
        let answer = Answer {
            allow: a.allow,
            always: a.always,
            reason: (!a.reason.is_empty()).then(|| a.reason.clone()),
        };
        let decided = self.svc.answer(&a.request_id, answer, caller).await.map_err(status)?;
        Ok(convert::permission(&decided))
    }
}

/// The service a daemon serves: the gRPC server type over [`Api`], with room for large plans.
pub fn server(api: Api) -> pb::subagent_service_server::SubagentServiceServer<Api> {
    pb::subagent_service_server::SubagentServiceServer::new(api).max_decoding_message_size(8 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_levels() {
        assert_eq!(level(true), CancelLevel::Force);
        assert_eq!(level(false), CancelLevel::Graceful);
    }
}

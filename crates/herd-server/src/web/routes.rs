//! The dashboard's routes: its page and assets, the JSON API over the engine service (lists,
//! a run, a plan, pending requests, the audit log; answer, cancel, send) and the live feeds.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use herd_engine::service::{
    Answer, ApiError, AuditQuery, CancelLevel, Code, JobState, RunFilter, Service,
};
use herd_store::now_ms;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use tokio::sync::watch;

use super::http::{self, Failure, Resp};
use super::json::{AnswerBody, CancelBody, Overview, Pending, RunRow, SendBody};
use super::{assets, guard, sse};
use crate::request::{Defaults, caller};

/// Who the record says answered, cancelled or sent, when it was the dashboard.
pub const WHO: &str = "the web dashboard";
/// Runs and plans the first page lists when it does not say.
const DEFAULT_LIST: usize = 1000;
/// The most a list request may ask for.
const MAX_LIST: usize = 20_000;
/// Events one page of a run's events holds at most.
const MAX_EVENTS: usize = 20_000;

/// What every request shares.
#[derive(Debug)]
pub struct State {
    svc: Service,
    token: String,
    port: u16,
    defaults: Defaults,
    stop: watch::Receiver<bool>,
}

impl State {
    pub fn new(
        svc: Service,
        token: String,
        addr: SocketAddr,
        project_root: PathBuf,
        stop: watch::Receiver<bool>,
    ) -> Self {
        let defaults = Defaults { project_root, who: WHO.into() };
        Self { svc, token, port: addr.port(), defaults, stop }
    }
}

/// One request, whatever happens: an answer (errors are answers too).
pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Resp, Infallible> {
    Ok(route(&state, req).await.unwrap_or_else(Failure::into_resp))
}

fn api_error(e: ApiError) -> Failure {
    let status = match e.code {
        Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::FailedPrecondition => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Cancelled | Code::DeadlineExceeded => StatusCode::SERVICE_UNAVAILABLE,
        Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    };
    Failure::new(status, e.code.as_str(), e.message)
}

fn bad(message: String) -> Failure {
    Failure::bad(message)
}

async fn route(s: &State, req: Request<Incoming>) -> Result<Resp, Failure> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    // The assets hold nothing secret; the page itself and the API need the token.
    if method == Method::GET
        && let Some(r) = assets::get(&path)
    {
        return Ok(r);
    }
    let api = path.starts_with("/api/");
    if method == Method::GET && (path == "/" || path == "/index.html") {
        if let Some(t) = http::query(&req, "token") {
            return Ok(if crate::auth::same(&t, &s.token) {
                guard::login(&s.token, s.port)
            } else {
                guard::unauthorized(false)
            });
        }
        if !guard::has_token(&req, &s.token, s.port) {
            return Ok(guard::unauthorized(false));
        }
        return Ok(assets::index());
    }
    if !api {
        return Err(Failure::not_found(format!("no page {path}")));
    }
    if !guard::has_token(&req, &s.token, s.port) {
        return Ok(guard::unauthorized(true));
    }
    let parts: Vec<&str> = path.trim_start_matches("/api/").split('/').collect();
    if method == Method::POST {
        guard::same_origin(&req)
            .map_err(|why| Failure::new(StatusCode::FORBIDDEN, "PERMISSION_DENIED", why))?;
        return match parts.as_slice() {
            ["requests", id, "answer"] => answer(s, id.to_string(), req).await,
            ["runs", id, "cancel"] => cancel(s, id.to_string(), req).await,
            ["runs", id, "send"] => send(s, id.to_string(), req).await,
            _ => Err(Failure::not_found(format!("no {path}"))),
        };
    }
    if method != Method::GET {
        return Err(Failure::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "INVALID_ARGUMENT",
            format!("{method} {path}: GET or POST"),
        ));
    }
    match parts.as_slice() {
        ["overview"] => overview(s, &req),
        ["runs", id] => Ok(http::json(StatusCode::OK, &s.svc.run(id).map_err(api_error)?)),
        ["runs", id, "events"] => events(s, id, &req),
        ["runs", id, "stream"] => {
            let from = sse::resume_from(&req, http::query_num(&req, "from").map_err(bad)?);
            let w = s.svc.watch(id, from).map_err(api_error)?;
            Ok(sse::run(w, s.stop.clone()))
        }
        ["plans", id] => Ok(http::json(StatusCode::OK, &s.svc.plan(id).map_err(api_error)?)),
        ["plans", id, "stream"] => {
            let from = sse::resume_from(&req, http::query_num(&req, "from").map_err(bad)?);
            let w = s.svc.watch_plan(id, from).map_err(api_error)?;
            Ok(sse::plan(w, s.svc.clone(), s.stop.clone()))
        }
        ["pending"] => pending(s),
        ["requests", id] => Ok(http::json(StatusCode::OK, &s.svc.request(id).map_err(api_error)?)),
        ["audit"] => audit(s, &req),
        ["live"] => Ok(sse::ticks(&s.svc, s.stop.clone())),
        _ => Err(Failure::not_found(format!("no {path}"))),
    }
}

fn list_limit(req: &Request<Incoming>) -> Result<usize, Failure> {
    let n: Option<usize> = http::query_num(req, "limit").map_err(bad)?;
    Ok(n.unwrap_or(DEFAULT_LIST).clamp(1, MAX_LIST))
}

fn overview(s: &State, req: &Request<Incoming>) -> Result<Resp, Failure> {
    let limit = list_limit(req)?;
    let status = http::query(req, "status").filter(|v| !v.is_empty());
    let runs = s.svc.runs(RunFilter { all: true, limit }).map_err(api_error)?;
    let runs = runs
        .into_iter()
        .map(RunRow::from)
        .filter(|r| status.as_deref().is_none_or(|st| r.status == st))
        .collect();
    let plans = s.svc.plans(RunFilter { all: true, limit }).map_err(api_error)?;
    let plans = plans.into_iter().filter(|p| status.as_deref().is_none_or(|st| p.status == st));
    Ok(http::json(StatusCode::OK, &Overview { runs, plans: plans.collect(), now: now_ms() }))
}

fn events(s: &State, id: &str, req: &Request<Incoming>) -> Result<Resp, Failure> {
    let after: i64 = http::query_num(req, "after").map_err(bad)?.unwrap_or(0);
    let limit: usize = http::query_num(req, "limit").map_err(bad)?.unwrap_or(MAX_EVENTS);
    let evs = s.svc.events(id, after, limit.clamp(1, MAX_EVENTS)).map_err(api_error)?;
    Ok(http::json(StatusCode::OK, &evs))
}

fn pending(s: &State) -> Result<Resp, Failure> {
    let now = now_ms();
    let mut out = Vec::new();
    for request in s.svc.pending(None).map_err(api_error)? {
        let run = s.svc.run(&request.subagent_id).ok();
        let origin = s.svc.request_origin(&request.subagent_id, &request.id).unwrap_or(None);
        out.push(Pending {
            run_cli: run.as_ref().map(|r| r.cli.clone()).unwrap_or_default(),
            origin,
            now,
            request,
        });
    }
    Ok(http::json(StatusCode::OK, &out))
}

fn audit(s: &State, req: &Request<Incoming>) -> Result<Resp, Failure> {
    let limit: usize = http::query_num(req, "limit").map_err(bad)?.unwrap_or(DEFAULT_LIST);
    let q = AuditQuery {
        run: http::query(req, "run").filter(|v| !v.trim().is_empty()),
        since_ms: http::query_num(req, "since_ms").map_err(bad)?,
        limit: 0,
    };
    let kind = http::query(req, "type").filter(|v| !v.is_empty());
    let severity = http::query(req, "severity").filter(|v| !v.is_empty());
    let all = s.svc.audit(&q).map_err(api_error)?;
    // Newest first, the filters applied before the limit.
    let rows: Vec<_> = all
        .into_iter()
        .rev()
        .filter(|r| kind.as_deref().is_none_or(|k| r.event_type == k))
        .filter(|r| severity.as_deref().is_none_or(|v| r.severity == v))
        .take(limit.clamp(1, MAX_LIST))
        .collect();
    Ok(http::json(StatusCode::OK, &rows))
}

fn web_caller(s: &State) -> Result<herd_engine::service::Caller, Failure> {
    caller(&s.defaults, None, "").map_err(api_error)
}

async fn answer(s: &State, id: String, req: Request<Incoming>) -> Result<Resp, Failure> {
    let b: AnswerBody = http::body_json(req).await.map_err(bad)?;
    let reason = b.reason.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
    let a = match b.decision.as_str() {
        "allow" => Answer { allow: true, always: false, reason },
        "allow_always" => Answer { allow: true, always: true, reason },
        "deny" => Answer { allow: false, always: false, reason },
        d => {
            return Err(bad(format!("decision {d:?}: allow, allow_always or deny")));
        }
    };
    let c = web_caller(s)?;
    let done = s.svc.answer(&id, a, &c).await.map_err(api_error)?;
    Ok(http::json(StatusCode::OK, &done))
}

async fn cancel(s: &State, id: String, req: Request<Incoming>) -> Result<Resp, Failure> {
    let b: CancelBody = http::body_json(req).await.map_err(bad)?;
    let level = if b.force { CancelLevel::Force } else { CancelLevel::Graceful };
    let reason = b.reason.filter(|r| !r.trim().is_empty());
    let reason = reason.unwrap_or_else(|| "cancelled from the web dashboard".into());
    let c = web_caller(s)?;
    let state = s.svc.cancel(&id, level, &reason, &c).await.map_err(api_error)?;
    let status = match &state {
        JobState::Task(r) => r.status.to_string(),
        JobState::Plan(p) => p.status.clone(),
        JobState::Error { error, .. } => return Err(api_error(error.clone())),
    };
    Ok(http::json(StatusCode::OK, &serde_json::json!({"id": id, "status": status})))
}

async fn send(s: &State, id: String, req: Request<Incoming>) -> Result<Resp, Failure> {
    let b: SendBody = http::body_json(req).await.map_err(bad)?;
    let c = web_caller(s)?;
    let run = s.svc.send(&id, &b.message, &c).await.map_err(api_error)?;
    Ok(http::json(StatusCode::OK, &serde_json::json!({"id": run.id, "status": run.status})))
}

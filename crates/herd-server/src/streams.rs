//! The server's streams: a run's events (the service's [`Watch`]: stored, then live, exactly
//! once) and a plan's events read again after each store commit, with its steps' events.

use herd_engine::service::{PlanWatch, Service, Watch};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::api::EventStream;
use crate::convert::{self, status};
use crate::pb;

/// Events a watcher may have in flight. A watcher slower than its run stops the forwarding
/// task here, never the run: the watch reads the store once it falls behind the live feed.
const BUFFER: usize = 256;

/// A run's events as a stream; it ends after the run's closing event.
/// With `json`, each event carries its stored JSON too.
pub fn subagent(mut watch: Watch, json: bool) -> EventStream<pb::AgentEvent> {
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        while let Some(next) = watch.next().await {
            let item = next
                .map(|e| {
                    let mut ev = convert::event(&e);
                    if json {
                        ev.json = serde_json::to_string(&e.event).unwrap_or_default();
                    }
                    ev
                })
                .map_err(status);
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

/// A plan's events from `from` on; with `agents`, each started step's run's events too (each
/// from its first event). Ends after the plan's terminal event and its steps' last events.
pub fn orchestration(
    mut plan: PlanWatch,
    svc: Service,
    agents: bool,
) -> EventStream<pb::OrchestrationEvent> {
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let id = plan.id().to_owned();
        let mut steps = tokio::task::JoinSet::new();
        while let Some(batch) = plan.next().await {
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.send(Err(status(e))).await;
                    return;
                }
            };
            for e in &batch {
                let msg = convert::plan_event(&id, e);
                if agents {
                    use pb::orchestration_event::Event as E;
                    // A step's first attempt starts it; a retry's is an attempt of its own.
                    let run = match &msg.event {
                        Some(E::StepStarted(s)) => Some((&s.step_id, &s.subagent_id)),
                        Some(E::StepOther(s)) if s.kind == "subagent_attempt" => {
                            Some((&s.step_id, &s.subagent_id))
                        }
                        _ => None,
                    };
                    if let Some((step, run)) = run.filter(|(_, r)| !r.is_empty()) {
                        follow_step(&svc, &id, step.clone(), run, &tx, &mut steps);
                    }
                }
                if tx.send(Ok(msg)).await.is_err() {
                    return;
                }
            }
        }
        while steps.join_next().await.is_some() {}
    });
    Box::pin(ReceiverStream::new(rx))
}

/// Forward a step's run's events into a plan's stream, as agent events of that step.
fn follow_step(
    svc: &Service,
    plan: &str,
    step: String,
    run: &str,
    tx: &mpsc::Sender<Result<pb::OrchestrationEvent, Status>>,
    tasks: &mut tokio::task::JoinSet<()>,
) {
    let Ok(mut watch) = svc.watch(run, 1) else { return };
    let (tx, plan) = (tx.clone(), plan.to_owned());
    tasks.spawn(async move {
        while let Some(Ok(e)) = watch.next().await {
            let msg = pb::OrchestrationEvent {
                orchestration_id: plan.clone(),
                event: Some(pb::orchestration_event::Event::AgentEvent(pb::SubagentAgentEvent {
                    step_id: step.clone(),
                    event: Some(convert::event(&e)),
                })),
                sequence: 0,
                timestamp: Some(convert::timestamp(e.ts)),
            };
            if tx.send(Ok(msg)).await.is_err() {
                return;
            }
        }
    });
}

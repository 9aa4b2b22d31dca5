//! `herd worker`, `herd workers`, and `herd run` on a shared store: plans served by workers on
//! several machines through PostgreSQL (the queue itself is herd-store's `queue`).

use std::path::Path;
use std::time::Duration;

use herd_engine::service::{Caller, PlanSpec, Service, WorkerOptions};

use crate::cli::{WorkerArgs, WorkersArgs};

/// This machine's name.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// `herd worker`: serve the queue until drained (SIGTERM, SIGINT, or idle with --drain).
pub fn work(state_dir: &Path, a: WorkerArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "worker")?;
    if !svc.store_is_shared() {
        return Err(crate::UsageError(
            "herd worker serves a shared store: give --store postgres://… (or HERD_STORE_URL, \
             or store: in .herd/config.yml)"
                .into(),
        )
        .into());
    }
    let host = host();
    let id = format!("{host}-{}", std::process::id());
    let caller = super::caller(format!("worker {id}"))?;
    let opts = WorkerOptions {
        id,
        host,
        max_concurrent: a.max_concurrent as usize,
        labels: a.labels.iter().map(|l| l.trim().to_owned()).filter(|l| !l.is_empty()).collect(),
        lease: a.lease.max(Duration::from_millis(300)),
        exit_when_idle: a.drain,
        clones: a.clones.map_or_else(default_clones, Ok)?,
    };
    let rt = super::runtime()?;
    let summary = rt.block_on(async move {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) =
                (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
            else {
                return std::future::pending().await;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            eprintln!("herd worker: draining (finishing the steps under way, taking no new ones)");
            let _ = tx.send(true);
            std::future::pending::<()>().await
        });
        let out = svc.work(&caller, opts, rx).await;
        svc.shutdown().await?;
        anyhow::Ok(out?)
    })?;
    println!("{}", serde_json::to_string(&summary)?);
    Ok(0)
}

/// Where a worker clones plans' repositories unless told: the user's cache, not the project
/// (agents may not write into herd's state directory, and a clone there would show up in the
/// project's `git status`).
fn default_clones() -> anyhow::Result<std::path::PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .ok_or_else(|| crate::UsageError("no HOME or XDG_CACHE_HOME: give --clones DIR".into()))?;
    Ok(cache.join("herd").join("clones"))
}

/// `herd workers`: the registered workers.
pub fn list(state_dir: &Path, a: WorkersArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    let workers = svc.workers()?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&workers)?);
        return Ok(0);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    println!(
        "{:<28} {:<16} {:<10} {:>7} {:>10}  LABELS",
        "WORKER", "HOST", "STATUS", "LOAD", "HEARTBEAT"
    );
    for w in workers {
        let ago = Duration::from_millis((now - w.heartbeat_at).max(0) as u64 / 1000 * 1000);
        println!(
            "{:<28} {:<16} {:<10} {:>7} {:>10}  {}",
            w.id,
            w.host,
            w.status,
            format!("{}/{}", w.running, w.max_concurrent),
            format!("{} ago", humantime::format_duration(ago)),
            w.labels.join(",")
        );
    }
    Ok(0)
}

/// How long `herd run --store` waits for an announcement of a change before it reads its plan
/// again anyway.
const QUEUE_REREAD: Duration = Duration::from_secs(2);

/// `herd run` on a shared store: submit the plan to the workers and wait for its end.
pub fn submit_and_watch(
    svc: &Service,
    caller: &Caller,
    spec: PlanSpec,
    json: bool,
) -> anyhow::Result<u8> {
    let rt = super::runtime()?;
    // Listening before the plan is submitted: no change to it goes unnoticed.
    let changes = svc.watch_queue()?;
    let id = rt.block_on(svc.submit_plan(caller, spec))?;
    eprintln!("herd: plan {id} submitted to the workers");
    let mut shown = 0usize;
    let mut outage = false;
    let (o, steps) = loop {
        // The plan goes on on the workers while the database is out of reach: so does this.
        let (o, steps) = match svc.queued_plan(&id) {
            Ok(v) => v,
            Err(e) if e.code == herd_engine::service::Code::Internal => {
                if !outage {
                    eprintln!("herd: cannot read plan {id}: {e} (trying again)");
                    outage = true;
                }
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if std::mem::take(&mut outage) {
            eprintln!("herd: plan {id} can be read again");
        }
        let done = steps.iter().filter(|s| !matches!(s.status.as_str(), "pending" | "running"));
        let n = done.count();
        if n != shown && !json {
            eprintln!("herd: {id}: {n}/{} steps ended", steps.len());
            shown = n;
        }
        if !matches!(o.status.as_str(), "pending" | "running") {
            break (o, steps);
        }
        // Woken by every change to the queue (any plan's); read again after a while anyway,
        // in case an announcement was lost (a connection opened again meanwhile).
        changes.wait(QUEUE_REREAD);
    };
    let repo = svc.queued_repo(&id)?;
    let mut out =
        serde_json::json!({"id": o.id, "status": o.status, "cost_usd": o.cost_usd, "steps": steps});
    if let Some(r) = &repo {
        out["repo"] = r.url.clone().into();
        out["integration_branch"] = r.integration_branch.clone().into();
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for s in &steps {
            let why = s.failure_reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
            println!("{:<24} {}{why} attempts={}", s.step_key, s.status, s.attempts);
        }
        println!("plan {} {}", o.id, o.status);
        if let Some(r) = &repo {
            println!("isolated steps merged into {} at {}", r.integration_branch, r.url);
        }
    }
    Ok(if o.status == "completed" { 0 } else { 1 })
}

//! Telling the person that an agent waits for them: at a terminal, a y/n/always prompt per
//! waiting call (one at a time, naming the step), answered from stdin; without one, a line on
//! stderr per waiting call. `herd approve` / `herd deny` from another terminal may answer first.

use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herd_core::permission::{main_input, normalize_tool};
use herd_engine::service::{Answer, Caller, PermissionRequestView, Service};
use tokio::sync::mpsc;

/// How often the record is read for calls that wait (the notice comes within a second).
const POLL: Duration = Duration::from_millis(200);

/// Whose waiting calls a command answers or reports: one run's, or a plan's steps'.
#[derive(Debug, Clone)]
pub enum Scope {
    Run(String),
    Plan(String),
}

impl Scope {
    /// The calls of this scope waiting for a person, oldest first.
    pub fn pending(&self, svc: &Service) -> Vec<PermissionRequestView> {
        match self {
            Scope::Run(id) => svc.pending(Some(id)).unwrap_or_default(),
            Scope::Plan(id) => svc
                .pending(None)
                .unwrap_or_default()
                .into_iter()
                .filter(|r| r.plan_id.as_deref() == Some(id))
                .collect(),
        }
    }
}

/// `Bash(rm -rf build)`: the tool and its main input (the command, the file…), one line.
pub fn call_text(r: &PermissionRequestView) -> String {
    let input = serde_json::from_str::<serde_json::Value>(&r.input_preview).ok();
    let main = input.as_ref().and_then(|v| main_input(&normalize_tool(&r.tool), v));
    let shown = main.unwrap_or_else(|| r.input_preview.clone());
    format!("{}({})", r.tool, crate::fmt::oneline(&shown, 120))
}

/// Who asks: `step fix` for a plan's step, else `run NAME ID`.
pub fn asker(r: &PermissionRequestView) -> String {
    match &r.step {
        Some(step) => format!("step {step}"),
        None => format!("run {} {}", r.run_name, r.subagent_id),
    }
}

/// The line said on stderr when no terminal can be asked.
pub fn notice(r: &PermissionRequestView) -> String {
    format!(
        "herd: waiting for a person: {} wants {} — herd approve {} (or herd deny {}; {}s left)",
        asker(r),
        call_text(r),
        r.id,
        r.id,
        r.expires_in_s
    )
}

/// Without a terminal: one line on stderr per call of `scope` that waits, as it starts to.
pub fn notify(svc: &Service, scope: Scope) -> tokio::task::JoinHandle<()> {
    let svc = svc.clone();
    // Over a progress line, if there is one.
    let clear = if std::io::stderr().is_terminal() { "\r\x1b[2K" } else { "" };
    tokio::spawn(async move {
        let mut told = HashSet::new();
        let mut tick = tokio::time::interval(POLL);
        loop {
            tick.tick().await;
            for r in scope.pending(&svc) {
                if told.insert(r.id.clone()) {
                    eprintln!("{clear}{}", notice(&r));
                }
            }
        }
    })
}

/// Answer `scope`'s waiting calls from this terminal, one at a time, until aborted. `paused`
/// is set while a prompt is shown, so a progress display leaves the screen alone.
pub fn spawn(
    svc: &Service,
    scope: Scope,
    caller: Caller,
    paused: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let svc = svc.clone();
    tokio::spawn(async move {
        // One reader of stdin for the whole command: lines arrive here whenever typed.
        let (line_tx, mut lines) = mpsc::channel::<String>(4);
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if line_tx.blocking_send(line).is_err() {
                    break;
                }
            }
        });
        let mut asked = HashSet::new();
        let mut tick = tokio::time::interval(POLL);
        loop {
            tick.tick().await;
            let Some(r) = scope.pending(&svc).into_iter().find(|r| !asked.contains(&r.id)) else {
                continue;
            };
            asked.insert(r.id.clone());
            paused.store(true, Ordering::SeqCst);
            // Let a display that is drawing finish its frame before the prompt goes under it.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let who = match &r.step {
                Some(step) => format!("step {step} ({})", r.subagent_id),
                None => "the agent".to_owned(),
            };
            eprint!(
                "\r\x1b[2Kherd: {who} wants to use {}\n  allow? [y]es / [n]o / [a]lways for this call ({}, {}s) ",
                call_text(&r),
                r.id,
                r.expires_in_s
            );
            let _ = std::io::stderr().flush();
            let answer = prompt(&svc, &r.id, &mut lines).await;
            if let Some((allow, always)) = answer {
                let reason = (!allow).then(|| "denied at the terminal".to_owned());
                if let Err(e) = svc.answer(&r.id, Answer { allow, always, reason }, &caller).await {
                    eprintln!("herd: {e}");
                }
            }
            paused.store(false, Ordering::SeqCst);
        }
    })
}

/// The person's answer to request `id`: (allow, always), or `None` when it was answered
/// elsewhere, expired, or stdin ended.
async fn prompt(
    svc: &Service,
    id: &str,
    lines: &mut mpsc::Receiver<String>,
) -> Option<(bool, bool)> {
    let mut check = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            line = lines.recv() => match line {
                None => {
                    eprintln!();
                    return None;
                }
                Some(l) => match l.trim().to_ascii_lowercase().as_str() {
                    "y" | "yes" => return Some((true, false)),
                    "a" | "always" => return Some((true, true)),
                    "n" | "no" | "" => return Some((false, false)),
                    _ => eprint!("  y, n or a? "),
                },
            },
            _ = check.tick() => {
                // Answered elsewhere, expired, or the run ended.
                let waiting = svc.pending(None).is_ok_and(|p| p.iter().any(|r| r.id == id));
                if !waiting {
                    eprintln!("(answered elsewhere)");
                    return None;
                }
            }
        }
    }
}

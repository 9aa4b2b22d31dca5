//! Telling the person that an agent waits for them: at a terminal, a y/n/always prompt per
//! waiting call (one at a time, naming the step), answered from stdin; without one, a line on
//! stderr per waiting call. `herd approve` / `herd deny` from another terminal may answer first.

use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::board::Question;
use crate::fmt;
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
        fmt::call(r),
        r.id,
        r.id,
        r.expires_in_s
    )
}

/// The line said on stderr when a call was denied at once because nobody can answer.
pub fn denied_notice(r: &PermissionRequestView) -> String {
    format!(
        "herd: denied, nobody can answer here: {} wanted {} ({}; --wait-for-approval waits for \
         `herd approve`)",
        asker(r),
        fmt::call(r),
        r.id
    )
}

/// Without a terminal: one line on stderr per call of `scope` that waits, as it starts to (and,
/// for a run, per call denied at once because nobody can answer).
#[derive(Debug, Clone)]
pub struct Notifier {
    scope: Scope,
    told: Arc<std::sync::Mutex<HashSet<String>>>,
}

impl Notifier {
    /// Say what is new now.
    pub fn poll(&self, svc: &Service) {
        let clear = if std::io::stderr().is_terminal() { "\r\x1b[2K" } else { "" };
        let mut told = self.told.lock().unwrap_or_else(|p| p.into_inner());
        for r in self.scope.pending(svc) {
            if told.insert(r.id.clone()) {
                eprintln!("{clear}{}", notice(&r));
            }
        }
        if let Scope::Run(run) = &self.scope {
            let denied = svc.requests(run).unwrap_or_default().into_iter().filter(|r| {
                r.status == "expired" && r.decided_by.as_deref() == Some("non-interactive")
            });
            for r in denied {
                if told.insert(r.id.clone()) {
                    eprintln!("{clear}{}", denied_notice(&r));
                }
            }
        }
    }
}

/// Start saying what waits in `scope`, every [`POLL`]; [`Notifier::poll`] once more at the end
/// says what came since.
pub fn notify(svc: &Service, scope: Scope) -> (Notifier, tokio::task::JoinHandle<()>) {
    let n = Notifier { scope, told: Arc::default() };
    let (svc, looping) = (svc.clone(), n.clone());
    let handle = tokio::spawn(async move {
        let mut tick = tokio::time::interval(POLL);
        loop {
            tick.tick().await;
            looping.poll(&svc);
        }
    });
    (n, handle)
}

/// The question a display that owns the screen (a plan's) draws under the steps, and how many
/// lines the person typed since (each moved the cursor down one line).
#[derive(Debug, Default)]
pub struct Prompt {
    question: std::sync::Mutex<Option<Question>>,
    pub typed: AtomicUsize,
}

impl Prompt {
    fn set(&self, q: Option<Question>) {
        *self.question.lock().unwrap_or_else(|p| p.into_inner()) = q;
    }

    /// The question now on the screen, if any.
    pub fn question(&self) -> Option<Question> {
        self.question.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Answer `scope`'s waiting calls from this terminal, one at a time, until aborted. `paused`
/// is set while a prompt is shown, so a progress display leaves the screen alone; with
/// `shown_by`, a display shows the question itself (and goes on drawing).
pub fn spawn(
    svc: &Service,
    scope: Scope,
    caller: Caller,
    paused: Arc<AtomicBool>,
    shown_by: Option<Arc<Prompt>>,
) -> tokio::task::JoinHandle<()> {
    let svc = svc.clone();
    tokio::spawn(async move {
        // One reader of stdin for the whole command: lines arrive here whenever typed.
        let (line_tx, mut lines) = mpsc::channel::<String>(4);
        let typed = shown_by.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if let Some(p) = &typed {
                    p.typed.fetch_add(1, Ordering::SeqCst);
                }
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
            let mut question = Question {
                step: r.step.clone(),
                run: r.subagent_id.clone(),
                call: fmt::call(&r),
                id: r.id.clone(),
                expires_in_s: r.expires_in_s.max(0).unsigned_abs(),
                again: false,
            };
            match &shown_by {
                Some(p) => p.set(Some(question.clone())),
                None => {
                    paused.store(true, Ordering::SeqCst);
                    // Let a display that is drawing finish its frame before the prompt.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    eprint!("\r\x1b[2K{}", question.lines(usize::MAX).join("\n"));
                    let _ = std::io::stderr().flush();
                }
            }
            let answer = prompt(&svc, &mut question, &mut lines, shown_by.as_deref()).await;
            if let Some(p) = &shown_by {
                p.set(None);
            }
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

/// The person's answer to `q`: (allow, always), or `None` when it was answered elsewhere,
/// expired, or stdin ended.
async fn prompt(
    svc: &Service,
    q: &mut Question,
    lines: &mut mpsc::Receiver<String>,
    shown_by: Option<&Prompt>,
) -> Option<(bool, bool)> {
    let mut check = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            line = lines.recv() => match line {
                None => {
                    if shown_by.is_none() {
                        eprintln!();
                    }
                    return None;
                }
                Some(l) => match l.trim().to_ascii_lowercase().as_str() {
                    "y" | "yes" => return Some((true, false)),
                    "a" | "always" => return Some((true, true)),
                    "n" | "no" | "" => return Some((false, false)),
                    _ => {
                        q.again = true;
                        match shown_by {
                            Some(p) => p.set(Some(q.clone())),
                            None => eprint!("{}", q.lines(usize::MAX).last().cloned().unwrap_or_default()),
                        }
                    }
                },
            },
            _ = check.tick() => {
                // Answered elsewhere, expired, or the run ended.
                let waiting = svc.pending(None).is_ok_and(|p| p.iter().any(|r| r.id == q.id));
                if !waiting {
                    if shown_by.is_none() {
                        eprintln!("(answered elsewhere)");
                    }
                    return None;
                }
            }
        }
    }
}

//! How a plan is drawn for a person: the live block of `herd run` (a line per active step, the
//! counts), the lines announcing each transition, and the tables of `herd run` and `herd show`
//! — pure functions of the service's views and a width, so they are tested without a terminal.

use std::collections::HashMap;

use herd_engine::service::{PlanEventView, PlanView, StepView};

use crate::fmt;

/// The spinner's frames.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// Active steps drawn one per line; more are summed up in one line.
const MAX_LINES: usize = 12;
/// Run ids are shown at least this long (longer where that is what keeps them unique).
pub const MIN_ID: usize = 12;

/// The shortest prefix length, at least `min`, at which all of `ids` differ.
pub fn unique_len<'a>(ids: impl IntoIterator<Item = &'a str>, min: usize) -> usize {
    let mut ids: Vec<&str> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    let longest = ids.iter().map(|s| s.chars().count()).max().unwrap_or(min);
    let mut len = min.min(longest);
    for pair in ids.windows(2) {
        let common = pair[0].chars().zip(pair[1].chars()).take_while(|(a, b)| a == b).count();
        len = len.max(common + 1);
    }
    len.min(longest)
}

/// `s` cut to `n` characters.
pub fn prefix(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

/// `s` on one line, at most `max` characters (`…` when cut).
pub(crate) fn cut(s: &str, max: usize) -> String {
    if max == 0 {
        return String::new();
    }
    let one = s.lines().next().unwrap_or("");
    let more = s.lines().nth(1).is_some();
    if one.chars().count() <= max && !more {
        return one.to_owned();
    }
    let mut out: String = one.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// How a step's state reads on a line.
pub fn state_text(state: &str) -> &str {
    match state {
        "waiting" => "waiting for approval",
        "completed_with_denials" => "completed (denials)",
        other => other,
    }
}

/// A step's state in a table's STATUS column (the reason says why a completed step had calls
/// denied).
fn table_state(state: &str) -> &str {
    match state {
        "completed_with_denials" => "completed",
        other => other,
    }
}

/// What the live block shows of a plan, as last read.
#[derive(Debug, Clone)]
pub struct Live<'a> {
    pub plan: &'a PlanView,
    /// The tool each running step's agent called last, by step id.
    pub tools: &'a HashMap<String, String>,
    /// 0, or 1 / 2 once Ctrl-C asked for a graceful stop / a kill.
    pub stopping: u8,
    /// Which spinner frame.
    pub tick: usize,
}

/// The live block: a line per active step, then the counts (each line at most `width`).
pub fn live(l: &Live<'_>, width: usize) -> Vec<String> {
    let steps = l.plan.steps.as_deref().unwrap_or_default();
    let active: Vec<&StepView> =
        steps.iter().filter(|s| !s.is_terminal() && s.state != "pending").collect();
    let name_max = if width < 100 { 14 } else { 24 };
    let name_w = active.iter().map(|s| s.id.chars().count()).max().unwrap_or(4).clamp(4, name_max);
    let spin = SPINNER[l.tick % SPINNER.len()];
    let stopping = l.stopping > 0 || l.plan.state == "cancelling";
    // Asked to stop (here or by `herd cancel`): what runs is being stopped.
    let state_of = |s: &StepView| match s.state.as_str() {
        "starting" | "running" | "waiting" if stopping => "stopping".to_owned(),
        _ => state_text(&s.state).to_owned(),
    };
    let state_w = active.iter().map(|s| state_of(s).chars().count()).max().unwrap_or(8).max(8);
    let mut out = Vec::new();
    for s in active.iter().take(MAX_LINES) {
        let mark = if s.state == "waiting" { '?' } else { spin };
        let mut parts: Vec<String> = Vec::new();
        if let Some(t) = l.tools.get(&s.id) {
            parts.push(t.clone());
        }
        if let Some(n) = s.num_turns.filter(|n| *n > 0) {
            parts.push(format!("turn {n}"));
        }
        let tokens = s.usage.input_tokens + s.usage.output_tokens;
        if tokens > 0 {
            parts.push(format!("{} tok", fmt::count(tokens)));
        }
        if s.cost_usd.is_some() {
            parts.push(fmt::cost(s.cost_usd));
        }
        if let Some(d) = s.duration_ms {
            parts.push(fmt::duration_ms(d));
        }
        let head = format!("  {mark} {:<name_w$}  {:<state_w$}  ", cut(&s.id, name_w), state_of(s));
        // The figures that fit, whole: a cut one would read wrong.
        let room = width.saturating_sub(head.chars().count());
        let figures = wrap(&parts, room).into_iter().next().unwrap_or_default();
        out.push(cut(format!("{head}{figures}").trim_end(), width));
    }
    if active.len() > MAX_LINES {
        out.push(cut(&format!("    … and {} more", active.len() - MAX_LINES), width));
    }
    out.extend(wrap(&counts(l.plan), width.saturating_sub(2)).iter().map(|l| format!("  {l}")));
    match l.stopping {
        0 => {}
        1 => out.push(cut("  stopping… (Ctrl-C again to kill)", width)),
        _ => out.push(cut("  killing…", width)),
    }
    out
}

/// `parts` joined by ` · ` into lines of at most `width` characters, each part whole (one
/// longer than a line is cut).
fn wrap(parts: &[String], width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for part in parts {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 3 + part.chars().count() <= width => {
                l.push_str(" · ");
                l.push_str(part);
            }
            _ => lines.push(cut(part, width)),
        }
    }
    lines
}

/// `2/6 completed`, `1 failed`, `2 running`, `1 waiting`, `1 pending`, `$0.0123`, `12.0s`.
fn counts(p: &PlanView) -> Vec<String> {
    let steps = p.steps.as_deref().unwrap_or_default();
    let n = |state: &str| steps.iter().filter(|s| s.state == state).count();
    let mut parts = vec![format!("{}/{} completed", p.completed_steps, p.total_steps)];
    for (k, v) in [
        ("failed", p.failed_steps as usize),
        ("cancelled", p.cancelled_steps as usize),
        ("running", n("running") + n("starting") + n("merging")),
        ("waiting", n("waiting")),
        ("queued", n("queued")),
        ("pending", n("pending")),
    ] {
        if v > 0 {
            parts.push(format!("{v} {k}"));
        }
    }
    parts.push(fmt::cost(Some(p.cost_usd)));
    parts.push(fmt::duration_ms(p.duration_ms));
    parts
}

/// The line announcing one of a plan's events (`None` for those that need none); `steps` (the
/// plan's, as read) say whether a completed step had calls denied for want of an answer.
pub fn announce(e: &PlanEventView, steps: &[StepView]) -> Option<String> {
    announce_with(e, || {
        let step = e.step.as_deref()?;
        let s = steps.iter().find(|s| s.id == step)?;
        (s.unanswered_denials > 0).then(|| reason(s))
    })
}

/// [`announce`], with `denied` asked (only for a completed step) why its calls were denied
/// (`None`: none were): a reader without the whole plan looks up that step's run alone.
pub fn announce_with(e: &PlanEventView, denied: impl FnOnce() -> Option<String>) -> Option<String> {
    let step = e.step.as_deref().unwrap_or("?");
    let run = e.subagent_id.as_deref().unwrap_or("-");
    // A reason that only repeats what happened (`cancelled: cancelled`) is left out.
    let why = e
        .reason
        .as_deref()
        .filter(|r| !e.kind.ends_with(r))
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    Some(match e.kind.as_str() {
        "step_started" => format!("herd: {step} started as {run}"),
        "subagent_attempt" => {
            format!("herd: {step} started again as {run} (attempt {})", e.attempt.unwrap_or(0))
        }
        "step_completed" => match denied() {
            Some(why) => format!("herd: {step} completed, but {why}"),
            None => format!("herd: {step} completed"),
        },
        "step_failed" => format!("herd: {step} failed{why}"),
        "step_cancelled" => format!("herd: {step} cancelled{why}"),
        "step_blocked" => format!("herd: {step} waits for a lock"),
        "plan_cancel_requested" => "herd: the plan was asked to stop (herd cancel)".to_owned(),
        _ => return None,
    })
}

/// A call waiting for the person at this terminal, as the prompt asks about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The plan's step that asks, if a step does.
    pub step: Option<String>,
    /// The run that asks.
    pub run: String,
    /// `Bash(rm -rf build)`.
    pub call: String,
    /// The request's id (`herd approve ID` answers it from elsewhere).
    pub id: String,
    pub expires_in_s: u64,
    /// The last answer was not y, n or a.
    pub again: bool,
}

impl Question {
    /// The prompt: who wants what, then the choices; each line at most `width - 1` characters
    /// (a line that wrapped would throw a redrawn display's count of lines), the run's id
    /// left out before the call is cut. The cursor stays after the last line.
    pub fn lines(&self, width: usize) -> Vec<String> {
        let max = width.saturating_sub(1);
        let wants = |who: &str| format!("herd: {who} wants to use {}", self.call);
        let first = match &self.step {
            Some(step) => {
                let long = wants(&format!("step {step} ({})", self.run));
                if long.chars().count() <= max { long } else { wants(&format!("step {step}")) }
            }
            None => wants("the agent"),
        };
        let ask = if self.again {
            format!("  y, n or a? ({}) ", self.id)
        } else {
            format!("  allow? [y]es / [n]o / [a]lways ({}, {}s) ", self.id, self.expires_in_s)
        };
        vec![cut(&first, max), cut(&ask, max)]
    }
}

/// Why a step ended as it did: its failure, or the calls nobody answered.
fn reason(s: &StepView) -> String {
    match (&s.failure_reason, s.unanswered_denials) {
        (Some(r), _) => r.clone(),
        (None, 0) => String::new(),
        (None, n) => unanswered(n),
    }
}

/// `n` calls denied because nobody answered them.
pub fn unanswered(n: u32) -> String {
    format!("{n} call(s) denied: nobody answered")
}

/// The narrowest REASON column a table leaves room for by cutting step names.
const MIN_REASON: usize = 10;

/// The table of a plan's steps: step, status, run, duration, tokens, cost and reason, each
/// line within `width`: run ids as long as keeps them unique, step names cut before that, and
/// reasons cut (`herd show PLAN` has them whole). `full_ids` shows whole run ids.
pub fn table(p: &PlanView, width: usize, full_ids: bool) -> String {
    let steps = p.steps.as_deref().unwrap_or_default();
    let ids = steps.iter().filter_map(|s| s.subagent_id.as_deref());
    let id_w = if full_ids { 26 } else { unique_len(ids, MIN_ID) }.max(3);
    let status_w =
        steps.iter().map(|s| table_state(&s.state).chars().count()).max().unwrap_or(6).max(6);
    // Status, run, time, tokens, cost, and the gaps of seven columns.
    let fixed = status_w + id_w + 6 + 6 + 7 + 2 * 6;
    let name_max = width.saturating_sub(fixed + MIN_REASON).clamp(6, 24);
    let name_w = steps.iter().map(|s| s.id.chars().count()).max().unwrap_or(4).clamp(4, name_max);
    let head = format!(
        "{:<name_w$}  {:<status_w$}  {:<id_w$}  {:>6}  {:>6}  {:>7}  ",
        "STEP", "STATUS", "RUN", "TIME", "TOKENS", "COST"
    );
    let room = width.saturating_sub(head.chars().count());
    let mut out = format!("{}\n", cut(&format!("{head}REASON"), width));
    let mut cut_any = false;
    for s in steps {
        let why = reason(s);
        cut_any |= why.chars().count() > room;
        let line = format!(
            "{:<name_w$}  {:<status_w$}  {:<id_w$}  {:>6}  {:>6}  {:>7}  {}",
            cut(&s.id, name_w),
            table_state(&s.state),
            s.subagent_id.as_deref().map_or("-", |i| prefix(i, id_w)),
            s.duration_ms.map_or_else(|| "-".into(), fmt::duration_ms),
            fmt::count(s.usage.input_tokens + s.usage.output_tokens),
            fmt::cost(s.cost_usd),
            cut(&why, room)
        );
        out.push_str(&cut(line.trim_end(), width));
        out.push('\n');
    }
    if cut_any {
        out.push_str(&format!("(reasons cut to fit: herd show {} has them whole)\n", p.id));
    }
    out
}

/// The line that ends `herd run`: `pln_… completed: 4/4 steps, 102 tokens, $0.0011` (at most
/// 80 characters).
pub fn summary(p: &PlanView) -> String {
    format!(
        "{} {}: {}/{} steps, {} tokens, {}",
        p.id,
        p.status,
        p.completed_steps,
        p.total_steps,
        fmt::count(p.usage.input_tokens + p.usage.output_tokens),
        fmt::cost(Some(p.cost_usd))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::plan_view;

    #[test]
    fn unique_prefixes() {
        let ids = ["01kab00000aaaa", "01kab00000aaab", "01kzz"];
        assert_eq!(unique_len(ids, 8), 14);
        assert_eq!(unique_len(["01kab00001", "01kab00002"], 4), 10);
        assert_eq!(unique_len(["abcdefghij", "bbcdefghij"], 8), 8);
        assert_eq!(unique_len(Vec::<&str>::new(), 8), 8);
        assert_eq!(prefix("héllo", 2), "hé");
        assert_eq!(cut("a long line", 6), "a lon…");
        assert_eq!(cut("two\nlines", 20), "two…");
    }

    #[test]
    fn the_live_block_and_the_table_at_80_and_170_columns() {
        let p = plan_view();
        let tools = HashMap::from([
            ("build-the-release-artifacts".to_owned(), "Bash".to_owned()),
            ("lint".to_owned(), "Edit".to_owned()),
        ]);
        for width in [80, 170] {
            let block = live(&Live { plan: &p, tools: &tools, stopping: 0, tick: 3 }, width);
            assert!(block.iter().all(|l| l.chars().count() <= width), "{block:#?}");
            let table = table(&p, width, false);
            assert!(table.lines().all(|l| l.chars().count() <= width), "{table}");
            // Each run as shown is its own: `herd show` takes it.
            let runs: Vec<&str> = table
                .lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().nth(2).filter(|r| r.starts_with("01")))
                .collect();
            let unique: std::collections::HashSet<_> = runs.iter().collect();
            assert_eq!((runs.len(), unique.len()), (7, 7), "{table}");
            insta::assert_snapshot!(format!("live_{width}"), block.join("\n"));
            insta::assert_snapshot!(format!("table_{width}"), table);
        }
        // After Ctrl-C: what runs is being stopped, and the second Ctrl-C is offered.
        let block = live(&Live { plan: &p, tools: &tools, stopping: 1, tick: 3 }, 80);
        let states: Vec<&str> =
            block[..4].iter().map(|l| l.split_whitespace().nth(2).unwrap()).collect();
        assert_eq!(states, ["stopping", "stopping", "stopping", "queued"], "{block:#?}");
        assert_eq!(block.last().unwrap(), "  stopping… (Ctrl-C again to kill)");
        let mut ended = p.clone();
        (ended.status, ended.completed_steps, ended.total_steps) = ("cancelled".into(), 20, 20);
        ended.usage.input_tokens = 123_456;
        ended.cost_usd = 12.3456;
        assert_eq!(
            summary(&ended),
            "pln_01kaq3v8c2000000000000000 cancelled: 20/20 steps, 123.5k tokens, $12.3456"
        );
        assert!(summary(&ended).chars().count() <= 80);
    }

    #[test]
    fn the_question_fits_the_terminal() {
        let mut q = Question {
            step: Some("build-the-release-artifacts".into()),
            run: "01kaq3v8e4r6t8v0x2z4b6d8f0".into(),
            call: "Bash(cargo build --release --workspace && strip target/release/herd)".into(),
            id: "perm_01kaq3v8e4r6t8v0x2z4b6d8f1".into(),
            expires_in_s: 120,
            again: false,
        };
        for width in [80, 170] {
            let lines = q.lines(width);
            assert!(lines.iter().all(|l| l.chars().count() < width), "{lines:#?}");
            insta::assert_snapshot!(format!("question_{width}"), lines.join("\n"));
        }
        q.again = true;
        assert_eq!(q.lines(80)[1], "  y, n or a? (perm_01kaq3v8e4r6t8v0x2z4b6d8f1) ");
    }

    #[test]
    fn each_transition_is_announced_with_its_run() {
        let p = plan_view();
        let steps = p.steps.as_deref().unwrap_or_default();
        let ev = |kind: &str, step: Option<&str>, run: Option<&str>, reason: Option<&str>| {
            PlanEventView {
                plan_id: "pln_x".into(),
                seq: 1,
                ts: 0,
                kind: kind.into(),
                step: step.map(Into::into),
                subagent_id: run.map(Into::into),
                status: None,
                reason: reason.map(Into::into),
                attempt: Some(2),
                payload: "{}".into(),
            }
        };
        let lines: Vec<Option<String>> = vec![
            announce(&ev("plan_created", None, None, None), steps),
            announce(&ev("step_started", Some("a"), Some("01kaaa"), None), steps),
            announce(&ev("subagent_attempt", Some("a"), Some("01kbbb"), None), steps),
            announce(&ev("step_failed", Some("b"), None, Some("dependency_failed(a)")), steps),
            announce(&ev("step_completed", Some("a"), Some("01kbbb"), None), steps),
            announce(&ev("step_cancelled", Some("c"), None, Some("cancelled")), steps),
            announce(&ev("step_completed", Some("notes"), None, None), steps),
        ];
        assert_eq!(
            lines,
            [
                None,
                Some("herd: a started as 01kaaa".into()),
                Some("herd: a started again as 01kbbb (attempt 2)".into()),
                Some("herd: b failed: dependency_failed(a)".into()),
                Some("herd: a completed".into()),
                Some("herd: c cancelled".into()),
                Some("herd: notes completed, but 2 call(s) denied: nobody answered".into()),
            ]
        );
    }
}

//! Issue 19's acceptance: a person is always told when an agent waits for them, and can find,
//! follow and answer plans from a terminal — a pseudo-terminal here, with the real claude
//! against the testkit mock; a script without a terminal is never left hanging or told
//! "success" when calls were denied for want of an answer.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{World, pending_request, touch_then_done, wait_until};
use herd_testkit::{MockServer, Script};
use serde_json::{Value, json};

#[test]
fn a_script_is_told_at_once_and_never_told_success_when_calls_were_denied() {
    let Some(w) = World::with_claude() else { return };
    let never = w.work.join("never.txt");
    touch_then_done("att_script", &never);
    // --json without a terminal (stdin is /dev/null): nobody can answer, so the call is denied
    // at once, said on stderr, and the run is not a plain success.
    let start = Instant::now();
    let out = w.run(&["task", "SCENARIO=att_script go", "--json"]);
    let took = start.elapsed();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{v}\n{err}");
    assert_eq!(
        (&v["status"], &v["state"]),
        (&json!("completed"), &json!("completed_with_denials"))
    );
    assert_eq!(v["unanswered_denials"], 1, "{v}");
    assert!(v["result"].as_str().unwrap().contains("nobody can answer"), "{v}");
    assert!(err.contains("denied, nobody can answer here") && err.contains("Bash(touch"), "{err}");
    assert!(took < Duration::from_secs(60), "it waited: {took:?}");
    assert!(!never.exists());

    // --non-interactive, no --json: the same, at once.
    let start = Instant::now();
    let out = w.run(&["task", "SCENARIO=att_script again", "--non-interactive"]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(start.elapsed() < Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("completed_with_denials"), "{err}");
    assert!(!never.exists());

    // --wait-for-approval: it waits, and says so on stderr within a second of the request.
    let mut child = w
        .herd(&[
            "task",
            "SCENARIO=att_script wait",
            "--json",
            "--wait-for-approval",
            "--permission-timeout",
            "6s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let reader = {
        let lines = lines.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push((Instant::now(), l));
            }
        })
    };
    pending_request(&w);
    let asked_at = Instant::now();
    // While it waits, every reader sees it waiting, with what the stream already said (the
    // figures reach the row within a second, though the agent says nothing more).
    let mut run = Value::Null;
    let said = wait_until(Duration::from_secs(3), || {
        run = w.json(&["ps", "--json"]).1[0].clone();
        run["num_turns"].as_u64().is_some_and(|n| n >= 1)
            && run["usage"]["input_tokens"].as_u64().is_some_and(|n| n > 0)
    });
    assert!(said, "{run}");
    assert_eq!((&run["status"], &run["state"]), (&json!("running"), &json!("waiting")), "{run}");
    assert!(run["model"].is_string() && run["native_session_id"].is_string(), "{run}");
    let out = w.run(&["show", run["id"].as_str().unwrap()]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("status: waiting") && shown.contains("herd approve perm_"), "{shown}");
    assert!(!shown.contains("model: -") && !shown.contains("turns: -"), "{shown}");
    assert!(
        wait_until(Duration::from_secs(3), || {
            lines.lock().unwrap().iter().any(|(_, l)| l.contains("waiting for a person"))
        }),
        "nothing said on stderr: {:?}",
        lines.lock().unwrap()
    );
    let (said_at, line) = lines
        .lock()
        .unwrap()
        .iter()
        .find(|(_, l)| l.contains("waiting for a person"))
        .cloned()
        .unwrap();
    // Said before (or within a second after) the request was seen from outside.
    assert!(said_at <= asked_at + Duration::from_secs(1), "{line}");
    assert!(line.contains("wants Bash(touch") && line.contains("herd approve perm_"), "{line}");
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status.code(), Some(4), "{v}");
    assert_eq!(v["state"], "completed_with_denials");
    assert!(v["result"].as_str().unwrap().contains("nobody answered within 6s"), "{v}");
}

#[test]
fn a_plan_without_a_terminal_says_what_waits_and_what_was_denied() {
    let Some(w) = World::with_claude() else { return };
    let fixed = w.work.join("fixed.txt");
    let mock = MockServer::shared();
    mock.script("att_p_scan", Script::new().text("scanned"));
    touch_then_done("att_p_fix", &fixed);
    std::fs::write(
        w.work.join("two.yml"),
        "defaults: {cli: claude, timeout: 90s}\nsteps:\n  - {id: scan, prompt: SCENARIO=att_p_scan go}\n  \
         - {id: fix, prompt: SCENARIO=att_p_fix go}\n",
    )
    .unwrap();
    // A script: the call is denied at once, the step's end says so, the plan exits 4.
    let out = w.run(&["run", "two.yml", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(4), "{v}\n{err}");
    assert_eq!(
        (&v["status"], &v["steps"][1]["state"]),
        (&json!("completed"), &json!("completed_with_denials"))
    );
    assert!(err.contains("herd: fix completed, but 1 call(s) denied: nobody answered"), "{err}");
    assert!(err.contains("herd: scan completed\n"), "{err}");
    assert!(!fixed.exists());

    // Waiting for someone elsewhere: a line on stderr names the step, the call and the answer.
    let mut child = w
        .herd(&["run", "two.yml", "--wait-for-approval"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = Vec::new();
    let notice = loop {
        let mut l = String::new();
        assert!(stderr.read_line(&mut l).unwrap() > 0, "stderr ended: {said:?}");
        if l.starts_with("herd: waiting for a person: ") {
            break l;
        }
        said.push(l);
    };
    assert!(notice.contains("step fix wants Bash(touch "), "{notice}");
    let request = request_id(&notice[notice.find("herd approve ").unwrap()..]);
    let out = w.run(&["approve", &request]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{rest}");
    assert!(rest.contains("herd: fix completed\n"), "{rest}");
    assert!(fixed.exists());
}

/// `herd` running in a pseudo-terminal of `cols` columns (its stdin and stderr; stdout is
/// piped), and everything it wrote there.
struct Terminal {
    child: std::process::Child,
    ours: std::fs::File,
    raw: Arc<Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
    cols: usize,
}

impl Terminal {
    fn start(mut cmd: std::process::Command, cols: u16) -> Self {
        let size = nix::pty::Winsize { ws_row: 50, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        let pty = nix::pty::openpty(&size, None).unwrap();
        let theirs = |fd: &std::os::fd::OwnedFd| Stdio::from(fd.try_clone().unwrap());
        let child = cmd
            .stdin(theirs(&pty.slave))
            .stderr(theirs(&pty.slave))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The program is now the only holder of its end: reading ours ends once it is gone.
        drop(pty.slave);
        let ours = std::fs::File::from(pty.master);
        let raw: Arc<Mutex<String>> = Arc::default();
        let reader = {
            let (raw, mut ours) = (raw.clone(), ours.try_clone().unwrap());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = ours.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    raw.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            })
        };
        Self { child, ours, raw, reader, cols: usize::from(cols) }
    }

    /// What it wrote from byte `from` on, as written (escape sequences and all).
    fn raw(&self, from: usize) -> String {
        self.raw.lock().unwrap()[from..].to_owned()
    }

    /// The person types `text`.
    fn typed(&mut self, text: &str) {
        self.ours.write_all(text.as_bytes()).unwrap();
    }

    /// Once it ends: its exit status, its stdout, and the screen as it was left.
    fn finish(mut self) -> (std::process::ExitStatus, String, Screen) {
        let mut out = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let status = self.child.wait().unwrap();
        drop(self.ours);
        let _ = self.reader.join();
        let screen = Screen::of(&self.raw.lock().unwrap(), self.cols);
        (status, out, screen)
    }
}

/// What a terminal of a given width shows after some output: its lines (scrolled-off ones
/// kept) as cursor moves, carriage returns and clears left them, and whether anything was
/// written past the last column (the terminal wrapped it).
#[derive(Debug)]
struct Screen {
    lines: Vec<String>,
    wrapped: bool,
}

impl Screen {
    fn of(raw: &str, width: usize) -> Self {
        let mut lines: Vec<Vec<char>> = vec![Vec::new()];
        let (mut row, mut col, mut wrapped) = (0usize, 0usize, false);
        let mut chars = raw.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\x1b' if chars.peek() == Some(&'[') => {
                    chars.next();
                    let mut arg = String::new();
                    let mut cmd = ' ';
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() {
                            cmd = c;
                            break;
                        }
                        arg.push(c);
                    }
                    match cmd {
                        'A' => row = row.saturating_sub(arg.parse().unwrap_or(1)),
                        'J' => {
                            lines[row].truncate(col);
                            lines.truncate(row + 1);
                        }
                        'K' if arg == "2" => lines[row].clear(),
                        _ => {}
                    }
                }
                '\r' => col = 0,
                '\n' => {
                    (row, col) = (row + 1, 0);
                    if lines.len() <= row {
                        lines.push(Vec::new());
                    }
                }
                c => {
                    if col == width {
                        wrapped = true;
                        (row, col) = (row + 1, 0);
                        if lines.len() <= row {
                            lines.push(Vec::new());
                        }
                    }
                    let line = &mut lines[row];
                    line.resize(line.len().max(col), ' ');
                    if col < line.len() {
                        line[col] = c;
                    } else {
                        line.push(c);
                    }
                    col += 1;
                }
            }
        }
        let lines = lines.into_iter().map(|l| l.into_iter().collect::<String>()).collect();
        Self { lines, wrapped }
    }

    fn text(&self) -> String {
        self.lines.join("\n")
    }
}

const FOUR: &str = r#"
name: four
limits: {max_concurrent: 4}
defaults: {cli: claude, timeout: 90s, permission_timeout: 60s}
steps:
  - {id: scan, prompt: "SCENARIO=att_scan go"}
  - {id: fix, prompt: "SCENARIO=att_fix go"}
  - {id: lint, prompt: "SCENARIO=att_lint go"}
  - {id: report, prompt: "SCENARIO=att_report go", depends_on: [scan]}
"#;

#[test]
fn a_person_follows_and_answers_a_plan_at_its_own_prompt() {
    let Some(w) = World::with_claude() else { return };
    let (fixed, linted) = (w.work.join("fixed.txt"), w.work.join("linted.txt"));
    let mock = MockServer::shared();
    mock.script("att_scan", Script::new().text("scanned"));
    mock.script("att_report", Script::new().text("reported"));
    // Two steps ask for a person, and stay waiting while the first is answered.
    touch_then_done("att_fix", &fixed);
    touch_then_done("att_lint", &linted);
    std::fs::write(w.work.join("four.yml"), FOUR.replace(", permission_timeout: 60s", "")).unwrap();
    let mut term = Terminal::start(w.herd(&["run", "four.yml", "--json"]), 80);
    let shown = |term: &Terminal, from: usize| term.raw(from);
    let waiting_line = |text: &str, step: &str| {
        text.lines().any(|l| l.contains(&format!(" {step} ")) && l.contains("waiting for approval"))
    };
    // Both show as waiting, with the plan's own prompt naming one of them.
    assert!(
        wait_until(Duration::from_secs(60), || {
            let s = shown(&term, 0);
            waiting_line(&s, "fix") && waiting_line(&s, "lint") && s.contains("allow? [y]es")
        }),
        "the display never showed both waiting with a prompt:\n{}",
        shown(&term, 0)
    );
    // From another terminal: both listed with their step and plan, both runs waiting.
    let out = w.run(&["approve"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    for step in ["fix", "lint"] {
        assert!(listed.contains(&format!("step {step} of pln_")), "{listed}");
    }
    let (_, rows) = w.json(&["ps", "--json"]);
    let waiting = rows.as_array().unwrap().iter().filter(|r| r["state"] == "waiting").count();
    assert_eq!(waiting, 2, "{rows}");
    let first_prompt = shown(&term, 0).rfind("allow? [y]es").unwrap();
    let first_id = request_id(&shown(&term, first_prompt));
    term.typed("y\n");
    // The other one is asked next, by name.
    assert!(
        wait_until(Duration::from_secs(30), || {
            let s = shown(&term, first_prompt);
            s.match_indices("allow? [y]es").any(|(i, _)| request_id(&s[i..]) != first_id)
        }),
        "no second prompt:\n{}",
        shown(&term, first_prompt)
    );
    let s = shown(&term, first_prompt);
    let (second, _) =
        s.match_indices("allow? [y]es").find(|(i, _)| request_id(&s[*i..]) != first_id).unwrap();
    let asked = &s[s[..second].rfind("herd: ").unwrap()..second];
    assert!(asked.contains("step fix") || asked.contains("step lint"), "{asked}");
    term.typed("y\n");
    let (status, out, screen) = term.finish();
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{screen:?}"));
    let screen_text = screen.text();
    assert_eq!(status.code(), Some(0), "{v}\n{screen_text}");
    assert!(fixed.exists() && linted.exists(), "an approved call did not run");
    // Each transition was announced, with its run; what is left on the screen is those lines
    // (no spinner, no prompt), and nothing was drawn wider than the terminal.
    for s in v["steps"].as_array().unwrap() {
        let (id, run) = (s["id"].as_str().unwrap(), s["subagent_id"].as_str().unwrap());
        assert!(screen_text.contains(&format!("herd: {id} started as {run}")), "{screen_text}");
        assert!(screen_text.contains(&format!("herd: {id} completed")), "{screen_text}");
    }
    assert!(!screen.wrapped, "wider than 80 columns:\n{screen_text}");
    for l in screen.lines.iter().filter(|l| !l.is_empty()) {
        assert!(l.starts_with("herd: ") && !l.contains("allow?"), "left on the screen: {l:?}");
    }

    // The plan is found and shown afterwards.
    let plan = v["id"].as_str().unwrap();
    let (_, plans) = w.json(&["plans", "--all", "--json"]);
    let listed = plans.as_array().unwrap().iter().find(|p| p["id"] == plan).unwrap();
    assert_eq!((&listed["status"], &listed["completed_steps"]), (&json!("completed"), &json!(4)));
    let out = w.run(&["show", &plan[..12]]);
    let shown_plan = String::from_utf8_lossy(&out.stdout);
    for s in v["steps"].as_array().unwrap() {
        let run = s["subagent_id"].as_str().unwrap();
        assert!(shown_plan.contains(run), "{run} missing:\n{shown_plan}");
    }
    let (_, shown_json) = w.json(&["show", plan, "--json"]);
    assert_eq!(shown_json["steps"].as_array().unwrap().len(), 4);
    // ps: one row per run, each id unique as shown, each named by its step, with its plan.
    let out = w.run(&["ps", "--all"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 4, "{table}");
    let mut ids: Vec<&str> = rows.iter().map(|r| r.split_whitespace().next().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 4, "ids are not unique as shown:\n{table}");
    for id in ids {
        let out = w.run(&["show", id]);
        assert!(out.status.success(), "{id}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // Each row with its step's own prompt (report's run was given scan's result before it).
    for step in ["scan", "fix", "lint", "report"] {
        let row = rows.iter().find(|r| r.contains(&format!(" {step} "))).unwrap();
        assert!(row.contains(&plan[..8]), "{table}");
        assert!(row.ends_with(&format!("  SCENARIO=att_{step} go")), "{table}");
    }
    // Its log has the plan's events and its steps'.
    let (_, log) = w.json(&["logs", plan, "--json"]);
    let log = log.as_array().unwrap();
    assert!(log.iter().any(|e| e["kind"] == "plan_completed"));
    assert!(log.iter().any(|e| e["step"] == "fix" && e["kind"] == "permission_decided"));
}

#[test]
fn a_plan_run_elsewhere_is_cancelled_from_another_terminal() {
    let w = World::new();
    std::fs::write(
        w.work.join("slow.yml"),
        "defaults: {cli: command, prompt: go, command: [sh, -c, \"sleep 71.93\"]}\nsteps: [{id: a}, {id: b}, {id: c, depends_on: [a]}]\n",
    )
    .unwrap();
    let child = w
        .herd(&["run", "slow.yml", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        common::procs_with_cmdline("sleep 71.93").len() >= 2
    }));
    let (_, plans) = w.json(&["plans", "--json"]);
    let plan = plans[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(plans[0]["running_steps"], 2, "{plans}");
    // ps lists the step that has not started, with its plan.
    let out = w.run(&["ps"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().any(|l| l.starts_with("- ") && l.contains(" c ")), "{table}");
    let out = w.run(&["cancel", &plan]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("cancelled"));
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(130), "{v}");
    assert_eq!(v["status"], "cancelled");
    for s in v["steps"].as_array().unwrap() {
        assert_eq!(s["status"], "cancelled", "{s}");
    }
    assert!(common::procs_with_cmdline("sleep 71.93").is_empty());
    let (_, log) = w.json(&["logs", &plan, "--json"]);
    assert!(log.as_array().unwrap().iter().any(|e| e["kind"] == "plan_cancel_requested"));
}

/// The first permission request id (`perm_…`) in `s`.
fn request_id(s: &str) -> String {
    let at = s.find("perm_").unwrap_or(s.len());
    s[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

#[test]
fn ctrl_c_on_a_plan_says_stopping_and_leaves_a_clean_screen() {
    let w = World::new();
    // Steps that ignore the graceful stop: only the second Ctrl-C ends them.
    std::fs::write(
        w.work.join("stubborn.yml"),
        "defaults: {cli: command, prompt: go, command: [sh, -c, \"trap '' INT TERM; while :; do sleep 0.2; done\"]}\n\
         steps: [{id: a}, {id: b}, {id: c, depends_on: [a]}]\n",
    )
    .unwrap();
    let term = Terminal::start(w.herd(&["run", "stubborn.yml"]), 80);
    let pid = nix::unistd::Pid::from_raw(term.child.id() as i32);
    let running = |t: &Terminal| {
        let s = t.raw(0);
        ["a", "b"]
            .iter()
            .all(|id| s.lines().any(|l| l.contains(&format!(" {id} ")) && l.contains("running")))
    };
    assert!(wait_until(Duration::from_secs(20), || running(&term)), "{}", term.raw(0));
    let interrupt = || nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    interrupt();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let s = term.raw(0);
            s.contains("stopping… (Ctrl-C again to kill)")
                && ["a", "b"].iter().all(|id| {
                    s.lines().any(|l| l.contains(&format!(" {id} ")) && l.contains("stopping"))
                })
        }),
        "{}",
        term.raw(0)
    );
    interrupt();
    let (status, out, screen) = term.finish();
    let text = screen.text();
    assert_eq!(status.code(), Some(130), "{out}\n{text}");
    assert!(out.contains("cancelled") && !screen.wrapped, "{out}\n{text}");
    // Left on the screen: the announcements only (no spinner line, no 'stopping…').
    let left: Vec<&String> = screen.lines.iter().filter(|l| !l.is_empty()).collect();
    assert!(left.iter().all(|l| l.starts_with("herd: ")), "{text}");
    for id in ["a", "b", "c"] {
        assert!(left.iter().any(|l| l.as_str() == format!("herd: {id} cancelled")), "{text}");
    }
}

/// The screen model the tests above read their terminal through.
#[test]
fn the_screen_model_follows_redraws_and_sees_wrapping() {
    // A block of two lines drawn, then gone back over and cleared: only what replaced it stays.
    let s = Screen::of("herd: a\n  ⠋ a  running\n  1/2\n\r\x1b[2A\r\x1b[Jherd: b\n", 80);
    assert_eq!(s.lines, ["herd: a", "herd: b", ""]);
    assert!(!s.wrapped);
    let s = Screen::of("abcdef\rxy\x1b[2Kz", 5);
    assert_eq!(s.lines, ["abcde", "  z"]);
    assert!(s.wrapped);
}

//! `herd` with the command backend and the read-side commands: exit codes, the environment
//! allowlist, output limits, usage errors (snapshotted), ps/show/logs from the store.

mod common;

use std::time::{Duration, Instant};

use common::{World, procs_with_cmdline};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn prompt_goes_to_stdin_and_stdout_is_the_result() {
    let w = World::new();
    let out = w.run(&[
        "task",
        "hello herd",
        "--cli",
        "command",
        "--",
        "sh",
        "-c",
        "tr a-z A-Z; echo; echo done",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "HELLO HERD\ndone\n");
    // Quiet when piped: nothing on stderr for a completed run.
    assert_eq!(stderr(&out), "");
}

#[test]
fn the_exit_code_decides_and_json_has_the_documented_fields() {
    let w = World::new();
    let (code, v) = w.json(&[
        "task",
        "x",
        "--cli",
        "command",
        "--json",
        "--",
        "sh",
        "-c",
        "echo partial; exit 7",
    ]);
    assert_eq!(code, 1);
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "cli",
            "completed_at",
            "cost_usd",
            "created_at",
            "cwd",
            "duration_ms",
            "exit_code",
            "exit_signal",
            "failure_reason",
            "id",
            "model",
            "name",
            "native_session_id",
            "num_turns",
            "pid",
            "plan_id",
            "prompt",
            "result",
            "result_truncated",
            "started_at",
            "state",
            "status",
            "step",
            "transcript",
            "unanswered_denials",
            "usage"
        ],
        "one run shape for task --json, show --json and ps --json"
    );
    assert_eq!(v["failure_reason"], "exit_code(7)");
    assert_eq!(v["result"], "partial");
}

#[test]
fn only_allowlisted_and_explicit_variables_reach_the_child() {
    let w = World::new();
    let out = w
        .herd(&["task", "x", "--cli", "command", "--env", "MY_FLAG=on", "--", "env"])
        .env("AWS_SECRET_ACCESS_KEY", "leak")
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(env.contains("MY_FLAG=on"));
    assert!(env.contains("LC_ALL=C"));
    assert!(env.contains("HOME="));
    assert!(!env.contains("AWS_SECRET_ACCESS_KEY"), "{env}");
    assert!(!env.contains("HERD_STATE_DIR"), "{env}");
    // The command backend passes no model-API variables.
    assert!(!env.contains("ANTHROPIC_"), "{env}");
}

#[test]
fn timeout_kills_setsid_leftovers() {
    let w = World::new();
    let start = Instant::now();
    let out = w.run(&[
        "task",
        "x",
        "--cli",
        "command",
        "--timeout",
        "2s",
        "--",
        "sh",
        "-c",
        "setsid sleep 300.21 & sleep 300.21",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(stderr(&out).contains("failed: timeout"));
    assert!(
        procs_with_cmdline("sleep 300.21").is_empty(),
        "{:?}",
        procs_with_cmdline("sleep 300.21")
    );
}

#[test]
fn leftovers_of_a_finished_run_are_killed_and_reported() {
    let w = World::new();
    let out = w.run(&[
        "task",
        "x",
        "--cli",
        "command",
        "--json",
        "--",
        "sh",
        "-c",
        "setsid sleep 301.7 & echo started",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(procs_with_cmdline("sleep 301.7").is_empty());
    assert!(w.kinds(v["id"].as_str().unwrap()).contains(&"leftovers_killed".to_owned()));
}

#[test]
fn a_leftover_lives_while_its_own_run_does_whatever_other_runs_end() {
    // A guard serves several runs: a process `a` left behind (re-parented to the guard while `a`
    // still runs) must survive `b`'s end on the same guard, and die with `a`.
    let w = World::new();
    let plan = r#"
name: leftovers
strategy: parallel
defaults: {cli: command, prompt: go}
steps:
  - id: a
    command: [sh, -c, "(setsid sleep 304.6 & echo $! > orphan.pid); sleep 2.5; kill -0 $(cat orphan.pid) && echo alive"]
  - {id: b, command: [sleep, "0.3"]}
"#;
    let (code, v) = w.run_plan_on_one_guard("leftovers.yml", plan);
    assert_eq!(code, 0, "{v}");
    let a = v["steps"].as_array().unwrap().iter().find(|s| s["id"] == "a").unwrap();
    let id = a["subagent_id"].as_str().unwrap();
    assert_eq!(w.result_of(id), "alive", "{v}");
    assert!(
        procs_with_cmdline("sleep 304.6").is_empty(),
        "{:?}",
        procs_with_cmdline("sleep 304.6")
    );
    assert!(w.kinds(id).contains(&"leftovers_killed".to_owned()));
}

#[test]
fn a_leftover_without_its_marker_is_known_by_its_process_group() {
    // `env -i` wipes HERD_SUBAGENT_ID; the leftover still sits in its agent's process group and
    // must go when that agent ends, while another run is still going on the same guard.
    let w = World::new();
    let plan = r#"
name: unmarked
strategy: parallel
defaults: {cli: command, prompt: go}
steps:
  - {id: a, command: [sh, -c, "(env -i /bin/sleep 307.2 & echo $! > unmarked.pid); sleep 0.7; echo left"]}
  - {id: b, command: [sh, -c, "sleep 2; kill -0 $(cat unmarked.pid) 2>/dev/null && echo alive || echo gone"]}
"#;
    let (code, v) = w.run_plan_on_one_guard("unmarked.yml", plan);
    assert_eq!(code, 0, "{v}");
    let b = v["steps"].as_array().unwrap().iter().find(|s| s["id"] == "b").unwrap();
    assert_eq!(w.result_of(b["subagent_id"].as_str().unwrap()), "gone", "{v}");
    assert!(procs_with_cmdline("sleep 307.2").is_empty());
}

#[test]
fn a_guard_told_to_stop_takes_every_agent_down_first() {
    let w = World::new();
    let child = w
        .herd(&[
            "task",
            "x",
            "--cli",
            "command",
            "--",
            "sh",
            "-c",
            "setsid sleep 306.4 & sleep 306.4",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let parent = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)?.parse::<u32>().ok())
    };
    let ours = || {
        procs_with_cmdline("__guard").into_iter().find(|(pid, _)| parent(*pid) == Some(child.id()))
    };
    // The guard, then sh and both sleeps (sh's command line holds the text too).
    let started = || ours().is_some() && procs_with_cmdline("sleep 306.4").len() >= 3;
    assert!(common::wait_until(Duration::from_secs(10), started));
    let guard = ours().unwrap().0;
    let _ = std::process::Command::new("kill").args(["-TERM", &guard.to_string()]).status();
    assert!(
        common::wait_until(Duration::from_secs(5), || procs_with_cmdline("sleep 306.4").is_empty()),
        "left behind: {:?}",
        procs_with_cmdline("sleep 306.4")
    );
    let out = child.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn max_output_truncates_the_result_but_not_the_transcript() {
    let w = World::new();
    let (code, v) = w.json(&[
        "task",
        "x",
        "--cli",
        "command",
        "--max-output-kb",
        "1",
        "--json",
        "--",
        "sh",
        "-c",
        "head -c 5000 /dev/zero | tr '\\0' y",
    ]);
    assert_eq!(code, 0);
    let result = v["result"].as_str().unwrap();
    assert!(result.starts_with(&"y".repeat(1024)));
    assert!(result.contains("[herd: output truncated to 1024 of 5000 bytes"), "{result}");
    let id = v["id"].as_str().unwrap();
    let t = std::fs::read(w.state.join(format!("transcripts/{id}.jsonl"))).unwrap();
    assert_eq!(t.len(), 5000);
    let (_, row) = w.json(&["show", id, "--json"]);
    assert_eq!(row["result_truncated"], true);
}

#[test]
fn a_missing_program_is_a_recorded_spawn_error() {
    let w = World::new();
    let (code, v) =
        w.json(&["task", "x", "--cli", "command", "--json", "--", "no-such-program-xyz"]);
    assert_eq!(code, 1);
    assert_eq!(v["status"], "failed");
    assert!(v["failure_reason"].as_str().unwrap().contains("no-such-program-xyz"), "{v}");
}

#[test]
fn ps_show_and_logs_read_the_store() {
    let w = World::new();
    let (_, v) = w.json(&[
        "task",
        "list me",
        "--cli",
        "command",
        "--json",
        "--",
        "sh",
        "-c",
        "echo one; echo two >&2",
    ]);
    let id = v["id"].as_str().unwrap();
    let out = w.run(&["ps"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "no subagents (--all shows finished ones)\n");
    let out = w.run(&["ps", "--all"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("ID "));
    assert!(table.contains(&id[..12]) && table.contains("completed") && table.contains("list me"));
    let out = w.run(&["show", &id[..8]]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("status: completed") && shown.contains("result:\none"), "{shown}");
    let mut kinds = w.kinds(id);
    // stdout and stderr are read concurrently: their relative order is not defined.
    kinds[2..4].sort();
    assert_eq!(
        kinds,
        [
            "subagent_created",
            "subagent_started",
            "stderr",
            "text",
            "subagent_completed",
            "subagent_closed"
        ],
    );
    let raw = w.run(&["logs", id, "--raw"]);
    assert_eq!(String::from_utf8_lossy(&raw.stdout), "one\n");
}

#[test]
fn usage_errors_exit_2_with_clear_messages() {
    let w = World::new();
    let cases: &[&[&str]] = &[
        &["task", "x", "--cli", "command"],
        &["task", "x", "--cli", "claude", "--", "ls"],
        // The agent's PATH has no gemini (and HERD_GEMINI_BIN is unset): named, with the fix.
        &["task", "x", "--cli", "gemini", "--env", "PATH=/nonexistent"],
        &["task", "x", "--timeout", "0s"],
        &["task", "x", "--env", "NOEQUALS"],
        &["task", "x", "--cwd", "/definitely/not/here", "--cli", "command", "--", "true"],
        &["show", "zzzz"],
    ];
    let mut report = String::new();
    for args in cases {
        let out = w.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let first = stderr(&out).lines().next().unwrap_or("").to_owned();
        report.push_str(&format!("herd {}\n  {first}\n", args.join(" ")));
    }
    insta::assert_snapshot!(report);
}

#[test]
fn help_teaches() {
    let w = World::new();
    let out = w.run(&["task", "--help"]);
    insta::assert_snapshot!(String::from_utf8_lossy(&out.stdout));
    for args in [&["--help"][..], &["run", "--help"], &["ps", "--help"]] {
        let out = w.run(args);
        assert!(out.status.success(), "{args:?}");
        let words: Vec<&str> =
            std::iter::once("herd").chain(args[..args.len() - 1].to_vec()).collect();
        let name = format!("help_{}", words.join("_"));
        insta::assert_snapshot!(name, String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn resume_without_native_sessions_replays_history() {
    let w = World::new();
    let (_, first) = w.json(&[
        "task",
        "remember 42",
        "--cli",
        "command",
        "--json",
        "--",
        "sh",
        "-c",
        "cat; echo; echo noted",
    ]);
    let id = first["id"].as_str().unwrap();
    let out = w.run(&["task", "what was it?", "--resume", id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("<herd:context source=\"history:{id}\" trusted=\"false\">")),
        "{text}"
    );
    // A program's lines read together are one chunk of its output.
    let said =
        text.split("assistant: ").skip(1).any(|s| s.starts_with("noted") || s.contains("\nnoted"));
    assert!(text.contains("user: remember 42") && said, "{text}");
    assert!(text.contains("<herd:user_prompt>\nwhat was it?\n</herd:user_prompt>"), "{text}");
}

#[test]
fn forced_cancel_records_cancelled() {
    let w = World::new();
    let child = w
        .herd(&["task", "x", "--cli", "command", "--json", "--", "sh", "-c", "sleep 78.91"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sleeping =
        || procs_with_cmdline("sleep 78.91").iter().any(|(_, c)| c.starts_with("sleep 78.91"));
    assert!(common::wait_until(Duration::from_secs(10), sleeping));
    let (_, list) = w.json(&["ps", "--json"]);
    let id = list[0]["id"].as_str().unwrap().to_owned();
    let out = w.run(&["cancel", &id, "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let (_, row) = w.json(&["show", &id, "--json"]);
    assert_eq!(row["status"], "cancelled");
    assert!(!procs_with_cmdline("sleep 78.91").iter().any(|(_, c)| c.starts_with("sleep 78.91")));
}

#[test]
fn herds_state_stays_out_of_git_status_and_project_files_stay_in() {
    let w = World::new();
    common::git(&w.work, &["init", "-q"]);
    // The state dir in the project, where herd creates it.
    let out = w
        .herd(&["task", "x", "--cli", "command", "--", "true"])
        .env_remove("HERD_STATE_DIR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(w.work.join(".herd/herd.db").exists());
    let status = common::git(&w.work, &["status", "--porcelain", "--untracked-files=all"]);
    assert_eq!(status, "", "herd's state shows in git status");
    // What a person keeps there still shows.
    std::fs::write(w.work.join(".herd/config.yml"), "max_turns: 3\n").unwrap();
    std::fs::create_dir_all(w.work.join(".herd/agents")).unwrap();
    std::fs::write(w.work.join(".herd/agents/a.yml"), "name: a\n").unwrap();
    let status = common::git(&w.work, &["status", "--porcelain", "--untracked-files=all"]);
    assert_eq!(status, "?? .herd/agents/a.yml\n?? .herd/config.yml\n");
    // A state dir that existed before is left as it is.
    let mine = w.work.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    let out = w
        .herd(&["task", "x", "--cli", "command", "--", "true"])
        .env("HERD_STATE_DIR", &mine)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!mine.join(".gitignore").exists());
}

#[test]
fn shell_completions_are_printed() {
    let w = World::new();
    for (shell, marker) in
        [("bash", "_herd()"), ("zsh", "#compdef herd"), ("fish", "complete -c herd")]
    {
        let out = w.run(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker) && text.contains("plans"), "{shell}: {text}");
    }
    let out = w.run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_users_config_applies_under_the_projects() {
    let w = World::new();
    let user = w.home.join("xdg/herd");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("config.yml"), "timeout: 1s\n").unwrap();
    let task = |w: &World| {
        w.herd(&["task", "x", "--cli", "command", "--json", "--", "sleep", "2"])
            .env("XDG_CONFIG_HOME", w.home.join("xdg"))
            .output()
            .unwrap()
    };
    // The user's timeout applies where the project says nothing.
    let out = task(&w);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["failure_reason"], "timeout", "{v}");
    // The project's own setting wins.
    std::fs::create_dir_all(w.work.join(".herd")).unwrap();
    std::fs::write(w.work.join(".herd/config.yml"), "timeout: 30s\n").unwrap();
    let out = task(&w);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A mistake in the user's file names that file.
    std::fs::write(user.join("config.yml"), "timeout: soon\n").unwrap();
    let out = task(&w);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("xdg/herd/config.yml"), "{}", stderr(&out));
}

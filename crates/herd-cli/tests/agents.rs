//! `herd agents …` and agent selection, with the command backend: list, show, validate,
//! idempotent import from Claude files, `--agent` limits, `--explain`, `default_cli`.

mod common;

use common::World;

fn write(w: &World, rel: &str, text: &str) {
    let p = w.work.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

const CLAUDE_AGENT: &str = "---\nname: tester\ndescription: Writes tests\ntools: Read, Bash\nmodel: inherit\npermissionMode: acceptEdits\n---\nYou write tests for ${HOME}-free code.\n";

#[test]
fn import_is_one_way_and_idempotent() {
    let w = World::new();
    write(&w, ".claude/agents/tester.md", CLAUDE_AGENT);
    let out = w.run(&["agents", "import", "--from", "claude", "--dry-run"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tester: would be created"), "{text}");
    assert!(!w.work.join(".herd/agents/tester.yml").exists());
    let out = w.run(&["agents", "import", "--from", "claude"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("tester: created"));
    let native = std::fs::read_to_string(w.work.join(".herd/agents/tester.yml")).unwrap();
    assert!(
        native.contains("from: claude") && native.contains(".claude/agents/tester.md"),
        "{native}"
    );
    let out = w.run(&["agents", "import", "--from", "claude"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("tester: unchanged"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A local edit survives a re-import without --update.
    std::fs::write(
        w.work.join(".herd/agents/tester.yml"),
        native.replace("Writes tests", "Writes good tests"),
    )
    .unwrap();
    let out = w.run(&["agents", "import", "--from", "claude"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("tester: kept"));
    assert!(
        std::fs::read_to_string(w.work.join(".herd/agents/tester.yml"))
            .unwrap()
            .contains("good tests")
    );
    let out = w.run(&["agents", "import", "--from", "claude", "--update"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("tester: updated"));

    let (_, list) = w.json(&["agents", "list", "--json"]);
    let t = &list.as_array().unwrap()[0];
    assert_eq!(t["name"], "tester");
    assert_eq!(t["source"], "native");
    let out = w.run(&["agents", "validate"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    // The file it was imported from is its source, not a definition it shadows.
    let out = w.run(&["agents", "list"]);
    let all =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!all.contains("shadowed"), "{all}");
}

#[test]
fn agents_that_cannot_run_here_say_why() {
    let w = World::new();
    write(&w, ".herd/agents/coder.yml", "name: coder\ncli: codex\nprompt: Code.\n");
    write(&w, ".herd/agents/runner.yml", "name: runner\ncli: command\n");
    let out = w
        .herd(&["agents", "list", "--json"])
        .env("HERD_CODEX_BIN", "/nowhere/codex")
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let coder = &list[0];
    assert_eq!((&coder["name"], &coder["runnable"]), (&"coder".into(), &false.into()), "{list}");
    let why = coder["not_runnable_because"].as_str().unwrap();
    assert!(why.contains("codex is not installed") && why.contains("/nowhere/codex"), "{why}");
    assert_eq!(
        (&list[1]["runnable"], &list[1]["not_runnable_because"]),
        (&true.into(), &serde_json::Value::Null)
    );
    let out = w.herd(&["agents", "list"]).env("HERD_CODEX_BIN", "/nowhere/codex").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(cannot run here: codex is not installed"), "{text}");
}

#[test]
fn list_show_and_validate_report_sources_and_errors() {
    let w = World::new();
    write(&w, ".claude/agents/tester.md", CLAUDE_AGENT);
    write(&w, ".herd/agents/broken.yml", "name: broken\ncli: claude\nmax_turn: 3\n");
    let (_, list) = w.json(&["agents", "list", "--json"]);
    assert_eq!(
        list[0]["source"],
        "from claude: .claude/agents/tester.md"
            .replace(".claude", &format!("{}/.claude", w.work.display()))
    );
    let out = w.run(&["agents", "show", "tester"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("dropped:") && shown.contains("permissionMode"), "{shown}");
    let out = w.run(&["agents", "validate"]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("broken.yml") && text.contains("max_turn"), "{text}");
}

#[test]
fn agent_limits_apply_and_selection_is_explained() {
    let w = World::new();
    write(
        &w,
        ".herd/agents/echoer.yml",
        "name: echoer\ncli: command\ntimeout: 1s\nenv: {GREETING: hi}\n",
    );
    let out = w.run(&[
        "task",
        "x",
        "--agent",
        "echoer",
        "--explain",
        "--",
        "sh",
        "-c",
        "echo $GREETING; sleep 5",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("herd: cli command: agent echoer says cli: command"), "{err}");
    write(
        &w,
        ".herd/agents/greeter.yml",
        "cli: command\nprompt: Greet ${who}.\ninputs: [{name: who, default: world}]\n",
    );
    let out = w.run(&[
        "task",
        "x",
        "--agent",
        "greeter",
        "--",
        "sh",
        "-c",
        "echo \"$HERD_SYSTEM_PROMPT\"",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Greet world.\n");
    write(&w, ".herd/config.yml", "default_cli: command\n");
    let out = w.run(&["task", "hello", "--explain", "--", "cat"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("default_cli in"));
    let out = w.run(&["task", "x", "--agent", "nobody", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("no agent named \"nobody\" (known: echoer, greeter)")
    );
}

#[test]
fn an_agents_hooks_run_for_its_tasks_and_plan_steps_and_bad_ones_are_refused() {
    let w = World::new();
    let log = w.work.join("hooks.log");
    write(
        &w,
        ".herd/agents/hooky.yml",
        &format!(
            "cli: command\nask: [\"Bash(git push *)\"]\nhooks:\n  SubagentStart:\n    - command: \"echo start $HERD_SUBAGENT_NAME >> {0}\"\n  SubagentStop:\n    - command: \"echo stop >> {0}\"\n      timeout: 5s\n",
            log.display()
        ),
    );
    let out = w.run(&["task", "x", "--agent", "hooky", "--", "true"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "start hooky\nstop\n");

    // A plan step that names the agent gets its hooks too.
    std::fs::remove_file(&log).unwrap();
    write(
        &w,
        "p.yml",
        "name: p\nsteps:\n  - {id: one, agent: hooky, prompt: go, command: [\"true\"]}\n",
    );
    let out = w.run(&["run", "p.yml"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "start one\nstop\n");

    // A bad hook or rule is named with its file and field, before anything runs.
    write(&w, ".herd/agents/bad.yml", "cli: command\nhooks:\n  BeforeAll:\n    - command: x\n");
    let out = w.run(&["task", "x", "--agent", "bad", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yml") && err.contains("hooks.BeforeAll"), "{err}");
    write(&w, ".herd/agents/bad.yml", "cli: command\nask: [\"Bash(\"]\n");
    let out = w.run(&["agents", "validate"]);
    let err =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(err.contains("ask[0]") && err.contains("unbalanced"), "{err}");
}

use super::*;
use proptest::prelude::*;

const GOOD: &str = r#"
name: demo
defaults:
  cli: command
  command: [sh, -c, "cat"]
limits:
  max_concurrent: 2
steps:
  - id: a
    prompt: first
  - id: b
    prompt: second
    depends_on: [a]
  - id: c
    prompt: third
    depends_on: [a, b]
    cli: claude
"#;

fn problems(src: &str) -> Vec<String> {
    match Plan::from_source("plan.yml", src) {
        Ok(_) => vec![],
        Err(e) => e.problems.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_good_plan_validates_with_defaults_and_layers() {
    let p = Plan::from_source("plan.yml", GOOD).unwrap();
    assert_eq!(p.name, "demo");
    assert_eq!(p.steps[1].deps, vec![0]);
    assert_eq!(p.steps[1].fields.cli.as_deref(), Some("command"));
    assert_eq!(p.steps[2].depends_on, vec!["a", "b"]);
    assert_eq!(p.layers(), vec![vec![0], vec![1], vec![2]]);
    assert_eq!(p.steps[1].line, Some(11));
}

#[test]
fn json_plans_work_too() {
    let p = Plan::from_source(
        "p.json",
        r#"{"strategy": "parallel", "steps": [{"id": "x", "prompt": "p", "cli": "command", "command": ["true"]}, {"id": "y", "prompt": "q", "cli": "command", "command": ["true"]}]}"#,
    )
    .unwrap();
    assert_eq!(p.layers(), vec![vec![0, 1]]);
}

#[test]
fn sequential_is_a_chain() {
    let p = Plan::from_source(
        "p.yml",
        "strategy: sequential\ndefaults: {cli: command, command: [\"true\"], prompt: go}\nsteps: [{id: a}, {id: b}, {id: c}]\n",
    )
    .unwrap();
    assert_eq!(p.layers(), vec![vec![0], vec![1], vec![2]]);
}

#[test]
fn acp_steps_name_their_agent_and_only_they_do() {
    let ok = PlanFile::parse(
        "p.yml",
        "defaults: {cli: acp, acp: {command: [gemini, --acp]}}\nsteps:\n  - {id: a, prompt: go}\n  - {id: b, prompt: go, cli: codex}\n",
    )
    .unwrap()
    .validate("p.yml", "")
    .unwrap();
    assert_eq!(ok.steps[0].fields.acp.as_ref().unwrap().command, ["gemini", "--acp"]);
    // A step on another cli does not inherit the default agent command.
    assert!(ok.steps[1].fields.acp.is_none());
    let src = "steps:\n  - id: a\n    prompt: x\n    cli: acp\n  - id: b\n    prompt: x\n    acp: {command: [x]}\n  - id: c\n    prompt: x\n    cli: acp\n    acp: {command: []}\n";
    let p = problems(src);
    assert!(p.iter().any(|x| x.contains("steps[0] (a).acp: cli: acp needs acp")), "{p:#?}");
    assert!(p.iter().any(|x| x.contains("steps[1] (b).acp: only for cli: acp")), "{p:#?}");
    assert!(p.iter().any(|x| x.contains("steps[2] (c).acp.command: command is empty")), "{p:#?}");
}

#[test]
fn every_problem_is_reported_with_line_and_field() {
    let src = "steps:\n  - id: a\n    prompt: x\n    depends_on: [ghost]\n  - id: a\n    prompt: second\n  - id: c\n    cli: cursor\n    depends_on: [c]\n";
    let p = problems(src);
    assert!(
        p.contains(&"line 7: steps[2] (c).depends_on: a step cannot depend on itself".to_owned()),
        "{p:#?}"
    );
    assert!(
        p.contains(&"line 2: steps[0] (a).depends_on: unknown step \"ghost\"".to_owned()),
        "{p:#?}"
    );
    assert!(
        p.contains(&"line 5: steps[1] (a).id: duplicate id (also steps[0])".to_owned()),
        "{p:#?}"
    );
    assert!(p.iter().any(|x| x.starts_with("line 7: steps[2] (c).prompt: missing")), "{p:#?}");
    assert!(p.iter().any(|x| x.contains("unknown cli \"cursor\"")), "{p:#?}");
}

#[test]
fn cycles_are_named() {
    let src = "defaults: {cli: command, command: [\"true\"], prompt: go}\nsteps:\n  - {id: a, depends_on: [c]}\n  - {id: b, depends_on: [a]}\n  - {id: c, depends_on: [b]}\n  - {id: d}\n";
    let p = problems(src);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("cycle: a -> c -> b -> a"), "{p:?}");
}

#[test]
fn unknown_keys_and_bad_types_are_rejected_with_a_line() {
    let err = Plan::from_source("p.yml", "steps:\n  - id: a\n    promt: typo\n").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("promt") && msg.contains("p.yml:line 2") && msg.contains("--> p.yml:2:5"),
        "{msg}"
    );
    let err =
        Plan::from_source("p.yml", "limits: {max_concurrent: lots}\nsteps: []\n").unwrap_err();
    assert!(err.to_string().contains("p.yml:line 1"), "{err}");
}

#[test]
fn limits_are_checked() {
    let p = problems(
        "limits: {max_concurrent: 50, budget_usd: -1, timeout: soon}\ndefaults: {cli: command, command: [\"true\"], prompt: go}\nsteps: [{id: a}]\n",
    );
    assert_eq!(p.len(), 3, "{p:?}");
}

proptest! {
    #[test]
    fn parsing_never_panics(s in ".{0,400}") {
        let _ = Plan::from_source("fuzz.yml", &s);
    }

    #[test]
    fn random_graphs_are_either_acyclic_plans_or_named_cycles(edges in proptest::collection::vec((0usize..8, 0usize..8), 0..20)) {
        let mut src = String::from("defaults: {cli: command, command: [\"true\"], prompt: go}\nsteps:\n");
        for i in 0..8 {
            let deps: Vec<String> = edges.iter().filter(|(a, b)| *a == i && a != b).map(|(_, b)| format!("s{b}")).collect();
            src.push_str(&format!("  - {{id: s{i}, depends_on: [{}]}}\n", deps.join(", ")));
        }
        match Plan::from_source("g.yml", &src) {
            Ok(p) => {
                let layer: Vec<usize> = {
                    let mut l = vec![0; 8];
                    for (d, ids) in p.layers().iter().enumerate() { for &i in ids { l[i] = d; } }
                    l
                };
                for (i, s) in p.steps.iter().enumerate() { for &d in &s.deps { prop_assert!(layer[d] < layer[i]); } }
            }
            Err(e) => prop_assert!(e.problems.iter().all(|p| p.message.starts_with("cycle: ")), "{e}"),
        }
    }
}

#[test]
fn workspace_fields_default_merge_and_are_checked_against_their_mode() {
    let src = "worktree_root: ../wt\ninto: feature/x\n\
        defaults: {workspace: isolated, setup: make deps}\nsteps:\n\
        \x20 - {id: a, prompt: go}\n\
        \x20 - {id: b, prompt: go, workspace: shared, setup: null}\n\
        \x20 - {id: c, prompt: go, workspace: locked, lock: shared, wait: true}\n\
        \x20 - {id: d, prompt: go, base: main, auto_commit: false}\n";
    // A step leaving the defaults' isolation keeps its setup: that is an error, by field.
    let errs = problems(src);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].contains("steps[1] (b).setup: only for workspace: isolated"), "{errs:?}");
    assert!(errs[1].contains("steps[2] (c).setup: only for workspace: isolated"), "{errs:?}");
    let ok = src.replace(
        "defaults: {workspace: isolated, setup: make deps}",
        "defaults: {workspace: isolated}",
    );
    let p = Plan::from_source("plan.yml", &ok).unwrap();
    let modes: Vec<WorkspaceMode> = p.steps.iter().map(Step::workspace).collect();
    use WorkspaceMode::*;
    assert_eq!(modes, [Isolated, Shared, Locked, Isolated]);
    assert_eq!((p.into.as_deref(), p.worktree_root.as_deref()), (Some("feature/x"), Some("../wt")));
    assert_eq!(p.steps[2].fields.lock, Some(LockMode::Shared));
    assert_eq!(p.steps[3].fields.auto_commit, Some(false));
    // `lock` alone means locked; with another mode it is an error; unknown values name the field.
    let p =
        Plan::from_source("p.yml", "steps:\n  - {id: a, prompt: go, lock: exclusive}\n").unwrap();
    assert_eq!(p.steps[0].workspace(), Locked);
    let errs = problems(
        "steps:\n  - {id: a, prompt: go, workspace: isolated, lock: shared, wait: true}\n",
    );
    assert!(errs.iter().any(|e| e.contains("(a).lock: only for workspace: locked")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("(a).wait: an isolated step")), "{errs:?}");
    let errs = problems("steps:\n  - {id: a, prompt: go, workspace: sandbox}\n");
    assert!(errs[0].contains("sandbox"), "{errs:?}");
    let errs = problems("into: \"\"\nsteps:\n  - {id: a, prompt: go}\n");
    assert!(errs[0].contains("into"), "{errs:?}");
}

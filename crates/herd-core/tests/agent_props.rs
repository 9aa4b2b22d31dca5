//! Property tests: no input makes the definition parsers or the template renderer panic, and
//! what `to_native_yaml` writes parses back to the same definition.

use std::collections::BTreeMap;

use herd_core::BackendKind;
use herd_core::agent::escape_template as escape;
use herd_core::agent::{
    AgentDef, Format, InputDef, Memory, Source, parse, render, split_frontmatter, to_native_yaml,
};
use proptest::prelude::*;

const FORMATS: [Format; 5] =
    [Format::Native, Format::Claude, Format::Gemini, Format::Codex, Format::GeminiToml];

/// Text made of the characters that matter to YAML, TOML, frontmatter and templates.
fn syntaxy() -> impl Strategy<Value = String> {
    proptest::string::string_regex(
        "(---\r?\n)?([a-z_]{1,8}(: |=| = |:)?|[-\\[\\]{}\"'#:,=|>&*!%@` \t\n]|\\$\\{|\\$\\$\\{|\\}|[0-9]{1,3}|\u{feff}|е){0,60}(\n---\n)?.{0,20}",
    )
    .unwrap()
}

fn fields_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("name"),
        Just("description"),
        Just("tools"),
        Just("model"),
        Just("maxTurns"),
        Just("max_turns"),
        Just("kind"),
        Just("inputs"),
        Just("prompt"),
        Just("timeout"),
        Just("timeout_mins"),
        Just("env"),
        Just("memory"),
        Just("source"),
        Just("cli"),
        Just("disallowedTools"),
        Just("permissionMode"),
        Just("developer_instructions"),
        Just("[run]"),
        Just("[prompts]"),
        Just("[model]"),
        Just("  - name"),
        Just("  required"),
    ];
    let value = prop_oneof![
        Just(""),
        Just("x"),
        Just("a-b"),
        Just("[a, b]"),
        Just("\"q\""),
        Just("3"),
        Just("-1"),
        Just("inherit"),
        Just("remote"),
        Just("local"),
        Just("{a: 1}"),
        Just("yes"),
        Just("~"),
        Just("Read, Grep"),
        Just("${a}"),
        Just("\"\"\"\nx\n\"\"\""),
        Just("[unclosed"),
        Just("project"),
        Just("claude"),
        Just("10m"),
    ];
    let sep = prop_oneof![Just(": "), Just(" = "), Just(":"), Just("=")];
    prop::collection::vec((key, sep, value), 0..12).prop_map(|lines| {
        lines.into_iter().map(|(k, s, v)| format!("{k}{s}{v}\n")).collect::<String>()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_format_panics_on_any_text(text in any::<String>()) {
        for f in FORMATS {
            let _ = parse(f, "x.yml", &text);
        }
    }

    #[test]
    fn no_format_panics_on_syntax_soup(text in syntaxy()) {
        for f in FORMATS {
            let _ = parse(f, "x.yml", &text);
        }
    }

    #[test]
    fn no_format_panics_on_field_like_text(body in fields_text(), prompt in syntaxy()) {
        for f in FORMATS {
            let _ = parse(f, "x.yml", &body);
            let _ = parse(f, "x.md", &format!("---\n{body}---\n{prompt}"));
        }
    }

    #[test]
    fn frontmatter_split_is_a_partition(text in syntaxy()) {
        if let Ok(fm) = split_frontmatter(&text) {
            let t = text.strip_prefix('\u{feff}').unwrap_or(&text);
            prop_assert!(t.starts_with("---"));
            prop_assert!(t.ends_with(fm.body));
            let yaml_at = t.find('\n').unwrap() + 1;
            prop_assert!(t[yaml_at..].starts_with(fm.yaml));
            let closing = &t[yaml_at + fm.yaml.len()..t.len() - fm.body.len()];
            prop_assert_eq!(closing.trim_end(), "---");
        }
    }

    #[test]
    fn render_never_panics(
        template in "([a-c ]|\\$|\\{|\\}|\\$\\{[a-d]?\\}?){0,30}",
        required in any::<[bool; 3]>(),
        defaults in any::<[bool; 3]>(),
        given in prop::collection::btree_map("[a-d]", ".{0,5}", 0..4),
    ) {
        let inputs: Vec<InputDef> = ["a", "b", "c"].iter().enumerate().map(|(i, n)| InputDef {
            name: n.to_string(),
            required: required[i],
            default: defaults[i].then(|| format!("<{n}>")),
            ..Default::default()
        }).collect();
        match render(&template, &inputs, &given) {
            Ok(_) => prop_assert!(!given.contains_key("d")),
            Err(e) => prop_assert!(!e.missing.is_empty() || !e.unknown.is_empty(), "{e}"),
        }
    }

    #[test]
    fn escaped_text_renders_to_itself(text in "([a$ {}]|\\$\\{|\\$\\$\\{){0,40}") {
        prop_assert_eq!(render(&escape(&text), &[], &BTreeMap::new()).unwrap(), text);
    }

    #[test]
    fn native_yaml_round_trips(def in agent_def()) {
        let yaml = to_native_yaml(&def);
        let back = parse(Format::Native, &format!("agents/{}.yml", def.name), &yaml);
        let back = back.map_err(|e| TestCaseError::fail(format!("{e}\n{yaml}")))?;
        prop_assert_eq!(back.def, def, "{}", yaml);
    }
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9][a-zA-Z0-9_-]{0,20}"
}

fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        (-1e9f64..1e9).prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    json_leaf().prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-zA-Z_]{1,6}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn source() -> impl Strategy<Value = Source> {
    (
        prop_oneof![Just("claude"), Just("gemini"), Just("codex"), Just("gemini-toml")],
        any::<String>(),
        proptest::option::of(any::<String>()),
        prop::collection::btree_map("[a-zA-Z_]{1,8}", json_value(), 0..4),
    )
        .prop_map(|(from, file, imported_at, extra)| Source {
            from: from.into(),
            file,
            imported_at,
            extra,
        })
}

fn agent_def() -> impl Strategy<Value = AgentDef> {
    let inputs = prop::collection::btree_map(
        name(),
        (
            proptest::option::of(any::<String>()),
            proptest::option::of(any::<String>()),
            any::<bool>(),
            proptest::option::of(any::<String>()),
        ),
        0..3,
    );
    let strings = prop::collection::vec(any::<String>(), 0..3);
    let rules =
        prop::collection::vec("[A-Za-z][A-Za-z0-9_]{0,8}(\\([a-z*/ .-]{0,8}[a-z*]\\))?", 0..3);
    let hooks = prop::collection::btree_map(
        prop::sample::select(herd_core::permission::HOOK_EVENTS).prop_map(String::from),
        prop::collection::vec(
            (
                proptest::option::of("[A-Za-z*]{1,8}"),
                "[a-z][a-z ./]{0,10}",
                proptest::option::of("[1-9][0-9]?s"),
            )
                .prop_map(|(matcher, command, timeout)| {
                    herd_core::permission::HookSpec { matcher, command, timeout }
                }),
            1..3,
        ),
        0..3,
    );
    (
        (name(), proptest::option::of(any::<String>()), proptest::option::of(0..5usize)),
        (proptest::option::of(any::<String>()), proptest::option::of(any::<String>()), inputs),
        (proptest::option::of(strings), rules.clone(), rules.clone(), rules),
        (
            proptest::option::of(1u32..),
            proptest::option::of("([1-9][0-9]{0,2}s?|[1-9][0-9]?m|[12]h)"),
            proptest::option::of(1u64..),
        ),
        (
            prop::collection::btree_map("[A-Z_][A-Z0-9_]{0,8}", "[^\u{0}]{0,10}", 0..3),
            0..3usize,
            hooks,
        ),
        proptest::option::of(source()),
    )
        .prop_map(
            |(
                (name, description, cli),
                (model, prompt, inputs),
                (tools, allow, deny, ask),
                (max_turns, timeout, max_output_kb),
                (env, memory, hooks),
                source,
            )| {
                let inputs: Vec<InputDef> = inputs
                    .into_iter()
                    .map(|(name, (r#type, description, required, default))| InputDef {
                        name,
                        r#type,
                        description,
                        required,
                        default,
                    })
                    .collect();
                let mut prompt = prompt.map(|p| escape(&p));
                if let (Some(p), Some(i)) = (&mut prompt, inputs.first()) {
                    p.push_str(&format!("${{{}}}", i.name));
                }
                let runnable = !source.as_ref().is_some_and(|s: &Source| {
                    s.from == "gemini"
                        && s.extra.get("kind").and_then(|k| k.as_str()) == Some("remote")
                });
                AgentDef {
                    name,
                    description,
                    cli: cli.map(|i| BackendKind::ALL[i]),
                    acp: None,
                    model,
                    prompt,
                    inputs,
                    tools,
                    allow,
                    deny,
                    ask,
                    hooks,
                    max_turns,
                    timeout,
                    max_output_kb,
                    env,
                    memory: [Memory::None, Memory::Project, Memory::User][memory],
                    source,
                    runnable,
                }
            },
        )
}

//! Mapping of every definition format (fixtures under `tests/fixtures/agents/`), names, and the
//! native writer's round trip.

use std::collections::BTreeMap;

use herd_core::BackendKind;
use herd_core::agent::{
    AgentDef, Format, InputDef, Loaded, Memory, parse, to_native_yaml, validate_name,
};
use serde_json::json;

fn fixture(rel: &str) -> (String, String) {
    let path = format!("{}/tests/fixtures/agents/{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (format!("fixtures/agents/{rel}"), text)
}

fn load(format: Format, rel: &str) -> Loaded {
    let (file, text) = fixture(rel);
    parse(format, &file, &text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn native_full_definition() {
    let l = load(Format::Native, "native/reviewer.yml");
    let d = &l.def;
    assert_eq!(l.format, Format::Native);
    assert!(l.dropped.is_empty());
    assert_eq!(d.name, "reviewer");
    assert_eq!(d.cli, Some(BackendKind::Claude));
    assert_eq!(d.model.as_deref(), Some("sonnet"));
    assert_eq!(d.tools.as_deref(), Some(&["Read", "Grep", "Glob", "Bash"].map(String::from)[..]));
    assert_eq!(d.allow, ["Read", "Bash(git diff *)"]);
    assert_eq!(d.deny, ["Edit"]);
    assert_eq!(
        (d.max_turns, d.timeout.as_deref(), d.max_output_kb),
        (Some(12), Some("10m"), Some(64))
    );
    assert_eq!(d.memory, Memory::Project);
    assert_eq!(d.env.get("REVIEW_STRICT").map(String::as_str), Some("1"));
    assert_eq!(d.inputs.len(), 2);
    assert!(d.inputs[0].required && d.inputs[0].r#type.as_deref() == Some("string"));
    assert_eq!(d.inputs[1].default.as_deref(), Some("correctness"));
    assert!(d.prompt.as_deref().unwrap().starts_with("You review ${target}."));
    assert!(d.runnable && d.source.is_none());
}

#[test]
fn native_name_defaults_to_the_file_stem() {
    let l = load(Format::Native, "native/minimal.yml");
    assert_eq!(l.def.name, "minimal");
    assert_eq!(l.def.memory, Memory::None);
    assert_eq!(l.def.cli, None);
}

#[test]
fn native_keeps_provenance() {
    let s = load(Format::Native, "native/imported.yml").def.source.unwrap();
    assert_eq!((s.from.as_str(), s.file.as_str()), ("claude", ".claude/agents/imported.md"));
    assert_eq!(s.imported_at.as_deref(), Some("2026-01-02T03:04:05Z"));
    assert_eq!(s.extra.get("permissionMode"), Some(&json!("plan")));
}

#[test]
fn claude_markdown_maps_and_says_what_it_dropped() {
    let l = load(Format::Claude, "claude/code-reviewer.md");
    let d = &l.def;
    assert_eq!(d.name, "code-reviewer");
    assert_eq!(d.cli, Some(BackendKind::Claude));
    assert_eq!(d.tools.as_deref(), Some(&["Read", "Grep", "Glob", "Bash"].map(String::from)[..]));
    assert_eq!(d.deny, ["Write", "Edit"]);
    assert_eq!(d.model, None, "inherit means the default model");
    assert_eq!(d.max_turns, Some(20));
    // The body is literal text: its `${` is escaped so it renders back unchanged.
    let prompt = d.prompt.as_deref().unwrap();
    assert!(prompt.starts_with("You are a senior code reviewer."));
    assert!(prompt.contains("echo $${HOME}"));
    let rendered = herd_core::agent::render(prompt, &[], &BTreeMap::new()).unwrap();
    assert!(rendered.contains("echo ${HOME}"));
    let s = d.source.as_ref().unwrap();
    assert_eq!(
        (s.from.as_str(), s.file.as_str()),
        ("claude", "fixtures/agents/claude/code-reviewer.md")
    );
    assert_eq!(
        s.extra,
        BTreeMap::from([
            ("color".to_string(), json!("purple")),
            ("permissionMode".to_string(), json!("plan")),
        ])
    );
    insta::assert_snapshot!(l.dropped.join("\n"), @r#"
    model = "inherit": herd uses the CLI's default model
    permissionMode = "plan": herd runs agents headless; permissions come from allow/deny; kept under source.extra
    color = "purple": no meaning in herd; kept under source.extra
    "#);
}

#[test]
fn claude_tools_as_a_list_and_memory() {
    let l = load(Format::Claude, "claude/researcher.md");
    assert_eq!(l.def.tools.as_deref(), Some(&["Read", "WebSearch"].map(String::from)[..]));
    assert_eq!(l.def.model.as_deref(), Some("sonnet"));
    assert_eq!(l.def.memory, Memory::Project);
    assert_eq!(
        l.def.description.as_deref(),
        Some("Researches a question: reads, then summarizes.")
    );
    assert_eq!(l.def.prompt.as_deref(), Some("Find facts. Cite files."));
    assert_eq!(l.def.source.unwrap().extra.get("skills"), Some(&json!(["summarize"])));
}

#[test]
fn claude_crlf_file() {
    let l = load(Format::Claude, "claude/windows.md");
    assert_eq!(l.def.description.as_deref(), Some("Saved with CRLF line ends."));
    assert_eq!(l.def.prompt.as_deref(), Some("Line one.\nLine two."));
}

#[test]
fn claude_frontmatter_that_is_not_strict_yaml_is_read_line_by_line() {
    let l = load(Format::Claude, "claude/loose.md");
    assert_eq!(
        l.def.description.as_deref(),
        Some("Use this agent when: the user asks for a review. Examples: a PR spanning lines")
    );
    assert_eq!(l.def.tools.as_deref(), Some(&["Read".to_string()][..]));
    assert!(l.dropped[0].starts_with("the frontmatter is not valid YAML ("), "{:?}", l.dropped);
}

#[test]
fn gemini_markdown_local() {
    let l = load(Format::Gemini, "gemini/security-auditor.md");
    let d = &l.def;
    assert_eq!(d.cli, Some(BackendKind::Gemini));
    assert_eq!(d.tools.as_deref(), Some(&["read_file", "grep_search"].map(String::from)[..]));
    assert_eq!(d.model.as_deref(), Some("gemini-3-flash-preview"));
    assert_eq!((d.max_turns, d.timeout.as_deref()), (Some(10), Some("5m")));
    assert!(d.runnable);
    assert_eq!(d.source.as_ref().unwrap().extra.get("temperature"), Some(&json!(0.2)));
    assert!(d.prompt.as_deref().unwrap().starts_with("You are a ruthless Security Auditor."));
}

#[test]
fn gemini_remote_is_listed_but_not_runnable_and_stays_so_through_native() {
    let l = load(Format::Gemini, "gemini/remote-helper.md");
    assert!(!l.def.runnable);
    assert_eq!(l.def.prompt, None);
    assert!(l.dropped.iter().any(|n| n.contains("cannot run it")), "{:?}", l.dropped);
    let back = parse(Format::Native, "remote-helper.yml", &to_native_yaml(&l.def)).unwrap();
    assert_eq!(back.def, l.def);
}

#[test]
fn legacy_gemini_toml() {
    let l = load(Format::GeminiToml, "gemini-toml/legacy.toml");
    let d = &l.def;
    assert_eq!(d.cli, Some(BackendKind::Gemini));
    assert_eq!(d.prompt.as_deref(), Some("You are a careful assistant.\nAnswer the query."));
    assert_eq!(d.model.as_deref(), Some("gemini-2.5-pro"));
    assert_eq!((d.max_turns, d.timeout.as_deref()), (Some(8), Some("5m")));
    let s = d.source.as_ref().unwrap();
    assert_eq!(s.from, "gemini-toml");
    assert_eq!(
        s.extra,
        BTreeMap::from([
            ("model".to_string(), json!({"temp": 0.1})),
            ("prompts".to_string(), json!({"query": "${query}"})),
        ])
    );
    insta::assert_snapshot!(l.dropped.join("\n"), @r#"
    prompts.query = "${query}": no meaning in herd; kept under source.extra
    model.temp = 0.1: no meaning in herd; kept under source.extra
    "#);
}

#[test]
fn codex_toml() {
    let l = load(Format::Codex, "codex/reviewer.toml");
    let d = &l.def;
    assert_eq!(d.cli, Some(BackendKind::Codex));
    assert_eq!(d.model.as_deref(), Some("gpt-5.3-codex"));
    assert!(d.prompt.as_deref().unwrap().starts_with("Review code like an owner."));
    let extra = &d.source.as_ref().unwrap().extra;
    assert_eq!(extra.get("sandbox_mode"), Some(&json!("read-only")));
    assert_eq!(
        extra.get("mcp_servers"),
        Some(&json!({"docs": {"url": "https://docs.example.invalid/mcp"}}))
    );
    insta::assert_snapshot!(l.dropped.join("\n"), @r#"
    model_reasoning_effort = "high": herd has no reasoning-effort setting yet; kept under source.extra
    sandbox_mode = "read-only": herd limits an agent with tools/allow/deny, not a sandbox mode; kept under source.extra
    nickname_candidates: display names only; kept under source.extra
    mcp_servers: herd does not configure MCP servers; kept under source.extra
    "#);
}

#[test]
fn every_imported_fixture_round_trips_through_native_yaml() {
    for (format, rel) in [
        (Format::Claude, "claude/code-reviewer.md"),
        (Format::Claude, "claude/researcher.md"),
        (Format::Claude, "claude/loose.md"),
        (Format::Gemini, "gemini/security-auditor.md"),
        (Format::GeminiToml, "gemini-toml/legacy.toml"),
        (Format::Codex, "codex/reviewer.toml"),
        (Format::Native, "native/reviewer.yml"),
    ] {
        let def = load(format, rel).def;
        let yaml = to_native_yaml(&def);
        let back = parse(Format::Native, &format!("{}.yml", def.name), &yaml)
            .unwrap_or_else(|e| panic!("{rel}: {e}\n{yaml}"));
        assert_eq!(back.def, def, "{rel}:\n{yaml}");
    }
}

#[test]
fn native_yaml_shape() {
    let mut def = AgentDef::new("helper");
    def.description = Some("Helps.".into());
    def.cli = Some(BackendKind::Codex);
    def.inputs = vec![InputDef { name: "topic".into(), required: true, ..Default::default() }];
    def.prompt = Some("Explain ${topic}.\nBriefly.\n".into());
    insta::assert_snapshot!(to_native_yaml(&def), @r#"
    name: helper
    description: Helps.
    cli: codex
    inputs:
    - name: topic
      required: true
    prompt: |
      Explain ${topic}.
      Briefly.
    "#);
}

#[test]
fn names() {
    for ok in ["a", "A9", "code-reviewer", "x_y", &"a".repeat(64)] {
        assert_eq!(validate_name(ok), Ok(()), "{ok}");
    }
    for bad in [
        "",
        "-a",
        "_a",
        "a/b",
        "..",
        "a.b",
        "a b",
        "a\\b",
        "rеviewer",
        "ａ",
        &"a".repeat(65),
        "a\0",
    ] {
        assert!(validate_name(bad).is_err(), "{bad:?}");
    }
    insta::assert_snapshot!(validate_name("rеviewer").unwrap_err(), @r#""rеviewer" contains the non-ASCII character 'е' (U+0435); names are 1 to 64 ASCII letters, digits, `_` or `-`, starting with a letter or digit (this also keeps out look-alike letters)"#);
}

#[test]
fn cli_and_memory_names() {
    for c in BackendKind::ALL {
        assert_eq!(c.to_string().parse::<BackendKind>(), Ok(c));
    }
    assert!("cursor".parse::<BackendKind>().unwrap_err().contains("expected one of"));
    assert_eq!("user".parse::<Memory>(), Ok(Memory::User));
    assert_eq!(Format::GeminiToml.to_string(), "gemini-toml");
}

//! Fuzz target: rules, grant specs and Bash lines never panic, a rule that matches a line as a
//! whole also catches it, and an allow rule never allows what a deny rule of the same text
//! surely matches.
//! Run: `cargo fuzz run permission_rules` (needs cargo-fuzz and a nightly or RUSTC_BOOTSTRAP=1).
#![no_main]

use herd_core::permission::{Call, Decision, Policy, Rule, analyze_bash, parse_grant_spec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (rule, line) = text.split_once('\n').unwrap_or((&text, ""));
    let _ = parse_grant_spec(rule);
    let _ = analyze_bash(line);
    if let Ok(r) = Rule::parse(rule) {
        // What it prints parses back to the same rule.
        assert_eq!(Rule::parse(&r.to_string()).as_ref(), Ok(&r));
        for tool in ["Bash", "Write", "Read", "Grep"] {
            let input = serde_json::json!({"command": line, "file_path": line, "path": line});
            let call = Call::new(tool, &input, None);
            assert!(!r.matches(&call) || r.catches(&call));
            let _ = r.permits(&call);
            // Deny wins over an allow rule of the same text.
            let p = Policy { allow: vec![r.clone()], deny: vec![r.clone()], ..Policy::default() };
            assert!(!matches!(p.evaluate(&call, &[]), Decision::Allow { .. }));
        }
    }
});

//! Fuzz target: rules, grant specs and shell command lines never panic, and splitting a Bash
//! line never makes a deny rule miss what it matches as a whole.
//! Run: `cargo fuzz run permission_rules` (needs cargo-fuzz and a nightly or RUSTC_BOOTSTRAP=1).
#![no_main]

use herd_core::permission::{Call, Rule, command_line, command_pieces, parse_grant_spec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (rule, line) = text.split_once('\n').unwrap_or((&text, ""));
    let _ = parse_grant_spec(rule);
    let _ = command_line(line);
    let _ = command_pieces(line);
    if let Ok(r) = Rule::parse(rule) {
        // What it prints parses back to the same rule.
        assert_eq!(Rule::parse(&r.to_string()).as_ref(), Ok(&r));
        let call = Call::new(&r.tool, &serde_json::json!({"command": line}), None);
        assert!(!r.matches(&call) || r.catches(&call));
        let _ = r.permits(&call);
    }
});

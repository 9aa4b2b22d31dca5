//! Fuzz target: plan text (YAML or JSON) is parsed and validated without panicking; a plan that
//! validates has layers covering every step exactly once.
//! Run: `cargo fuzz run plan_file` (needs cargo-fuzz and a nightly or RUSTC_BOOTSTRAP=1).
#![no_main]

use herd_core::plan::Plan;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(plan) = Plan::from_source("fuzz.yml", &text) {
        let mut seen: Vec<usize> = plan.layers().into_iter().flatten().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..plan.steps.len()).collect::<Vec<_>>());
    }
});

//! Fuzz target: the claude stream decoder never panics, whatever the bytes, line by line.
//! Run: `cargo fuzz run claude_decoder` (needs cargo-fuzz and a nightly or RUSTC_BOOTSTRAP=1).
#![no_main]

use herd_backends::Decoder;
use herd_backends::claude::ClaudeDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = ClaudeDecoder::default();
    let mut out = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        decoder.decode(line, &mut out);
    }
    let _ = (decoder.turns(), decoder.usage());
});

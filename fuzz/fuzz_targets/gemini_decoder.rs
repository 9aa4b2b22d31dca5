//! Fuzz target: the gemini `-o stream-json` decoder never panics, whatever the bytes.
//! Run: `cargo fuzz run gemini_decoder` (needs cargo-fuzz and a nightly or RUSTC_BOOTSTRAP=1).
#![no_main]

use herd_backends::Decoder;
use herd_backends::gemini::GeminiDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = GeminiDecoder::default();
    let mut out = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        decoder.decode(line, &mut out);
    }
    let _ = (decoder.turns(), decoder.usage());
});

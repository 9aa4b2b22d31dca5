//! Fuzz target: the bounded line splitter yields every byte exactly once (as lines or as an
//! over-long count) and never buffers more than its bound.
#![no_main]

use herd_engine::lines::{LineSplitter, Piece};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else { return };
    let mut s = LineSplitter::new(16);
    let mut total = 0u64;
    let mut lines = 0u64;
    let mut count = |p: Piece<'_>| {
        lines += 1;
        total += match p {
            Piece::Line(l) => l.len() as u64,
            Piece::TooLong(n) => n,
        };
    };
    let (a, b) = rest.split_at((cut as usize).min(rest.len()));
    s.push(a, &mut count);
    s.push(b, &mut count);
    s.finish(&mut count);
    let newlines = rest.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(total + newlines, rest.len() as u64);
    assert!(lines >= newlines);
});

//! A bounded line splitter for agent output: memory stays under the bound whatever the child
//! prints; an over-long line is reported by its length and skipped, never buffered whole.

/// What the splitter found.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Line(&'a [u8]),
    /// A line longer than the bound, with its full length (newline excluded).
    TooLong(u64),
}

/// Splits a byte stream into lines of at most `max` bytes.
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    max: usize,
    /// Bytes of the current line discarded so far, when it went over the bound.
    overflow: Option<u64>,
}

impl LineSplitter {
    pub fn new(max: usize) -> Self {
        Self { buf: Vec::new(), max, overflow: None }
    }

    /// Feed a chunk; `f` is called for each complete line (or over-long line) in order.
    pub fn push(&mut self, mut chunk: &[u8], mut f: impl FnMut(Piece<'_>)) {
        while !chunk.is_empty() {
            let nl = chunk.iter().position(|&b| b == b'\n');
            let (part, rest, complete) = match nl {
                Some(i) => (&chunk[..i], &chunk[i + 1..], true),
                None => (chunk, &[][..], false),
            };
            chunk = rest;
            if let Some(n) = self.overflow.as_mut() {
                *n += part.len() as u64;
            } else if self.buf.len() + part.len() > self.max {
                self.overflow = Some((self.buf.len() + part.len()) as u64);
                self.buf = Vec::new();
            } else if complete && self.buf.is_empty() {
                // Fast path: the whole line is in this chunk.
                f(Piece::Line(part));
                continue;
            } else {
                self.buf.extend_from_slice(part);
            }
            if complete {
                self.emit(&mut f);
            }
        }
    }

    /// End of stream: a last line without a newline is still a line.
    pub fn finish(&mut self, mut f: impl FnMut(Piece<'_>)) {
        if self.overflow.is_some() || !self.buf.is_empty() {
            self.emit(&mut f);
        }
    }

    fn emit(&mut self, f: &mut impl FnMut(Piece<'_>)) {
        match self.overflow.take() {
            Some(n) => f(Piece::TooLong(n)),
            None => f(Piece::Line(&self.buf)),
        }
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(max: usize, chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::new(max);
        let mut out = Vec::new();
        let mut f = |p: Piece<'_>| {
            out.push(match p {
                Piece::Line(l) => String::from_utf8_lossy(l).into_owned(),
                Piece::TooLong(n) => format!("<{n}>"),
            })
        };
        for c in chunks {
            s.push(c, &mut f);
        }
        s.finish(&mut f);
        out
    }

    #[test]
    fn splits_across_chunks_and_bounds_long_lines() {
        assert_eq!(split(100, &[b"ab", b"c\nd\n", b"e"]), ["abc", "d", "e"]);
        assert_eq!(split(4, &[b"12345678\nok\n"]), ["<8>", "ok"]);
        assert_eq!(split(4, &[b"12", b"34", b"56", b"\nx"]), ["<6>", "x"]);
        assert_eq!(split(4, &[b"123456"]), ["<6>"]);
        assert_eq!(split(4, &[b"\n\n"]), ["", ""]);
    }

    #[test]
    fn memory_stays_bounded_on_a_huge_line() {
        let mut s = LineSplitter::new(1024);
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..800 {
            s.push(&chunk, |_| panic!("no line yet"));
            assert!(s.buf.capacity() <= 2048);
        }
        let mut got = None;
        s.push(b"\n", |p| got = Some(format!("{p:?}")));
        assert_eq!(got.as_deref(), Some("TooLong(52428800)"));
    }
}

//! How much of a run's output is kept: bulk output (text, stderr, tool output) coalesced into
//! chunks instead of one event per line, and stored only up to the run's bound, then dropped.

use herd_core::{AgentEvent, Decoded};

/// Lines read together are stored together, up to this many bytes an event.
pub(super) const CHUNK: usize = 16 * 1024;

/// The run's bound on stored output and what it has used.
#[derive(Debug)]
pub(super) struct Budget {
    limit: u64,
    used: u64,
    reached: bool,
    pub dropped_events: u64,
    pub dropped_bytes: u64,
}

impl Budget {
    pub fn new(limit: u64) -> Self {
        Self { limit, used: 0, reached: false, dropped_events: 0, dropped_bytes: 0 }
    }

    /// Keep what fits of `evs`: every event until the bound is reached, then (after one
    /// `output_limit` event) only those that are not bulk output.
    pub fn keep(&mut self, evs: Vec<Decoded>) -> Vec<Decoded> {
        let mut out = Vec::with_capacity(evs.len());
        for d in evs {
            let w = d.event.weight() as u64;
            if d.event.is_bulk_output() && (self.reached || self.used + w > self.limit) {
                if !self.reached {
                    self.reached = true;
                    out.push(Decoded::top(AgentEvent::OutputLimit { limit_bytes: self.limit }));
                }
                self.dropped_events += 1;
                self.dropped_bytes += w;
                continue;
            }
            self.used += w;
            out.push(d);
        }
        out
    }

    /// Whether another `n` bytes of raw stream may still go to a file kept beside the run.
    pub fn file_room(&self, written: u64, n: usize) -> bool {
        written + n as u64 <= self.limit
    }
}

/// Merge consecutive top-level text events (one per line of a program's output) into chunks
/// of up to [`CHUNK`] bytes, lines joined by `\n`: one stored row per chunk, not per line.
pub(super) fn coalesce_text(evs: Vec<Decoded>) -> Vec<Decoded> {
    coalesce(evs, |e| match e {
        AgentEvent::Text { text } => Some(text),
        _ => None,
    })
}

/// The same for stderr lines.
pub(super) fn coalesce_stderr(evs: Vec<Decoded>) -> Vec<Decoded> {
    coalesce(evs, |e| match e {
        AgentEvent::Stderr { line } => Some(line),
        _ => None,
    })
}

fn coalesce(
    evs: Vec<Decoded>,
    text_of: fn(&mut AgentEvent) -> Option<&mut String>,
) -> Vec<Decoded> {
    let mut out: Vec<Decoded> = Vec::with_capacity(evs.len().min(8));
    for mut d in evs {
        let top = d.parent_tool_use_id.is_none();
        if top
            && let Some(next) = text_of(&mut d.event)
            && let Some(last) = out.last_mut()
            && last.parent_tool_use_id.is_none()
            && let Some(prev) = text_of(&mut last.event)
            && prev.len() + 1 + next.len() <= CHUNK
        {
            prev.push('\n');
            prev.push_str(next);
            continue;
        }
        out.push(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Decoded {
        Decoded::top(AgentEvent::Text { text: t.into() })
    }

    #[test]
    fn lines_read_together_become_one_chunk_and_chunks_stay_bounded() {
        let out = coalesce_text(vec![text("a"), text("b"), text("c")]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].event, AgentEvent::Text { text: "a\nb\nc".into() });
        let long = "x".repeat(CHUNK / 4);
        let out = coalesce_text((0..5).map(|_| text(&long)).collect());
        assert_eq!(out.len(), 2, "three lines fit a chunk, the fourth starts the next");
        for d in &out {
            let AgentEvent::Text { text } = &d.event else { unreachable!() };
            assert!(text.len() <= CHUNK, "a chunk never grows past its bound");
        }
        // Other events are left where they are and split the runs of text.
        let mid = Decoded::top(AgentEvent::System { subtype: "x".into() });
        assert_eq!(coalesce_text(vec![text("a"), mid, text("b")]).len(), 3);
    }

    #[test]
    fn past_the_bound_bulk_output_is_dropped_once_announced_and_the_rest_kept() {
        let mut b = Budget::new(1000);
        let kept = b.keep((0..40).map(|i| text(&format!("line {i}"))).collect());
        // Each weighs 64 + its text: 14 fit in 1000 bytes.
        let texts = kept.iter().filter(|d| matches!(d.event, AgentEvent::Text { .. })).count();
        assert_eq!(texts, 14);
        assert!(
            kept.iter().any(|d| matches!(d.event, AgentEvent::OutputLimit { limit_bytes: 1000 }))
        );
        assert_eq!(b.dropped_events, 26);
        let later = b.keep(vec![text("more"), Decoded::top(AgentEvent::SubagentCompleted)]);
        assert_eq!(later.len(), 1, "announced once; lifecycle events still stored");
        assert!(matches!(later[0].event, AgentEvent::SubagentCompleted));
        assert!(b.file_room(900, 100) && !b.file_room(900, 101));
    }
}

//! The process guard: one per herd process, a child subreaper under which every agent runs, so
//! that nothing an agent started outlives its run, or herd itself, however herd ended.
//!
//! herd starts the guard once (`herd __guard`, the same binary) with a Unix stream socket on its
//! fd 0 and asks it to start each agent, handing over the agent's three pipe ends with the request
//! (SCM_RIGHTS), so herd reads and writes the agent directly and the guard carries no output.
//!
//! herd → guard frames: `[tag u8][run u64 BE][len u32 BE][payload]`; a `P` (spawn) frame carries
//! exactly three fds (stdin read end, stdout and stderr write ends) on its first byte.
//! guard → herd: one JSON [`Report`] per line. End of stream from herd: kill everything.

mod server;

use serde::{Deserialize, Serialize};

pub use server::guard_main;

/// The argument that selects guard mode in the herd binary.
pub const GUARD_ARG: &str = "__guard";

/// Every agent gets its subagent id in this variable; the guard reads it back from
/// `/proc/<pid>/environ` to tell whose a re-parented leftover process is.
pub const RUN_MARKER_VAR: &str = "HERD_SUBAGENT_ID";

/// Frame tags from herd to the guard.
pub(crate) mod tag {
    /// Start an agent (payload: [`super::SpawnRequest`]; three fds attached).
    pub const SPAWN: u8 = b'P';
    /// Signal the agent's process group (payload: i32 BE).
    pub const SIGNAL: u8 = b'S';
    /// SIGKILL the agent's group and every process of its run.
    pub const KILL: u8 = b'K';
}

/// The size of a frame header.
pub(crate) const HEADER: usize = 13;
/// The largest payload the guard accepts (argv and environment of one agent).
pub(crate) const MAX_PAYLOAD: usize = 16 << 20;

/// One line from the guard: what happened to run `run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub run: u64,
    pub msg: GuardMsg,
}

/// What the guard says about one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardMsg {
    Started {
        pid: u32,
        start_time: Option<u64>,
    },
    SpawnError {
        message: String,
    },
    /// The agent exited; `leftovers` processes of its run were killed after it.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
        leftovers: u32,
    },
}

/// Encode one frame.
pub(crate) fn frame(tag: u8, run: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER + payload.len());
    f.push(tag);
    f.extend_from_slice(&run.to_be_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub tag: u8,
    pub run: u64,
    pub payload: Vec<u8>,
}

/// Why the guard's input cannot be read on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProtocolError {
    #[error("frame payload of {0} bytes is over the limit")]
    TooLarge(usize),
    #[error("malformed spawn request")]
    BadSpawn,
}

/// Take the first complete frame off `buf`; `Ok(None)` while it is incomplete.
pub(crate) fn next_frame(buf: &mut Vec<u8>) -> Result<Option<Frame>, ProtocolError> {
    let Some(head) = buf.get(..HEADER) else { return Ok(None) };
    let run = u64::from_be_bytes(head[1..9].try_into().unwrap_or_default());
    let len = u32::from_be_bytes(head[9..13].try_into().unwrap_or_default()) as usize;
    if len > MAX_PAYLOAD {
        return Err(ProtocolError::TooLarge(len));
    }
    if buf.len() < HEADER + len {
        return Ok(None);
    }
    let tag = head[0];
    let payload = buf[HEADER..HEADER + len].to_vec();
    buf.drain(..HEADER + len);
    Ok(Some(Frame { tag, run, payload }))
}

/// What the guard needs to start one agent. Byte strings, so no path or argument is mangled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SpawnRequest {
    /// The run's subagent id, set as [`RUN_MARKER_VAR`] in the agent's environment.
    pub marker: Vec<u8>,
    pub program: Vec<u8>,
    pub cwd: Vec<u8>,
    pub args: Vec<Vec<u8>>,
    /// `(key, value)` pairs: the agent's whole environment.
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// The program is bwrap running herd's sandbox init: the guard hands it a status pipe, and
    /// sends catchable signals to the init's session (bwrap itself would die of them).
    pub sandboxed: bool,
}

impl SpawnRequest {
    /// Overwrite the arguments and the environment (they may hold secrets).
    pub fn wipe(&mut self) {
        use zeroize::Zeroize;
        for a in &mut self.args {
            a.zeroize();
        }
        for (k, v) in &mut self.env {
            k.zeroize();
            v.zeroize();
        }
    }

    /// A flags byte (1: sandboxed), then `[u32 len][bytes]` for each string; counts as u32
    /// before the lists.
    pub fn encode(&self) -> Vec<u8> {
        fn put(out: &mut Vec<u8>, b: &[u8]) {
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(b);
        }
        let mut out = vec![u8::from(self.sandboxed)];
        put(&mut out, &self.marker);
        put(&mut out, &self.program);
        put(&mut out, &self.cwd);
        out.extend_from_slice(&(self.args.len() as u32).to_be_bytes());
        for a in &self.args {
            put(&mut out, a);
        }
        out.extend_from_slice(&(self.env.len() as u32).to_be_bytes());
        for (k, v) in &self.env {
            put(&mut out, k);
            put(&mut out, v);
        }
        out
    }

    pub fn decode(mut b: &[u8]) -> Result<Self, ProtocolError> {
        fn u32_of(b: &mut &[u8]) -> Result<usize, ProtocolError> {
            let (n, rest) = b.split_first_chunk::<4>().ok_or(ProtocolError::BadSpawn)?;
            *b = rest;
            Ok(u32::from_be_bytes(*n) as usize)
        }
        fn take(b: &mut &[u8]) -> Result<Vec<u8>, ProtocolError> {
            let n = u32_of(b)?;
            if n > b.len() {
                return Err(ProtocolError::BadSpawn);
            }
            let (s, rest) = b.split_at(n);
            *b = rest;
            Ok(s.to_vec())
        }
        let (&flags, rest) = b.split_first().ok_or(ProtocolError::BadSpawn)?;
        if flags > 1 {
            return Err(ProtocolError::BadSpawn);
        }
        b = rest;
        let mut r = SpawnRequest {
            sandboxed: flags == 1,
            marker: take(&mut b)?,
            program: take(&mut b)?,
            cwd: take(&mut b)?,
            ..Default::default()
        };
        // Counts are checked against what is left (each item takes at least 4 bytes), so a
        // bogus count cannot make us allocate.
        let n = u32_of(&mut b)?;
        if n > b.len() / 4 {
            return Err(ProtocolError::BadSpawn);
        }
        for _ in 0..n {
            r.args.push(take(&mut b)?);
        }
        let n = u32_of(&mut b)?;
        if n > b.len() / 8 {
            return Err(ProtocolError::BadSpawn);
        }
        for _ in 0..n {
            r.env.push((take(&mut b)?, take(&mut b)?));
        }
        if !b.is_empty() {
            return Err(ProtocolError::BadSpawn);
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..40)
    }

    fn request() -> impl Strategy<Value = SpawnRequest> {
        (
            bytes(),
            bytes(),
            bytes(),
            proptest::collection::vec(bytes(), 0..6),
            proptest::collection::vec((bytes(), bytes()), 0..6),
            any::<bool>(),
        )
            .prop_map(|(marker, program, cwd, args, env, sandboxed)| SpawnRequest {
                marker,
                program,
                cwd,
                args,
                env,
                sandboxed,
            })
    }

    proptest! {
        #[test]
        fn spawn_requests_round_trip(r in request()) {
            prop_assert_eq!(SpawnRequest::decode(&r.encode()), Ok(r));
        }

        #[test]
        fn any_bytes_decode_without_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = SpawnRequest::decode(&b);
            let mut buf = b;
            while let Ok(Some(_)) = next_frame(&mut buf) {}
        }

        #[test]
        fn frames_split_anywhere_come_out_whole(
            payloads in proptest::collection::vec(bytes(), 1..5),
            cut in 0usize..400,
        ) {
            let wire: Vec<u8> = payloads
                .iter()
                .enumerate()
                .flat_map(|(i, p)| frame(tag::SIGNAL, i as u64, p))
                .collect();
            let cut = cut.min(wire.len());
            let mut buf = wire[..cut].to_vec();
            let mut got = Vec::new();
            while let Some(f) = next_frame(&mut buf).unwrap() {
                got.push(f);
            }
            buf.extend_from_slice(&wire[cut..]);
            while let Some(f) = next_frame(&mut buf).unwrap() {
                got.push(f);
            }
            prop_assert!(buf.is_empty());
            prop_assert_eq!(got.len(), payloads.len());
            for (i, (f, p)) in got.iter().zip(&payloads).enumerate() {
                prop_assert_eq!(f.run, i as u64);
                prop_assert_eq!(&f.payload, p);
            }
        }
    }

    #[test]
    fn oversized_and_truncated_input_is_refused() {
        let mut huge = frame(tag::SPAWN, 1, &[]);
        huge[9..13].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(next_frame(&mut huge), Err(ProtocolError::TooLarge(u32::MAX as usize)));
        let good = SpawnRequest { program: b"/bin/true".to_vec(), ..Default::default() }.encode();
        assert_eq!(SpawnRequest::decode(&good[..good.len() - 1]), Err(ProtocolError::BadSpawn));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(SpawnRequest::decode(&trailing), Err(ProtocolError::BadSpawn));
    }
}

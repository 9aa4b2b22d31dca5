//! The writer thread's loop: gather a batch, run it in one transaction, answer and publish once
//! it has committed. One failed write never takes the rest of its batch down with it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herd_core::{Decoded, SubagentId};
use tokio::sync::{broadcast, mpsc};

use super::Cmd;
use crate::store::{apply_update, insert_event, next_seq};
use crate::{Result, StoreError, StoredEvent, now_ms};

const MAX_BATCH: usize = 4096;
/// An urgent batch smaller than this waits up to [`SMALL_BATCH_YIELDS`] yields for more.
const SMALL_BATCH: usize = 16;
const SMALL_BATCH_YIELDS: usize = 3;
/// A batch nobody waits for right now is committed this long after its first write at the
/// latest, or sooner when it grows to [`FULL_BATCH`] or an urgent write joins it. Every commit
/// writes each page it touched to the WAL again: fewer, larger commits cost far less.
const WINDOW: Duration = Duration::from_millis(4);
pub(super) const FULL_BATCH: usize = 256;

/// What one command of a batch did, kept until the batch's commit decides whether it counts.
enum Done {
    /// Events stored from this sequence number on.
    Appended(i64),
    Updated(Vec<StoredEvent>),
    Ran,
    Failed(StoreError),
    /// A flush or a stop: nothing of its own to write.
    Nothing,
}

pub(super) fn run(
    conn: crate::db::Db,
    mut rx: mpsc::Receiver<Cmd>,
    publisher: broadcast::Sender<Arc<StoredEvent>>,
    committed: tokio::sync::watch::Sender<u64>,
) {
    let mut seqs: HashMap<SubagentId, i64> = HashMap::new();
    let mut pending_error: Option<String> = None;
    let mut batch = Vec::with_capacity(64);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        // Somebody follows events live: each is committed (and shown) as soon as it comes,
        // not after the commit window.
        gather(&mut rx, &mut batch, publisher.receiver_count() > 0);
        let stop = batch.iter().any(|c| matches!(c, Cmd::Stop));
        // Fast: the whole batch without savepoints (each costs a copy of every page it touches).
        // Only if a write fails is the batch rolled back and run again, each write alone.
        let mut outcome = write_batch(&conn, &mut seqs, &batch);
        // The database is out of reach (PostgreSQL down, the network gone): the batch waits
        // for it, and the writes behind it queue up, rather than being lost — for a while.
        let (mut waited, mut pause) = (Duration::ZERO, OUTAGE_FIRST_PAUSE);
        while outcome.as_ref().is_err_and(StoreError::is_unavailable) && waited < OUTAGE_LIMIT {
            std::thread::sleep(pause);
            waited += pause;
            pause = (pause * 2).min(OUTAGE_MAX_PAUSE);
            seqs.clear();
            outcome = write_batch(&conn, &mut seqs, &batch);
        }
        let err = outcome.as_ref().err().map(ToString::to_string);
        if err.is_some() {
            // Nothing of this batch is stored: sequence numbers must be re-read.
            seqs.clear();
            pending_error = err.clone();
        }
        let done = outcome.unwrap_or_default();
        settle(batch.drain(..), done, err.as_deref(), &mut pending_error, &publisher);
        if err.is_none() {
            committed.send_modify(|n| *n = n.wrapping_add(1));
        }
        if stop {
            break;
        }
    }
}

/// How long a batch waits for an unreachable database before its writes fail.
const OUTAGE_LIMIT: Duration = Duration::from_secs(300);
const OUTAGE_FIRST_PAUSE: Duration = Duration::from_millis(50);
const OUTAGE_MAX_PAUSE: Duration = Duration::from_secs(2);

/// Fast: the whole batch without savepoints (each costs a copy of every page it touches).
/// Only if a write fails is the batch rolled back and run again, each write alone — unless
/// the database could not be reached at all.
fn write_batch(
    conn: &crate::db::Db,
    seqs: &mut HashMap<SubagentId, i64>,
    batch: &[Cmd],
) -> Result<Vec<Done>> {
    match transaction(conn, seqs, |tx, seqs| apply(tx, batch, seqs, false)) {
        Ok(done) => Ok(done),
        Err(e) if e.is_unavailable() => Err(e),
        Err(_) => {
            seqs.clear();
            transaction(conn, seqs, |tx, seqs| apply(tx, batch, seqs, true))
        }
    }
}

/// Take what is queued behind the first command (group commit). A batch somebody waits for
/// gives the CPU away a few times first, so writers about to send (other runs) join this
/// commit instead of paying for one of their own; with nothing else runnable a yield returns
/// at once. A batch nobody waits for collects writes for up to [`WINDOW`] — unless events are
/// `watched` live (a watcher waits for each of them).
fn gather(rx: &mut mpsc::Receiver<Cmd>, batch: &mut Vec<Cmd>, watched: bool) {
    let deadline = Instant::now() + WINDOW;
    let mut urgent = watched || batch.iter().any(Cmd::urgent);
    let mut round = 0;
    loop {
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(c) => {
                    urgent |= c.urgent();
                    batch.push(c);
                }
                Err(_) => break,
            }
        }
        if urgent {
            if round == SMALL_BATCH_YIELDS || batch.len() >= SMALL_BATCH {
                return;
            }
            round += 1;
            std::thread::yield_now();
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || batch.len() >= FULL_BATCH {
            return;
        }
        // Woken early by an urgent write (its sender unparks this thread); writes nobody
        // waits for just queue up meanwhile, without a wake-up each.
        std::thread::park_timeout(left);
    }
}

/// Run `f` in one immediate transaction; rolled back if it or the commit fails. Run again
/// after a conflict (PostgreSQL), it starts from no sequence numbers: those `seqs` took in the
/// attempt that was rolled back are not stored.
fn transaction<T>(
    conn: &crate::db::Db,
    seqs: &mut HashMap<SubagentId, i64>,
    mut f: impl FnMut(&crate::db::Db, &mut HashMap<SubagentId, i64>) -> Result<T>,
) -> Result<T> {
    let mut again = false;
    conn.tx(|tx| {
        if std::mem::replace(&mut again, true) {
            seqs.clear();
        }
        f(tx, seqs)
    })
}

/// Run every command of `batch` in the open transaction. Not `guarded`, the first failure
/// ends the batch with that error (the caller rolls back and runs it again guarded); guarded,
/// each command runs in its own savepoint, and one that fails is undone alone.
fn apply(
    tx: &crate::db::Db,
    batch: &[Cmd],
    seqs: &mut HashMap<SubagentId, i64>,
    guarded: bool,
) -> Result<Vec<Done>> {
    let mut done = Vec::with_capacity(batch.len());
    for cmd in batch {
        if guarded {
            fixed(tx, "SAVEPOINT cmd")?;
        }
        let res = match cmd {
            Cmd::Append { id, ts, events, .. } => {
                append(tx, seqs, id, *ts, events).map(Done::Appended)
            }
            Cmd::Update { id, update, with, .. } => apply_update(tx, seqs, id, update, now_ms())
                .and_then(|evs| with.as_ref().map_or(Ok(()), |f| f(tx)).map(|()| evs))
                .map(|evs| {
                    // A closed run writes no more events: a long-lived writer (a daemon's)
                    // keeps no number per run it ever saw. A late one reads MAX(seq) again.
                    if update.closed_at.is_some() {
                        seqs.remove(id);
                    }
                    Done::Updated(evs)
                }),
            Cmd::Exec { job, .. } => job(tx).map(|()| Done::Ran),
            Cmd::Flush(_) | Cmd::Nudge | Cmd::Stop => Ok(Done::Nothing),
        };
        match res {
            Ok(d) => {
                if guarded {
                    fixed(tx, "RELEASE cmd")?;
                }
                done.push(d);
            }
            Err(e) if guarded => {
                fixed(tx, "ROLLBACK TO cmd")?;
                fixed(tx, "RELEASE cmd")?;
                // Sequence numbers the undone writes took must be read again.
                match cmd {
                    Cmd::Append { id, .. } | Cmd::Update { id, .. } => {
                        seqs.remove(id);
                    }
                    _ => seqs.clear(),
                }
                done.push(Done::Failed(e));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Answer every command of a finished batch and publish what it stored. `err`: the batch as a
/// whole failed (nothing of it is stored); `done` is then empty.
fn settle(
    batch: impl Iterator<Item = Cmd>,
    done: Vec<Done>,
    err: Option<&str>,
    pending_error: &mut Option<String>,
    publisher: &broadcast::Sender<Arc<StoredEvent>>,
) {
    let gone = |what: &str| StoreError::WriterGone(what.to_owned());
    let mut done = done.into_iter();
    let mut published: Vec<StoredEvent> = Vec::new();
    let mut replies: Vec<Box<dyn FnOnce()>> = Vec::new();
    for cmd in batch {
        let d = done.next();
        match (cmd, d) {
            (Cmd::Append { id, ts, events, .. }, Some(Done::Appended(first))) => {
                published.extend(events.into_iter().zip(first..).map(|(d, seq)| StoredEvent {
                    subagent_id: id.clone(),
                    seq,
                    ts,
                    parent_tool_use_id: d.parent_tool_use_id,
                    event: d.event,
                }));
            }
            (Cmd::Append { id, .. }, Some(Done::Failed(e))) => {
                pending_error.get_or_insert(format!("events of {id} not stored: {e}"));
            }
            (Cmd::Update { ack, .. }, Some(Done::Updated(evs))) => {
                published.extend(evs.iter().cloned());
                replies.push(Box::new(move || drop(ack.send(Ok(evs)))));
            }
            (Cmd::Update { ack, .. }, Some(Done::Failed(e))) => drop(ack.send(Err(e))),
            (Cmd::Update { ack, .. }, _) => {
                let e = gone(err.unwrap_or("update"));
                replies.push(Box::new(move || drop(ack.send(Err(e)))));
            }
            (Cmd::Exec { ack, .. }, Some(Done::Ran)) => {
                replies.push(Box::new(move || drop(ack.send(Ok(())))));
            }
            (Cmd::Exec { ack, .. }, Some(Done::Failed(e))) => drop(ack.send(Err(e))),
            (Cmd::Exec { ack, .. }, _) => {
                let e = gone(err.unwrap_or("exec"));
                replies.push(Box::new(move || drop(ack.send(Err(e)))));
            }
            (Cmd::Flush(ack), _) => {
                // A failed batch reports itself; else the first append that failed since the
                // last flush.
                let msg = err.map(str::to_owned).or_else(|| pending_error.take());
                replies
                    .push(Box::new(move || drop(ack.send(msg.map_or(Ok(()), |m| Err(gone(&m)))))));
            }
            // A failed batch stored none of its events (reported by the next flush).
            (Cmd::Append { .. } | Cmd::Nudge | Cmd::Stop, _) => {}
        }
    }
    // Published before anyone is answered: whoever learns of a commit can see its events.
    for ev in published {
        let _ = publisher.send(Arc::new(ev));
    }
    for reply in replies {
        reply();
    }
}

/// Store `events` of `id` in order; serialized here, since the producer (decoding) is the
/// busier side. Returns the first event's sequence number (they are consecutive).
fn append(
    tx: &crate::db::Db,
    seqs: &mut HashMap<SubagentId, i64>,
    id: &SubagentId,
    ts: i64,
    events: &[Decoded],
) -> Result<i64> {
    let mut first = None;
    for d in events {
        let seq = next_seq(tx, seqs, id)?;
        first.get_or_insert(seq);
        insert_event(tx, id, seq, ts, d)?;
    }
    Ok(first.unwrap_or(0))
}

/// A statement without parameters (transaction control, savepoints), prepared once per
/// connection: each batch runs several.
fn fixed(tx: &crate::db::Db, sql: &str) -> Result<()> {
    tx.fixed(sql)
}

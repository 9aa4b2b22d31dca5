//! The dashboard's live feeds as server-sent events: a run's events (its watch: stored, then
//! live, each with its sequence as the event id, so a reconnect resumes after the last one), a
//! plan's events with a fresh snapshot after each batch, and a tick after store commits.

use std::convert::Infallible;
use std::time::Duration;

use herd_engine::service::{PlanWatch, Service, Watch};
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::{Bytes, Frame};
use hyper::header::{self, HeaderValue};
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::http::{self, Resp};

/// Frames a client may have in flight before its feed waits (never the agent: the watch reads
/// the store once it falls behind).
const BUFFER: usize = 256;
/// A comment this often tells a dead connection from a quiet one.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// The least time between two ticks of the general feed (pages re-read lists on a tick).
const TICK: Duration = Duration::from_millis(400);

/// One event of the stream: `event`, optional `id`, one line of data (JSON has no raw newline).
pub fn frame(event: &str, id: Option<i64>, data: &str) -> Bytes {
    let mut s = String::with_capacity(data.len() + 32);
    if let Some(id) = id {
        s.push_str(&format!("id: {id}\n"));
    }
    s.push_str(&format!("event: {event}\ndata: {data}\n\n"));
    Bytes::from(s)
}

fn response(rx: mpsc::Receiver<Bytes>) -> Resp {
    let stream = ReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut r = Response::new(StreamBody::new(stream).boxed());
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    http::secure(r)
}

/// Where a feed resumes: after the browser's `Last-Event-ID` (a reconnect), else at `from`.
pub fn resume_from<B>(req: &hyper::Request<B>, from: Option<i64>) -> i64 {
    let last = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok());
    match last {
        Some(l) => l + 1,
        None => from.unwrap_or(1).max(1),
    }
}

/// A run's events from the watch's start on; `end` after its closing event.
pub fn run(mut w: Watch, mut stop: watch::Receiver<bool>) -> Resp {
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let mut keepalive = tokio::time::interval(KEEPALIVE);
        keepalive.tick().await;
        loop {
            let out = tokio::select! {
                next = w.next() => match next {
                    Some(Ok(e)) => match serde_json::to_string(&e) {
                        Ok(j) => frame("ev", Some(e.seq), &j),
                        Err(e) => err_frame(&e.to_string()),
                    },
                    Some(Err(e)) => {
                        let _ = tx.send(err_frame(&e.message)).await;
                        return;
                    }
                    None => {
                        let _ = tx.send(frame("end", None, "{}")).await;
                        return;
                    }
                },
                _ = keepalive.tick() => Bytes::from_static(b": keepalive\n\n"),
                _ = stopped(&mut stop) => return,
            };
            if tx.send(out).await.is_err() {
                return;
            }
        }
    });
    response(rx)
}

/// Until the daemon stops (the guard the wait returns is not held across an await).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn err_frame(message: &str) -> Bytes {
    frame("failure", None, &serde_json::json!({ "message": message }).to_string())
}

/// A plan's events (its watch), and a snapshot of the plan (its view) at the start and after
/// each batch; `end` once the plan has ended and everything was sent.
pub fn plan(mut watch: PlanWatch, svc: Service, mut stop: watch::Receiver<bool>) -> Resp {
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let snapshot = |svc: &Service, id: &str| {
            let json = svc.plan(id).ok().and_then(|p| serde_json::to_string(&p).ok());
            json.map(|s| frame("snapshot", None, &s))
        };
        if let Some(s) = snapshot(&svc, watch.id())
            && tx.send(s).await.is_err()
        {
            return;
        }
        loop {
            let batch = tokio::select! {
                b = watch.next() => b,
                _ = tokio::time::sleep(KEEPALIVE) => {
                    if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                        return;
                    }
                    continue;
                }
                _ = stopped(&mut stop) => return,
            };
            let batch = match batch {
                None => {
                    let _ = tx.send(frame("end", None, "{}")).await;
                    return;
                }
                Some(Err(e)) => {
                    let _ = tx.send(err_frame(&e.message)).await;
                    return;
                }
                Some(Ok(b)) => b,
            };
            for e in &batch {
                let j = serde_json::to_string(e).unwrap_or_default();
                if tx.send(frame("plan", Some(e.seq), &j)).await.is_err() {
                    return;
                }
            }
            if let Some(s) = snapshot(&svc, watch.id())
                && tx.send(s).await.is_err()
            {
                return;
            }
        }
    });
    response(rx)
}

/// A tick after store commits (at most one per [`TICK`]): pages re-read their lists.
pub fn ticks(svc: &Service, mut stop: watch::Receiver<bool>) -> Resp {
    let (tx, rx) = mpsc::channel(8);
    let mut commits = svc.commits();
    tokio::spawn(async move {
        let mut n = 0u64;
        loop {
            let out = tokio::select! {
                r = commits.changed() => {
                    if r.is_err() {
                        return;
                    }
                    n += 1;
                    frame("tick", None, &n.to_string())
                }
                _ = tokio::time::sleep(KEEPALIVE) => Bytes::from_static(b": keepalive\n\n"),
                _ = stopped(&mut stop) => return,
            };
            if tx.send(out).await.is_err() {
                return;
            }
            tokio::time::sleep(TICK).await;
        }
    });
    response(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_the_sequence_as_their_id() {
        assert_eq!(
            &frame("ev", Some(7), "{\"a\":1}")[..],
            b"id: 7\nevent: ev\ndata: {\"a\":1}\n\n"
        );
        assert_eq!(&frame("end", None, "{}")[..], b"event: end\ndata: {}\n\n");
        let r = hyper::Request::builder().header("last-event-id", "41").body(()).unwrap();
        assert_eq!(resume_from(&r, Some(3)), 42);
        let r = hyper::Request::builder().body(()).unwrap();
        assert_eq!(resume_from(&r, Some(3)), 3);
        assert_eq!(resume_from(&r, None), 1);
    }
}

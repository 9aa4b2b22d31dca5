//! The daemon's replay guarantee as a property: a gRPC watcher that disconnects at random
//! points and reconnects with `from_sequence` = its last sequence + 1 gets every event of the
//! run exactly once, in order — while the run is still printing and after it has closed.

use std::path::Path;
use std::time::Duration;

use herd_core::BackendKind;
use herd_engine::GuardCommand;
use herd_engine::service::{Caller, Service, ServiceOptions, TaskSpec};
use herd_server::pb;
use herd_server::request::Defaults;
use proptest::prelude::*;
use tokio_stream::wrappers::UnixListenerStream;

fn service(dir: &Path) -> Service {
    let guard = GuardCommand {
        program: env!("CARGO_BIN_EXE_herd").into(),
        args: vec![herd_engine::guard::GUARD_ARG.into()],
    };
    let opts = ServiceOptions { shared: true, ..ServiceOptions::default() };
    Service::open_with(&dir.join("state"), guard, opts).unwrap()
}

fn caller(dir: &Path) -> Caller {
    Caller::top(dir, "a test")
}

/// A run that prints `lines` lines, a few milliseconds apart (so watchers join it live).
fn printer(lines: u32) -> TaskSpec {
    let script =
        format!("i=0; while [ $i -lt {lines} ]; do echo line $i; i=$((i+1)); sleep 0.004; done");
    TaskSpec {
        prompt: "print".into(),
        cli: Some(BackendKind::Command),
        command: vec!["sh".into(), "-c".into(), script],
        timeout: Some(Duration::from_secs(60)),
        ..TaskSpec::default()
    }
}

/// Watch run `id` from the start, dropping the stream after each count of events in `cuts`
/// and reconnecting after the last sequence seen; the sequences received, in order.
async fn watch_with_cuts(c: &mut herd_server::Client, id: &str, cuts: &[usize]) -> Vec<u64> {
    let mut got: Vec<u64> = Vec::new();
    let mut cuts = cuts.iter().copied();
    loop {
        let from = got.last().map_or(1, |s| s + 1);
        let req = pb::WatchSubagentRequest {
            subagent_id: id.into(),
            from_sequence: from,
            with_json: false,
        };
        let mut s = c.watch_subagent(req).await.unwrap().into_inner();
        let cut = cuts.next();
        let mut taken = 0;
        loop {
            if cut.is_some_and(|n| taken >= n) {
                break; // Dropped mid-stream: the client goes away.
            }
            match s.message().await.unwrap() {
                Some(e) => {
                    got.push(e.sequence);
                    taken += 1;
                }
                None => return got,
            }
        }
    }
}

#[test]
fn a_watcher_that_reconnects_from_its_last_sequence_gets_every_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let svc = rt.block_on(async { service(dir.path()) });
    let socket = dir.path().join("t.sock");
    let listener = rt.block_on(async { tokio::net::UnixListener::bind(&socket).unwrap() });
    let api = herd_server::Api::new(
        svc.clone(),
        Defaults { project_root: dir.path().into(), who: "a test".into() },
    );
    let server = rt.spawn(
        herd_server::tonic::transport::Server::builder()
            .serve_with_incoming(herd_server::api::server(api), UnixListenerStream::new(listener)),
    );
    let client = rt.block_on(herd_server::client::connect_unix(&socket)).unwrap();
    let c = caller(dir.path());
    let config = ProptestConfig { cases: 12, ..ProptestConfig::default() };
    proptest!(config, |(cuts in proptest::collection::vec(0usize..25, 0..8), live in any::<bool>())| {
        let seqs = rt.block_on(async {
            let mut client = client.clone();
            let id = svc.spawn(&c, printer(40)).await.unwrap().id.to_string();
            if !live {
                // After the close: everything comes from the store.
                svc.wait(std::slice::from_ref(&id), herd_engine::service::WaitMode::All, Duration::from_secs(60))
                    .await
                    .unwrap();
            }
            let got = watch_with_cuts(&mut client, &id, &cuts).await;
            let all = svc.events(&id, 0, 100_000).unwrap();
            (got, all.iter().map(|e| e.seq as u64).collect::<Vec<_>>())
        });
        let (got, all) = seqs;
        prop_assert_eq!(&got, &all, "cuts {:?} live {}", cuts, live);
        prop_assert!(all.len() > 3, "the run printed too little: {:?}", all);
    });
    server.abort();
    rt.block_on(svc.shutdown()).unwrap();
}

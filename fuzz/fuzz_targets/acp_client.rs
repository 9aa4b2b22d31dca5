//! Fuzz target: the sans-IO ACP client never panics, whatever the agent writes: every line is
//! fed, every permission request it reports is answered (allow, deny, cancel in turn).
//! Run: `cargo fuzz run acp_client` (needs cargo-fuzz and a nightly or RUSTC_BOOTSTRAP=1).
#![no_main]

use herd_backends::acp::{self, AcpClient, AcpConfig};
use herd_backends::{Decoder, PermissionAnswer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut client = AcpClient::new(AcpConfig::new("/repo", "fuzz"));
    let _ = client.start();
    for (i, line) in data.split(|&b| b == b'\n').enumerate() {
        let step = client.feed(line);
        for d in &step.events {
            if let Some(req) = acp::permission_request(&d.event) {
                let answer = if i % 2 == 0 {
                    PermissionAnswer::Allow { input: req.input.clone() }
                } else {
                    PermissionAnswer::Deny { message: "no".into() }
                };
                let _ = acp::answer_permission(&req, &answer);
                let _ = client.answer(&req.request_id, &answer);
            }
        }
        if i % 7 == 6 {
            let _ = client.cancel();
        }
    }
    let _ = (client.take_stdin(), client.turns(), client.usage(), client.session_id());
});

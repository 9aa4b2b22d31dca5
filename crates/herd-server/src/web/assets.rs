//! The dashboard's page, script and styles, embedded in the binary (no CDN: it works offline):
//! hand-written, no framework, no build step.

use hyper::StatusCode;
use hyper::header::{self, HeaderValue};

use super::http::{self, Resp};

const INDEX: &str = include_str!("assets/index.html");
const APP_CSS: &str = include_str!("assets/app.css");
/// The scripts, in the order the page loads them.
const SCRIPTS: [(&str, &str); 7] = [
    ("/core.js", include_str!("assets/core.js")),
    ("/runs.js", include_str!("assets/runs.js")),
    ("/plan.js", include_str!("assets/plan.js")),
    ("/run.js", include_str!("assets/run.js")),
    ("/waiting.js", include_str!("assets/waiting.js")),
    ("/audit.js", include_str!("assets/audit.js")),
    ("/app.js", include_str!("assets/app.js")),
];

/// The single page (the token checked by the caller).
pub fn index() -> Resp {
    http::full(StatusCode::OK, "text/html; charset=utf-8", INDEX)
}

/// A static asset by path, if it is one.
pub fn get(path: &str) -> Option<Resp> {
    let (ct, body) = match path {
        "/app.css" => ("text/css; charset=utf-8", APP_CSS),
        _ => ("text/javascript; charset=utf-8", SCRIPTS.iter().find(|(p, _)| *p == path)?.1),
    };
    let mut r = http::full(StatusCode::OK, ct, body);
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Some(r)
}

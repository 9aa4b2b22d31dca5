//! The dashboard's HTTP plumbing: one body type, responses with the security headers every
//! answer carries, query strings and cookies read, request bodies read within a bound.

use std::convert::Infallible;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

pub type Body = BoxBody<Bytes, Infallible>;
pub type Resp = Response<Body>;

/// The largest request body the dashboard reads (a message to an agent, an answer).
pub const MAX_BODY: usize = 256 * 1024;

/// Scripts and styles only from the page's own origin, no inline code, no frames: even if
/// something escaped the escaping, a browser would not run it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    secure(r)
}

/// The headers every response carries.
pub fn secure(mut r: Resp) -> Resp {
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

pub fn json(status: StatusCode, v: &impl serde::Serialize) -> Resp {
    match serde_json::to_vec(v) {
        Ok(b) => full(status, "application/json", b),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", &e.to_string()),
    }
}

/// An error as the pages read it: `{"code": …, "message": …}`.
pub fn error(status: StatusCode, code: &str, message: &str) -> Resp {
    let body = serde_json::json!({"code": code, "message": message});
    full(status, "application/json", body.to_string())
}

/// A refused or failed request, answered as [`error`] says.
#[derive(Debug)]
pub struct Failure {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl Failure {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }

    pub fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    pub fn into_resp(self) -> Resp {
        error(self.status, self.code, &self.message)
    }
}

/// A query parameter, percent-decoded.
pub fn query<B>(req: &Request<B>, name: &str) -> Option<String> {
    let q = req.uri().query()?;
    q.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k) == name).then(|| decode(v))
    })
}

/// A query parameter as a number; a malformed one is an error naming it.
pub fn query_num<T: std::str::FromStr, B>(
    req: &Request<B>,
    name: &str,
) -> Result<Option<T>, String> {
    match query(req, name) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| format!("{name} {v:?}: not a number")),
    }
}

/// Percent-decoding (and `+` as space); bytes that do not decode stay as they are.
pub fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// A cookie's value.
pub fn cookie<B>(req: &Request<B>, name: &str) -> Option<String> {
    req.headers().get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|all| {
        all.split(';').find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == name).then(|| v.to_owned())
        })
    })
}

pub fn header<B>(req: &Request<B>, name: header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The body as JSON of type `T`, at most [`MAX_BODY`] bytes.
pub async fn body_json<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
) -> Result<T, String> {
    let bytes = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("the request body: {e} (at most {MAX_BODY} bytes)"))?
        .to_bytes();
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("the request body is not the JSON expected: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_keeps_what_does_not_decode() {
        assert_eq!(decode("a%20b+c"), "a b c");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("%E2%9C%93"), "✓");
        assert_eq!(decode("%é1"), "%é1");
    }
}

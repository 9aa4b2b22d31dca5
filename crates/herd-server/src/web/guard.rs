//! Who may use the dashboard: the token (from the URL once, then an HttpOnly SameSite=Strict
//! cookie, or an `authorization: Bearer` header), and for state-changing requests the origin.

use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};

use super::http::{self, Resp};
use crate::auth;

/// The cookie's name: one per port (cookies do not tell ports apart, two daemons may run).
pub fn cookie_name(port: u16) -> String {
    format!("herd_{port}")
}

/// Whether the request carries the token (cookie or bearer header).
pub fn has_token<B>(req: &Request<B>, token: &str, port: u16) -> bool {
    if let Some(c) = http::cookie(req, &cookie_name(port)) {
        return auth::same(&c, token);
    }
    http::header(req, header::AUTHORIZATION)
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| auth::same(t.trim(), token))
}

/// A state-changing request from the dashboard's own pages: its `Origin` (or, without one,
/// `Sec-Fetch-Site`) says same-origin, and it is JSON (which a cross-site form cannot send
/// without a preflight the server never grants). The refusal names what was missing.
pub fn same_origin<B>(req: &Request<B>) -> Result<(), String> {
    let host = http::header(req, header::HOST).ok_or("the request has no Host header")?;
    match http::header(req, header::ORIGIN) {
        Some(origin) if origin == format!("http://{host}") => {}
        Some(origin) => {
            return Err(format!("origin {origin} is not this dashboard's (http://{host})"));
        }
        None => match http::header(req, header::HeaderName::from_static("sec-fetch-site")) {
            Some("same-origin") => {}
            _ => return Err("the request names no origin".into()),
        },
    }
    let json = http::header(req, header::CONTENT_TYPE)
        .is_some_and(|t| t.split(';').next().is_some_and(|m| m.trim() == "application/json"));
    if !json {
        return Err("a state-changing request is JSON (content-type: application/json)".into());
    }
    Ok(())
}

/// The answer to the URL with the token: the cookie, and a redirect to a URL without it.
pub fn login(token: &str, port: u16) -> Resp {
    let mut r = http::full(StatusCode::SEE_OTHER, "text/plain", "signed in");
    let cookie = format!(
        "{}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000",
        cookie_name(port)
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r.headers_mut().insert(header::LOCATION, HeaderValue::from_static("/"));
    r
}

/// The page shown without the token.
pub fn unauthorized(api: bool) -> Resp {
    let msg = "this dashboard needs its token: open the URL `herd serve --web` printed \
               (`herd web` prints it again)";
    if api {
        return http::error(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", msg);
    }
    let page = format!(
        "<!doctype html><meta charset=utf-8><title>herd</title>\
         <body style=\"font-family:sans-serif;margin:3em\"><h1>herd</h1><p>{msg}</p></body>"
    );
    http::full(StatusCode::UNAUTHORIZED, "text/html; charset=utf-8", page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_http_only_and_strict() {
        let r = login("0123456789abcdef0123", 7400);
        let c = r.headers()[header::SET_COOKIE].to_str().unwrap();
        assert!(c.starts_with("herd_7400=0123456789abcdef0123;"), "{c}");
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict"), "{c}");
        assert_eq!(r.headers()[header::LOCATION], "/");
    }

    fn req(headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().method("POST").uri("/api/x");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn state_changes_need_the_same_origin_and_json() {
        let ok = [
            ("host", "127.0.0.1:7400"),
            ("origin", "http://127.0.0.1:7400"),
            ("content-type", "application/json"),
        ];
        assert!(same_origin(&req(&ok)).is_ok());
        let other = [("origin", "http://evil.example"), ok[0], ok[2]];
        assert!(same_origin(&req(&other)).unwrap_err().contains("evil.example"));
        let form = [ok[0], ok[1], ("content-type", "application/x-www-form-urlencoded")];
        assert!(same_origin(&req(&form)).is_err());
        let fetch = [ok[0], ("sec-fetch-site", "same-origin"), ok[2]];
        assert!(same_origin(&req(&fetch)).is_ok());
        let cross = [ok[0], ("sec-fetch-site", "cross-site"), ok[2]];
        assert!(same_origin(&req(&cross)).is_err());
    }

    #[test]
    fn the_token_comes_in_the_cookie_of_this_port_or_a_bearer_header() {
        let t = "0123456789abcdef0123";
        assert!(has_token(&req(&[("cookie", "a=b; herd_7400=0123456789abcdef0123")]), t, 7400));
        assert!(!has_token(&req(&[("cookie", "herd_7401=0123456789abcdef0123")]), t, 7400));
        assert!(!has_token(&req(&[("cookie", "herd_7400=0123456789abcdef0124")]), t, 7400));
        assert!(has_token(&req(&[("authorization", "Bearer 0123456789abcdef0123")]), t, 7400));
        assert!(!has_token(&req(&[]), t, 7400));
    }
}

//! A minimal HTTP/1.1 server side over any async byte stream: request parsing with httparse,
//! Content-Length and chunked bodies, `Expect: 100-continue`, keep-alive, and response encoding.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest accepted request head (request line plus headers).
const MAX_HEAD: usize = 64 * 1024;
/// Largest accepted request body.
const MAX_BODY: usize = 64 * 1024 * 1024;
const MAX_HEADERS: usize = 128;

/// One parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub method: String,
    /// The request target as sent, query string included.
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// Whether the connection may serve another request after this one.
    pub fn keep_alive(&self) -> bool {
        let connection = self.header("connection").unwrap_or("").to_ascii_lowercase();
        let has = |token: &str| connection.split(',').any(|t| t.trim() == token);
        if self.version == 0 { has("keep-alive") } else { !has("close") }
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// Why no request could be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The bytes are not an acceptable request: answer with this status, then close.
    Bad { status: u16, reason: String },
    /// The connection failed; nothing more can be sent.
    Io,
}

impl ReadError {
    fn bad(reason: impl Into<String>) -> Self {
        Self::Bad { status: 400, reason: reason.into() }
    }

    fn too_large(what: &str) -> Self {
        Self::Bad { status: 413, reason: format!("{what} too large") }
    }
}

impl From<io::Error> for ReadError {
    fn from(_: io::Error) -> Self {
        Self::Io
    }
}

/// A complete response, sent with a Content-Length.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body: body.into(),
        }
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Self::new(status, "application/json", value.to_string())
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// The bytes on the wire; `head_only` leaves out the body (answers to `HEAD`). Status codes
    /// outside 100..=999 are sent as 500.
    pub fn encode(&self, keep_alive: bool, head_only: bool) -> Vec<u8> {
        let status = if (100..=999).contains(&self.status) { self.status } else { 500 };
        let mut head = format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status));
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("content-length: {}\r\n", self.body.len()));
        head.push_str(if keep_alive {
            "connection: keep-alive\r\n"
        } else {
            "connection: close\r\n"
        });
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Decodes a complete chunked body at the start of `buf`.
///
/// Returns `Ok(None)` while more bytes are needed, else the body and how many bytes of `buf`
/// it used (chunks, last chunk and trailer section). Only chunk headers are scanned while
/// incomplete, so re-running it as data arrives stays cheap.
pub(crate) fn decode_chunked(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, ReadError> {
    let mut pos = 0;
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut total: usize = 0;
    loop {
        let (header_len, size) = match httparse::parse_chunk_size(&buf[pos..]) {
            Ok(httparse::Status::Complete(found)) => found,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::InvalidChunkSize) => return Err(ReadError::bad("invalid chunk size")),
        };
        pos += header_len;
        if size == 0 {
            // Trailer section: header lines up to an empty line.
            loop {
                let Some(line_len) = find_crlf(&buf[pos..]) else { return Ok(None) };
                pos += line_len + 2;
                if line_len == 0 {
                    break;
                }
            }
            let mut body = Vec::with_capacity(total);
            for (start, len) in spans {
                body.extend_from_slice(&buf[start..start + len]);
            }
            return Ok(Some((body, pos)));
        }
        let size = usize::try_from(size).map_err(|_| ReadError::too_large("chunk"))?;
        total = total.checked_add(size).ok_or_else(|| ReadError::too_large("body"))?;
        if total > MAX_BODY {
            return Err(ReadError::too_large("body"));
        }
        let data_end = pos + size;
        if buf.len() < data_end + 2 {
            return Ok(None);
        }
        if &buf[data_end..data_end + 2] != b"\r\n" {
            return Err(ReadError::bad("chunk data not followed by CRLF"));
        }
        spans.push((pos, size));
        pos = data_end + 2;
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// How the body of a request is framed.
enum Framing {
    Length(usize),
    Chunked,
}

fn framing(headers: &[(String, String)]) -> Result<Framing, ReadError> {
    let te: Vec<&str> = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("transfer-encoding"))
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    if let Some(last) = te.last() {
        return if last.eq_ignore_ascii_case("chunked") {
            Ok(Framing::Chunked)
        } else {
            Err(ReadError::bad(format!("unsupported transfer-encoding {last}")))
        };
    }
    let mut length = None;
    for (_, v) in headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case("content-length")) {
        let n: usize = v.trim().parse().map_err(|_| ReadError::bad("invalid content-length"))?;
        if length.is_some_and(|l| l != n) {
            return Err(ReadError::bad("conflicting content-length headers"));
        }
        length = Some(n);
    }
    match length {
        Some(n) if n > MAX_BODY => Err(ReadError::too_large("body")),
        Some(n) => Ok(Framing::Length(n)),
        None => Ok(Framing::Length(0)),
    }
}

/// One server-side HTTP/1.1 connection.
#[derive(Debug)]
pub(crate) struct Conn<S> {
    stream: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    pub fn new(stream: S) -> Self {
        Self { stream, buf: Vec::new() }
    }

    /// Reads more bytes into the buffer; `Ok(0)` at end of stream.
    async fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The next request; `Ok(None)` when the peer closed the connection between requests.
    pub async fn next_request(&mut self) -> Result<Option<Request>, ReadError> {
        let (mut request, framing, expects_continue) = loop {
            if let Some(head) = self.parse_head()? {
                break head;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(ReadError::too_large("request head"));
            }
            if self.fill().await? == 0 {
                return if self.buf.iter().all(|b| b.is_ascii_whitespace()) {
                    Ok(None)
                } else {
                    Err(ReadError::bad("connection closed inside the request head"))
                };
            }
        };

        let needs_body = !matches!(framing, Framing::Length(0));
        if needs_body && expects_continue && self.buf.is_empty() {
            self.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
            self.stream.flush().await?;
        }

        request.body = match framing {
            Framing::Length(n) => {
                while self.buf.len() < n {
                    if self.fill().await? == 0 {
                        return Err(ReadError::bad("connection closed inside the body"));
                    }
                }
                self.buf.drain(..n).collect()
            }
            Framing::Chunked => loop {
                if let Some((body, used)) = decode_chunked(&self.buf)? {
                    self.buf.drain(..used);
                    break body;
                }
                if self.buf.len() > MAX_BODY + MAX_HEAD {
                    return Err(ReadError::too_large("body"));
                }
                if self.fill().await? == 0 {
                    return Err(ReadError::bad("connection closed inside the chunked body"));
                }
            },
        };
        Ok(Some(request))
    }

    /// Parses a complete head from the buffer (and removes it), or `None` if incomplete.
    fn parse_head(&mut self) -> Result<Option<(Request, Framing, bool)>, ReadError> {
        // Tolerate stray CRLFs between requests (RFC 9112 §2.2).
        let skip = self.buf.iter().take_while(|b| matches!(b, b'\r' | b'\n')).count();
        self.buf.drain(..skip);
        if self.buf.is_empty() {
            return Ok(None);
        }
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut slots);
        let head_len = match parsed.parse(&self.buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(ReadError::bad(format!("malformed request head: {e}"))),
        };
        let (Some(method), Some(target), Some(version)) =
            (parsed.method, parsed.path, parsed.version)
        else {
            return Err(ReadError::bad("incomplete request line"));
        };
        let headers: Vec<(String, String)> = parsed
            .headers
            .iter()
            .map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()))
            .collect();
        let framing = framing(&headers)?;
        let expects_continue = version == 1
            && header(&headers, "expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
        let request = Request {
            method: method.to_owned(),
            target: target.to_owned(),
            version,
            headers,
            body: Vec::new(),
        };
        self.buf.drain(..head_len);
        Ok(Some((request, framing, expects_continue)))
    }

    pub async fn respond(
        &mut self,
        response: &Response,
        keep_alive: bool,
        head_only: bool,
    ) -> io::Result<()> {
        self.stream.write_all(&response.encode(keep_alive, head_only)).await?;
        self.stream.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(input: &[u8]) -> (Vec<u8>, usize) {
        match decode_chunked(input) {
            Ok(Some(done)) => done,
            other => panic!("not complete: {other:?}"),
        }
    }

    #[test]
    fn chunked_complete_with_extensions_and_trailers() {
        let input = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n\r\nNEXT";
        let (body, used) = decoded(input);
        assert_eq!(body, b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(&input[used..], b"NEXT");

        let trailers = b"3\r\nabc\r\n0\r\nX-Trailer: 1\r\nY: 2\r\n\r\n";
        assert_eq!(decoded(trailers), (b"abc".to_vec(), trailers.len()));
        assert_eq!(decoded(b"0\r\n\r\n"), (Vec::new(), 5));
    }

    #[test]
    fn chunked_incomplete_at_every_split_point() {
        let input = b"4\r\nWiki\r\n5\r\npedia\r\n0\r\nT: x\r\n\r\n";
        for cut in 0..input.len() {
            assert!(matches!(decode_chunked(&input[..cut]), Ok(None)), "cut at {cut}");
        }
        assert_eq!(decoded(input).0, b"Wikipedia");
    }

    #[test]
    fn chunked_rejects_garbage() {
        for bad in
            [&b"zz\r\nab\r\n0\r\n\r\n"[..], b"2\r\nabc\r\n0\r\n\r\n", b"fffffffffffffffffff\r\n"]
        {
            assert!(matches!(decode_chunked(bad), Err(ReadError::Bad { .. })), "{bad:?}");
        }
        assert!(matches!(decode_chunked(b"7fffffff\r\n"), Err(ReadError::Bad { status: 413, .. })));
    }

    #[tokio::test]
    async fn keep_alive_pipelined_requests_and_continue() {
        let (client, server) = tokio::io::duplex(4096);
        let mut conn = Conn::new(server);
        let (mut rd, mut wr) = tokio::io::split(client);
        wr.write_all(
            b"\r\nPOST /a?x=1 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc\
              POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n\
              POST /c HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        let a = conn.next_request().await.unwrap().unwrap();
        assert_eq!(
            (a.method.as_str(), a.target.as_str(), a.body.as_slice()),
            ("POST", "/a?x=1", &b"abc"[..])
        );
        assert!(a.keep_alive());
        let b = conn.next_request().await.unwrap().unwrap();
        assert_eq!((b.target.as_str(), b.body.as_slice()), ("/b", &b"hi"[..]));

        let pending =
            tokio::spawn(async move { conn.next_request().await.map(|r| r.map(|r| r.body)) });
        let mut got = vec![0u8; 25];
        rd.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"HTTP/1.1 100 Continue\r\n\r\n");
        wr.write_all(b"ok").await.unwrap();
        assert_eq!(pending.await.unwrap().unwrap().unwrap(), b"ok");
    }

    #[tokio::test]
    async fn malformed_head_is_bad_request() {
        let (mut client, server) = tokio::io::duplex(4096);
        let mut conn = Conn::new(server);
        client.write_all(b"GARBAGE\x01 / HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(matches!(conn.next_request().await, Err(ReadError::Bad { status: 400, .. })));

        let (mut client, server) = tokio::io::duplex(4096);
        let mut conn = Conn::new(server);
        client.write_all(b"POST / HTTP/1.1\r\nContent-Length: nope\r\n\r\n").await.unwrap();
        assert!(matches!(conn.next_request().await, Err(ReadError::Bad { status: 400, .. })));

        let (mut client, server) = tokio::io::duplex(4096);
        let mut conn = Conn::new(server);
        client.write_all(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc").await.unwrap();
        drop(client);
        assert!(matches!(conn.next_request().await, Err(ReadError::Bad { status: 400, .. })));
    }
}

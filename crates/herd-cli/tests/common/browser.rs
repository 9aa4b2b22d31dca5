//! A real browser for the dashboard's tests: Debian's headless chromium driven over WebDriver
//! (chromedriver, plain HTTP/1.1 with a tiny client here), screenshots written as artifacts.
//! chromedriver and its chromium run under a watchdog that ends them with the test process.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The watchdog, a shell leading a process group of its own: it starts chromedriver (`$0 $@`)
/// in that group (chromium and its helpers end up there too), waits for its stdin, a pipe from
/// the test process, to close, and then kills the whole group. The pipe closes when the test
/// process ends, however it ends: a panic, a SIGKILL from nextest's timeout.
const WATCHDOG: &str = "\"$0\" \"$@\" </dev/null >/dev/null 2>&1 & cat >/dev/null; kill -KILL 0";

pub struct Browser {
    /// The watchdog; its pid is the process group's id.
    driver: Child,
    /// The watchdog's stdin: dropping it ends the group.
    lifeline: Option<ChildStdin>,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

/// Where screenshots go: `<target>/web-artifacts/` (the README's one is copied to docs/).
pub fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("web-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Browser {
    /// The process group chromedriver and chromium run in.
    pub fn group(&self) -> i32 {
        self.driver.id() as i32
    }

    /// The browser's profile directory (on chromium's command line).
    pub fn profile(&self) -> &Path {
        self._profile.path()
    }

    /// Start chromedriver and a headless chromium session; fails (never skips) without them.
    pub fn start() -> Self {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(bin).exists(),
                "{bin} is missing: the dashboard's tests drive a real browser; install it with \
                 `apt-get install chromium chromium-driver` (.ci/test does)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut driver = Command::new("sh")
            .args(["-c", WATCHDOG, CHROMEDRIVER, &format!("--port={port}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let lifeline = driver.stdin.take();
        let profile = tempfile::tempdir().unwrap();
        let mut b = Self { driver, lifeline, port, session: String::new(), _profile: profile };
        let deadline = Instant::now() + Duration::from_secs(20);
        while b.raw("GET", "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start on port {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
        ];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", b._profile.path().display()));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let v = b.raw("POST", "/session", Some(caps)).expect("a chromium session");
        b.session = v["value"]["sessionId"].as_str().expect("a session id").to_owned();
        b
    }

    /// One WebDriver call: its `value`, or the error it answered with.
    fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        // chromedriver says `Connection: close` and keeps the connection open: read what its
        // Content-Length says (or the chunks to the last one).
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        let (head, start) = loop {
            let n = s.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the connection closed before an answer".into());
            }
            out.extend_from_slice(&buf[..n]);
            if let Some(i) = out.windows(4).position(|w| w == b"\r\n\r\n") {
                break (String::from_utf8_lossy(&out[..i]).to_ascii_lowercase(), i + 4);
            }
        };
        let length = head.lines().find_map(|l| {
            l.strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok())
        });
        let chunked = head.contains("transfer-encoding: chunked");
        loop {
            let body = &out[start..];
            let complete = match length {
                Some(n) => body.len() >= n,
                None if chunked => body.windows(5).any(|w| w == b"0\r\n\r\n"),
                None => false,
            };
            if complete {
                break;
            }
            let n = s.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        let rest = &out[start..];
        let rest = if chunked {
            dechunk(rest)
        } else {
            rest[..length.unwrap_or(rest.len()).min(rest.len())].to_vec()
        };
        let v: Value = serde_json::from_slice(&rest)
            .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&rest)))?;
        if head.starts_with("http/1.1 200") {
            Ok(v)
        } else {
            Err(format!("{}: {}", v["value"]["error"], v["value"]["message"]))
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let path = format!("/session/{}{path}", self.session);
        self.raw(method, &path, body).map(|v| v["value"].clone())
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url }))).unwrap();
    }

    /// Run `script` (a function body; `arguments` holds `args`) in the page: its return value.
    pub fn eval(&self, script: &str, args: Value) -> Value {
        self.call("POST", "/execute/sync", Some(json!({"script": script, "args": args})))
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Poll `script` until it returns something truthy; that value.
    pub fn wait_for(&self, what: &str, limit: Duration, script: &str, args: Value) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.eval(script, args.clone());
            let truthy = !(v.is_null()
                || v == Value::Bool(false)
                || v == json!("")
                || v == json!(0)
                || v == json!([]));
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                let body = self.eval("return document.body.innerText", json!([]));
                panic!("timed out waiting for {what}; the page says:\n{body}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Click the element `css` selects (a real click, through WebDriver).
    pub fn click(&self, css: &str) {
        let e = self
            .call("POST", "/element", Some(json!({"using": "css selector", "value": css})))
            .unwrap_or_else(|e| panic!("no element {css}: {e}"));
        let id = e.as_object().and_then(|o| o.values().next()).and_then(Value::as_str).unwrap();
        self.call("POST", &format!("/element/{id}/click"), Some(json!({}))).unwrap();
    }

    /// Type `text` into the element `css` selects.
    pub fn type_into(&self, css: &str, text: &str) {
        let e = self
            .call("POST", "/element", Some(json!({"using": "css selector", "value": css})))
            .unwrap_or_else(|e| panic!("no element {css}: {e}"));
        let id = e.as_object().and_then(|o| o.values().next()).and_then(Value::as_str).unwrap();
        self.call("POST", &format!("/element/{id}/value"), Some(json!({ "text": text }))).unwrap();
    }

    /// The text of an open alert/confirm dialog, if one is open.
    pub fn alert_text(&self) -> Option<String> {
        self.call("GET", "/alert/text", None).ok().and_then(|v| v.as_str().map(str::to_owned))
    }

    /// A PNG of the viewport, written to `<artifacts>/<name>.png`; its path.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let v = self.call("GET", "/screenshot", None).unwrap();
        let png = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let path = artifacts().join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&rest[..end]);
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        let tail = &rest[end + 2..];
        if n == 0 || tail.len() < n {
            break;
        }
        out.extend_from_slice(&tail[..n]);
        rest = tail[n..].strip_prefix(b"\r\n").unwrap_or(&tail[n..]);
    }
    out
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.raw("DELETE", &format!("/session/{}", self.session), None);
        }
        // The watchdog kills the group once its stdin closes; killing it here as well does not
        // wait for that.
        self.lifeline.take();
        let group = nix::unistd::Pid::from_raw(self.driver.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

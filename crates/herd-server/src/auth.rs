//! The TCP listener's bearer token: read from the environment or a file, or generated into a
//! 0600 file; every request's `authorization` header compared with it in constant time.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tonic::{Request, Status};

/// The environment variable a token may come in (server and client alike).
pub const TOKEN_VAR: &str = "HERD_TOKEN";
/// Shorter tokens are refused: they could be guessed.
const MIN_TOKEN_LEN: usize = 16;

/// Why a token cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{what}: the token is {len} characters; give at least {MIN_TOKEN_LEN}")]
    Short { what: String, len: usize },
    #[error("{path} is readable by others (mode {mode:o}); chmod 600 it")]
    Open { path: String, mode: u32 },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TokenError + '_ {
    move |source| TokenError::Io { path: path.display().to_string(), source }
}

/// A token as given: trimmed, long enough.
pub fn checked(what: &str, token: &str) -> Result<String, TokenError> {
    let t = token.trim();
    if t.len() < MIN_TOKEN_LEN {
        return Err(TokenError::Short { what: what.into(), len: t.len() });
    }
    Ok(t.to_owned())
}

/// The token in `path`: a file only its owner may read.
pub fn read(path: &Path) -> Result<String, TokenError> {
    let meta = std::fs::metadata(path).map_err(io(path))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TokenError::Open { path: path.display().to_string(), mode });
    }
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    checked(&path.display().to_string(), &text)
}

/// A new random token: 32 bytes from the kernel, hex.
pub fn random() -> Result<String, TokenError> {
    let mut bytes = [0u8; 32];
    let urandom = Path::new("/dev/urandom");
    std::fs::File::open(urandom).and_then(|mut f| f.read_exact(&mut bytes)).map_err(io(urandom))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A new random token written to `path` with mode 0600.
pub fn generate(path: &Path) -> Result<String, TokenError> {
    let token = random()?;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    f.write_all(format!("{token}\n").as_bytes()).map_err(io(path))?;
    Ok(token)
}

/// Equal, in time that depends on neither value: their digests compared byte by byte, all of
/// them, whatever the first difference.
pub fn same(a: &str, b: &str) -> bool {
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    x.iter().zip(y.iter()).fold(0u8, |acc, (p, q)| acc | (p ^ q)) == 0
}

/// Checks each request's `authorization: Bearer <token>`.
#[derive(Clone)]
pub struct Bearer(Arc<str>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(…)")
    }
}

impl Bearer {
    pub fn new(token: String) -> Self {
        Self(token.into())
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let given = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(t) if same(t.trim(), &self.0) => Ok(req),
            Some(_) => Err(Status::unauthenticated("the bearer token is wrong")),
            None => Err(Status::unauthenticated(
                "this listener needs `authorization: Bearer <token>` (herd serve printed where \
                 its token is; clients read HERD_TOKEN)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    #[test]
    fn tokens_compare_by_value_and_short_ones_are_refused() {
        assert!(same("a-long-enough-token", "a-long-enough-token"));
        assert!(!same("a-long-enough-token", "a-long-enough-tokeN"));
        assert!(!same("a-long-enough-token", ""));
        assert!(matches!(checked("env", " short "), Err(TokenError::Short { len: 5, .. })));
    }

    #[test]
    fn a_generated_token_is_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("herd.token");
        let t = generate(&p).unwrap();
        assert_eq!(t.len(), 64);
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&p).unwrap(), t);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(read(&p), Err(TokenError::Open { .. })));
    }

    #[test]
    fn the_interceptor_wants_the_exact_bearer() {
        let mut b = Bearer::new("0123456789abcdef0123".into());
        let with = |v: &str| {
            let mut r = Request::new(());
            r.metadata_mut().insert("authorization", v.parse().unwrap());
            r
        };
        assert!(b.call(with("Bearer 0123456789abcdef0123")).is_ok());
        let e = b.call(with("Bearer 0123456789abcdef0124")).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(b.call(Request::new(())).is_err());
    }
}

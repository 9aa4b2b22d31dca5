//! What the audit log keeps of a tool input: a preview of at most 1 KiB and the SHA-256 of the
//! whole input (compact JSON, keys in the input's own order).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The longest preview kept, in bytes (seed 000: 1 KB).
pub const PREVIEW_BYTES: usize = 1024;

/// Compact JSON of `input`, cut on a character boundary to at most 1 KiB (with a `…` marker).
pub fn input_preview(input: &Value) -> String {
    let full = input.to_string();
    if full.len() <= PREVIEW_BYTES {
        return full;
    }
    let mut cut = crate::truncate_str(&full, PREVIEW_BYTES - '…'.len_utf8()).to_owned();
    cut.push('…');
    cut
}

/// Lowercase hex SHA-256 of the compact JSON of `input`.
pub fn input_sha256(input: &Value) -> String {
    let digest = Sha256::digest(input.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn preview_and_hash() {
        let small = json!({"command": "ls"});
        assert_eq!(input_preview(&small), r#"{"command":"ls"}"#);
        // sha256 of {"command":"ls"}
        assert_eq!(input_sha256(&small).len(), 64);
        assert_eq!(input_sha256(&small), input_sha256(&json!({"command": "ls"})));
        assert_ne!(input_sha256(&small), input_sha256(&json!({"command": "ls "})));
        let big = json!({"content": "é".repeat(2000)});
        let p = input_preview(&big);
        assert!(p.len() <= PREVIEW_BYTES && p.ends_with('…'));
    }
}

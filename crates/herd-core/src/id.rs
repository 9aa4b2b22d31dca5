//! Identifiers: time-ordered, 26-character Crockford base32 ids (ULID layout over a UUIDv7).
//! Short enough to type, sortable by creation time, and matched by unique prefix in the CLI.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// Length of a rendered id.
pub const ID_LEN: usize = 26;

/// The herd id of one subagent run.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SubagentId(String);

/// A string that is not a valid herd id.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid id {0:?}: expected 26 characters of lowercase Crockford base32")]
pub struct InvalidId(pub String);

impl SubagentId {
    /// A fresh, time-ordered id.
    pub fn generate() -> Self {
        Self(encode(uuid::Uuid::now_v7().as_u128()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True if `s` could be a (prefix of an) id: only characters of the id alphabet.
    pub fn is_prefix_like(s: &str) -> bool {
        !s.is_empty() && s.len() <= ID_LEN && s.bytes().all(|b| ALPHABET.contains(&b))
    }
}

fn encode(mut v: u128) -> String {
    let mut out = [0u8; ID_LEN];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(v & 31) as usize];
        v >>= 5;
    }
    // Every byte comes from ALPHABET, which is ASCII.
    out.iter().map(|&b| b as char).collect()
}

impl FromStr for SubagentId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() == ID_LEN && Self::is_prefix_like(s) && s.as_bytes()[0] <= b'7' {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidId(s.to_owned()))
        }
    }
}

impl TryFrom<String> for SubagentId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<SubagentId> for String {
    fn from(id: SubagentId) -> Self {
        id.0
    }
}

impl fmt::Display for SubagentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SubagentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SubagentId({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_unique_and_time_ordered() {
        let a = SubagentId::generate();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = SubagentId::generate();
        assert_eq!(a.as_str().len(), ID_LEN);
        assert!(a < b, "{a} should sort before {b}");
        assert_eq!(a.as_str().parse::<SubagentId>().unwrap(), a);
    }

    #[test]
    fn rejects_bad_ids() {
        for bad in [
            "",
            "abc",
            "../../etc/passwd",
            "ILOU00000000000000000000000",
            "zzzzzzzzzzzzzzzzzzzzzzzzzz",
        ] {
            assert!(bad.parse::<SubagentId>().is_err(), "{bad:?} accepted");
        }
    }
}

//! Lenient field decoding for protocols herd does not own: a field of an unexpected type
//! becomes `None` instead of failing the whole line.

use serde::de::{Deserialize, DeserializeOwned, Deserializer};

/// `Some(T)` when the field had the expected shape, else `None`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Lenient<T>(pub Option<T>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(Lenient(serde_json::from_value(v).ok()))
    }
}

impl<T> Lenient<T> {
    pub(crate) fn get(self) -> Option<T> {
        self.0
    }
}

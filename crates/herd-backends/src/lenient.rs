//! Lenient field decoding for protocols herd does not own: a field of an unexpected type
//! becomes `None` instead of failing the whole line; a line of no known shape becomes an event.

use herd_core::AgentEvent;
use serde::de::{Deserialize, DeserializeOwned, Deserializer};

/// A line that did not fit a decoder's typed shape: valid JSON of another shape is `Unknown`
/// (kept verbatim), the rest a `DecodeError` with a preview.
pub(crate) fn not_typed(line: &[u8], err: &serde_json::Error) -> AgentEvent {
    if serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok() {
        AgentEvent::Unknown { raw: String::from_utf8_lossy(line).into_owned() }
    } else {
        AgentEvent::DecodeError { error: err.to_string(), preview: preview(line) }
    }
}

/// At most 200 bytes of a line, lossily as text.
pub(crate) fn preview(line: &[u8]) -> String {
    String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned()
}

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

/// A scalar of the expected type, else `None`; decoded without building a `Value` (the hot path).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Scalar<T>(pub Option<T>);

impl<T> Scalar<T> {
    pub(crate) fn get(self) -> Option<T> {
        self.0
    }
}

/// Scalars a JSON value can be read as.
pub(crate) trait FromScalar: Sized {
    fn from_str(_: &str) -> Option<Self> {
        None
    }
    fn from_u64(_: u64) -> Option<Self> {
        None
    }
    fn from_i64(_: i64) -> Option<Self> {
        None
    }
    fn from_f64(_: f64) -> Option<Self> {
        None
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
}

impl FromScalar for String {
    fn from_str(s: &str) -> Option<Self> {
        Some(s.to_owned())
    }
}

impl FromScalar for bool {
    fn from_bool(b: bool) -> Option<Self> {
        Some(b)
    }
}

impl FromScalar for f64 {
    fn from_u64(n: u64) -> Option<Self> {
        Some(n as f64)
    }
    fn from_i64(n: i64) -> Option<Self> {
        Some(n as f64)
    }
    fn from_f64(n: f64) -> Option<Self> {
        Some(n)
    }
}

macro_rules! int_scalar {
    ($($t:ty),*) => {$(
        impl FromScalar for $t {
            fn from_u64(n: u64) -> Option<Self> {
                <$t>::try_from(n).ok()
            }
            fn from_i64(n: i64) -> Option<Self> {
                <$t>::try_from(n).ok()
            }
        }
    )*};
}
int_scalar!(u16, u32, u64, i64);

struct ScalarVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: FromScalar> serde::de::Visitor<'de> for ScalarVisitor<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(T::from_str(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(T::from_u64(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(T::from_i64(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(T::from_f64(v))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(T::from_bool(v))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        while a.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

impl<'de, T: FromScalar> Deserialize<'de> for Scalar<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor(std::marker::PhantomData)).map(Scalar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_of_the_wrong_shape_become_none() {
        let v: Vec<Scalar<u32>> =
            serde_json::from_str(r#"[1, "x", null, {"a": [1]}, -3, 5000000000]"#).unwrap();
        assert_eq!(
            v.into_iter().map(Scalar::get).collect::<Vec<_>>(),
            [Some(1), None, None, None, None, None]
        );
        let s: Vec<Scalar<String>> = serde_json::from_str(r#"["a\"b", 2, [true]]"#).unwrap();
        assert_eq!(s[0].0.as_deref(), Some("a\"b"));
        assert!(s[1].0.is_none() && s[2].0.is_none());
        let f: Scalar<f64> = serde_json::from_str("3").unwrap();
        assert_eq!(f.get(), Some(3.0));
    }
}

//! Values crossing into and out of either database: [`V`] binds a parameter (converted to the
//! column type PostgreSQL asks for), [`Row`] reads a column as the Rust type the caller wants.

use std::borrow::Cow;

use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::{Result, StoreError};

/// A parameter: SQLite's four storage classes, which PostgreSQL gets as the type it expects.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum V<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(Cow<'a, str>),
}

macro_rules! int_from {
    ($($t:ty),*) => {$(
        impl From<$t> for V<'_> {
            fn from(v: $t) -> Self {
                V::Int(v as i64)
            }
        }
    )*};
}
int_from!(i64, i32, u32, u16, usize);

impl From<bool> for V<'_> {
    fn from(v: bool) -> Self {
        V::Int(v.into())
    }
}
impl From<f64> for V<'_> {
    fn from(v: f64) -> Self {
        V::Real(v)
    }
}
impl<'a> From<&'a str> for V<'a> {
    fn from(v: &'a str) -> Self {
        V::Text(Cow::Borrowed(v))
    }
}
impl<'a> From<&'a String> for V<'a> {
    fn from(v: &'a String) -> Self {
        V::Text(Cow::Borrowed(v))
    }
}
impl From<String> for V<'_> {
    fn from(v: String) -> Self {
        V::Text(Cow::Owned(v))
    }
}
impl<'a, T: Into<V<'a>>> From<Option<T>> for V<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(V::Null, Into::into)
    }
}
impl<'a> From<&&'a str> for V<'a> {
    fn from(v: &&'a str) -> Self {
        V::Text(Cow::Borrowed(v))
    }
}
impl<'a> From<&'a Option<String>> for V<'a> {
    fn from(v: &'a Option<String>) -> Self {
        v.as_deref().map_or(V::Null, V::from)
    }
}
impl<'a> From<&Option<&'a str>> for V<'a> {
    fn from(v: &Option<&'a str>) -> Self {
        v.map_or(V::Null, V::from)
    }
}

/// A value [`vals!`](super::vals) binds by reference: nothing is moved into a statement's
/// parameters, so a closure running statements can run again (a transaction retried after a
/// conflict).
pub(crate) trait Param {
    fn v(&self) -> V<'_>;
}

macro_rules! int_param {
    ($($t:ty),*) => {$(
        impl Param for $t {
            fn v(&self) -> V<'_> {
                V::Int(*self as i64)
            }
        }
    )*};
}
int_param!(i64, i32, u32, u16);

/// Saturated: `usize::MAX` (a limit meaning none) is the largest value, not -1.
impl Param for usize {
    fn v(&self) -> V<'_> {
        V::Int(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

impl Param for bool {
    fn v(&self) -> V<'_> {
        V::Int((*self).into())
    }
}
impl Param for f64 {
    fn v(&self) -> V<'_> {
        V::Real(*self)
    }
}
impl Param for str {
    fn v(&self) -> V<'_> {
        V::Text(Cow::Borrowed(self))
    }
}
impl Param for String {
    fn v(&self) -> V<'_> {
        V::Text(Cow::Borrowed(self))
    }
}
impl<T: Param + ?Sized> Param for &T {
    fn v(&self) -> V<'_> {
        (**self).v()
    }
}
impl<T: Param> Param for Option<T> {
    fn v(&self) -> V<'_> {
        self.as_ref().map_or(V::Null, Param::v)
    }
}

impl rusqlite::ToSql for V<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            V::Null => ValueRef::Null,
            V::Int(i) => ValueRef::Integer(*i),
            V::Real(f) => ValueRef::Real(*f),
            V::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

/// A parameter PostgreSQL cannot take as the type it inferred.
fn mismatch(v: &V<'_>, ty: &Type) -> Box<dyn std::error::Error + Sync + Send> {
    format!("herd-store: cannot bind {v:?} as {ty}").into()
}

impl ToSql for V<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut tokio_postgres::types::private::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match (self, ty) {
            (V::Null, _) => Ok(IsNull::Yes),
            (V::Int(i), &Type::INT8) => i.to_sql(ty, out),
            (V::Int(i), &Type::INT4) => i32::try_from(*i)?.to_sql(ty, out),
            (V::Int(i), &Type::INT2) => i16::try_from(*i)?.to_sql(ty, out),
            (V::Int(i), &Type::BOOL) => (*i != 0).to_sql(ty, out),
            (V::Int(i), &Type::FLOAT8) => (*i as f64).to_sql(ty, out),
            (V::Int(i), &Type::TEXT | &Type::VARCHAR) => i.to_string().to_sql(ty, out),
            (V::Real(f), &Type::FLOAT8) => f.to_sql(ty, out),
            (V::Real(f), &Type::FLOAT4) => (*f as f32).to_sql(ty, out),
            (V::Text(s), &Type::TEXT | &Type::VARCHAR | &Type::NAME | &Type::BPCHAR) => {
                s.as_ref().to_sql(ty, out)
            }
            (V::Text(s), &Type::UNKNOWN) => s.as_ref().to_sql(&Type::TEXT, out),
            (v, ty) => Err(mismatch(v, ty)),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A column value as read: borrowed text, numbers, or NULL.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ref<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
}

/// One result row of either database.
pub(crate) enum Row<'a> {
    Lite(&'a rusqlite::Row<'a>),
    Pg(&'a tokio_postgres::Row),
}

impl Row<'_> {
    /// Column `i` as a `T` (an error names the column and what it held).
    pub(crate) fn get<T: FromRef>(&self, i: usize) -> Result<T> {
        let v = self.raw(i)?;
        T::from_ref(v).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "column {i}: {v:?} is not a {}",
                std::any::type_name::<T>()
            ))
        })
    }

    fn raw(&self, i: usize) -> Result<Ref<'_>> {
        match self {
            Row::Lite(r) => {
                use rusqlite::types::ValueRef;
                Ok(match r.get_ref(i)? {
                    ValueRef::Null => Ref::Null,
                    ValueRef::Integer(v) => Ref::Int(v),
                    ValueRef::Real(v) => Ref::Real(v),
                    ValueRef::Text(b) => Ref::Text(
                        std::str::from_utf8(b)
                            .map_err(|e| StoreError::Corrupt(format!("column {i}: {e}")))?,
                    ),
                    ValueRef::Blob(_) => {
                        return Err(StoreError::Corrupt(format!("column {i}: a blob")));
                    }
                })
            }
            Row::Pg(r) => {
                let ty = r.columns().get(i).map(|c| c.type_().clone()).ok_or_else(|| {
                    StoreError::Corrupt(format!("column {i}: the row has no such column"))
                })?;
                let n = |v: Option<i64>| v.map_or(Ref::Null, Ref::Int);
                Ok(match ty {
                    Type::INT8 => n(r.try_get::<_, Option<i64>>(i)?),
                    Type::INT4 => n(r.try_get::<_, Option<i32>>(i)?.map(i64::from)),
                    Type::INT2 => n(r.try_get::<_, Option<i16>>(i)?.map(i64::from)),
                    Type::BOOL => n(r.try_get::<_, Option<bool>>(i)?.map(i64::from)),
                    Type::FLOAT8 => r.try_get::<_, Option<f64>>(i)?.map_or(Ref::Null, Ref::Real),
                    Type::FLOAT4 => {
                        r.try_get::<_, Option<f32>>(i)?.map_or(Ref::Null, |v| Ref::Real(v.into()))
                    }
                    Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => {
                        r.try_get::<_, Option<&str>>(i)?.map_or(Ref::Null, Ref::Text)
                    }
                    other => {
                        return Err(StoreError::Corrupt(format!(
                            "column {i}: type {other} is not one herd stores"
                        )));
                    }
                })
            }
        }
    }
}

/// A Rust type a column converts to.
pub(crate) trait FromRef: Sized {
    fn from_ref(v: Ref<'_>) -> Option<Self>;
}

impl FromRef for i64 {
    fn from_ref(v: Ref<'_>) -> Option<Self> {
        match v {
            Ref::Int(i) => Some(i),
            _ => None,
        }
    }
}
macro_rules! int_to {
    ($($t:ty),*) => {$(
        impl FromRef for $t {
            fn from_ref(v: Ref<'_>) -> Option<Self> {
                i64::from_ref(v).and_then(|i| <$t>::try_from(i).ok())
            }
        }
    )*};
}
int_to!(i32, u32, usize);

/// Stored as a signed 64-bit integer (start times, timeouts), read back bit for bit.
impl FromRef for u64 {
    fn from_ref(v: Ref<'_>) -> Option<Self> {
        i64::from_ref(v).map(|i| i as u64)
    }
}
impl FromRef for bool {
    fn from_ref(v: Ref<'_>) -> Option<Self> {
        i64::from_ref(v).map(|i| i != 0)
    }
}
impl FromRef for f64 {
    fn from_ref(v: Ref<'_>) -> Option<Self> {
        match v {
            Ref::Real(f) => Some(f),
            Ref::Int(i) => Some(i as f64),
            _ => None,
        }
    }
}
impl FromRef for String {
    fn from_ref(v: Ref<'_>) -> Option<Self> {
        match v {
            Ref::Text(s) => Some(s.to_owned()),
            _ => None,
        }
    }
}
impl<T: FromRef> FromRef for Option<T> {
    fn from_ref(v: Ref<'_>) -> Option<Self> {
        match v {
            Ref::Null => Some(None),
            v => T::from_ref(v).map(Some),
        }
    }
}

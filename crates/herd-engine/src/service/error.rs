//! The service's errors: a closed set of codes that every surface maps one-to-one (gRPC status,
//! MCP tool error, CLI exit code), and a message that says what was wrong and what to do.

use serde::Serialize;
use serde_json::Value;

use crate::EngineError;

/// What kind of failure, as gRPC names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    /// The request itself is wrong: a bad field, an invalid plan, an unknown agent or cli.
    InvalidArgument,
    /// No run, plan, request or worktree has that id.
    NotFound,
    /// The pool and its queue are full, or a lock is held and the caller would not wait.
    ResourceExhausted,
    /// The request is fine but the state is not: a run still going, a checked-out branch.
    FailedPrecondition,
    /// The caller may not do this (depth limit, policy).
    PermissionDenied,
    Cancelled,
    DeadlineExceeded,
    /// herd itself failed (the store, a task); the message says how.
    Internal,
}

impl Code {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::NotFound => "NOT_FOUND",
            Self::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Self::FailedPrecondition => "FAILED_PRECONDITION",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::Cancelled => "CANCELLED",
            Self::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Self::Internal => "INTERNAL",
        }
    }

    /// The `herd` exit code for this failure: 2 for a request the caller must fix, 1 for one
    /// refused or failed as it stands (a full pool, a policy, herd's own failure), 3 for a
    /// deadline, 130 for a cancel.
    pub const fn exit_code(self) -> u8 {
        match self {
            Self::InvalidArgument | Self::NotFound | Self::FailedPrecondition => 2,
            Self::ResourceExhausted | Self::PermissionDenied | Self::Internal => 1,
            Self::DeadlineExceeded => 3,
            Self::Cancelled => 130,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed service call.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    /// Machine-readable particulars (the field, the holders of a lock…), when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), details: None }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// An invalid argument in one field of the request (named in `details.field`).
    pub fn field(field: &str, message: impl Into<String>) -> Self {
        Self::invalid(message).with_details(serde_json::json!({ "field": field }))
    }

    /// The request field this error is about, when it names one.
    pub fn field_name(&self) -> Option<&str> {
        self.details.as_ref()?.get("field")?.as_str()
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    pub fn precondition(message: impl Into<String>) -> Self {
        Self::new(Code::FailedPrecondition, message)
    }

    pub fn exhausted(message: impl Into<String>) -> Self {
        Self::new(Code::ResourceExhausted, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }

    /// The same error with `context: ` in front of its message.
    pub fn context(mut self, context: impl std::fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

/// The code of a store failure.
fn store_code(e: &herd_store::StoreError) -> Code {
    use herd_store::StoreError as S;
    match e {
        S::NotFound(_) => Code::NotFound,
        S::Ambiguous { .. } => Code::InvalidArgument,
        S::Transition { .. } | S::TooNew { .. } => Code::FailedPrecondition,
        S::Db { .. }
        | S::Sqlite(_)
        | S::Pg { .. }
        | S::Postgres { .. }
        | S::Io { .. }
        | S::Corrupt(_)
        | S::WriterGone(_) => Code::Internal,
    }
}

impl From<herd_store::StoreError> for ApiError {
    fn from(e: herd_store::StoreError) -> Self {
        Self::new(store_code(&e), e.to_string())
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let code = match &e {
            EngineError::Store(s) => store_code(s),
            EngineError::Task(_) => Code::Internal,
            EngineError::ResourceExhausted(_) => Code::ResourceExhausted,
            EngineError::DepthExceeded { .. } => Code::PermissionDenied,
            EngineError::InvalidPermissionConfig(_) => Code::InvalidArgument,
            EngineError::Workspace(_) => Code::FailedPrecondition,
        };
        Self::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_exit_codes_and_names() {
        assert_eq!(Code::InvalidArgument.exit_code(), 2);
        assert_eq!(Code::NotFound.exit_code(), 2);
        assert_eq!(Code::ResourceExhausted.exit_code(), 1);
        assert_eq!(Code::DeadlineExceeded.exit_code(), 3);
        assert_eq!(Code::Cancelled.exit_code(), 130);
        assert_eq!(serde_json::to_value(Code::FailedPrecondition).unwrap(), "FAILED_PRECONDITION");
        let e: ApiError = herd_store::StoreError::NotFound("abc".into()).into();
        assert_eq!(e.code, Code::NotFound);
        assert!(e.message.contains("abc"), "{e}");
        let e: ApiError = EngineError::ResourceExhausted("the pool is full".into()).into();
        assert_eq!((e.code, e.message.as_str()), (Code::ResourceExhausted, "the pool is full"));
    }
}

//! herd-core: the types and rules every other herd crate shares.
//! Pure: no I/O, no async — ids, statuses and transitions, events, plans, scheduling, context.

pub mod agent;
mod backend;
pub mod context;
pub mod event;
pub mod id;
pub mod permission;
pub mod plan;
pub mod scheduler;
pub mod status;
pub mod time;
pub mod workspace;

pub use backend::{AcpSpec, BackendKind};
pub use event::{
    AgentEvent, Decoded, PermissionDenial, RefChange, RefChangeKind, ResultInfo, ResultKind, Usage,
    truncate_str,
};
pub use id::SubagentId;
pub use status::{FailureReason, IllegalTransition, Status};

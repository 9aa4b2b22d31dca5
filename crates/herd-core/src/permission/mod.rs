//! The permission model, pure: rules and their matching, policies and the rule stages of the
//! decision pipeline, auto-approve limits, TTL-bounded grants, and audit digests of tool inputs.

mod audit;
mod grants;
mod hook;
mod limits;
mod policy;
mod rule;
mod shell;

pub use audit::{PREVIEW_BYTES, input_preview, input_sha256};
pub use grants::{Grant, GrantError, GrantKind, GrantSpec, Grants, Secret, parse_grant_spec};
pub use hook::{HOOK_EVENTS, HookSpec, HookSpecs, check_hooks};
pub use limits::{
    AutoApproveConfig, AutoApprover, CallKind, KNOWN_TOOLS, Limited, PermissionConfigError,
    RateState, validate_auto_approve,
};
pub use policy::{Decision, Policy, evaluate_layers, may_auto_approve};
pub use rule::{Call, Rule, RuleError, glob_match, main_input, normalize_tool};
pub use shell::{CommandLine, command_line, command_pieces};

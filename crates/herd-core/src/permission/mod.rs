//! The permission model, pure: rules and their matching, policies and the rule stages of the
//! decision pipeline, auto-approve limits, TTL-bounded grants, and audit digests of tool inputs.

mod audit;
mod bash;
mod grants;
mod hook;
mod limits;
mod pattern;
mod policy;
mod rule;

pub use audit::{PREVIEW_BYTES, input_preview, input_sha256};
pub use bash::{BashLine, Command, MAX_LINE_BYTES, PathRef, Redirect, Role, analyze_bash};
pub use grants::{Grant, GrantError, GrantKind, GrantSpec, Grants, Secret, parse_grant_spec};
pub use hook::{HOOK_EVENTS, HookSpec, HookSpecs, check_hooks};
pub use limits::{
    AutoApproveConfig, AutoApprover, CallKind, KNOWN_TOOLS, Limited, PermissionConfigError,
    RateState, validate_auto_approve,
};
pub use pattern::{
    Piece, Word, command_glob, glob_match, matches_all, matches_anything, matches_some,
    words_to_string,
};
pub use policy::{Decision, Policy, evaluate_layers, may_auto_approve};
pub use rule::{Call, EDIT_FAMILY, Rule, RuleError, Verdict, main_input, normalize_tool};

//! herd-testkit: scripted mocks of the model APIs (Anthropic Messages, OpenAI Responses, Gemini)
//! on 127.0.0.1 that the real agent CLIs run against offline, plus how tests find and set them up.

mod anthropic;
mod bins;
mod conversation;
mod env;
mod gemini;
mod http;
mod openai;
mod pg;
mod script;
mod server;

pub use bins::{
    AgentCli, claude_bin, claude_code_acp_bin, codex_acp_bin, codex_bin, gemini_bin,
    require_claude, require_claude_code_acp, require_codex, require_codex_acp, require_gemini,
    skip_real_clis, tools_bin_dir,
};
pub use conversation::find_marker;
pub use env::{
    CODEX_MOCK_MODEL, CODEX_MOCK_PROVIDER, claude_code_acp_env, claude_env, codex_env, gemini_env,
};
pub use pg::{PgDb, cluster_dir as pg_cluster_dir, pg_db};
pub use script::{Reply, Script, Turn};
pub use server::{Api, MockServer, RecordedRequest};

//! The command-line surface: every command, flag and help text of `herd`.
//! Parsing only; the commands themselves live in `cmd/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use herd_backends::BackendKind;

const AFTER_HELP: &str = "\
Exit codes: 0 completed, 1 failed, 2 usage or input error, 3 timeout, 4 completed but tool
calls were denied because nobody answered (state completed_with_denials), 130 cancelled.
State lives in .herd/ at the project root (the nearest directory with .herd or .git);
move it with --state-dir or HERD_STATE_DIR.";

/// herd runs AI coding agent CLIs (Claude Code, any program) as supervised subagents:
/// streamed, limited, recorded, and stopped cleanly whatever happens.
#[derive(Debug, Parser)]
#[command(name = "herd", version, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    /// Where herd keeps its database and transcripts [default: <project>/.herd]
    #[arg(long, global = true, env = "HERD_STATE_DIR", hide_env_values = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// The database: `sqlite` (under the state dir) or a postgres://… URL that several
    /// machines share [default: `store:` in the config, else sqlite]
    #[arg(long, global = true, env = "HERD_STORE_URL", hide_env_values = true, value_name = "URL")]
    pub store: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one subagent on a prompt and wait for it
    #[command(after_help = TASK_HELP)]
    Task(Box<TaskArgs>),
    /// Run a plan of steps (YAML or JSON): in parallel up to a bound, each after its dependencies
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// List subagents (running ones and their plans' steps; --all for every one)
    #[command(after_help = PS_HELP)]
    Ps(PsArgs),
    /// List plans (running ones; --all for every one)
    Plans(PlansArgs),
    /// Show one subagent or plan: status, reason, usage, result (a plan: every step)
    Show(ShowArgs),
    /// Print a subagent's or a plan's events (or a subagent's raw stream with --raw)
    Logs(LogsArgs),
    /// Stop a running subagent or plan (works from any terminal)
    Cancel(CancelArgs),
    /// Check which agent CLIs are installed, their versions, and the state dir
    Doctor(DoctorArgs),
    /// Agent definitions: .herd/agents/*.yml, plus Claude, Gemini and Codex agent files
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Allow a tool call that waits for a person (no ID: list the waiting calls)
    Approve(ApproveArgs),
    /// Refuse a tool call that waits for a person
    Deny(DenyArgs),
    /// Turn a running subagent's auto-approve off: its next calls ask a person
    Revoke(RevokeArgs),
    /// Print the audit log: spawns, every permission decision, cancels, timeouts
    Audit(AuditArgs),
    /// Delete audit entries and transcripts past their retention
    Gc(GcArgs),
    /// Serve herd's tools (task, task_wait, run_plan, ...) to any MCP client over stdio
    #[command(after_help = MCP_HELP)]
    Mcp(McpArgs),
    /// The git worktrees herd created for isolated steps: list, remove, prune
    #[command(subcommand)]
    Worktrees(WorktreesCommand),
    /// Serve the plans of a shared PostgreSQL store: claim ready steps and run them here
    /// (SIGTERM or SIGINT: finish the steps under way, take no new ones, exit)
    Worker(WorkerArgs),
    /// List the workers of a shared PostgreSQL store: host, labels, load, last heartbeat
    Workers(WorkersArgs),
    /// Follow a subagent the daemon runs: its events live; answer its permission requests
    /// (y/n/a) and send it messages (any other line) from stdin; Ctrl-C detaches
    Attach(AttachArgs),
    /// Run the daemon in the foreground: runs outlive their clients; gRPC on .herd/herd.sock
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
    /// Open the web dashboard of the running `herd serve --web` (prints its URL with the token)
    Web(WebArgs),
    /// Print a shell completion script: `herd completions bash > ~/.local/share/bash-completion/completions/herd`
    #[command(after_help = COMPLETIONS_HELP)]
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
}

const SERVE_HELP: &str = "\
One daemon per state directory: a second refuses to start, naming the first's pid. It serves
herd's SubagentService (proto/herd/v1/subagent.proto) on the Unix socket herd.sock in the state
directory (mode 0600); with it running, herd task, run, ps, logs, approve and cancel go through
it. --listen adds TCP, which needs a bearer token: HERD_TOKEN or --token-file, else (loopback
only) one generated into herd.token (0600). SIGTERM or SIGINT: no new connections, every run
stopped on the stop ladder, everything persisted, exit 0. Logs go to stderr and logs/daemon.log.
--web serves the dashboard (default 127.0.0.1:7400): its URL, printed once, carries a token the
page trades for a cookie (herd web prints it again). A non-loopback address needs --web-token or
HERD_WEB_TOKEN.";

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Also listen on TCP at HOST:PORT (clients send `authorization: Bearer <token>`)
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// Read the TCP listener's token from this file (mode 0600) instead of HERD_TOKEN
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub token_file: Option<PathBuf>,
    /// Agents running at once for every client together (1-20) [default: max_concurrent in
    /// the config, else 5]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub max_concurrent: Option<u32>,
    /// Tasks that may wait for a place [default: max_queue in the config, else 20]
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub max_queue: Option<u32>,
    /// Also serve the web dashboard at HOST:PORT
    #[arg(long, value_name = "HOST:PORT", num_args = 0..=1,
          default_missing_value = herd_server::web::DEFAULT_ADDR)]
    pub web: Option<std::net::SocketAddr>,
    /// The dashboard's token (at least 16 characters; needed for a non-loopback --web)
    #[arg(
        long,
        env = "HERD_WEB_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        requires = "web"
    )]
    pub web_token: Option<String>,
}

#[derive(Debug, Args)]
pub struct WebArgs {
    /// Only print the URL (without it, a browser opens it too when there is a display)
    #[arg(long)]
    pub print: bool,
}

const COMPLETIONS_HELP: &str = "\
Install:
  bash: herd completions bash > ~/.local/share/bash-completion/completions/herd
  zsh:  herd completions zsh > \"${fpath[1]}/_herd\"
  fish: herd completions fish > ~/.config/fish/completions/herd.fish";

#[derive(Debug, Subcommand)]
pub enum WorktreesCommand {
    /// Every worktree herd created that is not removed yet (--all: removed ones too)
    List {
        #[arg(long)]
        json: bool,
        #[arg(long, short)]
        all: bool,
    },
    /// Remove one worktree: refused while in use or with uncommitted changes; an unmerged
    /// branch is kept with its commits, a merged one is deleted
    Remove {
        /// Worktree id (a unique prefix is enough)
        id: String,
    },
    /// Remove every worktree whose branch is merged into its integration branch; say why
    /// each other one is kept
    Prune {
        /// Say what would be removed, remove nothing
        #[arg(long)]
        dry_run: bool,
        /// Print JSON (an array: each worktree with what was done and why)
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// Permission request id (perm_…; a unique prefix is enough)
    pub id: Option<String>,
    /// Also allow the same call (tool and input) for the rest of this run without asking
    #[arg(long, requires = "id")]
    pub always: bool,
    /// Print JSON (an array of the waiting requests)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DenyArgs {
    /// Permission request id (perm_…; a unique prefix is enough)
    pub id: String,
    /// Why; the agent's model sees it
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// Subagent id (a unique prefix is enough)
    pub id: String,
    /// Why (at least 10 characters; kept in the audit log)
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this subagent's entries (a unique prefix is enough)
    #[arg(long)]
    pub subagent: Option<String>,
    /// Only entries newer than this, e.g. 1h, 7d, or an RFC 3339 time
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// At most this many entries (0: all)
    #[arg(long, default_value_t = 0)]
    pub limit: usize,
    /// Print JSON (an array of entries)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Keep audit entries this many days
    #[arg(long, default_value_t = herd_engine::service::AUDIT_RETENTION_DAYS)]
    pub audit_days: u64,
    /// Keep transcripts of finished subagents this many days
    #[arg(long, default_value_t = 30)]
    pub transcript_days: u64,
    /// Say what would be deleted, delete nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// Permission flags of `herd task`.
#[derive(Debug, Default, Args)]
#[command(next_help_heading = "Permissions")]
pub struct PermissionArgs {
    /// A rule for calls that are always asked of a person, e.g. `Bash(git push *)` (repeatable)
    #[arg(long = "ask", value_name = "RULE")]
    pub ask: Vec<String>,
    /// Let herd approve calls to --tools that no rule decides, within the limits below
    #[arg(long)]
    pub auto_approve: bool,
    /// Auto-approve: tool calls per minute (10-300) [default: 60]
    #[arg(long, value_name = "N", requires = "auto_approve")]
    pub tool_calls_per_minute: Option<u32>,
    /// Auto-approve: Bash calls per minute (1-60) [default: 20]
    #[arg(long, value_name = "N", requires = "auto_approve")]
    pub bash_per_minute: Option<u32>,
    /// Auto-approve: file writes per minute (1-100) [default: 30]
    #[arg(long, value_name = "N", requires = "auto_approve")]
    pub writes_per_minute: Option<u32>,
    /// Auto-approve: tool calls in the whole run (1-10000) [default: 1000]
    #[arg(long, value_name = "N", requires = "auto_approve")]
    pub max_tool_calls: Option<u32>,
    /// Auto-approve: the run's time box, e.g. 30m (1m-4h) [default: 1h]
    #[arg(long, value_name = "DURATION", requires = "auto_approve", value_parser = parse_any_duration)]
    pub max_duration: Option<std::time::Duration>,
    /// Auto-approve: over a rate limit, wait for the window instead of denying
    #[arg(long, requires = "auto_approve")]
    pub queue_on_rate_limit: bool,
    /// How long a call waits for a person before it is denied, e.g. 30s [default: 2m]
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub permission_timeout: Option<std::time::Duration>,
    /// A TTL-bounded grant: `secret:NAME:TTL` passes herd's env var NAME to the agent while
    /// valid; `tool:NAME:TTL` adds a tool (repeatable)
    #[arg(long = "grant", value_name = "SPEC")]
    pub grant: Vec<String>,
    #[command(flatten)]
    pub asking: AskArgs,
}

/// Whether a person can be asked: flags of `herd task` and `herd run`.
#[derive(Debug, Default, Clone, Copy, Args)]
pub struct AskArgs {
    /// Nobody will answer: deny a call that needs a person at once (the run then ends
    /// completed_with_denials, exit 4) [default with --json and no terminal on stdin]
    #[arg(long, conflicts_with = "wait_for_approval")]
    pub non_interactive: bool,
    /// With --json and no terminal: wait for `herd approve` from another terminal (up to
    /// --permission-timeout) instead of denying at once
    #[arg(long)]
    pub wait_for_approval: bool,
}

impl AskArgs {
    /// Nobody can answer here: `--non-interactive`, or `--json` with no terminal on stdin (a
    /// script) unless `--wait-for-approval`.
    pub fn nobody_answers(self, json: bool) -> bool {
        use std::io::IsTerminal;
        self.non_interactive || (json && !self.wait_for_approval && !std::io::stdin().is_terminal())
    }
}

const MCP_HELP: &str = "\
Register herd with an MCP client, e.g. Claude Code:
  claude mcp add herd -- herd mcp
or in an --mcp-config / .mcp.json file:
  {\"mcpServers\": {\"herd\": {\"command\": \"herd\", \"args\": [\"mcp\"]}}}
The tools are then mcp__herd__task, mcp__herd__task_wait, ... (allow them with
--allowedTools mcp__herd__task). stdout carries only the protocol; the server logs to
<state dir>/logs/mcp.log. Tasks it started are stopped when the client disconnects.

The server's policy, not the client's, bounds what its tasks may do: the project's
permissions, the mcp: section of .herd/config.yml, and these flags. A client's tools,
allow rules and auto_approve only narrow it; a call no server rule allows is asked of a
person (`herd approve`) and denied when nobody answers. Tasks work inside the project
(or an --root / mcp.roots directory).";

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Tasks running at once; more wait in a queue (1-20) [default: max_concurrent in the
    /// config, else 5]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub max_concurrent: Option<u32>,
    /// Tasks that may wait for a place; beyond that a task is refused with RESOURCE_EXHAUSTED
    /// [default: max_queue in the config, else 20]
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub max_queue: Option<u32>,
    /// The only tools clients' tasks may have, comma-separated
    #[arg(long, value_delimiter = ',', help_heading = "Server policy")]
    pub tools: Vec<String>,
    /// A rule clients' tasks may run without asking, e.g. `Bash(cargo test *)` (repeatable)
    #[arg(long = "allow", value_name = "RULE", help_heading = "Server policy")]
    pub allow: Vec<String>,
    /// A rule for calls that are refused whatever a client asks (repeatable)
    #[arg(long = "deny", value_name = "RULE", help_heading = "Server policy")]
    pub deny: Vec<String>,
    /// A rule for calls that are always asked of a person (repeatable)
    #[arg(long = "ask", value_name = "RULE", help_heading = "Server policy")]
    pub ask: Vec<String>,
    /// Let clients ask for auto-approve (herd approves calls no rule decides, within limits)
    #[arg(long, help_heading = "Server policy")]
    pub auto_approve: bool,
    /// Another directory clients' tasks may work in (repeatable)
    #[arg(long = "root", value_name = "DIR", help_heading = "Server policy")]
    pub roots: Vec<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Every agent herd can run here, with where it comes from
    List {
        #[arg(long)]
        json: bool,
    },
    /// One agent definition, as herd understands it
    Show {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Check definition files (all discovered ones when no PATH is given); exit 2 on errors
    Validate { paths: Vec<PathBuf> },
    /// Copy Claude / Gemini / Codex agents into .herd/agents/ (one-way; idempotent)
    Import {
        /// Which tool's agents to import
        #[arg(long, value_parser = ["claude", "gemini", "codex"])]
        from: String,
        /// Import only this file
        #[arg(long)]
        file: Option<PathBuf>,
        /// Overwrite native files that differ (otherwise they are left alone)
        #[arg(long)]
        update: bool,
        /// Say what would change, write nothing
        #[arg(long)]
        dry_run: bool,
    },
}

const TASK_HELP: &str = "\
Examples:
  herd task \"fix the failing test in src/lib.rs\" --cli claude --allow 'Bash(cargo test *)' --allow Edit
  herd task \"summarise\" --cli command -- ./my-agent.sh --fast
  herd task \"review src/\" --cli gemini --allow Read
  herd task \"fix it\" --cli acp -- claude-code-acp
  herd task \"…\" --json | jq .result

Tools and rules use Claude Code's vocabulary: --tools is what the agent has at all,
--allow RULE runs matching calls without asking, --deny RULE refuses them, --ask RULE
always asks a person. A RULE is `Tool` or `Tool(pattern)`, e.g. `Bash(cargo test *)`;
the pattern is a glob on the command or file path. Deny wins over everything.

A call no rule decides is asked of a person: on a terminal herd asks you, and from
any terminal `herd approve` lists waiting calls and `herd approve ID` / `herd deny ID`
answers; nobody answering within --permission-timeout means deny. Without a terminal
herd says on stderr what waits; with --json and no terminal (a script), or with
--non-interactive, such a call is denied at once (--wait-for-approval waits instead).
A run whose calls were denied for want of an answer ends completed_with_denials
(exit 4). With --auto-approve (needs --tools) herd approves such calls itself within
the rate limits and time box;
`herd revoke ID --reason …` switches that off mid-run. Every decision is in `herd audit`.";

#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The task for the agent
    pub prompt: String,

    /// Which agent CLI runs the task: claude, codex, gemini, acp (any ACP agent, named
    /// after --) or command [default: the agent's, else default_cli, else claude]
    #[arg(long, value_parser = parse_cli)]
    pub cli: Option<BackendKind>,

    /// Continue a finished subagent (id or unique prefix): natively where the CLI has
    /// sessions (claude --resume, codex exec resume, ACP session/load; same HOME), else by
    /// replaying its last messages
    #[arg(long, value_name = "ID")]
    pub resume: Option<String>,

    /// Model name or alias passed to the CLI (e.g. sonnet)
    #[arg(long)]
    pub model: Option<String>,

    /// The tools the agent has at all, comma-separated (others are removed); "" for none
    #[arg(long, value_delimiter = ',', num_args = 0..)]
    pub tools: Option<Vec<String>>,

    /// A rule for calls that run without asking, e.g. `Bash(cargo test *)` (repeatable)
    #[arg(long = "allow", value_name = "RULE")]
    pub allow: Vec<String>,

    /// A rule for calls that are refused, e.g. `Bash(rm *)` (repeatable)
    #[arg(long = "deny", value_name = "RULE")]
    pub deny: Vec<String>,

    /// Stop after this many model turns
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_turns: Option<u32>,

    /// Give up after this long, e.g. 90s, 10m (1s to 120m) [default: the agent's, else 30m]
    #[arg(long, value_parser = parse_timeout)]
    pub timeout: Option<std::time::Duration>,

    /// Run a named agent definition (see `herd agents list`)
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,

    /// A value for the agent's prompt template, K=V (repeatable)
    #[arg(long = "input", value_name = "K=V", value_parser = parse_input)]
    pub input: Vec<(String, String)>,

    /// Say how the agent CLI was chosen
    #[arg(long)]
    pub explain: bool,

    /// Working directory of the agent [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// Extra environment variable for the agent, K=V (repeatable)
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,

    /// Cut the printed/stored result to this many KiB (the transcript keeps everything)
    #[arg(long, value_name = "N")]
    pub max_output_kb: Option<u64>,

    /// Print one JSON object instead of the result text
    #[arg(long)]
    pub json: bool,

    /// With herd serve running: print the subagent's id and return at once (it runs on in the
    /// daemon; herd attach ID follows it)
    #[arg(long)]
    pub detach: bool,

    #[command(flatten)]
    pub permissions: PermissionArgs,
    /// Where the agent works: shared (the directory as is), locked (under an advisory lock,
    /// see --lock) or isolated (its own git worktree and branch, merged when it succeeds)
    #[arg(long, value_parser = ["shared", "locked", "isolated"], help_heading = "Workspace")]
    pub workspace: Option<String>,

    /// The advisory lock on the directory: shared or exclusive (implies --workspace locked)
    #[arg(long, value_parser = ["shared", "exclusive"], help_heading = "Workspace")]
    pub lock: Option<String>,

    /// When the directory is locked by another run, wait for it (default: fail at once with
    /// RESOURCE_EXHAUSTED)
    #[arg(long, help_heading = "Workspace")]
    pub wait: bool,

    /// With --workspace isolated: merge into BRANCH instead of herd/<id>/integration
    #[arg(long, value_name = "BRANCH", help_heading = "Workspace")]
    pub into: Option<String>,

    /// With --workspace isolated: the ref the worktree starts from [default: HEAD]
    #[arg(long, value_name = "REF", help_heading = "Workspace")]
    pub base: Option<String>,

    /// With --workspace isolated: a shell command run in the new worktree first
    /// (HERD_REPO, HERD_WORKTREE, HERD_BRANCH set)
    #[arg(long, value_name = "CMD", help_heading = "Workspace")]
    pub setup: Option<String>,

    /// With --workspace isolated: do not commit what the agent leaves uncommitted
    #[arg(long, help_heading = "Workspace")]
    pub no_auto_commit: bool,

    /// For --cli command: the program and its arguments; for --cli acp: the ACP agent's
    /// (e.g. -- gemini --acp, -- claude-code-acp)
    #[arg(last = true, value_name = "PROGRAM ARGS")]
    pub command: Vec<String>,
}

const RUN_HELP: &str = "\
A plan file:
  name: review
  limits: {max_concurrent: 3, budget_usd: 2.0, timeout: 20m}
  defaults: {cli: claude, allow: [Read]}
  steps:
    - {id: scan, prompt: \"List the risky functions\"}
    - {id: fix, prompt: \"Fix the first one\", depends_on: [scan], retries: 1}

A step starts when all its depends_on completed; a failed step fails its descendants
(dependency_failed) while independent steps go on. Each dependent gets its dependencies'
results in its prompt.

On a terminal: a line per active step (queued, starting, running, waiting for approval,
merging; its tool, turn, tokens, cost), each start announced with its run id; a step's call
that needs a person is asked at the plan's own prompt, one at a time ([y]es, [n]o, [a]lways);
Ctrl-C stops the plan, a second Ctrl-C kills it. Without a terminal the same announcements
are lines on stderr, each waiting call among them (answer with `herd approve ID`).
From any terminal: herd plans, herd show PLAN, herd logs PLAN --follow, herd cancel PLAN.

Exit 0 if every step completed, 4 if they did but calls were denied because nobody answered,
1 if a step failed, 130 if the plan was cancelled.";

const PS_HELP: &str = "\
STATUS is what a person needs to know: running, waiting (a tool call waits for a person:
`herd approve`), completed, completed_with_denials (calls were denied because nobody
answered), failed(REASON) (`herd show ID` has it whole), cancelled. NAME/STEP and PLAN name a
plan's step; steps that have not started are listed with ID `-`. Ids are shown as long as
keeps them unique: any command takes them as they are shown.";

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The plan file (.yml, .yaml or .json)
    #[arg(required_unless_present = "resume")]
    pub plan: Option<PathBuf>,
    /// Run the steps of an ended plan (interrupted, failed or cancelled) that had not completed,
    /// under its id; completed steps are not run again, their results still feed dependents
    #[arg(long, value_name = "PLAN_ID", conflicts_with_all = ["plan", "dry_run", "into"])]
    pub resume: Option<String>,
    /// Run at most this many steps at once (1-20; overrides limits.max_concurrent, default 5)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub max_concurrent: Option<u32>,
    /// Validate and print the layers, start nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON object at the end instead of the table
    #[arg(long)]
    pub json: bool,
    /// Merge isolated steps into BRANCH (created from HEAD if missing; never your checked-out
    /// branch) instead of herd/<run>/integration
    #[arg(long, value_name = "BRANCH")]
    pub into: Option<String>,
    /// With herd serve running: print the plan's id and return at once
    #[arg(long, conflicts_with = "dry_run")]
    pub detach: bool,
    #[command(flatten)]
    pub asking: AskArgs,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Subagent id (a unique prefix is enough)
    pub id: String,
    /// Print events as JSON lines
    #[arg(long)]
    pub json: bool,
}

/// Which rows `herd ps` and `herd plans` list.
#[derive(Debug, Clone, Copy, Args)]
pub struct Rows {
    /// Include the ones that have ended
    #[arg(long, short)]
    pub all: bool,
    /// At most this many rows (0: all)
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
}

impl From<Rows> for herd_engine::service::RunFilter {
    fn from(r: Rows) -> Self {
        Self { all: r.all, limit: r.limit }
    }
}

#[derive(Debug, Args)]
pub struct PlansArgs {
    #[command(flatten)]
    pub rows: Rows,
    /// Print JSON (an array of plans, without their steps: `herd show PLAN --json` has them)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PsArgs {
    #[command(flatten)]
    pub rows: Rows,
    /// Print JSON (an array of runs; a plan's steps, started or not, are in `herd show PLAN
    /// --json`)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Subagent id, or plan id (pln_…); a unique prefix is enough
    pub id: String,
    /// Print JSON (one object: the run, or the plan with its steps)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Subagent id, or plan id (pln_…: the plan's events with each step's); a unique prefix
    /// is enough
    pub id: String,
    /// Keep printing new output until the subagent (or plan) ends
    #[arg(long, short)]
    pub follow: bool,
    /// Print the agent's raw stdout stream instead of herd's events
    #[arg(long)]
    pub raw: bool,
    /// Print JSON: one array of events; with --follow, a stream of JSON lines (NDJSON), one
    /// event per line as it comes
    #[arg(long, conflicts_with = "raw")]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Subagent id, or plan id (pln_…); a unique prefix is enough
    pub id: String,
    /// Kill at once (SIGKILL) instead of stopping gracefully
    #[arg(long)]
    pub force: bool,
    /// Then discard its uncommitted changes (git reset --hard, git clean -fd) — only in a
    /// worktree herd created
    #[arg(long)]
    pub cleanup_worktree: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

fn parse_cli(s: &str) -> Result<BackendKind, String> {
    s.parse()
}

fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    let d = match s.parse::<u64>() {
        Ok(secs) => std::time::Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(s).map_err(|e| format!("{e} (try 90s, 10m, 1h)"))?,
    };
    if d < std::time::Duration::from_secs(1) || d > std::time::Duration::from_secs(120 * 60) {
        return Err(format!("{s} is out of range: a timeout is between 1s and 120m"));
    }
    Ok(d)
}

fn parse_any_duration(s: &str) -> Result<std::time::Duration, String> {
    match s.parse::<u64>() {
        Ok(secs) => Ok(std::time::Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(s).map_err(|e| format!("{e} (try 90s, 10m, 1h)")),
    }
}

fn parse_input(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not K=V"))?;
    if k.is_empty() {
        return Err(format!("{s:?} has an empty input name"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not K=V"))?;
    let valid = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!("{k:?} is not a valid environment variable name"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flag_values_are_validated() {
        assert_eq!(parse_timeout("2s").unwrap(), std::time::Duration::from_secs(2));
        assert_eq!(parse_timeout("90").unwrap(), std::time::Duration::from_secs(90));
        assert!(parse_timeout("0s").unwrap_err().contains("out of range"));
        assert!(parse_timeout("3h").is_err());
        assert!(parse_timeout("soon").is_err());
        assert_eq!(parse_env("A_B=x=y").unwrap(), ("A_B".into(), "x=y".into()));
        assert!(parse_env("noequals").is_err());
        assert!(parse_env("1X=y").is_err());
        assert!(parse_env("A-B=y").is_err());
    }
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Steps run at once on this machine (1-20)
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub max_concurrent: u32,
    /// This machine's labels (comma-separated): a step with `labels:` needs all of them
    #[arg(long, value_delimiter = ',', value_name = "LABEL,...")]
    pub labels: Vec<String>,
    /// Exit once no step is ready for this worker and its own steps have ended
    #[arg(long)]
    pub drain: bool,
    /// How long a step's lease lasts unless renewed (renewed every third of it); a dead
    /// worker's steps are run again after it
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease: std::time::Duration,
    /// Where this worker clones the repositories of plans with isolated steps, and puts their
    /// worktrees [default: $XDG_CACHE_HOME/herd/clones, else ~/.cache/herd/clones]
    #[arg(long, value_name = "DIR")]
    pub clones: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct WorkersArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

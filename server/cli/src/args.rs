//! The command line: global options and subcommands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// dsh — a coding agent whose every model request is rebuilt byte for byte from its session log.
#[derive(Debug, Parser)]
#[command(name = "dsh", version, long_about = None)]
pub struct Cli {
    /// Global options.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// State directory (default: $DSH_HOME, else $XDG_STATE_HOME/dsh, else ~/.local/state/dsh).
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// Provider profile from the configuration (default: $DSH_PROVIDER, else the configured
    /// one, else deepseek); see `dsh config`.
    #[arg(long, global = true, value_name = "NAME")]
    pub provider: Option<String>,
    /// Model id, passed to the provider unchanged (default: $DSH_MODEL, else the profile's).
    #[arg(long, global = true, value_name = "MODEL")]
    pub model: Option<String>,
    /// Base URL of the default profile, over the configuration's (default: $DEEPSEEK_BASE_URL).
    #[arg(long, global = true, value_name = "URL")]
    pub base_url: Option<String>,
    /// Print machine-readable JSON instead of text (read commands).
    #[arg(long, global = true)]
    pub json: bool,
    /// Sandbox policy for commands: workspace-write (default), read-only or full (no
    /// confinement) (default: $DSH_SANDBOX).
    #[arg(long, global = true, value_name = "POLICY")]
    pub sandbox: Option<String>,
    /// Let commands use the network (default: $DSH_SANDBOX_NETWORK=1).
    #[arg(long, global = true)]
    pub sandbox_network: bool,
    /// Do not use a kernel feature for the sandbox, as on a kernel without it: landlock or
    /// userns (repeatable; default: $DSH_SANDBOX_WITHOUT, comma-separated).
    #[arg(long, global = true, value_name = "FEATURE")]
    pub sandbox_without: Vec<String>,
    /// Pass this environment variable to commands, besides PATH, HOME, LANG and TERM
    /// (repeatable; default: $DSH_SANDBOX_ENV, comma-separated).
    #[arg(long, global = true, value_name = "NAME")]
    pub sandbox_env: Vec<String>,
    /// Let commands read (and run programs from) this directory too (repeatable; default:
    /// $DSH_SANDBOX_READ, colon-separated).
    #[arg(long, global = true, value_name = "DIR")]
    pub sandbox_read: Vec<PathBuf>,
    /// A limit on each command: processes=N (at once, at least 300; default 4096),
    /// memory=SIZE and file-size=SIZE (per process; default 8G each), cpu=SECONDS (per
    /// process; default 3600); memory, file-size and cpu may be `unlimited` (repeatable;
    /// default: $DSH_SANDBOX_LIMITS, comma-separated).
    #[arg(long, global = true, value_name = "NAME=VALUE")]
    pub sandbox_limit: Vec<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a scripted coding session against a built-in mock provider: no key, no network.
    Demo(DemoArgs),
    /// Run one turn: send TEXT to the agent and stream its work (`--json`: as JSON lines).
    #[command(after_help = PROMPT_EXIT_STATUSES)]
    Prompt(PromptArgs),
    /// Steer a session: TEXT joins its next model request (also while a turn runs).
    Inject(TextArgs),
    /// Cancel the running turn of a session.
    Cancel(SessionArg),
    /// List the sessions of a workspace.
    Sessions(WorkspaceArgs),
    /// Per-step token usage of a session, with the logged cause of every cache drop.
    Usage(SessionArg),
    /// "What the model saw": a step's request, rebuilt from the log.
    Saw(SawArgs),
    /// Rebuild every step of a session and compare with what was sent; check the log.
    Audit(AuditArgs),
    /// Fork a session into a new one.
    Fork(ForkArgs),
    /// Return the workspace's files and the conversation to just before a step ran (the
    /// session that continues is a fork; `--files`, `--conversation`: only one of them).
    Rewind(RewindArgs),
    /// List a session's workspace checkpoints: step, time, files changed.
    Checkpoints(SessionArg),
    /// Compact a session now: older messages become a summary.
    Compact(SessionArg),
    /// Run the daemon in the foreground (clients start one on demand).
    Serve(ServeArgs),
    /// Bridge JSON-RPC on stdin/stdout to the daemon (for editors and scripts).
    Stdio(StdioArgs),
    /// Serve the Agent Client Protocol on stdin/stdout (Zed, JetBrains, Neovim and Emacs ACP
    /// clients spawn this), as a client of the user's daemon.
    Acp,
    /// Serve the Language Server Protocol on stdin/stdout (any editor's LSP client spawns
    /// this): which agent step wrote each line, and prompt/steer/cancel/fork/saw commands.
    Lsp,
    /// Open the browser viewer: starts (or reuses) the daemon's loopback network front and
    /// prints and opens a URL with a one-time login code.
    Web(WebArgs),
    /// Show the daemon's status.
    Status,
    /// List the workspace's MCP tool servers: state, tools, last error. `--start` starts them
    /// first (they stop again unless a session of the workspace uses them).
    Mcp(McpArgs),
    /// Stop the daemon.
    Shutdown,
    /// Run the mock provider on loopback: DeepSeek-compatible chat completions and Anthropic Messages (`/v1/messages`, `/anthropic/v1/messages`).
    Mock(MockArgs),
    /// Check this installation: the state directory, the API key, the command sandbox, the
    /// daemon.
    Doctor,
    /// Show the configuration for a workspace: every value and where it came from (file and
    /// line, environment, flag, default). Keys and header values are never shown.
    Config(WorkspaceArgs),
    /// Confirm once that sessions may work in DIR although it is `/`, your home directory or
    /// holds dsh's state or configuration (recorded as `allow_workspaces` in your own
    /// configuration file; a workspace's file cannot say it).
    AllowWorkspace(AllowWorkspaceArgs),
    /// Run a command confined by a sandbox plan (the daemon's command launcher).
    #[command(hide = true)]
    SandboxExec(SandboxExecArgs),
}

/// `dsh sandbox-exec`: what the daemon passes its command launcher.
#[derive(Debug, Args)]
pub struct SandboxExecArgs {
    /// The confinement plan (JSON).
    #[arg(long)]
    pub plan: Option<String>,
    /// The part of the launcher this process runs.
    #[arg(long, default_value = "outer")]
    pub stage: dsh_sandbox::Stage,
    /// The command and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

/// `dsh demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the demo's temporary workspace and state directory (their paths are printed).
    #[arg(long)]
    pub keep: bool,
}

/// `dsh prompt`.
#[derive(Debug, Args)]
pub struct PromptArgs {
    /// Workspace directory of a new session (default: the current directory).
    #[arg(long, value_name = "DIR", conflicts_with = "session")]
    pub workspace: Option<PathBuf>,
    /// Continue this session instead of starting a new one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Approve every tool call of this turn without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Stop the turn once it ran N steps (checked between steps).
    #[arg(long, value_name = "N", value_parser = at_least_one, allow_negative_numbers = true)]
    pub max_steps: Option<i64>,
    /// Stop the turn once its steps' prompt and output tokens add up to N (checked between
    /// steps: the last step may pass it).
    #[arg(long, value_name = "N", value_parser = at_least_one, allow_negative_numbers = true)]
    pub max_tokens: Option<i64>,
    /// Stop the turn once its steps cost USD dollars at the configured prices (checked between
    /// steps); refused for a model without a price.
    #[arg(long, value_name = "USD", value_parser = more_than_zero, allow_negative_numbers = true)]
    pub max_cost: Option<f64>,
    /// Cancel the turn after SECS seconds, as `dsh cancel` does.
    #[arg(long, value_name = "SECS", value_parser = more_than_zero, allow_negative_numbers = true)]
    pub timeout: Option<f64>,
    /// The final answer must be a JSON value valid against the JSON Schema in FILE: asked for
    /// once more when it is not, then exit status 4. With --json, `turn/end` carries `output`.
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
    /// Give the model the image in FILE (PNG, JPEG, GIF or WebP, by its content; at most 3 MB)
    /// after the prompt's text; repeatable. Refused when the session's model does not read
    /// images.
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// The prompt.
    #[arg(required = true, value_name = "TEXT")]
    pub text: Vec<String>,
}

impl PromptArgs {
    /// The turn's budgets, when any is given.
    pub fn limits(&self) -> Option<dsh_protocol::TurnLimits> {
        let limits = dsh_protocol::TurnLimits {
            max_steps: self.max_steps,
            max_tokens: self.max_tokens,
            max_cost: self.max_cost,
            timeout_secs: self.timeout,
        };
        (limits != dsh_protocol::TurnLimits::default()).then_some(limits)
    }
}

/// `dsh prompt --help`'s last words: the exit statuses (docs/scripting.md).
const PROMPT_EXIT_STATUSES: &str = "\
Exit status:
  0    the turn completed
  1    the turn failed, or the prompt could not run (refused, the daemon went away)
  2    the command line is wrong (a budget that is not positive, an --output-schema file
       that is not a JSON Schema, say)
  3    a budget was reached (--max-steps, --max-tokens, --max-cost, --timeout), or the
       session's own step limit
  4    the answer does not match --output-schema, even once asked again (the problems are
       on stderr)
  130  the turn was cancelled (Ctrl-C, `dsh cancel`, the daemon stopping)

With --json, stdout is JSON lines only, each with `schemaVersion` and `type`: the turn's
events, each step's usage and cost, and a last `turn/end` (or `error`) line. See
docs/scripting.md.";

/// A whole number of at least 1 (a step or token budget).
fn at_least_one(text: &str) -> Result<i64, String> {
    let number: i64 = text.parse().map_err(|_| format!("`{text}` is not a whole number"))?;
    if number < 1 {
        return Err(format!("must be at least 1, not {number}"));
    }
    Ok(number)
}

/// A finite number above 0 (a cost or time budget).
fn more_than_zero(text: &str) -> Result<f64, String> {
    let number: f64 = text.parse().map_err(|_| format!("`{text}` is not a number"))?;
    if !(number > 0.0 && number.is_finite()) {
        return Err(format!("must be more than 0, not {text}"));
    }
    Ok(number)
}

/// A session and a text.
#[derive(Debug, Args)]
pub struct TextArgs {
    /// Session id.
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// The text.
    #[arg(required = true, value_name = "TEXT")]
    pub text: Vec<String>,
}

/// A workspace argument.
#[derive(Debug, Args)]
pub struct WorkspaceArgs {
    /// Workspace directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

/// `dsh web`.
#[derive(Debug, Args)]
pub struct WebArgs {
    /// Open the page at this workspace's sessions (default: every workspace).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Only print the URL; do not start a browser.
    #[arg(long)]
    pub no_open: bool,
}

/// `dsh allow-workspace`.
#[derive(Debug, Args)]
pub struct AllowWorkspaceArgs {
    /// The directory (default: the current directory).
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `dsh mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Workspace directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Start the servers to list their tools.
    #[arg(long)]
    pub start: bool,
}

/// A session argument.
#[derive(Debug, Args)]
pub struct SessionArg {
    /// Session id.
    #[arg(value_name = "SESSION")]
    pub session: String,
}

/// `dsh saw`.
#[derive(Debug, Args)]
pub struct SawArgs {
    /// Session id.
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Step number (1-based, counted across the session).
    #[arg(long)]
    pub step: u64,
    /// Print the exact wire body bytes, nothing else.
    #[arg(long, conflicts_with = "diff")]
    pub wire: bool,
    /// Show a diff against step N-1's request.
    #[arg(long)]
    pub diff: bool,
}

/// `dsh audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// A session id, or the path of a log file.
    #[arg(value_name = "SESSION|FILE")]
    pub target: String,
}

/// `dsh fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Session id.
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Keep the parent's events with seq < SEQ (default: the whole log).
    #[arg(long, value_name = "SEQ", conflicts_with = "step")]
    pub at: Option<u64>,
    /// Fork at the boundary of step N: keep what came before its request.
    #[arg(long, value_name = "N")]
    pub step: Option<u64>,
}

/// `dsh rewind`.
#[derive(Debug, Args)]
pub struct RewindArgs {
    /// Session id.
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// Rewind to just before step N ran.
    #[arg(long, value_name = "N", required_unless_present = "checkpoint")]
    pub step: Option<u64>,
    /// Restore the files to the checkpoint with this seq (`dsh checkpoints`; files only).
    #[arg(long, value_name = "SEQ", conflicts_with_all = ["step", "conversation"])]
    pub checkpoint: Option<u64>,
    /// Only the files: the session itself continues (its next request notes what changed).
    #[arg(long, conflicts_with = "conversation")]
    pub files: bool,
    /// Only the conversation: a fork at the step continues; no file is touched.
    #[arg(long)]
    pub conversation: bool,
    /// Overwrite files changed since the last checkpoint by someone other than the agent.
    #[arg(long)]
    pub force: bool,
    /// Say what would change, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `dsh serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Also serve WebSocket/HTTP on this loopback address; clients need the bearer token in
    /// $DSH_HOME/token.
    #[arg(long, value_name = "127.0.0.1:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// An Origin the network listener accepts (repeatable); requests with any other Origin are
    /// refused.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// Exit after this many minutes with no client and no running turn (not with --listen:
    /// WebSockets are counted, HTTP requests are not).
    #[arg(long, value_name = "MINUTES", value_parser = positive_minutes, conflicts_with = "listen")]
    pub idle_exit: Option<f64>,
    /// An approval nobody answers within this many seconds is denied.
    #[arg(long, default_value_t = 300)]
    pub approval_timeout: u64,
    /// Connections served at once, on the socket and over WebSocket; one more is refused with an
    /// error.
    #[arg(long, default_value_t = dsh_daemon::serve::DEFAULT_MAX_CONNECTIONS, value_parser = connection_count)]
    pub max_connections: usize,
    /// Rebuild every request from the log before sending it and compare (always on in debug
    /// builds).
    #[arg(long)]
    pub check_invariants: bool,
    /// Unload a session nothing uses after this many minutes (it reloads when named again).
    #[arg(long, value_name = "MINUTES", default_value_t = 10.0, value_parser = positive_minutes)]
    pub unload_after: f64,
    /// Unload idle sessions, least recently used first, while the loaded sessions (their logs
    /// and the request bodies they hold) add up to more than this many MiB.
    #[arg(long, value_name = "MIB", default_value_t = 512)]
    pub loaded_budget: u64,
    /// Read the provider's API key from standard input (how a client that starts the daemon
    /// hands it over, so that it is never in the daemon's environment).
    #[arg(long, hide = true)]
    pub api_key_stdin: bool,
    /// Start the daemon detached and print its pid: in a session of its own, its parent (this
    /// process) gone, so no signal to the starter's process group, session or descendants
    /// reaches it (how clients start it).
    #[arg(long, hide = true)]
    pub detach: bool,
}

/// `dsh stdio`.
#[derive(Debug, Args)]
pub struct StdioArgs {
    /// Run a private daemon inside this process instead of joining the user's daemon.
    #[arg(long)]
    pub in_process: bool,
    /// With --in-process: an approval nobody answers within this many seconds is denied.
    #[arg(long, default_value_t = 300)]
    pub approval_timeout: u64,
}

/// `dsh mock`.
#[derive(Debug, Args)]
pub struct MockArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Cache granularity in tokens.
    #[arg(long, default_value_t = 64)]
    pub granularity: u64,
    /// Cache mode: `block` (64-token storage units) or `units` (strict V4-like units).
    #[arg(long, default_value = "block")]
    pub cache_mode: String,
}

/// A finite, positive number of minutes.
fn positive_minutes(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(minutes) if minutes.is_finite() && minutes > 0.0 && minutes <= 525_600.0 => Ok(minutes),
        Ok(_) => Err("expected a number of minutes above 0 and at most a year".to_owned()),
        Err(error) => Err(error.to_string()),
    }
}

/// A number of connections: 1 to 65536.
fn connection_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(count) if (1..=65_536).contains(&count) => Ok(count),
        Ok(_) => Err("expected a number of connections from 1 to 65536".to_owned()),
        Err(error) => Err(error.to_string()),
    }
}

//! The command line: global options and subcommands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// dsh — a coding agent whose every model request is rebuilt byte for byte from its session log.
#[derive(Debug, Parser)]
#[command(name = "dsh", version, about, long_about = None)]
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
    /// Provider base URL (default: $DEEPSEEK_BASE_URL, else https://api.deepseek.com).
    #[arg(long, global = true, value_name = "URL")]
    pub base_url: Option<String>,
    /// Model id, passed to the provider unchanged (default: $DSH_MODEL, else deepseek-v4-flash).
    #[arg(long, global = true, value_name = "MODEL")]
    pub model: Option<String>,
    /// Print machine-readable JSON instead of text (read commands).
    #[arg(long, global = true)]
    pub json: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a scripted coding session against a built-in mock provider: no key, no network.
    Demo(DemoArgs),
    /// Run one turn: send TEXT to the agent and stream its work.
    Prompt(PromptArgs),
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
    /// Run the DeepSeek-compatible mock provider on loopback.
    Mock(MockArgs),
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
    /// Workspace directory (default: the current directory). Ignored with --session, which
    /// continues in the session's own workspace.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Continue this session instead of starting a new one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Approve every tool call without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Steps per turn before it stops.
    #[arg(long, default_value_t = 50)]
    pub max_steps: u32,
    /// Rebuild every request from the log before sending it and compare (always on in debug
    /// builds).
    #[arg(long)]
    pub check_invariants: bool,
    /// The prompt.
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
    #[arg(long, value_name = "SEQ")]
    pub at: Option<u64>,
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

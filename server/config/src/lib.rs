//! dsh's configuration: TOML files in layers — built in, the user's (`$DSH_CONFIG`, else
//! `$XDG_CONFIG_HOME/dsh/config.toml`), the workspace's (`.dsh/config.toml`) — then the
//! environment and flags, later winning. Every resolved value carries its [`Source`] (file and
//! line, variable, flag, default), so `dsh config` can say where it came from.
//!
//! It holds provider profiles (kind, base URL, where the key is, headers, timeouts, wire
//! options, models with their window, output limit and prices), the default profile and model,
//! the approval policy per tool, context settings, the instruction-file policy and the MCP tool
//! servers (`[mcp.servers.NAME]`, defined only in the user's file), the hooks
//! (`[[hooks.EVENT]]`, defined only there too), and what `web_fetch` may reach (`[web]`, which a
//! workspace's file only narrows).
//!
//! What it does not do: read keys (it names where they are; the daemon reads them when a
//! request needs one), watch files, or know about sessions. A secret never passes through it:
//! a key written in a file is refused, and header values are never shown.

mod approval;
mod entries;
mod file;
mod hooks;
mod mcp;
mod profile;
pub mod prompt_files;
mod resolve;
mod subagents;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

pub use dsh_session::Approval;
pub use entries::Entry;
pub use file::{Layer, MAX_FILE_BYTES};
pub use hooks::{HOOK_TIMEOUT, Hook, MAX_HOOK_TIMEOUT_SECS, check_program, matcher_regex};
pub use mcp::{
    MCP_CALL_TIMEOUT, MCP_STARTUP_TIMEOUT, McpServer, McpTransport, TransportError,
    check_server_name,
};
pub use profile::{DEFAULT_MAX_IMAGES, KeySource, Model, Profile};
pub use resolve::{
    CheckpointSettings, Config, ContextSettings, DEFAULT_CHECKPOINT_BUDGET,
    DEFAULT_CHECKPOINT_MAX_FILE_SIZE, DEFAULT_WEB_MAX_BYTES, DEFAULT_WEB_TIMEOUT_SECS,
    InstructionSettings, MAX_WEB_MAX_BYTES, MAX_WEB_TIMEOUT_SECS, Overrides, WebConfig, resolve,
};
pub use subagents::{
    DEFAULT_SUBAGENT_MAX_DEPTH, DEFAULT_SUBAGENT_MAX_PARALLEL, DEFAULT_SUBAGENT_MAX_STEPS,
    DEFAULT_SUBAGENT_MAX_TOKENS, DEFAULT_SUBAGENT_TIMEOUT_SECS, SubagentSettings,
};

/// The built-in layer's text.
pub const DEFAULTS: &str = include_str!("defaults.toml");

/// The variable naming the user's configuration file.
pub const CONFIG_ENV: &str = "DSH_CONFIG";

/// A workspace's configuration file, relative to its root.
pub const WORKSPACE_FILE: &str = ".dsh/config.toml";

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// dsh's built-in defaults.
    Default,
    /// A configuration file, at a line.
    File {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// An environment variable.
    Env(String),
    /// A command-line flag (or the API parameter a client passed it as).
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File { path, line } => write!(f, "{}:{line}", path.display()),
            Source::Env(name) => write!(f, "env {name}"),
            Source::Flag(name) => write!(f, "flag {name}"),
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Its source.
    pub source: Source,
}

impl<T> Sourced<T> {
    /// A value from `source`.
    pub fn new(value: T, source: Source) -> Self {
        Sourced { value, source }
    }
}

/// A configuration that cannot be used: where (file and line, or the setting) and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {message}")]
pub struct ConfigError {
    /// `FILE:LINE`, a file, or the setting (`flag --provider`).
    pub location: String,
    /// What is wrong, and what to do.
    pub message: String,
}

/// The built-in layer.
pub fn builtin() -> Layer {
    // A unit test parses it; it cannot fail at run time.
    Layer::parse(DEFAULTS, None, false).expect("the built-in configuration parses")
}

/// The user's configuration file: `$DSH_CONFIG`, else `<config dir>/config.toml`.
pub fn user_file(config_dir: Option<&Path>) -> Option<PathBuf> {
    match std::env::var_os(CONFIG_ENV).filter(|value| !value.is_empty()) {
        Some(path) => Some(PathBuf::from(path)),
        None => config_dir.map(|dir| dir.join("config.toml")),
    }
}

/// A workspace's configuration file.
pub fn workspace_file(workspace: &Path) -> PathBuf {
    workspace.join(WORKSPACE_FILE)
}

//! The sandbox policy a user asks for: how commands are confined ([`SandboxPolicy`]), whether
//! they get the network, kernel features to leave unused (as a user on a kernel without them
//! would see), what else commands may see (environment variables, readable directories), and
//! what one command may use ([`Limits`]).
//!
//! One struct, [`SandboxConfig`], so that flags and environment variables today, and a
//! configuration file later, fill the same thing.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How commands are confined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SandboxPolicy {
    /// Read the system and the workspace; write only the workspace and a private temporary
    /// directory; no network unless allowed.
    #[default]
    WorkspaceWrite,
    /// Read the system and the workspace; write nothing; no network unless allowed.
    ReadOnly,
    /// No confinement: commands can do whatever the user can.
    Full,
}

impl SandboxPolicy {
    /// The name used on the command line, in the status and in the system prompt.
    pub fn name(self) -> &'static str {
        match self {
            SandboxPolicy::WorkspaceWrite => "workspace-write",
            SandboxPolicy::ReadOnly => "read-only",
            SandboxPolicy::Full => "full",
        }
    }
}

impl fmt::Display for SandboxPolicy {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

impl FromStr for SandboxPolicy {
    type Err = ConfigError;
    fn from_str(text: &str) -> Result<Self, ConfigError> {
        match text {
            "workspace-write" => Ok(SandboxPolicy::WorkspaceWrite),
            "read-only" => Ok(SandboxPolicy::ReadOnly),
            "full" => Ok(SandboxPolicy::Full),
            other => Err(ConfigError::Policy(other.to_owned())),
        }
    }
}

/// A kernel feature the sandbox is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// Landlock: file system and TCP access control.
    Landlock,
    /// Unprivileged user namespaces, and with them mount, PID and network namespaces.
    Userns,
}

impl Feature {
    /// Every feature, in the order they are reported.
    pub const ALL: [Feature; 2] = [Feature::Landlock, Feature::Userns];

    /// The name used on the command line and in the status.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Landlock => "landlock",
            Feature::Userns => "userns",
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

impl FromStr for Feature {
    type Err = ConfigError;
    fn from_str(text: &str) -> Result<Self, ConfigError> {
        match text {
            "landlock" => Ok(Feature::Landlock),
            "userns" => Ok(Feature::Userns),
            other => Err(ConfigError::Feature(other.to_owned())),
        }
    }
}

/// The sandbox configuration of a daemon.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxConfig {
    /// The policy for `run_command`.
    pub policy: SandboxPolicy,
    /// Whether commands may use the network.
    pub network: bool,
    /// Kernel features not to use, even when the kernel offers them.
    pub without: BTreeSet<Feature>,
    /// Names of environment variables passed to commands besides `PATH`, `HOME`, `LANG` and
    /// `TERM` (when the daemon has them).
    pub env: Vec<String>,
    /// More directories commands may read (and run programs from).
    pub read: Vec<PathBuf>,
    /// What one command may use.
    pub limits: Limits,
}

/// What one confined command may use. A command past a limit fails (a fork that cannot be
/// made, an allocation refused, `SIGXFSZ`, `SIGXCPU`); the daemon and other sessions go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Processes and threads at once in the command's PID namespace (its `pid_max`; the
    /// kernel's floor is 300). Without a PID namespace, `RLIMIT_NPROC` — which counts all of
    /// the user's processes and does not bind root.
    pub processes: u64,
    /// Bytes of data memory (heap and private writable mappings, `RLIMIT_DATA`) per process.
    pub memory: u64,
    /// Bytes of the largest file a process may write (`RLIMIT_FSIZE`).
    pub file_size: u64,
    /// Seconds of CPU time per process (`RLIMIT_CPU`).
    pub cpu_seconds: u64,
}

/// The smallest process limit a PID namespace takes (the kernel's `pid_max` floor, less one).
pub const MIN_PROCESSES: u64 = 300;

impl Default for Limits {
    fn default() -> Limits {
        const GIB: u64 = 1024 * 1024 * 1024;
        Limits { processes: 4096, memory: 8 * GIB, file_size: 8 * GIB, cpu_seconds: 3600 }
    }
}

impl Limits {
    /// Sets one limit from `name=value` (`processes=500`, `memory=2G`, `file-size=512M`,
    /// `cpu=600`; `unlimited` for memory, file size and CPU time).
    pub fn set(&mut self, setting: &str) -> Result<(), ConfigError> {
        let bad = || ConfigError::Limit(setting.to_owned());
        let (name, value) = setting.split_once('=').ok_or_else(bad)?;
        let (name, value) = (name.trim(), value.trim());
        if value == "unlimited" {
            match name {
                "memory" => self.memory = u64::MAX,
                "file-size" => self.file_size = u64::MAX,
                "cpu" => self.cpu_seconds = u64::MAX,
                _ => return Err(bad()),
            }
            return Ok(());
        }
        let (digits, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
            Some(at) => value.split_at(at),
            None => (value, ""),
        };
        let number: u64 = digits.parse().map_err(|_| bad())?;
        let bytes = |number: u64| -> Result<u64, ConfigError> {
            let factor: u64 = match unit {
                "" => 1,
                "K" | "k" => 1 << 10,
                "M" | "m" => 1 << 20,
                "G" | "g" => 1 << 30,
                _ => return Err(bad()),
            };
            number.checked_mul(factor).filter(|bytes| *bytes > 0).ok_or_else(bad)
        };
        match name {
            "processes" if unit.is_empty() && number >= MIN_PROCESSES => self.processes = number,
            "memory" => self.memory = bytes(number)?,
            "file-size" => self.file_size = bytes(number)?,
            "cpu" if unit.is_empty() && number > 0 => self.cpu_seconds = number,
            _ => return Err(bad()),
        }
        Ok(())
    }

    /// The value as `--sandbox-limit` takes it back (`unlimited` for `u64::MAX`).
    pub fn value_text(value: u64) -> String {
        if value == u64::MAX { "unlimited".to_owned() } else { value.to_string() }
    }

    /// The limits in words, for the status and `dsh doctor`; `processes` says whether the
    /// process limit can be enforced here (a PID namespace whose `pid_max` can be set).
    pub fn describe(&self, processes: Result<(), &str>) -> String {
        let bytes = |bytes: u64| match bytes {
            u64::MAX => "unlimited".to_owned(),
            bytes => format!("{} MiB", bytes / (1024 * 1024)),
        };
        let cpu = match self.cpu_seconds {
            u64::MAX => "unlimited".to_owned(),
            seconds => format!("{seconds} s"),
        };
        let processes = match processes {
            Ok(()) => format!("{} processes", self.processes),
            Err(why) => format!("processes not limited ({why})"),
        };
        format!(
            "{processes}; per process: memory {}, file size {}, CPU {cpu}",
            bytes(self.memory),
            bytes(self.file_size)
        )
    }
}

/// A configuration value that does not parse or is not allowed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// An unknown policy name.
    #[error("unknown sandbox policy `{0}` (expected workspace-write, read-only or full)")]
    Policy(String),
    /// An unknown feature name.
    #[error("unknown sandbox feature `{0}` (expected landlock or userns)")]
    Feature(String),
    /// Not an environment variable name.
    #[error("`{0}` is not an environment variable name")]
    EnvName(String),
    /// A variable that must never reach a command.
    #[error("{0} is never passed to commands")]
    Forbidden(String),
    /// A limit that does not parse.
    #[error(
        "`{0}` is not a sandbox limit (processes=N with N >= 300, memory=SIZE, file-size=SIZE, \
         cpu=SECONDS; SIZE in bytes or with K, M or G; memory, file-size and cpu may be \
         `unlimited`)"
    )]
    Limit(String),
    /// A readable directory that is not an absolute path.
    #[error("sandbox read path `{0}` must be absolute")]
    RelativeRead(String),
}

impl SandboxConfig {
    /// Checks the configuration: variable names are names and none is in `forbidden` (the
    /// provider's key), readable paths are absolute.
    pub fn validate(&self, forbidden: &[&str]) -> Result<(), ConfigError> {
        for name in &self.env {
            let mut chars = name.chars();
            let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(ConfigError::EnvName(name.clone()));
            }
            if forbidden.contains(&name.as_str()) {
                return Err(ConfigError::Forbidden(name.clone()));
            }
        }
        for path in &self.read {
            if !path.is_absolute() {
                return Err(ConfigError::RelativeRead(path.display().to_string()));
            }
        }
        Ok(())
    }

    /// Splits a list of names given as one value (`A,B` or `A:B`), as an environment variable
    /// carries them.
    pub fn split_list(text: &str) -> impl Iterator<Item = &str> {
        text.split([',', ':']).map(str::trim).filter(|part| !part.is_empty())
    }
}

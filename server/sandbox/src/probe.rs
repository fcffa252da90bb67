//! What the kernel offers, found by trying rather than by reading version numbers: the daemon
//! runs `dsh sandbox-exec --stage probe` once at start, which builds the namespace pipeline
//! for real around a command that does nothing and then restricts itself with Landlock.

use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// Whether one kernel feature works, with the detail or the reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Availability {
    /// It works.
    pub available: bool,
    /// What it offers (`Landlock ABI 7`) or why it does not work.
    pub detail: String,
}

impl Availability {
    /// A feature that works.
    pub fn available(detail: String) -> Availability {
        Availability { available: true, detail }
    }

    /// A feature that does not.
    pub fn unavailable(reason: String) -> Availability {
        Availability { available: false, detail: reason }
    }
}

/// What the kernel offers the sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    /// Landlock.
    pub landlock: Availability,
    /// Unprivileged user namespaces (with mount, PID and network namespaces).
    pub userns: Availability,
}

impl Support {
    /// Nothing works, for `reason`.
    pub fn none(reason: &str) -> Support {
        Support {
            landlock: Availability::unavailable(reason.to_owned()),
            userns: Availability::unavailable(reason.to_owned()),
        }
    }

    /// On a system other than Linux.
    pub fn unsupported_os() -> Support {
        Support::none("command sandboxing is implemented for Linux only")
    }

    /// Asks `helper` (this `dsh` binary) what the kernel offers. Blocks for the few
    /// milliseconds the probe takes.
    pub fn probe(helper: &Path) -> Support {
        if !cfg!(target_os = "linux") {
            return Support::unsupported_os();
        }
        let output = Command::new(helper)
            .args(["sandbox-exec", "--stage", "probe"])
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output();
        match output {
            Ok(output) if output.status.success() => serde_json::from_slice(&output.stdout)
                .unwrap_or_else(|error| {
                    Support::none(&format!("the sandbox probe answered nonsense: {error}"))
                }),
            Ok(output) => Support::none(&format!(
                "the sandbox probe failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )),
            Err(error) => Support::none(&format!(
                "cannot run the sandbox probe {}: {error}",
                helper.display()
            )),
        }
    }
}

//! The command sandbox: what `run_command` may touch.
//!
//! A policy from the configuration ([`SandboxConfig`]: `workspace-write`, `read-only`, `full`,
//! the network, features turned off), what the kernel offers ([`Support`], probed once), the
//! resulting decision and status ([`Sandbox`]), each session's plan and private temporary
//! directory ([`CommandSandbox`], which builds the confined `Command`), and the helper that
//! applies a plan to itself and `exec`s the command ([`sandbox_exec`], hosted by the `dsh`
//! binary as `dsh sandbox-exec`). On Linux the layers are Landlock (file system, TCP, signals)
//! and user, mount, PID and network namespaces; elsewhere nothing confines, and the status
//! says so. The file tools' side of the same promise is [`beneath`]: every path opened beneath a
//! directory handle, never re-resolved from a string, hidden paths refused.
//!
//! What it does not do: decide approvals (the agent asks, and knows from
//! [`CommandSandbox::approval_required`] when every command must), hold the provider's key, or
//! know about sessions and logs. It has no unsafe code: the helper is a separate process
//! because confining a child between `fork` and `exec` would need some.

#[cfg(target_os = "linux")]
pub mod beneath;
pub mod diagnose;
pub mod helper;
pub mod plan;
pub mod policy;
pub mod probe;
pub mod runtime;

#[cfg(target_os = "linux")]
mod linux;

#[cfg(test)]
mod tests;

pub use helper::{SETUP_FAILED, Stage, sandbox_exec};
pub use plan::{Layers, Plan, PlanInputs};
pub use policy::{ConfigError, Feature, Limits, SandboxConfig, SandboxPolicy};
pub use probe::{Availability, Support};
pub use runtime::{CommandSandbox, FeatureStatus, Sandbox, SandboxStatus, process_alive};

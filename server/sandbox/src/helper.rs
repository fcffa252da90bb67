//! `dsh sandbox-exec`: the helper that confines itself and then runs the command.
//!
//! Applying a sandbox to a child would need code between `fork` and `exec` (`pre_exec`), which
//! is unsafe; so, as Codex ships its Linux sandbox helper, the daemon runs its own binary as
//! the command's launcher: `dsh sandbox-exec --plan JSON -- sh -c COMMAND`. The helper is a
//! fresh, single-threaded process (user namespaces can only be entered by one), confines
//! itself as the plan says, and `exec`s the command. The stages are described in
//! `linux/mod.rs`.

use std::ffi::OsString;

/// Which part of the helper a process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// What the daemon starts: creates the namespaces, prepares the mounts, starts the
    /// namespace's init, confines itself (the user's own identity, Landlock), starts the
    /// command, waits, and reports the command's status.
    Outer,
    /// PID 1 of the command's PID namespace: mounts its `/proc`, reaps orphans.
    Init,
    /// Reports what the kernel offers (JSON on stdout).
    Probe,
    /// Does nothing (the probe's confined command).
    Noop,
}

impl std::str::FromStr for Stage {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "outer" => Ok(Stage::Outer),
            "init" => Ok(Stage::Init),
            "probe" => Ok(Stage::Probe),
            "noop" => Ok(Stage::Noop),
            other => Err(format!("unknown sandbox stage `{other}`")),
        }
    }
}

/// The exit status of a helper that could not set the sandbox up (as a shell reports a
/// command it cannot run).
pub const SETUP_FAILED: i32 = 126;

/// Runs one stage of the helper; returns the process's exit status (the stages that `exec`
/// the command only return when that fails). Must run before this process starts any thread.
pub fn sandbox_exec(stage: Stage, plan: Option<&str>, command: &[OsString]) -> i32 {
    #[cfg(target_os = "linux")]
    {
        crate::linux::run(stage, plan, command)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (plan, command);
        if stage == Stage::Noop {
            return 0;
        }
        if stage == Stage::Probe {
            use std::io::Write as _;
            let support = crate::probe::Support::unsupported_os();
            let json = serde_json::to_string(&support).unwrap_or_default();
            return if writeln!(std::io::stdout(), "{json}").is_ok() { 0 } else { SETUP_FAILED };
        }
        eprintln!("dsh sandbox: command sandboxing is implemented for Linux only");
        SETUP_FAILED
    }
}

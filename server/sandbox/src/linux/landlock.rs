//! The Landlock layer: which trees a command may read, which it may write, no TCP when the
//! network is off, and no signals or abstract-socket connections to processes outside the
//! sandbox.
//!
//! Landlock is an allow list: every file system access it knows is handled, and only the
//! plan's trees get rules. A hidden path inside a readable tree is carved out ([`carve`]).
//! Landlock also forbids a sandboxed process to `ptrace` any process outside its domain (for
//! a user other than root that covers `/proc/PID/environ`; see [`proc_trees`] for root), and
//! to mount or unmount anything; both hold even where no PID or mount namespace could be
//! made.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::SetupError;
use crate::plan::{Plan, carve};
use crate::probe::Availability;

/// The Landlock ABI whose rights are requested (best effort: a kernel with an older ABI
/// enforces what it knows; [`restrict`] refuses one that enforces nothing). ABI 7 is the one
/// this sandbox was built and tested against; rights of newer ABIs (UDP, Unix socket paths)
/// are left for when they can be tested.
const TARGET: ABI = ABI::V7;

/// Character devices commands may write to (besides reading all of `/dev`).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Restricts this thread (the helper is single-threaded) and what it `exec`s.
pub(super) fn restrict(plan: &Plan) -> Result<(), SetupError> {
    let read = AccessFs::from_read(TARGET);
    let all = AccessFs::from_all(TARGET);
    let device = read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let mut ruleset = Ruleset::default().handle_access(all)?.scope(Scope::from_all(TARGET))?;
    if !plan.network {
        // Handled with no rule: no TCP connection and no TCP listener, loopback included.
        ruleset = ruleset.handle_access(AccessNet::from_all(TARGET))?;
    }
    let mut created = ruleset.create()?;
    let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
    rules.extend(carve(&plan.read, &plan.hide).into_iter().map(|path| (path, read)));
    // Writable trees are carved too: a workspace that holds a hidden path (one that is
    // `$HOME`) must not reach it, nor create it when it does not exist yet.
    rules.extend(carve(&plan.write, &plan.hide).into_iter().map(|path| (path, all)));
    rules.extend(proc_trees(plan).into_iter().map(|path| (path, read)));
    rules.extend(carve(&[PathBuf::from("/dev")], &plan.hide).into_iter().map(|path| (path, read)));
    rules.extend(DEVICES.iter().map(|path| (PathBuf::from(path), device)));
    if plan.layers.namespaces {
        // A private /dev/shm (mounts.rs): POSIX shared memory and semaphores work.
        rules.push((PathBuf::from("/dev/shm"), all));
    }
    for (path, access) in rules {
        if let Some(rule) = rule(&path, access) {
            created = created.add_rule(rule)?;
        }
    }
    let status = created.restrict_self()?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(SetupError::Other(
            "Landlock is not enforced by this kernel; refusing to run the command unconfined"
                .to_owned(),
        ));
    }
    Ok(())
}

/// What of `/proc` a command may read. In its own PID namespace, all of it: the fresh `/proc`
/// shows only the sandbox's processes. Without one, `/proc` shows every process of the machine,
/// and Landlock's ptrace scoping does not keep a process running as root from another root
/// process's `/proc/PID/environ` (tried on Linux 6.18); so only the entries that are no
/// process's are readable, and `/proc/self` as it is now — the command's own directory, since
/// `exec` keeps the pid.
fn proc_trees(plan: &Plan) -> Vec<PathBuf> {
    if plan.layers.namespaces {
        return vec![PathBuf::from("/proc")];
    }
    let mut trees = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let is_symlink = entry.file_type().is_ok_and(|kind| kind.is_symlink());
            let name = entry.file_name();
            let is_process = name.to_string_lossy().bytes().all(|byte| byte.is_ascii_digit());
            if !is_symlink && !is_process {
                trees.push(entry.path());
            }
        }
    }
    trees.push(PathBuf::from("/proc/self"));
    trees
}

/// A rule for `path` with the rights a file or directory can carry; `None` when it does not
/// exist.
fn rule(path: &Path, access: BitFlags<AccessFs>) -> Option<PathBeneath<PathFd>> {
    let metadata = std::fs::metadata(path).ok()?;
    let descriptor = PathFd::new(path).ok()?;
    let access = if metadata.is_dir() { access } else { access & AccessFs::from_file(TARGET) };
    Some(PathBeneath::new(descriptor, access))
}

/// Whether Landlock works here: this (probe) process restricts itself and reads back the ABI.
pub(super) fn probe() -> Availability {
    let restricted = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|ruleset| ruleset.create())
        .and_then(|created| created.restrict_self());
    match restricted {
        Ok(status) => match status.landlock {
            LandlockStatus::Available { effective_abi, kernel_abi } => {
                let abi =
                    kernel_abi.map_or_else(|| effective_abi.to_string(), |abi| abi.to_string());
                Availability::available(format!("Landlock ABI {abi}"))
            }
            LandlockStatus::NotEnabled => Availability::unavailable(
                "Landlock is built into this kernel but not enabled (lsm= boot parameter)"
                    .to_owned(),
            ),
            LandlockStatus::NotImplemented => Availability::unavailable(
                "this kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)"
                    .to_owned(),
            ),
        },
        Err(error) => Availability::unavailable(format!("Landlock refused a ruleset: {error}")),
    }
}

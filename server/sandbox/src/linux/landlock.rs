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

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstat};

use super::SetupError;
use crate::plan::{MAX_CARVE_DEPTH, Plan, carve};
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
    // The trees a command may read or write, a hidden path inside one carved out (writable
    // trees too: a workspace that holds a hidden path — one that is `$HOME` — must not reach
    // it, nor create it when it does not exist yet). Carved through handles, so that an entry
    // swapped for a symlink meanwhile is never granted as its target.
    // A readable tree cannot create anything: only hidden paths that exist are carved from it
    // (`~/.pyenv` stays whole while it has no `credentials`).
    let existing: Vec<PathBuf> =
        plan.hide.iter().filter(|path| path.symlink_metadata().is_ok()).cloned().collect();
    let readable = plan.read.iter().map(|tree| (tree, read, &existing));
    let writable = plan.write.iter().map(|tree| (tree, all, &plan.hide));
    for (tree, access, hidden) in readable.chain(writable) {
        for fd in carve_handles(tree, hidden) {
            created = created.add_rule(rule_for(fd, access))?;
        }
    }
    let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
    rules.extend(proc_trees(plan).into_iter().map(|path| (path, read)));
    if plan.layers.namespaces {
        // The mount layer covers hidden device nodes (`/dev/kmsg`) with `/dev/null`: `/dev`
        // stays listable.
        rules.push((PathBuf::from("/dev"), read));
    } else {
        rules.extend(
            carve(&[PathBuf::from("/dev")], &plan.hide).into_iter().map(|path| (path, read)),
        );
    }
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

/// [`carve`] through handles: `tree` opened, and where a hidden path lies inside it, each entry
/// opened relative to its directory's handle with `O_NOFOLLOW` (a symlink is left out, as it
/// is by [`carve`]). What is returned is what was checked.
fn carve_handles(tree: &Path, hidden: &[PathBuf]) -> Vec<OwnedFd> {
    let mut handles = Vec::new();
    let flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
    if let Ok(fd) = nix::fcntl::open(tree, flags, Mode::empty()) {
        carve_handle(fd, tree, hidden, &mut handles, 0);
    }
    handles
}

fn carve_handle(
    fd: OwnedFd,
    path: &Path,
    hidden: &[PathBuf],
    handles: &mut Vec<OwnedFd>,
    depth: usize,
) {
    if hidden.iter().any(|hidden| path.starts_with(hidden)) {
        return;
    }
    if !hidden.iter().any(|hidden| hidden.starts_with(path)) {
        handles.push(fd);
        return;
    }
    if depth >= MAX_CARVE_DEPTH {
        return;
    }
    // The directory the handle holds, whatever became of its path (listed through the handle:
    // `/proc/self` is not this process's once the PID namespace's `/proc` is mounted).
    let listing = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let Ok(mut directory) = nix::dir::Dir::openat(&fd, ".", listing, Mode::empty()) else {
        return;
    };
    let names: Vec<std::ffi::OsString> = directory
        .iter()
        .flatten()
        .map(|entry| std::ffi::OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string())
        .filter(|name| name != "." && name != "..")
        .collect();
    for name in names {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(child) = openat(&fd, name.as_os_str(), flags, Mode::empty()) else { continue };
        let is_symlink = fstat(&child).is_ok_and(|stat| {
            SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
        });
        if !is_symlink {
            carve_handle(child, &path.join(&name), hidden, handles, depth + 1);
        }
    }
}

/// The rule for an opened file or directory with the rights it can carry.
fn rule_for(fd: OwnedFd, access: BitFlags<AccessFs>) -> PathBeneath<OwnedFd> {
    let is_dir = fstat(&fd).is_ok_and(|stat| {
        SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
    });
    let access = if is_dir { access } else { access & AccessFs::from_file(TARGET) };
    PathBeneath::new(fd, access)
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

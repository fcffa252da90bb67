//! The mount layer, inside the command's own mount namespace (nothing here is seen outside).
//!
//! In order: mounts stop propagating; each tree to cover (without Landlock: homes, `/tmp`...)
//! gets an empty read-only tmpfs, with the plan's readable and writable trees inside it bound
//! back; each hidden path (state and configuration directories, credentials) gets an empty
//! read-only tmpfs, or `/dev/null` for a file; `/dev/shm` gets a private tmpfs; and without
//! Landlock every mount but the writable trees is remounted read-only. `/proc` is mounted by
//! the namespace's init ([`mount_proc`]), which alone lives in the new PID namespace.

use std::ffi::OsString;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::mount::{MsFlags, mount};
use nix::sys::stat::Mode;
use nix::sys::statvfs::{FsFlags, statvfs};

use super::{SetupError, io, sys};
use crate::plan::Plan;

const NONE: Option<&str> = None;

/// Prepares the mount namespace for `plan` (outer, as root of the new user namespace).
pub(super) fn prepare(plan: &Plan) -> Result<(), SetupError> {
    mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE)
        .map_err(sys("making the mounts private"))?;
    let mut keeps: Vec<PathBuf> = plan.read.iter().chain(&plan.write).cloned().collect();
    keeps.sort();
    keeps.dedup();
    for tree in &plan.cover {
        let wholly_kept = keeps.contains(tree) || plan.write.iter().any(|w| tree.starts_with(w));
        if !wholly_kept {
            let inside = keeps.iter().filter(|keep| keep.starts_with(tree) && *keep != tree);
            cover(tree, &outermost(inside.cloned().collect()))?;
        }
    }
    for path in &plan.hide {
        hide(path)?;
    }
    for path in &plan.protect {
        read_only(path)?;
    }
    private_shm(plan.limits.memory)?;
    if !plan.layers.landlock {
        read_only_except(&plan.write)?;
    }
    Ok(())
}

/// The paths not inside another one of them (sorted input).
fn outermost(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut kept: Vec<PathBuf> = Vec::new();
    for path in paths {
        if !kept.iter().any(|outer| path.starts_with(outer)) {
            kept.push(path);
        }
    }
    kept
}

/// Covers `tree` with an empty read-only tmpfs and binds `keeps` (trees inside it, none inside
/// another) back.
fn cover(tree: &Path, keeps: &[PathBuf]) -> Result<(), SetupError> {
    if !tree.is_dir() {
        return Ok(());
    }
    // Opened before the tmpfs hides them; bound back through /proc/self/fd afterwards.
    let mut inside: Vec<(&PathBuf, OwnedFd, bool)> = Vec::new();
    for keep in keeps {
        let Ok(metadata) = std::fs::metadata(keep) else { continue };
        let descriptor = open(keep.as_path(), OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(sys(format!("opening {}", keep.display())))?;
        inside.push((keep, descriptor, metadata.is_dir()));
    }
    let what = format!("covering {}", tree.display());
    mount(
        Some("tmpfs"),
        tree,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=1m"),
    )
    .map_err(sys(what.clone()))?;
    for (keep, descriptor, is_dir) in inside {
        make_mount_point(keep, is_dir)?;
        let source = format!("/proc/self/fd/{}", descriptor.as_raw_fd());
        mount(
            Some(source.as_str()),
            keep.as_path(),
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            NONE,
        )
        .map_err(sys(format!("binding {} back", keep.display())))?;
    }
    remount_read_only_tmpfs(tree).map_err(sys(what))
}

/// Makes an empty path hidden: a directory gets an empty read-only tmpfs, a file `/dev/null`.
fn hide(path: &Path) -> Result<(), SetupError> {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        // Already out of sight (under a covered tree).
        return Ok(());
    };
    let what = format!("hiding {}", path.display());
    if metadata.is_dir() {
        mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755,size=4k"),
        )
        .map_err(sys(what.clone()))?;
        remount_read_only_tmpfs(path).map_err(sys(what))
    } else if metadata.is_file() || !metadata.file_type().is_symlink() {
        // A file or a device node (`/dev/kmsg`): `/dev/null` in its place.
        mount(Some("/dev/null"), path, NONE, MsFlags::MS_BIND, NONE).map_err(sys(what.clone()))?;
        let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
        mount(NONE, path, NONE, flags | locked_flags(path), NONE).map_err(sys(what))
    } else {
        Ok(())
    }
}

/// Makes `path` (inside a writable tree) read-only: bound onto itself, then remounted
/// read-only. A mount point cannot be renamed or removed either, so the path cannot be
/// replaced wholesale.
fn read_only(path: &Path) -> Result<(), SetupError> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    let what = format!("making {} read-only", path.display());
    mount(Some(path), path, NONE, MsFlags::MS_BIND | MsFlags::MS_REC, NONE)
        .map_err(sys(what.clone()))?;
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
    mount(NONE, path, NONE, flags | locked_flags(path), NONE).map_err(sys(what))
}

fn remount_read_only_tmpfs(path: &Path) -> Result<(), Errno> {
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount(NONE, path, NONE, flags, NONE)
}

fn make_mount_point(path: &Path, is_dir: bool) -> Result<(), SetupError> {
    let what = format!("making a mount point for {}", path.display());
    if is_dir {
        std::fs::create_dir_all(path).map_err(io(what))
    } else {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(what.clone()))?;
        }
        std::fs::File::create(path).map(drop).map_err(io(what))
    }
}

/// A private `/dev/shm`: POSIX shared memory of the command, not of the machine, no larger
/// than the memory limit (shared memory is memory no `RLIMIT_DATA` counts).
fn private_shm(memory: u64) -> Result<(), SetupError> {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return Ok(());
    }
    let options = match memory {
        u64::MAX => "mode=1777".to_owned(),
        bytes => format!("mode=1777,size={bytes}"),
    };
    mount(
        Some("tmpfs"),
        shm,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(sys("mounting a private /dev/shm"))
}

/// Remounts every mount read-only except the writable trees (each bound onto itself first, so
/// it is a mount of its own), `/proc` (replaced by init) and the private `/dev/shm`.
fn read_only_except(write: &[PathBuf]) -> Result<(), SetupError> {
    for tree in write {
        mount(Some(tree.as_path()), tree.as_path(), NONE, MsFlags::MS_BIND | MsFlags::MS_REC, NONE)
            .map_err(sys(format!("binding {} onto itself", tree.display())))?;
    }
    let mountinfo =
        std::fs::read("/proc/self/mountinfo").map_err(io("reading /proc/self/mountinfo"))?;
    let mut points = mount_points(&mountinfo);
    points.sort();
    points.dedup();
    for point in points {
        let writable = write.iter().any(|tree| point.starts_with(tree));
        let special = point.starts_with("/proc") || point.starts_with("/dev/shm");
        if writable || special {
            continue;
        }
        let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
        match mount(NONE, point.as_path(), NONE, flags | locked_flags(&point), NONE) {
            // Out of reach (under a covered tree) or no longer a mount point at this path: a
            // covering mount that is itself remounted hides it.
            Ok(()) | Err(Errno::ENOENT | Errno::EINVAL | Errno::EACCES) => {}
            Err(errno) => {
                return Err(sys(format!("making {} read-only", point.display()))(errno));
            }
        }
    }
    Ok(())
}

/// The flags a remount must keep: in a user namespace, a mount's `nosuid`, `nodev`, `noexec`
/// and atime flags are locked, and a remount that drops one is refused.
fn locked_flags(path: &Path) -> MsFlags {
    let Ok(stat) = statvfs(path) else { return MsFlags::empty() };
    let flags = stat.flags();
    let mut kept = MsFlags::empty();
    for (fs_flag, ms_flag) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if flags.contains(fs_flag) {
            kept |= ms_flag;
        }
    }
    kept
}

/// The mount points listed in a `/proc/PID/mountinfo` (field 5, octal escapes decoded).
fn mount_points(mountinfo: &[u8]) -> Vec<PathBuf> {
    mountinfo
        .split(|byte| *byte == b'\n')
        .filter_map(|line| line.split(|byte| *byte == b' ').nth(4))
        .filter(|field| !field.is_empty())
        .map(|field| PathBuf::from(OsString::from_vec(unescape(field))))
        .collect()
}

fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut index = 0;
    while index < field.len() {
        let octal = field.get(index + 1..index + 4).filter(|digits| {
            field[index] == b'\\' && digits.iter().all(|digit| (b'0'..=b'7').contains(digit))
        });
        match octal {
            Some(digits) => {
                let value =
                    digits.iter().fold(0_u32, |value, digit| value * 8 + u32::from(digit - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                index += 4;
            }
            None => {
                out.push(field[index]);
                index += 1;
            }
        }
    }
    out
}

/// Mounts the PID namespace's own `/proc` (init, PID 1 of it).
pub(super) fn mount_proc() -> Result<(), SetupError> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), "/proc", Some("proc"), flags, NONE)
        .map_err(sys("mounting /proc for the PID namespace"))
}

/// Whether init is the only process left in the namespace (read from its `/proc`).
pub(super) fn only_init_left() -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return true };
    !entries.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        name != "1" && name.bytes().all(|byte| byte.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_mount_points_are_unescaped() {
        let info = b"22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                     23 22 0:22 / /home/a\\040b rw - tmpfs tmpfs rw\n";
        assert_eq!(mount_points(info), vec![PathBuf::from("/"), PathBuf::from("/home/a b")]);
    }

    #[test]
    fn only_outermost_trees_are_kept() {
        let paths = vec![PathBuf::from("/a"), PathBuf::from("/a/b"), PathBuf::from("/ab")];
        assert_eq!(outermost(paths), vec![PathBuf::from("/a"), PathBuf::from("/ab")]);
    }
}

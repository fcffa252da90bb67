//! Changing the workspace's files without ever following a symbolic link.
//!
//! The root is opened once; every parent directory is then opened component by component with
//! `openat(O_DIRECTORY | O_NOFOLLOW)` relative to the one before, and the change is made
//! relative to the parent's handle (`unlinkat`, `renameat`, `symlinkat`, a temporary file made
//! with `O_CREAT | O_EXCL | O_NOFOLLOW`). A symbolic link put anywhere on the path — before or
//! during the restore — makes the operation fail (`ELOOP`/`ENOTDIR`); it is never written
//! through. A link at the path itself is replaced as a link (a rename replaces the directory
//! entry, it does not follow it).
//!
//! Every operation is idempotent, so a journal can be replayed after a crash: removing what is
//! gone is done, and rewriting a file rewrites it.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, fchmod, fstat, mkdirat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

use crate::checkpoint::path_of;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How the temporary files of a restore are named (recovery removes those a crash left).
pub(crate) const TEMP_PREFIX: &[u8] = b".dsh-restore-";

/// The workspace root, opened once.
pub(crate) struct Root {
    fd: OwnedFd,
}

fn error_at(errno: Errno, path: &[u8], what: &str) -> io::Error {
    match errno {
        Errno::ELOOP | Errno::ENOTDIR => io::Error::other(format!(
            "{} is a symbolic link or not a directory; dsh never writes through one ({what})",
            path_of(path).display()
        )),
        other => io::Error::from(other),
    }
}

impl Root {
    pub(crate) fn open(root: &Path) -> io::Result<Root> {
        let fd = nix::fcntl::open(
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Root { fd })
    }

    /// Opens the parent directory of `path` (components joined by `/`), never following a
    /// link; creates missing directories if `create`. `Ok(None)` (only without `create`): a
    /// parent is missing, a file or a link.
    fn parent<'p>(&self, path: &'p [u8], create: bool) -> io::Result<Option<(OwnedFd, &'p [u8])>> {
        let mut components: Vec<&[u8]> = path.split(|&byte| byte == b'/').collect();
        let Some(name) = components.pop() else {
            return Err(io::Error::other("empty path"));
        };
        let mut dir = self.fd.try_clone()?;
        let mut walked = 0;
        for component in components {
            walked += component.len() + usize::from(walked > 0);
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let opened = match openat(&dir, component, flags, Mode::empty()) {
                Err(Errno::ENOENT) if create => {
                    let _writable = Writable::ensure(&dir)?;
                    match mkdirat(&dir, component, Mode::from_bits_truncate(0o777)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(errno) => return Err(error_at(errno, &path[..walked], "creating it")),
                    }
                    openat(&dir, component, flags, Mode::empty())
                }
                // Removing: a path reached only through a link, or below a file, is not in
                // the workspace's tree of real directories; nothing to remove there.
                Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) if !create => return Ok(None),
                other => other,
            };
            dir = opened.map_err(|errno| error_at(errno, &path[..walked], "opening it"))?;
        }
        Ok(Some((dir, name)))
    }

    /// Removes the file or symbolic link at `path` (not a directory: one there now was made
    /// by a later action of the same restore). Gone already is done.
    pub(crate) fn remove(&self, path: &[u8]) -> io::Result<()> {
        let Some((parent, name)) = self.parent(path, false)? else { return Ok(()) };
        let _writable = Writable::ensure(&parent)?;
        match unlinkat(&parent, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) | Err(Errno::EISDIR) => Ok(()),
            Err(Errno::EPERM) if is_dir_at(&parent, name) => Ok(()),
            Err(errno) => Err(error_at(errno, path, "removing it")),
        }
    }

    /// Removes the directory at `path` if it is empty; `Ok(false)` if it is not (or is gone,
    /// or is not a directory).
    pub(crate) fn remove_dir_if_empty(&self, path: &[u8]) -> io::Result<bool> {
        let Some((parent, name)) = self.parent(path, false)? else { return Ok(false) };
        let _writable = Writable::ensure(&parent)?;
        match unlinkat(&parent, name, UnlinkatFlags::RemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ENOTEMPTY | Errno::EEXIST) => Ok(false),
            Err(errno) => Err(error_at(errno, path, "removing the directory")),
        }
    }

    /// Writes `content` with permission bits `mode` at `path`: a temporary file in the same
    /// directory, synced, renamed over whatever is there (a link is replaced, not followed).
    pub(crate) fn write_file(&self, path: &[u8], content: &[u8], mode: u32) -> io::Result<()> {
        self.replace(path, |parent, temp| {
            let flags = OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            let fd = openat(parent, temp, flags, Mode::from_bits_truncate(0o600))?;
            let mut file = File::from(fd);
            file.write_all(content)?;
            fchmod(&file, Mode::from_bits_truncate(mode & 0o7777))?;
            file.sync_data()?;
            Ok(())
        })
    }

    /// Makes `path` a symbolic link to `target` (created beside it, renamed over it).
    pub(crate) fn write_symlink(&self, path: &[u8], target: &[u8]) -> io::Result<()> {
        self.replace(path, |parent, temp| Ok(symlinkat(target, parent, temp)?))
    }

    fn replace(
        &self,
        path: &[u8],
        make: impl FnOnce(&OwnedFd, &[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let Some((parent, name)) = self.parent(path, true)? else {
            return Err(io::Error::other("parent directory missing"));
        };
        let writable = Writable::ensure(&parent)?;
        let temp = format!(
            "{}{}-{}",
            String::from_utf8_lossy(TEMP_PREFIX),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let temp = temp.as_bytes();
        if let Err(error) = make(&parent, temp) {
            let _ = unlinkat(&parent, temp, UnlinkatFlags::NoRemoveDir);
            return Err(error);
        }
        if let Err(errno) = renameat(&parent, temp, &parent, name) {
            let _ = unlinkat(&parent, temp, UnlinkatFlags::NoRemoveDir);
            return Err(match errno {
                Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST => io::Error::other(format!(
                    "{} is a directory that is not empty",
                    path_of(path).display()
                )),
                other => io::Error::from(other),
            });
        }
        drop(writable);
        Ok(nix::unistd::fsync(&parent)?)
    }
}

fn is_dir_at(parent: &OwnedFd, name: &[u8]) -> bool {
    nix::sys::stat::fstatat(parent, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| stat.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR)
}

/// A read-only directory made writable by its owner for the time of a change, its mode put
/// back when dropped (a restore replaces files in read-only directories too).
struct Writable<'a> {
    dir: &'a OwnedFd,
    restore: Option<Mode>,
}

impl<'a> Writable<'a> {
    fn ensure(dir: &'a OwnedFd) -> io::Result<Writable<'a>> {
        let mode = fstat(dir)?.st_mode & 0o7777;
        if mode & 0o300 == 0o300 {
            return Ok(Writable { dir, restore: None });
        }
        fchmod(dir, Mode::from_bits_truncate(mode | 0o700))?;
        Ok(Writable { dir, restore: Some(Mode::from_bits_truncate(mode)) })
    }
}

impl Drop for Writable<'_> {
    fn drop(&mut self) {
        if let Some(mode) = self.restore {
            let _ = fchmod(self.dir, mode);
        }
    }
}

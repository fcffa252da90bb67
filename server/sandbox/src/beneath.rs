//! Files opened beneath a directory handle, never by re-resolving a path string: what the file
//! tools (and every read of a file a command can replace) go through.
//!
//! A path checked and then opened by its string can be moved between the check and the use: a
//! command that swaps a directory and a symlink to `/` in a loop wins that race often enough.
//! Here the root is opened once ([`Beneath::open`]) and every path is resolved by the kernel
//! relative to that handle with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: a `..`,
//! an absolute symlink or a symlink whose target leaves the root fails (`EXDEV`) however the
//! tree changes during the resolution (the kernel retries or refuses a lookup raced by a
//! rename). A new file is created by `openat` on its parent's handle with `O_EXCL |
//! O_NOFOLLOW`, so a link put in its place is never written through.
//!
//! Hidden paths (dsh's state and configuration, the user's secret stores) are refused twice:
//! by the path asked for, and by where the opened handle really is (`/proc/self/fd`), so a
//! symlink inside the root that leads into a hidden directory is refused too.
//!
//! Files are opened with `O_NONBLOCK` and checked to be regular before a byte is read: a FIFO
//! or a device never blocks or floods the reader.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, mkdirat};

/// Why a path was refused or could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// The path, or a symlink on it, leads outside the root.
    #[error("it leads outside the workspace (through `..`, an absolute path or a symlink)")]
    Escapes,
    /// The path is, or leads into, a hidden path.
    #[error("it is private to dsh or a store of secrets ({0}); tools never touch it")]
    Hidden(PathBuf),
    /// Nothing is there.
    #[error("not found")]
    NotFound,
    /// A symlink whose target does not exist (writing through it would create the target).
    #[error("it is a dangling symlink; refusing to follow it")]
    Dangling,
    /// Not a regular file where one is needed.
    #[error("it is not a regular file")]
    NotRegular,
    /// Not a directory where one is needed.
    #[error("it is not a directory")]
    NotDirectory,
    /// Larger than the reader accepts.
    #[error("it is larger than {0} bytes")]
    TooLarge(u64),
    /// Anything else the system said.
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl BeneathError {
    fn from_errno(errno: Errno) -> BeneathError {
        match errno {
            Errno::EXDEV => BeneathError::Escapes,
            Errno::ENOENT => BeneathError::NotFound,
            Errno::ENOTDIR => BeneathError::NotDirectory,
            other => BeneathError::Io(io::Error::from(other)),
        }
    }
}

/// What a path is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file of this many bytes.
    File(u64),
    /// A directory.
    Dir,
    /// Anything else (FIFO, socket, device).
    Other,
}

/// An entry of a directory, as listed (its type not followed through symlinks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name.
    pub name: OsString,
    /// A directory.
    pub is_dir: bool,
    /// A symbolic link.
    pub is_symlink: bool,
}

/// A directory every path is resolved beneath.
#[derive(Debug)]
pub struct Beneath {
    root: PathBuf,
    dir: OwnedFd,
    hidden: Vec<PathBuf>,
}

/// How often a lookup raced by a rename (`EAGAIN`) is tried again.
const RETRIES: usize = 16;

impl Beneath {
    /// Opens `root` (made canonical) as the handle; `hidden` are absolute paths never opened
    /// (they may lie inside the root or not, exist or not).
    pub fn open(root: &Path, hidden: Vec<PathBuf>) -> io::Result<Beneath> {
        let root = std::fs::canonicalize(root)?;
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let dir =
            nix::fcntl::open(root.as_path(), flags, Mode::empty()).map_err(io::Error::from)?;
        Ok(Beneath { root, dir, hidden })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether `path` (absolute) is or lies inside a hidden path.
    pub fn hidden_at(&self, path: &Path) -> Option<&Path> {
        self.hidden.iter().find(|hidden| path.starts_with(hidden)).map(PathBuf::as_path)
    }

    /// What `relative` is (symlinks followed beneath the root).
    pub fn kind(&self, relative: &Path) -> Result<Kind, BeneathError> {
        let fd = self.resolve(relative, OFlag::O_PATH)?;
        Ok(kind_of(&fstat(&fd).map_err(BeneathError::from_errno)?))
    }

    /// Opens the regular file `relative` for reading, without blocking on a FIFO or device.
    pub fn open_file(&self, relative: &Path) -> Result<File, BeneathError> {
        let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
        let fd = self.resolve(relative, flags)?;
        let stat = fstat(&fd).map_err(BeneathError::from_errno)?;
        match kind_of(&stat) {
            Kind::File(_) => Ok(File::from(fd)),
            Kind::Dir => Err(BeneathError::NotRegular),
            Kind::Other => Err(BeneathError::NotRegular),
        }
    }

    /// The whole regular file `relative`, refused past `cap` bytes.
    pub fn read(&self, relative: &Path, cap: u64) -> Result<Vec<u8>, BeneathError> {
        read_capped(self.open_file(relative)?, cap)
    }

    /// The entries of the directory `relative`, unsorted.
    pub fn list(&self, relative: &Path) -> Result<Vec<Entry>, BeneathError> {
        let fd = self.resolve(relative, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
        // The handle's own directory, whatever happened to the path since: /proc/self/fd/N
        // names the open directory itself.
        let listing = std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        let mut entries = Vec::new();
        for entry in listing {
            let entry = entry?;
            let kind = entry.file_type()?;
            entries.push(Entry {
                name: entry.file_name(),
                is_dir: kind.is_dir(),
                is_symlink: kind.is_symlink(),
            });
        }
        Ok(entries)
    }

    /// Creates or replaces the regular file `relative` with `content`, creating missing parent
    /// directories. Returns whether it existed.
    pub fn write(&self, relative: &Path, content: &[u8]) -> Result<bool, BeneathError> {
        let relative = clean(relative)?;
        self.refuse_hidden(&self.root.join(&relative))?;
        let (Some(parent), Some(name)) = (relative.parent(), relative.file_name()) else {
            return Err(BeneathError::NotRegular);
        };
        let parent = self.create_dirs(parent)?;
        // Where the file would really be (the parent may be reached through a link to a
        // hidden directory): checked before anything is created there.
        self.refuse_hidden_child(&parent, name)?;
        let write_flags = OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
        let (fd, existed) =
            match openat(&parent, name, write_flags | OFlag::O_NOFOLLOW, Mode::empty()) {
                Ok(fd) => (fd, true),
                Err(Errno::ENOENT) => {
                    let create = write_flags | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW;
                    let mode = Mode::from_bits_truncate(0o644);
                    match openat(&parent, name, create, mode) {
                        Ok(fd) => (fd, false),
                        // Something appeared there meanwhile (a dangling link among others).
                        Err(Errno::EEXIST) => return Err(BeneathError::Dangling),
                        Err(errno) => return Err(BeneathError::from_errno(errno)),
                    }
                }
                // The last component is a symlink: written through only while its target stays
                // beneath the root and exists.
                Err(Errno::ELOOP) => match self.resolve(&relative, write_flags) {
                    Ok(fd) => (fd, true),
                    Err(BeneathError::NotFound) => return Err(BeneathError::Dangling),
                    Err(error) => return Err(error),
                },
                Err(errno) => return Err(BeneathError::from_errno(errno)),
            };
        let stat = fstat(&fd).map_err(BeneathError::from_errno)?;
        if !matches!(kind_of(&stat), Kind::File(_)) {
            return Err(BeneathError::NotRegular);
        }
        self.refuse_hidden_fd(&fd)?;
        let mut file = File::from(fd);
        file.set_len(0)?;
        file.write_all(content)?;
        Ok(existed)
    }

    /// Opens `relative` beneath the root with `flags` (plus `O_CLOEXEC`).
    fn resolve(&self, relative: &Path, flags: OFlag) -> Result<OwnedFd, BeneathError> {
        let relative = clean(relative)?;
        self.refuse_hidden(&self.root.join(&relative))?;
        let path: &Path = if relative.as_os_str().is_empty() { Path::new(".") } else { &relative };
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let mut tries = 0;
        let fd = loop {
            match openat2(&self.dir, path, how) {
                Ok(fd) => break fd,
                Err(Errno::EAGAIN) if tries < RETRIES => tries += 1,
                // An absolute symlink, which the kernel refuses beneath a root even when it
                // points inside — or no `openat2` at all (Linux before 5.6, a container's
                // seccomp profile): walked one component at a time instead.
                Err(Errno::EXDEV | Errno::ENOSYS | Errno::EPERM) => {
                    break self.walk(path, flags)?;
                }
                Err(Errno::ENOENT) => {
                    // A dangling symlink exists but does not resolve.
                    let nofollow = OpenHow::new()
                        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
                        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
                    return Err(match openat2(&self.dir, path, nofollow) {
                        Ok(_) => BeneathError::Dangling,
                        Err(_) => BeneathError::NotFound,
                    });
                }
                Err(errno) => return Err(BeneathError::from_errno(errno)),
            }
        };
        self.refuse_hidden_fd(&fd)?;
        Ok(fd)
    }

    /// Resolves `relative` one component at a time, each opened with `O_NOFOLLOW` relative to
    /// the handle of the directory before it: a symlink is read and its target walked in turn
    /// (an absolute one only when it points inside the root, from the root's handle), and `..`
    /// goes back to the handle it came from, never above the root. As race-free as `openat2`:
    /// no step re-resolves a path string from the top.
    fn walk(&self, relative: &Path, flags: OFlag) -> Result<OwnedFd, BeneathError> {
        const MAX_LINKS: usize = 40;
        let mut pending: Vec<OsString> =
            relative.iter().rev().map(std::ffi::OsStr::to_os_string).collect();
        let mut stack: Vec<OwnedFd> = vec![self.dir.try_clone()?];
        let (mut links, mut through_link) = (0, false);
        while let Some(name) = pending.pop() {
            if name == "." || name.is_empty() {
                continue;
            }
            if name == ".." {
                if stack.len() == 1 {
                    return Err(BeneathError::Escapes);
                }
                stack.pop();
                continue;
            }
            let last = pending.is_empty();
            let step = if last { flags } else { OFlag::O_PATH | OFlag::O_DIRECTORY };
            let Some(current) = stack.last() else { return Err(BeneathError::Escapes) };
            let opened = openat(
                current,
                name.as_os_str(),
                step | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            );
            let is_link = match &opened {
                Ok(fd) => fstat(fd).is_ok_and(|stat| {
                    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
                }),
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    nix::fcntl::readlinkat(current, name.as_os_str()).is_ok()
                }
                Err(_) => false,
            };
            if !is_link {
                let fd = opened.map_err(|errno| match errno {
                    Errno::ENOENT if through_link => BeneathError::Dangling,
                    errno => BeneathError::from_errno(errno),
                })?;
                if last {
                    return Ok(fd);
                }
                stack.push(fd);
                through_link = false;
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(BeneathError::Io(io::Error::from(Errno::ELOOP)));
            }
            let target = PathBuf::from(
                nix::fcntl::readlinkat(current, name.as_os_str())
                    .map_err(BeneathError::from_errno)?,
            );
            let rest = if target.is_absolute() {
                let Ok(inside) = target.strip_prefix(&self.root) else {
                    // Whether the outside target exists only picks the message.
                    return Err(match std::fs::symlink_metadata(&target) {
                        Err(error) if error.kind() == io::ErrorKind::NotFound => {
                            BeneathError::Dangling
                        }
                        _ => BeneathError::Escapes,
                    });
                };
                stack.truncate(1);
                inside.to_path_buf()
            } else {
                target
            };
            pending.extend(rest.iter().rev().map(std::ffi::OsStr::to_os_string));
            through_link = true;
        }
        // Nothing left to walk: the directory reached, opened as asked.
        let Some(current) = stack.last() else { return Err(BeneathError::Escapes) };
        openat(current, ".", flags | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(BeneathError::from_errno)
    }

    /// Opens the directory `relative`, creating what is missing of it, one component at a
    /// time, each beneath the root.
    fn create_dirs(&self, relative: &Path) -> Result<OwnedFd, BeneathError> {
        let directory = OFlag::O_PATH | OFlag::O_DIRECTORY;
        let mut current = self.resolve(Path::new(""), directory)?;
        let mut walked = PathBuf::new();
        for component in relative.components() {
            walked.push(component);
            current = match self.resolve(&walked, directory) {
                Ok(fd) => fd,
                Err(BeneathError::NotFound) => {
                    self.refuse_hidden_child(&current, component.as_os_str())?;
                    match mkdirat(&current, component.as_os_str(), Mode::from_bits_truncate(0o755))
                    {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(errno) => return Err(BeneathError::from_errno(errno)),
                    }
                    self.resolve(&walked, directory)?
                }
                Err(error) => return Err(error),
            };
        }
        Ok(current)
    }

    fn refuse_hidden(&self, path: &Path) -> Result<(), BeneathError> {
        match self.hidden_at(path) {
            Some(hidden) => Err(BeneathError::Hidden(hidden.to_path_buf())),
            None => Ok(()),
        }
    }

    /// Where a handle really is (`/proc/self/fd`); without `/proc` nothing can be vouched
    /// for, so nothing is opened (fails closed).
    fn real_path(fd: &OwnedFd) -> Result<PathBuf, BeneathError> {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|error| {
            BeneathError::Io(io::Error::new(
                error.kind(),
                format!("cannot tell where an opened file is (is /proc mounted?): {error}"),
            ))
        })
    }

    /// Refuses to create `name` in the directory `parent` when that is a hidden path.
    fn refuse_hidden_child(
        &self,
        parent: &OwnedFd,
        name: &std::ffi::OsStr,
    ) -> Result<(), BeneathError> {
        self.refuse_hidden(&Self::real_path(parent)?.join(name))
    }

    /// Refuses a handle that is really in a hidden path, or — defence in depth — not under
    /// the root at all.
    fn refuse_hidden_fd(&self, fd: &OwnedFd) -> Result<(), BeneathError> {
        let real = Self::real_path(fd)?;
        self.refuse_hidden(&real)?;
        if !real.starts_with(&self.root) {
            return Err(BeneathError::Escapes);
        }
        Ok(())
    }
}

/// Reads a regular file at `path` (absolute, no root) without blocking, refusing anything
/// that is not a regular file or is larger than `cap`: for files a command could replace by a
/// FIFO or a link to a device (configuration, instruction files).
pub fn read_regular(path: &Path, cap: u64) -> Result<Vec<u8>, BeneathError> {
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(path, flags, Mode::empty()).map_err(BeneathError::from_errno)?;
    let stat = fstat(&fd).map_err(BeneathError::from_errno)?;
    if !matches!(kind_of(&stat), Kind::File(_)) {
        return Err(BeneathError::NotRegular);
    }
    read_capped(File::from(fd), cap)
}

fn read_capped(file: File, cap: u64) -> Result<Vec<u8>, BeneathError> {
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(BeneathError::TooLarge(cap));
    }
    Ok(bytes)
}

fn kind_of(stat: &FileStat) -> Kind {
    let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if format == SFlag::S_IFREG {
        Kind::File(u64::try_from(stat.st_size).unwrap_or(0))
    } else if format == SFlag::S_IFDIR {
        Kind::Dir
    } else {
        Kind::Other
    }
}

/// A relative path of plain components: `.` dropped, anything else (`..`, a root) refused —
/// callers fold `..` lexically before, so one left here is an escape.
fn clean(relative: &Path) -> Result<PathBuf, BeneathError> {
    let mut cleaned = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => cleaned.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(BeneathError::Escapes);
            }
        }
    }
    Ok(cleaned)
}

#[cfg(test)]
mod tests;

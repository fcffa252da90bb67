//! Workspace confinement: every path a tool touches is resolved here, and nothing outside the
//! workspace root — nor any hidden path inside it — gets through.
//!
//! Resolution is lexical first (`.` and `..` are folded, so a `..` can never reach above the
//! filesystem root or sneak past the check), giving a path relative to the root. Every open
//! then goes through `dsh_sandbox::beneath::Beneath`, a handle on the root: the kernel resolves
//! the relative path beneath it (`openat2` with `RESOLVE_BENEATH`), following symlinks only
//! while they stay inside, so a command that swaps a directory for a symlink in a loop cannot
//! move a read or a write outside, however the race falls. Hidden paths (dsh's state and
//! configuration, the user's secret stores) are refused whether they exist yet or not, and
//! also when a symlink inside the workspace leads into one.

use std::fs::File;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use dsh_sandbox::beneath::{Beneath, BeneathError, Entry, Kind};

/// A workspace root that confines tool paths, opened once as a directory handle.
#[derive(Clone, Debug)]
pub struct Workspace {
    beneath: Arc<Beneath>,
}

/// A path that passed confinement.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// The path as shown: the canonical path when it exists inside the root, the lexical one
    /// otherwise.
    pub path: PathBuf,
    /// The path relative to the root, as opened beneath it.
    pub relative: PathBuf,
    /// What is there (`None`: nothing yet).
    pub kind: Option<Kind>,
}

impl Resolved {
    /// Whether something is there.
    pub fn exists(&self) -> bool {
        self.kind.is_some()
    }
}

/// Why a path was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path `{0}` is outside the workspace; only paths inside the workspace are allowed")]
    Outside(String),
    #[error("path `{0}` goes through a dangling symlink; refusing to follow it")]
    DanglingSymlink(String),
    #[error("path `{path}` is refused: {source}")]
    Refused { path: String, source: BeneathError },
    #[error("cannot resolve path `{path}`: {source}")]
    Io { path: String, source: io::Error },
}

impl PathError {
    /// The error for `argument` from what the handle said.
    pub fn from_beneath(argument: &str, error: BeneathError) -> PathError {
        match error {
            BeneathError::Escapes => PathError::Outside(argument.to_owned()),
            BeneathError::Dangling => PathError::DanglingSymlink(argument.to_owned()),
            BeneathError::Io(source) => PathError::Io { path: argument.to_owned(), source },
            source => PathError::Refused { path: argument.to_owned(), source },
        }
    }
}

impl Workspace {
    /// Opens a workspace at `root`, which must be a directory; the root is canonicalized
    /// (symlinks resolved) and held open as the handle every path is resolved beneath.
    pub fn new(root: &Path) -> io::Result<Workspace> {
        Workspace::with_hidden(root, Vec::new())
    }

    /// Like [`Workspace::new`], refusing every path in or under `hidden` (absolute; existing
    /// or not).
    pub fn with_hidden(root: &Path, hidden: Vec<PathBuf>) -> io::Result<Workspace> {
        let canonical = std::fs::canonicalize(root)?;
        if !canonical.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("workspace root {} is not a directory", canonical.display()),
            ));
        }
        Ok(Workspace { beneath: Arc::new(Beneath::open(&canonical, hidden)?) })
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        self.beneath.root()
    }

    /// The handle paths are resolved beneath.
    pub(crate) fn beneath(&self) -> &Beneath {
        &self.beneath
    }

    /// Resolves a path argument (relative to the root, or absolute) and checks that it stays
    /// inside the workspace and out of hidden paths; what is there is looked up beneath the
    /// root's handle.
    pub(crate) fn resolve(&self, argument: &str) -> Result<Resolved, PathError> {
        if argument.is_empty() {
            return Err(PathError::Empty);
        }
        let root = self.root();
        let normalized = normalize(&root.join(argument));
        let Ok(relative) = normalized.strip_prefix(root).map(Path::to_path_buf) else {
            return Err(PathError::Outside(argument.to_owned()));
        };
        let kind = match self.beneath.kind(&relative) {
            Ok(kind) => Some(kind),
            Err(BeneathError::NotFound) => None,
            Err(error) => return Err(PathError::from_beneath(argument, error)),
        };
        // For display only (never opened by this string): a link inside shows as its target.
        let canonical = dsh_sandbox::plan::canonical_prefix(&normalized);
        let path = if canonical.starts_with(root) { canonical } else { normalized };
        Ok(Resolved { path, relative, kind })
    }

    /// Opens a resolved regular file for reading, beneath the root.
    pub(crate) fn open_file(&self, resolved: &Resolved, argument: &str) -> Result<File, PathError> {
        self.beneath
            .open_file(&resolved.relative)
            .map_err(|error| PathError::from_beneath(argument, error))
    }

    /// The entries of a resolved directory, beneath the root.
    pub(crate) fn list(
        &self,
        resolved: &Resolved,
        argument: &str,
    ) -> Result<Vec<Entry>, PathError> {
        self.beneath
            .list(&resolved.relative)
            .map_err(|error| PathError::from_beneath(argument, error))
    }

    /// Creates or replaces a resolved file; whether it existed.
    pub(crate) fn write(
        &self,
        resolved: &Resolved,
        argument: &str,
        content: &[u8],
    ) -> Result<bool, PathError> {
        self.beneath
            .write(&resolved.relative, content)
            .map_err(|error| PathError::from_beneath(argument, error))
    }

    /// Renders a path inside the workspace relative to the root with `/` separators (`.` for
    /// the root itself).
    pub(crate) fn display(&self, path: &Path) -> String {
        match path.strip_prefix(self.root()) {
            Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
            Ok(relative) => relative
                .components()
                .map(|component| component.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            Err(_) => path.display().to_string(),
        }
    }
}

/// Folds `.` and `..` lexically in an absolute path; `..` at the filesystem root stays there.
fn normalize(path: &Path) -> PathBuf {
    let mut normalized = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => {
                normalized.push(component.as_os_str());
            }
            Component::CurDir => {}
            Component::ParentDir => {
                normalized.pop();
            }
        }
    }
    normalized
}

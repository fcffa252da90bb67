//! Workspace confinement: every path a tool touches is resolved here, and nothing outside the
//! canonical workspace root gets through.
//!
//! Resolution is lexical first (`.` and `..` are folded, so a `..` can never reach above the
//! filesystem root or sneak past the check), then physical: the deepest existing ancestor of
//! the path is canonicalized — which follows every symlink in it, including the final component —
//! and must lie inside the root. The part below that ancestor does not exist yet, so it holds no
//! symlinks. Tools then operate on the returned canonical path, the one that was checked.
//!
//! This does not defend against a concurrent process swapping a directory for a symlink between
//! the check and the use (a time-of-check/time-of-use race); the threat here is a model asking
//! for paths outside the workspace, not a hostile process racing the daemon.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// A canonicalized workspace root that confines tool paths.
#[derive(Clone, Debug)]
pub struct Workspace {
    root: Arc<Path>,
}

/// A path that passed confinement.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// The canonical path (the existing part canonicalized, the rest appended).
    pub path: PathBuf,
    /// Whether the whole path exists.
    pub exists: bool,
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
    #[error("cannot resolve path `{path}`: {source}")]
    Io { path: String, source: io::Error },
}

impl Workspace {
    /// Opens a workspace at `root`, which must exist; the root is canonicalized (symlinks
    /// resolved) so that every later check compares canonical paths.
    pub fn new(root: &Path) -> io::Result<Workspace> {
        let root = std::fs::canonicalize(root)?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("workspace root {} is not a directory", root.display()),
            ));
        }
        Ok(Workspace { root: Arc::from(root) })
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path argument (relative to the root, or absolute) and checks that it stays
    /// inside the workspace, following symlinks in the existing part of the path.
    pub(crate) fn resolve(&self, argument: &str) -> Result<Resolved, PathError> {
        if argument.is_empty() {
            return Err(PathError::Empty);
        }
        let outside = || PathError::Outside(argument.to_owned());
        let joined = self.root.join(argument);
        let normalized = normalize(&joined);

        // Walk up to the deepest ancestor that exists and canonicalize it. Everything below it
        // is missing, hence contains no symlinks, and is appended verbatim.
        let mut existing = normalized.as_path();
        let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
        let canonical = loop {
            match std::fs::canonicalize(existing) {
                Ok(canonical) => break canonical,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    // A dangling symlink exists but does not canonicalize; writing through it
                    // would create its target wherever it points.
                    if std::fs::symlink_metadata(existing).is_ok() {
                        return Err(PathError::DanglingSymlink(argument.to_owned()));
                    }
                    match (existing.parent(), existing.file_name()) {
                        (Some(parent), Some(name)) => {
                            missing.push(name);
                            existing = parent;
                        }
                        _ => return Err(outside()),
                    }
                }
                Err(source) => {
                    return Err(PathError::Io { path: argument.to_owned(), source });
                }
            }
        };
        if !canonical.starts_with(&self.root) {
            return Err(outside());
        }
        let exists = missing.is_empty();
        let mut path = canonical;
        for name in missing.iter().rev() {
            path.push(name);
        }
        Ok(Resolved { path, exists })
    }

    /// Renders a path inside the workspace relative to the root with `/` separators (`.` for
    /// the root itself).
    pub(crate) fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
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

//! Watching the files the loaded sessions of a workspace depend on — the instruction files, the
//! workspace's configuration file and every file an agent read or wrote — so clients hear of a
//! change at once (`workspace/changed`, to `daemon/subscribe` subscribers).
//!
//! Only directories holding such files are watched, each non-recursively: never a whole tree.
//! The watch is a convenience for clients, not what the model is told: before each step the loop
//! compares the files itself (agent crate, `seen.rs`; the instruction check), so a watch the
//! system refuses (its inotify limit reached) degrades to a warning in `daemon/status` and
//! nothing is missed in the log. Changes whose content equals what an agent last saw (its own
//! writes) are not announced.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use dsh_protocol::WorkspaceChanged;
use dsh_session::{ChangeKind, FileChange};
use tokio::sync::broadcast;

/// How long file events settle before they are looked at.
const DEBOUNCE: Duration = Duration::from_millis(150);
/// Versions of one file remembered as an agent's own between two reconciliations.
const KNOWN_PER_FILE: usize = 16;
/// Files larger than this are announced without hashing (as edited).
const HASH_CAP_BYTES: u64 = 8 * 1024 * 1024;

/// One file of interest.
#[derive(Clone, Debug)]
pub(crate) struct Interest {
    /// The workspace root.
    pub workspace: PathBuf,
    /// The path relative to it, as the log names it.
    pub relative: String,
    /// The hashes the workspace's sessions last saw of it (`None`: gone); empty for files
    /// no agent read (instructions, configuration).
    pub known: Vec<Option<String>>,
}

struct Inner {
    debouncer: notify_debouncer_full::Debouncer<
        notify::RecommendedWatcher,
        notify_debouncer_full::RecommendedCache,
    >,
    dirs: HashSet<PathBuf>,
}

/// The daemon's file watch.
pub(crate) struct FileWatch {
    inner: Mutex<Option<Inner>>,
    /// Absolute path → what it is to whom.
    interest: Mutex<HashMap<PathBuf, Interest>>,
    /// The state last announced (or known) per file, so a change is announced once.
    announced: Mutex<HashMap<PathBuf, Seen>>,
    changes: broadcast::Sender<WorkspaceChanged>,
    /// Why watching is degraded, when it is.
    degraded: Mutex<Option<String>>,
    /// Debug builds: pretend the system allows this many watched directories (tests).
    limit: Option<usize>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FileWatch {
    /// A watch with its debouncer running (or degraded, when the system refuses one).
    pub(crate) fn start() -> Arc<FileWatch> {
        let limit = if cfg!(debug_assertions) {
            std::env::var("DSH_DEBUG_WATCH_LIMIT").ok().and_then(|v| v.parse().ok())
        } else {
            None
        };
        let watch = Arc::new(FileWatch {
            inner: Mutex::new(None),
            interest: Mutex::default(),
            announced: Mutex::default(),
            changes: broadcast::channel(64).0,
            degraded: Mutex::new(None),
            limit,
        });
        let weak: Weak<FileWatch> = Arc::downgrade(&watch);
        let handler = move |result: notify_debouncer_full::DebounceEventResult| {
            let Some(watch) = weak.upgrade() else { return };
            match result {
                Ok(events) => {
                    let paths: HashSet<PathBuf> =
                        events.into_iter().flat_map(|event| event.event.paths).collect();
                    watch.changed(paths);
                }
                Err(errors) => {
                    for error in errors {
                        tracing::warn!("file watch: {error}");
                    }
                }
            }
        };
        match notify_debouncer_full::new_debouncer(DEBOUNCE, None, handler) {
            Ok(debouncer) => {
                *lock(&watch.inner) = Some(Inner { debouncer, dirs: HashSet::new() });
            }
            Err(error) => watch.degrade(format!("files are not watched ({error})")),
        }
        watch
    }

    /// `workspace/changed` notices.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<WorkspaceChanged> {
        self.changes.subscribe()
    }

    /// Why watching is degraded, for `daemon/status`.
    pub(crate) fn degraded(&self) -> Option<String> {
        lock(&self.degraded).clone()
    }

    fn degrade(&self, why: String) {
        let mut degraded = lock(&self.degraded);
        if degraded.is_none() {
            tracing::warn!("{why}");
            *degraded = Some(why);
        }
    }

    /// Replaces what is watched in `workspace` with `files` (absolute path → interest).
    pub(crate) fn set_workspace(&self, workspace: &Path, files: HashMap<PathBuf, Interest>) {
        let dirs: HashSet<PathBuf> =
            files.keys().filter_map(|path| path.parent().map(Path::to_path_buf)).collect();
        {
            let mut interest = lock(&self.interest);
            interest.retain(|_, entry| entry.workspace != workspace);
            let mut announced = lock(&self.announced);
            for (path, entry) in &files {
                // What the sessions saw is what is known: a later change differs from it.
                if let Some(Some(sha)) = entry.known.last() {
                    announced.entry(path.clone()).or_insert_with(|| Seen::Content(sha.clone()));
                }
            }
            interest.extend(files);
            // Files of interest no more are forgotten, and so are their directories.
            announced.retain(|path, _| interest.contains_key(path));
            let needed: HashSet<&Path> = interest.keys().filter_map(|path| path.parent()).collect();
            let mut inner = lock(&self.inner);
            if let Some(inner) = inner.as_mut() {
                let stale: Vec<PathBuf> = inner
                    .dirs
                    .iter()
                    .filter(|dir| !needed.contains(dir.as_path()))
                    .cloned()
                    .collect();
                for dir in stale {
                    let _ = inner.debouncer.unwatch(&dir);
                    inner.dirs.remove(&dir);
                }
            }
        }
        for dir in dirs {
            self.watch_dir(&dir);
        }
    }

    /// An agent of `workspace` read or wrote `relative` (a `tool/result.seen`, as it is logged
    /// during a turn): its content is the agent's own, and the file is watched from now on.
    pub(crate) fn saw(&self, workspace: &Path, relative: &str, sha256: Option<String>) {
        let path = workspace.join(relative);
        {
            let mut interest = lock(&self.interest);
            let entry = interest.entry(path.clone()).or_insert_with(|| Interest {
                workspace: workspace.to_path_buf(),
                relative: relative.to_owned(),
                known: Vec::new(),
            });
            let seen = sha256.clone().map_or(Seen::Gone, Seen::Content);
            entry.known.push(sha256);
            // A long turn rewriting one file many times: the recent versions are what matter.
            if entry.known.len() > KNOWN_PER_FILE {
                entry.known.remove(0);
            }
            lock(&self.announced).insert(path.clone(), seen);
        }
        if let Some(dir) = path.parent() {
            self.watch_dir(dir);
        }
    }

    fn watch_dir(&self, dir: &Path) {
        let mut inner = lock(&self.inner);
        let Some(inner) = inner.as_mut() else { return };
        if inner.dirs.contains(dir) || !dir.is_dir() {
            return;
        }
        if self.limit.is_some_and(|limit| inner.dirs.len() >= limit) {
            self.degrade(watch_limit_text());
            return;
        }
        match inner.debouncer.watch(dir, notify::RecursiveMode::NonRecursive) {
            Ok(()) => {
                inner.dirs.insert(dir.to_path_buf());
            }
            Err(error) if matches!(error.kind, notify::ErrorKind::MaxFilesWatch) => {
                self.degrade(watch_limit_text());
            }
            Err(error) => tracing::warn!("not watching {} ({error})", dir.display()),
        }
    }

    /// Debounced events: announce the files of interest whose state changed. Files are read
    /// and hashed with no lock held (the runtime's tasks take these locks too).
    fn changed(&self, paths: HashSet<PathBuf>) {
        let entries: Vec<(PathBuf, Interest)> = {
            let interest = lock(&self.interest);
            paths
                .into_iter()
                .filter_map(|path| interest.get(&path).cloned().map(|entry| (path, entry)))
                .collect()
        };
        let states: Vec<(PathBuf, Interest, State)> = entries
            .into_iter()
            .map(|(path, entry)| {
                let state = state_of(&path);
                (path, entry, state)
            })
            .collect();
        let mut by_workspace: BTreeMap<PathBuf, Vec<FileChange>> = BTreeMap::new();
        {
            let mut announced = lock(&self.announced);
            for (path, entry, now) in states {
                let key = now.key();
                let before = announced.get(&path).cloned();
                // The agent's own content, or what was announced last: nothing new.
                let own = matches!(&now, State::File(sha)
                    if entry.known.iter().any(|known| known.as_ref() == Some(sha)));
                if own || before.as_ref() == Some(&key) {
                    announced.insert(path, key);
                    continue;
                }
                let change = match (&now, &before) {
                    (State::Gone, _) => ChangeKind::Deleted,
                    (State::Other, _) => ChangeKind::Replaced,
                    (State::File(_) | State::Large(..), Some(Seen::Gone)) => ChangeKind::Added,
                    (State::File(_) | State::Large(..), _) => ChangeKind::Edited,
                };
                let sha256 = match &now {
                    State::File(sha) => Some(sha.clone()),
                    State::Large(..) | State::Gone | State::Other => None,
                };
                announced.insert(path, key);
                by_workspace.entry(entry.workspace.clone()).or_default().push(FileChange {
                    path: entry.relative.clone(),
                    change,
                    sha256,
                });
            }
        }
        for (workspace, mut files) in by_workspace {
            files.sort_by(|a, b| a.path.cmp(&b.path));
            let _ = self
                .changes
                .send(WorkspaceChanged { workspace: workspace.display().to_string(), files });
        }
    }
}

fn watch_limit_text() -> String {
    "file watching is degraded: the system's limit on watched directories \
     (fs.inotify.max_user_watches) is reached; clients hear of changed files only when a \
     request notes them (every step still compares the files itself)"
        .to_owned()
}

/// A file's state as last announced: its content's hash, "too large to hash" with its length
/// and modification time (a later edit still differs), gone, or something else.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Content(String),
    Large(u64, Option<std::time::SystemTime>),
    Gone,
    Other,
}

enum State {
    /// A regular file and its content's hash.
    File(String),
    /// A regular file too large to hash: its length and modification time.
    Large(u64, Option<std::time::SystemTime>),
    Gone,
    Other,
}

impl State {
    /// What is remembered of it.
    fn key(&self) -> Seen {
        match self {
            State::File(sha) => Seen::Content(sha.clone()),
            State::Large(len, modified) => Seen::Large(*len, *modified),
            State::Gone => Seen::Gone,
            State::Other => Seen::Other,
        }
    }
}

fn state_of(path: &Path) -> State {
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => {
            if metadata.len() > HASH_CAP_BYTES {
                return State::Large(metadata.len(), metadata.modified().ok());
            }
            // Opened without blocking and checked again: it may have been swapped for a FIFO
            // since the look above.
            match dsh_sandbox::beneath::read_regular(path, HASH_CAP_BYTES) {
                Ok(bytes) => State::File(dsh_provider::sha256_hex(&bytes)),
                Err(_) => State::Other,
            }
        }
        Ok(_) => State::Other,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => State::Gone,
        Err(_) => State::Other,
    }
}

//! [`Checkpointer`]: one workspace's checkpoints — taking them ([`Checkpointer::checkpoint`]),
//! restoring them (`restore.rs`) and collecting them (`collect.rs`).
//!
//! A checkpoint walks the workspace with the standard ignore rules, consults the metadata
//! index (`index.rs`) so that only files whose metadata changed are read, stores new contents
//! in the object store and builds one tree object per directory (`tree.rs`). An unchanged
//! workspace gives the same root hash and writes nothing.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use ignore::WalkBuilder;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag, fstatat};
use std::os::fd::OwnedFd;

use crate::Hash;
use crate::error::CheckpointError;
use crate::index::{Index, Meta, RACY_NS, Record, Records};
use crate::objects::ObjectStore;
use crate::tree::{self, Leaf, Manifest};
use crate::watch::{Changes, Walk, Watch, WatchStatus, is_at_or_below};

/// The default cap on a tracked file's size: larger files are listed as too large, not stored.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 8 * 1024 * 1024;

/// The default of [`CheckpointConfig::full_scan_every`].
pub const DEFAULT_FULL_SCAN_EVERY: u32 = 64;
/// The default of [`CheckpointConfig::full_scan_interval`]: ten minutes.
pub const DEFAULT_FULL_SCAN_INTERVAL: Duration = Duration::from_secs(600);

/// How checkpoints are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// Files larger than this (bytes) are recorded as too large: listed, not stored, not
    /// restorable. Default [`DEFAULT_MAX_FILE_SIZE`].
    pub max_file_size: u64,
    /// Watch the workspace with inotify (`watch.rs`), so that a checkpoint re-examines only
    /// the paths reported changed since the last one instead of walking the whole tree.
    /// Default `true`. Only a `Checkpointer` kept open between checkpoints gains from it (the
    /// watch lives as long as it does); without inotify, every checkpoint walks the tree.
    pub watch: bool,
    /// With a watch, the whole tree is walked anyway at least every this many checkpoints...
    /// Writes through a shared `mmap` (and a network filesystem's remote changes) raise no
    /// event; a full walk sees them. Default [`DEFAULT_FULL_SCAN_EVERY`].
    pub full_scan_every: u32,
    /// ... and at least this often. Default [`DEFAULT_FULL_SCAN_INTERVAL`].
    pub full_scan_interval: Duration,
}

impl Default for CheckpointConfig {
    fn default() -> CheckpointConfig {
        CheckpointConfig {
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            watch: true,
            full_scan_every: DEFAULT_FULL_SCAN_EVERY,
            full_scan_interval: DEFAULT_FULL_SCAN_INTERVAL,
        }
    }
}

/// One checkpoint taken: the workspace's tracked state at that moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The root tree's hash: the checkpoint's identity. Equal roots are equal states.
    pub root: Hash,
    /// Tracked paths (files, symbolic links, too-large files) in the checkpoint.
    pub files: usize,
    /// Paths created, removed or changed (content, mode, link target, kind) since the previous
    /// checkpoint of this workspace, sorted. Every path if there was none (or its index was
    /// lost).
    pub changed: Vec<PathBuf>,
    /// Files read (and hashed) because the metadata index could not vouch for them: new or
    /// changed files, and files changed too recently to trust their metadata.
    pub read: usize,
    /// Files over the size cap, with their sizes, sorted: listed, not stored, not restorable.
    pub too_large: Vec<(PathBuf, u64)>,
    /// Why the checkpoint is incomplete (disk full, files that could not be read), if it is. An
    /// incomplete checkpoint still has a root; restoring it reports what is missing.
    pub incomplete: Option<String>,
    /// How the workspace was walked: whole, or only what the watch reported changed. The
    /// result is the same either way.
    pub walk: Walk,
}

/// The checkpoints of one workspace: its root, its state directory (object store, metadata
/// index, rewind journal) and the size cap.
///
/// One `Checkpointer` per workspace at a time: the caller serializes its use (the methods take
/// `&mut self`; two processes must not open the same state directory at once). Every method
/// blocks on the filesystem; call it from a blocking thread.
#[derive(Debug)]
pub struct Checkpointer {
    pub(crate) root: PathBuf,
    pub(crate) state_dir: PathBuf,
    pub(crate) objects: ObjectStore,
    pub(crate) config: CheckpointConfig,
    /// The metadata index, loaded at the first checkpoint and kept in memory after.
    pub(crate) index: Option<Index>,
    /// The watch, set up by the first checkpoint (with [`CheckpointConfig::watch`]).
    pub(crate) watch: Option<Watch>,
    /// Why there is no watch and will be none, if so.
    pub(crate) watch_unavailable: Option<String>,
}

impl Checkpointer {
    /// Opens the checkpoints of the workspace at `workspace_root`, kept in `state_dir` (the
    /// workspace's state directory: `objects/`, `checkpoint-index` and `rewind-journal` go in
    /// it; created 0700 if missing). Nothing under `state_dir` is ever tracked, even if it lies
    /// inside the workspace. Does not recover a crashed restore: call
    /// [`Checkpointer::recover`] before the first checkpoint, restore or collection.
    pub fn open(
        workspace_root: &Path,
        state_dir: &Path,
        config: CheckpointConfig,
    ) -> Result<Checkpointer, CheckpointError> {
        let root = workspace_root.canonicalize().map_err(|cause| CheckpointError::Io {
            action: "opening the workspace",
            path: workspace_root.to_path_buf(),
            cause,
        })?;
        crate::objects::create_private_dir(state_dir).map_err(|cause| CheckpointError::Io {
            action: "creating",
            path: state_dir.to_path_buf(),
            cause,
        })?;
        let state_dir = state_dir.canonicalize().map_err(|cause| CheckpointError::Io {
            action: "opening",
            path: state_dir.to_path_buf(),
            cause,
        })?;
        let objects = ObjectStore::open(&state_dir.join("objects"))?;
        Ok(Checkpointer {
            root,
            state_dir,
            objects,
            config,
            index: None,
            watch: None,
            watch_unavailable: None,
        })
    }

    /// The workspace root (canonicalized).
    pub fn workspace_root(&self) -> &Path {
        &self.root
    }

    /// The object store (e.g. [`ObjectStore::contains`] on a checkpoint's root tells whether
    /// it is still available: collection removes dropped checkpoints' roots).
    pub fn objects(&self) -> &ObjectStore {
        &self.objects
    }

    /// Takes a checkpoint of the workspace now. Reads only files whose metadata (size, mtime,
    /// ctime, inode, mode) changed since the last checkpoint, or whose mtime is too recent to
    /// vouch for them. With a watch ([`CheckpointConfig::watch`]), only the paths it reported
    /// changed are examined, unless a full walk is due ([`Checkpoint::walk`] says which).
    /// Disk full or unreadable files do not fail it: the checkpoint is returned with
    /// [`Checkpoint::incomplete`] saying what.
    pub fn checkpoint(&mut self) -> Result<Checkpoint, CheckpointError> {
        self.scan(None)
    }

    /// Takes a checkpoint walking the whole tree whatever the watch says (e.g. at a turn's
    /// end: what the watch cannot see — writes through `mmap` — is seen then). The watch is
    /// kept (and checked against the walk).
    pub fn checkpoint_full(&mut self) -> Result<Checkpoint, CheckpointError> {
        self.scan(Some("asked for"))
    }

    /// The state of the watch, for a status to show (e.g. that the inotify limit was reached
    /// and every checkpoint walks the whole tree).
    pub fn watch_status(&self) -> WatchStatus {
        if !self.config.watch {
            return WatchStatus::Off;
        }
        if let Some(reason) = &self.watch_unavailable {
            return WatchStatus::Unavailable(reason.clone());
        }
        match &self.watch {
            None => WatchStatus::NotYet,
            Some(watch) => WatchStatus::Watching { directories: watch.directories() },
        }
    }

    pub(crate) fn index_path(&self) -> PathBuf {
        self.state_dir.join("checkpoint-index")
    }

    /// The index, loaded from its file the first time.
    pub(crate) fn index(&mut self) -> &Index {
        let path = self.index_path();
        self.index.get_or_insert_with(|| Index::load(&path))
    }

    /// The manifest of the workspace as the last checkpoint saw it (the index's records).
    pub(crate) fn current_manifest(&self) -> Manifest {
        let Some(index) = &self.index else { return Manifest::new() };
        index.records.iter().map(|(path, record)| (path.clone(), record.leaf.clone())).collect()
    }

    /// Takes a checkpoint; [`Checkpointer::current_manifest`] is its manifest after.
    pub(crate) fn scan(&mut self, force_full: Option<&str>) -> Result<Checkpoint, CheckpointError> {
        let root_metadata = fs::metadata(&self.root).map_err(|cause| CheckpointError::Io {
            action: "reading the workspace",
            path: self.root.clone(),
            cause,
        })?;
        if !root_metadata.is_dir() {
            return Err(CheckpointError::Io {
                action: "reading the workspace",
                path: self.root.clone(),
                cause: io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        self.index();
        let mut index = self.index.take().unwrap_or_default();
        let scan_start_ns = now_ns();
        let (walk, listed) = match self.walk_plan(force_full, &index) {
            Err(reason) => {
                if let Some(watch) = &mut self.watch {
                    watch.begin_full();
                }
                let listed =
                    list(&self.root, &self.state_dir, self.watch.as_mut(), None, &|_| false);
                if let Some(watch) = &mut self.watch {
                    watch.end_full();
                }
                (Walk::Full(reason), listed)
            }
            Ok(changes) => self.list_changes(changes, &index),
        };
        let Listed { found, kept, mut problems, decided, .. } = listed;

        let mut trusted = kept;
        trusted.reserve(found.len());
        let mut to_read = Vec::new();
        let mut recent = Vec::new();
        for found in found {
            if found.multi_link {
                recent.push(found.path.clone());
            }
            if index.trusted(&found.path, &found.meta).is_some() {
                trusted.push(found.path);
            } else {
                to_read.push(found);
            }
        }
        if let Some(watch) = &mut self.watch {
            // An ignore file read in a directory listed because its watch is new may have
            // changed before the watch was added: the rules this listing used are in doubt.
            if matches!(walk, Walk::Watched { .. })
                && to_read.iter().any(|found| {
                    let name = found.path.rsplit(|&byte| byte == b'/').next();
                    matches!(name, Some(b".gitignore" | b".ignore"))
                })
            {
                watch.doubt.get_or_insert_with(|| "an ignore file was read".to_owned());
            }
            if !problems.is_empty() {
                watch.doubt.get_or_insert_with(|| "the last checkpoint had problems".to_owned());
            }
            if let Some(reason) = watch.broken.take() {
                self.watch_unavailable = Some(reason);
                self.watch = None;
            }
        }
        // Nothing changed: the previous checkpoint stands, nothing is built or written.
        if to_read.is_empty()
            && problems.is_empty()
            && trusted.len() == decided.as_ref().map_or(index.records.len(), Vec::len)
            && let Some(root) = index.root
        {
            let mut too_large: Vec<(PathBuf, u64)> = index
                .records
                .iter()
                .filter_map(|(path, record)| match record.leaf {
                    Leaf::NotStored { size, .. } => Some((path_of(path), size)),
                    _ => None,
                })
                .collect();
            too_large.sort();
            let files = index.records.len();
            self.index = Some(index);
            if let Some(watch) = &mut self.watch {
                watch.recent = recent;
            }
            return Ok(Checkpoint {
                root,
                files,
                changed: Vec::new(),
                read: 0,
                too_large,
                incomplete: None,
                walk,
            });
        }

        let read_count = to_read.iter().filter(|found| !found.is_symlink).count();
        let outcomes = read_all(to_read, &self.objects, &self.config);
        let mut changed: Vec<Vec<u8>> = Vec::new();
        let mut too_large = Vec::new();
        let mut records = match decided {
            // A watched walk decided only on some records: the others stay as they are, and
            // the decided ones are taken out to be merged as after a full walk.
            Some(decided) => {
                let mut records = std::mem::take(&mut index.records);
                for path in decided {
                    if let Some(record) = records.remove(&path) {
                        index.records.insert(path, record);
                    }
                }
                for (path, record) in &records {
                    if let Leaf::NotStored { size, .. } = record.leaf {
                        too_large.push((path_of(path), size));
                    }
                }
                records
            }
            None => Records::with_capacity_and_hasher(
                trusted.len() + outcomes.len(),
                Default::default(),
            ),
        };
        for path in trusted {
            if let Some(record) = index.records.remove(&path) {
                if let Leaf::NotStored { size, .. } = record.leaf {
                    too_large.push((path_of(&path), size));
                }
                records.insert(path, record);
            }
        }
        let mut all_trusted = true;
        let (mut racy_read, mut read_settled) = (Vec::new(), Vec::new());
        for outcome in outcomes {
            let Outcome { path, record, unreadable, problem } = outcome;
            if let Some(problem) = problem {
                problems.push(problem);
            }
            let Some(record) = record else { continue };
            all_trusted = false;
            // Read within the racy window: not to be trusted by its metadata alone later.
            let vouched_before = scan_start_ns.saturating_sub(RACY_NS);
            if record.meta.mtime_ns >= vouched_before || record.meta.ctime_ns >= vouched_before {
                racy_read.push(path.clone());
            } else {
                read_settled.push(path.clone());
            }
            if let Leaf::NotStored { size, .. } = &record.leaf
                && !unreadable
            {
                too_large.push((path_of(&path), *size));
            }
            if index.records.remove(&path).is_none_or(|old| old.leaf != record.leaf) {
                changed.push(path.clone());
            }
            records.insert(path, record);
        }
        // What the index had and the walk did not find: removed.
        changed.extend(index.records.drain().map(|(path, _)| path));
        changed.sort();
        too_large.sort();

        let trees = tree::build(records.iter().map(|(path, record)| (path, &record.leaf)));
        let root = trees.last().map(|(hash, _)| *hash).unwrap_or_else(|| Hash::of(b""));
        let mut stored_trees = HashSet::with_capacity(trees.len());
        let mut tree_failure = None;
        for (hash, bytes) in &trees {
            if index.trees.contains(hash) {
                stored_trees.insert(*hash);
                continue;
            }
            match self.objects.put_unsynced(bytes) {
                Ok(_) => {
                    stored_trees.insert(*hash);
                }
                Err(error) => {
                    tree_failure.get_or_insert(error);
                }
            }
        }
        if let Some(error) = tree_failure {
            let disk_full = if error.is_disk_full() { "disk full: " } else { "" };
            problems.push(format!("{disk_full}directory trees not stored ({error})"));
        }
        let failed = self.objects.sync();
        if !failed.is_empty() {
            let failed_hashes: HashSet<Hash> = failed.iter().map(|(hash, _)| *hash).collect();
            let disk_full = failed.iter().any(|(_, error)| error.is_disk_full());
            let disk_full = if disk_full { "disk full: " } else { "" };
            problems.push(format!(
                "{disk_full}{} object(s) not stored ({})",
                failed.len(),
                failed[0].1
            ));
            // The index vouches only for what is stored.
            stored_trees.retain(|hash| !failed_hashes.contains(hash));
            for record in records.values_mut() {
                if let Leaf::File { hash, .. } = &record.leaf
                    && failed_hashes.contains(hash)
                {
                    record.meta = record.meta.smudged();
                }
            }
        }

        // The index's scan start must be no later than the start of the checkpoint that read
        // any record still within its racy window: a watched checkpoint keeps the records it
        // did not examine as they are, read by earlier checkpoints.
        let mut index_start_ns = scan_start_ns;
        if let Some(watch) = &mut self.watch {
            if matches!(walk, Walk::Full(_)) {
                watch.unverified.clear();
            }
            for path in read_settled {
                watch.unverified.remove(&path);
            }
            for path in racy_read {
                watch.unverified.insert(path, scan_start_ns);
            }
            watch.unverified.retain(|path, _| records.contains_key(path));
            index_start_ns = watch.unverified.values().copied().fold(scan_start_ns, i64::min);
        }
        let dirty = !all_trusted || index.root != Some(root) || !changed.is_empty();
        let new_index =
            Index { scan_start_ns: index_start_ns, root: Some(root), records, trees: stored_trees };
        if dirty {
            // Losing the index only means reading every file again next time.
            let _ = new_index.save(&self.index_path());
        }
        let files = new_index.records.len();
        self.index = Some(new_index);

        problems.sort();
        let incomplete = (!problems.is_empty()).then(|| summarize(&problems));
        let changed = changed.iter().map(|path| path_of(path)).collect();
        if let Some(watch) = &mut self.watch {
            watch.recent = recent;
        }
        Ok(Checkpoint { root, files, changed, read: read_count, too_large, incomplete, walk })
    }
}

impl Checkpointer {
    /// What the watch reported changed since the last checkpoint, or why the whole tree must
    /// be walked. Sets the watch up on first use; always drains its events.
    fn walk_plan(&mut self, force_full: Option<&str>, index: &Index) -> Result<Changes, String> {
        if !self.config.watch {
            self.watch = None;
            return Err("watching is off".to_owned());
        }
        if let Some(reason) = &self.watch_unavailable {
            return Err(format!("no watch: {reason}"));
        }
        let watch = match &mut self.watch {
            Some(watch) => watch,
            None => match Watch::new(&self.root) {
                Ok(watch) => self.watch.insert(watch),
                Err(error) => {
                    let reason = format!("inotify is unavailable ({error})");
                    self.watch_unavailable = Some(reason.clone());
                    return Err(reason);
                }
            },
        };
        let changes = watch.drain()?;
        if let Some(reason) = force_full {
            return Err(reason.to_owned());
        }
        if index.root.is_none() {
            return Err("no previous checkpoint".to_owned());
        }
        if watch.since_full >= self.config.full_scan_every {
            return Err(format!(
                "the periodic full walk ({} checkpoints since the last)",
                watch.since_full
            ));
        }
        if watch.last_full.elapsed() >= self.config.full_scan_interval {
            return Err(format!(
                "the periodic full walk ({} s since the last)",
                watch.last_full.elapsed().as_secs()
            ));
        }
        if changes.subtrees.len() > MAX_SUBTREES {
            return Err(format!("{} directories changed", changes.subtrees.len()));
        }
        Ok(changes)
    }

    /// Lists what the watch reported: the directories to list again (their ancestors walked
    /// through, with the standard ignore rules), the paths to `lstat` again; every other
    /// record of the index is kept as it is.
    fn list_changes(&mut self, changes: Changes, index: &Index) -> (Walk, Listed) {
        let Changes { mut examine, names, subtrees } = changes;
        let Some(watch) = self.watch.as_mut() else {
            return (Walk::Full("no watch".to_owned()), Listed::default());
        };
        watch.since_full += 1;
        let stat_all: HashSet<Vec<u8>> = std::mem::take(&mut watch.pending).into_iter().collect();
        examine.extend(std::mem::take(&mut watch.recent));
        for subtree in &subtrees {
            watch.forget_subtree(subtree);
        }
        let scope = Scope::new(stat_all, names, subtrees);
        if scope.is_empty() && examine.is_empty() {
            let listed = Listed { decided: Some(Vec::new()), ..Listed::default() };
            return (Walk::Watched { examined: 0, listed: 0 }, listed);
        }
        let mut decided = Vec::new();
        let mut listed = if scope.is_empty() {
            Listed::default()
        } else {
            let scope = std::sync::Arc::new(scope.clone());
            let keep = |path: &[u8]| index.records.contains_key(path) && !examine.contains(path);
            list(&self.root, &self.state_dir, Some(watch), Some(scope), &keep)
        };
        let mut examined = listed.found.len();
        for path in index.records.keys() {
            if scope.covers_file(path) {
                decided.push(path.clone());
                continue;
            }
            if !examine.contains(path) {
                continue;
            }
            decided.push(path.clone());
            examined += 1;
            let full = self.root.join(path_of(path));
            match nix::sys::stat::lstat(&full) {
                Ok(stat) => {
                    let kind = stat.st_mode & SFlag::S_IFMT.bits();
                    let is_symlink = kind == SFlag::S_IFLNK.bits();
                    if is_symlink || kind == SFlag::S_IFREG.bits() {
                        listed.found.push(Found {
                            path: path.clone(),
                            full,
                            meta: Meta::of_stat(&stat),
                            is_symlink,
                            multi_link: stat.st_nlink > 1,
                        });
                    }
                }
                // Removed, or below what is no longer a directory: gone.
                Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => {}
                Err(errno) => listed.problems.push(format!("{} not read: {errno}", full.display())),
            }
        }
        listed.decided = Some(decided);
        (Walk::Watched { examined, listed: listed.dirs }, listed)
    }
}

/// More directories created, removed or renamed than this since the last checkpoint: the whole
/// tree is walked (as cheap, and simpler).
const MAX_SUBTREES: usize = 64;

/// What an incremental walk lists.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    /// Directories walked through (every listed directory and its ancestors).
    descend: HashSet<Vec<u8>>,
    /// Directories listed with every file `lstat`ed.
    stat_all: HashSet<Vec<u8>>,
    /// Directories listed; only their new files, and the files named by events, `lstat`ed.
    names: HashSet<Vec<u8>>,
    /// Subtrees listed whole, every file `lstat`ed.
    subtrees: Vec<Vec<u8>>,
}

fn parent(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&byte| byte == b'/') {
        Some(at) => &path[..at],
        None => b"",
    }
}

impl Scope {
    fn new(stat_all: HashSet<Vec<u8>>, names: HashSet<Vec<u8>>, subtrees: Vec<Vec<u8>>) -> Scope {
        let mut descend = HashSet::new();
        for dir in stat_all.iter().chain(&names).chain(&subtrees) {
            let mut dir: &[u8] = dir;
            loop {
                if !descend.insert(dir.to_vec()) {
                    break;
                }
                if dir.is_empty() {
                    break;
                }
                dir = parent(dir);
            }
        }
        Scope { descend, stat_all, names, subtrees }
    }

    fn is_empty(&self) -> bool {
        self.descend.is_empty()
    }

    fn under_subtree(&self, path: &[u8]) -> bool {
        self.subtrees.iter().any(|subtree| is_at_or_below(path, subtree))
    }

    fn descends(&self, dir: &[u8]) -> bool {
        self.descend.contains(dir) || self.under_subtree(dir)
    }

    /// Whether the directory `dir` is listed: `Some(true)` with every file `lstat`ed.
    fn lists(&self, dir: &[u8]) -> Option<bool> {
        if self.stat_all.contains(dir) || self.under_subtree(dir) {
            Some(true)
        } else if self.names.contains(dir) {
            Some(false)
        } else {
            None
        }
    }

    /// Whether the walk decides on `path` (a file): its directory is listed, or it lies in a
    /// subtree listed whole (or is one: a directory replaced by a file).
    fn covers_file(&self, path: &[u8]) -> bool {
        self.under_subtree(path) || self.lists(parent(path)).is_some()
    }
}

/// What a walk found: files `lstat`ed, files kept without (their directory listed for its
/// names only), problems, directories listed.
#[derive(Default)]
struct Listed {
    found: Vec<Found>,
    kept: Vec<Vec<u8>>,
    problems: Vec<String>,
    dirs: usize,
    /// For a watched walk, the records it decided on (in a listed directory, or examined);
    /// every other record is kept as it is. `None`: a full walk, which decides on all.
    decided: Option<Vec<Vec<u8>>>,
}

fn summarize(problems: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut text: Vec<&str> = problems.iter().take(SHOWN).map(String::as_str).collect();
    let more = format!("and {} more", problems.len().saturating_sub(SHOWN));
    if problems.len() > SHOWN {
        text.push(&more);
    }
    text.join("; ")
}

pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos() as i64)
        .unwrap_or(0)
}

/// A path's bytes as a `PathBuf`.
pub(crate) fn path_of(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}

/// A tracked path the walk found, with its metadata.
struct Found {
    path: Vec<u8>,
    full: PathBuf,
    meta: Meta,
    is_symlink: bool,
    /// More than one hard link: a write through another raises no event in its directory.
    multi_link: bool,
}

/// Lists the tracked files and links (the standard ignore rules; `.git` and the state
/// directory excluded) with their metadata, and what could not be walked. One thread: listing
/// and `lstat` are cheap per file, and a parallel walk's coordination cost more than it saved.
/// Each file is `lstat`ed relative to its directory's handle (`fstatat`), not by its full
/// path: resolving every component of every path again was a fifth of the time.
///
/// With a `scope`, only its directories are listed (and their ancestors walked through, so the
/// ignore rules are those of a full walk); a file of a directory listed for its names only is
/// kept without `lstat` when `keep` says so. Every directory walked is watched, if `watch`.
fn list(
    root: &Path,
    state_dir: &Path,
    mut watch: Option<&mut Watch>,
    scope: Option<std::sync::Arc<Scope>>,
    keep: &dyn Fn(&[u8]) -> bool,
) -> Listed {
    let state_dir = state_dir.as_os_str().to_owned();
    let root_length = root.as_os_str().len();
    let relative = move |path: &Path| -> Vec<u8> {
        path.as_os_str().as_bytes().get(root_length + 1..).unwrap_or_default().to_vec()
    };
    let filter_scope = scope.clone();
    let walker = WalkBuilder::new(root)
        .hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |entry| {
            if entry.file_name() == ".git" || entry.path().as_os_str() == state_dir.as_os_str() {
                return false;
            }
            let Some(scope) = &filter_scope else { return true };
            let path = relative(entry.path());
            if entry.file_type().is_some_and(|file_type| file_type.is_dir()) {
                scope.descends(&path)
            } else {
                scope.lists(parent(&path)).is_some()
            }
        })
        .build();
    let mut listed = Listed::default();
    // The handles of the directories on the walk's current branch, by depth.
    let mut dirs: Vec<Option<OwnedFd>> = Vec::new();
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) => {
                listed.problems.push(format!("not walked: {error}"));
                continue;
            }
        };
        let Some(file_type) = entry.file_type() else { continue };
        let depth = entry.depth();
        if file_type.is_dir() {
            if let Some(watch) = watch.as_deref_mut() {
                let path = entry.path().as_os_str().as_bytes().get(root_length + 1..);
                watch.add(path.unwrap_or_default(), entry.path());
            }
            if scope.as_ref().is_none_or(|scope| {
                let path = entry.path().as_os_str().as_bytes().get(root_length + 1..);
                scope.lists(path.unwrap_or_default()).is_some()
            }) {
                listed.dirs += 1;
            }
            dirs.truncate(depth);
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let handle = match depth.checked_sub(1).and_then(|parent| dirs.get(parent)) {
                Some(Some(parent)) => {
                    nix::fcntl::openat(parent, entry.file_name(), flags, Mode::empty()).ok()
                }
                _ => nix::fcntl::open(entry.path(), flags, Mode::empty()).ok(),
            };
            dirs.resize_with(depth, || None);
            dirs.push(handle);
            continue;
        }
        if !(file_type.is_file() || file_type.is_symlink()) {
            continue;
        }
        if let Some(scope) = &scope {
            let Some(path) = entry.path().as_os_str().as_bytes().get(root_length + 1..) else {
                continue;
            };
            if scope.lists(parent(path)) == Some(false) && keep(path) {
                listed.kept.push(path.to_vec());
                continue;
            }
        }
        let stat = match depth.checked_sub(1).and_then(|parent| dirs.get(parent)) {
            Some(Some(parent)) => fstatat(parent, entry.file_name(), AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(io::Error::from),
            _ => nix::sys::stat::lstat(entry.path()).map_err(io::Error::from),
        };
        let full = entry.into_path();
        let stat = match stat {
            Ok(stat) => stat,
            // Removed since it was listed: not part of this checkpoint.
            Err(cause) if cause.kind() == io::ErrorKind::NotFound => continue,
            Err(cause) => {
                listed.problems.push(format!("{} not read: {cause}", full.display()));
                continue;
            }
        };
        let kind = stat.st_mode & SFlag::S_IFMT.bits();
        let is_symlink = kind == SFlag::S_IFLNK.bits();
        if !(is_symlink || kind == SFlag::S_IFREG.bits()) {
            continue;
        }
        let Some(path) = full.as_os_str().as_bytes().get(root_length + 1..) else { continue };
        listed.found.push(Found {
            path: path.to_vec(),
            full,
            meta: Meta::of_stat(&stat),
            is_symlink,
            multi_link: stat.st_nlink > 1,
        });
    }
    listed
}

/// What reading one path gave: its record (`None`: gone meanwhile), whether it was
/// unreadable, and a problem to report.
struct Outcome {
    path: Vec<u8>,
    record: Option<Record>,
    unreadable: bool,
    problem: Option<String>,
}

/// Reads and stores every path in `to_read`, on as many threads as there are processors when
/// there are enough of them to pay (a first checkpoint reads everything).
fn read_all(to_read: Vec<Found>, objects: &ObjectStore, config: &CheckpointConfig) -> Vec<Outcome> {
    const PARALLEL_FROM: usize = 32;
    let threads = std::thread::available_parallelism().map_or(1, |threads| threads.get());
    if to_read.len() < PARALLEL_FROM || threads == 1 {
        return to_read.into_iter().map(|found| read_one(found, objects, config)).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Found>>> =
        to_read.into_iter().map(|found| Mutex::new(Some(found))).collect();
    let mut outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut outcomes = Vec::new();
                    loop {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        let Some(slot) = slots.get(at) else { break };
                        let found =
                            slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
                        if let Some(found) = found {
                            outcomes.push(read_one(found, objects, config));
                        }
                    }
                    outcomes
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| {
                worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    outcomes.sort_by(|left, right| left.path.cmp(&right.path));
    outcomes
}

fn read_one(found: Found, objects: &ObjectStore, config: &CheckpointConfig) -> Outcome {
    let Found { path, full, meta, is_symlink, .. } = found;
    let outcome = |record: Option<Record>, unreadable: bool, problem: Option<String>| Outcome {
        path: path.clone(),
        record,
        unreadable,
        problem,
    };
    if is_symlink {
        return match fs::read_link(&full) {
            Ok(target) => outcome(
                Some(Record {
                    meta,
                    leaf: Leaf::Symlink { target: target.as_os_str().as_bytes().to_vec() },
                }),
                false,
                None,
            ),
            Err(cause) if cause.kind() == io::ErrorKind::NotFound => outcome(None, false, None),
            Err(cause) => outcome(
                None,
                false,
                Some(format!("{} not read: {cause}", path_of(&path).display())),
            ),
        };
    }
    let not_stored = |meta: Meta| Record {
        meta,
        leaf: Leaf::NotStored { mode: meta.mode & 0o7777, size: meta.len },
    };
    if meta.len > config.max_file_size {
        return outcome(Some(not_stored(meta)), false, None);
    }
    let (content, meta) = match read_capped(&full, config.max_file_size, &meta) {
        Ok(Read::Content(content, meta)) => (content, meta),
        Ok(Read::TooLarge(meta)) => return outcome(Some(not_stored(meta)), false, None),
        Ok(Read::Gone) => return outcome(None, false, None),
        Err(cause) => {
            let problem = format!("{} not read: {cause}", path_of(&path).display());
            return outcome(Some(not_stored(meta.smudged())), true, Some(problem));
        }
    };
    let leaf = |hash| Leaf::File { mode: meta.mode & 0o7777, hash };
    match objects.put_unsynced(&content) {
        Ok(hash) => outcome(Some(Record { meta, leaf: leaf(hash) }), false, None),
        Err(error) => {
            let disk_full = if error.is_disk_full() { "disk full: " } else { "" };
            let problem = format!("{disk_full}{} not stored ({error})", path_of(&path).display());
            // The tree names the content (a restore reports it missing); the index does not
            // vouch for it, so the next checkpoint reads and stores it again.
            outcome(
                Some(Record { meta: meta.smudged(), leaf: leaf(Hash::of(&content)) }),
                false,
                Some(problem),
            )
        }
    }
}

pub(crate) enum Read {
    /// The content and the metadata of the file it was read from.
    Content(Vec<u8>, Meta),
    TooLarge(Meta),
    /// Removed, or no longer a regular file.
    Gone,
}

/// Reads a regular file without following a symbolic link put in its place, up to `cap` bytes.
/// The file opened must be the one the walk saw (`seen`: its device and inode, stat'ed through
/// its directory's handle): a directory on the path swapped for a link since would otherwise
/// copy a file from outside the workspace into the checkpoint (and a rewind into the tree).
pub(crate) fn read_capped(path: &Path, cap: u64, seen: &Meta) -> io::Result<Read> {
    let flags = OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let file = match OpenOptions::new().read(true).custom_flags(flags.bits()).open(path) {
        Ok(file) => file,
        Err(cause)
            if cause.kind() == io::ErrorKind::NotFound
                || cause.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) =>
        {
            return Ok(Read::Gone);
        }
        Err(cause) => return Err(cause),
    };
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Ok(Read::Gone);
    }
    let meta = Meta::of(&metadata);
    if (meta.dev, meta.ino) != (seen.dev, seen.ino) {
        return Err(io::Error::other(
            "replaced while it was read (a directory on its path may have been swapped for a link)",
        ));
    }
    if meta.len > cap {
        return Ok(Read::TooLarge(meta));
    }
    let mut content = Vec::with_capacity(meta.len as usize);
    file.take(cap + 1).read_to_end(&mut content)?;
    if content.len() as u64 > cap {
        return Ok(Read::TooLarge(meta));
    }
    Ok(Read::Content(content, meta))
}

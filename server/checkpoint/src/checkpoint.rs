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
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use ignore::{WalkBuilder, WalkState};
use nix::fcntl::OFlag;

use crate::Hash;
use crate::error::CheckpointError;
use crate::index::{Index, Meta, Record};
use crate::objects::ObjectStore;
use crate::tree::{self, Leaf, Manifest};

/// The default cap on a tracked file's size: larger files are listed as too large, not stored.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 8 * 1024 * 1024;

/// How checkpoints are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// Files larger than this (bytes) are recorded as too large: listed, not stored, not
    /// restorable. Default [`DEFAULT_MAX_FILE_SIZE`].
    pub max_file_size: u64,
}

impl Default for CheckpointConfig {
    fn default() -> CheckpointConfig {
        CheckpointConfig { max_file_size: DEFAULT_MAX_FILE_SIZE }
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
        Ok(Checkpointer { root, state_dir, objects, config, index: None })
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
    /// vouch for them. Disk full or unreadable files do not fail it: the checkpoint is
    /// returned with [`Checkpoint::incomplete`] saying what.
    pub fn checkpoint(&mut self) -> Result<Checkpoint, CheckpointError> {
        Ok(self.scan()?.checkpoint)
    }

    pub(crate) fn index_path(&self) -> PathBuf {
        self.state_dir.join("checkpoint-index")
    }

    /// The index, loaded from its file the first time.
    pub(crate) fn index(&mut self) -> &Index {
        let path = self.index_path();
        self.index.get_or_insert_with(|| Index::load(&path))
    }

    /// Takes a checkpoint and returns its manifest too.
    pub(crate) fn scan(&mut self) -> Result<Scan, CheckpointError> {
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
        let index = self.index.take().unwrap_or_default();
        let scan_start_ns = now_ns();
        let walked = walk(&self.root, &self.state_dir, &index, &self.objects, &self.config);

        let mut problems = walked.problems;
        let mut manifest = Manifest::new();
        let mut records = std::collections::HashMap::with_capacity(walked.visits.len());
        let mut read = 0;
        let mut all_trusted = true;
        let mut too_large = Vec::new();
        for visit in walked.visits {
            read += usize::from(!visit.trusted && matches!(visit.record.leaf, Leaf::File { .. }));
            all_trusted &= visit.trusted;
            if let Leaf::NotStored { size, .. } = &visit.record.leaf
                && !visit.unreadable
            {
                too_large.push((path_of(&visit.path), *size));
            }
            manifest.insert(visit.path.clone(), visit.record.leaf.clone());
            records.insert(visit.path, visit.record);
        }
        too_large.sort();

        let trees = tree::build(&manifest);
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
        if let Err(error) = self.objects.sync() {
            problems.push(format!("objects not made durable ({error})"));
        }

        let changed = changed_paths(&index, &records);
        let dirty =
            !all_trusted || index.root != Some(root) || index.records.len() != records.len();
        let new_index = Index { scan_start_ns, root: Some(root), records, trees: stored_trees };
        if dirty {
            // Losing the index only means reading every file again next time.
            let _ = new_index.save(&self.index_path());
        }
        let files = manifest.len();
        self.index = Some(new_index);

        problems.sort();
        let incomplete = (!problems.is_empty()).then(|| summarize(&problems));
        Ok(Scan {
            checkpoint: Checkpoint { root, files, changed, read, too_large, incomplete },
            manifest,
        })
    }
}

/// A checkpoint and its manifest.
pub(crate) struct Scan {
    pub(crate) checkpoint: Checkpoint,
    pub(crate) manifest: Manifest,
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

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos() as i64)
        .unwrap_or(0)
}

/// A path's bytes as a `PathBuf`.
pub(crate) fn path_of(bytes: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(bytes))
}

fn changed_paths(
    previous: &Index,
    records: &std::collections::HashMap<Vec<u8>, Record>,
) -> Vec<PathBuf> {
    let mut changed: Vec<&[u8]> = records
        .iter()
        .filter(|(path, record)| {
            previous.records.get(*path).is_none_or(|old| old.leaf != record.leaf)
        })
        .map(|(path, _)| path.as_slice())
        .collect();
    changed.extend(
        previous.records.keys().filter(|path| !records.contains_key(*path)).map(Vec::as_slice),
    );
    changed.sort();
    changed.into_iter().map(path_of).collect()
}

/// One tracked path found by the walk.
struct Visit {
    path: Vec<u8>,
    record: Record,
    /// Its record came from the index (the file was not read).
    trusted: bool,
    unreadable: bool,
}

#[derive(Default)]
struct Walked {
    visits: Vec<Visit>,
    problems: Vec<String>,
}

/// Walks the workspace in parallel, reading (and storing) only what the index cannot vouch
/// for.
fn walk(
    root: &Path,
    state_dir: &Path,
    index: &Index,
    objects: &ObjectStore,
    config: &CheckpointConfig,
) -> Walked {
    let state_dir = state_dir.to_path_buf();
    let walker = WalkBuilder::new(root)
        .hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |entry| entry.file_name() != ".git" && entry.path() != state_dir)
        .build_parallel();
    let collected = Mutex::new(Walked::default());
    walker.run(|| {
        let mut flush = FlushOnDrop { local: Walked::default(), into: &collected };
        Box::new(move |entry| {
            let local = &mut flush.local;
            match entry {
                Ok(entry) => {
                    if let Some(visit) = visit(root, &entry, index, objects, config, local) {
                        local.visits.push(visit);
                    }
                }
                Err(error) => local.problems.push(format!("not walked: {error}")),
            }
            WalkState::Continue
        })
    });
    collected.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A walker thread's findings, handed over when its visitor is dropped at the walk's end.
struct FlushOnDrop<'a> {
    local: Walked,
    into: &'a Mutex<Walked>,
}

impl Drop for FlushOnDrop<'_> {
    fn drop(&mut self) {
        let mut into = self.into.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        into.visits.append(&mut self.local.visits);
        into.problems.append(&mut self.local.problems);
    }
}

fn visit(
    root: &Path,
    entry: &ignore::DirEntry,
    index: &Index,
    objects: &ObjectStore,
    config: &CheckpointConfig,
    walked: &mut Walked,
) -> Option<Visit> {
    let file_type = entry.file_type()?;
    if file_type.is_dir()
        || file_type.is_fifo()
        || file_type.is_socket()
        || file_type.is_block_device()
        || file_type.is_char_device()
    {
        return None;
    }
    let full = entry.path();
    let path = full.strip_prefix(root).ok()?.as_os_str().as_bytes().to_vec();
    let metadata = match fs::symlink_metadata(full) {
        Ok(metadata) => metadata,
        // Removed since it was listed: not part of this checkpoint.
        Err(cause) if cause.kind() == io::ErrorKind::NotFound => return None,
        Err(cause) => {
            walked.problems.push(format!("{} not read: {cause}", full.display()));
            return None;
        }
    };
    let meta = Meta::of(&metadata);
    if let Some(record) = index.trusted(&path, &meta) {
        return Some(Visit { path, record: record.clone(), trusted: true, unreadable: false });
    }
    if metadata.file_type().is_symlink() {
        return match fs::read_link(full) {
            Ok(target) => Some(Visit {
                path,
                record: Record {
                    meta,
                    leaf: Leaf::Symlink { target: target.as_os_str().as_bytes().to_vec() },
                },
                trusted: false,
                unreadable: false,
            }),
            Err(cause) if cause.kind() == io::ErrorKind::NotFound => None,
            Err(cause) => {
                walked.problems.push(format!("{} not read: {cause}", path_of(&path).display()));
                None
            }
        };
    }
    if !metadata.is_file() {
        return None;
    }
    let not_stored = |meta: Meta, size: u64, unreadable: bool| Visit {
        path: path.clone(),
        record: Record { meta, leaf: Leaf::NotStored { mode: meta.mode & 0o7777, size } },
        trusted: false,
        unreadable,
    };
    if meta.len > config.max_file_size {
        return Some(not_stored(meta, meta.len, false));
    }
    let content = match read_capped(full, config.max_file_size) {
        Ok(Read::Content(content, meta)) => (content, meta),
        Ok(Read::TooLarge(meta)) => return Some(not_stored(meta, meta.len, false)),
        Ok(Read::Gone) => return None,
        Err(cause) => {
            walked.problems.push(format!("{} not read: {cause}", path_of(&path).display()));
            return Some(not_stored(meta.smudged(), meta.len, true));
        }
    };
    let (content, meta) = content;
    match objects.put_unsynced(&content) {
        Ok(hash) => Some(Visit {
            path,
            record: Record { meta, leaf: Leaf::File { mode: meta.mode & 0o7777, hash } },
            trusted: false,
            unreadable: false,
        }),
        Err(error) => {
            let disk_full = if error.is_disk_full() { "disk full: " } else { "" };
            walked
                .problems
                .push(format!("{disk_full}{} not stored ({error})", path_of(&path).display()));
            // The tree names the content (a restore reports it missing); the index does not
            // vouch for it, so the next checkpoint reads and stores it again.
            Some(Visit {
                path,
                record: Record {
                    meta: meta.smudged(),
                    leaf: Leaf::File { mode: meta.mode & 0o7777, hash: Hash::of(&content) },
                },
                trusted: false,
                unreadable: false,
            })
        }
    }
}

enum Read {
    /// The content and the metadata of the file it was read from.
    Content(Vec<u8>, Meta),
    TooLarge(Meta),
    /// Removed, or no longer a regular file.
    Gone,
}

/// Reads a regular file without following a symbolic link put in its place, up to `cap` bytes.
fn read_capped(path: &Path, cap: u64) -> io::Result<Read> {
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

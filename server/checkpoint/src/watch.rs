//! The watch: an inotify instance over every tracked directory of the workspace, so that a
//! checkpoint re-examines only the paths the kernel reported changed since the last one instead
//! of walking the whole tree.
//!
//! **Exactness.** The kernel queues an event during the syscall that makes the change, so
//! every change completed before a checkpoint drains the queue (non-blocking, at its start, on
//! the calling thread) is seen by that checkpoint. What the events say is turned into three
//! sets: paths to `lstat` again (a file modified, its mode changed), directories to list again
//! (an entry created, removed or renamed in it) and subtrees to list again whole (a directory
//! created, removed, renamed or replaced; its watches are dropped and added anew). Files are
//! then compared with the metadata index exactly as a full walk compares them, and only those
//! it cannot vouch for are read. Beyond the events:
//!
//! - a directory whose watch was just added is listed and every file in it `lstat`ed again at
//!   the next checkpoint: whatever happened in it between its listing and its watch is seen;
//! - files with more than one hard link (a write through another link raises no event in our
//!   directories) are `lstat`ed at every checkpoint;
//! - files read within the index's racy window keep the index's scan start from moving past
//!   the checkpoint that read them, so that they are read again when next examined (by an
//!   event, or a full walk), never trusted by metadata a same-tick write left unchanged;
//! - the ignore files outside the watched tree (`.git/info/exclude`, and for a `.git` file the
//!   worktree's common directory's) and the root's identity are checked at every checkpoint.
//!
//! **A full walk** (as without a watch) is taken whenever the watch cannot vouch: no watch yet
//! (the first checkpoint), the event queue overflowed, a `.gitignore`/`.ignore`/`.git` changed
//! anywhere, an exclude file changed, the root was moved, removed or replaced, an event named a
//! watch we do not know, the last checkpoint had a problem, a watch could not be added (the
//! user's inotify limit, `fs.inotify.max_user_watches`: the watch is then given up and
//! [`WatchStatus::Unavailable`] says so), when asked, and periodically (see
//! [`crate::CheckpointConfig::full_scan_every`]): writes through a shared `mmap`, writes
//! through a hard link made from outside the workspace since the last full walk (the event
//! goes to the other link's directory), and changes made by another machine to a network
//! filesystem raise no event in the watched directories. Files known to have several links
//! are `lstat`ed at every checkpoint, so only links made since the last full walk are blind.
//!
//! A directory created, removed, renamed or whose mode changed is listed again whole, its
//! watches dropped and added again (so a renamed directory's watch never reports under its old
//! path); more than 64 of them since the last checkpoint make a full walk instead.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use crate::tree::join;

/// What a checkpoint's walk was: the whole tree, or the paths the watch reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walk {
    /// The whole tree was walked, for the reason given (no watch yet, watching off, the event
    /// queue overflowed, an ignore file changed, the periodic full walk, ...).
    Full(String),
    /// Only what the watch reported changed was examined: this many paths were `lstat`ed and
    /// this many directories listed.
    Watched { examined: usize, listed: usize },
}

/// The state of a [`crate::Checkpointer`]'s watch, for a status to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchStatus {
    /// Watching is off ([`crate::CheckpointConfig::watch`]): every checkpoint walks the tree.
    Off,
    /// No checkpoint yet: the first one walks the tree and sets the watch up.
    NotYet,
    /// Watching this many directories.
    Watching { directories: usize },
    /// The watch could not be kept (the inotify limit was reached, inotify is unavailable):
    /// every checkpoint walks the whole tree. The text says why and what to do.
    Unavailable(String),
}

pub(crate) const MASK: AddWatchFlags = AddWatchFlags::IN_MODIFY
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_CREATE)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_DONT_FOLLOW)
    .union(AddWatchFlags::IN_ONLYDIR);

/// What the events since the last checkpoint ask to re-examine.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Paths to `lstat` again (if tracked).
    pub(crate) examine: HashSet<Vec<u8>>,
    /// Directories to list again (an entry created, removed or renamed; `""` is the root).
    pub(crate) names: HashSet<Vec<u8>>,
    /// Subtrees to list again whole (their watches dropped first).
    pub(crate) subtrees: Vec<Vec<u8>>,
}

/// The watch over one workspace.
#[derive(Debug)]
pub(crate) struct Watch {
    inotify: Inotify,
    root: PathBuf,
    /// The root's (device, inode) when the watch was set up.
    root_id: (u64, u64),
    by_wd: HashMap<WatchDescriptor, Vec<u8>>,
    by_path: HashMap<Vec<u8>, WatchDescriptor>,
    /// Watches we removed: their late events (and `IN_IGNORED`) are expected.
    retired: HashSet<WatchDescriptor>,
    /// Directories whose watch was added by the last checkpoint.
    pub(crate) pending: Vec<Vec<u8>>,
    /// Paths to `lstat` at the next checkpoint whatever the events say (hard-linked).
    pub(crate) recent: Vec<Vec<u8>>,
    /// Records read within their racy window (mtime or ctime within [`crate::index::RACY_NS`]
    /// of the start of the checkpoint that read them), with that start: the index's scan start
    /// stays no later than the earliest, so neither a later examination nor a full walk trusts
    /// them by their metadata; the watch vouches for them meanwhile (a change raises an event).
    pub(crate) unverified: HashMap<Vec<u8>, i64>,
    /// Ignore files outside the watched tree, and what they were.
    outside: HashMap<PathBuf, Option<FileId>>,
    /// Why the watch cannot vouch for the next checkpoint (a full walk is due), if it cannot.
    pub(crate) doubt: Option<String>,
    /// Why the watch is given up for good, if it is (the limit was reached).
    pub(crate) broken: Option<String>,
    pub(crate) since_full: u32,
    pub(crate) last_full: Instant,
    /// The set of directories seen by the full walk in progress.
    seen: Option<HashSet<Vec<u8>>>,
}

/// What an ignore file outside the tree was: length, mtime, ctime, inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(u64, i64, i64, u64);

fn file_id(path: &Path) -> Option<FileId> {
    let metadata = std::fs::metadata(path).ok()?;
    let mtime = metadata.mtime().saturating_mul(1_000_000_000) + metadata.mtime_nsec();
    let ctime = metadata.ctime().saturating_mul(1_000_000_000) + metadata.ctime_nsec();
    Some(FileId(metadata.len(), mtime, ctime, metadata.ino()))
}

impl Watch {
    /// A new watch, watching nothing yet (the next checkpoint walks the tree and adds them).
    pub(crate) fn new(root: &Path) -> io::Result<Watch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let metadata = std::fs::metadata(root)?;
        Ok(Watch {
            inotify,
            root: root.to_path_buf(),
            root_id: (metadata.dev(), metadata.ino()),
            by_wd: HashMap::new(),
            by_path: HashMap::new(),
            retired: HashSet::new(),
            pending: Vec::new(),
            recent: Vec::new(),
            unverified: HashMap::new(),
            outside: HashMap::new(),
            doubt: Some("no watch yet".to_owned()),
            broken: None,
            since_full: 0,
            last_full: Instant::now(),
            seen: None,
        })
    }

    pub(crate) fn directories(&self) -> usize {
        self.by_path.len()
    }

    /// Drains the event queue: what changed since the last drain, or why a full walk is due.
    /// Always drains everything, so that a full walk starts from an empty queue.
    pub(crate) fn drain(&mut self) -> Result<Changes, String> {
        let mut changes = Changes::default();
        let mut full: Option<String> = self.doubt.take();
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(errno) => {
                    full.get_or_insert(format!("reading the watch's events failed ({errno})"));
                    break;
                }
            };
            if events.is_empty() {
                break;
            }
            if full.is_some() {
                continue;
            }
            for event in events {
                if let Err(reason) = self.note(&event, &mut changes) {
                    full = Some(reason);
                    break;
                }
            }
        }
        let metadata = std::fs::metadata(&self.root);
        if !metadata.is_ok_and(|metadata| (metadata.dev(), metadata.ino()) == self.root_id) {
            full.get_or_insert("the workspace root was moved, removed or replaced".to_owned());
        }
        for (path, was) in &self.outside {
            if file_id(path) != *was {
                full.get_or_insert(format!("an ignore file changed: {}", path.display()));
            }
        }
        match full {
            Some(reason) => Err(reason),
            None => Ok(changes),
        }
    }

    fn note(
        &mut self,
        event: &nix::sys::inotify::InotifyEvent,
        changes: &mut Changes,
    ) -> Result<(), String> {
        let mask = event.mask;
        if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            return Err("the watch's event queue overflowed".to_owned());
        }
        let Some(dir) = self.by_wd.get(&event.wd).cloned() else {
            if self.retired.contains(&event.wd) {
                return Ok(());
            }
            return Err("an event of an unknown watch".to_owned());
        };
        if mask.contains(AddWatchFlags::IN_UNMOUNT) {
            return Err(format!("a filesystem was unmounted at {:?}", path_text(&dir)));
        }
        let Some(name) = &event.name else {
            // An event on the directory itself.
            if mask.contains(AddWatchFlags::IN_IGNORED) {
                self.by_wd.remove(&event.wd);
                if self.by_path.get(&dir) == Some(&event.wd) {
                    self.by_path.remove(&dir);
                }
                self.retired.insert(event.wd);
            }
            if dir.is_empty() {
                if mask.intersects(
                    AddWatchFlags::IN_DELETE_SELF
                        | AddWatchFlags::IN_MOVE_SELF
                        | AddWatchFlags::IN_IGNORED
                        | AddWatchFlags::IN_ATTRIB,
                ) {
                    return Err("the workspace root was moved, removed or changed".to_owned());
                }
                return Ok(());
            }
            if mask.intersects(
                AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF
                    | AddWatchFlags::IN_IGNORED,
            ) {
                changes.subtrees.push(dir);
            }
            return Ok(());
        };
        let name = name.as_bytes();
        if matches!(name, b".gitignore" | b".ignore" | b".git") {
            return Err(format!("an ignore file changed: {}", path_text(&join(&dir, name))));
        }
        let path = join(&dir, name);
        let namespace = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO;
        if mask.contains(AddWatchFlags::IN_ISDIR) {
            // A directory created, removed, renamed, or its mode changed (it may have become
            // unreadable, or readable): list it again whole, and its parent's names.
            changes.names.insert(dir);
            changes.subtrees.push(path);
        } else if mask.intersects(namespace) {
            changes.names.insert(dir);
            changes.examine.insert(path);
        } else {
            changes.examine.insert(path);
        }
        Ok(())
    }

    /// Drops the watches of `subtree` and every directory below it (they are added again as
    /// the subtree is listed).
    pub(crate) fn forget_subtree(&mut self, subtree: &[u8]) {
        let below: Vec<Vec<u8>> =
            self.by_path.keys().filter(|path| is_at_or_below(path, subtree)).cloned().collect();
        for path in below {
            if let Some(wd) = self.by_path.remove(&path) {
                self.by_wd.remove(&wd);
                self.retired.insert(wd);
                let _ = self.inotify.rm_watch(wd);
            }
        }
    }

    /// A full walk starts: every directory it meets is (re)watched, the rest dropped at its end.
    pub(crate) fn begin_full(&mut self) {
        self.seen = Some(HashSet::new());
        self.outside.clear();
        // The root may have been replaced: this walk watches what is there now.
        if let Ok(metadata) = std::fs::metadata(&self.root) {
            self.root_id = (metadata.dev(), metadata.ino());
        }
        // Recorded before the walk reads them: a change after is a difference next time.
        let root = self.root.clone();
        self.note_git(&root);
        self.pending.clear();
        self.recent.clear();
    }

    /// A full walk ended: watches of directories it did not meet are dropped.
    pub(crate) fn end_full(&mut self) {
        let Some(seen) = self.seen.take() else { return };
        let gone: Vec<Vec<u8>> =
            self.by_path.keys().filter(|path| !seen.contains(*path)).cloned().collect();
        for path in gone {
            if let Some(wd) = self.by_path.remove(&path) {
                self.by_wd.remove(&wd);
                self.retired.insert(wd);
                let _ = self.inotify.rm_watch(wd);
            }
        }
        self.since_full = 0;
        self.last_full = Instant::now();
    }

    /// Watches the directory `path` (relative; `full` is where it is). A watch it did not
    /// have makes the directory pending: listed again at the next checkpoint.
    pub(crate) fn add(&mut self, path: &[u8], full: &Path) {
        if let Some(seen) = &mut self.seen {
            seen.insert(path.to_vec());
        }
        self.note_git(full);
        match self.inotify.add_watch(full, MASK) {
            Ok(wd) => {
                if self.by_path.get(path) == Some(&wd) {
                    return;
                }
                if let Some(old) = self.by_wd.insert(wd, path.to_vec())
                    && self.by_path.get(&old) == Some(&wd)
                {
                    self.by_path.remove(&old);
                }
                if let Some(old_wd) = self.by_path.insert(path.to_vec(), wd)
                    && old_wd != wd
                {
                    self.by_wd.remove(&old_wd);
                    self.retired.insert(old_wd);
                    let _ = self.inotify.rm_watch(old_wd);
                }
                self.retired.remove(&wd);
                self.pending.push(path.to_vec());
            }
            // Gone or replaced since it was listed: its parent's events say so.
            Err(Errno::ENOENT | Errno::ENOTDIR) => {}
            Err(Errno::ENOSPC) => {
                let limit = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
                    .map(|text| text.trim().to_owned())
                    .unwrap_or_else(|_| "?".to_owned());
                self.broken = Some(format!(
                    "the inotify watch limit is reached (fs.inotify.max_user_watches = {limit}); \
                     every checkpoint walks the whole workspace — raise the limit (sysctl \
                     fs.inotify.max_user_watches) and restart the daemon to watch it"
                ));
            }
            Err(errno) => {
                self.doubt
                    .get_or_insert(format!("{} could not be watched ({errno})", full.display()));
            }
        }
    }

    /// Remembers the exclude files a directory's `.git` names (the `ignore` crate reads
    /// `<git dir>/info/exclude`; for a `.git` file, that of the worktree's common directory).
    fn note_git(&mut self, dir: &Path) {
        let dot_git = dir.join(".git");
        let Ok(metadata) = std::fs::metadata(&dot_git) else { return };
        // (A `.git` directory created, removed or replaced is an event named `.git` in the
        // watched directory holding it; what git writes inside it is not our concern.)
        let common = if metadata.is_file() {
            self.note_outside(&dot_git);
            // Follow `gitdir:` and `commondir` as the `ignore` crate does; what cannot be
            // resolved is remembered as missing, so that its appearance is a change.
            let Ok(text) = std::fs::read_to_string(&dot_git) else { return };
            let Some(git_dir) = text.lines().next().and_then(|line| line.strip_prefix("gitdir: "))
            else {
                return;
            };
            let git_dir = PathBuf::from(git_dir);
            let commondir_file = git_dir.join("commondir");
            self.note_outside(&commondir_file);
            let Ok(text) = std::fs::read_to_string(&commondir_file) else { return };
            let Some(line) = text.lines().next() else { return };
            if line.starts_with('.') { git_dir.join(line) } else { PathBuf::from(line) }
        } else {
            dot_git
        };
        let exclude = common.join("info").join("exclude");
        self.note_outside(&exclude);
    }

    /// Remembers what an ignore file outside the watched tree is (once per full walk: a later
    /// change must stay a difference). One changed within the racy window may have changed
    /// again unseen, or after the walk read it: the next checkpoint walks the whole tree.
    fn note_outside(&mut self, path: &Path) {
        if self.outside.contains_key(path) {
            return;
        }
        let id = file_id(path);
        let now = crate::checkpoint::now_ns();
        if let Some(FileId(_, mtime, ctime, _)) = id
            && (mtime >= now - crate::index::RACY_NS || ctime >= now - crate::index::RACY_NS)
        {
            self.doubt.get_or_insert_with(|| format!("{} changed just now", path.display()));
        }
        self.outside.insert(path.to_path_buf(), id);
    }
}

/// Whether `path` is `dir` or below it (`""` is the root, above everything).
pub(crate) fn is_at_or_below(path: &[u8], dir: &[u8]) -> bool {
    dir.is_empty()
        || (path.starts_with(dir) && (path.len() == dir.len() || path[dir.len()] == b'/'))
}

fn path_text(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

//! The writer of one session log and its in-memory fold, held together as [`LiveLog`].
//!
//! Opening for writing takes an exclusive `flock` on the log (one writer per session, across
//! processes and within one), recovers a torn tail, and folds every event into a
//! [`dsh_session::Session`]. Each append writes one whole line, syncs it when the
//! [`SyncPolicy`] says so, and only then folds it.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use dsh_session::{Event, EventData, Session, encode_event};

use crate::error::StoreError;
use crate::log::{TornTail, parse_log};

/// When appends are made durable with `fdatasync`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Sync after each boundary event ([`is_boundary`]); the events between boundaries are
    /// synced by the next one (group commit). The default.
    #[default]
    Boundaries,
    /// Sync after every event.
    Always,
    /// Never sync (the OS writes back when it likes). Only for benchmarks and tests.
    Never,
}

/// Whether `data` is a boundary event: one after which [`SyncPolicy::Boundaries`] syncs.
///
/// Boundaries are the events a user or the model acted on or saw (messages, results, decisions,
/// step and turn ends, surface rewrites). The streaming and bookkeeping events in between ride on
/// the next boundary's sync.
pub fn is_boundary(data: &EventData) -> bool {
    // Exhaustive on purpose: a new event kind must decide whether it is a boundary.
    match data {
        EventData::SessionMeta(_)
        | EventData::TurnStart(_)
        | EventData::TurnEnd(_)
        | EventData::UserMessage(_)
        | EventData::SteeringMessage(_)
        | EventData::ContextMessage(_)
        | EventData::AssistantMessage(_)
        | EventData::ToolResult(_)
        | EventData::PlanUpdate(_)
        // Synced: after a crash, the parent's log names the child to close.
        | EventData::TaskSpawn(_)
        | EventData::ApprovalDecision(_)
        | EventData::StepEnd(_)
        | EventData::StepError(_)
        | EventData::SurfaceReplace(_)
        | EventData::CompactSummary(_)
        | EventData::WorkspaceRewind(_)
        | EventData::HookRun(_) => true,
        EventData::StepStart(_)
        | EventData::RequestHeader(_)
        | EventData::RequestHeaderDelta(_)
        | EventData::RequestSent(_)
        | EventData::AssistantChunk(_)
        | EventData::ToolCall(_)
        | EventData::ToolProgress(_)
        | EventData::ApprovalRequest(_)
        | EventData::LlmRetry(_)
        | EventData::McpWait(_)
        | EventData::TurnLimit(_)
        | EventData::CompactStart(_)
        | EventData::WorkspaceCheckpoint(_) => false,
    }
}

/// The current unix time in milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// One session's log opened for writing, plus every event folded into a [`Session`].
///
/// The agent loop holds one of these per live session: [`LiveLog::append`] is the only way an
/// event enters the log, and [`LiveLog::session`] is the fold over exactly what was written.
/// The file stays locked until the `LiveLog` is dropped.
#[derive(Debug)]
pub struct LiveLog {
    file: File,
    path: PathBuf,
    id: String,
    session: Session,
    policy: SyncPolicy,
    /// Bytes of whole lines in the file.
    len: u64,
    /// Whether written bytes may not be synced yet.
    dirty: bool,
    poisoned: bool,
    recovered: Option<TornTail>,
}

impl LiveLog {
    /// Opens an existing log for appending: locks it, decodes and folds every whole event. A
    /// torn tail is reported ([`LiveLog::recovered`]) and left in place until the first append,
    /// which moves it aside into `<id>.jsonl.torn-<offset>` and truncates the log to its last
    /// whole event: a log opened only to be read is never modified.
    ///
    /// Fails with [`StoreError::Locked`] when another writer holds the log, with a decode error
    /// naming the line when a complete line is corrupt (nothing is modified then), and with
    /// [`StoreError::UnsupportedFormatVersion`] for a log of another format version.
    pub fn open(path: &Path, policy: SyncPolicy) -> Result<Self, StoreError> {
        let id = session_id_of(path);
        let io = |action| {
            let path = path.to_owned();
            move |source| StoreError::Io { action, path, cause: source }
        };
        let mut file = File::options()
            .read(true)
            .append(true)
            .open(path)
            .map_err(io("opening session log"))?;
        lock(&file, &id, path)?;
        // A log written by an older build, or copied in, may be readable by others: the writer
        // makes it private.
        let mode = file.metadata().map_err(io("reading session log"))?.permissions().mode();
        if mode & 0o077 != 0 {
            restrict(path, 0o600)?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io("reading session log"))?;
        let read = parse_log(path, &bytes)?;
        // A torn tail stays where it is until this writer appends: a log opened only to be
        // looked at (a view of a session the daemon loads) is never changed.
        if read.events.is_empty() {
            return Err(StoreError::NoMeta { path: path.to_owned() });
        }
        Ok(LiveLog {
            file,
            path: path.to_owned(),
            id,
            session: Session::from_events(read.events),
            policy,
            len: read.len,
            dirty: false,
            poisoned: false,
            recovered: read.torn,
        })
    }

    /// Creates a new log holding `events` (which must start with `session/meta` at seq 0), locked,
    /// atomically: the file appears under its name complete and synced, or not at all.
    pub(crate) fn create_with(
        path: &Path,
        events: Vec<Event>,
        policy: SyncPolicy,
    ) -> Result<Self, StoreError> {
        let id = session_id_of(path);
        let mut bytes = Vec::new();
        for event in &events {
            bytes.extend_from_slice(encode_event(event).as_bytes());
            bytes.push(b'\n');
        }
        let file = create_locked(path, &id, &bytes)?;
        Ok(LiveLog {
            file,
            path: path.to_owned(),
            id,
            session: Session::from_events(events),
            policy,
            len: bytes.len() as u64,
            dirty: false,
            poisoned: false,
            recovered: None,
        })
    }

    /// Appends an event stamped with the next seq and the current time.
    pub fn append(&mut self, data: EventData) -> Result<&Event, StoreError> {
        self.append_at(data, now_ms())
    }

    /// Appends an event stamped with the next seq and `time_ms` (deterministic tests, imports).
    ///
    /// The line is written (and synced, per the policy) before the event is folded: when this
    /// returns an error, the fold does not have the event.
    pub fn append_at(&mut self, data: EventData, time_ms: u64) -> Result<&Event, StoreError> {
        self.check_poisoned()?;
        let seq = self.session.next_seq();
        let event = Event { seq, time: time_ms, data };
        let mut line = encode_event(&event).into_bytes();
        line.push(b'\n');
        let sync = match self.policy {
            SyncPolicy::Always => true,
            SyncPolicy::Boundaries => is_boundary(&event.data),
            SyncPolicy::Never => false,
        };
        self.write_line(&line, sync)?;
        if let Err(error) = self.session.append(event) {
            // Unreachable: the seq came from the fold itself. Refuse to go on rather than diverge.
            self.poisoned = true;
            let line = error.found as usize + 1;
            return Err(StoreError::SeqMismatch {
                path: self.path.clone(),
                line,
                expected: error.expected,
                found: error.found,
            });
        }
        match self.session.events().last() {
            Some(event) => Ok(event),
            None => Err(StoreError::NoMeta { path: self.path.clone() }),
        }
    }

    /// Syncs every written event to disk now (`fdatasync`), whatever the policy.
    pub fn sync(&mut self) -> Result<(), StoreError> {
        self.check_poisoned()?;
        if self.dirty {
            self.sync_data()?;
        }
        Ok(())
    }

    /// Syncs and closes the log, releasing its lock.
    pub fn close(mut self) -> Result<(), StoreError> {
        self.sync()
    }

    /// The fold over every event of the log.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The session id (the log's file stem).
    pub fn session_id(&self) -> &str {
        &self.id
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sync policy in force.
    pub fn policy(&self) -> SyncPolicy {
        self.policy
    }

    /// Changes the sync policy; a switch away from [`SyncPolicy::Never`] does not sync by itself.
    pub fn set_policy(&mut self, policy: SyncPolicy) {
        self.policy = policy;
    }

    /// The torn tail that opening this log found, if any (with its sidecar file once the first
    /// append moved it aside).
    pub fn recovered(&self) -> Option<&TornTail> {
        self.recovered.as_ref()
    }

    /// The size of the log in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.len
    }

    fn check_poisoned(&self) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned { session: self.id.clone(), path: self.path.clone() });
        }
        Ok(())
    }

    /// Moves a torn tail aside (`<id>.jsonl.torn-<offset>`) and truncates the log to its last
    /// whole event, synced; the first append does it by itself. Nothing to do without one.
    pub fn recover_torn_tail(&mut self) -> Result<(), StoreError> {
        let Some(torn) = self.recovered.as_mut().filter(|torn| torn.sidecar.is_none()) else {
            return Ok(());
        };
        let io = |action| {
            let path = self.path.clone();
            move |source| StoreError::Io { action, path, cause: source }
        };
        let mut tail = Vec::new();
        let mut reader = &self.file;
        reader.seek(std::io::SeekFrom::Start(torn.offset)).map_err(io("reading session log"))?;
        reader.read_to_end(&mut tail).map_err(io("reading session log"))?;
        let sidecar = move_aside(&self.path, torn.offset, &tail)?;
        self.file.set_len(torn.offset).map_err(io("truncating the torn tail of session log"))?;
        self.file.sync_all().map_err(io("syncing session log"))?;
        torn.sidecar = Some(sidecar);
        Ok(())
    }

    fn write_line(&mut self, line: &[u8], sync: bool) -> Result<(), StoreError> {
        self.recover_torn_tail()?;
        // One `write` of the whole line through an O_APPEND descriptor: no userspace buffer is
        // held across events, so a crash tears at most the line being written.
        if let Err(source) = (&self.file).write_all(line) {
            // A short write left part of a line; cut it off so the next append starts on a line
            // boundary. If even that fails, stop writing: the next open recovers the torn tail.
            if self.file.set_len(self.len).is_err() {
                self.poisoned = true;
            }
            return Err(StoreError::Io {
                action: "appending to session log",
                path: self.path.clone(),
                cause: source,
            });
        }
        self.len += line.len() as u64;
        self.dirty = true;
        if sync {
            self.sync_data()?;
        }
        Ok(())
    }

    fn sync_data(&mut self) -> Result<(), StoreError> {
        if let Err(source) = self.file.sync_data() {
            // After a failed fsync the kernel may have dropped the dirty pages: what is on disk
            // is unknown, so this writer stops and a reopen reads what actually survived.
            self.poisoned = true;
            return Err(StoreError::Io {
                action: "syncing session log",
                path: self.path.clone(),
                cause: source,
            });
        }
        self.dirty = false;
        Ok(())
    }
}

impl Drop for LiveLog {
    fn drop(&mut self) {
        // Best effort: a clean shutdown calls `close` and sees errors; a dropped writer still
        // makes its group-committed tail durable unless told never to sync.
        if self.dirty && !self.poisoned && self.policy != SyncPolicy::Never {
            let _ = self.file.sync_data();
        }
    }
}

/// The session id a log path names: its file stem.
pub(crate) fn session_id_of(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned())
}

fn lock(file: &File, id: &str, path: &Path) -> Result<(), StoreError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => {
            Err(StoreError::Locked { session: id.to_owned(), path: path.to_owned() })
        }
        Err(TryLockError::Error(source)) => Err(StoreError::Io {
            action: "locking session log",
            path: path.to_owned(),
            cause: source,
        }),
    }
}

/// Syncs a directory so that a created, linked or removed entry in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|source| StoreError::Io {
        action: "syncing directory",
        path: dir.to_owned(),
        cause: source,
    })
}

/// Sets exactly `mode` on `path` (the mode given at creation is narrowed by the umask; this
/// makes it exact, so a file is never unreadable to its owner either).
fn restrict(path: &Path, mode: u32) -> Result<(), StoreError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        StoreError::Io {
            action: "restricting permissions of",
            path: path.to_owned(),
            cause: source,
        }
    })
}

/// Creates `dir` and its missing ancestors, syncing the parent of each one created so that the
/// new directories survive a power loss along with the first log written into them.
fn create_dirs(dir: &Path) -> Result<(), StoreError> {
    if dir.is_dir() {
        return Ok(());
    }
    let missing: Vec<&Path> = dir.ancestors().take_while(|ancestor| !ancestor.exists()).collect();
    // Private whatever the umask: the directories name the user's workspaces and sessions.
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|source| {
        StoreError::Io { action: "creating directory", path: dir.to_owned(), cause: source }
    })?;
    for created in &missing {
        restrict(created, 0o700)?;
    }
    // Parents first, so each directory entry is durable once its own directory is.
    for created in missing.iter().rev() {
        match created.parent() {
            Some(parent) if parent.as_os_str().is_empty() => sync_dir(Path::new("."))?,
            Some(parent) => sync_dir(parent)?,
            None => {}
        }
    }
    Ok(())
}

/// Creates `path` with `contents`, locked, without ever exposing a partial file or replacing an
/// existing one: the bytes go to a hidden temporary file that is locked and synced first, then
/// hard-linked under the final name (which fails if the name exists). The lock is on the inode,
/// so it covers the final name from its first instant.
fn create_locked(path: &Path, id: &str, contents: &[u8]) -> Result<File, StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let io = |action, path: &Path| {
        let path = path.to_owned();
        move |source| StoreError::Io { action, path, cause: source }
    };
    create_dirs(dir)?;
    if path.exists() {
        return Err(StoreError::SessionExists { id: id.to_owned(), path: path.to_owned() });
    }
    let file_name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let temp = dir.join(format!(".{file_name}.{:08x}.tmp", fastrand::u32(..)));
    let mut file = File::options()
        .read(true)
        .append(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(io("creating session log", &temp))?;
    let result = (|| {
        // 0600 whatever the umask: a log holds the user's code and conversation.
        restrict(&temp, 0o600)?;
        lock(&file, id, path)?;
        file.write_all(contents).map_err(io("writing session log", &temp))?;
        file.sync_data().map_err(io("syncing session log", &temp))?;
        std::fs::hard_link(&temp, path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                StoreError::SessionExists { id: id.to_owned(), path: path.to_owned() }
            } else {
                StoreError::Io {
                    action: "linking session log",
                    path: path.to_owned(),
                    cause: source,
                }
            }
        })
    })();
    let removed = std::fs::remove_file(&temp).map_err(io("removing temporary file", &temp));
    result?;
    removed?;
    sync_dir(dir)?;
    Ok(file)
}

/// Writes the torn bytes into `<log>.torn-<offset>` next to the log, synced. An existing sidecar
/// with the same bytes (an earlier recovery that crashed before truncating) is reused; one with
/// other bytes is kept and a numbered name is used instead.
fn move_aside(path: &Path, offset: u64, torn: &[u8]) -> Result<PathBuf, StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    for attempt in 0u32.. {
        let name = match attempt {
            0 => format!("{file_name}.torn-{offset}"),
            n => format!("{file_name}.torn-{offset}.{n}"),
        };
        let sidecar = dir.join(name);
        let io = |action| {
            let sidecar = sidecar.clone();
            move |source| StoreError::Io { action, path: sidecar, cause: source }
        };
        match File::options().write(true).create_new(true).mode(0o600).open(&sidecar) {
            Ok(mut file) => {
                restrict(&sidecar, 0o600)?;
                file.write_all(torn).map_err(io("writing torn-tail sidecar"))?;
                file.sync_all().map_err(io("syncing torn-tail sidecar"))?;
                sync_dir(dir)?;
                return Ok(sidecar);
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                let existing = std::fs::read(&sidecar).map_err(io("reading torn-tail sidecar"))?;
                if existing == torn {
                    return Ok(sidecar);
                }
            }
            Err(source) => return Err(io("creating torn-tail sidecar")(source)),
        }
    }
    // `0u32..` only ends after u32::MAX sidecars for one offset.
    Err(StoreError::Io {
        action: "creating torn-tail sidecar",
        path: path.to_owned(),
        cause: std::io::Error::other("too many sidecars"),
    })
}

//! The crate's one public error type.

use std::io;
use std::path::PathBuf;

use dsh_session::DecodeError;

/// Everything that can go wrong in the store. Messages are for users: they name the session or
/// the file, and say what to do where there is something to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A filesystem operation failed.
    #[error("{action} {}: {cause}", path.display())]
    Io {
        /// What was being done (`opening`, `reading`, `writing`, ...), lowercase.
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error. (Not the error's `source()`: the message already says it, and a
        /// chain would print it twice.)
        cause: io::Error,
    },
    /// Another writer holds the session's log lock.
    #[error(
        "session {session} is in use: another dsh process holds the write lock on {} \
         (only one writer per session; reading it is still possible)",
        path.display()
    )]
    Locked {
        /// The session.
        session: String,
        /// Its log.
        path: PathBuf,
    },
    /// A complete line of the log could not be decoded (the error names the 1-based line).
    #[error("session log {}: {cause}", path.display())]
    Decode {
        /// The log.
        path: PathBuf,
        /// What is wrong, and on which line (in the message, not the `source()` chain).
        cause: DecodeError,
    },
    /// The log's `session/meta` declares a format version this build does not read.
    #[error(
        "session log {} has format version {found}; this build reads only version {supported} \
         (logs are never migrated)",
        path.display()
    )]
    UnsupportedFormatVersion {
        /// The log.
        path: PathBuf,
        /// The version found.
        found: u64,
        /// The version this build reads ([`dsh_session::FORMAT_VERSION`]).
        supported: u32,
    },
    /// A line's `seq` is not its position in the log.
    #[error("session log {}: line {line}: seq {found} where {expected} was expected", path.display())]
    SeqMismatch {
        /// The log.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The seq the position demands.
        expected: u64,
        /// The seq found.
        found: u64,
    },
    /// The log holds no whole line: not even its `session/meta`.
    #[error(
        "session log {} is empty ({len} bytes, no whole line): it holds no session/meta, so          it is no session; remove it or restore it from a backup",
        path.display()
    )]
    Empty {
        /// The log.
        path: PathBuf,
        /// Its length in bytes.
        len: u64,
    },
    /// The log does not open with a `session/meta` event.
    #[error("session log {} does not open with session/meta", path.display())]
    NoMeta {
        /// The log.
        path: PathBuf,
    },
    /// A session id given by a user is not acceptable.
    #[error(
        "invalid session id {id:?}: {reason} (ids use letters, digits, `-`, `_` and `.`, \
         at most 128 characters, and do not start with `.`)"
    )]
    InvalidSessionId {
        /// The id as given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A session with that id already exists.
    #[error("session {id} already exists at {}", path.display())]
    SessionExists {
        /// The id.
        id: String,
        /// Its log.
        path: PathBuf,
    },
    /// No session with that id.
    #[error("no session {id} under {}", home.display())]
    SessionNotFound {
        /// The id.
        id: String,
        /// Where it was looked for.
        home: PathBuf,
    },
    /// The same id exists in several workspaces.
    #[error("session id {id} exists in several workspaces: {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    AmbiguousSession {
        /// The id.
        id: String,
        /// Every log with that id.
        paths: Vec<PathBuf>,
    },
    /// A fork point outside the parent log.
    #[error(
        "cannot fork session {parent} at seq {at_seq}: the fork keeps events with seq < at_seq, \
         so at_seq must be between 1 and {len} (the log's length)"
    )]
    ForkOutOfRange {
        /// The parent session.
        parent: String,
        /// The seq asked for.
        at_seq: u64,
        /// The parent's number of events.
        len: u64,
    },
    /// An earlier write or sync of this log failed; the writer refuses to go on.
    #[error(
        "session {session}: an earlier write or sync of {} failed, so this writer stopped; \
         reopen the session to recover from what is on disk",
        path.display()
    )]
    Poisoned {
        /// The session.
        session: String,
        /// Its log.
        path: PathBuf,
    },
    /// No state directory could be derived from the environment.
    #[error("cannot locate the dsh state directory: set DSH_HOME, XDG_STATE_HOME or HOME")]
    NoHome,
}

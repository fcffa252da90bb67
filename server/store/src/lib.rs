//! The session store of dsh: one append-only JSONL log per session, grouped per workspace under
//! the state directory, with one locked writer per log, an explicit durability contract,
//! torn-tail recovery, forks and session listings.
//!
//! Layout (see [`DshHome`], [`Workspace`]):
//! `$DSH_HOME/workspaces/<dirname>-<hash>/sessions/<session-id>.jsonl`, where `$DSH_HOME` is an
//! explicit path, else the `DSH_HOME` variable, else `$XDG_STATE_HOME/dsh`, else
//! `~/.local/state/dsh`.
//!
//! The writer is [`LiveLog`]: the locked file plus the in-memory [`dsh_session::Session`] fold,
//! so the agent loop holds one object per live session. Readers ([`read_log`], listings,
//! [`fork_log`]) take no lock and are always allowed.
//!
//! This crate does **not** define the log's vocabulary or any fold over it (that is
//! `dsh-session`, pure), does not run an async runtime (calls block; the session's owner task
//! calls them), and keeps no index beside the logs: listings fold the logs themselves.
//!
//! # Durability contract
//!
//! - **One write per event.** Every event is written with one `write` of its whole line
//!   (`<json>\n`) through an `O_APPEND` descriptor; nothing is buffered in userspace across
//!   events. A crash can therefore tear at most the one line being written, at the end of the
//!   file. A failed or short write is cut back to the last whole line before the error returns.
//! - **Write, then fold.** An event is folded into the in-memory session only after its write
//!   (and its sync, when one is due) succeeded: the fold never holds an event the file does not.
//! - **Sync at boundaries** ([`SyncPolicy::Boundaries`], the default). After a *boundary event*
//!   the log is `fdatasync`ed before `append` returns: `session/meta`, `turn/start`, `turn/end`,
//!   `user/message`, `steering/message`, `context/message`, `assistant/message`, `tool/result`,
//!   `approval/decision`, `step/end`, `step/error`, `surface/replace`, `compact/summary`.
//!   The other events — `assistant/chunk`, `tool/progress`, `tool/call`, `approval/request`,
//!   `request/header`, `request/header-delta`, `request/sent`, `step/start`, `llm/retry`,
//!   `compact/start` — are not synced on their own; the next boundary's sync makes them durable
//!   together with it (group commit). [`is_boundary`] is the definition.
//! - **What a power loss may cost:** at most the events written after the last boundary sync,
//!   which is the tail of the step in flight (its `step/start`, header events, `request/sent`,
//!   chunks, tool bookkeeping) — never an event in the middle of the log, never a message,
//!   result, decision or step end that `append` reported done. What survives is a prefix of the
//!   log, possibly ending in a torn line, which the next open recovers. A process crash (the OS
//!   still up) loses nothing that `append` returned: the page cache keeps it. (Caveat: a
//!   filesystem may write the unsynced tail back out of order, so after a power loss that tail
//!   can also hold a whole line of garbage, e.g. a zero-filled block; opening then fails with the
//!   decode error naming that line rather than guessing, and the file is left as it is.)
//! - **Recovery.** Opening for writing detects an incomplete final line (no trailing `\n`),
//!   reports its byte offset and length ([`TornTail`]), moves its bytes into a sidecar file
//!   `<id>.jsonl.torn-<offset>` next to the log (synced; never silently discarded), truncates the
//!   log to its last whole event, and appends from there. A *complete* line that does not decode
//!   is never skipped: opening fails with an error naming the line, and nothing is modified.
//! - **Creation is atomic.** A new log (a new session or a fork) is written to a hidden temporary
//!   file, locked and synced, then hard-linked under its name and the directory synced: a log
//!   appears whole, or not at all, and an existing log is never replaced.
//! - **Sync failures stop the writer.** After a failed `fdatasync` the kernel may have dropped
//!   the dirty pages, so what is on disk is unknown: the writer refuses further appends
//!   ([`StoreError::Poisoned`]) and a reopen folds what actually survived.
//! - [`SyncPolicy::Always`] syncs after every event; [`SyncPolicy::Never`] never syncs (benchmarks
//!   and tests only); [`LiveLog::sync`] forces a sync, and [`LiveLog::close`] syncs before
//!   releasing the lock (a dropped writer syncs on a best-effort basis).
//!
//! One writer per log: opening for writing takes an exclusive `flock` on the file
//! ([`std::fs::File::try_lock`]); a second writer — another process, or a second open in the same
//! process — gets [`StoreError::Locked`], which names the session. The lock dies with the process,
//! so a crash never leaves a stale lock behind.

#![warn(missing_docs)]

mod error;
mod fork;
mod home;
mod id;
mod list;
mod live;
mod log;

pub use error::StoreError;
pub use fork::{FORK_CUT, FORK_TOOL_RESULT, fork_child_log, fork_events, fork_log};
pub use home::{DshHome, LOG_EXTENSION, Workspace, objects_dir_of_log, workspace_dir_name};
pub use id::{SessionId, utc_from_unix_ms};
pub use list::{SessionListing, SessionSummary, TITLE_MAX_CHARS, summarize, title_of};
pub use live::{LiveLog, SyncPolicy, is_boundary, now_ms};
pub use log::{LogRead, TornTail, read_log};

#[cfg(test)]
mod tests;

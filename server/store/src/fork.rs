//! Forking a session: a new log that starts as a prefix of its parent's.
//!
//! The fork keeps the parent's events with `seq < at_seq`, replaces the first one with its own
//! `session/meta` (carrying `forkedFrom`), and closes whatever the cut left open — unanswered tool
//! calls, an open step, an open turn — so the new log is well-formed and ready for a new turn.

use std::path::Path;

use dsh_session::{
    Closing, Event, EventData, FORMAT_VERSION, ForkOrigin, ParentLink, SessionMeta, SessionPin,
    StopReason, closing_events,
};

use crate::error::StoreError;
use crate::id::SessionId;
use crate::live::{LiveLog, SyncPolicy};
use crate::log::read_log;

/// The content of the `tool/result` that answers a tool call a fork cut off.
pub const FORK_TOOL_RESULT: &str = "not run: the session was forked before this tool call ran";

/// The error text of the `step/error` and `turn/end` a fork appends to close what it cut.
pub const FORK_CUT: &str = "cut by fork";

/// Builds the events of a fork of `parent` (a whole log, starting with `session/meta`).
///
/// `at_seq` is exclusive: the fork keeps events with `seq < at_seq`; `None` keeps the whole log.
/// `at_seq` must lie in `1..=parent.len()`. Closing events are stamped `time_ms`; so is the new
/// `session/meta`, whose workspace and pin are the parent's.
pub fn fork_events(
    parent: &[Event],
    at_seq: Option<u64>,
    new_id: &SessionId,
    time_ms: u64,
) -> Result<Vec<Event>, StoreError> {
    let len = parent.len() as u64;
    let parent_meta = match parent.first().map(|event| &event.data) {
        Some(EventData::SessionMeta(meta)) => meta,
        _ => {
            return Err(StoreError::NoMeta { path: Path::new("<parent session>").to_owned() });
        }
    };
    let at_seq = at_seq.unwrap_or(len);
    if at_seq == 0 || at_seq > len {
        return Err(StoreError::ForkOutOfRange {
            parent: parent_meta.session_id.clone(),
            at_seq,
            len,
        });
    }
    let meta = SessionMeta {
        format_version: FORMAT_VERSION,
        session_id: new_id.to_string(),
        workspace: parent_meta.workspace.clone(),
        forked_from: Some(ForkOrigin { session_id: parent_meta.session_id.clone(), seq: at_seq }),
        pin: parent_meta.pin.clone(),
        parent: None,
    };
    let mut events = Vec::with_capacity(at_seq as usize + 4);
    events.push(Event { seq: 0, time: time_ms, data: EventData::SessionMeta(meta) });
    events.extend(parent[1..at_seq as usize].iter().cloned());

    let closing = closing_events(
        &events,
        Closing { reason: StopReason::Cancelled, error: FORK_CUT, tool_result: FORK_TOOL_RESULT },
    );
    for data in closing {
        let seq = events.len() as u64;
        events.push(Event { seq, time: time_ms, data });
    }
    Ok(events)
}

/// Forks the log at `parent` into a new session `new_id` in the same directory, and opens the
/// fork for writing. The parent is only read (no lock needed; a torn tail of a running parent is
/// ignored). See [`fork_events`] for what the fork holds; `pin`, when given, is the fork's pin
/// instead of its parent's.
pub fn fork_log(
    parent: &Path,
    at_seq: Option<u64>,
    new_id: &SessionId,
    time_ms: u64,
    policy: SyncPolicy,
    pin: Option<SessionPin>,
) -> Result<LiveLog, StoreError> {
    fork_child_log(parent, at_seq, new_id, time_ms, policy, pin, None)
}

/// [`fork_log`] for the child session of a `task` call: its `session/meta` names `link` too
/// (`None`: an ordinary fork).
pub fn fork_child_log(
    parent: &Path,
    at_seq: Option<u64>,
    new_id: &SessionId,
    time_ms: u64,
    policy: SyncPolicy,
    pin: Option<SessionPin>,
    link: Option<ParentLink>,
) -> Result<LiveLog, StoreError> {
    let read = read_log(parent)?;
    let mut events =
        fork_events(&read.events, at_seq, new_id, time_ms).map_err(|error| match error {
            StoreError::NoMeta { .. } => StoreError::NoMeta { path: parent.to_owned() },
            other => other,
        })?;
    if let (Some(pin), Some(EventData::SessionMeta(meta))) =
        (pin, events.first_mut().map(|event| &mut event.data))
    {
        meta.pin = Some(pin);
    }
    if let Some(EventData::SessionMeta(meta)) = events.first_mut().map(|event| &mut event.data) {
        meta.parent = link;
    }
    let dir = parent.parent().unwrap_or(Path::new("."));
    let path = dir.join(format!("{new_id}.jsonl"));
    LiveLog::create_with(&path, events, policy)
}

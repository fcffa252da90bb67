//! Forking a session: a new log that starts as a prefix of its parent's.
//!
//! The fork keeps the parent's events with `seq < at_seq`, replaces the first one with its own
//! `session/meta` (carrying `forkedFrom`), and closes whatever the cut left open — unanswered tool
//! calls, an open step, an open turn — so the new log is well-formed and ready for a new turn.

use std::path::Path;

use dsh_session::{
    Event, EventData, FORMAT_VERSION, ForkOrigin, SessionMeta, StepError, StopReason, ToolResult,
    TurnEnd,
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
/// `session/meta`, whose workspace is the parent's.
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
    };
    let mut events = Vec::with_capacity(at_seq as usize + 4);
    events.push(Event { seq: 0, time: time_ms, data: EventData::SessionMeta(meta) });
    events.extend(parent[1..at_seq as usize].iter().cloned());

    let closing = closing_events(&events);
    for data in closing {
        let seq = events.len() as u64;
        events.push(Event { seq, time: time_ms, data });
    }
    Ok(events)
}

/// The events that close what `events` leaves open, in order: a `tool/result` for each
/// unanswered call of the open step, a `step/error` for the step, a `turn/end` for the turn.
fn closing_events(events: &[Event]) -> Vec<EventData> {
    let mut open_turn: Option<u64> = None;
    let mut open_step: Option<u64> = None;
    // (call id, tool name) of the open step's calls not answered yet.
    let mut pending: Vec<(String, String)> = Vec::new();
    for event in events {
        match &event.data {
            EventData::TurnStart(start) => open_turn = Some(start.turn),
            EventData::TurnEnd(_) => {
                open_turn = None;
                open_step = None;
                pending.clear();
            }
            EventData::StepStart(start) => {
                open_step = Some(start.step);
                pending.clear();
            }
            EventData::AssistantMessage(turn) if open_step.is_some() => pending.extend(
                turn.message.tool_calls.iter().map(|call| (call.id.clone(), call.name.clone())),
            ),
            EventData::ToolResult(result) => pending.retain(|(id, _)| *id != result.call_id),
            EventData::StepEnd(_) | EventData::StepError(_) => {
                open_step = None;
                pending.clear();
            }
            _ => {}
        }
    }
    let mut closing = Vec::new();
    if let Some(step) = open_step {
        closing.extend(pending.into_iter().map(|(call_id, name)| {
            EventData::ToolResult(ToolResult {
                call_id,
                name,
                content: FORK_TOOL_RESULT.to_owned(),
                is_error: true,
            })
        }));
        closing.push(EventData::StepError(StepError {
            step,
            error: FORK_CUT.to_owned(),
            cancelled: true,
        }));
    }
    if let Some(turn) = open_turn {
        closing.push(EventData::TurnEnd(TurnEnd {
            turn,
            reason: StopReason::Cancelled,
            error: Some(FORK_CUT.to_owned()),
        }));
    }
    closing
}

/// Forks the log at `parent` into a new session `new_id` in the same directory, and opens the
/// fork for writing. The parent is only read (no lock needed; a torn tail of a running parent is
/// ignored). See [`fork_events`] for what the fork holds.
pub fn fork_log(
    parent: &Path,
    at_seq: Option<u64>,
    new_id: &SessionId,
    time_ms: u64,
    policy: SyncPolicy,
) -> Result<LiveLog, StoreError> {
    let read = read_log(parent)?;
    let events =
        fork_events(&read.events, at_seq, new_id, time_ms).map_err(|error| match error {
            StoreError::NoMeta { .. } => StoreError::NoMeta { path: parent.to_owned() },
            other => other,
        })?;
    let dir = parent.parent().unwrap_or(Path::new("."));
    let path = dir.join(format!("{new_id}.jsonl"));
    LiveLog::create_with(&path, events, policy)
}

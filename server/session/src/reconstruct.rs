//! Rebuilding any step's request from the log alone.
//!
//! A step's messages are the derivation over `events[..step_start_seq)` — the `step/start` event
//! is the reconstruction boundary, unconditionally. Its header is the fold after its own header
//! events (which sit between its `step/start` and its first response event) or the fold carried
//! forward from earlier steps.

use std::collections::HashMap;
use std::sync::Arc;

use crate::event::{Event, EventData, RequestSent, Usage};
use crate::header::fold_header_event;
use crate::message::{GenerateRequest, Message, derive_event_message};
use crate::surface::{Session, SurfaceEntry, SurfaceFold};

/// Everything "what the model saw" needs about one step, rebuilt from the log.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRequest {
    /// The step number.
    pub step: u64,
    /// Its turn.
    pub turn: u64,
    /// Seq of its `step/start`: messages come from events before it.
    pub boundary_seq: u64,
    /// Seqs of the step's own header events (empty when the header carried forward).
    pub header_events: Vec<u64>,
    /// The surface at the boundary, each message with the seq of the node it came from.
    pub surface: Vec<SurfaceEntry>,
    /// The request itself.
    pub request: GenerateRequest,
    /// The step's `request/sent` record, when it got that far.
    pub sent: Option<RequestSent>,
    /// The step's usage, when it ended.
    pub usage: Option<Usage>,
}

/// Why a step's request could not be rebuilt.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReconstructError {
    /// No `step/start` with that number.
    #[error("step {step} is out of range: the log has {last} steps")]
    StepOutOfRange {
        /// The step asked for.
        step: u64,
        /// The last step in the log.
        last: u64,
    },
    /// The step has no header in the fold: the log is malformed.
    #[error("step {step} has no request header in the log")]
    NoHeader {
        /// The step.
        step: u64,
    },
}

/// Rebuilds the request of `step` (1-based) from the log.
pub fn reconstruct(events: &[Event], step: u64) -> Result<GenerateRequest, ReconstructError> {
    reconstruct_step(events, step).map(|rebuilt| rebuilt.request)
}

/// Rebuilds the request of `step` with its provenance (boundary, header events, node seqs).
pub fn reconstruct_step(events: &[Event], step: u64) -> Result<StepRequest, ReconstructError> {
    let found = events.iter().enumerate().find_map(|(index, event)| match &event.data {
        EventData::StepStart(start) if start.step == step => Some((index, start.turn)),
        _ => None,
    });
    let Some((boundary, turn)) = found else {
        let last = events
            .iter()
            .filter_map(|event| match &event.data {
                EventData::StepStart(start) => Some(start.step),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        return Err(ReconstructError::StepOutOfRange { step, last });
    };
    let project = |event: &Event| derive_event_message(event).map(Arc::new);
    rebuild(events, boundary, (step, turn), &events[..boundary], project)
}

/// [`reconstruct_step`] from a loaded session, the same fresh fold without its bulk: the
/// session's step index finds the boundary, and only the events that can shape a request are
/// folded — the others are no-ops for the fold (`shapes_request`). On a long log this is what
/// makes "what the model saw" cheap: most events are streamed chunks.
pub fn reconstruct_session_step(
    session: &Session,
    step: u64,
) -> Result<StepRequest, ReconstructError> {
    session_step(session, step, |event| derive_event_message(event).map(Arc::new))
}

/// [`reconstruct_session_step`] sharing the session's own messages. The fold is as fresh —
/// which nodes, in what order, under which header — but a node still on the session's surface
/// takes the message the session projected from the same event rather than projecting it
/// again: [`derive_event_message`] is pure and a node is named by the seq of its event, so the
/// two are equal, and a long conversation's texts are not all copied (tens of megabytes, most
/// of the cost of the rebuild). "What the model saw" uses it. The loop's invariant check, which
/// holds the loop's request against the log, projects every event afresh
/// ([`reconstruct_session_step`]) so that it never compares a message with itself.
pub fn reconstruct_session_step_shared(
    session: &Session,
    step: u64,
) -> Result<StepRequest, ReconstructError> {
    let projected: HashMap<u64, &Arc<Message>> =
        session.surface().iter().map(|node| (node.id, &node.message)).collect();
    session_step(session, step, |event| match projected.get(&event.seq) {
        Some(message) => Some(Arc::clone(message)),
        None => derive_event_message(event).map(Arc::new),
    })
}

/// The request of `step` of `session`, each node's message from `project`.
fn session_step(
    session: &Session,
    step: u64,
    project: impl FnMut(&Event) -> Option<Arc<Message>>,
) -> Result<StepRequest, ReconstructError> {
    let events = session.events();
    let found = session.steps().iter().find(|index| index.step == step);
    let Some(index) = found else {
        let last = session.steps().iter().map(|index| index.step).max().unwrap_or(0);
        return Err(ReconstructError::StepOutOfRange { step, last });
    };
    // Seqs are positions: the session accepts only the next seq.
    let boundary = usize::try_from(index.start_seq).unwrap_or(usize::MAX);
    if boundary >= events.len() {
        return Err(ReconstructError::StepOutOfRange { step, last: session.last_step() });
    }
    let shaping = session.shaping();
    let before = shaping.partition_point(|seq| *seq < index.start_seq);
    let prefix = shaping[..before].iter().filter_map(|seq| events.get(*seq as usize));
    rebuild(events, boundary, (index.step, index.turn), prefix, project)
}

/// The request of `step` (of `turn`) whose `step/start` is `events[boundary]`, from a fold over
/// `prefix` — the events before the boundary, all of them or all that can shape a request —
/// each node's message from `project`.
fn rebuild<'a>(
    events: &[Event],
    boundary: usize,
    (step, turn): (u64, u64),
    prefix: impl IntoIterator<Item = &'a Event>,
    mut project: impl FnMut(&Event) -> Option<Arc<Message>>,
) -> Result<StepRequest, ReconstructError> {
    // A fresh fold over the prefix — which nodes, in what order: the live session's fold never
    // vouches for itself.
    let mut surface = SurfaceFold::default();
    let mut header = None;
    for event in prefix {
        let _ = surface.push_projected(event, &mut project);
        let _ = fold_header_event(&mut header, event);
    }

    let mut header_events = Vec::new();
    let mut sent = None;
    let mut usage = None;
    let mut responded = false;
    for event in events[boundary + 1..].iter() {
        match &event.data {
            EventData::StepStart(_) => break,
            // Only header events before the first response event belong to this request.
            EventData::RequestHeader(_) | EventData::RequestHeaderDelta(_) if !responded => {
                let _ = fold_header_event(&mut header, event);
                header_events.push(event.seq);
            }
            EventData::RequestSent(record) => {
                responded = true;
                sent = Some(record.clone());
            }
            EventData::StepEnd(end) if end.step == step => usage = Some(end.usage),
            data if is_response_event(data) => responded = true,
            _ => {}
        }
    }
    let header = header.ok_or(ReconstructError::NoHeader { step })?;
    let messages = surface.nodes.iter().map(|node| node.message.clone()).collect();
    Ok(StepRequest {
        step,
        turn,
        boundary_seq: events[boundary].seq,
        header_events,
        surface: surface.nodes,
        request: GenerateRequest::new(header, messages),
        sent,
        usage,
    })
}

/// Events that belong to a step's response: header events must come before all of them.
pub(crate) fn is_response_event(data: &EventData) -> bool {
    matches!(
        data,
        EventData::RequestSent(_)
            | EventData::AssistantChunk(_)
            | EventData::AssistantMessage(_)
            | EventData::LlmRetry(_)
            | EventData::ToolCall(_)
            | EventData::ToolProgress(_)
            | EventData::ToolResult(_)
            | EventData::PlanUpdate(_)
            | EventData::TaskSpawn(_)
            | EventData::ApprovalRequest(_)
            | EventData::ApprovalDecision(_)
            | EventData::StepEnd(_)
            | EventData::StepError(_)
    )
}

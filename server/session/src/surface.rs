//! The surface (the ordered nodes that make up the conversation) and the live [`Session`] fold.
//!
//! A surface node is identified by the seq of the event that introduced it: a surface event, or a
//! `surface/replace` whose node takes the place of a range. Each node is projected through
//! [`derive_event_message`] exactly once, when first seen; callers get fresh vectors over shared
//! `Arc<Message>`s, so logged history cannot be mutated through a projection.
//!
//! Nodes join the surface in log order, with one rule: a `steering/message` or `context/message`
//! logged while a step is open (between its `step/start` and its `step/end`/`step/error`) joins
//! when that step closes, after the step's assistant message and tool results. A client may
//! steer at any moment, but the conversation never interleaves a user message into the exchange
//! the model is in the middle of (an assistant's tool calls must be answered by the very next
//! messages). The rule is part of the fold, so replay and reconstruction place it identically.

use std::sync::Arc;

use crate::event::{Event, EventData};
use crate::header::{EpochHeader, fold_header_event};
use crate::message::{Message, derive_event_message};

/// One node of the surface.
#[derive(Clone, Debug, PartialEq)]
pub struct SurfaceEntry {
    /// The seq of the event that introduced the node.
    pub id: u64,
    /// Its projection.
    pub message: Arc<Message>,
}

/// The surface fold without the events: what reconstruction runs over a borrowed log prefix.
#[derive(Clone, Debug, Default)]
pub(crate) struct SurfaceFold {
    pub(crate) nodes: Vec<SurfaceEntry>,
    pub(crate) generation: u64,
    /// Whether a step is open.
    in_step: bool,
    /// Steering and context messages logged inside the open step, waiting for it to close.
    deferred: Vec<SurfaceEntry>,
}

impl SurfaceFold {
    /// Folds one event. A replace naming nodes that are not on the surface is refused with a
    /// message and leaves the surface unchanged.
    pub(crate) fn push(&mut self, event: &Event) -> Result<(), String> {
        self.push_projected(event, |event| derive_event_message(event).map(Arc::new))
    }

    /// [`SurfaceFold::push`] with each new node's message from `project`, which must return
    /// what [`derive_event_message`] does for the event (a projection made earlier, shared).
    /// A [`Session`]'s own surface is only ever built by [`SurfaceFold::push`]: that is what
    /// lets a rebuild borrow its projections (`reconstruct_session_step_shared`).
    pub(crate) fn push_projected(
        &mut self,
        event: &Event,
        project: impl FnOnce(&Event) -> Option<Arc<Message>>,
    ) -> Result<(), String> {
        if let EventData::SurfaceReplace(replace) = &event.data {
            let start = self.position(replace.start)?;
            let end = self.position(replace.end)?;
            if end < start {
                return Err(format!(
                    "surface/replace start {} comes after end {}",
                    replace.start, replace.end
                ));
            }
            let Some(message) = project(event) else { return Ok(()) };
            let entry = SurfaceEntry { id: event.seq, message };
            // A new generation: the untouched nodes keep their shared projections.
            self.nodes.splice(start..=end, std::iter::once(entry));
            self.generation += 1;
            return Ok(());
        }
        match &event.data {
            EventData::StepStart(_) => self.in_step = true,
            EventData::StepEnd(_) | EventData::StepError(_) | EventData::TurnEnd(_) => {
                self.in_step = false;
                self.nodes.append(&mut self.deferred);
            }
            _ => {}
        }
        let Some(message) = project(event) else { return Ok(()) };
        let entry = SurfaceEntry { id: event.seq, message };
        let interjection =
            matches!(event.data, EventData::SteeringMessage(_) | EventData::ContextMessage(_));
        if interjection && self.in_step {
            self.deferred.push(entry);
        } else {
            self.nodes.push(entry);
        }
        Ok(())
    }

    fn position(&self, id: u64) -> Result<usize, String> {
        // A replacement node carries its replace event's seq, so ids are not sorted along the
        // surface; replaces are rare, a linear scan is fine.
        self.nodes
            .iter()
            .position(|node| node.id == id)
            .ok_or_else(|| format!("surface/replace names node {id}, which is not on the surface"))
    }
}

/// Step bookkeeping kept by the fold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepIndex {
    /// Step number.
    pub step: u64,
    /// Its turn.
    pub turn: u64,
    /// Seq of its `step/start`.
    pub start_seq: u64,
}

/// A session log held in memory with its two cached folds: the surface (messages) and the
/// request header.
#[derive(Clone, Debug, Default)]
pub struct Session {
    events: Vec<Event>,
    surface: SurfaceFold,
    header: Option<EpochHeader>,
    steps: Vec<StepIndex>,
    /// The seqs of the events that can shape a request ([`shapes_request`]), in order: a
    /// rebuild from the session folds only these.
    shaping: Vec<u64>,
    /// Which fold this is, for [`SurfaceMark`]s.
    fold: FoldId,
    last_turn: u64,
    anomalies: Vec<(u64, String)>,
}

/// Whether folding an event can change a request — its surface or its header. The kinds left
/// out are no-ops for both folds (a test pushes each of them through both), and they are the
/// bulk of a long log (a streamed answer is hundreds of `assistant/chunk` events): a rebuild
/// from a loaded session skips them. New kinds shape requests until listed here.
pub(crate) fn shapes_request(data: &EventData) -> bool {
    !matches!(
        data,
        EventData::AssistantChunk(_)
            | EventData::ToolProgress(_)
            | EventData::ToolCall(_)
            | EventData::RequestSent(_)
            | EventData::LlmRetry(_)
            | EventData::ApprovalRequest(_)
            | EventData::ApprovalDecision(_)
    )
}

/// Tells folds apart: each new [`Session`] gets its own (a clone keeps it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FoldId(u64);

impl Default for FoldId {
    fn default() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        FoldId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

/// Where a session's surface stood: a caller holding the messages of that moment asks
/// [`Session::messages_after`] for only what joined since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SurfaceMark {
    fold: FoldId,
    generation: u64,
    len: usize,
}

/// Why an event could not be appended to a [`Session`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("event seq {found} does not follow the log (expected {expected})")]
pub struct SeqError {
    /// The seq the log needs next.
    pub expected: u64,
    /// The seq offered.
    pub found: u64,
}

impl Session {
    /// An empty session.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds a whole log. Events whose seq does not follow are dropped and reported by
    /// [`Session::anomalies`]; [`crate::check_log`] reports them in detail.
    pub fn from_events(events: impl IntoIterator<Item = Event>) -> Self {
        let mut session = Session::new();
        for event in events {
            if let Err(error) = session.append(event) {
                let seq = error.found;
                session.anomalies.push((seq, error.to_string()));
            }
        }
        session
    }

    /// Appends one event and advances every fold. The event's seq must be the next one.
    pub fn append(&mut self, event: Event) -> Result<(), SeqError> {
        let expected = self.events.len() as u64;
        if event.seq != expected {
            return Err(SeqError { expected, found: event.seq });
        }
        if let Err(message) = self.surface.push(&event) {
            self.anomalies.push((event.seq, message));
        }
        if let Err(error) = fold_header_event(&mut self.header, &event) {
            let message = match error {
                Some(error) => format!("request/header-delta does not apply: {error}"),
                None => "request/header-delta before any request/header".to_owned(),
            };
            self.anomalies.push((event.seq, message));
        }
        match &event.data {
            EventData::StepStart(start) => self.steps.push(StepIndex {
                step: start.step,
                turn: start.turn,
                start_seq: event.seq,
            }),
            EventData::TurnStart(start) => self.last_turn = self.last_turn.max(start.turn),
            _ => {}
        }
        if shapes_request(&event.data) {
            self.shaping.push(event.seq);
        }
        self.events.push(event);
        Ok(())
    }

    /// The events, in seq order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The seq the next appended event must carry.
    pub fn next_seq(&self) -> u64 {
        self.events.len() as u64
    }

    /// A fresh vector over the shared projections of the current surface.
    pub fn messages(&self) -> Vec<Arc<Message>> {
        self.surface.nodes.iter().map(|node| Arc::clone(&node.message)).collect()
    }

    /// Where the surface stands now.
    pub fn surface_mark(&self) -> SurfaceMark {
        SurfaceMark {
            fold: self.fold,
            generation: self.surface.generation,
            len: self.surface.nodes.len(),
        }
    }

    /// The messages that joined the surface since `mark`, when the surface then is a prefix
    /// of the surface now: nodes only ever join at the end, and anything else (a replace)
    /// starts a new generation. `None` when it is not (another fold, a replace since).
    pub fn messages_after(&self, mark: SurfaceMark) -> Option<Vec<Arc<Message>>> {
        let nodes = &self.surface.nodes;
        let prefix = mark.fold == self.fold
            && mark.generation == self.surface.generation
            && mark.len <= nodes.len();
        prefix.then(|| nodes[mark.len..].iter().map(|node| Arc::clone(&node.message)).collect())
    }

    /// The current surface nodes with their ids.
    pub fn surface(&self) -> &[SurfaceEntry] {
        &self.surface.nodes
    }

    /// How many surface replaces have been folded.
    pub fn surface_generation(&self) -> u64 {
        self.surface.generation
    }

    /// The folded request header, `None` before the first snapshot.
    pub fn header(&self) -> Option<&EpochHeader> {
        self.header.as_ref()
    }

    /// The seqs of the events that can shape a request, in order (a rebuild folds only these).
    pub(crate) fn shaping(&self) -> &[u64] {
        &self.shaping
    }

    /// Every step started so far, in order.
    pub fn steps(&self) -> &[StepIndex] {
        &self.steps
    }

    /// The highest step number started so far (0 when none).
    pub fn last_step(&self) -> u64 {
        self.steps.last().map_or(0, |index| index.step)
    }

    /// The highest turn number started so far (0 when none).
    pub fn last_turn(&self) -> u64 {
        self.last_turn
    }

    /// Anomalies the fold skipped over: `(seq, what)`.
    pub fn anomalies(&self) -> &[(u64, String)] {
        &self.anomalies
    }

    /// Whether a `surface/replace {start, end}` would apply to the current surface.
    pub fn can_replace(&self, start: u64, end: u64) -> bool {
        let position = |id| self.surface.nodes.iter().position(|node| node.id == id);
        matches!((position(start), position(end)), (Some(a), Some(b)) if a <= b)
    }
}

#[cfg(test)]
mod tests;

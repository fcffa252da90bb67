//! Where steering lands: the steering and context messages that joined a step's request.
//!
//! A `steering/message` or `context/message` logged while a turn runs (or between turns) is on
//! the surface from its seq on, so it joins the first request built after it: the next step's.
//! Clients show where each one landed; they read it from the API's `step/start` events (the
//! daemon computes it with [`joined_at`]) instead of re-deriving the rule.

use crate::event::{Event, EventData};

/// The seqs of the steering and context messages that joined the request of the step whose
/// `step/start` has seq `step_seq`: those logged since the previous `step/start`. Empty when
/// `step_seq` is not a `step/start` of `events` (a seq-ordered log or a suffix of one that
/// reaches back to the previous `step/start`).
pub fn joined_at(events: &[Event], step_seq: u64) -> Vec<u64> {
    let end = events.partition_point(|event| event.seq < step_seq);
    if !matches!(events.get(end).map(|event| &event.data), Some(EventData::StepStart(_))) {
        return Vec::new();
    }
    let mut joined: Vec<u64> = events[..end]
        .iter()
        .rev()
        .take_while(|event| !matches!(event.data, EventData::StepStart(_)))
        .filter(|event| {
            matches!(event.data, EventData::SteeringMessage(_) | EventData::ContextMessage(_))
        })
        .map(|event| event.seq)
        .collect();
    joined.reverse();
    joined
}

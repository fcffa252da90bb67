//! `log_events`: logs built from structured input by [`super::events`] (every event kind this
//! build knows, from small vocabularies, opening with `session/meta`, contiguous seqs).
//!
//! The whole log survives the line codec (encode, then decode, gives it back), and every fold
//! and law of [`super::folds`] holds.

use dsh_session::{Event, decode_log, encode_event};

/// The log `data` builds, as the lines of a log file.
pub fn log_text(data: &[u8]) -> (Vec<Event>, String) {
    let events = super::events::build(data);
    let text = events.iter().map(|event| encode_event(event) + "\n").collect();
    (events, text)
}

/// Builds the log `data` describes and checks it.
pub fn check(data: &[u8]) {
    let (events, text) = log_text(data);
    assert_eq!(decode_log(&text).unwrap(), events, "a log did not survive the line codec");
    super::folds::check(&events);
}

//! `log_line`: the log line codec on arbitrary text.
//!
//! `decode_event` must never panic; a line that decodes survives the round trip: its encoding
//! decodes to the same event and encodes to the same text again (the encoding is canonical).
//! `decode_log` runs over the whole input as a multi-line log.

use dsh_session::{decode_event, decode_log, encode_event};

/// Checks one input.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(event) = decode_event(text, 1) {
        let encoded = encode_event(&event);
        let again = decode_event(&encoded, 1).unwrap_or_else(|error| {
            panic!("the encoding of a decoded line does not decode: {error}\n{encoded}")
        });
        assert_eq!(again, event, "the round trip changed the event\n{encoded}");
        assert_eq!(encode_event(&again), encoded, "the encoding is not canonical");
    }
    if let Ok(events) = decode_log(text) {
        assert_eq!(events.len(), text.split_terminator('\n').count());
    }
}

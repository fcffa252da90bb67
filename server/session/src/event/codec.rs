//! The line codec: an event as one JSON line and back. Decoding rejects what this build does
//! not know — an unknown kind or format version — with an error naming the line.

use std::fmt;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{EVENT_KINDS, Event, EventData, FORMAT_VERSION};

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("Event", 4)?;
        state.serialize_field("seq", &self.seq)?;
        state.serialize_field("time", &self.time)?;
        state.serialize_field("type", self.kind())?;
        self.data.serialize_into(&mut state)?;
        state.end()
    }
}

impl Event {
    /// An event from its envelope's parts, as a client of the API receives them: the same
    /// checks as a log line (a known kind, a payload that fits it, the format version of a
    /// `session/meta`).
    pub fn from_parts(
        seq: u64,
        time: u64,
        kind: &str,
        data: serde_json::Value,
    ) -> Result<Event, DecodeErrorKind> {
        if kind == "session/meta" {
            let version = data.get("formatVersion").and_then(serde_json::Value::as_u64);
            check_version(version.ok_or_else(|| DecodeErrorKind::BadData {
                kind: kind.to_owned(),
                detail: "missing field `formatVersion`".to_owned(),
            })?)?;
        }
        Ok(Event { seq, time, data: EventData::decode_value(kind, data)? })
    }
}

/// Decoding from any serde source (the API's events); a log line is read by [`decode_event`].
impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Envelope {
            seq: u64,
            time: u64,
            #[serde(rename = "type")]
            kind: String,
            data: serde_json::Value,
        }
        let Envelope { seq, time, kind, data } = Envelope::deserialize(deserializer)?;
        Event::from_parts(seq, time, &kind, data).map_err(serde::de::Error::custom)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvelope<'a> {
    seq: u64,
    time: u64,
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// Why a log line could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeErrorKind {
    /// Not a JSON envelope `{seq, time, type, data}`.
    #[error("not a log event: {0}")]
    Envelope(String),
    /// The `type` is not one this build knows.
    #[error("unknown event kind `{kind}`; this build supports: {}", EVENT_KINDS.join(", "))]
    UnknownKind {
        /// The kind found.
        kind: String,
    },
    /// `session/meta.formatVersion` is not [`FORMAT_VERSION`].
    #[error(
        "unsupported session log format version {found}; this build reads only version {FORMAT_VERSION} (logs are never migrated)"
    )]
    UnknownFormatVersion {
        /// The version found.
        found: u64,
    },
    /// The payload does not fit its kind.
    #[error("bad `{kind}` payload: {detail}")]
    BadData {
        /// The kind.
        kind: String,
        /// The decoder's complaint.
        detail: String,
    },
}

/// A log line that could not be decoded; names the 1-based line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct DecodeError {
    /// 1-based line number in the log file.
    pub line: usize,
    /// What is wrong with it.
    pub kind: DecodeErrorKind,
}

/// Encodes an event as one log line, without the trailing newline.
pub fn encode_event(event: &Event) -> String {
    // Serializing plain data structs to a String cannot fail: no map has non-string keys and
    // every payload type is a derived Serialize. Fall back to an empty object rather than panic.
    serde_json::to_string(event).unwrap_or_else(|_| String::from("{}"))
}

/// Decodes one log line (`line_no` is 1-based, used in the error).
pub fn decode_event(text: &str, line_no: usize) -> Result<Event, DecodeError> {
    let fail = |kind| DecodeError { line: line_no, kind };
    let envelope: RawEnvelope<'_> =
        serde_json::from_str(text).map_err(|e| fail(DecodeErrorKind::Envelope(e.to_string())))?;
    if envelope.kind == "session/meta" {
        check_format_version(envelope.data.get()).map_err(fail)?;
    }
    let data = EventData::decode(&envelope.kind, envelope.data.get()).map_err(fail)?;
    Ok(Event { seq: envelope.seq, time: envelope.time, data })
}

fn check_format_version(data: &str) -> Result<(), DecodeErrorKind> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Version {
        format_version: u64,
    }
    let version: Version = serde_json::from_str(data).map_err(|e| DecodeErrorKind::BadData {
        kind: "session/meta".to_owned(),
        detail: e.to_string(),
    })?;
    check_version(version.format_version)
}

fn check_version(found: u64) -> Result<(), DecodeErrorKind> {
    if found != u64::from(FORMAT_VERSION) {
        return Err(DecodeErrorKind::UnknownFormatVersion { found });
    }
    Ok(())
}

/// Decodes a whole log text, one event per `\n`-terminated line.
///
/// The text must consist of whole lines; torn-tail handling belongs to the store. Empty lines
/// are errors: a log never contains them.
pub fn decode_log(text: &str) -> Result<Vec<Event>, DecodeError> {
    let mut events = Vec::new();
    for (index, line) in text.split_terminator('\n').enumerate() {
        events.push(decode_event(line, index + 1)?);
    }
    Ok(events)
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&encode_event(self))
    }
}

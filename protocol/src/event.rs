//! The API's event: a log event, typed, as `session/event` and `session/events` deliver it.
//!
//! On the wire it is the log line's envelope (`seq`, `time`, `type`, `data`) with the session's
//! id beside it, plus what the daemon derives for showing the event (`joined` on a
//! `step/start`). In Rust it carries the log's own [`Event`], so a client reads typed payloads
//! and decodes with the log's checks; the JSON Schema and the generated TypeScript and Lua
//! types describe each kind's payload.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use ts_rs::TS;

use dsh_session::{EVENT_KINDS, Event};

/// One log event as delivered by `session/event` (and `session/events`).
#[derive(Clone, Debug, PartialEq)]
pub struct SessionEvent {
    /// The session.
    pub session_id: String,
    /// The event, exactly as logged.
    pub event: Event,
    /// For a `step/start`: the seqs of the `steering/message` and `context/message` events that
    /// joined this step's request (those logged since the previous `step/start`), so clients
    /// show where each landed without re-deriving the rule. Empty for other kinds.
    pub joined: Vec<u64>,
}

impl SessionEvent {
    /// `event` of session `session_id`, with nothing joined.
    pub fn new(session_id: impl Into<String>, event: Event) -> SessionEvent {
        SessionEvent { session_id: session_id.into(), event, joined: Vec::new() }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireOut<'a> {
    session_id: &'a str,
    #[serde(flatten)]
    event: &'a Event,
    #[serde(skip_serializing_if = "<[u64]>::is_empty")]
    joined: &'a [u64],
}

impl Serialize for SessionEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireOut { session_id: &self.session_id, event: &self.event, joined: &self.joined }
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SessionEvent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Fields a newer daemon adds beside the envelope are skipped (additions are compatible);
        // the payload itself gets the log's checks.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct WireIn {
            session_id: String,
            seq: u64,
            time: u64,
            #[serde(rename = "type")]
            kind: String,
            data: Value,
            #[serde(default)]
            joined: Vec<u64>,
        }
        let wire = WireIn::deserialize(deserializer)?;
        let event = Event::from_parts(wire.seq, wire.time, &wire.kind, wire.data)
            .map_err(serde::de::Error::custom)?;
        Ok(SessionEvent { session_id: wire.session_id, event, joined: wire.joined })
    }
}

impl JsonSchema for SessionEvent {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("SessionEvent")
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let kinds: Vec<Value> = dsh_session::event_payload_schemas(generator)
            .into_iter()
            .map(|(kind, payload)| {
                json!({
                    "properties": { "type": { "const": kind }, "data": payload.to_value() },
                    "required": ["type", "data"],
                })
            })
            .collect();
        json_schema!({
            "description": "One log event as delivered by `session/event` (and `session/events`): the log line's envelope with the session's id, `data` being the payload of `type`.",
            "type": "object",
            "properties": {
                "sessionId": { "description": "The session.", "type": "string" },
                "seq": { "description": "The event's seq in the log.", "type": "integer", "format": "uint64", "minimum": 0 },
                "time": { "description": "Unix ms.", "type": "integer", "format": "uint64", "minimum": 0 },
                "type": { "description": "The event kind.", "type": "string", "enum": EVENT_KINDS },
                "data": { "description": "The payload of `type`, exactly as logged." },
                "joined": {
                    "description": "For a `step/start`: the seqs of the `steering/message` and `context/message` events that joined this step's request (logged since the previous `step/start`).",
                    "type": "array",
                    "items": { "type": "integer", "format": "uint64", "minimum": 0 },
                },
            },
            "required": ["sessionId", "seq", "time", "type", "data"],
            "additionalProperties": false,
            "oneOf": kinds,
        })
    }
}

impl TS for SessionEvent {
    type WithoutGenerics = SessionEvent;
    type OptionInnerType = SessionEvent;

    fn docs() -> Option<String> {
        Some(
            "One log event as delivered by `session/event` (and `session/events`): the log \
             line's envelope with the session's id; `type` discriminates `data`. `joined` (on a \
             `step/start`) lists the seqs of the steering and context messages that joined its \
             request."
                .to_owned(),
        )
    }

    fn name(_: &ts_rs::Config) -> String {
        "SessionEvent".to_owned()
    }

    fn inline(_: &ts_rs::Config) -> String {
        "{ sessionId: string; seq: number; time: number; joined?: Array<number> } & LogEvent"
            .to_owned()
    }

    fn decl(config: &ts_rs::Config) -> String {
        format!("type SessionEvent = {};", Self::inline(config))
    }

    fn decl_concrete(config: &ts_rs::Config) -> String {
        Self::decl(config)
    }
}

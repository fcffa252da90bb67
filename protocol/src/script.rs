//! The scripting contract: the lines `dsh prompt --json` writes, one JSON object per line, each
//! with `schemaVersion` ([`SCHEMA_VERSION`]) and `type`. The turn's log events come as the API
//! delivers them ([`SessionEvent`]), each finished step's usage and cost as `session/usage` has
//! it, and a last line that says how the turn ended — or, when that cannot be known (the
//! daemon went away, the prompt was refused), an error line. `docs/scripting.md` documents the
//! lines and the exit statuses; `protocol/schema/dsh-prompt-json.schema.json` is generated from
//! these types ([`crate::generate::prompt_json_schema`]).

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use ts_rs::TS;

use crate::*;

/// The version of the lines' schema: it changes only when a line changes incompatibly (a field
/// removed, renamed or retyped, a meaning changed). New line types, event kinds and optional
/// fields do not change it; a script ignores what it does not know.
pub const SCHEMA_VERSION: u32 = 1;

/// One line of `dsh prompt --json`.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptLine {
    /// A log event of the turn, as `session/event` delivers it (`type`: its kind). The log's
    /// `turn/end` is not among them: the [`PromptLine::TurnEnd`] line says it, and more.
    Event(SessionEvent),
    /// A finished step's usage and cost, as `session/usage` has it (`type`: `step/usage`),
    /// after the step's `step/end`.
    StepUsage(StepUsageLine),
    /// The last line of a turn that ended (`type`: `turn/end`).
    TurnEnd(TurnEndLine),
    /// The last line when the turn's end cannot be told (`type`: `error`): the prompt was
    /// refused, or the daemon went away.
    Error(ErrorLine),
}

impl PromptLine {
    /// The line's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            PromptLine::Event(event) => event.event.kind(),
            PromptLine::StepUsage(_) => "step/usage",
            PromptLine::TurnEnd(_) => "turn/end",
            PromptLine::Error(_) => "error",
        }
    }
}

api_type! {
    /// A `step/usage` line: one row of `session/usage`, with the session.
    pub struct StepUsageLine {
        /// The session.
        pub session_id: String,
        /// The step's row: its usage, cost, and the cause of a cache drop.
        #[serde(flatten)]
        #[ts(flatten)]
        pub entry: UsageEntry,
    }
}

api_type! {
    /// The `turn/end` line: `session/prompt`'s answer, with the session and what the turn cost.
    pub struct TurnEndLine {
        /// The session.
        pub session_id: String,
        /// How the turn ended: its stop reason, steps, usage, error, the budget that stopped it.
        #[serde(flatten)]
        #[ts(flatten)]
        pub result: SessionPromptResult,
        /// What the turn's finished steps cost, summed from their `step/usage` rows; absent
        /// when one has no price (or none finished).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub cost: Option<Cost>,
    }
}

api_type! {
    /// The `error` line: why no `turn/end` line comes.
    pub struct ErrorLine {
        /// What went wrong, for people.
        pub message: String,
        /// The session, once there is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub session_id: Option<String>,
        /// The daemon's JSON-RPC error code, when it refused the prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub code: Option<i64>,
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Versioned<'a, T> {
    schema_version: u32,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(flatten)]
    line: &'a T,
}

impl Serialize for PromptLine {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let version = SCHEMA_VERSION;
        let kind = Some(self.kind());
        match self {
            // The event carries its own `type`.
            PromptLine::Event(line) => {
                Versioned { schema_version: version, kind: None, line }.serialize(serializer)
            }
            PromptLine::StepUsage(line) => {
                Versioned { schema_version: version, kind, line }.serialize(serializer)
            }
            PromptLine::TurnEnd(line) => {
                Versioned { schema_version: version, kind, line }.serialize(serializer)
            }
            PromptLine::Error(line) => {
                Versioned { schema_version: version, kind, line }.serialize(serializer)
            }
        }
    }
}

/// `schemaVersion` and `type` on top of a line's own schema (a `$ref`).
fn tagged(kind: &str, line: Schema) -> Value {
    json!({
        "type": "object",
        "properties": {
            "schemaVersion": { "const": SCHEMA_VERSION },
            "type": { "const": kind },
        },
        "required": ["schemaVersion", "type"],
        "allOf": [line.to_value()],
    })
}

impl JsonSchema for PromptLine {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("PromptLine")
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        // The event line is the API's event with `schemaVersion` beside its fields (which it
        // closes with `additionalProperties: false`).
        let mut event = SessionEvent::json_schema(generator).to_value();
        if let Some(properties) = event.get_mut("properties").and_then(Value::as_object_mut) {
            properties.insert("schemaVersion".to_owned(), json!({ "const": SCHEMA_VERSION }));
        }
        if let Some(required) = event.get_mut("required").and_then(Value::as_array_mut) {
            required.insert(0, json!("schemaVersion"));
        }
        if let Some(object) = event.as_object_mut() {
            object.insert(
                "description".to_owned(),
                json!("A log event of the turn, as `session/event` delivers it."),
            );
        }
        let step_usage = generator.subschema_for::<StepUsageLine>();
        let turn_end = generator.subschema_for::<TurnEndLine>();
        let error = generator.subschema_for::<ErrorLine>();
        json_schema!({
            "description": "One line of `dsh prompt --json`: a log event of the turn (`type`: its kind), a finished step's usage (`step/usage`), and last the turn's end (`turn/end`) or why it cannot be told (`error`). Every line has `schemaVersion`.",
            "oneOf": [
                event,
                tagged("step/usage", step_usage),
                tagged("turn/end", turn_end),
                tagged("error", error),
            ],
        })
    }
}

//! Generating the API's JSON Schema and TypeScript declarations from the Rust types.
//!
//! Both outputs are committed (`protocol/schema/dsh-protocol.schema.json`,
//! `editors/vscode/src/protocol.generated.ts`) and a test compares them with a fresh generation:
//! a change to a type fails the test until the files are regenerated with
//! `UPDATE_EXPECT=1 cargo test -p dsh-protocol`.

use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};
use ts_rs::TS;

use crate::*;
use dsh_session as log;

/// `(method, params type, result type)` for every method; `None` params means no params.
fn method_types(generator: &mut SchemaGenerator) -> Vec<(&'static str, Option<Value>, Value)> {
    fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
        generator.subschema_for::<T>().to_value()
    }
    vec![
        (
            method::INITIALIZE,
            Some(schema::<InitializeParams>(generator)),
            schema::<InitializeResult>(generator),
        ),
        (
            method::SESSION_CREATE,
            Some(schema::<SessionCreateParams>(generator)),
            schema::<SessionIdResult>(generator),
        ),
        (
            method::SESSION_LIST,
            Some(schema::<SessionListParams>(generator)),
            schema::<SessionListResult>(generator),
        ),
        (
            method::SESSION_SUBSCRIBE,
            Some(schema::<SessionSubscribeParams>(generator)),
            json!({"description": "subscription id", "type": ["string", "integer"]}),
        ),
        (method::SESSION_UNSUBSCRIBE, None, json!({"type": "boolean"})),
        (
            method::SESSION_PROMPT,
            Some(schema::<SessionPromptParams>(generator)),
            schema::<SessionPromptResult>(generator),
        ),
        (
            method::SESSION_INJECT,
            Some(schema::<SessionInjectParams>(generator)),
            schema::<SessionInjectResult>(generator),
        ),
        (
            method::SESSION_CANCEL,
            Some(schema::<SessionParams>(generator)),
            schema::<SessionCancelResult>(generator),
        ),
        (
            method::SESSION_FORK,
            Some(schema::<SessionForkParams>(generator)),
            schema::<SessionIdResult>(generator),
        ),
        (
            method::SESSION_REQUEST,
            Some(schema::<SessionRequestParams>(generator)),
            schema::<SessionRequestResult>(generator),
        ),
        (
            method::SESSION_USAGE,
            Some(schema::<SessionParams>(generator)),
            schema::<SessionUsageResult>(generator),
        ),
        (
            method::SESSION_EVENTS,
            Some(schema::<SessionEventsParams>(generator)),
            schema::<SessionEventsResult>(generator),
        ),
        (
            method::SESSION_COMPACT,
            Some(schema::<SessionParams>(generator)),
            schema::<SessionCompactResult>(generator),
        ),
        (
            method::APPROVAL_RESPOND,
            Some(schema::<ApprovalRespondParams>(generator)),
            schema::<ApprovalRespondResult>(generator),
        ),
        (method::DAEMON_STATUS, None, schema::<DaemonStatusResult>(generator)),
        (method::DAEMON_SHUTDOWN, None, schema::<DaemonShutdownResult>(generator)),
    ]
}

/// The JSON Schema document: every method's params and result, the `session/event`
/// notification, and the shared definitions.
pub fn json_schema() -> String {
    let mut generator = SchemaGenerator::default();
    let mut methods = Map::new();
    for (name, params, result) in method_types(&mut generator) {
        let mut entry = Map::new();
        if let Some(params) = params {
            entry.insert("params".to_owned(), params);
        }
        entry.insert("result".to_owned(), result);
        methods.insert(name.to_owned(), Value::Object(entry));
    }
    let notification = generator.subschema_for::<SessionEvent>().to_value();
    let mut definitions: Map<String, Value> =
        generator.take_definitions(true).into_iter().collect();
    definitions.sort_keys();
    let document = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "dsh JSON-RPC API",
        "protocolVersion": PROTOCOL_VERSION,
        "methods": methods,
        "notifications": { method::SESSION_EVENT: { "params": { "subscription": "subscription id", "result": notification } } },
        "errorCodes": error_codes(),
        "$defs": definitions,
    });
    let mut text = serde_json::to_string_pretty(&document).unwrap_or_default();
    text.push('\n');
    text
}

fn error_codes() -> Value {
    json!({
        "sessionNotFound": code::SESSION_NOT_FOUND,
        "sessionBusy": code::SESSION_BUSY,
        "outOfRange": code::OUT_OF_RANGE,
        "overloaded": code::OVERLOADED,
        "invalidWorkspace": code::INVALID_WORKSPACE,
        "sessionUnavailable": code::SESSION_UNAVAILABLE,
        "provider": code::PROVIDER,
        "approvalNotFound": code::APPROVAL_NOT_FOUND,
        "unsupportedProtocol": code::UNSUPPORTED_PROTOCOL,
        "shuttingDown": code::SHUTTING_DOWN,
        "store": code::STORE,
    })
}

/// The TypeScript declarations for clients.
pub fn typescript() -> String {
    let mut out = String::from(
        "// Generated by `cargo test -p dsh-protocol` (UPDATE_EXPECT=1) from protocol/src/*.rs and the\n\
         // log vocabulary in server/session. Do not edit: change the Rust types and regenerate.\n\n",
    );
    out.push_str(&format!("export const PROTOCOL_VERSION = {PROTOCOL_VERSION};\n\n"));
    out.push_str("/** Any JSON value (a tool's parameter schema, a log payload). */\n");
    out.push_str(
        "export type JsonValue = number | string | boolean | null | JsonValue[] | { [key: string]: JsonValue };\n\n",
    );
    out.push_str("export const Methods = {\n");
    for name in method::ALL {
        out.push_str(&format!("  {}: \"{name}\",\n", constant_name(name)));
    }
    out.push_str(&format!("  SessionEvent: \"{}\",\n", method::SESSION_EVENT));
    out.push_str("} as const;\n\n");
    out.push_str("export const ErrorCodes = ");
    out.push_str(&serde_json::to_string_pretty(&error_codes()).unwrap_or_default());
    out.push_str(" as const;\n\n");
    for decl in declarations() {
        out.push_str("export ");
        out.push_str(&decl);
        out.push_str("\n\n");
    }
    // The log vocabulary: each kind with its payload type.
    let payloads = log::EVENT_PAYLOADS;
    out.push_str("/** A log event's `type` and its `data`, one member per event kind. */\n");
    out.push_str("export type LogEvent =\n");
    for (kind, payload) in payloads {
        out.push_str(&format!("  | {{ type: \"{kind}\"; data: {payload} }}\n"));
    }
    out.push_str(
        ";\n\n/** Any log event payload. */\nexport type LogEventData = LogEvent[\"data\"];\n\n",
    );
    out.push_str("/** Every log event kind. */\nexport type EventKind = LogEvent[\"type\"];\n");
    out
}

fn constant_name(method: &str) -> String {
    method
        .split(['/', '-'])
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
        })
        .collect()
}

fn declarations() -> Vec<String> {
    // JSON numbers, not bigint: every integer in the API fits an f64 in practice.
    let config = ts_rs::Config::new().with_large_int("number");
    vec![
        // The API's own types.
        ClientInfo::decl(&config),
        InitializeParams::decl(&config),
        ServerInfo::decl(&config),
        Capabilities::decl(&config),
        InitializeResult::decl(&config),
        SessionConfig::decl(&config),
        SessionCreateParams::decl(&config),
        SessionIdResult::decl(&config),
        SessionListParams::decl(&config),
        SessionSummary::decl(&config),
        SessionListResult::decl(&config),
        SessionSubscribeParams::decl(&config),
        SessionEvent::decl(&config),
        WhenBusy::decl(&config),
        SessionPromptParams::decl(&config),
        SessionPromptResult::decl(&config),
        SessionInjectParams::decl(&config),
        SessionInjectResult::decl(&config),
        SessionParams::decl(&config),
        SessionCancelResult::decl(&config),
        SessionForkParams::decl(&config),
        SessionRequestParams::decl(&config),
        SeqMessage::decl(&config),
        WireBody::decl(&config),
        SessionRequestResult::decl(&config),
        UsageEntry::decl(&config),
        SessionUsageResult::decl(&config),
        SessionEventsParams::decl(&config),
        SessionEventsResult::decl(&config),
        SessionCompactResult::decl(&config),
        ApprovalChoice::decl(&config),
        ApprovalRespondParams::decl(&config),
        ApprovalRespondResult::decl(&config),
        LoadedSession::decl(&config),
        DaemonStatusResult::decl(&config),
        DaemonShutdownResult::decl(&config),
        // The log vocabulary the API hands out.
        log::Usage::decl(&config),
        log::StopReason::decl(&config),
        log::ForkOrigin::decl(&config),
        log::RequestSent::decl(&config),
        log::LlmCallConfig::decl(&config),
        log::ToolSchema::decl(&config),
        log::EpochHeader::decl(&config),
        log::ToolCall::decl(&config),
        log::AssistantMessage::decl(&config),
        log::Message::decl(&config),
        log::PrefixCause::decl(&config),
        log::UsageRow::decl(&config),
        log::SessionMeta::decl(&config),
        log::TurnStart::decl(&config),
        log::TurnEnd::decl(&config),
        log::UserMessage::decl(&config),
        log::SteeringMessage::decl(&config),
        log::ContextMessage::decl(&config),
        log::StepStart::decl(&config),
        log::SnapshotReason::decl(&config),
        log::RequestHeader::decl(&config),
        log::SystemDelta::decl(&config),
        log::ToolsDelta::decl(&config),
        log::HeaderDelta::decl(&config),
        log::ChunkDelta::decl(&config),
        log::AssistantChunk::decl(&config),
        log::AssistantTurn::decl(&config),
        log::ToolCallStarted::decl(&config),
        log::ToolProgress::decl(&config),
        log::ToolResult::decl(&config),
        log::StepEnd::decl(&config),
        log::StepError::decl(&config),
        log::LlmRetry::decl(&config),
        log::ApprovalRequest::decl(&config),
        log::ApprovalVerdict::decl(&config),
        log::ApprovalDecision::decl(&config),
        log::CompactStart::decl(&config),
        log::CompactSummary::decl(&config),
        log::SurfaceNode::decl(&config),
        log::SurfaceReplace::decl(&config),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::PathBuf;

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    fn check(path: PathBuf, fresh: String) {
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, fresh).unwrap();
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == fresh,
            "{} is stale: regenerate with `UPDATE_EXPECT=1 cargo test -p dsh-protocol`",
            path.display()
        );
    }

    #[test]
    fn the_committed_json_schema_is_fresh() {
        check(root().join("protocol/schema/dsh-protocol.schema.json"), super::json_schema());
    }

    #[test]
    fn the_committed_typescript_types_are_fresh() {
        check(root().join("editors/vscode/src/protocol.generated.ts"), super::typescript());
    }

    #[test]
    fn every_log_event_kind_has_a_typescript_member() {
        let ts = super::typescript();
        for kind in dsh_session::EVENT_KINDS {
            assert!(ts.contains(&format!("type: \"{kind}\"")), "missing {kind}");
        }
    }
}

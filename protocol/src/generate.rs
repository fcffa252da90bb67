//! Generating the API's JSON Schema, TypeScript declarations and Lua annotations from the Rust
//! types, and the Python client's types from the JSON Schema.
//!
//! The outputs are committed (`protocol/schema/dsh-protocol.schema.json`,
//! `editors/vscode/src/protocol.generated.ts`, `editors/nvim/lua/dsh/protocol.lua`,
//! `clients/python/dsh_client/protocol.py`) and a test
//! compares each with a fresh generation: a change to a type fails the test until the files are
//! regenerated with `UPDATE_EXPECT=1 cargo test -p dsh-protocol`.

use std::collections::BTreeMap;

use schemars::SchemaGenerator;
use serde_json::{Map, Value, json};
use ts_rs::TS;

use crate::*;
use dsh_session as log;

/// `(method, params type, result type)` for every method of the table ([`method::visit`]);
/// `None` params means no params.
fn method_types(generator: &mut SchemaGenerator) -> Vec<(&'static str, Option<Value>, Value)> {
    struct Schemas<'a> {
        generator: &'a mut SchemaGenerator,
        out: Vec<(&'static str, Option<Value>, Value)>,
    }
    impl method::Visit for Schemas<'_> {
        fn method<M: method::Method>(&mut self) {
            let no_params =
                std::any::TypeId::of::<M::Params>() == std::any::TypeId::of::<NoParams>();
            let params = (!no_params).then(|| {
                log::canonical_json(self.generator.subschema_for::<M::Params>().to_value())
            });
            let result = if method::SUBSCRIBE.contains(&M::NAME) {
                json!({"description": "subscription id", "type": ["string", "integer"]})
            } else {
                log::canonical_json(self.generator.subschema_for::<M::Result>().to_value())
            };
            self.out.push((M::NAME, params, result));
        }
    }
    let mut schemas = Schemas { generator, out: Vec::new() };
    method::visit(&mut schemas);
    schemas.out
}

/// The data of the errors that carry some (`error.data`), by error code name.
fn error_data(generator: &mut SchemaGenerator) -> Value {
    let entries = [
        ("checkpointUnavailable", generator.subschema_for::<CheckpointUnavailableData>()),
        ("rewindConflict", generator.subschema_for::<RewindConflictData>()),
        ("rewindFailed", generator.subschema_for::<RewindFailedData>()),
    ];
    Value::Object(
        entries.into_iter().map(|(name, schema)| (name.to_owned(), schema.to_value())).collect(),
    )
}

/// The JSON Schema document: every method's params and result, the `session/event`
/// notification, the data some errors carry, and the shared definitions.
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
    let notification = log::canonical_json(generator.subschema_for::<SessionEvent>().to_value());
    // What a `daemon/subscribe` subscription delivers, by notification method.
    let daemon_notifications = [
        (method::DAEMON_NOTICE, generator.subschema_for::<DaemonNotice>()),
        (method::WORKSPACE_CHANGED, generator.subschema_for::<WorkspaceChanged>()),
        (method::WORKSPACE_TURN_STARTED, generator.subschema_for::<WorkspaceTurnStarted>()),
    ]
    .map(|(name, schema)| (name, log::canonical_json(schema.to_value())));
    let error_data = log::canonical_json(error_data(&mut generator));
    let mut definitions: Map<String, Value> = generator
        .take_definitions(true)
        .into_iter()
        .map(|(k, v)| (k, log::canonical_json(v)))
        .collect();
    definitions.sort_keys();
    let document = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "dsh JSON-RPC API",
        "protocolVersion": PROTOCOL_VERSION,
        "methods": methods,
        "notifications": notifications(notification, daemon_notifications),
        "errorCodes": error_codes(),
        "errorData": error_data,
        "$defs": definitions,
    });
    // Keys sorted whatever map serde_json was built with (a dependency of the workspace turns on
    // its `preserve_order`), so the committed file is the same from every build.
    let mut text = serde_json::to_string_pretty(&log::canonical_json(document)).unwrap_or_default();
    text.push('\n');
    text
}

/// The notifications: `session/event` of a session subscription, and what `daemon/subscribe`
/// delivers; each `{params: {subscription, result}}`.
fn notifications(session_event: Value, daemon: [(&str, Value); 3]) -> Value {
    let entry = |result: Value| json!({ "params": { "subscription": "subscription id", "result": result } });
    let mut out = Map::new();
    out.insert(method::SESSION_EVENT.to_owned(), entry(session_event));
    for (name, result) in daemon {
        out.insert(name.to_owned(), entry(result));
    }
    Value::Object(out)
}

/// The JSON Schema of one line of `dsh prompt --json` ([`script::PromptLine`]), with the
/// definitions it refers to.
pub fn prompt_json_schema() -> String {
    let mut generator = SchemaGenerator::default();
    let line = generator.root_schema_for::<script::PromptLine>().to_value();
    let mut document = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "dsh prompt --json: one line",
        "schemaVersion": script::SCHEMA_VERSION,
    });
    if let (Value::Object(document), Value::Object(line)) = (&mut document, line) {
        for (key, value) in line {
            if key != "$schema" && key != "title" {
                document.insert(key, value);
            }
        }
    }
    let mut text = serde_json::to_string_pretty(&log::canonical_json(document)).unwrap_or_default();
    text.push('\n');
    text
}

fn error_codes() -> Value {
    log::canonical_json(json!({
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
        "config": code::CONFIG,
        "workspaceNotConfirmed": code::WORKSPACE_NOT_CONFIRMED,
        "checkpointUnavailable": code::CHECKPOINT_UNAVAILABLE,
        "rewindConflict": code::REWIND_CONFLICT,
        "rewindFailed": code::REWIND_FAILED,
        "objectNotFound": code::OBJECT_NOT_FOUND,
        "promptRefused": code::PROMPT_REFUSED,
        "imagesUnsupported": code::IMAGES_UNSUPPORTED,
    }))
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
        TurnLimits::decl(&config),
        Attachment::decl(&config),
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
        SessionObjectParams::decl(&config),
        SessionObjectResult::decl(&config),
        UsageEntry::decl(&config),
        SessionUsageResult::decl(&config),
        SessionPlanResult::decl(&config),
        CommandInfo::decl(&config),
        SkillInfo::decl(&config),
        SessionCommandsResult::decl(&config),
        SessionEventsParams::decl(&config),
        SessionEventsResult::decl(&config),
        SessionCompactResult::decl(&config),
        SessionAuditResult::decl(&config),
        CheckpointEntry::decl(&config),
        SessionCheckpointsResult::decl(&config),
        SessionRewindParams::decl(&config),
        SessionRewindResult::decl(&config),
        RewindConflictData::decl(&config),
        CheckpointUnavailableData::decl(&config),
        RewindFailure::decl(&config),
        RewindFailedData::decl(&config),
        CheckpointStoreStatus::decl(&config),
        WorkspaceProvenanceParams::decl(&config),
        ProvenanceRange::decl(&config),
        WorkspaceProvenanceResult::decl(&config),
        ApprovalChoice::decl(&config),
        ApprovalRespondParams::decl(&config),
        ApprovalRespondResult::decl(&config),
        LoadedSession::decl(&config),
        SandboxFeature::decl(&config),
        SandboxStatus::decl(&config),
        DaemonNotice::decl(&config),
        WorkspaceChanged::decl(&config),
        WorkspaceTurnStarted::decl(&config),
        ProfileStatus::decl(&config),
        ModelStatus::decl(&config),
        PriceUsed::decl(&config),
        McpListParams::decl(&config),
        McpToolStatus::decl(&config),
        McpServerStatus::decl(&config),
        McpListResult::decl(&config),
        McpServerSpec::decl(&config),
        SessionMcpServersParams::decl(&config),
        SessionMcpServersResult::decl(&config),
        DaemonStatusResult::decl(&config),
        DaemonShutdownResult::decl(&config),
        DaemonWebParams::decl(&config),
        DaemonWebResult::decl(&config),
        // The log vocabulary the API hands out.
        log::Usage::decl(&config),
        log::StopReason::decl(&config),
        log::ForkOrigin::decl(&config),
        log::SessionPin::decl(&config),
        log::RequestSent::decl(&config),
        log::ProviderKind::decl(&config),
        log::WireFormat::decl(&config),
        log::ResponseFormat::decl(&config),
        log::LlmCallConfig::decl(&config),
        log::Price::decl(&config),
        log::Cost::decl(&config),
        log::ToolSchema::decl(&config),
        log::EpochHeader::decl(&config),
        log::ToolCall::decl(&config),
        log::AssistantMessage::decl(&config),
        log::ContentBlock::decl(&config),
        log::Message::decl(&config),
        log::PrefixCause::decl(&config),
        log::UsageRow::decl(&config),
        log::SessionMeta::decl(&config),
        log::TurnStart::decl(&config),
        log::TurnEnd::decl(&config),
        log::LimitKind::decl(&config),
        log::TurnLimit::decl(&config),
        log::UserMessage::decl(&config),
        log::PromptCommand::decl(&config),
        log::SteeringMessage::decl(&config),
        log::ContextMessage::decl(&config),
        log::InstructionFile::decl(&config),
        log::FileChange::decl(&config),
        log::FileSeen::decl(&config),
        log::ImageRef::decl(&config),
        log::ChangeKind::decl(&config),
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
        log::PlanStatus::decl(&config),
        log::PlanEntry::decl(&config),
        log::PlanUpdate::decl(&config),
        log::StepEnd::decl(&config),
        log::StepError::decl(&config),
        log::LlmRetry::decl(&config),
        log::McpWait::decl(&config),
        log::McpWaitReason::decl(&config),
        log::ApprovalRequest::decl(&config),
        log::ApprovalVerdict::decl(&config),
        log::ApprovalDecision::decl(&config),
        log::CompactStart::decl(&config),
        log::CompactSummary::decl(&config),
        log::SurfaceNode::decl(&config),
        log::SurfaceReplace::decl(&config),
        log::WorkspaceCheckpoint::decl(&config),
        log::CheckpointReason::decl(&config),
        log::TooLargeFile::decl(&config),
        log::WorkspaceRewind::decl(&config),
        log::HookRun::decl(&config),
        log::HookEvent::decl(&config),
        log::HookOutcome::decl(&config),
        log::ParentLink::decl(&config),
        log::TaskContext::decl(&config),
        log::TaskSpawn::decl(&config),
        ChildUsage::decl(&config),
        UsageWithChildren::decl(&config),
    ]
}

/// The Neovim plugin's `lua/dsh/protocol.lua`: the protocol constants (version, method names,
/// error codes, the log vocabulary) and LuaCATS annotations for every API type and log payload,
/// all from the types' JSON Schemas.
pub fn lua() -> String {
    let mut generator = SchemaGenerator::default();
    method_types(&mut generator);
    error_data(&mut generator);
    let event_schema = log::canonical_json(generator.subschema_for::<SessionEvent>().to_value());
    // The log vocabulary's definitions (the API's event refers to them too) are listed apart.
    let mut vocabulary = SchemaGenerator::default();
    payload_schemas(&mut vocabulary);
    let api_names: Vec<String> = generator
        .definitions()
        .keys()
        .filter(|name| !vocabulary.definitions().contains_key(*name))
        .cloned()
        .collect();
    let payloads: Vec<(&str, &str, String)> = payload_schemas(&mut generator)
        .into_iter()
        .map(|(kind, payload, schema)| (kind, payload, lua_type(&schema)))
        .collect();
    let mut definitions: BTreeMap<String, Value> = generator
        .take_definitions(true)
        .into_iter()
        .map(|(k, v)| (k, log::canonical_json(v)))
        .collect();
    // The envelope is a class of its own; each kind's class below narrows `type` and `data`
    // (LuaCATS has no discriminated union over a shared class).
    if let Some(Value::Object(envelope)) = definitions.get_mut("SessionEvent") {
        envelope.remove("oneOf");
    }

    let mut out: Vec<String> = [
        "-- Generated by `cargo test -p dsh-protocol` (UPDATE_EXPECT=1) from protocol/src/*.rs and the",
        "-- log vocabulary in server/session. Do not edit: change the Rust types and regenerate.",
        "",
        "local M = {}",
        "",
        "--- The protocol version this plugin speaks.",
    ]
    .map(str::to_owned)
    .to_vec();
    out.push(format!("M.PROTOCOL_VERSION = {PROTOCOL_VERSION}"));
    out.push(String::new());
    out.push("--- Method names.".to_owned());
    out.push("M.methods = {".to_owned());
    let mut methods: Vec<&str> = method::ALL.to_vec();
    methods.push(method::SESSION_EVENT);
    methods.sort_unstable();
    for name in methods {
        out.push(format!("  {} = {},", constant_name(name), lua_string(name)));
    }
    out.push("}".to_owned());
    out.push(String::new());
    out.push("--- Application error codes.".to_owned());
    out.push("M.error_codes = {".to_owned());
    if let Value::Object(codes) = error_codes() {
        let codes: BTreeMap<String, Value> = codes.into_iter().collect();
        for (name, code) in codes {
            out.push(format!("  {name} = {code},"));
        }
    }
    out.push("}".to_owned());
    out.push(String::new());
    out.push(
        "--- Every log event kind and the name of its payload type, in log-vocabulary order."
            .to_owned(),
    );
    out.push("M.event_kinds = {".to_owned());
    for (kind, payload, _) in &payloads {
        out.push(format!(
            "  {{ kind = {}, payload = {} }},",
            lua_string(kind),
            lua_string(payload)
        ));
    }
    out.push("}".to_owned());
    out.push(String::new());

    out.push("-- The API's types.".to_owned());
    out.push(String::new());
    for (name, schema) in definitions.iter().filter(|(name, _)| api_names.contains(name)) {
        lua_definition(&mut out, name, schema);
        out.push(String::new());
    }
    out.push("-- The log vocabulary (payloads of `SessionEvent.data`).".to_owned());
    out.push(String::new());
    for (name, schema) in definitions.iter().filter(|(name, _)| !api_names.contains(name)) {
        lua_definition(&mut out, name, schema);
        out.push(String::new());
    }

    let kinds: Vec<String> = payloads.iter().map(|(kind, _, _)| lua_string(kind)).collect();
    out.push(format!("---@alias dsh.EventKind {}", kinds.join("|")));
    out.push(String::new());
    out.push(
        "-- One class per event kind: the `session/event` envelope with its typed payload."
            .to_owned(),
    );
    out.push(String::new());
    let envelope = lua_type(&event_schema);
    for (kind, _, lua_payload) in &payloads {
        out.push(format!("---@class dsh.Event.{}: {envelope}", identifier(kind)));
        out.push(format!("---@field type {}", lua_string(kind)));
        out.push(format!("---@field data {lua_payload}"));
        out.push(String::new());
    }
    out.push("return M".to_owned());
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// Each log event kind with its payload type's name and schema (a `$ref` into the generator's
/// definitions), in log-vocabulary order.
fn payload_schemas(generator: &mut SchemaGenerator) -> Vec<(&'static str, &'static str, Value)> {
    log::event_payload_schemas(generator)
        .into_iter()
        .zip(log::EVENT_PAYLOADS)
        .map(|((kind, schema), &(_, payload))| {
            (kind, payload, log::canonical_json(schema.to_value()))
        })
        .collect()
}

/// A Lua string literal (the strings written are method names, kinds and type names).
fn lua_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A name usable in a LuaCATS class name: `tool/result` → `tool_result`.
fn identifier(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

/// A description on one line, for a `---` comment.
fn one_line(schema: &Value) -> String {
    let text = schema.get("description").and_then(Value::as_str).unwrap_or_default();
    text.lines().map(str::trim).filter(|line| !line.is_empty()).collect::<Vec<_>>().join(" ")
}

/// `#/$defs/Name` → `dsh.Name`.
fn ref_name(reference: &str) -> String {
    format!("dsh.{}", reference.rsplit('/').next().unwrap_or(reference))
}

/// The literal a `const` or an `enum` value stands for.
fn literal(value: &Value) -> String {
    match value {
        Value::String(text) => lua_string(text),
        other => other.to_string(),
    }
}

/// `a|b` with `nullable` → `(a|b)?`; a single part → `a?`.
fn union(parts: &[String], nullable: bool) -> String {
    let joined = parts.join("|");
    match (nullable, parts.len()) {
        (false, _) => joined,
        (true, 0) => "nil".to_owned(),
        (true, 1) => format!("{joined}?"),
        (true, _) => format!("({joined})?"),
    }
}

/// A JSON Schema as a LuaCATS type.
fn lua_type(schema: &Value) -> String {
    let Some(object) = schema.as_object().filter(|object| !object.is_empty()) else {
        return "any".to_owned();
    };
    if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
        return ref_name(reference);
    }
    if let Some(Value::Array(alternatives)) = object.get("anyOf").or_else(|| object.get("oneOf")) {
        let is_null =
            |alternative: &&Value| alternative.get("type").and_then(Value::as_str) == Some("null");
        let nullable = alternatives.iter().any(|alternative| is_null(&alternative));
        let parts: Vec<String> =
            alternatives.iter().filter(|alternative| !is_null(alternative)).map(lua_type).collect();
        return union(&parts, nullable);
    }
    if let Some(value) = object.get("const") {
        return literal(value);
    }
    if let Some(Value::Array(values)) = object.get("enum") {
        let nullable = values.iter().any(Value::is_null);
        let parts: Vec<String> =
            values.iter().filter(|value| !value.is_null()).map(literal).collect();
        return union(&parts, nullable);
    }
    match object.get("type") {
        Some(Value::Array(types)) => {
            let nullable = types.iter().any(|ty| ty.as_str() == Some("null"));
            let parts: Vec<String> = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|&ty| ty != "null")
                .map(|ty| {
                    let mut single = object.clone();
                    single.insert("type".to_owned(), Value::from(ty));
                    lua_type(&Value::Object(single))
                })
                .collect();
            union(&parts, nullable)
        }
        Some(Value::String(ty)) => match ty.as_str() {
            "string" | "integer" | "number" | "boolean" => ty.clone(),
            "array" => {
                let inner = object.get("items").map_or_else(|| "any".to_owned(), lua_type);
                if inner.contains(['|', '?']) {
                    format!("({inner})[]")
                } else {
                    format!("{inner}[]")
                }
            }
            "object" => match object.get("additionalProperties") {
                Some(values @ Value::Object(_)) => format!("table<string, {}>", lua_type(values)),
                _ => "table".to_owned(),
            },
            _ => "any".to_owned(),
        },
        _ => "any".to_owned(),
    }
}

/// `---@field` lines for an object schema's properties, in name order; a property that is not
/// required, or may be null, is optional.
fn lua_fields(out: &mut Vec<String>, schema: &Value) {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let properties: BTreeMap<&String, &Value> = properties.iter().collect();
    for (name, property) in properties {
        let mut ty = lua_type(property);
        let mut optional = !required.contains(&name.as_str());
        if let Some(inner) = ty.strip_suffix('?') {
            optional = true;
            ty = inner
                .strip_prefix('(')
                .and_then(|inner| inner.strip_suffix(')'))
                .unwrap_or(inner)
                .to_owned();
        }
        let doc = one_line(property);
        let marker = if optional { "?" } else { "" };
        let doc = if doc.is_empty() { doc } else { format!(" {doc}") };
        out.push(format!("---@field {name}{marker} {ty}{doc}"));
    }
}

/// The value of a tagged union variant's tag (`kind`, `role` or `type`).
fn variant_tag(variant: &Value) -> Option<String> {
    ["kind", "role", "type"].iter().find_map(|key| {
        let tag = variant.get("properties")?.get(*key)?.get("const")?;
        Some(tag.as_str().map_or_else(|| tag.to_string(), str::to_owned))
    })
}

/// One schema definition as LuaCATS: a class for an object, an alias of string literals for a
/// unit enum, one class per variant and an alias of them for a tagged union.
fn lua_definition(out: &mut Vec<String>, name: &str, schema: &Value) {
    let full = format!("dsh.{name}");
    let doc = one_line(schema);
    let push_doc = |out: &mut Vec<String>, doc: &str| {
        if !doc.is_empty() {
            out.push(format!("--- {doc}"));
        }
    };
    if let Some(Value::Array(variants)) = schema.get("oneOf") {
        if variants.iter().all(|variant| variant.get("const").is_some()) {
            push_doc(out, &doc);
            out.push(format!("---@alias {full} {}", lua_type(schema)));
            return;
        }
        let mut members = Vec::new();
        for (index, variant) in variants.iter().enumerate() {
            let tag = variant_tag(variant).unwrap_or_else(|| format!("variant{index}"));
            let variant_name = format!("{full}.{}", identifier(&tag));
            push_doc(out, &one_line(variant));
            let parent = match variant.get("$ref").and_then(Value::as_str) {
                Some(reference) => format!(": {}", ref_name(reference)),
                None => String::new(),
            };
            out.push(format!("---@class {variant_name}{parent}"));
            lua_fields(out, variant);
            out.push(String::new());
            members.push(variant_name);
        }
        push_doc(out, &doc);
        out.push(format!("---@alias {full} {}", members.join("|")));
        return;
    }
    push_doc(out, &doc);
    let is_object = schema.get("properties").is_some()
        || schema.get("type").and_then(Value::as_str) == Some("object");
    if is_object {
        out.push(format!("---@class {full}"));
        lua_fields(out, schema);
    } else {
        out.push(format!("---@alias {full} {}", lua_type(schema)));
    }
}

/// The Python client's `clients/python/dsh_client/protocol.py`, read from the JSON Schema
/// document ([`json_schema`]) alone: the constants (version, method names, error codes, event
/// kinds), a frozen dataclass per object definition with its decoder and encoder, a class per
/// variant of each tagged union, a `Literal` alias per string enum, a class per event kind with
/// its typed `data`, and `Api`, a typed coroutine per method. The helpers the decoders call are
/// the package's own `_wire.py`.
pub fn python() -> String {
    let document: Value = serde_json::from_str(&json_schema()).unwrap_or_default();
    let empty = Map::new();
    let object = |key: &str| document.get(key).and_then(Value::as_object).unwrap_or(&empty);
    let defs = object("$defs");
    let event = defs.get("SessionEvent").cloned().unwrap_or_default();
    // Each event kind with the name of its payload's definition, in log-vocabulary order.
    let kinds: Vec<(&str, &str)> = event
        .get("oneOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|variant| {
            let properties = variant.get("properties")?;
            let kind = properties.get("type")?.get("const")?.as_str()?;
            Some((kind, py_ref_name(properties.get("data")?.get("$ref")?.as_str()?)))
        })
        .collect();
    // The log vocabulary is what the payloads refer to, transitively; the rest is the API's.
    let mut vocabulary = std::collections::BTreeSet::new();
    let mut pending: Vec<&str> = kinds.iter().map(|(_, payload)| *payload).collect();
    while let Some(name) = pending.pop() {
        if vocabulary.insert(name)
            && let Some(schema) = defs.get(name)
        {
            py_refs(schema, &mut pending);
        }
    }

    let mut out = String::from(PY_HEADER);
    let version = document.get("protocolVersion").cloned().unwrap_or_default();
    out += &format!(
        "PROTOCOL_VERSION: Final = {version}\n\
         \"\"\"The protocol version this client speaks; `initialize` refuses another.\"\"\"\n\n\n\
         class Methods:\n    \"\"\"Method names (and the `session/event` notification's).\"\"\"\n\n"
    );
    let mut names: Vec<&String> =
        object("methods").keys().chain(object("notifications").keys()).collect();
    names.sort();
    for name in names {
        out += &format!("    {}: Final = {}\n", py_constant(name), py_string(name));
    }
    out +=
        "\n\nclass ErrorCodes:\n    \"\"\"The application error codes (`RpcError.code`).\"\"\"\n\n";
    for (name, code) in object("errorCodes") {
        out += &format!("    {}: Final = {code}\n", py_constant(name));
    }
    out += "\n\nEVENT_KINDS: Final = (\n";
    for (kind, _) in &kinds {
        out += &format!("    {},\n", py_string(kind));
    }
    out +=
        ")\n\"\"\"Every log event kind, in log-vocabulary order.\"\"\"\n\n\n# The API's types.\n";
    for (name, schema) in defs.iter().filter(|(name, _)| !vocabulary.contains(name.as_str())) {
        if name != "SessionEvent" {
            py_definition(&mut out, name, schema, defs);
        }
    }
    out += "\n\n# The log vocabulary (the payloads of the events' `data`).\n";
    for (name, schema) in defs.iter().filter(|(name, _)| vocabulary.contains(name.as_str())) {
        py_definition(&mut out, name, schema, defs);
    }
    py_events(&mut out, &event, &kinds, defs);
    out += PY_API;
    for (method, entry) in object("methods") {
        let result_schema = entry.get("result").unwrap_or(&Value::Null);
        let result = py_type(result_schema, defs);
        let (arguments, sent) = match entry.get("params").map(|params| py_type(params, defs)) {
            Some(params) if params.plain => {
                (format!(", params: {}", params.full_annotation()), "params")
            }
            Some(params) => {
                (format!(", params: {}", params.full_annotation()), "_w.encode(params)")
            }
            None => (String::new(), "None"),
        };
        // A result that is not a class of its own says what it is (`subscription id`).
        let doc = match py_description(result_schema).trim() {
            "" => format!("`{method}`."),
            what => format!("`{method}`; the result is the {what}."),
        };
        out += &format!(
            "\n    async def {}(self{arguments}) -> {}:\n{}        return await self._call({}, {sent}, {})\n",
            py_constant(method).to_ascii_lowercase(),
            result.full_annotation(),
            py_doc(&doc, "        "),
            py_string(method),
            result.full_decoder(),
        );
    }
    out
}

const PY_HEADER: &str = r#"# Generated by `cargo test -p dsh-protocol` (UPDATE_EXPECT=1) from the protocol's JSON Schema
# (protocol/schema/dsh-protocol.schema.json). Do not edit: change the Rust types and regenerate.
"""The dsh protocol's types, read from its JSON Schema: the constants, every method's params
and result, the log vocabulary, and one class per event kind.

Objects are frozen dataclasses with ``from_json`` (fields this client does not know are
skipped, as the protocol asks of clients) and ``to_json`` (camelCase keys; an optional field
equal to its default is left out). A tagged union is one class per variant, and a tag this
client does not know decodes to :class:`Unknown` (an event kind, to :class:`UnknownEvent`).
A string enum is a ``Literal`` alias; a value this client does not know passes through as a
string. :class:`Api` has one typed coroutine per method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Final, Literal, TypeAlias, TypeVar, Union, cast

from . import _wire as _w
from ._wire import DecodeError as DecodeError, Unknown as Unknown

_T = TypeVar("_T")

"#;

const PY_UNKNOWN_EVENT: &str = r#"

@dataclass(frozen=True, kw_only=True)
class UnknownEvent(BaseEvent):
    """An event of a kind this client does not know (a newer daemon's addition): its kind and its
    payload as received. Clients ignore what they do not know; its ``seq`` still counts."""

    type: str
    """The event's kind."""
    data: Any
    """Its payload, as received."""

    @classmethod
    def from_json(cls, value: Any) -> UnknownEvent:
        o = _w.obj(value, "UnknownEvent")
        envelope = _w.fields_of(BaseEvent.from_json(o))
        return cls(**envelope, type=_w.required(o, "type", _w.string, "UnknownEvent"), data=o.get("data"))

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "type": self.type, "data": self.data}
"#;

const PY_API: &str = r#"

class Api:
    """Every method of the protocol as a typed coroutine: its params class in, its result class
    out. A client implements :meth:`_call`."""

    async def _call(self, method: str, params: Any, decode: Callable[[Any], _T]) -> _T:
        """Sends `method` with `params` (``None``: none) and decodes its result with `decode`."""
        raise NotImplementedError
"#;

/// `#/$defs/Name` → `Name`.
fn py_ref_name(reference: &str) -> &str {
    reference.rsplit('/').next().unwrap_or(reference)
}

/// Every definition `schema` refers to.
fn py_refs<'a>(schema: &'a Value, out: &mut Vec<&'a str>) {
    match schema {
        Value::Object(object) => {
            for (key, value) in object {
                match (key.as_str(), value) {
                    ("$ref", Value::String(reference)) => out.push(py_ref_name(reference)),
                    _ => py_refs(value, out),
                }
            }
        }
        Value::Array(values) => values.iter().for_each(|value| py_refs(value, out)),
        _ => {}
    }
}

/// A Python string literal (JSON's escapes are Python's).
fn py_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// A JSON value as a Python literal.
fn py_literal(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(number) => number.to_string(),
        Value::String(text) => py_string(text),
        Value::Array(values) => {
            format!("[{}]", values.iter().map(py_literal).collect::<Vec<_>>().join(", "))
        }
        Value::Object(object) => {
            let entries: Vec<String> = object
                .iter()
                .map(|(key, value)| format!("{}: {}", py_string(key), py_literal(value)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

/// `sessionId` → `session_id`; a Python keyword gets a trailing `_` (`from` → `from_`).
fn py_snake(name: &str) -> String {
    const KEYWORDS: &[&str] = &[
        "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
        "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
        "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
        "try", "while", "with", "yield",
    ];
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() && !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    if KEYWORDS.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

/// `session/mcpServers` → `SESSION_MCP_SERVERS`.
fn py_constant(name: &str) -> String {
    py_snake(name).trim_end_matches('_').to_ascii_uppercase()
}

/// `firstRequest` → `FirstRequest`, `request/header-delta` → `RequestHeaderDelta`.
fn py_pascal(tag: &str) -> String {
    tag.split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|part| {
            let first = part.chars().next()?;
            Some(first.to_ascii_uppercase().to_string() + &part[first.len_utf8()..])
        })
        .collect()
}

/// A docstring at `indent`, with its line break (nothing for no text): the text as written,
/// backslashes and quotes that would end it escaped.
fn py_doc(text: &str, indent: &str) -> String {
    let text = text.trim().replace('\\', "\\\\").replace("\"\"\"", "\\\"\\\"\\\"");
    let text = match text.strip_suffix('"') {
        Some(rest) => format!("{rest}\\\""),
        None => text,
    };
    if text.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(index, line)| match (index, line.trim()) {
            (0, _) => line.to_owned(),
            (_, "") => String::new(),
            _ => format!("{indent}{line}"),
        })
        .collect();
    let close = if lines.len() > 1 { format!("\n{indent}") } else { String::new() };
    format!("{indent}\"\"\"{}{close}\"\"\"\n", lines.join("\n"))
}

fn py_description(schema: &Value) -> &str {
    schema.get("description").and_then(Value::as_str).unwrap_or_default()
}

/// A schema as Python: the annotation, the decoder (an expression of type `Callable[[Any], T]`),
/// whether null is allowed besides, and whether the value is plain JSON (encoded as it is).
struct PyType {
    annotation: String,
    decoder: String,
    nullable: bool,
    plain: bool,
}

impl PyType {
    fn new(annotation: &str, decoder: &str, plain: bool) -> PyType {
        let (annotation, decoder) = (annotation.to_owned(), decoder.to_owned());
        PyType { annotation, decoder, nullable: false, plain }
    }

    fn any() -> PyType {
        PyType::new("Any", "_w.any_value", true)
    }

    /// The decoder, null included when the type allows it.
    fn full_decoder(&self) -> String {
        if self.nullable {
            format!("lambda value: _w.nullable(value, {})", self.decoder)
        } else {
            self.decoder.clone()
        }
    }

    fn full_annotation(&self) -> String {
        if self.nullable { format!("{} | None", self.annotation) } else { self.annotation.clone() }
    }
}

/// Whether a definition is generated as a dataclass (an object that is not a map).
fn py_is_dataclass(schema: &Value) -> bool {
    schema.get("oneOf").is_none()
        && (schema.get("properties").is_some()
            || schema.get("type").and_then(Value::as_str) == Some("object")
                && schema.get("additionalProperties").is_none_or(|more| !more.is_object()))
}

fn py_type(schema: &Value, defs: &Map<String, Value>) -> PyType {
    let Some(object) = schema.as_object().filter(|object| !object.is_empty()) else {
        return PyType::any();
    };
    if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
        let name = py_ref_name(reference);
        let decoder = match defs.get(name) {
            _ if name == "SessionEvent" => "decode_session_event".to_owned(),
            Some(schema) if py_is_dataclass(schema) => format!("{name}.from_json"),
            _ => format!("_decode_{}", py_snake(name)),
        };
        return PyType::new(name, &decoder, false);
    }
    if let Some(Value::Array(alternatives)) = object.get("anyOf").or_else(|| object.get("oneOf")) {
        let is_null =
            |alternative: &&Value| alternative.get("type").and_then(Value::as_str) == Some("null");
        let rest: Vec<&Value> = alternatives.iter().filter(|a| !is_null(a)).collect();
        let [single] = rest.as_slice() else { return PyType::any() };
        let mut inner = py_type(single, defs);
        inner.nullable |= rest.len() < alternatives.len();
        return inner;
    }
    if let Some(Value::Array(values)) = object.get("enum")
        && values.iter().all(Value::is_string)
    {
        let literals: Vec<String> = values.iter().map(py_literal).collect();
        let annotation = format!("Literal[{}]", literals.join(", "));
        let decoder = format!("lambda value: cast({}, _w.string(value))", py_string(&annotation));
        return PyType { annotation, decoder, nullable: false, plain: true };
    }
    match object.get("type") {
        Some(Value::Array(types)) => {
            let single = |ty: &str| {
                let mut one = object.clone();
                one.insert("type".to_owned(), Value::from(ty));
                py_type(&Value::Object(one), defs)
            };
            let parts: Vec<PyType> = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|&ty| ty != "null")
                .map(single)
                .collect();
            let nullable = parts.len() < types.len();
            let mut inner = match <[PyType; 1]>::try_from(parts) {
                Ok([one]) => one,
                Err(parts) => {
                    let classes: Vec<&str> = parts.iter().map(|p| p.annotation.as_str()).collect();
                    let annotation = classes.join(" | ");
                    let decoder = format!(
                        "lambda value: cast({}, _w.instance(value, ({},)))",
                        py_string(&annotation),
                        classes.join(", ")
                    );
                    let plain = parts.iter().all(|p| p.plain);
                    PyType { annotation, decoder, nullable: false, plain }
                }
            };
            inner.nullable |= nullable;
            inner
        }
        Some(Value::String(ty)) => match ty.as_str() {
            "string" => PyType::new("str", "_w.string", true),
            "integer" => PyType::new("int", "_w.integer", true),
            "number" => PyType::new("float", "_w.number", true),
            "boolean" => PyType::new("bool", "_w.boolean", true),
            "null" => PyType::new("None", "_w.null", true),
            "array" => {
                let item = object.get("items").map_or_else(PyType::any, |i| py_type(i, defs));
                let annotation = format!("list[{}]", item.full_annotation());
                let decoder = format!("lambda value: _w.array(value, {})", item.full_decoder());
                PyType { annotation, decoder, nullable: false, plain: item.plain }
            }
            "object" => match object.get("additionalProperties") {
                Some(values @ Value::Object(_)) => {
                    let item = py_type(values, defs);
                    let annotation = format!("dict[str, {}]", item.full_annotation());
                    let decoder =
                        format!("lambda value: _w.mapping(value, {})", item.full_decoder());
                    PyType { annotation, decoder, nullable: false, plain: item.plain }
                }
                _ => PyType::new("dict[str, Any]", "_w.dictionary", true),
            },
            _ => PyType::any(),
        },
        _ => PyType::any(),
    }
}

/// The tag of a tagged union's variant: its key (`kind`, `role` or `type`) and value.
fn py_variant_tag(variant: &Value) -> Option<(&'static str, &str)> {
    ["kind", "role", "type"]
        .into_iter()
        .find_map(|key| Some((key, variant.get("properties")?.get(key)?.get("const")?.as_str()?)))
}

/// One definition: a dataclass for an object, a `Literal` alias for a string enum, a class per
/// variant and a union alias for a tagged union; anything else an alias of its type.
fn py_definition(out: &mut String, name: &str, schema: &Value, defs: &Map<String, Value>) {
    let decoder = format!("_decode_{}", py_snake(name));
    let variants = schema.get("oneOf").and_then(Value::as_array);
    let values: Option<Vec<&str>> = variants
        .map(|variants| variants.iter().map(|variant| variant.get("const")?.as_str()).collect())
        .unwrap_or_default();
    // A tagged union: every variant an object with a tag, under the same key.
    let tags: Option<Vec<(&str, &str)>> = variants
        .and_then(|variants| variants.iter().map(py_variant_tag).collect::<Option<Vec<_>>>())
        .filter(|tags| {
            tags.iter().all(|(key, _)| tags.first().is_some_and(|first| first.0 == *key))
        });
    if let (Some(values), Some(variants)) = (values, variants) {
        let literals: Vec<String> = values.iter().map(|value| py_string(value)).collect();
        let mut doc = format!("{}\n", py_description(schema).trim());
        for (value, variant) in values.iter().zip(variants) {
            doc += &format!("\n- ``{value}``: {}", one_line(variant));
        }
        *out += &format!(
            "\n\n{name}: TypeAlias = Literal[{}]\n{}\n\ndef {decoder}(value: Any) -> {name}:\n    \
             return cast({name}, _w.string(value))\n",
            literals.join(", "),
            py_doc(&doc, "")
        );
    } else if let (Some(tags), Some(variants)) = (tags, variants) {
        let classes: Vec<String> =
            tags.iter().map(|(_, tag)| format!("{name}{}", py_pascal(tag))).collect();
        for ((tag, class), variant) in tags.iter().zip(&classes).zip(variants) {
            py_class(out, class, variant, Some(*tag), defs);
        }
        let table = format!("_{}_VARIANTS", py_constant(name));
        let key = tags.first().map_or("type", |(key, _)| key);
        *out += &format!("\n\n{name}: TypeAlias = Union[\n");
        for class in &classes {
            *out += &format!("    {class},\n");
        }
        *out += &format!(
            "    Unknown,\n]\n{}\n{table}: Final[dict[str, Callable[[Any], {name}]]] = {{\n",
            py_doc(py_description(schema), "")
        );
        for ((_, tag), class) in tags.iter().zip(&classes) {
            *out += &format!("    {}: {class}.from_json,\n", py_string(tag));
        }
        *out += &format!(
            "}}\n\n\ndef {decoder}(value: Any) -> {name}:\n    return _w.tagged(value, {}, {}, {table})\n",
            py_string(name),
            py_string(key)
        );
    } else if py_is_dataclass(schema) {
        py_class(out, name, schema, None, defs);
    } else {
        let ty = py_type(schema, defs);
        *out += &format!(
            "\n\n{name}: TypeAlias = {}\n{}\n\ndef {decoder}(value: Any) -> {name}:\n    \
             return cast({name}, ({})(value))\n",
            ty.full_annotation(),
            py_doc(py_description(schema), ""),
            ty.full_decoder()
        );
    }
}

/// A frozen dataclass with `from_json` and `to_json`; `tag` is a tagged union variant's tag
/// (`kind`, `role` or `type`, a field fixed to its value). Its fields: the required ones in the
/// schema's order, then the optional ones by name; an optional field defaults to the schema's
/// default, else `None`, and is left out of `to_json` when it equals that default.
fn py_class(
    out: &mut String,
    class: &str,
    schema: &Value,
    tag: Option<(&str, &str)>,
    defs: &Map<String, Value>,
) {
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let tag_key = tag.map(|(key, _)| key);
    let mut keys: Vec<&str> =
        required.iter().copied().filter(|key| properties.contains_key(*key)).collect();
    keys.extend(properties.keys().map(String::as_str).filter(|key| !required.contains(key)));
    let owner = py_string(class);

    *out += &format!("\n\n@dataclass(frozen=True, kw_only=True)\nclass {class}(_w.WireObject):\n");
    *out += &py_doc(py_description(schema), "    ");
    *out += "\n";
    let mut decode = String::new();
    let mut encode_required = Vec::new();
    let mut encode_optional = String::new();
    if let Some((key, value)) = tag {
        let literal = py_string(value);
        *out += &format!("    {}: Literal[{literal}] = {literal}\n", py_snake(key));
        encode_required.push(format!("{}: self.{}", py_string(key), py_snake(key)));
    }
    for key in keys.into_iter().filter(|key| Some(*key) != tag_key) {
        let property = &properties[key];
        let (name, wire, ty) = (py_snake(key), py_string(key), py_type(property, defs));
        let value =
            if ty.plain { format!("self.{name}") } else { format!("_w.encode(self.{name})") };
        let default = property.get("default").filter(|value| !value.is_null());
        if required.contains(&key) {
            *out += &format!("    {name}: {}\n", ty.full_annotation());
            decode += &format!(
                "            {name}=_w.required(o, {wire}, {}, {owner}),\n",
                ty.full_decoder()
            );
            encode_required.push(format!("{wire}: {value}"));
        } else if let Some(default) = default {
            let literal = py_literal(default);
            let initial = match literal.as_str() {
                "[]" => "field(default_factory=list)".to_owned(),
                "{}" => "field(default_factory=dict)".to_owned(),
                other if other.starts_with(['[', '{']) => {
                    format!("field(default_factory=lambda: {other})")
                }
                other => other.to_owned(),
            };
            *out += &format!("    {name}: {} = {initial}\n", ty.full_annotation());
            decode += &format!(
                "            {name}=_w.defaulted(o, {wire}, {}, {owner}, {literal}),\n",
                ty.full_decoder()
            );
            encode_optional += &format!(
                "        if self.{name} != {literal}:\n            out[{wire}] = {value}\n"
            );
        } else {
            *out += &format!("    {name}: {} | None = None\n", ty.annotation);
            decode +=
                &format!("            {name}=_w.optional(o, {wire}, {}, {owner}),\n", ty.decoder);
            encode_optional += &format!(
                "        if self.{name} is not None:\n            out[{wire}] = {value}\n"
            );
        }
        *out += &py_doc(py_description(property), "    ");
    }
    *out += &format!("\n    @classmethod\n    def from_json(cls, value: Any) -> {class}:\n");
    if decode.is_empty() {
        *out += &format!("        _w.obj(value, {owner})\n        return cls()\n");
    } else {
        *out += &format!(
            "        o = _w.obj(value, {owner})\n        return cls(\n{decode}        )\n"
        );
    }
    let required = encode_required.join(", ");
    *out += "\n    def to_json(self) -> dict[str, Any]:\n";
    if encode_optional.is_empty() {
        *out += &format!("        return {{{required}}}\n");
    } else {
        *out += &format!(
            "        out: dict[str, Any] = {{{required}}}\n{encode_optional}        return out\n"
        );
    }
}

/// The events: `BaseEvent`, the envelope (an optional list in it defaults to empty); a class per
/// kind narrowing `type` and typing `data`; `UnknownEvent`; the union and its decoder.
fn py_events(out: &mut String, event: &Value, kinds: &[(&str, &str)], defs: &Map<String, Value>) {
    let mut envelope = event.clone();
    if let Some(object) = envelope.as_object_mut() {
        object.remove("oneOf");
        let description = py_description(event).trim().to_owned();
        object.insert(
            "description".to_owned(),
            Value::from(format!(
                "{description}\n\nEach kind is a subclass with ``type`` fixed and ``data`` typed: \
                 match on the class (``case StepStartEvent(data=StepStart(step=step)):``)."
            )),
        );
    }
    if let Some(properties) = envelope.get_mut("properties").and_then(Value::as_object_mut) {
        properties.remove("type");
        properties.remove("data");
        for property in properties.values_mut() {
            if property.get("type").and_then(Value::as_str) == Some("array")
                && let Some(property) = property.as_object_mut()
            {
                property.entry("default").or_insert(json!([]));
            }
        }
    }
    *out += "\n\n# The events: `session/event` and `session/events` deliver them.\n";
    py_class(out, "BaseEvent", &envelope, None, defs);
    let mut classes = Vec::new();
    for (kind, payload) in kinds {
        let class = format!("{}Event", py_pascal(kind));
        let (literal, owner) = (py_string(kind), py_string(&class));
        let decoder = py_type(&json!({ "$ref": format!("#/$defs/{payload}") }), defs).decoder;
        *out += &format!(
            r#"

@dataclass(frozen=True, kw_only=True)
class {class}(BaseEvent):
    """A `{kind}` event: ``data`` is a :class:`{payload}`."""

    type: Literal[{literal}] = {literal}
    data: {payload}

    @classmethod
    def from_json(cls, value: Any) -> {class}:
        o = _w.obj(value, {owner})
        envelope = _w.fields_of(BaseEvent.from_json(o))
        return cls(**envelope, data=_w.required(o, "data", {decoder}, {owner}))

    def to_json(self) -> dict[str, Any]:
        return {{**super().to_json(), "type": self.type, "data": _w.encode(self.data)}}
"#
        );
        classes.push((literal, class));
    }
    *out += PY_UNKNOWN_EVENT;
    *out += "\n\nSessionEvent: TypeAlias = Union[\n";
    for (_, class) in &classes {
        *out += &format!("    {class},\n");
    }
    *out += "    UnknownEvent,\n]\n\"\"\"One log event as delivered, typed by its kind.\"\"\"\n\n";
    *out += "EVENT_CLASSES: Final[dict[str, Callable[[Any], SessionEvent]]] = {\n";
    for (literal, class) in &classes {
        *out += &format!("    {literal}: {class}.from_json,\n");
    }
    *out += r#"}
"""Each event kind's decoder."""


def decode_session_event(value: Any) -> SessionEvent:
    """Decodes one event as `session/event` and `session/events` deliver it: the class of its
    kind, or :class:`UnknownEvent` for a kind this client does not know."""
    o = _w.obj(value, "SessionEvent")
    decode = EVENT_CLASSES.get(_w.required(o, "type", _w.string, "SessionEvent"))
    return UnknownEvent.from_json(o) if decode is None else decode(o)
"#;
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
    fn the_committed_prompt_line_schema_is_fresh() {
        let path = root().join("protocol/schema/dsh-prompt-json.schema.json");
        check(path, super::prompt_json_schema());
    }

    #[test]
    fn the_committed_typescript_types_are_fresh() {
        check(root().join("editors/vscode/src/protocol.generated.ts"), super::typescript());
    }

    #[test]
    fn the_committed_lua_protocol_is_fresh() {
        check(root().join("editors/nvim/lua/dsh/protocol.lua"), super::lua());
    }

    #[test]
    fn the_committed_python_protocol_is_fresh() {
        check(root().join("clients/python/dsh_client/protocol.py"), super::python());
    }

    #[test]
    fn every_log_payload_has_a_schema_under_its_own_name() {
        let mut generator = schemars::SchemaGenerator::default();
        let schemas = super::payload_schemas(&mut generator);
        assert_eq!(schemas.len(), dsh_session::EVENT_KINDS.len());
        for ((kind, payload, schema), expected) in schemas.iter().zip(dsh_session::EVENT_PAYLOADS) {
            assert_eq!((*kind, *payload), *expected);
            assert_eq!(schema["$ref"], format!("#/$defs/{payload}"), "{kind}");
        }
    }

    #[test]
    fn every_log_event_kind_has_a_typescript_member() {
        let ts = super::typescript();
        for kind in dsh_session::EVENT_KINDS {
            assert!(ts.contains(&format!("type: \"{kind}\"")), "missing {kind}");
        }
    }
}

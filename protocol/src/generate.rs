//! Generating the API's JSON Schema, TypeScript declarations and Lua annotations from the Rust
//! types.
//!
//! The outputs are committed (`protocol/schema/dsh-protocol.schema.json`,
//! `editors/vscode/src/protocol.generated.ts`, `editors/nvim/lua/dsh/protocol.lua`) and a test
//! compares each with a fresh generation: a change to a type fails the test until the files are
//! regenerated with `UPDATE_EXPECT=1 cargo test -p dsh-protocol`.

use std::collections::BTreeMap;

use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};
use ts_rs::TS;

use crate::*;
use dsh_session as log;

/// `(method, params type, result type)` for every method; `None` params means no params.
fn method_types(generator: &mut SchemaGenerator) -> Vec<(&'static str, Option<Value>, Value)> {
    fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
        log::canonical_json(generator.subschema_for::<T>().to_value())
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
            method::SESSION_AUDIT,
            Some(schema::<SessionParams>(generator)),
            schema::<SessionAuditResult>(generator),
        ),
        (
            method::WORKSPACE_PROVENANCE,
            Some(schema::<WorkspaceProvenanceParams>(generator)),
            schema::<WorkspaceProvenanceResult>(generator),
        ),
        (
            method::APPROVAL_RESPOND,
            Some(schema::<ApprovalRespondParams>(generator)),
            schema::<ApprovalRespondResult>(generator),
        ),
        (
            method::MCP_LIST,
            Some(schema::<McpListParams>(generator)),
            schema::<McpListResult>(generator),
        ),
        (
            method::SESSION_MCP_SERVERS,
            Some(schema::<SessionMcpServersParams>(generator)),
            schema::<SessionMcpServersResult>(generator),
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
    let notification = log::canonical_json(generator.subschema_for::<SessionEvent>().to_value());
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
        "notifications": { method::SESSION_EVENT: { "params": { "subscription": "subscription id", "result": notification } } },
        "errorCodes": error_codes(),
        "$defs": definitions,
    });
    // Keys sorted whatever map serde_json was built with (a dependency of the workspace turns on
    // its `preserve_order`), so the committed file is the same from every build.
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
        SessionAuditResult::decl(&config),
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
        // The log vocabulary the API hands out.
        log::Usage::decl(&config),
        log::StopReason::decl(&config),
        log::ForkOrigin::decl(&config),
        log::SessionPin::decl(&config),
        log::RequestSent::decl(&config),
        log::ProviderKind::decl(&config),
        log::WireFormat::decl(&config),
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
        log::UserMessage::decl(&config),
        log::SteeringMessage::decl(&config),
        log::ContextMessage::decl(&config),
        log::InstructionFile::decl(&config),
        log::FileChange::decl(&config),
        log::FileSeen::decl(&config),
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
    ]
}

/// The Neovim plugin's `lua/dsh/protocol.lua`: the protocol constants (version, method names,
/// error codes, the log vocabulary) and LuaCATS annotations for every API type and log payload,
/// all from the types' JSON Schemas.
pub fn lua() -> String {
    let mut generator = SchemaGenerator::default();
    method_types(&mut generator);
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
    fn the_committed_lua_protocol_is_fresh() {
        check(root().join("editors/nvim/lua/dsh/protocol.lua"), super::lua());
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

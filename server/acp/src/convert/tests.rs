//! The pure conversions as tables: each case an input and the JSON it becomes — an ACP
//! response, dsh params, or the ACP error — compared as values.
#![allow(clippy::unwrap_used)]

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::*;

/// `value` as JSON.
fn wire(value: impl Serialize) -> Value {
    serde_json::to_value(value).unwrap()
}

/// An answer or its error, as JSON: `{"ok": …}` or `{"error": {code, message, data?}}`.
fn outcome<T: Serialize>(result: Result<T, AcpError>) -> Value {
    match result {
        Ok(value) => json!({"ok": value}),
        Err(error) => json!({"error": error}),
    }
}

/// A typed value from its JSON.
fn from<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn check(cases: Vec<(&str, Value, Value)>) {
    for (name, got, expected) in cases {
        assert_eq!(got, expected, "{name}");
    }
}

const SELECTOR_DESCRIPTION: &str =
    "The model this session is pinned to (start dsh acp with --model, or fork, for another)";

#[test]
fn the_initialize_answer_advertises_what_the_front_does_and_dsh_extensions() {
    let steering =
        json!({"supported": true, "method": "_session/steering", "idleBehavior": "promptRequired"});
    check(vec![(
        "initialize",
        wire(initialize(false)),
        json!({
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                "sessionCapabilities": {"list": {}, "resume": {}},
                "mcpCapabilities": {"http": true, "sse": false},
                // The SDK's type always says what the agent supports of authentication: nothing.
                "auth": {},
                "_meta": {
                    "steering": steering,
                    "dsh": {
                        "version": 1,
                        "methods": ["_session/steering", "_dsh/fork", "_dsh/request", "_dsh/rewind"],
                        "updateMeta": ["dsh/usage", "dsh/steering"],
                    },
                },
            },
            "agentInfo": {"name": "dsh", "title": "dsh", "version": env!("CARGO_PKG_VERSION")},
            "authMethods": [],
            "_meta": {"steering": steering},
        }),
    )]);
}

fn prompt_result(stop_reason: &str, error: Option<&str>) -> SessionPromptResult {
    let usage = json!({"promptTokens": 300, "cacheHitTokens": 256, "cacheMissTokens": 44,
                       "completionTokens": 20, "reasoningTokens": 3});
    let mut result = json!({"turn": 3, "stopReason": stop_reason, "steps": 2, "usage": usage});
    if let Some(error) = error {
        result["error"] = json!(error);
    }
    from(result)
}

#[test]
fn dsh_answers_become_acp_responses() {
    let turn = json!({"dsh/turn": {"turn": 3, "steps": 2, "usage": {"promptTokens": 300,
        "cacheHitTokens": 256, "cacheMissTokens": 44, "completionTokens": 20, "reasoningTokens": 3}}});
    let answer = |stop_reason, finish, error| {
        outcome(prompt_response(prompt_result(stop_reason, error), finish))
    };
    let stopped = |stop_reason| json!({"ok": {"stopReason": stop_reason, "_meta": turn}});
    check(vec![
        (
            "the model selector",
            wire(model_selector("deepseek-v4-flash", "deepseek")),
            json!([{
                "id": "model",
                "name": "Model",
                "description": SELECTOR_DESCRIPTION,
                "category": "model",
                "type": "select",
                "currentValue": "deepseek-v4-flash",
                "options": [{
                    "value": "deepseek-v4-flash",
                    "name": "deepseek-v4-flash",
                    "description": "provider profile deepseek",
                }],
            }]),
        ),
        ("a completed turn", answer("completed", Some("stop"), None), stopped("end_turn")),
        ("one out of tokens", answer("completed", Some("length"), None), stopped("max_tokens")),
        ("one refused", answer("completed", Some("content_filter"), None), stopped("refusal")),
        ("one cancelled", answer("cancelled", None, None), stopped("cancelled")),
        ("one out of steps", answer("maxSteps", None, None), stopped("max_turn_requests")),
        (
            "a failed turn",
            answer("error", None, Some("the provider said no")),
            json!({"error": {"code": -32603, "message": "the provider said no", "data": {"turn": 3}}}),
        ),
        (
            "a failed turn without a message",
            answer("error", None, None),
            json!({"error": {"code": -32603, "message": "the turn failed", "data": {"turn": 3}}}),
        ),
        (
            "an answer that does not match the output schema",
            answer("outputInvalid", None, Some("the answer does not match the output schema: x")),
            json!({"error": {"code": -32603, "message": "the answer does not match the output schema: x", "data": {"turn": 3}}}),
        ),
    ]);
}

fn approval(sandbox: Option<&str>) -> ApprovalRequest {
    let mut request = json!({"approvalId": "a1", "callId": "call_1", "tool": "run_command",
                             "summary": "run cargo test"});
    if let Some(sandbox) = sandbox {
        request["sandbox"] = json!(sandbox);
    }
    from(request)
}

#[test]
fn approvals_become_permission_requests() {
    let fields = || {
        ToolCallUpdateFields::new()
            .title("run_command: cargo test".to_owned())
            .kind(agent_client_protocol::v1::schema::ToolKind::Execute)
            .raw_input(json!({"command": "cargo test"}))
    };
    let option =
        |id: &str, name: &str, kind: &str| json!({"optionId": id, "name": name, "kind": kind});
    let allow_once = option("allow_once", "Allow once", "allow_once");
    let allow_always =
        option("allow_always", "Always allow this tool in this session", "allow_always");
    let reject = option("reject_once", "Reject", "reject_once");
    let unconfined = option("allow_unconfined", "Allow once, outside the sandbox", "allow_once");
    check(vec![
        (
            "a call outside any sandbox",
            wire(permission_request("s1", &approval(None), fields())),
            json!({
                "sessionId": "s1",
                "toolCall": {"toolCallId": "call_1", "title": "run cargo test", "kind": "execute",
                             "rawInput": {"command": "cargo test"}},
                "options": [allow_once, allow_always, reject],
                "_meta": {"dsh/approvalId": "a1"},
            }),
        ),
        (
            "a sandboxed command can also run once outside it",
            wire(permission_request("s1", &approval(Some("landlock")), fields())),
            json!({
                "sessionId": "s1",
                "toolCall": {"toolCallId": "call_1", "title": "run cargo test (sandbox: landlock)",
                             "kind": "execute", "rawInput": {"command": "cargo test"}},
                "options": [allow_once, unconfined, allow_always, reject],
                "_meta": {"dsh/approvalId": "a1", "dsh/sandbox": "landlock"},
            }),
        ),
    ]);
}

fn summary(session_id: &str, updated_ms: u64, title: Option<&str>) -> SessionSummary {
    let mut summary = json!({"sessionId": session_id, "workspace": "/w", "createdMs": 0,
                             "updatedMs": updated_ms, "turns": 1, "steps": 1, "running": false});
    if let Some(title) = title {
        summary["title"] = json!(title);
    }
    from(summary)
}

#[test]
fn session_lists_become_pages_newest_first() {
    let sessions = vec![
        summary("b", 951_782_400_123, None),
        summary("c", 1_796_059_392_438, Some("Fix the typo")),
        summary("a", 951_782_400_123, Some("Older")),
    ];
    let many: Vec<_> = (0..51).map(|n| summary(&format!("s{n:02}"), 1_000 * n, None)).collect();
    let ids = |page: Value| -> Value {
        let sessions = page["ok"]["sessions"].as_array().unwrap();
        json!({"first": page["ok"]["sessions"][0]["sessionId"], "count": sessions.len(),
               "nextCursor": page["ok"]["nextCursor"]})
    };
    check(vec![
        (
            "one page",
            json!({"ok": session_page(sessions, 0)}),
            json!({"ok": {"sessions": [
                {"sessionId": "c", "cwd": "/w", "title": "Fix the typo",
                 "updatedAt": "2026-11-30T17:23:12.438Z"},
                {"sessionId": "a", "cwd": "/w", "title": "Older", "updatedAt": "2000-02-29T00:00:00.123Z"},
                {"sessionId": "b", "cwd": "/w", "updatedAt": "2000-02-29T00:00:00.123Z"},
            ]}}),
        ),
        (
            "the first of two pages",
            ids(json!({"ok": session_page(many.clone(), 0)})),
            json!({"first": "s50", "count": 50, "nextCursor": "50"}),
        ),
        (
            "the last page",
            ids(json!({"ok": session_page(many.clone(), 50)})),
            json!({"first": "s00", "count": 1, "nextCursor": null}),
        ),
        (
            "a cursor the front never gave",
            outcome(list_cursor(Some("next"))),
            json!({"error": {"code": -32602, "message": "unknown cursor `next`"}}),
        ),
        ("the first page's cursor", outcome(list_cursor(None)), json!({"ok": 0})),
        ("a page's cursor", outcome(list_cursor(Some("50"))), json!({"ok": 50})),
        (
            // The index overflowed when the next page's cursor was computed from it.
            "a cursor past every page",
            ids(json!({"ok": session_page(many, usize::MAX)})),
            json!({"first": null, "count": 0, "nextCursor": null}),
        ),
    ]);
}

fn blocks(value: Value) -> Vec<ContentBlock> {
    from(value)
}

#[test]
fn prompt_blocks_become_one_text_with_links_and_tagged_context() {
    let refused = |message: &str| json!({"error": {"code": -32602, "message": message}});
    check(vec![
        (
            "text, a link and an embedded resource",
            outcome(prompt_text(&blocks(json!([
                {"type": "text", "text": "Explain this"},
                {"type": "resource_link", "uri": "file:///w/src/a.rs", "name": "a.rs"},
                {"type": "resource", "resource": {"uri": "file:///w/b.md", "text": "# B"}},
            ])))),
            json!({"ok": "Explain this\n[@a.rs](file:///w/src/a.rs)\n<context ref=\"file:///w/b.md\">\n# B\n</context>"}),
        ),
        (
            "an image",
            outcome(prompt_text(&blocks(
                json!([{"type": "image", "data": "AAAA", "mimeType": "image/png"}]),
            ))),
            refused("image content is not supported (see promptCapabilities)"),
        ),
        (
            "audio",
            outcome(prompt_text(&blocks(
                json!([{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}]),
            ))),
            refused("audio content is not supported (see promptCapabilities)"),
        ),
        (
            "a binary resource",
            outcome(prompt_text(&blocks(json!([
                {"type": "resource", "resource": {"uri": "file:///w/a.png", "blob": "AAAA"}},
            ])))),
            refused("binary resource file:///w/a.png is not supported"),
        ),
        (
            "blank text",
            outcome(prompt_text(&blocks(json!([{"type": "text", "text": "  "}])))),
            refused("the prompt is empty"),
        ),
    ]);
}

#[test]
fn a_prompt_s_image_blocks_become_attachments_after_its_text() {
    let (text, images) = prompt_parts(&blocks(json!([
        {"type": "text", "text": "What is wrong here?"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png", "uri": "file:///w/shot.png"},
        {"type": "image", "data": "R0lGODlh", "mimeType": "image/gif"},
    ])))
    .unwrap();
    assert_eq!(text, "What is wrong here?");
    let images: Vec<(Option<&str>, &str)> =
        images.iter().map(|image| (image.name.as_deref(), image.data.as_str())).collect();
    assert_eq!(images, [(Some("shot.png"), "iVBORw0KGgo="), (None, "R0lGODlh")]);
    // Images alone are no prompt: dsh's prompts have text.
    let alone =
        prompt_parts(&blocks(json!([{"type": "image", "data": "AAAA", "mimeType": "image/png"}])));
    assert!(alone.is_err());
}

fn config_request(config_id: &str, value: Value) -> SetSessionConfigOptionRequest {
    let mut request = json!({"sessionId": "s1", "configId": config_id});
    request.as_object_mut().unwrap().extend(value.as_object().unwrap().clone());
    from(request)
}

#[test]
fn params_become_dsh_params_or_invalid_params() {
    let refused = |message: &str| json!({"error": {"code": -32602, "message": message}});
    let pinned = "dsh keeps a session on the model it was created with (\"m1\"): start `dsh acp \
                  --model MODEL` for new sessions on another, or fork this one with `dsh --model \
                  MODEL fork SESSION`";
    let choice = |config_id, value| outcome(model_choice(&config_request(config_id, value), "m1"));
    check(vec![
        ("an absolute cwd", outcome(workspace(Path::new("/w"))), json!({"ok": "/w"})),
        (
            "a relative cwd",
            outcome(workspace(Path::new("rel"))),
            refused("cwd must be an absolute path, not `rel`"),
        ),
        ("the pinned model", choice("model", json!({"value": "m1"})), json!({"ok": null})),
        ("another model", choice("model", json!({"value": "m2"})), refused(pinned)),
        ("a boolean", choice("model", json!({"type": "boolean", "value": true})), refused(pinned)),
        (
            "another option",
            choice("mode", json!({"value": "m1"})),
            refused("unknown configuration option `mode`"),
        ),
    ]);
}

#[test]
fn permission_answers_become_dsh_decisions() {
    let selected = |id: &str| json!({"outcome": {"outcome": "selected", "optionId": id}});
    let cases = [
        (selected("allow_once"), ApprovalChoice::Allow),
        (selected("allow_always"), ApprovalChoice::AllowAlways),
        (selected("allow_unconfined"), ApprovalChoice::AllowUnconfined),
        (selected("reject_once"), ApprovalChoice::Deny),
        (selected("something_else"), ApprovalChoice::Deny),
        (json!({"outcome": {"outcome": "cancelled"}}), ApprovalChoice::Deny),
    ];
    for (answer, expected) in cases {
        assert_eq!(decision(&from(answer.clone())), expected, "{answer}");
    }
}

fn servers(value: Value) -> Vec<McpServer> {
    from(value)
}

#[test]
fn acp_mcp_servers_become_dsh_specs_with_mapped_names() {
    let specs = server_specs(&servers(json!([
        {"name": "my server_1", "command": "/bin/srv", "args": ["-v"],
         "env": [{"name": "TOKEN", "value": "secret"}]},
        {"type": "http", "name": "web", "url": "https://example.com/mcp",
         "headers": [{"name": "Authorization", "value": "Bearer x"}]},
    ])));
    let refused = |message: &str| json!({"error": {"code": -32602, "message": message}});
    let named = |name: &str| {
        outcome(server_specs(&servers(
            json!([{"name": name, "command": "a", "args": [], "env": []}]),
        )))
        .pointer("/ok/0/name")
        .or(Some(&json!("refused")))
        .cloned()
        .unwrap()
    };
    check(vec![
        (
            "stdio and streamable HTTP",
            outcome(specs.as_deref().map_err(Clone::clone)),
            json!({"ok": [
                {"name": "my-server-1", "command": "/bin/srv", "args": ["-v"], "env": {"TOKEN": "secret"}},
                {"name": "web", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
            ]}),
        ),
        (
            "SSE",
            outcome(server_specs(&servers(json!([
                {"type": "sse", "name": "old", "url": "https://example.com/sse", "headers": []},
            ])))),
            refused(
                "MCP server `old`: the SSE transport is not supported (MCP deprecated it); use its \
                 streamable-HTTP endpoint (`\"type\": \"http\"`) or run it over stdio",
            ),
        ),
        (
            "two names that map to one",
            outcome(server_specs(&servers(json!([
                {"name": "my server", "command": "a", "args": [], "env": []},
                {"name": "my_server", "command": "b", "args": [], "env": []},
            ])))),
            refused(
                "MCP servers `my server` and `my_server` both become `my-server` in dsh (server \
                 names are letters, digits and `-`): rename one",
            ),
        ),
        (
            "a name without a letter or digit",
            outcome(server_specs(&servers(json!([
                {"name": "!!!", "command": "a", "args": [], "env": []},
            ])))),
            refused(
                "MCP server name `!!!` has no ASCII letter or digit: dsh names a server's tools \
                 `NAME__TOOL` with NAME made of letters, digits and `-`",
            ),
        ),
        ("a valid name is kept", named("filesystem"), json!("filesystem")),
        ("dashes are letters of names", named("-a-"), json!("-a-")),
        ("a space", named("my server"), json!("my-server")),
        ("other characters", named("é/x"), json!("--x")),
        ("a long name is cut", named(&"a".repeat(40)), json!("a".repeat(32))),
        ("nothing", named(""), json!("refused")),
        ("no ASCII", named("日本"), json!("refused")),
    ]);
    // The secrets stay out of Debug output.
    let shown = format!("{:?}", specs.unwrap());
    assert!(!shown.contains("secret") && !shown.contains("Bearer"), "{shown}");
}

#[test]
fn timestamps_are_rfc3339_utc() {
    assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(iso8601(951_782_400_123), "2000-02-29T00:00:00.123Z");
    assert_eq!(iso8601(1_796_059_392_438), "2026-11-30T17:23:12.438Z");
}

#[test]
fn prompt_commands_become_available_commands() {
    let listed: SessionCommandsResult = from(json!({
        "commands": [
            {"name": "review", "description": "Reviews a file", "argumentHint": "FILE",
             "source": ".dsh/commands/review.md"},
            {"name": "hinted", "argumentHint": "WHAT", "source": "/u/commands/hinted.md"},
            {"name": "bare", "source": ".claude/commands/bare.md"},
        ],
        "skills": [{"name": "deploy", "description": "Deploys.", "source": ".dsh/skills/deploy"}],
    }));
    check(vec![(
        "available commands",
        wire(available_commands(&listed)),
        json!({
            "sessionUpdate": "available_commands_update",
            "availableCommands": [
                {"name": "review", "description": "Reviews a file", "input": {"hint": "FILE"}},
                {"name": "hinted", "description": "WHAT", "input": {"hint": "WHAT"}},
                {"name": "bare", "description": ".claude/commands/bare.md"},
            ],
        }),
    )]);
}

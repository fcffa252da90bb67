//! What the model gets from a server: tool names and schemas, and results; a session's own
//! servers as given, checked.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::json;

use super::secrets::{scrub, secrets};
use super::tools::render_result;
use super::*;

fn tool(name: &str, description: &str, schema: serde_json::Value) -> Tool {
    let serde_json::Value::Object(schema) = schema else { panic!("schema must be an object") };
    Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema))
}

#[test]
fn tools_are_namespaced_sorted_and_canonical_and_bad_names_are_refused() {
    let tools = [
        tool(
            "zeta",
            "Last.  Spaces kept.",
            json!({"type": "object", "properties": {"b": {}, "a": {}}}),
        ),
        tool("alpha", "First.", json!({"type": "object"})),
        tool("has space", "Refused.", json!({"type": "object"})),
        tool("twice", "One.", json!({"type": "object"})),
        tool("twice", "Two.", json!({"type": "object"})),
        tool(&"x".repeat(62), "Too long with the prefix.", json!({"type": "object"})),
    ];
    let (offered, refused) = offered_tools("srv", &tools);
    let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["srv__alpha", "srv__zeta"]);
    assert_eq!(offered[1].description, "Last.  Spaces kept.");
    assert_eq!(
        serde_json::to_string(&offered[1].parameters).unwrap(),
        r#"{"properties":{"a":{},"b":{}},"type":"object"}"#
    );
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert!(refused[0].contains("`srv__has space` is not a name providers accept"), "{refused:?}");
    assert!(refused[1].contains("is not a name providers accept"), "{refused:?}");
    assert!(refused[2].contains("`srv__twice` is listed twice by the server: both refused"));
}

#[test]
fn results_keep_text_and_is_error_and_note_what_the_model_cannot_see() {
    let mut result = CallToolResult::error(vec![
        ContentBlock::text("first"),
        ContentBlock::image("aGVsbG8=", "image/png"),
        ContentBlock::text("second"),
    ]);
    let output = render_result(&result);
    assert!(output.is_error);
    assert_eq!(
        output.content,
        "first\n[image image/png (8 bytes of base64) not shown to the model]\nsecond"
    );
    result.is_error = None;
    assert!(!render_result(&result).is_error);

    let structured = CallToolResult::structured(json!({"b": 1, "a": [true]}));
    // The SDK adds the JSON as text too; without text, the structured content is shown.
    let mut only_structured = structured.clone();
    only_structured.content.clear();
    assert_eq!(render_result(&only_structured).content, r#"{"a":[true],"b":1}"#);
}

#[test]
fn a_huge_result_is_cut_with_a_note() {
    let huge = "é".repeat(5 * 1024 * 1024);
    let output = render_result(&CallToolResult::success(vec![ContentBlock::text(huge)]));
    assert!(output.content.len() < RESULT_CAP_BYTES + 200);
    assert!(
        output.content.ends_with(&format!(
            "[result cut: 10485760 bytes, the first {RESULT_CAP_BYTES} shown (MCP results are capped at {RESULT_CAP_BYTES} bytes)]"
        )),
        "{}",
        &output.content[output.content.len() - 200..]
    );
}

fn spec(value: serde_json::Value) -> dsh_protocol::McpServerSpec {
    serde_json::from_value(value).unwrap()
}

#[test]
fn a_sessions_server_is_checked_with_errors_that_name_it_and_never_show_a_secret() {
    let good = own_server(spec(json!({
        "name": "fx", "command": "python3", "args": ["-m", "x"], "env": {"TOKEN": "s3cret"},
        "cwd": "/tmp",
    })))
    .unwrap();
    assert_eq!(good.name, "fx");
    assert!(
        matches!(good.transport, McpTransport::Stdio { ref cwd, .. } if cwd.as_deref() == Some(Path::new("/tmp")))
    );
    let http = own_server(spec(json!({
        "name": "web", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer t"},
    })))
    .unwrap();
    assert!(matches!(http.transport, McpTransport::Http { .. }));
    for (bad, expected) in [
        (json!({"name": "a_b", "command": "x"}), "mcp server name `a_b` is not allowed"),
        (json!({"name": "fx"}), "`fx` has neither `command` (stdio) nor `url`"),
        (json!({"name": "fx", "command": "x", "url": "http://h/"}), "either `command`"),
        (json!({"name": "fx", "command": " "}), "`command` is empty"),
        (json!({"name": "fx", "command": "x", "cwd": "rel"}), "`cwd` must be an absolute path"),
        (
            json!({"name": "fx", "command": "x", "env": {"A=B": "s3cret"}}),
            "not an environment variable name",
        ),
        (
            json!({"name": "fx", "command": "x", "headers": {"H": "s3cret"}}),
            "`headers` are for HTTP servers",
        ),
        (json!({"name": "fx", "url": "ftp://h/"}), "`url` must be http or https, not `ftp`"),
        (json!({"name": "fx", "url": "not a url"}), "`url` is not a URL"),
        (
            json!({"name": "fx", "url": "http://h/", "env": {"A": "s3cret"}}),
            "are for stdio servers",
        ),
        (
            json!({"name": "fx", "url": "http://h/", "headers": {"X": "s3cret\n"}}),
            "the value of header `X` is not valid",
        ),
        (
            json!({"name": "fx", "url": "http://h/", "headers": {"bad header": "s3cret"}}),
            "header `bad header` is not a valid name",
        ),
    ] {
        let error = own_server(spec(bad.clone())).err().unwrap_or_else(|| panic!("{bad} passed"));
        assert!(error.contains(expected), "{bad}: {error}");
        assert!(!error.contains("s3cret"), "{error}");
    }
}

#[test]
fn what_a_server_says_about_itself_is_scrubbed_of_its_secrets() {
    let http = own_server(spec(json!({
        "name": "web", "url": "https://me:hunter22@example.com/mcp/tok-0123456789abcdef?api_key=k3y-k3y#frag",
        "headers": {"Authorization": "Bearer t0ken"},
    })))
    .unwrap();
    let error = "error sending request for url \
                 (https://me:hunter22@example.com/mcp/tok-0123456789abcdef?api_key=k3y-k3y#frag): \
                 401 for Bearer t0ken";
    let scrubbed = scrub(error.to_owned(), &secrets(&http.transport));
    for secret in ["hunter22", "k3y-k3y", "t0ken", "tok-0123456789abcdef"] {
        assert!(!scrubbed.contains(secret), "{scrubbed}");
    }
    assert!(scrubbed.contains("example.com/mcp"), "{scrubbed}");
    let stdio = own_server(spec(json!({
        "name": "fx", "command": "x", "env": {"TOKEN": "s3cret-value", "DEBUG": "1"},
    })))
    .unwrap();
    let said =
        scrub("started with TOKEN=s3cret-value DEBUG=1".to_owned(), &secrets(&stdio.transport));
    assert_eq!(said, "started with TOKEN=*** DEBUG=1");
}

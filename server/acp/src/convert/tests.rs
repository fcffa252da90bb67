//! The pure conversions: prompt blocks as dsh prompt text, timestamps, permission answers, the
//! editor's MCP servers as dsh's.
#![allow(clippy::unwrap_used)]

use super::*;

fn blocks(value: Value) -> Vec<schema::ContentBlock> {
    serde_json::from_value(value).unwrap()
}

#[test]
fn prompt_blocks_become_one_text_with_links_and_tagged_context() {
    let text = prompt_text(&blocks(json!([
        {"type": "text", "text": "Explain this"},
        {"type": "resource_link", "uri": "file:///w/src/a.rs", "name": "a.rs"},
        {"type": "resource", "resource": {"uri": "file:///w/b.md", "text": "# B"}},
    ])))
    .unwrap();
    assert_eq!(
        text,
        "Explain this\n[@a.rs](file:///w/src/a.rs)\n<context ref=\"file:///w/b.md\">\n# B\n</context>"
    );
}

#[test]
fn images_and_empty_prompts_are_refused_as_invalid_params() {
    let image = blocks(json!([{"type": "image", "data": "AAAA", "mimeType": "image/png"}]));
    let error = prompt_text(&image).unwrap_err();
    assert_eq!(i32::from(error.code), -32602);
    assert!(error.message.contains("image"), "{}", error.message);
    let empty = prompt_text(&blocks(json!([{"type": "text", "text": "  "}]))).unwrap_err();
    assert!(empty.message.contains("empty"), "{}", empty.message);
}

#[test]
fn timestamps_are_rfc3339_utc() {
    assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(iso8601(951_782_400_123), "2000-02-29T00:00:00.123Z");
    assert_eq!(iso8601(1_796_059_392_438), "2026-11-30T17:23:12.438Z");
}

#[test]
fn permission_answers_map_to_dsh_decisions() {
    let answer = |value: Value| chosen(&serde_json::from_value(value).unwrap());
    let selected = |id: &str| json!({"outcome": {"outcome": "selected", "optionId": id}});
    assert_eq!(answer(selected("allow_once")), ApprovalChoice::Allow);
    assert_eq!(answer(selected("allow_always")), ApprovalChoice::AllowAlways);
    assert_eq!(answer(selected("allow_unconfined")), ApprovalChoice::AllowUnconfined);
    assert_eq!(answer(selected("reject_once")), ApprovalChoice::Deny);
    assert_eq!(answer(selected("something_else")), ApprovalChoice::Deny);
    assert_eq!(answer(json!({"outcome": {"outcome": "cancelled"}})), ApprovalChoice::Deny);
}

#[test]
fn a_relative_cwd_is_refused() {
    let error = checked_cwd(std::path::Path::new("rel")).unwrap_err();
    assert!(error.message.contains("absolute"), "{}", error.message);
    assert_eq!(checked_cwd(std::path::Path::new("/w")).unwrap(), "/w");
}

fn servers(value: Value) -> Vec<schema::McpServer> {
    serde_json::from_value(value).unwrap()
}

#[test]
fn acp_mcp_servers_become_dsh_specs_with_mapped_names() {
    let specs = server_specs(&servers(json!([
        {"name": "my server_1", "command": "/bin/srv", "args": ["-v"],
         "env": [{"name": "TOKEN", "value": "secret"}]},
        {"type": "http", "name": "web", "url": "https://example.com/mcp",
         "headers": [{"name": "Authorization", "value": "Bearer x"}]},
    ])))
    .unwrap();
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].name, "my-server-1");
    assert_eq!(specs[0].command.as_deref(), Some("/bin/srv"));
    assert_eq!(specs[0].args, ["-v"]);
    assert_eq!(specs[0].env.get("TOKEN").map(String::as_str), Some("secret"));
    assert_eq!((specs[0].url.as_ref(), specs[0].cwd.as_ref()), (None, None));
    assert_eq!(specs[1].name, "web");
    assert_eq!(specs[1].url.as_deref(), Some("https://example.com/mcp"));
    assert_eq!(specs[1].headers.get("Authorization").map(String::as_str), Some("Bearer x"));
    // The secrets stay out of Debug output.
    let shown = format!("{specs:?}");
    assert!(!shown.contains("secret") && !shown.contains("Bearer"), "{shown}");
}

#[test]
fn server_names_map_deterministically_and_keep_valid_ones() {
    assert_eq!(server_name("filesystem").unwrap(), "filesystem");
    assert_eq!(server_name("-a-").unwrap(), "-a-");
    assert_eq!(server_name("my server").unwrap(), "my-server");
    assert_eq!(server_name("é/x").unwrap(), "--x");
    assert_eq!(server_name(&"a".repeat(40)).unwrap(), "a".repeat(32));
    for nameless in ["", "!!!", "日本"] {
        let error = server_name(nameless).unwrap_err();
        assert!(error.message.contains("no ASCII letter or digit"), "{}", error.message);
    }
}

#[test]
fn sse_servers_and_names_mapping_to_one_are_refused() {
    let error = server_specs(&servers(json!([
        {"type": "sse", "name": "old", "url": "https://example.com/sse", "headers": []},
    ])))
    .unwrap_err();
    assert!(
        error.message.contains("`old`: the SSE transport is not supported"),
        "{}",
        error.message
    );
    let error = server_specs(&servers(json!([
        {"name": "my server", "command": "a", "args": [], "env": []},
        {"name": "my_server", "command": "b", "args": [], "env": []},
    ])))
    .unwrap_err();
    assert!(
        error.message.contains("`my server` and `my_server` both become `my-server`"),
        "{}",
        error.message
    );
}

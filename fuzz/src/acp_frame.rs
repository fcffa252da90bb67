//! `acp_frame`: what an editor sends the ACP front, and the log events the front translates
//! back, through the front's pure functions with no daemon.
//!
//! The input is lines of text (at most 64). A line that decodes as a log event goes to one
//! `Translator` (the fold behind `session/update`), in order; any other JSON value is a client
//! frame — a request, a notification or an answer to a permission request — given to
//! `dsh_acp::frame::client_frame`, which parses and converts it as the handlers do before they
//! call the daemon.
//!
//! Checks: nothing panics; the same frame always gets the same answer; a refusal is ACP's
//! "invalid params" (or "method not found") with a message; what the daemon would be asked is
//! well-formed (the editor's MCP servers under valid, distinct dsh names; a non-blank prompt;
//! the `cwd` as the workspace, unchanged); and every answer, error and update is bounded by
//! the line it came from.

use dsh_acp::frame::client_frame;
use dsh_acp::translate::Translator;
use dsh_protocol::decode_event;
use serde_json::Value;

/// The most lines of one input.
const MAX_LINES: usize = 64;

/// Runs every line of `data` through the front.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut translator = Translator::new("/w".to_owned(), 1000);
    for (index, line) in text.lines().take(MAX_LINES).enumerate() {
        let bound = 64 * line.len() + 16 * 1024;
        if let Ok(event) = decode_event(line, index + 1) {
            let updates = translator.updates(&event);
            let size: usize =
                updates.iter().map(|update| serde_json::to_string(update).unwrap().len()).sum();
            assert!(size <= bound, "{size} bytes of updates from a line of {}", line.len());
            for asked in translator.pending_approvals.values() {
                let fields = translator.tool_call_fields(&asked.call_id, &asked.tool);
                let size = serde_json::to_string(&fields).unwrap().len();
                assert!(size <= bound, "{size} bytes of a permission request's call");
            }
            continue;
        }
        let Ok(frame) = serde_json::from_str::<Value>(line) else { continue };
        let answer = client_frame(&frame);
        assert_eq!(answer, client_frame(&frame), "the same frame answered two ways");
        match answer {
            Ok(asked) => {
                let size = asked.to_string().len();
                assert!(size <= bound, "{size} bytes asked of the daemon for {} bytes", line.len());
                asked_well_formed(&frame, &asked);
            }
            Err(error) => {
                let code = error.get("code").and_then(Value::as_i64);
                assert!(matches!(code, Some(-32602 | -32601)), "refused with {error}");
                let message = error.get("message").and_then(Value::as_str).unwrap_or_default();
                assert!(!message.is_empty(), "a refusal without a message: {error}");
                assert!(message.len() <= bound, "a message of {} bytes", message.len());
            }
        }
    }
}

/// What the daemon would be asked is what dsh accepts (nothing, for a frame the front ignores:
/// a notification other than `session/cancel` has no id and asks nothing, whatever its method).
fn asked_well_formed(frame: &Value, asked: &Value) {
    if asked.is_null() {
        return;
    }
    let method = frame.get("method").and_then(Value::as_str);
    let cwd = frame.pointer("/params/cwd").and_then(Value::as_str);
    match method {
        Some("session/new") => {
            assert_eq!(asked.get("workspace").and_then(Value::as_str), cwd, "the cwd changed");
            servers_well_formed(asked.get("mcpServers"));
        }
        Some("session/load" | "session/resume") => servers_well_formed(asked.get("servers")),
        Some("session/prompt" | "_session/steering") => {
            let text = asked.get("text").and_then(Value::as_str).unwrap_or_default();
            assert!(!text.trim().is_empty(), "a blank prompt went through");
        }
        Some("session/list") => {
            let page = asked.get("sessions").and_then(Value::as_array).map_or(0, Vec::len);
            assert!(page <= 50, "a session/list page of {page}");
        }
        _ => {}
    }
}

/// Names of 1 to 32 letters, digits or `-`, each once.
fn servers_well_formed(servers: Option<&Value>) {
    let servers = servers.and_then(Value::as_array).cloned().unwrap_or_default();
    let mut names: Vec<&str> =
        servers.iter().filter_map(|server| server.get("name")?.as_str()).collect();
    assert_eq!(names.len(), servers.len(), "an MCP server without a name");
    for name in &names {
        let valid = (1..=32).contains(&name.len())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        assert!(valid, "the MCP server name {name:?} is not one dsh takes");
    }
    names.sort_unstable();
    let count = names.len();
    names.dedup();
    assert_eq!(names.len(), count, "two MCP servers under one name");
}

//! `acp_frame`: what an editor sends the ACP front, and the log events the front translates
//! back, through the front's own pure functions with no daemon.
//!
//! The input is lines of text (at most 64). A line that decodes as a log event goes to one
//! `Translator` (the fold behind `session/update`), in order; any other JSON value is a client
//! frame, classified as the ACP SDK's JSON-RPC layer does: a request (a method and an id) goes to
//! `dsh_acp::frame::client_request`, a notification (a method, no id) to
//! `client_notification`, an answer (a result) to the permission decision — the functions the
//! front's dispatch calls before its handlers reach the daemon, so nothing of the parsing is
//! restated here. A `session/list` request's page is then cut from 120 sessions, and a
//! `session/set_config_option` checked against the model `m1`, as the handlers do with the
//! daemon's answers.
//!
//! Checks: nothing panics; the same frame always gets the same answer; a refusal is ACP's
//! "invalid params" (or "method not found") with a message; what the daemon would be asked is
//! well-formed (the editor's MCP servers under valid, distinct dsh names; a non-blank prompt;
//! the `cwd` as the workspace, unchanged; a page of at most 50); and every answer, error and
//! update is bounded by the line it came from.

use dsh_acp::frame::{ClientRequest, client_notification, client_request, permission_decision};
use dsh_acp::translate::Translator;
use dsh_protocol::{McpServerSpec, SessionSummary, decode_event};
use serde_json::Value;

/// The most lines of one input.
const MAX_LINES: usize = 64;

/// The model the sessions are pinned to.
const MODEL: &str = "m1";

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

/// What the front does with `frame` before and after the daemon, as JSON: the parsed request
/// (with a `session/list` page cut from [`sessions`]), the session a notification cancels, the
/// decision an answer makes; `null` for a frame the front ignores. An error is the ACP error the
/// editor would get, as on the wire. What the daemon would be asked is checked on the way.
fn client_frame(frame: &Value) -> Result<Value, Value> {
    // The ACP error as on the wire.
    let wire = |error| serde_json::to_value(error).unwrap();
    let params = frame.get("params").cloned().unwrap_or(Value::Null);
    let Some(method) = frame.get("method").and_then(Value::as_str) else {
        // An answer: the only requests the front sends are permission requests, whose answer
        // the SDK parses as their response type, `permission_decision`'s parameter (one that
        // does not fit never reaches the front).
        let Some(Ok(response)) = frame.get("result").cloned().map(serde_json::from_value) else {
            return Ok(Value::Null);
        };
        return Ok(serde_json::to_value(permission_decision(&response)).unwrap());
    };
    if frame.get("id").is_none() {
        let cancel = client_notification(method, params).map_err(wire)?;
        if let Some(cancel) = &cancel {
            assert_eq!(method, "session/cancel", "the notification {method} cancels");
            let asked = frame.pointer("/params/sessionId").and_then(Value::as_str);
            assert_eq!(Some(cancel.session_id.as_str()), asked, "another session cancelled");
        }
        return Ok(serde_json::to_value(cancel).unwrap());
    }
    let request = client_request(method, params).map_err(wire)?;
    let mut asked = serde_json::to_value(&request).unwrap();
    match &request {
        ClientRequest::NewSession { workspace, servers } => {
            let cwd = frame.pointer("/params/cwd").and_then(Value::as_str);
            assert_eq!(Some(workspace.as_str()), cwd, "the cwd changed");
            servers_well_formed(servers);
        }
        ClientRequest::Attach { servers, replay, .. } => {
            assert_eq!(*replay, method == "session/load", "{method} replays: {replay}");
            servers_well_formed(servers);
        }
        ClientRequest::Prompt { text, .. } | ClientRequest::Steer { text, .. } => {
            assert!(!text.trim().is_empty(), "a blank prompt went through");
        }
        ClientRequest::List(page) => {
            let page = page.page(sessions());
            assert!(page.sessions.len() <= 50, "a session/list page of {}", page.sessions.len());
            asked = serde_json::to_value(page).unwrap();
        }
        ClientRequest::SetConfigOption(choice) => choice.check(MODEL).map_err(wire)?,
        _ => {}
    }
    Ok(asked)
}

/// Names of 1 to 32 letters, digits or `-`, each once.
fn servers_well_formed(servers: &[McpServerSpec]) {
    let mut names: Vec<&str> = servers.iter().map(|server| server.name.as_str()).collect();
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

/// More sessions than one `session/list` page holds, as the daemon lists them.
fn sessions() -> Vec<SessionSummary> {
    (0..120u64)
        .map(|n| SessionSummary {
            session_id: format!("s{n:03}"),
            workspace: "/w".to_owned(),
            title: (n % 3 == 0).then(|| format!("session {n}")),
            created_ms: n * 1000,
            updated_ms: (n % 7) * 86_400_000,
            turns: n % 4,
            steps: n % 9,
            forked_from: None,
            parent: None,
            last_usage: None,
            profile: None,
            model: Some(MODEL.to_owned()),
            cost: None,
            running: n % 5 == 0,
            error: None,
        })
        .collect()
}

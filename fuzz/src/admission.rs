//! `admission`: the line transport's admission step on arbitrary frames.
//!
//! `admit` must never panic. A `Call` carries the line unchanged, with the id and method the
//! line has; a `Reject` is a JSON-RPC error response whose id is null or the line's own id, with
//! a parse-error or invalid-request code; `Skip` is only for blank lines.

use dsh_daemon::admission::{Admission, BadLine, admit};
use dsh_protocol::jsonrpc::{INVALID_REQUEST, Id, PARSE_ERROR};
use serde_json::Value;

/// Checks one frame (bytes that are not UTF-8 stand for a line the codec could not decode).
pub fn check(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        assert!(matches!(admit(Err(BadLine::NotUtf8)), Admission::Reject(_)));
        return;
    };
    // The id the line has, when it is an object with a readable one.
    let line_id = serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|value| value.get("id").cloned())
        .and_then(|id| serde_json::from_value::<Id>(id).ok());
    match admit(Ok(line.to_owned())) {
        Admission::Skip => assert!(line.trim().is_empty(), "a non-blank line was skipped"),
        Admission::Call(call) => {
            assert_eq!(call.line, line, "the admitted line was changed");
            assert_eq!(Some(&call.id), line_id.as_ref(), "the call's id is not the line's");
            let value: Value = serde_json::from_str(line).unwrap();
            assert_eq!(value["method"].as_str(), Some(call.method.as_str()));
            assert_eq!(value["jsonrpc"].as_str(), Some("2.0"));
            if let Some(subscription) = &call.unsubscribe {
                assert!(serde_json::from_str::<Value>(subscription).is_ok());
            }
        }
        Admission::Reject(response) => {
            let answer: Value = serde_json::from_str(&response.to_line()).unwrap();
            assert_eq!(answer["jsonrpc"], "2.0");
            let id: Id = serde_json::from_value(answer["id"].clone()).unwrap();
            assert!(
                id == Id::Null || Some(&id) == line_id.as_ref(),
                "a rejection answers with an id the line does not have: {id}"
            );
            let code = answer["error"]["code"].as_i64().unwrap();
            assert!(code == i64::from(PARSE_ERROR) || code == i64::from(INVALID_REQUEST));
            assert!(answer["error"]["message"].as_str().is_some_and(|text| !text.is_empty()));
        }
    }
}

//! The admission table: each frame and what becomes of it, as one line of text; and the
//! `admission` fuzz target's regression inputs (`tests/data/fuzz/admission/`).
#![allow(clippy::unwrap_used)]

use dsh_protocol::jsonrpc::{INVALID_REQUEST, Id, PARSE_ERROR};
use expect_test::expect;
use serde_json::Value;

use super::{Admission, BadLine, admit};

fn show(frame: Result<&str, BadLine>) -> String {
    match admit(frame.map(str::to_owned)) {
        Admission::Skip => "skip".to_owned(),
        Admission::Reject(response) => format!("reject {}", response.to_line()),
        Admission::Call(call) => format!(
            "call id={} method={} unsubscribe={}",
            call.id,
            call.method,
            call.unsubscribe.as_deref().unwrap_or("-")
        ),
    }
}

#[test]
fn every_kind_of_frame_is_admitted_or_answered() {
    let frames: Vec<(&str, Result<&str, BadLine>)> = vec![
        ("request", Ok(r#"{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}}"#)),
        ("string id", Ok(r#"{"jsonrpc":"2.0","id":"a","method":"daemon/status"}"#)),
        ("null id", Ok(r#"{"jsonrpc":"2.0","id":null,"method":"daemon/status"}"#)),
        (
            "unsubscribe",
            Ok(r#"{"jsonrpc":"2.0","id":2,"method":"session/unsubscribe","params":[123]}"#),
        ),
        (
            "unsubscribe by name",
            Ok(
                r#"{"jsonrpc":"2.0","id":3,"method":"session/unsubscribe","params":{"subscription":"x"}}"#,
            ),
        ),
        ("blank", Ok("   ")),
        ("too long", Err(BadLine::TooLong { limit: 4 })),
        ("not utf-8", Err(BadLine::NotUtf8)),
        ("garbage", Ok("{nope")),
        ("batch", Ok(r#"[{"jsonrpc":"2.0","id":1,"method":"daemon/status"}]"#)),
        ("number", Ok("42")),
        ("notification", Ok(r#"{"jsonrpc":"2.0","method":"daemon/status"}"#)),
        ("object id", Ok(r#"{"jsonrpc":"2.0","id":{},"method":"daemon/status"}"#)),
        ("wrong version", Ok(r#"{"jsonrpc":"1.0","id":5,"method":"daemon/status"}"#)),
        ("no method", Ok(r#"{"jsonrpc":"2.0","id":6}"#)),
        ("method not a string", Ok(r#"{"jsonrpc":"2.0","id":7,"method":7}"#)),
    ];
    let table: String =
        frames.into_iter().map(|(name, frame)| format!("{name}: {}\n", show(frame))).collect();
    expect![[r#"
        request: call id=1 method=session/list unsubscribe=-
        string id: call id="a" method=daemon/status unsubscribe=-
        null id: call id=null method=daemon/status unsubscribe=-
        unsubscribe: call id=2 method=session/unsubscribe unsubscribe=123
        unsubscribe by name: call id=3 method=session/unsubscribe unsubscribe="x"
        blank: skip
        too long: reject {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"request line exceeds 4 bytes"}}
        not utf-8: reject {"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: the line is not valid UTF-8"}}
        garbage: reject {"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: key must be a string at line 1 column 2"}}
        batch: reject {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch requests are not supported: send one request per line"}}
        number: reject {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"a request must be a JSON object"}}
        notification: reject {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"notifications are not supported: every request needs an id"}}
        object id: reject {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"a request id must be a number or a string"}}
        wrong version: reject {"jsonrpc":"2.0","id":5,"error":{"code":-32600,"message":"invalid request: jsonrpc must be \"2.0\", not \"1.0\" at line 1 column 16"}}
        no method: reject {"jsonrpc":"2.0","id":6,"error":{"code":-32600,"message":"invalid request: missing field `method` at line 1 column 24"}}
        method not a string: reject {"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"invalid request: invalid type: integer `7`, expected a string at line 1 column 34"}}
    "#]]
    .assert_eq(&table);
}

/// The checks of the `admission` fuzz target (`fuzz/src/admission.rs`), restated: no panic; a
/// call carries the line unchanged with the line's id and method; a rejection is a JSON-RPC
/// error with a parse-error or invalid-request code and a null id or the line's own; only a
/// blank line is skipped.
fn check_admission_fuzz_input(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        assert!(matches!(admit(Err(BadLine::NotUtf8)), Admission::Reject(_)));
        return;
    };
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
            assert!(id == Id::Null || Some(&id) == line_id.as_ref(), "answered with id {id}");
            let code = answer["error"]["code"].as_i64().unwrap();
            assert!(code == i64::from(PARSE_ERROR) || code == i64::from(INVALID_REQUEST));
            assert!(answer["error"]["message"].as_str().is_some_and(|text| !text.is_empty()));
        }
    }
}

#[test]
fn every_admission_fuzz_input_is_called_with_its_id_or_answered() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/admission");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(|| check_admission_fuzz_input(&bytes)).is_err() {
            panic!("{} fails the admission checks", file.display());
        }
    }
}

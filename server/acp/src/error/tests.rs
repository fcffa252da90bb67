//! dsh's errors and the front's refusals as ACP errors, as a table compared as JSON values.
#![allow(clippy::unwrap_used)]

use dsh_protocol::jsonrpc::ErrorObject;
use serde_json::json;

use super::*;

fn daemon(code: i32, message: &str) -> ClientError {
    ClientError::Rpc(ErrorObject::new(code, message))
}

fn asked(profile: Option<&str>, model: Option<&str>) -> SessionConfig {
    SessionConfig {
        profile: profile.map(str::to_owned),
        model: model.map(str::to_owned),
        ..SessionConfig::default()
    }
}

#[test]
fn errors_become_acp_errors() {
    let unknown_model = || daemon(code::CONFIG, "unknown model `m9`");
    let cases = [
        (
            "an unknown session is ACP's resource not found",
            rpc_error(daemon(code::SESSION_NOT_FOUND, "no session s9")),
            json!({"code": -32002, "message": "no session s9"}),
        ),
        (
            "a bad workspace is invalid params",
            rpc_error(daemon(code::INVALID_WORKSPACE, "no such directory")),
            json!({"code": -32602, "message": "no such directory"}),
        ),
        (
            "dsh's other codes pass through",
            rpc_error(daemon(code::SESSION_BUSY, "a turn is running")),
            json!({"code": code::SESSION_BUSY, "message": "a turn is running"}),
        ),
        (
            "dsh's data passes through with its code: a refused rewind's conflicts",
            rpc_error(ClientError::Rpc(ErrorObject {
                data: Some(json!({"conflicts": ["a.txt"]})),
                ..ErrorObject::new(code::REWIND_CONFLICT, "1 file changed: a.txt")
            })),
            json!({"code": code::REWIND_CONFLICT, "message": "1 file changed: a.txt",
                   "data": {"conflicts": ["a.txt"]}}),
        ),
        (
            "a connection that failed is internal",
            rpc_error(ClientError::Closed),
            json!({"code": -32603, "message": "the daemon closed the connection"}),
        ),
        (
            "a configuration that does not know a flag's value names the flag",
            create_refused(unknown_model(), &asked(Some("local"), Some("m9"))),
            json!({"code": code::CONFIG,
                   "message": "dsh acp --provider local --model m9: unknown model `m9`"}),
        ),
        (
            "without flags, the configuration's error as it is",
            create_refused(unknown_model(), &asked(None, None)),
            json!({"code": code::CONFIG, "message": "unknown model `m9`"}),
        ),
        (
            "other refusals of session/create as any daemon error",
            create_refused(daemon(code::INVALID_WORKSPACE, "not a directory"), &asked(None, None)),
            json!({"code": -32602, "message": "not a directory"}),
        ),
        (
            "a session not open here",
            not_open("s1"),
            json!({"code": -32002, "message": "session s1 is not open here: call session/load or \
                                               session/resume first"}),
        ),
        (
            "params of the wrong shape",
            parse::<SessionConfig>(json!({"profile": 3})).unwrap_err(),
            json!({"code": -32602,
                   "message": "invalid params: invalid type: integer `3`, expected a string"}),
        ),
        (
            "a failed turn",
            turn_failed(3, None),
            json!({"code": -32603, "message": "the turn failed", "data": {"turn": 3}}),
        ),
        (
            "an editor that stopped reading",
            stopped_reading(),
            json!({"code": -32603, "message": "the client stopped reading"}),
        ),
    ];
    for (name, error, expected) in cases {
        assert_eq!(serde_json::to_value(error).unwrap(), expected, "{name}");
    }
}

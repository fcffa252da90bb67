//! Bad input on a live daemon: every malformed or impossible request gets its documented error,
//! the connection keeps serving, and no session log changes.

use serde_json::{Value, json};

use crate::support::Env;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// A well-formed session id no session has.
const MISSING: &str = "20200101-000000-aaaaaa";

fn code(answer: &Value) -> i64 {
    answer["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error: {answer}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_its_documented_error_and_touches_no_log() {
    use dsh_protocol::code::{APPROVAL_NOT_FOUND, OUT_OF_RANGE, SESSION_NOT_FOUND};
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let session = conn.ok("session/create", json!({"workspace": workspace})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let outcome = conn
        .ok("session/prompt", json!({"sessionId": session, "text": "go [[fake:tool list_dir {}]]"}))
        .await;
    assert_eq!(outcome["steps"], 2);
    let length = env.log_values(&session).len() as u64;
    let before = env.log_files();
    let alive = async || {
        // A valid request right after: the connection still serves.
        let status = conn.ok("daemon/status", json!({})).await;
        assert_eq!(status["pid"], served.pid());
    };

    // Lines the loop refuses before any method runs: answered with id null.
    let mut orphans = 0;
    let mut refused = async |line: &str, expected: i64| {
        conn.send_line(line).await;
        orphans += 1;
        let answer = conn.wait_orphan(orphans).await;
        assert_eq!(answer["id"], Value::Null, "{answer}");
        assert_eq!(code(&answer), expected, "{line:.80}: {answer}");
        answer["error"]["message"].as_str().unwrap().to_owned()
    };
    refused("this is not json", PARSE_ERROR).await;
    refused("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ", PARSE_ERROR).await;
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon/status\",\"params\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(4 * 1024 * 1024 + 16)
    );
    let message = refused(&huge, INVALID_REQUEST).await;
    assert!(message.contains("exceeds"), "{message}");
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "daemon/status"},
        {"jsonrpc": "2.0", "id": 2, "method": "daemon/status"}
    ]);
    let message = refused(&batch.to_string(), INVALID_REQUEST).await;
    assert!(message.contains("batch"), "{message}");
    let message = refused(
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
            .to_string(),
        INVALID_REQUEST,
    )
    .await;
    assert!(message.contains("notification"), "{message}");
    refused("42", INVALID_REQUEST).await;
    // Bytes that are not UTF-8.
    conn.send_bytes(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"\xff\xfe\"}").await;
    orphans += 1;
    let answer = conn.wait_orphan(orphans).await;
    assert_eq!(code(&answer), PARSE_ERROR, "{answer}");
    alive().await;

    // A line just under the limit is read (and judged on its content).
    let id = conn.fresh_id();
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"daemon/status\",\"params\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(1024 * 1024)
    );
    let answer = conn.raw_request(id, &big).await;
    assert!(answer.get("result").is_some() || answer.get("error").is_some(), "{answer}");
    alive().await;

    // Requests that reach a method: answered with their id.
    conn.err("no/such/method", json!({}), METHOD_NOT_FOUND).await;
    alive().await;
    for (method, params) in [
        ("session/prompt", json!({"sessionId": session})),
        ("session/prompt", json!({"sessionId": 7, "text": "x"})),
        ("session/prompt", json!({"sessionId": session, "text": "x", "whenBusy": "sometimes"})),
        ("session/inject", json!({"sessionId": session, "text": "   "})),
        ("session/request", json!({"sessionId": session, "step": "one"})),
        ("session/events", json!({"sessionId": session})),
        ("session/create", json!({})),
        ("session/fork", json!({"atSeq": 1})),
        ("approval/respond", json!({"sessionId": session, "approvalId": "x", "decision": "maybe"})),
        ("initialize", json!({"protocolVersion": 1})),
        ("session/usage", json!({"sessionId": "not an id"})),
        ("session/plan", json!({"sessionId": "../../etc"})),
        ("session/subscribe", json!({"sessionId": "../../etc"})),
        ("mcp/list", json!({"start": "yes"})),
        ("mcp/list", json!({"workspace": 7})),
    ] {
        conn.err(method, params, INVALID_PARAMS).await;
        alive().await;
    }
    // A budget that is not positive is refused, the budget named.
    for (limits, expected) in [
        (json!({"maxSteps": 0}), "limits.maxSteps must be at least 1, not 0"),
        (json!({"maxTokens": -5}), "limits.maxTokens must be at least 1, not -5"),
        (json!({"maxCost": 0}), "limits.maxCost must be more than 0, not 0"),
        (json!({"maxCost": -0.25}), "limits.maxCost must be more than 0, not -0.25"),
        (json!({"timeoutSecs": -1}), "limits.timeoutSecs must be more than 0, not -1"),
        (json!({"timeoutSecs": 1e300}), "limits.timeoutSecs is too large"),
        (json!({"maxSteps": "one"}), "invalid params for session/prompt"),
    ] {
        let params = json!({"sessionId": session, "text": "x", "limits": limits});
        let message = conn.err("session/prompt", params, INVALID_PARAMS).await;
        assert!(message.contains(expected), "{limits}: {message}");
        alive().await;
    }
    let message = conn
        .err(
            "mcp/list",
            json!({"workspace": "/no/such/workspace"}),
            dsh_protocol::code::INVALID_WORKSPACE.into(),
        )
        .await;
    assert!(message.contains("/no/such/workspace"), "{message}");
    alive().await;

    // An unknown session, for every method that names one.
    for (method, params) in [
        ("session/prompt", json!({"sessionId": MISSING, "text": "x"})),
        ("session/inject", json!({"sessionId": MISSING, "text": "x"})),
        ("session/cancel", json!({"sessionId": MISSING})),
        ("session/fork", json!({"sessionId": MISSING})),
        ("session/request", json!({"sessionId": MISSING, "step": 1})),
        ("session/usage", json!({"sessionId": MISSING})),
        ("session/plan", json!({"sessionId": MISSING})),
        ("session/events", json!({"sessionId": MISSING, "fromSeq": 0, "limit": 1})),
        ("session/subscribe", json!({"sessionId": MISSING})),
        ("approval/respond", json!({"sessionId": MISSING, "approvalId": "a", "decision": "deny"})),
    ] {
        let message = conn.err(method, params, SESSION_NOT_FOUND.into()).await;
        assert!(message.contains(MISSING), "{method}: {message}");
        alive().await;
    }

    // Out of range: a fork beyond the log's end, steps and seqs outside the log.
    for (method, params) in [
        ("session/fork", json!({"sessionId": session, "atSeq": length + 1})),
        ("session/fork", json!({"sessionId": session, "atSeq": u64::MAX})),
        ("session/request", json!({"sessionId": session, "step": 0})),
        ("session/request", json!({"sessionId": session, "step": 3})),
        ("session/request", json!({"sessionId": session, "step": 3, "diff": true})),
        ("session/events", json!({"sessionId": session, "fromSeq": length + 1, "limit": 10})),
    ] {
        conn.err(method, params, OUT_OF_RANGE.into()).await;
        alive().await;
    }
    conn.err(
        "approval/respond",
        json!({"sessionId": session, "approvalId": "approval-none", "decision": "allow"}),
        APPROVAL_NOT_FOUND.into(),
    )
    .await;
    // Subscribing past the end is refused too, or delivers nothing stored.
    alive().await;

    // Nothing above wrote a log: same files, same bytes.
    assert_eq!(env.log_files(), before, "bad input changed the session logs");
    assert!(!conn.closed());
    served.shutdown().await;
}

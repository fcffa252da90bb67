//! Every API method, against the mock, over each transport: the daemon's Unix socket, the
//! `dsh stdio` bridge (which starts the daemon), and `dsh stdio --in-process`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::{
    Conn, DaemonGuard, Env, assert_contiguous, assert_same_as_log, kinds, lock_pid, wait_gone,
};

/// What the suite needs to know about the daemon it talks to.
struct Target<'a> {
    env: &'a Env,
    conn: &'a Arc<Conn>,
    /// The daemon's pid, when it has its own process.
    pid: Option<u32>,
}

fn sub_param(subscription: &str) -> Value {
    json!([serde_json::from_str::<Value>(subscription).unwrap()])
}

/// Runs every method once (and the documented error of the obvious misuse of each).
async fn exercise_every_method(target: Target<'_>) {
    let Target { env, conn, pid } = target;
    let workspace = env.workspace.display().to_string();

    // initialize, and a protocol version the daemon does not speak.
    let hello = conn.initialize().await;
    assert_eq!(hello["serverInfo"]["name"], "dsh");
    assert_eq!(hello["protocolVersion"], 1);
    let methods: Vec<&str> = hello["capabilities"]["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    for method in [
        "initialize",
        "session/create",
        "session/list",
        "session/subscribe",
        "session/unsubscribe",
        "session/prompt",
        "session/inject",
        "session/cancel",
        "session/fork",
        "session/request",
        "session/usage",
        "session/events",
        "approval/respond",
        "daemon/status",
        "daemon/shutdown",
    ] {
        assert!(methods.contains(&method), "capabilities lack {method}: {methods:?}");
    }
    let message = conn
        .err(
            "initialize",
            json!({"clientInfo": {"name": "old"}, "protocolVersion": 99}),
            dsh_protocol::code::UNSUPPORTED_PROTOCOL.into(),
        )
        .await;
    assert!(message.contains("99"), "{message}");

    // session/create: a bad workspace, then a good one.
    let file = env.root.join("a-file");
    std::fs::write(&file, "x").unwrap();
    for bad in ["relative/dir", "/no/such/dir/anywhere", file.to_str().unwrap()] {
        conn.err(
            "session/create",
            json!({"workspace": bad}),
            dsh_protocol::code::INVALID_WORKSPACE.into(),
        )
        .await;
    }
    // The mock's URL goes with the session: through `dsh stdio` to a shared daemon, the
    // client's own base URL is the session's (an ad-hoc profile).
    let config = json!({"baseUrl": env.mock.base_url()});
    let session = conn
        .ok("session/create", json!({"workspace": workspace, "config": config}))
        .await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();

    // session/list, of every workspace and of this one.
    for params in [json!({}), json!({"workspace": workspace})] {
        let listing = conn.ok("session/list", params).await;
        let found = listing["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["sessionId"] == session.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{session} not listed: {listing}"));
        assert_eq!(found["workspace"], workspace.as_str());
        assert_eq!(found["running"], false);
    }

    // session/subscribe from the start, then session/prompt: a tool step and a final answer.
    let sub = conn.subscribe(&session, None).await;
    let outcome = conn
        .ok(
            "session/prompt",
            json!({"sessionId": session, "text": "look [[fake:tool list_dir {}]]"}),
        )
        .await;
    assert_eq!(outcome["turn"], 1, "{outcome}");
    assert_eq!(outcome["stopReason"], "completed", "{outcome}");
    assert_eq!(outcome["steps"], 2, "{outcome}");
    assert!(outcome["usage"]["promptTokens"].as_u64().unwrap() > 0, "{outcome}");
    let delivered = conn.wait_turn_end(&sub, 1).await;
    assert_contiguous(&delivered, 0);
    assert_same_as_log(&delivered, &env.log_values(&session), &session);
    assert_eq!(delivered[0]["type"], "session/meta");
    assert!(delivered.iter().any(|e| e["type"] == "tool/result"), "{:?}", kinds(&delivered));

    // session/events: the whole log in one page, and the same in pages of 7.
    let log = env.log_values(&session);
    let page =
        conn.ok("session/events", json!({"sessionId": session, "fromSeq": 0, "limit": 1000})).await;
    assert_eq!(page["length"], log.len());
    assert_eq!(page["end"], true);
    assert_eq!(page["nextSeq"], log.len());
    assert_same_as_log(page["events"].as_array().unwrap(), &log, &session);
    let mut paged = Vec::new();
    let mut from = 0;
    loop {
        let page = conn
            .ok("session/events", json!({"sessionId": session, "fromSeq": from, "limit": 7}))
            .await;
        let events = page["events"].as_array().unwrap();
        assert!(events.len() <= 7);
        paged.extend(events.iter().cloned());
        from = page["nextSeq"].as_u64().unwrap();
        if page["end"] == true {
            break;
        }
    }
    assert_same_as_log(&paged, &log, &session);

    // session/request: what the model saw is the mock's recorded body, byte for byte — the
    // last step first (its body is the loop's memo), then step 1 (serialized afresh), then the
    // last again (extending the view's own memo).
    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    for step in [2u64, 1, 2] {
        let saw = conn
            .ok("session/request", json!({"sessionId": session, "step": step, "diff": step == 2}))
            .await;
        assert_eq!(saw["step"], step);
        assert_eq!(saw["turn"], 1);
        let body = saw["wire"]["body"].as_str().unwrap();
        assert_eq!(body.as_bytes(), requests[step as usize - 1].body.as_slice(), "step {step}");
        let sent =
            log.iter().filter(|e| e["type"] == "request/sent").nth(step as usize - 1).unwrap();
        assert_eq!(saw["wire"]["sha256"], sent["data"]["sha256"]);
        let start =
            log.iter().find(|e| e["type"] == "step/start" && e["data"]["step"] == step).unwrap();
        assert_eq!(saw["boundarySeq"], start["seq"]);
        assert!(!saw["messages"].as_array().unwrap().is_empty());
        if step == 2 {
            assert!(saw["diff"].as_str().is_some_and(|d| !d.is_empty()), "no diff: {saw}");
        } else {
            assert!(saw.get("diff").is_none());
        }
    }

    // session/usage: one row per step, totals summed.
    let usage = conn.ok("session/usage", json!({"sessionId": session})).await;
    let rows = usage["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{usage}");
    let prompt_sum: u64 = rows.iter().map(|r| r["usage"]["promptTokens"].as_u64().unwrap()).sum();
    assert_eq!(usage["totals"]["promptTokens"], prompt_sum, "{usage}");

    // session/inject while idle: logged now, joins the next request.
    let injected =
        conn.ok("session/inject", json!({"sessionId": session, "text": "STEER-ALPHA"})).await;
    let seq = injected["seq"].as_u64().unwrap();
    let steering = conn.wait_event(&sub, "steering/message", |e| e["seq"] == seq).await;
    assert_eq!(steering["data"]["text"], "STEER-ALPHA");
    // session/cancel with no turn running.
    let cancelled = conn.ok("session/cancel", json!({"sessionId": session})).await;
    assert_eq!(cancelled, json!({"cancelled": false}));
    let outcome = conn.ok("session/prompt", json!({"sessionId": session, "text": "again"})).await;
    assert_eq!(outcome["turn"], 2);
    assert_eq!(outcome["stopReason"], "completed");
    let requests = env.requests();
    assert_eq!(requests.len(), 3);
    let body = String::from_utf8_lossy(&requests[2].body);
    assert!(body.contains("STEER-ALPHA"), "the steering text is not in the next request: {body}");
    // session/usage again: the view kept with the session, advanced over the new turn, has the
    // same first rows and one more.
    let again = conn.ok("session/usage", json!({"sessionId": session})).await;
    let rows_again = again["rows"].as_array().unwrap();
    assert_eq!(rows_again.len(), 3, "{again}");
    assert_eq!(rows_again[..2], rows[..], "{again}");
    assert_eq!(rows_again[2]["turn"], 2, "{again}");
    let prompt_sum: u64 =
        rows_again.iter().map(|r| r["usage"]["promptTokens"].as_u64().unwrap()).sum();
    assert_eq!(again["totals"]["promptTokens"], prompt_sum, "{again}");
    // The same rows as a fold of the log file (the view adds only the costs).
    let fresh = serde_json::to_value(dsh_session::usage_rows(&env.events(&session))).unwrap();
    assert_eq!(fresh.as_array().unwrap().len(), 3);
    for (row, fresh) in rows_again.iter().zip(fresh.as_array().unwrap()) {
        for field in ["step", "turn", "seq", "usage", "hitPercent", "dropped", "causes", "model"] {
            assert_eq!(row.get(field), fresh.get(field), "{field}: {again}");
        }
    }

    // approval/respond: a write with the default `ask` policy, allowed.
    let write = |name: &str, content: &str| {
        format!("write it [[fake:tool write_file {}]]", json!({"path": name, "content": content}))
    };
    let prompt = {
        let conn = Arc::clone(conn);
        let text = write("allowed.txt", "yes");
        let session = session.clone();
        tokio::spawn(async move {
            conn.ok("session/prompt", json!({"sessionId": session, "text": text})).await
        })
    };
    let asked =
        conn.wait_event(&sub, "approval/request", |e| e["data"]["tool"] == "write_file").await;
    let approval = asked["data"]["approvalId"].as_str().unwrap().to_owned();
    assert!(!env.workspace.join("allowed.txt").exists(), "written before approval");
    let answer = conn
        .ok(
            "approval/respond",
            json!({"sessionId": session, "approvalId": approval, "decision": "allow"}),
        )
        .await;
    assert_eq!(answer, json!({"accepted": true}));
    let outcome = prompt.await.unwrap();
    assert_eq!(outcome["stopReason"], "completed", "{outcome}");
    assert_eq!(std::fs::read_to_string(env.workspace.join("allowed.txt")).unwrap(), "yes");
    let decision = conn
        .wait_event(&sub, "approval/decision", |e| e["data"]["approvalId"] == approval.as_str())
        .await;
    assert_eq!(decision["data"]["decision"], "allow");
    // Answering it again: nothing waits for it any more.
    conn.err(
        "approval/respond",
        json!({"sessionId": session, "approvalId": approval, "decision": "allow"}),
        dsh_protocol::code::APPROVAL_NOT_FOUND.into(),
    )
    .await;

    // ... and denied: the tool result is an error and nothing is written.
    let prompt = {
        let conn = Arc::clone(conn);
        let text = write("denied.txt", "no");
        let session = session.clone();
        tokio::spawn(async move {
            conn.ok("session/prompt", json!({"sessionId": session, "text": text})).await
        })
    };
    let asked = conn
        .wait_event(&sub, "approval/request", |e| e["data"]["approvalId"] != approval.as_str())
        .await;
    let denied_id = asked["data"]["approvalId"].as_str().unwrap().to_owned();
    let answer = conn
        .ok(
            "approval/respond",
            json!({"sessionId": session, "approvalId": denied_id, "decision": "deny"}),
        )
        .await;
    assert_eq!(answer, json!({"accepted": true}));
    let outcome = prompt.await.unwrap();
    assert_eq!(outcome["turn"], 4);
    let events = conn.wait_turn_end(&sub, 4).await;
    let decision = events
        .iter()
        .find(|e| e["type"] == "approval/decision" && e["data"]["approvalId"] == denied_id.as_str())
        .unwrap();
    assert_eq!(decision["data"]["decision"], "deny");
    let result = events
        .iter()
        .rev()
        .find(|e| e["type"] == "tool/result" && e["data"]["name"] == "write_file")
        .unwrap();
    assert_eq!(result["data"]["isError"], true, "{result}");
    assert!(!env.workspace.join("denied.txt").exists(), "a denied write happened");
    assert_contiguous(&events, 0);
    assert_same_as_log(&events, &env.log_values(&session), &session);

    // session/fork at the end, then prompt the fork; and a fork at an earlier seq.
    let parent_log = env.log_values(&session);
    let fork = conn.ok("session/fork", json!({"sessionId": session})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(fork, session);
    let fork_log = env.log_values(&fork);
    assert_eq!(
        fork_log[0]["data"]["forkedFrom"],
        json!({"sessionId": session, "seq": parent_log.len()})
    );
    assert_eq!(fork_log.len(), parent_log.len());
    for (mine, theirs) in fork_log.iter().zip(&parent_log).skip(1) {
        assert_eq!(mine["type"], theirs["type"]);
        assert_eq!(mine["data"], theirs["data"]);
    }
    let fork_sub = conn.subscribe(&fork, Some(fork_log.len() as u64)).await;
    let outcome =
        conn.ok("session/prompt", json!({"sessionId": fork, "text": "in the fork"})).await;
    assert_eq!(outcome["stopReason"], "completed", "{outcome}");
    assert_eq!(outcome["turn"], 5, "the fork continues the parent's turn count");
    let fork_events = conn.wait_turn_end(&fork_sub, 5).await;
    assert_contiguous(&fork_events, fork_log.len() as u64);
    assert_eq!(env.log_values(&session), parent_log, "prompting the fork touched the parent");
    let at = parent_log
        .iter()
        .find(|e| e["type"] == "turn/start" && e["data"]["turn"] == 2)
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let early =
        conn.ok("session/fork", json!({"sessionId": session, "atSeq": at})).await["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
    let early_log = env.log_values(&early);
    assert_eq!(early_log[0]["data"]["forkedFrom"], json!({"sessionId": session, "seq": at}));
    assert_eq!(early_log.len() as u64, at);

    // session/unsubscribe: no more events on that subscription.
    let before = conn.events(&sub).len();
    assert_eq!(conn.ok("session/unsubscribe", sub_param(&sub)).await, json!(true));
    assert_eq!(conn.ok("session/unsubscribe", sub_param(&sub)).await, json!(false));
    let outcome = conn.ok("session/prompt", json!({"sessionId": session, "text": "quiet"})).await;
    assert_eq!(outcome["turn"], 5);
    // The fork subscription is still live: its turn's end proves the connection has delivered
    // everything up to now; the unsubscribed one got nothing more.
    let outcome = conn.ok("session/prompt", json!({"sessionId": fork, "text": "marker"})).await;
    conn.wait_turn_end(&fork_sub, outcome["turn"].as_u64().unwrap()).await;
    assert_eq!(conn.events(&sub).len(), before, "events after unsubscribe");

    // daemon/status.
    let status = conn.ok("daemon/status", json!({})).await;
    assert_eq!(status["protocolVersion"], 1);
    assert_eq!(status["home"], env.home.display().to_string());
    if let Some(pid) = pid {
        assert_eq!(status["pid"], pid);
    }
    let loaded: Vec<&str> = status["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    for id in [&session, &fork, &early] {
        assert!(loaded.contains(&id.as_str()), "{id} not loaded: {status}");
    }
    assert!(status["clients"].as_u64().unwrap() >= 1, "{status}");

    // Every turn left the logs auditable.
    for id in [&session, &fork] {
        env.assert_audit_ok(id).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_method_over_the_socket() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let conn = env.connect().await;
    exercise_every_method(Target { env: &env, conn: &conn, pid: Some(served.pid()) }).await;
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_method_over_dsh_stdio() {
    let env = Env::new().await;
    let _guard = DaemonGuard(env.home.clone());
    // No daemon runs: the bridge starts one.
    assert!(!env.socket().exists());
    let mut bridge = env.stdio(&[]);
    let conn = Arc::clone(&bridge.conn);
    // The bridge answers once the daemon it started listens.
    let status = conn.ok("daemon/status", json!({})).await;
    let pid = status["pid"].as_u64().unwrap() as u32;
    assert_eq!(lock_pid(&env.home), Some(pid));
    exercise_every_method(Target { env: &env, conn: &conn, pid: Some(pid) }).await;
    assert_eq!(conn.ok("daemon/shutdown", json!({})).await, json!({"stopping": true}));
    wait_gone(pid).await;
    assert!(!env.socket().exists(), "the socket file outlived the daemon");
    // The daemon closed the connection, so the bridge ends.
    let status =
        tokio::time::timeout(crate::support::DEADLINE, bridge.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "the bridge exited with {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_method_over_dsh_stdio_in_process() {
    let env = Env::new().await;
    let mut bridge = env.stdio(&["--in-process"]);
    let conn = Arc::clone(&bridge.conn);
    let pid = bridge.child.id().unwrap();
    exercise_every_method(Target { env: &env, conn: &conn, pid: Some(pid) }).await;
    assert!(!env.socket().exists(), "an in-process daemon made a socket");
    assert_eq!(conn.ok("daemon/shutdown", json!({})).await, json!({"stopping": true}));
    let status =
        tokio::time::timeout(crate::support::DEADLINE, bridge.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "dsh stdio --in-process exited with {status}");
}

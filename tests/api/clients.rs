//! Several clients on one session: shared subscriptions, steering and cancelling a turn another
//! client started, a busy session, catching up after a disconnect, and hearing of each turn as
//! it starts (`workspace/turnStarted`).
//!
//! Turns are held open deterministically by a write tool waiting for approval (the default
//! policy asks), or by a mock reply delayed far beyond the test.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::{Conn, DEADLINE, Env, assert_contiguous, assert_same_as_log, kinds};

fn write_prompt(name: &str) -> String {
    format!("write [[fake:tool write_file {}]]", json!({"path": name, "content": name}))
}

fn spawn_prompt(conn: &Arc<Conn>, params: Value) -> tokio::task::JoinHandle<Value> {
    let conn = Arc::clone(conn);
    tokio::spawn(async move { conn.request("session/prompt", params).await })
}

async fn new_session(env: &Env, conn: &Conn) -> String {
    let created =
        conn.ok("session/create", json!({"workspace": env.workspace.display().to_string()})).await;
    created["sessionId"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_subscribers_see_identical_events_while_a_third_prompts() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let (a, b, c) = (env.client().await, env.client().await, env.client().await);
    let session = new_session(&env, &c).await;
    let sub_a = a.subscribe(&session, Some(0)).await;
    let sub_b = b.subscribe(&session, None).await;
    for turn in 1..=2u64 {
        let outcome = c
            .ok(
                "session/prompt",
                json!({"sessionId": session, "text": format!("turn {turn} [[fake:tool list_dir {{}}]]")}),
            )
            .await;
        assert_eq!(outcome["turn"], turn);
        assert_eq!(outcome["stopReason"], "completed");
    }
    let seen_a = a.wait_turn_end(&sub_a, 2).await;
    let seen_b = b.wait_turn_end(&sub_b, 2).await;
    assert_contiguous(&seen_a, 0);
    assert_eq!(seen_a, seen_b, "the two subscribers saw different sequences");
    assert!(seen_a.iter().filter(|e| e["type"] == "assistant/chunk").count() > 10);
    assert_same_as_log(&seen_a, &env.log_values(&session), &session);
    // The prompting client did not subscribe and got no events.
    assert!(c.events(&sub_a).is_empty() && c.events(&sub_b).is_empty());
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn inject_into_and_cancel_a_turn_another_client_started() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let (starter, steerer, canceller) =
        (env.client().await, env.client().await, env.client().await);
    let session = new_session(&env, &starter).await;
    let sub = steerer.subscribe(&session, None).await;

    // The starter's turn waits for its model reply; meanwhile another client steers it. The
    // model's answer ends the step, and the steering makes the loop run one more.
    env.script(json!([{"content": "first answer", "delay_ms": 2000}])).await;
    let turn = spawn_prompt(&starter, json!({"sessionId": session, "text": "start"}));
    steerer.wait_event(&sub, "request/sent", |_| true).await;
    let injected = steerer
        .ok("session/inject", json!({"sessionId": session, "text": "STEER-FROM-ANOTHER-CLIENT"}))
        .await;
    let answer = turn.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "completed", "{answer}");
    assert_eq!(answer["result"]["steps"], 2, "{answer}");
    let events = steerer.wait_turn_end(&sub, 1).await;
    let first_message =
        events.iter().find(|e| e["type"] == "assistant/message").unwrap()["seq"].as_u64();
    assert!(
        injected["seq"].as_u64() < first_message,
        "the injection came too late to test steering mid-step: {:?}",
        kinds(&events)
    );
    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    let first = String::from_utf8_lossy(&requests[0].body);
    let second = String::from_utf8_lossy(&requests[1].body);
    assert!(!first.contains("STEER-FROM-ANOTHER-CLIENT"));
    assert!(second.contains("STEER-FROM-ANOTHER-CLIENT"), "steering missing from step 2: {second}");

    // A turn whose reply never comes, cancelled by a third client.
    env.script(json!([{"content": "never", "delay_ms": 600_000}])).await;
    let turn = spawn_prompt(&starter, json!({"sessionId": session, "text": "slow"}));
    // Wait until the mock holds the request, so the cancel hits a provider call in flight.
    let started = std::time::Instant::now();
    while env.requests().len() < 3 {
        assert!(started.elapsed() < DEADLINE, "the mock never got the request");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let listed = canceller.ok("session/list", json!({})).await;
    assert_eq!(listed["sessions"][0]["running"], true, "{listed}");
    assert_eq!(
        canceller.ok("session/cancel", json!({"sessionId": session})).await,
        json!({"cancelled": true})
    );
    let answer = turn.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    let events = steerer.wait_turn_end(&sub, 2).await;
    let end = events.last().unwrap();
    assert_eq!(end["data"], json!({"turn": 2, "reason": "cancelled"}), "{end}");
    let error = events.iter().rev().find(|e| e["type"] == "step/error").unwrap();
    assert_eq!(error["data"]["cancelled"], true, "{error}");
    assert_same_as_log(&events, &env.log_values(&session), &session);
    assert_eq!(
        canceller.ok("session/cancel", json!({"sessionId": session})).await,
        json!({"cancelled": false})
    );
    env.assert_audit_ok(&session).await;
    served.shutdown().await;
}

/// Steering that arrives while a tool call is still unanswered (here: waiting for approval)
/// joins the next request, and that request must be valid: every tool call answered by its tool
/// message before the next user message.
#[tokio::test(flavor = "multi_thread")]
async fn steering_while_a_tool_call_waits_joins_a_valid_next_request() {
    let env = Env::new().await;
    let second = steering_while_a_tool_call_waits(&env).await;
    let second = String::from_utf8_lossy(&second);
    assert!(second.contains("STEER-DURING-TOOL"), "steering missing from step 2: {second}");
}

/// The same on an Anthropic Messages profile: the tool result and the steering make one user
/// turn, results first (the mock refuses turns that do not alternate and results after text).
#[tokio::test(flavor = "multi_thread")]
async fn steering_on_anthropic_messages_joins_the_tool_results_turn() {
    let env = Env::new().await;
    std::fs::write(
        env.user_config(),
        "profile = \"claude\"\n\n[providers.claude]\nkind = \"anthropic\"\n\
         base_url = \"http://127.0.0.1:1\"\napi_key_env = \"DEEPSEEK_API_KEY\"\n\
         model = \"deepseek-v4-flash\"\n\n[providers.claude.models.deepseek-v4-flash]\n\
         max_output = 8192\nthinking = true\n",
    )
    .unwrap();
    let second = steering_while_a_tool_call_waits(&env).await;
    let second: Value = serde_json::from_slice(&second).unwrap();
    let last = second["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user", "{last}");
    let kinds: Vec<&str> =
        last["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["tool_result", "text"], "{last}");
    assert_eq!(last["content"][1]["text"], "STEER-DURING-TOOL");
    assert_eq!(second["messages"][1]["content"][0]["type"], "thinking", "{second}");
}

/// Runs the scenario; returns the body of the request after the steering.
async fn steering_while_a_tool_call_waits(env: &Env) -> Vec<u8> {
    let served = env.serve(&[]).await;
    let (starter, steerer) = (env.client().await, env.client().await);
    let session = new_session(env, &starter).await;
    let sub = steerer.subscribe(&session, None).await;
    let turn = spawn_prompt(&starter, json!({"sessionId": session, "text": write_prompt("a.txt")}));
    let asked = steerer.wait_event(&sub, "approval/request", |_| true).await;
    let injected = steerer
        .ok("session/inject", json!({"sessionId": session, "text": "STEER-DURING-TOOL"}))
        .await;
    steerer.wait_event(&sub, "steering/message", |e| e["seq"] == injected["seq"]).await;
    steerer
        .ok(
            "approval/respond",
            json!({"sessionId": session, "approvalId": asked["data"]["approvalId"], "decision": "allow"}),
        )
        .await;
    let answer = turn.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "completed", "{answer}");
    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    env.assert_audit_ok(&session).await;

    // Where the steering landed, as the daemon says it: live and in a page alike, on step 2's
    // `step/start` only (clients display it; none re-derives it).
    let live = steerer.wait_turn_end(&sub, 1).await;
    let page = steerer
        .ok("session/events", json!({"sessionId": session, "fromSeq": 0, "limit": 1000}))
        .await;
    for events in [&live, page["events"].as_array().unwrap()] {
        let start = |step: u64| {
            events.iter().find(|e| e["type"] == "step/start" && e["data"]["step"] == step).unwrap()
        };
        assert_eq!(start(2)["joined"], json!([injected["seq"]]), "{}", start(2));
        // Step 1's request was joined by the notes logged before it (today's date), no steering.
        let notes: Vec<&Value> = events
            .iter()
            .filter(|e| {
                e["type"] == "context/message" && e["seq"].as_u64() < start(1)["seq"].as_u64()
            })
            .map(|e| &e["seq"])
            .collect();
        assert!(!notes.is_empty());
        assert_eq!(start(1)["joined"], json!(notes), "{}", start(1));
        assert!(
            events.iter().filter(|e| e["type"] != "step/start").all(|e| e.get("joined").is_none())
        );
    }

    // A fork at step 2 keeps what came before its `step/start`; an unknown step is out of range.
    let step2_seq = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "step/start" && e["data"]["step"] == 2)
        .unwrap()["seq"]
        .clone();
    let fork = steerer.ok("session/fork", json!({"sessionId": session, "atStep": 2})).await;
    let forked = env.log_values(fork["sessionId"].as_str().unwrap());
    assert_eq!(forked[0]["data"]["forkedFrom"]["seq"], step2_seq, "{}", forked[0]);
    let message = steerer
        .err(
            "session/fork",
            json!({"sessionId": session, "atStep": 9}),
            dsh_protocol::code::OUT_OF_RANGE.into(),
        )
        .await;
    assert!(message.contains("no step 9"), "{message}");
    steerer
        .err("session/fork", json!({"sessionId": session, "atStep": 2, "atSeq": 3}), -32602)
        .await;
    served.shutdown().await;
    requests[1].body.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_prompt_is_busy_unless_it_queues() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let (first, second) = (env.client().await, env.client().await);
    let session = new_session(&env, &first).await;
    let sub = first.subscribe(&session, None).await;
    let running =
        spawn_prompt(&first, json!({"sessionId": session, "text": write_prompt("b.txt")}));
    let asked = first.wait_event(&sub, "approval/request", |_| true).await;

    for params in [
        json!({"sessionId": session, "text": "me too"}),
        json!({"sessionId": session, "text": "me too", "whenBusy": "reject"}),
    ] {
        let message =
            second.err("session/prompt", params, dsh_protocol::code::SESSION_BUSY.into()).await;
        assert!(message.contains("busy"), "{message}");
    }
    let queued = spawn_prompt(
        &second,
        json!({"sessionId": session, "text": "after you", "whenBusy": "queue"}),
    );
    // The queued prompt is accepted and waits: answering it needs the running turn to end.
    first
        .ok(
            "approval/respond",
            json!({"sessionId": session, "approvalId": asked["data"]["approvalId"], "decision": "allow"}),
        )
        .await;
    let answer = running.await.unwrap();
    assert_eq!(answer["result"]["turn"], 1, "{answer}");
    let answer = queued.await.unwrap();
    assert_eq!(answer["result"]["turn"], 2, "{answer}");
    assert_eq!(answer["result"]["stopReason"], "completed", "{answer}");
    let events = first.wait_turn_end(&sub, 2).await;
    let position = |kind: &str, turn: u64| {
        events.iter().position(|e| e["type"] == kind && e["data"]["turn"] == turn).unwrap()
    };
    assert!(position("turn/end", 1) < position("turn/start", 2), "{:?}", kinds(&events));
    let user: Vec<&Value> = events.iter().filter(|e| e["type"] == "user/message").collect();
    assert_eq!(user[1]["data"]["text"], "after you");
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn subscribe_from_seq_after_a_disconnect_catches_up_without_gaps() {
    let mut config = dsh_mock::MockConfig::default();
    config.stream.inter_chunk_delay_ms = 10;
    let env = Env::with_mock(config).await;
    let served = env.serve(&[]).await;
    let control = env.client().await;
    let session = new_session(&env, &control).await;

    // First watcher: sees the turn up to its approval request, then goes away.
    let watcher = env.client().await;
    let sub = watcher.subscribe(&session, None).await;
    let turn = spawn_prompt(&control, json!({"sessionId": session, "text": write_prompt("c.txt")}));
    let asked = watcher.wait_event(&sub, "approval/request", |_| true).await;
    let mut seen = watcher.events(&sub);
    drop(watcher);

    // Events happen while nobody watches: the approval, the tool, the next step's start.
    control
        .ok(
            "approval/respond",
            json!({"sessionId": session, "approvalId": asked["data"]["approvalId"], "decision": "allow"}),
        )
        .await;
    let started = std::time::Instant::now();
    while env.requests().len() < 2 {
        assert!(started.elapsed() < DEADLINE, "step 2 never reached the mock");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Second watcher: resumes right after the last event it saw, while the turn still runs.
    let watcher = env.client().await;
    let next = seen.last().unwrap()["seq"].as_u64().unwrap() + 1;
    let sub = watcher.subscribe(&session, Some(next)).await;
    // Goes away again mid-stream (after the first chunk of step 2) ...
    watcher.wait_event(&sub, "assistant/chunk", |e| e["data"]["step"] == 2).await;
    seen.extend(watcher.events(&sub));
    drop(watcher);
    // ... and a third one picks up at once, while chunks are still streaming.
    let watcher = env.client().await;
    let next = seen.last().unwrap()["seq"].as_u64().unwrap() + 1;
    let sub = watcher.subscribe(&session, Some(next)).await;
    let answer = turn.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "completed", "{answer}");
    seen.extend(watcher.wait_turn_end(&sub, 1).await);
    assert_contiguous(&seen, 0);
    assert_same_as_log(&seen, &env.log_values(&session), &session);
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_steers_and_cancels_a_turn_another_client_started() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let starter = env.client().await;
    let session = new_session(&env, &starter).await;
    let sub = starter.subscribe(&session, None).await;
    env.script(json!([{"content": "never", "delay_ms": 600_000}])).await;
    let turn = spawn_prompt(&starter, json!({"sessionId": session, "text": "slow"}));
    starter.wait_event(&sub, "request/sent", |_| true).await;

    let output = env.dsh(&["inject", &session, "from", "the", "cli"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let steering = starter.wait_event(&sub, "steering/message", |_| true).await;
    assert_eq!(steering["data"]["text"], "from the cli");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(stdout.contains(&format!("seq {}", steering["seq"])), "{stdout}");

    let output = env.dsh(&["--json", "cancel", &session]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result, json!({"cancelled": true}));
    let answer = turn.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    let events = starter.wait_turn_end(&sub, 1).await;
    assert_eq!(events.last().unwrap()["data"]["reason"], "cancelled");
    served.shutdown().await;
}

/// Bounded queues: past 16 prompts queued behind a running turn, and past 64 requests in flight
/// on one connection, the daemon answers "overloaded, retry" instead of taking more.
#[tokio::test(flavor = "multi_thread")]
async fn an_overloaded_daemon_answers_retry_instead_of_queueing_more() {
    use dsh_protocol::code::OVERLOADED;
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let (a, b, watcher) = (env.client().await, env.client().await, env.client().await);
    let mut sessions = Vec::new();
    for _ in 0..5 {
        sessions.push(new_session(&env, &a).await);
    }
    // Each session's first turn waits for an approval nobody gives yet.
    let mut running = Vec::new();
    let mut approvals = Vec::new();
    for (n, session) in sessions.iter().enumerate() {
        let sub = watcher.subscribe(session, None).await;
        let conn = if n == 0 { &a } else { &b };
        running.push(spawn_prompt(conn, json!({"sessionId": session, "text": write_prompt("x")})));
        let asked = watcher.wait_event(&sub, "approval/request", |_| true).await;
        approvals.push(asked["data"]["approvalId"].clone());
    }
    let queue = |session: &str, n: usize| json!({"sessionId": session, "text": format!("queued {n}"), "whenBusy": "queue"});
    // Session 0: 17 prompts ask to queue behind its turn; 16 may wait, exactly one is refused.
    let queued: Vec<_> = (0..17).map(|n| spawn_prompt(&a, queue(&sessions[0], n))).collect();
    // The refusal comes as soon as 16 wait: wait for it, so the turns are not let go before all
    // 17 reached the daemon.
    let started = std::time::Instant::now();
    while !queued.iter().any(|task| task.is_finished()) {
        assert!(started.elapsed() < DEADLINE, "no queued prompt was refused");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // Connection b: 4 running turns and 15 queued prompts each fill its 64 request slots (the
    // daemon reads one connection's lines in order); the next request on b is refused at once,
    // while other connections are served.
    let mut on_b = Vec::new();
    for session in &sessions[1..] {
        for n in 0..15 {
            on_b.push(b.send("session/prompt", queue(session, n)).await);
        }
    }
    let answer = tokio::time::timeout(DEADLINE, b.send("daemon/status", json!({})).await)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer["error"]["code"], OVERLOADED, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("retry"), "{answer}");
    watcher.ok("daemon/status", json!({})).await;
    // Let everything run: the approvals are denied, then every queued prompt runs its turn.
    for (session, approval) in sessions.iter().zip(&approvals) {
        watcher
            .ok(
                "approval/respond",
                json!({"sessionId": session, "approvalId": approval, "decision": "deny"}),
            )
            .await;
    }
    let mut refused = Vec::new();
    let answers: Vec<Value> = futures_answers(running, queued, on_b).await;
    for answer in answers {
        if answer.get("error").is_some() {
            refused.push(answer);
        } else {
            assert_eq!(answer["result"]["stopReason"], "completed", "{answer}");
        }
    }
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["error"]["code"], OVERLOADED, "{}", refused[0]);
    assert!(refused[0]["error"]["message"].as_str().unwrap().contains("queued"), "{}", refused[0]);
    let list = b.ok("session/list", json!({})).await;
    let turns: u64 =
        list["sessions"].as_array().unwrap().iter().map(|s| s["turns"].as_u64().unwrap()).sum();
    assert_eq!(turns, 1 + 16 + 4 * 16, "{list}");
    served.shutdown().await;
}

async fn futures_answers(
    running: Vec<tokio::task::JoinHandle<Value>>,
    queued: Vec<tokio::task::JoinHandle<Value>>,
    sent: Vec<tokio::sync::oneshot::Receiver<Value>>,
) -> Vec<Value> {
    let mut answers = Vec::new();
    for task in running.into_iter().chain(queued) {
        answers.push(tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap());
    }
    for answer in sent {
        answers.push(tokio::time::timeout(DEADLINE, answer).await.unwrap().unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread")]
async fn subscriptions_belong_to_their_connection_and_fromseq_must_be_in_the_log() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let owner = env.client().await;
    let other = env.client().await;
    let session = new_session(&env, &owner).await;

    // A fromSeq past the end of the log is refused, not silently empty.
    other.err("session/subscribe", json!({"sessionId": session, "fromSeq": 1000}), 1003).await;

    // Another connection cannot end a subscription it did not make.
    let sub: Value = serde_json::from_str(&owner.subscribe(&session, Some(0)).await).unwrap();
    assert_eq!(other.ok("session/unsubscribe", json!([sub])).await, json!(false));
    assert_eq!(owner.ok("session/unsubscribe", json!([sub])).await, json!(true));
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_first_calls_load_a_session_once() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let conn = env.client().await;
    let session = new_session(&env, &conn).await;
    served.shutdown().await;

    // A new daemon: eight calls naming the session at once all find it, none is told another
    // process holds its log.
    let served = env.serve(&[]).await;
    let conn = env.client().await;
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let conn = Arc::clone(&conn);
            let session = session.clone();
            tokio::spawn(
                async move { conn.call("session/cancel", json!({"sessionId": session})).await },
            )
        })
        .collect();
    for call in calls {
        let answer = call.await.unwrap();
        assert_eq!(answer.unwrap(), json!({"cancelled": false}));
    }
    served.shutdown().await;
}

/// The `workspace/turnStarted` notifications a connection received so far: (session, fromSeq).
fn turn_starts(other: &[Value]) -> Vec<(String, u64)> {
    let started = other.iter().filter(|m| m["method"] == "workspace/turnStarted");
    started
        .map(|m| {
            let result = &m["params"]["result"];
            (result["sessionId"].as_str().unwrap().to_owned(), result["fromSeq"].as_u64().unwrap())
        })
        .collect()
}

/// A daemon subscriber hears of each turn as it starts — another client's, and a queued one
/// when it leaves the queue — and subscribing from its `fromSeq` delivers the whole turn.
#[tokio::test(flavor = "multi_thread")]
async fn daemon_subscribers_hear_of_each_turn_as_it_starts_and_where_its_events_begin() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let (watcher, prompter) = (env.client().await, env.client().await);
    watcher.ok("daemon/subscribe", json!({})).await;
    let session = new_session(&env, &prompter).await;
    env.script(json!([{"content": "first", "delay_ms": 1000}, {"content": "second"}])).await;
    let first = spawn_prompt(&prompter, json!({"sessionId": session, "text": "one"}));
    watcher
        .wait_until("the first turn's start", |inbox| turn_starts(&inbox.other).len() == 1)
        .await;
    let queued = json!({"sessionId": session, "text": "two", "whenBusy": "queue"});
    let second = spawn_prompt(&prompter, queued);
    for answer in [first.await.unwrap(), second.await.unwrap()] {
        assert_eq!(answer["result"]["stopReason"], "completed", "{answer}");
    }
    watcher
        .wait_until("the second turn's start", |inbox| turn_starts(&inbox.other).len() == 2)
        .await;
    let notice = watcher.other().into_iter().find(|m| m["method"] == "workspace/turnStarted");
    let workspace = env.workspace.canonicalize().unwrap();
    assert_eq!(notice.unwrap()["params"]["result"]["workspace"], workspace.to_str().unwrap());
    for (turn, (started, from_seq)) in (1..).zip(turn_starts(&watcher.other())) {
        assert_eq!(started, session);
        let subscription = watcher.subscribe(&session, Some(from_seq)).await;
        let events = watcher.wait_turn_end(&subscription, turn).await;
        assert_eq!(events[0]["type"], "turn/start", "{:?}", kinds(&events));
        assert_eq!(events[0]["data"]["turn"], turn);
    }
    served.shutdown().await;
}

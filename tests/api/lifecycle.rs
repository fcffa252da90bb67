//! The daemon's life: SIGKILL during a turn and the restart a client triggers, SIGTERM during a
//! turn, an approval nobody answers, and a front killed with everything it started (as ACP
//! clients close agents) while another client's turn runs.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    DEADLINE, DaemonGuard, Env, assert_contiguous, lock_pid, process_alive, wait_gone,
};

/// Waits until the mock has recorded `count` chat requests.
async fn wait_requests(env: &Env, count: usize) {
    let started = std::time::Instant::now();
    while env.requests().len() < count {
        assert!(started.elapsed() < DEADLINE, "the mock recorded fewer than {count} requests");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill").args([signal, &pid.to_string()]).status();
    assert!(status.unwrap().success(), "kill {signal} {pid} failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_a_turn_then_the_next_client_restarts_and_the_session_resumes() {
    let env = Env::new().await;
    let _guard = DaemonGuard(env.home.clone());
    let mut served = env.serve(&[]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let session = conn.ok("session/create", json!({"workspace": workspace})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = conn.ok("session/prompt", json!({"sessionId": session, "text": "warm up"})).await;
    assert_eq!(first["stopReason"], "completed");

    // A turn whose reply never comes; the daemon dies in the middle of it.
    env.script(json!([{"content": "never", "delay_ms": 600_000}])).await;
    let prompt = {
        let conn = Arc::clone(&conn);
        let session = session.clone();
        tokio::spawn(async move {
            conn.request_opt("session/prompt", json!({"sessionId": session, "text": "doomed"}))
                .await
        })
    };
    wait_requests(&env, 2).await;
    let status = conn.ok("daemon/status", json!({})).await;
    let old_pid = status["pid"].as_u64().unwrap() as u32;
    assert_eq!(lock_pid(&env.home), Some(old_pid));
    assert_eq!(status["sessions"][0]["running"], true, "{status}");
    signal(old_pid, "-KILL");
    let exit = served.wait().await;
    assert!(!exit.success());
    assert_eq!(prompt.await.unwrap(), None, "a killed daemon answered the prompt");
    assert!(env.socket().exists(), "expected a stale socket after SIGKILL");
    // The killed turn is open in the log.
    let log = env.log_values(&session);
    assert_eq!(log.iter().filter(|e| e["type"] == "turn/start").count(), 2);
    assert_eq!(log.iter().filter(|e| e["type"] == "turn/end").count(), 1);

    // `dsh status` starts nothing: it says no daemon runs (the socket is stale).
    let output = env.dsh(&["--json", "status"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["running"], false, "{status}");
    // The next session command starts a new daemon, which replaces the stale socket.
    let output = env.dsh(&["sessions"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let output = env.dsh(&["--json", "status"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    let new_pid = status["pid"].as_u64().unwrap() as u32;
    assert_ne!(new_pid, old_pid);
    assert!(process_alive(new_pid));
    assert_eq!(lock_pid(&env.home), Some(new_pid));
    assert!(status["sessions"].as_array().unwrap().is_empty(), "sessions load lazily: {status}");

    // The session recovers: the interrupted turn is closed, the next turn runs from a `resume`
    // header snapshot, and the log audits clean.
    let conn = env.client().await;
    let sub = conn.subscribe(&session, None).await;
    let outcome =
        conn.ok("session/prompt", json!({"sessionId": session, "text": "after the crash"})).await;
    assert_eq!(outcome["turn"], 3, "{outcome}");
    assert_eq!(outcome["stopReason"], "completed", "{outcome}");
    let events = conn.wait_turn_end(&sub, 3).await;
    assert_contiguous(&events, 0);
    let closed = events
        .iter()
        .find(|e| e["type"] == "turn/end" && e["data"]["turn"] == 2)
        .expect("the interrupted turn was not closed");
    assert_eq!(closed["data"]["reason"], "cancelled", "{closed}");
    let turn3 = events.iter().position(|e| e["type"] == "turn/start" && e["data"]["turn"] == 3);
    let resume = events
        .iter()
        .skip(turn3.unwrap())
        .find(|e| e["type"] == "request/header")
        .expect("no header snapshot after the restart");
    assert_eq!(resume["data"]["reason"], "resume", "{resume}");
    env.assert_audit_ok(&session).await;

    assert_eq!(conn.ok("daemon/shutdown", json!({})).await, json!({"stopping": true}));
    wait_gone(new_pid).await;
    assert!(!env.socket().exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_a_turn_logs_it_cancelled_and_removes_the_socket() {
    let env = Env::new().await;
    let mut served = env.serve(&[]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let session = conn.ok("session/create", json!({"workspace": workspace})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    env.script(json!([{"content": "never", "delay_ms": 600_000}])).await;
    let prompt = {
        let conn = Arc::clone(&conn);
        let session = session.clone();
        tokio::spawn(async move {
            conn.request_opt("session/prompt", json!({"sessionId": session, "text": "slow"})).await
        })
    };
    wait_requests(&env, 1).await;
    signal(served.pid(), "-TERM");
    // The prompt in flight is answered before the daemon goes.
    let answer = prompt.await.unwrap().expect("the prompt got no answer on SIGTERM");
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    let exit = served.wait().await;
    assert!(exit.success(), "the daemon exited with {exit} on SIGTERM");
    assert!(!env.socket().exists(), "the socket file outlived the daemon");
    let events = env.events(&session); // asserts the log is not torn
    let last = env.log_values(&session).pop().unwrap();
    assert_eq!(last["type"], "turn/end");
    assert_eq!(last["data"]["reason"], "cancelled", "{last}");
    assert!(events.len() > 3);
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_nobody_answers_is_denied_and_logged_as_a_timeout() {
    let env = Env::new().await;
    let served = env.serve(&["--approval-timeout", "1"]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let session = conn.ok("session/create", json!({"workspace": workspace})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = format!(
        "write [[fake:tool write_file {}]]",
        json!({"path": "late.txt", "content": "too late"})
    );
    let outcome = conn.ok("session/prompt", json!({"sessionId": session, "text": text})).await;
    assert_eq!(outcome["stopReason"], "completed", "{outcome}");
    let log = env.log_values(&session);
    let request = log.iter().find(|e| e["type"] == "approval/request").unwrap();
    let decision = log.iter().find(|e| e["type"] == "approval/decision").unwrap();
    assert_eq!(decision["data"]["approvalId"], request["data"]["approvalId"]);
    assert_eq!(decision["data"]["decision"], "timeout", "{decision}");
    let result = log.iter().find(|e| e["type"] == "tool/result").unwrap();
    assert_eq!(result["data"]["isError"], true, "{result}");
    assert!(!env.workspace.join("late.txt").exists());
    // Too late to answer now.
    conn.err(
        "approval/respond",
        json!({"sessionId": session, "approvalId": request["data"]["approvalId"], "decision": "allow"}),
        dsh_protocol::code::APPROVAL_NOT_FOUND.into(),
    )
    .await;
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panicking_turn_fails_its_session_and_nothing_else() {
    let env = Env::new().await;
    // Debug builds of the daemon panic inside the turn task on this exact prompt.
    let served = env
        .serve_with(&[], |command| {
            command.env("DSH_DEBUG_PANIC_ON_PROMPT", "panic now");
        })
        .await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let created = conn.ok("session/create", json!({"workspace": workspace})).await;
        ids.push(created["sessionId"].as_str().unwrap().to_owned());
    }
    let (doomed, healthy) = (&ids[0], &ids[1]);
    conn.ok("session/prompt", json!({"sessionId": doomed, "text": "fine"})).await;
    let message = conn
        .err(
            "session/prompt",
            json!({"sessionId": doomed, "text": "panic now"}),
            dsh_protocol::code::SESSION_UNAVAILABLE.into(),
        )
        .await;
    assert!(message.contains("failed"), "{message}");
    let status = conn.ok("daemon/status", json!({})).await;
    let entry = status["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == doomed.as_str())
        .unwrap()
        .clone();
    assert!(entry["failed"].is_string(), "{status}");
    // No more turns in the failed session; its log is well-formed and says why.
    conn.err(
        "session/prompt",
        json!({"sessionId": doomed, "text": "again"}),
        dsh_protocol::code::SESSION_UNAVAILABLE.into(),
    )
    .await;
    // (The hook panics before the turn logs anything; a turn the panic leaves open is closed
    // with `error`.) Every turn in the log is closed, and the daemon log says what happened.
    let log = env.log_values(doomed);
    let count = |kind: &str| log.iter().filter(|e| e["type"] == kind).count();
    assert_eq!(count("turn/start"), count("turn/end"), "a turn was left open");
    for end in log.iter().filter(|e| e["type"] == "turn/end").skip(1) {
        assert_eq!(end["data"]["reason"], "error", "{end}");
    }
    env.assert_audit_ok(doomed).await;
    assert!(env.daemon_log().contains("panicked"), "{}", env.daemon_log());
    // The daemon and the other session carry on.
    let outcome =
        conn.ok("session/prompt", json!({"sessionId": healthy, "text": "still here"})).await;
    assert_eq!(outcome["stopReason"], "completed");
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_daemon_exits_when_its_last_client_leaves() {
    let env = Env::new().await;
    // 0.02 minutes: 1.2 s without a client or a turn.
    let mut served = env.serve(&["--idle-exit", "0.02"]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let session = conn.ok("session/create", json!({"workspace": workspace})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    // A connected client keeps it alive past the idle time (the turn takes 2 s).
    env.script(json!([{"content": "slowly", "delay_ms": 2000}])).await;
    conn.ok("session/prompt", json!({"sessionId": session, "text": "wait"})).await;
    assert!(process_alive(served.pid()), "the daemon exited with a client connected");
    drop(conn);
    let exit = served.wait().await;
    assert!(exit.success(), "{exit}");
    assert!(!env.socket().exists());
    env.assert_audit_ok(&session).await;
}

/// The processes descended from `pid` (children first found by their parent in `/proc`).
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // `pid (comm) state ppid …`: the command may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        let Some(after) = stat.rfind(')').map(|end| &stat[end + 1..]) else { continue };
        if let Some(parent) = after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            parents.push((child, parent));
        }
    }
    let mut found = vec![pid];
    let mut index = 0;
    while index < found.len() {
        let parent = found[index];
        found.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(c, _)| *c));
        index += 1;
    }
    found.split_off(1)
}

/// What acpx (and editors that clean up what they spawned) do when they close an agent: SIGTERM
/// to its process group and to every process descended from it.
fn kill_group_and_tree(pid: u32) {
    let tree = descendants(pid);
    let _ = std::process::Command::new("kill").args(["-TERM", "--", &format!("-{pid}")]).status();
    for process in std::iter::once(pid).chain(tree) {
        let _ = std::process::Command::new("kill").args(["-TERM", &process.to_string()]).status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_a_front_with_its_process_group_and_tree_leaves_other_clients_turns_running() {
    let env = Env::new().await;
    let _guard = DaemonGuard(env.home.clone());
    for front in ["acp", "lsp", "stdio"] {
        // The front starts the daemon (none runs): spawned as acpx spawns an agent, the leader
        // of a process group of its own.
        assert!(lock_pid(&env.home).is_none_or(|pid| !process_alive(pid)), "{front}");
        let mut command = env.command(&[front]);
        command.stdin(std::process::Stdio::piped()).process_group(0);
        let mut child = command.spawn().unwrap();
        let front_pid = child.id().unwrap();
        let started = std::time::Instant::now();
        let daemon = loop {
            if let Some(pid) = lock_pid(&env.home).filter(|_| env.socket().exists()) {
                break pid;
            }
            assert!(started.elapsed() < DEADLINE, "`dsh {front}` started no daemon");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(
            !descendants(front_pid).contains(&daemon),
            "the daemon descends from `dsh {front}`"
        );

        // Another client's turn, slow enough to be running when the front is killed.
        let sent = env.requests().len();
        env.script(json!([{"content": "finished despite the kill", "delay_ms": 1500}])).await;
        let prompt = env.prompt_new_command("keep going").spawn().unwrap();
        wait_requests(&env, sent + 1).await;
        kill_group_and_tree(front_pid);
        let status = tokio::time::timeout(DEADLINE, child.wait()).await.unwrap().unwrap();
        assert!(!status.success(), "`dsh {front}` was killed: {status}");

        let output = tokio::time::timeout(DEADLINE, prompt.wait_with_output()).await.unwrap();
        let output = output.unwrap();
        assert!(output.status.success(), "{front}: {}", crate::support::describe(&output));
        assert!(
            crate::support::stdout(&output).contains("finished despite the kill"),
            "{front}: {}",
            crate::support::describe(&output)
        );
        let session = crate::support::session_id_of(&output);
        let events = env.log_values(&session);
        let end = events.iter().rfind(|e| e["type"] == "turn/end").unwrap();
        assert_eq!(end["data"]["reason"], "completed", "{front}: {end}");
        assert!(process_alive(daemon), "{front}: the daemon died with the front");
        env.dsh_ok(&["shutdown"]).await;
        wait_gone(daemon).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pinned_session_keeps_its_pin_when_the_daemon_restarts_before_its_first_step() {
    let env = Env::new().await;
    let mut served = env.serve(&[]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let config = json!({"profile": "deepseek", "model": "deepseek-v4-pro", "maxSteps": 1});
    let created =
        conn.ok("session/create", json!({"workspace": workspace, "config": config})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    // The pin is in the log once the create has answered.
    let meta = env.log_values(&session).remove(0);
    assert_eq!(meta["data"]["pin"]["model"], "deepseek-v4-pro", "{meta}");
    // The daemon sends the default profile's new sessions to the mock (`--base-url`): pinned
    // to it, as the ad-hoc profile named for the URL.
    let profile = json!(format!("deepseek@{}", env.mock.base_url().trim_end_matches('/')));
    assert_eq!(meta["data"]["pin"]["profile"], profile, "{meta}");

    // Killed before the session's first step: nothing of it but the log survives.
    signal(served.pid(), "-KILL");
    served.wait().await;
    let _served = env.serve(&[]).await;
    let conn = env.client().await;
    let listed = conn.ok("session/list", json!({"workspace": workspace})).await;
    let entry = &listed["sessions"][0];
    assert_eq!((&entry["profile"], &entry["model"]), (&profile, &json!("deepseek-v4-pro")));
    let usage = conn.ok("session/usage", json!({"sessionId": session})).await;
    assert_eq!((&usage["profile"], &usage["model"]), (&profile, &json!("deepseek-v4-pro")));

    // The first request goes to the pinned model, and the turn stops at the pinned step limit.
    env.script(json!([
        {"content": "", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
        {"content": "never reached"}
    ]))
    .await;
    let answer = conn.ok("session/prompt", json!({"sessionId": session, "text": "go"})).await;
    assert_eq!(answer["stopReason"], "maxSteps", "{answer}");
    let requests = env.requests();
    assert_eq!(requests.len(), 1);
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["model"], "deepseek-v4-pro");
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_daemon_whose_socket_was_removed_exits_without_waiting_out_its_idle_time() {
    let env = Env::new().await;
    // 30 minutes, as a client starts one: only the removed socket can end it within the test.
    let mut served = env.serve(&["--idle-exit", "30"]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    conn.ok("session/create", json!({"workspace": workspace})).await;
    // A connected client keeps it up even with the socket gone.
    std::fs::remove_file(env.socket()).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(process_alive(served.pid()), "the daemon exited with a client connected");
    drop(conn);
    let exit = tokio::time::timeout(Duration::from_secs(20), served.wait())
        .await
        .expect("the daemon outlived its removed socket by 20 s");
    assert!(exit.success(), "{exit}");
    assert!(
        env.daemon_log().contains("the socket was removed or replaced"),
        "{}",
        env.daemon_log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_whose_socket_was_replaced_exits_and_leaves_the_new_socket_alone() {
    let env = Env::new().await;
    let mut served = env.serve(&["--idle-exit", "30"]).await;
    // Another daemon's socket at the same path (as after the home was deleted and made again).
    std::fs::remove_file(env.socket()).unwrap();
    let other = std::os::unix::net::UnixListener::bind(env.socket()).unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(20), served.wait())
        .await
        .expect("the daemon outlived its replaced socket by 20 s");
    assert!(exit.success(), "{exit}");
    assert!(env.socket().exists(), "the exiting daemon removed the other daemon's socket");
    drop(other);
}

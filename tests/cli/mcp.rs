//! Tools from MCP servers, end to end: real servers from the package registries — npm
//! `@modelcontextprotocol/server-everything` and `server-filesystem`, and `tests/mcp/fixture.py`
//! written with PyPI `mcp` — configured in the user's file, started by the daemon at the first
//! step; their tools in the request sorted and namespaced, `dsh saw --wire` equal to what the
//! mock received, calls approved and logged, tool-list changes and crashes as logged,
//! attributed header changes, bad servers contained.
//!
//! The servers are installed by `tests/mcp/install.sh` (run by `scripts/test`). Without them
//! these tests say SKIPPED on stderr and pass, unless `DSH_MCP_REQUIRED=1`, when they fail.

use std::path::PathBuf;

use dsh_session::EventData;
use serde_json::{Value, json};

use crate::support::{DEADLINE, Env, describe, stdout};

fn mcp_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp").canonicalize().unwrap()
}

/// Whether the registry servers are installed; says so loudly when they are not.
fn installed(test: &str) -> bool {
    let dir = mcp_dir();
    let present = dir.join(".deps/py/mcp").is_dir()
        && dir.join("node_modules/@modelcontextprotocol/server-everything").is_dir()
        && dir.join("node_modules/@modelcontextprotocol/server-filesystem").is_dir();
    if !present {
        assert!(
            std::env::var("DSH_MCP_REQUIRED").is_err(),
            "{test}: the MCP test servers are not installed (run tests/mcp/install.sh)"
        );
        eprintln!("SKIPPED {test}: the MCP test servers are not installed (tests/mcp/install.sh)");
    }
    present
}

/// A `[mcp.servers.NAME]` table for the Python fixture in `mode`.
fn fixture(name: &str, mode: &str, extra: &str) -> String {
    fixture_with_env(name, mode, "FIXTURE_GIVEN = \"given\"", extra)
}

/// Like [`fixture`], with more of the server's environment (`KEY = "value", …`).
fn fixture_with_env(name: &str, mode: &str, env: &str, extra: &str) -> String {
    let dir = mcp_dir();
    format!(
        "[mcp.servers.{name}]\ncommand = \"python3\"\nargs = [{:?}, {mode:?}]\n\
         env = {{ PYTHONPATH = {:?}, {env} }}\n{extra}\n",
        dir.join("fixture.py").display().to_string(),
        dir.join(".deps/py").display().to_string(),
    )
}

fn everything(name: &str) -> String {
    let bin = mcp_dir().join("node_modules/.bin/mcp-server-everything");
    format!("[mcp.servers.{name}]\ncommand = {:?}\nargs = [\"stdio\"]\n", bin.display().to_string())
}

fn filesystem(name: &str, root: &std::path::Path) -> String {
    let bin = mcp_dir().join("node_modules/.bin/mcp-server-filesystem");
    format!(
        "[mcp.servers.{name}]\ncommand = {:?}\nargs = [{:?}]\n",
        bin.display().to_string(),
        root.display().to_string()
    )
}

async fn env_with(config: &str) -> Env {
    let env = Env::new().await;
    std::fs::write(env.user_config(), config).unwrap();
    env
}

fn tool_names(body: &[u8]) -> Vec<String> {
    let body: Value = serde_json::from_slice(body).unwrap();
    body["tools"]
        .as_array()
        .map(|tools| {
            tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
        })
        .unwrap_or_default()
}

fn tools_json(body: &[u8]) -> Value {
    let body: Value = serde_json::from_slice(body).unwrap();
    body["tools"].clone()
}

fn results(env: &Env, session: &str) -> Vec<(String, String, bool)> {
    env.events(session)
        .into_iter()
        .filter_map(|event| match event.data {
            EventData::ToolResult(result) => Some((result.name, result.content, result.is_error)),
            _ => None,
        })
        .collect()
}

const BUILT_IN: [&str; 10] = [
    "edit_file",
    "glob",
    "grep",
    "list_dir",
    "read_file",
    "run_command",
    // The sub-agent tool: offered to every top-level session (docs/subagents.md).
    "task",
    "update_plan",
    "web_fetch",
    "write_file",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_join_the_request_sorted_and_namespaced_and_calls_are_logged() {
    if !installed("mcp_tools_join_the_request_sorted_and_namespaced_and_calls_are_logged") {
        return;
    }
    let env = Env::new().await;
    std::fs::write(env.workspace.join("notes.txt"), "hello from the workspace\n").unwrap();
    let config = format!(
        "{}{}{}",
        fixture("fx", "tools", ""),
        everything("every"),
        filesystem("files", &env.workspace)
    );
    std::fs::write(env.user_config(), config).unwrap();
    env.script(json!([
        { "reasoning": "Use the servers.", "tool_calls": [
            { "name": "fx__echo", "arguments": "{\"text\":\"hi\"}" },
            { "name": "every__echo", "arguments": "{\"message\":\"from everything\"}" },
            { "name": "files__read_text_file",
              "arguments": format!("{{\"path\":{:?}}}", env.workspace.join("notes.txt").display().to_string()) },
            { "name": "fx__fail", "arguments": "{}" },
            { "name": "fx__image", "arguments": "{}" },
            { "name": "fx__env", "arguments": "{}" },
        ] },
        { "reasoning": "Done.", "content": "All called." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Call the MCP tools").await;
    assert!(output.status.success(), "{}", describe(&output));
    let requests = env.wait_for_requests(2).await;

    // One list sorted by name: the built-in tools and every MCP tool, namespaced.
    let names = tool_names(&requests[0].body);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    for built_in in BUILT_IN {
        assert!(names.iter().any(|n| n == built_in), "{built_in} missing from {names:?}");
    }
    let external: Vec<&String> = names.iter().filter(|n| !BUILT_IN.contains(&n.as_str())).collect();
    for expected in ["every__echo", "files__read_text_file", "fx__echo", "fx__grow"] {
        assert!(external.iter().any(|n| *n == expected), "{expected} missing from {external:?}");
    }
    assert!(external.iter().all(|n| n.len() <= 64 && n.contains("__")), "{external:?}");
    // The fixture's schema came with its keys out of order: the request has them sorted.
    let tools = tools_json(&requests[0].body);
    let echo = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "fx__echo")
        .unwrap()
        .clone();
    let text = serde_json::to_string(&echo["function"]["parameters"]).unwrap();
    assert_eq!(
        text,
        r#"{"properties":{"text":{"type":"string"}},"required":["text"],"type":"object"}"#
    );
    assert_eq!(echo["function"]["description"], "Echoes its text back.");

    // Every call answered and logged as the server said.
    let results = results(&env, &session);
    let find = |name: &str| results.iter().find(|r| r.0 == name).cloned().unwrap();
    assert_eq!(find("fx__echo"), ("fx__echo".into(), "echo: hi".into(), false));
    assert!(find("every__echo").1.contains("from everything"), "{results:?}");
    assert!(!find("every__echo").2);
    assert!(find("files__read_text_file").1.contains("hello from the workspace"), "{results:?}");
    assert_eq!(find("fx__fail"), ("fx__fail".into(), "it failed".into(), true));
    assert!(find("fx__image").1.contains("[image image/png"), "{results:?}");
    // The server's environment is the explicit one: its `env`, not the daemon's variables.
    assert_eq!(find("fx__env").1, "secret visible: False; FIXTURE_GIVEN=given");

    // What the model saw is what the mock received, and the log audits clean.
    for (step, request) in requests.iter().enumerate() {
        let saw = env.saw_wire(&session, step as u64 + 1).await;
        assert_eq!(saw, request.body, "dsh saw --wire differs at step {}", step + 1);
    }
    env.assert_audit_ok(&session).await;

    // `dsh mcp` lists the servers and their tools.
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let listed = env.dsh_ok(&["mcp", "--workspace", &workspace]).await;
    let listed = stdout(&listed);
    assert!(listed.contains("fx (stdio) running"), "{listed}");
    assert!(listed.contains("fx__echo  Echoes its text back."), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tool_list_is_one_header_delta_naming_the_server() {
    if !installed("a_changed_tool_list_is_one_header_delta_naming_the_server") {
        return;
    }
    let env = env_with(&fixture("fx", "tools", "")).await;
    env.script(json!([
        { "reasoning": "Grow.", "tool_calls": [{ "name": "fx__grow", "arguments": "{}" }] },
        { "reasoning": "Use it.", "tool_calls": [{ "name": "fx__extra", "arguments": "{}" }] },
        { "reasoning": "Done.", "content": "Grown." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Grow the tools").await;
    assert!(output.status.success(), "{}", describe(&output));
    let requests = env.wait_for_requests(3).await;
    assert!(!tool_names(&requests[0].body).contains(&"fx__extra".to_owned()));
    assert!(tool_names(&requests[1].body).contains(&"fx__extra".to_owned()));

    // Exactly one header change after the first snapshot: a delta, attributed to `fx`.
    let events = env.events(&session);
    let deltas: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::RequestHeaderDelta(delta) => Some(delta.clone()),
            _ => None,
        })
        .collect();
    let snapshots = events.iter().filter(|e| matches!(e.data, EventData::RequestHeader(_))).count();
    assert_eq!((deltas.len(), snapshots), (1, 1), "{deltas:?}");
    let added = &deltas[0].tools.as_ref().unwrap().added;
    assert!(added.iter().any(|tool| tool.name == "fx__extra"), "{added:?}");
    assert_eq!(results(&env, &session)[1].1, "extra ran");
    let usage = env.dsh_json(&["usage", &session]).await;
    let text = usage.to_string();
    assert!(text.contains(r#""servers":["fx"]"#), "{text}");
    let plain = stdout(&env.dsh_ok(&["usage", &session]).await);
    assert!(plain.contains("(MCP server fx)"), "{plain}");

    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_set_of_servers_resumes_byte_identical_after_a_daemon_restart() {
    if !installed("an_unchanged_set_of_servers_resumes_byte_identical_after_a_daemon_restart") {
        return;
    }
    let starts = tempfile::NamedTempFile::new().unwrap();
    let starts_env = format!("FIXTURE_STARTS = {:?}", starts.path().display().to_string());
    let config =
        format!("{}{}", fixture_with_env("fx", "tools", &starts_env, ""), everything("every"));
    let env = env_with(&config).await;
    env.script(json!([{ "reasoning": "Hi.", "content": "Hello." }])).await;
    let (session, output) = env.prompt_new("Hello").await;
    assert!(output.status.success(), "{}", describe(&output));
    env.dsh_ok(&["shutdown"]).await;
    // The daemon's shutdown stopped the server: its process is gone.
    let pids = std::fs::read_to_string(starts.path()).unwrap();
    assert_eq!(pids.lines().count(), 1, "{pids}");
    for pid in pids.lines() {
        crate::support::wait_gone(pid.parse().unwrap()).await;
    }
    env.script(json!([{ "reasoning": "Again.", "content": "Hello again." }])).await;
    let output = env.prompt_in(&session, "Again").await;
    assert!(output.status.success(), "{}", describe(&output));
    let requests = env.wait_for_requests(2).await;
    assert_eq!(tools_json(&requests[0].body), tools_json(&requests[1].body));
    // The second request extends the first byte for byte up to the first's messages.
    let first: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let second: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let first_messages = first["messages"].as_array().unwrap();
    assert_eq!(
        &second["messages"].as_array().unwrap()[..first_messages.len()],
        &first_messages[..]
    );
    // The provider's cache carried over: the resumed step's hit did not drop.
    let rows = env.dsh_json(&["usage", &session]).await;
    let second_row = &rows["rows"][1];
    assert_eq!(second_row["dropped"], false, "{rows}");
    // The whole first prompt is a prefix of the second: the hit is at least the theoretical
    // maximum (the first prompt) less one granule of the mock's block cache (64 tokens).
    let first_prompt = rows["rows"][0]["usage"]["promptTokens"].as_u64().unwrap();
    let hit = second_row["usage"]["cacheHitTokens"].as_u64().unwrap();
    assert!(hit + 64 >= first_prompt, "hit {hit} of a {first_prompt}-token prefix: {rows}");
    // The resume snapshot records no change.
    let usage = env.dsh_json(&["usage", &session]).await.to_string();
    assert!(
        usage.contains(r#""kind":"resume","seq""#) && usage.contains(r#""changed":false"#),
        "{usage}"
    );
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_started_in_either_order_give_the_same_header_bytes() {
    if !installed("two_servers_started_in_either_order_give_the_same_header_bytes") {
        return;
    }
    let mut headers = Vec::new();
    // The fixture is slow to start in the first run and the everything server in the second
    // (a wrapper that sleeps first), so they come up in opposite orders.
    for slow in ["fx", "every"] {
        let env = Env::new().await;
        let sleep = |name: &str| if name == slow { "1.5" } else { "0" };
        let everything_bin = mcp_dir().join("node_modules/.bin/mcp-server-everything");
        let config = format!(
            "{}[mcp.servers.every]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep {} && exec {} stdio\"]\n\
             [mcp.servers.fx]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep {} && exec python3 {} tools\"]\n\
             env = {{ PYTHONPATH = {:?} }}\n",
            "",
            sleep("every"),
            everything_bin.display(),
            sleep("fx"),
            mcp_dir().join("fixture.py").display(),
            mcp_dir().join(".deps/py").display().to_string(),
        );
        std::fs::write(env.user_config(), config).unwrap();
        env.script(json!([{ "reasoning": "Hi.", "content": "Hello." }])).await;
        let (_, output) = env.prompt_new("Hello").await;
        assert!(output.status.success(), "{}", describe(&output));
        let requests = env.wait_for_requests(1).await;
        let names = tool_names(&requests[0].body);
        assert!(
            names.iter().any(|n| n.starts_with("every__"))
                && names.iter().any(|n| n.starts_with("fx__")),
            "{names:?}"
        );
        headers.push(serde_json::to_vec(&tools_json(&requests[0].body)).unwrap());
    }
    assert_eq!(headers[0], headers[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_answers_with_an_error_and_is_restarted() {
    if !installed("a_server_that_dies_mid_call_answers_with_an_error_and_is_restarted") {
        return;
    }
    let starts = tempfile::NamedTempFile::new().unwrap();
    let starts_env = format!("FIXTURE_STARTS = {:?}", starts.path().display().to_string());
    let config = fixture_with_env("fx", "tools", &starts_env, "");
    let env = env_with(&config).await;
    env.script(json!([
        { "reasoning": "Crash it.", "tool_calls": [{ "name": "fx__die", "arguments": "{}" }] },
        { "reasoning": "Done.", "content": "It died." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Crash the server").await;
    assert!(output.status.success(), "{}", describe(&output));
    let results = results(&env, &session);
    assert_eq!(results.len(), 1);
    assert!(results[0].2, "{results:?}");
    assert!(results[0].1.contains("MCP server `fx`"), "{results:?}");
    // The second request no longer offers the dead server's tools (unless it already came
    // back): either way the header change is logged and audits clean.
    env.assert_audit_ok(&session).await;
    // Restarted with backoff: a second start shows in its start count and in the file.
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    loop {
        let listed = env.dsh_json(&["mcp", "--workspace", &workspace]).await;
        let server = &listed["servers"][0];
        if server["starts"].as_u64().unwrap_or(0) >= 2 && server["state"] == "running" {
            assert!(server["lastError"].as_str().is_some(), "{server}");
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "fx was not restarted: {server}\n{results:?}\n{}",
            env.daemon_log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let lines = std::fs::read_to_string(starts.path()).unwrap();
    assert!(lines.lines().count() >= 2, "{lines}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_servers_are_contained_and_the_session_goes_on() {
    if !installed("bad_servers_are_contained_and_the_session_goes_on") {
        return;
    }
    let cancelled = tempfile::NamedTempFile::new().unwrap();
    let cancelled_env = format!("FIXTURE_CANCELLED = {:?}", cancelled.path().display().to_string());
    let config = format!(
        "{}{}{}{}{}",
        fixture("garbage", "garbage", ""),
        fixture("hang", "hang", "startup_timeout_secs = 2"),
        fixture("schema", "badschema", ""),
        fixture("names", "badname", ""),
        fixture_with_env("fx", "tools", &cancelled_env, "call_timeout_secs = 2"),
    );
    let env = env_with(&config).await;
    env.script(json!([
        { "reasoning": "Big and slow.", "tool_calls": [
            { "name": "fx__big", "arguments": "{}" },
            { "name": "fx__slow", "arguments": "{}" },
        ] },
        { "reasoning": "Done.", "content": "Survived." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Use the bad servers").await;
    assert!(output.status.success(), "{}", describe(&output));
    let requests = env.wait_for_requests(2).await;
    let names = tool_names(&requests[0].body);
    assert!(names.contains(&"names__fine".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("garbage__")
            || n.starts_with("hang__")
            || n.starts_with("schema__")),
        "{names:?}"
    );
    let results = results(&env, &session);
    let big = &results[0];
    assert!(
        big.1.len() < 300 * 1024 && big.1.contains("[result cut: 10485760 bytes"),
        "{}",
        &big.1[big.1.len() - 200..]
    );
    let slow = &results[1];
    assert!(slow.2 && slow.1.contains("did not answer within 2s"), "{slow:?}");
    // The server was told: its handler saw the cancellation.
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(cancelled.path()).unwrap().contains("slow cancelled") {
        assert!(started.elapsed() < DEADLINE, "the server never heard of the cancellation");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    env.assert_audit_ok(&session).await;

    let workspace = env.workspace.to_str().unwrap().to_owned();
    let listed = env.dsh_json(&["mcp", "--workspace", &workspace]).await;
    let server = |name: &str| {
        listed["servers"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap().clone()
    };
    for name in ["garbage", "hang", "schema"] {
        let state = server(name);
        assert!(state["state"] != "running", "{state}");
    }
    assert!(
        server("hang")["lastError"].as_str().unwrap_or("").contains("did not start within 2s")
            || server("hang")["state"] == "starting",
        "{}",
        server("hang")
    );
    assert!(
        server("schema")["lastError"].as_str().unwrap_or("").contains("tools/list"),
        "{}",
        server("schema")
    );
    let refused = server("names")["refused"].to_string();
    assert!(refused.contains("has space"), "{refused}");
    // The daemon is still up and answers.
    let status = env.dsh_json(&["status"]).await;
    assert!(status["mcpServers"].as_array().unwrap().len() >= 5, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_asks_for_approval_naming_the_server_and_the_answer_is_logged() {
    if !installed("an_mcp_call_asks_for_approval_naming_the_server_and_the_answer_is_logged") {
        return;
    }
    // `fx` asks (the default); `[approvals]` lets one of its tools run outright.
    let config = format!("{}[approvals]\nfx__env = \"auto\"\n", fixture("fx", "tools", ""));
    let env = env_with(&config).await;
    env.script(json!([
        { "reasoning": "Echo.", "tool_calls": [
            { "name": "fx__env", "arguments": "{}" },
            { "name": "fx__echo", "arguments": "{\"text\": \"approved\"}" },
            { "name": "fx__echo", "arguments": "{\"text\": \"refused\"}" },
        ] },
        { "reasoning": "Done.", "content": "Echoed." },
    ]))
    .await;
    let served = env.serve(&[]).await;
    let notices = env.client().await;
    notices.ok("daemon/subscribe", json!({})).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let created = conn.ok("session/create", json!({"workspace": workspace})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    let sub = conn.subscribe(&session, None).await;
    let prompt_conn = std::sync::Arc::clone(&conn);
    let params = json!({"sessionId": session, "text": "Echo twice"});
    let turn = tokio::spawn(async move { prompt_conn.request("session/prompt", params).await });
    for decision in ["allow", "deny"] {
        let asked = conn
            .wait_event(&sub, "approval/request", |e| {
                e["data"]["summary"].as_str().is_some_and(|s| {
                    s.contains(if decision == "allow" { "approved" } else { "refused" })
                })
            })
            .await;
        assert_eq!(asked["data"]["tool"], "fx__echo", "{asked}");
        let summary = asked["data"]["summary"].as_str().unwrap();
        assert!(summary.starts_with("MCP server fx: echo "), "{summary}");
        conn.ok(
            "approval/respond",
            json!({"sessionId": session, "approvalId": asked["data"]["approvalId"], "decision": decision}),
        )
        .await;
    }
    let answer = turn.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "completed", "{answer}");
    // The first step waited for the server to start, and said so.
    let waiting: Vec<_> = notices
        .other()
        .into_iter()
        .filter(|n| n["method"] == "daemon/notice" && n["params"]["result"]["kind"] == "mcpWaiting")
        .collect();
    assert!(!waiting.is_empty(), "{:?}", notices.other());
    let message = waiting[0]["params"]["result"]["message"].as_str().unwrap();
    assert!(message.starts_with("waiting for MCP server `fx`"), "{message}");
    let results = results(&env, &session);
    assert_eq!(results[0].0, "fx__env");
    assert!(!results[0].2, "{results:?}");
    assert_eq!(results[1], ("fx__echo".into(), "echo: approved".into(), false));
    assert!(results[2].2 && results[2].1.contains("denied"), "{results:?}");
    // Exactly two approvals were asked (the `auto` tool ran without one).
    let asked = env
        .events(&session)
        .iter()
        .filter(|e| matches!(e.data, EventData::ApprovalRequest(_)))
        .count();
    assert_eq!(asked, 2);
    env.assert_audit_ok(&session).await;
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_serves_tools_and_calls() {
    if !installed("a_streamable_http_server_serves_tools_and_calls") {
        return;
    }
    // server-everything in its streamable-HTTP mode, on a free loopback port.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let index =
        mcp_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mut server = tokio::process::Command::new("node")
        .arg(&index)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(started.elapsed() < DEADLINE, "server-everything did not listen on {port}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let config = format!(
        "[mcp.servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
         headers = {{ X-Dsh-Test = \"a header value\" }}\n"
    );
    let env = env_with(&config).await;
    env.script(json!([
        { "reasoning": "Echo.", "tool_calls": [
            { "name": "web__echo", "arguments": "{\"message\":\"over HTTP\"}" },
        ] },
        { "reasoning": "Done.", "content": "Echoed." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Echo over HTTP").await;
    assert!(output.status.success(), "{}", describe(&output));
    let requests = env.wait_for_requests(2).await;
    assert!(tool_names(&requests[0].body).contains(&"web__echo".to_owned()));
    let results = results(&env, &session);
    assert!(results[0].1.contains("over HTTP") && !results[0].2, "{results:?}");
    env.assert_audit_ok(&session).await;
    let listed = env.dsh_json(&["mcp", "--workspace", env.workspace.to_str().unwrap()]).await;
    assert_eq!(listed["servers"][0]["transport"], "http", "{listed}");
    let _ = server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_stop_when_no_session_of_the_workspace_is_loaded_and_start_again_on_demand() {
    if !installed("servers_stop_when_no_session_of_the_workspace_is_loaded") {
        return;
    }
    let starts = tempfile::NamedTempFile::new().unwrap();
    let starts_env = format!("FIXTURE_STARTS = {:?}", starts.path().display().to_string());
    let env = env_with(&fixture_with_env("fx", "tools", &starts_env, "")).await;
    // Sessions idle for 0.3 s are unloaded.
    let served = env.serve(&["--unload-after", "0.005"]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let created = conn.ok("session/create", json!({"workspace": workspace})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    // Created but never asked for tools: nothing started.
    let listed = conn.ok("mcp/list", json!({})).await;
    assert_eq!(listed["servers"], json!([]), "{listed}");
    conn.ok("session/prompt", json!({"sessionId": session, "text": "first"})).await;
    let pids = std::fs::read_to_string(starts.path()).unwrap();
    assert_eq!(pids.lines().count(), 1, "{pids}");
    // Unloaded with its session: the server's process is gone and nothing is listed.
    crate::support::wait_gone(pids.trim().parse().unwrap()).await;
    let started = std::time::Instant::now();
    loop {
        let listed = conn.ok("mcp/list", json!({})).await;
        if listed["servers"] == json!([]) {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "still listed: {listed}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The next prompt reloads the session and starts the server again.
    conn.ok("session/prompt", json!({"sessionId": session, "text": "second"})).await;
    let pids = std::fs::read_to_string(starts.path()).unwrap();
    assert_eq!(pids.lines().count(), 2, "{pids}");
    env.assert_audit_ok(&session).await;
    served.shutdown().await;
}

/// A `session/mcpServers` entry for the Python fixture in `mode`, with more of its environment.
fn own_fixture(name: &str, mode: &str, env: Value) -> Value {
    let dir = mcp_dir();
    let mut environment = json!({"PYTHONPATH": dir.join(".deps/py").display().to_string()});
    for (key, value) in env.as_object().unwrap() {
        environment[key] = value.clone();
    }
    json!({
        "name": name,
        "command": "python3",
        "args": [dir.join("fixture.py").display().to_string(), mode],
        "env": environment,
    })
}

/// The pids the fixture wrote to its `FIXTURE_STARTS` file, in start order.
fn started_pids(path: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| line.trim().parse().unwrap())
        .collect()
}

fn mcp_waits(env: &Env, session: &str) -> Vec<(u64, Value)> {
    env.log_values(session)
        .into_iter()
        .filter(|event| event["type"] == "mcp/wait")
        .map(|event| (event["seq"].as_u64().unwrap(), event["data"].clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_own_servers_are_its_alone_keep_their_env_secret_and_stop_at_unload() {
    if !installed("a_sessions_own_servers_are_its_alone_keep_their_env_secret_and_stop_at_unload") {
        return;
    }
    const SECRET: &str = "own-token-5f1c9e-never-shown";
    let starts = tempfile::NamedTempFile::new().unwrap();
    let own = own_fixture(
        "own",
        "tools",
        // Slow to start, so the first step surely finds it starting (it starts when given).
        json!({
            "OWN_TOKEN": SECRET,
            "FIXTURE_STARTS": starts.path().display().to_string(),
            "FIXTURE_START_DELAY": "2",
        }),
    );
    // `shared` is configured for the workspace; `own` is the first session's alone.
    let env = env_with(&fixture("shared", "tools", "")).await;
    env.script(json!([
        { "reasoning": "Echo.", "tool_calls": [
            { "name": "own__echo", "arguments": "{\"text\": \"mine\"}" },
        ] },
        { "reasoning": "Done.", "content": "Echoed." },
        { "reasoning": "B.", "content": "The other session." },
        { "reasoning": "Again.", "content": "Without it." },
    ]))
    .await;
    // Tracing everything: the request's params (the server's `env`) still never reach the log.
    let served = env
        .serve_with(&["--unload-after", "0.005"], |command| {
            command.env("DSH_LOG", "trace");
        })
        .await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    // Servers given with `session/create` are checked first: refused, nothing is created.
    let mut clashing = own.clone();
    clashing["name"] = json!("shared");
    let message = conn
        .err("session/create", json!({"workspace": workspace, "mcpServers": [clashing]}), -32602)
        .await;
    assert!(message.contains("collides with the server `shared` configured"), "{message}");
    assert!(!message.contains(SECRET), "{message}");
    let listed = conn.ok("session/list", json!({"workspace": workspace})).await;
    assert_eq!(listed["sessions"], json!([]), "a refused create left {listed}");
    let created = conn.ok("session/create", json!({"workspace": workspace})).await;
    let a = created["sessionId"].as_str().unwrap().to_owned();
    // Held by a subscription: not unloaded while the test works with it.
    let sub = conn.subscribe(&a, None).await;
    let given =
        conn.ok("session/mcpServers", json!({"sessionId": a, "servers": [own.clone()]})).await;
    assert_eq!(given["servers"][0]["name"], "own", "{given}");
    assert_eq!(given["servers"][0]["session"], a.as_str(), "{given}");
    assert!(!given.to_string().contains(SECRET), "{given}");

    // Refused as a whole, with a clear error, changing nothing.
    let mut colliding = own.clone();
    colliding["name"] = json!("shared");
    let message = conn
        .err("session/mcpServers", json!({"sessionId": a, "servers": [colliding]}), -32602)
        .await;
    assert!(
        message.contains("`shared` from the session collides with the server `shared` configured"),
        "{message}"
    );
    let mut badly_named = own.clone();
    badly_named["name"] = json!("my server");
    let message = conn
        .err("session/mcpServers", json!({"sessionId": a, "servers": [badly_named]}), -32602)
        .await;
    assert!(message.contains("mcp server name `my server` is not allowed"), "{message}");
    let mut both = own.clone();
    both["url"] = json!("http://127.0.0.1:1/mcp");
    let message =
        conn.err("session/mcpServers", json!({"sessionId": a, "servers": [both]}), -32602).await;
    assert!(message.contains("either `command` (stdio) or `url`"), "{message}");
    assert!(!message.contains(SECRET));
    let many: Vec<serde_json::Value> = (0..65)
        .map(|n| {
            let mut server = own.clone();
            server["name"] = json!(format!("s{n}"));
            server
        })
        .collect();
    let message =
        conn.err("session/mcpServers", json!({"sessionId": a, "servers": many}), -32602).await;
    assert!(message.contains("65 MCP servers given for one session; at most 64"), "{message}");

    // A turn of the session calls its server's tool: asked for, like any MCP tool.
    let prompt_conn = std::sync::Arc::clone(&conn);
    let params = json!({"sessionId": a, "text": "Echo"});
    let turn = tokio::spawn(async move { prompt_conn.request("session/prompt", params).await });
    let asked = conn.wait_event(&sub, "approval/request", |_| true).await;
    assert_eq!(asked["data"]["tool"], "own__echo", "{asked}");
    assert!(asked["data"]["summary"].as_str().unwrap().starts_with("MCP server own: echo"));
    conn.ok(
        "approval/respond",
        json!({"sessionId": a, "approvalId": asked["data"]["approvalId"], "decision": "allow"}),
    )
    .await;
    let answer = turn.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "completed", "{answer}");
    let requests = env.wait_for_requests(2).await;
    let names = tool_names(&requests[0].body);
    assert!(names.contains(&"own__echo".to_owned()) && names.contains(&"shared__echo".to_owned()));
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(results(&env, &a)[0], ("own__echo".into(), "echo: mine".into(), false));
    // The first step waited for both servers' first start, and said so once.
    let waits = mcp_waits(&env, &a);
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].1, json!({"servers": ["own", "shared"], "reason": "starting"}));

    // Another session of the workspace: the configured server, not the first one's own.
    let created = conn.ok("session/create", json!({"workspace": workspace})).await;
    let b = created["sessionId"].as_str().unwrap().to_owned();
    conn.ok("session/prompt", json!({"sessionId": b, "text": "Hello"})).await;
    let requests = env.wait_for_requests(3).await;
    let names = tool_names(&requests[2].body);
    assert!(names.contains(&"shared__echo".to_owned()), "{names:?}");
    assert!(!names.iter().any(|name| name.starts_with("own__")), "{names:?}");

    // Listed with its session; its environment nowhere.
    let listed = conn.ok("mcp/list", json!({"workspace": workspace})).await;
    let servers = listed["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2, "{listed}");
    assert_eq!(servers[0]["name"], "shared");
    assert!(servers[0].get("session").is_none(), "{listed}");
    assert_eq!((&servers[1]["name"], &servers[1]["session"]), (&json!("own"), &json!(a)));
    assert_eq!(servers[1]["state"], "running", "{listed}");
    let status = conn.ok("daemon/status", json!({})).await;
    assert!(status["mcpServers"].as_array().unwrap().iter().any(|s| s["session"] == a.as_str()));
    let text = env.dsh_ok(&["mcp", "--workspace", &workspace]).await;
    assert!(
        stdout(&text).contains(&format!("own (stdio, session {a}) running")),
        "{}",
        stdout(&text)
    );
    for shown in [listed.to_string(), status.to_string(), stdout(&text)] {
        assert!(!shown.contains(SECRET));
    }

    // Replaced by none: stopped at once, and the next request drops its tools in exactly one
    // logged delta.
    let first = started_pids(starts.path());
    assert_eq!(first.len(), 1, "{first:?}");
    let given = conn.ok("session/mcpServers", json!({"sessionId": a, "servers": []})).await;
    assert_eq!(given["servers"], json!([]), "{given}");
    crate::support::wait_gone(first[0]).await;
    conn.ok("session/prompt", json!({"sessionId": a, "text": "Again"})).await;
    let deltas: Vec<_> = env
        .events(&a)
        .into_iter()
        .filter_map(|event| match event.data {
            EventData::RequestHeaderDelta(delta) => Some((event.seq, delta)),
            _ => None,
        })
        .collect();
    assert_eq!(deltas.len(), 1, "{deltas:?}");
    let delta = serde_json::to_string(&deltas[0].1).unwrap();
    assert!(delta.contains("own__echo") && !delta.contains("shared__"), "{delta}");
    assert_eq!(mcp_waits(&env, &a).len(), 1, "nothing new to wait for");

    // Given again, then the session unloads (its subscription ends): the server is stopped.
    conn.ok("session/mcpServers", json!({"sessionId": a, "servers": [own]})).await;
    let started = std::time::Instant::now();
    while started_pids(starts.path()).len() < 2 {
        assert!(started.elapsed() < DEADLINE, "the server was not started again");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let second = started_pids(starts.path())[1];
    let unsubscribe = json!([serde_json::from_str::<Value>(&sub).unwrap()]);
    conn.ok("session/unsubscribe", unsubscribe).await;
    crate::support::wait_gone(second).await;
    let started = std::time::Instant::now();
    loop {
        let listed = conn.ok("mcp/list", json!({})).await;
        if !listed.to_string().contains(&a) {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "still listed: {listed}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // The environment's value is in no log, and not in the daemon's.
    for (path, bytes) in env.log_files() {
        assert!(!String::from_utf8_lossy(&bytes).contains(SECRET), "{}", path.display());
    }
    let daemon_log = env.daemon_log();
    assert!(daemon_log.contains("TRACE"), "the daemon traced");
    assert!(!daemon_log.contains(SECRET));
    env.assert_audit_ok(&a).await;
    env.assert_audit_ok(&b).await;
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_waiting_for_a_slow_server_logs_one_mcp_wait() {
    if !installed("a_step_waiting_for_a_slow_server_logs_one_mcp_wait") {
        return;
    }
    let config = format!(
        "{}[approvals]\nfx__echo = \"auto\"\nfx__grow = \"auto\"\n",
        fixture_with_env(
            "fx",
            "tools",
            "FIXTURE_START_DELAY = \"1.5\", FIXTURE_LIST_DELAY = \"1.5\"",
            ""
        )
    );
    let env = env_with(&config).await;
    env.script(json!([
        { "reasoning": "Echo.", "tool_calls": [{ "name": "fx__echo", "arguments": "{\"text\":\"a\"}" }] },
        { "reasoning": "Done.", "content": "Echoed." },
        { "reasoning": "Grow.", "tool_calls": [{ "name": "fx__grow", "arguments": "{}" }] },
        { "reasoning": "Done.", "content": "Grown." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Echo").await;
    assert!(output.status.success(), "{}", describe(&output));
    // The slow start was waited for: its tools are in the first request, and the wait is
    // logged once, inside the turn, before the first step.
    let requests = env.wait_for_requests(2).await;
    assert!(tool_names(&requests[0].body).contains(&"fx__echo".to_owned()));
    let waits = mcp_waits(&env, &session);
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].1, json!({"servers": ["fx"], "reason": "starting"}));
    let values = env.log_values(&session);
    let seq_of = |kind: &str| {
        values.iter().find(|e| e["type"] == kind).map(|e| e["seq"].as_u64().unwrap()).unwrap()
    };
    assert!(seq_of("turn/start") < waits[0].0 && waits[0].0 < seq_of("step/start"));
    // A turn with a running server waits for nothing until the server says its tools changed:
    // then the next step waits for the (slow) new list, and says why.
    let output = env.prompt_in(&session, "Grow").await;
    assert!(output.status.success(), "{}", describe(&output));
    let waits = mcp_waits(&env, &session);
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert_eq!(waits[1].1, json!({"servers": ["fx"], "reason": "toolsChanged"}));
    let requests = env.wait_for_requests(4).await;
    assert!(tool_names(&requests[3].body).contains(&"fx__extra".to_owned()));
    // Not model-visible: what the model saw is what the mock received, and the log audits.
    for (step, request) in requests.iter().enumerate() {
        let saw = env.saw_wire(&session, step as u64 + 1).await;
        assert_eq!(saw, request.body, "dsh saw --wire differs at step {}", step + 1);
    }
    env.assert_audit_ok(&session).await;
}

//! `dsh` on a provider profile of kind `anthropic`: a coding turn with thinking and tools
//! against the mock's `/v1/messages` (every step rebuilt byte for byte, signatures replayed,
//! cache reads from the second request on), DeepSeek's `/anthropic` endpoint without markers,
//! a DeepSeek session forked onto the Messages format, and the real llama.cpp server's
//! `/v1/messages` behind the recording proxy.

use std::process::Output;

use serde_json::{Value, json};

use crate::support::llama::{LlamaServer, RecordingProxy};
use crate::support::{Env, describe, of_kind, run, session_id_of, stdout, tool_reply, write};

/// A user configuration whose default profile speaks Anthropic Messages at `base_url`.
fn anthropic_profile(base_url: &str, model: &str, extra: &str) -> String {
    format!(
        r#"profile = "claude"

[providers.claude]
kind = "anthropic"
base_url = "{base_url}"
api_key_env = "DEEPSEEK_API_KEY"
model = "{model}"
{extra}
[providers.claude.models.{model}]
context_window = 1048576
max_output = 8192
thinking = true
price = {{ cache_hit = 0.3, cache_miss = 3, output = 15, cache_write = 3.75, currency = "USD" }}
"#
    )
}

/// `dsh ARGS…` without `--base-url` (the configuration decides), which must succeed.
async fn dsh(env: &Env, args: &[&str]) -> Output {
    let output = run(env.command_plain(&env.key, args)).await;
    assert!(output.status.success(), "dsh {args:?}: {}", describe(&output));
    output
}

async fn saw_wire(env: &Env, session: &str, step: u64) -> Vec<u8> {
    let step = step.to_string();
    dsh(env, &["saw", session, "--step", &step, "--wire"]).await.stdout
}

fn assert_same_body(step: u64, rebuilt: &[u8], received: &[u8]) {
    assert!(
        rebuilt == received,
        "step {step}: `dsh saw --wire` differs from what the server received\nrebuilt:  {}\nreceived: {}",
        String::from_utf8_lossy(rebuilt),
        String::from_utf8_lossy(received)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coding_turn_on_anthropic_messages_is_rebuilt_byte_for_byte_and_reads_the_cache() {
    let env = Env::new().await;
    let profile = anthropic_profile(&env.mock.base_url(), "deepseek-v4-flash", "");
    std::fs::write(env.user_config(), profile).unwrap();
    write(&env.workspace, "src/greet.sh", "#!/bin/sh\necho \"Helo, $1!\"\n");
    env.script(json!([
        tool_reply("Read the script first.", "read_file", json!({ "path": "src/greet.sh" })),
        tool_reply(
            "It says Helo; replace it exactly once.",
            "edit_file",
            json!({ "path": "src/greet.sh", "old_string": "Helo", "new_string": "Hello" })
        ),
        tool_reply("Now run it.", "run_command", json!({ "command": "sh src/greet.sh dsh" })),
        { "reasoning": "It prints Hello, dsh!", "content": "Fixed; it prints Hello, dsh!." },
    ]))
    .await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let first =
        dsh(&env, &["prompt", "--yes", "--workspace", &workspace, "Fix the typo and run it."])
            .await;
    assert!(stdout(&first).contains("turn 1 ended: completed"), "{}", describe(&first));
    let session = session_id_of(&first);
    let script = std::fs::read_to_string(env.workspace.join("src/greet.sh")).unwrap();
    assert_eq!(script, "#!/bin/sh\necho \"Hello, $1!\"\n", "the tools really ran");
    // A second turn in a second process: its request resumes the same prefix.
    env.script(json!([{ "reasoning": "Nothing left.", "content": "Done already." }])).await;
    dsh(&env, &["prompt", "--yes", "--session", &session, "Anything else?"]).await;

    let requests = env.requests();
    assert_eq!(requests.len(), 5, "one request per step");
    for (index, request) in requests.iter().enumerate() {
        let step = index as u64 + 1;
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.outcome, "ok", "request {step} answered {}", request.status);
        assert_same_body(step, &saw_wire(&env, &session, step).await, &request.body);
        if index > 0 {
            assert!(request.hit > 0, "request {step} read nothing from the cache");
        }
    }
    // The signed thinking of the tool turns went back verbatim (the mock checks signatures),
    // and every request after the first read what the one before it marked.
    let last: Value = serde_json::from_slice(&requests[3].body).unwrap();
    let replayed = &last["messages"][1]["content"][0];
    assert_eq!(replayed["type"], "thinking");
    assert_eq!(replayed["thinking"], "Read the script first.");
    assert!(replayed["signature"].as_str().unwrap().starts_with("mock-sig-"));

    let events = env.events(&session);
    let sent = of_kind(&events, "request/sent");
    assert_eq!(sent.len(), 5);
    for event in sent {
        let dsh_session::EventData::RequestSent(sent) = &event.data else { unreachable!() };
        assert_eq!(sent.adapter, "anthropic-messages/v1");
    }
    let usage: Value =
        serde_json::from_slice(&dsh(&env, &["--json", "usage", &session]).await.stdout).unwrap();
    let rows = usage["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "{usage:#}");
    assert_eq!(rows[0]["usage"]["cacheHitTokens"], 0);
    assert!(rows[0]["usage"]["cacheWriteTokens"].as_u64().unwrap() > 0, "{usage:#}");
    for row in &rows[1..] {
        assert!(row["usage"]["cacheHitTokens"].as_u64().unwrap() > 0, "{row:#}");
    }
    // Cache writes are billed at their own price.
    let first = &rows[0]["usage"];
    let figure = |name: &str| first[name].as_f64().unwrap();
    let expected = (figure("cacheWriteTokens") * 3.75
        + (figure("cacheMissTokens") - figure("cacheWriteTokens")) * 3.0
        + figure("completionTokens") * 15.0)
        / 1e6;
    let billed = rows[0]["cost"]["amount"].as_f64().unwrap();
    assert!((billed - expected).abs() < 1e-12, "billed {billed}, expected {expected}: {usage:#}");
    let saw = dsh(&env, &["saw", &session, "--step", "2"]).await;
    assert!(stdout(&saw).contains("anthropic-messages/v1"), "{}", describe(&saw));
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deepseek_s_anthropic_endpoint_gets_no_markers_and_caches_by_prefix() {
    let env = Env::new().await;
    let base_url = format!("{}/anthropic", env.mock.base_url());
    let profile = anthropic_profile(&base_url, "deepseek-v4-flash", "cache_control = false\n");
    std::fs::write(env.user_config(), profile).unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let first = dsh(&env, &["prompt", "--yes", "--workspace", &workspace, "Hello there."]).await;
    let session = session_id_of(&first);
    dsh(&env, &["prompt", "--yes", "--session", &session, "And again."]).await;
    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(request.path, "/anthropic/v1/messages");
        let body = std::str::from_utf8(&request.body).unwrap();
        assert!(!body.contains("cache_control"), "{body}");
        assert_same_body(
            index as u64 + 1,
            &saw_wire(&env, &session, index as u64 + 1).await,
            &request.body,
        );
    }
    assert!(requests[1].hit > 0, "the second request reads the first's prefix");
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deepseek_session_forked_onto_messages_drops_unsigned_reasoning_and_audits_clean() {
    let env = Env::new().await;
    let config = anthropic_profile(&env.mock.base_url(), "deepseek-v4-flash", "").replace(
        "profile = \"claude\"\n",
        &format!(
            "profile = \"deepseek\"\n\n[providers.deepseek]\nbase_url = \"{}\"\n",
            env.mock.base_url()
        ),
    );
    std::fs::write(env.user_config(), config).unwrap();
    env.script(json!([{ "reasoning": "A greeting.", "content": "Hello!" }])).await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let first = dsh(&env, &["prompt", "--yes", "--workspace", &workspace, "Greet me."]).await;
    let session = session_id_of(&first);
    let forked = dsh(&env, &["--provider", "claude", "fork", &session]).await;
    let fork =
        String::from_utf8_lossy(&forked.stdout).trim().rsplit(' ').next().unwrap().to_owned();
    dsh(&env, &["prompt", "--yes", "--session", &fork, "Once more."]).await;
    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].path, "/v1/messages");
    let body = std::str::from_utf8(&requests[1].body).unwrap();
    // DeepSeek's reasoning carries no signature: it is not sent in the Messages format.
    assert!(!body.contains("A greeting."), "{body}");
    assert!(body.contains("Hello!"), "{body}");
    assert_same_body(2, &saw_wire(&env, &fork, 2).await, &requests[1].body);
    env.assert_audit_ok(&fork).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsh_on_llama_cpp_s_messages_endpoint_sends_what_it_logs_and_reads_the_cache() {
    let Some(llama) = LlamaServer::start().await else { return };
    let proxy = RecordingProxy::start(llama.base_url()).await;
    let env = Env::new().await;
    // SmolLM2 has no reasoning and a small window: thinking off, a short answer.
    let profile = anthropic_profile(proxy.base_url(), "smollm2", "")
        .replace("context_window = 1048576", "context_window = 8192")
        .replace("max_output = 8192", "max_output = 16")
        .replace("thinking = true", "thinking = false");
    std::fs::write(env.user_config(), profile).unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let first = dsh(&env, &["prompt", "--yes", "--workspace", &workspace, "Name a colour."]).await;
    let session = session_id_of(&first);
    dsh(&env, &["prompt", "--yes", "--session", &session, "Name another one."]).await;

    let received: Vec<Vec<u8>> = proxy
        .bodies()
        .into_iter()
        .filter(|(path, _)| path == "/v1/messages")
        .map(|(_, body)| body)
        .collect();
    assert_eq!(received.len(), 2, "one step per turn");
    for (index, body) in received.iter().enumerate() {
        let step = index as u64 + 1;
        assert_same_body(step, &saw_wire(&env, &session, step).await, body);
    }
    let usage: Value =
        serde_json::from_slice(&dsh(&env, &["--json", "usage", &session]).await.stdout).unwrap();
    let rows = usage["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{usage:#}");
    eprintln!("dsh on llama.cpp /v1/messages: {}", serde_json::to_string(rows).unwrap());
    let hits = |row: &Value| row["usage"]["cacheHitTokens"].as_u64().unwrap();
    let prompt = |row: &Value| row["usage"]["promptTokens"].as_u64().unwrap();
    assert!(hits(&rows[1]) > 0, "the second turn reads the first from the cache: {usage:#}");
    assert!(hits(&rows[1]) + 1 >= prompt(&rows[0]), "{usage:#}");
    assert_eq!(
        rows[1]["usage"]["cacheMissTokens"].as_u64().unwrap() + hits(&rows[1]),
        prompt(&rows[1])
    );
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_killed_mid_turn_on_anthropic_messages_resumes_on_the_cached_prefix() {
    let env = Env::new().await;
    let profile = anthropic_profile(&env.mock.base_url(), "deepseek-v4-flash", "");
    std::fs::write(env.user_config(), profile).unwrap();
    write(&env.workspace, "notes.txt", "the build uses make\n");
    env.script(json!([
        tool_reply("Read the notes.", "read_file", json!({ "path": "notes.txt" })),
        // Step 2 never answers in time: the daemon running the turn is killed while it waits.
        { "reasoning": "Thinking hard.", "content": "never seen", "delay_ms": 600_000 },
    ]))
    .await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let child = env
        .command_plain(
            &env.key,
            &["prompt", "--yes", "--workspace", &workspace, "How is it built?"],
        )
        .spawn()
        .unwrap();
    env.wait_for_requests(2).await;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &env.daemon_pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let client = crate::support::run_child(child).await;
    assert!(!client.status.success(), "the client sees its daemon die: {}", describe(&client));
    let session = session_id_of(&client);

    env.script(json!([{ "reasoning": "From the notes.", "content": "With make." }])).await;
    dsh(&env, &["prompt", "--yes", "--session", &session, "Go on."]).await;
    let requests = env.requests();
    assert_eq!(requests.len(), 3, "step 1, the killed step 2, the resumed step 3");
    assert_eq!(requests[2].outcome, "ok", "the resumed request is valid: {}", requests[2].status);
    // The tool result and the new prompt make one user turn after the signed tool turn.
    let body: Value = serde_json::from_slice(&requests[2].body).unwrap();
    let turns = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = turns.iter().map(|turn| turn["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{body}");
    assert_eq!(turns[1]["content"][0]["type"], "thinking");
    assert!(requests[2].hit > 0, "the resumed request reads the first one's breakpoint");
    assert_same_body(3, &saw_wire(&env, &session, 3).await, &requests[2].body);
    env.assert_audit_ok(&session).await;
}

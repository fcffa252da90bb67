//! The llama.cpp test peer and the recording proxy: prompt caching shows in the usage of both
//! wire formats llama.cpp speaks; the proxy records the exact bytes it forwarded and streams
//! answers through unbuffered; and `dsh` on an `openai-compatible` profile sends llama.cpp what
//! `dsh saw --wire` rebuilds from its log, and its second turn reads the first from the cache.

use std::process::Output;
use std::time::Instant;

use axum::body::Body;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::support::llama::{LlamaServer, RecordingProxy, http_client};
use crate::support::{DEADLINE, Env, assert_append_extension, describe, run, session_id_of};

/// What a streamed answer carried: its `data:` payloads, without `[DONE]`.
struct Streamed {
    events: Vec<Value>,
}

async fn post_streaming(url: String, body: &[u8]) -> Streamed {
    let client = http_client();
    let send =
        client.post(&url).header("content-type", "application/json").body(body.to_vec()).send();
    let response = tokio::time::timeout(DEADLINE, send).await.unwrap().unwrap();
    let status = response.status();
    let mut stream = response.bytes_stream();
    let mut text = Vec::new();
    while let Some(chunk) = tokio::time::timeout(DEADLINE, stream.next()).await.unwrap() {
        text.extend_from_slice(&chunk.unwrap());
    }
    let text = String::from_utf8(text).unwrap();
    assert_eq!(status, 200, "{url}: {text}");
    let events = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    Streamed { events }
}

/// The text of a streamed chat completion and its usage (from the final `choices: []` chunk).
fn chat_text_and_usage(streamed: &Streamed) -> (String, Value) {
    let mut text = String::new();
    let mut usage = None;
    for event in &streamed.events {
        for choice in event["choices"].as_array().unwrap() {
            text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
        }
        if !event["usage"].is_null() {
            assert_eq!(event["choices"], json!([]), "usage comes in a chunk of its own: {event}");
            usage = Some(event["usage"].clone());
        }
    }
    (text, usage.unwrap_or_else(|| panic!("no usage chunk in {:?}", streamed.events)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_reports_cached_prompt_tokens_and_the_proxy_records_exact_bodies() {
    let Some(llama) = LlamaServer::start().await else { return };
    let proxy = RecordingProxy::start(llama.base_url()).await;
    let chat = format!("{}/v1/chat/completions", proxy.base_url());

    let system = json!({ "role": "system", "content": "You are a terse assistant. Answer in one short sentence." });
    let first_user = json!({ "role": "user", "content": "Name a colour." });
    let options = |messages: Vec<Value>| {
        serde_json::to_vec(&json!({
            "model": "smollm2",
            "messages": messages,
            "stream": true,
            "stream_options": { "include_usage": true },
            "max_tokens": 8,
            "temperature": 0,
        }))
        .unwrap()
    };
    let body1 = options(vec![system.clone(), first_user.clone()]);
    let started = Instant::now();
    let (reply, usage1) = chat_text_and_usage(&post_streaming(chat.clone(), &body1).await);
    let first_took = started.elapsed();
    // A fresh server has nothing cached.
    assert_eq!(usage1["prompt_tokens_details"]["cached_tokens"], 0, "{usage1}");
    assert!(usage1["prompt_tokens"].as_u64().unwrap() > 0, "{usage1}");

    let body2 = options(vec![
        system,
        first_user,
        json!({ "role": "assistant", "content": reply }),
        json!({ "role": "user", "content": "Another one." }),
    ]);
    let started = Instant::now();
    let (_, usage2) = chat_text_and_usage(&post_streaming(chat, &body2).await);
    let second_took = started.elapsed();
    let cached = usage2["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    let prompt1 = usage1["prompt_tokens"].as_u64().unwrap();
    eprintln!(
        "llama.cpp chat completions: first {prompt1} prompt tokens in {first_took:?}; second {} \
         prompt tokens, {cached} cached, in {second_took:?}",
        usage2["prompt_tokens"]
    );
    // The second request extends the first, so at least the first prompt but its last token
    // (which llama.cpp always evaluates again) comes from the cache.
    assert!(cached > 0 && cached + 1 >= prompt1, "cached {cached} of a first prompt of {prompt1}");
    assert!(usage2["prompt_tokens"].as_u64().unwrap() > cached, "{usage2}");

    let path = "/v1/chat/completions".to_owned();
    assert!(
        proxy.bodies() == vec![(path.clone(), body1), (path, body2)],
        "the proxy did not record the bodies byte for byte"
    );

    // Anthropic's format, the same request again and again: usage sits in `message_start` —
    // when there is one: under load this llama.cpp build sometimes streams a message without it
    // (seen twice in about ten full runs; docs/providers.md). Up to four requests, until two of
    // them carried it.
    let messages = format!("{}/v1/messages", proxy.base_url());
    let body = serde_json::to_vec(&json!({
        "model": "smollm2",
        "max_tokens": 4,
        "stream": true,
        "system": "You answer in French, briefly.",
        "messages": [{ "role": "user", "content": "Greet me." }],
    }))
    .unwrap();
    let mut usages = Vec::new();
    let mut sent = 0;
    while usages.len() < 2 && sent < 4 {
        let streamed = post_streaming(messages.clone(), &body).await;
        sent += 1;
        let types: Vec<&str> =
            streamed.events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types.last(), Some(&"message_stop"), "{types:?}");
        if types.first() == Some(&"message_start") {
            usages.push((sent, streamed.events[0]["message"]["usage"].clone()));
        } else {
            eprintln!("llama.cpp streamed a message without `message_start`: {types:?}");
        }
    }
    assert_eq!(usages.len(), 2, "two of {sent} streams carried `message_start`");
    let ((first_sent, usage_a), (_, usage_b)) = (&usages[0], &usages[1]);
    eprintln!("llama.cpp messages: request {first_sent} {usage_a}, a later one {usage_b}");
    let read = |usage: &Value| usage["cache_read_input_tokens"].as_u64().unwrap();
    let fresh = |usage: &Value| usage["input_tokens"].as_u64().unwrap();
    // The first of them read less from the cache than a repeat, unless it was a repeat itself.
    if *first_sent == 1 {
        assert!(read(usage_b) > read(usage_a), "{usage_a} then {usage_b}");
    }
    assert!(read(usage_b) > 0, "a repeated prompt is read from the cache: {usage_b}");
    // `input_tokens` counts only what was not read from the cache.
    assert_eq!(read(usage_a) + fresh(usage_a), read(usage_b) + fresh(usage_b));
    assert_eq!(proxy.bodies().len(), 2 + sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recording_proxy_streams_chunks_as_they_arrive() {
    // An upstream that sends one event, then waits for the client to have seen it before it
    // sends the next: a proxy that buffered the answer would never deliver the first.
    let (seen_tx, seen_rx) = oneshot::channel::<()>();
    let seen_rx = std::sync::Arc::new(std::sync::Mutex::new(Some(seen_rx)));
    let upstream = axum::Router::new().fallback(move || {
        let seen = seen_rx.lock().unwrap().take();
        async move {
            let first = futures::stream::once(async { Ok::<_, std::io::Error>("data: first\n\n") });
            let second = futures::stream::once(async move {
                if let Some(seen) = seen {
                    let _ = seen.await;
                }
                Ok("data: second\n\n")
            });
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(first.chain(second)))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, upstream).await });

    let proxy = RecordingProxy::start(&upstream_url).await;
    let body = b"{\"exact\":  \"bytes\" }".to_vec();
    let send = http_client().post(format!("{}/v1/stream?x=1", proxy.base_url())).body(body.clone());
    let response = tokio::time::timeout(DEADLINE, send.send()).await;
    let response = response.expect("the proxy held back the answer's head").unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.bytes_stream();
    let mut received = Vec::new();
    while !received.ends_with(b"data: first\n\n") {
        let chunk = tokio::time::timeout(DEADLINE, stream.next()).await;
        let chunk = chunk.expect("the proxy held back the first event").unwrap().unwrap();
        received.extend_from_slice(&chunk);
    }
    seen_tx.send(()).unwrap();
    while let Some(chunk) = tokio::time::timeout(DEADLINE, stream.next()).await.unwrap() {
        received.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(String::from_utf8(received).unwrap(), "data: first\n\ndata: second\n\n");
    assert_eq!(proxy.bodies(), vec![("/v1/stream?x=1".to_owned(), body)]);
    server.abort();
}

/// `dsh ARGS…` without `--base-url` (the configuration decides), which must succeed.
async fn dsh(env: &Env, args: &[&str]) -> Output {
    let output = run(env.command_plain(&env.key, args)).await;
    assert!(output.status.success(), "dsh {args:?}: {}", describe(&output));
    output
}

/// A user configuration whose default profile is llama.cpp behind `base_url`, with a small
/// output limit so each step is quick.
fn local_profile(base_url: &str) -> String {
    format!(
        r#"profile = "local"

[providers.local]
kind = "openai-compatible"
base_url = "{base_url}/v1"
model = "smollm2"

[providers.local.models.smollm2]
context_window = 8192
max_output = 16
price = {{ cache_hit = 0, cache_miss = 0, output = 0, currency = "USD" }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsh_on_llama_cpp_sends_what_it_logs_and_its_second_turn_hits_the_cache() {
    let Some(llama) = LlamaServer::start().await else { return };
    let proxy = RecordingProxy::start(llama.base_url()).await;
    let env = Env::new().await;
    std::fs::write(env.user_config(), local_profile(proxy.base_url())).unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();

    let started = Instant::now();
    let first = dsh(&env, &["prompt", "--yes", "--workspace", &workspace, "Name a colour."]).await;
    let first_took = started.elapsed();
    let session = session_id_of(&first);
    let started = Instant::now();
    dsh(&env, &["prompt", "--yes", "--session", &session, "Name another one."]).await;
    eprintln!(
        "dsh on llama.cpp: first turn (daemon start included) {first_took:?}, second {:?}",
        started.elapsed()
    );

    let received: Vec<Vec<u8>> = proxy
        .bodies()
        .into_iter()
        .filter(|(path, _)| path == "/v1/chat/completions")
        .map(|(_, body)| body)
        .collect();
    assert_eq!(received.len(), 2, "one step per turn");
    for (index, body) in received.iter().enumerate() {
        let step = (index + 1).to_string();
        let rebuilt = dsh(&env, &["saw", &session, "--step", &step, "--wire"]).await.stdout;
        assert!(
            &rebuilt == body,
            "step {step}: `dsh saw --wire` differs from what llama.cpp received\nrebuilt:  {}\nreceived: {}",
            String::from_utf8_lossy(&rebuilt),
            String::from_utf8_lossy(body)
        );
    }
    assert_append_extension(&received[0], &received[1]);

    let usage = dsh(&env, &["--json", "usage", &session]).await;
    let usage: Value = serde_json::from_slice(&usage.stdout).unwrap();
    let rows = usage["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{usage:#}");
    eprintln!("dsh on llama.cpp: {}", serde_json::to_string(rows).unwrap());
    let hits = |row: &Value| row["usage"]["cacheHitTokens"].as_u64().unwrap();
    let prompt = |row: &Value| row["usage"]["promptTokens"].as_u64().unwrap();
    assert_eq!(hits(&rows[0]), 0, "a fresh server has nothing cached: {usage:#}");
    assert!(
        hits(&rows[1]) + 1 >= prompt(&rows[0]),
        "the second turn reads the whole first prompt from the cache: {usage:#}"
    );
    env.assert_audit_ok(&session).await;
}

/// One daemon, two providers at once: a session on the mock in DeepSeek's format and one on
/// llama.cpp (OpenAI-compatible), each request rebuilt byte for byte from its log; then a
/// DeepSeek session forked onto the llama.cpp profile names the move as its cache drop's cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_daemon_serves_deepseek_and_llama_cpp_at_once_and_a_fork_moves_between_them() {
    let Some(llama) = LlamaServer::start().await else { return };
    let proxy = RecordingProxy::start(llama.base_url()).await;
    let env = Env::new().await;
    let config = local_profile(proxy.base_url()).replace(
        "profile = \"local\"\n",
        &format!(
            "profile = \"deepseek\"\n\n[providers.deepseek]\nbase_url = \"{}\"\n",
            env.mock.base_url()
        ),
    );
    std::fs::write(env.user_config(), config).unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let deepseek_args = ["prompt", "--yes", "--workspace", &workspace, "Hello, DeepSeek."];
    let local_args =
        ["--provider", "local", "prompt", "--yes", "--workspace", &workspace, "Name a colour."];
    // The first command starts the daemon; the second joins it while the first turn runs.
    let (on_deepseek, on_local) = tokio::join!(dsh(&env, &deepseek_args), async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        dsh(&env, &local_args).await
    });
    let (on_deepseek, on_local) = (session_id_of(&on_deepseek), session_id_of(&on_local));
    dsh(&env, &["prompt", "--yes", "--session", &on_local, "Name another one."]).await;

    let llama_bodies = || -> Vec<Vec<u8>> {
        proxy
            .bodies()
            .into_iter()
            .filter(|(path, _)| path == "/v1/chat/completions")
            .map(|(_, body)| body)
            .collect()
    };
    let saw = |session: String, step: u64| {
        let env = &env;
        async move {
            let step = step.to_string();
            dsh(env, &["saw", &session, "--step", &step, "--wire"]).await.stdout
        }
    };
    assert_eq!(env.requests().len(), 1, "the DeepSeek session's one request went to the mock");
    assert_eq!(saw(on_deepseek.clone(), 1).await, env.requests()[0].body);
    let received = llama_bodies();
    assert_eq!(received.len(), 2, "the local session's two requests went to llama.cpp");
    assert_eq!(saw(on_local.clone(), 1).await, received[0]);
    assert_eq!(saw(on_local.clone(), 2).await, received[1]);
    let usage: Value =
        serde_json::from_slice(&dsh(&env, &["--json", "usage", &on_local]).await.stdout).unwrap();
    let second = &usage["rows"][1];
    assert!(second["usage"]["cacheHitTokens"].as_u64().unwrap() > 0, "{second:#}");
    assert_eq!(second["profile"], "local");
    env.assert_audit_ok(&on_deepseek).await;
    env.assert_audit_ok(&on_local).await;

    // The DeepSeek session, forked onto llama.cpp.
    let forked = dsh(&env, &["--provider", "local", "fork", &on_deepseek]).await;
    let fork =
        String::from_utf8_lossy(&forked.stdout).trim().rsplit(' ').next().unwrap().to_owned();
    dsh(&env, &["prompt", "--yes", "--session", &fork, "Say it shorter."]).await;
    let received = llama_bodies();
    assert_eq!(received.len(), 3, "the fork's request went to llama.cpp");
    assert_eq!(saw(fork.clone(), 2).await, received[2]);
    let usage: Value =
        serde_json::from_slice(&dsh(&env, &["--json", "usage", &fork]).await.stdout).unwrap();
    let moved = &usage["rows"][1];
    assert_eq!(moved["dropped"], true, "llama.cpp never saw this prefix: {moved:#}");
    assert!(
        moved["explanation"]
            .as_str()
            .unwrap()
            .contains("provider changed deepseek/deepseek-v4-flash → local/smollm2"),
        "{moved:#}"
    );
    env.assert_audit_ok(&fork).await;
}

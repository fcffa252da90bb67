//! Security: the socket and home permissions, the network listener's token and Origin checks,
//! and an API key that never reaches a log, the daemon log or an error reply.

use dsh_protocol::jsonrpc::{Id, Request, raw};
use serde_json::{Value, json};

use crate::support::Env;

fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread")]
async fn the_socket_is_private_and_a_shared_home_is_refused() {
    let env = Env::new().await;
    // A client-style start creates the home itself: 0700.
    let served = env.serve(&[]).await;
    assert_eq!(mode(&env.socket()), 0o600, "socket mode");
    assert_eq!(mode(&env.home) & 0o022, 0, "home is group/world-writable");
    served.shutdown().await;

    // A home others may write is refused before any socket is made.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = env.dsh(&["serve"]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("writable by other users"), "{stderr}");
    assert!(!env.socket().exists());
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// The address the network listener reports in the daemon's log (`--listen 127.0.0.1:0`).
pub(super) async fn bound_address(env: &Env) -> String {
    let started = std::time::Instant::now();
    loop {
        let log = env.daemon_log();
        let found = log.lines().filter(|l| l.contains("network listener")).find_map(|line| {
            let plain = strip_ansi(line);
            let at = plain.find("bound=")?;
            Some(plain[at + 6..].split_whitespace().next()?.to_owned())
        });
        if let Some(address) = found {
            return address;
        }
        assert!(started.elapsed() < crate::support::DEADLINE, "no bound address in:\n{log}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_network_listener_wants_the_token_and_an_allowed_origin() {
    let env = Env::new().await;
    let served =
        env.serve(&["--listen", "127.0.0.1:0", "--allow-origin", "vscode-webview://dsh"]).await;
    let address = bound_address(&env).await;
    assert!(!address.ends_with(":0"), "port 0 was not resolved: {address}");
    let token_path = env.home.join("token");
    assert_eq!(mode(&token_path), 0o600, "token file mode");
    let token = std::fs::read_to_string(&token_path).unwrap().trim().to_owned();
    assert!(token.len() >= 16);
    let url = format!("http://{address}");
    let body = Request::new(Id::Number(1), "daemon/status", raw(&json!({}))).to_line();
    let client = reqwest::Client::new();
    let post = |auth: Option<String>, origin: Option<&str>| {
        let mut request =
            client.post(&url).header("content-type", "application/json").body(body.clone());
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    let bearer = format!("Bearer {token}");
    for (auth, origin, status) in [
        (None, None, 401),
        (Some("Bearer wrong-token-wrong-token".to_owned()), None, 401),
        (Some(token.clone()), None, 401),
        (Some(format!("Bearer {token}x")), None, 401),
        (None, Some("vscode-webview://dsh"), 401),
        (Some(bearer.clone()), Some("https://evil.example"), 403),
        (Some(bearer.clone()), Some("null"), 403),
    ] {
        let response = post(auth.clone(), origin).await.unwrap();
        assert_eq!(response.status().as_u16(), status, "auth {auth:?} origin {origin:?}");
        let text = response.text().await.unwrap();
        assert!(!text.contains(&token), "a refusal echoed the token");
        assert!(!text.contains("\"result\""), "a refused request was served: {text}");
    }
    for origin in [None, Some("vscode-webview://dsh")] {
        let response = post(Some(bearer.clone()), origin).await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "origin {origin:?}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["result"]["pid"], served.pid(), "{answer}");
    }
    served.shutdown().await;
}

/// "What the model saw" of a long conversation is larger than jsonrpsee's default answer limit
/// (10 MiB); over HTTP it is answered whole (up to 256 MiB).
#[tokio::test(flavor = "multi_thread")]
async fn the_network_listener_gives_answers_larger_than_ten_megabytes() {
    let env = Env::new().await;
    let served = env.serve(&["--listen", "127.0.0.1:0"]).await;
    let address = bound_address(&env).await;
    let token = std::fs::read_to_string(env.home.join("token")).unwrap().trim().to_owned();
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let created = conn.ok("session/create", json!({"workspace": workspace})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    // A control character is one token and thirteen bytes of the answer: `\u0001` in the
    // message, `\\u0001` in the wire body. Three turns (the mock's window is 1M tokens, a
    // request line at most 4 MiB) bring the last request to 825,000 tokens and its answer to
    // about 10.7 MB.
    let text = "\u{1}".repeat(275_000);
    for _ in 0..3 {
        let outcome = conn.ok("session/prompt", json!({"sessionId": session, "text": text})).await;
        assert_eq!(outcome["stopReason"], "completed", "{outcome}");
    }
    let params = json!({"sessionId": session, "step": 3});
    let body = Request::new(Id::Number(1), "session/request", raw(&params)).to_line();
    let response = reqwest::Client::new()
        .post(format!("http://{address}"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    assert!(text.len() > 10 * 1024 * 1024, "not past the default limit: {} bytes", text.len());
    let answer: Value = serde_json::from_str(&text).unwrap();
    let wire = &answer["result"]["wire"];
    assert_eq!(wire["sha256"], answer["result"]["sent"]["sha256"], "{}", &text[..300]);
    assert!(wire["body"].as_str().unwrap().len() > 4_900_000);
    served.shutdown().await;
}

const SECRET: &str = "SECRET123";

#[tokio::test(flavor = "multi_thread")]
async fn the_api_key_appears_in_no_log_and_no_reply() {
    let key = format!("sk-test-{SECRET}");
    let mut config = dsh_mock::MockConfig::default();
    config.keys[0].key = key.clone();
    let env = Env::with_mock(config).await;
    assert_eq!(env.key, key);
    // Debug logging: the most the daemon ever writes.
    let served = env
        .serve_with(&[], |command| {
            command.env("DSH_LOG", "debug");
        })
        .await;
    let conn = env.client().await;
    let mut replies: Vec<Value> = Vec::new();
    let workspace = env.workspace.display().to_string();
    let session = conn.ok("session/create", json!({"workspace": workspace})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let sub = conn.subscribe(&session, None).await;
    replies.push(conn.request("session/prompt", json!({"sessionId": session, "text": "hi"})).await);
    // The provider refuses: an injected 401, then a 401 for a wrong key... the same daemon
    // cannot change its key, so the second refusal comes from a daemon with another home.
    env.fault(json!({"http": {"status": 401}})).await;
    replies
        .push(conn.request("session/prompt", json!({"sessionId": session, "text": "again"})).await);
    assert_eq!(replies[1]["result"]["stopReason"], "error", "{}", replies[1]);
    replies.push(conn.request("session/request", json!({"sessionId": session, "step": 2})).await);
    replies.push(conn.request("session/request", json!({"sessionId": session, "step": 9})).await);
    replies.push(conn.request("no/such", json!({})).await);
    let events = conn.wait_turn_end(&sub, 2).await;
    served.shutdown().await;

    let wrong = Env::new().await; // its mock accepts only `sk-test`
    let wrong_key = format!("sk-wrong-{SECRET}");
    let served = wrong
        .serve_with(&[], |command| {
            command.env("DEEPSEEK_API_KEY", &wrong_key).env("DSH_LOG", "debug");
        })
        .await;
    let conn = wrong.client().await;
    let workspace = wrong.workspace.display().to_string();
    let other = conn.ok("session/create", json!({"workspace": workspace})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = conn.request("session/prompt", json!({"sessionId": other, "text": "hi"})).await;
    assert_eq!(answer["result"]["stopReason"], "error", "{answer}");
    let error = answer["result"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains("401") || error.to_lowercase().contains("auth"), "{answer}");
    replies.push(answer);
    served.shutdown().await;

    let mut haystacks: Vec<(String, String)> = replies
        .iter()
        .map(|reply| ("a reply".to_owned(), reply.to_string()))
        .chain(events.iter().map(|event| ("an event".to_owned(), event.to_string())))
        .collect();
    for home in [&env.home, &wrong.home] {
        for path in files_under(home) {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            haystacks.push((path.display().to_string(), text));
        }
    }
    assert!(haystacks.iter().any(|(name, _)| name.ends_with("daemon.log")));
    assert!(haystacks.iter().any(|(name, _)| name.ends_with(".jsonl")));
    for (name, text) in haystacks {
        assert!(!text.contains(SECRET), "the API key leaked into {name}");
    }
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else if !path.ends_with("dsh.sock") {
            out.push(path);
        }
    }
    out
}

/// `daemon/keys`: a key the daemon lacks is taken, one it has is kept; a bad name is refused
/// naming the name; no value reaches an answer, an error or the daemon's log.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_hands_the_keys_a_daemon_lacks_and_no_value_is_ever_shown() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let conn = env.client().await;
    let answer = conn
        .ok(
            "daemon/keys",
            json!({"keys": {"DEEPSEEK_API_KEY": "sk-other-value", "DSH_TEST_KEY_ZQ": "zq-secret-value"}}),
        )
        .await;
    assert_eq!(answer, json!({"taken": ["DSH_TEST_KEY_ZQ"], "kept": ["DEEPSEEK_API_KEY"]}));
    // Handed again: now it has it.
    let answer =
        conn.ok("daemon/keys", json!({"keys": {"DSH_TEST_KEY_ZQ": "zq-other-secret"}})).await;
    assert_eq!(answer, json!({"taken": [], "kept": ["DSH_TEST_KEY_ZQ"]}));
    let message =
        conn.err("daemon/keys", json!({"keys": {"1BAD NAME": "zq-bad-secret"}}), -32602).await;
    assert!(message.contains("1BAD NAME") && !message.contains("zq-bad-secret"), "{message}");
    let message = conn.err("daemon/keys", json!({"keys": {"DSH_EMPTY_ZQ": "  "}}), -32602).await;
    assert!(message.contains("DSH_EMPTY_ZQ"), "{message}");
    served.shutdown().await;
    let log = env.daemon_log();
    for secret in ["sk-other-value", "zq-secret-value", "zq-other-secret", "zq-bad-secret"] {
        assert!(!log.contains(secret), "the daemon's log shows a key: {log}");
    }
}

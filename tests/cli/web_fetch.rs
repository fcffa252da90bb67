//! `web_fetch` end to end (docs/web_fetch.md): `dsh prompt` turns whose model calls `web_fetch`
//! against a local HTTP server, under the user's `[web]` configuration — a listed host's page
//! comes back as Markdown, the same URL unlisted is refused, a redirect to the metadata address
//! is refused, an oversized body is cut and said, a server that trickles bytes ends at the
//! overall deadline, a URL with credentials and a `file://` URL are refused — and with the
//! session's network off and no `[web] allow` every call is refused. Each result is the logged
//! tool result the next request carries; `dsh audit` passes and every request rebuilds byte for
//! byte.

use std::time::{Duration, Instant};

use dsh_session::EventData;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{Env, stdout, tool_reply};

const PAGE: &str = "<!doctype html><html><head><title>Notes</title></head><body>\
    <h1>Release 2.0</h1><p>It adds <a href=\"https://example.com/docs\">docs</a>.</p>\
    <script>track()</script></body></html>";

/// A server on 127.0.0.1 answering by path; its port.
async fn server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream));
        }
    });
    port
}

async fn answer(mut stream: TcpStream) {
    let mut request = Vec::new();
    let mut buffer = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buffer[..n]),
        }
    }
    let request = String::from_utf8_lossy(&request).into_owned();
    let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let (head, body): (String, Vec<u8>) = match path.as_str() {
        "/page" => ("200 OK\r\nContent-Type: text/html".into(), PAGE.into()),
        "/big" => ("200 OK\r\nContent-Type: text/plain".into(), vec![b'z'; 50_000]),
        "/to-metadata" => {
            ("302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/".into(), Vec::new())
        }
        "/slow" => {
            let head =
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 9999\r\n\r\n";
            let _ = stream.write_all(head.as_bytes()).await;
            for _ in 0..300 {
                if stream.write_all(b".").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            return;
        }
        _ => ("404 Not Found".into(), Vec::new()),
    };
    let mut response =
        format!("HTTP/1.1 {head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
            .into_bytes();
    response.extend_from_slice(&body);
    let _ = stream.write_all(&response).await;
}

fn fetch(url: &str) -> serde_json::Value {
    tool_reply("Fetch it.", "web_fetch", json!({ "url": url }))
}

/// The results of the session's `web_fetch` calls, in order: (is_error, content).
fn results(env: &Env, session: &str) -> Vec<(bool, String)> {
    env.events(session)
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ToolResult(result) if result.name == "web_fetch" => {
                Some((result.is_error, result.content.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Every request the mock got rebuilds byte for byte; the session audits clean.
async fn assert_rebuilt(env: &Env, session: &str) {
    for (index, request) in env.requests().iter().enumerate() {
        let rebuilt = env.saw_wire(session, index as u64 + 1).await;
        assert!(rebuilt == request.body, "step {} does not rebuild byte for byte", index + 1);
    }
    env.assert_audit_ok(session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_fetch_follows_the_users_web_rules_and_its_results_are_logged() {
    let port = server().await;
    let base = format!("http://127.0.0.1:{port}");
    let env = Env::new().await;
    std::fs::write(
        env.user_config(),
        "[web]\nallow = true\nallow_hosts = [\"127.0.0.1\"]\ntimeout_secs = 2\nmax_bytes = 1000\n",
    )
    .unwrap();
    env.script(json!([
        fetch(&format!("{base}/page")),
        fetch(&format!("http://localhost:{port}/page")),
        fetch(&format!("{base}/to-metadata")),
        fetch(&format!("{base}/big")),
        fetch(&format!("{base}/slow")),
        fetch(&format!("http://user:hunter2@127.0.0.1:{port}/page")),
        fetch("file:///etc/passwd"),
        {"reasoning": "Done.", "content": "Fetched."},
    ]))
    .await;
    let started = Instant::now();
    let (session, output) = env.prompt_new("read the release notes").await;
    assert!(output.status.success(), "{}", stdout(&output));
    let results = results(&env, &session);
    assert_eq!(results.len(), 7, "{results:?}");

    let (error, page) = &results[0];
    assert!(!error, "{page}");
    assert!(page.starts_with(&format!("URL: {base}/page\nStatus: 200 OK\n")), "{page}");
    assert!(
        page.ends_with("\n\n# Release 2.0\n\nIt adds [docs](https://example.com/docs)."),
        "{page}"
    );
    let refused = |index: usize, expected: &str| {
        let (error, content) = &results[index];
        assert!(*error && content.contains(expected), "call {index}: {content}");
    };
    refused(1, "localhost resolves to 127.0.0.1, which is a loopback address");
    refused(2, "169.254.169.254 is a link-local address");
    let (error, big) = &results[3];
    assert!(!error && big.contains("Note: the body was cut at 1000 bytes (the size cap)"), "{big}");
    assert!(big.ends_with(&format!("\n\n{}", "z".repeat(1000))), "{big}");
    refused(4, "no complete response within 2 s (the overall deadline)");
    refused(5, "a URL with a user name or password is refused");
    assert!(!results[5].1.contains("hunter2"));
    refused(6, "the scheme `file` is not fetched");
    // The slow server did not hold the turn past its deadline (with room for a loaded machine).
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());

    // What the model saw is the logged result: the page's Markdown in the next request.
    let requests = env.requests();
    assert_eq!(requests.len(), 8);
    let second = String::from_utf8(requests[1].body.clone()).unwrap();
    assert!(second.contains("# Release 2.0"), "{second}");
    assert!(String::from_utf8_lossy(&requests[0].body).contains(r#""name":"web_fetch""#));
    assert_rebuilt(&env, &session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_listing_or_with_the_network_off_web_fetch_is_refused() {
    let port = server().await;
    let url = format!("http://127.0.0.1:{port}/page");
    // The network allowed, the host not listed: the address rule refuses it.
    let env = Env::new().await;
    std::fs::write(env.user_config(), "[web]\nallow = true\n").unwrap();
    env.script(json!([fetch(&url), {"reasoning": "Done.", "content": "No."}])).await;
    let (session, output) = env.prompt_new("fetch").await;
    assert!(output.status.success(), "{}", stdout(&output));
    let unlisted = results(&env, &session);
    assert!(unlisted[0].0, "{unlisted:?}");
    assert!(unlisted[0].1.contains("127.0.0.1 is a loopback address"), "{unlisted:?}");
    assert!(unlisted[0].1.contains("[web] allow_hosts"), "{unlisted:?}");
    assert_rebuilt(&env, &session).await;
    drop(env);

    // No configuration: the session's network is off (the sandbox's default), so even a
    // listed host is refused, before any request.
    let env = Env::new().await;
    std::fs::write(env.user_config(), "[web]\nallow_hosts = [\"127.0.0.1\"]\n").unwrap();
    env.script(json!([fetch(&url), {"reasoning": "Done.", "content": "No."}])).await;
    let (session, output) = env.prompt_new("fetch").await;
    assert!(output.status.success(), "{}", stdout(&output));
    let offline = results(&env, &session);
    assert!(offline[0].0 && offline[0].1.contains("the network is off"), "{offline:?}");
    assert_rebuilt(&env, &session).await;
}

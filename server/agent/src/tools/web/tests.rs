//! `web_fetch` against a real HTTP server on loopback: pages as Markdown, text and raw; the
//! address rules on the first hop and on redirects; the size cap; the overall deadline against
//! a server that trickles bytes; charsets; bad URLs; the network rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::{WebSettings, fetch};
use crate::tools::ToolOutput;

const PAGE: &str = "<!doctype html><html><head><title>Hi</title><script>track()</script></head>\
    <body><h1>Release notes</h1><p>Version <b>2.0</b> adds <a href=\"/docs\">docs</a>.</p>\
    <ul><li>fast</li><li>small</li></ul></body></html>";

/// A server on 127.0.0.1 answering by path; its port.
async fn server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream, port));
        }
    });
    port
}

async fn answer(mut stream: TcpStream, port: u16) {
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
    let respond = |status: &str, headers: &str, body: &[u8]| {
        let mut response = format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        response.extend_from_slice(body);
        response
    };
    let html = "Content-Type: text/html; charset=utf-8\r\n";
    let response = match path.as_str() {
        "/page" => respond("200 OK", html, PAGE.as_bytes()),
        "/headers" => respond("200 OK", "Content-Type: text/plain\r\n", request.as_bytes()),
        "/empty" => respond("200 OK", html, b"<html><body><script>app()</script></body></html>"),
        "/big" => respond("200 OK", "Content-Type: text/plain\r\n", &vec![b'a'; 1 << 20]),
        "/latin1" => {
            respond("200 OK", "Content-Type: text/plain; charset=iso-8859-1\r\n", b"caf\xe9")
        }
        "/invalid" => respond("200 OK", "Content-Type: text/plain\r\n", b"ok \xff\xfe end"),
        "/png" => respond("200 OK", "Content-Type: image/png\r\n", b"\x89PNG\r\n\x1a\n...."),
        "/missing" => respond("404 Not Found", html, b"<p>no such page</p>"),
        "/to-page" => respond("302 Found", "Location: /page\r\n", b""),
        "/to-metadata" => {
            respond("302 Found", "Location: http://169.254.169.254/latest/meta-data/\r\n", b"")
        }
        "/to-localhost" => {
            respond("302 Found", &format!("Location: http://localhost:{port}/page\r\n"), b"")
        }
        "/to-file" => respond("302 Found", "Location: file:///etc/passwd\r\n", b""),
        "/loop" => respond("302 Found", "Location: /loop\r\n", b""),
        "/slow" => {
            // Headers at once, then a byte every 100 ms, for a minute: never a read timeout,
            // only the overall deadline ends it.
            let head =
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for _ in 0..600 {
                if stream.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            return;
        }
        _ => respond("404 Not Found", "", b""),
    };
    let _ = stream.write_all(&response).await;
    let _ = stream.shutdown().await;
}

fn allowing(hosts: &[&str]) -> WebSettings {
    WebSettings {
        allow_hosts: hosts.iter().map(|host| (*host).to_owned()).collect(),
        ..WebSettings::default()
    }
}

async fn call(settings: &WebSettings, url: &str, format: &str) -> ToolOutput {
    let arguments = json!({ "url": url, "format": format }).to_string();
    fetch(settings, true, &arguments, &CancellationToken::new()).await
}

#[tokio::test]
async fn an_allowed_local_page_comes_back_as_markdown_with_its_url_and_status() {
    let port = server().await;
    let url = format!("http://127.0.0.1:{port}/page");
    let output = call(&allowing(&["127.0.0.1"]), &url, "markdown").await;
    assert!(!output.is_error, "{}", output.content);
    let expected_head = format!(
        "URL: {url}\nStatus: 200 OK\nContent-Type: text/html; charset=utf-8\n\n# Release notes"
    );
    assert!(output.content.starts_with(&expected_head), "{}", output.content);
    assert!(output.content.contains("Version **2.0** adds [docs](/docs)."), "{}", output.content);
    assert!(!output.content.contains("track()"), "{}", output.content);

    let text = call(&allowing(&["127.0.0.1"]), &url, "text").await;
    assert!(
        text.content.ends_with("Hi\n\nRelease notes\n\nVersion 2.0 adds docs.\n\nfast\n\nsmall"),
        "{}",
        text.content
    );
    let raw = call(&allowing(&["127.0.0.1"]), &url, "raw").await;
    assert!(raw.content.ends_with(PAGE), "{}", raw.content);
}

#[tokio::test]
async fn a_private_address_is_refused_unless_its_host_is_listed() {
    let port = server().await;
    let output =
        call(&WebSettings::default(), &format!("http://127.0.0.1:{port}/page"), "markdown").await;
    assert!(output.is_error);
    assert!(output.content.contains("127.0.0.1 is a loopback address"), "{}", output.content);
    assert!(output.content.contains("[web] allow_hosts"), "{}", output.content);
    // A name resolving to loopback is refused by the address it resolves to.
    let output =
        call(&WebSettings::default(), &format!("http://localhost:{port}/page"), "markdown").await;
    assert!(
        output.content.contains("localhost resolves to 127.0.0.1, which is a loopback"),
        "{}",
        output.content
    );
    let output =
        call(&allowing(&["localhost"]), &format!("http://localhost:{port}/page"), "markdown").await;
    assert!(!output.is_error, "{}", output.content);
    // Other spellings of loopback and private addresses: the URL parser normalizes them.
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:10.0.0.1]/",
        "http://[fd00::1]/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://017700000001/",
        "http://[::ffff:7f00:1]/",
        "http://0/",
    ] {
        let output = call(&WebSettings::default(), url, "raw").await;
        let ruled = output.content.contains("web_fetch reaches only public addresses");
        assert!(output.is_error && ruled, "{url}: {}", output.content);
    }
}

#[tokio::test]
async fn every_redirect_hop_is_checked_again() {
    let port = server().await;
    let settings = allowing(&["127.0.0.1"]);
    let base = format!("http://127.0.0.1:{port}");
    let followed = call(&settings, &format!("{base}/to-page"), "markdown").await;
    assert!(!followed.is_error, "{}", followed.content);
    assert!(followed.content.starts_with(&format!("URL: {base}/page\n")), "{}", followed.content);
    assert!(followed.content.contains(&format!("Redirected from: {base}/to-page")));

    let metadata = call(&settings, &format!("{base}/to-metadata"), "markdown").await;
    assert!(metadata.is_error);
    assert!(
        metadata.content.contains("169.254.169.254 is a link-local address"),
        "{}",
        metadata.content
    );
    // The same server under a name that is not listed.
    let renamed = call(&settings, &format!("{base}/to-localhost"), "markdown").await;
    assert!(
        renamed.is_error && renamed.content.contains("localhost resolves to 127.0.0.1"),
        "{}",
        renamed.content
    );
    let file = call(&settings, &format!("{base}/to-file"), "markdown").await;
    assert!(file.is_error && file.content.contains("`file` is not fetched"), "{}", file.content);
    let looping = call(&settings, &format!("{base}/loop"), "markdown").await;
    assert!(
        looping.is_error && looping.content.contains("more than 5 redirects"),
        "{}",
        looping.content
    );
}

#[tokio::test]
async fn an_oversized_body_is_cut_and_said() {
    let port = server().await;
    let settings = WebSettings { max_bytes: 1000, ..allowing(&["127.0.0.1"]) };
    let output = call(&settings, &format!("http://127.0.0.1:{port}/big"), "raw").await;
    assert!(!output.is_error, "{}", output.content);
    assert!(
        output.content.contains("Note: the body was cut at 1000 bytes (the size cap)"),
        "{}",
        output.content
    );
    assert!(output.content.ends_with(&format!("\n\n{}", "a".repeat(1000))));
    // Under the default cap the content is cut at the tool's cap instead.
    let output =
        call(&allowing(&["127.0.0.1"]), &format!("http://127.0.0.1:{port}/big"), "raw").await;
    assert!(
        output.content.contains("the content was cut at 100000 of 1048576 bytes"),
        "{}",
        &output.content[..400]
    );
}

#[tokio::test]
async fn a_server_trickling_bytes_ends_at_the_overall_deadline() {
    let port = server().await;
    let settings = WebSettings { timeout: Duration::from_secs(1), ..allowing(&["127.0.0.1"]) };
    let started = Instant::now();
    let output = call(&settings, &format!("http://127.0.0.1:{port}/slow"), "raw").await;
    let took = started.elapsed();
    assert!(output.is_error);
    assert!(output.content.contains("within 1 s (the overall deadline)"), "{}", output.content);
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn charsets_invalid_bytes_binary_and_empty_pages_are_said() {
    let port = server().await;
    let settings = allowing(&["127.0.0.1"]);
    let base = format!("http://127.0.0.1:{port}");
    let latin1 = call(&settings, &format!("{base}/latin1"), "raw").await;
    assert!(
        latin1.content.contains("Note: decoded from windows-1252")
            && latin1.content.ends_with("\n\ncafé"),
        "{}",
        latin1.content
    );
    let invalid = call(&settings, &format!("{base}/invalid"), "raw").await;
    assert!(
        invalid.content.contains("not valid UTF-8 were replaced with U+FFFD"),
        "{}",
        invalid.content
    );
    let png = call(&settings, &format!("{base}/png"), "markdown").await;
    assert!(
        png.content.contains("is not text: not shown") && !png.content.contains("PNG"),
        "{}",
        png.content
    );
    let empty = call(&settings, &format!("{base}/empty"), "markdown").await;
    assert!(!empty.is_error);
    assert!(empty.content.contains("the page's Markdown is empty"), "{}", empty.content);
    let missing = call(&settings, &format!("{base}/missing"), "markdown").await;
    assert!(
        missing.is_error && missing.content.contains("Status: 404 Not Found"),
        "{}",
        missing.content
    );
    assert!(missing.content.ends_with("no such page"), "{}", missing.content);
}

#[tokio::test]
async fn the_request_carries_only_a_user_agent_naming_dsh() {
    let port = server().await;
    let output =
        call(&allowing(&["127.0.0.1"]), &format!("http://127.0.0.1:{port}/headers"), "raw").await;
    let request = output.content.split("\n\n").nth(1).unwrap().to_ascii_lowercase();
    assert!(request.contains("user-agent: dsh/"), "{request}");
    let names: Vec<&str> = request
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["accept", "user-agent", "host"], "{request}");
}

#[tokio::test]
async fn bad_urls_and_a_closed_network_are_refused_before_any_request() {
    let settings = WebSettings::default();
    let cases = [
        ("file:///etc/passwd", "`file` is not fetched"),
        ("https://user:secret@example.com/", "user name or password is refused"),
        ("not a url", "not a URL"),
        ("ftp://example.com/", "`ftp` is not fetched"),
    ];
    for (url, expected) in cases {
        let output = call(&settings, url, "markdown").await;
        assert!(output.is_error && output.content.contains(expected), "{url}: {}", output.content);
        assert!(!output.content.contains("secret"), "{}", output.content);
    }
    let arguments = json!({ "url": "https://example.com/" }).to_string();
    let offline = fetch(&settings, false, &arguments, &CancellationToken::new()).await;
    assert!(
        offline.is_error && offline.content.contains("the network is off"),
        "{}",
        offline.content
    );
    let bad = fetch(
        &settings,
        true,
        r#"{"url": "https://example.com/", "format": "pdf"}"#,
        &CancellationToken::new(),
    )
    .await;
    assert!(
        bad.is_error && bad.content.contains("invalid arguments for web_fetch"),
        "{}",
        bad.content
    );
}

#[tokio::test]
async fn the_network_rule_yields_to_the_users_allow() {
    let port = server().await;
    let settings = WebSettings { allow_offline: true, ..allowing(&["127.0.0.1"]) };
    let arguments = json!({ "url": format!("http://127.0.0.1:{port}/page") }).to_string();
    let output = fetch(&settings, false, &arguments, &CancellationToken::new()).await;
    assert!(!output.is_error, "{}", output.content);
}

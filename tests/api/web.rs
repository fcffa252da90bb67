//! `dsh web` and the browser's way in: the printed one-time login URL, the session cookie and
//! the tab secret it is exchanged for, the pages and assets served only with the cookie (or the
//! bearer token), the API only with the cookie, its tab secret and the page's Origin, the
//! security headers, a reused code's page, and the same port and a still-good cookie after the
//! daemon restarts.

use std::time::Duration;

use dsh_protocol::jsonrpc::{Id, Request, raw};
use futures::io::{BufReader, BufWriter};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use soketto::handshake::client::{Client, Header, ServerResponse};
use tokio::net::TcpStream;
use tokio_util::compat::TokioAsyncReadCompatExt;

use crate::support::Env;

/// Runs `dsh web --no-open ARGS…`: the URL it printed.
async fn web_url(env: &Env, args: &[&str]) -> String {
    let mut all = vec!["web", "--no-open"];
    all.extend_from_slice(args);
    let output = env.dsh_ok(&all).await;
    let stdout = String::from_utf8(output.stdout).unwrap();
    let url = stdout.trim().to_owned();
    assert!(url.starts_with("http://127.0.0.1:") && url.contains("/login?code="), "{stdout}");
    url
}

fn origin_of(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    format!("http://{}", rest.split('/').next().unwrap())
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// Logs in with `url`: the cookie pair (`dsh_web=…`) the redirect set, and the tab secret in
/// its fragment.
async fn log_in(url: &str) -> (String, String) {
    let response = no_redirects().get(url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 303, "{url}");
    let set = response.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "cookie without {attribute}: {set}");
    }
    let location = response.headers()["location"].to_str().unwrap();
    let (page, secret) = location.split_once("#tab=").unwrap();
    assert!(page.starts_with('/') && !page.contains("tab="), "{location}");
    assert_eq!(secret.len(), 64, "{location}");
    assert!(!set.contains(secret), "the secret is not in the cookie: {set}");
    (set.split(';').next().unwrap().to_owned(), secret.to_owned())
}

fn assert_secure(headers: &HeaderMap, what: &str) {
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("default-src 'self'"), "{what}: {policy}");
    assert!(policy.contains("script-src 'self';"), "{what}: {policy}");
    assert!(!policy.contains("unsafe-inline"), "{what}: {policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{what}: {policy}");
    assert_eq!(headers["x-content-type-options"], "nosniff", "{what}");
    assert_eq!(headers["referrer-policy"], "no-referrer", "{what}");
}

/// A WebSocket upgrade with these headers: the status when refused, 101 when accepted.
async fn upgrade(origin: &str, headers: &[(&str, &str)]) -> u16 {
    upgrade_with(origin, headers, None).await.0
}

/// A WebSocket upgrade with these headers, asking for `protocol` as a browser does: the status
/// (101 when accepted) and the subprotocol the answer accepted, which the client checked is
/// the one it asked for.
async fn upgrade_with(
    origin: &str,
    headers: &[(&str, &str)],
    protocol: Option<&str>,
) -> (u16, Option<String>) {
    let host = origin.strip_prefix("http://").unwrap();
    let stream = TcpStream::connect(host).await.unwrap();
    let mut client = Client::new(BufReader::new(BufWriter::new(stream.compat())), host, "/");
    let headers: Vec<Header<'_>> =
        headers.iter().map(|(name, value)| Header { name, value: value.as_bytes() }).collect();
    client.set_headers(&headers);
    if let Some(protocol) = protocol {
        client.add_protocol(protocol);
    }
    match client.handshake().await.unwrap() {
        ServerResponse::Accepted { protocol } => (101, protocol),
        ServerResponse::Rejected { status_code } | ServerResponse::Redirect { status_code, .. } => {
            (status_code, None)
        }
    }
}

fn status_call() -> String {
    Request::new(Id::Number(1), "daemon/status", raw(&json!({}))).to_line()
}

#[tokio::test(flavor = "multi_thread")]
async fn dsh_web_logs_a_browser_in_once_and_serves_nothing_without_the_cookie_or_token() {
    let env = Env::new().await;
    // A daemon started on demand, without `--listen`: `dsh web` gives it its front.
    let url = web_url(&env, &[]).await;
    let origin = origin_of(&url);
    let http = no_redirects();

    // Nothing without a login: the page says so, the assets and the API are refused.
    let page = http.get(format!("{origin}/")).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 401);
    assert_secure(page.headers(), "the refusal");
    assert!(page.text().await.unwrap().contains("Not logged in"));
    for path in ["/app.js", "/app.css", "/index.html"] {
        let response = http.get(format!("{origin}{path}")).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401, "{path}");
    }
    let post = http.post(&origin).header("content-type", "application/json").body(status_call());
    assert_eq!(post.send().await.unwrap().status().as_u16(), 401);
    assert_eq!(upgrade(&origin, &[("Origin", &origin)]).await, 401);

    // The login: a redirect to the page with the cookie, the tab secret in its fragment.
    let (cookie, secret) = log_in(&url).await;
    let response = http.get(&url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 403, "the code works once");
    assert!(response.headers().get("set-cookie").is_none());
    let text = response.text().await.unwrap();
    assert!(text.contains("already used") && text.contains("dsh web"), "{text}");
    let forged = format!("{origin}/login?code=00000000000000000000000000000000");
    assert_eq!(http.get(forged).send().await.unwrap().status().as_u16(), 403);

    // With the cookie: the page and its assets, with the headers.
    for (path, kind) in
        [("/", "text/html"), ("/app.js", "text/javascript"), ("/app.css", "text/css")]
    {
        let response = http.get(format!("{origin}{path}")).header("cookie", &cookie).send();
        let response = response.await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with(kind), "{path}");
        assert_secure(response.headers(), path);
    }
    let index = http.get(format!("{origin}/")).header("cookie", &cookie).send().await.unwrap();
    let index = index.text().await.unwrap();
    assert!(index.contains("src=\"/app.js\"") && !index.contains("<script>"), "{index}");
    let missing = http.get(format!("{origin}/nope")).header("cookie", &cookie).send().await;
    assert_eq!(missing.unwrap().status().as_u16(), 404);

    // What the cookie authorizes beyond the page's files must come from the page's origin,
    // with the tab secret of the cookie's login.
    let call = |origin_header: Option<&str>, cookie: &str, secret: Option<&str>| {
        let mut request = http
            .post(&origin)
            .header("content-type", "application/json")
            .header("cookie", cookie)
            .body(status_call());
        if let Some(value) = origin_header {
            request = request.header("origin", value);
        }
        if let Some(secret) = secret {
            request = request.header("x-dsh-tab-secret", secret);
        }
        request.send()
    };
    let answer = call(Some(&origin), &cookie, Some(&secret)).await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let answer: Value = answer.json().await.unwrap();
    assert!(answer["result"]["pid"].is_u64(), "{answer}");
    for forged in [None, Some("http://127.0.0.1:1"), Some("http://evil.example"), Some("null")] {
        let response = call(forged, &cookie, Some(&secret)).await.unwrap();
        assert_eq!(response.status().as_u16(), 403, "origin {forged:?}");
    }
    // The cookie alone, as another local server the browser visited receives it, with the
    // page's Origin forged: refused, over HTTP and WebSocket.
    let alone = call(Some(&origin), &cookie, None).await.unwrap();
    assert_eq!(alone.status().as_u16(), 403);
    assert!(alone.text().await.unwrap().contains("dsh web"));
    let page_origin = [("Cookie", cookie.as_str()), ("Origin", origin.as_str())];
    assert_eq!(upgrade(&origin, &page_origin).await, 403, "an upgrade, no secret");
    let wrong = format!("dsh.{}", "0".repeat(64));
    assert_eq!(upgrade_with(&origin, &page_origin, Some(&wrong)).await.0, 403);
    // The secret of another login (another nonce) with this cookie: refused both ways.
    let (other_cookie, other_secret) = log_in(&web_url(&env, &[]).await).await;
    assert_ne!(other_secret, secret);
    let crossed = call(Some(&origin), &cookie, Some(&other_secret)).await.unwrap();
    assert_eq!(crossed.status().as_u16(), 403);
    let crossed = format!("dsh.{other_secret}");
    assert_eq!(upgrade_with(&origin, &page_origin, Some(&crossed)).await.0, 403);
    let other = call(Some(&origin), &other_cookie, Some(&other_secret)).await.unwrap();
    assert_eq!(other.status().as_u16(), 200, "each login's own pair works");
    // Two valid cookies sent together (another local server can set one of that name): the
    // tab's secret matching either is accepted, so the older one cannot lock the tab out.
    let both = format!("{other_cookie}; {cookie}");
    let answer = call(Some(&origin), &both, Some(&secret)).await.unwrap();
    assert_eq!(answer.status().as_u16(), 200, "the second cookie's own secret");
    // The cookie, its secret as the subprotocol and the Origin: accepted, the subprotocol
    // echoed (a browser closes a WebSocket whose answer does not).
    let protocol = format!("dsh.{secret}");
    let accepted = upgrade_with(&origin, &page_origin, Some(&protocol)).await;
    assert_eq!(accepted, (101, Some(protocol.clone())));
    let (nonce, mac) = cookie.split_once('.').unwrap();
    let flipped = if mac.starts_with('0') { "1" } else { "0" };
    let tampered = format!("{nonce}.{flipped}{}", &mac[1..]);
    assert_eq!(call(Some(&origin), &tampered, Some(&secret)).await.unwrap().status().as_u16(), 401);
    let evil = [("Cookie", cookie.as_str()), ("Origin", "http://evil.example")];
    assert_eq!(upgrade_with(&origin, &evil, Some(&protocol)).await.0, 403);
    let no_origin = [("Cookie", cookie.as_str())];
    assert_eq!(upgrade_with(&origin, &no_origin, Some(&protocol)).await.0, 403, "no Origin");

    // The bearer token still works as before (no Origin needed).
    let token = std::fs::read_to_string(env.home.join("token")).unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {}", token.trim())).unwrap(),
    );
    let response =
        http.get(format!("{origin}/app.js")).headers(headers.clone()).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let post = http.post(&origin).headers(headers).header("content-type", "application/json");
    let response = post.body(status_call()).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "the bearer token needs no tab secret");

    // A second `dsh web` reuses the front; its code is a new one.
    let output = env.dsh_ok(&["--json", "web", "--no-open"]).await;
    let second: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(second["origin"], origin.as_str());
    assert_eq!(second["started"], false);
    assert_ne!(second["url"], url.as_str());
    env.dsh_ok(&["shutdown"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_restart_dsh_web_listens_on_the_same_port_and_the_cookie_still_works() {
    let env = Env::new().await;
    let workspace = env.workspace.display().to_string();
    let url = web_url(&env, &["--workspace", &workspace]).await;
    assert!(url.contains("&workspace=/"), "{url}");
    let origin = origin_of(&url);
    let (cookie, secret) = log_in(&url).await;
    assert_eq!(
        std::fs::metadata(env.home.join("web.port"))
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
            .unwrap(),
        0o600
    );
    env.dsh_ok(&["shutdown"]).await;
    // The port is free again: a new daemon's front takes it.
    let again = web_url(&env, &[]).await;
    assert_eq!(origin_of(&again), origin);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let page = loop {
        let response =
            no_redirects().get(format!("{origin}/")).header("cookie", &cookie).send().await;
        if let Ok(response) = response {
            break response;
        }
        assert!(std::time::Instant::now() < deadline, "the restarted front does not answer");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(page.status().as_u16(), 200, "the cookie of the daemon before");
    let call = no_redirects()
        .post(&origin)
        .header("content-type", "application/json")
        .header("cookie", &cookie)
        .header("origin", &origin)
        .header("x-dsh-tab-secret", &secret)
        .body(status_call());
    assert_eq!(call.send().await.unwrap().status().as_u16(), 200, "its tab secret too");
    // A relative workspace is refused with its reason.
    let conn = env.client().await;
    let message = conn.err("daemon/web", json!({"workspace": "relative/dir"}), 1005).await;
    assert!(message.contains("absolute"), "{message}");
    env.dsh_ok(&["shutdown"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dsh_web_reuses_the_front_of_a_daemon_started_with_listen() {
    let env = Env::new().await;
    let served = env.serve(&["--listen", "127.0.0.1:0"]).await;
    let address = super::security::bound_address(&env).await;
    let output = env.dsh_ok(&["--json", "web", "--no-open"]).await;
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["started"], false, "{answer}");
    assert_eq!(answer["origin"], format!("http://{address}"));
    // Its port is not recorded: `--listen` chose it, not `dsh web`.
    assert!(!env.home.join("web.port").exists());
    let (cookie, _) = log_in(answer["url"].as_str().unwrap()).await;
    let origin = format!("http://{address}");
    let page = no_redirects().get(format!("{origin}/")).header("cookie", &cookie).send().await;
    assert_eq!(page.unwrap().status().as_u16(), 200);
    served.shutdown().await;
}

/// The browser is started on a private page that leads to the link, never on the link: its
/// one-time code is not on any command line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsh_web_starts_the_browser_on_a_private_page_never_on_the_link() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = Env::new().await;
    let browser = env.root.join("browser.sh");
    let argv = env.root.join("argv.txt");
    std::fs::write(&browser, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n", argv.display()))
        .unwrap();
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = env.command(&["web"]);
    command.env("BROWSER", &browser);
    let output = command.output().await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let url = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    let code = url.split("code=").nth(1).unwrap().split('&').next().unwrap().to_owned();
    assert_eq!(code.len(), 32, "{url}");
    // The browser ran (it is detached: wait for what it wrote).
    let started = std::time::Instant::now();
    while !argv.exists() {
        assert!(started.elapsed() < Duration::from_secs(20), "the browser was not started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let args = std::fs::read_to_string(&argv).unwrap();
    assert!(!args.contains(&code), "the code is on the browser's command line: {args}");
    let page = std::path::PathBuf::from(args.trim());
    assert_eq!(page, env.home.join("web-login.html"));
    assert_eq!(std::fs::metadata(&page).unwrap().permissions().mode() & 0o777, 0o600);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(&format!("content=\"0;url={}\"", url.replace('&', "&amp;"))), "{html}");
    // The page's link logs in once, as the printed one does.
    let (cookie, _) = log_in(&url).await;
    assert!(cookie.starts_with("dsh_web="), "{cookie}");
    env.dsh_ok(&["shutdown"]).await;
}

//! Injected faults, and shutdown with streams in flight (docs/mock.md, "Faults").

use std::time::Duration;

use dsh_mock::MockConfig;
use serde_json::{Value, json};

use crate::support::*;

fn streamed(text: &str) -> Value {
    json!({"model": "deepseek-v4-flash", "stream": true,
        "messages": [{"role": "user", "content": text}]})
}

fn joined(pieces: &[Vec<u8>]) -> String {
    String::from_utf8(pieces.concat()).expect("utf-8 once joined")
}

#[tokio::test]
async fn an_http_fault_answers_once_with_a_deepseek_shaped_body() {
    let server = start(MockConfig::default()).await;
    control(&server, "/_fake/fault", &json!({"http": {"status": 503, "retry_after": 7}})).await;
    let reply = chat(&server, &streamed("hi")).await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.headers["retry-after"], "7");
    assert_eq!(reply.headers["content-type"], "application/json");
    let error = &reply.json()["error"];
    assert_eq!(error["message"], "Server Overloaded");
    assert_eq!(error["param"], Value::Null);
    assert_eq!(chat(&server, &streamed("hi")).await.status, 200);
    assert_eq!(server.requests()[0].outcome, "fault_http");
}

#[tokio::test]
async fn a_sticky_fault_applies_to_every_later_request() {
    let server = start(MockConfig::default()).await;
    control(&server, "/_fake/fault", &json!({"http": {"status": 429, "message": "slow down", "type": "rate_limit_error"}, "sticky": true})).await;
    for _ in 0..3 {
        let reply = chat(&server, &streamed("hi")).await;
        assert_eq!(reply.status, 429);
        assert_eq!(reply.message(), "slow down");
        assert_eq!(reply.json()["error"]["type"], "rate_limit_error");
    }
    control(&server, "/_fake/reset", &json!({})).await;
    assert_eq!(chat(&server, &streamed("hi")).await.status, 200);
}

#[tokio::test]
async fn drop_after_frames_aborts_the_connection_without_done() {
    let server = start(MockConfig::default()).await;
    control(&server, "/_fake/fault", &json!({"drop_after_frames": 3})).await;
    let (pieces, aborted) = read_stream(&server, &streamed("hello there")).await;
    assert!(aborted, "the body must end with an error, not cleanly");
    let events = events(&joined(&pieces));
    assert_eq!(events.len(), 3);
    assert!(!events.contains(&Event::Done));
    assert_eq!(server.requests()[0].outcome, "dropped");
}

#[tokio::test]
async fn malformed_frame_at_cuts_that_frames_json_short() {
    let server = start(MockConfig::default()).await;
    control(&server, "/_fake/fault", &json!({"malformed_frame_at": 2})).await;
    let reply = chat(&server, &streamed("hello")).await;
    let events = events(&reply.text());
    assert!(matches!(events[0], Event::Data(_)));
    assert!(matches!(events[1], Event::Malformed(_)));
    assert!(matches!(events[2], Event::Data(_)));
    assert_eq!(events.last(), Some(&Event::Done));
    assert_eq!(server.requests()[0].outcome, "malformed");
}

#[tokio::test]
async fn a_stall_sends_only_keepalives_then_closes_without_done() {
    let server = start(MockConfig::default()).await;
    control(
        &server,
        "/_fake/fault",
        &json!({"stall_after_frames": 2, "keepalive_every_ms": 10, "for_ms": 60}),
    )
    .await;
    let (pieces, aborted) = read_stream(&server, &streamed("hello")).await;
    assert!(aborted);
    let events = events(&joined(&pieces));
    assert!(matches!(events[0], Event::Data(_)));
    assert!(matches!(events[1], Event::Data(_)));
    assert!(events.len() >= 4);
    assert!(events[2..].iter().all(|event| *event == Event::Comment("keep-alive".to_owned())));
    assert_eq!(server.requests()[0].outcome, "stalled");
}

#[tokio::test]
async fn queue_keepalive_comments_come_before_the_first_frame() {
    let server = start(MockConfig::default()).await;
    control(&server, "/_fake/fault", &json!({"queue_keepalive_ms": 40, "keepalive_every_ms": 10}))
        .await;
    let reply = chat(&server, &streamed("hello")).await;
    let events = events(&reply.text());
    let first_data = events.iter().position(|event| matches!(event, Event::Data(_))).unwrap();
    assert!(first_data >= 2);
    assert!(events[..first_data].iter().all(|event| matches!(event, Event::Comment(_))));
    assert_eq!(events.last(), Some(&Event::Done));

    // Without streaming, the queue phase is blank lines before the JSON.
    control(&server, "/_fake/fault", &json!({"queue_keepalive_ms": 20, "keepalive_every_ms": 10}))
        .await;
    let mut body = streamed("hello");
    body["stream"] = json!(false);
    let text = chat(&server, &body).await.text();
    assert!(text.starts_with('\n'));
    let completion: Value = serde_json::from_str(text.trim_start()).unwrap();
    assert_eq!(completion["object"], "chat.completion");
}

#[tokio::test]
async fn an_error_class_finish_reason_ends_the_stream_normally() {
    let server = start(MockConfig::default()).await;
    control(&server, "/_fake/fault", &json!({"finish_reason": "insufficient_system_resource"}))
        .await;
    let text = chat(&server, &streamed("hello")).await.text();
    let chunks = chunks(&text);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "insufficient_system_resource"
    );
    assert!(text.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn split_utf8_writes_tiny_pieces_that_split_characters_and_lines() {
    let body = streamed("héllo wörld ✓ 你好");
    let plain = start(MockConfig::default()).await;
    let expected = chat(&plain, &body).await.text();

    let server = start(MockConfig::default()).await;
    control(&server, "/_fake/fault", &json!({"split_utf8": true})).await;
    let (pieces, aborted) = read_stream(&server, &body).await;
    assert!(!aborted);
    assert_eq!(joined(&pieces), expected, "the same bytes, only cut differently");
    assert!(pieces.len() > events(&expected).len());
    assert!(pieces.iter().any(|piece| std::str::from_utf8(piece).is_err()), "a character is split");
    assert!(pieces.iter().any(|piece| piece == b"\n"), "a frame's blank line is split");
}

#[tokio::test]
async fn crlf_uses_carriage_return_line_ends_everywhere() {
    let server = start(MockConfig::default()).await;
    control(
        &server,
        "/_fake/fault",
        &json!({"crlf": true, "queue_keepalive_ms": 10, "keepalive_every_ms": 10}),
    )
    .await;
    let text = chat(&server, &streamed("hello")).await.text();
    assert!(text.starts_with(": keep-alive\r\n\r\n"));
    assert!(text.ends_with("data: [DONE]\r\n\r\n"));
    let bare_newlines =
        text.match_indices('\n').filter(|(index, _)| !text[..*index].ends_with('\r')).count();
    assert_eq!(bare_newlines, 0);
    assert_eq!(reassemble(&chunks(&text)).1, "ok: hello");
}

#[tokio::test]
async fn a_dropped_non_streaming_response_is_a_body_error() {
    let server = start(MockConfig::default()).await;
    control(&server, "/_fake/fault", &json!({"drop_after_frames": 1})).await;
    let response = client()
        .post(format!("{}/chat/completions", server.base_url()))
        .bearer_auth(KEY)
        .body(
            json!({"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "x"}]})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert!(response.bytes().await.is_err());
}

#[tokio::test]
async fn shutdown_ends_in_flight_streams() {
    let server = start(MockConfig::default()).await;
    control(
        &server,
        "/_fake/fault",
        &json!({"stall_after_frames": 1, "keepalive_every_ms": 20, "for_ms": 600_000}),
    )
    .await;
    let mut response = client()
        .post(format!("{}/chat/completions", server.base_url()))
        .bearer_auth(KEY)
        .body(streamed("hold").to_string())
        .send()
        .await
        .unwrap();
    // The first data frame proves the stream is in flight.
    let first = response.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "));
    let reader = tokio::spawn(async move {
        let mut rest = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(bytes)) => rest.extend_from_slice(&bytes),
                Ok(None) | Err(_) => return rest,
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), server.shutdown())
        .await
        .expect("shutdown finishes");
    let rest =
        tokio::time::timeout(Duration::from_secs(10), reader).await.expect("stream ends").unwrap();
    assert!(!String::from_utf8_lossy(&rest).contains("[DONE]"));
}

#[tokio::test]
async fn a_misspelt_fault_or_script_is_rejected_instead_of_queued() {
    let server = start(MockConfig::default()).await;
    let reply =
        post_raw(&server, "/_fake/fault", None, br#"{"drop_after_frame": 1}"#.to_vec()).await;
    assert_eq!(reply.status, 400);
    let reply = post_raw(&server, "/_fake/script", None, br#"[{"contnet": "x"}]"#.to_vec()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(chat(&server, &streamed("hi")).await.status, 200);
}

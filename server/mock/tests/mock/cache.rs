//! Prefix-cache accounting in `block` and `units` modes, namespaces and cache controls
//! (docs/mock.md, "Prefix-cache accounting").

use dsh_mock::{CacheMode, Marker, MockConfig, PassbackRule, Segment, count_tokens, tokenize};
use serde_json::{Value, json};

use crate::support::*;

const G: u64 = 64;

/// Sends a non-streaming request; returns (prompt, hit, the assistant message to replay).
async fn turn(server: &dsh_mock::MockServer, body: &Value) -> (u64, u64, Value) {
    let reply = chat(server, body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let completion = reply.json();
    let usage = &completion["usage"];
    let message = completion["choices"][0]["message"].clone();
    (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["prompt_cache_hit_tokens"].as_u64().unwrap(),
        message,
    )
}

fn tool_request(system: &str, messages: &[Value]) -> Value {
    let mut all = vec![json!({"role": "system", "content": system})];
    all.extend_from_slice(messages);
    json!({"model": "deepseek-v4-flash", "tools": [tool("read")], "messages": all})
}

/// Tokens the next request renders for a faithfully replayed answer (thinking with tools):
/// reasoning, `⟦/THINK⟧`, content, each `⟦TOOL_CALL⟧ name\nargs`, `⟦EOS⟧`.
fn output_tokens(message: &Value) -> u64 {
    let mut total = count_tokens(message["reasoning_content"].as_str().unwrap()) + 1;
    total += count_tokens(message["content"].as_str().unwrap());
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let name = call["function"]["name"].as_str().unwrap();
        let arguments = call["function"]["arguments"].as_str().unwrap();
        total += 1 + count_tokens(&format!("{name}\n{arguments}"));
    }
    total + 1
}

#[tokio::test]
async fn an_append_extension_hits_the_shared_rendered_prefix_rounded_down_to_the_granularity() {
    let server = start(MockConfig::default()).await;
    let system = long_system("Be brief.");
    let thought = "First I read the main file, then I decide what to change in it. ".repeat(4);
    let text = format!("[[fake:tool read {{\"path\": \"src/main.rs\"}}]] [[fake:think {thought}]]");
    let user = json!({"role": "user", "content": text});
    let (prompt1, hit1, answer) =
        turn(&server, &tool_request(&system, std::slice::from_ref(&user))).await;
    assert_eq!(hit1, 0);
    let call_id = answer["tool_calls"][0]["id"].as_str().unwrap().to_owned();
    let result = json!({"role": "tool", "tool_call_id": call_id, "content": "fn main() {}"});
    let (prompt2, hit2, _) =
        turn(&server, &tool_request(&system, &[user, answer.clone(), result])).await;
    let completed1 = prompt1 + output_tokens(&answer);
    assert!(prompt2 > completed1 + 1);
    assert_eq!(hit2, completed1 / G * G);
    assert!(hit2 > prompt1 / G * G, "the output of request 1 is cached too");

    let record = &server.requests()[1];
    assert_eq!((record.hit, record.miss, record.prompt_tokens), (hit2, prompt2 - hit2, prompt2));
}

#[tokio::test]
async fn a_repeated_request_never_hits_its_final_token() {
    let server = start(MockConfig::default()).await;
    let body = tool_request(&long_system("x"), &[json!({"role": "user", "content": "hi"})]);
    let (prompt, _, _) = turn(&server, &body).await;
    let (_, hit, _) = turn(&server, &body).await;
    assert_eq!(hit, (prompt - 1) / G * G);
}

#[tokio::test]
async fn a_changed_system_prompt_drops_the_hit_to_the_common_prefix() {
    let server = start(MockConfig::default()).await;
    let first = long_system("Answer in English.");
    let second = long_system("Answer in French.");
    let user = json!({"role": "user", "content": "hello"});
    turn(&server, &tool_request(&first, std::slice::from_ref(&user))).await;
    let (_, hit, _) = turn(&server, &tool_request(&second, &[user])).await;
    let render =
        |system: &str| tokenize(&[Segment::Marker(Marker::Bos), Segment::Text(system.to_owned())]);
    let (a, b) = (render(&first), render(&second));
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count() as u64;
    assert!(common > G);
    assert_eq!(hit, common / G * G);
}

fn units_config() -> MockConfig {
    let mut config = MockConfig::default();
    config.cache.mode = CacheMode::Units;
    config.strictness.reasoning_passback = PassbackRule::Off;
    config
}

#[tokio::test]
async fn in_units_mode_dropping_replayed_reasoning_falls_back_to_the_end_of_input_unit() {
    let long_reasoning =
        "I should consider the question from several angles before answering it. ".repeat(12);
    let mut hits = Vec::new();
    let mut prompt1 = 0;
    let mut completed1 = 0;
    for faithful in [true, false] {
        let server = start(units_config()).await;
        control(
            &server,
            "/_fake/script",
            &json!({"reasoning": long_reasoning, "content": "Done."}),
        )
        .await;
        let system = long_system("Units.");
        let user = json!({"role": "user", "content": "question"});
        let (prompt, _, answer) =
            turn(&server, &tool_request(&system, std::slice::from_ref(&user))).await;
        prompt1 = prompt;
        completed1 = prompt + output_tokens(&answer);
        let mut replay = answer.clone();
        if !faithful {
            replay.as_object_mut().unwrap().remove("reasoning_content");
        }
        let next = json!({"role": "user", "content": "and then?"});
        let (_, hit, _) = turn(&server, &tool_request(&system, &[user, replay, next])).await;
        hits.push(hit);
    }
    assert_eq!(hits[0], completed1 / G * G, "faithful replay hits the end-of-output unit");
    assert_eq!(hits[1], prompt1 / G * G, "unfaithful replay only hits the end-of-input unit");
    assert!(hits[1] < hits[0]);
}

#[tokio::test]
async fn in_units_mode_a_partly_overlapping_prompt_hits_nothing_until_a_common_prefix_unit_exists()
{
    let server = start(units_config()).await;
    let system = long_system("Shared.");
    let a = tool_request(&system, &[json!({"role": "user", "content": "first question"})]);
    let b = tool_request(&system, &[json!({"role": "user", "content": "second question"})]);
    let c = tool_request(&system, &[json!({"role": "user", "content": "third question"})]);
    turn(&server, &a).await;
    // A+B after A+C: no whole unit of A's is a prefix of B.
    let (_, hit_b, _) = turn(&server, &b).await;
    assert_eq!(hit_b, 0);
    // B's arrival persisted the common prefix of A and B, so C hits it.
    let (_, hit_c, _) = turn(&server, &c).await;
    assert!(hit_c > 0);
    let units = get(&server, "/_fake/cache", None).await.json();
    let origins: Vec<&str> = units["namespaces"][0]["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|unit| unit["origin"].as_str().unwrap())
        .collect();
    assert!(origins.contains(&"lcp") && origins.contains(&"input") && origins.contains(&"output"));
}

#[tokio::test]
async fn different_user_ids_and_models_never_share_units() {
    let server = start(MockConfig::default()).await;
    let mut body = tool_request(&long_system("ns"), &[json!({"role": "user", "content": "hi"})]);
    body["user_id"] = json!("alice");
    turn(&server, &body).await;
    assert!(turn(&server, &body).await.1 > 0);
    body["user_id"] = json!("bob");
    assert_eq!(turn(&server, &body).await.1, 0);
    body["model"] = json!("deepseek-v4-pro");
    assert_eq!(turn(&server, &body).await.1, 0);
}

#[tokio::test]
async fn miss_next_and_clear_drop_hits_without_errors() {
    let server = start(MockConfig::default()).await;
    let body = tool_request(&long_system("c"), &[json!({"role": "user", "content": "hi"})]);
    turn(&server, &body).await;
    control(&server, "/_fake/cache/miss-next", &json!({"count": 1})).await;
    assert_eq!(turn(&server, &body).await.1, 0);
    assert!(turn(&server, &body).await.1 > 0);

    let view = get(&server, "/_fake/cache", None).await.json();
    let namespace = &view["namespaces"][0];
    assert_eq!(namespace["namespace"]["key"], "****test");
    assert_eq!(namespace["units"][0]["origin"], "block");
    assert_eq!(namespace["units"][0]["length"], G);

    control(&server, "/_fake/cache/clear", &json!({})).await;
    assert_eq!(turn(&server, &body).await.1, 0);
}

#[tokio::test]
async fn units_become_visible_only_after_the_persist_delay() {
    let server = start(MockConfig::default()).await;
    let body = tool_request(&long_system("d"), &[json!({"role": "user", "content": "hi"})]);
    control(&server, "/_fake/fault", &json!({"persist_delay_ms": 3_600_000})).await;
    turn(&server, &body).await;
    let view = get(&server, "/_fake/cache", None).await.json();
    let units = view["namespaces"][0]["units"].as_array().unwrap();
    assert!(!units.is_empty());
    assert!(units.iter().all(|unit| unit["visible"] == false));
    assert_eq!(turn(&server, &body).await.1, 0);
}

#[tokio::test]
async fn rejected_and_http_fault_requests_persist_nothing() {
    let server = start(MockConfig::default()).await;
    let body = tool_request(&long_system("r"), &[json!({"role": "user", "content": "hi"})]);
    control(&server, "/_fake/fault", &json!({"http": {"status": 500}})).await;
    assert_eq!(chat(&server, &body).await.status, 500);
    let mut bad = body.clone();
    bad["max_tokens"] = json!(10_000_000);
    assert_eq!(chat(&server, &bad).await.status, 400);
    let view = get(&server, "/_fake/cache", None).await.json();
    assert_eq!(view["namespaces"], json!([]));
    assert_eq!(turn(&server, &body).await.1, 0);
}

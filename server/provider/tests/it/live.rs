//! The one test against the real DeepSeek API; it runs only when `DEEPSEEK_API_KEY` is set.
//!
//! `DEEPSEEK_BASE_URL` (default `https://api.deepseek.com`) and `DEEPSEEK_MODEL` (default
//! `deepseek-v4-flash`) override the endpoint and model.

use std::sync::Arc;
use std::time::Duration;

use dsh_provider::{ApiKey, DEFAULT_BASE_URL, DeepSeek, DeepSeekConfig};
use dsh_session::Message;

use crate::support::{body, call_config, collect, request, user};

#[tokio::test]
async fn a_request_extending_an_earlier_one_hits_the_live_prefix_cache() {
    let Ok(key) = ApiKey::from_env() else {
        println!("skipped: DEEPSEEK_API_KEY not set");
        return;
    };
    let base_url =
        std::env::var("DEEPSEEK_BASE_URL").unwrap_or_else(|_| DEFAULT_BASE_URL.to_owned());
    let model = std::env::var("DEEPSEEK_MODEL").unwrap_or_else(|_| "deepseek-v4-flash".to_owned());
    let deepseek = DeepSeek::new(DeepSeekConfig::new(base_url, key)).unwrap();

    // A long, stable first user message makes a prefix well over the cache's block size.
    let long_text: String =
        (0..400).map(|i| format!("Fact {i}: the number {i} squared is {}.\n", i * i)).collect();
    let mut config = call_config(&model, false);
    config.max_tokens = 32;
    let first = request(
        config.clone(),
        vec![],
        vec![user(&format!("{long_text}\nReply with one word: ok."))],
    );
    let outcome = collect(&deepseek, body(&first)).await;
    let (_, first_usage) = outcome.expect_success();
    println!("first request usage: {first_usage:?}");

    let mut messages = first.messages.clone();
    messages.push(Arc::new(Message::Assistant(outcome.message())));
    messages.push(user("Reply with one word again: ok."));
    let second = request(config, vec![], messages);
    // Cache units are written asynchronously: give the provider a few chances.
    let mut hit = 0;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (_, usage) = collect(&deepseek, body(&second)).await.expect_success();
        println!("second request usage: {usage:?}");
        assert_eq!(usage.prompt_tokens, usage.cache_hit_tokens + usage.cache_miss_tokens);
        hit = usage.cache_hit_tokens;
        if hit > 0 {
            break;
        }
    }
    assert!(hit > 0, "the second request never hit the prefix cache");
}

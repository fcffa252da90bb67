//! Unit tests of the cache store, with time passed in explicitly.

use tokio::time::{Duration, Instant};

use super::*;

fn tokens(range: std::ops::Range<u64>) -> Vec<Token> {
    range.map(|id| Token(id | 1 << 63)).collect()
}

fn namespace() -> Namespace {
    vec![("key".to_owned(), "sk-test".to_owned())]
}

#[test]
fn block_mode_hits_the_longest_shared_prefix_rounded_down() {
    let config = CacheConfig::default();
    let mut cache = Cache::default();
    let now = Instant::now();
    let first = tokens(0..300);
    cache.persist_input(&config, &namespace(), &first, now, Duration::ZERO);
    let mut second = tokens(0..200);
    second.extend(tokens(1000..1100));
    assert_eq!(cache.hit(&config, &namespace(), &second, now), 192);
    let other = vec![("key".to_owned(), "sk-other".to_owned())];
    assert_eq!(cache.hit(&config, &other, &second, now), 0);
}

#[test]
fn the_final_token_is_withheld_unless_configured_otherwise() {
    let mut config = CacheConfig::default();
    let mut cache = Cache::default();
    let now = Instant::now();
    let prompt = tokens(0..128);
    cache.persist_input(&config, &namespace(), &prompt, now, Duration::ZERO);
    assert_eq!(cache.hit(&config, &namespace(), &prompt, now), 64);
    config.withhold_final_block = false;
    assert_eq!(cache.hit(&config, &namespace(), &prompt, now), 128);
}

#[test]
fn units_are_invisible_until_the_persist_delay_has_passed() {
    let config = CacheConfig::default();
    let mut cache = Cache::default();
    let now = Instant::now();
    let prompt = tokens(0..200);
    cache.persist_input(&config, &namespace(), &prompt, now, Duration::from_millis(500));
    assert_eq!(cache.hit(&config, &namespace(), &prompt, now), 0);
    let later = now + Duration::from_millis(500);
    assert_eq!(cache.hit(&config, &namespace(), &prompt, later), 192);
}

#[test]
fn units_expire_a_ttl_after_their_last_use() {
    let config = CacheConfig { ttl_ms: Some(1000), ..CacheConfig::default() };
    let mut cache = Cache::default();
    let now = Instant::now();
    let prompt = tokens(0..200);
    cache.persist_input(&config, &namespace(), &prompt, now, Duration::ZERO);
    // A use at 900 ms keeps the used unit alive until 1900 ms.
    assert_eq!(cache.hit(&config, &namespace(), &prompt, now + Duration::from_millis(900)), 192);
    assert_eq!(cache.hit(&config, &namespace(), &prompt, now + Duration::from_millis(1800)), 192);
    assert_eq!(cache.hit(&config, &namespace(), &prompt, now + Duration::from_millis(5000)), 0);
}

#[test]
fn units_mode_stores_input_output_interval_and_common_prefix_units_only() {
    let config = CacheConfig {
        mode: CacheMode::Units,
        interval: 100,
        granularity: 10,
        withhold_final_block: false,
        ..CacheConfig::default()
    };
    let mut cache = Cache::default();
    let now = Instant::now();
    let prompt = tokens(0..250);
    cache.persist_input(&config, &namespace(), &prompt, now, Duration::ZERO);
    let mut completed = prompt.clone();
    completed.extend(tokens(5000..5070));
    cache.persist_output(&config, &namespace(), &completed, now, Duration::ZERO);
    // Interval units at 100, 200 (and 300 for the completion), the input at 250, output at 320.
    let lengths: Vec<u64> =
        cache.spaces[&namespace()].units.keys().map(|(length, _)| *length).collect();
    assert_eq!(lengths, [100, 200, 250, 300, 320]);
    // A prompt sharing 240 tokens only hits the interval unit at 200.
    let mut diverging = tokens(0..240);
    diverging.extend(tokens(9000..9100));
    assert_eq!(cache.hit(&config, &namespace(), &diverging, now), 200);
    // Its arrival stores the common prefix, 240, as a unit.
    cache.persist_input(&config, &namespace(), &diverging, now, Duration::ZERO);
    let mut third = tokens(0..240);
    third.extend(tokens(7000..7100));
    assert_eq!(cache.hit(&config, &namespace(), &third, now), 240);
    assert!(cache.spaces[&namespace()].units.keys().any(|(length, _)| *length == 240));
}

#[test]
fn miss_next_zeroes_exactly_the_armed_number_of_hits() {
    let config = CacheConfig::default();
    let mut cache = Cache::default();
    let now = Instant::now();
    let prompt = tokens(0..100);
    cache.persist_input(&config, &namespace(), &prompt, now, Duration::ZERO);
    cache.arm_miss_next(2);
    assert_eq!(cache.hit(&config, &namespace(), &prompt, now), 0);
    assert_eq!(cache.hit(&config, &namespace(), &prompt, now), 0);
    assert_eq!(cache.hit(&config, &namespace(), &prompt, now), 64);
}

//! Tests of key handling and the retry policy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::{ApiKey, RetryPolicy};

#[test]
fn an_api_key_never_prints_itself() {
    let key = ApiKey::new("sk-0123456789abcdef").unwrap();
    assert_eq!(key.to_string(), "sk-…****");
    assert_eq!(format!("{key:?}"), "ApiKey(sk-…****)");
    let other = ApiKey::new("secret-token").unwrap();
    assert!(!format!("{other} {other:?}").contains("secret"));
}

#[test]
fn an_empty_key_is_a_config_error() {
    assert!(ApiKey::new("  \n").is_err());
}

#[cfg(unix)]
#[test]
fn a_key_file_readable_by_others_is_refused_and_a_private_one_is_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("dsh-provider-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("key");
    std::fs::write(&path, "sk-fromfile\n").unwrap();

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = ApiKey::from_file(&path).unwrap_err().to_string();
    assert!(error.contains("readable by group or others") && error.contains("0644"), "{error}");
    assert!(!error.contains("sk-fromfile"), "{error}");

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(ApiKey::from_file(&path).unwrap().expose(), "sk-fromfile");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(ApiKey::from_file(&path).unwrap().expose(), "sk-fromfile");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn backoff_grows_exponentially_within_jitter_bounds_and_is_capped() {
    let policy = RetryPolicy {
        max_attempts: 10,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(1000),
    };
    assert_eq!(policy.backoff_with(1, 1.0), Duration::from_millis(100));
    assert_eq!(policy.backoff_with(2, 1.0), Duration::from_millis(200));
    assert_eq!(policy.backoff_with(3, 0.0), Duration::from_millis(200));
    assert_eq!(policy.backoff_with(9, 1.0), Duration::from_millis(1000));
    assert_eq!(policy.backoff_with(u32::MAX, 1.0), Duration::from_millis(1000));
    for attempt in 1..12 {
        let delay = policy.backoff(attempt);
        let nominal = policy.backoff_with(attempt, 1.0);
        assert!(delay >= nominal / 2 && delay <= nominal, "{attempt}: {delay:?}");
    }
}

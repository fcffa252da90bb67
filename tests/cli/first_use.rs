//! What a new user trips over: a prompt that lingers after its turn, tomorrow's date in the
//! evening, `dsh status` starting a daemon, an empty session logged before a missing key is
//! noticed, and the README's first steps needing a restart.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dsh_session::EventData;
use serde_json::Value;

use crate::support::{DaemonGuard, Env, describe, run, stdout};

#[tokio::test(flavor = "multi_thread")]
async fn prompt_returns_as_soon_as_its_turn_is_printed() {
    let env = Env::new().await;
    // The daemon runs before the clock starts: what is timed is the prompt alone.
    env.dsh_ok(&["sessions"]).await;
    let started = Instant::now();
    let (_, output) = env.prompt_new("Say hi.").await;
    let elapsed = started.elapsed();
    assert!(output.status.success(), "{}", describe(&output));
    assert!(stdout(&output).contains("turn 1 ended: completed"), "{}", describe(&output));
    // The command used to wait a fixed 2 s for late events after its turn had ended.
    assert!(elapsed < Duration::from_secs(2), "dsh prompt took {elapsed:?} for a one-step turn");
}

/// A POSIX time zone whose calendar date differs from UTC's right now, and that date.
fn zone_on_another_day() -> (&'static str, String) {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let (_, _, _, hour, ..) = dsh_store::utc_from_unix_ms(now_ms);
    // UTC+13 is already tomorrow from 11:00 UTC on; UTC−11 is still yesterday before 11:00.
    let (zone, offset_hours): (&str, i64) =
        if hour >= 11 { ("XXX-13", 13) } else { ("XXX+11", -11) };
    let local_ms = (now_ms as i64 + offset_hours * 3_600_000) as u64;
    let (year, month, day, ..) = dsh_store::utc_from_unix_ms(local_ms);
    (zone, format!("{year:04}-{month:02}-{day:02}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_date_context_is_the_daemons_local_date() {
    let env = Env::new().await;
    let (zone, local_date) = zone_on_another_day();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let mut command =
        env.command(&["prompt", "--yes", "--workspace", &workspace, "What day is it?"]);
    // The daemon this command starts inherits the zone.
    command.env("TZ", zone);
    let output = run(command).await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = crate::support::session_id_of(&output);
    let dates: Vec<String> = env
        .events(&session)
        .into_iter()
        .filter_map(|event| match event.data {
            EventData::ContextMessage(context) if context.source.as_deref() == Some("date") => {
                Some(context.text)
            }
            _ => None,
        })
        .collect();
    assert_eq!(dates, [format!("Today's date is {local_date}.")], "TZ={zone}");
}

#[tokio::test(flavor = "multi_thread")]
async fn status_says_no_daemon_runs_and_starts_none() {
    let env = Env::new().await;
    let _guard = DaemonGuard(env.home.clone());
    let output = env.dsh(&["status"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(stdout(&output).contains("no dsh daemon is running"), "{}", describe(&output));
    let output = env.dsh(&["--json", "status"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["running"], false, "{status}");
    assert!(!env.socket().exists(), "dsh status started a daemon");
    assert!(!env.home.join("daemon.lock").exists(), "dsh status started a daemon");
}

#[tokio::test(flavor = "multi_thread")]
async fn prompt_without_a_key_logs_nothing() {
    let env = Env::new().await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = run(env.command_with_key("", &["prompt", "--workspace", &workspace, "Hi."])).await;
    assert!(!output.status.success(), "{}", describe(&output));
    let stderr = crate::support::stderr(&output);
    assert!(stderr.contains("no API key"), "{}", describe(&output));
    assert!(!stderr.contains("session "), "a session was announced: {}", describe(&output));
    assert!(env.log_files().is_empty(), "logged without a key: {:?}", env.log_files());
}

/// The README's first steps, in order, from a fresh home: `dsh prompt` without a key (a
/// daemon starts and says what is missing), then the offline mock with a key and `--base-url`
/// — served by the same daemon, no restart: the session is pinned to the ad-hoc profile
/// `deepseek@URL` and keeps going there; a later session without `--base-url` goes to the
/// configured profile, not to the mock.
#[tokio::test(flavor = "multi_thread")]
async fn the_readme_flow_needs_no_restart_a_base_url_and_a_key_go_with_the_command() {
    let env = Env::new().await;
    let mock = env.mock.base_url();
    // 1. No key, no base URL.
    let first = run(env.command_plain("", &["prompt", "explain"])).await;
    assert!(!first.status.success(), "{}", describe(&first));
    assert!(crate::support::stderr(&first).contains("no API key"), "{}", describe(&first));
    let pid = env.daemon_pid();
    // 2. The mock, with its key and its URL: the same daemon runs the turn.
    let mut second = env.command_plain("sk-test", &["--base-url", &mock, "prompt", "hi"]);
    second.env("DEEPSEEK_API_KEY", "sk-test");
    let second = run(second).await;
    assert!(second.status.success(), "{}", describe(&second));
    assert!(stdout(&second).contains("turn 1 ended: completed"), "{}", describe(&second));
    assert_eq!(env.daemon_pid(), pid, "the daemon was restarted");
    assert_eq!(env.requests().len(), 1, "the request went to the mock");
    // The session is pinned to the URL, logged as its profile.
    let sessions: Vec<PathBuf> = env.log_files().into_iter().map(|(path, _)| path).collect();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let session = sessions[0].file_stem().unwrap().to_str().unwrap().to_owned();
    let log = env.log_values(&session);
    let ad_hoc = format!("deepseek@{}", mock.trim_end_matches('/'));
    assert_eq!(log[0]["data"]["pin"]["profile"], ad_hoc.as_str(), "{}", log[0]);
    let header = log.iter().find(|e| e["type"] == "request/header").unwrap();
    assert_eq!(header["data"]["header"]["config"]["profile"], ad_hoc.as_str(), "{header}");
    // 3. The session goes on at the mock without `--base-url`.
    let mut third = env.command_plain("sk-test", &["prompt", "--session", &session, "go on"]);
    third.env("DEEPSEEK_API_KEY", "sk-test");
    let third = run(third).await;
    assert!(third.status.success(), "{}", describe(&third));
    assert_eq!(env.requests().len(), 2, "the pinned session went to the mock again");
    // 4. A new session without `--base-url` goes to the configured profile (unreachable
    // here), not to the mock: a base URL is a session's, never the daemon's.
    let mut fourth = env.command_plain("sk-test", &["prompt", "elsewhere"]);
    fourth.env("DEEPSEEK_API_KEY", "sk-test");
    let fourth = run(fourth).await;
    assert_eq!(env.requests().len(), 2, "{}", describe(&fourth));
    // A URL that could carry a secret is refused, naming why; nothing is logged for it.
    let mut fifth = env
        .command_plain("sk-test", &["--base-url", "http://user:pw@127.0.0.1:9/v1", "prompt", "hi"]);
    fifth.env("DEEPSEEK_API_KEY", "sk-test");
    let fifth = run(fifth).await;
    assert!(!fifth.status.success(), "{}", describe(&fifth));
    let message = crate::support::stderr(&fifth);
    assert!(
        message.contains("user, a query or a fragment") && !message.contains("pw@"),
        "{message}"
    );
}

/// `dsh --base-url URL fork S` moves the fork to URL and nothing else: its profile and model
/// stay the parent's; `DEEPSEEK_BASE_URL` in the environment moves no fork.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_moved_to_another_url_keeps_its_parents_profile_and_model() {
    let env = Env::new().await;
    let mock = env.mock.base_url();
    let created = env.dsh_ok(&["--model", "deepseek-v4-pro", "prompt", "hi"]).await;
    let parent = crate::support::session_id_of(&created);
    let pin = |session: &str| env.log_values(session)[0]["data"]["pin"].clone();
    let other = "http://127.0.0.1:9/v1";
    let forked = run(env.command_plain(&env.key, &["--base-url", other, "fork", &parent])).await;
    assert!(forked.status.success(), "{}", describe(&forked));
    let fork = stdout(&forked).trim().rsplit(' ').next().unwrap().to_owned();
    assert_eq!(pin(&fork)["profile"], format!("deepseek@{other}"), "{}", pin(&fork));
    assert_eq!(pin(&fork)["model"], "deepseek-v4-pro", "{}", pin(&fork));
    assert_eq!(pin(&fork)["maxTokens"], pin(&parent)["maxTokens"]);
    assert_eq!(pin(&fork)["thinking"], pin(&parent)["thinking"]);
    // From the environment, the URL moves nothing: the fork keeps the parent's pin whole.
    let mut command = env.command_plain(&env.key, &["fork", &parent]);
    command.env("DEEPSEEK_BASE_URL", other);
    let forked = run(command).await;
    assert!(forked.status.success(), "{}", describe(&forked));
    let fork = stdout(&forked).trim().rsplit(' ').next().unwrap().to_owned();
    assert_eq!(pin(&fork), pin(&parent));
    assert_eq!(pin(&parent)["profile"], format!("deepseek@{}", mock.trim_end_matches('/')));
}

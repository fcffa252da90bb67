//! What a new user trips over: a prompt that lingers after its turn, tomorrow's date in the
//! evening, `dsh status` starting a daemon, an empty session logged before a missing key is
//! noticed, and a refusal that does not say which daemon refused.

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

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_with_another_base_url_refuses_and_names_its_pid() {
    let env = Env::new().await;
    env.dsh_ok(&["sessions"]).await;
    let pid = env.daemon_pid();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"));
    command
        .arg("--home")
        .arg(&env.home)
        .args(["--base-url", "http://127.0.0.1:9", "sessions"])
        .current_dir(&env.workspace)
        .env_remove("DEEPSEEK_BASE_URL")
        .kill_on_drop(true);
    let output = run(command).await;
    assert!(!output.status.success(), "{}", describe(&output));
    let stderr = crate::support::stderr(&output);
    assert!(stderr.contains(&format!("(pid {pid})")), "{}", describe(&output));
    assert!(stderr.contains("dsh shutdown"), "{}", describe(&output));
}

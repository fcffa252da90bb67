//! The runner against real shell scripts: exit codes, standard input, the environment, the
//! workspace, the output cap, invalid UTF-8, a timeout that kills the whole group, and
//! programs that cannot start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use dsh_session::{HookEvent, HookOutcome};
use tokio_util::sync::CancellationToken;

use super::*;

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn spec(program: PathBuf, event: HookEvent, timeout: Duration) -> HookSpec {
    HookSpec {
        name: "h".to_owned(),
        source: "/u/config.toml:1".to_owned(),
        event,
        matcher: None,
        program,
        args: Vec::new(),
        timeout,
    }
}

async fn go(hook: &HookSpec, set: &HookSet, workspace: &Path) -> HookReport {
    let input =
        serde_json::json!({"hook_event_name": hook.event.name(), "tool_name": "run_command"});
    run_hook(hook, set, &input, workspace, Some(("c1", "run_command")), &CancellationToken::new())
        .await
}

#[tokio::test]
async fn exit_codes_map_to_outcomes_by_event() {
    let dir = tempfile::tempdir().unwrap();
    let set = HookSet::default();
    let cases = [
        ("exit 0", HookEvent::PreToolUse, HookOutcome::Ok, None),
        ("echo no >&2; exit 2", HookEvent::PreToolUse, HookOutcome::Blocked, None),
        ("exit 2", HookEvent::Stop, HookOutcome::Blocked, None),
        ("exit 2", HookEvent::SessionStart, HookOutcome::Failed, Some("cannot use to block")),
        ("exit 1", HookEvent::PostToolUse, HookOutcome::Failed, Some("exit code 1")),
        ("kill -9 $$", HookEvent::PreToolUse, HookOutcome::Failed, Some("signal 9")),
    ];
    for (index, (body, event, outcome, error)) in cases.into_iter().enumerate() {
        let program = script(dir.path(), &format!("s{index}"), body);
        let report = go(&spec(program, event, Duration::from_secs(10)), &set, dir.path()).await;
        assert_eq!(report.run.outcome, outcome, "{body}");
        match error {
            Some(error) => assert!(report.run.error.as_deref().unwrap().contains(error), "{body}"),
            None => assert_eq!(report.run.error, None, "{body}"),
        }
        assert_eq!(report.run.call_id.as_deref(), Some("c1"));
    }
}

#[tokio::test]
async fn it_reads_the_json_runs_in_the_workspace_without_the_removed_variables() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let program = script(
        dir.path(),
        "env.sh",
        "cat; echo; pwd; echo \"removed=${HOME:-unset} kept=${PATH:+set}\"",
    );
    // Any variable the set names is removed (the daemon names every provider key's); the
    // test's own process has `HOME` (no test may set a variable: that is unsafe).
    assert!(std::env::var_os("HOME").is_some());
    let set = HookSet { hooks: Vec::new(), env_remove: vec!["HOME".to_owned()] };
    let report =
        go(&spec(program, HookEvent::PreToolUse, Duration::from_secs(10)), &set, workspace.path())
            .await;
    let lines: Vec<&str> = report.stdout.lines().collect();
    let input: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(input["tool_name"], "run_command");
    let root = workspace.path().canonicalize().unwrap();
    assert_eq!(Path::new(lines[1]).canonicalize().unwrap(), root);
    assert_eq!(lines[2], "removed=unset kept=set");
    assert_eq!(report.run.outcome, HookOutcome::Ok);
}

#[tokio::test]
async fn megabytes_of_output_are_capped_and_invalid_utf8_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let program = script(
        dir.path(),
        "loud.sh",
        "head -c 3000000 /dev/zero | tr '\\0' x; printf 'bad \\377 byte' >&2",
    );
    let report = go(
        &spec(program, HookEvent::PostToolUse, Duration::from_secs(30)),
        &HookSet::default(),
        dir.path(),
    )
    .await;
    assert_eq!(report.run.outcome, HookOutcome::Ok);
    assert_eq!(report.run.stdout_bytes, 3_000_000);
    assert!(report.run.stdout_truncated && !report.run.stderr_truncated);
    assert!(report.stdout.len() < HOOK_OUTPUT_CAP + 200, "{}", report.stdout.len());
    assert!(report.stdout.contains("bytes of output cut; 3000000 bytes in total"));
    assert!(report.run.invalid_utf8);
    assert_eq!(report.stderr, "bad \u{fffd} byte");
}

#[tokio::test]
async fn a_hook_that_hangs_is_killed_at_its_timeout_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    let program = script(
        dir.path(),
        "hang.sh",
        &format!("sleep 300 & echo $! > {}; wait", pid_file.display()),
    );
    let started = Instant::now();
    let report = go(
        &spec(program, HookEvent::PreToolUse, Duration::from_secs(1)),
        &HookSet::default(),
        dir.path(),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(report.run.outcome, HookOutcome::Failed);
    assert!(report.run.error.as_deref().unwrap().starts_with("timed out after 1 s"));
    let grandchild: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    // Killed, and reaped by the shell's end or by init: give the kernel a moment.
    let mut gone = false;
    for _ in 0..50 {
        let status = std::fs::read_to_string(format!("/proc/{grandchild}/status"));
        if status.is_err() || status.unwrap().contains("State:\tZ") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the hook's grandchild {grandchild} survived its timeout");
}

#[tokio::test]
async fn a_program_missing_or_not_executable_is_a_failed_run_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.sh");
    std::fs::write(&plain, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cases = [
        (plain, "is not executable"),
        (dir.path().join("gone"), "does not exist"),
        (PathBuf::from("plain.sh"), "not an absolute path"),
    ];
    for (program, says) in cases {
        let report = go(
            &spec(program, HookEvent::PreToolUse, Duration::from_secs(5)),
            &HookSet::default(),
            dir.path(),
        )
        .await;
        assert_eq!(report.run.outcome, HookOutcome::Failed);
        assert!(report.run.error.as_deref().unwrap().contains(says), "{:?}", report.run.error);
    }
}

#[tokio::test]
async fn a_hook_that_never_reads_its_input_still_runs() {
    let dir = tempfile::tempdir().unwrap();
    let program = script(dir.path(), "deaf.sh", "echo fine");
    let mut hook = spec(program, HookEvent::UserPromptSubmit, Duration::from_secs(5));
    hook.matcher = Some(regex::Regex::new("^(?:x)$").unwrap());
    assert!(hook.matches("x") && !hook.matches("xy"));
    let big = serde_json::json!({ "prompt": "p".repeat(1 << 20) });
    let report =
        run_hook(&hook, &HookSet::default(), &big, dir.path(), None, &CancellationToken::new())
            .await;
    assert_eq!(report.run.outcome, HookOutcome::Ok);
    assert_eq!(report.stdout, "fine\n");
}

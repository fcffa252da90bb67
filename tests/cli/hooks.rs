//! Hooks end to end (docs/hooks.md), against the mock with the real daemon and real shell
//! scripts as hooks: a `PreToolUse` hook blocks `rm` in `run_command` (the file survives, the
//! model reads the hook's reason in its next request, the log names the hook); a `PostToolUse`
//! hook's output reaches the next request as a logged note; a `UserPromptSubmit` hook refuses a
//! prompt (a typed error, no turn, nothing model-visible logged) and adds a note to the next;
//! a workspace's file that defines a hook is refused with its file and line, while `dsh config`
//! lists the user's hooks with their sources; a hook that hangs is killed at its timeout with
//! its grandchild and blocks its call (fail closed); one that prints megabytes of bytes that are
//! not all UTF-8 is capped, said; one that is not executable is refused when the configuration
//! is loaded and fails closed when it stops being executable later. Every session audits clean
//! and every request rebuilds byte for byte.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_session::{EventData, HookEvent, HookOutcome, HookRun};
use serde_json::json;

use crate::support::{Env, stdout, tool_reply};

/// Writes an executable shell script.
fn script(path: &Path, body: &str) -> PathBuf {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

fn hook_runs(env: &Env, session: &str) -> Vec<HookRun> {
    env.events(session)
        .into_iter()
        .filter_map(|event| match event.data {
            EventData::HookRun(run) => Some(run),
            _ => None,
        })
        .collect()
}

fn hook_notes(env: &Env, session: &str) -> Vec<String> {
    env.events(session)
        .into_iter()
        .filter_map(|event| match event.data {
            EventData::ContextMessage(note) if note.source.as_deref() == Some("hook") => {
                Some(note.text)
            }
            _ => None,
        })
        .collect()
}

fn all_output(output: &std::process::Output) -> String {
    format!("{}{}", stdout(output), String::from_utf8_lossy(&output.stderr))
}

async fn rebuilds_byte_for_byte(env: &Env, session: &str, first: usize) {
    let requests = env.requests();
    for (index, request) in requests.iter().enumerate().skip(first) {
        let step = (index - first) as u64 + 1;
        let rebuilt = env.saw_wire(session, step).await;
        assert!(rebuilt == request.body, "step {step} does not rebuild byte for byte");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_tool_use_hook_blocks_rm_and_a_post_tool_use_hook_adds_a_note() {
    let env = Env::new().await;
    let guard = script(
        &env.root.join("check-cmd.sh"),
        "input=$(cat)\ncase \"$input\" in\n  *'\"rm '*) echo \"no rm here: move files to ./trash instead\" >&2; exit 2 ;;\nesac\nexit 0",
    );
    let note = script(
        &env.root.join("post-note.sh"),
        "tool=$(sed -n 's/.*\"tool_name\":\"\\([a-z_]*\\)\".*/\\1/p')\necho \"post-note: $tool ran in $(pwd)\"",
    );
    std::fs::write(
        env.user_config(),
        format!(
            "[[hooks.PreToolUse]]\nname = \"guard\"\nmatcher = \"run_command\"\ncommand = \"{}\"\n\
             timeout_secs = 30\n\n[[hooks.PostToolUse]]\nmatcher = \"run_command\"\ncommand = \"{}\"\n",
            guard.display(),
            note.display()
        ),
    )
    .unwrap();
    std::fs::write(env.workspace.join("victim.txt"), "keep me\n").unwrap();
    env.script(json!([
        tool_reply("Remove it.", "run_command", json!({"command": "rm victim.txt"})),
        tool_reply("Then look.", "run_command", json!({"command": "echo looked"})),
        {"reasoning": "Done.", "content": "The file stays."},
    ]))
    .await;
    let (session, output) = env.prompt_new("clean up").await;
    assert!(output.status.success(), "{}", all_output(&output));
    let printed = stdout(&output);
    assert!(
        printed.contains("⛔ hook guard (PreToolUse, run_command) blocked: no rm here"),
        "{printed}"
    );

    // The file survives; the call never ran (no `tool/call` for it).
    assert_eq!(std::fs::read_to_string(env.workspace.join("victim.txt")).unwrap(), "keep me\n");
    let events = env.events(&session);
    let started: Vec<String> = events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ToolCall(call) => Some(call.call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 1, "only the second call ran");

    // The log names the hook: two PreToolUse runs (blocked, then ok), one PostToolUse run
    // (the blocked call has none).
    let runs = hook_runs(&env, &session);
    let summary: Vec<(&str, HookEvent, HookOutcome)> =
        runs.iter().map(|run| (run.hook.as_str(), run.event, run.outcome)).collect();
    assert_eq!(
        summary,
        [
            ("guard", HookEvent::PreToolUse, HookOutcome::Blocked),
            ("guard", HookEvent::PreToolUse, HookOutcome::Ok),
            ("PostToolUse.1", HookEvent::PostToolUse, HookOutcome::Ok),
        ]
    );
    assert_eq!(runs[0].exit_code, Some(2));
    assert!(runs[0].stderr.contains("no rm here"));
    assert!(runs[0].source.ends_with("config.toml:1"), "{}", runs[0].source);
    assert_eq!(runs[0].tool.as_deref(), Some("run_command"));
    assert_eq!(runs[1].call_id.as_deref(), Some(started[0].as_str()));

    // The model saw the reason as the blocked call's result, and the note after the second.
    let requests = env.requests();
    assert_eq!(requests.len(), 3);
    let body = |index: usize| String::from_utf8(requests[index].body.clone()).unwrap();
    assert!(!body(0).contains("no rm here"));
    assert!(body(1).contains("not run: blocked by hook `guard` (PreToolUse): no rm here"));
    let notes = hook_notes(&env, &session);
    let workspace = env.workspace.display().to_string();
    assert_eq!(
        notes,
        [format!(
            "[hook `PostToolUse.1`, PostToolUse, run_command]\npost-note: run_command ran in {workspace}"
        )]
    );
    assert!(!body(1).contains("post-note") && body(2).contains("post-note: run_command ran in"));
    rebuilds_byte_for_byte(&env, &session, 0).await;
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_prompt_submit_hook_refuses_a_prompt_and_annotates_the_next() {
    let env = Env::new().await;
    let gate = script(
        &env.root.join("gate.sh"),
        "if grep -q secret; then echo 'prompts must not hold secrets' >&2; exit 2; fi\n\
         echo 'the user works on branch main'",
    );
    std::fs::write(
        env.user_config(),
        format!("[[hooks.UserPromptSubmit]]\nname = \"gate\"\ncommand = \"{}\"\n", gate.display()),
    )
    .unwrap();
    let (session, output) = env.prompt_new("here is my secret: hunter2").await;
    assert_eq!(output.status.code(), Some(1), "{}", all_output(&output));
    let said = all_output(&output);
    assert!(
        said.contains("blocked by hook `gate` (UserPromptSubmit): prompts must not hold secrets"),
        "{said}"
    );
    // The typed error, as a script reads it.
    let output =
        env.dsh(&["prompt", "--yes", "--json", "--session", &session, "another secret"]).await;
    assert_eq!(output.status.code(), Some(1));
    let error = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|line| line["type"] == "error")
        .unwrap();
    assert_eq!(error["code"], 1020, "{error}");
    assert!(env.requests().is_empty(), "a refused prompt reaches no model");
    // Nothing model-visible, no turn: the session holds its meta and the hook's run.
    let kinds: Vec<&str> = env.events(&session).iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["session/meta", "hook/run", "hook/run"]);
    let runs = hook_runs(&env, &session);
    assert_eq!(
        (runs[0].event, runs[0].outcome),
        (HookEvent::UserPromptSubmit, HookOutcome::Blocked)
    );
    env.assert_audit_ok(&session).await;

    // The next prompt goes through, with the hook's output as a note after it.
    env.script(json!([{"reasoning": "Ok.", "content": "Hello."}])).await;
    let output = env.prompt_in(&session, "hello").await;
    assert!(output.status.success(), "{}", all_output(&output));
    let notes = hook_notes(&env, &session);
    assert_eq!(notes, ["[hook `gate`, UserPromptSubmit]\nthe user works on branch main"]);
    let body = String::from_utf8(env.requests()[0].body.clone()).unwrap();
    let prompt_at = body.find("hello").unwrap();
    let note_at = body.find("the user works on branch main").unwrap();
    assert!(prompt_at < note_at, "the note follows the prompt");
    assert!(!body.contains("hunter2"));
    rebuilds_byte_for_byte(&env, &session, 0).await;
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_cannot_define_a_hook_and_dsh_config_lists_the_users() {
    let env = Env::new().await;
    let fine = script(&env.root.join("fine.sh"), "exit 0");
    std::fs::write(
        env.user_config(),
        format!(
            "[[hooks.Stop]]\nname = \"tests\"\ncommand = \"{}\"\n\n[[hooks.PreToolUse]]\n\
             matcher = \"write_file\"\ncommand = \"{}\"\n",
            fine.display(),
            fine.display()
        ),
    )
    .unwrap();
    let listed = stdout(&env.dsh_ok(&["config"]).await);
    let user = env.user_config().display().to_string();
    assert!(listed.contains("hooks.tests.event"), "{listed}");
    assert!(listed.contains(&format!("{user}:1")), "{listed}");
    assert!(listed.contains("hooks.PreToolUse.1.matcher"), "{listed}");

    std::fs::create_dir_all(env.workspace.join(".dsh")).unwrap();
    std::fs::write(
        env.workspace.join(".dsh/config.toml"),
        "[hooks]\ndisable = [\"PreToolUse.1\"]\n\n[[hooks.PostToolUse]]\ncommand = \"/bin/true\"\n",
    )
    .unwrap();
    let workspace = env.workspace.display().to_string();
    let output = env.dsh(&["prompt", "--yes", "--workspace", &workspace, "hi"]).await;
    assert!(!output.status.success());
    let said = all_output(&output);
    assert!(
        said.contains(&format!(
            "{workspace}/.dsh/config.toml:4: `[[hooks.PostToolUse]]` cannot be set"
        )),
        "{said}"
    );
    assert!(env.requests().is_empty());

    // Disabling is what a workspace may do: `dsh config` shows where.
    std::fs::write(
        env.workspace.join(".dsh/config.toml"),
        "[hooks]\ndisable = [\"PreToolUse.1\"]\n",
    )
    .unwrap();
    let listed = stdout(&env.dsh_ok(&["config", "--workspace", &workspace]).await);
    let line = listed.lines().find(|line| line.contains("hooks.PreToolUse.1.enabled")).unwrap();
    assert!(line.contains("false") && line.contains(".dsh/config.toml:2"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_that_hang_flood_or_stop_being_executable_never_pass_silently() {
    let env = Env::new().await;
    let pid_file = env.root.join("grandchild.pid");
    let hang = script(
        &env.root.join("hang.sh"),
        &format!("sleep 300 &\necho $! > {}\nwait", pid_file.display()),
    );
    let loud = script(
        &env.root.join("loud.sh"),
        "head -c 3000000 /dev/zero | tr '\\0' x\nprintf '\\377 the end'",
    );
    let guard = script(&env.root.join("guard.sh"), "exit 0");
    std::fs::write(
        env.user_config(),
        format!(
            "[[hooks.PreToolUse]]\nname = \"hang\"\nmatcher = \"run_command\"\ncommand = \"{}\"\n\
             timeout_secs = 1\n\n[[hooks.PostToolUse]]\nname = \"loud\"\nmatcher = \"read_file\"\n\
             command = \"{}\"\n\n[[hooks.PreToolUse]]\nname = \"guard\"\nmatcher = \"list_dir\"\n\
             command = \"{}\"\n",
            hang.display(),
            loud.display(),
            guard.display()
        ),
    )
    .unwrap();
    std::fs::write(env.workspace.join("x.txt"), "x\n").unwrap();
    env.script(json!([
        tool_reply("Make it.", "run_command", json!({"command": "touch made.txt"})),
        tool_reply("Read it.", "read_file", json!({"path": "x.txt"})),
        {"reasoning": "Done.", "content": "Done."},
    ]))
    .await;
    let (session, output) = env.prompt_new("go").await;
    assert!(output.status.success(), "{}", all_output(&output));
    let printed = stdout(&output);
    assert!(
        printed.contains("⚠ hook hang (PreToolUse, run_command) failed: timed out after 1 s"),
        "{printed}"
    );

    // The hang: killed at its timeout with its grandchild; its call blocked (fail closed).
    assert!(!env.workspace.join("made.txt").exists(), "a failed PreToolUse hook blocks");
    let grandchild: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let mut gone = false;
    for _ in 0..100 {
        let status = std::fs::read_to_string(format!("/proc/{grandchild}/status"));
        if status.as_ref().is_err() || status.unwrap().contains("State:\tZ") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the hook's grandchild {grandchild} outlived its timeout");
    let runs = hook_runs(&env, &session);
    assert_eq!(runs[0].outcome, HookOutcome::Failed);
    assert!(runs[0].error.as_deref().unwrap().contains("every process of its group were killed"));
    let requests = env.requests();
    let body = |index: usize| String::from_utf8(requests[index].body.clone()).unwrap();
    assert!(body(1).contains("blocked: hook `hang` (PreToolUse) failed: timed out after 1 s"));

    // The flood: capped, the cut and the invalid UTF-8 said, in the log and the note.
    let loud_run = runs.iter().find(|run| run.hook == "loud").unwrap();
    assert_eq!(loud_run.stdout_bytes, 3_000_009);
    assert!(loud_run.stdout_truncated && loud_run.invalid_utf8);
    let notes = hook_notes(&env, &session);
    assert_eq!(notes.len(), 1);
    assert!(notes[0].len() < 17 * 1024, "{} bytes", notes[0].len());
    assert!(notes[0].contains("bytes of output cut; 3000009 bytes in total"));
    assert!(notes[0].ends_with("\u{fffd} the end"));
    assert!(body(2).contains("bytes of output cut; 3000009 bytes in total"));
    rebuilds_byte_for_byte(&env, &session, 0).await;
    env.assert_audit_ok(&session).await;

    // No longer executable after the configuration was loaded: its run fails and blocks.
    std::fs::set_permissions(&guard, std::fs::Permissions::from_mode(0o644)).unwrap();
    env.script(json!([
        tool_reply("List.", "list_dir", json!({"path": "."})),
        {"reasoning": "Done.", "content": "Done."},
    ]))
    .await;
    let output = env.prompt_in(&session, "list").await;
    assert!(output.status.success(), "{}", all_output(&output));
    let runs = hook_runs(&env, &session);
    let last = runs.last().unwrap();
    assert_eq!((last.hook.as_str(), last.outcome), ("guard", HookOutcome::Failed));
    assert!(last.error.as_deref().unwrap().contains("is not executable"), "{last:?}");
    let requests = env.requests();
    let last_body = String::from_utf8(requests.last().unwrap().body.clone()).unwrap();
    assert!(last_body.contains("blocked: hook `guard` (PreToolUse) failed: cannot start"));
    env.assert_audit_ok(&session).await;

    // Loaded that way, the configuration is refused at the hook's line: no daemon, no request.
    let other = Env::new().await;
    let plain = other.root.join("plain.sh");
    std::fs::write(&plain, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::write(
        other.user_config(),
        format!("profile = \"deepseek\"\n\n[[hooks.Stop]]\ncommand = \"{}\"\n", plain.display()),
    )
    .unwrap();
    let workspace = other.workspace.display().to_string();
    let output = other.dsh(&["prompt", "--yes", "--workspace", &workspace, "hi"]).await;
    assert!(!output.status.success());
    let said = all_output(&output);
    let user = other.user_config().display().to_string();
    assert!(said.contains(&format!("{user}:3: hook `Stop.1`: its command")), "{said}");
    assert!(said.contains("is not executable"), "{said}");
    assert!(other.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_start_stop_and_pre_compact_hooks_run_where_they_belong() {
    let env = Env::new().await;
    let compacted = env.root.join("compacted");
    let start = script(
        &env.root.join("start.sh"),
        "source=$(sed -n 's/.*\"source\":\"\\([a-z]*\\)\".*/\\1/p')\necho \"session context: $source\"",
    );
    let stop = script(
        &env.root.join("stop.sh"),
        "if grep -q '\"stop_hook_active\":false'; then echo 'run the tests first' >&2; exit 2; fi",
    );
    let pre_compact = script(
        &env.root.join("pre-compact.sh"),
        &format!("sed -n 's/.*\"trigger\":\"\\([a-z]*\\)\".*/\\1/p' > {}", compacted.display()),
    );
    std::fs::write(
        env.user_config(),
        format!(
            "[[hooks.SessionStart]]\ncommand = \"{}\"\n\n[[hooks.Stop]]\nname = \"tests\"\n\
             command = \"{}\"\n\n[[hooks.PreCompact]]\ncommand = \"{}\"\n",
            start.display(),
            stop.display(),
            pre_compact.display()
        ),
    )
    .unwrap();
    env.script(json!([
        {"reasoning": "Easy.", "content": "Done."},
        {"reasoning": "Tests.", "content": "Tests pass. Done."},
    ]))
    .await;
    let (session, output) = env.prompt_new("fix it").await;
    assert!(output.status.success(), "{}", all_output(&output));
    assert!(stdout(&output).contains("⛔ hook tests (Stop) blocked: run the tests first"));

    let runs = hook_runs(&env, &session);
    let summary: Vec<(HookEvent, HookOutcome)> =
        runs.iter().map(|run| (run.event, run.outcome)).collect();
    assert_eq!(
        summary,
        [
            (HookEvent::SessionStart, HookOutcome::Ok),
            (HookEvent::Stop, HookOutcome::Blocked),
            (HookEvent::Stop, HookOutcome::Ok),
        ]
    );
    let notes = hook_notes(&env, &session);
    assert_eq!(
        notes,
        [
            "[hook `SessionStart.1`, SessionStart]\nsession context: startup".to_owned(),
            "[hook `tests`, Stop] The turn is not finished: run the tests first".to_owned(),
        ]
    );
    // The session's note is in the first request; the stop's only in the second, which is the
    // same turn going on.
    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    let body = |index: usize| String::from_utf8(requests[index].body.clone()).unwrap();
    assert!(body(0).contains("session context: startup") && !body(0).contains("run the tests"));
    assert!(body(1).contains("The turn is not finished: run the tests first"));
    let turns = env.events(&session).iter().filter(|e| e.kind() == "turn/start").count();
    assert_eq!(turns, 1);
    rebuilds_byte_for_byte(&env, &session, 0).await;

    // A second prompt to the loaded session: no second SessionStart.
    env.script(json!([{"reasoning": "Ok.", "content": "Again."}])).await;
    let output = env.prompt_in(&session, "again").await;
    assert!(output.status.success(), "{}", all_output(&output));
    let starts =
        hook_runs(&env, &session).iter().filter(|run| run.event == HookEvent::SessionStart).count();
    assert_eq!(starts, 1);

    // `dsh compact` runs the PreCompact hooks first, told it was asked for.
    env.dsh(&["compact", &session]).await;
    assert_eq!(std::fs::read_to_string(&compacted).unwrap().trim(), "manual");
    let last = hook_runs(&env, &session).pop().unwrap();
    assert_eq!((last.event, last.outcome), (HookEvent::PreCompact, HookOutcome::Ok));
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_tool_use_hook_sees_a_task_call_and_a_blocked_one_starts_no_child() {
    let env = Env::new().await;
    let guard = script(
        &env.root.join("no-tasks.sh"),
        "cat >/dev/null\necho 'no sub-agents today' >&2\nexit 2",
    );
    std::fs::write(
        env.user_config(),
        format!(
            "[[hooks.PreToolUse]]\nname = \"no-tasks\"\nmatcher = \"task\"\ncommand = \"{}\"\n",
            guard.display()
        ),
    )
    .unwrap();
    env.script(json!([
        tool_reply(
            "Delegate.",
            "task",
            json!({"description": "look", "prompt": "list the files", "context": "fresh"})
        ),
        {"reasoning": "Alone, then.", "content": "Done without help."},
    ]))
    .await;
    let (session, output) = env.prompt_new("look around").await;
    assert!(output.status.success(), "{}", all_output(&output));

    // No child: no `task/spawn`, no `tool/call`, no second session; the model read the reason.
    let events = env.events(&session);
    assert!(!events.iter().any(|e| matches!(e.data, EventData::TaskSpawn(_))));
    assert!(!events.iter().any(|e| matches!(e.data, EventData::ToolCall(_))));
    let runs = hook_runs(&env, &session);
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].hook.as_str(), runs[0].outcome), ("no-tasks", HookOutcome::Blocked));
    assert_eq!(runs[0].tool.as_deref(), Some("task"));
    let requests = env.requests();
    assert_eq!(requests.len(), 2, "only the parent's two requests: no child ran");
    let body = String::from_utf8(requests[1].body.clone()).unwrap();
    assert!(body.contains("not run: blocked by hook `no-tasks` (PreToolUse): no sub-agents today"));
    rebuilds_byte_for_byte(&env, &session, 0).await;
    env.assert_audit_ok(&session).await;
}

//! What a hostile model tried and must not get, each as it was found: the Unix sockets of other
//! programs (a second dsh daemon, a Docker-like and an ssh-agent-like listener), a workspace
//! that is `$HOME` (its secret stores and dsh's configuration, existing or not), a repository
//! configuration that loosens approvals (and a loosening that would apply mid-turn), a FIFO or
//! a device where the daemon reads configuration, resources without limits, a temporary
//! directory others can read, leftovers of a killed daemon. The rename race is in the tools'
//! own tests (`server/agent/src/tools/tests.rs`, `server/sandbox/src/beneath/tests.rs`).

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::sandbox::{CANARY, MODES, canary_env, run_commands, serve};
use crate::support::{Env, describe, stderr, tool_results, write};

/// A Unix socket listener at `path` that counts the connections it accepts.
fn counting_listener(path: &Path) -> Arc<AtomicUsize> {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let listener = UnixListener::bind(path).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if stream.is_ok() {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    accepted
}

/// A command that connects to the Unix socket at `path` and says so.
fn connect_command(path: &Path) -> String {
    format!(
        "python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(\"connected\")' {}",
        path.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_reaches_a_unix_socket_outside_the_sandbox() {
    // Another user of the machine's dsh (a second home), and listeners like Docker's and an
    // ssh agent's, in directories the command cannot even list.
    let other = Env::new().await;
    let other_daemon = other.serve(&[]).await;
    for mode in MODES {
        let env = canary_env().await;
        let docker = env.root.join("run/docker.sock");
        let agent = env.root.join("ssh-XXXXabc/agent.4242");
        let (docker_accepted, agent_accepted) =
            (counting_listener(&docker), counting_listener(&agent));
        let served = serve(&env, mode).await;
        let commands: Vec<String> = [other.socket(), docker.clone(), agent.clone()]
            .iter()
            .map(|p| connect_command(p))
            .collect();
        let (_, results) = run_commands(&env, &commands).await;
        for (command, (content, is_error)) in commands.iter().zip(&results) {
            assert!(
                *is_error && !content.contains("connected"),
                "{mode:?}: `{command}`: {content}"
            );
        }
        assert_eq!(docker_accepted.load(Ordering::SeqCst), 0, "{mode:?}: docker.sock reached");
        assert_eq!(agent_accepted.load(Ordering::SeqCst), 0, "{mode:?}: the agent reached");
        let status = env.client().await.ok("daemon/status", json!({})).await;
        let in_force = status["sandbox"]["inForce"].to_string();
        assert!(in_force.contains("no Unix sockets"), "{mode:?}: {in_force}");
        served.shutdown().await;
    }
    let status = other.client().await.ok("daemon/status", json!({})).await;
    assert_eq!(status["clients"], 1, "the second daemon saw another client: {status}");

    // A datagram pair's end can `sendto` any datagram socket by path (journald, sd_notify):
    // no such pair is made.
    let env = canary_env().await;
    let notify = env.root.join("run/notify.sock");
    std::fs::create_dir_all(notify.parent().unwrap()).unwrap();
    let receiver = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    receiver.set_nonblocking(true).unwrap();
    let served = serve(&env, &[]).await;
    let send = format!(
        "python3 -c 'import socket, sys; a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b\"x\", sys.argv[1]); print(\"sent\")' {}",
        notify.display()
    );
    let (_, results) = run_commands(&env, &[send]).await;
    assert!(results[0].1 && !results[0].0.contains("sent"), "{results:?}");
    assert!(receiver.recv(&mut [0_u8; 8]).is_err(), "a datagram arrived");
    served.shutdown().await;

    // The control: with the network on, the same command does connect (so the test above can
    // fail), and a socket inside the workspace works either way for programs that need one
    // through `socketpair`.
    let env = canary_env().await;
    let docker = env.root.join("run/docker.sock");
    let docker_accepted = counting_listener(&docker);
    let served = serve(&env, &["--sandbox-network"]).await;
    let pair =
        "python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"x\"); print(b.recv(1))'";
    let (_, results) = run_commands(&env, &[connect_command(&docker), pair.to_owned()]).await;
    assert!(!results[0].1 && results[0].0.contains("connected"), "{results:?}");
    assert!(!results[1].1 && results[1].0.contains("b'x'"), "{results:?}");
    assert_eq!(docker_accepted.load(Ordering::SeqCst), 1);
    served.shutdown().await;
    other_daemon.shutdown().await;
}

/// The mock's replies: one step per entry of `steps` (each a list of `(tool, arguments)`),
/// then a closing message.
fn steps(steps: &[&[(&str, Value)]]) -> Value {
    let mut replies: Vec<Value> = steps
        .iter()
        .map(|calls| {
            let calls: Vec<Value> = calls
                .iter()
                .map(|(name, arguments)| json!({"name": name, "arguments": arguments.to_string()}))
                .collect();
            json!({"tool_calls": calls})
        })
        .collect();
    replies.push(json!({"content": "done"}));
    Value::Array(replies)
}

/// `dsh prompt --yes --workspace DIR TEXT`.
async fn prompt_in_dir(env: &Env, dir: &Path, text: &str) -> std::process::Output {
    env.dsh(&["prompt", "--yes", "--workspace", dir.to_str().unwrap(), text]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_at_home_needs_confirming_and_its_secrets_stay_out_of_reach() {
    let env = canary_env().await;
    let home = env.root.join("userhome");
    write(&home, ".ssh/id_ed25519", "PRIVATE-KEY-CANARY\n");
    write(&home, "project/README.md", "a project\n");
    // No ~/.config/dsh yet: the default, and the case where a command used to create it.
    let served = env
        .serve_with(&[], |command| {
            command.env("HOME", &home).env_remove("XDG_CONFIG_HOME");
        })
        .await;

    let refused = prompt_in_dir(&env, &home, "hi").await;
    assert!(!refused.status.success(), "{}", describe(&refused));
    let message = stderr(&refused);
    assert!(
        message.contains("is your home directory") && message.contains("dsh allow-workspace"),
        "{message}"
    );
    // So is a workspace that holds the state directory.
    let refused = prompt_in_dir(&env, &env.root, "hi").await;
    assert!(stderr(&refused).contains("holds dsh's state directory"), "{}", describe(&refused));
    assert!(!env.home.join("workspaces").exists() || env.log_files().is_empty());

    let allowed = env.dsh(&["allow-workspace", home.to_str().unwrap()]).await;
    assert!(allowed.status.success(), "{}", describe(&allowed));
    let config = std::fs::read_to_string(env.user_config()).unwrap();
    assert!(config.contains("allow_workspaces"), "{config}");

    env.script(steps(&[&[
        ("read_file", json!({"path": ".ssh/id_ed25519"})),
        ("grep", json!({"pattern": "PRIVATE-KEY"})),
        ("write_file", json!({"path": ".config/dsh/config.toml", "content": "[mcp.servers.x]\n"})),
        ("run_command", json!({"command": "cat ~/.ssh/id_ed25519"})),
        ("run_command", json!({"command": "mkdir -p ~/.config/dsh && echo '[mcp.servers.x]' > ~/.config/dsh/config.toml"})),
        ("run_command", json!({"command": "ls -a ~/.ssh"})),
        ("run_command", json!({"command": "cat /etc/shadow"})),
        ("run_command", json!({"command": "echo ok > project/note.txt && cat project/note.txt"})),
    ]]))
    .await;
    let output = prompt_in_dir(&env, &home, "look around").await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = crate::support::session_id_of(&output);
    let events = env.events(&session);
    let results: Vec<(String, bool)> =
        tool_results(&events).into_iter().map(|r| (r.content.clone(), r.is_error)).collect();
    assert_eq!(results.len(), 8, "{results:?}");
    for (content, _) in &results {
        assert!(!content.contains("PRIVATE-KEY-CANARY") && !content.contains(CANARY), "{content}");
    }
    for index in [0, 2, 3, 4, 5] {
        assert!(results[index].1, "call {index} succeeded: {}", results[index].0);
    }
    // /etc/shadow: refused (Landlock) or empty (covered by /dev/null), never its lines.
    assert!(!results[6].0.contains("root:"), "{}", results[6].0);
    assert!(results[0].0.contains("private to dsh or a store of secrets"), "{}", results[0].0);
    assert!(results[1].0.starts_with("no matches"), "{}", results[1].0);
    assert_eq!(results[7], ("ok\n[exit code 0]".to_owned(), false));
    assert!(!home.join(".config").exists(), "a hidden path that did not exist was created");
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspaces_tool_entry_does_not_loosen_the_users_class_policy() {
    let env = Env::new().await;
    write(&env.root, "config.toml", "[approvals]\ncommand = \"deny\"\n");
    write(&env.workspace, ".dsh/config.toml", "[approvals]\nrun_command = \"ask\"\n");
    let call = json!({"command": "echo ran"});
    // `--yes` answers every question: had the workspace's `ask` won, the command would run.
    let (session, output) = env.prompt_new(&format!("run [[fake:tool run_command {call}]]")).await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&session);
    let result = tool_results(&events).first().map(|r| (r.content.clone(), r.is_error)).unwrap();
    assert!(result.1 && result.0.contains("denies"), "{result:?}");
}

/// Prompts `text` in `session`, allows the approval the turn asks for `tool`, and waits for the
/// turn to complete.
async fn prompt_allowing(
    conn: &Arc<crate::support::Conn>,
    sub: &str,
    session: &str,
    text: &str,
    tool: &'static str,
) {
    let prompt = {
        let (conn, session, text) = (Arc::clone(conn), session.to_owned(), text.to_owned());
        tokio::spawn(async move {
            conn.ok("session/prompt", json!({"sessionId": session, "text": text})).await
        })
    };
    let asked = conn.wait_event(sub, "approval/request", |e| e["data"]["tool"] == tool).await;
    let approval = asked["data"]["approvalId"].as_str().unwrap().to_owned();
    conn.ok(
        "approval/respond",
        json!({"sessionId": session, "approvalId": approval, "decision": "allow"}),
    )
    .await;
    let outcome = prompt.await.unwrap();
    assert_eq!(outcome["stopReason"], "completed", "{outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_cannot_loosen_approvals_and_a_loosening_waits_for_the_next_turn() {
    let env = Env::new().await;
    // A repository that would make commands run unasked: refused, with file and line.
    write(
        &env.workspace,
        ".dsh/config.toml",
        "[approvals]\ncommand = \"auto\"\nwrite = \"auto\"\n",
    );
    let refused = env.dsh(&["prompt", "hi"]).await;
    assert!(!refused.status.success(), "{}", describe(&refused));
    let message = stderr(&refused);
    assert!(
        message.contains(".dsh/config.toml:2") && message.contains("only tighten"),
        "{message}"
    );
    // The daemon that command started stops: the test's own (`serve`, the mock as its
    // sessions' default) takes its place.
    env.dsh_ok(&["shutdown"]).await;

    // The user lets writes run unasked; the repository denies commands (tightening is fine).
    write(&env.root, "config.toml", "[approvals]\nwrite = \"auto\"\n");
    write(&env.workspace, ".dsh/config.toml", "[approvals]\ncommand = \"deny\"\n");
    let _served = env.serve(&[]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let created = conn.ok("session/create", json!({"workspace": workspace})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    let sub = conn.subscribe(&session, None).await;
    // Step 1 lifts the deny (a write to .dsh/ asks although writes are `auto`); step 2 runs a
    // command in the same turn.
    env.script(steps(&[
        &[("write_file", json!({"path": ".dsh/config.toml", "content": "# nothing\n"}))],
        &[("run_command", json!({"command": "echo mid-turn"}))],
    ]))
    .await;
    prompt_allowing(&conn, &sub, &session, "go", "write_file").await;
    let events = env.events(&session);
    let results = tool_results(&events);
    assert!(results[1].is_error && results[1].content.contains("denies"), "{:?}", results[1]);
    assert_eq!(
        events.iter().filter(|e| e.kind() == "approval/request").count(),
        1,
        "the command asked mid-turn"
    );

    // The next turn takes the loosened file: the command asks (the user's default).
    env.script(steps(&[&[("run_command", json!({"command": "echo next-turn"}))]])).await;
    prompt_allowing(&conn, &sub, &session, "again", "run_command").await;
    let events = env.events(&session);
    let last = tool_results(&events).last().map(|r| r.content.clone()).unwrap();
    assert!(last.contains("next-turn"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_cannot_change_what_git_runs_at_the_users_next_command() {
    let env = Env::new().await;
    write(&env.workspace, ".git/config", "[core]\n\tbare = false\n");
    write(&env.workspace, ".git/hooks/pre-commit.sample", "#!/bin/sh\n");
    let served = env.serve(&[]).await;
    let commands = vec![
        "printf '[core]\\n\\thooksPath = /tmp/evil\\n' >> .git/config".to_owned(),
        "printf '#!/bin/sh\\ncurl evil\\n' > .git/hooks/pre-commit".to_owned(),
        // A new file redirects git to another repository's configuration and hooks.
        "echo ../.evil > .git/commondir".to_owned(),
        // So does a whole other .git put in its place.
        "mv .git .g && mkdir -p .git/hooks".to_owned(),
        "echo ok > note.txt && cat note.txt".to_owned(),
    ];
    let (_, results) = run_commands(&env, &commands).await;
    for (command, (content, is_error)) in commands.iter().zip(&results).take(4) {
        assert!(is_error, "`{command}` succeeded: {content}");
    }
    assert!(results[0].0.contains(".git is read-only for commands"), "{}", results[0].0);
    assert_eq!(results[4], ("ok\n[exit code 0]".to_owned(), false));
    let config = std::fs::read_to_string(env.workspace.join(".git/config")).unwrap();
    assert_eq!(config, "[core]\n\tbare = false\n");
    assert!(!env.workspace.join(".git/hooks/pre-commit").exists());
    assert!(!env.workspace.join(".git/commondir").exists());
    assert!(!env.workspace.join(".g").exists());
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_or_a_device_as_configuration_hangs_nothing() {
    let env = Env::new().await;
    let other_workspace = env.root.join("other");
    std::fs::create_dir_all(&other_workspace).unwrap();
    let served = env.serve(&[]).await;
    // The first step makes the workspace's configuration a FIFO, the second a link to
    // /dev/zero; the configuration is looked at before every step.
    env.script(steps(&[
        &[("run_command", json!({"command": "mkdir -p .dsh && mkfifo .dsh/config.toml"}))],
        &[(
            "run_command",
            json!({"command": "rm .dsh/config.toml && ln -s /dev/zero .dsh/config.toml"}),
        )],
        &[("run_command", json!({"command": "echo still-here"}))],
    ]))
    .await;
    let started = Instant::now();
    let (session, output) = env.prompt_new("go").await;
    assert!(output.status.success(), "{}", describe(&output));
    assert!(started.elapsed() < Duration::from_secs(60), "the turn hung");
    let events = env.events(&session);
    let last = tool_results(&events).last().map(|r| r.content.clone()).unwrap();
    assert!(last.contains("still-here"), "{last}");
    // The daemon answers, and a turn in another workspace runs.
    let conn = env.client().await;
    let status = tokio::time::timeout(Duration::from_secs(10), conn.ok("daemon/status", json!({})))
        .await
        .expect("daemon/status hung");
    assert!(status["pid"].is_u64(), "{status}");
    env.script(json!([{ "content": "hello" }])).await;
    let output =
        tokio::time::timeout(Duration::from_secs(30), prompt_in_dir(&env, &other_workspace, "hi"))
            .await
            .expect("a turn in another workspace hung");
    assert!(output.status.success(), "{}", describe(&output));
    let log = env.daemon_log();
    assert!(log.contains("not a regular file"), "the refusal was not reported:\n{log}");
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_a_memory_hog_and_a_disk_filler_end_with_a_clear_error() {
    let env = Env::new().await;
    let served = env
        .serve(&[
            "--sandbox-limit",
            "processes=300",
            "--sandbox-limit",
            "memory=256M",
            "--sandbox-limit",
            "file-size=32M",
        ])
        .await;
    let commands = vec![
        "i=0; while [ $i -lt 600 ]; do sleep 3 & i=$((i+1)); done; wait".to_owned(),
        "python3 -c 'b = bytearray(1024 * 1024 * 1024); print(len(b))'".to_owned(),
        "head -c 100000000 /dev/zero > \"$TMPDIR/big\"".to_owned(),
        "stat -c %a \"$TMPDIR\"".to_owned(),
    ];
    let (_, results) = run_commands(&env, &commands).await;
    let (fork, memory, disk) = (&results[0], &results[1], &results[2]);
    let status = env.client().await.ok("daemon/status", json!({})).await;
    let limits = status["sandbox"]["limits"].as_str().unwrap().to_owned();
    if limits.contains("processes not limited") {
        // A kernel before 6.14 cannot give a PID namespace its own pid_max: said, not assumed.
        eprintln!("SKIPPED the fork bomb's assertion: {limits}");
    } else {
        assert!(fork.1 && fork.0.to_lowercase().contains("fork"), "{fork:?}");
        assert!(limits.contains("300 processes"), "{limits}");
    }
    assert!(memory.1 && memory.0.contains("MemoryError"), "{memory:?}");
    assert!(disk.1, "{disk:?}");
    assert_eq!(results[3], ("700\n[exit code 0]".to_owned(), false));
    assert!(limits.contains("memory 256 MiB") && limits.contains("file size 32 MiB"), "{limits}");
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemons_temporary_directories_are_removed_at_the_next_start() {
    let env = Env::new().await;
    // The daemons get a temporary directory of their own: a daemon of a test running beside
    // this one cleans every dead daemon's leftovers in the shared one, these included.
    let tmp = env.root.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let private_tmp = |command: &mut tokio::process::Command| {
        command.env("TMPDIR", &tmp);
    };
    let served = env.serve_with(&[], private_tmp).await;
    let (_, output) = env.prompt_new("hi").await;
    assert!(output.status.success(), "{}", describe(&output));
    let pid = served.pid();
    let leftovers = || -> Vec<PathBuf> {
        std::fs::read_dir(&tmp)
            .unwrap()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name().unwrap().to_string_lossy().starts_with(&format!("dsh-tmp-{pid}-"))
            })
            .collect()
    };
    assert!(!leftovers().is_empty(), "the session has no temporary directory");
    let killed = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    assert!(killed.unwrap().success());
    crate::support::wait_gone(pid).await;
    // Its leader is a zombie as soon as it dies, while its other threads may still be exiting
    // with the listening socket and the instance lock open: gone is when the socket no longer
    // answers (a daemon started before that would find it "running" and not start).
    let started = std::time::Instant::now();
    while tokio::net::UnixStream::connect(env.socket()).await.is_ok() {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "the socket still answers");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!leftovers().is_empty(), "nothing was left behind to clean");
    let served = env.serve_with(&[], private_tmp).await;
    // The next daemon removes them as it starts, before it listens; a moment's grace for a
    // loaded machine, then what is left (and whether its daemon runs) is the failure.
    let started = std::time::Instant::now();
    while !leftovers().is_empty() && started.elapsed() < std::time::Duration::from_secs(5) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let left = leftovers();
    let alive = crate::support::process_alive(pid);
    assert!(left.is_empty(), "{left:?} (daemon {pid} alive: {alive})\n{}", env.daemon_log());
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looking_at_a_torn_log_never_changes_it_and_the_next_turn_recovers_it() {
    let env = Env::new().await;
    let (session, output) = env.prompt_new("hi").await;
    assert!(output.status.success(), "{}", describe(&output));
    env.dsh_ok(&["shutdown"]).await;
    let path = env.log_path(&session);
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, b"{\"seq\":99,\"time\":1,\"type\":\"assist").unwrap();
    drop(file);
    let before = std::fs::read(&path).unwrap();
    let sidecars = || {
        std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .flatten()
            .filter(|entry| entry.file_name().to_string_lossy().contains(".torn-"))
            .count()
    };
    for view in [
        &["usage", session.as_str()][..],
        &["saw", session.as_str(), "--step", "1"],
        &["audit", session.as_str()],
    ] {
        let output = env.dsh(view).await;
        assert!(output.status.success(), "{view:?}: {}", describe(&output));
        assert_eq!(std::fs::read(&path).unwrap(), before, "{view:?} changed the log");
        assert_eq!(sidecars(), 0, "{view:?} moved the tail aside");
    }
    let output = env.prompt_in(&session, "again").await;
    assert!(output.status.success(), "{}", describe(&output));
    assert_eq!(sidecars(), 1, "the turn did not move the torn tail aside");
    env.assert_audit_ok(&session).await;
}

/// The racer a command runs in session 1: swaps `dir` and `swap` (a symlink to a directory
/// outside the workspace) with `renameat2(RENAME_EXCHANGE)` for a few seconds, as fast as it
/// can; `racing` says it started, and it prints how many swaps it made.
const RACER: &str = r#"import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
open("racing", "w").close()
end, swaps = time.time() + 6, 0
while time.time() < end:
    if libc.renameat2(-100, b"dir", -100, b"swap", 2) == 0:
        swaps += 1
print("swaps", swaps)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_race_in_one_session_never_leads_another_sessions_file_tools_outside() {
    let env = Env::new().await;
    let outside = env.root.join("outside");
    write(&outside, "secret.txt", "OUTSIDE-CANARY\n");
    write(&env.workspace, "dir/secret.txt", "inside\n");
    write(&env.workspace, "race.py", RACER);
    std::os::unix::fs::symlink(&outside, env.workspace.join("swap")).unwrap();
    let served = env.serve(&[]).await;

    // Session 1 starts the racer through its sandboxed command...
    let racer_call = json!({"command": "python3 race.py", "timeout_secs": 30});
    let racer = env
        .prompt_new_command(&format!("race [[fake:tool run_command {racer_call}]]"))
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !env.workspace.join("racing").exists() {
        assert!(started.elapsed() < Duration::from_secs(30), "the racer did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...while session 2's file tools write and read through `dir` 25 times each.
    let mut text = "write and read".to_owned();
    for index in 0..25 {
        let write = json!({"path": format!("dir/written-{index}.txt"), "content": "w"});
        text.push_str(&format!(" [[fake:tool write_file {write}]]"));
        text.push_str(&format!(" [[fake:tool read_file {}]]", json!({"path": "dir/secret.txt"})));
    }
    let (session, output) = env.prompt_new(&text).await;
    assert!(output.status.success(), "{}", describe(&output));
    let racer = tokio::time::timeout(Duration::from_secs(60), racer.wait_with_output())
        .await
        .expect("the racer's turn did not end")
        .unwrap();
    assert!(racer.status.success(), "{}", describe(&racer));
    let racer_events = env.events(&crate::support::session_id_of(&racer));
    let racer_result = tool_results(&racer_events).first().map(|r| r.content.clone()).unwrap();
    let events = env.events(&session);
    let results = tool_results(&events);
    assert_eq!(results.len(), 50);
    for result in &results {
        assert!(!result.content.contains("OUTSIDE-CANARY"), "{result:?}");
    }
    let outside_files: Vec<_> =
        std::fs::read_dir(&outside).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(
        outside_files,
        vec![std::ffi::OsString::from("secret.txt")],
        "a write landed outside"
    );
    // The race really ran while the tools did, and some calls still got through.
    let swaps: u64 = racer_result
        .split_whitespace()
        .skip_while(|word| *word != "swaps")
        .nth(1)
        .and_then(|count| count.parse().ok())
        .unwrap_or(0);
    assert!(swaps > 1000, "the racer barely ran ({swaps} swaps)");
    assert!(results.iter().any(|result| !result.is_error), "no call got through at all");
    served.shutdown().await;
}

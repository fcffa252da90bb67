//! The command sandbox, tried as an attacker would: the model (scripted on the mock) runs
//! commands that go for the provider's key, the state and configuration directories, the
//! user's home, paths outside the workspace and the network — under the full sandbox and under
//! each fallback a kernel without Landlock or user namespaces gets (selected with
//! `--sandbox-without`, the switch such a user sees reported). Also: builds and tests still run
//! confined, an approved unconfined run escapes and is logged, the policy is in the system
//! prompt, a weakened sandbox is reported everywhere and asks for every command, and the
//! daemon never holds the key in its environment.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_session::EventData;
use serde_json::{Value, json};

use crate::support::{Env, describe, of_kind, stderr, stdout, tool_results, write};

/// The provider key every test here gives the daemon and the `dsh` commands: it must appear
/// nowhere a command can reach.
pub(super) const CANARY: &str = "sk-canary-7f3a91c2d4";

/// The sandbox modes a machine can be in: everything, and each fallback.
pub(super) const MODES: &[&[&str]] =
    &[&[], &["--sandbox-without", "userns"], &["--sandbox-without", "landlock"]];

/// An environment whose mock accepts only the canary key, with a home, a configuration
/// directory and a sibling of the workspace, all holding canaries.
pub(super) async fn canary_env() -> Env {
    let mut config = dsh_mock::MockConfig::default();
    config.keys[0].key = CANARY.to_owned();
    let env = Env::with_mock(config).await;
    write(&env.root, "userhome/.bashrc", &format!("export DEEPSEEK_API_KEY={CANARY}\n"));
    write(&env.root, "config/dsh/config.toml", &format!("api_key = \"{CANARY}\"\n"));
    write(&env.root, "sibling/notes.txt", "the sibling\n");
    write(&env.home, "deepseek-api-key", &format!("{CANARY}\n"));
    let key_file = env.home.join("deepseek-api-key");
    std::fs::set_permissions(&key_file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    env
}

/// `dsh serve FLAGS…` with `$HOME` and `$XDG_CONFIG_HOME` inside the test's directory.
pub(super) async fn serve(env: &Env, flags: &[&str]) -> crate::support::Served {
    let home = env.root.join("userhome");
    let config = env.root.join("config");
    env.serve_with(flags, |command| {
        command.env("HOME", &home).env("XDG_CONFIG_HOME", &config);
    })
    .await
}

/// The mock's reply that runs each command with `run_command`, then a closing message.
pub(super) fn run_each(commands: &[String]) -> Value {
    let calls: Vec<Value> = commands
        .iter()
        .map(|command| {
            json!({"name": "run_command", "arguments": json!({"command": command}).to_string()})
        })
        .collect();
    json!([{ "reasoning": "Let me try.", "tool_calls": calls }, { "content": "done" }])
}

/// Runs `commands` in one step of a new session (`dsh prompt --yes`); returns the session and
/// each command's result `(content, is_error)`.
pub(super) async fn run_commands(env: &Env, commands: &[String]) -> (String, Vec<(String, bool)>) {
    env.script(run_each(commands)).await;
    let (session, output) = env.prompt_new("Try these commands.").await;
    assert!(output.status.success(), "{}", describe(&output));
    assert!(!stdout(&output).contains(CANARY) && !stderr(&output).contains(CANARY));
    let events = env.events(&session);
    let results: Vec<(String, bool)> = tool_results(&events)
        .into_iter()
        .map(|result| (result.content.clone(), result.is_error))
        .collect();
    assert_eq!(results.len(), commands.len(), "{results:?}");
    (session, results)
}

/// Every file under `dir`, as text (the socket excepted).
fn files_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else if !path.ends_with("dsh.sock") {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            out.push((path, text));
        }
    }
    out
}

/// The environment of process `pid`, as `/proc` shows it.
fn environ_of(pid: u32) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    String::from_utf8_lossy(&bytes).replace('\0', "\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_reaches_the_key_in_any_sandbox_mode() {
    for mode in MODES {
        let env = canary_env().await;
        let served = serve(&env, mode).await;
        let daemon = served.pid();
        assert!(
            !environ_of(daemon).contains(CANARY),
            "the daemon holds the key in its environment"
        );
        assert!(
            environ_of(daemon).contains("XDG_CONFIG_HOME"),
            "cannot read the daemon's environment"
        );
        let home = env.home.display();
        let config = env.root.join("config").display().to_string();
        let commands = vec![
            "cat /proc/$PPID/environ".to_owned(),
            "cat /proc/*/environ | tr '\\0' '\\n'".to_owned(),
            format!("cat /proc/{daemon}/environ"),
            format!("cat {home}/deepseek-api-key; ls -la {home}"),
            format!("ls -la {config} {config}/dsh; cat {config}/dsh/config.toml"),
            "cat ~/.bashrc".to_owned(),
            "env".to_owned(),
            "printenv".to_owned(),
            format!("grep -r {} / --include=*key* 2>/dev/null | head -3", &CANARY[..9]),
        ];
        let (session, results) = run_commands(&env, &commands).await;
        for (command, (content, _)) in commands.iter().zip(&results) {
            assert!(!content.contains(CANARY), "{mode:?}: `{command}` showed the key:\n{content}");
        }
        // Not an empty file, nor a missing one by chance: each of these was refused.
        for index in [0, 2, 3, 4, 5] {
            let (content, is_error) = &results[index];
            assert!(is_error, "{mode:?}: `{}` succeeded:\n{content}", commands[index]);
        }
        // The environment commands get is built: no variable of the daemon's beyond the few.
        let printenv = &results[7].0;
        assert!(printenv.contains("PATH="), "{printenv}");
        assert!(!printenv.contains("XDG_CONFIG_HOME"), "{mode:?}: {printenv}");
        assert!(!printenv.contains("DSH_"), "{mode:?}: {printenv}");
        env.assert_audit_ok(&session).await;
        served.shutdown().await;

        // The key is in no log, no reply, no request body.
        let logs = files_under(&env.home);
        assert!(logs.iter().any(|(path, _)| path.ends_with("daemon.log")));
        for (path, text) in logs {
            if path.ends_with("deepseek-api-key") {
                continue;
            }
            assert!(!text.contains(CANARY), "{mode:?}: the key is in {}", path.display());
        }
        for request in env.requests() {
            assert!(!String::from_utf8_lossy(&request.body).contains(CANARY), "{mode:?}: sent");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outside_the_workspace_fail_clearly_and_inside_they_work() {
    for mode in MODES {
        let env = canary_env().await;
        let served = serve(&env, mode).await;
        let outside_tmp = format!("/tmp/dsh-sandbox-outside-{}", std::process::id());
        let bashrc = env.root.join("userhome/.bashrc");
        let commands = vec![
            format!("echo x > {outside_tmp}"),
            "echo x >> ~/.bashrc".to_owned(),
            "echo x > ../sibling/notes.txt".to_owned(),
            "echo inside > made-inside.txt && cat made-inside.txt".to_owned(),
            "echo private > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"".to_owned(),
        ];
        let (_, results) = run_commands(&env, &commands).await;
        let expected = [
            outside_tmp.clone(),
            bashrc.display().to_string(),
            env.root.join("sibling/notes.txt").display().to_string(),
        ];
        for (path, (content, is_error)) in expected.iter().zip(&results) {
            assert!(is_error, "{mode:?}: writing {path} did not fail: {content}");
            assert!(
                content.contains(&format!("write outside the workspace denied: {path}")),
                "{mode:?}: unclear result for {path}:\n{content}"
            );
            assert!(content.contains("unconfined"), "{mode:?}: no hint:\n{content}");
        }
        assert!(!Path::new(&outside_tmp).exists(), "{mode:?}: /tmp was written");
        assert!(!std::fs::read_to_string(&bashrc).unwrap().contains("\nx\n"));
        assert_eq!(
            std::fs::read_to_string(env.root.join("sibling/notes.txt")).unwrap(),
            "the sibling\n"
        );
        assert_eq!(results[3], ("inside\n[exit code 0]".to_owned(), false), "{mode:?}");
        assert_eq!(
            std::fs::read_to_string(env.workspace.join("made-inside.txt")).unwrap(),
            "inside\n"
        );
        assert_eq!(results[4], ("private\n[exit code 0]".to_owned(), false), "{mode:?}");
        served.shutdown().await;
    }
}

/// A loopback server that answers every connection with an HTTP response saying `pong`.
fn pong_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0_u8; 1024];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\npong\n");
        }
    });
    port
}

/// Commands that reach `port` on loopback: with curl and with Python, where they exist.
fn network_commands(port: u16) -> Vec<String> {
    let mut commands = Vec::new();
    if Path::new("/usr/bin/curl").exists() {
        commands.push(format!("/usr/bin/curl -sS --max-time 5 http://127.0.0.1:{port}/"));
    }
    if let Some(python) =
        ["/usr/bin/python3", "/usr/local/bin/python3"].iter().find(|p| Path::new(p).exists())
    {
        commands.push(format!(
            "{python} -c 'import socket; s = socket.create_connection((\"127.0.0.1\", {port}), timeout=5); s.sendall(b\"GET / HTTP/1.0\\r\\n\\r\\n\"); print(s.recv(100).decode().split()[-1])'"
        ));
    }
    assert!(!commands.is_empty(), "this machine has neither curl nor python3");
    commands
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_is_off_unless_the_policy_allows_it() {
    let port = pong_server();
    let commands = network_commands(port);
    for mode in [&["--sandbox-without", "landlock"][..], &[], &["--sandbox-without", "userns"]] {
        let env = canary_env().await;
        let served = serve(&env, mode).await;
        let (_, results) = run_commands(&env, &commands).await;
        for (command, (content, is_error)) in commands.iter().zip(&results) {
            assert!(is_error, "{mode:?}: `{command}` reached the network: {content}");
            assert!(!content.contains("pong"), "{mode:?}: {content}");
            assert!(
                content.contains("network is off for commands in this session"),
                "{mode:?}: unclear result for `{command}`:\n{content}"
            );
        }
        served.shutdown().await;
    }
    let env = canary_env().await;
    let served = serve(&env, &["--sandbox-network"]).await;
    let (_, results) = run_commands(&env, &commands).await;
    for (command, (content, is_error)) in commands.iter().zip(&results) {
        assert!(
            !is_error && content.contains("pong"),
            "`{command}` failed with the network on: {content}"
        );
    }
    let status = env.client().await.ok("daemon/status", json!({})).await;
    assert_eq!(status["sandbox"]["network"], true, "{status}");
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_and_tests_run_inside_the_sandbox() {
    let env = Env::new().await;
    write(&env.workspace, "calc.py", "def add(a, b):\n    return a + b\n");
    write(
        &env.workspace,
        "test_calc.py",
        "import unittest\nfrom calc import add\n\nclass Add(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n",
    );
    write(
        &env.workspace,
        "Cargo.toml",
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        &env.workspace,
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 2), 4);\n    }\n}\n",
    );
    // The daemon keeps this machine's $HOME and $PATH, as a user's does: its toolchains
    // (rustup, pyenv...) are readable.
    let served = env.serve(&[]).await;
    let python =
        if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
    let commands = vec![
        format!("{python} -m unittest -v 2>&1"),
        "cargo test --offline --lib -q 2>&1".to_owned(),
    ];
    let (session, results) = run_commands(&env, &commands).await;
    let (python_output, python_failed) = &results[0];
    assert!(!python_failed && python_output.contains("OK"), "{python_output}");
    let (cargo_output, cargo_failed) = &results[1];
    assert!(!cargo_failed && cargo_output.contains("test result: ok. 1 passed"), "{cargo_output}");
    assert!(env.workspace.join("target").is_dir(), "the build wrote no target/ in the workspace");
    let events = env.events(&session);
    for event in of_kind(&events, "tool/call") {
        let EventData::ToolCall(call) = &event.data else { unreachable!() };
        assert!(!call.unconfined, "{call:?}");
    }
    served.shutdown().await;
}

/// Starts a prompt in the background through `conn`; returns its answer's handle.
fn prompt_in_background(
    conn: &Arc<crate::support::Conn>,
    session: &str,
    text: String,
) -> tokio::task::JoinHandle<Value> {
    let conn = Arc::clone(conn);
    let session = session.to_owned();
    tokio::spawn(async move {
        conn.ok("session/prompt", json!({"sessionId": session, "text": text})).await
    })
}

fn tool_prompt(commands: &[&str]) -> String {
    let mut text = "run these".to_owned();
    for command in commands {
        text.push_str(&format!(" [[fake:tool run_command {}]]", json!({"command": command})));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_unconfined_run_escapes_the_sandbox_and_is_logged_as_such() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let session = conn.ok("session/create", json!({"workspace": workspace})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let sub = conn.subscribe(&session, None).await;
    let outside = env.root.join("outside-marker");
    let touch = format!("touch {}", outside.display());
    let prompt = prompt_in_background(&conn, &session, tool_prompt(&[&touch, &touch]));
    let mut answered = Vec::new();
    for decision in ["allow", "allowUnconfined"] {
        let asked = conn
            .wait_event(&sub, "approval/request", |e| {
                !answered.contains(&e["data"]["approvalId"].as_str().unwrap_or_default().to_owned())
            })
            .await;
        assert_eq!(asked["data"]["sandbox"], "workspace-write", "{asked}");
        let approval = asked["data"]["approvalId"].as_str().unwrap().to_owned();
        conn.ok(
            "approval/respond",
            json!({"sessionId": session, "approvalId": approval, "decision": decision}),
        )
        .await;
        answered.push(approval);
    }
    assert_eq!(prompt.await.unwrap()["stopReason"], "completed");
    let events = env.events(&session);
    let calls: Vec<bool> = of_kind(&events, "tool/call")
        .iter()
        .map(|event| match &event.data {
            EventData::ToolCall(call) => call.unconfined,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(calls, [false, true], "the second call ran unconfined and says so");
    let results = tool_results(&events);
    assert!(results[0].is_error, "{}", results[0].content);
    assert!(
        results[0].content.contains("write outside the workspace denied"),
        "{}",
        results[0].content
    );
    assert!(!results[1].is_error, "{}", results[1].content);
    assert!(outside.exists(), "the unconfined run did not write outside the workspace");
    let decisions: Vec<String> = of_kind(&events, "approval/decision")
        .iter()
        .map(|event| match &event.data {
            EventData::ApprovalDecision(decision) => format!("{:?}", decision.decision),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(decisions, ["Allow", "AllowUnconfined"]);
    served.shutdown().await;

    // Policy `full`: every command is unconfined, and logged as such.
    let env = Env::new().await;
    let served = env.serve(&["--sandbox", "full"]).await;
    let (session, results) =
        run_commands(&env, &[touch.replace("outside-marker", "full-marker")]).await;
    assert!(!results[0].1, "{:?}", results[0]);
    let events = env.events(&session);
    let EventData::ToolCall(call) = &of_kind(&events, "tool/call")[0].data else { unreachable!() };
    assert!(call.unconfined);
    let status = env.client().await.ok("daemon/status", json!({})).await;
    assert_eq!(status["sandbox"]["policy"], "full");
    assert_eq!(status["sandbox"]["inForce"], json!([]));
    served.shutdown().await;
}

/// The system prompt of the `request/header` snapshots of a session, in order.
fn snapshot_systems(env: &Env, session: &str) -> Vec<String> {
    env.events(session)
        .iter()
        .filter_map(|event| match &event.data {
            EventData::RequestHeader(header) => header.header.system.clone(),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_is_in_the_system_prompt_and_a_change_is_a_logged_header_change() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    env.script(json!([{ "content": "hello" }])).await;
    let (session, output) = env.prompt_new("hi").await;
    assert!(output.status.success(), "{}", describe(&output));
    served.shutdown().await;
    let served = env.serve(&["--sandbox", "read-only", "--sandbox-network"]).await;
    env.script(json!([{ "content": "again" }])).await;
    let output = env.prompt_in(&session, "again").await;
    assert!(output.status.success(), "{}", describe(&output));
    let systems = snapshot_systems(&env, &session);
    assert_eq!(systems.len(), 2, "an initial and a resume snapshot");
    assert!(systems[0].contains("run in a sandbox (policy workspace-write)"), "{}", systems[0]);
    assert!(systems[0].contains("the network is off"), "{}", systems[0]);
    assert!(systems[1].contains("(policy read-only)"), "{}", systems[1]);
    assert!(systems[1].contains("the network is on"), "{}", systems[1]);
    let usage = env.dsh_ok(&["usage", &session]).await;
    assert!(stdout(&usage).contains("resume"), "{}", stdout(&usage));
    env.assert_audit_ok(&session).await;
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weakened_sandbox_is_reported_everywhere_and_asks_for_every_command() {
    let env = Env::new().await;
    let served = env.serve(&["--sandbox-without", "landlock"]).await;
    assert!(
        env.daemon_log().contains("command sandbox: no Landlock (turned off by the configuration)"),
        "{}",
        env.daemon_log()
    );
    let conn = env.client().await;
    let status = conn.ok("daemon/status", json!({})).await;
    let sandbox = &status["sandbox"];
    assert_eq!(sandbox["approvalRequired"], true, "{sandbox}");
    let landlock = &sandbox["features"][0];
    assert_eq!(
        (landlock["name"].as_str(), landlock["used"].as_bool(), landlock["turnedOff"].as_bool()),
        (Some("landlock"), Some(false), Some(true)),
        "{sandbox}"
    );
    assert!(
        sandbox["warnings"].to_string().contains("every command asks for approval"),
        "{sandbox}"
    );
    let text = env.dsh_ok(&["status"]).await;
    assert!(stdout(&text).contains("warning: no Landlock"), "{}", stdout(&text));
    let doctor = env.dsh(&["doctor", "--sandbox-without", "landlock"]).await;
    let report = stdout(&doctor);
    assert!(report.contains("warn  sandbox: landlock: available, not used"), "{report}");
    assert!(report.contains("ok    confined command"), "{report}");
    assert!(report.contains("warn  daemon"), "{report}");

    // "Allow always" does not cover commands while the sandbox is weakened.
    let workspace = env.workspace.display().to_string();
    let session = conn.ok("session/create", json!({"workspace": workspace})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let sub = conn.subscribe(&session, None).await;
    let prompt = prompt_in_background(&conn, &session, tool_prompt(&["echo one", "echo two"]));
    let mut answered: Vec<String> = Vec::new();
    for _ in 0..2 {
        let asked = conn
            .wait_event(&sub, "approval/request", |e| {
                !answered.contains(&e["data"]["approvalId"].as_str().unwrap_or_default().to_owned())
            })
            .await;
        assert_eq!(asked["data"]["sandbox"], "workspace-write (degraded: no landlock)", "{asked}");
        let approval = asked["data"]["approvalId"].as_str().unwrap().to_owned();
        conn.ok(
            "approval/respond",
            json!({"sessionId": session, "approvalId": approval, "decision": "allowAlways"}),
        )
        .await;
        answered.push(approval);
    }
    assert_eq!(prompt.await.unwrap()["stopReason"], "completed");
    let events = env.events(&session);
    assert_eq!(of_kind(&events, "approval/request").len(), 2);
    let results = tool_results(&events);
    assert!(results.iter().all(|result| !result.is_error), "{results:?}");
    served.shutdown().await;

    // With neither feature nothing confines: said everywhere, every command asks, and every
    // call is logged as unconfined.
    let env = Env::new().await;
    let flags = ["--sandbox-without", "landlock", "--sandbox-without", "userns"];
    let served = env.serve(&flags).await;
    let status = env.client().await.ok("daemon/status", json!({})).await;
    assert_eq!(status["sandbox"]["inForce"], json!([]), "{status}");
    assert!(status["sandbox"]["warnings"].to_string().contains("commands run unconfined"));
    env.script(run_each(&["echo unconfined".to_owned()])).await;
    let (session, output) = env.prompt_new("go").await;
    assert!(output.status.success(), "{}", describe(&output));
    assert!(stderr(&output).contains("dsh: command sandbox: no sandbox"), "{}", stderr(&output));
    let events = env.events(&session);
    assert_eq!(of_kind(&events, "approval/request").len(), 1);
    let EventData::ToolCall(call) = &of_kind(&events, "tool/call")[0].data else { unreachable!() };
    assert!(call.unconfined);
    let systems = snapshot_systems(&env, &session);
    assert!(
        systems[0].contains("they run unconfined, and the user approves each one"),
        "{}",
        systems[0]
    );
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_never_holds_the_key_in_its_environment() {
    // Started by a client: the key comes over a pipe.
    let mut config = dsh_mock::MockConfig::default();
    config.keys[0].key = CANARY.to_owned();
    let env = Env::with_mock(config).await;
    env.script(json!([{ "content": "hello" }])).await;
    let (_, output) = env.prompt_new("hi").await;
    assert!(output.status.success(), "the key did not reach the daemon: {}", describe(&output));
    let pid = env.daemon_pid() as u32;
    let environ = environ_of(pid);
    assert!(environ.contains("PATH="), "cannot read the daemon's environment");
    assert!(!environ.contains(CANARY), "{environ}");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(CANARY));
    env.dsh_ok(&["shutdown"]).await;

    // Started by hand with the key in its environment: it starts itself again without it.
    let served = env.serve(&[]).await;
    let environ = environ_of(served.pid());
    assert!(environ.contains("PATH=") && !environ.contains(CANARY), "{environ}");
    env.script(json!([{ "content": "hello again" }])).await;
    let (_, output) = env.prompt_new("hi").await;
    assert!(output.status.success(), "{}", describe(&output));
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_policy_reads_the_workspace_and_writes_nothing() {
    let env = canary_env().await;
    write(&env.workspace, "notes.txt", "read me\n");
    let served = serve(&env, &["--sandbox", "read-only"]).await;
    let commands = vec!["cat notes.txt".to_owned(), "echo x > made.txt".to_owned()];
    let (_, results) = run_commands(&env, &commands).await;
    assert_eq!(results[0], ("read me\n[exit code 0]".to_owned(), false));
    let (content, is_error) = &results[1];
    assert!(is_error, "{content}");
    let made = env.workspace.join("made.txt");
    assert!(
        content.contains(&format!("write denied (read-only sandbox): {}", made.display())),
        "{content}"
    );
    assert!(!made.exists());
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_settings_reach_the_daemon_a_client_starts_and_another_policy_is_refused() {
    let env = Env::new().await;
    env.script(json!([{ "content": "hello" }])).await;
    let workspace = env.workspace.display().to_string();
    let output = env
        .dsh(&[
            "--sandbox",
            "read-only",
            "--sandbox-network",
            "prompt",
            "--workspace",
            &workspace,
            "hi",
        ])
        .await;
    assert!(output.status.success(), "{}", describe(&output));
    let status = env.dsh_json(&["status"]).await;
    assert_eq!(status["sandbox"]["policy"], "read-only", "{status}");
    assert_eq!(status["sandbox"]["network"], true, "{status}");
    let refused = env.dsh(&["--sandbox", "full", "sessions"]).await;
    assert!(!refused.status.success());
    assert!(
        stderr(&refused)
            .contains("runs commands with another sandbox (policy read-only, not full)"),
        "{}",
        describe(&refused)
    );
    // The same settings, from the environment this time, are accepted.
    let mut same = env.command(&["sessions"]);
    same.env("DSH_SANDBOX", "read-only").env("DSH_SANDBOX_NETWORK", "1");
    let output = crate::support::run(same).await;
    assert!(output.status.success(), "{}", describe(&output));
    env.dsh_ok(&["shutdown"]).await;
}

//! What a hostile client and an unlucky user do to the daemon: descriptors exhausted, too many
//! connections, a client that never reads, broken and empty logs, a home others can read.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::support::{DEADLINE, Env, Served, describe, stdout};

/// Clock ticks the process has used (user + system), from `/proc/PID/stat`.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // After the command name: state is field 3, utime field 14, stime field 15.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn clock_ticks_per_second() -> u64 {
    let output = std::process::Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&output.stdout).trim().parse().unwrap()
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
pub(super) fn vm_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `dsh serve` with at most `descriptors` open files (as `ulimit -n` sets), connected.
async fn serve_with_descriptors(env: &Env, descriptors: u32) -> Served {
    let dsh = env!("CARGO_BIN_EXE_dsh");
    let limited = format!("ulimit -n {descriptors} && exec \"$0\" \"$@\"");
    env.serve_with(&[], |command| {
        // The same command, run through a shell that lowers the limit first.
        let args: Vec<_> = command.as_std().get_args().map(ToOwned::to_owned).collect();
        let mut shell = tokio::process::Command::new("sh");
        shell.arg("-c").arg(&limited).arg(dsh).args(args);
        for (key, value) in command.as_std().get_envs() {
            match value {
                Some(value) => shell.env(key, value),
                None => shell.env_remove(key),
            };
        }
        shell.current_dir(&env.workspace).stdin(Stdio::null()).stdout(Stdio::null());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(env.home.join("daemon.log"))
            .unwrap();
        shell.stderr(Stdio::from(log)).kill_on_drop(true);
        *command = shell;
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn descriptor_exhaustion_backs_off_instead_of_spinning() {
    let env = Env::new().await;
    let served = serve_with_descriptors(&env, 64).await;
    let pid = served.pid();
    let first = env.client().await;
    // Far more connections than descriptors: the daemon accepts what it can, the rest wait in
    // the listen queue while accepting fails.
    let mut held = Vec::new();
    for _ in 0..150 {
        held.push(tokio::net::UnixStream::connect(env.socket()).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log_before = env.daemon_log().len();
    let ticks_before = cpu_ticks(pid);
    let window = Duration::from_secs(2);
    tokio::time::sleep(window).await;
    let used = (cpu_ticks(pid) - ticks_before) as f64 / clock_ticks_per_second() as f64;
    let logged = env.daemon_log()[log_before..].to_owned();
    // Before the fix: a core at 100% and the log growing by megabytes a second.
    assert!(used < 0.3 * window.as_secs_f64(), "the daemon used {used:.2} s of CPU in {window:?}");
    assert!(
        logged.lines().count() < 10,
        "the daemon logged {} lines:\n{logged:.2000}",
        logged.lines().count()
    );
    assert!(env.daemon_log().contains("backing off"), "{}", env.daemon_log());
    // It keeps serving the connections it has, and says what is wrong.
    let status = first.ok("daemon/status", json!({})).await;
    let warnings = status["warnings"].to_string();
    assert!(warnings.contains("accepting connections fails"), "{status}");
    // Descriptors come back when the connections close; new clients are served again.
    drop(held);
    let started = Instant::now();
    loop {
        if let Ok(stream) = tokio::net::UnixStream::connect(env.socket()).await {
            let (reader, writer) = stream.into_split();
            let conn = crate::support::Conn::new(reader, writer);
            if let Some(answer) = conn.request_opt("daemon/status", json!({})).await
                && answer.get("result").is_some()
            {
                break;
            }
        }
        assert!(started.elapsed() < DEADLINE, "the daemon did not serve again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_past_the_cap_are_refused_with_an_error() {
    let env = Env::new().await;
    let served = env.serve(&["--max-connections", "3"]).await;
    // `serve`'s readiness probe may still hold a place for a moment (on a loaded machine):
    // the cap is only full once the daemon counts exactly the clients of this test.
    let first = env.client().await;
    let started = Instant::now();
    while first.ok("daemon/status", json!({})).await["clients"] != 1 {
        assert!(started.elapsed() < DEADLINE, "the readiness probe never left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut clients = vec![first];
    for _ in 0..2 {
        clients.push(env.client().await);
    }
    let stream = tokio::net::UnixStream::connect(env.socket()).await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    let line = tokio::time::timeout(DEADLINE, lines.next_line()).await.unwrap().unwrap().unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["error"]["code"], 1004, "{answer}");
    assert!(
        answer["error"]["message"].as_str().unwrap().contains("at most 3 connections"),
        "{answer}"
    );
    assert_eq!(tokio::time::timeout(DEADLINE, lines.next_line()).await.unwrap().unwrap(), None);
    // The three keep being served; when one leaves, a new one is let in.
    clients[0].ok("daemon/status", json!({})).await;
    drop(clients.pop());
    let started = Instant::now();
    let admitted = loop {
        let stream = tokio::net::UnixStream::connect(env.socket()).await.unwrap();
        let (reader, writer) = stream.into_split();
        let conn = crate::support::Conn::new(reader, writer);
        let answer = conn.request_opt("daemon/status", json!({})).await;
        if answer.is_some_and(|a| a.get("result").is_some()) {
            break conn;
        }
        assert!(started.elapsed() < DEADLINE, "no connection was let in after one left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(admitted.ok("daemon/shutdown", json!({})).await, json!({"stopping": true}));
    let mut served = served;
    assert!(served.wait().await.success());
}

/// Writes a log with one `session/meta` and one user message of `text`, as a fork of nothing.
pub(super) fn write_log(env: &Env, id: &str, text: &str) -> std::path::PathBuf {
    let home = dsh_store::DshHome::new(&env.home);
    let dir = home.workspace(&env.workspace).unwrap().sessions_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let meta = json!({"seq": 0, "time": 1, "type": "session/meta", "data": {"formatVersion": 0, "sessionId": id, "workspace": env.workspace.display().to_string()}});
    let turn = json!({"seq": 1, "time": 2, "type": "turn/start", "data": {"turn": 1}});
    let message = json!({"seq": 2, "time": 3, "type": "user/message", "data": {"text": text}});
    let path = dir.join(format!("{id}.jsonl"));
    std::fs::write(&path, format!("{meta}\n{turn}\n{message}\n")).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_reads_is_disconnected_and_its_memory_returns() {
    let env = Env::new().await;
    // One event of 5 MB.
    let big = "x".repeat(5 * 1024 * 1024);
    write_log(&env, "big", &big);
    let served = env.serve(&[]).await;
    let pid = served.pid();
    let watcher = env.client().await;
    watcher.ok("session/list", json!({})).await;
    let before = vm_kib(pid, "VmRSS");
    // 150 pipelined requests for the page holding it (a page of its own: pages are bounded in
    // bytes, but always hold at least one event), and never a byte read back.
    let mut stream = tokio::net::UnixStream::connect(env.socket()).await.unwrap();
    let mut pipelined = String::new();
    for id in 0..150 {
        let request = dsh_protocol::jsonrpc::Request::new(
            dsh_protocol::jsonrpc::Id::Number(id),
            "session/events",
            dsh_protocol::jsonrpc::raw(&json!({"sessionId": "big", "fromSeq": 2, "limit": 10})),
        );
        pipelined.push_str(&request.to_line());
        pipelined.push('\n');
    }
    stream.write_all(pipelined.as_bytes()).await.unwrap();
    // The daemon gives up on it: the connection is closed from its side.
    let started = Instant::now();
    loop {
        let status = watcher.ok("daemon/status", json!({})).await;
        if status["clients"] == 1 {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "the daemon kept the non-reading client: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let peak = vm_kib(pid, "VmHWM");
    drop(stream);
    // Other clients are served all along, and the log is whole.
    let page =
        watcher.ok("session/events", json!({"sessionId": "big", "fromSeq": 2, "limit": 10})).await;
    assert_eq!(page["events"][0]["data"]["text"].as_str().map(str::len), Some(big.len()));
    // What the daemon gives back takes a moment (the allocator returns freed memory lazily).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = vm_kib(pid, "VmRSS");
    eprintln!("daemon VmRSS before {before} KiB, peak (VmHWM) {peak} KiB, after {after} KiB");
    // Before the fix: 786 MiB at the peak and 538 MiB still held after the client left.
    assert!(peak < 200 * 1024, "peak {peak} KiB");
    assert!(after < before + 32 * 1024, "after {after} KiB (before {before} KiB)");
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_of_events_is_bounded_in_bytes_and_says_where_to_go_on() {
    let env = Env::new().await;
    write_log(&env, "big", &"y".repeat(3 * 1024 * 1024));
    let served = env.serve(&[]).await;
    let conn = env.client().await;
    // Meta, turn start, then the 3 MB message: the page stops before a second large event would
    // pass 4 MiB; a page always holds at least one event.
    let first =
        conn.ok("session/events", json!({"sessionId": "big", "fromSeq": 0, "limit": 100})).await;
    assert_eq!(first["events"].as_array().unwrap().len(), 3, "{:.300}", first.to_string());
    assert_eq!(first["end"], true);
    let second = write_log(&env, "bigger", &"z".repeat(5 * 1024 * 1024));
    assert!(second.exists());
    // The 5 MB message alone passes 4 MiB: the first page stops before it and says where to
    // go on; the next page holds it alone.
    let first =
        conn.ok("session/events", json!({"sessionId": "bigger", "fromSeq": 0, "limit": 100})).await;
    assert_eq!(first["events"].as_array().unwrap().len(), 2, "{:.300}", first.to_string());
    assert_eq!((first["nextSeq"].clone(), first["end"].clone()), (json!(2), json!(false)));
    let next =
        conn.ok("session/events", json!({"sessionId": "bigger", "fromSeq": 2, "limit": 100})).await;
    assert_eq!(next["events"].as_array().unwrap().len(), 1);
    assert_eq!(next["end"], true);
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_log_is_listed_with_its_error_and_an_empty_log_is_an_error() {
    let env = Env::new().await;
    let (good, output) = env.prompt_new("Say hi.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let broken = write_log(&env, "broken", "fine so far");
    let mut text = std::fs::read_to_string(&broken).unwrap();
    text.push_str("this is not a log event\n");
    std::fs::write(&broken, text).unwrap();
    let empty = broken.with_file_name("empty.jsonl");
    std::fs::write(&empty, "").unwrap();

    let output = env.dsh(&["sessions"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let listed = stdout(&output);
    assert!(listed.contains(&good), "{listed}");
    let broken_line = listed.lines().find(|line| line.starts_with("broken")).unwrap();
    assert!(broken_line.contains("! unreadable") && broken_line.contains("line 4"), "{listed}");
    let empty_line = listed.lines().find(|line| line.starts_with("empty")).unwrap();
    assert!(empty_line.contains("is empty"), "{listed}");

    let output = env.dsh(&["--json", "sessions"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let list: Value = serde_json::from_slice(&output.stdout).unwrap();
    let errors: Vec<&Value> =
        list["sessions"].as_array().unwrap().iter().filter(|s| s.get("error").is_some()).collect();
    assert_eq!(errors.len(), 2, "{list}");

    // An error message is said once, not repeated inside itself.
    let output = env.dsh(&["audit", broken.to_str().unwrap()]).await;
    assert!(!output.status.success(), "{}", describe(&output));
    let said = crate::support::stderr(&output);
    assert_eq!(said.matches("not a log event").count(), 1, "{said}");

    // An empty log is an error everywhere it is read.
    let conn = env.client().await;
    for (method, params) in [
        ("session/usage", json!({"sessionId": "empty"})),
        ("session/events", json!({"sessionId": "empty", "fromSeq": 0, "limit": 10})),
        ("session/request", json!({"sessionId": "empty", "step": 1})),
        ("session/audit", json!({"sessionId": "empty"})),
    ] {
        let message = conn.err(method, params, 1011).await;
        assert!(message.contains("is empty"), "{method}: {message}");
    }
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        out.push(path.clone());
        if path.is_dir() && !path.is_symlink() {
            collect(&path, out);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_file_the_daemon_creates_is_private_under_umask_022_in_a_0755_home() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new().await;
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    // `dsh prompt` starts the daemon (which creates its log) under umask 022.
    let mut command = tokio::process::Command::new("sh");
    let args: Vec<String> = [
        "--home",
        env.home.to_str().unwrap(),
        "--base-url",
        &env.mock.base_url(),
        "prompt",
        "--yes",
        "--workspace",
        &workspace,
        "Hi.",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    command
        .arg("-c")
        .arg("umask 022 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .args(&args)
        .env("DEEPSEEK_API_KEY", &env.key)
        .env_remove("DSH_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = crate::support::run(command).await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = crate::support::session_id_of(&output);
    // A torn tail makes a sidecar too.
    let log = env.log_path(&session);
    let output = env.dsh(&["shutdown"]).await;
    assert!(output.status.success(), "{}", describe(&output));
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, b"{\"seq\":").unwrap();
    drop(file);
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = env.prompt_in(&session, "Again.").await;
    assert!(output.status.success(), "{}", describe(&output));

    let mut paths = Vec::new();
    collect(&env.home, &mut paths);
    let mut wide = Vec::new();
    for path in &paths {
        let want = if path.is_dir() { 0o700 } else { 0o600 };
        if mode(path) != want {
            wide.push(format!("{} {:o}", path.display(), mode(path)));
        }
    }
    assert!(paths.iter().any(|p| p.to_string_lossy().contains(".torn-")), "no sidecar: {paths:?}");
    assert!(wide.is_empty(), "not private: {wide:#?}");
    // The home itself is the user's: the daemon warns about it rather than changing it.
    assert_eq!(mode(&env.home), 0o755);
    let status = env.dsh(&["--json", "status"]).await;
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(status["warnings"].to_string().contains("chmod 700"), "{status}");
}

async fn new_session(env: &Env, conn: &crate::support::Conn) -> String {
    let workspace = env.workspace.display().to_string();
    let created = conn.ok("session/create", json!({"workspace": workspace})).await;
    created["sessionId"].as_str().unwrap().to_owned()
}

/// Waits until `daemon/status` lists `count` loaded sessions; returns the status.
async fn wait_loaded(conn: &crate::support::Conn, count: usize) -> Value {
    let started = Instant::now();
    loop {
        let status = conn.ok("daemon/status", json!({})).await;
        if status["sessions"].as_array().unwrap().len() == count {
            return status;
        }
        assert!(started.elapsed() < DEADLINE, "never {count} loaded sessions: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_sessions_are_unloaded_and_reload_transparently() {
    let env = Env::new().await;
    // Unload after 0.3 s idle.
    let served = env.serve(&["--unload-after", "0.005"]).await;
    let conn = env.client().await;
    let idle = new_session(&env, &conn).await;
    let watched = new_session(&env, &conn).await;
    conn.ok("session/prompt", json!({"sessionId": idle, "text": "first"})).await;
    // A subscription keeps its session loaded.
    let sub = conn.subscribe(&watched, None).await;
    let status = wait_loaded(&conn, 1).await;
    assert_eq!(status["sessions"][0]["sessionId"], watched, "{status}");
    // The unloaded one answers as before, reloading on demand, and goes on.
    let usage = conn.ok("session/usage", json!({"sessionId": idle})).await;
    assert_eq!(usage["rows"].as_array().unwrap().len(), 1, "{usage}");
    let outcome = conn.ok("session/prompt", json!({"sessionId": idle, "text": "second"})).await;
    assert_eq!(outcome["turn"], 2, "{outcome}");
    assert_eq!(outcome["stopReason"], "completed", "{outcome}");
    // The watched session kept every event flowing.
    conn.ok("session/prompt", json!({"sessionId": watched, "text": "watched"})).await;
    let events = conn.wait_turn_end(&sub, 1).await;
    crate::support::assert_contiguous(&events, 0);
    env.assert_audit_ok(&idle).await;
    env.assert_audit_ok(&watched).await;
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn beyond_the_memory_budget_the_least_recently_used_idle_sessions_are_unloaded() {
    let env = Env::new().await;
    let served = env.serve(&["--loaded-budget", "0", "--unload-after", "600"]).await;
    let conn = env.client().await;
    let session = new_session(&env, &conn).await;
    conn.ok("session/prompt", json!({"sessionId": session, "text": "hi"})).await;
    wait_loaded(&conn, 0).await;
    let usage = conn.ok("session/usage", json!({"sessionId": session})).await;
    assert_eq!(usage["rows"].as_array().unwrap().len(), 1, "{usage}");
    served.shutdown().await;
}

/// The budget weighs what a loaded session holds besides its log: the request body its loop
/// keeps (and the one "what the model saw" serialized last). Four sessions whose logs fit the
/// budget together, but not with their bodies: the least recently used are unloaded until
/// the rest fit.
#[tokio::test(flavor = "multi_thread")]
async fn the_memory_budget_counts_the_request_bodies_sessions_hold() {
    let env = Env::new().await;
    let served = env.serve(&["--loaded-budget", "1", "--unload-after", "600"]).await;
    let conn = env.client().await;
    // About 200 KB each: in the log once, and in the body of the step's request once.
    let text = "abcd efgh ".repeat(20_000);
    let mut sessions = Vec::new();
    for _ in 0..4 {
        let session = new_session(&env, &conn).await;
        let outcome = conn.ok("session/prompt", json!({"sessionId": session, "text": text})).await;
        assert_eq!(outcome["stopReason"], "completed", "{outcome}");
        sessions.push(session);
    }
    let logs: u64 =
        sessions.iter().map(|id| std::fs::metadata(env.log_path(id)).unwrap().len()).sum();
    assert!(logs < 1024 * 1024 && logs > 600 * 1024, "the logs alone fit the budget: {logs}");
    let status = wait_loaded(&conn, 2).await;
    let mut loaded: Vec<&str> = status["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    loaded.sort_unstable();
    let mut recent = vec![sessions[2].as_str(), sessions[3].as_str()];
    recent.sort_unstable();
    assert_eq!(loaded, recent, "the least recently used were unloaded: {status}");
    // An unloaded one answers as before, from its log.
    let request = conn.ok("session/request", json!({"sessionId": sessions[0], "step": 1})).await;
    assert!(request.to_string().contains("abcd efgh abcd"), "{request}");
    served.shutdown().await;
}

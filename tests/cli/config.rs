//! Configuration files and provider profiles end to end: `dsh config` and its sources, refusals
//! that name file, line and key, one daemon serving sessions on two profiles at once, a fork
//! onto another profile, an edit that reaches a running daemon (and a broken one that does
//! not), money in the usage view, and every bad input refused before anything is logged.

use std::time::{Duration, Instant};

use dsh_mock::{MockConfig, MockServer};
use serde_json::{Value, json};

use crate::support::{Env, describe, run, session_id_of, stderr, stdout};

/// A user configuration with two profiles on two mocks (`a` the default) and prices.
fn two_profiles(a: &str, b: &str) -> String {
    format!(
        r#"profile = "a"

[providers.a]
kind = "deepseek"
base_url = "{a}"
api_key_env = "DEEPSEEK_API_KEY"
model = "deepseek-v4-flash"

[providers.a.models.deepseek-v4-flash]
context_window = 1048576
price = {{ cache_hit = 1, cache_miss = 10, output = 100, currency = "USD" }}

[providers.b]
kind = "openai-compatible"
base_url = "{b}"
api_key_env = "DEEPSEEK_API_KEY"
model = "deepseek-v4-flash"
thinking_object = true
reasoning_passback = true

[providers.b.models.deepseek-v4-flash]
price = {{ cache_hit = 2, cache_miss = 20, output = 200, currency = "USD" }}
"#
    )
}

async fn dsh(env: &Env, args: &[&str]) -> std::process::Output {
    run(env.command_plain(&env.key, args)).await
}

async fn dsh_ok(env: &Env, args: &[&str]) -> std::process::Output {
    let output = dsh(env, args).await;
    assert!(output.status.success(), "dsh {args:?}: {}", describe(&output));
    output
}

async fn dsh_json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_slice(&dsh_ok(env, &all).await.stdout).unwrap()
}

async fn prompt_new(env: &Env, extra: &[&str], text: &str) -> String {
    let workspace = env.workspace.to_str().unwrap();
    let mut args = extra.to_vec();
    args.extend(["prompt", "--yes", "--workspace", workspace, text]);
    session_id_of(&dsh_ok(env, &args).await)
}

fn chat_bodies(mock: &MockServer) -> Vec<Vec<u8>> {
    mock.requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.body)
        .collect()
}

/// Every step's rebuilt wire body equals, byte for byte, a body the mock received.
async fn assert_bodies_rebuilt(env: &Env, session: &str, mock: &MockServer) {
    let received = chat_bodies(mock);
    let usage = dsh_json(env, &["usage", session]).await;
    for row in usage["rows"].as_array().unwrap() {
        let step = row["step"].as_u64().unwrap().to_string();
        let rebuilt = dsh_ok(env, &["saw", session, "--step", &step, "--wire"]).await.stdout;
        assert!(
            received.contains(&rebuilt),
            "step {step} of {session} was not received as rebuilt"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsh_config_names_the_source_of_every_value() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), two_profiles("http://127.0.0.1:9", "http://127.0.0.1:10"))
        .unwrap();
    std::fs::create_dir_all(env.workspace.join(".dsh")).unwrap();
    std::fs::write(env.workspace.join(".dsh/config.toml"), "[approvals]\nrun_command = \"deny\"\n")
        .unwrap();
    let mut command = env.command_plain(&env.key, &["--model", "deepseek-v4-flash", "config"]);
    command.env("DSH_PROVIDER", "b");
    let output = run(command).await;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    let user = env.user_config().display().to_string();
    let workspace_file = env.workspace.join(".dsh/config.toml").display().to_string();
    for (line, source) in [
        ("profile = \"b\"", "env DSH_PROVIDER".to_owned()),
        ("model = \"deepseek-v4-flash\"", "flag --model".to_owned()),
        ("providers.a.base_url = \"http://127.0.0.1:9\"", format!("{user}:5")),
        ("providers.b.kind = \"openai-compatible\"", format!("{user}:14")),
        ("approvals.run_command = \"deny\"", format!("{workspace_file}:2")),
        ("providers.deepseek.base_url = \"https://api.deepseek.com\"", "default".to_owned()),
    ] {
        let found = text.lines().find(|l| l.starts_with(line));
        let found = found.unwrap_or_else(|| panic!("no `{line}` in:\n{text}"));
        assert!(found.ends_with(&format!("# {source}")), "{found}\n  wanted source {source}");
    }
    assert!(!text.contains(&env.key), "no key is ever printed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_is_refused_naming_file_line_and_key_and_no_daemon_starts_on_it() {
    let env = Env::new().await;
    std::fs::write(
        env.user_config(),
        "profile = \"deepseek\"\n\n[context]\ntrim_at = 0.5\nbogus = 1\n",
    )
    .unwrap();
    let want = format!("{}:5: unknown field `bogus`", env.user_config().display());
    let output = dsh(&env, &["config"]).await;
    assert!(!output.status.success());
    assert!(stderr(&output).contains(&want), "{}", describe(&output));
    let workspace = env.workspace.to_str().unwrap();
    let output = dsh(&env, &["prompt", "--workspace", workspace, "Hi."]).await;
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains(&want),
        "the daemon's refusal reaches the user: {}",
        describe(&output)
    );
    assert!(env.log_files().is_empty(), "nothing was logged");

    // A key written in the file is refused without being repeated.
    std::fs::write(env.user_config(), "[providers.deepseek]\napi_key = \"sk-secret-123456\"\n")
        .unwrap();
    let output = dsh(&env, &["config"]).await;
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains(
            ":2: provider `deepseek`: an API key written in a configuration file is refused"
        ),
        "{}",
        describe(&output)
    );
    assert!(!stderr(&output).contains("sk-secret"), "{}", describe(&output));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_daemon_serves_two_profiles_at_once_and_a_fork_names_the_move() {
    let env = Env::new().await;
    let second = MockServer::start(MockConfig::default()).await.unwrap();
    let third = MockServer::start(MockConfig::default()).await.unwrap();
    let profile_c = format!(
        "\n[providers.c]\nkind = \"deepseek\"\nbase_url = \"{}\"\napi_key_env = \"DEEPSEEK_API_KEY\"\nmodel = \"deepseek-v4-pro\"\n",
        third.base_url()
    );
    let config = two_profiles(&env.mock.base_url(), &second.base_url()) + &profile_c;
    std::fs::write(env.user_config(), config).unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    // Both turns at the same time, in the one daemon the first command starts.
    let on_a_args = ["prompt", "--yes", "--workspace", &workspace, "Hello from a."];
    let (first, second_output) = tokio::join!(dsh(&env, &on_a_args), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        dsh(
            &env,
            &["--provider", "b", "prompt", "--yes", "--workspace", &workspace, "Hello from b."],
        )
        .await
    });
    assert!(first.status.success(), "{}", describe(&first));
    assert!(second_output.status.success(), "{}", describe(&second_output));
    let (on_a, on_b) = (session_id_of(&first), session_id_of(&second_output));
    assert_eq!(chat_bodies(&env.mock).len(), 1, "profile a's request went to a");
    assert_eq!(chat_bodies(&second).len(), 1, "profile b's request went to b");
    assert_bodies_rebuilt(&env, &on_a, &env.mock).await;
    assert_bodies_rebuilt(&env, &on_b, &second).await;
    env.assert_audit_ok(&on_a).await;
    env.assert_audit_ok(&on_b).await;
    let saw = dsh_json(&env, &["saw", &on_b, "--step", "1"]).await;
    assert_eq!(saw["wire"]["adapter"], "openai-chat/v1", "{saw:#}");
    assert_eq!(saw["header"]["config"]["profile"], "b");
    assert_eq!(saw["sent"]["adapter"], "openai-chat/v1");

    // The fork of a session on a moves to c (another server, another model): its first step
    // names the move as the cause of its cache drop.
    let forked = dsh_ok(&env, &["--provider", "c", "fork", &on_a]).await;
    let fork = stdout(&forked).trim().rsplit(' ').next().unwrap().to_owned();
    dsh_ok(&env, &["prompt", "--yes", "--session", &fork, "And now on c."]).await;
    assert_eq!(chat_bodies(&third).len(), 1, "the fork's request went to c");
    let usage = dsh_json(&env, &["usage", &fork]).await;
    let rows = usage["rows"].as_array().unwrap();
    let last = rows.last().unwrap();
    let causes = last["causes"].as_array().unwrap();
    assert!(
        causes.iter().any(|c| c["kind"] == "providerChanged"
            && c["from"] == "a/deepseek-v4-flash"
            && c["to"] == "c/deepseek-v4-pro"),
        "{last:#}"
    );
    assert!(
        last["explanation"]
            .as_str()
            .unwrap()
            .contains("provider changed a/deepseek-v4-flash → c/deepseek-v4-pro"),
        "{last:#}"
    );
    assert_eq!(last["dropped"], true, "another provider's cache is cold: {last:#}");
    let rebuilt = dsh_ok(&env, &["saw", &fork, "--step", "2", "--wire"]).await.stdout;
    assert_eq!(chat_bodies(&third), vec![rebuilt], "the fork's step rebuilds to what c received");
    env.assert_audit_ok(&fork).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_reaches_the_next_request_and_a_broken_edit_keeps_the_last_good() {
    let env = Env::new().await;
    let second = MockServer::start(MockConfig::default()).await.unwrap();
    let config = |url: &str| two_profiles(url, "http://127.0.0.1:10");
    std::fs::write(env.user_config(), config(&env.mock.base_url())).unwrap();
    let session = prompt_new(&env, &[], "First.").await;
    assert_eq!(chat_bodies(&env.mock).len(), 1);
    let notices = env.client().await;
    notices.ok("daemon/subscribe", json!({})).await;

    // Profile a now points at the second mock: the running daemon's next request goes there.
    std::fs::write(env.user_config(), config(&second.base_url())).unwrap();
    dsh_ok(&env, &["prompt", "--yes", "--session", &session, "Second."]).await;
    assert_eq!(chat_bodies(&env.mock).len(), 1, "nothing more went to the old URL");
    assert_eq!(chat_bodies(&second).len(), 1, "the edit reached the next request");
    let status = dsh_json(&env, &["status"]).await;
    let profile_a =
        status["profiles"].as_array().unwrap().iter().find(|p| p["name"] == "a").unwrap();
    assert_eq!(profile_a["baseUrl"], second.base_url(), "{status:#}");

    // A broken edit: reported (status, notice), and the last good configuration stays.
    std::fs::write(
        env.user_config(),
        format!("{}\n[context]\nnope = true\n", config("http://127.0.0.1:9")),
    )
    .unwrap();
    let started = Instant::now();
    let notice = loop {
        if let Some(notice) = notices.other().into_iter().find(|n| n["method"] == "daemon/notice") {
            break notice;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no daemon/notice: {:?}",
            notices.other()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let message = notice["params"]["result"]["message"].as_str().unwrap();
    assert_eq!(notice["params"]["result"]["kind"], "configError");
    assert!(
        message.contains(&format!("{}:", env.user_config().display()))
            && message.contains("unknown field `nope`"),
        "{message}"
    );
    let status = dsh_json(&env, &["status"]).await;
    assert!(
        status["configErrors"][0].as_str().unwrap().contains("unknown field `nope`"),
        "{status:#}"
    );
    dsh_ok(&env, &["prompt", "--yes", "--session", &session, "Third."]).await;
    assert_eq!(chat_bodies(&second).len(), 2, "the last good configuration is in use");
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_view_costs_each_step_at_its_profiles_prices() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), two_profiles(&env.mock.base_url(), "http://127.0.0.1:10"))
        .unwrap();
    env.script(json!([crate::support::tool_reply("Look.", "list_dir", json!({}))])).await;
    let session = prompt_new(&env, &[], "List the files.").await;
    let usage = dsh_json(&env, &["usage", &session]).await;
    let rows = usage["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let (mut amount, mut saved) = (0.0, 0.0);
    for row in rows {
        let u = &row["usage"];
        let (prompt, hit, out) = (
            u["promptTokens"].as_f64().unwrap(),
            u["cacheHitTokens"].as_f64().unwrap(),
            u["completionTokens"].as_f64().unwrap(),
        );
        // Profile a: hit 1, miss 10, output 100 per million tokens.
        let want = (hit * 1.0 + (prompt - hit) * 10.0 + out * 100.0) / 1e6;
        let want_saved = (prompt * 10.0 + out * 100.0) / 1e6 - want;
        let cost = &row["cost"];
        assert!((cost["amount"].as_f64().unwrap() - want).abs() < 1e-12, "{row:#}");
        assert!((cost["saved"].as_f64().unwrap() - want_saved).abs() < 1e-12, "{row:#}");
        assert_eq!(cost["currency"], "USD");
        assert_eq!(row["profile"], "a");
        (amount, saved) = (amount + want, saved + want_saved);
    }
    assert!(rows[1]["usage"]["cacheHitTokens"].as_u64().unwrap() > 0, "step 2 hits the cache");
    assert!((usage["cost"]["amount"].as_f64().unwrap() - amount).abs() < 1e-12, "{usage:#}");
    assert!((usage["cost"]["saved"].as_f64().unwrap() - saved).abs() < 1e-12, "{usage:#}");
    assert_eq!(
        usage["prices"],
        json!([{"profile": "a", "model": "deepseek-v4-flash", "price": {"cacheHit": 1.0, "cacheMiss": 10.0, "output": 100.0, "currency": "USD"}}])
    );
    let listing = dsh_json(&env, &["sessions"]).await;
    let listed = &listing["sessions"][0];
    assert!((listed["cost"]["amount"].as_f64().unwrap() - amount).abs() < 1e-12, "{listed:#}");
    let text = stdout(&dsh_ok(&env, &["usage", &session]).await);
    assert!(text.contains("the cache saved $"), "{text}");
    assert!(text.contains("prices of a/deepseek-v4-flash per million tokens: cache hit $1.00, cache miss $10.00, output $100.00"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_profiles_are_refused_before_anything_is_logged_and_a_dead_server_names_itself() {
    let env = Env::new().await;
    let key_file = env.root.join("b.key");
    std::fs::write(&key_file, "sk-from-file\n").unwrap();
    std::fs::set_permissions(&key_file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .unwrap();
    let config = format!(
        "{}\n[providers.leaky]\nkind = \"openai-compatible\"\nbase_url = \"{}\"\napi_key_file = \"{}\"\nmodel = \"m\"\n\n[providers.down]\nkind = \"deepseek\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"DEEPSEEK_API_KEY\"\nmodel = \"deepseek-v4-flash\"\n",
        two_profiles(&env.mock.base_url(), "http://127.0.0.1:10"),
        env.mock.base_url(),
        key_file.display()
    );
    std::fs::write(env.user_config(), config).unwrap();
    let workspace = env.workspace.to_str().unwrap();
    for (args, want) in [
        (
            vec!["--provider", "nope"],
            "no provider profile `nope` (configured: a, b, deepseek, down, leaky)".to_owned(),
        ),
        (
            vec!["--model", "gpt-9"],
            "profile `a` has no model `gpt-9` (its models: deepseek-v4-flash)".to_owned(),
        ),
        (vec!["--provider", "leaky"], format!("run `chmod 600 {}`", key_file.display())),
    ] {
        let mut all = args.clone();
        all.extend(["prompt", "--yes", "--workspace", workspace, "Hi."]);
        let output = dsh(&env, &all).await;
        assert!(!output.status.success(), "{args:?}: {}", describe(&output));
        assert!(stderr(&output).contains(&want), "{args:?}: {}", describe(&output));
        assert!(env.log_files().is_empty(), "{args:?} logged something");
        assert!(!stderr(&output).contains("sk-from-file"));
    }

    // A profile whose server is down: the turn ends with a logged error naming the profile and
    // its URL; the other profile's session is unaffected.
    let output =
        dsh(&env, &["--provider", "down", "prompt", "--yes", "--workspace", workspace, "Hi."])
            .await;
    assert!(!output.status.success());
    let down = session_id_of(&output);
    let events = env.events(&down);
    let turn_end = events.iter().rev().find_map(|e| match &e.data {
        dsh_session::EventData::TurnEnd(end) => Some(end.clone()),
        _ => None,
    });
    let error = turn_end.and_then(|end| end.error).unwrap_or_default();
    assert!(error.contains("profile down, http://127.0.0.1:1/chat/completions"), "{error}");
    let fine = prompt_new(&env, &[], "Still fine?").await;
    env.assert_audit_ok(&fine).await;
}

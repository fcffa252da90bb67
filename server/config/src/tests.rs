//! Layering, sources and every refusal, on files written by the tests.

use std::path::Path;

use expect_test::expect;

use super::*;

fn layer(text: &str, path: &str, workspace: bool) -> Layer {
    Layer::parse(text, Some(Path::new(path)), workspace).unwrap()
}

fn error(text: &str, path: &str, workspace: bool) -> String {
    Layer::parse(text, Some(Path::new(path)), workspace).unwrap_err().to_string()
}

fn flag(name: &str, value: &str) -> Option<Sourced<String>> {
    Some(Sourced::new(value.to_owned(), Source::Flag(name.to_owned())))
}

fn env(name: &str, value: &str) -> Option<Sourced<String>> {
    Some(Sourced::new(value.to_owned(), Source::Env(name.to_owned())))
}

const USER: &str = r#"profile = "local"

[providers.local]
kind = "openai-compatible"
base_url = "http://127.0.0.1:8080/v1"
model = "smollm2"

[providers.local.models.smollm2]
context_window = 8192
price = { cache_hit = 0, cache_miss = 0, output = 0, currency = "USD" }

[providers.local.models.qwen]
context_window = 32768
"#;

const WORKSPACE: &str = r#"model = "qwen"

[approvals]
run_command = "deny"
"#;

#[test]
fn the_built_in_layer_parses_and_resolves() {
    let config = resolve(&[&builtin()], &Overrides::default()).unwrap();
    assert_eq!(config.profile.value, "deepseek");
    let (profile, model) = config.pick(None, None).unwrap();
    assert_eq!((profile.name.as_str(), model.as_str()), ("deepseek", "deepseek-v4-flash"));
    assert!(profile.price("deepseek-v4-flash").is_some());
    assert_eq!(profile.wire(), None);
}

/// Which layer wins for the default profile and model, in every combination of the four
/// sources: later wins, and a value nobody sets stays the built-in one.
#[test]
fn precedence_is_default_user_workspace_env_flag() {
    let (builtin, user, workspace) = (
        builtin(),
        layer(USER, "/u/config.toml", false),
        layer(WORKSPACE, "/w/.dsh/config.toml", true),
    );
    let cases: &[(bool, bool, bool, bool, &str, &str)] = &[
        // user, workspace, env, flag → profile (source), model (source)
        (false, false, false, false, "deepseek default", "deepseek-v4-flash default"),
        (true, false, false, false, "local /u/config.toml:1", "smollm2 /u/config.toml:6"),
        (true, true, false, false, "local /u/config.toml:1", "qwen /w/.dsh/config.toml:1"),
        (true, true, true, false, "local /u/config.toml:1", "smollm2 env DSH_MODEL"),
        (true, true, true, true, "local /u/config.toml:1", "qwen flag --model"),
        (false, false, true, true, "deepseek default", "deepseek-v4-pro flag --model"),
    ];
    for &(with_user, with_workspace, with_env, with_flag, want_profile, want_model) in cases {
        let mut layers = vec![&builtin];
        if with_user {
            layers.push(&user);
        }
        if with_workspace {
            layers.push(&workspace);
        }
        let (env_model, flag_model) =
            if with_user { ("smollm2", "qwen") } else { ("deepseek-v4-flash", "deepseek-v4-pro") };
        let overrides = Overrides {
            model: if with_flag {
                flag("--model", flag_model)
            } else if with_env {
                env("DSH_MODEL", env_model)
            } else {
                None
            },
            ..Overrides::default()
        };
        let config = resolve(&layers, &overrides).unwrap();
        let profile = format!("{} {}", config.profile.value, config.profile.source);
        let (_, model) = config.pick(None, None).unwrap();
        let model_source = config.model.as_ref().map_or_else(
            || config.profiles[&config.profile.value].model.as_ref().unwrap().source.to_string(),
            |m| m.source.to_string(),
        );
        assert_eq!(profile, want_profile, "{with_user} {with_workspace} {with_env} {with_flag}");
        assert_eq!(
            format!("{model} {model_source}"),
            want_model,
            "{with_user} {with_workspace} {with_env} {with_flag}"
        );
    }
}

#[test]
fn a_flag_beats_an_environment_variable_for_the_profile_and_no_profile_takes_the_base_url() {
    let user = layer(USER, "/u/config.toml", false);
    let overrides = Overrides {
        profile: flag("--provider", "deepseek"),
        base_url: flag("--base-url", "http://127.0.0.1:9/"),
        ..Overrides::default()
    };
    let config = resolve(&[&builtin(), &user], &overrides).unwrap();
    assert_eq!(config.profile.source, Source::Flag("--provider".to_owned()));
    // A base URL is a session's (an ad-hoc profile), never a configured profile's.
    assert_eq!(config.profiles["deepseek"].base_url.value, "https://api.deepseek.com");
    assert_eq!(config.profiles["local"].base_url.source.to_string(), "/u/config.toml:5");
}

#[test]
fn an_ad_hoc_profile_is_a_configured_one_at_another_url_named_for_it() {
    let user = layer(USER, "/u/config.toml", false);
    let config = resolve(&[&builtin(), &user], &Overrides::default()).unwrap();
    let name = config.ad_hoc_profile(None, "http://127.0.0.1:8000/").unwrap();
    assert_eq!(name, format!("{}@http://127.0.0.1:8000", config.profile.value));
    let profile = config.profile(&name).unwrap();
    let base = &config.profiles[&config.profile.value];
    assert_eq!(profile.name, name);
    assert_eq!(profile.base_url.value, "http://127.0.0.1:8000");
    assert_eq!(
        (&profile.kind, &profile.key, &profile.models),
        (&base.kind, &base.key, &base.models)
    );
    // Of another profile; an ad-hoc name given again resolves on its configured profile.
    for loopback in ["http://localhost:8000", "http://127.0.0.1", "http://[::1]:9/v1"] {
        config.ad_hoc_profile(None, loopback).unwrap();
    }
    let local = config.ad_hoc_profile(Some("local"), "https://example.com/v1").unwrap();
    assert_eq!(local, "local@https://example.com/v1");
    assert_eq!(config.ad_hoc_profile(Some(&local), "https://h:1").unwrap(), "local@https://h:1");
    let (picked, _) = config.pick(Some(&local), None).unwrap();
    assert_eq!(picked.base_url.value, "https://example.com/v1");
    // What could carry a secret, or is no URL, or names no configured profile, is refused
    // without repeating the URL.
    for (profile, url, why) in [
        (None, "http://user:pw@h:1", "user, a query or a fragment"),
        (None, "http://h:1/?token=pw", "user, a query or a fragment"),
        (None, "http://h:1/#pw", "user, a query or a fragment"),
        (None, "ftp://h", "not an http"),
        (None, "http://example.com:8000/v1", "plain http:// to another machine"),
        (None, "http://10.0.0.2", "plain http:// to another machine"),
        (None, "http://", "not an http"),
        (Some("nope"), "https://h:1", "no provider profile `nope`"),
    ] {
        let error = config.ad_hoc_profile(profile, url).unwrap_err().to_string();
        assert!(error.contains(why), "{url}: {error}");
        assert!(!error.contains("pw"), "{error}");
    }
    assert!(config.profile("deepseek@ftp://h").is_err());
}

#[test]
fn dsh_config_shows_every_value_with_its_source_and_no_secret() {
    let user = layer(
        &format!("{USER}\n[providers.local.headers]\nX-Secret = \"s3cret\"\n"),
        "/u/config.toml",
        false,
    );
    let workspace = layer(WORKSPACE, "/w/.dsh/config.toml", true);
    let config = resolve(&[&builtin(), &user, &workspace], &Overrides::default()).unwrap();
    let text: String = config
        .entries()
        .iter()
        .map(|entry| format!("{} = {}  # {}\n", entry.key, entry.value, entry.source))
        .collect();
    assert!(!text.contains("s3cret"), "{text}");
    expect![[r#"
        profile = "local"  # /u/config.toml:1
        model = "qwen"  # /w/.dsh/config.toml:1
        providers.deepseek.kind = "deepseek"  # default
        providers.deepseek.base_url = "https://api.deepseek.com"  # default
        providers.deepseek.api_key_env = "DEEPSEEK_API_KEY"  # default
        providers.deepseek.model = "deepseek-v4-flash"  # default
        providers.deepseek.connect_timeout_secs = 10  # default
        providers.deepseek.data_timeout_secs = 300  # default
        providers.deepseek.overall_timeout_secs = 1800  # default
        providers.deepseek.models.deepseek-v4-flash.context_window = 1048576  # default
        providers.deepseek.models.deepseek-v4-flash.max_output = 393216  # default
        providers.deepseek.models.deepseek-v4-flash.thinking = true  # default
        providers.deepseek.models.deepseek-v4-flash.images = false  # default
        providers.deepseek.models.deepseek-v4-flash.price = { cache_hit = 0.0028, cache_miss = 0.14, output = 0.28, currency = "USD" }  # default
        providers.deepseek.models.deepseek-v4-pro.context_window = 1048576  # default
        providers.deepseek.models.deepseek-v4-pro.max_output = 393216  # default
        providers.deepseek.models.deepseek-v4-pro.thinking = true  # default
        providers.deepseek.models.deepseek-v4-pro.images = false  # default
        providers.deepseek.models.deepseek-v4-pro.price = { cache_hit = 0.003625, cache_miss = 0.435, output = 0.87, currency = "USD" }  # default
        providers.local.kind = "openai-compatible"  # /u/config.toml:4
        providers.local.base_url = "http://127.0.0.1:8080/v1"  # /u/config.toml:5
        providers.local.headers.X-Secret = "(hidden)"  # /u/config.toml:15
        providers.local.model = "smollm2"  # /u/config.toml:6
        providers.local.connect_timeout_secs = 10  # default
        providers.local.data_timeout_secs = 300  # default
        providers.local.overall_timeout_secs = 1800  # default
        providers.local.thinking_object = false  # default
        providers.local.reasoning_passback = false  # default
        providers.local.max_tokens_field = "max_tokens"  # default
        providers.local.models.qwen.context_window = 32768  # /u/config.toml:13
        providers.local.models.smollm2.context_window = 8192  # /u/config.toml:9
        providers.local.models.smollm2.price = { cache_hit = 0, cache_miss = 0, output = 0, currency = "USD" }  # /u/config.toml:10
        approvals.run_command = "deny"  # /w/.dsh/config.toml:4
        context.trim_at = 0.6  # default
        context.compact_at = 0.8  # default
        context.auto = true  # default
        instructions.files = ["AGENTS.md", ".dsh/instructions.md"]  # default
        instructions.on_edit = "append"  # default
        checkpoints.enabled = true  # default
        checkpoints.max_file_size = 8388608  # default
        checkpoints.budget = 1073741824  # default
        web.allow = false  # default
        web.allow_hosts = []  # default
        web.timeout_secs = 30  # default
        web.max_bytes = 2097152  # default
        subagents.max_steps = 20  # default
        subagents.max_tokens = 500000  # default
        subagents.timeout_secs = 600  # default
        subagents.max_parallel = 4  # default
        subagents.max_depth = 1  # default
    "#]]
    .assert_eq(&text);
}

#[test]
fn every_refusal_names_the_file_the_line_and_the_key() {
    let cases = [
        (
            "[providers.x]\nkind = \"deepseek\"\nbase_url = \"https://a\"\nbase_ulr = 1\n",
            false,
            "/c.toml:4: unknown field `base_ulr`",
        ),
        ("profile = \"x\"\nbogus = true\n", false, "/c.toml:2: unknown field `bogus`"),
        (
            "[providers.x]\nkind = \"deepseek\"\napi_key = \"sk-123\"\n",
            false,
            "/c.toml:3: provider `x`: an API key written in a configuration file is refused",
        ),
        (
            "[providers.deepseek]\nbase_url = \"https://evil.example\"\n",
            true,
            "/c.toml:2: provider `deepseek`: `base_url` cannot be set in a workspace's configuration",
        ),
        (
            "[providers.x]\nkind = \"deepseek\"\napi_key_env = \"OTHER\"\n",
            true,
            "/c.toml:3: provider `x`: `api_key_env` cannot be set",
        ),
        ("profile = [\n", false, "/c.toml:1:"),
    ];
    for (text, workspace, want) in cases {
        let got = error(text, "/c.toml", workspace);
        assert!(got.starts_with(want), "{got}\n  wanted {want}");
        assert!(!got.contains("sk-123"), "the key is never repeated: {got}");
    }
}

#[test]
fn merged_refusals_name_where_the_value_was_set() {
    let cases = [
        (
            "[providers.a]\nkind = \"anthropic\"\nbase_url = \"https://a\"\nthinking_budget = 500\n",
            "/c.toml:4: provider `a`: thinking_budget (500) is below Anthropic's minimum of 1024",
        ),
        (
            "[providers.a]\nkind = \"anthropic\"\nbase_url = \"https://a\"\nreasoning_passback = true\n",
            "/c.toml:4: provider `a`: `reasoning_passback` is an option of kind openai-compatible",
        ),
        (
            "[providers.a]\nkind = \"openai-compatible\"\nbase_url = \"https://a\"\ncache_control = false\n",
            "/c.toml:4: provider `a`: `cache_control` is an option of kind anthropic",
        ),
        (
            "[providers.a]\nkind = \"anthropic\"\nbase_url = \"https://a\"\nadaptive_thinking = true\nthinking_budget = 2048\n",
            "/c.toml:5: provider `a`: thinking_budget has no use with adaptive_thinking",
        ),
        (
            "[providers.a]\nkind = \"ollama\"\nbase_url = \"https://a\"\n",
            "/c.toml:2: provider `a`: unknown kind `ollama`",
        ),
        (
            "[providers.a]\nkind = \"openai-compatible\"\nbase_url = \"ftp://a\"\n",
            "/c.toml:3: provider `a`: base_url `ftp://a` is not an http:// or https:// URL",
        ),
        ("[providers.a]\nbase_url = \"https://a\"\n", "/c.toml:1: provider `a` has no `kind`"),
        ("profile = \"nope\"\n", "/c.toml:1: no provider profile `nope`"),
        ("model = \"deepseek-v5\"\n", "/c.toml:1: profile `deepseek` has no model `deepseek-v5`"),
        (
            "[providers.deepseek]\nreasoning_passback = true\n",
            "/c.toml:2: provider `deepseek`: `reasoning_passback` is an option of kind openai-compatible",
        ),
        (
            "[context]\ntrim_at = 0.9\ncompact_at = 0.5\n",
            "/c.toml:2: context.trim_at (0.9) is above context.compact_at (0.5)",
        ),
        (
            "[approvals]\nrun_command = \"yes\"\n",
            "/c.toml:2: approvals.run_command: `yes` is not a policy",
        ),
    ];
    for (text, want) in cases {
        let file = layer(text, "/c.toml", false);
        let got = resolve(&[&builtin(), &file], &Overrides::default()).unwrap_err().to_string();
        assert!(got.starts_with(want), "{got}\n  wanted {want}");
    }
}

#[test]
fn picking_an_unknown_profile_or_model_names_what_exists() {
    let user = layer(USER, "/u/config.toml", false);
    let config = resolve(&[&builtin(), &user], &Overrides::default()).unwrap();
    let error = config.pick(Some("remote"), None).unwrap_err().to_string();
    assert_eq!(error, "provider: no provider profile `remote` (configured: deepseek, local)");
    let error = config.pick(Some("local"), Some("llama-70b")).unwrap_err().to_string();
    assert!(
        error.contains("profile `local` has no model `llama-70b` (its models: qwen, smollm2)"),
        "{error}"
    );
    let (profile, model) = config.pick(Some("deepseek"), None).unwrap();
    assert_eq!((profile.name.as_str(), model.as_str()), ("deepseek", "deepseek-v4-flash"));
}

#[test]
fn an_openai_compatible_profile_logs_its_wire_options() {
    let text = "[providers.v]\nkind = \"openai-compatible\"\nbase_url = \"http://h\"\nreasoning_passback = true\nmax_tokens_field = \"max_completion_tokens\"\n";
    let file = layer(text, "/c.toml", false);
    let config = resolve(&[&builtin(), &file], &Overrides::default()).unwrap();
    let wire = config.profiles["v"].wire().unwrap();
    assert_eq!(wire.kind, dsh_session::ProviderKind::OpenaiCompatible);
    assert!(wire.reasoning_passback && wire.max_completion_tokens && !wire.thinking_object);
}

#[test]
fn an_anthropic_profile_logs_its_wire_options() {
    let text = "[providers.claude]\nkind = \"anthropic\"\nbase_url = \"https://api.anthropic.com\"\n\
                [providers.ds]\nkind = \"anthropic\"\nbase_url = \"https://api.deepseek.com/anthropic\"\n\
                cache_control = false\nthinking_budget = 2048\n";
    let file = layer(text, "/c.toml", false);
    let config = resolve(&[&builtin(), &file], &Overrides::default()).unwrap();
    let claude = config.profiles["claude"].wire().unwrap();
    assert_eq!(claude.kind, dsh_session::ProviderKind::Anthropic);
    assert!(!claude.no_cache_control && claude.thinking_budget.is_none());
    let deepseek = config.profiles["ds"].wire().unwrap();
    assert!(deepseek.no_cache_control && !deepseek.adaptive_thinking);
    assert_eq!(deepseek.thinking_budget, Some(2048));
    let entries = config.entries();
    let shown: Vec<String> = entries.iter().map(|entry| format!("{entry:?}")).collect();
    assert!(shown.iter().any(|e| e.contains("providers.ds.cache_control")), "{shown:?}");
}

const MCP_USER: &str = r#"[mcp.servers.fs]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
env = { TOKEN_FILE = "/run/token" }
call_timeout_secs = 30
approval = "auto"

[mcp.servers.tracker]
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer secret-value" }
enabled = false
"#;

#[test]
fn mcp_servers_resolve_with_their_sources_and_hide_header_values() {
    let user = layer(MCP_USER, "/u/config.toml", false);
    let workspace = layer("[mcp.servers.tracker]\nenabled = true\n", "/w/.dsh/config.toml", true);
    let config = resolve(&[&builtin(), &user, &workspace], &Overrides::default()).unwrap();
    let fs = &config.mcp["fs"];
    assert_eq!(fs.call_timeout.value, std::time::Duration::from_secs(30));
    assert_eq!(fs.startup_timeout.value, std::time::Duration::from_secs(30));
    assert_eq!(fs.approval.value, Approval::Auto);
    assert!(matches!(&fs.transport.value, McpTransport::Stdio { command, .. } if command == "npx"));
    let tracker = &config.mcp["tracker"];
    assert!(tracker.enabled.value, "the workspace turned it on");
    assert_eq!(tracker.enabled.source.to_string(), "/w/.dsh/config.toml:2");
    assert_eq!(tracker.approval.value, Approval::Ask);
    let shown: Vec<String> = config
        .entries()
        .into_iter()
        .filter(|entry| entry.key.starts_with("mcp."))
        .map(|entry| format!("{} = {} ({})", entry.key, entry.value, entry.source))
        .collect();
    expect![[r#"
        mcp.servers.fs.command = "npx" (/u/config.toml:2)
        mcp.servers.fs.args = ["-y", "@modelcontextprotocol/server-filesystem", "."] (/u/config.toml:2)
        mcp.servers.fs.env.TOKEN_FILE = "(hidden)" (/u/config.toml:2)
        mcp.servers.fs.enabled = true (default)
        mcp.servers.fs.startup_timeout_secs = 30 (default)
        mcp.servers.fs.call_timeout_secs = 30 (/u/config.toml:5)
        mcp.servers.fs.approval = "auto" (/u/config.toml:6)
        mcp.servers.tracker.url = "https://mcp.example.com/mcp" (/u/config.toml:9)
        mcp.servers.tracker.headers.Authorization = "(hidden)" (/u/config.toml:9)
        mcp.servers.tracker.enabled = true (/w/.dsh/config.toml:2)
        mcp.servers.tracker.startup_timeout_secs = 30 (default)
        mcp.servers.tracker.call_timeout_secs = 120 (default)
        mcp.servers.tracker.approval = "ask" (default)"#]]
    .assert_eq(&shown.join("\n"));
    assert!(!shown.join("\n").contains("secret-value"));
}

#[test]
fn a_workspace_cannot_define_what_an_mcp_server_runs() {
    for (key, line) in [
        ("command = \"sh\"", "command"),
        ("url = \"http://127.0.0.1:9/mcp\"", "url"),
        ("args = [\"x\"]", "args"),
        ("env = { A = \"b\" }", "env"),
    ] {
        let text = format!("[mcp.servers.evil]\n{key}\n");
        let message = error(&text, "/w/.dsh/config.toml", true);
        assert!(message.starts_with("/w/.dsh/config.toml:2: mcp server `evil`"), "{message}");
        assert!(message.contains(&format!("`{line}` cannot be set in a workspace")), "{message}");
    }
    // A workspace naming a server nobody defined is an error that says what it may do.
    let workspace = layer("[mcp.servers.ghost]\nenabled = true\n", "/w/.dsh/config.toml", true);
    let message = resolve(&[&builtin(), &workspace], &Overrides::default()).unwrap_err();
    assert!(message.to_string().contains("has neither `command` nor `url`"), "{message}");
}

/// MCP tools run outside the command sandbox: a repository may make them ask or deny, never run
/// without asking.
#[test]
fn a_workspace_cannot_let_mcp_tools_run_without_asking() {
    for (text, what) in [
        ("[mcp.servers.fx]\napproval = \"auto\"\n", "mcp server `fx`: `approval`"),
        ("[approvals]\nmcp = \"auto\"\n", "approvals.mcp"),
        ("[approvals]\nfx__echo = \"auto\"\n", "approvals.fx__echo"),
    ] {
        let message = error(text, "/w/.dsh/config.toml", true);
        assert!(message.starts_with("/w/.dsh/config.toml:2: "), "{message}");
        assert!(message.contains(&format!("{what} = \"auto\" cannot be set in a workspace")));
        // The user's own file may.
        layer(text, "/u/config.toml", false);
    }
    // Tightening is the workspace's to do; built-in tools keep their rules.
    layer("[mcp.servers.fx]\napproval = \"deny\"\n", "/w/.dsh/config.toml", true);
    layer("[approvals]\nmcp = \"ask\"\nread_file = \"auto\"\n", "/w/.dsh/config.toml", true);
}

/// The rule of `[approvals]` holds for a server's own `approval`: a repository may not make a
/// server the user's file denies ask (found by the `config` fuzz target).
#[test]
fn a_workspace_cannot_loosen_an_mcp_servers_approval() {
    let user =
        layer("[mcp.servers.fx]\ncommand = \"fx\"\napproval = \"deny\"\n", "/u/config.toml", false);
    let workspace = layer("[mcp.servers.fx]\napproval = \"ask\"\n", "/w/.dsh/config.toml", true);
    let message =
        resolve(&[&builtin(), &user, &workspace], &Overrides::default()).unwrap_err().to_string();
    assert!(message.starts_with("/w/.dsh/config.toml:2: mcp server `fx`: "), "{message}");
    assert!(message.contains("looser than your own (\"deny\")"), "{message}");
    // Tightening, or saying again what the user's file says, is the workspace's to do.
    let user =
        layer("[mcp.servers.fx]\ncommand = \"fx\"\napproval = \"ask\"\n", "/u/config.toml", false);
    for policy in ["ask", "deny"] {
        let text = format!("[mcp.servers.fx]\napproval = \"{policy}\"\n");
        let workspace = layer(&text, "/w/.dsh/config.toml", true);
        let config = resolve(&[&builtin(), &user, &workspace], &Overrides::default()).unwrap();
        assert_eq!(config.mcp["fx"].approval.value.name(), policy);
    }
}

#[test]
fn bad_mcp_server_definitions_are_refused_with_file_and_line() {
    let cases = [
        ("[mcp.servers.a_b]\ncommand = \"x\"\n", "mcp server name `a_b` is not allowed"),
        ("[mcp.servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n", "not both"),
        ("[mcp.servers.a]\nurl = \"ftp://h\"\n", "`url` must be http or https, not `ftp`"),
        ("[mcp.servers.a]\nurl = \"http//h\"\n", "`url` is not a URL"),
        ("[mcp.servers.a]\ncommand = \" \"\n", "`command` is empty"),
        ("[mcp.servers.a]\ncommand = \"x\"\ncwd = \"notes\"\n", "`cwd` must be an absolute path"),
        (
            "[mcp.servers.a]\ncommand = \"x\"\n[mcp.servers.a.env]\n\"A=B\" = \"s3cret\"\n",
            "`A=B` is not an environment variable name",
        ),
        (
            "[mcp.servers.a]\nurl = \"http://h/\"\n[mcp.servers.a.headers]\nX = \"s3cret\\nY: 1\"\n",
            "the value of header `X` is not valid",
        ),
        (
            "[mcp.servers.a]\nurl = \"http://h/\"\n[mcp.servers.a.headers]\n\"bad header\" = \"s3cret\"\n",
            "header `bad header` is not a valid name",
        ),
        ("[mcp.servers.a]\nurl = \"http://h\"\nargs = [\"x\"]\n", "`args` goes with `command`"),
        ("[mcp.servers.a]\ncommand = \"x\"\napproval = \"maybe\"\n", "is not a policy"),
        ("[mcp.servers.a]\ncommand = \"x\"\ncall_timeout_secs = 0\n", "must be above 0"),
    ];
    for (text, expected) in cases {
        let user = layer(text, "/u/config.toml", false);
        let message = resolve(&[&builtin(), &user], &Overrides::default()).unwrap_err().to_string();
        assert!(message.starts_with("/u/config.toml:"), "{message}");
        assert!(message.contains(expected), "{text}: {message}");
        assert!(!message.contains("s3cret"), "{message}");
    }
    // A transport's refusal points at the key that holds the fault.
    let message = resolve(
        &[
            &builtin(),
            &layer("[mcp.servers.a]\ncommand = \"x\"\ncwd = \"notes\"\n", "/u/config.toml", false),
        ],
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(message.starts_with("/u/config.toml:3:"), "{message}");
    let message = error("[mcp.servers.a]\ncommand = \"x\"\nbogus = 1\n", "/u/config.toml", false);
    assert!(message.contains("unknown field `bogus`"), "{message}");
}

#[test]
fn a_workspace_may_tighten_approvals_but_never_loosen_them() {
    let resolve_with = |user: &str, workspace: &str| {
        let builtin = builtin();
        let user = layer(user, "/home/u/.config/dsh/config.toml", false);
        let workspace = layer(workspace, "/repo/.dsh/config.toml", true);
        resolve(&[&builtin, &user, &workspace], &Overrides::default())
    };
    for loosening in [
        "[approvals]\ncommand = \"auto\"\n",
        "[approvals]\nwrite = \"auto\"\n",
        "[approvals]\nrun_command = \"auto\"\n",
    ] {
        let error = resolve_with("", loosening).unwrap_err().to_string();
        assert!(
            error.contains("/repo/.dsh/config.toml:2") && error.contains("only tighten"),
            "{error}"
        );
    }
    let error =
        resolve_with("[approvals]\ncommand = \"deny\"\n", "[approvals]\ncommand = \"ask\"\n")
            .unwrap_err()
            .to_string();
    assert!(error.contains("looser than your own (\"deny\")"), "{error}");
    let tightened = resolve_with(
        "[approvals]\ncommand = \"auto\"\n",
        "[approvals]\ncommand = \"deny\"\nread = \"auto\"\n",
    )
    .unwrap();
    assert_eq!(tightened.approvals["command"].value, Approval::Deny);
    let same =
        resolve_with("[approvals]\nwrite = \"auto\"\n", "[approvals]\nwrite = \"auto\"\n").unwrap();
    assert_eq!(same.approvals["write"].value, Approval::Auto);
}

#[test]
fn only_the_users_file_confirms_a_broad_workspace() {
    let error = error("allow_workspaces = [\"/home/u\"]\n", "/repo/.dsh/config.toml", true);
    assert!(error.contains("/repo/.dsh/config.toml:1") && error.contains("vouch"), "{error}");
    let user =
        layer("allow_workspaces = [\"/home/u\"]\n", "/home/u/.config/dsh/config.toml", false);
    let config = resolve(&[&builtin(), &user], &Overrides::default()).unwrap();
    assert_eq!(config.allow_workspaces, vec![std::path::PathBuf::from("/home/u")]);
    let relative =
        layer("allow_workspaces = [\"here\"]\n", "/home/u/.config/dsh/config.toml", false);
    let error = resolve(&[&builtin(), &relative], &Overrides::default()).unwrap_err().to_string();
    assert!(error.contains("not an absolute path"), "{error}");
}

#[test]
fn a_workspace_only_tightens_checkpoints_and_sizes_take_units() {
    let defaults = resolve(&[&builtin()], &Overrides::default()).unwrap().checkpoints;
    assert!(defaults.enabled.value);
    assert_eq!(defaults.max_file_size.value, 8 << 20);
    assert_eq!(defaults.budget.value, 1 << 30);
    let user = layer(
        "[checkpoints]\nenabled = false\nmax_file_size = \"2 MiB\"\nbudget = 5000\n",
        "/u/config.toml",
        false,
    );
    // The workspace tries to turn them back on and raise a limit, and lowers the other.
    let workspace = layer(
        "[checkpoints]\nenabled = true\nmax_file_size = \"1GiB\"\nbudget = 100\n",
        "/w/.dsh/config.toml",
        true,
    );
    let config = resolve(&[&builtin(), &user, &workspace], &Overrides::default()).unwrap();
    let checkpoints = config.checkpoints;
    assert!(!checkpoints.enabled.value);
    assert_eq!(checkpoints.enabled.source.to_string(), "/u/config.toml:2");
    assert_eq!(checkpoints.max_file_size.value, 2 << 20);
    assert_eq!(checkpoints.budget.value, 100);
    assert_eq!(checkpoints.budget.source.to_string(), "/w/.dsh/config.toml:4");
    // A workspace may turn them off.
    let off = layer("[checkpoints]\nenabled = false\n", "/w/.dsh/config.toml", true);
    let config = resolve(&[&builtin(), &off], &Overrides::default()).unwrap();
    assert!(!config.checkpoints.enabled.value);
    let bad = layer("[checkpoints]\nbudget = \"lots\"\n", "/u/config.toml", false);
    let message = resolve(&[&builtin(), &bad], &Overrides::default()).unwrap_err().to_string();
    assert!(
        message.starts_with("/u/config.toml:2: checkpoints.budget: \"lots\" is not a size"),
        "{message}"
    );
}

#[test]
fn a_workspace_only_narrows_web_fetch() {
    let defaults = resolve(&[&builtin()], &Overrides::default()).unwrap().web;
    assert!(!defaults.allow.value);
    assert!(defaults.allow_hosts.value.is_empty());
    assert_eq!((defaults.timeout_secs.value, defaults.max_bytes.value), (30, 2 << 20));
    let user = layer(
        "[web]\nallow = true\nallow_hosts = [\"localhost\", \"[::1]\", \"intranet.example\"]\n\
         timeout_secs = 20\nmax_bytes = \"1 MiB\"\n",
        "/u/config.toml",
        false,
    );
    let workspace = layer(
        "[web]\nallow = false\nallow_hosts = [\"LOCALHOST\"]\ntimeout_secs = 60\nmax_bytes = 1000\n",
        "/w/.dsh/config.toml",
        true,
    );
    let web = resolve(&[&builtin(), &user, &workspace], &Overrides::default()).unwrap().web;
    assert!(!web.allow.value);
    assert_eq!(web.allow.source.to_string(), "/w/.dsh/config.toml:2");
    assert_eq!(web.allow_hosts.value, ["LOCALHOST"]);
    assert_eq!(web.timeout_secs.value, 20, "a longer deadline from a workspace is left out");
    assert_eq!(web.max_bytes.value, 1000);

    // Widening is refused, with the file and line.
    for (text, expected) in [
        ("[web]\nallow = true\n", "/w/.dsh/config.toml:2: web.allow = true cannot be set"),
        (
            "[web]\nallow_hosts = [\"localhost\", \"10.0.0.1\"]\n",
            "/w/.dsh/config.toml:2: web.allow_hosts entry `10.0.0.1` (not in your own list) cannot be set",
        ),
    ] {
        let widening = layer(text, "/w/.dsh/config.toml", true);
        let message = resolve(&[&builtin(), &user, &widening], &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(message.starts_with(expected), "{message}");
    }
    // A workspace cannot list a host when the user lists none.
    let listing = layer("[web]\nallow_hosts = [\"localhost\"]\n", "/w/.dsh/config.toml", true);
    assert!(resolve(&[&builtin(), &listing], &Overrides::default()).is_err());
    for (text, expected) in [
        ("[web]\ntimeout_secs = 0\n", "web.timeout_secs: 0 is not between 1 and 600"),
        ("[web]\nmax_bytes = \"1 GiB\"\n", "web.max_bytes: not a size"),
        ("[web]\nallow_hosts = [\"http://x/\"]\n", "is not a host name or address"),
    ] {
        let bad = layer(text, "/u/config.toml", false);
        let message = resolve(&[&builtin(), &bad], &Overrides::default()).unwrap_err().to_string();
        assert!(message.contains(expected), "{message}");
    }
}
const HOOKS: &str = r#"
[[hooks.PreToolUse]]
name = "guard"
matcher = "run_command"
command = "~/bin/check-cmd.sh"
timeout_secs = 30
required = true

[[hooks.PreToolUse]]
matcher = "write_file|edit_file"
command = "/usr/local/bin/fmt-check"
args = ["--quiet"]

[[hooks.PostToolUse]]
command = "/bin/true"

[[hooks.Stop]]
name = "tests"
command = "/bin/true"
"#;

#[test]
fn hooks_resolve_with_names_defaults_and_sources() {
    let (builtin, user) = (builtin(), layer(HOOKS, "/u/config.toml", false));
    let config = resolve(&[&builtin, &user], &Overrides::default()).unwrap();
    let names = config.hooks.iter().map(|h| h.name.as_str()).collect::<Vec<_>>();
    assert_eq!(names, ["guard", "PreToolUse.2", "PostToolUse.1", "tests"]);
    let guard = &config.hooks[0];
    assert_eq!(guard.event, dsh_session::HookEvent::PreToolUse);
    assert_eq!(guard.timeout.value, std::time::Duration::from_secs(30));
    assert_eq!(guard.source.to_string(), "/u/config.toml:2");
    assert!(guard.required && guard.enabled.value);
    assert_eq!(config.hooks[1].timeout.value, HOOK_TIMEOUT);
    assert_eq!(config.hooks[1].args, ["--quiet"]);
    // A matcher is a regular expression over the whole name.
    assert!(guard.matches("run_command"));
    assert!(!guard.matches("my_run_command"));
    assert!(config.hooks[1].matches("edit_file") && !config.hooks[1].matches("read_file"));
    assert!(config.hooks[2].matches("anything"));
    let pre = config.hooks_for(dsh_session::HookEvent::PreToolUse).count();
    assert_eq!(pre, 2);
    let program = guard.program(Some(Path::new("/home/me"))).unwrap();
    assert_eq!(program, Path::new("/home/me/bin/check-cmd.sh"));
    let entries = config.entries();
    let shown = entries
        .iter()
        .filter(|entry| entry.key.starts_with("hooks."))
        .map(|entry| format!("{} = {}  # {}", entry.key, entry.value, entry.source))
        .collect::<Vec<_>>()
        .join("\n");
    expect![[r#"
        hooks.guard.event = "PreToolUse"  # /u/config.toml:2
        hooks.guard.matcher = "run_command"  # /u/config.toml:2
        hooks.guard.command = "~/bin/check-cmd.sh"  # /u/config.toml:2
        hooks.guard.timeout_secs = 30  # /u/config.toml:6
        hooks.guard.required = true  # /u/config.toml:2
        hooks.guard.enabled = true  # default
        hooks.PreToolUse.2.event = "PreToolUse"  # /u/config.toml:9
        hooks.PreToolUse.2.matcher = "write_file|edit_file"  # /u/config.toml:9
        hooks.PreToolUse.2.command = "/usr/local/bin/fmt-check"  # /u/config.toml:9
        hooks.PreToolUse.2.args = ["--quiet"]  # /u/config.toml:9
        hooks.PreToolUse.2.timeout_secs = 60  # default
        hooks.PreToolUse.2.enabled = true  # default
        hooks.PostToolUse.1.event = "PostToolUse"  # /u/config.toml:14
        hooks.PostToolUse.1.command = "/bin/true"  # /u/config.toml:14
        hooks.PostToolUse.1.timeout_secs = 60  # default
        hooks.PostToolUse.1.enabled = true  # default
        hooks.tests.event = "Stop"  # /u/config.toml:17
        hooks.tests.command = "/bin/true"  # /u/config.toml:17
        hooks.tests.timeout_secs = 60  # default
        hooks.tests.enabled = true  # default"#]]
    .assert_eq(&shown);
}

#[test]
fn a_workspace_cannot_define_a_hook_and_may_disable_one_not_required() {
    let refused = error(
        "model = \"x\"\n\n[[hooks.PostToolUse]]\ncommand = \"/bin/sh\"\n",
        "/w/.dsh/config.toml",
        true,
    );
    assert!(refused.starts_with("/w/.dsh/config.toml:3: `[[hooks.PostToolUse]]` cannot be set"));
    assert!(refused.contains("disable = [\"NAME\"]"), "{refused}");

    let (builtin, user) = (builtin(), layer(HOOKS, "/u/config.toml", false));
    let workspace =
        layer("[hooks]\ndisable = [\"PreToolUse.2\", \"not-mine\"]\n", "/w/.dsh/config.toml", true);
    let config = resolve(&[&builtin, &user, &workspace], &Overrides::default()).unwrap();
    let disabled = &config.hooks[1];
    assert!(!disabled.enabled.value);
    assert_eq!(disabled.enabled.source.to_string(), "/w/.dsh/config.toml:2");
    assert_eq!(config.hooks_for(dsh_session::HookEvent::PreToolUse).count(), 1);

    let required = layer("[hooks]\ndisable = [\"guard\"]\n", "/w/.dsh/config.toml", true);
    let refused = resolve(&[&builtin, &user, &required], &Overrides::default()).unwrap_err();
    assert_eq!(refused.location, "/w/.dsh/config.toml:2");
    assert!(refused.message.contains("marked `required`"), "{refused}");
}

#[test]
fn bad_hook_definitions_are_refused_with_file_and_line() {
    let builtin = builtin();
    let cases = [
        ("[[hooks.PreToolUse]]\nmatcher = \"x\"\n", ":1:", "has no `command`"),
        ("[[hooks.Stop]]\ncommand = \"/bin/true\"\nmatcher = \"x\"\n", ":3:", "PreToolUse and"),
        ("[[hooks.PreToolUse]]\ncommand = \"/bin/true\"\nmatcher = \"(\"\n", ":3:", "regular"),
        ("[[hooks.Stop]]\ncommand = \"/bin/true\"\ntimeout_secs = 0\n", ":3:", "out of range"),
        ("[[hooks.Stop]]\ncommand = \"/bin/true\"\nname = \"a b\"\n", ":3:", "not allowed"),
        (
            "[[hooks.Stop]]\nname = \"x\"\ncommand = \"/bin/true\"\n[[hooks.PreCompact]]\n\
             name = \"x\"\ncommand = \"/bin/true\"\n",
            ":4:",
            "already defined at /u/config.toml:1",
        ),
        ("[hooks]\ndisable = [\"nope\"]\n", ":2:", "there is no hook `nope`"),
        ("[[hooks.Nope]]\ncommand = \"/bin/true\"\n", ":1:", "unknown field `Nope`"),
    ];
    for (text, line, message) in cases {
        let refused = Layer::parse(text, Some(Path::new("/u/config.toml")), false)
            .and_then(|user| resolve(&[&builtin, &user], &Overrides::default()))
            .unwrap_err()
            .to_string();
        assert!(refused.contains(line) && refused.contains(message), "{text}\n→ {refused}");
    }
}

#[test]
fn a_hook_command_that_is_missing_or_not_executable_is_refused_at_load() {
    use std::os::unix::fs::PermissionsExt as _;
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("check.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let text = "\n[[hooks.PreToolUse]]\ncommand = \"~/bin/check.sh\"\n\
                [[hooks.Stop]]\ncommand = \"~/bin/gone.sh\"\n";
    let (builtin, user) = (builtin(), layer(text, "/u/config.toml", false));
    let config = resolve(&[&builtin, &user], &Overrides::default()).unwrap();
    let refused = config.check_hook_commands(Some(home.path())).unwrap_err().to_string();
    assert!(refused.starts_with("/u/config.toml:2: hook `PreToolUse.1`"), "{refused}");
    assert!(refused.contains("is not executable"), "{refused}");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let refused = config.check_hook_commands(Some(home.path())).unwrap_err().to_string();
    assert!(refused.starts_with("/u/config.toml:4: hook `Stop.1`"), "{refused}");
    assert!(refused.contains("gone.sh` does not exist"), "{refused}");
    // A disabled hook is not checked; a relative command is refused with what to do.
    let off = format!("{text}[hooks]\ndisable = [\"Stop.1\"]\n");
    let config =
        resolve(&[&builtin, &layer(&off, "/u/config.toml", false)], &Overrides::default()).unwrap();
    config.check_hook_commands(Some(home.path())).unwrap();
    let relative = layer("[[hooks.Stop]]\ncommand = \"check.sh --x\"\n", "/u/c.toml", false);
    let config = resolve(&[&builtin, &relative], &Overrides::default()).unwrap();
    let refused = config.check_hook_commands(Some(home.path())).unwrap_err().to_string();
    assert!(refused.contains("put its arguments in `args`"), "{refused}");
}

#[test]
fn a_workspace_only_lowers_subagent_budgets() {
    let defaults = resolve(&[&builtin()], &Overrides::default()).unwrap().subagents;
    assert_eq!(defaults.max_parallel.value, 4);
    assert_eq!(defaults.max_depth.value, 1);
    assert!(defaults.max_cost.is_none());
    let user = layer(
        "[subagents]\nmax_steps = 5\nmax_cost = 0.5\nmax_depth = 2\nmax_parallel = 2\n",
        "/u/config.toml",
        false,
    );
    // The workspace tries to raise two of them and lowers two.
    let workspace = layer(
        "[subagents]\nmax_steps = 50\nmax_cost = 0.1\nmax_depth = 3\nmax_parallel = 1\n",
        "/w/.dsh/config.toml",
        true,
    );
    let config = resolve(&[&builtin(), &user, &workspace], &Overrides::default()).unwrap();
    let subagents = config.subagents;
    assert_eq!(subagents.max_steps.value, 5);
    assert_eq!(subagents.max_steps.source.to_string(), "/u/config.toml:2");
    assert_eq!(subagents.max_cost.as_ref().map(|cost| cost.value), Some(0.1));
    assert_eq!(subagents.max_depth.value, 2);
    assert_eq!(subagents.max_parallel.value, 1);
    assert_eq!(subagents.max_parallel.source.to_string(), "/w/.dsh/config.toml:5");
    // A workspace may turn sub-agents off (depth 0); any cost it sets tightens "no budget".
    let off = layer("[subagents]\nmax_depth = 0\nmax_cost = 2.0\n", "/w/.dsh/config.toml", true);
    let config = resolve(&[&builtin(), &off], &Overrides::default()).unwrap();
    assert_eq!(config.subagents.max_depth.value, 0);
    assert_eq!(config.subagents.max_cost.map(|cost| cost.value), Some(2.0));
    for (text, expected) in [
        (
            "[subagents]\nmax_parallel = 0\n",
            "/u/config.toml:2: subagents.max_parallel: 0 is below 1",
        ),
        (
            "[subagents]\nmax_cost = -1.0\n",
            "/u/config.toml:2: subagents.max_cost: -1 is not a positive amount in USD",
        ),
    ] {
        let bad = layer(text, "/u/config.toml", false);
        let message = resolve(&[&builtin(), &bad], &Overrides::default())
            .map(|_| String::new())
            .unwrap_or_else(|error| error.to_string());
        assert!(message.contains(expected), "{text}: {message}");
    }
    let unknown = error("[subagents]\nmax_children = 3\n", "/u/config.toml", false);
    assert!(unknown.contains("unknown field `max_children`"), "{unknown}");
}

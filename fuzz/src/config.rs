//! `config`: a workspace's `.dsh/config.toml` of arbitrary text, parsed and layered over the
//! built-in defaults and a user's file by `dsh_config`.
//!
//! The input is the workspace's file; an input `USER\0WORKSPACE` brings the user's file too
//! (else [`USER`], a user's file with profiles, approvals and MCP servers). Text that is not
//! UTF-8 is what `Layer::read` refuses before parsing; it is skipped.
//!
//! Checks: parsing and resolving never panic; every error's message is bounded by the input;
//! and **a workspace's file never loosens what the layers below it set** — the configuration
//! resolved with it, compared with the one resolved without it, has the same profiles with the
//! same endpoints, keys and headers (a repository must not decide where requests and keys go),
//! no MCP server the user's file does not define and the same transport for each (a repository
//! must not start programs or pick endpoints), no approval looser than before (tools and MCP
//! servers alike), the same confirmed workspaces, no wider `[web]` (`allow`, `allow_hosts`, a
//! longer deadline or a larger cap), and the same hooks defined the same way (a workspace may
//! turn off one the user did not mark `required`, nothing more).

use std::collections::BTreeSet;
use std::path::Path;

use dsh_config::{Approval, Config, ConfigError, Layer, Overrides, builtin, resolve};

/// The user's file when the input brings none.
pub const USER: &str = r#"
profile = "deepseek"

[providers.deepseek]
api_key_env = "DEEPSEEK_API_KEY"

[providers.local]
kind = "openai-compatible"
base_url = "http://127.0.0.1:8080/v1"
model = "smollm2"
headers = { "X-Team" = "t" }

[providers.local.models.smollm2]
context_window = 8192

[approvals]
command = "deny"
write = "ask"
read_file = "auto"
mcp = "ask"

[mcp.servers.notes]
command = "notes-server"
args = ["--stdio"]
approval = "deny"
enabled = false

[mcp.servers.web]
url = "https://mcp.example.com/mcp"
approval = "auto"

[web]
allow = true
allow_hosts = ["localhost", "[::1]"]
timeout_secs = 20
[[hooks.PreToolUse]]
name = "guard"
matcher = "run_command"
command = "/usr/local/bin/guard"
required = true

[[hooks.PostToolUse]]
command = "/usr/local/bin/notes"
args = ["--post"]
"#;

const USER_PATH: &str = "/home/user/.config/dsh/config.toml";
const WORKSPACE_PATH: &str = "/work/repo/.dsh/config.toml";

/// Parses and layers the files `data` holds and checks the result.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (user, workspace) = text.split_once('\0').unwrap_or((USER, text));
    let bounded = |error: &ConfigError| {
        let shown = error.to_string().len();
        let limit = 4 * (user.len() + workspace.len()) + 4096;
        assert!(shown <= limit, "an error of {shown} bytes from {} bytes of input", text.len());
    };
    let builtin = builtin();
    let user = match Layer::parse(user, Some(Path::new(USER_PATH)), false) {
        Ok(layer) => layer,
        Err(error) => return bounded(&error),
    };
    let parsed = Layer::parse(workspace, Some(Path::new(WORKSPACE_PATH)), true);
    let base = resolve(&[&builtin, &user], &Overrides::default());
    let workspace = match parsed {
        Ok(layer) => layer,
        Err(error) => return bounded(&error),
    };
    let with = resolve(&[&builtin, &user, &workspace], &Overrides::default());
    let (base, with) = match (base, with) {
        (Ok(base), Ok(with)) => (base, with),
        (base, with) => {
            base.err().iter().chain(with.err().iter()).for_each(bounded);
            return;
        }
    };
    never_looser(&base, &with);
    // What a session asks of the result: its default pick, each profile by name.
    let _ = with.pick(None, None);
    for name in with.profiles.keys() {
        let _ = with.pick(Some(name), None);
        let _ = with.ad_hoc_profile(Some(name), "http://127.0.0.1:9/v1");
    }
}

/// The workspace's rule, over everything a repository could use against the user.
fn never_looser(base: &Config, with: &Config) {
    let names = |config: &Config| config.profiles.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(names(with), names(base), "a workspace's file changed the set of profiles");
    for (name, profile) in &with.profiles {
        let before = &base.profiles[name];
        assert_eq!(profile.base_url, before.base_url, "a workspace moved profile {name}");
        assert_eq!(profile.key, before.key, "a workspace changed where {name}'s key is");
        assert_eq!(profile.headers, before.headers, "a workspace changed {name}'s headers");
    }

    let tools: BTreeSet<&String> = base.approvals.keys().chain(with.approvals.keys()).collect();
    for tool in tools {
        // A tool nobody configured: reading runs, everything else asks.
        let unset = if tool == "read" { Approval::Auto } else { Approval::Ask };
        let policy = |config: &Config| config.approvals.get(tool).map_or(unset, |p| p.value);
        let (before, after) = (policy(base), policy(with));
        assert_eq!(
            after.stricter(before),
            after,
            "a workspace loosened approvals.{tool} from {} to {}",
            before.name(),
            after.name()
        );
    }

    for (name, server) in &with.mcp {
        let Some(before) = base.mcp.get(name) else {
            panic!("a workspace's file defined the MCP server {name}");
        };
        assert_eq!(server.transport, before.transport, "a workspace changed MCP server {name}");
        let (before, after) = (before.approval.value, server.approval.value);
        assert_eq!(
            after.stricter(before),
            after,
            "a workspace loosened MCP server {name}'s approval from {} to {}",
            before.name(),
            after.name()
        );
    }
    assert_eq!(with.allow_workspaces, base.allow_workspaces, "a workspace vouched for itself");

    // `web_fetch`: a workspace never opens the network or private hosts, nor waits or reads
    // longer.
    let (web, before) = (&with.web, &base.web);
    assert!(!web.allow.value || before.allow.value, "a workspace allowed web_fetch offline");
    let normal = |host: &String| {
        let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
        host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).map(str::to_owned).unwrap_or(host)
    };
    let listed: BTreeSet<String> = before.allow_hosts.value.iter().map(normal).collect();
    for host in &web.allow_hosts.value {
        assert!(listed.contains(&normal(host)), "a workspace listed {host} in web.allow_hosts");
    }
    assert!(
        web.timeout_secs.value <= before.timeout_secs.value,
        "a workspace lengthened web.timeout_secs"
    );
    assert!(web.max_bytes.value <= before.max_bytes.value, "a workspace raised web.max_bytes");
    // Hooks: the same ones, defined the same way (a repository never chooses what runs, or
    // when); it may turn one off, never one the user marked required, never one back on.
    let names = |config: &Config| config.hooks.iter().map(|h| h.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(with), names(base), "a workspace's file changed the set of hooks");
    for (after, before) in with.hooks.iter().zip(&base.hooks) {
        let definition = |hook: &dsh_config::Hook| {
            (
                hook.event,
                hook.matcher.clone(),
                hook.command.clone(),
                hook.args.clone(),
                hook.timeout.value,
            )
        };
        assert_eq!(
            definition(after),
            definition(before),
            "a workspace changed hook {}",
            after.name
        );
        assert!(
            !after.enabled.value || before.enabled.value,
            "a workspace turned {} on",
            after.name
        );
        assert!(!before.required || after.enabled.value, "a workspace turned off {}", after.name);
    }
}

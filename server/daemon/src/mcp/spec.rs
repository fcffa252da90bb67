//! A session's own MCP servers (`session/mcpServers`, what an ACP editor passes), checked before
//! anything runs: the keys a server may hold follow the configuration's rules
//! (`McpTransport::check`), names follow the rule of configured servers and collide with none of
//! them, at most [`OWN_SERVERS_MAX`] per session — and every refusal names the server, never an
//! `env` or header value.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_config::{Approval, McpServer, McpTransport};

/// The most servers one session may bring (each is a process or a connection).
pub(super) const OWN_SERVERS_MAX: usize = 64;

/// A server as a session gives it (`session/mcpServers`), checked: a clear error for what
/// cannot be used, naming the server — and never an `env` or header value.
pub fn own_server(spec: dsh_protocol::McpServerSpec) -> Result<OwnServer, String> {
    let name = spec.name;
    dsh_config::check_server_name(&name)?;
    let transport = match (spec.command, spec.url) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "mcp server `{name}`: give either `command` (stdio) or `url` (HTTP), not both"
            ));
        }
        (None, None) => {
            return Err(format!("mcp server `{name}` has neither `command` (stdio) nor `url`"));
        }
        (Some(command), None) => {
            if !spec.headers.is_empty() {
                return Err(format!(
                    "mcp server `{name}`: `headers` are for HTTP servers, not stdio ones"
                ));
            }
            let cwd = spec.cwd.map(PathBuf::from);
            McpTransport::Stdio { command, args: spec.args, env: spec.env, cwd }
        }
        (None, Some(url)) => {
            if !spec.args.is_empty() || !spec.env.is_empty() || spec.cwd.is_some() {
                return Err(format!(
                    "mcp server `{name}`: `args`, `env` and `cwd` are for stdio servers, not HTTP \
                     ones"
                ));
            }
            McpTransport::Http { url, headers: spec.headers }
        }
    };
    // The rules of what each key may hold are the configuration's, for both kinds of server.
    transport.check(&name).map_err(|refused| refused.message)?;
    Ok(OwnServer { name, transport })
}

/// A server a session brings (`session/mcpServers`), checked: its name follows the rule of
/// configured ones.
#[derive(Clone)]
pub struct OwnServer {
    /// Its name.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
}

/// A session's own servers as the supervisor runs them, checked: at most [`OWN_SERVERS_MAX`],
/// each name once, none a name a server configured for `workspace` has. Run before a session
/// is created with servers (nothing is created when they are refused) and when they change.
pub fn own_configs(
    configured: impl FnOnce() -> Result<Arc<dsh_config::Config>, String>,
    servers: Vec<OwnServer>,
) -> Result<BTreeMap<String, McpServer>, String> {
    if servers.len() > OWN_SERVERS_MAX {
        return Err(format!(
            "{} MCP servers given for one session; at most {OWN_SERVERS_MAX} are taken",
            servers.len()
        ));
    }
    let mut wanted = BTreeMap::new();
    if servers.is_empty() {
        // Nothing to check against the configuration (which may not be usable).
        return Ok(wanted);
    }
    let configured = configured()?;
    for server in servers {
        if let Some(theirs) = configured.mcp.get(&server.name) {
            return Err(format!(
                "MCP server `{0}` from the session collides with the server `{0}` configured \
                 for this workspace ({1}): rename the session's server",
                server.name, theirs.transport.source
            ));
        }
        let source = dsh_config::Source::Flag("session/mcpServers".to_owned());
        // The defaults of a configured server; `ask` whatever the editor wants: a client
        // never makes tools run unasked (`[approvals]` in your own file still can).
        let config = McpServer {
            transport: dsh_config::Sourced::new(server.transport, source.clone()),
            enabled: dsh_config::Sourced::new(true, source.clone()),
            startup_timeout: dsh_config::Sourced::new(
                dsh_config::MCP_STARTUP_TIMEOUT,
                source.clone(),
            ),
            call_timeout: dsh_config::Sourced::new(dsh_config::MCP_CALL_TIMEOUT, source.clone()),
            approval: dsh_config::Sourced::new(Approval::Ask, source.clone()),
        };
        if wanted.insert(server.name.clone(), config).is_some() {
            return Err(format!("MCP server `{}` is given twice", server.name));
        }
    }
    Ok(wanted)
}

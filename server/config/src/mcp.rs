//! MCP tool servers (`[mcp.servers.NAME]`): how dsh reaches one ([`McpTransport`], and its one
//! checker, used for a configured server and one an editor brings), the name rule, timeouts and
//! approval — merged from the layers, then checked as a whole.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use dsh_session::Approval;
use toml::Spanned;

use crate::file::{FileMcpServer, Layer};
use crate::resolve::{at, source_line, take};
use crate::{ConfigError, Source, Sourced};

/// How dsh reaches an MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its whole environment besides `PATH`, `HOME` and `LANG` (nothing else is inherited).
        env: BTreeMap<String, String>,
        /// Its working directory, absolute (`None`: the user's home directory, never the
        /// workspace: `npx` or `uvx` started there would run what a cloned repository ships).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Extra request headers (values are secrets: never shown).
        headers: BTreeMap<String, String>,
    },
}

/// Which part of a transport [`McpTransport::check`] refused, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportError {
    /// The key: `command`, `env`, `cwd`, `url` or `headers`.
    pub key: &'static str,
    /// What is wrong, naming the server (never a value of `env` or of a header: secrets).
    pub message: String,
}

impl McpTransport {
    /// Checks what a transport holds, whoever gives it — the user's configuration file or an
    /// editor (`session/mcpServers`): a command that is not blank; environment variable names
    /// and values a process can be given; an absolute working directory; an http(s) URL; header
    /// names and values HTTP allows. Which keys go with which transport is the giver's to check
    /// (their forms differ); this is the one place for the rest.
    pub fn check(&self, name: &str) -> Result<(), TransportError> {
        let refuse = |key, message: String| {
            Err(TransportError { key, message: format!("mcp server `{name}`: {message}") })
        };
        match self {
            McpTransport::Stdio { command, env, cwd, .. } => {
                if command.trim().is_empty() {
                    return refuse("command", "`command` is empty".to_owned());
                }
                if let Some(variable) =
                    env.keys().find(|key| key.is_empty() || key.contains(['=', '\0']))
                {
                    let message = format!(
                        "`{}` is not an environment variable name",
                        variable.escape_debug()
                    );
                    return refuse("env", message);
                }
                if env.values().any(|value| value.contains('\0')) {
                    let message = "an `env` value holds a NUL byte (values are not shown)";
                    return refuse("env", message.to_owned());
                }
                match cwd {
                    Some(cwd) if !cwd.is_absolute() => refuse(
                        "cwd",
                        format!("`cwd` must be an absolute path, not `{}`", cwd.display()),
                    ),
                    _ => Ok(()),
                }
            }
            McpTransport::Http { url, headers } => {
                let parsed = match url::Url::parse(url) {
                    Ok(parsed) => parsed,
                    Err(error) => return refuse("url", format!("`url` is not a URL: {error}")),
                };
                if !matches!(parsed.scheme(), "http" | "https") {
                    let message = format!("`url` must be http or https, not `{}`", parsed.scheme());
                    return refuse("url", message);
                }
                for (header, value) in headers {
                    if !is_header_name(header) {
                        let message =
                            format!("header `{}` is not a valid name", header.escape_debug());
                        return refuse("headers", message);
                    }
                    if !is_header_value(value) {
                        let message = format!(
                            "the value of header `{header}` is not valid (values are not shown)"
                        );
                        return refuse("headers", message);
                    }
                }
                Ok(())
            }
        }
    }
}

/// An HTTP field name: one or more token characters (RFC 9110), shorter than 64 KiB (the
/// `http` crate's limit).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 1 << 16
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte))
}

/// An HTTP field value as the `http` crate accepts it: tabs and every byte from the space up
/// but DEL — no line breaks, no NUL, no other control character.
fn is_header_value(value: &str) -> bool {
    value.bytes().all(|byte| byte == b'\t' || (byte >= b' ' && byte != 0x7f))
}

/// One `[mcp.servers.NAME]`: defined in the user's file only; a workspace's file may turn it
/// on or off for its sessions.
#[derive(Clone, Debug, PartialEq)]
pub struct McpServer {
    /// How to reach it.
    pub transport: Sourced<McpTransport>,
    /// Whether the sessions of this workspace use it.
    pub enabled: Sourced<bool>,
    /// How long starting it (spawn or connect, `initialize`, `tools/list`) may take.
    pub startup_timeout: Sourced<Duration>,
    /// How long one tool call may take.
    pub call_timeout: Sourced<Duration>,
    /// The policy of its tools (`[approvals]` can name a tool, `SERVER__TOOL`).
    pub approval: Sourced<Approval>,
}

/// An MCP server being merged.
#[derive(Default)]
pub(crate) struct PartialServer {
    command: Option<Sourced<String>>,
    args: Option<Sourced<Vec<String>>>,
    env: Option<Sourced<BTreeMap<String, String>>>,
    cwd: Option<Sourced<String>>,
    url: Option<Sourced<String>>,
    headers: Option<Sourced<BTreeMap<String, String>>>,
    enabled: Option<Sourced<bool>>,
    startup_timeout: Option<Sourced<u64>>,
    call_timeout: Option<Sourced<u64>>,
    approval: Option<Sourced<String>>,
    named_at: Option<Source>,
}

impl PartialServer {
    /// Takes what one layer's `[mcp.servers.NAME]` sets; a workspace's `approval` never looser
    /// than the layers below say (a server nobody gave one asks).
    pub(crate) fn merge(
        &mut self,
        layer: &Layer,
        name: &str,
        spanned: &Spanned<FileMcpServer>,
    ) -> Result<(), ConfigError> {
        let given = spanned.get_ref();
        self.named_at.get_or_insert_with(|| layer.source(spanned));
        if layer.workspace
            && let Some(policy) = &given.approval
            && let Ok(value) = policy.get_ref().parse::<Approval>()
        {
            // A policy below that does not parse is refused by `finish_server` anyway.
            let below = self.approval.as_ref().map_or(Ok(Approval::Ask), |b| b.value.parse());
            if let Ok(below) = below
                && value.stricter(below) != value
            {
                return Err(layer.error(
                    source_line(&layer.source(policy)),
                    format!(
                        "mcp server `{name}`: `approval = \"{}\"` cannot be set in a \
                         workspace's configuration: it is looser than your own (\"{}\"), and a \
                         repository may only tighten approvals; set it in your own \
                         configuration file",
                        value.name(),
                        below.name()
                    ),
                ));
            }
        }
        take(&mut self.command, layer, &given.command);
        take(&mut self.args, layer, &given.args);
        take(&mut self.env, layer, &given.env);
        take(&mut self.cwd, layer, &given.cwd);
        take(&mut self.url, layer, &given.url);
        take(&mut self.headers, layer, &given.headers);
        take(&mut self.enabled, layer, &given.enabled);
        take(&mut self.startup_timeout, layer, &given.startup_timeout_secs);
        take(&mut self.call_timeout, layer, &given.call_timeout_secs);
        take(&mut self.approval, layer, &given.approval);
        Ok(())
    }
}

/// How long starting an MCP server may take unless its `startup_timeout_secs` says otherwise.
pub const MCP_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one MCP tool call may take unless its server's `call_timeout_secs` says otherwise.
pub const MCP_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// The name rule of MCP servers: their tools are named `SERVER__TOOL` in requests, within the
/// providers' `^[a-zA-Z0-9_-]{1,64}$`, so a server's name is letters, digits and `-`, at most
/// 32 characters (no `_`, so the namespace separator stays unambiguous).
pub fn check_server_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "mcp server name `{name}` is not allowed: use 1 to 32 letters, digits or `-` (its \
             tools are named `{name}__TOOL` in requests, and providers accept \
             ^[a-zA-Z0-9_-]{{1,64}}$)"
        ))
    }
}

/// Checks a merged server and gives it its defaults.
pub(crate) fn finish_server(name: &str, partial: PartialServer) -> Result<McpServer, ConfigError> {
    let named_at = partial.named_at.clone().unwrap_or(Source::Default);
    check_server_name(name).map_err(|message| at(&named_at, message))?;
    // Where each key the transport check may refuse was set, for the error's file and line.
    let key_sources = [
        ("env", partial.env.as_ref().map(|env| env.source.clone())),
        ("cwd", partial.cwd.as_ref().map(|cwd| cwd.source.clone())),
        ("headers", partial.headers.as_ref().map(|headers| headers.source.clone())),
    ];
    let transport = match (partial.command, partial.url) {
        (Some(command), None) => {
            if partial.headers.is_some() {
                return Err(at(
                    &command.source,
                    format!("mcp server `{name}`: `headers` go with `url`, not `command`"),
                ));
            }
            let value = McpTransport::Stdio {
                command: command.value,
                args: partial.args.map(|a| a.value).unwrap_or_default(),
                env: partial.env.map(|e| e.value).unwrap_or_default(),
                cwd: partial.cwd.map(|c| PathBuf::from(c.value)),
            };
            Sourced::new(value, command.source)
        }
        (None, Some(url)) => {
            if let Some(extra) = [
                ("args", partial.args.map(|a| a.source)),
                ("env", partial.env.map(|e| e.source)),
                ("cwd", partial.cwd.map(|c| c.source)),
            ]
            .into_iter()
            .find_map(|(key, source)| source.map(|source| (key, source)))
            {
                return Err(at(
                    &extra.1,
                    format!("mcp server `{name}`: `{}` goes with `command`, not `url`", extra.0),
                ));
            }
            let value = McpTransport::Http {
                url: url.value,
                headers: partial.headers.map(|h| h.value).unwrap_or_default(),
            };
            Sourced::new(value, url.source)
        }
        (Some(command), Some(_)) => {
            return Err(at(
                &command.source,
                format!("mcp server `{name}`: set either `command` (stdio) or `url`, not both"),
            ));
        }
        (None, None) => {
            return Err(at(
                &named_at,
                format!(
                    "mcp server `{name}` has neither `command` nor `url` (a workspace's file \
                     can only turn on or off a server your own file defines)"
                ),
            ));
        }
    };
    if let Err(refused) = transport.value.check(name) {
        let source = key_sources.into_iter().find(|(key, _)| *key == refused.key);
        let source = source.and_then(|(_, source)| source).unwrap_or(transport.source);
        return Err(at(&source, refused.message));
    }
    let seconds = |value: Option<Sourced<u64>>, default: u64, field: &str| {
        let value = value.unwrap_or_else(|| Sourced::new(default, Source::Default));
        if value.value == 0 {
            return Err(at(&value.source, format!("mcp.servers.{name}.{field} must be above 0")));
        }
        Ok(Sourced::new(Duration::from_secs(value.value), value.source))
    };
    let approval = match partial.approval {
        None => Sourced::new(Approval::Ask, Source::Default),
        Some(policy) => {
            let value = policy.value.parse::<Approval>().map_err(|_| {
                at(
                    &policy.source,
                    format!(
                        "mcp.servers.{name}.approval: `{}` is not a policy (auto, ask, deny)",
                        policy.value
                    ),
                )
            })?;
            Sourced::new(value, policy.source)
        }
    };
    Ok(McpServer {
        transport,
        enabled: partial.enabled.unwrap_or_else(|| Sourced::new(true, Source::Default)),
        startup_timeout: seconds(
            partial.startup_timeout,
            MCP_STARTUP_TIMEOUT.as_secs(),
            "startup_timeout_secs",
        )?,
        call_timeout: seconds(
            partial.call_timeout,
            MCP_CALL_TIMEOUT.as_secs(),
            "call_timeout_secs",
        )?,
        approval,
    })
}

//! One configuration file as written: the TOML schema, every value spanned so that the resolved
//! configuration can say which file and line it came from. Unknown keys are errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::{ConfigError, Source};

/// The largest configuration file read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// A parsed configuration file (or the built-in layer).
#[derive(Clone, Debug)]
pub struct Layer {
    /// Where it was read from (`None`: built in).
    pub path: Option<PathBuf>,
    /// Whether it is a workspace's file (which may not say where requests and keys go).
    pub workspace: bool,
    /// Its content.
    pub(crate) file: FileConfig,
    /// Byte offsets of line starts, for spans → lines.
    line_starts: Vec<usize>,
}

impl Layer {
    /// Parses `text` as the file at `path` (`None`: built in).
    pub fn parse(text: &str, path: Option<&Path>, workspace: bool) -> Result<Layer, ConfigError> {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(offset, _)| offset + 1))
            .collect::<Vec<_>>();
        let mut layer = Layer {
            path: path.map(Path::to_path_buf),
            workspace,
            file: FileConfig::default(),
            line_starts,
        };
        layer.file = toml::from_str(text).map_err(|error| {
            let line = error.span().map(|span| layer.line_of(span.start));
            let message = error.message().trim().to_owned();
            layer.error(line, message)
        })?;
        layer.check()?;
        Ok(layer)
    }

    /// Reads the file at `path`; `Ok(None)` when there is none. A command can replace a
    /// workspace's file by a FIFO or a link to a device: it is opened without blocking and
    /// must be a regular file of at most [`MAX_FILE_BYTES`].
    pub fn read(path: &Path, workspace: bool) -> Result<Option<Layer>, ConfigError> {
        use dsh_sandbox::beneath::{BeneathError, read_regular};
        let refused =
            |message: String| ConfigError { location: path.display().to_string(), message };
        match read_regular(path, MAX_FILE_BYTES) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Layer::parse(&text, Some(path), workspace).map(Some),
                Err(_) => Err(refused("cannot read: not UTF-8 text".to_owned())),
            },
            Err(BeneathError::NotFound) => Ok(None),
            Err(error) => Err(refused(format!("cannot read: {error}"))),
        }
    }

    /// The 1-based line of a byte offset.
    fn line_of(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|start| *start <= offset)
    }

    /// Where a spanned value sits.
    pub(crate) fn source<T>(&self, value: &Spanned<T>) -> Source {
        match &self.path {
            None => Source::Default,
            Some(path) => {
                Source::File { path: path.clone(), line: self.line_of(value.span().start) }
            }
        }
    }

    /// An error at a line of this file.
    pub(crate) fn error(&self, line: Option<usize>, message: String) -> ConfigError {
        let file = self.path.as_ref().map_or("(built-in)".to_owned(), |p| p.display().to_string());
        let location = match line {
            Some(line) => format!("{file}:{line}"),
            None => file,
        };
        ConfigError { location, message }
    }

    /// What the schema cannot say: a key written inline, a workspace saying where keys go.
    fn check(&self) -> Result<(), ConfigError> {
        for (name, profile) in &self.file.providers {
            let profile = profile.get_ref();
            if let Some(key) = &profile.api_key {
                return Err(self.error(
                    Some(self.line_of(key.span().start)),
                    format!(
                        "provider `{name}`: an API key written in a configuration file is \
                         refused; name where it is instead: `api_key_env = \"VARIABLE\"` or \
                         `api_key_file = \"/path/to/key\"` (a file of mode 0600)"
                    ),
                ));
            }
            if self.workspace {
                let routed = [
                    ("base_url", profile.base_url.as_ref().map(Spanned::span)),
                    ("api_key_env", profile.api_key_env.as_ref().map(Spanned::span)),
                    ("api_key_file", profile.api_key_file.as_ref().map(Spanned::span)),
                    ("headers", profile.headers.as_ref().map(Spanned::span)),
                ];
                if let Some((key, Some(span))) = routed.into_iter().find(|(_, span)| span.is_some())
                {
                    return Err(self.error(
                        Some(self.line_of(span.start)),
                        format!(
                            "provider `{name}`: `{key}` cannot be set in a workspace's \
                             configuration (a repository must not decide where your requests \
                             and keys go); set it in your own configuration file"
                        ),
                    ));
                }
            }
        }
        crate::hooks::check_layer(self, &self.file.hooks)?;
        if self.workspace
            && let Some(allowed) = &self.file.allow_workspaces
        {
            return Err(self.error(
                Some(self.line_of(allowed.span().start)),
                "`allow_workspaces` cannot be set in a workspace's configuration (a repository \
                 must not vouch for itself); set it in your own configuration file"
                    .to_owned(),
            ));
        }
        if self.workspace {
            for (name, server) in &self.file.mcp.servers {
                let server = server.get_ref();
                let defining = [
                    ("command", server.command.as_ref().map(Spanned::span)),
                    ("args", server.args.as_ref().map(Spanned::span)),
                    ("env", server.env.as_ref().map(Spanned::span)),
                    ("cwd", server.cwd.as_ref().map(Spanned::span)),
                    ("url", server.url.as_ref().map(Spanned::span)),
                    ("headers", server.headers.as_ref().map(Spanned::span)),
                ];
                if let Some((key, Some(span))) =
                    defining.into_iter().find(|(_, span)| span.is_some())
                {
                    return Err(self.error(
                        Some(self.line_of(span.start)),
                        format!(
                            "mcp server `{name}`: `{key}` cannot be set in a workspace's \
                             configuration (a repository must not start programs or choose \
                             endpoints on your behalf); define the server in your own \
                             configuration file — the workspace may then turn it on or off \
                             with `enabled`"
                        ),
                    ));
                }
                if let Some(approval) = &server.approval {
                    self.tighten_only(&format!("mcp server `{name}`: `approval`"), approval)?;
                }
            }
            // MCP tools run outside the command sandbox: a repository may make them ask or
            // deny, never run without asking.
            for (tool, policy) in &self.file.approvals {
                if tool == "mcp" || tool.contains("__") {
                    self.tighten_only(&format!("approvals.{tool}"), policy)?;
                }
            }
        }
        Ok(())
    }

    /// A workspace's file may set an MCP approval to `ask` or `deny` only.
    fn tighten_only(&self, what: &str, policy: &Spanned<String>) -> Result<(), ConfigError> {
        if policy.get_ref() == "auto" {
            return Err(self.error(
                Some(self.line_of(policy.span().start)),
                format!(
                    "{what} = \"auto\" cannot be set in a workspace's configuration (MCP tools \
                     run outside the command sandbox; a repository may only make them ask or \
                     deny); set it in your own configuration file"
                ),
            ));
        }
        Ok(())
    }
}

/// The file's top level.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    /// The default profile of new sessions.
    pub profile: Option<Spanned<String>>,
    /// The default model of new sessions on the default profile.
    pub model: Option<Spanned<String>>,
    /// Provider profiles by name.
    #[serde(default)]
    pub providers: BTreeMap<String, Spanned<FileProfile>>,
    /// Approval policy by tool name or class (`read`, `write`, `command`).
    #[serde(default)]
    pub approvals: BTreeMap<String, Spanned<String>>,
    /// Context settings.
    #[serde(default)]
    pub context: FileContext,
    /// Instruction-file policy.
    #[serde(default)]
    pub instructions: FileInstructions,
    /// MCP tool servers.
    #[serde(default)]
    pub mcp: FileMcp,
    /// Workspace checkpoints (rewind).
    #[serde(default)]
    pub checkpoints: FileCheckpoints,
    /// The `web_fetch` tool.
    #[serde(default)]
    pub web: FileWeb,
    /// Hooks (`[[hooks.EVENT]]`, the user's file only) and the names turned off.
    #[serde(default)]
    pub hooks: crate::hooks::FileHooks,
    /// Sub-agents' budgets.
    #[serde(default)]
    pub subagents: crate::subagents::FileSubagents,
    /// Workspaces confirmed although they are `/`, `$HOME` or hold dsh's own state or
    /// configuration (the user's file only).
    #[serde(default)]
    pub allow_workspaces: Option<Spanned<Vec<String>>>,
}

/// `[mcp]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileMcp {
    #[serde(default)]
    pub servers: BTreeMap<String, Spanned<FileMcpServer>>,
}

/// `[mcp.servers.NAME]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileMcpServer {
    pub command: Option<Spanned<String>>,
    pub args: Option<Spanned<Vec<String>>>,
    pub env: Option<Spanned<BTreeMap<String, String>>>,
    pub cwd: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    pub headers: Option<Spanned<BTreeMap<String, String>>>,
    pub enabled: Option<Spanned<bool>>,
    pub startup_timeout_secs: Option<Spanned<u64>>,
    pub call_timeout_secs: Option<Spanned<u64>>,
    pub approval: Option<Spanned<String>>,
}

/// `[providers.NAME]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileProfile {
    pub kind: Option<Spanned<String>>,
    pub base_url: Option<Spanned<String>>,
    pub api_key_env: Option<Spanned<String>>,
    pub api_key_file: Option<Spanned<String>>,
    /// Only to refuse it with a clear message.
    pub api_key: Option<Spanned<toml::Value>>,
    pub headers: Option<Spanned<BTreeMap<String, String>>>,
    pub model: Option<Spanned<String>>,
    pub connect_timeout_secs: Option<Spanned<u64>>,
    pub data_timeout_secs: Option<Spanned<u64>>,
    pub overall_timeout_secs: Option<Spanned<u64>>,
    pub thinking_object: Option<Spanned<bool>>,
    pub reasoning_passback: Option<Spanned<bool>>,
    pub max_tokens_field: Option<Spanned<String>>,
    pub cache_control: Option<Spanned<bool>>,
    pub thinking_budget: Option<Spanned<u32>>,
    pub adaptive_thinking: Option<Spanned<bool>>,
    #[serde(default)]
    pub models: BTreeMap<String, Spanned<FileModel>>,
}

/// `[providers.NAME.models.ID]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileModel {
    pub context_window: Option<Spanned<u64>>,
    pub max_output: Option<Spanned<u32>>,
    pub thinking: Option<Spanned<bool>>,
    pub images: Option<Spanned<bool>>,
    pub max_images: Option<Spanned<u32>>,
    pub price: Option<Spanned<FilePrice>>,
}

/// A model's `price` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilePrice {
    pub cache_hit: f64,
    pub cache_miss: f64,
    pub output: f64,
    pub cache_write: Option<f64>,
    pub currency: String,
}

/// `[context]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileContext {
    pub window: Option<Spanned<u64>>,
    pub trim_at: Option<Spanned<f64>>,
    pub compact_at: Option<Spanned<f64>>,
    pub auto: Option<Spanned<bool>>,
}

/// `[instructions]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileInstructions {
    pub files: Option<Spanned<Vec<String>>>,
    pub on_edit: Option<Spanned<String>>,
}

/// `[checkpoints]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileCheckpoints {
    pub enabled: Option<Spanned<bool>>,
    /// Bytes, or a string with a unit (`"8 MiB"`).
    pub max_file_size: Option<Spanned<toml::Value>>,
    /// Bytes, or a string with a unit (`"1 GiB"`).
    pub budget: Option<Spanned<toml::Value>>,
}

/// `[web]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileWeb {
    /// `web_fetch` even while the session's network is off.
    pub allow: Option<Spanned<bool>>,
    /// Hosts that may be on loopback, link-local or private addresses.
    pub allow_hosts: Option<Spanned<Vec<String>>>,
    /// The overall deadline of one call, in seconds.
    pub timeout_secs: Option<Spanned<u64>>,
    /// The most body bytes read: bytes, or a string with a unit (`"2 MiB"`).
    pub max_bytes: Option<Spanned<toml::Value>>,
}

//! Layers merged into one [`Config`], value by value, each value keeping its source; then the
//! checks that need the merged whole (a profile with no kind, a default that names nothing).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_session::{Price, ProviderKind, WireFormat};
use toml::Spanned;

use crate::file::Layer;
use crate::{ConfigError, Source, Sourced};

/// What the environment and flags say; they beat every file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// The default profile (`--provider`, `DSH_PROVIDER`).
    pub profile: Option<Sourced<String>>,
    /// The default model (`--model`, `DSH_MODEL`).
    pub model: Option<Sourced<String>>,
    /// The default profile's base URL (`--base-url`, `DEEPSEEK_BASE_URL`).
    pub base_url: Option<Sourced<String>>,
}

/// Where a profile's key is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// An environment variable (of the process that starts the daemon).
    Env(String),
    /// A file that must not be readable by group or others.
    File(PathBuf),
}

/// An approval policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approval {
    /// Run without asking.
    Auto,
    /// Ask a person.
    Ask,
    /// Refuse.
    Deny,
}

impl Approval {
    /// Its name in files.
    pub fn name(self) -> &'static str {
        match self {
            Approval::Auto => "auto",
            Approval::Ask => "ask",
            Approval::Deny => "deny",
        }
    }

    /// The policy of a tool or class nobody configured (the agent's defaults: reading runs,
    /// everything else asks).
    pub fn default_for(tool: &str) -> Approval {
        if tool == "read" { Approval::Auto } else { Approval::Ask }
    }

    /// How much it holds back: `auto` < `ask` < `deny`.
    pub fn strictness(self) -> u8 {
        match self {
            Approval::Auto => 0,
            Approval::Ask => 1,
            Approval::Deny => 2,
        }
    }
}

/// One model of a profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Model {
    /// Context window in tokens.
    pub context_window: Option<Sourced<u64>>,
    /// Output limit in tokens (the `max_tokens` of its requests).
    pub max_output: Option<Sourced<u32>>,
    /// Whether thinking is on by default.
    pub thinking: Option<Sourced<bool>>,
    /// Its prices.
    pub price: Option<Sourced<Price>>,
}

/// A provider profile.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Its name.
    pub name: String,
    /// The endpoint kind.
    pub kind: Sourced<ProviderKind>,
    /// Where requests go (`/chat/completions` is appended).
    pub base_url: Sourced<String>,
    /// Where its key is; `None`: requests carry no key (a local server).
    pub key: Option<Sourced<KeySource>>,
    /// Extra request headers. Values are secrets: [`Config::entries`] never shows them.
    pub headers: BTreeMap<String, Sourced<String>>,
    /// The model of new sessions on this profile.
    pub model: Option<Sourced<String>>,
    /// Connect timeout.
    pub connect_timeout: Sourced<Duration>,
    /// The longest wait for the next streamed data.
    pub data_timeout: Sourced<Duration>,
    /// The longest one request may take.
    pub overall_timeout: Sourced<Duration>,
    /// OpenAI-compatible: send DeepSeek's `thinking` object.
    pub thinking_object: Sourced<bool>,
    /// OpenAI-compatible: send stored reasoning back as `reasoning_content`.
    pub reasoning_passback: Sourced<bool>,
    /// OpenAI-compatible: `max_completion_tokens` instead of `max_tokens`.
    pub max_completion_tokens: Sourced<bool>,
    /// Anthropic: place `cache_control` breakpoints (on by default).
    pub cache_control: Sourced<bool>,
    /// Anthropic: the thinking budget, when set (else derived from `max_tokens`).
    pub thinking_budget: Option<Sourced<u32>>,
    /// Anthropic: adaptive thinking (`{"type":"adaptive"}`) instead of a budget.
    pub adaptive_thinking: Sourced<bool>,
    /// Its models by id.
    pub models: BTreeMap<String, Model>,
}

impl Profile {
    /// The wire format of its requests, as logged in a session's call config (`None` for
    /// DeepSeek, whose format has no options).
    pub fn wire(&self) -> Option<WireFormat> {
        match self.kind.value {
            ProviderKind::Deepseek => None,
            kind => Some(WireFormat {
                kind,
                thinking_object: self.thinking_object.value,
                reasoning_passback: self.reasoning_passback.value,
                max_completion_tokens: self.max_completion_tokens.value,
                no_cache_control: kind == ProviderKind::Anthropic && !self.cache_control.value,
                thinking_budget: self.thinking_budget.as_ref().map(|budget| budget.value),
                adaptive_thinking: kind == ProviderKind::Anthropic && self.adaptive_thinking.value,
            }),
        }
    }

    /// A model's settings; an empty default when the profile lists no models.
    pub fn model_settings(&self, id: &str) -> Option<&Model> {
        self.models.get(id)
    }

    /// The price of `model`, when configured.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.models.get(model)?.price.as_ref().map(|price| &price.value)
    }
}

/// Context settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextSettings {
    /// A window for every model (else each model's own).
    pub window: Option<Sourced<u64>>,
    /// Trim old tool results at this share of the window.
    pub trim_at: Sourced<f64>,
    /// Compact at this share of the window.
    pub compact_at: Sourced<f64>,
    /// Whether trimming and compaction run by themselves.
    pub auto: Sourced<bool>,
}

/// What to do with instruction files (`AGENTS.md`…).
#[derive(Clone, Debug, PartialEq)]
pub struct InstructionSettings {
    /// The files read into the system prompt, relative to the workspace.
    pub files: Sourced<Vec<String>>,
    /// On an edit: `rewrite` the system prompt (the one policy this build has).
    pub on_edit: Sourced<String>,
}

/// The resolved configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The default profile of new sessions.
    pub profile: Sourced<String>,
    /// The default model of new sessions on the default profile (else the profile's).
    pub model: Option<Sourced<String>>,
    /// Profiles by name.
    pub profiles: BTreeMap<String, Profile>,
    /// Approval policy by tool name or class (`read`, `write`, `command`).
    pub approvals: BTreeMap<String, Sourced<Approval>>,
    /// Context settings.
    pub context: ContextSettings,
    /// Instruction-file policy.
    pub instructions: InstructionSettings,
    /// MCP tool servers by name.
    pub mcp: BTreeMap<String, McpServer>,
    /// Workspaces the user confirmed although they are `/`, `$HOME` or hold dsh's state or
    /// configuration (absolute paths, as written).
    pub allow_workspaces: Vec<PathBuf>,
}

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

/// One line of `dsh config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The dotted key (`providers.local.base_url`).
    pub key: String,
    /// The value as TOML would write it (secrets hidden).
    pub value: String,
    /// Where it came from.
    pub source: String,
}

impl Config {
    /// The profile and model a new session uses: the ones asked for, else the defaults. An
    /// unknown profile, or a model the profile does not list (when it lists any), is an error
    /// that names what exists.
    pub fn pick(
        &self,
        profile: Option<&str>,
        model: Option<&str>,
    ) -> Result<(&Profile, String), ConfigError> {
        let name = profile.unwrap_or(&self.profile.value);
        let Some(chosen) = self.profiles.get(name) else {
            let known = self.profiles.keys().cloned().collect::<Vec<_>>().join(", ");
            return Err(ConfigError {
                location: "provider".to_owned(),
                message: format!("no provider profile `{name}` (configured: {known})"),
            });
        };
        let default_model = if profile.is_none() || profile == Some(self.profile.value.as_str()) {
            self.model.as_ref().or(chosen.model.as_ref())
        } else {
            chosen.model.as_ref()
        };
        let Some(model) =
            model.map(str::to_owned).or_else(|| default_model.map(|m| m.value.clone()))
        else {
            return Err(ConfigError {
                location: format!("providers.{name}"),
                message: format!("profile `{name}` names no default model: pass a model"),
            });
        };
        if !chosen.models.is_empty() && !chosen.models.contains_key(&model) {
            let known = chosen.models.keys().cloned().collect::<Vec<_>>().join(", ");
            return Err(ConfigError {
                location: format!("providers.{name}.models"),
                message: format!(
                    "profile `{name}` has no model `{model}` (its models: {known}); add \
                     `[providers.{name}.models.{model}]` to your configuration to use it"
                ),
            });
        }
        Ok((chosen, model))
    }

    /// Every value with its source, for `dsh config`; header values and keys never appear.
    pub fn entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        let mut put = |key: String, value: String, source: &Source| {
            out.push(Entry { key, value, source: source.to_string() });
        };
        put("profile".to_owned(), quoted(&self.profile.value), &self.profile.source);
        if let Some(model) = &self.model {
            put("model".to_owned(), quoted(&model.value), &model.source);
        }
        for (name, profile) in &self.profiles {
            let at = |field: &str| format!("providers.{name}.{field}");
            put(at("kind"), quoted(profile.kind.value.name()), &profile.kind.source);
            put(at("base_url"), quoted(&profile.base_url.value), &profile.base_url.source);
            match &profile.key {
                Some(Sourced { value: KeySource::Env(variable), source }) => {
                    put(at("api_key_env"), quoted(variable), source);
                }
                Some(Sourced { value: KeySource::File(path), source }) => {
                    put(at("api_key_file"), quoted(&path.display().to_string()), source);
                }
                None => {}
            }
            for (header, value) in &profile.headers {
                put(at(&format!("headers.{header}")), "\"(hidden)\"".to_owned(), &value.source);
            }
            if let Some(model) = &profile.model {
                put(at("model"), quoted(&model.value), &model.source);
            }
            for (field, value) in [
                ("connect_timeout_secs", &profile.connect_timeout),
                ("data_timeout_secs", &profile.data_timeout),
                ("overall_timeout_secs", &profile.overall_timeout),
            ] {
                put(at(field), value.value.as_secs().to_string(), &value.source);
            }
            if profile.kind.value == ProviderKind::OpenaiCompatible {
                for (field, value) in [
                    ("thinking_object", &profile.thinking_object),
                    ("reasoning_passback", &profile.reasoning_passback),
                ] {
                    put(at(field), value.value.to_string(), &value.source);
                }
                let field = if profile.max_completion_tokens.value {
                    "max_completion_tokens"
                } else {
                    "max_tokens"
                };
                put(at("max_tokens_field"), quoted(field), &profile.max_completion_tokens.source);
            }
            if profile.kind.value == ProviderKind::Anthropic {
                let cache_control = &profile.cache_control;
                put(at("cache_control"), cache_control.value.to_string(), &cache_control.source);
                if let Some(budget) = &profile.thinking_budget {
                    put(at("thinking_budget"), budget.value.to_string(), &budget.source);
                }
                let adaptive = &profile.adaptive_thinking;
                put(at("adaptive_thinking"), adaptive.value.to_string(), &adaptive.source);
            }
            for (id, model) in &profile.models {
                let at = |field: &str| format!("providers.{name}.models.{id}.{field}");
                if let Some(value) = &model.context_window {
                    put(at("context_window"), value.value.to_string(), &value.source);
                }
                if let Some(value) = &model.max_output {
                    put(at("max_output"), value.value.to_string(), &value.source);
                }
                if let Some(value) = &model.thinking {
                    put(at("thinking"), value.value.to_string(), &value.source);
                }
                if let Some(Sourced { value: price, source }) = &model.price {
                    let write = match price.cache_write {
                        Some(write) => format!(", cache_write = {write}"),
                        None => String::new(),
                    };
                    let text = format!(
                        "{{ cache_hit = {}, cache_miss = {}, output = {}{write}, currency = {} }}",
                        price.cache_hit,
                        price.cache_miss,
                        price.output,
                        quoted(&price.currency)
                    );
                    put(at("price"), text, source);
                }
            }
        }
        for (tool, approval) in &self.approvals {
            put(format!("approvals.{tool}"), quoted(approval.value.name()), &approval.source);
        }
        let context = &self.context;
        if let Some(window) = &context.window {
            put("context.window".to_owned(), window.value.to_string(), &window.source);
        }
        put(
            "context.trim_at".to_owned(),
            context.trim_at.value.to_string(),
            &context.trim_at.source,
        );
        put(
            "context.compact_at".to_owned(),
            context.compact_at.value.to_string(),
            &context.compact_at.source,
        );
        put("context.auto".to_owned(), context.auto.value.to_string(), &context.auto.source);
        let instructions = &self.instructions;
        let files = instructions.files.value.iter().map(|f| quoted(f)).collect::<Vec<_>>();
        put(
            "instructions.files".to_owned(),
            format!("[{}]", files.join(", ")),
            &instructions.files.source,
        );
        put(
            "instructions.on_edit".to_owned(),
            quoted(&instructions.on_edit.value),
            &instructions.on_edit.source,
        );
        for (name, server) in &self.mcp {
            let at = |field: &str| format!("mcp.servers.{name}.{field}");
            let source = &server.transport.source;
            match &server.transport.value {
                McpTransport::Stdio { command, args, env, cwd } => {
                    put(at("command"), quoted(command), source);
                    let args = args.iter().map(|a| quoted(a)).collect::<Vec<_>>();
                    put(at("args"), format!("[{}]", args.join(", ")), source);
                    // Values are often tokens: shown hidden, like headers.
                    for variable in env.keys() {
                        put(at(&format!("env.{variable}")), "\"(hidden)\"".to_owned(), source);
                    }
                    if let Some(cwd) = cwd {
                        put(at("cwd"), quoted(&cwd.display().to_string()), source);
                    }
                }
                McpTransport::Http { url, headers } => {
                    put(at("url"), quoted(url), source);
                    for header in headers.keys() {
                        put(at(&format!("headers.{header}")), "\"(hidden)\"".to_owned(), source);
                    }
                }
            }
            put(at("enabled"), server.enabled.value.to_string(), &server.enabled.source);
            for (field, value) in [
                ("startup_timeout_secs", &server.startup_timeout),
                ("call_timeout_secs", &server.call_timeout),
            ] {
                put(at(field), value.value.as_secs().to_string(), &value.source);
            }
            put(at("approval"), quoted(server.approval.value.name()), &server.approval.source);
        }
        out
    }
}

/// An MCP server being merged.
#[derive(Default)]
struct PartialServer {
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

fn finish_server(name: &str, partial: PartialServer) -> Result<McpServer, ConfigError> {
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
            let value = parse_approval(&policy.value).ok_or_else(|| {
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

fn parse_approval(text: &str) -> Option<Approval> {
    match text {
        "auto" => Some(Approval::Auto),
        "ask" => Some(Approval::Ask),
        "deny" => Some(Approval::Deny),
        _ => None,
    }
}

fn quoted(text: &str) -> String {
    format!("{text:?}")
}

/// The profile being merged: every field optional until the checks.
#[derive(Default)]
struct Partial {
    kind: Option<Sourced<String>>,
    base_url: Option<Sourced<String>>,
    key: Option<Sourced<KeySource>>,
    headers: BTreeMap<String, Sourced<String>>,
    model: Option<Sourced<String>>,
    connect_timeout: Option<Sourced<u64>>,
    data_timeout: Option<Sourced<u64>>,
    overall_timeout: Option<Sourced<u64>>,
    thinking_object: Option<Sourced<bool>>,
    reasoning_passback: Option<Sourced<bool>>,
    max_tokens_field: Option<Sourced<String>>,
    cache_control: Option<Sourced<bool>>,
    thinking_budget: Option<Sourced<u32>>,
    adaptive_thinking: Option<Sourced<bool>>,
    models: BTreeMap<String, Model>,
    /// Where the profile was first named, for errors about it as a whole.
    named_at: Option<Source>,
}

/// Sets `slot` from a spanned file value.
fn take<T: Clone>(slot: &mut Option<Sourced<T>>, layer: &Layer, value: &Option<Spanned<T>>) {
    if let Some(value) = value {
        *slot = Some(Sourced::new(value.get_ref().clone(), layer.source(value)));
    }
}

/// Merges `layers` (lowest first) and `overrides` into a configuration, or says what is wrong
/// and where.
pub fn resolve(layers: &[&Layer], overrides: &Overrides) -> Result<Config, ConfigError> {
    let mut profile = None;
    let mut model = None;
    let mut partials: BTreeMap<String, Partial> = BTreeMap::new();
    let mut approvals = BTreeMap::new();
    let mut allow_workspaces = Vec::new();
    let (mut window, mut trim_at, mut compact_at, mut auto) = (None, None, None, None);
    let (mut files, mut on_edit) = (None, None);
    let mut servers: BTreeMap<String, PartialServer> = BTreeMap::new();
    for layer in layers {
        let file = &layer.file;
        take(&mut profile, layer, &file.profile);
        take(&mut model, layer, &file.model);
        for (name, spanned) in &file.providers {
            let entry = partials.entry(name.clone()).or_default();
            let given = spanned.get_ref();
            entry.named_at.get_or_insert_with(|| layer.source(spanned));
            take(&mut entry.kind, layer, &given.kind);
            take(&mut entry.base_url, layer, &given.base_url);
            if let Some(variable) = &given.api_key_env {
                let key = KeySource::Env(variable.get_ref().clone());
                entry.key = Some(Sourced::new(key, layer.source(variable)));
            }
            if let Some(path) = &given.api_key_file {
                let key = KeySource::File(PathBuf::from(path.get_ref()));
                entry.key = Some(Sourced::new(key, layer.source(path)));
            }
            if let Some(headers) = &given.headers {
                for (name, value) in headers.get_ref() {
                    let value = Sourced::new(value.clone(), layer.source(headers));
                    entry.headers.insert(name.clone(), value);
                }
            }
            take(&mut entry.model, layer, &given.model);
            take(&mut entry.connect_timeout, layer, &given.connect_timeout_secs);
            take(&mut entry.data_timeout, layer, &given.data_timeout_secs);
            take(&mut entry.overall_timeout, layer, &given.overall_timeout_secs);
            take(&mut entry.thinking_object, layer, &given.thinking_object);
            take(&mut entry.reasoning_passback, layer, &given.reasoning_passback);
            take(&mut entry.max_tokens_field, layer, &given.max_tokens_field);
            take(&mut entry.cache_control, layer, &given.cache_control);
            take(&mut entry.thinking_budget, layer, &given.thinking_budget);
            take(&mut entry.adaptive_thinking, layer, &given.adaptive_thinking);
            for (id, spanned_model) in &given.models {
                let target = entry.models.entry(id.clone()).or_default();
                let given = spanned_model.get_ref();
                take(&mut target.context_window, layer, &given.context_window);
                take(&mut target.max_output, layer, &given.max_output);
                take(&mut target.thinking, layer, &given.thinking);
                if let Some(price) = &given.price {
                    let checked = check_price(layer, price)?;
                    target.price = Some(Sourced::new(checked, layer.source(price)));
                }
            }
        }
        for (tool, policy) in &file.approvals {
            let value = match policy.get_ref().as_str() {
                "auto" => Approval::Auto,
                "ask" => Approval::Ask,
                "deny" => Approval::Deny,
                other => {
                    return Err(layer.error(
                        source_line(&layer.source(policy)),
                        format!("approvals.{tool}: `{other}` is not a policy (auto, ask, deny)"),
                    ));
                }
            };
            // A repository's file only tightens: it may not make a tool ask less than the
            // layers below it do (a tool nobody set asks, as far as a workspace is concerned).
            let below = approvals
                .get(tool)
                .map_or_else(|| Approval::default_for(tool), |set: &Sourced<Approval>| set.value);
            if layer.workspace && value.strictness() < below.strictness() {
                return Err(layer.error(
                    source_line(&layer.source(policy)),
                    format!(
                        "approvals.{tool} = \"{}\" cannot be set in a workspace's configuration: \
                         it is looser than your own (\"{}\"), and a repository may only tighten \
                         approvals; set it in your own configuration file",
                        value.name(),
                        below.name()
                    ),
                ));
            }
            approvals.insert(tool.clone(), Sourced::new(value, layer.source(policy)));
        }
        if let Some(allowed) = &file.allow_workspaces {
            for path in allowed.get_ref() {
                let path = PathBuf::from(path);
                if !path.is_absolute() {
                    return Err(layer.error(
                        source_line(&layer.source(allowed)),
                        format!("allow_workspaces: `{}` is not an absolute path", path.display()),
                    ));
                }
                allow_workspaces.push(path);
            }
        }
        take(&mut window, layer, &file.context.window);
        take(&mut trim_at, layer, &file.context.trim_at);
        take(&mut compact_at, layer, &file.context.compact_at);
        take(&mut auto, layer, &file.context.auto);
        take(&mut files, layer, &file.instructions.files);
        take(&mut on_edit, layer, &file.instructions.on_edit);
        for (name, spanned) in &file.mcp.servers {
            let entry = servers.entry(name.clone()).or_default();
            let given = spanned.get_ref();
            entry.named_at.get_or_insert_with(|| layer.source(spanned));
            take(&mut entry.command, layer, &given.command);
            take(&mut entry.args, layer, &given.args);
            take(&mut entry.env, layer, &given.env);
            take(&mut entry.cwd, layer, &given.cwd);
            take(&mut entry.url, layer, &given.url);
            take(&mut entry.headers, layer, &given.headers);
            take(&mut entry.enabled, layer, &given.enabled);
            take(&mut entry.startup_timeout, layer, &given.startup_timeout_secs);
            take(&mut entry.call_timeout, layer, &given.call_timeout_secs);
            take(&mut entry.approval, layer, &given.approval);
        }
    }
    if let Some(value) = &overrides.profile {
        profile = Some(value.clone());
    }
    if let Some(value) = &overrides.model {
        model = Some(value.clone());
    }
    let profile = profile.unwrap_or_else(|| Sourced::new("deepseek".to_owned(), Source::Default));
    if let Some(base_url) = &overrides.base_url
        && let Some(partial) = partials.get_mut(&profile.value)
    {
        partial.base_url = Some(base_url.clone());
    }

    let mut profiles = BTreeMap::new();
    for (name, partial) in partials {
        profiles.insert(name.clone(), finish_profile(name, partial)?);
    }
    let context = ContextSettings {
        window,
        trim_at: trim_at.unwrap_or_else(|| Sourced::new(0.6, Source::Default)),
        compact_at: compact_at.unwrap_or_else(|| Sourced::new(0.8, Source::Default)),
        auto: auto.unwrap_or_else(|| Sourced::new(true, Source::Default)),
    };
    for share in [&context.trim_at, &context.compact_at] {
        if !(share.value > 0.0 && share.value <= 1.0) {
            return Err(at(&share.source, format!("{} is not a share in (0, 1]", share.value)));
        }
    }
    if context.trim_at.value > context.compact_at.value {
        return Err(at(
            &context.trim_at.source,
            format!(
                "context.trim_at ({}) is above context.compact_at ({}): trimming must come first",
                context.trim_at.value, context.compact_at.value
            ),
        ));
    }
    let instructions = InstructionSettings {
        files: files.unwrap_or_else(|| Sourced::new(Vec::new(), Source::Default)),
        on_edit: on_edit.unwrap_or_else(|| Sourced::new("append".to_owned(), Source::Default)),
    };
    if !matches!(instructions.on_edit.value.as_str(), "append" | "rewrite") {
        return Err(at(
            &instructions.on_edit.source,
            format!(
                "instructions.on_edit: `{}` is not a policy (`append`: an edit of an instruction \
                 file joins the next request as a note; `rewrite`: it rewrites the system prompt)",
                instructions.on_edit.value
            ),
        ));
    }
    if let Some(bad) = instructions.files.value.iter().find(|f| {
        f.is_empty()
            || Path::new(f).is_absolute()
            || Path::new(f).components().any(|c| matches!(c, std::path::Component::ParentDir))
    }) {
        return Err(at(
            &instructions.files.source,
            format!("instructions.files: `{bad}` is not a path inside the workspace"),
        ));
    }
    let mut mcp = BTreeMap::new();
    for (name, partial) in servers {
        mcp.insert(name.clone(), finish_server(&name, partial)?);
    }
    let config = Config {
        profile,
        model,
        profiles,
        approvals,
        context,
        instructions,
        mcp,
        allow_workspaces,
    };
    let default_model = config.model.as_ref().map(|m| m.value.as_str());
    config.pick(None, default_model).map_err(|error| ConfigError {
        location: match &config.model {
            Some(model) if config.profiles.contains_key(&config.profile.value) => {
                model.source.to_string()
            }
            _ => config.profile.source.to_string(),
        },
        message: error.message,
    })?;
    Ok(config)
}

fn finish_profile(name: String, partial: Partial) -> Result<Profile, ConfigError> {
    let whole = partial.named_at.clone().unwrap_or(Source::Default);
    let Some(kind) = partial.kind else {
        return Err(at(
            &whole,
            format!("provider `{name}` has no `kind` (deepseek, openai-compatible or anthropic)"),
        ));
    };
    let kind_value = match kind.value.as_str() {
        "deepseek" => ProviderKind::Deepseek,
        "openai-compatible" => ProviderKind::OpenaiCompatible,
        "anthropic" => ProviderKind::Anthropic,
        other => {
            return Err(at(
                &kind.source,
                format!(
                    "provider `{name}`: unknown kind `{other}` (deepseek, openai-compatible or \
                     anthropic)"
                ),
            ));
        }
    };
    let Some(base_url) = partial.base_url else {
        return Err(at(&whole, format!("provider `{name}` has no `base_url`")));
    };
    check_base_url(&name, &base_url)?;
    let seconds = |value: Option<Sourced<u64>>, default: u64, field: &str| {
        let value = value.unwrap_or_else(|| Sourced::new(default, Source::Default));
        if value.value == 0 {
            return Err(at(&value.source, format!("provider `{name}`: {field} must be above 0")));
        }
        Ok(Sourced::new(Duration::from_secs(value.value), value.source))
    };
    let connect_timeout = seconds(partial.connect_timeout, 10, "connect_timeout_secs")?;
    let data_timeout = seconds(partial.data_timeout, 300, "data_timeout_secs")?;
    let overall_timeout = seconds(partial.overall_timeout, 1800, "overall_timeout_secs")?;
    let flag = |value: Option<Sourced<bool>>| {
        value.unwrap_or_else(|| Sourced::new(false, Source::Default))
    };
    let max_completion_tokens = match partial.max_tokens_field {
        None => Sourced::new(false, Source::Default),
        Some(field) => match field.value.as_str() {
            "max_tokens" => Sourced::new(false, field.source),
            "max_completion_tokens" => Sourced::new(true, field.source),
            other => {
                return Err(at(
                    &field.source,
                    format!(
                        "provider `{name}`: max_tokens_field `{other}` is not max_tokens or \
                         max_completion_tokens"
                    ),
                ));
            }
        },
    };
    if kind_value != ProviderKind::Anthropic {
        let options = [
            ("cache_control", partial.cache_control.as_ref().map(|v| &v.source)),
            ("thinking_budget", partial.thinking_budget.as_ref().map(|v| &v.source)),
            ("adaptive_thinking", partial.adaptive_thinking.as_ref().map(|v| &v.source)),
        ];
        if let Some((field, Some(source))) = options.into_iter().find(|(_, s)| s.is_some()) {
            return Err(at(
                source,
                format!("provider `{name}`: `{field}` is an option of kind anthropic"),
            ));
        }
    }
    if kind_value != ProviderKind::OpenaiCompatible {
        let options = [
            ("thinking_object", partial.thinking_object.as_ref().map(|v| &v.source)),
            ("reasoning_passback", partial.reasoning_passback.as_ref().map(|v| &v.source)),
            (
                "max_tokens_field",
                max_completion_tokens.value.then_some(&max_completion_tokens.source),
            ),
        ];
        if let Some((field, Some(source))) = options.into_iter().find(|(_, s)| s.is_some()) {
            return Err(at(
                source,
                format!("provider `{name}`: `{field}` is an option of kind openai-compatible"),
            ));
        }
    }
    if let (Some(budget), Some(adaptive)) = (&partial.thinking_budget, &partial.adaptive_thinking)
        && adaptive.value
    {
        return Err(at(
            &budget.source,
            format!("provider `{name}`: thinking_budget has no use with adaptive_thinking"),
        ));
    }
    if let Some(budget) = &partial.thinking_budget
        && budget.value < 1024
    {
        return Err(at(
            &budget.source,
            format!(
                "provider `{name}`: thinking_budget ({}) is below Anthropic's minimum of 1024",
                budget.value
            ),
        ));
    }
    for (id, model) in &partial.models {
        if let Some(window) = &model.context_window
            && window.value == 0
        {
            return Err(at(
                &window.source,
                format!("model `{id}`: context_window must be above 0"),
            ));
        }
        if let Some(output) = &model.max_output
            && output.value == 0
        {
            return Err(at(&output.source, format!("model `{id}`: max_output must be above 0")));
        }
    }
    Ok(Profile {
        name,
        kind: Sourced::new(kind_value, kind.source),
        base_url,
        key: partial.key,
        headers: partial.headers,
        model: partial.model,
        connect_timeout,
        data_timeout,
        overall_timeout,
        thinking_object: flag(partial.thinking_object),
        reasoning_passback: flag(partial.reasoning_passback),
        max_completion_tokens,
        cache_control: partial.cache_control.unwrap_or_else(|| Sourced::new(true, Source::Default)),
        thinking_budget: partial.thinking_budget,
        adaptive_thinking: flag(partial.adaptive_thinking),
        models: partial.models,
    })
}

fn check_base_url(name: &str, base_url: &Sourced<String>) -> Result<(), ConfigError> {
    let url = base_url.value.as_str();
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    match host {
        Some(host) if !host.is_empty() && !url.contains(char::is_whitespace) => Ok(()),
        _ => Err(at(
            &base_url.source,
            format!("provider `{name}`: base_url `{url}` is not an http:// or https:// URL"),
        )),
    }
}

fn check_price(
    layer: &Layer,
    price: &Spanned<crate::file::FilePrice>,
) -> Result<Price, ConfigError> {
    let value = price.get_ref();
    let amounts =
        [value.cache_hit, value.cache_miss, value.output, value.cache_write.unwrap_or(0.0)];
    if amounts.iter().any(|amount| !amount.is_finite() || *amount < 0.0) {
        return Err(layer.error(
            source_line(&layer.source(price)),
            "a price must be a number of at least 0".to_owned(),
        ));
    }
    if value.currency.trim().is_empty() {
        return Err(
            layer.error(source_line(&layer.source(price)), "a price needs a currency".to_owned())
        );
    }
    Ok(Price {
        cache_hit: value.cache_hit,
        cache_miss: value.cache_miss,
        output: value.output,
        cache_write: value.cache_write,
        currency: value.currency.clone(),
    })
}

fn source_line(source: &Source) -> Option<usize> {
    match source {
        Source::File { line, .. } => Some(*line),
        _ => None,
    }
}

/// An error located at a value's source.
fn at(source: &Source, message: String) -> ConfigError {
    ConfigError { location: source.to_string(), message }
}

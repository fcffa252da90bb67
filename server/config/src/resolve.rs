//! Layers merged into one [`Config`], value by value, each value keeping its source; then the
//! checks that need the merged whole (a profile with no kind, a default that names nothing).
//! A profile's and an MCP server's own merging and checks are in `profile` and `mcp`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dsh_session::Approval;
use toml::Spanned;

use crate::approval::merge_approval;
use crate::file::Layer;
use crate::mcp::{McpServer, PartialServer, finish_server};
use crate::profile::{Partial, Profile, finish_profile};
use crate::{ConfigError, Source, Sourced};

/// What the environment and flags say; they beat every file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// The default profile (`--provider`, `DSH_PROVIDER`).
    pub profile: Option<Sourced<String>>,
    /// The default model (`--model`, `DSH_MODEL`).
    pub model: Option<Sourced<String>>,
    /// Where the requests of new sessions on the default profile go (`dsh serve --base-url`):
    /// each such session is pinned to the ad-hoc profile `PROFILE@URL` ([`Config::profile`]),
    /// so the URL is logged with it and survives a restart. The profile itself is unchanged.
    pub base_url: Option<Sourced<String>>,
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

/// Workspace checkpoints (`[checkpoints]`, docs/rewind.md).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointSettings {
    /// Whether the daemon checkpoints the workspace before file-changing steps and at turn ends.
    pub enabled: Sourced<bool>,
    /// Files larger than this (bytes) are listed as too large, not stored.
    pub max_file_size: Sourced<u64>,
    /// The workspace's object store is kept within this many bytes; the oldest checkpoints are
    /// dropped first.
    pub budget: Sourced<u64>,
}

/// `web_fetch` (`[web]`, docs/web_fetch.md).
#[derive(Clone, Debug, PartialEq)]
pub struct WebConfig {
    /// Whether `web_fetch` runs while the session's network is off (the user's file only).
    pub allow: Sourced<bool>,
    /// Hosts `web_fetch` may reach on loopback, link-local or private addresses; a workspace's
    /// file may only narrow the list.
    pub allow_hosts: Sourced<Vec<String>>,
    /// The overall deadline of one call, in seconds.
    pub timeout_secs: Sourced<u64>,
    /// The most body bytes one call reads.
    pub max_bytes: Sourced<u64>,
}

/// The default overall deadline of a `web_fetch` call, in seconds.
pub const DEFAULT_WEB_TIMEOUT_SECS: u64 = 30;
/// The longest deadline a configuration may set, in seconds.
pub const MAX_WEB_TIMEOUT_SECS: u64 = 600;
/// The default body cap of a `web_fetch` call.
pub const DEFAULT_WEB_MAX_BYTES: u64 = 2 << 20;
/// The largest body cap a configuration may set.
pub const MAX_WEB_MAX_BYTES: u64 = 8 << 20;

/// The default cap on a checkpointed file's size.
pub const DEFAULT_CHECKPOINT_MAX_FILE_SIZE: u64 = 8 << 20;
/// The default budget of a workspace's checkpoint store.
pub const DEFAULT_CHECKPOINT_BUDGET: u64 = 1 << 30;

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
    /// Workspace checkpoints.
    pub checkpoints: CheckpointSettings,
    /// The `web_fetch` tool.
    pub web: WebConfig,
    /// Hooks, in the order of their events and then of the user's file (disabled ones too).
    pub hooks: Vec<crate::hooks::Hook>,
    /// Sub-agents' budgets (`[subagents]`).
    pub subagents: crate::subagents::SubagentSettings,
    /// Workspaces the user confirmed although they are `/`, `$HOME` or hold dsh's state or
    /// configuration (absolute paths, as written).
    pub allow_workspaces: Vec<PathBuf>,
}

impl Config {
    /// The profile and model a new session uses: the ones asked for, else the defaults. An
    /// unknown profile, or a model the profile does not list (when it lists any), is an error
    /// that names what exists.
    pub fn pick(
        &self,
        profile: Option<&str>,
        model: Option<&str>,
    ) -> Result<(Cow<'_, Profile>, String), ConfigError> {
        let name = profile.unwrap_or(&self.profile.value);
        let chosen = self.profile(name)?;
        let base = ad_hoc_parts(name).map_or(name, |(base, _)| base);
        let default_model = if profile.is_none() || base == self.profile.value {
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

    /// The profile named `name`: a configured one, or an ad-hoc one, `NAME@URL` — the
    /// configured profile `NAME` sending its requests to `URL` instead (what a client's
    /// `--base-url` makes for its sessions, see [`ad_hoc_profile`]). An unknown name, or a URL
    /// that is not a plain `http(s)://host[:port][/path]`, is an error saying so.
    pub fn profile(&self, name: &str) -> Result<Cow<'_, Profile>, ConfigError> {
        let unknown = |name: &str| {
            let known = self.profiles.keys().cloned().collect::<Vec<_>>().join(", ");
            ConfigError {
                location: "provider".to_owned(),
                message: format!("no provider profile `{name}` (configured: {known})"),
            }
        };
        if let Some(profile) = self.profiles.get(name) {
            return Ok(Cow::Borrowed(profile));
        }
        let Some((base, url)) = ad_hoc_parts(name) else { return Err(unknown(name)) };
        let mut profile = self.profiles.get(base).ok_or_else(|| unknown(base))?.clone();
        check_ad_hoc_url(url)?;
        profile.name = name.to_owned();
        profile.base_url = Sourced::new(url.to_owned(), Source::Flag("--base-url".to_owned()));
        Ok(Cow::Owned(profile))
    }

    /// The ad-hoc profile a client's base URL makes of `profile` (the default when `None`):
    /// its name, `NAME@URL`, checked. Sessions are pinned to it and log it like any profile.
    pub fn ad_hoc_profile(&self, profile: Option<&str>, url: &str) -> Result<String, ConfigError> {
        let base = profile.unwrap_or(&self.profile.value);
        let base = ad_hoc_parts(base).map_or(base, |(base, _)| base);
        check_ad_hoc_url(url)?;
        let name = format!("{base}@{}", url.trim_end_matches('/'));
        self.profile(&name)?;
        Ok(name)
    }
}

/// `(profile, URL)` of an ad-hoc profile's name `NAME@http(s)://…` (configured names hold no
/// `@`: they are table keys of letters, digits, `-` and `_`).
fn ad_hoc_parts(name: &str) -> Option<(&str, &str)> {
    let (base, url) = name.split_once('@')?;
    (url.starts_with("http://") || url.starts_with("https://")).then_some((base, url))
}

/// A client's base URL: `http(s)://host[:port][/path]` and nothing that could be a secret —
/// it is logged as the session's profile name (no user or password, no query, no fragment).
fn check_ad_hoc_url(url: &str) -> Result<(), ConfigError> {
    // The URL is not repeated: a refused one may hold a password.
    let refuse = |why: &str| ConfigError {
        location: "--base-url".to_owned(),
        message: format!("the base URL {why}"),
    };
    let Some(rest) = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://")) else {
        return Err(refuse("is not an http:// or https:// URL"));
    };
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || url.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(refuse("is not an http:// or https:// URL"));
    }
    if host.contains('@') || url.contains(['?', '#']) {
        return Err(refuse(
            "holds a user, a query or a fragment: it would be logged as the session's profile; \
             put such a URL in a provider profile of your configuration file",
        ));
    }
    // The profile's key goes with every request: in clear text only to this machine.
    let name = host.rsplit_once(':').map_or(host, |(name, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) { name } else { host }
    });
    let loopback = name == "localhost" || name.starts_with("127.") || name == "[::1]";
    if url.starts_with("http://") && !loopback {
        return Err(refuse(
            "is plain http:// to another machine: the profile's key would cross the network in \
             clear text; use https://, or name the URL in a provider profile of your \
             configuration file",
        ));
    }
    Ok(())
}

/// Sets `slot` from a spanned file value.
pub(crate) fn take<T: Clone>(
    slot: &mut Option<Sourced<T>>,
    layer: &Layer,
    value: &Option<Spanned<T>>,
) {
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
    let mut checkpoints = CheckpointSettings {
        enabled: Sourced::new(true, Source::Default),
        max_file_size: Sourced::new(DEFAULT_CHECKPOINT_MAX_FILE_SIZE, Source::Default),
        budget: Sourced::new(DEFAULT_CHECKPOINT_BUDGET, Source::Default),
    };
    let mut web = WebConfig {
        allow: Sourced::new(false, Source::Default),
        allow_hosts: Sourced::new(Vec::new(), Source::Default),
        timeout_secs: Sourced::new(DEFAULT_WEB_TIMEOUT_SECS, Source::Default),
        max_bytes: Sourced::new(DEFAULT_WEB_MAX_BYTES, Source::Default),
    };
    let mut subagents = crate::subagents::SubagentSettings::default();
    for layer in layers {
        checkpoint_layer(&mut checkpoints, layer)?;
        web_layer(&mut web, layer)?;
        crate::subagents::subagent_layer(&mut subagents, layer)?;
        let file = &layer.file;
        take(&mut profile, layer, &file.profile);
        take(&mut model, layer, &file.model);
        for (name, spanned) in &file.providers {
            partials.entry(name.clone()).or_default().merge(layer, spanned)?;
        }
        for (tool, policy) in &file.approvals {
            merge_approval(&mut approvals, layer, tool, policy)?;
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
            servers.entry(name.clone()).or_default().merge(layer, name, spanned)?;
        }
    }
    if let Some(value) = &overrides.profile {
        profile = Some(value.clone());
    }
    if let Some(value) = &overrides.model {
        model = Some(value.clone());
    }
    let profile = profile.unwrap_or_else(|| Sourced::new("deepseek".to_owned(), Source::Default));

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
    let hooks = crate::hooks::resolve_hooks(layers)?;
    let config = Config {
        hooks,
        profile,
        model,
        profiles,
        approvals,
        context,
        instructions,
        mcp,
        checkpoints,
        web,
        subagents,
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

/// The line of a value's source, when it is in a file.
pub(crate) fn source_line(source: &Source) -> Option<usize> {
    match source {
        Source::File { line, .. } => Some(*line),
        _ => None,
    }
}

/// An error located at a value's source.
/// Merges a layer's `[checkpoints]`. A workspace's file only tightens: it may turn checkpoints
/// off and lower the limits, never the reverse (a repository does not get to fill the user's
/// disk); a looser value there is left out.
fn checkpoint_layer(settings: &mut CheckpointSettings, layer: &Layer) -> Result<(), ConfigError> {
    let file = &layer.file.checkpoints;
    if let Some(enabled) = &file.enabled
        && (!layer.workspace || !*enabled.get_ref())
    {
        settings.enabled = Sourced::new(*enabled.get_ref(), layer.source(enabled));
    }
    for (key, value, slot) in [
        ("max_file_size", &file.max_file_size, &mut settings.max_file_size),
        ("budget", &file.budget, &mut settings.budget),
    ] {
        let Some(value) = value else { continue };
        let source = layer.source(value);
        let bytes = parse_bytes(value.get_ref()).ok_or_else(|| {
            at(
                &source,
                format!(
                    "checkpoints.{key}: {} is not a size (bytes, or a string such as \"8 MiB\" \
                     with B, KiB, MiB or GiB)",
                    match value.get_ref() {
                        toml::Value::String(text) => format!("\"{text}\""),
                        toml::Value::Integer(number) => number.to_string(),
                        other => format!("a {}", other.type_str()),
                    }
                ),
            )
        })?;
        if !layer.workspace || bytes < slot.value {
            *slot = Sourced::new(bytes, source);
        }
    }
    Ok(())
}

/// Merges a layer's `[web]`. A workspace's file only narrows: `allow = true` and a host the
/// layers below do not list are errors naming the file and line (a repository must not open
/// the user's network or private addresses to the model); a longer deadline or a larger cap
/// there is left out.
fn web_layer(web: &mut WebConfig, layer: &Layer) -> Result<(), ConfigError> {
    let file = &layer.file.web;
    let refuse = |source: &Source, what: &str| {
        at(
            source,
            format!(
                "web.{what} cannot be set in a workspace's configuration: a repository may only \
                 narrow what web_fetch reaches; set it in your own configuration file"
            ),
        )
    };
    if let Some(allow) = &file.allow {
        let source = layer.source(allow);
        if layer.workspace && *allow.get_ref() {
            return Err(refuse(&source, "allow = true"));
        }
        web.allow = Sourced::new(*allow.get_ref(), source);
    }
    if let Some(hosts) = &file.allow_hosts {
        let source = layer.source(hosts);
        let normal = |host: &str| {
            let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
            host.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .map(str::to_owned)
                .unwrap_or(host)
        };
        for host in hosts.get_ref() {
            if normal(host).is_empty() || host.contains(['/', '@', ' ']) {
                return Err(at(
                    &source,
                    format!("web.allow_hosts: `{host}` is not a host name or address"),
                ));
            }
            if layer.workspace
                && !web.allow_hosts.value.iter().any(|listed| normal(listed) == normal(host))
            {
                return Err(refuse(
                    &source,
                    &format!("allow_hosts entry `{host}` (not in your own list)"),
                ));
            }
        }
        web.allow_hosts = Sourced::new(hosts.get_ref().clone(), source);
    }
    if let Some(timeout) = &file.timeout_secs {
        let source = layer.source(timeout);
        let secs = *timeout.get_ref();
        if !(1..=MAX_WEB_TIMEOUT_SECS).contains(&secs) {
            return Err(at(
                &source,
                format!("web.timeout_secs: {secs} is not between 1 and {MAX_WEB_TIMEOUT_SECS}"),
            ));
        }
        if !layer.workspace || secs < web.timeout_secs.value {
            web.timeout_secs = Sourced::new(secs, source);
        }
    }
    if let Some(value) = &file.max_bytes {
        let source = layer.source(value);
        let bytes =
            parse_bytes(value.get_ref()).filter(|bytes| (1..=MAX_WEB_MAX_BYTES).contains(bytes));
        let Some(bytes) = bytes else {
            return Err(at(
                &source,
                format!(
                    "web.max_bytes: not a size between 1 byte and {MAX_WEB_MAX_BYTES} (bytes, or a \
                     string such as \"2 MiB\")"
                ),
            ));
        };
        if !layer.workspace || bytes < web.max_bytes.value {
            web.max_bytes = Sourced::new(bytes, source);
        }
    }
    Ok(())
}

/// A size in bytes: a non-negative integer, or a string `"<number> <unit>"` (B, KiB, MiB, GiB;
/// the space optional).
fn parse_bytes(value: &toml::Value) -> Option<u64> {
    match value {
        toml::Value::Integer(bytes) => u64::try_from(*bytes).ok(),
        toml::Value::String(text) => {
            let text = text.trim();
            let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
            let number: u64 = text[..split].parse().ok()?;
            let unit: u64 = match text[split..].trim() {
                "" | "B" => 1,
                "KiB" => 1 << 10,
                "MiB" => 1 << 20,
                "GiB" => 1 << 30,
                _ => return None,
            };
            number.checked_mul(unit)
        }
        _ => None,
    }
}

pub(crate) fn at(source: &Source, message: String) -> ConfigError {
    ConfigError { location: source.to_string(), message }
}

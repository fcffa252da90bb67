//! What `dsh config` lists: every resolved value as one [`Entry`] — dotted key, value as TOML
//! would write it, source. Secrets never appear: header and `env` values are shown hidden, and
//! keys are only named where they are.

use dsh_session::ProviderKind;

use crate::mcp::McpTransport;
use crate::profile::KeySource;
use crate::resolve::Config;
use crate::{Source, Sourced};

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
                if let Some(value) = &model.images {
                    put(at("images"), value.value.to_string(), &value.source);
                }
                if let Some(value) = &model.max_images {
                    put(at("max_images"), value.value.to_string(), &value.source);
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
        let checkpoints = &self.checkpoints;
        put(
            "checkpoints.enabled".to_owned(),
            checkpoints.enabled.value.to_string(),
            &checkpoints.enabled.source,
        );
        put(
            "checkpoints.max_file_size".to_owned(),
            checkpoints.max_file_size.value.to_string(),
            &checkpoints.max_file_size.source,
        );
        put(
            "checkpoints.budget".to_owned(),
            checkpoints.budget.value.to_string(),
            &checkpoints.budget.source,
        );
        let web = &self.web;
        put("web.allow".to_owned(), web.allow.value.to_string(), &web.allow.source);
        let hosts = web.allow_hosts.value.iter().map(|h| quoted(h)).collect::<Vec<_>>();
        put(
            "web.allow_hosts".to_owned(),
            format!("[{}]", hosts.join(", ")),
            &web.allow_hosts.source,
        );
        put(
            "web.timeout_secs".to_owned(),
            web.timeout_secs.value.to_string(),
            &web.timeout_secs.source,
        );
        put("web.max_bytes".to_owned(), web.max_bytes.value.to_string(), &web.max_bytes.source);
        let subagents = &self.subagents;
        for (key, value) in [
            ("max_steps", &subagents.max_steps),
            ("max_tokens", &subagents.max_tokens),
            ("timeout_secs", &subagents.timeout_secs),
            ("max_parallel", &subagents.max_parallel),
            ("max_depth", &subagents.max_depth),
        ] {
            put(format!("subagents.{key}"), value.value.to_string(), &value.source);
        }
        if let Some(cost) = &subagents.max_cost {
            put("subagents.max_cost".to_owned(), cost.value.to_string(), &cost.source);
        }
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
        for hook in &self.hooks {
            let at = |field: &str| format!("hooks.{}.{field}", hook.name);
            put(at("event"), quoted(hook.event.name()), &hook.source);
            if let Some(matcher) = &hook.matcher {
                put(at("matcher"), quoted(matcher), &hook.source);
            }
            put(at("command"), quoted(&hook.command), &hook.source);
            if !hook.args.is_empty() {
                let args = hook.args.iter().map(|a| quoted(a)).collect::<Vec<_>>();
                put(at("args"), format!("[{}]", args.join(", ")), &hook.source);
            }
            let timeout = &hook.timeout;
            put(at("timeout_secs"), timeout.value.as_secs().to_string(), &timeout.source);
            if hook.required {
                put(at("required"), "true".to_owned(), &hook.source);
            }
            put(at("enabled"), hook.enabled.value.to_string(), &hook.enabled.source);
        }
        out
    }
}

/// A string value as `dsh config` shows it: quoted, escaped.
fn quoted(text: &str) -> String {
    format!("{text:?}")
}

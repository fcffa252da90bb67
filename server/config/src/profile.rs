//! Provider profiles (`[providers.NAME]`): where requests go, where the key is, timeouts, wire
//! options and models with their prices — merged from the layers field by field, then checked
//! as a whole (a kind, a base URL, options of the right kind, sane numbers).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use dsh_session::{Price, ProviderKind, WireFormat};
use toml::Spanned;

use crate::file::{FileProfile, Layer};
use crate::resolve::{at, source_line, take};
use crate::{ConfigError, Source, Sourced};

/// Where a profile's key is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// An environment variable (of the process that starts the daemon).
    Env(String),
    /// A file that must not be readable by group or others.
    File(PathBuf),
}

/// The most images one request carries unless a model's `max_images` says: the lowest limit
/// the supported providers document (Anthropic's Messages API takes 100 images a request).
pub const DEFAULT_MAX_IMAGES: u32 = 100;

/// One model of a profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Model {
    /// Context window in tokens.
    pub context_window: Option<Sourced<u64>>,
    /// Output limit in tokens (the `max_tokens` of its requests).
    pub max_output: Option<Sourced<u32>>,
    /// Whether thinking is on by default.
    pub thinking: Option<Sourced<bool>>,
    /// Whether it reads images (`images = true`; absent: it does not). A session on a model
    /// that does not is refused an image before anything is logged.
    pub images: Option<Sourced<bool>>,
    /// The most images one request may carry (`max_images`; absent:
    /// [`DEFAULT_MAX_IMAGES`]). A step whose request would carry more is not sent.
    pub max_images: Option<Sourced<u32>>,
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

    /// Whether `model` reads images (its `images` setting; a model not configured does not).
    pub fn images(&self, model: &str) -> bool {
        self.models.get(model).and_then(|model| model.images.as_ref()).is_some_and(|v| v.value)
    }

    /// The most images one request to `model` may carry (its `max_images` setting, else
    /// [`DEFAULT_MAX_IMAGES`]).
    pub fn max_images(&self, model: &str) -> u32 {
        self.models
            .get(model)
            .and_then(|model| model.max_images.as_ref())
            .map_or(DEFAULT_MAX_IMAGES, |max| max.value)
    }

    /// The price of `model`, when configured.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.models.get(model)?.price.as_ref().map(|price| &price.value)
    }
}

/// The profile being merged: every field optional until the checks.
#[derive(Default)]
pub(crate) struct Partial {
    kind: Option<Sourced<String>>,
    /// The flags' `--base-url` replaces the default profile's.
    pub(crate) base_url: Option<Sourced<String>>,
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

impl Partial {
    /// Takes what one layer's `[providers.NAME]` sets.
    pub(crate) fn merge(
        &mut self,
        layer: &Layer,
        spanned: &Spanned<FileProfile>,
    ) -> Result<(), ConfigError> {
        let given = spanned.get_ref();
        self.named_at.get_or_insert_with(|| layer.source(spanned));
        take(&mut self.kind, layer, &given.kind);
        take(&mut self.base_url, layer, &given.base_url);
        if let Some(variable) = &given.api_key_env {
            let key = KeySource::Env(variable.get_ref().clone());
            self.key = Some(Sourced::new(key, layer.source(variable)));
        }
        if let Some(path) = &given.api_key_file {
            let key = KeySource::File(PathBuf::from(path.get_ref()));
            self.key = Some(Sourced::new(key, layer.source(path)));
        }
        if let Some(headers) = &given.headers {
            for (name, value) in headers.get_ref() {
                let value = Sourced::new(value.clone(), layer.source(headers));
                self.headers.insert(name.clone(), value);
            }
        }
        take(&mut self.model, layer, &given.model);
        take(&mut self.connect_timeout, layer, &given.connect_timeout_secs);
        take(&mut self.data_timeout, layer, &given.data_timeout_secs);
        take(&mut self.overall_timeout, layer, &given.overall_timeout_secs);
        take(&mut self.thinking_object, layer, &given.thinking_object);
        take(&mut self.reasoning_passback, layer, &given.reasoning_passback);
        take(&mut self.max_tokens_field, layer, &given.max_tokens_field);
        take(&mut self.cache_control, layer, &given.cache_control);
        take(&mut self.thinking_budget, layer, &given.thinking_budget);
        take(&mut self.adaptive_thinking, layer, &given.adaptive_thinking);
        for (id, spanned_model) in &given.models {
            let target = self.models.entry(id.clone()).or_default();
            let given = spanned_model.get_ref();
            take(&mut target.context_window, layer, &given.context_window);
            take(&mut target.max_output, layer, &given.max_output);
            take(&mut target.thinking, layer, &given.thinking);
            take(&mut target.images, layer, &given.images);
            take(&mut target.max_images, layer, &given.max_images);
            if let Some(price) = &given.price {
                let checked = check_price(layer, price)?;
                target.price = Some(Sourced::new(checked, layer.source(price)));
            }
        }
        Ok(())
    }
}

/// Checks a merged profile and gives it its defaults.
pub(crate) fn finish_profile(name: String, partial: Partial) -> Result<Profile, ConfigError> {
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

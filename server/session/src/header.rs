//! The request header — call config, system prompt, tool schemas — and its fold, diff and apply.
//!
//! The header is logged session state. A `request/header` snapshot anchors it; a
//! `request/header-delta` amends it. Deltas are an encoding optimization with a safety valve:
//! [`diff_header`] only returns a delta that [`apply_header_delta`] provably turns back into the
//! new header, and a change the encoding cannot express (a pure reordering of tools) makes the
//! writer log a `fallback` snapshot instead ([`plan_header_event`]).

use serde::{Deserialize, Serialize};

use crate::event::{Event, EventData, SnapshotReason};

/// Model and sampling scalars: the per-conversation call config.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LlmCallConfig {
    /// Provider model id, passed through unchanged.
    pub model: String,
    /// The provider profile the session is pinned to (its name in the configuration); `None` in
    /// logs written before profiles existed, which are DeepSeek's. Never a URL, a key or a header
    /// value: only what names the endpoint's kind and identity for the reader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The wire format the request is written in and its byte-changing options; `None` is
    /// DeepSeek's chat-completions format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<WireFormat>,
    /// Output limit; always sent.
    pub max_tokens: u32,
    /// Thinking mode on or off.
    pub thinking: bool,
    /// Reasoning effort (`high`, `max`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Sampling temperature, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// The provider's native JSON mode, asked for while a turn must answer in JSON (a prompt
    /// with an output schema), when the format has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
}

/// The shape the provider is asked to hold the model's answer to (its `response_format`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum ResponseFormat {
    /// A JSON object (DeepSeek's JSON Output, `{"type":"json_object"}`); the prompt must say
    /// `json` and give the shape.
    JsonObject,
}

/// The kind of endpoint a provider profile speaks.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// DeepSeek's chat completions (OpenAI-compatible, with DeepSeek's `thinking` object and
    /// `reasoning_content`).
    #[default]
    Deepseek,
    /// Another OpenAI-compatible chat-completions server (llama.cpp, vLLM, Ollama, …).
    OpenaiCompatible,
    /// Anthropic Messages.
    Anthropic,
}

impl ProviderKind {
    /// The name used in configuration files and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Deepseek => "deepseek",
            Self::OpenaiCompatible => "openai-compatible",
            Self::Anthropic => "anthropic",
        }
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a request body is written: the endpoint kind and the options of that kind that change
/// the bytes. Logged in the call config, because the rebuilt body depends on every one of them.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireFormat {
    /// The endpoint kind.
    pub kind: ProviderKind,
    /// OpenAI-compatible: send DeepSeek's `thinking` object (`{"type":"enabled"|"disabled"}`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub thinking_object: bool,
    /// OpenAI-compatible: send each assistant message's stored reasoning back as
    /// `reasoning_content`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub reasoning_passback: bool,
    /// OpenAI-compatible: the output limit is `max_completion_tokens` instead of `max_tokens`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub max_completion_tokens: bool,
    /// Anthropic: no `cache_control` breakpoints (for endpoints that ignore them, such as
    /// DeepSeek's `/anthropic`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_cache_control: bool,
    /// Anthropic: the thinking budget (`thinking.budget_tokens`) when thinking is on; `None`
    /// derives it from `max_tokens` (docs/providers.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<u32>,
    /// Anthropic: thinking on is `{"type":"adaptive"}` (the model decides how much to think;
    /// Claude 4.7 and later refuse a budget) instead of `{"type":"enabled","budget_tokens"}`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub adaptive_thinking: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl LlmCallConfig {
    /// The endpoint kind of this config (`Deepseek` when no wire format is logged).
    pub fn kind(&self) -> ProviderKind {
        self.wire.as_ref().map_or(ProviderKind::Deepseek, |wire| wire.kind)
    }

    /// The profile and model, as a reader names them (`deepseek/deepseek-v4-flash`; logs from
    /// before profiles name the model alone).
    pub fn provider_label(&self) -> String {
        match &self.profile {
            Some(profile) => format!("{profile}/{}", self.model),
            None => self.model.clone(),
        }
    }
}

/// `value` with every object's keys in sorted order, whatever map serde_json was built with: its
/// `preserve_order` feature (which a dependency may switch on for the whole build) keeps
/// insertion order, and a tool schema is part of the byte-stable request header.
pub fn canonical_json(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.cmp(b));
            Value::Object(entries.into_iter().map(|(k, v)| (k, canonical_json(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical_json).collect()),
        other => other,
    }
}

/// One tool's schema as the model sees it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Unique name.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: serde_json::Value,
}

/// The request's non-content half, in canonical form: an empty system prompt or an empty tool
/// list is `None`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpochHeader {
    /// Model and sampling.
    pub config: LlmCallConfig,
    /// The rendered system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The assembled tool schemas, in the order they are sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolSchema>>,
}

impl EpochHeader {
    /// Builds a header in canonical form.
    pub fn new(config: LlmCallConfig, system: Option<String>, tools: Vec<ToolSchema>) -> Self {
        EpochHeader { config, system, tools: Some(tools) }.canonical()
    }

    /// The same header with empty system/tools folded to `None`.
    pub fn canonical(mut self) -> Self {
        if self.system.as_deref() == Some("") {
            self.system = None;
        }
        if self.tools.as_ref().is_some_and(Vec::is_empty) {
            self.tools = None;
        }
        self
    }

    /// The tool list, empty when absent.
    pub fn tool_list(&self) -> &[ToolSchema] {
        self.tools.as_deref().unwrap_or(&[])
    }
}

/// A system prompt amendment: keep `keep_prefix` leading and `keep_suffix` trailing lines of the
/// previous prompt and put `lines` between them.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SystemDelta {
    /// Leading lines kept.
    pub keep_prefix: usize,
    /// Trailing lines kept.
    pub keep_suffix: usize,
    /// The new middle lines.
    pub lines: Vec<String>,
}

/// A name-keyed tool list amendment: remove, replace in place, then append.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsDelta {
    /// Tools appended at the end, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<ToolSchema>>", optional))]
    pub added: Vec<ToolSchema>,
    /// Names removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<String>>", optional))]
    pub removed: Vec<String>,
    /// Tools whose schema changed, replaced in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schema", ts(as = "Option<Vec<ToolSchema>>", optional))]
    pub changed: Vec<ToolSchema>,
}

/// An amendment of the folded header (`request/header-delta`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderDelta {
    /// The system prompt changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<SystemDelta>,
    /// The tool list changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsDelta>,
    /// The config changed; replaced whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<LlmCallConfig>,
}

/// Why a delta could not be applied to a header.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderDeltaError {
    /// The system delta keeps more lines than the prompt has.
    #[error("system delta keeps {keep} lines of a prompt with {have}")]
    SystemOutOfRange {
        /// Lines kept.
        keep: usize,
        /// Lines present.
        have: usize,
    },
    /// A removed or changed tool is not in the list.
    #[error("tools delta names `{0}`, which the header does not have")]
    MissingTool(String),
    /// An added tool is already in the list.
    #[error("tools delta adds `{0}`, which the header already has")]
    DuplicateTool(String),
}

/// Folds the header events of `events` (snapshots anchor, deltas amend); `None` before the
/// first snapshot. Total: a delta that does not apply is skipped ([`crate::check_log`] reports it).
pub fn fold_request_header(events: &[Event]) -> Option<EpochHeader> {
    let mut header = None;
    for event in events {
        let _ = fold_header_event(&mut header, event);
    }
    header
}

/// Advances a header fold by one event. Returns the error of a delta that did not apply.
pub(crate) fn fold_header_event(
    header: &mut Option<EpochHeader>,
    event: &Event,
) -> Result<(), Option<HeaderDeltaError>> {
    match &event.data {
        EventData::RequestHeader(snapshot) => {
            *header = Some(snapshot.header.clone().canonical());
            Ok(())
        }
        EventData::RequestHeaderDelta(delta) => {
            let Some(previous) = header.as_ref() else { return Err(None) };
            let next = apply_header_delta(previous, delta).map_err(Some)?;
            *header = Some(next);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Applies a delta to a header.
pub fn apply_header_delta(
    previous: &EpochHeader,
    delta: &HeaderDelta,
) -> Result<EpochHeader, HeaderDeltaError> {
    let config = delta.config.clone().unwrap_or_else(|| previous.config.clone());
    let system = match &delta.system {
        None => previous.system.clone(),
        Some(system_delta) => Some(apply_system_delta(previous.system.as_deref(), system_delta)?),
    };
    let tools = match &delta.tools {
        None => previous.tools.clone(),
        Some(tools_delta) => Some(apply_tools_delta(previous.tool_list(), tools_delta)?),
    };
    Ok(EpochHeader { config, system, tools }.canonical())
}

fn apply_system_delta(
    previous: Option<&str>,
    delta: &SystemDelta,
) -> Result<String, HeaderDeltaError> {
    let lines: Vec<&str> = previous.unwrap_or("").split('\n').collect();
    // The counts come from a log file: check the sum without overflowing.
    let keep = delta.keep_prefix.saturating_add(delta.keep_suffix);
    if keep > lines.len() {
        return Err(HeaderDeltaError::SystemOutOfRange { keep, have: lines.len() });
    }
    let mut out: Vec<&str> = Vec::with_capacity(keep + delta.lines.len());
    out.extend_from_slice(&lines[..delta.keep_prefix]);
    out.extend(delta.lines.iter().map(String::as_str));
    out.extend_from_slice(&lines[lines.len() - delta.keep_suffix..]);
    Ok(out.join("\n"))
}

fn apply_tools_delta(
    previous: &[ToolSchema],
    delta: &ToolsDelta,
) -> Result<Vec<ToolSchema>, HeaderDeltaError> {
    for name in &delta.removed {
        if !previous.iter().any(|tool| &tool.name == name) {
            return Err(HeaderDeltaError::MissingTool(name.clone()));
        }
    }
    let mut tools: Vec<ToolSchema> =
        previous.iter().filter(|tool| !delta.removed.contains(&tool.name)).cloned().collect();
    for changed in &delta.changed {
        let slot = tools
            .iter_mut()
            .find(|tool| tool.name == changed.name)
            .ok_or_else(|| HeaderDeltaError::MissingTool(changed.name.clone()))?;
        *slot = changed.clone();
    }
    for added in &delta.added {
        if tools.iter().any(|tool| tool.name == added.name) {
            return Err(HeaderDeltaError::DuplicateTool(added.name.clone()));
        }
        tools.push(added.clone());
    }
    Ok(tools)
}

/// The delta that turns `previous` into `next`, or `None` when they are equal or when the delta
/// encoding cannot express the change (a pure reordering of tools, duplicate tool names).
///
/// Whenever this returns `Some(delta)`, `apply_header_delta(previous, &delta) == Ok(next)`: the
/// function verifies it before returning.
pub fn diff_header(previous: &EpochHeader, next: &EpochHeader) -> Option<HeaderDelta> {
    let next = next.clone().canonical();
    if *previous == next {
        return None;
    }
    let config = (previous.config != next.config).then(|| next.config.clone());
    let system = (previous.system != next.system)
        .then(|| diff_system(previous.system.as_deref(), next.system.as_deref()));
    let tools = if previous.tools != next.tools {
        Some(diff_tools(previous.tool_list(), next.tool_list()))
    } else {
        None
    };
    let delta = HeaderDelta { system, tools, config };
    match apply_header_delta(previous, &delta) {
        Ok(applied) if applied == next => Some(delta),
        _ => None,
    }
}

fn diff_system(previous: Option<&str>, next: Option<&str>) -> SystemDelta {
    let old: Vec<&str> = previous.unwrap_or("").split('\n').collect();
    let new: Vec<&str> = next.unwrap_or("").split('\n').collect();
    let keep_prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let room = old.len().min(new.len()) - keep_prefix;
    let keep_suffix =
        old.iter().rev().zip(new.iter().rev()).take(room).take_while(|(a, b)| a == b).count();
    let lines = new[keep_prefix..new.len() - keep_suffix].iter().map(|l| (*l).to_owned()).collect();
    SystemDelta { keep_prefix, keep_suffix, lines }
}

fn diff_tools(previous: &[ToolSchema], next: &[ToolSchema]) -> ToolsDelta {
    let in_list = |list: &[ToolSchema], name: &str| list.iter().find(|t| t.name == name).cloned();
    // The tools of `previous` that stay, in their order; the delta keeps the longest run of
    // them that `next` starts with, and removes and re-adds the rest in `next`'s order — so a
    // tool that joins in the middle of a sorted list (an MCP server's new tool) is still a
    // delta: the tail after it is sent again, as it would be by the provider's cache anyway.
    let staying: Vec<&ToolSchema> =
        previous.iter().filter(|t| in_list(next, &t.name).is_some()).collect();
    let mut kept = staying.iter().zip(next).take_while(|(old, new)| old.name == new.name).count();
    // A pure reordering (nothing joins) stays a fallback snapshot: only an insertion moves a tail.
    if !next[kept..].iter().any(|t| in_list(previous, &t.name).is_none()) {
        kept = next.len();
    }
    let removed = previous
        .iter()
        .filter(|t| {
            in_list(next, &t.name).is_none() || !next[..kept].iter().any(|n| n.name == t.name)
        })
        .map(|t| t.name.clone())
        .collect();
    let changed = next[..kept]
        .iter()
        .filter(|t| in_list(previous, &t.name).is_some_and(|old| old != **t))
        .cloned()
        .collect();
    let added = next[kept..].to_vec();
    ToolsDelta { added, removed, changed }
}

/// The header event a request owes the log.
#[derive(Clone, Debug, PartialEq)]
pub enum HeaderPlan {
    /// Nothing: the header did not change.
    Unchanged,
    /// A verified delta (boxed: a delta carries a whole call config).
    Delta(Box<HeaderDelta>),
    /// A full snapshot, with its reason.
    Snapshot(SnapshotReason),
}

/// Decides the header event for a request whose header is `next`, given the folded header
/// `previous` and whether this is the first request of a loop instance.
///
/// The first request of an instance always anchors a snapshot (`initial` on a log without a
/// header, `resume` otherwise, even when nothing changed). Later requests log nothing when the
/// header is unchanged, a delta when one expresses the change, and a `fallback` snapshot when none
/// does.
pub fn plan_header_event(
    previous: Option<&EpochHeader>,
    next: &EpochHeader,
    first_of_instance: bool,
) -> HeaderPlan {
    match previous {
        None => HeaderPlan::Snapshot(SnapshotReason::Initial),
        Some(_) if first_of_instance => HeaderPlan::Snapshot(SnapshotReason::Resume),
        Some(previous) if *previous == next.clone().canonical() => HeaderPlan::Unchanged,
        Some(previous) => match diff_header(previous, next) {
            Some(delta) => HeaderPlan::Delta(Box::new(delta)),
            None => HeaderPlan::Snapshot(SnapshotReason::Fallback),
        },
    }
}

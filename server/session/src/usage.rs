//! The usage view: one row per step with its token usage and, when the prefix changed, the logged
//! event that explains it. A pure fold over the log, shared by the CLI, the API and the editors.

use serde::{Deserialize, Serialize};

use crate::event::{Event, EventData, SnapshotReason, SurfaceNode, Usage};
use crate::header::{EpochHeader, fold_header_event};
use crate::instructions::INSTRUCTIONS_SOURCE;
use crate::money::Cost;

/// A logged event that changed the request prefix before a step.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum PrefixCause {
    /// The session's first request: nothing could be cached.
    FirstRequest {
        /// Seq of its header snapshot.
        seq: u64,
    },
    /// A loop instance resumed the session (a restart or a fork).
    Resume {
        /// Seq of the `resume` snapshot.
        seq: u64,
        /// Whether the header differs from the one folded before it.
        changed: bool,
    },
    /// A change the delta encoding could not express.
    Fallback {
        /// Seq of the snapshot.
        seq: u64,
        /// The MCP servers whose tools changed with it (the `SERVER` of `SERVER__TOOL`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[cfg_attr(feature = "schema", ts(as = "Option<Vec<String>>", optional))]
        servers: Vec<String>,
    },
    /// The system prompt changed.
    SystemChanged {
        /// Seq of the delta.
        seq: u64,
        /// Instruction edits noted in the conversation since the last rewrite were folded into
        /// the system prompt with this change (at no cost of their own).
        #[serde(default, rename = "foldedInstructions")]
        folded_instructions: bool,
    },
    /// The tool schemas changed.
    ToolsChanged {
        /// Seq of the delta.
        seq: u64,
        /// The MCP servers whose tools changed (the `SERVER` of `SERVER__TOOL`): a tool list
        /// that changed, a server that started, restarted with other tools, or died.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[cfg_attr(feature = "schema", ts(as = "Option<Vec<String>>", optional))]
        servers: Vec<String>,
        /// The set of skills changed (the `skill` tool's description lists them:
        /// `docs/skills.md`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        #[cfg_attr(feature = "schema", ts(as = "Option<bool>", optional))]
        skills: bool,
    },
    /// The call config (model, sampling) changed.
    ConfigChanged {
        /// Seq of the delta.
        seq: u64,
    },
    /// The session moved to another provider profile or model (a fork onto another profile, a
    /// config change): the provider's cache does not carry over.
    ProviderChanged {
        /// Seq of the header event.
        seq: u64,
        /// The profile and model before (`deepseek/deepseek-v4-flash`).
        from: String,
        /// The profile and model after.
        to: String,
    },
    /// Older messages were replaced by a summary.
    Compaction {
        /// Seq of the `surface/replace`.
        seq: u64,
    },
    /// A tool result was trimmed.
    Trim {
        /// Seq of the `surface/replace`.
        seq: u64,
    },
}

impl std::fmt::Display for PrefixCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::FirstRequest { .. } => write!(f, "first request"),
            Self::Resume { seq, changed: true } => {
                write!(f, "resume with a changed header at seq {seq}")
            }
            Self::Resume { seq, changed: false } => write!(f, "resume at seq {seq}"),
            Self::Fallback { seq, servers } => {
                write!(f, "header snapshot (fallback) at seq {seq}{}", named_servers(servers))
            }
            Self::SystemChanged { seq, folded_instructions: false } => {
                write!(f, "system prompt changed at seq {seq}")
            }
            Self::SystemChanged { seq, folded_instructions: true } => {
                write!(f, "system prompt changed at seq {seq} (the instruction notes folded in)")
            }
            Self::ToolsChanged { seq, servers, skills } => {
                let skills = if *skills { " (the skills changed)" } else { "" };
                write!(f, "tools changed at seq {seq}{}{skills}", named_servers(servers))
            }
            Self::ConfigChanged { seq } => write!(f, "model config changed at seq {seq}"),
            Self::ProviderChanged { seq, from, to } => {
                write!(f, "provider changed {from} → {to} at seq {seq}")
            }
            Self::Compaction { seq } => write!(f, "compaction at seq {seq}"),
            Self::Trim { seq } => write!(f, "tool result trimmed at seq {seq}"),
        }
    }
}

fn named_servers(servers: &[String]) -> String {
    match servers {
        [] => String::new(),
        [server] => format!(" (MCP server {server})"),
        servers => format!(" (MCP servers {})", servers.join(", ")),
    }
}

/// The MCP servers whose tools differ between two headers: the `SERVER` of each `SERVER__TOOL`
/// added, removed or changed, sorted.
pub fn changed_tool_servers(
    before: Option<&EpochHeader>,
    after: Option<&EpochHeader>,
) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let tools = |header: Option<&EpochHeader>| -> BTreeMap<String, crate::header::ToolSchema> {
        header
            .and_then(|header| header.tools.as_ref())
            .map(|tools| tools.iter().map(|tool| (tool.name.clone(), tool.clone())).collect())
            .unwrap_or_default()
    };
    let (before, after) = (tools(before), tools(after));
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut servers = BTreeSet::new();
    for name in names {
        if before.get(name) != after.get(name)
            && let Some((server, _)) = name.split_once("__")
        {
            servers.insert(server.to_owned());
        }
    }
    servers.into_iter().collect()
}

/// The `skill` tool of a header (`docs/skills.md`): its description lists the skills.
fn skill_tool(header: Option<&EpochHeader>) -> Option<&crate::header::ToolSchema> {
    header?.tools.as_ref()?.iter().find(|tool| tool.name == SKILL_TOOL)
}

/// The name of the tool that loads skills; its description lists them (`docs/skills.md`).
pub const SKILL_TOOL: &str = "skill";

/// One step of the usage view.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// Step number.
    pub step: u64,
    /// Its turn.
    pub turn: u64,
    /// Seq of its `step/start`.
    pub seq: u64,
    /// Its usage; `None` when the step never finished (error, cancel, interruption).
    pub usage: Option<Usage>,
    /// Cache hit ratio in percent (0 when unknown).
    pub hit_percent: f64,
    /// Whether the hit fell short of the previous step's prompt: the cache dropped.
    pub dropped: bool,
    /// Logged events since the previous step that changed the prefix.
    pub causes: Vec<PrefixCause>,
    /// The provider profile the step's request was pinned to (`None`: a log from before
    /// profiles, DeepSeek's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The model the step's request named (`None` when the step logged no header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What the step cost at its profile's prices; not part of the fold (prices are
    /// configuration): the views fill it in, `None` when no price is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
}

/// How far below the previous prompt a hit may fall before it counts as a drop: covers the
/// provider's block rounding and its withheld final block (two blocks of up to 128 tokens). For
/// short prompts the slack is a quarter of the previous prompt instead.
pub const DROP_SLACK_TOKENS: u64 = 256;

/// Whether a step's cache hit fell short of the previous step's prompt.
pub fn is_drop(previous_prompt: u64, hit: u64) -> bool {
    hit.saturating_add(DROP_SLACK_TOKENS.min(previous_prompt / 4)) < previous_prompt
}

/// Folds the usage view of a log.
pub fn usage_rows(events: &[Event]) -> Vec<UsageRow> {
    let mut fold = UsageFold::default();
    fold.advance(events);
    fold.rows
}

/// The usage view folded event by event: [`usage_rows`] over a whole log, or kept beside a
/// loaded session and advanced over the events logged since it last was, so that asking for
/// the usage of a long session — editors do after every step — costs O(new events), not a fold
/// of the whole log.
#[derive(Clone, Debug, Default)]
pub struct UsageFold {
    rows: Vec<UsageRow>,
    /// The request header as folded so far.
    header: Option<EpochHeader>,
    /// Causes logged between steps, for the next row.
    pending_causes: Vec<PrefixCause>,
    /// The last finished step's prompt.
    previous_prompt: Option<u64>,
    /// Whether an instructions note stands (until the system prompt is next rewritten).
    noted_instructions: bool,
    /// The seq of the next event to fold.
    next_seq: u64,
}

impl UsageFold {
    /// Folds the events of `log` (the whole log, growing) not folded yet.
    pub fn advance(&mut self, log: &[Event]) {
        for event in crate::event::since(log, self.next_seq) {
            self.push(event);
        }
    }

    /// The rows so far, one per step started.
    pub fn rows(&self) -> &[UsageRow] {
        &self.rows
    }

    /// The request header folded so far (`fold_request_header` of the same events).
    pub fn header(&self) -> Option<&EpochHeader> {
        self.header.as_ref()
    }

    fn push(&mut self, event: &Event) {
        self.next_seq = event.seq + 1;
        match &event.data {
            EventData::ContextMessage(context)
                if context.source.as_deref() == Some(INSTRUCTIONS_SOURCE) =>
            {
                self.noted_instructions = true;
            }
            EventData::StepStart(start) => self.rows.push(UsageRow {
                step: start.step,
                turn: start.turn,
                seq: event.seq,
                usage: None,
                hit_percent: 0.0,
                dropped: false,
                causes: std::mem::take(&mut self.pending_causes),
                profile: None,
                model: None,
                cost: None,
            }),
            EventData::RequestHeader(snapshot) => {
                let before = self.header.clone();
                let _ = fold_header_event(&mut self.header, event);
                let system = |header: &Option<EpochHeader>| {
                    header.as_ref().and_then(|header| header.system.clone())
                };
                if system(&before) != system(&self.header) {
                    self.noted_instructions = false;
                }
                let cause = match snapshot.reason {
                    SnapshotReason::Initial => PrefixCause::FirstRequest { seq: event.seq },
                    SnapshotReason::Resume => {
                        PrefixCause::Resume { seq: event.seq, changed: before != self.header }
                    }
                    SnapshotReason::Fallback => PrefixCause::Fallback {
                        seq: event.seq,
                        servers: changed_tool_servers(before.as_ref(), self.header.as_ref()),
                    },
                };
                push_cause(&mut self.rows, &mut self.pending_causes, cause);
                let _ = provider_change(
                    &mut self.rows,
                    &mut self.pending_causes,
                    before.as_ref(),
                    &self.header,
                    event,
                );
            }
            EventData::RequestHeaderDelta(delta) => {
                let before = self.header.clone();
                let _ = fold_header_event(&mut self.header, event);
                let moved = provider_change(
                    &mut self.rows,
                    &mut self.pending_causes,
                    before.as_ref(),
                    &self.header,
                    event,
                );
                let seq = event.seq;
                if delta.system.is_some() {
                    let folded_instructions = std::mem::take(&mut self.noted_instructions);
                    let cause = PrefixCause::SystemChanged { seq, folded_instructions };
                    push_cause(&mut self.rows, &mut self.pending_causes, cause);
                }
                if delta.tools.is_some() {
                    let servers = changed_tool_servers(before.as_ref(), self.header.as_ref());
                    let skills = skill_tool(before.as_ref()) != skill_tool(self.header.as_ref());
                    let cause = PrefixCause::ToolsChanged { seq, servers, skills };
                    push_cause(&mut self.rows, &mut self.pending_causes, cause);
                }
                // A move to another profile or model says so instead.
                if delta.config.is_some() && !moved {
                    push_cause(
                        &mut self.rows,
                        &mut self.pending_causes,
                        PrefixCause::ConfigChanged { seq },
                    );
                }
            }
            EventData::SurfaceReplace(replace) => {
                let cause = match replace.node {
                    SurfaceNode::Summary { .. } => PrefixCause::Compaction { seq: event.seq },
                    SurfaceNode::ToolResult(_) => PrefixCause::Trim { seq: event.seq },
                };
                self.pending_causes.push(cause);
            }
            EventData::StepEnd(end) => {
                if let Some(row) = self.rows.iter_mut().rev().find(|row| row.step == end.step) {
                    if let Some(header) = &self.header {
                        row.profile.clone_from(&header.config.profile);
                        row.model = Some(header.config.model.clone());
                    }
                    row.usage = Some(end.usage);
                    row.hit_percent = end.usage.hit_ratio() * 100.0;
                    row.dropped = self
                        .previous_prompt
                        .is_some_and(|previous| is_drop(previous, end.usage.cache_hit_tokens));
                    self.previous_prompt = Some(end.usage.prompt_tokens);
                }
            }
            _ => {}
        }
    }
}

/// A header event that moved the session to another profile or model names the move; returns
/// whether it did.
fn provider_change(
    rows: &mut [UsageRow],
    pending: &mut Vec<PrefixCause>,
    before: Option<&EpochHeader>,
    after: &Option<EpochHeader>,
    event: &Event,
) -> bool {
    let (Some(before), Some(after)) = (before, after) else { return false };
    let (from, to) = (&before.config, &after.config);
    let moved = from.profile != to.profile || from.model != to.model;
    if moved {
        let cause = PrefixCause::ProviderChanged {
            seq: event.seq,
            from: from.provider_label(),
            to: to.provider_label(),
        };
        push_cause(rows, pending, cause);
    }
    moved
}

/// Header events sit inside their step: they belong to the row just opened.
fn push_cause(rows: &mut [UsageRow], pending: &mut Vec<PrefixCause>, cause: PrefixCause) {
    match rows.last_mut() {
        Some(row) if row.usage.is_none() => row.causes.push(cause),
        _ => pending.push(cause),
    }
}

/// Usage summed over every finished step.
pub fn usage_totals(rows: &[UsageRow]) -> Usage {
    rows.iter().filter_map(|row| row.usage).fold(Usage::default(), |sum, usage| sum.add(&usage))
}

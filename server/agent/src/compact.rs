//! Context pressure: tool-result trimming and compaction, both logged surface rewrites.
//!
//! After each step the provider reports the prompt's size; with the step's output (and what the
//! next request will add: the results logged since) that is how full the model's context window
//! is ([`pressure`]). [`decide`] turns that into a [`Decision`] — nothing, trim the old large
//! tool results, or compact the older part of the surface into a summary — as a pure function
//! of the log and a [`ContextConfig`], so replaying the log reaches the same decisions. The loop
//! runs [`relieve_pressure`] as its pre-step hook (after rendering the assembly, before the
//! message snapshot and `step/start`), and [`compact_now`] compacts on demand (`dsh compact`,
//! `session/compact`).
//!
//! What each rewrite writes to the log:
//! - a trim: one `surface/replace {start == end, node: tool/result}` per result, the same
//!   `callId` with the head and tail of the content kept and a note of what was cut. Every
//!   result due is trimmed back to back before the same step, so a batch costs one cache bust;
//!   a node that is already a replacement is never trimmed again;
//! - a compaction: `compact/start {reason, tokensBefore}`, then the one-shot summarize call,
//!   then `compact/summary {model, maxTokens, summary}` and `surface/replace {start, end, node:
//!   summary}` over the older nodes. The latest turns stay verbatim, and the cut never separates
//!   an assistant message's tool calls from their results.
//!
//! After a rewrite the next step pays for the new prefix; only an emergency rewrites again
//! before the step after it, so the cache recovers in between.
//!
//! The summarize call is **not a loop request**: it has no `step/start` and no `request/sent`,
//! and the reconstruction invariant does not cover it. Its bracket marks it instead —
//! `compact/start` … `compact/summary` — and it is reconstructable from the log plus this code:
//! [`summarize_request`] over the surface folded before `compact/start`, the region named by the
//! `surface/replace` (or, for an abandoned attempt, [`plan_compaction`] over the same fold), and
//! the envelope scalars logged in `compact/summary` (model, maxTokens; every other scalar is
//! fixed here). Its model is the one the next loop request is seeded with. A failed or cancelled
//! summarize call leaves `compact/start` alone in the log and the surface untouched; the session
//! stays usable, and the cause goes to the tracing log.
//!
//! This file holds the configuration, the pressure and the decision, and the async shell that
//! applies a decision; the pure parts of each rewrite are beside it: `compact/trim.rs` (what a
//! trim cuts) and `compact/summary.rs` (where a compaction cuts, the summarize request).

use dsh_provider::{DeepSeek, MessageAssembler, StreamEvent, wire_body};
use dsh_session::{
    CompactStart, CompactSummary, EventData, GenerateRequest, LlmCallConfig, Message, Session,
    SurfaceNode, SurfaceReplace,
};
use tokio_util::sync::CancellationToken;

use crate::error::AgentError;
use crate::owner::SessionHandle;

mod summary;
mod trim;

pub use summary::{SUMMARY_INSTRUCTION, plan_compaction, render_region, summarize_request};
use trim::original_result;
pub use trim::{trim_candidates, trim_content, trim_events};

/// How a model's context window is managed.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextConfig {
    /// The model's context window in tokens (prompt plus output).
    pub window_tokens: u64,
    /// Trim old large tool results when a step used this share of the window.
    pub trim_at: f64,
    /// Compact when a step used this share of the window. It must leave room for the next
    /// step's growth and its `max_tokens`.
    pub compact_at: f64,
    /// A trim batch is only worth a cache bust when it frees at least this share of the window
    /// (estimated); otherwise the session waits for compaction.
    pub trim_min_gain: f64,
    /// Turns (counted from the latest) a compaction keeps verbatim; 0 keeps only the latest
    /// nodes. At most half of the surface (by bytes) is kept in any case.
    pub keep_recent_turns: usize,
    /// `max_tokens` of the summarize call.
    pub summary_max_tokens: u32,
    /// Bytes kept from the start of a trimmed tool result.
    pub trim_keep_head_bytes: usize,
    /// Bytes kept from the end of a trimmed tool result.
    pub trim_keep_tail_bytes: usize,
    /// Tool results up to this many bytes are never trimmed.
    pub trim_min_bytes: usize,
}

impl ContextConfig {
    /// Defaults for `model`: its known context window (1M tokens for the V4 models, 128K for the
    /// older ids and anything unknown), trim at 60 %, compact at 80 %, keep two turns.
    pub fn for_model(model: &str) -> ContextConfig {
        let window_tokens = if model.starts_with("deepseek-v4") { 1_048_576 } else { 131_072 };
        ContextConfig::with_window(window_tokens)
    }

    /// Defaults around an explicit window.
    pub fn with_window(window_tokens: u64) -> ContextConfig {
        ContextConfig {
            window_tokens,
            trim_at: 0.6,
            compact_at: 0.8,
            trim_min_gain: 0.05,
            keep_recent_turns: 2,
            summary_max_tokens: 4096,
            trim_keep_head_bytes: 2048,
            trim_keep_tail_bytes: 1024,
            trim_min_bytes: 8192,
        }
    }
}

/// Which [`ContextConfig`] a loop instance applies.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ContextPolicy {
    /// No automatic trimming or compaction.
    Off,
    /// [`ContextConfig::for_model`] of the model each request is about to use, so a session that
    /// switches models (or resumes with another one) is measured against the right window.
    #[default]
    ModelDefaults,
    /// This configuration, whatever the model.
    Fixed(ContextConfig),
}

impl ContextPolicy {
    /// The configuration for a request to `model`, or `None` when off.
    pub fn resolve(&self, model: &str) -> Option<ContextConfig> {
        match self {
            ContextPolicy::Off => None,
            ContextPolicy::ModelDefaults => Some(ContextConfig::for_model(model)),
            ContextPolicy::Fixed(config) => Some(config.clone()),
        }
    }
}

/// What context pressure calls for before the next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing.
    None,
    /// Trim these tool-result nodes (surface ids), in one batch.
    Trim(Vec<u64>),
    /// Replace surface nodes `start..=end` with a summary.
    Compact {
        /// Id of the first node replaced.
        start: u64,
        /// Id of the last node replaced.
        end: u64,
    },
}

/// How full the context is after the last finished step, from the log alone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pressure {
    /// Prompt plus output tokens of the last finished step (the provider's numbers).
    pub used: u64,
    /// `used` plus an estimate of what the next request adds besides the step's output: the
    /// tool results and messages logged since (bytes converted with the last request's own
    /// tokens-per-byte ratio).
    pub projected: u64,
    /// Whether that step was the first after a rewrite: its prompt already paid for one cache
    /// bust, so only an emergency may cause another before the cache recovers.
    pub after_rewrite: bool,
    /// Tokens per byte of the last request.
    pub tokens_per_byte: f64,
}

/// The pressure after the last finished step, or `None` when no step finished or the pressure
/// was already acted on: a `surface/replace` after the last `step/end`. A compaction attempt
/// that left only `compact/start` (it failed or was cancelled) is not retried before the next
/// step ends or the next turn starts.
pub fn pressure(session: &Session) -> Option<Pressure> {
    let events = session.events();
    let last_end = events.iter().rposition(|e| matches!(e.data, EventData::StepEnd(_)))?;
    let EventData::StepEnd(end) = &events[last_end].data else { return None };
    let usage = end.usage;
    let mut suppressed = false;
    for event in &events[last_end + 1..] {
        match &event.data {
            EventData::SurfaceReplace(_) => return None,
            EventData::CompactStart(_) => suppressed = true,
            EventData::TurnStart(_) => suppressed = false,
            _ => {}
        }
    }
    if suppressed {
        return None;
    }
    let step_start = events[..last_end]
        .iter()
        .rposition(|e| matches!(e.data, EventData::StepStart(_)))
        .unwrap_or(0);
    let previous_end = events[..step_start]
        .iter()
        .rposition(|e| matches!(e.data, EventData::StepEnd(_)))
        .unwrap_or(0);
    let after_rewrite = events[previous_end..step_start]
        .iter()
        .any(|e| matches!(e.data, EventData::SurfaceReplace(_)));
    // Nodes newer than the last request: its answer, the results, any new prompt.
    let step_start_seq = events[step_start].seq;
    let (mut new_bytes, mut new_non_assistant_bytes) = (0, 0);
    for node in session.surface().iter().filter(|node| node.id > step_start_seq) {
        let bytes = message_bytes(&node.message);
        new_bytes += bytes;
        if !matches!(*node.message, Message::Assistant(_)) {
            new_non_assistant_bytes += bytes;
        }
    }
    // The last request's exact length is in its `request/sent` record: no need to serialize the
    // request again (that would cost O(conversation) every step).
    let sent_bytes = events[step_start..last_end].iter().rev().find_map(|e| match &e.data {
        EventData::RequestSent(sent) => Some(sent.bytes as usize),
        _ => None,
    });
    let request_bytes = match sent_bytes {
        // Its images are there as base64 (a 3 MB image is 4 MB of body) but cost a provider
        // far fewer tokens: each counts as `IMAGE_BYTES_GUESS` bytes instead, as in
        // `message_bytes`, so that the ratio is the text's and new images are estimated alike.
        Some(bytes) => {
            let (count, encoded) = session
                .surface()
                .iter()
                .filter(|node| node.id <= step_start_seq)
                .flat_map(|node| match &*node.message {
                    Message::User { images, .. } | Message::Tool { images, .. } => &images[..],
                    _ => &[],
                })
                .fold((0, 0), |(count, encoded), image| {
                    (count + 1, encoded + (image.size as usize).div_ceil(3) * 4)
                });
            bytes.saturating_sub(encoded) + count * IMAGE_BYTES_GUESS
        }
        None => session
            .surface()
            .iter()
            .map(|n| message_bytes(&n.message))
            .sum::<usize>()
            .saturating_sub(new_bytes),
    }
    .max(1);
    let tokens_per_byte = usage.prompt_tokens as f64 / request_bytes as f64;
    let used = usage.prompt_tokens + usage.completion_tokens;
    let projected = used + (new_non_assistant_bytes as f64 * tokens_per_byte).ceil() as u64;
    Some(Pressure { used, projected, after_rewrite, tokens_per_byte })
}

/// Decides what context pressure calls for now, from the log alone.
///
/// With `p` the projected share of the window (see [`Pressure`]):
/// - right after a rewrite, only an emergency acts — a compaction when `p` is past halfway
///   between `compact_at` and the full window — so that the cache recovers on the next step;
/// - `p ≥ compact_at`: compact (or, with nothing to compact, trim what can be trimmed);
/// - `p ≥ trim_at`: trim every eligible result in one batch when that frees at least
///   `trim_min_gain` of the window; when even the trimmed projection stays at or above
///   `compact_at`, compact instead.
pub fn decide(session: &Session, config: &ContextConfig) -> Decision {
    let Some(pressure) = pressure(session) else { return Decision::None };
    let window = config.window_tokens as f64;
    let projected = pressure.projected as f64;
    let compact =
        || plan_compaction(session, config).map(|(start, end)| Decision::Compact { start, end });
    if pressure.after_rewrite {
        let emergency = (config.compact_at + 1.0) / 2.0 * window;
        return if projected >= emergency {
            compact().unwrap_or(Decision::None)
        } else {
            Decision::None
        };
    }
    if projected < config.trim_at * window {
        return Decision::None;
    }
    let trims = trim_candidates(session, config);
    let gain: f64 = trims
        .iter()
        .filter_map(|id| original_result(session, *id))
        .map(|result| {
            let trimmed = trim_content(&result.content, config).map_or(0, |text| text.len());
            result.content.len().saturating_sub(trimmed) as f64 * pressure.tokens_per_byte
        })
        .sum();
    if projected - gain >= config.compact_at * window
        && let Some(decision) = compact()
    {
        return decision;
    }
    let worth = gain >= config.trim_min_gain * window || projected >= config.compact_at * window;
    if !trims.is_empty() && worth {
        return Decision::Trim(trims);
    }
    Decision::None
}

/// What an image counts for in [`message_bytes`] and in a request's size: about 1,600 tokens'
/// worth of text (Anthropic's cost of an image at its largest, 1568 pixels on its long side;
/// providers count an image by its pixels, never by its file size — docs/images.md).
const IMAGE_BYTES_GUESS: usize = 6_400;

fn message_bytes(message: &Message) -> usize {
    match message {
        Message::System { content } => content.len(),
        // An image counts as a fixed guess of its share of the context, not by its file size
        // (providers bill an image by its pixels: about 1,600 tokens for a large one).
        Message::User { content, images } => content.len() + images.len() * IMAGE_BYTES_GUESS,
        Message::Tool { call_id, content, images } => {
            call_id.len() + content.len() + images.len() * IMAGE_BYTES_GUESS
        }
        Message::Assistant(assistant) => {
            assistant.content.len()
                + assistant.reasoning_content.as_ref().map_or(0, String::len)
                + assistant
                    .tool_calls
                    .iter()
                    .map(|call| call.id.len() + call.name.len() + call.arguments.len())
                    .sum::<usize>()
        }
    }
}

/// What a pressure check or a manual compaction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompactOutcome {
    /// Nothing was written.
    Unchanged {
        /// Why, for people.
        reason: String,
    },
    /// Tool results were trimmed.
    Trimmed {
        /// Seqs of the `surface/replace` events, one per result.
        seqs: Vec<u64>,
        /// Bytes cut in total.
        bytes_cut: usize,
    },
    /// Older nodes were replaced by a summary.
    Compacted {
        /// Seq of `compact/start`.
        start_seq: u64,
        /// Seq of the `surface/replace`: the summary node's id.
        replace_seq: u64,
        /// Surface nodes replaced.
        nodes: usize,
        /// Prompt tokens of the last request before the compaction.
        tokens_before: u64,
        /// Length of the summary in bytes.
        summary_bytes: usize,
    },
    /// The summarize call failed or was cancelled: only `compact/start` was logged and the
    /// surface is untouched.
    Failed {
        /// Seq of `compact/start`.
        start_seq: u64,
        /// What went wrong, for people.
        error: String,
        /// Whether it was a cancellation.
        cancelled: bool,
    },
}

/// The loop's pre-step hook: decides from the log and applies the decision by appending events.
/// `call` is the call config the next request starts from: the summarize call uses its model,
/// profile and wire format.
pub async fn relieve_pressure(
    provider: &DeepSeek,
    session: &SessionHandle,
    config: &ContextConfig,
    call: &LlmCallConfig,
    cancel: &CancellationToken,
) -> Result<CompactOutcome, AgentError> {
    let for_decision = config.clone();
    let decision = session.query(move |s| decide(s, &for_decision)).await?;
    match decision {
        Decision::None => Ok(CompactOutcome::Unchanged { reason: "no pressure".to_owned() }),
        Decision::Trim(ids) => trim(session, ids, config).await,
        Decision::Compact { start, end } => {
            compact_range(provider, session, start, end, "pressure", call, config, cancel).await
        }
    }
}

async fn trim(
    session: &SessionHandle,
    ids: Vec<u64>,
    config: &ContextConfig,
) -> Result<CompactOutcome, AgentError> {
    let for_events = config.clone();
    let (events, bytes_cut) = session
        .query(move |s| {
            let events = trim_events(s, &ids, &for_events);
            let before: usize =
                ids.iter().filter_map(|id| original_result(s, *id)).map(|r| r.content.len()).sum();
            let after: usize = events
                .iter()
                .map(|data| match data {
                    EventData::SurfaceReplace(SurfaceReplace {
                        node: SurfaceNode::ToolResult(result),
                        ..
                    }) => result.content.len(),
                    _ => 0,
                })
                .sum();
            (events, before.saturating_sub(after))
        })
        .await?;
    // Back to back, before the same step: one cache bust for the whole batch.
    let mut seqs = Vec::with_capacity(events.len());
    for data in events {
        seqs.push(session.append(data).await?.seq);
    }
    tracing::info!(results = seqs.len(), bytes_cut, "trimmed tool results");
    Ok(CompactOutcome::Trimmed { seqs, bytes_cut })
}

/// Compacts the session now, whatever the pressure (`dsh compact`, `session/compact`): the
/// older surface nodes are replaced by a summary made by `call`'s model (and profile).
pub async fn compact_now(
    provider: &DeepSeek,
    session: &SessionHandle,
    config: &ContextConfig,
    call: &LlmCallConfig,
    cancel: &CancellationToken,
) -> Result<CompactOutcome, AgentError> {
    let for_plan = config.clone();
    let Some((start, end)) = session.query(move |s| plan_compaction(s, &for_plan)).await? else {
        return Ok(CompactOutcome::Unchanged {
            reason: "nothing to compact: the surface holds only the turns kept verbatim".to_owned(),
        });
    };
    compact_range(provider, session, start, end, "manual", call, config, cancel).await
}

#[allow(clippy::too_many_arguments)]
async fn compact_range(
    provider: &DeepSeek,
    session: &SessionHandle,
    start: u64,
    end: u64,
    reason: &str,
    call: &LlmCallConfig,
    config: &ContextConfig,
    cancel: &CancellationToken,
) -> Result<CompactOutcome, AgentError> {
    let max_tokens = config.summary_max_tokens;
    let (call_owned, for_request) = (call.clone(), config.clone());
    let (request, tokens_before, nodes) = session
        .query(move |s| {
            let request = summarize_request(s, start, end, &call_owned, max_tokens, &for_request);
            let tokens_before = s
                .events()
                .iter()
                .rev()
                .find_map(|e| match &e.data {
                    EventData::StepEnd(end) => Some(end.usage.prompt_tokens),
                    _ => None,
                })
                .unwrap_or(0);
            let first = s.surface().iter().position(|node| node.id == start);
            let last = s.surface().iter().position(|node| node.id == end);
            let nodes = match (first, last) {
                (Some(a), Some(b)) if a <= b => b - a + 1,
                _ => 0,
            };
            (request, tokens_before, nodes)
        })
        .await?;
    let Some(request) = request else {
        return Ok(CompactOutcome::Unchanged {
            reason: format!("surface nodes {start}..={end} are not on the surface"),
        });
    };
    let started = CompactStart { reason: reason.to_owned(), tokens_before };
    let start_seq = session.append(EventData::CompactStart(started)).await?.seq;

    let summary = match summarize(provider, &request, cancel).await {
        Ok(summary) => summary,
        Err((error, cancelled)) => {
            // Only `compact/start` is logged: the surface is untouched and the next request is
            // built exactly as it would have been without the attempt.
            tracing::warn!(%error, cancelled, start_seq, "compaction abandoned");
            return Ok(CompactOutcome::Failed { start_seq, error, cancelled });
        }
    };
    if !session.query(move |s| s.can_replace(start, end)).await? {
        let error = format!("surface nodes {start}..={end} changed during the summarize call");
        tracing::warn!(%error, start_seq, "compaction abandoned");
        return Ok(CompactOutcome::Failed { start_seq, error, cancelled: false });
    }
    let summary_bytes = summary.len();
    let logged = CompactSummary {
        model: call.model.clone(),
        profile: call.profile.clone(),
        wire: call.wire.clone(),
        max_tokens,
        summary: summary.clone(),
    };
    session.append(EventData::CompactSummary(logged)).await?;
    let replace = SurfaceReplace { start, end, node: SurfaceNode::Summary { text: summary } };
    let replace_seq = session.append(EventData::SurfaceReplace(replace)).await?.seq;
    tracing::info!(start_seq, replace_seq, nodes, tokens_before, "compacted the surface");
    Ok(CompactOutcome::Compacted { start_seq, replace_seq, nodes, tokens_before, summary_bytes })
}

/// Runs the summarize one-shot; the error carries whether it was a cancellation.
async fn summarize(
    provider: &DeepSeek,
    request: &GenerateRequest,
    cancel: &CancellationToken,
) -> Result<String, (String, bool)> {
    let body = wire_body(request);
    let mut stream = provider.stream(body, cancel.child_token());
    let mut assembler = MessageAssembler::new();
    loop {
        // `next` returns `Cancelled` as soon as the token is cancelled.
        match stream.next().await {
            Some(Ok(StreamEvent::Delta(delta))) => assembler.push(&delta),
            Some(Ok(StreamEvent::Retry { attempt, error, .. })) => {
                tracing::warn!(attempt, %error, "summarize call retried");
            }
            Some(Ok(StreamEvent::Finish { .. })) => break,
            Some(Err(error)) => return Err((error.to_string(), cancel.is_cancelled())),
            None => {
                return Err(("the summarize stream ended without a finish".to_owned(), false));
            }
        }
    }
    let summary = assembler.finish().content.trim().to_owned();
    if summary.is_empty() {
        return Err(("the summarize call returned an empty summary".to_owned(), false));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests;

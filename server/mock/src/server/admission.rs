//! Admission (docs/mock.md, "Validation"): the checks in order — key, syntax, types,
//! semantics, context, balance, concurrency, faults — and, for a request that passes them all,
//! its whole answer decided under the state lock ([`Admitted`]).
//!
//! A key holds at most its configured number of requests in flight: an admitted request takes a
//! slot, and its [`InflightGuard`] gives it back when the response ends, however it ends.

use std::sync::Arc;

use axum::http::HeaderMap;
use tokio::time::Instant;

use super::answer::{generate, namespace_of, output_segments};
use super::auth::{authenticate, authenticate_messages};
use super::{Shared, Surface};
use crate::cache::Namespace;
use crate::error::ApiError;
use crate::fault::Fault;
use crate::knobs::MockConfig;
use crate::messages::{self, Flavor, MessagesUsage};
use crate::render;
use crate::request::{self, ChatRequest};
use crate::response::{Output, Usage};
use crate::script::Plan;
use crate::state::lock;
use crate::tokenizer::{self, Token};

/// A chat request past validation steps 2–5: parsed, checked, rendered and tokenized.
pub(super) struct Validated {
    pub(super) request: ChatRequest,
    pub(super) segments: Vec<tokenizer::Segment>,
    pub(super) prompt: Vec<Token>,
}

/// Validation steps 2–5 (docs/mock.md, "Validation"): syntax, types, semantics, then the
/// rendered prompt against the model's context and maximum output. Touches no state.
pub(super) fn validate(body: &[u8], config: &MockConfig) -> Result<Validated, ApiError> {
    validate_context(request::parse(body, config)?)
}

/// Validation step 5: the rendered prompt against the model's context and maximum output.
fn validate_context(request: ChatRequest) -> Result<Validated, ApiError> {
    let segments = render::render(&request);
    let prompt = tokenizer::tokenize(&segments);
    let prompt_tokens = prompt.len() as u64;
    let requested = request.max_tokens.unwrap_or(0);
    // `max_tokens` is any u64 the client sent: the sum saturates rather than overflow (a
    // request near u64::MAX is over any context all the same).
    let total = prompt_tokens.saturating_add(requested);
    if total > request.model.context {
        return Err(ApiError::invalid(format!(
            "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the messages, {} in the completion). Please reduce the length of the messages or completion.",
            request.model.context, total, prompt_tokens, requested
        )));
    }
    if requested > request.model.max_output {
        return Err(ApiError::invalid(format!(
            "Invalid max_tokens value, the valid range of max_tokens is [1, {}]",
            request.model.max_output
        )));
    }
    Ok(Validated { request, segments, prompt })
}

/// Releases the key's concurrency slot when the response ends, however it ends.
pub(super) struct InflightGuard {
    shared: Arc<Shared>,
    pub(super) key: String,
    seq: u64,
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        if let Some(count) = state.inflight.get_mut(&self.key) {
            *count = count.saturating_sub(1);
        }
        if let Some(record) = state.record_mut(self.seq)
            && record.outcome == "in_progress"
        {
            record.outcome = "aborted".to_owned();
        }
    }
}

/// An admitted request: everything the producer needs.
pub(super) struct Admitted {
    pub(super) surface: Surface,
    /// The Messages usage (Messages surfaces only).
    pub(super) messages_usage: MessagesUsage,
    /// The breakpoints' token positions (Anthropic's Messages endpoint only).
    pub(super) breakpoints: Vec<u64>,
    pub(super) request: ChatRequest,
    pub(super) fault: Fault,
    pub(super) plan: Plan,
    pub(super) output: Output,
    pub(super) namespace: Namespace,
    pub(super) prompt: Vec<Token>,
    pub(super) completed: Vec<Token>,
    pub(super) cost: i128,
    pub(super) guard: InflightGuard,
}

/// Runs the validation checks (docs/mock.md, "Validation") and decides the whole answer.
pub(super) fn admit(
    shared: &Arc<Shared>,
    seq: u64,
    headers: &HeaderMap,
    body: &[u8],
    surface: Surface,
) -> Result<Admitted, (ApiError, &'static str)> {
    let config = &shared.config;
    let rejected = |error| (error, "rejected");
    let (key, Validated { request, segments, prompt }, breakpoints) = match surface {
        Surface::Chat => {
            let key = authenticate(shared, headers).map_err(rejected)?.to_owned();
            (key, validate(body, config).map_err(rejected)?, Vec::new())
        }
        Surface::Messages(flavor) => {
            let key = authenticate_messages(shared, headers, flavor).map_err(rejected)?.to_owned();
            let parsed = messages::parse(body, config, flavor).map_err(rejected)?;
            let validated = validate_context(parsed.chat).map_err(rejected)?;
            (key, validated, parsed.breakpoints)
        }
    };
    let prompt_tokens = prompt.len() as u64;
    let key_config = config.keys.iter().find(|configured| configured.key == key);
    let limit = key_config.map_or(0, |configured| configured.concurrency);

    let mut state = lock(&shared.state);
    if let Some(record) = state.record_mut(seq) {
        record.segments = segments.iter().map(ToString::to_string).collect();
        record.prompt_tokens = prompt_tokens;
    }
    if state.balances.get(&key).copied().unwrap_or(0) <= 0 {
        return Err(rejected(ApiError::new(
            402,
            "Insufficient Balance",
            "unknown_error",
            Some("unknown_error"),
        )));
    }
    let inflight = state.inflight.entry(key.clone()).or_insert(0);
    if *inflight >= limit {
        return Err(rejected(ApiError::new(
            429,
            "Rate Limit Reached",
            "rate_limit_error",
            Some("rate_limit_error"),
        )));
    }
    *inflight += 1;
    let guard = InflightGuard { shared: Arc::clone(shared), key: key.clone(), seq };

    let fault = match state.faults.front() {
        Some(fault) if fault.sticky => fault.clone(),
        Some(_) => state.faults.pop_front().unwrap_or_default(),
        None => Fault::default(),
    };
    if let Some(http) = &fault.http {
        let mut error = ApiError::for_status(http.status);
        if let Some(message) = &http.message {
            error.message.clone_from(message);
        }
        if let Some(kind) = &http.kind {
            error.kind.clone_from(kind);
            error.code = Some(kind.clone());
        }
        error.retry_after = http.retry_after;
        drop(state);
        drop(guard);
        return Err((error, "fault_http"));
    }

    let script_index =
        state.scripts.iter().position(|script| script.matcher.matches(&request, seq));
    let plan = match script_index {
        Some(index) => Plan::from_script(state.scripts.remove(index), &request),
        None => Plan::from_request(&request),
    };
    let (mut output, completion_tokens, reasoning_tokens) =
        generate(&request, &plan, &fault, &mut state.ids, config.created);
    let namespace = namespace_of(config, &key, &request);
    let now = Instant::now();
    // Anthropic's endpoint reads the longest cached prefix up to its last breakpoint and writes
    // the rest up to there; the others read whole blocks of any earlier prefix (docs/mock.md).
    let (hit, cache_creation) = match surface {
        Surface::Messages(Flavor::Anthropic) => {
            let last = breakpoints.last().copied().unwrap_or(0);
            let read = state.cache.breakpoint_hit(&config.cache, &namespace, &prompt, last, now);
            (read, last.saturating_sub(read))
        }
        _ => (state.cache.hit(&config.cache, &namespace, &prompt, now), 0),
    };
    let miss = prompt_tokens - hit;
    if let Surface::Messages(_) = surface {
        for call in &mut output.tool_calls {
            call.id = call.id.replacen("call_", "toolu_", 1);
        }
    }
    let messages_usage = MessagesUsage {
        input: miss.saturating_sub(cache_creation),
        cache_creation,
        cache_read: hit,
        output: completion_tokens,
    };
    let usage = Usage::new(hit, miss, completion_tokens, reasoning_tokens);
    let cost = shared.rates.cost(hit, miss, completion_tokens);
    let output = Output { usage: usage.to_value(plan.usage_override.as_ref()), ..output };
    if let Some(record) = state.record_mut(seq) {
        record.hit = hit;
        record.miss = miss;
        record.completion_tokens = completion_tokens;
        record.status = 200;
    }
    drop(state);

    let mut completed = prompt.clone();
    completed.extend(tokenizer::tokenize(&output_segments(&request, &output)));
    Ok(Admitted {
        surface,
        messages_usage,
        breakpoints,
        request,
        fault,
        plan,
        output,
        namespace,
        prompt,
        completed,
        cost,
        guard,
    })
}

//! The HTTP surface: routes, the chat-completion pipeline and the stream producer.
//!
//! A chat request goes through the validation checks in order (docs/mock.md, "Validation": auth,
//! syntax, types, semantics, context, balance, concurrency, faults). An admitted request gets its
//! whole answer decided up front under the state lock — plan, ids, usage — so the same request
//! sequence always gives the same bytes. A spawned producer task then paces the bytes into the
//! response body through a small channel; it watches the shutdown signal and the client going
//! away, and it does the cache persistence at the moments docs/mock.md names ("Prefix-cache
//! accounting": first data frame, `[DONE]`).

use std::io;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::{Duration, Instant};

use crate::cache::Namespace;
use crate::error::ApiError;
use crate::fault::Fault;
use crate::knobs::MockConfig;
use crate::messages::{self, Flavor, MessagesUsage};
use crate::render;
use crate::request::{self, ChatRequest, Message, Role, ToolCall};
use crate::response::{OutCall, Output, Usage, truncate_pieces};
use crate::script::{Plan, Script};
use crate::state::{RecordedRequest, State as MockState, format_amount, lock};
use crate::tokenizer::{self, Token};

/// What every handler shares.
pub(crate) struct Shared {
    pub config: MockConfig,
    pub rates: crate::state::Rates,
    pub state: std::sync::Mutex<MockState>,
    pub shutdown: watch::Receiver<bool>,
}

/// The largest accepted request body.
const BODY_LIMIT: usize = 256 * 1024 * 1024;

/// Builds the router with every endpoint (docs/mock.md, "Endpoints").
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/chat/completions", post(chat))
        .route("/v1/chat/completions", post(chat))
        .route("/beta/chat/completions", post(chat))
        .route("/v1/messages", post(messages_anthropic))
        .route("/anthropic/v1/messages", post(messages_deepseek))
        .route("/models", get(models))
        .route("/v1/models", get(models))
        .route("/user/balance", get(balance))
        .route("/_fake/script", post(add_scripts))
        .route("/_fake/fault", post(add_faults))
        .route("/_fake/requests", get(list_requests))
        .route("/_fake/cache", get(cache_view))
        .route("/_fake/cache/clear", post(cache_clear))
        .route("/_fake/cache/miss-next", post(cache_miss_next))
        .route("/_fake/reset", post(reset))
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(shared)
}

async fn not_found(method: Method, uri: Uri) -> Response {
    ApiError::not_found(method.as_str(), uri.path()).into_response()
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    let mut response = (status, value.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The bearer token of the request, or `""`.
fn bearer(headers: &HeaderMap) -> &str {
    let value =
        headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()).unwrap_or("");
    let value = value.trim();
    match value.split_once(' ') {
        Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") => key.trim(),
        _ => "",
    }
}

/// Step 1 of the validation (docs/mock.md, "Validation"): the key must be configured.
fn authenticate<'a>(shared: &Shared, headers: &'a HeaderMap) -> Result<&'a str, ApiError> {
    let key = bearer(headers);
    if shared.config.keys.iter().any(|configured| configured.key == key) {
        Ok(key)
    } else {
        Err(ApiError::unauthorized(key))
    }
}

/// The `x-api-key` of a Messages request (DeepSeek's endpoint also takes a bearer token).
fn messages_key(headers: &HeaderMap, flavor: Flavor) -> &str {
    match headers.get("x-api-key").and_then(|value| value.to_str().ok()) {
        Some(key) => key.trim(),
        None if flavor == Flavor::DeepSeek => bearer(headers),
        None => "",
    }
}

/// Step 1 for a Messages request: the key, then (Anthropic's endpoint) the version header.
fn authenticate_messages<'a>(
    shared: &Shared,
    headers: &'a HeaderMap,
    flavor: Flavor,
) -> Result<&'a str, ApiError> {
    let key = messages_key(headers, flavor);
    if !shared.config.keys.iter().any(|configured| configured.key == key) {
        return Err(ApiError::new(401, "invalid x-api-key", "authentication_error", None));
    }
    if flavor == Flavor::Anthropic {
        match headers.get("anthropic-version").and_then(|value| value.to_str().ok()) {
            None => {
                return Err(ApiError::new(
                    400,
                    "anthropic-version: header is required",
                    "invalid_request_error",
                    None,
                ));
            }
            Some(version) if version != messages::VERSION => {
                return Err(ApiError::new(
                    400,
                    format!("anthropic-version: unsupported version {version:?}"),
                    "invalid_request_error",
                    None,
                ));
            }
            Some(_) => {}
        }
    }
    Ok(key)
}

fn redact(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let last4: String = chars[chars.len().saturating_sub(4)..].iter().collect();
    format!("****{last4}")
}

async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(error) = authenticate(&shared, &headers) {
        return error.into_response();
    }
    let data: Vec<Value> = shared
        .config
        .models
        .iter()
        .map(|model| json!({"id": model.id, "object": "model", "owned_by": "deepseek"}))
        .collect();
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

async fn balance(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let key = match authenticate(&shared, &headers) {
        Ok(key) => key,
        Err(error) => return error.into_response(),
    };
    let amount = lock(&shared.state).balances.get(key).copied().unwrap_or(0);
    let total = format_amount(amount);
    json_response(
        StatusCode::OK,
        &json!({
            "is_available": amount > 0,
            "balance_infos": [{
                "currency": "CNY",
                "total_balance": total,
                "granted_balance": "0.00",
                "topped_up_balance": total,
            }],
        }),
    )
}

/// Parses a control body that is either one object or an array of them.
fn one_or_many<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<Vec<T>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|error| {
        ApiError::invalid(format!("Failed to parse the request body as JSON: {error}"))
    })?;
    let items = match value {
        Value::Array(items) => items,
        other => vec![other],
    };
    items
        .into_iter()
        .map(|item| {
            serde_json::from_value(item).map_err(|error| ApiError::invalid(error.to_string()))
        })
        .collect()
}

async fn add_scripts(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    match one_or_many::<Script>(&body) {
        Ok(scripts) => {
            let mut state = lock(&shared.state);
            state.scripts.extend(scripts);
            let queued = state.scripts.len();
            drop(state);
            json_response(StatusCode::OK, &json!({"queued": queued}))
        }
        Err(error) => error.into_response(),
    }
}

async fn add_faults(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    match one_or_many::<Fault>(&body) {
        Ok(faults) => {
            let mut state = lock(&shared.state);
            state.faults.extend(faults);
            let queued = state.faults.len();
            drop(state);
            json_response(StatusCode::OK, &json!({"queued": queued}))
        }
        Err(error) => error.into_response(),
    }
}

async fn list_requests(State(shared): State<Arc<Shared>>) -> Response {
    let records: Vec<Value> =
        lock(&shared.state).requests.iter().map(RecordedRequest::to_json).collect();
    json_response(StatusCode::OK, &Value::Array(records))
}

async fn cache_view(State(shared): State<Arc<Shared>>) -> Response {
    let snapshot = lock(&shared.state).cache.snapshot(Instant::now());
    json_response(StatusCode::OK, &snapshot)
}

async fn cache_clear(State(shared): State<Arc<Shared>>) -> Response {
    lock(&shared.state).cache.clear();
    json_response(StatusCode::OK, &json!({"cleared": true}))
}

async fn cache_miss_next(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let count = if body.iter().all(u8::is_ascii_whitespace) {
        1
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(value) => value.get("count").and_then(Value::as_u64).unwrap_or(1),
            Err(error) => {
                return ApiError::invalid(format!(
                    "Failed to parse the request body as JSON: {error}"
                ))
                .into_response();
            }
        }
    };
    lock(&shared.state).cache.arm_miss_next(count);
    json_response(StatusCode::OK, &json!({"miss_next": count}))
}

async fn reset(State(shared): State<Arc<Shared>>) -> Response {
    match MockState::new(&shared.config) {
        Ok(fresh) => {
            *lock(&shared.state) = fresh;
            json_response(StatusCode::OK, &json!({"reset": true}))
        }
        Err(error) => ApiError::new(500, error.to_string(), "server_error", None).into_response(),
    }
}

/// Releases the key's concurrency slot when the response ends, however it ends.
struct InflightGuard {
    shared: Arc<Shared>,
    key: String,
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
struct Admitted {
    surface: Surface,
    /// The Messages usage (Messages surfaces only).
    messages_usage: MessagesUsage,
    /// The breakpoints' token positions (Anthropic's Messages endpoint only).
    breakpoints: Vec<u64>,
    request: ChatRequest,
    fault: Fault,
    plan: Plan,
    output: Output,
    namespace: Namespace,
    prompt: Vec<Token>,
    completed: Vec<Token>,
    cost: i128,
    guard: InflightGuard,
}

/// The API a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// Chat completions.
    Chat,
    /// Anthropic Messages, on Anthropic's or DeepSeek's endpoint.
    Messages(Flavor),
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(shared, &method, &uri, &headers, &body, Surface::Chat)
}

async fn messages_anthropic(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(shared, &method, &uri, &headers, &body, Surface::Messages(Flavor::Anthropic))
}

async fn messages_deepseek(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(shared, &method, &uri, &headers, &body, Surface::Messages(Flavor::DeepSeek))
}

fn serve(
    shared: Arc<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    surface: Surface,
) -> Response {
    let seq = record_arrival(&shared, method, uri, headers, body);
    match admit(&shared, seq, headers, body, surface) {
        Ok(admitted) => respond(shared, seq, admitted),
        Err((error, outcome)) => {
            let mut state = lock(&shared.state);
            if let Some(record) = state.record_mut(seq) {
                record.status = error.status;
                record.outcome = outcome.to_owned();
            }
            drop(state);
            match surface {
                Surface::Chat => error.into_response(),
                Surface::Messages(_) => {
                    let status = StatusCode::from_u16(error.status)
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    let mut response = json_response(status, &messages::error_body(&error));
                    if let Some(seconds) = error.retry_after {
                        response
                            .headers_mut()
                            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                    }
                    response
                }
            }
        }
    }
}

fn record_arrival(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> u64 {
    let recorded_headers = headers
        .iter()
        .map(|(name, value)| {
            let value = if *name == header::AUTHORIZATION {
                format!("Bearer {}", redact(bearer(headers)))
            } else if name.as_str() == "x-api-key" {
                redact(&String::from_utf8_lossy(value.as_bytes()))
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            (name.as_str().to_owned(), value)
        })
        .collect();
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        parsed.as_ref().and_then(|value| value.get(name)).and_then(Value::as_str).map(str::to_owned)
    };
    let mut state = lock(&shared.state);
    let seq = state.requests.len() as u64 + 1;
    state.requests.push(RecordedRequest {
        seq,
        method: method.as_str().to_owned(),
        path: uri.path().to_owned(),
        headers: recorded_headers,
        body: body.to_vec(),
        model: field("model"),
        user_id: field("user_id"),
        segments: Vec::new(),
        prompt_tokens: 0,
        hit: 0,
        miss: 0,
        completion_tokens: 0,
        status: 0,
        outcome: "in_progress".to_owned(),
    });
    seq
}

/// A chat request past validation steps 2–5: parsed, checked, rendered and tokenized.
pub(crate) struct Validated {
    pub request: ChatRequest,
    pub segments: Vec<tokenizer::Segment>,
    pub prompt: Vec<Token>,
}

/// Validation steps 2–5 (docs/mock.md, "Validation"): syntax, types, semantics, then the
/// rendered prompt against the model's context and maximum output. Touches no state.
pub(crate) fn validate(body: &[u8], config: &MockConfig) -> Result<Validated, ApiError> {
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

/// The answer a fresh mock gives to `body`, without a key, state, cache or faults: validation
/// steps 2–5, then the scripted-less plan (directives or echo) and its output. Returns the
/// prompt's and the completion's token counts.
pub(crate) fn answer_without_state(
    body: &[u8],
    config: &MockConfig,
) -> Result<(u64, u64), ApiError> {
    let Validated { request, prompt, .. } = validate(body, config)?;
    let plan = Plan::from_request(&request);
    let mut ids = crate::state::IdGen::new(config.seed);
    let (_output, completion_tokens, _reasoning_tokens) =
        generate(&request, &plan, &Fault::default(), &mut ids, config.created);
    Ok((prompt.len() as u64, completion_tokens))
}

/// Runs the validation checks (docs/mock.md, "Validation") and decides the whole answer.
fn admit(
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

/// The configured namespace components of a request.
fn namespace_of(config: &MockConfig, key: &str, request: &ChatRequest) -> Namespace {
    config
        .cache
        .namespace
        .iter()
        .map(|component| {
            let value = match component.as_str() {
                "key" => key.to_owned(),
                "user_id" => request.user_id.clone().unwrap_or_default(),
                "model" => request.model.id.clone(),
                "max_tokens" => request.max_tokens.map(|max| max.to_string()).unwrap_or_default(),
                "stream" => request.stream.to_string(),
                _ => String::new(),
            };
            (component.clone(), value)
        })
        .collect()
}

/// The answer as the next request renders it when replayed faithfully (docs/mock.md,
/// "Prefix-cache accounting").
fn output_segments(request: &ChatRequest, output: &Output) -> Vec<tokenizer::Segment> {
    let message = Message {
        role: Role::Assistant,
        content: Some(output.content.clone()),
        reasoning_content: Some(output.reasoning.clone()),
        tool_calls: output
            .tool_calls
            .iter()
            .map(|call| ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            })
            .collect(),
        tool_call_id: None,
    };
    let mut segments = Vec::new();
    render::push_assistant(
        &message,
        request.thinking,
        request.thinking && request.has_tools(),
        &mut segments,
    );
    segments
}

/// Applies the token budget and the finish reason, draws ids, and counts completion tokens.
fn generate(
    request: &ChatRequest,
    plan: &Plan,
    fault: &Fault,
    ids: &mut crate::state::IdGen,
    created: u64,
) -> (Output, u64, u64) {
    let mut reasoning = if request.thinking { plan.reasoning.clone() } else { String::new() };
    let mut content = plan.content.clone();
    let mut calls = plan.tool_calls.clone();
    let mut finish = plan.finish_reason.clone();
    if let Some(budget) = request.max_tokens {
        let wanted = tokenizer::count(&reasoning) + tokenizer::count(&content);
        if wanted > budget {
            let (kept_reasoning, used) = truncate_pieces(&reasoning, budget);
            let (kept_content, _) = truncate_pieces(&content, budget - used);
            reasoning = kept_reasoning;
            content = kept_content;
            calls.clear();
            finish = Some("length".to_owned());
        }
    }
    let finish = fault.finish_reason.clone().or(finish).unwrap_or_else(|| {
        if calls.is_empty() { "stop".to_owned() } else { "tool_calls".to_owned() }
    });
    let id = ids.hex32();
    let tool_calls: Vec<OutCall> = calls
        .into_iter()
        .enumerate()
        .map(|(index, call)| OutCall {
            id: format!("call_{index:02}_{}", ids.alnum(24)),
            name: call.name,
            arguments: call.arguments,
        })
        .collect();
    let reasoning_tokens = tokenizer::count(&reasoning);
    let completion_tokens = reasoning_tokens
        + tokenizer::count(&content)
        + tool_calls
            .iter()
            .map(|call| tokenizer::count(&format!("{}\n{}", call.name, call.arguments)))
            .sum::<u64>()
        + 1;
    let output = Output {
        id,
        created,
        model: request.model.id.clone(),
        thinking: request.thinking,
        reasoning,
        content,
        tool_calls,
        finish_reason: finish,
        usage: Value::Null,
    };
    (output, completion_tokens, reasoning_tokens)
}

/// Starts the producer task and returns the streaming response.
fn respond(shared: Arc<Shared>, seq: u64, admitted: Admitted) -> Response {
    let (sender, mut receiver) = mpsc::channel::<Result<Bytes, io::Error>>(16);
    let stream_mode = admitted.request.stream;
    let request_id = admitted.output.id.clone();
    let persist_delay = Duration::from_millis(
        admitted.fault.persist_delay_ms.unwrap_or(shared.config.cache.persist_delay_ms),
    );
    let producer = Producer {
        shutdown: shared.shutdown.clone(),
        shared,
        sender,
        seq,
        persist_delay,
        malformed: false,
        admitted,
    };
    tokio::spawn(producer.run());
    let stream = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx));
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    let content_type = if stream_mode {
        HeaderValue::from_static("text/event-stream; charset=utf-8")
    } else {
        HeaderValue::from_static("application/json")
    };
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        headers.insert("x-request-id", value);
    }
    response
}

/// Why a producer stopped early.
enum Stop {
    /// The client went away (the response body was dropped).
    Gone,
    /// The server is shutting down.
    Shutdown,
}

/// Paces one response into the body channel.
struct Producer {
    shared: Arc<Shared>,
    sender: mpsc::Sender<Result<Bytes, io::Error>>,
    shutdown: watch::Receiver<bool>,
    seq: u64,
    persist_delay: Duration,
    malformed: bool,
    admitted: Admitted,
}

/// Resolves once shutdown has been requested (or the server is gone).
async fn shutdown_requested(shutdown: &mut watch::Receiver<bool>) {
    // An error means the sender is gone, which also means shutdown.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

impl Producer {
    async fn run(mut self) {
        let result =
            if self.admitted.request.stream { self.stream().await } else { self.whole().await };
        match result {
            Ok(()) => {}
            Err(Stop::Gone) => self.set_outcome("aborted"),
            Err(Stop::Shutdown) => {
                self.set_outcome("shutdown");
                let _ = self.sender.try_send(Err(io::Error::other("mock server shutting down")));
            }
        }
    }

    fn set_outcome(&self, outcome: &str) {
        let mut state = lock(&self.shared.state);
        if let Some(record) = state.record_mut(self.seq)
            && record.outcome == "in_progress"
        {
            record.outcome = outcome.to_owned();
        }
    }

    fn line_end(&self) -> &'static str {
        if self.admitted.fault.crlf { "\r\n" } else { "\n" }
    }

    /// Waits `ms` milliseconds unless the server stops or the client leaves first.
    async fn pause(&mut self, ms: u64) -> Result<(), Stop> {
        if ms == 0 {
            return Ok(());
        }
        tokio::select! {
            // Cancel-safe: a sleep holds no state beyond its deadline.
            () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(()),
            // Cancel-safe: `wait_for` only observes the watch channel.
            () = shutdown_requested(&mut self.shutdown) => Err(Stop::Shutdown),
            // Cancel-safe: `closed` only observes the channel.
            () = self.sender.closed() => Err(Stop::Gone),
        }
    }

    /// Sends one item to the body unless the server stops first.
    async fn send(&mut self, bytes: Bytes) -> Result<(), Stop> {
        tokio::select! {
            // Not cancel-safe (the item is lost if cancelled), which is fine: cancelling means
            // the response is being abandoned anyway.
            sent = self.sender.send(Ok(bytes)) => sent.map_err(|_| Stop::Gone),
            // Cancel-safe: `wait_for` only observes the watch channel.
            () = shutdown_requested(&mut self.shutdown) => Err(Stop::Shutdown),
        }
    }

    /// Writes `text`, in tiny pieces that split characters and lines under `split_utf8`.
    async fn write(&mut self, text: String) -> Result<(), Stop> {
        if !self.admitted.fault.split_utf8 {
            return self.send(Bytes::from(text)).await;
        }
        let bytes = Bytes::from(text);
        let mut start = 0;
        for (index, byte) in bytes.iter().enumerate() {
            // Cut right after the lead byte of every multi-byte character, every 7 bytes, and
            // between the two line ends that close a frame.
            let cut = *byte >= 0xC0 || (index + 1) % 7 == 0 || index + 2 == bytes.len();
            if cut && index + 1 < bytes.len() {
                self.send(bytes.slice(start..index + 1)).await?;
                tokio::task::yield_now().await;
                start = index + 1;
            }
        }
        if start < bytes.len() {
            self.send(bytes.slice(start..)).await?;
        }
        // A short pause makes the pieces leave in separate writes.
        self.pause(1).await
    }

    async fn keepalive_comment(&mut self) -> Result<(), Stop> {
        let end = self.line_end();
        let text = if self.admitted.request.stream {
            format!(": keep-alive{end}{end}")
        } else {
            end.to_owned()
        };
        self.write(text).await
    }

    /// Keep-alive lines every `every_ms` for `for_ms`.
    async fn keepalive_for(&mut self, every_ms: u64, for_ms: u64) -> Result<(), Stop> {
        let every_ms = every_ms.max(1);
        let mut elapsed = 0;
        while elapsed < for_ms {
            self.keepalive_comment().await?;
            let step = every_ms.min(for_ms - elapsed);
            self.pause(step).await?;
            elapsed += step;
        }
        Ok(())
    }

    /// The queue phase, scripted keep-alives and delay before inference starts.
    async fn before_first_frame(&mut self) -> Result<(), Stop> {
        if let Some(for_ms) = self.admitted.fault.queue_keepalive_ms {
            let every = self
                .admitted
                .fault
                .keepalive_every_ms
                .unwrap_or(self.shared.config.stream.queue_keepalive_interval_ms);
            self.keepalive_for(every, for_ms).await?;
        }
        let keepalive = self.admitted.plan.keepalive;
        for _ in 0..keepalive.count {
            self.pause(keepalive.interval_ms).await?;
            self.keepalive_comment().await?;
        }
        self.pause(self.admitted.plan.delay_ms).await
    }

    fn persist_input(&self) {
        let config = &self.shared.config.cache;
        let mut state = lock(&self.shared.state);
        if self.admitted.surface == Surface::Messages(Flavor::Anthropic) {
            state.cache.persist_breakpoints(
                &self.admitted.namespace,
                &self.admitted.prompt,
                &self.admitted.breakpoints,
                Instant::now(),
                self.persist_delay,
            );
            return;
        }
        state.cache.persist_input(
            config,
            &self.admitted.namespace,
            &self.admitted.prompt,
            Instant::now(),
            self.persist_delay,
        );
    }

    /// Success: output units, balance, outcome. Runs before the last bytes are handed over so
    /// a client that has seen `[DONE]` always sees the effects.
    fn complete(&self) {
        let config = &self.shared.config.cache;
        let mut state = lock(&self.shared.state);
        // Anthropic's cache holds only what a breakpoint marked: an answer is cached when the
        // next request marks it.
        let anthropic = self.admitted.surface == Surface::Messages(Flavor::Anthropic);
        if !self.malformed && !anthropic {
            state.cache.persist_output(
                config,
                &self.admitted.namespace,
                &self.admitted.completed,
                Instant::now(),
                self.persist_delay,
            );
        }
        let key = self.admitted.guard.key.clone();
        if let Some(balance) = state.balances.get_mut(&key) {
            *balance -= self.admitted.cost;
        }
        if let Some(record) = state.record_mut(self.seq) {
            record.outcome = if self.malformed { "malformed" } else { "ok" }.to_owned();
        }
    }

    /// Aborts the connection without a proper end of body.
    async fn abort(&mut self, outcome: &str) -> Result<(), Stop> {
        self.set_outcome(outcome);
        // hyper drops its unflushed write buffer when the body fails, so first let it take every
        // queued frame and flush it (it flushes whenever the body has nothing ready).
        while self.sender.capacity() < self.sender.max_capacity() {
            self.pause(1).await?;
        }
        self.pause(10).await?;
        tokio::select! {
            // Not cancel-safe, but losing the error item only happens when stopping anyway.
            _ = self.sender.send(Err(io::Error::other(format!("mock fault: {outcome}")))) => Ok(()),
            // Cancel-safe: `wait_for` only observes the watch channel.
            () = shutdown_requested(&mut self.shutdown) => Err(Stop::Shutdown),
        }
    }

    /// Checks the frame-count faults before data frame `number` (counting from 1). Returns
    /// `true` when the stream has been ended by a fault.
    async fn frame_faults(&mut self, number: u64) -> Result<bool, Stop> {
        let fault = self.admitted.fault.clone();
        if fault.drop_after_frames.is_some_and(|after| number > after) {
            self.abort("dropped").await?;
            return Ok(true);
        }
        if fault.stall_after_frames.is_some_and(|after| number > after) {
            let every = fault.keepalive_every_ms.unwrap_or(1000);
            self.keepalive_for(every, fault.for_ms.unwrap_or(0)).await?;
            self.abort("stalled").await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The frame sequence (docs/mock.md, "Responses") with the frame-count faults applied; `[DONE]`
    /// counts as a frame.
    async fn stream(&mut self) -> Result<(), Stop> {
        self.before_first_frame().await?;
        let config = self.shared.config.stream.clone();
        let (frames, last): (Vec<Frame>, Option<Frame>) = match self.admitted.surface {
            Surface::Chat => {
                let frames = self
                    .admitted
                    .output
                    .stream_frames(&config, self.admitted.request.include_usage);
                let frames = frames.into_iter().map(|frame| (None, frame)).collect();
                (frames, Some((None, "[DONE]".to_owned())))
            }
            Surface::Messages(flavor) => {
                let mut frames: Vec<Frame> = messages::frames(
                    &self.admitted.output,
                    self.admitted.messages_usage,
                    flavor,
                    &config,
                )
                .into_iter()
                .map(|(name, json)| (Some(name), json))
                .collect();
                // `message_stop` ends the stream like `[DONE]`; a stream that ends in an
                // `error` event has no such end.
                let last = match frames.last() {
                    Some((Some("message_stop"), _)) => frames.pop(),
                    _ => None,
                };
                (frames, last)
            }
        };
        let end = self.line_end();
        let mut number = 0;
        for (name, frame) in frames {
            number += 1;
            if self.frame_faults(number).await? {
                return Ok(());
            }
            if number == 1 {
                self.persist_input();
            }
            let json = if self.admitted.fault.malformed_frame_at == Some(number) {
                self.malformed = true;
                cut_short(&frame).to_owned()
            } else {
                frame
            };
            self.write(sse_frame(name, &json, end)).await?;
            self.pause(config.inter_chunk_delay_ms).await?;
        }
        let Some((name, last)) = last else {
            // Ended by an error event: the input stays cached, nothing else happens.
            self.set_outcome("error_event");
            return Ok(());
        };
        number += 1;
        if self.frame_faults(number).await? {
            return Ok(());
        }
        self.complete();
        self.write(sse_frame(name, &last, end)).await
    }

    /// A non-streaming answer is one "frame": `drop_after_frames: 0` aborts before it, any other
    /// count sends half of it; a stall sends blank lines instead; `malformed_frame_at` cuts it.
    async fn whole(&mut self) -> Result<(), Stop> {
        self.before_first_frame().await?;
        let fault = self.admitted.fault.clone();
        let body = match self.admitted.surface {
            Surface::Chat => self.admitted.output.completion_body(),
            Surface::Messages(flavor) => {
                messages::message_body(&self.admitted.output, self.admitted.messages_usage, flavor)
            }
        };
        if fault.drop_after_frames == Some(0) {
            return self.abort("dropped").await;
        }
        if fault.stall_after_frames.is_some() {
            self.keepalive_for(fault.keepalive_every_ms.unwrap_or(1000), fault.for_ms.unwrap_or(0))
                .await?;
            return self.abort("stalled").await;
        }
        self.persist_input();
        if fault.drop_after_frames.is_some() {
            self.write(cut_short(&body).to_owned()).await?;
            return self.abort("dropped").await;
        }
        let body = if fault.malformed_frame_at.is_some() {
            self.malformed = true;
            cut_short(&body).to_owned()
        } else {
            body
        };
        self.complete();
        self.write(body).await
    }
}

/// A frame to send: its event name (Messages only) and its data.
type Frame = (Option<&'static str>, String);

/// One SSE frame: `event: NAME` (Messages) and `data: JSON`, then a blank line.
fn sse_frame(name: Option<&str>, json: &str, end: &str) -> String {
    match name {
        Some(name) => format!("event: {name}{end}data: {json}{end}{end}"),
        None => format!("data: {json}{end}{end}"),
    }
}

/// The first half of `json`, on a character boundary.
fn cut_short(json: &str) -> &str {
    let mut cut = json.len() / 2;
    while !json.is_char_boundary(cut) {
        cut -= 1;
    }
    &json[..cut]
}

//! The HTTP surface: a request's way from arrival to the last byte of its answer.
//!
//! A chat or Messages request is recorded on arrival (`record_arrival`), then goes through the
//! validation checks in order (docs/mock.md, "Validation": auth, syntax, types, semantics,
//! context, balance, concurrency, faults). An admitted request gets its whole answer decided up
//! front under the state lock — plan, ids, usage — so the same request sequence always gives the
//! same bytes. A spawned producer task then paces the bytes into the response body through a
//! small channel; it watches the shutdown signal and the client going away, and it does the
//! cache persistence at the moments docs/mock.md names ("Prefix-cache accounting": first data
//! frame, `[DONE]`).
//!
//! One idea per module: `routes` (the endpoints and their small handlers), `control` (the
//! `/_fake/*` endpoints), `auth` (keys and the version header), `admission` (the validation
//! checks, the per-key concurrency slot, the fault), `answer` (the answer a plan gives: budget,
//! finish reason, ids, token counts) and `producer` (the response body, paced, with the frame
//! faults).

mod admission;
mod answer;
mod auth;
mod control;
mod producer;
mod routes;

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::watch;

use crate::knobs::MockConfig;
use crate::messages::{self, Flavor};
use crate::state::{RecordedRequest, State as MockState, lock};

pub(crate) use answer::answer_without_state;
pub(crate) use routes::router;

/// What every handler shares.
pub(crate) struct Shared {
    pub config: MockConfig,
    pub rates: crate::state::Rates,
    pub state: std::sync::Mutex<MockState>,
    pub shutdown: watch::Receiver<bool>,
}

/// The API a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// Chat completions.
    Chat,
    /// Anthropic Messages, on Anthropic's or DeepSeek's endpoint.
    Messages(Flavor),
}

/// Records, admits and answers a request, or answers its rejection in its surface's error shape.
fn serve(
    shared: Arc<Shared>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    surface: Surface,
) -> Response {
    let seq = record_arrival(&shared, method, uri, headers, body);
    match admission::admit(&shared, seq, headers, body, surface) {
        Ok(admitted) => producer::respond(shared, seq, admitted),
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
                    let mut response = routes::json_response(status, &messages::error_body(&error));
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

/// Records a request as it arrived (docs/mock.md, "Recorded requests"); returns its seq.
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
                format!("Bearer {}", auth::redact(auth::bearer(headers)))
            } else if name.as_str() == "x-api-key" {
                auth::redact(&String::from_utf8_lossy(value.as_bytes()))
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

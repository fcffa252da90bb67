//! The control endpoints (`/_fake/*`, docs/mock.md, "Endpoints"): queue scripts and faults,
//! read the recorded requests and the cache, clear or arm the cache, reset the state. They need
//! no key.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::Shared;
use super::routes::json_response;
use crate::error::ApiError;
use crate::fault::Fault;
use crate::script::Script;
use crate::state::{RecordedRequest, State as MockState, lock};

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

pub(super) async fn add_scripts(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
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

pub(super) async fn add_faults(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
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

pub(super) async fn list_requests(State(shared): State<Arc<Shared>>) -> Response {
    let records: Vec<Value> =
        lock(&shared.state).requests.iter().map(RecordedRequest::to_json).collect();
    json_response(StatusCode::OK, &Value::Array(records))
}

pub(super) async fn cache_view(State(shared): State<Arc<Shared>>) -> Response {
    let snapshot = lock(&shared.state).cache.snapshot(Instant::now());
    json_response(StatusCode::OK, &snapshot)
}

pub(super) async fn cache_clear(State(shared): State<Arc<Shared>>) -> Response {
    lock(&shared.state).cache.clear();
    json_response(StatusCode::OK, &json!({"cleared": true}))
}

pub(super) async fn cache_miss_next(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
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

pub(super) async fn reset(State(shared): State<Arc<Shared>>) -> Response {
    match MockState::new(&shared.config) {
        Ok(fresh) => {
            *lock(&shared.state) = fresh;
            json_response(StatusCode::OK, &json!({"reset": true}))
        }
        Err(error) => ApiError::new(500, error.to_string(), "server_error", None).into_response(),
    }
}

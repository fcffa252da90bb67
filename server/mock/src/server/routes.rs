//! The endpoints (docs/mock.md, "Endpoints") and the handlers small enough to need no module of
//! their own: `/models`, `/user/balance`, and the entry of a chat or Messages request into the
//! pipeline.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde_json::{Value, json};

use super::auth::authenticate;
use super::control::{
    add_faults, add_scripts, cache_clear, cache_miss_next, cache_view, list_requests, reset,
};
use super::{Shared, Surface, serve};
use crate::error::ApiError;
use crate::messages::Flavor;
use crate::state::{format_amount, lock};

/// The largest accepted request body.
const BODY_LIMIT: usize = 256 * 1024 * 1024;

/// Builds the router with every endpoint (docs/mock.md, "Endpoints").
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/chat/completions", surface_route(Surface::Chat))
        .route("/v1/chat/completions", surface_route(Surface::Chat))
        .route("/beta/chat/completions", surface_route(Surface::Chat))
        .route("/v1/messages", surface_route(Surface::Messages(Flavor::Anthropic)))
        .route("/anthropic/v1/messages", surface_route(Surface::Messages(Flavor::DeepSeek)))
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

/// A JSON body with its content type.
pub(super) fn json_response(status: StatusCode, value: &Value) -> Response {
    let mut response = (status, value.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
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

/// The route of a chat or Messages endpoint: the request into the pipeline as `surface`.
fn surface_route(surface: Surface) -> MethodRouter<Arc<Shared>> {
    post(
        move |State(shared): State<Arc<Shared>>,
              method: Method,
              uri: Uri,
              headers: HeaderMap,
              body: Bytes| async move { serve(shared, &method, &uri, &headers, &body, surface) },
    )
}

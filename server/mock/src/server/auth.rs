//! Step 1 of the validation (docs/mock.md, "Validation"): the key — a bearer token for chat, an
//! `x-api-key` for Messages (DeepSeek's endpoint takes either) — and Anthropic's version header;
//! and how a key is shown in records (`****last4`).

use axum::http::{HeaderMap, header};

use super::Shared;
use crate::error::ApiError;
use crate::messages::{self, Flavor};

/// The bearer token of the request, or `""`.
pub(super) fn bearer(headers: &HeaderMap) -> &str {
    let value =
        headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()).unwrap_or("");
    let value = value.trim();
    match value.split_once(' ') {
        Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") => key.trim(),
        _ => "",
    }
}

/// Step 1 of the validation (docs/mock.md, "Validation"): the key must be configured.
pub(super) fn authenticate<'a>(
    shared: &Shared,
    headers: &'a HeaderMap,
) -> Result<&'a str, ApiError> {
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
pub(super) fn authenticate_messages<'a>(
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

/// A key as records show it: `****` and its last four characters.
pub(super) fn redact(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let last4: String = chars[chars.len().saturating_sub(4)..].iter().collect();
    format!("****{last4}")
}

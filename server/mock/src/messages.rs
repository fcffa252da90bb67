//! The Anthropic Messages surface (docs/mock.md, "Anthropic Messages"): `POST /v1/messages`
//! (Anthropic's rules: `cache_control` breakpoints honoured, `anthropic-version` required) and
//! `POST /anthropic/v1/messages` (DeepSeek's: breakpoints ignored, automatic prefix caching).
//!
//! A Messages body is validated with Anthropic-shaped errors, then translated into the chat
//! request the rest of the mock already serves — rendering, tokenizer, cache, scripts,
//! directives, faults — with the breakpoints' token positions on the side. Each turn's blocks
//! become chat messages in order: a `tool_result` a tool message, a user `text` a user message,
//! an assistant turn one assistant message (its `thinking` as reasoning, its texts joined, each
//! `tool_use` a call whose arguments are the `input` **exactly as sent**, from the raw body).
//! The answer is streamed as Messages events (`frames`).
//!
//! `request` validates and translates a body, `breakpoint` places its `cache_control`
//! breakpoints, `response` writes the answer, its usage and errors in the Messages shape.

mod breakpoint;
mod request;
mod response;

use crate::error::ApiError;
use crate::request::ChatRequest;
use crate::tokenizer;

pub(crate) use request::parse;
pub(crate) use response::{MessagesUsage, error_body, frames, message_body};

/// The `anthropic-version` the mock speaks.
pub(crate) const VERSION: &str = "2023-06-01";

/// Which Messages endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `/v1/messages`: Anthropic's rules.
    Anthropic,
    /// `/anthropic/v1/messages`: DeepSeek's compatible endpoint.
    DeepSeek,
}

/// A validated Messages request: the chat request it is served as, and the token positions of
/// its breakpoints (always empty for DeepSeek's flavor, which ignores them).
#[derive(Debug)]
pub(crate) struct MessagesRequest {
    pub chat: ChatRequest,
    pub breakpoints: Vec<u64>,
}

/// The signature the mock gives a thinking text; a replayed thinking block must carry it.
pub(crate) fn signature(thinking: &str) -> String {
    let hash = tokenizer::fnv1a(0xcbf2_9ce4_8422_2325, thinking.as_bytes());
    format!("mock-sig-{hash:016x}")
}

/// A 400 `invalid_request_error`: a body that breaks one of the format's rules.
fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(400, message, "invalid_request_error", None)
}

#[cfg(test)]
mod tests;

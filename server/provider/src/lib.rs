//! Provider adapters for dsh: DeepSeek's OpenAI-compatible chat-completions API (and other
//! OpenAI-compatible servers), and Anthropic Messages. The two are wire formats, written by
//! `chat` and `anthropic` (which never import each other) and chosen in one place, `format`.
//!
//! Two halves, kept apart on purpose:
//! - a **pure** half: [`wire_body`] turns a [`dsh_session::GenerateRequest`] into the exact
//!   request bytes (deterministic, append-stable so the prefix cache keeps hitting), the SSE
//!   decoder and chunk decoder turn response bytes into [`dsh_session::ChunkDelta`]s and
//!   [`dsh_session::Usage`], and [`MessageAssembler`] turns deltas into the logged
//!   [`dsh_session::AssistantMessage`];
//! - a **shell**: [`DeepSeek`] sends a body over HTTP(S) and streams [`StreamEvent`]s, with a
//!   data-progress timer, an overall timer, bounded retries and prompt cancellation.
//!
//! Vendor JSON types never leave this crate: callers see session types and [`ProviderError`].
//! It deliberately does **not** build requests from the log, log anything, or decide what a
//! failed step means; that is the agent loop's job. It never prints the API key.

mod anthropic;
mod assemble;
mod body;
mod chat;
mod chunk;
mod client;
mod decoded;
mod endpoint;
mod error;
mod format;
mod json;
mod sse;
#[cfg(test)]
mod test_support;

pub use anthropic::ANTHROPIC_ADAPTER;
pub use assemble::MessageAssembler;
pub use body::{WireBytes, sha256_hex};
pub use chat::{DEEPSEEK_ADAPTER, OPENAI_ADAPTER};
pub use client::{DeepSeek, EventStream, StreamEvent};
pub use endpoint::{API_KEY_ENV, ApiKey, DEFAULT_BASE_URL, DeepSeekConfig, RetryPolicy};
pub use error::{ProviderError, TimeoutKind};
pub use format::{WireCache, adapter_id, check_request, check_tool_arguments, wire_body};
pub use json::EMPTY_TOOL_OUTPUT;

// The stream decoders, for the fuzz targets in `fuzz/`; not part of the crate's API.
#[doc(hidden)]
pub use anthropic::stream::MessagesDecoder;
#[doc(hidden)]
pub use chunk::ChunkDecoder;
#[doc(hidden)]
pub use decoded::{Decoded, Finish};
#[doc(hidden)]
pub use sse::{SseDecoder, SseEvent};

//! What a format's stream decoder makes of one SSE data event: deltas, a keep-alive, or the
//! end of the stream with its finish reason and usage.
//!
//! Both decoders answer in these types — `crate::chunk` for chat completions,
//! `crate::anthropic::stream` for Anthropic Messages — and the transport reads nothing else, so
//! neither decoder imports the other.

use dsh_session::{ChunkDelta, Usage};

/// The end of a successful stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finish {
    /// The provider's finish reason (`stop`, `tool_calls`, `length`; Anthropic's stop reason,
    /// such as `end_turn`).
    pub finish_reason: String,
    /// The latest usage seen on the stream (zeros when the provider sent none).
    pub usage: Usage,
}

/// What one data event meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Zero or more deltas, in the order they appeared in the chunk.
    Deltas(Vec<ChunkDelta>),
    /// `[DONE]` (Anthropic: `message_stop`): the stream finished.
    Done(Finish),
    /// A keep-alive event (Anthropic's `ping`): no progress.
    Ping,
}

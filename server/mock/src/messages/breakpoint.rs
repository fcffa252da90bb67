//! Anthropic's `cache_control` breakpoints: where a request marks them while it is read (at
//! most [`MAX_BREAKPOINTS`], none on a thinking block), then their token positions in the
//! rendering, which the cache reads up to and writes at.

use serde_json::Value;

use super::invalid;
use crate::error::ApiError;
use crate::render;
use crate::request::ChatRequest;
use crate::tokenizer::{self, Marker, Segment};

/// The most blocks that may carry `cache_control`.
pub(super) const MAX_BREAKPOINTS: usize = 4;

/// Where the request's breakpoints are, before their token positions are known.
#[derive(Debug, Default)]
pub(super) struct Breakpoints {
    pub(super) count: usize,
    pub(super) tools: bool,
    pub(super) system: bool,
    /// Breakpoints after these chat messages (their last block is marked, or a block inside).
    pub(super) after: Vec<usize>,
    /// The turn being read has a marked block.
    pub(super) pending: bool,
}

impl Breakpoints {
    pub(super) fn mark(
        &mut self,
        block: &Value,
        index: usize,
        position: usize,
    ) -> Result<(), ApiError> {
        if block.get("cache_control").is_none() {
            return Ok(());
        }
        let kind = block.get("type").and_then(Value::as_str).unwrap_or_default();
        if matches!(kind, "thinking" | "redacted_thinking") {
            return Err(invalid(format!(
                "messages.{index}.content.{position}.{kind}.cache_control: Extra inputs are not permitted"
            )));
        }
        self.count += 1;
        self.pending = true;
        Ok(())
    }
}

/// The token positions of the breakpoints: the rendering up to and including each marked
/// block (a marked block inside an assistant turn counts as its end), without the markers a
/// rendering adds to let the model answer.
pub(super) fn positions(
    chat: &ChatRequest,
    breakpoints: &Breakpoints,
    system_messages: usize,
) -> Vec<u64> {
    let prefix_length = |messages: usize| {
        let prefix = ChatRequest { messages: chat.messages[..messages].to_vec(), ..chat.clone() };
        let mut segments = render::render(&prefix);
        if let [
            ..,
            Segment::Marker(Marker::Assistant),
            Segment::Marker(Marker::Think | Marker::EndThink),
        ] = segments.as_slice()
        {
            segments.truncate(segments.len() - 2);
        }
        tokenizer::tokenize(&segments).len() as u64
    };
    let mut out = Vec::new();
    if breakpoints.tools || breakpoints.system {
        out.push(prefix_length(system_messages));
    }
    for after in &breakpoints.after {
        out.push(prefix_length(after + 1));
    }
    out.sort_unstable();
    out.dedup();
    out
}

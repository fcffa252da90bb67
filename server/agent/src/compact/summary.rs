//! A compaction's pure half: where it cuts ([`plan_compaction`]: the latest turns kept verbatim,
//! at most half the surface's bytes, never a tool call separated from its result) and the
//! summarize call's request for the region it replaces ([`summarize_request`]: a fixed
//! instruction, the region rendered as one user message, no tools, thinking off) — so the call is
//! reconstructable from the log plus this code.

use std::collections::HashSet;
use std::sync::Arc;

use dsh_session::{
    EpochHeader, EventData, GenerateRequest, LlmCallConfig, Message, Session, SurfaceEntry,
};

use super::{ContextConfig, message_bytes, trim_content};

/// The share of the surface (by bytes) a compaction keeps at most.
const KEEP_MAX_SHARE: f64 = 0.5;

/// Where a compaction would cut: the surface ids `(start, end)` of the older nodes to replace,
/// or `None` when there is nothing worth compacting.
///
/// The kept part is the latest `keep_recent_turns` turns, shortened to at most half of the
/// surface's bytes; the cut then moves later until no tool call in the replaced part has its
/// result in the kept part (or no result at all). At least two nodes are replaced.
pub fn plan_compaction(session: &Session, config: &ContextConfig) -> Option<(u64, u64)> {
    let surface = session.surface();
    // Candidate cut from turns: the node of the `keep_recent_turns`-th latest prompt.
    let prompts: Vec<usize> = surface
        .iter()
        .enumerate()
        .filter(|(_, node)| is_prompt(session, node))
        .map(|(position, _)| position)
        .collect();
    let turn_cut = match config.keep_recent_turns {
        keep if keep > 0 && prompts.len() >= keep => prompts[prompts.len() - keep],
        _ => 0,
    };
    // Candidate cut from size: the earliest cut whose kept suffix is at most half the bytes.
    let sizes: Vec<usize> = surface.iter().map(|node| message_bytes(&node.message)).collect();
    let total: usize = sizes.iter().sum();
    let mut suffix = total;
    let mut size_cut = 0;
    for (position, size) in sizes.iter().enumerate() {
        if suffix as f64 <= total as f64 * KEEP_MAX_SHARE {
            break;
        }
        suffix -= size;
        size_cut = position + 1;
    }
    let cut = first_valid_cut(surface, turn_cut.max(size_cut).max(2))?;
    Some((surface[0].id, surface[cut - 1].id))
}

/// The first cut at or after `from`, before the last node, that leaves no tool call of the
/// replaced part unanswered inside it; in one pass.
fn first_valid_cut(surface: &[SurfaceEntry], from: usize) -> Option<usize> {
    let mut open: HashSet<&str> = HashSet::new();
    for (position, node) in surface.iter().enumerate() {
        // Here `open` holds the unanswered calls of `surface[..position]`.
        if position >= from && open.is_empty() {
            return Some(position);
        }
        track_calls(&mut open, &node.message);
    }
    None
}

/// Adds the calls `message` makes to `open`, or removes the one it answers.
fn track_calls<'a>(open: &mut HashSet<&'a str>, message: &'a Message) {
    match message {
        Message::Assistant(assistant) => {
            open.extend(assistant.tool_calls.iter().map(|call| call.id.as_str()));
        }
        Message::Tool { call_id, .. } => {
            open.remove(call_id.as_str());
        }
        _ => {}
    }
}

fn is_prompt(session: &Session, node: &SurfaceEntry) -> bool {
    usize::try_from(node.id)
        .ok()
        .and_then(|index| session.events().get(index))
        .is_some_and(|event| matches!(event.data, EventData::UserMessage(_)))
}

/// Whether every tool call made in `replaced` is answered inside it (so no result is left in
/// the kept part without its call, and no call is summarized away before its result arrives).
#[cfg(test)]
pub(super) fn is_valid_cut(replaced: &[SurfaceEntry]) -> bool {
    let mut open: HashSet<&str> = HashSet::new();
    for node in replaced {
        track_calls(&mut open, &node.message);
    }
    open.is_empty()
}

/// The fixed instruction of the summarize call (its system prompt).
pub const SUMMARY_INSTRUCTION: &str = "\
You compact the history of a coding agent's session. Summarize the conversation below so the \
agent can continue the work without it: the user's goals and requests, decisions made, files \
read or changed (with paths), commands run and their outcomes, errors met, and what remains to \
be done. Be concise and factual; keep identifiers, paths and numbers exact. Answer with the \
summary only.";

/// Renders the region `start..=end` of the surface as the summarize call's input text.
/// Deterministic: tool results longer than the trim limits are cut the way trimming cuts them;
/// reasoning text is left out.
pub fn render_region(nodes: &[SurfaceEntry], config: &ContextConfig) -> String {
    let mut out = String::from("Conversation to summarize:\n");
    for node in nodes {
        out.push('\n');
        match &*node.message {
            Message::System { content } => {
                out.push_str("[system]\n");
                out.push_str(content);
            }
            Message::User { content, images } => {
                out.push_str("[user]\n");
                out.push_str(content);
                push_images(&mut out, images);
            }
            Message::Assistant(assistant) => {
                out.push_str("[assistant]\n");
                out.push_str(&assistant.content);
                for call in &assistant.tool_calls {
                    out.push_str(&format!(
                        "\n(calls {} {} {})",
                        call.id, call.name, call.arguments
                    ));
                }
            }
            Message::Tool { call_id, content, images, .. } => {
                out.push_str(&format!("[tool result {call_id}]\n"));
                match trim_content(content, config) {
                    Some(trimmed) if content.len() > config.trim_min_bytes => {
                        out.push_str(&trimmed);
                    }
                    _ => out.push_str(content),
                }
                push_images(&mut out, images);
            }
        }
        out.push('\n');
    }
    out
}

/// The summarize call's request for surface nodes `start..=end` of `session`: a fixed
/// instruction as the system prompt, the rendered region as the one user message, no tools,
/// thinking off, no sampling overrides; only `model` and `max_tokens` vary (and are logged in
/// `compact/summary`). `None` when the range is not on the surface.
pub fn summarize_request(
    session: &Session,
    start: u64,
    end: u64,
    call: &LlmCallConfig,
    max_tokens: u32,
    config: &ContextConfig,
) -> Option<GenerateRequest> {
    let surface = session.surface();
    let first = surface.iter().position(|node| node.id == start)?;
    let last = surface.iter().position(|node| node.id == end)?;
    if last < first {
        return None;
    }
    let call = LlmCallConfig {
        model: call.model.clone(),
        profile: call.profile.clone(),
        wire: call.wire.clone(),
        max_tokens,
        thinking: false,
        reasoning_effort: None,
        temperature: None,
        top_p: None,
        response_format: None,
    };
    let header = EpochHeader::new(call, Some(SUMMARY_INSTRUCTION.to_owned()), Vec::new());
    let text = render_region(&surface[first..=last], config);
    Some(GenerateRequest::new(header, vec![Arc::new(Message::user(text))]))
}

/// Images as the summarizer reads them: said, not shown (its one-shot carries no images). A
/// client's name for an image is not model-visible: only its media type and size are.
fn push_images(out: &mut String, images: &[dsh_session::ImageRef]) {
    for image in images {
        out.push_str(&format!("\n[image: {}, {} bytes]", image.media_type, image.size));
    }
}

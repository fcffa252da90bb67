//! Tool-result trimming, pure: which results are worth trimming (old, large, already answered,
//! never trimmed before), what a trimmed result keeps (its head and tail around a note of what
//! was cut, on char boundaries), and the `surface/replace {start == end}` events that say so.

use dsh_session::{EventData, Message, Session, SurfaceNode, SurfaceReplace, ToolResult};

use super::ContextConfig;

/// The original `tool/result` behind a surface node, or `None` when the node is anything else —
/// in particular a replacement (an already trimmed result, or a summary).
pub(super) fn original_result(session: &Session, id: u64) -> Option<&ToolResult> {
    let event = session.events().get(usize::try_from(id).ok()?)?;
    match &event.data {
        EventData::ToolResult(result) => Some(result),
        _ => None,
    }
}

/// Tool-result nodes worth trimming now: original (never trimmed) results larger than
/// `trim_min_bytes` that the model has already answered — those before the last assistant
/// message on the surface.
pub fn trim_candidates(session: &Session, config: &ContextConfig) -> Vec<u64> {
    let surface = session.surface();
    let Some(last_assistant) =
        surface.iter().rposition(|node| matches!(*node.message, Message::Assistant(_)))
    else {
        return Vec::new();
    };
    surface[..last_assistant]
        .iter()
        .filter_map(|node| {
            let result = original_result(session, node.id)?;
            (result.content.len() > config.trim_min_bytes
                && trim_content(&result.content, config).is_some())
            .then_some(node.id)
        })
        .collect()
}

/// The head and tail of `content` with a note of what was cut between them, or `None` when
/// cutting would not make it shorter.
pub fn trim_content(content: &str, config: &ContextConfig) -> Option<String> {
    let head_end = floor_boundary(content, config.trim_keep_head_bytes);
    let tail_start =
        ceil_boundary(content, content.len().saturating_sub(config.trim_keep_tail_bytes));
    if tail_start <= head_end {
        return None;
    }
    let cut = &content[head_end..tail_start];
    let trimmed = format!(
        "{}\n[... trimmed {} bytes ({} lines) of this tool result to save context ...]\n{}",
        &content[..head_end],
        cut.len(),
        cut.lines().count(),
        &content[tail_start..]
    );
    (trimmed.len() < content.len()).then_some(trimmed)
}

fn floor_boundary(text: &str, mut index: usize) -> usize {
    index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn ceil_boundary(text: &str, mut index: usize) -> usize {
    index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index += 1;
    }
    index
}

/// The `surface/replace` events that trim `ids`, in order; ids that are not original tool
/// results, or not worth trimming, are skipped.
pub fn trim_events(session: &Session, ids: &[u64], config: &ContextConfig) -> Vec<EventData> {
    ids.iter()
        .filter_map(|&id| {
            let result = original_result(session, id)?;
            let content = trim_content(&result.content, config)?;
            let node = SurfaceNode::ToolResult(ToolResult { content, ..result.clone() });
            Some(EventData::SurfaceReplace(SurfaceReplace { start: id, end: id, node }))
        })
        .collect()
}

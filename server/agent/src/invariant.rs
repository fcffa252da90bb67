//! The reconstruction invariant: at every dispatch, the request rebuilt from the log through a
//! fresh fold over the events before the step's `step/start` (those that can shape a request,
//! found by the session's index: [`dsh_session::reconstruct_session_step`]) must equal the live
//! request — messages, header and wire bytes. The live session's caches never vouch for
//! themselves. A mismatch is a bug; the step fails with the first differing field.

use dsh_provider::WireBytes;
use dsh_session::{GenerateRequest, Message};

/// The first difference between the live request (and its wire body) and the rebuilt one, as a
/// field path a person can act on; `None` when they are equal.
pub fn first_difference(
    live: &GenerateRequest,
    live_body: &WireBytes,
    rebuilt: &GenerateRequest,
    rebuilt_body: &[u8],
) -> Option<String> {
    let (a, b) = (&live.header, &rebuilt.header);
    if a.config != b.config {
        let (x, y) = (&a.config, &b.config);
        let field = if x.model != y.model {
            "model"
        } else if x.max_tokens != y.max_tokens {
            "maxTokens"
        } else if x.thinking != y.thinking {
            "thinking"
        } else if x.reasoning_effort != y.reasoning_effort {
            "reasoningEffort"
        } else if x.temperature != y.temperature {
            "temperature"
        } else {
            "topP"
        };
        return Some(format!("header.config.{field}"));
    }
    if a.system != b.system {
        return Some("header.system".to_owned());
    }
    let (tools_a, tools_b) = (a.tool_list(), b.tool_list());
    if tools_a != tools_b {
        if tools_a.len() != tools_b.len() {
            return Some(format!("header.tools (live {} vs log {})", tools_a.len(), tools_b.len()));
        }
        let index = tools_a.iter().zip(tools_b).position(|(x, y)| x != y).unwrap_or(0);
        return Some(format!("header.tools[{index}] ({})", tools_a[index].name));
    }
    if live.messages.len() != rebuilt.messages.len() {
        return Some(format!(
            "messages: live has {}, the log rebuilds {}",
            live.messages.len(),
            rebuilt.messages.len()
        ));
    }
    for (index, (x, y)) in live.messages.iter().zip(&rebuilt.messages).enumerate() {
        if x != y {
            return Some(format!("messages[{index}].{}", message_field(x, y)));
        }
    }
    if let Some(offset) = live_body.first_difference(rebuilt_body) {
        return Some(format!("wire body, first differing byte at offset {offset}"));
    }
    None
}

fn message_field(live: &Message, rebuilt: &Message) -> &'static str {
    match (live, rebuilt) {
        (Message::Assistant(x), Message::Assistant(y)) => {
            if x.content != y.content {
                "content"
            } else if x.reasoning_content != y.reasoning_content {
                "reasoningContent"
            } else {
                "toolCalls"
            }
        }
        (Message::Tool { call_id: x, .. }, Message::Tool { call_id: y, .. }) if x != y => "callId",
        (Message::User { .. }, Message::User { .. })
        | (Message::System { .. }, Message::System { .. })
        | (Message::Tool { .. }, Message::Tool { .. }) => "content",
        _ => "role",
    }
}

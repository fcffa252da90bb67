//! Builders the serializers' unit tests share.

use std::sync::Arc;

use dsh_session::{Message, ToolSchema};
use serde_json::json;

/// A tool taking a `path`.
pub(crate) fn tool(name: &str) -> ToolSchema {
    ToolSchema {
        name: name.to_owned(),
        description: format!("{name} things"),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }
}

/// A user message.
pub(crate) fn user(text: &str) -> Arc<Message> {
    Arc::new(Message::User { content: text.to_owned() })
}

/// A tool result.
pub(crate) fn tool_result(call_id: &str, content: &str) -> Arc<Message> {
    Arc::new(Message::Tool { call_id: call_id.to_owned(), content: content.to_owned() })
}

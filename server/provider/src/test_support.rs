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
    Arc::new(Message::user(text))
}

/// A tool result.
pub(crate) fn tool_result(call_id: &str, content: &str) -> Arc<Message> {
    Arc::new(Message::tool(call_id, content))
}

/// A tiny PNG's first bytes (its signature and the start of a header): what the serializers
/// encode, whatever follows.
pub(crate) const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

/// An image reference to [`PNG`] and the loaded bytes, by hash.
pub(crate) fn png() -> (dsh_session::ImageRef, dsh_session::ImageData) {
    use sha2::Digest as _;
    let sha256: String =
        sha2::Sha256::digest(PNG).iter().map(|byte| format!("{byte:02x}")).collect();
    let image = dsh_session::ImageRef {
        sha256: sha256.clone(),
        size: PNG.len() as u64,
        media_type: "image/png".to_owned(),
        name: Some("shot.png".to_owned()),
    };
    let data = std::iter::once((sha256, Arc::<[u8]>::from(PNG))).collect();
    (image, data)
}

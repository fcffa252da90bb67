//! What the model sees of an MCP server: its tools named `SERVER__TOOL` (names providers refuse,
//! and tools listed twice, are refused with why), descriptions as the server gave them, input
//! schemas with every object's keys sorted — the loop puts them into the header, so every change
//! is a logged header change — and a call's result as one text, capped at
//! [`RESULT_CAP_BYTES`]. Pure: no connection, no state.

use std::collections::BTreeMap;

use dsh_agent::tools::ToolOutput;
use rmcp::model::{CallToolResult, ContentBlock, Tool};

/// The namespace separator of tool names in requests: `SERVER__TOOL`.
pub const SEPARATOR: &str = "__";

/// The providers' limit on a tool name.
const NAME_MAX: usize = 64;
/// The most bytes of a tool result the model gets; the rest is cut with a note.
pub const RESULT_CAP_BYTES: usize = 256 * 1024;

/// A tool result as the model gets it: text blocks as they are, structured content as JSON
/// when no text came with it, anything else as a one-line note; cut at [`RESULT_CAP_BYTES`].
pub(super) fn render_result(result: &CallToolResult) -> ToolOutput {
    let mut parts = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::Image(image) => parts.push(format!(
                "[image {} ({} bytes of base64) not shown to the model]",
                image.mime_type,
                image.data.len()
            )),
            ContentBlock::Audio(audio) => parts.push(format!(
                "[audio {} ({} bytes of base64) not shown to the model]",
                audio.mime_type,
                audio.data.len()
            )),
            ContentBlock::Resource(resource) => {
                let uri = match &resource.resource {
                    rmcp::model::ResourceContents::TextResourceContents { uri, .. }
                    | rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => {
                        uri.as_str()
                    }
                    _ => "(unknown kind)",
                };
                parts.push(format!("[embedded resource {uri} not shown to the model]"));
            }
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("[resource link {} ({})]", link.uri, link.name));
            }
            _ => parts
                .push("[content of a kind dsh does not know, not shown to the model]".to_owned()),
        }
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(canonical(structured).to_string());
    }
    let mut content = parts.join("\n");
    if content.len() > RESULT_CAP_BYTES {
        let total = content.len();
        let mut cut = RESULT_CAP_BYTES;
        while !content.is_char_boundary(cut) {
            cut -= 1;
        }
        content.truncate(cut);
        content.push_str(&format!(
            "\n[result cut: {total} bytes, the first {cut} shown (MCP results are capped at {RESULT_CAP_BYTES} bytes)]"
        ));
    }
    ToolOutput { content, is_error: result.is_error == Some(true), seen: None, image: None }
}

/// A JSON value with every object's keys sorted, recursively.
pub fn canonical(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(object) => {
            let mut entries: Vec<_> = object.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let mut sorted = serde_json::Map::new();
            for (key, value) in entries {
                sorted.insert(key.clone(), canonical(value));
            }
            serde_json::Value::Object(sorted)
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(canonical).collect())
        }
        other => other.clone(),
    }
}

/// A server's tools as the model sees them: `SERVER__TOOL`, canonical schemas, sorted; a tool
/// whose name breaks the providers' rule or that the server listed twice is refused, with why.
pub fn offered_tools(server: &str, tools: &[Tool]) -> (Vec<dsh_session::ToolSchema>, Vec<String>) {
    let mut offered: BTreeMap<String, dsh_session::ToolSchema> = BTreeMap::new();
    let mut refused = Vec::new();
    let mut duplicates = std::collections::BTreeSet::new();
    for tool in tools {
        let name = format!("{server}{SEPARATOR}{}", tool.name);
        let valid = name.len() <= NAME_MAX
            && !tool.name.is_empty()
            && tool.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            refused.push(format!(
                "tool `{}`: `{name}` is not a name providers accept (^[a-zA-Z0-9_-]{{1,64}}$)",
                tool.name
            ));
            continue;
        }
        let schema = dsh_session::ToolSchema {
            name: name.clone(),
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            parameters: canonical(&serde_json::Value::Object((*tool.input_schema).clone())),
        };
        if offered.insert(name.clone(), schema).is_some() {
            duplicates.insert(name);
        }
    }
    for name in duplicates {
        offered.remove(&name);
        refused.push(format!("tool `{name}` is listed twice by the server: both refused"));
    }
    (offered.into_values().collect(), refused)
}

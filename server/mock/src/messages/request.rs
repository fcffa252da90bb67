//! A Messages body validated (syntax, fields, semantics, with Anthropic-shaped errors) and
//! translated into the chat request the rest of the mock serves: the system text, then each
//! turn's blocks as chat messages in order, a `tool_use`'s input kept exactly as sent.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::breakpoint::{Breakpoints, MAX_BREAKPOINTS, positions};
use super::{Flavor, MessagesRequest, invalid, signature};
use crate::error::ApiError;
use crate::knobs::MockConfig;
use crate::request::{ChatRequest, Image, Message, Role, Tool, ToolCall};

#[derive(Deserialize)]
struct RawBody<'a> {
    #[serde(borrow, default)]
    messages: Option<Vec<RawTurn<'a>>>,
}

#[derive(Deserialize)]
struct RawTurn<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawInput<'a> {
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

/// Validates a Messages body (syntax, fields, semantics) and translates it.
pub(crate) fn parse(
    body: &[u8],
    config: &MockConfig,
    flavor: Flavor,
) -> Result<MessagesRequest, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| invalid(format!("Failed to parse the request body as JSON: {error}")))?;
    let Value::Object(object) = &value else {
        return Err(invalid("the request body must be a JSON object"));
    };
    let raw: RawBody<'_> = serde_json::from_slice(body)
        .map_err(|error| invalid(format!("Failed to parse the request body as JSON: {error}")))?;
    let model_id = object
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("model: Field required"))?;
    let model = config
        .models
        .iter()
        .find(|model| model.id == model_id)
        .ok_or_else(|| ApiError::new(404, format!("model: {model_id}"), "not_found_error", None))?
        .clone();
    let max_tokens = match object.get("max_tokens") {
        None if flavor == Flavor::Anthropic => return Err(invalid("max_tokens: Field required")),
        None => None,
        Some(value) => Some(
            value.as_u64().ok_or_else(|| invalid("max_tokens: Input should be a valid integer"))?,
        ),
    };
    let stream = match object.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => *stream,
        Some(_) => return Err(invalid("stream: Input should be a valid boolean")),
    };
    let thinking = match object.get("thinking") {
        None | Some(Value::Null) => flavor == Flavor::DeepSeek && model.thinking_default,
        Some(Value::Object(options)) => match options.get("type").and_then(Value::as_str) {
            Some("disabled") => false,
            Some("enabled") => {
                let budget = options.get("budget_tokens").and_then(Value::as_u64);
                if flavor == Flavor::Anthropic {
                    let Some(budget) = budget else {
                        return Err(invalid("thinking.enabled.budget_tokens: Field required"));
                    };
                    if budget < 1024 {
                        return Err(invalid(
                            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
                        ));
                    }
                    if max_tokens.is_some_and(|max| budget >= max) {
                        return Err(invalid(
                            "`max_tokens` must be greater than `thinking.budget_tokens`",
                        ));
                    }
                }
                true
            }
            // The model decides how much to think (Claude 4.6 and later).
            Some("adaptive") if flavor == Flavor::Anthropic => true,
            _ => {
                return Err(invalid(
                    "thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'",
                ));
            }
        },
        Some(_) => return Err(invalid("thinking: Input should be an object")),
    };
    let effort_max = object
        .get("output_config")
        .and_then(|config| config.get("effort"))
        .and_then(Value::as_str)
        .is_some_and(|effort| effort == "max");

    let mut breakpoints = Breakpoints::default();
    let tools = parse_tools(object, &mut breakpoints)?;
    let mut messages = Vec::new();
    match object.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(text_message(Role::System, text)),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for (index, block) in blocks.iter().enumerate() {
                if block.get("type").and_then(Value::as_str) != Some("text") {
                    return Err(invalid(format!("system.{index}: Input should be a text block")));
                }
                let piece = block.get("text").and_then(Value::as_str).unwrap_or_default();
                if piece.is_empty() {
                    return Err(invalid(format!(
                        "system.{index}: text content blocks must be non-empty"
                    )));
                }
                text.push_str(piece);
                if block.get("cache_control").is_some() {
                    breakpoints.system = true;
                    breakpoints.count += 1;
                }
            }
            messages.push(text_message(Role::System, &text));
        }
        Some(_) => return Err(invalid("system: Input should be a valid string or list")),
    }
    let system_messages = messages.len();

    let Some(turns) = object.get("messages").and_then(Value::as_array) else {
        return Err(invalid("messages: Field required"));
    };
    if turns.is_empty() {
        return Err(invalid("messages: at least one message is required"));
    }
    let raw_turns = raw.messages.unwrap_or_default();
    let mut previous_calls: Vec<String> = Vec::new();
    let mut previous_role: Option<&str> = None;
    for (index, turn) in turns.iter().enumerate() {
        let role = turn.get("role").and_then(Value::as_str).unwrap_or_default();
        if !matches!(role, "user" | "assistant") {
            return Err(invalid(format!(
                "messages.{index}.role: Input should be 'user' or 'assistant'"
            )));
        }
        if index == 0 && role != "user" {
            return Err(invalid("messages: the first message must use the \"user\" role"));
        }
        if previous_role == Some(role) {
            // Anthropic would merge them; the mock is stricter so that a client's own merging
            // is what gets tested.
            return Err(invalid(format!(
                "messages.{index}: roles must alternate between \"user\" and \"assistant\" (two {role} turns in a row)"
            )));
        }
        previous_role = Some(role);
        let blocks: Vec<Value> = match turn.get("content") {
            Some(Value::String(text)) => vec![json!({"type": "text", "text": text})],
            Some(Value::Array(blocks)) => blocks.clone(),
            _ => return Err(invalid(format!("messages.{index}.content: Field required"))),
        };
        if blocks.is_empty() {
            return Err(invalid(format!(
                "messages.{index}.content: at least one content block is required"
            )));
        }
        let raw_blocks: Vec<&RawValue> = raw_turns
            .get(index)
            .and_then(|turn| turn.content)
            .and_then(|content| serde_json::from_str(content.get()).ok())
            .unwrap_or_default();
        let before = messages.len();
        if role == "user" {
            user_turn(
                model.images,
                index,
                &blocks,
                &previous_calls,
                &mut messages,
                &mut breakpoints,
            )?;
            previous_calls.clear();
        } else {
            previous_calls = assistant_turn(
                index,
                &blocks,
                &raw_blocks,
                thinking,
                flavor,
                &mut messages,
                &mut breakpoints,
            )?;
            let last_is_tool_turn = index + 2 == turns.len() && !previous_calls.is_empty();
            if thinking && flavor == Flavor::Anthropic && last_is_tool_turn {
                let first =
                    blocks.first().and_then(|block| block.get("type")).and_then(Value::as_str);
                if !matches!(first, Some("thinking" | "redacted_thinking")) {
                    return Err(invalid(format!(
                        "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks).",
                        first.unwrap_or("nothing")
                    )));
                }
            }
        }
        if breakpoints.pending {
            breakpoints.pending = false;
            if messages.len() > before {
                breakpoints.after.push(messages.len() - 1);
            }
        }
    }
    if !previous_calls.is_empty() {
        return Err(invalid(format!(
            "messages: `tool_use` ids were found without `tool_result` blocks immediately after: {}",
            previous_calls.join(", ")
        )));
    }
    if breakpoints.count > MAX_BREAKPOINTS {
        return Err(invalid(format!(
            "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
            breakpoints.count
        )));
    }
    let chat = ChatRequest {
        model,
        messages,
        thinking,
        effort_max,
        tools,
        max_tokens,
        stream,
        include_usage: true,
        user_id: object
            .get("metadata")
            .and_then(|metadata| metadata.get("user_id"))
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    let positions = match flavor {
        Flavor::DeepSeek => Vec::new(),
        Flavor::Anthropic => positions(&chat, &breakpoints, system_messages),
    };
    Ok(MessagesRequest { chat, breakpoints: positions })
}

fn text_message(role: Role, text: &str) -> Message {
    Message {
        role,
        content: Some(text.to_owned()),
        reasoning_content: None,
        tool_calls: Vec::new(),
        tool_call_id: None,
        images: Vec::new(),
    }
}

fn parse_tools(
    object: &Map<String, Value>,
    breakpoints: &mut Breakpoints,
) -> Result<Vec<Tool>, ApiError> {
    let Some(tools) = object.get("tools") else { return Ok(Vec::new()) };
    let Some(tools) = tools.as_array() else {
        return Err(invalid("tools: Input should be a valid list"));
    };
    let mut out = Vec::with_capacity(tools.len());
    for (index, tool) in tools.iter().enumerate() {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
        if !valid_name {
            return Err(invalid(format!(
                "tools.{index}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )));
        }
        let Some(schema) = tool.get("input_schema") else {
            return Err(invalid(format!("tools.{index}.input_schema: Field required")));
        };
        if tool.get("cache_control").is_some() {
            breakpoints.tools = index + 1 == tools.len() || breakpoints.tools;
            breakpoints.count += 1;
        }
        // What the model reads of a tool (the breakpoint marker is not part of it).
        let description = tool.get("description").and_then(Value::as_str).unwrap_or_default();
        let function_json =
            json!({"name": name, "description": description, "input_schema": schema}).to_string();
        out.push(Tool { name: name.to_owned(), function_json });
    }
    Ok(out)
}

fn block_text(block: &Value, index: usize, position: usize) -> Result<&str, ApiError> {
    let text = block.get("text").and_then(Value::as_str).unwrap_or_default();
    // Anthropic's API refuses whitespace-only text as well as empty text.
    if text.trim().is_empty() {
        return Err(invalid(format!(
            "messages.{index}.content.{position}.text: text content blocks must contain \
             non-whitespace text"
        )));
    }
    Ok(text)
}

/// An `image` block (`source` of type `base64`) of a model that reads images.
fn image_block(block: &Value, at: &str, images_ok: bool) -> Result<Image, ApiError> {
    if !images_ok {
        return Err(invalid(format!("{at}: this model does not support image input")));
    }
    let source = block.get("source");
    let kind = source.and_then(|source| source.get("type")).and_then(Value::as_str);
    if kind != Some("base64") {
        return Err(invalid(format!("{at}.source.type: only `base64` is accepted")));
    }
    let field = |name: &str| source.and_then(|source| source.get(name)).and_then(Value::as_str);
    let (Some(media_type), Some(data)) = (field("media_type"), field("data")) else {
        return Err(invalid(format!("{at}.source: media_type and data are required strings")));
    };
    Image::decode(media_type, data).map_err(|why| invalid(format!("{at}.source: {why}")))
}

fn user_turn(
    images_ok: bool,
    index: usize,
    blocks: &[Value],
    calls: &[String],
    messages: &mut Vec<Message>,
    breakpoints: &mut Breakpoints,
) -> Result<(), ApiError> {
    let mut answered: Vec<&str> = Vec::new();
    let mut after_text = false;
    for (position, block) in blocks.iter().enumerate() {
        breakpoints.mark(block, index, position)?;
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                after_text = true;
                messages.push(text_message(Role::User, block_text(block, index, position)?));
            }
            Some("tool_result") => {
                let id = block.get("tool_use_id").and_then(Value::as_str).unwrap_or_default();
                if !calls.iter().any(|call| call == id) {
                    return Err(invalid(format!(
                        "messages.{index}.content.{position}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    )));
                }
                if after_text {
                    return Err(invalid(format!(
                        "messages.{index}: `tool_result` blocks must come before any other content in a user message"
                    )));
                }
                let mut images = Vec::new();
                let content = match block.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(parts)) => {
                        for (part_index, part) in parts.iter().enumerate() {
                            if part.get("type").and_then(Value::as_str) == Some("image") {
                                let at = format!(
                                    "messages.{index}.content.{position}.content.{part_index}"
                                );
                                images.push(image_block(part, &at, images_ok)?);
                            }
                        }
                        parts
                            .iter()
                            .filter_map(|part| part.get("text").and_then(Value::as_str))
                            .collect::<Vec<_>>()
                            .join("")
                    }
                    Some(_) => {
                        return Err(invalid(format!(
                            "messages.{index}.content.{position}.content: Input should be a valid string or list"
                        )));
                    }
                };
                answered.push(id);
                messages.push(Message {
                    role: Role::Tool,
                    content: Some(content),
                    reasoning_content: None,
                    tool_calls: Vec::new(),
                    tool_call_id: Some(id.to_owned()),
                    images,
                });
            }
            Some("image") => {
                after_text = true;
                let image =
                    image_block(block, &format!("messages.{index}.content.{position}"), images_ok)?;
                // An image joins the user message before it (a text-less turn: a message of its own).
                match messages.last_mut() {
                    Some(last) if last.role == Role::User && position > 0 => {
                        last.images.push(image)
                    }
                    _ => {
                        let mut message = text_message(Role::User, "");
                        message.images.push(image);
                        messages.push(message);
                    }
                }
            }
            other => {
                return Err(invalid(format!(
                    "messages.{index}.content.{position}: a user turn cannot hold a `{}` block",
                    other.unwrap_or("untyped")
                )));
            }
        }
    }
    let missing: Vec<&str> =
        calls.iter().map(String::as_str).filter(|call| !answered.contains(call)).collect();
    if !missing.is_empty() {
        return Err(invalid(format!(
            "messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: {}",
            missing.join(", ")
        )));
    }
    Ok(())
}

/// One assistant turn; returns the ids of its tool calls.
fn assistant_turn(
    index: usize,
    blocks: &[Value],
    raw_blocks: &[&RawValue],
    thinking: bool,
    flavor: Flavor,
    messages: &mut Vec<Message>,
    breakpoints: &mut Breakpoints,
) -> Result<Vec<String>, ApiError> {
    let mut message = Message {
        role: Role::Assistant,
        content: Some(String::new()),
        reasoning_content: None,
        tool_calls: Vec::new(),
        tool_call_id: None,
        images: Vec::new(),
    };
    for (position, block) in blocks.iter().enumerate() {
        breakpoints.mark(block, index, position)?;
        let at = |field: &str| format!("messages.{index}.content.{position}.{field}");
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = block_text(block, index, position)?;
                if let Some(content) = &mut message.content {
                    content.push_str(text);
                }
            }
            Some("thinking") => {
                let text = block.get("thinking").and_then(Value::as_str).unwrap_or_default();
                let Some(given) = block.get("signature").and_then(Value::as_str) else {
                    return Err(invalid(format!("{}: Field required", at("thinking.signature"))));
                };
                // DeepSeek's endpoint does not check signatures; Anthropic's does.
                if flavor == Flavor::Anthropic && given != signature(text) {
                    return Err(invalid(format!(
                        "{}: Invalid `signature` in `thinking` block",
                        at("signature")
                    )));
                }
                if thinking {
                    message.reasoning_content.get_or_insert_with(String::new).push_str(text);
                }
            }
            Some("redacted_thinking") => {
                if flavor == Flavor::DeepSeek {
                    return Err(invalid(format!(
                        "{}: redacted_thinking is not supported",
                        at("type")
                    )));
                }
                if block.get("data").and_then(Value::as_str).is_none() {
                    return Err(invalid(format!("{}: Field required", at("data"))));
                }
            }
            Some("tool_use") => {
                let id = block.get("id").and_then(Value::as_str).unwrap_or_default();
                let name = block.get("name").and_then(Value::as_str).unwrap_or_default();
                if id.is_empty() || name.is_empty() {
                    return Err(invalid(format!("{}: Field required", at("id"))));
                }
                if !block.get("input").is_some_and(Value::is_object) {
                    return Err(invalid(format!(
                        "{}: Input should be a valid dictionary",
                        at("input")
                    )));
                }
                // The input exactly as the client wrote it: a re-serialized one would render
                // differently from the answer the mock streamed, and miss the cache.
                let raw_input = raw_blocks
                    .get(position)
                    .and_then(|raw| serde_json::from_str::<RawInput<'_>>(raw.get()).ok())
                    .and_then(|raw| raw.input)
                    .map_or_else(|| "{}".to_owned(), |input| input.get().to_owned());
                message.tool_calls.push(ToolCall {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    arguments: raw_input,
                });
            }
            other => {
                return Err(invalid(format!(
                    "{}: an assistant turn cannot hold a `{}` block",
                    at("type"),
                    other.unwrap_or("untyped")
                )));
            }
        }
    }
    let calls = message.tool_calls.iter().map(|call| call.id.clone()).collect();
    messages.push(message);
    Ok(calls)
}

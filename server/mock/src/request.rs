//! Parsing and validation of a chat-completion request body (docs/mock.md, "Validation", steps
//! 2–4).
//!
//! The body is first parsed as untyped JSON to tell syntax errors (400) from field-type errors
//! (422), then checked semantically (400). Tool `function` objects are kept as raw JSON text and
//! minified, so the rendering sees them in the received key order without relying on serde_json's
//! `preserve_order` feature. The context-length checks need the rendering and live in the server.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::knobs::{MockConfig, ModelConfig, PassbackRule};

/// A message role after validation (`developer` maps to `System` when it is allowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One tool call of an assistant message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One validated message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    pub role: Role,
    pub content: Option<String>,
    /// `None` when the key is absent or null.
    pub reasoning_content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    /// Images after the text (user and tool messages of a model that reads images).
    pub images: Vec<Image>,
}

/// An image a message carries, as the rendering sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Image {
    /// FNV-1a of its decoded bytes.
    pub digest: u64,
    /// Its token count ([`crate::tokenizer::image_tokens`]).
    pub tokens: u64,
}

impl Image {
    /// The image of `media_type` and base64 `data`: an error message when the media type is
    /// not one models read or the data is not base64 of an image of that type.
    pub fn decode(media_type: &str, data: &str) -> Result<Image, String> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|error| format!("image data is not valid base64: {error}"))?;
        let matches = match media_type {
            "image/png" => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            "image/jpeg" => bytes.starts_with(&[0xff, 0xd8, 0xff]),
            "image/gif" => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
            "image/webp" => bytes.len() >= 12 && &bytes[8..12] == b"WEBP",
            other => {
                return Err(format!(
                    "image media type {other:?} is not one of image/png, image/jpeg, image/gif, \
                     image/webp"
                ));
            }
        };
        if !matches {
            return Err(format!("image data is not a valid {media_type} image"));
        }
        Ok(Image {
            digest: crate::tokenizer::fnv1a(0xcbf2_9ce4_8422_2325, &bytes),
            tokens: crate::tokenizer::image_tokens(bytes.len()),
        })
    }
}

/// The text and images of a chat content array (`text` and `image_url` parts), or the error
/// message naming what is wrong.
fn content_parts(parts: &[Value], index: usize) -> Result<(String, Vec<Image>), String> {
    let mut text = String::new();
    let mut images = Vec::new();
    for (position, part) in parts.iter().enumerate() {
        let at = format!("messages[{index}].content[{position}]");
        match part.get("type").and_then(Value::as_str) {
            Some("text") => match part.get("text").and_then(Value::as_str) {
                Some(piece) => text.push_str(piece),
                None => return Err(format!("{at}.text: must be a string")),
            },
            Some("image_url") => {
                let url = part
                    .get("image_url")
                    .and_then(|image| image.get("url"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{at}.image_url.url: must be a string"))?;
                let (media_type, data) = url
                    .strip_prefix("data:")
                    .and_then(|rest| rest.split_once(";base64,"))
                    .ok_or_else(|| format!("{at}: only data: URLs with base64 are accepted"))?;
                images.push(Image::decode(media_type, data).map_err(|why| format!("{at}: {why}"))?);
            }
            other => {
                return Err(format!(
                    "{at}: unknown content part type {}",
                    other.map_or("(none)".to_owned(), |other| format!("`{other}`"))
                ));
            }
        }
    }
    Ok((text, images))
}

impl Message {
    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }
}

/// One tool definition: its name and its `function` object as compact JSON in received order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tool {
    pub name: String,
    pub function_json: String,
}

/// A validated chat-completion request.
#[derive(Debug, Clone)]
pub(crate) struct ChatRequest {
    pub model: ModelConfig,
    pub messages: Vec<Message>,
    pub thinking: bool,
    pub effort_max: bool,
    pub tools: Vec<Tool>,
    pub max_tokens: Option<u64>,
    pub stream: bool,
    pub include_usage: bool,
    pub user_id: Option<String>,
}

impl ChatRequest {
    pub fn has_tools(&self) -> bool {
        !self.tools.is_empty()
    }

    /// The content of the last `user` message.
    pub fn last_user_text(&self) -> &str {
        self.messages.iter().rev().find(|m| m.role == Role::User).map_or("", Message::text)
    }

    /// The content of the last `user` or `tool` message: where directives are read.
    pub fn last_input_text(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find(|m| matches!(m.role, Role::User | Role::Tool))
            .map_or("", Message::text)
    }
}

/// Parses and validates `body` (validation steps 2–4; the context-length checks are step 5).
pub(crate) fn parse(body: &[u8], config: &MockConfig) -> Result<ChatRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|error| {
        ApiError::invalid(format!("Failed to parse the request body as JSON: {error}"))
    })?;
    let Value::Object(object) = &value else {
        return Err(ApiError::field_type("expected struct ChatCompletionRequest"));
    };
    let typed = check_types(object)?;
    let raw_functions = raw_tool_functions(body)?;
    check_semantics(typed, raw_functions, config)
}

/// The fields after the 422 checks, before the semantic ones.
struct Typed<'a> {
    model: &'a str,
    messages: Vec<(&'a str, &'a Map<String, Value>)>,
    thinking: Option<bool>,
    effort: Option<&'a str>,
    max_tokens: Option<u64>,
    stop_count: usize,
    tools: Vec<(&'a str, &'a str)>,
    tool_choice: Option<&'a Value>,
    stream: bool,
    include_usage: bool,
    user_id: Option<&'a str>,
    /// `response_format` is `{"type":"json_object"}`.
    json_object: bool,
}

fn missing(field: &str) -> ApiError {
    ApiError::field_type(format!("missing field `{field}`"))
}

fn non_null<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|value| !value.is_null())
}

fn check_types(object: &Map<String, Value>) -> Result<Typed<'_>, ApiError> {
    let model = match object.get("model") {
        None => return Err(missing("model")),
        Some(Value::String(model)) => model.as_str(),
        Some(_) => return Err(ApiError::field_type("model: expected a string")),
    };
    let thinking = match non_null(object, "thinking") {
        None => None,
        Some(Value::Object(options)) => match options.get("type") {
            Some(Value::String(kind)) if kind == "enabled" => Some(true),
            Some(Value::String(kind)) if kind == "disabled" => Some(false),
            Some(Value::String(kind)) => {
                return Err(ApiError::field_type(format!(
                    "thinking.type: unknown variant `{kind}`, expected `enabled` or `disabled`"
                )));
            }
            None => return Err(ApiError::field_type("thinking: missing field `type`")),
            Some(_) => {
                return Err(ApiError::field_type(
                    "thinking.type: expected `enabled` or `disabled`",
                ));
            }
        },
        Some(_) => return Err(ApiError::field_type("thinking: expected struct ThinkingOptions")),
    };
    let effort = match non_null(object, "reasoning_effort") {
        None => None,
        Some(Value::String(effort)) => Some(effort.as_str()),
        Some(_) => return Err(ApiError::field_type("reasoning_effort: expected a string")),
    };
    let max_tokens = match non_null(object, "max_tokens") {
        None => None,
        Some(value) => Some(
            value
                .as_u64()
                .ok_or_else(|| ApiError::field_type("max_tokens: expected an unsigned integer"))?,
        ),
    };
    let stop_count = match non_null(object, "stop") {
        None => 0,
        Some(Value::String(_)) => 1,
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items.len(),
        Some(_) => {
            return Err(ApiError::field_type("stop: expected a string or a sequence of strings"));
        }
    };
    let stream = match non_null(object, "stream") {
        None => false,
        Some(Value::Bool(stream)) => *stream,
        Some(_) => return Err(ApiError::field_type("stream: expected a boolean")),
    };
    let include_usage = match non_null(object, "stream_options") {
        None => false,
        Some(Value::Object(options)) => match non_null(options, "include_usage") {
            None => false,
            Some(Value::Bool(include)) => *include,
            Some(_) => {
                return Err(ApiError::field_type(
                    "stream_options.include_usage: expected a boolean",
                ));
            }
        },
        Some(_) => {
            return Err(ApiError::field_type("stream_options: expected struct StreamOptions"));
        }
    };
    let user_id = match non_null(object, "user_id") {
        None => None,
        Some(Value::String(user_id)) => Some(user_id.as_str()),
        Some(_) => return Err(ApiError::field_type("user_id: expected a string")),
    };
    let json_object = match non_null(object, "response_format") {
        None => false,
        Some(Value::Object(format)) => match format.get("type") {
            Some(Value::String(kind)) if kind == "text" => false,
            Some(Value::String(kind)) if kind == "json_object" => true,
            Some(Value::String(kind)) => {
                return Err(ApiError::field_type(format!(
                    "response_format.type: unknown variant `{kind}`, expected `text` or \
                     `json_object`"
                )));
            }
            None => return Err(ApiError::field_type("response_format: missing field `type`")),
            Some(_) => {
                return Err(ApiError::field_type(
                    "response_format.type: expected `text` or `json_object`",
                ));
            }
        },
        Some(_) => {
            return Err(ApiError::field_type("response_format: expected struct ResponseFormat"));
        }
    };
    let tool_choice = match non_null(object, "tool_choice") {
        None => None,
        Some(choice @ (Value::String(_) | Value::Object(_))) => Some(choice),
        Some(_) => {
            return Err(ApiError::field_type("tool_choice: expected a string or an object"));
        }
    };
    let tools = match non_null(object, "tools") {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            let mut tools = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                let kind = item.get("type").and_then(Value::as_str).unwrap_or("function");
                let name = item
                    .get("function")
                    .and_then(|function| function.get("name"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ApiError::field_type(format!(
                            "tools[{index}].function: missing field `name`"
                        ))
                    })?;
                tools.push((kind, name));
            }
            tools
        }
        Some(_) => return Err(ApiError::field_type("tools: expected a sequence")),
    };
    let messages = match object.get("messages") {
        None => return Err(missing("messages")),
        Some(Value::Array(items)) => {
            let mut messages = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                let Value::Object(message) = item else {
                    return Err(ApiError::field_type(format!(
                        "messages[{index}]: expected struct Message"
                    )));
                };
                let role = match message.get("role") {
                    None => {
                        return Err(ApiError::field_type(format!(
                            "messages[{index}]: missing field `role`"
                        )));
                    }
                    Some(Value::String(role)) => role.as_str(),
                    Some(_) => {
                        return Err(ApiError::field_type(format!(
                            "messages[{index}].role: expected a string"
                        )));
                    }
                };
                check_message_types(index, role, message)?;
                messages.push((role, message));
            }
            messages
        }
        Some(_) => return Err(ApiError::field_type("messages: expected a sequence")),
    };
    Ok(Typed {
        model,
        messages,
        thinking,
        effort,
        max_tokens,
        stop_count,
        tools,
        tool_choice,
        stream,
        include_usage,
        user_id,
        json_object,
    })
}

/// Type checks of the assistant- and tool-specific fields of one message.
fn check_message_types(
    index: usize,
    role: &str,
    message: &Map<String, Value>,
) -> Result<(), ApiError> {
    let type_error = |field: &str, expected: &str| {
        ApiError::field_type(format!("messages[{index}].{field}: expected {expected}"))
    };
    if role == "assistant" {
        if let Some(content) = non_null(message, "content")
            && !content.is_string()
        {
            return Err(type_error("content", "a string"));
        }
        if let Some(reasoning) = non_null(message, "reasoning_content")
            && !reasoning.is_string()
        {
            return Err(type_error("reasoning_content", "a string"));
        }
        match non_null(message, "tool_calls") {
            None => {}
            Some(Value::Array(calls)) => {
                for (call_index, call) in calls.iter().enumerate() {
                    let field = format!("tool_calls[{call_index}]");
                    let id = call.get("id").and_then(Value::as_str);
                    let name = call
                        .get("function")
                        .and_then(|function| function.get("name"))
                        .and_then(Value::as_str);
                    let arguments = call
                        .get("function")
                        .and_then(|function| function.get("arguments"))
                        .and_then(Value::as_str);
                    if id.is_none() || name.is_none() || arguments.is_none() {
                        return Err(type_error(
                            &field,
                            "struct ToolCall {id, function: {name, arguments: string}}",
                        ));
                    }
                }
            }
            Some(_) => return Err(type_error("tool_calls", "a sequence")),
        }
    }
    if role == "tool" {
        match message.get("tool_call_id") {
            Some(Value::String(_)) => {}
            None | Some(Value::Null) => {
                return Err(ApiError::field_type(format!(
                    "messages[{index}]: missing field `tool_call_id`"
                )));
            }
            Some(_) => return Err(type_error("tool_call_id", "a string")),
        }
    }
    Ok(())
}

/// Only the raw `function` objects of `tools`, borrowed from the body in received key order.
#[derive(Deserialize)]
struct RawTools<'a> {
    #[serde(borrow, default)]
    tools: Option<Vec<RawTool<'a>>>,
}

#[derive(Deserialize)]
struct RawTool<'a> {
    #[serde(borrow)]
    function: &'a RawValue,
}

fn raw_tool_functions(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let raw: RawTools<'_> = serde_json::from_slice(body)
        .map_err(|error| ApiError::field_type(format!("tools: {error}")))?;
    Ok(raw.tools.unwrap_or_default().iter().map(|tool| minify(tool.function.get())).collect())
}

/// Drops insignificant whitespace outside strings; everything else is kept byte for byte.
pub(crate) fn minify(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut in_string = false;
    let mut escaped = false;
    for character in json.chars() {
        if in_string {
            out.push(character);
            if escaped {
                escaped = false;
            } else if character == '\\' {
                escaped = true;
            } else if character == '"' {
                in_string = false;
            }
        } else if character == '"' {
            in_string = true;
            out.push(character);
        } else if !matches!(character, ' ' | '\t' | '\n' | '\r') {
            out.push(character);
        }
    }
    out
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

fn check_semantics(
    typed: Typed<'_>,
    raw_functions: Vec<String>,
    config: &MockConfig,
) -> Result<ChatRequest, ApiError> {
    let model = config
        .models
        .iter()
        .find(|model| model.id == typed.model)
        .ok_or_else(|| ApiError::invalid("Model Not Exist"))?
        .clone();
    if typed.messages.is_empty() {
        return Err(ApiError::invalid("messages: must not be empty"));
    }
    let strict = &config.strictness;
    let mut messages = Vec::with_capacity(typed.messages.len());
    for (index, (role_name, message)) in typed.messages.iter().enumerate() {
        let role = match *role_name {
            "system" => Role::System,
            "developer" if !strict.reject_developer_role => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => {
                return Err(ApiError::invalid(format!(
                    "messages[{index}]: unknown variant `{other}`, expected one of `system`, `user`, `assistant`, `tool`"
                )));
            }
        };
        let mut images = Vec::new();
        let content = match non_null(message, "content") {
            None => None,
            Some(Value::String(content)) => Some(content.clone()),
            // Content parts: text and images in user messages of a model that reads images;
            // text alone in tool messages (OpenAI's rule: images only in user messages).
            Some(Value::Array(parts)) if model.images && role == Role::User => {
                let (text, parsed) = content_parts(parts, index).map_err(ApiError::invalid)?;
                images = parsed;
                Some(text)
            }
            Some(Value::Array(parts)) if model.images && role == Role::Tool => {
                let (text, parsed) = content_parts(parts, index).map_err(ApiError::invalid)?;
                if !parsed.is_empty() {
                    return Err(ApiError::invalid(format!(
                        "messages[{index}]: image URLs are only allowed for messages with role \
                         'user', but this message with role 'tool' contains an image URL"
                    )));
                }
                Some(text)
            }
            Some(_) => None,
        };
        if matches!(role, Role::System | Role::User | Role::Tool) && content.is_none() {
            return Err(ApiError::invalid(format!("messages[{index}]: content must be a string")));
        }
        let tool_calls: Vec<ToolCall> = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .map(|call| ToolCall {
                        id: str_at(call, &["id"]),
                        name: str_at(call, &["function", "name"]),
                        arguments: str_at(call, &["function", "arguments"]),
                    })
                    .collect()
            })
            .unwrap_or_default();
        if role == Role::Assistant
            && strict.reject_null_content_without_tool_calls
            && content.is_none()
            && tool_calls.is_empty()
        {
            return Err(ApiError::invalid(format!(
                "messages[{index}]: content or tool_calls must be set"
            )));
        }
        messages.push(Message {
            role,
            content,
            reasoning_content: non_null(message, "reasoning_content")
                .and_then(Value::as_str)
                .map(str::to_owned),
            tool_calls,
            tool_call_id: message.get("tool_call_id").and_then(Value::as_str).map(str::to_owned),
            images,
        });
    }
    check_tool_pairing(&messages)?;

    if typed.tools.len() > 128 {
        return Err(ApiError::invalid("tools: at most 128 tools are supported"));
    }
    let mut tools = Vec::with_capacity(typed.tools.len());
    for (index, ((kind, name), function_json)) in typed.tools.iter().zip(raw_functions).enumerate()
    {
        if *kind != "function" {
            return Err(ApiError::invalid(format!(
                "tools[{index}].type: only `function` is supported"
            )));
        }
        if !valid_tool_name(name) {
            return Err(ApiError::invalid(format!(
                "tools[{index}].function.name: `{name}` must match ^[a-zA-Z0-9_-]{{1,64}}$"
            )));
        }
        tools.push(Tool { name: (*name).to_owned(), function_json });
    }
    if typed.stop_count > 16 {
        return Err(ApiError::invalid("stop: at most 16 stop sequences are supported"));
    }
    let effort_max = match typed.effort {
        None | Some("low" | "medium" | "high" | "minimal") => false,
        Some("xhigh" | "max" | "ultra") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "reasoning_effort: unknown value `{other}`, expected one of low, medium, high, xhigh, max"
            )));
        }
    };
    let thinking = typed.thinking.unwrap_or(model.thinking_default);
    let forced_choice = match typed.tool_choice {
        Some(Value::String(choice)) => choice == "required",
        Some(Value::Object(_)) => true,
        _ => false,
    };
    if thinking && forced_choice && strict.thinking_rejects_forced_tool_choice {
        return Err(ApiError::invalid("Thinking mode does not support this tool_choice"));
    }
    if thinking && !tools.is_empty() {
        let missing_passback = messages.iter().any(|message| {
            message.role == Role::Assistant
                && message.reasoning_content.is_none()
                && match strict.reasoning_passback {
                    PassbackRule::AllAssistant => true,
                    PassbackRule::ToolCallTurns => !message.tool_calls.is_empty(),
                    PassbackRule::Off => false,
                }
        });
        if missing_passback {
            return Err(ApiError::invalid(
                "The `reasoning_content` in the thinking mode must be passed back to the API.",
            ));
        }
    }
    // DeepSeek's JSON Output: the prompt (a system or user message) must say "json".
    if typed.json_object
        && !messages.iter().any(|message| {
            matches!(message.role, Role::System | Role::User)
                && message.text().to_ascii_lowercase().contains("json")
        })
    {
        return Err(ApiError::invalid(
            "Prompt must contain the word 'json' in some form to use 'response_format' of type \
             'json_object'.",
        ));
    }
    Ok(ChatRequest {
        model,
        messages,
        thinking,
        effort_max,
        tools,
        max_tokens: typed.max_tokens,
        stream: typed.stream,
        include_usage: typed.include_usage,
        user_id: typed.user_id.map(str::to_owned),
    })
}

fn str_at(value: &Value, path: &[&str]) -> String {
    let mut current = value;
    for key in path {
        match current.get(key) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    current.as_str().unwrap_or("").to_owned()
}

/// Tool messages answer the nearest earlier assistant's calls, and every call is answered before
/// the next user or assistant message.
fn check_tool_pairing(messages: &[Message]) -> Result<(), ApiError> {
    let mut open: Vec<&str> = Vec::new();
    let mut offered: Vec<&str> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        match message.role {
            Role::Tool => {
                let id = message.tool_call_id.as_deref().unwrap_or("");
                if !offered.contains(&id) {
                    return Err(ApiError::invalid(format!(
                        "messages[{index}]: tool_call_id `{id}` does not match any tool call of the preceding assistant message"
                    )));
                }
                open.retain(|open_id| *open_id != id);
            }
            Role::User | Role::Assistant => {
                if let Some(unanswered) = open.first() {
                    return Err(ApiError::invalid(format!(
                        "messages[{index}]: tool call `{unanswered}` must be answered by a tool message before the next user or assistant message"
                    )));
                }
                if message.role == Role::Assistant {
                    offered = message.tool_calls.iter().map(|call| call.id.as_str()).collect();
                    open = offered.clone();
                }
            }
            Role::System => {}
        }
    }
    Ok(())
}

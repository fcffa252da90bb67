//! What the mock answers: queued scripts, in-text directives, or echo (docs/mock.md, "Answers").
//!
//! A script is consumed by the first request it matches. Without a matching script, the last
//! user or tool text is scanned for `[[fake:tool NAME JSON]]`, `[[fake:say TEXT]]` and
//! `[[fake:think TEXT]]`; without directives the mock echoes the last user text.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::request::ChatRequest;

/// Which requests a script applies to; every present field must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptMatch {
    /// The requested model id.
    pub model: Option<String>,
    /// Whether the request has a non-empty `tools` list.
    pub has_tools: Option<bool>,
    /// Whether thinking is on for the request.
    pub thinking: Option<bool>,
    /// A substring of the last user message.
    pub last_user_contains: Option<String>,
    /// The request number (the `seq` of `/_fake/requests`, counting from 1).
    pub nth: Option<u64>,
}

/// One scripted tool call. `arguments` is a JSON string; a JSON object is accepted and
/// serialized compactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// Function name.
    pub name: String,
    /// The arguments string, sent verbatim.
    #[serde(deserialize_with = "arguments_string")]
    pub arguments: String,
}

fn arguments_string<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let value = Value::deserialize(deserializer)?;
    Ok(match value {
        Value::String(text) => text,
        other => other.to_string(),
    })
}

/// Keep-alive comments (or blank lines, non-streaming) before the response starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Keepalive {
    /// Number of keep-alive lines.
    pub count: u32,
    /// Pause before each one.
    pub interval_ms: u64,
}

/// A scripted response (`POST /_fake/script` takes a JSON array of these).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Script {
    /// Which request the script answers; an empty match answers the next request.
    #[serde(rename = "match")]
    pub matcher: ScriptMatch,
    /// Reasoning text (sent only when thinking is on).
    pub reasoning: Option<String>,
    /// Content text.
    pub content: Option<String>,
    /// Tool calls, in order.
    pub tool_calls: Vec<ScriptToolCall>,
    /// `stop`, `length`, `tool_calls`, `content_filter` or `insufficient_system_resource`.
    pub finish_reason: Option<String>,
    /// Keep-alive lines before the first frame.
    pub keepalive: Keepalive,
    /// Pause before the first frame.
    pub delay_ms: u64,
    /// Fields merged over the computed usage object.
    pub usage_override: Option<Value>,
}

impl ScriptMatch {
    pub(crate) fn matches(&self, request: &ChatRequest, seq: u64) -> bool {
        self.model.as_ref().is_none_or(|model| *model == request.model.id)
            && self.has_tools.is_none_or(|has_tools| has_tools == request.has_tools())
            && self.thinking.is_none_or(|thinking| thinking == request.thinking)
            && self
                .last_user_contains
                .as_ref()
                .is_none_or(|needle| request.last_user_text().contains(needle.as_str()))
            && self.nth.is_none_or(|nth| nth == seq)
    }
}

/// The response to generate, before it is cut into frames.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Plan {
    pub reasoning: String,
    pub content: String,
    pub tool_calls: Vec<ScriptToolCall>,
    pub finish_reason: Option<String>,
    pub keepalive: Keepalive,
    pub delay_ms: u64,
    pub usage_override: Option<Value>,
}

impl Plan {
    pub fn from_script(script: Script, request: &ChatRequest) -> Plan {
        Plan {
            reasoning: if request.thinking {
                script.reasoning.unwrap_or_default()
            } else {
                String::new()
            },
            content: script.content.unwrap_or_default(),
            tool_calls: script.tool_calls,
            finish_reason: script.finish_reason,
            keepalive: script.keepalive,
            delay_ms: script.delay_ms,
            usage_override: script.usage_override,
        }
    }

    /// Directive mode if the last input text has a usable directive, echo mode otherwise.
    pub fn from_request(request: &ChatRequest) -> Plan {
        let directives = parse_directives(request.last_input_text());
        let head: String = request.last_user_text().chars().take(40).collect();
        let echo_reasoning =
            if request.thinking { format!("thinking about: {head}") } else { String::new() };
        let tool_calls: Vec<ScriptToolCall> =
            if request.has_tools() { directives.tool_calls } else { Vec::new() };
        let any = !tool_calls.is_empty() || directives.say.is_some() || directives.think.is_some();
        if !any {
            return Plan {
                reasoning: echo_reasoning,
                content: format!("ok: {head}"),
                ..Plan::default()
            };
        }
        let reasoning = match directives.think {
            Some(think) if request.thinking => think,
            _ => echo_reasoning,
        };
        let content = directives.say.unwrap_or_default();
        Plan { reasoning, content, tool_calls, ..Plan::default() }
    }
}

/// Directives found in one text.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Directives {
    pub tool_calls: Vec<ScriptToolCall>,
    pub say: Option<String>,
    pub think: Option<String>,
}

const OPEN: &str = "[[fake:";

/// Scans `text` for directives. Malformed directives are ignored.
pub(crate) fn parse_directives(text: &str) -> Directives {
    let mut out = Directives::default();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let after = &rest[start + OPEN.len()..];
        let consumed = if let Some(body) = after.strip_prefix("tool ") {
            parse_tool(body).map(|(call, used)| {
                out.tool_calls.push(call);
                "tool ".len() + used
            })
        } else if let Some(body) = after.strip_prefix("say ") {
            body.find("]]").map(|end| {
                out.say.get_or_insert_with(String::new).push_str(&body[..end]);
                "say ".len() + end + 2
            })
        } else if let Some(body) = after.strip_prefix("think ") {
            body.find("]]").map(|end| {
                out.think.get_or_insert_with(String::new).push_str(&body[..end]);
                "think ".len() + end + 2
            })
        } else {
            None
        };
        rest = &after[consumed.unwrap_or(0)..];
    }
    out
}

/// Parses `NAME JSON]]` where JSON is one balanced JSON value; returns the call and the bytes
/// used, including the closing `]]`.
fn parse_tool(body: &str) -> Option<(ScriptToolCall, usize)> {
    let trimmed = body.trim_start();
    let name_start = body.len() - trimmed.len();
    let name_len = trimmed.find(char::is_whitespace)?;
    let name = &trimmed[..name_len];
    let after_name = &trimmed[name_len..];
    let json_text = after_name.trim_start();
    let json_start = name_start + name_len + (after_name.len() - json_text.len());
    let mut values =
        serde_json::Deserializer::from_str(json_text).into_iter::<&serde_json::value::RawValue>();
    let raw = values.next()?.ok()?;
    let json_len = values.byte_offset();
    let tail = &json_text[json_len..];
    let tail_trimmed = tail.trim_start();
    if !tail_trimmed.starts_with("]]") {
        return None;
    }
    let used = json_start + json_len + (tail.len() - tail_trimmed.len()) + 2;
    Some((ScriptToolCall { name: name.to_owned(), arguments: raw.get().to_owned() }, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_directive_takes_a_balanced_json_value_with_spaces_and_nesting() {
        let text = r#"please [[fake:tool read_file {"path": "a b.rs", "opts": {"lines": [1, 2]}, "s": "]]"} ]] and [[fake:say done]]"#;
        let directives = parse_directives(text);
        assert_eq!(directives.tool_calls.len(), 1);
        assert_eq!(directives.tool_calls[0].name, "read_file");
        assert_eq!(
            directives.tool_calls[0].arguments,
            r#"{"path": "a b.rs", "opts": {"lines": [1, 2]}, "s": "]]"}"#
        );
        assert_eq!(directives.say.as_deref(), Some("done"));
    }

    #[test]
    fn several_tool_directives_keep_their_order() {
        let text = "[[fake:tool a {}]][[fake:tool b {\"x\":1}]] [[fake:think hmm]]";
        let directives = parse_directives(text);
        let names: Vec<&str> = directives.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(directives.tool_calls[1].arguments, "{\"x\":1}");
        assert_eq!(directives.think.as_deref(), Some("hmm"));
    }

    #[test]
    fn malformed_directives_are_ignored() {
        let directives = parse_directives("[[fake:tool broken {\"a\": ]] [[fake:unknown x]]");
        assert_eq!(directives, Directives::default());
    }
}

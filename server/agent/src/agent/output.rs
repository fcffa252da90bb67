//! A turn's structured answer (`session/prompt`'s `outputSchema`, docs/scripting.md,
//! "Structured answers"): the JSON Schema the final answer must validate against
//! ([`OutputSchema`]), the logged note that tells the model the shape, the answer read from the
//! model's last text, and the logged correction that asks once more.
//!
//! Everything the model is told here is text the loop logs as a `context/message` (source
//! `outputSchema` for the shape, `outputInvalid` for the correction), so the requests stay a
//! pure function of the log. The provider's JSON mode, where its format has one, is part of the
//! logged call config ([`OutputSchema::response_format`]).

use std::sync::Arc;

use dsh_session::{ContextMessage, LlmCallConfig, ProviderKind, ResponseFormat};
use serde_json::Value;

/// The `source` of the context note that gives the model the shape of its answer.
pub const OUTPUT_SCHEMA_SOURCE: &str = "outputSchema";

/// The `source` of the context note that asks the model once more, naming what is wrong.
pub const OUTPUT_INVALID_SOURCE: &str = "outputInvalid";

/// The largest schema accepted, serialized: it is logged and sent with the turn's requests.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// At most this many problems are named, each cut to [`MAX_PROBLEM_CHARS`].
const MAX_PROBLEMS: usize = 10;
const MAX_PROBLEM_CHARS: usize = 300;

/// A JSON Schema the turn's final answer must validate against, checked and compiled.
#[derive(Clone)]
pub struct OutputSchema {
    schema: Value,
    validator: Arc<jsonschema::Validator>,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema").field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl OutputSchema {
    /// Checks `schema` and compiles it. Refused: a value that is not an object or a boolean,
    /// a schema over [`MAX_SCHEMA_BYTES`], one that its meta-schema rejects, and one whose
    /// `$ref` points outside it (no URL or file is ever fetched). The error says why.
    pub fn new(schema: Value) -> Result<OutputSchema, String> {
        if !(schema.is_object() || schema.is_boolean()) {
            return Err("a JSON Schema is an object (or a boolean)".to_owned());
        }
        let size = serde_json::to_vec(&schema).map_or(usize::MAX, |bytes| bytes.len());
        if size > MAX_SCHEMA_BYTES {
            return Err(format!(
                "the schema is {size} bytes; at most {MAX_SCHEMA_BYTES} are taken"
            ));
        }
        // Built without the crate's remote resolvers (no `resolve-http`, no `resolve-file`):
        // an external `$ref` fails here instead of making the daemon fetch it.
        let validator = jsonschema::validator_for(&schema)
            .map_err(|error| format!("not a valid JSON Schema: {}", cut(&error.to_string())))?;
        Ok(OutputSchema { schema, validator: Arc::new(validator) })
    }

    /// The schema as given.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The context note that tells the model the shape of its final answer. It says `JSON`:
    /// DeepSeek's JSON mode refuses a prompt that does not.
    pub(super) fn note(&self) -> ContextMessage {
        let schema = serde_json::to_string_pretty(&self.schema).unwrap_or_default();
        let text = format!(
            "Answer format: when you are done, your final message must be one JSON value and \
             nothing else (no prose around it), valid against this JSON Schema:\n{schema}"
        );
        ContextMessage {
            text,
            source: Some(OUTPUT_SCHEMA_SOURCE.to_owned()),
            instructions: None,
            files: None,
        }
    }

    /// The provider's JSON mode for a request under `config`: DeepSeek's `json_object` when
    /// the schema asks for an object (the mode only gives objects); none for other formats —
    /// the note alone asks for the shape there.
    pub(super) fn response_format(&self, config: &LlmCallConfig) -> Option<ResponseFormat> {
        let object = self.schema.get("type").and_then(Value::as_str) == Some("object");
        (object && config.kind() == ProviderKind::Deepseek).then_some(ResponseFormat::JsonObject)
    }

    /// The answer in `text` (the model's last message), when it is a JSON value that validates;
    /// otherwise what is wrong with it, bounded ([`MAX_PROBLEMS`]).
    pub(super) fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        let answer = answer_text(text);
        let value: Value = serde_json::from_str(answer)
            .map_err(|error| vec![format!("the answer is not a JSON value: {error}")])?;
        let mut problems = Vec::new();
        let mut more = 0usize;
        for error in self.validator.iter_errors(&value) {
            if problems.len() == MAX_PROBLEMS {
                more += 1;
                continue;
            }
            let path = error.instance_path().to_string();
            let place = if path.is_empty() { "the answer".to_owned() } else { path };
            problems.push(cut(&format!("{place}: {error}")));
        }
        if more > 0 {
            problems.push(format!("and {more} more"));
        }
        if problems.is_empty() { Ok(value) } else { Err(problems) }
    }
}

/// The JSON of an answer: the whole text, trimmed, or — tolerated, since models write it even
/// when told not to — the inside of one fenced block (```` ```json ```` or ```` ``` ````) that
/// is the whole text. Nothing else is looked for: text around a value makes it invalid.
fn answer_text(text: &str) -> &str {
    let trimmed = text.trim();
    let fenced = trimmed
        .strip_prefix("```")
        .and_then(|rest| rest.strip_suffix("```"))
        .and_then(|inner| inner.split_once('\n'))
        .filter(|(language, _)| {
            let language = language.trim();
            language.is_empty() || language.eq_ignore_ascii_case("json")
        });
    match fenced {
        Some((_, body)) if !body.contains("```") => body.trim(),
        _ => trimmed,
    }
}

/// The correction: a context note naming what is wrong with the answer, asking once more.
pub(super) fn correction(problems: &[String]) -> ContextMessage {
    let list: String = problems.iter().map(|problem| format!("\n- {problem}")).collect();
    let text = format!(
        "Your last message is not a valid answer: it must be one JSON value, valid against \
         the JSON Schema given above.{list}\nAnswer again with the corrected JSON value only."
    );
    ContextMessage {
        text,
        source: Some(OUTPUT_INVALID_SOURCE.to_owned()),
        instructions: None,
        files: None,
    }
}

/// The turn's error when the answer was still invalid after the correction.
pub(super) fn failure(problems: &[String]) -> String {
    format!("the answer does not match the output schema: {}", problems.join("; "))
}

/// `text` cut to [`MAX_PROBLEM_CHARS`] characters, marked when cut.
fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_PROBLEM_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;

//! The output schema: what is refused, how an answer is read and checked.
#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

fn person() -> OutputSchema {
    OutputSchema::new(json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": false
    }))
    .unwrap()
}

#[test]
fn a_schema_that_is_not_a_json_schema_is_refused_with_the_reason() {
    let not_object = OutputSchema::new(json!([1])).unwrap_err();
    assert!(not_object.contains("is an object"), "{not_object}");
    let bad_type = OutputSchema::new(json!({"type": "integr"})).unwrap_err();
    assert!(bad_type.starts_with("not a valid JSON Schema"), "{bad_type}");
    let huge = OutputSchema::new(json!({"description": "x".repeat(MAX_SCHEMA_BYTES)})).unwrap_err();
    assert!(huge.contains("at most"), "{huge}");
}

#[test]
fn a_remote_reference_is_refused_not_fetched() {
    let error =
        OutputSchema::new(json!({"$ref": "https://example.invalid/schema.json"})).unwrap_err();
    assert!(error.starts_with("not a valid JSON Schema"), "{error}");
}

#[test]
fn a_valid_answer_gives_its_value() {
    let value = person().check(" {\"name\": \"Ada\", \"age\": 36}\n").unwrap();
    assert_eq!(value, json!({"name": "Ada", "age": 36}));
}

#[test]
fn one_fenced_block_that_is_the_whole_answer_is_tolerated() {
    let schema = person();
    for text in
        ["```json\n{\"name\":\"Ada\",\"age\":36}\n```", "```\n{\"name\":\"Ada\",\"age\":36}```"]
    {
        assert_eq!(schema.check(text).unwrap(), json!({"name": "Ada", "age": 36}), "{text}");
    }
    // Prose around the value, or a fence of another language, is not an answer.
    for text in [
        "Here it is: {\"name\":\"Ada\",\"age\":36}",
        "```python\n{\"name\":\"Ada\",\"age\":36}\n```",
        "```json\n{\"name\":\"Ada\",\"age\":36}\n```\nDone.",
    ] {
        let problems = schema.check(text).unwrap_err();
        assert!(problems[0].starts_with("the answer is not a JSON value"), "{problems:?}");
    }
}

#[test]
fn validation_errors_name_the_place_and_are_bounded() {
    let problems = person().check(r#"{"name": 3, "extra": true}"#).unwrap_err();
    let text = problems.join("\n");
    assert!(text.contains("/name: 3 is not of type \"string\""), "{text}");
    assert!(text.contains("the answer: \"age\" is a required property"), "{text}");
    assert!(text.contains("extra"), "{text}");

    let many = OutputSchema::new(json!({"type": "array", "items": {"type": "string"}})).unwrap();
    let answer = serde_json::to_string(&(0..25).collect::<Vec<u32>>()).unwrap();
    let problems = many.check(&answer).unwrap_err();
    assert_eq!(problems.len(), MAX_PROBLEMS + 1, "{problems:?}");
    assert_eq!(problems.last().unwrap(), "and 15 more");
}

#[test]
fn the_json_mode_is_deepseeks_for_an_object_schema_only() {
    let deepseek = LlmCallConfig {
        model: "m".to_owned(),
        profile: None,
        wire: None,
        max_tokens: 1,
        thinking: false,
        reasoning_effort: None,
        temperature: None,
        top_p: None,
        response_format: None,
    };
    assert_eq!(person().response_format(&deepseek), Some(ResponseFormat::JsonObject));
    let array = OutputSchema::new(json!({"type": "array"})).unwrap();
    assert_eq!(array.response_format(&deepseek), None);
    let anthropic = LlmCallConfig {
        wire: Some(dsh_session::WireFormat {
            kind: ProviderKind::Anthropic,
            thinking_object: false,
            reasoning_passback: false,
            max_completion_tokens: false,
            no_cache_control: false,
            thinking_budget: None,
            adaptive_thinking: false,
        }),
        ..deepseek
    };
    assert_eq!(person().response_format(&anthropic), None);
}

#[test]
fn the_note_says_json_and_carries_the_schema() {
    let note = person().note();
    assert_eq!(note.source.as_deref(), Some(OUTPUT_SCHEMA_SOURCE));
    assert!(note.text.contains("JSON Schema:\n{\n"), "{}", note.text);
    assert!(note.text.contains("\"additionalProperties\": false"), "{}", note.text);
    let correction = correction(&["/age: \"x\" is not of type \"integer\"".to_owned()]);
    assert!(correction.text.contains("\n- /age: \"x\" is not of type \"integer\"\n"));
}

//! The answer a plan gives (docs/mock.md, "Answers"): the token budget and the finish reason
//! applied, ids drawn, completion tokens counted; the cache namespace of a request, and the
//! answer as the next request renders it when replayed faithfully.

use serde_json::Value;

use super::admission::{Validated, validate};
use crate::cache::Namespace;
use crate::error::ApiError;
use crate::fault::Fault;
use crate::knobs::MockConfig;
use crate::render;
use crate::request::{ChatRequest, Message, Role, ToolCall};
use crate::response::{OutCall, Output, truncate_pieces};
use crate::script::Plan;
use crate::tokenizer;

/// The answer a fresh mock gives to `body`, without a key, state, cache or faults: validation
/// steps 2–5, then the scripted-less plan (directives or echo) and its output. Returns the
/// prompt's and the completion's token counts.
pub(crate) fn answer_without_state(
    body: &[u8],
    config: &MockConfig,
) -> Result<(u64, u64), ApiError> {
    let Validated { request, prompt, .. } = validate(body, config)?;
    let plan = Plan::from_request(&request);
    let mut ids = crate::state::IdGen::new(config.seed);
    let (_output, completion_tokens, _reasoning_tokens) =
        generate(&request, &plan, &Fault::default(), &mut ids, config.created);
    Ok((prompt.len() as u64, completion_tokens))
}

/// The configured namespace components of a request.
pub(super) fn namespace_of(config: &MockConfig, key: &str, request: &ChatRequest) -> Namespace {
    config
        .cache
        .namespace
        .iter()
        .map(|component| {
            let value = match component.as_str() {
                "key" => key.to_owned(),
                "user_id" => request.user_id.clone().unwrap_or_default(),
                "model" => request.model.id.clone(),
                "max_tokens" => request.max_tokens.map(|max| max.to_string()).unwrap_or_default(),
                "stream" => request.stream.to_string(),
                _ => String::new(),
            };
            (component.clone(), value)
        })
        .collect()
}

/// The answer as the next request renders it when replayed faithfully (docs/mock.md,
/// "Prefix-cache accounting").
pub(super) fn output_segments(request: &ChatRequest, output: &Output) -> Vec<tokenizer::Segment> {
    let message = Message {
        role: Role::Assistant,
        content: Some(output.content.clone()),
        reasoning_content: Some(output.reasoning.clone()),
        tool_calls: output
            .tool_calls
            .iter()
            .map(|call| ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            })
            .collect(),
        tool_call_id: None,
        images: Vec::new(),
    };
    let mut segments = Vec::new();
    render::push_assistant(
        &message,
        request.thinking,
        request.thinking && request.has_tools(),
        &mut segments,
    );
    segments
}

/// Applies the token budget and the finish reason, draws ids, and counts completion tokens.
pub(super) fn generate(
    request: &ChatRequest,
    plan: &Plan,
    fault: &Fault,
    ids: &mut crate::state::IdGen,
    created: u64,
) -> (Output, u64, u64) {
    let mut reasoning = if request.thinking { plan.reasoning.clone() } else { String::new() };
    let mut content = plan.content.clone();
    let mut calls = plan.tool_calls.clone();
    let mut finish = plan.finish_reason.clone();
    if let Some(budget) = request.max_tokens {
        let wanted = tokenizer::count(&reasoning) + tokenizer::count(&content);
        if wanted > budget {
            let (kept_reasoning, used) = truncate_pieces(&reasoning, budget);
            let (kept_content, _) = truncate_pieces(&content, budget - used);
            reasoning = kept_reasoning;
            content = kept_content;
            calls.clear();
            finish = Some("length".to_owned());
        }
    }
    let finish = fault.finish_reason.clone().or(finish).unwrap_or_else(|| {
        if calls.is_empty() { "stop".to_owned() } else { "tool_calls".to_owned() }
    });
    let id = ids.hex32();
    let tool_calls: Vec<OutCall> = calls
        .into_iter()
        .enumerate()
        .map(|(index, call)| OutCall {
            id: format!("call_{index:02}_{}", ids.alnum(24)),
            name: call.name,
            arguments: call.arguments,
        })
        .collect();
    let reasoning_tokens = tokenizer::count(&reasoning);
    let completion_tokens = reasoning_tokens
        + tokenizer::count(&content)
        + tool_calls
            .iter()
            .map(|call| tokenizer::count(&format!("{}\n{}", call.name, call.arguments)))
            .sum::<u64>()
        + 1;
    let output = Output {
        id,
        created,
        model: request.model.id.clone(),
        thinking: request.thinking,
        reasoning,
        content,
        tool_calls,
        finish_reason: finish,
        usage: Value::Null,
    };
    (output, completion_tokens, reasoning_tokens)
}

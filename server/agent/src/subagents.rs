//! The sub-agent seam: the `task` tool's schema and arguments, and [`Subagents`], which the
//! loop asks to run a call's child session (docs/subagents.md). The daemon implements it — a
//! child is a session like any other, in the same workspace and sandbox, with its own log and
//! owner task — and the loop knows nothing of how: it logs the call's `tool/call`, hands the
//! call over with the boundary of the step that made it (where a `fork` child is cut), awaits
//! the [`TaskReport`] as it awaits a tool, and logs it as the call's `tool/result`. Several
//! calls of one step run at once, up to the seam's `max_parallel`; the children's spend counts
//! against the parent turn's budgets.
//!
//! The schema is constant (no budget or depth in its text): a `fork` child's header is then the
//! parent's, byte for byte, so its first request reuses the parent's cached prefix. A session
//! at the deepest allowed depth is offered no `task` tool when it starts fresh, and one that
//! forked keeps the schema but has its calls refused with the rule.

use dsh_session::{TASK_TOOL, TaskContext, ToolSchema, Usage};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::approval::BoxFuture;
use crate::owner::SessionHandle;

/// The most characters of a `task` call's description.
pub const MAX_TASK_DESCRIPTION_CHARS: usize = 200;

/// The budgets a `task` call asks for (each absent one: the configured `[subagents]` one). They
/// may only lower the configured budgets and what remains of the parent turn's own: the seam
/// clamps a larger one and the call's result says so.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskBudgets {
    /// Steps the child may run.
    pub max_steps: Option<u64>,
    /// Tokens the child may spend.
    pub max_tokens: Option<u64>,
    /// What the child may cost, in USD.
    pub max_cost: Option<f64>,
    /// Seconds the child may run.
    pub timeout_secs: Option<u64>,
}

/// A `task` call's arguments, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskArguments {
    /// Its short description (one line).
    pub description: String,
    /// What the child is asked.
    pub prompt: String,
    /// How the child starts.
    pub context: TaskContext,
    /// The budgets it asks for.
    pub budgets: TaskBudgets,
}

/// One `task` call, checked: what the seam runs.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRequest {
    /// The parent session.
    pub parent: String,
    /// The call.
    pub call_id: String,
    /// Its short description (one line).
    pub description: String,
    /// What the child is asked.
    pub prompt: String,
    /// How the child starts.
    pub context: TaskContext,
    /// Seq of the calling step's `step/start`: a `fork` child holds the parent's events before
    /// it.
    pub boundary_seq: u64,
    /// The budgets the call asks for.
    pub budgets: TaskBudgets,
    /// What remains of the parent turn's own budgets when the child starts (its finished
    /// steps, their children and the calling step counted): a child may spend no more. Steps
    /// are the parent's own and not passed on.
    pub parent_left: crate::TurnLimits,
}

/// What a child's run came to: the call's result and the child's spend.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskReport {
    /// The child session, when one was created.
    pub session_id: Option<String>,
    /// The `tool/result` content: the child's answer and a one-line summary of its spend, or
    /// why it stopped and what it had found so far.
    pub content: String,
    /// Whether the child did not complete (an error, a budget, a cancel, an interruption).
    pub is_error: bool,
    /// The child's usage, summed over its steps.
    pub usage: Usage,
    /// What its priced steps cost, in USD.
    pub usd: f64,
}

/// Runs the child sessions of `task` calls.
pub trait Subagents: Send + Sync {
    /// Whether the `task` tool is in this session's tool schemas.
    fn offered(&self) -> bool;

    /// Why this session may not start children, when it may not (its depth is the deepest
    /// allowed, or sub-agents are off).
    fn refusal(&self) -> Option<String>;

    /// Starts the child of `request` at once (it may wait for a slot of `max_parallel`), its
    /// turn cancelled with `cancel`; the returned future resolves with its report. `parent` is
    /// the calling session's handle: the child is announced there (`task/spawn`) the moment it
    /// exists.
    fn spawn(
        &self,
        request: TaskRequest,
        parent: SessionHandle,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, TaskReport>;
}

/// The `task` tool's schema (constant text).
pub fn task_schema() -> ToolSchema {
    ToolSchema {
        name: TASK_TOOL.to_owned(),
        description: "Delegate a self-contained piece of work — a search, a review, an \
                      investigation — to a sub-agent: a separate conversation with the same \
                      workspace and tools, which works on it alone and returns only its final \
                      answer (with a line on what it spent). Keeps your own context small. \
                      `fresh` starts the sub-agent from your prompt alone (say everything it \
                      needs); `fork` starts it from this conversation so far. Sub-agents run \
                      under budgets of steps, tokens, cost and time; several calls in one step \
                      run at once. Use it for work that needs many tool calls whose details you \
                      do not need; not for a single read or search."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "description": {
                    "type": "string",
                    "description": "What the sub-agent does, in a few words (shown to the user)."
                },
                "prompt": {
                    "type": "string",
                    "description": "The task, in full: what to do and what to answer with."
                },
                "context": {
                    "type": "string",
                    "enum": ["fresh", "fork"],
                    "description": "`fresh`: the sub-agent sees only the prompt. `fork`: it sees this conversation so far, then the prompt."
                },
                "max_steps": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Optional: fewer steps than the configured budget."
                },
                "max_tokens": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Optional: fewer tokens than the configured budget."
                },
                "max_cost": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Optional: a lower cost in USD than the configured budget."
                },
                "timeout_secs": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Optional: fewer seconds than the configured budget."
                }
            },
            "required": ["description", "prompt", "context"],
            "additionalProperties": false
        }),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    description: String,
    prompt: String,
    context: String,
    max_steps: Option<u64>,
    max_tokens: Option<u64>,
    max_cost: Option<f64>,
    timeout_secs: Option<u64>,
}

/// A `task` call's arguments, checked, or the error the model sees (an empty prompt, an unknown
/// context, a missing field, a budget that is not positive …).
pub fn parse_task(arguments: &str) -> Result<TaskArguments, String> {
    let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
    let parsed: Arguments = serde_json::from_str(arguments).map_err(|error| {
        format!(
            "invalid arguments for task: {error}; arguments must be a JSON object with \
             `description`, `prompt` and `context` (\"fresh\" or \"fork\")"
        )
    })?;
    let context = match parsed.context.as_str() {
        "fresh" => TaskContext::Fresh,
        "fork" => TaskContext::Fork,
        other => {
            return Err(format!(
                "task refused: unknown context `{}`; use \"fresh\" (the sub-agent sees only \
                 the prompt) or \"fork\" (it sees this conversation so far)",
                other.escape_debug()
            ));
        }
    };
    if parsed.prompt.trim().is_empty() {
        return Err("task refused: the prompt is empty; say what the sub-agent should do and \
                    what it should answer with"
            .to_owned());
    }
    let description = one_line(&parsed.description);
    if description.is_empty() {
        return Err(
            "task refused: the description is empty; name the work in a few words".to_owned()
        );
    }
    for (key, value) in [
        ("max_steps", parsed.max_steps),
        ("max_tokens", parsed.max_tokens),
        ("timeout_secs", parsed.timeout_secs),
    ] {
        if value == Some(0) {
            return Err(format!(
                "task refused: `{key}` is 0; give a positive number or leave it out"
            ));
        }
    }
    if let Some(cost) = parsed.max_cost.filter(|cost| !(cost.is_finite() && *cost > 0.0)) {
        return Err(format!(
            "task refused: `max_cost` is {cost}; give a positive amount in USD or leave it out"
        ));
    }
    let budgets = TaskBudgets {
        max_steps: parsed.max_steps,
        max_tokens: parsed.max_tokens,
        max_cost: parsed.max_cost,
        timeout_secs: parsed.timeout_secs,
    };
    Ok(TaskArguments { description, prompt: parsed.prompt, context, budgets })
}

/// `text` on one line, cut to [`MAX_TASK_DESCRIPTION_CHARS`].
fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(MAX_TASK_DESCRIPTION_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bad_task_calls_are_refused_with_the_rule() {
        let ok = parse_task(r#"{"description":"find  it\n","prompt":"Find x.","context":"fork"}"#);
        let ok = ok.unwrap();
        assert_eq!((ok.description.as_str(), ok.prompt.as_str()), ("find it", "Find x."));
        assert_eq!((ok.context, ok.budgets), (TaskContext::Fork, TaskBudgets::default()));
        let empty = parse_task(r#"{"description":"d","prompt":"  ","context":"fresh"}"#);
        assert!(empty.unwrap_err().contains("the prompt is empty"));
        let unknown = parse_task(r#"{"description":"d","prompt":"p","context":"sideways"}"#);
        assert!(unknown.unwrap_err().contains("unknown context `sideways`"));
        let missing = parse_task(r#"{"description":"d","prompt":"p"}"#);
        assert!(missing.unwrap_err().contains("missing field `context`"));
        let extra = parse_task(r#"{"description":"d","prompt":"p","context":"fresh","x":1}"#);
        assert!(extra.unwrap_err().contains("unknown field `x`"));
        let long = "w ".repeat(300);
        let args = json!({"description": long, "prompt": "p", "context": "fresh"}).to_string();
        let description = parse_task(&args).unwrap().description;
        assert_eq!(description.chars().count(), MAX_TASK_DESCRIPTION_CHARS + 1);
    }

    #[test]
    fn a_call_may_ask_for_budgets_and_each_must_be_positive() {
        let args = r#"{"description":"d","prompt":"p","context":"fresh","max_steps":3,
                       "max_tokens":900,"max_cost":0.5,"timeout_secs":30}"#;
        let budgets = parse_task(args).unwrap().budgets;
        let asked = TaskBudgets {
            max_steps: Some(3),
            max_tokens: Some(900),
            max_cost: Some(0.5),
            timeout_secs: Some(30),
        };
        assert_eq!(budgets, asked);
        let zero =
            parse_task(r#"{"description":"d","prompt":"p","context":"fresh","max_steps":0}"#);
        assert!(zero.unwrap_err().contains("`max_steps` is 0"));
        let free =
            parse_task(r#"{"description":"d","prompt":"p","context":"fresh","max_cost":-1}"#);
        assert!(free.unwrap_err().contains("`max_cost` is -1"));
        let negative =
            parse_task(r#"{"description":"d","prompt":"p","context":"fresh","max_tokens":-5}"#);
        assert!(negative.unwrap_err().contains("invalid arguments for task"));
    }

    #[test]
    fn the_schema_is_constant_and_names_the_tool() {
        assert_eq!(task_schema(), task_schema());
        assert_eq!(task_schema().name, TASK_TOOL);
    }
}

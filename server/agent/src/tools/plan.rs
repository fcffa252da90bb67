//! `update_plan`: the model's plan, checked against the rules of plans (`dsh_session::check_plan`)
//! and answered with a short, stable result. It touches no file and runs no command; the loop
//! logs the plan it sets as a `plan/update` after the call's result.

use dsh_session::{PlanEntry, PlanStatus, PlanUpdate, check_plan};
use serde::Deserialize;

use super::{Tool, ToolOutput, parse};

/// The call's arguments, as the schema says: unknown fields are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    #[serde(default)]
    explanation: Option<String>,
    plan: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    step: String,
    status: PlanStatus,
}

/// Runs `update_plan` call `call_id`: the output the model sees, and the plan it sets when the
/// call is valid (an error output sets none).
pub(crate) fn update(call_id: &str, arguments: &str) -> (ToolOutput, Option<PlanUpdate>) {
    let parsed = parse::<Arguments>(Tool::UpdatePlan, arguments).and_then(|arguments| {
        let explanation = arguments.explanation.filter(|text| !text.trim().is_empty());
        let plan: Vec<PlanEntry> = arguments
            .plan
            .into_iter()
            .map(|entry| PlanEntry { step: entry.step, status: entry.status })
            .collect();
        match check_plan(explanation.as_deref(), &plan) {
            Ok(()) => Ok(PlanUpdate { call_id: call_id.to_owned(), explanation, plan }),
            Err(rule) => Err(format!("update_plan refused: {rule}; the plan is unchanged")),
        }
    });
    match parsed {
        Ok(update) => (ToolOutput::success(update.tool_result()), Some(update)),
        Err(error) => (ToolOutput::error(error), None),
    }
}

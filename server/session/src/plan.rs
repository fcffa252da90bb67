//! Plans: the model's list of steps with their statuses, kept up to date by its `update_plan`
//! tool, and the current plan as a fold over the log.
//!
//! A valid `update_plan` call's `tool/result` is followed by a `plan/update` event carrying the
//! whole plan (each call replaces it); the model sees only its own call and the short result.
//! [`check_plan`] is the one statement of the rules — the tool refuses what it rejects, and
//! `check_log` reports a logged `plan/update` that breaks them. [`current_plan`] is the last
//! `plan/update` of a log (a fork holds its parent's, so it starts with its parent's plan).

use serde::{Deserialize, Serialize};

use crate::event::{Event, EventData};

/// The name of the plan tool, as the model calls it (and as its `tool/result` names it).
pub const UPDATE_PLAN_TOOL: &str = "update_plan";

/// The most entries one plan may have.
pub const MAX_PLAN_ENTRIES: usize = 50;

/// The most characters one entry's text may have.
pub const MAX_PLAN_STEP_CHARS: usize = 500;

/// The most characters a plan's explanation may have.
pub const MAX_PLAN_EXPLANATION_CHARS: usize = 2_000;

/// Where one entry of a plan stands. Spelled as the tool's argument spells it (`in_progress`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    /// Not started.
    Pending,
    /// Being worked on: at most one entry at a time.
    InProgress,
    /// Done.
    Completed,
}

impl PlanStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
        }
    }
}

/// One entry of a plan.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanEntry {
    /// What the step is, in the model's words (one line, not empty).
    pub step: String,
    /// Where it stands.
    pub status: PlanStatus,
}

/// `plan/update`: the session's plan, replaced whole by the `update_plan` call `callId`, whose
/// successful `tool/result` it follows at once. Not model-visible: the model sees its own call
/// and the tool's short result.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanUpdate {
    /// The `update_plan` call that set it.
    pub call_id: String,
    /// Why the plan is what it is, when the model said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// The entries in order; empty when the model cleared its plan.
    pub plan: Vec<PlanEntry>,
}

impl PlanUpdate {
    /// How many entries are completed.
    pub fn completed(&self) -> usize {
        self.plan.iter().filter(|entry| entry.status == PlanStatus::Completed).count()
    }

    /// The entry in progress, if one is.
    pub fn in_progress(&self) -> Option<&PlanEntry> {
        self.plan.iter().find(|entry| entry.status == PlanStatus::InProgress)
    }

    /// The tool result the model sees for this plan: short and stable ("Plan updated: 2 of 5
    /// steps completed.").
    pub fn tool_result(&self) -> String {
        if self.plan.is_empty() {
            return "Plan cleared.".to_owned();
        }
        format!("Plan updated: {} of {} steps completed.", self.completed(), self.plan.len())
    }
}

/// Checks a plan against the rules: at most [`MAX_PLAN_ENTRIES`] entries, each a non-empty line
/// of at most [`MAX_PLAN_STEP_CHARS`] characters, at most one `in_progress`, an explanation of
/// at most [`MAX_PLAN_EXPLANATION_CHARS`]. The error is the sentence the model reads.
pub fn check_plan(explanation: Option<&str>, plan: &[PlanEntry]) -> Result<(), String> {
    if plan.len() > MAX_PLAN_ENTRIES {
        return Err(format!(
            "a plan has at most {MAX_PLAN_ENTRIES} steps; this one has {}: merge steps",
            plan.len()
        ));
    }
    for (index, entry) in plan.iter().enumerate() {
        let number = index + 1;
        if entry.step.trim().is_empty() {
            return Err(format!("step {number} has no text: every step says what it is"));
        }
        if entry.step.contains(['\n', '\r']) {
            return Err(format!("step {number} spans several lines: a step is one line"));
        }
        let chars = entry.step.chars().count();
        if chars > MAX_PLAN_STEP_CHARS {
            return Err(format!(
                "step {number} has {chars} characters; a step has at most {MAX_PLAN_STEP_CHARS}"
            ));
        }
    }
    let in_progress: Vec<String> = plan
        .iter()
        .enumerate()
        .filter(|(_, entry)| entry.status == PlanStatus::InProgress)
        .map(|(index, _)| (index + 1).to_string())
        .collect();
    if in_progress.len() > 1 {
        return Err(format!(
            "at most one step may be in_progress at a time, and steps {} are: mark the others \
             pending or completed",
            in_progress.join(", ")
        ));
    }
    if let Some(explanation) = explanation {
        let chars = explanation.chars().count();
        if chars > MAX_PLAN_EXPLANATION_CHARS {
            return Err(format!(
                "the explanation has {chars} characters; it has at most {MAX_PLAN_EXPLANATION_CHARS}"
            ));
        }
    }
    Ok(())
}

/// A session's current plan: the last `plan/update` of its log, with its seq.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentPlan {
    /// The seq of the `plan/update` that set it.
    pub seq: u64,
    /// The plan.
    pub update: PlanUpdate,
}

/// The current plan of a log: its last `plan/update` (`None` when the model never set one).
pub fn current_plan(events: &[Event]) -> Option<CurrentPlan> {
    events.iter().rev().find_map(|event| match &event.data {
        EventData::PlanUpdate(update) => {
            Some(CurrentPlan { seq: event.seq, update: update.clone() })
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests;

//! `[subagents]`: the budgets of the child sessions a `task` call runs (docs/config.md,
//! docs/subagents.md). Defaults are conservative — spend nobody asked for is what users of
//! sub-agents complain about most — and a workspace's file only lowers them: a repository may
//! tighten what a child may spend, never loosen it.

use serde::Deserialize;
use toml::Spanned;

use crate::file::Layer;
use crate::resolve::at;
use crate::{ConfigError, Source, Sourced};

/// Steps a child may run by default.
pub const DEFAULT_SUBAGENT_MAX_STEPS: u64 = 20;
/// Tokens (prompt + output, summed over its steps) a child may spend by default.
pub const DEFAULT_SUBAGENT_MAX_TOKENS: u64 = 500_000;
/// Seconds a child may run by default.
pub const DEFAULT_SUBAGENT_TIMEOUT_SECS: u64 = 600;
/// Children of one parent that run at once by default; the rest wait.
pub const DEFAULT_SUBAGENT_MAX_PARALLEL: u64 = 4;
/// How deep children nest by default: 1 — a child cannot start children of its own.
pub const DEFAULT_SUBAGENT_MAX_DEPTH: u64 = 1;

/// `[subagents]` as resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentSettings {
    /// Steps one child may run.
    pub max_steps: Sourced<u64>,
    /// Tokens one child may spend (its steps' prompt and output tokens, summed).
    pub max_tokens: Sourced<u64>,
    /// What one child may cost, in USD; unset by default (a model without a price in USD
    /// cannot run under it).
    pub max_cost: Option<Sourced<f64>>,
    /// Seconds one child may run.
    pub timeout_secs: Sourced<u64>,
    /// Children of one parent that run at once; the rest wait.
    pub max_parallel: Sourced<u64>,
    /// How deep children nest: a session at this depth is offered no `task` tool (0: no
    /// sub-agents at all).
    pub max_depth: Sourced<u64>,
}

impl Default for SubagentSettings {
    fn default() -> SubagentSettings {
        SubagentSettings {
            max_steps: Sourced::new(DEFAULT_SUBAGENT_MAX_STEPS, Source::Default),
            max_tokens: Sourced::new(DEFAULT_SUBAGENT_MAX_TOKENS, Source::Default),
            max_cost: None,
            timeout_secs: Sourced::new(DEFAULT_SUBAGENT_TIMEOUT_SECS, Source::Default),
            max_parallel: Sourced::new(DEFAULT_SUBAGENT_MAX_PARALLEL, Source::Default),
            max_depth: Sourced::new(DEFAULT_SUBAGENT_MAX_DEPTH, Source::Default),
        }
    }
}

/// `[subagents]` as written in one file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSubagents {
    pub max_steps: Option<Spanned<u64>>,
    pub max_tokens: Option<Spanned<u64>>,
    pub max_cost: Option<Spanned<f64>>,
    pub timeout_secs: Option<Spanned<u64>>,
    pub max_parallel: Option<Spanned<u64>>,
    pub max_depth: Option<Spanned<u64>>,
}

/// Merges a layer's `[subagents]`: the user's file sets any value; a workspace's only lowers
/// one (a higher value there is left out). A count that must be positive and is not, or a
/// cost that is not a positive number, is refused with its line.
pub(crate) fn subagent_layer(
    settings: &mut SubagentSettings,
    layer: &Layer,
) -> Result<(), ConfigError> {
    let file = &layer.file.subagents;
    for (key, value, slot, least) in [
        ("max_steps", &file.max_steps, &mut settings.max_steps, 1),
        ("max_tokens", &file.max_tokens, &mut settings.max_tokens, 1),
        ("timeout_secs", &file.timeout_secs, &mut settings.timeout_secs, 1),
        ("max_parallel", &file.max_parallel, &mut settings.max_parallel, 1),
        ("max_depth", &file.max_depth, &mut settings.max_depth, 0),
    ] {
        let Some(value) = value else { continue };
        let source = layer.source(value);
        let number = *value.get_ref();
        if number < least {
            return Err(at(&source, format!("subagents.{key}: {number} is below {least}")));
        }
        if !layer.workspace || number < slot.value {
            *slot = Sourced::new(number, source);
        }
    }
    if let Some(value) = &file.max_cost {
        let source = layer.source(value);
        let cost = *value.get_ref();
        if !(cost.is_finite() && cost > 0.0) {
            return Err(at(
                &source,
                format!("subagents.max_cost: {cost} is not a positive amount in USD"),
            ));
        }
        let lower = settings.max_cost.as_ref().is_none_or(|current| cost < current.value);
        if !layer.workspace || lower {
            settings.max_cost = Some(Sourced::new(cost, source));
        }
    }
    Ok(())
}

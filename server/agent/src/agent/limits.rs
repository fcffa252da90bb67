//! The budgets of one turn ([`TurnLimits`], `session/prompt`'s `limits`): which one a turn has
//! reached, as the `turn/limit` event it logs. Steps, tokens and cost are checked between steps
//! (a step and its tools always finish); the timeout cancels the turn's token, as
//! `session/cancel` does, and [`TurnTimer`] is what fires it.

use std::time::Duration;

use dsh_session::{LimitKind, TurnLimit, Usage};
use tokio_util::sync::CancellationToken;

/// Budgets of one turn; each absent one is not checked. Plain values: the daemon refuses a
/// budget that is not positive before a turn starts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnLimits {
    /// Steps the turn may run.
    pub max_steps: Option<u64>,
    /// Tokens the turn may spend: its finished steps' prompt and output tokens, summed.
    pub max_tokens: Option<u64>,
    /// What the turn's finished steps may cost, in USD, at the configured prices. A step whose
    /// model has no price in USD is not run under it (its cost would be unknown).
    pub max_cost: Option<f64>,
    /// How long the turn may run, from its start.
    pub timeout: Option<Duration>,
}

/// What a turn has spent so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Spent {
    /// Steps run.
    pub steps: u64,
    /// Usage of its finished steps.
    pub usage: Usage,
    /// What its finished steps cost, in USD (0 for steps without a price in USD).
    pub usd: f64,
}

impl TurnLimits {
    /// The first budget `spent` has reached (steps, then tokens, then cost), as its event.
    pub(super) fn reached(&self, spent: &Spent) -> Option<TurnLimit> {
        let tokens = spent.usage.prompt_tokens.saturating_add(spent.usage.completion_tokens);
        if let Some(max) = self.max_steps.filter(|&max| spent.steps >= max) {
            return Some(limit(LimitKind::MaxSteps, max as f64, spent.steps as f64));
        }
        if let Some(max) = self.max_tokens.filter(|&max| tokens >= max) {
            return Some(limit(LimitKind::MaxTokens, max as f64, tokens as f64));
        }
        if let Some(max) = self.max_cost.filter(|&max| spent.usd >= max) {
            return Some(limit(LimitKind::MaxCost, max, spent.usd));
        }
        None
    }

    /// What remains of these budgets after `spent` and `elapsed` (none reached): what a child
    /// started now may spend at most. Steps are not passed on (a child's steps are not the
    /// turn's).
    pub(super) fn left(&self, spent: &Spent, elapsed: Duration) -> TurnLimits {
        let tokens = spent.usage.prompt_tokens.saturating_add(spent.usage.completion_tokens);
        TurnLimits {
            max_steps: None,
            max_tokens: self.max_tokens.map(|max| max.saturating_sub(tokens).max(1)),
            max_cost: self.max_cost.map(|max| (max - spent.usd).max(0.0)),
            timeout: self
                .timeout
                .map(|timeout| timeout.saturating_sub(elapsed).max(Duration::from_millis(1))),
        }
    }

    /// What remains of these (remaining) budgets after one more step spent `usage` and `usd`;
    /// never below one token or zero cost.
    pub(super) fn less(&self, usage: &Usage, usd: f64) -> TurnLimits {
        let tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
        TurnLimits {
            max_tokens: self.max_tokens.map(|left| left.saturating_sub(tokens).max(1)),
            max_cost: self.max_cost.map(|left| (left - usd).max(0.0)),
            ..self.clone()
        }
    }

    /// The `turn/limit` of a turn its timeout cancelled after `elapsed`.
    pub(super) fn timed_out(&self, elapsed: Duration) -> Option<TurnLimit> {
        let timeout = self.timeout?;
        // Milliseconds are plenty, and keep the logged number short.
        let spent = (elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
        Some(limit(LimitKind::Timeout, timeout.as_secs_f64(), spent))
    }
}

fn limit(limit: LimitKind, value: f64, spent: f64) -> TurnLimit {
    TurnLimit { limit, value: number(value), spent: number(spent) }
}

/// `value` as a JSON number: a whole number without a fraction (`2`, not `2.0`).
fn number(value: f64) -> serde_json::Number {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every whole f64 below is exact
    if value.fract() == 0.0 && (0.0..EXACT).contains(&value) {
        return serde_json::Number::from(value as u64);
    }
    serde_json::Number::from_f64(value).unwrap_or_else(|| serde_json::Number::from(0u64))
}

/// The timeout of a running turn: cancels `token` when it fires; dropped with the turn, it
/// fires no more.
pub(super) struct TurnTimer(tokio::task::JoinHandle<()>);

impl TurnTimer {
    pub(super) fn start(timeout: Duration, token: CancellationToken) -> TurnTimer {
        TurnTimer(tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            token.cancel();
        }))
    }
}

impl Drop for TurnTimer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests;

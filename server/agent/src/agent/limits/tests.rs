//! The budgets' arithmetic: when each is reached, and the numbers its event carries.
#![allow(clippy::unwrap_used)]

use super::*;

fn spent(steps: u64, prompt: u64, completion: u64, usd: f64) -> Spent {
    let usage = Usage {
        prompt_tokens: prompt,
        cache_miss_tokens: prompt,
        completion_tokens: completion,
        ..Usage::default()
    };
    Spent { steps, usage, usd }
}

#[test]
fn a_budget_is_reached_once_spent_equals_it() {
    let limits = TurnLimits {
        max_steps: Some(2),
        max_tokens: Some(1000),
        max_cost: Some(0.5),
        timeout: None,
    };
    assert_eq!(limits.reached(&spent(1, 900, 99, 0.49)), None);
    let steps = limits.reached(&spent(2, 0, 0, 0.0)).unwrap();
    assert_eq!(
        (steps.limit, steps.value.to_string(), steps.spent.to_string()),
        (LimitKind::MaxSteps, "2".to_owned(), "2".to_owned())
    );
    let tokens = limits.reached(&spent(1, 900, 100, 0.0)).unwrap();
    assert_eq!((tokens.limit, tokens.spent.to_string()), (LimitKind::MaxTokens, "1000".into()));
    let cost = limits.reached(&spent(1, 0, 0, 0.625)).unwrap();
    assert_eq!(
        (cost.limit, cost.value.to_string(), cost.spent.to_string()),
        (LimitKind::MaxCost, "0.5".to_owned(), "0.625".to_owned())
    );
    assert_eq!(TurnLimits::default().reached(&spent(99, 1 << 40, 1, 1e9)), None);
}

#[test]
fn a_timeout_names_its_budget_and_the_time_spent_to_the_millisecond() {
    let limits = TurnLimits { timeout: Some(Duration::from_secs(2)), ..TurnLimits::default() };
    let limit = limits.timed_out(Duration::from_micros(2_003_456)).unwrap();
    assert_eq!(
        (limit.limit, limit.value.to_string(), limit.spent.to_string()),
        (LimitKind::Timeout, "2".to_owned(), "2.003".to_owned())
    );
    assert_eq!(TurnLimits::default().timed_out(Duration::from_secs(9)), None);
}

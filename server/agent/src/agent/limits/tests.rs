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

#[test]
fn what_is_left_is_each_budget_less_the_spend_and_never_steps() {
    let limits = TurnLimits {
        max_steps: Some(5),
        max_tokens: Some(1000),
        max_cost: Some(0.5),
        timeout: Some(Duration::from_secs(60)),
    };
    let left = limits.left(&spent(2, 700, 100, 0.125), Duration::from_secs(20));
    let expected = TurnLimits {
        max_steps: None,
        max_tokens: Some(200),
        max_cost: Some(0.375),
        timeout: Some(Duration::from_secs(40)),
    };
    assert_eq!(left, expected);
    // The calling step's own spend comes off what its children may spend.
    let usage = spent(0, 150, 10, 0.0).usage;
    let after = left.less(&usage, 0.125);
    assert_eq!((after.max_tokens, after.max_cost), (Some(40), Some(0.25)));
    assert_eq!(after.less(&usage, 1.0).max_tokens, Some(1));
    assert_eq!(
        TurnLimits::default().left(&spent(1, 1, 1, 1.0), Duration::ZERO),
        TurnLimits::default()
    );
}

//! Money: a model's prices and what a step's usage cost at them. Prices are configuration, not
//! log: the views look up the prices of the profile and model a step was pinned to and say which
//! prices they used.

use serde::{Deserialize, Serialize};

use crate::event::Usage;

/// A model's prices, per million tokens.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    /// Input tokens served from the provider's prefix cache.
    pub cache_hit: f64,
    /// Input tokens not served from the cache.
    pub cache_miss: f64,
    /// Output tokens (reasoning included).
    pub output: f64,
    /// Input tokens written to the cache on request (Anthropic's cache writes, billed above the
    /// miss price); `None`: they cost the miss price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    /// The currency, as the provider bills it (`USD`, `CNY`, …).
    pub currency: String,
}

/// What a step (or a sum of steps) cost.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// What was billed: hits at the hit price, cache writes at the write price, the other
    /// misses at the miss price, output.
    pub amount: f64,
    /// What the cache saved: the same usage with every input token at the miss price, minus
    /// `amount`.
    pub saved: f64,
    /// The currency of both.
    pub currency: String,
}

const PER: f64 = 1_000_000.0;

impl Price {
    /// The cost of `usage` at these prices.
    pub fn cost(&self, usage: &Usage) -> Cost {
        let hit = usage.cache_hit_tokens as f64;
        let all_misses = usage.prompt_tokens.saturating_sub(usage.cache_hit_tokens);
        let written = usage.cache_write_tokens.min(all_misses);
        let miss = (all_misses - written) as f64;
        let write = written as f64 * self.cache_write.unwrap_or(self.cache_miss);
        let output = usage.completion_tokens as f64 * self.output;
        let amount = (hit * self.cache_hit + miss * self.cache_miss + write + output) / PER;
        let uncached = (usage.prompt_tokens as f64 * self.cache_miss + output) / PER;
        Cost { amount, saved: uncached - amount, currency: self.currency.clone() }
    }
}

impl Cost {
    /// The sum of two costs in the same currency; `None` when the currencies differ.
    pub fn plus(&self, other: &Cost) -> Option<Cost> {
        (self.currency == other.currency).then(|| Cost {
            amount: self.amount + other.amount,
            saved: self.saved + other.saved,
            currency: self.currency.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u64, hit: u64, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            cache_hit_tokens: hit,
            cache_miss_tokens: prompt - hit,
            completion_tokens: completion,
            reasoning_tokens: 0,
            cache_write_tokens: 0,
        }
    }

    #[test]
    fn a_step_costs_hits_misses_and_output_at_their_prices() {
        let price = Price {
            cache_hit: 0.5,
            cache_miss: 2.0,
            output: 8.0,
            cache_write: None,
            currency: "USD".to_owned(),
        };
        // 1,000,000 prompt tokens, 750,000 of them hits, 100,000 output:
        // 0.75 × 0.5 + 0.25 × 2.0 + 0.1 × 8.0 = 0.375 + 0.5 + 0.8 = 1.675;
        // all misses: 1.0 × 2.0 + 0.8 = 2.8; saved 2.8 − 1.675 = 1.125.
        let cost = price.cost(&usage(1_000_000, 750_000, 100_000));
        assert!((cost.amount - 1.675).abs() < 1e-12, "{cost:?}");
        assert!((cost.saved - 1.125).abs() < 1e-12, "{cost:?}");
        assert_eq!(cost.currency, "USD");
    }

    #[test]
    fn cache_writes_cost_the_write_price_when_there_is_one() {
        let mut price = Price {
            cache_hit: 0.3,
            cache_miss: 3.0,
            output: 15.0,
            cache_write: Some(3.75),
            currency: "USD".to_owned(),
        };
        // 1,000,000 prompt tokens: 200,000 read, 500,000 written, 300,000 plain input.
        let usage = Usage { cache_write_tokens: 500_000, ..usage(1_000_000, 200_000, 0) };
        // 0.2 × 0.3 + 0.3 × 3 + 0.5 × 3.75 = 0.06 + 0.9 + 1.875 = 2.835.
        let cost = price.cost(&usage);
        assert!((cost.amount - 2.835).abs() < 1e-12, "{cost:?}");
        // All input at the miss price: 3.0; the writes cost more than they saved this time.
        assert!((cost.saved - (3.0 - 2.835)).abs() < 1e-12, "{cost:?}");
        price.cache_write = None;
        assert!((price.cost(&usage).amount - (0.06 + 0.8 * 3.0)).abs() < 1e-12);
    }

    #[test]
    fn costs_in_different_currencies_do_not_add() {
        let usd = Cost { amount: 1.0, saved: 0.5, currency: "USD".to_owned() };
        let cny = Cost { amount: 1.0, saved: 0.5, currency: "CNY".to_owned() };
        assert_eq!(usd.plus(&cny), None);
        assert_eq!(usd.plus(&usd).map(|sum| sum.amount), Some(2.0));
    }
}

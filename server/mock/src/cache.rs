//! Prefix-cache accounting (docs/mock.md, "Prefix-cache accounting").
//!
//! Each namespace holds a set of cache units `(L, h(L))`: a prefix length and the chained hash of
//! the first `L` tokens. A request hits the longest visible unit that is a prefix of its own token
//! sequence, capped and rounded down to the granularity. `block` mode stores a unit at every
//! multiple of the granularity; `units` mode stores only the units the V4 guide describes, so a
//! client that replays an assistant turn unfaithfully loses the end-of-output unit.
//!
//! Time comes from `tokio::time::Instant` so tests can pause it; it never reaches a response.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use tokio::time::{Duration, Instant};

use crate::knobs::{CacheConfig, CacheMode};
use crate::tokenizer::{Token, fnv1a};

/// Cache namespace: the configured components of (key, user_id, model, ...).
pub(crate) type Namespace = Vec<(String, String)>;

/// Why a unit was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Block,
    Input,
    Output,
    Lcp,
    Interval,
    Breakpoint,
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Block => "block",
            Origin::Input => "input",
            Origin::Output => "output",
            Origin::Lcp => "lcp",
            Origin::Interval => "interval",
            Origin::Breakpoint => "breakpoint",
        }
    }
}

#[derive(Debug, Clone)]
struct Unit {
    origin: Origin,
    visible_at: Instant,
    last_used: Instant,
}

#[derive(Debug, Default)]
struct Space {
    units: BTreeMap<(u64, u64), Unit>,
    /// Earlier prompts, for common-prefix detection in `units` mode.
    prompts: Vec<Vec<Token>>,
}

/// At most this many earlier prompts per namespace are kept for common-prefix detection.
const MAX_PROMPTS: usize = 256;

/// The chained prefix hashes of a token sequence: `hashes[L]` = `h(L)`, `hashes[0]` = seed.
pub(crate) fn prefix_hashes(tokens: &[Token]) -> Vec<u64> {
    let mut out = Vec::with_capacity(tokens.len() + 1);
    let mut state = 0xcbf2_9ce4_8422_2325_u64;
    out.push(state);
    for token in tokens {
        state = fnv1a(state, &token.0.to_le_bytes());
        out.push(state);
    }
    out
}

/// The whole cache store.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    spaces: HashMap<Namespace, Space>,
    miss_next: u64,
}

impl Cache {
    pub fn clear(&mut self) {
        self.spaces.clear();
    }

    pub fn arm_miss_next(&mut self, count: u64) {
        self.miss_next += count;
    }

    /// The reported hit for `tokens` in `namespace` (steps 1–4 of the hit calculation).
    pub fn hit(
        &mut self,
        config: &CacheConfig,
        namespace: &Namespace,
        tokens: &[Token],
        now: Instant,
    ) -> u64 {
        let granularity = config.granularity.max(1);
        let length = tokens.len() as u64;
        let cap = if config.withhold_final_block { length.saturating_sub(1) } else { length };
        self.longest_unit(config, namespace, tokens, cap, now) / granularity * granularity
    }

    /// Anthropic's lookup: the longest visible unit no longer than `limit` (the last
    /// breakpoint), exact to the token — no granularity, nothing withheld; `miss-next` applies.
    pub fn breakpoint_hit(
        &mut self,
        config: &CacheConfig,
        namespace: &Namespace,
        tokens: &[Token],
        limit: u64,
        now: Instant,
    ) -> u64 {
        let limit = limit.min(tokens.len() as u64);
        self.longest_unit(config, namespace, tokens, limit, now)
    }

    /// The length of the longest visible unit of `namespace` that is a prefix of `tokens` no
    /// longer than `limit` (marked used); 0 when none, or when a `miss-next` is armed (one
    /// count is consumed).
    fn longest_unit(
        &mut self,
        config: &CacheConfig,
        namespace: &Namespace,
        tokens: &[Token],
        limit: u64,
        now: Instant,
    ) -> u64 {
        let hashes = prefix_hashes(tokens);
        let mut best = 0;
        if let Some(space) = self.spaces.get_mut(namespace) {
            expire(space, config, now);
            let mut best_key = None;
            for ((unit_length, hash), unit) in &space.units {
                let matches = *unit_length <= limit
                    && *unit_length > best
                    && unit.visible_at <= now
                    && hashes.get(*unit_length as usize) == Some(hash);
                if matches {
                    best = *unit_length;
                    best_key = Some((*unit_length, *hash));
                }
            }
            if let Some(unit) = best_key.and_then(|key| space.units.get_mut(&key)) {
                unit.last_used = now;
            }
        }
        if self.miss_next > 0 {
            self.miss_next -= 1;
            return 0;
        }
        best
    }

    /// Anthropic's write: a unit at each breakpoint position of the prompt.
    pub fn persist_breakpoints(
        &mut self,
        namespace: &Namespace,
        prompt: &[Token],
        positions: &[u64],
        now: Instant,
        delay: Duration,
    ) {
        let hashes = prefix_hashes(prompt);
        let space = self.spaces.entry(namespace.clone()).or_default();
        for &position in positions {
            if position > 0 && position <= prompt.len() as u64 {
                insert(space, &hashes, position, Origin::Breakpoint, now + delay, now);
            }
        }
    }

    /// Stores the input units of a prompt whose response has started.
    pub fn persist_input(
        &mut self,
        config: &CacheConfig,
        namespace: &Namespace,
        prompt: &[Token],
        now: Instant,
        delay: Duration,
    ) {
        let hashes = prefix_hashes(prompt);
        let space = self.spaces.entry(namespace.clone()).or_default();
        let visible_at = now + delay;
        let length = prompt.len() as u64;
        match config.mode {
            CacheMode::Block => {
                insert_multiples(
                    space,
                    &hashes,
                    config.granularity,
                    Origin::Block,
                    visible_at,
                    now,
                );
            }
            CacheMode::Units => {
                insert(space, &hashes, length, Origin::Input, visible_at, now);
                let lcps: Vec<u64> =
                    space.prompts.iter().map(|earlier| common_prefix(earlier, prompt)).collect();
                for lcp in lcps {
                    if lcp >= config.granularity.max(1) {
                        insert(space, &hashes, lcp, Origin::Lcp, visible_at, now);
                    }
                }
                insert_multiples(
                    space,
                    &hashes,
                    config.interval,
                    Origin::Interval,
                    visible_at,
                    now,
                );
                if space.prompts.len() >= MAX_PROMPTS {
                    space.prompts.remove(0);
                }
                space.prompts.push(prompt.to_vec());
            }
        }
    }

    /// Stores the output units of a successful completion; `completed` = prompt ⊕ output.
    pub fn persist_output(
        &mut self,
        config: &CacheConfig,
        namespace: &Namespace,
        completed: &[Token],
        now: Instant,
        delay: Duration,
    ) {
        let hashes = prefix_hashes(completed);
        let space = self.spaces.entry(namespace.clone()).or_default();
        let visible_at = now + delay;
        match config.mode {
            CacheMode::Block => {
                insert_multiples(
                    space,
                    &hashes,
                    config.granularity,
                    Origin::Block,
                    visible_at,
                    now,
                );
            }
            CacheMode::Units => {
                let length = completed.len() as u64;
                insert(space, &hashes, length, Origin::Output, visible_at, now);
                insert_multiples(
                    space,
                    &hashes,
                    config.interval,
                    Origin::Interval,
                    visible_at,
                    now,
                );
            }
        }
    }

    /// The `GET /_fake/cache` view.
    pub fn snapshot(&self, now: Instant) -> Value {
        let mut spaces: Vec<(&Namespace, &Space)> = self.spaces.iter().collect();
        spaces.sort_by(|a, b| a.0.cmp(b.0));
        let namespaces: Vec<Value> = spaces
            .into_iter()
            .map(|(namespace, space)| {
                let components: serde_json::Map<String, Value> = namespace
                    .iter()
                    .map(|(name, value)| {
                        // The view never shows a whole API key.
                        let shown = if name == "key" { redact(value) } else { value.clone() };
                        (name.clone(), Value::String(shown))
                    })
                    .collect();
                let units: Vec<Value> = space
                    .units
                    .iter()
                    .map(|((length, hash), unit)| {
                        json!({
                            "length": length,
                            "hash": format!("{hash:016x}"),
                            "origin": unit.origin.name(),
                            "visible": unit.visible_at <= now,
                        })
                    })
                    .collect();
                json!({"namespace": components, "units": units})
            })
            .collect();
        json!({"miss_next": self.miss_next, "namespaces": namespaces})
    }
}

fn redact(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let last4: String = chars[chars.len().saturating_sub(4)..].iter().collect();
    format!("****{last4}")
}

#[cfg(test)]
mod tests;

fn common_prefix(a: &[Token], b: &[Token]) -> u64 {
    a.iter().zip(b).take_while(|(x, y)| x == y).count() as u64
}

fn expire(space: &mut Space, config: &CacheConfig, now: Instant) {
    if let Some(ttl) = config.ttl_ms {
        let ttl = Duration::from_millis(ttl);
        space.units.retain(|_, unit| now.saturating_duration_since(unit.last_used) < ttl);
    }
}

fn insert(
    space: &mut Space,
    hashes: &[u64],
    length: u64,
    origin: Origin,
    visible_at: Instant,
    now: Instant,
) {
    let Some(hash) = hashes.get(length as usize) else { return };
    if length == 0 {
        return;
    }
    // An existing unit keeps its origin and the earlier visibility.
    space
        .units
        .entry((length, *hash))
        .and_modify(|unit| {
            unit.last_used = now;
            if visible_at < unit.visible_at {
                unit.visible_at = visible_at;
            }
        })
        .or_insert(Unit { origin, visible_at, last_used: now });
}

fn insert_multiples(
    space: &mut Space,
    hashes: &[u64],
    step: u64,
    origin: Origin,
    visible_at: Instant,
    now: Instant,
) {
    if step == 0 {
        return;
    }
    let length = hashes.len().saturating_sub(1) as u64;
    let mut at = step;
    while at <= length {
        insert(space, hashes, at, origin, visible_at, now);
        at += step;
    }
}

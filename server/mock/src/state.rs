//! The mutable state shared by all handlers, and the records of received requests.
//!
//! One `std::sync::Mutex` guards everything; it is never held across an `.await`, so handlers
//! and stream producers take it briefly, copy what they need, and release it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::cache::Cache;
use crate::error::MockError;
use crate::fault::Fault;
use crate::knobs::MockConfig;
use crate::script::Script;

/// One request received on a chat-completion endpoint, as `GET /_fake/requests` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// Sequence number, counting from 1 in arrival order.
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// Request path, e.g. `/chat/completions`.
    pub path: String,
    /// Request headers in received order; `authorization` is redacted to its last 4 characters.
    pub headers: Vec<(String, String)>,
    /// The exact body bytes.
    pub body: Vec<u8>,
    /// The `model` field, when the body had one.
    pub model: Option<String>,
    /// The `user_id` field, when the body had one.
    pub user_id: Option<String>,
    /// The rendered segments (docs/mock.md, "Rendering"), markers written as `⟦X⟧`; empty when
    /// validation failed.
    pub segments: Vec<String>,
    /// Token count of the rendering.
    pub prompt_tokens: u64,
    /// Reported cache-hit tokens.
    pub hit: u64,
    /// Reported cache-miss tokens.
    pub miss: u64,
    /// Reported completion tokens.
    pub completion_tokens: u64,
    /// HTTP status answered.
    pub status: u16,
    /// `in_progress`, `ok`, `rejected`, `fault_http`, `dropped`, `stalled`, `malformed`,
    /// `aborted` (client went away) or `shutdown`.
    pub outcome: String,
}

impl RecordedRequest {
    /// The JSON form served by `GET /_fake/requests`.
    pub fn to_json(&self) -> Value {
        let headers: Vec<Value> =
            self.headers.iter().map(|(name, value)| json!([name, value])).collect();
        json!({
            "seq": self.seq,
            "method": self.method,
            "path": self.path,
            "headers": headers,
            "body": String::from_utf8_lossy(&self.body),
            "body_base64": base64::engine::general_purpose::STANDARD.encode(&self.body),
            "model": self.model,
            "user_id": self.user_id,
            "segments": self.segments,
            "prompt_tokens": self.prompt_tokens,
            "hit": self.hit,
            "miss": self.miss,
            "completion_tokens": self.completion_tokens,
            "status": self.status,
            "outcome": self.outcome,
        })
    }
}

/// Deterministic generator of ids (SplitMix64).
#[derive(Debug, Clone)]
pub(crate) struct IdGen(u64);

impl IdGen {
    pub fn new(seed: u64) -> IdGen {
        IdGen(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// 32 lowercase hex characters.
    pub fn hex32(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }

    /// `len` ASCII alphanumerics.
    pub fn alnum(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        (0..len)
            .map(|_| char::from(ALPHABET[(self.next() % ALPHABET.len() as u64) as usize]))
            .collect()
    }
}

/// Amounts are kept in nano-CNY so that per-token prices stay exact integers.
const NANO: i128 = 1_000_000_000;

/// Parses a decimal string such as `"100.00"` into nano-CNY.
pub(crate) fn parse_amount(text: &str) -> Result<i128, MockError> {
    let invalid = || MockError::InvalidAmount(text.to_owned());
    let trimmed = text.trim();
    let (negative, digits) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.len() > 9 {
        return Err(invalid());
    }
    let all_digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    if !all_digits(whole) || !all_digits(fraction) {
        return Err(invalid());
    }
    let whole: i128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| invalid())? };
    let fraction: i128 = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<9}").parse().map_err(|_| invalid())?
    };
    let amount = whole * NANO + fraction;
    Ok(if negative { -amount } else { amount })
}

/// Formats nano-CNY as a decimal string with two places (truncated toward zero).
pub(crate) fn format_amount(nano: i128) -> String {
    let cents = nano / (NANO / 100);
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.abs();
    format!("{sign}{}.{:02}", cents / 100, cents % 100)
}

/// Prices in nano-CNY per million tokens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rates {
    pub hit: i128,
    pub miss: i128,
    pub output: i128,
}

impl Rates {
    pub fn cost(&self, hit: u64, miss: u64, output: u64) -> i128 {
        let total = i128::from(hit) * self.hit
            + i128::from(miss) * self.miss
            + i128::from(output) * self.output;
        // Round up so that any completed request costs something.
        (total + 999_999) / 1_000_000
    }
}

/// Everything that changes while the server runs.
#[derive(Debug)]
pub(crate) struct State {
    pub balances: HashMap<String, i128>,
    pub inflight: HashMap<String, u32>,
    pub scripts: Vec<Script>,
    pub faults: VecDeque<Fault>,
    pub requests: Vec<RecordedRequest>,
    pub cache: Cache,
    pub ids: IdGen,
}

impl State {
    pub fn new(config: &MockConfig) -> Result<State, MockError> {
        let mut balances = HashMap::new();
        for key in &config.keys {
            balances.insert(key.key.clone(), parse_amount(&key.balance_cny)?);
        }
        Ok(State {
            balances,
            inflight: HashMap::new(),
            scripts: Vec::new(),
            faults: VecDeque::new(),
            requests: Vec::new(),
            cache: Cache::default(),
            ids: IdGen::new(config.seed),
        })
    }

    pub fn record_mut(&mut self, seq: u64) -> Option<&mut RecordedRequest> {
        let index = usize::try_from(seq).ok()?.checked_sub(1)?;
        self.requests.get_mut(index)
    }
}

/// Locks `mutex`, ignoring poisoning: every critical section leaves the state consistent.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_round_trip_through_nano_cny() {
        assert_eq!(parse_amount("100.00").ok(), Some(100 * NANO));
        assert_eq!(parse_amount("0.5").ok(), Some(NANO / 2));
        assert_eq!(format_amount(100 * NANO), "100.00");
        assert_eq!(format_amount(NANO / 2 + 3), "0.50");
        assert_eq!(format_amount(-NANO / 100), "-0.01");
        assert!(parse_amount("abc").is_err());
        assert!(parse_amount("").is_err());
    }
}

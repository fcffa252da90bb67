//! The CLI's text views of the API's results: the usage table (with costs) and the audit. ("What the model
//! saw" renders with `dsh_daemon::views::request_text`, the daemon's own form, since its step
//! diff is made of it.)

use std::fmt::Write as _;

use dsh_protocol::{SessionAuditResult, SessionUsageResult, UsageEntry};

/// A usage table as text: one line per step, then the totals, the cost and the prices used.
pub fn usage_table(result: &SessionUsageResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>5} {:>9} {:>9} {:>9} {:>7} {:>6} {:>11}  cause of a cache drop",
        "turn", "step", "prompt", "cached", "new", "out", "hit%", "cost"
    );
    for entry in &result.rows {
        let _ = writeln!(out, "{}", usage_line(entry));
    }
    let totals = &result.totals;
    let _ = writeln!(
        out,
        "{:>10} {:>9} {:>9} {:>9} {:>7} {:>5.1}% {:>11}",
        "total",
        totals.prompt_tokens,
        totals.cache_hit_tokens,
        totals.cache_miss_tokens,
        totals.completion_tokens,
        totals.hit_ratio() * 100.0,
        result
            .cost
            .as_ref()
            .map_or_else(|| "-".to_owned(), |cost| money(cost.amount, &cost.currency)),
    );
    match &result.cost {
        Some(cost) => {
            let _ = writeln!(
                out,
                "cost {} · the cache saved {} (the same tokens at the cache-miss price: {})",
                money(cost.amount, &cost.currency),
                money(cost.saved, &cost.currency),
                money(cost.amount + cost.saved, &cost.currency)
            );
        }
        None if result.rows.iter().any(|entry| entry.row.usage.is_some()) => {
            let _ = writeln!(
                out,
                "cost unknown: no price configured for a model of this session (see `dsh config`)"
            );
        }
        None => {}
    }
    for used in &result.prices {
        let price = &used.price;
        let _ = writeln!(
            out,
            "prices of {}/{} per million tokens: cache hit {}, cache miss {}, output {}",
            used.profile,
            used.model,
            money(price.cache_hit, &price.currency),
            money(price.cache_miss, &price.currency),
            money(price.output, &price.currency)
        );
    }
    out
}

/// An amount of money for people, to the millionth with trailing zeros cut: `$0.000335`,
/// `$0.14`, `0.0028 CNY`.
pub fn money(amount: f64, currency: &str) -> String {
    let mut digits = format!("{amount:.6}");
    while digits.ends_with('0') && digits.len() > digits.find('.').map_or(0, |dot| dot + 3) {
        digits.pop();
    }
    if currency == "USD" { format!("${digits}") } else { format!("{digits} {currency}") }
}

/// One row of the usage table, with the daemon's words for the cause of a drop.
pub fn usage_line(entry: &UsageEntry) -> String {
    let row = &entry.row;
    let cause = &entry.explanation;
    let cost =
        row.cost.as_ref().map_or_else(|| "-".to_owned(), |cost| money(cost.amount, &cost.currency));
    match row.usage {
        Some(usage) => format!(
            "{:>4} {:>5} {:>9} {:>9} {:>9} {:>7} {:>5.1}% {cost:>11}  {cause}",
            row.turn,
            row.step,
            usage.prompt_tokens,
            usage.cache_hit_tokens,
            usage.cache_miss_tokens,
            usage.completion_tokens,
            row.hit_percent
        ),
        None => format!(
            "{:>4} {:>5} {:>9}  {cause}",
            row.turn, row.step, "(no usage: the step did not finish)"
        ),
    }
}

/// The audit as text.
pub fn audit_text(audit: &SessionAuditResult) -> String {
    let mut out = String::new();
    if audit.ok {
        let _ = writeln!(
            out,
            "audit ok: {} steps rebuilt, {} wire bodies match request/sent byte for byte",
            audit.steps, audit.matched
        );
    } else {
        let _ = writeln!(out, "audit FAILED");
        if let Some(first) = audit.mismatches.first() {
            let _ = writeln!(out, "first mismatch: {first}");
        }
        for error in &audit.errors {
            let _ = writeln!(out, "log error: {error}");
        }
    }
    for note in &audit.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

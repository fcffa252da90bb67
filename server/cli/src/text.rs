//! The CLI's text views of the API's results: the usage table and the audit. ("What the model
//! saw" renders with `dsh_daemon::views::request_text`, the daemon's own form, since its step
//! diff is made of it.)

use std::fmt::Write as _;

use dsh_protocol::{SessionAuditResult, UsageEntry};
use dsh_session::usage_totals;

/// A usage table as text: one line per step, then the totals.
pub fn usage_table(entries: &[UsageEntry]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>5} {:>9} {:>9} {:>9} {:>7} {:>6}  cause of a cache drop",
        "turn", "step", "prompt", "cached", "new", "out", "hit%"
    );
    for entry in entries {
        let _ = writeln!(out, "{}", usage_line(entry));
    }
    let rows: Vec<_> = entries.iter().map(|entry| entry.row.clone()).collect();
    let totals = usage_totals(&rows);
    let _ = writeln!(
        out,
        "{:>10} {:>9} {:>9} {:>9} {:>7} {:>5.1}%",
        "total",
        totals.prompt_tokens,
        totals.cache_hit_tokens,
        totals.cache_miss_tokens,
        totals.completion_tokens,
        totals.hit_ratio() * 100.0
    );
    out
}

/// One row of the usage table, with the daemon's words for the cause of a drop.
pub fn usage_line(entry: &UsageEntry) -> String {
    let row = &entry.row;
    let cause = &entry.explanation;
    match row.usage {
        Some(usage) => format!(
            "{:>4} {:>5} {:>9} {:>9} {:>9} {:>7} {:>5.1}%  {cause}",
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

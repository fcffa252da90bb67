//! The CLI's text views of the API's results: the usage table (with costs) and the audit. ("What the model
//! saw" renders with `dsh_daemon::views::request_text`, the daemon's own form, since its step
//! diff is made of it.)

use std::fmt::Write as _;

use dsh_protocol::{SessionAuditResult, SessionUsageResult, UsageEntry};
use dsh_session::{LimitKind, PlanStatus, PlanUpdate, TurnLimit};

/// A usage table as text: one line per step, then the totals, the cost and the prices used.
pub fn usage_table(result: &SessionUsageResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>5} {:>9} {:>9} {:>9} {:>7} {:>6} {:>11}  cause of a cache drop",
        "turn", "step", "prompt", "cached", "new", "out", "hit%", "cost"
    );
    for entry in &result.rows {
        let _ = writeln!(out, "{}", usage_line(entry).trim_end());
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
    if totals.cache_write_tokens > 0 {
        let _ = writeln!(
            out,
            "{} of the new input tokens were written to the provider's cache on request",
            totals.cache_write_tokens
        );
    }
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
        let write = price.cache_write.map_or_else(String::new, |write| {
            format!(", cache write {}", money(write, &price.currency))
        });
        let _ = writeln!(
            out,
            "prices of {}/{} per million tokens: cache hit {}, cache miss {}{write}, output {}",
            used.profile,
            used.model,
            money(price.cache_hit, &price.currency),
            money(price.cache_miss, &price.currency),
            money(price.output, &price.currency)
        );
    }
    for child in &result.children {
        let cost = child
            .cost
            .as_ref()
            .map_or_else(|| "-".to_owned(), |cost| money(cost.amount, &cost.currency));
        let usage = &child.usage;
        let _ = writeln!(
            out,
            "sub-agent {} ({}, {}): {} steps, {} prompt, {} out, {:.1}% hit, {cost}{}",
            child.session_id,
            child.context.as_str(),
            child.description,
            child.steps,
            usage.prompt_tokens,
            usage.completion_tokens,
            child.hit_percent,
            child.error.as_ref().map(|error| format!(" ({error})")).unwrap_or_default()
        );
    }
    if let Some(all) = &result.with_children {
        let cost = all
            .cost
            .as_ref()
            .map_or_else(|| "cost unknown".to_owned(), |cost| money(cost.amount, &cost.currency));
        let _ = writeln!(
            out,
            "with sub-agents: {} prompt, {} cached, {} out, {cost}",
            all.usage.prompt_tokens, all.usage.cache_hit_tokens, all.usage.completion_tokens
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

/// A count with thousands separators: `12,345`.
fn thousands(count: u64) -> String {
    let digits = count.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The one line a `turn/limit` reads as (the editors' transcripts say the same): "step budget
/// reached: 2 of 2 steps", "token budget reached: 12,345 of 10,000 tokens", "cost budget
/// reached: $0.0012 of $0.001", "timeout reached: 30.0 s of 30 s".
pub fn limit_text(limit: &TurnLimit) -> String {
    let (value, spent) = (&limit.value, &limit.spent);
    let float = |number: &serde_json::Number| number.as_f64().unwrap_or(0.0);
    let count = |number: &serde_json::Number| float(number).max(0.0).round() as u64;
    match limit.limit {
        LimitKind::MaxSteps => format!("step budget reached: {spent} of {value} steps"),
        LimitKind::MaxTokens => format!(
            "token budget reached: {} of {} tokens",
            thousands(count(spent)),
            thousands(count(value))
        ),
        LimitKind::MaxCost => format!(
            "cost budget reached: {} of {}",
            money(float(spent), "USD"),
            money(float(value), "USD")
        ),
        LimitKind::Timeout => format!("timeout reached: {:.1} s of {value} s", float(spent)),
    }
}

/// A plan as `dsh prompt` prints it (the editors show the same marks): a headline with the
/// count of completed steps and the explanation, then one line per step, `[x]` completed, `[>]`
/// in progress, `[ ]` pending.
pub fn plan_lines(update: &PlanUpdate) -> Vec<String> {
    if update.plan.is_empty() {
        return vec!["plan cleared".to_owned()];
    }
    let because = update.explanation.as_deref().map(|text| format!(": {text}")).unwrap_or_default();
    let mut lines =
        vec![format!("plan ({} of {} completed){because}", update.completed(), update.plan.len())];
    lines.extend(update.plan.iter().map(|entry| {
        let mark = match entry.status {
            PlanStatus::Completed => "[x]",
            PlanStatus::InProgress => "[>]",
            PlanStatus::Pending => "[ ]",
        };
        format!("  {mark} {}", entry.step)
    }));
    lines
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use dsh_protocol::{PriceUsed, SessionUsageResult, UsageEntry};
    use dsh_session::{Cost, Price, Usage, UsageRow};
    use expect_test::expect;

    use super::{limit_text, money, plan_lines, usage_table};

    fn row(step: u64, prompt: u64, hit: u64, out: u64, price: &Price) -> UsageEntry {
        row_writing(step, prompt, hit, 0, out, price)
    }

    fn row_writing(
        step: u64,
        prompt: u64,
        hit: u64,
        written: u64,
        out: u64,
        price: &Price,
    ) -> UsageEntry {
        let usage = Usage {
            prompt_tokens: prompt,
            cache_hit_tokens: hit,
            cache_miss_tokens: prompt - hit,
            completion_tokens: out,
            reasoning_tokens: 0,
            cache_write_tokens: written,
        };
        UsageEntry {
            row: UsageRow {
                step,
                turn: 1,
                seq: step * 10,
                usage: Some(usage),
                hit_percent: usage.hit_ratio() * 100.0,
                dropped: false,
                causes: Vec::new(),
                profile: Some("deepseek".to_owned()),
                model: Some("deepseek-v4-flash".to_owned()),
                cost: Some(price.cost(&usage)),
            },
            explanation: String::new(),
        }
    }

    /// Hand-computed at $0.0028 / $0.14 / $0.28 per million: step 1 = (10,000 × 0.14 + 500 ×
    /// 0.28) / 10⁶ = $0.00154; step 2 = (9,984 × 0.0028 + 516 × 0.14 + 300 × 0.28) / 10⁶ =
    /// $0.000184; the cache saved (9,984 × (0.14 − 0.0028)) / 10⁶ = $0.00137.
    #[test]
    fn the_usage_table_shows_each_steps_cost_and_what_the_cache_saved() {
        let price = Price {
            cache_hit: 0.0028,
            cache_miss: 0.14,
            output: 0.28,
            cache_write: None,
            currency: "USD".to_owned(),
        };
        let rows = vec![row(1, 10_000, 0, 500, &price), row(2, 10_500, 9_984, 300, &price)];
        let cost =
            rows.iter().filter_map(|e| e.row.cost.clone()).reduce(|a, b| a.plus(&b).unwrap());
        let totals =
            rows.iter().filter_map(|e| e.row.usage).fold(Usage::default(), |a, b| a.add(&b));
        let result = SessionUsageResult {
            rows,
            totals,
            cost: cost.clone(),
            prices: vec![PriceUsed {
                profile: "deepseek".to_owned(),
                model: "deepseek-v4-flash".to_owned(),
                price,
            }],
            context_window: 1_048_576,
            profile: "deepseek".to_owned(),
            model: "deepseek-v4-flash".to_owned(),
            children: Vec::new(),
            with_children: None,
        };
        let cost: Cost = cost.unwrap();
        assert_eq!(money(cost.amount, "USD"), "$0.001724");
        assert_eq!(money(cost.saved, "USD"), "$0.00137");
        expect![[r#"
            turn  step    prompt    cached       new     out   hit%        cost  cause of a cache drop
               1     1     10000         0     10000     500   0.0%    $0.00154
               1     2     10500      9984       516     300  95.1%   $0.000184
                 total     20500      9984     10516     800  48.7%   $0.001724
            cost $0.001724 · the cache saved $0.00137 (the same tokens at the cache-miss price: $0.003094)
            prices of deepseek/deepseek-v4-flash per million tokens: cache hit $0.0028, cache miss $0.14, output $0.28
        "#]]
        .assert_eq(&usage_table(&result));
    }

    /// Anthropic-style: writes billed at $3.75, reads at $0.30, input $3, output $15 per
    /// million. Step 1 = (2,000 × 3.75 + 100 × 3 + 50 × 15) / 10⁶ = $0.00855; step 2 = (2,000 ×
    /// 0.3 + 300 × 3.75 + 20 × 3 + 40 × 15) / 10⁶ = $0.002385.
    #[test]
    fn cache_writes_are_counted_and_priced_on_their_own() {
        let price = Price {
            cache_hit: 0.3,
            cache_miss: 3.0,
            output: 15.0,
            cache_write: Some(3.75),
            currency: "USD".to_owned(),
        };
        let rows = vec![
            row_writing(1, 2_100, 0, 2_000, 50, &price),
            row_writing(2, 2_320, 2_000, 300, 40, &price),
        ];
        let cost =
            rows.iter().filter_map(|e| e.row.cost.clone()).reduce(|a, b| a.plus(&b).unwrap());
        let totals =
            rows.iter().filter_map(|e| e.row.usage).fold(Usage::default(), |a, b| a.add(&b));
        let result = SessionUsageResult {
            rows,
            totals,
            cost,
            prices: vec![PriceUsed {
                profile: "claude".to_owned(),
                model: "claude-sonnet-4-5".to_owned(),
                price,
            }],
            context_window: 200_000,
            profile: "claude".to_owned(),
            model: "claude-sonnet-4-5".to_owned(),
            children: Vec::new(),
            with_children: None,
        };
        expect![[r#"
            turn  step    prompt    cached       new     out   hit%        cost  cause of a cache drop
               1     1      2100         0      2100      50   0.0%    $0.00855
               1     2      2320      2000       320      40  86.2%   $0.002385
                 total      4420      2000      2420      90  45.2%   $0.010935
            2300 of the new input tokens were written to the provider's cache on request
            cost $0.010935 · the cache saved $0.003675 (the same tokens at the cache-miss price: $0.01461)
            prices of claude/claude-sonnet-4-5 per million tokens: cache hit $0.30, cache miss $3.00, cache write $3.75, output $15.00
        "#]].assert_eq(&usage_table(&result));
    }
    #[test]
    fn a_budget_reached_reads_as_the_editors_say_it() {
        use dsh_session::{LimitKind, TurnLimit};
        let limit = |limit, value: serde_json::Number, spent: serde_json::Number| {
            limit_text(&TurnLimit { limit, value, spent })
        };
        let float = |x: f64| serde_json::Number::from_f64(x).unwrap();
        assert_eq!(
            limit(LimitKind::MaxSteps, 1.into(), 1.into()),
            "step budget reached: 1 of 1 steps"
        );
        assert_eq!(
            limit(LimitKind::MaxTokens, 10_000.into(), 12_345.into()),
            "token budget reached: 12,345 of 10,000 tokens"
        );
        assert_eq!(
            limit(LimitKind::MaxCost, float(0.001), float(0.001234)),
            "cost budget reached: $0.001234 of $0.001"
        );
        assert_eq!(
            limit(LimitKind::Timeout, 2.into(), float(2.003)),
            "timeout reached: 2.0 s of 2 s"
        );
    }

    #[test]
    fn a_plan_prints_its_count_and_one_marked_line_per_step() {
        use dsh_session::{PlanEntry, PlanStatus, PlanUpdate};
        let entry = |step: &str, status| PlanEntry { step: step.to_owned(), status };
        let update = PlanUpdate {
            call_id: "c".to_owned(),
            explanation: Some("Found the bug.".to_owned()),
            plan: vec![
                entry("Read", PlanStatus::Completed),
                entry("Fix", PlanStatus::InProgress),
                entry("Test", PlanStatus::Pending),
            ],
        };
        assert_eq!(
            plan_lines(&update),
            ["plan (1 of 3 completed): Found the bug.", "  [x] Read", "  [>] Fix", "  [ ] Test"]
        );
        let cleared = PlanUpdate { explanation: None, plan: Vec::new(), ..update };
        assert_eq!(plan_lines(&cleared), ["plan cleared"]);
    }
}

//! Read views over a session log, as text for people and JSON for scripts: the usage table,
//! "what the model saw", the step diff, the audit, the session list. Every view is rebuilt from
//! the log, never from memory.

use std::fmt::Write as _;

use dsh_protocol::{SeqMessage, SessionRequestResult, WireBody};
use dsh_provider::{DEEPSEEK_ADAPTER, sha256_hex, wire_body};
use dsh_session::{
    Event, Message, Severity, StepRequest, UsageRow, check_log, reconstruct_step, usage_rows,
    usage_totals,
};
use serde_json::{Value, json};

/// The usage table of a log as text.
pub fn usage_text(events: &[Event]) -> String {
    usage_table(&usage_rows(events))
}

/// A usage table as text.
pub fn usage_table(rows: &[UsageRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>5} {:>9} {:>9} {:>9} {:>7} {:>6}  cause of a cache drop",
        "turn", "step", "prompt", "cached", "new", "out", "hit%"
    );
    for row in rows {
        let _ = writeln!(out, "{}", usage_line(row));
    }
    let totals = usage_totals(rows);
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

/// One row of the usage table.
pub fn usage_line(row: &UsageRow) -> String {
    let cause = explain(row);
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

/// Why a step's cache hit looks the way it does, in words.
pub fn explain(row: &UsageRow) -> String {
    let causes: Vec<String> = row.causes.iter().map(ToString::to_string).collect();
    match (row.dropped, causes.is_empty()) {
        (_, false) => causes.join("; "),
        (true, true) => "no logged cause (provider cache eviction)".to_owned(),
        (false, true) => String::new(),
    }
}

/// "What the model saw" in the API's shape, from a rebuilt step.
pub fn request_result(rebuilt: &StepRequest, diff: Option<String>) -> SessionRequestResult {
    let body = wire_body(&rebuilt.request);
    SessionRequestResult {
        step: rebuilt.step,
        turn: rebuilt.turn,
        boundary_seq: rebuilt.boundary_seq,
        header: rebuilt.request.header.clone(),
        header_events: rebuilt.header_events.clone(),
        messages: rebuilt
            .surface
            .iter()
            .map(|node| SeqMessage { seq: node.id, message: (*node.message).clone() })
            .collect(),
        wire: WireBody {
            adapter: DEEPSEEK_ADAPTER.to_owned(),
            sha256: sha256_hex(&body),
            bytes: body.len() as u64,
            body: String::from_utf8_lossy(&body).into_owned(),
        },
        sent: rebuilt.sent.clone(),
        usage: rebuilt.usage,
        diff,
    }
}

/// "What the model saw" as text, shortened for reading.
pub fn saw_result_text(result: &SessionRequestResult) -> String {
    render_request(result, false)
}

/// "What the model saw" as text. `full` prints every message and tool schema whole (for diffs).
fn render_request(result: &SessionRequestResult, full: bool) -> String {
    let header = &result.header;
    let mut out = String::new();
    let header_events = if result.header_events.is_empty() {
        "none (carried forward)".to_owned()
    } else {
        result.header_events.iter().map(|s| format!("seq {s}")).collect::<Vec<_>>().join(", ")
    };
    let _ = writeln!(
        out,
        "step {} (turn {}) · boundary seq {} · header events: {header_events}",
        result.step, result.turn, result.boundary_seq
    );
    let config = &header.config;
    let mut line = format!(
        "model {} · max_tokens {} · thinking {}",
        config.model,
        config.max_tokens,
        if config.thinking { "on" } else { "off" }
    );
    if let Some(effort) = &config.reasoning_effort {
        let _ = write!(line, " · effort {effort}");
    }
    if let Some(temperature) = config.temperature {
        let _ = write!(line, " · temperature {temperature}");
    }
    let _ = writeln!(out, "{line}");
    match &header.system {
        Some(system) => {
            let _ = writeln!(out, "system prompt ({} lines):", system.lines().count());
            for line in system.split('\n') {
                let _ = writeln!(out, "  | {line}");
            }
        }
        None => {
            let _ = writeln!(out, "system prompt: none");
        }
    }
    let tools: Vec<&str> = header.tool_list().iter().map(|t| t.name.as_str()).collect();
    let _ = writeln!(
        out,
        "tools: {}",
        if tools.is_empty() { "none".to_owned() } else { tools.join(", ") }
    );
    if full {
        for tool in header.tool_list() {
            let _ = writeln!(
                out,
                "  tool {}: {}",
                tool.name,
                serde_json::to_string(tool).unwrap_or_default()
            );
        }
    }
    let _ = writeln!(out, "messages ({}):", result.messages.len());
    for entry in &result.messages {
        let _ = writeln!(out, "  [seq {}] {}", entry.seq, message_text(&entry.message, full));
    }
    let wire = &result.wire;
    let _ = write!(out, "wire: {} · {} bytes · sha256 {}", wire.adapter, wire.bytes, wire.sha256);
    match &result.sent {
        Some(sent) if sent.sha256 == wire.sha256 => {
            let _ = writeln!(out, " (matches request/sent)");
        }
        Some(sent) => {
            let _ = writeln!(out, " (DIFFERS from request/sent {})", sent.sha256);
        }
        None => {
            let _ = writeln!(out, " (never sent)");
        }
    }
    if let Some(usage) = result.usage {
        let _ = writeln!(
            out,
            "usage: prompt {} · cached {} · new {} · out {} · hit {:.1}%",
            usage.prompt_tokens,
            usage.cache_hit_tokens,
            usage.cache_miss_tokens,
            usage.completion_tokens,
            usage.hit_ratio() * 100.0
        );
    }
    out
}

fn shorten(text: &str, full: bool) -> String {
    const LIMIT: usize = 160;
    if full || text.chars().count() <= LIMIT {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(LIMIT).collect();
    format!("{head:?}… ({} chars)", text.chars().count())
}

fn message_text(message: &Message, full: bool) -> String {
    match message {
        Message::System { content } => format!("system: {}", shorten(content, full)),
        Message::User { content } => format!("user: {}", shorten(content, full)),
        Message::Tool { call_id, content } => format!("tool {call_id}: {}", shorten(content, full)),
        Message::Assistant(assistant) => {
            let mut text = format!("assistant: {}", shorten(&assistant.content, full));
            if let Some(reasoning) = &assistant.reasoning_content {
                let _ = write!(text, " · reasoning {}", shorten(reasoning, full));
            }
            for call in &assistant.tool_calls {
                let _ = write!(text, " · call {} {} {}", call.id, call.name, call.arguments);
            }
            text
        }
    }
}

/// A unified diff of step `step - 1`'s request against step `step`'s, both rebuilt.
pub fn diff_text(previous: &StepRequest, current: &StepRequest) -> String {
    let old = render_request(&request_result(previous, None), true);
    let new = render_request(&request_result(current, None), true);
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("step {}", previous.step), &format!("step {}", current.step))
        .to_string()
}

/// The result of an audit.
#[derive(Debug, Default)]
pub struct Audit {
    /// Steps rebuilt.
    pub steps: u64,
    /// Steps whose rebuilt body matched `request/sent`.
    pub matched: u64,
    /// Rebuilt bodies that differ from what was sent (the first one is what matters).
    pub mismatches: Vec<String>,
    /// Log check errors.
    pub errors: Vec<String>,
    /// Log check notes (the log ends inside a turn).
    pub notes: Vec<String>,
}

impl Audit {
    /// Whether the log passed.
    pub fn ok(&self) -> bool {
        self.mismatches.is_empty() && self.errors.is_empty()
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok(),
            "steps": self.steps,
            "matched": self.matched,
            "mismatches": self.mismatches,
            "errors": self.errors,
            "notes": self.notes,
        })
    }
}

/// Rebuilds every step of a log, compares each wire body with its `request/sent` record, and runs
/// the log checks.
pub fn audit(events: &[Event]) -> Audit {
    let mut result = Audit::default();
    for diagnostic in check_log(events) {
        match diagnostic.severity {
            Severity::Error => result.errors.push(diagnostic.to_string()),
            Severity::Open => result.notes.push(diagnostic.to_string()),
        }
    }
    let last_step = events
        .iter()
        .filter_map(|event| match &event.data {
            dsh_session::EventData::StepStart(start) => Some(start.step),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    for step in 1..=last_step {
        let rebuilt = match reconstruct_step(events, step) {
            Ok(rebuilt) => rebuilt,
            Err(error) => {
                result.mismatches.push(format!("step {step}: {error}"));
                continue;
            }
        };
        result.steps += 1;
        let Some(sent) = &rebuilt.sent else { continue };
        let body = wire_body(&rebuilt.request);
        let sha = sha256_hex(&body);
        if sent.adapter != DEEPSEEK_ADAPTER {
            result.mismatches.push(format!(
                "step {step}: sent by adapter {}, this build rebuilds {DEEPSEEK_ADAPTER}",
                sent.adapter
            ));
        } else if sha != sent.sha256 || body.len() as u64 != sent.bytes {
            result.mismatches.push(format!(
                "step {step}: rebuilt body sha256 {sha} ({} bytes) differs from request/sent {} ({} bytes)",
                body.len(),
                sent.sha256,
                sent.bytes
            ));
        } else {
            result.matched += 1;
        }
    }
    result
}

/// The audit as text.
pub fn audit_text(audit: &Audit) -> String {
    let mut out = String::new();
    if audit.ok() {
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

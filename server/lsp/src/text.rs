//! What the front shows people: the hover of an attributed line, the code lens above an agent
//! hunk, turn progress and the turn's end. Pure functions of the protocol's values.

use std::fmt::Write as _;

use dsh_protocol::{Cost, ProvenanceRange, Usage};

/// The hover of a line in `range`: session, turn prompt, step, model, usage and cost, the tool
/// call, and how to open what the model saw — with a `command:` link when the editor follows
/// those (`links`).
pub fn hover(range: &ProvenanceRange, links: bool) -> String {
    let mut out = String::new();
    let title = range.title.as_deref().map_or_else(|| "(untitled)".to_owned(), escape_markdown);
    let _ = writeln!(out, "**dsh** · step {} wrote this line", range.step);
    let _ = writeln!(out);
    let _ = writeln!(out, "- session: {title} (`{}`)", range.session_id);
    match &range.prompt {
        Some(prompt) => {
            let _ = writeln!(out, "- turn {}: {}", range.turn, escape_markdown(prompt));
        }
        None => {
            let _ = writeln!(out, "- turn {}", range.turn);
        }
    }
    let model = match (&range.profile, &range.model) {
        // An ad-hoc profile, `NAME@URL` (a client's `--base-url`): the profile, then the URL.
        (Some(profile), Some(model)) => match profile.split_once('@') {
            Some((name, url)) if url.starts_with("http") => format!("{name}/{model} at {url}"),
            _ => format!("{profile}/{model}"),
        },
        (None, Some(model)) => model.clone(),
        _ => "unknown".to_owned(),
    };
    let _ = writeln!(out, "- model: {model}");
    match &range.usage {
        Some(usage) => {
            let _ = writeln!(out, "- usage: {}", usage_line(usage, range.hit_percent));
        }
        None => {
            let _ = writeln!(out, "- usage: the step did not finish");
        }
    }
    if let Some(cost) = &range.cost {
        let _ = writeln!(out, "- cost: {}", cost_text(cost));
    }
    let _ = writeln!(out, "- call: `{}` (`{}`, log seq {})", range.tool, range.call_id, range.seq);
    let _ = writeln!(out);
    if links {
        let arguments =
            format!(r#"[{{"sessionId":"{}","step":{}}}]"#, range.session_id, range.step);
        let _ = writeln!(
            out,
            "[Open what the model saw at step {}](command:dsh.saw?{})",
            range.step,
            percent_encoded(&arguments)
        );
        let _ = writeln!(out);
    }
    let _ = write!(
        out,
        "What the model saw: command `dsh.saw` (the code lens above), or `dsh saw {} --step {}`",
        range.session_id, range.step
    );
    out
}

/// `text` with every byte but ASCII letters and digits percent-encoded (a URI query).
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// The code lens above a hunk: `dsh · step 7 · 97% cached`.
pub fn lens(range: &ProvenanceRange) -> String {
    match &range.usage {
        Some(_) => format!("dsh · step {} · {:.0}% cached", range.step, range.hit_percent),
        None => format!("dsh · step {}", range.step),
    }
}

/// One step's usage on a line.
pub fn usage_line(usage: &Usage, hit_percent: f64) -> String {
    format!(
        "{} prompt tokens ({hit_percent:.0}% cached), {} output tokens",
        usage.prompt_tokens, usage.completion_tokens
    )
}

fn cost_text(cost: &Cost) -> String {
    format!("{:.6} {} (the cache saved {:.6})", cost.amount, cost.currency, cost.saved)
}

/// The progress report of a step that started.
pub fn step_started(step: u64) -> String {
    format!("step {step}")
}

/// The progress report of a step that ended.
pub fn step_ended(step: u64, usage: &Usage) -> String {
    format!("step {step} · {}", usage_line(usage, usage.hit_ratio() * 100.0))
}

/// The message at a turn's end.
pub fn turn_ended(session_id: &str, turn: u64, reason: &str, error: Option<&str>) -> String {
    match error {
        Some(error) => format!("dsh: turn {turn} of {session_id} ended ({reason}): {error}"),
        None => format!("dsh: turn {turn} of {session_id} ended ({reason})"),
    }
}

/// Text people wrote (a session title, a prompt), shown as itself in Markdown: no link, no
/// emphasis, no command a click could run.
fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        if "\\`*_{}[]()<>#+-.!|~".contains(character) {
            out.push('\\');
        }
        out.push(character);
    }
    out
}

#[cfg(test)]
mod tests;

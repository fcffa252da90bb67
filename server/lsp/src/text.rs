//! What the front shows people: the hover of an attributed line, the code lens above an agent
//! hunk, turn progress and the turn's end, a rewind's question and outcome. Pure functions of
//! the protocol's values.

use std::fmt::Write as _;

use dsh_protocol::{Cost, ProvenanceRange, SessionRewindResult, Usage};

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

/// How many paths a rewind's message names per list before it says how many more.
const LISTED: usize = 10;

/// `a.txt, b.txt and 3 more`.
fn paths(paths: &[String]) -> String {
    let mut out = paths.iter().take(LISTED).cloned().collect::<Vec<_>>().join(", ");
    if paths.len() > LISTED {
        let _ = write!(out, " and {} more", paths.len() - LISTED);
    }
    out
}

/// What a rewind would change (`done`: what it changed): the files restored, recreated,
/// deleted and not restorable.
pub fn rewind_changes(plan: &SessionRewindResult, done: bool) -> String {
    let lists = [
        (["restores", "restored"], &plan.restored),
        (["recreates", "recreated"], &plan.created),
        (["deletes", "deleted"], &plan.deleted),
        (
            ["cannot restore (over the size cap)", "could not restore (over the size cap)"],
            &plan.not_restorable,
        ),
    ];
    let parts = lists
        .iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(verb, list)| format!("{} {}", verb[usize::from(done)], paths(list)))
        .collect::<Vec<_>>();
    let mut out = match (parts.is_empty(), done) {
        (true, false) => "changes no file".to_owned(),
        (true, true) => "changed no file".to_owned(),
        (false, _) => parts.join("; "),
    };
    if let Some(incomplete) = &plan.incomplete {
        let _ = write!(out, " (the checkpoint is incomplete: {incomplete})");
    }
    out
}

/// What a rewind is to: `before step 3`, or `to the checkpoint at seq 41`.
pub fn rewind_target(step: Option<u64>, checkpoint: Option<u64>) -> String {
    match (step, checkpoint) {
        (Some(step), _) => format!("to before step {step}"),
        (None, Some(seq)) => format!("to the checkpoint at seq {seq}"),
        (None, None) => "back".to_owned(),
    }
}

/// The question before a rewind, from its dry run: what it changes, the files someone other
/// than the agent changed that it would overwrite, and where the conversation continues.
pub fn rewind_question(
    session_id: &str,
    target: &str,
    plan: &SessionRewindResult,
    conversation: bool,
) -> String {
    let mut out = format!("dsh: rewind {session_id} {target}? It {}.", rewind_changes(plan, false));
    if !plan.conflicts.is_empty() {
        let _ = write!(
            out,
            " Changed since the agent's last checkpoint by someone else, and overwritten: {}.",
            paths(&plan.conflicts)
        );
    }
    if conversation {
        out.push_str(" The conversation continues in a new session forked there.");
    }
    out
}

/// The question when the rewind was refused for files changed since the dry run.
pub fn rewind_conflicts(conflicts: &[String]) -> String {
    format!(
        "dsh: the rewind would overwrite files changed since the agent's last checkpoint by \
         someone else: {}. Overwrite them?",
        paths(conflicts)
    )
}

/// The message after a rewind: what it did and the session that continues.
pub fn rewound(session_id: &str, target: &str, result: &SessionRewindResult) -> String {
    let continues = if result.session_id == session_id {
        format!("{session_id} continues")
    } else {
        format!("the conversation continues in {}", result.session_id)
    };
    format!("dsh: rewound {session_id} {target}: {}; {continues}", rewind_changes(result, true))
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

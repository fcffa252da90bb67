//! `dsh rewind` and `dsh checkpoints` (`docs/rewind.md`): clients of `session/rewind` and
//! `session/checkpoints`.

use std::process::ExitCode;

use dsh_protocol::method;
use dsh_protocol::{CheckpointReason, SessionParams, SessionRewindParams, SessionRewindResult};
use serde_json::json;

use super::{connect, print_json};
use crate::settings::Settings;

/// What `dsh rewind` asks for.
pub struct RewindOptions {
    /// The session.
    pub session: String,
    /// Just before this step.
    pub step: Option<u64>,
    /// The checkpoint with this seq (files only).
    pub checkpoint: Option<u64>,
    /// Only the files.
    pub files_only: bool,
    /// Only the conversation.
    pub conversation_only: bool,
    /// Overwrite files changed by someone other than the agent.
    pub force: bool,
    /// Say what would change; change nothing.
    pub dry_run: bool,
}

/// `dsh rewind SESSION (--step N | --checkpoint SEQ) [--files | --conversation] [--force]
/// [--dry-run]`.
pub async fn rewind(settings: &Settings, options: RewindOptions) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let params = SessionRewindParams {
        session_id: options.session.clone(),
        step: options.step,
        checkpoint: options.checkpoint,
        files: options.conversation_only.then_some(false),
        conversation: if options.files_only { Some(false) } else { None },
        force: options.force.then_some(true),
        dry_run: options.dry_run.then_some(true),
    };
    let result = client.call::<method::SessionRewind>(params).await?;
    if settings.json {
        let summary = json!({
            "sessionId": result.session_id,
            "restored": result.restored,
            "created": result.created,
            "deleted": result.deleted,
            "conflicts": result.conflicts,
            "notRestorable": result.not_restorable,
            "incomplete": result.incomplete,
            "checkpoint": result.checkpoint,
            "beforeSeq": result.before_seq,
            "dryRun": result.dry_run,
        });
        print_json(&summary)?;
    } else {
        print!("{}", rewind_text(&options, &result));
    }
    Ok(ExitCode::SUCCESS)
}

/// The text of a rewind's answer.
fn rewind_text(options: &RewindOptions, result: &SessionRewindResult) -> String {
    let mut out = String::new();
    let to = match (options.step, options.checkpoint) {
        (Some(step), _) => format!("to just before step {step}"),
        (None, Some(seq)) => format!("to the checkpoint at seq {seq}"),
        (None, None) => String::new(),
    };
    let what = match (options.files_only || options.checkpoint.is_some(), options.conversation_only)
    {
        (true, _) => "the files",
        (_, true) => "the conversation",
        _ => "the files and the conversation",
    };
    if result.dry_run {
        out.push_str(&format!("would rewind {what} of {} {to}\n", options.session));
    } else {
        out.push_str(&format!("rewound {what} of {} {to}\n", options.session));
    }
    let verb = |done: &str, would: &str| if result.dry_run { would } else { done }.to_owned();
    for (label, paths) in [
        (verb("restored", "restore"), &result.restored),
        (verb("created", "create"), &result.created),
        (verb("deleted", "delete"), &result.deleted),
    ] {
        for path in paths {
            out.push_str(&format!("  {label:<9} {path}\n"));
        }
    }
    if !result.conflicts.is_empty() {
        let label = if result.dry_run {
            "changed since the last checkpoint by someone other than the agent (refused unless --force)"
        } else {
            "overwritten although changed by someone other than the agent (--force)"
        };
        out.push_str(&format!("  {label}: {}\n", result.conflicts.join(", ")));
    }
    if !result.not_restorable.is_empty() {
        out.push_str(&format!(
            "  not restorable (over the size cap): {}\n",
            result.not_restorable.join(", ")
        ));
    }
    if let Some(incomplete) = &result.incomplete {
        out.push_str(&format!("  the checkpoint is incomplete: {incomplete}\n"));
    }
    let touched = result.restored.len() + result.created.len() + result.deleted.len();
    if !options.conversation_only && touched == 0 {
        out.push_str("  no file differs from the checkpoint\n");
    }
    if result.dry_run {
        return out;
    }
    if result.session_id != options.session {
        out.push_str(&format!(
            "continue in session {} (the steps after stay in {} as history)\n",
            result.session_id, options.session
        ));
    }
    if let Some(seq) = result.before_seq {
        out.push_str(&format!(
            "undo the files: dsh rewind {} --checkpoint {seq}\n",
            options.session
        ));
    }
    out
}

/// `dsh checkpoints SESSION`.
pub async fn checkpoints(settings: &Settings, session: &str) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let params = SessionParams { session_id: session.to_owned() };
    let result = client.call::<method::SessionCheckpoints>(params).await?;
    if settings.json {
        print_json(&result)?;
        return Ok(ExitCode::SUCCESS);
    }
    if result.checkpoints.is_empty() {
        println!("no checkpoints in session {session}");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>6}  {:>5}  {:<8}  {:<20}  {:>6}  {:>7}  note",
        "seq", "step", "reason", "time (UTC)", "files", "changed"
    );
    for entry in &result.checkpoints {
        let reason = match entry.reason {
            CheckpointReason::Step => "step",
            CheckpointReason::TurnEnd => "turnEnd",
            CheckpointReason::Rewind => "rewind",
        };
        let mut notes = Vec::new();
        if !entry.available {
            notes.push("collected: not restorable".to_owned());
        }
        if let Some(incomplete) = &entry.incomplete {
            notes.push(format!("incomplete: {incomplete}"));
        }
        if !entry.too_large.is_empty() {
            notes.push(format!("{} over the size cap", entry.too_large.len()));
        }
        println!(
            "{:>6}  {:>5}  {:<8}  {:<20}  {:>6}  {:>7}  {}",
            entry.seq,
            entry.step.map_or_else(|| "-".to_owned(), |step| step.to_string()),
            reason,
            utc(entry.time),
            entry.files,
            entry.changed.len(),
            notes.join("; ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` (UTC).
fn utc(ms: u64) -> String {
    let seconds = ms / 1000;
    let days = (seconds / 86_400) as i64;
    let in_day = seconds % 86_400;
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates_are_civil() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(super::utc(1_796_443_502_713), "2026-12-05 04:05:02");
    }
}

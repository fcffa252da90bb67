//! `dsh prompt --json`: the turn as JSON lines (`dsh_protocol::script`, docs/scripting.md) —
//! each log event of the turn as the API delivers it, and after each `step/end` the step's
//! usage row with its cost. The last line (`turn/end` or `error`) is the command's, once the
//! turn's answer is in. Each line is one object written whole with its newline; nothing else
//! goes to stdout.

use std::future::Future;
use std::io::Write;

use dsh_protocol::script::{PromptLine, StepUsageLine};
use dsh_protocol::{SessionEvent, UsageEntry};
use dsh_session::EventData;
use tokio::sync::mpsc;

/// Writes `line` to stdout: its JSON and a newline, in one write of a locked stdout.
pub fn write_line(line: &PromptLine) {
    let Ok(mut text) = serde_json::to_string(line) else { return };
    text.push('\n');
    let mut stdout = std::io::stdout().lock();
    // A reader that went away (a closed pipe) reads nothing more; the turn goes on in the
    // daemon regardless, and its end is still this command's exit status.
    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
}

/// Writes the events of one turn — from the first `turn/start` received up to its `turn/end`,
/// which the last line replaces — as they arrive, each finished step's usage entry (`usage`
/// looks it up) after its `step/end`.
pub async fn print_lines<U, F>(mut events: mpsc::Receiver<SessionEvent>, usage: U)
where
    U: Fn(u64) -> F,
    F: Future<Output = Option<UsageEntry>>,
{
    let mut turn = None;
    while let Some(delivered) = events.recv().await {
        let finished = match &delivered.event.data {
            EventData::TurnStart(start) if turn.is_none() => {
                turn = Some(start.turn);
                None
            }
            // Before this turn's `turn/start`: what closes an earlier turn a crash or a fork
            // left open (`close_interrupted`) is not this turn's.
            _ if turn.is_none() => continue,
            EventData::TurnEnd(end) if Some(end.turn) == turn => return,
            EventData::StepEnd(end) => Some(end.step),
            _ => None,
        };
        let session_id = delivered.session_id.clone();
        write_line(&PromptLine::Event(delivered));
        if let Some(step) = finished
            && let Some(entry) = usage(step).await
        {
            write_line(&PromptLine::StepUsage(StepUsageLine { session_id, entry }));
        }
    }
}

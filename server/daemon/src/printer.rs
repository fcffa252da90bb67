//! Streaming a turn to the terminal: assistant text as it arrives, reasoning dimmed, tool calls
//! and results, approvals, retries, and after each step its usage with the cause of a cache drop.
//! A spinner runs on stderr while the model has not answered yet (only on a terminal).
#![allow(clippy::print_stdout, clippy::print_stderr)] // a terminal printer prints

use std::io::{IsTerminal, Write};
use std::time::Duration;

use dsh_agent::SessionHandle;
use dsh_session::{ChunkDelta, Event, EventData, usage_rows};
use tokio::sync::broadcast;

use crate::views::usage_line;

const SPINNER: &[char] = &['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

#[derive(Default)]
struct State {
    waiting: bool,
    spinner_shown: bool,
    frame: usize,
    /// What the current output line holds: nothing, text, or reasoning.
    open_line: Option<bool>,
    color: bool,
}

impl State {
    fn clear_spinner(&mut self) {
        if self.spinner_shown {
            eprint!("\r\x1b[2K");
            self.spinner_shown = false;
        }
    }

    fn end_line(&mut self) {
        if self.open_line.take().is_some() {
            if self.color {
                print!("\x1b[0m");
            }
            println!();
        }
    }

    fn dim(&self, text: &str) -> String {
        if self.color { format!("\x1b[2m{text}\x1b[0m") } else { text.to_owned() }
    }
}

/// Prints the events of turn `turn` from `stored` then `live` until its `turn/end`.
pub async fn print_turn(
    session: &SessionHandle,
    turn: u64,
    stored: Vec<Event>,
    mut live: broadcast::Receiver<Event>,
) {
    let mut state = State { color: std::io::stdout().is_terminal(), ..State::default() };
    let spin = std::io::stderr().is_terminal();
    for event in stored {
        if print_event(session, turn, &event, &mut state).await {
            return;
        }
    }
    let mut tick = tokio::time::interval(Duration::from_millis(120));
    loop {
        // Cancel-safety: `recv` is cancel-safe (no message is lost when the tick wins);
        // `tick()` is cancel-safe.
        tokio::select! {
            received = live.recv() => match received {
                Ok(event) => {
                    state.clear_spinner();
                    if print_event(session, turn, &event, &mut state).await {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    state.end_line();
                    println!("{}", state.dim(&format!("({missed} events not shown: the terminal fell behind)")));
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tick.tick(), if spin && state.waiting => {
                state.frame = (state.frame + 1) % SPINNER.len();
                eprint!("\r{} waiting for the model…", SPINNER[state.frame]);
                let _ = std::io::stderr().flush();
                state.spinner_shown = true;
            }
        }
    }
}

/// Prints one event; returns true at the turn's end.
async fn print_event(session: &SessionHandle, turn: u64, event: &Event, state: &mut State) -> bool {
    match &event.data {
        EventData::StepStart(start) => {
            state.end_line();
            println!("{}", state.dim(&format!("── step {} ──", start.step)));
            state.waiting = true;
        }
        EventData::AssistantChunk(chunk) => {
            state.waiting = false;
            match &chunk.delta {
                ChunkDelta::Reasoning { text } if !text.is_empty() => {
                    if state.open_line != Some(true) {
                        state.end_line();
                        print!("{}", state.dim("thinking: "));
                        if state.color {
                            print!("\x1b[2m");
                        }
                        state.open_line = Some(true);
                    }
                    print!("{text}");
                }
                ChunkDelta::Text { text } if !text.is_empty() => {
                    if state.open_line != Some(false) {
                        state.end_line();
                        state.open_line = Some(false);
                    }
                    print!("{text}");
                }
                _ => {}
            }
            let _ = std::io::stdout().flush();
        }
        EventData::AssistantMessage(message) => {
            state.end_line();
            for call in &message.message.tool_calls {
                println!("→ {} {}", call.name, call.arguments);
            }
        }
        EventData::ApprovalRequest(request) => {
            state.end_line();
            println!("? approval needed: {}", request.summary);
        }
        EventData::ApprovalDecision(decision) => {
            println!("{}", state.dim(&format!("  decision: {:?}", decision.decision)));
        }
        EventData::ToolResult(result) => {
            state.end_line();
            let lines = result.content.lines().count();
            let first = result.content.lines().next().unwrap_or("");
            let first: String = first.chars().take(100).collect();
            let status = if result.is_error { "error" } else { "ok" };
            println!("← {} {status} ({lines} lines): {first}", result.name);
        }
        EventData::SteeringMessage(steering) => {
            state.end_line();
            println!("» steering: {}", steering.text);
        }
        EventData::LlmRetry(retry) => {
            state.end_line();
            println!(
                "{}",
                state.dim(&format!(
                    "retrying in {} ms (attempt {} failed: {})",
                    retry.delay_ms, retry.attempt, retry.error
                ))
            );
        }
        EventData::StepError(failure) => {
            state.end_line();
            state.waiting = false;
            let what = if failure.cancelled { "cancelled" } else { "failed" };
            println!("step {} {what}: {}", failure.step, failure.error);
        }
        EventData::StepEnd(end) => {
            state.end_line();
            state.waiting = false;
            let step = end.step;
            let row = session
                .query(move |s| usage_rows(s.events()).into_iter().find(|row| row.step == step))
                .await
                .ok()
                .flatten();
            if let Some(row) = row {
                println!("{}", state.dim(&format!("  usage {}", usage_line(&row).trim_start())));
            }
        }
        EventData::TurnEnd(end) if end.turn == turn => {
            state.end_line();
            state.clear_spinner();
            let error = end.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
            println!("turn {} ended: {}{error}", end.turn, end.reason.as_str());
            return true;
        }
        _ => {}
    }
    false
}

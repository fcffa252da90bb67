//! Streaming a turn to the terminal: assistant text as it arrives, reasoning dimmed, tool calls
//! and results, approvals, retries, and after each step its usage with the cause of a cache drop.
//! A spinner runs on stderr while the model has not answered yet (only on a terminal).
#![allow(clippy::print_stdout, clippy::print_stderr)] // a terminal printer prints

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use std::future::Future;

use dsh_protocol::{SessionEvent, UsageEntry};
use dsh_session::{ChunkDelta, Event, EventData};
use tokio::sync::mpsc;

use crate::text::{limit_text, plan_lines, usage_line};

const SPINNER: &[char] = &['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

#[derive(Default)]
struct State {
    waiting: bool,
    spinner_shown: bool,
    frame: usize,
    /// What the current output line holds: nothing, text, or reasoning.
    open_line: Option<bool>,
    color: bool,
    /// The turn being printed: the first `turn/start` seen.
    turn: Option<u64>,
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

/// Prints the events of one turn of `session_id` — from the first `turn/start` received to its
/// `turn/end` — as they arrive; a child's (another session's: a sub-agent the turn started),
/// one line per step it ends. `usage` looks up a finished step's usage entry (with the cause
/// of a drop).
pub async fn print_turn<U, F>(
    mut events: mpsc::Receiver<SessionEvent>,
    session_id: String,
    usage: U,
) where
    U: Fn(u64) -> F,
    F: Future<Output = Option<UsageEntry>>,
{
    let mut state = State { color: std::io::stdout().is_terminal(), ..State::default() };
    let spin = std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_millis(120));
    let mut children = Children::default();
    loop {
        // Cancel-safety: `recv` is cancel-safe (no message is lost when the tick wins);
        // `tick()` is cancel-safe.
        tokio::select! {
            received = events.recv() => match received {
                Some(delivered) if delivered.session_id != session_id => {
                    if let Some(line) = children.line(&delivered) {
                        state.clear_spinner();
                        state.end_line();
                        println!("{}", state.dim(&line));
                    }
                }
                Some(delivered) => {
                    state.clear_spinner();
                    if print_event(&delivered.event, &mut state, &usage).await {
                        return;
                    }
                }
                None => {
                    state.end_line();
                    state.clear_spinner();
                    return;
                }
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

/// The steps of the children a turn started, followed for one line per step.
#[derive(Default)]
struct Children(HashMap<String, ChildSteps>);

/// One child's steps so far.
#[derive(Default)]
struct ChildSteps {
    /// The first seq of its own events (a `fork` child's log starts with its parent's).
    cut: u64,
    /// The next seq not yet seen.
    next_seq: u64,
    /// Its own steps ended.
    steps: u64,
    /// The tools its current step called.
    tools: Vec<String>,
}

impl Children {
    /// The line a child's event prints: `  ⋯ sub-agent ID step 2: read_file · 1834 tokens`
    /// at each step it ends.
    fn line(&mut self, delivered: &SessionEvent) -> Option<String> {
        let child = self.0.entry(delivered.session_id.clone()).or_default();
        let event = &delivered.event;
        if event.seq < child.next_seq {
            return None;
        }
        child.next_seq = event.seq + 1;
        match &event.data {
            EventData::SessionMeta(meta) => {
                child.cut = meta.forked_from.as_ref().map_or(0, |fork| fork.seq);
                None
            }
            _ if event.seq < child.cut => None,
            EventData::AssistantMessage(turn) => {
                child.tools =
                    turn.message.tool_calls.iter().map(|call| call.name.clone()).collect();
                None
            }
            EventData::StepEnd(end) => {
                child.steps += 1;
                let tools = std::mem::take(&mut child.tools);
                let did = if tools.is_empty() { "answered".to_owned() } else { tools.join(", ") };
                let tokens = end.usage.prompt_tokens + end.usage.completion_tokens;
                Some(format!(
                    "  ⋯ sub-agent {} step {}: {} · {tokens} tokens",
                    delivered.session_id,
                    child.steps,
                    clean(&did)
                ))
            }
            _ => None,
        }
    }
}

/// Model and tool text with terminal control sequences defused: control characters other than
/// newline and tab are shown as `\u{…}`, so a file or a model cannot drive the terminal.
pub(crate) fn clean(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        if character.is_control() && character != '\n' && character != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(character)));
        } else {
            out.push(character);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Prints one event; returns true at the turn's end.
async fn print_event<U, F>(event: &Event, state: &mut State, usage: &U) -> bool
where
    U: Fn(u64) -> F,
    F: Future<Output = Option<UsageEntry>>,
{
    match &event.data {
        EventData::TurnStart(start) if state.turn.is_none() => state.turn = Some(start.turn),
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
                    print!("{}", clean(text));
                }
                ChunkDelta::Text { text } if !text.is_empty() => {
                    if state.open_line != Some(false) {
                        state.end_line();
                        state.open_line = Some(false);
                    }
                    print!("{}", clean(text));
                }
                _ => {}
            }
            let _ = std::io::stdout().flush();
        }
        EventData::AssistantMessage(message) => {
            state.end_line();
            for call in &message.message.tool_calls {
                println!("→ {} {}", clean(&call.name), clean(&call.arguments));
            }
        }
        EventData::ApprovalRequest(request) => {
            state.end_line();
            println!("? approval needed: {}", clean(&request.summary));
        }
        EventData::ApprovalDecision(decision) => {
            println!("{}", state.dim(&format!("  decision: {:?}", decision.decision)));
        }
        EventData::TaskSpawn(spawn) => {
            state.end_line();
            println!(
                "⇢ sub-agent {} started ({}): {}",
                spawn.session_id,
                spawn.context.as_str(),
                clean(&spawn.description)
            );
        }
        // A sub-agent's end: the summary line its result closes with.
        EventData::ToolResult(result) if result.name == dsh_session::TASK_TOOL => {
            state.end_line();
            let last = result.content.lines().last().unwrap_or("");
            let status = if result.is_error { "error" } else { "ok" };
            println!("⇠ task {status}: {}", clean(last));
        }
        EventData::ToolResult(result) => {
            state.end_line();
            let lines = result.content.lines().count();
            let first = result.content.lines().next().unwrap_or("");
            let first: String = clean(first).chars().take(100).collect();
            let status = if result.is_error { "error" } else { "ok" };
            println!("← {} {status} ({lines} lines): {first}", result.name);
            for image in &result.images {
                println!("{}", state.dim(&format!("  {}", image_line(image))));
            }
        }
        // A prompt command's expansion: which command, from which file (the text is the
        // user's own prompt, expanded; `dsh saw` shows it whole).
        EventData::UserMessage(message) if message.command.is_some() => {
            if let Some(command) = &message.command {
                state.end_line();
                let line = format!(
                    "/{} expanded from {} ({} lines)",
                    clean(&command.name),
                    clean(&command.source),
                    message.text.lines().count()
                );
                println!("{}", state.dim(&line));
            }
        }
        EventData::SteeringMessage(steering) => {
            state.end_line();
            println!("» steering: {}", clean(&steering.text));
        }
        // The prompt's text is the user's own; its images are named (the bytes are in the
        // workspace's object store: `dsh object`).
        EventData::UserMessage(message) if !message.images.is_empty() => {
            state.end_line();
            for image in &message.images {
                println!("{}", state.dim(&format!("  {}", image_line(image))));
            }
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
        EventData::McpWait(wait) => {
            state.end_line();
            let what = match wait.reason {
                dsh_session::McpWaitReason::Starting => "to start",
                dsh_session::McpWaitReason::ToolsChanged => "to list their changed tools",
            };
            let servers = wait.servers.iter().map(|name| clean(name)).collect::<Vec<_>>();
            println!(
                "{}",
                state.dim(&format!("waiting for MCP server(s) {} {what}", servers.join(", ")))
            );
        }
        EventData::TurnLimit(limit) => {
            state.end_line();
            println!("⊘ {}", limit_text(limit));
        }
        EventData::PlanUpdate(update) => {
            state.end_line();
            for line in plan_lines(update) {
                println!("{}", clean(&line));
            }
        }
        EventData::WorkspaceCheckpoint(checkpoint) => {
            state.end_line();
            println!("{}", state.dim(&checkpoint_line(checkpoint)));
        }
        EventData::WorkspaceRewind(rewind) => {
            state.end_line();
            println!("{}", rewind_line(rewind));
        }
        // A hook that went on is a dim line; one that blocked or failed is always seen.
        EventData::HookRun(run) => {
            state.end_line();
            let line = clean(&hook_line(run)).into_owned();
            match run.outcome {
                dsh_session::HookOutcome::Ok => println!("{}", state.dim(&line)),
                _ => println!("{line}"),
            }
        }
        // The one correction of an answer that does not match the output schema: what is
        // wrong, as the model is told it.
        EventData::ContextMessage(note)
            if note.source.as_deref() == Some(dsh_daemon::OUTPUT_INVALID_SOURCE) =>
        {
            state.end_line();
            println!("↻ the answer does not match the output schema; asked once more:");
            for problem in note.text.lines().filter_map(|line| line.strip_prefix("- ")) {
                println!("{}", state.dim(&format!("  {}", clean(problem))));
            }
        }
        EventData::StepError(failure) => {
            state.end_line();
            state.waiting = false;
            let what = if failure.cancelled { "cancelled" } else { "failed" };
            println!("step {} {what}: {}", failure.step, clean(&failure.error));
        }
        EventData::StepEnd(end) => {
            state.end_line();
            state.waiting = false;
            if let Some(row) = usage(end.step).await {
                println!("{}", state.dim(&format!("  usage {}", usage_line(&row).trim_start())));
            }
        }
        EventData::TurnEnd(end) if Some(end.turn) == state.turn => {
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

/// One line for a `hook/run`: the hook, its event (and call), and how it ended.
pub fn hook_line(run: &dsh_session::HookRun) -> String {
    let about = match &run.tool {
        Some(tool) => format!("{}, {tool}", run.event.name()),
        None => run.event.name().to_owned(),
    };
    let head = format!("hook {} ({about})", run.hook);
    let reason = run.stderr.lines().find(|line| !line.trim().is_empty()).unwrap_or("");
    let mut line = match run.outcome {
        dsh_session::HookOutcome::Ok => format!("{head} ok, {} ms", run.duration_ms),
        dsh_session::HookOutcome::Blocked if reason.is_empty() => format!("⛔ {head} blocked"),
        dsh_session::HookOutcome::Blocked => format!("⛔ {head} blocked: {reason}"),
        dsh_session::HookOutcome::Failed => {
            format!("⚠ {head} failed: {}", run.error.as_deref().unwrap_or("it failed"))
        }
    };
    let cut = [
        (run.stdout_truncated, "its output was cut"),
        (run.stderr_truncated, "its error output was cut"),
        (run.invalid_utf8, "invalid UTF-8 was replaced"),
    ];
    for (flag, said) in cut {
        if flag {
            line.push_str(&format!(" [{said}]"));
        }
    }
    line
}

/// One line for a `workspace/checkpoint`.
pub fn checkpoint_line(checkpoint: &dsh_session::WorkspaceCheckpoint) -> String {
    let when = match (checkpoint.reason, checkpoint.step) {
        (_, Some(step)) => format!("before step {step}'s tools"),
        (dsh_session::CheckpointReason::Rewind, None) => "before a rewind".to_owned(),
        (_, None) => "at the turn's end".to_owned(),
    };
    let mut line = format!(
        "checkpoint {when}: {} files, {} changed",
        checkpoint.files,
        checkpoint.changed.len()
    );
    if !checkpoint.too_large.is_empty() {
        line.push_str(&format!(", {} over the size cap", checkpoint.too_large.len()));
    }
    if let Some(incomplete) = &checkpoint.incomplete {
        line.push_str(&format!(" (incomplete: {})", clean(incomplete)));
    }
    line
}

/// One line for a `workspace/rewind`.
pub fn rewind_line(rewind: &dsh_session::WorkspaceRewind) -> String {
    let what = match (rewind.files, rewind.conversation) {
        (true, true) => "files and conversation",
        (true, false) => "files",
        _ => "conversation",
    };
    let to = rewind
        .to_step
        .map_or_else(|| "to a checkpoint".to_owned(), |step| format!("to just before step {step}"));
    let mut line = format!("⟲ rewound {what} of {} {to}", clean(&rewind.from_session));
    if rewind.files {
        line.push_str(&format!(
            ": {} restored, {} created, {} deleted",
            rewind.restored.len(),
            rewind.created.len(),
            rewind.deleted.len()
        ));
        if rewind.forced {
            line.push_str(" (forced)");
        }
    }
    line
}

/// `[image: NAME, SIZE bytes, SHA256]`: how an image a message carries is shown.
fn image_line(image: &dsh_session::ImageRef) -> String {
    let name = image.name.as_deref().unwrap_or(&image.media_type);
    format!("[image: {}, {} bytes, {}]", clean(name), image.size, image.sha256)
}

//! Structural checks of a session log. They return diagnostics; they never panic.
//!
//! What a well-formed log obeys: it opens with `session/meta` at seq 0; seqs are contiguous;
//! turns and steps nest (`turn/start` ⊃ `step/start` … `step/end`|`step/error`); step and turn
//! numbers count up by one; header events sit inside a step, before its first response event;
//! every delta applies to the folded header and every step has a header before `request/sent`;
//! every tool call of a step is answered by a `tool/result` before the step closes; every
//! `surface/replace` names nodes that are on the surface; a `turn/limit` sits inside a turn,
//! between its steps; a `plan/update` follows at once the successful `update_plan` result it
//! names, and its plan obeys [`check_plan`]; a `workspace/checkpoint` of a step sits inside that
//! step and any other outside every step; a `workspace/rewind` sits outside every turn.
//! Compaction is bracketed: a
//! `compact/summary` answers an open `compact/start`, and a summary `surface/replace` follows
//! its `compact/summary`; a `compact/start` followed by nothing of the kind is an abandoned
//! attempt (its summarize call failed or was cancelled), which is well-formed. A trimmed tool
//! result replaces exactly one node (`start == end`): a tool result under the same `callId`.

use std::fmt;

use crate::event::{
    CheckpointReason, Event, EventData, HookEvent, HookRun, StepError, StopReason, SurfaceNode,
    SurfaceReplace, ToolResult, TurnEnd, WorkspaceCheckpoint,
};
use crate::header::fold_header_event;
use crate::image::{IMAGE_MEDIA_TYPES, ImageFormat};
use crate::message::Message;
use crate::plan::{UPDATE_PLAN_TOOL, check_plan};
use crate::reconstruct::is_response_event;
use crate::surface::SurfaceFold;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The log breaks a rule.
    Error,
    /// The log ends inside a turn or step: a running or interrupted session, not a broken one.
    Open,
}

/// One finding of [`check_log`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The seq of the offending event, when one is to blame.
    pub seq: Option<u64>,
    /// How bad it is.
    pub severity: Severity,
    /// What is wrong, for people.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seq {
            Some(seq) => write!(f, "seq {seq}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

struct OpenStep {
    step: u64,
    responded: bool,
    pending_calls: Vec<String>,
}

/// Where a compaction stands.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Compaction {
    #[default]
    Idle,
    Started,
    Summarized,
}

#[derive(Default)]
struct Checker {
    compaction: Compaction,
    diagnostics: Vec<Diagnostic>,
    open_turn: Option<u64>,
    open_step: Option<OpenStep>,
    last_turn: u64,
    last_step: u64,
    header: Option<crate::header::EpochHeader>,
    surface: SurfaceFold,
    /// The call id of the event just checked when it was a successful `update_plan` result:
    /// the one call a `plan/update` may name.
    plan_result: Option<String>,
}

impl Checker {
    fn error(&mut self, seq: u64, message: impl Into<String>) {
        self.diagnostics.push(Diagnostic {
            seq: Some(seq),
            severity: Severity::Error,
            message: message.into(),
        });
    }

    fn event(&mut self, index: usize, event: &Event) {
        let seq = event.seq;
        if seq != index as u64 {
            self.error(seq, format!("seq is not contiguous: expected {index}"));
        }
        if let EventData::SurfaceReplace(replace) = &event.data {
            self.replace(seq, replace);
        }
        if let Err(message) = self.surface.push(event) {
            self.error(seq, message);
        }
        match &event.data {
            EventData::CompactStart(_) => self.compaction = Compaction::Started,
            EventData::CompactSummary(_) => {
                if self.compaction != Compaction::Started {
                    self.error(seq, "compact/summary without a compact/start before it");
                }
                self.compaction = Compaction::Summarized;
            }
            EventData::SessionMeta(_) if index != 0 => {
                self.error(seq, "session/meta appears after the first line")
            }
            EventData::SessionMeta(_) => {}
            EventData::TurnStart(start) => {
                if let Some(open) = self.open_turn {
                    self.error(
                        seq,
                        format!("turn {} starts while turn {open} is open", start.turn),
                    );
                }
                if start.turn != self.last_turn + 1 {
                    self.error(
                        seq,
                        format!("turn {} does not follow turn {}", start.turn, self.last_turn),
                    );
                }
                self.last_turn = start.turn;
                self.open_turn = Some(start.turn);
            }
            EventData::TurnEnd(end) => {
                if self.open_turn != Some(end.turn) {
                    self.error(seq, format!("turn/end for turn {} which is not open", end.turn));
                }
                if let Some(step) = &self.open_step {
                    let step = step.step;
                    self.error(seq, format!("turn {} ends while step {step} is open", end.turn));
                    self.open_step = None;
                }
                self.open_turn = None;
            }
            EventData::UserMessage(_) if self.open_turn.is_none() => {
                self.error(seq, "user/message outside a turn")
            }
            // A budget stops a turn between its steps.
            EventData::TurnLimit(_) if self.open_turn.is_none() => {
                self.error(seq, "turn/limit outside a turn")
            }
            EventData::TurnLimit(_) => {
                if let Some(step) = &self.open_step {
                    let step = step.step;
                    self.error(seq, format!("turn/limit while step {step} is open"));
                }
            }
            EventData::StepStart(start) => {
                if self.open_turn != Some(start.turn) {
                    self.error(
                        seq,
                        format!(
                            "step {} claims turn {}, which is not open",
                            start.step, start.turn
                        ),
                    );
                }
                if let Some(open) = &self.open_step {
                    let open = open.step;
                    self.error(
                        seq,
                        format!("step {} starts while step {open} is open", start.step),
                    );
                }
                if start.step != self.last_step + 1 {
                    self.error(
                        seq,
                        format!("step {} does not follow step {}", start.step, self.last_step),
                    );
                }
                self.last_step = start.step;
                self.open_step = Some(OpenStep {
                    step: start.step,
                    responded: false,
                    pending_calls: Vec::new(),
                });
            }
            EventData::RequestHeader(_) | EventData::RequestHeaderDelta(_) => {
                match &self.open_step {
                    None => self.error(seq, format!("{} outside a step", event.kind())),
                    Some(step) if step.responded => {
                        let step = step.step;
                        self.error(
                            seq,
                            format!("{} after step {step}'s first response event", event.kind()),
                        )
                    }
                    Some(_) => {}
                }
                if let Err(error) = fold_header_event(&mut self.header, event) {
                    let message = match error {
                        Some(error) => format!("request/header-delta does not apply: {error}"),
                        None => "request/header-delta before any request/header".to_owned(),
                    };
                    self.error(seq, message);
                }
            }
            EventData::WorkspaceCheckpoint(checkpoint) => self.checkpoint(seq, checkpoint),
            EventData::HookRun(run) => self.hook_run(seq, run),
            EventData::WorkspaceRewind(_) if self.open_turn.is_some() => {
                self.error(seq, "workspace/rewind inside a turn")
            }
            data if is_response_event(data) => self.response(seq, event),
            _ => {}
        }
        self.images(seq, &event.data);
        self.plan_result = match &event.data {
            EventData::ToolResult(result)
                if result.name == UPDATE_PLAN_TOOL && !result.is_error =>
            {
                Some(result.call_id.clone())
            }
            _ => None,
        };
    }

    /// Each hook's run where its event happens: `PreToolUse` inside a step, naming a call of
    /// the step not answered yet; `PostToolUse` inside a step, naming a call; `SessionStart`
    /// and `UserPromptSubmit` before the turn they open (outside every turn); `Stop` inside a
    /// turn, between steps; `PreCompact` outside every step.
    fn hook_run(&mut self, seq: u64, run: &HookRun) {
        let name = &run.hook;
        let (turn, step) = (self.open_turn.is_some(), self.open_step.as_ref());
        let problem = match run.event {
            HookEvent::PreToolUse | HookEvent::PostToolUse => match (step, &run.call_id) {
                (None, _) => Some("outside a step".to_owned()),
                (Some(_), None) => Some("names no tool call".to_owned()),
                (Some(step), Some(call))
                    if run.event == HookEvent::PreToolUse && !step.pending_calls.contains(call) =>
                {
                    Some(format!("names call `{call}`, which the open step does not wait for"))
                }
                _ => None,
            },
            HookEvent::SessionStart | HookEvent::UserPromptSubmit if turn => {
                Some("inside a turn".to_owned())
            }
            HookEvent::Stop if !turn => Some("outside a turn".to_owned()),
            HookEvent::Stop | HookEvent::PreCompact if step.is_some() => {
                Some("inside a step".to_owned())
            }
            _ => None,
        };
        if let Some(problem) = problem {
            self.error(seq, format!("hook/run of {name} ({}) {problem}", run.event.name()));
        }
    }

    /// An image reference names an object by a SHA-256 and says a media type models are given.
    fn images(&mut self, seq: u64, data: &EventData) {
        let images = match data {
            EventData::UserMessage(message) => &message.images,
            EventData::ToolResult(result) => &result.images,
            _ => return,
        };
        for image in images {
            let hash = &image.sha256;
            if hash.len() != 64
                || !hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                self.error(seq, format!("image {hash:?} is not named by a lowercase hex SHA-256"));
            }
            if ImageFormat::of_media_type(&image.media_type).is_none() {
                self.error(
                    seq,
                    format!(
                        "image {hash} has media type {:?}, not one of {IMAGE_MEDIA_TYPES}",
                        image.media_type
                    ),
                );
            }
        }
    }

    /// A checkpoint of a step sits inside that step; any other checkpoint outside every step.
    fn checkpoint(&mut self, seq: u64, checkpoint: &WorkspaceCheckpoint) {
        let open = self.open_step.as_ref().map(|step| step.step);
        match (checkpoint.reason, checkpoint.step, open) {
            (CheckpointReason::Step, Some(step), Some(open)) if step == open => {}
            (CheckpointReason::Step, Some(step), _) => {
                self.error(seq, format!("workspace/checkpoint of step {step} outside that step"))
            }
            (CheckpointReason::Step, None, _) => {
                self.error(seq, "workspace/checkpoint of reason step without a step")
            }
            (_, Some(step), _) => self.error(
                seq,
                format!("workspace/checkpoint names step {step} but its reason is not step"),
            ),
            (_, None, Some(open)) => {
                self.error(seq, format!("workspace/checkpoint inside step {open} without its step"))
            }
            (_, None, None) => {}
        }
    }

    /// The compaction and trim rules of a `surface/replace` (the surface rules run in the fold).
    fn replace(&mut self, seq: u64, replace: &SurfaceReplace) {
        match &replace.node {
            SurfaceNode::Summary { .. } => {
                if self.compaction != Compaction::Summarized {
                    self.error(seq, "summary surface/replace without a compact/summary before it");
                }
                self.compaction = Compaction::Idle;
            }
            SurfaceNode::ToolResult(result) => {
                if replace.start != replace.end {
                    self.error(seq, "a trimmed tool/result must replace exactly one node");
                    return;
                }
                let replaced = self.surface.nodes.iter().find(|node| node.id == replace.start);
                let same_call = replaced.is_some_and(|node| {
                    matches!(&*node.message, Message::Tool { call_id, .. } if *call_id == result.call_id)
                });
                if replaced.is_some() && !same_call {
                    self.error(
                        seq,
                        format!(
                            "trimmed tool/result `{}` replaces node {}, which is not that call's result",
                            result.call_id, replace.start
                        ),
                    );
                }
            }
        }
    }

    fn response(&mut self, seq: u64, event: &Event) {
        let no_header = self.header.is_none();
        let Some(step) = self.open_step.as_mut() else {
            self.error(seq, format!("{} outside a step", event.kind()));
            return;
        };
        let first_response = !step.responded;
        step.responded = true;
        let step_number = step.step;
        let mut findings = Vec::new();
        match &event.data {
            EventData::RequestSent(_) if no_header => {
                findings.push(format!("step {step_number} was sent without a request header"))
            }
            EventData::AssistantMessage(turn) => {
                if turn.step != step_number {
                    findings.push(format!(
                        "assistant/message of step {} inside step {step_number}",
                        turn.step
                    ));
                }
                step.pending_calls.extend(turn.message.tool_calls.iter().map(|c| c.id.clone()));
            }
            EventData::ToolResult(result) => {
                match step.pending_calls.iter().position(|id| *id == result.call_id) {
                    Some(position) => {
                        step.pending_calls.remove(position);
                    }
                    None => findings.push(format!(
                        "tool/result answers call `{}`, which step {step_number} did not make or already answered",
                        result.call_id
                    )),
                }
            }
            EventData::PlanUpdate(update) => {
                if self.plan_result.as_deref() != Some(update.call_id.as_str()) {
                    findings.push(format!(
                        "plan/update names call `{}`, which is not the successful update_plan result just before it",
                        update.call_id
                    ));
                }
                if let Err(rule) = check_plan(update.explanation.as_deref(), &update.plan) {
                    findings.push(format!("plan/update breaks a rule of plans: {rule}"));
                }
            }
            EventData::TaskSpawn(spawn) if !step.pending_calls.contains(&spawn.call_id) => {
                findings.push(format!(
                    "task/spawn names call `{}`, which step {step_number} did not make or already answered",
                    spawn.call_id
                ));
            }
            EventData::StepEnd(_) | EventData::StepError(_) => {
                for call in step.pending_calls.drain(..) {
                    findings.push(format!(
                        "step {step_number} closes with tool call `{call}` unanswered"
                    ));
                }
                if first_response && no_header && matches!(event.data, EventData::StepEnd(_)) {
                    findings.push(format!("step {step_number} ends without a request header"));
                }
                self.open_step = None;
            }
            _ => {}
        }
        for message in findings {
            self.error(seq, message);
        }
    }
}

/// Checks the structural rules of a log (see the module docs). An empty vector means the log is
/// well-formed; [`Severity::Open`] findings only say the log ends mid-turn.
pub fn check_log(events: &[Event]) -> Vec<Diagnostic> {
    let mut checker = Checker::default();
    match events.first() {
        Some(Event { data: EventData::SessionMeta(_), .. }) => {}
        Some(first) => checker.error(first.seq, "the log does not open with session/meta"),
        None => checker.diagnostics.push(Diagnostic {
            seq: None,
            severity: Severity::Error,
            message: "the log is empty".to_owned(),
        }),
    }
    for (index, event) in events.iter().enumerate() {
        checker.event(index, event);
    }
    if let Some(step) = &checker.open_step {
        let message = format!("the log ends inside step {}", step.step);
        checker.diagnostics.push(Diagnostic { seq: None, severity: Severity::Open, message });
    }
    if let Some(turn) = checker.open_turn {
        let message = format!("the log ends inside turn {turn}");
        checker.diagnostics.push(Diagnostic { seq: None, severity: Severity::Open, message });
    }
    checker.diagnostics
}

/// How [`closing_events`] closes what a log leaves open.
#[derive(Clone, Copy, Debug)]
pub struct Closing<'a> {
    /// The `turn/end` reason.
    pub reason: StopReason,
    /// The error text of the `step/error` and the `turn/end`.
    pub error: &'a str,
    /// The content of the error `tool/result` given to each unanswered tool call.
    pub tool_result: &'a str,
}

/// The events that close what the end of `events` leaves open, in order: an error `tool/result`
/// for each unanswered call of the open step, a `step/error` for the step (cancelled unless the
/// reason is `error`), a `turn/end` for the turn. Empty when the log ends between turns.
///
/// Forks cut inside a turn and a loop resuming after a crash both append these, so the log stays
/// well-formed and its next request valid.
pub fn closing_events(events: &[Event], closing: Closing<'_>) -> Vec<EventData> {
    // Only the last turn can be open: start there.
    let start = events
        .iter()
        .rposition(|e| matches!(e.data, EventData::TurnStart(_) | EventData::TurnEnd(_)))
        .unwrap_or(0);
    let mut open_turn: Option<u64> = None;
    let mut open_step: Option<u64> = None;
    // (call id, tool name) of the open step's calls not answered yet.
    let mut pending: Vec<(String, String)> = Vec::new();
    for event in &events[start..] {
        match &event.data {
            EventData::TurnStart(start) => open_turn = Some(start.turn),
            EventData::TurnEnd(_) => {
                open_turn = None;
                open_step = None;
                pending.clear();
            }
            EventData::StepStart(start) => {
                open_step = Some(start.step);
                pending.clear();
            }
            EventData::AssistantMessage(turn) if open_step.is_some() => pending.extend(
                turn.message.tool_calls.iter().map(|call| (call.id.clone(), call.name.clone())),
            ),
            // One result answers one call, as in `check_log`: an assistant message may repeat a
            // call id, and the loop answers each of its calls.
            EventData::ToolResult(result) => {
                if let Some(position) = pending.iter().position(|(id, _)| *id == result.call_id) {
                    pending.remove(position);
                }
            }
            EventData::StepEnd(_) | EventData::StepError(_) => {
                open_step = None;
                pending.clear();
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Some(step) = open_step {
        out.extend(pending.into_iter().map(|(call_id, name)| {
            // A `task` call names the child it was waiting for.
            let content =
                crate::task::interrupted_task_result(&events[start..], &call_id, closing.error)
                    .unwrap_or_else(|| closing.tool_result.to_owned());
            EventData::ToolResult(ToolResult {
                call_id,
                name,
                content,
                is_error: true,
                seen: None,
                images: Vec::new(),
            })
        }));
        out.push(EventData::StepError(StepError {
            step,
            error: closing.error.to_owned(),
            cancelled: closing.reason != StopReason::Error,
        }));
    }
    if let Some(turn) = open_turn {
        out.push(EventData::TurnEnd(TurnEnd {
            turn,
            reason: closing.reason,
            error: Some(closing.error.to_owned()),
        }));
    }
    out
}

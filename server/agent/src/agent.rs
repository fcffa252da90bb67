//! The loop: one turn of steps (`docs/loop.md` walks through a step).
//!
//! Per step: render the assembly (system prompt + tool schemas) and compare by value → the
//! pre-step hook, context pressure, which may trim tool results or compact the surface by
//! appending events (`compact.rs`) → take the message snapshot and append `step/start` in one
//! owner command (the reconstruction boundary) → seed the call config (first request of this loop instance: the folded header's config with
//! the explicit options on top; afterwards: the folded header) → request hooks, which can only
//! return a replacement [`LlmCallConfig`] → the header event the request owes the log (snapshot,
//! verified delta, or nothing) → build the request, append `request/sent` with the wire body's
//! sha256, check the reconstruction invariant → dispatch → log chunks, the assembled
//! `assistant/message`, run the tool calls (with approvals) and log their results → `step/end`
//! with usage. Repeat until the model stops, `max_steps` is hit, a budget of the turn
//! ([`TurnLimits`], checked between steps; a timeout cancels) is reached, or the turn is
//! cancelled; the turn closes with `turn/end` and its reason. A failed or cancelled step never leaves a half
//! message on the surface: the message is appended only once the stream finished.
//!
//! The only in-process state of a loop instance that the log does not hold is one boolean:
//! whether it has anchored its header snapshot. The rest is either read from the log or a cache
//! of a fold over it that the log rebuilds (the memoized wire body, `WireCache`, which the
//! invariant checks against a fresh `wire_body`; the last request's messages with their
//! `SurfaceMark`; the folds of `allowAlways` decisions, instruction notes, seen files and the
//! last date note, each advanced over the events logged since).
//!
//! This file is the turn and the step; beside it: `config.rs` ([`AgentConfig`],
//! [`CallOverrides`]), `tool_calls.rs` (the schemas a step offers, and each call decided, asked,
//! logged and run), `instructions.rs` (the system prompt under the instruction policy),
//! `recovery.rs` (closing what a crash left open), `limits.rs` (the turn's budgets),
//! `output.rs` (a structured answer: the schema, its note, the check and the one correction).
//! Before a step runs a tool that can change files, and at a turn's end, the workspace is
//! checkpointed through the [`Checkpoints`] seam (logged `workspace/checkpoint`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_provider::{
    MessageAssembler, StreamEvent, WireBytes, WireCache, adapter_id, check_request,
    check_tool_arguments, wire_body,
};
use dsh_session::{
    AssistantChunk, AssistantTurn, CheckpointReason, ContextMessage, EpochHeader, EventData,
    GenerateRequest, HeaderPlan, ImageRef, InstructionFold, LlmCallConfig, LlmRetry,
    MAX_REQUEST_IMAGE_BYTES, Message, RequestHeader, RequestSent, Session, StepEnd, StepError,
    StopReason, SurfaceMark, ToolCall, TurnEnd, TurnLimit, TurnStart, Usage, UserMessage,
    image_bytes, image_count, plan_header_event, reconstruct_session_step,
};
use tokio_util::sync::CancellationToken;

use crate::approval::{AllowAlways, ApprovalPolicy, Approver, Policy};
use crate::checkpoints::Checkpoints;
use crate::compact::{CompactOutcome, ContextPolicy, relieve_pressure};
use crate::endpoint::{Endpoint, SharedEndpoints};
use crate::error::AgentError;
use crate::external::{ExternalTool, ExternalTools};
use crate::images::{ImageObjects, load_images};
use crate::invariant::first_difference;
use crate::owner::SessionHandle;
use crate::prompt::{date_context, local_date};
use crate::seen::Memory;
use crate::subagents::Subagents;
use crate::tools::{Toolbox, Workspace};

mod children;
mod config;
mod hooks;
mod instructions;
mod limits;
mod output;
mod recovery;
mod tool_calls;

pub use config::{AgentConfig, CallOverrides};
pub use hooks::{HOOK_SOURCE, pre_compact_hooks, run_hooks};
pub use limits::TurnLimits;
use limits::{Spent, TurnTimer};
pub use output::{MAX_SCHEMA_BYTES, OUTPUT_INVALID_SOURCE, OUTPUT_SCHEMA_SOURCE, OutputSchema};
pub use recovery::{INTERRUPTED, close_interrupted, close_open_turn};

/// What a request hook sees.
#[derive(Clone, Debug)]
pub struct HookContext {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn: u64,
    /// The step about to be requested.
    pub step: u64,
}

/// A request hook: it sees the seeded config and may return a replacement. That is all a hook
/// can shape; content only enters a request through the log.
pub type RequestHook = Box<dyn Fn(&HookContext, LlmCallConfig) -> LlmCallConfig + Send + Sync>;

/// How a turn ended.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnOutcome {
    /// The turn number.
    pub turn: u64,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// Steps run in this turn.
    pub steps: u64,
    /// Usage summed over the turn's steps.
    pub usage: Usage,
    /// The error, when the turn ended with one.
    pub error: Option<String>,
    /// The budget that stopped the turn (its `turn/limit`), when one did.
    pub limit: Option<TurnLimit>,
    /// The final answer, validated, when the turn had an output schema and completed.
    pub output: Option<serde_json::Value>,
    /// What was wrong with the last answer, when the turn ended `outputInvalid`.
    pub output_errors: Vec<String>,
    /// Where each step's time went.
    pub timings: Vec<StepTiming>,
    /// What the turn's priced steps cost, in USD (its children's not included).
    pub usd: f64,
}

/// Wall-clock split of one step: the provider call versus everything else (the harness).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTiming {
    /// The step.
    pub step: u64,
    /// From the start of the step to its end, tools included.
    pub total: Duration,
    /// From dispatch to the provider's finish (or failure).
    pub provider: Duration,
}

impl StepTiming {
    /// Time spent outside the provider call.
    pub fn harness(&self) -> Duration {
        self.total.saturating_sub(self.provider)
    }
}

/// Milliseconds since the Unix epoch; injectable so tests control "today".
pub type Clock = fn() -> u64;

/// One loop instance bound to one session.
pub struct Agent {
    endpoints: SharedEndpoints,
    toolbox: Arc<Toolbox>,
    approver: Arc<dyn Approver>,
    config: AgentConfig,
    hooks: Vec<RequestHook>,
    workspace: PathBuf,
    clock: Clock,
    /// Whether this instance has logged its anchoring header snapshot.
    anchored: bool,
    /// The serialized conversation so far, extended step by step; shared with whoever shows
    /// "what the model saw" ([`Agent::share_wire_cache`]).
    wire: Arc<std::sync::Mutex<WireCache>>,
    /// The messages of the last request and where the surface stood then: the next step's
    /// snapshot copies only what joined since (`None` after anything that did not end with a
    /// sent request).
    last_surface: Option<(SurfaceMark, Vec<Arc<dsh_session::Message>>)>,
    /// The `allowAlways` decisions folded from the log so far.
    allow_always: AllowAlways,
    /// The approval policy as the turn began: a configuration change that loosens it waits
    /// for the next turn, one that tightens it applies at once (each call takes the stricter).
    turn_floor: Option<ApprovalPolicy>,
    /// Each MCP tool's own policy as first seen in the turn (the same rule for servers).
    turn_external: HashMap<String, Policy>,
    /// The user's own configuration's policy (no workspace file), from the step's endpoint.
    user_approvals: Option<ApprovalPolicy>,
    /// The last `date` context note, folded from the log so far.
    dates: DateFold,
    /// What the model knows of the instruction files, folded from the log step by step.
    instructions: InstructionFold,
    /// The files the agent's tools read or wrote, folded from the log: their directories'
    /// nested instruction files apply.
    touched: dsh_session::SeenFiles,
    /// The skills of the current step's endpoint: the `skill` tool's, when there are any.
    skills: Vec<dsh_session::prompt_file::Skill>,
    /// The prompt command the next turn's prompt was expanded from, logged with it.
    prompt_command: Option<dsh_session::PromptCommand>,
    /// What the agent has seen of the files it read and wrote.
    memory: Option<Memory>,
    /// Tools from MCP servers, asked for at every step.
    external: Option<Arc<dyn ExternalTools>>,
    /// The external tools of the current step's header: what a call is dispatched to.
    external_tools: Vec<ExternalTool>,
    /// The running turn's cost budget, if any: a step whose model has no price in USD is not
    /// run under one.
    max_cost: Option<f64>,
    /// Where the workspace's files are recorded before file-changing steps and at turn ends.
    checkpoints: Option<Arc<dyn Checkpoints>>,
    /// The running turn's output schema, if any: its requests ask for the provider's JSON mode.
    output: Option<OutputSchema>,
    /// The user's hooks (docs/hooks.md), asked for at each point they run.
    user_hooks: Option<Arc<dyn crate::hooks::HookSource>>,
    /// Whether this instance ran the `SessionStart` hooks.
    session_started: bool,
    /// Whether the last call [`Agent::run_tool`] answered was run (`tool/call` logged).
    call_ran: bool,
    /// Runs the children of `task` calls (the daemon's); without it, no `task` tool.
    subagents: Option<Arc<dyn Subagents>>,
    /// What the running turn's children have spent: usage and USD (its budgets count it).
    children_spent: (Usage, f64),
    /// Where the images the conversation names are read from.
    image_objects: Option<Arc<dyn ImageObjects>>,
    /// The bytes of the last request's images, by hash: read once, not at every step.
    image_cache: HashMap<String, Arc<[u8]>>,
    /// The images the next turn's prompt carries ([`Agent::attach_images`]).
    prompt_images: Vec<ImageRef>,
    /// The current step's model, whether it reads images, and the images its request carried:
    /// what a `read_file` of an image gives it.
    step_images: StepImages,
    /// What remains of the running turn's budgets: set before each step, less the step's own
    /// spend once its answer is in (the children it starts may spend no more).
    turn_left: TurnLimits,
}

enum StepOutcome {
    /// The model asked for tools (or steering arrived): run another step.
    Continue,
    /// The turn ends.
    End(StopReason, Option<String>),
    /// The turn was cancelled before the step started (during the pre-step hook).
    CancelledBeforeStart,
    /// The model stopped. The turn ends unless steering arrived since the step's boundary —
    /// decided together with the `turn/end` append, in one owner command — or its answer does
    /// not match the turn's output schema.
    Stopped {
        /// Seq of the step's `step/start`.
        boundary: u64,
        /// The text of the model's last message: the turn's answer.
        answer: String,
    },
}

impl Agent {
    /// A loop instance for the session in `workspace` (its canonical root).
    pub fn new(
        endpoints: SharedEndpoints,
        toolbox: Arc<Toolbox>,
        approver: Arc<dyn Approver>,
        config: AgentConfig,
        workspace: &Path,
    ) -> Self {
        Agent {
            endpoints,
            toolbox,
            approver,
            config,
            hooks: Vec::new(),
            workspace: workspace.to_path_buf(),
            clock: dsh_store::now_ms,
            anchored: false,
            wire: Arc::default(),
            last_surface: None,
            allow_always: AllowAlways::default(),
            turn_floor: None,
            turn_external: HashMap::new(),
            user_approvals: None,
            dates: DateFold::default(),
            instructions: InstructionFold::default(),
            touched: dsh_session::SeenFiles::default(),
            skills: Vec::new(),
            prompt_command: None,
            memory: Some(Memory::default()),
            external: None,
            external_tools: Vec::new(),
            max_cost: None,
            checkpoints: None,
            output: None,
            user_hooks: None,
            session_started: false,
            call_ran: false,
            subagents: None,
            children_spent: (Usage::default(), 0.0),
            image_objects: None,
            image_cache: HashMap::new(),
            prompt_images: Vec::new(),
            step_images: StepImages::default(),
            turn_left: TurnLimits::default(),
        }
    }

    /// Asks this turn's approvals through `approver` (a turn a client asked for asks the
    /// session's clients; a child's turn asks through its parent's).
    pub fn set_approver(&mut self, approver: Arc<dyn Approver>) {
        self.approver = approver;
    }

    /// Runs the children of `task` calls through `subagents` (and offers the tool when it
    /// says so).
    pub fn set_subagents(&mut self, subagents: Arc<dyn Subagents>) {
        self.subagents = Some(subagents);
    }

    /// Reads the images the conversation names from `objects` when it builds a request.
    pub fn set_image_objects(&mut self, objects: Arc<dyn ImageObjects>) {
        self.image_objects = Some(objects);
    }

    /// The next turn's prompt carries `images` (already stored, checked against the model):
    /// its `user/message` names them, after its text.
    pub fn attach_images(&mut self, images: Vec<ImageRef>) {
        self.prompt_images = images;
    }

    /// Records the workspace's files before each step that runs a tool that can change them,
    /// and at each turn's end (logged `workspace/checkpoint`).
    pub fn set_checkpoints(&mut self, checkpoints: Arc<dyn Checkpoints>) {
        self.checkpoints = Some(checkpoints);
    }

    /// Takes a checkpoint, when there is a seam, and logs it.
    async fn checkpoint(
        &self,
        session: &SessionHandle,
        step: Option<u64>,
        reason: CheckpointReason,
    ) -> Result<(), AgentError> {
        let Some(checkpoints) = &self.checkpoints else { return Ok(()) };
        if let Some(checkpoint) = checkpoints.checkpoint(step, reason).await {
            session.append(EventData::WorkspaceCheckpoint(checkpoint)).await?;
        }
        Ok(())
    }

    /// Adds tools from outside the toolbox (the daemon's MCP servers).
    pub fn set_external_tools(&mut self, external: Arc<dyn ExternalTools>) {
        self.external = Some(external);
    }

    /// Serializes requests into `cache`, which a viewer of the session may read (clone, never
    /// change): the body of the step just sent is then at hand for "what the model saw".
    pub fn share_wire_cache(&mut self, cache: Arc<std::sync::Mutex<WireCache>>) {
        self.wire = cache;
    }

    /// Adds a request hook; hooks run in the order added.
    pub fn add_request_hook(&mut self, hook: RequestHook) {
        self.hooks.push(hook);
    }

    /// Replaces the clock (tests).
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// Runs one turn for `prompt` to its end, without budgets ([`Agent::run_turn_within`]).
    pub async fn run_turn(
        &mut self,
        session: &SessionHandle,
        prompt: &str,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, AgentError> {
        self.run_turn_within(session, prompt, cancel, &TurnLimits::default()).await
    }

    /// Runs one turn for `prompt` to its end, within `limits`. Provider failures, cancellation
    /// and a budget reached end the turn with a logged reason and are reported in the outcome;
    /// `Err` means the log itself could not be written (or the invariant broke), and the session
    /// should be considered failed.
    pub async fn run_turn_within(
        &mut self,
        session: &SessionHandle,
        prompt: &str,
        cancel: &CancellationToken,
        limits: &TurnLimits,
    ) -> Result<TurnOutcome, AgentError> {
        self.run_turn_shaped(session, prompt, cancel, limits, None).await
    }

    /// Names the prompt command the next turn's prompt is the expansion of: logged with its
    /// `user/message` (`docs/skills.md`, "Prompt commands"), then forgotten.
    pub fn set_prompt_command(&mut self, command: Option<dsh_session::PromptCommand>) {
        self.prompt_command = command;
    }

    /// Runs one turn for `prompt` to its end, within `limits`, its final answer held to
    /// `output` when given (docs/scripting.md, "Structured answers"): the schema is logged as a
    /// context note after the prompt; an answer that does not validate is named in one logged
    /// correction and asked for once more; still invalid, the turn ends `outputInvalid`.
    pub async fn run_turn_shaped(
        &mut self,
        session: &SessionHandle,
        prompt: &str,
        cancel: &CancellationToken,
        limits: &TurnLimits,
        output: Option<OutputSchema>,
    ) -> Result<TurnOutcome, AgentError> {
        let started = Instant::now();
        // The timeout cancels the turn as `session/cancel` does, through a token of its own:
        // the turn's token cancelled while the caller's is not means the timer fired.
        let outer = cancel;
        let cancel = &outer.child_token();
        let _timer = limits.timeout.map(|timeout| TurnTimer::start(timeout, cancel.clone()));
        self.max_cost = limits.max_cost;
        self.output = output;
        close_interrupted(session).await?;
        self.turn_floor = None;
        self.turn_external.clear();
        let mut dates = std::mem::take(&mut self.dates);
        let (turn, dates) = session
            .query(move |s| {
                dates.fold(s.events());
                (s.last_turn() + 1, dates)
            })
            .await?;
        self.dates = dates;
        // Hooks before the turn: what `SessionStart` adds, and `UserPromptSubmit`'s verdict —
        // a refused prompt opens no turn.
        let session_notes = self.session_start_hooks(session, turn > 1, cancel).await?;
        let prompted = match self.prompt_hooks(session, prompt, cancel).await {
            Err(refused @ AgentError::PromptRefused { .. }) => {
                // `SessionStart` runs again before the next prompt.
                self.session_started = false;
                return Err(refused);
            }
            other => other?,
        };
        session.append(EventData::TurnStart(TurnStart { turn })).await?;
        for note in session_notes {
            session.append(EventData::ContextMessage(note)).await?;
        }
        if self.config.date_context {
            let today = date_context(&local_date((self.clock)()));
            if self.dates.last.as_deref() != Some(today.as_str()) {
                let context = ContextMessage {
                    text: today,
                    source: Some("date".to_owned()),
                    instructions: None,
                    files: None,
                };
                session.append(EventData::ContextMessage(context)).await?;
            }
        }
        let command = self.prompt_command.take();
        let images = std::mem::take(&mut self.prompt_images);
        session
            .append(EventData::UserMessage(UserMessage {
                text: prompt.to_owned(),
                command,
                images,
            }))
            .await?;
        for note in prompted {
            session.append(EventData::ContextMessage(note)).await?;
        }
        if let Some(output) = &self.output {
            session.append(EventData::ContextMessage(output.note())).await?;
        }

        let mut outcome = TurnOutcome {
            turn,
            stop_reason: StopReason::Completed,
            steps: 0,
            usage: Usage::default(),
            error: None,
            limit: None,
            output: None,
            output_errors: Vec::new(),
            timings: Vec::new(),
            usd: 0.0,
        };
        self.children_spent = (Usage::default(), 0.0);
        let mut usd = 0.0;
        // Whether the turn's end was checkpointed (before a budget's `turn/limit`).
        let mut checkpointed = false;
        // An invalid answer's problems, to be named in the correction before the next step;
        // and whether the one correction was asked for.
        let mut correction: Option<Vec<String>> = None;
        let mut corrected = false;
        // Whether a `Stop` hook already made the turn go on (its next run is told).
        let mut stop_hook_active = false;
        loop {
            // Between steps: a budget reached stops the turn here, never inside a step. The
            // children's spend counts.
            outcome.usd = usd;
            let (children_usage, children_usd) = self.children_spent;
            let usage = outcome.usage.add(&children_usage);
            let spent = Spent { steps: outcome.steps, usage, usd: usd + children_usd };
            if let Some(limit) = limits.reached(&spent) {
                // The turn's end: its checkpoint first, then the limit, right before `turn/end`.
                self.checkpoint(session, None, CheckpointReason::TurnEnd).await?;
                checkpointed = true;
                session.append(EventData::TurnLimit(limit.clone())).await?;
                outcome.stop_reason = StopReason::Limit;
                outcome.limit = Some(limit);
                break;
            }
            self.turn_left = limits.left(&spent, started.elapsed());
            if cancel.is_cancelled() {
                outcome.stop_reason = StopReason::Cancelled;
                break;
            }
            if outcome.steps >= u64::from(self.config.max_steps) {
                outcome.stop_reason = StopReason::MaxSteps;
                break;
            }
            // Only a step that will run is owed the correction: a budget reached first ends
            // the turn without it.
            if let Some(problems) = correction.take() {
                session.append(EventData::ContextMessage(output::correction(&problems))).await?;
            }
            outcome.steps += 1;
            let step_started = Instant::now();
            let mut provider = Duration::ZERO;
            let step_outcome = self
                .run_step(session, turn, cancel, &mut outcome.usage, &mut usd, &mut provider)
                .await;
            if let Ok(StepOutcome::CancelledBeforeStart) = step_outcome {
                outcome.steps -= 1;
                outcome.stop_reason = StopReason::Cancelled;
                break;
            }
            let step = session.query(|s| s.last_step()).await?;
            outcome.timings.push(StepTiming { step, total: step_started.elapsed(), provider });
            match step_outcome {
                Ok(StepOutcome::Continue | StepOutcome::CancelledBeforeStart) => {}
                Ok(StepOutcome::Stopped { boundary, answer }) => {
                    let checked = self.output.as_ref().map(|output| output.check(&answer));
                    if let Some(Err(problems)) = checked {
                        // Steering since the boundary asks for another answer anyway; that one
                        // is checked in turn.
                        if session.query(move |s| steering_after(s, boundary)).await? {
                            continue;
                        }
                        if corrected {
                            outcome.stop_reason = StopReason::OutputInvalid;
                            outcome.error = Some(output::failure(&problems));
                            outcome.output_errors = problems;
                            break;
                        }
                        corrected = true;
                        correction = Some(problems);
                        continue;
                    }
                    // A `Stop` hook may send the model back to work, with a logged note.
                    if let Some(note) =
                        self.stop_hooks(session, &answer, stop_hook_active, cancel).await?
                    {
                        session.append(EventData::ContextMessage(note)).await?;
                        stop_hook_active = true;
                        continue;
                    }
                    // What the turn's tools left, recorded before its end (a client takes
                    // `turn/end` as the turn's last event). Steering already here continues
                    // the turn instead; one arriving in between leaves this checkpoint between
                    // two steps, which is as true a record.
                    let steered = session.query(move |s| steering_after(s, boundary)).await?;
                    if !steered {
                        self.checkpoint(session, None, CheckpointReason::TurnEnd).await?;
                    }
                    // Steering that arrived during this step has not been seen yet: it joins the
                    // next request of the same turn. Checking and ending in one owner command
                    // leaves no window for a steering message to slip in unanswered.
                    let end = TurnEnd { turn, reason: StopReason::Completed, error: None };
                    let ended = session
                        .append_unless(EventData::TurnEnd(end), move |s| {
                            steering_after(s, boundary)
                        })
                        .await?;
                    if ended.is_some() {
                        outcome.usd = usd;
                        outcome.output = checked.and_then(Result::ok);
                        return Ok(outcome);
                    }
                }
                Ok(StepOutcome::End(reason, error)) => {
                    outcome.stop_reason = reason;
                    outcome.error = error;
                    break;
                }
                Err(error) => {
                    // The log may still be writable (an invariant failure, one failed write):
                    // close what is open — unanswered calls, the step, the turn — so the session
                    // stays well-formed and its next request valid, then report.
                    let _ = close_open_turn(session, StopReason::Error, &error.to_string()).await;
                    return Err(error);
                }
            }
        }
        // What the turn's tools left — a cancelled command's half-work included — recorded
        // before its end (and before a timeout's `turn/limit`, which `turn/end` follows).
        if !checkpointed {
            self.checkpoint(session, None, CheckpointReason::TurnEnd).await?;
        }
        // A cancellation the caller did not ask for is the timeout's: logged as a cancellation
        // (the step or tools it cut say so), and named as the budget it is.
        if outcome.stop_reason == StopReason::Cancelled
            && !outer.is_cancelled()
            && let Some(limit) = limits.timed_out(started.elapsed())
        {
            session.append(EventData::TurnLimit(limit.clone())).await?;
            outcome.stop_reason = StopReason::Limit;
            outcome.limit = Some(limit);
        }
        outcome.usd = usd;
        let end = TurnEnd { turn, reason: outcome.stop_reason, error: outcome.error.clone() };
        session.append(EventData::TurnEnd(end)).await?;
        Ok(outcome)
    }

    async fn run_step(
        &mut self,
        session: &SessionHandle,
        turn: u64,
        cancel: &CancellationToken,
        usage_sum: &mut Usage,
        usd_sum: &mut f64,
        provider_time: &mut Duration,
    ) -> Result<StepOutcome, AgentError> {
        // 1. Where the request goes: the pinned profile's endpoint, as configured now. A
        //    profile that cannot be used ends the turn before anything of the step is logged.
        let folded = session.query(|s| s.header().cloned()).await?;
        let pinned = self.seed_config(folded.as_ref());
        let endpoint = match self.endpoints.endpoint(&pinned) {
            Ok(endpoint) => endpoint,
            Err(error) => return Ok(StepOutcome::End(StopReason::Error, Some(error))),
        };
        // Under a cost budget, a step whose cost would be unknown is not run (the daemon
        // refuses such a prompt up front; the configuration may have changed since).
        let usd_price = endpoint.price.as_ref().filter(|price| price.currency == "USD");
        if self.max_cost.is_some() && usd_price.is_none() {
            let error = format!(
                "the turn has a cost budget, but model {} of {} has no price in USD: its cost \
                 is unknown",
                pinned.model, endpoint.label
            );
            return Ok(StepOutcome::End(StopReason::Error, Some(error)));
        }
        let usd_price = usd_price.cloned();

        // 2. Pre-step hook: context pressure trims tool results or compacts the surface, by
        //    appending events, before the snapshot (compact.rs).
        if let Some(approvals) = &endpoint.approvals {
            self.config.approvals = approvals.clone();
        }
        if self.turn_floor.is_none() {
            self.turn_floor = Some(self.config.approvals.clone());
        }
        self.user_approvals = endpoint.user_approvals.clone();
        if let Some(web) = &endpoint.web {
            self.config.web = web.clone();
        }
        self.skills.clone_from(&endpoint.skills);
        self.step_images = StepImages {
            model: pinned.model.clone(),
            reads: endpoint.images,
            max_images: endpoint.max_images,
            ..StepImages::default()
        };
        // Waiting for MCP servers that are starting: a cancel ends the wait (nothing of the step
        // is logged yet but the wait itself).
        let Some(tools) = self.tool_schemas(session, cancel).await? else {
            return Ok(StepOutcome::CancelledBeforeStart);
        };
        let context = match &self.config.context {
            ContextPolicy::Off => None,
            ContextPolicy::Fixed(context) => Some(context.clone()),
            ContextPolicy::ModelDefaults => endpoint.context.clone(),
        };
        if let Some(context) = context {
            let mut call = pinned.clone();
            call.wire.clone_from(&endpoint.wire);
            self.pre_compact(session, &context, cancel).await?;
            let relief =
                relieve_pressure(&endpoint.client, session, &context, &call, cancel).await?;
            if matches!(relief, CompactOutcome::Failed { cancelled: true, .. }) {
                return Ok(StepOutcome::CancelledBeforeStart);
            }
        }

        // The system prompt, every step; compared by value below. An edited instruction file
        // either joins as a logged note before the boundary or rewrites the prompt.
        let system = self.system_prompt(session, &endpoint, &pinned, &tools).await?;
        // Files the agent read or wrote that changed on disk since: one logged note.
        if let Some(note) = self.with_memory(session, Memory::note).await? {
            session.append(EventData::ContextMessage(note)).await?;
        }

        // 3. Snapshot + step/start, atomically.
        let step = session.query(|s| s.last_step() + 1).await?;
        let held = self.last_surface.take();
        let snapshot = session.begin_step(step, turn, held.as_ref().map(|(mark, _)| *mark)).await?;
        let messages = match held {
            Some((_, mut messages)) if snapshot.extends => {
                messages.extend(snapshot.messages);
                messages
            }
            _ => snapshot.messages,
        };

        // 4. Seed the call config; the wire format is the profile's, as configured now.
        let mut config = self.seed_config(snapshot.header.as_ref());
        config.wire.clone_from(&endpoint.wire);
        // The JSON mode is the turn's: asked for under an output schema, dropped after.
        config.response_format =
            self.output.as_ref().and_then(|output| output.response_format(&config));

        // 5. Request hooks: a replacement config is all they can return.
        let context = HookContext { session_id: session.session_id().to_owned(), turn, step };
        let config = self.hooks.iter().fold(config, |config, hook| hook(&context, config));

        // 6. The header event the request owes the log.
        let header = EpochHeader::new(config, Some(system), tools);
        match plan_header_event(snapshot.header.as_ref(), &header, !self.anchored) {
            HeaderPlan::Unchanged => {}
            HeaderPlan::Delta(delta) => {
                session.append(EventData::RequestHeaderDelta(*delta)).await?;
            }
            HeaderPlan::Snapshot(reason) => {
                let snapshot_event = RequestHeader { reason, header: header.clone() };
                session.append(EventData::RequestHeader(snapshot_event)).await?;
            }
        }
        self.anchored = true;

        // 7. Build, record, check, dispatch.
        // A request never carries images its model refuses, nor more than it takes, and never
        // goes without them: such a step fails, nothing sent (the configuration changed under
        // the session, or the conversation grew past the limit).
        if let Some(error) = image_refusal(&messages, &endpoint, &header.config.model) {
            return self.fail_step(session, step, error, false).await;
        }
        // The images the messages name, read before the request is built (a missing one
        // fails the step, naming it: a request never goes without an image its log names).
        let objects = self.image_objects.as_ref();
        let images = match load_images(objects, &mut self.image_cache, &messages).await {
            Ok(images) => images,
            Err((image, why)) => {
                let error = format!(
                    "image {} of session {} (step {step}) cannot be read: {why}",
                    image.sha256,
                    session.session_id()
                );
                return self.fail_step(session, step, error, false).await;
            }
        };
        self.step_images.carried = image_count(&messages);
        self.step_images.bytes = image_bytes(&messages);
        let mut request = GenerateRequest { header, messages, images };
        // A request its format would reject (a tool result without its call, unsigned
        // reasoning in an Anthropic tool-use turn, …) is never sent: the step fails here, with
        // the reason, instead of as a 400 after the fact.
        if let Err(problem) = check_request(&request) {
            let error = format!("the request cannot be sent ({}): {problem}", endpoint.label);
            return self.fail_step(session, step, error, false).await;
        }
        // Memoized: only this step's new messages are serialized and hashed (the invariant check
        // below compares with a from-scratch `wire_body` of the rebuilt request).
        let (body, sha256) =
            self.wire.lock().unwrap_or_else(std::sync::PoisonError::into_inner).body(&request);
        let adapter = adapter_id(&request.header.config).to_owned();
        let sent = RequestSent { adapter, sha256, bytes: body.len() as u64 };
        session.append(EventData::RequestSent(sent)).await?;
        if self.config.check_invariants {
            check_invariant(session, step, &request, &body).await?;
        }
        // Kept for the next step's snapshot; the rest of the step needs only the header.
        self.last_surface = Some((snapshot.mark, std::mem::take(&mut request.messages)));

        // 8. Stream.
        let dispatched = Instant::now();
        let mut stream = endpoint.client.stream(body, cancel.child_token());
        let mut assembler = MessageAssembler::new();
        let finish = loop {
            // Cancel-safety: `stream.next()` is cancel-safe (events are queued in a channel);
            // `cancelled()` is cancel-safe.
            let next = tokio::select! {
                next = stream.next() => next,
                () = cancel.cancelled() => {
                    drop(stream);
                    return self.fail_step(session, step, "cancelled".to_owned(), true).await;
                }
            };
            match next {
                Some(Ok(StreamEvent::Delta(delta))) => {
                    assembler.push(&delta);
                    session
                        .append(EventData::AssistantChunk(AssistantChunk { step, delta }))
                        .await?;
                }
                Some(Ok(StreamEvent::Retry { attempt, delay, error })) => {
                    let retry =
                        LlmRetry { step, attempt, delay_ms: delay.as_millis() as u64, error };
                    session.append(EventData::LlmRetry(retry)).await?;
                }
                Some(Ok(StreamEvent::Finish { finish_reason, usage })) => {
                    break (finish_reason, usage);
                }
                Some(Err(error)) => {
                    let cancelled = cancel.is_cancelled();
                    let message = if cancelled {
                        error.to_string()
                    } else {
                        format!("{error} ({})", endpoint.label)
                    };
                    return self.fail_step(session, step, message, cancelled).await;
                }
                None => {
                    let message = "the provider stream ended without a finish".to_owned();
                    return self.fail_step(session, step, message, false).await;
                }
            }
        };
        *provider_time = dispatched.elapsed();
        let (finish_reason, usage) = finish;
        *usage_sum = usage_sum.add(&usage);
        let step_usd = usd_price.as_ref().map_or(0.0, |price| price.cost(&usage).amount);
        *usd_sum += step_usd;
        // This step's own spend is not the children's it starts.
        self.turn_left = self.turn_left.less(&usage, step_usd);
        let message = assembler.finish();
        if message.content.trim().is_empty() && message.tool_calls.is_empty() {
            // An empty (or whitespace-only) assistant message would be rejected by the provider
            // in every later request; it never reaches the surface.
            let end = StepEnd { step, finish_reason, usage };
            session.append(EventData::StepEnd(end)).await?;
            let error = "the model returned an empty message".to_owned();
            return Ok(StepOutcome::End(StopReason::Error, Some(error)));
        }
        if let Some(problem) = invalid_tool_calls(&message.tool_calls, &request.header.config) {
            // Logged, such a message would be sent back in every later request and rejected
            // every time: it never reaches the surface.
            let error = format!("the model returned an invalid tool call: {problem}");
            return self.fail_step(session, step, error, false).await;
        }
        let calls = message.tool_calls.clone();
        let answer = if calls.is_empty() { message.content.clone() } else { String::new() };
        session.append(EventData::AssistantMessage(AssistantTurn { step, message })).await?;

        // The workspace as the step found it, before any of its tools can change it: what a
        // rewind to this step restores (logged inside the step, before the first `tool/call`).
        if calls.iter().any(|call| crate::tools::may_change_files(&call.name)) {
            self.checkpoint(session, Some(step), CheckpointReason::Step).await?;
        }
        // Tools, inside the step: every call is answered before step/end. The children of
        // `task` calls start first and run while the other calls run in order.
        let mut children =
            self.start_children(session, step, snapshot.boundary_seq, &calls, cancel).await?;
        for call in &calls {
            if let Some(child) = children.remove(&call.id) {
                // A child that ran is a call that ran: its `PostToolUse` hooks see its answer.
                let ran = matches!(child, children::Child::Running(..));
                let result = self.await_child(call, child).await;
                session.append(EventData::ToolResult(result.clone())).await?;
                if ran {
                    self.post_tool_hooks(session, call, &result, cancel).await?;
                }
                continue;
            }
            let (result, plan) = self.run_tool(session, step, call, cancel).await?;
            // A call a `PreToolUse` hook blocked did not run: no `PostToolUse` for it.
            let ran = std::mem::take(&mut self.call_ran);
            let held = ran.then(|| result.clone());
            match plan {
                // The plan follows its result at once: a client's steering never lands between.
                Some(plan) => {
                    let events = vec![EventData::ToolResult(result), EventData::PlanUpdate(plan)];
                    session.append_all(events).await?;
                }
                None => {
                    session.append(EventData::ToolResult(result)).await?;
                }
            }
            if let Some(result) = held {
                self.post_tool_hooks(session, call, &result, cancel).await?;
            }
        }
        session.append(EventData::StepEnd(StepEnd { step, finish_reason, usage })).await?;

        if cancel.is_cancelled() {
            return Ok(StepOutcome::End(StopReason::Cancelled, None));
        }
        if !calls.is_empty() {
            return Ok(StepOutcome::Continue);
        }
        Ok(StepOutcome::Stopped { boundary: snapshot.boundary_seq, answer })
    }

    /// Runs `work` on the file memory, advanced over the log first, on the blocking pool (it
    /// reads and hashes files).
    async fn with_memory<T: Send + 'static>(
        &mut self,
        session: &SessionHandle,
        work: impl FnOnce(&mut Memory, &Workspace) -> T + Send + 'static,
    ) -> Result<T, AgentError> {
        let mut memory = self.memory.take().unwrap_or_default();
        let mut memory = session
            .query(move |s| {
                memory.advance(s.events());
                memory
            })
            .await?;
        let workspace = self.toolbox.workspace().clone();
        let task = tokio::task::spawn_blocking(move || {
            let result = work(&mut memory, &workspace);
            (memory, result)
        });
        match task.await {
            Ok((memory, result)) => {
                self.memory = Some(memory);
                Ok(result)
            }
            Err(error) => Err(AgentError::Internal(format!("file memory task failed: {error}"))),
        }
    }

    /// The call config a request starts from: on the first request of this loop instance, the
    /// folded header's config with the explicit options on top; afterwards, the folded header.
    fn seed_config(&self, header: Option<&EpochHeader>) -> LlmCallConfig {
        if self.anchored {
            match header {
                Some(header) => header.config.clone(),
                None => self.config.overrides.apply(self.config.default_call.clone()),
            }
        } else {
            let base =
                header.map_or_else(|| self.config.default_call.clone(), |h| h.config.clone());
            self.config.overrides.apply(base)
        }
    }

    async fn fail_step(
        &self,
        session: &SessionHandle,
        step: u64,
        error: String,
        cancelled: bool,
    ) -> Result<StepOutcome, AgentError> {
        let failure = StepError { step, error: error.clone(), cancelled };
        session.append(EventData::StepError(failure)).await?;
        Ok(if cancelled {
            StepOutcome::End(StopReason::Cancelled, None)
        } else {
            StepOutcome::End(StopReason::Error, Some(error))
        })
    }
}

/// The model of the running step and the images its request carried, with what tool results
/// of the step added: whether a `read_file` of an image may give it one more.
#[derive(Debug, Default)]
pub(crate) struct StepImages {
    /// The model.
    pub(crate) model: String,
    /// Whether it reads images (its endpoint's `images`).
    pub(crate) reads: bool,
    /// The most images one request to it carries (its endpoint's `max_images`).
    pub(crate) max_images: u32,
    /// Images carried: the step's request's, and those its tool results added.
    pub(crate) carried: usize,
    /// Their bytes.
    pub(crate) bytes: u64,
}

impl StepImages {
    /// Why one more image of `size` bytes would not fit the next request, if it would not.
    pub(crate) fn no_room_for(&self, size: u64) -> Option<String> {
        if self.carried >= self.max_images as usize {
            return Some(format!(
                "the conversation already carries {} images, the most one request to model {} \
                 takes (its `max_images`)",
                self.carried, self.model
            ));
        }
        (self.bytes + size > MAX_REQUEST_IMAGE_BYTES).then(|| {
            format!(
                "with it the conversation would carry {} bytes of images, more than the {} one \
                 request carries",
                self.bytes + size,
                MAX_REQUEST_IMAGE_BYTES
            )
        })
    }
}

/// Why a request of `messages` cannot go to `endpoint`'s `model` because of its images: the
/// model does not read images (its `images` setting changed, or the session was moved) or they
/// are more than its `max_images`, or more bytes than [`MAX_REQUEST_IMAGE_BYTES`]. Each error
/// names the model or the limit and the count, and says how to go on.
fn image_refusal(messages: &[Arc<Message>], endpoint: &Endpoint, model: &str) -> Option<String> {
    let count = image_count(messages);
    if count == 0 {
        return None;
    }
    let plural = if count == 1 { "" } else { "s" };
    if !endpoint.images {
        return Some(format!(
            "model {model} ({}) does not read images, and the conversation carries {count} \
             image{plural}: nothing was sent. Set `images = true` for it if it reads images; \
             else compact the session (`dsh compact`: the summary describes the images it \
             replaces), or fork it before its first image",
            endpoint.label
        ));
    }
    if count > endpoint.max_images as usize {
        return Some(format!(
            "the conversation carries {count} images, more than the {} one request to model \
             {model} may carry (its `max_images`): nothing was sent. Compact the session \
             (`dsh compact`: the summary describes the images it replaces)",
            endpoint.max_images
        ));
    }
    let bytes = image_bytes(messages);
    if bytes > MAX_REQUEST_IMAGE_BYTES {
        return Some(format!(
            "the conversation carries {count} image{plural} of {bytes} bytes together, more than \
             the {MAX_REQUEST_IMAGE_BYTES} bytes of images one request carries: nothing was \
             sent. Compact the session (`dsh compact`: the summary describes the images it \
             replaces)"
        ));
    }
    None
}

async fn check_invariant(
    session: &SessionHandle,
    step: u64,
    live: &GenerateRequest,
    live_body: &WireBytes,
) -> Result<(), AgentError> {
    // A fresh fold of the logged events (those that can shape a request), independent of the
    // live one the request came from.
    let rebuilt = session
        .query(move |s| reconstruct_session_step(s, step).map(|rebuilt| rebuilt.request))
        .await?;
    let mut rebuilt =
        rebuilt.map_err(|error| AgentError::Invariant { step, difference: error.to_string() })?;
    // The bytes are the store's, named by the rebuilt messages' hashes (compared below) and
    // verified against them when read.
    rebuilt.images = live.images.clone();
    let rebuilt_body = wire_body(&rebuilt);
    match first_difference(live, live_body, &rebuilt, &rebuilt_body) {
        None => Ok(()),
        Some(difference) => {
            let failure = StepError {
                step,
                error: format!("reconstruction invariant violated: {difference}"),
                cancelled: false,
            };
            session.append(EventData::StepError(failure)).await?;
            Err(AgentError::Invariant { step, difference })
        }
    }
}

/// The text of the session's last `date` context note, folded incrementally: each
/// [`DateFold::fold`] reads only the events it has not seen, so a turn's start costs O(new
/// events), not O(log).
#[derive(Clone, Debug, Default)]
struct DateFold {
    last: Option<String>,
    /// How many events of the log have been folded.
    folded: usize,
}

impl DateFold {
    /// Folds the events of `log` not folded yet (`log` is the whole log, growing).
    fn fold(&mut self, log: &[dsh_session::Event]) {
        let new = log.get(self.folded..).unwrap_or_default();
        let last = new.iter().rev().find_map(|event| match &event.data {
            EventData::ContextMessage(context) if context.source.as_deref() == Some("date") => {
                Some(&context.text)
            }
            _ => None,
        });
        if let Some(text) = last {
            self.last = Some(text.clone());
        }
        self.folded = log.len();
    }
}

/// What is wrong with a message's tool calls, if anything: every call needs a non-empty id and
/// name, and ids must be unique.
fn invalid_tool_calls(calls: &[ToolCall], config: &LlmCallConfig) -> Option<String> {
    let mut seen = std::collections::BTreeSet::new();
    for (index, call) in calls.iter().enumerate() {
        // Anthropic's `input` must be an object: any other text could never be sent back.
        if let Err(problem) = check_tool_arguments(config, &call.arguments) {
            return Some(format!("call {index} ({}): {problem}", call.id));
        }
        if call.id.is_empty() {
            return Some(format!("call {index} has no id"));
        }
        if call.name.is_empty() {
            return Some(format!("call {index} ({}) has no tool name", call.id));
        }
        if !seen.insert(call.id.as_str()) {
            return Some(format!("call id {} is used twice", call.id));
        }
    }
    None
}

fn steering_after(session: &Session, boundary: u64) -> bool {
    let start = usize::try_from(boundary).unwrap_or(usize::MAX);
    session
        .events()
        .get(start..)
        .unwrap_or_default()
        .iter()
        .any(|event| matches!(event.data, EventData::SteeringMessage(_)))
}

#[cfg(test)]
mod step_images_tests {
    #![allow(clippy::unwrap_used)]

    use super::{MAX_REQUEST_IMAGE_BYTES, StepImages};

    fn step(carried: usize, bytes: u64) -> StepImages {
        StepImages { model: "m".to_owned(), reads: true, max_images: 3, carried, bytes }
    }

    #[test]
    fn one_more_image_fits_only_under_both_the_count_and_the_bytes() {
        assert_eq!(step(2, 1_000).no_room_for(1_000), None);
        let full = step(3, 1_000).no_room_for(1).unwrap();
        assert!(full.contains("already carries 3 images") && full.contains("model m"), "{full}");
        assert_eq!(step(0, MAX_REQUEST_IMAGE_BYTES - 10).no_room_for(10), None);
        let heavy = step(0, MAX_REQUEST_IMAGE_BYTES - 10).no_room_for(11).unwrap();
        assert!(
            heavy.contains(&format!("{} bytes of images", MAX_REQUEST_IMAGE_BYTES + 1)),
            "{heavy}"
        );
    }
}

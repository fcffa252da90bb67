//! dsh's extensions of ACP, built here and nowhere else: the extension methods
//! (`_session/steering`, in the shape of the Claude Code and Codex adapters; `_dsh/fork`;
//! `_dsh/request`; `_dsh/rewind`) with their params and answers, the `_meta` entries under dsh's
//! keys (`dsh/usage`, `dsh/steering`, `dsh/turn`, `dsh/seq`, `dsh/approvalId`, `dsh/sandbox`,
//! `dsh/plan`, `dsh/task`, `dsh/taskProgress`), and
//! their advertisement in `initialize`. ACP's rules: custom data only inside `_meta`, custom
//! methods start with `_`; standard clients ignore both.

use agent_client_protocol::v1::schema::{ContentBlock, Meta};
use dsh_protocol::{Cost, SessionRewindParams, Usage};
use serde::{Deserialize, Serialize};

/// Steering a running turn (the de-facto extension of the Claude Code and Codex adapters).
pub(crate) const STEERING: &str = "_session/steering";
/// Forking a session at a step.
pub(crate) const FORK: &str = "_dsh/fork";
/// What the model saw at a step.
pub(crate) const REQUEST: &str = "_dsh/request";
/// Returning the workspace's files and the conversation to before a step.
pub(crate) const REWIND: &str = "_dsh/rewind";

/// A step's usage and cost, on the `usage_update` closing it.
const USAGE: &str = "dsh/usage";
/// A `user_message_chunk` that is steering, not a prompt.
const STEERING_MESSAGE: &str = "dsh/steering";
/// A prompt's turn, steps and summed usage, on its answer.
const TURN: &str = "dsh/turn";
/// The seq a steering message was logged at, on the `_session/steering` answer.
const SEQ: &str = "dsh/seq";
/// The approval a permission request asks for.
const APPROVAL_ID: &str = "dsh/approvalId";
/// The sandbox a command would run in, on its permission request.
const SANDBOX: &str = "dsh/sandbox";
/// The `update_plan` call that set a plan, its seq and the model's explanation, on the plan.
const PLAN: &str = "dsh/plan";
/// A `task` call's sub-agent (docs/subagents.md): its dsh session, how it started, its depth.
const TASK: &str = "dsh/task";
/// A running sub-agent's step ended: its dsh session, steps so far, the step's usage, its cost
/// so far.
const TASK_PROGRESS: &str = "dsh/taskProgress";

/// `_session/steering` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SteeringRequest {
    pub(crate) session_id: String,
    pub(crate) prompt: Vec<ContentBlock>,
}

/// The `_session/steering` answer.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub(crate) enum SteeringResponse {
    /// Logged (at `_meta["dsh/seq"]`): it joins the running turn's next request.
    Injected {
        #[serde(rename = "_meta")]
        meta: Meta,
    },
    /// No turn runs: nothing was logged, send a `session/prompt`.
    PromptRequired { reason: &'static str },
}

impl SteeringResponse {
    /// Logged at `seq`.
    pub(crate) fn injected(seq: u64) -> SteeringResponse {
        SteeringResponse::Injected { meta: meta(SEQ, seq) }
    }

    /// No turn to steer.
    pub(crate) fn no_running_turn() -> SteeringResponse {
        SteeringResponse::PromptRequired { reason: "noRunningTurn" }
    }
}

/// `_dsh/fork` params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ForkRequest {
    pub(crate) session_id: String,
    /// Fork before this step (its request is the fork's next); the whole log when absent.
    #[serde(default)]
    pub(crate) step: Option<u64>,
}

/// The `_dsh/fork` answer: the new session (open it with `session/load`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ForkResponse {
    pub(crate) session_id: String,
}

/// `_dsh/rewind` params: the daemon's `session/rewind` params (`protocol/README.md`), with
/// ACP's `_meta` allowed (and ignored).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RewindRequest {
    pub(crate) session_id: String,
    /// Rewind to just before this step ran.
    #[serde(default)]
    pub(crate) step: Option<u64>,
    /// Restore the files to the checkpoint logged at this seq (files only).
    #[serde(default)]
    pub(crate) checkpoint: Option<u64>,
    #[serde(default)]
    pub(crate) files: Option<bool>,
    #[serde(default)]
    pub(crate) conversation: Option<bool>,
    #[serde(default)]
    pub(crate) force: Option<bool>,
    #[serde(default)]
    pub(crate) dry_run: Option<bool>,
    #[serde(default, rename = "_meta")]
    _meta: Option<Meta>,
}

impl RewindRequest {
    /// The daemon's params.
    pub(crate) fn into_params(self) -> SessionRewindParams {
        SessionRewindParams {
            session_id: self.session_id,
            step: self.step,
            checkpoint: self.checkpoint,
            files: self.files,
            conversation: self.conversation,
            force: self.force,
            dry_run: self.dry_run,
        }
    }
}

/// The steering capability, where the adapters' clients look for it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SteeringCapability {
    supported: bool,
    method: &'static str,
    idle_behavior: &'static str,
}

const STEERING_CAPABILITY: SteeringCapability =
    SteeringCapability { supported: true, method: STEERING, idle_behavior: "promptRequired" };

/// dsh's own advertisement: its methods and the `_meta` keys of its updates.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DshCapability {
    version: u32,
    methods: [&'static str; 4],
    update_meta: [&'static str; 2],
}

/// `agentCapabilities._meta` of the `initialize` answer: steering and dsh's extensions.
pub(crate) fn capabilities_meta() -> Meta {
    let dsh = DshCapability {
        version: 1,
        methods: [STEERING, FORK, REQUEST, REWIND],
        update_meta: [USAGE, STEERING_MESSAGE],
    };
    let mut meta = initialize_meta();
    meta.extend(self::meta("dsh", dsh));
    meta
}

/// The `initialize` answer's own `_meta`: the steering capability (some clients look there).
pub(crate) fn initialize_meta() -> Meta {
    meta("steering", STEERING_CAPABILITY)
}

/// A steering message's `user_message_chunk`.
pub(crate) fn steering_message_meta() -> Meta {
    meta(STEERING_MESSAGE, true)
}

/// A step's usage under ACP's unstable `Usage` names, and its cost when its model has prices.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StepUsage<'a> {
    step: u64,
    input_tokens: u64,
    output_tokens: u64,
    cached_read_tokens: u64,
    cached_write_tokens: u64,
    thought_tokens: u64,
    total_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<&'a Cost>,
}

/// The `usage_update` closing step `step`: its usage and its own `cost`.
pub(crate) fn step_usage_meta(step: u64, usage: &Usage, cost: Option<&Cost>) -> Meta {
    let step_usage = StepUsage {
        step,
        input_tokens: usage.prompt_tokens,
        output_tokens: usage.completion_tokens,
        cached_read_tokens: usage.cache_hit_tokens,
        cached_write_tokens: usage.cache_miss_tokens,
        thought_tokens: usage.reasoning_tokens,
        total_tokens: usage.prompt_tokens + usage.completion_tokens,
        cost,
    };
    meta(USAGE, step_usage)
}

#[derive(Serialize)]
struct Turn<'a> {
    turn: u64,
    steps: u64,
    usage: &'a Usage,
}

/// A prompt's answer: its turn, how many steps it took and their summed usage.
pub(crate) fn turn_meta(turn: u64, steps: u64, usage: &Usage) -> Meta {
    meta(TURN, Turn { turn, steps, usage })
}

/// A permission request: the approval it answers and, for a command, its sandbox.
pub(crate) fn permission_meta(approval_id: &str, sandbox: Option<&str>) -> Meta {
    let mut meta = meta(APPROVAL_ID, approval_id);
    if let Some(sandbox) = sandbox {
        meta.extend(self::meta(SANDBOX, sandbox));
    }
    meta
}

/// `{key: value}`. The values here are plain data: serializing them cannot fail.
/// What a `plan` update says beyond ACP's entries: the `update_plan` call that set it, its
/// `plan/update`'s seq, and the model's explanation.
pub(crate) fn plan_meta(seq: u64, call_id: &str, explanation: Option<&str>) -> Meta {
    let mut plan = serde_json::json!({"seq": seq, "callId": call_id});
    if let Some(explanation) = explanation {
        plan["explanation"] = explanation.into();
    }
    meta(PLAN, plan)
}

/// A `task` call's `tool_call_update` when its child session exists: the child's dsh session
/// id (a client may load it as a session of its own), its context and depth.
pub(crate) fn task_meta(spawn: &dsh_protocol::TaskSpawn) -> Meta {
    meta(TASK, spawn)
}

/// A `task` call's progress update: the child's dsh session, its steps so far, the step's
/// usage and the child's cost so far.
pub(crate) fn task_progress_meta(
    session_id: &str,
    steps: u64,
    usage: &Usage,
    cost: Option<&Cost>,
) -> Meta {
    let mut progress = serde_json::json!({"sessionId": session_id, "steps": steps, "usage": usage});
    if let Some(cost) = cost {
        progress["cost"] = serde_json::to_value(cost).unwrap_or_default();
    }
    meta(TASK_PROGRESS, progress)
}

fn meta(key: &str, value: impl Serialize) -> Meta {
    let mut meta = Meta::new();
    meta.insert(key.to_owned(), serde_json::to_value(value).unwrap_or_default());
    meta
}

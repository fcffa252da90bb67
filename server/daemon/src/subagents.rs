//! Sub-agents (docs/subagents.md): the daemon's side of the loop's `Subagents` seam. A `task`
//! call's child is a session like any other — created in the parent's workspace (`fresh`) or
//! forked from the parent at the calling step's boundary (`fork`), its `session/meta` naming
//! its parent, the call and its depth — registered with the daemon, and run as one turn through
//! [`Daemon::prompt_as`] with the `[subagents]` budgets as its limits and a cancel token that
//! is a child of the parent turn's. The parent logs `task/spawn` the moment the child exists;
//! the child's final answer and a one-line summary of its spend (or which budget stopped it
//! and what it had found so far) are the call's result.
//!
//! Children of one parent run at most `max_parallel` at once (a semaphore per parent session);
//! the rest wait. A child's approvals are asked through the parent: the question is logged in
//! the parent's log as well, naming the child, and answered there ([`ChildApprover`]).
//! A child a crash interrupted is closed like any crashed session when its parent's next turn
//! starts ([`Seam::for_session`]); the parent's own unanswered call is closed by the loop with
//! a result naming the child (`dsh_session::interrupted_task_result`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use dsh_agent::approval::{Approver, BoxFuture};
use dsh_agent::{
    SessionHandle, Subagents, TaskBudgets, TaskReport, TaskRequest, TurnLimits, TurnOutcome,
};
use dsh_config::SubagentSettings;
use dsh_session::{
    ApprovalDecision, ApprovalRequest, ApprovalVerdict, EventData, LimitKind, ParentLink,
    SessionMeta, StopReason, TaskContext, TaskSpawn, Usage,
};
use dsh_store::{SessionId, SyncPolicy, fork_child_log, now_ms};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use dsh_protocol::{ChildUsage, UsageWithChildren};

use crate::daemon::Daemon;
use crate::error::{ApiError, ApiResult};
use crate::live::LiveSession;

/// How a turn runs: its cancel token, and who answers its approvals (`None`: its own clients).
pub(crate) struct TurnRun {
    pub(crate) cancel: CancellationToken,
    pub(crate) approver: Option<Arc<dyn Approver>>,
    /// Whether a client typed the prompt (a prompt command expands) rather than a model (a
    /// child's `task` prompt is sent as written).
    pub(crate) typed: bool,
}

impl TurnRun {
    /// A turn a client asked for.
    pub(crate) fn top_level(cancel: CancellationToken) -> TurnRun {
        TurnRun { cancel, approver: None, typed: true }
    }
}

/// One session's seam: what it may start, and the slots its children share.
pub(crate) struct Seam {
    daemon: Weak<Daemon>,
    parent: String,
    workspace: std::path::PathBuf,
    /// This session's depth (0: not a child).
    depth: u32,
    /// Whether this session is a `fork` child (its header is its parent's, `task` included).
    forked_child: bool,
    /// `max_parallel` permits (as configured when the seam was made), shared by this
    /// session's children.
    slots: Arc<Semaphore>,
    /// How this session's running turn asks (a child's: through its own parent, up to the
    /// clients of the top-level session); `None`: its own clients.
    asks: Option<Arc<dyn Approver>>,
}

impl Seam {
    /// The seam of `live`'s loop. Children of its earlier turns that a crash left open are
    /// closed first (their logs end with `turn/end` `cancelled`, as any crashed session's).
    pub(crate) async fn for_session(
        daemon: &Arc<Daemon>,
        live: &Arc<LiveSession>,
        asks: Option<Arc<dyn Approver>>,
    ) -> Arc<Seam> {
        let (meta, open_children) = live
            .handle
            .query(|s| {
                let meta = match s.events().first().map(|event| &event.data) {
                    Some(EventData::SessionMeta(meta)) => Some(meta.clone()),
                    _ => None,
                };
                (meta, open_children(s.events()))
            })
            .await
            .unwrap_or_default();
        for child in open_children {
            close_child(daemon, &child).await;
        }
        let link = meta.as_ref().and_then(|meta: &SessionMeta| meta.parent.clone());
        let settings = settings(daemon, &live.workspace);
        let parallel = usize::try_from(settings.max_parallel.value).unwrap_or(usize::MAX).max(1);
        Arc::new(Seam {
            daemon: Arc::downgrade(daemon),
            parent: live.id.clone(),
            workspace: live.workspace.clone(),
            depth: link.as_ref().map_or(0, |link| link.depth),
            forked_child: link.is_some() && meta.is_some_and(|meta| meta.forked_from.is_some()),
            slots: Arc::new(Semaphore::new(parallel)),
            asks,
        })
    }

    /// The `[subagents]` budgets as configured now.
    fn settings(&self) -> SubagentSettings {
        match self.daemon.upgrade() {
            Some(daemon) => settings(&daemon, &self.workspace),
            None => SubagentSettings::default(),
        }
    }

    fn may_spawn(&self) -> bool {
        u64::from(self.depth) < self.settings().max_depth.value
    }
}

impl Subagents for Seam {
    fn offered(&self) -> bool {
        self.may_spawn() || self.forked_child
    }

    fn refusal(&self) -> Option<String> {
        (!self.may_spawn()).then(|| {
            format!(
                "task refused: sub-agents nest at most {} deep ([subagents] max_depth) and this \
                 session is at depth {}; do the work yourself",
                self.settings().max_depth.value,
                self.depth
            )
        })
    }

    fn spawn(
        &self,
        request: TaskRequest,
        parent: SessionHandle,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, TaskReport> {
        let Some(daemon) = self.daemon.upgrade() else {
            return Box::pin(async { failed(None, "the daemon is stopping".to_owned()) });
        };
        let (limits, clamped) = limits(&self.settings(), &request.budgets, &request.parent_left);
        let child = Child {
            daemon: Arc::clone(&daemon),
            link: ParentLink {
                session_id: self.parent.clone(),
                tool_call_id: request.call_id.clone(),
                depth: self.depth + 1,
            },
            workspace: self.workspace.clone(),
            limits,
            clamped,
            request,
            parent,
            cancel,
            parent_asks: self.asks.clone(),
        };
        let slots = Arc::clone(&self.slots);
        let task = daemon.tasks.spawn(async move {
            // Waits for one of `max_parallel` slots; a cancel while waiting starts nothing.
            let slot = tokio::select! {
                slot = slots.acquire_owned() => slot.ok(),
                () = child.cancel.cancelled() => None,
            };
            match slot {
                Some(_slot) => child.run().await,
                None => failed(None, "not run: the turn was cancelled".to_owned()),
            }
        });
        Box::pin(async move {
            task.await.unwrap_or_else(|_| failed(None, "the sub-agent's task failed".to_owned()))
        })
    }
}

/// The `[subagents]` budgets of `workspace`'s configuration (the defaults when it cannot be
/// read: a turn of the session reports that itself).
fn settings(daemon: &Daemon, workspace: &std::path::Path) -> SubagentSettings {
    daemon.config_for(workspace).map(|config| config.subagents.clone()).unwrap_or_default()
}

/// A child's turn limits: the `[subagents]` budgets, lowered by what the call asks for and by
/// what remains of the parent turn's own budgets; and a line for each asked budget that was
/// larger than the child may have (it is clamped, and the call's result says so).
fn limits(
    settings: &SubagentSettings,
    asked: &TaskBudgets,
    parent_left: &TurnLimits,
) -> (TurnLimits, Vec<String>) {
    let mut clamped = Vec::new();
    let mut lowest = |key: &str, asked: Option<f64>, bounds: [(Option<f64>, &str); 2]| {
        let (bound, why) = bounds
            .into_iter()
            .filter_map(|(value, why)| value.map(|value| (value, why)))
            .min_by(|a, b| a.0.total_cmp(&b.0))?;
        match asked {
            Some(asked) if asked > bound => {
                clamped.push(format!(
                    "{key} {} asked, {} allowed ({why})",
                    shown(asked),
                    shown(bound)
                ));
                Some(bound)
            }
            Some(asked) => Some(asked),
            None => Some(bound),
        }
    };
    let count = |value: u64| value as f64;
    let configured = "[subagents] budget";
    let parent = "what remains of the parent turn's budget";
    let max_steps = lowest(
        "max_steps",
        asked.max_steps.map(count),
        [(Some(count(settings.max_steps.value)), configured), (None, parent)],
    );
    let max_tokens = lowest(
        "max_tokens",
        asked.max_tokens.map(count),
        [
            (Some(count(settings.max_tokens.value)), configured),
            (parent_left.max_tokens.map(count), parent),
        ],
    );
    let max_cost = lowest(
        "max_cost",
        asked.max_cost,
        [
            (settings.max_cost.as_ref().map(|cost| cost.value), configured),
            (parent_left.max_cost, parent),
        ],
    );
    let timeout = lowest(
        "timeout_secs",
        asked.timeout_secs.map(count),
        [
            (Some(count(settings.timeout_secs.value)), configured),
            (parent_left.timeout.map(|left| left.as_secs_f64()), parent),
        ],
    );
    let limits = TurnLimits {
        max_steps: max_steps.map(|steps| steps as u64),
        max_tokens: max_tokens.map(|tokens| tokens as u64),
        max_cost,
        timeout: timeout.map(Duration::from_secs_f64),
    };
    (limits, clamped)
}

/// A budget's number as the model reads it: `20`, `0.25`, `12.5`.
fn shown(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{}", (value * 1e4).round() / 1e4)
    }
}

/// One child about to run.
struct Child {
    daemon: Arc<Daemon>,
    link: ParentLink,
    workspace: std::path::PathBuf,
    limits: TurnLimits,
    /// The asked budgets that were clamped, one line each.
    clamped: Vec<String>,
    request: TaskRequest,
    parent: SessionHandle,
    cancel: CancellationToken,
    /// How the parent's turn asks ([`Seam::asks`]).
    parent_asks: Option<Arc<dyn Approver>>,
}

impl Child {
    async fn run(self) -> TaskReport {
        let context = self.request.context;
        let created = {
            let daemon = Arc::clone(&self.daemon);
            let link = self.link.clone();
            let workspace = self.workspace.clone();
            let boundary = self.request.boundary_seq;
            tokio::task::spawn_blocking(move || {
                create(&daemon, &workspace, link, context, boundary)
            })
            .await
            .unwrap_or_else(|_| Err(ApiError::store("creating the sub-agent failed")))
        };
        let live = match created {
            Ok(live) => live,
            Err(error) => {
                return failed(
                    None,
                    format!("the sub-agent could not be created: {}", error.message),
                );
            }
        };
        let spawn = TaskSpawn {
            call_id: self.request.call_id.clone(),
            session_id: live.id.clone(),
            context,
            description: self.request.description.clone(),
            depth: self.link.depth,
        };
        if let Err(error) = self.parent.append(EventData::TaskSpawn(spawn)).await {
            return failed(Some(live.id.clone()), format!("the parent's log: {error}"));
        }
        let approver: Arc<dyn Approver> = Arc::new(ChildApprover {
            // The parent turn's own way of asking: a grandchild's questions go up the chain to
            // clients that watch, not to a child session nobody has open.
            parent: self.parent_asks.clone().or_else(|| {
                self.daemon.loaded_session(&self.link.session_id).map(|p| p.approver())
            }),
            parent_log: self.parent.clone(),
            child: live.id.clone(),
            description: self.request.description.clone(),
        });
        let run = TurnRun { cancel: self.cancel.clone(), approver: Some(approver), typed: false };
        let outcome = self
            .daemon
            .prompt_as(
                Arc::clone(&live),
                crate::daemon::Ask { text: self.request.prompt.clone(), attachments: Vec::new() },
                false,
                self.limits,
                None,
                run,
            )
            .await;
        let so_far = live.handle.query(|s| last_answer(s.events())).await.ok().flatten();
        let mut report = report(&live.id, context, outcome, so_far);
        if !self.clamped.is_empty() {
            report.content.push_str(&format!(
                "\n[budgets lowered: {}; a call may only lower them]",
                self.clamped.join("; ")
            ));
        }
        report
    }
}

/// Creates the child session (blocking: files).
fn create(
    daemon: &Daemon,
    workspace: &std::path::Path,
    link: ParentLink,
    context: TaskContext,
    boundary_seq: u64,
) -> ApiResult<Arc<LiveSession>> {
    let parent_path = daemon.session_path(&link.session_id)?;
    let parent = dsh_store::read_log(&parent_path)?;
    let pin = match parent.events.first().map(|event| &event.data) {
        Some(EventData::SessionMeta(meta)) => meta.pin.clone().unwrap_or_default(),
        _ => return Err(ApiError::store(format!("{} has no session/meta", parent_path.display()))),
    };
    let log = match context {
        TaskContext::Fresh => daemon.home().workspace(workspace)?.create_child_session(
            SyncPolicy::Boundaries,
            Some(pin.clone()),
            Some(link),
        )?,
        TaskContext::Fork => {
            let id = SessionId::generate(now_ms(), &mut fastrand::Rng::new());
            fork_child_log(
                &parent_path,
                Some(boundary_seq),
                &id,
                now_ms(),
                SyncPolicy::Boundaries,
                Some(pin.clone()),
                Some(link),
            )?
        }
    };
    daemon.register_pinned(log, &pin)
}

/// The text of the last assistant message that said something: a child's answer, or what it
/// had found when it stopped.
fn last_answer(events: &[dsh_session::Event]) -> Option<String> {
    events
        .iter()
        .rev()
        .find_map(|event| match &event.data {
            EventData::AssistantMessage(turn) if !turn.message.content.trim().is_empty() => {
                Some(turn.message.content.clone())
            }
            // A fork's inherited messages are its parent's, not its own.
            EventData::TurnStart(_) => Some(String::new()),
            _ => None,
        })
        .filter(|text| !text.is_empty())
}

/// The call's result from the child's outcome.
fn report(
    child: &str,
    context: TaskContext,
    outcome: ApiResult<TurnOutcome>,
    so_far: Option<String>,
) -> TaskReport {
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            return failed(
                Some(child.to_owned()),
                format!("the sub-agent failed: {}", error.message),
            );
        }
    };
    let summary = summary(child, context, &outcome);
    let found = || so_far.clone().unwrap_or_else(|| "(nothing yet)".to_owned());
    let (content, is_error) = match (outcome.stop_reason, &outcome.limit) {
        (StopReason::Completed, _) => (format!("{}\n\n{summary}", found()), false),
        (StopReason::Limit, Some(limit)) => (
            format!(
                "The sub-agent was stopped by its budget: {} reached ({} of {}). What it had \
                 found so far:\n{}\n\n{summary}",
                budget_name(limit.limit),
                limit.spent,
                limit.value,
                found()
            ),
            true,
        ),
        (StopReason::Cancelled, _) => (
            format!(
                "The sub-agent was cancelled. What it had found so far:\n{}\n\n{summary}",
                found()
            ),
            true,
        ),
        (StopReason::MaxSteps, _) => (
            format!(
                "The sub-agent was stopped by its session's step limit. What it had found so \
                 far:\n{}\n\n{summary}",
                found()
            ),
            true,
        ),
        (_, _) => (
            format!(
                "The sub-agent failed: {}\n\n{summary}",
                outcome.error.as_deref().unwrap_or("(no error message)")
            ),
            true,
        ),
    };
    TaskReport {
        session_id: Some(child.to_owned()),
        content,
        is_error,
        usage: outcome.usage,
        usd: outcome.usd,
    }
}

/// The `[subagents]` key of a budget.
fn budget_name(kind: LimitKind) -> &'static str {
    match kind {
        LimitKind::MaxSteps => "max_steps",
        LimitKind::MaxTokens => "max_tokens",
        LimitKind::MaxCost => "max_cost",
        LimitKind::Timeout => "timeout_secs",
    }
}

/// The one line on a child's spend: `[sub-agent ID (fresh): completed · 3 steps · 1234 tokens,
/// 80% cache hits · $0.0012]`.
fn summary(child: &str, context: TaskContext, outcome: &TurnOutcome) -> String {
    let usage = &outcome.usage;
    let tokens = usage.prompt_tokens + usage.completion_tokens;
    let cost = if outcome.usd > 0.0 { format!(" · ${:.4}", outcome.usd) } else { String::new() };
    format!(
        "[sub-agent {child} ({}): {} · {} steps · {tokens} tokens, {:.0}% cache hits{cost}]",
        context.as_str(),
        outcome.stop_reason.as_str(),
        outcome.steps,
        usage.hit_ratio() * 100.0,
    )
}

/// A report without a finished child.
fn failed(session_id: Option<String>, content: String) -> TaskReport {
    TaskReport { session_id, content, is_error: true, usage: Usage::default(), usd: 0.0 }
}

/// The children of `events` whose `task` call is still unanswered at the log's end: a crash
/// stopped them.
fn open_children(events: &[dsh_session::Event]) -> Vec<String> {
    let answered = |call_id: &str| {
        events.iter().any(|event| {
            matches!(&event.data, EventData::ToolResult(result) if result.call_id == call_id)
        })
    };
    let start =
        events.iter().rposition(|event| matches!(event.data, EventData::StepStart(_))).unwrap_or(0);
    dsh_session::task_children(&events[start..])
        .into_iter()
        .filter(|spawn| !answered(&spawn.call_id))
        .map(|spawn| spawn.session_id.clone())
        .collect()
}

/// Closes what a crash left open in child session `id` (as the loop does before a turn).
async fn close_child(daemon: &Arc<Daemon>, id: &str) {
    let loaded = {
        let daemon = Arc::clone(daemon);
        let id = id.to_owned();
        tokio::task::spawn_blocking(move || daemon.session(&id)).await
    };
    match loaded {
        Ok(Ok(child)) if !child.is_running() => {
            if let Err(error) = dsh_agent::close_interrupted(&child.handle).await {
                tracing::warn!(session = %id, %error, "closing an interrupted sub-agent");
            }
        }
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::warn!(session = %id, error = %error.message, "an interrupted sub-agent");
        }
        Err(_) => {}
    }
}

/// A child's approver: each question goes to the parent's clients — logged in the parent's
/// log too, its id and summary naming the child — and their answer is the child's.
struct ChildApprover {
    /// The parent's approver (`None` when the parent is no longer loaded: nobody to ask).
    parent: Option<Arc<dyn Approver>>,
    parent_log: SessionHandle,
    child: String,
    description: String,
}

impl Approver for ChildApprover {
    fn ask(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
    ) -> BoxFuture<'static, ApprovalVerdict> {
        let Some(parent) = &self.parent else {
            return Box::pin(async { ApprovalVerdict::Deny });
        };
        let asked = ApprovalRequest {
            approval_id: format!("{}/{}", self.child, request.approval_id),
            call_id: request.call_id.clone(),
            tool: request.tool.clone(),
            summary: format!(
                "sub-agent {} ({}): {}",
                self.child, self.description, request.summary
            ),
            sandbox: request.sandbox.clone(),
        };
        // Registered with the parent now, before anyone can see the question.
        let answer = parent.ask(&asked, cancel);
        let log = self.parent_log.clone();
        Box::pin(async move {
            if log.append(EventData::ApprovalRequest(asked.clone())).await.is_err() {
                return ApprovalVerdict::Deny;
            }
            let verdict = answer.await;
            let decision = ApprovalDecision { approval_id: asked.approval_id, decision: verdict };
            let _ = log.append(EventData::ApprovalDecision(decision)).await;
            verdict
        })
    }
}

/// The children a session's own `task` calls spawned, in order (a fork's inherited ones, before
/// its cut, are its parent's).
pub(crate) fn own_children(events: &[dsh_session::Event]) -> Vec<TaskSpawn> {
    let cut = match events.first().map(|event| &event.data) {
        Some(EventData::SessionMeta(meta)) => meta.forked_from.as_ref().map_or(0, |fork| fork.seq),
        _ => 0,
    };
    let start = events.partition_point(|event| event.seq < cut);
    dsh_session::task_children(&events[start..]).into_iter().cloned().collect()
}

/// How deep `session/usage` follows children of children.
const USAGE_DEPTH: u32 = 8;

/// The usage of each of `spawns`' child sessions, read from their logs (blocking), each with
/// its own children's; priced at `config`'s prices.
pub(crate) fn children_usage(
    daemon: &Daemon,
    spawns: &[TaskSpawn],
    config: Option<&dsh_config::Config>,
    depth: u32,
) -> Vec<ChildUsage> {
    spawns
        .iter()
        .map(|spawn| {
            let mut entry = ChildUsage {
                session_id: spawn.session_id.clone(),
                call_id: spawn.call_id.clone(),
                description: spawn.description.clone(),
                context: spawn.context,
                steps: 0,
                usage: Usage::default(),
                hit_percent: 0.0,
                cost: None,
                error: None,
            };
            let events = match daemon.read_events(&spawn.session_id) {
                Ok(events) => events,
                Err(error) => {
                    entry.error = Some(error.message);
                    return entry;
                }
            };
            let rows = dsh_session::usage_rows(&events);
            entry.steps = rows.len() as u64;
            let own = crate::views::usage_result(rows, config, (String::new(), String::new()));
            let grandchildren = if depth < USAGE_DEPTH {
                children_usage(daemon, &own_children(&events), config, depth + 1)
            } else {
                Vec::new()
            };
            let all = with_children(&own, &grandchildren);
            entry.usage = all.usage;
            entry.cost = all.cost;
            entry.hit_percent = entry.usage.hit_ratio() * 100.0;
            entry
        })
        .collect()
}

/// A session's own spend and its children's, summed; the cost only when every part has one.
pub(crate) fn with_children(
    own: &dsh_protocol::SessionUsageResult,
    children: &[ChildUsage],
) -> UsageWithChildren {
    let usage = children.iter().fold(own.totals, |sum, child| sum.add(&child.usage));
    let has_steps = |child: &&ChildUsage| child.steps > 0 || child.error.is_some();
    let mut cost = own.cost.clone().or_else(|| {
        // A session whose own steps cost nothing known but ran none has a zero cost.
        own.rows.is_empty().then(|| dsh_session::Cost {
            amount: 0.0,
            saved: 0.0,
            currency: "USD".to_owned(),
        })
    });
    for child in children.iter().filter(has_steps) {
        cost = match (cost, &child.cost) {
            (Some(sum), Some(part)) => sum.plus(part),
            _ => None,
        };
    }
    UsageWithChildren { usage, cost }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_children_are_those_of_the_last_step_without_a_result() {
        use dsh_session::{Event, StepStart, ToolResult};
        let spawn = |call: &str, child: &str| {
            EventData::TaskSpawn(TaskSpawn {
                call_id: call.to_owned(),
                session_id: child.to_owned(),
                context: TaskContext::Fresh,
                description: "d".to_owned(),
                depth: 1,
            })
        };
        let result = |call: &str| {
            EventData::ToolResult(ToolResult {
                call_id: call.to_owned(),
                name: "task".to_owned(),
                content: "x".to_owned(),
                is_error: false,
                seen: None,
                images: Vec::new(),
            })
        };
        let events: Vec<Event> = [
            EventData::StepStart(StepStart { step: 1, turn: 1 }),
            spawn("a", "child-a"),
            spawn("b", "child-b"),
            result("a"),
        ]
        .into_iter()
        .enumerate()
        .map(|(seq, data)| Event { seq: seq as u64, time: 0, data })
        .collect();
        assert_eq!(open_children(&events), vec!["child-b".to_owned()]);
    }

    #[test]
    fn a_call_lowers_the_budgets_and_a_larger_one_is_clamped_with_a_line() {
        let settings = SubagentSettings::default();
        let none = TurnLimits::default();
        let (child, clamped) = limits(&settings, &TaskBudgets::default(), &none);
        assert_eq!(child.max_steps, Some(20));
        assert_eq!(child.max_tokens, Some(500_000));
        assert_eq!(child.max_cost, None);
        assert_eq!(child.timeout, Some(Duration::from_secs(600)));
        assert!(clamped.is_empty());

        let asked = TaskBudgets {
            max_steps: Some(3),
            max_tokens: Some(900_000),
            max_cost: Some(0.5),
            timeout_secs: Some(60),
        };
        let parent = TurnLimits {
            max_steps: Some(1),
            max_tokens: None,
            max_cost: Some(0.25),
            timeout: Some(Duration::from_secs(90)),
        };
        let (child, clamped) = limits(&settings, &asked, &parent);
        assert_eq!(child.max_steps, Some(3));
        assert_eq!(child.max_tokens, Some(500_000));
        assert_eq!(child.max_cost, Some(0.25));
        assert_eq!(child.timeout, Some(Duration::from_secs(60)));
        assert_eq!(
            clamped,
            vec![
                "max_tokens 900000 asked, 500000 allowed ([subagents] budget)".to_owned(),
                "max_cost 0.5 asked, 0.25 allowed (what remains of the parent turn's budget)"
                    .to_owned(),
            ]
        );

        // Not asked: the parent's remainder still lowers the child's.
        let tight = TurnLimits { max_tokens: Some(1200), ..TurnLimits::default() };
        let (child, clamped) = limits(&settings, &TaskBudgets::default(), &tight);
        assert_eq!(child.max_tokens, Some(1200));
        assert!(clamped.is_empty());
    }
}

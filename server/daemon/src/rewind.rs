//! `session/checkpoints` and `session/rewind` (`docs/rewind.md`): a session's checkpoints as its
//! log names them, and returning the workspace's files and/or the conversation to one.
//!
//! A rewind holds the session's loop slot (no turn starts meanwhile; one running refuses it)
//! and, for the files, the workspace's checkpoints mutex from its plan to its end, on a blocking
//! thread: plan (which checkpoints the workspace as it is now: the state before the rewind),
//! refuse on missing objects, blocked paths or conflicts (unless forced), log that state as a
//! `workspace/checkpoint` of reason `rewind` in the rewound session, apply under the crate's
//! journal. Then the conversation: a fork at the step's boundary (`ForkAt::Step`), which logs
//! `workspace/rewind` and continues; a files-only rewind logs it in the session itself, whose
//! next request carries the loop's usual note of the files changed under the agent.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_checkpoint::{Hash, RestoreError, RestorePlan};
use dsh_protocol::{
    CheckpointEntry, CheckpointUnavailableData, RewindConflictData, RewindFailedData,
    RewindFailure, SessionCheckpointsResult, SessionConfig, SessionParams, SessionRewindParams,
    SessionRewindResult, code,
};
use dsh_session::{CheckpointReason, Event, EventData, WorkspaceCheckpoint, WorkspaceRewind};

use crate::checkpoints::{event_of, path_text};
use crate::daemon::{Daemon, ForkAt};
use crate::error::{ApiError, ApiResult};
use crate::handlers::{blocking, load};

/// `session/checkpoints`: the session's checkpoints, oldest first, each with whether the
/// workspace's store still has it.
pub async fn session_checkpoints(
    daemon: Arc<Daemon>,
    params: SessionParams,
) -> ApiResult<SessionCheckpointsResult> {
    let live = load(&daemon, &params.session_id).await?;
    let mut entries = live.handle.query(|session| entries_of(session.events())).await?;
    let workspace = daemon.checkpoints.workspace(live.toolbox.workspace().root());
    let entries = blocking(move || {
        workspace
            .with(|checkpointer, _| {
                for entry in &mut entries {
                    entry.available = entry
                        .root
                        .parse::<Hash>()
                        .is_ok_and(|root| checkpointer.objects().contains(&root));
                }
                entries
            })
            .map_err(ApiError::store)
    })
    .await?;
    Ok(SessionCheckpointsResult { checkpoints: entries })
}

/// The checkpoints a log names: its `workspace/checkpoint` events, and the state before each
/// conversation rewind that made this session (logged in the rewound one).
fn entries_of(events: &[Event]) -> Vec<CheckpointEntry> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::WorkspaceCheckpoint(checkpoint) => Some(CheckpointEntry {
                seq: event.seq,
                step: checkpoint.step,
                reason: checkpoint.reason,
                time: event.time,
                root: checkpoint.root.clone(),
                files: checkpoint.files,
                changed: checkpoint.changed.clone(),
                too_large: checkpoint.too_large.clone(),
                incomplete: checkpoint.incomplete.clone(),
                available: false,
            }),
            EventData::WorkspaceRewind(rewind) if rewind.conversation => {
                rewind.before.as_ref().map(|before| CheckpointEntry {
                    seq: event.seq,
                    step: None,
                    reason: CheckpointReason::Rewind,
                    time: event.time,
                    root: before.clone(),
                    files: 0,
                    changed: Vec::new(),
                    too_large: Vec::new(),
                    incomplete: None,
                    available: false,
                })
            }
            _ => None,
        })
        .collect()
}

/// What a rewind restores to, found in the rewound session's log.
struct Target {
    /// The step (a step rewind).
    step: Option<u64>,
    /// The state the session's agent last left, from its log: its latest checkpoint (not one
    /// taken before a rewind), or what a files rewind of it put in place.
    known: Option<String>,
    /// The checkpoint, when there is one.
    checkpoint: Option<WorkspaceCheckpoint>,
}

/// The checkpoint of step `step`: the first `workspace/checkpoint` after its `step/start`, else
/// the turn-end one — never past the next turn's start — provided no tool that may change files
/// was called before it (a checkpoint that could not be taken, or checkpoints turned on
/// mid-turn, would otherwise name a later state: then there is none). `None` when the session
/// has no such step.
fn step_target(events: &[Event], step: u64) -> Option<Option<WorkspaceCheckpoint>> {
    let start = events.iter().position(
        |event| matches!(&event.data, EventData::StepStart(start) if start.step == step),
    )?;
    let mut changed_files = false;
    let checkpoint = events[start..]
        .iter()
        .take_while(|event| !matches!(event.data, EventData::TurnStart(_)))
        .find_map(|event| match &event.data {
            EventData::ToolCall(call) if dsh_agent::tools::may_change_files(&call.name) => {
                changed_files = true;
                None
            }
            EventData::WorkspaceCheckpoint(checkpoint)
                if checkpoint.reason != CheckpointReason::Rewind =>
            {
                Some((!changed_files).then(|| checkpoint.clone()))
            }
            _ => None,
        });
    Some(checkpoint.flatten())
}

/// The state the session's agent last left, from its log (see [`Target::known`]).
fn known(events: &[Event]) -> Option<String> {
    events.iter().rev().find_map(|event| match &event.data {
        EventData::WorkspaceCheckpoint(checkpoint)
            if checkpoint.reason != CheckpointReason::Rewind =>
        {
            Some(checkpoint.root.clone())
        }
        EventData::WorkspaceRewind(WorkspaceRewind { files: true, checkpoint, .. }) => {
            checkpoint.clone()
        }
        _ => None,
    })
}

/// The checkpoint a seq names: a `workspace/checkpoint`, or the state before a conversation
/// rewind (`workspace/rewind.before`).
fn seq_target(events: &[Event], seq: u64) -> Result<WorkspaceCheckpoint, String> {
    let event = events.get(usize::try_from(seq).unwrap_or(usize::MAX));
    match event.map(|event| &event.data) {
        Some(EventData::WorkspaceCheckpoint(checkpoint)) => Ok(checkpoint.clone()),
        Some(EventData::WorkspaceRewind(WorkspaceRewind { before: Some(before), .. })) => {
            Ok(WorkspaceCheckpoint {
                step: None,
                reason: CheckpointReason::Rewind,
                root: before.clone(),
                files: 0,
                changed: Vec::new(),
                too_large: Vec::new(),
                incomplete: None,
            })
        }
        Some(_) => Err(format!("seq {seq} is not a checkpoint (see session/checkpoints)")),
        None => Err(format!("the session has no seq {seq}")),
    }
}

/// `session/rewind`.
pub async fn session_rewind(
    daemon: Arc<Daemon>,
    params: SessionRewindParams,
) -> ApiResult<SessionRewindResult> {
    let (step, by_seq) = match (params.step, params.checkpoint) {
        (Some(step), None) => (Some(step), None),
        (None, Some(seq)) => (None, Some(seq)),
        _ => return Err(ApiError::invalid_params("give `step` or `checkpoint`, exactly one")),
    };
    let files = params.files.unwrap_or(true);
    let conversation = params.conversation.unwrap_or(step.is_some());
    if by_seq.is_some() && conversation {
        return Err(ApiError::invalid_params(
            "`checkpoint` restores files only: the conversation is rewound to a step (`step`)",
        ));
    }
    if !files && !conversation {
        return Err(ApiError::invalid_params(
            "nothing to rewind: `files` and `conversation` are both false",
        ));
    }
    let force = params.force.unwrap_or(false);
    let dry_run = params.dry_run.unwrap_or(false);
    let id = params.session_id.clone();
    let live = load(&daemon, &id).await?;
    live.check_not_failed()?;
    if daemon.shutdown.is_cancelled() {
        return Err(ApiError::shutting_down());
    }
    // Holding the loop slot keeps turns out until the rewind is done.
    let _slot = Arc::clone(&live.agent).try_lock_owned().map_err(|_| busy(&live))?;
    if live.is_running() {
        return Err(busy(&live));
    }
    // A turn a crash cut is closed first, as the next turn would: the rewind's events then
    // sit outside every step and turn.
    dsh_agent::close_interrupted(&live.handle).await?;
    let workspace_root = live.toolbox.workspace().root().to_path_buf();
    let target = live
        .handle
        .query(move |session| {
            let events = session.events();
            match (step, by_seq) {
                (Some(step), _) => step_target(events, step)
                    .map(|checkpoint| Target { step: Some(step), known: known(events), checkpoint })
                    .ok_or_else(|| {
                        ApiError::out_of_range(format!("the session has no step {step}"))
                    }),
                (None, Some(seq)) => seq_target(events, seq)
                    .map(|checkpoint| Target {
                        step: None,
                        known: known(events),
                        checkpoint: Some(checkpoint),
                    })
                    .map_err(ApiError::out_of_range),
                (None, None) => Err(ApiError::invalid_params("give `step` or `checkpoint`")),
            }
        })
        .await??;
    let root = target.checkpoint.as_ref().map(|checkpoint| checkpoint.root.clone());
    let mut result = SessionRewindResult {
        session_id: id.clone(),
        restored: Vec::new(),
        created: Vec::new(),
        deleted: Vec::new(),
        conflicts: Vec::new(),
        not_restorable: Vec::new(),
        incomplete: target.checkpoint.as_ref().and_then(|checkpoint| checkpoint.incomplete.clone()),
        checkpoint: root.clone(),
        before_seq: None,
        dry_run,
    };
    let mut before_root = None;
    if files {
        let Some(checkpoint) = target.checkpoint.clone() else {
            let step = target.step.unwrap_or_default();
            return Err(ApiError::new(
                code::CHECKPOINT_UNAVAILABLE,
                format!(
                    "step {step} has no checkpoint: checkpoints were off when it ran, it ran \
                     before them, or it could not be taken (the daemon log says why; rewind the conversation only with conversation: false \
                     files, `dsh rewind --conversation`)"
                ),
            )
            .with_data(CheckpointUnavailableData { missing_objects: Vec::new() }));
        };
        let target_root: Hash = checkpoint.root.parse().map_err(|_| {
            ApiError::store(format!("checkpoint root `{}` is not a hash", checkpoint.root))
        })?;
        let workspace = daemon.checkpoints.workspace(live.toolbox.workspace().root());
        let handle = live.handle.clone();
        let runtime = tokio::runtime::Handle::current();
        let (daemon_now, rewound) = (Arc::clone(&daemon), id.clone());
        let known: Option<Hash> = target.known.as_deref().and_then(|root| root.parse().ok());
        let restored = blocking(move || {
            workspace
                .with(|checkpointer, state| -> ApiResult<Restored> {
                    // Checked under the workspace's lock, which another session's
                    // file-changing tools wait for (their checkpoint comes first): none starts
                    // changing files until this rewind is done.
                    if !dry_run {
                        other_turn(&daemon_now, &rewound, &workspace_root)?;
                    }
                    // Conflicts: what changed since the state this session's agent last left
                    // (or a rewind of it put in place) — by the user or by another session.
                    let baseline = state.known.get(&rewound).copied().or(known).or(state.latest);
                    let plan =
                        checkpointer.plan(&target_root, baseline.as_ref()).map_err(refusal)?;
                    refuse(&plan, force, dry_run)?;
                    if dry_run {
                        return Ok(Restored { plan, before_seq: None });
                    }
                    // The state before the rewind, logged in the rewound session first: a rewind
                    // to it undoes this one.
                    let before = event_of(&plan.before, None, CheckpointReason::Rewind);
                    let before_seq = runtime
                        .block_on(handle.append(EventData::WorkspaceCheckpoint(before)))?
                        .seq;
                    checkpointer.apply(&plan, force).map_err(refusal)?;
                    state.latest = Some(target_root);
                    state.known.insert(rewound.clone(), target_root);
                    Ok(Restored { plan, before_seq: Some(before_seq) })
                })
                .map_err(ApiError::store)?
        })
        .await?;
        let plan = &restored.plan;
        let texts = |paths: &[PathBuf]| paths.iter().map(|path| path_text(path)).collect();
        result.restored = texts(&plan.restored);
        result.created = texts(&plan.created);
        result.deleted = texts(&plan.deleted);
        result.conflicts = texts(&plan.conflicts);
        result.not_restorable =
            plan.not_restorable.iter().map(|(path, _)| path_text(path)).collect();
        result.before_seq = restored.before_seq;
        before_root = Some(plan.before.root.to_string());
    }
    if dry_run {
        return Ok(result);
    }
    let rewind = WorkspaceRewind {
        from_session: id.clone(),
        to_step: target.step,
        checkpoint: root,
        before: before_root,
        restored: result.restored.clone(),
        created: result.created.clone(),
        deleted: result.deleted.clone(),
        forced: force && !result.conflicts.is_empty(),
        conversation,
        files,
    };
    if conversation {
        let step = target.step.unwrap_or_default();
        let fork = {
            let daemon = Arc::clone(&daemon);
            let id = id.clone();
            blocking(move || daemon.fork(&id, ForkAt::Step(step), &SessionConfig::default()))
                .await?
        };
        fork.handle.append(EventData::WorkspaceRewind(rewind)).await?;
        if files && let Some(root) = result.checkpoint.as_deref().and_then(|r| r.parse().ok()) {
            daemon.checkpoints.workspace(live.toolbox.workspace().root()).note(&fork.id, root);
        }
        result.session_id = fork.id.clone();
    } else {
        live.handle.append(EventData::WorkspaceRewind(rewind)).await?;
    }
    tracing::info!(
        session = %id,
        continues = %result.session_id,
        restored = result.restored.len(),
        created = result.created.len(),
        deleted = result.deleted.len(),
        "rewound"
    );
    Ok(result)
}

/// Refuses while another session of the workspace runs a turn: its tools may be changing the
/// files right now.
fn other_turn(daemon: &Daemon, rewound: &str, workspace_root: &Path) -> ApiResult<()> {
    let running = daemon.loaded().into_iter().find(|other| {
        other.id != rewound
            && other.is_running()
            && other.toolbox.workspace().root() == workspace_root
    });
    match running {
        Some(other) => Err(ApiError::new(
            code::SESSION_BUSY,
            format!(
                "session {} of the same workspace is running a turn whose tools may change its \
                 files: cancel it first (`dsh cancel {}`), then rewind",
                other.id, other.id
            ),
        )),
        None => Ok(()),
    }
}

/// What the files' part of a rewind did (or, dry, would do).
struct Restored {
    plan: RestorePlan,
    before_seq: Option<u64>,
}

/// Why the loop slot is taken: a turn (or a compaction) runs, or another rewind (or a prompt
/// about to start its turn) holds it.
fn busy(live: &crate::live::LiveSession) -> ApiError {
    let id = &live.id;
    let message = if live.is_running() {
        format!(
            "session {id} is running a turn: cancel it first (session/cancel, `dsh cancel`), \
             then rewind"
        )
    } else {
        format!("session {id} is busy with another rewind or a turn about to start: retry")
    };
    ApiError::new(code::SESSION_BUSY, message)
}

/// Refuses a plan that cannot be applied (a dry run shows conflicts instead of refusing).
fn refuse(plan: &RestorePlan, force: bool, dry_run: bool) -> ApiResult<()> {
    if !plan.missing_objects.is_empty() {
        return Err(refusal(RestoreError::MissingObjects(plan.missing_objects.clone())));
    }
    if !plan.blocked.is_empty() {
        return Err(refusal(RestoreError::Blocked(plan.blocked.clone())));
    }
    if !plan.conflicts.is_empty() && !force && !dry_run {
        return Err(refusal(RestoreError::Conflicts(plan.conflicts.clone())));
    }
    Ok(())
}

/// Up to ten paths for a message, and how many more (the error's data has them all).
fn listed(paths: &[String]) -> String {
    let mut text = paths.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    if paths.len() > 10 {
        text.push_str(&format!(" and {} more", paths.len() - 10));
    }
    text
}

/// A restore error as the API's: its code, its message, and the data a client acts on.
fn refusal(error: RestoreError) -> ApiError {
    let message = error.to_string();
    let texts = |paths: &[PathBuf]| paths.iter().map(|path| path_text(path)).collect::<Vec<_>>();
    match error {
        RestoreError::Conflicts(paths) => {
            let conflicts = texts(&paths);
            let message = format!(
                "{} file(s) changed since the last checkpoint by someone other than the agent \
                 would be overwritten: {} (to overwrite them: `dsh rewind --force`, `force: \
                 true` in the API)",
                conflicts.len(),
                listed(&conflicts)
            );
            ApiError::new(code::REWIND_CONFLICT, message)
                .with_data(RewindConflictData { conflicts })
        }
        RestoreError::MissingObjects(hashes) => {
            ApiError::new(code::CHECKPOINT_UNAVAILABLE, message).with_data(
                CheckpointUnavailableData {
                    missing_objects: hashes.iter().map(Hash::to_string).collect(),
                },
            )
        }
        RestoreError::Blocked(blocked) => {
            ApiError::new(code::REWIND_FAILED, message).with_data(RewindFailedData {
                done: Vec::new(),
                failed: blocked
                    .iter()
                    .map(|blocked| RewindFailure {
                        path: path_text(&blocked.path),
                        error: blocked.reason.clone(),
                    })
                    .collect(),
                not_reached: Vec::new(),
            })
        }
        RestoreError::PartWay(part_way) => {
            ApiError::new(code::REWIND_FAILED, message).with_data(RewindFailedData {
                done: texts(&part_way.done),
                failed: vec![RewindFailure {
                    path: path_text(&part_way.failed),
                    error: part_way.cause.to_string(),
                }],
                not_reached: texts(&part_way.not_reached),
            })
        }
        RestoreError::Checkpoint(_) | RestoreError::Objects(_) | RestoreError::Journal { .. } => {
            ApiError::store(message)
        }
    }
}

#[cfg(test)]
mod tests {
    use dsh_session::{StepStart, ToolCallStarted, TurnStart};

    use super::*;

    fn events(data: Vec<EventData>) -> Vec<Event> {
        data.into_iter()
            .enumerate()
            .map(|(seq, data)| Event { seq: seq as u64, time: 0, data })
            .collect()
    }

    fn call(step: u64, name: &str) -> EventData {
        EventData::ToolCall(ToolCallStarted {
            step,
            call_id: format!("call_{step}"),
            name: name.to_owned(),
            unconfined: false,
        })
    }

    fn checkpoint(step: Option<u64>, reason: CheckpointReason, root: &str) -> EventData {
        EventData::WorkspaceCheckpoint(WorkspaceCheckpoint {
            step,
            reason,
            root: root.to_owned(),
            files: 1,
            changed: Vec::new(),
            too_large: Vec::new(),
            incomplete: None,
        })
    }

    fn start(step: u64) -> EventData {
        EventData::StepStart(StepStart { step, turn: 1 })
    }

    fn root(found: Option<Option<WorkspaceCheckpoint>>) -> Option<Option<String>> {
        found.map(|checkpoint| checkpoint.map(|checkpoint| checkpoint.root))
    }

    #[test]
    fn a_steps_checkpoint_is_the_first_after_its_start_when_no_write_came_before_it() {
        let log = events(vec![
            EventData::TurnStart(TurnStart { turn: 1 }),
            start(1),
            call(1, "read_file"),
            start(2),
            checkpoint(Some(2), CheckpointReason::Step, "two"),
            call(2, "write_file"),
            checkpoint(None, CheckpointReason::TurnEnd, "end"),
        ]);
        // Step 1 only read: step 2's checkpoint is the workspace as step 1 found it.
        assert_eq!(root(step_target(&log, 1)), Some(Some("two".to_owned())));
        assert_eq!(root(step_target(&log, 2)), Some(Some("two".to_owned())));
        assert_eq!(root(step_target(&log, 3)), None);
    }

    #[test]
    fn a_write_before_any_checkpoint_leaves_the_step_without_one() {
        // Step 1's checkpoint could not be taken: its write ran first; the turn end's
        // checkpoint holds what step 1 wrote and must not stand for "before step 1".
        let log = events(vec![
            EventData::TurnStart(TurnStart { turn: 1 }),
            start(1),
            call(1, "run_command"),
            checkpoint(None, CheckpointReason::TurnEnd, "end"),
        ]);
        assert_eq!(root(step_target(&log, 1)), Some(None));
        // A plan update changes no file.
        let planned = events(vec![
            start(1),
            call(1, "update_plan"),
            checkpoint(None, CheckpointReason::TurnEnd, "end"),
        ]);
        assert_eq!(root(step_target(&planned, 1)), Some(Some("end".to_owned())));
    }
}

//! Workspace checkpoints, served: one [`Checkpointer`] per workspace, shared by that
//! workspace's sessions behind a mutex (two sessions' checkpoints never interleave, and a rewind
//! holds it from its plan to its end), used only on blocking threads.
//!
//! A workspace's checkpointer is opened on first use — at daemon start for every workspace that
//! has checkpoints (`Daemon::start_checkpoints`), else before its first checkpoint or rewind —
//! and opening it completes a rewind a crash interrupted (the journal rolls forward) and
//! collects the store: the roots named by the workspace's session logs, newest first, are kept
//! within `[checkpoints] budget` and the rest dropped (said in `daemon/status` and `dsh
//! doctor`). Collection runs again every [`COLLECT_EVERY`] checkpoints.
//!
//! The loop asks through [`Seam`] (the agent's `Checkpoints`): the answer is the
//! `workspace/checkpoint` event the session's owner logs. `rewind.rs` restores.

use std::collections::{HashMap, HashSet};
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use dsh_agent::approval::BoxFuture;
use dsh_checkpoint::{
    Checkpoint, CheckpointConfig, Checkpointer, Hash, ObjectStore, Recovered, WatchStatus,
};
use dsh_config::CheckpointSettings;
use dsh_protocol::CheckpointStoreStatus;
use dsh_session::{CheckpointReason, EventData, TooLargeFile, WorkspaceCheckpoint};
use dsh_store::{DshHome, read_log};

use crate::settings::Settings;

/// Checkpoints taken in a workspace between two collections of its store.
pub const COLLECT_EVERY: u32 = 32;

/// Every workspace's checkpoints this daemon has opened.
pub(crate) struct Checkpoints {
    home: DshHome,
    settings: Arc<Settings>,
    workspaces: Mutex<HashMap<PathBuf, Arc<WorkspaceCheckpoints>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic happened while it was held; the checkpointer's files
    // are written atomically and its state is re-read on open, so keep going.
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Checkpoints {
    pub(crate) fn new(home: DshHome, settings: Arc<Settings>) -> Checkpoints {
        Checkpoints { home, settings, workspaces: Mutex::default() }
    }

    /// The checkpoints of the workspace at `root` (canonical).
    pub(crate) fn workspace(&self, root: &Path) -> Arc<WorkspaceCheckpoints> {
        let mut workspaces = lock(&self.workspaces);
        let entry = workspaces.entry(root.to_path_buf()).or_insert_with(|| {
            let store = self.home.workspace_canonical(root.to_path_buf());
            Arc::new(WorkspaceCheckpoints {
                root: root.to_path_buf(),
                store,
                settings: Arc::clone(&self.settings),
                state: Mutex::default(),
            })
        });
        Arc::clone(entry)
    }

    /// Opens every workspace that has checkpoints (blocking): recovers an interrupted rewind
    /// and collects each store. At daemon start.
    pub(crate) fn open_all(&self) {
        let dirs = match self.home.checkpointed_workspace_dirs() {
            Ok(dirs) => dirs,
            Err(error) => {
                tracing::warn!(%error, "listing the workspaces with checkpoints");
                return;
            }
        };
        for (sessions, dir) in dirs {
            let Some(root) = workspace_of(&sessions) else {
                tracing::debug!(dir = %dir.display(), "checkpoints of a workspace with no log");
                continue;
            };
            if !root.is_dir() {
                continue;
            }
            if let Err(error) = self.workspace(&root).with(|_, _| ()) {
                tracing::warn!(workspace = %root.display(), "checkpoints: {error}");
            }
        }
    }

    /// What `daemon/status` says of each opened store.
    pub(crate) fn status(&self) -> Vec<CheckpointStoreStatus> {
        let workspaces: Vec<Arc<WorkspaceCheckpoints>> =
            lock(&self.workspaces).values().cloned().collect();
        let mut statuses: Vec<CheckpointStoreStatus> = workspaces
            .iter()
            .filter_map(|workspace| {
                // A store busy with a checkpoint or a rewind right now is left out of this one.
                let state = workspace.state.try_lock().ok()?;
                state.checkpointer.as_ref()?;
                Some(CheckpointStoreStatus {
                    workspace: workspace.root.display().to_string(),
                    bytes: state.status.bytes,
                    budget: state.status.budget,
                    dropped: state.status.dropped.clone(),
                    freed: state.status.freed,
                    recovered: state.status.recovered.clone(),
                    watch: state.status.watch.clone(),
                })
            })
            .collect();
        statuses.sort_by(|a, b| a.workspace.cmp(&b.workspace));
        statuses
    }
}

/// The workspace a sessions directory's logs name (their first line, `session/meta`).
fn workspace_of(sessions: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(sessions).ok()?;
    for entry in entries.flatten() {
        let Ok(file) = std::fs::File::open(entry.path()) else { continue };
        let mut line = String::new();
        if std::io::BufReader::new(file).read_line(&mut line).is_err() {
            continue;
        }
        if let Ok(event) = dsh_session::decode_event(line.trim_end(), 1)
            && let EventData::SessionMeta(meta) = event.data
        {
            return Some(PathBuf::from(meta.workspace));
        }
    }
    None
}

/// One workspace's checkpoints (and its object store, which its images share).
pub(crate) struct WorkspaceCheckpoints {
    root: PathBuf,
    pub(crate) store: dsh_store::Workspace,
    settings: Arc<Settings>,
    state: Mutex<State>,
}

/// A workspace's checkpointer and what is known of it.
#[derive(Default)]
pub(crate) struct State {
    checkpointer: Option<Checkpointer>,
    /// The size cap the checkpointer was opened with.
    max_file_size: u64,
    /// The workspace's latest checkpoint, by any session: what a rewind's conflicts are
    /// measured against when nothing better is known of the rewound session.
    pub(crate) latest: Option<Hash>,
    /// Per session, the state its agent last left (its latest checkpoint) or a rewind put in
    /// place: a rewind's conflicts are what changed since, by anyone else — the user, or another
    /// session's agent (whose checkpoint must not absorb a user's edit into "known").
    pub(crate) known: HashMap<String, Hash>,
    /// Checkpoints taken since the last collection.
    taken: u32,
    status: StoreStatus,
    /// Images put in the store by this daemon: kept by every collection, whether or not a log
    /// names them yet (one is stored before the `user/message` that names it is logged).
    fresh_images: HashSet<Hash>,
}

#[derive(Clone, Debug, Default)]
struct StoreStatus {
    bytes: u64,
    budget: u64,
    dropped: Vec<String>,
    freed: u64,
    recovered: Option<String>,
    /// Why the watch could not be kept, once it could not.
    watch: Option<String>,
}

impl WorkspaceCheckpoints {
    /// The `[checkpoints]` settings for this workspace, as configured now (the built-in
    /// defaults when its configuration cannot be used).
    pub(crate) fn settings(&self) -> CheckpointSettings {
        match self.settings.config(&self.root) {
            Ok(config) => config.checkpoints.clone(),
            Err(_) => CheckpointSettings {
                enabled: dsh_config::Sourced::new(true, dsh_config::Source::Default),
                max_file_size: dsh_config::Sourced::new(
                    dsh_config::DEFAULT_CHECKPOINT_MAX_FILE_SIZE,
                    dsh_config::Source::Default,
                ),
                budget: dsh_config::Sourced::new(
                    dsh_config::DEFAULT_CHECKPOINT_BUDGET,
                    dsh_config::Source::Default,
                ),
            },
        }
    }

    /// Runs `work` with the workspace's checkpointer, opening it first if needed (recovering an
    /// interrupted rewind, collecting the store). Blocking; holds the workspace's mutex.
    pub(crate) fn with<T>(
        &self,
        work: impl FnOnce(&mut Checkpointer, &mut State) -> T,
    ) -> Result<T, String> {
        let settings = self.settings();
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        state.status.budget = settings.budget.value;
        if state.checkpointer.is_none() || state.max_file_size != settings.max_file_size.value {
            let first = state.checkpointer.is_none();
            // Watched (the default): a checkpoint examines what the kernel reported changed.
            let config = CheckpointConfig {
                max_file_size: settings.max_file_size.value,
                ..CheckpointConfig::default()
            };
            let mut checkpointer =
                Checkpointer::open(&self.root, &self.store.checkpoints_dir(), config)
                    .map_err(|error| format!("opening the workspace's checkpoints: {error}"))?;
            state.max_file_size = settings.max_file_size.value;
            if first {
                self.recover(&mut checkpointer, state)?;
                state.latest = self.scan().latest;
                state.checkpointer = Some(checkpointer);
                self.collect(state, settings.budget.value);
            } else {
                state.checkpointer = Some(checkpointer);
            }
        }
        match state.checkpointer.take() {
            Some(mut checkpointer) => {
                let result = work(&mut checkpointer, state);
                state.checkpointer = Some(checkpointer);
                Ok(result)
            }
            None => Err("the workspace's checkpoints are not open".to_owned()),
        }
    }

    /// Completes a rewind a crash interrupted, and says so (daemon log, status).
    fn recover(&self, checkpointer: &mut Checkpointer, state: &mut State) -> Result<(), String> {
        let recovered = checkpointer
            .recover()
            .map_err(|error| format!("recovering an interrupted rewind: {error}"))?;
        let said = match recovered {
            None => return Ok(()),
            Some(Recovered::Completed { target, paths }) => format!(
                "an interrupted rewind to checkpoint {target} was completed: {} path(s) restored",
                paths.len()
            ),
            Some(Recovered::Discarded) => {
                "an interrupted rewind had not touched any file; its torn journal was discarded"
                    .to_owned()
            }
            Some(Recovered::PartWay { target, state: part_way }) => format!(
                "an interrupted rewind to checkpoint {target} could not be completed: {part_way}"
            ),
        };
        tracing::warn!(workspace = %self.root.display(), "{said}");
        state.status.recovered = Some(said);
        Ok(())
    }

    /// The checkpoint roots the workspace's session logs name, newest first, and the latest
    /// state the agent left (its newest checkpoint, or the target of a rewind after it).
    fn scan(&self) -> Scanned {
        let mut named: Vec<(u64, u64, Hash)> = Vec::new();
        let mut latest: Option<(u64, Hash)> = None;
        let mut images = Vec::new();
        // A log that cannot be read (or a listing that fails) may name checkpoints and images:
        // what it names is unknown, so nothing may be collected.
        let mut unreadable = None;
        let logs = self.store.session_logs().unwrap_or_else(|error| {
            unreadable = Some(format!("the session logs cannot be listed: {error}"));
            Vec::new()
        });
        for path in logs {
            let log = match read_log(&path) {
                Ok(log) => log,
                Err(error) => {
                    unreadable = Some(format!("{} cannot be read: {error}", path.display()));
                    continue;
                }
            };
            for event in &log.events {
                images.extend(
                    crate::images::referenced(&event.data)
                        .filter_map(|image| image.sha256.parse::<Hash>().ok()),
                );
                let (state, others): (Option<&str>, Vec<&str>) = match &event.data {
                    EventData::WorkspaceCheckpoint(checkpoint)
                        if checkpoint.reason != CheckpointReason::Rewind =>
                    {
                        (Some(&checkpoint.root), Vec::new())
                    }
                    EventData::WorkspaceCheckpoint(checkpoint) => {
                        (None, vec![checkpoint.root.as_str()])
                    }
                    EventData::WorkspaceRewind(rewind) => (
                        rewind.files.then_some(()).and(rewind.checkpoint.as_deref()),
                        rewind.before.iter().map(String::as_str).collect(),
                    ),
                    _ => continue,
                };
                for root in state.into_iter().chain(others) {
                    if let Ok(hash) = root.parse::<Hash>() {
                        named.push((event.time, event.seq, hash));
                    }
                }
                if let Some(hash) = state.and_then(|root| root.parse::<Hash>().ok())
                    && latest.as_ref().is_none_or(|(time, _)| event.time >= *time)
                {
                    latest = Some((event.time, hash));
                }
            }
        }
        named.sort_by_key(|(time, seq, _)| std::cmp::Reverse((*time, *seq)));
        Scanned {
            roots_newest_first: named.into_iter().map(|(_, _, hash)| hash).collect(),
            latest: latest.map(|(_, hash)| hash),
            images,
            unreadable,
        }
    }

    /// Collects the store within `budget`, and remembers what it dropped.
    fn collect(&self, state: &mut State, budget: u64) {
        let Scanned { roots_newest_first: roots, mut images, unreadable, .. } = self.scan();
        if let Some(why) = unreadable {
            // Collecting now could drop a checkpoint or an image that log still names.
            tracing::warn!(workspace = %self.root.display(), "checkpoints not collected: {why}");
            return;
        }
        // Every image a log names, and every image stored since the daemon started (its
        // `user/message` may not be logged yet), is kept, whatever the budget.
        images.extend(state.fresh_images.iter().copied());
        let Some(checkpointer) = state.checkpointer.as_mut() else { return };
        state.taken = 0;
        match checkpointer.collect(&roots, budget, &images) {
            Ok(collected) => {
                if !collected.dropped.is_empty() {
                    tracing::warn!(
                        workspace = %self.root.display(),
                        dropped = collected.dropped.len(),
                        budget,
                        "checkpoints over the budget were dropped, oldest first"
                    );
                }
                let mut dropped: Vec<String> =
                    collected.dropped.iter().rev().map(Hash::to_string).collect();
                dropped.dedup();
                state.status.dropped = dropped;
                state.status.freed = collected.freed_bytes;
                state.status.bytes = collected.store_bytes;
            }
            Err(error) => {
                tracing::warn!(workspace = %self.root.display(), %error, "collecting checkpoints")
            }
        }
    }

    /// Stores an image in the workspace's object store (blocking), whether or not checkpoints
    /// are on: under the workspace's lock, so no collection sweeps it meanwhile, and kept by
    /// every later collection.
    pub(crate) fn put_image(&self, bytes: &[u8]) -> Result<Hash, String> {
        let mut state = lock(&self.state);
        let objects = ObjectStore::open(&self.store.objects_dir())
            .map_err(|error| format!("opening the workspace's object store: {error}"))?;
        let hash = objects.put(bytes).map_err(|error| format!("storing an image: {error}"))?;
        state.fresh_images.insert(hash);
        Ok(hash)
    }

    /// Records that `session`'s files are `root` as far as its agent knows (a rewind put them
    /// there).
    pub(crate) fn note(&self, session: &str, root: Hash) {
        lock(&self.state).known.insert(session.to_owned(), root);
    }

    /// Takes a checkpoint for `session` now (blocking), unless checkpoints are off here; the
    /// event to log.
    pub(crate) fn take(
        &self,
        session: &str,
        step: Option<u64>,
        reason: CheckpointReason,
    ) -> Option<WorkspaceCheckpoint> {
        let settings = self.settings();
        if !settings.enabled.value {
            return None;
        }
        let taken = self.with(|checkpointer, state| {
            // A turn's end walks the whole tree: what a watch cannot see (a write through a
            // shared mmap, through a hard link from outside) is then caught within a turn.
            let checkpoint = if reason == CheckpointReason::TurnEnd {
                checkpointer.checkpoint_full()
            } else {
                checkpointer.checkpoint()
            };
            if let WatchStatus::Unavailable(why) = checkpointer.watch_status()
                && state.status.watch.is_none()
            {
                tracing::warn!(workspace = %self.root.display(), "checkpoints walk the tree: {why}");
                state.status.watch = Some(why);
            }
            if let Ok(checkpoint) = &checkpoint {
                state.latest = Some(checkpoint.root);
                state.known.insert(session.to_owned(), checkpoint.root);
                state.taken += 1;
            }
            checkpoint
        });
        let checkpoint = match taken {
            Ok(Ok(checkpoint)) => checkpoint,
            Ok(Err(error)) => {
                tracing::warn!(workspace = %self.root.display(), %error, "taking a checkpoint");
                return None;
            }
            Err(error) => {
                tracing::warn!(workspace = %self.root.display(), "{error}");
                return None;
            }
        };
        let mut state = lock(&self.state);
        if state.taken >= COLLECT_EVERY {
            self.collect(&mut state, settings.budget.value);
        }
        Some(event_of(&checkpoint, step, reason))
    }
}

struct Scanned {
    roots_newest_first: Vec<Hash>,
    latest: Option<Hash>,
    /// The images the logs name (duplicates allowed).
    images: Vec<Hash>,
    /// Why what the logs name is not all known (a log that could not be read), if it is not.
    unreadable: Option<String>,
}

/// A path as the log writes it: relative, lossy for a name that is not UTF-8.
pub(crate) fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The `workspace/checkpoint` event of a checkpoint.
pub(crate) fn event_of(
    checkpoint: &Checkpoint,
    step: Option<u64>,
    reason: CheckpointReason,
) -> WorkspaceCheckpoint {
    WorkspaceCheckpoint {
        step,
        reason,
        root: checkpoint.root.to_string(),
        files: checkpoint.files as u64,
        changed: checkpoint.changed.iter().map(|path| path_text(path)).collect(),
        too_large: checkpoint
            .too_large
            .iter()
            .map(|(path, size)| TooLargeFile { path: path_text(path), size: *size })
            .collect(),
        incomplete: checkpoint.incomplete.clone(),
    }
}

/// The loop's checkpoints seam over a workspace's checkpoints.
pub(crate) struct Seam(pub(crate) Arc<WorkspaceCheckpoints>, pub(crate) String);

impl dsh_agent::Checkpoints for Seam {
    fn checkpoint(
        &self,
        step: Option<u64>,
        reason: CheckpointReason,
    ) -> BoxFuture<'static, Option<WorkspaceCheckpoint>> {
        let workspace = Arc::clone(&self.0);
        let session = self.1.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || workspace.take(&session, step, reason))
                .await
                .ok()
                .flatten()
        })
    }
}

//! Restoring a checkpoint: [`Checkpointer::plan`] compares the workspace now with a target
//! checkpoint (and with the latest one, for conflicts); [`Checkpointer::apply`] carries the plan
//! out under a journal; [`Checkpointer::recover`] completes a journal a crash left behind.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::checkpoint::path_of;
use crate::error::{Blocked, PartWay, RestoreError};
use crate::files::Root;
use crate::journal::{Action, Found, Journal};
use crate::tree::{self, Leaf, Manifest};
use crate::{Checkpoint, Checkpointer, Hash, ObjectStore};

/// What restoring a checkpoint would do, computed against the workspace as it is now. Every
/// path is relative to the workspace root; every list is sorted. The plan is its own dry run:
/// show it, then [`Checkpointer::apply`] it (at once: the workspace may change meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorePlan {
    /// The checkpoint restored.
    pub target: Hash,
    /// The checkpoint of the workspace as it was when planned: the state before the restore,
    /// so the restore can itself be undone by restoring `before.root`.
    pub before: Checkpoint,
    /// Paths present now that get the target's content, mode, link target or kind.
    pub restored: Vec<PathBuf>,
    /// Paths absent now that the target has (deleted or moved away since): created.
    pub created: Vec<PathBuf>,
    /// Paths present now that the target does not have (created since): removed.
    pub deleted: Vec<PathBuf>,
    /// Paths the restore would touch that changed since the latest checkpoint — by someone
    /// other than the agent, e.g. the user in an editor. [`Checkpointer::apply`] refuses while
    /// there are any, unless forced.
    pub conflicts: Vec<PathBuf>,
    /// Paths left as they are because a version is not stored: too large in the target (with
    /// its size there), or too large now and absent from the target (with its size now: dsh
    /// never removes content it could not bring back).
    pub not_restorable: Vec<(PathBuf, u64)>,
    /// Objects the restore needs that the store no longer has (collected, or never written by
    /// an incomplete checkpoint). [`Checkpointer::apply`] refuses while there are any.
    pub missing_objects: Vec<Hash>,
    /// Paths that cannot be restored safely (a symbolic link or a non-empty untracked
    /// directory in the way). [`Checkpointer::apply`] refuses while there are any.
    pub blocked: Vec<Blocked>,
}

/// What [`Checkpointer::apply`] did: the plan's lists, all done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The checkpoint restored.
    pub target: Hash,
    /// Paths rewritten to the target's state.
    pub restored: Vec<PathBuf>,
    /// Paths created.
    pub created: Vec<PathBuf>,
    /// Paths removed.
    pub deleted: Vec<PathBuf>,
}

/// What [`Checkpointer::recover`] found and did with a journal a crash left behind.
#[derive(Debug)]
pub enum Recovered {
    /// The journal was complete: the restore was rolled forward to its end.
    Completed {
        /// The checkpoint the interrupted restore was restoring.
        target: Hash,
        /// Every path the journal listed, now in the target's state.
        paths: Vec<PathBuf>,
    },
    /// The journal was torn (the crash came while it was being written, before anything was
    /// touched): discarded, the workspace is as it was before the restore.
    Discarded,
    /// Rolling forward failed part-way; the journal is removed and the state is reported.
    PartWay {
        /// The checkpoint the interrupted restore was restoring.
        target: Hash,
        /// Exactly which paths are in which state.
        state: PartWay,
    },
}

impl Checkpointer {
    /// Plans restoring checkpoint `target`. Takes a checkpoint of the workspace as it is now
    /// (returned as [`RestorePlan::before`]: the state before the restore) and compares it with
    /// the target; conflicts are the paths the restore would touch whose state now differs
    /// from `latest` (the workspace's latest checkpoint before this call; `None`: no
    /// conflicts are looked for). Touches no file of the workspace.
    ///
    /// If a tree object of the target is missing, the plan lists only the missing objects:
    /// what the target holds is unknown.
    pub fn plan(
        &mut self,
        target: &Hash,
        latest: Option<&Hash>,
    ) -> Result<RestorePlan, RestoreError> {
        let before = self.scan(Some("a restore's plan walks the whole tree"))?;
        let current = self.current_manifest();
        let mut plan = RestorePlan {
            target: *target,
            before,
            restored: Vec::new(),
            created: Vec::new(),
            deleted: Vec::new(),
            conflicts: Vec::new(),
            not_restorable: Vec::new(),
            missing_objects: Vec::new(),
            blocked: Vec::new(),
        };
        let flattened = tree::flatten(&self.objects, target)?;
        if !flattened.missing_trees.is_empty() {
            plan.missing_objects = flattened.missing_trees;
            plan.missing_objects.sort();
            return Ok(plan);
        }
        let wanted = flattened.manifest;
        let diff = diff(&current, &wanted);
        let mut missing = BTreeSet::new();
        for path in diff.restored.iter().chain(&diff.created) {
            if let Some(Leaf::File { hash, .. }) = wanted.get(path)
                && !self.objects.contains(hash)
            {
                missing.insert(*hash);
            }
        }
        if let Some(latest) = latest {
            let latest = tree::flatten(&self.objects, latest)?.manifest;
            for path in diff.restored.iter().chain(&diff.created).chain(&diff.deleted) {
                if latest.get(path) != current.get(path) {
                    plan.conflicts.push(path_of(path));
                }
            }
        }
        plan.blocked = blocked(&self.root, &current, &diff);
        plan.restored = diff.restored.iter().map(|path| path_of(path)).collect();
        plan.created = diff.created.iter().map(|path| path_of(path)).collect();
        plan.deleted = diff.deleted.iter().map(|path| path_of(path)).collect();
        plan.not_restorable =
            diff.not_restorable.iter().map(|(path, size)| (path_of(path), *size)).collect();
        plan.missing_objects = missing.into_iter().collect();
        Ok(plan)
    }

    /// Carries out `plan`. Refuses, touching nothing, if it has missing objects or blocked
    /// paths, or conflicts unless `force`. Otherwise writes a journal (fsynced) of every
    /// action, then removes, creates and rewrites each path in turn (each file written to a
    /// temporary file in its directory and renamed over the path; modes restored; symbolic
    /// links recreated as links; no symbolic link is ever followed), then removes the journal.
    /// A failure part-way stops there and reports exactly which paths are in which state
    /// ([`RestoreError::PartWay`]).
    pub fn apply(&mut self, plan: &RestorePlan, force: bool) -> Result<Applied, RestoreError> {
        if !plan.missing_objects.is_empty() {
            return Err(RestoreError::MissingObjects(plan.missing_objects.clone()));
        }
        if !plan.blocked.is_empty() {
            return Err(RestoreError::Blocked(plan.blocked.clone()));
        }
        if !plan.conflicts.is_empty() && !force {
            return Err(RestoreError::Conflicts(plan.conflicts.clone()));
        }
        let flattened = tree::flatten(&self.objects, &plan.target)?;
        if !flattened.missing_trees.is_empty() {
            return Err(RestoreError::MissingObjects(flattened.missing_trees));
        }
        let actions = actions(&self.root, plan, &flattened.manifest)?;
        let journal_path = self.journal_path();
        let journal = Journal { target: plan.target, actions };
        journal.write(&journal_path).map_err(|cause| RestoreError::Journal {
            action: "writing",
            path: journal_path.clone(),
            cause,
        })?;
        let root = Root::open(&self.root).map_err(|cause| RestoreError::Journal {
            action: "opening the workspace for",
            path: journal_path.clone(),
            cause,
        });
        let outcome = root.map(|root| execute(&root, &self.objects, &journal.actions));
        // Reported either way: the journal's work is done or its failure is said.
        let removed = Journal::remove(&journal_path);
        match outcome {
            Err(error) => {
                let _ = removed;
                return Err(error);
            }
            Ok(Err(part_way)) => return Err(RestoreError::PartWay(part_way)),
            Ok(Ok(_)) => {}
        }
        removed.map_err(|cause| RestoreError::Journal {
            action: "removing",
            path: journal_path,
            cause,
        })?;
        Ok(Applied {
            target: plan.target,
            restored: plan.restored.clone(),
            created: plan.created.clone(),
            deleted: plan.deleted.clone(),
        })
    }

    /// Completes a restore a crash interrupted: if a journal is left, rolls it forward (every
    /// content it writes is in the store) and removes it. `Ok(None)`: there was none. Call it
    /// when opening a workspace's checkpoints, before any checkpoint, restore or collection.
    pub fn recover(&mut self) -> Result<Option<Recovered>, RestoreError> {
        let journal_path = self.journal_path();
        let journal_error =
            |action, cause| RestoreError::Journal { action, path: journal_path.clone(), cause };
        let journal = match Journal::read(&journal_path).map_err(|e| journal_error("reading", e))? {
            Found::None => return Ok(None),
            Found::Torn => {
                Journal::remove(&journal_path).map_err(|e| journal_error("removing", e))?;
                return Ok(Some(Recovered::Discarded));
            }
            Found::Journal(journal) => journal,
        };
        let root =
            Root::open(&self.root).map_err(|e| journal_error("opening the workspace for", e))?;
        let outcome = execute(&root, &self.objects, &journal.actions);
        remove_leftover_temps(&self.root, &root, &journal.actions);
        Journal::remove(&journal_path).map_err(|e| journal_error("removing", e))?;
        Ok(Some(match outcome {
            Ok(paths) => Recovered::Completed { target: journal.target, paths },
            Err(state) => Recovered::PartWay { target: journal.target, state },
        }))
    }

    pub(crate) fn journal_path(&self) -> PathBuf {
        self.state_dir.join("rewind-journal")
    }
}

/// Removes the temporary files a restore killed mid-write left beside the paths it wrote
/// (`.dsh-restore-*`), never through a link.
fn remove_leftover_temps(workspace: &Path, root: &Root, actions: &[Action]) {
    let parents: BTreeSet<&[u8]> = actions
        .iter()
        .filter(|action| matches!(action, Action::File { .. } | Action::Symlink { .. }))
        .map(|action| {
            let path = action.path();
            path.iter().rposition(|byte| *byte == b'/').map_or(&path[..0], |at| &path[..at])
        })
        .collect();
    for parent in parents {
        if !parent.is_empty() && !is_real_dir(workspace, parent) {
            continue;
        }
        let Ok(entries) = fs::read_dir(workspace.join(path_of(parent))) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.as_bytes().starts_with(crate::files::TEMP_PREFIX) {
                let _ = root.remove(&tree::join(parent, name.as_bytes()));
            }
        }
    }
}

/// How the current manifest differs from the target's, as path bytes.
#[derive(Debug, Default)]
struct Diff {
    restored: Vec<Vec<u8>>,
    created: Vec<Vec<u8>>,
    deleted: Vec<Vec<u8>>,
    not_restorable: Vec<(Vec<u8>, u64)>,
}

fn diff(current: &Manifest, wanted: &Manifest) -> Diff {
    let mut diff = Diff::default();
    for (path, now) in current {
        match (now, wanted.get(path)) {
            (now, Some(then)) if then == now => {}
            // Content dsh could not bring back is never destroyed: left as it is.
            (Leaf::NotStored { size, .. }, _) => diff.not_restorable.push((path.clone(), *size)),
            (_, Some(Leaf::NotStored { size, .. })) => {
                diff.not_restorable.push((path.clone(), *size));
            }
            (_, Some(_)) => diff.restored.push(path.clone()),
            (_, None) => diff.deleted.push(path.clone()),
        }
    }
    for (path, then) in wanted {
        if current.contains_key(path) {
            continue;
        }
        match then {
            Leaf::NotStored { size, .. } => diff.not_restorable.push((path.clone(), *size)),
            _ => diff.created.push(path.clone()),
        }
    }
    diff.not_restorable.sort();
    diff
}

/// The proper ancestors of a path (`a`, `a/b` for `a/b/c`), shallowest first.
fn ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter().enumerate().filter(|(_, byte)| **byte == b'/').map(move |(at, _)| &path[..at])
}

fn on_disk(root: &Path, path: &[u8]) -> io::Result<fs::Metadata> {
    fs::symlink_metadata(root.join(path_of(path)))
}

/// The paths the restore would have to write through a link, or over something untracked.
fn blocked(root: &Path, current: &Manifest, diff: &Diff) -> Vec<Blocked> {
    let deleted: BTreeSet<&[u8]> = diff.deleted.iter().map(Vec::as_slice).collect();
    let mut blocked = Vec::new();
    let mut block = |path: &[u8], reason: String| {
        blocked.push(Blocked { path: path_of(path), reason });
    };
    for path in diff.restored.iter().chain(&diff.created) {
        let mut reason = None;
        // Whether the path's parent is made afresh (a tracked file or link in the way is
        // removed first, or a directory is missing): nothing can be in its place then.
        let mut fresh = false;
        for ancestor in ancestors(path) {
            if let Some(leaf) = current.get(ancestor) {
                if deleted.contains(ancestor) {
                    fresh = true;
                } else {
                    let what = match leaf {
                        Leaf::NotStored { .. } => "a file whose content is not stored",
                        _ => "a file",
                    };
                    reason = Some(format!("{} is {what}", path_of(ancestor).display()));
                }
                break;
            }
            match on_disk(root, ancestor) {
                Ok(metadata) if metadata.is_dir() => {}
                Ok(metadata) if metadata.file_type().is_symlink() => {
                    reason = Some(format!(
                        "{} is a symbolic link dsh does not track; never written through",
                        path_of(ancestor).display()
                    ));
                    break;
                }
                Ok(_) => {
                    reason = Some(format!(
                        "{} is an untracked file, not a directory",
                        path_of(ancestor).display()
                    ));
                    break;
                }
                Err(_) => {
                    fresh = true;
                    break;
                }
            }
        }
        if reason.is_none() && !fresh && !current.contains_key(path) {
            match on_disk(root, path) {
                Ok(metadata) if metadata.is_dir() => {
                    if !only_tracked_below(root, path, current) {
                        reason = Some("a directory holding untracked files is in its place".into());
                    }
                }
                Ok(_) => reason = Some("an untracked file is in its place".into()),
                Err(_) => {}
            }
        }
        if let Some(reason) = reason {
            block(path, reason);
        }
    }
    blocked.sort_by(|left, right| left.path.cmp(&right.path));
    blocked
}

/// Whether everything below the directory `dir` is a tracked file or link the restore removes
/// (or an empty directory).
fn only_tracked_below(root: &Path, dir: &[u8], current: &Manifest) -> bool {
    let Ok(entries) = fs::read_dir(root.join(path_of(dir))) else { return false };
    entries.into_iter().all(|entry| {
        let Ok(entry) = entry else { return false };
        let path = tree::join(dir, entry.file_name().as_bytes());
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => only_tracked_below(root, &path, current),
            Ok(_) => {
                matches!(current.get(&path), Some(leaf) if !matches!(leaf, Leaf::NotStored { .. }))
            }
            Err(_) => false,
        }
    })
}

/// Whether `path` is a directory reached through directories only (no link followed).
fn is_real_dir(root: &Path, path: &[u8]) -> bool {
    ancestors(path)
        .chain(std::iter::once(path))
        .all(|prefix| on_disk(root, prefix).is_ok_and(|metadata| metadata.is_dir()))
}

/// The directories below `dir` on disk (not following links), deepest first, `dir` last.
fn dirs_below(root: &Path, dir: &[u8], out: &mut Vec<Vec<u8>>) {
    if let Ok(entries) = fs::read_dir(root.join(path_of(dir))) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                dirs_below(root, &tree::join(dir, entry.file_name().as_bytes()), out);
            }
        }
    }
    out.push(dir.to_vec());
}

/// The restore's actions in order: removals, then directories left empty that the target does
/// not have, then writes (parents created as needed).
fn actions(
    root: &Path,
    plan: &RestorePlan,
    wanted: &Manifest,
) -> Result<Vec<Action>, RestoreError> {
    let bytes = |path: &PathBuf| path.as_os_str().as_bytes().to_vec();
    let target_dirs: BTreeSet<&[u8]> = wanted.keys().flat_map(|path| ancestors(path)).collect();
    let mut actions: Vec<Action> =
        plan.deleted.iter().map(|path| Action::Remove(bytes(path))).collect();
    let mut dirs = BTreeSet::new();
    for path in &plan.deleted {
        let path = bytes(path);
        for ancestor in ancestors(&path) {
            if !target_dirs.contains(ancestor) {
                dirs.insert(ancestor.to_vec());
            }
        }
    }
    let mut writes = Vec::new();
    for path in plan.restored.iter().chain(&plan.created) {
        let path = bytes(path);
        let Some(leaf) = wanted.get(&path) else {
            return Err(RestoreError::Objects(crate::ObjectError::Corrupt {
                hash: plan.target,
                reason: format!(
                    "the plan names {} which the checkpoint lacks",
                    path_of(&path).display()
                ),
            }));
        };
        // A file or link in place of a directory: the directory (emptied by the removals)
        // goes first, with any empty directories below it.
        if is_real_dir(root, &path) {
            let mut below = Vec::new();
            dirs_below(root, &path, &mut below);
            dirs.extend(below);
        }
        writes.push(match leaf {
            Leaf::File { mode, hash } => Action::File { path, mode: *mode, hash: *hash },
            Leaf::Symlink { target } => Action::Symlink { path, target: target.clone() },
            Leaf::NotStored { .. } => continue,
        });
    }
    let mut dirs: Vec<Vec<u8>> = dirs.into_iter().collect();
    // Deepest first.
    dirs.sort_by(|left, right| {
        let depth = |path: &[u8]| path.iter().filter(|byte| **byte == b'/').count();
        depth(right).cmp(&depth(left)).then_with(|| right.cmp(left))
    });
    actions.extend(dirs.into_iter().map(Action::RemoveDir));
    writes.sort_by(|left, right| left.path().cmp(right.path()));
    actions.extend(writes);
    Ok(actions)
}

/// Carries out `actions` in order; stops at the first failure. Returns the paths done (files
/// and links; directories removed are not listed).
fn execute(
    root: &Root,
    objects: &ObjectStore,
    actions: &[Action],
) -> Result<Vec<PathBuf>, PartWay> {
    let mut done = Vec::new();
    for (at, action) in actions.iter().enumerate() {
        let result = match action {
            Action::Remove(path) => root.remove(path),
            Action::RemoveDir(path) => root.remove_dir_if_empty(path).map(|_| ()),
            Action::File { path, mode, hash } => objects
                .get(hash)
                .map_err(io::Error::other)
                .and_then(|content| root.write_file(path, &content, *mode)),
            Action::Symlink { path, target } => root.write_symlink(path, target),
        };
        match result {
            Ok(()) => {
                if !matches!(action, Action::RemoveDir(_)) {
                    done.push(path_of(action.path()));
                }
            }
            Err(cause) => {
                let not_reached = actions[at + 1..]
                    .iter()
                    .filter(|action| !matches!(action, Action::RemoveDir(_)))
                    .map(|action| path_of(action.path()))
                    .collect();
                return Err(PartWay { done, failed: path_of(action.path()), cause, not_reached });
            }
        }
    }
    Ok(done)
}

/// The actions `apply` would journal for `plan` (for the crash-recovery test).
#[cfg(test)]
pub(crate) fn tests_actions(
    checkpointer: &Checkpointer,
    plan: &RestorePlan,
    wanted: &Manifest,
) -> Vec<Action> {
    actions(&checkpointer.root, plan, wanted).unwrap_or_default()
}

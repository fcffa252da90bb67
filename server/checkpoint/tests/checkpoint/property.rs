//! The property: over random sequences of changes (agent writes, command writes, moves,
//! deletes, chmods, links, file ⇄ directory replacements, user edits), checkpoints and
//! restores, a restore to checkpoint N leaves every tracked path exactly as it was at N
//! (content, mode, link target), ignored files untouched, and conflicts are exactly the
//! touched paths whose state differs from the latest checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use proptest::prelude::*;

use crate::{Fixture, Node, snapshot};

/// The files the sequences play with: nested so that files and directories replace each other.
pub(crate) const SLOTS: &[&str] =
    &["f1", "f2", "d1/f3", "d1/f4", "d1/d2/f5", "d3/f6", "d1", "d1/d2", "d3"];
/// Ignored by the workspace's `.gitignore`: the restore must never touch them.
const IGNORED: &[&str] = &["keep.log", "other.log"];
const MODES: &[u32] = &[0o644, 0o755, 0o600, 0o444];
const LINK_TARGETS: &[&str] = &["f1", "d1", "../outside", "/nonexistent/abs", "d1/d2/f5"];

#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// A write tool or a command writing a file (content chosen by the seed).
    Write {
        slot: usize,
        seed: u8,
    },
    Delete {
        slot: usize,
    },
    Move {
        from: usize,
        to: usize,
    },
    Chmod {
        slot: usize,
        mode: usize,
    },
    Link {
        slot: usize,
        target: usize,
    },
    /// Whatever is at the slot becomes a directory holding a file.
    MakeDir {
        slot: usize,
        seed: u8,
    },
    /// An ignored file is written.
    Ignored {
        which: usize,
        seed: u8,
    },
    Checkpoint,
    /// Restore checkpoint `which` (modulo the number taken), forced.
    Restore {
        which: usize,
    },
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS.len();
    prop_oneof![
        4 => (slot.clone(), any::<u8>()).prop_map(|(slot, seed)| Op::Write { slot, seed }),
        2 => slot.clone().prop_map(|slot| Op::Delete { slot }),
        2 => (slot.clone(), slot.clone()).prop_map(|(from, to)| Op::Move { from, to }),
        2 => (slot.clone(), 0..MODES.len()).prop_map(|(slot, mode)| Op::Chmod { slot, mode }),
        1 => (slot.clone(), 0..LINK_TARGETS.len()).prop_map(|(slot, target)| Op::Link { slot, target }),
        1 => (slot, any::<u8>()).prop_map(|(slot, seed)| Op::MakeDir { slot, seed }),
        1 => (0..IGNORED.len(), any::<u8>()).prop_map(|(which, seed)| Op::Ignored { which, seed }),
        2 => Just(Op::Checkpoint),
        2 => (0..8usize).prop_map(|which| Op::Restore { which }),
    ]
}

fn tracked(path: &[u8]) -> bool {
    !path.ends_with(b".log")
}

/// Removes whatever is at `path` (file, link or directory tree).
fn clear(path: &Path) {
    match fs::symlink_metadata(path) {
        Ok(metadata) if metadata.is_dir() => fs::remove_dir_all(path).unwrap(),
        Ok(_) => fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
}

/// Makes every ancestor of `path` (below `root`) a real directory, replacing files and links.
fn make_parents(root: &Path, relative: &str) {
    let mut current = root.to_path_buf();
    let components: Vec<&str> = relative.split('/').collect();
    for component in &components[..components.len() - 1] {
        current.push(component);
        match fs::symlink_metadata(&current) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => {
                fs::remove_file(&current).unwrap();
                fs::create_dir(&current).unwrap();
            }
            Err(_) => fs::create_dir(&current).unwrap(),
        }
    }
}

fn content(seed: u8) -> Vec<u8> {
    // Some contents repeat (dedup), some are long enough to be compressed.
    let length = usize::from(seed % 7) * 300;
    let mut content = format!("seed {}\n", seed % 16).into_bytes();
    content.extend(std::iter::repeat_n(seed % 16, length));
    content
}

pub(crate) fn apply_op(ws: &Path, op: &Op) {
    match op {
        Op::Write { slot, seed } => {
            make_parents(ws, SLOTS[*slot]);
            let path = ws.join(SLOTS[*slot]);
            match fs::symlink_metadata(&path) {
                Ok(metadata) if metadata.is_dir() || metadata.file_type().is_symlink() => {
                    clear(&path)
                }
                Ok(metadata) if metadata.permissions().mode() & 0o200 == 0 => clear(&path),
                _ => {}
            }
            fs::write(&path, content(*seed)).unwrap();
        }
        Op::Delete { slot } => clear(&ws.join(SLOTS[*slot])),
        Op::Move { from, to } => {
            let (from, to) = (SLOTS[*from], SLOTS[*to]);
            if from == to
                || to.starts_with(&format!("{from}/"))
                || from.starts_with(&format!("{to}/"))
            {
                return;
            }
            if fs::symlink_metadata(ws.join(from)).is_err() {
                return;
            }
            make_parents(ws, to);
            clear(&ws.join(to));
            fs::rename(ws.join(from), ws.join(to)).unwrap();
        }
        Op::Chmod { slot, mode } => {
            let path = ws.join(SLOTS[*slot]);
            if fs::symlink_metadata(&path).is_ok_and(|metadata| metadata.is_file()) {
                fs::set_permissions(&path, fs::Permissions::from_mode(MODES[*mode])).unwrap();
            }
        }
        Op::Link { slot, target } => {
            make_parents(ws, SLOTS[*slot]);
            let path = ws.join(SLOTS[*slot]);
            clear(&path);
            symlink(LINK_TARGETS[*target], &path).unwrap();
        }
        Op::MakeDir { slot, seed } => {
            let inner = format!("{}/inner", SLOTS[*slot]);
            make_parents(ws, &inner);
            clear(&ws.join(&inner));
            fs::write(ws.join(&inner), content(*seed)).unwrap();
        }
        Op::Ignored { which, seed } => fs::write(ws.join(IGNORED[*which]), content(*seed)).unwrap(),
        Op::Checkpoint | Op::Restore { .. } => unreachable!("handled by the runner"),
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fixture = Fixture::new();
    let ws = fixture.ws();
    fs::create_dir_all(fixture.temp.path().join("outside")).unwrap();
    fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
    let mut checkpointer = fixture.open();
    // (root, the tracked state the test itself saw at that checkpoint)
    let mut taken: Vec<(dsh_checkpoint::Hash, BTreeMap<Vec<u8>, Node>)> = Vec::new();
    for op in &ops {
        match op {
            Op::Checkpoint => {
                let checkpoint = checkpointer.checkpoint().unwrap();
                prop_assert!(checkpoint.incomplete.is_none(), "{:?}", checkpoint.incomplete);
                taken.push((checkpoint.root, snapshot(&ws, &|path| !tracked(path))));
            }
            Op::Restore { which } => {
                if taken.is_empty() {
                    continue;
                }
                let (target, expected) = taken[which % taken.len()].clone();
                let (latest_root, latest_state) = taken[taken.len() - 1].clone();
                let now = snapshot(&ws, &|path| !tracked(path));
                let ignored_before = snapshot(&ws, &|path| tracked(path));
                let plan = checkpointer.plan(&target, Some(&latest_root)).unwrap();
                prop_assert!(plan.missing_objects.is_empty());
                prop_assert!(plan.blocked.is_empty(), "{:?}", plan.blocked);

                // The plan, checked against the test's own view of the three states.
                let touched: BTreeSet<Vec<u8>> = now
                    .keys()
                    .chain(expected.keys())
                    .filter(|path| now.get(*path) != expected.get(*path))
                    .cloned()
                    .collect();
                let planned: BTreeSet<Vec<u8>> = plan
                    .restored
                    .iter()
                    .chain(&plan.created)
                    .chain(&plan.deleted)
                    .map(|path| path.as_os_str().as_encoded_bytes().to_vec())
                    .collect();
                prop_assert_eq!(&planned, &touched);
                let conflicts: BTreeSet<Vec<u8>> = touched
                    .iter()
                    .filter(|path| latest_state.get(*path) != now.get(*path))
                    .cloned()
                    .collect();
                let planned_conflicts: BTreeSet<Vec<u8>> = plan
                    .conflicts
                    .iter()
                    .map(|path| path.as_os_str().as_encoded_bytes().to_vec())
                    .collect();
                prop_assert_eq!(planned_conflicts, conflicts);

                checkpointer.apply(&plan, true).unwrap();
                prop_assert_eq!(snapshot(&ws, &|path| !tracked(path)), expected);
                prop_assert_eq!(snapshot(&ws, &|path| tracked(path)), ignored_before);
                prop_assert!(
                    fs::read_dir(fixture.temp.path().join("outside")).unwrap().next().is_none()
                );
                // The restored state checkpoints to the target's root.
                prop_assert_eq!(checkpointer.checkpoint().unwrap().root, target);
                // The state before the restore is a checkpoint the test knows too.
                taken.push((plan.before.root, now));
                taken.push((target, snapshot(&ws, &|path| !tracked(path))));
            }
            other => apply_op(&ws, other),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_restore_returns_every_tracked_path_to_its_checkpoint(
        ops in proptest::collection::vec(op(), 1..40)
    ) {
        run(ops)?;
    }
}

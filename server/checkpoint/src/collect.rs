//! Collection: [`Checkpointer::collect`] keeps the newest checkpoints that fit a budget and
//! removes every object no kept checkpoint references and the caller does not name as kept
//! (the store is shared: the images sessions reference live in it too).

use std::collections::HashSet;

use crate::error::CheckpointError;
use crate::journal::{Action, Found, Journal};
use crate::tree::{self, Entry, Leaf};
use crate::{Checkpointer, Hash, ObjectError, ObjectStore};

/// What [`Checkpointer::collect`] kept, dropped and removed. Never silent: the caller reports
/// the dropped checkpoints (status, doctor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// Checkpoint roots kept, newest first.
    pub kept: Vec<Hash>,
    /// Checkpoint roots dropped because the budget was exceeded, newest first (all older than
    /// every kept one). Their objects are gone unless a kept checkpoint shares them.
    pub dropped: Vec<Hash>,
    /// Objects removed.
    pub objects_removed: u64,
    /// Bytes on disk freed.
    pub freed_bytes: u64,
    /// The store's size on disk after collection.
    pub store_bytes: u64,
}

impl Checkpointer {
    /// Collects the store. `roots_newest_first` are the roots of every checkpoint still
    /// referenced (by any existing session of the workspace), newest first, duplicates
    /// allowed. Marks them newest first, adding up the on-disk size of the objects each newly
    /// references; once a root would take the total over `budget_bytes` it and every older
    /// root are dropped (the newest is always kept). Then removes every unmarked object. The
    /// current state (the metadata index's objects) and an unfinished restore's journal are
    /// always kept, and so is every object in `keep` (objects others than checkpoints put in
    /// the store and still reference: the images the sessions' logs name), outside the budget.
    pub fn collect(
        &mut self,
        roots_newest_first: &[Hash],
        budget_bytes: u64,
        keep: &[Hash],
    ) -> Result<Collected, CheckpointError> {
        let mut marked = HashSet::new();
        let mut total = 0u64;
        // The current state: the next checkpoint reuses the index's hashes without storing
        // them again, so they must stay.
        let index = self.index();
        let mut always: Vec<Hash> = index.trees.iter().copied().collect();
        always.extend(keep.iter().copied());
        always.extend(index.records.values().filter_map(|record| match &record.leaf {
            Leaf::File { hash, .. } => Some(*hash),
            _ => None,
        }));
        let mut roots_always: Vec<Hash> = index.root.into_iter().collect();
        if let Found::Journal(journal) = Journal::read(&self.journal_path()).unwrap_or(Found::None)
        {
            roots_always.push(journal.target);
            always.extend(journal.actions.iter().filter_map(|action| match action {
                Action::File { hash, .. } => Some(*hash),
                _ => None,
            }));
        }
        for hash in always {
            if marked.insert(hash) {
                total += self.objects.size_on_disk(&hash).unwrap_or(0);
            }
        }
        for root in roots_always {
            let (objects, size) = reachable(&self.objects, &root, &marked)?;
            total += size;
            marked.extend(objects);
        }

        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for root in roots_newest_first {
            if !dropped.is_empty() {
                dropped.push(*root);
                continue;
            }
            let (objects, size) = reachable(&self.objects, root, &marked)?;
            if kept.is_empty() || total + size <= budget_bytes {
                total += size;
                marked.extend(objects);
                kept.push(*root);
            } else {
                dropped.push(*root);
            }
        }
        let swept = self.objects.sweep(&marked)?;
        let (store_bytes, _) = self.objects.total_size()?;
        Ok(Collected {
            kept,
            dropped,
            objects_removed: swept.objects_removed,
            freed_bytes: swept.freed_bytes,
            store_bytes,
        })
    }
}

/// The objects reachable from `root` not already in `marked`, and their size on disk (missing
/// objects are skipped). A marked tree's objects are all marked: it is not descended into.
fn reachable(
    objects: &ObjectStore,
    root: &Hash,
    marked: &HashSet<Hash>,
) -> Result<(HashSet<Hash>, u64), CheckpointError> {
    let mut found = HashSet::new();
    let mut size = 0;
    let mut pending = vec![*root];
    while let Some(hash) = pending.pop() {
        if marked.contains(&hash) || found.contains(&hash) {
            continue;
        }
        let bytes = match objects.get(&hash) {
            Ok(bytes) => bytes,
            Err(ObjectError::Missing(_)) => continue,
            Err(error) => return Err(error.into()),
        };
        size += objects.size_on_disk(&hash).unwrap_or(0);
        found.insert(hash);
        let entries =
            tree::decode(&bytes).map_err(|reason| ObjectError::Corrupt { hash, reason })?;
        for (_, entry) in entries {
            match entry {
                Entry::Dir(subtree) => pending.push(subtree),
                Entry::Leaf(Leaf::File { hash: blob, .. }) => {
                    if !marked.contains(&blob)
                        && !found.contains(&blob)
                        && let Some(bytes) = objects.size_on_disk(&blob)
                    {
                        size += bytes;
                        found.insert(blob);
                    }
                }
                Entry::Leaf(_) => {}
            }
        }
    }
    Ok((found, size))
}

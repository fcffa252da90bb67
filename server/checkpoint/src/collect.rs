//! Collection: [`Checkpointer::collect`] keeps the newest checkpoints that fit a budget and
//! removes every object no kept checkpoint references.

use crate::error::CheckpointError;
use crate::{Checkpointer, Hash};

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
    /// always kept.
    pub fn collect(
        &mut self,
        roots_newest_first: &[Hash],
        budget_bytes: u64,
    ) -> Result<Collected, CheckpointError> {
        let _ = (roots_newest_first, budget_bytes);
        unimplemented!("API first: implemented in the next commit")
    }
}

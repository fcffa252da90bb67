//! What the agent last saw of each workspace file it read or wrote.
//!
//! A fold over `tool/result.seen` (what a call read or wrote: the file's content hash) and over
//! `workspace` notes (a change on disk the agent was told about: from then on it knows the new
//! content). The loop compares the files on disk with it before each step; a file whose hash
//! differs changed under the agent's feet. Incremental, like the loop's other folds.

use std::collections::BTreeMap;

use crate::event::{ChangeKind, Event, EventData};

/// The `source` of a note about files changed on disk.
pub const WORKSPACE_SOURCE: &str = "workspace";

/// The fold: path → the hash of the content the agent last saw (`None`: it knows the file is
/// gone or unreadable).
#[derive(Clone, Debug, Default)]
pub struct SeenFiles {
    files: BTreeMap<String, Option<String>>,
    next_seq: u64,
}

impl SeenFiles {
    /// Folds the events of `events` (a whole log, seq-ordered) not seen yet.
    pub fn advance(&mut self, events: &[Event]) {
        for event in crate::event::since(events, self.next_seq) {
            self.push(event);
        }
    }

    /// Folds one event.
    pub fn push(&mut self, event: &Event) {
        self.next_seq = event.seq + 1;
        match &event.data {
            EventData::ToolResult(result) => {
                for file in result.seen.iter().flatten() {
                    self.files.insert(file.path.clone(), file.sha256.clone());
                }
            }
            EventData::ContextMessage(note) if note.source.as_deref() == Some(WORKSPACE_SOURCE) => {
                for file in note.files.iter().flatten() {
                    let sha256 = match file.change {
                        ChangeKind::Deleted | ChangeKind::Replaced => None,
                        ChangeKind::Edited | ChangeKind::Added => file.sha256.clone(),
                    };
                    self.files.insert(file.path.clone(), sha256);
                }
            }
            _ => {}
        }
    }

    /// Every file the agent read or wrote, with what it last saw.
    pub fn files(&self) -> &BTreeMap<String, Option<String>> {
        &self.files
    }
}

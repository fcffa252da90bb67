//! What the model knows of the workspace's instruction files, under the `append` policy.
//!
//! The system prompt keeps the instruction files as they were when it was last rewritten; an
//! edit joins the conversation as a logged `context/message` (source `instructions`) whose
//! `instructions` field records every file as the model knows it once the note is read. This
//! fold says which record is current: the last note, while no later header event changed the
//! system prompt (a rewrite folds the files in and supersedes every note), and whether a
//! compaction since the last step rewrites the prefix anyway. Incremental, so a
//! loop advances it by the events appended since its last step, not over the whole log.

use crate::event::{Event, EventData, InstructionFile, SurfaceNode};
use crate::header::{EpochHeader, fold_header_event};

/// The `source` of an instructions note.
pub const INSTRUCTIONS_SOURCE: &str = "instructions";

/// The last instructions note that still stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Noted {
    /// Its seq (the surface node's id while it is on the surface).
    pub seq: u64,
    /// The files as the model knows them after reading it.
    pub files: Vec<InstructionFile>,
}

/// The fold; [`InstructionFold::advance`] it over the log as it grows.
#[derive(Clone, Debug, Default)]
pub struct InstructionFold {
    header: Option<EpochHeader>,
    noted: Option<Noted>,
    compacted: bool,
    next_seq: u64,
}

impl InstructionFold {
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
            EventData::RequestHeader(_) | EventData::RequestHeaderDelta(_) => {
                let before = self.header.as_ref().and_then(|header| header.system.clone());
                let _ = fold_header_event(&mut self.header, event);
                let after = self.header.as_ref().and_then(|header| header.system.as_ref());
                if before.as_ref() != after {
                    self.noted = None;
                }
            }
            EventData::ContextMessage(context)
                if context.source.as_deref() == Some(INSTRUCTIONS_SOURCE) =>
            {
                if let Some(files) = &context.instructions {
                    self.noted = Some(Noted { seq: event.seq, files: files.clone() });
                }
            }
            EventData::SurfaceReplace(replace)
                if matches!(replace.node, SurfaceNode::Summary { .. }) =>
            {
                self.compacted = true;
            }
            EventData::StepStart(_) => self.compacted = false,
            _ => {}
        }
    }

    /// Whether a compaction rewrote the surface since the last `step/start`: the next request's
    /// prefix is rewritten anyway.
    pub fn compacted_since_last_step(&self) -> bool {
        self.compacted
    }

    /// The note that says what the model knows, if one stands (`None`: the system prompt does).
    pub fn noted(&self) -> Option<&Noted> {
        self.noted.as_ref()
    }

    /// The folded header.
    pub fn header(&self) -> Option<&EpochHeader> {
        self.header.as_ref()
    }
}

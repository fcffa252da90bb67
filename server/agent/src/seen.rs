//! What the agent has seen of the workspace's files, and the note that tells it when one of them
//! changed on disk under its feet (an editor save, a `git checkout`).
//!
//! The log holds the hashes ([`SeenFiles`]: `tool/result.seen`, `workspace` notes); this memory
//! adds what is not model-visible and need not be logged: each file's metadata at its last
//! check (so an unchanged file is not hashed again) and the texts of small files (so a change is
//! shown as a diff). Both start empty in a new loop instance — every file the session read or
//! wrote is hashed at its first step, so changes made while the daemon was down are noticed; a
//! diff then needs the text, which a restart loses (the note says to read the file again).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::time::SystemTime;

use dsh_sandbox::beneath::Kind;
use dsh_session::{ChangeKind, ContextMessage, FileChange, FileSeen, SeenFiles, WORKSPACE_SOURCE};
use sha2::{Digest as _, Sha256};

use crate::tools::{SEEN_TEXT_CAP_BYTES, Seen, Workspace};

/// The most text kept for diffs, over all files.
const TEXTS_CAP_BYTES: usize = 16 * 1024 * 1024;
/// How old a file's modification time must be before its metadata vouches for its content.
const RACY: std::time::Duration = std::time::Duration::from_secs(2);
/// The longest diff a note shows for one file.
const NOTE_DIFF_CAP_BYTES: usize = 8 * 1024;

/// What identifies a file's content cheaply: checked before hashing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    len: u64,
    modified: Option<SystemTime>,
}

/// One file's state on disk now.
enum OnDisk {
    File {
        stat: Stat,
        sha256: String,
        text: Option<String>,
        bytes: u64,
    },
    Missing,
    /// Not a readable regular file inside the workspace; why, in words.
    Other(String),
}

/// The loop's memory of the files it read and wrote.
#[derive(Default)]
pub(crate) struct Memory {
    fold: SeenFiles,
    stats: HashMap<String, Stat>,
    /// Path → (sha256, text) of small text files, oldest first in `order`.
    texts: HashMap<String, (String, String)>,
    order: VecDeque<String>,
    text_bytes: usize,
}

impl Memory {
    /// Folds the log's events not seen yet.
    pub(crate) fn advance(&mut self, events: &[dsh_session::Event]) {
        self.fold.advance(events);
    }

    /// Records what a call read or wrote; returns it as the tool result logs it.
    pub(crate) fn record(&mut self, workspace: &Workspace, seen: &Seen) -> FileSeen {
        if let Some(text) = &seen.text {
            self.keep_text(&seen.path, &seen.sha256, text);
        }
        match stat(workspace, &seen.path) {
            Some(stat) => self.remember(seen.path.clone(), stat),
            None => {
                self.stats.remove(&seen.path);
            }
        }
        FileSeen { path: seen.path.clone(), sha256: Some(seen.sha256.clone()) }
    }

    /// After a command ran: the files it changed among those the agent knows, as the agent's
    /// own doing (logged with the command's result, never reported back to it as a change).
    pub(crate) fn after_command(&mut self, workspace: &Workspace) -> Vec<FileSeen> {
        self.changed_on_disk(workspace)
            .into_iter()
            .map(|(path, disk)| match disk {
                OnDisk::File { sha256, text, stat, .. } => {
                    if let Some(text) = text {
                        self.keep_text(&path, &sha256, &text);
                    }
                    self.remember(path.clone(), stat);
                    FileSeen { path, sha256: Some(sha256) }
                }
                OnDisk::Missing | OnDisk::Other(_) => {
                    self.stats.remove(&path);
                    FileSeen { path, sha256: None }
                }
            })
            .collect()
    }

    /// The note for the files that changed on disk since the agent last saw them, if any: one
    /// note for every change since the last step.
    pub(crate) fn note(&mut self, workspace: &Workspace) -> Option<ContextMessage> {
        let changed = self.changed_on_disk(workspace);
        if changed.is_empty() {
            return None;
        }
        let mut text = String::from(
            "Files you read or wrote changed on disk since you last saw them (not by you):",
        );
        let mut files = Vec::new();
        for (path, disk) in changed {
            let before = self.fold.files().get(&path).cloned().flatten();
            let old_text = before.as_ref().and_then(|sha| {
                self.texts.get(&path).filter(|(kept, _)| kept == sha).map(|(_, t)| t.clone())
            });
            match disk {
                OnDisk::File { stat, sha256, text: new_text, bytes } => {
                    let change =
                        if before.is_some() { ChangeKind::Edited } else { ChangeKind::Added };
                    let _ = write!(
                        text,
                        "\n\n{}",
                        describe_change(
                            &path,
                            change,
                            old_text.as_deref(),
                            new_text.as_deref(),
                            bytes
                        )
                    );
                    if let Some(new_text) = &new_text {
                        self.keep_text(&path, &sha256, new_text);
                    }
                    self.remember(path.clone(), stat);
                    files.push(FileChange { path, change, sha256: Some(sha256) });
                }
                OnDisk::Missing => {
                    let _ = write!(text, "\n\n{path} was deleted.");
                    self.stats.remove(&path);
                    files.push(FileChange { path, change: ChangeKind::Deleted, sha256: None });
                }
                OnDisk::Other(why) => {
                    let _ = write!(text, "\n\n{path} {why}; its content is not shown.");
                    self.stats.remove(&path);
                    files.push(FileChange { path, change: ChangeKind::Replaced, sha256: None });
                }
            }
        }
        Some(ContextMessage {
            text,
            source: Some(WORKSPACE_SOURCE.to_owned()),
            instructions: None,
            files: Some(files),
        })
    }

    /// The known files whose state on disk differs from what the agent last saw.
    fn changed_on_disk(&mut self, workspace: &Workspace) -> BTreeMap<String, OnDisk> {
        let mut changed = BTreeMap::new();
        let known: Vec<(String, Option<String>)> =
            self.fold.files().iter().map(|(path, sha)| (path.clone(), sha.clone())).collect();
        for (path, known_sha) in known {
            let disk = read_on_disk(workspace, &path, self.stats.get(&path).copied());
            let differs = match (&disk, &known_sha) {
                // Unchanged metadata: the content is what it was at the last check.
                (None, _) => false,
                (Some(OnDisk::File { sha256, stat, .. }), Some(known)) if sha256 == known => {
                    self.remember(path.clone(), *stat);
                    false
                }
                (Some(OnDisk::Missing | OnDisk::Other(_)), None) => false,
                (Some(_), _) => true,
            };
            if differs && let Some(disk) = disk {
                changed.insert(path, disk);
            }
        }
        changed
    }

    /// Remembers a file's metadata, so it is not hashed again while it stays the same — unless
    /// it was modified within the last [`RACY`]: a write in the same clock tick as the one the
    /// agent saw could keep length and time, so such a file is hashed again next time.
    fn remember(&mut self, path: String, stat: Stat) {
        let settled = stat.modified.is_some_and(|modified| {
            SystemTime::now().duration_since(modified).is_ok_and(|age| age >= RACY)
        });
        if settled {
            self.stats.insert(path, stat);
        } else {
            self.stats.remove(&path);
        }
    }

    fn keep_text(&mut self, path: &str, sha256: &str, text: &str) {
        if let Some((_, old)) = self.texts.remove(path) {
            self.text_bytes -= old.len();
            self.order.retain(|kept| kept != path);
        }
        self.texts.insert(path.to_owned(), (sha256.to_owned(), text.to_owned()));
        self.order.push_back(path.to_owned());
        self.text_bytes += text.len();
        while self.text_bytes > TEXTS_CAP_BYTES {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some((_, old)) = self.texts.remove(&oldest) {
                self.text_bytes -= old.len();
            }
        }
    }
}

/// The file's length and modification time, looked up beneath the workspace's handle.
fn stat(workspace: &Workspace, path: &str) -> Option<Stat> {
    let resolved = workspace.resolve(path).ok()?;
    let metadata = workspace.open_file(&resolved, path).ok()?.metadata().ok()?;
    Some(Stat { len: metadata.len(), modified: metadata.modified().ok() })
}

/// The file's state now; `None` when its metadata equals `last` (not read again). The file is
/// opened beneath the workspace's handle (a link swapped in cannot lead the read outside) and
/// without blocking; what is read is what was opened.
fn read_on_disk(workspace: &Workspace, path: &str, last: Option<Stat>) -> Option<OnDisk> {
    let resolved = match workspace.resolve(path) {
        Ok(resolved) => resolved,
        Err(_) => return Some(OnDisk::Other("now resolves outside the workspace".to_owned())),
    };
    match resolved.kind {
        None => return Some(OnDisk::Missing),
        Some(Kind::Dir) => return Some(OnDisk::Other("was replaced by a directory".to_owned())),
        Some(Kind::Other) => {
            return Some(OnDisk::Other("is no longer a regular file".to_owned()));
        }
        Some(Kind::File(_)) => {}
    }
    let unreadable = |error: std::io::Error| {
        Some(OnDisk::Other(format!("can no longer be read ({})", error.kind())))
    };
    let mut file = match workspace.open_file(&resolved, path) {
        Ok(file) => file,
        Err(_) => return Some(OnDisk::Other("is no longer a regular file".to_owned())),
    };
    let metadata = match file.metadata() {
        Ok(metadata) => metadata,
        Err(error) => return unreadable(error),
    };
    let now = Stat { len: metadata.len(), modified: metadata.modified().ok() };
    if last == Some(now) {
        return None;
    }
    if now.len > SEEN_TEXT_CAP_BYTES as u64 {
        // A large file is hashed as it streams, never held in memory.
        let mut hasher = Sha256::new();
        return match std::io::copy(&mut file, &mut hasher) {
            Ok(bytes) => {
                let sha256 = format!("{:x}", hasher.finalize());
                Some(OnDisk::File { stat: now, sha256, text: None, bytes })
            }
            Err(error) => unreadable(error),
        };
    }
    let mut bytes = Vec::new();
    match std::io::Read::read_to_end(&mut file, &mut bytes) {
        Ok(_) => {
            let sha256 = dsh_provider::sha256_hex(&bytes);
            let length = bytes.len() as u64;
            let text = if bytes.contains(&0) { None } else { String::from_utf8(bytes).ok() };
            Some(OnDisk::File { stat: now, sha256, text, bytes: length })
        }
        Err(error) => unreadable(error),
    }
}

/// One file's paragraph of the note.
fn describe_change(
    path: &str,
    change: ChangeKind,
    old: Option<&str>,
    new: Option<&str>,
    bytes: u64,
) -> String {
    match (change, old, new) {
        (ChangeKind::Added, _, Some(_)) => {
            format!("{path} was created again ({bytes} bytes); read it before relying on it.")
        }
        (_, Some(old), Some(new)) => {
            let diff = similar::TextDiff::from_lines(old, new)
                .unified_diff()
                .context_radius(2)
                .header(&format!("{path} (as you last saw it)"), &format!("{path} (now)"))
                .to_string();
            if diff.len() <= NOTE_DIFF_CAP_BYTES {
                format!("{path} was edited:\n\n{}", diff.trim_end())
            } else {
                format!(
                    "{path} was edited (a diff of {} bytes, too long to show here); read it again \
                     before relying on it.",
                    diff.len()
                )
            }
        }
        (_, _, None) => format!("{path} changed ({bytes} bytes now, not shown: binary or large)."),
        (_, None, Some(_)) => format!(
            "{path} changed ({bytes} bytes now); the version you saw is not at hand to compare, \
             so read it again before relying on it."
        ),
    }
}

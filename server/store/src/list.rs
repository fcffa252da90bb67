//! Session listing: one summary per log, computed by folding the log (there is no index to go
//! stale).

use std::path::{Path, PathBuf};

use dsh_session::{Event, EventData, ForkOrigin, Usage};

use crate::error::StoreError;
use crate::home::LOG_EXTENSION;
use crate::log::{TornTail, read_log};

/// The longest title, in characters.
pub const TITLE_MAX_CHARS: usize = 80;

/// What a session list shows about one session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSummary {
    /// The session id (from `session/meta`).
    pub id: String,
    /// Its workspace (from `session/meta`).
    pub workspace: String,
    /// Its log.
    pub path: PathBuf,
    /// The first prompt, on one line, at most [`TITLE_MAX_CHARS`] characters; `None` before the
    /// first prompt.
    pub title: Option<String>,
    /// Unix ms of `session/meta`.
    pub created_ms: u64,
    /// Unix ms of the last event.
    pub updated_ms: u64,
    /// Number of turns started.
    pub turns: u64,
    /// Number of steps started.
    pub steps: u64,
    /// Where it was forked from.
    pub forked_from: Option<ForkOrigin>,
    /// The parent of a sub-agent's session (`session/meta.parent`).
    pub parent: Option<dsh_session::ParentLink>,
    /// Usage of the last step that ended.
    pub last_usage: Option<Usage>,
    /// The profile and model of the latest request header, else of the pin in `session/meta`
    /// (`None` before the first request of a log from before pins; the profile is `None` in
    /// logs from before profiles).
    pub pinned: Option<(Option<String>, String)>,
    /// Usage summed per profile and model, over every step that ended.
    pub usage_by_model: Vec<(Option<String>, String, Usage)>,
    /// A torn tail the log currently has (a crash or a write in progress).
    pub torn: Option<TornTail>,
}

/// The sessions of one workspace: the summaries, and the logs that could not be read (one bad
/// log does not hide the others).
#[derive(Debug, Default)]
pub struct SessionListing {
    /// Summaries, sorted by id (generated ids sort by creation time).
    pub sessions: Vec<SessionSummary>,
    /// Logs that failed to read, with why.
    pub errors: Vec<(PathBuf, StoreError)>,
}

/// Summarizes a whole log (its events start with `session/meta`).
pub fn summarize(path: &Path, events: Vec<Event>, torn: Option<TornTail>) -> SessionSummary {
    let (id, workspace, forked_from, parent) = match events.first().map(|event| &event.data) {
        Some(EventData::SessionMeta(meta)) => (
            meta.session_id.clone(),
            meta.workspace.clone(),
            meta.forked_from.clone(),
            meta.parent.clone(),
        ),
        _ => (crate::live::session_id_of(path), String::new(), None, None),
    };
    let created_ms = events.first().map_or(0, |event| event.time);
    let updated_ms = events.last().map_or(0, |event| event.time);
    let title = events.iter().find_map(|event| match &event.data {
        EventData::UserMessage(message) => Some(title_of(&message.text)),
        _ => None,
    });
    let last_usage = events.iter().rev().find_map(|event| match &event.data {
        EventData::StepEnd(end) => Some(end.usage),
        _ => None,
    });
    // Counting is enough here: a full fold would project every message of the log. Only the
    // call config of the header is followed (who served each step, for its cost).
    let (mut turns, mut steps) = (0, 0);
    let mut pinned: Option<(Option<String>, String)> = None;
    let mut usage_by_model: Vec<(Option<String>, String, Usage)> = Vec::new();
    for event in &events {
        match &event.data {
            EventData::TurnStart(start) => turns = turns.max(start.turn),
            EventData::StepStart(start) => steps = steps.max(start.step),
            // What it was pinned to at creation, until a header says what a request used.
            EventData::SessionMeta(meta) => {
                if let Some(pin) = &meta.pin
                    && let Some(model) = &pin.model
                {
                    pinned = Some((pin.profile.clone(), model.clone()));
                }
            }
            EventData::RequestHeader(snapshot) => {
                let config = &snapshot.header.config;
                pinned = Some((config.profile.clone(), config.model.clone()));
            }
            EventData::RequestHeaderDelta(delta) => {
                if let Some(config) = &delta.config {
                    pinned = Some((config.profile.clone(), config.model.clone()));
                }
            }
            EventData::StepEnd(end) => {
                let Some((profile, model)) = &pinned else { continue };
                match usage_by_model.iter_mut().find(|(p, m, _)| p == profile && m == model) {
                    Some((_, _, sum)) => *sum = sum.add(&end.usage),
                    None => usage_by_model.push((profile.clone(), model.clone(), end.usage)),
                }
            }
            _ => {}
        }
    }
    SessionSummary {
        id,
        workspace,
        path: path.to_owned(),
        title,
        created_ms,
        updated_ms,
        turns,
        steps,
        forked_from,
        parent,
        last_usage,
        pinned,
        usage_by_model,
        torn,
    }
}

/// A prompt as a title: its first non-blank line, trimmed, cut to [`TITLE_MAX_CHARS`] characters
/// (the last one an ellipsis when cut).
pub fn title_of(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("");
    if line.chars().count() <= TITLE_MAX_CHARS {
        return line.to_owned();
    }
    let mut title: String = line.chars().take(TITLE_MAX_CHARS - 1).collect();
    title.truncate(title.trim_end().len());
    title.push('…');
    title
}

/// The session logs in `dir` (a workspace's `sessions` directory), sorted; missing means none.
pub(crate) fn session_logs_in(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(StoreError::Io {
                action: "listing sessions",
                path: dir.to_owned(),
                cause: source,
            });
        }
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| StoreError::Io {
            action: "listing sessions",
            path: dir.to_owned(),
            cause: source,
        })?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if !hidden && path.extension().is_some_and(|ext| ext == LOG_EXTENSION) {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// Lists the session logs in `dir` (a workspace's `sessions` directory; missing means empty).
pub(crate) fn list_sessions_in(dir: &Path) -> Result<SessionListing, StoreError> {
    let paths = session_logs_in(dir)?;
    let mut listing = SessionListing::default();
    for path in paths {
        match read_log(&path) {
            Ok(read) => listing.sessions.push(summarize(&path, read.events, read.torn)),
            Err(error) => listing.errors.push((path, error)),
        }
    }
    Ok(listing)
}

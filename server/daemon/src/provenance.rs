//! `workspace/provenance`: which agent step wrote each line of a workspace file.
//!
//! Every session log of the workspace is folded by `dsh_session::provenance` (the fold is
//! cached per log, keyed by its length and modification time, so a hover does not re-read
//! logs that did not change), each fold is aligned with the file's text as the caller has it
//! (`dsh_session::attribute`), and for each line the newest write wins across sessions. The
//! ranges are then named for people: the session's title, the turn's prompt, the step's model,
//! usage and cost.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use dsh_protocol::{ProvenanceRange, WorkspaceProvenanceParams, WorkspaceProvenanceResult};
use dsh_session::{Event, EventData, Origin, Provenance, UsageRow};

use crate::daemon::Daemon;
use crate::error::{ApiError, ApiResult};
use crate::views;

/// Files larger than this are not attributed (nor read).
pub const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;
/// Folds kept in the cache; past it the cache starts over.
const CACHE_ENTRIES: usize = 512;

/// One session log, folded for provenance.
struct Folded {
    len: u64,
    modified: Option<SystemTime>,
    id: String,
    title: Option<String>,
    provenance: Provenance,
    /// The first line of each turn's prompt.
    prompts: BTreeMap<u64, String>,
    rows: Vec<UsageRow>,
}

/// The folds of the logs asked about, by log path.
#[derive(Default)]
pub struct Cache {
    logs: Mutex<HashMap<PathBuf, Arc<Folded>>>,
}

impl Cache {
    /// The fold of the log at `path`, from the cache while the file is unchanged.
    fn folded(&self, path: &Path) -> Result<Arc<Folded>, String> {
        let metadata = std::fs::metadata(path).map_err(|error| error.to_string())?;
        let (len, modified) = (metadata.len(), metadata.modified().ok());
        let cached = self.lock().get(path).cloned();
        if let Some(folded) = cached.filter(|f| f.len == len && f.modified == modified) {
            return Ok(folded);
        }
        let read = dsh_store::read_log(path).map_err(|error| error.to_string())?;
        let folded = Arc::new(fold(path, &read.events, len, modified));
        let mut logs = self.lock();
        if logs.len() >= CACHE_ENTRIES {
            logs.clear();
        }
        logs.insert(path.to_owned(), Arc::clone(&folded));
        Ok(folded)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<Folded>>> {
        self.logs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn fold(path: &Path, events: &[Event], len: u64, modified: Option<SystemTime>) -> Folded {
    let mut prompts = BTreeMap::new();
    let mut turn = 0;
    let mut id = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    for event in events {
        match &event.data {
            EventData::SessionMeta(meta) => id.clone_from(&meta.session_id),
            EventData::TurnStart(start) => turn = start.turn,
            EventData::UserMessage(message) => {
                let first = message.text.lines().next().unwrap_or_default();
                prompts.entry(turn).or_insert_with(|| dsh_store::title_of(first));
            }
            _ => {}
        }
    }
    Folded {
        len,
        modified,
        title: prompts.values().next().cloned(),
        id,
        provenance: dsh_session::provenance(events),
        prompts,
        rows: dsh_session::usage_rows(events),
    }
}

/// `workspace/provenance`.
pub fn workspace_provenance(
    daemon: &Arc<Daemon>,
    params: WorkspaceProvenanceParams,
) -> ApiResult<WorkspaceProvenanceResult> {
    if !Path::new(&params.workspace).is_absolute() {
        return Err(ApiError::invalid_workspace("workspace must be an absolute path"));
    }
    let workspace = daemon
        .home()
        .workspace(Path::new(&params.workspace))
        .map_err(|error| ApiError::invalid_workspace(error.to_string()))?;
    let root = workspace.path().to_owned();
    let file = match Path::new(&params.path) {
        path if path.is_absolute() => path.to_owned(),
        path => root.join(path),
    };
    // An unsaved new file has no canonical path yet: its parent may have one.
    let file = file.canonicalize().unwrap_or_else(|_| {
        match (file.parent().and_then(|p| p.canonicalize().ok()), file.file_name()) {
            (Some(parent), Some(name)) => parent.join(name),
            _ => file.clone(),
        }
    });
    let skipped = |path: String, why: &str| WorkspaceProvenanceResult {
        path,
        lines: 0,
        ranges: Vec::new(),
        skipped: Some(why.to_owned()),
        errors: Vec::new(),
    };
    let Ok(relative) = file.strip_prefix(&root) else {
        return Ok(skipped(params.path, "outside the workspace"));
    };
    let relative: String = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    let text = match params.text {
        Some(text) => text,
        None => match read_text(&file) {
            Ok(text) => text,
            Err(why) => return Ok(skipped(relative, why)),
        },
    };
    if text.len() > MAX_FILE_BYTES {
        return Ok(skipped(relative, "larger than 4 MiB"));
    }
    if text.contains('\0') {
        return Ok(skipped(relative, "binary"));
    }
    let mut lines = text.split('\n').count();
    if text.ends_with('\n') || text.is_empty() {
        lines -= 1;
    }
    let logs = workspace.session_logs().map_err(|error| ApiError::store(error.to_string()))?;
    let mut errors = Vec::new();
    let mut best: Vec<Option<(Origin, Arc<Folded>)>> = vec![None; lines];
    for log in logs {
        let folded = match daemon.provenance.folded(&log) {
            Ok(folded) => folded,
            Err(error) => {
                errors.push(format!("{}: {error}", log.display()));
                continue;
            }
        };
        let Some(known) = folded.provenance.get(&relative) else { continue };
        // Bounded by the texts alone (`ALIGN_MAX_LINES`): the same lenses on every machine.
        let origins = dsh_session::attribute(known, &text);
        for (slot, origin) in best.iter_mut().zip(origins) {
            let Some(origin) = origin else { continue };
            // Newest write wins (a fork's copies of its parent's writes name no writer: the
            // fold leaves them to the parent); the same time, the older id.
            let newer = match slot {
                None => true,
                Some((held, session)) => {
                    origin.time > held.time || (origin.time == held.time && folded.id < session.id)
                }
            };
            if newer {
                *slot = Some((origin, Arc::clone(&folded)));
            }
        }
    }
    let config = daemon.config_for(&root).ok();
    let mut ranges: Vec<ProvenanceRange> = Vec::new();
    for (line, slot) in best.into_iter().enumerate() {
        let Some((origin, session)) = slot else { continue };
        if let Some(last) = ranges.last_mut()
            && last.end_line == line as u64
            && last.session_id == session.id
            && last.call_id == origin.call_id
        {
            last.end_line += 1;
            continue;
        }
        let row = session.rows.iter().find(|row| row.step == origin.step);
        let cost = row.and_then(|row| {
            let usage = row.usage?;
            let price =
                views::price_of(config.as_deref()?, row.profile.as_deref(), row.model.as_deref()?)?;
            Some(price.cost(&usage))
        });
        ranges.push(ProvenanceRange {
            start_line: line as u64,
            end_line: line as u64 + 1,
            session_id: session.id.clone(),
            title: session.title.clone(),
            turn: origin.turn,
            prompt: session.prompts.get(&origin.turn).cloned(),
            step: origin.step,
            step_seq: row.map(|row| row.seq),
            tool: origin.tool.clone(),
            call_id: origin.call_id.clone(),
            seq: origin.seq,
            time_ms: origin.time,
            profile: row.and_then(|row| row.profile.clone()),
            model: row.and_then(|row| row.model.clone()),
            usage: row.and_then(|row| row.usage),
            hit_percent: row.map_or(0.0, |row| row.hit_percent),
            cost,
        });
    }
    Ok(WorkspaceProvenanceResult {
        path: relative,
        lines: lines as u64,
        ranges,
        skipped: None,
        errors,
    })
}

/// The file's text, or why it is skipped.
fn read_text(path: &Path) -> Result<String, &'static str> {
    let metadata = std::fs::metadata(path).map_err(|_| "cannot be read")?;
    if !metadata.is_file() {
        return Err("not a regular file");
    }
    if metadata.len() > MAX_FILE_BYTES as u64 {
        return Err("larger than 4 MiB");
    }
    // Opened without blocking and checked again: it may have been swapped since the look above.
    let bytes = dsh_sandbox::beneath::read_regular(path, MAX_FILE_BYTES as u64)
        .map_err(|_| "cannot be read")?;
    String::from_utf8(bytes).map_err(|_| "binary")
}

//! The open documents and which agent step wrote each of their lines: the attribution is asked
//! of the daemon (`workspace/provenance`, on the editor's text, unsaved changes included) when
//! a hover or a code lens needs it, kept until the text or a log of the workspace changes, and
//! turned into hovers and code lenses.
//!
//! Code lenses the editor drew from an attribution that is no longer the current one are
//! refreshed (`workspace/codeLens/refresh`) by [`State::keep_current`], a task woken by what
//! makes an attribution stale — an edit of a shown document, a write or an edit by a followed
//! turn, a change of workspace folders — never by a timer: idle, it asks nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_protocol::method;
use dsh_protocol::{ProvenanceRange, WorkspaceProvenanceParams};
use serde_json::json;
use tower_lsp_server::ls_types::*;

use crate::server::{Inner, State, lock};
use crate::text;

/// Documents larger than this are not attributed: the request carries the text JSON-escaped,
/// and the daemon takes lines of at most 4 MiB (one escaped control character is 6 bytes).
const MAX_DOCUMENT_BYTES: usize = 512 * 1024;
/// The longest wait for the daemon's attribution of a document.
const ASK_TIMEOUT: Duration = Duration::from_secs(30);
/// How long what makes attribution stale must rest before the shown documents are asked again:
/// a burst (typing, a turn's writes) costs one round of questions.
const SETTLE: Duration = Duration::from_millis(200);

/// A file and the workspace folder it belongs to.
type Target = (PathBuf, PathBuf);

/// An open document.
pub(crate) struct Doc {
    /// The file and its workspace (`None`: outside every workspace, binary or huge: never
    /// attributed).
    target: Option<Target>,
    text: String,
    /// The attribution last asked for (`None`: never asked since the text or a log changed).
    ranges: Option<Arc<Vec<ProvenanceRange>>>,
    /// Whether the editor asked for its hovers or lenses: those are kept current.
    shown: bool,
    /// The attribution the editor's code lenses show: when it differs from the current one
    /// (the text or a log changed), the editor is asked to refresh them.
    pub(crate) lensed: Option<Arc<Vec<ProvenanceRange>>>,
}

impl Inner {
    /// The file and workspace of a document, when it is to be attributed.
    fn target_of(&self, uri: &Uri, text: &str) -> Option<Target> {
        if text.len() > MAX_DOCUMENT_BYTES || text.contains('\0') {
            return None;
        }
        let path = uri.to_file_path()?.into_owned();
        let path = path.canonicalize().unwrap_or(path);
        let workspace = self
            .folders
            .iter()
            .filter(|folder| path.starts_with(folder))
            .max_by_key(|folder| folder.as_os_str().len())?;
        Some((path, workspace.clone()))
    }

    /// Forgets every document's attribution (a log of the workspace says more now).
    pub(crate) fn forget_attribution(&mut self) {
        self.generation += 1;
        for doc in self.docs.values_mut() {
            doc.ranges = None;
        }
    }

    /// The shown documents whose attribution is to be asked again, with the text to ask about.
    fn unanswered(&self) -> Vec<(String, Target, String)> {
        let shown = self.docs.iter().filter(|(_, doc)| doc.shown && doc.ranges.is_none());
        shown
            .filter_map(|(uri, doc)| Some((uri.clone(), doc.target.clone()?, doc.text.clone())))
            .collect()
    }

    /// Keeps `ranges` as the attribution of `uri` if its text is still `text` and nothing made
    /// every attribution stale since it was asked (`generation`, read when it was).
    fn keep(&mut self, uri: &str, text: &str, generation: u64, ranges: &Arc<Vec<ProvenanceRange>>) {
        if let Some(doc) = self.docs.get_mut(uri)
            && doc.text == text
            && self.generation == generation
        {
            doc.ranges = Some(Arc::clone(ranges));
        }
    }

    /// Takes lenses drawn from an attribution that is not the current one as redrawn; whether
    /// there were any (the editor is then asked to refresh them, and re-asks).
    fn outdated_lenses(&mut self) -> bool {
        let mut outdated = false;
        for doc in self.docs.values_mut() {
            if let (Some(lensed), Some(ranges)) = (&doc.lensed, &doc.ranges)
                && lensed != ranges
            {
                doc.lensed = Some(Arc::clone(ranges));
                outdated = true;
            }
        }
        outdated
    }
}

impl State {
    /// `textDocument/didOpen`.
    pub(crate) fn open(&self, uri: Uri, text: String) {
        let mut inner = lock(&self.inner);
        let target = inner.target_of(&uri, &text);
        let doc = Doc { target, text, ranges: None, shown: false, lensed: None };
        inner.docs.insert(uri.as_str().to_owned(), doc);
    }

    /// `textDocument/didChange`: the new text is asked about at the next hover or lens, and
    /// shown lenses are refreshed once the edits settle.
    pub(crate) fn change(&self, uri: &Uri, text: String) {
        let mut inner = lock(&self.inner);
        let target = inner.target_of(uri, &text);
        if let Some(doc) = inner.docs.get_mut(uri.as_str()) {
            doc.target = target;
            doc.text = text;
            doc.ranges = None;
        }
        drop(inner);
        self.stale.notify_one();
    }

    /// `workspace/didChangeWorkspaceFolders`: documents may belong to another workspace now, or
    /// to none.
    pub(crate) fn change_folders(&self, added: Vec<PathBuf>, removed: &[PathBuf]) {
        let mut inner = lock(&self.inner);
        inner.generation += 1;
        inner.folders.retain(|folder| !removed.contains(folder));
        inner.folders.extend(added);
        let docs: Vec<(String, String)> =
            inner.docs.iter().map(|(uri, doc)| (uri.clone(), doc.text.clone())).collect();
        for (uri, text) in docs {
            let target = uri.parse::<Uri>().ok().and_then(|parsed| inner.target_of(&parsed, &text));
            if let Some(doc) = inner.docs.get_mut(&uri) {
                doc.target = target;
                doc.ranges = None;
            }
        }
        drop(inner);
        self.stale.notify_one();
    }

    /// A log of the workspace says more about some file: every attribution is asked again.
    pub(crate) fn logs_changed(&self) {
        lock(&self.inner).forget_attribution();
        self.stale.notify_one();
    }

    /// The attribution of an open document, asked of the daemon when the text changed since.
    pub(crate) async fn ranges(&self, uri: &Uri) -> Option<Arc<Vec<ProvenanceRange>>> {
        let (target, text, generation) = {
            let mut inner = lock(&self.inner);
            let generation = inner.generation;
            let doc = inner.docs.get_mut(uri.as_str())?;
            doc.shown = true;
            if let Some(ranges) = &doc.ranges {
                return Some(Arc::clone(ranges));
            }
            (doc.target.clone()?, doc.text.clone(), generation)
        };
        let ranges = Arc::new(self.ask(&target, &text).await?);
        lock(&self.inner).keep(uri.as_str(), &text, generation, &ranges);
        Some(ranges)
    }

    /// Asks the daemon for a file's attribution; `None` when it cannot answer (said once).
    async fn ask(&self, (path, workspace): &Target, text: &str) -> Option<Vec<ProvenanceRange>> {
        let params = WorkspaceProvenanceParams {
            workspace: workspace.display().to_string(),
            path: path.display().to_string(),
            text: Some(text.to_owned()),
        };
        let call = self.dsh.call::<method::WorkspaceProvenance>(params);
        let Ok(answer) = tokio::time::timeout(ASK_TIMEOUT, call).await else {
            tracing::warn!("provenance of {}: no answer in {ASK_TIMEOUT:?}", path.display());
            return None;
        };
        let result = match answer {
            Ok(result) => result,
            Err(failure) => {
                tracing::warn!("provenance of {}: {failure}", path.display());
                self.report(format!("dsh: cannot attribute {}: {failure}", path.display())).await;
                return None;
            }
        };
        for log_error in &result.errors {
            self.report(format!("dsh: a session log cannot be read: {log_error}")).await;
        }
        Some(result.ranges)
    }

    /// Shows a warning once per distinct message.
    async fn report(&self, message: String) {
        if lock(&self.inner).reported.insert(message.clone()) {
            self.lsp.show_message(MessageType::WARNING, message).await;
        }
    }

    /// The task that keeps shown documents current: woken ([`State::stale`]) when a text or a
    /// log changed, it lets the changes settle, asks again the attribution of the shown
    /// documents that have none, and refreshes the code lenses that changed.
    pub(crate) async fn keep_current(self: Arc<Self>) {
        loop {
            self.stale.notified().await;
            loop {
                // Cancel-safety: both branches are cancel-safe; a wake-up restarts the wait.
                tokio::select! {
                    () = self.stale.notified() => {}
                    () = tokio::time::sleep(SETTLE) => break,
                }
            }
            let (unanswered, generation) = {
                let inner = lock(&self.inner);
                (inner.unanswered(), inner.generation)
            };
            for (uri, target, text) in unanswered {
                if let Some(ranges) = self.ask(&target, &text).await {
                    lock(&self.inner).keep(&uri, &text, generation, &Arc::new(ranges));
                }
            }
            if lock(&self.inner).outdated_lenses() {
                self.refresh().await;
            }
        }
    }

    /// Asks the editor to re-ask code lenses (when it can be asked).
    pub(crate) async fn refresh(&self) {
        if lock(&self.inner).capabilities.code_lens_refresh
            && let Err(failure) = self.lsp.code_lens_refresh().await
        {
            tracing::debug!("workspace/codeLens/refresh: {failure}");
        }
    }
}

/// The hover of `line`, when an agent step wrote it.
pub(crate) fn hover(ranges: &[ProvenanceRange], line: u32, links: bool) -> Option<Hover> {
    let at = u64::from(line);
    let range = ranges.iter().find(|r| r.start_line <= at && at < r.end_line)?;
    Some(Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value: text::hover(range, links),
        }),
        range: Some(Range {
            start: Position { line: range.start_line as u32, character: 0 },
            end: Position { line: range.end_line as u32, character: 0 },
        }),
    })
}

/// A code lens above each agent hunk, opening what the model saw at its step.
pub(crate) fn lenses(ranges: &[ProvenanceRange]) -> Vec<CodeLens> {
    ranges
        .iter()
        .map(|range| {
            let line = range.start_line as u32;
            CodeLens {
                range: Range {
                    start: Position { line, character: 0 },
                    end: Position { line, character: 0 },
                },
                command: Some(Command {
                    title: text::lens(range),
                    command: "dsh.saw".to_owned(),
                    arguments: Some(vec![
                        json!({"sessionId": range.session_id, "step": range.step}),
                    ]),
                }),
                data: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;

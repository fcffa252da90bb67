//! Provenance: which agent tool call wrote each line of a workspace file.
//!
//! [`provenance`] folds a session log into, per workspace file, the lines as the agent's
//! `write_file` and `edit_file` calls left them, each with the [`Origin`] of the call that
//! produced it, carried forward through the session's later edits of the same file. The log
//! holds each call's arguments (the written content, the replaced and replacing strings) and
//! its result (the path as resolved, the line of an edit), and nothing else about the file: the
//! fold derives the content purely from those, applied to the previous known content. A file
//! the agent edits without having written it is known only around its edits: the rest of its
//! lines are [`Fit::Unknown`], and the edges of an edit whose surroundings are unknown are
//! partial lines ([`Fit::Suffix`], [`Fit::Prefix`], [`Fit::Inner`]). Whole lines an edit's
//! strings share at either end are context the model repeated: they keep their writer. The
//! results read are the file tools' own (`server/agent/src/tools/files.rs`: `created PATH (`,
//! `wrote PATH (`, `edited PATH (… at line N)`); `tests/api/provenance.rs` runs the real tools.
//!
//! [`attribute`] aligns a file's folded lines with its current text, the way `git blame`
//! carries lines across revisions: a line diff (Myers) maps every folded line that still stands
//! to its line now, so lines changed since (by the user, a command, a formatter) lose their
//! attribution and shifted or surrounding lines keep theirs. Partial lines are then placed in
//! the gaps between the lines the diff matched.
//!
//! Lines are the pieces of the text split at `\n` (a final newline leaves an empty last
//! piece, which no caller shows). Pure: the daemon reads the logs and the file.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::event::{Event, EventData};
use crate::message::ToolCall;

/// The tool call that wrote a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The seq of the call's `tool/result`.
    pub seq: u64,
    /// Unix ms of that result (newest wins across sessions).
    pub time: u64,
    /// The step whose message asked for the call.
    pub step: u64,
    /// The turn of that step.
    pub turn: u64,
    /// The call id.
    pub call_id: String,
    /// `write_file` or `edit_file`.
    pub tool: String,
}

/// How much of a folded line's text is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// The whole line.
    Exact,
    /// Its end: the line ends with the text (what preceded the edit on that line is unknown).
    Suffix,
    /// Its start: the line starts with the text.
    Prefix,
    /// A part: the line contains the text.
    Inner,
    /// Nothing (a line of the file the agent never wrote or saw replaced).
    Unknown,
}

/// One line of a file as the fold knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// The known text (empty for [`Fit::Unknown`]).
    pub text: String,
    /// How much of the line `text` is.
    pub fit: Fit,
    /// The call that wrote it; `None` for lines that were there before the agent touched them.
    pub origin: Option<Origin>,
}

impl Line {
    fn exact(text: &str, origin: Option<Origin>) -> Self {
        Line { text: text.to_owned(), fit: Fit::Exact, origin }
    }

    fn unknown() -> Self {
        Line { text: String::new(), fit: Fit::Unknown, origin: None }
    }

    /// Whether `current`, a line of the file now, can be this line.
    fn fits(&self, current: &str) -> bool {
        match self.fit {
            Fit::Exact => current == self.text,
            Fit::Suffix => current.ends_with(&self.text),
            Fit::Prefix => current.starts_with(&self.text),
            Fit::Inner => current.contains(&self.text),
            Fit::Unknown => false,
        }
    }

    /// Whether the line can anchor a placement (a partial line with no text fits anything).
    fn anchors(&self) -> bool {
        self.fit == Fit::Exact || (self.fit != Fit::Unknown && !self.text.is_empty())
    }
}

/// One file as the fold knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileLines {
    /// The lines, in order (`text.split('\n')`).
    pub lines: Vec<Line>,
    /// Whether `lines` are the whole file exactly (after a `write_file`, until an edit the
    /// fold could not place exactly).
    pub complete: bool,
}

/// Per workspace file (the path as the tool's result printed it: relative to the workspace,
/// `/`-separated), the lines as the session's agent left them.
pub type Provenance = BTreeMap<String, FileLines>;

#[derive(Deserialize)]
struct WriteArgs {
    content: String,
}

#[derive(Deserialize)]
struct EditArgs {
    old_string: String,
    new_string: String,
}

/// Folds a session log into the lines its agent wrote, per file. Total: calls that failed,
/// arguments that do not parse and results in another form are skipped. A fork's copies of its
/// parent's events (`seq` below `session/meta.forkedFrom.seq`) shape the text but name no
/// writer: those lines are the parent's, whose own log attributes them.
pub fn provenance(events: &[Event]) -> Provenance {
    let mut files = own_provenance(events);
    let cut = match events.first().map(|event| &event.data) {
        Some(EventData::SessionMeta(meta)) => meta.forked_from.as_ref().map_or(0, |fork| fork.seq),
        _ => 0,
    };
    for line in files.values_mut().flat_map(|file| file.lines.iter_mut()) {
        if line.origin.as_ref().is_some_and(|origin| origin.seq < cut) {
            line.origin = None;
        }
    }
    files
}

fn own_provenance(events: &[Event]) -> Provenance {
    let mut files = Provenance::new();
    let mut calls: BTreeMap<&str, &ToolCall> = BTreeMap::new();
    let mut turns: BTreeMap<u64, u64> = BTreeMap::new();
    let mut steps_of_calls: BTreeMap<&str, u64> = BTreeMap::new();
    for event in events {
        match &event.data {
            EventData::StepStart(start) => {
                turns.insert(start.step, start.turn);
            }
            EventData::AssistantMessage(turn) => {
                for call in &turn.message.tool_calls {
                    calls.insert(&call.id, call);
                    steps_of_calls.insert(&call.id, turn.step);
                }
            }
            EventData::ToolResult(result) if !result.is_error => {
                let Some(call) = calls.get(result.call_id.as_str()) else { continue };
                let step = steps_of_calls.get(result.call_id.as_str()).copied().unwrap_or(0);
                let origin = Origin {
                    seq: event.seq,
                    time: event.time,
                    step,
                    turn: turns.get(&step).copied().unwrap_or(0),
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                };
                apply_call(&mut files, call, &result.content, origin);
            }
            _ => {}
        }
    }
    files
}

fn apply_call(files: &mut Provenance, call: &ToolCall, result: &str, origin: Origin) {
    match call.name.as_str() {
        "write_file" => {
            let Ok(args) = serde_json::from_str::<WriteArgs>(&call.arguments) else { return };
            let Some((path, _)) = written_path(result) else { return };
            let lines = args.content.split('\n').map(|l| Line::exact(l, Some(origin.clone())));
            files.insert(path.to_owned(), FileLines { lines: lines.collect(), complete: true });
        }
        "edit_file" => {
            let Ok(args) = serde_json::from_str::<EditArgs>(&call.arguments) else { return };
            let Some(rest) = result.strip_prefix("edited ") else { return };
            let Some((path, detail)) = rest.rsplit_once(" (") else { return };
            let at_line = detail
                .rsplit_once("at line ")
                .and_then(|(_, n)| n.trim_end_matches(')').parse::<usize>().ok())
                .unwrap_or(1);
            let file = files.entry(path.to_owned()).or_default();
            edit(file, &args.old_string, &args.new_string, at_line, origin);
        }
        _ => {}
    }
}

/// The path of a `write_file` result (`created PATH (N bytes)`, `wrote PATH (N bytes)`).
fn written_path(result: &str) -> Option<(&str, &str)> {
    let rest = result.strip_prefix("created ").or_else(|| result.strip_prefix("wrote "))?;
    rest.rsplit_once(" (")
}

/// Applies one `edit_file` to what the fold knows of the file. `at_line` is the 1-based line
/// of the file where the tool found `old`.
fn edit(file: &mut FileLines, old: &str, new: &str, at_line: usize, origin: Origin) {
    // Whole lines `old` and `new` share at either end are context the model repeated, not
    // lines it wrote: they keep their writer (as `git blame` sees it).
    let (head, tail) = shared_lines(old, new);
    let (old_core, new_core) = (&old[head..old.len() - tail], &new[head..new.len() - tail]);
    let at_core = at_line + old[..head].matches('\n').count();
    if file.complete {
        let text = file.lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>().join("\n");
        let mut found = text.match_indices(old);
        if let (Some((at, _)), None) = (found.next(), found.next()) {
            splice_exact(file, &text, at + head, old_core, new_core, origin);
            return;
        }
    }
    splice_placed(file, old_core, new_core, at_core, origin);
    file.complete = false;
}

/// The byte lengths of the whole lines `old` and `new` share at their start and at their end
/// (not overlapping).
fn shared_lines(old: &str, new: &str) -> (usize, usize) {
    let mut head = 0;
    for (i, (a, b)) in old.bytes().zip(new.bytes()).enumerate() {
        if a != b {
            break;
        }
        if a == b'\n' {
            head = i + 1;
        }
    }
    let (old_rest, new_rest) = (&old.as_bytes()[head..], &new.as_bytes()[head..]);
    let mut tail = 0;
    for (i, (a, b)) in old_rest.iter().rev().zip(new_rest.iter().rev()).enumerate() {
        if a != b {
            break;
        }
        // A shared run of whole lines starts just after a newline in both (or at their start).
        let (old_at, new_at) = (old_rest.len() - i - 1, new_rest.len() - i - 1);
        let starts_line = |rest: &[u8], at: usize| at == 0 || rest[at - 1] == b'\n';
        if starts_line(old_rest, old_at) && starts_line(new_rest, new_at) {
            tail = i + 1;
        }
    }
    (head, tail)
}

/// The edit where the fold knows the whole text: `old` found once at byte `at`.
fn splice_exact(file: &mut FileLines, text: &str, at: usize, old: &str, new: &str, o: Origin) {
    let start = text[..at].matches('\n').count();
    let old_lines = old.matches('\n').count() + 1;
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = at + old.len();
    let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
    let head = Edge { text: text[line_start..at].to_owned(), whole: true };
    let tail = Edge { text: text[end..line_end].to_owned(), whole: true };
    let first = file.lines[start].origin.clone();
    let last = file.lines[start + old_lines - 1].origin.clone();
    let region = region(head, new, tail, first, last, &o);
    file.lines.splice(start..start + old_lines, region);
}

/// What an edit's edge line keeps of the text around the replaced string: `text`, which is
/// all of it when `whole`, else only its part next to the edit.
struct Edge {
    text: String,
    whole: bool,
}

impl Edge {
    fn unknown() -> Edge {
        Edge { text: String::new(), whole: false }
    }
}

/// The edit where the fold does not know the whole file (or the log's idea of it is stale: the
/// file changed outside the agent): `old`'s lines are located among the known lines by an
/// in-order matching, else at `at_line`.
fn splice_placed(file: &mut FileLines, old: &str, new: &str, at_line: usize, o: Origin) {
    let segments: Vec<&str> = old.split('\n').collect();
    let k = segments.len() - 1;
    let wanted: Vec<Line> = segments
        .iter()
        .enumerate()
        .map(|(j, text)| {
            let fit = match (j == 0, j == k) {
                (true, true) => Fit::Inner,
                (true, false) => Fit::Suffix,
                (false, true) => Fit::Prefix,
                (false, false) => Fit::Exact,
            };
            Line { text: (*text).to_owned(), fit, origin: None }
        })
        .collect();
    let pairs = match_in_order(&wanted, &file.lines);
    // `old` and `new` both end at a line's start (whole lines replaced, or deleted from a line
    // start): the line after them is untouched, whatever the fold knows of it.
    let ends_at_line_start =
        segments[k].is_empty() && new.rsplit('\n').next().is_some_and(str::is_empty);
    let (Some(&(j_first, s_first)), Some(&(j_last, s_last))) = (pairs.first(), pairs.last()) else {
        let start = at_line.saturating_sub(1);
        let covered = if ends_at_line_start { k } else { k + 1 };
        let mut region = region(Edge::unknown(), new, Edge::unknown(), None, None, &o);
        if ends_at_line_start {
            region.pop();
        }
        let known = file.lines.iter().skip(start).take(covered).any(|l| l.fit != Fit::Unknown);
        if known {
            // None of `old`'s lines is among the known ones, yet known lines stand where the
            // tool found it: the file changed outside the agent. The edit's lines go in
            // before them; the alignment sorts out the rest.
            let start = start.min(file.lines.len());
            file.lines.splice(start..start, region);
        } else {
            while file.lines.len() < start + covered {
                file.lines.push(Line::unknown());
            }
            file.lines.splice(start..start + covered, region);
        }
        return;
    };
    // The known lines `old` covers are those matched, and the edge lines only when they are
    // known to be its edges (lines of `old` that match nothing may be lines the user inserted:
    // no known line is taken for them).
    let head_line = if j_first == 0 {
        Some(s_first)
    } else if j_first == 1 && segments[0].is_empty() && s_first > 0 {
        Some(s_first - 1)
    } else {
        None
    };
    let tail_line = if j_last == k {
        Some(s_last)
    } else if j_last + 1 == k && segments[k].is_empty() && s_last + 1 < file.lines.len() {
        Some(s_last + 1)
    } else {
        None
    };
    let start = head_line.unwrap_or(s_first);
    let end = tail_line.unwrap_or(s_last);
    let (head, tail) = edges(&file.lines[start], &file.lines[end], &segments, old);
    let head = if head_line.is_some() { head } else { Edge::unknown() };
    let first = head_line.and_then(|i| file.lines[i].origin.clone());
    let whole_lines = ends_at_line_start && (new.contains('\n') || head.text.is_empty());
    // Only the lines known to be `old`'s are replaced: a known line between them that matched
    // nothing may stand elsewhere in the file by now (the fold's picture is stale), so it stays.
    let mut replaced: Vec<usize> = pairs.iter().map(|&(_, s)| s).collect();
    replaced.extend(head_line);
    let region = if whole_lines && j_last + 1 == k {
        let mut region =
            region(head, new, Edge { text: String::new(), whole: true }, first, None, &o);
        region.pop();
        region
    } else {
        let tail = if tail_line.is_some() { tail } else { Edge::unknown() };
        replaced.extend(tail_line);
        let last = tail_line.and_then(|i| file.lines[i].origin.clone());
        region(head, new, tail, first, last, &o)
    };
    let end = replaced.iter().copied().max().unwrap_or(end);
    let kept: Vec<Line> =
        (start..=end).filter(|i| !replaced.contains(i)).map(|i| file.lines[i].clone()).collect();
    file.lines.splice(start..=end, region.into_iter().chain(kept));
}

/// What the first and last replaced lines keep around `old` (its `segments`), as far as their
/// known text tells.
fn edges(first: &Line, last: &Line, segments: &[&str], old: &str) -> (Edge, Edge) {
    let k = segments.len() - 1;
    let starts_known = matches!(first.fit, Fit::Exact | Fit::Prefix);
    let ends_known = matches!(last.fit, Fit::Exact | Fit::Suffix);
    if k == 0 {
        // One line: the text around the only occurrence of `old` in the known part.
        if first.fit == Fit::Unknown || first.text.matches(old).count() != 1 {
            return (Edge::unknown(), Edge::unknown());
        }
        let Some(at) = first.text.find(old) else { return (Edge::unknown(), Edge::unknown()) };
        let head = Edge { text: first.text[..at].to_owned(), whole: starts_known };
        let tail = Edge { text: first.text[at + old.len()..].to_owned(), whole: ends_known };
        return (head, tail);
    }
    let head = match first.fit {
        Fit::Exact | Fit::Suffix => first
            .text
            .strip_suffix(segments[0])
            .map(|text| Edge { text: text.to_owned(), whole: first.fit == Fit::Exact }),
        _ => None,
    };
    let tail = match last.fit {
        Fit::Exact | Fit::Prefix => last
            .text
            .strip_prefix(segments[k])
            .map(|text| Edge { text: text.to_owned(), whole: last.fit == Fit::Exact }),
        _ => None,
    };
    (head.unwrap_or_else(Edge::unknown), tail.unwrap_or_else(Edge::unknown))
}

/// The lines an edit leaves: `head` + `new` + `tail` split into lines (a partly known head or
/// tail makes the edge lines partial). A line holding at least one character of `new` (its
/// newline counts) is the edit's; the edge lines that hold none keep the origin they had.
fn region(
    head: Edge,
    new: &str,
    tail: Edge,
    first: Option<Origin>,
    last: Option<Origin>,
    origin: &Origin,
) -> Vec<Line> {
    let segments: Vec<&str> = new.split('\n').collect();
    let m = segments.len() - 1;
    let whole = Edge { text: String::new(), whole: true };
    let mut lines = Vec::with_capacity(segments.len());
    for (i, segment) in segments.iter().enumerate() {
        let before = if i == 0 { &head } else { &whole };
        let after = if i == m { &tail } else { &whole };
        let text = format!("{}{segment}{}", before.text, after.text);
        let fit = match (before.whole, after.whole) {
            _ if text.is_empty() && !(before.whole && after.whole) => Fit::Unknown,
            (true, true) => Fit::Exact,
            (false, true) => Fit::Suffix,
            (true, false) => Fit::Prefix,
            (false, false) => Fit::Inner,
        };
        let written = i < m || !segment.is_empty();
        let origin = if written {
            Some(origin.clone())
        } else if i == 0 && !head.text.is_empty() {
            first.clone()
        } else {
            // The line is what followed the replaced text.
            last.clone()
        };
        lines.push(Line { text, fit, origin });
    }
    lines
}

/// Whether a line of `old` (`wanted`, with the fit its place in `old` gives it) can be the
/// folded line `line`, as far as both are known.
fn compatible(wanted: &Line, line: &Line) -> bool {
    if !wanted.anchors() || !line.anchors() {
        return false;
    }
    let (w, l) = (wanted.text.as_str(), line.text.as_str());
    match (wanted.fit, line.fit) {
        (Fit::Exact, Fit::Exact) => w == l,
        (Fit::Exact, Fit::Suffix) => w.ends_with(l),
        (Fit::Exact, Fit::Prefix) => w.starts_with(l),
        (Fit::Exact, _) => w.contains(l),
        (_, Fit::Exact) => wanted.fits(l),
        _ => w.contains(l) || l.contains(w),
    }
}

/// An in-order matching of `wanted` lines onto `lines` (a longest common subsequence under
/// [`compatible`]): pairs `(wanted index, line index)`.
fn match_in_order(wanted: &[Line], lines: &[Line]) -> Vec<(usize, usize)> {
    let (n, m) = (wanted.len(), lines.len());
    // Bounded: old strings are short; the table is n × m small integers.
    if n.saturating_mul(m) > 4_000_000 {
        return Vec::new();
    }
    let mut table = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            table[at(i, j)] = if compatible(&wanted[i], &lines[j]) {
                table[at(i + 1, j + 1)] + 1
            } else {
                table[at(i + 1, j)].max(table[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut pairs = Vec::new();
    while i < n && j < m {
        if compatible(&wanted[i], &lines[j]) && table[at(i, j)] == table[at(i + 1, j + 1)] + 1 {
            pairs.push((i, j));
            i += 1;
            j += 1;
        } else if table[at(i + 1, j)] >= table[at(i, j + 1)] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

/// The most lines (both sides together) the exact line diff aligns in one piece: Myers' diff
/// costs up to the square of this, so this bounds attribution's work by the text alone — the
/// same answer on every machine. Larger pieces are cut at lines found exactly once on both
/// sides (the anchors of a patience diff) and each piece between is aligned the same way; a
/// piece that is still too large, with no such line in it, is left unaligned (its lines lose
/// their attribution rather than get a wrong one).
pub const ALIGN_MAX_LINES: usize = 4096;

/// Aligns what the fold knows of a file with its current text: for each line of `current`
/// (`current.split('\n')`), the origin of the folded line it still is, if any. The alignment is
/// a function of the two texts alone, bounded by [`ALIGN_MAX_LINES`].
pub fn attribute(file: &FileLines, current: &str) -> Vec<Option<Origin>> {
    let now: Vec<&str> = current.split('\n').collect();
    let folded: Vec<Key> = file
        .lines
        .iter()
        .enumerate()
        .map(|(i, l)| if l.fit == Fit::Exact { Key::Line(&l.text) } else { Key::Never(i) })
        .collect();
    let keys: Vec<Key> = now.iter().map(|l| Key::Line(l)).collect();
    let mut matched: Vec<Option<usize>> = vec![None; file.lines.len()];
    let mut taken = vec![false; now.len()];
    for (old_index, new_index) in align(&folded, &keys) {
        matched[old_index] = Some(new_index);
        taken[new_index] = true;
    }
    // Partial lines: placed in order in the gap between the lines matched around them.
    let mut floor = 0;
    for i in 0..file.lines.len() {
        if let Some(at) = matched[i] {
            floor = at + 1;
            continue;
        }
        let line = &file.lines[i];
        if line.fit == Fit::Exact || !line.anchors() {
            continue;
        }
        let ceiling = matched[i + 1..].iter().flatten().next().copied().unwrap_or(now.len());
        if let Some(at) = (floor..ceiling).find(|&at| !taken[at] && line.fits(now[at])) {
            matched[i] = Some(at);
            taken[at] = true;
            floor = at + 1;
        }
    }
    // Moved lines, and lines of an edit the fold placed in a stale picture of the file: a line
    // still unmatched is placed where exactly one line left can be it.
    for (i, line) in file.lines.iter().enumerate() {
        if matched[i].is_some() || !line.anchors() {
            continue;
        }
        let mut fitting = (0..now.len()).filter(|&at| !taken[at] && line.fits(now[at]));
        if let (Some(at), None) = (fitting.next(), fitting.next()) {
            matched[i] = Some(at);
            taken[at] = true;
        }
    }
    let mut origins = vec![None; now.len()];
    for (line, at) in file.lines.iter().zip(matched) {
        if let Some(at) = at {
            origins[at] = line.origin.clone();
        }
    }
    origins
}

/// A line as the alignment compares it: a folded line the fold is not sure of never equals any.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key<'a> {
    Line(&'a str),
    Never(usize),
}

/// The pairs `(old index, new index)` of equal lines in a longest-common-subsequence-like
/// alignment of `old` and `new`, in increasing order on both sides: the exact line diff for
/// pieces up to [`ALIGN_MAX_LINES`], patience anchors to cut larger ones.
fn align(old: &[Key], new: &[Key]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    // Pieces still to align, as (old start, old end, new start, new end): a work list rather
    // than recursion, so no input can make the stack deep.
    let mut pieces = vec![(0, old.len(), 0, new.len())];
    while let Some((old_start, old_end, new_start, new_end)) = pieces.pop() {
        let (old_piece, new_piece) = (&old[old_start..old_end], &new[new_start..new_end]);
        // The lines both ends share, as every diff would pair them.
        let prefix = old_piece.iter().zip(new_piece).take_while(|(a, b)| a == b).count();
        let suffix = old_piece[prefix..]
            .iter()
            .rev()
            .zip(new_piece[prefix..].iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        pairs.extend((0..prefix).map(|d| (old_start + d, new_start + d)));
        pairs.extend((1..=suffix).map(|d| (old_end - d, new_end - d)));
        let (old_from, old_to) = (old_start + prefix, old_end - suffix);
        let (new_from, new_to) = (new_start + prefix, new_end - suffix);
        if old_from == old_to || new_from == new_to {
            continue;
        }
        let (old_mid, new_mid) = (&old[old_from..old_to], &new[new_from..new_to]);
        if old_mid.len() + new_mid.len() <= ALIGN_MAX_LINES {
            for op in similar::capture_diff_slices(similar::Algorithm::Myers, old_mid, new_mid) {
                if let similar::DiffOp::Equal { old_index, new_index, len } = op {
                    pairs.extend(
                        (0..len).map(|d| (old_from + old_index + d, new_from + new_index + d)),
                    );
                }
            }
            continue;
        }
        // Too large to diff: cut at the anchors; an anchorless piece stays unaligned.
        let (mut old_cut, mut new_cut) = (old_from, new_from);
        for (old_anchor, new_anchor) in unique_anchors(old_mid, new_mid) {
            let (old_anchor, new_anchor) = (old_from + old_anchor, new_from + new_anchor);
            pairs.push((old_anchor, new_anchor));
            pieces.push((old_cut, old_anchor, new_cut, new_anchor));
            (old_cut, new_cut) = (old_anchor + 1, new_anchor + 1);
        }
        if old_cut != old_from {
            pieces.push((old_cut, old_to, new_cut, new_to));
        }
    }
    pairs.sort_unstable();
    pairs
}

/// The lines found exactly once in `old` and once in `new`, as `(old index, new index)`, the
/// longest run of them in the same order on both sides (patience diff's anchors).
fn unique_anchors(old: &[Key], new: &[Key]) -> Vec<(usize, usize)> {
    let mut seen: BTreeMap<&Key, (usize, usize, usize, usize)> = BTreeMap::new();
    for (i, key) in old.iter().enumerate() {
        let entry = seen.entry(key).or_insert((0, i, 0, 0));
        entry.0 += 1;
    }
    for (j, key) in new.iter().enumerate() {
        if let Some(entry) = seen.get_mut(key) {
            entry.2 += 1;
            entry.3 = j;
        }
    }
    let mut unique: Vec<(usize, usize)> = seen
        .values()
        .filter(|(in_old, _, in_new, _)| *in_old == 1 && *in_new == 1)
        .map(|&(_, i, _, j)| (i, j))
        .collect();
    unique.sort_unstable();
    longest_increasing(&unique)
}

/// The longest subsequence of `pairs` (sorted by their first index) increasing in the second.
fn longest_increasing(pairs: &[(usize, usize)]) -> Vec<(usize, usize)> {
    // tails[k]: index into `pairs` of the smallest tail of an increasing run of length k + 1.
    let mut tails: Vec<usize> = Vec::new();
    let mut previous: Vec<Option<usize>> = vec![None; pairs.len()];
    for (index, &(_, second)) in pairs.iter().enumerate() {
        let length = tails.partition_point(|&tail| pairs[tail].1 < second);
        previous[index] = length.checked_sub(1).map(|k| tails[k]);
        if length == tails.len() {
            tails.push(index);
        } else {
            tails[length] = index;
        }
    }
    let mut run = Vec::with_capacity(tails.len());
    let mut at = tails.last().copied();
    while let Some(index) = at {
        run.push(pairs[index]);
        at = previous[index];
    }
    run.reverse();
    run
}

#[cfg(test)]
mod tests;

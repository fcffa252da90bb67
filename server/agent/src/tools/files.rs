//! The file tools: `read_file`, `list_dir`, `write_file` and `edit_file`.
//!
//! Each takes its parsed arguments and returns the model-facing text, or an error message.
//! Paths are confined by [`Workspace::resolve`], and opened beneath the workspace's handle.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read as _};
use std::sync::Arc;

use dsh_sandbox::beneath::Kind;
use dsh_session::{ImageFormat, MAX_IMAGE_BYTES, pixel_size, sniff};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::workspace::{Resolved, Workspace};
use super::{FileImage, SEEN_TEXT_CAP_BYTES, Seen, ToolConfig};

/// Longest line `read_file` shows in full, in bytes; longer lines are cut with a note.
const READ_MAX_LINE_BYTES: usize = 2_000;

/// Most entries `list_dir` returns.
const LIST_MAX_ENTRIES: usize = 1_000;

/// Reads one line into `line`, keeping at most [`READ_MAX_LINE_BYTES`] + 1 bytes of it (enough
/// to show it cut) and skipping the rest, so a huge file without newlines never sits in memory.
/// Returns how many bytes the line had, its `\n` excluded (`None` at the end of the file), and
/// whether it had a NUL byte anywhere.
fn read_line_bounded(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
) -> io::Result<(Option<usize>, bool)> {
    let mut consumed = 0;
    let mut binary = false;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(((consumed > 0).then_some(consumed), binary));
        }
        let (part, done) = match chunk.iter().position(|byte| *byte == b'\n') {
            Some(end) => (&chunk[..=end], true),
            None => (chunk, false),
        };
        binary |= part.contains(&0);
        let room = (READ_MAX_LINE_BYTES + 1).saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
        let used = part.len();
        reader.consume(used);
        consumed += used;
        if done {
            return Ok((Some(consumed - 1), binary));
        }
    }
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadFileArgs {
    path: String,
    #[serde(default)]
    start_line: Option<u64>,
    #[serde(default)]
    end_line: Option<u64>,
}

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListDirArgs {
    #[serde(default)]
    path: Option<String>,
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteFileArgs {
    path: String,
    content: String,
}

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EditFileArgs {
    path: String,
    old_string: String,
    new_string: String,
}

/// Resolves a path that must name an existing regular file.
fn existing_file(workspace: &Workspace, argument: &str) -> Result<Resolved, String> {
    let resolved = workspace.resolve(argument).map_err(|error| error.to_string())?;
    match resolved.kind {
        None => Err(format!("file `{argument}` not found")),
        Some(Kind::Dir) => {
            Err(format!("`{argument}` is a directory, not a file; use list_dir to list it"))
        }
        // A FIFO or device would block or never end.
        Some(Kind::Other) => Err(format!("`{argument}` is not a regular file")),
        Some(Kind::File(_)) => Ok(resolved),
    }
}

fn io_error(action: &str, argument: &str, error: &io::Error) -> String {
    format!("cannot {action} `{argument}`: {error}")
}

/// What `read_file` read.
pub(super) enum Read {
    /// A text file: its numbered lines.
    Text(String, Seen),
    /// An image, by its magic bytes (the line range is not looked at).
    Image(FileImage, Seen),
}

/// How many bytes of a file are looked at to tell an image (its signature and header).
const IMAGE_HEAD_BYTES: usize = 32;

/// How many bytes of an image over the limit are kept to read its pixel size from.
const IMAGE_HEADER_KEPT: usize = 64 * 1024;

/// `read_file`: numbered lines of a text file, within a line range and the line cap; an
/// image file (by its magic bytes, never its name) as a [`FileImage`].
pub(super) fn read_file(
    workspace: &Workspace,
    config: &ToolConfig,
    args: ReadFileArgs,
) -> Result<Read, String> {
    let start = args.start_line.unwrap_or(1);
    if start == 0 {
        return Err("start_line must be at least 1 (lines are numbered from 1)".to_owned());
    }
    if let Some(end) = args.end_line
        && end < start
    {
        return Err(format!("end_line {end} is before start_line {start}"));
    }
    let resolved = existing_file(workspace, &args.path)?;
    let mut file = workspace.open_file(&resolved, &args.path).map_err(|error| error.to_string())?;
    let mut head = Vec::with_capacity(IMAGE_HEAD_BYTES);
    (&mut file)
        .take(IMAGE_HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|error| io_error("read", &args.path, &error))?;
    let path = workspace.display(&resolved.path);
    if let Some(format) = sniff(&head) {
        return read_image(Tee::new(io::Cursor::new(head).chain(file)), format, path, &args.path);
    }
    let file = io::Cursor::new(head).chain(file);
    let cap = u64::try_from(config.read_cap_lines.max(1)).unwrap_or(u64::MAX);
    let wanted_end = args.end_line.unwrap_or(u64::MAX);
    let shown_end = wanted_end.min(start.saturating_add(cap - 1));

    // Stream the file: the whole of it is scanned (for the line count, for NUL bytes and for
    // its hash: what the agent has seen of it), but only the shown lines are kept.
    let mut reader = BufReader::new(Tee::new(file));
    let mut line = Vec::new();
    let mut total: u64 = 0;
    let mut last_shown: u64 = 0;
    let mut output = String::new();
    loop {
        line.clear();
        let (read, binary) = read_line_bounded(&mut reader, &mut line)
            .map_err(|error| io_error("read", &args.path, &error))?;
        let Some(line_bytes) = read else { break };
        if binary {
            return Err(format!(
                "`{}` looks like a binary file (it contains NUL bytes); read_file only reads text files",
                args.path
            ));
        }
        total += 1;
        if (start..=shown_end).contains(&total) {
            push_numbered_line(&mut output, total, &line, line_bytes);
            last_shown = total;
        }
    }

    let seen = reader.into_inner().seen(path);
    if total == 0 {
        return if start == 1 {
            Ok(Read::Text("(empty file)".to_owned(), seen))
        } else {
            Err(format!("start_line {start} is past the end of the file, which is empty"))
        };
    }
    if start > total {
        return Err(format!(
            "start_line {start} is past the end of the file, which has {total} lines"
        ));
    }
    let range_end = wanted_end.min(total);
    if last_shown < range_end {
        let _ = write!(
            output,
            "\n[showing lines {start}-{last_shown} of {total}; cut at {cap} lines per call; \
             call read_file with start_line={} to read on]",
            last_shown + 1
        );
    } else if start > 1 || last_shown < total {
        let _ = write!(output, "\n[showing lines {start}-{last_shown} of {total}]");
    }
    Ok(Read::Text(output, seen))
}

/// The rest of `read_file` for an image of `format` read through `tee` (from its first
/// byte): its bytes when they are within [`MAX_IMAGE_BYTES`], else only its size, hash and
/// pixel size (read from its first bytes).
fn read_image<R: io::Read>(
    mut tee: Tee<R>,
    format: ImageFormat,
    path: String,
    argument: &str,
) -> Result<Read, String> {
    let mut bytes = Vec::new();
    (&mut tee)
        .take(MAX_IMAGE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| io_error("read", argument, &error))?;
    let mut size = bytes.len() as u64;
    let within = size <= MAX_IMAGE_BYTES;
    if !within {
        // Hashed to its end (what the agent has seen of it), its header kept.
        size += io::copy(&mut tee, &mut io::sink())
            .map_err(|error| io_error("read", argument, &error))?;
        bytes.truncate(IMAGE_HEADER_KEPT);
    }
    let pixels = pixel_size(format, &bytes);
    // An image's bytes are never a text a later change is diffed against.
    let seen = Seen { text: None, ..tee.seen(path.clone()) };
    let bytes = within.then(|| Arc::<[u8]>::from(bytes));
    Ok(Read::Image(FileImage { path, format, size, pixels, bytes }, seen))
}

/// A reader that hashes everything read through it and keeps it while it is small: what the
/// agent has seen of a file.
struct Tee<R> {
    inner: R,
    hasher: Sha256,
    kept: Option<Vec<u8>>,
}

impl<R> Tee<R> {
    fn new(inner: R) -> Self {
        Tee { inner, hasher: Sha256::new(), kept: Some(Vec::new()) }
    }

    fn seen(self, path: String) -> Seen {
        let text = self.kept.and_then(|bytes| String::from_utf8(bytes).ok());
        Seen { path, sha256: format!("{:x}", self.hasher.finalize()), text }
    }
}

impl<R: io::Read> io::Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.hasher.update(&buf[..read]);
        if let Some(kept) = &mut self.kept {
            if kept.len() + read > SEEN_TEXT_CAP_BYTES {
                self.kept = None;
            } else {
                kept.extend_from_slice(&buf[..read]);
            }
        }
        Ok(read)
    }
}

/// What the agent knows of a file it wrote.
fn written(path: String, content: &str) -> Seen {
    let text = (content.len() <= SEEN_TEXT_CAP_BYTES).then(|| content.to_owned());
    Seen { path, sha256: dsh_provider::sha256_hex(content.as_bytes()), text }
}

/// `line` holds at most [`READ_MAX_LINE_BYTES`] + 1 bytes of a line `line_bytes` long (its
/// `\n` excluded).
fn push_numbered_line(output: &mut String, number: u64, line: &[u8], line_bytes: usize) {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (line, line_bytes) = match line.strip_suffix(b"\r") {
        Some(stripped) => (stripped, line_bytes.saturating_sub(1)),
        None => (line, line_bytes),
    };
    let (shown, cut) = if line.len() > READ_MAX_LINE_BYTES {
        (&line[..READ_MAX_LINE_BYTES], true)
    } else {
        (line, false)
    };
    let _ = write!(output, "{number:>6}\t{}", String::from_utf8_lossy(shown));
    if cut {
        let _ = write!(output, " [line cut: {} of {line_bytes} bytes shown]", shown.len());
    }
    output.push('\n');
}

/// `list_dir`: the sorted entries of a directory.
pub(super) fn list_dir(
    workspace: &Workspace,
    config: &ToolConfig,
    args: ListDirArgs,
) -> Result<String, String> {
    let argument = args.path.unwrap_or_else(|| ".".to_owned());
    let resolved = workspace.resolve(&argument).map_err(|error| error.to_string())?;
    match resolved.kind {
        None => return Err(format!("directory `{argument}` not found")),
        Some(Kind::Dir) => {}
        Some(_) => {
            return Err(format!(
                "`{argument}` is a file, not a directory; use read_file to read it"
            ));
        }
    }
    let listed = workspace.list(&resolved, &argument).map_err(|error| error.to_string())?;
    let mut entries = Vec::new();
    for entry in listed {
        let name = entry.name.to_string_lossy().into_owned();
        let path = resolved.path.join(&entry.name);
        if name == ".git" || workspace.beneath().hidden_at(&path).is_some() {
            continue;
        }
        // Entry types are not followed through symlinks, so a link is listed as a link and
        // its target is never looked at.
        let suffix = if entry.is_dir {
            "/"
        } else if entry.is_symlink {
            "@"
        } else {
            ""
        };
        entries.push(format!("{name}{suffix}"));
    }
    if entries.is_empty() {
        return Ok("(empty directory)".to_owned());
    }
    entries.sort();
    Ok(capped_lines(&entries, LIST_MAX_ENTRIES, config.output_cap_bytes, |shown, total| {
        format!(
            "[showing {shown} of {total} entries; list a subdirectory, or use glob to narrow down]"
        )
    }))
}

/// Joins lines, stopping at `max_lines` lines or `max_bytes` bytes, whichever comes first, and
/// then appending `note(shown, total)`.
pub(super) fn capped_lines(
    lines: &[String],
    max_lines: usize,
    max_bytes: usize,
    note: impl FnOnce(usize, usize) -> String,
) -> String {
    let mut output = String::new();
    let mut shown = 0;
    for line in lines.iter().take(max_lines) {
        if !output.is_empty() && output.len() + line.len() + 1 > max_bytes {
            break;
        }
        output.push_str(line);
        output.push('\n');
        shown += 1;
    }
    if shown < lines.len() {
        output.push_str(&note(shown, lines.len()));
    } else {
        output.pop();
    }
    output
}

/// `write_file`: creates or replaces a file, creating missing parent directories.
pub(super) fn write_file(
    workspace: &Workspace,
    args: WriteFileArgs,
) -> Result<(String, Seen), String> {
    let resolved = workspace.resolve(&args.path).map_err(|error| error.to_string())?;
    match resolved.kind {
        Some(Kind::Dir) => {
            return Err(format!("`{}` is a directory; cannot write it as a file", args.path));
        }
        Some(Kind::Other) => {
            return Err(format!("`{}` is not a regular file; cannot write it", args.path));
        }
        Some(Kind::File(_)) | None => {}
    }
    let existed = workspace
        .write(&resolved, &args.path, args.content.as_bytes())
        .map_err(|error| format!("cannot write `{}`: {error}", args.path))?;
    // The provenance fold (`dsh_session::provenance`) reads this result's verb and path.
    let verb = if existed { "wrote" } else { "created" };
    let path = workspace.display(&resolved.path);
    let output = format!("{verb} {path} ({} bytes)", args.content.len());
    Ok((output, written(path, &args.content)))
}

/// `edit_file`: replaces the single occurrence of `old_string` with `new_string`.
pub(super) fn edit_file(
    workspace: &Workspace,
    args: EditFileArgs,
) -> Result<(String, Seen), String> {
    if args.old_string.is_empty() {
        return Err("old_string is empty; to create or overwrite a file use write_file".to_owned());
    }
    if args.old_string == args.new_string {
        return Err("old_string and new_string are identical; nothing to change".to_owned());
    }
    let resolved = existing_file(workspace, &args.path)?;
    let text = read_text(workspace, &resolved, &args.path)?;
    let (count, first) = occurrences(&text, &args.old_string);
    let Some(first) = first else {
        return Err(format!(
            "old_string not found in `{}`; it must match the file exactly, including whitespace \
             and indentation (read the file again to copy the exact text)",
            args.path
        ));
    };
    if count > 1 {
        return Err(format!(
            "old_string occurs {count} times in `{}`; it must occur exactly once, so include \
             more surrounding lines to make it unique",
            args.path
        ));
    }
    let mut edited =
        String::with_capacity(text.len() - args.old_string.len() + args.new_string.len());
    edited.push_str(&text[..first]);
    edited.push_str(&args.new_string);
    edited.push_str(&text[first + args.old_string.len()..]);
    workspace
        .write(&resolved, &args.path, edited.as_bytes())
        .map_err(|error| format!("cannot write `{}`: {error}", args.path))?;
    // The provenance fold (`dsh_session::provenance`) reads this result's path and line.
    let line = text[..first].matches('\n').count() + 1;
    let path = workspace.display(&resolved.path);
    let output = format!("edited {path} (1 replacement at line {line})");
    Ok((output, written(path, &edited)))
}

/// The largest file `edit_file` edits (it holds the file twice in memory).
const EDIT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

fn read_text(workspace: &Workspace, resolved: &Resolved, argument: &str) -> Result<String, String> {
    let mut bytes = Vec::new();
    workspace
        .open_file(resolved, argument)
        .map_err(|error| error.to_string())?
        .take(EDIT_MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| io_error("read", argument, &error))?;
    if bytes.len() as u64 > EDIT_MAX_FILE_BYTES {
        return Err(format!(
            "`{argument}` is larger than {} MiB; edit_file does not edit files that large",
            EDIT_MAX_FILE_BYTES / 1024 / 1024
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        format!("`{argument}` is not valid UTF-8 text; edit_file only edits text files")
    })
}

/// Counts occurrences of `needle` in `haystack`, overlapping ones included (in `aaa`, `aa`
/// occurs twice: a replacement would be ambiguous), and returns the first one's byte offset.
fn occurrences(haystack: &str, needle: &str) -> (usize, Option<usize>) {
    let mut count = 0;
    let mut first = None;
    let mut from = 0;
    while let Some(offset) = haystack[from..].find(needle) {
        let at = from + offset;
        count += 1;
        first.get_or_insert(at);
        // Step past the first character of this match, staying on a char boundary.
        from = at + haystack[at..].chars().next().map_or(1, char::len_utf8);
    }
    (count, first)
}

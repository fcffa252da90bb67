//! The system prompt assembly, rendered every step and compared by value.
//!
//! Sections, in order: the built-in base prompt (stable text: no clock, no ids, nothing that
//! changes per step or per host), the instruction files ([`InstructionSources`]: the user's
//! global `AGENTS.md`, the workspace's `AGENTS.md` — `AGENTS.override.md` before it,
//! `CLAUDE.md` after it — then `.dsh/instructions.md`, when present; nested ones once the
//! prompt is rewritten after the agent worked under them), and a configuration section (the
//! workspace root and the command sandbox's policy, in words). An edited instruction
//! file changes the rendered text, so the next step logs a header delta — never a silent change.
//! What the model should know about time enters the conversation as a logged `context/message`
//! instead (see [`date_context`]), appended, so it costs only the tail of the prompt cache.

use std::fmt::Write as _;
use std::path::Path;

use dsh_sandbox::beneath::Beneath;
use dsh_session::{ChangeKind, FileChange, InstructionFile};

/// The built-in base prompt. Changing this text changes every session's cached prefix.
pub const BASE_PROMPT: &str = "\
You are dsh, a coding agent working inside one workspace (a directory on the user's machine).
Use the tools to look before you change anything: read files, list directories, search with grep and glob.
Make focused changes with edit_file (exact replacement) or write_file, and check them with run_command when the workspace has tests or a build.
Every path is relative to the workspace root; paths outside the workspace are refused.
When you are done, answer briefly: what you changed and what you verified.";

/// What an edit of an instruction file does to the next request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InstructionPolicy {
    /// The system prompt keeps the files as they were at its last rewrite; the edit joins the
    /// conversation as a logged note (a diff), so the cached prefix holds. Any rewrite of the
    /// prefix that happens anyway (compaction, another header change) folds the files back in.
    #[default]
    Append,
    /// The system prompt is rewritten with the edited file: a logged header delta, and the
    /// provider's cache from the system prompt on is lost.
    Rewrite,
}

/// Instruction files read from the workspace root, in order.
pub const INSTRUCTION_FILES: &[&str] = &["AGENTS.md", ".dsh/instructions.md"];

/// The names a directory's agent instructions go by, in order of precedence: a configured
/// `AGENTS.md` (at the root, or a nested one) is read from the first of these present.
pub const AGENTS_NAMES: &[&str] = &["AGENTS.override.md", "AGENTS.md", "CLAUDE.md"];

/// The largest instruction file read; longer files are cut with a note.
const INSTRUCTION_CAP_BYTES: usize = 64 * 1024;

/// The most instruction text in all (the global file, the workspace's, the nested ones, in that
/// order): the files past it are cut, or left out, with a note.
pub const INSTRUCTIONS_TOTAL_CAP_BYTES: usize = 128 * 1024;

/// Where the instruction files come from: the user's global file, the configured files of the
/// workspace root and the nested `AGENTS.md` of the directories the agent worked in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstructionSources {
    /// The user's global file (`AGENTS.md` beside the user's configuration file), if any.
    pub global: Option<std::path::PathBuf>,
    /// The configured files, relative to the workspace root.
    pub files: Vec<String>,
    /// Directories (relative, `/`-separated) whose own agent instructions apply: the nested
    /// ones, sorted.
    pub nested: Vec<String>,
}

impl InstructionSources {
    /// The workspace's configured `files` alone.
    pub fn workspace<S: AsRef<str>>(files: &[S]) -> InstructionSources {
        InstructionSources {
            files: files.iter().map(|name| name.as_ref().to_owned()).collect(),
            ..InstructionSources::default()
        }
    }

    /// Each source's candidate names, in order: the first present of a group is read.
    fn groups(&self) -> Vec<Vec<String>> {
        let mut groups = Vec::new();
        if let Some(global) = &self.global {
            groups.push(vec![global.display().to_string()]);
        }
        for name in &self.files {
            match name.strip_suffix("AGENTS.md").filter(|dir| dir.is_empty() || dir.ends_with('/'))
            {
                Some(dir) => groups.push(agents_names_in(dir.trim_end_matches('/'))),
                None => groups.push(vec![name.clone()]),
            }
        }
        for dir in &self.nested {
            groups.push(agents_names_in(dir));
        }
        groups
    }

    /// Every name a section of a prompt rendered from these sources may carry, in order.
    pub fn names(&self) -> Vec<String> {
        self.groups().into_iter().flatten().collect()
    }
}

/// The agent-instruction names of directory `dir` (relative; empty: the root).
fn agents_names_in(dir: &str) -> Vec<String> {
    AGENTS_NAMES
        .iter()
        .map(|name| if dir.is_empty() { (*name).to_owned() } else { format!("{dir}/{name}") })
        .collect()
}

/// The directories (relative, sorted) holding agent instructions of their own among the
/// ancestors of `touched` (paths the agent's tools read or wrote), the root excluded: read
/// through the workspace's handle, so a nested file that is a link out of the workspace, or in
/// a hidden directory, is never found.
pub fn nested_instruction_dirs<'a>(
    beneath: &Beneath,
    touched: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    let mut dirs = std::collections::BTreeSet::new();
    for path in touched {
        let mut dir = Path::new(path.as_str()).parent();
        while let Some(current) = dir.filter(|d| !d.as_os_str().is_empty()) {
            dirs.insert(current.to_string_lossy().into_owned());
            dir = current.parent();
        }
    }
    dirs.into_iter()
        .filter(|dir| {
            agents_names_in(dir).iter().any(|name| beneath.open_file(Path::new(name)).is_ok())
        })
        .collect()
}

/// The instruction `files` present in `workspace`, in order, as the system prompt renders them.
pub fn read_instructions<S: AsRef<str>>(workspace: &Path, files: &[S]) -> Vec<InstructionFile> {
    match Beneath::open(workspace, Vec::new()) {
        Ok(beneath) => read_instructions_beneath(&beneath, files),
        Err(_) => Vec::new(),
    }
}

/// [`read_instructions`] through a workspace's handle, whose hidden paths are never read: a
/// workspace's configuration naming `.ssh/id_ed25519` as an instruction file gets nothing.
pub fn read_instructions_beneath<S: AsRef<str>>(
    beneath: &Beneath,
    files: &[S],
) -> Vec<InstructionFile> {
    read_instruction_sources(beneath, &InstructionSources::workspace(files))
}

/// The instruction files of `sources` present now, in order, each group's first present one,
/// within the per-file and total caps (a cut is said in the text).
pub fn read_instruction_sources(
    beneath: &Beneath,
    sources: &InstructionSources,
) -> Vec<InstructionFile> {
    let global = sources.global.as_ref().map(|path| path.display().to_string());
    let mut total = 0usize;
    let mut out = Vec::new();
    for group in sources.groups() {
        let found = group.iter().find_map(|name| {
            let text = if Some(name) == global.as_ref() {
                read_global_file(Path::new(name))?
            } else {
                read_instruction_file(beneath, name)?
            };
            Some((name, text))
        });
        let Some((name, text)) = found else { continue };
        // A file that writes a section heading of its own would make the prompt's sections
        // ambiguous: its heading gets a word joiner, so each prompt splits one way only.
        let mut text = text.trim_end().replace(SECTION_HEADING, ESCAPED_HEADING);
        let room = INSTRUCTIONS_TOTAL_CAP_BYTES.saturating_sub(total);
        if text.len() > room {
            let mut cut = room;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str(TOTAL_CUT_NOTE);
        }
        total += text.len();
        out.push(InstructionFile { name: name.clone(), text });
    }
    out
}

/// Ends a file cut by the total cap.
const TOTAL_CUT_NOTE: &str = "\n[... instruction files cut: they exceed 128 KiB in all ...]";

/// Renders the system prompt for `workspace` (the canonical root) with the given instruction
/// texts (from [`read_instructions`], or as the model knows them), whose commands run as
/// `sandbox` says (the sandbox's own description: policy, reach, network — part of the header,
/// so a policy change is a logged header change).
pub fn render_system_prompt(
    workspace: &Path,
    instructions: &[InstructionFile],
    sandbox: &str,
) -> String {
    let mut sections = vec![BASE_PROMPT.to_owned()];
    for file in instructions {
        sections.push(format!("{}{}", section_head(&file.name), file.text));
    }
    sections.push(configuration_section(workspace, sandbox));
    sections.join("\n\n")
}

/// How an instruction file's section starts.
const SECTION_HEADING: &str = "# Workspace instructions (";
/// The same inside a file's text (U+2060 WORD JOINER before the parenthesis).
const ESCAPED_HEADING: &str = "# Workspace instructions\u{2060} (";

fn section_head(name: &str) -> String {
    format!("{SECTION_HEADING}{name})\n\n")
}

fn configuration_section(workspace: &Path, sandbox: &str) -> String {
    format!("# Configuration\n\nWorkspace root: {}\n\n{sandbox}", workspace.display())
}

/// The instruction texts a rendered `system` prompt holds, for the instruction `files` it was
/// rendered with, and the prompt rendered again with `sandbox` as it is now. `None` when the
/// prompt was not rendered from those files (another base prompt, another list of files) or
/// when its sections cannot be told apart unambiguously: then the caller rewrites the prompt.
pub fn instructions_in<S: AsRef<str>>(
    system: &str,
    workspace: &Path,
    files: &[S],
    sandbox: &str,
) -> Option<(Vec<InstructionFile>, String)> {
    let rest = system.strip_prefix(BASE_PROMPT)?;
    let configuration = rest.rfind("\n\n# Configuration\n\n")?;
    let mut middle = &rest[..configuration];
    let names: Vec<&str> = files.iter().map(AsRef::as_ref).collect();
    let heads: Vec<String> =
        names.iter().map(|name| format!("\n\n{}", section_head(name))).collect();
    let mut found = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let Some(after) = middle.strip_prefix(heads[index].as_str()) else { continue };
        let end = heads[index + 1..]
            .iter()
            .filter_map(|head| after.find(head.as_str()))
            .min()
            .unwrap_or(after.len());
        found.push(InstructionFile { name: (*name).to_owned(), text: after[..end].to_owned() });
        middle = &after[end..];
    }
    // Every byte accounted for; no text holds a heading (a prompt from before headings in files
    // were escaped could split another way).
    let ambiguous = found.iter().any(|file| file.text.contains(SECTION_HEADING));
    if !middle.is_empty() || ambiguous {
        return None;
    }
    let sections: String =
        found.iter().map(|file| format!("\n\n{}{}", section_head(&file.name), file.text)).collect();
    if format!("{BASE_PROMPT}{sections}{}", &rest[configuration..]) != system {
        return None;
    }
    let kept = render_system_prompt(workspace, &found, sandbox);
    Some((found, kept))
}

/// The longest instructions note that shows a diff; past it the note carries the whole text.
const NOTE_DIFF_CAP_BYTES: usize = 16 * 1024;

/// The model-visible text of the note that tells the model its instruction files changed from
/// `known` (what it was told: the system prompt or an earlier note) to `current`, and the files
/// it is about.
pub fn instructions_note(
    known: &[InstructionFile],
    current: &[InstructionFile],
) -> (String, Vec<FileChange>) {
    let mut out = String::from(
        "The workspace instructions changed since the system prompt was written. What follows \
         replaces the system prompt's text for the files named.",
    );
    let mut files = Vec::new();
    let mut changed = |path: &str, change: ChangeKind| {
        files.push(FileChange { path: path.to_owned(), change, sha256: None });
    };
    for file in current {
        match known.iter().find(|old| old.name == file.name) {
            Some(old) if old.text == file.text => {}
            Some(old) => {
                changed(&file.name, ChangeKind::Edited);
                let diff = similar::TextDiff::from_lines(&old.text, &file.text)
                    .unified_diff()
                    .context_radius(2)
                    .header(
                        &format!("{} (as you were told)", file.name),
                        &format!("{} (now)", file.name),
                    )
                    .to_string();
                if diff.len() <= NOTE_DIFF_CAP_BYTES && diff.len() < file.text.len() {
                    let _ = write!(out, "\n\n{} was edited:\n\n{}", file.name, diff.trim_end());
                } else {
                    let _ = write!(out, "\n\n{} now reads:\n\n{}", file.name, file.text);
                }
            }
            None => {
                changed(&file.name, ChangeKind::Added);
                match nested_dir(&file.name) {
                    Some(dir) => {
                        let _ = write!(
                            out,
                            "\n\n{} holds the instructions for the files under {dir}/ (you \
                             worked there); it reads:\n\n{}",
                            file.name, file.text
                        );
                    }
                    None => {
                        let _ =
                            write!(out, "\n\n{} was added; it reads:\n\n{}", file.name, file.text);
                    }
                }
            }
        }
    }
    for old in known.iter().filter(|old| !current.iter().any(|file| file.name == old.name)) {
        changed(&old.name, ChangeKind::Deleted);
        let _ = write!(out, "\n\n{} was deleted: its instructions no longer apply.", old.name);
    }
    (out, files)
}

/// The user's global instruction file: the user's own, so read by its path (a link is
/// followed), but only a regular file (a FIFO is not waited on).
fn read_global_file(path: &Path) -> Option<String> {
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    read_capped_text(std::fs::File::open(path).ok()?)
}

/// The directory of a nested agent-instructions file (`sub/AGENTS.md` → `sub`), `None` for any
/// other name.
fn nested_dir(name: &str) -> Option<&str> {
    let (dir, file) = name.rsplit_once('/')?;
    (AGENTS_NAMES.contains(&file) && !dir.is_empty() && !name.starts_with('/')).then_some(dir)
}

fn read_instruction_file(beneath: &Beneath, name: &str) -> Option<String> {
    // Opened beneath the workspace's handle: an instruction file that is (or is raced into)
    // a symlink out of the workspace, or into a hidden path, is not read — the model must
    // never see such a file through the system prompt either — and a FIFO or device is not
    // waited on.
    read_capped_text(beneath.open_file(Path::new(name)).ok()?)
}

/// A file's text within the per-file cap (a cut is said in the text).
fn read_capped_text(file: std::fs::File) -> Option<String> {
    let mut bytes = Vec::new();
    let cap = u64::try_from(INSTRUCTION_CAP_BYTES).unwrap_or(u64::MAX).saturating_add(4);
    std::io::Read::read_to_end(&mut std::io::Read::take(file, cap), &mut bytes).ok()?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if text.len() > INSTRUCTION_CAP_BYTES {
        let mut cut = INSTRUCTION_CAP_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n[... instruction file cut at 64 KiB ...]");
    }
    Some(text)
}

/// The text of the `context/message` that tells the model today's date (`YYYY-MM-DD`).
pub fn date_context(date: &str) -> String {
    format!("Today's date is {date}.")
}

/// The date as `YYYY-MM-DD` on the calendar of the machine the daemon runs on (its local time
/// zone, `TZ` or `/etc/localtime`), from unix milliseconds: a user in UTC−8 is not told
/// tomorrow's date every evening. Falls back to UTC when the time cannot be placed.
pub fn local_date(unix_ms: u64) -> String {
    use chrono::TimeZone as _;
    let millis = i64::try_from(unix_ms).unwrap_or(i64::MAX);
    match chrono::Local.timestamp_millis_opt(millis).earliest() {
        Some(local) => local.format("%Y-%m-%d").to_string(),
        None => {
            let (year, month, day, ..) = dsh_store::utc_from_unix_ms(unix_ms);
            format!("{year:04}-{month:02}-{day:02}")
        }
    }
}

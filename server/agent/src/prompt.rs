//! The system prompt assembly, rendered every step and compared by value.
//!
//! Sections, in order: the built-in base prompt (stable text: no clock, no ids, nothing that
//! changes per step or per host), the workspace's instruction files (`AGENTS.md`, then
//! `.dsh/instructions.md`, when present), and a configuration section (the workspace root and
//! the command sandbox's policy, in words). An edited instruction
//! file changes the rendered text, so the next step logs a header delta — never a silent change.
//! What the model should know about time enters the conversation as a logged `context/message`
//! instead (see [`date_context`]), appended, so it costs only the tail of the prompt cache.

use std::path::Path;

/// The built-in base prompt. Changing this text changes every session's cached prefix.
pub const BASE_PROMPT: &str = "\
You are dsh, a coding agent working inside one workspace (a directory on the user's machine).
Use the tools to look before you change anything: read files, list directories, search with grep and glob.
Make focused changes with edit_file (exact replacement) or write_file, and check them with run_command when the workspace has tests or a build.
Every path is relative to the workspace root; paths outside the workspace are refused.
When you are done, answer briefly: what you changed and what you verified.";

/// Instruction files read from the workspace root, in order.
pub const INSTRUCTION_FILES: &[&str] = &["AGENTS.md", ".dsh/instructions.md"];

/// The largest instruction file read; longer files are cut with a note.
const INSTRUCTION_CAP_BYTES: usize = 64 * 1024;

/// Renders the system prompt for `workspace` (the canonical root), with its instruction `files`
/// (relative to the root, in order: [`INSTRUCTION_FILES`] unless configured), whose commands
/// run as `sandbox` says (the sandbox's own description: policy, reach, network — part of the
/// header, so a policy change is a logged header change).
pub fn render_system_prompt<S: AsRef<str>>(workspace: &Path, files: &[S], sandbox: &str) -> String {
    let mut sections = vec![BASE_PROMPT.to_owned()];
    for name in files.iter().map(AsRef::as_ref) {
        if let Some(text) = read_instruction_file(workspace, name) {
            sections.push(format!("# Workspace instructions ({name})\n\n{}", text.trim_end()));
        }
    }
    sections
        .push(format!("# Configuration\n\nWorkspace root: {}\n\n{sandbox}", workspace.display()));
    sections.join("\n\n")
}

fn read_instruction_file(workspace: &Path, name: &str) -> Option<String> {
    let path = workspace.join(name);
    // An instruction file that is a symlink out of the workspace is not read: the model must
    // never see a file from outside through the system prompt either.
    let canonical = path.canonicalize().ok()?;
    if !canonical.starts_with(workspace) || !canonical.is_file() {
        return None;
    }
    let bytes = std::fs::read(&canonical).ok()?;
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

//! Skills and prompt commands: the Markdown files users write to shape the agent, found in the
//! user's dsh directory (the one holding the user's configuration file, by default
//! `$XDG_CONFIG_HOME/dsh`) and in the workspace (`docs/skills.md`).
//!
//! - Skills: `SKILL.md` in a folder of `skills/` (user), `.dsh/skills/`, `.agents/skills/`,
//!   `.claude/skills/` (workspace), with front matter `name` and `description`.
//! - Commands: `NAME.md` in `commands/` (user), `.dsh/commands/`, `.claude/commands/`,
//!   `.opencode/command/` (workspace), with optional front matter `description` and
//!   `argument-hint`; the rest is the template.
//!
//! Places are searched in that order and the first of a name wins; every file that cannot be
//! used (no front matter, a bad name, a duplicate, too large) is a [`Problem`] `dsh config`
//! shows. Workspace files are read beneath the workspace's root, so a link out of it is never
//! followed; the user's own are read by path.

use std::path::Path;

use dsh_sandbox::beneath::{Beneath, read_regular};
use dsh_session::prompt_file::{FrontMatter, is_simple_name, parse_front_matter};
pub use dsh_session::prompt_file::{Place, Skill};

/// The largest `SKILL.md` or command file read: larger ones are refused (a problem).
pub const PROMPT_FILE_CAP_BYTES: u64 = 64 * 1024;
/// The longest description kept for the header; longer ones are cut with `…`.
pub const DESCRIPTION_CAP_CHARS: usize = 1024;
/// The most skills (and the most commands) taken; the rest are problems.
pub const PROMPT_FILES_MAX: usize = 100;

/// The workspace's skill places, relative to its root, in order.
pub const WORKSPACE_SKILL_DIRS: &[&str] = &[".dsh/skills", ".agents/skills", ".claude/skills"];
/// The workspace's command places, relative to its root, in order.
pub const WORKSPACE_COMMAND_DIRS: &[&str] =
    &[".dsh/commands", ".claude/commands", ".opencode/command"];

/// A prompt command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// Its name: the file's name without `.md`.
    pub name: String,
    /// Its `description`, if any.
    pub description: Option<String>,
    /// Its `argument-hint`, if any.
    pub argument_hint: Option<String>,
    /// Its file.
    pub file: Place,
    /// The template: the file's body.
    pub template: String,
}

/// A file that cannot be used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file (or folder).
    pub file: Place,
    /// Why, in words.
    pub message: String,
}

/// What a search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found<T> {
    /// The usable ones, in order: the first of each name.
    pub items: Vec<T>,
    /// The files left out.
    pub problems: Vec<Problem>,
}

impl<T> Default for Found<T> {
    fn default() -> Self {
        Found { items: Vec::new(), problems: Vec::new() }
    }
}

/// A place's reader: the user's by path, the workspace's beneath its root.
enum Reader<'a> {
    User(&'a Path),
    Workspace(&'a Beneath, &'a str),
}

impl Reader<'_> {
    /// The entries of the place: (name, is a directory), sorted by name.
    fn entries(&self) -> Vec<(String, bool)> {
        let mut out: Vec<(String, bool)> = match self {
            Reader::User(dir) => std::fs::read_dir(dir)
                .map(|listing| {
                    listing
                        .flatten()
                        .filter_map(|entry| {
                            let is_dir = std::fs::metadata(entry.path()).ok()?.is_dir();
                            Some((entry.file_name().into_string().ok()?, is_dir))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            Reader::Workspace(beneath, dir) => beneath
                .list(Path::new(dir))
                .map(|entries| {
                    entries
                        .into_iter()
                        .filter_map(|entry| {
                            let name = entry.name.into_string().ok()?;
                            // A link is a directory only if it resolves beneath the root.
                            let is_dir = entry.is_dir
                                || (entry.is_symlink
                                    && matches!(
                                        beneath.kind(&Path::new(dir).join(&name)),
                                        Ok(dsh_sandbox::beneath::Kind::Dir)
                                    ));
                            Some((name, is_dir))
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        out.sort();
        out
    }

    /// Where `relative` (below the place) is.
    fn place(&self, relative: &str) -> Place {
        match self {
            Reader::User(dir) => Place::User(dir.join(relative)),
            Reader::Workspace(_, dir) => Place::Workspace(format!("{dir}/{relative}")),
        }
    }

    /// The text of `relative`, within the cap.
    fn read(&self, relative: &str) -> Result<String, String> {
        let bytes = match self {
            Reader::User(dir) => read_regular(&dir.join(relative), PROMPT_FILE_CAP_BYTES),
            Reader::Workspace(beneath, dir) => {
                beneath.read(&Path::new(dir).join(relative), PROMPT_FILE_CAP_BYTES)
            }
        };
        let bytes = bytes.map_err(|error| format!("cannot be read: {error}"))?;
        String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_owned())
    }
}

/// The places, in order: the user's folder, then the workspace's.
fn readers<'a>(
    user: Option<&'a Path>,
    beneath: Option<&'a Beneath>,
    workspace_dirs: &'a [&'a str],
) -> Vec<Reader<'a>> {
    let mut out = Vec::new();
    if let Some(dir) = user {
        out.push(Reader::User(dir));
    }
    if let Some(beneath) = beneath {
        out.extend(workspace_dirs.iter().map(|dir| Reader::Workspace(beneath, dir)));
    }
    out
}

/// The skills of the user's dsh directory (`user_dir`) and of the workspace (`beneath`).
pub fn find_skills(user_dir: Option<&Path>, beneath: Option<&Beneath>) -> Found<Skill> {
    let user = user_dir.map(|dir| dir.join("skills"));
    let mut found = Found::default();
    for reader in readers(user.as_deref(), beneath, WORKSPACE_SKILL_DIRS) {
        for (folder, is_dir) in reader.entries() {
            if !is_dir {
                continue;
            }
            let file = format!("{folder}/SKILL.md");
            let place = reader.place(&file);
            let text = match reader.read(&file) {
                Ok(text) => text,
                // A folder without a SKILL.md is not a skill; one that cannot be read is said.
                Err(message) if message.ends_with("not found") => continue,
                Err(message) => {
                    found.problems.push(Problem { file: place, message });
                    continue;
                }
            };
            match skill_of(&text, reader.place(&folder)) {
                Ok(skill) => take(&mut found, skill, place, |s| (&s.name, &s.dir)),
                Err(message) => found.problems.push(Problem { file: place, message }),
            }
        }
    }
    found
}

fn skill_of(text: &str, dir: Place) -> Result<Skill, String> {
    let front = parse_front_matter(text).map_err(|error| error.to_string())?;
    if !front.present {
        return Err("has no front matter (`---`, `name:`, `description:`, `---`)".to_owned());
    }
    let name = front.get("name").ok_or("its front matter has no `name`")?;
    if !is_simple_name(name) {
        return Err(format!(
            "its name `{name}` is not a simple name (letters, digits, `-`, `_`, `.`; at most 64)"
        ));
    }
    let description = front.get("description").ok_or("its front matter has no `description`")?;
    Ok(Skill { name: name.to_owned(), description: cap_description(description), dir })
}

/// The prompt commands of the user's dsh directory (`user_dir`) and of the workspace
/// (`beneath`).
pub fn find_commands(user_dir: Option<&Path>, beneath: Option<&Beneath>) -> Found<Command> {
    let user = user_dir.map(|dir| dir.join("commands"));
    let mut found = Found::default();
    for reader in readers(user.as_deref(), beneath, WORKSPACE_COMMAND_DIRS) {
        for (file, is_dir) in reader.entries() {
            let Some(name) = file.strip_suffix(".md").filter(|_| !is_dir) else { continue };
            let place = reader.place(&file);
            if !is_simple_name(name) {
                let message = format!("`{name}` is not a simple name for a command");
                found.problems.push(Problem { file: place, message });
                continue;
            }
            let command = reader.read(&file).and_then(|text| {
                let front: FrontMatter =
                    parse_front_matter(&text).map_err(|error| error.to_string())?;
                Ok(Command {
                    name: name.to_owned(),
                    description: front.get("description").map(cap_description),
                    argument_hint: front.get("argument-hint").map(str::to_owned),
                    file: place.clone(),
                    template: front.body,
                })
            });
            match command {
                Ok(command) => take(&mut found, command, place, |c| (&c.name, &c.file)),
                Err(message) => found.problems.push(Problem { file: place, message }),
            }
        }
    }
    found
}

/// Adds `item` unless its name is taken (then a problem) or the list is full.
fn take<T>(found: &mut Found<T>, item: T, place: Place, key: impl Fn(&T) -> (&String, &Place)) {
    let name = key(&item).0;
    if let Some(first) = found.items.iter().find(|other| key(other).0 == name) {
        let message = format!("`{name}` is taken by {}: the first wins", key(first).1);
        found.problems.push(Problem { file: place, message });
    } else if found.items.len() >= PROMPT_FILES_MAX {
        let message = format!("more than {PROMPT_FILES_MAX}: left out");
        found.problems.push(Problem { file: place, message });
    } else {
        found.items.push(item);
    }
}

fn cap_description(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(DESCRIPTION_CAP_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

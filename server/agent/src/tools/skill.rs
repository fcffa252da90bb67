//! `skill`: loads a skill's instructions on demand (`docs/skills.md`). The skills' names and
//! descriptions are the tool's description — part of the header, so a changed set of skills is
//! a logged header change — and a call's result (logged, like every tool result) is the body of
//! the skill's `SKILL.md` with the list of the files it comes with, or, with `file`, one of
//! them. A workspace skill's files are also readable by the file tools; a user's skill lives
//! outside the workspace, and this tool is the only way its files reach the model: confined to
//! the skill's folder, links out of it refused, capped.

use std::path::{Component, Path, PathBuf};

use dsh_sandbox::beneath::{Beneath, read_regular};
use dsh_session::ToolSchema;
use dsh_session::prompt_file::{Place, Skill, parse_front_matter};
use serde::Deserialize;

use super::ToolOutput;

/// The tool's name.
pub use dsh_session::SKILL_TOOL;

/// The largest file the tool returns.
const FILE_CAP_BYTES: u64 = 64 * 1024;
/// The most extra files listed.
const LISTED_MAX: usize = 50;

/// The tool's schema for `skills` (not empty): their names and descriptions in its
/// description, the names as the argument's choices.
pub fn schema(skills: &[Skill]) -> ToolSchema {
    let mut description = String::from(
        "Loads a skill: instructions for one kind of task, written by the user or for this \
         workspace. When a task matches a skill's description, call this first and follow \
         what it says. The result is the skill's instructions and a list of the files it comes \
         with; pass `file` to read one of them.\n\nSkills:",
    );
    for skill in skills {
        description.push_str(&format!("\n- {}: {}", skill.name, skill.description));
    }
    let names: Vec<&str> = skills.iter().map(|skill| skill.name.as_str()).collect();
    ToolSchema {
        name: SKILL_TOOL.to_owned(),
        description,
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "name": { "type": "string", "enum": names, "description": "The skill." },
                "file": {
                    "type": "string",
                    "description": "A file of the skill's folder, relative to it (as listed)."
                }
            },
            "required": ["name"],
            "additionalProperties": false
        }),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    name: String,
    #[serde(default)]
    file: Option<String>,
}

/// Runs a `skill` call against `skills`; workspace skills are read beneath `beneath`.
pub fn call(skills: &[Skill], beneath: &Beneath, arguments: &str) -> ToolOutput {
    match run(skills, beneath, arguments) {
        Ok(text) => ToolOutput::success(text),
        Err(error) => ToolOutput::error(format!("skill: {error}")),
    }
}

fn run(skills: &[Skill], beneath: &Beneath, arguments: &str) -> Result<String, String> {
    let arguments: Arguments =
        serde_json::from_str(arguments).map_err(|error| format!("bad arguments: {error}"))?;
    let Some(skill) = skills.iter().find(|skill| skill.name == arguments.name) else {
        let names: Vec<&str> = skills.iter().map(|skill| skill.name.as_str()).collect();
        return Err(format!("no skill `{}` (skills: {})", arguments.name, names.join(", ")));
    };
    let folder = Folder { dir: &skill.dir, beneath };
    match arguments.file.as_deref() {
        Some(file) => {
            let relative = confined(file)?;
            folder.read(&relative)
        }
        None => {
            let text = folder.read(Path::new("SKILL.md"))?;
            let body = parse_front_matter(&text).map_err(|error| error.to_string())?.body;
            let mut out = body.trim().to_owned();
            let files = folder.files();
            if !files.is_empty() {
                let at = match &skill.dir {
                    Place::Workspace(dir) => {
                        format!(" (in the workspace under {dir}/: the file tools read them too)")
                    }
                    Place::User(_) => " (read one with this tool's `file`)".to_owned(),
                };
                out.push_str(&format!("\n\nFiles of this skill{at}:"));
                for file in files {
                    out.push_str(&format!("\n- {file}"));
                }
            }
            Ok(out)
        }
    }
}

/// `file` as a path below a skill's folder: relative, no `..`, not empty.
fn confined(file: &str) -> Result<PathBuf, String> {
    let path = Path::new(file);
    let normal =
        path.components().all(|part| matches!(part, Component::Normal(_) | Component::CurDir));
    if file.is_empty() || !normal {
        return Err(format!("`{file}` is not a path inside the skill's folder"));
    }
    Ok(path.to_path_buf())
}

/// A skill's folder, read as its place says.
struct Folder<'a> {
    dir: &'a Place,
    beneath: &'a Beneath,
}

impl Folder<'_> {
    fn read(&self, relative: &Path) -> Result<String, String> {
        let bytes = match self.dir {
            Place::Workspace(dir) => {
                self.beneath.read(&Path::new(dir).join(relative), FILE_CAP_BYTES)
            }
            Place::User(dir) => {
                // The user's folder: a link out of it is refused like `..`.
                let root = std::fs::canonicalize(dir).map_err(|error| error.to_string())?;
                let path = std::fs::canonicalize(root.join(relative))
                    .map_err(|_| format!("`{}` is not in the skill", relative.display()))?;
                if !path.starts_with(&root) {
                    return Err(format!(
                        "`{}` leads out of the skill's folder",
                        relative.display()
                    ));
                }
                read_regular(&path, FILE_CAP_BYTES)
            }
        };
        let bytes = bytes.map_err(|error| format!("`{}`: {error}", relative.display()))?;
        String::from_utf8(bytes).map_err(|_| format!("`{}` is not UTF-8 text", relative.display()))
    }

    /// The folder's other files (two levels deep, sorted, at most [`LISTED_MAX`]).
    fn files(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.walk("", 0, &mut out);
        out.sort();
        out.retain(|file| file != "SKILL.md");
        out.truncate(LISTED_MAX);
        out
    }

    fn walk(&self, below: &str, depth: usize, out: &mut Vec<String>) {
        if depth > 1 || out.len() > LISTED_MAX {
            return;
        }
        let entries: Vec<(String, bool)> = match self.dir {
            Place::Workspace(dir) => self
                .beneath
                .list(&Path::new(dir).join(below))
                .map(|entries| {
                    entries
                        .into_iter()
                        .filter(|entry| !entry.is_symlink)
                        .filter_map(|entry| Some((entry.name.into_string().ok()?, entry.is_dir)))
                        .collect()
                })
                .unwrap_or_default(),
            Place::User(dir) => std::fs::read_dir(dir.join(below))
                .map(|listing| {
                    listing
                        .flatten()
                        .filter_map(|entry| {
                            let kind = entry.file_type().ok()?;
                            (!kind.is_symlink())
                                .then(|| {
                                    Some((entry.file_name().into_string().ok()?, kind.is_dir()))
                                })
                                .flatten()
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        for (name, is_dir) in entries {
            if name.starts_with('.') {
                continue;
            }
            let path = if below.is_empty() { name } else { format!("{below}/{name}") };
            if is_dir {
                self.walk(&path, depth + 1, out);
            } else {
                out.push(path);
            }
        }
    }
}

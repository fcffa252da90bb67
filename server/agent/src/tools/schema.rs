//! Tool schemas (constant text, part of the byte-stable request header) and the one-line call
//! descriptions shown in approval prompts.

use dsh_session::ToolSchema;
use serde_json::{Value, json};

use super::Tool;

/// The schema of one tool. Constant: nothing here may depend on the host, the clock or the
/// configuration, or the request header would change between sessions.
pub(super) fn schema(tool: Tool) -> ToolSchema {
    let (description, properties, required): (&str, Value, &[&str]) = match tool {
        Tool::EditFile => (
            "Replace one exact occurrence of a string in a text file in the workspace. \
             `old_string` must match the file's text exactly, including whitespace and \
             indentation, and must occur exactly once: include enough surrounding lines to make \
             it unique. Read the file first.",
            json!({
                "path": {
                    "type": "string",
                    "description": "File path, relative to the workspace root."
                },
                "old_string": {
                    "type": "string",
                    "description": "The exact text to replace; must occur exactly once in the file."
                },
                "new_string": {
                    "type": "string",
                    "description": "The text to put in its place."
                }
            }),
            &["path", "old_string", "new_string"],
        ),
        Tool::Glob => (
            "Find files whose path matches a glob pattern, such as `**/*.rs` or `src/*.toml`. \
             The pattern is matched against paths relative to the search directory; `*` does not \
             cross `/`, `**` does. Files ignored by .gitignore are skipped. Returns matching file \
             paths relative to the workspace root, sorted.",
            json!({
                "pattern": {
                    "type": "string",
                    "description": "Glob pattern, such as `**/*.rs`."
                },
                "path": {
                    "type": "string",
                    "description": "Directory to search in, relative to the workspace root. Default: the workspace root."
                }
            }),
            &["pattern"],
        ),
        Tool::Grep => (
            "Search file contents for a regular expression (Rust regex syntax), line by line. \
             Files ignored by .gitignore and binary files are skipped. Returns `path:line:text` \
             lines, with paths relative to the workspace root, sorted by path then line number.",
            json!({
                "pattern": {
                    "type": "string",
                    "description": "Regular expression to search for."
                },
                "path": {
                    "type": "string",
                    "description": "File or directory to search, relative to the workspace root. Default: the workspace root."
                },
                "glob": {
                    "type": "string",
                    "description": "Only search files matching this glob: a pattern without `/` (such as `*.rs`) is matched against the file name, one with `/` against the path relative to the search directory."
                }
            }),
            &["pattern"],
        ),
        Tool::ListDir => (
            "List the entries of a directory in the workspace, sorted by name. Directories end \
             with `/`, symbolic links with `@`. The `.git` directory is left out.",
            json!({
                "path": {
                    "type": "string",
                    "description": "Directory path, relative to the workspace root. Default: the workspace root."
                }
            }),
            &[],
        ),
        Tool::ReadFile => (
            "Read a text file in the workspace. Each line is prefixed with its 1-based line \
             number and a tab; the prefix is not part of the file. Long files are cut off with a \
             note saying how to read the rest. Binary files are refused.",
            json!({
                "path": {
                    "type": "string",
                    "description": "File path, relative to the workspace root."
                },
                "start_line": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "First line to read, 1-based, inclusive. Default: 1."
                },
                "end_line": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Last line to read, inclusive. Default: the end of the file."
                }
            }),
            &["path"],
        ),
        Tool::RunCommand => (
            "Run a shell command with `sh -c` in the workspace root and return its combined \
             stdout and stderr and its exit status. Stdin is empty, so the command must not wait \
             for input. Long output keeps its beginning and end. When the command exits or times \
             out, every process it started is killed, so it cannot leave servers running in the \
             background.",
            json!({
                "command": {
                    "type": "string",
                    "description": "The shell command line."
                },
                "timeout_secs": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TIMEOUT_SECS,
                    "description": "Timeout in seconds. Default: set by the user's configuration."
                }
            }),
            &["command"],
        ),
        Tool::UpdatePlan => (
            "Keep your plan for the task up to date: its steps, in order, and where each \
             stands. Each call replaces the whole plan. At most one step is `in_progress` at a \
             time: when one is done, mark it `completed` and the next `in_progress`. The user \
             sees the plan as you work. Worth it for a task of several steps; skip it for a \
             simple one.",
            json!({
                "explanation": {
                    "type": "string",
                    "description": "Why the plan is what it is, or what changed. Optional."
                },
                "plan": {
                    "type": "array",
                    "maxItems": dsh_session::MAX_PLAN_ENTRIES,
                    "description": "The steps, in order.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "step": {
                                "type": "string",
                                "description": "What the step is, in one short line."
                            },
                            "status": {
                                "type": "string",
                                "enum": ["pending", "in_progress", "completed"]
                            }
                        },
                        "required": ["step", "status"],
                        "additionalProperties": false
                    }
                }
            }),
            &["plan"],
        ),
        Tool::WebFetch => (
            "Fetch a web page or other text by URL (HTTP GET) and return it: HTML as Markdown \
             by default, or as plain text, or the body as it came. The result starts with the \
             final URL, the status and the content type; long pages are cut, with a note. \
             Only http:// and https:// URLs on public addresses; the user may have to approve \
             the call.",
            json!({
                "url": {
                    "type": "string",
                    "description": "The http:// or https:// URL to fetch."
                },
                "format": {
                    "type": "string",
                    "enum": ["markdown", "text", "raw"],
                    "description": "How an HTML page is returned: `markdown` (default), `text` (its text only) or `raw` (the HTML itself). Other content is returned as it came."
                }
            }),
            &["url"],
        ),
        Tool::WriteFile => (
            "Write a file in the workspace, replacing its content if it exists. Missing parent \
             directories are created.",
            json!({
                "path": {
                    "type": "string",
                    "description": "File path, relative to the workspace root."
                },
                "content": {
                    "type": "string",
                    "description": "The complete new content of the file."
                }
            }),
            &["path", "content"],
        ),
    };
    ToolSchema {
        name: tool.name().to_owned(),
        description: description.to_owned(),
        // Keys sorted whatever serde_json's map keeps: these bytes are the request header's.
        parameters: dsh_session::canonical_json(json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        })),
    }
}

/// The longest timeout a `run_command` call may ask for.
pub(super) const MAX_TIMEOUT_SECS: u64 = 3_600;

/// The most characters of a model-provided string shown in one description.
const DESCRIBE_MAX_CHARS: usize = 200;

/// One line describing a call, for approval prompts. Tolerates malformed arguments.
pub(super) fn describe(tool: Tool, arguments: &str) -> String {
    let name = tool.name();
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(arguments) else {
        return format!("{name} (invalid arguments)");
    };
    let text = |key: &str| args.get(key).and_then(Value::as_str).map(one_line);
    let path_or_root = text("path").unwrap_or_else(|| ".".to_owned());
    match tool {
        Tool::ReadFile => {
            let start = args.get("start_line").and_then(Value::as_u64);
            let end = args.get("end_line").and_then(Value::as_u64);
            let range = match (start, end) {
                (None, None) => String::new(),
                (start, Some(end)) => format!(" (lines {}-{end})", start.unwrap_or(1)),
                (Some(start), None) => format!(" (from line {start})"),
            };
            format!("{name} {path_or_root}{range}")
        }
        Tool::ListDir => format!("{name} {path_or_root}"),
        Tool::Glob => {
            format!("{name} {} in {path_or_root}", text("pattern").unwrap_or_default())
        }
        Tool::Grep => {
            let filter = text("glob").map(|glob| format!(" ({glob})")).unwrap_or_default();
            format!("{name} {} in {path_or_root}{filter}", text("pattern").unwrap_or_default())
        }
        Tool::WriteFile => {
            let bytes = args.get("content").and_then(Value::as_str).map(str::len).unwrap_or(0);
            format!("{name} {path_or_root} ({bytes} bytes)")
        }
        Tool::EditFile => format!("{name} {path_or_root}"),
        Tool::UpdatePlan => {
            let steps = args.get("plan").and_then(Value::as_array).map_or(0, Vec::len);
            format!("{name} ({steps} steps)")
        }
        // The whole URL, never cut: a person approves exactly where the request goes.
        Tool::WebFetch => {
            let url = args.get("url").and_then(Value::as_str).unwrap_or_default();
            let format = text("format").unwrap_or_else(|| "markdown".to_owned());
            format!("{name} {} ({format})", escape_all(url))
        }
        // The whole command, never cut: a person approves exactly what will run.
        Tool::RunCommand => {
            let command = args.get("command").and_then(Value::as_str).unwrap_or_default();
            format!("{name}: {}", escape_all(command))
        }
    }
}

/// A model-provided string on one line, whole: newlines as `⏎`, other control and format
/// characters (bidi overrides included) as `\u{…}` escapes, so what is shown is what runs.
fn escape_all(text: &str) -> String {
    let mut line = String::new();
    for character in text.chars() {
        match character {
            '\n' => line.push_str("⏎ "),
            character if is_invisible(character) => {
                line.push_str(&format!("\\u{{{:x}}}", u32::from(character)));
            }
            character => line.push(character),
        }
    }
    line
}

/// Control characters, and the format characters that reorder or hide text (bidi controls,
/// zero-width characters).
fn is_invisible(character: char) -> bool {
    character.is_control()
        || matches!(character, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Squashes a model-provided string onto one bounded line: newlines and other control
/// characters become spaces or escapes, and long text is cut with `…`.
pub(super) fn one_line(text: &str) -> String {
    let mut line = String::new();
    for (count, character) in text.chars().enumerate() {
        if count == DESCRIBE_MAX_CHARS {
            line.push('…');
            break;
        }
        match character {
            '\n' => line.push_str("⏎ "),
            character if is_invisible(character) => line.push(' '),
            character => line.push(character),
        }
    }
    line
}

//! The files users write to shape the agent: a skill's `SKILL.md` and a prompt command's
//! Markdown file. Both may open with YAML front matter — a subset: `key: value` lines, values
//! plain, single- or double-quoted, or a `|` / `>` block of indented lines; comments, blank
//! lines and keys this parser does not know (lists, maps under them) are skipped — and the rest
//! is the body. A command's body is a template: [`expand_command`] puts its arguments in, once.
//!
//! Pure and total: any bytes give a value or a typed error, never a panic (fuzz target
//! `prompt_file`).

use std::collections::BTreeMap;

/// A file split into its front matter and its body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrontMatter {
    /// Keys and their string values, as written (the last of a repeated key wins).
    pub fields: BTreeMap<String, String>,
    /// Whether the file had front matter at all.
    pub present: bool,
    /// Everything after the front matter (the whole file when there is none).
    pub body: String,
}

impl FrontMatter {
    /// A field's value, if present and not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str).filter(|value| !value.is_empty())
    }
}

/// Why a file's front matter cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    /// A `---` line opened front matter that no later `---` line closes.
    #[error("the front matter opened on line 1 is never closed by a `---` line")]
    Unclosed,
    /// A line of the front matter that is not `key: value`.
    #[error("line {line} of the front matter is not `key: value`")]
    BadLine {
        /// 1-based, counting the opening `---`.
        line: usize,
    },
    /// A quoted value whose quote is not closed on its line.
    #[error("line {line} of the front matter opens a quote it does not close")]
    UnclosedQuote {
        /// 1-based.
        line: usize,
    },
}

/// Splits `text` into front matter and body. Without a first line `---` the whole text is the
/// body (`present: false`). A byte-order mark and CRLF line ends are accepted.
pub fn parse_front_matter(text: &str) -> Result<FrontMatter, FrontMatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let Some(first) = lines.next() else { return Ok(FrontMatter::default()) };
    if trim_eol(first).trim_end() != "---" {
        return Ok(FrontMatter { body: text.to_owned(), ..FrontMatter::default() });
    }
    let mut consumed = first.len();
    let mut header = Vec::new();
    let mut closed = false;
    for line in lines {
        consumed += line.len();
        let line = trim_eol(line);
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        header.push(line);
    }
    if !closed {
        return Err(FrontMatterError::Unclosed);
    }
    let fields = parse_fields(&header)?;
    Ok(FrontMatter { fields, present: true, body: text[consumed..].to_owned() })
}

fn trim_eol(line: &str) -> &str {
    let line = line.strip_suffix('\n').unwrap_or(line);
    line.strip_suffix('\r').unwrap_or(line)
}

/// The `key: value` lines (line numbers count the opening `---` as 1).
fn parse_fields(lines: &[&str]) -> Result<BTreeMap<String, String>, FrontMatterError> {
    let mut fields = BTreeMap::new();
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        let number = index + 2;
        index += 1;
        let trimmed = line.trim();
        // Blank lines, comments, and lines indented under a key this parser skips (a list,
        // a map) are not fields.
        if trimmed.is_empty() || trimmed.starts_with('#') || line.starts_with([' ', '\t']) {
            continue;
        }
        if trimmed.starts_with("- ") || trimmed == "-" {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(FrontMatterError::BadLine { line: number });
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(FrontMatterError::BadLine { line: number });
        }
        let value = value.trim();
        let value = match value.chars().next() {
            Some(style @ ('|' | '>')) if is_block_indicator(&value[1..]) => {
                let mut block = Vec::new();
                while index < lines.len() {
                    let next = lines[index];
                    if !next.trim().is_empty() && !next.starts_with([' ', '\t']) {
                        break;
                    }
                    block.push(next.trim());
                    index += 1;
                }
                while block.last().is_some_and(|line| line.is_empty()) {
                    block.pop();
                }
                let joiner = if style == '|' { "\n" } else { " " };
                block.join(joiner)
            }
            Some(quote @ ('"' | '\'')) => {
                unquote(value, quote).ok_or(FrontMatterError::UnclosedQuote { line: number })?
            }
            _ => strip_comment(value).to_owned(),
        };
        fields.insert(key.to_owned(), value);
    }
    Ok(fields)
}

/// `|`, `|-`, `>+`, … : the rest of a block scalar's indicator line.
fn is_block_indicator(rest: &str) -> bool {
    matches!(strip_comment(rest), "" | "-" | "+")
}

/// A plain value without its trailing ` # comment`.
fn strip_comment(value: &str) -> &str {
    match value.find(" #") {
        Some(at) => value[..at].trim_end(),
        None => value,
    }
}

/// A quoted value's text: `"…"` with the escapes `\"`, `\\`, `\n`, `\t`; `'…'` with `''`.
fn unquote(value: &str, quote: char) -> Option<String> {
    let mut out = String::new();
    let mut chars = value[1..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quote == '"' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                other => out.push(other),
            },
            '\'' if quote == '\'' => {
                let mut rest = chars.clone();
                if rest.next() == Some('\'') {
                    out.push('\'');
                    chars = rest;
                } else {
                    return Some(out);
                }
            }
            c if c == quote => return Some(out),
            c => out.push(c),
        }
    }
    None
}

/// Whether `name` may name a skill or a command: 1 to 64 of `a-z A-Z 0-9 - _ .`, starting with
/// a letter or digit (so it is a file name, a word in a `/command`, never a path).
pub fn is_simple_name(name: &str) -> bool {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    starts_well
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A prompt command as typed: `/name args…`, its name and the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandCall<'a> {
    /// The command's name (without the slash).
    pub name: &'a str,
    /// Everything after the name and the whitespace after it.
    pub arguments: &'a str,
}

/// What a prompt's text asks for: a command (`/name args`), or literal text — a prompt that
/// does not start with `/`, or starts with `//` (the escape: one slash is dropped), or whose
/// first word is not a simple name (`/usr/bin is…` is text, not a command).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptText<'a> {
    /// A command call.
    Command(CommandCall<'a>),
    /// Text to send as it is.
    Literal(std::borrow::Cow<'a, str>),
}

/// Reads a prompt's text as a command call or literal text ([`PromptText`]).
pub fn parse_prompt(text: &str) -> PromptText<'_> {
    if let Some(rest) = text.strip_prefix("//") {
        return PromptText::Literal(format!("/{rest}").into());
    }
    let Some(rest) = text.strip_prefix('/') else { return PromptText::Literal(text.into()) };
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let name = &rest[..end];
    if !is_simple_name(name) {
        return PromptText::Literal(text.into());
    }
    PromptText::Command(CommandCall { name, arguments: rest[end..].trim() })
}

/// The positional arguments of `arguments`: words split at whitespace; a word in double or
/// single quotes keeps its spaces (an unclosed quote runs to the end).
pub fn split_arguments(arguments: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = arguments.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else { break };
        let mut word = String::new();
        if first == '"' || first == '\'' {
            chars.next();
            for c in chars.by_ref() {
                if c == first {
                    break;
                }
                word.push(c);
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                word.push(c);
            }
        }
        words.push(word);
    }
    words
}

/// A command's `template` (its body) with `arguments` put in, in one pass: `$ARGUMENTS` is the
/// whole argument text, `$1`…`$9` its words ([`split_arguments`]; a missing one is empty).
/// Substituted text is never scanned again, so an argument holding `$1` stays `$1`. When the
/// template names no argument at all and arguments were given, they follow the text after a
/// blank line, so nothing typed is lost. The result is trimmed.
pub fn expand_command(template: &str, arguments: &str) -> String {
    let words = split_arguments(arguments);
    let mut out = String::with_capacity(template.len() + arguments.len());
    let mut used = false;
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(arguments);
            used = true;
            rest = tail;
        } else if let Some(digit) = after.chars().next().filter(|c| ('1'..='9').contains(c)) {
            let index = (digit as usize) - ('1' as usize);
            out.push_str(words.get(index).map_or("", String::as_str));
            used = true;
            rest = &after[1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    let mut out = out.trim().to_owned();
    if !used && !arguments.is_empty() {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(arguments);
    }
    out
}

/// Where a skill or command file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// The user's: an absolute path.
    User(std::path::PathBuf),
    /// The workspace's: relative to its root.
    Workspace(String),
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::User(path) => write!(f, "{}", path.display()),
            Place::Workspace(path) => f.write_str(path),
        }
    }
}

/// A skill: its name and description (the header's line) and where its folder is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skill {
    /// A simple name ([`is_simple_name`]).
    pub name: String,
    /// What it is for (cut at 1024 characters).
    pub description: String,
    /// Its folder (the one holding `SKILL.md`).
    pub dir: Place,
}

#[cfg(test)]
mod tests;

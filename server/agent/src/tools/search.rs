//! The search tools: `glob` (file names) and `grep` (file contents).
//!
//! Both walk the workspace with `ignore::WalkBuilder`: `.gitignore` and `.ignore` rules apply
//! (also when the workspace is not a git repository; `.git/info/exclude` too), hidden files are
//! searched, `.git` and hidden paths are skipped, and symlinks are never followed — a link is
//! not a regular file, so neither tool looks through it. Ignore files are read by [`Ignores`],
//! not by the walker: beneath the workspace's handle, without blocking, regular files of at
//! most 1 MiB — a `.gitignore` that is a FIFO or a link to `/dev/zero` must not stall or flood
//! the daemon. Nothing above the root and no global git config is read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use globset::{Glob, GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use regex::bytes::Regex;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::ToolConfig;

/// Files larger than this are not searched by `grep`.
const GREP_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
use super::files::capped_lines;
use super::workspace::Workspace;

/// Most paths `glob` returns.
const GLOB_MAX_FILES: usize = 1_000;

/// Most matching lines `grep` returns.
const GREP_MAX_MATCHES: usize = 500;

/// Longest line text `grep` shows, in bytes.
const GREP_MAX_LINE_BYTES: usize = 500;

/// Arguments of `glob`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GlobArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

/// Arguments of `grep`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
}

fn compile_glob(pattern: &str) -> Result<GlobMatcher, String> {
    // Paths are matched relative to the search directory, so `./src/*.rs` means `src/*.rs`.
    let relative = pattern.strip_prefix("./").unwrap_or(pattern);
    let glob: Glob = GlobBuilder::new(relative)
        .literal_separator(true)
        .build()
        .map_err(|error| format!("invalid glob pattern `{pattern}`: {error}"))?;
    Ok(glob.compile_matcher())
}

/// `glob`: workspace files whose path relative to the search directory matches the pattern.
pub(super) fn glob(
    workspace: &Workspace,
    config: &ToolConfig,
    args: GlobArgs,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let matcher = compile_glob(&args.pattern)?;
    let argument = args.path.unwrap_or_else(|| ".".to_owned());
    let directory = search_directory(workspace, &argument)?;
    if !directory.is_dir() {
        return Err(format!("`{argument}` is a file, not a directory; glob searches directories"));
    }
    let matches: Vec<String> = walk_files(workspace, &directory, cancel)?
        .into_iter()
        .filter(|path| {
            path.strip_prefix(&directory).is_ok_and(|relative| matcher.is_match(relative))
        })
        .map(|path| workspace.display(&path))
        .collect();
    if matches.is_empty() {
        return Ok(format!(
            "no files match `{}` in {}",
            args.pattern,
            workspace.display(&directory)
        ));
    }
    Ok(capped_lines(&matches, GLOB_MAX_FILES, config.output_cap_bytes, |shown, total| {
        format!("[showing {shown} of {total} files; use a narrower pattern or path]")
    }))
}

/// `grep`: matching lines as `path:line:text`, sorted by path and line number.
pub(super) fn grep(
    workspace: &Workspace,
    config: &ToolConfig,
    args: GrepArgs,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let regex = Regex::new(&args.pattern)
        .map_err(|error| format!("invalid regular expression `{}`: {error}", args.pattern))?;
    let filter = args.glob.as_deref().map(compile_glob).transpose()?;
    let filter_on_name = args.glob.as_deref().is_some_and(|glob| !glob.contains('/'));
    let argument = args.path.unwrap_or_else(|| ".".to_owned());
    let target = search_directory(workspace, &argument)?;
    // An explicitly named file is searched even if it is ignored.
    let (base, files) = if target.is_dir() {
        let files = walk_files(workspace, &target, cancel)?;
        (target, files)
    } else if !target.is_file() {
        return Err(format!("`{argument}` is not a regular file or a directory"));
    } else {
        let base = target.parent().map(Path::to_path_buf).unwrap_or_else(|| target.clone());
        (base, vec![target])
    };

    let mut lines: Vec<String> = Vec::new();
    let mut truncated = false;
    let mut byte_count = 0;
    'files: for path in files {
        if cancel.is_cancelled() {
            return Err("grep was cancelled".to_owned());
        }
        if let Some(filter) = &filter {
            let matched = if filter_on_name {
                path.file_name().is_some_and(|name| filter.is_match(name))
            } else {
                path.strip_prefix(&base).is_ok_and(|relative| filter.is_match(relative))
            };
            if !matched {
                continue;
            }
        }
        // Files too large to search in memory are skipped (a grep is for source, not data);
        // unreadable ones (permissions, a file removed mid-walk) are skipped like binary ones.
        // The walk went by path; the read goes beneath the workspace's handle, so a directory
        // swapped for a symlink meanwhile never lets an outside file through.
        let Some(content) = read_beneath(workspace, &path) else { continue };
        if content.contains(&0) {
            continue;
        }
        let shown_path = workspace.display(&path);
        // A final newline ends the last line; it does not start an empty one.
        let content = content.strip_suffix(b"\n").unwrap_or(&content);
        if content.is_empty() {
            continue;
        }
        for (index, line) in content.split(|byte| *byte == b'\n').enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let text = if line.len() > GREP_MAX_LINE_BYTES {
                format!("{} [line cut]", String::from_utf8_lossy(&line[..GREP_MAX_LINE_BYTES]))
            } else {
                String::from_utf8_lossy(line).into_owned()
            };
            let entry = format!("{shown_path}:{}:{text}", index + 1);
            byte_count += entry.len() + 1;
            if lines.len() == GREP_MAX_MATCHES
                || (!lines.is_empty() && byte_count > config.output_cap_bytes)
            {
                truncated = true;
                break 'files;
            }
            lines.push(entry);
        }
    }
    if lines.is_empty() {
        return Ok(format!("no matches for `{}` in {}", args.pattern, workspace.display(&base)));
    }
    let mut output = lines.join("\n");
    if truncated {
        output.push_str(&format!(
            "\n[stopped after {} matching lines; more matches not shown; use a narrower \
             pattern, path or glob]",
            lines.len()
        ));
    }
    Ok(output)
}

/// A walked file's content, read beneath the workspace's handle; `None` when it is no longer
/// a regular file inside the workspace, is hidden, or is larger than the search reads.
fn read_beneath(workspace: &Workspace, path: &Path) -> Option<Vec<u8>> {
    let relative = path.strip_prefix(workspace.root()).ok()?;
    workspace.beneath().read(relative, GREP_MAX_FILE_BYTES).ok()
}

/// Whether a walked path is, beneath the workspace's handle, a regular file that is not hidden
/// (the walk goes by path, which a rename race can lead outside).
fn is_file_beneath(workspace: &Workspace, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(workspace.root()) else { return false };
    matches!(workspace.beneath().kind(relative), Ok(dsh_sandbox::beneath::Kind::File(_)))
}

/// Resolves the search path argument; it must exist.
fn search_directory(workspace: &Workspace, argument: &str) -> Result<PathBuf, String> {
    let resolved = workspace.resolve(argument).map_err(|error| error.to_string())?;
    if !resolved.exists() {
        return Err(format!("path `{argument}` not found"));
    }
    Ok(resolved.path)
}

/// Every regular file under `directory` (canonical, inside the workspace) that the ignore
/// rules keep, sorted by path component by component, so that a directory's files stay
/// together (`a/z.rs` sorts before `a.rs`). Symlinks are not followed and not returned.
fn walk_files(
    workspace: &Workspace,
    directory: &Path,
    cancel: &CancellationToken,
) -> Result<Vec<PathBuf>, String> {
    let ignores = Ignores::new(workspace.clone());
    let mut builder = WalkBuilder::new(directory);
    builder
        .hidden(false)
        .parents(false)
        .git_global(false)
        .git_ignore(false)
        .git_exclude(false)
        .ignore(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |entry| {
            if entry.file_name() == ".git" || ignores.hidden(entry.path()) {
                return false;
            }
            let is_dir = entry.file_type().is_some_and(|file_type| file_type.is_dir());
            !ignores.ignored(entry.path(), is_dir)
        });
    let mut files = Vec::new();
    for (count, entry) in builder.build().enumerate() {
        if count % 256 == 0 && cancel.is_cancelled() {
            return Err("search was cancelled".to_owned());
        }
        // Unreadable directories are skipped: the walk reports what it can reach.
        let Ok(entry) = entry else { continue };
        if entry.file_type().is_some_and(|file_type| file_type.is_file())
            && is_file_beneath(workspace, entry.path())
        {
            files.push(entry.into_path());
        }
    }
    files.sort();
    Ok(files)
}

/// The largest ignore file read.
const IGNORE_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// The ignore rules of each directory of the workspace, read once per walk beneath the
/// workspace's handle.
struct Ignores {
    workspace: Workspace,
    by_dir: Mutex<HashMap<PathBuf, Option<Arc<Gitignore>>>>,
}

impl Ignores {
    fn new(workspace: Workspace) -> Ignores {
        Ignores { workspace, by_dir: Mutex::new(HashMap::new()) }
    }

    fn hidden(&self, path: &Path) -> bool {
        self.workspace.beneath().hidden_at(path).is_some()
    }

    /// Whether `path` is ignored: the rules of its directory and each one above it up to the
    /// root, deepest first; the first with an opinion decides.
    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        let root = self.workspace.root();
        let mut directory = path.parent();
        while let Some(current) = directory.filter(|current| current.starts_with(root)) {
            if let Some(rules) = self.rules(current) {
                let matched = rules.matched(path, is_dir);
                if matched.is_ignore() {
                    return true;
                }
                if matched.is_whitelist() {
                    return false;
                }
            }
            directory = current.parent();
        }
        false
    }

    fn rules(&self, directory: &Path) -> Option<Arc<Gitignore>> {
        let mut by_dir = self.by_dir.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        by_dir.entry(directory.to_path_buf()).or_insert_with(|| self.read(directory)).clone()
    }

    /// `directory`'s `.gitignore` then `.ignore` (which wins), and at the root
    /// `.git/info/exclude` first; unreadable ones (not regular, too large) count as absent.
    fn read(&self, directory: &Path) -> Option<Arc<Gitignore>> {
        let relative = directory.strip_prefix(self.workspace.root()).ok()?;
        let mut names = vec![".gitignore", ".ignore"];
        if relative.as_os_str().is_empty() {
            names.insert(0, ".git/info/exclude");
        }
        let mut builder = GitignoreBuilder::new(directory);
        for name in names {
            let Ok(bytes) =
                self.workspace.beneath().read(&relative.join(name), IGNORE_FILE_MAX_BYTES)
            else {
                continue;
            };
            for line in String::from_utf8_lossy(&bytes).lines() {
                // A malformed line is skipped; the rest of the file still applies.
                let _ = builder.add_line(Some(directory.join(name)), line);
            }
        }
        builder.build().ok().filter(|rules| !rules.is_empty()).map(Arc::new)
    }
}

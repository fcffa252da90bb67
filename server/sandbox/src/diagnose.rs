//! Saying what the sandbox denied, from a failed command's own error messages.
//!
//! The kernel does not tell the parent which access Landlock or a namespace refused, so this
//! reads the output the way a person would: a line that reports `Permission denied`,
//! `Read-only file system` or `Operation not permitted` — or a missing file, which is what a
//! tree covered in the mount namespace looks like — for a path the plan does not allow
//! becomes "write outside the workspace denied: PATH" (or a read); a network failure while the
//! network is off becomes "network is off for commands in this session". It is a diagnosis for
//! the model, best effort: a path the plan allows is never blamed on the sandbox.

use std::path::{Component, Path, PathBuf};

use crate::plan::Plan;
use crate::policy::SandboxPolicy;

/// The most notes one result carries.
const MAX_NOTES: usize = 4;

/// Phrases of an access error, as tools and libc print them.
const DENIED: &[&str] = &[
    "Permission denied",
    "Read-only file system",
    "Operation not permitted",
    "EACCES",
    "EROFS",
    "EPERM",
    "[Errno 13]",
    "[Errno 30]",
    "[Errno 1]",
];

/// Phrases of a missing path: what a command sees of a tree the mount namespace covers.
const MISSING: &[&str] =
    &["No such file or directory", "Directory nonexistent", "[Errno 2]", "ENOENT"];

/// Words that mark an attempted write on a line that reports a denial.
const WRITE_WORDS: &[&str] = &[
    "create",
    "touch",
    "write",
    "writing",
    "mkdir",
    "remove",
    "rename",
    "move",
    "overwrite",
    "Read-only file system",
    "EROFS",
    "[Errno 30]",
    "truncate",
    "append",
    "copy",
    "link",
];

/// Phrases of a network failure.
const NETWORK: &[&str] = &[
    "Network is unreachable",
    "ENETUNREACH",
    "[Errno 101]",
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "getaddrinfo",
    "Couldn't connect to server",
    "Could not connect to server",
    "Failed to connect",
    "Connection refused",
    "could not connect",
];

/// The note for a network failure while the network is off.
pub const NETWORK_OFF: &str = "network is off for commands in this session (Unix sockets included)";

/// What the sandbox most likely denied, judging by `output` of a command that ran in
/// `workspace` under `plan` with `policy`. Empty when nothing points at the sandbox.
pub fn denials(output: &str, plan: &Plan, policy: SandboxPolicy, workspace: &Path) -> Vec<String> {
    let mut notes: Vec<String> = Vec::new();
    let mut push = |note: String| {
        if notes.len() < MAX_NOTES && !notes.contains(&note) {
            notes.push(note);
        }
    };
    // Landlock refuses a TCP connection with EACCES: a "Permission denied" that names no path,
    // in output that talks about sockets (a traceback, curl), is the network being off.
    let socket_talk = ["socket", "connect", "Socket", "Connect", "curl", "http"];
    let talks_sockets = socket_talk.iter().any(|word| output.contains(word));
    for line in output.lines() {
        let network_line = NETWORK.iter().any(|phrase| line.contains(phrase));
        let denied_line = DENIED.iter().any(|phrase| line.contains(phrase));
        let missing_line = MISSING.iter().any(|phrase| line.contains(phrase));
        if !plan.network && network_line {
            push(NETWORK_OFF.to_owned());
            continue;
        }
        if !denied_line && !missing_line {
            continue;
        }
        let paths = paths_in(line, workspace);
        if paths.is_empty() {
            if !plan.network && talks_sockets {
                push(NETWORK_OFF.to_owned());
            }
            continue;
        }
        let writing = WRITE_WORDS.iter().any(|word| line.contains(word));
        for path in paths {
            if denied_line && let Some(protected) = plan.protected(&path) {
                push(format!(
                    "{} is read-only for commands (git and dsh would run or apply what is \
                     written there at the user's next command); ask the user to approve an \
                     unconfined run if this really needs it",
                    protected.display()
                ));
                continue;
            }
            // A missing path the command may read is just missing; one it may not read was
            // hidden by the sandbox.
            if plan.may_write(&path) || (!denied_line && plan.may_read(&path)) {
                continue;
            }
            let shown = path.display();
            if writing || plan.may_read(&path) {
                push(match policy {
                    SandboxPolicy::ReadOnly => format!("write denied (read-only sandbox): {shown}"),
                    _ => format!("write outside the workspace denied: {shown}"),
                });
            } else {
                push(format!("read outside the paths commands may read denied: {shown}"));
            }
        }
    }
    notes
}

/// The paths a line names: quoted strings and path-like words, made absolute against
/// `workspace` and normalized (without touching the file system: the path may not exist).
fn paths_in(line: &str, workspace: &Path) -> Vec<PathBuf> {
    let mut found: Vec<String> = Vec::new();
    for (open, close) in [('\'', '\''), ('"', '"'), ('`', '\''), ('‘', '’'), ('`', '`')] {
        let mut rest = line;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else { break };
            found.push(after[..end].to_owned());
            rest = &after[end + close.len_utf8()..];
        }
    }
    for word in line.split_whitespace() {
        let word = word.trim_end_matches([':', ',', ';']);
        if word.starts_with('/') || word.starts_with("./") || word.starts_with("../") {
            found.push(word.to_owned());
        }
    }
    // `cannot create made.txt: Permission denied`: the word before the error names a relative
    // path (when it looks like a file name).
    for phrase in DENIED.iter().chain(MISSING) {
        let Some(at) = line.find(phrase) else { continue };
        let before = line[..at].trim_end().trim_end_matches(':');
        let word = before.rsplit(char::is_whitespace).next().unwrap_or_default();
        let word = word.trim_matches(['\'', '"', '`']);
        let file_like = word.contains(['.', '/'])
            && word.chars().all(|c| c.is_alphanumeric() || "._-/~+@".contains(c));
        if file_like {
            found.push(if word.starts_with('/') { word.to_owned() } else { format!("./{word}") });
        }
    }
    let mut paths: Vec<PathBuf> = found
        .iter()
        .filter(|text| looks_like_path(text))
        .filter_map(|text| absolute(text, workspace))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

fn looks_like_path(text: &str) -> bool {
    !text.is_empty()
        && !text.contains(char::is_whitespace)
        && (text.starts_with('/') || text.starts_with("./") || text.starts_with("../"))
}

fn absolute(text: &str, workspace: &Path) -> Option<PathBuf> {
    let joined = workspace.join(text);
    let mut normal = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::RootDir => normal.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            Component::Normal(part) => normal.push(part),
            Component::Prefix(_) => return None,
        }
    }
    Some(normal)
}

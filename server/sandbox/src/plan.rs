//! The confinement plan: everything the helper needs to confine one command, decided by the
//! daemon and handed to `dsh sandbox-exec --plan JSON`.
//!
//! The daemon decides *what* (which trees are readable, which writable, what is hidden, which
//! layers to use); the helper only applies it. The plan is built once per session
//! ([`Plan::build`]) from the configuration, the kernel's support and the session's paths.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::{Limits, SandboxConfig, SandboxPolicy};

/// System trees every confined command may read and run programs from.
pub const SYSTEM_READ: &[&str] = &[
    "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix", "/gnu",
    "/snap", "/srv", "/var", "/run", "/sys",
];

/// Toolchain directories under the user's home that commands may read (when they exist), so
/// builds and tests work: `(environment variable that relocates it, default under $HOME)`.
pub const TOOLCHAINS: &[(Option<&str>, &str)] = &[
    (Some("CARGO_HOME"), ".cargo"),
    (Some("RUSTUP_HOME"), ".rustup"),
    (Some("PYENV_ROOT"), ".pyenv"),
    (None, ".rbenv"),
    (Some("NVM_DIR"), ".nvm"),
    (Some("VOLTA_HOME"), ".volta"),
    (None, ".deno"),
    (None, ".bun"),
    (None, ".local/bin"),
    (None, ".local/lib"),
    (Some("GOPATH"), "go"),
    (None, ".sdkman"),
];

/// Files inside readable toolchain directories that hold credentials: never readable.
pub const TOOLCHAIN_SECRETS: &[&str] = &["credentials", "credentials.toml"];

/// The user's stores of secrets, under `$HOME`: never readable or writable by commands or
/// the file tools, whatever the workspace (one that is `$HOME` included), existing or not.
pub const SECRET_STORES: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".kube",
    ".docker",
    ".password-store",
    ".local/share/keyrings",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
];

/// System files that hold secrets (readable by root, and a confined command may run as root):
/// never readable by commands.
pub const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/dev/kmsg",
];

/// The secret stores of a user whose home is `home` (absolute paths; existing or not).
pub fn secret_stores(home: Option<&Path>) -> Vec<PathBuf> {
    home.map(|home| SECRET_STORES.iter().map(|store| home.join(store)).collect())
        .unwrap_or_default()
}

/// Trees covered by an empty file system when Landlock is not there to keep commands out of
/// them (the namespace fallback): homes, shared temporary directories, removable media.
pub const COVER_WITHOUT_LANDLOCK: &[&str] =
    &["/home", "/root", "/tmp", "/var/tmp", "/mnt", "/media"];

/// Which layers confine a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layers {
    /// Landlock: file system access (and TCP when the network is off).
    pub landlock: bool,
    /// User, mount and PID namespaces (and a network namespace when the network is off).
    pub namespaces: bool,
}

/// One command's confinement, as the helper applies it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The layers to apply; the helper refuses to run the command if one cannot be.
    pub layers: Layers,
    /// Whether the network is allowed.
    pub network: bool,
    /// Trees the command may read and execute from.
    pub read: Vec<PathBuf>,
    /// Trees the command may read and write (create, remove, rename...).
    pub write: Vec<PathBuf>,
    /// Paths never readable: carved out of readable trees by Landlock and covered by an empty
    /// file system in the mount namespace (the state and configuration directories, secrets).
    pub hide: Vec<PathBuf>,
    /// Trees covered by an empty file system in the mount namespace, with the readable and
    /// writable trees inside them bound back (used without Landlock).
    pub cover: Vec<PathBuf>,
    /// What the command may use.
    #[serde(default)]
    pub limits: Limits,
    /// Paths inside a writable tree that stay read-only in the mount namespace: git's hooks
    /// and configuration, which run or apply at the user's next git command.
    #[serde(default)]
    pub protect: Vec<PathBuf>,
}

/// Paths of a workspace that commands may read but not change (with the mount layer), and
/// that the agent's own file tools write only after asking: git's repository (its hooks,
/// configuration and `commondir` run or apply at the user's next git command; as Codex, the
/// whole of it, since a new file there can redirect the rest) and dsh's own configuration.
pub const PROTECTED_IN_WORKSPACE: &[&str] = &[".git", ".dsh"];

/// What a plan is built from besides the configuration.
#[derive(Clone, Debug, Default)]
pub struct PlanInputs {
    /// The workspace root (canonical).
    pub workspace: PathBuf,
    /// The private temporary directory, when the policy has one.
    pub tmp: Option<PathBuf>,
    /// Paths commands must never see: the state directory, the configuration directory.
    pub hidden: Vec<PathBuf>,
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// The directories of `$PATH`.
    pub path: Vec<PathBuf>,
    /// The value of each toolchain variable in [`TOOLCHAINS`] that is set.
    pub toolchain_vars: Vec<(String, PathBuf)>,
    /// `$XDG_RUNTIME_DIR` (sockets of the user's agents and buses).
    pub runtime_dir: Option<PathBuf>,
}

impl PlanInputs {
    /// Reads `$HOME`, `$PATH`, the toolchain variables and `$XDG_RUNTIME_DIR` from this
    /// process's environment.
    pub fn from_environment(workspace: &Path, tmp: Option<&Path>, hidden: &[PathBuf]) -> Self {
        let absolute = |value: std::ffi::OsString| {
            let path = PathBuf::from(value);
            path.is_absolute().then_some(path)
        };
        PlanInputs {
            workspace: workspace.to_path_buf(),
            tmp: tmp.map(Path::to_path_buf),
            hidden: hidden.to_vec(),
            home: std::env::var_os("HOME").and_then(absolute),
            path: std::env::var_os("PATH")
                .map(|path| std::env::split_paths(&path).filter(|p| p.is_absolute()).collect())
                .unwrap_or_default(),
            toolchain_vars: TOOLCHAINS
                .iter()
                .filter_map(|(variable, _)| *variable)
                .filter_map(|variable| {
                    let value = std::env::var_os(variable).and_then(absolute)?;
                    Some((variable.to_owned(), value))
                })
                .collect(),
            runtime_dir: std::env::var_os("XDG_RUNTIME_DIR").and_then(absolute),
        }
    }
}

impl Plan {
    /// The plan for commands of one session. Paths are made canonical where they exist (the
    /// helper's rules and mounts act on real paths, not on symlinks to them).
    pub fn build(config: &SandboxConfig, layers: Layers, inputs: &PlanInputs) -> Plan {
        let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
        read.extend(inputs.path.iter().cloned());
        let mut hide: Vec<PathBuf> = inputs.hidden.clone();
        hide.extend(secret_stores(inputs.home.as_deref()));
        hide.extend(SYSTEM_SECRETS.iter().map(PathBuf::from));
        if let Some(runtime_dir) = &inputs.runtime_dir {
            hide.push(runtime_dir.clone());
        }
        hide.push(PathBuf::from("/run/user"));
        for (variable, default) in TOOLCHAINS {
            let relocated = variable.and_then(|variable| {
                inputs.toolchain_vars.iter().find(|(name, _)| name == variable).map(|(_, p)| p)
            });
            let directory = match (relocated, &inputs.home) {
                (Some(path), _) => path.clone(),
                (None, Some(home)) => home.join(default),
                (None, None) => continue,
            };
            for secret in TOOLCHAIN_SECRETS {
                hide.push(directory.join(secret));
            }
            read.push(directory);
        }
        read.extend(config.read.iter().cloned());
        let mut write = Vec::new();
        match config.policy {
            SandboxPolicy::WorkspaceWrite => {
                write.push(inputs.workspace.clone());
                write.extend(inputs.tmp.iter().cloned());
            }
            SandboxPolicy::ReadOnly | SandboxPolicy::Full => read.push(inputs.workspace.clone()),
        }
        let mut cover = Vec::new();
        if layers.namespaces && !layers.landlock {
            cover.extend(COVER_WITHOUT_LANDLOCK.iter().map(PathBuf::from));
            cover.extend(inputs.home.iter().cloned());
        }
        let read = existing_canonical(read);
        let write = existing_canonical(write);
        // Hidden paths that do not exist yet stay in the plan: Landlock carves their nearest
        // existing parent, so nothing can create them (the mount layer covers what exists).
        let hide = canonical_even_if_missing(hide);
        let cover = outermost(existing_canonical(cover));
        let protect = match config.policy {
            SandboxPolicy::WorkspaceWrite => existing_canonical(
                PROTECTED_IN_WORKSPACE.iter().map(|path| inputs.workspace.join(path)).collect(),
            ),
            SandboxPolicy::ReadOnly | SandboxPolicy::Full => Vec::new(),
        };
        Plan {
            layers,
            network: config.network,
            read,
            write,
            hide,
            cover,
            limits: config.limits,
            protect,
        }
    }

    /// The plan as the helper's `--plan` argument.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The protected path (read-only for commands) that holds `path`, if any.
    pub fn protected(&self, path: &Path) -> Option<&Path> {
        self.protect.iter().find(|protected| path.starts_with(protected)).map(PathBuf::as_path)
    }

    /// Whether `path` (absolute) may be written under this plan.
    pub fn may_write(&self, path: &Path) -> bool {
        !self.is_hidden(path) && self.write.iter().any(|tree| path.starts_with(tree))
    }

    /// Whether `path` (absolute) may be read under this plan.
    pub fn may_read(&self, path: &Path) -> bool {
        if self.is_hidden(path) {
            return false;
        }
        let system = ["/dev", "/proc"].iter().any(|tree| path.starts_with(tree));
        system || self.read.iter().chain(&self.write).any(|tree| path.starts_with(tree))
    }

    fn is_hidden(&self, path: &Path) -> bool {
        self.hide.iter().any(|hidden| path.starts_with(hidden))
    }
}

/// The paths that exist, canonical, sorted and without duplicates.
fn existing_canonical(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = paths
        .into_iter()
        .filter(|path| path.is_absolute())
        .filter_map(|path| path.canonicalize().ok())
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// The paths made canonical through their deepest existing ancestor (the rest appended),
/// sorted and without duplicates.
pub fn canonical_even_if_missing(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = paths
        .into_iter()
        .filter(|path| path.is_absolute())
        .map(|path| canonical_prefix(&path))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// `path` made canonical through its deepest existing ancestor, the rest appended as is.
pub fn canonical_prefix(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut existing = path;
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut full = canonical;
            full.extend(missing.iter().rev());
            return full;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name);
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// The paths not inside another one of them (sorted input).
fn outermost(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut kept: Vec<PathBuf> = Vec::new();
    for path in paths {
        if !kept.iter().any(|outer| path.starts_with(outer)) {
            kept.push(path);
        }
    }
    kept
}

/// The rules that let a command read `trees` but nothing in `hidden`: a tree with no hidden
/// path inside is one rule; a tree with one is replaced by its entries, recursively, leaving
/// the hidden path (and the directories leading to it, which stay traversable only through
/// their listed entries) out. Symlinks met while splitting are left out too: a rule follows its
/// path, and a link could lead anywhere.
pub fn carve(trees: &[PathBuf], hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut rules = Vec::new();
    for tree in trees {
        carve_one(tree, hidden, &mut rules, 0);
    }
    rules
}

/// How deep a tree is split before giving up on the part that holds a hidden path.
pub(crate) const MAX_CARVE_DEPTH: usize = 16;

fn carve_one(tree: &Path, hidden: &[PathBuf], rules: &mut Vec<PathBuf>, depth: usize) {
    if hidden.iter().any(|path| tree.starts_with(path)) {
        return;
    }
    if !hidden.iter().any(|path| path.starts_with(tree)) {
        rules.push(tree.to_path_buf());
        return;
    }
    if depth >= MAX_CARVE_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(tree) else { return };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_symlink() {
            continue;
        }
        carve_one(&entry.path(), hidden, rules, depth + 1);
    }
}

//! The sandbox as the daemon holds it: [`Sandbox`] — the configuration, what the kernel offers,
//! the decision of what confines commands, the status and the warnings — and
//! [`CommandSandbox`], one session's share of it: its plan, its private temporary directory,
//! and the `Command` that runs a shell command confined (or, approved, unconfined).
//!
//! # Decisions
//! - Policy `full`: no confinement, by the user's choice; every call is logged as unconfined.
//! - Otherwise every layer the kernel offers and the configuration does not turn off is used.
//!   When a layer is missing the sandbox is *degraded*: what remains still applies, the
//!   status, the daemon's log and `dsh doctor` say what is missing, and every command asks
//!   for approval (an "allow always" no longer covers commands). With no layer at all,
//!   commands run unconfined — never silently: degraded, and marked unconfined in the log.
//!
//! Whatever the policy, a command's environment is built, never inherited: `PATH`, `HOME`,
//! `LANG`, `TERM`, the variables the configuration names, and `TMPDIR` when the session has a
//! private temporary directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::diagnose;
use crate::plan::{Layers, Plan, PlanInputs};
use crate::policy::{Feature, SandboxConfig, SandboxPolicy};
use crate::probe::{Availability, Support};

/// Variables every command gets when the daemon has them.
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "LANG", "TERM"];

/// One kernel feature in the status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureStatus {
    /// The feature.
    pub name: String,
    /// The kernel offers it.
    pub available: bool,
    /// The sandbox uses it (available and not turned off).
    pub used: bool,
    /// The configuration turned it off.
    pub turned_off: bool,
    /// What it offers, why it is missing, or that the configuration turned it off.
    pub detail: String,
}

/// What confines commands, for `daemon/status`, the daemon's log and `dsh doctor`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxStatus {
    /// The configured policy.
    pub policy: String,
    /// Whether commands get the network.
    pub network: bool,
    /// Each kernel feature.
    pub features: Vec<FeatureStatus>,
    /// The layers applied to every command, in words.
    pub in_force: Vec<String>,
    /// Every command asks for approval because the sandbox is weaker than the policy.
    pub approval_required: bool,
    /// What is missing and what it means.
    pub warnings: Vec<String>,
    /// What one command may use, in words (empty when commands are not confined).
    pub limits: String,
}

/// The daemon's sandbox.
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    /// The program that runs `sandbox-exec` (this `dsh` binary), when there is one.
    helper: Option<PathBuf>,
    support: Support,
    layers: Layers,
    /// Paths no command may see: the state directory, the configuration directory.
    hidden: Vec<PathBuf>,
    /// [`Sandbox::hidden_paths`]: `hidden`, the secret stores and the system's secrets.
    all_hidden: Vec<PathBuf>,
    /// The environment every command gets (before `TMPDIR`).
    env: Vec<(String, OsString)>,
    status: SandboxStatus,
}

impl Sandbox {
    /// The sandbox for `config`, asking `helper` what the kernel offers (a few milliseconds,
    /// blocking). Without a helper nothing can be confined.
    pub fn new(config: SandboxConfig, helper: Option<PathBuf>, hidden: Vec<PathBuf>) -> Sandbox {
        let removed = clean_leftovers();
        if removed > 0 {
            tracing::info!(
                removed,
                "removed the temporary directories of daemons that were killed"
            );
        }
        let support = match &helper {
            Some(helper) => Support::probe(helper),
            None => Support::none("no sandbox helper: this program cannot run `dsh sandbox-exec`"),
        };
        Sandbox::with_support(config, helper, hidden, support)
    }

    /// Like [`Sandbox::new`] with the kernel's support already known.
    pub fn with_support(
        config: SandboxConfig,
        helper: Option<PathBuf>,
        hidden: Vec<PathBuf>,
        support: Support,
    ) -> Sandbox {
        let usable = |feature: Feature, availability: &Availability| {
            availability.available && !config.without.contains(&feature) && helper.is_some()
        };
        let layers = if config.policy == SandboxPolicy::Full {
            Layers { landlock: false, namespaces: false }
        } else {
            Layers {
                landlock: usable(Feature::Landlock, &support.landlock),
                namespaces: usable(Feature::Userns, &support.userns),
            }
        };
        let env = BASE_ENV
            .iter()
            .copied()
            .chain(config.env.iter().map(String::as_str))
            .filter_map(|name| Some((name.to_owned(), std::env::var_os(name)?)))
            .collect();
        let status = status(&config, &support, layers);
        let home = std::env::var_os("HOME").map(PathBuf::from).filter(|home| home.is_absolute());
        let mut all_hidden = hidden.clone();
        all_hidden.extend(crate::plan::secret_stores(home.as_deref()));
        all_hidden.extend(crate::plan::SYSTEM_SECRETS.iter().map(PathBuf::from));
        let all_hidden = crate::plan::canonical_even_if_missing(all_hidden);
        Sandbox { config, helper, support, layers, hidden, all_hidden, env, status }
    }

    /// Every path neither commands nor the file tools may touch, canonical (existing or not):
    /// the daemon's hidden paths (state and configuration) and the user's secret stores.
    /// Worked out once, when the sandbox is made.
    pub fn hidden_paths(&self) -> &[PathBuf] {
        &self.all_hidden
    }

    /// The configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// What the kernel offers.
    pub fn support(&self) -> &Support {
        &self.support
    }

    /// The status.
    pub fn status(&self) -> &SandboxStatus {
        &self.status
    }

    /// The sandbox of one session in `workspace` (canonical): creates its private temporary
    /// directory (removed when the session's sandbox is dropped) and its plan.
    pub fn session(self: &Arc<Self>, workspace: &Path) -> std::io::Result<CommandSandbox> {
        let tmp = match self.config.policy {
            SandboxPolicy::WorkspaceWrite => {
                use std::os::unix::fs::PermissionsExt as _;
                // Named for this daemon, so that the next one can tell a killed daemon's
                // leftovers ([`clean_leftovers`]); the user's alone (0700).
                let prefix = format!("{TMP_PREFIX}{}-", std::process::id());
                Some(
                    tempfile::Builder::new()
                        .prefix(&prefix)
                        .permissions(std::fs::Permissions::from_mode(0o700))
                        .tempdir()?,
                )
            }
            SandboxPolicy::ReadOnly | SandboxPolicy::Full => None,
        };
        let confined = self.layers.landlock || self.layers.namespaces;
        let plan = confined.then(|| {
            let inputs = PlanInputs::from_environment(
                workspace,
                tmp.as_ref().map(tempfile::TempDir::path),
                &self.hidden,
            );
            Plan::build(&self.config, self.layers, &inputs)
        });
        let plan_json = plan.as_ref().map(Plan::to_json);
        Ok(CommandSandbox {
            sandbox: Some(Arc::clone(self)),
            workspace: workspace.to_path_buf(),
            tmp,
            plan,
            plan_json,
        })
    }

    /// The system prompt's description of what commands may do (stable text: no host paths,
    /// nothing that changes between steps).
    pub fn prompt_text(&self) -> String {
        let policy = self.config.policy;
        if policy == SandboxPolicy::Full {
            return "Commands (run_command) run without a sandbox (policy full): they can do \
                    whatever the user can, network included."
                .to_owned();
        }
        let confined = self.layers.landlock || self.layers.namespaces;
        if !confined {
            return format!(
                "Commands (run_command) should run in a sandbox (policy {policy}), but this \
                 machine offers none: they run unconfined, and the user approves each one."
            );
        }
        let access = match policy {
            SandboxPolicy::ReadOnly => {
                "they can read the system and the workspace and write nothing"
            }
            _ => {
                "they can read the system and the workspace, and write only inside the workspace \
                 and $TMPDIR (a private temporary directory)"
            }
        };
        let network = if self.config.network { "the network is on" } else { "the network is off" };
        let mut text = format!(
            "Commands (run_command) run in a sandbox (policy {policy}): {access}; {network}. \
             The user's home, other directories and the dsh state are out of reach."
        );
        if !self.status.warnings.is_empty() {
            text.push_str(
                " Some sandbox layers are missing on this machine, so the user approves every \
                 command.",
            );
        }
        text.push_str(
            " A result that says the sandbox denied something means exactly that; if a command \
             really needs more, say why and ask the user to approve running it unconfined.",
        );
        text
    }
}

/// Whether this kernel lets a PID namespace have its own `pid_max` (Linux 6.14 and later),
/// which is what bounds a command's processes.
fn pid_max_per_namespace() -> bool {
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else { return false };
    let mut numbers = release.trim().split(|c: char| !c.is_ascii_digit()).map(str::parse::<u32>);
    match (numbers.next(), numbers.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) >= (6, 14),
        _ => false,
    }
}

/// Whether process `pid` runs: it has a `/proc` entry and is not a zombie (killed, not yet
/// reaped by its parent) or dead.
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
    })
}

/// How the sessions' private temporary directories are named: `dsh-tmp-PID-…`.
const TMP_PREFIX: &str = "dsh-tmp-";

/// Removes the private temporary directories of daemons that no longer run (killed before
/// they could remove them): this user's `dsh-tmp-PID-…` whose PID is gone. Returns how many.
pub fn clean_leftovers() -> usize {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return 0 };
    let Ok(uid) = std::fs::metadata("/proc/self").map(|meta| meta.uid()) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|name| name.strip_prefix(TMP_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|pid| pid.parse::<u32>().ok()) else {
            continue;
        };
        let ours = entry.metadata().is_ok_and(|meta| meta.is_dir() && meta.uid() == uid);
        let alive = process_alive(pid);
        if ours && !alive && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The status for a configuration, the kernel's support and the layers chosen.
fn status(config: &SandboxConfig, support: &Support, layers: Layers) -> SandboxStatus {
    let full = config.policy == SandboxPolicy::Full;
    let all_in_force = layers.landlock && layers.namespaces;
    let feature = |feature: Feature, availability: &Availability, used: bool| {
        let turned_off = config.without.contains(&feature);
        let detail = if turned_off && availability.available {
            format!("{} (turned off by the configuration)", availability.detail)
        } else if turned_off {
            format!("{} (and turned off by the configuration)", availability.detail)
        } else {
            availability.detail.clone()
        };
        FeatureStatus {
            name: feature.name().to_owned(),
            available: availability.available,
            used,
            turned_off,
            detail,
        }
    };
    let features = vec![
        feature(Feature::Landlock, &support.landlock, layers.landlock),
        feature(Feature::Userns, &support.userns, layers.namespaces),
    ];
    let mut in_force = Vec::new();
    // With the network off, the seccomp filter (no Unix sockets, no io_uring) goes with
    // whichever layer keeps the network out: the network namespace, else Landlock.
    const SECCOMP: &str = "seccomp: no Unix sockets, no io_uring";
    if layers.landlock {
        let tcp = match (config.network, layers.namespaces) {
            (true, _) => String::new(),
            (false, true) => ", TCP denied".to_owned(),
            (false, false) => format!(", TCP denied; {SECCOMP}"),
        };
        in_force.push(format!("landlock ({}{tcp})", support.landlock.detail));
    }
    if layers.namespaces {
        in_force.push("user, mount and PID namespaces".to_owned());
        if !config.network {
            in_force.push(format!("network namespace ({SECCOMP})"));
        }
    }
    let mut warnings = Vec::new();
    if full {
        warnings.push("policy full: commands are not confined".to_owned());
    } else {
        let missing = |feature: Feature, availability: &Availability| {
            if config.without.contains(&feature) {
                "turned off by the configuration".to_owned()
            } else {
                availability.detail.clone()
            }
        };
        match (layers.landlock, layers.namespaces) {
            (true, true) => {}
            (true, false) => warnings.push(format!(
                "no user namespaces ({}): commands see other processes, can reach the daemon's \
                 socket{}",
                missing(Feature::Userns, &support.userns),
                if config.network { "" } else { ", and only TCP is blocked, not UDP" }
            )),
            (false, true) => warnings.push(format!(
                "no Landlock ({}): file access is confined by mounts only (homes and temporary \
                 directories covered, everything else read-only), and commands can still read \
                 the rest of the system",
                missing(Feature::Landlock, &support.landlock)
            )),
            (false, false) => warnings.push(format!(
                "no sandbox: neither Landlock ({}) nor user namespaces ({}); commands run \
                 unconfined",
                missing(Feature::Landlock, &support.landlock),
                missing(Feature::Userns, &support.userns)
            )),
        }
        if !all_in_force {
            warnings.push("every command asks for approval".to_owned());
        }
    }
    SandboxStatus {
        policy: config.policy.name().to_owned(),
        network: config.network,
        features,
        in_force,
        approval_required: !full && !all_in_force,
        warnings,
        limits: if layers.landlock || layers.namespaces {
            let processes = if !layers.namespaces {
                Err("no PID namespace")
            } else if pid_max_per_namespace() {
                Ok(())
            } else {
                Err("needs Linux 6.14 or later")
            };
            config.limits.describe(processes)
        } else {
            String::new()
        },
    }
}

/// One session's sandbox for its commands.
#[derive(Debug)]
pub struct CommandSandbox {
    /// `None`: a toolbox built without a daemon (library use, tests): unconfined.
    sandbox: Option<Arc<Sandbox>>,
    workspace: PathBuf,
    tmp: Option<tempfile::TempDir>,
    plan: Option<Plan>,
    plan_json: Option<String>,
}

impl CommandSandbox {
    /// No sandbox at all: commands run unconfined with the minimal environment (for tools
    /// used without a daemon).
    pub fn none(workspace: &Path) -> CommandSandbox {
        CommandSandbox {
            sandbox: None,
            workspace: workspace.to_path_buf(),
            tmp: None,
            plan: None,
            plan_json: None,
        }
    }

    /// Whether commands run confined (unless approved unconfined).
    pub fn confines(&self) -> bool {
        self.plan.is_some()
    }

    /// Whether every command must be approved: the sandbox is weaker than the policy asks.
    pub fn approval_required(&self) -> bool {
        match &self.sandbox {
            Some(sandbox) => sandbox.status.approval_required,
            None => false,
        }
    }

    /// Whether the session has the network (the sandbox's network rule): the daemon gives its
    /// commands the network, or does not confine them (policy `full`), or there is no sandbox
    /// at all (a toolbox without a daemon). What `web_fetch` is held to.
    pub fn network(&self) -> bool {
        match &self.sandbox {
            Some(sandbox) => sandbox.config.network || sandbox.config.policy == SandboxPolicy::Full,
            None => true,
        }
    }

    /// The policy's name, or `none` without a sandbox.
    pub fn policy_name(&self) -> &'static str {
        match &self.sandbox {
            Some(sandbox) => sandbox.config.policy.name(),
            None => "none",
        }
    }

    /// How a command would run, for people (an approval prompt): `workspace-write`,
    /// `workspace-write (degraded: no landlock)`, `full (unconfined)`, `none (unconfined)`.
    pub fn label(&self) -> String {
        let Some(sandbox) = &self.sandbox else { return "none (unconfined)".to_owned() };
        let policy = sandbox.config.policy;
        if policy == SandboxPolicy::Full {
            return "full (unconfined)".to_owned();
        }
        match (sandbox.layers.landlock, sandbox.layers.namespaces) {
            (true, true) => policy.name().to_owned(),
            (true, false) => format!("{policy} (degraded: no user namespaces)"),
            (false, true) => format!("{policy} (degraded: no landlock)"),
            (false, false) => format!("{policy} (no sandbox available: unconfined)"),
        }
    }

    /// The system prompt's sandbox paragraph.
    pub fn prompt_text(&self) -> String {
        match &self.sandbox {
            Some(sandbox) => sandbox.prompt_text(),
            None => "Commands (run_command) run without a sandbox.".to_owned(),
        }
    }

    /// The private temporary directory, when the session has one.
    pub fn tmp(&self) -> Option<&Path> {
        self.tmp.as_ref().map(tempfile::TempDir::path)
    }

    /// A `Command` that runs `sh -c shell_command` in the workspace — confined, unless
    /// `unconfined` (a run the user approved as such) or there is no layer to confine with —
    /// with the minimal environment. Standard streams and the process group are the caller's.
    pub fn shell(&self, shell_command: &str, unconfined: bool) -> Command {
        let shell = [OsString::from("sh"), OsString::from("-c"), OsString::from(shell_command)];
        self.command(&shell, unconfined)
    }

    /// Like [`CommandSandbox::shell`] for any program and arguments (`argv[0]` first).
    pub fn command(&self, argv: &[OsString], unconfined: bool) -> Command {
        let helper = self.sandbox.as_ref().and_then(|sandbox| sandbox.helper.as_ref());
        let mut command = match (&self.plan_json, helper, unconfined) {
            (Some(plan), Some(helper), false) => {
                let mut command = Command::new(helper);
                command.args(["sandbox-exec", "--plan", plan.as_str(), "--"]).args(argv);
                command
            }
            _ => {
                let (program, args) = argv
                    .split_first()
                    .map_or((OsString::from("true"), &[][..]), |(p, a)| (p.clone(), a));
                let mut command = Command::new(program);
                command.args(args);
                command
            }
        };
        command.current_dir(&self.workspace).env_clear();
        if let Some(sandbox) = &self.sandbox {
            command.envs(sandbox.env.iter().map(|(name, value)| (name, value)));
        } else {
            command.envs(BASE_ENV.iter().filter_map(|name| Some((*name, std::env::var_os(name)?))));
        }
        if let Some(tmp) = self.tmp() {
            command.env("TMPDIR", tmp);
        }
        command
    }

    /// What the sandbox most likely denied a command that failed with `output` (empty when
    /// nothing points at it, or when the command ran unconfined).
    pub fn denials(&self, output: &str) -> Vec<String> {
        match (&self.plan, &self.sandbox) {
            (Some(plan), Some(sandbox)) => {
                diagnose::denials(output, plan, sandbox.config.policy, &self.workspace)
            }
            _ => Vec::new(),
        }
    }
}

//! Hooks (`[[hooks.EVENT]]`, docs/hooks.md): programs of the user's choosing that the agent runs
//! at points of a turn. Only the user's own file defines them — a repository must not choose
//! what runs on the user's machine (the rule MCP servers follow); a workspace's file may turn
//! one off by name (`[hooks] disable = ["NAME"]`) unless the user marked it `required`.
//!
//! Resolving stays pure: whether each command exists and is executable is checked apart
//! ([`Config::check_hook_commands`]), when a daemon loads the configuration and when
//! `dsh config` shows it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_session::HookEvent;
use serde::Deserialize;
use toml::Spanned;

use crate::file::Layer;
use crate::resolve::{Config, at, source_line};
use crate::{ConfigError, Source, Sourced};

/// How long a hook may run unless its `timeout_secs` says otherwise.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest `timeout_secs` a hook may ask for.
pub const MAX_HOOK_TIMEOUT_SECS: u64 = 600;

/// `[hooks]`: the hooks of each event, in order, and the names turned off.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileHooks {
    #[serde(default, rename = "SessionStart")]
    session_start: Vec<Spanned<FileHook>>,
    #[serde(default, rename = "UserPromptSubmit")]
    user_prompt_submit: Vec<Spanned<FileHook>>,
    #[serde(default, rename = "PreToolUse")]
    pre_tool_use: Vec<Spanned<FileHook>>,
    #[serde(default, rename = "PostToolUse")]
    post_tool_use: Vec<Spanned<FileHook>>,
    #[serde(default, rename = "Stop")]
    stop: Vec<Spanned<FileHook>>,
    #[serde(default, rename = "PreCompact")]
    pre_compact: Vec<Spanned<FileHook>>,
    /// Names of hooks turned off.
    pub disable: Option<Spanned<Vec<String>>>,
}

impl FileHooks {
    /// Each event's hooks, in [`HookEvent::ALL`]'s order.
    pub(crate) fn by_event(&self) -> [(HookEvent, &[Spanned<FileHook>]); 6] {
        [
            (HookEvent::SessionStart, &self.session_start),
            (HookEvent::UserPromptSubmit, &self.user_prompt_submit),
            (HookEvent::PreToolUse, &self.pre_tool_use),
            (HookEvent::PostToolUse, &self.post_tool_use),
            (HookEvent::Stop, &self.stop),
            (HookEvent::PreCompact, &self.pre_compact),
        ]
    }
}

/// One `[[hooks.EVENT]]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileHook {
    name: Option<Spanned<String>>,
    matcher: Option<Spanned<String>>,
    command: Option<Spanned<String>>,
    args: Option<Spanned<Vec<String>>>,
    timeout_secs: Option<Spanned<u64>>,
    required: Option<Spanned<bool>>,
}

/// One hook of the user's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Hook {
    /// Its name: its `name`, else `EVENT.N` (the Nth hook of its event, from 1).
    pub name: String,
    /// When it runs.
    pub event: HookEvent,
    /// The tools it runs for (`PreToolUse`, `PostToolUse`): a regular expression the whole
    /// tool name must match (a plain name matches only itself); `None`: every tool.
    pub matcher: Option<String>,
    /// The program, as written (`~/` is the user's home directory).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// How long a run may take before its process group is killed.
    pub timeout: Sourced<Duration>,
    /// A workspace's file may not turn it off.
    pub required: bool,
    /// Whether it runs (`false`: a `disable` names it; the source is that line).
    pub enabled: Sourced<bool>,
    /// Where it is defined (its table).
    pub source: Source,
}

impl Hook {
    /// The program's path: `command` with `~/` expanded against `home`; absolute, or why not.
    pub fn program(&self, home: Option<&Path>) -> Result<PathBuf, String> {
        let path = match (self.command.strip_prefix("~/"), home) {
            (Some(rest), Some(home)) => home.join(rest),
            (Some(_), None) => {
                return Err(format!(
                    "hook `{}`: `{}` starts with `~/` but there is no home directory",
                    self.name, self.command
                ));
            }
            (None, _) => PathBuf::from(&self.command),
        };
        if path.is_absolute() {
            Ok(path)
        } else {
            Err(format!(
                "hook `{}`: `command = \"{}\"` is not an absolute path or one under `~/` \
                 (a hook's command is one program, run without a shell; put its arguments in \
                 `args`)",
                self.name, self.command
            ))
        }
    }

    /// Whether it runs for a call of `tool` (hooks of other events: always).
    pub fn matches(&self, tool: &str) -> bool {
        match &self.matcher {
            None => true,
            Some(matcher) => matcher_regex(matcher).is_ok_and(|regex| regex.is_match(tool)),
        }
    }
}

/// The regular expression of a matcher: the whole tool name must match.
pub fn matcher_regex(matcher: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{matcher})$")).size_limit(1 << 20).build()
}

/// Whether `path` is a program this user can run: a regular file (links followed) with an
/// execute bit. What is wrong, in words, if not.
pub fn check_program(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("`{}` does not exist", path.display()))
        }
        Err(error) => Err(format!("`{}` cannot be read: {error}", path.display())),
        Ok(metadata) if !metadata.is_file() => {
            Err(format!("`{}` is not a regular file", path.display()))
        }
        Ok(metadata) if metadata.permissions().mode() & 0o111 == 0 => Err(format!(
            "`{}` is not executable (chmod +x it, or name its interpreter as the command)",
            path.display()
        )),
        Ok(_) => Ok(()),
    }
}

/// Refuses a hook defined in a workspace's file, at its line.
pub(crate) fn check_layer(layer: &Layer, hooks: &FileHooks) -> Result<(), ConfigError> {
    if !layer.workspace {
        return Ok(());
    }
    for (event, list) in hooks.by_event() {
        if let Some(hook) = list.first() {
            return Err(layer.error(
                source_line(&layer.source(hook)),
                format!(
                    "`[[hooks.{}]]` cannot be set in a workspace's configuration (a repository \
                     must not choose what runs on your machine); define hooks in your own \
                     configuration file — a workspace may only turn one off, with `[hooks] \
                     disable = [\"NAME\"]`",
                    event.name()
                ),
            ));
        }
    }
    Ok(())
}

/// The hooks the layers define (the user's file; a workspace's was refused by
/// [`check_layer`]), with the `disable` lists of every layer applied.
pub(crate) fn resolve_hooks(layers: &[&Layer]) -> Result<Vec<Hook>, ConfigError> {
    let mut hooks: Vec<Hook> = Vec::new();
    for layer in layers {
        for (event, list) in layer.file.hooks.by_event() {
            for (index, spanned) in list.iter().enumerate() {
                let hook = finish(layer, event, index, spanned)?;
                if let Some(twin) = hooks.iter().find(|other| other.name == hook.name) {
                    return Err(at(
                        &hook.source,
                        format!(
                            "a hook named `{}` is already defined at {}: hook names must be \
                             unique (a workspace turns a hook off by its name)",
                            hook.name, twin.source
                        ),
                    ));
                }
                hooks.push(hook);
            }
        }
    }
    for layer in layers {
        let Some(disable) = &layer.file.hooks.disable else { continue };
        let source = layer.source(disable);
        for name in disable.get_ref() {
            match hooks.iter_mut().find(|hook| &hook.name == name) {
                Some(hook) if hook.required && layer.workspace => {
                    return Err(at(
                        &source,
                        format!(
                            "hooks.disable: hook `{name}` is marked `required` in your \
                             configuration ({}), so a workspace's file cannot turn it off",
                            hook.source
                        ),
                    ));
                }
                Some(hook) => hook.enabled = Sourced::new(false, source.clone()),
                // A repository may name hooks other users have; the user's own file may not
                // name one that does not exist.
                None if layer.workspace => {}
                None => {
                    let known = hooks.iter().map(|hook| hook.name.as_str()).collect::<Vec<_>>();
                    return Err(at(
                        &source,
                        format!(
                            "hooks.disable: there is no hook `{name}` (hooks: {})",
                            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                        ),
                    ));
                }
            }
        }
    }
    Ok(hooks)
}

/// Checks one `[[hooks.EVENT]]` and gives it its defaults.
fn finish(
    layer: &Layer,
    event: HookEvent,
    index: usize,
    spanned: &Spanned<FileHook>,
) -> Result<Hook, ConfigError> {
    let given = spanned.get_ref();
    let source = layer.source(spanned);
    let here = |value_source: Source, message: String| at(&value_source, message);
    let name = match &given.name {
        Some(name) => {
            let value = name.get_ref();
            let valid = !value.is_empty()
                && value.len() <= 64
                && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !valid {
                return Err(here(
                    layer.source(name),
                    format!(
                        "hook name `{}` is not allowed: use 1 to 64 letters, digits, `-`, `_` or \
                         `.`",
                        value.escape_debug()
                    ),
                ));
            }
            value.clone()
        }
        None => format!("{}.{}", event.name(), index + 1),
    };
    let Some(command) = &given.command else {
        return Err(here(
            source,
            format!("hook `{name}` ([[hooks.{}]]) has no `command`", event.name()),
        ));
    };
    if command.get_ref().trim().is_empty() || command.get_ref().contains('\0') {
        return Err(here(layer.source(command), format!("hook `{name}`: `command` is empty")));
    }
    let args = given.args.as_ref().map(|args| args.get_ref().clone()).unwrap_or_default();
    if let Some(spanned_args) = &given.args
        && args.iter().any(|arg| arg.contains('\0'))
    {
        return Err(here(
            layer.source(spanned_args),
            format!("hook `{name}`: an argument holds a NUL byte"),
        ));
    }
    let matcher = match &given.matcher {
        None => None,
        Some(matcher) if !event.is_tool_event() => {
            return Err(here(
                layer.source(matcher),
                format!(
                    "hook `{name}`: `matcher` applies to PreToolUse and PostToolUse hooks only \
                     (a {} hook runs every time)",
                    event.name()
                ),
            ));
        }
        Some(matcher) => {
            let text = matcher.get_ref();
            if text.is_empty() || text == "*" {
                None
            } else {
                if let Err(error) = matcher_regex(text) {
                    return Err(here(
                        layer.source(matcher),
                        format!(
                            "hook `{name}`: `matcher` is not a tool name or a regular \
                             expression: {error}"
                        ),
                    ));
                }
                Some(text.clone())
            }
        }
    };
    let timeout = match &given.timeout_secs {
        None => Sourced::new(HOOK_TIMEOUT, Source::Default),
        Some(seconds) => {
            let value = *seconds.get_ref();
            if !(1..=MAX_HOOK_TIMEOUT_SECS).contains(&value) {
                return Err(here(
                    layer.source(seconds),
                    format!(
                        "hook `{name}`: timeout_secs {value} is out of range (1 to \
                         {MAX_HOOK_TIMEOUT_SECS})"
                    ),
                ));
            }
            Sourced::new(Duration::from_secs(value), layer.source(seconds))
        }
    };
    Ok(Hook {
        name,
        event,
        matcher,
        command: command.get_ref().clone(),
        args,
        timeout,
        required: given.required.as_ref().is_some_and(|required| *required.get_ref()),
        enabled: Sourced::new(true, Source::Default),
        source,
    })
}

impl Config {
    /// The hooks that run for `event`, in order.
    pub fn hooks_for(&self, event: HookEvent) -> impl Iterator<Item = &Hook> {
        self.hooks.iter().filter(move |hook| hook.event == event && hook.enabled.value)
    }

    /// Checks that every enabled hook's command is a program this user can run (`home`
    /// expands `~/`): the first that is not, at its line. A daemon refuses such a file as it
    /// refuses one that does not parse; the runner says it again if the program goes away.
    pub fn check_hook_commands(&self, home: Option<&Path>) -> Result<(), ConfigError> {
        for hook in self.hooks.iter().filter(|hook| hook.enabled.value) {
            let program = hook.program(home).map_err(|message| at(&hook.source, message))?;
            check_program(&program).map_err(|problem| {
                at(&hook.source, format!("hook `{}`: its command {problem}", hook.name))
            })?;
        }
        Ok(())
    }
}

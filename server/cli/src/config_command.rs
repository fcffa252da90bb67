//! `dsh config`: the configuration as it resolves for a workspace — built in, the user's file,
//! the workspace's file, the environment and the flags — every value with its source. It
//! reads the files itself (no daemon needed); a file that cannot be used is the error, with
//! its file, line and key. Keys and header values are never printed.

use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use dsh_config::prompt_files;
use dsh_config::{Config, ConfigError, Layer};

use crate::settings::Settings;

/// The files looked for, and whether each was found.
type Looked = Vec<(PathBuf, bool)>;

/// The layers for `workspace`, lowest first, and the files that were looked for.
fn layers(settings: &Settings, workspace: &Path) -> Result<(Vec<Layer>, Looked), ConfigError> {
    let mut layers = vec![dsh_config::builtin()];
    let mut looked = Vec::new();
    let files = settings
        .user_config
        .iter()
        .map(|path| (path.clone(), false))
        .chain([(dsh_config::workspace_file(workspace), true)]);
    for (path, in_workspace) in files {
        let layer = Layer::read(&path, in_workspace)?;
        looked.push((path, layer.is_some()));
        layers.extend(layer);
    }
    Ok((layers, looked))
}

/// The configuration for `workspace` as this command's flags and environment resolve it.
pub fn resolve(settings: &Settings, workspace: &Path) -> Result<Config, ConfigError> {
    let (layers, _) = layers(settings, workspace)?;
    let refs: Vec<&Layer> = layers.iter().collect();
    dsh_config::resolve(&refs, &settings.overrides())
}

/// `dsh config [--workspace DIR]`.
pub fn show(settings: &Settings, workspace: &Path) -> anyhow::Result<ExitCode> {
    let workspace =
        workspace.canonicalize().with_context(|| format!("workspace {}", workspace.display()))?;
    let resolved = layers(settings, &workspace).and_then(|(layers, looked)| {
        let refs: Vec<&Layer> = layers.iter().collect();
        let config = dsh_config::resolve(&refs, &settings.overrides())?;
        // As a daemon loads it: a hook whose command cannot run is refused at its line.
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        config.check_hook_commands(home.as_deref().filter(|home| home.is_absolute()))?;
        Ok((config, looked))
    });
    let (config, looked) = match resolved {
        Ok(resolved) => resolved,
        Err(error) => {
            eprintln!("dsh: the configuration cannot be used: {error}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut entries = config.entries();
    let (prompt_entries, problems) = prompt_files(settings, &workspace);
    entries.extend(prompt_entries);
    if settings.json {
        let entries: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| serde_json::json!({"key": e.key, "value": e.value, "source": e.source}))
            .collect();
        let files: Vec<serde_json::Value> = looked
            .iter()
            .map(|(path, found)| serde_json::json!({"path": path.display().to_string(), "found": found}))
            .collect();
        let problems: Vec<serde_json::Value> = problems
            .iter()
            .map(|p| serde_json::json!({"file": p.file.to_string(), "message": p.message}))
            .collect();
        let all = serde_json::json!({"files": files, "entries": entries, "problems": problems});
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    for (path, found) in &looked {
        let state = if *found { "read" } else { "not found" };
        println!("# {} ({state})", path.display());
    }
    let width = entries.iter().map(|e| e.key.len() + e.value.len() + 3).max().unwrap_or(0).min(64);
    for entry in &entries {
        let assignment = format!("{} = {}", entry.key, entry.value);
        println!("{assignment:<width$}  # {}", entry.source);
    }
    for problem in &problems {
        println!("# left out: {}: {}", problem.file, problem.message);
    }
    Ok(ExitCode::SUCCESS)
}

/// The skills and prompt commands found for `workspace` as entries (`skills.NAME` = its
/// description, `commands.NAME` = its description or hint, each sourced by its file), and the
/// files left out with why (`docs/skills.md`).
fn prompt_files(
    settings: &Settings,
    workspace: &Path,
) -> (Vec<dsh_config::Entry>, Vec<prompt_files::Problem>) {
    let user_dir = settings.user_config.as_deref().and_then(Path::parent);
    let beneath = dsh_sandbox::beneath::Beneath::open(workspace, Vec::new()).ok();
    let skills = prompt_files::find_skills(user_dir, beneath.as_ref());
    let commands = prompt_files::find_commands(user_dir, beneath.as_ref());
    let quoted = |text: &str| toml_string(text);
    let mut entries = Vec::new();
    for skill in &skills.items {
        entries.push(dsh_config::Entry {
            key: format!("skills.{}", skill.name),
            value: quoted(&skill.description),
            source: format!("{}/SKILL.md", skill.dir),
        });
    }
    for command in &commands.items {
        let about = command.description.as_deref().or(command.argument_hint.as_deref());
        entries.push(dsh_config::Entry {
            key: format!("commands.{}", command.name),
            value: quoted(about.unwrap_or("")),
            source: command.file.to_string(),
        });
    }
    let mut problems = skills.problems;
    problems.extend(commands.problems);
    (entries, problems)
}

/// `dsh allow-workspace DIR`: records DIR in `allow_workspaces` of the user's configuration
/// file (created 0600 if missing). A file that already has the key is not rewritten: the user
/// adds the directory to that list by hand (the message says where).
pub fn allow_workspace(settings: &Settings, dir: &Path) -> anyhow::Result<ExitCode> {
    let dir = std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    let file = settings.user_config.clone().context(
        "no place for your configuration file ($DSH_CONFIG, $XDG_CONFIG_HOME and $HOME are unset)",
    )?;
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(error).with_context(|| format!("reading {}", file.display())),
    };
    let layer = Layer::parse(&text, Some(&file), false).map_err(anyhow::Error::msg)?;
    let refs = [&dsh_config::builtin(), &layer];
    let config = dsh_config::resolve(&refs, &settings.overrides()).map_err(anyhow::Error::msg)?;
    if config.allow_workspaces.iter().any(|allowed| allowed == &dir) {
        println!("{} is already allowed ({})", dir.display(), file.display());
        return Ok(ExitCode::SUCCESS);
    }
    if text.lines().any(|line| line.trim_start().starts_with("allow_workspaces")) {
        anyhow::bail!(
            "{} already has an `allow_workspaces` list; add {} to it by hand",
            file.display(),
            toml_string(&dir.to_string_lossy())
        );
    }
    // A top-level key goes before every table: first in the file.
    let line = format!(
        "allow_workspaces = [{}]  # confirmed with `dsh allow-workspace`\n",
        toml_string(&dir.to_string_lossy())
    );
    let updated = format!("{line}{text}");
    Layer::parse(&updated, Some(&file), false).map_err(anyhow::Error::msg)?;
    if let Some(parent) = file.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let temporary = file.with_extension("toml.tmp");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut out| {
            std::io::Write::write_all(&mut out, updated.as_bytes())?;
            out.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, &file))
        .with_context(|| format!("writing {}", file.display()))?;
    println!("allowed {} ({})", dir.display(), file.display());
    Ok(ExitCode::SUCCESS)
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            control if control.is_control() => {
                out.push_str(&format!("\\u{:04X}", u32::from(control)))
            }
            other => out.push(other),
        }
    }
    out.push('"');
    out
}

//! `dsh config`: the configuration as it resolves for a workspace — built in, the user's file,
//! the workspace's file, the environment and the flags — every value with its source. It
//! reads the files itself (no daemon needed); a file that cannot be used is the error, with
//! its file, line and key. Keys and header values are never printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
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
        dsh_config::resolve(&refs, &settings.overrides()).map(|config| (config, looked))
    });
    let (config, looked) = match resolved {
        Ok(resolved) => resolved,
        Err(error) => {
            eprintln!("dsh: the configuration cannot be used: {error}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let entries = config.entries();
    if settings.json {
        let entries: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| serde_json::json!({"key": e.key, "value": e.value, "source": e.source}))
            .collect();
        let files: Vec<serde_json::Value> = looked
            .iter()
            .map(|(path, found)| serde_json::json!({"path": path.display().to_string(), "found": found}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"files": files, "entries": entries}))?
        );
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
    Ok(ExitCode::SUCCESS)
}

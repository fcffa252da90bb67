//! Prompt commands (`docs/skills.md`, "Prompt commands"): a prompt `/name args…` is replaced by
//! the command's template with its arguments put in, once — the expansion is never read as a
//! command again, so a command that names itself cannot recur — and the `user/message` logged
//! is the expansion, with the command's name and file. `//…` sends the text with one slash
//! dropped. An unknown name, or an expansion with nothing in it, is refused before anything is
//! logged.

use std::path::Path;

use dsh_protocol::{CommandInfo, SkillInfo};
use dsh_session::PromptCommand;
use dsh_session::prompt_file::{PromptText, expand_command, parse_prompt};

use crate::error::{ApiError, ApiResult};
use crate::settings::Settings;

/// The text to send for `text` typed in `workspace`, and the command it was expanded from.
pub(crate) fn expand(
    settings: &Settings,
    workspace: &Path,
    text: String,
) -> ApiResult<(String, Option<PromptCommand>)> {
    let call = match parse_prompt(&text) {
        PromptText::Literal(literal) => return Ok((literal.into_owned(), None)),
        PromptText::Command(call) => call,
    };
    let found = settings.commands(workspace);
    let Some(command) = found.items.iter().find(|command| command.name == call.name) else {
        let names: Vec<String> =
            found.items.iter().map(|command| format!("/{}", command.name)).collect();
        let listed = if names.is_empty() { "none".to_owned() } else { names.join(", ") };
        return Err(ApiError::invalid_params(format!(
            "unknown command `/{}` (commands: {listed}; start the prompt with `//` to send a \
             literal slash)",
            call.name
        ))
        .with_data(serde_json::json!({ "unknownCommand": call.name, "commands": names })));
    };
    let expanded = expand_command(&command.template, call.arguments);
    if expanded.trim().is_empty() {
        return Err(ApiError::invalid_params(format!(
            "command `/{}` ({}) expands to nothing",
            command.name, command.file
        )));
    }
    let source = command.file.to_string();
    Ok((expanded, Some(PromptCommand { name: command.name.clone(), source })))
}

/// The commands and skills of `workspace`, for clients to offer (`workspace/commands`).
pub(crate) fn list(settings: &Settings, workspace: &Path) -> (Vec<CommandInfo>, Vec<SkillInfo>) {
    let commands = settings
        .commands(workspace)
        .items
        .into_iter()
        .map(|command| CommandInfo {
            name: command.name,
            description: command.description,
            argument_hint: command.argument_hint,
            source: command.file.to_string(),
        })
        .collect();
    let skills = settings
        .skills(workspace)
        .items
        .into_iter()
        .map(|skill| SkillInfo {
            name: skill.name,
            description: skill.description,
            source: skill.dir.to_string(),
        })
        .collect();
    (commands, skills)
}

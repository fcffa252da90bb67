//! Pure conversions between ACP and dsh's protocol, typed on both sides (the SDK's request and
//! response structs, dsh's params and results): ACP params as dsh's (a `cwd` as a workspace, the
//! editor's MCP servers, prompt blocks as text, a permission answer as a decision, a model
//! choice), and dsh's answers as ACP's (`initialize`, the model selector, a `session/list`
//! page, a prompt's stop reason, a permission request, the prompt commands as
//! `available_commands_update`). dsh's own data rides in `_meta`, built
//! by `ext.rs`; errors are `error.rs`'s. No I/O: each is table-tested (`convert/tests.rs`).

use std::collections::HashMap;
use std::path::Path;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, AvailableCommand, AvailableCommandInput, AvailableCommandsUpdate,
    ContentBlock, EmbeddedResourceResource, Implementation, InitializeResponse,
    ListSessionsResponse, McpCapabilities, McpServer, PermissionOption, PermissionOptionKind,
    PromptCapabilities, PromptResponse, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SessionCapabilities, SessionConfigOption,
    SessionConfigOptionCategory, SessionConfigOptionValue, SessionConfigSelectOption, SessionInfo,
    SessionListCapabilities, SessionResumeCapabilities, SessionUpdate,
    SetSessionConfigOptionRequest, StopReason as AcpStopReason, ToolCallUpdate,
    ToolCallUpdateFields, UnstructuredCommandInput,
};
use dsh_protocol::{
    ApprovalChoice, ApprovalRequest, Attachment, McpServerSpec, SessionCommandsResult,
    SessionPromptResult, SessionSummary, StopReason,
};

use crate::error::{invalid_params, turn_failed};
use crate::ext;
use crate::front::AcpError;

/// Sessions per `session/list` page.
const LIST_PAGE: usize = 50;

/// The `initialize` answer: protocol 1, what the front does, and dsh's extensions.
/// `images`: whether prompts may carry images (the model of the sessions `session/new` creates
/// reads them: `promptCapabilities.image`).
pub(crate) fn initialize(images: bool) -> InitializeResponse {
    let prompts = PromptCapabilities::new().image(images).audio(false).embedded_context(true);
    let sessions = SessionCapabilities::new()
        .list(SessionListCapabilities::new())
        .resume(SessionResumeCapabilities::new());
    let capabilities = AgentCapabilities::new()
        .load_session(true)
        .prompt_capabilities(prompts)
        .session_capabilities(sessions)
        .mcp_capabilities(McpCapabilities::new().http(true).sse(false))
        .meta(ext::capabilities_meta());
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(capabilities)
        .agent_info(Implementation::new("dsh", env!("CARGO_PKG_VERSION")).title("dsh"))
        .meta(ext::initialize_meta())
}

/// A session's workspace from ACP's `cwd`: absolute.
pub(crate) fn workspace(cwd: &Path) -> Result<String, AcpError> {
    if !cwd.is_absolute() {
        return Err(invalid_params(format!(
            "cwd must be an absolute path, not `{}`",
            cwd.display()
        )));
    }
    Ok(cwd.display().to_string())
}

/// The editor's MCP servers as dsh's `session/mcpServers` takes them: stdio and streamable
/// HTTP; SSE (deprecated by MCP) is refused. Names are mapped by [`server_name`]; two that map
/// to the same name are refused, naming both.
pub(crate) fn server_specs(servers: &[McpServer]) -> Result<Vec<McpServerSpec>, AcpError> {
    let mut specs: Vec<McpServerSpec> = Vec::new();
    let mut given: HashMap<String, &str> = HashMap::new();
    for server in servers {
        let (original, spec) = server_spec(server)?;
        if let Some(first) = given.insert(spec.name.clone(), original) {
            return Err(invalid_params(format!(
                "MCP servers `{first}` and `{original}` both become `{}` in dsh (server names are \
                 letters, digits and `-`): rename one",
                spec.name
            )));
        }
        specs.push(spec);
    }
    Ok(specs)
}

/// One of the editor's MCP servers as dsh's, with its ACP name.
fn server_spec(server: &McpServer) -> Result<(&str, McpServerSpec), AcpError> {
    match server {
        McpServer::Stdio(stdio) => Ok((
            &stdio.name,
            McpServerSpec {
                name: server_name(&stdio.name)?,
                command: Some(stdio.command.display().to_string()),
                args: stdio.args.clone(),
                env: stdio.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect(),
                cwd: None,
                url: None,
                headers: Default::default(),
            },
        )),
        McpServer::Http(http) => Ok((
            &http.name,
            McpServerSpec {
                name: server_name(&http.name)?,
                command: None,
                args: Vec::new(),
                env: Default::default(),
                cwd: None,
                url: Some(http.url.clone()),
                headers: http.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect(),
            },
        )),
        McpServer::Sse(sse) => Err(invalid_params(format!(
            "MCP server `{}`: the SSE transport is not supported (MCP deprecated it); use its \
             streamable-HTTP endpoint (`\"type\": \"http\"`) or run it over stdio",
            sse.name
        ))),
        _ => {
            Err(invalid_params("an MCP server of a transport dsh does not know: use stdio or http"))
        }
    }
}

/// An ACP server name as dsh's (1 to 32 ASCII letters, digits or `-`, so its tools can be
/// `NAME__TOOL`): every other character becomes `-` and the name is cut at 32 characters. The
/// same name always maps the same way (a `session/load` with the same servers resumes
/// byte-identical), and a valid name is kept as it is. A name with no letter or digit is
/// refused.
fn server_name(name: &str) -> Result<String, AcpError> {
    let mapped: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
        .take(32)
        .collect();
    if !mapped.chars().any(|c| c.is_ascii_alphanumeric()) {
        return Err(invalid_params(format!(
            "MCP server name `{}` has no ASCII letter or digit: dsh names a server's tools \
             `NAME__TOOL` with NAME made of letters, digits and `-`",
            name.escape_debug()
        )));
    }
    Ok(mapped)
}

/// A prompt's content blocks as the text of a dsh prompt: text as is, resource links as
/// Markdown links, embedded text resources as tagged context; images, audio and binary
/// resources are refused (`promptCapabilities` says so).
pub(crate) fn prompt_text(blocks: &[ContentBlock]) -> Result<String, AcpError> {
    let mut parts = Vec::new();
    for block in blocks {
        let refused = match block {
            ContentBlock::Text(text) => {
                parts.push(text.text.clone());
                continue;
            }
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("[@{}]({})", link.name, link.uri));
                continue;
            }
            ContentBlock::Resource(embedded) => match &embedded.resource {
                EmbeddedResourceResource::TextResourceContents(resource) => {
                    parts.push(format!(
                        "<context ref=\"{}\">\n{}\n</context>",
                        resource.uri, resource.text
                    ));
                    continue;
                }
                EmbeddedResourceResource::BlobResourceContents(resource) => {
                    return Err(invalid_params(format!(
                        "binary resource {} is not supported",
                        resource.uri
                    )));
                }
                _ => "unknown",
            },
            ContentBlock::Image(_) => "image",
            ContentBlock::Audio(_) => "audio",
            _ => "unknown",
        };
        return Err(invalid_params(format!(
            "{refused} content is not supported (see promptCapabilities)"
        )));
    }
    if parts.iter().all(|part| part.trim().is_empty()) {
        return Err(invalid_params("the prompt is empty"));
    }
    Ok(parts.join("\n"))
}

/// A prompt's content blocks as a dsh prompt: its text ([`prompt_text`] of the other blocks) and
/// its image blocks as attachments, in order (base64 as ACP sends it; the daemon checks each is
/// an image its session's model reads, and refuses the prompt otherwise).
pub(crate) fn prompt_parts(blocks: &[ContentBlock]) -> Result<(String, Vec<Attachment>), AcpError> {
    let mut rest = Vec::with_capacity(blocks.len());
    let mut images = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Image(image) => images.push(Attachment {
                name: image
                    .uri
                    .as_deref()
                    .and_then(|uri| uri.rsplit('/').next())
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned),
                data: image.data.clone(),
            }),
            other => rest.push(other.clone()),
        }
    }
    Ok((prompt_text(&rest)?, images))
}

/// The model selector of a session pinned to `model` of profile `profile` (ACP's
/// `configOptions`): one select, category `model`, whose one option is that model — dsh pins a
/// session's model when it is created.
pub(crate) fn model_selector(model: &str, profile: &str) -> Vec<SessionConfigOption> {
    let option = SessionConfigSelectOption::new(model.to_owned(), model)
        .description(format!("provider profile {profile}"));
    vec![
        SessionConfigOption::select("model", "Model", model.to_owned(), vec![option])
            .description(
                "The model this session is pinned to (start dsh acp with --model, or fork, for \
                 another)"
                    .to_owned(),
            )
            .category(SessionConfigOptionCategory::Model),
    ]
}

/// `session/set_config_option` for a session pinned to `model`: setting the model to it is
/// accepted, anything else refused, saying how to get another model.
pub(crate) fn model_choice(
    request: &SetSessionConfigOptionRequest,
    model: &str,
) -> Result<(), AcpError> {
    if request.config_id.0.as_ref() != "model" {
        return Err(invalid_params(format!(
            "unknown configuration option `{}`",
            request.config_id
        )));
    }
    match &request.value {
        SessionConfigOptionValue::ValueId { value } if value.0.as_ref() == model => Ok(()),
        _ => Err(invalid_params(format!(
            "dsh keeps a session on the model it was created with (\"{model}\"): start `dsh \
             acp --model MODEL` for new sessions on another, or fork this one with \
             `dsh --model MODEL fork SESSION`"
        ))),
    }
}

/// The first session of the `session/list` page `cursor` names: the index a previous page's
/// `nextCursor` gave (any index is a page, maybe empty); none, the first page.
pub(crate) fn list_cursor(cursor: Option<&str>) -> Result<usize, AcpError> {
    match cursor {
        None => Ok(0),
        Some(cursor) => {
            cursor.parse().map_err(|_| invalid_params(format!("unknown cursor `{cursor}`")))
        }
    }
}

/// A `session/list` page: newest first (ties by id), [`LIST_PAGE`] from `start` (the index of
/// the page's first session, [`list_cursor`]), with the next page's cursor when there is one.
pub(crate) fn session_page(
    mut sessions: Vec<SessionSummary>,
    start: usize,
) -> ListSessionsResponse {
    sessions.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then(a.session_id.cmp(&b.session_id)));
    // Saturating: a cursor near `usize::MAX` is a page past the end, not an overflow.
    let end = start.saturating_add(LIST_PAGE);
    let next = (end < sessions.len()).then(|| end.to_string());
    let page = sessions
        .into_iter()
        .skip(start)
        .take(LIST_PAGE)
        .map(|summary| {
            SessionInfo::new(summary.session_id, summary.workspace)
                .title(summary.title)
                .updated_at(iso8601(summary.updated_ms))
        })
        .collect();
    ListSessionsResponse::new(page).next_cursor(next)
}

/// A finished prompt's answer: dsh's stop reason as ACP's — a completed turn whose last step
/// finished with `length` (`finish_reason`) ran out of tokens, one with `content_filter` was
/// refused — with the turn under `_meta`; a failed turn is an error.
pub(crate) fn prompt_response(
    result: SessionPromptResult,
    finish_reason: Option<&str>,
) -> Result<PromptResponse, AcpError> {
    let stop_reason = match result.stop_reason {
        StopReason::Completed => match finish_reason {
            Some("length") => AcpStopReason::MaxTokens,
            Some("content_filter") => AcpStopReason::Refusal,
            _ => AcpStopReason::EndTurn,
        },
        StopReason::Cancelled => AcpStopReason::Cancelled,
        // A budget of the turn (its steps, tokens, cost or time) ran out.
        StopReason::MaxSteps | StopReason::Limit => AcpStopReason::MaxTurnRequests,
        // An answer that does not match the prompt's output schema is a failed turn too.
        StopReason::Error | StopReason::OutputInvalid => {
            return Err(turn_failed(result.turn, result.error));
        }
    };
    let meta = ext::turn_meta(result.turn, result.steps, &result.usage);
    Ok(PromptResponse::new(stop_reason).meta(meta))
}

/// A dsh approval as `session/request_permission`: its `toolCall` is the call as its
/// `tool_call_update` describes it (`fields`), titled with what the approval is about; options
/// allow once, always (this tool, this session) or reject, and a command may also run once
/// outside its sandbox. There is no `reject_always`: dsh has no standing denial.
pub(crate) fn permission_request(
    session_id: &str,
    asked: &ApprovalRequest,
    fields: ToolCallUpdateFields,
) -> RequestPermissionRequest {
    let option = |id: &str, name: &str, kind| PermissionOption::new(id.to_owned(), name, kind);
    let mut options = vec![
        option("allow_once", "Allow once", PermissionOptionKind::AllowOnce),
        option(
            "allow_always",
            "Always allow this tool in this session",
            PermissionOptionKind::AllowAlways,
        ),
        option("reject_once", "Reject", PermissionOptionKind::RejectOnce),
    ];
    let title = match &asked.sandbox {
        Some(sandbox) => {
            let unconfined = option(
                "allow_unconfined",
                "Allow once, outside the sandbox",
                PermissionOptionKind::AllowOnce,
            );
            options.insert(1, unconfined);
            format!("{} (sandbox: {sandbox})", asked.summary)
        }
        None => asked.summary.clone(),
    };
    let tool_call = ToolCallUpdate::new(asked.call_id.clone(), fields.title(title));
    RequestPermissionRequest::new(session_id.to_owned(), tool_call, options)
        .meta(ext::permission_meta(&asked.approval_id, asked.sandbox.as_deref()))
}

/// The dsh decision for a permission answer: the option the user selected; a cancelled
/// request (the client's answer to `session/cancel`) or an option dsh did not offer denies.
pub fn decision(response: &RequestPermissionResponse) -> ApprovalChoice {
    let RequestPermissionOutcome::Selected(selected) = &response.outcome else {
        return ApprovalChoice::Deny;
    };
    match selected.option_id.0.as_ref() {
        "allow_once" => ApprovalChoice::Allow,
        "allow_always" => ApprovalChoice::AllowAlways,
        "allow_unconfined" => ApprovalChoice::AllowUnconfined,
        _ => ApprovalChoice::Deny,
    }
}

/// Unix milliseconds as an RFC 3339 UTC timestamp.
fn iso8601(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        unix_ms % 1000
    )
}

#[cfg(test)]
mod tests;

/// The workspace's prompt commands as ACP's `available_commands_update`: each with its
/// description (else its argument hint, else its file) and, when it has an argument hint, an
/// unstructured input with that hint. The editor sends `/name args` as the prompt's text, which
/// the daemon expands (`docs/skills.md`, "Prompt commands").
pub(crate) fn available_commands(listed: &SessionCommandsResult) -> SessionUpdate {
    let commands = listed
        .commands
        .iter()
        .map(|command| {
            let about = command
                .description
                .clone()
                .or_else(|| command.argument_hint.clone())
                .unwrap_or_else(|| command.source.clone());
            let input = command.argument_hint.as_ref().map(|hint| {
                AvailableCommandInput::Unstructured(UnstructuredCommandInput::new(hint.clone()))
            });
            AvailableCommand::new(command.name.clone(), about).input(input)
        })
        .collect();
    SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands))
}

//! Pure conversions between ACP and dsh's protocol: the params of ACP requests as dsh's (a
//! `cwd` as a workspace, the editor's MCP servers, prompt blocks as text), dsh's answers as
//! ACP's (the `initialize` answer, timestamps), and the editor's permission answers as dsh's
//! decisions.

use std::collections::HashMap;

use agent_client_protocol::v1::schema;
use dsh_protocol::{ApprovalChoice, McpServerSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::invalid_params;
use crate::front::AcpError;
/// `_session/steering` params: the shape of the Claude Code and Codex adapters.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SteeringRequest {
    pub(crate) session_id: String,
    pub(crate) prompt: Vec<schema::ContentBlock>,
}

/// `session/set_config_option` params (a select's value; a boolean has no option here).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SetConfigOption {
    pub(crate) session_id: String,
    pub(crate) config_id: String,
    #[serde(default)]
    pub(crate) value: Option<Value>,
}

/// `_dsh/fork` params.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ForkRequest {
    pub(crate) session_id: String,
    /// Fork before this step (its request is the fork's next); the whole log when absent.
    #[serde(default)]
    pub(crate) step: Option<u64>,
}

pub(crate) fn initialize() -> Value {
    let steering = json!({
        "supported": true,
        "method": "_session/steering",
        "idleBehavior": "promptRequired",
    });
    json!({
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
            "sessionCapabilities": {"list": {}, "resume": {}},
            "mcpCapabilities": {"http": true, "sse": false},
            "_meta": {
                "steering": steering,
                "dsh": {
                    "version": 1,
                    "methods": ["_session/steering", "_dsh/fork", "_dsh/request"],
                    "updateMeta": ["dsh/usage", "dsh/steering"],
                },
            },
        },
        "agentInfo": {"name": "dsh", "title": "dsh", "version": env!("CARGO_PKG_VERSION")},
        "authMethods": [],
        "_meta": {"steering": steering},
    })
}

/// A session's workspace from ACP's `cwd`: absolute.
pub(crate) fn checked_cwd(cwd: &std::path::Path) -> Result<String, AcpError> {
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
pub(crate) fn server_specs(servers: &[schema::McpServer]) -> Result<Vec<McpServerSpec>, AcpError> {
    let mut specs: Vec<McpServerSpec> = Vec::new();
    let mut given: HashMap<String, String> = HashMap::new();
    for server in servers {
        let (original, spec) = match server {
            schema::McpServer::Stdio(stdio) => (
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
            ),
            schema::McpServer::Http(http) => (
                &http.name,
                McpServerSpec {
                    name: server_name(&http.name)?,
                    command: None,
                    args: Vec::new(),
                    env: Default::default(),
                    cwd: None,
                    url: Some(http.url.clone()),
                    headers: http
                        .headers
                        .iter()
                        .map(|h| (h.name.clone(), h.value.clone()))
                        .collect(),
                },
            ),
            schema::McpServer::Sse(sse) => {
                return Err(invalid_params(format!(
                    "MCP server `{}`: the SSE transport is not supported (MCP deprecated it); \
                     use its streamable-HTTP endpoint (`\"type\": \"http\"`) or run it over stdio",
                    sse.name
                )));
            }
            _ => {
                return Err(invalid_params(
                    "an MCP server of a transport dsh does not know: use stdio or http".to_owned(),
                ));
            }
        };
        if let Some(first) = given.insert(spec.name.clone(), original.clone()) {
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
/// Markdown links, embedded resources as tagged context.
pub(crate) fn prompt_text(blocks: &[schema::ContentBlock]) -> Result<String, AcpError> {
    let mut parts = Vec::new();
    for block in blocks {
        let value = serde_json::to_value(block).map_err(AcpError::into_internal_error)?;
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        match value["type"].as_str() {
            Some("text") => parts.push(text(&value["text"])),
            Some("resource_link") => {
                parts.push(format!("[@{}]({})", text(&value["name"]), text(&value["uri"])))
            }
            Some("resource") => {
                let resource = &value["resource"];
                match resource.get("text") {
                    Some(body) => parts.push(format!(
                        "<context ref=\"{}\">\n{}\n</context>",
                        text(&resource["uri"]),
                        text(body)
                    )),
                    None => {
                        return Err(invalid_params(format!(
                            "binary resource {} is not supported",
                            text(&resource["uri"])
                        )));
                    }
                }
            }
            other => {
                return Err(invalid_params(format!(
                    "{} content is not supported (see promptCapabilities)",
                    other.unwrap_or("unknown")
                )));
            }
        }
    }
    if parts.iter().all(|part| part.trim().is_empty()) {
        return Err(invalid_params("the prompt is empty"));
    }
    Ok(parts.join("\n"))
}

/// The dsh decision for a permission answer.
pub(crate) fn chosen(response: &schema::RequestPermissionResponse) -> ApprovalChoice {
    let value = serde_json::to_value(response).unwrap_or_default();
    let outcome = &value["outcome"];
    if outcome["outcome"] != "selected" {
        return ApprovalChoice::Deny;
    }
    match outcome["optionId"].as_str() {
        Some("allow_once") => ApprovalChoice::Allow,
        Some("allow_always") => ApprovalChoice::AllowAlways,
        Some("allow_unconfined") => ApprovalChoice::AllowUnconfined,
        _ => ApprovalChoice::Deny,
    }
}

/// Unix milliseconds as an RFC 3339 UTC timestamp.
pub(crate) fn iso8601(unix_ms: u64) -> String {
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

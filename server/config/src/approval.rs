//! Approval policies in files (`[approvals]`, an MCP server's `approval`): `auto`, `ask` or
//! `deny` per tool or class ([`Approval`], the session crate's, whose order of strictness the
//! agent applies too), the default of a tool nobody configured, and the rule that a workspace's
//! file only tightens them.

use std::collections::BTreeMap;

use dsh_session::Approval;
use toml::Spanned;

use crate::file::Layer;
use crate::resolve::source_line;
use crate::{ConfigError, Sourced};

/// The policy of a tool or class nobody configured (the agent's defaults: reading runs,
/// everything else asks).
fn default_for(tool: &str) -> Approval {
    if tool == "read" { Approval::Auto } else { Approval::Ask }
}

/// Takes one `[approvals]` entry of a layer: a policy name, and from a workspace's file never
/// looser than what the layers below say.
pub(crate) fn merge_approval(
    approvals: &mut BTreeMap<String, Sourced<Approval>>,
    layer: &Layer,
    tool: &str,
    policy: &Spanned<String>,
) -> Result<(), ConfigError> {
    let Ok(value) = policy.get_ref().parse::<Approval>() else {
        return Err(layer.error(
            source_line(&layer.source(policy)),
            format!("approvals.{tool}: `{}` is not a policy (auto, ask, deny)", policy.get_ref()),
        ));
    };
    // A repository's file only tightens: it may not make a tool ask less than the
    // layers below it do (a tool nobody set asks, as far as a workspace is concerned).
    let below =
        approvals.get(tool).map_or_else(|| default_for(tool), |set: &Sourced<Approval>| set.value);
    if layer.workspace && value.stricter(below) != value {
        return Err(layer.error(
            source_line(&layer.source(policy)),
            format!(
                "approvals.{tool} = \"{}\" cannot be set in a workspace's configuration: \
                 it is looser than your own (\"{}\"), and a repository may only tighten \
                 approvals; set it in your own configuration file",
                value.name(),
                below.name()
            ),
        ));
    }
    approvals.insert(tool.to_owned(), Sourced::new(value, layer.source(policy)));
    Ok(())
}

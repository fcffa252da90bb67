//! Approval policies (`[approvals]`, an MCP server's `approval`): `auto`, `ask` or `deny` per
//! tool or class, their names in files, the default of a tool nobody configured, and the rule
//! that a workspace's file only tightens them.

use std::collections::BTreeMap;

use toml::Spanned;

use crate::file::Layer;
use crate::resolve::source_line;
use crate::{ConfigError, Sourced};

/// An approval policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approval {
    /// Run without asking.
    Auto,
    /// Ask a person.
    Ask,
    /// Refuse.
    Deny,
}

impl Approval {
    /// Its name in files.
    pub fn name(self) -> &'static str {
        match self {
            Approval::Auto => "auto",
            Approval::Ask => "ask",
            Approval::Deny => "deny",
        }
    }

    /// The policy of a tool or class nobody configured (the agent's defaults: reading runs,
    /// everything else asks).
    pub fn default_for(tool: &str) -> Approval {
        if tool == "read" { Approval::Auto } else { Approval::Ask }
    }

    /// How much it holds back: `auto` < `ask` < `deny`.
    pub fn strictness(self) -> u8 {
        match self {
            Approval::Auto => 0,
            Approval::Ask => 1,
            Approval::Deny => 2,
        }
    }

    /// A policy by its name in files.
    pub(crate) fn parse(text: &str) -> Option<Approval> {
        match text {
            "auto" => Some(Approval::Auto),
            "ask" => Some(Approval::Ask),
            "deny" => Some(Approval::Deny),
            _ => None,
        }
    }
}

/// Takes one `[approvals]` entry of a layer: a policy name, and from a workspace's file never
/// looser than what the layers below say.
pub(crate) fn merge_approval(
    approvals: &mut BTreeMap<String, Sourced<Approval>>,
    layer: &Layer,
    tool: &str,
    policy: &Spanned<String>,
) -> Result<(), ConfigError> {
    let Some(value) = Approval::parse(policy.get_ref()) else {
        return Err(layer.error(
            source_line(&layer.source(policy)),
            format!("approvals.{tool}: `{}` is not a policy (auto, ask, deny)", policy.get_ref()),
        ));
    };
    // A repository's file only tightens: it may not make a tool ask less than the
    // layers below it do (a tool nobody set asks, as far as a workspace is concerned).
    let below = approvals
        .get(tool)
        .map_or_else(|| Approval::default_for(tool), |set: &Sourced<Approval>| set.value);
    if layer.workspace && value.strictness() < below.strictness() {
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

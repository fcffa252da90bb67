//! Approval policies (`[approvals]`, an MCP server's `approval`): `auto`, `ask` or `deny` per
//! tool or class, their names in files, and the default of a tool nobody configured.

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
}

/// A policy by its name in files.
pub(crate) fn parse_approval(text: &str) -> Option<Approval> {
    match text {
        "auto" => Some(Approval::Auto),
        "ask" => Some(Approval::Ask),
        "deny" => Some(Approval::Deny),
        _ => None,
    }
}

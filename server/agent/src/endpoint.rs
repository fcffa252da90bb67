//! Where a request goes — the client, wire format and context settings of the provider profile
//! a request is pinned to — and the rest of what the configuration says about a step (approvals,
//! instruction files). The loop asks again at every step, so a configuration change (a new
//! base URL, other wire options) reaches the next request of a running session; a change of
//! what the model sees (the wire format) becomes a logged header change like any other.

use std::sync::Arc;

use dsh_provider::DeepSeek;
use dsh_session::{LlmCallConfig, Price, WireFormat};

use crate::approval::ApprovalPolicy;
use crate::compact::ContextConfig;
use crate::prompt::InstructionPolicy;
use crate::tools::WebSettings;

/// What the configuration says, now, about one profile and model.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The HTTP client (its base URL, key and headers).
    pub client: DeepSeek,
    /// The wire format requests are written in (`None`: DeepSeek's).
    pub wire: Option<WireFormat>,
    /// Context-pressure settings for this model (its window, the thresholds); `None` turns
    /// trimming and compaction off. Used when the loop's policy is `ModelDefaults`.
    pub context: Option<ContextConfig>,
    /// The approval policy the configuration gives now; `None` keeps the loop's own.
    pub approvals: Option<ApprovalPolicy>,
    /// The policy of the user's own configuration alone (no workspace file): each call takes
    /// the stricter of it and [`Endpoint::approvals`], so that a workspace's per-tool entry
    /// never loosens the user's class policy (`command = "deny"` against `run_command = "ask"`).
    pub user_approvals: Option<ApprovalPolicy>,
    /// The instruction files read into the system prompt; `None`: the built-in list.
    pub instruction_files: Option<Vec<String>>,
    /// What an edit of an instruction file does; `None` keeps the loop's own policy.
    pub instruction_policy: Option<InstructionPolicy>,
    /// `web_fetch`'s rules and limits (`[web]`) as configured now; `None` keeps the loop's own.
    pub web: Option<WebSettings>,
    /// The user's dsh directory (the one holding the user's configuration file): its
    /// `AGENTS.md` is the global instruction file, its `skills/` the global skills. `None`:
    /// none.
    pub user_dir: Option<std::path::PathBuf>,
    /// The skills found now (the user's and the workspace's, `docs/skills.md`): offered through
    /// the `skill` tool when there are any.
    pub skills: Vec<dsh_session::prompt_file::Skill>,
    /// The model's prices, as configured now (`None`: no price known): what a step costs, as
    /// `session/usage` prices it, when the turn has a cost budget.
    pub price: Option<Price>,
    /// Whether the model reads images (its `images` setting, as configured now): a request
    /// carrying images is not sent to one that does not, and a `read_file` of an image gives
    /// it a description instead of the image.
    pub images: bool,
    /// The most images one request to the model may carry (its `max_images`).
    pub max_images: u32,
    /// How errors name the endpoint: the profile and the URL (never a key).
    pub label: String,
}

/// Resolves the profile and model of a call config to an endpoint.
pub trait Endpoints: Send + Sync {
    /// The endpoint for `call`'s profile and model, or why there is none (an unknown profile,
    /// a missing key), in words that name the profile.
    fn endpoint(&self, call: &LlmCallConfig) -> Result<Endpoint, String>;
}

/// One client for every request, DeepSeek's format (tests, benchmarks, the library's simple
/// use).
impl Endpoints for DeepSeek {
    fn endpoint(&self, call: &LlmCallConfig) -> Result<Endpoint, String> {
        Ok(Endpoint {
            client: self.clone(),
            wire: None,
            context: Some(ContextConfig::for_model(&call.model)),
            approvals: None,
            user_approvals: None,
            instruction_files: None,
            instruction_policy: None,
            web: None,
            user_dir: None,
            skills: Vec::new(),
            price: None,
            images: false,
            max_images: 0,
            label: self.url().to_owned(),
        })
    }
}

/// A shared resolver.
pub type SharedEndpoints = Arc<dyn Endpoints>;

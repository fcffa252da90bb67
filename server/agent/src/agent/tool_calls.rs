//! A step's tools: the schemas offered (the built-in tools, then the MCP tools asked for now,
//! the wait for starting servers logged as `mcp/wait`) and each call the model made — decided by
//! [`decide`] (run, ask, refuse), asked and logged (`approval/request`, `approval/decision`),
//! then run with the turn's token (`tool/call`; confined unless approved unconfined), with what
//! it leaves the agent knowing of the workspace's files, or the plan it sets (`update_plan`,
//! logged as `plan/update` after its result), or the skill it loads (`skill`, offered when
//! there are skills). Every call is answered.

use std::sync::Arc;

use dsh_session::{
    ApprovalDecision, ApprovalRequest, ApprovalVerdict, EventData, ImageRef, MAX_IMAGE_BYTES,
    PlanUpdate, ToolCall, ToolCallStarted, ToolResult, ToolSchema,
};
use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::approval::{ApprovalPolicy, CallFacts, Policy, decide};
use crate::error::AgentError;
use crate::external::ExternalTool;
use crate::owner::SessionHandle;
use crate::seen::Memory;
use crate::tools::skill::{self, SKILL_TOOL};
use crate::tools::{Access, FileImage, RunAs, plan};

impl Agent {
    /// The tool schemas of the next request: the built-in tools in their order, then the
    /// external ones sorted by name (a name taken by a built-in tool is left out). Waiting for
    /// MCP servers is logged (`mcp/wait`) when it starts; a cancel ends the wait (`None`).
    pub(super) async fn tool_schemas(
        &mut self,
        session: &SessionHandle,
        cancel: &CancellationToken,
    ) -> Result<Option<Vec<ToolSchema>>, AgentError> {
        let mut schemas = self.toolbox.schemas();
        // The `task` tool, when children may be started (or this session forked from a parent
        // that offered it: its header stays the parent's), in name order with the others.
        let task = self.subagents.as_ref().is_some_and(|subagents| subagents.offered());
        if task {
            schemas.push(crate::subagents::task_schema());
            schemas.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let skills = (!self.skills.is_empty()).then(|| skill::schema(&self.skills));
        schemas.extend(skills);
        let mut external = match self.external.clone() {
            Some(external) => {
                let (waits, mut waited) = tokio::sync::mpsc::unbounded_channel();
                let listing = external.tools(waits);
                tokio::pin!(listing);
                let listed = loop {
                    // Cancel-safety: `cancelled()` and `recv()` are cancel-safe; the listing is
                    // pinned here and polled again next time round (dropped on cancel, which
                    // only ends a wait). A wait is logged when it starts, before its end.
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return Ok(None),
                        Some(wait) = waited.recv() => {
                            session.append(EventData::McpWait(wait)).await?;
                        }
                        listed = &mut listing => break listed,
                    }
                };
                // A wait announced in the same poll that ended it.
                while let Ok(wait) = waited.try_recv() {
                    session.append(EventData::McpWait(wait)).await?;
                }
                listed
            }
            None => Vec::new(),
        };
        external.retain(|tool| {
            let taken = self.toolbox.access(&tool.schema.name).is_some()
                || (task && tool.schema.name == dsh_session::TASK_TOOL)
                || (tool.schema.name == SKILL_TOOL && !self.skills.is_empty());
            if taken {
                tracing::warn!(
                    tool = %tool.schema.name,
                    server = %tool.server,
                    "an MCP tool's name is taken by a built-in tool: left out"
                );
            }
            !taken
        });
        external.sort_by(|a, b| a.schema.name.cmp(&b.schema.name));
        external.dedup_by(|a, b| a.schema.name == b.schema.name);
        schemas.extend(external.iter().map(|tool| tool.schema.clone()));
        self.external_tools = external;
        Ok(Some(schemas))
    }

    /// Runs one call: its result, and the plan it sets when it is a valid `update_plan` call
    /// (the caller logs it as `plan/update` right after the result).
    pub(super) async fn run_tool(
        &mut self,
        session: &SessionHandle,
        step: u64,
        call: &ToolCall,
        cancel: &CancellationToken,
    ) -> Result<(ToolResult, Option<PlanUpdate>), AgentError> {
        let refuse = |content: String| ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error: true,
            seen: None,
            images: Vec::new(),
        };
        if cancel.is_cancelled() {
            return Ok((refuse("not run: the turn was cancelled".to_owned()), None));
        }
        if let Some(blocked) = self.pre_tool_hooks(session, call, cancel).await? {
            return Ok((blocked, None));
        }
        let access = self.toolbox.access(&call.name);
        if access.is_none() && call.name == SKILL_TOOL && !self.skills.is_empty() {
            // Loading a skill reads only the skill's own files: it runs without approval.
            let started = ToolCallStarted {
                step,
                call_id: call.id.clone(),
                name: call.name.clone(),
                unconfined: false,
            };
            session.append(EventData::ToolCall(started)).await?;
            // It ran: its `PostToolUse` hooks see its result.
            self.call_ran = true;
            let output =
                skill::call(&self.skills, self.toolbox.workspace().beneath(), &call.arguments);
            let result = ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: output.content,
                is_error: output.is_error,
                seen: None,
                images: Vec::new(),
            };
            return Ok((result, None));
        }
        let external = match access {
            Some(_) => None,
            None => self.external_tools.iter().find(|tool| tool.schema.name == call.name).cloned(),
        };
        let is_command = access == Some(Access::Command);
        let sandbox = self.toolbox.sandbox();
        let mut run_as = RunAs::Sandboxed;
        // An MCP tool's own policy: the stricter of now and as the turn first saw it.
        let server_policy = external.as_ref().map(|tool| {
            let first = *self.turn_external.entry(call.name.clone()).or_insert(tool.policy);
            tool.policy.stricter(first)
        });
        // The stricter of the policy now, as the turn began (a loosened configuration waits
        // for the next turn), and the user's own (a workspace's file never loosens it).
        let policies: Vec<&ApprovalPolicy> =
            [Some(&self.config.approvals), self.turn_floor.as_ref(), self.user_approvals.as_ref()]
                .into_iter()
                .flatten()
                .collect();
        let facts = CallFacts {
            tool: &call.name,
            access,
            server_policy,
            policies: &policies,
            // A sandbox weaker than its policy (a kernel without Landlock or user namespaces,
            // or none at all) makes every command ask.
            sandbox_degraded: sandbox.approval_required(),
            // The agent's own writes to what configures dsh or runs at the user's next git
            // command (`.dsh/`, `.git/hooks`, `.git/config`) ask, whatever the policy.
            protected_write: access == Some(Access::Write)
                && self.toolbox.protected_path(&call.arguments).is_some(),
        };
        // An earlier "allow always" is looked up only when it could change the decision; the
        // fold reads only the events logged since the last call.
        let allowed_always = facts.consults_allow_always() && {
            let mut fold = std::mem::take(&mut self.allow_always);
            fold = session
                .query(move |s| {
                    fold.fold(s.events());
                    fold
                })
                .await?;
            let allowed = fold.allows(&call.name);
            self.allow_always = fold;
            allowed
        };
        match decide(&facts, allowed_always) {
            Policy::Auto => {}
            Policy::Deny => {
                return Ok((
                    refuse(format!(
                        "refused: the approval policy denies `{}` in this session",
                        call.name
                    )),
                    None,
                ));
            }
            Policy::Ask => {
                let request = ApprovalRequest {
                    approval_id: format!("approval-{}", call.id),
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    summary: match &external {
                        Some(tool) => describe_external(tool, &call.arguments),
                        None => self.toolbox.describe_call(&call.name, &call.arguments),
                    },
                    sandbox: is_command.then(|| sandbox.label()),
                };
                // Ask first, log second: the approver is ready for an answer before any
                // client can see the request.
                let answer = self.approver.ask(&request, cancel);
                session.append(EventData::ApprovalRequest(request.clone())).await?;
                let verdict = answer.await;
                let verdict = if cancel.is_cancelled() { ApprovalVerdict::Deny } else { verdict };
                let decision = ApprovalDecision {
                    approval_id: request.approval_id.clone(),
                    decision: verdict,
                };
                session.append(EventData::ApprovalDecision(decision)).await?;
                match verdict {
                    ApprovalVerdict::Allow | ApprovalVerdict::AllowAlways => {}
                    ApprovalVerdict::AllowUnconfined => run_as = RunAs::Unconfined,
                    ApprovalVerdict::Deny => {
                        let denied = "denied: the user did not approve this call".to_owned();
                        return Ok((refuse(denied), None));
                    }
                    ApprovalVerdict::Timeout => {
                        let late = "denied: nobody answered the approval request in time";
                        return Ok((refuse(late.to_owned()), None));
                    }
                }
            }
        }
        let unconfined = is_command && (run_as == RunAs::Unconfined || !sandbox.confines());
        let started =
            ToolCallStarted { step, call_id: call.id.clone(), name: call.name.clone(), unconfined };
        session.append(EventData::ToolCall(started)).await?;
        self.call_ran = true;
        let (output, plan) = match (&external, &self.external) {
            (Some(_), Some(tools)) => (tools.call(&call.name, &call.arguments, cancel).await, None),
            _ if access == Some(Access::Plan) => plan::update(&call.id, &call.arguments),
            _ if access == Some(Access::Web) => {
                (self.toolbox.web_fetch(&self.config.web, &call.arguments, cancel).await, None)
            }
            _ => (self.toolbox.call_as(&call.name, &call.arguments, cancel, run_as).await, None),
        };
        // What the call leaves the agent knowing of the workspace's files: the file it read or
        // wrote, or what a command changed among those it knew.
        let seen = match &output.seen {
            Some(seen) => {
                let workspace = self.toolbox.workspace().clone();
                let seen = seen.clone();
                self.with_memory(session, move |memory, _| vec![memory.record(&workspace, &seen)])
                    .await?
            }
            None if is_command => self.with_memory(session, Memory::after_command).await?,
            None => Vec::new(),
        };
        let (content, is_error, images) = match output.image {
            Some(image) => self.file_image(image).await,
            None => (output.content, output.is_error, Vec::new()),
        };
        let result = ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error,
            seen: (!seen.is_empty()).then_some(seen),
            images,
        };
        Ok((result, plan))
    }

    /// The result of a `read_file` that found an image: for a model that reads images, the
    /// image (stored once through the images seam) after a line naming it; for one that does
    /// not, the line and why it is not shown. Over [`MAX_IMAGE_BYTES`], an error naming the
    /// limit. Content, whether it is an error, and the images.
    async fn file_image(&mut self, image: FileImage) -> (String, bool, Vec<ImageRef>) {
        let line = image.describe();
        if !self.step_images.reads {
            let model = &self.step_images.model;
            let said = format!("{line}; not shown: model {model} does not read images");
            return (said, false, Vec::new());
        }
        if image.bytes.is_some()
            && let Some(why) = self.step_images.no_room_for(image.size)
        {
            // Told to the model, not failed: the conversation goes on without it (compacting
            // makes room again).
            return (format!("{line}; not shown: {why}"), false, Vec::new());
        }
        let Some(bytes) = image.bytes else {
            let said = format!(
                "{line}: over the limit of {MAX_IMAGE_BYTES} bytes for an image a model is given"
            );
            return (said, true, Vec::new());
        };
        let Some(objects) = &self.image_objects else {
            return (format!("{line}; not shown: images cannot be stored here"), true, Vec::new());
        };
        match objects.store(Arc::clone(&bytes)).await {
            Ok(sha256) => {
                // The next request writes it from here, without reading it back.
                self.image_cache.insert(sha256.clone(), bytes);
                self.step_images.carried += 1;
                self.step_images.bytes += image.size;
                let stored = ImageRef {
                    sha256,
                    size: image.size,
                    media_type: image.format.media_type().to_owned(),
                    name: Some(image.path),
                };
                (format!("{line}; the image follows"), false, vec![stored])
            }
            Err(why) => (format!("{line}; not shown: storing it failed: {why}"), true, Vec::new()),
        }
    }
}

/// One line for an approval prompt about an external tool's call: the server, the tool, and
/// the arguments cut to a line.
fn describe_external(tool: &ExternalTool, arguments: &str) -> String {
    const MAX: usize = 160;
    let tool_name =
        tool.schema.name.strip_prefix(&format!("{}__", tool.server)).unwrap_or(&tool.schema.name);
    let mut line: String = arguments.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() > MAX {
        let mut cut = MAX;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    format!("MCP server {}: {tool_name} {line}", tool.server)
}

//! Instruction edits and nested instruction files: which system prompt the next request gets under the instruction policy
//! (`docs/loop.md`, "Instruction edits") — rendered with the files as they are (`rewrite`, or
//! whenever the prefix is rewritten anyway), or kept as the model knows it with the edit
//! appended first as a logged `instructions` note (`append`), so the provider's cache holds. A
//! nested `AGENTS.md` joins the files the model should know once the agent's tools touched a
//! file under its directory, so it reaches the model the same way: an appended note.

use dsh_session::{
    ContextMessage, EpochHeader, EventData, HeaderPlan, INSTRUCTIONS_SOURCE, LlmCallConfig,
    ToolSchema, plan_header_event,
};

use super::Agent;
use crate::endpoint::Endpoint;
use crate::error::AgentError;
use crate::owner::SessionHandle;
use crate::prompt::{
    INSTRUCTION_FILES, InstructionPolicy, InstructionSources, instructions_in, instructions_note,
    nested_instruction_dirs, read_instruction_sources, render_system_prompt,
};

impl Agent {
    /// The system prompt of the next request under the instruction policy: rendered with the
    /// instruction files as they are now, or — when only they changed and nothing rewrites the
    /// prefix anyway (a compaction since the last step, another header change) — with the files as the
    /// model knows them, the edit appended first as a logged `instructions` note.
    pub(super) async fn system_prompt(
        &mut self,
        session: &SessionHandle,
        endpoint: &Endpoint,
        pinned: &LlmCallConfig,
        tools: &[ToolSchema],
    ) -> Result<String, AgentError> {
        let sandbox = self.toolbox.sandbox().prompt_text();
        let files: Vec<String> = match &endpoint.instruction_files {
            Some(files) => files.clone(),
            None => INSTRUCTION_FILES.iter().map(|name| (*name).to_owned()).collect(),
        };
        // What the model knows: the last note standing, while it is on the surface (a
        // compaction may have summarized it away), or else the system prompt itself. The files
        // the agent's tools touched say which nested instruction files apply.
        let mut fold = std::mem::take(&mut self.instructions);
        let mut touched = std::mem::take(&mut self.touched);
        let (fold, touched, note_on_surface) = session
            .query(move |s| {
                fold.advance(s.events());
                touched.advance(s.events());
                let on_surface =
                    fold.noted().map(|noted| s.surface().iter().any(|entry| entry.id == noted.seq));
                (fold, touched, on_surface)
            })
            .await?;
        self.instructions = fold;
        self.touched = touched;
        let beneath = self.toolbox.workspace().beneath();
        let sources = InstructionSources {
            global: endpoint.user_dir.as_ref().map(|dir| dir.join("AGENTS.md")),
            files,
            nested: nested_instruction_dirs(beneath, self.touched.files().keys()),
        };
        let current = read_instruction_sources(beneath, &sources);
        let rewritten = render_system_prompt(&self.workspace, &current, &sandbox);
        let policy = endpoint.instruction_policy.unwrap_or(self.config.instructions);
        if policy == InstructionPolicy::Rewrite {
            return Ok(rewritten);
        }
        if self.instructions.compacted_since_last_step() {
            return Ok(rewritten);
        }
        let Some(header) = self.instructions.header().cloned() else { return Ok(rewritten) };
        let Some(system) = header.system.as_deref() else { return Ok(rewritten) };
        let Some((in_prompt, kept)) =
            instructions_in(system, &self.workspace, &sources.names(), &sandbox)
        else {
            return Ok(rewritten);
        };
        let known = match (self.instructions.noted(), note_on_surface) {
            (Some(_), Some(false)) => return Ok(rewritten),
            (Some(noted), _) => noted.files.clone(),
            (None, _) => in_prompt,
        };
        // The common step: no note stands and the files are what the prompt holds.
        if self.instructions.noted().is_none() && known == current {
            return Ok(kept);
        }
        // A header that changes anyway takes the files as they are: the rewrite costs nothing
        // more, and every note since is superseded.
        let mut config = self.seed_config(Some(&header));
        config.wire.clone_from(&endpoint.wire);
        debug_assert_eq!(config.profile, pinned.profile);
        let candidate = EpochHeader::new(config, Some(kept.clone()), tools.to_vec());
        if !matches!(plan_header_event(Some(&header), &candidate, false), HeaderPlan::Unchanged) {
            return Ok(rewritten);
        }
        if known != current {
            let (text, files) = instructions_note(&known, &current);
            let note = ContextMessage {
                text,
                source: Some(INSTRUCTIONS_SOURCE.to_owned()),
                instructions: Some(current),
                files: Some(files),
            };
            session.append(EventData::ContextMessage(note)).await?;
        }
        Ok(kept)
    }
}

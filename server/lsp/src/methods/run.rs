//! `agent/prompt`, `agent/abort`, `agent/compact`: parse → [`AgentSession`] call → wire result.

use std::sync::Arc;

use pi_core::harness::{AgentSession, PromptOutcome};
use tower_lsp_server::jsonrpc::Result;

use super::{core_error, images};
use crate::ctx::Ctx;
use crate::protocol::{
    AbortParams, AbortResult, CompactParams, CompactResult, DeliverAs, PromptDisposition,
    PromptParams, PromptResult, StreamingBehavior,
};

/// `agent/prompt {text, images?, sessionId?, model?, streamingBehavior?}` →
/// `{sessionId, runId, queued, queueId?, command?}` (`command` when `/name args` ran an
/// extension command instead of a prompt; see [`AgentSession::prompt`]).
pub(crate) async fn agent_prompt(cx: Ctx, p: PromptParams) -> Result<PromptResult> {
    let images = images(p.images.as_deref(), "images")?;
    let session: Arc<AgentSession> = match &p.session_id {
        Some(id) => cx.session(id).await?,
        None => cx.create_session(p.model.as_deref(), None, None)?,
    };
    let behavior = p.streaming_behavior.map(|b| match b {
        StreamingBehavior::Steer => DeliverAs::Steer,
        StreamingBehavior::FollowUp => DeliverAs::FollowUp,
    });
    let outcome = session
        .prompt(&p.text, images, behavior, p.model.as_deref())
        .await
        .map_err(core_error)?;
    let session_id = session.id().to_string();
    Ok(match outcome {
        PromptOutcome::Command(name) => PromptResult {
            session_id,
            run_id: String::new(),
            queued: false,
            queue_id: None,
            command: Some(name),
            disposition: PromptDisposition::Handled,
        },
        PromptOutcome::Started { run_id } => PromptResult {
            session_id,
            run_id,
            queued: false,
            queue_id: None,
            command: None,
            disposition: PromptDisposition::Started,
        },
        PromptOutcome::Queued { queue_id, run_id } => PromptResult {
            session_id,
            run_id: run_id.unwrap_or_default(),
            queued: true,
            queue_id: Some(queue_id),
            command: None,
            disposition: PromptDisposition::Queued,
        },
    })
}

/// `agent/abort {sessionId}` → what was stopped ([`AgentSession::abort`]); idempotent.
pub(crate) async fn agent_abort(cx: Ctx, p: AbortParams) -> Result<AbortResult> {
    let Some(session) = cx.open_session(&p.session_id)? else {
        return Ok(AbortResult {
            aborted: false,
            run_id: None,
            stopped_tool_calls: Vec::new(),
            stopped_processes: Vec::new(),
            applied_edits: Vec::new(),
            pending_edits: Vec::new(),
            queued_messages: Vec::new(),
        });
    };
    Ok(session.abort().await)
}

/// `agent/compact {sessionId, instructions?}` → Pi's `CompactionResult` once the
/// `compaction` entry is written ([`AgentSession::compact`]). `$/cancelRequest` drops this
/// future: the compaction is then cancelled as by `agent/abort` (nothing is written).
pub(crate) async fn agent_compact(cx: Ctx, p: CompactParams) -> Result<CompactResult> {
    // Like every session method: a session file not open yet is opened on first use.
    let session = cx.session(&p.session_id).await?;
    session
        .compact(p.instructions)
        .await
        .map(CompactResult)
        .map_err(core_error)
}

//! Queued messages and run switches: `agent/steer`, `agent/followUp`, `agent/sendMessage`
//! (Pi's custom messages with `deliverAs`), `agent/queue/setModes`, `agent/queue/clear`,
//! `agent/queue/remove`, `agent/queue/edit`, `agent/retry/set`, `agent/retry/abort`,
//! `agent/compaction/set`. The queue itself is the session's
//! ([`pi_core::harness::AgentSession::queue`]); its changes reach the client as
//! `agent/queueUpdate` ([`crate::sink`]).

use pi_core::extension::CustomMessage;
use pi_core::QueueMode;
use serde::{Deserialize, Serialize};
use tower_lsp_server::jsonrpc::Result;

use super::{core_error, images, invalid};
use crate::ctx::Ctx;
use crate::protocol::{
    CompactionSetParams, CompactionSetResult, DeliverAs, FollowUpParams, FollowUpResult,
    QueueClearResult, QueueModeName, QueueModesResult, QueueSetModesParams, RetryAbortResult,
    RetrySetParams, RetrySetResult, SendMessageParams, SendMessageResult, SessionParams,
    SteerParams, SteerResult,
};

fn mode(m: QueueModeName) -> QueueMode {
    match m {
        QueueModeName::OneAtATime => QueueMode::OneAtATime,
        QueueModeName::All => QueueMode::All,
    }
}

/// The wire name of a queue mode.
pub(crate) fn mode_name(m: QueueMode) -> QueueModeName {
    match m {
        QueueMode::OneAtATime => QueueModeName::OneAtATime,
        QueueMode::All => QueueModeName::All,
    }
}

/// `agent/queue/remove` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueRemoveParams {
    pub session_id: String,
    pub queue_id: String,
}

/// `agent/queue/remove` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct QueueRemoveResult {
    /// False when the message is not queued (delivered already, dropped, or unknown).
    pub removed: bool,
}

/// `agent/queue/edit` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueEditParams {
    pub session_id: String,
    pub queue_id: String,
    /// The new text (steering and follow-ups: expanded like a prompt, templates and skills;
    /// images stay).
    pub text: String,
}

/// `agent/queue/edit` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct QueueEditResult {
    /// False when the message is not queued (delivered already, dropped, or unknown).
    pub edited: bool,
}

/// Pi's `steer` / `followUp` ([`pi_core::harness::AgentSession::queue_text`]).
async fn queue_text(cx: &Ctx, p: SteerParams, how: DeliverAs) -> Result<SteerResult> {
    let session = cx.session(&p.session_id).await?;
    let images = images(p.images.as_deref(), "images")?;
    let (queue_id, run_id) = session
        .queue_text(&p.text, images, how)
        .await
        .map_err(core_error)?;
    Ok(SteerResult {
        session_id: p.session_id,
        queue_id,
        run_id,
    })
}

/// `agent/steer {sessionId, text, images?}` → `{sessionId, queueId, runId?}`.
pub(crate) async fn agent_steer(cx: Ctx, p: SteerParams) -> Result<SteerResult> {
    queue_text(&cx, p, DeliverAs::Steer).await
}

/// `agent/followUp {sessionId, text, images?}` → `{sessionId, queueId, runId?}`.
pub(crate) async fn agent_follow_up(cx: Ctx, p: FollowUpParams) -> Result<FollowUpResult> {
    queue_text(&cx, p, DeliverAs::FollowUp).await
}

/// `agent/sendMessage {sessionId, customType, content, display?, details?, deliverAs?,
/// triggerTurn?}` (Pi's `sendCustomMessage`;
/// [`pi_core::harness::AgentSession::send_custom_message`]).
pub(crate) async fn agent_send_message(cx: Ctx, p: SendMessageParams) -> Result<SendMessageResult> {
    let content = serde_json::to_value(&p.content).map_err(|e| invalid("content", e))?;
    let session = cx.session(&p.session_id).await?;
    let sent = session
        .send_custom_message(CustomMessage {
            custom_type: p.custom_type,
            content,
            display: p.display,
            details: p.details,
            deliver_as: p.deliver_as,
            trigger_turn: p.trigger_turn,
        })
        .await
        .map_err(core_error)?;
    Ok(SendMessageResult {
        session_id: p.session_id,
        queue_id: sent.queue_id,
        entry_id: sent.entry_id,
        run_id: sent.run_id,
    })
}

/// `agent/queue/setModes {sessionId, steering?, followUp?}` → both modes now.
pub(crate) async fn queue_set_modes(cx: Ctx, p: QueueSetModesParams) -> Result<QueueModesResult> {
    let session = cx.session(&p.session_id).await?;
    let (st, fu) = session.set_queue_modes(p.steering.map(mode), p.follow_up.map(mode));
    Ok(QueueModesResult {
        steering: mode_name(st),
        follow_up: mode_name(fu),
    })
}

/// `agent/queue/clear {sessionId}` → the dropped messages (Pi's `clearQueue`).
pub(crate) async fn queue_clear(cx: Ctx, p: SessionParams) -> Result<QueueClearResult> {
    let session = cx.session(&p.session_id).await?;
    Ok(QueueClearResult::from_dropped(session.clear_queue().await))
}

/// `agent/queue/remove {sessionId, queueId}` → `{removed}`.
pub(crate) async fn queue_remove(cx: Ctx, p: QueueRemoveParams) -> Result<QueueRemoveResult> {
    let session = cx.session(&p.session_id).await?;
    Ok(QueueRemoveResult {
        removed: session.remove_queued(&p.queue_id).await,
    })
}

/// `agent/queue/edit {sessionId, queueId, text}` → `{edited}`; an empty text is invalid
/// (remove the message instead), as is editing a queued shell command's output.
pub(crate) async fn queue_edit(cx: Ctx, p: QueueEditParams) -> Result<QueueEditResult> {
    if p.text.trim().is_empty() {
        return Err(invalid(
            "text",
            "must not be empty (agent/queue/remove takes a message out)",
        ));
    }
    let session = cx.session(&p.session_id).await?;
    let edited = session
        .edit_queued(&p.queue_id, &p.text)
        .await
        .map_err(core_error)?;
    Ok(QueueEditResult { edited })
}

/// `agent/retry/set {sessionId, enabled}` (Pi's `set_auto_retry`); applies from the next
/// run.
pub(crate) async fn retry_set(cx: Ctx, p: RetrySetParams) -> Result<RetrySetResult> {
    cx.session(&p.session_id).await?.set_auto_retry(p.enabled);
    Ok(RetrySetResult { enabled: p.enabled })
}

/// `agent/compaction/set {sessionId, enabled}` (Pi's `set_auto_compaction`): automatic
/// compaction on or off for this session from its next run; `agent/compact` works either way.
pub(crate) async fn compaction_set(cx: Ctx, p: CompactionSetParams) -> Result<CompactionSetResult> {
    cx.session(&p.session_id)
        .await?
        .set_auto_compaction(p.enabled);
    Ok(CompactionSetResult { enabled: p.enabled })
}

/// `agent/retry/abort {sessionId}` (Pi's `abort_retry`): when a failed request waits for
/// its retry, stops retrying and ends the run; otherwise changes nothing.
pub(crate) async fn retry_abort(cx: Ctx, p: SessionParams) -> Result<RetryAbortResult> {
    let session = cx.session(&p.session_id).await?;
    Ok(RetryAbortResult {
        cancelled: session.abort_retry().await,
    })
}

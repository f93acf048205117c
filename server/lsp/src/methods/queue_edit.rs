//! `agent/queue/remove` and `agent/queue/edit`: one queued message (by its `queueId`) taken
//! out or given a new text before the loop delivers it. The outcome is told twice: in the
//! answer (`removed` / `edited`: false when the message was delivered already or is unknown)
//! and, when it changed, by `agent/queueUpdate` (state `removed`, or `queued` with the new
//! text).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;

use super::invalid;
use crate::protocol::{parse_params, QueueState};
use crate::server::{lock, Backend};
use crate::sink::send_queue_update;

/// `agent/queue/remove` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueRemoveParams {
    pub session_id: String,
    pub queue_id: String,
}

/// `agent/queue/remove` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueRemoveResult {
    /// False when the message is not queued (delivered already, dropped, or unknown).
    pub removed: bool,
}

/// `agent/queue/edit` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[serde(rename_all = "camelCase")]
pub struct QueueEditResult {
    /// False when the message is not queued (delivered already, dropped, or unknown).
    pub edited: bool,
}

impl Backend {
    /// `agent/queue/remove {sessionId, queueId}` → `{removed}`.
    pub(crate) async fn queue_remove(&self, params: Value) -> Result<QueueRemoveResult> {
        let p: QueueRemoveParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let (sid, tracker, agent) = {
            let s = lock(&session);
            (s.id().to_string(), s.tracker.clone(), s.agent().clone())
        };
        let removed = tracker.remove(&p.queue_id, |m| agent.replace_queued(m, None));
        if let Some(r) = &removed {
            send_queue_update(&self.state.client, &sid, &tracker, r, QueueState::Removed).await;
        }
        Ok(QueueRemoveResult {
            removed: removed.is_some(),
        })
    }

    /// `agent/queue/edit {sessionId, queueId, text}` → `{edited}`; an empty text is invalid
    /// (remove the message instead), as is editing a queued shell command's output.
    pub(crate) async fn queue_edit(&self, params: Value) -> Result<QueueEditResult> {
        let p: QueueEditParams = parse_params(params)?;
        if p.text.trim().is_empty() {
            return Err(invalid(
                "text",
                "must not be empty (agent/queue/remove takes a message out)",
            ));
        }
        let session = self.session(&p.session_id)?;
        let (sid, tracker, agent) = {
            let s = lock(&session);
            (s.id().to_string(), s.tracker.clone(), s.agent().clone())
        };
        let ws = self.state.workspace();
        let edited = tracker
            .edit(
                &p.queue_id,
                &p.text,
                |t| pi_core::harness::expand_prompt(&ws, t),
                |old, new| agent.replace_queued(old, Some(new)),
            )
            .map_err(|e| invalid("queueId", e))?;
        if let Some(r) = &edited {
            send_queue_update(&self.state.client, &sid, &tracker, r, QueueState::Queued).await;
        }
        Ok(QueueEditResult {
            edited: edited.is_some(),
        })
    }
}

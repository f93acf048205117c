//! Queued messages and run switches: `agent/steer`, `agent/followUp`, `agent/sendMessage`
//! (Pi's custom messages with `deliverAs`), `agent/queue/setModes`, `agent/queue/clear`,
//! `agent/retry/set`, `agent/retry/abort`.
//!
//! Every queued message gets a `queueId` and is reported by `agent/queueUpdate`: `queued`,
//! then `delivered` when the loop puts it into the conversation, then `consumed` when a model
//! response has seen it; or `dropped`. While no run is active, steering and follow-ups wait
//! for the next prompt (as in Pi).

use std::sync::{Arc, Mutex};

use pi_core::agent::Delivery;
use pi_core::QueueMode;
use serde_json::{json, Value};
use tower_lsp_server::jsonrpc::Result;

use super::{invalid, user_message};
use crate::protocol::{
    agent_error, codes, parse_params, CompactionSetParams, CompactionSetResult, DeliverAs,
    FollowUpParams, FollowUpResult, QueueClearResult, QueueModeName, QueueModesResult,
    QueueSetModesParams, QueueState, QueuedMessage, RetryAbortResult, RetrySetParams,
    RetrySetResult, SendMessageParams, SendMessageResult, SessionParams, SteerParams, SteerResult,
};
use crate::server::{lock, Backend, Session};
use crate::sink::send_queue_update;

fn mode(m: QueueModeName) -> QueueMode {
    match m {
        QueueModeName::OneAtATime => QueueMode::OneAtATime,
        QueueModeName::All => QueueMode::All,
    }
}

fn name(m: QueueMode) -> QueueModeName {
    match m {
        QueueMode::OneAtATime => QueueModeName::OneAtATime,
        QueueMode::All => QueueModeName::All,
    }
}

impl Backend {
    /// Pi's `steer` / `followUp`: an extension command cannot be queued (it runs through
    /// `agent/prompt`); skills and prompt templates are expanded before queueing.
    async fn queue_text(&self, p: SteerParams, how: DeliverAs) -> Result<SteerResult> {
        let session = self.session(&p.session_id)?;
        if let Some(rest) = p.text.strip_prefix('/') {
            let name = rest.split(' ').next().unwrap_or_default();
            let is_command = lock(&session)
                .extensions()
                .commands()
                .iter()
                .any(|c| c.name == name);
            if is_command {
                return Err(super::invalid(
                    "text",
                    format!(
                        "extension command \"/{name}\" cannot be queued; send it with agent/prompt (it runs at once, also during a run)"
                    ),
                ));
            }
        }
        let text = pi_core::harness::expand_prompt(&self.state.workspace(), &p.text);
        let message = user_message(&text, p.images.as_deref(), "images")?;
        let (queue_id, run_id) = self.enqueue(&session, how, message, None).await;
        Ok(SteerResult {
            session_id: p.session_id,
            queue_id,
            run_id,
        })
    }

    /// `agent/steer {sessionId, text, images?}` → `{sessionId, queueId, runId?}`.
    pub(crate) async fn agent_steer(&self, params: Value) -> Result<SteerResult> {
        let p: SteerParams = parse_params(params)?;
        self.queue_text(p, DeliverAs::Steer).await
    }

    /// `agent/followUp {sessionId, text, images?}` → `{sessionId, queueId, runId?}`.
    pub(crate) async fn agent_follow_up(&self, params: Value) -> Result<FollowUpResult> {
        let p: FollowUpParams = parse_params(params)?;
        self.queue_text(p, DeliverAs::FollowUp).await
    }

    /// `agent/sendMessage {sessionId, customType, content, display?, details?, deliverAs?,
    /// triggerTurn?}` (Pi's `sendCustomMessage`): `nextTurn` waits for the next prompt; during
    /// a run it is queued as steering (default) or follow-up; when idle it starts a run with
    /// `triggerTurn`, else it is appended to the session at once.
    pub(crate) async fn agent_send_message(&self, params: Value) -> Result<SendMessageResult> {
        let p: SendMessageParams = parse_params(params)?;
        if p.custom_type.trim().is_empty() {
            return Err(invalid("customType", "must not be empty"));
        }
        let content = serde_json::to_value(&p.content).unwrap_or(Value::Null);
        if let Some(blocks) = content.as_array() {
            if blocks.is_empty() {
                return Err(invalid("content", "must not be empty"));
            }
            if let Some(i) = blocks
                .iter()
                .position(|b| b["type"] != "text" && b["type"] != "image")
            {
                return Err(invalid(
                    &format!("content[{i}].type"),
                    "expected \"text\" or \"image\"",
                ));
            }
            // Images are checked as `agent/prompt` checks them: a bad one would only fail
            // the provider request of every later turn.
            for (i, b) in blocks.iter().enumerate() {
                if b["type"] == "image" {
                    super::check_image(
                        b["mimeType"].as_str().unwrap_or_default(),
                        b["data"].as_str().unwrap_or_default(),
                        &format!("content[{i}]"),
                    )?;
                }
            }
        }
        let mut fields =
            json!({"customType": p.custom_type, "content": content, "display": p.display});
        if let Some(d) = &p.details {
            fields["details"] = d.clone();
        }
        // The model's view of it, as the session loader builds it.
        let mut as_message = fields.clone();
        as_message["role"] = json!("custom");
        as_message["timestamp"] = json!(pi_ai::types::now_millis());
        let message = pi_core::session::convert_message(&as_message)
            .ok_or_else(|| invalid("content", "expected a string or text/image blocks"))?;
        let session = self.session(&p.session_id)?;
        let entry = Some(("custom_message".to_string(), fields.clone()));
        let streaming = lock(&session).agent().is_streaming();
        let how = match (p.deliver_as, streaming) {
            (Some(DeliverAs::NextTurn), _) => Some(DeliverAs::NextTurn),
            (Some(DeliverAs::FollowUp), true) => Some(DeliverAs::FollowUp),
            (_, true) => Some(DeliverAs::Steer),
            (_, false) => None,
        };
        if let Some(how) = how {
            let (queue_id, run_id) = self.enqueue(&session, how, message, entry).await;
            return Ok(SendMessageResult {
                session_id: p.session_id,
                queue_id: Some(queue_id),
                entry_id: None,
                run_id,
            });
        }
        let s = lock(&session);
        if p.trigger_turn {
            // Delivered by the run: tracked so it is stored as a custom_message entry.
            s.tracker.queue(DeliverAs::Steer, message.clone(), entry);
            let run_id = s.prompt(vec![message]).map_err(|_| {
                agent_error(
                    codes::SESSION_BUSY,
                    format!("session {} is running", s.id()),
                )
            })?;
            return Ok(SendMessageResult {
                session_id: p.session_id,
                queue_id: None,
                entry_id: None,
                run_id: Some(run_id),
            });
        }
        let entry_id = append_now(&s, "custom_message", fields, Some(message))?;
        Ok(SendMessageResult {
            session_id: p.session_id,
            queue_id: None,
            entry_id: Some(entry_id),
            run_id: None,
        })
    }

    /// `agent/queue/setModes {sessionId, steering?, followUp?}` → both modes now.
    pub(crate) async fn queue_set_modes(&self, params: Value) -> Result<QueueModesResult> {
        let p: QueueSetModesParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let s = lock(&session);
        let (st, fu) = s.agent().queue_modes();
        let st = p.steering.map(mode).unwrap_or(st);
        let fu = p.follow_up.map(mode).unwrap_or(fu);
        s.agent().set_queue_modes(st, fu);
        Ok(QueueModesResult {
            steering: name(st),
            follow_up: name(fu),
        })
    }

    /// `agent/queue/clear {sessionId}` → the dropped messages (Pi's `clearQueue`).
    pub(crate) async fn queue_clear(&self, params: Value) -> Result<QueueClearResult> {
        let p: SessionParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        Ok(QueueClearResult {
            dropped: self.drop_queue(&session).await,
        })
    }

    /// Drops every tracked queued message of `session` (reporting each); messages queued by
    /// others (untracked) are put back.
    pub(crate) async fn drop_queue(&self, session: &Arc<Mutex<Session>>) -> Vec<QueuedMessage> {
        let (sid, tracker, dropped) = {
            let s = lock(session);
            let taken = s.agent().take_queued();
            let (dropped, keep) = s.tracker.drop_all(taken);
            for m in keep {
                s.agent().enqueue(m, Delivery::NextTurn);
            }
            (s.id().to_string(), s.tracker.clone(), dropped)
        };
        for d in &dropped {
            send_queue_update(&self.state.client, &sid, &tracker, d, QueueState::Dropped).await;
        }
        dropped
    }

    /// `agent/retry/set {sessionId, enabled}` (Pi's `set_auto_retry`); applies from the next
    /// run.
    pub(crate) async fn retry_set(&self, params: Value) -> Result<RetrySetResult> {
        let p: RetrySetParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let mut s = lock(&session);
        s.set_auto_retry(p.enabled);
        Ok(RetrySetResult { enabled: p.enabled })
    }

    /// `agent/compaction/set {sessionId, enabled}` (Pi's `set_auto_compaction`): automatic
    /// compaction on or off for this session from its next run; `agent/compact` works either way.
    pub(crate) async fn compaction_set(&self, params: Value) -> Result<CompactionSetResult> {
        let p: CompactionSetParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let mut s = lock(&session);
        s.set_auto_compaction(p.enabled);
        Ok(CompactionSetResult { enabled: p.enabled })
    }

    /// `agent/retry/abort {sessionId}` (Pi's `abort_retry`): when a failed request waits for
    /// its retry, stops retrying and ends the run; otherwise changes nothing.
    pub(crate) async fn retry_abort(&self, params: Value) -> Result<RetryAbortResult> {
        let p: SessionParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let agent = {
            let s = lock(&session);
            if !s.tracker.retrying() {
                return Ok(RetryAbortResult { cancelled: false });
            }
            s.agent().clone()
        };
        let cancelled = agent.abort();
        let _ = tokio::time::timeout(crate::server::ABORT_WAIT, agent.wait_for_idle()).await;
        Ok(RetryAbortResult { cancelled })
    }
}

/// Appends a message-like entry to an idle session now: to the file, and (when `message` is
/// model-visible) to the agent's context. Returns the entry id.
pub(crate) fn append_now(
    s: &Session,
    kind: &str,
    fields: Value,
    message: Option<pi_ai::Message>,
) -> Result<String> {
    if s.agent().is_streaming() {
        return Err(agent_error(
            codes::SESSION_BUSY,
            format!("session {} is running", s.id()),
        ));
    }
    let id = lock(s.writer())
        .append_entry(kind, fields)
        .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
    if let Some(m) = message {
        let mut messages = s.agent().messages();
        messages.push(m);
        let _ = s.agent().set_messages(messages);
    }
    Ok(id)
}

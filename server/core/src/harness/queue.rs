//! What one session's user needs to see besides the agent events: queued messages and their
//! states, usage and cost per turn and per session, attention, and what an abort stopped.
//!
//! The [`Tracker`] watches the session's events (the session's own listener feeds it before
//! the product's listeners get them) and turns them into [`Notice`]s:
//! - a queued message is matched to the user message the loop delivers by value (the loop
//!   pushes the very message that was queued): `message_start` of it → `delivered`, the next
//!   assistant `message_end` → `consumed`; [`Tracker::drop_all`] → `dropped`;
//! - a queued message may carry the entry to store instead of a plain user message (custom
//!   messages are `custom_message` entries, user shell output a `bashExecution` message);
//! - every assistant `message_end` → usage of the turn and of the session;
//! - `agent_end` → `attention` `finished` or `failed` (an abort asked for by the user needs
//!   no attention).
//!
//! The types here are also the wire's (the editor server sends them as they serialize).

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use pi_ai::{Message, StopReason};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::AgentEvent;
pub use crate::agent::Delivery as DeliverAs;
use crate::session::EntryData;

/// A tool call stopped by an abort.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct StoppedToolCall {
    pub tool_call_id: String,
    pub tool_name: String,
    #[cfg_attr(feature = "ts", ts(type = "unknown"))]
    pub args: Value,
}

/// A process (group) killed by an abort.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct StoppedProcess {
    pub tool_call_id: String,
    pub command: String,
}

/// An edit a run applied (`edit` or `write` that succeeded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AppliedEdit {
    pub tool_call_id: String,
    pub tool_name: String,
    /// The path as the tool received it (relative to the workspace root unless absolute).
    pub path: String,
}

/// The life of a queued message: `queued` → `delivered` (in the conversation) → `consumed`
/// (a model response has seen it); or `queued` → `dropped` (queue cleared, session closed) or
/// `removed` ([`Tracker::remove`]). An edit ([`Tracker::edit`]) reports `queued` again with
/// the new text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum QueueState {
    Queued,
    Delivered,
    Consumed,
    Dropped,
    Removed,
}

/// A queued message as reported to the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct QueuedMessage {
    pub queue_id: String,
    pub delivery: DeliverAs,
    /// The message's text (images are not repeated).
    pub text: String,
}

/// Token counts and cost in US dollars.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub total_tokens: u64,
    /// US dollars at the model's per-million-token prices.
    pub cost: f64,
}

/// Why the agent needs the user. More reasons may be added; clients must ignore reasons they
/// do not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum AttentionReason {
    /// The run ended normally; the answer is ready.
    Finished,
    /// The run ended in an error (provider failure after retries, …).
    Failed,
    /// A tool call waits for the user's permission (`agent/requestPermission` or
    /// `window/showMessageRequest` follows).
    Permission,
    /// An extension asks the user a question (`agent/ui/request` or its fallback follows).
    Question,
}

/// A message waiting in (or passing through) a queue.
#[derive(Debug, Clone)]
struct Item {
    id: String,
    delivery: DeliverAs,
    message: Message,
    text: String,
    state: QueueState,
    /// The entry to store instead of the plain user message.
    entry: Option<EntryData>,
    recorded: bool,
}

/// Something to tell the user.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// A queued message changed state; `steering` / `follow_up` are the texts still waiting.
    Queue {
        message: QueuedMessage,
        state: QueueState,
        steering: Vec<String>,
        follow_up: Vec<String>,
    },
    Usage {
        turn: UsageTotals,
        session: UsageTotals,
        context_tokens: u64,
    },
    Attention {
        reason: AttentionReason,
        message: String,
    },
    /// The session could not be saved (the run was stopped): `error` says why.
    SaveFailed { error: String },
    /// A change-making call the run stopped waiting for settled later ([`super::late`]):
    /// `applied` when its change was made; `entry_id` is the entry recording it (`None`: it
    /// could not be recorded); `message` says it all for the user.
    LateResult {
        tool_call_id: String,
        tool_name: String,
        path: String,
        applied: bool,
        entry_id: Option<String>,
        message: String,
    },
    /// The plan/todo state changed (the built-in `todo` / `plan-mode` extensions): the whole
    /// state now.
    Plan(crate::extension::plan::PlanState),
}

#[derive(Default)]
struct Inner {
    items: Vec<Item>,
    /// Tool calls executing now: (id, name, args).
    active: Vec<(String, String, Value)>,
    edits: Vec<AppliedEdit>,
    /// Change-making calls stopped by an abort while their change was out (`super::late`).
    pending_edits: Vec<AppliedEdit>,
    totals: UsageTotals,
    retrying: bool,
    bash: Option<CancellationToken>,
    /// Tool calls waiting for the user's permission (nothing of theirs runs yet).
    awaiting_permission: Vec<String>,
    /// The context size the last real answer measured (Pi's estimate skips aborted and
    /// failed responses, which measured nothing); `None` before one, and after a compaction.
    context_tokens: Option<u64>,
}

/// Per-session bookkeeping shared by the handlers and the session's event listener.
#[derive(Default)]
pub struct Tracker {
    inner: Mutex<Inner>,
}

/// The text of a message for queue reports and previews.
pub fn message_text(m: &Message) -> String {
    match m {
        Message::User(u) => u.content.to_text(),
        Message::Assistant(a) => a.text(),
        Message::ToolResult(r) => pi_ai::join_text(&r.content),
        Message::System(s) => s.update_text(),
    }
}

/// `m` (a user message) with `text` instead of its text: a text message becomes `text`; of
/// blocks, the text blocks are replaced by one block of `text` where the first was (images
/// stay in their order).
fn with_text(m: &Message, text: &str) -> Message {
    use pi_ai::{ContentBlock, UserContent};
    let Message::User(u) = m else {
        return m.clone();
    };
    let content = match &u.content {
        UserContent::Text(_) => UserContent::Text(text.to_string()),
        UserContent::Blocks(blocks) => {
            let mut out = Vec::with_capacity(blocks.len());
            let mut placed = false;
            for b in blocks {
                match b {
                    ContentBlock::Text(_) if placed => {}
                    ContentBlock::Text(_) => {
                        out.push(ContentBlock::text(text));
                        placed = true;
                    }
                    other => out.push(other.clone()),
                }
            }
            if !placed {
                out.insert(0, ContentBlock::text(text));
            }
            UserContent::Blocks(out)
        }
    };
    Message::User(pi_ai::UserMessage {
        content,
        timestamp: u.timestamp,
    })
}

/// Adds `u` to `t`.
pub fn add_usage(t: &mut UsageTotals, u: &pi_ai::types::Usage) {
    t.input += u.input;
    t.output += u.output;
    t.cache_read += u.cache_read;
    t.cache_write += u.cache_write;
    t.total_tokens += u.context_total();
    t.cost += u.cost.total;
}

impl Tracker {
    /// A tracker whose session totals start at `totals` (the responses already in the file).
    pub fn new(totals: UsageTotals) -> Tracker {
        Tracker {
            inner: Mutex::new(Inner {
                totals,
                ..Default::default()
            }),
        }
    }

    /// Registers a queued message; returns its report.
    pub fn queue(
        &self,
        delivery: DeliverAs,
        message: Message,
        entry: Option<EntryData>,
    ) -> QueuedMessage {
        let item = Item {
            id: uuid::Uuid::now_v7().to_string(),
            delivery,
            text: message_text(&message),
            message,
            state: QueueState::Queued,
            entry,
            recorded: false,
        };
        let report = QueuedMessage {
            queue_id: item.id.clone(),
            delivery,
            text: item.text.clone(),
        };
        self.inner.lock().items.push(item);
        report
    }

    /// Forgets a queued message that could not be queued after all.
    pub fn forget(&self, queue_id: &str) {
        self.inner.lock().items.retain(|i| i.id != queue_id);
    }

    /// Texts of the (steering, follow-up) messages still waiting.
    pub fn waiting(&self) -> (Vec<String>, Vec<String>) {
        waiting_of(&self.inner.lock())
    }

    /// Messages still queued (not delivered).
    pub fn queued(&self) -> Vec<QueuedMessage> {
        self.inner
            .lock()
            .items
            .iter()
            .filter(|i| i.state == QueueState::Queued)
            .map(|i| QueuedMessage {
                queue_id: i.id.clone(),
                delivery: i.delivery,
                text: i.text.clone(),
            })
            .collect()
    }

    /// Marks every queued message dropped and forgets it. `taken` are the messages removed
    /// from the agent's queues; those that were not tracked are returned to be put back.
    pub fn drop_all(&self, taken: Vec<Message>) -> (Vec<QueuedMessage>, Vec<Message>) {
        let mut inner = self.inner.lock();
        let mut dropped = Vec::new();
        let mut keep = Vec::new();
        for m in taken {
            match inner
                .items
                .iter()
                .position(|i| i.state == QueueState::Queued && i.message == m)
            {
                Some(p) => {
                    let i = inner.items.remove(p);
                    dropped.push(QueuedMessage {
                        queue_id: i.id,
                        delivery: i.delivery,
                        text: i.text,
                    });
                }
                None => keep.push(m),
            }
        }
        (dropped, keep)
    }

    /// Removes the queued (not yet delivered) message `queue_id`. `take` takes it out of the
    /// agent's queues (true when it was still there); it runs under the tracker's lock, so the
    /// message cannot be reported delivered halfway. `None`: no such message is queued.
    pub fn remove(
        &self,
        queue_id: &str,
        take: impl FnOnce(&Message) -> bool,
    ) -> Option<QueuedMessage> {
        let mut inner = self.inner.lock();
        let p = inner
            .items
            .iter()
            .position(|i| i.id == queue_id && i.state == QueueState::Queued)?;
        if !take(&inner.items[p].message) {
            return None;
        }
        let i = inner.items.remove(p);
        Some(QueuedMessage {
            queue_id: i.id,
            delivery: i.delivery,
            text: i.text,
        })
    }

    /// Gives the queued (not yet delivered) message `queue_id` the text `text` (a plain
    /// message's text is first passed through `expand`: templates and skills). Its images stay;
    /// a custom message's `content` becomes the text (its images kept after it). `replace(old,
    /// new)` swaps it in the agent's queues (true when it was still there), under the tracker's
    /// lock. `Ok(None)`: no such message is queued; `Err`: it cannot be edited (a shell
    /// command's output).
    pub fn edit(
        &self,
        queue_id: &str,
        text: &str,
        expand: impl FnOnce(&str) -> String,
        replace: impl FnOnce(&Message, Message) -> bool,
    ) -> Result<Option<QueuedMessage>, String> {
        let mut inner = self.inner.lock();
        let Some(p) = inner
            .items
            .iter()
            .position(|i| i.id == queue_id && i.state == QueueState::Queued)
        else {
            return Ok(None);
        };
        let item = &inner.items[p];
        let (message, entry) = match &item.entry {
            None => (with_text(&item.message, &expand(text)), None),
            Some(EntryData::CustomMessage {
                custom_type,
                content,
                display,
                details,
            }) => {
                let entry = EntryData::CustomMessage {
                    custom_type: custom_type.clone(),
                    content: match content {
                        Value::Array(blocks) => {
                            let mut out = vec![serde_json::json!({"type": "text", "text": text})];
                            out.extend(blocks.iter().filter(|b| b["type"] != "text").cloned());
                            Value::Array(out)
                        }
                        _ => Value::String(text.to_string()),
                    },
                    display: *display,
                    details: details.clone(),
                };
                let mut as_message = entry.clone().into_parts().1;
                as_message["role"] = serde_json::json!("custom");
                as_message["timestamp"] = serde_json::json!(match &item.message {
                    Message::User(u) => u.timestamp,
                    _ => pi_ai::types::now_millis(),
                });
                let m = crate::session::convert_message(&as_message).ok_or_else(|| {
                    "the custom message's content cannot hold the text".to_string()
                })?;
                (m, Some(entry))
            }
            Some(other) => {
                let kind = other.clone().into_parts().0;
                return Err(format!("a queued {kind} entry cannot be edited"));
            }
        };
        if !replace(&item.message, message.clone()) {
            return Ok(None);
        }
        let item = &mut inner.items[p];
        item.text = message_text(&message);
        item.message = message;
        if entry.is_some() {
            item.entry = entry;
        }
        Ok(Some(QueuedMessage {
            queue_id: item.id.clone(),
            delivery: item.delivery,
            text: item.text.clone(),
        }))
    }

    /// The custom message entry a delivered queued `message` stands for (not consumed: the
    /// entry is stored at its `message_end` by [`Tracker::substitute`]).
    pub fn custom_entry(&self, message: &Message) -> Option<EntryData> {
        let inner = self.inner.lock();
        inner
            .items
            .iter()
            .find(|i| {
                !i.recorded
                    && i.state != QueueState::Queued
                    && matches!(i.entry, Some(EntryData::CustomMessage { .. }))
                    && i.message == *message
            })
            .and_then(|i| i.entry.clone())
    }

    /// The entry to store instead of this delivered user message, once.
    pub fn substitute(&self, message: &Message) -> Option<EntryData> {
        let mut inner = self.inner.lock();
        let item = inner.items.iter_mut().find(|i| {
            !i.recorded
                && i.state != QueueState::Queued
                && i.entry.is_some()
                && i.message == *message
        })?;
        item.recorded = true;
        item.entry.clone()
    }

    /// True while a failed request waits for its retry.
    pub fn retrying(&self) -> bool {
        self.inner.lock().retrying
    }

    /// Registers a running user shell command; `None` when one already runs.
    pub fn start_bash(&self) -> Option<CancellationToken> {
        let mut inner = self.inner.lock();
        if inner.bash.is_some() {
            return None;
        }
        let t = CancellationToken::new();
        inner.bash = Some(t.clone());
        Some(t)
    }

    /// The user shell command ended.
    pub fn end_bash(&self) {
        self.inner.lock().bash = None;
    }

    /// Cancels the running user shell command; false when none runs.
    pub fn abort_bash(&self) -> bool {
        match &self.inner.lock().bash {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }

    /// True while a user shell command runs.
    pub fn bash_running(&self) -> bool {
        self.inner.lock().bash.is_some()
    }

    /// Marks `call_id` as waiting for (`true`) or done with (`false`) a permission question:
    /// a stopped call that was waiting had no process.
    pub fn set_awaiting_permission(&self, call_id: &str, waiting: bool) {
        let mut inner = self.inner.lock();
        inner.awaiting_permission.retain(|c| c != call_id);
        if waiting {
            inner.awaiting_permission.push(call_id.to_string());
        }
    }

    /// Change-making calls an abort stopped while their change was out (the editor had not
    /// answered): recorded when they settle ([`super::late`]).
    pub fn pending_edits(&self) -> Vec<AppliedEdit> {
        self.inner.lock().pending_edits.clone()
    }

    /// Adds a call to [`Tracker::pending_edits`].
    pub fn add_pending_edit(&self, edit: AppliedEdit) {
        self.inner.lock().pending_edits.push(edit);
    }

    /// Removes call `tool_call_id` from [`Tracker::pending_edits`] (it settled).
    pub fn settle_pending_edit(&self, tool_call_id: &str) {
        self.inner
            .lock()
            .pending_edits
            .retain(|e| e.tool_call_id != tool_call_id);
    }

    /// Tool calls executing now, and the shell commands among them (not those still waiting
    /// for permission).
    pub fn active(&self) -> (Vec<StoppedToolCall>, Vec<StoppedProcess>) {
        let inner = self.inner.lock();
        let calls = inner
            .active
            .iter()
            .map(|(id, name, args)| StoppedToolCall {
                tool_call_id: id.clone(),
                tool_name: name.clone(),
                args: args.clone(),
            })
            .collect();
        let procs = inner
            .active
            .iter()
            .filter(|(id, name, _)| name == "bash" && !inner.awaiting_permission.contains(id))
            .map(|(id, _, args)| StoppedProcess {
                tool_call_id: id.clone(),
                command: args["command"].as_str().unwrap_or("").to_string(),
            })
            .collect();
        (calls, procs)
    }

    /// Edits applied by the current (or last) run.
    pub fn edits(&self) -> Vec<AppliedEdit> {
        self.inner.lock().edits.clone()
    }

    /// Session totals so far.
    pub fn totals(&self) -> UsageTotals {
        self.inner.lock().totals.clone()
    }

    /// Updates the bookkeeping for `event`; returns what to tell the client, in order.
    pub fn on_event(&self, event: &AgentEvent) -> Vec<Notice> {
        let mut inner = self.inner.lock();
        let mut out = Vec::new();
        match event {
            AgentEvent::AgentStart => {
                inner.active.clear();
                inner.edits.clear();
                inner.retrying = false;
            }
            AgentEvent::MessageStart { message: m } if matches!(**m, Message::User(_)) => {
                let m: &Message = m;
                if let Some(i) = inner
                    .items
                    .iter_mut()
                    .find(|i| i.state == QueueState::Queued && i.message == *m)
                {
                    i.state = QueueState::Delivered;
                    out.push(Notice::Queue {
                        message: QueuedMessage {
                            queue_id: i.id.clone(),
                            delivery: i.delivery,
                            text: i.text.clone(),
                        },
                        state: QueueState::Delivered,
                        steering: Vec::new(),
                        follow_up: Vec::new(),
                    });
                }
            }
            AgentEvent::MessageEnd { message } => {
                if let Message::Assistant(a) = &**message {
                    let delivered: Vec<Item> = inner
                        .items
                        .iter()
                        .filter(|i| i.state == QueueState::Delivered)
                        .cloned()
                        .collect();
                    inner.items.retain(|i| i.state != QueueState::Delivered);
                    // A failed response has not seen them either; only a real answer consumes.
                    if matches!(a.stop_reason, StopReason::Error | StopReason::Aborted) {
                        inner.items.extend(delivered);
                    } else {
                        for i in delivered {
                            out.push(Notice::Queue {
                                message: QueuedMessage {
                                    queue_id: i.id,
                                    delivery: i.delivery,
                                    text: i.text,
                                },
                                state: QueueState::Consumed,
                                steering: Vec::new(),
                                follow_up: Vec::new(),
                            });
                        }
                    }
                    let mut turn = UsageTotals::default();
                    add_usage(&mut turn, &a.usage);
                    add_usage(&mut inner.totals, &a.usage);
                    let measured = a.usage.context_total();
                    let context = if measured == 0
                        || matches!(a.stop_reason, StopReason::Error | StopReason::Aborted)
                    {
                        inner.context_tokens.unwrap_or(0)
                    } else {
                        inner.context_tokens = Some(measured);
                        measured
                    };
                    out.push(Notice::Usage {
                        turn,
                        session: inner.totals.clone(),
                        context_tokens: context,
                    });
                }
            }
            AgentEvent::CompactionEnd {
                result: Some(_), ..
            } => inner.context_tokens = None,
            AgentEvent::ToolExecutionStart {
                tool_call_id,
                tool_name,
                args,
            } => inner
                .active
                .push((tool_call_id.clone(), tool_name.clone(), args.clone())),
            AgentEvent::ToolExecutionEnd {
                tool_call_id,
                is_error,
                ..
            } => {
                if let Some(p) = inner.active.iter().position(|(id, ..)| id == tool_call_id) {
                    let (id, name, args) = inner.active.remove(p);
                    if !is_error && (name == "edit" || name == "write") {
                        inner.edits.push(AppliedEdit {
                            tool_call_id: id,
                            tool_name: name,
                            path: args["path"].as_str().unwrap_or("").to_string(),
                        });
                    }
                }
            }
            AgentEvent::AutoRetryStart { .. } => inner.retrying = true,
            AgentEvent::AutoRetryEnd { .. } => inner.retrying = false,
            // A run that ends to be retried (Pi 1.6's `willRetry`) needs no attention yet.
            AgentEvent::AgentEnd {
                will_retry: true, ..
            } => {}
            AgentEvent::AgentEnd { messages, .. } => {
                inner.retrying = false;
                let last = messages.iter().rev().find_map(|m| match &**m {
                    Message::Assistant(a) => Some(a),
                    _ => None,
                });
                match last {
                    Some(a) if a.stop_reason == StopReason::Aborted => {}
                    Some(a) if a.stop_reason == StopReason::Error => out.push(Notice::Attention {
                        reason: AttentionReason::Failed,
                        message: a
                            .error_message
                            .clone()
                            .unwrap_or_else(|| "the model request failed".into()),
                    }),
                    Some(a) => out.push(Notice::Attention {
                        reason: AttentionReason::Finished,
                        message: a
                            .text()
                            .lines()
                            .find(|l| !l.trim().is_empty())
                            .unwrap_or("done")
                            .chars()
                            .take(200)
                            .collect(),
                    }),
                    None => out.push(Notice::Attention {
                        reason: AttentionReason::Finished,
                        message: "done".into(),
                    }),
                }
            }
            _ => {}
        }
        // Queue notices carry what is still waiting once this event is accounted for (most
        // events, every streamed delta among them, have none: nothing to gather).
        if !out.iter().any(|n| matches!(n, Notice::Queue { .. })) {
            return out;
        }
        let (st, fu) = waiting_of(&inner);
        for n in &mut out {
            if let Notice::Queue {
                steering,
                follow_up,
                ..
            } = n
            {
                *steering = st.clone();
                *follow_up = fu.clone();
            }
        }
        out
    }

    /// The queue notice for `message` now in `state`, with what is still waiting.
    pub fn queue_notice(&self, message: QueuedMessage, state: QueueState) -> Notice {
        let (steering, follow_up) = self.waiting();
        Notice::Queue {
            message,
            state,
            steering,
            follow_up,
        }
    }
}

/// Texts of the (steering, follow-up) messages still waiting in `inner`.
fn waiting_of(inner: &Inner) -> (Vec<String>, Vec<String>) {
    let of = |d: DeliverAs| {
        inner
            .items
            .iter()
            .filter(|i| i.state == QueueState::Queued && i.delivery == d)
            .map(|i| i.text.clone())
            .collect()
    };
    (of(DeliverAs::Steer), of(DeliverAs::FollowUp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pi_ai::AssistantMessage;
    use std::sync::Arc;

    fn answer(text: &str, stop: StopReason) -> Message {
        let mut a = AssistantMessage::empty("x", "p", "m");
        a.content = vec![pi_ai::ContentBlock::text(text)];
        a.stop_reason = stop;
        a.usage.input = 10;
        a.usage.output = 5;
        a.usage.cost.total = 0.5;
        Message::Assistant(a)
    }

    #[test]
    fn queued_delivered_consumed_and_usage() {
        let t = Tracker::new(UsageTotals {
            input: 1,
            total_tokens: 1,
            cost: 0.25,
            ..Default::default()
        });
        let m = Message::user_text("also this");
        let q = t.queue(DeliverAs::Steer, m.clone(), None);
        assert_eq!(t.waiting(), (vec!["also this".to_string()], vec![]));
        let n = t.on_event(&AgentEvent::MessageStart {
            message: Arc::new(m.clone()),
        });
        assert_eq!(
            n,
            vec![Notice::Queue {
                message: q.clone(),
                state: QueueState::Delivered,
                steering: vec![],
                follow_up: vec![],
            }]
        );
        assert_eq!(t.waiting(), (vec![], vec![]));
        // A failed response does not consume it.
        let failed = t.on_event(&AgentEvent::MessageEnd {
            message: Arc::new(answer("", StopReason::Error)),
        });
        assert_eq!(failed.len(), 1);
        let n = t.on_event(&AgentEvent::MessageEnd {
            message: Arc::new(answer("ok", StopReason::Stop)),
        });
        let turn = UsageTotals {
            input: 10,
            output: 5,
            total_tokens: 15,
            cost: 0.5,
            ..Default::default()
        };
        assert_eq!(
            n,
            vec![
                Notice::Queue {
                    message: q,
                    state: QueueState::Consumed,
                    steering: vec![],
                    follow_up: vec![],
                },
                Notice::Usage {
                    turn: turn.clone(),
                    session: UsageTotals {
                        input: 21,
                        output: 10,
                        total_tokens: 31,
                        cost: 1.25,
                        ..Default::default()
                    },
                    context_tokens: 15
                }
            ]
        );
    }

    /// The context size of an aborted or failed response (which measured nothing) is the
    /// last real answer's, as Pi's estimate skips them; unknown (0) after a compaction.
    #[test]
    fn a_response_that_measured_nothing_keeps_the_last_context_size() {
        let t = Tracker::default();
        let context = |n: Vec<Notice>| {
            n.into_iter()
                .find_map(|n| match n {
                    Notice::Usage { context_tokens, .. } => Some(context_tokens),
                    _ => None,
                })
                .unwrap()
        };
        let nothing = |stop| {
            let Message::Assistant(mut a) = answer("", stop) else {
                unreachable!()
            };
            a.usage = Default::default();
            Message::Assistant(a)
        };
        let end = |message| AgentEvent::MessageEnd {
            message: Arc::new(message),
        };
        assert_eq!(context(t.on_event(&end(nothing(StopReason::Aborted)))), 0);
        assert_eq!(
            context(t.on_event(&end(answer("ok", StopReason::Stop)))),
            15
        );
        assert_eq!(context(t.on_event(&end(nothing(StopReason::Aborted)))), 15);
        assert_eq!(context(t.on_event(&end(nothing(StopReason::Error)))), 15);
        // A failed response that still reported its input: not a measure of the context.
        assert_eq!(context(t.on_event(&end(answer("", StopReason::Error)))), 15);
        t.on_event(&AgentEvent::CompactionEnd {
            reason: crate::agent::CompactionReason::Manual,
            result: Some(crate::compaction::CompactionResult {
                summary: "s".into(),
                first_kept_entry_id: "e".into(),
                tokens_before: 15,
                estimated_tokens_after: None,
                usage: None,
                details: Value::Null,
            }),
            aborted: false,
            will_retry: false,
            error_message: None,
            context: None,
        });
        assert_eq!(context(t.on_event(&end(nothing(StopReason::Aborted)))), 0);
    }

    #[test]
    fn attention_and_dropped() {
        let t = Tracker::default();
        let n = t.on_event(&AgentEvent::AgentEnd {
            messages: vec![Arc::new(answer("\nAll done.\nmore", StopReason::Stop))],
            will_retry: false,
        });
        assert_eq!(
            n,
            vec![Notice::Attention {
                reason: AttentionReason::Finished,
                message: "All done.".into()
            }]
        );
        assert!(t
            .on_event(&AgentEvent::AgentEnd {
                messages: vec![Arc::new(answer("", StopReason::Aborted))],
                will_retry: false,
            })
            .is_empty());
        let m = Message::user_text("later");
        let q = t.queue(DeliverAs::FollowUp, m.clone(), None);
        let other = Message::user_text("untracked");
        let (dropped, keep) = t.drop_all(vec![m, other.clone()]);
        assert_eq!((dropped, keep), (vec![q], vec![other]));
        assert!(t.queued().is_empty());
    }
}

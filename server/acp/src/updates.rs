//! A session's events as ACP `session/update` notifications ([`AcpSink`], a
//! [`SessionListener`]: the session has saved each event before the sink sees it).
//!
//! - text and thinking deltas → `agent_message_chunk` / `agent_thought_chunk`, coalesced: the
//!   first delta after a quiet spell goes out at once, later ones are joined and sent at most
//!   every [`COALESCE`] (about 60 updates per second per session, as the LSP edge's
//!   `coalesceDeltasMs`); any other update first sends what is pending, so order is kept;
//! - an assistant message's tool calls → `tool_call` (pending), their execution →
//!   `tool_call_update` (in_progress; bash's streamed output as content, or the client's
//!   terminal as `terminal` content when bash runs there ([`crate::terminal`]); completed /
//!   failed with the result text and, for edits, `diff` contents);
//! - usage notices → `usage_update` (context used / window, cost in USD); the end of a run →
//!   `session_info_update` (`title`: the session's name, else its first prompt; `updatedAt`);
//! - a compaction → `compaction_update` (`compaction-<n>`: `in_progress`, then `completed`
//!   with the summary, `failed` with the error, or `cancelled`) when the client opted in
//!   (`clientCapabilities.session.compaction`);
//! - a failed save → an `agent_message_chunk` saying the session is no longer being saved;
//! - a retry of a failed request (Pi's `auto_retry_start`) → an `agent_message_chunk`
//!   paragraph in the `pi-acp` bridge's words ([`retry_text`]); retries that end without an
//!   answer → a paragraph with the error ([`retry_failed_text`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_client_protocol_schema::v1::{
    CompactionStatus, CompactionUpdate, ContentBlock, ContentChunk, Cost, Plan, PlanEntry,
    PlanEntryPriority, PlanEntryStatus, SessionInfoUpdate, SessionNotification, SessionUpdate,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, UsageUpdate,
};
use async_trait::async_trait;
use parking_lot::Mutex;
use pi_ai::{AssistantEvent, Message};
use pi_core::agent::AgentEvent;
use pi_core::harness::{Notice, SessionListener};

use crate::rpc::Conn;
use crate::tools;

/// The calls of a session running in the client's terminal: call id → terminal id (noted by
/// [`crate::terminal::TerminalExecutor`], read by [`AcpSink`]).
pub type Terminals = Arc<Mutex<HashMap<String, String>>>;

/// The shortest time between two streamed chunks of one session (≈ 60 per second).
pub const COALESCE: Duration = Duration::from_millis(16);

/// Sends one `session/update`.
pub fn send_update(conn: &Conn, session_id: &str, update: SessionUpdate) {
    conn.notify(
        "session/update",
        SessionNotification::new(session_id.to_string(), update),
    );
}

/// `session/update`s gathered into large writes (a `session/load` replay): each update is
/// serialized straight into one byte buffer (no `Value`, no copy per update), handed to the
/// connection every [`Batch::LIMIT`] bytes and at [`Batch::finish`] (or drop), so order with
/// later messages is kept.
pub struct Batch<'a> {
    conn: &'a Conn,
    session_id: agent_client_protocol_schema::v1::SessionId,
    buf: Vec<u8>,
}

impl<'a> Batch<'a> {
    /// Bytes gathered before they are handed to the writer.
    pub const LIMIT: usize = 256 * 1024;

    /// A batch of `session_id`'s updates over `conn`.
    pub fn new(conn: &'a Conn, session_id: &str) -> Batch<'a> {
        Batch {
            conn,
            session_id: session_id.to_string().into(),
            buf: Vec::with_capacity(Batch::LIMIT + 4096),
        }
    }

    /// Adds one update (an update that cannot be serialized is logged and left out).
    pub fn push(&mut self, update: SessionUpdate) {
        let n = SessionNotification::new(self.session_id.clone(), update);
        let start = self.buf.len();
        self.buf
            .extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":");
        if serde_json::to_writer(&mut self.buf, &n).is_ok() {
            self.buf.extend_from_slice(b"}\n");
        } else {
            tracing::error!("cannot serialize an outgoing session/update notification");
            self.buf.truncate(start);
        }
        if self.buf.len() >= Batch::LIMIT {
            let full = std::mem::replace(&mut self.buf, Vec::with_capacity(Batch::LIMIT + 4096));
            self.send(full);
        }
    }

    /// Hands `lines` (whole notifications, JSON text) to the writer as one write.
    fn send(&self, lines: Vec<u8>) {
        match String::from_utf8(lines) {
            Ok(text) => self.conn.send_lines(text),
            // serde_json writes UTF-8 only.
            Err(_) => tracing::error!("a replay batch was not UTF-8; it was not sent"),
        }
    }

    /// Hands what is left to the writer.
    pub fn finish(mut self) {
        let rest = std::mem::take(&mut self.buf);
        self.send(rest);
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        let rest = std::mem::take(&mut self.buf);
        self.send(rest);
    }
}

/// The text chunk `text` as an `agent_message_chunk` (`thought`: `agent_thought_chunk`).
pub fn chunk(text: String, thought: bool) -> SessionUpdate {
    let c = ContentChunk::new(ContentBlock::from(text));
    if thought {
        SessionUpdate::AgentThoughtChunk(c)
    } else {
        SessionUpdate::AgentMessageChunk(c)
    }
}

#[derive(Default)]
struct Stream {
    /// Joined deltas not sent yet: (thought?, text).
    pending: Option<(bool, String)>,
    last: Option<Instant>,
    timer: bool,
}

/// The ACP listener of one session; see the module doc.
pub struct AcpSink {
    conn: Arc<Conn>,
    session_id: String,
    cwd: PathBuf,
    /// The model's context window (tokens), for `usage_update.size`.
    context_window: Arc<Mutex<u64>>,
    stream: Arc<Mutex<Stream>>,
    /// Calls announced: id → (tool, arguments).
    calls: Mutex<HashMap<String, (String, serde_json::Value)>>,
    /// The session's title (its name, else its first prompt), for `session_info_update`.
    title: Arc<Mutex<Option<String>>>,
    /// The client opted in to `compaction_update` (`clientCapabilities.session.compaction`).
    compaction: bool,
    /// Compactions reported so far (their ids are `compaction-<n>`).
    compactions: Mutex<u64>,
    /// Calls running in the client's terminal: id → terminal id (filled by the session's
    /// [`crate::terminal::TerminalExecutor`]).
    terminals: Terminals,
}

/// A session title from a prompt: its first line, at most 200 characters (as session lists
/// show it).
pub fn title_of(prompt: &str) -> Option<String> {
    let line = prompt.lines().find(|l| !l.trim().is_empty())?.trim();
    Some(line.chars().take(200).collect())
}

impl AcpSink {
    /// A sink sending `session_id`'s updates over `conn`; `cwd` resolves tool paths; `title`
    /// is the session's title (set from the first prompt when empty); `compaction`: the
    /// client takes `compaction_update`; `terminals`: the calls running in the client's
    /// terminal.
    pub fn new(
        conn: Arc<Conn>,
        session_id: String,
        cwd: PathBuf,
        context_window: Arc<Mutex<u64>>,
        title: Arc<Mutex<Option<String>>>,
        compaction: bool,
        terminals: Terminals,
    ) -> AcpSink {
        AcpSink {
            conn,
            session_id,
            cwd,
            context_window,
            stream: Arc::default(),
            calls: Mutex::default(),
            title,
            compaction,
            compactions: Mutex::new(0),
            terminals,
        }
    }

    fn send(&self, update: SessionUpdate) {
        // Whatever text is pending goes first: the order of the run is kept.
        let mut s = self.stream.lock();
        flush(&self.conn, &self.session_id, &mut s);
        send_update(&self.conn, &self.session_id, update);
    }

    fn delta(&self, text: &str, thought: bool) {
        let mut s = self.stream.lock();
        match &mut s.pending {
            Some((t, buf)) if *t == thought => buf.push_str(text),
            _ => {
                flush(&self.conn, &self.session_id, &mut s);
                s.pending = Some((thought, text.to_string()));
            }
        }
        let now = Instant::now();
        let due = s.last.map_or(now, |l| l + COALESCE);
        if due <= now {
            flush(&self.conn, &self.session_id, &mut s);
            s.last = Some(now);
        } else if !s.timer {
            s.timer = true;
            let (stream, conn, id) = (
                self.stream.clone(),
                self.conn.clone(),
                self.session_id.clone(),
            );
            tokio::spawn(async move {
                tokio::time::sleep_until(due.into()).await;
                let mut s = stream.lock();
                s.timer = false;
                if s.pending.is_some() {
                    flush(&conn, &id, &mut s);
                    s.last = Some(Instant::now());
                }
            });
        }
    }

    fn usage(&self, context_tokens: u64, cost: f64) {
        let size = *self.context_window.lock();
        self.send(SessionUpdate::UsageUpdate(
            UsageUpdate::new(context_tokens, size).cost(Cost::new(cost, "USD")),
        ));
    }
}

fn flush(conn: &Conn, session_id: &str, s: &mut Stream) {
    if let Some((thought, text)) = s.pending.take() {
        if !text.is_empty() {
            send_update(conn, session_id, chunk(text, thought));
        }
    }
}

#[async_trait]
impl SessionListener for AcpSink {
    async fn event(&self, event: AgentEvent, notices: Vec<Notice>) {
        match event {
            AgentEvent::MessageUpdate {
                assistant_message_event: e,
            } => match e {
                AssistantEvent::TextDelta { delta, .. } => self.delta(&delta, false),
                AssistantEvent::ThinkingDelta { delta, .. } => self.delta(&delta, true),
                _ => {}
            },
            AgentEvent::MessageEnd { message } => match &*message {
                Message::Assistant(a) => {
                    for c in a.tool_calls() {
                        self.calls
                            .lock()
                            .insert(c.id.clone(), (c.name.clone(), c.arguments.clone()));
                        self.send(SessionUpdate::ToolCall(tools::announce(
                            &self.cwd,
                            &c.id,
                            &c.name,
                            &c.arguments,
                        )));
                    }
                    let mut s = self.stream.lock();
                    flush(&self.conn, &self.session_id, &mut s);
                }
                Message::User(u) => {
                    let mut title = self.title.lock();
                    if title.is_none() {
                        *title = title_of(&u.content.to_text());
                    }
                }
                _ => {}
            },
            AgentEvent::ToolExecutionStart { tool_call_id, .. } => {
                self.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    tool_call_id,
                    ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
                )));
            }
            // A command in the client's terminal ([`crate::terminal`]): the terminal is the
            // call's content (the client shows its output live; no text updates).
            AgentEvent::ToolExecutionUpdate {
                tool_call_id,
                partial_result,
                ..
            } if !self.terminals.lock().contains_key(&tool_call_id) => {
                let text = pi_ai::join_text(&partial_result.content);
                self.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    tool_call_id,
                    ToolCallUpdateFields::new().content(vec![tools::text_content(text)]),
                )));
            }
            AgentEvent::ToolExecutionEnd {
                tool_call_id,
                tool_name,
                result,
                is_error,
                ..
            } => {
                let args = self.calls.lock().remove(&tool_call_id).map(|(_, a)| a);
                let text = pi_ai::join_text(&result.content);
                let mut fields = tools::finished(
                    &self.cwd,
                    &tool_name,
                    args.as_ref(),
                    text,
                    is_error,
                    result.details,
                );
                // A command that ran in the client's terminal keeps the terminal as its
                // content (the client shows it after the release); the model's text is in
                // `rawOutput`.
                if let Some(t) = self.terminals.lock().remove(&tool_call_id) {
                    fields = fields.content(vec![tools::terminal_content(t)]);
                }
                self.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    tool_call_id,
                    fields,
                )));
            }
            AgentEvent::AgentEnd { .. } => {
                let mut info = SessionInfoUpdate::new().updated_at(chrono::Utc::now().to_rfc3339());
                if let Some(t) = self.title.lock().clone() {
                    info = info.title(t);
                }
                self.send(SessionUpdate::SessionInfoUpdate(info));
            }
            AgentEvent::AutoRetryStart {
                attempt,
                max_attempts,
                delay_ms,
                ..
            } => self.send(chunk(retry_text(attempt, max_attempts, delay_ms), false)),
            AgentEvent::AutoRetryEnd {
                success: false,
                final_error,
                ..
            } => self.send(chunk(retry_failed_text(final_error.as_deref()), false)),
            AgentEvent::CompactionStart { .. } if self.compaction => {
                let n = {
                    let mut c = self.compactions.lock();
                    *c += 1;
                    *c
                };
                self.send(SessionUpdate::CompactionUpdate(CompactionUpdate::new(
                    format!("compaction-{n}"),
                    CompactionStatus::InProgress,
                )));
            }
            AgentEvent::CompactionEnd {
                result,
                aborted,
                error_message,
                ..
            } if self.compaction => {
                let id = format!("compaction-{}", *self.compactions.lock());
                let update = match (result, aborted, error_message) {
                    (Some(r), _, _) => CompactionUpdate::new(id, CompactionStatus::Completed)
                        .summary(vec![ContentBlock::from(r.summary)])
                        .meta(serde_json::Map::from_iter([(
                            "pi".to_string(),
                            serde_json::json!({"tokensBefore": r.tokens_before, "firstKeptEntryId": r.first_kept_entry_id}),
                        )])),
                    (None, true, _) => CompactionUpdate::new(id, CompactionStatus::Cancelled),
                    (None, false, e) => CompactionUpdate::new(id, CompactionStatus::Failed)
                        .error(e.unwrap_or_else(|| "the compaction failed".into())),
                };
                self.send(SessionUpdate::CompactionUpdate(update));
            }
            _ => {}
        }
        for n in notices {
            self.notice(n).await;
        }
    }

    async fn notice(&self, notice: Notice) {
        match notice {
            Notice::Usage {
                session,
                context_tokens,
                ..
            } => self.usage(context_tokens, session.cost),
            Notice::Plan(state) => self.send(plan_update(&state)),
            Notice::SaveFailed { error } => self.send(chunk(
                format!(
                    "\n\n[pi-lsp: the session stopped saving: {error}. The run was stopped.]\n"
                ),
                false,
            )),
            _ => {}
        }
    }
}

/// What a client is told when a failed request is sent again (Pi's `auto_retry_start`), in
/// the `pi-acp` bridge's words (its `formatAutoRetryMessage`: the wait in whole seconds,
/// rounded, at least 1 when there is one), as a paragraph of its own in the agent's message:
/// ACP has no retry update, and clients join `agent_message_chunk`s into one text.
pub fn retry_text(attempt: u32, max_attempts: u32, delay_ms: u64) -> String {
    let mut secs = (delay_ms + 500) / 1000;
    if delay_ms > 0 && secs == 0 {
        secs = 1;
    }
    format!("Retrying (attempt {attempt}/{max_attempts}, waiting {secs}s)...\n\n")
}

/// What a client is told when the retries end without an answer (Pi's `auto_retry_end` with
/// `success: false`: the last attempt failed, or the wait was cancelled): the error. A retry
/// that succeeds adds nothing: Pi 1.6 reports the success after the retried answer, where the
/// `pi-acp` bridge's "Retry finished, resuming." would follow the answer it announces.
pub fn retry_failed_text(final_error: Option<&str>) -> String {
    format!(
        "Retries stopped: {}\n\n",
        final_error.unwrap_or("the request failed")
    )
}

/// The session's whole plan/todo list as ACP's `plan` update (every change sends the complete
/// list, as ACP asks): each item's text as `content`, its priority and status by the same names.
pub fn plan_update(state: &pi_core::extension::plan::PlanState) -> SessionUpdate {
    use pi_core::extension::plan::{TodoPriority, TodoStatus};
    let entries = state
        .todos
        .iter()
        .map(|t| {
            let priority = match t.priority {
                TodoPriority::High => PlanEntryPriority::High,
                TodoPriority::Medium => PlanEntryPriority::Medium,
                TodoPriority::Low => PlanEntryPriority::Low,
            };
            let status = match t.status {
                TodoStatus::Pending => PlanEntryStatus::Pending,
                TodoStatus::InProgress => PlanEntryStatus::InProgress,
                TodoStatus::Completed => PlanEntryStatus::Completed,
            };
            PlanEntry::new(t.text.clone(), priority, status)
        })
        .collect();
    SessionUpdate::Plan(Plan::new(entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pi-acp`'s `formatAutoRetryMessage`: the wait rounded to whole seconds as JavaScript's
    /// `Math.round` (halves up), at least 1 when there is a wait.
    #[test]
    fn retry_text_rounds_the_wait_as_pi_acp() {
        let waits: Vec<String> = [0, 1, 499, 500, 1499, 1500, 2000, 2500, 8000]
            .iter()
            .map(|&ms| retry_text(2, 3, ms))
            .collect();
        let secs = [0, 1, 1, 1, 1, 2, 2, 3, 8];
        let want: Vec<String> = secs
            .iter()
            .map(|s| format!("Retrying (attempt 2/3, waiting {s}s)...\n\n"))
            .collect();
        assert_eq!(waits, want);
        assert_eq!(
            retry_failed_text(Some("503 overloaded")),
            "Retries stopped: 503 overloaded\n\n"
        );
    }
}

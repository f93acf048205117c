//! The session's side of its events: [`SessionEvents`] persists every event ([`Recorder`]),
//! feeds the session's [`Tracker`] and hands the event with its [`Notice`]s to the product's
//! [`SessionListener`]s; a failure to persist stops the run and is told to the listeners
//! ([`Notice::SaveFailed`]), never silent. [`SessionHost`] is the extensions' host: their
//! entries and messages go to the [`AgentSession`] itself, their UI to the product.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use pi_ai::Message;
use serde_json::Value;

use super::queue::{Notice, Tracker};
use super::{AgentSession, Recorder};
use crate::agent::{AgentEvent, EventSink, WeakAgent};
use crate::extension::{
    CustomMessage, ExtensionErrorInfo, ExtensionHost, ExtensionUi, UiRequest, UiResponse,
};
use crate::session::{MessageJson, SessionWriter};

/// What a product does with a session's events: shows them (the editor sends notifications,
/// `pi-lsp run` prints). The session has persisted an event before a listener gets it.
#[async_trait]
pub trait SessionListener: Send + Sync {
    /// An agent event and what it changed for the user (queue states, usage, attention),
    /// in the order to tell them after the event.
    async fn event(&self, event: AgentEvent, notices: Vec<Notice>);
    /// Whether this listener writes the messages of events whole as JSON: then the session
    /// serialises each message once ([`MessageJson`]), for the listener
    /// ([`SessionListener::event_json`]) and for its file's line.
    fn wants_message_json(&self) -> bool {
        false
    }
    /// [`SessionListener::event`] with the JSON of the message `event` carries, when the
    /// session made it (a listener that [`SessionListener::wants_message_json`]; a user
    /// message's or tool result's `message_start`, any `message_end`): the bytes `serde_json`
    /// writes for that message, the ones the session's file holds.
    async fn event_json(&self, event: AgentEvent, notices: Vec<Notice>, json: Option<MessageJson>) {
        let _ = json;
        self.event(event, notices).await
    }
    /// A notice not caused by an event: a message queued, edited, removed or dropped.
    async fn notice(&self, notice: Notice);
}

/// The session's own listener of its agent; see the module doc.
pub(super) struct SessionEvents {
    agent: WeakAgent,
    recorder: Recorder,
    tracker: Arc<Tracker>,
    listeners: Vec<Arc<dyn SessionListener>>,
    /// Held from persisting an event until every listener has it
    /// ([`AgentSession::events_settled`]).
    settled: Arc<tokio::sync::Mutex<()>>,
    /// The attention notices of a run that ended with a `length` stop or an error, held
    /// while a recovery may retry it ([`SessionEvents::hold_attention`]).
    held: parking_lot::Mutex<Vec<Notice>>,
    /// Set at a run's `agent_start`, taken at its first `turn_start`: then the system
    /// message stored for the run is told ([`Recorder::take_untold_system`]).
    run_started: std::sync::atomic::AtomicBool,
    /// Whether a listener [`SessionListener::wants_message_json`].
    wants_json: bool,
    /// The JSON of the message whose `message_start` was told last, for its `message_end`
    /// ([`SessionEvents::message_json`]).
    json: parking_lot::Mutex<Option<MessageJson>>,
}

impl SessionEvents {
    pub(super) fn new(
        agent: WeakAgent,
        recorder: Recorder,
        tracker: Arc<Tracker>,
        listeners: Vec<Arc<dyn SessionListener>>,
        settled: Arc<tokio::sync::Mutex<()>>,
    ) -> Self {
        SessionEvents {
            agent,
            recorder,
            tracker,
            wants_json: listeners.iter().any(|l| l.wants_message_json()),
            listeners,
            settled,
            held: parking_lot::Mutex::new(Vec::new()),
            run_started: std::sync::atomic::AtomicBool::new(false),
            json: parking_lot::Mutex::new(None),
        }
    }

    /// The JSON of the message `event` carries, serialised once for the listeners and the
    /// session's file when a listener writes messages whole
    /// ([`SessionListener::wants_message_json`]): a user message's or tool result's at its
    /// `message_start` (kept for its `message_end`), any other message's at its
    /// `message_end`. None for an answer's `message_start` (its first, empty message), for a
    /// message that does not serialise, and when no listener wants it.
    fn message_json(&self, event: &AgentEvent) -> Option<MessageJson> {
        if !self.wants_json {
            return None;
        }
        match event {
            AgentEvent::MessageStart { message } if !matches!(**message, Message::Assistant(_)) => {
                let json = MessageJson::new(message).ok();
                self.json.lock().clone_from(&json);
                json
            }
            AgentEvent::MessageEnd { message } => match self.json.lock().take() {
                Some(json) if json.is_of(message) => Some(json),
                _ => MessageJson::new(message).ok(),
            },
            _ => None,
        }
    }

    /// Pi 1.6 recovers an overflow error or a cut answer after the run's `agent_end`: the
    /// run's attention ("finished", "failed") is held from such an `agent_end` (its last
    /// answer stopped with `length` or an error) while the recovery goes on (the attempt left
    /// out, the overflow compaction), dropped when the retry starts (`agent_start`), and
    /// otherwise returned to be told before the next event. `notices` are `event`'s.
    fn hold_attention(&self, event: &AgentEvent, notices: &mut Vec<Notice>) -> Vec<Notice> {
        let mut held = self.held.lock();
        match event {
            AgentEvent::AgentEnd { messages, .. } => {
                let recoverable = messages.iter().rev().find_map(|m| match &**m {
                    Message::Assistant(a) => Some(matches!(
                        a.stop_reason,
                        pi_ai::StopReason::Length | pi_ai::StopReason::Error
                    )),
                    _ => None,
                });
                if recoverable == Some(true) {
                    let (attention, rest) = std::mem::take(notices)
                        .into_iter()
                        .partition(|n| matches!(n, Notice::Attention { .. }));
                    *notices = rest;
                    *held = attention;
                }
                Vec::new()
            }
            AgentEvent::AgentStart => {
                held.clear();
                Vec::new()
            }
            AgentEvent::AttemptLeftOut
            | AgentEvent::CompactionStart { .. }
            | AgentEvent::CompactionEnd {
                will_retry: true, ..
            } => Vec::new(),
            _ => std::mem::take(&mut *held),
        }
    }
}

impl SessionEvents {
    /// Records `event` with what Pi 1.6 stores beside it: at a run's start the system message
    /// its prompt and tools call for, on an assistant message the thinking level asked for.
    fn record(
        &self,
        event: &AgentEvent,
        json: Option<&MessageJson>,
    ) -> Result<(), crate::session::SessionError> {
        let agent = self.agent.upgrade();
        if !self.recorder.pi16() {
            return self.recorder.record(event);
        }
        let level = match (event, agent.as_ref()) {
            (AgentEvent::AgentStart, Some(a)) => {
                self.recorder.record_system(a)?;
                None
            }
            (AgentEvent::MessageEnd { message }, Some(a))
                if matches!(**message, pi_ai::Message::Assistant(_)) =>
            {
                Some(a.with_config(|c| super::thinking_level_name(&c.model).to_string()))
            }
            _ => None,
        };
        self.recorder.record_stamped(event, level.as_deref(), json)
    }
}

#[async_trait]
impl EventSink for SessionEvents {
    async fn emit(&self, event: AgentEvent) {
        // Whoever reads the file and the listeners' state together waits for this event to
        // be in both (see `AgentSession::events_settled`).
        let _settled = self.settled.lock().await;
        let mut notices = self.tracker.on_event(&event);
        for n in self.hold_attention(&event, &mut notices) {
            for l in &self.listeners {
                l.notice(n.clone()).await;
            }
        }
        let substitute = match &event {
            AgentEvent::MessageEnd { message: m } if matches!(**m, Message::User(_)) => {
                self.tracker.substitute(m)
            }
            _ => None,
        };
        // An extension's custom message reaches the listeners as Pi shows it (role "custom").
        let custom = match &event {
            AgentEvent::MessageStart { message: m } => match &**m {
                Message::User(u) => self
                    .tracker
                    .custom_entry(m)
                    .and_then(|e| custom_view(e, u.timestamp))
                    .map(|message| AgentEvent::CustomMessageStart { message }),
                _ => None,
            },
            AgentEvent::MessageEnd { message: m } => match &**m {
                Message::User(u) => substitute
                    .clone()
                    .and_then(|e| custom_view(e, u.timestamp))
                    .map(|message| AgentEvent::CustomMessageEnd { message }),
                _ => None,
            },
            _ => None,
        };
        // A custom message reaches the listeners as its view (above): no JSON of the message.
        let json = custom
            .is_none()
            .then(|| self.message_json(&event))
            .flatten();
        // A recovery's attempt left out of the context: its `context_edit`s are written, and
        // the listeners get Pi 1.6's `entry_appended` for each in place of the event.
        let mut appended = Vec::new();
        let recorded = match substitute {
            // A delivered custom message or shell output is stored as what it is.
            Some(entry) => self.recorder.record_entry(entry),
            None if matches!(event, AgentEvent::AttemptLeftOut) => {
                self.recorder.leave_out().map(|entries| appended = entries)
            }
            None => self.record(&event, json.as_ref()),
        };
        let event = custom.unwrap_or(event);
        if let Err(e) = recorded {
            // Every listener tells the user (`Notice::SaveFailed`: `run`'s stderr line, the
            // editor's message, ACP's chunk); the log keeps it at debug, not a second line.
            tracing::debug!("session not saved: {e}");
            if let Some(a) = self.agent.upgrade() {
                a.abort();
            }
            notices.insert(
                0,
                Notice::SaveFailed {
                    error: e.to_string(),
                },
            );
        }
        if matches!(event, AgentEvent::AttemptLeftOut) {
            let mut notices = Some(notices);
            for entry in appended {
                let notices = notices.take().unwrap_or_default();
                self.tell(AgentEvent::EntryAppended { entry }, notices)
                    .await;
            }
            // Nothing written (a save failure, or a file in Pi 0.73.1's format): the
            // notices still reach the listeners.
            if let Some(notices) = notices.filter(|n| !n.is_empty()) {
                for l in &self.listeners {
                    for n in &notices {
                        l.notice(n.clone()).await;
                    }
                }
            }
            return;
        }
        let first_turn = match &event {
            AgentEvent::AgentStart => {
                self.run_started.store(true, Ordering::Relaxed);
                false
            }
            AgentEvent::TurnStart => self.run_started.swap(false, Ordering::Relaxed),
            _ => false,
        };
        self.tell_json(event, notices, json).await;
        // Pi 1.6 sends the system message a run starts with (stored when the prompt or the
        // tools changed: a new session's first run) as a message of the run, after its
        // `turn_start`.
        if first_turn {
            if let Some(message) = self.recorder.take_untold_system() {
                let start = AgentEvent::SystemMessageStart {
                    message: message.clone(),
                };
                self.tell(start, Vec::new()).await;
                self.tell(AgentEvent::SystemMessageEnd { message }, Vec::new())
                    .await;
            }
        }
    }
}

impl SessionEvents {
    /// Hands `event` and its `notices` to every listener (the last one takes them).
    async fn tell(&self, event: AgentEvent, notices: Vec<Notice>) {
        self.tell_json(event, notices, None).await
    }

    /// [`SessionEvents::tell`] with the JSON of the message `event` carries, when made
    /// ([`SessionEvents::message_json`]).
    async fn tell_json(&self, event: AgentEvent, notices: Vec<Notice>, json: Option<MessageJson>) {
        match self.listeners.as_slice() {
            [] => {}
            [only] => only.event_json(event, notices, json).await,
            many => {
                for l in many {
                    l.event_json(event.clone(), notices.clone(), json.clone())
                        .await;
                }
            }
        }
    }
}

/// Pi's custom message (`{role: "custom", customType, content, display, details?,
/// timestamp}`) for a `custom_message` entry; `None` for other entries.
fn custom_view(entry: crate::session::EntryData, timestamp: i64) -> Option<Value> {
    if !matches!(entry, crate::session::EntryData::CustomMessage { .. }) {
        return None;
    }
    let (_, mut message) = entry.into_parts();
    let o = message.as_object_mut()?;
    o.insert("role".into(), Value::from("custom"));
    o.insert("timestamp".into(), Value::from(timestamp));
    Some(message)
}

/// The extensions' host of one session: entries in the session's file, messages through the
/// session, the rest through the product's [`ExtensionUi`]. The entries go to the writer
/// itself: `session_start` handlers read them while the session is being built.
pub(super) struct SessionHost {
    session: Weak<AgentSession>,
    writer: Arc<Mutex<SessionWriter>>,
    cwd: PathBuf,
    session_id: String,
    ui: Arc<dyn ExtensionUi>,
}

impl SessionHost {
    pub(super) fn new(
        session: Weak<AgentSession>,
        writer: Arc<Mutex<SessionWriter>>,
        cwd: PathBuf,
        session_id: String,
        ui: Arc<dyn ExtensionUi>,
    ) -> Self {
        SessionHost {
            session,
            writer,
            cwd,
            session_id,
            ui,
        }
    }

    fn session(&self) -> Result<Arc<AgentSession>, String> {
        self.session.upgrade().ok_or_else(|| {
            format!(
                "session {} is not open (not yet, or any more)",
                self.session_id
            )
        })
    }
}

#[async_trait]
impl ExtensionHost for SessionHost {
    fn cwd(&self) -> PathBuf {
        self.cwd.clone()
    }

    fn session_id(&self) -> String {
        self.session_id.clone()
    }

    fn append_entry(&self, custom_type: &str, data: Value) -> Result<String, String> {
        crate::extension::append_custom_entry(&self.writer, custom_type, data)
    }

    fn custom_entries(&self, custom_type: &str) -> Vec<Value> {
        crate::extension::custom_entries_of(&self.writer, custom_type)
    }

    /// [`AgentSession::send_custom_message`]: validated, queued, tracked, stored.
    async fn send_message(&self, m: CustomMessage) -> Result<(), String> {
        self.session()?
            .send_custom_message(m)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn has_ui(&self) -> bool {
        self.ui.has_ui()
    }

    async fn ui(&self, extension: &str, request: UiRequest) -> UiResponse {
        self.ui.ui(extension, request).await
    }

    async fn extension_error(&self, error: ExtensionErrorInfo) {
        self.ui.extension_error(error).await
    }

    fn branch_entries(&self) -> Vec<Value> {
        let Ok(w) = self.writer.lock() else {
            return Vec::new();
        };
        w.branch_path().into_iter().map(|e| e.raw()).collect()
    }

    /// Only the entries asked for are read back from the file (a long session's other lines
    /// are not).
    fn branch_entries_of(&self, kinds: &[&str]) -> Vec<Value> {
        let Ok(w) = self.writer.lock() else {
            return Vec::new();
        };
        // Only the entries whose shape may match are read (each kind's question prepared
        // once, not per entry).
        let tests: Vec<_> = kinds
            .iter()
            .map(|k| crate::session::EntryShape::kind_or_role_test(k))
            .collect();
        let maybe = |s: crate::session::EntryShape| tests.iter().any(|t| t(s));
        let Some(leaf) = w.leaf() else {
            return Vec::new();
        };
        w.tree()
            .path_where(leaf, maybe)
            .into_iter()
            .filter(|e| {
                kinds.iter().any(|k| match k.split_once(':') {
                    // One tool's results: the others are skipped unread.
                    Some(("toolResult", tool)) => e.kind == "message" && e.tool_is(tool),
                    _ => e.kind == *k || (e.kind == "message" && e.role() == Some(*k)),
                })
            })
            .map(|e| e.raw())
            .collect()
    }

    async fn wait_idle(&self) {
        if let Ok(s) = self.session() {
            s.agent_handle().wait_for_idle().await;
        }
    }

    fn active_tools(&self) -> Vec<String> {
        self.session()
            .map(|s| s.config().tools.iter().map(|t| t.spec().name).collect())
            .unwrap_or_default()
    }

    async fn send_user_message(&self, text: &str) -> Result<(), String> {
        self.session()?
            .prompt(
                text,
                Vec::new(),
                Some(crate::agent::Delivery::FollowUp),
                None,
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

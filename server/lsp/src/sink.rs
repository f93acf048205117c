//! Events → notifications: [`LspSink`] forwards every event of a session's agent as
//! `agent/event`, reports work-done progress (`$/progress`), and sends the session's notices
//! ([`Notice`]: queue, usage, attention; a failure to save as `window/showMessage` plus
//! `agent/attention` `failed`). The session has persisted each event before it comes here.
//!
//! Deltas are coalesced: `message_update` events carrying a `text_delta`, `thinking_delta` or
//! `toolcall_delta` that follow one another for the same content block within one frame
//! ([`DEFAULT_COALESCE`], `initializationOptions.coalesceDeltasMs`) go out as one event whose
//! `delta` is their concatenation. The window is a leading-edge throttle: a delta that comes
//! after a quiet window goes out at once (the first text after a pause is never delayed), the
//! ones that come within the window after it are joined and go out when it ends. Nothing is
//! reordered: a held delta goes out before any other event of the session (and before its
//! queue, usage and attention notices), and at the latest when its window ends. A client that appends deltas rebuilds the
//! same message; the wire shape is unchanged. A client that asked for compact deltas gets each
//! event as [`crate::delta`] encodes it (after coalescing).
//!
//! Frames are written straight to bytes ([`crate::event_json`]) and kept outside the LSP
//! library ([`crate::transport::Outside`]); the frames one call of the sink writes (a held
//! delta and the event after it, an event and its queue and usage notices) go to the library
//! as one placeholder, in the order written, so that the library carries one placeholder per
//! call, not per frame. Anything the library sends itself (a request, `window/showMessage`)
//! goes after the frames written before it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use pi_ai::models::ModelCost;
use pi_ai::{AssistantEvent, AssistantMessage, Message};
use pi_core::agent::{AgentEvent, CompactionReason, Follower, WeakAgent};
use pi_core::harness::{Notice, SessionListener};
use pi_core::session::MessageJson;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::{
    notification::Progress, request::WorkDoneProgressCreate, MessageType, NumberOrString,
    ProgressParams, ProgressParamsValue, ProgressToken, WorkDoneProgress, WorkDoneProgressBegin,
    WorkDoneProgressCreateParams, WorkDoneProgressEnd, WorkDoneProgressReport,
};
use tower_lsp_server::Client;

use crate::delta::Compacted;
use crate::event_json::{event_frame, EventHead, Repeats};
use crate::protocol::{
    AgentEventParams, AttentionNotification, AttentionParams, AttentionReason,
    QueueUpdateNotification, QueueUpdateParams, UsageNotification, UsageParams,
};
use crate::state::State;

/// How long a streamed delta may wait for the next ones of the same block (one frame at
/// 60 Hz), unless `initializationOptions.coalesceDeltasMs` says otherwise.
pub const DEFAULT_COALESCE: Duration = Duration::from_millis(16);

/// The longest `initializationOptions.coalesceDeltasMs` accepted, in ms.
pub const MAX_COALESCE_MS: u64 = 1000;

/// `initializationOptions.coalesceDeltasMs`: `Ok(None)` when absent or `null`, else the window
/// (`0`: every delta goes out as it comes). Anything but an integer from 0 to
/// [`MAX_COALESCE_MS`] is an error naming the field.
pub(crate) fn coalesce_option(
    options: Option<&serde_json::Value>,
) -> Result<Option<Duration>, String> {
    let Some(v) = options
        .and_then(|o| o.get("coalesceDeltasMs"))
        .filter(|v| !v.is_null())
    else {
        return Ok(None);
    };
    match v.as_u64().filter(|ms| *ms <= MAX_COALESCE_MS) {
        Some(ms) => Ok(Some(Duration::from_millis(ms))),
        None => Err(format!(
            "initializationOptions.coalesceDeltasMs: expected an integer from 0 to {MAX_COALESCE_MS} (milliseconds), got {v}"
        )),
    }
}

/// A delta event held back, with the run it belongs to.
struct Held {
    run_id: String,
    event: AgentEvent,
}

/// What waits to go out (the held delta, and the number of the window it opened: a window's
/// timer flushes only its own), and what went out: the last `seq` sent and the streaming
/// message as the events sent so far build it.
#[derive(Default)]
struct Outbox {
    held: Option<Held>,
    window: u64,
    /// When the last delta held must go out, and the number of the window it was held in
    /// ([`Outbox::window`]): what the flusher task acts on ([`LspSink::hold`]).
    due: Option<(Instant, u64)>,
    /// A flusher task is waiting for [`Outbox::due`] (one at a time per sink; it ends once it
    /// acted on the last hold's deadline).
    flusher: bool,
    /// Until when a new delta waits (the end of the window the last delta sent opened): a
    /// delta that comes later goes out at once (leading edge), so the first text of a block
    /// after a pause is never held.
    quiet_until: Option<Instant>,
    /// The `seq` of the last `agent/event` sent for the session (0: none yet).
    seq: u64,
    /// The assistant message being streamed, rebuilt from exactly the events sent (the same
    /// reconstruction a client makes: [`Follower`], the same as [`pi_ai::stream::MessageBuilder::follow`]).
    sent: Option<Follower>,
    /// Set when the client asked for compact deltas (see [`crate::delta`]).
    compact: Option<crate::delta::DeltaEncoder>,
    /// Where event frames are written outside the LSP library's buffer (see
    /// [`crate::transport::Outside`]).
    outside: Arc<crate::transport::Outside>,
    /// The messages the current turn sent, with their JSON (see [`crate::event_json`]).
    repeats: Repeats,
    /// The start of the run's `agent/event` frames, serialised once per run.
    head: EventHead,
    /// Frames written by the sink's current call and not yet handed to the transport: handed
    /// over as one at the call's end ([`Outbox::flush`]), or before anything the LSP library
    /// sends itself, so they keep their order with every other message.
    batch: Vec<u8>,
}

impl Outbox {
    /// Numbers `event` (run `run_id` of session `session_id`), folds it into [`Outbox::sent`]
    /// and sends it as `agent/event`. `rates` are the model's (for the usage cost of the
    /// message a `message_start` begins); `json`, the JSON of the event's message when the
    /// session made it ([`SessionListener::event_json`]).
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &mut self,
        client: &Client,
        session_id: &str,
        run_id: String,
        event: AgentEvent,
        rates: impl FnOnce() -> ModelCost,
        unsaved: bool,
        json: Option<MessageJson>,
    ) {
        self.seq += 1;
        match &event {
            AgentEvent::MessageStart { message } => {
                if let Message::Assistant(a) = &**message {
                    self.sent = Some(Follower::new(a.clone(), rates()));
                }
            }
            AgentEvent::MessageUpdate {
                assistant_message_event,
            } => {
                if let Some(b) = self.sent.as_mut() {
                    b.apply(assistant_message_event);
                }
            }
            AgentEvent::MessageEnd { message } if matches!(**message, Message::Assistant(_)) => {
                self.sent = None
            }
            AgentEvent::AgentEnd { .. } => self.sent = None,
            _ => {}
        }
        if !self.outside.is_active() {
            // No guard writes the output: every notification goes through the library.
            self.repeats.passed(&event);
            let params = AgentEventParams {
                session_id: session_id.to_string(),
                run_id,
                seq: self.seq,
                event,
                unsaved,
            };
            return crate::delta::send(client, &self.outside, self.compact.as_mut(), params).await;
        }
        let head = match self.head.of(session_id, &run_id) {
            Ok(head) => head,
            Err(e) => {
                return tracing::error!("agent/event not sent: its ids cannot be serialised: {e}")
            }
        };
        let frame = if Repeats::takes(&event) {
            // A message the turn sent already is written from its bytes.
            let session_ref = self.compact.as_mut().map(|c| c.full(&run_id, &event));
            self.repeats
                .frame(head, self.seq, event, unsaved, session_ref, json)
        } else {
            self.repeats.passed(&event);
            match self.compact.as_mut() {
                None => event_frame(head, self.seq, &event, unsaved, None),
                Some(c) => match c.compact(&run_id, self.seq, event) {
                    Compacted::Delta(delta) => {
                        return self
                            .notify::<crate::delta::AgentDeltaNotification>(client, delta)
                            .await
                    }
                    Compacted::Full(event, r) => {
                        event_frame(head, self.seq, &event, unsaved, Some(r))
                    }
                },
            }
        };
        if let Some(frame) = frame {
            self.push_frame(frame);
        }
    }

    /// Adds `frame` (a whole notification frame) to [`Outbox::batch`].
    fn push_frame(&mut self, frame: Vec<u8>) {
        if self.batch.is_empty() {
            self.batch = frame;
        } else {
            self.batch.extend_from_slice(&frame);
        }
    }

    /// Sends notification `N` with `params` after what the sink's call sent before: its frame
    /// added to [`Outbox::batch`] while a guard writes the output, else through the library
    /// (`client`) at once.
    async fn notify<N: Notification>(&mut self, client: &Client, params: N::Params) {
        if !self.outside.is_active() {
            return client.send_notification::<N>(params).await;
        }
        if let Some(frame) = crate::transport::notification_frame(N::METHOD, &params) {
            self.push_frame(frame);
        }
    }

    /// Hands [`Outbox::batch`] to the transport as one frame (its frames' bytes one after
    /// the other, in one placeholder's place: the LSP library carries one placeholder for the
    /// frames one call of the sink wrote, in the order they were written). Called at the end
    /// of every call of the sink that sends, and before the library sends anything itself
    /// (a request, `window/showMessage`, a notification of its own).
    async fn flush(&mut self, client: &Client) {
        if !self.batch.is_empty() {
            let frames = std::mem::take(&mut self.batch);
            self.outside.send_frame(client, frames).await;
        }
    }

    /// Sends the held delta, if any (deltas never start a message: no rates needed).
    async fn send_held(&mut self, client: &Client, session_id: &str) {
        if let Some(h) = self.held.take() {
            self.send(
                client,
                session_id,
                h.run_id,
                h.event,
                ModelCost::default,
                false,
                None,
            )
            .await;
        }
    }
}

/// Persists, reports progress, and forwards every event as `agent/event`.
pub(crate) struct LspSink {
    st: Arc<State>,
    session_id: String,
    agent: WeakAgent,
    /// The work-done progress token of the active run.
    progress: Mutex<Option<ProgressToken>>,
    last_report: Mutex<Option<Instant>>,
    /// Deltas being coalesced (see the module doc); locked while anything is sent, so a
    /// window's timer and the next event cannot overtake each other.
    outbox: Arc<tokio::sync::Mutex<Outbox>>,
    /// The session's file stopped taking entries (told once, until it takes them again).
    save_failing: AtomicBool,
}

#[async_trait::async_trait]
impl crate::state::SessionOutput for LspSink {
    async fn sent(&self) -> (u64, Option<AssistantMessage>) {
        LspSink::sent(self).await
    }

    async fn send_extra(&self, run_id: String, event: AgentEvent) {
        LspSink::send_extra(self, run_id, event).await
    }
}

/// Minimum interval between `$/progress` reports while text streams.
const REPORT_EVERY: Duration = Duration::from_millis(50);

impl LspSink {
    /// The sink of session `session_id` (its agent).
    pub(crate) fn new(st: Arc<State>, session_id: String, agent: WeakAgent) -> LspSink {
        LspSink {
            session_id,
            agent,
            progress: Mutex::new(None),
            last_report: Mutex::new(None),
            save_failing: AtomicBool::new(false),
            outbox: Arc::new(tokio::sync::Mutex::new(Outbox {
                compact: st.compact_deltas.encoder(),
                outside: st.outside.clone(),
                ..Outbox::default()
            })),
            st,
        }
    }

    /// Holds delta `event` of the agent's current run (joining the held one when it continues
    /// the same block of the same run, else sending the held one first). A delta that comes
    /// when no delta went out within the last `window` is sent at once and opens a window;
    /// one that comes inside a window is held, and the window's timer sends it (with what
    /// joined it) when the window ends, opening the next. So a client gets the first text of a
    /// block without delay and at most one delta event per window after it. The run id is
    /// copied only when a new delta is held or sent.
    async fn hold(&self, mut event: AgentEvent, window: Duration) {
        let mut out = self.outbox.lock().await;
        if let Some(held) = out.held.as_mut() {
            if let (Some((k, i, to)), Some((kk, ii, more))) = (
                crate::delta::delta_of(&mut held.event),
                crate::delta::delta_of(&mut event),
            ) {
                if k == kk && i == ii && self.is_run(&held.run_id) {
                    to.push_str(more);
                    return;
                }
            }
        }
        out.send_held(&self.st.client, &self.session_id).await;
        let now = Instant::now();
        let deadline = match out.quiet_until {
            Some(t) if t > now => t,
            _ => {
                // No delta went out within the window: this one goes at once and opens one.
                out.quiet_until = Some(now + window);
                let run_id = self.run_id();
                out.send(
                    &self.st.client,
                    &self.session_id,
                    run_id,
                    event,
                    ModelCost::default,
                    false,
                    None,
                )
                .await;
                return out.flush(&self.st.client).await;
            }
        };
        out.flush(&self.st.client).await;
        out.window += 1;
        out.held = Some(Held {
            run_id: self.run_id(),
            event,
        });
        out.due = Some((deadline, out.window));
        if out.flusher {
            // The running flusher finds this deadline when it wakes (deadlines only grow).
            return;
        }
        out.flusher = true;
        let (outbox, client, session_id) = (
            self.outbox.clone(),
            self.st.client.clone(),
            self.session_id.clone(),
        );
        // One task per window at most, not one per held delta: it sleeps until the deadline
        // of the last hold, and acts as that hold's own timer would (the window ends: the held
        // delta, if nothing sent it before, goes out and opens the next window), then ends.
        tokio::spawn(async move {
            let mut at = deadline;
            loop {
                tokio::time::sleep_until(at.into()).await;
                let mut out = outbox.lock().await;
                match out.due {
                    // A later window's hold: its deadline is the one to wait for.
                    Some((later, _)) if later > at => at = later,
                    due => {
                        out.due = None;
                        out.flusher = false;
                        if due.is_some_and(|(_, n)| n == out.window) {
                            out.quiet_until = Some(Instant::now() + window);
                            out.send_held(&client, &session_id).await;
                            out.flush(&client).await;
                        }
                        return;
                    }
                }
            }
        });
    }

    /// What the client was sent: the `seq` of the last `agent/event` of the session, and the
    /// message being streamed as exactly the events up to it build it. A delta held back for
    /// coalescing is in neither (it goes out later, with a greater `seq`), so a client that
    /// takes this snapshot and applies only the events numbered after it rebuilds the message
    /// exactly, whatever order the answer and the notifications arrive in.
    pub(crate) async fn sent(&self) -> (u64, Option<AssistantMessage>) {
        let mut out = self.outbox.lock().await;
        let seq = out.seq;
        (seq, out.sent.as_mut().map(Follower::snapshot))
    }

    /// Sends `event` of run `run_id`, not one of the agent's (an extension's error), as the
    /// session's next `agent/event`, after what is held.
    pub(crate) async fn send_extra(&self, run_id: String, event: AgentEvent) {
        let mut out = self.outbox.lock().await;
        out.send_held(&self.st.client, &self.session_id).await;
        out.send(
            &self.st.client,
            &self.session_id,
            run_id,
            event,
            || self.rates(),
            false,
            None,
        )
        .await;
        out.flush(&self.st.client).await;
    }

    /// The model's cost rates (for a message's usage cost).
    fn rates(&self) -> ModelCost {
        self.agent
            .upgrade()
            .map(|a| a.with_config(|c| c.model.cost.clone()))
            .unwrap_or_default()
    }

    fn run_id(&self) -> String {
        self.agent
            .upgrade()
            .and_then(|a| a.run_id())
            .unwrap_or_default()
    }

    /// Whether `run_id` is what [`LspSink::run_id`] would say now (compared in place).
    fn is_run(&self, run_id: &str) -> bool {
        match self.agent.upgrade() {
            Some(a) => a.with_run_id(|id| id.unwrap_or_default() == run_id),
            None => run_id.is_empty(),
        }
    }

    /// Creates the run's progress token when the client supports work-done progress.
    async fn create_progress(&self) {
        *self.progress.lock() = None;
        if !self.st.caps().work_done_progress {
            return;
        }
        let t = NumberOrString::String(format!("pi-lsp/{}", self.run_id()));
        let create = crate::client::request::<WorkDoneProgressCreate>(
            &self.st.client,
            WorkDoneProgressCreateParams { token: t.clone() },
            None,
        );
        match create.await.into_result() {
            Ok(()) => *self.progress.lock() = Some(t),
            Err(e) => tracing::warn!("window/workDoneProgress/create failed: {}", e.message),
        }
    }

    /// Sends `$/progress` with `value` for the run's token (none: nothing). Serialised once
    /// straight to its frame, as the events are ([`crate::transport::Outside`]): a tool call's
    /// report costs no `Value` of its params in the LSP library.
    async fn progress(&self, value: WorkDoneProgress) {
        let token = self.progress.lock().clone();
        if let Some(token) = token {
            self.st
                .outside
                .send::<Progress>(
                    &self.st.client,
                    ProgressParams {
                        token,
                        value: ProgressParamsValue::WorkDone(value),
                    },
                )
                .await;
        }
    }

    /// Reports `message()` unless the last report is under [`REPORT_EVERY`] old (`force`:
    /// always); the line is only built when it goes out (not for every streamed delta).
    async fn report(&self, message: impl FnOnce() -> String, force: bool) {
        {
            let mut last = self.last_report.lock();
            if !force && last.is_some_and(|t| t.elapsed() < REPORT_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        if self.progress.lock().is_none() {
            return; // no progress token: nothing to report to
        }
        self.progress(WorkDoneProgress::Report(WorkDoneProgressReport {
            cancellable: Some(false),
            message: Some(message()),
            percentage: None,
        }))
        .await;
    }
}

#[async_trait]
impl SessionListener for LspSink {
    async fn notice(&self, notice: Notice) {
        // What is held goes out first, and nothing overtakes this notice.
        let mut out = self.outbox.lock().await;
        out.send_held(&self.st.client, &self.session_id).await;
        let run_id = self.run_id();
        self.send_notice(&mut out, notice, &run_id).await;
        out.flush(&self.st.client).await;
    }

    async fn event(&self, event: AgentEvent, notices: Vec<Notice>) {
        self.event_json(event, notices, None).await
    }

    /// Every message is written whole in the events' frames: its JSON, made once with the
    /// session file's line, is used as it is ([`Repeats::frame`]).
    fn wants_message_json(&self) -> bool {
        true
    }

    async fn event_json(
        &self,
        mut event: AgentEvent,
        notices: Vec<Notice>,
        json: Option<MessageJson>,
    ) {
        let window = self.st.coalesce();
        if notices.is_empty() && !window.is_zero() && crate::delta::delta_of(&mut event).is_some() {
            if let AgentEvent::MessageUpdate {
                assistant_message_event: AssistantEvent::TextDelta { delta, .. },
            } = &event
            {
                self.report(|| progress_line(delta), false).await;
            }
            self.hold(event, window).await;
            return;
        }
        // Anything else: what is held goes out first, and nothing overtakes this event.
        let mut out = self.outbox.lock().await;
        out.send_held(&self.st.client, &self.session_id).await;
        if self.st.caps().work_done_progress {
            // Progress goes through the library (its token's creation is a request).
            out.flush(&self.st.client).await;
        }
        match &event {
            AgentEvent::AgentStart => {
                self.create_progress().await;
                self.progress(WorkDoneProgress::Begin(WorkDoneProgressBegin {
                    title: "pi agent".into(),
                    cancellable: Some(false),
                    message: Some("thinking…".into()),
                    percentage: None,
                }))
                .await
            }
            AgentEvent::MessageUpdate {
                assistant_message_event: AssistantEvent::TextDelta { delta, .. },
            } => self.report(|| progress_line(delta), false).await,
            AgentEvent::ToolExecutionStart { tool_name, .. } => {
                self.report(|| format!("running {tool_name}"), true).await
            }
            AgentEvent::CompactionStart {
                reason: CompactionReason::Manual,
            } => {
                self.create_progress().await;
                self.progress(WorkDoneProgress::Begin(WorkDoneProgressBegin {
                    title: "pi agent".into(),
                    cancellable: Some(false),
                    message: Some("compacting the conversation…".into()),
                    percentage: None,
                }))
                .await
            }
            AgentEvent::CompactionStart { .. } => {
                self.report(|| "compacting the conversation…".into(), true)
                    .await
            }
            AgentEvent::CompactionEnd {
                reason: CompactionReason::Manual,
                ..
            } => {
                self.progress(WorkDoneProgress::End(WorkDoneProgressEnd {
                    message: Some("compacted".into()),
                }))
                .await
            }
            _ => {}
        }
        if matches!(event, AgentEvent::AgentEnd { .. }) {
            // End the progress first so a client that sees agent_end has seen everything.
            self.progress(WorkDoneProgress::End(WorkDoneProgressEnd {
                message: Some("done".into()),
            }))
            .await;
        }
        let run_id = self.run_id();
        // An entry the file could not take is marked in its own frame; the first of a streak
        // is also told to the user (`Notice::SaveFailed`), and the end of the streak.
        let unsaved = notices
            .iter()
            .any(|n| matches!(n, Notice::SaveFailed { .. }));
        let records = matches!(
            event,
            AgentEvent::MessageEnd { .. }
                | AgentEvent::TurnEnd { .. }
                | AgentEvent::AgentEnd { .. }
        );
        let saving_again = records && !unsaved && self.save_failing.swap(false, Ordering::SeqCst);
        // Queue and usage notices describe this event: they follow it.
        out.send(
            &self.st.client,
            &self.session_id,
            run_id.clone(),
            event,
            || self.rates(),
            unsaved,
            json,
        )
        .await;
        if saving_again {
            out.flush(&self.st.client).await;
            self.st
                .client
                .show_message(
                    MessageType::INFO,
                    "pi-lsp: the session is being saved again; the entries it could not save before are in its file now.",
                )
                .await;
        }
        for n in notices {
            self.send_notice(&mut out, n, &run_id).await;
        }
        out.flush(&self.st.client).await;
    }
}

impl LspSink {
    /// Sends one notice of the session (run `run_id`) after what `out` holds. Queue, usage
    /// and attention notices are serialised once straight to their frames, as the events are,
    /// and join the call's batch ([`Outbox::notify`]: no `Value` of their params in the LSP
    /// library); the others go through the library after the batch ([`Outbox::flush`]).
    async fn send_notice(&self, out: &mut Outbox, notice: Notice, run_id: &str) {
        let client = &self.st.client;
        match notice {
            Notice::Queue {
                message,
                state,
                steering,
                follow_up,
            } => {
                out.notify::<QueueUpdateNotification>(
                    client,
                    QueueUpdateParams {
                        session_id: self.session_id.clone(),
                        queue_id: message.queue_id,
                        delivery: message.delivery,
                        state,
                        text: message.text,
                        steering,
                        follow_up,
                    },
                )
                .await
            }
            Notice::Usage {
                turn,
                session,
                context_tokens,
            } => {
                out.notify::<UsageNotification>(
                    client,
                    UsageParams {
                        session_id: self.session_id.clone(),
                        run_id: run_id.to_string(),
                        turn,
                        session,
                        context_tokens,
                        context_window: self
                            .agent
                            .upgrade()
                            .map(|a| a.with_config(|c| c.model.context_window))
                            .unwrap_or_default(),
                    },
                )
                .await
            }
            Notice::Attention { reason, message } => {
                out.notify::<AttentionNotification>(
                    client,
                    AttentionParams {
                        session_id: self.session_id.clone(),
                        run_id: Some(run_id.to_string()),
                        reason,
                        message,
                    },
                )
                .await
            }
            // A change that landed (or failed) after its run was aborted: told to the user,
            // who may see the buffer change with no run going (pi_core::harness::late).
            Notice::LateResult {
                applied, message, ..
            } => {
                out.flush(client).await;
                let kind = if applied {
                    MessageType::WARNING
                } else {
                    MessageType::INFO
                };
                client
                    .show_message(kind, format!("pi-lsp: {message}"))
                    .await;
            }
            Notice::Plan(state) => {
                out.flush(client).await;
                crate::methods::plan::notify(client, &self.session_id, state).await
            }
            // Told twice: to the user at once, and to the client as the run's failure.
            Notice::SaveFailed { error } => {
                if self.save_failing.swap(true, Ordering::SeqCst) {
                    // Already told; the frame of each unsaved entry says it (`unsaved`).
                    return;
                }
                out.flush(client).await;
                let message = format!(
                    "pi-lsp: the session is no longer being saved ({error}); the run was stopped. What could not be saved is kept in memory and written once the file takes writes again (free space, then prompt again or close the session)."
                );
                client
                    .show_message(MessageType::ERROR, message.clone())
                    .await;
                client
                    .send_notification::<AttentionNotification>(AttentionParams {
                        session_id: self.session_id.clone(),
                        run_id: Some(run_id.to_string()),
                        reason: AttentionReason::Failed,
                        message,
                    })
                    .await
            }
        }
    }
}

/// The `$/progress` message while text streams: the last line of the newest delta (80
/// characters at most), else `writing…`.
fn progress_line(delta: &str) -> String {
    let line = delta
        .lines()
        .last()
        .unwrap_or("")
        .chars()
        .take(80)
        .collect::<String>();
    if line.trim().is_empty() {
        "writing…".into()
    } else {
        line
    }
}

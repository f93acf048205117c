//! Events → notifications: [`LspSink`] forwards every event of a session's agent as
//! `agent/event`, reports work-done progress (`$/progress`), persists the run through the
//! session's [`Recorder`] (a failure is told to the user and stops the run), and sends the
//! queue, usage and attention notices the [`Tracker`] derives from the events.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pi_ai::{AssistantEvent, Message};
use pi_core::agent::{AgentEvent, CompactionReason, EventSink, WeakAgent};
use pi_core::harness::Recorder;
use tower_lsp_server::ls_types::{
    notification::Progress, MessageType, NumberOrString, ProgressParams, ProgressParamsValue,
    ProgressToken, WorkDoneProgress, WorkDoneProgressBegin, WorkDoneProgressEnd,
    WorkDoneProgressReport,
};
use tower_lsp_server::Client;

use crate::protocol::{
    AgentEventNotification, AgentEventParams, AttentionNotification, AttentionParams,
    QueueUpdateNotification, QueueUpdateParams, UsageNotification, UsageParams,
};
use crate::server::{lock, State};
use crate::tracker::{Notice, Tracker};

/// Sends `agent/queueUpdate` for `report` now in `state`.
pub(crate) async fn send_queue_update(
    client: &Client,
    session_id: &str,
    tracker: &Tracker,
    report: &crate::protocol::QueuedMessage,
    state: crate::protocol::QueueState,
) {
    let (steering, follow_up) = tracker.waiting();
    client
        .send_notification::<QueueUpdateNotification>(
            serde_json::to_value(QueueUpdateParams {
                session_id: session_id.to_string(),
                queue_id: report.queue_id.clone(),
                delivery: report.delivery,
                state,
                text: report.text.clone(),
                steering,
                follow_up,
            })
            .unwrap_or_default(),
        )
        .await;
}

/// Persists, reports progress, and forwards every event as `agent/event`.
pub(crate) struct LspSink {
    st: Arc<State>,
    session_id: String,
    agent: WeakAgent,
    recorder: Recorder,
    tracker: Arc<Tracker>,
    /// The work-done progress token of the active run.
    progress: Mutex<Option<ProgressToken>>,
    last_report: Mutex<Option<Instant>>,
}

/// Minimum interval between `$/progress` reports while text streams.
const REPORT_EVERY: Duration = Duration::from_millis(50);

impl LspSink {
    /// The sink of session `session_id` (its agent, its file's writer, its tracker).
    pub(crate) fn new(
        st: Arc<State>,
        session_id: String,
        agent: WeakAgent,
        writer: Arc<Mutex<pi_core::session::SessionWriter>>,
        tracker: Arc<Tracker>,
    ) -> LspSink {
        LspSink {
            st,
            session_id,
            agent,
            recorder: Recorder::new(writer),
            tracker,
            progress: Mutex::new(None),
            last_report: Mutex::new(None),
        }
    }

    fn run_id(&self) -> String {
        self.agent
            .upgrade()
            .and_then(|a| a.run_id())
            .unwrap_or_default()
    }

    /// Creates the run's progress token when the client supports work-done progress.
    async fn create_progress(&self) {
        *lock(&self.progress) = None;
        if !self.st.caps().work_done_progress {
            return;
        }
        let t = NumberOrString::String(format!("pi-lsp/{}", self.run_id()));
        match self.st.client.create_work_done_progress(t.clone()).await {
            Ok(()) => *lock(&self.progress) = Some(t),
            Err(e) => tracing::warn!("window/workDoneProgress/create failed: {}", e.message),
        }
    }

    async fn progress(&self, value: WorkDoneProgress) {
        let token = lock(&self.progress).clone();
        if let Some(token) = &token {
            self.st
                .client
                .send_notification::<Progress>(ProgressParams {
                    token: token.clone(),
                    value: ProgressParamsValue::WorkDone(value),
                })
                .await;
        }
    }

    async fn report(&self, message: String, force: bool) {
        {
            let mut last = lock(&self.last_report);
            if !force && last.is_some_and(|t| t.elapsed() < REPORT_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        self.progress(WorkDoneProgress::Report(WorkDoneProgressReport {
            cancellable: Some(false),
            message: Some(message),
            percentage: None,
        }))
        .await;
    }
}

#[async_trait]
impl EventSink for LspSink {
    async fn emit(&self, event: AgentEvent) {
        let notices = self.tracker.on_event(&event);
        let substitute = match &event {
            AgentEvent::MessageEnd {
                message: m @ Message::User(_),
            } => self.tracker.substitute(m),
            _ => None,
        };
        let recorded = match substitute {
            // A delivered custom message or shell output is stored as what it is.
            Some((kind, fields)) => self.recorder.record_entry(&kind, fields),
            None => self.recorder.record(&event),
        };
        if let Err(e) = recorded {
            tracing::error!("session not saved: {e}");
            self.st
                .client
                .show_message(
                    MessageType::ERROR,
                    format!(
                        "pi-lsp: the session is no longer being saved ({e}); the run was stopped."
                    ),
                )
                .await;
            if let Some(a) = self.agent.upgrade() {
                a.abort();
            }
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
            } => {
                let line = delta
                    .lines()
                    .last()
                    .unwrap_or("")
                    .chars()
                    .take(80)
                    .collect::<String>();
                self.report(
                    if line.trim().is_empty() {
                        "writing…".into()
                    } else {
                        line
                    },
                    false,
                )
                .await
            }
            AgentEvent::ToolExecutionStart { tool_name, .. } => {
                self.report(format!("running {tool_name}"), true).await
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
                self.report("compacting the conversation…".into(), true)
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
        // Queue and usage notices describe this event: they follow it.
        self.st
            .client
            .send_notification::<AgentEventNotification>(
                serde_json::to_value(AgentEventParams {
                    session_id: self.session_id.clone(),
                    run_id: run_id.clone(),
                    event,
                })
                .unwrap_or_default(),
            )
            .await;
        for n in notices {
            match n {
                Notice::Queue { message, state } => {
                    send_queue_update(
                        &self.st.client,
                        &self.session_id,
                        &self.tracker,
                        &message,
                        state,
                    )
                    .await
                }
                Notice::Usage {
                    turn,
                    session,
                    context_tokens,
                } => {
                    self.st
                        .client
                        .send_notification::<UsageNotification>(
                            serde_json::to_value(UsageParams {
                                session_id: self.session_id.clone(),
                                run_id: run_id.clone(),
                                turn,
                                session,
                                context_tokens,
                                context_window: self
                                    .agent
                                    .upgrade()
                                    .map(|a| a.config().model.context_window)
                                    .unwrap_or_default(),
                            })
                            .unwrap_or_default(),
                        )
                        .await
                }
                Notice::Attention { reason, message } => {
                    self.st
                        .client
                        .send_notification::<AttentionNotification>(
                            serde_json::to_value(AttentionParams {
                                session_id: self.session_id.clone(),
                                run_id: Some(run_id.clone()),
                                reason,
                                message,
                            })
                            .unwrap_or_default(),
                        )
                        .await
                }
            }
        }
    }
}

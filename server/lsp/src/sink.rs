//! Events → notifications: [`LspSink`] forwards every event of a session's agent as
//! `agent/event`, reports work-done progress (`$/progress`), and sends the session's notices
//! ([`Notice`]: queue, usage, attention; a failure to save as `window/showMessage` plus
//! `agent/attention` `failed`). The session has persisted each event before it comes here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use pi_ai::AssistantEvent;
use pi_core::agent::{AgentEvent, CompactionReason, WeakAgent};
use pi_core::harness::{Notice, SessionListener};
use tower_lsp_server::ls_types::{
    notification::Progress, MessageType, NumberOrString, ProgressParams, ProgressParamsValue,
    ProgressToken, WorkDoneProgress, WorkDoneProgressBegin, WorkDoneProgressEnd,
    WorkDoneProgressReport,
};

use crate::protocol::{
    AgentEventNotification, AgentEventParams, AttentionNotification, AttentionParams,
    AttentionReason, QueueUpdateNotification, QueueUpdateParams, UsageNotification, UsageParams,
};
use crate::server::State;

/// Persists, reports progress, and forwards every event as `agent/event`.
pub(crate) struct LspSink {
    st: Arc<State>,
    session_id: String,
    agent: WeakAgent,
    /// The work-done progress token of the active run.
    progress: Mutex<Option<ProgressToken>>,
    last_report: Mutex<Option<Instant>>,
}

/// Minimum interval between `$/progress` reports while text streams.
const REPORT_EVERY: Duration = Duration::from_millis(50);

impl LspSink {
    /// The sink of session `session_id` (its agent).
    pub(crate) fn new(st: Arc<State>, session_id: String, agent: WeakAgent) -> LspSink {
        LspSink {
            st,
            session_id,
            agent,
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
        *self.progress.lock() = None;
        if !self.st.caps().work_done_progress {
            return;
        }
        let t = NumberOrString::String(format!("pi-lsp/{}", self.run_id()));
        match self.st.client.create_work_done_progress(t.clone()).await {
            Ok(()) => *self.progress.lock() = Some(t),
            Err(e) => tracing::warn!("window/workDoneProgress/create failed: {}", e.message),
        }
    }

    async fn progress(&self, value: WorkDoneProgress) {
        let token = self.progress.lock().clone();
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
            let mut last = self.last_report.lock();
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
impl SessionListener for LspSink {
    async fn notice(&self, notice: Notice) {
        let run_id = self.run_id();
        self.send_notice(notice, &run_id).await
    }

    async fn event(&self, event: AgentEvent, notices: Vec<Notice>) {
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
            self.send_notice(n, &run_id).await;
        }
    }
}

impl LspSink {
    /// Sends one notice of the session (run `run_id`).
    async fn send_notice(&self, notice: Notice, run_id: &str) {
        let client = &self.st.client;
        match notice {
            Notice::Queue {
                message,
                state,
                steering,
                follow_up,
            } => {
                client
                    .send_notification::<QueueUpdateNotification>(QueueUpdateParams {
                        session_id: self.session_id.clone(),
                        queue_id: message.queue_id,
                        delivery: message.delivery,
                        state,
                        text: message.text,
                        steering,
                        follow_up,
                    })
                    .await
            }
            Notice::Usage {
                turn,
                session,
                context_tokens,
            } => {
                client
                    .send_notification::<UsageNotification>(UsageParams {
                        session_id: self.session_id.clone(),
                        run_id: run_id.to_string(),
                        turn,
                        session,
                        context_tokens,
                        context_window: self
                            .agent
                            .upgrade()
                            .map(|a| a.config().model.context_window)
                            .unwrap_or_default(),
                    })
                    .await
            }
            Notice::Attention { reason, message } => {
                client
                    .send_notification::<AttentionNotification>(AttentionParams {
                        session_id: self.session_id.clone(),
                        run_id: Some(run_id.to_string()),
                        reason,
                        message,
                    })
                    .await
            }
            // Told twice: to the user at once, and to the client as the run's failure.
            Notice::SaveFailed { error } => {
                let message = format!(
                    "pi-lsp: the session is no longer being saved ({error}); the run was stopped."
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

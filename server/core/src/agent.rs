//! The agent loop (seed §3 "The agent loop").
//!
//! ```text
//! outer loop: follow-up re-entry
//!   inner loop: assistant → tool batch → paired results → steering → assistant
//! ```
//! Each completed assistant message is appended before its tool batch runs; each call gets
//! exactly one [`ToolResultMessage`], stored in call order; the next request therefore carries
//! every call with its result. Ordinary tool failures become error results the model can
//! repair; a provider error or an abort ends the run. When a response stopped for the length
//! limit, no call in it executes (seed §3 "Length-limit guardrail").
//!
//! The loop knows only `pi-ai` and the [`Tool`] trait. Listeners (persistence, the editor) see
//! every step through an [`EventSink`], awaited in order like Pi's subscribers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pi_ai::{
    AssistantEvent, AssistantMessage, ContentBlock, Context, Message, Model, StopReason,
    StreamOptions, ToolCall, ToolResultMessage, ToolSpec,
};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// What a tool produced: content for the model, details for the UI (Pi's `AgentToolResult`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolOutput {
    pub content: Vec<ContentBlock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ToolOutput {
    /// A text-only output.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            content: vec![ContentBlock::text(text)],
            details: None,
        }
    }
}

/// A tool failure: the message becomes the text of an error result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub message: String,
    pub details: Option<Value>,
}

impl ToolError {
    /// A failure with only a message.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            details: None,
        }
    }
}

/// Progress callback of one running call; updates after the call settled are dropped.
pub type UpdateFn = Arc<dyn Fn(ToolOutput) + Send + Sync>;

/// What a tool gets besides its arguments.
#[derive(Clone)]
pub struct ToolContext {
    /// The model's call id.
    pub call_id: String,
    /// 1-based number of the turn (assistant response) within the run, for labels such as an
    /// editor's undo step.
    pub turn: usize,
    /// Cancelled when the run is aborted; long work must watch it.
    pub cancel: CancellationToken,
    /// Emits `tool_execution_update` (progress only; the returned value is canonical).
    pub on_update: UpdateFn,
}

/// A tool the model may call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Name, description and JSON Schema of the arguments, as sent to the model.
    fn spec(&self) -> ToolSpec;
    /// True for tools that must not run concurrently with others (seed §3 "Batch scheduling":
    /// a batch containing any sequential tool runs wholly in call order).
    fn sequential(&self) -> bool {
        false
    }
    /// Runs the call. `Err` becomes a paired error result.
    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError>;
}

/// One event of a run, serialized with Pi's names and shapes (`{"type":"turn_start"}`, …).
/// `message_update` carries only the newest fragment, never the accumulated partial.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum AgentEvent {
    AgentStart,
    TurnStart,
    MessageStart {
        message: Message,
    },
    MessageUpdate {
        assistant_message_event: AssistantEvent,
    },
    MessageEnd {
        message: Message,
    },
    ToolExecutionStart {
        tool_call_id: String,
        tool_name: String,
        args: Value,
    },
    ToolExecutionUpdate {
        tool_call_id: String,
        tool_name: String,
        args: Value,
        partial_result: ToolOutput,
    },
    ToolExecutionEnd {
        tool_call_id: String,
        tool_name: String,
        result: ToolOutput,
        is_error: bool,
    },
    TurnEnd {
        message: Message,
        tool_results: Vec<ToolResultMessage>,
    },
    AgentEnd {
        messages: Vec<Message>,
    },
}

/// Receives every event of a run, in order; the loop awaits each call before going on.
#[async_trait]
pub trait EventSink: Send + Sync {
    async fn emit(&self, event: AgentEvent);
}

/// How a queued message enters a running loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// After the current tool batch, before the next assistant request.
    Steer,
    /// When the agent would otherwise stop.
    FollowUp,
}

/// Shared handle to a run: abort and queues. Cheap to clone.
#[derive(Clone, Default)]
pub struct RunControl {
    pub cancel: CancellationToken,
    steering: Arc<Mutex<VecDeque<Message>>>,
    follow_up: Arc<Mutex<VecDeque<Message>>>,
}

impl RunControl {
    /// Queues `message` for delivery into the running loop.
    pub fn enqueue(&self, message: Message, how: Delivery) {
        let q = match how {
            Delivery::Steer => &self.steering,
            Delivery::FollowUp => &self.follow_up,
        };
        if let Ok(mut q) = q.lock() {
            q.push_back(message);
        }
    }

    fn drain(q: &Mutex<VecDeque<Message>>) -> Vec<Message> {
        q.lock()
            .map(|mut q| q.drain(..).collect())
            .unwrap_or_default()
    }

    /// Messages queued but not delivered (after the run ended they are returned to the caller).
    pub fn take_undelivered(&self) -> Vec<Message> {
        let mut v = Self::drain(&self.steering);
        v.extend(Self::drain(&self.follow_up));
        v
    }
}

/// Everything a run needs besides the conversation.
#[derive(Clone)]
pub struct AgentConfig {
    pub model: Model,
    pub system_prompt: String,
    pub tools: Vec<Arc<dyn Tool>>,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The whole conversation after the run (history plus everything appended).
    pub messages: Vec<Message>,
    /// The stop reason of the last assistant message (`stop` if none was requested).
    pub stop_reason: StopReason,
    /// The last assistant's error message, for error and aborted runs.
    pub error_message: Option<String>,
}

/// Text of the result given to every call of a response cut by the output limit.
pub const LENGTH_LIMIT_TEXT: &str = "Not executed: the response hit the output token limit (stopReason \"length\"), so these arguments may be truncated. Retry with smaller steps, e.g. write a short file first and add to it with edit.";

/// Text of the result given to calls skipped because the run was aborted.
pub const ABORTED_TEXT: &str = "Tool execution was aborted by the user.";

struct Run<'a> {
    cfg: &'a AgentConfig,
    control: &'a RunControl,
    sink: &'a dyn EventSink,
    messages: Vec<Message>,
    new_messages: Vec<Message>,
    /// Assistant requests made so far in this run.
    turn: usize,
}

impl Run<'_> {
    async fn push(&mut self, m: Message) {
        self.sink
            .emit(AgentEvent::MessageStart { message: m.clone() })
            .await;
        self.sink
            .emit(AgentEvent::MessageEnd { message: m.clone() })
            .await;
        self.messages.push(m.clone());
        self.new_messages.push(m);
    }

    async fn assistant(&mut self) -> AssistantMessage {
        self.turn += 1;
        let context = Context {
            system_prompt: self.cfg.system_prompt.clone(),
            messages: self.messages.clone(),
            tools: self.cfg.tools.iter().map(|t| t.spec()).collect(),
        };
        let mut stream = pi_ai::stream(
            &self.cfg.model,
            &context,
            StreamOptions {
                cancel: self.control.cancel.child_token(),
                max_tokens: None,
            },
        );
        let mut started = false;
        let mut last = None;
        while let Some(ev) = stream.next().await {
            if let Some(m) = ev.terminal_message() {
                last = Some(m.clone());
                break;
            }
            if let AssistantEvent::Start = ev {
                started = true;
                let partial = AssistantMessage::empty(
                    &self.cfg.model.api,
                    &self.cfg.model.provider,
                    &self.cfg.model.id,
                );
                self.sink
                    .emit(AgentEvent::MessageStart {
                        message: Message::Assistant(partial),
                    })
                    .await;
            } else {
                self.sink
                    .emit(AgentEvent::MessageUpdate {
                        assistant_message_event: ev,
                    })
                    .await;
            }
        }
        let mut message = last.unwrap_or_else(|| {
            let mut m = AssistantMessage::empty(
                &self.cfg.model.api,
                &self.cfg.model.provider,
                &self.cfg.model.id,
            );
            m.stop_reason = StopReason::Error;
            m.error_message = Some("model stream ended without a result".into());
            m
        });
        if message.api.is_empty() {
            message.api = self.cfg.model.api.clone();
            message.provider = self.cfg.model.provider.clone();
            message.model = self.cfg.model.id.clone();
        }
        if !started {
            self.sink
                .emit(AgentEvent::MessageStart {
                    message: Message::Assistant(message.clone()),
                })
                .await;
        }
        let m = Message::Assistant(message.clone());
        self.sink
            .emit(AgentEvent::MessageEnd { message: m.clone() })
            .await;
        self.messages.push(m.clone());
        self.new_messages.push(m);
        message
    }

    /// Runs one call through the trust boundary and returns its paired result.
    async fn tool_call(&mut self, call: &ToolCall, truncated: bool) -> ToolResultMessage {
        self.sink
            .emit(AgentEvent::ToolExecutionStart {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: call.arguments.clone(),
            })
            .await;
        let outcome: Result<ToolOutput, ToolError> = if truncated {
            Err(ToolError::new(LENGTH_LIMIT_TEXT))
        } else if self.control.cancel.is_cancelled() {
            Err(ToolError::new(ABORTED_TEXT))
        } else if let Some(tool) = self.cfg.tools.iter().find(|t| t.spec().name == call.name) {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ToolOutput>();
            let ctx = ToolContext {
                call_id: call.id.clone(),
                turn: self.turn,
                cancel: self.control.cancel.child_token(),
                on_update: Arc::new(move |o| {
                    let _ = tx.send(o);
                }),
            };
            let exec = tool.execute(ctx, call.arguments.clone());
            tokio::pin!(exec);
            loop {
                tokio::select! {
                    r = &mut exec => break r,
                    Some(partial) = rx.recv() => {
                        self.sink.emit(AgentEvent::ToolExecutionUpdate {
                            tool_call_id: call.id.clone(),
                            tool_name: call.name.clone(),
                            args: call.arguments.clone(),
                            partial_result: partial,
                        }).await;
                    }
                }
            }
            // Updates still queued after settlement are dropped (seed §3).
        } else {
            Err(ToolError::new(format!("Tool {} not found", call.name)))
        };
        let (output, is_error) = match outcome {
            Ok(o) => (o, false),
            Err(e) => (
                ToolOutput {
                    content: vec![ContentBlock::text(e.message)],
                    details: e.details,
                },
                true,
            ),
        };
        self.sink
            .emit(AgentEvent::ToolExecutionEnd {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                result: output.clone(),
                is_error,
            })
            .await;
        ToolResultMessage {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content: output.content,
            details: output.details,
            is_error,
            timestamp: pi_ai::types::now_millis(),
        }
    }
}

/// Runs the loop on `history` plus `prompts` until a response has no tool calls and no queued
/// message is left, or a provider error or abort ends it. Emits exactly one `agent_start` and
/// one `agent_end`.
pub async fn run_agent(
    cfg: &AgentConfig,
    history: Vec<Message>,
    prompts: Vec<Message>,
    control: &RunControl,
    sink: &dyn EventSink,
) -> RunOutcome {
    let mut run = Run {
        cfg,
        control,
        sink,
        messages: history,
        new_messages: Vec::new(),
        turn: 0,
    };
    sink.emit(AgentEvent::AgentStart).await;
    let mut pending = prompts;
    let mut last_stop: StopReason;
    let mut last_error: Option<String>;
    'outer: loop {
        loop {
            sink.emit(AgentEvent::TurnStart).await;
            for m in std::mem::take(&mut pending) {
                run.push(m).await;
            }
            let assistant = run.assistant().await;
            last_stop = assistant.stop_reason;
            last_error = assistant.error_message.clone();
            let message = Message::Assistant(assistant.clone());
            let failed = matches!(
                assistant.stop_reason,
                StopReason::Error | StopReason::Aborted
            );
            let calls: Vec<ToolCall> = assistant.tool_calls().into_iter().cloned().collect();
            let mut results = Vec::with_capacity(calls.len());
            for call in &calls {
                let r = if failed {
                    // Calls of a failed response never run, but each still gets its paired
                    // result so the stored history stays valid (case PAIR-01).
                    let text = if assistant.stop_reason == StopReason::Aborted {
                        ABORTED_TEXT
                    } else {
                        "Not executed: the response failed before it was complete."
                    };
                    ToolResultMessage {
                        tool_call_id: call.id.clone(),
                        tool_name: call.name.clone(),
                        content: vec![ContentBlock::text(text)],
                        details: None,
                        is_error: true,
                        timestamp: pi_ai::types::now_millis(),
                    }
                } else {
                    run.tool_call(call, assistant.stop_reason == StopReason::Length)
                        .await
                };
                run.push(Message::ToolResult(r.clone())).await;
                results.push(r);
            }
            sink.emit(AgentEvent::TurnEnd {
                message,
                tool_results: results,
            })
            .await;
            if failed {
                break 'outer;
            }
            pending = RunControl::drain(&control.steering);
            if calls.is_empty() && pending.is_empty() {
                break;
            }
        }
        pending = RunControl::drain(&control.follow_up);
        if pending.is_empty() {
            break;
        }
    }
    sink.emit(AgentEvent::AgentEnd {
        messages: run.new_messages.clone(),
    })
    .await;
    RunOutcome {
        messages: run.messages,
        stop_reason: last_stop,
        error_message: last_error,
    }
}

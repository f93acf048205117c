//! The agent loop (docs/design.md#the-agent-loop "The agent loop").
//!
//! ```text
//! outer loop: follow-up re-entry
//!   inner loop: assistant → tool batch → paired results → steering → assistant
//! ```
//! - Each completed assistant message is appended before its tool batch runs; each call gets
//!   exactly one [`ToolResultMessage`], stored in call order, so the next request carries every
//!   call with its result. Ordinary tool failures become error results the model can repair; a
//!   provider error or an abort ends the run (the calls of that last response still get paired
//!   error results, case PAIR-01).
//! - Length-limit guardrail: when a response stopped for the length limit, no call in it
//!   executes; each gets an error result.
//! - Trust boundary per call: lookup → [`Tool::prepare_arguments`] → clone, coerce and validate
//!   against the tool's JSON Schema ([`crate::validate`]) → trusted
//!   [`AgentHooks::before_tool_call`] (may mutate the arguments; not re-validated; may block) →
//!   approval ([`crate::approval::Gate::check_call`]: may ask the user, reject, or defer the
//!   question to an edit tool's proposed change) → abort check → execute (in its own task: a panic becomes an error result) →
//!   [`AgentHooks::after_tool_call`] (may replace content, details, isError, terminate).
//!   `tool_execution_start` means processing began, not that execute ran. `on_update` only
//!   emits progress; updates after the call settled are dropped.
//! - Batches: sequential when [`ToolExecution::Sequential`] or any called tool is
//!   [`Tool::sequential`]; otherwise the calls run concurrently, `tool_execution_end` events come
//!   in completion order, and results are stored in call order.
//! - `terminate`: automatic continuation stops when every finalized result of a non-empty batch
//!   has `terminate: true` (`has_more_tool_calls = !terminate`); queued steering still causes
//!   another request.
//! - Steering is checked before the first request and after every turn; follow-ups when the agent
//!   would stop; next-turn messages wait for the caller's next prompt. Queue modes deliver one
//!   message per check or all of them. Abort cancels the token that reaches the HTTP stream and
//!   every running tool; tools that ignore it are stopped after [`ABORT_GRACE`]; queued messages
//!   are not drained once aborted and come back in [`RunOutcome::undelivered`].
//!
//! The loop knows only `pi-ai` and the [`Tool`] trait. Listeners (persistence, the editor) see
//! every step through an [`EventSink`], awaited in order like Pi's subscribers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pi_ai::{
    AssistantEvent, AssistantMessage, ContentBlock, Message, Model, StopReason, ToolCall,
    ToolResultMessage, ToolSpec,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use crate::compaction::{
    CompactionError, CompactionProposal, CompactionResult, CompactionSettings, Compactor,
};
pub use crate::config::types::{
    QueueMode, RetrySettings, ToolKind, ABORTED_TEXT, OPERATION_ABORTED_TEXT,
};

fn is_false(b: &bool) -> bool {
    !*b
}

/// `rs` as Pi's messages (`{"role":"toolResult", …}`, the bytes of [`Message::ToolResult`]'s
/// serialisation), without copying them.
fn tool_results_as_messages<S: serde::Serializer>(
    rs: &[ToolResultMessage],
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Tagged<'a> {
        role: &'static str,
        #[serde(flatten)]
        result: &'a ToolResultMessage,
    }
    s.collect_seq(rs.iter().map(|result| Tagged {
        role: "toolResult",
        result,
    }))
}

/// What a tool produced: content for the model, details for the UI, and the tool's
/// continuation hint (Pi's `AgentToolResult`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct ToolOutput {
    pub content: Vec<ContentBlock>,
    /// The tool's own details (each tool's shape; extension tools' are open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "unknown"))]
    pub details: Option<Value>,
    /// Set by the tool (or the after hook), never by the model: when every result of a batch
    /// has it, the loop does not request another response on its own.
    #[serde(default, skip_serializing_if = "is_false")]
    pub terminate: bool,
    /// Pi 1.6's `structuredContent`: the result for programmatic callers (`bash`: `{output,
    /// truncated, full_output_path?, exit_code, wall_time_seconds}`, `read`: the text, or
    /// `{type: "image", data, mimeType, note}`; `core/tools/bash.js`, `read.js`). Sent with
    /// `tool_execution_end`'s `result`, never stored (Pi 1.6's `createToolResultMessage`
    /// leaves it out); dropped when the after hook replaces the content (Pi's
    /// `finalizeExecutedToolCall`).
    #[serde(
        default,
        rename = "structuredContent",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "ts", ts(type = "unknown"))]
    pub structured_content: Option<Value>,
    /// A result the tool returned marked as failed (Pi 1.6's `isError: true` on a returned
    /// result, not a thrown error: `bash`'s non-zero exit, [`ToolError::structured_content`]):
    /// the call's result is an error result, and `tool_execution_end`'s `result` says
    /// `isError: true` as Pi's does. Not stored.
    #[serde(default, rename = "isError", skip_serializing_if = "is_false")]
    pub is_error: bool,
}

impl ToolOutput {
    /// A text-only output.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            content: vec![ContentBlock::text(text)],
            ..ToolOutput::default()
        }
    }

    /// An error output as Pi makes it: the message as text, `details: {}`.
    fn error(message: impl Into<String>, details: Option<Value>) -> Self {
        ToolOutput {
            content: vec![ContentBlock::text(message)],
            details: Some(details.unwrap_or_else(|| Value::Object(Default::default()))),
            ..ToolOutput::default()
        }
    }
}

/// A tool failure: the message becomes the text of an error result.
#[derive(Debug, Clone, Default, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub message: String,
    pub details: Option<Value>,
    /// Set for a failure Pi 1.6's tool returns as a result marked `isError` rather than
    /// throws (`bash`'s non-zero exit): its `structuredContent`. The result then carries it
    /// and says `isError: true` itself ([`ToolOutput::is_error`]), as Pi's event does. Boxed:
    /// a tool's `Result` stays small.
    pub structured_content: Option<Box<Value>>,
}

impl ToolError {
    /// A failure with only a message.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            ..ToolError::default()
        }
    }

    /// The error result this failure is (Pi 1.6's `createErrorToolResult`, `details: {}`
    /// when it has none; or the returned result marked `isError`, see
    /// [`ToolError::structured_content`]).
    fn into_output(self) -> ToolOutput {
        let returned = self.structured_content.is_some();
        ToolOutput {
            structured_content: self.structured_content.map(|b| *b),
            is_error: returned,
            ..ToolOutput::error(self.message, self.details)
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
    /// Input kinds (`text`, `image`) of the model that made the call (Pi's `ctx.model.input`,
    /// e.g. for `read`'s note on images a model cannot see); `None` when no model made it
    /// (the user's own shell commands).
    pub model_input: Option<Vec<String>>,
}

/// A tool the model may call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Name, description and JSON Schema of the arguments, as sent to the model.
    fn spec(&self) -> ToolSpec;
    /// The tool's name, always its [`Tool::spec`]'s `name`, without building the spec (its
    /// description and schema): what the configuration's selections and filters compare.
    /// Default: from the spec; a tool with a fixed name returns it.
    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(self.spec().name)
    }
    /// True for tools that must not run concurrently with others (docs/design.md#the-agent-loop "Batch scheduling":
    /// a batch containing any sequential tool runs wholly in call order).
    fn sequential(&self) -> bool {
        false
    }
    /// Rewrites raw model arguments before validation (e.g. legacy parameter shapes).
    fn prepare_arguments(&self, args: Value) -> Value {
        args
    }
    /// Runs the call. `Err` becomes a paired error result.
    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError>;
    /// The one-line entry of the system prompt's "Available tools" (Pi's `promptSnippet`);
    /// `None` (the default) leaves the tool out of that list. Each tool declares its own.
    fn prompt_snippet(&self) -> Option<String> {
        None
    }
    /// Lines the tool adds to the system prompt's guidelines (Pi's `promptGuidelines`).
    /// Default: none.
    fn prompt_guidelines(&self) -> Vec<String> {
        Vec::new()
    }
    /// What the tool can do, for the approval policy ([`crate::approval`]). Default:
    /// [`ToolKind::Execute`] (it asks under every policy but approve-all); read-only and
    /// editing tools say so.
    fn approval_kind(&self) -> ToolKind {
        ToolKind::Execute
    }
    /// What the approval question adds about the tool (an MCP tool's server and annotations).
    /// Default: nothing.
    fn approval_note(&self) -> Option<String> {
        None
    }
    /// Whether plan mode turns this tool off, though Pi 1.6's plan-mode example keeps every
    /// active tool but `edit` / `write`: an MCP tool its server does not annotate
    /// `readOnlyHint: true` (plan mode is read-only: "MCP tools without `readOnlyHint` off").
    /// Default: `false`.
    fn off_in_plan_mode(&self) -> bool {
        false
    }
}

/// Tools that change during a run (MCP servers connecting, `tool_search` loading tools): asked
/// before every model request; its tools follow the configuration's (a name already taken is
/// skipped) and are declared from that request on.
#[async_trait]
pub trait ToolProvider: Send + Sync {
    /// The tools now.
    async fn tools(self: Arc<Self>) -> Vec<Arc<dyn Tool>>;
}

/// The before-tool hook's view of a call. `args` are the validated arguments; the hook may
/// change them and they are not validated again (docs/design.md#the-agent-loop: trusted code owns that).
pub struct BeforeToolCall<'a> {
    pub assistant: &'a AssistantMessage,
    pub call: &'a ToolCall,
    pub args: &'a mut Value,
}

/// The after-tool hook's view of a settled call.
pub struct AfterToolCall<'a> {
    pub assistant: &'a AssistantMessage,
    pub call: &'a ToolCall,
    pub args: &'a Value,
    pub output: &'a ToolOutput,
    pub is_error: bool,
}

/// What an after hook replaces; `None` fields keep the tool's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AfterToolOverride {
    pub content: Option<Vec<ContentBlock>>,
    pub details: Option<Value>,
    pub is_error: Option<bool>,
    pub terminate: Option<bool>,
}

/// What the next assistant request is built from; [`AgentHooks::prepare_next_turn`] may
/// replace any of it. The context is read through [`NextTurn::messages`] and changed through
/// [`NextTurn::messages_mut`], which marks it changed: the run keeps what it counted of the
/// context (the output budget's estimate, the request cache's shared history) from request to
/// request only while every change to it was an append.
pub struct NextTurn {
    messages: Vec<Message>,
    /// Set by [`NextTurn::messages_mut`].
    messages_changed: bool,
    pub model: Model,
    pub system_prompt: String,
}

impl NextTurn {
    /// The request's context `messages`, `model` and `system_prompt`, unchanged so far.
    pub fn new(messages: Vec<Message>, model: Model, system_prompt: String) -> NextTurn {
        NextTurn {
            messages,
            messages_changed: false,
            model,
            system_prompt,
        }
    }

    /// The context the request will carry.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The context, to change: marks it changed (whether or not the caller then changes it),
    /// so the run counts it afresh.
    pub fn messages_mut(&mut self) -> &mut Vec<Message> {
        self.messages_changed = true;
        &mut self.messages
    }

    /// Lends the context to `f`, which returns true when it changed it (then it is marked
    /// changed, as by [`NextTurn::messages_mut`]); returns what `f` returned. For a change
    /// that is known only once made (a filter that may remove nothing).
    pub fn change_messages(&mut self, f: impl FnOnce(&mut Vec<Message>) -> bool) -> bool {
        let changed = f(&mut self.messages);
        self.messages_changed |= changed;
        changed
    }

    /// True once [`NextTurn::messages_mut`] was called or [`NextTurn::change_messages`]
    /// changed the context.
    pub fn messages_changed(&self) -> bool {
        self.messages_changed
    }

    /// The context, the model and the system prompt, taken back.
    pub fn into_parts(self) -> (Vec<Message>, Model, String) {
        (self.messages, self.model, self.system_prompt)
    }
}

/// Where a run takes the system messages a request carries in the conversation (a session's
/// stored ones, Pi 1.6), asked before every request to a model whose `compat` has
/// `supportsMidConvoSystemMessages` ([`pi_ai::Model::supports_mid_convo_system_messages`]).
pub trait SystemMessages: Send + Sync {
    /// For a request with `system_prompt` over `messages` context messages: the leading
    /// system prompt and the later system messages, each with the number of messages before
    /// it (at most `messages`); `None` sends `system_prompt` alone, as for any other model.
    fn layout(
        &self,
        system_prompt: &str,
        messages: usize,
    ) -> Option<(String, Vec<(usize, pi_ai::SystemMessage)>)>;

    /// The system prompt to send instead of `system_prompt` when the stored system messages
    /// render the same sections in another order (Pi 1.6 sends the replayed prompt:
    /// `getCurrentSystemPrompt`); `None`: `system_prompt` as it is.
    fn replayed(&self, system_prompt: &str) -> Option<String> {
        let _ = system_prompt;
        None
    }

    /// pi-ai 1.6's `estimateMessageTokens` summed over the system messages stored among the
    /// conversation's last `after` context messages (after the usage anchor a request's
    /// output limit counts from: Pi 1.6's agent context holds them there), in tokens; asked
    /// for every request's output limit, of any model. 0: none stored there.
    fn tokens_after(&self, after: usize) -> u64 {
        let _ = after;
        0
    }
}

/// Trusted product policy plugged into the loop (docs/design.md#extensions-and-product-boundaries: extensions map onto these hooks).
#[async_trait]
pub trait AgentHooks: Send + Sync {
    /// Runs after validation, before execution. `Err(reason)` blocks the call: the reason is
    /// its error result.
    async fn before_tool_call(&self, _call: BeforeToolCall<'_>) -> Result<(), String> {
        Ok(())
    }
    /// Runs after execution. `Err(message)` turns the result into an error with that text.
    async fn after_tool_call(
        &self,
        _call: AfterToolCall<'_>,
    ) -> Result<Option<AfterToolOverride>, String> {
        Ok(None)
    }
    /// Runs before every assistant request; may replace context, model or system prompt for
    /// that request and the ones after it.
    async fn prepare_next_turn(&self, _next: &mut NextTurn) {}
}

/// One image of an [`AgentEvent::ImagesReplaced`]: its content's [`crate::session::image_hash`]
/// (`xxh3:` + 16 hex digits of its base64 data), type, and the note now in its place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ReplacedImage {
    pub hash: String,
    pub mime_type: String,
    pub note: String,
}

/// One event of a run, serialized with Pi's names and shapes (`{"type":"turn_start"}`, …).
/// `message_update` carries only the newest fragment, never the accumulated partial. Read back
/// (by clients and tests) as written; fields that are not written take their defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum AgentEvent {
    AgentStart,
    TurnStart,
    /// A message begins: an answer's first (empty) message, or the whole user / tool-result
    /// message. Shared ([`Arc`]): the `message_end` of a user or tool-result message, the
    /// run's `agent_end` and every listener hold this one message, not copies.
    MessageStart {
        message: Arc<Message>,
    },
    MessageUpdate {
        assistant_message_event: AssistantEvent,
    },
    /// A message is complete; shared as [`AgentEvent::MessageStart`]'s.
    MessageEnd {
        message: Arc<Message>,
    },
    /// `message_start` of an extension's custom message, as Pi sends it: `message` is Pi's
    /// custom message (`{role: "custom", customType, content, display, details?,
    /// timestamp}`), so a client shows it as what it is and hides it when `display` is false
    /// (plan mode's hidden context). The session hands listeners this in place of the
    /// [`AgentEvent::MessageStart`] of the user message the model sees; never read back (a
    /// reader gets `message_start`, whose `message` is a [`Message`]).
    #[serde(rename = "message_start", skip_deserializing)]
    CustomMessageStart {
        #[cfg_attr(feature = "ts", ts(type = "CustomMessage"))]
        message: Value,
    },
    /// `message_end` of an extension's custom message; see [`AgentEvent::CustomMessageStart`].
    #[serde(rename = "message_end", skip_deserializing)]
    CustomMessageEnd {
        #[cfg_attr(feature = "ts", ts(type = "CustomMessage"))]
        message: Value,
    },
    /// `message_start` of a stored system message, as Pi 1.6 sends the one a run starts with
    /// (the prompt and tools changed since the branch's last: a new session's first run):
    /// `message` is the message as the file holds it (`{role: "system", sections,
    /// toolsAdded?, toolsRemoved?, timestamp}`). The session hands listeners this and
    /// [`AgentEvent::SystemMessageEnd`] after the run's first `turn_start`; never read back.
    #[serde(rename = "message_start", skip_deserializing)]
    SystemMessageStart {
        #[cfg_attr(feature = "ts", ts(type = "unknown"))]
        message: Value,
    },
    /// `message_end` of a stored system message; see [`AgentEvent::SystemMessageStart`].
    #[serde(rename = "message_end", skip_deserializing)]
    SystemMessageEnd {
        #[cfg_attr(feature = "ts", ts(type = "unknown"))]
        message: Value,
    },
    ToolExecutionStart {
        tool_call_id: String,
        tool_name: String,
        #[cfg_attr(feature = "ts", ts(type = "unknown"))]
        args: Value,
    },
    ToolExecutionUpdate {
        tool_call_id: String,
        tool_name: String,
        #[cfg_attr(feature = "ts", ts(type = "unknown"))]
        args: Value,
        partial_result: ToolOutput,
    },
    /// A call's result. `durationMs` (Pi 1.6's, `agent-loop.js` `executePreparedToolCall`):
    /// milliseconds the tool ran, rounded; absent for a call that never ran (refused before
    /// it started: unknown tool, invalid arguments, blocked, not approved, aborted first).
    ToolExecutionEnd {
        tool_call_id: String,
        tool_name: String,
        result: ToolOutput,
        is_error: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
    },
    /// A turn ends: its assistant message (the one its `message_end` carried) and its tool
    /// results, each written as Pi 1.6's `turn_end` carries it: a message, `role` first.
    TurnEnd {
        message: Arc<Message>,
        #[serde(serialize_with = "tool_results_as_messages")]
        #[cfg_attr(
            feature = "ts",
            ts(type = "Array<{ role: \"toolResult\" } & ToolResultMessage>")
        )]
        tool_results: Vec<ToolResultMessage>,
    },
    /// A run ends: the messages it added, each the one its `message_end` carried.
    /// `willRetry` (Pi 1.6's `_willRetryAfterAgentEnd`, on every `agent_end`): the run ended
    /// on a transient provider failure that is retried, after `auto_retry_start` and the
    /// failure's `entry_appended`, as a new run (`agent_start`).
    AgentEnd {
        messages: Vec<Arc<Message>>,
        #[serde(default)]
        will_retry: bool,
    },
    /// Pi 1.6's `agent_settled`: the harness will not continue on its own (retries,
    /// compaction recovery, queued messages and a compaction asked for during the run are
    /// over); `aborted` when the last run ended because it was aborted. Sent once per settle,
    /// after the last run's `agent_end`; not stored in the session file.
    AgentSettled {
        aborted: bool,
    },
    /// A transient provider failure will be retried after `delayMs` (Pi's `auto_retry_start`).
    AutoRetryStart {
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        error_message: String,
    },
    /// A summary request (a compaction's, a branch summary's) failed with a transient error and
    /// is sent again after `delayMs` (Pi 1.6's `summarization_retry_scheduled`, from
    /// `settings.retry` as its `completeSummarization` retries).
    SummarizationRetryScheduled {
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        error_message: String,
    },
    /// The wait is over and the summary request is sent again (Pi 1.6's
    /// `summarization_retry_attempt_start`): `source` `compaction` with the compaction's
    /// `reason`, or `branchSummary` without one.
    SummarizationRetryAttemptStart {
        source: SummarySource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<CompactionReason>,
    },
    /// A summary request's retries are over, whatever their end (Pi 1.6's
    /// `summarization_retry_finished`, no fields; the compaction's or branch's own outcome
    /// follows).
    SummarizationRetryFinished,
    /// The retries ended: a response succeeded, or the last attempt failed, or the wait was
    /// aborted (`finalError: "Retry cancelled"`).
    AutoRetryEnd {
        success: bool,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        final_error: Option<String>,
    },
    /// pi-lsp's own (Pi has no such event; case 18.12): the provider refused a request for its
    /// size while it held these images, and the retry goes with each replaced by its note in
    /// the request (the agent's context: no later request of the live session sends them
    /// again). The session file keeps the images in their entries (issue 29 item 10) and, as
    /// Pi 1.6 files are written, records the replacement as a `context_edit` per entry holding
    /// one (the recorder, [`crate::session::SessionWriter::edit_out_images`]), so a session
    /// opened again from it, here or in Pi 1.6, sends the notes (item E). Followed by
    /// `auto_retry_start` naming the refusal.
    ImagesReplaced {
        images: Vec<ReplacedImage>,
    },
    /// pi-lsp's own: the run's last answer (an overflow error, a recoverable `length` stop:
    /// [`is_recoverable_length`]) leaves the context before the compaction that makes room for
    /// its retry, as Pi 1.6's `_omitRecoveryAttempt` (`agent-session.js`). Sent after the
    /// attempt's run ended (`agent_end`). A session's recorder writes a `context_edit` for it
    /// (and for its calls' results; `replacement: null`) and hands its listeners an
    /// [`AgentEvent::EntryAppended`] for each entry written in place of this event.
    AttemptLeftOut,
    /// Pi 1.6's `entry_appended`: the session appended `entry` (the whole entry as written to
    /// the file: `{type, id, parentId, timestamp, …}`) outside a message, here the
    /// `context_edit` that leaves a recovery's attempt out of the context
    /// ([`AgentEvent::AttemptLeftOut`]). Never emitted by the loop.
    EntryAppended {
        #[cfg_attr(feature = "ts", ts(type = "unknown"))]
        entry: Value,
    },
    /// A compaction began (Pi's `compaction_start`); the agent is busy until its end.
    CompactionStart {
        reason: CompactionReason,
    },
    /// A compaction ended (Pi's `compaction_end`): `result` when an entry was written; `aborted`
    /// when it was cancelled; `willRetry` when the failed request is sent again (overflow);
    /// `errorMessage` when it failed (nothing was written).
    CompactionEnd {
        reason: CompactionReason,
        /// Left out when none, as Pi 1.6 leaves out an `undefined` result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<CompactionResult>,
        aborted: bool,
        will_retry: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_message: Option<String>,
        /// The context after a committed compaction (not serialized; the agent's state takes it).
        #[serde(skip)]
        context: Option<Vec<Message>>,
    },
    /// An extension's handler or command failed (Pi's `extension_error`); the loop went on.
    /// `extensionPath` is `<builtin:NAME>` for built-in extensions; `event` names the handler
    /// (`tool_call`, `tool_result`, `command:NAME`, an event type, `load`, `session_start`).
    ExtensionError {
        extension_path: String,
        event: String,
        error: String,
    },
}

/// Receives every event of a run, in order; the loop awaits each call before going on.
#[async_trait]
pub trait EventSink: Send + Sync {
    async fn emit(&self, event: AgentEvent);
    /// Whether [`EventSink::emit`] would do anything with `event`; a sink that says no is not
    /// given it (nor a copy of it: an `agent_end` holds the run's messages). Default: yes.
    fn wants(&self, _event: &AgentEvent) -> bool {
        true
    }
}

/// How a queued message enters a running loop (Pi's `deliverAs`; on the wire `steer`,
/// `followUp`, `nextTurn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum Delivery {
    /// After the current tool batch, before the next assistant request.
    Steer,
    /// When the agent would otherwise stop.
    FollowUp,
    /// With the next external prompt, not in this run.
    NextTurn,
}

#[derive(Default)]
struct Queue {
    items: Mutex<VecDeque<Message>>,
    mode: Mutex<QueueMode>,
}

impl Queue {
    fn push(&self, m: Message) {
        if let Ok(mut q) = self.items.lock() {
            q.push_back(m);
        }
    }

    fn drain(&self) -> Vec<Message> {
        let mode = self.mode.lock().map(|m| *m).unwrap_or_default();
        let Ok(mut q) = self.items.lock() else {
            return Vec::new();
        };
        match mode {
            QueueMode::All => q.drain(..).collect(),
            QueueMode::OneAtATime => q.pop_front().into_iter().collect(),
        }
    }

    fn take_all(&self) -> Vec<Message> {
        self.items
            .lock()
            .map(|mut q| q.drain(..).collect())
            .unwrap_or_default()
    }

    fn len(&self) -> usize {
        self.items.lock().map(|q| q.len()).unwrap_or(0)
    }

    /// Replaces (or with `None` removes) the first message equal to `target`, in place;
    /// false when none is queued (delivered already).
    fn replace(&self, target: &Message, with: &mut Option<Option<Message>>) -> bool {
        let Ok(mut q) = self.items.lock() else {
            return false;
        };
        let Some(i) = q.iter().position(|m| m == target) else {
            return false;
        };
        match with.take().flatten() {
            Some(m) => q[i] = m,
            None => {
                q.remove(i);
            }
        }
        true
    }
}

/// Shared handle to a run: abort and queues. Cheap to clone.
#[derive(Clone, Default)]
pub struct RunControl {
    pub cancel: CancellationToken,
    steering: Arc<Queue>,
    follow_up: Arc<Queue>,
    next_turn: Arc<Queue>,
}

impl RunControl {
    /// Queues `message` for delivery.
    pub fn enqueue(&self, message: Message, how: Delivery) {
        match how {
            Delivery::Steer => self.steering.push(message),
            Delivery::FollowUp => self.follow_up.push(message),
            Delivery::NextTurn => self.next_turn.push(message),
        }
    }

    /// Sets how many steering / follow-up messages one check delivers.
    pub fn set_modes(&self, steering: QueueMode, follow_up: QueueMode) {
        if let Ok(mut m) = self.steering.mode.lock() {
            *m = steering;
        }
        if let Ok(mut m) = self.follow_up.mode.lock() {
            *m = follow_up;
        }
    }

    /// Numbers of queued (steering, follow-up, next-turn) messages.
    pub fn queued(&self) -> (usize, usize, usize) {
        (
            self.steering.len(),
            self.follow_up.len(),
            self.next_turn.len(),
        )
    }

    /// Steering and follow-up messages not delivered yet, steering first.
    pub fn take_undelivered(&self) -> Vec<Message> {
        let mut v = self.steering.take_all();
        v.extend(self.follow_up.take_all());
        v
    }

    /// Messages queued for the next external prompt.
    pub fn take_next_turn(&self) -> Vec<Message> {
        self.next_turn.take_all()
    }

    /// Replaces the first queued (not yet delivered) message equal to `target` by `with`, in
    /// its place, or removes it (`with: None`); looks in the steering, follow-up and next-turn
    /// queues in that order. False when no queue holds it (it was delivered already). Atomic
    /// with delivery: the loop takes a message whole, before or after.
    pub fn replace_queued(&self, target: &Message, with: Option<Message>) -> bool {
        let mut with = Some(with);
        self.steering.replace(target, &mut with)
            || self.follow_up.replace(target, &mut with)
            || self.next_turn.replace(target, &mut with)
    }
}

/// Whether the calls of one batch may run concurrently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolExecution {
    /// Concurrently, unless a called tool is sequential.
    #[default]
    Parallel,
    /// Always in call order.
    Sequential,
}

/// Everything a run needs besides the conversation.
#[derive(Clone)]
pub struct AgentConfig {
    pub model: Model,
    /// The session the run belongs to, given to every model request (Pi's `sessionId`: an
    /// OpenAI Responses request's `prompt_cache_key` and session headers); `None`: none.
    pub session_id: Option<Arc<str>>,
    pub system_prompt: String,
    /// The named sections `system_prompt` was built from (Pi 1.6's `buildSystemPromptSections`,
    /// [`crate::prompt::build_system_prompt_sections`]), stored in the session's system message
    /// when they still render to `system_prompt`; `None`: the prompt is stored as one section.
    pub prompt_sections: Option<Arc<[(String, String)]>>,
    pub tools: Vec<Arc<dyn Tool>>,
    pub tool_execution: ToolExecution,
    pub hooks: Option<Arc<dyn AgentHooks>>,
    pub retry: RetrySettings,
    /// Automatic compaction (threshold before every request, overflow recovery) and the
    /// compactor that manual compaction uses; `None`: never compacts.
    pub compaction: Option<CompactionConfig>,
    /// The session's approval gate ([`crate::approval`]); `None`: nothing asks.
    pub approval: Option<Arc<crate::approval::Gate>>,
    /// Where a change-making call's result goes when it settles after the run stopped
    /// waiting for it ([`LateResults`]); `None`: such calls are dropped at the abort grace,
    /// like any other.
    pub late_results: Option<Arc<dyn LateResults>>,
    /// Tools asked for before every request (MCP); `None`: only `tools`.
    pub dynamic_tools: Option<Arc<dyn ToolProvider>>,
    /// The conversation's system messages for a model that takes them mid-conversation;
    /// `None`: `system_prompt` leads every request alone.
    pub system_messages: Option<Arc<dyn SystemMessages>>,
    /// Settings' `images.blockImages`: every request sends [`IMAGE_BLOCKED_TEXT`] in each
    /// image's place (the run's messages keep their images); `false`: images as they are.
    pub block_images: bool,
}

/// The text Pi 1.6 sends in an image's place when settings' `images.blockImages` is on (the
/// `convertToLlm` wrapper of its `createAgentSession`, `core/sdk.js`).
pub const IMAGE_BLOCKED_TEXT: &str = "Image reading is disabled.";

/// Text of the aborted result of a change-making call (`edit`, `write`) stopped while its
/// change was with the editor ([`LateResults`]).
pub const ABORTED_IN_FLIGHT_TEXT: &str = "Tool execution was aborted by the user while the change was with the editor, which had not answered: it may still be applied (the session records it when the editor answers). Read the file before changing it again.";

/// The late side of change-making calls ([`crate::ToolKind::Edit`]: `edit`, `write`). Such a
/// call is not dropped at the abort grace like the others: once its change is sent (a
/// `workspace/applyEdit` the editor has not answered), dropping the call would not withdraw
/// it, and an editor that answers late would leave a change nobody recorded. So the call runs
/// on in a task of its own; when the grace passes the run records its aborted result
/// ([`ABORTED_IN_FLIGHT_TEXT`]), tells [`LateResults::abandoned`], and hands the call's real
/// outcome to [`LateResults::settled`] whenever it comes.
#[async_trait]
pub trait LateResults: Send + Sync {
    /// The run stopped waiting for `call` (its aborted result is being recorded).
    fn abandoned(&self, call: &ToolCall);
    /// `call`, abandoned earlier, has settled: `output` is its real result (`is_error`: it
    /// failed, nothing was changed).
    async fn settled(&self, call: ToolCall, output: ToolOutput, is_error: bool);
}

/// Why a compaction runs (Pi's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "lowercase")]
pub enum CompactionReason {
    /// Context tokens passed context window − reserve tokens before a request.
    Threshold,
    /// The provider rejected the request as too long; the request is retried once after.
    Overflow,
    /// Asked for by the user (optionally with instructions).
    Manual,
}

/// What a summary request that is retried writes (Pi 1.6's `source` of
/// `summarization_retry_attempt_start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum SummarySource {
    /// A compaction's history or turn-prefix summary.
    Compaction,
    /// A branch summary (tree navigation with a summary).
    BranchSummary,
}

/// Compaction settings with the compactor that carries them out.
#[derive(Clone)]
pub struct CompactionConfig {
    pub settings: CompactionSettings,
    pub compactor: Arc<dyn Compactor>,
}

impl AgentConfig {
    /// A config with parallel batches, no hooks and default retries.
    pub fn new(model: Model, system_prompt: String, tools: Vec<Arc<dyn Tool>>) -> Self {
        AgentConfig {
            model,
            session_id: None,
            system_prompt,
            prompt_sections: None,
            tools,
            tool_execution: ToolExecution::Parallel,
            hooks: None,
            retry: RetrySettings::default(),
            compaction: None,
            approval: None,
            late_results: None,
            dynamic_tools: None,
            system_messages: None,
            block_images: false,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The whole conversation after the run (history plus everything appended).
    pub messages: Vec<Message>,
    /// The stop reason of the last assistant message.
    pub stop_reason: StopReason,
    /// The last assistant's error message, for error and aborted runs.
    pub error_message: Option<String>,
    /// Steering and follow-up messages the run did not deliver (it was aborted, or they came
    /// after its last check), steering first; the caller delivers them next.
    pub undelivered: Vec<Message>,
    /// Messages queued with [`Delivery::NextTurn`]; they go with the caller's next prompt.
    pub next_turn: Vec<Message>,
    /// Messages of `messages` before this index carry usage of a context that has changed
    /// since (a compaction, an edit of the context), so the compaction threshold does not
    /// anchor on it ([`crate::session::SessionContext::usage_from`]); `None`: as before the
    /// run.
    pub usage_from: Option<usize>,
}

/// Text of the result given to every call of a response cut by the output limit.
pub const LENGTH_LIMIT_TEXT: &str = "Not executed: the response hit the output token limit (stopReason \"length\"), so these arguments may be truncated. Retry with smaller steps, e.g. write a short file first and add to it with edit.";

/// Text of the result given to the calls of a response that failed mid-stream.
pub const FAILED_RESPONSE_TEXT: &str = "Not executed: the response failed before it was complete.";

/// Fewest output tokens a request is sent with (or the model's own limit when smaller): with
/// less room left in the context window the loop compacts first or fails the turn (case
/// 18.10).
pub const MIN_OUTPUT_TOKENS: u64 = 1_024;

/// The error result of a call whose argument text did not parse as a JSON object (it did not
/// arrive whole: kept in `rawArguments`); such a call never runs with made-up arguments.
pub const UNFINISHED_ARGUMENTS_TEXT: &str = "Not executed: the tool call's arguments did not arrive as complete JSON, so they were not guessed. Send the call again with its full arguments.";

/// How long running tools get to observe an abort before their tasks are stopped.
pub const ABORT_GRACE: Duration = Duration::from_secs(2);

mod follower;
mod handle;
mod run;

pub use follower::Follower;
pub use handle::{Agent, AgentBusy, CompactionOutcome, Subscription, WeakAgent};
pub use run::{
    is_recoverable_length, run_agent, run_agent_from, run_compaction, SummaryRetryEvents,
    OVERFLOW_RECOVERY_FAILED, TRUNCATED_RECOVERY_FAILED,
};

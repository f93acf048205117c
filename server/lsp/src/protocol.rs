//! The `agent/*` wire types (documented in `docs/protocol.md`, one example per message in
//! `fixtures/protocol/`). Fields are camelCase; ids are strings.
//!
//! Client → server requests: every name in [`crate::methods::METHODS`]. Server → client: the notifications
//! `agent/event`, `agent/queueUpdate`, `agent/usage`, `agent/attention`, and the
//! `agent/saveDocument` request (sent only to clients that advertise
//! `experimental.agent.saveDocument: true`), the extension UI request `agent/ui/request`
//! and notification `agent/ui/notification` (clients advertising `experimental.agent.ui`;
//! see [`crate::extensions`]); the editor-tool requests `agent/runTool` and
//! `agent/diagnostics` are in [`crate::editor_tools`]. Every session-scoped method and
//! notification carries `sessionId`.

use pi_core::AgentEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_lsp_server::jsonrpc::{Error, ErrorCode};
use tower_lsp_server::ls_types::{notification::Notification, request::Request, Uri};

/// Error codes of `agent/*` methods: outside JSON-RPC's reserved -32768..-32000 and LSP's
/// -32899..-32800.
pub mod codes {
    /// A run is active and the prompt named no `streamingBehavior`.
    pub const SESSION_BUSY: i64 = -31001;
    /// `sessionId` names no session of this workspace.
    pub const UNKNOWN_SESSION: i64 = -31002;
    /// The requested model is unknown or none is configured.
    pub const MODEL_UNAVAILABLE: i64 = -31003;
    /// The session file could not be created or written.
    pub const SESSION_IO: i64 = -31004;
    /// `entryId` names no entry of the session.
    pub const UNKNOWN_ENTRY: i64 = -31005;
    /// A user-run shell command of the session is still running.
    pub const BASH_RUNNING: i64 = -31006;
    /// The model could not write the requested summary (nothing was changed).
    pub const SUMMARY_FAILED: i64 = -31007;
    /// A compaction could not be done (nothing to compact, the summary request failed, it
    /// would not shrink the context, it was cancelled); nothing was written.
    pub const COMPACTION_FAILED: i64 = -31008;
}

/// Queue, usage, attention and abort shapes: the live session's own types
/// ([`pi_core::harness::queue`]), sent as they serialize.
pub use pi_core::harness::queue::{
    AppliedEdit, AttentionReason, DeliverAs, QueueState, QueuedMessage, StoppedProcess,
    StoppedToolCall, UsageTotals,
};
/// `agent/abort`, `agent/bash` and `agent/session/branch` results: what the session's
/// [`pi_core::harness::AgentSession`] reports, sent as it serializes.
pub use pi_core::harness::{
    AbortReport as AbortResult, BashOutcome as BashResult, BranchOutcome as SessionBranchResult,
};

/// An InvalidParams error naming `field` (`"<field>: <why>"`).
pub fn invalid(field: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid_params(format!("{field}: {why}"))
}

/// A JSON-RPC error with one of [`codes`].
pub fn agent_error(code: i64, message: impl Into<String>) -> Error {
    Error {
        code: ErrorCode::ServerError(code),
        message: message.into().into(),
        data: None,
    }
}

/// Parses request params, naming the offending field in the InvalidParams message
/// (e.g. `text: invalid type: integer \`1\`, expected a string`).
/// Absent params (`null`) and an empty array (`[]`, what Neovim sends for an empty Lua table)
/// read as `{}`; a non-empty array is an error.
pub fn parse_params<T: for<'de> Deserialize<'de>>(params: Value) -> Result<T, Error> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        Value::Array(a) if a.is_empty() => Value::Object(Default::default()),
        // JSON-RPC allows by-position params; every `agent/*` method takes named ones, and
        // serde would read an array as the struct's fields in declaration order.
        Value::Array(_) => {
            return Err(Error::invalid_params(
                "params: expected an object of named parameters, got an array",
            ))
        }
        params => params,
    };
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let msg = if path == "." {
            inner
        } else {
            format!("{path}: {inner}")
        };
        Error::invalid_params(msg)
    })
}

/// Deserializes a field that must be present but may be `null`. serde reads a missing
/// `Option` field as `None`; with this (and no `#[serde(default)]`) a missing one is the
/// error `missing field `…``.
fn nullable<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// Deserializes Pi's user content (a string or `text` / `image` blocks) with an error that
/// says what was expected (serde's untagged-enum error names only the Rust type).
fn user_content<'de, D>(d: D) -> Result<pi_ai::UserContent, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error as _;
    match Value::deserialize(d)? {
        Value::String(s) => Ok(pi_ai::UserContent::Text(s)),
        Value::Array(blocks) => {
            let mut out = Vec::with_capacity(blocks.len());
            for (i, b) in blocks.into_iter().enumerate() {
                out.push(
                    serde_json::from_value(b)
                        .map_err(|e| D::Error::custom(format!("block {i}: {e}")))?,
                );
            }
            Ok(pi_ai::UserContent::Blocks(out))
        }
        other => Err(D::Error::custom(format!(
            "expected a string or an array of text/image blocks, got {}",
            match other {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                _ => "an object",
            }
        ))),
    }
}

/// `agent/compact` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactParams {
    pub session_id: String,
    /// Extra focus for the summary (Pi's `/compact <instructions>`); it reaches every summary
    /// request (case CMP-07).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// `agent/compact` result: Pi's `CompactionResult`, the fields of the `compaction` entry written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(transparent)]
pub struct CompactResult(pub pi_core::compaction::CompactionResult);

/// How a prompt sent during an active run is delivered (docs/design.md#the-agent-loop "Steering, follow-up").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum StreamingBehavior {
    /// Delivered after the current tool batch, before the next model request.
    Steer,
    /// Delivered when the agent would otherwise stop.
    FollowUp,
}

/// The only kind of attached content: `"image"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    Image,
}

/// An image attached to a prompt (Pi's `ImageContent`): `{type: "image", data, mimeType}`,
/// `data` base64 without a `data:` prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageInput {
    #[serde(rename = "type")]
    pub kind: ImageKind,
    pub data: String,
    pub mime_type: String,
}

/// `agent/prompt` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptParams {
    /// The user's message.
    pub text: String,
    /// Images sent with the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<ImageInput>>,
    /// Continue this session (in memory, or its file in `.pi/sessions/`); a new one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `provider/id`; overrides every other model choice for this session from now on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Required while a run is active; otherwise ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming_behavior: Option<StreamingBehavior>,
}

/// `agent/prompt` result, sent at once; the run streams as `agent/event` notifications.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct PromptResult {
    pub session_id: String,
    /// The run the prompt started, or the active run it was queued into.
    pub run_id: String,
    /// True when the prompt was queued into an active run (steer / followUp).
    pub queued: bool,
    /// The queued message's id in `agent/queueUpdate` notifications (when `queued`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_id: Option<String>,
    /// The extension command the text invoked (`/name args`); then no run started and
    /// `runId` is empty. A failing command is reported as an `extension_error` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// What happened to the prompt, as Pi 1.6's RPC `prompt` reports it (`data.disposition`).
    pub disposition: PromptDisposition,
}

/// What happened to a prompt (Pi 1.6's `disposition`): `handled` means no run started for it
/// (an extension command consumed it), so a client waits for no `agent_settled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum PromptDisposition {
    /// A run started with it.
    Started,
    /// It was queued into the active run (steer / follow-up).
    Queued,
    /// An extension command consumed it; no run.
    Handled,
}

/// `agent/extension/commands` result: the session's extension commands in load order (Pi's
/// `get_commands` entries with `source: "extension"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ExtensionCommandsResult {
    pub commands: Vec<pi_core::extension::CommandInfo>,
}

/// `agent/abort` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AbortParams {
    pub session_id: String,
}

/// `agent/queueUpdate` params (server → client): one queued message changed state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct QueueUpdateParams {
    pub session_id: String,
    pub queue_id: String,
    pub delivery: DeliverAs,
    pub state: QueueState,
    pub text: String,
    /// Texts of the steering messages still waiting, oldest first (Pi's `queue_update`).
    pub steering: Vec<String>,
    /// Texts of the follow-up messages still waiting, oldest first.
    pub follow_up: Vec<String>,
}

/// `agent/usage` params (server → client), after every model response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsageParams {
    pub session_id: String,
    pub run_id: String,
    /// This response (turn).
    pub turn: UsageTotals,
    /// Every response stored in the session file so far, this one included (abandoned
    /// branches too: they were paid for).
    pub session: UsageTotals,
    /// Tokens of the context this response saw plus what it wrote.
    pub context_tokens: u64,
    pub context_window: u64,
}

/// `agent/attention` params (server → client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AttentionParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub reason: AttentionReason,
    /// One line for a notification: the answer's first line, or the error.
    pub message: String,
}

/// `agent/event` params: one agent event of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AgentEventParams {
    pub session_id: String,
    pub run_id: String,
    /// This notification's number within the session: 1, 2, 3… one more for each
    /// `agent/event` of the session. `agent/messages` answers with the last one its
    /// `streamingMessage` and `messages` include.
    pub seq: u64,
    pub event: AgentEvent,
    /// `true` (else absent) when the event's entry could not be written to the session file
    /// (a full disk, a file-size limit): the session keeps it in memory and writes it, before
    /// anything else, once the file takes writes again; `window/showMessage` and
    /// `agent/attention` `failed` say the session stopped saving.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsaved: bool,
}

/// The `agent/event` notification (server → client).
#[derive(Debug)]
pub enum AgentEventNotification {}

impl Notification for AgentEventNotification {
    type Params = AgentEventParams;
    const METHOD: &'static str = "agent/event";
}

/// `agent/saveDocument` params (server → client): save this open document to disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct SaveDocumentParams {
    #[cfg_attr(test, ts(type = "string"))]
    pub uri: Uri,
}

/// `agent/saveDocument` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct SaveDocumentResult {
    pub saved: bool,
}

/// The `agent/saveDocument` request (server → client).
#[derive(Debug)]
pub enum SaveDocumentRequest {}

impl Request for SaveDocumentRequest {
    type Params = SaveDocumentParams;
    type Result = SaveDocumentResult;
    const METHOD: &'static str = "agent/saveDocument";
}

/// `agent/queueUpdate` notification.
#[derive(Debug)]
pub enum QueueUpdateNotification {}

impl Notification for QueueUpdateNotification {
    type Params = QueueUpdateParams;
    const METHOD: &'static str = "agent/queueUpdate";
}

/// `agent/usage` notification.
#[derive(Debug)]
pub enum UsageNotification {}

impl Notification for UsageNotification {
    type Params = UsageParams;
    const METHOD: &'static str = "agent/usage";
}

/// `agent/attention` notification.
#[derive(Debug)]
pub enum AttentionNotification {}

impl Notification for AttentionNotification {
    type Params = AttentionParams;
    const METHOD: &'static str = "agent/attention";
}

/// Params of methods that only name a session: `agent/state`, `agent/messages`,
/// `agent/session/close`, `…/clone`, `…/tree`, `…/stats`, `agent/thinking/cycle`,
/// `agent/queue/clear`, `agent/retry/abort`, `agent/bash/abort`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionParams {
    pub session_id: String,
}

/// `agent/steer` and `agent/followUp` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SteerParams {
    pub session_id: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<ImageInput>>,
}

/// `agent/followUp` params (same shape as [`SteerParams`]).
pub type FollowUpParams = SteerParams;

/// `agent/steer` / `agent/followUp` / queued `agent/sendMessage` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SteerResult {
    pub session_id: String,
    pub queue_id: String,
    /// The active run the message was queued into; absent when idle (it waits for the next
    /// prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `agent/followUp` result.
pub type FollowUpResult = SteerResult;

/// `agent/sendMessage` params: a custom message (Pi's `sendMessage`; stored as a
/// `custom_message` entry, sent to the model as a user message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendMessageParams {
    pub session_id: String,
    /// The sender's kind of message, e.g. `"review-note"`.
    pub custom_type: String,
    /// A string, or Pi content blocks (`text`, `image`).
    #[serde(deserialize_with = "user_content")]
    pub content: pi_ai::UserContent,
    /// Whether editors show it (default true).
    #[serde(default = "yes")]
    pub display: bool,
    /// Structured data for the sender; never sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(type = "unknown | null"))]
    pub details: Option<Value>,
    /// While a run is active: `steer` (default) or `followUp`; `nextTurn` always waits for the
    /// next prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_as: Option<DeliverAs>,
    /// When idle: start a run with this message (otherwise it is only appended).
    #[serde(default)]
    pub trigger_turn: bool,
}

fn yes() -> bool {
    true
}

/// `agent/sendMessage` result: `queueId` when queued, `entryId` when appended at once,
/// `runId` when it started (or was queued into) a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SendMessageResult {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// A model as clients see it (Pi's `Model`, plus the thinking levels it supports).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    pub provider: String,
    pub id: String,
    pub name: String,
    pub api: pi_ai::Api,
    pub base_url: String,
    pub reasoning: bool,
    pub input: Vec<String>,
    pub context_window: u64,
    pub max_tokens: u64,
    /// US dollars per million tokens.
    pub cost: pi_ai::models::ModelCost,
    pub thinking_levels: Vec<pi_ai::models::ThinkingLevel>,
}

/// Pi's queue modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub enum QueueModeName {
    /// One queued message per check (default).
    #[serde(rename = "one-at-a-time")]
    OneAtATime,
    /// Every queued message at once.
    #[serde(rename = "all")]
    All,
}

/// `agent/state` result, and the answer of the methods that open a session
/// (`agent/session/new`, `…/open`, `…/fork`, `…/clone`). Fields may be added (compaction
/// state and settings among them); clients ignore fields they do not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionState {
    pub session_id: String,
    pub session_file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    /// The file this session was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    pub model: ModelInfo,
    pub thinking_level: pi_ai::models::ThinkingLevel,
    /// True while a run is active.
    pub is_streaming: bool,
    /// The active run, or the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub steering_mode: QueueModeName,
    pub follow_up_mode: QueueModeName,
    pub auto_retry_enabled: bool,
    /// True while a failed request waits to be retried.
    pub is_retrying: bool,
    /// Automatic compaction (threshold and overflow) is on (Pi's `autoCompactionEnabled`).
    pub auto_compaction_enabled: bool,
    /// True while a compaction writes its summary (Pi's `isCompacting`).
    pub is_compacting: bool,
    /// True while a user-run shell command (`agent/bash`) runs.
    pub is_bash_running: bool,
    /// Messages in the model's context.
    pub message_count: usize,
    /// Queued messages not yet delivered.
    pub pending_message_count: usize,
    /// Where the next entry attaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_id: Option<String>,
    /// The approval policy in force for this session (`ask`, `auto-edit`, `approve-all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<pi_core::approval::ApprovalPolicy>,
    /// Present when the session is another project's (opened by its path): the folder its
    /// header names as its `cwd` (`""` when it names none), for the client to show whose it
    /// is ([`pi_core::session::Ownership`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_cwd: Option<String>,
}

/// `agent/session/new` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionNewParams {
    /// `provider/id`; default as for `agent/prompt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Clamped to what the model supports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<pi_ai::models::ThinkingLevel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `agent/session/list` params: none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionListParams {}

/// One session file of the workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub session_file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    pub entry_count: usize,
    /// Milliseconds since the Unix epoch.
    pub last_activity: i64,
    /// True when this server has it open.
    pub open: bool,
}

/// `agent/session/list` result, most recent first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionListResult {
    pub sessions: Vec<SessionInfo>,
}

/// `agent/session/open` params: exactly one of `sessionId` (a file in `.pi/sessions/`) and
/// `path` (any session file; relative paths are relative to the workspace root).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionOpenParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `agent/session/close` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionCloseResult {
    /// True when the session was open here (its run, if any, was aborted first).
    pub closed: bool,
    /// Queued messages that will never be delivered.
    pub dropped: Vec<QueuedMessage>,
}

/// `agent/session/fork` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionForkParams {
    pub session_id: String,
    /// The entry to fork at. A user message is left out (the fork ends at its parent) and its
    /// text is returned for editing, as Pi does; any other entry is kept as the new leaf.
    pub entry_id: String,
}

/// `agent/session/fork` and `agent/session/clone` result: the new session (open in this
/// server, with its own file whose header names the parent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionForkResult {
    pub session: SessionState,
    /// The forked-at user message's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// One entry of a session tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct TreeEntry {
    pub id: String,
    pub parent_id: Option<String>,
    /// The entry's `type` (`message`, `model_change`, `branch_summary`, `label`, …).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// For `message` entries: the message's role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The first 200 characters of the entry's text, if it has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// `agent/session/tree` result: every entry in file order (parents before children).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionTreeResult {
    pub session_id: String,
    pub leaf_id: Option<String>,
    pub entries: Vec<TreeEntry>,
}

/// `agent/session/branch` params: move the leaf (Pi's tree navigation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionBranchParams {
    pub session_id: String,
    /// The entry to continue from; `null` for before the first entry. A user (or custom)
    /// message target puts the leaf at its parent and returns its text, as Pi does. Required:
    /// a request without it is refused (`missing field `entryId``) rather than read as `null`.
    #[serde(deserialize_with = "nullable")]
    pub entry_id: Option<String>,
    /// Have the model summarise the branch being left and store it as a `branch_summary`
    /// entry at the new position.
    #[serde(default)]
    #[cfg_attr(test, ts(optional = nullable))]
    pub summarize: bool,
    /// Extra focus for the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
    /// Pi 1.6's `replaceInstructions`: `customInstructions` replace the summary prompt
    /// instead of adding a focus to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(test, ts(optional = nullable))]
    pub replace_instructions: bool,
    /// Pi 1.6's `label`: a label put on the `branch_summary` entry, or on the target entry
    /// when no summary is written (a `label` entry, which becomes the leaf).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// `agent/session/label` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionLabelParams {
    pub session_id: String,
    pub entry_id: String,
    /// The label; `null` or `""` clears it. Required: a request without it is refused
    /// rather than read as a clear.
    #[serde(deserialize_with = "nullable")]
    pub label: Option<String>,
}

/// `agent/session/label` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionLabelResult {
    /// The `label` entry written.
    pub label_entry_id: String,
}

/// `agent/session/name` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionNameParams {
    pub session_id: String,
    /// Not empty (after trimming).
    pub name: String,
}

/// `agent/session/name` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionNameResult {
    pub name: String,
}

/// Context-window use (Pi's `contextUsage`): Pi's `estimateContextTokens` of the model's
/// context (the last valid response's usage plus estimates of the messages after it).
/// `tokens` and `percent` are `null` after a compaction until a response came after it (Pi's
/// rule: the usage before it measured the context before it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ContextUsage {
    pub tokens: Option<u64>,
    pub context_window: u64,
    /// 0–100, not rounded (Pi's `tokens / contextWindow * 100`).
    pub percent: Option<f64>,
}

/// Token figures of `agent/session/stats`, with Pi's `get_session_stats` key names: `total`
/// is `input + output + cacheRead + cacheWrite`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct StatsTokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub total: u64,
}

/// `agent/session/stats` result (Pi 1.6's `get_session_stats`, same scope): counts of every
/// `message` entry in the file (stored system messages in `totalMessages`), tokens and cost
/// of every response, `usage` entry and summary usage in the file (abandoned branches and
/// compacted turns included: what was paid); `sessionTokens` / `sessionCost` are the same
/// figures (pi-lsp's, from when `tokens` covered the context only, as in Pi 0.73.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionStatsResult {
    pub session_id: String,
    pub session_file: String,
    pub user_messages: usize,
    pub assistant_messages: usize,
    pub tool_calls: usize,
    pub tool_results: usize,
    pub total_messages: usize,
    pub tokens: StatsTokens,
    /// US dollars at the model's per-million-token prices.
    pub cost: f64,
    /// Every response in the session file (pi-lsp's; Pi has no such figure).
    pub session_tokens: StatsTokens,
    /// US dollars of every response in the session file (pi-lsp's).
    pub session_cost: f64,
    /// Absent only for a model without a context window (as in Pi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_usage: Option<ContextUsage>,
}

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum ExportFormat {
    Markdown,
    /// One self-contained page (inline CSS, no scripts, images inlined).
    Html,
}

/// `agent/session/export` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionExportParams {
    pub session_id: String,
    pub format: ExportFormat,
    /// Write here (relative to the workspace root unless absolute) instead of answering with
    /// the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_path: Option<String>,
}

/// `agent/session/export` result: `content`, or `path` when written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionExportResult {
    pub format: ExportFormat,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `agent/messages` result: the model's context as Pi's `get_messages` gives it (Pi's
/// `AgentMessage`s: roles `user`, `assistant`, `toolResult`, `bashExecution`, `custom`,
/// `branchSummary`, `compactionSummary`; after a compaction its summary first, then the kept
/// messages), each with its entry id (the summary's is the `compaction` entry's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct MessagesResult {
    pub session_id: String,
    #[cfg_attr(test, ts(type = "Array<unknown>"))]
    pub messages: Vec<Value>,
    /// `entryIds[i]` is the entry of `messages[i]`.
    pub entry_ids: Vec<String>,
    /// The response being streamed, if any: built from exactly the `agent/event`s up to
    /// [`MessagesResult::seq`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(type = "AssistantMessage | null"))]
    pub streaming_message: Option<Value>,
    /// The `seq` of the session's last `agent/event` this answer includes (0: none). A
    /// client applies only the events numbered after it: the ones up to it are in the answer,
    /// whichever it receives first.
    pub seq: u64,
}

/// `agent/model/list` result: the models that can be used (a key or a custom provider), then
/// the offline scripted model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelListResult {
    pub models: Vec<ModelInfo>,
}

/// `agent/model/set` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelSetParams {
    pub session_id: String,
    /// `provider/id`.
    pub model: String,
}

/// `agent/model/set` and `agent/model/cycle` result. A run already going keeps its model;
/// the next one uses this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelSetResult {
    pub model: ModelInfo,
    pub thinking_level: pi_ai::models::ThinkingLevel,
}

/// Cycling direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum Direction {
    #[default]
    Forward,
    Backward,
}

/// `agent/model/cycle` params. Answers `null` when fewer than two models can be used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelCycleParams {
    pub session_id: String,
    #[serde(default)]
    pub direction: Direction,
}

/// `agent/thinking/set` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThinkingSetParams {
    pub session_id: String,
    pub level: pi_ai::models::ThinkingLevel,
}

/// `agent/thinking/set` / `agent/thinking/cycle` result: the level now in effect (clamped to
/// what the model supports). Cycle answers `null` for models without reasoning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ThinkingResult {
    pub level: pi_ai::models::ThinkingLevel,
}

/// `agent/queue/setModes` params; an absent mode is left as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueSetModesParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steering: Option<QueueModeName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_up: Option<QueueModeName>,
}

/// `agent/queue/setModes` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct QueueModesResult {
    pub steering: QueueModeName,
    pub follow_up: QueueModeName,
}

/// `agent/queue/clear` result (Pi's `clearQueue`): the messages dropped, for the editor's
/// input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct QueueClearResult {
    pub dropped: Vec<QueuedMessage>,
    /// Pi 1.6's `clear_queue` result: the dropped steering texts, in queue order.
    pub steering: Vec<String>,
    /// Pi 1.6's `clear_queue` result: the dropped follow-up texts (next-turn messages
    /// included, after them), in queue order.
    pub follow_up: Vec<String>,
}

impl QueueClearResult {
    /// The result for `dropped` (Pi's `steering` / `followUp` lists taken from it).
    pub fn from_dropped(dropped: Vec<QueuedMessage>) -> Self {
        let texts = |steer: bool| -> Vec<String> {
            dropped
                .iter()
                .filter(|m| (m.delivery == pi_core::agent::Delivery::Steer) == steer)
                .map(|m| m.text.clone())
                .collect()
        };
        let (steering, follow_up) = (texts(true), texts(false));
        QueueClearResult {
            dropped,
            steering,
            follow_up,
        }
    }
}

/// `agent/retry/set` params (Pi's `set_auto_retry`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetrySetParams {
    pub session_id: String,
    pub enabled: bool,
}

/// `agent/compaction/set` params (Pi's `set_auto_compaction`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionSetParams {
    pub session_id: String,
    pub enabled: bool,
}

/// `agent/compaction/set` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CompactionSetResult {
    pub enabled: bool,
}

/// `agent/permissions/set` params: the session's own approval policy; `null` (or absent)
/// returns to the default (`initializationOptions.approvalPolicy`, settings, `auto-edit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermissionsSetParams {
    pub session_id: String,
    /// The policy, or `null` for the default. Required: a request without it is refused
    /// rather than read as `null` (which would silently drop an `ask` policy).
    #[serde(deserialize_with = "nullable")]
    pub approval_policy: Option<pi_core::approval::ApprovalPolicy>,
}

/// `agent/permissions/set` result: the policy now in force and the session's "allow always"
/// rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct PermissionsSetResult {
    pub approval_policy: pi_core::approval::ApprovalPolicy,
    pub session_rules: Vec<pi_core::approval::Rule>,
}

/// `agent/retry/set` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct RetrySetResult {
    pub enabled: bool,
}

/// `agent/retry/abort` result: true when a retry was waiting and the run has been stopped
/// (it ends with `auto_retry_end {success: false, finalError: "Retry cancelled"}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct RetryAbortResult {
    pub cancelled: bool,
}

/// `agent/bash` params: a shell command the user runs (Pi's `!cmd`; with
/// `excludeFromContext`, Pi's `!!cmd`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BashParams {
    pub session_id: String,
    pub command: String,
    /// Keep the output out of the model's context (it is still stored).
    #[serde(default)]
    pub exclude_from_context: bool,
}

/// `agent/bash/abort` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct BashAbortResult {
    pub aborted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn invalid_params_name_the_field() {
        let e = parse_params::<PromptParams>(json!({"text": 1})).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidParams);
        assert!(
            e.message.starts_with("text: invalid type: integer `1`"),
            "{}",
            e.message
        );
        let e = parse_params::<PromptParams>(json!({})).unwrap_err();
        assert_eq!(e.message, "missing field `text`");
        let e = parse_params::<PromptParams>(json!({"text":"x","streamingBehavior":"later"}))
            .unwrap_err();
        assert!(
            e.message
                .starts_with("streamingBehavior: unknown variant `later`"),
            "{}",
            e.message
        );
    }

    fn fixture(name: &str) -> Value {
        let p = format!(
            "{}/../../fixtures/protocol/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(v: &Value) {
        let t: T = parse_params(v.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&t).unwrap(), v);
    }

    /// Round-trips the request's params and the response's result of `name` (a file stem
    /// in `fixtures/protocol/`) through `P` and `R`; returns the files it read.
    fn pair<P, R>(name: &str) -> Vec<String>
    where
        P: Serialize + for<'de> Deserialize<'de>,
        R: Serialize + for<'de> Deserialize<'de>,
    {
        let req = format!("{name}.request.json");
        let resp = format!("{name}.response.json");
        let method = fixture(&req)["method"].as_str().unwrap().to_string();
        assert!(
            crate::methods::METHODS.contains(&method.as_str())
                || method == SaveDocumentRequest::METHOD,
            "{method}"
        );
        round_trip::<P>(&fixture(&req)["params"]);
        round_trip::<R>(&fixture(&resp)["result"]);
        vec![req, resp]
    }

    fn note<P: Serialize + for<'de> Deserialize<'de>>(name: &str, method: &str) -> Vec<String> {
        let file = format!("{name}.notification.json");
        let v = fixture(&file);
        assert_eq!(v["method"], method);
        round_trip::<P>(&v["params"]);
        vec![file]
    }

    /// An error example: its request params parse and its code is one of ours.
    fn error<P: Serialize + for<'de> Deserialize<'de>>(name: &str, code: i64) -> Vec<String> {
        let req = format!("{name}.request.json");
        let err = format!("{name}.error.json");
        parse_params::<P>(fixture(&req)["params"].clone()).unwrap();
        assert_eq!(fixture(&err)["error"]["code"], code);
        vec![req, err]
    }

    #[test]
    fn compact_fixtures_round_trip() {
        let start = fixture("agent-event.compaction-start.notification.json");
        let params = AgentEventParams {
            session_id: "01a22d67-d357-722e-afd8-b78dfc6ea512".into(),
            run_id: "01a22d70-51b2-7c3e-8d1f-0a9b8c7d6e5f".into(),
            seq: 40,
            event: AgentEvent::CompactionStart {
                reason: pi_core::agent::CompactionReason::Threshold,
            },
            unsaved: false,
        };
        assert_eq!(serde_json::to_value(params).unwrap(), start["params"]);
        let end = fixture("agent-event.compaction-end.notification.json");
        let result: pi_core::compaction::CompactionResult =
            serde_json::from_value(fixture("agent-compact.response.json")["result"].clone())
                .unwrap();
        let params = AgentEventParams {
            session_id: "01a22d67-d357-722e-afd8-b78dfc6ea512".into(),
            run_id: "01a22d70-51b2-7c3e-8d1f-0a9b8c7d6e5f".into(),
            seq: 41,
            event: AgentEvent::CompactionEnd {
                reason: pi_core::agent::CompactionReason::Threshold,
                result: Some(result),
                aborted: false,
                will_retry: false,
                error_message: None,
                context: None,
            },
            unsaved: false,
        };
        assert_eq!(serde_json::to_value(params).unwrap(), end["params"]);
        let settled = fixture("agent-event.agent-settled.notification.json");
        let params = AgentEventParams {
            session_id: "01a22d67-d357-722e-afd8-b78dfc6ea512".into(),
            run_id: "01a22d68-0c11-7e0a-9a55-5b7c2f3d4e61".into(),
            seq: 58,
            event: AgentEvent::AgentSettled { aborted: false },
            unsaved: false,
        };
        assert_eq!(serde_json::to_value(params).unwrap(), settled["params"]);
    }

    #[test]
    fn protocol_fixtures_round_trip() {
        let mut seen: Vec<String> = Vec::new();
        seen.extend(pair::<PromptParams, PromptResult>("agent-prompt"));
        seen.extend(pair::<AbortParams, AbortResult>("agent-abort"));
        seen.extend(pair::<SteerParams, SteerResult>("agent-steer"));
        seen.extend(pair::<FollowUpParams, FollowUpResult>("agent-followUp"));
        seen.extend(pair::<SendMessageParams, SendMessageResult>(
            "agent-sendMessage",
        ));
        seen.extend(pair::<SessionParams, MessagesResult>("agent-messages"));
        seen.extend(pair::<SessionParams, SessionState>("agent-state"));
        seen.extend(pair::<SessionNewParams, SessionState>("agent-session-new"));
        seen.extend(pair::<SessionListParams, SessionListResult>(
            "agent-session-list",
        ));
        seen.extend(pair::<SessionOpenParams, SessionState>(
            "agent-session-open",
        ));
        seen.extend(pair::<SessionParams, SessionCloseResult>(
            "agent-session-close",
        ));
        seen.extend(pair::<SessionForkParams, SessionForkResult>(
            "agent-session-fork",
        ));
        seen.extend(pair::<SessionParams, SessionForkResult>(
            "agent-session-clone",
        ));
        seen.extend(pair::<SessionParams, SessionTreeResult>(
            "agent-session-tree",
        ));
        seen.extend(pair::<SessionBranchParams, SessionBranchResult>(
            "agent-session-branch",
        ));
        seen.extend(pair::<
            crate::methods::history::HistoryParams,
            crate::methods::history::HistoryResult,
        >("agent-session-history"));
        {
            use crate::methods::rewind as rw;
            seen.extend(pair::<SessionParams, rw::ChangesResult>(
                "agent-session-changes",
            ));
            seen.extend(pair::<rw::RewindParams, rw::RewindResult>(
                "agent-session-rewind",
            ));
            seen.extend(error::<rw::RewindParams>(
                "agent-session-rewind.busy",
                codes::SESSION_BUSY,
            ));
        }
        seen.extend(pair::<SessionLabelParams, SessionLabelResult>(
            "agent-session-label",
        ));
        seen.extend(pair::<SessionNameParams, SessionNameResult>(
            "agent-session-name",
        ));
        seen.extend(pair::<SessionParams, SessionStatsResult>(
            "agent-session-stats",
        ));
        seen.extend(pair::<SessionExportParams, SessionExportResult>(
            "agent-session-export",
        ));
        seen.extend(pair::<SessionListParams, ModelListResult>(
            "agent-model-list",
        ));
        seen.extend(pair::<ModelSetParams, ModelSetResult>("agent-model-set"));
        seen.extend(pair::<ModelCycleParams, Option<ModelSetResult>>(
            "agent-model-cycle",
        ));
        seen.extend(pair::<ThinkingSetParams, ThinkingResult>(
            "agent-thinking-set",
        ));
        seen.extend(pair::<SessionParams, Option<ThinkingResult>>(
            "agent-thinking-cycle",
        ));
        seen.extend(pair::<QueueSetModesParams, QueueModesResult>(
            "agent-queue-setModes",
        ));
        seen.extend(pair::<SessionParams, QueueClearResult>("agent-queue-clear"));
        {
            use crate::methods::queue as qe;
            seen.extend(pair::<qe::QueueRemoveParams, qe::QueueRemoveResult>(
                "agent-queue-remove",
            ));
            seen.extend(pair::<qe::QueueEditParams, qe::QueueEditResult>(
                "agent-queue-edit",
            ));
            seen.extend(note::<QueueUpdateParams>(
                "agent-queueUpdate.removed",
                QueueUpdateNotification::METHOD,
            ));
        }
        seen.extend(pair::<RetrySetParams, RetrySetResult>("agent-retry-set"));
        seen.extend(pair::<SessionParams, RetryAbortResult>("agent-retry-abort"));
        seen.extend(
            pair::<SessionParams, crate::methods::resume::ContinueResult>("agent-continue"),
        );
        seen.extend(pair::<BashParams, BashResult>("agent-bash"));
        seen.extend(pair::<SessionParams, BashAbortResult>("agent-bash-abort"));
        seen.extend(pair::<CompactParams, CompactResult>("agent-compact"));
        seen.extend(pair::<CompactionSetParams, CompactionSetResult>(
            "agent-compaction-set",
        ));
        seen.extend(pair::<PermissionsSetParams, PermissionsSetResult>(
            "agent-permissions-set",
        ));
        seen.push("agent-requestPermission.edit.request.json".into());
        seen.push("agent-requestPermission.edit.response.json".into());
        seen.extend(note::<AttentionParams>(
            "agent-attention.permission",
            AttentionNotification::METHOD,
        ));
        seen.extend(error::<CompactParams>(
            "agent-compact.nothing",
            codes::COMPACTION_FAILED,
        ));
        // The server → client permission request (checked in `permissions::tests` too).
        round_trip::<crate::permissions::RequestPermissionParams>(
            &fixture("agent-requestPermission.request.json")["params"],
        );
        round_trip::<crate::permissions::RequestPermissionResult>(
            &fixture("agent-requestPermission.response.json")["result"],
        );
        seen.push("agent-requestPermission.request.json".into());
        seen.push("agent-requestPermission.response.json".into());
        // Checked in `compact_fixtures_round_trip`.
        seen.push("agent-event.compaction-start.notification.json".into());
        seen.push("agent-event.agent-settled.notification.json".into());
        seen.push("agent-event.compaction-end.notification.json".into());
        seen.extend(pair::<SaveDocumentParams, SaveDocumentResult>(
            "agent-saveDocument",
        ));
        seen.extend(note::<QueueUpdateParams>(
            "agent-queueUpdate",
            QueueUpdateNotification::METHOD,
        ));
        seen.extend(note::<UsageParams>(
            "agent-usage",
            UsageNotification::METHOD,
        ));
        seen.extend(note::<AttentionParams>(
            "agent-attention",
            AttentionNotification::METHOD,
        ));
        seen.extend(error::<SessionBranchParams>(
            "agent-session-branch.unknown-entry",
            codes::UNKNOWN_ENTRY,
        ));
        seen.extend(error::<ModelSetParams>(
            "agent-model-set.unknown-model",
            codes::MODEL_UNAVAILABLE,
        ));
        seen.extend(pair::<SessionParams, ExtensionCommandsResult>(
            "agent-extension-commands",
        ));
        seen.extend(pair::<PromptParams, PromptResult>("agent-prompt.command"));
        // The extension UI request and notification (server → client).
        round_trip::<crate::extensions::UiRequestParams>(
            &fixture("agent-ui-request.request.json")["params"],
        );
        assert_eq!(
            fixture("agent-ui-request.request.json")["method"],
            crate::extensions::UiRequestMethod::METHOD
        );
        round_trip::<pi_core::extension::UiResponse>(
            &fixture("agent-ui-request.response.json")["result"],
        );
        seen.push("agent-ui-request.request.json".into());
        seen.push("agent-ui-request.response.json".into());
        seen.extend(note::<crate::extensions::UiRequestParams>(
            "agent-ui-notification",
            crate::extensions::UiNotification::METHOD,
        ));
        let err = fixture("agent-event.extension-error.notification.json");
        assert_eq!(err["method"], AgentEventNotification::METHOD);
        let params = AgentEventParams {
            session_id: "01a22d67-d357-722e-afd8-b78dfc6ea512".into(),
            run_id: "01a22d70-51b2-7c3e-8d1f-0a9b8c7d6e5f".into(),
            seq: 7,
            event: AgentEvent::ExtensionError {
                extension_path: "<builtin:tmux>".into(),
                event: "command:tmux".into(),
                error: "unknown /tmux action \"stop\": use list, kill [NAME] or share [NAME]"
                    .into(),
            },
            unsaved: false,
        };
        assert_eq!(serde_json::to_value(params).unwrap(), err["params"]);
        seen.push("agent-event.extension-error.notification.json".into());
        // Editor-side tools, commands and the Pi RPC listings.
        {
            use crate::editor_tools as et;
            use crate::methods::commands as cm;
            seen.extend(pair::<et::ToolsRegisterParams, et::ToolsResult>(
                "agent-tools-register",
            ));
            seen.extend(pair::<et::ToolsUnregisterParams, et::ToolsResult>(
                "agent-tools-unregister",
            ));
            let req = fixture("agent-tools-register.shadowing.request.json");
            let decls: et::ToolsRegisterParams = parse_params(req["params"].clone()).unwrap();
            let err = fixture("agent-tools-register.shadowing.error.json");
            let e = et::check_decls(&decls.tools, "tools").unwrap_err();
            assert_eq!(err["error"]["code"], -32602);
            assert_eq!(err["error"]["message"], e.message.as_ref());
            seen.push("agent-tools-register.shadowing.request.json".into());
            seen.push("agent-tools-register.shadowing.error.json".into());
            seen.extend(pair::<cm::CommandsParams, cm::CommandsResult>(
                "agent-commands",
            ));
            seen.extend(pair::<SessionParams, cm::ForkMessagesResult>(
                "agent-session-forkMessages",
            ));
            seen.extend(pair::<SessionParams, cm::LastAssistantTextResult>(
                "agent-lastAssistantText",
            ));
            // Plan / todo board and MCP servers (methods/plan.rs, methods/mcp.rs).
            use crate::methods::plan as pl;
            seen.extend(pair::<SessionParams, pl::PlanParams>("agent-plan-get"));
            seen.extend(pair::<pl::PlanSetParams, pl::PlanParams>("agent-plan-set"));
            for m in ["list", "enable", "disable", "reconnect", "setExposure"] {
                seen.extend(pair::<Value, Value>(&format!("agent-mcp-{m}")));
            }
            // Server → client requests of the editor tools.
            for (name, method) in [
                ("agent-runTool", et::RUN_TOOL_METHOD),
                ("agent-diagnostics", et::DIAGNOSTICS_METHOD),
            ] {
                assert_eq!(fixture(&format!("{name}.request.json"))["method"], method);
            }
            round_trip::<et::RunToolParams>(&fixture("agent-runTool.request.json")["params"]);
            round_trip::<et::RunToolResult>(&fixture("agent-runTool.response.json")["result"]);
            round_trip::<et::DiagnosticsParams>(
                &fixture("agent-diagnostics.request.json")["params"],
            );
            round_trip::<et::DiagnosticsResult>(
                &fixture("agent-diagnostics.response.json")["result"],
            );
            let cancel = fixture("agent-runTool.cancelRequest.notification.json");
            assert_eq!(cancel["method"], "$/cancelRequest");
            assert_eq!(
                cancel["params"]["id"],
                fixture("agent-runTool.request.json")["id"]
            );
            for f in [
                "agent-runTool.request.json",
                "agent-runTool.response.json",
                "agent-runTool.cancelRequest.notification.json",
                "agent-diagnostics.request.json",
                "agent-diagnostics.response.json",
            ] {
                seen.push(f.into());
            }
        }
        seen.push("agent-prompt.busy-error.json".into());
        seen.push("agent-event.notification.json".into());
        // Compact deltas' examples: round-tripped in crate::delta's tests.
        seen.push("agent-delta.notification.json".into());
        seen.push("agent-event.ref.notification.json".into());
        // Every method has an example, and every example is checked here.
        for m in crate::methods::METHODS {
            let stem = m.replace('/', "-");
            assert!(
                seen.contains(&format!("{stem}.request.json")),
                "no example for {m}"
            );
        }
        let dir = format!("{}/../../fixtures/protocol", env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let unchecked: Vec<&String> = files.iter().filter(|f| !seen.contains(f)).collect();
        assert!(
            unchecked.is_empty(),
            "examples not round-tripped: {unchecked:?}"
        );
        assert_eq!(
            fixture("agent-prompt.busy-error.json")["error"]["code"],
            codes::SESSION_BUSY
        );
        let ev = fixture("agent-event.notification.json");
        assert_eq!(ev["method"], AgentEventNotification::METHOD);
        let params = AgentEventParams {
            session_id: "01a22d67-d357-722e-afd8-b78dfc6ea512".into(),
            run_id: "01a22d68-0c11-7e0a-9a55-5b7c2f3d4e61".into(),
            seq: 12,
            event: AgentEvent::MessageUpdate {
                assistant_message_event: pi_ai::AssistantEvent::TextDelta {
                    content_index: 0,
                    delta: "Renamed ".into(),
                },
            },
            unsaved: false,
        };
        assert_eq!(serde_json::to_value(params).unwrap(), ev["params"]);
    }
}

//! In-process Rust extensions (docs/design.md#extensions-and-product-boundaries "Extensions are trusted in-process code"; Pi's
//! `docs/extensions.md`).
//!
//! An [`Extension`] registers, through an [`ExtensionApi`]:
//! - tools the model may call (our [`Tool`] trait; Pi's `pi.registerTool`);
//! - `tool_call` handlers (before a call: continue, rewrite the validated input, or block with
//!   a reason the model sees) and `tool_result` handlers (after a call: patch content,
//!   details, isError), which the loop runs through its generic [`AgentHooks`] ("The coding
//!   product maps extension handlers into generic loop hooks");
//! - commands (`/name args` typed by the user runs the handler instead of a prompt);
//! - event handlers (every [`AgentEvent`] of the session, awaited in order like Pi's
//!   subscribers) and `session_start` handlers (run once when the session opens, e.g. to
//!   restore state from `custom` entries).
//!
//! Handlers and tools get an [`ExtensionContext`]: the workspace folder, the session id,
//! `custom` entries (extension state, never model-visible: [`ExtensionContext::append_entry`],
//! [`ExtensionContext::custom_entries`]), custom messages (model-visible, with `display`,
//! `details` and `deliverAs` steer | followUp | nextTurn: [`ExtensionContext::send_message`])
//! and the user ([`ExtensionContext::select`], `confirm`, `input`, `editor`, `notify`,
//! `set_status`: Pi's `ctx.ui`). What these do is the embedding product's: an
//! [`ExtensionHost`] (the editor server writes the session file, queues messages, asks the
//! editor).
//!
//! Errors never crash the loop: a handler that returns `Err` or panics becomes an
//! `extension_error` event (Pi's name and shape: `extensionPath`, `event`, `error`); a failing
//! `tool_call` handler blocks that call (as Pi does); failing `tool_result` and event handlers
//! are skipped. Extensions are trusted and not sandboxed: they run with the server's
//! permissions.
//!
//! Built-in extensions ([`builtin`]) are enabled by the settings key [`SETTINGS_KEY`]
//! (`"builtinExtensions": {"tmux": {…}}`); project settings are read only in a trusted
//! workspace, so a project cannot enable one unless trusted. Pi's own `extensions` key (a list
//! of TypeScript paths) is left to Pi. See `docs/extensions.md`.

pub mod plan;
pub mod plan_mode;
pub mod tmux;
pub mod todo;

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::FutureExt as _;
use pi_ai::ContentBlock;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::agent::{
    AfterToolCall, AfterToolOverride, AgentEvent, AgentHooks, BeforeToolCall, Delivery, EventSink,
    NextTurn, Tool,
};
use crate::session::SessionWriter;

/// The settings key that enables built-in extensions: an object from extension name to its
/// configuration (`{}` or `true` for the defaults; `false` or `{"enabled": false}` disables).
pub const SETTINGS_KEY: &str = "builtinExtensions";

/// Pi's `tool_call` event: the call about to run, with its validated input.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallEvent {
    pub tool_call_id: String,
    pub tool_name: String,
    pub input: Value,
}

/// What a `tool_call` handler decides.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCallAction {
    /// Run the call as it is (as far as this handler is concerned).
    Continue,
    /// Run it with this input instead (not validated again; later handlers see it).
    Rewrite(Value),
    /// Do not run it; the reason is the error result the model sees.
    Block(String),
}

/// Pi's `tool_result` event: a settled call (after any earlier handler's patch).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultEvent {
    pub tool_call_id: String,
    pub tool_name: String,
    pub input: Value,
    pub content: Vec<ContentBlock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub is_error: bool,
}

/// A custom message (docs/design.md#extensions-and-product-boundaries: JSONL `custom_message`, runtime role `custom`, provider role
/// `user`). Provider-visible provenance must be written into `content`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomMessage {
    /// Which extension (or kind of message) it is, e.g. `tmux`.
    pub custom_type: String,
    /// A string, or text / image blocks (Pi's shapes).
    pub content: Value,
    /// Whether the user's view shows it.
    pub display: bool,
    /// Structured state for renderers; never sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// When it reaches the model: steering (default during a run), follow-up, or with the
    /// next user prompt. `None` while idle appends it at once.
    #[serde(skip)]
    pub deliver_as: Option<Delivery>,
    /// While idle, start a run with it (ignored for next-turn delivery).
    #[serde(skip)]
    pub trigger_turn: bool,
}

/// How a notification looks (Pi's `notifyType`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyType {
    #[default]
    Info,
    Warning,
    Error,
}

/// One user-interface request of an extension (Pi's extension UI methods, same names and
/// fields). `select`, `confirm`, `input` and `editor` wait for the user's answer (`timeout`
/// in milliseconds resolves them as cancelled); `notify` and `setStatus` do not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "method",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum UiRequest {
    Select {
        title: String,
        options: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout: Option<u64>,
    },
    Confirm {
        title: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout: Option<u64>,
    },
    Input {
        title: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        placeholder: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout: Option<u64>,
    },
    Editor {
        title: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefill: Option<String>,
    },
    Notify {
        message: String,
        #[serde(default)]
        notify_type: NotifyType,
    },
    SetStatus {
        status_key: String,
        /// `None` clears the entry.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status_text: Option<String>,
    },
}

impl UiRequest {
    /// True for the methods that wait for an answer.
    pub fn is_dialog(&self) -> bool {
        matches!(
            self,
            UiRequest::Select { .. }
                | UiRequest::Confirm { .. }
                | UiRequest::Input { .. }
                | UiRequest::Editor { .. }
        )
    }

    /// The request's timeout in milliseconds, if any.
    pub fn timeout_ms(&self) -> Option<u64> {
        match self {
            UiRequest::Select { timeout, .. }
            | UiRequest::Confirm { timeout, .. }
            | UiRequest::Input { timeout, .. } => *timeout,
            _ => None,
        }
    }
}

/// The user's answer to a dialog (Pi's `extension_ui_response` without `type` and `id`):
/// `value` for select / input / editor, `confirmed` for confirm, or `cancelled`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UiResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<bool>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
}

impl UiResponse {
    /// A dismissed dialog.
    pub fn cancelled() -> Self {
        UiResponse {
            cancelled: true,
            ..Default::default()
        }
    }
}

/// Pi's `extension_error` payload: which extension, in which handler, what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionErrorInfo {
    /// `<builtin:NAME>` for built-in extensions (Pi's `sourceInfo.path` style).
    pub extension_path: String,
    /// `load`, `session_start`, `tool_call`, `tool_result`, `command:NAME`, or an event type.
    pub event: String,
    pub error: String,
}

impl From<ExtensionErrorInfo> for AgentEvent {
    fn from(e: ExtensionErrorInfo) -> Self {
        AgentEvent::ExtensionError {
            extension_path: e.extension_path,
            event: e.event,
            error: e.error,
        }
    }
}

/// What the embedding product provides to extensions (the editor server implements it; tests
/// implement their own). Every method must be safe to call from inside a tool or a handler
/// while a run is active.
#[async_trait]
pub trait ExtensionHost: Send + Sync {
    /// The workspace folder.
    fn cwd(&self) -> PathBuf;
    /// The session's id.
    fn session_id(&self) -> String;
    /// Appends a `custom` entry `{customType, data}` to the session file; returns its id.
    fn append_entry(&self, custom_type: &str, data: Value) -> Result<String, String>;
    /// The `data` of the `custom` entries of `custom_type` on the session's active branch,
    /// oldest first.
    fn custom_entries(&self, custom_type: &str) -> Vec<Value>;
    /// Delivers a custom message (stored as a `custom_message` entry when it reaches the
    /// conversation).
    async fn send_message(&self, message: CustomMessage) -> Result<(), String>;
    /// Whether dialogs can reach a user (Pi's `ctx.hasUI`).
    fn has_ui(&self) -> bool {
        false
    }
    /// Shows `request` of `extension` to the user; dialogs wait for the answer. Without a
    /// user: cancelled.
    async fn ui(&self, _extension: &str, _request: UiRequest) -> UiResponse {
        UiResponse::cancelled()
    }
    /// Reports an extension failure (as an `extension_error` event).
    async fn extension_error(&self, error: ExtensionErrorInfo);
    /// Every entry of the session's active branch as stored (raw JSON lines), root first
    /// (Pi's `ctx.sessionManager.getBranch()`). Default: none.
    fn branch_entries(&self) -> Vec<Value> {
        Vec::new()
    }
    /// [`ExtensionHost::branch_entries`] of the given kinds only: an entry `type` (`custom`),
    /// a message `role` (`toolResult`), or `toolResult:<toolName>` (that tool's results
    /// only); the others are not read from the file.
    fn branch_entries_of(&self, kinds: &[&str]) -> Vec<Value> {
        self.branch_entries()
            .into_iter()
            .filter(|e| {
                kinds.iter().any(|k| match k.split_once(':') {
                    Some((role, tool)) => {
                        e["type"] == "message"
                            && e["message"]["role"] == role
                            && e["message"]["toolName"] == tool
                    }
                    None => {
                        e["type"] == *k || (e["type"] == "message" && e["message"]["role"] == *k)
                    }
                })
            })
            .collect()
    }
    /// Waits until no run is active (a run that is ending has ended). Default: at once.
    async fn wait_idle(&self) {}
    /// The names of the tools the session's next run offers, in their order (Pi's
    /// `pi.getActiveTools()`; the session's configuration built now, so also before its
    /// first run, a resumed file's restored loadout included). Default: none known.
    fn active_tools(&self) -> Vec<String> {
        Vec::new()
    }
    /// Sends `text` as the user's prompt (Pi's `pi.sendUserMessage`, `deliverAs: followUp`
    /// during a run). Default: not supported.
    async fn send_user_message(&self, _text: &str) -> Result<(), String> {
        Err("this host cannot send user messages".into())
    }
}

/// The product's part of an extension host in a live session
/// ([`crate::harness::SessionSetup::extension_ui`]): the user interface and where failures
/// are reported. The session itself keeps the entries and delivers the messages.
#[async_trait]
pub trait ExtensionUi: Send + Sync {
    /// Whether dialogs can reach a user (Pi's `ctx.hasUI`).
    fn has_ui(&self) -> bool {
        false
    }
    /// Shows `request` of `extension` to the user; dialogs wait for the answer. Without a
    /// user: cancelled.
    async fn ui(&self, _extension: &str, _request: UiRequest) -> UiResponse {
        UiResponse::cancelled()
    }
    /// Reports an extension failure (as an `extension_error` event).
    async fn extension_error(&self, error: ExtensionErrorInfo);
}

/// Appends a `custom` entry to `writer` (for hosts that write a session file).
pub fn append_custom_entry(
    writer: &Mutex<SessionWriter>,
    custom_type: &str,
    data: Value,
) -> Result<String, String> {
    let mut w = crate::session::lock_writer(writer).map_err(|e| e.to_string())?;
    w.append(crate::session::EntryData::Custom {
        custom_type: custom_type.to_string(),
        data,
    })
    .map_err(|e| e.to_string())
}

/// The `data` of the `custom` entries of `custom_type` on `writer`'s active branch.
pub fn custom_entries_of(writer: &Mutex<SessionWriter>, custom_type: &str) -> Vec<Value> {
    let Ok(w) = crate::session::lock_writer(writer) else {
        return Vec::new();
    };
    w.branch_path()
        .into_iter()
        .filter(|e| e.kind == "custom")
        .map(|e| e.raw())
        .filter(|raw| raw["customType"] == custom_type)
        .map(|mut raw| raw["data"].take())
        .collect()
}

/// An extension's handle on its session and user; cheap to clone, usable from tools.
#[derive(Clone)]
pub struct ExtensionContext {
    extension: Arc<str>,
    host: Arc<dyn ExtensionHost>,
}

impl ExtensionContext {
    /// A context for `extension` over `host`.
    pub fn new(extension: &str, host: Arc<dyn ExtensionHost>) -> Self {
        ExtensionContext {
            extension: extension.into(),
            host,
        }
    }

    /// The extension's name.
    pub fn extension(&self) -> &str {
        &self.extension
    }

    /// The workspace folder (Pi's `ctx.cwd`).
    pub fn cwd(&self) -> PathBuf {
        self.host.cwd()
    }

    /// The session's id.
    pub fn session_id(&self) -> String {
        self.host.session_id()
    }

    /// Persists extension state as a `custom` entry (Pi's `pi.appendEntry`); it never reaches
    /// the model. Returns the entry id.
    pub fn append_entry(&self, custom_type: &str, data: Value) -> Result<String, String> {
        self.host.append_entry(custom_type, data)
    }

    /// The `data` of this session branch's `custom` entries of `custom_type`, oldest first.
    pub fn custom_entries(&self, custom_type: &str) -> Vec<Value> {
        self.host.custom_entries(custom_type)
    }

    /// Sends a custom message (Pi's `pi.sendMessage`).
    pub async fn send_message(&self, message: CustomMessage) -> Result<(), String> {
        self.host.send_message(message).await
    }

    /// Whether dialogs can reach a user.
    pub fn has_ui(&self) -> bool {
        self.host.has_ui()
    }

    /// The active branch's entries as stored, root first (Pi's `sessionManager.getBranch()`).
    pub fn branch_entries(&self) -> Vec<Value> {
        self.host.branch_entries()
    }

    /// The active branch's entries of the given kinds (an entry `type`, a message `role`, or
    /// `toolResult:<toolName>`: that tool's results only).
    pub fn branch_entries_of(&self, kinds: &[&str]) -> Vec<Value> {
        self.host.branch_entries_of(kinds)
    }

    /// Waits until no run is active.
    pub async fn wait_idle(&self) {
        self.host.wait_idle().await
    }

    /// The names of the tools the session's next run offers (Pi's `pi.getActiveTools()`).
    pub fn active_tools(&self) -> Vec<String> {
        self.host.active_tools()
    }

    /// Sends `text` as the user's prompt (Pi's `pi.sendUserMessage`).
    pub async fn send_user_message(&self, text: &str) -> Result<(), String> {
        self.host.send_user_message(text).await
    }

    /// Any UI request; the typed helpers below are usually simpler.
    pub async fn ui(&self, request: UiRequest) -> UiResponse {
        self.host.ui(&self.extension, request).await
    }

    /// Lets the user pick one of `options`; `None` when dismissed.
    pub async fn select(&self, title: &str, options: Vec<String>) -> Option<String> {
        let r = self
            .ui(UiRequest::Select {
                title: title.into(),
                options,
                timeout: None,
            })
            .await;
        if r.cancelled {
            None
        } else {
            r.value
        }
    }

    /// Asks yes or no; dismissed is no.
    pub async fn confirm(&self, title: &str, message: &str) -> bool {
        let r = self
            .ui(UiRequest::Confirm {
                title: title.into(),
                message: message.into(),
                timeout: None,
            })
            .await;
        !r.cancelled && r.confirmed == Some(true)
    }

    /// Asks for a line of text; `None` when dismissed.
    pub async fn input(&self, title: &str, placeholder: Option<&str>) -> Option<String> {
        let r = self
            .ui(UiRequest::Input {
                title: title.into(),
                placeholder: placeholder.map(str::to_string),
                timeout: None,
            })
            .await;
        if r.cancelled {
            None
        } else {
            r.value
        }
    }

    /// Asks for multi-line text, starting from `prefill`; `None` when dismissed.
    pub async fn editor(&self, title: &str, prefill: Option<&str>) -> Option<String> {
        let r = self
            .ui(UiRequest::Editor {
                title: title.into(),
                prefill: prefill.map(str::to_string),
            })
            .await;
        if r.cancelled {
            None
        } else {
            r.value
        }
    }

    /// Shows a notification (does not wait).
    pub async fn notify(&self, message: &str, notify_type: NotifyType) {
        self.ui(UiRequest::Notify {
            message: message.into(),
            notify_type,
        })
        .await;
    }

    /// Sets (or with `None` clears) this extension's status entry `key`.
    pub async fn set_status(&self, key: &str, text: Option<&str>) {
        self.ui(UiRequest::SetStatus {
            status_key: key.into(),
            status_text: text.map(str::to_string),
        })
        .await;
    }
}

type ToolCallHandler = Arc<
    dyn Fn(ToolCallEvent, ExtensionContext) -> BoxFuture<'static, Result<ToolCallAction, String>>
        + Send
        + Sync,
>;
type ToolResultHandler = Arc<
    dyn Fn(
            ToolResultEvent,
            ExtensionContext,
        ) -> BoxFuture<'static, Result<Option<AfterToolOverride>, String>>
        + Send
        + Sync,
>;
type EventHandler = Arc<
    dyn Fn(AgentEvent, ExtensionContext) -> BoxFuture<'static, Result<(), String>> + Send + Sync,
>;
type CommandHandler =
    Arc<dyn Fn(String, ExtensionContext) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;
type SessionStartHandler = Arc<dyn Fn(&ExtensionContext) -> Result<(), String> + Send + Sync>;
/// Which events an event handler gets (see [`ExtensionApi::on_event_where`]).
type EventWanted = fn(&AgentEvent) -> bool;
type ToolFilter = Arc<dyn Fn(&[Arc<dyn Tool>], &mut Vec<Arc<dyn Tool>>) + Send + Sync>;
type BeforeAgentStartHandler = Arc<dyn Fn(&ExtensionContext) -> Vec<CustomMessage> + Send + Sync>;
/// A `context` handler: true when it changed the messages.
type ContextHandler = Arc<dyn Fn(&mut Vec<pi_ai::Message>) -> bool + Send + Sync>;

/// A registered command.
#[derive(Clone)]
struct Command {
    name: String,
    description: Option<String>,
    handler: CommandHandler,
}

/// How a command is listed (Pi's `get_commands` entry for `source: "extension"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[cfg_attr(feature = "ts", ts(rename = "ExtensionCommandInfo"))]
#[serde(rename_all = "camelCase")]
pub struct CommandInfo {
    /// Invoked as `/name args`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Always `extension`.
    pub source: String,
    /// The extension's path, `<builtin:NAME>` for built-ins.
    pub path: String,
}

/// What an extension registers (Pi's `ExtensionAPI`), filled by [`Extension::register`].
pub struct ExtensionApi {
    ctx: ExtensionContext,
    tools: Vec<Arc<dyn Tool>>,
    tool_call: Vec<ToolCallHandler>,
    tool_result: Vec<ToolResultHandler>,
    events: Vec<(Option<EventWanted>, EventHandler)>,
    commands: Vec<Command>,
    session_start: Vec<SessionStartHandler>,
    session_tree: Vec<SessionStartHandler>,
    tool_filters: Vec<ToolFilter>,
    before_agent_start: Vec<BeforeAgentStartHandler>,
    context: Vec<ContextHandler>,
}

impl ExtensionApi {
    fn new(ctx: ExtensionContext) -> Self {
        ExtensionApi {
            ctx,
            tools: Vec::new(),
            tool_call: Vec::new(),
            tool_result: Vec::new(),
            events: Vec::new(),
            commands: Vec::new(),
            session_start: Vec::new(),
            session_tree: Vec::new(),
            tool_filters: Vec::new(),
            before_agent_start: Vec::new(),
            context: Vec::new(),
        }
    }

    /// The extension's context (to keep in its tools).
    pub fn context(&self) -> ExtensionContext {
        self.ctx.clone()
    }

    /// Adds a tool the model may call (Pi's `pi.registerTool`). Built-in tools come first, so
    /// a tool named like one of them is never called.
    pub fn register_tool(&mut self, tool: Arc<dyn Tool>) {
        self.tools.push(tool);
    }

    /// Adds a `tool_call` handler: runs after validation, before execution, in load order.
    pub fn on_tool_call<F, Fut>(&mut self, f: F)
    where
        F: Fn(ToolCallEvent, ExtensionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolCallAction, String>> + Send + 'static,
    {
        self.tool_call.push(Arc::new(move |e, c| {
            Box::pin(f(e, c)) as BoxFuture<'static, _>
        }));
    }

    /// Adds a `tool_result` handler: runs after execution; `Some(patch)` replaces the given
    /// fields (handlers chain like middleware, in load order).
    pub fn on_tool_result<F, Fut>(&mut self, f: F)
    where
        F: Fn(ToolResultEvent, ExtensionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<AfterToolOverride>, String>> + Send + 'static,
    {
        self.tool_result.push(Arc::new(move |e, c| {
            Box::pin(f(e, c)) as BoxFuture<'static, _>
        }));
    }

    /// Adds a handler of every agent event of the session (awaited before the loop goes on).
    pub fn on_event<F, Fut>(&mut self, f: F)
    where
        F: Fn(AgentEvent, ExtensionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.events.push((
            None,
            Arc::new(move |e, c| Box::pin(f(e, c)) as BoxFuture<'static, _>),
        ));
    }

    /// [`ExtensionApi::on_event`] for the events `wanted` accepts only (the others, e.g. every
    /// streamed delta, never reach the handler).
    pub fn on_event_where<F, Fut>(&mut self, wanted: fn(&AgentEvent) -> bool, f: F)
    where
        F: Fn(AgentEvent, ExtensionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.events.push((
            Some(wanted),
            Arc::new(move |e, c| Box::pin(f(e, c)) as BoxFuture<'static, _>),
        ));
    }

    /// Adds the command `/name` (Pi's `pi.registerCommand`); the handler gets the text after
    /// the name, trimmed. A name already taken gets a `:N` suffix (`review:2`), as in Pi.
    pub fn register_command<F, Fut>(&mut self, name: &str, description: Option<&str>, f: F)
    where
        F: Fn(String, ExtensionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.commands.push(Command {
            name: name.trim_start_matches('/').to_string(),
            description: description.map(str::to_string),
            handler: Arc::new(move |a, c| Box::pin(f(a, c)) as BoxFuture<'static, _>),
        });
    }

    /// Adds a handler run once when the session opens (e.g. to restore state from
    /// [`ExtensionContext::custom_entries`]).
    pub fn on_session_start<F>(&mut self, f: F)
    where
        F: Fn(&ExtensionContext) -> Result<(), String> + Send + Sync + 'static,
    {
        self.session_start.push(Arc::new(f));
    }

    /// Adds a handler run after the session's leaf moved (a branch, a rewind: Pi's
    /// `session_tree`), e.g. to rebuild state from [`ExtensionContext::branch_entries`].
    pub fn on_session_tree<F>(&mut self, f: F)
    where
        F: Fn(&ExtensionContext) -> Result<(), String> + Send + Sync + 'static,
    {
        self.session_tree.push(Arc::new(f));
    }

    /// Adds a filter of the tools of each run (Pi's `pi.setActiveTools`, applied when a run
    /// is configured, before the system prompt is built from the tools). It gets the tools
    /// registered (Pi's tool registry: every tool there is, less those a `--tools` list of
    /// names leaves out) and the run's active tools, in order, which it may change: remove
    /// some, or add registered ones (Pi's `_applyToolLoadout` keeps the active ones in their
    /// order and appends new ones).
    pub fn filter_tools<F>(&mut self, f: F)
    where
        F: Fn(&[Arc<dyn Tool>], &mut Vec<Arc<dyn Tool>>) + Send + Sync + 'static,
    {
        self.tool_filters.push(Arc::new(f));
    }

    /// Adds a `before_agent_start` handler (Pi's, for a user's prompt): the custom messages
    /// it returns go with the prompt, after it, stored as `custom_message` entries.
    pub fn on_before_agent_start<F>(&mut self, f: F)
    where
        F: Fn(&ExtensionContext) -> Vec<CustomMessage> + Send + Sync + 'static,
    {
        self.before_agent_start.push(Arc::new(f));
    }

    /// Adds a `context` handler (Pi's): it may change the messages of each model request
    /// (never the session file), and returns true when it did (the run then counts the
    /// context afresh instead of only what was appended since its last request).
    pub fn on_context<F>(&mut self, f: F)
    where
        F: Fn(&mut Vec<pi_ai::Message>) -> bool + Send + Sync + 'static,
    {
        self.context.push(Arc::new(f));
    }
}

/// An in-process extension. One instance serves one session.
pub trait Extension: Send + Sync {
    /// Its name (`tmux`).
    fn name(&self) -> &str;
    /// Where it comes from, for `extension_error` and command listings.
    fn path(&self) -> String {
        format!("<builtin:{}>", self.name())
    }
    /// Registers its tools, handlers and commands. `Err` leaves the extension out (reported as
    /// an `extension_error` of event `load`).
    fn register(&self, api: &mut ExtensionApi) -> Result<(), String>;
}

/// One loaded extension's registrations.
struct Loaded {
    path: String,
    ctx: ExtensionContext,
    tools: Vec<Arc<dyn Tool>>,
    tool_call: Vec<ToolCallHandler>,
    tool_result: Vec<ToolResultHandler>,
    events: Vec<(Option<EventWanted>, EventHandler)>,
    session_tree: Vec<SessionStartHandler>,
    tool_filters: Vec<ToolFilter>,
    before_agent_start: Vec<BeforeAgentStartHandler>,
    context: Vec<ContextHandler>,
}

/// Text of a panic payload.
fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".into()
    }
}

/// Runs one handler call, turning a panic (when called or while awaited) into `Err`.
async fn guarded<T>(
    call: impl FnOnce() -> BoxFuture<'static, Result<T, String>>,
) -> Result<T, String> {
    let fut = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
        Ok(f) => f,
        Err(p) => return Err(panic_text(p)),
    };
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(p) => Err(panic_text(p)),
    }
}

/// The loaded extensions of one session: their tools, their commands, and the loop hooks and
/// event listener their handlers run through.
pub struct Extensions {
    host: Arc<dyn ExtensionHost>,
    loaded: Vec<Loaded>,
    commands: Vec<(String, String, Command, ExtensionContext)>,
    plan: Option<Arc<plan::PlanBoard>>,
}

impl Extensions {
    /// No extensions.
    pub fn none(host: Arc<dyn ExtensionHost>) -> Self {
        Extensions {
            host,
            loaded: Vec::new(),
            commands: Vec::new(),
            plan: None,
        }
    }

    /// Registers `extensions` in order and runs their `session_start` handlers. Returns the
    /// set and the failures to report (an extension whose `register` failed is left out).
    pub fn load(
        extensions: Vec<Arc<dyn Extension>>,
        host: Arc<dyn ExtensionHost>,
    ) -> (Self, Vec<ExtensionErrorInfo>) {
        let mut set = Extensions::none(host.clone());
        let mut errors = Vec::new();
        for ext in extensions {
            let path = ext.path();
            let ctx = ExtensionContext::new(ext.name(), host.clone());
            let mut api = ExtensionApi::new(ctx.clone());
            let registered =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ext.register(&mut api)))
                    .unwrap_or_else(|p| Err(panic_text(p)));
            if let Err(error) = registered {
                errors.push(ExtensionErrorInfo {
                    extension_path: path,
                    event: "load".into(),
                    error,
                });
                continue;
            }
            for h in &api.session_start {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(&ctx)))
                    .unwrap_or_else(|p| Err(panic_text(p)));
                if let Err(error) = r {
                    errors.push(ExtensionErrorInfo {
                        extension_path: path.clone(),
                        event: "session_start".into(),
                        error,
                    });
                }
            }
            for c in api.commands {
                let taken = |n: &str| set.commands.iter().any(|(name, ..)| name == n);
                let mut name = c.name.clone();
                let mut n = 2;
                while taken(&name) {
                    name = format!("{}:{n}", c.name);
                    n += 1;
                }
                set.commands.push((name, path.clone(), c, ctx.clone()));
            }
            set.loaded.push(Loaded {
                path,
                ctx,
                tools: api.tools,
                tool_call: api.tool_call,
                tool_result: api.tool_result,
                events: api.events,
                session_tree: api.session_tree,
                tool_filters: api.tool_filters,
                before_agent_start: api.before_agent_start,
                context: api.context,
            });
        }
        (set, errors)
    }

    /// The set with the session's plan/todo board (of the built-in `todo` / `plan-mode`).
    pub fn with_plan(mut self, plan: Option<Arc<plan::PlanBoard>>) -> Self {
        self.plan = plan;
        self
    }

    /// The session's plan/todo board, when `todo` or `plan-mode` is loaded.
    pub fn plan(&self) -> Option<&Arc<plan::PlanBoard>> {
        self.plan.as_ref()
    }

    /// Runs every tool filter on a run's active `tools`, given the `registered` ones (see
    /// [`ExtensionApi::filter_tools`]); a panicking filter is logged and leaves the list as
    /// the filters before it left it.
    pub fn filter_tools(&self, registered: &[Arc<dyn Tool>], tools: &mut Vec<Arc<dyn Tool>>) {
        for l in &self.loaded {
            for f in &l.tool_filters {
                let mut copy = tools.clone();
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    f(registered, &mut copy)
                })) {
                    Ok(()) => *tools = copy,
                    Err(p) => tracing::warn!("extension {} tool filter {}", l.path, panic_text(p)),
                }
            }
        }
    }

    /// The custom messages the `before_agent_start` handlers add to a user's prompt.
    pub fn before_agent_start(&self) -> Vec<CustomMessage> {
        let mut out = Vec::new();
        for l in &self.loaded {
            for h in &l.before_agent_start {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(&l.ctx))) {
                    Ok(m) => out.extend(m),
                    Err(p) => {
                        tracing::warn!("extension {} before_agent_start {}", l.path, panic_text(p))
                    }
                }
            }
        }
        out
    }

    /// Runs the `session_tree` handlers (the session's leaf moved).
    pub fn session_tree(&self) {
        for l in &self.loaded {
            for h in &l.session_tree {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(&l.ctx)))
                    .unwrap_or_else(|p| Err(panic_text(p)));
                if let Err(e) = r {
                    tracing::warn!("extension {} failed in session_tree: {e}", l.path);
                }
            }
        }
    }

    /// True when nothing is loaded.
    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty()
    }

    /// True when some extension handles events: only then is it worth subscribing the set to
    /// an agent (every listener gets its own copy of every event).
    pub fn has_event_handlers(&self) -> bool {
        self.loaded.iter().any(|l| !l.events.is_empty())
    }

    /// Every tool the extensions registered, in load order.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.loaded
            .iter()
            .flat_map(|l| l.tools.iter().cloned())
            .collect()
    }

    /// The registered commands, in load order.
    pub fn commands(&self) -> Vec<CommandInfo> {
        self.commands
            .iter()
            .map(|(name, path, c, _)| CommandInfo {
                name: name.clone(),
                description: c.description.clone(),
                source: "extension".into(),
                path: path.clone(),
            })
            .collect()
    }

    /// The command `text` invokes (`/name args`), if any: its name and arguments.
    pub fn find_command(&self, text: &str) -> Option<(String, String)> {
        let rest = text.strip_prefix('/')?;
        let (name, args) = match rest.find(char::is_whitespace) {
            Some(i) => (&rest[..i], rest[i..].trim()),
            None => (rest, ""),
        };
        self.commands
            .iter()
            .find(|(n, ..)| n == name)
            .map(|(n, ..)| (n.clone(), args.to_string()))
    }

    /// Runs the command `text` invokes. `None`: no extension command (the text is a prompt);
    /// `Some(name)`: it ran (a failure was reported as `extension_error`, event `command:NAME`).
    pub async fn run_command(&self, text: &str) -> Option<String> {
        let (name, args) = self.find_command(text)?;
        let (_, path, cmd, ctx) = self.commands.iter().find(|(n, ..)| *n == name)?;
        let (handler, ctx2) = (cmd.handler.clone(), ctx.clone());
        if let Err(error) = guarded(move || handler(args, ctx2)).await {
            self.host
                .extension_error(ExtensionErrorInfo {
                    extension_path: path.clone(),
                    event: format!("command:{name}"),
                    error,
                })
                .await;
        }
        Some(name)
    }

    async fn report(&self, path: &str, event: &str, error: String) {
        tracing::warn!("extension {path} failed in {event}: {error}");
        self.host
            .extension_error(ExtensionErrorInfo {
                extension_path: path.to_string(),
                event: event.to_string(),
                error,
            })
            .await;
    }
}

#[async_trait]
impl AgentHooks for Extensions {
    async fn before_tool_call(&self, call: BeforeToolCall<'_>) -> Result<(), String> {
        for l in &self.loaded {
            for h in &l.tool_call {
                let ev = ToolCallEvent {
                    tool_call_id: call.call.id.clone(),
                    tool_name: call.call.name.clone(),
                    input: call.args.clone(),
                };
                let (h, ctx) = (h.clone(), l.ctx.clone());
                match guarded(move || h(ev, ctx)).await {
                    Ok(ToolCallAction::Continue) => {}
                    Ok(ToolCallAction::Rewrite(input)) => *call.args = input,
                    Ok(ToolCallAction::Block(reason)) => return Err(reason),
                    Err(error) => {
                        // Pi blocks a call whose tool_call handler failed.
                        let reason =
                            format!("Extension {} failed, blocking execution: {error}", l.path);
                        self.report(&l.path, "tool_call", error).await;
                        return Err(reason);
                    }
                }
            }
        }
        Ok(())
    }

    async fn after_tool_call(
        &self,
        call: AfterToolCall<'_>,
    ) -> Result<Option<AfterToolOverride>, String> {
        if self.loaded.iter().all(|l| l.tool_result.is_empty()) {
            // Nothing to run: do not copy the output.
            return Ok(None);
        }
        let mut ev = ToolResultEvent {
            tool_call_id: call.call.id.clone(),
            tool_name: call.call.name.clone(),
            input: call.args.clone(),
            content: call.output.content.clone(),
            details: call.output.details.clone(),
            is_error: call.is_error,
        };
        let mut out: Option<AfterToolOverride> = None;
        for l in &self.loaded {
            for h in &l.tool_result {
                let (h, ctx, e) = (h.clone(), l.ctx.clone(), ev.clone());
                match guarded(move || h(e, ctx)).await {
                    Ok(None) => {}
                    Ok(Some(patch)) => {
                        let o = out.get_or_insert_with(AfterToolOverride::default);
                        if let Some(c) = patch.content {
                            ev.content = c.clone();
                            o.content = Some(c);
                        }
                        if let Some(d) = patch.details {
                            ev.details = Some(d.clone());
                            o.details = Some(d);
                        }
                        if let Some(e) = patch.is_error {
                            ev.is_error = e;
                            o.is_error = Some(e);
                        }
                        if patch.terminate.is_some() {
                            o.terminate = patch.terminate;
                        }
                    }
                    // Pi reports it and keeps the result as it was.
                    Err(error) => self.report(&l.path, "tool_result", error).await,
                }
            }
        }
        Ok(out)
    }

    async fn prepare_next_turn(&self, next: &mut NextTurn) {
        for l in &self.loaded {
            for h in &l.context {
                next.change_messages(|messages| {
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(messages))) {
                        Ok(changed) => changed,
                        Err(p) => {
                            tracing::warn!("extension {} context {}", l.path, panic_text(p));
                            // It may have changed them before it panicked.
                            true
                        }
                    }
                });
            }
        }
    }
}

/// The `type` of an event as serialized (`turn_start`, …).
fn event_type(e: &AgentEvent) -> String {
    serde_json::to_value(e)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_string))
        .unwrap_or_default()
}

#[async_trait]
impl EventSink for Extensions {
    fn wants(&self, event: &AgentEvent) -> bool {
        !matches!(event, AgentEvent::ExtensionError { .. })
            && self
                .loaded
                .iter()
                .flat_map(|l| &l.events)
                .any(|(wanted, _)| wanted.is_none_or(|w| w(event)))
    }

    async fn emit(&self, event: AgentEvent) {
        if matches!(event, AgentEvent::ExtensionError { .. }) {
            return;
        }
        for l in &self.loaded {
            for (wanted, h) in &l.events {
                if wanted.is_some_and(|w| !w(&event)) {
                    continue;
                }
                let (h, ctx, e) = (h.clone(), l.ctx.clone(), event.clone());
                if let Err(error) = guarded(move || h(e, ctx)).await {
                    self.report(&l.path, &event_type(&event), error).await;
                }
            }
        }
    }
}

/// Hooks that run `first`, then `second` (a product's own hooks and its extensions').
pub struct ChainedHooks(pub Arc<dyn AgentHooks>, pub Arc<dyn AgentHooks>);

#[async_trait]
impl AgentHooks for ChainedHooks {
    async fn before_tool_call(&self, call: BeforeToolCall<'_>) -> Result<(), String> {
        self.0
            .before_tool_call(BeforeToolCall {
                assistant: call.assistant,
                call: call.call,
                args: &mut *call.args,
            })
            .await?;
        self.1.before_tool_call(call).await
    }

    async fn after_tool_call(
        &self,
        call: AfterToolCall<'_>,
    ) -> Result<Option<AfterToolOverride>, String> {
        let first = self
            .0
            .after_tool_call(AfterToolCall {
                assistant: call.assistant,
                call: call.call,
                args: call.args,
                output: call.output,
                is_error: call.is_error,
            })
            .await?;
        let Some(first) = first else {
            return self.1.after_tool_call(call).await;
        };
        let mut output = call.output.clone();
        if let Some(c) = &first.content {
            output.content = c.clone();
        }
        if first.details.is_some() {
            output.details = first.details.clone();
        }
        let is_error = first.is_error.unwrap_or(call.is_error);
        let second = self
            .1
            .after_tool_call(AfterToolCall {
                assistant: call.assistant,
                call: call.call,
                args: call.args,
                output: &output,
                is_error,
            })
            .await?;
        Ok(Some(match second {
            None => first,
            Some(s) => AfterToolOverride {
                content: s.content.or(first.content),
                details: s.details.or(first.details),
                is_error: s.is_error.or(first.is_error),
                terminate: s.terminate.or(first.terminate),
            },
        }))
    }

    async fn prepare_next_turn(&self, next: &mut NextTurn) {
        self.0.prepare_next_turn(next).await;
        self.1.prepare_next_turn(next).await;
    }
}

/// The built-in extensions of [`builtins`] without a `defaultTools` setting.
pub fn builtin(config: Option<&Value>) -> (Vec<Arc<dyn Extension>>, Vec<ExtensionErrorInfo>) {
    let b = builtins(config, None);
    (b.extensions, b.errors)
}

/// What [`builtins`] loads.
pub struct Builtins {
    /// In load order.
    pub extensions: Vec<Arc<dyn Extension>>,
    /// Unknown names and bad configurations (event `load`).
    pub errors: Vec<ExtensionErrorInfo>,
    /// The plan/todo board `todo` and `plan-mode` share, when either is on.
    pub plan: Option<Arc<plan::PlanBoard>>,
}

/// Whether a [`SETTINGS_KEY`] entry's value enables its extension (`false` and
/// `{"enabled": false}` do not).
fn enabled(cfg: &Value) -> bool {
    match cfg {
        Value::Bool(b) => *b,
        Value::Object(o) => o.get("enabled").and_then(Value::as_bool).unwrap_or(true),
        _ => true,
    }
}

/// The built-in extensions enabled by the settings value of [`SETTINGS_KEY`] (`config`) and
/// Pi's `defaultTools` (`default_tools`): those named in the object, in its order, then `todo`
/// and `plan-mode`, which are on unless the object turns them off (`false`) — `todo` is also
/// off when `defaultTools` lists `-todo` (Pi 1.6's way of removing a tool). Unknown names and
/// bad configurations are returned as errors (event `load`) and left out.
pub fn builtins(config: Option<&Value>, default_tools: Option<&Value>) -> Builtins {
    let mut out: Vec<Arc<dyn Extension>> = Vec::new();
    let mut errors = Vec::new();
    let empty = serde_json::Map::new();
    let map = match config {
        None => &empty,
        Some(Value::Object(map)) => map,
        Some(_) => {
            errors.push(ExtensionErrorInfo {
                extension_path: SETTINGS_KEY.into(),
                event: "load".into(),
                error: format!("{SETTINGS_KEY} must be an object of extension name to settings"),
            });
            &empty
        }
    };
    for (name, cfg) in map {
        if !enabled(cfg) || name == todo::NAME || name == plan_mode::NAME {
            continue;
        }
        let cfg = if cfg.is_object() {
            cfg.clone()
        } else {
            json!({})
        };
        match name.as_str() {
            tmux::NAME => match tmux::TmuxExtension::from_settings(&cfg) {
                Ok(t) => out.push(Arc::new(t)),
                Err(error) => errors.push(ExtensionErrorInfo {
                    extension_path: format!("<builtin:{name}>"),
                    event: "load".into(),
                    error,
                }),
            },
            _ => errors.push(ExtensionErrorInfo {
                extension_path: format!("<builtin:{name}>"),
                event: "load".into(),
                error: format!(
                    "no built-in extension named {name:?} (known: {}, {}, {})",
                    tmux::NAME,
                    todo::NAME,
                    plan_mode::NAME
                ),
            }),
        }
    }
    let on = |name: &str| map.get(name).is_none_or(enabled);
    let todo_removed = default_tools
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|t| t == "-todo"));
    let todo_on = on(todo::NAME) && !todo_removed;
    let plan_on = on(plan_mode::NAME);
    let plan = (todo_on || plan_on).then(plan::PlanBoard::new);
    if let Some(board) = &plan {
        if todo_on {
            out.push(Arc::new(todo::TodoExtension {
                board: board.clone(),
            }));
        }
        if plan_on {
            out.push(Arc::new(plan_mode::PlanModeExtension {
                board: board.clone(),
            }));
        }
    }
    Builtins {
        extensions: out,
        errors,
        plan,
    }
}

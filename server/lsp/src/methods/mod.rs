//! The `agent/*` methods: [`METHODS`], the one table of every client → server method with its
//! handler and how it runs, and the handlers, one file per resource: [`run`] (`agent/prompt`,
//! `agent/abort`, `agent/compact`), [`session`] (`agent/session/*`, `agent/messages`,
//! `agent/state`), [`model`] (`agent/model/*`, `agent/thinking/*`), [`queue`] (`agent/steer`,
//! `agent/followUp`, `agent/sendMessage`, `agent/queue/*`, `agent/retry/*`,
//! `agent/compaction/set`), [`bash`] (`agent/bash`, `agent/bash/abort`), [`commands`]
//! (`agent/commands`, `agent/session/forkMessages`, `agent/lastAssistantText`,
//! `agent/extension/commands`), [`history`] (`agent/session/history`), [`rewind`]
//! (`agent/session/changes`, `agent/session/rewind`), [`mcp`] (`agent/mcp/*`), [`plan`]
//! (`agent/plan/*`), [`permissions`] (`agent/permissions/set`), [`tools`] (`agent/tools/*`),
//! [`resume`] (`agent/continue`); and the helpers they share.
//!
//! # The handler shape (how to add a method)
//!
//! A handler is a free function of the request's context and its typed params:
//!
//! ```ignore
//! pub(crate) async fn name(cx: Ctx, p: NameParams) -> Result<NameResult>
//! ```
//!
//! - `cx: Ctx` ([`crate::ctx::Ctx`]) is what it may read and do: `cx.session(id)`,
//!   `cx.open_session(id)`, `cx.create_session(..)`, `cx.sessions()`, `cx.workspace()`,
//!   `cx.caps()`, `cx.docs()`, `cx.client` (notifications; server → client requests only
//!   through [`crate::client::request`]), and for a spawned handler `cx.cancellation()`.
//! - `NameParams: Deserialize` and `NameResult: Serialize` are the wire types (in
//!   [`crate::protocol`] or next to the handler); a method without params takes
//!   [`crate::protocol::SessionListParams`] (`{}`). The table parses the params with
//!   [`crate::protocol::parse_params`]: a malformed one is answered -32602 naming the field
//!   (`"sessionId: invalid type …"`) and the handler is not called.
//! - Errors: [`invalid`] (InvalidParams naming a field), [`core_error`] (a
//!   [`HarnessError`] → one of [`crate::protocol::codes`]).
//! - Put the handler in a new file under `methods/` (logic in `pi-core`), declare the module
//!   below, and add ONE line to the table: `"agent/x/y" => inline file::handler,` (in the
//!   group of its resource). `inline` runs it on the connection's task (its future is dropped
//!   if the client cancels it); `spawned` runs it in a task of its own with a
//!   [`CancellationToken`] that `$/cancelRequest` fires (the client gets -32800
//!   RequestCancelled) — for work that takes long (a shell command, a model call).
//!
//! Each handler is parse → [`pi_core::harness::AgentSession`] call → wire result: the session
//! does the work and checks what it refers to, and its [`HarnessError`] becomes one of
//! [`crate::protocol::codes`] ([`core_error`]).

pub(crate) mod bash;
pub(crate) mod commands;
pub(crate) mod history;
pub(crate) mod mcp;
pub(crate) mod model;
pub(crate) mod permissions;
pub(crate) mod plan;
pub(crate) mod queue;
pub(crate) mod resume;
pub(crate) mod rewind;
pub(crate) mod run;
pub(crate) mod session;
pub(crate) mod tools;

use std::future::Future;
use std::sync::Arc;

use pi_ai::types::ImageContent;
use pi_ai::Model;
use pi_core::harness::Error as HarnessError;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower_lsp_server::jsonrpc::{Error, Result};
use tower_lsp_server::{LanguageServer, LspServiceBuilder};

pub(crate) use pi_core::harness::entry_text;

use crate::ctx::{Ctx, Served};
use crate::protocol::{agent_error, codes, parse_params, ImageInput, ModelInfo};
use crate::state::State;

/// How the table runs a handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    /// On the connection's task; a cancelled request drops its future.
    Inline,
    /// In a task of its own, with a [`CancellationToken`] that a cancelled request fires.
    Spawned,
}

/// The one method table (see the module doc): makes both [`METHODS`], the list `initialize`
/// advertises in `experimental.agent.methods`, and the registrations ([`register`]), so the
/// two cannot disagree (the test `every_advertised_method_is_registered` checks the running
/// service against the list).
macro_rules! method_table {
    ($($name:literal => $how:ident $handler:path,)*) => {
        /// Every client → server `agent/*` method, as advertised in `initialize`'s
        /// `experimental.agent.methods`.
        pub const METHODS: &[&str] = &[$($name),*];

        /// Registers every method of the table on the service being built.
        pub(crate) fn register<S: Served + LanguageServer>(
            builder: LspServiceBuilder<S>,
        ) -> LspServiceBuilder<S> {
            builder$(.custom_method($name, |s: &S, params: Value| {
                call(method_table!(@run $how), s.state().clone(), params, $handler)
            }))*
        }
    };
    (@run inline) => { Run::Inline };
    (@run spawned) => { Run::Spawned };
}

method_table! {
    // runs: agent/prompt, agent/abort, agent/compact
    "agent/prompt" => inline run::agent_prompt,
    "agent/abort" => inline run::agent_abort,
    "agent/compact" => spawned run::agent_compact,
    // queue: steering, follow-ups, custom messages, queue modes, retry
    "agent/steer" => inline queue::agent_steer,
    "agent/followUp" => inline queue::agent_follow_up,
    "agent/sendMessage" => inline queue::agent_send_message,
    "agent/queue/setModes" => inline queue::queue_set_modes,
    "agent/queue/clear" => inline queue::queue_clear,
    "agent/queue/remove" => inline queue::queue_remove,
    "agent/queue/edit" => inline queue::queue_edit,
    "agent/retry/set" => inline queue::retry_set,
    "agent/retry/abort" => inline queue::retry_abort,
    "agent/continue" => inline resume::agent_continue,
    "agent/compaction/set" => inline queue::compaction_set,
    // sessions
    "agent/messages" => inline session::agent_messages,
    "agent/state" => inline session::agent_state,
    "agent/session/new" => inline session::session_new,
    "agent/session/list" => inline session::session_list,
    "agent/session/open" => inline session::session_open,
    "agent/session/close" => inline session::session_close,
    "agent/session/fork" => inline session::session_fork,
    "agent/session/clone" => inline session::session_clone,
    "agent/session/tree" => inline session::session_tree,
    "agent/session/branch" => spawned session::session_branch,
    "agent/session/label" => inline session::session_label,
    "agent/session/name" => inline session::session_name,
    "agent/session/stats" => inline session::session_stats,
    "agent/session/export" => inline session::session_export,
    "agent/session/history" => inline history::session_history,
    "agent/session/changes" => inline rewind::session_changes,
    "agent/session/rewind" => inline rewind::session_rewind,
    "agent/session/forkMessages" => inline commands::fork_messages,
    // models and thinking levels
    "agent/model/list" => inline model::model_list,
    "agent/model/set" => inline model::model_set,
    "agent/model/cycle" => inline model::model_cycle,
    "agent/thinking/set" => inline model::thinking_set,
    "agent/thinking/cycle" => inline model::thinking_cycle,
    // the user's shell commands
    "agent/bash" => spawned bash::agent_bash,
    "agent/bash/abort" => inline bash::bash_abort,
    // commands, extensions, approvals, editor tools
    "agent/commands" => inline commands::commands,
    "agent/lastAssistantText" => inline commands::last_assistant_text,
    "agent/extension/commands" => inline commands::extension_commands,
    "agent/permissions/set" => inline permissions::permissions_set,
    "agent/tools/register" => inline tools::tools_register,
    "agent/tools/unregister" => inline tools::tools_unregister,
    // MCP servers
    "agent/mcp/list" => inline mcp::mcp_list,
    "agent/mcp/enable" => inline mcp::mcp_enable,
    "agent/mcp/disable" => inline mcp::mcp_disable,
    "agent/mcp/setExposure" => inline mcp::mcp_set_exposure,
    "agent/mcp/reconnect" => spawned mcp::mcp_reconnect,
    // plan and todos
    "agent/plan/get" => inline plan::plan_get,
    "agent/plan/set" => inline plan::plan_set,
}

/// Runs one request: params parsed (-32602 naming the field, the handler not called), then
/// the handler as `how` says. A spawned handler's task ends when the request is cancelled: the
/// library drops this future (and answers -32800), which fires the token.
async fn call<P, R, F, Fut>(how: Run, state: Arc<State>, params: Value, handler: F) -> Result<R>
where
    P: DeserializeOwned + Send + 'static,
    R: Send + 'static,
    F: FnOnce(Ctx, P) -> Fut + Send + 'static,
    Fut: Future<Output = Result<R>> + Send + 'static,
{
    let p: P = parse_params(params)?;
    match how {
        Run::Inline => handler(Ctx::new(state, None), p).await,
        Run::Spawned => {
            let token = CancellationToken::new();
            let _cancel_when_dropped = token.clone().drop_guard();
            let cx = Ctx::new(state, Some(token.clone()));
            let task = tokio::spawn(async move {
                tokio::select! {
                    biased;
                    _ = token.cancelled() => Err(Error::request_cancelled()),
                    r = handler(cx, p) => r,
                }
            });
            task.await.unwrap_or_else(|e| {
                tracing::error!("a handler's task failed: {e}");
                Err(Error::internal_error())
            })
        }
    }
}

pub(crate) use crate::protocol::invalid;

/// The JSON-RPC error of a session operation's error.
pub(crate) fn core_error(e: HarnessError) -> Error {
    let code = match &e {
        HarnessError::Invalid { field, message } => return invalid(field, message),
        HarnessError::Busy(_) => codes::SESSION_BUSY,
        HarnessError::UnknownEntry(_) => codes::UNKNOWN_ENTRY,
        HarnessError::Model(_) => codes::MODEL_UNAVAILABLE,
        HarnessError::Session(_) => codes::SESSION_IO,
        HarnessError::Summary(_) => codes::SUMMARY_FAILED,
        HarnessError::Compaction(_) => codes::COMPACTION_FAILED,
        HarnessError::BashRunning(_) => codes::BASH_RUNNING,
    };
    agent_error(code, e.to_string())
}

/// The images a client sent, checked (`image/*` MIME type, base64 data; errors name
/// `<field>[i].mimeType` / `.data`).
pub(crate) fn images(images: Option<&[ImageInput]>, field: &str) -> Result<Vec<ImageContent>> {
    let images = images.unwrap_or_default();
    let mut out = Vec::with_capacity(images.len());
    for (i, img) in images.iter().enumerate() {
        pi_core::harness::check_image(&img.mime_type, &img.data, &format!("{field}[{i}]"))
            .map_err(core_error)?;
        out.push(ImageContent {
            data: img.data.as_str().into(),
            mime_type: img.mime_type.clone(),
        });
    }
    Ok(out)
}

/// How clients see `m`.
pub(crate) fn model_info(m: &Model) -> ModelInfo {
    ModelInfo {
        provider: m.provider.clone(),
        id: m.id.clone(),
        name: m.name.clone(),
        api: m.api,
        base_url: m.base_url.clone(),
        reasoning: m.reasoning,
        input: m.input.clone(),
        context_window: m.context_window,
        max_tokens: m.max_tokens,
        cost: m.cost.clone(),
        thinking_levels: m.supported_thinking_levels(),
    }
}

/// Every entry of the session file as written so far, and the leaf
/// ([`pi_core::harness::AgentSession::tree`]).
pub(crate) fn tree(
    s: &pi_core::harness::AgentSession,
) -> Result<(
    std::sync::Arc<pi_core::session::SessionTree>,
    Option<String>,
)> {
    s.tree()
        .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))
}

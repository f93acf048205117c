//! Handlers of the `agent/*` methods, one file per resource: [`run`] (`agent/prompt`,
//! `agent/abort`, `agent/compact`), [`session`] (`agent/session/*`, `agent/messages`,
//! `agent/state`), [`model`] (`agent/model/*`, `agent/thinking/*`), [`queue`] (`agent/steer`,
//! `agent/followUp`, `agent/sendMessage`, `agent/queue/*`, `agent/retry/*`,
//! `agent/compaction/set`), [`bash`] (`agent/bash`, `agent/bash/abort`), [`commands`]
//! (`agent/commands`, `agent/session/forkMessages`, `agent/lastAssistantText`), [`history`]
//! (`agent/session/history`), [`rewind`] (`agent/session/changes`, `agent/session/rewind`),
//! [`resume`] (`agent/continue`); and the helpers they share. `agent/tools/*` live with the editor tools in
//! [`crate::editor_tools`].
//!
//! Each handler is parse → [`pi_core::harness::AgentSession`] call → wire result: params are
//! validated with [`crate::protocol::parse_params`] (InvalidParams names the field), the
//! session does the work and checks what it refers to, and its [`HarnessError`] becomes one
//! of [`crate::protocol::codes`] ([`core_error`]).

pub(crate) mod bash;
pub(crate) mod commands;
pub(crate) mod history;
pub(crate) mod mcp;
pub(crate) mod model;
pub(crate) mod plan;
pub(crate) mod queue;
pub(crate) mod resume;
pub(crate) mod rewind;
pub(crate) mod run;
pub(crate) mod session;

use pi_ai::types::ImageContent;
use pi_ai::Model;
use pi_core::harness::Error as HarnessError;
use tower_lsp_server::jsonrpc::{Error, Result};

pub(crate) use pi_core::harness::entry_text;

use crate::protocol::{agent_error, codes, ImageInput, ModelInfo};

/// An InvalidParams error naming `field`.
pub(crate) fn invalid(field: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid_params(format!("{field}: {why}"))
}

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
            data: img.data.clone(),
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

//! Handlers of the `agent/*` methods other than `agent/prompt` and `agent/abort` (which live
//! in [`crate::server`]), one file per resource: [`session`] (`agent/session/*`,
//! `agent/messages`, `agent/state`), [`model`] (`agent/model/*`, `agent/thinking/*`),
//! [`queue`] (`agent/steer`, `agent/followUp`, `agent/sendMessage`, `agent/queue/*`,
//! `agent/retry/*`), [`bash`] (`agent/bash`, `agent/bash/abort`), [`commands`] (`agent/commands`,
//! `agent/session/forkMessages`, `agent/lastAssistantText`), [`history`] (`agent/session/history`), [`queue_edit`]
//! (`agent/queue/remove`, `agent/queue/edit`), [`rewind`] (`agent/session/changes`,
//! `agent/session/rewind`);
//! and the helpers they share.
//! `agent/tools/*` live with the editor tools in [`crate::editor_tools`].
//!
//! Every handler validates its params with [`crate::protocol::parse_params`] (InvalidParams
//! names the field), checks what it refers to (session, entry, model) before changing
//! anything, and answers with one of [`crate::protocol::codes`] otherwise.

pub(crate) mod bash;
pub(crate) mod commands;
pub(crate) mod history;
pub(crate) mod model;
pub(crate) mod queue;
pub(crate) mod queue_edit;
pub(crate) mod rewind;
pub(crate) mod session;

use std::sync::{Arc, Mutex};

use pi_ai::{ContentBlock, Message, Model, UserContent, UserMessage};
use pi_core::session::SessionTree;
use tower_lsp_server::jsonrpc::{Error, Result};

use crate::protocol::{agent_error, codes, ImageInput, ModelInfo, UsageTotals};
use crate::server::{lock, Session};

/// An InvalidParams error naming `field`.
pub(crate) fn invalid(field: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid_params(format!("{field}: {why}"))
}

/// A user message of `text` and `images` (validated: `image/*` MIME type, base64 data).
pub(crate) fn user_message(
    text: &str,
    images: Option<&[ImageInput]>,
    field: &str,
) -> Result<Message> {
    let images = images.unwrap_or_default();
    if images.is_empty() {
        return Ok(Message::user_text(text));
    }
    let mut blocks = vec![ContentBlock::text(text)];
    for (i, img) in images.iter().enumerate() {
        check_image(&img.mime_type, &img.data, &format!("{field}[{i}]"))?;
        blocks.push(ContentBlock::Image(pi_ai::types::ImageContent {
            data: img.data.clone(),
            mime_type: img.mime_type.clone(),
        }));
    }
    Ok(Message::User(UserMessage {
        content: UserContent::Blocks(blocks),
        timestamp: pi_ai::types::now_millis(),
    }))
}

/// Checks one image given by the client: an `image/*` MIME type and base64 data (no
/// `data:` prefix). Errors name `<field>.mimeType` / `<field>.data`.
pub(crate) fn check_image(mime_type: &str, data: &str, field: &str) -> Result<()> {
    if !mime_type.starts_with("image/") {
        return Err(invalid(
            &format!("{field}.mimeType"),
            format!("expected an image/* type, got {mime_type:?}"),
        ));
    }
    let base64 = data
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'\n' | b'\r'));
    if data.is_empty() || !base64 {
        return Err(invalid(
            &format!("{field}.data"),
            "expected base64 data without a data: prefix",
        ));
    }
    Ok(())
}

/// How clients see `m`.
pub(crate) fn model_info(m: &Model) -> ModelInfo {
    ModelInfo {
        provider: m.provider.clone(),
        id: m.id.clone(),
        name: m.name.clone(),
        api: m.api.clone(),
        base_url: m.base_url.clone(),
        reasoning: m.reasoning,
        input: m.input.clone(),
        context_window: m.context_window,
        max_tokens: m.max_tokens,
        cost: m.cost.clone(),
        thinking_levels: m.supported_thinking_levels(),
    }
}

/// Makes `model` the session's model ([`pi_core::harness::AgentSession::set_model`]).
pub(crate) fn set_model(session: &Arc<Mutex<Session>>, model: Model) -> Result<()> {
    lock(session)
        .set_model(model)
        .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))
}

/// Usage of every assistant message in the file (all branches).
pub(crate) fn file_usage(tree: &SessionTree) -> UsageTotals {
    let mut t = UsageTotals::default();
    for e in &tree.entries {
        if let Some(u) = e.assistant().and_then(|a| a.usage.as_ref()) {
            crate::tracker::add_usage(&mut t, u);
        }
    }
    t
}

/// Every entry of the session file as written so far: the writer's own tree (it holds the
/// file's lock, so nothing else appends), not a new read and parse of the file.
pub(crate) fn session_tree(s: &Session) -> Result<std::sync::Arc<SessionTree>> {
    Ok(lock(s.writer()).tree_snapshot())
}

/// The text of a stored message or entry (`content` string or text blocks; summaries;
/// shell commands).
pub(crate) fn entry_text(raw: &serde_json::Value) -> Option<String> {
    let m = if raw["type"] == "message" {
        &raw["message"]
    } else {
        raw
    };
    if let Some(c) = m["command"].as_str() {
        return Some(format!("!{c}"));
    }
    if let Some(s) = m["summary"].as_str() {
        return Some(s.to_string());
    }
    match &m["content"] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(blocks) => {
            let text: Vec<&str> = blocks
                .iter()
                .filter_map(|b| match b["type"].as_str() {
                    Some("text") => b["text"].as_str(),
                    Some("thinking") => None,
                    Some("toolCall") => b["name"].as_str(),
                    _ => None,
                })
                .collect();
            (!text.is_empty()).then(|| text.join("\n"))
        }
        _ => None,
    }
}

//! `agent/session/history`: the active branch's entries for display, a page at a time
//! ([`pi_core::session::SessionTree::history`]), so that a client shows a 10,000-message
//! session without one huge frame. `agent/messages` is the model's context instead.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;

use super::invalid;
use crate::ctx::Ctx;
use crate::protocol::{agent_error, codes};

/// `agent/session/history` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HistoryParams {
    pub session_id: String,
    /// The page ends just before this entry (an entry of the active branch); left out, it
    /// ends at the leaf (included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_entry_id: Option<String>,
    /// Entries per page: 1 or more (default
    /// [`HISTORY_DEFAULT_LIMIT`](pi_core::session::HISTORY_DEFAULT_LIMIT)); more than
    /// [`HISTORY_MAX_LIMIT`](pi_core::session::HISTORY_MAX_LIMIT) reads as the maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// `agent/session/history` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct HistoryResult {
    pub session_id: String,
    /// The active branch's leaf (`null` before the first entry).
    pub leaf_id: Option<String>,
    /// The page, oldest first: entries exactly as stored in the session file (Pi v3:
    /// `{type, id, parentId, timestamp, …}`), every type in place.
    #[cfg_attr(test, ts(type = "Array<unknown>"))]
    pub entries: Vec<Value>,
    /// Older entries exist before `entries[0]`: ask again with its id as `beforeEntryId`.
    pub has_more: bool,
}

/// `agent/session/history {sessionId, beforeEntryId?, limit?}` → [`HistoryResult`];
/// `beforeEntryId` off the active branch is UNKNOWN_ENTRY, `limit: 0` InvalidParams.
pub(crate) async fn session_history(cx: Ctx, p: HistoryParams) -> Result<HistoryResult> {
    let limit = match p.limit {
        Some(0) => return Err(invalid("limit", "must be at least 1")),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => pi_core::session::HISTORY_DEFAULT_LIMIT,
    };
    let session = cx.session(&p.session_id).await?;
    let (tree, leaf) = super::tree(&session)?;
    let page = tree
        .history(leaf.as_deref(), p.before_entry_id.as_deref(), limit)
        .map_err(|e| agent_error(codes::UNKNOWN_ENTRY, e.to_string()))?;
    Ok(HistoryResult {
        session_id: p.session_id,
        leaf_id: leaf,
        entries: page.entries,
        has_more: page.has_more,
    })
}

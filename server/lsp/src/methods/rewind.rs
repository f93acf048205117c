//! `agent/session/changes` and `agent/session/rewind`: the agent's file changes on a
//! session's active branch, and moving the branch back (or forward again) with the files
//! ([`pi_core::harness::rewind`], where the logic lives; this is the wire).
//!
//! A rewind's files go through the session's [`crate::editor_fs::EditorFs`]: each file is one
//! `workspace/applyEdit` labelled `Pi: rewind <file>` (or `Pi: reapply <file>`), annotated
//! with that label when the client supports change annotations, so the editor undoes it in
//! one step. Files the agent created are deleted only for a client that applies `DeleteFile`
//! (`workspace.workspaceEdit.resourceOperations` with `delete`, and `documentChanges`).

use pi_core::harness::rewind::{changes_at, Change, RewindError, RewindOptions, RewindOutcome};
use serde::{Deserialize, Serialize};
use tower_lsp_server::jsonrpc::Result;

use crate::ctx::Ctx;
use crate::protocol::{agent_error, codes, SessionParams};

/// `agent/session/changes` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ChangesResult {
    /// The agent's changes on the active branch, oldest first
    /// ([`pi_core::harness::rewind::Change`]).
    pub changes: Vec<Change>,
}

/// `agent/session/rewind` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RewindParams {
    pub session_id: String,
    /// An entry of the active branch (the leaf goes before it), or of another branch such as
    /// an earlier answer's `previousLeafId` (the leaf goes to it).
    pub entry_id: String,
}

/// `agent/session/rewind` result ([`RewindOutcome`]).
pub type RewindResult = RewindOutcome;

/// `agent/session/changes {sessionId}` → [`ChangesResult`].
pub(crate) async fn session_changes(cx: Ctx, p: SessionParams) -> Result<ChangesResult> {
    let session = cx.session(&p.session_id).await?;
    let (tree, leaf) = super::tree(&session)?;
    let root = cx.root();
    // The results' lines are read back from the file: off the reactor.
    let changes = tokio::task::spawn_blocking(move || changes_at(&tree, leaf.as_deref(), &root))
        .await
        .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
    Ok(ChangesResult { changes })
}

/// `agent/session/rewind {sessionId, entryId}` → [`RewindResult`]. A run, compaction or
/// rewind in progress is SESSION_BUSY, an unknown entry UNKNOWN_ENTRY; nothing changes
/// then.
pub(crate) async fn session_rewind(cx: Ctx, p: RewindParams) -> Result<RewindResult> {
    let session = cx.session(&p.session_id).await?;
    // A client that saw `agent_end` may rewind at once: the run's last bookkeeping first.
    session.settle().await;
    let caps = cx.caps();
    let options = RewindOptions {
        delete_created: caps.document_changes && caps.delete_file,
    };
    let mut rewind = session
        .begin_rewind(&p.entry_id, options)
        .map_err(rewind_error)?;
    rewind.apply_files().await;
    let outcome = session.finish_rewind(rewind);
    outcome.map_err(rewind_error)
}

fn rewind_error(e: RewindError) -> tower_lsp_server::jsonrpc::Error {
    match e {
        RewindError::Busy(m) => agent_error(codes::SESSION_BUSY, m),
        RewindError::UnknownEntry(id) => agent_error(
            codes::UNKNOWN_ENTRY,
            format!("entryId: no entry {id} in the session"),
        ),
        RewindError::Session(e) => agent_error(codes::SESSION_IO, e.to_string()),
    }
}

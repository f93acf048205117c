//! `agent/bash` and `agent/bash/abort`: a shell command the user runs in the workspace (Pi's
//! `!cmd` / `!!cmd`, RPC `bash` / `abort_bash`; [`pi_core::harness::AgentSession::bash`]).

use tower_lsp_server::jsonrpc::Result;

use super::core_error;
use crate::ctx::Ctx;
use crate::protocol::{BashAbortResult, BashParams, BashResult, SessionParams};

/// `agent/bash {sessionId, command, excludeFromContext?}` → Pi's `BashResult`, when the
/// command has ended. A cancelled request (`$/cancelRequest` drops this future) kills it.
pub(crate) async fn agent_bash(cx: Ctx, p: BashParams) -> Result<BashResult> {
    if p.command.trim().is_empty() {
        return Err(super::invalid("command", "must not be empty"));
    }
    let session = cx.session(&p.session_id).await?;
    session
        .bash(&p.command, p.exclude_from_context)
        .await
        .map_err(core_error)
}

/// `agent/bash/abort {sessionId}` → `{aborted}`: kills the running `agent/bash` command's
/// process group.
pub(crate) async fn bash_abort(cx: Ctx, p: SessionParams) -> Result<BashAbortResult> {
    let aborted = cx.session(&p.session_id).await?.abort_bash();
    Ok(BashAbortResult { aborted })
}

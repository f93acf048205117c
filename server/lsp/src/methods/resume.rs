//! `agent/continue {sessionId}` → `{sessionId, runId}`: *Retry* after a failed run and
//! *Continue* after an interrupted one, without a new user message
//! ([`pi_core::harness::AgentSession::continue_run`], docs/protocol.md `agent/continue`).

use serde::{Deserialize, Serialize};
use tower_lsp_server::jsonrpc::Result;

use super::core_error;
use crate::ctx::Ctx;
use crate::protocol::SessionParams;

/// `agent/continue` result: the session and the id of the run that started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ContinueResult {
    pub session_id: String,
    pub run_id: String,
}

/// `agent/continue {sessionId}`: a run from the session as it stands (a session file not
/// open yet is opened first, so *Continue* works after a reload).
pub(crate) async fn agent_continue(cx: Ctx, p: SessionParams) -> Result<ContinueResult> {
    let session = cx.session(&p.session_id).await?;
    let run_id = session.continue_run().await.map_err(core_error)?;
    Ok(ContinueResult {
        session_id: session.id().to_string(),
        run_id,
    })
}

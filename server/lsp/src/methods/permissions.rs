//! `agent/permissions/set`: a session's own approval policy ([`crate::permissions`] asks the
//! editor).

use tower_lsp_server::jsonrpc::Result;

use crate::ctx::Ctx;
use crate::protocol::{PermissionsSetParams, PermissionsSetResult};

/// `agent/permissions/set {sessionId, approvalPolicy}`: the session's own policy (`null`:
/// back to the default from `initializationOptions` / settings); applies from the next
/// tool call, also within a running turn.
pub(crate) async fn permissions_set(
    cx: Ctx,
    p: PermissionsSetParams,
) -> Result<PermissionsSetResult> {
    let s = cx.session(&p.session_id).await?;
    let (approval_policy, session_rules) = s.set_approval_policy(p.approval_policy);
    Ok(PermissionsSetResult {
        approval_policy,
        session_rules,
    })
}

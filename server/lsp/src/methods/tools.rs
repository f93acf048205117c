//! `agent/tools/register` and `agent/tools/unregister`: the editor declares (and withdraws)
//! tools the agent may call ([`crate::editor_tools`] runs them).

use tower_lsp_server::jsonrpc::Result;

use crate::ctx::Ctx;
use crate::editor_tools::{check_decls, ToolsRegisterParams, ToolsResult, ToolsUnregisterParams};

/// `agent/tools/register {sessionId?, tools}` → `{tools}` (the scope's names afterwards).
/// The whole list is checked first ([`check_decls`]); nothing is registered when any
/// declaration is bad.
pub(crate) async fn tools_register(cx: Ctx, p: ToolsRegisterParams) -> Result<ToolsResult> {
    check_decls(&p.tools, "tools")?;
    if let Some(id) = &p.session_id {
        cx.session(id).await?;
    }
    Ok(ToolsResult {
        tools: cx.editor_tools.register(p.session_id.as_deref(), p.tools),
    })
}

/// `agent/tools/unregister {sessionId?, names}` → `{tools}` (the scope's names afterwards).
pub(crate) async fn tools_unregister(cx: Ctx, p: ToolsUnregisterParams) -> Result<ToolsResult> {
    if let Some(id) = &p.session_id {
        cx.session(id).await?;
    }
    Ok(ToolsResult {
        tools: cx
            .editor_tools
            .unregister(p.session_id.as_deref(), &p.names),
    })
}

//! `agent/mcp/*`: the workspace's MCP servers (docs/protocol.md "MCP servers"). The logic is
//! `pi_core::mcp`'s; these handlers parse, call and answer.
//!
//! - `agent/mcp/list {}` → `{servers: [{name, state, error?, transport, exposure, enabled,
//!   scope, source?, toolCount, tools: [{name, modelName, exposure}]}], errors: [..]}`
//! - `agent/mcp/enable|disable {server}` and `agent/mcp/setExposure {server, exposure}`: saved
//!   to the file that defines the server (a project override when there is one), then the
//!   configuration is read again for every session of the workspace; → the list.
//! - `agent/mcp/reconnect {server}`: closes and connects again now; → the list (a failure is in
//!   the server's `error`).

use serde::Deserialize;
use serde_json::{json, Value};
use tower_lsp_server::jsonrpc::Result;

use super::invalid;
use crate::ctx::Ctx;
use pi_core::mcp::config::{Exposure, Patch};

/// Params of `agent/mcp/enable`, `disable`, `reconnect` (`{server}`) and `setExposure`
/// (`{server, exposure}`: `"eager"` or `"deferred"`).
#[derive(Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[cfg_attr(test, ts(rename = "McpServerParams"))]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServerParams {
    server: String,
    #[serde(default)]
    #[cfg_attr(test, ts(optional))]
    exposure: Option<String>,
}

/// `initializationOptions.vscodeMcpServers` (boolean or `null`) and `.vscodeMcpUserConfig`
/// (a path string or `null`) for [`pi_core::mcp::vscode::set_options`], and the reporter that
/// tells MCP failures to the editor once each as `window/showMessage` (Warning). A value of
/// the wrong type fails `initialize` with InvalidParams naming it.
pub(crate) fn init(options: Option<&Value>, client: &tower_lsp_server::Client) -> Result<()> {
    let get = |k: &str| options.and_then(|o| o.get(k)).filter(|v| !v.is_null());
    let enabled = match get("vscodeMcpServers") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            return Err(tower_lsp_server::jsonrpc::Error::invalid_params(format!(
                "initializationOptions.vscodeMcpServers: expected a boolean, got {v}"
            )))
        }
    };
    let user_config = match get("vscodeMcpUserConfig") {
        None => None,
        Some(Value::String(s)) => Some(std::path::PathBuf::from(s)),
        Some(v) => {
            return Err(tower_lsp_server::jsonrpc::Error::invalid_params(format!(
                "initializationOptions.vscodeMcpUserConfig: expected a path string, got {v}"
            )))
        }
    };
    pi_core::mcp::vscode::set_options(pi_core::mcp::vscode::VscodeOptions {
        enabled,
        user_config,
    });
    let client = client.clone();
    pi_core::mcp::set_reporter(std::sync::Arc::new(move |text: String| {
        let client = client.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                client
                    .show_message(tower_lsp_server::ls_types::MessageType::WARNING, text)
                    .await
            });
        }
    }));
    Ok(())
}

fn mcp_manager(cx: &Ctx) -> Result<std::sync::Arc<pi_core::mcp::McpManager>> {
    pi_core::mcp::workspace_manager(&cx.workspace()).ok_or_else(|| {
        invalid(
            "server",
            "MCP is disabled here (--no-mcp or \"-builtin:mcp\")",
        )
    })
}

fn mcp_answer(m: &pi_core::mcp::McpManager) -> Value {
    json!({"servers": m.list(), "errors": m.config_errors()})
}

/// `agent/mcp/list`.
pub(crate) async fn mcp_list(cx: Ctx, _: crate::protocol::SessionListParams) -> Result<Value> {
    let m = mcp_manager(&cx)?;
    Ok(mcp_answer(&m))
}

async fn mcp_patch(cx: &Ctx, p: ServerParams, patch: Option<Patch>) -> Result<Value> {
    let m = mcp_manager(cx)?;
    if m.server(&p.server).is_none() {
        return Err(invalid("server", format!("no MCP server \"{}\"", p.server)));
    }
    let patch = match patch {
        Some(p) => p,
        None => {
            let e = p
                .exposure
                .as_deref()
                .and_then(Exposure::parse)
                .ok_or_else(|| {
                    invalid(
                        "exposure",
                        "one of \"codemode\", \"deferred\", \"direct\", \"hidden\"",
                    )
                })?;
            Patch {
                enabled: None,
                exposure: Some(e),
            }
        }
    };
    m.update(&p.server, patch)
        .await
        .map_err(|e| invalid("server", e))?;
    Ok(mcp_answer(&m))
}

/// `agent/mcp/enable`.
pub(crate) async fn mcp_enable(cx: Ctx, p: ServerParams) -> Result<Value> {
    mcp_patch(
        &cx,
        p,
        Some(Patch {
            enabled: Some(true),
            exposure: None,
        }),
    )
    .await
}

/// `agent/mcp/disable`.
pub(crate) async fn mcp_disable(cx: Ctx, p: ServerParams) -> Result<Value> {
    mcp_patch(
        &cx,
        p,
        Some(Patch {
            enabled: Some(false),
            exposure: None,
        }),
    )
    .await
}

/// `agent/mcp/setExposure`.
pub(crate) async fn mcp_set_exposure(cx: Ctx, p: ServerParams) -> Result<Value> {
    mcp_patch(&cx, p, None).await
}

/// `agent/mcp/reconnect`.
pub(crate) async fn mcp_reconnect(cx: Ctx, p: ServerParams) -> Result<Value> {
    let m = mcp_manager(&cx)?;
    if m.server(&p.server).is_none() {
        return Err(invalid("server", format!("no MCP server \"{}\"", p.server)));
    }
    let _ = m.reconnect(&p.server).await;
    Ok(mcp_answer(&m))
}

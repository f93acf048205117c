//! Asking the editor's user for permission (`pi_core::sandbox::Approver` over LSP).
//!
//! Clients that advertise `experimental.agent.requestPermission: true` get the server → client
//! request `agent/requestPermission` ([`RequestPermission`]): params `{sessionId, tool,
//! toolCallId, arguments, reason}`, result `{decision: "allow" | "reject", reason?}`. Other
//! clients get the standard `window/showMessageRequest` (type warning) with the actions
//! `Allow` and `Reject`; dismissing it rejects. A failed request (client gone, error answer,
//! unknown decision) rejects, with the failure as the reason. Documented in
//! docs/protocol.md ("Permission requests").

use async_trait::async_trait;
use pi_core::sandbox::{Approver, Decision, PermissionRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_lsp_server::ls_types::request::{Request, ShowMessageRequest};
use tower_lsp_server::ls_types::{MessageActionItem, MessageType, ShowMessageRequestParams};
use tower_lsp_server::Client;

/// Params of `agent/requestPermission`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermissionParams {
    /// The session whose run asks.
    pub session_id: String,
    /// The tool asking, e.g. `bash`.
    pub tool: String,
    /// The model's tool call id.
    pub tool_call_id: String,
    /// The tool's arguments (for `bash`: `{command, timeout?}`).
    pub arguments: Value,
    /// Why permission is needed, e.g. `sandbox denied: touch: cannot touch '../x':
    /// Permission denied`.
    pub reason: String,
}

/// The client's answer to `agent/requestPermission`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermissionResult {
    /// `"allow"` or `"reject"`.
    pub decision: String,
    /// Why (shown to the model on reject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The `agent/requestPermission` request (server → client).
#[derive(Debug)]
pub enum RequestPermission {}

impl Request for RequestPermission {
    type Params = RequestPermissionParams;
    type Result = RequestPermissionResult;
    const METHOD: &'static str = "agent/requestPermission";
}

/// True when the client's `initialize` capabilities say `experimental.agent.requestPermission`.
pub fn client_supports(experimental: Option<&Value>) -> bool {
    experimental
        .and_then(|e| e.pointer("/agent/requestPermission"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Title of the allowing action of the `window/showMessageRequest` fallback.
pub const ALLOW_ACTION: &str = "Allow";
/// Title of the rejecting action of the fallback.
pub const REJECT_ACTION: &str = "Reject";

/// Asks the editor of one session.
pub struct LspApprover {
    client: Client,
    session_id: String,
    agent_request: bool,
}

impl LspApprover {
    /// An approver for `session_id`; `agent_request` = the client supports
    /// `agent/requestPermission` (else `window/showMessageRequest` is used).
    pub fn new(client: Client, session_id: String, agent_request: bool) -> Self {
        LspApprover {
            client,
            session_id,
            agent_request,
        }
    }
}

/// The fallback message: the tool, its command (or arguments) and the reason.
fn message_text(r: &PermissionRequest) -> String {
    let what = match r.arguments.get("command").and_then(Value::as_str) {
        Some(c) => format!("run `{c}` outside the sandbox"),
        None => format!("run {} with {}", r.tool, r.arguments),
    };
    format!("pi wants to {what}. Reason: {}", r.reason)
}

#[async_trait]
impl Approver for LspApprover {
    async fn ask(&self, r: PermissionRequest) -> Decision {
        if self.agent_request {
            let params = RequestPermissionParams {
                session_id: self.session_id.clone(),
                tool: r.tool,
                tool_call_id: r.tool_call_id,
                arguments: r.arguments,
                reason: r.reason,
            };
            return match self.client.send_request::<RequestPermission>(params).await {
                Ok(res) if res.decision == "allow" => Decision::Allow,
                Ok(res) if res.decision == "reject" => Decision::Reject { reason: res.reason },
                Ok(res) => Decision::Reject {
                    reason: Some(format!("unknown decision \"{}\"", res.decision)),
                },
                Err(e) => {
                    tracing::warn!("agent/requestPermission failed: {e}");
                    Decision::Reject {
                        reason: Some(format!("the permission request failed: {}", e.message)),
                    }
                }
            };
        }
        let params = ShowMessageRequestParams {
            typ: MessageType::WARNING,
            message: message_text(&r),
            actions: Some(vec![
                MessageActionItem {
                    title: ALLOW_ACTION.into(),
                    properties: Default::default(),
                },
                MessageActionItem {
                    title: REJECT_ACTION.into(),
                    properties: Default::default(),
                },
            ]),
        };
        match self.client.send_request::<ShowMessageRequest>(params).await {
            Ok(Some(a)) if a.title == ALLOW_ACTION => Decision::Allow,
            Ok(Some(_)) => Decision::Reject {
                reason: Some("the user chose Reject".into()),
            },
            Ok(None) => Decision::Reject {
                reason: Some("the user dismissed the question".into()),
            },
            Err(e) => {
                tracing::warn!("window/showMessageRequest failed: {e}");
                Decision::Reject {
                    reason: Some(format!("the permission request failed: {}", e.message)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_shapes() {
        let p = RequestPermissionParams {
            session_id: "s1".into(),
            tool: "bash".into(),
            tool_call_id: "call_1".into(),
            arguments: json!({"command": "touch ../x"}),
            reason: "sandbox denied: touch: cannot touch '../x': Permission denied".into(),
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"sessionId": "s1", "tool": "bash", "toolCallId": "call_1",
                   "arguments": {"command": "touch ../x"},
                   "reason": "sandbox denied: touch: cannot touch '../x': Permission denied"})
        );
        let r: RequestPermissionResult =
            serde_json::from_value(json!({"decision": "reject", "reason": "no"})).unwrap();
        assert_eq!(r.reason.as_deref(), Some("no"));
        let r: RequestPermissionResult =
            serde_json::from_value(json!({"decision": "allow"})).unwrap();
        assert_eq!(r.decision, "allow");
        let fixture = |name: &str| -> Value {
            let p = format!(
                "{}/../../fixtures/protocol/{name}",
                env!("CARGO_MANIFEST_DIR")
            );
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        let req = fixture("agent-requestPermission.request.json");
        assert_eq!(req["method"], RequestPermission::METHOD);
        let p: RequestPermissionParams = serde_json::from_value(req["params"].clone()).unwrap();
        assert_eq!(serde_json::to_value(&p).unwrap(), req["params"]);
        let res = fixture("agent-requestPermission.response.json");
        let r: RequestPermissionResult = serde_json::from_value(res["result"].clone()).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap(), res["result"]);
        assert!(client_supports(Some(
            &json!({"agent": {"requestPermission": true}})
        )));
        assert!(!client_supports(Some(&json!({"agent": {}}))));
        assert!(!client_supports(None));
    }
}

//! Asking the editor's user for permission: the approval policy's questions
//! ([`pi_core::approval::Asker`]) and the bash sandbox's escalation
//! ([`pi_core::sandbox::Approver`]) over LSP, and `agent/permissions/set`.
//!
//! Clients that advertise `experimental.agent.requestPermission: true` get the server → client
//! request `agent/requestPermission` ([`RequestPermission`]): params `{sessionId, tool,
//! toolCallId, arguments, reason, rule?, alwaysScopes?, change?}` (`change`: `{path, diff,
//! oldHash, newHash}` for `edit` / `write`), result `{decision: "allow" | "allowAlways" |
//! "reject", scope?, reason?}`. Other clients get the standard `window/showMessageRequest`
//! (type warning) with the actions `Allow`, `Allow for this session` / `Allow in this
//! workspace` (when a rule is offered) and `Reject`; dismissing it rejects. A failed request
//! (client gone, error answer, unknown decision) rejects, with the failure as the reason.
//! Before asking, `agent/attention {reason: "permission"}` is sent. When the question is
//! withdrawn (the run was aborted) the pending request is cancelled with `$/cancelRequest`
//! ([`crate::client::request`]).
//! Documented in docs/protocol.md ("Permission requests").

use std::sync::Arc;

use async_trait::async_trait;
use pi_core::approval::{
    Answer, ApprovalPolicy, Asker, Gate, ProposedChange, Question, Rule, Scope,
};
use pi_core::sandbox::{Approver, Decision, PermissionRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_lsp_server::ls_types::request::{Request, ShowMessageRequest};
use tower_lsp_server::ls_types::{MessageActionItem, MessageType, ShowMessageRequestParams};
use tower_lsp_server::Client;

use crate::protocol::{AttentionNotification, AttentionParams, AttentionReason};

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
    /// Why permission is needed, e.g. `approvalPolicy "auto-edit": bash asks` or `sandbox
    /// denied: touch: cannot touch '../x': Permission denied`.
    pub reason: String,
    /// What an `allowAlways` answer remembers (absent: only `allow` or `reject`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<Rule>,
    /// The scopes an `allowAlways` answer may name (`workspace` only in a trusted workspace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub always_scopes: Vec<Scope>,
    /// For `edit` / `write`: the diff and the XXH3 hashes of the old and proposed text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<ProposedChange>,
}

/// The client's answer to `agent/requestPermission`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermissionResult {
    /// `"allow"` (this once), `"allowAlways"` or `"reject"`.
    pub decision: String,
    /// For `allowAlways`: `"session"` (default) or `"workspace"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
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
/// Title of the fallback's action that allows the question's rule for the session.
pub const ALLOW_SESSION_ACTION: &str = "Allow for this session";
/// Title of the fallback's action that allows the question's rule in the workspace.
pub const ALLOW_WORKSPACE_ACTION: &str = "Allow in this workspace";
/// Title of the rejecting action of the fallback.
pub const REJECT_ACTION: &str = "Reject";

/// Asks the editor of one session.
pub struct LspApprover {
    client: Client,
    session_id: String,
    agent_request: bool,
    /// Told which calls wait for an answer (the abort report lists no process for them).
    tracker: Option<Arc<pi_core::harness::Tracker>>,
}

impl LspApprover {
    /// An approver for `session_id`; `agent_request` = the client supports
    /// `agent/requestPermission` (else `window/showMessageRequest` is used).
    pub fn new(client: Client, session_id: String, agent_request: bool) -> Self {
        LspApprover {
            client,
            session_id,
            agent_request,
            tracker: None,
        }
    }

    /// This approver, telling `tracker` which calls wait for the user.
    pub fn with_tracker(mut self, tracker: Arc<pi_core::harness::Tracker>) -> Self {
        self.tracker = Some(tracker);
        self
    }

    /// What the call would do, for the attention notification and the fallback message:
    /// `edit notes.txt (+1 −1)`, ``run `ls -a` `` (with `suffix`, e.g. ` outside the sandbox`).
    fn what(q: &Question, suffix: &str) -> String {
        match (
            &q.change,
            q.arguments.get("command").and_then(Value::as_str),
        ) {
            (Some(c), _) => {
                let (plus, minus) = diff_counts(&c.diff);
                format!("{} {} (+{plus} −{minus})", q.tool, c.path)
            }
            (None, Some(c)) => format!("run `{c}`{suffix}"),
            (None, None) => format!("run {} with {}{suffix}", q.tool, q.arguments),
        }
    }

    async fn attention(&self, message: String) {
        let params = AttentionParams {
            session_id: self.session_id.clone(),
            run_id: None,
            reason: AttentionReason::Permission,
            message,
        };
        self.client
            .send_notification::<AttentionNotification>(params)
            .await;
    }

    async fn ask_question(&self, q: Question, what: String) -> Answer {
        let summary = format!("pi wants to {what}. Reason: {}", q.reason);
        self.attention(summary.clone()).await;
        if self.agent_request {
            let params = RequestPermissionParams {
                session_id: self.session_id.clone(),
                tool: q.tool,
                tool_call_id: q.tool_call_id,
                arguments: q.arguments,
                reason: q.reason,
                rule: q.rule,
                always_scopes: q.always_scopes.clone(),
                change: q.change,
            };
            return match crate::client::request::<RequestPermission>(&self.client, params, None)
                .await
                .into_result()
            {
                Ok(res) => match res.decision.as_str() {
                    "allow" => Answer::Once,
                    "allowAlways" => {
                        let scope = res.scope.unwrap_or(Scope::Session);
                        if q.always_scopes.contains(&scope) {
                            Answer::Always(scope)
                        } else {
                            // Not offered (no rule, or an untrusted workspace): this once.
                            Answer::Once
                        }
                    }
                    "reject" => Answer::Reject { reason: res.reason },
                    other => Answer::Reject {
                        reason: Some(format!("unknown decision \"{other}\"")),
                    },
                },
                Err(e) => {
                    tracing::warn!("agent/requestPermission failed: {e}");
                    Answer::Reject {
                        reason: Some(format!("the permission request failed: {}", e.message)),
                    }
                }
            };
        }
        let mut message = summary;
        if let Some(c) = &q.change {
            let lines: Vec<&str> = c.diff.lines().collect();
            message.push_str("\n\n");
            message.push_str(&lines[..lines.len().min(40)].join("\n"));
            if lines.len() > 40 {
                message.push_str(&format!("\n… {} more diff lines", lines.len() - 40));
            }
        }
        let mut titles = vec![ALLOW_ACTION];
        if q.always_scopes.contains(&Scope::Session) {
            titles.push(ALLOW_SESSION_ACTION);
        }
        if q.always_scopes.contains(&Scope::Workspace) {
            titles.push(ALLOW_WORKSPACE_ACTION);
        }
        titles.push(REJECT_ACTION);
        let params = ShowMessageRequestParams {
            typ: MessageType::WARNING,
            message,
            actions: Some(
                titles
                    .iter()
                    .map(|t| MessageActionItem {
                        title: t.to_string(),
                        properties: Default::default(),
                    })
                    .collect(),
            ),
        };
        match crate::client::request::<ShowMessageRequest>(&self.client, params, None)
            .await
            .into_result()
        {
            Ok(Some(a)) if a.title == ALLOW_ACTION => Answer::Once,
            Ok(Some(a)) if a.title == ALLOW_SESSION_ACTION => Answer::Always(Scope::Session),
            Ok(Some(a)) if a.title == ALLOW_WORKSPACE_ACTION => Answer::Always(Scope::Workspace),
            Ok(Some(a)) if a.title == REJECT_ACTION => Answer::Reject {
                reason: Some("the user chose Reject".into()),
            },
            // Not one of the offered actions: a reject, saying what came back.
            Ok(Some(a)) => Answer::Reject {
                reason: Some(format!(
                    "the editor answered with an action that was not offered ({:?})",
                    a.title
                )),
            },
            Ok(None) => Answer::Reject {
                reason: Some("the user dismissed the question".into()),
            },
            Err(e) => {
                tracing::warn!("window/showMessageRequest failed: {e}");
                Answer::Reject {
                    reason: Some(format!("the permission request failed: {}", e.message)),
                }
            }
        }
    }
}

/// Added and removed lines of a unified diff.
fn diff_counts(diff: &str) -> (usize, usize) {
    let mut plus = 0;
    let mut minus = 0;
    for l in diff.lines() {
        if l.starts_with('+') && !l.starts_with("+++") {
            plus += 1;
        } else if l.starts_with('-') && !l.starts_with("---") {
            minus += 1;
        }
    }
    (plus, minus)
}

#[async_trait]
impl Asker for LspApprover {
    async fn ask(&self, question: Question) -> Answer {
        /// Clears the mark also when the question is withdrawn (the future dropped).
        struct Waiting<'a>(Option<&'a pi_core::harness::Tracker>, String);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                if let Some(t) = self.0 {
                    t.set_awaiting_permission(&self.1, false);
                }
            }
        }
        let what = Self::what(&question, "");
        let tracker = self.tracker.as_deref();
        if let Some(t) = tracker {
            t.set_awaiting_permission(&question.tool_call_id, true);
        }
        let _waiting = Waiting(tracker, question.tool_call_id.clone());
        self.ask_question(question, what).await
    }
}

#[async_trait]
impl Approver for LspApprover {
    /// The sandbox's escalation: allow once or reject (no rule is offered).
    async fn ask(&self, r: PermissionRequest) -> Decision {
        let q = Question::escalation(r);
        let what = Self::what(&q, " outside the sandbox");
        self.ask_question(q, what).await.decision()
    }
}

/// The name of a policy on the wire (`ask`, `auto-edit`, `approve-all`).
pub fn policy_name(p: ApprovalPolicy) -> String {
    serde_json::to_value(p)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The session's gate: asks through `approver`; workspace rules go to the project only when
/// the workspace is trusted.
pub fn session_gate(
    ws: &pi_core::resources::WorkspaceConfig,
    init_policy: Option<ApprovalPolicy>,
    approver: Arc<LspApprover>,
) -> Arc<Gate> {
    let settings = ws.settings();
    Arc::new(Gate::new(
        effective_default(init_policy, &settings),
        pi_core::approval::rules_from_settings(&settings.merged),
        Some(approver as Arc<dyn Asker>),
        ws.trusted().then(|| ws.root().to_path_buf()),
        "nobody can be asked for approval here",
    ))
}

/// The editor's default policy: `initializationOptions.approvalPolicy`, else the settings'
/// `approvalPolicy`, else [`pi_core::approval::EDITOR_DEFAULT`].
pub fn effective_default(
    init_policy: Option<ApprovalPolicy>,
    settings: &pi_core::settings::Settings,
) -> ApprovalPolicy {
    init_policy
        .or(settings.approval_policy)
        .unwrap_or(pi_core::approval::EDITOR_DEFAULT)
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
            rule: None,
            always_scopes: Vec::new(),
            change: None,
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
            serde_json::from_value(json!({"decision": "allowAlways", "scope": "workspace"}))
                .unwrap();
        assert_eq!(r.scope, Some(Scope::Workspace));
        let fixture = |name: &str| -> Value {
            let p = format!(
                "{}/../../fixtures/protocol/{name}",
                env!("CARGO_MANIFEST_DIR")
            );
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        for stem in ["agent-requestPermission", "agent-requestPermission.edit"] {
            let req = fixture(&format!("{stem}.request.json"));
            assert_eq!(req["method"], RequestPermission::METHOD);
            let p: RequestPermissionParams = serde_json::from_value(req["params"].clone()).unwrap();
            assert_eq!(serde_json::to_value(&p).unwrap(), req["params"]);
            let res = fixture(&format!("{stem}.response.json"));
            let r: RequestPermissionResult = serde_json::from_value(res["result"].clone()).unwrap();
            assert_eq!(serde_json::to_value(&r).unwrap(), res["result"]);
        }
        assert!(client_supports(Some(
            &json!({"agent": {"requestPermission": true}})
        )));
        assert!(!client_supports(Some(&json!({"agent": {}}))));
        assert!(!client_supports(None));
        assert_eq!(
            diff_counts("--- a\n+++ a\n@@ -1,2 +1,2 @@\n-x\n+y\n+z\n ctx\n"),
            (2, 1)
        );
        assert_eq!(policy_name(ApprovalPolicy::AutoEdit), "auto-edit");
    }
}

//! Extensions in the editor server: the session's [`ExtensionHost`] over LSP, extension UI
//! requests to the editor, and `agent/extension/commands`.
//!
//! - Loading: when a session opens, the built-in extensions enabled by the settings key
//!   `builtinExtensions` (global settings, and the project's only in a trusted workspace) are
//!   registered for it ([`load`]); their tools join the session's tools (and the system
//!   prompt's tool list), their `tool_call` / `tool_result` handlers run as the loop's hooks,
//!   their event handlers as a listener of the session's agent.
//! - `custom` entries and custom messages are the session's own
//!   ([`pi_core::harness::AgentSession::send_custom_message`], the same call as
//!   `agent/sendMessage`: queued with `deliverAs`, stored as `custom_message` entries when they
//!   reach the conversation, reported by `agent/queueUpdate`); this module is the UI.
//! - UI: clients that advertise `experimental.agent.ui: true` get the server → client request
//!   `agent/ui/request` for dialogs (`select`, `confirm`, `input`, `editor`; Pi's extension UI
//!   fields plus `sessionId` and `extension`; answered `{value?, confirmed?, cancelled?}`) and
//!   the notification `agent/ui/notification` for `notify` and `setStatus`. Other clients get
//!   `window/showMessageRequest` for `select` (options as actions) and `confirm` (`Yes` / `No`),
//!   `window/showMessage` for `notify`; `input` and `editor` are answered cancelled. A dialog's
//!   `timeout` (ms) resolves it as cancelled and withdraws it from the editor (`$/cancelRequest`
//!   through [`crate::client::request_within`]). A failed request is cancelled.
//! - Failures become `agent/event` notifications carrying `{"type": "extension_error",
//!   extensionPath, event, error}`.
//!
//! Documented in docs/extensions.md and docs/protocol.md.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use pi_core::extension::{ExtensionErrorInfo, ExtensionUi, NotifyType, UiRequest, UiResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::request::{Request, ShowMessageRequest};
use tower_lsp_server::ls_types::{MessageActionItem, MessageType, ShowMessageRequestParams};

use crate::client::Reply;
use crate::protocol::{
    AgentEventNotification, AgentEventParams, AttentionNotification, AttentionParams,
    AttentionReason,
};
use crate::state::State;

/// Params of `agent/ui/request` and `agent/ui/notification`: Pi's extension UI request (its
/// `method` and fields) with the session and the extension asking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UiRequestParams {
    pub session_id: String,
    /// The extension's name, e.g. `tmux`.
    pub extension: String,
    #[serde(flatten)]
    pub request: UiRequest,
}

/// The `agent/ui/request` request (server → client): a dialog; the result is a [`UiResponse`].
#[derive(Debug)]
pub enum UiRequestMethod {}

impl Request for UiRequestMethod {
    type Params = UiRequestParams;
    type Result = UiResponse;
    const METHOD: &'static str = "agent/ui/request";
}

/// The `agent/ui/notification` notification (server → client): `notify` or `setStatus`.
#[derive(Debug)]
pub enum UiNotification {}

impl Notification for UiNotification {
    type Params = UiRequestParams;
    const METHOD: &'static str = "agent/ui/notification";
}

/// True when the client's `initialize` capabilities say `experimental.agent.ui`.
pub fn client_supports_ui(experimental: Option<&Value>) -> bool {
    experimental
        .and_then(|e| e.pointer("/agent/ui"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Title of the confirming action of the `window/showMessageRequest` fallback.
pub const YES_ACTION: &str = "Yes";
/// Title of the declining action of the fallback.
pub const NO_ACTION: &str = "No";

/// A session's extension UI: its editor.
pub struct LspExtensionUi {
    st: Weak<State>,
    session_id: String,
}

impl LspExtensionUi {
    /// The UI of session `session_id`.
    pub(crate) fn new(st: &Arc<State>, session_id: String) -> Self {
        LspExtensionUi {
            st: Arc::downgrade(st),
            session_id,
        }
    }

    /// The active run of this session, if any.
    fn run_id(&self, st: &State) -> Option<String> {
        let session = st.live_session(&self.session_id)?;
        session.run_id()
    }

    /// `request` for a client without `agent/ui`: `window/showMessageRequest` (withdrawn when
    /// the dialog's `timeout` passes), `window/showMessage`, or cancelled.
    async fn fallback(&self, st: &State, request: UiRequest) -> UiResponse {
        let client = &st.client;
        let limit = request.timeout_ms().map(Duration::from_millis);
        let show = |params: ShowMessageRequestParams| {
            crate::client::request_within::<ShowMessageRequest>(client, params, None, limit)
        };
        let ask = |message: String, actions: Vec<String>| ShowMessageRequestParams {
            typ: MessageType::INFO,
            message,
            actions: Some(
                actions
                    .into_iter()
                    .map(|title| MessageActionItem {
                        title,
                        properties: Default::default(),
                    })
                    .collect(),
            ),
        };
        match request {
            UiRequest::Select { title, options, .. } => match show(ask(title, options)).await {
                Reply::Result(Some(a)) => UiResponse {
                    value: Some(a.title),
                    ..Default::default()
                },
                _ => UiResponse::cancelled(),
            },
            UiRequest::Confirm { title, message, .. } => {
                let text = format!("{title}: {message}");
                match show(ask(text, vec![YES_ACTION.into(), NO_ACTION.into()])).await {
                    Reply::Result(Some(a)) => UiResponse {
                        confirmed: Some(a.title == YES_ACTION),
                        ..Default::default()
                    },
                    _ => UiResponse::cancelled(),
                }
            }
            UiRequest::Notify {
                message,
                notify_type,
            } => {
                let typ = match notify_type {
                    NotifyType::Info => MessageType::INFO,
                    NotifyType::Warning => MessageType::WARNING,
                    NotifyType::Error => MessageType::ERROR,
                };
                client.show_message(typ, message).await;
                UiResponse::default()
            }
            UiRequest::Input { .. } | UiRequest::Editor { .. } => {
                tracing::info!("extension UI input/editor: the client has no agent/ui; cancelled");
                UiResponse::cancelled()
            }
            UiRequest::SetStatus { .. } => UiResponse::default(),
        }
    }
}

#[async_trait]
impl ExtensionUi for LspExtensionUi {
    fn has_ui(&self) -> bool {
        true
    }

    async fn ui(&self, extension: &str, request: UiRequest) -> UiResponse {
        let Some(st) = self.st.upgrade() else {
            return UiResponse::cancelled();
        };
        if request.is_dialog() {
            // The agent needs the user: say so first (issue 7, "attention").
            let title = match &request {
                UiRequest::Select { title, .. }
                | UiRequest::Confirm { title, .. }
                | UiRequest::Input { title, .. }
                | UiRequest::Editor { title, .. } => title.clone(),
                _ => String::new(),
            };
            let session = st.live_session(&self.session_id);
            let run_id = session.and_then(|s| s.active_run_id());
            st.client
                .send_notification::<AttentionNotification>(AttentionParams {
                    session_id: self.session_id.clone(),
                    run_id,
                    reason: AttentionReason::Question,
                    message: format!("{extension}: {title}"),
                })
                .await;
        }
        if !st.extension_ui() {
            return self.fallback(&st, request).await;
        }
        let params = UiRequestParams {
            session_id: self.session_id.clone(),
            extension: extension.to_string(),
            request,
        };
        if !params.request.is_dialog() {
            st.client.send_notification::<UiNotification>(params).await;
            return UiResponse::default();
        }
        // The dialog's `timeout` passing withdraws it (`$/cancelRequest`): the editor closes
        // it rather than leaving a question nobody waits for.
        let limit = params.request.timeout_ms().map(Duration::from_millis);
        match crate::client::request_within::<UiRequestMethod>(&st.client, params, None, limit)
            .await
        {
            Reply::Result(r) => r,
            Reply::TimedOut | Reply::Cancelled => UiResponse::cancelled(),
            other => {
                if let Err(e) = other.into_result() {
                    tracing::warn!("agent/ui/request failed: {}", e.message);
                }
                UiResponse::cancelled()
            }
        }
    }

    async fn extension_error(&self, error: ExtensionErrorInfo) {
        let Some(st) = self.st.upgrade() else {
            return;
        };
        let run_id = self.run_id(&st).unwrap_or_default();
        // Through the session's sink: numbered (`seq`) with the session's other events.
        let sink = st.output(&self.session_id);
        match sink {
            Some(sink) => sink.send_extra(run_id, error.into()).await,
            None => {
                st.client
                    .send_notification::<AgentEventNotification>(AgentEventParams {
                        session_id: self.session_id.clone(),
                        run_id,
                        seq: 0,
                        event: error.into(),
                        unsaved: false,
                    })
                    .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use serde_json::json;
    use tower_service::Service;

    /// A dialog whose `timeout` passes is withdrawn from the editor: the `agent/ui/request`
    /// (and, without `agent/ui`, the `window/showMessageRequest`) is followed by
    /// `$/cancelRequest` with its id, and the extension gets "cancelled".
    #[tokio::test]
    async fn a_timed_out_dialog_is_withdrawn() {
        for ui in [true, false] {
            let (mut service, mut socket) = crate::server::service();
            let init = tower_lsp_server::jsonrpc::Request::build("initialize")
                .params(
                    json!({"capabilities": {"experimental": {"agent": {"ui": ui}}},
                    "rootPath": std::env::temp_dir().display().to_string()}),
                )
                .id(1)
                .finish();
            service.call(init).await.unwrap().unwrap();
            let st = service.inner().state.clone();
            let ext = LspExtensionUi::new(&st, "s1".into());
            let ask = ext.ui(
                "probe",
                UiRequest::Select {
                    title: "Pick".into(),
                    options: vec!["a".into(), "b".into()],
                    timeout: Some(100),
                },
            );
            let started = std::time::Instant::now();
            let (answer, seen) = tokio::join!(ask, async {
                let mut seen = Vec::new();
                while let Some(m) = socket.next().await {
                    let done = m.method() == "$/cancelRequest";
                    seen.push(serde_json::to_value(&m).unwrap());
                    if done {
                        break;
                    }
                }
                seen
            });
            assert_eq!(answer, UiResponse::cancelled());
            assert!(started.elapsed() >= Duration::from_millis(100));
            let methods: Vec<&str> = seen.iter().map(|m| m["method"].as_str().unwrap()).collect();
            let question = if ui {
                "agent/ui/request"
            } else {
                "window/showMessageRequest"
            };
            assert_eq!(
                methods,
                ["agent/attention", question, "$/cancelRequest"],
                "{seen:?}"
            );
            assert_eq!(seen[2]["params"], json!({"id": seen[1]["id"]}), "ui: {ui}");
        }
    }

    #[test]
    fn ui_wire_shapes() {
        let p = UiRequestParams {
            session_id: "s1".into(),
            extension: "tmux".into(),
            request: UiRequest::Select {
                title: "Kill which tmux session?".into(),
                options: vec!["web".into(), "db".into()],
                timeout: None,
            },
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"sessionId": "s1", "extension": "tmux", "method": "select",
                   "title": "Kill which tmux session?", "options": ["web", "db"]})
        );
        let n: UiRequestParams = serde_json::from_value(json!({"sessionId": "s1",
            "extension": "tmux", "method": "notify", "message": "hi", "notifyType": "warning"}))
        .unwrap();
        assert_eq!(
            n.request,
            UiRequest::Notify {
                message: "hi".into(),
                notify_type: NotifyType::Warning
            }
        );
        let r: UiResponse = serde_json::from_value(json!({"cancelled": true})).unwrap();
        assert_eq!(r, UiResponse::cancelled());
        let r: UiResponse = serde_json::from_value(json!({"confirmed": true})).unwrap();
        assert_eq!(r.confirmed, Some(true));
        assert!(client_supports_ui(Some(&json!({"agent": {"ui": true}}))));
        assert!(!client_supports_ui(Some(&json!({"agent": {}}))));
    }
}

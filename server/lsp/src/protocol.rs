//! The `agent/*` wire types (documented in `docs/protocol.md`, one example per message in
//! `fixtures/protocol/`). Fields are camelCase; ids are strings.
//!
//! Client → server requests: `agent/prompt`, `agent/abort`. Server → client: the
//! `agent/event` notification and the `agent/saveDocument` request (sent only to clients that
//! advertise `experimental.agent.saveDocument: true`).

use pi_core::AgentEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_lsp_server::jsonrpc::{Error, ErrorCode};
use tower_lsp_server::ls_types::{notification::Notification, request::Request, Uri};

/// Error codes of `agent/*` methods: outside JSON-RPC's reserved -32768..-32000 and LSP's
/// -32899..-32800.
pub mod codes {
    /// A run is active and the prompt named no `streamingBehavior`.
    pub const SESSION_BUSY: i64 = -31001;
    /// `sessionId` names no session of this workspace.
    pub const UNKNOWN_SESSION: i64 = -31002;
    /// The requested model is unknown or none is configured.
    pub const MODEL_UNAVAILABLE: i64 = -31003;
    /// The session file could not be created or written.
    pub const SESSION_IO: i64 = -31004;
    /// A compaction could not be done (nothing to compact, the summary request failed, it
    /// would not shrink the context, it was cancelled); nothing was written.
    pub const COMPACTION_FAILED: i64 = -31005;
}

/// A JSON-RPC error with one of [`codes`].
pub fn agent_error(code: i64, message: impl Into<String>) -> Error {
    Error {
        code: ErrorCode::ServerError(code),
        message: message.into().into(),
        data: None,
    }
}

/// Parses request params, naming the offending field in the InvalidParams message
/// (e.g. `text: invalid type: integer \`1\`, expected a string`).
pub fn parse_params<T: for<'de> Deserialize<'de>>(params: Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let msg = if path == "." {
            inner
        } else {
            format!("{path}: {inner}")
        };
        Error::invalid_params(msg)
    })
}

/// `agent/compact` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactParams {
    pub session_id: String,
    /// Extra focus for the summary (Pi's `/compact <instructions>`); it reaches every summary
    /// request (case CMP-07).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// `agent/compact` result: Pi's `CompactionResult`, the fields of the `compaction` entry written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CompactResult(pub pi_core::compaction::CompactionResult);

/// How a prompt sent during an active run is delivered (seed §3 "Steering, follow-up").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamingBehavior {
    /// Delivered after the current tool batch, before the next model request.
    Steer,
    /// Delivered when the agent would otherwise stop.
    FollowUp,
}

/// `agent/prompt` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptParams {
    /// The user's message.
    pub text: String,
    /// Continue this session (in memory, or its file in `.pi/sessions/`); a new one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `provider/id`; overrides every other model choice for this session from now on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Required while a run is active; otherwise ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming_behavior: Option<StreamingBehavior>,
}

/// `agent/prompt` result, sent at once; the run streams as `agent/event` notifications.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResult {
    pub session_id: String,
    /// The run the prompt started, or the active run it was queued into.
    pub run_id: String,
    /// True when the prompt was queued into an active run (steer / followUp).
    pub queued: bool,
}

/// `agent/abort` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AbortParams {
    pub session_id: String,
}

/// `agent/abort` result. Aborting twice, or with no active run, is not an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbortResult {
    /// True when a run was active and has been told to stop.
    pub aborted: bool,
}

/// `agent/event` params: one agent event of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentEventParams {
    pub session_id: String,
    pub run_id: String,
    pub event: AgentEvent,
}

/// The `agent/event` notification (server → client); params are a serialized
/// [`AgentEventParams`].
#[derive(Debug)]
pub enum AgentEventNotification {}

impl Notification for AgentEventNotification {
    type Params = Value;
    const METHOD: &'static str = "agent/event";
}

/// `agent/saveDocument` params (server → client): save this open document to disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaveDocumentParams {
    pub uri: Uri,
}

/// `agent/saveDocument` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaveDocumentResult {
    pub saved: bool,
}

/// The `agent/saveDocument` request (server → client).
#[derive(Debug)]
pub enum SaveDocumentRequest {}

impl Request for SaveDocumentRequest {
    type Params = SaveDocumentParams;
    type Result = SaveDocumentResult;
    const METHOD: &'static str = "agent/saveDocument";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn invalid_params_name_the_field() {
        let e = parse_params::<PromptParams>(json!({"text": 1})).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidParams);
        assert!(
            e.message.starts_with("text: invalid type: integer `1`"),
            "{}",
            e.message
        );
        let e = parse_params::<PromptParams>(json!({})).unwrap_err();
        assert_eq!(e.message, "missing field `text`");
        let e = parse_params::<PromptParams>(json!({"text":"x","streamingBehavior":"later"}))
            .unwrap_err();
        assert!(
            e.message
                .starts_with("streamingBehavior: unknown variant `later`"),
            "{}",
            e.message
        );
    }

    fn fixture(name: &str) -> Value {
        let p = format!(
            "{}/../../fixtures/protocol/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(v: &Value) {
        let t: T = parse_params(v.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&t).unwrap(), v);
    }

    #[test]
    fn compact_fixtures_round_trip() {
        round_trip::<CompactParams>(&fixture("agent-compact.request.json")["params"]);
        round_trip::<CompactResult>(&fixture("agent-compact.response.json")["result"]);
        let start = fixture("agent-event.compaction-start.notification.json");
        let params = AgentEventParams {
            session_id: "01a22d67-d357-722e-afd8-b78dfc6ea512".into(),
            run_id: "01a22d70-51b2-7c3e-8d1f-0a9b8c7d6e5f".into(),
            event: AgentEvent::CompactionStart {
                reason: pi_core::agent::CompactionReason::Threshold,
            },
        };
        assert_eq!(serde_json::to_value(params).unwrap(), start["params"]);
        let end = fixture("agent-event.compaction-end.notification.json");
        let result: pi_core::compaction::CompactionResult =
            serde_json::from_value(fixture("agent-compact.response.json")["result"].clone())
                .unwrap();
        let params = AgentEventParams {
            session_id: "01a22d67-d357-722e-afd8-b78dfc6ea512".into(),
            run_id: "01a22d70-51b2-7c3e-8d1f-0a9b8c7d6e5f".into(),
            event: AgentEvent::CompactionEnd {
                reason: pi_core::agent::CompactionReason::Threshold,
                result: Some(result),
                aborted: false,
                will_retry: false,
                error_message: None,
                context: None,
            },
        };
        assert_eq!(serde_json::to_value(params).unwrap(), end["params"]);
        assert_eq!(
            fixture("agent-compact.nothing-error.json")["error"]["code"],
            codes::COMPACTION_FAILED
        );
    }

    #[test]
    fn protocol_fixtures_round_trip() {
        round_trip::<PromptParams>(&fixture("agent-prompt.request.json")["params"]);
        round_trip::<PromptResult>(&fixture("agent-prompt.response.json")["result"]);
        round_trip::<AbortParams>(&fixture("agent-abort.request.json")["params"]);
        round_trip::<AbortResult>(&fixture("agent-abort.response.json")["result"]);
        round_trip::<SaveDocumentParams>(&fixture("agent-saveDocument.request.json")["params"]);
        round_trip::<SaveDocumentResult>(&fixture("agent-saveDocument.response.json")["result"]);
        assert_eq!(
            fixture("agent-prompt.busy-error.json")["error"]["code"],
            codes::SESSION_BUSY
        );
        let ev = fixture("agent-event.notification.json");
        assert_eq!(ev["method"], AgentEventNotification::METHOD);
        let params = AgentEventParams {
            session_id: "01a22d67-d357-722e-afd8-b78dfc6ea512".into(),
            run_id: "01a22d68-0c11-7e0a-9a55-5b7c2f3d4e61".into(),
            event: AgentEvent::MessageUpdate {
                assistant_message_event: pi_ai::AssistantEvent::TextDelta {
                    content_index: 0,
                    delta: "Renamed ".into(),
                },
            },
        };
        assert_eq!(serde_json::to_value(params).unwrap(), ev["params"]);
    }
}

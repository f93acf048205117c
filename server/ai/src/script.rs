//! The offline scripted model's script (a leaf: data only; [`crate::api::scripted`] plays
//! it). JSON: `{"responses":[{"text"?, "toolCalls"?: [{"name","arguments"}], "stopReason"?,
//! "delayMs"?}]}`; a [`crate::models::Model`] carries it in its `script` field.

use serde::Deserialize;
use serde_json::Value;

use crate::types::StopReason;

/// One scripted response.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScriptedResponse {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Overrides the stop reason (e.g. `length` to exercise the guardrail).
    #[serde(default)]
    pub stop_reason: Option<StopReason>,
    /// Pause before the response starts, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
}

/// One scripted tool call.
#[derive(Debug, Clone, Deserialize)]
pub struct ScriptedCall {
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
}

/// A whole script.
#[derive(Debug, Clone, Deserialize)]
pub struct Script {
    pub responses: Vec<ScriptedResponse>,
}

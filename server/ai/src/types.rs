//! Provider-neutral messages, persisted and replayed exactly as Pi writes them.
//!
//! The JSON shapes follow Pi 0.73.1's `pi-ai` types (docs/design.md#model-io-and-streaming "Provider-neutral core", docs/design.md#sessions-branching-and-compaction "Session
//! files"): roles `user` / `assistant` / `toolResult`; content blocks `text`,
//! `thinking`, `image`, `toolCall`; `usage` and `stopReason` on assistant messages. The call id is
//! the stable pairing fact between a `toolCall` block and its `toolResult` message.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Milliseconds since the Unix epoch, as Pi stores `message.timestamp`.
pub fn now_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A text block: `{"type":"text","text":"…"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct TextContent {
    pub text: String,
    /// Provider signature of the text block (OpenAI Responses); omitted when absent.
    #[serde(
        rename = "textSignature",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub text_signature: Option<String>,
}

/// A thinking block: `{"type":"thinking","thinking":"…","thinkingSignature":"…"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct ThinkingContent {
    pub thinking: String,
    #[serde(
        rename = "thinkingSignature",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub thinking_signature: Option<String>,
    /// True for Anthropic `redacted_thinking` (the signature holds the opaque payload).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
}

/// An image block: `{"type":"image","data":"<base64>","mimeType":"image/png"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct ImageContent {
    /// The base64 text, shared: every copy of a history (the agent's, a request's view, the
    /// request cache's) holds the one text, not a copy of megabytes (case SESS-05).
    #[cfg_attr(feature = "ts", ts(type = "string"))]
    pub data: std::sync::Arc<str>,
    #[serde(rename = "mimeType")]
    pub mime_type: String,
}

/// A tool call proposed by the model: `{"type":"toolCall","id":"…","name":"…","arguments":{…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Parsed JSON arguments; `{}` when the model's text did not parse.
    #[cfg_attr(feature = "ts", ts(type = "unknown"))]
    pub arguments: Value,
    /// The streamed argument text when it did not parse as JSON (cut by the output limit,
    /// case LEN-01), kept for the error the loop reports. Never sent to a model: requests carry
    /// the replay-safe `arguments` only. Omitted when absent (Pi writes no such field).
    #[serde(
        rename = "rawArguments",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub raw_arguments: Option<String>,
}

impl ToolCall {
    /// A call with parsed arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
            raw_arguments: None,
        }
    }
}

/// One content block of any message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ContentBlock {
    Text(TextContent),
    Thinking(ThinkingContent),
    Image(ImageContent),
    ToolCall(ToolCall),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextContent {
            text: text.into(),
            text_signature: None,
        })
    }
}

/// User content: a plain string or a list of text/image blocks (both appear in Pi's files).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(untagged)]
pub enum UserContent {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

impl UserContent {
    /// All text of the content, blocks joined with newlines.
    pub fn to_text(&self) -> String {
        match self {
            UserContent::Text(t) => t.clone(),
            UserContent::Blocks(b) => join_text(b),
        }
    }
}

/// Joins the text blocks of `blocks` with `\n`.
pub fn join_text(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes a whole-number `f64` as an integer (`0`, not `0.0`), as JavaScript does, so session
/// files read the same as Pi's.
fn js_number<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// Cost in US dollars, split like Pi's `usage.cost`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", default)]
pub struct Cost {
    #[serde(serialize_with = "js_number")]
    pub input: f64,
    #[serde(serialize_with = "js_number")]
    pub output: f64,
    #[serde(serialize_with = "js_number")]
    pub cache_read: f64,
    #[serde(serialize_with = "js_number")]
    pub cache_write: f64,
    #[serde(serialize_with = "js_number")]
    pub total: f64,
    /// Pi 1.6's `totalFromProvider`: `false` once the cost was computed from the model's rates
    /// (pi-ai's `calculateCost`, on every response that reported usage), `true` when `total` is
    /// the amount the provider billed (OpenRouter's reported `cost`); absent on a response that
    /// reported no usage, as Pi writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_from_provider: Option<bool>,
}

/// Token usage of one response, in tokens (Pi's `usage`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", default)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// Cache writes with a one-hour lifetime, part of `cache_write` (Pi 1.6's `cacheWrite1h`:
    /// Anthropic's `cache_creation.ephemeral_1h_input_tokens`, billed at twice the input rate);
    /// absent for the other wire formats, as Pi writes it.
    #[serde(
        rename = "cacheWrite1h",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_write_1h: Option<u64>,
    /// Reasoning tokens, part of `output` (Pi 1.6's `reasoning`: chat completions'
    /// `completion_tokens_details.reasoning_tokens`, Responses' `output_tokens_details.
    /// reasoning_tokens`, 0 when not reported; Anthropic's `output_tokens_details.
    /// thinking_tokens` only when reported); absent where Pi writes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<u64>,
    pub total_tokens: u64,
    pub cost: Cost,
}

impl Usage {
    /// Tokens of the context this response saw plus what it wrote, in tokens: the provider's
    /// `total_tokens` when it reported one, else `input + output + cache_read + cache_write`
    /// (Pi 1.6's `calculateContextTokens`; also what a session's `totalTokens` adds up).
    /// 0 when the response reported no usage.
    pub fn context_total(&self) -> u64 {
        if self.total_tokens > 0 {
            self.total_tokens
        } else {
            self.input + self.output + self.cache_read + self.cache_write
        }
    }
}

/// Why a response ended (Pi's `stopReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The model finished its answer.
    Stop,
    /// The output token limit cut the response (docs/design.md#the-agent-loop "Length-limit guardrail").
    Length,
    /// The response ends with tool calls to execute.
    ToolUse,
    /// The provider or the stream failed; `errorMessage` says how.
    Error,
    /// The run was aborted by the user.
    Aborted,
    /// The response is still streaming: the empty message of an answer's `message_start`, as
    /// Pi 1.6's pi-ai starts every streamed message (`stopReason: "pending"`); never a
    /// finished message's.
    Pending,
}

/// A user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct UserMessage {
    pub content: UserContent,
    #[serde(default)]
    pub timestamp: i64,
}

/// A completed (or partial) assistant response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    pub content: Vec<ContentBlock>,
    #[serde(default)]
    pub api: String,
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The model name the stream reported when it differs from `model` (Pi's `responseModel`,
    /// set by the chat-completions adapter from the first chunk naming another model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_model: Option<String>,
    #[serde(default)]
    pub usage: Usage,
    pub stop_reason: StopReason,
    /// The provider's own stop reason before it was mapped to `stop_reason` (Pi 1.6's
    /// `rawStopReason`): chat completions' `finish_reason`, Anthropic's `stop_reason`,
    /// Responses' `status` (`incomplete.<reason>` with its `incomplete_details.reason`).
    /// Absent when the stream named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default)]
    pub timestamp: i64,
    /// The thinking level the request asked for (`off`, `minimal`, …, `max`): Pi 1.6's
    /// `thinkingLevel`, which its agent loop stamps on the finished message. Absent on a
    /// streamed message's start and in files written without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<String>,
    /// The effort the provider was told in the conversation itself (Pi 1.6's
    /// `providerThinkingLevel`): an `openai-responses` model with
    /// `compat.supportsMidConvoEffort` stores the `configuration_update` effort it was sent,
    /// replayed before this answer's items to the same model. Absent otherwise. (Boxed: a
    /// `Message`'s variants stay within 200 bytes of each other.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_thinking_level: Option<Box<String>>,
}

impl AssistantMessage {
    /// An empty response for `model`, as the adapter's first partial.
    pub fn empty(api: &str, provider: &str, model: &str) -> Self {
        AssistantMessage {
            content: Vec::new(),
            api: api.to_string(),
            provider: provider.to_string(),
            model: model.to_string(),
            response_id: None,
            response_model: None,
            usage: Usage::default(),
            stop_reason: StopReason::Stop,
            raw_stop_reason: None,
            error_message: None,
            timestamp: now_millis(),
            thinking_level: None,
            provider_thinking_level: None,
        }
    }

    /// The tool calls of this response, in order.
    pub fn tool_calls(&self) -> Vec<&ToolCall> {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// All text blocks joined with `\n`.
    pub fn text(&self) -> String {
        join_text(&self.content)
    }
}

/// The paired result of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ToolResultMessage {
    pub tool_call_id: String,
    /// Pi always writes it; foreign or hand-made files may not (read as "").
    #[serde(default)]
    pub tool_name: String,
    #[serde(deserialize_with = "content_or_string")]
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(type = "unknown"))]
    pub details: Option<Value>,
    #[serde(default)]
    pub is_error: bool,
    #[serde(default)]
    pub timestamp: i64,
}

/// Accepts a block list or, as older or foreign files have it, a bare string.
fn content_or_string<'de, D>(d: D) -> Result<Vec<ContentBlock>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    match UserContent::deserialize(d)? {
        UserContent::Text(t) => Ok(vec![ContentBlock::text(t)]),
        UserContent::Blocks(b) => Ok(b),
    }
}

/// A message of the conversation, tagged by `role`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum Message {
    User(UserMessage),
    Assistant(AssistantMessage),
    ToolResult(ToolResultMessage),
    /// A later system message kept at its place in a request's conversation (Pi 1.6 pi-ai's
    /// `SystemMessage` sent by `resolveTranscript` to a model whose `compat` has
    /// `supportsMidConvoSystemMessages`). Only a request's [`Context`] carries it: sessions
    /// store system messages as entries of their own, read by the session layer, so this
    /// variant is neither read from nor written to JSON (`role: "system"` does not parse as a
    /// [`Message`]).
    #[serde(skip)]
    #[cfg_attr(feature = "ts", ts(skip))]
    System(SystemMessage),
}

/// A system message of the conversation after the leading one (Pi 1.6 pi-ai `SystemMessage`
/// with `content` and `sections`; tool changes travel in the request's tool list here).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SystemMessage {
    /// Its `content` as text (blocks joined with `\n`).
    pub content: String,
    /// Its `sections` patch in stored order: `Some(text)` sets a section, `None` removes it.
    pub sections: Vec<(String, Option<String>)>,
}

impl SystemMessage {
    /// The text a provider sends for it mid-conversation, in Pi 1.6's wording (pi-ai
    /// `renderSystemMessageUpdate`): its content, then per section `Updated system prompt
    /// section "NAME":` + a blank line + the text, or `Removed system prompt section "NAME".`,
    /// joined by blank lines. Empty when it carries neither.
    pub fn update_text(&self) -> String {
        let mut parts = Vec::with_capacity(self.sections.len() + 1);
        if !self.content.is_empty() {
            parts.push(self.content.clone());
        }
        for (name, value) in &self.sections {
            parts.push(match value {
                Some(text) => format!("Updated system prompt section \"{name}\":\n\n{text}"),
                None => format!("Removed system prompt section \"{name}\"."),
            });
        }
        parts.join("\n\n")
    }
}

impl Message {
    /// A user message of one text block, stamped now (as Pi makes a prompt's message).
    pub fn user_text(text: impl Into<String>) -> Self {
        Message::User(UserMessage {
            content: UserContent::Blocks(vec![ContentBlock::text(text.into())]),
            timestamp: now_millis(),
        })
    }
}

/// A tool as the model sees it: name, description and JSON Schema of its arguments, and
/// whether it asks for constrained sampling (Pi 1.6's `constrainedSampling`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    #[cfg_attr(feature = "ts", ts(type = "unknown"))]
    pub parameters: Value,
    /// Pi 1.6's `constrainedSampling` of the tool (`None`: the tool asks for none). Only what
    /// goes over the wire depends on it: a model whose compat supports strict tools gets the
    /// tool with `strict: true` and its schema in the strict form
    /// ([`crate::api::strict::make_strict_json_schema`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(skip))]
    pub constrained_sampling: Option<ConstrainedSampling>,
}

/// A tool's request for constrained sampling (Pi 1.6's `constrainedSampling: {type:
/// "json_schema", strict}`; the grammar kind is not supported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConstrainedSampling {
    /// Strict JSON-schema sampling of the tool's arguments.
    JsonSchema {
        /// `prefer` (strict when the model and the schema allow it) or `require` (the request
        /// fails otherwise).
        strict: Strictness,
    },
}

impl ConstrainedSampling {
    /// `{type: "json_schema", strict: "prefer"}`: what Pi 1.6's read, bash, edit and write
    /// tools declare.
    pub const PREFER_JSON_SCHEMA: ConstrainedSampling = ConstrainedSampling::JsonSchema {
        strict: Strictness::Prefer,
    };
}

/// How much a tool needs its strict sampling ([`ConstrainedSampling`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strictness {
    /// Strict when possible, else the plain schema. (Pi's `require`, which fails the request
    /// instead, is asked for by no tool here.)
    Prefer,
}

/// Everything one model request is built from.
///
/// `system_prompt` is the request's leading system prompt. `messages` may hold
/// [`Message::System`] updates at their place (only for a model whose `compat` has
/// `supportsMidConvoSystemMessages`, [`crate::Model::supports_mid_convo_system_messages`]);
/// each provider sends them as Pi 1.6 does for its API.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub system_prompt: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn seed_session_messages_round_trip() {
        let lines = [
            json!({"role":"user","content":"Read config.ts","timestamp":1785232801000i64}),
            json!({"role":"assistant","content":[{"type":"toolCall","id":"call-1","name":"read","arguments":{"path":"config.ts"}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet","usage":{"input":21,"output":10,"cacheRead":0,"cacheWrite":0,"totalTokens":31,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"toolUse","timestamp":1785232802000i64}),
            json!({"role":"toolResult","toolCallId":"call-1","toolName":"read","content":[{"type":"text","text":"export const port = 3000;"}],"isError":false,"timestamp":1785232803000i64}),
        ];
        for line in lines {
            let m: Message = serde_json::from_value(line.clone()).unwrap();
            assert_eq!(serde_json::to_value(&m).unwrap(), line);
        }
    }

    /// The provider's total when it gave one, else the four counts added (Pi 1.6's
    /// `calculateContextTokens`), 0 for a response without usage.
    #[test]
    fn context_total_is_pis_calculate_context_tokens() {
        let mut u = Usage {
            input: 1000,
            output: 50,
            cache_read: 200,
            cache_write: 30,
            ..Usage::default()
        };
        assert_eq!(u.context_total(), 1280);
        u.total_tokens = 1500;
        assert_eq!(u.context_total(), 1500);
        assert_eq!(Usage::default().context_total(), 0);
    }

    /// Pi 1.6's wording (pi-ai `renderSystemMessageUpdate`), and a stored system message
    /// does not parse as a conversation message.
    #[test]
    fn system_message_update_text_is_pis() {
        let m = SystemMessage {
            content: "Note.".into(),
            sections: vec![("a".into(), Some("A2".into())), ("b".into(), None)],
        };
        assert_eq!(
            m.update_text(),
            "Note.\n\nUpdated system prompt section \"a\":\n\nA2\n\nRemoved system prompt section \"b\"."
        );
        assert_eq!(SystemMessage::default().update_text(), "");
        assert!(serde_json::from_value::<Message>(
            json!({"role":"system","content":"","sections":{"a":"A"},"timestamp":1})
        )
        .is_err());
    }

    #[test]
    fn tool_result_accepts_string_content() {
        let m: Message = serde_json::from_value(
            json!({"role":"toolResult","toolCallId":"c","toolName":"ls","content":"a.txt"}),
        )
        .unwrap();
        let Message::ToolResult(r) = m else {
            panic!("not a tool result")
        };
        assert_eq!(r.content, vec![ContentBlock::text("a.txt")]);
    }
}

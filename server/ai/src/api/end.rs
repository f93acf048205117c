//! A body that ends without its format's end marker (case STRM-04): how the three wire formats
//! judge it, the same way.
//!
//! The end markers are `finish_reason` / `data: [DONE]` (`openai-completions`),
//! `response.completed` / `response.incomplete` (`openai-responses`), `message_delta` with its
//! `stop_reason` / `message_stop` (`anthropic-messages`). Some servers end a complete answer with
//! none of them: the connection just ends. Like Pi, that answer is taken as finished when what
//! streamed is complete, with a warning in the log; what cannot be complete stays a retryable
//! error (case 19.1: a cut stream never yields a half call):
//!
//! - the body ended inside an event (its last event unread): cut;
//! - nothing was answered (no text, no tool call): "stream ended without a response";
//! - a block still open in a format that ends its blocks, or a tool call whose arguments are
//!   not yet a complete JSON object (none streamed, or cut): cut;
//! - the model's `compat.requireFinishReason: true`: an end marker is required, cut;
//! - else tool calls → `toolUse`, text → `stop`.
//!
//! A transport failure (connection reset, a chunked body cut short) never reaches here: it is
//! [`super::SseBody::next`]'s retryable error.

use serde_json::Value;

use crate::errors::ProviderError;
use crate::models::Model;
use crate::stream::MessageBuilder;
use crate::types::StopReason;

/// How a format's body ended without its end marker.
pub(crate) struct UnmarkedEnd {
    /// [`super::SseBody::ended_cleanly`]: the body ended at an event boundary.
    pub clean: bool,
    /// The format ends each block with an event of its own (Anthropic, Responses): a block
    /// still open at the end was cut. `false` for chat completions, whose blocks only end with
    /// the response.
    pub ends_blocks: bool,
    /// The error text of a cut response.
    pub cut: &'static str,
    /// The error text when nothing was answered.
    pub empty: &'static str,
}

/// The stop reason of a body that ended without its end marker, or the retryable
/// [`ProviderError::Network`] error of a cut one (see the module's rules).
pub(crate) fn judge(
    model: &Model,
    b: &MessageBuilder,
    end: UnmarkedEnd,
) -> Result<StopReason, ProviderError> {
    let cut = || {
        Err(ProviderError::Network {
            message: end.cut.into(),
        })
    };
    let has_calls = b.has_tool_calls();
    if !has_calls && !b.has_text() {
        return Err(ProviderError::Network {
            message: end.empty.into(),
        });
    }
    if !end.clean
        || (end.ends_blocks && b.has_open_blocks())
        || b.open_call_unfinished()
        || model
            .compat
            .get("requireFinishReason")
            .and_then(Value::as_bool)
            == Some(true)
    {
        return cut();
    }
    let reason = if has_calls {
        StopReason::ToolUse
    } else {
        StopReason::Stop
    };
    tracing::warn!(
        "{}/{}: the stream ended without its end marker after a complete answer; taking it as {}",
        model.provider,
        model.id,
        if has_calls { "toolUse" } else { "stop" }
    );
    Ok(reason)
}

//! The offline scripted model: replays assistant responses from a script, streamed in small
//! text chunks like a real provider. Used by the headless main job when no provider is
//! configured, so a fresh clone runs end to end without a key.
//!
//! A script is JSON: `{"responses":[{"text"?, "toolCalls"?: [{"name","arguments"}], "stopReason"?, "delayMs"?}]}`.
//! Response `n` answers the request whose context already holds `n` assistant messages; past
//! the end the model says the script is exhausted.

use tokio_util::sync::CancellationToken;

use crate::errors::ProviderError;
use crate::models::Model;
use crate::stream::{MessageBuilder, StreamSender};
use crate::types::{Context, Message, StopReason};

pub use crate::script::{Script, ScriptedCall, ScriptedResponse};

/// Which response answers `context`: the number of assistant messages already in it.
pub fn response_index(context: &Context) -> usize {
    context
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Assistant(_)))
        .count()
}

/// Streams response `index` of the model's script.
pub async fn run(model: Model, index: usize, tx: StreamSender, cancel: CancellationToken) {
    let Ok(mut b) = MessageBuilder::start(tx, &model).await else {
        return;
    };
    let resp = model
        .script
        .as_ref()
        .and_then(|s| s.responses.get(index).cloned())
        .unwrap_or(ScriptedResponse {
            text: Some("(The offline script has no more responses.)".into()),
            tool_calls: Vec::new(),
            stop_reason: None,
            delay_ms: 0,
        });
    if resp.delay_ms > 0 {
        tokio::select! {
            _ = cancel.cancelled() => {
                b.fail(ProviderError::Aborted).await;
                return;
            }
            _ = tokio::time::sleep(std::time::Duration::from_millis(resp.delay_ms)) => {}
        }
    }
    if let Some(text) = &resp.text {
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(12) {
            if cancel.is_cancelled() {
                b.fail(ProviderError::Aborted).await;
                return;
            }
            let s: String = chunk.iter().collect();
            // Each chunk goes out before the pause, as a read's deltas do.
            if b.text_delta("text", &s).await.is_err() || b.flush().await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    let turn = index + 1;
    for (i, c) in resp.tool_calls.iter().enumerate() {
        let key = format!("c{i}");
        let id = format!("scripted_{turn}_{i}");
        // Complete arguments arrive with the start, as Anthropic's `input` does.
        if b.tool_call_start(&key, &id, &c.name, Some(c.arguments.clone()))
            .await
            .is_err()
        {
            return;
        }
    }
    let reason = resp.stop_reason.unwrap_or(if resp.tool_calls.is_empty() {
        StopReason::Stop
    } else {
        StopReason::ToolUse
    });
    let _ = b.finish(reason).await;
}

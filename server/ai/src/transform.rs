//! Provider-neutral repair of a message list before any wire conversion.
//!
//! A provider rejects a request in which a tool call has no paired result, or a result has no
//! call (cases PAIR-01, PAIR-02, PAIR-04). The stored session is never changed; this builds the
//! request's view of it:
//! - assistant messages that ended in `error` or `aborted` without tool calls are dropped (they
//!   carry no usable content and some providers reject empty assistant turns);
//! - every tool call gets exactly one result right after its assistant message, in call order:
//!   missing ones become error results saying no result was recorded;
//! - results whose call is not in the preceding assistant message are dropped.

use std::collections::HashMap;

use crate::types::{ContentBlock, Message, StopReason, ToolResultMessage};

/// Text of a synthetic result for a call that has no recorded outcome.
pub const MISSING_RESULT_TEXT: &str =
    "No result was recorded for this tool call (the run was interrupted).";

/// Returns `messages` with every tool call paired and no orphan results (see module docs).
pub fn pair_tool_results(messages: &[Message]) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant(a) => {
                let calls = a.tool_calls();
                if calls.is_empty() {
                    let failed = matches!(a.stop_reason, StopReason::Error | StopReason::Aborted);
                    if !failed {
                        out.push(messages[i].clone());
                    }
                    i += 1;
                    continue;
                }
                out.push(messages[i].clone());
                let mut j = i + 1;
                let mut results: HashMap<&str, &ToolResultMessage> = HashMap::new();
                while let Some(Message::ToolResult(r)) = messages.get(j) {
                    results.entry(r.tool_call_id.as_str()).or_insert(r);
                    j += 1;
                }
                for c in calls {
                    match results.get(c.id.as_str()) {
                        Some(r) => out.push(Message::ToolResult((*r).clone())),
                        None => out.push(Message::ToolResult(ToolResultMessage {
                            tool_call_id: c.id.clone(),
                            tool_name: c.name.clone(),
                            content: vec![ContentBlock::text(MISSING_RESULT_TEXT)],
                            details: None,
                            is_error: true,
                            timestamp: a.timestamp,
                        })),
                    }
                }
                i = j;
            }
            // A result not directly after its call's assistant message is an orphan.
            Message::ToolResult(_) => i += 1,
            Message::User(_) => {
                out.push(messages[i].clone());
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(v: serde_json::Value) -> Vec<Message> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn aborted_call_gets_error_result_before_next_user() {
        // PAIR-01: assistant call aborted, no result, then a new user message.
        let m = msgs(json!([
            {"role":"user","content":"run the tests"},
            {"role":"assistant","content":[{"type":"toolCall","id":"toolu_01A","name":"bash","arguments":{"command":"sleep 60"}}],"stopReason":"aborted"},
            {"role":"user","content":"never mind, list files"}
        ]));
        let out = serde_json::to_value(pair_tool_results(&m)).unwrap();
        assert_eq!(
            out[2],
            json!({"role":"toolResult","toolCallId":"toolu_01A","toolName":"bash",
            "content":[{"type":"text","text":MISSING_RESULT_TEXT}],"isError":true,"timestamp":0})
        );
        assert_eq!(out.as_array().unwrap().len(), 4);
    }

    #[test]
    fn orphan_result_dropped_and_real_call_repaired() {
        // PAIR-02: r9 answers call_9 but sits after the aborted a1.
        let m = msgs(json!([
            {"role":"user","content":"hi"},
            {"role":"assistant","content":[],"stopReason":"aborted"},
            {"role":"toolResult","toolCallId":"call_9","toolName":"ls","content":"a.txt"},
            {"role":"user","content":"try again"},
            {"role":"assistant","content":[{"type":"toolCall","id":"call_9","name":"ls","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"call_9","toolName":"ls","content":"a.txt"}
        ]));
        let out = pair_tool_results(&m);
        let roles: Vec<&str> = out
            .iter()
            .map(|m| match m {
                Message::User(_) => "user",
                Message::Assistant(_) => "assistant",
                Message::ToolResult(_) => "toolResult",
            })
            .collect();
        assert_eq!(roles, ["user", "user", "assistant", "toolResult"]);
    }
}

//! The `anthropic-messages` wire format: `POST {baseUrl}/v1/messages` with `stream: true`.
//!
//! Source of the shapes: Anthropic's Messages API streaming reference (events `message_start`,
//! `content_block_start|delta|stop`, `message_delta`, `message_stop`, `ping`, `error`). Tool
//! results travel as `tool_result` blocks in a user turn; consecutive user-role messages are
//! merged (results first) because the API needs strict alternation (case PAIR-05).

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{open_sse, StreamOptions};
use crate::models::Model;
use crate::stream::{AssistantEvent, MessageBuilder};
use crate::transform::pair_tool_results;
use crate::types::{ContentBlock, Context, Message, StopReason, Usage, UserContent};

/// The `anthropic-version` header value sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Replaces characters outside `[A-Za-z0-9_-]` (Anthropic's tool-use id pattern) with `_`.
fn wire_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn user_blocks(content: &UserContent) -> Vec<Value> {
    match content {
        UserContent::Text(t) => vec![json!({"type":"text","text":t})],
        UserContent::Blocks(b) => b.iter().filter_map(block_to_wire).collect(),
    }
}

fn block_to_wire(b: &ContentBlock) -> Option<Value> {
    match b {
        ContentBlock::Text(t) if t.text.is_empty() => None,
        ContentBlock::Text(t) => Some(json!({"type":"text","text":t.text})),
        ContentBlock::Image(i) => Some(
            json!({"type":"image","source":{"type":"base64","media_type":i.mime_type,"data":i.data}}),
        ),
        ContentBlock::Thinking(t) => match (&t.thinking_signature, t.redacted) {
            (Some(sig), true) => Some(json!({"type":"redacted_thinking","data":sig})),
            (Some(sig), false) => {
                Some(json!({"type":"thinking","thinking":t.thinking,"signature":sig}))
            }
            // Thinking without a signature cannot be replayed as thinking: send it as text.
            (None, _) if t.thinking.is_empty() => None,
            (None, _) => Some(json!({"type":"text","text":t.thinking})),
        },
        ContentBlock::ToolCall(c) => {
            Some(json!({"type":"tool_use","id":wire_id(&c.id),"name":c.name,"input":c.arguments}))
        }
    }
}

/// Converts provider-neutral messages to Anthropic `messages`.
pub fn convert_messages(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    for m in pair_tool_results(messages) {
        let (role, blocks) = match &m {
            Message::User(u) => ("user", user_blocks(&u.content)),
            Message::Assistant(a) => (
                "assistant",
                a.content.iter().filter_map(block_to_wire).collect(),
            ),
            Message::ToolResult(r) => {
                let mut content: Vec<Value> = r.content.iter().filter_map(block_to_wire).collect();
                if content.is_empty() {
                    content.push(json!({"type":"text","text": if r.is_error { "error" } else { "(no output)" }}));
                }
                (
                    "user",
                    vec![
                        json!({"type":"tool_result","tool_use_id":wire_id(&r.tool_call_id),"content":content,"is_error":r.is_error}),
                    ],
                )
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, prev)) if last == role && role == "user" => prev.extend(blocks),
            _ => out.push((role.to_string(), blocks)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// The request body for `context` (pure; no I/O).
pub fn build_request(model: &Model, context: &Context, options: &StreamOptions) -> Value {
    let mut body = json!({
        "model": model.id,
        "max_tokens": options.max_tokens.unwrap_or(model.max_tokens),
        "stream": true,
        "messages": convert_messages(&context.messages),
    });
    if !context.system_prompt.is_empty() {
        body["system"] = json!([{"type":"text","text":context.system_prompt}]);
    }
    if !context.tools.is_empty() {
        body["tools"] = context
            .tools
            .iter()
            .map(|t| json!({"name":t.name,"description":t.description,"input_schema":t.parameters}))
            .collect();
    }
    body
}

fn map_stop(reason: &str) -> StopReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => StopReason::Length,
        "tool_use" => StopReason::ToolUse,
        "refusal" => StopReason::Error,
        _ => StopReason::Stop,
    }
}

fn read_usage(u: &Value, into: &mut Usage) {
    let get = |k: &str| u.get(k).and_then(Value::as_u64);
    if let Some(v) = get("input_tokens") {
        into.input = v;
    }
    if let Some(v) = get("output_tokens") {
        into.output = v;
    }
    if let Some(v) = get("cache_read_input_tokens") {
        into.cache_read = v;
    }
    if let Some(v) = get("cache_creation_input_tokens") {
        into.cache_write = v;
    }
}

/// Streams one response; every outcome ends in exactly one terminal event on `tx`.
pub async fn run(
    model: Model,
    body: Value,
    tx: mpsc::Sender<AssistantEvent>,
    cancel: CancellationToken,
) {
    let Ok(mut b) = MessageBuilder::start(tx, &model.api, &model.provider, &model.id).await else {
        return;
    };
    let base = model.base_url.trim_end_matches('/');
    let url = if base.ends_with("/v1") {
        format!("{base}/messages")
    } else {
        format!("{base}/v1/messages")
    };
    let mut headers: Vec<(String, String)> =
        vec![("anthropic-version".into(), ANTHROPIC_VERSION.into())];
    if let Some(k) = &model.api_key {
        headers.push(("x-api-key".into(), k.clone()));
    }
    headers.extend(model.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut sse = match open_sse(&url, &headers, &body, &cancel).await {
        Ok(s) => s,
        Err(f) => return f.end(b).await,
    };
    let mut usage = Usage::default();
    let mut stop: Option<StopReason> = None;
    loop {
        let ev = match sse.next(&cancel).await {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(f) => return f.end(b).await,
        };
        if ev.data.trim().is_empty() {
            continue;
        }
        let data: Value = match serde_json::from_str(&ev.data) {
            Ok(v) => v,
            Err(e) => {
                b.fail(
                    StopReason::Error,
                    format!(
                        "invalid JSON in {} event: {e}",
                        if ev.event.is_empty() {
                            "SSE"
                        } else {
                            &ev.event
                        }
                    ),
                )
                .await;
                return;
            }
        };
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(ev.event.as_str());
        let key = data
            .get("index")
            .and_then(Value::as_u64)
            .map(|i| i.to_string())
            .unwrap_or_default();
        let step = match kind {
            "message_start" => {
                let m = &data["message"];
                if let Some(id) = m.get("id").and_then(Value::as_str) {
                    b.message_mut().response_id = Some(id.to_string());
                }
                read_usage(&m["usage"], &mut usage);
                Ok(())
            }
            "content_block_start" => {
                let cb = &data["content_block"];
                match cb.get("type").and_then(Value::as_str) {
                    Some("text") => b.text_delta(&key, cb["text"].as_str().unwrap_or("")).await,
                    Some("thinking") => {
                        b.thinking_delta(&key, cb["thinking"].as_str().unwrap_or(""))
                            .await
                    }
                    Some("redacted_thinking") => {
                        let r = b.thinking_delta(&key, "").await;
                        b.thinking_signature(&key, cb["data"].as_str().unwrap_or(""));
                        b.mark_redacted(&key);
                        r
                    }
                    Some("tool_use") | Some("server_tool_use") => {
                        b.tool_call_start(
                            &key,
                            cb["id"].as_str().unwrap_or(""),
                            cb["name"].as_str().unwrap_or(""),
                            cb.get("input").cloned(),
                        )
                        .await
                    }
                    _ => Ok(()),
                }
            }
            "content_block_delta" => {
                let d = &data["delta"];
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        b.text_delta(&key, d["text"].as_str().unwrap_or("")).await
                    }
                    Some("thinking_delta") => {
                        b.thinking_delta(&key, d["thinking"].as_str().unwrap_or(""))
                            .await
                    }
                    Some("signature_delta") => {
                        b.thinking_signature(&key, d["signature"].as_str().unwrap_or(""));
                        Ok(())
                    }
                    Some("input_json_delta") => {
                        b.tool_call_delta(&key, d["partial_json"].as_str().unwrap_or(""))
                            .await
                    }
                    _ => Ok(()),
                }
            }
            "content_block_stop" => b.end_block(&key).await,
            "message_delta" => {
                if let Some(r) = data["delta"].get("stop_reason").and_then(Value::as_str) {
                    stop = Some(map_stop(r));
                }
                read_usage(&data["usage"], &mut usage);
                Ok(())
            }
            "message_stop" => break,
            "error" => {
                let e = &data["error"];
                let msg = format!(
                    "{}: {}",
                    e.get("type").and_then(Value::as_str).unwrap_or("error"),
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("provider error")
                );
                b.fail(StopReason::Error, msg).await;
                return;
            }
            _ => Ok(()),
        };
        if step.is_err() {
            return; // consumer went away: drop the body
        }
    }
    b.set_usage(usage);
    match stop {
        Some(StopReason::Error) => {
            b.fail(StopReason::Error, "the model refused to answer".into())
                .await;
        }
        Some(reason) => {
            let _ = b.finish(reason).await;
        }
        None => {
            b.fail(
                StopReason::Error,
                "stream ended before the response was complete".into(),
            )
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_and_next_user_merge_results_first() {
        let m: Vec<Message> = serde_json::from_value(json!([
            {"role":"user","content":"q"},
            {"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"ls","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"t1","toolName":"ls","content":[{"type":"text","text":"a"}],"isError":false},
            {"role":"user","content":"what's 2+2"}
        ]))
        .unwrap();
        assert_eq!(
            Value::Array(convert_messages(&m)),
            json!([
                {"role":"user","content":[{"type":"text","text":"q"}]},
                {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{}}]},
                {"role":"user","content":[
                    {"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a"}],"is_error":false},
                    {"type":"text","text":"what's 2+2"}]}
            ])
        );
    }
}

//! The `openai-completions` wire format: `POST {baseUrl}/chat/completions` with `stream: true`,
//! for OpenAI and the servers that copy it (ollama, llama.cpp, vLLM, …).
//!
//! Source of the shapes: OpenAI's Chat Completions streaming reference, plus the quirks of real
//! servers recorded in the cases: tool-call deltas without `index` (STRM-01: an explicit index
//! wins; else a new `id` opens a new call; else the fragment continues the last call),
//! arguments sent as an object (STRM-03), a stream that ends without `finish_reason`
//! (STRM-04: tool calls → `toolUse`, text → `stop`, nothing → error), and reasoning in
//! `reasoning_content` or `reasoning` (STRM-06). Outbound `arguments` are always a JSON string.

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{join_url, open_sse, StreamOptions};
use crate::models::Model;
use crate::stream::{AssistantEvent, MessageBuilder};
use crate::transform::pair_tool_results;
use crate::types::{ContentBlock, Context, Message, StopReason, Usage, UserContent};

fn compat_bool(model: &Model, key: &str) -> Option<bool> {
    model.compat.get(key).and_then(Value::as_bool)
}

fn tool_text(blocks: &[ContentBlock]) -> String {
    let text = crate::types::join_text(blocks);
    if text.is_empty() {
        "(no output)".to_string()
    } else {
        text
    }
}

/// Converts provider-neutral messages to chat-completions `messages` (after the system one).
pub fn convert_messages(model: &Model, messages: &[Message]) -> Vec<Value> {
    let reasoning_replay =
        compat_bool(model, "requiresReasoningContentOnAssistantMessages").unwrap_or(false);
    let mut out = Vec::new();
    for m in pair_tool_results(messages) {
        match &m {
            Message::User(u) => match &u.content {
                UserContent::Text(t) => out.push(json!({"role":"user","content":t})),
                UserContent::Blocks(blocks) => {
                    let parts: Vec<Value> = blocks
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) => Some(json!({"type":"text","text":t.text})),
                            ContentBlock::Image(i) => Some(json!({"type":"image_url","image_url":{"url":format!("data:{};base64,{}", i.mime_type, i.data)}})),
                            _ => None,
                        })
                        .collect();
                    if !parts.is_empty() {
                        out.push(json!({"role":"user","content":parts}));
                    }
                }
            },
            Message::Assistant(a) => {
                let text = a.text();
                let calls: Vec<Value> = a
                    .tool_calls()
                    .iter()
                    .map(|c| json!({"id":c.id,"type":"function","function":{"name":c.name,"arguments":c.arguments.to_string()}}))
                    .collect();
                if text.is_empty() && calls.is_empty() {
                    continue;
                }
                let mut msg = json!({"role":"assistant","content": if text.is_empty() { Value::Null } else { Value::String(text) }});
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                if reasoning_replay {
                    let thinking: String = a
                        .content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Thinking(t) => Some(t.thinking.as_str()),
                            _ => None,
                        })
                        .collect();
                    msg["reasoning_content"] = Value::String(thinking);
                }
                out.push(msg);
            }
            Message::ToolResult(r) => {
                out.push(json!({"role":"tool","tool_call_id":r.tool_call_id,"content":tool_text(&r.content)}));
            }
        }
    }
    out
}

/// The request body for `context` (pure; no I/O).
pub fn build_request(model: &Model, context: &Context, options: &StreamOptions) -> Value {
    let mut messages = Vec::new();
    if !context.system_prompt.is_empty() {
        let role = if model.reasoning && compat_bool(model, "supportsDeveloperRole").unwrap_or(true)
        {
            "developer"
        } else {
            "system"
        };
        messages.push(json!({"role":role,"content":context.system_prompt}));
    }
    messages.extend(convert_messages(model, &context.messages));
    let max_field = model
        .compat
        .get("maxTokensField")
        .and_then(Value::as_str)
        .unwrap_or("max_completion_tokens")
        .to_string();
    let mut body = json!({
        "model": model.id,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    body[max_field] = json!(options.max_tokens.unwrap_or(model.max_tokens));
    if !context.tools.is_empty() {
        body["tools"] = context
            .tools
            .iter()
            .map(|t| json!({"type":"function","function":{"name":t.name,"description":t.description,"parameters":t.parameters}}))
            .collect();
    }
    body
}

fn map_finish(reason: &str) -> StopReason {
    match reason {
        "length" => StopReason::Length,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::Error,
        _ => StopReason::Stop,
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
    let url = join_url(&model.base_url, "chat/completions");
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Some(k) = &model.api_key {
        headers.push(("authorization".into(), format!("Bearer {k}")));
    }
    headers.extend(model.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut sse = match open_sse(&url, &headers, &body, &cancel).await {
        Ok(s) => s,
        Err(f) => return f.end(b).await,
    };
    let mut usage = Usage::default();
    let mut finish: Option<StopReason> = None;
    // Key of the tool call the last id-less, index-less fragment continues (STRM-01).
    let mut last_call: Option<(String, String)> = None; // (key, id)
    let mut calls_opened = 0usize;
    loop {
        let ev = match sse.next(&cancel).await {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(f) => return f.end(b).await,
        };
        let data = ev.data.trim();
        if data.is_empty() {
            continue;
        }
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => {
                b.fail(
                    StopReason::Error,
                    format!("invalid JSON in stream chunk: {e}"),
                )
                .await;
                return;
            }
        };
        if let Some(err) = chunk.get("error") {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| err.to_string());
            b.fail(StopReason::Error, msg).await;
            return;
        }
        if let (Some(id), None) = (
            chunk.get("id").and_then(Value::as_str),
            &b.partial().response_id,
        ) {
            b.message_mut().response_id = Some(id.to_string());
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            let prompt = u["prompt_tokens"].as_u64().unwrap_or(0);
            let cached = u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0);
            usage.input = prompt.saturating_sub(cached);
            usage.cache_read = cached;
            usage.output = u["completion_tokens"].as_u64().unwrap_or(0);
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            continue;
        };
        let delta = &choice["delta"];
        let mut step = Ok(());
        for field in ["reasoning_content", "reasoning", "reasoning_text"] {
            if let Some(t) = delta
                .get(field)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                step = step.and(b.thinking_delta("thinking", t).await);
            }
        }
        if let Some(t) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            step = step.and(b.text_delta("text", t).await);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for tc in calls {
                let id = tc
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty());
                let name = tc["function"].get("name").and_then(Value::as_str);
                let key = match (tc.get("index").and_then(Value::as_u64), id, &last_call) {
                    (Some(i), _, _) => format!("i{i}"),
                    (None, Some(id), Some((k, last_id))) if id == last_id => k.clone(),
                    (None, Some(id), _) => format!("id:{id}"),
                    (None, None, Some((k, _))) => k.clone(),
                    (None, None, None) => "i0".to_string(),
                };
                if !b.is_open(&key) {
                    calls_opened += 1;
                    step = step.and(
                        b.tool_call_start(&key, id.unwrap_or(""), name.unwrap_or(""), None)
                            .await,
                    );
                } else {
                    b.tool_call_fill(&key, id, name);
                }
                let known_id = id.map(str::to_string).or_else(|| {
                    last_call
                        .as_ref()
                        .filter(|(k, _)| *k == key)
                        .map(|(_, i)| i.clone())
                });
                last_call = Some((key.clone(), known_id.unwrap_or_default()));
                match tc["function"].get("arguments") {
                    Some(Value::String(s)) => step = step.and(b.tool_call_delta(&key, s).await),
                    Some(v @ Value::Object(_)) => {
                        step = step.and(b.tool_call_delta(&key, &v.to_string()).await)
                    }
                    _ => {}
                }
            }
        }
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            finish = Some(map_finish(r));
        }
        if step.is_err() {
            return;
        }
    }
    b.set_usage(usage);
    // Calls without an id get a stable one so results can pair with them.
    let mut n = 0;
    for block in b.message_mut().content.iter_mut() {
        if let ContentBlock::ToolCall(c) = block {
            n += 1;
            if c.id.is_empty() {
                c.id = format!("call_{n}");
            }
        }
    }
    let has_calls = calls_opened > 0;
    let has_text = !b.partial().text().is_empty();
    let reason = match finish {
        Some(StopReason::Error) => {
            b.fail(
                StopReason::Error,
                "the response was stopped by the provider's content filter".into(),
            )
            .await;
            return;
        }
        Some(StopReason::Stop) if has_calls => StopReason::ToolUse,
        Some(r) => r,
        None if has_calls => StopReason::ToolUse,
        None if has_text => StopReason::Stop,
        None => {
            b.fail(StopReason::Error, "stream ended without a response".into())
                .await;
            return;
        }
    };
    let _ = b.finish(reason).await;
}

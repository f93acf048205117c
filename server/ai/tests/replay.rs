//! Adapters replay recorded-shape SSE bodies (`fixtures/sse/<api>/*`) from a real loopback HTTP
//! server, delivered in the reads the test prescribes, and must rebuild exactly the message (and
//! events) the case names; HTTP error responses must come back typed; request bodies built for
//! a stored conversation are asserted whole.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pi_ai::errors::{ErrorClass, ProviderError};
use pi_ai::{
    AssistantEvent, AssistantMessage, ContentBlock, Context, Message, Model, StopReason,
    StreamOptions, ToolCall, ToolSpec,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP response: status, extra headers, and the body as separate reads.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    reads: Vec<Vec<u8>>,
    gap: Duration,
}

fn sse(reads: Vec<Vec<u8>>) -> Reply {
    Reply {
        status: 200,
        headers: vec![("content-type", "text/event-stream".into())],
        reads,
        gap: Duration::from_millis(5),
    }
}

fn http_error(status: u16, headers: Vec<(&'static str, String)>, body: &str) -> Reply {
    let mut h = vec![("content-type", "application/json".into())];
    h.extend(headers);
    Reply {
        status,
        headers: h,
        reads: vec![body.as_bytes().to_vec()],
        gap: Duration::ZERO,
    }
}

/// Serves `replies` to successive connections; returns the base URL and the request bodies.
async fn serve(replies: Vec<Reply>) -> (String, Arc<Mutex<Vec<Value>>>) {
    let (base, bodies, _) = serve_with_heads(replies).await;
    (base, bodies)
}

/// [`serve`], also returning each request's head (request line and headers, lowercased).
async fn serve_with_heads(replies: Vec<Reply>) -> (String, Bodies, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen_heads = heads.clone();
    tokio::spawn(async move {
        for reply in replies {
            let (mut sock, _) = listener.accept().await.unwrap();
            sock.set_nodelay(true).unwrap();
            let mut buf = Vec::new();
            let mut tmp = [0u8; 8192];
            // Read headers and the body announced by Content-Length.
            loop {
                let n = sock.read(&mut tmp).await.unwrap();
                buf.extend_from_slice(&tmp[..n]);
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            l.strip_prefix("content-length: ")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    while buf.len() < end + 4 + len {
                        let n = sock.read(&mut tmp).await.unwrap();
                        buf.extend_from_slice(&tmp[..n]);
                    }
                    let body =
                        serde_json::from_slice(&buf[end + 4..end + 4 + len]).unwrap_or(Value::Null);
                    seen.lock().unwrap().push(body);
                    seen_heads.lock().unwrap().push(head);
                    break;
                }
            }
            let mut head = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", reply.status);
            for (k, v) in &reply.headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            sock.write_all(head.as_bytes()).await.unwrap();
            for r in reply.reads {
                sock.write_all(&r).await.unwrap();
                sock.flush().await.unwrap();
                if !reply.gap.is_zero() {
                    tokio::time::sleep(reply.gap).await;
                }
            }
            let _ = sock.shutdown().await;
        }
    });
    (format!("http://{addr}"), bodies, heads)
}

/// The request bodies a test server saw.
type Bodies = Arc<Mutex<Vec<Value>>>;

fn model(api: &str, base: String) -> Model {
    let api: pi_ai::Api = api.parse().unwrap();
    let base = if api == pi_ai::Api::AnthropicMessages {
        base
    } else {
        format!("{base}/v1")
    };
    Model {
        api_key: Some("k".into()),
        ..Model::new(api, "p", "m", &base)
    }
}

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../../fixtures/sse/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn go() -> Context {
    Context {
        system_prompt: String::new(),
        messages: vec![Message::user_text("go")],
        tools: vec![],
    }
}

/// Streams one response for `m` and returns every event (the last is terminal).
async fn events(m: &Model, ctx: &Context) -> Vec<AssistantEvent> {
    let mut s = pi_ai::stream(m, ctx, StreamOptions::default());
    let mut out = Vec::new();
    while let Some(e) = s.next().await {
        out.push(e);
    }
    out
}

async fn replay_reply(api: &str, reply: Reply) -> Vec<AssistantEvent> {
    let (base, _) = serve(vec![reply]).await;
    events(&model(api, base), &go()).await
}

async fn replay(api: &str, reads: Vec<Vec<u8>>) -> AssistantMessage {
    let evs = replay_reply(api, sse(reads)).await;
    evs.last().unwrap().terminal_message().unwrap().clone()
}

fn failure(evs: &[AssistantEvent]) -> ProviderError {
    evs.last().unwrap().failure().unwrap().clone()
}

/// The message as JSON with its timestamp zeroed, for whole-value comparison.
fn value(m: &AssistantMessage) -> Value {
    let mut m = m.clone();
    m.timestamp = 0;
    serde_json::to_value(m).unwrap()
}

fn call(id: &str, name: &str, args: Value) -> ContentBlock {
    ContentBlock::ToolCall(ToolCall::new(id, name, args))
}

/// [`kinds`] with consecutive text (or thinking) deltas counted once: how many of them a
/// stream gives depends on how its bytes were read (one per block per read).
fn joined_kinds(evs: &[AssistantEvent]) -> Vec<String> {
    let mut k = kinds(evs);
    k.dedup_by(|a, b| a == b && (a == "text_delta" || a == "thinking_delta"));
    k
}

fn kinds(evs: &[AssistantEvent]) -> Vec<String> {
    evs.iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

const ZERO_USAGE: &str = r#"{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}"#;

#[tokio::test]
async fn strm01_calls_without_index_split_by_id() {
    let m = replay(
        "openai-completions",
        vec![fixture("openai-completions/strm01-no-index.sse")],
    )
    .await;
    assert_eq!(
        value(&m),
        json!({"content":[
            {"type":"toolCall","id":"call_a","name":"read","arguments":{"path":"a.txt"}},
            {"type":"toolCall","id":"call_b","name":"read","arguments":{"path":"b.txt"}}],
            "api":"openai-completions","provider":"p","model":"m",
            "usage":serde_json::from_str::<Value>(ZERO_USAGE).unwrap(),
            // No usage chunk: no `reasoning`, no `totalFromProvider` (Pi 1.6 computes no
            // cost then); the finish reason as sent.
            "stopReason":"toolUse","rawStopReason":"tool_calls","timestamp":0})
    );
}

#[tokio::test]
async fn strm03_arguments_as_an_object() {
    let m = replay(
        "openai-completions",
        vec![fixture("openai-completions/strm03-args-object.sse")],
    )
    .await;
    assert_eq!(m.content, vec![call("c1", "ls", json!({"path": "."}))]);
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn strm04_stream_without_finish_reason() {
    let m = replay(
        "openai-completions",
        vec![fixture("openai-completions/strm04-no-finish-reason.sse")],
    )
    .await;
    assert_eq!(
        (m.content, m.stop_reason),
        (vec![call("c1", "ls", json!({}))], StopReason::ToolUse)
    );
    // Text, then `[DONE]` without a finish_reason: the documented tolerance, a `stop`.
    let text_only =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
            .to_vec();
    let m = replay("openai-completions", vec![text_only.clone()]).await;
    assert_eq!(
        (m.text(), m.stop_reason),
        ("hi".to_string(), StopReason::Stop)
    );
    // The same without `[DONE]` (a plain EOF after a complete answer): finished, the call
    // `toolUse`, the text `stop` (STRM-04, lenient by default as Pi).
    let call_eof = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n".to_vec();
    let text_eof =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n".to_vec();
    let m = replay("openai-completions", vec![call_eof.clone()]).await;
    assert_eq!(
        (m.content, m.stop_reason, m.error_message),
        (vec![call("c1", "ls", json!({}))], StopReason::ToolUse, None)
    );
    let m = replay("openai-completions", vec![text_eof.clone()]).await;
    assert_eq!(
        (m.text(), m.stop_reason, m.error_message),
        ("hi".to_string(), StopReason::Stop, None)
    );
    // What cannot be complete at a plain EOF stays a retryable cut: the body ending inside an
    // event, a call without arguments yet, a call whose arguments are cut.
    let cut_inside_event = [&text_eof[..], &call_eof[..call_eof.len() - 1]].concat();
    let no_arguments = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\",\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"\"}}]}}]}\n\n".to_vec();
    let cut_arguments = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"write\",\"arguments\":\"{\\\"path\\\": \\\"a\"}}]}}]}\n\n".to_vec();
    for body in [cut_inside_event, no_arguments, cut_arguments] {
        let evs = replay_reply("openai-completions", sse(vec![body.clone()])).await;
        let m = evs.last().unwrap().terminal_message().unwrap();
        assert_eq!(
            (m.stop_reason, m.error_message.as_deref()),
            (
                StopReason::Error,
                Some("stream ended before the response was complete (no finish_reason or [DONE])")
            ),
            "{}",
            String::from_utf8_lossy(&body)
        );
        assert!(failure(&evs).is_retryable());
    }
    // `compat.requireFinishReason` requires the end marker: the plain EOF is a cut.
    for body in [call_eof, text_eof] {
        let (base, _) = serve(vec![sse(vec![body])]).await;
        let mut strict = model("openai-completions", base);
        strict.compat = json!({"requireFinishReason": true});
        let evs = events(&strict, &go()).await;
        let m = evs.last().unwrap().terminal_message().unwrap();
        assert_eq!(
            (m.stop_reason, m.error_message.as_deref()),
            (
                StopReason::Error,
                Some("stream ended before the response was complete (no finish_reason or [DONE])")
            )
        );
        assert!(failure(&evs).is_retryable());
    }
    // With `compat.requireFinishReason` the text-only stream with `[DONE]` is a retryable error.
    let (base, _) = serve(vec![sse(vec![text_only])]).await;
    let mut strict = model("openai-completions", base);
    strict.compat = json!({"requireFinishReason": true});
    let evs = events(&strict, &go()).await;
    let m = evs.last().unwrap().terminal_message().unwrap();
    assert_eq!(
        (m.text(), m.stop_reason, m.error_message.as_deref()),
        (
            "hi".to_string(),
            StopReason::Error,
            Some("stream ended without finish_reason")
        )
    );
    assert!(failure(&evs).is_retryable());
    // Nothing at all: a retryable (network-class) error.
    let evs = replay_reply("openai-completions", sse(vec![])).await;
    let m = evs.last().unwrap().terminal_message().unwrap();
    assert_eq!(
        (m.stop_reason, m.error_message.as_deref()),
        (StopReason::Error, Some("stream ended without a response"))
    );
    let f = failure(&evs);
    assert_eq!(f.class(), ErrorClass::Network);
    assert!(f.is_retryable());
}

#[tokio::test]
async fn strm06_reasoning_fields_join_and_replay_in_their_field() {
    let (base, bodies) = serve(vec![
        sse(vec![fixture("openai-completions/strm06-reasoning-fields.sse")]),
        sse(vec![b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n".to_vec()]),
    ])
    .await;
    let mut m = model("openai-completions", base);
    m.compat = json!({"requiresReasoningContentOnAssistantMessages": true});
    m.reasoning = true;
    let first = pi_ai::stream(&m, &go(), StreamOptions::default())
        .result()
        .await;
    assert_eq!(
        value(&first)["content"],
        json!([
            {"type":"thinking","thinking":"Need the file list. Then read it.","thinkingSignature":"reasoning_content"},
            {"type":"toolCall","id":"c1","name":"ls","arguments":{}}])
    );
    let mut ctx = go();
    ctx.messages.push(Message::Assistant(first));
    let _ = pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    let body = bodies.lock().unwrap()[1].clone();
    assert_eq!(
        body["messages"],
        json!([
            {"role":"user","content":[{"type":"text","text":"go"}]},
            {"role":"assistant","content":null,"reasoning_content":"Need the file list. Then read it.",
             "tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]},
            {"role":"tool","content":"No result provided","tool_call_id":"c1"}])
    );
}

#[tokio::test]
async fn strm07_lone_surrogate_is_lossy_not_fatal() {
    let m = replay(
        "openai-completions",
        vec![fixture("openai-completions/strm07-lone-surrogate.sse")],
    )
    .await;
    assert_eq!(
        (m.text(), m.stop_reason),
        ("x\u{fffd}y".to_string(), StopReason::Stop)
    );
}

fn split_reads(bytes: &[u8]) -> Vec<Vec<u8>> {
    let marker = b"\0SPLIT\0";
    let mut reads = Vec::new();
    let mut rest = bytes;
    while let Some(i) = rest.windows(marker.len()).position(|w| w == marker) {
        reads.push(rest[..i].to_vec());
        rest = &rest[i + marker.len()..];
    }
    reads.push(rest.to_vec());
    reads
}

#[tokio::test]
async fn strm08_lines_and_utf8_split_across_reads() {
    let mut reads = split_reads(&fixture("openai-completions/strm08-split-reads.bin"));
    assert_eq!(reads.len(), 3);
    // The case's reads end without an end marker, at an event's end: the text is exact and,
    // complete, taken as finished (STRM-04).
    let m = replay("openai-completions", reads.clone()).await;
    assert_eq!(
        (m.text(), m.stop_reason),
        ("héllo: x!".to_string(), StopReason::Stop)
    );
    reads.push(b"data: [DONE]\r\n\r\n".to_vec());
    let m = replay("openai-completions", reads).await;
    assert_eq!(
        (m.text(), m.stop_reason),
        ("héllo: x!".to_string(), StopReason::Stop)
    );
}

#[tokio::test]
async fn len01_truncated_call_keeps_length_and_replay_safe_arguments() {
    let raw = r#"{"path":"big.txt","content":"line1\nline2"#;
    for (file, reason) in [
        (
            "openai-completions/len01-cut-by-length.sse",
            StopReason::Length,
        ),
        (
            "openai-completions/len01-unparsable-tool-calls.sse",
            StopReason::ToolUse,
        ),
    ] {
        let evs = replay_reply("openai-completions", sse(vec![fixture(file)])).await;
        let m = evs.last().unwrap().terminal_message().unwrap().clone();
        assert_eq!(m.stop_reason, reason, "{file}");
        assert_eq!(
            value(&m)["content"],
            json!([{"type":"toolCall","id":"c1","name":"write","arguments":{},"rawArguments":raw}]),
            "{file}"
        );
        // While streaming, the partial arguments were parsed best-effort.
        let delta_count = evs
            .iter()
            .filter(|e| matches!(e, AssistantEvent::ToolcallDelta { .. }))
            .count();
        assert_eq!(delta_count, 1);
        // Replaying it sends `{}` arguments, never the raw text.
        let (base, bodies) = serve(vec![sse(vec![])]).await;
        let mut ctx = go();
        ctx.messages.push(Message::Assistant(m));
        let _ = pi_ai::stream(
            &model("openai-completions", base),
            &ctx,
            StreamOptions::default(),
        )
        .result()
        .await;
        let body = bodies.lock().unwrap()[0].clone();
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
        assert!(!body.to_string().contains("line2"));
    }
}

#[tokio::test]
async fn partial_message_is_available_while_streaming() {
    let (base, _) = serve(vec![sse(vec![
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{\"name\":\"write\",\"arguments\":\"{\\\"path\\\":\\\"a.txt\\\",\\\"content\\\":\\\"hel\"}}]}}]}\n\n".to_vec(),
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"lo\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n".to_vec(),
    ])])
    .await;
    let mut s = pi_ai::stream(
        &model("openai-completions", base),
        &go(),
        StreamOptions::default(),
    );
    let mut seen = Vec::new();
    while let Some(e) = s.next().await {
        if let AssistantEvent::ToolcallDelta { .. } = e {
            seen.push(s.partial().tool_calls()[0].arguments.clone());
        }
    }
    assert_eq!(seen[0]["path"], "a.txt");
    assert_eq!(
        seen.last().unwrap(),
        &json!({"path":"a.txt","content":"hello"})
    );
}

#[tokio::test]
async fn usage_in_empty_choices_chunk_keepalives_and_cost() {
    let (base, _) = serve(vec![sse(vec![fixture(
        "openai-completions/usage-keepalive.sse",
    )])])
    .await;
    let mut m = model("openai-completions", base);
    m.cost = pi_ai::models::ModelCost {
        input: 2.0,
        output: 8.0,
        cache_read: 0.5,
        cache_write: 0.0,
        ..Default::default()
    };
    let msg = pi_ai::stream(&m, &go(), StreamOptions::default())
        .result()
        .await;
    assert_eq!(
        value(&msg),
        json!({"content":[{"type":"text","text":"Hello world"}],
            "api":"openai-completions","provider":"p","model":"m","responseId":"chatcmpl-9",
            "usage":{"input":200,"output":30,"cacheRead":1000,"cacheWrite":0,"reasoning":0,"totalTokens":1230,
                // Same IEEE arithmetic as Pi's calculateCost: (rate / 1e6) * tokens.
                "cost":{"input":0.00039999999999999996,"output":0.00023999999999999998,"cacheRead":0.0005,"cacheWrite":0,"total":0.00114,"totalFromProvider":false}},
            "stopReason":"stop","rawStopReason":"stop","timestamp":0})
    );
}

#[tokio::test]
async fn error_chunk_after_200_is_typed_and_keeps_partial() {
    let evs = replay_reply(
        "openai-completions",
        sse(vec![fixture("openai-completions/error-chunk.sse")]),
    )
    .await;
    let m = evs.last().unwrap().terminal_message().unwrap();
    assert_eq!(
        (m.text(), m.stop_reason),
        ("par".to_string(), StopReason::Error)
    );
    assert_eq!(failure(&evs).class(), ErrorClass::ContextOverflow);
    assert!(!failure(&evs).is_retryable());
}

#[tokio::test]
async fn strm10_anthropic_error_event_after_200() {
    let evs = replay_reply(
        "anthropic-messages",
        sse(vec![fixture(
            "anthropic-messages/strm10-error-after-200.sse",
        )]),
    )
    .await;
    let m = evs.last().unwrap().terminal_message().unwrap();
    assert_eq!(
        (m.stop_reason, m.error_message.as_deref()),
        (StopReason::Error, Some("overloaded_error: Overloaded"))
    );
    assert_eq!(m.text(), "Let me");
    assert_eq!(m.response_id.as_deref(), Some("msg_1"));
    assert_eq!(
        failure(&evs),
        ProviderError::Overloaded {
            status: None,
            retry_after_ms: None,
            message: "overloaded_error: Overloaded".into()
        }
    );
    assert!(failure(&evs).is_retryable());
}

/// Over loopback, as Pi 1.6.0 does it against the same server: a budget-thinking request
/// asks for interleaved thinking in one `anthropic-beta` header, and a `refusal` stop ends
/// the answer in an error worded with the refusal's explanation (without one: "The model
/// refused to complete the request"), the streamed text kept.
#[tokio::test]
async fn anthropic_beta_header_and_refusal_as_pi_1_6() {
    let refusal = |details: &str| {
        format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_r\",\"usage\":{{\"input_tokens\":5,\"output_tokens\":1}}}}}}\n\n\
             event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
             event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"I can't\"}}}}\n\n\
             event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
             event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"refusal\"{details}}},\"usage\":{{\"output_tokens\":3}}}}\n\n\
             event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        )
        .into_bytes()
    };
    let (base, _, heads) = serve_with_heads(vec![
        sse(vec![refusal("")]),
        sse(vec![refusal(
            r#","stop_details":{"type":"refusal","explanation":"Not allowed here."}"#,
        )]),
    ])
    .await;
    let mut m = model("anthropic-messages", base);
    m.reasoning = true;
    m.thinking_level = Some(pi_ai::models::ThinkingLevel::Medium);
    let ctx = Context {
        system_prompt: "S".into(),
        messages: vec![Message::user_text("hi")],
        tools: tools(),
    };
    for want in [
        "The model refused to complete the request",
        "Not allowed here.",
    ] {
        let evs = events(&m, &ctx).await;
        let got = evs.last().unwrap().terminal_message().unwrap();
        assert_eq!(
            (got.stop_reason, got.error_message.as_deref(), got.text()),
            (StopReason::Error, Some(want), "I can't".to_string())
        );
    }
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2);
    for head in heads {
        let betas: Vec<&str> = head
            .lines()
            .filter_map(|l| l.strip_prefix("anthropic-beta: "))
            .collect();
        assert_eq!(betas, vec!["interleaved-thinking-2025-05-14"], "{head}");
    }
}

/// Over loopback, as Pi 1.6.0 sends it to the same server: a Responses request of a session
/// carries the session id as `prompt_cache_key` and in the `session-id` and
/// `x-client-request-id` headers; OpenRouter gets `x-session-id` alone; a request without a
/// session id carries none of them, nor does one of a session that asks for no prompt caching
/// (Pi 1.6's summary requests: `cacheRetention: "none"`).
#[tokio::test]
async fn responses_session_id_as_prompt_cache_key_and_headers() {
    let (base, bodies, heads) =
        serve_with_heads(vec![sse(vec![]), sse(vec![]), sse(vec![]), sse(vec![])]).await;
    let mut m = model("openai-responses", base);
    let ctx = go();
    let with = |id: Option<&str>| StreamOptions {
        session_id: id.map(std::sync::Arc::from),
        ..StreamOptions::default()
    };
    let id = "01a24c01-09cb-750b-be08-382c448cac10";
    let _ = pi_ai::stream(&m, &ctx, with(Some(id))).result().await;
    m.compat = json!({"sessionAffinityFormat": "openrouter"});
    let _ = pi_ai::stream(&m, &ctx, with(Some(id))).result().await;
    m.compat = json!({});
    let _ = pi_ai::stream(&m, &ctx, with(None)).result().await;
    let no_cache = StreamOptions {
        cache_retention: Some(pi_ai::CacheRetention::None),
        ..with(Some(id))
    };
    let _ = pi_ai::stream(&m, &ctx, no_cache).result().await;
    let bodies = bodies.lock().unwrap().clone();
    let keys: Vec<&Value> = bodies.iter().map(|b| &b["prompt_cache_key"]).collect();
    assert_eq!(keys, [&json!(id), &json!(id), &Value::Null, &Value::Null]);
    assert_eq!(bodies[2], bodies[3], "the same body as without a session");
    let session_lines = |head: &String| -> Vec<String> {
        head.lines()
            .filter(|l| l.contains("session-id") || l.starts_with("x-client-request-id"))
            .map(str::to_string)
            .collect()
    };
    let heads = heads.lock().unwrap().clone();
    assert_eq!(
        heads.iter().map(session_lines).collect::<Vec<_>>(),
        [
            vec![
                format!("session-id: {id}"),
                format!("x-client-request-id: {id}")
            ],
            vec![format!("x-session-id: {id}")],
            vec![],
            vec![],
        ]
    );
}

#[tokio::test]
async fn strm10_http_429_529_and_overflow_are_typed() {
    let evs = replay_reply(
        "anthropic-messages",
        http_error(
            429,
            vec![("retry-after", "2".into())],
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
        ),
    )
    .await;
    let f = failure(&evs);
    assert_eq!(
        (f.class(), f.status(), f.retry_after()),
        (
            ErrorClass::RateLimited,
            Some(429),
            Some(Duration::from_secs(2))
        )
    );
    assert_eq!(
        pi_ai::RetryPolicy::default().delay(1, &f),
        Some(Duration::from_secs(2))
    );
    let evs = replay_reply(
        "anthropic-messages",
        http_error(
            529,
            vec![],
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
    )
    .await;
    assert_eq!(failure(&evs).class(), ErrorClass::Overloaded);
    let m = evs.last().unwrap().terminal_message().unwrap();
    assert_eq!(
        m.error_message.as_deref(),
        Some(r#"529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
    );
    let evs = replay_reply(
        "openai-completions",
        http_error(
            400,
            vec![],
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","code":"context_length_exceeded"}}"#,
        ),
    )
    .await;
    assert_eq!(failure(&evs).class(), ErrorClass::ContextOverflow);
    let evs = replay_reply(
        "openai-completions",
        http_error(
            400,
            vec![],
            r#"{"error":{"message":"max_tokens is too large: 999999","param":"max_tokens","code":"invalid_value"}}"#,
        ),
    )
    .await;
    assert_eq!(failure(&evs).class(), ErrorClass::Http);
    assert!(!failure(&evs).is_retryable());
    assert_eq!(pi_ai::RetryPolicy::default().delay(1, &failure(&evs)), None);
}

#[tokio::test]
async fn strm11_anthropic_tool_input_assembly() {
    let m = replay(
        "anthropic-messages",
        vec![fixture("anthropic-messages/strm11-tool-input.sse")],
    )
    .await;
    assert_eq!(
        m.content,
        vec![
            call("toolu_1", "read", json!({"path": "a.txt"})),
            call("toolu_2", "now", json!({})),
            call("toolu_3", "read", json!({"path": "b.txt"}))
        ]
    );
    assert_eq!((m.stop_reason, m.usage.output), (StopReason::ToolUse, 5));
}

fn anthropic_thinking_expected() -> Value {
    json!({"content":[
        {"type":"thinking","thinking":"The user wants a greeting.","thinkingSignature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYzE="},
        {"type":"thinking","thinking":"[Reasoning redacted]","thinkingSignature":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT","redacted":true},
        {"type":"text","text":"Héllo 🦊!"}],
        "api":"anthropic-messages","provider":"p","model":"m","responseId":"msg_7",
        // The model `message_start` names is not the one asked for: Pi 1.6 stores it.
        "responseModel":"claude-sonnet-4-5",
        "usage":{"input":2000,"output":42,"cacheRead":10000,"cacheWrite":500,"cacheWrite1h":0,"totalTokens":12542,
            "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0,"totalFromProvider":false}},
        "stopReason":"stop","rawStopReason":"end_turn","timestamp":0})
}

#[tokio::test]
async fn anthropic_thinking_redacted_text_and_pings() {
    let evs = replay_reply(
        "anthropic-messages",
        sse(vec![fixture("anthropic-messages/thinking-text-ping.sse")]),
    )
    .await;
    assert_eq!(
        joined_kinds(&evs),
        [
            "start",
            "thinking_start",
            "thinking_delta",
            "thinking_end",
            "thinking_start",
            "thinking_end",
            "text_start",
            "text_delta",
            "text_end",
            "done"
        ]
    );
    assert_eq!(
        value(evs.last().unwrap().terminal_message().unwrap()),
        anthropic_thinking_expected()
    );
}

/// Every input split into two reads at every byte boundary rebuilds the same message.
#[tokio::test]
async fn sse_split_at_every_byte_boundary() {
    let cases = [
        (
            "anthropic-messages",
            "anthropic-messages/thinking-text-ping.sse",
        ),
        (
            "openai-completions",
            "openai-completions/usage-keepalive.sse",
        ),
        (
            "openai-completions",
            "openai-completions/strm06-reasoning-fields.sse",
        ),
    ];
    for (api, file) in cases {
        let bytes = fixture(file);
        let whole = value(&replay(api, vec![bytes.clone()]).await);
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        for batch in cuts.chunks(64) {
            let runs = batch.iter().map(|&cut| {
                let reads = vec![bytes[..cut].to_vec(), bytes[cut..].to_vec()];
                async move {
                    let mut r = sse(reads);
                    r.gap = Duration::from_millis(2);
                    let evs = replay_reply(api, r).await;
                    (cut, value(evs.last().unwrap().terminal_message().unwrap()))
                }
            });
            for (cut, got) in futures::future::join_all(runs).await {
                assert_eq!(got, whole, "{file} cut at byte {cut}");
            }
        }
    }
}

#[tokio::test]
async fn abort_before_the_stream() {
    let opts = StreamOptions::default();
    opts.cancel.cancel();
    let (base, _) = serve(vec![sse(vec![])]).await;
    let mut s = pi_ai::stream(&model("anthropic-messages", base), &go(), opts);
    let mut last = None;
    while let Some(e) = s.next().await {
        last = Some(e);
    }
    let last = last.unwrap();
    assert_eq!(
        last.terminal_message().unwrap().stop_reason,
        StopReason::Aborted
    );
    // Pi 1.6.0's text for a request aborted before any answer: `Request aborted`.
    assert_eq!(
        (
            last.failure(),
            last.terminal_message().unwrap().error_message.as_deref()
        ),
        (
            Some(&ProviderError::AbortedBeforeResponse),
            Some("Request aborted")
        )
    );
}

/// The first text delta of each wire, then nothing for 30 s (the abort comes before it ends).
fn first_text_delta(api: &str) -> Vec<u8> {
    match api {
        "anthropic-messages" => b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_a\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me \"}}\n\n"
            .to_vec(),
        "openai-responses" => b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_a\"}}\n\n\
event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_a\",\"role\":\"assistant\",\"content\":[]}}\n\n\
event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"item_id\":\"msg_a\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\"}}\n\n\
event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_a\",\"output_index\":0,\"content_index\":0,\"delta\":\"Let me \"}\n\n"
            .to_vec(),
        _ => b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me \"}}]}\n\n".to_vec(),
    }
}

/// Issue 29 (f): an abort's `errorMessage` per wire as Pi 1.6.0 stores it (its RPC `abort` on
/// the loopback model): before the status line `Request aborted` on every wire (pi-ai's
/// `retryProviderRequest`); mid-stream `Request was aborted` (openai-completions), `This
/// operation was aborted` (anthropic-messages: the body read's AbortError), `OpenAI Responses
/// stream ended before a terminal response event` (openai-responses). The streamed text is
/// kept and the stop reason is `aborted` either way.
#[tokio::test]
async fn abort_error_message_per_wire_is_pi_1_6_s() {
    let wires = [
        ("openai-completions", "Request was aborted"),
        ("anthropic-messages", "This operation was aborted"),
        (
            "openai-responses",
            "OpenAI Responses stream ended before a terminal response event",
        ),
    ];
    for (api, mid_stream) in wires {
        // Mid-stream: aborted at the first text delta.
        let mut reply = sse(vec![first_text_delta(api), b"\n".to_vec()]);
        reply.gap = Duration::from_secs(30);
        let (base, _) = serve(vec![reply]).await;
        let opts = StreamOptions::default();
        let cancel = opts.cancel.clone();
        let mut s = pi_ai::stream(&model(api, base), &go(), opts);
        let mut last = None;
        while let Some(e) = s.next().await {
            if let AssistantEvent::TextDelta { .. } = e {
                cancel.cancel();
            }
            last = Some(e);
        }
        let m = last.unwrap().terminal_message().unwrap().clone();
        assert_eq!(
            (m.text(), m.stop_reason, m.error_message.as_deref()),
            ("Let me ".to_string(), StopReason::Aborted, Some(mid_stream)),
            "{api}"
        );
        // Before the response: aborted before the request went out.
        let opts = StreamOptions::default();
        opts.cancel.cancel();
        let (base, _) = serve(vec![sse(vec![])]).await;
        let mut s = pi_ai::stream(&model(api, base), &go(), opts);
        let mut last = None;
        while let Some(e) = s.next().await {
            last = Some(e);
        }
        let m = last.unwrap().terminal_message().unwrap().clone();
        assert_eq!(
            (m.text(), m.stop_reason, m.error_message.as_deref()),
            (String::new(), StopReason::Aborted, Some("Request aborted")),
            "{api}"
        );
    }
}

/// Conformance exercise 5 (docs/design.md#conformance-exercises): a conversation recorded via Anthropic (thinking with signature, two
/// parallel tool calls, an image result) replays to openai-completions; and the Anthropic
/// request of the same conversation carries Pi's cache_control marks.
fn recorded_via_anthropic() -> Vec<Message> {
    serde_json::from_value(json!([
        {"role":"user","content":"What is in a.png and b.txt?","timestamp":1},
        {"role":"assistant","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5",
         "content":[
            {"type":"thinking","thinking":"Read both files.","thinkingSignature":"sig=="},
            {"type":"text","text":"Reading both."},
            {"type":"toolCall","id":"toolu_01Ab.c","name":"read","arguments":{"path":"a.png"}},
            {"type":"toolCall","id":"toolu_02XY","name":"read","arguments":{"path":"b.txt"}}],
         "usage":{"input":10,"output":20,"cacheRead":0,"cacheWrite":0,"totalTokens":30,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},
         "stopReason":"toolUse","timestamp":2},
        {"role":"toolResult","toolCallId":"toolu_01Ab.c","toolName":"read",
         "content":[{"type":"text","text":"Read image file [image/png]"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}],"isError":false,"timestamp":3},
        {"role":"toolResult","toolCallId":"toolu_02XY","toolName":"read","content":[{"type":"text","text":"hello"}],"isError":false,"timestamp":4},
        {"role":"assistant","api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5",
         "content":[],"stopReason":"error","errorMessage":"overloaded_error: Overloaded","timestamp":5},
        {"role":"user","content":"Summarise.","timestamp":6}
    ]))
    .unwrap()
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        constrained_sampling: None,
        name: "read".into(),
        description: "Read a file".into(),
        parameters: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
    }]
}

#[tokio::test]
async fn replay_recorded_anthropic_conversation_to_openai_completions() {
    let stored = recorded_via_anthropic();
    let before = stored.clone();
    let (base, bodies) = serve(vec![sse(vec![])]).await;
    let mut m = model("openai-completions", base);
    m.provider = "openai".into();
    m.id = "gpt-4.1".into();
    m.input = vec!["text".into(), "image".into()];
    let ctx = Context {
        system_prompt: "You are terse.".into(),
        messages: stored.clone(),
        tools: tools(),
    };
    let _ = pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    assert_eq!(stored, before);
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(
        body,
        json!({
            "model":"gpt-4.1",
            "messages":[
                {"role":"system","content":"You are terse."},
                {"role":"user","content":"What is in a.png and b.txt?"},
                // The recorded thinking is dropped (another model's, Pi 1.6).
                {"role":"assistant","content":"Reading both.","tool_calls":[
                    {"id":"toolu_01Ab_c","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.png\"}"}},
                    {"id":"toolu_02XY","type":"function","function":{"name":"read","arguments":"{\"path\":\"b.txt\"}"}}]},
                {"role":"tool","content":"Read image file [image/png]","tool_call_id":"toolu_01Ab_c"},
                {"role":"tool","content":"hello","tool_call_id":"toolu_02XY"},
                {"role":"user","content":[{"type":"text","text":"Attached image(s) from tool result:"},
                    {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]},
                {"role":"user","content":"Summarise."}],
            "stream":true,
            "stream_options":{"include_usage":true},
            "store":false,
            "max_completion_tokens":16384,
            "tools":[{"type":"function","function":{"name":"read","description":"Read a file",
                "parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]
        })
    );
}

#[tokio::test]
async fn replay_to_anthropic_same_model_keeps_signed_thinking_and_caches() {
    let (base, bodies) = serve(vec![sse(vec![])]).await;
    let mut m = model("anthropic-messages", base);
    m.provider = "anthropic".into();
    m.id = "claude-sonnet-4-5".into();
    m.input = vec!["text".into(), "image".into()];
    let ctx = Context {
        system_prompt: "You are terse.".into(),
        messages: recorded_via_anthropic(),
        tools: tools(),
    };
    let _ = pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(
        body,
        json!({
            "model":"claude-sonnet-4-5",
            "messages":[
                {"role":"user","content":[{"type":"text","text":"What is in a.png and b.txt?"}]},
                {"role":"assistant","content":[
                    {"type":"thinking","thinking":"Read both files.","signature":"sig=="},
                    {"type":"text","text":"Reading both."},
                    {"type":"tool_use","id":"toolu_01Ab_c","name":"read","input":{"path":"a.png"}},
                    {"type":"tool_use","id":"toolu_02XY","name":"read","input":{"path":"b.txt"}}]},
                {"role":"user","content":[
                    {"type":"tool_result","tool_use_id":"toolu_01Ab_c","content":[
                        {"type":"text","text":"Read image file [image/png]"},
                        {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}],"is_error":false},
                    {"type":"tool_result","tool_use_id":"toolu_02XY","content":"hello","is_error":false},
                    {"type":"text","text":"Summarise.","cache_control":{"type":"ephemeral"}}]}],
            "max_tokens":16384,
            "stream":true,
            "system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],
            "tools":[{"name":"read","description":"Read a file","eager_input_streaming":true,
                "input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]},
                "cache_control":{"type":"ephemeral"}}]
        })
    );
}

#[tokio::test]
async fn pair07_mistral_compat_ids_in_request_and_results() {
    let stored: Vec<Message> = serde_json::from_value(json!([
        {"role":"user","content":"ls"},
        {"role":"assistant","api":"openai-completions","provider":"openai","model":"gpt-4.1","content":[
            {"type":"toolCall","id":"call_PTLP8xhu3uwZk4l3nlnrrJha","name":"ls","arguments":{}}],"stopReason":"toolUse"},
        {"role":"toolResult","toolCallId":"call_PTLP8xhu3uwZk4l3nlnrrJha","toolName":"ls","content":"a.txt","isError":false}
    ]))
    .unwrap();
    let (base, bodies) = serve(vec![sse(vec![])]).await;
    let mut m = model("openai-completions", base);
    m.compat = json!({"toolCallIdFormat":"mistral"});
    let ctx = Context {
        system_prompt: String::new(),
        messages: stored,
        tools: vec![],
    };
    let _ = pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(body["messages"][1]["tool_calls"][0]["id"], "qfc5g71qg");
    assert_eq!(body["messages"][2]["tool_call_id"], "qfc5g71qg");
}

#[tokio::test]
async fn abort_mid_stream_keeps_partial_and_ends_aborted() {
    let first =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me \"}}]}\n\n".to_vec();
    let later =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"never\"}}]}\n\n".to_vec();
    let mut reply = sse(vec![first, later]);
    reply.gap = Duration::from_secs(30);
    let (base, _) = serve(vec![reply]).await;
    let opts = StreamOptions::default();
    let cancel = opts.cancel.clone();
    let mut s = pi_ai::stream(&model("openai-completions", base), &go(), opts);
    let started = std::time::Instant::now();
    let mut last = None;
    while let Some(e) = s.next().await {
        if let AssistantEvent::TextDelta { .. } = e {
            cancel.cancel();
        }
        last = Some(e);
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let last = last.unwrap();
    let m = last.terminal_message().unwrap();
    assert_eq!(
        (m.text(), m.stop_reason, m.error_message.as_deref()),
        (
            "Let me ".to_string(),
            StopReason::Aborted,
            Some("Request was aborted")
        )
    );
    assert_eq!(last.failure(), Some(&ProviderError::Aborted));
}

/// The text deltas and the tool-call argument deltas of `evs`, each in order.
fn text_and_argument_deltas(evs: &[AssistantEvent]) -> (Vec<&str>, Vec<&str>) {
    let text = evs
        .iter()
        .filter_map(|e| match e {
            AssistantEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    let args = evs
        .iter()
        .filter_map(|e| match e {
            AssistantEvent::ToolcallDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    (text, args)
}

/// A chat-completions chunk with a text delta.
fn text_chunk(t: &str) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices":[{"index":0,"delta":{"content":t}}]})
    )
}

/// A chat-completions chunk with a piece of call 0's arguments.
fn args_chunk(first: bool, piece: &str) -> String {
    let call = if first {
        json!({"index":0,"id":"call_1","type":"function","function":{"name":"read","arguments":piece}})
    } else {
        json!({"index":0,"function":{"arguments":piece}})
    };
    format!(
        "data: {}\n\n",
        json!({"choices":[{"index":0,"delta":{"tool_calls":[call]}}]})
    )
}

/// The deltas of one read come as one `text_delta` (coalesced at the source): the same text
/// and the same message as one event per chunk would give; tool-call argument pieces stay one
/// event each, in their place.
#[tokio::test]
async fn the_text_deltas_of_one_read_come_joined_and_argument_deltas_one_by_one() {
    let words: Vec<String> = (0..40).map(|i| format!("w{i:02} ")).collect();
    let first: String = words[..20].iter().map(|w| text_chunk(w)).collect();
    let pieces = ["{\"pa", "th\":", "\"a.txt\"}"];
    let mut second: String = words[20..].iter().map(|w| text_chunk(w)).collect();
    for (k, p) in pieces.iter().enumerate() {
        second.push_str(&args_chunk(k == 0, p));
    }
    second.push_str(
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
    );
    let mut reply = sse(vec![first.into_bytes(), second.into_bytes()]);
    reply.gap = Duration::from_millis(50);
    let evs = replay_reply("openai-completions", reply).await;
    let (text, args) = text_and_argument_deltas(&evs);
    // Two writes 50 ms apart: at least two reads, and each read's deltas joined. A delta
    // never ends inside a chunk.
    assert!((2..=8).contains(&text.len()), "{text:?}");
    assert_eq!(text.concat(), words.concat());
    let mut at = 0;
    for t in &text {
        at += t.len();
        assert_eq!(at % 4, 0, "{text:?}");
    }
    assert_eq!(args, pieces);
    let m = evs.last().unwrap().terminal_message().unwrap();
    assert_eq!(
        m.content,
        vec![
            ContentBlock::text(words.concat()),
            call("call_1", "read", json!({"path": "a.txt"}))
        ]
    );
    assert_eq!(m.stop_reason, StopReason::ToolUse);
    // The events in order: every text delta before the call started, the pieces after it.
    let k = kinds(&evs);
    let first_call = k.iter().position(|t| t == "toolcall_start").unwrap();
    let last_text = k.iter().rposition(|t| t == "text_delta").unwrap();
    assert!(last_text < first_call, "{k:?}");
}

/// A read far larger than the piece the SSE parser is given at once (8 KiB): events, lines
/// and multi-byte characters cut at every piece boundary come whole and in order, a tool
/// call's argument pieces stay one event each, and the text still comes as joined deltas.
#[tokio::test]
async fn a_large_read_is_parsed_in_pieces_with_the_same_events() {
    // Words of 2 + 3 + 4 + 1 bytes: an event's length does not divide 8 KiB, so over the
    // read the piece boundaries fall in every part of an event, inside characters too.
    let words: Vec<String> = (0..6000).map(|i| format!("é€😀{}", i % 10)).collect();
    let mut body: String = words.iter().map(|w| text_chunk(w)).collect();
    let pieces = ["{\"pa", "th\":", "\"é.txt\"}"];
    for (k, p) in pieces.iter().enumerate() {
        body.push_str(&args_chunk(k == 0, p));
    }
    body.push_str(
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
    );
    assert!(body.len() > 40 * 8 * 1024);
    let evs = replay_reply("openai-completions", sse(vec![body.into_bytes()])).await;
    let (text, args) = text_and_argument_deltas(&evs);
    assert_eq!(text.concat(), words.concat());
    // Joined: one per read of the body at most (how many reads there are is the socket's).
    assert!(text.len() < words.len() / 10, "{} text deltas", text.len());
    assert_eq!(args, pieces);
    let m = evs.last().unwrap().terminal_message().unwrap();
    assert_eq!(
        m.content,
        vec![
            ContentBlock::text(words.concat()),
            call("call_1", "read", json!({"path": "é.txt"}))
        ]
    );
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

/// An abort between two reads: the first read's deltas went out (joined) before the server
/// was waited for again; the aborted message holds exactly their text, nothing of the read
/// that never came.
#[tokio::test]
async fn an_abort_between_two_reads_keeps_the_text_the_deltas_carried() {
    let words: Vec<String> = (0..30).map(|i| format!("w{i:02} ")).collect();
    let first: String = words.iter().map(|w| text_chunk(w)).collect();
    let mut reply = sse(vec![first.into_bytes(), text_chunk("never").into_bytes()]);
    reply.gap = Duration::from_secs(30);
    let (base, _) = serve(vec![reply]).await;
    let opts = StreamOptions::default();
    let cancel = opts.cancel.clone();
    let mut s = pi_ai::stream(&model("openai-completions", base), &go(), opts);
    let started = std::time::Instant::now();
    let mut evs = Vec::new();
    while let Some(e) = s.next().await {
        if let AssistantEvent::TextDelta { .. } = e {
            cancel.cancel();
        }
        evs.push(e);
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let text: String = evs
        .iter()
        .filter_map(|e| match e {
            AssistantEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    let m = evs.last().unwrap().terminal_message().unwrap();
    assert_eq!(
        (m.text(), m.stop_reason),
        (text.clone(), StopReason::Aborted)
    );
    // Written at once, the 30 chunks came in one read (or a few): more than the first
    // chunk's text went out before the abort was seen, all of it from the first write.
    assert!(
        text.len() > 4 && words.concat().starts_with(&text),
        "{text:?}"
    );
    assert!(!text.contains("never"));
}

fn responses_expected() -> Value {
    json!({"content":[
        {"type":"thinking","thinking":"Check both files.",
         "thinkingSignature":"{\"id\":\"rs_1\",\"type\":\"reasoning\",\"encrypted_content\":\"gAAAA\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"Check both files.\"}]}"},
        {"type":"text","text":"Reading both.","textSignature":"{\"v\":1,\"id\":\"msg_1\"}"},
        {"type":"toolCall","id":"call_A|fc_1","name":"read","arguments":{"path":"a.txt"}},
        {"type":"toolCall","id":"call_B|fc_2","name":"read","arguments":{"path":"b.txt"}}],
        "api":"openai-responses","provider":"p","model":"m","responseId":"resp_1",
        "usage":{"input":500,"output":60,"cacheRead":1000,"cacheWrite":0,"reasoning":20,"totalTokens":1560,
            "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0,"totalFromProvider":false}},
        "stopReason":"toolUse","rawStopReason":"completed","timestamp":0})
}

#[tokio::test]
async fn responses_reasoning_text_and_calls() {
    let evs = replay_reply(
        "openai-responses",
        sse(vec![fixture("openai-responses/reasoning-text-calls.sse")]),
    )
    .await;
    assert_eq!(
        joined_kinds(&evs),
        [
            "start",
            "thinking_start",
            "thinking_delta",
            "thinking_end",
            "text_start",
            "text_delta",
            "text_end",
            "toolcall_start",
            "toolcall_delta",
            "toolcall_delta",
            "toolcall_end",
            "toolcall_start",
            "toolcall_delta",
            "toolcall_end",
            "done"
        ]
    );
    assert_eq!(
        value(evs.last().unwrap().terminal_message().unwrap()),
        responses_expected()
    );
}

#[tokio::test]
async fn responses_split_at_every_byte_boundary() {
    let bytes = fixture("openai-responses/reasoning-text-calls.sse");
    let cuts: Vec<usize> = (1..bytes.len()).step_by(7).collect();
    for batch in cuts.chunks(64) {
        let runs = batch.iter().map(|&cut| {
            let reads = vec![bytes[..cut].to_vec(), bytes[cut..].to_vec()];
            async move {
                let mut r = sse(reads);
                r.gap = Duration::from_millis(2);
                let evs = replay_reply("openai-responses", r).await;
                (cut, value(evs.last().unwrap().terminal_message().unwrap()))
            }
        });
        for (cut, got) in futures::future::join_all(runs).await {
            assert_eq!(got, responses_expected(), "cut at byte {cut}");
        }
    }
}

#[tokio::test]
async fn replay_recorded_anthropic_conversation_to_openai_responses() {
    let (base, bodies) = serve(vec![sse(vec![])]).await;
    let mut m = model("openai-responses", base);
    m.provider = "openai".into();
    m.id = "gpt-5.4".into();
    // As the catalogue has it (Pi 1.6 sends `strict` only with this flag).
    m.compat = json!({"supportsStrictMode": true});
    m.reasoning = true;
    m.input = vec!["text".into(), "image".into()];
    m.thinking_level = Some(pi_ai::models::ThinkingLevel::Medium);
    let ctx = Context {
        system_prompt: "You are terse.".into(),
        messages: recorded_via_anthropic(),
        tools: tools(),
    };
    let _ = pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(
        body,
        json!({
            "model":"gpt-5.4",
            "input":[
                {"role":"developer","content":"You are terse."},
                {"role":"user","content":[{"type":"input_text","text":"What is in a.png and b.txt?"}]},
                // The recorded thinking is dropped (another model's); the text's item id is
                // Pi 1.6's `msg_pi_<message index>`.
                {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Reading both.","annotations":[]}],"status":"completed","id":"msg_pi_1"},
                {"type":"function_call","call_id":"toolu_01Ab_c","name":"read","arguments":"{\"path\":\"a.png\"}"},
                {"type":"function_call","call_id":"toolu_02XY","name":"read","arguments":"{\"path\":\"b.txt\"}"},
                {"type":"function_call_output","call_id":"toolu_01Ab_c","output":[
                    {"type":"input_text","text":"Read image file [image/png]"},
                    {"type":"input_image","detail":"auto","image_url":"data:image/png;base64,iVBORw0KGgo="}]},
                {"type":"function_call_output","call_id":"toolu_02XY","output":"hello"},
                {"role":"user","content":[{"type":"input_text","text":"Summarise."}]}],
            "stream":true,
            "store":false,
            "max_output_tokens":16384,
            "tools":[{"type":"function","name":"read","description":"Read a file",
                "parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]},"strict":false}],
            "reasoning":{"effort":"medium","summary":"auto"},
            "include":["reasoning.encrypted_content"]
        })
    );
}

#[tokio::test]
async fn responses_same_model_replays_reasoning_item_and_item_ids() {
    let (base, bodies) = serve(vec![
        sse(vec![fixture("openai-responses/reasoning-text-calls.sse")]),
        sse(vec![]),
    ])
    .await;
    let m = model("openai-responses", base);
    let first = pi_ai::stream(&m, &go(), StreamOptions::default())
        .result()
        .await;
    let mut ctx = go();
    ctx.messages.push(Message::Assistant(first));
    let _ = pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    let body = bodies.lock().unwrap()[1].clone();
    assert_eq!(
        body["input"],
        json!([
            {"role":"user","content":[{"type":"input_text","text":"go"}]},
            {"id":"rs_1","type":"reasoning","encrypted_content":"gAAAA","summary":[{"type":"summary_text","text":"Check both files."}]},
            {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Reading both.","annotations":[]}],"status":"completed","id":"msg_1"},
            {"type":"function_call","call_id":"call_A","name":"read","arguments":"{\"path\":\"a.txt\"}","id":"fc_1"},
            {"type":"function_call","call_id":"call_B","name":"read","arguments":"{\"path\":\"b.txt\"}","id":"fc_2"},
            {"type":"function_call_output","call_id":"call_A","output":"No result provided"},
            {"type":"function_call_output","call_id":"call_B","output":"No result provided"}])
    );
}

/// Case 18.8: keep-alive payloads in `data:` lines (a comment marker and a word, a bare word,
/// stuck before or after a JSON line of a real event) are skipped in all three wire formats.
#[tokio::test]
async fn gateway_keepalive_data_lines_are_skipped_in_every_format() {
    for (api, file, id) in [
        (
            "openai-completions",
            "openai-completions/keepalive-data-lines.sse",
            "chatcmpl-8",
        ),
        (
            "anthropic-messages",
            "anthropic-messages/keepalive-data-lines.sse",
            "msg_k",
        ),
        (
            "openai-responses",
            "openai-responses/keepalive-data-lines.sse",
            "resp_k",
        ),
    ] {
        let m = replay(api, vec![fixture(file)]).await;
        assert_eq!(
            (
                m.text(),
                m.stop_reason,
                m.response_id.as_deref(),
                m.error_message
            ),
            ("Hello".to_string(), StopReason::Stop, Some(id), None),
            "{file}"
        );
    }
}

/// Case 18.8, the other half: JSON that is invalid inside a real event still ends the stream
/// with a clear (non-retryable) parse error naming the event.
#[tokio::test]
async fn invalid_json_inside_a_real_event_ends_the_stream() {
    let cases: [(&str, &[u8], &str); 3] = [
        (
            "openai-completions",
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"y\"}}\n\n",
            "invalid JSON in message event: EOF while parsing a list at line 1 column 47",
        ),
        (
            "anthropic-messages",
            b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}\n\n",
            "invalid JSON in content_block_delta event: EOF while parsing an object at line 1 column 80",
        ),
        (
            "openai-responses",
            b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\nevent: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\" x}\n\n",
            "invalid JSON in response.output_text.delta event: expected `,` or `}` at line 1 column 50",
        ),
    ];
    for (api, body, want) in cases {
        let evs = replay_reply(api, sse(vec![body.to_vec()])).await;
        let m = evs.last().unwrap().terminal_message().unwrap();
        assert_eq!(
            (m.stop_reason, m.error_message.as_deref()),
            (StopReason::Error, Some(want)),
            "{api}"
        );
        let f = failure(&evs);
        assert_eq!((f.class(), f.is_retryable()), (ErrorClass::Parse, false));
    }
}

/// How one cut stream ended.
#[derive(Debug, Default, PartialEq)]
struct CutOutcomes {
    /// The whole message (content, stop reason, response id), as from the uncut stream.
    complete: usize,
    /// A retryable error (the loop retries it); never a finished answer.
    retryable_error: usize,
    /// Where a cut before the end marker gave a finished answer (STRM-04's plain EOF after
    /// complete content): each at an event's end, its blocks the whole message's first ones
    /// (the last text block's text a prefix of the whole's), `toolUse` with calls, else `stop`.
    lenient: Vec<usize>,
    /// Anything else: a partial message taken as finished, or a non-retryable error.
    wrong: usize,
}

/// The end offset of the first SSE event (through its blank line) whose text contains
/// `marker`.
fn event_end(bytes: &[u8], marker: &str) -> usize {
    let text = std::str::from_utf8(bytes).unwrap();
    let at = text.find(marker).unwrap();
    at + text[at..].find("\n\n").unwrap() + 2
}

/// Serves `bytes[..k]` for every `k` in `0..=len` (the connection closes after it) and sorts
/// the outcomes. Cuts at `k >= complete_from` must give the whole message, others a retryable
/// error or a finished answer with only complete content (`lenient`): the returned counts and
/// offsets are asserted whole by the callers.
async fn every_cut(api: &str, bytes: &[u8], complete_from: usize) -> CutOutcomes {
    let whole = replay(api, vec![bytes.to_vec()]).await;
    assert_eq!(whole.error_message, None);
    let key = |m: &AssistantMessage| (m.content.clone(), m.stop_reason, m.response_id.clone());
    let want = key(&whole);
    let mut out = CutOutcomes::default();
    let cuts: Vec<usize> = (0..=bytes.len()).collect();
    for batch in cuts.chunks(48) {
        let runs = batch.iter().map(|&k| {
            let mut r = sse(vec![bytes[..k].to_vec()]);
            r.gap = Duration::ZERO;
            async move { (k, replay_reply(api, r).await) }
        });
        for (k, evs) in futures::future::join_all(runs).await {
            let m = evs.last().unwrap().terminal_message().unwrap();
            let right = if k >= complete_from {
                m.stop_reason != StopReason::Error && key(m) == want
            } else if m.stop_reason == StopReason::Error {
                failure(&evs).is_retryable()
            } else {
                let n = m.content.len();
                let calls = m
                    .content
                    .iter()
                    .any(|c| matches!(c, ContentBlock::ToolCall(_)));
                let prefix = n <= whole.content.len()
                    && m.content[..n.saturating_sub(1)] == whole.content[..n.saturating_sub(1)]
                    && match (m.content.last(), whole.content.get(n.wrapping_sub(1))) {
                        (Some(ContentBlock::Text(a)), Some(ContentBlock::Text(b))) => {
                            b.text.starts_with(&a.text)
                        }
                        (a, b) => a == b,
                    };
                let reason = if calls {
                    StopReason::ToolUse
                } else {
                    StopReason::Stop
                };
                if prefix && m.stop_reason == reason && bytes[..k].ends_with(b"\n\n") {
                    out.lenient.push(k);
                    continue;
                }
                false
            };
            match (right, m.stop_reason) {
                (true, StopReason::Error) => out.retryable_error += 1,
                (true, _) => out.complete += 1,
                (false, _) => {
                    eprintln!("{api}: cut at byte {k} of {}: {:?}", bytes.len(), m);
                    out.wrong += 1
                }
            }
        }
    }
    eprintln!("{api}: {} cut points: {out:?}", bytes.len() + 1);
    out
}

/// Case 19.1: every byte cut of a real chat-completions stream (text, then a tool call whose
/// arguments arrive in three pieces, finish, usage, `[DONE]`) is either the whole answer (cut
/// after the finish chunk) or a retryable error; a cut inside the arguments never yields a
/// call.
#[tokio::test]
async fn completions_every_byte_cut_is_whole_or_a_retryable_error() {
    let bytes = fixture("openai-completions/text-and-call.sse");
    let from = event_end(&bytes, "\"finish_reason\":\"tool_calls\"");
    let got = every_cut("openai-completions", &bytes, from).await;
    // Finished before the end marker (STRM-04): after each text piece (`stop`), and once the
    // call's arguments are whole (`toolUse`, the whole content).
    let lenient = vec![
        event_end(&bytes, "\"content\":\"Listing \""),
        event_end(&bytes, "\"content\":\"the folder.\""),
        event_end(&bytes, "lib\\\"}"),
    ];
    assert_eq!(
        got,
        CutOutcomes {
            complete: bytes.len() + 1 - from,
            retryable_error: from - lenient.len(),
            lenient,
            wrong: 0
        }
    );
}

/// Case 19.1 for the Responses format: the end is `response.completed`.
#[tokio::test]
async fn responses_every_byte_cut_is_whole_or_a_retryable_error() {
    let bytes = fixture("openai-responses/reasoning-text-calls.sse");
    let from = event_end(&bytes, "\"type\":\"response.completed\"");
    let got = every_cut("openai-responses", &bytes, from).await;
    // Finished before `response.completed` (STRM-04): once the message item, then each call
    // item, is done (an open item, or reasoning alone, is a cut).
    let lenient = vec![
        event_end(&bytes, "\"sequence_number\":11,"),
        event_end(&bytes, "\"sequence_number\":16,"),
        event_end(&bytes, "\"sequence_number\":19,"),
    ];
    assert_eq!(
        got,
        CutOutcomes {
            complete: bytes.len() + 1 - from,
            retryable_error: from - lenient.len(),
            lenient,
            wrong: 0
        }
    );
}

/// The Anthropic adapter, for comparison: complete once `message_delta` carried the stop
/// reason; before it, finished only at a plain end after stopped blocks.
#[tokio::test]
async fn anthropic_every_byte_cut_is_whole_or_a_retryable_error() {
    let bytes = fixture("anthropic-messages/strm11-tool-input.sse");
    let from = event_end(&bytes, "\"type\":\"message_delta\"");
    let got = every_cut("anthropic-messages", &bytes, from).await;
    // Finished before `message_delta` (STRM-04): once each tool block has stopped (an open
    // block is a cut).
    let lenient = vec![
        event_end(&bytes, "\"content_block_stop\",\"index\":1"),
        event_end(&bytes, "\"content_block_stop\",\"index\":2"),
        event_end(&bytes, "\"content_block_stop\",\"index\":3"),
    ];
    assert_eq!(
        got,
        CutOutcomes {
            complete: bytes.len() + 1 - from,
            retryable_error: from - lenient.len(),
            lenient,
            wrong: 0
        }
    );
}

/// Case 19.3: `retry.provider.timeoutMs` bounds the wait for the headers (a server that
/// accepts and never answers) and the silence inside a body (headers and one event, then
/// nothing); both are retryable errors that keep what streamed.
#[tokio::test]
async fn provider_timeouts_for_headers_and_idle_bodies_are_retryable() {
    // Accepts connections and reads, never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let opts = || StreamOptions {
        timeout: Some(Duration::from_millis(300)),
        ..StreamOptions::default()
    };
    let m = model("openai-completions", format!("http://{addr}"));
    let started = std::time::Instant::now();
    let mut s = pi_ai::stream(&m, &go(), opts());
    let mut last = None;
    while let Some(e) = s.next().await {
        last = Some(e);
    }
    let last = last.unwrap();
    let msg = last.terminal_message().unwrap();
    assert_eq!(
        msg.error_message.as_deref(),
        Some(
            format!(
                "provider timed out: no response from http://{addr}/v1/chat/completions within 0.3 s (retry.provider.timeoutMs)"
            )
            .as_str()
        )
    );
    let f = last.failure().unwrap();
    assert_eq!((f.class(), f.is_retryable()), (ErrorClass::Network, true));
    assert!(started.elapsed() < Duration::from_secs(5));
    // Headers and one chunk, then silence (the reply's gap) for longer than the timeout.
    for api in [
        "openai-completions",
        "anthropic-messages",
        "openai-responses",
    ] {
        let first: &[u8] = match api {
            "openai-completions" => b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me\"}}]}\n\n",
            "anthropic-messages" => b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me\"}}\n\n",
            _ => b"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"message\"}}\n\nevent: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"Let me\"}\n\n",
        };
        let mut reply = sse(vec![first.to_vec(), b"data: [DONE]\n\n".to_vec()]);
        reply.gap = Duration::from_secs(3);
        let (base, _) = serve(vec![reply]).await;
        let started = std::time::Instant::now();
        let mut s = pi_ai::stream(&model(api, base), &go(), opts());
        let mut last = None;
        while let Some(e) = s.next().await {
            last = Some(e);
        }
        let last = last.unwrap();
        let msg = last.terminal_message().unwrap();
        assert_eq!(
            (msg.text(), msg.stop_reason, msg.error_message.as_deref()),
            (
                "Let me".to_string(),
                StopReason::Error,
                Some("provider timed out: no data for 0.3 s (retry.provider.timeoutMs)")
            ),
            "{api}"
        );
        assert!(last.failure().unwrap().is_retryable());
        assert!(started.elapsed() < Duration::from_secs(2), "{api}");
    }
}

/// Case 18.9 over the wire: an assistant message stored twice goes out once with its real
/// result, and two calls sharing one id go out with every tool-call id once, each result under
/// its call's id, in both formats.
#[tokio::test]
async fn duplicate_tool_call_ids_go_out_once_each() {
    let history: Vec<Message> = serde_json::from_value(json!([
        {"role":"user","content":"go"},
        {"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"ls","arguments":{}}],"stopReason":"toolUse"},
        {"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"ls","arguments":{}}],"stopReason":"toolUse"},
        {"role":"toolResult","toolCallId":"call_1","toolName":"ls","content":[{"type":"text","text":"a.txt"}],"isError":false},
        {"role":"assistant","content":[
            {"type":"toolCall","id":"call_2","name":"read","arguments":{"path":"a"}},
            {"type":"toolCall","id":"call_2","name":"read","arguments":{"path":"b"}}],"stopReason":"toolUse"},
        {"role":"toolResult","toolCallId":"call_2","toolName":"read","content":[{"type":"text","text":"A"}],"isError":false},
        {"role":"toolResult","toolCallId":"call_2","toolName":"read","content":[{"type":"text","text":"B"}],"isError":false},
        {"role":"user","content":"next"}
    ]))
    .unwrap();
    let ctx = Context {
        system_prompt: String::new(),
        messages: history,
        tools: tools(),
    };
    let done = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n".to_vec();
    let (base, bodies) = serve(vec![sse(vec![done])]).await;
    events(&model("openai-completions", base), &ctx).await;
    let body = bodies.lock().unwrap()[0].clone();
    let wire: Vec<Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| match m["role"].as_str() {
            Some("assistant") => Some(json!(m["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["id"].clone())
                .collect::<Vec<_>>())),
            Some("tool") => Some(json!([m["tool_call_id"], m["content"]])),
            _ => None,
        })
        .collect();
    assert_eq!(
        wire,
        vec![
            json!(["call_1"]),
            json!(["call_1", "a.txt"]),
            json!(["call_2", "call_2_2"]),
            json!(["call_2", "A"]),
            json!(["call_2_2", "B"]),
        ]
    );
    let anth = pi_ai::api::anthropic_messages::build_request(
        &Model::new(pi_ai::Api::AnthropicMessages, "anthropic", "c", ""),
        &ctx,
        &StreamOptions::default(),
    );
    let mut uses = Vec::new();
    let mut results = Vec::new();
    for m in anth["messages"].as_array().unwrap() {
        for b in m["content"].as_array().unwrap() {
            match b["type"].as_str() {
                Some("tool_use") => uses.push(b["id"].clone()),
                Some("tool_result") => results.push(b["tool_use_id"].clone()),
                _ => {}
            }
        }
    }
    assert_eq!(
        (uses, results),
        (
            vec![json!("call_1"), json!("call_2"), json!("call_2_2")],
            vec![json!("call_1"), json!("call_2"), json!("call_2_2")]
        )
    );
}

/// Case 18.9 on the wire: a Responses stream whose three function calls share one `call_id`
/// and item id (stored as Pi stores them, `call_id|item_id`), answered and sent back: the next
/// request carries each `call_id` and each item id once, every output under its call's id.
#[tokio::test]
async fn responses_calls_sharing_one_call_id_go_out_unique_on_call_and_output() {
    let ev =
        |o: Value| format!("event: {}\ndata: {o}\n\n", o["type"].as_str().unwrap()).into_bytes();
    let mut reads = vec![ev(
        json!({"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}),
    )];
    for (i, args) in [r#"{}"#, r#"{"path":"."}"#, r#"{"path":"x"}"#]
        .into_iter()
        .enumerate()
    {
        let item = json!({"type":"function_call","id":"fc_same","call_id":"call_same","name":"ls","arguments":""});
        reads.push(ev(
            json!({"type":"response.output_item.added","output_index":i,"item":item}),
        ));
        reads.push(ev(
            json!({"type":"response.function_call_arguments.delta","item_id":"fc_same","output_index":i,"delta":args}),
        ));
        let mut done = item.clone();
        done["arguments"] = json!(args);
        done["status"] = json!("completed");
        reads.push(ev(
            json!({"type":"response.output_item.done","output_index":i,"item":done}),
        ));
    }
    reads.push(ev(
        json!({"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":5,"output_tokens":5,"total_tokens":10}}}),
    ));
    let (base, bodies) = serve(vec![sse(reads), http_error(400, vec![], "{}")]).await;
    let m = model("openai-responses", base);
    let first = pi_ai::stream(&m, &go(), StreamOptions::default())
        .result()
        .await;
    let ids: Vec<String> = first.tool_calls().iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids, vec!["call_same|fc_same"; 3]);
    let mut messages = vec![Message::user_text("go"), Message::Assistant(first.clone())];
    for (k, c) in first.tool_calls().iter().enumerate() {
        messages.push(
            serde_json::from_value(json!({"role":"toolResult","toolCallId":c.id,"toolName":"ls",
                "content":[{"type":"text","text":format!("out {k}")}],"isError":false,"timestamp":0}))
            .unwrap(),
        );
    }
    let ctx = Context {
        system_prompt: String::new(),
        messages,
        tools: vec![],
    };
    let _ = pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    let sent = bodies.lock().unwrap()[1].clone();
    let items: Vec<(String, String, String)> = sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|it| match it["type"].as_str() {
            Some("function_call") => Some((
                "call".to_string(),
                it["call_id"].as_str().unwrap().to_string(),
                it["id"].as_str().unwrap_or("").to_string(),
            )),
            Some("function_call_output") => Some((
                "output".to_string(),
                it["call_id"].as_str().unwrap().to_string(),
                it["output"].as_str().unwrap_or("").to_string(),
            )),
            _ => None,
        })
        .collect();
    let want: Vec<(String, String, String)> = [
        ("call", "call_same", "fc_same"),
        ("call", "call_same_2", "fc_same_2"),
        ("call", "call_same_3", "fc_same_3"),
        ("output", "call_same", "out 0"),
        ("output", "call_same_2", "out 1"),
        ("output", "call_same_3", "out 2"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(items, want);
}

/// Chat-completions chunks are read borrowed, field by field, and read as their JSON values
/// read: fields of another kind are absent (a numeric `id`, `choices` as an object, a string
/// `delta`, a first choice that is not an object), a duplicated key keeps its last value,
/// escapes are decoded, the first non-empty reasoning field wins and names the signature.
#[tokio::test]
async fn chat_completion_chunks_of_every_shape_read_as_their_json_values() {
    let chunks = [
        r#"{"id":7,"model":5,"choices":{"0":{"delta":{"content":"no"}}}}"#,
        r#"{"id":"chatcmpl-9","model":"served-m","choices":[{"delta":"no"}]}"#,
        r#"{"id":"chatcmpl-10","choices":[{"delta":{"content":"A","content":"B"}}]}"#,
        r#"{"choices":[7,{"delta":{"content":"no"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\u00e9\ud83d\ude00 x"}},{"delta":{"content":"no"}}]}"#,
        r#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"think","reasoning_text":"no"}}]}"#,
        r#"{"choices":[{"finish_reason":"stop","delta":{}}],"usage":{"prompt_tokens":10,"completion_tokens":3}}"#,
    ];
    let mut body = String::new();
    for c in chunks {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    let m = replay("openai-completions", vec![body.into_bytes()]).await;
    assert_eq!(
        (
            serde_json::to_value(&m.content).unwrap(),
            m.response_id.as_deref(),
            m.response_model.as_deref(),
            m.stop_reason,
            (m.usage.input, m.usage.output),
            m.error_message,
        ),
        (
            json!([
                {"type": "text", "text": "Bé😀 x"},
                {"type": "thinking", "thinking": "think", "thinkingSignature": "reasoning"}
            ]),
            Some("chatcmpl-9"),
            Some("served-m"),
            StopReason::Stop,
            (10, 3),
            None
        )
    );
}

/// A chat-completions body of these chunks, then `[DONE]`.
fn completions_body(chunks: &[Value]) -> Vec<u8> {
    let mut body = String::new();
    for c in chunks {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    body.into_bytes()
}

/// An SSE body of `(event, data)` pairs.
fn named_events(events: &[(&str, Value)]) -> Vec<u8> {
    let mut body = String::new();
    for (name, data) in events {
        body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    body.into_bytes()
}

/// The usage and stop fields of a message, as stored.
fn stop_and_usage(m: &AssistantMessage) -> Value {
    let v = value(m);
    json!({"usage": v["usage"], "stopReason": v["stopReason"],
        "rawStopReason": v.get("rawStopReason"), "errorMessage": v.get("errorMessage")})
}

/// Costs below are the figures Pi 1.6's `calculateCost` gives for the same counts and rates
/// (JavaScript doubles, the same operations).
///
/// Pi 1.6's chat-completions usage (`parseChunkUsage`) and stop fields: reasoning tokens,
/// cache writes counted apart from cached reads, DeepSeek's and Kimi's cache-hit fields, the
/// finish reason as sent, and OpenRouter's billed cost taken as the total
/// (`totalFromProvider: true`) only for an OpenRouter model and a complete report.
#[tokio::test]
async fn completions_usage_and_raw_stop_reason_as_pi_16_writes_them() {
    let text = json!({"id":"c1","choices":[{"index":0,"delta":{"content":"hi"}}]});
    let end =
        |reason: &str| json!({"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":reason}]});
    let usage = |u: Value| json!({"id":"c1","choices":[],"usage":u});
    let cases: Vec<(&str, Vec<Value>, Value)> = vec![
        // OpenAI: cached reads and reasoning in the details; cost at the model's rates.
        (
            "p",
            vec![
                text.clone(),
                end("length"),
                usage(json!({"prompt_tokens":1000,"completion_tokens":200,
                "prompt_tokens_details":{"cached_tokens":600,"cache_write_tokens":100},
                "completion_tokens_details":{"reasoning_tokens":150}})),
            ],
            json!({"usage":{"input":300,"output":200,"cacheRead":600,"cacheWrite":100,"reasoning":150,"totalTokens":1200,
                "cost":{"input":0.0006,"output":0.0015999999999999999,"cacheRead":0.0003,"cacheWrite":0.0004,"total":0.0029,"totalFromProvider":false}},
                "stopReason":"length","rawStopReason":"length","errorMessage":null}),
        ),
        // DeepSeek's hit count; a top-level reasoning count.
        (
            "p",
            vec![
                text.clone(),
                end("stop"),
                usage(json!({"prompt_tokens":50,"completion_tokens":5,
                "prompt_cache_hit_tokens":20,"reasoning_tokens":3})),
            ],
            json!({"usage":{"input":30,"output":5,"cacheRead":20,"cacheWrite":0,"reasoning":3,"totalTokens":55,
                "cost":{"input":0.000059999999999999995,"output":0.000039999999999999996,"cacheRead":0.000009999999999999999,"cacheWrite":0,"total":0.00010999999999999999,"totalFromProvider":false}},
                "stopReason":"stop","rawStopReason":"stop","errorMessage":null}),
        ),
        // OpenRouter: the billed cost replaces the computed total.
        (
            "openrouter",
            vec![
                text.clone(),
                end("stop"),
                usage(json!({"prompt_tokens":10,"completion_tokens":5,
                "cost":0.25,"is_byok":false})),
            ],
            json!({"usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"reasoning":0,"totalTokens":15,
                "cost":{"input":0.000019999999999999998,"output":0.000039999999999999996,"cacheRead":0,"cacheWrite":0,"total":0.25,"totalFromProvider":true}},
                "stopReason":"stop","rawStopReason":"stop","errorMessage":null}),
        ),
        // OpenRouter, own key: the billed cost plus the upstream parts.
        (
            "openrouter",
            vec![
                text.clone(),
                end("stop"),
                usage(json!({"prompt_tokens":10,"completion_tokens":5,
                "cost":0.5,"is_byok":true,"cost_details":{"upstream_inference_cost":null,
                "upstream_inference_prompt_cost":0.25,"upstream_inference_completions_cost":1.0}})),
            ],
            json!({"usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"reasoning":0,"totalTokens":15,
                "cost":{"input":0.000019999999999999998,"output":0.000039999999999999996,"cacheRead":0,"cacheWrite":0,"total":1.75,"totalFromProvider":true}},
                "stopReason":"stop","rawStopReason":"stop","errorMessage":null}),
        ),
        // The same report from another provider is not a bill.
        (
            "p",
            vec![
                text.clone(),
                end("stop"),
                usage(json!({"prompt_tokens":10,"completion_tokens":5,
                "cost":0.25,"is_byok":false})),
            ],
            json!({"usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"reasoning":0,"totalTokens":15,
                "cost":{"input":0.000019999999999999998,"output":0.000039999999999999996,"cacheRead":0,"cacheWrite":0,"total":0.000059999999999999995,"totalFromProvider":false}},
                "stopReason":"stop","rawStopReason":"stop","errorMessage":null}),
        ),
        // A failure reason: the error, and the raw reason kept.
        (
            "p",
            vec![text.clone(), end("content_filter")],
            json!({"usage":serde_json::from_str::<Value>(ZERO_USAGE).unwrap(),
                "stopReason":"error","rawStopReason":"content_filter",
                "errorMessage":"Provider finish_reason: content_filter"}),
        ),
    ];
    for (provider, chunks, want) in cases {
        let (base, _) = serve(vec![sse(vec![completions_body(&chunks)])]).await;
        let mut m = model("openai-completions", base);
        m.provider = provider.into();
        m.cost = pi_ai::models::ModelCost {
            input: 2.0,
            output: 8.0,
            cache_read: 0.5,
            cache_write: 4.0,
            ..Default::default()
        };
        let msg = pi_ai::stream(&m, &go(), StreamOptions::default())
            .result()
            .await;
        assert_eq!(stop_and_usage(&msg), want, "{provider} {chunks:?}");
    }
}

/// Pi 1.6's Anthropic usage and stop fields: `cacheWrite1h` from `message_start` (0 when not
/// named) and billed at twice the input rate, the thinking tokens of `message_delta` as
/// `reasoning`, the stop reason as sent (also for a refusal, which is an error).
#[tokio::test]
async fn anthropic_usage_and_raw_stop_reason_as_pi_16_writes_them() {
    let start = |usage: Value| {
        (
            "message_start",
            json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":usage}}),
        )
    };
    let text = [
        (
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
        (
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}),
        ),
        (
            "content_block_stop",
            json!({"type":"content_block_stop","index":0}),
        ),
    ];
    let delta = |reason: &str, usage: Value| {
        (
            "message_delta",
            json!({"type":"message_delta","delta":{"stop_reason":reason},"usage":usage}),
        )
    };
    let stop = ("message_stop", json!({"type":"message_stop"}));
    let cases: Vec<(Vec<(&str, Value)>, Value)> = vec![
        (
            vec![
                start(
                    json!({"input_tokens":100,"output_tokens":1,"cache_read_input_tokens":1000,
                    "cache_creation_input_tokens":300,"cache_creation":{"ephemeral_1h_input_tokens":200}}),
                ),
                text[0].clone(),
                text[1].clone(),
                text[2].clone(),
                delta(
                    "max_tokens",
                    json!({"output_tokens":50,"output_tokens_details":{"thinking_tokens":30}}),
                ),
                stop.clone(),
            ],
            // cacheWrite: 100 tokens at 4 $/M and 200 at 2 × 2 $/M.
            json!({"usage":{"input":100,"output":50,"cacheRead":1000,"cacheWrite":300,"cacheWrite1h":200,"reasoning":30,"totalTokens":1450,
                "cost":{"input":0.00019999999999999998,"output":0.00039999999999999996,"cacheRead":0.0005,"cacheWrite":0.0012,"total":0.0023,"totalFromProvider":false}},
                "stopReason":"length","rawStopReason":"max_tokens","errorMessage":null}),
        ),
        (
            vec![
                start(json!({"input_tokens":10,"output_tokens":1})),
                text[0].clone(),
                text[1].clone(),
                text[2].clone(),
                delta("refusal", json!({"output_tokens":2})),
                stop.clone(),
            ],
            json!({"usage":{"input":10,"output":2,"cacheRead":0,"cacheWrite":0,"cacheWrite1h":0,"totalTokens":12,
                "cost":{"input":0.000019999999999999998,"output":0.000016,"cacheRead":0,"cacheWrite":0,"total":0.000035999999999999994,"totalFromProvider":false}},
                "stopReason":"error","rawStopReason":"refusal","errorMessage":"The model refused to complete the request"}),
        ),
    ];
    for (events, want) in cases {
        let (base, _) = serve(vec![sse(vec![named_events(&events)])]).await;
        let mut m = model("anthropic-messages", base);
        m.cost = pi_ai::models::ModelCost {
            input: 2.0,
            output: 8.0,
            cache_read: 0.5,
            cache_write: 4.0,
            ..Default::default()
        };
        let msg = pi_ai::stream(&m, &go(), StreamOptions::default())
            .result()
            .await;
        assert_eq!(stop_and_usage(&msg), want, "{events:?}");
    }
}

/// Pi 1.6's Responses usage and stop fields: cached reads and cache writes out of
/// `input_tokens`, reasoning tokens, the status as `rawStopReason` (`incomplete.<reason>` for
/// an incomplete response), `failed` for a failed one.
#[tokio::test]
async fn responses_usage_and_raw_stop_reason_as_pi_16_writes_them() {
    let text = [
        (
            "response.output_item.added",
            json!({"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}),
        ),
        (
            "response.output_text.delta",
            json!({"type":"response.output_text.delta","output_index":0,"content_index":0,"item_id":"msg_1","delta":"hi"}),
        ),
        (
            "response.output_item.done",
            json!({"type":"response.output_item.done","output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"hi"}]}}),
        ),
    ];
    let with_end = |end: (&'static str, Value)| {
        let mut v: Vec<(&str, Value)> = text.to_vec();
        v.push(end);
        v
    };
    let cases: Vec<(Vec<(&str, Value)>, Value)> = vec![
        (
            with_end((
                "response.incomplete",
                json!({"type":"response.incomplete","response":{"id":"resp_1","status":"incomplete",
                    "incomplete_details":{"reason":"max_output_tokens"},
                    "usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":600,"cache_write_tokens":100},
                        "output_tokens":200,"output_tokens_details":{"reasoning_tokens":150},"total_tokens":1200}}}),
            )),
            json!({"usage":{"input":300,"output":200,"cacheRead":600,"cacheWrite":100,"reasoning":150,"totalTokens":1200,
                "cost":{"input":0.0006,"output":0.0015999999999999999,"cacheRead":0.0003,"cacheWrite":0.0004,"total":0.0029,"totalFromProvider":false}},
                "stopReason":"length","rawStopReason":"incomplete.max_output_tokens","errorMessage":null}),
        ),
        (
            with_end((
                "response.failed",
                json!({"type":"response.failed","response":{"id":"resp_2","status":"failed",
                    "error":{"code":"server_error","message":"boom"}}}),
            )),
            json!({"usage":serde_json::from_str::<Value>(ZERO_USAGE).unwrap(),
                "stopReason":"error","rawStopReason":"failed","errorMessage":"server_error: boom"}),
        ),
    ];
    for (events, want) in cases {
        let (base, _) = serve(vec![sse(vec![named_events(&events)])]).await;
        let mut m = model("openai-responses", base);
        m.cost = pi_ai::models::ModelCost {
            input: 2.0,
            output: 8.0,
            cache_read: 0.5,
            cache_write: 4.0,
            ..Default::default()
        };
        let msg = pi_ai::stream(&m, &go(), StreamOptions::default())
            .result()
            .await;
        assert_eq!(stop_and_usage(&msg), want, "{events:?}");
    }
}

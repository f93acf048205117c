//! Adapters replay recorded SSE bodies (`fixtures/cases/*.sse`) from a real loopback HTTP
//! server, delivered in the reads the fixture prescribes, and must rebuild exactly the message
//! the case names.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pi_ai::{ContentBlock, Context, Message, Model, StopReason, StreamOptions, ToolCall};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves one HTTP response whose SSE body is sent as the given separate reads.
async fn serve(reads: Vec<Vec<u8>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
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
                break;
            }
        }
        sock.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        for r in reads {
            sock.write_all(&r).await.unwrap();
            sock.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = sock.shutdown().await;
    });
    format!("http://{addr}")
}

fn model(api: &str, base: String) -> Model {
    let base = if api == "openai-completions" {
        format!("{base}/v1")
    } else {
        base
    };
    Model {
        api_key: Some("k".into()),
        ..Model::new(api, "p", "m", &base)
    }
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../../fixtures/cases/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

async fn replay(api: &str, reads: Vec<Vec<u8>>) -> pi_ai::AssistantMessage {
    let base = serve(reads).await;
    let ctx = Context {
        system_prompt: String::new(),
        messages: vec![Message::user_text("go")],
        tools: vec![],
    };
    pi_ai::stream(&model(api, base), &ctx, StreamOptions::default())
        .result()
        .await
}

fn call(id: &str, name: &str, args: Value) -> ContentBlock {
    ContentBlock::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args,
    })
}

#[tokio::test]
async fn strm01_calls_without_index_split_by_id() {
    let m = replay("openai-completions", vec![fixture("STRM-01-1.sse")]).await;
    assert_eq!(
        m.content,
        vec![
            call("call_a", "read", json!({"path": "a.txt"})),
            call("call_b", "read", json!({"path": "b.txt"}))
        ]
    );
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn strm03_arguments_as_an_object() {
    let m = replay("openai-completions", vec![fixture("STRM-03-1.sse")]).await;
    assert_eq!(m.content, vec![call("c1", "ls", json!({"path": "."}))]);
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn strm04_stream_without_finish_reason() {
    let m = replay("openai-completions", vec![fixture("STRM-04-1.sse")]).await;
    assert_eq!(
        (m.content, m.stop_reason),
        (vec![call("c1", "ls", json!({}))], StopReason::ToolUse)
    );
    let text_only =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n".to_vec();
    let m = replay("openai-completions", vec![text_only]).await;
    assert_eq!(
        (m.text(), m.stop_reason),
        ("hi".to_string(), StopReason::Stop)
    );
    let m = replay("openai-completions", vec![]).await;
    assert_eq!(
        (m.stop_reason, m.error_message.as_deref()),
        (StopReason::Error, Some("stream ended without a response"))
    );
}

#[tokio::test]
async fn strm06_reasoning_fields_join_into_one_thinking_block() {
    let m = replay("openai-completions", vec![fixture("STRM-06-1.sse")]).await;
    let ContentBlock::Thinking(t) = &m.content[0] else {
        panic!("{:?}", m.content)
    };
    assert_eq!(t.thinking, "Need the file list. Then read it.");
    assert_eq!(m.content[1], call("c1", "ls", json!({})));
}

#[tokio::test]
async fn strm08_lines_and_utf8_split_across_reads() {
    let bytes = fixture("STRM-08-split-reads.bin");
    let marker = b"\0SPLIT\0";
    let mut reads = Vec::new();
    let mut rest = &bytes[..];
    while let Some(i) = rest.windows(marker.len()).position(|w| w == marker) {
        reads.push(rest[..i].to_vec());
        rest = &rest[i + marker.len()..];
    }
    reads.push(rest.to_vec());
    assert_eq!(reads.len(), 3);
    let m = replay("openai-completions", reads).await;
    assert_eq!(
        (m.text(), m.stop_reason),
        ("héllo: x!".to_string(), StopReason::Stop)
    );
}

#[tokio::test]
async fn len01_truncated_call_keeps_length_and_replay_safe_arguments() {
    let m = replay("openai-completions", vec![fixture("LEN-01-1.sse")]).await;
    assert_eq!(
        (m.content, m.stop_reason),
        (vec![call("c1", "write", json!({}))], StopReason::Length)
    );
}

#[tokio::test]
async fn strm10_anthropic_error_event_after_200() {
    let m = replay("anthropic-messages", vec![fixture("STRM-10-1.sse")]).await;
    assert_eq!(
        (m.stop_reason, m.error_message.as_deref()),
        (StopReason::Error, Some("overloaded_error: Overloaded"))
    );
    assert_eq!(m.text(), "Let me");
    assert_eq!(m.response_id.as_deref(), Some("msg_1"));
}

#[tokio::test]
async fn strm11_anthropic_tool_input_assembly() {
    let mut body = fixture("STRM-11-1.sse");
    body.extend_from_slice(b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    let m = replay("anthropic-messages", vec![body]).await;
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

#[tokio::test]
async fn abort_before_and_during_the_stream() {
    let opts = StreamOptions::default();
    opts.cancel.cancel();
    let base = serve(vec![]).await;
    let ctx = Context {
        system_prompt: String::new(),
        messages: vec![Message::user_text("go")],
        tools: vec![],
    };
    let m = pi_ai::stream(&model("anthropic-messages", base), &ctx, opts)
        .result()
        .await;
    assert_eq!(m.stop_reason, StopReason::Aborted);
}

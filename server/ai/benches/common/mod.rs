//! Shared by the stream benches: recorded-shape SSE bodies of any length, a loopback HTTP
//! server that serves one body to every request, and a model pointing at it.
#![allow(dead_code, clippy::unwrap_used)]

use pi_ai::Model;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub fn openai_body(chunks: usize, calls: usize) -> Vec<u8> {
    let mut s = String::new();
    for i in 0..chunks {
        s.push_str(&format!(
            "data: {}\n\n",
            json!({"choices":[{"index":0,"delta":{"content":format!("word{i} ")}}]})
        ));
    }
    for c in 0..calls {
        s.push_str(&format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":c,"id":format!("call_{c}"),"type":"function","function":{"name":"read","arguments":""}}]}}]})));
        for part in ["{\"pa", "th\":\"src/", "file.rs\"}"] {
            s.push_str(&format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":c,"function":{"arguments":part}}]}}]})));
        }
    }
    s.push_str("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n");
    s.into_bytes()
}

pub fn anthropic_body(chunks: usize) -> Vec<u8> {
    let mut s = String::from("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\n");
    s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    for i in 0..chunks {
        s.push_str(&format!("event: content_block_delta\ndata: {}\n\n", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("word{i} ")}})));
    }
    s.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s.into_bytes()
}

pub async fn server(body: Vec<u8>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 65536];
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
                sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n").await.unwrap();
                // Deliver in 16 KiB reads, as a network would.
                for part in body.chunks(16 * 1024) {
                    sock.write_all(part).await.unwrap();
                }
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

pub fn model(api: pi_ai::Api, base: String) -> Model {
    Model::new(api, "p", "m", &base)
}

//! The `mock-model` binary (tests/bin/mock_model.rs) as the other suites use it: spawned on a
//! JSON script, its port read from the first stdout line, real HTTP over loopback, the request
//! log read back. Ordered steps, rules per tool round, a default, usage, error answers, paced
//! streams (each delta its own write, or held to the rate by the wall clock), one-write
//! answers, and a bad script refused by name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pi_e2e::TempDir;
use serde_json::{json, Value};

/// A running `mock-model` (killed on drop).
struct Model {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(tmp: &TempDir, script: &Value) -> Model {
    let path = tmp.join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let log = tmp.join("requests.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mock-model"))
        .arg(&path)
        .arg(&log)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().unwrap();
    Model { child, port, log }
}

/// One HTTP/1.1 POST on a fresh connection: (status, the body's bytes as they arrived in
/// reads with their times since the request went out).
fn post(port: u16, path: &str, body: &Value) -> (u16, Vec<(Duration, String)>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let b = body.to_string();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
        b.len()
    )
    .unwrap();
    let t = Instant::now();
    let mut reads = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        reads.push((t.elapsed(), String::from_utf8_lossy(&buf[..n]).into_owned()));
    }
    let all: String = reads.iter().map(|(_, r)| r.as_str()).collect();
    let status = all[9..12].parse().unwrap();
    (status, reads)
}

/// The data lines of an SSE body (chunked framing and headers skipped), as JSON.
fn data(reads: &[(Duration, String)]) -> Vec<Value> {
    let all: String = reads.iter().map(|(_, r)| r.as_str()).collect();
    all.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|l| *l != "[DONE]")
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The text, reasoning, tool calls (name, joined arguments), finish reason and usage of a
/// chat-completions stream.
fn answer(reads: &[(Duration, String)]) -> Value {
    let (mut text, mut thinking, mut calls, mut finish, mut usage) = (
        String::new(),
        String::new(),
        Vec::<(String, String, String)>::new(),
        Value::Null,
        Value::Null,
    );
    for c in data(reads) {
        if !c["usage"].is_null() {
            usage = c["usage"].clone();
        }
        let Some(choice) = c["choices"].get(0) else {
            continue;
        };
        let d = &choice["delta"];
        text += d["content"].as_str().unwrap_or("");
        thinking += d["reasoning_content"].as_str().unwrap_or("");
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            if let Some(id) = tc["id"].as_str() {
                calls.push((
                    id.into(),
                    tc["function"]["name"].as_str().unwrap().into(),
                    String::new(),
                ));
            }
            calls.last_mut().unwrap().2 += tc["function"]["arguments"].as_str().unwrap_or("");
        }
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
    }
    let calls: Vec<Value> = calls
        .into_iter()
        .map(|(id, name, args)| json!({"id": id, "name": name, "arguments": serde_json::from_str::<Value>(&args).unwrap()}))
        .collect();
    json!({"text": text, "thinking": thinking, "calls": calls, "finish": finish, "usage": usage})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn round(id: &str) -> [Value; 2] {
    [
        json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": id, "content": "the file's text"}),
    ]
}

const CHAT: &str = "/v1/chat/completions";

#[test]
fn steps_rules_default_usage_errors_and_the_log() {
    let tmp = TempDir::new("mock-bin");
    let m = start(
        &tmp,
        &json!({
            "steps": [
                {"thinking": "Let me see.", "text": "First.", "chunk": 3},
                {"status": 401, "error": "invalid key"},
                {"text": "Third.", "toolCalls": [{"id": "c1", "name": "ls", "arguments": {"path": "."}}]}
            ],
            "rules": [{"when": {"firstWord": "diag"}, "steps": [
                {"toolCalls": [{"name": "diagnostics"}]},
                {"text": "The editor reports: {lastToolResult}"}
            ]}],
            "default": {"text": "No more."},
            "usage": {"input": 1000, "output": 20}
        }),
    );
    let body = |msgs: Vec<Value>| json!({"model": "mock-1", "stream": true, "messages": msgs});
    let usage = json!({"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020});

    let (status, r) = post(m.port, CHAT, &body(vec![user("one")]));
    assert_eq!(status, 200);
    assert_eq!(
        answer(&r),
        json!({"text": "First.", "thinking": "Let me see.", "calls": [], "finish": "stop", "usage": usage})
    );
    // A rule takes the request whatever the ordered steps' place; its second round quotes the
    // tool result.
    let (_, r) = post(m.port, CHAT, &body(vec![user("Diag please")]));
    assert_eq!(
        answer(&r),
        json!({"text": "", "thinking": "", "calls": [{"id": "call_1", "name": "diagnostics", "arguments": {}}], "finish": "tool_calls", "usage": usage})
    );
    let [a, t] = round("call_1");
    let (_, r) = post(m.port, CHAT, &body(vec![user("Diag please"), a, t]));
    assert_eq!(answer(&r)["text"], "The editor reports: the file's text");

    let (status, r) = post(m.port, CHAT, &body(vec![user("two")]));
    assert_eq!(status, 401);
    let all: String = r.iter().map(|(_, s)| s.as_str()).collect();
    assert!(
        all.ends_with(r#"{"error":{"message":"invalid key"}}"#),
        "{all}"
    );
    let (_, r) = post(m.port, CHAT, &body(vec![user("three")]));
    assert_eq!(
        answer(&r),
        json!({"text": "Third.", "thinking": "", "calls": [{"id": "c1", "name": "ls", "arguments": {"path": "."}}], "finish": "tool_calls", "usage": usage})
    );
    let (_, r) = post(m.port, CHAT, &body(vec![user("four")]));
    assert_eq!(answer(&r)["text"], "No more.");

    // A request breaking tool pairing: HTTP 400, as a provider answers.
    let [a, _] = round("c9");
    let (status, _) = post(m.port, CHAT, &body(vec![user("five"), a, user("six")]));
    assert_eq!(status, 400);

    let logged: Vec<Value> = std::fs::read_to_string(&m.log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let firsts: Vec<Value> = logged
        .iter()
        .map(|b| b["messages"][0]["content"].clone())
        .collect();
    assert_eq!(
        firsts,
        [
            "one",
            "Diag please",
            "Diag please",
            "two",
            "three",
            "four",
            "five"
        ]
    );
    assert_eq!(logged[0], body(vec![user("one")]));
}

#[test]
fn anthropic_messages_from_the_same_script() {
    let tmp = TempDir::new("mock-bin-ant");
    let m = start(
        &tmp,
        &json!({"steps": [{"thinking": "Hm.", "text": "Done.", "toolCalls": [{"id": "t1", "name": "ls"}]}]}),
    );
    let (status, r) = post(
        m.port,
        "/v1/messages",
        &json!({"model": "mock-ant-1", "stream": true, "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]}]}),
    );
    assert_eq!(status, 200);
    let kinds: Vec<String> = data(&r)
        .iter()
        .map(|e| {
            let d = &e["delta"];
            match e["type"].as_str().unwrap() {
                "content_block_start" => {
                    format!("start {}", e["content_block"]["type"].as_str().unwrap())
                }
                "content_block_delta" => format!(
                    "{} {}",
                    d["type"].as_str().unwrap(),
                    d["thinking"]
                        .as_str()
                        .or(d["text"].as_str())
                        .or(d["partial_json"].as_str())
                        .unwrap_or("")
                ),
                "message_delta" => format!("stop {}", d["stop_reason"].as_str().unwrap()),
                t => t.to_string(),
            }
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "start thinking",
            "thinking_delta Hm.",
            "signature_delta ",
            "content_block_stop",
            "start text",
            "text_delta Done.",
            "content_block_stop",
            "start tool_use",
            "input_json_delta {",
            "input_json_delta }",
            "content_block_stop",
            "stop tool_use",
            "message_stop"
        ]
    );
}

#[test]
fn paced_streams_and_one_write_answers() {
    let tmp = TempDir::new("mock-bin-paced");
    let m = start(
        &tmp,
        &json!({"rules": [
            {"when": {"startsWith": "paced"}, "steps": [{"text": "abcdefg ".repeat(20), "chunk": 8, "chunkDelayMs": 20}]},
            {"when": {"startsWith": "rate"}, "steps": [{"text": "w ".repeat(200), "words": true, "chunkDelayMs": 2, "keepRate": true}]},
            {"when": {"startsWith": "rounds"}, "steps": [{"toolCalls": [{"name": "read", "arguments": {"path": "small.txt"}}], "repeat": 3}, {"text": "done"}]},
            {"when": {"startsWith": "deltas"}, "steps": [{"text": "abcdefg ".repeat(4500), "chunk": 8}]}
        ]}),
    );
    let body = |msgs: Vec<Value>| json!({"model": "mock-1", "stream": true, "messages": msgs});

    // Paced: each delta its own write, 20 ms apart: 20 deltas take ≥ 400 ms.
    let (_, r) = post(m.port, CHAT, &body(vec![user("paced please")]));
    assert_eq!(answer(&r)["text"], "abcdefg ".repeat(20));
    let took = r.last().unwrap().0;
    assert!(took >= Duration::from_millis(400), "{took:?}");
    assert!(r.len() >= 15, "{} reads for 20 paced deltas", r.len());

    // Held to the rate by the wall clock: 200 words at 2 ms ≈ 400 ms, however late the timer.
    let (_, r) = post(m.port, CHAT, &body(vec![user("rate")]));
    let a = answer(&r);
    assert_eq!(a["text"], "w ".repeat(200));
    let took = r.last().unwrap().0;
    assert!(
        took >= Duration::from_millis(390) && took < Duration::from_millis(3000),
        "{took:?}"
    );

    // Tool rounds: a call per round (ids unique across the rounds), then the text.
    let mut msgs = vec![user("rounds please")];
    let mut got = Vec::new();
    for _ in 0..4 {
        let (_, r) = post(m.port, CHAT, &body(msgs.clone()));
        let a = answer(&r);
        match a["calls"].get(0) {
            Some(c) => {
                let id = c["id"].as_str().unwrap().to_string();
                got.push(id.clone());
                msgs.extend(round(&id));
            }
            None => got.push(a["text"].as_str().unwrap().to_string()),
        }
    }
    assert_eq!(got, ["call_1", "call_2", "call_3", "done"]);

    // An unpaced answer is one body of known length.
    let (_, r) = post(m.port, CHAT, &body(vec![user("deltas please")]));
    let all: String = r.iter().map(|(_, s)| s.as_str()).collect();
    assert!(
        all.to_ascii_lowercase().contains("content-length:"),
        "{}",
        &all[..200]
    );
    assert_eq!(answer(&r)["text"], "abcdefg ".repeat(4500));
    assert_eq!(data(&r).len(), 4500 + 3);
}

#[test]
fn a_bad_script_is_refused_by_name() {
    let tmp = TempDir::new("mock-bin-bad");
    let path = tmp.join("script.json");
    std::fs::write(&path, r#"{"steps": [{"text": "x", "chunkDelay": 5}]}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mock-model"))
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!(
            "mock-model: {}: unknown field `chunkDelay`, expected one of",
            path.display()
        )),
        "{err}"
    );
}

//! The agent loop on the in-process scripted model and real tools over a temp folder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pi_ai::{Message, Model, StopReason};
use pi_core::agent::{AgentConfig, AgentEvent, Delivery, EventSink, RunControl, LENGTH_LIMIT_TEXT};
use pi_core::fs::DiskFs;
use pi_core::tools::default_tools;
use serde_json::{json, Value};

mod common;
use common::{tmp_dir, Tmp};

#[derive(Default)]
struct Recorder(Mutex<Vec<Value>>);

#[async_trait]
impl EventSink for Recorder {
    async fn emit(&self, event: AgentEvent) {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::to_value(event).unwrap());
    }
}

impl Recorder {
    fn kinds(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in self.0.lock().unwrap().iter() {
            let t = e["type"].as_str().unwrap();
            let k = match t {
                "message_start" | "message_end" => {
                    format!("{t}:{}", e["message"]["role"].as_str().unwrap())
                }
                _ => t.to_string(),
            };
            if k == "message_update" && out.last() == Some(&k) {
                continue;
            }
            out.push(k);
        }
        out
    }
}

fn tmp(name: &str) -> Tmp {
    tmp_dir(&format!("pi-core-loop-{name}-"))
}

fn config(dir: &std::path::Path, script: Value) -> AgentConfig {
    let model = Model {
        script: Some(Arc::new(serde_json::from_value(script).unwrap())),
        ..Model::new(pi_ai::Api::Scripted, "scripted", "t", "")
    };
    AgentConfig::new(
        model,
        "sys".into(),
        default_tools(Arc::new(DiskFs::new(dir.to_path_buf())), None),
    )
}

fn tool_results(messages: &[Message]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some((
                r.tool_call_id.clone(),
                pi_ai::join_text(&r.content),
                r.is_error,
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn length_limit_fails_every_call_without_executing() {
    let dir = tmp("len");
    let cfg = config(
        &dir,
        json!({"responses": [
            {"toolCalls": [{"name": "write", "arguments": {"path": "big.txt", "content": "line1"}}, {"name": "bash", "arguments": {"command": "touch ran.txt"}}], "stopReason": "length"},
            {"text": "retrying smaller"}
        ]}),
    );
    let rec = Recorder::default();
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &RunControl::default(),
        &rec,
    )
    .await;
    assert_eq!(
        tool_results(&out.messages),
        vec![
            ("scripted_1_0".into(), LENGTH_LIMIT_TEXT.into(), true),
            ("scripted_1_1".into(), LENGTH_LIMIT_TEXT.into(), true)
        ]
    );
    assert!(!dir.join("big.txt").exists() && !dir.join("ran.txt").exists());
    assert_eq!(out.stop_reason, StopReason::Stop);
    // tool_execution_start still marks processing; execution never happened.
    assert_eq!(
        rec.kinds(),
        [
            "agent_start",
            "turn_start",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "message_update",
            "message_end:assistant",
            "tool_execution_start",
            "tool_execution_end",
            "message_start:toolResult",
            "message_end:toolResult",
            "tool_execution_start",
            "tool_execution_end",
            "message_start:toolResult",
            "message_end:toolResult",
            "turn_end",
            "turn_start",
            "message_start:assistant",
            "message_update",
            "message_end:assistant",
            "turn_end",
            "agent_end"
        ]
    );
}

#[tokio::test]
async fn failing_tools_become_error_results_the_model_sees() {
    let dir = tmp("fail");
    let cfg = config(
        &dir,
        json!({"responses": [
            {"toolCalls": [{"name": "nosuch", "arguments": {}}, {"name": "read", "arguments": {}}, {"name": "read", "arguments": {"path": "../x"}}, {"name": "bash", "arguments": {"command": "echo out; exit 3"}}]},
            {"text": "done"}
        ]}),
    );
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &RunControl::default(),
        &Recorder::default(),
    )
    .await;
    let r = tool_results(&out.messages);
    assert_eq!(
        r[0],
        ("scripted_1_0".into(), "Tool nosuch not found".into(), true)
    );
    assert_eq!(r[1], ("scripted_1_1".into(), "Validation failed for tool \"read\":\n  - path: \"path\" is a required property\n\nReceived arguments:\n{}".into(), true));
    assert!(r[2].1.starts_with("Path ../x is outside the workspace") && r[2].2);
    assert_eq!(
        r[3],
        (
            "scripted_1_3".into(),
            "out\n\n\nCommand exited with code 3".into(),
            true
        )
    );
    assert_eq!(out.stop_reason, StopReason::Stop);
}

#[tokio::test]
async fn steering_enters_after_the_batch_and_follow_up_when_idle() {
    let dir = tmp("steer");
    let cfg = config(
        &dir,
        json!({"responses": [
            {"toolCalls": [{"name": "bash", "arguments": {"command": "sleep 0.3"}}]},
            {"text": "saw steer", "delayMs": 0},
            {"text": "saw follow-up"}
        ]}),
    );
    let control = RunControl::default();
    let rec = Arc::new(Recorder::default());
    let c2 = control.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        c2.enqueue(Message::user_text("follow up"), Delivery::FollowUp);
        c2.enqueue(Message::user_text("use yarn"), Delivery::Steer);
    });
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &control,
        rec.as_ref(),
    )
    .await;
    let shape: Vec<String> = out
        .messages
        .iter()
        .map(|m| match m {
            Message::User(u) => format!("user:{}", u.content.to_text()),
            Message::Assistant(a) => format!("assistant:{}", a.text()),
            Message::ToolResult(r) => format!("result:{}", r.tool_call_id),
            Message::System(s) => format!("system:{}", s.update_text()),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "user:go",
            "assistant:",
            "result:scripted_1_0",
            "user:use yarn",
            "assistant:saw steer",
            "user:follow up",
            "assistant:saw follow-up"
        ]
    );
}

#[tokio::test]
async fn abort_during_a_tool_pairs_the_call_and_ends_aborted() {
    let dir = tmp("abort");
    let cfg = config(
        &dir,
        json!({"responses": [{"toolCalls": [{"name": "bash", "arguments": {"command": "sleep 20"}}, {"name": "ls", "arguments": {}}]}]}),
    );
    let control = RunControl::default();
    let c2 = control.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        c2.cancel.cancel();
    });
    let t0 = std::time::Instant::now();
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &control,
        &Recorder::default(),
    )
    .await;
    assert!(t0.elapsed() < std::time::Duration::from_secs(2));
    let r = tool_results(&out.messages);
    assert_eq!(r.len(), 2);
    assert!(r[0].1.ends_with("Command aborted") && r[0].2);
    assert_eq!(
        r[1],
        ("scripted_1_1".into(), "Operation aborted".into(), true)
    );
    assert_eq!(out.stop_reason, StopReason::Aborted);
}

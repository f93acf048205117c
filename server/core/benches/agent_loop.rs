//! Bench: agent-loop overhead per tool round: 1,000 scripted rounds, each one call of a no-op
//! tool, events to a no-op sink (model, validation, batch, events, context growth included).
//! Prints min / median per round over 10 runs and the process's peak RSS.
//! Run: `cargo bench -p pi-core --bench agent_loop`.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;
use common::peak_rss_kib;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use pi_ai::{Message, Model, ToolSpec};
use pi_core::agent::{
    AgentConfig, AgentEvent, EventSink, RunControl, ToolContext, ToolError, ToolOutput,
};
use pi_core::Tool;
use serde_json::{json, Value};

struct Null;

#[async_trait]
impl EventSink for Null {
    async fn emit(&self, _e: AgentEvent) {}
}

struct Noop;

#[async_trait]
impl Tool for Noop {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            constrained_sampling: None,
            name: "noop".into(),
            description: "does nothing".into(),
            parameters: json!({"type":"object","properties":{"n":{"type":"number"}}}),
        }
    }
    async fn execute(&self, _ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ok"))
    }
}

fn main() {
    let rounds = 1000;
    let mut responses: Vec<Value> = (0..rounds)
        .map(|i| json!({"toolCalls": [{"name": "noop", "arguments": {"n": i}}]}))
        .collect();
    responses.push(json!({"text": "done"}));
    let model = Model {
        script: Some(Arc::new(
            serde_json::from_value(json!({"responses": responses})).unwrap(),
        )),
        ..Model::new(pi_ai::Api::Scripted, "scripted", "b", "")
    };
    let cfg = AgentConfig::new(model, "s".into(), vec![Arc::new(Noop)]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut per_round = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let out = rt.block_on(pi_core::run_agent(
            &cfg,
            vec![],
            vec![Message::user_text("go")],
            &RunControl::default(),
            &Null,
        ));
        assert_eq!(out.messages.len(), 1 + 2 * rounds + 1);
        per_round.push(t.elapsed() / rounds as u32);
    }
    per_round.sort();
    println!("agent loop, {rounds} no-op tool rounds   min {:>8.2?}  median {:>8.2?} per round   peak RSS {} KiB", per_round[0], per_round[per_round.len() / 2], peak_rss_kib());
}

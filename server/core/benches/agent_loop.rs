//! Bench: agent-loop overhead per tool round (scripted in-process model, real `ls` and `read`
//! tools on disk, events to a no-op sink). Prints min / median per round.
//! Run: `cargo bench -p pi-core --bench agent_loop`.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use pi_ai::{Message, Model};
use pi_core::agent::{AgentConfig, AgentEvent, EventSink, RunControl};
use pi_core::fs::DiskFs;
use pi_core::tools::default_tools;
use serde_json::{json, Value};

struct Null;

#[async_trait]
impl EventSink for Null {
    async fn emit(&self, _e: AgentEvent) {}
}

fn main() {
    let dir = std::env::temp_dir().join(format!("pi-bench-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.txt"), "line\n".repeat(1000)).unwrap();
    let rounds = 200;
    let mut responses: Vec<Value> = (0..rounds)
        .map(|i| json!({"toolCalls": [{"name": if i % 2 == 0 { "ls" } else { "read" }, "arguments": {"path": if i % 2 == 0 { "." } else { "a.txt" }}}]}))
        .collect();
    responses.push(json!({"text": "done"}));
    let model = Model {
        script: Some(Arc::new(
            serde_json::from_value(json!({"responses": responses})).unwrap(),
        )),
        ..Model::new("scripted", "scripted", "b", "")
    };
    let cfg = AgentConfig::new(
        model,
        "s".into(),
        default_tools(Arc::new(DiskFs::new(dir.clone())), None),
    );
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
    println!(
        "agent loop, {rounds} tool rounds (ls/read)     min {:>8.2?}  median {:>8.2?} per round",
        per_round[0],
        per_round[per_round.len() / 2]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

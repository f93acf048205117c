//! Bench: what the sandbox adds to one `bash` tool call: 200 calls of `true` per policy
//! (`off`, `workspace-write`, `workspace-write` with network off), min / median per call.
//! Run: `cargo bench -p pi-core --bench sandbox_spawn`.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use pi_core::agent::{Tool, ToolContext};
use pi_core::sandbox::{support, Sandbox, SandboxMode, SandboxSettings};
use pi_core::tools::BashTool;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CALLS: usize = 200;

#[tokio::main]
async fn main() {
    println!("kernel support: {:?}", support());
    let ws = std::env::temp_dir().join(format!("pi-bench-sandbox-{}", std::process::id()));
    std::fs::create_dir_all(&ws).unwrap();
    for (label, mode, network) in [
        ("off", SandboxMode::Off, true),
        ("workspace-write", SandboxMode::WorkspaceWrite, true),
        (
            "workspace-write, network off",
            SandboxMode::WorkspaceWrite,
            false,
        ),
    ] {
        let settings = SandboxSettings {
            mode: Some(mode),
            network: Some(network),
            writable_roots: None,
        };
        let tool = BashTool::with_sandbox(ws.clone(), None, Sandbox::new(&ws, &settings), None);
        let mut times: Vec<Duration> = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let ctx = ToolContext {
                call_id: "b".into(),
                turn: 1,
                cancel: CancellationToken::new(),
                on_update: Arc::new(|_| {}),
                model_input: None,
            };
            let t = Instant::now();
            tool.execute(ctx, json!({"command": "true"})).await.unwrap();
            times.push(t.elapsed());
        }
        times.sort();
        println!(
            "{label:<30} min {:>8.2?}  median {:>8.2?}  per call ({CALLS} calls)",
            times[0],
            times[CALLS / 2]
        );
    }
    std::fs::remove_dir_all(&ws).unwrap();
}

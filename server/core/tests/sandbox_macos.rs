//! The macOS sandbox backend (Seatbelt through `/usr/bin/sandbox-exec`) against real processes:
//! a write outside the workspace is denied and leaves nothing, a write inside works, network
//! off blocks a loopback TCP connection. Compiled on macOS only (the hosted macOS job runs it;
//! docs/platforms.md). Unproven until that job has run.
#![cfg(target_os = "macos")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use pi_core::agent::{Tool, ToolContext};
use pi_core::sandbox::{support, Enforcement, Sandbox, SandboxMode, SandboxSettings};
use pi_core::tools::BashTool;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn ctx() -> ToolContext {
    ToolContext {
        call_id: "call_m".into(),
        turn: 1,
        cancel: CancellationToken::new(),
        on_update: Arc::new(|_| {}),
        model_input: None,
    }
}

fn tool(ws: &std::path::Path, network: bool) -> BashTool {
    let s = SandboxSettings {
        mode: Some(SandboxMode::WorkspaceWrite),
        network: Some(network),
        writable_roots: Some(vec![]),
    };
    BashTool::with_sandbox(ws.to_path_buf(), None, Sandbox::new(ws, &s), None)
}

#[tokio::test]
async fn seatbelt_confines_writes_to_the_workspace() {
    assert_eq!(support().files, Ok("Seatbelt".to_string()));
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let ws = base.join("ws");
    let outside = base.join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let t = tool(&ws, true);
    assert_eq!(t.sandbox().enforcement(), &Enforcement::Enforced);
    let ok = t
        .execute(
            ctx(),
            json!({"command": "echo in > inside.txt && cat inside.txt"}),
        )
        .await
        .unwrap();
    assert_eq!(pi_ai::join_text(&ok.content), "in\n");
    let err = t
        .execute(
            ctx(),
            json!({"command": format!("echo out > {}/escaped.txt", outside.display())}),
        )
        .await
        .unwrap_err();
    assert!(
        err.message.contains("Operation not permitted"),
        "{}",
        err.message
    );
    assert!(!outside.join("escaped.txt").exists());
}

#[tokio::test]
async fn seatbelt_network_off_blocks_a_loopback_connection() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    let probe = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let on = tool(&ws, true)
        .execute(ctx(), json!({"command": probe}))
        .await
        .unwrap();
    assert_eq!(pi_ai::join_text(&on.content), "connected\n");
    let off = tool(&ws, false)
        .execute(ctx(), json!({"command": probe}))
        .await
        .unwrap_err();
    assert!(!off.message.contains("connected\n"), "{}", off.message);
}

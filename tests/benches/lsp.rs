//! Bench: the real `pi-lsp` binary over stdio. Start-up to the initialize response; 10,000
//! incremental didChanges then an agent `read` of the result (ordering + rope cost); one whole
//! prompt with three tool rounds against the loopback mock model (openai-completions).
//! Run: `cargo bench -p pi-e2e --bench lsp` (uses the release binary when `PI_LSP_BIN` points to it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use pi_e2e::lsp_client::{agent_env, file_uri, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, TempDir};
use serde_json::json;

fn stats(name: &str, mut v: Vec<Duration>) {
    v.sort();
    println!(
        "{name:<52} min {:>9.2?}  median {:>9.2?}",
        v[0],
        v[v.len() / 2]
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let bin = pi_lsp_bin();
        println!("binary: {}", bin.display());
        let tmp = TempDir::new("bench");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let file = ws.join("doc.txt");

        let mut start = Vec::new();
        let mut changes = Vec::new();
        let mut rounds = Vec::new();
        for _ in 0..7 {
            let mock = MockModel::start_with_delay(vec![
                Step::call("r1", "read", json!({"path": "doc.txt"})),
                Step::call("r2", "ls", json!({})),
                Step::call("r3", "read", json!({"path": "doc.txt", "limit": 5})),
                Step::text("done"),
                Step::call("r4", "read", json!({"path": "doc.txt"})),
                Step::text("done"),
            ], Duration::ZERO)
            .await;
            let env = agent_env(&tmp.path().join("agent"), &mock.models_json(), &[("PI_LSP_LOG", "warn")]);
            let t = Instant::now();
            let mut c = LspClient::start(&bin, &ws, &env, EditorBehavior::default()).await;
            start.push(t.elapsed());

            c.open(&file, "").await;
            let t = Instant::now();
            c.request("agent/prompt", json!({"text": "three rounds"})).await.unwrap();
            c.run_until_end(Duration::from_secs(30)).await;
            rounds.push(t.elapsed());

            let t = Instant::now();
            for i in 0..10_000 {
                c.notify(
                    "textDocument/didChange",
                    json!({"textDocument": {"uri": file_uri(&file), "version": i + 2},
                           "contentChanges": [{"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": "x🦊\n"}]}),
                )
                .await;
            }
            c.request("agent/prompt", json!({"text": "read"})).await.unwrap();
            let events = c.run_until_end(Duration::from_secs(30)).await;
            changes.push(t.elapsed());
            let read = events.iter().find(|e| e["event"]["type"] == "tool_execution_end").unwrap();
            let text = read["event"]["result"]["content"][0]["text"].as_str().unwrap();
            assert!(text.starts_with("x🦊\nx🦊\n"), "{}", &text[..20]);
            c.shutdown().await;
        }
        stats("start → initialize response", start);
        stats("prompt with 3 tool rounds → agent_end", rounds);
        stats("10,000 didChanges + prompt reading them → agent_end", changes);
    });
}

//! Bench: heap allocations while one 10,000-delta response is parsed and reconstructed
//! (counted with `dhat`; the loopback server in the same process is included, so the figure
//! is an upper bound). Run: `cargo bench -p pi-ai --bench stream_allocs`.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use common::{anthropic_body, model, openai_body, server};
use pi_ai::{Context, Message, Model, StreamOptions};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

async fn count(name: &str, m: Model, deltas: usize) {
    let ctx = Context {
        system_prompt: "s".into(),
        messages: vec![Message::user_text("go")],
        tools: vec![],
    };
    // Warm up (connection pool, lazy statics), then count one response.
    pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    let before = dhat::HeapStats::get();
    let msg = pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    let after = dhat::HeapStats::get();
    assert!(!msg.content.is_empty());
    let blocks = after.total_blocks - before.total_blocks;
    let bytes = after.total_bytes - before.total_bytes;
    println!(
        "{name:<44} {blocks} allocations, {:.1} per delta, {:.0} bytes per delta",
        blocks as f64 / deltas as f64,
        bytes as f64 / deltas as f64
    );
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let chunks: usize = std::env::var("CHUNKS")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(10_000);
        let o = server(openai_body(chunks, 0)).await;
        count(
            "openai-completions 10k text deltas",
            model(pi_ai::Api::OpenaiCompletions, o),
            chunks,
        )
        .await;
        let a = server(anthropic_body(chunks)).await;
        count(
            "anthropic-messages 10k text deltas",
            model(pi_ai::Api::AnthropicMessages, a),
            chunks,
        )
        .await;
    });
}

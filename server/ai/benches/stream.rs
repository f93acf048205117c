//! Bench: reconstructing large streamed responses through the real adapters from a loopback
//! HTTP server (SSE framing, JSON parsing, MessageBuilder, channel). Prints min / median per
//! response and the event rate. Run: `cargo bench -p pi-ai --bench stream`.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Instant;

mod common;

use common::{anthropic_body, model, openai_body, server};
use pi_ai::{Context, Message, Model, StreamOptions};

async fn measure(name: &str, m: Model, events_per_response: usize, runs: usize) {
    let ctx = Context {
        system_prompt: "s".into(),
        messages: vec![Message::user_text("go")],
        tools: vec![],
    };
    let mut times = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let mut s = pi_ai::stream(&m, &ctx, StreamOptions::default());
        let mut n = 0;
        while s.next().await.is_some() {
            n += 1;
        }
        assert!(n >= events_per_response);
        times.push(t.elapsed());
    }
    times.sort();
    let med = times[times.len() / 2];
    let rate = events_per_response as f64 / med.as_secs_f64();
    println!(
        "{name:<44} min {:>8.2?}  median {:>8.2?}  ({:.0} events/s at median)",
        times[0], med, rate
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let chunks = 10_000;
        let o = server(openai_body(chunks, 50)).await;
        measure(
            "openai-completions 10k text deltas + 50 calls",
            model(pi_ai::Api::OpenaiCompletions, o),
            chunks + 200,
            30,
        )
        .await;
        let a = server(anthropic_body(chunks)).await;
        measure(
            "anthropic-messages 10k text deltas",
            model(pi_ai::Api::AnthropicMessages, a),
            chunks,
            30,
        )
        .await;
    });
}

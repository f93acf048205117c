//! Bench (case 19.2): one SSE line of many megabytes — a single text delta of 8 MB and of
//! 50 MB — streamed through the real adapter from a loopback HTTP server in 16 KiB reads.
//! Prints the time, the peak RSS of the process and the RSS after the response was dropped.
//! Also frames the 8 MB line with the framer used before (`eventsource-stream`, which re-scans
//! its buffer on every read) and with `sse-parse`, framing only.
//! Run: `cargo bench -p pi-ai --bench long_line [-- 50]` (one size per run gives its own peak).
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::Instant;

use futures::StreamExt;

mod common;

use common::{model, server};
use pi_ai::{Context, Message, StreamOptions};

/// `VmRSS` / `VmHWM` of this process, in MiB.
fn mem(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

fn body(mb: usize) -> Vec<u8> {
    let text = "x".repeat(mb * 1_000_000);
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\ndata: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
    )
    .into_bytes()
}

async fn end_to_end(mb: usize) {
    let base = server(body(mb)).await;
    let m = model(pi_ai::Api::OpenaiCompletions, format!("{base}/v1"));
    let ctx = Context {
        system_prompt: String::new(),
        messages: vec![Message::user_text("go")],
        tools: vec![],
    };
    let rss0 = mem("VmRSS:");
    let t = Instant::now();
    let msg = pi_ai::stream(&m, &ctx, StreamOptions::default())
        .result()
        .await;
    let took = t.elapsed();
    assert_eq!(msg.text().len(), mb * 1_000_000);
    let peak = mem("VmHWM:");
    drop(msg);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    println!(
        "one {mb} MB delta, end to end: {took:>9.2?}  RSS before {rss0:.0} MiB, peak {peak:.0} MiB, after drop {:.0} MiB",
        mem("VmRSS:")
    );
}

async fn framing(mb: usize) {
    let bytes = body(mb);
    let chunks = || {
        futures::stream::iter(
            bytes
                .chunks(16 * 1024)
                .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        )
    };
    let t = Instant::now();
    let mut parser = sse_parse::SseParser::new();
    let mut n = 0;
    let mut s = chunks();
    while let Some(Ok(c)) = s.next().await {
        parser.feed(&c);
        while parser.next_event().is_some() {
            n += 1;
        }
    }
    assert_eq!(n, 3);
    println!(
        "one {mb} MB line, framing with sse-parse:          {:>9.2?}",
        t.elapsed()
    );
    use eventsource_stream::Eventsource;
    let t = Instant::now();
    let n = chunks().eventsource().count().await;
    assert_eq!(n, 3);
    println!(
        "one {mb} MB line, framing with eventsource-stream: {:>9.2?}",
        t.elapsed()
    );
}

fn main() {
    let sizes: Vec<usize> = match std::env::args().nth(1).and_then(|a| a.parse().ok()) {
        Some(mb) => vec![mb],
        None => vec![8, 50],
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for mb in sizes {
            end_to_end(mb).await;
        }
        framing(8).await;
    });
}

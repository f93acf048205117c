//! Bench: what a client is shown of a 10,000-message session.
//!
//! A generated Pi v3 session of 10,000 messages (2,500 turns: a prompt, an assistant tool call,
//! a ~4 KB tool result, an answer) is opened with [`SessionWriter::open`]; then
//! 1. the last page of `agent/session/history` (50 entries, [`SessionTree::history`] plus the
//!    JSON text of the page): time per page and bytes;
//! 2. a page in the middle (`beforeEntryId` 5,000 entries back);
//! 3. the whole model context as `agent/messages` gives it ([`context_agent_messages`] plus its
//!    JSON text), for comparison: what one frame of the whole session costs.
//!
//! Run: `cargo bench -p pi-core --bench history` (`PI_BENCH_MESSAGES` changes the count).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use pi_core::session::{context_agent_messages, SessionWriter};
use serde_json::{json, Value};

/// Writes a session of `messages` messages (a multiple of 4); returns the ids of its entries.
fn generate(path: &Path, messages: usize) -> Vec<String> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let ts = "2026-12-01T10:00:00.000Z";
    writeln!(
        f,
        "{}",
        json!({"type":"session","version":3,"id":"0194a000-0000-7000-8000-000000000002","timestamp":ts,"cwd":"/work/project"})
    )
    .unwrap();
    let mut ids: Vec<String> = Vec::new();
    let mut line = |f: &mut std::io::BufWriter<std::fs::File>, mut v: Value| {
        let id = format!("{:08x}", ids.len() + 1);
        v["id"] = json!(id);
        v["parentId"] = ids.last().map(|p| json!(p)).unwrap_or(Value::Null);
        v["timestamp"] = json!(ts);
        writeln!(f, "{v}").unwrap();
        ids.push(id);
    };
    let result = "fn handler(req: Request) -> Response { route(req).await }\n".repeat(70);
    for turn in 0..messages / 4 {
        line(
            &mut f,
            json!({"type":"message","message":{"role":"user","content":format!("Turn {turn}: read src/h{turn}.rs"),"timestamp":1}}),
        );
        line(
            &mut f,
            json!({"type":"message","message":{"role":"assistant","content":[{"type":"toolCall","id":format!("toolu_{turn}"),"name":"read","arguments":{"path":format!("src/h{turn}.rs")}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":12000,"output":40,"cacheRead":0,"cacheWrite":0,"totalTokens":12040,"cost":{"input":0.036,"output":0.0006,"cacheRead":0,"cacheWrite":0,"total":0.0366}},"stopReason":"toolUse","timestamp":2}}),
        );
        line(
            &mut f,
            json!({"type":"message","message":{"role":"toolResult","toolCallId":format!("toolu_{turn}"),"toolName":"read","content":[{"type":"text","text":result}],"isError":false,"timestamp":3}}),
        );
        line(
            &mut f,
            json!({"type":"message","message":{"role":"assistant","content":[{"type":"text","text":"The handler routes the request."}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":16000,"output":20,"cacheRead":0,"cacheWrite":0,"totalTokens":16020,"cost":{"input":0.048,"output":0.0003,"cacheRead":0,"cacheWrite":0,"total":0.0483}},"stopReason":"stop","timestamp":4}}),
        );
    }
    f.flush().unwrap();
    ids
}

/// Runs `f` `n` times; returns the median time and the last result.
fn median<T>(n: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(n);
    let mut last = None;
    for _ in 0..n {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed());
    }
    times.sort();
    (times[n / 2], last.unwrap())
}

fn main() {
    let messages: usize = std::env::var("PI_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = std::env::temp_dir().join(format!("pi-bench-history-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.jsonl");
    let ids = generate(&path, messages);
    let size = std::fs::metadata(&path).unwrap().len();
    let t = Instant::now();
    let (writer, _) = SessionWriter::open(&path).unwrap();
    let open = t.elapsed();
    let tree = writer.tree_snapshot();
    let leaf = writer.leaf().map(str::to_string);
    println!(
        "session: {messages} messages, {:.1} MB; open {:.1} ms",
        size as f64 / 1e6,
        open.as_secs_f64() * 1e3
    );

    let page = |before: Option<&str>| {
        let p = tree.history(leaf.as_deref(), before, 50).unwrap();
        serde_json::to_string(&json!({"entries": p.entries, "hasMore": p.has_more})).unwrap()
    };
    let (t, text) = median(51, || page(None));
    println!(
        "history last page (50 entries): {:.3} ms median of 51, {} bytes",
        t.as_secs_f64() * 1e3,
        text.len()
    );
    let middle = &ids[ids.len() / 2];
    let (t, text) = median(51, || page(Some(middle)));
    println!(
        "history page 5,000 entries back: {:.3} ms median of 51, {} bytes",
        t.as_secs_f64() * 1e3,
        text.len()
    );
    let (t, text) = median(5, || {
        let m = context_agent_messages(&tree, leaf.as_deref());
        serde_json::to_string(&m).unwrap()
    });
    println!(
        "whole context (agent/messages): {:.1} ms median of 5, {:.1} MB",
        t.as_secs_f64() * 1e3,
        text.len() as f64 / 1e6
    );
    drop(writer);
    let _ = std::fs::remove_dir_all(&dir);
}

//! Compact deltas (`initializationOptions.compactDeltas`): a client that asks for them gets
//! streamed deltas as `agent/delta [ref, seq, contentIndex, delta]` and every other event as
//! `agent/event` with `ref`; expanding them by the documented rule (docs/protocol.md "Compact
//! deltas") gives, as whole values, the events a client that did not ask receives for the same
//! script (once consecutive deltas of a block are joined: reads group them by timing) —
//! thinking, text and tool-call argument deltas, with coalescing off and on — at no more than
//! 100 bytes on the wire per 8-character delta.
//!
//! A real LSP client over stdio against the loopback mock model (Anthropic SSE, one write per
//! delta); both servers of a comparison run on the same workspace one after the other.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::HashMap;
use std::time::Duration;

use pi_e2e::lsp_client::{agent_env, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, TempDir};
use serde_json::{json, Value};

/// Deltas per thinking and text block of the first answer.
const N: usize = 150;
/// 8-character text deltas of the second answer (the bytes-per-delta figure).
const M: usize = 600;

fn sse(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Thinking, text (with characters JSON escapes) and a `read` call whose arguments come in
/// 3-byte pieces.
fn first_answer() -> Vec<String> {
    let mut ev = vec![sse(
        "message_start",
        json!({"type":"message_start","message":{"id":"msg_c1","type":"message","role":"assistant","content":[],"model":"mock-ant-1","usage":{"input_tokens":100,"output_tokens":1}}}),
    )];
    ev.push(sse("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})));
    for k in 0..N {
        ev.push(sse("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":format!("t{k:06} ")}})));
    }
    ev.push(sse("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2lnbmVk"}})));
    ev.push(sse(
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    ));
    ev.push(sse(
        "content_block_start",
        json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
    ));
    for k in 0..N {
        let d = if k % 10 == 3 {
            "\"é\\\n\t✓ ".to_string()
        } else {
            format!("w{k:06} ")
        };
        ev.push(sse(
            "content_block_delta",
            json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":d}}),
        ));
    }
    ev.push(sse(
        "content_block_stop",
        json!({"type":"content_block_stop","index":1}),
    ));
    ev.push(sse("content_block_start", json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"call_1","name":"read","input":{}}})));
    let args = json!({"path": "notes.txt"}).to_string();
    for piece in args.as_bytes().chunks(3) {
        let piece = std::str::from_utf8(piece).unwrap();
        ev.push(sse("content_block_delta", json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":piece}})));
    }
    ev.push(sse(
        "content_block_stop",
        json!({"type":"content_block_stop","index":2}),
    ));
    ev.push(sse("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":10}})));
    ev.push(sse("message_stop", json!({"type":"message_stop"})));
    ev
}

/// [`M`] deltas of 8 characters.
fn second_answer() -> Vec<String> {
    let mut ev = vec![sse(
        "message_start",
        json!({"type":"message_start","message":{"id":"msg_c2","type":"message","role":"assistant","content":[],"model":"mock-ant-1","usage":{"input_tokens":100,"output_tokens":1}}}),
    )];
    ev.push(sse(
        "content_block_start",
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    ));
    for _ in 0..M {
        ev.push(sse("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"abcdefg "}})));
    }
    ev.push(sse(
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    ));
    ev.push(sse("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":10}})));
    ev.push(sse("message_stop", json!({"type":"message_stop"})));
    ev
}

/// The documented expansion: `agent/event` loses `ref` (after its `sessionId`, `runId` and
/// blocks' kinds are noted under it), `agent/delta` becomes the full event.
#[derive(Default)]
struct Expander {
    refs: HashMap<u64, (Value, Value, HashMap<u64, &'static str>)>,
}

impl Expander {
    fn expand(&mut self, msg: &Value) -> Option<Value> {
        match msg["method"].as_str()? {
            "agent/event" => {
                let mut p = msg["params"].clone();
                if let Some(r) = p.as_object_mut().unwrap().remove("ref") {
                    let st = self.refs.entry(r.as_u64().unwrap()).or_default();
                    st.0 = p["sessionId"].clone();
                    st.1 = p["runId"].clone();
                    let ev = &p["event"];
                    if ev["type"] == "message_start" {
                        st.2.clear();
                    }
                    let ae = &ev["assistantMessageEvent"];
                    let kind = match ae["type"].as_str() {
                        Some("text_start") => Some("text_delta"),
                        Some("thinking_start") => Some("thinking_delta"),
                        Some("toolcall_start") => Some("toolcall_delta"),
                        _ => None,
                    };
                    if let (Some(kind), Some(i)) = (kind, ae["contentIndex"].as_u64()) {
                        st.2.insert(i, kind);
                    }
                }
                Some(p)
            }
            "agent/delta" => {
                let a = msg["params"].as_array().expect("positional params");
                assert_eq!(a.len(), 4, "agent/delta params: {msg}");
                let st = &self.refs[&a[0].as_u64().unwrap()];
                let i = a[2].as_u64().unwrap();
                Some(json!({"sessionId": st.0, "runId": st.1, "seq": a[1],
                    "event": {"type": "message_update", "assistantMessageEvent":
                        {"type": st.2[&i], "contentIndex": i, "delta": a[3]}}}))
            }
            _ => None,
        }
    }
}

/// What one client saw of one prompt's run.
struct Seen {
    /// The events, expanded, with ids and timestamps made comparable.
    events: Vec<Value>,
    /// `agent/delta` frames received.
    compact_frames: usize,
    /// Bytes of all `agent/delta` frames (header included).
    delta_frame_bytes: usize,
    /// The largest `agent/delta` frame carrying "abcdefg " (header included), in bytes.
    largest_delta_frame: usize,
    /// Bytes of every frame from the second answer's `message_start` to its `message_end`
    /// (both included), per delta of that answer.
    bytes_per_delta: f64,
    /// The same bytes per delta event the client got for that answer (several of the
    /// model's deltas in one read come as one).
    bytes_per_delta_event: f64,
}

/// Ids and clock readings differ between two servers: named by their first appearance and
/// zeroed.
fn comparable(v: &mut Value, ids: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match (k.as_str(), x.as_str()) {
                    ("sessionId" | "runId", Some(id)) => {
                        let n = match ids.iter().position(|i| i == id) {
                            Some(n) => n,
                            None => {
                                ids.push(id.to_string());
                                ids.len() - 1
                            }
                        };
                        *x = json!(format!("id{n}"));
                    }
                    // Times: when it happened, and how long a tool ran (Pi 1.6's
                    // `durationMs` on `tool_execution_end`).
                    ("timestamp" | "durationMs", _) => *x = json!(0),
                    _ => comparable(x, ids),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| comparable(x, ids)),
        _ => {}
    }
}

/// Runs the script once on a fresh server over `tmp`'s workspace.
async fn run(tmp: &TempDir, compact: bool, coalesce_ms: Option<u64>) -> Seen {
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "value=1\n").unwrap();
    let mock = MockModel::start_with_delay(
        vec![Step::Events(first_answer()), Step::Events(second_answer())],
        Duration::from_millis(1),
    )
    .await;
    let env = agent_env(
        &tmp.path().join("agent"),
        &mock.models_json(),
        &[("PI_LSP_LOG", "warn")],
    );
    let mut options = json!({"compactDeltas": compact});
    if let Some(ms) = coalesce_ms {
        options["coalesceDeltasMs"] = json!(ms);
    }
    let mut c = LspClient::start(
        &pi_lsp_bin(),
        &ws,
        &env,
        EditorBehavior {
            initialization_options: Some(options),
            approval_policy: Some("approve-all"),
            ..Default::default()
        },
    )
    .await;
    c.request(
        "agent/prompt",
        json!({"text": "stream please", "model": "mockant/mock-ant-1"}),
    )
    .await
    .unwrap();
    loop {
        let n = c
            .next_notification(Duration::from_secs(60))
            .await
            .expect("agent_settled within 60 s");
        // The harness's last word on the run (after `agent_end`): both modes see it.
        if n["method"] == "agent/event" && n["params"]["event"]["type"] == "agent_settled" {
            break;
        }
    }
    let (log, sizes) = (c.log(), c.log_bytes());
    let mut x = Expander::default();
    let mut ids = Vec::new();
    let (mut events, mut compact_frames, mut largest) = (Vec::new(), 0, 0);
    let mut delta_frame_bytes = 0;
    let (mut in_second, mut second_bytes, mut second_deltas) = (false, 0usize, 0usize);
    for (msg, size) in log.iter().zip(sizes) {
        if msg["method"] == "agent/delta" {
            compact_frames += 1;
            delta_frame_bytes += size;
            if msg["params"][3] == "abcdefg " {
                largest = largest.max(size);
            }
        }
        let Some(mut e) = x.expand(msg) else {
            if in_second {
                second_bytes += size;
            }
            continue;
        };
        let t = &e["event"];
        let second_start = t["type"] == "message_start"
            && t["message"]["role"] == "assistant"
            && events
                .iter()
                .any(|e: &Value| e["event"]["type"] == "turn_end");
        if second_start {
            in_second = true;
        }
        if in_second {
            second_bytes += size;
            if t["assistantMessageEvent"]["type"] == "text_delta" {
                second_deltas += 1;
            }
        }
        if t["type"] == "message_end" && in_second && t["message"]["role"] == "assistant" {
            in_second = false;
        }
        comparable(&mut e, &mut ids);
        events.push(e);
    }
    c.shutdown().await;
    Seen {
        events,
        compact_frames,
        delta_frame_bytes,
        largest_delta_frame: largest,
        bytes_per_delta: second_bytes as f64 / M as f64,
        bytes_per_delta_event: second_bytes as f64 / second_deltas.max(1) as f64,
    }
}

/// The deltas of the events, as (kind, contentIndex, delta).
fn deltas(events: &[Value]) -> Vec<(String, u64, String)> {
    events
        .iter()
        .map(|e| &e["event"]["assistantMessageEvent"])
        .filter(|a| a["type"].as_str().is_some_and(|t| t.ends_with("_delta")))
        .map(|a| {
            (
                a["type"].as_str().unwrap().to_string(),
                a["contentIndex"].as_u64().unwrap(),
                a["delta"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Consecutive deltas of one block joined, `seq` dropped (after checking it counts 1, 2, 3…):
/// what coalescing may change between two runs of the same script.
fn joined(events: &[Value]) -> Vec<Value> {
    for (k, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], json!(k + 1), "seq of event {k}: {e}");
    }
    let mut out: Vec<Value> = Vec::new();
    for e in events {
        let mut e = e.clone();
        e.as_object_mut().unwrap().remove("seq");
        let a = &e["event"]["assistantMessageEvent"];
        let is_delta = a["type"].as_str().is_some_and(|t| t.ends_with("_delta"));
        if let Some(last) = out.last_mut() {
            let b = &last["event"]["assistantMessageEvent"];
            if is_delta && b["type"] == a["type"] && b["contentIndex"] == a["contentIndex"] {
                let more = a["delta"].as_str().unwrap().to_string();
                let joined = format!("{}{more}", b["delta"].as_str().unwrap());
                last["event"]["assistantMessageEvent"]["delta"] = json!(joined);
                continue;
            }
        }
        out.push(e);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_deltas_rebuild_the_same_events_one_by_one() {
    let tmp = TempDir::new("compact-deltas");
    let full = run(&tmp, false, Some(0)).await;
    let compact = run(&tmp, true, Some(0)).await;
    // Every delta went out as it came: alone, or joined with the others of its block that the
    // same read brought (the server joins those at the source; the model writes one delta a
    // millisecond, so reads group them by timing). Tool-call argument pieces are never joined.
    let pieces = json!({"path": "notes.txt"}).to_string().len().div_ceil(3);
    let all = 2 * N + pieces + M;
    let calls = |seen: &Seen| {
        deltas(&seen.events)
            .into_iter()
            .filter(|d| d.0 == "toolcall_delta")
            .count()
    };
    assert_eq!((calls(&full), calls(&compact)), (pieces, pieces));
    assert!(deltas(&full.events).len() <= all);
    assert_eq!(full.compact_frames, 0);
    // ...and each of them in the compact form, the same events once joined.
    assert_eq!(compact.compact_frames, deltas(&compact.events).len());
    assert_eq!(joined(&compact.events), joined(&full.events));
    eprintln!(
        "coalesceDeltasMs 0, whole answer: {:.1} B/delta full, {:.1} B/delta compact; agent/delta frames: {:.1} B average, {} B largest",
        full.bytes_per_delta, compact.bytes_per_delta, compact.delta_frame_bytes as f64 / all as f64, compact.largest_delta_frame
    );
    assert!(
        compact.largest_delta_frame <= 100,
        "an 8-character delta took {} B",
        compact.largest_delta_frame
    );
    assert!(
        compact.delta_frame_bytes as f64 / all as f64 <= 100.0,
        "{} B per agent/delta frame",
        compact.delta_frame_bytes as f64 / all as f64
    );
    assert!(
        full.bytes_per_delta_event > 250.0,
        "{}",
        full.bytes_per_delta_event
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_deltas_rebuild_the_same_events_coalesced() {
    let tmp = TempDir::new("compact-deltas-coalesced");
    let full = run(&tmp, false, None).await;
    let compact = run(&tmp, true, None).await;
    // Coalescing groups deltas by timing, which differs between runs: the same events once
    // consecutive deltas of a block are joined, numbered 1, 2, 3… on both sides.
    assert_eq!(joined(&compact.events), joined(&full.events));
    // Every delta (coalesced or not) went out in the compact form.
    assert_eq!(compact.compact_frames, deltas(&compact.events).len());
    eprintln!(
        "coalesceDeltasMs default, 1 ms apart: {:.1} B/delta full, {:.1} B/delta compact",
        full.bytes_per_delta, compact.bytes_per_delta
    );
    assert!(
        compact.bytes_per_delta <= full.bytes_per_delta,
        "{} > {}",
        compact.bytes_per_delta,
        full.bytes_per_delta
    );
}

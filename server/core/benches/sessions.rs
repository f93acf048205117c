//! Bench: sessions and compaction at scale (the sessions issue's figures).
//!
//! 1. Open a generated 100 MB Pi-format session to ready-to-prompt (file read, tree, active
//!    path, model context) in a fresh process: wall time and peak RSS (5 runs), with the
//!    server's allocator (the system's). The child process exits once the session is open, without
//!    freeing it (as any process exits); it also reports a second, full build of the model
//!    context from the tree (lines read back from the file), which opening does not need. With
//!    `PI_REF_BIN` set, Pi 0.73.1 opens the same file (`--mode rpc --session FILE`, answering
//!    `get_state`), and an empty session for its start-up cost.
//! 2. List 1,000 sessions of a workspace (name, first prompt, entry count, last activity).
//! 3. Compaction cut-point search (`prepare`) on a branch of 1M tokens.
//!
//! Run: `cargo bench -p pi-core --bench sessions` (`PI_BENCH_MB` changes the file size).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;
use common::peak_rss_kib;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use pi_core::session::{list_sessions, SessionWriter};
use serde_json::{json, Value};

/// Writes a Pi v3 session of about `bytes`: turns of a user prompt, an assistant tool call with
/// usage, a tool result of ~8 KB and an assistant answer.
fn generate(path: &Path, bytes: u64) -> u64 {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let ts = "2026-11-30T10:00:00.000Z";
    writeln!(
        f,
        "{}",
        json!({"type":"session","version":3,"id":"0194a000-0000-7000-8000-000000000001","timestamp":ts,"cwd":"/work/project"})
    )
    .unwrap();
    let mut parent: Option<String> = None;
    let mut n = 0u64;
    let mut written = 0u64;
    let line = |f: &mut std::io::BufWriter<std::fs::File>, v: Value| -> u64 {
        let s = v.to_string();
        writeln!(f, "{s}").unwrap();
        s.len() as u64 + 1
    };
    let mut next = |parent: &mut Option<String>| -> (String, Value) {
        n += 1;
        let id = format!("{n:08x}");
        let p = parent
            .replace(id.clone())
            .map(Value::String)
            .unwrap_or(Value::Null);
        (id, p)
    };
    let result_text = "fn handler(req: Request) -> Response { route(req).await }\n".repeat(140);
    let mut turn = 0u64;
    while written < bytes {
        turn += 1;
        let (id, p) = next(&mut parent);
        written += line(
            &mut f,
            json!({"type":"message","id":id,"parentId":p,"timestamp":ts,"message":{"role":"user","content":format!("Turn {turn}: look at src/handler_{turn}.rs and tell me what the routing does, then fix the error handling."),"timestamp":1_785_232_801_000u64}}),
        );
        let (id, p) = next(&mut parent);
        written += line(
            &mut f,
            json!({"type":"message","id":id,"parentId":p,"timestamp":ts,"message":{"role":"assistant","content":[{"type":"text","text":"Let me read the file."},{"type":"toolCall","id":format!("toolu_{turn:016}"),"name":"read","arguments":{"path":format!("src/handler_{turn}.rs")}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":12000,"output":40,"cacheRead":0,"cacheWrite":0,"totalTokens":12040,"cost":{"input":0.036,"output":0.0006,"cacheRead":0,"cacheWrite":0,"total":0.0366}},"stopReason":"toolUse","timestamp":1_785_232_802_000u64}}),
        );
        let (id, p) = next(&mut parent);
        written += line(
            &mut f,
            json!({"type":"message","id":id,"parentId":p,"timestamp":ts,"message":{"role":"toolResult","toolCallId":format!("toolu_{turn:016}"),"toolName":"read","content":[{"type":"text","text":result_text}],"isError":false,"timestamp":1_785_232_803_000u64}}),
        );
        let (id, p) = next(&mut parent);
        written += line(
            &mut f,
            json!({"type":"message","id":id,"parentId":p,"timestamp":ts,"message":{"role":"assistant","content":[{"type":"text","text":"The handler routes every request through `route`, which returns early on a missing header. I changed the error path to return 400 with a message instead of panicking. ".repeat(4)}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":14000,"output":300,"cacheRead":0,"cacheWrite":0,"totalTokens":14300,"cost":{"input":0.042,"output":0.0045,"cacheRead":0,"cacheWrite":0,"total":0.0465}},"stopReason":"stop","timestamp":1_785_232_804_000u64}}),
        );
    }
    f.flush().unwrap();
    written
}

/// `(seconds, peak RSS KiB)` of `cmd` run under `/usr/bin/time`.
fn timed(mut cmd: Command) -> (f64, u64) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err
        .lines()
        .rev()
        .find(|l| l.starts_with("BENCH "))
        .unwrap_or_else(|| panic!("no timing in: {err}"));
    let mut it = last.split_whitespace().skip(1);
    let secs: f64 = it.next().unwrap().parse().unwrap();
    let kib: u64 = it.next().unwrap().parse().unwrap();
    (secs, kib)
}

fn time_cmd(args: &[&str]) -> Command {
    let mut c = Command::new("/usr/bin/time");
    c.args(["-f", "BENCH %e %M"]).args(args);
    c
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("open-child") {
        // Child: open to ready-to-prompt and report.
        let t = Instant::now();
        let (w, loaded) = SessionWriter::open(Path::new(&args[2])).unwrap();
        let n = loaded.messages.len();
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let rss = peak_rss_kib();
        let mut context_ms = 0.0;
        if args.get(3).map(String::as_str) == Some("rebuild") {
            let t = Instant::now();
            let rebuilt = w.context();
            context_ms = t.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(rebuilt.messages, loaded.messages);
        }
        drop(w);
        println!(
            "{{\"ms\":{ms:.1},\"contextMs\":{context_ms:.1},\"messages\":{n},\"rssKib\":{rss}}}"
        );
        // Exit without freeing the session, as a process does.
        std::process::exit(0);
    }
    let mb: u64 = std::env::var("PI_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = std::env::temp_dir().join(format!("pi-bench-sessions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // 1. Open a 100 MB session.
    let big = dir.join("big.jsonl");
    let size = generate(&big, mb * 1_000_000);
    let exe = std::env::current_exe().unwrap();
    let exe_s = exe.to_str().unwrap();
    let big_s = big.to_str().unwrap();
    let mut ours = Vec::new();
    let mut ours_rss = 0;
    let mut child_ms = Vec::new();
    for _ in 0..5 {
        let mut cmd = time_cmd(&[exe_s, "open-child", big_s]);
        cmd.stdout(std::process::Stdio::piped());
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let stdout: Value = serde_json::from_slice(&out.stdout).unwrap();
        child_ms.push(stdout["ms"].as_f64().unwrap());
        let l = err.lines().rev().find(|l| l.starts_with("BENCH ")).unwrap();
        let mut it = l.split_whitespace().skip(1);
        ours.push(it.next().unwrap().parse::<f64>().unwrap());
        ours_rss = ours_rss.max(it.next().unwrap().parse::<u64>().unwrap());
    }
    let out = Command::new(exe_s)
        .args(["open-child", big_s, "rebuild"])
        .output()
        .unwrap();
    let rebuild: Value = serde_json::from_slice(&out.stdout).unwrap();
    println!(
        "open {:.1} MB session: process {:.2} s median (min {:.2}), open() {:.0} ms median; peak RSS {:.1} MiB = {:.2}× the file; a second full context build after opening {:.0} ms (open() {:.0} ms in that run)",
        size as f64 / 1e6,
        median(ours.clone()),
        ours.iter().cloned().fold(f64::MAX, f64::min),
        median(child_ms.clone()),
        ours_rss as f64 / 1024.0,
        ours_rss as f64 * 1024.0 / size as f64,
        rebuild["contextMs"].as_f64().unwrap(),
        rebuild["ms"].as_f64().unwrap(),
    );
    if let Ok(pi) = std::env::var("PI_REF_BIN") {
        let empty = dir.join("empty.jsonl");
        std::fs::write(
            &empty,
            format!(
                "{}\n",
                json!({"type":"session","version":3,"id":"0194a000-0000-7000-8000-000000000002","timestamp":"2026-11-30T10:00:00.000Z","cwd":"/work/project"})
            ),
        )
        .unwrap();
        let agent = dir.join("pi-agent");
        std::fs::create_dir_all(&agent).unwrap();
        let run_pi = |file: &PathBuf| -> (f64, u64) {
            let script = format!(
                "printf '%s\\n' '{{\"id\":\"s\",\"type\":\"get_state\"}}' | {pi} --mode rpc --session {}",
                file.display()
            );
            let mut cmd = time_cmd(&["sh", "-c", &script]);
            cmd.current_dir(&dir)
                .env("PI_OFFLINE", "1")
                .env("PI_CODING_AGENT_DIR", &agent)
                .stdout(std::process::Stdio::null());
            timed(cmd)
        };
        let e: Vec<(f64, u64)> = (0..5).map(|_| run_pi(&empty)).collect();
        let b: Vec<(f64, u64)> = (0..5).map(|_| run_pi(&big)).collect();
        let pi_big = median(b.iter().map(|x| x.0).collect());
        let pi_empty = median(e.iter().map(|x| x.0).collect());
        let ours_med = median(ours);
        println!(
            "Pi 0.73.1: empty session {:.2} s, {:.1} MB session {:.2} s (open cost {:.2} s), peak RSS {:.0} MiB; ours {:.2} s → {:.1}× faster whole process, {:.1}× on the open cost (Pi's open cost over our whole process; {:.1}× over our open())",
            pi_empty,
            size as f64 / 1e6,
            pi_big,
            pi_big - pi_empty,
            b.iter().map(|x| x.1).max().unwrap() as f64 / 1024.0,
            ours_med,
            pi_big / ours_med,
            (pi_big - pi_empty) / ours_med,
            (pi_big - pi_empty) * 1000.0 / median(child_ms)
        );
    }
    std::fs::remove_file(&big).unwrap();

    // 2. List 1,000 sessions.
    let list_dir = dir.join("sessions");
    std::fs::create_dir_all(&list_dir).unwrap();
    for i in 0..1000 {
        generate(
            &list_dir.join(format!("2026-11-30T10-00-{i:04}_s{i}.jsonl")),
            40_000,
        );
    }
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let l = list_sessions(&list_dir);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(l.len(), 1000);
    }
    println!(
        "list 1,000 sessions (40 KB each): {:.1} ms median, {:.1} ms min",
        median(times.clone()),
        times.iter().cloned().fold(f64::MAX, f64::min)
    );

    // 3. Cut-point search on 1M tokens.
    let cut_file = dir.join("cut.jsonl");
    generate(&cut_file, 4_000_000);
    let (tree, _) = pi_core::session::read_tree(&cut_file, false).unwrap();
    let path = tree.path(tree.last_id().unwrap());
    let tokens: u64 = path
        .iter()
        .filter_map(|e| pi_core::session::entry_message(e))
        .map(|m| pi_core::compaction::estimate_tokens(&m))
        .sum();
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let prep = pi_core::compaction::prepare(&path, 20_000).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(!prep.messages_to_summarize.is_empty());
    }
    println!(
        "compaction prepare (cut point, messages to summarise, file lists) on {} entries / {:.2}M tokens: {:.1} ms median",
        path.len(),
        tokens as f64 / 1e6,
        median(times)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

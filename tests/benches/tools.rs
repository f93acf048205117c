//! Bench: the coding tools through the real `pi-lsp` binary over stdio.
//! - an `edit` on a 50,000-line (2.4 MB) open buffer, two figures:
//!   - the server's own time for the tool (`execute` from start to result: read of the buffer,
//!     stale check, matching, the diff and the edited text's hash, position conversion, the
//!     `workspace/applyEdit` round trip (the fake editor's own work included), waiting for the
//!     editor's `didChange`, writing the buffer to disk), which the server logs as
//!     `elapsed_us` at debug level;
//!   - the time from `tool_execution_start` to `tool_execution_end` as the client sees them
//!     (the above plus event serialisation and the pipe).
//!
//!   The fake editor answers like VS Code and Neovim do for a server with incremental sync:
//!   it sends the edit back as an incremental `didChange` (not the whole 2.4 MB text);
//! - `grep` over 20,000 files, same measure, next to the `rg` binary when one is on `PATH`.
//!
//! - `read` of a 200 MB text file and of a 5 GB sparse file: the server's peak RSS (`VmHWM`)
//!   after `initialize` and after the read, and the read's time (issue 19 item 5);
//!
//! Run: `cargo bench -p pi-e2e --bench tools` (uses the release binary when `PI_LSP_BIN` points
//! to it); `cargo bench -p pi-e2e --bench tools -- edit` (or `read`, `grep`) runs one part.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use pi_e2e::lsp_client::{agent_env, tool_result_text, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, TempDir};
use serde_json::{json, Value};

/// The phases the server logs for an edit: the tool's (`read_us`, `plan_us`, `diff_us`,
/// `replace_us`) and, inside `replace_us`, the editor file system's (`check_us`,
/// `apply_edit_us`, `settle_us`); inside `settle_us`, the wait for the editor's `didChange`
/// (`wait_us`) and the write of the buffer to disk (`write_us`).
const PHASES: [&str; 9] = [
    "read_us",
    "plan_us",
    "replace_us",
    "check_us",
    "apply_edit_us",
    "settle_us",
    "wait_us",
    "write_us",
    "diff_us",
];

fn stats(name: &str, mut v: Vec<Duration>) {
    v.sort();
    println!(
        "{name:<60} min {:>9.2?}  median {:>9.2?}",
        v[0],
        v[v.len() / 2]
    );
}

/// Client-side time between the start and end events of the first call of `tool`.
fn tool_time(events: &[(Instant, Value)], tool: &str) -> Duration {
    let at = |ty: &str| {
        events
            .iter()
            .find(|(_, e)| e["event"]["type"] == ty && e["event"]["toolName"] == tool)
            .map(|(t, _)| *t)
            .unwrap()
    };
    at("tool_execution_end") - at("tool_execution_start")
}

async fn timed_run(c: &mut LspClient) -> Vec<(Instant, Value)> {
    let mut out = Vec::new();
    loop {
        let n = c.next_notification(Duration::from_secs(60)).await.unwrap();
        if n["method"] == "agent/event" {
            let done = n["params"]["event"]["type"] == "agent_end";
            out.push((Instant::now(), n["params"].clone()));
            if done {
                return out;
            }
        }
    }
}

/// Whether the part `name` runs: every part when no filter is given on the command line.
fn selected(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}

/// `VmHWM` (peak resident set) of process `pid`, in KiB, from `/proc`.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Issue 19 item 5: the server's peak RSS for a `read` of a 200 MB text file and of a 5 GB
/// sparse file (no line end at all), each in a fresh server: the peak after `initialize`, and
/// after the read, and the read's time.
async fn read_memory(bin: &std::path::Path, top: &std::path::Path) {
    let ws = top.join("read-ws");
    std::fs::create_dir_all(&ws).unwrap();
    let text = ws.join("big.log");
    {
        use std::io::Write as _;
        let mut w = std::io::BufWriter::new(std::fs::File::create(&text).unwrap());
        let mut i = 0u64;
        let mut n = 0usize;
        while n < 200 * 1000 * 1000 {
            let line = format!("{i:>12} log line with some text to fill it up 🦊\n");
            n += line.len();
            w.write_all(line.as_bytes()).unwrap();
            i += 1;
        }
    }
    let sparse = ws.join("sparse.bin");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(5 * 1024 * 1024 * 1024)
        .unwrap();
    for (name, file) in [
        ("200 MB text file", "big.log"),
        ("5 GB sparse file", "sparse.bin"),
    ] {
        let mock = MockModel::start_with_delay(
            vec![
                Step::call(
                    "r1",
                    "read",
                    json!({"path": file, "offset": 1000, "limit": 100}),
                ),
                Step::text("done"),
            ],
            Duration::ZERO,
        )
        .await;
        let env = agent_env(
            &top.join("agent"),
            &mock.models_json(),
            &[("PI_LSP_LOG", "warn")],
        );
        let mut c = LspClient::start(bin, &ws, &env, EditorBehavior::default()).await;
        let pid = c.pid().unwrap();
        let before = peak_rss_kib(pid);
        c.request("agent/prompt", json!({"text": "read"}))
            .await
            .unwrap();
        let events = timed_run(&mut c).await;
        let took = tool_time(&events, "read");
        let after = peak_rss_kib(pid);
        println!(
            "read of a {name:<18} peak RSS after initialize {:>7.1} MiB, after the read {:>7.1} MiB (+{:.1} MiB), read {took:.2?}",
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            (after.saturating_sub(before)) as f64 / 1024.0
        );
        c.shutdown().await;
    }
    std::fs::remove_dir_all(&ws).unwrap();
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
        let tmp = TempDir::new("bench-tools");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let file = ws.join("big.rs");
        let big: String = (0..50_000)
            .map(|i| format!("    let value_{i} = compute({i}); // 🦊 line\n"))
            .collect();
        std::fs::write(&file, &big).unwrap();

        let mut edits = Vec::new();
        let mut inside = Vec::new();
        let mut phases: Vec<Vec<Duration>> = vec![Vec::new(); PHASES.len()];
        let rounds = if selected("edit") { 11 } else { 0 };
        for round in 0..rounds {
            let mock = MockModel::start_with_delay(
                vec![
                    Step::call(
                        "e1",
                        "edit",
                        json!({"path": "big.rs", "edits": [{"oldText": "let value_49990 = compute(49990);", "newText": format!("let value_49990 = compute({round});")}]}),
                    ),
                    Step::text("done"),
                ],
                Duration::ZERO,
            )
            .await;
            let env = agent_env(
                &tmp.path().join("agent"),
                &mock.models_json(),
                &[("PI_LSP_LOG", "warn,pi_core::tools::edit=debug,pi_lsp::editor_fs=debug")],
            );
            let editor = EditorBehavior {
                incremental_changes: true,
                ..Default::default()
            };
            let mut c = LspClient::start(&bin, &ws, &env, editor).await;
            c.open(&file, &big).await;
            c.request("agent/prompt", json!({"text": "edit"})).await.unwrap();
            let events = timed_run(&mut c).await;
            let plain: Vec<Value> = events.iter().map(|(_, e)| e.clone()).collect();
            let (text, is_error) = tool_result_text(&plain, "edit");
            assert!(!is_error, "{text}");
            let expected = big.replace(
                "let value_49990 = compute(49990);",
                &format!("let value_49990 = compute({round});"),
            );
            assert!(c.doc(&file).unwrap().text == expected);
            assert!(std::fs::read_to_string(&file).unwrap() == expected);
            edits.push(tool_time(&events, "edit"));
            let log = c.stderr.lock().unwrap().clone();
            let us: u64 = log
                .lines()
                .find_map(|l| l.split("elapsed_us=").nth(1))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no elapsed_us in the server log:\n{log}"));
            inside.push(Duration::from_micros(us));
            for (k, v) in PHASES.iter().zip(phases.iter_mut()) {
                if let Some(x) = log
                    .split(&format!("{k}="))
                    .nth(1)
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    v.push(Duration::from_micros(x));
                }
            }
            c.shutdown().await;
            std::fs::write(&file, &big).unwrap();
        }
        // The first round also pays for cold caches; all rounds are reported.
        if rounds > 0 {
            stats("edit on a 50,000-line open buffer (server: execute)", inside);
            stats("edit on a 50,000-line open buffer (client: start → end event)", edits);
            for (k, v) in PHASES.iter().zip(phases) {
                if !v.is_empty() {
                    stats(&format!("  phase {k}"), v);
                }
            }
        }
        if selected("read") {
            read_memory(&bin, tmp.path()).await;
        }
        if !selected("grep") {
            return;
        }

        let tree = ws.join("tree");
        for d in 0..200 {
            let dir = tree.join(format!("d{d}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..100 {
                std::fs::write(
                    dir.join(format!("f{f}.txt")),
                    format!("alpha beta\ngamma {d} {f}\nneedle_{d}_{f}_x\n"),
                )
                .unwrap();
            }
        }
        let mut greps = Vec::new();
        for _ in 0..5 {
            let mock = MockModel::start_with_delay(
                vec![
                    Step::call("g1", "grep", json!({"pattern": "needle_199_99_x", "path": "tree"})),
                    Step::text("done"),
                ],
                Duration::ZERO,
            )
            .await;
            let env = agent_env(&tmp.path().join("agent"), &mock.models_json(), &[("PI_LSP_LOG", "warn")]);
            let mut c = LspClient::start(&bin, &ws, &env, EditorBehavior::default()).await;
            c.request("agent/prompt", json!({"text": "grep"})).await.unwrap();
            let events = timed_run(&mut c).await;
            greps.push(tool_time(&events, "grep"));
            c.shutdown().await;
        }
        stats("grep over 20,000 files (start → end event)", greps);
        let mut rg = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            match std::process::Command::new("rg")
                .args(["-n", "--hidden", "needle_199_99_x"])
                .arg(&tree)
                .output()
            {
                Ok(_) => rg.push(t.elapsed()),
                Err(_) => break,
            }
        }
        if rg.is_empty() {
            println!("rg not on PATH: no comparison");
        } else {
            stats("rg binary, same search", rg);
        }
    });
}

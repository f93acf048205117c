//! Bench: opening a session whose lines hold large images (case SESS-05: 300 lines, each
//! with a 2 MB base64 image).
//!
//! Two files of the same conversation (300 turns: a user message with text and a 2 MB base64
//! PNG-typed image, then an assistant answer): the images inline, as Pi writes them, and the
//! older pi-lsp form (`data: ""` and the bytes in `assets/`). Each is opened to ready-to-prompt
//! (`SessionWriter::open`: file read, tree, active path, model context) in a fresh process,
//! 3 runs: wall time of `open()` and of the process, peak RSS, and how many images of the
//! loaded context still carry their bytes (the rest are dropped after the image window of
//! `sessions.imageTurns`). The assets form is written inline by its first open (reported on
//! its own), later opens read the inline file.
//!
//! Run: `cargo bench -p pi-core --bench session_images` (`PI_BENCH_IMAGES` changes the number
//! of image lines, default 300).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;
use common::peak_rss_kib;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use base64::Engine as _;
use pi_ai::{ContentBlock, Message, UserContent};
use pi_core::session::SessionWriter;
use serde_json::{json, Value};

/// Writes the session of `n` image turns to `path`; with `assets`, the images' bytes go to
/// `<dir>/assets/` and the lines name them (the older pi-lsp form). Returns the file's size.
fn generate(path: &Path, n: usize, assets: bool) -> u64 {
    let dir = path.parent().unwrap();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let ts = "2026-12-01T10:00:00.000Z";
    let mut lines = vec![
        json!({"type":"session","version":3,"id":"0194a000-0000-7000-8000-0000000000a1","timestamp":ts,"cwd":"/work/project"}),
        json!({"type":"model_change","id":"00000000","parentId":null,"timestamp":ts,"provider":"mock","modelId":"mock-1"}),
    ];
    for l in lines.drain(..) {
        writeln!(f, "{l}").unwrap();
    }
    // 1.5 MB of pseudo-random bytes → 2 MB of base64; each image differs in its first bytes.
    let mut bytes = vec![0u8; 1_500_000];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in bytes.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut parent = "00000000".to_string();
    for i in 0..n {
        bytes[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let image = if assets {
            let name = format!("{:032x}.png", xxhash_rust::xxh3::xxh3_128(&bytes));
            std::fs::create_dir_all(dir.join("assets")).unwrap();
            std::fs::write(dir.join("assets").join(&name), &bytes).unwrap();
            json!({"type":"image","data":"","mimeType":"image/png","piLspAsset":format!("assets/{name}")})
        } else {
            json!({"type":"image","data":data,"mimeType":"image/png"})
        };
        let u = format!("{:08x}", 2 * i + 1);
        let a = format!("{:08x}", 2 * i + 2);
        writeln!(
            f,
            "{}",
            json!({"type":"message","id":u,"parentId":parent,"timestamp":ts,"message":{"role":"user","content":[{"type":"text","text":format!("Screenshot {i}: what changed?")},image],"timestamp":1_785_232_801_000u64}})
        )
        .unwrap();
        writeln!(
            f,
            "{}",
            json!({"type":"message","id":a,"parentId":u,"timestamp":ts,"message":{"role":"assistant","content":[{"type":"text","text":"The header moved."}],"api":"openai-completions","provider":"mock","model":"mock-1","usage":{"input":1000,"output":10,"cacheRead":0,"cacheWrite":0,"totalTokens":1010,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1_785_232_802_000u64}})
        )
        .unwrap();
        parent = a;
    }
    f.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("open-child") {
        let t = Instant::now();
        let (w, loaded) = SessionWriter::open(Path::new(&args[2])).unwrap();
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        let rss = peak_rss_kib();
        let (mut images, mut with_data) = (0, 0);
        for m in &loaded.messages {
            if let Message::User(u) = m {
                if let UserContent::Blocks(b) = &u.content {
                    for b in b {
                        if let ContentBlock::Image(i) = b {
                            images += 1;
                            with_data += usize::from(!i.data.is_empty());
                        }
                    }
                }
            }
        }
        drop(w);
        println!(
            "{}",
            json!({"ms": ms, "rssKib": rss, "messages": loaded.messages.len(), "images": images, "withData": with_data})
        );
        std::process::exit(0);
    }
    let n: usize = std::env::var("PI_BENCH_IMAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let root = std::env::temp_dir().join(format!("pi-bench-images-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let exe = std::env::current_exe().unwrap();
    for (label, assets) in [
        ("inline (Pi's form)", false),
        ("assets/ (older pi-lsp form)", true),
    ] {
        let dir = root.join(if assets { "assets-form" } else { "inline-form" });
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("s.jsonl");
        let size = generate(&file, n, assets);
        // One run: (open() ms, process s, peak RSS KiB, the child's report).
        let run = || {
            let t = Instant::now();
            let out = Command::new(&exe)
                .arg("open-child")
                .arg(&file)
                .output()
                .unwrap();
            let secs = t.elapsed().as_secs_f64();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            (
                v["ms"].as_f64().unwrap(),
                secs,
                v["rssKib"].as_u64().unwrap(),
                v,
            )
        };
        let report = |what: &str, runs: &[(f64, f64, u64, Value)]| {
            let last = &runs[runs.len() - 1].3;
            println!(
                "open {n} image lines, {label}, file {:.0} MB{what}: open() {:.0} ms median, process {:.2} s median, peak RSS {:.0} MiB; context {} messages, {} images, {} with their bytes",
                size as f64 / 1e6,
                median(runs.iter().map(|r| r.0).collect()),
                median(runs.iter().map(|r| r.1).collect()),
                runs.iter().map(|r| r.2).max().unwrap() as f64 / 1024.0,
                last["messages"],
                last["images"],
                last["withData"],
            );
        };
        if assets {
            // The first open writes the file again with its images inline (once).
            let first = run();
            report(", first open (rewrites it inline)", &[first]);
            let size = std::fs::metadata(&file).unwrap().len();
            let later: Vec<_> = (0..3).map(|_| run()).collect();
            report(
                &format!(", later opens (now {:.0} MB inline)", size as f64 / 1e6),
                &later,
            );
        } else {
            let runs: Vec<_> = (0..3).map(|_| run()).collect();
            report("", &runs);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    let _ = std::fs::remove_dir_all(&root);
}

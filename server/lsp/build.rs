//! Lays out the release executable's code by use: the functions a start and the benchmark's
//! workloads run (listed in `symbol-order.txt`, made by `bench/symbol_order.py`) are placed
//! together in an output section `.text.hot` just before `.text`.
//!
//! Why: most of the server's resident memory is its own code, and the kernel maps the
//! executable's pages in 64 KiB runs around each page touched (fault-around), so code used
//! once here and there keeps most of `.text` resident. Packed together, the code a session
//! runs is a few MB instead of most of the 12 MB (docs/benchmarks.md, "Memory after the
//! rounds").
//!
//! Only where the linker is known to be LLD (Rust ≥ 1.90 links `x86_64-unknown-linux-gnu` with
//! its own LLD unless told otherwise) and only for optimised builds; a stale list costs only
//! layout (names no longer found are ignored). `PI_LSP_SYMBOL_ORDER=0` turns it off.
//!
//! How: the list holds names without their hashes (a legacy Rust symbol's `17h<hash>E` is
//! written `17h*`), because those hashes follow each crate's `-C metadata` and change whenever
//! its dependency set does — an exact list went stale at every merge. Each function sits in a
//! section of its own (`.text.<symbol>`, rustc's default `-Z function-sections`), so a linker
//! script (`INSERT BEFORE .text`, which keeps LLD's default layout for the rest) orders those
//! sections by glob, one rule per line of the list, in the list's order. A line not ending in
//! `*` also takes the name with LTO's uniquing suffix (`<name>.<n>`).
//! `python3 bench/symbol_order.py --check BINARY` (run by CI) fails when under 90 % of the
//! list resolves or the functions are not in `.text.hot`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=symbol-order.txt");
    println!("cargo:rerun-if-env-changed=PI_LSP_SYMBOL_ORDER");
    if std::env::var("PI_LSP_SYMBOL_ORDER").is_ok_and(|v| v == "0") {
        return;
    }
    let target = std::env::var("TARGET").unwrap_or_default();
    let optimised = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    // A linker chosen by the user (`-C linker=…`, `-C link-arg=-fuse-ld=…`, or LLD turned off
    // with `-C link-self-contained=-linker`) may not take LLD's options.
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let own_linker = flags.contains("linker") || flags.contains("fuse-ld");
    let configured =
        std::env::vars().any(|(k, _)| k.starts_with("CARGO_TARGET_") && k.ends_with("_LINKER"));
    if target != "x86_64-unknown-linux-gnu" || !optimised || own_linker || configured {
        return;
    }
    if !rustc_links_with_lld() {
        return;
    }
    let list = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default())
        .join("symbol-order.txt");
    let Ok(names) = std::fs::read_to_string(&list) else {
        return;
    };
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return;
    };
    let script = out.join("symbol-order.ld");
    if std::fs::write(&script, linker_script(&names)).is_err() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=pi-lsp=-Wl,-T,{}",
        script.display()
    );
}

/// The linker script placing the sections of `names` (the list's lines: symbol names, where
/// `*` stands for a hash) first, in order, in `.text.hot` before `.text`. Lines with anything
/// but `[A-Za-z0-9_.$]` and a closing `*` are skipped (they could not be a glob here).
fn linker_script(names: &str) -> String {
    let mut script = String::from("SECTIONS\n{\n  .text.hot :\n  {\n");
    for name in names.lines().map(str::trim) {
        let stem = name.strip_suffix('*').unwrap_or(name);
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$');
        if stem.is_empty() || !stem.chars().all(plain) {
            continue;
        }
        if name.ends_with('*') {
            script.push_str(&format!("    *(.text.{name})\n"));
        } else {
            script.push_str(&format!("    *(.text.{name} .text.{name}.*)\n"));
        }
    }
    script.push_str("  }\n}\nINSERT BEFORE .text;\n");
    script
}

/// Whether the compiler building us links with its own LLD by default (Rust 1.90 and later on
/// `x86_64-unknown-linux-gnu`).
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let minor = text
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}

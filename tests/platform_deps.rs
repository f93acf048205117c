//! The dependency tables per target (docs/platforms.md): no OS-specific crate is an
//! unconditional dependency of a workspace crate, and the graph `cargo metadata` resolves for
//! macOS (x86-64 and Apple silicon) and Windows (x86-64, MSVC) holds no Linux-only crate (and
//! Windows' no Unix-only one), while Linux's and Windows' hold their own backends. Runs
//! `cargo metadata --filter-platform <triple>` (no compiler for the target is needed, so this
//! checks the other OSes' tables on any machine).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde_json::Value;

/// Crates that only build on Linux (the sandbox backend).
const LINUX_ONLY: &[&str] = &["landlock", "seccompiler"];
/// Crates that only build on Unix.
const UNIX_ONLY: &[&str] = &["nix"];
/// Crates for Windows only.
const WINDOWS_ONLY: &[&str] = &["windows-sys"];

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// `cargo metadata` for `triple` (or every platform when `None`), parsed.
fn metadata(triple: Option<&str>) -> Value {
    let mut cmd = std::process::Command::new(cargo());
    cmd.current_dir(workspace_root())
        .args(["metadata", "--format-version", "1", "--locked"]);
    if let Some(t) = triple {
        cmd.args(["--filter-platform", t]);
    }
    let out = cmd.output().expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata {triple:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The names of every package in the resolved graph of `meta`'s workspace members.
fn resolved_names(meta: &Value) -> BTreeSet<String> {
    let names: HashMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| names[n["id"].as_str().unwrap()].to_string())
        .collect()
}

/// The direct dependencies of `member` in `meta`'s resolved graph (normal, dev and build).
fn direct_deps(meta: &Value, member: &str) -> BTreeSet<String> {
    let node = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| {
            meta["packages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["id"] == n["id"] && p["name"] == member)
        })
        .unwrap_or_else(|| panic!("{member} is in the graph"));
    node["deps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().replace('_', "-"))
        .collect()
}

#[test]
fn os_specific_crates_are_only_target_dependencies() {
    let meta = metadata(None);
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let mut unconditional = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        if !members.contains(p["id"].as_str().unwrap()) {
            continue;
        }
        for d in p["dependencies"].as_array().unwrap() {
            let name = d["name"].as_str().unwrap();
            let os_specific = LINUX_ONLY
                .iter()
                .chain(UNIX_ONLY)
                .chain(WINDOWS_ONLY)
                .any(|c| *c == name);
            if os_specific && d["target"].is_null() {
                unconditional.push(format!("{} -> {name} ({})", p["name"], d["kind"]));
            }
        }
    }
    assert_eq!(unconditional, Vec::<String>::new());
}

#[test]
fn macos_and_windows_graphs_hold_no_linux_only_crate() {
    for triple in [
        "x86_64-apple-darwin",
        "aarch64-apple-darwin",
        "x86_64-pc-windows-msvc",
    ] {
        let names = resolved_names(&metadata(Some(triple)));
        let found: Vec<&&str> = LINUX_ONLY.iter().filter(|c| names.contains(**c)).collect();
        assert!(found.is_empty(), "{triple}: Linux-only crates {found:?}");
        let core = direct_deps(&metadata(Some(triple)), "pi-core");
        if triple.contains("windows") {
            let unix: Vec<&&str> = UNIX_ONLY.iter().filter(|c| names.contains(**c)).collect();
            assert!(unix.is_empty(), "{triple}: Unix-only crates {unix:?}");
            assert!(core.contains("windows-sys"), "{triple}: {core:?}");
        } else {
            assert!(core.contains("nix"), "{triple}: {core:?}");
            assert!(!core.contains("windows-sys"), "{triple}: {core:?}");
        }
    }
}

#[test]
fn linux_graph_holds_its_sandbox_backend_and_no_windows_crate_of_ours() {
    let meta = metadata(Some("x86_64-unknown-linux-gnu"));
    let core = direct_deps(&meta, "pi-core");
    for c in ["landlock", "seccompiler", "nix", "libc"] {
        assert!(core.contains(c), "pi-core on Linux lacks {c}: {core:?}");
    }
    assert!(!core.contains("windows-sys"), "{core:?}");
}

/// Every `.rs` file under `dir` (skipping build output and dependencies).
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !["target", "node_modules", ".git"].contains(&name.as_str())
                && !name.starts_with('.')
            {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// The workspace lint is `unsafe_code = "deny"`: only the Windows process-tree module (Win32
/// job objects over FFI) and glibc's `mallopt` call (the LSP crate's `platform::malloc`) may
/// allow it.
#[test]
fn unsafe_code_is_allowed_only_in_the_two_platform_ffi_modules() {
    let root = workspace_root();
    let mut files = Vec::new();
    for d in ["server", "tests", "bench"] {
        if root.join(d).is_dir() {
            rust_files(&root.join(d), &mut files);
        }
    }
    assert!(files.len() > 50, "{} files", files.len());
    let needle = ["allow(", "unsafe_code)"].concat();
    let allowing: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).unwrap().contains(&needle))
        .map(|f| {
            f.strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    let mut allowing = allowing;
    allowing.sort();
    assert_eq!(
        allowing,
        [
            "server/core/src/platform/process/windows.rs",
            "server/lsp/src/platform/malloc.rs"
        ]
    );
}

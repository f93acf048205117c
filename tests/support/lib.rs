//! Test support: a scripted mock model server on loopback speaking both wire formats, a stdio
//! LSP client for the real binary, and helpers for temporary workspaces.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    clippy::print_stdout
)]

pub mod acp_client;
pub mod acp_terminal;
pub mod headless;
pub mod lsp_client;
pub mod mock_model;
pub mod mock_script;
pub mod pi_rpc;
mod require;

pub use require::require;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Path of the `pi-lsp` binary, built once per test process with the same cargo and target dir.
pub fn pi_lsp_bin() -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = built.as_ref() {
        return p.clone();
    }
    if let Ok(p) = std::env::var("PI_LSP_BIN") {
        *built = Some(PathBuf::from(&p));
        return PathBuf::from(p);
    }
    // target/<profile>/deps/<test-exe> → target/<profile>/pi-lsp
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = profile_dir.parent().unwrap();
    let status = std::process::Command::new(cargo)
        .args(["build", "-q", "-p", "pi-lsp", "--bin", "pi-lsp"])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p pi-lsp failed");
    let bin = profile_dir.join("pi-lsp");
    assert!(bin.exists(), "{} missing after build", bin.display());
    *built = Some(bin.clone());
    bin
}

/// A fresh temporary folder removed on drop (with `PI_E2E_KEEP` set: kept). It lies alone in
/// a private parent folder, which goes with it: a test's `<folder>/../agent` (the agent dir
/// beside a workspace) is its own, never shared with another test or left in the system's temp
/// folder.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let parent = tempfile::Builder::new()
            .prefix(&format!("pi-e2e-{name}-"))
            .tempdir()
            .unwrap()
            .keep();
        let p = parent.join(name);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p.canonicalize().unwrap())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("PI_E2E_KEEP").is_none() {
            if let Some(parent) = self.0.parent() {
                let _ = std::fs::remove_dir_all(parent);
            }
        }
    }
}

/// Pi 1.6.0's `pi`: `$PI16_REF_BIN` (a `pi` that runs Pi 1.6.0, installed by `.ci/pi16.sh`)
/// when it names a file. Missing, it is [`require`]d for the test `what`: under `CI=true` the
/// test fails, elsewhere it says why it skips and gets `None`.
pub fn pi16_bin(what: &str) -> Option<PathBuf> {
    let found = std::env::var("PI16_REF_BIN")
        .ok()
        .map(PathBuf::from)
        .filter(|p| p.exists());
    require(
        found.is_some(),
        what,
        "Pi 1.6.0 ($PI16_REF_BIN, installed by .ci/pi16.sh)",
    );
    found
}

/// Pi 1.6.0's package folder (its README, docs and examples): `$PI16_PKG_DIR`, else read from
/// the `pi` wrapper script at `pi` (CI's `$PI16_REF_BIN`), which names `…/dist/bundle/cli.js`.
/// Panics when the wrapper names no such path.
pub fn pi16_package(pi: &Path) -> PathBuf {
    if let Ok(dir) = std::env::var("PI16_PKG_DIR") {
        return PathBuf::from(dir);
    }
    let wrapper = std::fs::read_to_string(pi).unwrap();
    let cli = wrapper
        .split(['"', ' ', '\n'])
        .find(|w| w.ends_with("/dist/bundle/cli.js"))
        .unwrap_or_else(|| panic!("no cli.js in {}", pi.display()));
    PathBuf::from(cli.trim_end_matches("/dist/bundle/cli.js"))
}

/// The text of a request message's `content` as the model reads it: a string as is, an array of
/// parts as its `text` parts joined with nothing between them (image parts add nothing), anything
/// else as the empty string. Shape as the wires send it (`{"role", "content"}` of a request body).
pub fn content_text(message: &serde_json::Value) -> String {
    match &message["content"] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<String>(),
        _ => String::new(),
    }
}

/// The repository's `fixtures/` folder.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("fixtures")
}

/// Reads every line of the single session file under `<workspace>/.pi/sessions/`.
pub fn session_lines(workspace: &Path) -> Vec<serde_json::Value> {
    json_lines(&session_file(workspace))
}

/// Every line of the JSON-lines file `file` (a session file, Pi's or ours), parsed; panics on
/// a line that is not JSON.
pub fn json_lines(file: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The first session file (`*.jsonl`) directly in `dir` (e.g. a `--session-dir`); panics
/// when there is none.
pub fn jsonl_in(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap_or_else(|| panic!("no session file in {}", dir.display()))
}

/// The single session file (`*.jsonl`) under `<workspace>/.pi/sessions/` (panics unless there is
/// exactly one).
pub fn session_file(workspace: &Path) -> PathBuf {
    let dir = workspace.join(".pi").join("sessions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(
        files.len(),
        1,
        "expected one session file in {}: {files:?}",
        dir.display()
    );
    files.swap_remove(0)
}

/// A Pi 1.6-shaped session of folder `cwd` with `(provider, model, api)`: its full system message (Pi's sections), a turn, a section patch
/// mid-branch (as Pi stores one after `/reload`), another turn.
pub fn pi16_session_with_a_patch(
    path: &std::path::Path,
    cwd: &std::path::Path,
    (provider, model, api): (&str, &str, &str),
) {
    let ts = "2026-12-05T12:00:00.000Z";
    let usage = serde_json::json!({"input": 10, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 12,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}});
    let user = |id: &str, parent: &str, text: &str| {
        serde_json::json!({"type": "message", "id": id, "parentId": parent, "timestamp": ts,
            "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}})
    };
    let assistant = |id: &str, parent: &str, text: &str| {
        serde_json::json!({"type": "message", "id": id, "parentId": parent, "timestamp": ts,
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}],
                "api": api, "provider": provider, "model": model, "usage": usage,
                "stopReason": "stop", "timestamp": 2}})
    };
    let lines = [
        serde_json::json!({"type": "session", "version": 3, "id": "01a24614-0000-7000-8000-000000000001",
            "timestamp": ts, "cwd": cwd}),
        serde_json::json!({"type": "model_change", "id": "m0", "parentId": null, "timestamp": ts,
            "provider": provider, "modelId": model}),
        serde_json::json!({"type": "message", "id": "s1", "parentId": "m0", "timestamp": ts,
            "message": {"role": "system", "content": "",
                "sections": {"preamble": "You are Pi.", "rules": "Be brief."},
                "toolsAdded": [{"name": "read", "description": "Read a file",
                    "parameters": {"type": "object", "properties": {}}}],
                "timestamp": 1}}),
        user("u1", "s1", "first"),
        assistant("a1", "u1", "one"),
        serde_json::json!({"type": "message", "id": "s2", "parentId": "a1", "timestamp": ts,
            "message": {"role": "system", "content": "", "sections": {"rules": "Be very brief."},
                "timestamp": 3}}),
        user("u2", "s2", "second"),
        assistant("a2", "u2", "two"),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

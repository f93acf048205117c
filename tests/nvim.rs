//! End to end in a real editor: headless Neovim (0.10+) runs `nvim-plugin/test/lsp/prompt_spec.lua`,
//! which starts the real `pi-lsp` binary with Neovim's own LSP client and sends one
//! `agent/prompt` against the loopback mock model. The agent reads the unsaved buffer, edits
//! it through Neovim's own `workspace/applyEdit` handler, and `bash` sees the edit on disk.
//!
//! Neovim is found through `NVIM_BIN`, else `<repo>/.venv/bin/nvim`, else `nvim` on `PATH`
//! (version 0.10 or later). Without one the test is skipped with a note, unless `CI` is set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use pi_e2e::lsp_client::{agent_env, unsaved_note};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, session_lines, TempDir};
use serde_json::{json, Value};

const DISK: &str = "title\nlemon 🍋 中 value=1\n";
/// What the spec's `nvim_buf_set_lines` leaves in the buffer (never saved by Neovim).
const BUFFER: &str = "title\nlemon 🍋 中 value=2 (unsaved)\n";
const EDITED: &str = "title\nlemon 🍋 中 value=3 (unsaved)\n";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `(major, minor)` from `nvim --version` ("NVIM v0.11.4").
fn nvim_version(bin: &Path) -> Option<(u32, u32)> {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .ok()?;
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .to_string();
    let v = first.strip_prefix("NVIM v")?;
    let mut parts = v.split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The Neovim to test with, or `None` when there is none.
fn find_nvim() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NVIM_BIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let venv = repo_root().join(".venv/bin/nvim");
    if venv.exists() {
        return Some(venv);
    }
    let path = PathBuf::from("nvim");
    match nvim_version(&path) {
        Some(v) if v >= (0, 10) => Some(path),
        Some((major, minor)) => {
            eprintln!("note: nvim on PATH is {major}.{minor}; 0.10 or later is needed");
            None
        }
        None => None,
    }
}

/// Event labels as `tests/lsp_e2e.rs` builds them, with runs of updates collapsed.
fn labels(out: &Value) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for l in out["labels"].as_array().unwrap() {
        let l = l.as_str().unwrap().to_string();
        if (l == "message_update" || l == "tool_execution_update") && v.last() == Some(&l) {
            continue;
        }
        v.push(l);
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neovim_prompt_reads_unsaved_buffer_and_applies_edit_in_the_buffer() {
    let nvim = find_nvim();
    if !pi_e2e::require(
        nvim.is_some(),
        "neovim_prompt_reads_unsaved_buffer",
        "Neovim >= 0.10 (NVIM_BIN, <repo>/.venv/bin/nvim or nvim on PATH)",
    ) {
        return;
    }
    let Some(nvim) = nvim else { return };

    let tmp = TempDir::new("nvim");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("notes.txt");
    std::fs::write(&file, DISK).unwrap();
    let out_path = tmp.path().join("out.json");
    let mock = MockModel::start(vec![
        Step::call("call_read", "read", json!({"path": "notes.txt"})),
        // "value=2" exists only in Neovim's unsaved buffer.
        Step::call(
            "call_edit",
            "edit",
            json!({"path": "notes.txt", "edits": [{"oldText": "value=2", "newText": "value=3"}]}),
        ),
        Step::call("call_bash", "bash", json!({"command": "cat notes.txt"})),
        Step::text("All done: value is now 3."),
    ])
    .await;

    // The server inherits Neovim's environment. XDG dirs keep Neovim (and its lsp.log) inside
    // the temp folder.
    let mut env = agent_env(&tmp.path().join("agent"), &mock.models_json(), &[]);
    let xdg = tmp.path().join("xdg");
    for (var, sub) in [
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_CACHE_HOME", "cache"),
    ] {
        std::fs::create_dir_all(xdg.join(sub)).unwrap();
        env.push((var, xdg.join(sub).display().to_string()));
    }
    env.extend([
        ("PI_LSP_BIN", pi_lsp_bin().display().to_string()),
        ("PI_WS", ws.display().to_string()),
        ("PI_FILE", file.display().to_string()),
        ("PI_OUT", out_path.display().to_string()),
    ]);
    let spec = repo_root().join("nvim-plugin/test/lsp/prompt_spec.lua");
    let mut cmd = tokio::process::Command::new(&nvim);
    cmd.args(["--headless", "-u", "NONE", "-i", "NONE", "-n", "-l"])
        .arg(&spec)
        .current_dir(&ws)
        .env_remove("NVIM")
        .env_remove("NVIM_APPNAME")
        .env_remove("VIMINIT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", nvim.display()));
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await;
    let took = t0.elapsed();
    let lsp_log = std::fs::read_to_string(xdg.join("state/nvim/lsp.log")).unwrap_or_default();
    let output = match output {
        Ok(o) => o.unwrap(),
        Err(_) => panic!(
            "nvim did not finish within 60 s\nout: {}\nlsp.log:\n{lsp_log}",
            std::fs::read_to_string(&out_path).unwrap_or_default()
        ),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    let raw = std::fs::read_to_string(&out_path).unwrap_or_default();
    let context = format!(
        "nvim {} exited {:?} after {took:?}\nstdout:\n{}\nstderr:\n{stderr}\nout.json:\n{raw}\nlsp.log:\n{lsp_log}",
        nvim.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(output.status.success(), "{context}");
    let out: Value =
        serde_json::from_str(&raw).unwrap_or_else(|e| panic!("out.json: {e}\n{context}"));
    assert_eq!(out.get("error"), None, "{context}");
    eprintln!(
        "nvim {} ({}) ran the spec in {took:?}",
        out["nvim_version"].as_str().unwrap_or("?"),
        nvim.display()
    );

    // initialize: Neovim 0.10+ offers utf-8 and the server takes it.
    let offered: Vec<&str> = out["offered_encodings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    let expect_enc = if offered.contains(&"utf-8") {
        "utf-8"
    } else {
        "utf-16"
    };
    assert_eq!(out["offset_encoding"], expect_enc, "offered {offered:?}");
    assert_eq!(
        expect_enc, "utf-8",
        "Neovim should offer utf-8: {offered:?}"
    );

    // agent/prompt answered with a fresh session and run; every event carries both.
    let r = &out["prompt_result"];
    let session_id = r["sessionId"].as_str().unwrap();
    let run_id = r["runId"].as_str().unwrap();
    assert_eq!(
        r,
        &json!({"sessionId": session_id, "runId": run_id, "queued": false, "disposition": "started"})
    );
    let ids = out["event_ids"].as_array().unwrap();
    assert_eq!(ids.len(), out["events"].as_array().unwrap().len());
    assert!(
        ids.iter()
            .all(|e| e == &json!({"sessionId": session_id, "runId": run_id})),
        "{ids:?}"
    );

    // The event sequence (runs of updates collapsed: their number depends on chunking).
    let tool_turn = |tool: &str| -> Vec<String> {
        vec![
            "turn_start".into(),
            "message_start:assistant".into(),
            "message_update".into(),
            "message_end:assistant".into(),
            format!("tool_execution_start:{tool}"),
            format!("tool_execution_end:{tool}"),
            "message_start:toolResult".into(),
            "message_end:toolResult".into(),
            "turn_end".into(),
        ]
    };
    let got = labels(&out);
    let mut expected: Vec<String> = vec!["agent_start".into()];
    let mut first = tool_turn("read");
    first.splice(
        1..1,
        [
            // A new session's first run tells its stored system message first (Pi 1.6).
            "message_start:system".to_string(),
            "message_end:system".to_string(),
            "message_start:user".to_string(),
            "message_end:user".to_string(),
        ],
    );
    expected.extend(first);
    expected.extend(tool_turn("edit"));
    // bash streams its output as updates between start and end (when it has any before exit).
    let mut bash = tool_turn("bash");
    if got.contains(&"tool_execution_update".to_string()) {
        bash.insert(5, "tool_execution_update".into());
    }
    expected.extend(bash);
    expected.extend(
        [
            "turn_start",
            "message_start:assistant",
            "message_update",
            "message_end:assistant",
            "turn_end",
            "agent_end",
            "agent_settled",
        ]
        .map(String::from),
    );
    assert_eq!(got, expected);
    // `events` (the bare types) agree with the labels.
    let types: Vec<&str> = out["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let label_types: Vec<&str> = out["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().split(':').next().unwrap())
        .collect();
    assert_eq!(types, label_types);

    // read saw the unsaved buffer; the edit went through Neovim; bash saw it on disk.
    assert_eq!(out["buffer_before"], BUFFER);
    assert_eq!(
        out["tool_results"],
        json!([
            {"toolName": "read", "text": format!("{BUFFER}{}", unsaved_note("notes.txt")), "isError": false},
            {"toolName": "edit", "text": "Successfully replaced 1 block(s) in notes.txt.", "isError": false},
            {"toolName": "bash", "text": EDITED, "isError": false},
        ])
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), EDITED);
    // Neovim's own buffer holds the edit. It stays 'modified': Neovim did not write it (it
    // has no agent/saveDocument), the server wrote the same text to disk itself.
    assert_eq!(
        (out["buffer"].as_str(), out["modified"].as_bool()),
        (Some(EDITED), Some(true))
    );
    // The server saw Neovim's didChange for the applied edit (it would log this otherwise).
    assert!(
        !lsp_log.contains("no didChange"),
        "the server missed Neovim's didChange:\n{lsp_log}"
    );
    // The server shut down cleanly when Neovim stopped the client.
    assert_eq!(out["server_exit"], json!({"code": 0, "signal": 0}));

    // The session file: header, model, thinking level, then every message in order, paired.
    let lines = session_lines(&ws);
    // Header, model, thinking level, Pi 1.6's stored system message, then the conversation.
    assert_eq!(lines.len(), 12);
    assert_eq!(
        (lines[0]["type"].as_str(), lines[0]["id"].as_str()),
        (Some("session"), Some(session_id))
    );
    assert_eq!(lines[0]["cwd"], ws.display().to_string());
    assert_eq!(
        (
            lines[1]["type"].as_str(),
            lines[1]["provider"].as_str(),
            lines[1]["modelId"].as_str()
        ),
        (Some("model_change"), Some("mock"), Some("mock-1"))
    );
    let roles: Vec<&str> = lines[3..]
        .iter()
        .map(|l| l["message"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "toolResult",
            "assistant",
            "toolResult",
            "assistant"
        ]
    );
    let mut parent = Value::Null;
    for l in &lines[1..] {
        assert_eq!(l["parentId"], parent);
        parent = l["id"].clone();
    }
    for (call_line, result_line, id, name) in [
        (5, 6, "call_read", "read"),
        (7, 8, "call_edit", "edit"),
        (9, 10, "call_bash", "bash"),
    ] {
        assert_eq!(lines[call_line]["message"]["content"][0]["id"], id);
        assert_eq!(lines[call_line]["message"]["stopReason"], "toolUse");
        assert_eq!(
            (
                lines[result_line]["message"]["toolCallId"].as_str(),
                lines[result_line]["message"]["toolName"].as_str()
            ),
            (Some(id), Some(name))
        );
    }
    assert_eq!(
        lines[11]["message"]["content"],
        json!([{"type": "text", "text": "All done: value is now 3."}])
    );

    mock.assert_paired();
    assert_eq!(mock.requests().len(), 4);
}

/// Runs `nvim-plugin/test/lsp/<spec>` in headless `nvim` with the server's env plus `PI_LSP_BIN`,
/// `PI_WS`, `PI_FILE` and `PI_OUT`; returns what the spec wrote to `PI_OUT` (panics with the
/// spec's output, stderr and Neovim's LSP log when it failed).
async fn run_spec(
    nvim: &Path,
    spec: &str,
    tmp: &Path,
    ws: &Path,
    file: &Path,
    mock: &MockModel,
) -> Value {
    let out_path = tmp.join("out.json");
    let mut env = agent_env(&tmp.join("agent"), &mock.models_json(), &[]);
    let xdg = tmp.join("xdg");
    for (var, sub) in [
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_CACHE_HOME", "cache"),
    ] {
        std::fs::create_dir_all(xdg.join(sub)).unwrap();
        env.push((var, xdg.join(sub).display().to_string()));
    }
    env.extend([
        ("PI_LSP_BIN", pi_lsp_bin().display().to_string()),
        ("PI_WS", ws.display().to_string()),
        ("PI_FILE", file.display().to_string()),
        ("PI_OUT", out_path.display().to_string()),
    ]);
    let mut cmd = tokio::process::Command::new(nvim);
    cmd.args(["--headless", "-u", "NONE", "-i", "NONE", "-n", "-l"])
        .arg(repo_root().join("nvim-plugin/test/lsp").join(spec))
        .current_dir(ws)
        .env_remove("NVIM")
        .env_remove("NVIM_APPNAME")
        .env_remove("VIMINIT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("nvim did not finish {spec} within 60 s"))
        .unwrap();
    let raw = std::fs::read_to_string(&out_path).unwrap_or_default();
    let lsp_log = std::fs::read_to_string(xdg.join("state/nvim/lsp.log")).unwrap_or_default();
    let context = format!(
        "nvim exited {:?}\nstderr:\n{}\nout.json:\n{raw}\nlsp.log:\n{lsp_log}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{context}");
    let out: Value = serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{e}\n{context}"));
    assert_eq!(out.get("error"), None, "{context}");
    out
}

/// The `diagnostics` tool in Neovim: diagnostics set with `vim.diagnostic.set` (byte columns)
/// reach the model through `agent/diagnostics`, with character columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neovim_answers_agent_diagnostics_from_vim_diagnostic() {
    let nvim = find_nvim();
    // The spec uses 0.11's `vim.str_utfindex(s, encoding, index)`.
    let usable = nvim
        .as_ref()
        .is_some_and(|n| nvim_version(n).is_none_or(|v| v >= (0, 11)));
    if !pi_e2e::require(usable, "neovim_answers_agent_diagnostics", "Neovim >= 0.11") {
        return;
    }
    let Some(nvim) = nvim else { return };
    let tmp = TempDir::new("nvim-diag");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let file = ws.join("src/main.rs");
    std::fs::write(&file, "fn main() {\n    let 🍋 = cnt;\n}\n").unwrap();
    let mock = MockModel::start(vec![
        Step::call(
            "call_diag",
            "diagnostics",
            json!({"paths": ["src/main.rs"]}),
        ),
        Step::text("cnt is not defined."),
    ])
    .await;
    let out = run_spec(&nvim, "diagnostics_spec.lua", tmp.path(), &ws, &file, &mock).await;
    let sid = out["prompt_result"]["sessionId"].as_str().unwrap();
    assert_eq!(out["offset_encoding"], "utf-8");
    assert_eq!(
        out["asked"],
        json!([{"sessionId": sid, "uris": [format!("file://{}", file.display())]}])
    );
    // `cnt` is at byte 15 of its line (Neovim's column), character 12: column 13.
    let text = "src/main.rs:2:13 error rustc(E0425): cannot find value `cnt` in this scope\nsrc/main.rs:1:4 warning clippy: function `main` is too simple";
    assert_eq!(
        out["tool_results"],
        json!([{"toolName": "diagnostics", "text": text, "isError": false}])
    );
    let tool_msg = mock.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    assert_eq!(
        tool_msg,
        json!({"role": "tool", "content": text, "tool_call_id": "call_diag"})
    );
    let stored = session_lines(&ws)
        .into_iter()
        .find(|l| l["message"]["toolCallId"] == "call_diag")
        .unwrap();
    assert_eq!(
        stored["message"]["content"],
        json!([{"type": "text", "text": text}])
    );
    mock.assert_paired();
}

//! What rich editor clients need, end to end over stdio against the real binary: the model's
//! context exactly as Pi's RPC `get_messages` gives it (compared with reference Pi 0.73.1 on
//! the same file), paged history for display, queued messages removed or edited before
//! delivery, and `experimental.agent.syncsAllDocuments`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pi_e2e::headless::pi_command;
use pi_e2e::lsp_client::{start_with_mock, EditorBehavior};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The reference Pi binary (`$PI_REF_BIN`, else `.pi-ref/` as `.ci/run` installs it);
/// required when `CI` is set.
fn pi_ref_bin() -> Option<PathBuf> {
    let found = [
        std::env::var("PI_REF_BIN").ok().map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.pi-ref/node_modules/.bin/pi")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs the reference Pi (npm @mariozechner/pi-coding-agent@0.73.1); see .ci/run"
        );
        eprintln!("note: reference Pi not installed; skipping (see .ci/run)");
    }
    found
}

/// `fixtures/sessions/<name>` with its header's `cwd` set to `ws` (Pi refuses a session whose
/// folder is gone), written to `to`.
fn fixture_session(name: &str, ws: &Path, to: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/sessions")
            .join(name),
    )
    .unwrap();
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines[0]["cwd"] = json!(ws.display().to_string());
    let out: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(to, out).unwrap();
    lines
}

/// Reference Pi's RPC `get_messages` on session `file` (opened in `ws`).
async fn pi_get_messages(pi: &Path, ws: &Path, agent: &Path, file: &Path) -> Value {
    let args = [
        OsStr::new("--mode"),
        OsStr::new("rpc"),
        OsStr::new("--session"),
    ];
    let home = agent.parent().unwrap();
    let cmd = pi_command(
        pi,
        ws,
        agent,
        home,
        args.into_iter().chain([file.as_os_str()]),
    );
    let mut child = tokio::process::Command::from(cmd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"id\":\"m\",\"type\":\"get_messages\"}\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let answer = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            let v: Value = match serde_json::from_str(&l) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if v["id"] == "m" {
                return v;
            }
        }
        panic!("pi ended without answering get_messages");
    })
    .await
    .expect("pi answers get_messages");
    let _ = child.kill().await;
    assert_eq!(answer["success"], true, "{answer}");
    answer["data"]["messages"].clone()
}

fn err(e: Value) -> (i64, String) {
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_pis_get_messages_and_history_pages_the_branch_with_everything_in_place() {
    let tmp = TempDir::new("rich-messages");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ours = tmp.path().join("ours.jsonl");
    let lines = fixture_session("compacted-branches.jsonl", &ws, &ours);
    let mock = MockModel::start(vec![]).await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let before = std::fs::read(&ours).unwrap();
    let state = c
        .request("agent/session/open", json!({"path": ours}))
        .await
        .unwrap();
    let sid = state["sessionId"].as_str().unwrap().to_string();
    let got = c
        .request("agent/messages", json!({"sessionId": sid}))
        .await
        .unwrap();

    // Summary first, then the kept entries from `firstKeptEntryId`, then what follows; labels,
    // names and the abandoned branch give nothing.
    assert_eq!(
        got["entryIds"],
        json!([
            "d0000001", "b0000009", "b000000a", "b000000b", "e0000002", "e0000003", "e0000004",
            "b000000c", "b000000d"
        ])
    );
    assert_eq!(state["messageCount"], 9);
    let by_id = |id: &str| lines.iter().find(|l| l["id"] == id).unwrap().clone();
    assert_eq!(got["messages"][1], by_id("b0000009")["message"]);
    assert_eq!(
        got["messages"][0],
        json!({"role": "compactionSummary", "summary": "The user read hello.txt (one line: hello).",
               "tokensBefore": 4321, "timestamp": 1796119216000i64})
    );
    if let Some(pi) = pi_ref_bin() {
        let theirs = tmp.path().join("theirs.jsonl");
        fixture_session("compacted-branches.jsonl", &ws, &theirs);
        let agent = tmp.path().join("agent");
        assert_eq!(
            got["messages"],
            pi_get_messages(&pi, &ws, &agent, &theirs).await
        );
    }

    // History: pages of the active branch, newest page first, each oldest first, every entry
    // exactly as in the file.
    let path: Vec<&str> = [
        "a0000001", "a0000002", "b0000001", "b0000002", "b0000003", "b0000004", "b0000005",
        "b0000006", "b0000007", "b0000008", "b0000009", "b000000a", "b000000b", "d0000001",
        "e0000001", "e0000002", "e0000003", "e0000004", "e0000005", "b000000c", "b000000d",
    ]
    .to_vec();
    let mut pages = Vec::new();
    let mut before_id: Option<String> = None;
    loop {
        let mut params = json!({"sessionId": sid, "limit": 8});
        if let Some(b) = &before_id {
            params["beforeEntryId"] = json!(b);
        }
        let page = c.request("agent/session/history", params).await.unwrap();
        assert_eq!(page["sessionId"], sid.as_str());
        assert_eq!(page["leafId"], "b000000d");
        let entries = page["entries"].as_array().unwrap().clone();
        before_id = entries
            .first()
            .map(|e| e["id"].as_str().unwrap().to_string());
        pages.push((entries, page["hasMore"].as_bool().unwrap()));
        if !pages.last().unwrap().1 {
            break;
        }
    }
    let sizes: Vec<(usize, bool)> = pages.iter().map(|(e, m)| (e.len(), *m)).collect();
    assert_eq!(sizes, [(8, true), (8, true), (5, false)]);
    let all: Vec<Value> = pages.into_iter().rev().flat_map(|(e, _)| e).collect();
    let want: Vec<Value> = path.iter().map(|id| by_id(id)).collect();
    assert_eq!(all, want);
    // Default page size: everything here (21 < 50).
    let page = c
        .request("agent/session/history", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(page["entries"], json!(want));
    assert_eq!(page["hasMore"], false);

    // An entry of the abandoned branch, an unknown one, and a zero limit are refused.
    let e = c
        .request(
            "agent/session/history",
            json!({"sessionId": sid, "beforeEntryId": "c0000001"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err(e),
        (-31005, "entry c0000001 is not on the active branch".into())
    );
    let e = c
        .request(
            "agent/session/history",
            json!({"sessionId": sid, "limit": 0}),
        )
        .await
        .unwrap_err();
    assert_eq!(err(e), (-32602, "limit: must be at least 1".into()));
    // Reading changed nothing.
    assert_eq!(std::fs::read(&ours).unwrap(), before);
    c.shutdown().await;
}

/// The (text, state, steering, followUp) of every `agent/queueUpdate` so far.
fn queue_updates(
    c: &pi_e2e::lsp_client::LspClient,
) -> Vec<(String, String, Vec<String>, Vec<String>)> {
    c.log()
        .iter()
        .filter(|m| m["method"] == "agent/queueUpdate")
        .map(|n| {
            let p = &n["params"];
            let list = |k: &str| {
                p[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect()
            };
            (
                p["text"].as_str().unwrap().to_string(),
                p["state"].as_str().unwrap().to_string(),
                list("steering"),
                list("followUp"),
            )
        })
        .collect()
}

/// (role, text) of each message of the mock's request `i`.
fn request_texts(mock: &MockModel, i: usize) -> Vec<String> {
    mock.requests()[i].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(b) => b
                    .iter()
                    .map(|b| b["text"].as_str().unwrap_or("<image>").to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
                _ => String::new(),
            };
            format!("{}:{text}", m["role"].as_str().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_message_is_removed_or_edited_before_delivery_and_the_outcome_is_told() {
    let tmp = TempDir::new("rich-queue");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let mock = MockModel::start(vec![
        Step::Gate(gate.clone(), Box::new(Step::text("first"))),
        Step::text("after steering"),
        Step::text("after F1"),
        Step::text("after N1"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "go", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    // The first request waits at the gate: everything below is queued during it.
    for _ in 0..500 {
        if !mock.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(mock.requests().len(), 1);
    let q = |v: Value| v["queueId"].as_str().unwrap().to_string();
    let s1 = q(c
        .request("agent/steer", json!({"sessionId": sid, "text": "S1", "images": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]}))
        .await
        .unwrap());
    let s2 = q(c
        .request("agent/steer", json!({"sessionId": sid, "text": "S2"}))
        .await
        .unwrap());
    let _f1 = q(c
        .request("agent/followUp", json!({"sessionId": sid, "text": "F1"}))
        .await
        .unwrap());
    let n1 = q(c
        .request(
            "agent/sendMessage",
            json!({"sessionId": sid, "customType": "note", "content": "N1", "details": {"k": 1}, "deliverAs": "followUp"}),
        )
        .await
        .unwrap());
    let call = |m: &str, p: Value| (m.to_string(), p);
    for (method, params, want) in [
        (
            call(
                "agent/queue/remove",
                json!({"sessionId": sid, "queueId": s2}),
            ),
            json!({"removed": true}),
        ),
        (
            call(
                "agent/queue/remove",
                json!({"sessionId": sid, "queueId": s2}),
            ),
            json!({"removed": false}),
        ),
        (
            call(
                "agent/queue/edit",
                json!({"sessionId": sid, "queueId": s1, "text": "S1 edited"}),
            ),
            json!({"edited": true}),
        ),
        (
            call(
                "agent/queue/edit",
                json!({"sessionId": sid, "queueId": n1, "text": "N1 edited"}),
            ),
            json!({"edited": true}),
        ),
        (
            call(
                "agent/queue/edit",
                json!({"sessionId": sid, "queueId": "nope", "text": "x"}),
            ),
            json!({"edited": false}),
        ),
    ]
    .map(|((m, p), w)| (m, p, w))
    {
        assert_eq!(
            c.request(&method, params.clone()).await.unwrap(),
            want,
            "{method} {params}"
        );
    }
    let e = c
        .request(
            "agent/queue/edit",
            json!({"sessionId": sid, "queueId": s1, "text": " "}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err(e),
        (
            -32602,
            "text: must not be empty (agent/queue/remove takes a message out)".into()
        )
    );
    let st = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(st["pendingMessageCount"], 3);
    gate.notify_one();
    c.run_until_end(Duration::from_secs(30)).await;
    // Delivered now: neither removable nor editable.
    assert_eq!(
        c.request(
            "agent/queue/remove",
            json!({"sessionId": sid, "queueId": s1})
        )
        .await
        .unwrap(),
        json!({"removed": false})
    );
    assert_eq!(
        c.request(
            "agent/queue/edit",
            json!({"sessionId": sid, "queueId": n1, "text": "late"})
        )
        .await
        .unwrap(),
        json!({"edited": false})
    );
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        queue_updates(&c),
        vec![
            ("S1".into(), "queued".into(), v(&["S1"]), v(&[])),
            ("S2".into(), "queued".into(), v(&["S1", "S2"]), v(&[])),
            ("F1".into(), "queued".into(), v(&["S1", "S2"]), v(&["F1"])),
            (
                "N1".into(),
                "queued".into(),
                v(&["S1", "S2"]),
                v(&["F1", "N1"])
            ),
            ("S2".into(), "removed".into(), v(&["S1"]), v(&["F1", "N1"])),
            (
                "S1 edited".into(),
                "queued".into(),
                v(&["S1 edited"]),
                v(&["F1", "N1"])
            ),
            (
                "N1 edited".into(),
                "queued".into(),
                v(&["S1 edited"]),
                v(&["F1", "N1 edited"])
            ),
            (
                "S1 edited".into(),
                "delivered".into(),
                v(&[]),
                v(&["F1", "N1 edited"])
            ),
            (
                "S1 edited".into(),
                "consumed".into(),
                v(&[]),
                v(&["F1", "N1 edited"])
            ),
            ("F1".into(), "delivered".into(), v(&[]), v(&["N1 edited"])),
            ("F1".into(), "consumed".into(), v(&[]), v(&["N1 edited"])),
            ("N1 edited".into(), "delivered".into(), v(&[]), v(&[])),
            ("N1 edited".into(), "consumed".into(), v(&[]), v(&[])),
        ]
    );
    // The model saw the edited texts (the image kept), never S2.
    assert_eq!(mock.requests().len(), 4);
    let s1_seen = "user:S1 edited|(image omitted: model does not support images)";
    assert_eq!(
        request_texts(&mock, 3)[1..],
        v(&[
            "user:go",
            "assistant:first",
            s1_seen,
            "assistant:after steering",
            "user:F1",
            "assistant:after F1",
            "user:N1 edited"
        ])[..]
    );
    // And the file holds them as they were delivered: the custom message as a custom_message
    // entry with its details.
    let state = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    let file = std::fs::read_to_string(state["sessionFile"].as_str().unwrap()).unwrap();
    let entries: Vec<Value> = file
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let custom: Vec<Value> = entries
        .iter()
        .filter(|e| e["type"] == "custom_message")
        .map(|e| json!([e["customType"], e["content"], e["details"], e["display"]]))
        .collect();
    assert_eq!(custom, [json!(["note", "N1 edited", {"k": 1}, true])]);
    let users: Vec<Value> = entries
        .iter()
        .filter(|e| e["message"]["role"] == "user")
        .map(|e| e["message"]["content"].clone())
        .collect();
    assert_eq!(
        users,
        [
            json!([{"type": "text", "text": "go"}]),
            json!([{"type": "text", "text": "S1 edited"}, {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]),
            json!([{"type": "text", "text": "F1"}]),
        ]
    );
    c.shutdown().await;
}

/// A branch summary is written as Pi 1.6.0's `branchWithSummary` writes it (agent-session.js
/// `navigateTree`, session-manager.js): `fromId` is the leaf being left (`"root"` when there is
/// none), the summary attached at the new position (its parent), the model's summary (after Pi's preamble) is
/// followed by the `<read-files>` / `<modified-files>` of the entries left, which are also its
/// `details`, and `fromHook` is false. Reference Pi resuming the file sees the same messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_summary_entry_is_written_as_pi_writes_it() {
    let tmp = TempDir::new("rich-branch-summary");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    std::fs::write(ws.join("b.txt"), "two\n").unwrap();
    let mock = MockModel::start(vec![
        Step::text("first answer"),
        Step::call("c1", "read", json!({"path": "b.txt"})),
        Step::edit("c2", "a.txt", "one", "ONE"),
        Step::text("edited"),
    ])
    .await;
    mock.set_responder(std::sync::Arc::new(|body: &Value| {
        body.to_string()
            .contains("context summarization assistant")
            .then(|| Step::text("## Goal\nEdit a.txt"))
    }));
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "hello", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(30)).await;
    c.request(
        "agent/prompt",
        json!({"sessionId": sid, "text": "edit a.txt"}),
    )
    .await
    .unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    let state = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    let file = PathBuf::from(state["sessionFile"].as_str().unwrap());
    let lines = |f: &Path| -> Vec<Value> {
        std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // Back to the first answer, summarising the second turn.
    let first_answer = lines(&file)
        .into_iter()
        .find(|l| l["message"]["role"] == "assistant")
        .unwrap();
    let old_leaf = lines(&file).last().unwrap()["id"].clone();
    let br = c
        .request(
            "agent/session/branch",
            json!({"sessionId": sid, "entryId": first_answer["id"], "summarize": true}),
        )
        .await
        .unwrap();
    let summary = "The user explored a different conversation branch before returning here.\nSummary of that exploration:\n\n## Goal\nEdit a.txt\n\n<read-files>\nb.txt\n</read-files>\n\n<modified-files>\na.txt\n</modified-files>";
    assert_eq!(br["summary"], summary);
    let written = lines(&file).last().unwrap().clone();
    assert_eq!(written["id"], br["summaryEntryId"]);
    let mut keys: Vec<&str> = written
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "details",
            "fromHook",
            "fromId",
            "id",
            "parentId",
            "summary",
            "timestamp",
            "type",
            "usage"
        ]
    );
    assert_eq!(
        (
            &written["type"],
            &written["parentId"],
            &written["fromId"],
            &written["summary"],
            &written["details"],
            &written["fromHook"]
        ),
        (
            &json!("branch_summary"),
            &first_answer["id"],
            &old_leaf,
            &json!(summary),
            &json!({"readFiles": ["b.txt"], "modifiedFiles": ["a.txt"]}),
            &json!(false)
        )
    );
    // Before the first entry: attached at the root, `fromId` the summary just written (the
    // leaf left).
    let br = c
        .request(
            "agent/session/branch",
            json!({"sessionId": sid, "entryId": null, "summarize": true}),
        )
        .await
        .unwrap();
    let root = lines(&file).last().unwrap().clone();
    assert_eq!(root["id"], br["summaryEntryId"]);
    assert_eq!(
        (&root["parentId"], &root["fromId"]),
        (&Value::Null, &written["id"])
    );
    let ours = c
        .request("agent/messages", json!({"sessionId": sid}))
        .await
        .unwrap();
    c.shutdown().await;
    if let Some(pi) = pi_ref_bin() {
        let agent = tmp.path().join("agent");
        assert_eq!(
            ours["messages"],
            pi_get_messages(&pi, &ws, &agent, &file).await
        );
    }
}

/// A Pi 1.6-shaped session of folder `cwd` whose branch ends in a user message no answer
/// followed (a run cut before its answer): `first` answered `one`, then `unanswered`.
fn unanswered_session(cwd: &Path, to: &Path) {
    let lines = [
        json!({"type": "session", "version": 3, "id": "0a000000-0000-7000-8000-000000000000",
            "timestamp": "2026-12-01T10:00:00.000Z", "cwd": cwd}),
        json!({"type": "model_change", "id": "e1", "parentId": null,
            "timestamp": "2026-12-01T10:00:00.001Z", "provider": "mock", "modelId": "mock-1"}),
        json!({"type": "thinking_level_change", "id": "e2", "parentId": "e1",
            "timestamp": "2026-12-01T10:00:00.002Z", "thinkingLevel": "off"}),
        json!({"type": "message", "id": "e3", "parentId": "e2", "timestamp": "2026-12-01T10:00:01.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "first"}], "timestamp": 1796119201000u64}}),
        json!({"type": "message", "id": "e4", "parentId": "e3", "timestamp": "2026-12-01T10:00:02.000Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "one"}],
                "api": "openai-completions", "provider": "mock", "model": "mock-1",
                "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
                "stopReason": "stop", "timestamp": 1796119202000u64}}),
        json!({"type": "message", "id": "e5", "parentId": "e4", "timestamp": "2026-12-01T10:00:03.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "unanswered"}], "timestamp": 1796119203000u64}}),
    ];
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(to, body).unwrap();
}

/// `(role, text)` of a chat-completions request's messages, the system prompt left out.
fn conversation(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                pi_e2e::content_text(m),
            )
        })
        .collect()
}

/// Issue 29 (pi44 e): `agent/session/clone` of a branch that ends in an unanswered user
/// message, then a prompt in the clone: the request carries what Pi 1.6.0's RPC `clone` and
/// prompt send on the same file (Pi's `createBranchedSession` copies the whole branch, the
/// unanswered message too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_of_a_branch_ending_in_an_unanswered_message_sends_what_pi_sends() {
    let Some(pi) = pi_e2e::pi16_bin("clone compared with Pi 1.6.0") else {
        return;
    };
    let their_mock = MockModel::start(vec![Step::text("two")]).await;
    let tmp = TempDir::new("clone-unanswered-pi16");
    let (ws, agent) = (tmp.path().join("ws"), tmp.path().join("agent"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::fs::write(
        agent.join("models.json"),
        their_mock.models_json().to_string(),
    )
    .unwrap();
    let file = tmp.path().join("s.jsonl");
    unanswered_session(&ws, &file);
    tokio::task::block_in_place(|| {
        let mut rpc = pi_e2e::pi_rpc::PiRpc::open(&pi, &ws, &agent, &file);
        rpc.request(json!({"type": "clone"}));
        rpc.prompt("second");
        rpc.close();
    });
    let theirs = conversation(&their_mock.requests()[0].body);

    let mock = MockModel::start(vec![Step::text("two")]).await;
    let tmp = TempDir::new("clone-unanswered");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let file = tmp.path().join("s.jsonl");
    unanswered_session(&ws, &file);
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let s = c
        .request("agent/session/open", json!({"path": file}))
        .await
        .unwrap();
    let cl = c
        .request("agent/session/clone", json!({"sessionId": s["sessionId"]}))
        .await
        .unwrap();
    let params = json!({"sessionId": cl["session"]["sessionId"], "text": "second"});
    c.request("agent/prompt", params).await.unwrap();
    c.events_until_settled(Duration::from_secs(30)).await;
    c.shutdown().await;
    assert_eq!(conversation(&mock.requests()[0].body), theirs);
}

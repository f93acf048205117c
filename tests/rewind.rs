//! Changes and rewind (checkpoints) through the real `pi-lsp` binary over stdio, the fake
//! editor and the loopback mock model: `agent/session/changes` lists the agent's edits with
//! whole values (and again after the session is reopened from disk), `agent/session/rewind`
//! reverts exactly (bytes compared) with one labelled, annotated `workspace/applyEdit` per
//! file, refuses a file the user changed since and keeps it, deletes a file the agent created
//! only for a client that applies deletes, re-applies when rewound to the old leaf, and is
//! refused while a run is active.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pi_e2e::lsp_client::{file_uri, start_with_mock, EditorBehavior};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

/// `xxh3:<16 hex>` of `text`, as the server records it.
fn hash(text: &str) -> String {
    format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// The id of the entry of the tool result of `call` in the session file.
fn result_entry(lines: &[Value], call: &str) -> String {
    lines
        .iter()
        .find(|l| l["message"]["role"] == "toolResult" && l["message"]["toolCallId"] == call)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

const A0: &str = "alpha\nbeta\ngamma\n";
const A1: &str = "ALPHA\nbeta\ngamma\n";
const A2: &str = "ALPHA\nbeta\nGAMMA\n";
const B0: &str = "one\ntwo\n";
const B1: &str = "one\nTWO\n";
const C1: &str = "new file\n";

fn script() -> Vec<Step> {
    vec![
        Step::edit("call_a1", "a.txt", "alpha", "ALPHA"),
        Step::edit("call_b1", "b.txt", "two", "TWO"),
        Step::call("call_c1", "write", json!({"path": "c.txt", "content": C1})),
        Step::edit("call_a2", "a.txt", "gamma", "GAMMA"),
        Step::text("done"),
    ]
}

/// The four changes of [`script`] as `agent/session/changes` lists them.
fn expected_changes(ws: &Path, lines: &[Value]) -> Value {
    let change =
        |call: &str, tool: &str, path: &str, diff: &str, before: Option<&str>, after: &str| {
            json!({"toolCallId": call, "toolName": tool, "path": path,
            "absolutePath": ws.join(path).display().to_string(),
            "entryId": result_entry(lines, call), "diff": diff,
            "hashBefore": before.map(hash), "hashAfter": hash(after),
            "created": before.is_none()})
        };
    json!([
        change(
            "call_a1",
            "edit",
            "a.txt",
            "--- a.txt\n+++ a.txt\n@@ -1,3 +1,3 @@\n-alpha\n+ALPHA\n beta\n gamma\n",
            Some(A0),
            A1
        ),
        change(
            "call_b1",
            "edit",
            "b.txt",
            "--- b.txt\n+++ b.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n",
            Some(B0),
            B1
        ),
        change(
            "call_c1",
            "write",
            "c.txt",
            "--- c.txt\n+++ c.txt\n@@ -0,0 +1 @@\n+new file\n",
            None,
            C1
        ),
        change(
            "call_a2",
            "edit",
            "a.txt",
            "--- a.txt\n+++ a.txt\n@@ -1,3 +1,3 @@\n ALPHA\n beta\n-gamma\n+GAMMA\n",
            Some(A1),
            A2
        ),
    ])
}

/// One file's rewind edit as the editor receives it: one `TextDocumentEdit` of the open
/// buffer at `version`, its edits annotated with the label.
fn text_edit(path: &Path, version: i64, label: &str, edits: Value) -> Value {
    json!({"label": label, "edit": {
        "documentChanges": [{"textDocument": {"uri": file_uri(path), "version": version},
            "edits": edits}],
        "changeAnnotations": {"pi": {"label": label, "needsConfirmation": false}}}})
}

fn range_edit(l0: u32, c0: u32, l1: u32, c1: u32, text: &str) -> Value {
    json!({"range": {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}},
        "newText": text, "annotationId": "pi"})
}

/// The whole flow: an agent run edits two files (one twice) and creates one; the changes are
/// listed; the user types in one of the edited buffers; the rewind to before the prompt
/// reverts the other two exactly, refuses and keeps the typed one; rewinding to the old leaf
/// re-applies them; the session reopened from disk lists the same changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_reverts_refuses_user_changes_and_reapplies() {
    let tmp = TempDir::new("rewind");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let (a, b, c_file) = (ws.join("a.txt"), ws.join("b.txt"), ws.join("c.txt"));
    std::fs::write(&a, A0).unwrap();
    std::fs::write(&b, B0).unwrap();
    let mock = MockModel::start(script()).await;
    let behavior = EditorBehavior {
        resource_operations: vec!["create", "delete"],
        change_annotations: true,
        ..Default::default()
    };
    let mut c = start_with_mock(&ws, &mock, behavior.clone()).await;
    let r = c
        .request("agent/prompt", json!({"text": "change the files"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(30)).await;
    assert_eq!(
        (read(&a), read(&b), read(&c_file)),
        (Some(A2.into()), Some(B1.into()), Some(C1.into()))
    );
    let lines = pi_e2e::session_lines(&ws);
    let changes = c
        .request("agent/session/changes", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(changes, json!({"changes": expected_changes(&ws, &lines)}));
    // The records in the session file itself: hashes and the exact replaced text.
    let a1 = lines
        .iter()
        .find(|l| l["message"]["toolCallId"] == "call_a1" && l["message"]["role"] == "toolResult")
        .unwrap();
    assert_eq!(
        a1["message"]["details"]["fileChange"],
        json!({"path": a.display().to_string(), "hashBefore": hash(A0), "hashAfter": hash(A1),
            "edits": [{"at": 0, "oldText": "alpha", "newText": "ALPHA"}]})
    );

    // The user types in b.txt (open in the editor since the agent's edit), unsaved.
    let typed = "one\nTWO\nmine\n";
    c.set_buffer(&b, typed).await;
    let before_rewind = c.apply_edit_params().len();
    let user_entry = lines
        .iter()
        .find(|l| l["message"]["role"] == "user")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let old_leaf = lines.last().unwrap()["id"].as_str().unwrap().to_string();
    let r = c
        .request(
            "agent/session/rewind",
            json!({"sessionId": sid, "entryId": user_entry}),
        )
        .await
        .unwrap();
    let lines2 = pi_e2e::session_lines(&ws);
    let marker = lines2.last().unwrap().clone();
    let user_parent = lines
        .iter()
        .find(|l| l["id"] == user_entry.as_str())
        .unwrap()["parentId"]
        .clone();
    assert_eq!(
        r,
        json!({"previousLeafId": old_leaf, "leafId": marker["id"], "files": [
            {"path": "a.txt", "status": "reverted"},
            {"path": "b.txt", "status": "refused", "reason": format!(
                "changed since the agent's change (call_b1): lines around the agent's change (line 2) were changed since; kept as it is")},
            {"path": "c.txt", "status": "reverted"},
        ]})
    );
    // Nothing deleted from the file: one entry added, at the user message's parent.
    assert_eq!(lines2.len(), lines.len() + 1);
    assert_eq!(&lines2[..lines.len()], &lines[..]);
    assert_eq!(marker["type"], "custom");
    assert_eq!(marker["customType"], "pi-lsp.rewind");
    assert_eq!(marker["parentId"], user_parent);
    assert_eq!(marker["data"]["fromId"], old_leaf.as_str());
    assert_eq!(marker["data"]["files"], r["files"]);
    // Bytes: a.txt and c.txt as before the run, b.txt kept (disk and buffer).
    assert_eq!(
        (read(&a), read(&b), read(&c_file)),
        (Some(A0.into()), Some(B1.into()), None)
    );
    assert_eq!(c.doc(&a).unwrap().text, A0);
    assert_eq!(c.doc(&b).unwrap().text, typed);
    assert!(c.doc(&c_file).is_none());
    // One labelled, annotated edit per file: both of a.txt's changes undone at once.
    let sent = c.apply_edit_params()[before_rewind..].to_vec();
    let a_version = 2; // opened by the first edit (1), changed by the second (2)
    assert_eq!(
        sent,
        vec![
            text_edit(
                &a,
                a_version,
                &format!("Pi: rewind a.txt · session {sid}"),
                json!([
                    range_edit(0, 0, 0, 5, "alpha"),
                    range_edit(2, 0, 2, 5, "gamma")
                ])
            ),
            json!({"label": format!("Pi: rewind c.txt · session {sid}"), "edit": {
                "documentChanges": [{"kind": "delete", "uri": file_uri(&c_file),
                    "options": {"recursive": false, "ignoreIfNotExists": false},
                    "annotationId": "pi"}],
                "changeAnnotations": {"pi": {"label": format!("Pi: rewind c.txt · session {sid}"), "needsConfirmation": false}}}}),
        ]
    );
    let after = c
        .request("agent/session/changes", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(after, json!({"changes": []}));
    let state = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(state["leafId"], marker["id"]);
    // Before the first prompt: the stored system message only (Pi 1.6's count).
    assert_eq!(state["messageCount"], 1);

    // Rewinding to the old leaf undoes the rewind: a.txt and c.txt come back, b.txt (still
    // the user's) is refused again.
    let sent_before = c.apply_edit_params().len();
    let back = c
        .request(
            "agent/session/rewind",
            json!({"sessionId": sid, "entryId": old_leaf}),
        )
        .await
        .unwrap();
    let lines3 = pi_e2e::session_lines(&ws);
    let marker2 = lines3.last().unwrap().clone();
    assert_eq!(
        back,
        json!({"previousLeafId": marker["id"], "leafId": marker2["id"], "files": [
            {"path": "a.txt", "status": "reapplied"},
            {"path": "b.txt", "status": "refused", "reason": format!(
                "changed since the agent's change (call_b1): line 2 now differs from the text the agent's change was made on; kept as it is")},
            {"path": "c.txt", "status": "reapplied"},
        ]})
    );
    assert_eq!(marker2["parentId"], old_leaf.as_str());
    assert_eq!(
        (read(&a), read(&b), read(&c_file)),
        (Some(A2.into()), Some(B1.into()), Some(C1.into()))
    );
    assert_eq!(c.doc(&b).unwrap().text, typed);
    let sent = c.apply_edit_params()[sent_before..].to_vec();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(
        sent[0],
        text_edit(
            &a,
            a_version + 1,
            &format!("Pi: reapply a.txt · session {sid}"),
            json!([
                range_edit(0, 0, 0, 5, "ALPHA"),
                range_edit(2, 0, 2, 5, "GAMMA")
            ])
        )
    );
    assert_eq!(
        sent[1]["label"],
        format!("Pi: reapply c.txt · session {sid}")
    );
    assert_eq!(
        sent[1]["edit"]["documentChanges"][0],
        json!({"kind": "create", "uri": file_uri(&c_file),
            "options": {"overwrite": false, "ignoreIfExists": true}, "annotationId": "pi"})
    );
    let listed = c
        .request("agent/session/changes", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(listed, json!({"changes": expected_changes(&ws, &lines)}));
    c.shutdown().await;

    // Reopened from disk by a new server: the same changes, the same leaf.
    let mut c = start_with_mock(&ws, &mock, behavior).await;
    let listed = c
        .request("agent/session/changes", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(listed, json!({"changes": expected_changes(&ws, &lines)}));
    let state = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(state["leafId"], marker2["id"]);
    c.shutdown().await;
    mock.assert_paired();
}

/// A client without `delete` among its resource operations: the file the agent created is
/// refused and kept, the others reverted; a rewind while a run is active is refused with
/// `-31001` and changes nothing; an unknown entry is `-31005`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_keeps_created_files_without_delete_support_and_waits_for_runs() {
    let tmp = TempDir::new("rewind-nodelete");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let (a, c_file) = (ws.join("a.txt"), ws.join("c.txt"));
    std::fs::write(&a, A0).unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    let mock = MockModel::start(vec![
        Step::edit("call_a1", "a.txt", "alpha", "ALPHA"),
        Step::call("call_c1", "write", json!({"path": "c.txt", "content": C1})),
        Step::text("done"),
        Step::Gate(gate.clone(), Box::new(Step::text("second done"))),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = c
        .request("agent/prompt", json!({"text": "change the files"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(30)).await;
    let lines = pi_e2e::session_lines(&ws);
    let first_user = lines
        .iter()
        .find(|l| l["message"]["role"] == "user")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    // A second run held at the model: rewinding meanwhile is refused.
    let r = c
        .request(
            "agent/prompt",
            json!({"sessionId": sid, "text": "and more"}),
        )
        .await
        .unwrap();
    let run = r["runId"].as_str().unwrap().to_string();
    let err = c
        .request(
            "agent/session/rewind",
            json!({"sessionId": sid, "entryId": first_user}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        json!({"code": -31001, "message": format!(
            "session {sid} is running {run}; rewind waits until it ends (or agent/abort it)")})
    );
    assert_eq!(
        (read(&a), read(&c_file)),
        (Some(A1.into()), Some(C1.into()))
    );
    gate.notify_one();
    c.run_until_end(Duration::from_secs(30)).await;

    let err = c
        .request(
            "agent/session/rewind",
            json!({"sessionId": sid, "entryId": "nope"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        json!({"code": -31005, "message": "entryId: no entry nope in the session"})
    );
    let r = c
        .request(
            "agent/session/rewind",
            json!({"sessionId": sid, "entryId": first_user}),
        )
        .await
        .unwrap();
    assert_eq!(
        r["files"],
        json!([
            {"path": "a.txt", "status": "reverted"},
            {"path": "c.txt", "status": "refused", "reason": "the agent created it; deleting it needs a client that applies file deletes (workspace.workspaceEdit.resourceOperations with \"delete\"); kept as it is"},
        ])
    );
    assert_eq!(
        (read(&a), read(&c_file)),
        (Some(A0.into()), Some(C1.into()))
    );
    // Without change annotation support, the edit is labelled only.
    let last = c.apply_edit_params().pop().unwrap();
    assert_eq!(last["label"], format!("Pi: rewind a.txt · session {sid}"));
    assert!(last["edit"].get("changeAnnotations").is_none(), "{last}");
    c.shutdown().await;
}

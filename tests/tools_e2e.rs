//! The coding tools through the real `pi-lsp` binary over stdio, a fake editor and the loopback
//! mock model: stale-read refusal after the user typed (EDIT-08), a client declining the edit
//! (LSP-02), ranges in UTF-16 and UTF-8 on lines with emoji, CJK and combining marks (LSP-01),
//! and the undo label of every `workspace/applyEdit`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::time::Duration;

use pi_e2e::lsp_client::{file_uri, start_with_mock, tool_result_text, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

#[tokio::test]
async fn edit_refused_after_the_user_typed_in_the_buffer() {
    let tmp = TempDir::new("stale");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("f.py");
    std::fs::write(&file, "x = 1\ny = 2\n").unwrap();
    // Slow chunks give the "user" time to type between the read and the edit.
    let mock = MockModel::start_with_delay(
        vec![
            Step::call("call_read", "read", json!({"path": "f.py"})),
            Step::call(
                "call_edit",
                "edit",
                json!({"path": "f.py", "edits": [{"oldText": "y = 2", "newText": "y = 5"}]}),
            ),
            Step::text("I will read it again."),
        ],
        Duration::from_millis(60),
    )
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&file, "x = 1\ny = 2\n").await;
    c.request(
        "agent/prompt",
        json!({"text": "set y to 5", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let mut events = Vec::new();
    loop {
        let n = c.next_notification(Duration::from_secs(10)).await.unwrap();
        if n["method"] != "agent/event" {
            continue;
        }
        let ev = n["params"].clone();
        let read_done =
            ev["event"]["type"] == "tool_execution_end" && ev["event"]["toolName"] == "read";
        events.push(ev);
        if read_done {
            break;
        }
    }
    c.set_buffer(&file, "x = 1\ny = 3\n").await;
    events.extend(c.run_until_end(Duration::from_secs(20)).await);
    assert_eq!(
        tool_result_text(&events, "read"),
        ("x = 1\ny = 2\n".to_string(), false)
    );
    assert_eq!(
        tool_result_text(&events, "edit"),
        (
            "f.py changed since you read it: it was changed in the editor (the user changed the open buffer). Nothing was changed by this edit. Read f.py again and redo the edit against its current text.\n\nLines changed since your read (-N: line N of the text you read, +N: line N of the current text):\n-2 y = 2\n+2 y = 3\n\nClosest text in the file, lines 2-2 (→ is a tab, · a space):\n    2  y·=·3\nYour oldText:\n       y·=·2".to_string(),
            true
        )
    );
    assert_eq!(c.apply_edit_params(), Vec::<Value>::new());
    assert_eq!(c.doc(&file).unwrap().text, "x = 1\ny = 3\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x = 1\ny = 2\n");
    mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn client_declining_the_edit_is_an_error_and_changes_nothing() {
    let tmp = TempDir::new("decline");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("notes.txt");
    std::fs::write(&file, "a = 1\n").unwrap();
    let mock = MockModel::start(vec![
        Step::call(
            "call_edit",
            "edit",
            json!({"path": "notes.txt", "edits": [{"oldText": "a = 1", "newText": "a = 2"}]}),
        ),
        Step::text("The editor refused."),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            apply_edits: false,
            ..Default::default()
        },
    )
    .await;
    c.open(&file, "a = 1\n").await;
    c.request(
        "agent/prompt",
        json!({"text": "bump a", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "edit"),
        (
            "the editor did not apply the edit: version mismatch".to_string(),
            true
        )
    );
    // Sent once: the buffer's text did not change, and neither did its version.
    assert_eq!(
        c.apply_edit_params(),
        vec![json!({
            "label": format!("pi: turn 1 · edit notes.txt (call_edit) · session {}", session_of(&events)),
            "edit": {"documentChanges": [{"textDocument": {"uri": file_uri(&file), "version": 1},
                "edits": [{"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 5}}, "newText": "a = 2"}]}]}
        })]
    );
    assert_eq!(c.doc(&file).unwrap().text, "a = 1\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "a = 1\n");
    c.shutdown().await;
}

const WIDE: &str = "let s = \"🍋\"; x\nname = \"é🍋\"  # ok\ne\u{0301}中 z\n";

async fn ranges_round(utf8: bool, incremental: bool) {
    let tmp = TempDir::new(if utf8 { "utf8" } else { "utf16" });
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("u.txt");
    std::fs::write(&file, WIDE).unwrap();
    let mock = MockModel::start(vec![
        Step::call(
            "call_e",
            "edit",
            json!({"path": "u.txt", "edits": [
                {"oldText": "; x", "newText": "; y"},
                {"oldText": "# ok", "newText": "% ok"},
                {"oldText": "中 z", "newText": "中 w"}]}),
        ),
        Step::text("done"),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            offer_utf8: utf8,
            incremental_changes: incremental,
            ..Default::default()
        },
    )
    .await;
    c.open(&file, WIDE).await;
    c.request(
        "agent/prompt",
        json!({"text": "edit", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "edit"),
        (
            "Successfully replaced 3 block(s) in u.txt.".to_string(),
            false
        )
    );
    let r = |l: u32, s: u32, e: u32| json!({"start": {"line": l, "character": s}, "end": {"line": l, "character": e}});
    // LSP-01: `x` at UTF-16 14 / UTF-8 16; `#` at 14 / 17; the third line: e + U+0301 + 中.
    let expected = if utf8 {
        vec![
            json!({"range": r(0, 14, 17), "newText": "; y"}),
            json!({"range": r(1, 17, 21), "newText": "% ok"}),
            json!({"range": r(2, 3, 8), "newText": "中 w"}),
        ]
    } else {
        vec![
            json!({"range": r(0, 12, 15), "newText": "; y"}),
            json!({"range": r(1, 14, 18), "newText": "% ok"}),
            json!({"range": r(2, 2, 5), "newText": "中 w"}),
        ]
    };
    assert_eq!(
        c.apply_edit_params(),
        vec![json!({
            "label": format!("pi: turn 1 · edit u.txt (call_e) · session {}", session_of(&events)),
            "edit": {"documentChanges": [{"textDocument": {"uri": file_uri(&file), "version": 1}, "edits": expected}]}
        })]
    );
    let after = "let s = \"🍋\"; y\nname = \"é🍋\"  % ok\ne\u{0301}中 w\n";
    assert_eq!(c.doc(&file).unwrap().text, after);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after);
    c.shutdown().await;
}

#[tokio::test]
async fn utf16_ranges_on_emoji_cjk_and_combining_lines() {
    ranges_round(false, false).await;
}

#[tokio::test]
async fn utf8_ranges_on_emoji_cjk_and_combining_lines() {
    ranges_round(true, false).await;
}

/// The editor echoes the edit as incremental `didChange` ranges (as VS Code and Neovim do); the
/// server's buffer must end up byte-equal, read back by a second edit's match.
#[tokio::test]
async fn incremental_did_change_in_both_encodings_keeps_the_buffer_exact() {
    ranges_round(false, true).await;
    ranges_round(true, true).await;
}

#[tokio::test]
async fn two_edits_of_one_file_in_one_batch_apply_in_call_order() {
    let tmp = TempDir::new("batch");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("b.txt");
    std::fs::write(&file, "one\ntwo\n").unwrap();
    let mock = MockModel::start(vec![
        Step::call("call_r", "read", json!({"path": "b.txt"})),
        Step::Tools(
            None,
            vec![
                (
                    "call_1".into(),
                    "edit".into(),
                    json!({"path": "b.txt", "edits": [{"oldText": "one", "newText": "ONE"}]}),
                ),
                (
                    "call_2".into(),
                    "edit".into(),
                    json!({"path": "b.txt", "edits": [{"oldText": "ONE\ntwo", "newText": "ONE\nTWO"}]}),
                ),
            ],
        ),
        Step::text("done"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&file, "one\ntwo\n").await;
    c.request(
        "agent/prompt",
        json!({"text": "shout", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    let ends: Vec<(String, bool)> = events
        .iter()
        .filter(|e| e["event"]["type"] == "tool_execution_end")
        .map(|e| {
            (
                e["event"]["toolCallId"].as_str().unwrap().to_string(),
                e["event"]["isError"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        vec![
            ("call_r".to_string(), false),
            ("call_1".to_string(), false),
            ("call_2".to_string(), false)
        ]
    );
    assert_eq!(
        c.apply_edit_params(),
        vec![
            json!({"label": format!("pi: turn 2 · edit b.txt (call_1) · session {}", session_of(&events)), "edit": {"documentChanges": [{"textDocument": {"uri": file_uri(&file), "version": 1},
                "edits": [{"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 3}}, "newText": "ONE"}]}]}}),
            json!({"label": format!("pi: turn 2 · edit b.txt (call_2) · session {}", session_of(&events)), "edit": {"documentChanges": [{"textDocument": {"uri": file_uri(&file), "version": 2},
                "edits": [{"range": {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 3}}, "newText": "ONE\nTWO"}]}]}}),
        ]
    );
    assert_eq!(c.doc(&file).unwrap().text, "ONE\nTWO\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "ONE\nTWO\n");
    mock.assert_paired();
    c.shutdown().await;
}

/// The `fs_probe` example of `pi-lsp` (a minimal server exposing `EditorFs::rename` and
/// `EditorFs::delete`, which no Pi tool performs), built once with the same cargo and target dir.
fn fs_probe_bin() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap();
            let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = std::process::Command::new(cargo);
            cmd.args(["build", "-q", "-p", "pi-lsp", "--example", "fs_probe"])
                .env("CARGO_TARGET_DIR", profile_dir.parent().unwrap())
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if profile_dir.ends_with("release") {
                cmd.arg("--release");
            }
            assert!(cmd.status().unwrap().success(), "building fs_probe failed");
            profile_dir.join("examples").join("fs_probe")
        })
        .clone()
}

async fn probe(ws: &std::path::Path, ops: Vec<&'static str>) -> LspClient {
    LspClient::start(
        &fs_probe_bin(),
        ws,
        &[("PI_LSP_LOG", "warn".to_string())],
        EditorBehavior {
            resource_operations: ops,
            ..Default::default()
        },
    )
    .await
}

#[tokio::test]
async fn rename_and_delete_are_resource_operations_when_the_client_advertises_them() {
    let tmp = TempDir::new("resops");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let (a, b, c) = (ws.join("a.txt"), ws.join("sub/b.txt"), ws.join("c.txt"));
    std::fs::write(&a, "alpha\n").unwrap();
    std::fs::write(&c, "gamma\n").unwrap();
    let mut cl = probe(&ws, vec!["create", "rename", "delete"]).await;
    cl.open(&a, "alpha\n").await;
    let p = |x: &std::path::Path| x.display().to_string();
    assert_eq!(
        cl.request("probe/rename", json!({"from": p(&a), "to": p(&b)}))
            .await
            .unwrap(),
        json!({"ok": true})
    );
    // Never over an existing file; nothing is sent then.
    assert_eq!(
        cl.request("probe/rename", json!({"from": p(&b), "to": p(&c)}))
            .await
            .unwrap(),
        json!({"ok": false, "error": format!("{} already exists", c.display())})
    );
    assert_eq!(
        cl.request("probe/delete", json!({"path": p(&b)}))
            .await
            .unwrap(),
        json!({"ok": true})
    );
    assert_eq!(
        cl.request("probe/delete", json!({"path": p(&b)}))
            .await
            .unwrap(),
        json!({"ok": false, "error": format!("ENOENT: no such file or directory: {}", b.display())})
    );
    assert_eq!(
        cl.apply_edit_params(),
        vec![
            json!({"label": "pi: probe rename", "edit": {"documentChanges": [{"kind": "rename",
                "oldUri": file_uri(&a), "newUri": file_uri(&b),
                "options": {"overwrite": false, "ignoreIfExists": false}}]}}),
            json!({"label": "pi: probe delete", "edit": {"documentChanges": [{"kind": "delete",
                "uri": file_uri(&b), "options": {"recursive": false, "ignoreIfNotExists": false}}]}}),
        ]
    );
    assert!(!a.exists() && !b.exists());
    assert_eq!(std::fs::read_to_string(&c).unwrap(), "gamma\n");
    // The editor moved the buffer, then closed it with the delete.
    assert!(cl.doc(&a).is_none() && cl.doc(&b).is_none());
    cl.shutdown().await;
}

#[tokio::test]
async fn rename_and_delete_go_to_disk_when_the_client_does_not_advertise_them() {
    let tmp = TempDir::new("noresops");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let (a, b) = (ws.join("a.txt"), ws.join("sub/b.txt"));
    std::fs::write(&a, "alpha\n").unwrap();
    let mut cl = probe(&ws, vec!["create"]).await;
    let p = |x: &std::path::Path| x.display().to_string();
    assert_eq!(
        cl.request("probe/rename", json!({"from": p(&a), "to": p(&b)}))
            .await
            .unwrap(),
        json!({"ok": true})
    );
    assert!(!a.exists());
    assert_eq!(std::fs::read_to_string(&b).unwrap(), "alpha\n");
    assert_eq!(
        cl.request("probe/delete", json!({"path": p(&b)}))
            .await
            .unwrap(),
        json!({"ok": true})
    );
    assert!(!b.exists());
    assert_eq!(cl.apply_edit_params(), Vec::<Value>::new());
    cl.shutdown().await;
}

#[tokio::test]
async fn write_over_an_open_buffer_replaces_its_whole_text_and_reports_the_disk_write() {
    let tmp = TempDir::new("write-open");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("w.txt");
    std::fs::write(&file, "on disk\n").unwrap();
    let mock = MockModel::start(vec![
        Step::call(
            "call_w",
            "write",
            json!({"path": "w.txt", "content": "new text\n"}),
        ),
        Step::text("done"),
    ])
    .await;
    // Writing over the user's unsaved text always asks (here under approve-all); allowed.
    let behavior = EditorBehavior {
        permission_answer: Some(json!({"decision": "allow"})),
        ..Default::default()
    };
    let mut c = start_with_mock(&ws, &mock, behavior).await;
    // Unsaved buffer: two lines, the last with an emoji and no final newline.
    let buffer = "unsaved 中\r\nlast 🍋🍋";
    c.open(&file, buffer).await;
    c.request(
        "agent/prompt",
        json!({"text": "replace it", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "write"),
        ("Successfully wrote to w.txt. The editor's buffer held unsaved text of the user's; the user allowed replacing it".to_string(), false)
    );
    // The question said what is lost, whatever the policy.
    let asked: Vec<Value> = c
        .log()
        .iter()
        .filter(|m| m["method"] == "agent/requestPermission")
        .map(|m| m["params"]["reason"].clone())
        .collect();
    assert_eq!(
        asked,
        vec![json!("write replaces w.txt, whose editor buffer holds unsaved text of the user's: 2 line(s) of it are lost (the − lines)")]
    );
    // The whole buffer, ending at line 1, UTF-16 column 9 (two emoji are two units each).
    assert_eq!(
        c.apply_edit_params(),
        vec![
            json!({"label": format!("pi: turn 1 · write w.txt (call_w) · session {}", session_of(&events)), "edit": {"documentChanges": [
            {"textDocument": {"uri": file_uri(&file), "version": 1}, "edits": [{"range":
                {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 9}},
                "newText": "new text\n"}]}]}})
        ]
    );
    assert_eq!(c.doc(&file).unwrap().text, "new text\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new text\n");
    // The client cannot save on request: the server wrote the buffer and says so.
    let wrote: Vec<Value> = c
        .log()
        .into_iter()
        .filter(|m| m["method"] == "agent/didWriteDocument")
        .map(|m| m["params"].clone())
        .collect();
    assert_eq!(wrote, vec![json!({"uri": file_uri(&file), "version": 2})]);
    c.shutdown().await;
}

#[tokio::test]
async fn new_files_go_to_disk_when_the_client_cannot_create_them() {
    let tmp = TempDir::new("nocreate");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![
        Step::call(
            "call_w",
            "write",
            json!({"path": "deep/er/new.txt", "content": "fresh\n"}),
        ),
        Step::text("done"),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            resource_operations: vec![],
            ..Default::default()
        },
    )
    .await;
    c.request(
        "agent/prompt",
        json!({"text": "create it", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "write"),
        ("Successfully wrote to deep/er/new.txt".to_string(), false)
    );
    assert_eq!(c.apply_edit_params(), Vec::<Value>::new());
    assert_eq!(
        std::fs::read_to_string(ws.join("deep/er/new.txt")).unwrap(),
        "fresh\n"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn edit_names_the_buffer_version_it_was_computed_against() {
    // LSP-02: the user's change between the read and the edit left the text as it was but
    // moved the version (an undo back to the same text); the edit is sent with version 2.
    let tmp = TempDir::new("version");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("v.txt");
    std::fs::write(&file, "k = 1\n").unwrap();
    let mock = MockModel::start_with_delay(
        vec![
            Step::call("call_read", "read", json!({"path": "v.txt"})),
            Step::call(
                "call_edit",
                "edit",
                json!({"path": "v.txt", "edits": [{"oldText": "k = 1", "newText": "k = 2"}]}),
            ),
            Step::text("done"),
        ],
        Duration::from_millis(60),
    )
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&file, "k = 1\n").await;
    c.request(
        "agent/prompt",
        json!({"text": "bump k", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    loop {
        let n = c.next_notification(Duration::from_secs(10)).await.unwrap();
        if n["method"] == "agent/event"
            && n["params"]["event"]["type"] == "tool_execution_end"
            && n["params"]["event"]["toolName"] == "read"
        {
            break;
        }
    }
    c.set_buffer(&file, "k = 1\n").await;
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "edit"),
        (
            "Successfully replaced 1 block(s) in v.txt.".to_string(),
            false
        )
    );
    assert_eq!(
        c.apply_edit_params(),
        vec![
            json!({"label": format!("pi: turn 2 · edit v.txt (call_edit) · session {}", session_of(&events)), "edit": {"documentChanges": [
            {"textDocument": {"uri": file_uri(&file), "version": 2}, "edits": [{"range":
                {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 5}},
                "newText": "k = 2"}]}]}})
        ]
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "k = 2\n");
    mock.assert_paired();
    c.shutdown().await;
}

/// Pi's `read` of an image for a model whose `input` lacks `image`: the text block carries
/// Pi's note, and the next request carries Pi's placeholder instead of the image; a model that
/// takes images gets no note and the image itself.
#[tokio::test]
async fn image_read_for_a_model_without_image_input_carries_pis_note() {
    let png = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/images/red-2x2.png"
    ))
    .unwrap();
    for vision in [false, true] {
        let tmp = TempDir::new("image-note");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("shot.png"), &png).unwrap();
        let mock = MockModel::start_with_delay(
            vec![
                Step::call("call_read", "read", json!({"path": "shot.png"})),
                Step::text("seen"),
            ],
            Duration::ZERO,
        )
        .await;
        let mut models = mock.models_json();
        if vision {
            models["providers"]["mock"]["models"][0]["input"] = json!(["text", "image"]);
        }
        let env = pi_e2e::lsp_client::agent_env(&tmp.path().join("agent"), &models, &[]);
        let mut c =
            LspClient::start(&pi_e2e::pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
        c.request(
            "agent/prompt",
            json!({"text": "look", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
        let events = c.run_until_end(Duration::from_secs(20)).await;
        let end = events
            .iter()
            .find(|e| {
                e["event"]["type"] == "tool_execution_end" && e["event"]["toolName"] == "read"
            })
            .unwrap();
        let content = &end["event"]["result"]["content"];
        let want = if vision {
            "Read image file [image/png]"
        } else {
            "Read image file [image/png]\n[Current model does not support images. The image will be omitted from this request.]"
        };
        assert_eq!(
            content[0],
            json!({"type": "text", "text": want}),
            "vision {vision}"
        );
        assert_eq!(content[1]["type"], "image", "vision {vision}");
        assert_eq!(content[1]["mimeType"], "image/png", "vision {vision}");
        let second = mock.requests()[1].body.to_string();
        assert_eq!(
            second.contains("(tool image omitted: model does not support images)"),
            !vision,
            "{second}"
        );
        assert_eq!(
            second.contains("data:image/png;base64,"),
            vision,
            "{second}"
        );
        mock.assert_paired();
        c.shutdown().await;
    }
}

/// The session of a run's events: its `agent_end`'s (every `agent/event` names its session;
/// the first events read may be an earlier run's last ones, e.g. its `agent_settled`).
fn session_of(events: &[Value]) -> String {
    events.last().expect("a run's events")["sessionId"]
        .as_str()
        .expect("agent/event names its session")
        .to_string()
}

/// Two sessions whose models both number their first tool call `call_1`: each
/// `workspace/applyEdit` label names its own session, so an editor files each edit under the
/// session that made it (issue 30: a label with the call id alone could not tell them apart).
#[tokio::test]
async fn two_sessions_with_the_same_call_id_label_their_edits_with_their_own_session() {
    let tmp = TempDir::new("label-sessions");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let (a, b) = (ws.join("a.txt"), ws.join("b.txt"));
    std::fs::write(&a, "a = 1\n").unwrap();
    std::fs::write(&b, "b = 1\n").unwrap();
    let mock = MockModel::start(vec![
        Step::call(
            "call_1",
            "edit",
            json!({"path": "a.txt", "edits": [{"oldText": "a = 1", "newText": "a = 2"}]}),
        ),
        Step::text("Edited a."),
        Step::call(
            "call_1",
            "edit",
            json!({"path": "b.txt", "edits": [{"oldText": "b = 1", "newText": "b = 2"}]}),
        ),
        Step::text("Edited b."),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&a, "a = 1\n").await;
    c.open(&b, "b = 1\n").await;
    let mut sessions = Vec::new();
    for text in ["edit a", "edit b"] {
        let sid = c.request("agent/session/new", json!({})).await.unwrap()["sessionId"]
            .as_str()
            .unwrap()
            .to_string();
        c.request(
            "agent/prompt",
            json!({"sessionId": sid, "text": text, "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
        let events = c.run_until_end(Duration::from_secs(20)).await;
        assert_eq!(session_of(&events), sid);
        assert!(!tool_result_text(&events, "edit").1, "{events:#?}");
        sessions.push(sid);
    }
    assert_ne!(sessions[0], sessions[1]);
    let labels: Vec<Value> = c
        .apply_edit_params()
        .into_iter()
        .map(|p| p["label"].clone())
        .collect();
    assert_eq!(
        labels,
        vec![
            json!(format!(
                "pi: turn 1 · edit a.txt (call_1) · session {}",
                sessions[0]
            )),
            json!(format!(
                "pi: turn 1 · edit b.txt (call_1) · session {}",
                sessions[1]
            )),
        ]
    );
    assert_eq!(
        (c.doc(&a).unwrap().text, c.doc(&b).unwrap().text),
        ("a = 2\n".to_string(), "b = 2\n".to_string())
    );
    c.shutdown().await;
}

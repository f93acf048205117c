//! What the server knows of the editor's buffers, through the real `pi-lsp` binary over
//! stdio, the fake editor and the loopback mock model: files the client has not opened are
//! edited with `workspace/applyEdit` only for a client declaring
//! `experimental.agent.syncsAllDocuments`, on disk for any other; one file open under two
//! URIs (its real path and a symlinked folder) stays known when one is closed, and edits go
//! to the URI the editor holds; the bash sandbox lets commands write in every workspace
//! folder. Every test checks the bytes on disk and what the editor was sent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::time::Duration;

use pi_e2e::lsp_client::{
    file_uri, start_with_mock, tool_result_text, tool_results, unsaved_note, EditorBehavior,
    LspClient,
};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

async fn prompt(c: &mut LspClient, text: &str) -> Vec<Value> {
    c.request("agent/prompt", json!({"text": text}))
        .await
        .unwrap();
    c.run_until_end(Duration::from_secs(30)).await
}

/// The three edits of the sync tests: an open buffer, a file the client has not opened, a
/// new file.
fn sync_script() -> Vec<Step> {
    vec![
        Step::edit("e_open", "open.txt", "open 1", "open 2"),
        Step::edit("e_closed", "closed.txt", "closed 1", "closed 2"),
        Step::call(
            "w_new",
            "write",
            json!({"path": "new.txt", "content": "new 1\n"}),
        ),
        Step::text("done"),
    ]
}

fn sync_workspace(tmp: &TempDir) -> std::path::PathBuf {
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::fs::write(ws.join("open.txt"), "open 1\n").unwrap();
    std::fs::write(ws.join("closed.txt"), "closed 1\n").unwrap();
    ws
}

fn bytes(ws: &Path) -> Vec<Option<String>> {
    ["open.txt", "closed.txt", "new.txt"]
        .iter()
        .map(|f| std::fs::read_to_string(ws.join(f)).ok())
        .collect()
}

fn success(tool: &str, path: &str) -> (String, String, bool) {
    let text = match tool {
        "edit" => format!("Successfully replaced 1 block(s) in {path}."),
        _ => format!("Successfully wrote to {path}"),
    };
    (tool.to_string(), text, false)
}

/// A client that does not declare `syncsAllDocuments` (Neovim attaching buffers one by one)
/// is sent an edit only for the buffer it opened; the file it has not opened and the new
/// file are written on disk by the server, and the editor is never told to open them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_not_open_are_written_on_disk_for_a_client_that_does_not_sync_all() {
    let tmp = TempDir::new("sync-partial");
    let ws = sync_workspace(&tmp);
    let mock = MockModel::start(sync_script()).await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            syncs_all_documents: false,
            ..Default::default()
        },
    )
    .await;
    c.open(&ws.join("open.txt"), "open 1\n").await;
    let events = prompt(&mut c, "go").await;
    assert_eq!(
        tool_results(&events),
        vec![
            success("edit", "open.txt"),
            success("edit", "closed.txt"),
            success("write", "new.txt")
        ]
    );
    assert_eq!(
        c.applied_edits(),
        vec![json!({"documentChanges": [{
            "textDocument": {"uri": file_uri(&ws.join("open.txt")), "version": 1},
            "edits": [{"range": {"start": {"line": 0, "character": 0},
                "end": {"line": 0, "character": 6}}, "newText": "open 2"}]}]})]
    );
    assert_eq!(
        bytes(&ws),
        vec![
            Some("open 2\n".into()),
            Some("closed 2\n".into()),
            Some("new 1\n".into())
        ]
    );
    assert!(c.doc(&ws.join("closed.txt")).is_none());
    assert!(c.doc(&ws.join("new.txt")).is_none());
    c.shutdown().await;
    mock.assert_paired();
}

/// A client declaring `syncsAllDocuments` is sent every edit: an unversioned
/// `TextDocumentEdit` for the file it has not opened, `CreateFile` and its text for the new
/// one; the disk holds the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_not_open_get_apply_edit_for_a_client_that_syncs_all() {
    let tmp = TempDir::new("sync-all");
    let ws = sync_workspace(&tmp);
    let mock = MockModel::start(sync_script()).await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&ws.join("open.txt"), "open 1\n").await;
    let events = prompt(&mut c, "go").await;
    assert_eq!(
        tool_results(&events),
        vec![
            success("edit", "open.txt"),
            success("edit", "closed.txt"),
            success("write", "new.txt")
        ]
    );
    let range = |l0: u32, c0: u32, l1: u32, c1: u32| json!({"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}});
    assert_eq!(
        c.applied_edits(),
        vec![
            json!({"documentChanges": [{
                "textDocument": {"uri": file_uri(&ws.join("open.txt")), "version": 1},
                "edits": [{"range": range(0, 0, 0, 6), "newText": "open 2"}]}]}),
            json!({"documentChanges": [{
                "textDocument": {"uri": file_uri(&ws.join("closed.txt")), "version": null},
                "edits": [{"range": range(0, 0, 0, 8), "newText": "closed 2"}]}]}),
            json!({"documentChanges": [
                {"kind": "create", "uri": file_uri(&ws.join("new.txt")),
                    "options": {"overwrite": false, "ignoreIfExists": true}},
                {"textDocument": {"uri": file_uri(&ws.join("new.txt")), "version": null},
                    "edits": [{"range": range(0, 0, 0, 0), "newText": "new 1\n"}]}]}),
        ]
    );
    assert_eq!(
        bytes(&ws),
        vec![
            Some("open 2\n".into()),
            Some("closed 2\n".into()),
            Some("new 1\n".into())
        ]
    );
    assert_eq!(c.doc(&ws.join("closed.txt")).unwrap().text, "closed 2\n");
    c.shutdown().await;
    mock.assert_paired();
}

/// One file open under two URIs (its real path and a symlinked folder): the server keeps
/// both; the buffer is the one the user typed in last; closing the other URI forgets
/// nothing; the edit goes to the URI still open, at its version, and the disk gets the
/// buffer's text. Then the other way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg(unix)] // makes a symlink: Windows needs a privilege for it
async fn one_file_open_under_two_uris_stays_known_when_one_closes() {
    let tmp = TempDir::new("two-uris");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("real")).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::os::unix::fs::symlink(ws.join("real"), ws.join("link")).unwrap();
    let (real, link) = (ws.join("real/a.txt"), ws.join("link/a.txt"));
    std::fs::write(&real, "one\n").unwrap();
    let mock = MockModel::start(vec![
        Step::call("r1", "read", json!({"path": "real/a.txt"})),
        Step::edit("e1", "real/a.txt", "typed", "TYPED"),
        Step::text("first"),
        Step::call("r2", "read", json!({"path": "real/a.txt"})),
        Step::edit("e2", "real/a.txt", "TYPED", "again"),
        Step::text("second"),
    ])
    .await;
    // The edit touches the user's unsaved line: the user is asked and saves theirs too.
    let behavior = EditorBehavior {
        message_action: Some("Save mine too".into()),
        ..Default::default()
    };
    let mut c = start_with_mock(&ws, &mock, behavior).await;
    c.open(&real, "one\n").await;
    c.open(&link, "one\n").await;
    // The user types in the real path's buffer (unsaved), then closes the link's.
    c.set_buffer(&real, "one\ntyped\n").await;
    c.close(&link).await;
    let events = prompt(&mut c, "first").await;
    let r = tool_results(&events);
    assert_eq!(
        r[0],
        (
            "read".into(),
            format!("one\ntyped\n{}", unsaved_note("real/a.txt")),
            false
        )
    );
    assert_eq!(
        r[1],
        (
            "edit".into(),
            "Successfully replaced 1 block(s) in real/a.txt.".into(),
            false
        )
    );
    let edits = c.applied_edits();
    assert_eq!(edits.len(), 1);
    assert_eq!(
        edits[0]["documentChanges"][0]["textDocument"],
        json!({"uri": file_uri(&real), "version": 2})
    );
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "one\nTYPED\n");
    assert_eq!(c.doc(&real).unwrap().text, "one\nTYPED\n");

    // Now the link holds it and the real path's buffer closes.
    c.open(&link, "one\nTYPED\n").await;
    c.close(&real).await;
    let events = prompt(&mut c, "second").await;
    let r = tool_results(&events);
    assert_eq!(r[0], ("read".into(), "one\nTYPED\n".into(), false));
    assert!(!r[1].2, "{:?}", r[1]);
    let edits = c.applied_edits();
    assert_eq!(edits.len(), 2);
    assert_eq!(
        edits[1]["documentChanges"][0]["textDocument"],
        json!({"uri": file_uri(&link), "version": 1})
    );
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "one\nagain\n");
    assert_eq!(c.doc(&link).unwrap().text, "one\nagain\n");
    assert!(c.doc(&real).is_none());
    // The file stays a symlinked folder's file: the link is still a link.
    assert!(std::fs::symlink_metadata(ws.join("link"))
        .unwrap()
        .file_type()
        .is_symlink());
    c.shutdown().await;
    mock.assert_paired();
}

/// Whether the kernel enforces Landlock (the same probe the server uses).
fn sandbox_available() -> bool {
    match &pi_core::sandbox::support().files {
        Ok(_) => true,
        Err(why) => {
            eprintln!("no sandbox: {why}");
            false
        }
    }
}

/// ED-07 and the sandbox: a command may write in every workspace folder (the second one
/// given at `initialize`, and one added later with `didChangeWorkspaceFolders`), unasked;
/// writing outside them is still denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_lets_commands_write_in_every_workspace_folder() {
    if !pi_e2e::require(
        sandbox_available(),
        "sandbox_lets_commands_write_in_every_workspace_folder",
        "Landlock",
    ) {
        return;
    }
    let tmp = TempDir::new("sandbox-folders");
    let ws = tmp.path().join("ws");
    let (second, third, outside) = (
        tmp.path().join("second"),
        tmp.path().join("third"),
        tmp.path().join("outside"),
    );
    for d in [&ws, &second, &third, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    let cmd = |dir: &Path| format!("echo hi > {}/out.txt && echo wrote", dir.display());
    let mock = MockModel::start(vec![
        Step::call("b1", "bash", json!({"command": cmd(&second)})),
        Step::text("first"),
        Step::call("b2", "bash", json!({"command": cmd(&third)})),
        Step::text("second"),
        Step::call("b3", "bash", json!({"command": cmd(&outside)})),
        Step::text("third"),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            extra_folders: vec![second.clone()],
            permission_answer: Some(json!({"decision": "reject", "reason": "no"})),
            ..Default::default()
        },
    )
    .await;
    let events = prompt(&mut c, "first").await;
    assert_eq!(
        tool_result_text(&events, "bash"),
        ("wrote\n".to_string(), false)
    );
    assert_eq!(
        std::fs::read_to_string(second.join("out.txt")).unwrap(),
        "hi\n"
    );
    c.notify(
        "workspace/didChangeWorkspaceFolders",
        json!({"event": {"added": [{"uri": file_uri(&third), "name": "third"}], "removed": []}}),
    )
    .await;
    let events = prompt(&mut c, "second").await;
    assert_eq!(
        tool_result_text(&events, "bash"),
        ("wrote\n".to_string(), false)
    );
    assert_eq!(
        std::fs::read_to_string(third.join("out.txt")).unwrap(),
        "hi\n"
    );
    let asked = |c: &LspClient| {
        c.log()
            .into_iter()
            .filter(|m| m["method"] == "agent/requestPermission")
            .count()
    };
    assert_eq!(asked(&c), 0);
    // Outside every folder: denied, the user asked, the rejection kept it out.
    let events = prompt(&mut c, "third").await;
    let (text, is_error) = tool_result_text(&events, "bash");
    assert!(is_error, "{text}");
    assert!(text.contains("Permission denied"), "{text}");
    assert_eq!(asked(&c), 1);
    assert!(!outside.join("out.txt").exists());
    c.shutdown().await;
    mock.assert_paired();
}

/// The user types while the agent's edit is being applied: the editor answers
/// `applied: false` for the older version. When nobody was asked about the edit, it is
/// planned again against the buffer as it is now and applied there if its `oldText` still
/// matches, the user's typing kept and the model told (EDIT-08: edits match the live buffer);
/// when the typing removed the `oldText`, it is refused, nothing changed. Each case checks
/// the buffer, the disk, the `workspace/applyEdit`s sent and the tool result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_during_the_apply_replans_the_edit_once_or_refuses_it() {
    let tmp = TempDir::new("type-during-apply");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let file = ws.join("a.txt");
    let refused = "a.txt changed while the edit was being applied (the user typed in it, or a program changed it). Nothing was changed by this edit. Read a.txt again and redo the edit against its current text.".to_string();
    // (what the user types during the apply, whether the user is asked about the edit, the
    // tool result, the buffer versions the `workspace/applyEdit`s named, buffer, disk)
    let cases = [
        // Elsewhere in the buffer: the edit is made at the new version; the user's typing
        // stays theirs, unsaved in the buffer, and the agent's change reaches the disk.
        (
            ("a = 1", "a = 10"),
            false,
            (
                format!(
                    "Successfully replaced 1 block(s) in a.txt.\n\nNote: a.txt changed while the edit was being applied (the user typed in it, or a program changed it); your oldText still matched its new text, and the edit was made there.{}",
                    unsaved_note("a.txt")
                ),
                false,
            ),
            vec![json!(1), json!(2)],
            "a = 10\nb = 3\n",
            "a = 1\nb = 3\n",
        ),
        // The very text the edit replaces: refused, nothing changed.
        (
            ("b = 2", "b = 5"),
            false,
            (refused.clone(), true),
            vec![json!(1)],
            "a = 1\nb = 5\n",
            "a = 1\nb = 2\n",
        ),
        // The user approved the edit's diff: it is never applied in another form than the
        // one they saw, so it is refused even though its oldText still matches.
        (
            ("a = 1", "a = 10"),
            true,
            (refused, true),
            vec![json!(1)],
            "a = 10\nb = 2\n",
            "a = 1\nb = 2\n",
        ),
    ];
    for (typing, ask, result, versions, buffer, disk) in cases {
        std::fs::write(&file, "a = 1\nb = 2\n").unwrap();
        let mock = MockModel::start(vec![
            Step::edit("e1", "a.txt", "b = 2", "b = 3"),
            Step::text("done"),
        ])
        .await;
        let mut behavior = EditorBehavior {
            type_during_apply: Some(typing),
            ..Default::default()
        };
        if ask {
            behavior.approval_policy = Some("ask");
            behavior.permission_answer = Some(json!({"decision": "allow"}));
        }
        let mut c = start_with_mock(&ws, &mock, behavior).await;
        c.open(&file, "a = 1\nb = 2\n").await;
        let events = prompt(&mut c, "edit").await;
        assert_eq!(tool_result_text(&events, "edit"), result, "{typing:?}");
        let sent: Vec<Value> = c
            .applied_edits()
            .iter()
            .map(|e| e["documentChanges"][0]["textDocument"]["version"].clone())
            .collect();
        assert_eq!(sent, versions, "{typing:?}");
        assert_eq!(c.doc(&file).unwrap().text, buffer);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), disk);
        mock.assert_paired();
        c.shutdown().await;
    }
}

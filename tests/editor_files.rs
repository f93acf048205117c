//! Files and buffers as editors really hold them, through the real `pi-lsp` binary over stdio,
//! the fake editor and the loopback mock model: documents that are not the file (ED-02: VS
//! Code's `git:` diff view, fugitive), buffers under another name of the file (ED-01:
//! symlinked folders, a symlinked workspace root, links to files), line endings in buffers
//! (ED-03), files that are not UTF-8 (ED-04) and multi-root workspaces (ED-07). Every test
//! checks the bytes on disk and what the editor was sent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use pi_e2e::lsp_client::{
    file_uri, start_with_mock, tool_results, unsaved_note, EditorBehavior, LspClient,
};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

async fn prompt(c: &mut LspClient) -> Vec<Value> {
    c.request("agent/prompt", json!({"text": "go"}))
        .await
        .unwrap();
    c.run_until_end(Duration::from_secs(20)).await
}

fn read(id: &str, path: &str) -> Step {
    Step::call(id, "read", json!({"path": path}))
}

/// The bytes of the shared case fixture `name` (`fixtures/cases/NAME`).
fn case_bytes(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/cases")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of the shared case fixture `name` (UTF-8).
fn case_text(name: &str) -> String {
    String::from_utf8(case_bytes(name)).unwrap()
}

/// A case's workspace: `ws/` in a temp folder named `tag`, holding each `(file, fixture)` of
/// `files` as the fixture's bytes, copied as they are. The [`TempDir`] keeps the folder.
fn case_fixture(tag: &str, files: &[(&str, &str)]) -> (TempDir, PathBuf) {
    let tmp = TempDir::new(tag);
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    for (file, fixture) in files {
        std::fs::write(ws.join(file), case_bytes(fixture)).unwrap();
    }
    (tmp, ws)
}

/// ED-02 with the case's fixture: the working buffer, VS Code's `git:` HEAD copy and
/// fugitive's index copy of the same path are open; reads and edits see only the working
/// buffer, and closing the diff views leaves it known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed02_git_and_fugitive_documents_are_not_the_file() {
    let tmp = TempDir::new("ed02");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let file = ws.join("src/a.txt");
    std::fs::write(&file, "value = 2\n").unwrap();
    let fixture =
        case_text("ED-02-diff-view-docs.json").replace("/WORKSPACE", &ws.display().to_string());
    let docs: Vec<Value> = serde_json::from_str(&fixture).unwrap();
    let working = docs[0]["text"].as_str().unwrap().to_string();
    let mock = MockModel::start(vec![
        read("r1", "src/a.txt"),
        Step::edit("e1", "src/a.txt", "value = 2", "value = 3"),
        read("r2", "src/a.txt"),
        Step::text("done"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    // The working buffer as the editor holds it (version 5), then the two views.
    c.open(&file, &working).await;
    c.set_buffer(&file, &working).await;
    for d in &docs[1..] {
        c.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": d["uri"], "languageId": "plaintext",
                "version": d["version"], "text": d["text"]}}),
        )
        .await;
    }
    let events = prompt(&mut c).await;
    let r = tool_results(&events);
    assert_eq!(
        r[0].1,
        format!("{working}{}", unsaved_note("src/a.txt")),
        "read sees the working buffer, and is told the disk differs"
    );
    assert_eq!(
        r[1],
        (
            "edit".into(),
            format!(
                "Successfully replaced 1 block(s) in src/a.txt.{}",
                unsaved_note("src/a.txt")
            ),
            false
        )
    );
    let edits = c.applied_edits();
    assert_eq!(edits.len(), 1);
    assert_eq!(
        edits[0]["documentChanges"][0]["textDocument"],
        json!({"uri": file_uri(&file), "version": 2})
    );
    let edited = "# header added in the working tree\nvalue = 3\n";
    assert_eq!(r[2].1, format!("{edited}{}", unsaved_note("src/a.txt")));
    // The user's unsaved header stays theirs (saveUserChanges "ask", not answered): the disk
    // has only the agent's change.
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "value = 3\n");
    assert_eq!(c.doc(&file).unwrap().text, edited);

    // Closing the diff views forgets only them: the working buffer (unsaved typing) is still
    // what tools read.
    for d in &docs[1..] {
        c.notify(
            "textDocument/didClose",
            json!({"textDocument": {"uri": d["uri"]}}),
        )
        .await;
    }
    c.set_buffer(&file, "typed after closing the diff\n").await;
    c.shutdown().await;
    let mock = MockModel::start(vec![read("r3", "src/a.txt"), Step::text("ok")]).await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&file, "working\n").await;
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": docs[1]["uri"], "languageId": "plaintext", "version": 1, "text": "HEAD\n"}}),
    )
    .await;
    c.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": docs[1]["uri"]}}),
    )
    .await;
    // An untitled buffer and a settings document never become files either.
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": "untitled:Untitled-1", "languageId": "plaintext", "version": 1, "text": "scratch\n"}}),
    )
    .await;
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": format!("vscode-userdata:{}", file.display()), "languageId": "plaintext", "version": 1, "text": "{}\n"}}),
    )
    .await;
    let events = prompt(&mut c).await;
    assert_eq!(
        tool_results(&events)[0].1,
        format!("working\n{}", unsaved_note("src/a.txt"))
    );
    c.shutdown().await;
}

/// ED-01: a buffer opened through a symlinked folder is the buffer of the file under its real
/// name; the edit goes to the URI the editor opened; an edit through a link to a file writes
/// the target and keeps the link; a link leading outside the workspace is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg(unix)] // makes a symlink: Windows needs a privilege for it
async fn ed01_buffers_are_matched_by_real_location_and_links_are_kept() {
    let tmp = TempDir::new("ed01");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("real")).unwrap();
    std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
    std::fs::write(ws.join("real/t.txt"), "disk = 1\n").unwrap();
    std::fs::write(ws.join("real/u.txt"), "u = 1\n").unwrap();
    std::os::unix::fs::symlink("real", ws.join("linked")).unwrap();
    std::os::unix::fs::symlink("real/u.txt", ws.join("u-link.txt")).unwrap();
    std::fs::write(tmp.path().join("outside/s.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(tmp.path().join("outside/s.txt"), ws.join("out.txt")).unwrap();
    let mock = MockModel::start(vec![
        read("r1", "real/t.txt"),
        Step::edit("e1", "real/t.txt", "buffer = 1", "buffer = 2"),
        Step::edit("e2", "u-link.txt", "u = 1", "u = 2"),
        Step::call(
            "w1",
            "write",
            json!({"path": "out.txt", "content": "gone\n"}),
        ),
        Step::text("done"),
    ])
    .await;
    // The agent's change touches the user's unsaved line: the user is asked and saves theirs.
    let behavior = EditorBehavior {
        message_action: Some("Save mine too".into()),
        ..Default::default()
    };
    let mut c = start_with_mock(&ws, &mock, behavior).await;
    // The editor opened the file through the symlinked folder, with unsaved text.
    let opened = ws.join("linked/t.txt");
    c.open(&opened, "buffer = 1\n").await;
    let events = prompt(&mut c).await;
    let r = tool_results(&events);
    assert_eq!(
        r[0].1,
        format!("buffer = 1\n{}", unsaved_note("real/t.txt"))
    );
    assert_eq!(
        r[1],
        (
            "edit".into(),
            "Successfully replaced 1 block(s) in real/t.txt.".into(),
            false
        )
    );
    let edits = c.applied_edits();
    assert_eq!(
        edits[0]["documentChanges"][0]["textDocument"],
        json!({"uri": file_uri(&opened), "version": 1})
    );
    assert_eq!(c.doc(&opened).unwrap().text, "buffer = 2\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("real/t.txt")).unwrap(),
        "buffer = 2\n"
    );
    // Through a link to a file (not open): the target is written, the link stays a link.
    assert!(!r[2].2, "{:?}", r[2]);
    assert!(std::fs::symlink_metadata(ws.join("u-link.txt"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read_to_string(ws.join("real/u.txt")).unwrap(),
        "u = 2\n"
    );
    // Outside the workspace through a link: refused, nothing written.
    assert!(r[3].2 && r[3].1.starts_with("Path out.txt is outside the workspace"));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("outside/s.txt")).unwrap(),
        "secret\n"
    );
    c.shutdown().await;
}

/// ED-01 with a symlinked workspace root (`/var` → `/private/var` on macOS): the editor names
/// files under the link, the server resolves the root; buffers still match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg(unix)] // makes a symlink: Windows needs a privilege for it
async fn ed01_a_symlinked_workspace_root_still_finds_the_buffers() {
    let tmp = TempDir::new("ed01root");
    let real = tmp.path().join("private-ws");
    std::fs::create_dir_all(&real).unwrap();
    let ws = tmp.path().join("ws");
    std::os::unix::fs::symlink(&real, &ws).unwrap();
    std::fs::write(real.join("a.txt"), "disk\n").unwrap();
    let mock = MockModel::start(vec![
        read("r1", "a.txt"),
        Step::edit("e1", "a.txt", "buffer", "edited"),
        Step::text("done"),
    ])
    .await;
    let behavior = EditorBehavior {
        message_action: Some("Save mine too".into()),
        ..Default::default()
    };
    let mut c = start_with_mock(&ws, &mock, behavior).await;
    c.open(&ws.join("a.txt"), "buffer\n").await;
    let events = prompt(&mut c).await;
    let r = tool_results(&events);
    assert_eq!(r[0].1, format!("buffer\n{}", unsaved_note("a.txt")));
    assert!(!r[1].2, "{:?}", r[1]);
    assert_eq!(
        c.applied_edits()[0]["documentChanges"][0]["textDocument"]["uri"],
        json!(file_uri(&ws.join("a.txt")))
    );
    assert_eq!(c.doc(&ws.join("a.txt")).unwrap().text, "edited\n");
    assert_eq!(
        std::fs::read_to_string(real.join("a.txt")).unwrap(),
        "edited\n"
    );
    c.shutdown().await;
}

/// ED-03 with the case's fixtures, in UTF-16 and UTF-8 positions: a buffer with a lone CR
/// (a progress line) and one with mixed endings; ranges are right (LSP counts a lone `\r` as
/// a line end) and every ending is kept, in the buffer and on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed03_lone_cr_and_mixed_endings_in_buffers_in_both_encodings() {
    for utf8 in [false, true] {
        let (_tmp, ws) = case_fixture(
            "ed03",
            &[
                ("cr.txt", "ED-03-lone-cr.txt"),
                ("mixed.txt", "ED-03-mixed-endings.txt"),
            ],
        );
        let cr = ws.join("cr.txt");
        let mixed = ws.join("mixed.txt");
        let mock = MockModel::start(vec![
            Step::edit("e1", "cr.txt", "progress 100%", "progress 100% 🦊"),
            Step::edit("e2", "cr.txt", "done", "finished"),
            Step::edit("e3", "mixed.txt", "b\nc", "B\nC"),
            Step::text("done"),
        ])
        .await;
        let mut c = start_with_mock(
            &ws,
            &mock,
            EditorBehavior {
                offer_utf8: utf8,
                incremental_changes: true,
                ..Default::default()
            },
        )
        .await;
        c.open(&cr, &case_text("ED-03-lone-cr.txt")).await;
        c.open(&mixed, &case_text("ED-03-mixed-endings.txt")).await;
        let events = prompt(&mut c).await;
        assert!(
            tool_results(&events).iter().all(|r| !r.2),
            "{:?}",
            tool_results(&events)
        );
        let edits = c.applied_edits();
        // `progress 100%` is on line 1 (after the lone CR), `done` on line 2.
        assert_eq!(
            edits[0]["documentChanges"][0]["edits"][0]["range"],
            json!({"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 13}})
        );
        assert_eq!(
            edits[1]["documentChanges"][0]["edits"][0]["range"],
            json!({"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 4}})
        );
        let want_cr = "progress 10%\rprogress 100% 🦊\nfinished\n";
        assert_eq!(c.doc(&cr).unwrap().text, want_cr, "utf8 {utf8}");
        assert_eq!(
            std::fs::read(&cr).unwrap(),
            want_cr.as_bytes(),
            "utf8 {utf8}"
        );
        assert_eq!(std::fs::read(&mixed).unwrap(), b"a\r\nB\nC", "utf8 {utf8}");
        assert_eq!(c.doc(&mixed).unwrap().text, "a\r\nB\nC");
        c.shutdown().await;
    }
}

/// ED-04 over LSP with the case's fixtures: a Latin-1 file the editor has not opened is edited
/// on disk in Latin-1 (no applyEdit an editor could decode otherwise); a Shift-JIS file the
/// editor holds open is edited through the buffer and written back in Shift-JIS; an edit the
/// encoding cannot hold is refused before the editor is asked; read says the encoding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed04_files_keep_their_encoding_over_lsp() {
    let (_tmp, ws) = case_fixture(
        "ed04",
        &[("l.py", "ED-04-latin1.py"), ("j.py", "ED-04-shift-jis.py")],
    );
    let latin = ws.join("l.py");
    let sjis = ws.join("j.py");
    let mock = MockModel::start(vec![
        read("r1", "l.py"),
        Step::edit("e1", "l.py", "name = 'x'", "name = 'é'"),
        Step::edit("e2", "j.py", "x = 1", "x = 2 # 日本"),
        Step::edit("e3", "j.py", "x = 2", "x = '🦊'"),
        Step::call(
            "w1",
            "write",
            json!({"path": "l.py", "content": "ü = 'ok'\n"}),
        ),
        Step::text("done"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    // The editor decoded the Shift-JIS file itself (as VS Code does with its encoding set).
    c.open(&sjis, "# これは日本語\nx = 1\n").await;
    let events = prompt(&mut c).await;
    let r = tool_results(&events);
    assert_eq!(
        r[0].1,
        "café = 1\nname = 'x'\n\n\n[File encoding: windows-1252 (detected); the text is shown decoded, and edit and write keep the file in windows-1252.]"
    );
    assert!(!r[1].2, "{:?}", r[1]);
    assert!(!r[2].2, "{:?}", r[2]);
    assert_eq!(
        r[3],
        (
            "edit".into(),
            format!(
                "{} is encoded in Shift_JIS, which cannot represent '🦊' (U+1F98A); nothing was changed. Use only characters Shift_JIS can encode.",
                sjis.display()
            ),
            true
        )
    );
    assert!(!r[4].2, "{:?}", r[4]);
    assert_eq!(std::fs::read(&latin).unwrap(), b"\xfc = 'ok'\n");
    let (want, _, _) = encoding_rs::SHIFT_JIS.encode("# これは日本語\nx = 2 # 日本\n");
    assert_eq!(std::fs::read(&sjis).unwrap(), want.as_ref());
    assert_eq!(c.doc(&sjis).unwrap().text, "# これは日本語\nx = 2 # 日本\n");
    // Only the open Shift-JIS buffer got an applyEdit; the refused edit sent none.
    let edits = c.applied_edits();
    assert_eq!(edits.len(), 1);
    assert_eq!(
        edits[0]["documentChanges"][0]["textDocument"]["uri"],
        json!(file_uri(&sjis))
    );
    c.shutdown().await;
}

/// EDIT-02 over LSP with the case's fixture: a file with a UTF-8 BOM that the editor holds open
/// (its text without the BOM, as editors show it) keeps exactly one BOM and its CRLF when the
/// server writes the buffer (a client without `agent/saveDocument`); one the editor has not
/// opened keeps one BOM even when the model copies the U+FEFF `read` showed into `oldText` and
/// `newText`; a file without a BOM gains none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit02_a_bom_stays_once_over_lsp_open_or_not() {
    let bom_csv = "EDIT-02-bom-crlf.csv";
    let (_tmp, ws) = case_fixture("edit02", &[("open.csv", bom_csv), ("closed.csv", bom_csv)]);
    let (open, closed, plain) = (
        ws.join("open.csv"),
        ws.join("closed.csv"),
        ws.join("plain.csv"),
    );
    // The same file without its BOM.
    std::fs::write(&plain, &case_bytes(bom_csv)[3..]).unwrap();
    let mock = MockModel::start(vec![
        Step::edit("e1", "open.csv", "name,age", "name,years"),
        Step::edit("e2", "closed.csv", "\u{FEFF}name,age", "\u{FEFF}name,years"),
        Step::edit("e3", "plain.csv", "name,age", "name,years"),
        Step::text("done"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&open, "name,age\r\nbob,3\r\n").await;
    c.open(&plain, "name,age\r\nbob,3\r\n").await;
    let events = prompt(&mut c).await;
    let failed: Vec<_> = tool_results(&events).into_iter().filter(|r| r.2).collect();
    assert_eq!(failed, vec![]);
    let want = b"\xEF\xBB\xBFname,years\r\nbob,3\r\n".to_vec();
    assert_eq!(
        [
            std::fs::read(&open).unwrap(),
            std::fs::read(&closed).unwrap(),
            std::fs::read(&plain).unwrap()
        ],
        [want.clone(), want.clone(), want[3..].to_vec()]
    );
    assert_eq!(c.doc(&open).unwrap().text, "name,years\r\nbob,3\r\n");
    c.shutdown().await;
}

/// ED-07: every `workspaceFolders` entry is usable by the tools, and
/// `workspace/didChangeWorkspaceFolders` adds and removes folders; sessions stay in the first
/// folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed07_tools_reach_every_workspace_folder() {
    let tmp = TempDir::new("ed07");
    let ws = tmp.path().join("ws");
    let second = tmp.path().join("second");
    let third = tmp.path().join("third");
    for d in [&ws, &second, &third] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(second.join("b.txt"), "b = 1\n").unwrap();
    std::fs::write(third.join("c.txt"), "c = 1\n").unwrap();
    let b = second.join("b.txt").display().to_string();
    let cpath = third.join("c.txt").display().to_string();
    let mock = MockModel::start(vec![
        read("r1", &b),
        Step::edit("e1", &b, "b = 1", "b = 2"),
        read("r2", &cpath),
        Step::text("first"),
        read("r3", &cpath),
        read("r4", &b),
        Step::text("second"),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            extra_folders: vec![second.clone()],
            ..Default::default()
        },
    )
    .await;
    let init_caps = c
        .log()
        .into_iter()
        .find(|m| m["result"]["capabilities"].is_object())
        .unwrap();
    assert_eq!(
        init_caps["result"]["capabilities"]["workspace"]["workspaceFolders"],
        json!({"supported": true, "changeNotifications": true})
    );
    let events = prompt(&mut c).await;
    let r = tool_results(&events);
    assert_eq!(r[0].1, "b = 1\n");
    assert!(!r[1].2, "{:?}", r[1]);
    assert_eq!(
        std::fs::read_to_string(second.join("b.txt")).unwrap(),
        "b = 2\n"
    );
    // The refusal names every folder of the workspace, not only the first.
    let refusal = |path: &str, folders: &[&std::path::Path]| {
        format!(
            "Path {path} is outside the workspace folders {} and {}; only files inside them (or in a folder listed in allowedDirs of .pi/settings.json) can be used.",
            folders[0].display(),
            folders[1].display()
        )
    };
    assert_eq!(
        (r[2].2, r[2].1.as_str()),
        (true, refusal(&cpath, &[&ws, &second]).as_str())
    );
    // The third folder is added, the second removed.
    c.notify(
        "workspace/didChangeWorkspaceFolders",
        json!({"event": {"added": [{"uri": file_uri(&third), "name": "third"}],
            "removed": [{"uri": file_uri(&second), "name": "second"}]}}),
    )
    .await;
    let started = c
        .request("agent/prompt", json!({"text": "again"}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    let r = tool_results(&events);
    assert_eq!(r[0].1, "c = 1\n");
    assert_eq!(
        (r[1].2, r[1].1.as_str()),
        (true, refusal(&b, &[&ws, &third]).as_str())
    );
    // The session lives in the first folder.
    let state = c
        .request("agent/state", json!({"sessionId": started["sessionId"]}))
        .await
        .unwrap();
    let file = state["sessionFile"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(file.starts_with(&ws.display().to_string()), "{file}");
    c.shutdown().await;
}

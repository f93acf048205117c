//! The `edit`, `write` and `read` tools on real temp folders: cases EDIT-01..08 with the
//! byte-exact inputs in `fixtures/cases/`, whole-value assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use pi_core::agent::{Tool, ToolContext, ToolError, ToolOutput};
use pi_core::fs::DiskFs;
use pi_core::tools::{tools_with_state, ToolState};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

mod common;
use common::{tmp_dir, Tmp};

fn temp_dir() -> Tmp {
    tmp_dir("pi-tools-edit-")
}

fn case(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/cases")
            .join(name),
    )
    .unwrap()
}

struct Ws {
    dir: Tmp,
    tools: Vec<Arc<dyn Tool>>,
}

impl Ws {
    fn new() -> Self {
        let dir = temp_dir();
        let tools = tools_with_state(
            Arc::new(DiskFs::new(dir.to_path_buf())),
            None,
            Arc::new(ToolState::default()),
        );
        Ws { dir, tools }
    }

    fn put(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.dir.join(name), bytes).unwrap();
    }

    fn get(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name)).unwrap()
    }

    async fn call(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        let t = self.tools.iter().find(|t| t.spec().name == tool).unwrap();
        let ctx = ToolContext {
            call_id: "call_1".into(),
            turn: 1,
            cancel: CancellationToken::new(),
            on_update: Arc::new(|_| {}),
            model_input: None,
        };
        t.execute(ctx, args).await
    }

    async fn edit(&self, path: &str, old: &str, new: &str) -> Result<ToolOutput, ToolError> {
        self.call(
            "edit",
            json!({"path": path, "edits": [{"oldText": old, "newText": new}]}),
        )
        .await
    }
}

fn text_of(out: &ToolOutput) -> String {
    match &out.content[0] {
        pi_ai::ContentBlock::Text(t) => t.text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

#[tokio::test]
async fn edit01_crlf_kept_and_new_lines_use_crlf() {
    let ws = Ws::new();
    ws.put("f", &case("EDIT-01-crlf.txt"));
    let out = ws.edit("f", "alpha\nbeta", "ALPHA\nBETA").await.unwrap();
    assert_eq!(text_of(&out), "Successfully replaced 1 block(s) in f.");
    assert_eq!(ws.get("f"), b"ALPHA\r\nBETA\r\ngamma");
    // A CRLF oldText works the same; an added line gets the file's CRLF; no final newline added.
    ws.put("g", &case("EDIT-01-crlf.txt"));
    ws.edit("g", "beta\r\ngamma", "beta\ngamma\ndelta")
        .await
        .unwrap();
    assert_eq!(ws.get("g"), b"alpha\r\nbeta\r\ngamma\r\ndelta");
}

#[tokio::test]
async fn edit01_mixed_endings_untouched_lines_kept() {
    let ws = Ws::new();
    ws.put("m", b"a\r\nb\nc\r\n");
    ws.edit("m", "b", "B").await.unwrap();
    assert_eq!(ws.get("m"), b"a\r\nB\nc\r\n");
}

#[tokio::test]
async fn edit02_bom_kept_once_and_never_gained() {
    let ws = Ws::new();
    ws.put("a.csv", &case("EDIT-02-bom-crlf.csv"));
    ws.edit("a.csv", "name,age", "name,years").await.unwrap();
    assert_eq!(ws.get("a.csv"), b"\xEF\xBB\xBFname,years\r\nbob,3\r\n");
    ws.put("b.csv", b"name,age\r\nbob,3\r\n");
    ws.edit("b.csv", "name,age", "name,years").await.unwrap();
    assert_eq!(ws.get("b.csv"), b"name,years\r\nbob,3\r\n");
}

#[tokio::test]
async fn edit03_overlapping_repeats_refused_file_unchanged() {
    let ws = Ws::new();
    ws.put("f", &case("EDIT-03-overlap.txt"));
    let before = std::fs::metadata(ws.dir.join("f"))
        .unwrap()
        .modified()
        .unwrap();
    let err = ws.edit("f", "foo\nfoo\n", "replacement").await.unwrap_err();
    assert_eq!(
        err.message,
        "Found 2 occurrences of the text in f (starting at lines 1, 2). The text must be unique. Please provide more context to make it unique."
    );
    assert_eq!(ws.get("f"), case("EDIT-03-overlap.txt"));
    let after = std::fs::metadata(ws.dir.join("f"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after);
}

#[tokio::test]
async fn edit03_overlapping_edits_refused() {
    let ws = Ws::new();
    ws.put("f", b"abcdef\n");
    let err = ws
        .call("edit", json!({"path":"f","edits":[{"oldText":"abc","newText":"x"},{"oldText":"cde","newText":"y"}]}))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "edits[0] and edits[1] overlap in f. Merge them into one edit or target disjoint regions."
    );
    assert_eq!(ws.get("f"), b"abcdef\n");
}

#[tokio::test]
async fn edit04_spaces_for_tab_fall_back_and_keep_tabs() {
    let ws = Ws::new();
    ws.put("f.go", &case("EDIT-04-tabs.go"));
    ws.edit("f.go", "    return 1", "    return 2")
        .await
        .unwrap();
    assert_eq!(
        ws.get("f.go"),
        b"func f() {\n\treturn 2\n}\n\n\nfunc g() {}\n"
    );
}

#[tokio::test]
async fn edit04_multi_line_reindent() {
    let ws = Ws::new();
    ws.put("f.go", b"func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n");
    ws.edit(
        "f.go",
        "    if x {\n        return 1\n    }",
        "    if x {\n        y()\n        return 2\n    }",
    )
    .await
    .unwrap();
    assert_eq!(
        ws.get("f.go"),
        b"func f() {\n\tif x {\n\t\ty()\n\t\treturn 2\n\t}\n}\n"
    );
}

#[tokio::test]
async fn edit04_blank_line_count_differs_shows_closest_region() {
    let ws = Ws::new();
    ws.put("f.go", &case("EDIT-04-tabs.go"));
    let err = ws
        .edit("f.go", "}\n\nfunc g", "}\nfunc g")
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "Could not find the exact text in f.go. The old text must match exactly including all whitespace and newlines.\n\n\
Closest text in the file, lines 3-5 (→ is a tab, · a space):\n    3  }\n    4  \n    5  \nYour oldText:\n       }\n       \n       func·g"
    );
    assert_eq!(ws.get("f.go"), case("EDIT-04-tabs.go"));
}

#[tokio::test]
async fn edit04_partial_line_when_unique() {
    let ws = Ws::new();
    ws.put("f.go", &case("EDIT-04-tabs.go"));
    ws.edit("f.go", "return", "yield").await.unwrap();
    assert_eq!(
        ws.get("f.go"),
        b"func f() {\n\tyield 1\n}\n\n\nfunc g() {}\n"
    );
}

#[tokio::test]
async fn edit04_not_found_shows_tabs_visibly() {
    let ws = Ws::new();
    ws.put("f.go", &case("EDIT-04-tabs.go"));
    let err = ws
        .edit("f.go", "\treturn 7", "\treturn 2")
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "Could not find the exact text in f.go. The old text must match exactly including all whitespace and newlines.\n\n\
Closest text in the file, lines 2-2 (→ is a tab, · a space):\n    2  →return·1\nYour oldText:\n       →return·7"
    );
}

#[tokio::test]
async fn fuzzy_match_replaces_only_the_matched_range() {
    let ws = Ws::new();
    // Smart quotes and an en dash in the file, trailing spaces on another line.
    ws.put(
        "q.txt",
        "keep   \nsay \u{201C}hi\u{201D} \u{2013} now\nend  \n".as_bytes(),
    );
    ws.edit("q.txt", "say \"hi\" - now", "say \"bye\"")
        .await
        .unwrap();
    assert_eq!(ws.get("q.txt"), b"keep   \nsay \"bye\"\nend  \n");
}

#[tokio::test]
async fn edit06_failed_edit_leaves_bytes_and_mtime() {
    let ws = Ws::new();
    ws.put("f", b"x = 1\n");
    let before = std::fs::metadata(ws.dir.join("f"))
        .unwrap()
        .modified()
        .unwrap();
    let err = ws.edit("f", "nothing like it", "y").await.unwrap_err();
    assert_eq!(
        err.message,
        "Could not find the exact text in f. The old text must match exactly including all whitespace and newlines."
    );
    assert_eq!(ws.get("f"), b"x = 1\n");
    assert_eq!(
        before,
        std::fs::metadata(ws.dir.join("f"))
            .unwrap()
            .modified()
            .unwrap()
    );
    let names: Vec<String> = std::fs::read_dir(&ws.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["f".to_string()]);
}

#[tokio::test]
async fn edit06_placeholder_write_warns_and_keeps_a_copy() {
    let ws = Ws::new();
    let big: String = (1..=2000).map(|i| format!("line {i}\n")).collect();
    ws.put("big.rs", big.as_bytes());
    let content: String = (0..20)
        .map(|i| {
            if i == 10 {
                "// ... existing code ...\n".to_string()
            } else {
                format!("new {i}\n")
            }
        })
        .collect();
    let out = ws
        .call("write", json!({"path":"big.rs","content": content}))
        .await
        .unwrap();
    let text = text_of(&out);
    let copy = text
        .split("The previous text was saved to ")
        .nth(1)
        .and_then(|r| r.split(". Write the complete file").next())
        .unwrap()
        .to_string();
    assert_eq!(
        text,
        format!("Successfully wrote to big.rs\n\n[Warning: the new content is {} bytes, the old file was {} bytes, and it contains a placeholder like \"... existing code ...\": the omitted code is now gone from big.rs. The previous text was saved to {copy}. Write the complete file, or use edit for partial changes.]", content.len(), big.len())
    );
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), big);
    assert_eq!(ws.get("big.rs"), content.as_bytes());
    std::fs::remove_file(copy).unwrap();
}

#[tokio::test]
async fn edit08_changed_since_read_is_refused() {
    let ws = Ws::new();
    ws.put("f", b"x = 1\ny = 2\n");
    ws.call("read", json!({"path":"f"})).await.unwrap();
    // Someone else changes the file after the model read it.
    ws.put("f", b"x = 1\ny = 3\n");
    let err = ws.edit("f", "y = 2", "y = 5").await.unwrap_err();
    assert_eq!(
        err.message,
        "f changed since you read it: it was changed on disk (the user, a command or another program changed the file). Nothing was changed by this edit. Read f again and redo the edit against its current text.\n\n\
Lines changed since your read (-N: line N of the text you read, +N: line N of the current text):\n-2 y = 2\n+2 y = 3\n\n\
Closest text in the file, lines 2-2 (→ is a tab, · a space):\n    2  y·=·3\nYour oldText:\n       y·=·2"
    );
    assert_eq!(ws.get("f"), b"x = 1\ny = 3\n");
    // After reading again the edit goes through; its own result counts as read.
    ws.call("read", json!({"path":"f"})).await.unwrap();
    ws.edit("f", "y = 3", "y = 5").await.unwrap();
    ws.edit("f", "x = 1", "x = 0").await.unwrap();
    assert_eq!(ws.get("f"), b"x = 0\ny = 5\n");
}

/// EDIT-08's other half: a change elsewhere in the file since the read (the user typing on
/// another line, an undo of the model's own earlier edit) does not block an edit whose
/// oldText still matches the current text; it is made there, the user's change is kept, and
/// the result tells the model the file had changed, with the lines.
#[tokio::test]
async fn edit08_a_change_elsewhere_since_the_read_keeps_the_edit_and_says_so() {
    let ws = Ws::new();
    ws.put("f", b"x = 1\ny = 2\nz = 3\n");
    ws.call("read", json!({"path":"f"})).await.unwrap();
    ws.put("f", b"x = 1 # mine\ny = 2\nz = 3\n");
    let out = ws.edit("f", "z = 3", "z = 4").await.unwrap();
    assert_eq!(
        text_of(&out),
        "Successfully replaced 1 block(s) in f.\n\n\
Note: f had changed since you read it (it was changed on disk (the user, a command or another program changed the file)); your oldText still matched its current text, and the edit was made there.\n\n\
Lines changed since your read (-N: line N of the text you read, +N: line N of the current text):\n-1 x = 1\n+1 x = 1 # mine"
    );
    assert_eq!(ws.get("f"), b"x = 1 # mine\ny = 2\nz = 4\n");
    // The model's own edit is what it knows now: the next edit carries no note.
    let out = ws.edit("f", "y = 2", "y = 5").await.unwrap();
    assert_eq!(text_of(&out), "Successfully replaced 1 block(s) in f.");
    // Changed after the model's own edit (no text kept of it): the note without the lines.
    ws.put("f", b"x = 1\ny = 5\nz = 4\n");
    let out = ws.edit("f", "z = 4", "z = 6").await.unwrap();
    assert_eq!(
        text_of(&out),
        "Successfully replaced 1 block(s) in f.\n\n\
Note: f had changed since you read it (it was changed on disk (the user, a command or another program changed the file)); your oldText still matched its current text, and the edit was made there."
    );
    assert_eq!(ws.get("f"), b"x = 1\ny = 5\nz = 6\n");
}

#[tokio::test]
async fn edit_details_carry_pis_diff_and_a_unified_diff() {
    let ws = Ws::new();
    ws.put("d.txt", b"a\nb\nc\n");
    let out = ws.edit("d.txt", "b", "B").await.unwrap();
    // `diff` and `patch` as Pi 1.6 writes them (its interface draws `diff`); `unifiedDiff` for
    // editors;
    // `fileChange` for rewinds: the hashes and the exact replaced range.
    assert_eq!(
        out.details,
        Some(json!({"diff": " 1 a\n-2 b\n+2 B\n 3 c",
                "patch": "--- d.txt\n+++ d.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
                "firstChangedLine": 2,
                "unifiedDiff": "--- d.txt\n+++ d.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
                "fileChange": {"path": ws.dir.join("d.txt").display().to_string(),
                    "hashBefore": xxh3("a\nb\nc\n"), "hashAfter": xxh3("a\nB\nc\n"),
                    "edits": [{"at": 2, "oldText": "b", "newText": "B"}]}}))
    );
}

fn xxh3(text: &str) -> String {
    format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// A write's details: its unified diff and its change record (only the changed region; no
/// edits for a new file, whose text is the call's content).
#[tokio::test]
async fn write_details_carry_a_unified_diff_and_the_change() {
    let ws = Ws::new();
    let out = ws
        .call("write", json!({"path": "n.txt", "content": "one\ntwo\n"}))
        .await
        .unwrap();
    assert_eq!(
        out.details,
        Some(
            json!({"unifiedDiff": "--- n.txt\n+++ n.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n",
            "fileChange": {"path": ws.dir.join("n.txt").display().to_string(),
                "hashBefore": null, "hashAfter": xxh3("one\ntwo\n"), "edits": []}})
        )
    );
    let out = ws
        .call("write", json!({"path": "n.txt", "content": "one\nTWO\n"}))
        .await
        .unwrap();
    assert_eq!(
        out.details,
        Some(
            json!({"unifiedDiff": "--- n.txt\n+++ n.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n",
            "fileChange": {"path": ws.dir.join("n.txt").display().to_string(),
                "hashBefore": xxh3("one\ntwo\n"), "hashAfter": xxh3("one\nTWO\n"),
                "edits": [{"at": 4, "oldText": "two", "newText": "TWO"}]}})
        )
    );
    assert_eq!(ws.get("n.txt"), b"one\nTWO\n");
}

#[tokio::test]
async fn edit_single_form_and_empty_old_text() {
    let ws = Ws::new();
    ws.put("s", b"one\n");
    ws.call("edit", json!({"path":"s","oldText":"one","newText":"two"}))
        .await
        .unwrap();
    assert_eq!(ws.get("s"), b"two\n");
    let err = ws.edit("s", "", "x").await.unwrap_err();
    assert_eq!(err.message, "oldText must not be empty in s.");
}

#[tokio::test]
#[cfg(unix)] // makes a symlink: Windows needs a privilege for it
async fn paths_outside_refused_unless_allowed() {
    let ws = Ws::new();
    let outside = temp_dir();
    std::fs::write(outside.join("o.txt"), "out\n").unwrap();
    let p = outside.join("o.txt").display().to_string();
    let err = ws.call("read", json!({"path": p})).await.unwrap_err();
    assert_eq!(
        err.message,
        format!("Path {p} is outside the workspace {}; only files inside it (or in a folder listed in allowedDirs of .pi/settings.json) can be used.", ws.dir.display())
    );
    std::os::unix::fs::symlink(&outside, ws.dir.join("link")).unwrap();
    assert!(ws
        .call("read", json!({"path": "link/o.txt"}))
        .await
        .is_err());
    // Allowed through settings.
    std::fs::create_dir_all(ws.dir.join(".pi")).unwrap();
    std::fs::write(
        ws.dir.join(".pi/settings.json"),
        json!({"allowedDirs": [outside.display().to_string()]}).to_string(),
    )
    .unwrap();
    let state = Arc::new(ToolState::for_workspace(&ws.dir));
    let tools = tools_with_state(Arc::new(DiskFs::new(ws.dir.to_path_buf())), None, state);
    let read = tools.iter().find(|t| t.spec().name == "read").unwrap();
    let ctx = ToolContext {
        call_id: "c".into(),
        turn: 1,
        cancel: CancellationToken::new(),
        on_update: Arc::new(|_| {}),
        model_input: None,
    };
    let out = read.execute(ctx.clone(), json!({"path": p})).await.unwrap();
    assert_eq!(text_of(&out), "out\n");
    let out = read
        .execute(ctx, json!({"path": "link/o.txt"}))
        .await
        .unwrap();
    assert_eq!(text_of(&out), "out\n");
    std::fs::remove_dir_all(outside).unwrap();
}

#[tokio::test]
async fn prepare_arguments_like_pi() {
    let ws = Ws::new();
    let edit = ws.tools.iter().find(|t| t.spec().name == "edit").unwrap();
    assert_eq!(
        edit.prepare_arguments(
            json!({"path": "f", "edits": "[{\"oldText\":\"a\",\"newText\":\"b\"}]"})
        ),
        json!({"path": "f", "edits": [{"oldText": "a", "newText": "b"}]})
    );
    assert_eq!(
        edit.prepare_arguments(json!({"path": "f", "oldText": "a", "newText": "b"})),
        json!({"path": "f", "edits": [{"oldText": "a", "newText": "b"}]})
    );
    let err = ws
        .call("edit", json!({"path": "f", "edits": []}))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "Edit tool input is invalid. edits must contain at least one replacement."
    );
}

/// Pi 1.6 (#8544, `prepareEditArguments`): `edits` as one edit object (or a JSON string of
/// one) is taken as a one-element array, and extra fields pass validation.
#[tokio::test]
async fn a_single_edit_object_and_extra_fields_are_accepted_as_pi_1_6() {
    let ws = Ws::new();
    let edit = ws.tools.iter().find(|t| t.spec().name == "edit").unwrap();
    assert_eq!(
        edit.prepare_arguments(json!({"path": "f", "edits": {"oldText": "a", "newText": "b"}})),
        json!({"path": "f", "edits": [{"oldText": "a", "newText": "b"}]})
    );
    assert_eq!(
        edit.prepare_arguments(
            json!({"path": "f", "edits": "{\"oldText\":\"a\",\"newText\":\"b\"}"})
        ),
        json!({"path": "f", "edits": [{"oldText": "a", "newText": "b"}]})
    );
    let args = json!({"path": "f", "why": "rename", "edits": [{"oldText": "a", "newText": "b", "note": "x"}]});
    assert_eq!(
        pi_core::validate::validate_arguments("edit", &edit.spec().parameters, &args),
        Ok(args.clone())
    );
    ws.put("f", b"a\n");
    ws.call(
        "edit",
        edit.prepare_arguments(json!({"path": "f", "edits": {"oldText": "a", "newText": "b"}})),
    )
    .await
    .unwrap();
    assert_eq!(ws.get("f"), b"b\n");
}

/// Pi 1.6's line endings in mixed files: lines outside the match keep theirs, and a `\n` of
/// the new text gets the ending of the line where the match starts (LF here, though the file's
/// first line ends in CRLF).
#[tokio::test]
async fn mixed_endings_new_lines_take_the_matched_lines_ending() {
    let ws = Ws::new();
    ws.put("m", b"a\r\nb\nc\r\nd\r");
    ws.edit("m", "b", "B1\nB2").await.unwrap();
    assert_eq!(ws.get("m"), b"a\r\nB1\nB2\nc\r\nd\r");
    ws.put("n", b"a\r\nb\nc\r\n");
    ws.edit("n", "c", "C1\nC2").await.unwrap();
    assert_eq!(ws.get("n"), b"a\r\nb\nC1\r\nC2\r\n");
}

/// `details.diff`, `details.patch` and `details.firstChangedLine` as Pi 1.6.0's `edit` stores
/// them (`generateEditDiff` over the text without its byte order mark, with LF line ends): the
/// expected values are what Pi 1.6.0's function returns for the same files and edits (run
/// with node): a CRLF file, a BOM file, two hunks with an insertion and a removal, a last line
/// without a newline.
#[tokio::test]
#[allow(clippy::type_complexity)]
async fn edit_details_are_pi_1_6s_diff_and_patch() {
    let ws = Ws::new();
    let thirty: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    let cases: [(&str, &[u8], Vec<(&str, &str)>, &str, &str, u64); 4] = [
        (
            "f.txt",
            b"alpha\r\nbeta\r\ngamma",
            vec![("alpha\nbeta", "ALPHA\nBETA")],
            "-1 alpha\n-2 beta\n+1 ALPHA\n+2 BETA\n 3 gamma",
            "--- f.txt\n+++ f.txt\n@@ -1,3 +1,3 @@\n-alpha\n-beta\n+ALPHA\n+BETA\n gamma\n\\ No newline at end of file\n",
            1,
        ),
        (
            "b.csv",
            b"\xEF\xBB\xBFname,age\nbob,3",
            vec![("name,age", "name,years")],
            "-1 name,age\n+1 name,years\n 2 bob,3",
            "--- b.csv\n+++ b.csv\n@@ -1,2 +1,2 @@\n-name,age\n+name,years\n bob,3\n\\ No newline at end of file\n",
            1,
        ),
        (
            "m.txt",
            thirty.as_bytes(),
            vec![("line 3\n", "line three\nline 3.5\n"), ("line 25\n", "")],
            "  1 line 1\n  2 line 2\n- 3 line 3\n+ 3 line three\n+ 4 line 3.5\n  4 line 4\n  5 line 5\n  6 line 6\n  7 line 7\n    ...\n 21 line 21\n 22 line 22\n 23 line 23\n 24 line 24\n-25 line 25\n 26 line 26\n 27 line 27\n 28 line 28\n 29 line 29\n    ...",
            "--- m.txt\n+++ m.txt\n@@ -1,7 +1,8 @@\n line 1\n line 2\n-line 3\n+line three\n+line 3.5\n line 4\n line 5\n line 6\n line 7\n@@ -21,9 +22,8 @@\n line 21\n line 22\n line 23\n line 24\n-line 25\n line 26\n line 27\n line 28\n line 29\n",
            3,
        ),
        (
            "e.txt",
            b"a\nb\n",
            vec![("b\n", "b\nc")],
            " 1 a\n 2 b\n+3 c",
            "--- e.txt\n+++ e.txt\n@@ -1,2 +1,3 @@\n a\n b\n+c\n\\ No newline at end of file\n",
            3,
        ),
    ];
    for (name, bytes, edits, diff, patch, first) in cases {
        ws.put(name, bytes);
        let edits: Vec<Value> = edits
            .iter()
            .map(|(o, n)| json!({"oldText": o, "newText": n}))
            .collect();
        let out = ws
            .call("edit", json!({"path": name, "edits": edits}))
            .await
            .unwrap();
        let d = out.details.unwrap();
        assert_eq!(
            (&d["diff"], &d["patch"], &d["firstChangedLine"]),
            (&json!(diff), &json!(patch), &json!(first)),
            "{name}"
        );
    }
}

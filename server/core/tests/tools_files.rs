//! Files as they are on disk, through the headless tools (`DiskFs`): symlinks (ED-01), line
//! endings (ED-03), files that are not UTF-8 (ED-04), huge files read in bounded memory
//! (issue 19 item 5), bounded diffs of long lines (SESSX-03). Byte-exact inputs from
//! `fixtures/cases/`; whole-value assertions on the bytes on disk.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pi_core::agent::{Tool, ToolContext, ToolError, ToolOutput};
use pi_core::fs::DiskFs;
use pi_core::tools::{tools_with_state, ToolState};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

fn case(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/cases")
            .join(name),
    )
    .unwrap()
}

struct Ws {
    /// A temp folder holding `ws/` (the workspace) and `outside/`.
    top: PathBuf,
    dir: PathBuf,
    tools: Vec<Arc<dyn Tool>>,
}

impl Ws {
    fn new() -> Self {
        let top = std::env::temp_dir().join(format!("pi-tools-files-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(top.join("ws")).unwrap();
        std::fs::create_dir_all(top.join("outside")).unwrap();
        let top = top.canonicalize().unwrap();
        let dir = top.join("ws");
        let tools = tools_with_state(
            Arc::new(DiskFs::new(dir.clone())),
            None,
            Arc::new(ToolState::default()),
        );
        Ws { top, dir, tools }
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

    async fn read(&self, path: &str) -> Result<String, ToolError> {
        self.call("read", json!({"path": path}))
            .await
            .map(|o| text_of(&o))
    }
}

impl Drop for Ws {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.top);
    }
}

fn text_of(out: &ToolOutput) -> String {
    match &out.content[0] {
        pi_ai::ContentBlock::Text(t) => t.text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

fn err_of(r: Result<ToolOutput, ToolError>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(o) => panic!("expected an error, got {:?}", text_of(&o)),
    }
}

#[tokio::test]
async fn ed04_latin1_edit_keeps_latin1_and_read_says_it() {
    let ws = Ws::new();
    ws.put("a.py", &case("ED-04-latin1.py"));
    assert_eq!(
        ws.read("a.py").await.unwrap(),
        "café = 1\nname = 'x'\n\n\n[File encoding: windows-1252 (detected); the text is shown decoded, and edit and write keep the file in windows-1252.]"
    );
    let out = ws.edit("a.py", "name = 'x'", "name = 'é'").await.unwrap();
    assert_eq!(text_of(&out), "Successfully replaced 1 block(s) in a.py.");
    assert_eq!(ws.get("a.py"), b"caf\xe9 = 1\nname = '\xe9'\n");
    // A character Latin-1 cannot hold: refused, nothing changed.
    let before = ws.get("a.py");
    assert_eq!(
        err_of(ws.edit("a.py", "name", "n🦊").await),
        format!(
            "{} is encoded in windows-1252, which cannot represent '🦊' (U+1F98A); nothing was changed. Use only characters windows-1252 can encode.",
            ws.dir.join("a.py").display()
        )
    );
    assert_eq!(ws.get("a.py"), before);
    // write keeps the encoding too, and refuses the same way.
    let out = ws
        .call("write", json!({"path": "a.py", "content": "déjà = 2\n"}))
        .await
        .unwrap();
    assert_eq!(text_of(&out), "Successfully wrote to a.py");
    assert_eq!(ws.get("a.py"), b"d\xe9j\xe0 = 2\n");
    err_of(
        ws.call("write", json!({"path": "a.py", "content": "中\n"}))
            .await,
    );
    assert_eq!(ws.get("a.py"), b"d\xe9j\xe0 = 2\n");
}

#[tokio::test]
async fn ed04_shift_jis_edit_keeps_shift_jis() {
    let ws = Ws::new();
    ws.put("j.py", &case("ED-04-shift-jis.py"));
    let read = ws.read("j.py").await.unwrap();
    assert_eq!(
        read,
        "# これは日本語\nx = 1\n\n\n[File encoding: Shift_JIS (detected); the text is shown decoded, and edit and write keep the file in Shift_JIS.]"
    );
    ws.edit("j.py", "これは日本語", "これは日本語です")
        .await
        .unwrap();
    let (want, _, _) = encoding_rs::SHIFT_JIS.encode("# これは日本語です\nx = 1\n");
    assert_eq!(ws.get("j.py"), want.as_ref());
    // A character outside Shift_JIS: refused, file unchanged.
    err_of(ws.edit("j.py", "x = 1", "x = '🦊'").await);
    assert_eq!(ws.get("j.py"), want.as_ref());
}

#[tokio::test]
async fn ed04_neighbours_utf16_and_undecodable_bytes() {
    let ws = Ws::new();
    // UTF-16LE with BOM: read decoded, edit written back as UTF-16LE with its BOM.
    let mut bytes = vec![0xFF, 0xFE];
    for u in "key = \"värde\"\r\n".encode_utf16() {
        bytes.extend_from_slice(&u.to_le_bytes());
    }
    ws.put("u16.txt", &bytes);
    assert!(ws
        .read("u16.txt")
        .await
        .unwrap()
        .starts_with("key = \"värde\"\r\n\n\n[File encoding: UTF-16LE with BOM (detected)"));
    ws.edit("u16.txt", "värde", "wert 🦊").await.unwrap();
    let mut want = vec![0xFF, 0xFE];
    for u in "key = \"wert 🦊\"\r\n".encode_utf16() {
        want.extend_from_slice(&u.to_le_bytes());
    }
    assert_eq!(ws.get("u16.txt"), want);
    // A UTF-8 file with a stray byte: read shows U+FFFD and says so; edit refuses and leaves
    // every byte as it was.
    ws.put("bad.txt", b"na\xc3\xafve \xff end\n");
    assert_eq!(
        ws.read("bad.txt").await.unwrap(),
        "naïve \u{FFFD} end\n\n\n[File encoding: not valid UTF-8 (undecodable bytes are shown as U+FFFD); edit refuses to change this file because its bytes could not be kept exactly.]"
    );
    let msg = err_of(ws.edit("bad.txt", "end", "END").await);
    assert!(
        msg.contains("cannot be changed without altering them; nothing was changed"),
        "{msg}"
    );
    assert_eq!(ws.get("bad.txt"), b"na\xc3\xafve \xff end\n");
    // Plain UTF-8 is unchanged in every way: no note, bytes as written.
    ws.put("ok.txt", "naïve\n".as_bytes());
    assert_eq!(ws.read("ok.txt").await.unwrap(), "naïve\n");
}

#[tokio::test]
async fn ed03_lone_cr_and_mixed_endings_keep_every_ending() {
    let ws = Ws::new();
    ws.put("cr.txt", &case("ED-03-lone-cr.txt"));
    ws.edit("cr.txt", "progress 100%", "progress 100% (ok)")
        .await
        .unwrap();
    assert_eq!(
        ws.get("cr.txt"),
        b"progress 10%\rprogress 100% (ok)\ndone\n"
    );
    // `\n` in oldText matches the lone CR too; the CR stays a CR.
    ws.edit("cr.txt", "10%\nprogress", "10%\nPROGRESS")
        .await
        .unwrap();
    assert_eq!(
        ws.get("cr.txt"),
        b"progress 10%\rPROGRESS 100% (ok)\ndone\n"
    );
    ws.put("mixed.txt", &case("ED-03-mixed-endings.txt"));
    ws.edit("mixed.txt", "b\nc", "B\nC").await.unwrap();
    assert_eq!(ws.get("mixed.txt"), b"a\r\nB\nC");
    ws.edit("mixed.txt", "a\nB", "A\nB").await.unwrap();
    assert_eq!(ws.get("mixed.txt"), b"A\r\nB\nC");
}

#[tokio::test]
#[cfg(unix)] // makes a symlink: Windows needs a privilege for it
async fn ed01_edit_and_write_through_a_symlink_keep_the_link() {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.dir.join("real")).unwrap();
    ws.put("real/target.txt", b"value = 1\n");
    std::os::unix::fs::symlink("real/target.txt", ws.dir.join("link.txt")).unwrap();
    std::os::unix::fs::symlink("real", ws.dir.join("linkdir")).unwrap();
    let out = ws.edit("link.txt", "value = 1", "value = 2").await.unwrap();
    assert_eq!(
        text_of(&out),
        "Successfully replaced 1 block(s) in link.txt."
    );
    assert!(std::fs::symlink_metadata(ws.dir.join("link.txt"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(ws.get("real/target.txt"), b"value = 2\n");
    ws.call(
        "write",
        json!({"path": "link.txt", "content": "value = 3\n"}),
    )
    .await
    .unwrap();
    assert!(std::fs::symlink_metadata(ws.dir.join("link.txt"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(ws.get("real/target.txt"), b"value = 3\n");
    // Through a symlinked folder.
    ws.edit("linkdir/target.txt", "value = 3", "value = 4")
        .await
        .unwrap();
    assert_eq!(ws.get("real/target.txt"), b"value = 4\n");
    // A chain of links, and a dangling link inside the workspace: write creates its target.
    std::os::unix::fs::symlink("link.txt", ws.dir.join("chain.txt")).unwrap();
    ws.edit("chain.txt", "value = 4", "value = 5")
        .await
        .unwrap();
    assert_eq!(ws.get("real/target.txt"), b"value = 5\n");
    std::os::unix::fs::symlink("real/new.txt", ws.dir.join("dangling.txt")).unwrap();
    ws.call("write", json!({"path": "dangling.txt", "content": "new\n"}))
        .await
        .unwrap();
    assert_eq!(ws.get("real/new.txt"), b"new\n");
    assert!(std::fs::symlink_metadata(ws.dir.join("dangling.txt"))
        .unwrap()
        .file_type()
        .is_symlink());
    // A link leading outside the workspace stays refused (docs/security.md), nothing written.
    std::fs::write(ws.top.join("outside/secret.txt"), b"keep\n").unwrap();
    std::os::unix::fs::symlink(ws.top.join("outside/secret.txt"), ws.dir.join("out.txt")).unwrap();
    let msg = err_of(
        ws.call("write", json!({"path": "out.txt", "content": "gone\n"}))
            .await,
    );
    assert!(
        msg.starts_with("Path out.txt is outside the workspace"),
        "{msg}"
    );
    err_of(ws.edit("out.txt", "keep", "gone").await);
    assert_eq!(
        std::fs::read(ws.top.join("outside/secret.txt")).unwrap(),
        b"keep\n"
    );
}

#[tokio::test]
async fn sessx03_edit_and_write_of_a_minified_megabyte_line_give_small_diffs() {
    let ws = Ws::new();
    let mut text: String = (0..120_000).map(|i| format!("a{i}:1,")).collect();
    text.push('\n');
    assert!(text.len() > 1_000_000);
    ws.put("min.js", text.as_bytes());
    let out = ws.edit("min.js", "a50000:1,", "a50000:2,").await.unwrap();
    let diff = out.details.as_ref().unwrap()["diff"].as_str().unwrap();
    assert!(diff.len() < 1000, "{} bytes of diff", diff.len());
    assert!(
        diff.contains("-1 [… ") && diff.contains("a50000:1,"),
        "{diff}"
    );
    assert!(
        diff.contains("+1 [… ") && diff.contains("a50000:2,"),
        "{diff}"
    );
    let edited = text.replace("a50000:1,", "a50000:2,");
    assert_eq!(ws.get("min.js"), edited.as_bytes());
    // The whole file written with one byte changed: the same small diff, the bytes as written.
    let written = edited.replace("a70000:1,", "a70000:3,");
    let out = ws
        .call("write", json!({"path": "min.js", "content": written}))
        .await
        .unwrap();
    assert_eq!(text_of(&out), "Successfully wrote to min.js");
    assert_eq!(ws.get("min.js"), written.as_bytes());
}

/// Issue 19 item 5: a read of a huge file keeps the server's memory bounded: a 1 GiB sparse
/// file (one line of NUL bytes: the worst case, no line end anywhere) is read in a stream and
/// answered with Pi's long-line notice. (The 5 GB file of the report is measured, in a release
/// build, by the read bench.)
#[tokio::test]
async fn reading_a_gigabyte_sparse_file_streams_it() {
    let ws = Ws::new();
    let path = ws.dir.join("sparse.bin");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(1024 * 1024 * 1024).unwrap();
    drop(f);
    let text = ws.read("sparse.bin").await.unwrap();
    assert_eq!(
        text,
        "[Line 1 is 1024.0MB, exceeds 50.0KB limit. Use bash: sed -n '1p' sparse.bin | head -c 51200]"
    );
    // A range of a large text file: lines as asked, Pi's notice with the whole file's count.
    let big: String = (1..=400_000).map(|i| format!("line {i:>20}\n")).collect();
    ws.put("big.txt", big.as_bytes());
    let out = ws
        .call(
            "read",
            json!({"path": "big.txt", "offset": 399_999, "limit": 1}),
        )
        .await
        .unwrap();
    assert_eq!(
        text_of(&out),
        format!(
            "line {:>20}\n\n[2 more lines in file. Use offset=400000 to continue.]",
            399_999
        )
    );
}

/// Issue 19 item 5 for `grep`: a match on a 4 MB line, with context lines that end in CRLF
/// and hold a lone CR: only the shown part of each line is kept, the context read in a
/// stream, and context lines are numbered as the match is (by `\n`; ED-03).
#[tokio::test]
async fn grep_context_on_a_huge_line_keeps_only_what_it_shows() {
    let ws = Ws::new();
    let long = format!("needle {}", "é".repeat(2 * 1024 * 1024));
    let text = format!("one\r\ntwo\rthree\n{long}\nfour\nfive\n");
    ws.put("big.txt", text.as_bytes());
    let out = ws
        .call(
            "grep",
            json!({"pattern": "needle", "path": "big.txt", "context": 1}),
        )
        .await
        .unwrap();
    let shown = format!("needle {}... [truncated]", "é".repeat(493));
    assert_eq!(
        text_of(&out),
        format!(
            "big.txt-2- twothree\nbig.txt:3: {shown}\nbig.txt-4- four\n\n[Some lines truncated to 500 chars. Use read tool to see full lines]"
        )
    );
}

//! `grep`, `find`, `ls` and `read` on `fixtures/workspaces/search` (copied to a temp folder, with
//! git-ignored files added there): Pi's parameters, limits and notices, whole-value assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pi_core::agent::{Tool, ToolContext, ToolError, ToolOutput};
use pi_core::fs::DiskFs;
use pi_core::tools::default_tools;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

struct Ws {
    dir: PathBuf,
    tools: Vec<Arc<dyn Tool>>,
}

impl Ws {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("pi-tools-search-{}", uuid::Uuid::new_v4()));
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/workspaces/search"),
            &dir,
        );
        let dir = dir.canonicalize().unwrap();
        std::fs::create_dir_all(dir.join("ignored")).unwrap();
        std::fs::write(dir.join("ignored/secret.txt"), "needle\n").unwrap();
        std::fs::write(dir.join("debug.log"), "needle\n").unwrap();
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::write(dir.join(".git/HEAD"), "needle\n").unwrap();
        let tools = default_tools(Arc::new(DiskFs::new(dir.clone())), None);
        Ws { dir, tools }
    }

    async fn call(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
        let t = self.tools.iter().find(|t| t.spec().name == tool).unwrap();
        let ctx = ToolContext {
            call_id: "call_s".into(),
            turn: 1,
            cancel: CancellationToken::new(),
            on_update: Arc::new(|_| {}),
            model_input: None,
        };
        t.execute(ctx, args).await
    }

    async fn text(&self, tool: &str, args: Value) -> String {
        text_of(&self.call(tool, args).await.unwrap())
    }
}

impl Drop for Ws {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text_of(out: &ToolOutput) -> String {
    match &out.content[0] {
        pi_ai::ContentBlock::Text(t) => t.text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

#[tokio::test]
async fn tool_set_names() {
    let ws = Ws::new();
    let names: Vec<String> = ws.tools.iter().map(|t| t.spec().name).collect();
    assert_eq!(
        names,
        ["read", "bash", "edit", "write", "grep", "find", "ls"]
    );
}

#[tokio::test]
async fn grep_respects_gitignore_and_includes_hidden() {
    let ws = Ws::new();
    let out = ws.call("grep", json!({"pattern": "needle"})).await.unwrap();
    let long = format!("start needle{}", "y".repeat(488));
    assert_eq!(
        text_of(&out),
        format!(".hidden/conf.toml:1: needle = true\ndocs/long.txt:1: {long}... [truncated]\nsrc/main.rs:2:     let needle = 1;\nsrc/main.rs:3:     println!(\"{{}}\", needle);\n\n[Some lines truncated to 500 chars. Use read tool to see full lines]")
    );
    assert_eq!(out.details, Some(json!({"linesTruncated": true})));
}

#[tokio::test]
async fn grep_options() {
    let ws = Ws::new();
    assert_eq!(
        ws.text("grep", json!({"pattern": "NEEDLE", "ignoreCase": true, "glob": "*.rs"})).await,
        "src/lib.rs:2: // Needle in caps\nsrc/main.rs:2:     let needle = 1;\nsrc/main.rs:3:     println!(\"{}\", needle);"
    );
    assert_eq!(
        ws.text("grep", json!({"pattern": "(b)", "literal": true}))
            .await,
        "docs/regex.txt:1: a (b) c"
    );
    assert_eq!(
        ws.text("grep", json!({"pattern": "let needle", "context": 1, "path": "src"})).await,
        "main.rs-1- fn main() {\nmain.rs:2:     let needle = 1;\nmain.rs-3-     println!(\"{}\", needle);"
    );
    assert_eq!(
        ws.text("grep", json!({"pattern": "needle", "path": "src/main.rs", "limit": 1})).await,
        "main.rs:2:     let needle = 1;\n\n[1 matches limit reached. Use limit=2 for more, or refine pattern]"
    );
    assert_eq!(
        ws.text("grep", json!({"pattern": "nothing-here"})).await,
        "No matches found"
    );
    let err = ws.call("grep", json!({"pattern": "("})).await.unwrap_err();
    assert!(
        err.message.starts_with("Invalid pattern: "),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn find_globs_and_limits() {
    let ws = Ws::new();
    assert_eq!(
        ws.text("find", json!({"pattern": "*.rs"})).await,
        "src/lib.rs\nsrc/main.rs"
    );
    assert_eq!(
        ws.text("find", json!({"pattern": "src/*.rs"})).await,
        "src/lib.rs\nsrc/main.rs"
    );
    assert_eq!(
        ws.text("find", json!({"pattern": "*.toml"})).await,
        ".hidden/conf.toml"
    );
    assert_eq!(
        ws.text("find", json!({"pattern": "*.log"})).await,
        "No files found matching pattern"
    );
    let out = ws
        .call("find", json!({"pattern": "*", "limit": 2}))
        .await
        .unwrap();
    assert_eq!(
        text_of(&out),
        ".gitignore\n.hidden/\n\n[2 results limit reached. Use limit=4 for more, or refine pattern]"
    );
    assert_eq!(out.details, Some(json!({"resultLimitReached": 2})));
}

#[tokio::test]
async fn grep_match_limit_default_is_100() {
    let ws = Ws::new();
    let many: String = (0..150).map(|i| format!("hit {i}\n")).collect();
    std::fs::write(ws.dir.join("many.txt"), many).unwrap();
    let out = ws
        .call("grep", json!({"pattern": "hit", "path": "many.txt"}))
        .await
        .unwrap();
    let want: String = (0..100)
        .map(|i| format!("many.txt:{}: hit {i}\n", i + 1))
        .collect();
    assert_eq!(
        text_of(&out),
        format!(
            "{}\n[100 matches limit reached. Use limit=200 for more, or refine pattern]",
            want
        )
    );
}

/// Many files (several search batches, on every core): matches come in file-name order and the
/// limit cuts the same place a one-file-at-a-time search would, in the middle of a file too.
#[tokio::test]
async fn grep_over_many_files_keeps_name_order_and_the_limit() {
    let ws = Ws::new();
    let tree = ws.dir.join("tree");
    for d in 0..3 {
        for f in 0..400 {
            let dir = tree.join(format!("d{d}"));
            std::fs::create_dir_all(&dir).unwrap();
            // Every 7th file has two hits, the others none or one.
            let text = match f % 7 {
                0 => format!("hit {d}/{f} a\nmiss\nhit {d}/{f} b\n"),
                3 | 5 => format!("hit {d}/{f}\n"),
                _ => "miss\n".to_string(),
            };
            std::fs::write(dir.join(format!("f{f:03}.txt")), text).unwrap();
        }
    }
    // What a one-file-at-a-time walk in name order gives.
    let mut want: Vec<String> = Vec::new();
    for d in 0..3 {
        for f in 0..400 {
            match f % 7 {
                0 => {
                    want.push(format!("d{d}/f{f:03}.txt:1: hit {d}/{f} a"));
                    want.push(format!("d{d}/f{f:03}.txt:3: hit {d}/{f} b"));
                }
                3 | 5 => want.push(format!("d{d}/f{f:03}.txt:1: hit {d}/{f}")),
                _ => {}
            }
        }
    }
    assert_eq!(want.len(), 3 * (58 * 2 + 114));
    let all = ws
        .text(
            "grep",
            json!({"pattern": "hit", "path": "tree", "limit": 1000}),
        )
        .await;
    assert_eq!(all, want.join("\n"));
    // A limit that falls between a file's two hits (index 301 is the first of a pair).
    let pair_start = (301..want.len())
        .find(|&i| want[i].ends_with(" a"))
        .unwrap();
    let limit = pair_start + 1;
    let cut = ws
        .text(
            "grep",
            json!({"pattern": "hit", "path": "tree", "limit": limit}),
        )
        .await;
    assert_eq!(
        cut,
        format!(
            "{}\n\n[{limit} matches limit reached. Use limit={} for more, or refine pattern]",
            want[..limit].join("\n"),
            limit * 2
        )
    );
}

#[tokio::test]
async fn ls_lists_with_slashes_and_dotfiles() {
    let ws = Ws::new();
    assert_eq!(
        ws.text("ls", json!({})).await,
        ".git/\n.gitignore\n.hidden/\ndebug.log\ndocs/\nignored/\nREADME.md\nsrc/"
    );
}

#[tokio::test]
async fn read_offset_limit_and_notices() {
    let ws = Ws::new();
    assert_eq!(
        ws.text(
            "read",
            json!({"path": "src/main.rs", "offset": 2, "limit": 1})
        )
        .await,
        "    let needle = 1;\n\n[3 more lines in file. Use offset=3 to continue.]"
    );
    let err = ws
        .call("read", json!({"path": "src/main.rs", "offset": 9}))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "Offset 9 is beyond end of file (5 lines total)"
    );
    let home_err = ws
        .call("read", json!({"path": "~/.bashrc"}))
        .await
        .unwrap_err();
    assert!(
        home_err.message.contains("is outside the workspace"),
        "{}",
        home_err.message
    );
}

/// Pi 1.6's `find` (#12066): a path pattern is relative to the search folder (not matched at
/// any depth), `./` is dropped, an all-lowercase pattern ignores case, and the limit notice
/// needs one result more than the limit.
#[tokio::test]
async fn find_path_patterns_are_relative_to_the_search_folder() {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.dir.join("pkg/src")).unwrap();
    std::fs::write(ws.dir.join("pkg/src/deep.rs"), "x\n").unwrap();
    std::fs::write(ws.dir.join("src/Upper.RS"), "x\n").unwrap();
    assert_eq!(
        ws.text("find", json!({"pattern": "src/*.rs"})).await,
        "src/Upper.RS\nsrc/lib.rs\nsrc/main.rs"
    );
    assert_eq!(
        ws.text("find", json!({"pattern": "./src/*.rs"})).await,
        "src/Upper.RS\nsrc/lib.rs\nsrc/main.rs"
    );
    assert_eq!(
        ws.text("find", json!({"pattern": "src/*.RS"})).await,
        "src/Upper.RS"
    );
    assert_eq!(
        ws.text("find", json!({"pattern": "**/src/*.rs"})).await,
        "pkg/src/deep.rs\nsrc/Upper.RS\nsrc/lib.rs\nsrc/main.rs"
    );
    assert_eq!(
        ws.text("find", json!({"pattern": "src/*.rs", "path": "pkg"}))
            .await,
        "src/deep.rs"
    );
    let abs = format!("{}/pkg/**/*.rs", ws.dir.display());
    assert_eq!(
        ws.text("find", json!({"pattern": abs})).await,
        "pkg/src/deep.rs"
    );
    // Exactly `limit` results: no notice.
    let out = ws
        .call(
            "find",
            json!({"pattern": "src/*.rs", "path": "pkg", "limit": 1}),
        )
        .await
        .unwrap();
    assert_eq!(text_of(&out), "src/deep.rs");
    assert_eq!(out.details, None);
}

/// Pi 1.6's `grep`: `glob` relative to `path` (a leading `./` dropped), context lines as
/// ripgrep gives them (overlapping windows merged, a match in another's window is a match
/// line), and the limit notice only when more matches exist.
#[tokio::test]
async fn grep_globs_relative_to_path_and_merged_context() {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.dir.join("repo/migrations/main")).unwrap();
    std::fs::write(ws.dir.join("repo/migrations/main/a.js"), "up\n").unwrap();
    std::fs::write(ws.dir.join("repo/b.js"), "up\n").unwrap();
    assert_eq!(
        ws.text(
            "grep",
            json!({"pattern": "up", "path": "repo", "glob": "migrations/main/*.js"})
        )
        .await,
        "migrations/main/a.js:1: up"
    );
    assert_eq!(
        ws.text(
            "grep",
            json!({"pattern": "up", "path": "repo", "glob": "./migrations/main/*.js"})
        )
        .await,
        "migrations/main/a.js:1: up"
    );
    std::fs::write(
        ws.dir.join("ctx.txt"),
        "one\nhit a\nhit b\nfour\nfive\nsix\nhit c\neight\n",
    )
    .unwrap();
    assert_eq!(
        ws.text("grep", json!({"pattern": "hit", "path": "ctx.txt", "context": 1}))
            .await,
        "ctx.txt-1- one\nctx.txt:2: hit a\nctx.txt:3: hit b\nctx.txt-4- four\nctx.txt-6- six\nctx.txt:7: hit c\nctx.txt-8- eight"
    );
    // Exactly `limit` matches: no notice.
    let out = ws
        .call(
            "grep",
            json!({"pattern": "hit", "path": "ctx.txt", "limit": 3}),
        )
        .await
        .unwrap();
    assert_eq!(
        text_of(&out),
        "ctx.txt:2: hit a\nctx.txt:3: hit b\nctx.txt:7: hit c"
    );
    assert_eq!(out.details, None);
    // One more exists: the notice, and the last match's trailing window (a further match in
    // it shown as context).
    let out = ws
        .call(
            "grep",
            json!({"pattern": "hit", "path": "ctx.txt", "limit": 1, "context": 1}),
        )
        .await
        .unwrap();
    assert_eq!(
        text_of(&out),
        "ctx.txt-1- one\nctx.txt:2: hit a\nctx.txt-3- hit b\n\n[1 matches limit reached. Use limit=2 for more, or refine pattern]"
    );
    assert_eq!(out.details, Some(json!({"matchLimitReached": 1})));
}

/// An `Fs` with one open buffer over the disk (what an editor's `Fs` gives `read`).
struct OneBuffer {
    disk: DiskFs,
    path: PathBuf,
    text: Arc<String>,
}

#[async_trait::async_trait]
impl pi_core::fs::Fs for OneBuffer {
    fn root(&self) -> &Path {
        self.disk.root()
    }
    async fn read(&self, path: &Path) -> Result<pi_core::fs::FileSnapshot, pi_core::fs::FsError> {
        if path == self.path {
            return Ok(pi_core::fs::FileSnapshot {
                text: self.text.clone(),
                version: Some(3),
                encoding: Default::default(),
            });
        }
        self.disk.read(path).await
    }
    async fn replace(
        &self,
        path: &Path,
        base: &pi_core::fs::FileSnapshot,
        edits: Vec<pi_core::fs::TextReplace>,
        label: &str,
    ) -> Result<(), pi_core::fs::FsError> {
        self.disk.replace(path, base, edits, label).await
    }
    async fn write(
        &self,
        path: &Path,
        text: &str,
        label: &str,
    ) -> Result<pi_core::fs::WriteKind, pi_core::fs::FsError> {
        self.disk.write(path, text, label).await
    }
    fn has_buffer(&self, path: &Path) -> bool {
        path == self.path
    }
    fn buffer_paths(&self) -> Vec<PathBuf> {
        vec![self.path.clone()]
    }
    async fn unsaved_note(&self, path: &Path) -> Option<String> {
        (path == self.path).then(|| "Note: the user has unsaved changes to src/main.rs.".into())
    }
}

/// `grep` searches an open buffer as `read` reads it (the editor's view: the unsaved line is
/// found, the line only on disk is not) and says that the disk differs; files without a buffer
/// come from disk, without the note.
#[tokio::test]
async fn grep_searches_open_buffers_and_notes_unsaved_changes() {
    let ws = Ws::new();
    let main = ws.dir.join("src/main.rs");
    let fs = OneBuffer {
        disk: DiskFs::new(ws.dir.clone()),
        path: main.clone(),
        text: Arc::new("fn main() {\n    let unsaved_needle = 2;\n}\n".into()),
    };
    let tools = default_tools(Arc::new(fs), None);
    let grep = tools.iter().find(|t| t.spec().name == "grep").unwrap();
    let call = |args: Value| {
        grep.execute(
            ToolContext {
                call_id: "g".into(),
                turn: 1,
                cancel: CancellationToken::new(),
                on_update: Arc::new(|_| {}),
                model_input: None,
            },
            args,
        )
    };
    let out = call(json!({"pattern": "needle", "path": "src"}))
        .await
        .unwrap();
    assert_eq!(
        text_of(&out),
        "main.rs:2:     let unsaved_needle = 2;\n\nNote: the user has unsaved changes to src/main.rs."
    );
    let out = call(json!({"pattern": "Needle", "path": "src"}))
        .await
        .unwrap();
    assert_eq!(text_of(&out), "lib.rs:2: // Needle in caps");
}

//! File confinement of read / write / edit / grep / find / ls through the real tools on real
//! files: `..`, absolute paths outside, symlink chains (also dangling and looping ones), a
//! symlinked workspace root, Unicode look-alike separators, and the settings allow-list.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Symlinks throughout: making one needs a privilege on Windows.
#![cfg(unix)]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pi_core::agent::{Tool, ToolContext, ToolError, ToolOutput};
use pi_core::fs::DiskFs;
use pi_core::tools::{default_tools, resolve_path, resolve_path_in};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

struct Case {
    base: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
}

impl Case {
    fn new(name: &str) -> Case {
        let base = std::env::temp_dir().join(format!(
            "pi-confine-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(base.join("ws/src")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        let base = base.canonicalize().unwrap();
        std::fs::write(base.join("outside/secret.txt"), "TOP-SECRET-OUTSIDE\n").unwrap();
        std::fs::write(base.join("ws/src/a.txt"), "inside text\n").unwrap();
        Case {
            ws: base.join("ws"),
            outside: base.join("outside"),
            base,
        }
    }

    fn tools(&self, root: &Path) -> Vec<Arc<dyn Tool>> {
        default_tools(Arc::new(DiskFs::new(root.to_path_buf())), None)
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

async fn call(tools: &[Arc<dyn Tool>], name: &str, args: Value) -> Result<ToolOutput, ToolError> {
    let t = tools.iter().find(|t| t.spec().name == name).unwrap();
    let ctx = ToolContext {
        call_id: "c1".into(),
        turn: 1,
        cancel: CancellationToken::new(),
        on_update: Arc::new(|_| {}),
        model_input: None,
    };
    t.execute(ctx, args).await
}

fn text(r: &Result<ToolOutput, ToolError>) -> String {
    match r {
        Ok(o) => match &o.content[0] {
            pi_ai::ContentBlock::Text(t) => t.text.clone(),
            other => panic!("{other:?}"),
        },
        Err(e) => e.message.clone(),
    }
}

/// Every file tool refuses `path`, and nothing outside the workspace changes.
async fn refused_by_every_tool(c: &Case, root: &Path, path: &str) {
    let tools = c.tools(root);
    let attempts = [
        ("read", json!({"path": path})),
        ("write", json!({"path": path, "content": "pwned\n"})),
        (
            "edit",
            json!({"path": path, "edits": [{"oldText": "TOP", "newText": "pwned"}]}),
        ),
        ("grep", json!({"pattern": "SECRET", "path": path})),
        ("find", json!({"pattern": "*", "path": path})),
        ("ls", json!({"path": path})),
    ];
    for (tool, args) in attempts {
        let r = call(&tools, tool, args).await;
        let t = text(&r);
        assert!(r.is_err(), "{tool} {path:?} was allowed: {t}");
        assert!(
            t.contains("is outside the workspace")
                || t.contains("too many levels of symbolic links"),
            "{tool} {path:?}: {t}"
        );
        assert!(!t.contains("TOP-SECRET"), "{tool} {path:?} leaked: {t}");
    }
    assert_eq!(
        std::fs::read_to_string(c.outside.join("secret.txt")).unwrap(),
        "TOP-SECRET-OUTSIDE\n"
    );
    let mut names: Vec<_> = std::fs::read_dir(&c.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, vec!["secret.txt"], "after {path:?}");
    assert!(!c.base.join("pwned").exists() && !c.base.join("new.txt").exists());
}

#[tokio::test]
async fn dot_dot_and_absolute_paths_are_refused() {
    let c = Case::new("dotdot");
    let ws = c.ws.clone();
    for p in [
        "../outside/secret.txt".to_string(),
        "src/../../outside/secret.txt".to_string(),
        "./../outside".to_string(),
        "..".to_string(),
        c.outside.join("secret.txt").display().to_string(),
        format!("{}/../outside/secret.txt", ws.display()),
        "/etc".to_string(),
    ] {
        refused_by_every_tool(&c, &ws, &p).await;
    }
    // `~` is the home folder, outside this workspace.
    assert!(resolve_path(&ws, "~/x").is_err());
}

#[tokio::test]
async fn symlinks_are_followed_before_the_check() {
    let c = Case::new("links");
    let ws = c.ws.clone();
    // Direct, chained, dangling (a write would create the target), via a folder, `..` after
    // a symlink (applies to the target's parent), and a loop.
    symlink(&c.outside, ws.join("out-dir")).unwrap();
    symlink(c.outside.join("secret.txt"), ws.join("out-file")).unwrap();
    symlink("out-file", ws.join("chain1")).unwrap();
    symlink("../chain1", ws.join("src/chain2")).unwrap();
    symlink(c.outside.join("new.txt"), ws.join("dangling")).unwrap();
    symlink("../../outside/new.txt", ws.join("src/dangling-rel")).unwrap();
    symlink(c.outside.join("sub"), ws.join("dangling-dir")).unwrap();
    std::fs::create_dir_all(c.base.join("deep-out")).unwrap();
    symlink(c.base.join("deep-out"), ws.join("deep")).unwrap();
    symlink("loop-b", ws.join("loop-a")).unwrap();
    symlink("loop-a", ws.join("loop-b")).unwrap();
    for p in [
        "out-dir/secret.txt",
        "out-dir",
        "out-file",
        "chain1",
        "src/chain2",
        "dangling",
        "src/dangling-rel",
        "dangling-dir/x.txt",
        "loop-a",
    ] {
        refused_by_every_tool(&c, &ws, p).await;
    }
    // `..` is applied to the text first (as Pi's `path.resolve` does), and the tool opens that
    // normalised path: `deep/../outside/secret.txt` is `ws/outside/secret.txt`, never the
    // folder beside `deep`'s target.
    let tools = c.tools(&ws);
    let r = call(
        &tools,
        "read",
        json!({"path": "deep/../outside/secret.txt"}),
    )
    .await;
    assert!(
        r.is_err() && !text(&r).contains("TOP-SECRET"),
        "{}",
        text(&r)
    );
    assert!(text(&r).contains(&format!("{}/outside/secret.txt", ws.display())));
    // Symlinks that stay inside are fine.
    symlink("src/a.txt", ws.join("in-link")).unwrap();
    assert_eq!(
        text(&call(&tools, "read", json!({"path": "in-link"})).await),
        "inside text\n"
    );
    // grep and find over the whole workspace do not follow links out of it.
    let g = text(&call(&tools, "grep", json!({"pattern": "SECRET", "path": "."})).await);
    assert!(!g.contains("TOP-SECRET"), "{g}");
    let f = text(&call(&tools, "find", json!({"pattern": "**/secret.txt"})).await);
    assert!(
        !f.contains("secret.txt\n") && !f.ends_with("secret.txt"),
        "{f}"
    );
}

#[tokio::test]
async fn a_symlinked_workspace_root_works_and_still_confines() {
    let c = Case::new("rootlink");
    let link = c.base.join("ws-link");
    symlink(&c.ws, &link).unwrap();
    let tools = c.tools(&link);
    assert_eq!(
        text(&call(&tools, "read", json!({"path": "src/a.txt"})).await),
        "inside text\n"
    );
    let r = call(
        &tools,
        "write",
        json!({"path": "src/b.txt", "content": "b\n"}),
    )
    .await;
    assert!(r.is_ok(), "{}", text(&r));
    assert_eq!(
        std::fs::read_to_string(c.ws.join("src/b.txt")).unwrap(),
        "b\n"
    );
    // The real path of the root is the same workspace.
    let real = c.ws.join("src/a.txt").display().to_string();
    assert_eq!(
        text(&call(&tools, "read", json!({"path": real})).await),
        "inside text\n"
    );
    refused_by_every_tool(&c, &link, "../outside/secret.txt").await;
    refused_by_every_tool(&c, &link, "../ws-link/../outside/secret.txt").await;
}

#[tokio::test]
async fn unicode_look_alike_separators_are_file_name_characters() {
    let c = Case::new("unicode");
    let ws = c.ws.clone();
    let tools = c.tools(&ws);
    // U+2215 DIVISION SLASH, U+FF0F FULLWIDTH SOLIDUS, U+2044 FRACTION SLASH, U+29F8 BIG
    // SOLIDUS; and a look-alike dot (U+2024 ONE DOT LEADER).
    for name in [
        "..\u{2215}outside\u{2215}secret.txt",
        "..\u{ff0f}outside\u{ff0f}secret.txt",
        "..\u{2044}x",
        "\u{2024}\u{2024}\u{29f8}y",
    ] {
        let resolved = resolve_path(&ws, name).unwrap();
        assert_eq!(resolved, ws.join(name), "{name}");
        let r = call(
            &tools,
            "write",
            json!({"path": name, "content": "inside\n"}),
        )
        .await;
        assert!(r.is_ok(), "{name}: {}", text(&r));
        // One file with that name, directly in the workspace.
        assert_eq!(std::fs::read_to_string(ws.join(name)).unwrap(), "inside\n");
        assert_eq!(
            text(&call(&tools, "read", json!({"path": name})).await),
            "inside\n"
        );
    }
    assert_eq!(
        std::fs::read_to_string(c.outside.join("secret.txt")).unwrap(),
        "TOP-SECRET-OUTSIDE\n"
    );
    // A backslash is also a file name character on Unix.
    assert_eq!(
        resolve_path(&ws, "..\\outside").unwrap(),
        ws.join("..\\outside")
    );
}

#[tokio::test]
async fn allowed_dirs_from_settings_open_only_those_folders() {
    let c = Case::new("allow");
    let ws = c.ws.clone();
    std::fs::create_dir_all(ws.join(".pi")).unwrap();
    std::fs::create_dir_all(c.base.join("shared")).unwrap();
    std::fs::write(c.base.join("shared/lib.txt"), "shared text\n").unwrap();
    std::fs::write(
        ws.join(".pi/settings.json"),
        json!({"allowedDirs": [c.base.join("shared")]}).to_string(),
    )
    .unwrap();
    let tools = c.tools(&ws);
    assert_eq!(
        text(&call(&tools, "read", json!({"path": "../shared/lib.txt"})).await),
        "shared text\n"
    );
    let r = call(
        &tools,
        "write",
        json!({"path": "../shared/new.txt", "content": "n\n"}),
    )
    .await;
    assert!(r.is_ok(), "{}", text(&r));
    // Not the folder next to it, nor a prefix look-alike, nor a way out of it.
    std::fs::create_dir_all(c.base.join("shared-evil")).unwrap();
    let allowed = [c.base.join("shared")];
    assert!(resolve_path_in(&ws, &allowed, "../shared-evil/x").is_err());
    assert!(resolve_path_in(&ws, &allowed, "../shared/../outside/secret.txt").is_err());
    refused_by_every_tool(&c, &ws, "../outside/secret.txt").await;
}

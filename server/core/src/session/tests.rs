use super::*;
use pi_ai::Message;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A temporary folder, removed on drop (also when the test fails).
struct Tmp(tempfile::TempDir);

impl std::ops::Deref for Tmp {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Tmp {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

fn tmp(name: &str) -> Tmp {
    Tmp(tempfile::Builder::new()
        .prefix(&format!("pi-core-session-{name}-"))
        .tempdir()
        .unwrap())
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../../fixtures/cases/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn torn_tail_is_cut_before_append() {
    // SESS-01
    let d = tmp("torn");
    let p = d.join("s.jsonl");
    std::fs::write(&p, fixture("SESS-01-torn-tail.jsonl")).unwrap();
    let (mut w, loaded) = SessionWriter::open(&p).unwrap();
    assert_eq!(
        loaded.messages,
        vec![serde_json::from_value::<Message>(json!({"role":"user","content":"hi"})).unwrap()]
    );
    assert_eq!(loaded.warnings.len(), 1);
    w.append_message(&Message::user_text("again")).unwrap();
    drop(w); // one writer per file: the first lets go of its lock
    let (_, reloaded) = SessionWriter::open(&p).unwrap();
    assert_eq!(reloaded.messages.len(), 2);
    assert!(reloaded.warnings.is_empty());
    assert!(d.join("s.jsonl.corrupt").exists());
}

#[test]
fn nul_block_is_skipped_and_later_entries_load() {
    // SESS-02
    let d = tmp("nul");
    let p = d.join("s.jsonl");
    std::fs::write(&p, fixture("SESS-02-nul-block.jsonl")).unwrap();
    let (_, loaded) = SessionWriter::open(&p).unwrap();
    assert_eq!(
        loaded.warnings,
        vec![format!("skipped 1 damaged line(s) in {}", p.display())]
    );
    assert_eq!(loaded.messages.len(), 3);
}

#[test]
fn older_files_are_rewritten_as_v3_with_a_backup_before_appending() {
    let d = tmp("migrate");
    let p = d.join("old.jsonl");
    let v1 = concat!(
        "{\"type\":\"session\",\"id\":\"old\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/ws\"}\n",
        "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:01.000Z\",\"message\":{\"role\":\"user\",\"content\":\"one\"}}\n",
        "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:02.000Z\",\"message\":{\"role\":\"hookMessage\",\"customType\":\"x\",\"content\":\"two\",\"display\":false}}\n"
    );
    std::fs::write(&p, v1).unwrap();
    let (mut w, loaded) = SessionWriter::open(&p).unwrap();
    assert_eq!(loaded.messages.len(), 2);
    let backup = d.join("old.jsonl.v1.bak");
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), v1);
    assert!(
        loaded.warnings.iter().any(|w| w.contains("rewrote")),
        "{:?}",
        loaded.warnings
    );
    w.append_message(&Message::user_text("three")).unwrap();
    drop(w);
    let lines: Vec<Value> = std::fs::read_to_string(&p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["version"], 3);
    assert_eq!(lines[1]["id"], "00000001");
    assert_eq!(lines[2]["parentId"], "00000001");
    assert_eq!(lines[2]["message"]["role"], "custom");
    assert_eq!(lines[3]["parentId"], lines[2]["id"]);
    // Reopened: no second migration, the three messages on one path.
    let (_, again) = SessionWriter::open(&p).unwrap();
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    assert_eq!(again.messages.len(), 3);
}

#[test]
fn large_images_are_stored_once_beside_the_session() {
    use base64::Engine as _;
    let d = tmp("assets");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
    w.set_image_options(ImageOptions {
        storage: ImageStorage::Assets,
        keep_turns: None,
    });
    let bytes: Vec<u8> = (0..600_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let msg: Message = serde_json::from_value(json!({"role":"user","content":[
        {"type":"text","text":"what is in this screenshot?"},
        {"type":"image","data":data,"mimeType":"image/png"}],"timestamp":1}))
    .unwrap();
    let small: Message = serde_json::from_value(json!({"role":"user","content":[
        {"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}],"timestamp":2}))
    .unwrap();
    w.append_message(&msg).unwrap();
    w.append_message(&msg).unwrap();
    w.append_message(&small).unwrap();
    // The writer's own context keeps the whole image.
    assert_eq!(w.context().messages[0], msg);
    let path = w.path().to_path_buf();
    drop(w);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.len() < 4_000, "lines stay small: {} bytes", text.len());
    let assets: Vec<PathBuf> = std::fs::read_dir(d.join(ASSETS_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(assets.len(), 1, "stored once: {assets:?}");
    assert_eq!(std::fs::read(&assets[0]).unwrap(), bytes);
    assert!(text.contains("iVBORw0KGgo="), "small images stay inline");
    let assets_opts = ImageOptions {
        storage: ImageStorage::Assets,
        keep_turns: None,
    };
    // Opened with assets storage: read back, the file as it is.
    let (w, loaded) = SessionWriter::open_with(&path, assets_opts).unwrap();
    assert_eq!(
        loaded.messages,
        vec![msg.clone(), msg.clone(), small.clone()]
    );
    assert_eq!(loaded.warnings, Vec::<String>::new());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    // A fork or clone with inline storage writes the images inline, as Pi reads them; the
    // original file is not changed.
    let fork_dir = tmp("assets-fork");
    let (fork, forked) = SessionWriter::fork_from_with(
        &path,
        &loaded.tree,
        &fork_dir,
        None,
        ImageOptions::default(),
    )
    .unwrap();
    assert_eq!(
        forked.messages,
        vec![msg.clone(), msg.clone(), small.clone()]
    );
    let contents = |file: &Path| -> Vec<Value> {
        std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["type"] == "message")
            .map(|v| v["message"]["content"].clone())
            .collect()
    };
    let inline = json!([{"type":"text","text":"what is in this screenshot?"},
        {"type":"image","data":data,"mimeType":"image/png"}]);
    assert_eq!(contents(fork.path())[..2], [inline.clone(), inline.clone()]);
    assert!(!std::fs::read_to_string(fork.path())
        .unwrap()
        .contains(ASSET_FIELD));
    assert!(!fork_dir.join(ASSETS_DIR).exists());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    drop((w, fork));

    // A missing asset becomes a visible text block and a warning, never an empty image;
    // such a file is not rewritten.
    let kept = d.join("kept.png");
    std::fs::rename(&assets[0], &kept).unwrap();
    let (tree, warnings) = read_tree(&path, false).unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    match &tree.context(None).messages[0] {
        Message::User(u) => assert!(u.content.to_text().contains("is missing]")),
        m => panic!("{m:?}"),
    }
    drop(SessionWriter::open(&path).unwrap());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    std::fs::rename(&kept, &assets[0]).unwrap();

    // Opened for appending with inline storage (the default), the file is written again
    // with its images inline, once (the original kept beside it), so Pi can resume it.
    let (mut w, loaded) = SessionWriter::open(&path).unwrap();
    assert_eq!(
        loaded.messages,
        vec![msg.clone(), msg.clone(), small.clone()]
    );
    let backup = path.with_extension("jsonl.assets.bak");
    assert_eq!(
        loaded.warnings,
        vec![format!(
            "rewrote {} with the 2 image line(s) kept in assets/ inline, as Pi reads them; the original is kept at {}",
            path.display(),
            backup.display()
        )]
    );
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), text);
    assert_eq!(
        contents(&path),
        vec![
            inline.clone(),
            inline,
            serde_json::to_value(&small).unwrap()["content"].clone()
        ]
    );
    w.append_message(&Message::user_text("after")).unwrap();
    drop(w);
    let (_, again) = SessionWriter::open(&path).unwrap();
    assert_eq!(again.warnings, Vec::<String>::new());
    assert_eq!(again.messages.len(), 4);
}

/// A user message with `text` and an image of `n` pseudo-random bytes (base64 over the
/// loader's keep limit).
fn image_message(text: &str, n: usize, seed: u8, ts: i64) -> Message {
    use base64::Engine as _;
    let bytes: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    serde_json::from_value(json!({"role":"user","content":[
        {"type":"text","text":text},
        {"type":"image","data":data,"mimeType":"image/png"}],"timestamp":ts}))
    .unwrap()
}

#[test]
fn images_are_written_inline_by_default_as_pi_writes_them() {
    let d = tmp("inline");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
    assert_eq!(w.image_options(), ImageOptions::default());
    let msg = image_message("look", 600_000, 1, 1);
    w.append_message(&msg).unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Exactly Pi's shape: the base64 in `data`, nothing else beside it.
    assert_eq!(
        lines[3]["message"],
        json!({"role":"user","content":serde_json::to_value(&msg).unwrap()["content"],"timestamp":1})
    );
    assert_eq!(
        lines[3]["message"]["content"][1]["data"]
            .as_str()
            .unwrap()
            .len(),
        800_000
    );
    assert!(!d.join(ASSETS_DIR).exists());
    let (_, loaded) = SessionWriter::open(&path).unwrap();
    assert_eq!(loaded.messages, vec![msg]);
}

#[test]
fn opening_keeps_the_images_of_the_last_turns_only() {
    let d = tmp("window");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
    let msgs: Vec<Message> = (0..5)
        .map(|i| image_message(&format!("turn {i}"), 30_000, i as u8, i))
        .collect();
    for m in &msgs {
        w.append_message(m).unwrap();
        w.append_message(&Message::Assistant(pi_ai::AssistantMessage::empty(
            "openai-completions",
            "mock",
            "m1",
        )))
        .unwrap();
    }
    let path = w.path().to_path_buf();
    drop(w);
    let dropped = |i: i64| -> Message {
        serde_json::from_value(json!({"role":"user","content":[
            {"type":"text","text":format!("turn {i}")},
            {"type":"text","text":IMAGE_DROPPED_NOTE}],"timestamp":i}))
        .unwrap()
    };
    let users = |l: &LoadedSession| -> Vec<Message> {
        l.messages
            .iter()
            .filter(|m| matches!(m, Message::User(_)))
            .cloned()
            .collect()
    };
    let two = ImageOptions {
        storage: ImageStorage::Inline,
        keep_turns: Some(2),
    };
    let (w, loaded) = SessionWriter::open_with(&path, two).unwrap();
    assert_eq!(
        users(&loaded),
        vec![
            dropped(0),
            dropped(1),
            dropped(2),
            msgs[3].clone(),
            msgs[4].clone()
        ]
    );
    assert_eq!(w.image_options(), two);
    // The file keeps every image; the view a client is shown too.
    assert_eq!(
        w.context()
            .messages
            .into_iter()
            .filter(|m| matches!(m, Message::User(_)))
            .collect::<Vec<_>>(),
        msgs
    );
    // The context an agent is given later (after a compaction, a rewind) is the one loaded.
    assert_eq!(w.agent_context().messages, loaded.messages);
    drop(w);
    // A deferred open builds the same context on first use, reading the images before the
    // window without their bytes (case SESS-05: the older images are never all in memory).
    let (w, deferred) = SessionWriter::open_deferred(&path, two).unwrap();
    assert!(deferred.messages.is_empty());
    assert_eq!(w.agent_context().messages, loaded.messages);
    let image_bytes: Vec<Vec<usize>> = w
        .tree()
        .context_windowed(w.leaf(), Some(2))
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(match &u.content {
                pi_ai::UserContent::Blocks(b) => b
                    .iter()
                    .filter_map(|b| match b {
                        pi_ai::ContentBlock::Image(i) => Some(i.data.len()),
                        _ => None,
                    })
                    .collect(),
                pi_ai::UserContent::Text(_) => Vec::new(),
            }),
            _ => None,
        })
        .collect();
    let whole = match &msgs[4] {
        Message::User(u) => match &u.content {
            pi_ai::UserContent::Blocks(b) => match &b[1] {
                pi_ai::ContentBlock::Image(i) => i.data.len(),
                _ => unreachable!(),
            },
            pi_ai::UserContent::Text(_) => unreachable!(),
        },
        _ => unreachable!(),
    };
    assert_eq!(
        image_bytes,
        [vec![0], vec![0], vec![0], vec![whole], vec![whole]]
    );
    // Without a window, every image is read whole, as the file holds it.
    assert_eq!(w.tree().context_windowed(w.leaf(), None), w.context());
    drop(w);
    let every = ImageOptions {
        storage: ImageStorage::Inline,
        keep_turns: None,
    };
    let (_, loaded) = SessionWriter::open_with(&path, every).unwrap();
    assert_eq!(users(&loaded), msgs);
    // The window on a live context: the same result, idempotent; an empty image is never
    // sent.
    let mut live = loaded.messages.clone();
    assert_eq!(image_window(&mut live, Some(2)), 3);
    assert_eq!(image_window(&mut live, Some(2)), 0);
    let mut empty = vec![image_message("e", 0, 0, 9)];
    assert_eq!(image_window(&mut empty, None), 1);
    assert_eq!(
        empty,
        vec![
            serde_json::from_value::<Message>(json!({"role":"user","content":[
        {"type":"text","text":"e"},{"type":"text","text":IMAGE_DROPPED_NOTE}],"timestamp":9}))
            .unwrap()
        ]
    );
}

#[test]
fn image_settings_are_read_with_their_defaults() {
    let read = |v: Value| ImageOptions::from_settings(v.as_object().unwrap());
    assert_eq!(read(json!({})), (ImageOptions::default(), vec![]));
    assert_eq!(
        read(json!({"sessions": {"imageStorage": "assets", "imageTurns": 0}})),
        (
            ImageOptions {
                storage: ImageStorage::Assets,
                keep_turns: None
            },
            vec![]
        )
    );
    assert_eq!(
        read(json!({"sessions": {"imageStorage": "disk", "imageTurns": -1}})),
        (
            ImageOptions::default(),
            vec![
                "settings: sessions.imageStorage must be \"inline\" or \"assets\", not \"disk\""
                    .to_string(),
                "settings: sessions.imageTurns must be a whole number (0: every image), not -1"
                    .to_string()
            ]
        )
    );
}

#[test]
fn entries_read_their_lines_from_the_file_and_a_changed_line_reads_empty() {
    let d = tmp("changed");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
    let a = w.append_message(&Message::user_text("first")).unwrap();
    w.append_message(&Message::user_text("second")).unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let text = std::fs::read_to_string(&path).unwrap();
    let (tree, _) = read_tree(&path, false).unwrap();
    let stored: Vec<_> = tree.entries.iter().map(|e| e.text()).collect();
    assert_eq!(stored, text.lines().skip(1).collect::<Vec<_>>());
    // Another program rewrites the first message in place (same length): that entry's text
    // is gone, nothing panics, the others still read.
    std::fs::write(&path, text.replace("\"first\"", "\"FIRST\"")).unwrap();
    let e = tree.get(&a).unwrap();
    assert_eq!(e.text(), "");
    assert_eq!(e.raw(), Value::Null);
    assert_eq!(e.message(), None);
    assert_eq!(tree.entries[3].text(), text.lines().nth(4).unwrap());
    // A context built from the file (its lines read back in runs) leaves that message out
    // and keeps the others.
    assert_eq!(
        tree.context(None).messages,
        vec![Message::User(pi_ai::UserMessage {
            content: pi_ai::UserContent::Blocks(vec![pi_ai::ContentBlock::text("second")]),
            timestamp: tree.entries[3].message().map_or(0, |m| match m {
                Message::User(u) => u.timestamp,
                _ => 0,
            }),
        })]
    );
    // Cut short: the last entry is gone too.
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    assert_eq!(tree.entries[3].text(), "");
}

#[test]
fn messages_taken_from_loading_equal_the_context_built_from_the_tree_at_every_leaf() {
    let d = tmp("parsed");
    let p = d.join("s.jsonl");
    let user = |id: &str, parent: Option<&str>, text: &str| json!({"type":"message","id":id,"parentId":parent,"message":{"role":"user","content":text,"timestamp":1}});
    let assistant = |id: &str, parent: &str, model: &str| json!({"type":"message","id":id,"parentId":parent,"message":{"role":"assistant","content":[{"type":"text","text":id}],"provider":"p","model":model,"stopReason":"stop","timestamp":2}});
    let lines = [
        json!({"type":"session","version":3,"id":"s","cwd":"/ws"}),
        json!({"type":"model_change","id":"m0","parentId":null,"provider":"p","modelId":"m0"}),
        json!({"type":"thinking_level_change","id":"t0","parentId":"m0","thinkingLevel":"high"}),
        user("a", Some("t0"), "one"),
        assistant("b", "a", "m1"),
        user("c", Some("b"), "off the later branch"),
        assistant("d", "c", "m2"),
        user("e", Some("b"), "two"),
        json!({"type":"custom_message","id":"x","parentId":"e","customType":"ext","content":"note","display":true}),
        assistant("f", "x", "m3"),
        json!({"type":"compaction","id":"k","parentId":"d","summary":"sum","firstKeptEntryId":"c","tokensBefore":9}),
        user("g", Some("k"), "after compaction"),
        json!({"type":"message","id":"h","parentId":"e","message":{"role":"bashExecution","command":"ls","output":"","exitCode":0,"excludeFromContext":true}}),
        user("i", Some("h"), "three"),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&p, text).unwrap();
    let loaded = load_file(&p, false, false).unwrap();
    let deferred = load_file(&p, false, true).unwrap();
    assert!(deferred.messages.is_none());
    let ids: Vec<String> = loaded
        .tree
        .entries
        .iter()
        .map(|e| e.id.to_string())
        .collect();
    assert_eq!(ids.len(), lines.len() - 1);
    for id in &ids {
        let again = load_file(&p, false, false).unwrap();
        let taken = again.tree.context_parsed(Some(id), again.messages.unwrap());
        let built = loaded.tree.context(Some(id));
        assert_eq!(taken, built, "leaf {id}");
        // A deferred load counts the same context without building it, and builds the
        // same one from the file.
        assert_eq!(
            deferred.tree.message_count(Some(id)),
            built.messages.len(),
            "leaf {id}"
        );
        assert_eq!(deferred.tree.context(Some(id)), built, "leaf {id}");
        let settings = deferred.tree.settings(Some(id));
        assert_eq!(
            (settings.model, settings.thinking_level),
            (built.model, built.thinking_level),
            "leaf {id}"
        );
    }
    let at_i = loaded.tree.context(Some("i"));
    assert_eq!(at_i.messages.len(), 4);
    assert_eq!(at_i.model, Some(("p".into(), "m1".into())));
    assert_eq!(at_i.thinking_level.as_deref(), Some("high"));
}

/// A session of the entry shapes Pi writes beside plain read rounds: thinking, several
/// blocks and calls per answer, bash results with details, edits, images, user strings,
/// labels, model and thinking changes, a compaction, a branch summary, custom and
/// extended-role messages, side branches, a result under the wrong entry (PAIR-02), a
/// message whose role is not its first key, a damaged line.
fn mixed_session() -> Vec<u8> {
    let usage = json!({"input":3,"output":120,"cacheRead":20000,"cacheWrite":512,"totalTokens":20635,"cost":{"input":0.000009,"output":0.0018,"cacheRead":0.006,"cacheWrite":0.00192,"total":0.009729}});
    let img = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let msg = |id: &str, parent: &str, m: Value| json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:00.000Z","message":m});
    let answer = |content: Value, model: &str, stop: &str| json!({"role":"assistant","content":content,"api":"anthropic-messages","provider":"anthropic","model":model,"usage":usage,"stopReason":stop,"timestamp":2});
    let result = |call: &str, tool: &str, content: Value, details: Value| json!({"role":"toolResult","toolCallId":call,"toolName":tool,"content":content,"details":details,"isError":false,"timestamp":3});
    let lines = [
        json!({"type":"session","version":3,"id":"mixed","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/ws"}),
        json!({"type":"model_change","id":"m0","parentId":null,"provider":"anthropic","modelId":"claude-a"}),
        json!({"type":"thinking_level_change","id":"t0","parentId":"m0","thinkingLevel":"medium"}),
        msg(
            "u1",
            "t0",
            json!({"role":"user","content":"fix the build \"now\"\n","timestamp":1}),
        ),
        msg(
            "a1",
            "u1",
            answer(
                json!([{"type":"thinking","thinking":"look first","thinkingSignature":"sig"},{"type":"text","text":"Reading."},{"type":"toolCall","id":"toolu_1","name":"read","arguments":{"path":"a.rs"}},{"type":"toolCall","id":"toolu_2","name":"bash","arguments":{"command":"cargo build 2>&1 | tail -5"}}]),
                "claude-a",
                "toolUse",
            ),
        ),
        msg(
            "r1",
            "a1",
            result(
                "toolu_1",
                "read",
                json!([{"type":"text","text":"fn main() {}\n"}]),
                Value::Null,
            ),
        ),
        msg(
            "r2",
            "r1",
            result(
                "toolu_2",
                "bash",
                json!([{"type":"text","text":"error[E0425]\n\nCommand exited with code 101"}]),
                json!({"exitCode":101,"truncation":null}),
            ),
        ),
        json!({"type":"label","id":"l1","parentId":"r2","targetId":"a1","label":"first try"}),
        msg(
            "a2",
            "l1",
            answer(
                json!([{"type":"toolCall","id":"toolu_3","name":"edit","arguments":{"path":"a.rs","oldText":"fn main() {}","newText":"fn main() { run(); }"}}]),
                "claude-a",
                "toolUse",
            ),
        ),
        msg(
            "r3",
            "a2",
            result(
                "toolu_3",
                "edit",
                json!([{"type":"text","text":"Successfully replaced text in a.rs."}]),
                json!({"diff":"-1 fn main() {}\n+1 fn main() { run(); }","firstChangedLine":1}),
            ),
        ),
        msg(
            "u2",
            "r3",
            json!({"role":"user","content":[{"type":"text","text":"and this screenshot?"},{"type":"image","data":img,"mimeType":"image/png"}],"timestamp":4}),
        ),
        json!({"type":"model_change","id":"m1","parentId":"u2","provider":"openai","modelId":"gpt-b"}),
        msg(
            "a3",
            "m1",
            json!({"role":"assistant","content":[{"type":"thinking","thinking":"","thinkingSignature":"opaque","redacted":true},{"type":"text","text":"A chart.","textSignature":"ts"},{"type":"toolCall","id":"call_4","name":"read","arguments":{"path":"chart.png"}}],"api":"openai-responses","provider":"openai","model":"gpt-b","usage":usage,"stopReason":"toolUse","responseId":"resp_1","timestamp":5}),
        ),
        msg(
            "r4",
            "a3",
            result(
                "call_4",
                "read",
                json!([{"type":"text","text":"Read image file [image/png]"},{"type":"image","data":img,"mimeType":"image/png"}]),
                Value::Null,
            ),
        ),
        // A side branch from a1's results, with a user shell command and an extension's message.
        msg(
            "u3",
            "r2",
            json!({"role":"user","content":"try another way","timestamp":6}),
        ),
        msg(
            "x1",
            "u3",
            json!({"role":"bashExecution","command":"ls","output":"a.rs\n","exitCode":0,"cancelled":false,"truncated":false,"timestamp":7}),
        ),
        msg(
            "x2",
            "x1",
            json!({"role":"bashExecution","command":"env","output":"SECRET","exitCode":0,"excludeFromContext":true,"timestamp":7}),
        ),
        msg(
            "x3",
            "x2",
            json!({"role":"custom","customType":"ext","content":"a note","display":true,"timestamp":8}),
        ),
        json!({"type":"custom_message","id":"cm","parentId":"x3","customType":"ext","content":[{"type":"text","text":"shown"}],"display":true,"timestamp":"2026-01-01T00:00:01.000Z"}),
        msg(
            "a4",
            "cm",
            answer(
                json!([{"type":"text","text":"Done another way."}]),
                "claude-a",
                "stop",
            ),
        ),
        // Back on the main branch: a branch summary, a compaction, a message with its role
        // later, an aborted answer and a result attached under the wrong entry.
        json!({"type":"branch_summary","id":"bs","parentId":"r4","fromId":"a4","summary":"tried ls","timestamp":"2026-01-01T00:00:02.000Z"}),
        json!({"type":"compaction","id":"k1","parentId":"bs","summary":"built, edited, looked at a chart","firstKeptEntryId":"u2","tokensBefore":50000,"timestamp":"2026-01-01T00:00:03.000Z"}),
        msg(
            "u4",
            "k1",
            json!({"content":"role later","role":"user","timestamp":9}),
        ),
        msg(
            "a5",
            "u4",
            json!({"role":"assistant","content":[{"type":"toolCall","id":"call_5","name":"bash","arguments":{"command":"sleep 100"}}],"api":"x","provider":"openai","model":"gpt-b","stopReason":"aborted","errorMessage":"Request was aborted","timestamp":10}),
        ),
        msg(
            "u5",
            "a5",
            json!({"role":"user","content":"never mind","timestamp":11}),
        ),
        msg(
            "r5",
            "u5",
            result(
                "call_5",
                "bash",
                json!("Command aborted"),
                json!({"exitCode":null}),
            ),
        ),
        msg(
            "a6",
            "r5",
            answer(
                json!([{"type":"text","text":"ok"},{"type":"text","text":"two blocks"}]),
                "gpt-b",
                "stop",
            ),
        ),
    ];
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    text.insert_str(
        text.find("{\"type\":\"label\"").unwrap(),
        "{\"type\":\"message\",\"id\":\n",
    );
    text.into_bytes()
}

/// Every recorded file (damaged, mispaired, written by Pi, compacted, v1) opened with its
/// context deferred: the same tree, warnings, model and thinking level as an open that
/// builds it, no messages held, the context counted without building it and built the same
/// from the file later.
#[test]
fn a_deferred_open_gives_what_an_open_gives_when_the_context_is_built() {
    let d = tmp("deferred");
    let root = format!("{}/../../fixtures", env!("CARGO_MANIFEST_DIR"));
    let v1 = concat!(
        "{\"type\":\"session\",\"id\":\"old\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/ws\"}\n",
        "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:01.000Z\",\"message\":{\"role\":\"user\",\"content\":\"one\"}}\n",
        "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:02.000Z\",\"message\":{\"role\":\"hookMessage\",\"customType\":\"x\",\"content\":\"two\",\"display\":false}}\n"
    );
    let mut files: Vec<(String, Vec<u8>)> = [
        "cases/SESS-01-torn-tail.jsonl",
        "cases/SESS-02-nul-block.jsonl",
        "cases/PAIR-01-1.jsonl",
        "cases/PAIR-02-1.jsonl",
        "sessions/compacted-branches.jsonl",
        "sessions/pi-0.73.1-anthropic-read.jsonl",
        "sessions/pi-0.73.1-openai-read.jsonl",
        "sessions/pi-0.73.1-tools.jsonl",
    ]
    .iter()
    .map(|f| (f.to_string(), std::fs::read(format!("{root}/{f}")).unwrap()))
    .collect();
    // PAIR-02's case is entries only: behind a header and the user entry it names.
    for (name, bytes) in files.iter_mut() {
        if name.contains("PAIR-02") {
            let head = concat!(
                "{\"type\":\"session\",\"version\":3,\"id\":\"p2\",\"cwd\":\"/ws\"}\n",
                "{\"type\":\"message\",\"id\":\"u0\",\"parentId\":null,\"message\":{\"role\":\"user\",\"content\":\"start\"}}\n"
            );
            bytes.splice(0..0, head.bytes());
        }
    }
    files.push(("v1".into(), v1.as_bytes().to_vec()));
    files.push(("mixed".into(), mixed_session()));
    for (n, (name, bytes)) in files.iter().enumerate() {
        let (a, b) = (d.join(format!("{n}a.jsonl")), d.join(format!("{n}b.jsonl")));
        std::fs::write(&a, bytes).unwrap();
        std::fs::write(&b, bytes).unwrap();
        let (wa, built) = SessionWriter::open(&a).unwrap();
        let (wb, deferred) = SessionWriter::open_deferred(&b, ImageOptions::default()).unwrap();
        assert!(deferred.deferred && !built.deferred, "{name}");
        assert!(deferred.messages.is_empty(), "{name}");
        let renamed = |w: &[String]| -> Vec<String> {
            w.iter()
                .map(|s| s.replace(&format!("{n}b.jsonl"), &format!("{n}a.jsonl")))
                .collect()
        };
        assert_eq!(renamed(&deferred.warnings), built.warnings, "{name}");
        assert_eq!(
            (&deferred.model, &deferred.thinking_level, &deferred.name),
            (&built.model, &built.thinking_level, &built.name),
            "{name}"
        );
        assert_eq!(wb.leaf(), wa.leaf(), "{name}");
        assert_eq!(
            wb.tree().message_count(wb.leaf()),
            built.messages.len(),
            "{name}"
        );
        assert_eq!(wb.context().messages, built.messages, "{name}");
        if name == "mixed" {
            // The damaged line skipped, r5 read under the call it answers.
            assert_eq!(
                built.warnings,
                [
                    format!("skipped 1 damaged line(s) in {}", a.display()),
                    "tool result r5 (call call_5) was attached under u5, not under the message that called it; it is read under a5".into()
                ],
                "{name}"
            );
            // The compaction's summary; u2, a3, r4 kept; the branch summary; after the
            // compaction u4, a5, r5 (u5 is off the branch now), a6.
            assert_eq!(built.messages.len(), 9, "{name}");
        }
        // At every leaf: the count without building, and the context built from the file.
        for e in &wa.tree().entries {
            let full = wa.tree().context(Some(&e.id));
            let leaf = Some(e.id.as_str());
            assert_eq!(
                wb.tree().message_count(leaf),
                full.messages.len(),
                "{name} at {}",
                e.id
            );
            assert_eq!(wb.tree().context(leaf), full, "{name} at {}", e.id);
        }
        let ids = |w: &SessionWriter| -> Vec<(String, Option<String>)> {
            w.tree()
                .entries
                .iter()
                .map(|e| (e.id.to_string(), e.parent_id.as_deref().map(str::to_string)))
                .collect()
        };
        assert_eq!(ids(&wb), ids(&wa), "{name}");
        assert_eq!(
            std::fs::read(&b).unwrap(),
            std::fs::read(&a).unwrap(),
            "{name}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn pi_sessions_dir_is_named_as_pi_names_it() {
    assert_eq!(
        pi_sessions_dir(Path::new("/home/u/.pi/agent"), Path::new("/work/my-app")),
        PathBuf::from("/home/u/.pi/agent/sessions/--work-my-app--")
    );
}

#[test]
fn created_file_has_pi_shape_and_reopens() {
    let d = tmp("create");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
    let a = w.append_message(&Message::user_text("hello")).unwrap();
    let text = std::fs::read_to_string(w.path()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["version"], 3);
    assert_eq!(lines[1]["type"], "model_change");
    assert_eq!(lines[1]["parentId"], Value::Null);
    assert_eq!(lines[2]["parentId"], lines[1]["id"]);
    assert_eq!(lines[3]["id"], a.as_str());
    assert_eq!(lines[3]["parentId"], lines[2]["id"]);
    assert_eq!(a.len(), 8);
    assert_eq!(
        std::fs::read_to_string(d.join(".gitignore")).unwrap(),
        SESSIONS_GITIGNORE
    );
    let (path, id) = (w.path().to_path_buf(), w.id().to_string());
    drop(w); // one writer per file: the first lets go of its lock
    let (_, loaded) = SessionWriter::open(&path).unwrap();
    assert_eq!(loaded.model, Some(("mock".into(), "m1".into())));
    assert_eq!(find_session_file(&d, &id).as_deref(), Some(path.as_path()));
    // A file renamed by hand is found by its header's id, as the session list shows it.
    let renamed = d.join("copied-by-hand.jsonl");
    std::fs::write(
        &renamed,
        "{\"type\":\"session\",\"version\":3,\"id\":\"s1\",\"cwd\":\"/tmp/p\"}\n",
    )
    .unwrap();
    assert_eq!(find_session_file(&d, "s1"), Some(renamed));
    assert_eq!(find_session_file(&d, "s2"), None);
}

#[test]
fn a_context_read_back_in_runs_on_several_threads_equals_one_read_per_entry() {
    let d = tmp("runs");
    let p = d.join("s.jsonl");
    // The mixed shapes, then many read rounds after them (lines far apart and close).
    let mut bytes = mixed_session();
    let last = String::from_utf8_lossy(&bytes)
        .lines()
        .rev()
        .find_map(|l| {
            serde_json::from_str::<Value>(l).ok()?["id"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap();
    let mut parent = last;
    for k in 0..300 {
        let text = "x".repeat(k * 37 % 3000);
        for (id, m) in [
            (
                format!("ra{k}"),
                json!({"role":"assistant","content":[{"type":"toolCall","id":format!("c{k}"),"name":"read","arguments":{"path":"a"}}],"provider":"p","model":"m","stopReason":"toolUse","timestamp":k}),
            ),
            (
                format!("rr{k}"),
                json!({"role":"toolResult","toolCallId":format!("c{k}"),"toolName":"read","content":[{"type":"text","text":text}],"isError":false,"timestamp":k}),
            ),
        ] {
            let line = json!({"type":"message","id":id,"parentId":parent,"message":m});
            bytes.extend_from_slice(format!("{line}\n").as_bytes());
            parent = id;
        }
    }
    std::fs::write(&p, &bytes).unwrap();
    for deferred in [false, true] {
        let l = load_file(&p, false, deferred).unwrap();
        for leaf in [parent.as_str(), "rr150", "a3"] {
            let Some(_) = l.tree.get(leaf) else { continue };
            let one_by_one: Vec<Option<Message>> =
                l.tree.path(leaf).iter().map(|e| e.message()).collect();
            assert!(one_by_one.iter().filter(|m| m.is_some()).count() > 0);
            for parallel in [0, 1, 4096, usize::MAX] {
                assert_eq!(
                    tree::read_path_messages(&l.tree, leaf, parallel),
                    one_by_one,
                    "deferred {deferred}, leaf {leaf}, parallel from {parallel}"
                );
            }
        }
    }
}

#[test]
fn tool_results_are_told_apart_by_tool_without_reading_them() {
    let d = tmp("tool-is");
    let p = d.join("s.jsonl");
    std::fs::write(&p, mixed_session()).unwrap();
    let names = ["read", "bash", "edit", "write", "todo", ""];
    let check = |tree: &SessionTree, how: &str| {
        let mut results = 0;
        for e in &tree.entries {
            let raw = e.raw();
            let m = &raw["message"];
            for name in names {
                let want = raw["type"] == "message"
                    && m["role"] == "toolResult"
                    && m["toolName"].as_str().unwrap_or("") == name;
                assert_eq!(e.tool_is(name), want, "{how}: {} as {name:?}", e.id);
            }
            results += usize::from(m["role"] == "toolResult");
        }
        assert!(results > 3, "{how}");
    };
    for deferred in [false, true] {
        let l = load_file(&p, false, deferred).unwrap();
        check(&l.tree, if deferred { "deferred" } else { "loaded" });
    }
    // Entries appended here know it too.
    let d2 = tmp("tool-is-w");
    let mut w = SessionWriter::create(&d2, Path::new("/ws"), "mock", "m1", "off").unwrap();
    w.append_message(&Message::user_text("go")).unwrap();
    let message = |v: Value| serde_json::from_value::<Message>(v).unwrap();
    w.append_message(&message(json!({"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"todo","arguments":{"action":"list"}}],
        "api":"openai-completions","provider":"mock","model":"m1","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,
        "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"toolUse","timestamp":2})))
    .unwrap();
    w.append_message(&message(
        json!({"role":"toolResult","toolCallId":"t1","toolName":"todo",
        "content":[{"type":"text","text":"none"}],"isError":false,"timestamp":3}),
    ))
    .unwrap();
    let last = w.tree().entries.last().unwrap().clone();
    assert!(last.tool_is("todo") && !last.tool_is("read"));
    let user = &w.tree().entries[w.tree().entries.len() - 3];
    assert!(!user.tool_is("todo") && !user.tool_is(""));
}

/// A message the writer appends is entered in its tree as a parse of its line enters it
/// (the role, an assistant's provider, model and whole usage, a result's tool name, ids and
/// text), with the stamps and without, and as the file reads back.
#[test]
fn appended_messages_are_entered_as_their_lines_read() {
    let d = tmp("appended");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
    let message = |v: Value| serde_json::from_value::<Message>(v).unwrap();
    w.append_message(&Message::user_text("go")).unwrap();
    let mut stamps = serde_json::Map::new();
    stamps.insert("durationMs".into(), json!(12));
    stamps.insert("thinkingLevel".into(), json!("off"));
    w.append_message_stamped(
        &message(json!({"role":"assistant","content":[{"type":"text","text":"on it"},
            {"type":"toolCall","id":"t1","name":"read","arguments":{"path":"a"}}],
            "api":"openai-completions","provider":"mock","model":"m1","usage":{"input":70000,"output":3,
            "cacheRead":5,"cacheWrite":7,"cacheWrite1h":2,"reasoning":1,"totalTokens":70015,
            "cost":{"input":0.125,"output":0.5,"cacheRead":0.01,"cacheWrite":0.02,"total":0.655,
            "totalFromProvider":true}},"stopReason":"toolUse","timestamp":2})),
        stamps,
    )
    .unwrap();
    let mut stamps = serde_json::Map::new();
    stamps.insert("durationMs".into(), json!(3));
    w.append_message_stamped(
        &message(json!({"role":"toolResult","toolCallId":"t1","toolName":"read",
            "content":[{"type":"text","text":"a \"b\"\n"}],"details":{"x":[1]},"isError":false,"timestamp":3})),
        stamps,
    )
    .unwrap();
    w.append_message(&message(json!({"role":"assistant","content":[{"type":"text","text":"done"}],
        "api":"openai-completions","provider":"mock","model":"m1","usage":{"input":0,"output":0,"cacheRead":0,
        "cacheWrite":0,"totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},
        "stopReason":"stop","timestamp":4})))
    .unwrap();
    let view = |e: &Entry| {
        (
            e.id.to_string(),
            e.parent_id.as_ref().map(|p| p.to_string()),
            e.kind.to_string(),
            e.role().map(str::to_string),
            e.assistant().cloned(),
            e.tool_is("read"),
            e.text().into_owned(),
        )
    };
    // The file's first entries are the model and thinking level the writer was created with.
    let messages = |entries: &[Entry]| -> Vec<Entry> {
        entries
            .iter()
            .filter(|e| e.kind == "message")
            .cloned()
            .collect()
    };
    let appended: Vec<_> = messages(&w.tree().entries).iter().map(view).collect();
    assert_eq!(appended.len(), 4);
    let parsed: Vec<_> = messages(&w.tree().entries)
        .iter()
        .map(|e| view(&Entry::from_value(&e.raw()).unwrap()))
        .collect();
    assert_eq!(appended, parsed);
    assert_eq!(
        appended
            .iter()
            .map(|v| (v.3.as_deref(), v.4.is_some(), v.5))
            .collect::<Vec<_>>(),
        [
            (Some("user"), false, false),
            (Some("assistant"), true, false),
            (Some("toolResult"), false, true),
            (Some("assistant"), true, false),
        ]
    );
    let p = w.path().to_path_buf();
    drop(w);
    let loaded = load_file(&p, false, false).unwrap();
    let read: Vec<_> = messages(&loaded.tree.entries).iter().map(view).collect();
    assert_eq!(appended, read);
}

#[test]
fn ids_parent_ids_and_model_names_are_kept_inline_and_long_ones_whole() {
    // Pi's 8-hex ids: no allocation of their own per entry; an id longer than 24 bytes is
    // kept whole all the same, and so is a long model name.
    let d = tmp("inline");
    let p = d.join("s.jsonl");
    let long_id = "an-id-written-by-another-tool-0123456789";
    let long_model = "a-model-name-longer-than-twenty-four-bytes";
    let lines = [
        json!({"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/ws"}),
        json!({"type":"message","id":"0000a1b2","parentId":null,"timestamp":"t","message":{"role":"user","content":"go","timestamp":1}}),
        json!({"type":"message","id":"0000a1b3","parentId":"0000a1b2","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"ok"}],
            "api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop","timestamp":2}}),
        json!({"type":"message","id":long_id,"parentId":"0000a1b3","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"ok"}],
            "api":"x","provider":"p","model":long_model,"stopReason":"stop","timestamp":3}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&p, text).unwrap();
    for deferred in [false, true] {
        let tree = load_file(&p, false, deferred).unwrap().tree;
        let got: Vec<(&str, Option<&str>, bool, bool)> = tree
            .entries
            .iter()
            .map(|e| {
                (
                    e.id.as_str(),
                    e.parent_id.as_deref(),
                    e.id.is_heap_allocated(),
                    e.parent_id.as_ref().is_some_and(|p| p.is_heap_allocated()),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("0000a1b2", None, false, false),
                ("0000a1b3", Some("0000a1b2"), false, false),
                (long_id, Some("0000a1b3"), true, false),
            ],
            "deferred: {deferred}"
        );
        let names: Vec<(Option<&str>, Option<&str>)> = tree
            .entries
            .iter()
            .filter_map(|e| e.assistant())
            .map(|a| (a.provider(), a.model()))
            .collect();
        assert_eq!(
            names,
            [
                (Some("anthropic"), Some("claude-sonnet-4-5")),
                (Some("p"), Some(long_model)),
            ],
            "deferred: {deferred}"
        );
        assert_eq!(tree.path(long_id).len(), 3);
    }
}

/// What an assistant entry keeps of its message reads back as stored: names (shared by the
/// messages that repeat them, distinct where they differ), no usage, a usage whose counts fit
/// in 32 bits and one whose counts do not, costs as written (fractions, negative zero), and Pi
/// 1.6's optional fields (`reasoning`, `cacheWrite1h`, `cost.totalFromProvider`) absent, at 0,
/// above 0, false and true.
#[test]
fn assistant_info_reads_back_what_was_stored() {
    let small = pi_ai::Usage {
        input: 100,
        output: 10,
        cache_read: u64::from(u32::MAX),
        cache_write: 0,
        cache_write_1h: None,
        reasoning: None,
        total_tokens: 110,
        cost: pi_ai::types::Cost {
            input: 0.000123,
            output: -0.0,
            cache_read: 1e-9,
            cache_write: 3.5,
            total: 7.0,
            total_from_provider: None,
        },
    };
    let big = pi_ai::Usage {
        input: u64::from(u32::MAX) + 1,
        total_tokens: u64::MAX,
        ..small.clone()
    };
    let with = |reasoning, long_write, from_provider| {
        let mut u = small.clone();
        u.reasoning = reasoning;
        u.cache_write_1h = long_write;
        u.cost.total_from_provider = from_provider;
        u
    };
    let pi16 = [
        with(Some(0), None, Some(false)),
        with(Some(0), Some(0), Some(true)),
        with(None, Some(0), Some(false)),
        with(Some(7), None, Some(false)),
        with(None, Some(3), None),
    ];
    for usage in [None, Some(small.clone()), Some(big.clone())]
        .into_iter()
        .chain(pi16.into_iter().map(Some))
    {
        let a = AssistantInfo::new(Some("anthropic"), Some("claude"), usage.clone());
        assert_eq!(a.usage(), usage);
        assert_eq!(
            a.usage().map(|u| u.cost.output.to_bits()),
            usage.map(|u| u.cost.output.to_bits())
        );
        assert_eq!(
            (a.provider(), a.model()),
            (Some("anthropic"), Some("claude"))
        );
    }
    let a = AssistantInfo::new(Some("p"), Some("m"), Some(small.clone()));
    let b = AssistantInfo::new(Some("p"), Some("m"), Some(small.clone()));
    let c = AssistantInfo::new(Some("p"), Some("m2"), Some(small.clone()));
    let d = AssistantInfo::new(None, Some("m2"), None);
    let none = AssistantInfo::new(None, None, None);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!((c.provider(), c.model()), (Some("p"), Some("m2")));
    assert_eq!(
        (d.provider(), d.model(), d.usage()),
        (None, Some("m2"), None)
    );
    assert_eq!(none, AssistantInfo::default());
    assert_eq!(
        (none.provider(), none.model(), none.usage()),
        (None, None, None)
    );
    assert_ne!(a, AssistantInfo::new(Some("p"), Some("m"), Some(big)));
}

/// A pass over a path whose question no entry's shape answers yes is not made
/// ([`SessionTree::may_hold`]), and finds what the walk finds: every kind a pass at open asks
/// for, before and after entries of that kind come, and after an entry is replaced by one of
/// another kind under its id.
#[test]
fn passes_no_entry_can_answer_are_skipped_and_find_what_the_walk_finds() {
    let asks = [
        "system",
        "custom",
        "toolResult:todo",
        "toolResult:read",
        "session_info",
        "compaction",
        "thinking_level_change",
        "assistant",
        "message",
    ];
    // What a caller keeps of what the pass gives: the entries of the kind (or role, or tool).
    let is = |e: &Entry, k: &str| match k.split_once(':') {
        Some(("toolResult", tool)) => e.kind == "message" && e.tool_is(tool),
        _ => e.kind == k || (e.kind == "message" && e.role() == Some(k)),
    };
    let check = |tree: &SessionTree, present: &[&str]| {
        let leaf = tree.last_id().unwrap().to_string();
        for k in asks {
            let test = EntryShape::kind_or_role_test(k);
            let got: Vec<&str> = tree
                .path_where(&leaf, test)
                .into_iter()
                .filter(|e| is(e, k))
                .map(|e| e.id.as_str())
                .collect();
            let want: Vec<&str> = tree
                .path(&leaf)
                .into_iter()
                .filter(|e| is(e, k))
                .map(|e| e.id.as_str())
                .collect();
            assert_eq!(got, want, "{k}");
            assert_eq!(tree.may_hold(test), present.contains(&k), "{k}");
        }
    };
    let mut tree = SessionTree::new(json!({"type": "session", "version": 3, "id": "s"}));
    let mut parent: Option<String> = None;
    let push = |tree: &mut SessionTree, parent: &mut Option<String>, id: &str, fields: Value| {
        let mut v = json!({"id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z"});
        v.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        tree.push_entry(Entry::from_value(&v).unwrap());
        *parent = Some(id.to_string());
    };
    push(
        &mut tree,
        &mut parent,
        "t",
        json!({"type": "thinking_level_change", "thinkingLevel": "off"}),
    );
    for n in 0..20 {
        push(
            &mut tree,
            &mut parent,
            &format!("a{n}"),
            json!({"type": "message", "message": {"role": "assistant", "content": [{"type": "toolCall", "id": format!("c{n}"), "name": "read", "arguments": {}}], "api": "x", "provider": "p", "model": "m", "stopReason": "toolUse", "timestamp": 1}}),
        );
        push(
            &mut tree,
            &mut parent,
            &format!("r{n}"),
            json!({"type": "message", "message": {"role": "toolResult", "toolCallId": format!("c{n}"), "toolName": "read", "content": [{"type": "text", "text": "x"}], "isError": false, "timestamp": 2}}),
        );
    }
    let mut present = vec![
        "thinking_level_change",
        "assistant",
        "message",
        "toolResult:read",
    ];
    check(&tree, &present);
    push(
        &mut tree,
        &mut parent,
        "sys",
        json!({"type": "message", "message": {"role": "system", "content": "p", "timestamp": 3}}),
    );
    push(
        &mut tree,
        &mut parent,
        "cu",
        json!({"type": "custom", "customType": "plan-mode", "data": {"enabled": false}}),
    );
    push(
        &mut tree,
        &mut parent,
        "todo",
        json!({"type": "message", "message": {"role": "toolResult", "toolCallId": "c99", "toolName": "todo", "content": [], "isError": false, "timestamp": 4}}),
    );
    push(
        &mut tree,
        &mut parent,
        "last",
        json!({"type": "message", "message": {"role": "user", "content": "go", "timestamp": 5}}),
    );
    present.extend(["system", "custom", "toolResult:todo"]);
    check(&tree, &present);
    // An entry replaced under its id by one of another kind: the new kind is found.
    parent = Some("r2".into());
    push(
        &mut tree,
        &mut parent,
        "a3",
        json!({"type": "session_info", "name": "renamed"}),
    );
    present.push("session_info");
    check(&tree, &present);
    assert_eq!(tree.name().as_deref(), Some("renamed"));
}

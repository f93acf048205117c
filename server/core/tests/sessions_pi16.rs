//! Session files written by Pi 1.6.0 (`fixtures/sessions/pi16/`): stored system messages, a
//! compaction with its `systemMessage` checkpoint and summary `usage`, `context_edit` entries
//! Pi writes itself after failed responses; and the same entries written here read back as Pi
//! replays them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use pi_ai::Message;
use pi_core::session::{context_agent_messages, read_tree, SessionWriter, SystemState};
use serde_json::{json, Value};

mod common;
use common::tmp_dir;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sessions/pi16")
        .join(name)
}

/// Pi 1.6's `get_messages` of the compacted file (recorded beside it) is exactly what the
/// message view gives: the checkpoint, the summary, the kept answer, the turn after; its
/// `messageCount` (5) is the count here; the model's context holds no system text.
#[test]
fn a_compacted_pi_16_file_reads_as_pi_16_shows_it() {
    let (tree, warnings) = read_tree(&fixture("pi-1.6.0-compacted.jsonl"), false).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let leaf = tree.last_id().map(str::to_string);
    let ours: Vec<Value> = context_agent_messages(&tree, leaf.as_deref())
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let pi: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("pi-1.6.0-compacted.get_messages.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(Value::Array(ours), pi["messages"]);
    assert_eq!(tree.agent_message_count(leaf.as_deref()), 5);
    let ctx = tree.context(leaf.as_deref());
    let roles: Vec<&str> = ctx
        .messages
        .iter()
        .map(|m| match m {
            Message::User(_) => "user",
            Message::Assistant(_) => "assistant",
            Message::ToolResult(_) => "toolResult",
            Message::System(_) => "system",
        })
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    let Message::User(summary) = &ctx.messages[0] else {
        unreachable!()
    };
    assert!(summary
        .content
        .to_text()
        .starts_with("The conversation history before this point was compacted"));
    // The replayed prompt is the checkpoint's: Pi's five sections and its four tools.
    let state = tree.system_state(leaf.as_deref());
    assert_eq!(
        state.sections.keys().collect::<Vec<_>>(),
        ["preamble", "tools", "rules", "docs", "cwd"]
    );
    assert_eq!(
        state.tools.keys().collect::<Vec<_>>(),
        ["read", "bash", "edit", "write"]
    );
    // Pi 1.6's session totals: four responses (1000 + 20 each) and the summary's 2000 + 40.
    let usage = pi_core::harness::file_usage(&tree);
    assert_eq!((usage.input, usage.output), (6000, 120));
}

/// Pi 1.6 leaves a failed response out of the context with a `context_edit` (replacement
/// null) before it retries: the model's context here leaves it out too, the message view
/// shows it as stored with the edit marked, and the count is Pi's (system + user).
#[test]
fn context_edits_pi_writes_leave_failed_responses_out_of_the_context() {
    let (tree, warnings) = read_tree(&fixture("pi-1.6.0-retry-context-edit.jsonl"), false).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let leaf = tree.last_id().map(str::to_string);
    let ctx = tree.context(leaf.as_deref());
    assert_eq!(ctx.messages.len(), 1);
    assert!(matches!(&ctx.messages[0], Message::User(u) if u.content.to_text() == "edit it"));
    assert_eq!(tree.agent_message_count(leaf.as_deref()), 2);
    let shown: Vec<(String, Value)> = context_agent_messages(&tree, leaf.as_deref())
        .into_iter()
        .map(|(id, m)| (id, m["contextEdit"].clone()))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("6c133ec6".to_string(), Value::Null),
            ("66c165fe".to_string(), Value::Null),
            (
                "62771907".to_string(),
                json!({"id": "650a029f", "replacement": null})
            ),
            (
                "25ec7849".to_string(),
                json!({"id": "1623789b", "replacement": null})
            ),
        ]
    );
    // Off the branch an edit does nothing: at the first failed answer (before its edit) the
    // answer is in the context again.
    assert_eq!(tree.context(Some("62771907")).messages.len(), 2);
}

/// Edits as Pi 1.6.0's `SessionManager.appendContextEdit` writes them (an extension's, recorded
/// from the real Pi): `replacement: {"content": blocks}` on the first prompt and on a tool
/// result, `null` on an answer. The model context is Pi's `get_messages` of the file (recorded
/// beside it), its count is Pi's, and the file opened for appending gives the same messages.
#[test]
fn pi_16s_content_replacements_apply_as_pi_16_applies_them() {
    let file = fixture("pi-1.6.0-context-edits.jsonl");
    let (tree, warnings) = read_tree(&file, false).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let leaf = tree.last_id().map(str::to_string);
    let pi: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("pi-1.6.0-context-edits.get_messages.json")).unwrap(),
    )
    .unwrap();
    // The model's context: Pi's messages with the edits applied (its stored system message is
    // the request's prompt, not a context message).
    let ctx = tree.context(leaf.as_deref());
    // Compared by what a request carries of each: role and content.
    let sent = |m: &Value| json!([m["role"], m["content"]]);
    let pi_context: Vec<Value> = pi["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(sent)
        .collect();
    let ours: Vec<Value> = ctx
        .messages
        .iter()
        .map(|m| sent(&serde_json::to_value(m).unwrap()))
        .collect();
    assert_eq!(ours.len(), 9);
    assert_eq!(ours, pi_context);
    assert_eq!(tree.agent_message_count(leaf.as_deref()), 10);
    // The message view shows each edited message as stored, the edit marked on it.
    let shown: Vec<Value> = context_agent_messages(&tree, leaf.as_deref())
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert_eq!(shown.len(), 11);
    assert_eq!(shown[1]["content"][0]["text"], "b1 prompt");
    assert_eq!(
        shown[1]["contextEdit"],
        json!({"id": "b47c93bb", "replacement": {"content": [{"type": "text", "text": "replaced first prompt"}]}})
    );
    assert_eq!(shown[3]["content"][0]["text"], "bee content\n");
    assert_eq!(shown[4]["contextEdit"]["replacement"], Value::Null);
    let d = tmp_dir("pi-core-pi16-content-edits-");
    let copy = d.join("s.jsonl");
    std::fs::copy(&file, &copy).unwrap();
    let (_, loaded) = SessionWriter::open(&copy).unwrap();
    assert_eq!(loaded.messages, ctx.messages);
}

/// A session list counts a Pi 1.6 file's messages as Pi 1.6's `SessionManager.list` (its
/// `--resume` picker) does: 11 for this file (its stored system message, four prompts, five
/// answers, one tool result), not its 16 entries.
#[test]
fn a_listed_pi_16_file_counts_its_messages_as_pi_16s_picker() {
    let d = tmp_dir("pi-core-pi16-list-");
    std::fs::copy(
        fixture("pi-1.6.0-context-edits.jsonl"),
        d.join("2026-12-06T13-05-52-489Z_01a24b75-f95e-705f-a0a3-04fdd8c6960b.jsonl"),
    )
    .unwrap();
    let listed = pi_core::session::list_sessions(&d);
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].id.as_str(),
            listed[0].message_count,
            listed[0].entry_count,
            listed[0].first_prompt.as_deref()
        ),
        (
            "01a24b75-f95e-705f-a0a3-04fdd8c6960b",
            11,
            16,
            Some("b1 prompt")
        )
    );
}

/// A replacement edit replaces the content only, the latest edit on the branch wins, and a
/// file opened for appending (the deferred load) counts as the built context does.
#[test]
fn replacement_edits_latest_wins_and_counts_agree() {
    let d = tmp_dir("pi-core-pi16-edits-");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "mock-1", "off").unwrap();
    let u = w
        .append_message(&Message::user_text("a long question"))
        .unwrap();
    w.append_raw(
        "context_edit",
        json!({"targetId": u, "replacement": "first edit"}),
    )
    .unwrap();
    w.append_raw(
        "context_edit",
        json!({"targetId": u, "replacement": [{"type": "text", "text": "short"}]}),
    )
    .unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let (tree, _) = read_tree(&path, false).unwrap();
    let ctx = tree.context(None);
    assert_eq!(
        serde_json::to_value(&ctx.messages[0]).unwrap()["content"],
        json!([{"type": "text", "text": "short"}])
    );
    assert_eq!(tree.message_count(None), 1);
    let (_, loaded) = SessionWriter::open(&path).unwrap();
    assert_eq!(loaded.messages, ctx.messages);
}

/// What the harness stores when a run's prompt or tools change replays, as Pi replays it, to
/// that prompt and those tools; a compaction's checkpoint stands for what it kept.
#[test]
fn stored_system_messages_replay_to_the_run_that_wrote_them() {
    let d = tmp_dir("pi-core-pi16-system-");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "mock-1", "off").unwrap();
    let spec = |n: &str| pi_ai::ToolSpec {
        constrained_sampling: None,
        name: n.into(),
        description: format!("{n} tool"),
        parameters: json!({"type": "object", "properties": {}}),
    };
    let first = SystemState::of_run("prompt one", None, &[spec("read"), spec("bash")]);
    let m = SystemState::default().patch_to(&first, 1).unwrap();
    w.append(pi_core::session::EntryData::Message {
        message: pi_core::session::StoredMessage::Json(m),
    })
    .unwrap();
    w.append_message(&Message::user_text("hi")).unwrap();
    let second = SystemState::of_run("prompt two", None, &[spec("read")]);
    let patch = w
        .tree()
        .system_state(w.leaf())
        .patch_to(&second, 2)
        .unwrap();
    assert_eq!(patch["sections"], json!({"prompt": "prompt two"}));
    assert_eq!(patch["toolsRemoved"], json!([{"name": "bash"}]));
    assert!(patch.get("toolsAdded").is_none());
    w.append(pi_core::session::EntryData::Message {
        message: pi_core::session::StoredMessage::Json(patch),
    })
    .unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let (tree, _) = read_tree(&path, false).unwrap();
    assert_eq!(tree.system_state(None), second);
    // Two stored system messages and one user message: Pi's count; the context: the user.
    assert_eq!(tree.agent_message_count(None), 3);
    assert_eq!(tree.context(None).messages.len(), 1);
}

/// Where a model that takes system messages mid-conversation gets them, on Pi 1.6's compacted
/// file with a patch appended after the compaction: the checkpoint leads (as pi-ai's
/// `getSystemMessageText` renders it: its sections joined by blank lines), the patch follows
/// the four context messages before it (summary, kept answer, the turn after); the system
/// message among the compacted entries is left out.
#[test]
fn system_layout_of_a_compacted_pi_file_leads_with_its_checkpoint() {
    let d = tmp_dir("pi-core-pi16-layout-");
    let file = d.join("s.jsonl");
    let mut text = std::fs::read_to_string(fixture("pi-1.6.0-compacted.jsonl")).unwrap();
    let patch = json!({"type": "message", "id": "aa000001", "parentId": "476b4031",
        "timestamp": "2026-12-05T12:10:00.000Z",
        "message": {"role": "system", "content": "", "sections": {"cwd": null, "rules": "R2"},
            "timestamp": 5}});
    let user = json!({"type": "message", "id": "aa000002", "parentId": "aa000001",
        "timestamp": "2026-12-05T12:10:01.000Z",
        "message": {"role": "user", "content": [{"type": "text", "text": "next"}], "timestamp": 6}});
    text.push_str(&format!("{patch}\n{user}\n"));
    std::fs::write(&file, text).unwrap();
    let (tree, _) = read_tree(&file, false).unwrap();
    let path = tree.path(tree.last_id().unwrap());
    let layout = pi_core::session::path_system_layout(&path);
    let checkpoint =
        path.iter().find(|e| e.kind == "compaction").unwrap().raw()["systemMessage"].clone();
    let sections: Vec<String> = checkpoint["sections"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(sections.len(), 5);
    assert_eq!(layout.leading, Some(sections.join("\n\n")));
    assert_eq!(
        layout.later,
        vec![(
            4,
            pi_ai::SystemMessage {
                content: String::new(),
                sections: vec![("cwd".into(), None), ("rules".into(), Some("R2".into()))],
            }
        )]
    );
    // The context: summary, kept answer, user, answer, then the user after the patch.
    assert_eq!(tree.context(None).messages.len(), 5);
}

/// Issue 29 item D: the context of a Pi 1.6 file says which messages carry usage counted
/// before the branch's latest `context_edit` or `compaction` (Pi 1.6's
/// `estimateProjectedContextTokens` does not anchor the threshold on it): after Pi's three
/// edits, the five messages before them (the omitted answer not among them); after Pi's
/// compaction, its summary and the kept answer; without either, none.
#[test]
fn a_pi_16_files_context_marks_usage_from_before_its_latest_edit() {
    let cases = [
        ("pi-1.6.0-context-edits.jsonl", None, (5, 9)),
        // At the answer before the edits: no edit on that path yet.
        ("pi-1.6.0-context-edits.jsonl", Some("86387cb4"), (0, 6)),
        ("pi-1.6.0-compacted.jsonl", None, (2, 4)),
        ("pi-1.6.0-compacted.jsonl", Some("68ac3920"), (0, 6)),
    ];
    for (file, leaf, want) in cases {
        let (tree, _) = read_tree(&fixture(file), false).unwrap();
        let ctx = tree.context(leaf);
        assert_eq!(
            (ctx.usage_from, ctx.messages.len()),
            want,
            "{file} at {leaf:?}"
        );
        assert_eq!(tree.usage_from(leaf), ctx.usage_from, "{file} at {leaf:?}");
    }
}

//! Session files: Pi's own files, the tree operations, durability rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use pi_ai::Message;
use pi_core::session::{list_sessions, read_tree, SessionError, SessionWriter};
use serde_json::{json, Value};

mod common;
use common::{tmp_dir, Tmp};

fn tmp(name: &str) -> Tmp {
    tmp_dir(&format!("pi-core-sessions-{name}-"))
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/sessions")
        .join(name)
}

fn shape(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m {
            Message::User(u) => format!("user:{}", u.content.to_text()),
            Message::Assistant(a) => format!("assistant:{}", a.text()),
            Message::ToolResult(r) => format!("result:{}", r.tool_call_id),
            Message::System(s) => format!("system:{}", s.update_text()),
        })
        .collect()
}

fn assistant(text: &str, calls: &[(&str, &str)], provider: &str, model: &str) -> Message {
    let mut content: Vec<Value> = Vec::new();
    if !text.is_empty() {
        content.push(json!({"type":"text","text":text}));
    }
    for (id, name) in calls {
        content.push(json!({"type":"toolCall","id":id,"name":name,"arguments":{}}));
    }
    serde_json::from_value(json!({"role":"assistant","content":content,"api":"x","provider":provider,"model":model,"stopReason": if calls.is_empty() {"stop"} else {"toolUse"}})).unwrap()
}

fn result(id: &str) -> Message {
    serde_json::from_value(json!({"role":"toolResult","toolCallId":id,"toolName":"read","content":[{"type":"text","text":"ok"}],"isError":false})).unwrap()
}

#[test]
fn files_written_by_pi_load_and_continue() {
    let d = tmp("pi-files");
    for (name, model) in [
        ("pi-0.73.1-openai-read.jsonl", "mock/mock-1"),
        ("pi-0.73.1-anthropic-read.jsonl", "mockant/mock-ant-1"),
        ("pi-0.73.1-tools.jsonl", "mock/mock-1"),
    ] {
        let p = d.join(name);
        std::fs::copy(fixture(name), &p).unwrap();
        let before = std::fs::read(&p).unwrap();
        let (mut w, loaded) = SessionWriter::open(&p).unwrap();
        assert!(loaded.warnings.is_empty(), "{name}: {:?}", loaded.warnings);
        let (prov, m) = model.split_once('/').unwrap();
        assert_eq!(
            loaded.model,
            Some((prov.to_string(), m.to_string())),
            "{name}"
        );
        assert_eq!(loaded.thinking_level.as_deref(), Some("off"));
        // Every message line is in the context, in order.
        let count = before
            .split(|b| *b == b'\n')
            .filter(|l| l.starts_with(b"{\"type\":\"message\""))
            .count();
        assert_eq!(loaded.messages.len(), count, "{name}");
        assert_eq!(shape(&loaded.messages)[0], "user:read hello.txt");
        // Continue: the next entry hangs under Pi's last one, the old bytes stay as they were.
        let last = loaded.tree.last_id().unwrap().to_string();
        let id = w.append_message(&Message::user_text("and now?")).unwrap();
        drop(w);
        let after = std::fs::read(&p).unwrap();
        assert_eq!(&after[..before.len()], &before[..]);
        let (tree, _) = read_tree(&p, false).unwrap();
        assert_eq!(
            tree.get(&id).unwrap().parent_id.as_deref(),
            Some(last.as_str())
        );
    }
}

#[test]
fn seed_exercise_2_branch_plus_compaction() {
    let d = tmp("exercise2");
    let mut w =
        SessionWriter::create(&d, Path::new("/ws"), "anthropic", "claude-a", "off").unwrap();
    let u1 = w
        .append_message(&Message::user_text("read config"))
        .unwrap();
    let a1 = w
        .append_message(&assistant("", &[("c1", "read")], "anthropic", "claude-a"))
        .unwrap();
    let r1 = w.append_message(&result("c1")).unwrap();
    let a2 = w
        .append_message(&assistant("port is 3000", &[], "anthropic", "claude-a"))
        .unwrap();
    let mc = w
        .append_raw(
            "model_change",
            json!({"provider": "openai", "modelId": "gpt-b"}),
        )
        .unwrap();
    let u2 = w
        .append_message(&Message::user_text("now with gpt"))
        .unwrap();
    let a3 = w
        .append_message(&assistant("done", &[], "openai", "gpt-b"))
        .unwrap();
    // Branch before the model change, add a branch summary and a new user message.
    let (tree, _) = read_tree(w.path(), false).unwrap();
    let bs = w
        .branch_with_summary(
            &tree,
            Some(&a2),
            "Tried gpt-b; it agreed the port is 3000.",
            serde_json::Value::Null,
            None,
        )
        .unwrap();
    let u3 = w
        .append_message(&Message::user_text("change the port to 4000"))
        .unwrap();
    // What compaction would choose here, keeping just the new message's tokens: the kept part
    // starts at the new message; the branch summary counts its text as Pi 1.6 counts it (it
    // is a message of the projection), so it is summarised with the four messages before it.
    let path_now = w.branch_path().into_iter().cloned().collect::<Vec<_>>();
    let refs: Vec<&pi_core::session::Entry> = path_now.iter().collect();
    let prep = pi_core::compaction::prepare(&refs, 6).unwrap();
    assert_eq!(prep.first_kept_entry_id, u3);
    assert_eq!(
        shape(&prep.messages_to_summarize),
        [
            "user:read config",
            "assistant:",
            "result:c1",
            "assistant:port is 3000",
            "user:The following is a summary of a branch that this conversation came back from:\n\n<summary>\nTried gpt-b; it agreed the port is 3000.</summary>"
        ]
    );
    assert!(!prep.is_split_turn);
    assert_eq!(prep.file_ops.read.len(), 0, "the calls here carry no path");
    // Compact, keeping only the new user message raw.
    let k = w.append_raw("compaction", json!({"summary": "Read config.ts: port 3000. A gpt-b branch agreed.", "firstKeptEntryId": u3, "tokensBefore": 900})).unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let (tree, warnings) = read_tree(&path, false).unwrap();
    assert!(warnings.is_empty());
    // Durable tree: the abandoned branch (mc, u2, a3) is still there, under a2.
    let children: Vec<&str> = tree.children(Some(&a2));
    assert_eq!(children, [mc.as_str(), bs.as_str()]);
    // Active path.
    let ids: Vec<&str> = tree.path(&k).iter().map(|e| e.id.as_str()).collect();
    let first_two: Vec<&str> = ids[..2].to_vec();
    assert_eq!(first_two.len(), 2); // model_change and thinking_level_change at the root
    assert_eq!(
        ids[2..],
        [
            u1.as_str(),
            a1.as_str(),
            r1.as_str(),
            a2.as_str(),
            bs.as_str(),
            u3.as_str(),
            k.as_str()
        ]
    );
    // Next model context: the summary, then the kept user message.
    let ctx = tree.context(None);
    assert_eq!(
        shape(&ctx.messages),
        [
            format!(
                "user:{}Read config.ts: port 3000. A gpt-b branch agreed.{}",
                pi_core::session::tree_prefixes::COMPACTION_SUMMARY_PREFIX,
                pi_core::session::tree_prefixes::COMPACTION_SUMMARY_SUFFIX
            ),
            "user:change the port to 4000".to_string()
        ]
    );
    // Restored model configuration: the branch never saw the model change.
    assert_eq!(ctx.model, Some(("anthropic".into(), "claude-a".into())));
    // Every raw entry is recoverable, in file order.
    let all: Vec<&str> = tree.entries.iter().map(|e| e.id.as_str()).collect();
    for id in [&u1, &a1, &r1, &a2, &mc, &u2, &a3, &bs, &u3, &k] {
        assert!(all.contains(&id.as_str()));
    }
    // Without the compaction, the branch summary is model-visible before the new message.
    let before_k = tree.context(Some(&u3));
    assert_eq!(shape(&before_k.messages)[4..].len(), 2);
    assert!(shape(&before_k.messages)[4].contains("Tried gpt-b"));
}

#[test]
fn unpaired_results_are_refused_at_append_time() {
    // PAIR-02: a result must answer a call of the latest assistant message on the branch.
    let d = tmp("pair02");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "p", "m", "off").unwrap();
    w.append_message(&Message::user_text("hi")).unwrap();
    let size = std::fs::metadata(w.path()).unwrap().len();
    assert!(
        matches!(w.append_message(&result("call_9")), Err(SessionError::UnpairedResult(id)) if id == "call_9")
    );
    assert_eq!(std::fs::metadata(w.path()).unwrap().len(), size);
    w.append_message(&assistant(
        "",
        &[("call_9", "ls"), ("call_10", "ls")],
        "p",
        "m",
    ))
    .unwrap();
    w.append_message(&result("call_10")).unwrap();
    w.append_message(&result("call_9")).unwrap();
    assert!(
        w.append_message(&result("call_9")).is_err(),
        "answered twice"
    );
    // After reopening, the open calls are recomputed from the file.
    w.append_message(&assistant("", &[("c2", "ls")], "p", "m"))
        .unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let (mut w, _) = SessionWriter::open(&path).unwrap();
    w.append_message(&result("c2")).unwrap();
}

/// Case PAIR-02 (load-time repair), `fixtures/cases/PAIR-02-1.jsonl` behind a header and the
/// user entry it names: the late result `r9` hangs under the aborted `a1` instead of `a3`,
/// which called it. Opened, the file is read with `r9` under `a3` (said in a warning; the file
/// is not changed), so the resumed context keeps "try again" and the call with its result,
/// and the next entry follows `r9`. A result whose call is on its path is left alone.
#[test]
fn a_result_attached_under_the_wrong_entry_is_read_under_its_call() {
    let d = tmp("pair02-load");
    let case = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/cases/PAIR-02-1.jsonl"),
    )
    .unwrap();
    // (As the case has it: the result's content a bare string, no `toolName`; both are read.)
    let path = d.join("s.jsonl");
    let text = format!(
        "{}\n{}\n{case}",
        json!({"type":"session","version":3,"id":"p2","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/ws"}),
        json!({"type":"message","id":"u0","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"start"}})
    );
    std::fs::write(&path, &text).unwrap();
    let (mut w, loaded) = SessionWriter::open(&path).unwrap();
    // (The aborted, empty `a1` stays in the stored context; requests leave it out.)
    assert_eq!(
        shape(&loaded.messages),
        [
            "user:start",
            "assistant:",
            "user:try again",
            "assistant:",
            "result:call_9"
        ]
    );
    assert!(
        loaded.warnings.iter().any(|w| w
            == "tool result r9 (call call_9) was attached under a1, not under the message that called it; it is read under a3"),
        "{:?}",
        loaded.warnings
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    let next = w.append_message(&Message::user_text("next")).unwrap();
    drop(w);
    let (_, again) = SessionWriter::open(&path).unwrap();
    assert_eq!(
        shape(&again.messages),
        [
            "user:start",
            "assistant:",
            "user:try again",
            "assistant:",
            "result:call_9",
            "user:next"
        ]
    );
    assert_eq!(again.tree.last_id(), Some(next.as_str()));
    // A well-placed result at the end is not touched.
    let d2 = tmp("pair02-fine");
    let mut w = SessionWriter::create(&d2, Path::new("/ws"), "p", "m", "off").unwrap();
    w.append_message(&Message::user_text("hi")).unwrap();
    w.append_message(&assistant("", &[("c1", "ls")], "p", "m"))
        .unwrap();
    w.append_message(&result("c1")).unwrap();
    let p2 = w.path().to_path_buf();
    drop(w);
    let (_, fine) = SessionWriter::open(&p2).unwrap();
    assert_eq!(
        shape(&fine.messages),
        ["user:hi", "assistant:", "result:c1"]
    );
    assert!(fine.warnings.is_empty(), "{:?}", fine.warnings);
}

#[test]
fn labels_names_fork_and_listing() {
    let d = tmp("ops");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "p", "m", "off").unwrap();
    let u = w
        .append_message(&Message::user_text("first prompt here"))
        .unwrap();
    w.append_message(&assistant("answer", &[], "p", "m"))
        .unwrap();
    w.label(&u, Some("start")).unwrap();
    w.set_name("Port change").unwrap();
    let parent_path = w.path().to_path_buf();
    let before = std::fs::read(&parent_path).unwrap();
    let (tree, _) = read_tree(&parent_path, false).unwrap();
    assert_eq!(tree.labels().get(&u).map(String::as_str), Some("start"));
    assert_eq!(tree.name().as_deref(), Some("Port change"));
    // Fork at the user message: a new file whose header names the parent; the parent is untouched.
    let (mut fork, loaded) = w.fork(&tree, &d, Some(&u)).unwrap();
    assert_eq!(std::fs::read(&parent_path).unwrap(), before);
    assert_eq!(
        loaded.tree.header["parentSession"],
        parent_path.display().to_string()
    );
    assert_eq!(shape(&loaded.messages), ["user:first prompt here"]);
    fork.append_message(&assistant("forked answer", &[], "p", "m"))
        .unwrap();
    drop(fork);
    drop(w);
    std::fs::write(d.join("not-a-session.jsonl"), "garbage\n").unwrap();
    let list = list_sessions(&d);
    assert_eq!(list.len(), 2);
    let parent = list.iter().find(|s| s.path == parent_path).unwrap();
    assert_eq!(
        (
            parent.name.as_deref(),
            parent.first_prompt.as_deref(),
            parent.entry_count
        ),
        (Some("Port change"), Some("first prompt here"), 6)
    );
    let child = list.iter().find(|s| s.path != parent_path).unwrap();
    assert_eq!(
        child.parent_session.as_deref(),
        Some(parent_path.to_str().unwrap())
    );
}

#[test]
fn line_separators_are_escaped_and_round_trip() {
    let d = tmp("u2028");
    let mut w = SessionWriter::create(&d, Path::new("/ws"), "p", "m", "off").unwrap();
    let text = "a\u{2028}b\u{2029}c\nd";
    w.append_message(&Message::user_text(text)).unwrap();
    let raw = std::fs::read_to_string(w.path()).unwrap();
    assert!(raw.contains("a\\u2028b\\u2029c\\nd") && !raw.contains('\u{2028}'));
    assert_eq!(raw.lines().count(), 4);
    let (tree, _) = read_tree(w.path(), false).unwrap();
    assert_eq!(
        shape(&tree.context(None).messages),
        [format!("user:{text}")]
    );
}

#[test]
#[cfg(unix)] // the lock names a live pid (the parent, Unix API)
fn one_writer_per_file() {
    // SESS-04: a live lock refuses a second writer; a stale one is taken over.
    let d = tmp("lock");
    let w = SessionWriter::create(&d, Path::new("/ws"), "p", "m", "off").unwrap();
    let path = w.path().to_path_buf();
    let lock = path.with_extension("jsonl.lock");
    assert!(lock.exists());
    drop(w);
    assert!(!lock.exists());
    // SESSX-01: a lock file naming a live process that holds no lock (a pid reused after a
    // container restart; our parent stands in for it) is a dead writer's: taken over.
    std::fs::write(&lock, format!("{}\n", std::os::unix::process::parent_id())).unwrap();
    let (w, _) = SessionWriter::open(&path).unwrap();
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        format!("{}\n", std::process::id())
    );
    // A live writer is never taken over, in this process either.
    match SessionWriter::open(&path) {
        Err(SessionError::Locked { pid, .. }) => assert_eq!(pid, std::process::id()),
        other => panic!("{other:?}"),
    }
    drop(w);
    assert!(!lock.exists());
    // A dead pid.
    std::fs::write(&lock, "999999999\n").unwrap();
    drop(SessionWriter::open(&path).unwrap());
    // A live writer in another process (util-linux `flock -F`: the command itself holds the
    // OS lock), then that process killed: refused while it lives, taken over once it is dead.
    use std::io::BufRead;
    let mut child = std::process::Command::new("flock")
        .args(["-F", "-x"])
        .arg(&lock)
        .args(["sh", "-c", "echo locked; exec sleep 30"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux flock");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "locked\n");
    assert!(matches!(
        SessionWriter::open(&path),
        Err(SessionError::Locked { .. })
    ));
    child.kill().unwrap();
    child.wait().unwrap();
    let (w, _) = SessionWriter::open(&path).unwrap();
    drop(w);
}

#[test]
#[cfg(unix)] // SIGKILL
fn crash_test_every_acknowledged_entry_survives_sigkill() {
    use std::io::BufRead;
    // Build the appender with the same cargo and target dir (a filtered `cargo test` skips examples).
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "build",
                "-q",
                "-p",
                "pi-core",
                "--example",
                "session_append",
            ])
            .env("CARGO_TARGET_DIR", profile_dir.parent().unwrap())
            .status()
            .unwrap();
    assert!(status.success());
    let bin = profile_dir.join("examples/session_append");
    let d = tmp("crash");
    let mut file: Option<PathBuf> = None;
    let mut acked: Vec<String> = Vec::new();
    let mut seed: u64 = 0x9e3779b97f4a7c15;
    let mut total = 0;
    for round in 0..200 {
        // A fresh file every 20 kills keeps each file small.
        if round % 20 == 0 {
            total += acked.len();
            file = None;
            acked.clear();
        }
        let target = file.clone().unwrap_or_else(|| d.to_path_buf());
        let mut child = std::process::Command::new(&bin)
            .arg(&target)
            .arg(format!("r{round}"))
            .arg("16")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // Kill after a pseudo-random number of acknowledged entries (0..=12) plus a random
        // pause, so the kill lands anywhere, often in the middle of a large write.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let stop_after = (seed % 13) as usize;
        let mut lines = std::io::BufReader::new(stdout).lines();
        let mut got = 0;
        while got <= stop_after {
            let Some(Ok(line)) = lines.next() else { break };
            if let Some(p) = line.strip_prefix("file ") {
                file = Some(PathBuf::from(p));
                continue;
            }
            if let Some(a) = line.strip_prefix("ack ") {
                acked.push(a.to_string());
                got += 1;
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(seed % 2000));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let _ = child.wait();
        // Anything acknowledged later (already in the pipe) counts too.
        for line in lines.map_while(Result::ok) {
            if let Some(a) = line.strip_prefix("ack ") {
                acked.push(a.to_string());
            }
        }
        let path = file.clone().unwrap();
        let (tree, _) = read_tree(&path, false).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let texts: std::collections::HashSet<String> = tree
            .context(None)
            .messages
            .iter()
            .map(|m| match m {
                Message::User(u) => u
                    .content
                    .to_text()
                    .split(' ')
                    .next()
                    .unwrap_or("")
                    .to_string(),
                _ => String::new(),
            })
            .collect();
        for a in &acked {
            assert!(
                texts.contains(a),
                "round {round}: acknowledged entry {a} lost"
            );
        }
    }
    total += acked.len();
    assert!(total > 200, "only {total} entries acknowledged");
}

/// The provider request for `messages` on `model` (pure: nothing is sent).
fn request_body(model: &pi_ai::Model, messages: Vec<Message>) -> Value {
    let ctx = pi_ai::Context {
        system_prompt: "sys".into(),
        messages,
        tools: Vec::new(),
    };
    let opts = pi_ai::StreamOptions::default();
    match model.api {
        pi_ai::Api::AnthropicMessages => {
            pi_ai::api::anthropic_messages::build_request(model, &ctx, &opts)
        }
        _ => pi_ai::api::openai_completions::build_request(model, &ctx, &opts),
    }
}

/// Conformance exercise 4 (docs/design.md#conformance-exercises), "Extension state and delivery": three values placed where they belong.
/// (1) State tied to one tool result lives in that result's `details`: stored in the `message`
/// entry, present at runtime, never in a provider request. (2) A durable UI preference is a
/// `custom` entry: in the file and the tree, never in the model context. (3) A notice visible
/// only with the next external prompt is a `custom_message` written just before that prompt
/// (deliverAs `nextTurn`; the loop's queue holds it until then, see the next-turn conformance
/// test): absent from the context until then, then a user message right before the prompt.
#[test]
fn seed_exercise_4_extension_state_and_delivery() {
    let d = tmp("exercise4");
    let mut w =
        SessionWriter::create(&d, Path::new("/ws"), "anthropic", "claude-a", "off").unwrap();
    let u1 = w.append_message(&Message::user_text("fix a.txt")).unwrap();
    let a1 = w
        .append_message(&assistant("", &[("c1", "edit")], "anthropic", "claude-a"))
        .unwrap();
    let with_details: Message = serde_json::from_value(json!({"role":"toolResult","toolCallId":"c1","toolName":"edit","content":[{"type":"text","text":"Edited a.txt"}],"details":{"diff":"-x = 1\n+x = 2","firstChangedLine":3},"isError":false,"timestamp":1})).unwrap();
    let r1 = w.append_message(&with_details).unwrap();
    let pref = w
        .append_raw(
            "custom",
            json!({"customType": "ui-prefs", "data": {"diffView": "split"}}),
        )
        .unwrap();
    let a2 = w
        .append_message(&assistant("done", &[], "anthropic", "claude-a"))
        .unwrap();
    // Until the next external prompt the notice is only queued: not in the file or context.
    let before = w.context();
    assert_eq!(
        shape(&before.messages),
        [
            "user:fix a.txt",
            "assistant:",
            "result:c1",
            "assistant:done"
        ]
    );
    let notice = w
        .append_raw(
            "custom_message",
            json!({"customType": "notice", "content": "The test suite changed since your last run.", "display": true, "details": {"source": "watcher"}}),
        )
        .unwrap();
    let u2 = w
        .append_message(&Message::user_text("run the tests"))
        .unwrap();
    let path = w.path().to_path_buf();
    drop(w);

    // JSONL: each value in its own entry, with Pi's fields.
    let (tree, warnings) = read_tree(&path, false).unwrap();
    assert!(warnings.is_empty());
    let raw = |id: &str| tree.get(id).unwrap().raw();
    assert_eq!(
        raw(&r1)["message"]["details"],
        json!({"diff":"-x = 1\n+x = 2","firstChangedLine":3})
    );
    assert_eq!(raw(&pref)["type"], "custom");
    assert_eq!(raw(&pref)["data"], json!({"diffView": "split"}));
    assert_eq!(raw(&notice)["type"], "custom_message");
    assert_eq!(raw(&notice)["display"], true);
    let ids: Vec<&str> = tree.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids[2..],
        [
            u1.as_str(),
            a1.as_str(),
            r1.as_str(),
            pref.as_str(),
            a2.as_str(),
            notice.as_str(),
            u2.as_str()
        ]
    );

    // Runtime projection: the result keeps its details; the preference is not a message; the
    // notice is a user message just before the prompt.
    let ctx = tree.context(None);
    assert_eq!(
        shape(&ctx.messages),
        [
            "user:fix a.txt",
            "assistant:",
            "result:c1",
            "assistant:done",
            "user:The test suite changed since your last run.",
            "user:run the tests"
        ]
    );
    match &ctx.messages[2] {
        Message::ToolResult(r) => assert_eq!(
            r.details,
            Some(json!({"diff":"-x = 1\n+x = 2","firstChangedLine":3}))
        ),
        m => panic!("{m:?}"),
    }

    // Provider form: neither the details nor the preference reach a request; the notice does,
    // in the user turn with the prompt.
    let mut model = pi_ai::Model::new(
        pi_ai::Api::AnthropicMessages,
        "anthropic",
        "claude-a",
        "http://x",
    );
    model.api_key = Some("k".into());
    let body = request_body(&model, ctx.messages.clone());
    let text = body.to_string();
    assert!(!text.contains("firstChangedLine") && !text.contains("diffView"));
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    assert_eq!(
        last["content"],
        json!([
            {"type":"text","text":"The test suite changed since your last run."},
            {"type":"text","text":"run the tests","cache_control":{"type":"ephemeral"}}
        ])
    );
}

/// Conformance exercise 5 (docs/design.md#conformance-exercises), "Provider-neutral replay": a call recorded with Anthropic (signed thinking,
/// a 64-character `toolu_` id), a branch at its result, a switch to an OpenAI-compatible model,
/// and a resumed turn. The stored messages stay provider-neutral (`toolCall`, `toolResult`)
/// and unchanged; the path is rebuilt from the tree; wire conversion happens per request:
/// OpenAI gets an id of at most 40 characters, the same on the call and its result, and none
/// of the other model's thinking (Pi 1.6 drops it; 0.73.1 sent it as plain text). Had
/// Anthropic's native blocks
/// (`tool_use` / `tool_result`) been stored, the OpenAI request could not be built from them.
#[test]
fn seed_exercise_5_provider_neutral_replay() {
    let d = tmp("exercise5");
    let mut w =
        SessionWriter::create(&d, Path::new("/ws"), "anthropic", "claude-a", "high").unwrap();
    let long_id = format!("toolu_{}", "A1b2C3d4".repeat(7)); // 62 characters
    w.append_message(&Message::user_text("read config.ts"))
        .unwrap();
    let call: Message = serde_json::from_value(json!({"role":"assistant","content":[
        {"type":"thinking","thinking":"The port is in config.ts.","thinkingSignature":"sig-abc"},
        {"type":"toolCall","id":long_id,"name":"read","arguments":{"path":"config.ts"}}],
        "api":"anthropic-messages","provider":"anthropic","model":"claude-a","stopReason":"toolUse","timestamp":2})).unwrap();
    let a1 = w.append_message(&call).unwrap();
    let res: Message = serde_json::from_value(json!({"role":"toolResult","toolCallId":long_id,"toolName":"read","content":[{"type":"text","text":"export const port = 3000;"}],"isError":false,"timestamp":3})).unwrap();
    let r1 = w.append_message(&res).unwrap();
    let a2 = w
        .append_message(&assistant(
            "The port is 3000.",
            &[],
            "anthropic",
            "claude-a",
        ))
        .unwrap();
    let stored_call = std::fs::read_to_string(w.path())
        .unwrap()
        .lines()
        .find(|l| l.contains(&format!("\"id\":\"{a1}\"")))
        .unwrap()
        .to_string();
    // Branch at the common result, switch model, resume.
    let tree = w.tree().clone();
    w.branch(&tree, Some(&r1)).unwrap();
    w.append_raw(
        "model_change",
        json!({"provider": "openai", "modelId": "gpt-b"}),
    )
    .unwrap();
    w.append_message(&Message::user_text("and the host?"))
        .unwrap();
    let path = w.path().to_path_buf();
    drop(w);

    let (tree, _) = read_tree(&path, false).unwrap();
    // The abandoned answer stays durable beside the new branch.
    assert_eq!(tree.children(Some(&r1)).len(), 2);
    assert!(tree.get(&a2).is_some());
    let ctx = tree.context(None);
    assert_eq!(ctx.model, Some(("openai".into(), "gpt-b".into())));
    assert_eq!(
        shape(&ctx.messages),
        [
            "user:read config.ts".to_string(),
            "assistant:".to_string(),
            format!("result:{long_id}"),
            "user:and the host?".to_string()
        ]
    );
    // Stored form: provider-neutral and untouched by any replay.
    let stored: Value = serde_json::from_str(&stored_call).unwrap();
    assert_eq!(stored["message"]["content"][1]["type"], "toolCall");
    assert_eq!(stored["message"]["content"][1]["id"], long_id.as_str());
    assert_eq!(
        std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .find(|l| l.contains(&format!("\"id\":\"{a1}\"")))
            .unwrap(),
        stored_call
    );

    // Wire conversion for the OpenAI-compatible model.
    let mut gpt = pi_ai::Model::new(
        pi_ai::Api::OpenaiCompletions,
        "openai",
        "gpt-b",
        "http://x/v1",
    );
    gpt.api_key = Some("k".into());
    let body = request_body(&gpt, ctx.messages.clone());
    let msgs = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles[1..], ["user", "assistant", "tool", "user"]);
    let call_id = msgs[2]["tool_calls"][0]["id"].as_str().unwrap();
    assert!(call_id.len() <= 40 && call_id != long_id, "{call_id}");
    assert_eq!(msgs[3]["tool_call_id"], call_id);
    let text = body.to_string();
    assert!(!text.contains("The port is in config.ts."));
    assert!(!text.contains("sig-abc"));
    // The same history replayed to the model that wrote it keeps the signed thinking and id.
    let mut claude = pi_ai::Model::new(
        pi_ai::Api::AnthropicMessages,
        "anthropic",
        "claude-a",
        "http://x",
    );
    claude.api_key = Some("k".into());
    claude.reasoning = true;
    let body = request_body(&claude, ctx.messages);
    let assistant_blocks = &body["messages"][1]["content"];
    assert_eq!(assistant_blocks[0]["type"], "thinking");
    assert_eq!(assistant_blocks[0]["signature"], "sig-abc");
    assert_eq!(assistant_blocks[1]["id"], long_id.as_str());
}

#[test]
fn entries_keep_their_lines_and_forks_copy_them_byte_for_byte() {
    let d = tmp("fork-bytes");
    for name in [
        "pi-0.73.1-openai-read.jsonl",
        "pi-0.73.1-anthropic-read.jsonl",
        "pi-0.73.1-tools.jsonl",
    ] {
        let mut text = std::fs::read_to_string(fixture(name)).unwrap();
        // Lines Pi may write one day: unknown entry types and fields, another key order,
        // spacing, an extended role, escapes.
        let last = text.lines().last().unwrap();
        let last_id = serde_json::from_str::<Value>(last).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        text.push_str(&format!(
            "{{\"type\":\"future_kind\",\"id\":\"f1\",\"parentId\":\"{last_id}\",\"zeta\":[1,2.50,{{\"k\":null}}],\"alpha\":\"\\u00e9\\n\"}}\n\
             {{ \"message\" : {{\"content\":\"role last\",\"role\":\"user\",\"x\":1}}, \"type\":\"message\",\"id\":\"f2\",\"parentId\":\"f1\"}}\n\
             {{\"type\":\"message\",\"id\":\"f3\",\"parentId\":\"f2\",\"message\":{{\"role\":\"bashExecution\",\"command\":\"ls\",\"output\":\"a\",\"exitCode\":0,\"timestamp\":5}}}}\n"
        ));
        let p = d.join(name);
        std::fs::write(&p, &text).unwrap();
        let (tree, warnings) = read_tree(&p, false).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let lines: Vec<&str> = text.lines().skip(1).collect();
        let stored: Vec<_> = tree.entries.iter().map(|e| e.text()).collect();
        assert_eq!(stored, lines, "{name}");
        // Messages parsed from the text equal the ones converted from the parsed value.
        for e in &tree.entries {
            let via_value = (e.kind == "message")
                .then(|| pi_core::session::convert_message(&e.raw()["message"]))
                .flatten();
            assert_eq!(
                pi_core::session::entry_message(e),
                via_value,
                "{}",
                e.text()
            );
        }
        // A fork holds the path's lines as they were.
        let (_, loaded) = SessionWriter::fork_from(&p, &tree, &d, None).unwrap();
        let forked = std::fs::read_to_string(
            loaded.tree.header["parentSession"]
                .as_str()
                .map(|_| pi_core::session::find_session_file(&d, &loaded.id).unwrap())
                .unwrap(),
        )
        .unwrap();
        let path_lines: Vec<_> = tree.path("f3").iter().map(|e| e.text()).collect();
        assert_eq!(
            forked.lines().skip(1).collect::<Vec<_>>(),
            path_lines,
            "{name}"
        );
        assert_eq!(
            shape(&loaded.messages)[loaded.messages.len() - 2..],
            [
                "user:role last".to_string(),
                "user:Ran `ls`\n```\na\n```".to_string()
            ]
        );
    }
}

/// Issue 19.4: an append that fails halfway (here: the file-size limit, `RLIMIT_FSIZE`, as a
/// full disk would) is cut back to the last whole line, so when room comes back the next entry
/// starts on its own line and every saved message is read back on its branch — the one that
/// failed too: it was kept in memory and written before the next. Runs in a child
/// process (this test binary again) whose soft limit is 4 KiB, with SIGXFSZ ignored so the
/// write fails with EFBIG instead of killing it; the child raises the limit back itself.
#[test]
#[cfg(unix)] // RLIMIT_FSIZE
fn failed_append_is_cut_back_before_the_next_one() {
    if let Ok(dir) = std::env::var("PI_TORN_APPEND_CHILD") {
        let dir = PathBuf::from(dir);
        let mut w = SessionWriter::create(&dir, Path::new("/w"), "p", "m", "off").unwrap();
        let mut saved = 0;
        let err = loop {
            match w.append_message(&Message::user_text(format!("{saved} {}", "x".repeat(300)))) {
                Ok(_) => saved += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(err, SessionError::Io { .. }), "{err}");
        let torn = std::fs::metadata(w.path()).unwrap().len();
        assert!(torn <= 4096, "{torn}");
        // Room comes back.
        let (_, hard) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_FSIZE).unwrap();
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_FSIZE, hard, hard)
            .unwrap();
        for i in 0..3 {
            w.append_message(&Message::user_text(format!("after {i}")))
                .unwrap();
        }
        let path = w.path().to_path_buf();
        let leaf = w.leaf().unwrap().to_string();
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with('\n'));
        for l in text.lines() {
            serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        }
        let (tree, warnings) = read_tree(&path, false).unwrap();
        assert_eq!(warnings, Vec::<String>::new());
        // The entry the file could not take was kept and written first when room came back:
        // nothing appended is lost.
        let messages = tree.context(Some(&leaf)).messages;
        assert_eq!(messages.len(), saved + 1 + 3);
        assert_eq!(
            pi_core::harness::queue::message_text(&messages[saved]),
            format!("{saved} {}", "x".repeat(300))
        );
        return;
    }
    let dir = tmp_dir("pi-torn-");
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -S -f 4; exec \"$0\" \"$@\"")
        .arg(exe)
        .args([
            "--exact",
            "failed_append_is_cut_back_before_the_next_one",
            "--nocapture",
        ])
        .env("PI_TORN_APPEND_CHILD", &*dir)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "child failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The thinking level a loaded file records: the last `thinking_level_change` on the branch,
/// and `None` (not `off`) for a branch with none — opened whole or deferred — so that the
/// session knows to record the level it runs at, as Pi 1.6's `hasThinkingEntry`.
#[test]
fn a_file_without_a_thinking_level_loads_with_none() {
    let d = tmp("thinking-none");
    let head = json!({"type":"session","version":3,"id":"t1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/ws"});
    let user = json!({"type":"message","id":"u0","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"start"}});
    let level = json!({"type":"thinking_level_change","id":"t0","parentId":"u0","timestamp":"2026-01-01T00:00:00.000Z","thinkingLevel":"high"});
    let mut got = Vec::new();
    for (name, lines) in [
        ("none.jsonl", vec![&head, &user]),
        ("high.jsonl", vec![&head, &user, &level]),
    ] {
        let path = d.join(name);
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&path, text).unwrap();
        let (w, whole) = SessionWriter::open(&path).unwrap();
        drop(w);
        let (_, deferred) =
            SessionWriter::open_deferred(&path, pi_core::session::ImageOptions::default()).unwrap();
        got.push((whole.thinking_level, deferred.thinking_level));
    }
    assert_eq!(
        got,
        [(None, None), (Some("high".into()), Some("high".into()))]
    );
}

//! Session files key by key against Pi 0.73.1 itself: the same scripted model (a gateway that
//! names another model in its chunks), the same workspace and the same user steps — a prompt
//! whose turn edits a file, a user shell command, a manual compaction keeping only that command
//! raw (`compaction.keepRecentTokens: 1` on both sides: with everything kept there is nothing to
//! summarise, and pi-lsp, as Pi 1.6, sends no summary request then),
//! the session stats and the message view — run once through Pi's RPC mode and once through
//! pi-lsp over stdio. Every entry of the two files must have the same keys with the same JSON
//! types (pi-lsp's only extras are the edit result's `details.unifiedDiff`, `details.patch` (Pi
//! 1.6's) and
//! `details.fileChange`, the change record rewinds use; Pi ignores detail keys it does not
//! know), and the values Pi
//! derives from the run (user content, `responseModel`, the edit's numbered diff, the bash
//! output, the compaction's `tokensBefore` and `fromHook`) must be equal.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pi_e2e::lsp_client::{start_with_mock, EditorBehavior};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::pi_rpc::PiRpc;
use pi_e2e::{json_lines, jsonl_in, TempDir};
use serde_json::{json, Value};

/// The reference Pi binary: `$PI_REF_BIN`, else `.pi-ref/node_modules/.bin/pi` (installed by
/// `.ci/run`). Required when `CI` is set.
fn pi_ref_bin() -> Option<PathBuf> {
    let candidates = [
        std::env::var("PI_REF_BIN").ok().map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.pi-ref/node_modules/.bin/pi")),
    ];
    let found = candidates.into_iter().flatten().find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs the reference Pi (npm @mariozechner/pi-coding-agent@0.73.1); see .ci/run"
        );
        eprintln!("note: reference Pi not installed; skipping (see .ci/run)");
    }
    found
}

const GATEWAY_MODEL: &str = "mock-1-routed-2026";

/// The scripted model both harnesses talk to: an edit, then a closing text; summaries (told
/// apart by Pi's summarization system prompt) answer `SUMMARY`.
async fn mock() -> MockModel {
    let mock = MockModel::start(vec![
        Step::Tools(
            Some("Editing.".into()),
            vec![(
                "call_1".into(),
                "edit".into(),
                json!({"path": "f.txt", "edits": [{"oldText": "beta", "newText": "BETA"}]}),
            )],
        ),
        Step::text("Done."),
    ])
    .await;
    mock.set_response_model(Some(GATEWAY_MODEL));
    mock.set_responder(Arc::new(|body: &Value| {
        body.to_string()
            .contains("context summarization assistant")
            .then(|| Step::text("SUMMARY"))
    }));
    mock
}

/// Turns the built-in todo and plan-mode extensions off for a server on `ws` (its agent folder
/// is `ws/../agent`, see `start_with_mock`): these files are compared with Pi's, which has
/// neither.
fn extensions_off(ws: &Path) {
    let agent = ws.join("../agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("settings.json"),
        json!({"builtinExtensions": {"todo": false, "plan-mode": false}}).to_string(),
    )
    .unwrap();
}

fn workspace(root: &Path) -> PathBuf {
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let text: String = (1..=12).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.join("f.txt"), format!("alpha\nbeta\ngamma\n{text}")).unwrap();
    ws
}

/// The JSON type of every leaf, keys kept (arrays element by element); the kind-naming fields
/// (`type`, `role`, `stopReason`) and booleans keep their values.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    let s = match (k.as_str(), x) {
                        ("type" | "role" | "stopReason", Value::String(_)) => x.clone(),
                        _ => shape(x),
                    };
                    (k.clone(), s)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::String(_) => json!("string"),
        Value::Number(_) => json!("number"),
        Value::Bool(b) => json!(b),
        Value::Null => Value::Null,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_file_matches_pi_key_by_key() {
    let Some(pi) = pi_ref_bin() else { return };
    let tmp = TempDir::new("pi-parity");

    // Pi.
    let pi_root = tmp.path().join("pi");
    let pi_ws = workspace(&pi_root);
    let pi_mock = mock().await;
    let agent = pi_root.join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), pi_mock.models_json().to_string()).unwrap();
    std::fs::write(
        agent.join("settings.json"),
        r#"{"compaction": {"keepRecentTokens": 1}}"#,
    )
    .unwrap();
    let pi_sessions = pi_root.join("sessions");
    let (pi_stats, pi_messages) = {
        let ws = pi_ws.clone();
        let sessions = pi_sessions.clone();
        tokio::task::spawn_blocking(move || {
            let mut p = PiRpc::start(
                &pi,
                &ws,
                &agent,
                &["--session-dir".as_ref(), sessions.as_os_str()],
            );
            p.call(
                json!({"id": "1", "type": "prompt", "message": "edit f.txt"}),
                |v| v["type"] == "agent_end",
            );
            p.request(json!({"type": "bash", "command": "echo hi"}));
            p.request(json!({"type": "compact"}));
            let stats = p.request(json!({"type": "get_session_stats"}));
            let messages = p.request(json!({"type": "get_messages"}));
            (stats, messages)
        })
        .await
        .unwrap()
    };
    let theirs = json_lines(&jsonl_in(&pi_sessions));

    // pi-lsp.
    let our_root = tmp.path().join("ours");
    let our_ws = workspace(&our_root);
    let our_mock = mock().await;
    // Files as Pi 0.73.1 wrote them (`sessions.format`; tests/pi16_parity.rs compares the
    // default, Pi 1.6's, with Pi 1.6.0).
    std::fs::create_dir_all(our_root.join("agent")).unwrap();
    std::fs::write(
        our_root.join("agent/settings.json"),
        r#"{"sessions": {"format": "pi-0.73"}, "builtinExtensions": {"todo": false, "plan-mode": false}, "compaction": {"keepRecentTokens": 1}}"#,
    )
    .unwrap();
    let mut c = start_with_mock(&our_ws, &our_mock, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "edit f.txt", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(30)).await;
    c.request(
        "agent/bash",
        json!({"sessionId": sid, "command": "echo hi"}),
    )
    .await
    .unwrap();
    let compacted = c.ask("agent/compact", &sid).await;
    assert_eq!(
        compacted["summary"], "SUMMARY\n\n<modified-files>\nf.txt\n</modified-files>",
        "{compacted}"
    );
    let our_stats = c.ask("agent/session/stats", &sid).await;
    let our_messages = c.ask("agent/messages", &sid).await;
    c.shutdown().await;
    let ours = json_lines(&jsonl_in(&our_ws.join(".pi/sessions")));
    assert_eq!(
        std::fs::read_to_string(our_ws.join("f.txt")).unwrap(),
        std::fs::read_to_string(pi_ws.join("f.txt")).unwrap()
    );

    // Entry by entry: the same kinds in the same order, the same keys and types.
    let kind = |e: &Value| {
        format!(
            "{}:{}",
            e["type"].as_str().unwrap_or(""),
            e["message"]["role"].as_str().unwrap_or("")
        )
    };
    assert_eq!(
        ours.iter().map(kind).collect::<Vec<_>>(),
        theirs.iter().map(kind).collect::<Vec<_>>()
    );
    for (o, t) in ours.iter().zip(&theirs) {
        let mut o = o.clone();
        if let Some(d) = o
            .pointer_mut("/message/details")
            .and_then(Value::as_object_mut)
        {
            assert!(
                d.remove("unifiedDiff").is_some() || o_has_no_edit(d),
                "{d:?}"
            );
            // Pi 1.6's `patch` (0.73.1 has none), beside the edit's `diff`.
            assert_eq!(d.remove("patch").is_some(), d.contains_key("diff"), "{d:?}");
            // The change record: present exactly where the unified diff is (the edit).
            assert_eq!(
                d.remove("fileChange").is_some(),
                d.contains_key("diff"),
                "{d:?}"
            );
        }
        assert_eq!(shape(&o), shape(t), "\nours:   {o}\ntheirs: {t}");
    }
    // Values Pi derives from the run.
    let by_kind = |v: &[Value], k: &str| -> Value {
        v.iter()
            .find(|e| kind(e) == k)
            .cloned()
            .unwrap_or_else(|| panic!("no {k}"))
    };
    for (k, ptr) in [
        ("message:user", "/message/content"),
        ("message:assistant", "/message/responseModel"),
        ("message:assistant", "/message/content"),
        ("message:toolResult", "/message/content"),
        ("message:toolResult", "/message/details/diff"),
        ("message:toolResult", "/message/details/firstChangedLine"),
        ("message:bashExecution", "/message/output"),
        ("message:bashExecution", "/message/exitCode"),
        ("compaction:", "/summary"),
        ("compaction:", "/tokensBefore"),
        ("compaction:", "/fromHook"),
        ("compaction:", "/details"),
    ] {
        assert_eq!(
            by_kind(&ours, k).pointer(ptr),
            by_kind(&theirs, k).pointer(ptr),
            "{k} {ptr}"
        );
    }
    assert_eq!(
        by_kind(&ours, "message:assistant")["message"]["responseModel"],
        GATEWAY_MODEL
    );
    // The compaction kept only the user's shell command: both point at it.
    let first_kept = |v: &[Value]| {
        let id = by_kind(v, "compaction:")["firstKeptEntryId"].clone();
        v.iter().position(|e| e["id"] == id)
    };
    assert_eq!(first_kept(&ours), first_kept(&theirs));
    assert_eq!(
        kind(&ours[first_kept(&ours).unwrap()]),
        "message:bashExecution"
    );

    // Stats: Pi's keys, ours may add only where Pi has none.
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&our_stats["tokens"]), keys(&pi_stats["tokens"]));
    for k in keys(&pi_stats) {
        assert!(our_stats.get(&k).is_some(), "stats lack {k}: {our_stats}");
    }
    // ... and the context figure Pi gives: unknown until a response follows the compaction.
    // (The counts differ by design after a compaction that summarised messages: Pi 0.73.1
    // counts the context, summary included; pi-lsp counts as Pi 1.6 does, every message
    // entry of the file.)
    assert_eq!(
        our_stats["contextUsage"], pi_stats["contextUsage"],
        "stats contextUsage: {our_stats} vs {pi_stats}"
    );
    // The message view: the compaction summary's timestamp is a number, as Pi's.
    let summary_ts = |v: &Value| {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "compactionSummary")
            .map(|m| shape(&m["timestamp"]))
    };
    assert_eq!(summary_ts(&our_messages), Some(json!("number")));
    assert_eq!(summary_ts(&our_messages), summary_ts(&pi_messages));
    pi_mock.assert_paired();
    our_mock.assert_paired();
}

/// True when `details` is not an edit's (no diff to carry a unified twin).
fn o_has_no_edit(details: &serde_json::Map<String, Value>) -> bool {
    !details.contains_key("diff")
}

/// Pi's agent dir for `mock` whose `mock-1` takes images (so Pi sends them).
fn image_agent(root: &Path, mock: &MockModel) -> PathBuf {
    let agent = root.join("pi-agent");
    std::fs::create_dir_all(&agent).unwrap();
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"][0]["input"] = json!(["text", "image"]);
    std::fs::write(agent.join("models.json"), models.to_string()).unwrap();
    agent
}

/// Issue 18 (SESS-05 kept Pi-compatible): a session written here holding an image of over
/// 256 KB of base64 stores it inline exactly as Pi does, and Pi 0.73.1 resuming the file sends
/// the whole image to the model on its next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_resumes_our_session_with_a_large_image_and_sends_it() {
    use base64::Engine as _;
    let Some(pi) = pi_ref_bin() else { return };
    let tmp = TempDir::new("pi-image");
    let ws = workspace(tmp.path());
    let mock = MockModel::start(vec![Step::text("A screenshot."), Step::text("Still it.")]).await;
    // A PNG signature and 300,000 pseudo-random bytes: 400,012 characters of base64.
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..300_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.push(x as u8);
    }
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert!(data.len() > 256 * 1024);
    extensions_off(&ws);
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "what is this?", "model": "mock/mock-1",
                   "images": [{"type": "image", "data": data, "mimeType": "image/png"}]}),
        )
        .await
        .unwrap();
    assert!(r["sessionId"].is_string(), "{r}");
    c.run_until_end(Duration::from_secs(30)).await;
    c.shutdown().await;
    let sessions = ws.join(".pi/sessions");
    let file = jsonl_in(&sessions);
    let user = json_lines(&file)
        .into_iter()
        .find(|l| l["message"]["role"] == "user")
        .unwrap();
    // Inline, exactly as Pi writes a prompt's image; nothing beside the file.
    assert_eq!(
        user["message"]["content"],
        json!([{"type": "text", "text": "what is this?"},
               {"type": "image", "data": data, "mimeType": "image/png"}])
    );
    assert!(!sessions.join("assets").exists());

    let agent = image_agent(tmp.path(), &mock);
    let before = mock.requests().len();
    let ws2 = ws.clone();
    tokio::task::spawn_blocking(move || {
        let mut p = PiRpc::start(&pi, &ws2, &agent, &["--session".as_ref(), file.as_os_str()]);
        p.call(
            json!({"id": "1", "type": "prompt", "message": "and now?"}),
            |v| v["type"] == "agent_end",
        );
    })
    .await
    .unwrap();
    let requests = mock.requests();
    assert_eq!(requests.len(), before + 1, "Pi made one request");
    let sent = &requests[before].body["messages"];
    let first_user = sent
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    assert_eq!(
        first_user["content"],
        json!([{"type": "text", "text": "what is this?"},
               {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}}])
    );
}

/// `agent/session/forkMessages` lists what Pi 0.73.1's `get_fork_messages` lists for the same
/// file: the user messages of every branch, those the session has left included, in file
/// order (Pi's `getUserMessagesForForking` reads every entry of the file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_messages_match_pi_on_a_branchy_session() {
    let Some(pi) = pi_ref_bin() else { return };
    let tmp = TempDir::new("pi-forkmsgs");
    let ws = workspace(tmp.path());
    let mock = MockModel::start(vec![
        Step::text("One."),
        Step::text("Two."),
        Step::text("Three."),
        Step::text("Four."),
    ])
    .await;
    extensions_off(&ws);
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "first question", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(30)).await;
    for text in ["second question", "third question"] {
        c.request("agent/prompt", json!({"text": text, "sessionId": sid}))
            .await
            .unwrap();
        c.run_until_end(Duration::from_secs(30)).await;
    }
    // Back to the first answer: the second and third questions are on a branch left behind.
    let file = jsonl_in(&ws.join(".pi/sessions"));
    let first_answer = json_lines(&file)
        .into_iter()
        .find(|l| l["message"]["role"] == "assistant")
        .unwrap()["id"]
        .clone();
    // `agent_end` reaches the client a moment before the run lets go of the session (a branch
    // in that moment is refused as busy): wait until the state says it is idle.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.ask("agent/state", &sid).await["isStreaming"] == true {
        assert!(std::time::Instant::now() < deadline, "the run never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.request(
        "agent/session/branch",
        json!({"sessionId": sid, "entryId": first_answer}),
    )
    .await
    .unwrap();
    c.request(
        "agent/prompt",
        json!({"text": "another second question", "sessionId": sid}),
    )
    .await
    .unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    let ours = c.ask("agent/session/forkMessages", &sid).await;
    c.shutdown().await;
    let texts: Vec<&str> = ours["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "first question",
            "second question",
            "third question",
            "another second question"
        ]
    );

    let agent = image_agent(tmp.path(), &mock);
    let theirs = tokio::task::spawn_blocking(move || {
        let mut p = PiRpc::start(&pi, &ws, &agent, &["--session".as_ref(), file.as_os_str()]);
        p.request(json!({"type": "get_fork_messages"}))
    })
    .await
    .unwrap();
    assert_eq!(ours, theirs);
}

/// Case SESS-05 with images inline: requests carry the images of the last
/// `sessions.imageTurns` user messages only (older ones as a note), in a live session and the
/// same after the session is resumed by a new server; the file keeps every image inline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_images_leave_the_requests_live_and_after_a_resume() {
    use pi_e2e::lsp_client::{agent_env, LspClient};
    let tmp = TempDir::new("image-window");
    let ws = workspace(tmp.path());
    let mock = MockModel::start(vec![
        Step::text("A."),
        Step::text("B."),
        Step::text("C."),
        Step::text("D."),
    ])
    .await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"][0]["input"] = json!(["text", "image"]);
    let agent = tmp.path().join("agent");
    let env = agent_env(&agent, &models, &[]);
    std::fs::write(
        agent.join("settings.json"),
        json!({"sessions": {"imageTurns": 2}, "builtinExtensions": {"todo": false, "plan-mode": false}}).to_string(),
    )
    .unwrap();
    // 40,000 characters of base64 each (over what loading keeps in memory), all different.
    let image = |c: &str| c.repeat(10_000);
    let (a, b, c3) = (image("QUFB"), image("QkJC"), image("Q0ND"));
    let mut c = LspClient::start(&pi_e2e::pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
    let mut sid = Value::Null;
    for (text, data) in [("one", &a), ("two", &b), ("three", &c3)] {
        let mut params = json!({"text": text, "model": "mock/mock-1",
            "images": [{"type": "image", "data": data, "mimeType": "image/png"}]});
        if !sid.is_null() {
            params["sessionId"] = sid.clone();
        }
        sid = c.request("agent/prompt", params).await.unwrap()["sessionId"].clone();
        c.run_until_end(Duration::from_secs(30)).await;
    }
    c.shutdown().await;
    let mut c = LspClient::start(&pi_e2e::pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
    c.request("agent/prompt", json!({"text": "four", "sessionId": sid}))
        .await
        .unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    c.shutdown().await;

    // Each user message of a request, short: its text, `image <first 4 base64 chars> <length>`
    // for an image, `note` for the dropped-image note.
    let users = |i: usize| -> Vec<Vec<String>> {
        mock.requests()[i].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| match &m["content"] {
                Value::String(t) => vec![t.clone()],
                blocks => blocks
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| match b["type"].as_str().unwrap() {
                        "text" if b["text"] == pi_core::session::IMAGE_DROPPED_NOTE => {
                            "note".to_string()
                        }
                        "text" => b["text"].as_str().unwrap().to_string(),
                        _ => {
                            let url = b["image_url"]["url"].as_str().unwrap();
                            let data = url.strip_prefix("data:image/png;base64,").unwrap();
                            format!("image {} {}", &data[..4], data.len())
                        }
                    })
                    .collect(),
            })
            .collect()
    };
    let v = |items: &[&str]| -> Vec<String> { items.iter().map(|s| s.to_string()).collect() };
    assert_eq!(
        users(1),
        [
            v(&["one", "image QUFB 40000"]),
            v(&["two", "image QkJC 40000"])
        ],
        "two turns: every image"
    );
    assert_eq!(
        users(2),
        [
            v(&["one", "note"]),
            v(&["two", "image QkJC 40000"]),
            v(&["three", "image Q0ND 40000"])
        ],
        "live: the oldest image left the request"
    );
    assert_eq!(
        users(3),
        [
            v(&["one", "note"]),
            v(&["two", "note"]),
            v(&["three", "image Q0ND 40000"]),
            v(&["four"])
        ],
        "resumed: the same window"
    );
    // The file keeps every image inline.
    let stored: Vec<Value> = json_lines(&jsonl_in(&ws.join(".pi/sessions")))
        .into_iter()
        .filter(|l| l["message"]["role"] == "user")
        .map(|l| l["message"]["content"][1]["data"].clone())
        .collect();
    assert!(
        stored == [json!(a), json!(b), json!(c3), Value::Null],
        "every image inline in the file"
    );
}

/// A session file an older pi-lsp wrote with its large image in `assets/` (`data: ""` and
/// `piLspAsset`, which Pi 0.73.1 sends as an empty data URL) is written again inline when it
/// is continued here, so Pi 0.73.1 resuming it afterwards sends the whole image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assets_form_session_continued_here_is_one_pi_resumes_with_its_image() {
    use base64::Engine as _;
    let Some(pi) = pi_ref_bin() else { return };
    let tmp = TempDir::new("pi-assets");
    let ws = workspace(tmp.path());
    let sessions = ws.join(".pi/sessions");
    std::fs::create_dir_all(sessions.join("assets")).unwrap();
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(sessions.join("assets/legacy.png"), &bytes).unwrap();
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let id = "0194a000-0000-7000-8000-0000000000b2";
    let file = sessions.join(format!("2026-11-01T10-00-00-000Z_{id}.jsonl"));
    let ts = "2026-11-01T10:00:00.000Z";
    let old = [
        json!({"type":"session","version":3,"id":id,"timestamp":ts,"cwd":ws.display().to_string()}),
        json!({"type":"model_change","id":"m0000001","parentId":null,"timestamp":ts,"provider":"mock","modelId":"mock-1"}),
        json!({"type":"message","id":"u0000001","parentId":"m0000001","timestamp":ts,"message":{"role":"user","content":[
            {"type":"text","text":"what is this?"},
            {"type":"image","data":"","mimeType":"image/png","piLspAsset":"assets/legacy.png"}],"timestamp":1}}),
        json!({"type":"message","id":"a0000001","parentId":"u0000001","timestamp":ts,"message":{"role":"assistant","content":[{"type":"text","text":"A picture."}],"api":"openai-completions","provider":"mock","model":"mock-1","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":2}}),
    ];
    let text: String = old.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, &text).unwrap();
    let mock = MockModel::start(vec![Step::text("Ours."), Step::text("Pi's.")]).await;
    extensions_off(&ws);
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.request(
        "agent/prompt",
        json!({"text": "still there?", "sessionId": id, "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    c.shutdown().await;
    assert_eq!(
        std::fs::read_to_string(file.with_extension("jsonl.assets.bak")).unwrap(),
        text,
        "the original is kept"
    );
    let user = json_lines(&file)
        .into_iter()
        .find(|l| l["message"]["role"] == "user")
        .unwrap();
    assert!(
        user["message"]["content"]
            == json!([{"type": "text", "text": "what is this?"},
                      {"type": "image", "data": data, "mimeType": "image/png"}]),
        "the image inline, as Pi writes it"
    );

    let agent = image_agent(tmp.path(), &mock);
    let before = mock.requests().len();
    let ws2 = ws.clone();
    tokio::task::spawn_blocking(move || {
        let mut p = PiRpc::start(&pi, &ws2, &agent, &["--session".as_ref(), file.as_os_str()]);
        p.call(
            json!({"id": "1", "type": "prompt", "message": "and now?"}),
            |v| v["type"] == "agent_end",
        );
    })
    .await
    .unwrap();
    let requests = mock.requests();
    assert_eq!(requests.len(), before + 1, "Pi made one request");
    let first_user = requests[before].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap()
        .clone();
    assert!(
        first_user["content"]
            == json!([{"type": "text", "text": "what is this?"},
                      {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}}]),
        "Pi sends the whole image"
    );
}

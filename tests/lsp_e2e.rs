//! End to end: the real `pi-lsp` binary over stdio, a fake editor, and the loopback mock model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::time::{Duration, Instant};

use pi_e2e::lsp_client::{
    file_uri, start_with_mock, tool_result_text, unsaved_note, EditorBehavior,
};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{session_lines, TempDir};
use serde_json::{json, Value};

const DISK: &str = "title\nlemon 🍋 中 value=1\n";
const BUFFER: &str = "title\nlemon 🍋 中 value=2 (unsaved)\n";
const EDITED: &str = "title\nlemon 🍋 中 value=3 (unsaved)\n";

fn types(events: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in events {
        let ev = &e["event"];
        let t = ev["type"].as_str().unwrap().to_string();
        let label = match t.as_str() {
            "message_start" | "message_end" => {
                format!("{t}:{}", ev["message"]["role"].as_str().unwrap())
            }
            "tool_execution_start" | "tool_execution_end" => {
                format!("{t}:{}", ev["toolName"].as_str().unwrap())
            }
            _ => t,
        };
        // Collapse runs of updates: their number depends on chunking.
        if label.starts_with("message_update") || label.starts_with("tool_execution_update") {
            if out.last() != Some(&label) {
                out.push(label);
            }
        } else {
            out.push(label);
        }
    }
    out
}

async fn full_round(model: &str, utf8: bool) {
    let tmp = TempDir::new("round");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("notes.txt");
    std::fs::write(&file, DISK).unwrap();
    let mock = MockModel::start(vec![
        Step::call("call_read", "read", json!({"path": "notes.txt"})),
        Step::call(
            "call_edit",
            "edit",
            json!({"path": "notes.txt", "edits": [{"oldText": "value=2", "newText": "value=3"}]}),
        ),
        Step::call("call_bash", "bash", json!({"command": "cat notes.txt"})),
        Step::text("All done: value is now 3."),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        // The edit touches the user's unsaved line: the user is asked and saves theirs too.
        EditorBehavior {
            offer_utf8: utf8,
            message_action: Some("Save mine too".into()),
            ..Default::default()
        },
    )
    .await;
    c.open(&file, BUFFER).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "bump the value", "model": model}),
        )
        .await
        .unwrap();
    let session_id = r["sessionId"].as_str().unwrap().to_string();
    let run_id = r["runId"].as_str().unwrap().to_string();
    assert_eq!(r["queued"], false);
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert!(events
        .iter()
        .all(|e| e["sessionId"] == session_id.as_str() && e["runId"] == run_id.as_str()));

    let tool_turn = |tool: &str| -> Vec<String> {
        vec![
            "turn_start".into(),
            "message_start:assistant".into(),
            "message_update".into(),
            "message_end:assistant".into(),
            format!("tool_execution_start:{tool}"),
            format!("tool_execution_end:{tool}"),
            "message_start:toolResult".into(),
            "message_end:toolResult".into(),
            "turn_end".into(),
        ]
    };
    let mut expected: Vec<String> = vec!["agent_start".into()];
    let mut first = tool_turn("read");
    // A new session's first run tells its stored system message first (Pi 1.6).
    first.splice(
        1..1,
        [
            "message_start:system".to_string(),
            "message_end:system".to_string(),
            "message_start:user".to_string(),
            "message_end:user".to_string(),
        ],
    );
    expected.extend(first);
    expected.extend(tool_turn("edit"));
    // bash streams its output as updates between start and end.
    let mut bash = tool_turn("bash");
    bash.insert(5, "tool_execution_update".into());
    let got = types(&events);
    if !got.contains(&"tool_execution_update".to_string()) {
        bash.remove(5);
    }
    expected.extend(bash);
    expected.extend(
        [
            "turn_start",
            "message_start:assistant",
            "message_update",
            "message_end:assistant",
            "turn_end",
            "agent_end",
        ]
        .map(String::from),
    );
    assert_eq!(got, expected);

    // read saw the unsaved buffer; bash saw the edited text on disk.
    assert_eq!(
        tool_result_text(&events, "read"),
        (format!("{BUFFER}{}", unsaved_note("notes.txt")), false)
    );
    assert_eq!(
        tool_result_text(&events, "edit"),
        (
            "Successfully replaced 1 block(s) in notes.txt.".to_string(),
            false
        )
    );
    assert_eq!(
        tool_result_text(&events, "bash"),
        (EDITED.to_string(), false)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), EDITED);
    let doc = c.doc(&file).unwrap();
    assert_eq!((doc.text.as_str(), doc.version), (EDITED, 2));

    // The applyEdit: versioned TextDocumentEdit, ranges in the negotiated encoding.
    let log = c.log();
    let apply: Vec<&Value> = log
        .iter()
        .filter(|m| m["method"] == "workspace/applyEdit")
        .collect();
    assert_eq!(apply.len(), 1);
    // "lemon 🍋 中 " is 11 UTF-16 units and 15 UTF-8 bytes.
    let col = if utf8 { 15 } else { 11 };
    assert_eq!(
        apply[0]["params"]["edit"],
        json!({"documentChanges": [{"textDocument": {"uri": file_uri(&file), "version": 1},
            "edits": [{"range": {"start": {"line": 1, "character": col}, "end": {"line": 1, "character": col + 7}}, "newText": "value=3"}]}]})
    );

    // Work-done progress: created, then begin … report … end, the end just before agent_end.
    let create = log
        .iter()
        .position(|m| m["method"] == "window/workDoneProgress/create")
        .expect("progress create");
    let token = log[create]["params"]["token"].clone();
    let kinds: Vec<(usize, String)> = log
        .iter()
        .enumerate()
        .filter(|(_, m)| m["method"] == "$/progress" && m["params"]["token"] == token)
        .map(|(i, m)| {
            (
                i,
                m["params"]["value"]["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(kinds.first().unwrap().1, "begin");
    assert_eq!(kinds.last().unwrap().1, "end");
    assert!(
        kinds[1..kinds.len() - 1].iter().all(|(_, k)| k == "report") && kinds.len() >= 3,
        "{kinds:?}"
    );
    let agent_end_at = log
        .iter()
        .position(|m| m["params"]["event"]["type"] == "agent_end")
        .unwrap();
    assert!(create < kinds[0].0 && kinds.last().unwrap().0 < agent_end_at);

    // The session file: header, model, thinking level, the stored system message (Pi 1.6),
    // then every message in order, chained.
    let lines = session_lines(&ws);
    assert_eq!(lines.len(), 12);
    assert_eq!(
        (
            lines[0]["type"].as_str(),
            lines[0]["version"].as_u64(),
            lines[0]["id"].as_str()
        ),
        (Some("session"), Some(3), Some(session_id.as_str()))
    );
    assert_eq!(
        lines[0]["cwd"],
        ws.canonicalize().unwrap().display().to_string()
    );
    let (provider, model_id) = model.split_once('/').unwrap();
    assert_eq!(
        (
            lines[1]["type"].as_str(),
            lines[1]["provider"].as_str(),
            lines[1]["modelId"].as_str()
        ),
        (Some("model_change"), Some(provider), Some(model_id))
    );
    assert_eq!(
        (
            lines[2]["type"].as_str(),
            lines[2]["thinkingLevel"].as_str()
        ),
        (Some("thinking_level_change"), Some("off"))
    );
    let roles: Vec<&str> = lines[3..]
        .iter()
        .map(|l| l["message"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "toolResult",
            "assistant",
            "toolResult",
            "assistant"
        ]
    );
    let mut parent = Value::Null;
    for l in &lines[1..] {
        let id = l["id"].as_str().unwrap();
        assert!(
            id.len() == 8 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
        assert_eq!(l["parentId"], parent);
        parent = l["id"].clone();
    }
    for (call_line, result_line, id, name) in [
        (5, 6, "call_read", "read"),
        (7, 8, "call_edit", "edit"),
        (9, 10, "call_bash", "bash"),
    ] {
        assert_eq!(lines[call_line]["message"]["content"][0]["id"], id);
        assert_eq!(lines[call_line]["message"]["stopReason"], "toolUse");
        assert_eq!(
            (
                lines[result_line]["message"]["toolCallId"].as_str(),
                lines[result_line]["message"]["toolName"].as_str()
            ),
            (Some(id), Some(name))
        );
    }
    assert_eq!(
        lines[11]["message"]["content"],
        json!([{"type": "text", "text": "All done: value is now 3."}])
    );
    assert_eq!(lines[11]["message"]["stopReason"], "stop");
    assert_eq!(lines[11]["message"]["usage"]["totalTokens"], 110);
    assert_eq!(
        std::fs::read_to_string(ws.join(".pi/sessions/.gitignore"))
            .unwrap()
            .lines()
            .last(),
        Some("*")
    );

    // Every request paired; the last one carries all three results.
    mock.assert_paired();
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4);
    let auth = if provider == "mock" {
        reqs[0].headers["authorization"]
            .to_str()
            .unwrap()
            .to_string()
    } else {
        reqs[0].headers["x-api-key"].to_str().unwrap().to_string()
    };
    assert!(auth.ends_with("test-key"));
    assert!(c.shutdown().await.success());
    // A clean shutdown releases the session file's lock.
    let locks: Vec<_> = std::fs::read_dir(ws.join(".pi/sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "lock"))
        .collect();
    assert!(locks.is_empty(), "{locks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_utf16_round_reads_buffer_edits_through_editor_and_bash_sees_disk() {
    full_round("mock/mock-1", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_utf8_round_reads_buffer_edits_through_editor_and_bash_sees_disk() {
    full_round("mockant/mock-ant-1", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_rapid_incremental_changes_then_read_returns_final_text() {
    let tmp = TempDir::new("order");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("doc.txt");
    let mock = MockModel::start(vec![
        Step::call("r1", "read", json!({"path": "doc.txt"})),
        Step::text("ok"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&file, "").await;
    // Apply the same edits locally with independent arithmetic: insert at (line, utf16 col).
    let mut text = String::new();
    let pieces = ["a", "é", "🦊", "中", "\n", "bc"];
    for i in 0..1000 {
        let piece = pieces[i % pieces.len()];
        let lines: Vec<&str> = text.split('\n').collect();
        let line = (i * 7) % lines.len();
        let line_units: usize = lines[line].encode_utf16().count();
        // Pick a column on a char boundary.
        let mut col = 0;
        let mut byte = 0;
        for ch in lines[line].chars() {
            if col + ch.len_utf16() > (i * 3) % (line_units + 1) {
                break;
            }
            col += ch.len_utf16();
            byte += ch.len_utf8();
        }
        let line_start: usize = lines[..line].iter().map(|l| l.len() + 1).sum();
        text.insert_str(line_start + byte, piece);
        c.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": file_uri(&file), "version": i + 2},
                   "contentChanges": [{"range": {"start": {"line": line, "character": col}, "end": {"line": line, "character": col}}, "text": piece}]}),
        )
        .await;
    }
    c.request("agent/prompt", json!({"text": "read it"}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "read"),
        (format!("{text}{}", unsaved_note("doc.txt")), false)
    );
    mock.assert_paired();
}

/// A `didChange` whose content change has no `text` cannot be applied: the server logs a
/// warning naming the document and stops trusting the buffer, so the next read is the file on
/// disk; the editor's next full-text change makes the buffer count again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_did_change_without_text_is_logged_and_reads_go_to_disk() {
    let tmp = TempDir::new("notext");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("doc.txt");
    std::fs::write(&file, "on disk\n").unwrap();
    let mock = MockModel::start(vec![
        Step::call("r1", "read", json!({"path": "doc.txt"})),
        Step::text("ok"),
        Step::call("r2", "read", json!({"path": "doc.txt"})),
        Step::text("ok"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&file, "in the buffer\n").await;
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&file), "version": 2},
               "contentChanges": [{"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 2}}}]}),
    )
    .await;
    c.request("agent/prompt", json!({"text": "read it"}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "read"),
        ("on disk\n".to_string(), false)
    );
    let log = c.stderr.lock().unwrap().clone();
    assert!(
        log.contains(&format!(
            "textDocument/didChange for {} could not be applied (missing field `text`",
            file_uri(&file)
        )) && log.contains("its buffer is no longer trusted; tools read the file from disk"),
        "{log}"
    );
    // The whole text again: the buffer is the editor's text once more.
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&file), "version": 3},
               "contentChanges": [{"text": "whole again\n"}]}),
    )
    .await;
    c.request("agent/prompt", json!({"text": "read it again"}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "read"),
        (format!("whole again\n{}", unsaved_note("doc.txt")), false)
    );
    mock.assert_paired();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_kills_the_process_group_and_pairs_the_call() {
    let tmp = TempDir::new("abort");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // A duration no other process on the machine uses, so only this test's sleeps are counted
    // (other tests and other programs may run `sleep 30` at the same time).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let sleep = format!("sleep 30.{:09}{}", nanos, std::process::id());
    let command = format!("{sleep} & {sleep}; : {}", tmp.path().display());
    let mock = MockModel::start(vec![Step::call(
        "call_sleep",
        "bash",
        json!({"command": command}),
    )])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = c
        .request("agent/prompt", json!({"text": "wait"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    // Wait for bash to start, then give the shell a moment to spawn both sleeps.
    loop {
        let n = c
            .next_notification(Duration::from_secs(10))
            .await
            .expect("tool start");
        if n["params"]["event"]["type"] == "tool_execution_start" {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Live (not zombie) `sleep 30` processes of this test (run in its workspace; other
    // tests on the machine may run their own): exited ones wait for PID 1 to reap them.
    let ws_real = ws.canonicalize().unwrap();
    let count_sleeps = || {
        let out = std::process::Command::new("ps")
            .args(["-eo", "pid=,stat=,args="])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.ends_with(sleep.as_str()))
            .filter(|l| {
                let mut f = l.split_whitespace();
                let pid = f.next().unwrap_or("");
                let live = !f.next().unwrap_or("").starts_with('Z');
                let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
                live && cwd.is_some_and(|c| c.starts_with(&ws_real))
            })
            .count()
    };
    assert!(count_sleeps() >= 2, "both sleeps should run");
    let t0 = Instant::now();
    let abort = c
        .request("agent/abort", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(
        abort,
        json!({"aborted": true, "runId": r["runId"],
            "stoppedToolCalls": [{"toolCallId": "call_sleep", "toolName": "bash", "args": {"command": command}}],
            "stoppedProcesses": [{"toolCallId": "call_sleep", "command": command}],
            "appliedEdits": [], "queuedMessages": []})
    );
    let events = c.run_until_end(Duration::from_secs(5)).await;
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "run ended {took:?} after abort"
    );
    assert_eq!(count_sleeps(), 0, "sleep processes survived the abort");
    assert_eq!(
        c.request("agent/abort", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"aborted": false, "stoppedToolCalls": [], "stoppedProcesses": [], "appliedEdits": [], "queuedMessages": []})
    );
    let (text, is_error) = tool_result_text(&events, "bash");
    assert!(is_error && text.ends_with("Command aborted"), "{text}");
    let last_assistant = events
        .iter()
        .rev()
        .find(|e| {
            e["event"]["type"] == "message_end" && e["event"]["message"]["role"] == "assistant"
        })
        .unwrap();
    assert_eq!(last_assistant["event"]["message"]["stopReason"], "aborted");
    let lines = session_lines(&ws);
    let roles: Vec<(String, String)> = lines[3..]
        .iter()
        .map(|l| {
            (
                l["message"]["role"].as_str().unwrap().to_string(),
                l["message"]["stopReason"]
                    .as_str()
                    .or(l["message"]["toolCallId"].as_str())
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [
            ("system", ""),
            ("user", ""),
            ("assistant", "toolUse"),
            ("toolResult", "call_sleep"),
            ("assistant", "aborted")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(lines[6]["message"]["isError"], true);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors_and_the_server_goes_on() {
    let tmp = TempDir::new("bad");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![
        Step::Hang("thinking".into()),
        Step::text("after abort"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let e = c
        .request("agent/prompt", json!({"txt": "typo"}))
        .await
        .unwrap_err();
    assert_eq!((e["code"].as_i64(), e["message"].as_str()), (Some(-32602), Some("txt: unknown field `txt`, expected one of `text`, `images`, `sessionId`, `model`, `streamingBehavior`")));
    let e = c
        .request("agent/prompt", json!({"text": 5}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("text: invalid type: integer `5`"),
        "{e}"
    );
    let e = c.request("agent/abort", json!({})).await.unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (Some(-32602), Some("missing field `sessionId`"))
    );
    let e = c.request("agent/nonsense", json!({})).await.unwrap_err();
    assert_eq!(e["code"], -32601);
    let e = c
        .request("agent/abort", json!({"sessionId": "nope"}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31002);
    let e = c
        .request("agent/prompt", json!({"text": "x", "sessionId": "nope"}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31002);
    let e = c
        .request("agent/prompt", json!({"text": "x", "model": "nobody/none"}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31003);
    c.send_raw("{this is not json").await;
    let parse_errors: Vec<Value> = c
        .log_matching(1, Duration::from_secs(5), |m| m["error"]["code"] == -32700)
        .await;
    assert_eq!(parse_errors.len(), 1, "{parse_errors:?}");
    assert_eq!(parse_errors[0]["id"], Value::Null);
    assert!(parse_errors[0]["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Parse error: invalid JSON"));
    // JSON that is not a JSON-RPC 2.0 request: Invalid Request, with the message's own id when
    // it has one, and the server goes on.
    for raw in [
        "{}",
        "[]",
        r#"{"id":5000,"method":"agent/state","params":{}}"#,
        r#"{"jsonrpc":"1.0","id":5001,"method":"agent/state"}"#,
        r#"{"jsonrpc":"2.0","id":5002}"#,
        r#"{"jsonrpc":"2.0","id":5003,"method":7}"#,
    ] {
        c.send_raw(raw).await;
    }
    // A frame without Content-Length, glued to the next request's header: its `{}` is
    // answered (no id to answer under: `null`), and the next request is read.
    c.send_bytes(b"X-Foo: 1\r\n\r\n{}").await;
    let listed = c.request("agent/session/list", json!({})).await;
    assert!(listed.is_ok(), "{listed:?}");
    // The guard's answers are written between the server's frames, the last possibly after
    // the list's answer.
    let invalid: Vec<Value> = c
        .log_matching(7, Duration::from_secs(5), |m| m["error"]["code"] == -32600)
        .await
        .into_iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(
        invalid,
        [
            json!(null),
            json!(null),
            json!(5000),
            json!(5001),
            json!(5002),
            json!(5003),
            json!(null)
        ]
    );

    // A run is active: a second prompt needs streamingBehavior.
    let r = c
        .request("agent/prompt", json!({"text": "first"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let e = c
        .request("agent/prompt", json!({"text": "second", "sessionId": sid}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31001);
    assert!(
        e["message"].as_str().unwrap().contains("streamingBehavior"),
        "{e}"
    );
    let q = c
        .request(
            "agent/prompt",
            json!({"text": "later", "sessionId": sid, "streamingBehavior": "followUp"}),
        )
        .await
        .unwrap();
    assert_eq!(
        (q["queued"].as_bool(), q["runId"].as_str()),
        (Some(true), r["runId"].as_str())
    );
    // Abort once the hanging response is streaming.
    loop {
        let n = c
            .next_notification(Duration::from_secs(10))
            .await
            .expect("streaming");
        if n["params"]["event"]["type"] == "message_update" {
            break;
        }
    }
    c.request("agent/abort", json!({"sessionId": sid}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(5)).await;
    let aborted = events
        .iter()
        .rev()
        .find(|e| e["event"]["type"] == "message_end")
        .unwrap();
    // What streamed before the abort is kept in the aborted message.
    let kept = aborted["event"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(!kept.is_empty() && "thinking".starts_with(kept), "{kept}");
    assert_eq!(aborted["event"]["message"]["stopReason"], "aborted");
    // The server still serves: continue the same session.
    c.request("agent/prompt", json!({"text": "again", "sessionId": sid}))
        .await
        .unwrap();

    let events = c.run_until_end(Duration::from_secs(10)).await;
    let end = events
        .iter()
        .rev()
        .find(|e| e["event"]["type"] == "message_end")
        .unwrap();
    assert_eq!(end["event"]["message"]["content"][0]["text"], "after abort");
    // The follow-up queued before the abort was kept and goes first with the next prompt.
    let last = mock.requests().pop().unwrap();
    let users: Vec<String> = last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            parts => parts
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["text"].as_str().unwrap())
                .collect::<Vec<_>>()
                .join(" | "),
        })
        .collect();
    // The first message after the aborted turn says the task was interrupted (PAIR-05).
    assert_eq!(
        users,
        [
            "first".to_string(),
            format!("{} | later", pi_ai::transform::INTERRUPTED_NOTE),
            "again".to_string()
        ]
    );
    mock.assert_paired();
    assert!(c.shutdown().await.success());
}

async fn provider_failure(step: Step, expect: &str) {
    let tmp = TempDir::new("fail");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![step]).await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.request("agent/prompt", json!({"text": "hi"}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(10)).await;
    let end = events
        .iter()
        .rev()
        .find(|e| e["event"]["type"] == "message_end")
        .unwrap();
    let m = &end["event"]["message"];
    assert_eq!(m["stopReason"], "error");
    assert!(m["errorMessage"].as_str().unwrap().contains(expect), "{m}");
    let lines = session_lines(&ws);
    assert_eq!(lines.last().unwrap()["message"]["stopReason"], "error");
    assert_eq!(
        lines.last().unwrap()["message"]["errorMessage"],
        m["errorMessage"]
    );
    assert!(c.shutdown().await.success(), "server should exit cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_500_is_retried_then_ends_the_run_with_an_error_entry() {
    let tmp = TempDir::new("retry");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join(".pi")).unwrap();
    std::fs::write(
        ws.join(".pi/settings.json"),
        r#"{"retry": {"enabled": true, "maxRetries": 2, "baseDelayMs": 20}}"#,
    )
    .unwrap();
    let fail = || Step::Raw {
        status: 503,
        content_type: "application/json".into(),
        body: r#"{"error":{"message":"overloaded"}}"#.into(),
    };
    let mock = MockModel::start(vec![fail(), fail(), fail()]).await;
    // Project settings apply only in a trusted workspace.
    let trusted = EditorBehavior {
        initialization_options: Some(json!({"workspaceTrusted": true})),
        ..EditorBehavior::default()
    };
    let mut c = start_with_mock(&ws, &mock, trusted).await;
    c.request("agent/prompt", json!({"text": "hi"}))
        .await
        .unwrap();
    let mut events = c.run_until_end(Duration::from_secs(10)).await;
    // Pi 1.6 says the last failure after its run's `agent_end`, then settles.
    loop {
        let n = c
            .next_notification(Duration::from_secs(10))
            .await
            .expect("agent_settled");
        if n["method"] != "agent/event" {
            continue;
        }
        let settled = n["params"]["event"]["type"] == "agent_settled";
        events.push(n["params"].clone());
        if settled {
            break;
        }
    }
    let retry_events: Vec<Value> = events
        .iter()
        .map(|e| e["event"].clone())
        .filter(|e| e["type"].as_str().unwrap().starts_with("auto_retry"))
        .collect();
    let err = r#"503: {"message":"overloaded"}"#;
    // Delays double from 20 ms, as Pi 1.6's (no jitter).
    assert_eq!(
        retry_events,
        vec![
            json!({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 2, "delayMs": 20, "errorMessage": err}),
            json!({"type": "auto_retry_start", "attempt": 2, "maxAttempts": 2, "delayMs": 40, "errorMessage": err}),
            json!({"type": "auto_retry_end", "success": false, "attempt": 2, "finalError": err}),
        ]
    );
    assert_eq!(mock.requests().len(), 3);
    // Failed attempts stay in the session file but left the context: each request had one user message.
    for r in mock.requests() {
        assert_eq!(
            r.body["messages"].as_array().unwrap().len(),
            2,
            "{}",
            r.body["messages"]
        );
    }
    let lines = session_lines(&ws);
    let errors = lines
        .iter()
        .filter(|l| l["message"]["stopReason"] == "error")
        .count();
    assert_eq!(errors, 3);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_400_ends_the_run_with_an_error_entry() {
    provider_failure(
        Step::Raw {
            status: 400,
            content_type: "application/json".into(),
            body: r#"{"error":{"message":"invalid request"}}"#.into(),
        },
        r#"400: {"message":"invalid request"}"#,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_sse_ends_the_run_with_an_error_entry() {
    provider_failure(
        Step::Raw {
            status: 200,
            content_type: "text/event-stream".into(),
            body: "data: {not json\n\n".into(),
        },
        "invalid JSON",
    )
    .await;
}

/// Editors that answer `applied: true` without a `didChange`, or save on request. (An editor
/// answering `applied: false` is `tools_e2e.rs`'s
/// `client_declining_the_edit_is_an_error_and_changes_nothing`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_send_no_did_change_are_trusted_and_saving_clients_save() {
    let tmp = TempDir::new("refuse");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("a.txt");
    std::fs::write(&file, "x = 1\n").unwrap();

    // A client that answers applied: true but sends no didChange is trusted: the disk gets the
    // edited text (after the documented wait).
    let mock = MockModel::start(vec![
        Step::call(
            "e2",
            "edit",
            json!({"path": "a.txt", "edits": [{"oldText": "x = 1", "newText": "x = 2"}]}),
        ),
        Step::text("edited"),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            send_changes: false,
            ..Default::default()
        },
    )
    .await;
    c.open(&file, "x = 1\n").await;
    c.request("agent/prompt", json!({"text": "edit"}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(10)).await;
    // The server never heard of the edit in the buffer, so to it the buffer still differs
    // from the disk, and the result says so.
    assert_eq!(
        tool_result_text(&events, "edit"),
        (
            format!(
                "Successfully replaced 1 block(s) in a.txt.{}",
                unsaved_note("a.txt")
            ),
            false
        )
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x = 2\n");
    assert!(c.stderr.lock().unwrap().contains("no didChange for"));
    std::fs::write(&file, "x = 1\n").unwrap();
    c.shutdown().await;

    // A client that saves on request: write creates a new file through CreateFile + edit.
    let mock = MockModel::start(vec![
        Step::call(
            "w1",
            "write",
            json!({"path": "sub/new.txt", "content": "fresh 🦊\n"}),
        ),
        Step::text("written"),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            save_documents: true,
            ..Default::default()
        },
    )
    .await;
    c.request("agent/prompt", json!({"text": "write"}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(10)).await;
    assert_eq!(
        tool_result_text(&events, "write"),
        ("Successfully wrote to sub/new.txt".to_string(), false)
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("sub/new.txt")).unwrap(),
        "fresh 🦊\n"
    );
    let log = c.log();
    let ops = &log
        .iter()
        .find(|m| m["method"] == "workspace/applyEdit")
        .unwrap()["params"]["edit"]["documentChanges"];
    assert_eq!(ops[0]["kind"], "create");
    assert!(log.iter().any(|m| m["method"] == "agent/saveDocument"));
    c.shutdown().await;
}

/// A window reload: the new server asks for the session while the old one is still exiting.
/// It waits for the file to be released and continues the same session (no fork), with
/// everything the old server wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_released_by_an_exiting_server_is_resumed_not_forked() {
    let tmp = TempDir::new("reload-resume");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let mut a = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = a
        .request("agent/prompt", json!({"text": "first"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    a.run_until_end(Duration::from_secs(10)).await;
    let mut b = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    // The old server goes away 300 ms after the new one asks (its session still open).
    let (state, _) = tokio::join!(b.request("agent/state", json!({"sessionId": sid})), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        a.shutdown().await
    });
    let state = state.unwrap();
    assert_eq!(state["sessionId"], json!(sid));
    // The stored system message, the prompt, the answer (Pi 1.6's count).
    assert_eq!(state["messageCount"], json!(3));
    b.request("agent/prompt", json!({"text": "second", "sessionId": sid}))
        .await
        .unwrap();
    b.run_until_end(Duration::from_secs(10)).await;
    assert!(!b.log().iter().any(|m| m["method"] == "window/showMessage"
        && m["params"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("fork")));
    let files: Vec<_> = std::fs::read_dir(ws.join(".pi/sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let users: Vec<String> = std::fs::read_to_string(&files[0])
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["message"]["role"] == "user")
        .map(|l| {
            l["message"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(users, ["first", "second"]);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_open_in_another_server_continues_in_a_fork() {
    // SESS-04: one live writer per file; the second server forks and says so.
    let tmp = TempDir::new("two-writers");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let mut a = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = a
        .request("agent/prompt", json!({"text": "first"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    a.run_until_end(Duration::from_secs(10)).await;
    let mut b = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r2 = b
        .request("agent/prompt", json!({"text": "second", "sessionId": sid}))
        .await
        .unwrap();
    let fork_id = r2["sessionId"].as_str().unwrap().to_string();
    assert_ne!(fork_id, sid);
    b.run_until_end(Duration::from_secs(10)).await;
    assert!(b.log().iter().any(|m| m["method"] == "window/showMessage"
        && m["params"]["message"]
            .as_str()
            .unwrap()
            .contains("continuing in a fork")));
    let dir = ws.join(".pi/sessions");
    let fork_file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(&format!("_{fork_id}.jsonl")))
        .unwrap();
    let lines: Vec<Value> = std::fs::read_to_string(&fork_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines[0]["parentSession"]
        .as_str()
        .unwrap()
        .ends_with(&format!("_{sid}.jsonl")));
    let users: Vec<&str> = lines
        .iter()
        .filter(|l| l["message"]["role"] == "user")
        .map(|l| l["message"]["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["first", "second"]);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_file_resumes_in_a_new_server() {
    let tmp = TempDir::new("resume");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let mut a = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let sid = a
        .request("agent/prompt", json!({"text": "first"}))
        .await
        .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    a.run_until_end(Duration::from_secs(10)).await;
    a.shutdown().await;
    let mut b = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = b
        .request("agent/prompt", json!({"text": "second", "sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(r["sessionId"], sid.as_str());
    b.run_until_end(Duration::from_secs(10)).await;
    // The second request carried the first exchange.
    let last = mock.requests().pop().unwrap();
    let roles: Vec<&str> = last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    let lines = session_lines(&ws);
    // The stored system message too (the second run's prompt and tools are the same: no patch).
    assert_eq!(lines.iter().filter(|l| l["type"] == "message").count(), 5);
    b.shutdown().await;
}

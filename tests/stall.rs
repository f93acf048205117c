//! Long requests never stall the server (issue 16 §2): with eight sessions each running a long
//! `agent/bash` command, a `didChange`, an `agent/state`, an `agent/bash/abort` and an edit the
//! agent applies through the editor (which waits for the editor's `didChange`) are each served
//! within 50 ms — the real binary over stdio, the loopback mock model, real shell processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::time::{Duration, Instant};

use pi_e2e::lsp_client::{start_with_mock, EditorBehavior};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

/// What each message may take while eight `agent/bash` commands are in flight.
const BOUND: Duration = Duration::from_millis(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_long_user_commands_do_not_hold_up_sync_state_abort_or_edits() {
    let tmp = TempDir::new("stall");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let file = ws.join("a.txt");
    std::fs::write(&file, "one\n").unwrap();
    let mock = MockModel::start(vec![
        Step::call("call_read", "read", json!({"path": "a.txt"})),
        Step::call(
            "call_edit",
            "edit",
            json!({"path": "a.txt", "edits": [{"oldText": "two", "newText": "three"}]}),
        ),
        Step::text("done"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    c.open(&file, "one\n").await;

    // Eight sessions, each with a long user command in flight.
    let mut sessions = Vec::new();
    let mut commands = Vec::new();
    for i in 0..8 {
        let sid = c
            .request("agent/session/new", json!({"model": "mock/mock-1"}))
            .await
            .unwrap()["sessionId"]
            .as_str()
            .unwrap()
            .to_string();
        let marker = ws.join(format!("started-{i}"));
        commands.push(
            c.send_request(
                "agent/bash",
                json!({"sessionId": sid, "command": format!("touch {}; sleep 30", marker.display())}),
            )
            .await,
        );
        sessions.push(sid);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while (0..8).any(|i| !ws.join(format!("started-{i}")).exists()) {
        assert!(
            Instant::now() < deadline,
            "the eight commands did not start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The user types; a request read after it is answered at once.
    let t = Instant::now();
    c.set_buffer(&file, "two\n").await;
    let state = c
        .request("agent/state", json!({"sessionId": sessions[0]}))
        .await
        .unwrap();
    let sync_and_state = t.elapsed();
    assert_eq!(
        (
            state["sessionId"].clone(),
            state["isStreaming"].clone(),
            state["isBashRunning"].clone()
        ),
        (json!(sessions[0]), json!(false), json!(true))
    );

    let t = Instant::now();
    let abort = c
        .request("agent/bash/abort", json!({"sessionId": sessions[0]}))
        .await
        .unwrap();
    let abort_took = t.elapsed();
    assert_eq!(abort, json!({"aborted": true}));
    let first = tokio::time::timeout(Duration::from_secs(3), commands.remove(0))
        .await
        .expect("the aborted command did not answer")
        .unwrap();
    assert_eq!(
        (
            first["result"]["cancelled"].clone(),
            first["result"]["exitCode"].clone()
        ),
        (json!(true), Value::Null)
    );

    // A ninth session's agent reads the file (it sees the typed text) and edits it through the
    // editor: the edit completes when the editor's didChange for it has been applied.
    c.request(
        "agent/prompt",
        json!({"text": "change two to three", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let mut events: Vec<(Instant, Value)> = Vec::new();
    loop {
        let n = c
            .next_notification(Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("no agent_end; stderr:\n{}", c.stderr.lock().unwrap()));
        if n["method"] != "agent/event" {
            continue;
        }
        let end = n["params"]["event"]["type"] == "agent_end";
        events.push((Instant::now(), n["params"]["event"].clone()));
        if end {
            break;
        }
    }
    let at = |ty: &str, tool: &str| {
        events
            .iter()
            .find(|(_, e)| e["type"] == ty && e["toolName"] == tool)
            .map(|(t, e)| (*t, e.clone()))
            .unwrap_or_else(|| panic!("no {ty} of {tool}"))
    };
    let (_, read) = at("tool_execution_end", "read");
    assert_eq!(
        (
            read["result"]["content"][0]["text"].clone(),
            read["isError"].clone()
        ),
        // The buffer's text, and the note that the disk differs by the user's unsaved change.
        (
            json!(format!(
                "two\n{}",
                pi_e2e::lsp_client::unsaved_note("a.txt")
            )),
            json!(false)
        )
    );
    let (edit_start, _) = at("tool_execution_start", "edit");
    let (edit_end, edit) = at("tool_execution_end", "edit");
    assert_eq!(edit["isError"], json!(false), "edit failed: {edit}");
    let edit_took = edit_end - edit_start;
    assert_eq!(c.doc(&file).unwrap().text, "three\n");

    eprintln!(
        "with 8 agent/bash in flight: didChange+agent/state {sync_and_state:?}, agent/bash/abort {abort_took:?}, edit through the editor {edit_took:?}"
    );
    assert!(
        sync_and_state < BOUND,
        "didChange + agent/state took {sync_and_state:?}"
    );
    assert!(abort_took < BOUND, "agent/bash/abort took {abort_took:?}");
    assert!(
        edit_took < BOUND,
        "the edit (applyEdit + the editor's didChange) took {edit_took:?}"
    );

    // The other seven commands still run, and stop on request.
    for (sid, cmd) in sessions.iter().skip(1).zip(commands) {
        assert_eq!(
            c.request("agent/bash/abort", json!({"sessionId": sid}))
                .await
                .unwrap(),
            json!({"aborted": true})
        );
        let r = tokio::time::timeout(Duration::from_secs(3), cmd)
            .await
            .expect("an aborted command did not answer")
            .unwrap();
        assert_eq!(r["result"]["cancelled"], json!(true));
    }
    c.shutdown().await;
}

//! End to end, the `agent/*` protocol under malformed and out-of-order calls, as an outside
//! client would send them: a field left out must be an error naming it (never read as
//! `null`), wrong-typed params name the field in words, and the session file and state stay
//! as they were; closing a session stops everything that could still write into its file.
//! The real `pi-lsp` binary over stdio against the loopback mock model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::sync::Arc;
use std::time::Duration;

use pi_e2e::lsp_client::{agent_env, start_with_mock, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, TempDir};
use serde_json::{json, Value};

fn workspace(tmp: &TempDir) -> std::path::PathBuf {
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    ws
}

/// A session with one finished prompt; returns its id and file.
async fn session_with_a_turn(c: &mut LspClient) -> (String, std::path::PathBuf) {
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "hello", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(20)).await;
    let state = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    (sid, state["sessionFile"].as_str().unwrap().into())
}

/// Starts a run with the prompt "go" on the mock model; returns its session id.
async fn prompt_go(c: &mut LspClient) -> String {
    c.request(
        "agent/prompt",
        json!({"text": "go", "model": "mock/mock-1"}),
    )
    .await
    .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `(code, message)` of an error answer.
fn err(e: Value) -> (i64, String) {
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_and_malformed_params_are_refused_naming_the_field_and_change_nothing() {
    let tmp = TempDir::new("audit-params");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::text("hi")]).await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let (sid, file) = session_with_a_turn(&mut c).await;
    let editor_policy = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap()["approvalPolicy"]
        .clone();
    assert_ne!(editor_policy, "ask");
    // A session whose user chose "ask".
    assert_eq!(
        c.request(
            "agent/permissions/set",
            json!({"sessionId": sid, "approvalPolicy": "ask"})
        )
        .await
        .unwrap(),
        json!({"approvalPolicy": "ask", "sessionRules": []})
    );
    let label_target = c
        .request("agent/session/tree", json!({"sessionId": sid}))
        .await
        .unwrap()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["role"] == "user")
        .unwrap()["id"]
        .clone();
    c.request(
        "agent/session/label",
        json!({"sessionId": sid, "entryId": label_target, "label": "start"}),
    )
    .await
    .unwrap();
    let file_before = std::fs::read(&file).unwrap();
    let state_before = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();

    let cases = [
        // Left out, these were read as `null`: the leaf moved before the first entry, the
        // label was cleared, and the session's "ask" policy fell back to the default.
        (
            "agent/session/branch",
            json!({"sessionId": sid}),
            "missing field `entryId`",
        ),
        (
            "agent/session/label",
            json!({"sessionId": sid, "entryId": label_target}),
            "missing field `label`",
        ),
        (
            "agent/permissions/set",
            json!({"sessionId": sid}),
            "missing field `approvalPolicy`",
        ),
        // By-position params were read as the struct's fields in order, and the error
        // named a Rust type.
        (
            "agent/state",
            json!([sid]),
            "params: expected an object of named parameters, got an array",
        ),
        (
            "agent/session/name",
            json!(["x", "y"]),
            "params: expected an object of named parameters, got an array",
        ),
        // An empty array is an empty object (what Neovim sends for `{}`): the field it
        // lacks is named.
        ("agent/session/name", json!([]), "missing field `sessionId`"),
        // The untagged-enum error named a Rust type instead of the expected shapes.
        (
            "agent/sendMessage",
            json!({"sessionId": sid, "customType": "note", "content": 5}),
            "content: expected a string or an array of text/image blocks, got a number",
        ),
        // Images of a custom message are checked as a prompt's are (a bad one used to be
        // stored and then failed every later provider request).
        (
            "agent/sendMessage",
            json!({"sessionId": sid, "customType": "note",
                   "content": [{"type": "text", "text": "see"}, {"type": "image", "data": "!!", "mimeType": "image/png"}]}),
            "content[1].data: expected base64 data without a data: prefix",
        ),
        (
            "agent/sendMessage",
            json!({"sessionId": sid, "customType": "note",
                   "content": [{"type": "image", "data": "aGk=", "mimeType": "text/plain"}]}),
            "content[0].mimeType: expected an image/* type, got \"text/plain\"",
        ),
    ];
    for (method, params, message) in cases {
        let e = c.request(method, params.clone()).await.unwrap_err();
        assert_eq!(err(e), (-32602, message.to_string()), "{method} {params}");
    }
    // Nothing changed: the file byte for byte, the state field for field.
    assert_eq!(std::fs::read(&file).unwrap(), file_before);
    assert_eq!(
        c.request("agent/state", json!({"sessionId": sid}))
            .await
            .unwrap(),
        state_before
    );
    assert_eq!(state_before["approvalPolicy"], "ask");
    // `null` is still the explicit way to say it: back to the editor's policy.
    assert_eq!(
        c.request(
            "agent/permissions/set",
            json!({"sessionId": sid, "approvalPolicy": null})
        )
        .await
        .unwrap(),
        json!({"approvalPolicy": editor_policy, "sessionRules": []})
    );
    let cleared = c
        .request(
            "agent/session/label",
            json!({"sessionId": sid, "entryId": label_target, "label": null}),
        )
        .await
        .unwrap();
    assert!(cleared["labelEntryId"].is_string());
    let to_root = c
        .request(
            "agent/session/branch",
            json!({"sessionId": sid, "entryId": null}),
        )
        .await
        .unwrap();
    assert_eq!(to_root, json!({"leafId": null, "messageCount": 0}));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_stops_its_user_shell_command_before_releasing_the_file() {
    let tmp = TempDir::new("audit-close-bash");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::text("hi")]).await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let (sid, file) = session_with_a_turn(&mut c).await;
    let marker = ws.join("still-running");
    let bash = c
        .send_request(
            "agent/bash",
            json!({"sessionId": sid, "command": format!("sleep 4; touch {}", marker.display())}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closed = c
        .request("agent/session/close", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(closed, json!({"closed": true, "dropped": []}));
    // The command was killed, and its answer came before the close answer was sent.
    let bash = tokio::time::timeout(Duration::from_millis(100), bash)
        .await
        .expect("agent/bash still open after agent/session/close")
        .unwrap();
    assert_eq!(
        bash["result"],
        json!({"output": "", "exitCode": null, "cancelled": true, "truncated": false,
               "entryId": bash["result"]["entryId"]})
    );
    let after_close = std::fs::read_to_string(&file).unwrap();
    let last: Value = serde_json::from_str(after_close.lines().last().unwrap()).unwrap();
    assert_eq!(
        (
            last["id"].clone(),
            last["message"]["role"].clone(),
            last["message"]["cancelled"].clone()
        ),
        (
            bash["result"]["entryId"].clone(),
            json!("bashExecution"),
            json!(true)
        )
    );
    // Nothing writes into the released file afterwards, and the command's process is gone.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after_close);
    assert!(!marker.exists(), "the shell command outlived its session");
    // The id opens the file again on use.
    let state = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(state["isBashRunning"], false);
    c.shutdown().await;
}

fn is_summary(body: &Value) -> bool {
    body.to_string().contains("context summarization assistant")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_compact_request_leaves_no_compaction_and_closed_sessions_answer() {
    let tmp = TempDir::new("audit-compact-cancel");
    let ws = workspace(&tmp);
    let gate = Arc::new(tokio::sync::Notify::new());
    let mock = MockModel::start_with_delay(
        vec![
            Step::text("first answer"),
            Step::text("second answer"),
            Step::text("third answer"),
        ],
        Duration::ZERO,
    )
    .await;
    let g = gate.clone();
    mock.set_responder(Arc::new(move |body: &Value| {
        is_summary(body).then(|| Step::Gate(g.clone(), Box::new(Step::text("SUMMARY"))))
    }));
    std::fs::create_dir_all(ws.join(".pi")).unwrap();
    std::fs::write(
        ws.join(".pi/settings.json"),
        json!({"compaction": {"keepRecentTokens": 10}}).to_string(),
    )
    .unwrap();
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            initialization_options: Some(json!({"workspaceTrusted": true})),
            ..Default::default()
        },
    )
    .await;
    let (sid, file) = session_with_a_turn(&mut c).await;
    for word in ["alpha ", "beta "] {
        c.request(
            "agent/prompt",
            json!({"text": word.repeat(300), "sessionId": sid}),
        )
        .await
        .unwrap();
        c.run_until_end(Duration::from_secs(20)).await;
    }
    let before = std::fs::read_to_string(&file).unwrap();

    // `$/cancelRequest` while the summary is being written: the answer is RequestCancelled,
    // and the compaction really is cancelled (it used to go on and write its entry).
    let pending = c
        .send_request("agent/compact", json!({"sessionId": sid}))
        .await;
    let id = c.last_request_id();
    for _ in 0..500 {
        if mock.requests().iter().any(|r| is_summary(&r.body)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.notify("$/cancelRequest", json!({"id": id})).await;
    let answer = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
    gate.notify_one();
    let mut state = Value::Null;
    for _ in 0..200 {
        state = c
            .request("agent/state", json!({"sessionId": sid}))
            .await
            .unwrap();
        if state["isStreaming"] == false {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        (&state["isStreaming"], &state["isCompacting"]),
        (&json!(false), &json!(false))
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);

    // A closed session's id still names its file: abort answers "nothing to stop" and
    // compact opens it (both used to answer -31002 "no session").
    assert_eq!(
        c.request("agent/session/close", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"closed": true, "dropped": []})
    );
    assert_eq!(
        c.request("agent/abort", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"aborted": false, "stoppedToolCalls": [], "stoppedProcesses": [],
               "appliedEdits": [], "queuedMessages": []})
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    let gate2 = gate.clone();
    let compacted = c
        .send_request("agent/compact", json!({"sessionId": sid}))
        .await;
    gate2.notify_one();
    let compacted = tokio::time::timeout(Duration::from_secs(20), compacted)
        .await
        .unwrap()
        .unwrap();
    let last: Value = serde_json::from_str(
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["type"], "compaction", "{compacted}");
    assert_eq!(
        compacted["result"],
        json!({"summary": last["summary"], "firstKeptEntryId": last["firstKeptEntryId"],
               "tokensBefore": last["tokensBefore"],
               "estimatedTokensAfter": compacted["result"]["estimatedTokensAfter"].as_u64().filter(|n| *n > 0).unwrap(),
               "usage": last["usage"], "details": last["details"]})
    );
    assert_eq!(last["summary"], "SUMMARY");
    c.shutdown().await;
}

/// The log's answer to the request with string id `id`.
async fn answer_to(c: &LspClient, id: &str) -> Value {
    for _ in 0..500 {
        if let Some(m) = c
            .log()
            .into_iter()
            .find(|m| m["id"] == id && m.get("method").is_none())
        {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no answer to {id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_the_transport_cannot_hold_are_refused_and_params_may_be_left_out() {
    let tmp = TempDir::new("audit-ids");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::text("hi")]).await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let (sid, _) = session_with_a_turn(&mut c).await;
    // Each of these used to end the server: the guard let any JSON number through as an id,
    // and the transport, whose ids are i64 or strings, stopped reading at the first one.
    for raw in [
        r#"{"jsonrpc":"2.0","id":1.5,"method":"agent/session/list","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1e3,"method":"agent/session/list","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"agent/session/list","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":2.5,"result":{}}"#,
    ] {
        c.send_raw(raw).await;
        let listed = c.request("agent/session/list", json!({})).await;
        assert_eq!(listed.unwrap()["sessions"][0]["sessionId"], sid.as_str());
    }
    // The guard's answers are written between the server's frames: the last may come after
    // the answer to the request sent behind it.
    let invalid: Vec<Value> = c
        .log_matching(4, Duration::from_secs(5), |m| m["error"]["code"] == -32600)
        .await
        .into_iter()
        .map(|m| json!([m["id"], m["error"]["message"]]))
        .collect();
    let why = "Invalid request: \"id\" must be an integer, a string or null";
    assert_eq!(invalid, vec![json!([null, why]); 4]);

    // A request may leave `params` out (vscode-jsonrpc's `sendRequest(method)` does): methods
    // whose params are all optional answer, the others name the missing field.
    c.send_raw(r#"{"jsonrpc":"2.0","id":"list","method":"agent/session/list"}"#)
        .await;
    let list = answer_to(&c, "list").await;
    assert_eq!(list["result"]["sessions"][0]["sessionId"], sid.as_str());
    c.send_raw(r#"{"jsonrpc":"2.0","id":"models","method":"agent/model/list"}"#)
        .await;
    let models = answer_to(&c, "models").await;
    let ids: Vec<&str> = models["result"]["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["mock-1", "mock-ant-1", "demo"]);
    c.send_raw(r#"{"jsonrpc":"2.0","id":"commands","method":"agent/commands"}"#)
        .await;
    assert_eq!(
        answer_to(&c, "commands").await["result"],
        json!({"commands": []})
    );
    c.send_raw(r#"{"jsonrpc":"2.0","id":"state","method":"agent/state"}"#)
        .await;
    assert_eq!(
        answer_to(&c, "state").await["error"],
        json!({"code": -32602, "message": "missing field `sessionId`"})
    );
    c.send_raw(r#"{"jsonrpc":"2.0","id":"new","method":"agent/session/new"}"#)
        .await;
    let new = answer_to(&c, "new").await;
    assert!(new["result"]["sessionId"].is_string(), "{new}");
    assert_ne!(new["result"]["sessionId"], sid.as_str());
    // `params: []` (Neovim's empty Lua table) is `{}`.
    c.send_raw(r#"{"jsonrpc":"2.0","id":"cmds[]","method":"agent/commands","params":[]}"#)
        .await;
    assert_eq!(
        answer_to(&c, "cmds[]").await["result"],
        json!({"commands": []})
    );
    c.send_raw(r#"{"jsonrpc":"2.0","id":"state[]","method":"agent/state","params":[]}"#)
        .await;
    assert_eq!(
        answer_to(&c, "state[]").await["error"],
        json!({"code": -32602, "message": "missing field `sessionId`"})
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cycling_with_one_real_model_does_not_switch_to_the_offline_demo() {
    let tmp = TempDir::new("audit-cycle");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::text("hi")]).await;
    let mut models = mock.models_json();
    models["providers"]
        .as_object_mut()
        .unwrap()
        .remove("mockant");
    let env = agent_env(&ws.join("../agent"), &models, &[]);
    let mut c = LspClient::start(&pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
    let sid = c
        .request("agent/session/new", json!({"model": "mock/mock-1"}))
        .await
        .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let file = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap()["sessionFile"]
        .as_str()
        .unwrap()
        .to_string();
    let before = std::fs::read_to_string(&file).unwrap();
    // One model with a key: nothing to cycle (it used to switch to `scripted/demo`).
    for direction in ["forward", "backward"] {
        assert_eq!(
            c.request(
                "agent/model/cycle",
                json!({"sessionId": sid, "direction": direction})
            )
            .await
            .unwrap(),
            Value::Null
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    let state = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(
        (&state["model"]["provider"], &state["model"]["id"]),
        (&json!("mock"), &json!("mock-1"))
    );
    // The demo is still listed, and can be chosen explicitly.
    let listed: Vec<String> = c.request("agent/model/list", json!({})).await.unwrap()["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["provider"].as_str().unwrap(),
                m["id"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(listed, ["mock/mock-1", "scripted/demo"]);
    let set = c
        .request(
            "agent/model/set",
            json!({"sessionId": sid, "model": "scripted/demo"}),
        )
        .await
        .unwrap();
    assert_eq!(set["model"]["id"], "demo");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_answer_that_was_not_offered_is_a_reject_that_says_so() {
    let tmp = TempDir::new("audit-fallback");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![
        Step::call("call_b", "bash", json!({"command": "echo hi"})),
        Step::text("done"),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            approval_policy: None,
            message_action: Some("Run it anyway".into()),
            ..Default::default()
        },
    )
    .await;
    c.request(
        "agent/prompt",
        json!({"text": "run", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    // It used to say "the user chose Reject", which the user did not.
    assert_eq!(
        pi_e2e::lsp_client::tool_result_text(&events, "bash"),
        (
            "The user rejected this bash call: the editor answered with an action that was not \
             offered (\"Run it anyway\")"
                .to_string(),
            true
        )
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_initialization_options_fail_initialize_naming_the_field() {
    let tmp = TempDir::new("audit-init");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::text("hi")]).await;
    let env = agent_env(&ws.join("../agent"), &mock.models_json(), &[]);
    // Each used to be dropped without a word: a misspelt "ask" left the session on the
    // default policy, which runs edits without asking.
    let cases = [
        (
            json!({"approvalPolicy": "Ask"}),
            "initializationOptions.approvalPolicy: expected \"ask\", \"auto-edit\" or \"approve-all\", got \"Ask\"",
        ),
        (
            json!({"approvalPolicy": true}),
            "initializationOptions.approvalPolicy: expected \"ask\", \"auto-edit\" or \"approve-all\", got true",
        ),
        (
            json!({"model": 5}),
            "initializationOptions.model: expected \"provider/id\", got 5",
        ),
        (
            json!({"workspaceTrusted": "yes"}),
            "initializationOptions.workspaceTrusted: expected a boolean, got \"yes\"",
        ),
        (
            json!("trusted"),
            "initializationOptions: expected an object, got \"trusted\"",
        ),
    ];
    for (options, message) in cases {
        let Err((e, c)) = LspClient::try_start(
            &pi_lsp_bin(),
            &ws,
            &env,
            EditorBehavior {
                initialization_options: Some(options.clone()),
                approval_policy: None,
                ..Default::default()
            },
        )
        .await
        else {
            panic!("initialize accepted {options}");
        };
        assert_eq!(e, json!({"code": -32602, "message": message}), "{options}");
        drop(c);
    }
    // Good and null values are taken.
    let mut c = LspClient::start(
        &pi_lsp_bin(),
        &ws,
        &env,
        EditorBehavior {
            initialization_options: Some(
                json!({"approvalPolicy": "ask", "model": "mock/mock-1", "workspaceTrusted": null}),
            ),
            approval_policy: None,
            ..Default::default()
        },
    )
    .await;
    let state = c.request("agent/session/new", json!({})).await.unwrap();
    assert_eq!(
        (&state["approvalPolicy"], &state["model"]["id"]),
        (&json!("ask"), &json!("mock-1"))
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_close_still_closes_the_whole_way() {
    let tmp = TempDir::new("audit-close-cancel");
    let ws = workspace(&tmp);
    let mock = MockModel::start_with_delay(
        vec![Step::text(&"word ".repeat(200))],
        Duration::from_millis(20),
    )
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let sid = prompt_go(&mut c).await;
    let queued = c
        .request("agent/followUp", json!({"sessionId": sid, "text": "later"}))
        .await
        .unwrap();
    let close = c
        .send_request("agent/session/close", json!({"sessionId": sid}))
        .await;
    let id = c.last_request_id();
    c.notify("$/cancelRequest", json!({"id": id})).await;
    let answer = tokio::time::timeout(Duration::from_secs(10), close)
        .await
        .unwrap()
        .unwrap();
    // Cancelled or not (the close may win the race), it went the whole way: it used to stop
    // after aborting the run, leaving the session open with its follow-up still queued.
    assert!(
        answer["error"]["code"] == -32800 || answer["result"]["closed"] == true,
        "{answer}"
    );
    let mut dropped = Vec::new();
    for _ in 0..300 {
        dropped = c
            .log()
            .into_iter()
            .filter(|m| m["method"] == "agent/queueUpdate" && m["params"]["state"] == "dropped")
            .map(|m| m["params"]["queueId"].clone())
            .collect();
        if !dropped.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(dropped, vec![queued["queueId"].clone()]);
    let listed = c.request("agent/session/list", json!({})).await.unwrap();
    assert_eq!(listed["sessions"][0]["sessionId"], sid.as_str());
    assert_eq!(listed["sessions"][0]["open"], false);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_expands_templates_and_refuses_extension_commands_as_pi_does() {
    let tmp = TempDir::new("audit-steer-expand");
    let ws = workspace(&tmp);
    std::fs::create_dir_all(ws.join(".pi/prompts")).unwrap();
    std::fs::write(ws.join(".pi/prompts/rev.md"), "Review $1 please").unwrap();
    std::fs::write(
        ws.join(".pi/settings.json"),
        json!({"builtinExtensions": {"tmux": {}}}).to_string(),
    )
    .unwrap();
    let mock = MockModel::start_with_delay(
        vec![Step::text(&"word ".repeat(100)), Step::text("reviewed")],
        Duration::from_millis(20),
    )
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            initialization_options: Some(json!({"workspaceTrusted": true})),
            ..Default::default()
        },
    )
    .await;
    let sid = prompt_go(&mut c).await;
    // Pi's steer / followUp refuse an extension command (it used to be queued as plain
    // text for the model) and change nothing.
    for method in ["agent/steer", "agent/followUp"] {
        let e = c
            .request(method, json!({"sessionId": sid, "text": "/tmux list"}))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            json!({"code": -32602, "message": "text: extension command \"/tmux\" cannot be queued; send it with agent/prompt (it runs at once, also during a run)"})
        );
    }
    assert_eq!(
        c.request("agent/state", json!({"sessionId": sid}))
            .await
            .unwrap()["pendingMessageCount"],
        0
    );
    // ... and expand prompt templates before queueing (it used to send "/rev a.rs").
    c.request(
        "agent/steer",
        json!({"sessionId": sid, "text": "/rev a.rs"}),
    )
    .await
    .unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    let requests = mock.requests();
    let users: Vec<Value> = requests.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(
        users,
        [
            json!([{"type": "text", "text": "go"}]),
            json!([{"type": "text", "text": "Review a.rs please"}])
        ]
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_prompt_asking_for_another_model_is_refused_not_dropped() {
    let tmp = TempDir::new("audit-queued-model");
    let ws = workspace(&tmp);
    let mock = MockModel::start_with_delay(
        vec![Step::text(&"word ".repeat(100)), Step::text("ok")],
        Duration::from_millis(20),
    )
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let sid = prompt_go(&mut c).await;
    let e = c
        .request(
            "agent/prompt",
            json!({"sessionId": sid, "text": "x", "streamingBehavior": "followUp", "model": "mockant/mock-ant-1"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        e,
        json!({"code": -32602, "message": "model: cannot switch to \"mockant/mock-ant-1\" while a run is active: a queued prompt joins the running run, which keeps its model; switch with agent/model/set (from the next run) or after agent/abort"})
    );
    let state = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(
        (&state["pendingMessageCount"], &state["model"]["id"]),
        (&json!(0), &json!("mock-1"))
    );
    // Naming the session's own model is fine.
    let queued = c
        .request(
            "agent/prompt",
            json!({"sessionId": sid, "text": "then", "streamingBehavior": "followUp", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    assert_eq!(queued["queued"], true);
    c.run_until_end(Duration::from_secs(30)).await;
    c.shutdown().await;
}

/// LSP 3.17 `exit`: "The server should exit with success code 0 if the shutdown request has
/// been received before; otherwise with error code 1."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_without_shutdown_ends_with_code_1_and_after_shutdown_with_0() {
    let tmp = TempDir::new("audit-exit");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![]).await;
    let c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    assert_eq!(c.exit_without_shutdown().await.code(), Some(1));
    let c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    assert_eq!(c.shutdown().await.code(), Some(0));
}

/// Editors show stderr as errors: without `PI_LSP_LOG`, informational lines reach the client
/// as `window/logMessage` and stderr stays empty; `textDocumentSync` asks for no `didSave`
/// (a bare kind would: vscode-languageclient and Neovim read it as `save: {}` too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informational_logs_are_log_messages_and_no_save_notifications_are_asked_for() {
    let tmp = TempDir::new("audit-logs");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::text("hi")]).await;
    let env = agent_env(
        &tmp.path().join("agent"),
        &mock.models_json(),
        &[("PI_LSP_LOG", "")],
    );
    let mut c = LspClient::start(&pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
    let init = c
        .log()
        .into_iter()
        .find(|m| m["id"] == 1 && m.get("result").is_some())
        .unwrap();
    assert_eq!(
        init["result"]["capabilities"]["textDocumentSync"],
        json!({"openClose": true, "change": 2})
    );
    let _ = session_with_a_turn(&mut c).await;
    let root = ws.canonicalize().unwrap();
    let logs: Vec<Value> = c
        .log()
        .into_iter()
        .filter(|m| m["method"] == "window/logMessage")
        .map(|m| m["params"].clone())
        .collect();
    assert_eq!(
        logs,
        vec![
            json!({"type": 3, "message": format!("INFO pi_lsp::server: workspace root {}; position encoding Utf16", root.display())}),
            json!({"type": 3, "message": format!("INFO pi_core::config::resources: project trust of {}: false (Default)", ws.display())}),
            json!({"type": 3, "message": "INFO pi_lsp::server: workspace trusted: false (Default)"}),
        ]
    );
    let stderr = c.stderr.clone();
    let status = c.shutdown().await;
    assert!(status.success());
    assert_eq!(stderr.lock().unwrap().as_str(), "");
}

//! Session files against Pi 1.6.0, the reference now (`$PI16_REF_BIN`, a `pi` that runs Pi
//! 1.6.0 on Node 24; `.ci/pi16.sh` installs it): the same scripted model and steps run through
//! Pi's RPC mode and through pi-lsp over stdio.
//!
//! - Key by key: every entry kind pi-lsp writes has Pi 1.6's keys (the stored system message,
//!   `durationMs` / `thinkingLevel` on answers, `durationMs` on tool results), the known gaps
//!   named one by one.
//! - Both ways: Pi 1.6 opens a file pi-lsp wrote with the same messages (as JSON) and count,
//!   continues it without sending a stored system message as user text, and pi-lsp reopens
//!   what Pi appended with Pi's messages again.
//! - Mid-conversation system messages: a Pi 1.6 file with a prompt patch, continued by both on
//!   a model with `supportsMidConvoSystemMessages` (chat completions and Anthropic Messages),
//!   sends the same messages up to each harness's own patch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pi_e2e::lsp_client::{start_with_mock, EditorBehavior};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::pi_rpc::PiRpc;
use pi_e2e::{json_lines, jsonl_in, TempDir};
use serde_json::{json, Value};

fn workspace(root: &Path) -> PathBuf {
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("f.txt"), "alpha\nbeta\ngamma\n").unwrap();
    ws
}

/// An edit, then a closing text; then one text per later prompt.
async fn mock() -> MockModel {
    MockModel::start(vec![
        Step::edit("call_1", "f.txt", "beta", "BETA"),
        Step::text("Done."),
        Step::text("Second."),
        Step::text("Third."),
    ])
    .await
}

fn agent_dir(root: &Path, mock: &MockModel) -> PathBuf {
    let agent = root.join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), mock.models_json().to_string()).unwrap();
    agent
}

/// The sorted keys of the object at `ptr` of `v`.
fn keys(v: &Value, ptr: &str) -> Vec<String> {
    let mut k: Vec<String> = v
        .pointer(ptr)
        .and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

fn kind(e: &Value) -> String {
    format!(
        "{}:{}",
        e["type"].as_str().unwrap_or(""),
        e["message"]["role"].as_str().unwrap_or("")
    )
}

/// Runs "edit f.txt" then "again" through pi-lsp in `ws`; returns the session id.
async fn ours(ws: &Path, mock: &MockModel) -> (String, Value, Value) {
    let mut c = start_with_mock(ws, mock, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "edit f.txt", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(30)).await;
    c.request("agent/prompt", json!({"sessionId": sid, "text": "again"}))
        .await
        .unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    let messages = c.ask("agent/messages", &sid).await;
    let state = c.ask("agent/state", &sid).await;
    c.shutdown().await;
    (sid, messages, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_entries_have_pi_16s_keys() {
    let Some(pi) = pi_e2e::pi16_bin("pi16_parity") else {
        return;
    };
    let tmp = TempDir::new("pi16-keys");
    // Pi 1.6.
    let pi_root = tmp.path().join("pi");
    let pi_ws = workspace(&pi_root);
    let pi_mock = mock().await;
    let agent = agent_dir(&pi_root, &pi_mock);
    let sessions = pi_root.join("sessions");
    let pi_state = {
        let (ws, sessions, agent) = (pi_ws.clone(), sessions.clone(), agent.clone());
        tokio::task::spawn_blocking(move || {
            let mut p = PiRpc::start(
                &pi,
                &ws,
                &agent,
                &["--session-dir".as_ref(), sessions.as_os_str()],
            );
            p.prompt("edit f.txt");
            p.prompt("again");
            p.request(json!({"type": "get_state"}))
        })
        .await
        .unwrap()
    };
    let theirs = json_lines(&jsonl_in(&sessions));
    // pi-lsp.
    let our_root = tmp.path().join("ours");
    let our_ws = workspace(&our_root);
    let our_mock = mock().await;
    let (_, _, our_state) = ours(&our_ws, &our_mock).await;
    let mine = json_lines(&jsonl_in(&our_ws.join(".pi/sessions")));

    // The same entries in the same order: header, model, thinking level, the stored system
    // message, then the conversation.
    assert_eq!(
        mine.iter().map(kind).collect::<Vec<_>>(),
        theirs.iter().map(kind).collect::<Vec<_>>()
    );
    assert_eq!(our_state["messageCount"], pi_state["messageCount"]);
    // Key by key, entry and message; what Pi 1.6 writes and pi-lsp does not is named here.
    let pi_only: &[(&str, &str, &str)] = &[];
    let ours_only: &[(&str, &str, &str)] = &[
        ("message:toolResult", "/message/details", "unifiedDiff"),
        ("message:toolResult", "/message/details", "fileChange"),
    ];
    for (o, t) in mine.iter().zip(&theirs) {
        let k = kind(o);
        for ptr in [
            "",
            "/message",
            "/message/usage",
            "/message/usage/cost",
            "/message/details",
        ] {
            let drop = |list: &[(&str, &str, &str)], keys: Vec<String>| -> Vec<String> {
                keys.into_iter()
                    .filter(|key| {
                        !list
                            .iter()
                            .any(|(lk, lp, lkey)| *lk == k && *lp == ptr && lkey == key)
                    })
                    .collect()
            };
            assert_eq!(
                drop(ours_only, keys(o, ptr)),
                drop(pi_only, keys(t, ptr)),
                "{k} {ptr}\nours:   {o}\ntheirs: {t}"
            );
        }
    }
    // The edit result's display diff and patch, as Pi 1.6 stores them.
    let edit_details = |v: &[Value]| -> Vec<Value> {
        v.iter()
            .filter_map(|e| e.pointer("/message/details"))
            .filter(|d| d.get("patch").is_some())
            .map(|d| json!([d["diff"], d["patch"], d["firstChangedLine"]]))
            .collect()
    };
    assert_eq!(edit_details(&mine), edit_details(&theirs));
    assert_eq!(edit_details(&mine).len(), 1);
    // The stored system message: the prompt as sections, every tool declared.
    let system = |v: &[Value]| {
        v.iter()
            .find(|e| kind(e) == "message:system")
            .cloned()
            .unwrap()
    };
    let ours_sys = system(&mine);
    // Pi 1.6's section names, in its order (Pi also has `docs`, which pi-lsp writes only with
    // `PI_PACKAGE_DIR`), and the same `preamble` (the rules follow each one's tools and the
    // editor's guideline).
    let names = |m: &Value| -> Vec<String> {
        m["message"]["sections"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "docs")
            .cloned()
            .collect()
    };
    let theirs_sys = system(&theirs);
    assert_eq!(names(&ours_sys), ["preamble", "tools", "rules", "cwd"]);
    assert_eq!(names(&ours_sys), names(&theirs_sys));
    assert_eq!(
        ours_sys["message"]["sections"]["preamble"],
        theirs_sys["message"]["sections"]["preamble"]
    );
    let tools: Vec<&str> = ours_sys["message"]["toolsAdded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"edit") && tools.contains(&"bash"),
        "{tools:?}"
    );
    pi_mock.assert_paired();
    our_mock.assert_paired();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_16_opens_and_continues_our_file_and_we_open_what_it_appended() {
    let Some(pi) = pi_e2e::pi16_bin("pi16_parity") else {
        return;
    };
    let tmp = TempDir::new("pi16-both-ways");
    let ws = workspace(tmp.path());
    let mock = mock().await;
    let (sid, our_messages, our_state) = ours(&ws, &mock).await;
    let file = jsonl_in(&ws.join(".pi/sessions"));
    let before = std::fs::read(&file).unwrap();
    let agent = agent_dir(&tmp.path().join("pi-home"), &mock);
    let requests_before = mock.requests().len();

    let (pi_before, pi_count, run, pi_after) = {
        let (ws, agent, file) = (ws.clone(), agent.clone(), file.clone());
        tokio::task::spawn_blocking(move || {
            let mut p = PiRpc::start(&pi, &ws, &agent, &["--session".as_ref(), file.as_os_str()]);
            let before = p.request(json!({"type": "get_messages"}));
            let state = p.request(json!({"type": "get_state"}));
            let run = p.prompt("more");
            let after = p.request(json!({"type": "get_messages"}));
            (before, state["messageCount"].clone(), run, after)
        })
        .await
        .unwrap()
    };
    // Pi 1.6 sees exactly our messages, system message included, and counts them as we do.
    assert_eq!(pi_before["messages"], our_messages["messages"]);
    assert_eq!(pi_count, our_state["messageCount"]);
    // It continues: an answer, no error; its request carries the conversation and no empty
    // or system-text user turn.
    let end = run
        .iter()
        .rev()
        .find(|v| v["type"] == "message_end" && v["message"]["role"] == "assistant")
        .unwrap();
    assert_eq!(end["message"]["stopReason"], "stop", "{end}");
    assert_eq!(end["message"]["content"][0]["text"], "Third.");
    let sent = &mock.requests()[requests_before].body;
    let users: Vec<String> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(users.len(), 3, "{users:?}");
    assert!(
        users[0].contains("edit f.txt") && users[2].contains("more"),
        "{users:?}"
    );
    // Pi appended under our last entry and left our lines as they were.
    let after = std::fs::read(&file).unwrap();
    assert_eq!(&after[..before.len()], &before[..]);

    // pi-lsp reopens what Pi appended: Pi's messages, and the count Pi gives.
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let reopened = c.ask("agent/messages", &sid).await;
    assert_eq!(reopened["messages"], pi_after["messages"]);
    let state = c.ask("agent/state", &sid).await;
    assert_eq!(
        state["messageCount"].as_u64().unwrap() as usize,
        pi_after["messages"].as_array().unwrap().len()
    );
    c.shutdown().await;
    mock.assert_paired();
}

/// The `todo` list of issue "plan mode and a live todo list" as Pi 1.6 sees it: pi-lsp's
/// built-in `todo` writes its state in tool-result `details` (Pi's `TodoDetails` shape, our
/// `status`/`priority` as additions); Pi 1.6 with its own example extension
/// (`examples/extensions/todo.ts`) rebuilds the same list from our file — its `todo list`
/// answers with our items — and we read back the list Pi appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_16s_todo_example_rebuilds_our_list_and_we_read_its_list_back() {
    let Some(pi) = pi_e2e::pi16_bin("pi16_parity") else {
        return;
    };
    let example = pi_e2e::pi16_package(&pi).join("examples/extensions/todo.ts");
    assert!(example.exists(), "{}", example.display());
    let tmp = TempDir::new("pi16-todo");
    let ws = workspace(tmp.path());
    let mock = MockModel::start(vec![
        Step::Tools(
            None,
            vec![
                (
                    "t1".into(),
                    "todo".into(),
                    json!({"action": "add", "text": "Write the parser"}),
                ),
                (
                    "t2".into(),
                    "todo".into(),
                    json!({"action": "add", "text": "Test the parser"}),
                ),
                (
                    "t3".into(),
                    "todo".into(),
                    json!({"action": "add", "text": "Ship it"}),
                ),
                (
                    "t4".into(),
                    "todo".into(),
                    json!({"action": "toggle", "id": 1}),
                ),
            ],
        ),
        Step::text("Three todos, one done."),
        // Pi 1.6's turn: its example extension answers from the list it rebuilt.
        Step::call("p1", "todo", json!({"action": "list"})),
        Step::text("Listed."),
        // Ours again, after Pi appended: toggle 2 on top of Pi's last state.
        Step::call("t5", "todo", json!({"action": "toggle", "id": 2})),
        Step::text("Two done."),
    ])
    .await;

    // pi-lsp writes the list.
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "plan the parser", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(30)).await;
    let ours = c.ask("agent/plan/get", &sid).await;
    c.shutdown().await;
    let triples = |todos: &Value| -> Vec<(u64, String, bool)> {
        todos
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["id"].as_u64().unwrap(),
                    t["text"].as_str().unwrap().to_string(),
                    t["done"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let want = vec![
        (1, "Write the parser".to_string(), true),
        (2, "Test the parser".to_string(), false),
        (3, "Ship it".to_string(), false),
    ];
    assert_eq!(triples(&ours["todos"]), want, "{ours}");
    let file = jsonl_in(&ws.join(".pi/sessions"));
    let last_details = |file: &Path| -> Value {
        json_lines(file)
            .into_iter()
            .rfind(|l| l["message"]["toolName"] == "todo")
            .unwrap()["message"]["details"]
            .clone()
    };
    let our_details = last_details(&file);
    // Pi's TodoDetails keys are all there (ours add `status`/`priority` per item only).
    assert_eq!(
        keys(&our_details, ""),
        vec!["action", "nextId", "todos"],
        "{our_details}"
    );
    assert_eq!(our_details["nextId"], 4);

    // Pi 1.6 with its example extension opens our file: `todo list` answers with our items.
    let agent = agent_dir(&tmp.path().join("pi-home"), &mock);
    let run = {
        let (ws, agent, file, example) = (ws.clone(), agent.clone(), file.clone(), example);
        tokio::task::spawn_blocking(move || {
            let mut p = PiRpc::start(
                &pi,
                &ws,
                &agent,
                &[
                    "--session".as_ref(),
                    file.as_os_str(),
                    "-e".as_ref(),
                    example.as_os_str(),
                ],
            );
            p.prompt("list the todos")
        })
        .await
        .unwrap()
    };
    let result = run
        .iter()
        .find(|v| v["type"] == "message_end" && v["message"]["role"] == "toolResult")
        .unwrap_or_else(|| panic!("no todo result from Pi: {run:?}"));
    assert_eq!(result["message"]["toolName"], "todo");
    assert_eq!(result["message"]["isError"], false, "{result}");
    assert_eq!(
        result["message"]["content"][0]["text"],
        "[x] #1: Write the parser\n[ ] #2: Test the parser\n[ ] #3: Ship it"
    );
    let pis = &result["message"]["details"];
    assert_eq!(pis["action"], "list");
    assert_eq!(pis["nextId"], 4);
    assert_eq!(triples(&pis["todos"]), want, "{pis}");
    assert_eq!(last_details(&file), *pis);

    // pi-lsp reopens what Pi appended and continues the same list.
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let reopened = c.ask("agent/plan/get", &sid).await;
    assert_eq!(triples(&reopened["todos"]), want, "{reopened}");
    c.request(
        "agent/prompt",
        json!({"sessionId": sid, "text": "mark the tests done"}),
    )
    .await
    .unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    let after = c.ask("agent/plan/get", &sid).await;
    assert_eq!(
        triples(&after["todos"]),
        vec![
            (1, "Write the parser".to_string(), true),
            (2, "Test the parser".to_string(), true),
            (3, "Ship it".to_string(), false),
        ],
        "{after}"
    );
    c.shutdown().await;
    mock.assert_paired();
}

/// The request bodies Pi 1.6.0 and `pi-lsp run` send continuing the same Pi 1.6-shaped file (a
/// prompt patch mid-branch) with "third", on `mock/mock-1` speaking `api` with
/// `supportsMidConvoSystemMessages`: (Pi's, ours).
async fn mid_convo_bodies(pi: PathBuf, api: &str, as_pi_073: bool) -> (Value, Value) {
    let tmp = TempDir::new("pi16-mid-convo");
    let ws = workspace(tmp.path());
    let mock = MockModel::start(vec![Step::text("three"), Step::text("three")]).await;
    let mut models = mock.models_json();
    let base = if api == "anthropic-messages" {
        mock.anthropic_base()
    } else {
        mock.openai_base()
    };
    models["providers"]["mock"]["api"] = json!(api);
    models["providers"]["mock"]["baseUrl"] = json!(base);
    models["providers"]["mock"]["models"][0]["compat"] =
        json!({"supportsMidConvoSystemMessages": true});
    let agent = tmp.path().join("pi-home").join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), models.to_string()).unwrap();
    let theirs = tmp.path().join("theirs.jsonl");
    pi_e2e::pi16_session_with_a_patch(&theirs, &ws, ("mock", "mock-1", api));
    let ours = tmp.path().join("ours.jsonl");
    pi_e2e::pi16_session_with_a_patch(&ours, &ws, ("mock", "mock-1", api));
    if as_pi_073 {
        // The same conversation as Pi 0.73.1 stored it: no system messages.
        for f in [&theirs, &ours] {
            let kept: String = json_lines(f)
                .into_iter()
                .filter(|l| l["message"]["role"] != "system")
                .map(|mut l| {
                    match l["id"].as_str() {
                        Some("u1") => l["parentId"] = json!("m0"),
                        Some("u2") => l["parentId"] = json!("a1"),
                        _ => {}
                    }
                    format!("{l}\n")
                })
                .collect();
            std::fs::write(f, kept).unwrap();
        }
    }

    {
        let (ws, agent, file) = (ws.clone(), agent.clone(), theirs.clone());
        tokio::task::spawn_blocking(move || {
            let mut p = PiRpc::start(&pi, &ws, &agent, &["--session".as_ref(), file.as_os_str()]);
            p.prompt("third");
        })
        .await
        .unwrap();
    }
    let env = pi_e2e::lsp_client::agent_env(&tmp.path().join("our-agent"), &models, &[]);
    let out = tokio::task::block_in_place(|| {
        let mut cmd = Command::new(pi_e2e::pi_lsp_bin());
        cmd.arg("run").arg("--workspace").arg(&ws).args([
            "--model",
            "mock/mock-1",
            "--session",
            &ours.display().to_string(),
            "third",
        ]);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    (requests[0].body.clone(), requests[1].body.clone())
}

/// `supportsMidConvoSystemMessages` against Pi 1.6.0 itself on chat completions: both requests
/// carry the conversation's first prompt first, Pi's patch at its place in the same words, then
/// each harness's own patch (its prompt differs from the file's) before the new prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_conversation_system_messages_are_sent_as_pi_16_sends_them() {
    let Some(pi) = pi_e2e::pi16_bin("pi16_parity") else {
        return;
    };
    let (pi_body, our_body) = mid_convo_bodies(pi, "openai-completions", false).await;
    let pi_sent = pi_body["messages"].as_array().unwrap().clone();
    let we_sent = our_body["messages"].as_array().unwrap().clone();
    // The conversation up to the new run: identical, Pi's wording included.
    assert_eq!(pi_sent.len(), 8, "{pi_sent:#?}");
    assert_eq!(we_sent.len(), 8, "{we_sent:#?}");
    assert_eq!(pi_sent[..6], we_sent[..6]);
    assert_eq!(
        we_sent[3],
        json!({"role": "system", "content": "Updated system prompt section \"rules\":\n\nBe very brief."})
    );
    // Each harness's own patch, then the prompt.
    for sent in [&pi_sent, &we_sent] {
        assert_eq!(sent[6]["role"], "system");
        assert!(
            sent[6]["content"]
                .as_str()
                .unwrap()
                .contains("Updated system prompt section \""),
            "{}",
            sent[6]
        );
    }
    assert_eq!(pi_sent[7], we_sent[7]);
}

/// The same on Anthropic Messages: the leading prompt as `system`, Pi's patch held to just
/// before the next assistant message, each harness's own patch last (after the new prompt),
/// placed and worded as Pi 1.6.0 does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_conversation_system_messages_on_anthropic_are_placed_as_pi_16_places_them() {
    let Some(pi) = pi_e2e::pi16_bin("pi16_parity") else {
        return;
    };
    let (pi_body, our_body) = mid_convo_bodies(pi, "anthropic-messages", false).await;
    assert_eq!(pi_body["system"], our_body["system"]);
    let pi_sent = pi_body["messages"].as_array().unwrap().clone();
    let we_sent = our_body["messages"].as_array().unwrap().clone();
    assert_eq!(pi_sent.len(), 7, "{pi_sent:#?}");
    assert_eq!(we_sent.len(), 7, "{we_sent:#?}");
    assert_eq!(pi_sent[..6], we_sent[..6]);
    for sent in [&pi_sent, &we_sent] {
        assert_eq!(sent[6]["role"], "system", "{}", sent[6]);
    }
}

/// A file without stored system messages (as Pi 0.73.1 wrote it) continued by both on a model
/// with `supportsMidConvoSystemMessages`: the first stored prompt comes after the conversation,
/// so no system prompt leads and the whole prompt goes in as a section update before the new
/// prompt — in Pi 1.6.0 as here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pi_073_file_gets_its_first_prompt_mid_conversation_as_in_pi_16() {
    let Some(pi) = pi_e2e::pi16_bin("pi16_parity") else {
        return;
    };
    let (pi_body, our_body) = mid_convo_bodies(pi, "openai-completions", true).await;
    let pi_sent = pi_body["messages"].as_array().unwrap().clone();
    let we_sent = our_body["messages"].as_array().unwrap().clone();
    let roles = |sent: &[Value]| -> Vec<String> {
        sent.iter()
            .map(|m| m["role"].as_str().unwrap().to_string())
            .collect()
    };
    let want = ["user", "assistant", "user", "assistant", "system", "user"];
    assert_eq!(roles(&pi_sent), want, "{pi_sent:#?}");
    assert_eq!(roles(&we_sent), want, "{we_sent:#?}");
    assert_eq!(pi_sent[..4], we_sent[..4]);
    assert_eq!(pi_sent[5], we_sent[5]);
    for sent in [&pi_sent, &we_sent] {
        assert!(
            sent[4]["content"]
                .as_str()
                .unwrap()
                .starts_with("Updated system prompt section \""),
            "{}",
            sent[4]
        );
    }
}

/// A failed response that is retried, written by both: Pi 1.6.0 leaves it out of the context
/// with a `context_edit` (`replacement: null`) before the retry, and so does pi-lsp; so the
/// entries match kind by kind and key by key, and each opens the other's file with the same
/// messages and count (the failure shown by neither).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_failure_is_left_out_of_the_context_as_pi_16_leaves_it() {
    let Some(pi) = pi_e2e::pi16_bin("pi16_parity") else {
        return;
    };
    let tmp = TempDir::new("pi16-retry");
    let retry = json!({"retry": {"enabled": true, "maxRetries": 2, "baseDelayMs": 20}});
    let script = || {
        vec![
            Step::Raw {
                status: 503,
                content_type: "application/json".into(),
                body: r#"{"error":{"message":"overloaded"}}"#.into(),
            },
            Step::text("Fine now."),
        ]
    };
    // Pi 1.6.
    let pi_root = tmp.path().join("pi");
    let pi_ws = workspace(&pi_root);
    let pi_mock = MockModel::start(script()).await;
    let agent = agent_dir(&pi_root, &pi_mock);
    std::fs::write(agent.join("settings.json"), retry.to_string()).unwrap();
    let sessions = pi_root.join("sessions");
    {
        let (pi, ws, sessions, agent) =
            (pi.clone(), pi_ws.clone(), sessions.clone(), agent.clone());
        tokio::task::spawn_blocking(move || {
            let mut p = PiRpc::start(
                &pi,
                &ws,
                &agent,
                &["--session-dir".as_ref(), sessions.as_os_str()],
            );
            p.prompt("hi");
        })
        .await
        .unwrap();
    }
    let theirs_file = jsonl_in(&sessions);
    let theirs = json_lines(&theirs_file);

    // pi-lsp, with the same settings in its agent folder.
    let our_root = tmp.path().join("ours");
    let our_ws = workspace(&our_root);
    let our_mock = MockModel::start(script()).await;
    let our_agent = our_root.join("agent");
    std::fs::create_dir_all(&our_agent).unwrap();
    std::fs::write(our_agent.join("settings.json"), retry.to_string()).unwrap();
    let mut c = start_with_mock(&our_ws, &our_mock, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "hi", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let events = c.run_until_end(Duration::from_secs(30)).await;
    assert!(
        events
            .iter()
            .any(|e| e["event"]["type"] == "auto_retry_start"),
        "{events:?}"
    );
    let our_messages = c.ask("agent/messages", &sid).await;
    let our_state = c.ask("agent/state", &sid).await;
    c.shutdown().await;
    let our_file = jsonl_in(&our_ws.join(".pi/sessions"));
    let mine = json_lines(&our_file);

    // The same entries: the failure, then its context_edit, then the answer.
    let kinds = |v: &[Value]| v.iter().map(kind).collect::<Vec<_>>();
    assert_eq!(kinds(&mine), kinds(&theirs));
    let tail: Vec<&str> = [
        "message:user",
        "message:assistant",
        "context_edit:",
        "message:assistant",
    ]
    .to_vec();
    assert_eq!(kinds(&mine)[mine.len() - 4..], tail);
    for v in [&mine, &theirs] {
        let n = v.len();
        let (failed, edit, answer) = (&v[n - 3], &v[n - 2], &v[n - 1]);
        assert_eq!(failed["message"]["stopReason"], "error", "{failed}");
        assert_eq!(
            keys(edit, ""),
            vec![
                "id",
                "parentId",
                "replacement",
                "targetId",
                "timestamp",
                "type"
            ]
        );
        assert_eq!(edit["targetId"], failed["id"]);
        assert_eq!(edit["parentId"], failed["id"]);
        assert_eq!(edit["replacement"], Value::Null);
        assert_eq!(answer["parentId"], edit["id"]);
        assert_eq!(answer["message"]["content"][0]["text"], "Fine now.");
    }
    // pi-lsp shows the conversation without the failure: system message, prompt, answer (Pi
    // 1.6 too once it reopens the file, below; its live `get_messages` still lists it).
    let roles = |m: &Value| -> Vec<String> {
        m["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_string())
            .collect()
    };
    // Live, both still list the failure (Pi 1.6's `get_messages` as well); reopened, neither.
    assert_eq!(
        roles(&our_messages),
        ["system", "user", "assistant", "assistant"]
    );
    let _ = our_state;

    // Pi 1.6 opens our file with our messages and count.
    let our_ws2 = our_ws.clone();
    let (pi_on_ours, pi_count) = {
        let (agent, file) = (agent.clone(), our_file.clone());
        tokio::task::spawn_blocking(move || {
            let mut p = PiRpc::start(
                &pi,
                &our_ws,
                &agent,
                &["--session".as_ref(), file.as_os_str()],
            );
            let m = p.request(json!({"type": "get_messages"}));
            let s = p.request(json!({"type": "get_state"}));
            (m, s["messageCount"].clone())
        })
        .await
        .unwrap()
    };
    // And pi-lsp opens its own file and Pi's without the failure too.
    let mut c = start_with_mock(&our_ws2, &our_mock, EditorBehavior::default()).await;
    let o = c
        .request(
            "agent/session/open",
            json!({"path": our_file.display().to_string()}),
        )
        .await
        .unwrap();
    let ours_again = c
        .request("agent/messages", json!({"sessionId": o["sessionId"]}))
        .await
        .unwrap();
    let count_again = c
        .request("agent/state", json!({"sessionId": o["sessionId"]}))
        .await
        .unwrap()["messageCount"]
        .clone();
    // `agent/messages` shows a message a `context_edit` leaves out with the edit marked (issue
    // 29 item 3); Pi 1.6's `get_messages` leaves it out.
    let shown = |m: &Value| -> Vec<Value> {
        m["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| {
                m.get("contextEdit")
                    .is_none_or(|e| !e["replacement"].is_null())
            })
            .cloned()
            .collect()
    };
    assert_eq!(pi_on_ours["messages"], json!(shown(&ours_again)));
    let ours_again = json!({"messages": shown(&ours_again)});
    assert_eq!(roles(&ours_again), ["system", "user", "assistant"]);
    assert_eq!(pi_count, count_again);
    assert_eq!(pi_count, 3);
    let o = c
        .request(
            "agent/session/open",
            json!({"path": theirs_file.display().to_string()}),
        )
        .await
        .unwrap();
    let sid = o["sessionId"].as_str().unwrap().to_string();
    let ours_on_theirs = c.ask("agent/messages", &sid).await;
    let state = c.ask("agent/state", &sid).await;
    c.shutdown().await;
    assert_eq!(
        roles(&json!({"messages": shown(&ours_on_theirs)})),
        ["system", "user", "assistant"]
    );
    assert_eq!(state["messageCount"], 3);
    pi_mock.assert_paired();
    our_mock.assert_paired();
}

/// A Pi 1.6-shaped file neither harness wrote: a `usage` entry (`cache_warm`) and one of a
/// `kind` nobody knows, an abandoned branch, a label, and a second root (a `branch_summary`
/// with `parentId: null`, as Pi's `branchWithSummary(null, …)` writes it) holding the active
/// branch. Pi 1.6.0 and pi-lsp show the same messages, count, leaf and session totals (usage
/// entries counted, never in the context); then each continues it and the other reopens it
/// with the same messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_entries_and_a_second_root_read_and_continue_as_in_pi_16() {
    let Some(pi) = pi_e2e::pi16_bin("pi16_parity") else {
        return;
    };
    let tmp = TempDir::new("pi16-roots");
    let ws = workspace(tmp.path());
    let mock = MockModel::start(vec![Step::text("Ours."), Step::text("Theirs.")]).await;
    let agent = agent_dir(&tmp.path().join("pi-home"), &mock);
    // Zero as JavaScript writes it (`0`, never `0.0`).
    let n = |x: f64| if x == 0.0 { json!(0) } else { json!(x) };
    let cost = |i: f64, o: f64, r: f64| json!({"input": n(i), "output": n(o), "cacheRead": n(r), "cacheWrite": 0, "total": n(i + o + r)});
    let usage = |input: u64, output: u64, read: u64, c: Value| {
        json!({"input": input, "output": output, "cacheRead": read, "cacheWrite": 0,
               "totalTokens": input + output + read, "cost": c})
    };
    let t = "2026-12-05T12:00:00.000Z";
    let user = |id: &str, parent: Value, text: &str, ms: u64| {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": t,
               "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ms}})
    };
    let answer = |id: &str, parent: &str, text: &str, u: Value, ms: u64| {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": t,
               "message": {"role": "assistant", "content": [{"type": "text", "text": text}],
                           "api": "openai-completions", "provider": "mock", "model": "mock-1",
                           "usage": u, "stopReason": "stop", "timestamp": ms, "thinkingLevel": "off"}})
    };
    let file = tmp.path().join("unseen.jsonl");
    let entries = [
        json!({"type": "session", "version": 3, "id": "01a24614-3491-71cb-97c3-af58359f0dac", "timestamp": t, "cwd": ws.display().to_string()}),
        json!({"type": "model_change", "id": "m0", "parentId": null, "timestamp": t, "provider": "mock", "modelId": "mock-1"}),
        user("u1", json!("m0"), "first", 1),
        answer(
            "a1",
            "u1",
            "One.",
            usage(100, 10, 0, cost(0.1, 0.01, 0.0)),
            2,
        ),
        json!({"type": "usage", "id": "w1", "parentId": "a1", "timestamp": t, "kind": "cache_warm", "provider": "mock", "model": "mock-1", "usage": usage(0, 0, 5000, cost(0.0, 0.0, 0.5))}),
        user("u2", json!("w1"), "abandoned", 3),
        answer(
            "a2",
            "u2",
            "Left behind.",
            usage(200, 20, 0, cost(0.2, 0.02, 0.0)),
            4,
        ),
        json!({"type": "label", "id": "l1", "parentId": "a2", "timestamp": t, "targetId": "a1", "label": "start"}),
        json!({"type": "branch_summary", "id": "b1", "parentId": null, "timestamp": t, "fromId": "l1", "summary": "We said hello twice.", "usage": usage(50, 5, 0, cost(0.05, 0.005, 0.0)), "fromHook": false}),
        user("u3", json!("b1"), "second root", 5),
        json!({"type": "usage", "id": "w2", "parentId": "u3", "timestamp": t, "kind": "some_future_kind", "provider": "mock", "model": "mock-1", "usage": usage(7, 3, 0, cost(0.007, 0.003, 0.0))}),
        answer(
            "a3",
            "w2",
            "Three.",
            usage(300, 30, 0, cost(0.3, 0.03, 0.0)),
            6,
        ),
    ];
    std::fs::write(
        &file,
        entries.iter().map(|e| format!("{e}\n")).collect::<String>(),
    )
    .unwrap();

    // What Pi 1.6 and pi-lsp make of `f`: (messages, messageCount, stats).
    let pi_view = |f: PathBuf, prompt: Option<&'static str>| {
        let (pi, ws, agent) = (pi.clone(), ws.clone(), agent.clone());
        tokio::task::spawn_blocking(move || {
            let mut p = PiRpc::start(&pi, &ws, &agent, &["--session".as_ref(), f.as_os_str()]);
            if let Some(text) = prompt {
                p.prompt(text);
            }
            let m = p.request(json!({"type": "get_messages"}));
            let s = p.request(json!({"type": "get_state"}));
            let st = p.request(json!({"type": "get_session_stats"}));
            (m["messages"].clone(), s["messageCount"].clone(), st)
        })
    };
    let ours_view = |f: PathBuf, prompt: Option<&'static str>| {
        let (ws, mock) = (ws.clone(), &mock);
        async move {
            let mut c = start_with_mock(&ws, mock, EditorBehavior::default()).await;
            let o = c
                .request(
                    "agent/session/open",
                    json!({"path": f.display().to_string()}),
                )
                .await
                .unwrap();
            let sid = o["sessionId"].as_str().unwrap().to_string();
            if let Some(text) = prompt {
                c.request("agent/prompt", json!({"sessionId": sid, "text": text}))
                    .await
                    .unwrap();
                c.run_until_end(Duration::from_secs(30)).await;
            }
            let m = c.ask("agent/messages", &sid).await;
            let s = c.ask("agent/state", &sid).await;
            let st = c.ask("agent/session/stats", &sid).await;
            c.shutdown().await;
            (m["messages"].clone(), s["messageCount"].clone(), st)
        }
    };
    let same_stats = |pi: &Value, ours: &Value| {
        for k in [
            "userMessages",
            "assistantMessages",
            "toolCalls",
            "toolResults",
            "totalMessages",
            "tokens",
        ] {
            assert_eq!(pi[k], ours[k], "{k}\npi:   {pi}\nours: {ours}");
        }
        let (a, b) = (pi["cost"].as_f64().unwrap(), ours["cost"].as_f64().unwrap());
        assert!((a - b).abs() < 1e-9, "cost {a} vs {b}");
    };

    // As found: the second root's branch, summary first; every usage counted.
    let (pm, pc, pst) = pi_view(file.clone(), None).await.unwrap();
    let (om, oc, ost) = ours_view(file.clone(), None).await;
    let roles: Vec<&str> = om
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["branchSummary", "user", "assistant"], "{om:#}");
    assert_eq!(pm, om);
    assert_eq!(pc, oc);
    same_stats(&pst, &ost);
    assert_eq!(
        ost["tokens"],
        json!({"input": 657, "output": 68, "cacheRead": 5000, "cacheWrite": 0, "total": 5725})
    );

    // pi-lsp continues a copy; Pi 1.6 reopens it. Pi continues another; pi-lsp reopens it.
    let ours_file = tmp.path().join("ours.jsonl");
    let theirs_file = tmp.path().join("theirs.jsonl");
    std::fs::copy(&file, &ours_file).unwrap();
    std::fs::copy(&file, &theirs_file).unwrap();
    let (om, oc, ost) = ours_view(ours_file.clone(), Some("go on")).await;
    assert_eq!(om.as_array().unwrap().len(), 6, "{om:#}");
    let (pm, pc, pst) = pi_view(ours_file.clone(), None).await.unwrap();
    assert_eq!(pm, om);
    assert_eq!(pc, oc);
    same_stats(&pst, &ost);
    let (pm, pc, pst) = pi_view(theirs_file.clone(), Some("go on")).await.unwrap();
    let (om, oc, ost) = ours_view(theirs_file.clone(), None).await;
    assert_eq!(pm, om);
    assert_eq!(pc, oc);
    same_stats(&pst, &ost);
    // Both answered under the second root: the first root's lines are as they were.
    for f in [&ours_file, &theirs_file] {
        let l = json_lines(f);
        assert_eq!(l[..entries.len()], entries[..]);
        assert!(
            l[entries.len()..].iter().all(|e| e["type"] == "message"
                || e["type"] == "model_change"
                || e["type"] == "thinking_level_change"),
            "{l:#?}"
        );
    }
    mock.assert_paired();
}

/// Issue 29 item E: the `context_edit` a size refusal of an image leaves in the file (written
/// by `SessionWriter::edit_out_images`, as the recorder writes it on `images_replaced`) is
/// applied by Pi 1.6.0 too: continuing the file, Pi sends the note and not the image. The
/// same file without the edit sends the image (the model takes images), so the edit is what
/// keeps it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_16_continuing_a_file_with_an_image_edited_out_never_sends_the_image() {
    let Some(pi) = pi_e2e::pi16_bin("pi16_parity") else {
        return;
    };
    let tmp = TempDir::new("pi16-image-edit");
    let ws = workspace(tmp.path());
    let image = "QUJD".repeat(300_000);
    let hash = pi_core::session::image_hash(&image);
    let note = "[image removed: the provider refused a request with this image/png image (878 KB) as too large]";
    let mut sent = Vec::new();
    for edited in [false, true] {
        let mock = MockModel::start(vec![Step::text("again")]).await;
        let mut models = mock.models_json();
        models["providers"]["mock"]["models"][0]["input"] = json!(["text", "image"]);
        let agent = tmp.path().join(format!("home-{edited}")).join("agent");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::write(agent.join("models.json"), models.to_string()).unwrap();
        let dir = tmp.path().join(format!("sessions-{edited}"));
        let mut w =
            pi_core::session::SessionWriter::create(&dir, &ws, "mock", "mock-1", "off").unwrap();
        let user: pi_ai::Message = serde_json::from_value(json!({"role": "user", "content": [
            {"type": "text", "text": "see"},
            {"type": "image", "data": image, "mimeType": "image/png"}], "timestamp": 1}))
        .unwrap();
        w.append_message(&user).unwrap();
        let answer: pi_ai::Message = serde_json::from_value(json!({"role": "assistant",
            "content": [{"type": "text", "text": "Fine without it."}], "api": "openai-completions",
            "provider": "mock", "model": "mock-1", "stopReason": "stop", "timestamp": 2}))
        .unwrap();
        w.append_message(&answer).unwrap();
        if edited {
            let replaced = [(hash.clone(), note.to_string())].into_iter().collect();
            assert_eq!(w.edit_out_images(&replaced).unwrap(), 1);
        }
        let file = w.path().to_path_buf();
        w.close().unwrap();
        let (pi, ws2) = (pi.clone(), ws.clone());
        tokio::task::spawn_blocking(move || {
            let mut p = PiRpc::start(&pi, &ws2, &agent, &["--session".as_ref(), file.as_os_str()]);
            p.prompt("again?");
        })
        .await
        .unwrap();
        let body = &mock.requests()[0].body;
        let user = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "user")
            .unwrap()
            .clone();
        sent.push(json!(user["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| match p["type"].as_str().unwrap() {
                "text" => p["text"].clone(),
                other => json!(format!(
                    "{other} of {} bytes",
                    p["image_url"]["url"].as_str().unwrap_or("").len()
                )),
            })
            .collect::<Vec<_>>()));
    }
    assert_eq!(
        sent,
        vec![
            json!([
                "see",
                format!(
                    "image_url of {} bytes",
                    "data:image/png;base64,".len() + image.len()
                )
            ]),
            json!(["see", note]),
        ]
    );
}

//! End to end, editor-side tools (issue 7 §6b) and the listings Pi's RPC has: tools the editor
//! declares run through `agent/runTool` and their answers become tool results; error and
//! malformed answers become error results; abort sends `$/cancelRequest` with the pending
//! request's id; bad declarations are refused; the `diagnostics` tool formats the editor's
//! diagnostics; `agent/commands`, `agent/session/forkMessages` and `agent/lastAssistantText`.
//! The real `pi-lsp` binary over stdio against the loopback mock model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pi_e2e::lsp_client::{
    agent_env, file_uri, start_with_mock, tool_result_text, EditorBehavior, LspClient,
};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, session_lines, TempDir};
use serde_json::{json, Value};

const ABORTED: &str = "Tool execution was aborted by the user.";

fn workspace(tmp: &TempDir) -> PathBuf {
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    ws
}

fn open_url_decl() -> Value {
    json!({
        "name": "open_url",
        "description": "Open a URL in the editor's preview and return the page title.",
        "parameters": {"type": "object", "properties": {
            "url": {"type": "string"}, "count": {"type": "integer"}}, "required": ["url"]},
        "sequential": true,
        "promptSnippet": "Open a URL in the editor's preview"
    })
}

/// Server → client requests of `method` the client received, as whole messages.
fn requests_of(c: &LspClient, method: &str) -> Vec<Value> {
    c.log()
        .into_iter()
        .filter(|m| m["method"] == method && m.get("id").is_some())
        .collect()
}

/// The mock request `i`'s message of role `tool` answering `call_id`.
fn tool_message(mock: &MockModel, i: usize, call_id: &str) -> Value {
    mock.requests()[i].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .cloned()
        .unwrap_or_else(|| panic!("no tool message for {call_id}"))
}

/// The `toolResult` message of `call_id` in the session file, without its timestamp and its
/// `durationMs` (Pi 1.6's run time of the call, checked to be there: a whole number of ms).
fn stored_result(ws: &Path, call_id: &str) -> Value {
    let mut m = session_lines(ws)
        .into_iter()
        .find(|l| l["type"] == "message" && l["message"]["toolCallId"] == call_id)
        .unwrap_or_else(|| panic!("no stored result for {call_id}"))["message"]
        .clone();
    let o = m.as_object_mut().unwrap();
    o.remove("timestamp");
    assert!(o.remove("durationMs").unwrap().is_u64(), "{call_id}");
    m
}

fn tool_names(mock: &MockModel, i: usize) -> Vec<String> {
    mock.requests()[i].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn declared_tool_runs_in_the_editor_and_its_answer_is_the_tool_result() {
    let tmp = TempDir::new("et-run");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![
        // `count` arrives as a string: coerced by the declared schema like a built-in's.
        Step::call(
            "call_open",
            "open_url",
            json!({"url": "http://localhost:8080/", "count": "3"}),
        ),
        Step::text("The page is titled Todo list."),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            initialization_options: Some(json!({"editorTools": [open_url_decl()]})),
            run_tool_answers: HashMap::from([(
                "open_url".to_string(),
                json!({"result": {"content": [{"type": "text", "text": "title: Todo list"}],
                        "details": {"status": 200}}}),
            )]),
            ..Default::default()
        },
    )
    .await;
    let r = c
        .request("agent/prompt", json!({"text": "open the app"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let events = c.run_until_end(Duration::from_secs(20)).await;

    // The model saw the declared tool with its schema; no diagnostics tool without the
    // capability.
    assert_eq!(
        tool_names(&mock, 0),
        vec!["read", "bash", "edit", "write", "grep", "find", "ls", "todo", "open_url"]
    );
    let spec = mock.requests()[0].body["tools"][8]["function"].clone();
    assert_eq!(
        (&spec["name"], &spec["description"], &spec["parameters"]),
        (
            &open_url_decl()["name"],
            &open_url_decl()["description"],
            &open_url_decl()["parameters"]
        )
    );
    // Its snippet is in the system prompt's tool list.
    let system = mock.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.contains("- open_url: Open a URL in the editor's preview\n"),
        "{system}"
    );

    let runs = requests_of(&c, "agent/runTool");
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0]["params"],
        json!({"sessionId": sid, "toolCallId": "call_open", "name": "open_url",
               "arguments": {"url": "http://localhost:8080/", "count": 3}})
    );
    assert_eq!(
        tool_result_text(&events, "open_url"),
        ("title: Todo list".to_string(), false)
    );
    assert_eq!(
        tool_message(&mock, 1, "call_open"),
        json!({"role": "tool", "content": "title: Todo list", "tool_call_id": "call_open"})
    );
    assert_eq!(
        stored_result(&ws, "call_open"),
        json!({"role": "toolResult", "toolCallId": "call_open", "toolName": "open_url",
               "content": [{"type": "text", "text": "title: Todo list"}],
               "details": {"status": 200}, "isError": false})
    );
    mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn error_and_malformed_answers_become_error_results() {
    let tmp = TempDir::new("et-err");
    let ws = workspace(&tmp);
    let decl = |name: &str| {
        json!({"name": name, "description": format!("The {name} tool."),
               "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}})
    };
    let mock = MockModel::start(vec![
        Step::Tools(
            None,
            vec![
                ("call_rpc".into(), "rpc_fails".into(), json!({"q": "a"})),
                ("call_bad".into(), "bad_shape".into(), json!({"q": "b"})),
                ("call_err".into(), "says_error".into(), json!({"q": "c"})),
                // Invalid arguments never reach the editor.
                ("call_inv".into(), "rpc_fails".into(), json!({})),
            ],
        ),
        Step::text("I see the failures."),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            initialization_options: Some(json!({"editorTools": [
                decl("rpc_fails"), decl("bad_shape"), decl("says_error")]})),
            run_tool_answers: HashMap::from([
                (
                    "rpc_fails".to_string(),
                    json!({"error": {"code": -32000, "message": "no browser is open"}}),
                ),
                (
                    "bad_shape".to_string(),
                    json!({"result": {"content": "just a string"}}),
                ),
                (
                    "says_error".to_string(),
                    json!({"result": {"content": [{"type": "text", "text": "404 Not Found"}],
                            "details": {"status": 404}, "isError": true}}),
                ),
            ]),
            ..Default::default()
        },
    )
    .await;
    c.request("agent/prompt", json!({"text": "try them"}))
        .await
        .unwrap();
    c.run_until_end(Duration::from_secs(20)).await;
    let runs: Vec<String> = requests_of(&c, "agent/runTool")
        .iter()
        .map(|r| r["params"]["toolCallId"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = runs.clone();
    sorted.sort();
    assert_eq!(sorted, vec!["call_bad", "call_err", "call_rpc"]);

    let expect = [
        ("call_rpc", "rpc_fails", "The editor tool rpc_fails failed: no browser is open (JSON-RPC error -32000)", json!({})),
        ("call_bad", "bad_shape", "The editor answered agent/runTool for bad_shape with an invalid result (content: invalid type: string \"just a string\", expected a sequence); expected {content: [{type: \"text\", text} | {type: \"image\", data, mimeType}], details?, isError?}", json!({})),
        ("call_err", "says_error", "404 Not Found", json!({"status": 404})),
        ("call_inv", "rpc_fails", "Validation failed for tool \"rpc_fails\":\n  - q: \"q\" is a required property\n\nReceived arguments:\n{}", json!({})),
    ];
    for (id, name, text, details) in expect {
        assert_eq!(
            stored_result(&ws, id),
            json!({"role": "toolResult", "toolCallId": id, "toolName": name,
                   "content": [{"type": "text", "text": text}], "details": details, "isError": true}),
            "{id}"
        );
        assert_eq!(
            tool_message(&mock, 1, id),
            json!({"role": "tool", "content": text, "tool_call_id": id})
        );
    }
    mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn abort_while_an_editor_tool_is_pending_cancels_its_request() {
    let tmp = TempDir::new("et-abort");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![
        Step::call("call_wait", "wait_for_user", json!({"question": "Deploy?"})),
        Step::text("Second run."),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            // No answer configured: the request stays pending.
            initialization_options: Some(json!({"editorTools": [{"name": "wait_for_user",
                "description": "Ask the user a question in the editor and wait for the answer.",
                "parameters": {"type": "object", "properties": {"question": {"type": "string"}}}}]})),
            ..Default::default()
        },
    )
    .await;
    let r = c
        .request("agent/prompt", json!({"text": "ask me"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while requests_of(&c, "agent/runTool").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no agent/runTool");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let run = requests_of(&c, "agent/runTool").remove(0);
    let t0 = std::time::Instant::now();
    let aborted = c
        .request("agent/abort", json!({"sessionId": sid}))
        .await
        .unwrap();
    let took = t0.elapsed();
    assert_eq!(aborted["aborted"], true);
    assert_eq!(
        aborted["stoppedToolCalls"],
        json!([{"toolCallId": "call_wait", "toolName": "wait_for_user", "args": {"question": "Deploy?"}}])
    );
    // The tool did not sit out the abort grace: the cancel reached it at once.
    assert!(took < Duration::from_secs(2), "abort took {took:?}");
    let cancels: Vec<Value> = c
        .log()
        .into_iter()
        .filter(|m| m["method"] == "$/cancelRequest")
        .collect();
    assert_eq!(
        cancels,
        vec![json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": run["id"]}})]
    );
    // The aborted run's events end with its agent_end.
    let first = c.run_until_end(Duration::from_secs(10)).await;
    let (text, is_error) = tool_result_text(&first, "wait_for_user");
    assert_eq!((text.as_str(), is_error), (ABORTED, true));
    // A late answer is ignored, and the server serves on.
    c.reply(
        &run["id"],
        json!({"result": {"content": [{"type": "text", "text": "yes, deploy"}]}}),
    )
    .await;
    assert_eq!(
        stored_result(&ws, "call_wait"),
        json!({"role": "toolResult", "toolCallId": "call_wait", "toolName": "wait_for_user",
               "content": [{"type": "text", "text": ABORTED}], "details": {}, "isError": true})
    );
    assert_eq!(mock.requests().len(), 1);
    c.request("agent/prompt", json!({"text": "again", "sessionId": sid}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    let end = events.last().unwrap();
    assert_eq!(end["event"]["type"], "agent_end");
    // The late answer never became a second result.
    let results: Vec<Value> = session_lines(&ws)
        .into_iter()
        .filter(|l| l["message"]["toolCallId"] == "call_wait")
        .collect();
    assert_eq!(results.len(), 1);
    assert_eq!(
        tool_message(&mock, 1, "call_wait"),
        json!({"role": "tool", "content": ABORTED, "tool_call_id": "call_wait"})
    );
    mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn bad_declarations_are_refused_with_errors_naming_the_field() {
    let tmp = TempDir::new("et-bad");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::text("ok")]).await;

    // In initialize: the whole initialize is refused.
    let env = agent_env(&ws.join("../agent"), &mock.models_json(), &[]);
    let Err((e, c)) = LspClient::try_start(
        &pi_lsp_bin(),
        &ws,
        &env,
        EditorBehavior {
            initialization_options: Some(json!({"editorTools": [{"name": "ls",
                "description": "d", "parameters": {"type": "object"}}]})),
            ..Default::default()
        },
    )
    .await
    else {
        panic!("initialize accepted a tool named ls");
    };
    assert_eq!(
        e,
        json!({"code": -32602, "message": "initializationOptions.editorTools[0].name: \"ls\" is a built-in tool; an editor tool cannot replace it (choose another name)"})
    );
    drop(c);

    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let good =
        json!({"name": "good", "description": "A good tool.", "parameters": {"type": "object"}});
    assert_eq!(
        c.request("agent/tools/register", json!({"tools": [good]}))
            .await
            .unwrap(),
        json!({"tools": ["good"]})
    );
    let cases = [
        (
            json!({"tools": [{"description": "no name", "parameters": {"type": "object"}}]}),
            "tools[0]: missing field `name`".to_string(),
        ),
        (
            json!({"tools": [{"name": "x", "description": "d",
                "parameters": {"type": "object", "properties": {"n": {"type": "integr"}}}}]}),
            "tools[0].parameters: invalid JSON Schema: ".to_string(),
        ),
        (
            json!({"tools": [{"name": "new_one", "description": "d", "parameters": {"type": "object"}},
                              {"name": "read", "description": "d", "parameters": {"type": "object"}}]}),
            "tools[1].name: \"read\" is a built-in tool; an editor tool cannot replace it (choose another name)".to_string(),
        ),
        (
            json!({"tools": [{"name": "x", "description": "d", "parameters": {"type": "array"}}]}),
            "tools[0].parameters: must be a JSON Schema with \"type\": \"object\"".to_string(),
        ),
        (
            json!({"tools": [{"name": "two words", "description": "d", "parameters": {"type": "object"}}]}),
            "tools[0].name: \"two words\" is not a valid tool name (1 to 64 letters, digits, '_' or '-')".to_string(),
        ),
    ];
    for (params, message) in cases {
        let e = c
            .request("agent/tools/register", params.clone())
            .await
            .unwrap_err();
        assert_eq!(e["code"], -32602, "{params}");
        let m = e["message"].as_str().unwrap();
        if message.ends_with(": ") {
            assert!(m.starts_with(&message), "{m}");
        } else {
            assert_eq!(m, message);
        }
    }
    // Nothing of a refused list was registered.
    assert_eq!(
        c.request("agent/tools/register", json!({"tools": []}))
            .await
            .unwrap(),
        json!({"tools": ["good"]})
    );
    let e = c
        .request(
            "agent/tools/register",
            json!({"sessionId": "no-such-session", "tools": []}),
        )
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31002);
    assert_eq!(
        c.request("agent/tools/unregister", json!({"names": ["good"]}))
            .await
            .unwrap(),
        json!({"tools": []})
    );
    c.shutdown().await;
}

#[tokio::test]
async fn session_registered_tool_reaches_only_that_session() {
    let tmp = TempDir::new("et-scope");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let a = c.request("agent/session/new", json!({})).await.unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let b = c.request("agent/session/new", json!({})).await.unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        c.request(
            "agent/tools/register",
            json!({"sessionId": a, "tools": [{"name": "only_a", "description": "A's tool.",
                "parameters": {"type": "object"}}]})
        )
        .await
        .unwrap(),
        json!({"tools": ["only_a"]})
    );
    for sid in [&a, &b] {
        c.request("agent/prompt", json!({"text": "hi", "sessionId": sid}))
            .await
            .unwrap();
        c.run_until_end(Duration::from_secs(20)).await;
    }
    assert!(tool_names(&mock, 0).contains(&"only_a".to_string()));
    assert!(!tool_names(&mock, 1).contains(&"only_a".to_string()));
    // Closing the session forgets its own tools (reopened from its file, it has none).
    c.request("agent/session/close", json!({"sessionId": a}))
        .await
        .unwrap();
    assert_eq!(
        c.request("agent/tools/register", json!({"sessionId": a, "tools": []}))
            .await
            .unwrap(),
        json!({"tools": []})
    );
    c.shutdown().await;
}

/// `main.rs` with a 4-byte, 2-UTF-16-unit character before the error on line 2.
const MAIN_RS: &str = "fn main() {\n    let 🍋 = cnt;\n}\n";

#[tokio::test]
async fn diagnostics_tool_reports_the_editors_diagnostics() {
    let tmp = TempDir::new("et-diag");
    let ws = workspace(&tmp);
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/main.rs"), MAIN_RS).unwrap();
    std::fs::write(ws.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    let main_uri = file_uri(&ws.join("src/main.rs"));
    let lib_uri = file_uri(&ws.join("src/lib.rs"));
    // UTF-16 columns (the client does not offer utf-8): `cnt` starts at unit 13, character 12.
    let items = json!([
        {"uri": main_uri, "diagnostics": [
            {"range": {"start": {"line": 1, "character": 13}, "end": {"line": 1, "character": 16}},
             "severity": 1, "code": "E0425", "source": "rustc",
             "message": "cannot find value `cnt` in this scope\nhelp: a local variable with a similar name exists: `cn`"},
            {"range": {"start": {"line": 1, "character": 8}, "end": {"line": 1, "character": 10}},
             "severity": 2, "source": "rustc", "message": "unused variable: `🍋`"}]},
        {"uri": lib_uri, "diagnostics": [
            {"range": {"start": {"line": 0, "character": 7}, "end": {"line": 0, "character": 8}},
             "severity": 4, "message": "function `f` is never used"}]},
        {"uri": "file:///somewhere/else/x.rs", "diagnostics": [
            {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}},
             "severity": 1, "message": "outside"}]}
    ]);
    let mock = MockModel::start(vec![
        Step::call("call_one", "diagnostics", json!({"paths": ["src/main.rs"]})),
        Step::call("call_all", "diagnostics", json!({})),
        Step::call(
            "call_out",
            "diagnostics",
            json!({"paths": ["../secret.rs"]}),
        ),
        Step::text("Fix: rename cnt."),
    ])
    .await;
    let mut c = start_with_mock(
        &ws,
        &mock,
        EditorBehavior {
            diagnostics: Some(items),
            // The server's default policy (auto-edit): reading diagnostics is never asked
            // about (an unanswered question would reject the calls).
            approval_policy: None,
            ..Default::default()
        },
    )
    .await;
    let r = c
        .request("agent/prompt", json!({"text": "what is broken?"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(20)).await;
    assert!(tool_names(&mock, 0).contains(&"diagnostics".to_string()));
    let asked: Vec<Value> = requests_of(&c, "agent/diagnostics")
        .into_iter()
        .map(|r| r["params"].clone())
        .collect();
    assert_eq!(
        asked,
        vec![
            json!({"sessionId": sid, "uris": [main_uri]}),
            json!({"sessionId": sid}),
        ]
    );
    let one = "src/main.rs:2:13 error rustc(E0425): cannot find value `cnt` in this scope\n    help: a local variable with a similar name exists: `cn`\nsrc/main.rs:2:9 warning rustc: unused variable: `🍋`";
    assert_eq!(
        stored_result(&ws, "call_one"),
        json!({"role": "toolResult", "toolCallId": "call_one", "toolName": "diagnostics",
               "content": [{"type": "text", "text": one}],
               "details": {"total": 2, "shown": 2, "errors": 1, "warnings": 1, "infos": 0, "hints": 0, "outside": 0},
               "isError": false})
    );
    let all = format!("{one}\nsrc/lib.rs:1:8 hint: function `f` is never used\n\n[1 diagnostics of files outside the workspace left out.]");
    assert_eq!(
        tool_message(&mock, 2, "call_all"),
        json!({"role": "tool", "content": all, "tool_call_id": "call_all"})
    );
    let out = stored_result(&ws, "call_out");
    assert_eq!(out["isError"], true);
    assert!(
        out["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Path ../secret.rs is outside the workspace"),
        "{out}"
    );
    mock.assert_paired();
    c.shutdown().await;
}

/// A workspace with a project template and skill, and an agent dir with a global template.
fn command_files(ws: &Path) {
    let agent = ws.join("../agent");
    std::fs::create_dir_all(agent.join("prompts")).unwrap();
    std::fs::write(
        agent.join("prompts/hello.md"),
        "---\ndescription: Say hello\n---\nHello $1\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.join(".pi/prompts")).unwrap();
    std::fs::write(
        ws.join(".pi/prompts/fix-tests.md"),
        "---\ndescription: Fix failing tests\nargument-hint: <test name>\n---\nFix $1\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.join(".pi/skills/release")).unwrap();
    std::fs::write(
        ws.join(".pi/skills/release/SKILL.md"),
        "---\nname: release\ndescription: Cut a release.\n---\nSteps.\n",
    )
    .unwrap();
}

#[tokio::test]
async fn commands_list_templates_and_skills_of_a_trusted_workspace_only() {
    let tmp = TempDir::new("et-cmds");
    let ws = workspace(&tmp);
    command_files(&ws);
    let mock = MockModel::start(vec![]).await;
    let hello = json!({"name": "hello", "description": "Say hello", "source": "prompt",
        "location": "user", "path": ws.join("../agent/prompts/hello.md").display().to_string()});
    for (trusted, expected) in [
        (
            true,
            json!({"commands": [
                {"name": "fix-tests", "description": "Fix failing tests", "source": "prompt",
                 "location": "project", "argumentHint": "<test name>",
                 "path": ws.join(".pi/prompts/fix-tests.md").display().to_string()},
                hello,
                {"name": "skill:release", "description": "Cut a release.", "source": "skill",
                 "location": "project",
                 "path": ws.join(".pi/skills/release/SKILL.md").display().to_string()},
            ]}),
        ),
        (false, json!({"commands": [hello]})),
    ] {
        let mut c = start_with_mock(
            &ws,
            &mock,
            EditorBehavior {
                initialization_options: Some(json!({"workspaceTrusted": trusted})),
                ..Default::default()
            },
        )
        .await;
        // agent_env rewrote the agent dir's models.json only; the prompts stay.
        assert_eq!(
            c.request("agent/commands", json!({})).await.unwrap(),
            expected,
            "trusted: {trusted}"
        );
        let e = c
            .request("agent/commands", json!({"sessionId": "nope"}))
            .await
            .unwrap_err();
        assert_eq!(e["code"], -31002);
        c.shutdown().await;
    }
}

#[tokio::test]
async fn fork_messages_and_last_assistant_text() {
    let tmp = TempDir::new("et-fork");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![
        Step::text("First answer."),
        Step::text("  Second answer.\n"),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let sid = c.request("agent/session/new", json!({})).await.unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        c.request("agent/lastAssistantText", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"text": null})
    );
    for text in ["first question", "second question"] {
        c.request("agent/prompt", json!({"text": text, "sessionId": sid}))
            .await
            .unwrap();
        c.run_until_end(Duration::from_secs(20)).await;
    }
    let users: Vec<Value> = session_lines(&ws)
        .into_iter()
        .filter(|l| l["type"] == "message" && l["message"]["role"] == "user")
        .map(|l| json!({"entryId": l["id"], "text": l["message"]["content"][0]["text"]}))
        .collect();
    assert_eq!(users.len(), 2);
    assert_eq!(
        c.request("agent/session/forkMessages", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"messages": users})
    );
    assert_eq!(users[1]["text"], "second question");
    assert_eq!(
        c.request("agent/lastAssistantText", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"text": "Second answer."})
    );
    for m in ["agent/session/forkMessages", "agent/lastAssistantText"] {
        let e = c
            .request(m, json!({"sessionId": "nope"}))
            .await
            .unwrap_err();
        assert_eq!(e["code"], -31002, "{m}");
        let e = c.request(m, json!({})).await.unwrap_err();
        assert_eq!(
            e,
            json!({"code": -32602, "message": "missing field `sessionId`"}),
            "{m}"
        );
    }
    c.shutdown().await;
}

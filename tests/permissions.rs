//! The approval policy end to end: the real `pi-lsp` binary over stdio, a fake editor and the
//! loopback mock model. Edits ask with their diff and content hashes and land only as
//! approved; "allow once" asks again, "allow always" remembers for the session or writes the
//! workspace's `.pi/settings.json`; a rejection's reason reaches the model; abort while a
//! question is pending cancels it with `$/cancelRequest`; a buffer changed while the user
//! decides is refused; clients without `agent/requestPermission` are asked with
//! `window/showMessageRequest`; `agent/permissions/set` and `agent/state`; `pi-lsp run`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::time::Duration;

use pi_core::approval::content_hash;
use pi_e2e::lsp_client::{agent_env, tool_result_text, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

const ABORTED: &str = "Tool execution was aborted by the user.";

struct Setup {
    tmp: TempDir,
    mock: MockModel,
}

impl Setup {
    async fn new(name: &str, script: Vec<Step>) -> Setup {
        let tmp = TempDir::new(name);
        std::fs::create_dir_all(tmp.path().join("ws")).unwrap();
        let mock = MockModel::start(script).await;
        Setup { tmp, mock }
    }

    fn ws(&self) -> std::path::PathBuf {
        self.tmp.path().join("ws").canonicalize().unwrap()
    }

    async fn client(&self, behavior: EditorBehavior) -> LspClient {
        let env = agent_env(
            &self.tmp.path().join("agent"),
            &self.mock.models_json(),
            &[],
        );
        LspClient::start(&pi_e2e::pi_lsp_bin(), &self.ws(), &env, behavior).await
    }
}

async fn prompt(c: &mut LspClient, text: &str) -> Vec<Value> {
    c.request(
        "agent/prompt",
        json!({"text": text, "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    c.run_until_end(Duration::from_secs(30)).await
}

/// Params of every server → client request `method` so far.
fn requests(c: &LspClient, method: &str) -> Vec<Value> {
    c.log()
        .into_iter()
        .filter(|m| m["method"] == method && m.get("id").is_some())
        .map(|m| m["params"].clone())
        .collect()
}

/// Params of every `agent/attention` with reason `permission` so far.
fn permission_attention(c: &LspClient) -> Vec<Value> {
    c.log()
        .into_iter()
        .filter(|m| m["method"] == "agent/attention" && m["params"]["reason"] == "permission")
        .map(|m| m["params"].clone())
        .collect()
}

/// `(text, isError)` of every `tool_execution_end`, in order.
fn results(events: &[Value]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter(|e| e["event"]["type"] == "tool_execution_end")
        .map(|e| {
            (
                e["event"]["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["event"]["isError"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn session_id(events: &[Value]) -> String {
    events[0]["sessionId"].as_str().unwrap().to_string()
}

/// Waits for the next held server → client request `method`; returns the whole message.
async fn next_request(c: &mut LspClient, method: &str) -> Value {
    loop {
        let n = c
            .next_notification(Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("no {method}; stderr:\n{}", c.stderr.lock().unwrap()));
        if n["method"] == method && n.get("id").is_some() {
            return n;
        }
    }
}

const OLD: &str = "alpha\nbeta\n";
const NEW: &str = "alpha\nBETA\n";
const DIFF: &str = "--- notes.txt\n+++ notes.txt\n@@ -1,2 +1,2 @@\n alpha\n-beta\n+BETA\n";

fn edit_args() -> Value {
    json!({"path": "notes.txt", "edits": [{"oldText": "beta", "newText": "BETA"}]})
}

#[tokio::test]
async fn ask_policy_edit_carries_diff_and_hashes_and_allow_once_asks_again() {
    let s = Setup::new(
        "perm-once",
        vec![
            Step::call("call_e1", "edit", edit_args()),
            Step::call(
                "call_e2",
                "edit",
                json!({"path": "notes.txt", "edits": [{"oldText": "alpha", "newText": "ALPHA"}]}),
            ),
            Step::text("done"),
        ],
    )
    .await;
    std::fs::write(s.ws().join("notes.txt"), OLD).unwrap();
    let mut c = s
        .client(EditorBehavior {
            approval_policy: Some("ask"),
            permission_answer: Some(json!({"decision": "allow"})),
            ..Default::default()
        })
        .await;
    let path = s.ws().join("notes.txt");
    c.open(&path, OLD).await;
    let events = prompt(&mut c, "edit twice").await;
    let sid = session_id(&events);
    let asked = requests(&c, "agent/requestPermission");
    assert_eq!(asked.len(), 2, "allow once asks again: {asked:#?}");
    assert_eq!(
        asked[0],
        json!({
            "sessionId": sid,
            "tool": "edit",
            "toolCallId": "call_e1",
            "arguments": edit_args(),
            "reason": "approvalPolicy \"ask\": every tool call asks",
            "rule": {"tool": "edit"},
            "alwaysScopes": ["session"],
            "change": {
                "path": "notes.txt",
                "diff": DIFF,
                "oldHash": content_hash(OLD),
                "newHash": content_hash(NEW),
            }
        })
    );
    assert_eq!(asked[1]["change"]["oldHash"], json!(content_hash(NEW)));
    assert_eq!(
        asked[1]["change"]["newHash"],
        json!(content_hash("ALPHA\nBETA\n"))
    );
    // The hashes are XXH3-64 of the text, as documented.
    assert_eq!(content_hash(OLD).len(), "xxh3:".len() + 16);
    assert_eq!(
        results(&events),
        vec![
            (
                "Successfully replaced 1 block(s) in notes.txt.".to_string(),
                false
            ),
            (
                "Successfully replaced 1 block(s) in notes.txt.".to_string(),
                false
            ),
        ]
    );
    assert_eq!(c.doc(&path).unwrap().text, "ALPHA\nBETA\n");
    // Each question raised attention first.
    assert_eq!(
        permission_attention(&c),
        vec![
            json!({"sessionId": sid, "reason": "permission",
                   "message": "pi wants to edit notes.txt (+1 −1). Reason: approvalPolicy \"ask\": every tool call asks"}),
            json!({"sessionId": sid, "reason": "permission",
                   "message": "pi wants to edit notes.txt (+1 −1). Reason: approvalPolicy \"ask\": every tool call asks"}),
        ]
    );
    s.mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn default_auto_edit_asks_for_bash_and_allow_always_session_remembers_the_prefix() {
    let s = Setup::new(
        "perm-session",
        vec![
            Step::call("call_r", "read", json!({"path": "notes.txt"})),
            Step::call("call_e", "edit", edit_args()),
            Step::call("call_b1", "bash", json!({"command": "ls -a"})),
            Step::call("call_b2", "bash", json!({"command": "ls -1"})),
            Step::call("call_b3", "bash", json!({"command": "cat notes.txt"})),
            Step::text("done"),
        ],
    )
    .await;
    std::fs::write(s.ws().join("notes.txt"), OLD).unwrap();
    let mut c = s
        .client(EditorBehavior {
            // No editor setting: the server's default policy.
            approval_policy: None,
            permission_answer: Some(json!({"decision": "allowAlways", "scope": "session"})),
            ..Default::default()
        })
        .await;
    let events = prompt(&mut c, "look around").await;
    let sid = session_id(&events);
    let asked = requests(&c, "agent/requestPermission");
    // read and edit run unasked; `ls -a` asks and its answer covers `ls -1`; `cat …` asks.
    assert_eq!(
        asked,
        vec![
            json!({"sessionId": sid, "tool": "bash", "toolCallId": "call_b1",
                   "arguments": {"command": "ls -a"},
                   "reason": "approvalPolicy \"auto-edit\": bash asks",
                   "rule": {"tool": "bash", "commandPrefix": "ls"},
                   "alwaysScopes": ["session"]}),
            json!({"sessionId": sid, "tool": "bash", "toolCallId": "call_b3",
                   "arguments": {"command": "cat notes.txt"},
                   "reason": "approvalPolicy \"auto-edit\": bash asks",
                   "rule": {"tool": "bash", "commandPrefix": "cat"},
                   "alwaysScopes": ["session"]}),
        ]
    );
    let r = results(&events);
    assert_eq!(r.len(), 5);
    assert!(r.iter().all(|(_, err)| !err), "{r:#?}");
    assert_eq!(r[0].0, OLD);
    assert_eq!(r[1].0, "Successfully replaced 1 block(s) in notes.txt.");
    let state = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(state["approvalPolicy"], "auto-edit");
    // Nothing was written to the project: the answers were for the session.
    assert!(!s.ws().join(".pi/settings.json").exists());
    s.mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn allow_always_workspace_is_saved_in_project_settings_and_used_by_the_next_server() {
    let s = Setup::new(
        "perm-workspace",
        vec![
            Step::call("call_b1", "bash", json!({"command": "ls -a"})),
            Step::text("done"),
            Step::call("call_b2", "bash", json!({"command": "ls -1"})),
            Step::text("done again"),
        ],
    )
    .await;
    std::fs::create_dir_all(s.ws().join(".pi")).unwrap();
    std::fs::write(s.ws().join(".pi/settings.json"), "{\"theme\": \"dark\"}\n").unwrap();
    let trusted = || EditorBehavior {
        approval_policy: None,
        initialization_options: Some(json!({"workspaceTrusted": true})),
        permission_answer: Some(json!({"decision": "allowAlways", "scope": "workspace"})),
        ..Default::default()
    };
    let mut c = s.client(trusted()).await;
    let events = prompt(&mut c, "list").await;
    let asked = requests(&c, "agent/requestPermission");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["alwaysScopes"], json!(["session", "workspace"]));
    assert!(!results(&events)[0].1);
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(s.ws().join(".pi/settings.json")).unwrap())
            .unwrap();
    assert_eq!(
        saved,
        json!({"theme": "dark", "approvals": {"bash": ["ls"]}})
    );
    c.shutdown().await;
    // A new server for the same (trusted) workspace reads the rule: no question.
    let mut c = s.client(trusted()).await;
    let events = prompt(&mut c, "list again").await;
    assert_eq!(requests(&c, "agent/requestPermission"), Vec::<Value>::new());
    assert!(!results(&events)[0].1);
    s.mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn untrusted_workspace_keeps_allow_always_in_the_session() {
    let s = Setup::new(
        "perm-untrusted",
        vec![
            Step::call("call_b1", "bash", json!({"command": "ls -a"})),
            Step::call("call_b2", "bash", json!({"command": "ls -1"})),
            Step::text("done"),
        ],
    )
    .await;
    // A client answering "workspace" although it was not offered: this once only.
    let mut c = s
        .client(EditorBehavior {
            approval_policy: None,
            permission_answer: Some(json!({"decision": "allowAlways", "scope": "workspace"})),
            ..Default::default()
        })
        .await;
    let events = prompt(&mut c, "list").await;
    assert_eq!(requests(&c, "agent/requestPermission").len(), 2);
    assert!(results(&events).iter().all(|(_, e)| !e));
    assert!(!s.ws().join(".pi/settings.json").exists());
    c.shutdown().await;
}

#[tokio::test]
async fn rejection_reason_is_the_error_result_the_model_sees() {
    let s = Setup::new(
        "perm-reject",
        vec![
            Step::call("call_b", "bash", json!({"command": "touch made.txt"})),
            Step::text("ok, I will not"),
        ],
    )
    .await;
    let mut c = s
        .client(EditorBehavior {
            approval_policy: None,
            permission_answer: Some(json!({"decision": "reject", "reason": "not on a Friday"})),
            ..Default::default()
        })
        .await;
    let events = prompt(&mut c, "make a file").await;
    let expected = "The user rejected this bash call: not on a Friday";
    assert_eq!(
        tool_result_text(&events, "bash"),
        (expected.to_string(), true)
    );
    assert!(!s.ws().join("made.txt").exists(), "the command did not run");
    // The next request carries the rejection as the call's tool result.
    let reqs = s.mock.requests();
    assert_eq!(reqs.len(), 2);
    let body = reqs[1].body.to_string();
    assert!(body.contains(expected), "{body}");
    s.mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn abort_while_pending_cancels_the_question_and_pairs_an_aborted_result() {
    let s = Setup::new(
        "perm-abort",
        vec![
            Step::call("call_b", "bash", json!({"command": "touch made.txt"})),
            Step::text("never requested"),
        ],
    )
    .await;
    let mut c = s
        .client(EditorBehavior {
            approval_policy: None,
            hold_permissions: true,
            permission_answer: Some(json!({"decision": "allow"})),
            ..Default::default()
        })
        .await;
    c.request(
        "agent/prompt",
        json!({"text": "make a file", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let asked = next_request(&mut c, "agent/requestPermission").await;
    let sid = asked["params"]["sessionId"].clone();
    let stopped = c
        .request("agent/abort", json!({"sessionId": sid}))
        .await
        .unwrap();
    // The call is reported stopped; no process was, since none had started.
    assert_eq!(
        stopped,
        json!({"aborted": true, "runId": stopped["runId"],
               "stoppedToolCalls": [{"toolCallId": "call_b", "toolName": "bash", "args": {"command": "touch made.txt"}}],
               "stoppedProcesses": [], "appliedEdits": [], "queuedMessages": []})
    );
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "bash"),
        (ABORTED.to_string(), true)
    );
    // The pending request was withdrawn with $/cancelRequest naming its id.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let cancels: Vec<Value> = c
            .log()
            .into_iter()
            .filter(|m| m["method"] == "$/cancelRequest")
            .map(|m| m["params"].clone())
            .collect();
        if !cancels.is_empty() {
            assert_eq!(cancels, vec![json!({"id": asked["id"]})]);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no $/cancelRequest");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A late answer changes nothing.
    c.respond(&asked["id"], json!({"decision": "allow"})).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!s.ws().join("made.txt").exists());
    assert_eq!(s.mock.requests().len(), 1);
    s.mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn buffer_changed_while_the_user_decides_is_refused() {
    let s = Setup::new(
        "perm-mismatch",
        vec![
            Step::call("call_e", "edit", edit_args()),
            Step::text("done"),
        ],
    )
    .await;
    std::fs::write(s.ws().join("notes.txt"), OLD).unwrap();
    let mut c = s
        .client(EditorBehavior {
            approval_policy: Some("ask"),
            hold_permissions: true,
            permission_answer: Some(json!({"decision": "allow"})),
            ..Default::default()
        })
        .await;
    let path = s.ws().join("notes.txt");
    c.open(&path, OLD).await;
    c.request(
        "agent/prompt",
        json!({"text": "edit", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let asked = next_request(&mut c, "agent/requestPermission").await;
    assert_eq!(
        asked["params"]["change"]["oldHash"],
        json!(content_hash(OLD))
    );
    // The user types while the question is open, then allows.
    let typed = "alpha\nbeta\ngamma\n";
    c.set_buffer(&path, typed).await;
    // A person answers well after typing: a round trip makes sure the server has taken the
    // didChange before the answer (a response is routed to its waiting request at once, ahead
    // of notifications still queued; the editor's version check would then refuse the edit,
    // a different error path with the same outcome).
    c.request("agent/session/list", json!({})).await.unwrap();
    c.respond(&asked["id"], json!({"decision": "allow"})).await;
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(
        tool_result_text(&events, "edit"),
        (
            // In words: which lines changed, never the hashes.
            "notes.txt changed while the user was deciding (line 3 differs); nothing was changed. What was approved is not what would land: read the file again and redo the change.".to_string(),
            true
        )
    );
    assert_eq!(c.doc(&path).unwrap().text, typed);
    assert_eq!(requests(&c, "workspace/applyEdit"), Vec::<Value>::new());
    s.mock.assert_paired();
    c.shutdown().await;
}

#[tokio::test]
async fn write_of_a_new_file_asks_with_no_old_hash() {
    let s = Setup::new(
        "perm-write",
        vec![
            Step::call(
                "call_w",
                "write",
                json!({"path": "new.txt", "content": "hello\n"}),
            ),
            Step::text("done"),
        ],
    )
    .await;
    let mut c = s
        .client(EditorBehavior {
            approval_policy: Some("ask"),
            permission_answer: Some(json!({"decision": "allow"})),
            ..Default::default()
        })
        .await;
    let events = prompt(&mut c, "write").await;
    let asked = requests(&c, "agent/requestPermission");
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0]["change"],
        json!({"path": "new.txt", "diff": "--- new.txt\n+++ new.txt\n@@ -0,0 +1 @@\n+hello\n",
               "oldHash": null, "newHash": content_hash("hello\n")})
    );
    assert!(!tool_result_text(&events, "write").1);
    c.shutdown().await;
}

#[tokio::test]
async fn clients_without_the_request_get_show_message_request_with_always_actions() {
    let s = Setup::new(
        "perm-fallback",
        vec![
            Step::call("call_b1", "bash", json!({"command": "ls -a"})),
            Step::call("call_b2", "bash", json!({"command": "ls -1"})),
            Step::text("done"),
        ],
    )
    .await;
    let mut c = s
        .client(EditorBehavior {
            approval_policy: None,
            message_action: Some("Allow for this session".into()),
            ..Default::default()
        })
        .await;
    let events = prompt(&mut c, "list").await;
    assert_eq!(requests(&c, "agent/requestPermission"), Vec::<Value>::new());
    assert_eq!(
        requests(&c, "window/showMessageRequest"),
        vec![json!({
            "type": 2,
            "message": "pi wants to run `ls -a`. Reason: approvalPolicy \"auto-edit\": bash asks",
            "actions": [{"title": "Allow"}, {"title": "Allow for this session"}, {"title": "Reject"}]
        })]
    );
    assert!(results(&events).iter().all(|(_, e)| !e));
    c.shutdown().await;
}

#[tokio::test]
async fn permissions_set_changes_the_session_policy_and_bad_input_is_refused() {
    let s = Setup::new(
        "perm-set",
        vec![
            Step::call("call_r", "read", json!({"path": "notes.txt"})),
            Step::text("done"),
        ],
    )
    .await;
    std::fs::write(s.ws().join("notes.txt"), OLD).unwrap();
    let mut c = s
        .client(EditorBehavior {
            permission_answer: Some(json!({"decision": "allow"})),
            ..Default::default()
        })
        .await;
    let st = c
        .request("agent/session/new", json!({"model": "mock/mock-1"}))
        .await
        .unwrap();
    let sid = st["sessionId"].clone();
    assert_eq!(st["approvalPolicy"], "approve-all", "the editor's setting");
    let set = c
        .request(
            "agent/permissions/set",
            json!({"sessionId": sid, "approvalPolicy": "ask"}),
        )
        .await
        .unwrap();
    assert_eq!(set, json!({"approvalPolicy": "ask", "sessionRules": []}));
    let st = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(st["approvalPolicy"], "ask");
    let bad = c
        .request(
            "agent/permissions/set",
            json!({"sessionId": sid, "approvalPolicy": "sometimes"}),
        )
        .await
        .unwrap_err();
    assert_eq!(bad["code"], -32602);
    assert!(
        bad["message"].as_str().unwrap().contains("approvalPolicy"),
        "{bad}"
    );
    let unknown = c
        .request(
            "agent/permissions/set",
            json!({"sessionId": "nope", "approvalPolicy": "ask"}),
        )
        .await
        .unwrap_err();
    assert_eq!(unknown["code"], -31002);
    assert_eq!(
        c.request("agent/state", json!({"sessionId": sid}))
            .await
            .unwrap()["approvalPolicy"],
        "ask",
        "nothing changed by the bad calls"
    );
    // Under "ask" even read asks.
    c.request(
        "agent/prompt",
        json!({"sessionId": sid, "text": "read it", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    let asked = requests(&c, "agent/requestPermission");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["tool"], "read");
    assert_eq!(tool_result_text(&events, "read"), (OLD.to_string(), false));
    // null: back to the default.
    let set = c
        .request(
            "agent/permissions/set",
            json!({"sessionId": sid, "approvalPolicy": null}),
        )
        .await
        .unwrap();
    assert_eq!(set["approvalPolicy"], "approve-all");
    c.shutdown().await;
}

async fn headless(
    ws: &Path,
    agent: &Path,
    mock: &MockModel,
    extra: &[&str],
) -> std::process::Output {
    let env = agent_env(agent, &mock.models_json(), &[]);
    let mut cmd = tokio::process::Command::new(pi_e2e::pi_lsp_bin());
    cmd.arg("run")
        .arg("--workspace")
        .arg(ws)
        .args(["--model", "mock/mock-1", "--json", "--trust"])
        .args(extra)
        .arg("make a file");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().await.unwrap()
}

fn headless_bash_result(out: &std::process::Output) -> (String, bool) {
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let e = events
        .iter()
        .find(|e| e["type"] == "tool_execution_end")
        .expect("a tool result");
    (
        e["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string(),
        e["isError"].as_bool().unwrap(),
    )
}

#[tokio::test]
async fn headless_run_cannot_ask_and_approve_allows() {
    let script = || {
        vec![
            Step::call("call_b", "bash", json!({"command": "touch made.txt"})),
            Step::text("done"),
        ]
    };
    let tmp = TempDir::new("perm-headless");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join(".pi")).unwrap();
    std::fs::write(ws.join(".pi/settings.json"), r#"{"approvalPolicy": "ask"}"#).unwrap();
    let mock = MockModel::start(script()).await;
    let out = headless(&ws, &tmp.path().join("agent"), &mock, &[]).await;
    assert_eq!(
        headless_bash_result(&out),
        (
            "Not run: the approval policy asks the user before this tool call, and `pi-lsp run` cannot ask. Run it again with --approve-all (or set approvalPolicy to \"approve-all\" or \"auto-edit\") to allow it.".to_string(),
            true
        )
    );
    assert!(!ws.join("made.txt").exists());
    let mock = MockModel::start(script()).await;
    let out = headless(&ws, &tmp.path().join("agent"), &mock, &["--approve-all"]).await;
    assert!(!headless_bash_result(&out).1, "--approve-all runs it");
    assert!(ws.join("made.txt").exists());
}

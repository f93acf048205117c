//! `pi-lsp acp` end to end: the real binary over stdio (our own NDJSON client,
//! `support/acp_client.rs`; client terminals that really run their command lines,
//! `support/acp_terminal.rs`) against the loopback scripted model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pi_e2e::acp_client::{allow, AcpClient, Answerer, AsyncAnswerer};
use pi_e2e::acp_terminal::Terminals;
use pi_e2e::lsp_client::agent_env;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{require, TempDir};
use serde_json::{json, Value};

/// A test's folders: `ws` (the workspace) and `agent` (the agent dir with the models.json),
/// and the agent's environment.
struct Setup {
    _tmp: TempDir,
    ws: std::path::PathBuf,
    agent: std::path::PathBuf,
    env: Vec<(&'static str, String)>,
}

fn setup(name: &str, mock: &MockModel) -> Setup {
    setup_models(name, &mock.models_json())
}

/// [`setup`] with `models` as the models.json.
fn setup_models(name: &str, models: &Value) -> Setup {
    let tmp = TempDir::new(name);
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let agent = tmp.path().join("agent");
    let env = agent_env(&agent, models, &[("PI_LSP_LOG", "warn")]);
    Setup {
        _tmp: tmp,
        ws,
        agent,
        env,
    }
}

/// `pi-lsp acp --model mock/mock-1` in `s`'s workspace, initialized with the client
/// capabilities `caps`; `answer` answers the agent's requests.
async fn start_with(s: &Setup, caps: Value, answer: AsyncAnswerer) -> AcpClient {
    let mut c = AcpClient::start_async(&s.ws, &s.env, &["--model", "mock/mock-1"], answer);
    c.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": caps}),
    )
    .await;
    c
}

/// [`start_with`] without capabilities, `answer` answering at once.
async fn start(s: &Setup, answer: Answerer) -> AcpClient {
    start_caps(s, json!({}), answer).await
}

/// [`start_with`] with `answer` answering at once.
async fn start_caps(s: &Setup, caps: Value, answer: Answerer) -> AcpClient {
    let answer: AsyncAnswerer = Arc::new(move |m, p| {
        let r = answer(&m, &p);
        Box::pin(async move { r })
    });
    start_with(s, caps, answer).await
}

/// What every scenario does with its client: sessions and prompts.
trait Acp {
    /// `session/new` in `cwd` (no MCP servers): the session's id.
    async fn new_session(&mut self, cwd: &Path) -> String;
    /// Sends `session/prompt` with one text block; the request's id.
    fn send_prompt(&mut self, sid: &str, text: &str) -> i64;
    /// `session/prompt` with one text block, answered: its result.
    async fn prompt(&mut self, sid: &str, text: &str) -> Value;
}

impl Acp for AcpClient {
    async fn new_session(&mut self, cwd: &Path) -> String {
        self.call("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await["sessionId"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn send_prompt(&mut self, sid: &str, text: &str) -> i64 {
        self.send(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
    }

    async fn prompt(&mut self, sid: &str, text: &str) -> Value {
        self.call(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
        .await
    }
}

/// One scenario: the loopback model playing `steps`, a workspace, the agent started (no
/// capabilities, `answer` answering) and a new session.
struct Scene {
    mock: MockModel,
    s: Setup,
    c: AcpClient,
    sid: String,
}

async fn scene(name: &str, steps: Vec<Step>, answer: Answerer) -> Scene {
    let mock = MockModel::start(steps).await;
    let s = setup(name, &mock);
    let mut c = start(&s, answer).await;
    let sid = c.new_session(&s.ws).await;
    Scene { mock, s, c, sid }
}

fn end_turn() -> Value {
    json!({"stopReason": "end_turn"})
}

/// Concatenated text of the `kind` chunks (`agent_message_chunk`, …) in `updates`.
fn text_of(updates: &[Value], kind: &str) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .map(|u| u["content"]["text"].as_str().unwrap_or_default())
        .collect()
}

/// Waits until the session's streamed answer so far is `text`.
async fn wait_text(c: &AcpClient, sid: &str, text: &str) {
    for _ in 0..500 {
        if text_of(&c.updates(sid), "agent_message_chunk") == text {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("never streamed {text:?}: {:#?}", c.updates(sid));
}

#[tokio::test]
async fn initialize_states_version_capabilities_and_agent() {
    let mock = MockModel::start(vec![]).await;
    let s = setup("acp-init", &mock);
    let mut c = AcpClient::start(&s.ws, &s.env, &[], allow("allow_once"));
    let r = c
        .call(
            "initialize",
            json!({"protocolVersion": 7, "clientCapabilities": {"fs": {"readTextFile": true}}}),
        )
        .await;
    assert_eq!(
        r,
        json!({
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": true, "sse": false},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}, "additionalDirectories": {}}
            },
            "authMethods": [],
            "agentInfo": {"name": "pi-lsp", "title": "Pi (pi-lsp)", "version": env!("CARGO_PKG_VERSION")},
            "_meta": {"steering": {"supported": true}}
        })
    );
}

/// ACP's version negotiation: the requested version when the agent speaks it (1), else the
/// latest it speaks (1), for an older (0) and a later (7) one alike.
#[tokio::test]
async fn initialize_answers_the_requested_version_or_the_latest_supported() {
    let mock = MockModel::start(vec![]).await;
    let s = setup("acp-init-version", &mock);
    let mut c = AcpClient::start(&s.ws, &s.env, &[], allow("allow_once"));
    let mut answered = Vec::new();
    for asked in [0, 1, 7] {
        let r = c
            .call(
                "initialize",
                json!({"protocolVersion": asked, "clientCapabilities": {}}),
            )
            .await;
        answered.push((asked, r["protocolVersion"].clone()));
    }
    assert_eq!(answered, vec![(0, json!(1)), (1, json!(1)), (7, json!(1))]);
}

#[tokio::test]
async fn bad_input_is_answered_with_errors_naming_what_is_wrong_and_the_agent_goes_on() {
    let mock = MockModel::start(vec![Step::text("still here")]).await;
    let s = setup("acp-errors", &mock);
    let mut c = start(&s, allow("allow_once")).await;
    c.send_raw("{not json");
    c.send_raw("[1,2]");
    c.send_raw(r#"{"jsonrpc":"2.0","id":5,"method":"no/such"}"#);
    c.send_raw(
        r#"{"jsonrpc":"2.0","id":6,"method":"session/new","params":{"cwd":42,"mcpServers":[]}}"#,
    );
    c.send_raw(r#"{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"nope","prompt":[{"type":"text","text":"hi"}]}}"#);
    c.send_raw(r#"{"jsonrpc":"2.0","id":8,"method":"session/new","params":{"cwd":"relative/dir","mcpServers":[]}}"#);
    c.send_raw(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"initialize"}"#);
    let err = |id: Value| {
        let c = &c;
        async move {
            let r = c
                .wait_for(10, |v| v["id"] == id && v.get("error").is_some())
                .await;
            (
                r["error"]["code"].as_i64().unwrap(),
                r["error"]["message"].as_str().unwrap().to_string(),
            )
        }
    };
    let nulls: Vec<Value> = {
        c.wait_for(10, |v| v["id"].is_null() && v["error"]["code"] == -32600)
            .await;
        c.received
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v["id"].is_null())
            .cloned()
            .collect()
    };
    assert_eq!(nulls[0]["error"]["code"], -32700);
    assert!(
        nulls[0]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("parse error: "),
        "{}",
        nulls[0]
    );
    assert_eq!(
        nulls[1]["error"],
        json!({"code": -32600, "message": "a JSON-RPC message must be an object"})
    );
    assert_eq!(
        err(json!(5)).await,
        (-32601, "method not found: no/such".into())
    );
    assert_eq!(
        err(json!(6)).await,
        (
            -32602,
            "cwd: invalid type: integer `42`, expected path string".into()
        )
    );
    assert_eq!(
        err(json!(7)).await,
        (-32002, "unknown session: nope".into())
    );
    assert_eq!(
        err(json!(8)).await,
        (
            -32602,
            "cwd: must be an absolute path, got relative/dir".into()
        )
    );
    // The request whose id is an object: the error names the id (answered with id null).
    let bad_id = c
        .wait_for(10, |v| {
            v["id"].is_null()
                && v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("invalid request: id"))
        })
        .await;
    assert_eq!(
        bad_id["error"],
        json!({"code": -32600, "message": "invalid request: id: expected a string, a number or null"})
    );
    // The agent goes on.
    let id = c.new_session(&s.ws).await;
    assert_eq!(c.prompt(&id, "hi").await, end_turn());
    assert_eq!(
        text_of(&c.updates(&id), "agent_message_chunk"),
        "still here"
    );
}

/// Every file under `dir` with its contents (sorted by path).
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// An empty prompt (no blocks, or only blank text) is -32602 naming `prompt`: nothing runs,
/// nothing reaches the model or the session file, and the session goes on.
#[tokio::test]
async fn an_empty_prompt_is_refused_and_runs_nothing() {
    let Scene {
        mock,
        s,
        mut c,
        sid,
    } = scene(
        "acp-empty-prompt",
        vec![Step::text("answered")],
        allow("allow_once"),
    )
    .await;
    let before = files_under(&s.agent);
    let want =
        json!({"code": -32602, "message": "prompt: empty: give text, an image or a resource"});
    for prompt in [
        json!([]),
        json!([{"type": "text", "text": ""}]),
        json!([{"type": "text", "text": "  \n\t"}, {"type": "text", "text": " "}]),
    ] {
        let id = c.send(
            "session/prompt",
            json!({"sessionId": sid, "prompt": prompt}),
        );
        let r = c
            .wait_for(10, |v| {
                v["id"] == id && (v.get("error").is_some() || v.get("result").is_some())
            })
            .await;
        assert_eq!(r["error"], want, "{prompt}");
    }
    assert_eq!(mock.requests().len(), 0);
    assert_eq!(files_under(&s.agent), before);
    assert_eq!(
        c.updates(&sid)
            .iter()
            .filter(|u| u["sessionUpdate"] == "user_message_chunk")
            .count(),
        0
    );
    // The session goes on.
    assert_eq!(c.prompt(&sid, "hi").await, end_turn());
    assert_eq!(text_of(&c.updates(&sid), "agent_message_chunk"), "answered");
    assert_eq!(mock.requests().len(), 1);
}

/// `session/cancel` sent as a request (with an id): the answer is -32600 saying it is a
/// notification, and the run is cancelled all the same (its prompt answers `cancelled`).
#[tokio::test]
async fn session_cancel_sent_as_a_request_is_answered_and_still_cancels() {
    let Scene {
        mock: _mock,
        s: _s,
        mut c,
        sid,
    } = scene(
        "acp-cancel-request",
        vec![Step::Hang("Thinking".into())],
        allow("allow_once"),
    )
    .await;
    let prompt = c.send_prompt(&sid, "think");
    wait_text(&c, &sid, "Thinking").await;
    let cancel = c.send("session/cancel", json!({"sessionId": sid}));
    assert_eq!(
        c.response(cancel).await["error"],
        json!({
            "code": -32600,
            "message": "invalid request: session/cancel is a notification (send it without an id); the session's run was cancelled",
            "data": {"method": "session/cancel", "sessionId": sid, "cancelled": true}
        })
    );
    assert_eq!(
        c.response(prompt).await["result"],
        json!({"stopReason": "cancelled"})
    );
    // An unknown session: -32002, as for any request.
    let e = c.send("session/cancel", json!({"sessionId": "nope"}));
    assert_eq!(
        c.response(e).await["error"],
        json!({"code": -32002, "message": "unknown session: nope", "data": {"sessionId": "nope"}})
    );
}

/// new → prompt with a tool call that asks → cancel a hanging turn → list → load in a new
/// process (replayed) → continue.
#[tokio::test]
async fn full_flow_new_prompt_permission_cancel_list_load_continue() {
    let mock = MockModel::start(vec![
        Step::Tools(
            Some("Let me look.".into()),
            vec![(
                "call_1".into(),
                "bash".into(),
                json!({"command": "echo hi"}),
            )],
        ),
        Step::text("It printed hi."),
        Step::Hang("Thinking about it".into()),
        Step::text("Continued."),
    ])
    .await;
    let s = setup("acp-flow", &mock);
    let asked: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
    let a = asked.clone();
    let answer: Answerer = Arc::new(move |m, p| {
        assert_eq!(m, "session/request_permission");
        a.lock().unwrap().push(p.clone());
        Ok(json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}))
    });
    let mut c = start(&s, answer).await;
    let sid = c.new_session(&s.ws).await;
    assert_eq!(c.prompt(&sid, "run it").await, end_turn());
    // The question: the call as shown, the four kinds of options.
    let q = asked.lock().unwrap()[0].clone();
    assert_eq!(q["toolCall"]["toolCallId"], "call_1");
    assert_eq!(q["toolCall"]["title"], "`echo hi`");
    assert_eq!(q["toolCall"]["kind"], "execute");
    let kinds: Vec<(String, String)> = q["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["optionId"].as_str().unwrap().into(),
                o["kind"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("allow_once", "allow_once"),
            ("allow_session", "allow_always"),
            ("reject_once", "reject_once"),
            ("reject_always", "reject_always")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let ups = c.updates(&sid);
    assert_eq!(
        text_of(&ups, "agent_message_chunk"),
        "Let me look.It printed hi."
    );
    let tool: Vec<&Value> = ups
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call" || u["sessionUpdate"] == "tool_call_update")
        .collect();
    assert_eq!(tool[0]["sessionUpdate"], "tool_call");
    assert_eq!(tool[0]["kind"], "execute");
    assert_eq!(tool[1]["status"], "in_progress");
    let last = tool.last().unwrap();
    assert_eq!(last["status"], "completed");
    assert_eq!(last["content"][0]["content"]["text"], "hi\n");

    // Cancel a turn that hangs: the prompt answers cancelled.
    let id = c.send_prompt(&sid, "think");
    wait_text(&c, &sid, "Let me look.It printed hi.Thinking about it").await;
    c.notify("session/cancel", json!({"sessionId": sid}));
    assert_eq!(
        c.response(id).await["result"],
        json!({"stopReason": "cancelled"})
    );

    // Listed for this cwd, titled by the first prompt.
    let list = c.call("session/list", json!({"cwd": s.ws})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["sessions"][0]["sessionId"], sid.as_str());
    assert_eq!(list["sessions"][0]["title"], "run it");
    assert_eq!(list["sessions"][0]["cwd"], s.ws.display().to_string());
    // Closed: the next process can take it.
    c.call("session/close", json!({"sessionId": sid})).await;
    drop(c);

    // A new process loads it: the branch replayed, then the conversation continues.
    let mut c2 = start(&s, allow("allow_once")).await;
    c2.call(
        "session/load",
        json!({"sessionId": sid, "cwd": s.ws, "mcpServers": []}),
    )
    .await;
    let replay = c2.updates(&sid);
    assert_eq!(text_of(&replay, "user_message_chunk"), "run itthink");
    assert_eq!(
        text_of(&replay, "agent_message_chunk"),
        "Let me look.It printed hi.Thinking about it"
    );
    let done: Vec<&Value> = replay
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .collect();
    assert_eq!(done[0]["status"], "completed");
    assert_eq!(c2.prompt(&sid, "go on").await, end_turn());
    assert!(text_of(&c2.updates(&sid), "agent_message_chunk").ends_with("Continued."));
    // The model saw the whole conversation.
    let last = mock.requests().last().unwrap().body.clone();
    assert!(last.to_string().contains("It printed hi."), "{last}");
    mock.assert_paired();
}

/// A prompt sent while a turn runs waits for it: the earlier answers end_turn before the
/// follow-up's first chunk.
#[tokio::test]
async fn a_prompt_while_busy_is_a_follow_up_answered_after_its_own_turn() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let Scene {
        mock: _mock,
        s: _s,
        mut c,
        sid,
    } = scene(
        "acp-followup",
        vec![
            Step::Gate(gate.clone(), Box::new(Step::text("first"))),
            Step::text("second"),
        ],
        allow("allow_once"),
    )
    .await;
    let a = c.send_prompt(&sid, "one");
    let b = c.send_prompt(&sid, "two");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    gate.notify_one();
    assert_eq!(
        c.response(b).await["result"],
        json!({"stopReason": "end_turn"})
    );
    let all = c.received.lock().unwrap().clone();
    let pos = |pred: &dyn Fn(&Value) -> bool| all.iter().position(pred).unwrap();
    let first_answer = pos(&|v| v["id"] == a);
    let chunk = |prefix: &'static str| {
        move |v: &Value| {
            v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                && v["params"]["update"]["content"]["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(prefix))
        }
    };
    let second_chunk = pos(&chunk("sec"));
    let first_chunk = pos(&chunk("fir"));
    assert!(
        first_chunk < first_answer && first_answer < second_chunk,
        "{all:#?}"
    );
    assert_eq!(
        all[first_answer]["result"],
        json!({"stopReason": "end_turn"})
    );
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Fuzzed input: a line over the limit, 10,000 requests in flight (unknown methods, wrong
/// types, lists), garbage: every request answered under its id, memory bounded, the agent
/// goes on.
#[tokio::test]
async fn fuzzed_ndjson_is_answered_and_memory_stays_bounded() {
    let mock = MockModel::start(vec![Step::text("alive")]).await;
    let s = setup("acp-fuzz", &mock);
    let mut c = start(&s, allow("allow_once")).await;
    let pid = c.child.id().unwrap();
    let before = rss_kb(pid);
    // 65 MiB of one line: skipped without being kept.
    c.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":"huge","method":"x","params":"{}"}}"#,
        "a".repeat(65 << 20)
    ));
    let r = c
        .wait_for(60, |v| {
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("longer than"))
        })
        .await;
    assert_eq!(r["error"]["code"], -32600);
    let mut ids = Vec::new();
    for i in 0..10_000 {
        let id = match i % 4 {
            0 => c.send(&format!("no/such/{i}"), json!({})),
            1 => c.send("session/prompt", json!({"sessionId": i, "prompt": "x"})),
            2 => c.send("session/list", json!({"cwd": s.ws})),
            _ => c.send(
                "session/load",
                json!({"sessionId": format!("s{i}"), "cwd": s.ws, "mcpServers": []}),
            ),
        };
        ids.push(id);
        if i % 97 == 0 {
            c.send_raw("\u{0}\u{1}garbage ✗ {{{");
        }
    }
    let last = *ids.last().unwrap();
    c.response(last).await;
    // Every request is answered, under its id.
    for _ in 0..600 {
        let n = c
            .received
            .lock()
            .unwrap()
            .iter()
            .filter(|v| {
                v["id"].as_i64().is_some_and(|i| i > 1001 && i <= last) && v.get("method").is_none()
            })
            .count();
        if n == ids.len() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let got: Vec<Value> = c
        .received
        .lock()
        .unwrap()
        .iter()
        .filter(|v| {
            v["id"].as_i64().is_some_and(|i| i > 1001 && i <= last) && v.get("method").is_none()
        })
        .cloned()
        .collect();
    assert_eq!(got.len(), ids.len());
    let code = |id: i64| got.iter().find(|v| v["id"] == id).unwrap()["error"]["code"].clone();
    assert_eq!(code(ids[0]), -32601);
    assert_eq!(code(ids[1]), -32602);
    assert_eq!(code(ids[3]), -32002);
    assert!(got.iter().find(|v| v["id"] == ids[2]).unwrap()["result"]["sessions"].is_array());
    let after = rss_kb(pid);
    assert!(
        after < before + 60_000,
        "RSS grew from {before} kB to {after} kB"
    );
    // It goes on.
    let sid = c.new_session(&s.ws).await;
    assert_eq!(c.prompt(&sid, "hi").await, end_turn());
}

/// The client vanishes mid-run (stdin closed): the run is aborted, its partial answer saved,
/// the file released, and the process exits.
#[tokio::test]
async fn a_client_that_vanishes_mid_run_aborts_and_saves() {
    let Scene {
        mock: _mock,
        s,
        mut c,
        sid,
    } = scene(
        "acp-vanish",
        vec![Step::Hang("partial answer".into())],
        allow("allow_once"),
    )
    .await;
    c.send_prompt(&sid, "go");
    wait_text(&c, &sid, "partial answer").await;
    c.close_stdin();
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), c.child.wait())
        .await
        .expect("the agent exits when its client is gone")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let lines = pi_e2e::session_lines(&s.ws);
    let last = lines.last().unwrap();
    assert_eq!(last["message"]["role"], "assistant");
    assert_eq!(last["message"]["stopReason"], "aborted");
    assert_eq!(last["message"]["content"][0]["text"], "partial answer");
    let lock: Vec<_> = std::fs::read_dir(s.ws.join(".pi/sessions"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "lock")
        })
        .collect();
    assert!(lock.is_empty(), "the file is released");
}

/// kill -9 mid-prompt: every tool result the client was told had completed is in the file.
#[tokio::test]
async fn kill_9_mid_prompt_loses_no_acknowledged_entry() {
    let Scene {
        mock: _mock,
        s,
        mut c,
        sid,
    } = scene(
        "acp-kill9",
        vec![
            Step::call("c1", "bash", json!({"command": "echo one"})),
            Step::call("c2", "bash", json!({"command": "echo two"})),
            Step::Hang("still going".into()),
        ],
        allow("allow_session"),
    )
    .await;
    c.send_prompt(&sid, "go");
    wait_text(&c, &sid, "still going").await;
    let acknowledged: Vec<String> = c
        .updates(&sid)
        .iter()
        .filter(|u| u["status"] == "completed")
        .map(|u| u["toolCallId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(acknowledged, ["c1", "c2"]);
    c.child.start_kill().unwrap();
    c.child.wait().await.unwrap();
    let lines = pi_e2e::session_lines(&s.ws);
    let results: Vec<(String, String)> = lines
        .iter()
        .filter(|l| l["message"]["role"] == "toolResult")
        .map(|l| {
            (
                l["message"]["toolCallId"].as_str().unwrap().to_string(),
                l["message"]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [("c1".into(), "one\n".into()), ("c2".into(), "two\n".into())]
    );
}

/// With `fs.readTextFile` / `fs.writeTextFile` advertised, the agent reads the editor's unsaved
/// text and its edit lands through `fs/write_text_file` (the disk is untouched).
#[tokio::test]
async fn client_fs_reads_unsaved_text_and_edits_land_in_the_editor() {
    let mock = MockModel::start(vec![
        Step::edit("e1", "a.txt", "unsaved line", "edited line"),
        Step::text("Done."),
    ])
    .await;
    let s = setup("acp-fs", &mock);
    std::fs::write(s.ws.join("a.txt"), "disk line\n").unwrap();
    let writes: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
    let w = writes.clone();
    let answer: Answerer = Arc::new(move |m, p| match m {
        "fs/read_text_file" => Ok(json!({"content": "unsaved line\n"})),
        "fs/write_text_file" => {
            w.lock().unwrap().push(p.clone());
            Ok(json!({}))
        }
        _ => Ok(json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})),
    });
    let mut c = start_caps(
        &s,
        json!({"fs": {"readTextFile": true, "writeTextFile": true}}),
        answer,
    )
    .await;
    let sid = c.new_session(&s.ws).await;
    assert_eq!(c.prompt(&sid, "edit").await, end_turn());
    let path = s.ws.join("a.txt").display().to_string();
    assert_eq!(
        *writes.lock().unwrap(),
        [json!({"sessionId": sid, "path": path, "content": "edited line\n"})]
    );
    assert_eq!(
        std::fs::read_to_string(s.ws.join("a.txt")).unwrap(),
        "disk line\n"
    );
    let done = c
        .updates(&sid)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .unwrap();
    assert_eq!(
        done["content"][0],
        json!({"type": "diff", "path": path, "oldText": "unsaved line", "newText": "edited line"})
    );
}

/// server-everything's `dist/index.js` (`$PI_MCP_EVERYTHING`, else the repo's `.mcp-ref`
/// install) when it and `node` are there.
fn everything() -> Option<std::path::PathBuf> {
    let p = std::env::var("PI_MCP_EVERYTHING")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
                "../.mcp-ref/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            )
        });
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (p.exists() && node).then_some(p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_from_session_new_start_and_their_tools_reach_the_model() {
    let Some(ev) = everything() else {
        require(
            false,
            "mcp_servers_from_session_new_start_and_their_tools_reach_the_model",
            "node + server-everything",
        );
        return;
    };
    let mock = MockModel::start(vec![
        Step::call(
            "c1",
            "mcp__everything__echo",
            json!({"message": "from acp"}),
        ),
        Step::text("Echoed."),
    ])
    .await;
    let s = setup("acp-mcp", &mock);
    let mut c = start(&s, allow("allow_once")).await;
    let r = c
        .call(
            "session/new",
            json!({"cwd": s.ws, "mcpServers": [
                {"name": "everything", "command": "node", "args": [ev], "env": []},
                {"type": "sse", "name": "old", "url": "http://127.0.0.1:9/sse", "headers": []}
            ]}),
        )
        .await;
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let rejected = &r["_meta"]["pi"]["mcpServersRejected"];
    assert_eq!(r["_meta"]["pi"]["mcpServersStarted"], json!(["everything"]));
    assert_eq!(rejected.as_array().unwrap().len(), 1, "{r:#}");
    assert_eq!(rejected[0]["name"], "old");
    let err = rejected[0]["error"].as_str().unwrap().to_string();
    assert!(err.to_lowercase().contains("sse"), "{err}");
    // The user sees the rejection too.
    let shown = text_of(&c.updates(&sid), "agent_message_chunk");
    assert_eq!(
        shown,
        format!("[pi-lsp: MCP servers from the editor not started: old: {err}]\n")
    );
    assert_eq!(c.prompt(&sid, "echo it").await, end_turn());
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    // The first request declares the tool; the second carries its result.
    assert!(
        reqs[0].body.to_string().contains("mcp__everything__echo"),
        "tool not declared"
    );
    assert!(
        reqs[1].body.to_string().contains("Echo: from acp"),
        "result not sent: {}",
        reqs[1].body
    );
    let done = c
        .updates(&sid)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .expect("a completed tool call");
    assert_eq!(done["toolCallId"], "c1");
    c.call("session/close", json!({"sessionId": sid})).await;
}

#[tokio::test]
async fn todo_changes_reach_the_client_as_plan_updates() {
    let Scene {
        mock: _mock,
        s,
        mut c,
        sid,
    } = scene(
        "acp-plan",
        vec![
            Step::call(
                "t1",
                "todo",
                json!({"action": "add", "text": "Write the parser"}),
            ),
            Step::call(
                "t2",
                "todo",
                json!({"action": "add", "text": "Test the parser"}),
            ),
            Step::text("Planned."),
        ],
        allow("allow_once"),
    )
    .await;
    assert_eq!(c.prompt(&sid, "plan it").await, end_turn());
    let want = json!({"sessionUpdate": "plan", "entries": [
        {"content": "Write the parser", "priority": "medium", "status": "in_progress"},
        {"content": "Test the parser", "priority": "medium", "status": "pending"}
    ]});
    let seen = c
        .wait_for(10, |m| {
            m["method"] == "session/update" && m["params"]["update"] == want
        })
        .await;
    assert_eq!(seen["params"]["sessionId"], sid);
    let plans: Vec<Value> = c
        .updates(&sid)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "plan")
        .collect();
    // The first add is sent on its own, the whole list each time.
    assert_eq!(
        plans[0],
        json!({"sessionUpdate": "plan", "entries": [
            {"content": "Write the parser", "priority": "medium", "status": "in_progress"}
        ]})
    );
    assert_eq!(plans.last().unwrap(), &want);
    // Loaded again, the list as it stands follows the replayed history.
    c.call("session/close", json!({"sessionId": sid})).await;
    let before = c.updates(&sid).len();
    c.call(
        "session/load",
        json!({"sessionId": sid, "cwd": s.ws, "mcpServers": []}),
    )
    .await;
    let after: Vec<Value> = c.updates(&sid)[before..]
        .iter()
        .filter(|u| u["sessionUpdate"] == "plan")
        .cloned()
        .collect();
    assert_eq!(after, vec![want]);
}

/// MCP servers that fail to start (an empty command, a binary that does not exist) are not
/// listed as started: `_meta.pi.mcpServersFailed` names them with the reason, and the user
/// is told in the session.
#[tokio::test]
async fn mcp_servers_that_fail_to_start_are_reported_not_listed_as_started() {
    let mock = MockModel::start(vec![]).await;
    let s = setup("acp-mcp-failed", &mock);
    let mut c = start(&s, allow("allow_once")).await;
    let r = c
        .call(
            "session/new",
            json!({"cwd": s.ws, "mcpServers": [
                {"name": "blank", "command": "", "args": [], "env": []},
                {"name": "missing", "command": "/nonexistent/pi-no-such-mcp-server", "args": [], "env": []}
            ]}),
        )
        .await;
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let missing = "failed to start /nonexistent/pi-no-such-mcp-server: No such file or directory (os error 2)";
    let blank = "command: empty (a stdio server needs a program to run)";
    assert_eq!(
        r["_meta"],
        json!({"pi": {
            "mcpServersStarted": [],
            "mcpServersRejected": [{"name": "blank", "index": 0, "error": blank}],
            "mcpServersFailed": [{"name": "missing", "reason": missing}]
        }})
    );
    assert_eq!(
        text_of(&c.updates(&sid), "agent_message_chunk"),
        format!("[pi-lsp: MCP servers from the editor not started: blank: {blank}; missing: {missing}]\n")
    );
}

#[tokio::test]
async fn mcp_servers_are_not_started_and_the_user_is_told_when_mcp_is_off() {
    let mock = MockModel::start(vec![]).await;
    let s = setup("acp-mcp-off", &mock);
    let agent = &s.agent;
    std::fs::write(
        agent.join("settings.json"),
        json!({"extensions": ["-builtin:mcp"]}).to_string(),
    )
    .unwrap();
    let mut c = start(&s, allow("allow_once")).await;
    let r = c
        .call(
            "session/new",
            json!({"cwd": s.ws, "mcpServers": [
                {"name": "tools", "command": "node", "args": ["server.js"], "env": []}
            ]}),
        )
        .await;
    let sid = r["sessionId"].as_str().unwrap().to_string();
    assert_eq!(
        r["_meta"],
        json!({"pi": {"mcpServersStarted": [], "mcpOff": true}})
    );
    assert_eq!(
        text_of(&c.updates(&sid), "agent_message_chunk"),
        "[pi-lsp: MCP is off (--no-mcp or \"-builtin:mcp\"); the editor's MCP servers were not started: tools]\n"
    );
}

/// The `session/update`s of `sid` whose `sessionUpdate` is `kind`.
fn of_kind(c: &AcpClient, sid: &str, kind: &str) -> Vec<Value> {
    c.updates(sid)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

/// The `currentValue` of option `id` in a `configOptions` list.
fn current(options: &Value, id: &str) -> Value {
    options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .map(|o| o["currentValue"].clone())
        .unwrap_or(Value::Null)
}

/// The `value`s option `id` of a `configOptions` list offers.
fn offered(options: &Value, id: &str) -> Vec<String> {
    options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .unwrap()["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap().to_string())
        .collect()
}

/// `session/set_config_option` with a value the option does not offer (a thinking level the
/// model lacks, an unknown model) is -32602 naming the offered values; nothing changes.
#[tokio::test]
async fn a_config_value_not_offered_is_refused_naming_the_offered_ones() {
    let mock = MockModel::start(vec![]).await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"][0]["reasoning"] = json!(true);
    let s = setup_models("acp-config-offered", &models);
    let mut c = start(&s, allow("allow_once")).await;
    let r = c
        .call("session/new", json!({"cwd": s.ws, "mcpServers": []}))
        .await;
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let options = r["configOptions"].clone();
    let levels = offered(&options, "thought_level");
    let models_offered = offered(&options, "model");
    assert!(!levels.contains(&"max".to_string()), "{levels:?}");
    let refused = |c: &mut AcpClient, config: &str, value: &str| {
        c.send(
            "session/set_config_option",
            json!({"sessionId": sid, "configId": config, "value": value}),
        )
    };
    let e = refused(&mut c, "thought_level", "max");
    assert_eq!(
        c.response(e).await["error"],
        json!({
            "code": -32602,
            "message": format!("value: \"max\" is not offered for thought_level; offered: {}", levels.join(", ")),
            "data": {"configId": "thought_level", "offered": levels}
        })
    );
    let e = refused(&mut c, "model", "nope/no-such-model");
    assert_eq!(
        c.response(e).await["error"],
        json!({
            "code": -32602,
            "message": format!("value: \"nope/no-such-model\" is not offered for model; offered: {}", models_offered.join(", ")),
            "data": {"configId": "model", "offered": models_offered}
        })
    );
    // Nothing changed, and no update went out.
    assert_eq!(
        of_kind(&c, &sid, "config_option_update"),
        Vec::<Value>::new()
    );
    // An offered value is taken.
    let r = c
        .call(
            "session/set_config_option",
            json!({"sessionId": sid, "configId": "thought_level", "value": "high"}),
        )
        .await;
    assert_eq!(current(&r["configOptions"], "thought_level"), json!("high"));
    assert_eq!(
        current(&r["configOptions"], "model"),
        current(&options, "model")
    );
}

#[tokio::test]
async fn modes_config_updates_title_and_compaction_reach_the_client() {
    let mock = MockModel::start(vec![Step::text("Hi."), Step::text("SUMMARY")]).await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"][0]["reasoning"] = json!(true);
    let s = setup_models("acp-modes", &models);
    let ws = s.ws.clone();
    // One short turn is all there is to compact: keep less than it raw, so `/compact` has
    // something older to summarise (with everything kept it refuses, as Pi 1.6 does).
    std::fs::write(
        s.agent.join("settings.json"),
        json!({"compaction": {"keepRecentTokens": 1}}).to_string(),
    )
    .unwrap();
    let mut c = start_caps(
        &s,
        json!({"session": {"compaction": {}}}),
        allow("allow_once"),
    )
    .await;
    let r = c
        .call("session/new", json!({"cwd": ws, "mcpServers": []}))
        .await;
    let sid = r["sessionId"].as_str().unwrap().to_string();
    assert_eq!(
        r["modes"],
        json!({"currentModeId": "auto-edit", "availableModes": [
            {"id": "ask", "name": "Ask", "description": "Edits and commands ask first"},
            {"id": "auto-edit", "name": "Auto-edit", "description": "Edits apply; commands ask"},
            {"id": "approve-all", "name": "Approve all", "description": "Nothing asks (commands still run in the sandbox)"},
            {"id": "plan", "name": "Plan", "description": "Read-only tools; the model writes a numbered plan"}
        ]})
    );
    assert_eq!(current(&r["configOptions"], "mode"), json!("auto-edit"));
    // Pi 1.6's default thinking level for a reasoning model.
    assert_eq!(
        current(&r["configOptions"], "thought_level"),
        json!("medium")
    );

    // session/set_mode: the mode and the option both follow.
    assert_eq!(
        c.call(
            "session/set_mode",
            json!({"sessionId": sid, "modeId": "plan"})
        )
        .await,
        json!({})
    );
    assert_eq!(
        of_kind(&c, &sid, "current_mode_update"),
        [json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"})]
    );
    let u = of_kind(&c, &sid, "config_option_update");
    assert_eq!(u.len(), 1);
    assert_eq!(current(&u[0]["configOptions"], "mode"), json!("plan"));
    let e = c.send(
        "session/set_mode",
        json!({"sessionId": sid, "modeId": "yolo"}),
    );
    assert_eq!(
        c.response(e).await["error"],
        json!({"code": -32602, "message": "modeId: unknown mode \"yolo\" (ask, auto-edit, approve-all, plan)"})
    );

    // /thinking and /model (cycling) change the options: config_option_update each time.
    let prompt = |t: &str| json!({"sessionId": sid, "prompt": [{"type": "text", "text": t}]});
    assert_eq!(
        c.call("session/prompt", prompt("/thinking high")).await,
        json!({"stopReason": "end_turn"})
    );
    let u = of_kind(&c, &sid, "config_option_update");
    assert_eq!(u.len(), 2);
    assert_eq!(
        current(&u[1]["configOptions"], "thought_level"),
        json!("high")
    );
    assert_eq!(
        c.call("session/prompt", prompt("/model")).await,
        json!({"stopReason": "end_turn"})
    );
    let u = of_kind(&c, &sid, "config_option_update");
    assert_eq!(u.len(), 3);
    assert_eq!(
        current(&u[2]["configOptions"], "model"),
        json!("mockant/mock-ant-1")
    );
    c.call("session/prompt", prompt("/model mock/mock-1")).await;
    let u = of_kind(&c, &sid, "config_option_update");
    assert_eq!(u.len(), 4);
    assert_eq!(
        current(&u[3]["configOptions"], "model"),
        json!("mock/mock-1")
    );
    // mock-ant-1 has no reasoning: the level was clamped to off on the way.
    assert_eq!(
        current(&u[3]["configOptions"], "thought_level"),
        json!("off")
    );
    // The back to auto-edit through the config option: the answer carries the options, the
    // mode change goes out as current_mode_update.
    let r = c
        .call(
            "session/set_config_option",
            json!({"sessionId": sid, "configId": "mode", "value": "auto-edit"}),
        )
        .await;
    assert_eq!(current(&r["configOptions"], "mode"), json!("auto-edit"));
    assert_eq!(
        of_kind(&c, &sid, "current_mode_update").last().unwrap(),
        &json!({"sessionUpdate": "current_mode_update", "currentModeId": "auto-edit"})
    );
    assert_eq!(of_kind(&c, &sid, "config_option_update").len(), 4);

    // A run: session_info_update with the first prompt's first line as the title.
    assert_eq!(
        c.call("session/prompt", prompt("hello there\nmore text"))
            .await,
        json!({"stopReason": "end_turn"})
    );
    let info = of_kind(&c, &sid, "session_info_update");
    assert_eq!(info.len(), 1);
    assert_eq!(info[0]["title"], "hello there");
    assert!(chrono_like(info[0]["updatedAt"].as_str().unwrap()));

    // /compact: compaction_update in_progress, then completed with the summary.
    assert_eq!(
        c.call("session/prompt", prompt("/compact")).await,
        json!({"stopReason": "end_turn"})
    );
    let comp = of_kind(&c, &sid, "compaction_update");
    assert_eq!(comp.len(), 2, "{comp:#?}");
    assert_eq!(
        comp[0],
        json!({"sessionUpdate": "compaction_update", "compactionId": "compaction-1", "status": "in_progress"})
    );
    assert_eq!(comp[1]["compactionId"], "compaction-1");
    assert_eq!(comp[1]["status"], "completed");
    // The one turn is cut inside (its prompt summarised as the split turn's context), with
    // nothing older: Pi's "No prior history." stands for the history, no request made for it.
    assert_eq!(
        comp[1]["summary"],
        json!([{"type": "text", "text": "No prior history.\n\n---\n\n**Turn Context (split turn):**\n\nSUMMARY"}])
    );
}

/// An RFC 3339 time stamp (`2026-12-05T15:20:00.123+00:00`).
fn chrono_like(s: &str) -> bool {
    s.len() >= 20 && s.as_bytes()[4] == b'-' && s.as_bytes()[10] == b'T'
}

/// A loopback OpenAI-style model of its own for the latency figure: each request is answered
/// with the headers at once and the first SSE event 30 ms later; the time that first event's
/// bytes were written is kept (one per request, in order).
async fn timed_model() -> (String, Arc<std::sync::Mutex<Vec<std::time::Instant>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let firsts: Arc<std::sync::Mutex<Vec<std::time::Instant>>> = Arc::default();
    let f = firsts.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let f = f.clone();
            tokio::spawn(async move {
                // The request: headers, then content-length bytes.
                let mut buf = Vec::new();
                let mut tmp = [0u8; 65536];
                let body_start = loop {
                    let n = sock.read(&mut tmp).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..body_start]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < body_start + len {
                    let n = sock.read(&mut tmp).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                }
                let _ = sock
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                    .await;
                let _ = sock.flush().await;
                tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                let ev = |delta: Value, finish: Value| {
                    format!(
                        "data: {}\n\n",
                        json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "mock-1",
                               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                    )
                };
                let first = ev(
                    json!({"role": "assistant", "content": "Hello"}),
                    Value::Null,
                );
                f.lock().unwrap().push(std::time::Instant::now());
                let _ = sock.write_all(first.as_bytes()).await;
                let _ = sock.flush().await;
                tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                let rest = ev(json!({"content": " world."}), Value::Null)
                    + &ev(json!({}), json!("stop"))
                    + "data: [DONE]\n\n";
                let _ = sock.write_all(rest.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (base, firsts)
}

/// Whether the binary under test is an optimised build (`PI_LSP_BIN=…/release/pi-lsp`).
fn release_binary() -> bool {
    pi_e2e::pi_lsp_bin()
        .components()
        .any(|c| c.as_os_str() == "release")
}

#[tokio::test]
async fn first_chunk_follows_the_models_first_byte_within_the_budget() {
    let (base, firsts) = timed_model().await;
    let models = json!({"providers": {"mock": {"baseUrl": base, "api": "openai-completions", "apiKey": "k",
        "compat": {"supportsDeveloperRole": false},
        "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]}}});
    let s = setup_models("acp-first-byte", &models);
    let mut c = start(&s, allow("allow_once")).await;
    let sid = c.new_session(&s.ws).await;
    let runs = 7;
    let mut gaps = Vec::new();
    for i in 0..runs {
        let from = c.received.lock().unwrap().len();
        assert_eq!(c.prompt(&sid, "hi").await, end_turn());
        let received = c.received.lock().unwrap().clone();
        let at = c.received_at.lock().unwrap().clone();
        let k = (from..received.len())
            .find(|&k| received[k]["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
            .unwrap();
        assert_eq!(
            received[k]["params"]["update"]["content"],
            json!({"type": "text", "text": "Hello"})
        );
        let sent = firsts.lock().unwrap()[i];
        gaps.push(at[k].duration_since(sent).as_secs_f64() * 1000.0);
    }
    gaps.sort_by(f64::total_cmp);
    let median = gaps[runs / 2];
    eprintln!(
        "first agent_message_chunk after the model's first SSE byte ({} build): median {median:.2} ms, min {:.2}, max {:.2} ({runs} prompts)",
        if release_binary() { "release" } else { "debug" },
        gaps[0],
        gaps[runs - 1]
    );
    // The goal (2 ms) is for the optimised build; a debug build on a shared machine gets room.
    let budget = if release_binary() { 2.0 } else { 25.0 };
    assert!(
        median <= budget,
        "median {median:.2} ms > {budget} ms: {gaps:?}"
    );
}

/// Writes a Pi v3 session in `ws` of read rounds (as bench.py's) with at least `entries`
/// entries; returns its id and the number of tool rounds.
fn big_session(ws: &std::path::Path, entries: usize) -> (String, usize) {
    use std::io::Write;
    let dir = ws.join(".pi/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let id = "0b5e5510-0000-4000-8000-000000000010";
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("big.jsonl")).unwrap());
    let ts = "2026-01-01T00:00:00.000Z";
    let text: String = "lorem ipsum dolor sit amet ".repeat(30)[..800].to_string();
    writeln!(
        f,
        "{}",
        json!({"type": "session", "version": 3, "id": id, "timestamp": ts, "cwd": ws})
    )
    .unwrap();
    let mut n = 0usize;
    let mut put = |f: &mut std::io::BufWriter<std::fs::File>, kind: &str, fields: Value| {
        let mut e = json!({"type": kind, "id": format!("{n:08x}"), "parentId": if n == 0 { Value::Null } else { json!(format!("{:08x}", n - 1)) }, "timestamp": ts});
        e.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        writeln!(f, "{e}").unwrap();
        n += 1;
    };
    let usage = json!({"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 110,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}});
    put(
        &mut f,
        "model_change",
        json!({"provider": "mock", "modelId": "mock-1"}),
    );
    put(
        &mut f,
        "message",
        json!({"message": {"role": "user", "content": [{"type": "text", "text": "go"}], "timestamp": 1}}),
    );
    // Header-less entries: model_change, the prompt, 2 per round, the answer.
    let rounds = (entries - 2) / 2;
    for k in 0..rounds {
        put(
            &mut f,
            "message",
            json!({"message": {"role": "assistant", "content": [{"type": "toolCall", "id": format!("c{k}"), "name": "read", "arguments": {"path": "small.txt"}}],
            "api": "openai-completions", "provider": "mock", "model": "mock-1", "usage": usage, "stopReason": "toolUse", "timestamp": 2}}),
        );
        put(
            &mut f,
            "message",
            json!({"message": {"role": "toolResult", "toolCallId": format!("c{k}"), "toolName": "read",
            "content": [{"type": "text", "text": text}], "isError": false, "timestamp": 3}}),
        );
    }
    put(
        &mut f,
        "message",
        json!({"message": {"role": "assistant", "content": [{"type": "text", "text": "done"}],
        "api": "openai-completions", "provider": "mock", "model": "mock-1", "usage": usage, "stopReason": "stop", "timestamp": 4}}),
    );
    f.flush().unwrap();
    (id.to_string(), rounds)
}

#[tokio::test]
async fn loading_a_10000_message_session_replays_within_the_budget() {
    let mock = MockModel::start(vec![Step::text("Continued.")]).await;
    let s = setup("acp-load-10k", &mock);
    let (sid, rounds) = big_session(&s.ws, 10_002);
    let mut times = Vec::new();
    for run in 0..3 {
        let mut c = start(&s, allow("allow_once")).await;
        let from = c.received.lock().unwrap().len();
        let t = std::time::Instant::now();
        let r = c
            .call(
                "session/load",
                json!({"sessionId": sid, "cwd": s.ws, "mcpServers": []}),
            )
            .await;
        let took = t.elapsed().as_secs_f64() * 1000.0;
        times.push(took);
        assert_eq!(current(&r["configOptions"], "model"), json!("mock/mock-1"));
        let received = c.received.lock().unwrap()[from..].to_vec();
        let kinds = |k: &str| {
            received
                .iter()
                .filter(|m| m["params"]["update"]["sessionUpdate"] == k)
                .count()
        };
        // Every message of the branch, in order, before the answer.
        assert_eq!(kinds("user_message_chunk"), 1);
        assert_eq!(kinds("tool_call"), rounds);
        assert_eq!(kinds("tool_call_update"), rounds);
        assert_eq!(kinds("agent_message_chunk"), 1);
        let replayed = [
            "user_message_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
        ];
        let last_update = received
            .iter()
            .rposition(|m| {
                replayed
                    .iter()
                    .any(|k| m["params"]["update"]["sessionUpdate"] == *k)
            })
            .unwrap();
        let answer = received
            .iter()
            .position(|m| m.get("result").is_some())
            .unwrap();
        assert!(last_update < answer);
        if run == 2 {
            // It continues.
            assert_eq!(c.prompt(&sid, "on").await, end_turn());
        }
        c.close_stdin();
        let _ = c.child.wait().await;
    }
    times.sort_by(f64::total_cmp);
    let median = times[1];
    eprintln!(
        "session/load of a {}-entry session ({} updates, {} build): median {median:.0} ms of 3 ({:.0}–{:.0})",
        2 * rounds + 3,
        2 * rounds + 2,
        if release_binary() { "release" } else { "debug" },
        times[0],
        times[2]
    );
    let budget = if release_binary() { 1000.0 } else { 8000.0 };
    assert!(median <= budget, "median {median:.0} ms > {budget} ms");
}

// ---- bash through the client's terminal (`terminal/*`, the `pi-lsp sandbox-exec` launcher).

/// The tool result message of call `id` in the workspace's one session file.
fn tool_result(ws: &Path, id: &str) -> Value {
    pi_e2e::session_lines(ws)
        .into_iter()
        .find(|l| l["message"]["role"] == "toolResult" && l["message"]["toolCallId"] == id)
        .unwrap_or_else(|| panic!("no result for {id}"))["message"]
        .clone()
}

/// The result's text, content, error flag and details (what the model gets), with the spill
/// file's path (a fresh uuid per run, in each server's own temp folder) made `pi-bash-X.log`.
fn model_view(result: &Value) -> Value {
    let re = regex_lite_spill(&result.to_string());
    let v: Value = serde_json::from_str(&re).unwrap();
    json!({"content": v["content"], "isError": v["isError"], "details": v["details"]})
}

fn regex_lite_spill(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("pi-bash-") {
        // The whole path: back to the space or quote before it.
        let start = rest[..i].rfind([' ', '"']).map_or(0, |s| s + 1);
        out.push_str(&rest[..start]);
        let tail = &rest[i..];
        let end = tail.find(".log").map_or(tail.len(), |e| e + 4);
        out.push_str("pi-bash-X.log");
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// True while a live (not zombie) process is in process group `pgid` (`/proc`).
fn group_alive(pgid: u32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        f.len() > 2 && f[0] != "Z" && f[0] != "X" && f[2] == pgid.to_string()
    })
}

/// Waits (up to 3 s) until process group `pgid` has no live member; false if it still has.
async fn group_gone(pgid: u32) -> bool {
    for _ in 0..150 {
        if !group_alive(pgid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A client with `terminal` and the agent's own environment (an editor starts its agent and
/// its terminals with the same one); `answer` answers everything but `terminal/*`.
async fn terminal_client(s: &Setup, answer: Answerer) -> (AcpClient, Terminals) {
    let terms = Terminals::new(&s.env);
    let c = start_with(s, json!({"terminal": true}), terms.answerer(answer)).await;
    (c, terms)
}

/// The methods of the `terminal/*` requests so far, repeated `terminal/output` polls folded
/// into one.
fn terminal_methods(terms: &Terminals) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (m, _) in terms.calls() {
        if out.last() != Some(&m) || m != "terminal/output" {
            out.push(m);
        }
    }
    out
}

#[tokio::test]
async fn bash_runs_in_the_clients_terminal_and_the_model_gets_the_same_result_as_here() {
    let cmd = "echo err >&2; sleep 0.2; seq 1 3000; exit 3";
    let steps = || {
        vec![
            Step::call("b1", "bash", json!({"command": cmd})),
            Step::text("Seen."),
        ]
    };
    // In the client's terminal.
    let mock = MockModel::start(steps()).await;
    let s = setup("acp-term", &mock);
    let (mut c, terms) = terminal_client(&s, allow("allow_once")).await;
    let sid = c.new_session(&s.ws).await;
    assert_eq!(c.prompt(&sid, "run it").await, end_turn());
    // Here (a client without `terminal`), the same script.
    let here = scene("acp-term-here", steps(), allow("allow_once")).await;
    let Scene {
        s: s2,
        c: mut c2,
        sid: sid2,
        mock: _m2,
    } = here;
    assert_eq!(c2.prompt(&sid2, "run it").await, end_turn());

    // The model got the same result both ways: text (Pi's 2,000-line tail, the notice, "Command
    // exited with code 3"), error flag, details; the spill files hold the same full output.
    let there = tool_result(&s.ws, "b1");
    let local = tool_result(&s2.ws, "b1");
    assert_eq!(model_view(&there), model_view(&local));
    let text = there["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("1001\n1002\n"), "{text}");
    assert!(text.ends_with("\n\nCommand exited with code 3"), "{text}");
    assert_eq!(there["details"]["exitCode"], 3);
    assert_eq!(there["details"]["truncation"]["totalLines"], 3001);
    let spill = |r: &Value| {
        std::fs::read_to_string(r["details"]["fullOutputPath"].as_str().unwrap()).unwrap()
    };
    let full = spill(&there);
    assert_eq!(full, spill(&local));
    assert!(full.starts_with("err\n1\n2\n") && full.ends_with("2999\n3000\n"));

    // The terminal: created with our launcher around the shell, followed, released.
    let calls = terms.calls();
    let (m, create) = &calls[0];
    assert_eq!(m, "terminal/create");
    assert_eq!(create["sessionId"], sid.as_str());
    assert_eq!(
        Path::new(create["command"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        pi_e2e::pi_lsp_bin().canonicalize().unwrap()
    );
    let args: Vec<&str> = create["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let ws = s.ws.canonicalize().unwrap().display().to_string();
    assert_eq!(
        args[..4],
        ["sandbox-exec", "--cwd", ws.as_str(), "--pid-file"]
    );
    assert_eq!(args[5], "--sandbox");
    let dash = args.iter().position(|a| *a == "--").unwrap();
    assert_eq!(args.last().unwrap(), &cmd);
    assert!(dash + 3 <= args.len(), "{args:?}");
    // Provider keys are removed by the launcher.
    assert!(
        args.windows(2)
            .any(|w| w == ["--unset-env", "ANTHROPIC_API_KEY"]),
        "{args:?}"
    );
    assert_eq!(create["cwd"], ws.as_str());
    assert_eq!(create["outputByteLimit"], 4 << 20);
    let env = create["env"].as_array().unwrap();
    for (k, v) in [("PAGER", "cat"), ("GIT_TERMINAL_PROMPT", "0")] {
        assert!(env.contains(&json!({"name": k, "value": v})), "{env:?}");
    }
    assert!(env.iter().any(|e| e["name"] == "TMPDIR"));
    assert!(env.contains(&json!({"name": "PI_SESSION_ID", "value": sid})));
    // create, output polls, the exit, the last output, release (the first poll may come
    // before or after wait_for_exit is sent).
    let methods = terminal_methods(&terms);
    let mut sorted = methods.clone();
    sorted.dedup();
    for m in [
        "terminal/create",
        "terminal/output",
        "terminal/wait_for_exit",
        "terminal/release",
    ] {
        assert!(sorted.contains(&m.to_string()), "{methods:?}");
    }
    let methods = terminal_methods(&terms);
    assert_eq!(methods.first().unwrap(), "terminal/create");
    assert_eq!(methods.last().unwrap(), "terminal/release");
    assert!(!methods.contains(&"terminal/kill".to_string()));
    for (_, p) in &calls[1..] {
        assert_eq!(p, &json!({"sessionId": sid, "terminalId": "term-1"}));
    }

    // The call shows the terminal (no text updates), and finishes with it.
    let ups: Vec<Value> = c
        .updates(&sid)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .collect();
    let terminal = json!([{"type": "terminal", "terminalId": "term-1"}]);
    assert_eq!(
        ups[..2],
        [
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "b1", "status": "in_progress"}),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "b1", "content": terminal}),
        ]
    );
    assert_eq!(ups.len(), 3, "{ups:#?}");
    assert_eq!(
        ups[2],
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "b1", "status": "failed",
               "content": terminal,
               "rawOutput": {"content": text, "isError": true, "details": there["details"]}})
    );
    // The launcher's group is gone with the command.
    assert!(group_gone(terms.pids()[0]).await);
}

#[tokio::test]
async fn the_launcher_applies_the_sessions_sandbox() {
    if !require(
        pi_core::sandbox::support().files.is_ok(),
        "the_launcher_applies_the_sessions_sandbox",
        "Landlock",
    ) {
        return;
    }
    let mock = MockModel::start(vec![
        Step::call(
            "b1",
            "bash",
            json!({"command": "echo hi > ../escaped.txt && echo wrote"}),
        ),
        Step::text("done"),
    ])
    .await;
    let s = setup("acp-term-sandbox", &mock);
    // Allowed to run; not allowed out of the sandbox.
    let answer: Answerer = Arc::new(|m, p| {
        assert_eq!(m, "session/request_permission");
        let id = if p["_meta"].to_string().contains("sandbox")
            || p.to_string().contains("sandbox denied")
        {
            "reject_once"
        } else {
            "allow_once"
        };
        Ok(json!({"outcome": {"outcome": "selected", "optionId": id}}))
    });
    let (mut c, terms) = terminal_client(&s, answer).await;
    let sid = c.new_session(&s.ws).await;
    assert_eq!(c.prompt(&sid, "write outside").await, end_turn());
    assert!(!s.ws.join("../escaped.txt").exists(), "the write escaped");
    let create = &terms.calls()[0].1;
    let args: Vec<&str> = create["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.windows(2)
            .any(|w| w == ["--sandbox", "workspace-write"]),
        "{args:?}"
    );
    let r = tool_result(&s.ws, "b1");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("/bin/bash: line 1: ../escaped.txt: Permission denied\n\n\nCommand exited with code 1\n\nThe sandbox (workspace-write, network on) likely caused this failure"),
        "{text}"
    );
    assert_eq!(r["isError"], true);
}

#[tokio::test]
async fn cancel_kills_the_terminal_and_its_process_group_and_releases_it() {
    let mock = MockModel::start(vec![
        Step::call(
            "b1",
            "bash",
            json!({"command": "echo started; sleep 30 & sleep 30; wait"}),
        ),
        Step::text("unused"),
    ])
    .await;
    let s = setup("acp-term-cancel", &mock);
    let (mut c, terms) = terminal_client(&s, allow("allow_once")).await;
    let sid = c.new_session(&s.ws).await;
    let id = c.send_prompt(&sid, "sleep");
    c.wait_for(20, |v| {
        v["params"]["update"]["content"][0]["type"] == "terminal"
    })
    .await;
    // The command and its background child run.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pgid = terms.pids()[0];
    assert!(group_alive(pgid));
    let t = std::time::Instant::now();
    c.notify("session/cancel", json!({"sessionId": sid}));
    assert_eq!(
        c.response(id).await["result"],
        json!({"stopReason": "cancelled"})
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // No process of the group is left.
    assert!(
        group_gone(pgid).await,
        "the process group outlived the cancel"
    );
    let methods = terminal_methods(&terms);
    assert!(
        methods.contains(&"terminal/kill".to_string()),
        "{methods:?}"
    );
    assert_eq!(methods.last().unwrap(), "terminal/release");
    let r = tool_result(&s.ws, "b1");
    assert_eq!(
        model_view(&r),
        json!({"content": [{"type": "text", "text": "started\n\n\nCommand aborted"}],
               "isError": true, "details": {"exitCode": null}})
    );
}

#[tokio::test]
async fn the_tools_timeout_stops_the_terminal_command() {
    let mock = MockModel::start(vec![
        Step::call(
            "b1",
            "bash",
            json!({"command": "echo t; sleep 30 & sleep 30", "timeout": 1}),
        ),
        Step::text("Timed out."),
    ])
    .await;
    let s = setup("acp-term-timeout", &mock);
    let (mut c, terms) = terminal_client(&s, allow("allow_once")).await;
    let sid = c.new_session(&s.ws).await;
    let t = std::time::Instant::now();
    assert_eq!(c.prompt(&sid, "wait").await, end_turn());
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert!(group_gone(terms.pids()[0]).await);
    let methods = terminal_methods(&terms);
    assert!(
        methods.contains(&"terminal/kill".to_string()),
        "{methods:?}"
    );
    assert_eq!(methods.last().unwrap(), "terminal/release");
    assert_eq!(
        model_view(&tool_result(&s.ws, "b1")),
        json!({"content": [{"type": "text", "text": "t\n\n\nCommand timed out after 1 seconds"}],
               "isError": true, "details": {"exitCode": null}})
    );
}

// ---- Secrets (issue 32 item 7, ACP).

/// Every byte of every file under `roots` (but the user's own models.json) is free of `secret`.
fn assert_no_secret(roots: &[&Path], secret: &str) {
    fn walk(p: &Path, out: &mut Vec<std::path::PathBuf>) {
        if p.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                walk(&e.unwrap().path(), out);
            }
        } else {
            out.push(p.to_path_buf());
        }
    }
    let mut files = Vec::new();
    for r in roots {
        walk(r, &mut files);
    }
    files.retain(|f| f.file_name().is_none_or(|n| n != "models.json"));
    assert!(!files.is_empty());
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{} holds {secret}",
            f.display()
        );
    }
}

/// The values that reach the agent through the ACP edge — a provider key in its environment,
/// a models.json `!command` key, what a client sends with `authenticate`, the credentials of an
/// MCP server handed over in `session/new` — reach the model server and the MCP server, and no
/// session file, log line (debug level), `session/update` or other frame on stdout, nor a
/// bash command run in the client's terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_values_reach_no_file_log_or_payload() {
    let Some(ev) = everything() else {
        require(
            false,
            "auth_values_reach_no_file_log_or_payload",
            "node + server-everything",
        );
        return;
    };
    let env_key = "sk-ant-env-secret-31415926";
    let cmd_key = "sk-acp-cmd-secret-27182818";
    let auth_value = "acp-auth-secret-16180339";
    let mcp_token = "mcp-token-secret-14142135";
    let mock = MockModel::start(vec![
        Step::call("m1", "mcp__everything__get_env", json!({})),
        Step::call(
            "b1",
            "bash",
            json!({"command": "echo \"k=$ANTHROPIC_API_KEY t=$MY_TOKEN\""}),
        ),
        Step::text("done"),
    ])
    .await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["apiKey"] = json!(format!("!printf {cmd_key}"));
    let mut s = setup_models("acp-secrets", &models);
    s.env
        .retain(|(k, _)| *k != "PI_LSP_LOG" && *k != "ANTHROPIC_API_KEY");
    s.env.push(("PI_LSP_LOG", "debug".into()));
    s.env.push(("ANTHROPIC_API_KEY", env_key.into()));
    let (mut c, _terms) = terminal_client(&s, allow("allow_session")).await;
    assert_eq!(
        c.call(
            "authenticate",
            json!({"methodId": "pi-provider-key", "_meta": {"apiKey": auth_value}})
        )
        .await,
        json!({})
    );
    let r = c
        .call(
            "session/new",
            json!({"cwd": s.ws, "mcpServers": [{"name": "everything", "command": "node",
                   "args": [ev], "env": [{"name": "MY_TOKEN", "value": mcp_token}]}]}),
        )
        .await;
    let sid = r["sessionId"].as_str().unwrap().to_string();
    assert_eq!(c.prompt(&sid, "env?").await, end_turn());
    // The key reached the model server, the token the MCP server …
    let reqs = mock.requests();
    assert_eq!(
        reqs[0].headers["authorization"].to_str().unwrap(),
        format!("Bearer {cmd_key}")
    );
    let env_result = tool_result(&s.ws, "m1")["content"].to_string();
    assert!(env_result.contains("MY_TOKEN"), "{env_result}");
    // … the command saw neither variable …
    assert_eq!(tool_result(&s.ws, "b1")["content"][0]["text"], "k= t=\n");
    c.call("session/close", json!({"sessionId": sid})).await;
    let received = serde_json::to_string(&*c.received.lock().unwrap()).unwrap();
    let stderr = c.stderr.lock().unwrap().clone();
    c.close_stdin();
    let _ = c.child.wait().await;
    // … and every frame, the log and every file written hold none of them.
    for secret in [env_key, cmd_key, auth_value, mcp_token] {
        assert!(
            !received.contains(secret),
            "a frame on stdout holds {secret}"
        );
        assert!(!stderr.contains(secret), "the log holds {secret}");
        assert_no_secret(&[&s.ws, &s.agent], secret);
    }
}

/// `session/load` and `session/resume` of a session another `pi-lsp acp` process has open:
/// after the release wait, refused with an error that says so (naming the holder's pid), no
/// fork made and no notice sent; the id stays unknown to this process (a prompt on it is
/// -32002). Once the holder closes it, the same load succeeds and the session continues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_a_session_another_process_holds_is_refused_never_forked() {
    let Scene {
        mock: _mock,
        s,
        mut c,
        sid,
    } = scene(
        "acp-held",
        vec![Step::text("first"), Step::text("second")],
        allow("allow_once"),
    )
    .await;
    assert_eq!(c.prompt(&sid, "one").await, end_turn());
    let holder = c.child.id().unwrap();
    let sessions = s.ws.join(".pi/sessions");
    let jsonl = |d: &Path| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        v.sort();
        v
    };
    let files = jsonl(&sessions);
    assert_eq!(files.len(), 1, "{files:?}");
    let file = files[0].clone();
    let before = std::fs::read(&file).unwrap();

    let mut other = start(&s, allow("allow_once")).await;
    let want = |file: &Path| {
        json!({
            "code": -32603,
            "message": format!("session {sid} is open in another process (pid {holder}); close it there, or wait for that process to exit, then load it again"),
            "data": {"sessionId": sid, "reason": "sessionHeld", "pid": holder, "path": file},
        })
    };
    for method in ["session/load", "session/resume"] {
        let t = std::time::Instant::now();
        let id = other.send(
            method,
            json!({"sessionId": sid, "cwd": s.ws, "mcpServers": []}),
        );
        let r = other.response(id).await;
        let waited = t.elapsed();
        assert_eq!(r["error"], want(&file), "{method}: {r}");
        assert!(
            waited >= Duration::from_secs(3) && waited < Duration::from_secs(10),
            "{method}: answered after {waited:?} (the release wait is 3 s)"
        );
    }
    // Nothing forked, nothing replayed or told under any id, the file untouched.
    assert_eq!(jsonl(&sessions), vec![file.clone()]);
    let updates: Vec<Value> = other
        .received
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m["method"] == "session/update")
        .cloned()
        .collect();
    assert_eq!(updates, Vec::<Value>::new());
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // The id was never answered as loaded: a prompt on it is unknown here.
    let id = other.send_prompt(&sid, "two");
    assert_eq!(
        other.response(id).await["error"],
        json!({"code": -32002, "message": format!("unknown session: {sid}"), "data": {"sessionId": sid}})
    );

    // Released by its holder: the same load succeeds at once and the session goes on.
    c.call("session/close", json!({"sessionId": sid})).await;
    let t = std::time::Instant::now();
    other
        .call(
            "session/load",
            json!({"sessionId": sid, "cwd": s.ws, "mcpServers": []}),
        )
        .await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(other.prompt(&sid, "two").await, end_turn());
    assert_eq!(
        text_of(&other.updates(&sid), "agent_message_chunk"),
        "firstsecond"
    );
    assert_eq!(jsonl(&sessions), vec![file]);
}

/// MCP servers handed to `session/new` connect side by side and the answer waits once, at
/// most Pi's 10 s startup wait from their start, not 10 s per server: two servers that never
/// answer `initialize` are `mcpServersStarting` after about 10 s. One of them failing after
/// the answer is told to the user then, in its own `agent_message_chunk`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_from_session_new_are_waited_for_together_and_late_failures_are_told() {
    let mock = MockModel::start(vec![]).await;
    let s = setup("acp-mcp-wait", &mock);
    let mut c = start(&s, allow("allow_once")).await;
    let t = std::time::Instant::now();
    let r = c
        .call(
            "session/new",
            json!({"cwd": s.ws, "mcpServers": [
                {"name": "silent", "command": "sleep", "args": ["60"], "env": []},
                {"name": "dies", "command": "sh", "args": ["-c", "sleep 12; echo gone >&2; exit 3"], "env": []}
            ]}),
        )
        .await;
    let waited = t.elapsed();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    assert_eq!(
        r["_meta"],
        json!({"pi": {
            "mcpServersStarted": [],
            "mcpServersRejected": [],
            "mcpServersFailed": [],
            "mcpServersStarting": ["silent", "dies"]
        }})
    );
    assert!(
        waited >= Duration::from_millis(9500) && waited < Duration::from_secs(15),
        "session/new answered after {waited:?} (one 10 s wait for both)"
    );
    assert_eq!(text_of(&c.updates(&sid), "agent_message_chunk"), "");
    let told = c
        .wait_for(20, |m| {
            m["method"] == "session/update"
                && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .await;
    let text = told["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.starts_with("[pi-lsp: MCP servers from the editor not started: dies: ")
            && text.ends_with("]\n")
            && !text.contains("silent"),
        "{text}"
    );
    eprintln!("late failure told: {text}");
    c.call("session/close", json!({"sessionId": sid})).await;
}

/// The shape of one `session/update` that does not change between runs: its kind, the call it
/// is about, its status and the kinds of its content; a chunk's text.
fn update_shape(u: &Value) -> Value {
    let kind = u["sessionUpdate"].as_str().unwrap_or_default();
    match kind {
        "agent_message_chunk" | "agent_thought_chunk" => {
            json!({"sessionUpdate": kind, "text": u["content"]["text"]})
        }
        "tool_call" | "tool_call_update" => {
            let content: Vec<Value> = u["content"]
                .as_array()
                .map(|c| c.iter().map(|c| c["type"].clone()).collect())
                .unwrap_or_default();
            json!({"sessionUpdate": kind, "toolCallId": u["toolCallId"], "status": u["status"], "content": content})
        }
        "session_info_update" => json!({"sessionUpdate": kind, "title": u["title"]}),
        _ => json!({"sessionUpdate": kind}),
    }
}

/// The `session/update`s of `sid` in `wire` (messages in the order read) as [`update_shape`]s,
/// consecutive chunks of one kind joined into one and repeated shapes folded (a command's
/// streamed output may come in one update or several).
fn folded(wire: &[Value], sid: &str) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for m in wire {
        if m["method"] != "session/update" || m["params"]["sessionId"] != sid {
            continue;
        }
        let shape = update_shape(&m["params"]["update"]);
        match out.last_mut() {
            Some(last)
                if last.get("text").is_some()
                    && last["sessionUpdate"] == shape["sessionUpdate"] =>
            {
                let joined = format!(
                    "{}{}",
                    last["text"].as_str().unwrap(),
                    shape["text"].as_str().unwrap()
                );
                last["text"] = json!(joined);
            }
            Some(last) if *last == shape => {}
            _ => out.push(shape),
        }
    }
    out
}

/// ACP's prompt turn: every `session/update` of a prompt is written before its response,
/// whatever task emits it. Read off the raw wire (the lines in the order the agent wrote them)
/// over many prompts, each a tool round (text, then a bash call, run here or in the client's
/// terminal) and a final answer streamed as many small deltas that the agent coalesces (its
/// last chunk often still waiting for the coalescing timer when the message ends): each
/// prompt's updates all come between the previous response and its own, complete, and nothing
/// of the session comes after the last response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_update_of_a_prompt_is_written_before_its_response() {
    const RUNS: usize = 12;
    let answer_text = "The command printed what it was asked to print; nothing else.";
    // Run i: a tool round, then the answer in deltas of 1–3 characters, 0–20 ms apart.
    let steps = || {
        let mut steps = Vec::new();
        for i in 0..RUNS {
            steps.push(Step::Answer(pi_e2e::mock_model::Answer {
                text: Some(format!("Look {i}.")),
                chunk: 2,
                tool_calls: vec![pi_e2e::mock_model::AnswerCall {
                    id: Some(format!("call_{i}")),
                    name: "bash".into(),
                    arguments: json!({"command": format!("echo run {i}")}),
                }],
                ..Default::default()
            }));
            let (chunk, delay) = [(1, 0), (2, 2), (3, 20)][i % 3];
            steps.push(Step::Answer(pi_e2e::mock_model::Answer {
                text: Some(answer_text.into()),
                chunk,
                chunk_delay: Duration::from_millis(delay),
                ..Default::default()
            }));
        }
        steps
    };
    for terminal in [false, true] {
        let mock = MockModel::start(steps()).await;
        let s = setup(
            if terminal {
                "acp-order-term"
            } else {
                "acp-order"
            },
            &mock,
        );
        let (mut c, _terms) = if terminal {
            let (c, t) = terminal_client(&s, allow("allow_once")).await;
            (c, Some(t))
        } else {
            (start(&s, allow("allow_once")).await, None)
        };
        let sid = c.new_session(&s.ws).await;
        // The session's commands come after `session/new`'s response, before any prompt.
        c.wait_for(10, |m| {
            m["params"]["update"]["sessionUpdate"] == "available_commands_update"
        })
        .await;
        let mut from = c.received.lock().unwrap().len();
        for i in 0..RUNS {
            let id = c.send_prompt(&sid, &format!("run {i}"));
            assert_eq!(c.response(id).await["result"], end_turn());
            let wire = c.received.lock().unwrap().clone();
            let at = wire
                .iter()
                .position(|m| m["id"] == id && m.get("method").is_none())
                .unwrap();
            let call = format!("call_{i}");
            let output = if terminal { "terminal" } else { "content" };
            let mut want = vec![
                json!({"sessionUpdate": "agent_message_chunk", "text": format!("Look {i}.")}),
                json!({"sessionUpdate": "tool_call", "toolCallId": call, "status": null, "content": []}),
                json!({"sessionUpdate": "usage_update"}),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "in_progress", "content": []}),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": null, "content": [output]}),
                json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "completed", "content": [output]}),
                json!({"sessionUpdate": "agent_message_chunk", "text": answer_text}),
                json!({"sessionUpdate": "usage_update"}),
                json!({"sessionUpdate": "session_info_update", "title": "run 0"}),
            ];
            let mut got = folded(&wire[from..at], &sid);
            if !terminal {
                // Here, a quick command's output may be streamed before it ends or not: the
                // finished call carries it either way.
                want.remove(4);
                got.retain(|u| {
                    !(u["sessionUpdate"] == "tool_call_update" && u["status"].is_null())
                });
            }
            assert_eq!(
                got,
                want,
                "prompt {i} (terminal: {terminal}): {:#?}",
                &wire[from..]
            );
            from = at + 1;
        }
        // Nothing of the session after its last response.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let wire = c.received.lock().unwrap().clone();
        assert_eq!(
            folded(&wire[from..], &sid),
            Vec::<Value>::new(),
            "terminal: {terminal}"
        );
        mock.assert_paired();
    }
}

/// A failed request sent again: ACP has no retry update, so the client reads it in the agent's
/// message in the `pi-acp` bridge's words ("Retrying (attempt N/M, waiting Ss)..."), its own
/// paragraph before the answer; after the last attempt fails, the error. A success adds
/// nothing after the answer (`pi-acp` says "Retry finished, resuming." there).
#[tokio::test]
async fn retries_reach_the_client_in_the_agents_message_as_pi_acp_words_them() {
    let fail = || Step::Raw {
        status: 503,
        content_type: "application/json".into(),
        body: r#"{"error":{"message":"overloaded"}}"#.into(),
    };
    let mock = MockModel::start(vec![fail(), Step::text("Back."), fail(), fail()]).await;
    let s = setup("acp-retry", &mock);
    std::fs::write(
        s.agent.join("settings.json"),
        json!({"retry": {"enabled": true, "maxRetries": 1, "baseDelayMs": 20}}).to_string(),
    )
    .unwrap();
    let mut c = start(&s, allow("allow_once")).await;
    let sid = c.new_session(&s.ws).await;
    assert_eq!(c.prompt(&sid, "hello").await, end_turn());
    assert_eq!(
        text_of(&c.updates(&sid), "agent_message_chunk"),
        "Retrying (attempt 1/1, waiting 1s)...\n\nBack."
    );
    let before = c.updates(&sid).len();
    let id = c.send(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]}),
    );
    let r = c.response(id).await;
    let err = r["error"]["message"].as_str().unwrap().to_string();
    assert!(err.contains("overloaded"), "{r}");
    assert_eq!(
        text_of(&c.updates(&sid)[before..], "agent_message_chunk"),
        format!("Retrying (attempt 1/1, waiting 1s)...\n\nRetries stopped: {err}\n\n")
    );
    assert_eq!(mock.requests().len(), 4);
}

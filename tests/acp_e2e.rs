//! `pi-lsp acp` end to end: the real binary over stdio (our own NDJSON client,
//! `support/acp_client.rs`) against the loopback scripted model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use pi_e2e::acp_client::{allow, AcpClient, Answerer};
use pi_e2e::lsp_client::agent_env;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

struct Setup {
    _tmp: TempDir,
    ws: std::path::PathBuf,
    env: Vec<(&'static str, String)>,
}

fn setup(name: &str, mock: &MockModel) -> Setup {
    let tmp = TempDir::new(name);
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let env = agent_env(
        &tmp.path().join("agent"),
        &mock.models_json(),
        &[("PI_LSP_LOG", "warn")],
    );
    Setup { _tmp: tmp, ws, env }
}

async fn start(s: &Setup, answer: Answerer) -> AcpClient {
    let mut c = AcpClient::start(&s.ws, &s.env, &["--model", "mock/mock-1"], answer);
    c.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    c
}

/// Concatenated text of the `kind` chunks (`agent_message_chunk`, …) in `updates`.
fn text_of(updates: &[Value], kind: &str) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .map(|u| u["content"]["text"].as_str().unwrap_or_default())
        .collect()
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
                "mcpCapabilities": {"http": false, "sse": false},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}, "additionalDirectories": {}}
            },
            "authMethods": [],
            "agentInfo": {"name": "pi-lsp", "title": "Pi (pi-lsp)", "version": env!("CARGO_PKG_VERSION")},
            "_meta": {"steering": {"supported": true}}
        })
    );
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
    // The agent goes on.
    let id = c
        .call("session/new", json!({"cwd": s.ws, "mcpServers": []}))
        .await["sessionId"]
        .clone();
    let r = c
        .call(
            "session/prompt",
            json!({"sessionId": id, "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
    assert_eq!(r, json!({"stopReason": "end_turn"}));
    assert_eq!(
        text_of(&c.updates(id.as_str().unwrap()), "agent_message_chunk"),
        "still here"
    );
}

//! `agent/continue` (docs/protocol.md): *Retry* after a failed run and *Continue* after an
//! interrupted one resend without a second user message; and model-server connection errors
//! in words ("the model server refused the connection at 127.0.0.1:PORT", never `os error`).
//! Real `pi-lsp` over stdio, the loopback scripted model, a closed loopback port.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use pi_e2e::lsp_client::{agent_env, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, session_lines, TempDir};
use serde_json::{json, Value};

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The user messages and the assistant messages' `(stopReason, text)` stored in the file.
fn stored(ws: &Path) -> (Vec<String>, Vec<(String, String)>) {
    let lines = session_lines(ws);
    let msgs: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "message")
        .map(|l| &l["message"])
        .collect();
    let text = |m: &Value| -> String {
        match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(a) => a.iter().filter_map(|b| b["text"].as_str()).collect(),
            _ => String::new(),
        }
    };
    let users = msgs
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| text(m))
        .collect();
    let replies = msgs
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| (m["stopReason"].as_str().unwrap_or("").to_string(), text(m)))
        .collect();
    (users, replies)
}

fn env_with_dead_provider(
    tmp: &TempDir,
    mock: &MockModel,
    port: u16,
) -> Vec<(&'static str, String)> {
    let mut models = mock.models_json();
    models["providers"]["dead"] = json!({"baseUrl": format!("http://127.0.0.1:{port}/v1"),
        "api": "openai-completions", "apiKey": "test-key",
        "models": [{"id": "dead-1", "contextWindow": 128000, "maxTokens": 4096}]});
    let agent = tmp.path().join("agent");
    let env = agent_env(&agent, &models, &[]);
    // No automatic retries: the failure ends the run at once.
    std::fs::write(
        agent.join("settings.json"),
        json!({"retry": {"enabled": false}}).to_string(),
    )
    .unwrap();
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connection_in_words_then_continue_sends_the_prompt_once() {
    let mock = MockModel::start(vec![Step::text("recovered")]).await;
    let tmp = TempDir::new("continue-refused");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let port = closed_port();
    let env = env_with_dead_provider(&tmp, &mock, port);
    let mut c = LspClient::start(&pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;

    let r = c
        .request(
            "agent/prompt",
            json!({"text": "fix the bug", "model": "dead/dead-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let events = c.run_until_end(Duration::from_secs(30)).await;
    let end = events.last().unwrap();
    let failed = end["event"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .unwrap()
        .clone();
    assert_eq!(failed["stopReason"], "error");
    let err = failed["errorMessage"].as_str().unwrap();
    assert_eq!(
        err,
        format!(
            "the model server refused the connection at 127.0.0.1:{port} (is it running?) — request to http://127.0.0.1:{port}/v1/chat/completions failed"
        )
    );

    // Retry on a model that answers: the prompt is sent again once, and stored once.
    c.request(
        "agent/model/set",
        json!({"sessionId": sid, "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let r = c
        .request("agent/continue", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(r["sessionId"], sid.as_str());
    assert!(!r["runId"].as_str().unwrap().is_empty());
    c.run_until_end(Duration::from_secs(30)).await;
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    let sent: Vec<&Value> = reqs[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (users, replies) = stored(&ws);
    assert_eq!(users, vec!["fix the bug".to_string()]);
    assert_eq!(
        replies,
        vec![
            ("error".to_string(), String::new()),
            ("stop".to_string(), "recovered".to_string())
        ]
    );

    // Nothing left to continue: the last reply completed.
    let e = c
        .request("agent/continue", json!({"sessionId": sid}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    assert_eq!(
        e["message"],
        "sessionId: nothing to continue: the last reply completed; send a prompt"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_after_reload_resumes_an_interrupted_run() {
    let mock = MockModel::start(vec![
        Step::Hang("half an ans".into()),
        Step::text("whole answer"),
    ])
    .await;
    let tmp = TempDir::new("continue-reload");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let env = env_with_dead_provider(&tmp, &mock, closed_port());
    let mut c = LspClient::start(&pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "write it", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    // The answer streams, then the server goes away mid-run.
    loop {
        let n = c.next_notification(Duration::from_secs(20)).await.unwrap();
        let t = &n["params"]["event"]["type"];
        if n["method"] == "agent/delta" || t == "message_update" {
            break;
        }
    }
    c.signal(9);
    c.wait_exit(Duration::from_secs(5)).await.unwrap();
    let (users, replies) = stored(&ws);
    assert_eq!(users, vec!["write it".to_string()]);
    assert_eq!(replies, Vec::<(String, String)>::new());

    // Reload: a new server, the session opened by id, Continue.
    let mut c = LspClient::start(&pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
    let r = c
        .request("agent/continue", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(r["sessionId"], sid.as_str());
    c.run_until_end(Duration::from_secs(30)).await;
    let (users, replies) = stored(&ws);
    assert_eq!(users, vec!["write it".to_string()]);
    assert_eq!(
        replies,
        vec![("stop".to_string(), "whole answer".to_string())]
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body["messages"], reqs[1].body["messages"]);
    c.shutdown().await;
}

//! A tool round over the `openai-responses` wire against the loopback model's
//! `POST /v1/responses`: the call streamed as a `function_call` item is run, its result goes
//! back as the `function_call_output` of the same `call_id` right after the call, and the
//! answer after it ends the run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use pi_ai::{ContentBlock, Message, StopReason, TextContent};
use pi_core::agent::{Agent, AgentConfig};
use pi_core::fs::DiskFs;
use pi_core::tools::default_tools;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

#[tokio::test]
async fn a_tool_round_over_openai_responses_pairs_the_call_with_its_output() {
    let dir = TempDir::new("responses-wire");
    std::fs::write(dir.join("note.txt"), "alpha\nbeta\n").unwrap();
    let mock = MockModel::start(vec![
        Step::Tools(
            Some("Reading it.".into()),
            vec![("call_r1".into(), "read".into(), json!({"path": "note.txt"}))],
        ),
        Step::text("It holds alpha and beta."),
    ])
    .await;
    let tools = default_tools(Arc::new(DiskFs::new(dir.to_path_buf())), None);
    let mut cfg = AgentConfig::new(
        mock.responses_model(128_000, 4_096),
        "You are a coding agent.".into(),
        tools,
    );
    cfg.retry.enabled = false;
    let agent = Agent::new(cfg, Vec::new());
    agent
        .prompt(vec![Message::user_text("what is in note.txt?")])
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), agent.wait_for_idle())
        .await
        .expect("the agent did not become idle");
    mock.assert_paired();

    let requests = mock.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/v1/responses", "/v1/responses"]);
    // The second request carries the call and its output, in that order, after the prompt.
    let input = requests[1].body["input"].as_array().unwrap();
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().or(i["role"].as_str()).unwrap_or("?"))
        .collect();
    let call_at = kinds.iter().position(|k| *k == "function_call").unwrap();
    assert_eq!(kinds[call_at + 1], "function_call_output", "{kinds:?}");
    let call = &input[call_at];
    assert_eq!(
        (
            call["call_id"].as_str(),
            call["name"].as_str(),
            serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap()
        ),
        (Some("call_r1"), Some("read"), json!({"path": "note.txt"}))
    );
    let output = &input[call_at + 1];
    assert_eq!(output["call_id"], "call_r1");
    assert_eq!(output["output"], "alpha\nbeta\n");

    let messages = agent.messages();
    let last = messages.last().unwrap();
    let Message::Assistant(answer) = last else {
        panic!("the run ends with an answer: {last:?}");
    };
    assert_eq!(answer.stop_reason, StopReason::Stop);
    // The text keeps its output item's id as its signature (Pi's `textSignature`), so the
    // next request can send the item back as the provider gave it.
    assert_eq!(
        answer.content,
        vec![ContentBlock::Text(TextContent {
            text: "It holds alpha and beta.".into(),
            text_signature: Some(r#"{"v":1,"id":"msg_mock2"}"#.into()),
        })]
    );
}

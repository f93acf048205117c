//! The output budget of every request of a run (case 18.10, issue 29 item 11) over loopback
//! HTTP: the loop sums the messages' character estimates once and adds the appended ones from
//! request to request; a hook's change to earlier messages makes it count them again, and
//! makes the request cache compare the history again instead of taking it as sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pi_ai::{Message, ToolSpec};
use pi_core::agent::{Agent, AgentConfig, AgentHooks, NextTurn};
use pi_core::compaction::request_tokens;
use pi_core::fs::DiskFs;
use pi_core::tools::default_tools;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

const WINDOW: u64 = 9_000;
const MAX_TOKENS: u64 = 4_096;
const SYSTEM_PROMPT: &str = "You are a coding agent.";
/// The text the hook puts in place of the first prompt before the request it changes.
const LONGER: &str = "read big.txt again and again, and say what it holds; ";

/// Before each request: on the request `change_at` (counted from 0), the first user message
/// is made longer through [`NextTurn::messages_mut`]; then the output limit the request must
/// carry is worked out from the context as it goes, counted whole (Pi's rule: the larger of
/// the usage-anchored figure and `ceil(chars / 4)` of everything sent).
struct Expect {
    specs: Vec<ToolSpec>,
    change_at: usize,
    limits: Mutex<Vec<u64>>,
}

#[async_trait]
impl AgentHooks for Expect {
    async fn prepare_next_turn(&self, next: &mut NextTurn) {
        let n = self.limits.lock().unwrap().len();
        if n == self.change_at {
            let first = next
                .messages_mut()
                .iter_mut()
                .find(|m| matches!(m, Message::User(_)))
                .unwrap();
            *first = Message::user_text(LONGER.repeat(40));
        }
        let m = next.messages();
        let tokens = request_tokens(&next.system_prompt, &self.specs, m, usize::MAX)
            .max(request_tokens(&next.system_prompt, &self.specs, m, 0));
        let limit = MAX_TOKENS.min(WINDOW.saturating_sub(tokens));
        self.limits.lock().unwrap().push(limit);
    }
}

fn user_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<String>(),
        _ => String::new(),
    }
}

#[tokio::test]
async fn every_request_s_output_limit_is_the_whole_context_s_estimate_also_after_a_hook_changed_it()
{
    let dir = TempDir::new("output-budget");
    // About 1,000 tokens a read: from the fifth request on, the window leaves less than the
    // model's 4,096 for the answer.
    std::fs::write(dir.join("big.txt"), "0123456789abcdef\n".repeat(240)).unwrap();
    let mut script: Vec<Step> = (1..=6)
        .map(|i| Step::call(&format!("call_{i}"), "read", json!({"path": "big.txt"})))
        .collect();
    script.push(Step::text("done"));
    let mock = MockModel::start_with_delay(script, Duration::ZERO).await;

    let model = mock.completions_model(WINDOW, MAX_TOKENS);
    let tools = default_tools(Arc::new(DiskFs::new(dir.to_path_buf())), None);
    let hook = Arc::new(Expect {
        specs: tools.iter().map(|t| t.spec()).collect(),
        change_at: 4,
        limits: Mutex::new(Vec::new()),
    });
    let mut cfg = AgentConfig::new(model, SYSTEM_PROMPT.into(), tools);
    cfg.retry.enabled = false;
    cfg.hooks = Some(hook.clone());
    let agent = Agent::new(cfg, Vec::new());
    agent
        .prompt(vec![Message::user_text("read big.txt six times")])
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), agent.wait_for_idle())
        .await
        .expect("the agent did not become idle");
    mock.assert_paired();

    let requests = mock.requests();
    assert_eq!(requests.len(), 7, "six reads and the answer");
    let sent: Vec<u64> = requests
        .iter()
        .map(|r| r.body["max_completion_tokens"].as_u64().unwrap())
        .collect();
    let expected = hook.limits.lock().unwrap().clone();
    assert_eq!(sent, expected);
    // The budget did bind (the check above would hold with any count while every request
    // asked for the model's 4,096) from the request the hook changed the context for on.
    assert!(
        expected[4..].iter().all(|l| *l < MAX_TOKENS),
        "{expected:?}"
    );
    // Every request carries the context as it was then: the prompt as typed before request 4,
    // the changed one from there on (the request cache did not take the old one as sent).
    let firsts: Vec<String> = requests
        .iter()
        .map(|r| {
            let m = r.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["role"] == "user")
                .unwrap();
            user_text(m)
        })
        .collect();
    let mut want = vec!["read big.txt six times".to_string(); 4];
    want.extend(vec![LONGER.repeat(40); 3]);
    assert_eq!(firsts, want);
}

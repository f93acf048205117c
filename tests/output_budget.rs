//! The output budget of every request of a run (case 18.10, issue 29 item 11) over loopback
//! HTTP: each request asks for what Pi 1.6's `clampMaxTokensToContext` leaves (pi-ai
//! `simple-options.js`: the window less Pi's estimate of the input and a margin of
//! max(4,096, 15 % of it)); a hook's change to earlier messages is counted, and makes the
//! request cache compare the history again instead of taking it as sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pi_ai::{Message, ToolSpec};
use pi_core::agent::{Agent, AgentConfig, AgentHooks, NextTurn};
use pi_core::fs::DiskFs;
use pi_core::tools::default_tools;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{content_text, TempDir};
use serde_json::{json, Value};

const WINDOW: u64 = 9_000;
const MAX_TOKENS: u64 = 4_096;
const SYSTEM_PROMPT: &str = "You are a coding agent.";
/// The text the hook puts in place of the first prompt before the request it changes.
const LONGER: &str = "read big.txt again and again, and say what it holds; ";

/// Before each request: on the request `change_at` (counted from 0), the first user message
/// is made longer through [`NextTurn::messages_mut`]; then the output limit the request must
/// carry is worked out from the context as it goes, as Pi 1.6 works it out.
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
        let input = pi_estimate(&next.system_prompt, &self.specs, next.messages());
        self.limits
            .lock()
            .unwrap()
            .push(MAX_TOKENS.min(limit(WINDOW, input)));
    }
}

/// `Math.ceil(text.length / 3.5)` (pi-ai 1.6 `estimateTextTokens`).
fn tokens(chars: usize) -> u64 {
    (chars as f64 / 3.5).ceil() as u64
}

/// pi-ai 1.6's `estimateContextTokens` over Pi's context: the leading system message (the
/// prompt and `JSON.stringify(toolsAdded)`, the four built-ins declared with
/// `constrainedSampling`), then the messages; anchored on the latest assistant usage that no
/// earlier message postdates.
fn pi_estimate(system: &str, specs: &[ToolSpec], messages: &[Message]) -> u64 {
    let one = |m: &Message| -> u64 {
        let v = serde_json::to_value(m).unwrap();
        let chars: usize = match &v["content"] {
            Value::String(s) => s.encode_utf16().count(),
            Value::Array(blocks) => blocks
                .iter()
                .map(|b| match b["type"].as_str().unwrap() {
                    "text" => b["text"].as_str().unwrap().encode_utf16().count(),
                    "thinking" => b["thinking"].as_str().unwrap().encode_utf16().count(),
                    "toolCall" => {
                        b["name"].as_str().unwrap().len() + b["arguments"].to_string().len()
                    }
                    _ => 4800,
                })
                .sum(),
            _ => 0,
        };
        tokens(chars)
    };
    // `getLastAssistantUsageInfo`: an answer's usage counts only while no message before it
    // is newer (the hook's changed prompt is: from then on everything is estimated).
    let mut latest = i64::MIN;
    let mut anchor = None;
    for (i, m) in messages.iter().enumerate() {
        let v = serde_json::to_value(m).unwrap();
        if let Message::Assistant(a) = m {
            if a.timestamp >= latest && a.usage.total_tokens > 0 {
                anchor = Some((i, a.usage.total_tokens));
            }
        }
        latest = latest.max(v["timestamp"].as_i64().unwrap());
    }
    match anchor {
        Some((i, total)) => total + messages[i + 1..].iter().map(one).sum::<u64>(),
        None => {
            let declared: Vec<Value> = specs
                .iter()
                .map(|t| {
                    let mut d = json!({"name": t.name, "description": t.description, "parameters": t.parameters});
                    if ["read", "bash", "edit", "write"].contains(&t.name.as_str()) {
                        d["constrainedSampling"] = json!({"type": "json_schema", "strict": "prefer"});
                    }
                    d
                })
                .collect();
            tokens(system.len())
                + tokens(Value::Array(declared).to_string().len())
                + messages.iter().map(one).sum::<u64>()
        }
    }
}

/// pi-lsp's output limit: [`pi_clamp`] while it is at least the floor of 1,024; below it
/// 1,024 while the window holds them beside the input (Pi 1.6 asks what its margin leaves).
fn limit(window: u64, input: u64) -> u64 {
    let clamp = pi_clamp(window, input);
    if clamp >= 1_024 || window.saturating_sub(input) < 1_024 {
        clamp
    } else {
        1_024
    }
}

/// pi-ai 1.6's `clampMaxTokensToContext` room, written from `simple-options.js`.
fn pi_clamp(window: u64, input: u64) -> u64 {
    let (window, input) = (window as f64, input as f64);
    let margin = 4096f64.max((input * 0.15).ceil());
    let mut room = window - input - margin;
    if room < 32768.0 {
        room = 32768f64.min(window - input - 4096.0);
    }
    room.max(1.0) as u64
}

#[tokio::test]
async fn every_request_s_output_limit_is_pi_1_6_s_clamp_or_the_floor_also_after_a_hook_changed_it()
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
    // asked for the model's 4,096), and the hook's newer prompt put aside the usage of the
    // answers before it: request 4 estimates its whole context, which leaves Pi's clamp 1
    // token and the window room for the floor: it asks 1,024.
    assert!(expected.iter().all(|l| *l < MAX_TOKENS), "{expected:?}");
    assert_eq!(expected[4], 1_024, "{expected:?}");
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
            content_text(m)
        })
        .collect();
    let mut want = vec!["read big.txt six times".to_string(); 4];
    want.extend(vec![LONGER.repeat(40); 3]);
    assert_eq!(firsts, want);
}

/// Issue 29 (d): the output limit and the window guard read the same figures. On a
/// 9,000-token window, with a last answer reporting `usage` tokens and a prompt "next" (2 more
/// tokens by Pi 1.6's estimate, 1 by characters / 4): Pi 1.6's clamp (9,000 − input − 4,096)
/// while it is at least the floor of 1,024 (3,878: exactly 1,024); below it the floor as long
/// as the window holds it beside the input (3,879, where Pi asks 1,023; 5,000 and 7,975, where
/// Pi asks 1; 9,000 − 7,976 = 1,024 left); no request once not even the floor fits (7,976),
/// the run failing with the figures. (Pi 1.6 sends the last with 1; refusing it is pi-lsp's
/// choice, in the changelog.)
#[tokio::test]
async fn the_window_guard_refuses_exactly_when_the_floor_does_not_fit() {
    for (usage, sent, pi) in [
        (3_878u64, Some(1_024u64), 1_024),
        (3_879, Some(1_024), 1_023),
        (5_000, Some(1_024), 1),
        (7_975, Some(1_024), 1),
        (7_976, None, 1),
    ] {
        let mock = MockModel::start(vec![Step::text("fine")]).await;
        let model = mock.completions_model(WINDOW, MAX_TOKENS);
        let mut cfg = AgentConfig::new(model, SYSTEM_PROMPT.into(), Vec::new());
        cfg.retry.enabled = false;
        let before: Message = serde_json::from_value(json!({
            "role": "assistant",
            "content": [{"type": "text", "text": "earlier answer"}],
            "api": "openai-completions", "provider": "mock", "model": "mock-1",
            "usage": {"input": usage - 10, "output": 10, "cacheRead": 0, "cacheWrite": 0,
                      "totalTokens": usage,
                      "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
            "stopReason": "stop",
            "timestamp": 2
        }))
        .unwrap();
        let mut question = Message::user_text("earlier question");
        if let Message::User(u) = &mut question {
            u.timestamp = 1;
        }
        let history = vec![question, before];
        let agent = Agent::new(cfg, history);
        // "next": ceil(4 / 3.5) = 2 tokens after the anchor.
        agent.prompt(vec![Message::user_text("next")]).unwrap();
        tokio::time::timeout(Duration::from_secs(30), agent.wait_for_idle())
            .await
            .expect("the agent did not become idle");
        let limits: Vec<u64> = mock
            .requests()
            .iter()
            .map(|r| r.body["max_completion_tokens"].as_u64().unwrap())
            .collect();
        assert_eq!(
            limits,
            sent.into_iter().collect::<Vec<_>>(),
            "usage {usage}"
        );
        assert_eq!(
            pi_clamp(WINDOW, usage + 2),
            pi,
            "usage {usage}: Pi 1.6's limit"
        );
        let error = agent.last_outcome().unwrap().error_message;
        match sent {
            Some(_) => assert_eq!(error, None),
            None => assert_eq!(
                error.as_deref(),
                Some(format!("The context (estimated at {} tokens) leaves room for 1023 output tokens in the model's 9000-token window, less than the 1024 tokens a response needs. Compact the session, start a new one, or switch to a model with a larger context window.", usage + 1).as_str())
            ),
        }
    }
}

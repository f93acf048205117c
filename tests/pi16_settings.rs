//! Pi 1.6 settings and models.json fields that shape requests and usage, through the real
//! `pi-lsp run` on the loopback model: each test asserts the request body (everything but the
//! conversation) or the stored usage with the values Pi 1.6.0 gives for the same files
//! (settings `thinkingBudgets`; models.json `samplingParams` /
//! `samplingParamsByThinkingLevel`, `cost.tiers`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pi_e2e::headless::Headless;
use pi_e2e::mock_model::{MockModel, Step};
use serde_json::{json, Value};

/// `models` as the agent dir's models.json and `settings` as its settings.json; runs
/// `pi-lsp run ARGS` once per entry of `runs` and returns each request's body without its
/// conversation (`messages`, `system`, `tools`, `input`, `instructions`).
fn request_params(
    mock: &MockModel,
    models: Value,
    settings: Value,
    runs: &[&[&str]],
) -> Vec<Value> {
    let h = Headless::new("pi16-settings", &models);
    std::fs::write(h.agent.join("settings.json"), settings.to_string()).unwrap();
    for args in runs {
        let out = h.run(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    mock.requests()
        .into_iter()
        .map(|r| {
            let mut body = r.body;
            let obj = body.as_object_mut().unwrap();
            for k in ["messages", "system", "tools", "input", "instructions"] {
                obj.remove(k);
            }
            body
        })
        .collect()
}

/// Settings `thinkingBudgets` set the Anthropic `budget_tokens` of budget-based thinking per
/// level, unset levels keeping pi-ai's defaults (Pi 1.6.0 on the same files: 5000 for `high`,
/// 1500 for `low`, 8192 for `medium`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_budgets_set_the_anthropic_budget() {
    let mock = MockModel::start(vec![Step::text("a"), Step::text("b"), Step::text("c")]).await;
    let models = json!({"providers": {"mockant": {
        "baseUrl": mock.anthropic_base(), "api": "anthropic-messages", "apiKey": "test-key",
        "models": [{"id": "claude-x", "reasoning": true, "contextWindow": 200000, "maxTokens": 32000}]}}});
    let settings = json!({"thinkingBudgets": {"high": 5000, "low": 1500}});
    let m = ["--model", "mockant/claude-x", "--thinking"];
    let got = request_params(
        &mock,
        models,
        settings,
        &[
            &[m[0], m[1], m[2], "high", "hi"],
            &[m[0], m[1], m[2], "low", "hi"],
            &[m[0], m[1], m[2], "medium", "hi"],
        ],
    );
    let want = |budget: u64| {
        json!({"model": "claude-x", "max_tokens": 32000, "stream": true,
               "thinking": {"type": "enabled", "budget_tokens": budget, "display": "summarized"}})
    };
    assert_eq!(got, vec![want(5000), want(1500), want(8192)]);
}

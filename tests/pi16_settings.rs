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

/// models.json `samplingParams` are merged last into `openai-completions` and
/// `openai-responses` request bodies, the effective level's `samplingParamsByThinkingLevel`
/// entry over them, key by key (Pi 1.6.0 on the same files: `temperature` 0.3 and `top_p` 0.9;
/// at `high`, `temperature` 1 and `top_k` 20 beside `reasoning_effort`; at `low`, no entry:
/// the model's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_params_are_merged_into_openai_bodies() {
    let mock = MockModel::start(vec![
        Step::text("a"),
        Step::text("b"),
        Step::text("c"),
        Step::text("d"),
    ])
    .await;
    let models = json!({"providers": {
        "mock": {"baseUrl": mock.openai_base(), "api": "openai-completions", "apiKey": "test-key",
            "compat": {"supportsDeveloperRole": false},
            "models": [
                {"id": "plain", "maxTokens": 4096, "samplingParams": {"temperature": 0.3, "top_p": 0.9}},
                {"id": "think", "maxTokens": 4096, "reasoning": true, "samplingParams": {"temperature": 0.3},
                 "samplingParamsByThinkingLevel": {"high": {"temperature": 1.0, "top_k": 20}}}]},
        "mockresp": {"baseUrl": mock.openai_base(), "api": "openai-responses", "apiKey": "test-key",
            "models": [{"id": "resp", "maxTokens": 4096, "samplingParams": {"temperature": 0.3, "top_p": 0.9}}]}}});
    let got = request_params(
        &mock,
        models,
        json!({}),
        &[
            &["--model", "mock/plain", "hi"],
            &["--model", "mock/think", "--thinking", "high", "hi"],
            &["--model", "mock/think", "--thinking", "low", "hi"],
            &["--model", "mockresp/resp", "hi"],
        ],
    );
    // The Responses body names the session (its id changes from run to run).
    let mut resp = got[3].clone();
    let key = resp.as_object_mut().unwrap().remove("prompt_cache_key");
    assert!(key.as_ref().is_some_and(Value::is_string), "{key:?}");
    assert_eq!(
        got[..3],
        [
            json!({"model": "plain", "stream": true,
                   "stream_options": {"include_usage": true}, "store": false, "max_completion_tokens": 4096,
                   "temperature": 0.3, "top_p": 0.9}),
            json!({"model": "think", "stream": true,
                   "stream_options": {"include_usage": true}, "store": false, "max_completion_tokens": 4096,
                   "reasoning_effort": "high", "temperature": 1.0, "top_k": 20}),
            json!({"model": "think", "stream": true,
                   "stream_options": {"include_usage": true}, "store": false, "max_completion_tokens": 4096,
                   "reasoning_effort": "low", "temperature": 0.3}),
        ]
    );
    assert_eq!(
        resp,
        json!({"model": "resp", "stream": true, "store": false, "max_output_tokens": 4096,
                "temperature": 0.3, "top_p": 0.9})
    );
}

//! The prompt caching a request asks for, end to end over loopback HTTP (issue 29, item 1):
//! Pi 1.6's summary requests (compaction, branch summary) ask for none (`cacheRetention:
//! "none"` in `completeSummarization`), so they carry no `cache_control`, no
//! `prompt_cache_key` and no session headers, while the conversation's own requests carry
//! them; and `PI_CACHE_RETENTION` is read as Pi 1.6 reads it (`long`: a 1 h `ttl`; any other
//! value, `none` included, the default marks). Checked against the real Pi 1.6.0 with the same
//! loopback model: docs/benchmarks.md, "Round 39 (cache39)".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

#[path = "support/compacting.rs"]
mod compacting;

use compacting::{compacting_agent, is_summary};
use pi_ai::{Api, Model};
use pi_core::agent::CompactionSettings;
use pi_core::compaction::SUMMARIZATION_SYSTEM_PROMPT;
use pi_core::session::read_tree;
use pi_e2e::headless::{assert_success, Headless};
use pi_e2e::mock_model::{MockModel, Recorded, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

/// The session id the conversation's requests carry.
const SESSION: &str = "01a24c01-09cb-750b-be08-382c448cac10";

/// The summary requests of one conversation here, in order, by the start of their user text
/// and their output limit: the compaction's history summary and, its kept turn being split, the
/// turn prefix's (Pi 1.6's `# Conversation` / `# Instructions` form); then the branch summary.
/// Each asks Pi 1.6's limit: the model's `maxTokens` (4,096), which the 200,000-token window's
/// room does not clamp.
const SUMMARIES: [(&str, u64); 3] = [
    (
        "<conversation>\n[User]: First question?\n\n[Assistant]: One.\n</conversation>",
        4_096,
    ),
    (
        "# Conversation\n[User]: Second question?\n\n# Instructions\nThe messages above are earlier context",
        4_096,
    ),
    (
        "<conversation>\n[User]: First question?\n\n[Assistant]: One.\n\n[User]: Second",
        4_096,
    ),
];

/// Every `cache_control` in `body` with where it is (a JSON pointer), in document order.
fn marks(body: &Value) -> Vec<(String, Value)> {
    fn walk(v: &Value, at: String, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    if k == "cache_control" {
                        out.push((at.clone(), x.clone()));
                    } else {
                        walk(x, format!("{at}/{k}"), out);
                    }
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, String::new(), &mut out);
    out
}

/// The user text of a summary request (one user message of one text block).
fn summary_text(body: &Value) -> String {
    let msgs = body["messages"].as_array().unwrap();
    let user = msgs.iter().find(|m| m["role"] == "user").unwrap();
    user["content"][0]["text"].as_str().unwrap().to_string()
}

/// The summary requests of `converse_compact_and_summarise`, checked against `SUMMARIES` in
/// order: each one's user text (read by `text_of` from the wire's body) starts as expected, its
/// body is whole the one `body(text, max_tokens)` gives for that wire, and it carries no
/// session headers.
fn assert_summaries(
    summaries: &[&Recorded],
    text_of: impl Fn(&Value) -> String,
    body: impl Fn(&str, u64) -> Value,
) {
    assert_eq!(summaries.len(), SUMMARIES.len(), "{summaries:#?}");
    for (r, (start, max_tokens)) in summaries.iter().zip(SUMMARIES) {
        let text = text_of(&r.body);
        assert!(text.starts_with(start), "{text}");
        assert_eq!(r.body, body(&text, max_tokens));
        assert_eq!(session_headers(r), Vec::<String>::new());
    }
}

/// Headers naming the session or asking for affinity (`session_id`, `x-session-id`,
/// `x-client-request-id`, `x-session-affinity`), as `name: value`.
fn session_headers(r: &Recorded) -> Vec<String> {
    let mut out: Vec<String> = r
        .headers
        .iter()
        .filter(|(k, _)| k.as_str().contains("session") || k.as_str() == "x-client-request-id")
        .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap()))
        .collect();
    out.sort();
    out
}

/// The anthropic-messages model `mockant/mock-ant-1` at `mock`.
fn anthropic_model(mock: &MockModel) -> Model {
    let mut m = Model::new(
        Api::AnthropicMessages,
        "mockant",
        "mock-ant-1",
        &mock.anthropic_base(),
    );
    m.api_key = Some("test-key".into());
    m.context_window = 200_000;
    m.max_tokens = 4_096;
    m
}

/// The openai-completions model `mock/mock-1` at `mock`, with the compat flags that make its
/// requests cache (Anthropic-format marks, a `prompt_cache_key`, session headers), as an
/// OpenRouter `anthropic/…` model's are.
fn completions_model(mock: &MockModel) -> Model {
    let mut m = mock.completions_model(200_000, 4_096);
    m.compat = json!({
        "cacheControlFormat": "anthropic",
        "promptCacheKeyMode": "enabled",
        "sendSessionAffinityHeaders": true,
        "supportsDeveloperRole": false,
    });
    m
}

/// Two prompts on `model`, then a compaction (keeping only the latest turn) and a summary of
/// the branch: every request the mock got.
async fn converse_compact_and_summarise(dir: &Path, mock: &MockModel, model: Model) {
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| Step::text("SUMMARY"))
    }));
    let settings = CompactionSettings {
        keep_recent_tokens: 1,
        ..CompactionSettings::default()
    };
    let sessions = dir.join(".pi/sessions");
    let c = compacting_agent(dir, &sessions, model.clone(), None, settings, Some(SESSION));
    c.converse(&["First question?", "Second question?"]).await;
    let (agent, path) = (&c.agent, &c.path);
    let (_, _, rx) = agent.compact(None).unwrap();
    rx.await.unwrap().expect("the compaction succeeds");
    c.idle().await;
    let (tree, _) = read_tree(path, false).unwrap();
    let leaf = tree.last_id().unwrap().to_string();
    let branch = tree.path(&leaf);
    let never = pi_ai::StreamOptions::default().cancel;
    let summary = pi_core::harness::branch_summary::branch_summary(&model, &branch, None, &never)
        .await
        .unwrap()
        .summary;
    assert!(summary.ends_with("SUMMARY"), "{summary}");
}

/// Anthropic: the conversation's requests carry Pi's three marks (system prompt, last user
/// block; no tools here), the compaction's and the branch summary's carry none at all — each
/// summary body compared whole.
#[tokio::test]
async fn anthropic_summary_requests_carry_no_cache_control() {
    let dir = TempDir::new("summary-cache-anthropic");
    let mock = MockModel::start(vec![Step::text("One."), Step::text("Two.")]).await;
    converse_compact_and_summarise(&dir, &mock, anthropic_model(&mock)).await;
    let requests = mock.requests();
    let (summaries, turns): (Vec<_>, Vec<_>) = requests.iter().partition(|r| is_summary(&r.body));
    let eph = json!({"type": "ephemeral"});
    assert_eq!(
        turns.iter().map(|r| marks(&r.body)).collect::<Vec<_>>(),
        [
            vec![
                ("/messages/0/content/0".to_string(), eph.clone()),
                ("/system/0".to_string(), eph.clone())
            ],
            vec![
                ("/messages/2/content/0".to_string(), eph.clone()),
                ("/system/0".to_string(), eph.clone())
            ],
        ]
    );
    assert_summaries(&summaries, summary_text, |text, max_tokens| {
        json!({
            "model": "mock-ant-1",
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
            "max_tokens": max_tokens,
            "stream": true,
            "system": [{"type": "text", "text": SUMMARIZATION_SYSTEM_PROMPT}],
        })
    });
}

/// OpenAI chat completions with a model whose requests cache: the conversation's requests
/// carry the Anthropic-format marks, the session's `prompt_cache_key` and its affinity
/// headers; the summary requests none of them — each summary body compared whole.
#[tokio::test]
async fn completions_summary_requests_carry_no_cache_key_marks_or_session_headers() {
    let dir = TempDir::new("summary-cache-completions");
    let mock = MockModel::start(vec![Step::text("One."), Step::text("Two.")]).await;
    converse_compact_and_summarise(&dir, &mock, completions_model(&mock)).await;
    let requests = mock.requests();
    let (summaries, turns): (Vec<_>, Vec<_>) = requests.iter().partition(|r| is_summary(&r.body));
    let eph = json!({"type": "ephemeral"});
    assert_eq!(
        turns.iter().map(|r| marks(&r.body)).collect::<Vec<_>>(),
        [
            vec![
                ("/messages/0/content/0".to_string(), eph.clone()),
                ("/messages/1/content/0".to_string(), eph.clone())
            ],
            vec![
                ("/messages/0/content/0".to_string(), eph.clone()),
                ("/messages/3/content/0".to_string(), eph.clone())
            ],
        ]
    );
    for r in &turns {
        assert_eq!(r.body["prompt_cache_key"], json!(SESSION));
        assert_eq!(
            session_headers(r),
            [
                format!("session_id: {SESSION}"),
                format!("x-client-request-id: {SESSION}"),
                format!("x-session-affinity: {SESSION}"),
            ]
        );
    }
    assert_summaries(&summaries, summary_text, |text, max_tokens| {
        json!({
            "model": "mock-1",
            "messages": [
                {"role": "system", "content": SUMMARIZATION_SYSTEM_PROMPT},
                {"role": "user", "content": [{"type": "text", "text": text}]},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "store": false,
            "max_completion_tokens": max_tokens,
        })
    });
}

/// `PI_CACHE_RETENTION` as Pi 1.6 reads it, in `pi-lsp run` on the Anthropic model: `none`
/// (not a value Pi reads) leaves the default marks — system prompt, last tool, last user
/// block — and `long` gives each a 1 h `ttl`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_cache_retention_none_keeps_the_marks_and_long_asks_for_an_hour() {
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let mut h = Headless::new("cache-retention-env", &mock.models_json());
    let mut marks_with = |value: &str| {
        h.env.retain(|(k, _)| *k != "PI_CACHE_RETENTION");
        h.env.push(("PI_CACHE_RETENTION", value.to_string()));
        let out = h.run(&["--model", "mockant/mock-ant-1", "--no-session", "hi"]);
        assert_success(&out);
        marks(&mock.requests().last().unwrap().body)
    };
    let none = marks_with("none");
    let long = marks_with("long");
    let tools = mock.requests()[0].body["tools"].as_array().unwrap().len();
    assert!(tools > 0);
    let at = |mark: &Value| {
        vec![
            ("/messages/0/content/0".to_string(), mark.clone()),
            ("/system/0".to_string(), mark.clone()),
            (format!("/tools/{}", tools - 1), mark.clone()),
        ]
    };
    assert_eq!(none, at(&json!({"type": "ephemeral"})));
    assert_eq!(long, at(&json!({"type": "ephemeral", "ttl": "1h"})));
}

/// OpenAI Responses: the conversation's requests carry the session's `prompt_cache_key`; the
/// summary requests carry no key and no session headers — each summary body compared whole.
#[tokio::test]
async fn responses_summary_requests_carry_no_cache_key_or_session_headers() {
    let dir = TempDir::new("summary-cache-responses");
    let mock = MockModel::start(vec![Step::text("One."), Step::text("Two.")]).await;
    converse_compact_and_summarise(&dir, &mock, mock.responses_model(200_000, 4_096)).await;
    let requests = mock.requests();
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
    let (summaries, turns): (Vec<_>, Vec<_>) = requests.iter().partition(|r| is_summary(&r.body));
    assert_eq!(turns.len(), 2, "{turns:#?}");
    for r in &turns {
        assert_eq!(r.body["prompt_cache_key"], json!(SESSION));
    }
    let input_text = |body: &Value| {
        body["input"][1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_summaries(&summaries, input_text, |text, max_tokens| {
        json!({
            "model": "mock-resp-1",
            "input": [
                {"role": "system", "content": SUMMARIZATION_SYSTEM_PROMPT},
                {"role": "user", "content": [{"type": "input_text", "text": text}]},
            ],
            "stream": true,
            "store": false,
            "max_output_tokens": max_tokens,
        })
    });
}

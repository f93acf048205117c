//! A compaction's summary requests against the real Pi 1.6.0's (issue 29): the same two-turn
//! conversation, `compaction.keepRecentTokens: 1` (so the kept turn is split and both the
//! history and the turn-prefix summaries are asked) and the same custom instructions (case
//! CMP-07), on the same loopback model; the summary request bodies compared whole. Pi runs in
//! RPC mode (`--mode rpc`, two `prompt`s then `{"type":"compact"}`), as `$PI16_REF_BIN`
//! (installed by `.ci/pi16.sh`; required under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[path = "support/compacting.rs"]
mod compacting;

use compacting::{compacting_agent, is_summary, Compacting};
use pi_core::agent::CompactionSettings;
use pi_e2e::headless::pi_command;
use pi_e2e::mock_model::{Answer, MockModel, Step};
use pi_e2e::pi_rpc::PiRpc;
use pi_e2e::TempDir;
use serde_json::{json, Value};

/// The custom instructions of the `/compact` (case CMP-07).
const FOCUS: &str = "always reply with the word TRIPWIRE";

/// The tests' name when Pi 1.6.0 is missing.
const WHAT: &str = "Pi 1.6.0 summary request comparison";

const PROMPTS: [&str; 2] = ["First question?", "Second question?"];

/// `compaction.reserveTokens` on both sides: small, so no automatic compaction runs on the
/// small window (Pi 1.6 does not halve the reserve for a small window as pi-lsp does).
const RESERVE: u64 = 1_000;

/// pi-lsp's agent on `model` for these comparisons: a session file under `dir/sessions`,
/// `compaction.keepRecentTokens: 1` and [`RESERVE`], `retry` (`None`: off).
fn ours(dir: &Path, model: pi_ai::Model, retry: Option<pi_ai::RetryPolicy>) -> Compacting {
    let settings = CompactionSettings {
        keep_recent_tokens: 1,
        reserve_tokens: RESERVE,
        ..CompactionSettings::default()
    };
    compacting_agent(dir, &dir.join("sessions"), model, retry, settings, None)
}

/// Pi's retry budget (3), `base_ms` apart and doubling, no jitter.
fn retry_policy(base_ms: u64) -> pi_ai::RetryPolicy {
    pi_ai::RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(base_ms),
        max_delay: Duration::from_secs(60),
        jitter: 0.0,
    }
}

/// A mock answering the conversation "One." (after thinking, which Pi 1.6 leaves out of the
/// summary's conversation), "Two." and every summary request "SUMMARY".
async fn mock() -> MockModel {
    let mock = MockModel::start(vec![
        Step::Answer(Answer {
            thinking: Some("Let me think.".into()),
            text: Some("One.".into()),
            ..Answer::default()
        }),
        Step::text("Two."),
    ])
    .await;
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| Step::text("SUMMARY"))
    }));
    mock
}

/// The summary request bodies `mock` received, in order.
fn summaries(mock: &MockModel) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .map(|r| r.body)
        .filter(is_summary)
        .collect()
}

/// Pi 1.6.0 in RPC mode: the two prompts, each awaited to its `agent_end`, then a compaction
/// with [`FOCUS`], awaited to its response.
fn pi_converse_and_compact(
    pi: &Path,
    dir: &Path,
    mock: &MockModel,
    window: u64,
    thinking: Option<&str>,
) {
    let agent = dir.join("agent");
    let home = dir.join("home");
    let ws = dir.join("ws");
    for d in [&agent, &home, &ws] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"][0]["contextWindow"] = json!(window);
    if thinking.is_some() {
        models["providers"]["mock"]["models"][0]["reasoning"] = json!(true);
    }
    std::fs::write(agent.join("models.json"), models.to_string()).unwrap();
    std::fs::write(
        agent.join("settings.json"),
        json!({"compaction": {"keepRecentTokens": 1, "reserveTokens": RESERVE}}).to_string(),
    )
    .unwrap();
    let mut cmd = pi_command(pi, &ws, &agent, &home, ["--no-tools", "--session-dir"]);
    cmd.arg(dir.join("sessions"))
        .args(thinking.map(|t| ["--thinking", t]).into_iter().flatten())
        .env("PI_PACKAGE_DIR", pi_e2e::pi16_package(pi));
    let mut p = PiRpc::spawn(cmd);
    let succeeded = |seen: &[Value]| {
        if let Some(failed) = seen.iter().find(|v| v["success"] == json!(false)) {
            panic!("{failed}");
        }
    };
    for text in PROMPTS {
        succeeded(&p.call(json!({"type": "prompt", "message": text}), |v| {
            v["type"] == "agent_end"
        }));
    }
    let compact = json!({"type": "compact", "customInstructions": FOCUS});
    succeeded(&p.call(compact, |v| {
        v["type"] == "response" && v["command"] == "compact"
    }));
    let status = p.close();
    assert!(status.success(), "Pi exited with {status}");
}

/// pi-lsp's agent: the same two prompts on the same model (`window`, `maxTokens` 4,096), then
/// a compaction with [`FOCUS`].
async fn ours_converse_and_compact(
    dir: &Path,
    mock: &MockModel,
    window: u64,
    thinking: Option<pi_ai::models::ThinkingLevel>,
) {
    let mut model = mock.completions_model(window, 4_096);
    if thinking.is_some() {
        model.reasoning = true;
        model.thinking_level = thinking;
    }
    let c = ours(dir, model, None);
    c.converse(&PROMPTS).await;
    let agent = &c.agent;
    let (_, _, rx) = agent.compact(Some(FOCUS.to_string())).unwrap();
    rx.await.unwrap().expect("the compaction succeeds");
    c.idle().await;
}

/// Both sides' summary request bodies on a model with `window`, the history summary first.
async fn both(
    window: u64,
    thinking: Option<pi_ai::models::ThinkingLevel>,
) -> (Vec<Value>, Vec<Value>) {
    let pi = pi_e2e::pi16_bin(WHAT).unwrap();
    let tmp = TempDir::new("compaction-pi16");
    let pi_mock = mock().await;
    let pi_dir = tmp.path().join("pi");
    let level = thinking.map(|t| t.as_str());
    tokio::task::block_in_place(|| pi_converse_and_compact(&pi, &pi_dir, &pi_mock, window, level));
    let mut theirs = summaries(&pi_mock);
    let our_mock = mock().await;
    ours_converse_and_compact(&tmp.path().join("ours"), &our_mock, window, thinking).await;
    let mut ours = summaries(&our_mock);
    // pi-lsp asks both at once: in the order they arrived.
    let order = |v: &mut Vec<Value>| v.sort_by_key(|b| b.to_string().contains("# Conversation"));
    order(&mut theirs);
    order(&mut ours);
    assert_eq!(theirs.len(), 2, "{theirs:#?}");
    (ours, theirs)
}

/// The history summary and the turn-prefix summary requests, each body whole, are Pi 1.6.0's:
/// system prompt, prompt texts, the `<conversation>` and `# Conversation`/`# Instructions`
/// forms, where the custom instructions go, and the output limit (the model's 4,096).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_summary_requests_are_pi_1_6_s() {
    if pi_e2e::pi16_bin(WHAT).is_none() {
        return;
    }
    let (ours, theirs) = both(128_000, None).await;
    assert_eq!(ours, theirs);
    // What was compared, so a change on both sides cannot pass unseen.
    let text = |b: &Value| {
        b["messages"][1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        text(&ours[0]),
        format!(
            "<conversation>\n[User]: First question?\n\n[Assistant]: One.\n</conversation>\n\n{}\n\nAdditional focus: {FOCUS}",
            pi_core::compaction::SUMMARIZATION_PROMPT
        )
    );
    assert_eq!(
        text(&ours[1]),
        format!(
            "# Conversation\n[User]: Second question?\n\n# Instructions\n{}\n\nAdditional focus: {FOCUS}",
            pi_core::compaction::TURN_PREFIX_SUMMARIZATION_PROMPT
        )
    );
    assert_eq!(ours[0]["max_completion_tokens"], json!(4_096));
}

/// On a window of 8,000 tokens Pi 1.6 clamps the model's 4,096 to the room the window leaves
/// the summary request (`clampMaxTokensToContext`): each limit below 4,096, the same as Pi's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_output_limit_is_clamped_to_the_window_as_pi_1_6_clamps_it() {
    if pi_e2e::pi16_bin(WHAT).is_none() {
        return;
    }
    let (ours, theirs) = both(8_000, None).await;
    assert_eq!(ours, theirs);
    let limits: Vec<u64> = ours
        .iter()
        .map(|b| b["max_completion_tokens"].as_u64().unwrap())
        .collect();
    assert!(limits.iter().all(|l| (1..4_096).contains(l)), "{limits:?}");
}

/// A reasoning model at thinking level `high`: Pi 1.6 asks its summaries at the session's
/// level (`createSummarizationOptions`: `reasoning` when the model reasons and the level is not
/// `off`); each body whole, the same as Pi's, and the level is on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summaries_of_a_reasoning_session_ask_its_thinking_level_as_pi_1_6_does() {
    if pi_e2e::pi16_bin(WHAT).is_none() {
        return;
    }
    let (ours, theirs) = both(128_000, Some(pi_ai::models::ThinkingLevel::High)).await;
    assert_eq!(ours, theirs);
    let efforts: Vec<&Value> = ours.iter().map(|b| &b["reasoning_effort"]).collect();
    assert_eq!(efforts, vec![&json!("high"), &json!("high")]);
}

/// Settings on both sides for the retry comparisons: Pi's retry budget (3) 10 ms apart,
/// doubling, and the compaction settings of [`pi_converse_and_compact`].
fn retry_settings() -> Value {
    json!({
        "compaction": {"keepRecentTokens": 1, "reserveTokens": RESERVE},
        "retry": {"baseDelayMs": 10}
    })
}

/// A mock answering the two prompts "One." and "Two.", whose first `failing.len()` summary
/// requests get those steps (HTTP errors) and every later one "SUMMARY".
async fn failing_mock(failing: Vec<Step>) -> MockModel {
    let mock = MockModel::start(vec![Step::text("One."), Step::text("Two.")]).await;
    let left = std::sync::Mutex::new(std::collections::VecDeque::from(failing));
    mock.set_responder(Arc::new(move |body: &Value| {
        is_summary(body).then(|| {
            left.lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Step::text("SUMMARY"))
        })
    }));
    mock
}

/// Pi 1.6.0 in RPC mode with [`retry_settings`]: the two prompts, then `compact`; the
/// compaction's events up to its response (the response left out).
fn pi_compact_events(pi: &Path, dir: &Path, mock: &MockModel) -> Vec<Value> {
    let (agent, home, ws) = (dir.join("agent"), dir.join("home"), dir.join("ws"));
    for d in [&agent, &home, &ws] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(agent.join("models.json"), mock.models_json().to_string()).unwrap();
    std::fs::write(agent.join("settings.json"), retry_settings().to_string()).unwrap();
    let mut cmd = pi_command(pi, &ws, &agent, &home, ["--no-tools", "--session-dir"]);
    cmd.arg(dir.join("sessions"))
        .env("PI_PACKAGE_DIR", pi_e2e::pi16_package(pi));
    let mut p = PiRpc::spawn(cmd);
    for text in PROMPTS {
        p.call(json!({"type": "prompt", "message": text}), |v| {
            v["type"] == "agent_end"
        });
    }
    let events = p.call(json!({"type": "compact"}), |v| {
        v["type"] == "response" && v["command"] == "compact"
    });
    p.close();
    events
        .into_iter()
        .filter(|v| v["type"] != "response")
        .collect()
}

/// Every event of an agent, as JSON.
#[derive(Default)]
struct Collect(std::sync::Mutex<Vec<Value>>);

#[async_trait::async_trait]
impl pi_core::agent::EventSink for Collect {
    async fn emit(&self, event: pi_core::agent::AgentEvent) {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::to_value(&event).unwrap());
    }
}

/// pi-lsp's agent with the retry settings of [`retry_settings`] (3 retries, 10 ms doubling,
/// no jitter): the two prompts, then a manual compaction; the events from its
/// `compaction_start` on.
async fn our_compact_events(dir: &Path, mock: &MockModel) -> Vec<Value> {
    let model = mock.completions_model(128_000, 4_096);
    let c = ours(dir, model, Some(retry_policy(10)));
    c.converse(&PROMPTS).await;
    let agent = &c.agent;
    let seen = Arc::new(Collect::default());
    let _sub = agent.subscribe(seen.clone());
    let (_, _, rx) = agent.compact(None).unwrap();
    let _ = rx.await.unwrap();
    c.idle().await;
    let all = seen.0.lock().unwrap().clone();
    all
}

/// The compaction's and its summaries' events, in order: `summarization_retry_*` whole,
/// `compaction_start` whole, `compaction_end` by its outcome (`errorMessage`, whether a
/// result came); the rest (Pi's `agent_settled` …) left out.
fn summary_events(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| match e["type"].as_str().unwrap() {
            t if t.starts_with("summarization_retry") || t == "compaction_start" => Some(e.clone()),
            "compaction_end" => Some(json!({
                "type": "compaction_end",
                "errorMessage": e["errorMessage"],
                "result": !e["result"].is_null(),
            })),
            _ => None,
        })
        .collect()
}

/// Both sides' summary events and how many summary requests each sent, on the same failing
/// summary requests ([`failing_mock`]).
async fn both_failing(
    name: &str,
    failing: Vec<Step>,
) -> ((Vec<Value>, usize), (Vec<Value>, usize)) {
    let pi = pi_e2e::pi16_bin(WHAT).unwrap();
    let tmp = TempDir::new(name);
    let pi_mock = failing_mock(failing.clone()).await;
    let dir = tmp.path().join("pi");
    let theirs = tokio::task::block_in_place(|| pi_compact_events(&pi, &dir, &pi_mock));
    let our_mock = failing_mock(failing).await;
    let ours = our_compact_events(&tmp.path().join("ours"), &our_mock).await;
    (
        (summary_events(&ours), summaries(&our_mock).len()),
        (summary_events(&theirs), summaries(&pi_mock).len()),
    )
}

/// An OpenAI-style HTTP error: `status` with `{"error": {"message": message}}`.
fn http_error(status: u16, message: &str) -> Step {
    Step::Raw {
        status,
        content_type: "application/json".into(),
        body: json!({"error": {"message": message}}).to_string(),
    }
}

/// Issue 29 (b): a summary request that fails with a transient error (a 500) is retried as Pi
/// 1.6's `completeSummarization` retries it (`settings.retry`): the same events as Pi's RPC
/// `compact` sends — `summarization_retry_scheduled {attempt: 1, maxAttempts: 3, delayMs: 10,
/// errorMessage}`, `summarization_retry_attempt_start {source: "compaction", reason:
/// "manual"}`, `summarization_retry_finished` — and the compaction succeeds with the same
/// number of summary requests (3: the history summary twice, then the turn prefix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_request_failing_once_is_retried_as_pi_1_6_retries_it() {
    if pi_e2e::pi16_bin(WHAT).is_none() {
        return;
    }
    let ((ours, our_requests), (theirs, their_requests)) = both_failing(
        "compaction-pi16-retry",
        vec![http_error(500, "summary boom once")],
    )
    .await;
    assert_eq!(ours, theirs);
    assert_eq!(our_requests, their_requests);
    assert_eq!(our_requests, 3);
    let types: Vec<&str> = ours.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "compaction_start",
            "summarization_retry_scheduled",
            "summarization_retry_attempt_start",
            "summarization_retry_finished",
            "compaction_end"
        ]
    );
    assert_eq!(ours[1]["delayMs"], json!(10));
    assert_eq!(
        ours[2],
        json!({"type": "summarization_retry_attempt_start", "source": "compaction", "reason": "manual"})
    );
    assert_eq!(ours[4]["result"], json!(true));
}

/// Issue 29 (b): the summaries are asked one after the other (history, then turn prefix): a
/// history summary refused with a 400 (not transient: no retry) ends the compaction with Pi
/// 1.6's error and no second request — one summary request on each side, the same events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_history_summary_stops_before_the_turn_prefix_as_pi_1_6_does() {
    if pi_e2e::pi16_bin(WHAT).is_none() {
        return;
    }
    let ((ours, our_requests), (theirs, their_requests)) =
        both_failing("compaction-pi16-400", vec![http_error(400, "bad summary")]).await;
    assert_eq!(ours, theirs);
    assert_eq!((our_requests, their_requests), (1, 1));
    assert_eq!(ours.len(), 2, "{ours:#?}");
    assert!(
        ours[1]["errorMessage"]
            .as_str()
            .unwrap()
            .starts_with("Compaction failed: Summarization failed: 400"),
        "{ours:#?}"
    );
}

/// The summaries' retry wait on both sides for the abort comparison: long enough to abort in.
const ABORT_WAIT_MS: u64 = 3_000;

/// The types of the entries of the session file(s) under `dir`, in order.
fn stored_types(dir: &Path) -> Vec<String> {
    let mut types = Vec::new();
    for f in std::fs::read_dir(dir).unwrap().flatten() {
        let p = f.path();
        if p.is_dir() {
            types.extend(stored_types(&p));
        } else if p.extension().is_some_and(|e| e == "jsonl") {
            for line in std::fs::read_to_string(&p).unwrap().lines() {
                let v: Value = serde_json::from_str(line).unwrap();
                let role = v["message"]["role"].as_str().map(|r| format!(":{r}"));
                types.push(format!(
                    "{}{}",
                    v["type"].as_str().unwrap(),
                    role.unwrap_or_default()
                ));
            }
        }
    }
    types
}

/// Pi 1.6.0 in RPC mode: the two prompts, then `compact` whose summary request fails with a
/// 500; `abort` sent once `summarization_retry_scheduled` arrived (during the wait). Every
/// event from `compaction_start` to the compaction's response (responses left out), and the
/// stored entries' types.
fn pi_compact_aborted(pi: &Path, dir: &Path, mock: &MockModel) -> (Vec<Value>, Vec<String>) {
    let (agent, home, ws) = (dir.join("agent"), dir.join("home"), dir.join("ws"));
    for d in [&agent, &home, &ws] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut settings = retry_settings();
    settings["retry"]["baseDelayMs"] = json!(ABORT_WAIT_MS);
    std::fs::write(agent.join("models.json"), mock.models_json().to_string()).unwrap();
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
    let mut cmd = pi_command(pi, &ws, &agent, &home, ["--no-tools", "--session-dir"]);
    cmd.arg(dir.join("sessions"))
        .env("PI_PACKAGE_DIR", pi_e2e::pi16_package(pi));
    let mut p = PiRpc::spawn(cmd);
    // Each run to its `agent_settled`: a compaction sent before it would abort the run
    // first (Pi's `compact()` calls `abort()`), adding that run's `agent_settled {aborted}`.
    for text in PROMPTS {
        p.prompt(text);
    }
    let mut events = p.call(json!({"type": "compact"}), |v| {
        v["type"] == "summarization_retry_scheduled"
    });
    events.extend(p.call(json!({"type": "abort"}), |v| {
        v["type"] == "response" && v["command"] == "compact"
    }));
    p.close();
    let from = events
        .iter()
        .position(|v| v["type"] == "compaction_start")
        .unwrap();
    let events = events[from..]
        .iter()
        .filter(|v| v["type"] != "response")
        .cloned()
        .collect();
    (events, stored_types(&dir.join("sessions")))
}

/// pi-lsp's agent as [`pi_compact_aborted`] drives Pi: the two prompts, a manual compaction
/// whose summary request fails with a 500, and `abort` (what `agent/abort` calls) once
/// `summarization_retry_scheduled` was sent. Every event from `compaction_start` on, and the
/// stored entries' types.
async fn our_compact_aborted(dir: &Path, mock: &MockModel) -> (Vec<Value>, Vec<String>) {
    let model = mock.completions_model(128_000, 4_096);
    let c = ours(dir, model, Some(retry_policy(ABORT_WAIT_MS)));
    c.converse(&PROMPTS).await;
    let agent = &c.agent;
    let seen = Arc::new(Collect::default());
    let _sub = agent.subscribe(seen.clone());
    let (_, _, rx) = agent.compact(None).unwrap();
    let scheduled = || {
        seen.0
            .lock()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "summarization_retry_scheduled")
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        while !scheduled() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("no summarization_retry_scheduled");
    assert!(agent.abort(), "nothing to abort");
    let _ = rx.await.unwrap();
    c.idle().await;
    let all = seen.0.lock().unwrap().clone();
    (all, stored_types(&dir.join("sessions")))
}

/// Case (c): an abort during a summary retry's wait ends the compaction as Pi 1.6.0's RPC
/// ends it: `compaction_start`, `summarization_retry_scheduled` (attempt 1 of 3, the wait,
/// the 500's words), `summarization_retry_finished`, `compaction_end {aborted: true}` without
/// an error or result — every event whole and the same on both sides, no `agent_settled` —
/// no second summary request, and no compaction stored (the same
/// entries on both sides).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_during_a_summary_retry_wait_ends_the_compaction_as_pi_1_6_does() {
    if pi_e2e::pi16_bin(WHAT).is_none() {
        return;
    }
    let pi = pi_e2e::pi16_bin(WHAT).unwrap();
    let tmp = TempDir::new("compaction-pi16-abort");
    let boom = || vec![http_error(500, "summary boom"); 4];
    let pi_mock = failing_mock(boom()).await;
    let dir = tmp.path().join("pi");
    let (theirs, their_entries) =
        tokio::task::block_in_place(|| pi_compact_aborted(&pi, &dir, &pi_mock));
    let our_mock = failing_mock(boom()).await;
    let (ours, our_entries) = our_compact_aborted(&tmp.path().join("ours"), &our_mock).await;
    let expected = vec![
        json!({"type": "compaction_start", "reason": "manual"}),
        json!({"type": "summarization_retry_scheduled", "attempt": 1, "maxAttempts": 3,
               "delayMs": ABORT_WAIT_MS, "errorMessage": "500: {\"message\":\"summary boom\"}"}),
        json!({"type": "summarization_retry_finished"}),
        json!({"type": "compaction_end", "reason": "manual", "aborted": true, "willRetry": false}),
    ];
    // No `agent_settled` on either side: Pi 1.6 emits it only at the end of a prompt's run.
    assert_eq!(Value::from(theirs), Value::from(expected.clone()));
    assert_eq!(Value::from(ours), Value::from(expected));
    assert_eq!(
        (summaries(&our_mock).len(), summaries(&pi_mock).len()),
        (1, 1)
    );
    // Pi stores its system message (`message:system`) ahead of the first prompt; the rest is
    // the same: no compaction entry.
    let conversation = |e: &[String]| -> Vec<String> {
        e.iter()
            .filter(|t| {
                t.starts_with("message:") && *t != "message:system" || t.contains("compaction")
            })
            .cloned()
            .collect()
    };
    assert_eq!(conversation(&our_entries), conversation(&their_entries));
    assert_eq!(
        conversation(&our_entries),
        [
            "message:user",
            "message:assistant",
            "message:user",
            "message:assistant"
        ]
    );
}

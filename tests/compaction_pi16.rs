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

use pi_ai::Message;
use pi_core::agent::{Agent, AgentConfig, CompactionConfig, CompactionSettings};
use pi_core::compaction::SessionCompactor;
use pi_core::session::SessionWriter;
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

fn is_summary(body: &Value) -> bool {
    body.to_string().contains("context summarization assistant")
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
    let writer = SessionWriter::create(
        &dir.join("sessions"),
        dir,
        &model.provider,
        &model.id,
        "off",
    )
    .unwrap();
    let writer = Arc::new(std::sync::Mutex::new(writer));
    let mut cfg = AgentConfig::new(model, "You are a helper.".into(), Vec::new());
    cfg.retry.enabled = false;
    cfg.compaction = Some(CompactionConfig {
        settings: CompactionSettings {
            keep_recent_tokens: 1,
            reserve_tokens: RESERVE,
            ..CompactionSettings::default()
        },
        compactor: Arc::new(SessionCompactor::new(writer.clone())),
    });
    let agent = Agent::new(cfg, Vec::new());
    let idle = || async {
        tokio::time::timeout(Duration::from_secs(30), agent.wait_for_idle())
            .await
            .expect("the agent did not become idle")
    };
    for text in PROMPTS {
        agent.prompt(vec![Message::user_text(text)]).unwrap();
        idle().await;
        for m in agent.messages().iter().rev().take(2).rev() {
            writer.lock().unwrap().append_message(m).unwrap();
        }
    }
    let (_, _, rx) = agent.compact(Some(FOCUS.to_string())).unwrap();
    rx.await.unwrap().expect("the compaction succeeds");
    idle().await;
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

//! Compaction in the loop, end to end over loopback HTTP: the agent (pi-core) with a real session
//! file, real tools on a temp workspace, and the mock model server answering both the
//! conversation and the summary requests. Cases CTX-03, CMP-04, CMP-06, CMP-07, PAIR-03 and the
//! overflow recovery of the sessions issue.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pi_ai::{Message, StopReason};
use pi_core::agent::{
    Agent, AgentConfig, AgentEvent, CompactionConfig, CompactionSettings, Delivery, EventSink,
    OVERFLOW_RECOVERY_FAILED,
};
use pi_core::compaction::{SessionCompactor, SUMMARIZATION_SYSTEM_PROMPT};
use pi_core::fs::DiskFs;
use pi_core::session::{read_tree, SessionWriter};
use pi_core::tools::default_tools;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{content_text, TempDir};
use serde_json::{json, Value};

/// Persists like the server does (every completed message, flushed at turn end) and keeps
/// every event as JSON.
struct Persist {
    writer: Arc<Mutex<SessionWriter>>,
    events: Mutex<Vec<Value>>,
}

#[async_trait]
impl EventSink for Persist {
    async fn emit(&self, event: AgentEvent) {
        match &event {
            AgentEvent::MessageEnd { message } => {
                self.writer.lock().unwrap().append_message(message).unwrap();
            }
            AgentEvent::TurnEnd { .. } => self.writer.lock().unwrap().sync().unwrap(),
            _ => {}
        }
        self.events
            .lock()
            .unwrap()
            .push(serde_json::to_value(&event).unwrap());
    }
}

impl Persist {
    fn types(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in self.events.lock().unwrap().iter() {
            let t = e["type"].as_str().unwrap().to_string();
            if t == "message_update" {
                continue;
            }
            let t = match t.as_str() {
                "message_end" => format!("message_end:{}", e["message"]["role"].as_str().unwrap()),
                "compaction_start" => format!("compaction_start:{}", e["reason"].as_str().unwrap()),
                _ => t,
            };
            out.push(t);
        }
        out
    }

    fn of_type(&self, t: &str) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == t)
            .cloned()
            .collect()
    }
}

/// The mock without pauses between streamed chunks (summaries here are long).
async fn fast_mock(script: Vec<Step>) -> MockModel {
    MockModel::start_with_delay(script, Duration::ZERO).await
}

fn tmp(name: &str) -> TempDir {
    TempDir::new(&format!("compaction-{name}"))
}

fn is_summary(body: &Value) -> bool {
    body.to_string().contains("context summarization assistant")
}

/// The user text of a summary request.
fn summary_prompt(body: &Value) -> String {
    let msgs = body["messages"].as_array().unwrap();
    let user = msgs.iter().find(|m| m["role"] == "user").unwrap();
    content_text(user)
}

struct Setup {
    agent: Agent,
    sink: Arc<Persist>,
    writer: Arc<Mutex<SessionWriter>>,
    path: PathBuf,
    _sub: pi_core::agent::Subscription,
}

fn setup(
    dir: &Path,
    mock: &MockModel,
    window: u64,
    settings: CompactionSettings,
    system_prompt: String,
) -> Setup {
    let model = mock.completions_model(window, 4_096);
    let sessions = dir.join(".pi/sessions");
    let writer = SessionWriter::create(&sessions, dir, "mock", "mock-1", "off").unwrap();
    let path = writer.path().to_path_buf();
    let writer = Arc::new(Mutex::new(writer));
    let mut cfg = AgentConfig::new(
        model,
        system_prompt,
        default_tools(Arc::new(DiskFs::new(dir.to_path_buf())), None),
    );
    cfg.retry.enabled = false;
    cfg.compaction = Some(CompactionConfig {
        settings,
        compactor: Arc::new(SessionCompactor::new(writer.clone())),
    });
    let agent = Agent::new(cfg, Vec::new());
    let sink = Arc::new(Persist {
        writer: writer.clone(),
        events: Mutex::new(Vec::new()),
    });
    let sub = agent.subscribe(sink.clone());
    Setup {
        agent,
        sink,
        writer,
        path,
        _sub: sub,
    }
}

async fn idle(agent: &Agent) {
    tokio::time::timeout(Duration::from_secs(30), agent.wait_for_idle())
        .await
        .expect("the agent did not become idle");
}

/// The session file's entries as JSON, header excluded.
fn entries(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn big_file(dir: &Path, name: &str, tokens: usize) {
    // ~4 characters per token, in lines like source code.
    let line = "let value = compute(alpha, beta, gamma); // a line of code\n";
    let n = tokens * 4 / line.len();
    std::fs::write(dir.join(name), line.repeat(n)).unwrap();
}

/// CTX-03's scene in `dir`: six files of ~4,000 tokens; a model that reads them one by one,
/// then answers `done reading` and then each of `more`, reporting usage by the request's
/// size, its summary requests answered by `summaries`; window 32,768, reserve 8,192, 20,000
/// kept raw.
async fn ctx03_scene(
    dir: &Path,
    more: &[&str],
    summaries: pi_e2e::mock_model::Responder,
) -> (MockModel, Setup) {
    for i in 1..=6 {
        big_file(dir, &format!("f{i}.rs"), 4_000);
    }
    let mut script: Vec<Step> = (1..=6)
        .map(|i| {
            Step::call(
                &format!("call_{i}"),
                "read",
                json!({"path": format!("f{i}.rs")}),
            )
        })
        .collect();
    script.push(Step::text("done reading"));
    script.extend(more.iter().map(|t| Step::text(t)));
    let mock = fast_mock(script).await;
    mock.set_usage_from_body(true);
    mock.set_responder(summaries);
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 8_192,
        keep_recent_tokens: 20_000,
    };
    let s = setup(
        dir,
        &mock,
        32_768,
        settings,
        "You are a coding agent.".into(),
    );
    (mock, s)
}

/// CTX-03: window 32,768, reserve 8,192; one prompt; six sequential `read` calls of ~4,000
/// tokens each. The threshold is checked before every request, also between the requests of
/// the one turn; the compaction keeps the turn's call/result pairs and the run goes on.
#[tokio::test]
async fn ctx03_threshold_is_checked_before_every_request_mid_turn() {
    let dir = tmp("ctx03");
    let (mock, s) = ctx03_scene(
        &dir,
        &[],
        Arc::new(|body: &Value| {
            is_summary(body)
                .then(|| Step::text("## Goal\nRead six files.\n## Progress\n- [x] read some"))
        }),
    )
    .await;
    s.agent
        .prompt(vec![Message::user_text("read f1.rs … f6.rs one by one")])
        .unwrap();
    idle(&s.agent).await;
    mock.assert_paired();

    let requests = mock.requests();
    let conversation: Vec<&Value> = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| !is_summary(b))
        .collect();
    let summaries = requests.iter().filter(|r| is_summary(&r.body)).count();
    assert_eq!(conversation.len(), 7, "six reads and the final answer");
    assert!(summaries >= 1, "a compaction ran");

    // The compaction happened inside the one run, where Pi 1.6 runs it (`prepareNextTurn`):
    // after a turn's tool results and its `turn_end`, before the next `turn_start`, with no
    // agent_end in between, and the run still ended with the final answer.
    let types = s.sink.types();
    let c = types
        .iter()
        .position(|t| t == "compaction_start:threshold")
        .expect("a threshold compaction");
    assert_eq!(types.iter().filter(|t| *t == "agent_start").count(), 1);
    assert_eq!(types.iter().filter(|t| *t == "agent_end").count(), 1);
    assert_eq!(types[c - 2..c], ["message_end:toolResult", "turn_end"]);
    assert_eq!(types[c + 1], "compaction_end");
    assert_eq!(
        types[c + 2..c + 4],
        ["turn_start", "message_start"],
        "the next turn's request right after it"
    );
    let end = &s.sink.of_type("compaction_end")[0];
    assert_eq!(end["aborted"], false);
    assert_eq!(end["willRetry"], false);
    assert!(end.get("errorMessage").is_none(), "{end}");

    // Every request stays under the limit the threshold protects: window − reserve, counted
    // the way the mock provider counts (body length / 4).
    for (i, b) in conversation.iter().enumerate() {
        let tokens = b.to_string().len() / 4;
        assert!(
            tokens <= 32_768 - 8_192 + 4_500,
            "request {i} has {tokens} tokens"
        );
    }
    // After the compaction, requests carry the summary and every call with its result.
    let last = conversation.last().unwrap();
    assert!(last.to_string().contains("Read six files."));

    // The file: a compaction entry whose kept part starts at an assistant message (never a
    // tool result), and the context rebuilt from the file equals the agent's.
    let e = entries(&s.path);
    let comp = e.iter().find(|e| e["type"] == "compaction").unwrap();
    let first = comp["firstKeptEntryId"].as_str().unwrap();
    let kept = e.iter().find(|e| e["id"] == first).unwrap();
    assert_eq!(kept["message"]["role"], "assistant");
    assert!(comp["tokensBefore"].as_u64().unwrap() > 24_576);
    // The summarised part read the first files, in order; nothing was modified.
    let read = comp["details"]["readFiles"].as_array().unwrap().len();
    assert!(read >= 1);
    let expected: Vec<String> = (1..=read).map(|i| format!("f{i}.rs")).collect();
    assert_eq!(
        comp["details"],
        json!({"readFiles": expected, "modifiedFiles": []})
    );
    let (tree, _) = read_tree(&s.path, false).unwrap();
    assert_eq!(tree.context(None).messages, s.agent.messages());
    let outcome = s.agent.last_outcome().unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Stop);
    drop(s.writer);
}

/// CTX-03 with a steering message sent while the compaction between two turns runs (its
/// summary request held until the message is queued): as Pi 1.6's loop picks up steering
/// queued during the next turn's preparation, the request right after the compaction carries
/// it, and it is delivered once.
#[tokio::test]
async fn a_steer_sent_during_the_compaction_between_turns_goes_with_the_next_request() {
    let dir = tmp("ctx03-steer");
    let gate = Arc::new(tokio::sync::Notify::new());
    let held = gate.clone();
    let (mock, s) = ctx03_scene(
        &dir,
        &["steered answer"],
        Arc::new(move |body: &Value| {
            is_summary(body).then(|| {
                Step::Gate(
                    held.clone(),
                    Box::new(Step::text("## Goal\nRead six files.")),
                )
            })
        }),
    )
    .await;
    s.agent
        .prompt(vec![Message::user_text("read f1.rs … f6.rs one by one")])
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !s
        .sink
        .types()
        .iter()
        .any(|t| t == "compaction_start:threshold")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s.agent.enqueue(
        Message::user_text("STEER: also count the lines"),
        Delivery::Steer,
    );
    gate.notify_one();
    idle(&s.agent).await;
    mock.assert_paired();

    let bodies: Vec<Value> = mock.requests().into_iter().map(|r| r.body).collect();
    let summary = bodies
        .iter()
        .position(is_summary)
        .expect("a summary request");
    let next = &bodies[summary + 1];
    let last_user = next["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap();
    assert_eq!(
        last_user["content"],
        json!([{"type": "text", "text": "STEER: also count the lines"}]),
        "the request after the compaction carries the steer"
    );
    let with_steer = bodies
        .iter()
        .filter(|b| !is_summary(b) && b.to_string().contains("STEER: also count the lines"))
        .count();
    let after = bodies.len() - summary - 1;
    assert_eq!(with_steer, after, "every request after it carries it once");
    let types = s.sink.types();
    let c = types
        .iter()
        .position(|t| t == "compaction_start:threshold")
        .unwrap();
    assert_eq!(
        types[c + 1..c + 5],
        [
            "compaction_end",
            "turn_start",
            "message_start",
            "message_end:user"
        ]
    );
    drop(s.writer);
}

/// CTX-03 / CMP-02 with the default settings on a 32,768-token model: the threshold (16,384)
/// is below `keepRecentTokens` (20,000), so keeping 20,000 raw would keep the whole turn and
/// summarise nothing. The kept tail shrinks to half the room under the threshold, the cut falls
/// inside the one turn at an assistant message (after a call's result, never between them),
/// the turn's start goes into the split-turn summary, every summary request carries a
/// conversation, and no request outgrows the window.
#[tokio::test]
async fn ctx03_default_settings_on_a_32k_window_cut_inside_the_turn() {
    let dir = tmp("ctx03-defaults");
    for i in 1..=6 {
        big_file(&dir, &format!("f{i}.rs"), 4_000);
    }
    let mut script: Vec<Step> = (1..=6)
        .map(|i| {
            Step::call(
                &format!("call_{i}"),
                "read",
                json!({"path": format!("f{i}.rs")}),
            )
        })
        .collect();
    script.push(Step::text("done reading"));
    let mock = fast_mock(script).await;
    mock.set_usage_from_body(true);
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| Step::text("PREFIX-SUMMARY: the user asked to read six files."))
    }));
    assert_eq!(
        CompactionSettings::default(),
        CompactionSettings {
            enabled: true,
            reserve_tokens: 16_384,
            keep_recent_tokens: 20_000,
        }
    );
    let s = setup(
        &dir,
        &mock,
        32_768,
        CompactionSettings::default(),
        "You are a coding agent.".into(),
    );
    s.agent
        .prompt(vec![Message::user_text("read f1.rs … f6.rs one by one")])
        .unwrap();
    idle(&s.agent).await;
    mock.assert_paired();
    let outcome = s.agent.last_outcome().unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Stop);

    // One threshold compaction, done (no error), inside the run.
    let ends = s.sink.of_type("compaction_end");
    assert_eq!(ends.len(), 1, "{ends:#?}");
    assert_eq!(ends[0]["reason"], "threshold");
    assert!(ends[0].get("errorMessage").is_none(), "{}", ends[0]);
    let summary = ends[0]["result"]["summary"].as_str().unwrap();
    let read = ends[0]["result"]["details"]["readFiles"]
        .as_array()
        .unwrap()
        .len();
    assert!((1..6).contains(&read), "{read}");
    let files: Vec<String> = (1..=read).map(|i| format!("f{i}.rs")).collect();
    // Nothing older than the turn: Pi's "No prior history." stands for the history, with no
    // request; the turn's early part has its own summary.
    assert_eq!(
        summary,
        format!(
            "No prior history.\n\n---\n\n**Turn Context (split turn):**\n\nPREFIX-SUMMARY: the user asked to read six files.\n\n<read-files>\n{}\n</read-files>",
            files.join("\n")
        )
    );

    // Exactly one summary request (the turn prefix), and it carries the prompt and the calls.
    let requests = mock.requests();
    let prompts: Vec<String> = requests
        .iter()
        .filter(|r| is_summary(&r.body))
        .map(|r| summary_prompt(&r.body))
        .collect();
    assert_eq!(prompts.len(), 1);
    assert!(
        prompts[0].starts_with("# Conversation\n[User]: read f1.rs … f6.rs one by one\n"),
        "{}",
        &prompts[0][..200]
    );
    assert!(!prompts[0].contains("# Conversation\n\n\n# Instructions"));

    // The kept part starts at an assistant message whose calls' results are all kept.
    let e = entries(&s.path);
    let comp = e.iter().find(|e| e["type"] == "compaction").unwrap();
    let first = comp["firstKeptEntryId"].as_str().unwrap();
    let kept = e.iter().find(|e| e["id"] == first).unwrap();
    assert_eq!(kept["message"]["role"], "assistant");
    assert_eq!(
        kept["message"]["content"][0]["id"],
        format!("call_{}", read + 1)
    );

    // Seven conversation requests (six reads and the answer); none near the window (the trial
    // saw a 102 KB request), counted as the mock provider counts (body length / 4).
    let conversation: Vec<&Value> = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| !is_summary(b))
        .collect();
    assert_eq!(conversation.len(), 7);
    for (i, b) in conversation.iter().enumerate() {
        let tokens = b.to_string().len() / 4;
        assert!(tokens < 32_768 - 4_096, "request {i} has {tokens} tokens");
    }
    let (tree, _) = read_tree(&s.path, false).unwrap();
    assert_eq!(tree.context(None).messages, s.agent.messages());
    drop(s.writer);
}

/// No summary request with nothing to summarise (CTX-01's "nothing can be cut"): a one-turn
/// session on a large window keeps all of it raw, so compacting it is refused in words and the
/// model is not asked; nothing is written.
#[tokio::test]
async fn compaction_with_nothing_older_than_the_kept_part_sends_no_summary_request() {
    let dir = tmp("all-kept");
    let mock = fast_mock(vec![Step::text("Hello there.")]).await;
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| Step::text("SUMMARY"))
    }));
    let s = setup(
        &dir,
        &mock,
        200_000,
        CompactionSettings::default(),
        "sys".into(),
    );
    s.agent.prompt(vec![Message::user_text("hi")]).unwrap();
    idle(&s.agent).await;
    let (_, _, rx) = s.agent.compact(None).unwrap();
    let err = rx.await.unwrap().unwrap_err();
    idle(&s.agent).await;
    assert_eq!(
        err,
        pi_core::compaction::CompactionError::AllKept {
            what: "the conversation".into(),
            messages: 2,
            tokens: 4,
            keep_recent_tokens: 20_000,
        }
    );
    assert_eq!(
        s.sink.of_type("compaction_end")[0]["errorMessage"],
        "Compaction failed: Nothing to compact: the conversation (2 messages, about 4 tokens) fit in the recent part kept as it is (up to 20000 tokens, compaction.keepRecentTokens), so there is nothing older to summarise; no summary request was sent"
    );
    assert_eq!(mock.requests().len(), 1, "only the prompt's request");
    assert!(entries(&s.path).iter().all(|e| e["type"] != "compaction"));
}

/// Overflow from the provider: the failed response stays in the file, one compaction runs, the
/// request is retried once and succeeds. A second overflow in the same run is not retried again.
#[tokio::test]
async fn overflow_compacts_once_and_retries_the_turn() {
    let dir = tmp("overflow");
    let overflow = || {
        Step::Raw {
        status: 400,
        content_type: "application/json".into(),
        body: json!({"error": {"message": "This model's maximum context length is 4000 tokens. However, your messages resulted in 9000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}).to_string(),
    }
    };
    let mock = fast_mock(vec![
        Step::text("first answer"),
        overflow(),
        Step::text("recovered"),
        Step::text("third answer"),
        overflow(),
        overflow(),
    ])
    .await;
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| Step::text("SUMMARY-OF-EARLIER-WORK"))
    }));
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 500,
        keep_recent_tokens: 10,
    };
    // A window that leaves an answer its floor (Pi 1.6's clamp keeps 4,096 of it free).
    let s = setup(&dir, &mock, 9_000, settings, "sys".into());
    let long = |w: &str| format!("{w} ").repeat(400);
    s.agent
        .prompt(vec![Message::user_text(long("one"))])
        .unwrap();
    idle(&s.agent).await;
    s.agent
        .prompt(vec![Message::user_text(long("two"))])
        .unwrap();
    idle(&s.agent).await;
    assert_eq!(
        s.agent.last_outcome().unwrap().stop_reason,
        StopReason::Stop
    );
    let ends = s.sink.of_type("compaction_end");
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["reason"], "overflow");
    assert_eq!(ends[0]["willRetry"], true);
    assert_eq!(ends[0]["result"]["summary"], "SUMMARY-OF-EARLIER-WORK");
    // The file keeps the failed response, then the compaction, then the retried answer.
    let e = entries(&s.path);
    let kinds: Vec<String> = e
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "message" => format!(
                "{}:{}",
                e["message"]["role"].as_str().unwrap(),
                e["message"]["stopReason"].as_str().unwrap_or("")
            ),
            t => t.to_string(),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "model_change",
            "thinking_level_change",
            "user:",
            "assistant:stop",
            "user:",
            "assistant:error",
            "compaction",
            "assistant:stop"
        ]
    );
    // The retried request carries the summary and not the failed response.
    let reqs: Vec<Value> = mock
        .requests()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| !is_summary(b))
        .collect();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[2].to_string().contains("SUMMARY-OF-EARLIER-WORK"));

    // Third prompt: the answer, then two overflows in a row in the fourth run: one recovery
    // only, then Pi's message, and the run ends with the error.
    s.agent
        .prompt(vec![Message::user_text(long("three"))])
        .unwrap();
    idle(&s.agent).await;
    s.agent
        .prompt(vec![Message::user_text(long("four"))])
        .unwrap();
    idle(&s.agent).await;
    let ends = s.sink.of_type("compaction_end");
    assert_eq!(ends.len(), 3, "{ends:#?}");
    assert_eq!(ends[1]["willRetry"], true);
    assert_eq!(ends[2]["errorMessage"], OVERFLOW_RECOVERY_FAILED);
    let summaries = mock
        .requests()
        .iter()
        .filter(|r| is_summary(&r.body))
        .count();
    assert_eq!(summaries, 2, "one summary per recovery, no loop");
    assert_eq!(
        s.agent.last_outcome().unwrap().stop_reason,
        StopReason::Error
    );
}

/// CMP-04: window 24,000, system prompt 12,000 tokens, threshold 11,700 (reserve 12,300), a
/// summariser that answers twice as much as it is given; five prompts of ~70 tokens, 80 kept
/// raw. The system prompt alone is over the threshold, so every compaction fails with the
/// clear error (in `compaction_end`), at most one is tried per user turn and nothing is
/// written; the context as it is still fits the window, so each turn goes on uncompacted and
/// is answered (a failed automatic compaction does not cost the turn). The first turn has
/// nothing older than the kept part (no compaction told, as Pi 1.6); once the conversation
/// outgrows it one is tried a turn: after a run (Pi 1.6's `_handlePostAgentRun`), then
/// before each later prompt (`_prepareRun`), which then tries none after its run.
#[tokio::test]
async fn cmp04_no_compaction_loop_when_the_system_prompt_does_not_fit() {
    let dir = tmp("cmp04");
    let mock = MockModel::start_with_delay(vec![], Duration::ZERO).await;
    mock.set_usage_from_body(true);
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| Step::Text(summary_prompt(body).repeat(2)))
    }));
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 12_300,
        keep_recent_tokens: 80,
    };
    // 48,000 chars ≈ 12,000 tokens. The window leaves room for the answers' floor after Pi
    // 1.6's estimate (the provider's usage of the prompt and the tools).
    let system = "Follow the house rules. ".repeat(2_000);
    let s = setup(&dir, &mock, 24_000, settings, system);
    let mut tried = 0;
    for i in 0..5 {
        let prompt = format!("turn {i}: {}", "please go on with it. ".repeat(12));
        s.agent.prompt(vec![Message::user_text(prompt)]).unwrap();
        idle(&s.agent).await;
        let o = s.agent.last_outcome().unwrap();
        assert_eq!(o.stop_reason, StopReason::Stop, "{o:?}");
        let ends = s.sink.of_type("compaction_end");
        assert!(ends.len() <= tried + 1, "at most one a turn: {ends:#?}");
        assert!(i > 0 || ends.is_empty(), "none on the first turn");
        if ends.len() == tried {
            continue;
        }
        tried = ends.len();
        let end = ends.last().unwrap();
        let msg = end["errorMessage"].as_str().unwrap();
        assert!(
            msg.starts_with("Auto-compaction failed: ")
                && (msg.contains("would not shrink the context")
                    || (msg.contains("does not fit even after compaction")
                        && msg.contains("11700"))),
            "{msg}"
        );
    }
    // Once the conversation outgrows the kept part, a try a turn.
    assert!(tried >= 2, "{tried}");
    let starts = s.sink.of_type("compaction_start");
    assert_eq!(starts.len(), tried, "every try told, none started twice");
    let answered = mock
        .requests()
        .iter()
        .filter(|r| !is_summary(&r.body))
        .count();
    assert_eq!(answered, 5, "every turn's request went out uncompacted");
    assert!(entries(&s.path).iter().all(|e| e["type"] != "compaction"));
}

/// A window at most the reserve (12,000 with Pi's default 16,384): the threshold is 0, so
/// every answer is past it, but no compaction can bring a context under it. As Pi 1.6 the
/// compaction keeps `keepRecentTokens` (20,000) raw: with nothing older than that, no summary
/// request and no compaction told — an answer costs one request, not two.
#[tokio::test]
async fn a_window_at_most_the_reserve_sends_no_summary_request_after_each_answer() {
    let dir = tmp("small-window");
    let mock = fast_mock(vec![Step::text("hi there"), Step::text("again")]).await;
    mock.set_usage_from_body(true);
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 16_384,
        keep_recent_tokens: 20_000,
    };
    let s = setup(
        &dir,
        &mock,
        12_000,
        settings,
        "You are a coding agent.".into(),
    );
    for prompt in ["hello", "and again"] {
        s.agent.prompt(vec![Message::user_text(prompt)]).unwrap();
        idle(&s.agent).await;
        assert_eq!(
            s.agent.last_outcome().unwrap().stop_reason,
            StopReason::Stop
        );
    }
    assert_eq!(mock.requests().len(), 2, "one request an answer");
    assert!(mock.requests().iter().all(|r| !is_summary(&r.body)));
    assert_eq!(s.sink.of_type("compaction_start"), Vec::<Value>::new());
}

/// CMP-04, second half: a fitting system prompt, a summariser that doubles its input. Each
/// user turn compacts at most once; summary requests ask for a bounded answer (80 % of the
/// reserve) and an over-long answer is cut to that bound, so summaries cannot grow without end.
#[tokio::test]
async fn cmp04_summaries_are_bounded_and_compaction_runs_at_most_once_per_turn() {
    let dir = tmp("cmp04b");
    let mock = fast_mock(
        (0..5)
            .map(|i| Step::text(&format!("answer {i} ").repeat(400)))
            .collect(),
    )
    .await;
    mock.set_usage_from_body(true);
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| {
            Step::Text(
                summary_prompt(body)
                    .repeat(2)
                    .chars()
                    .take(16_000)
                    .collect(),
            )
        })
    }));
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 6_000,
        keep_recent_tokens: 500,
    };
    // Threshold 4,000 as on a 6,000 window with 2,000 reserved, with room for the answers'
    // floor after Pi 1.6's margin of 4,096.
    let s = setup(&dir, &mock, 10_000, settings, "sys".into());
    // Compactions per prompt: before it, between its turns and after its run (Pi 1.6's
    // three places), counted from one prompt's send to its run's settling.
    let mut per_prompt = Vec::new();
    for i in 0..5 {
        let before = s.sink.of_type("compaction_start").len();
        s.agent
            .prompt(vec![Message::user_text(format!("turn {i}"))])
            .unwrap();
        idle(&s.agent).await;
        per_prompt.push(s.sink.of_type("compaction_start").len() - before);
    }
    assert!(per_prompt.iter().all(|n| *n <= 1), "{per_prompt:?}");
    assert!(per_prompt.iter().sum::<usize>() >= 1);
    // Pi 1.6's limit: its summaries ask the model's `maxTokens`, 4,096 here, clamped to the
    // window's room by pi-ai's `clampMaxTokensToContext`.
    for r in mock.requests().iter().filter(|r| is_summary(&r.body)) {
        let limit = pi16_summary_limit(10_000, 4_096, &r.body);
        assert_eq!(r.body["max_completion_tokens"], limit);
    }
    // The mock ignores that limit (1 token here: the summarised conversation fills the
    // window) and answers up to 16,000 characters, under the 4 × 4,096 a summary's text is cut
    // at: the summary would not shrink the context, so the compaction fails with the figures,
    // writes nothing, and is not tried again in the turn (no loop).
    let ends = s.sink.of_type("compaction_end");
    assert_eq!(ends.len(), per_prompt.iter().sum::<usize>(), "{ends:#?}");
    for end in &ends {
        let error = end["errorMessage"].as_str().unwrap();
        assert!(
            error.starts_with("Auto-compaction failed: compaction would not shrink the context: its messages are about "),
            "{error}"
        );
        assert!(end.get("result").is_none_or(Value::is_null), "{end}");
    }
    assert!(!entries(&s.path).iter().any(|e| e["type"] == "compaction"));
}

/// The output limit Pi 1.6 asks for a summary request on a chat-completions `body` (its
/// `buildBaseOptions` → `clampMaxTokensToContext(model, context, model.maxTokens)`, pi-ai
/// `api/simple-options.js`): the input estimated as `estimateContextTokens` does (each
/// message's UTF-16 length / 3.5, rounded up), a margin of max(4,096, 15 % of it); under
/// 32,768 left, the window less the input and 4,096, at most 32,768; at least 1.
fn pi16_summary_limit(window: i64, model_max: i64, body: &Value) -> i64 {
    let input: i64 = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                c => c[0]["text"].as_str().unwrap().to_string(),
            };
            (text.encode_utf16().count() as i64 * 2 + 6) / 7
        })
        .sum();
    let margin = 4_096.max((input * 15 + 99) / 100);
    let mut room = window - input - margin;
    if room < 32_768 {
        room = 32_768.min(window - input - 4_096);
    }
    model_max.min(room.max(1))
}

/// Pi 1.6's `getSummarizationFailure`: a summary answer stopped at its output limit
/// (`finish_reason: "length"`) is partial, so the compaction fails with Pi's words and writes
/// nothing; the summary is not asked again.
#[tokio::test]
async fn a_summary_stopped_by_length_fails_the_compaction_and_writes_nothing() {
    let dir = tmp("summary-length");
    let mock = fast_mock(vec![Step::text("One."), Step::text("Two.")]).await;
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| {
            let chunk = |delta: Value, finish: Value| {
                format!(
                    "data: {}\n\n",
                    json!({"id": "c1", "object": "chat.completion.chunk", "model": "mock-1",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                )
            };
            Step::Raw {
                status: 200,
                content_type: "text/event-stream".into(),
                body: [
                    chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                    chunk(json!({"content": "## Goal\nhalf a summ"}), Value::Null),
                    chunk(json!({}), json!("length")),
                    "data: [DONE]\n\n".to_string(),
                ]
                .concat(),
            }
        })
    }));
    let settings = CompactionSettings {
        keep_recent_tokens: 1,
        ..CompactionSettings::default()
    };
    let s = setup(&dir, &mock, 200_000, settings, "sys".into());
    for text in ["First question?", "Second question?"] {
        s.agent.prompt(vec![Message::user_text(text)]).unwrap();
        idle(&s.agent).await;
    }
    let (_, _, rx) = s.agent.compact(None).unwrap();
    let err = rx.await.unwrap().unwrap_err();
    idle(&s.agent).await;
    assert_eq!(
        err.to_string(),
        "Summarization failed: generation hit the token cap and the summary is incomplete"
    );
    assert!(!entries(&s.path).iter().any(|e| e["type"] == "compaction"));
    // The history request only: the summaries are asked one after the other (Pi 1.6's
    // `compact`), and the failed first one ends the compaction before the turn prefix's.
    let asked = mock
        .requests()
        .iter()
        .filter(|r| is_summary(&r.body))
        .count();
    assert_eq!(asked, 1);
}

/// CMP-07 and repeated compaction: custom instructions appear in every summary request
/// (history and split-turn prefix); the next compaction folds in the previous summary; the
/// system prompt is sent unchanged after compaction (never summarised away).
#[tokio::test]
async fn cmp07_instructions_reach_every_summary_request() {
    let dir = tmp("cmp07");
    for i in 1..=8 {
        std::fs::write(
            dir.join(format!("n{i}.txt")),
            format!("note {i}\n").repeat(40),
        )
        .unwrap();
    }
    let mut script: Vec<Step> = (1..=8)
        .map(|i| {
            Step::call(
                &format!("c{i}"),
                "read",
                json!({"path": format!("n{i}.txt")}),
            )
        })
        .collect();
    script.push(Step::text("read all eight"));
    script.push(Step::call("c9", "read", json!({"path": "n1.txt"})));
    script.push(Step::text("read one again"));
    script.push(Step::text("after the second compaction"));
    let mock = fast_mock(script).await;
    let n = Arc::new(Mutex::new(0));
    let counter = n.clone();
    mock.set_responder(Arc::new(move |body: &Value| {
        if !is_summary(body) {
            return None;
        }
        let mut n = counter.lock().unwrap();
        *n += 1;
        Some(Step::Text(format!("SUMMARY-{n}")))
    }));
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 1_000,
        keep_recent_tokens: 30,
    };
    let s = setup(&dir, &mock, 200_000, settings, "SYSTEM-PROMPT-TEXT".into());
    s.agent
        .prompt(vec![Message::user_text("read n1.txt to n8.txt")])
        .unwrap();
    idle(&s.agent).await;
    let (_, _, rx) = s
        .agent
        .compact(Some("always reply with the word TRIPWIRE".into()))
        .unwrap();
    let first = rx.await.unwrap().unwrap();
    idle(&s.agent).await;
    s.agent
        .prompt(vec![Message::user_text("read n1.txt once more")])
        .unwrap();
    idle(&s.agent).await;
    let (_, _, rx) = s.agent.compact(Some("mention TRIPWIRE".into())).unwrap();
    let second = rx.await.unwrap().unwrap();
    idle(&s.agent).await;
    s.agent.prompt(vec![Message::user_text("go on")]).unwrap();
    idle(&s.agent).await;

    let summaries: Vec<String> = mock
        .requests()
        .iter()
        .filter(|r| is_summary(&r.body))
        .map(|r| summary_prompt(&r.body))
        .collect();
    assert!(summaries.len() >= 3, "{}", summaries.len());
    for p in &summaries {
        assert!(p.contains("TRIPWIRE"), "instructions missing in: {p}");
        assert!(!p.contains("SYSTEM-PROMPT-TEXT"));
    }
    // The first compaction split the long turn: history + prefix summaries, merged.
    assert!(
        first.summary.contains("**Turn Context (split turn):**"),
        "{}",
        first.summary
    );
    assert!(
        first.summary.contains("<read-files>\nn1.txt"),
        "{}",
        first.summary
    );
    // The second folds in the first.
    let update = summaries
        .iter()
        .find(|p| p.contains("<previous-summary>"))
        .expect("an update request");
    assert!(update.contains(&first.summary));
    assert!(update.contains("NEW conversation messages"));
    assert!(second.summary.starts_with("SUMMARY-"));
    // The request after the compactions: the original system prompt, the newest summary first.
    let last = mock.requests().last().unwrap().body.clone();
    assert!(!is_summary(&last));
    assert_eq!(last["messages"][0]["content"], "SYSTEM-PROMPT-TEXT");
    let text = last.to_string();
    assert!(text.contains(&second.summary.replace('\n', "\\n")));
    assert!(
        !text.contains("SUMMARY-1\\n\\n---"),
        "the older summary is folded, not repeated"
    );
    mock.assert_paired();
    // Sanity: the file is SystemPrompt-free and every compaction entry is Pi-shaped.
    for e in entries(&s.path)
        .iter()
        .filter(|e| e["type"] == "compaction")
    {
        let keys: Vec<&String> = e.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            vec![
                "type",
                "id",
                "parentId",
                "timestamp",
                "summary",
                "firstKeptEntryId",
                "tokensBefore",
                "details",
                "usage",
                "fromHook"
            ]
        );
    }
    assert_eq!(SUMMARIZATION_SYSTEM_PROMPT.lines().next().unwrap(), "You are a context summarization assistant. Your task is to read a conversation between a user and an AI assistant, then produce a structured summary following the exact format specified.");
}

/// PAIR-03: while a compaction's summary request hangs, a prompt is refused as busy and a
/// queued follow-up waits; when the summary arrives the compaction is written, then the
/// follow-up runs (a tool call and its result) and every entry is saved in order.
#[tokio::test]
async fn pair03_prompts_during_compaction_are_refused_or_queued_never_lost() {
    let dir = tmp("pair03");
    std::fs::write(dir.join("a.txt"), "alpha\n").unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    let mock = fast_mock(vec![
        Step::text("hi"),
        Step::text("hello again"),
        Step::call("call_ls", "ls", json!({})),
        Step::text("a.txt is there"),
    ])
    .await;
    let g = gate.clone();
    mock.set_responder(Arc::new(move |body: &Value| {
        is_summary(body).then(|| Step::Gate(g.clone(), Box::new(Step::text("SUMMARY"))))
    }));
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 1_000,
        keep_recent_tokens: 10,
    };
    let s = setup(&dir, &mock, 200_000, settings, "sys".into());
    s.agent
        .prompt(vec![Message::user_text("hello ".repeat(300))])
        .unwrap();
    idle(&s.agent).await;
    s.agent
        .prompt(vec![Message::user_text("again ".repeat(300))])
        .unwrap();
    idle(&s.agent).await;
    let (_, _, rx) = s.agent.compact(None).unwrap();
    // Wait until the summary request is in flight.
    for _ in 0..200 {
        if mock.requests().iter().any(|r| is_summary(&r.body)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(s.agent.is_streaming(), "busy while compacting");
    assert!(s.agent.prompt(vec![Message::user_text("ls")]).is_err());
    s.agent
        .enqueue(Message::user_text("ls please"), Delivery::FollowUp);
    gate.notify_one();
    let result = rx.await.unwrap().unwrap();
    assert_eq!(result.summary, "SUMMARY");
    idle(&s.agent).await;
    mock.assert_paired();
    let e = entries(&s.path);
    let tail: Vec<String> = e[e.len() - 5..]
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "message" => e["message"]["role"].as_str().unwrap().to_string(),
            t => t.to_string(),
        })
        .collect();
    assert_eq!(
        tail,
        vec!["compaction", "user", "assistant", "toolResult", "assistant"]
    );
    // Each entry's parent is the one before it: one unbroken path.
    for w in e.windows(2) {
        assert_eq!(w[1]["parentId"], w[0]["id"]);
    }
    let (tree, _) = read_tree(&s.path, false).unwrap();
    let ctx = tree.context(None).messages;
    assert_eq!(ctx, s.agent.messages());
    assert!(matches!(&ctx[0], Message::User(_)));
}

/// CMP-06: a compaction asked for while a run streams waits until the run settles; the live
/// turn is never aborted.
#[tokio::test]
async fn cmp06_compaction_requested_mid_run_is_deferred() {
    let dir = tmp("cmp06");
    std::fs::write(dir.join("a.txt"), "alpha\n".repeat(200)).unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    let mock = fast_mock(vec![
        Step::text(&"first ".repeat(300)),
        Step::call("call_r", "read", json!({"path": "a.txt"})),
        Step::Gate(gate.clone(), Box::new(Step::text("the file says alpha"))),
    ])
    .await;
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| Step::text("SUMMARY"))
    }));
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 1_000,
        keep_recent_tokens: 10,
    };
    let s = setup(&dir, &mock, 200_000, settings, "sys".into());
    s.agent.prompt(vec![Message::user_text("hi")]).unwrap();
    idle(&s.agent).await;
    s.agent
        .prompt(vec![Message::user_text("read a.txt")])
        .unwrap();
    for _ in 0..200 {
        if mock.requests().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_, _, rx) = s.agent.compact(None).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !mock.requests().iter().any(|r| is_summary(&r.body)),
        "no summary while the run is live"
    );
    gate.notify_one();
    let result = rx.await.unwrap().unwrap();
    idle(&s.agent).await;
    let types = s.sink.types();
    let end = types.iter().rposition(|t| t == "agent_end").unwrap();
    let start = types
        .iter()
        .position(|t| t == "compaction_start:manual")
        .unwrap();
    assert!(start > end, "{types:?}");
    let last_assistant = s
        .agent
        .messages()
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Assistant(a) => Some(a.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(last_assistant.stop_reason, StopReason::Stop);
    assert_eq!(
        pi_ai::join_text(&last_assistant.content),
        "the file says alpha"
    );
    assert!(result.summary.starts_with("SUMMARY"), "{}", result.summary);
}

/// `agent/compact` through the real server over stdio: the answer is the written
/// `compaction` entry's fields; while it runs, a plain prompt is refused as busy and a
/// follow-up is queued and runs after it; bad params and unknown sessions get clear errors.
#[tokio::test]
async fn lsp_agent_compact_answers_with_the_entry_and_queues_prompts() {
    use pi_e2e::lsp_client::{start_with_mock, EditorBehavior};
    let ws = TempDir::new("lsp-compact");
    let gate = Arc::new(tokio::sync::Notify::new());
    let mock = fast_mock(vec![
        Step::text("first answer"),
        Step::text("second answer"),
        Step::text("answer to the follow-up"),
    ])
    .await;
    let g = gate.clone();
    mock.set_responder(Arc::new(move |body: &Value| {
        is_summary(body).then(|| Step::Gate(g.clone(), Box::new(Step::text("LSP-SUMMARY"))))
    }));
    std::fs::create_dir_all(ws.path().join(".pi")).unwrap();
    std::fs::write(
        ws.path().join(".pi/settings.json"),
        json!({"compaction": {"keepRecentTokens": 10}}).to_string(),
    )
    .unwrap();
    // Project settings load only in a trusted workspace.
    let mut c = start_with_mock(
        ws.path(),
        &mock,
        EditorBehavior {
            initialization_options: Some(json!({"workspaceTrusted": true})),
            ..Default::default()
        },
    )
    .await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "alpha ".repeat(300), "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(20)).await;
    c.request(
        "agent/prompt",
        json!({"text": "beta ".repeat(300), "sessionId": sid}),
    )
    .await
    .unwrap();
    c.run_until_end(Duration::from_secs(20)).await;

    let e = c
        .request("agent/compact", json!({"sessionId": 7}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    assert!(
        e["message"].as_str().unwrap().starts_with("sessionId:"),
        "{e}"
    );
    let e = c
        .request("agent/compact", json!({"sessionId": "nope"}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31002);

    let pending = c
        .send_request(
            "agent/compact",
            json!({"sessionId": sid, "instructions": "keep the word TRIPWIRE"}),
        )
        .await;
    for _ in 0..500 {
        if mock.requests().iter().any(|r| is_summary(&r.body)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let busy = c
        .request("agent/prompt", json!({"text": "ls", "sessionId": sid}))
        .await
        .unwrap_err();
    assert_eq!(busy["code"], -31001);
    let queued = c
        .request(
            "agent/prompt",
            json!({"text": "after compaction", "sessionId": sid, "streamingBehavior": "followUp"}),
        )
        .await
        .unwrap();
    assert_eq!(queued["queued"], true);
    gate.notify_one();
    let resp = tokio::time::timeout(Duration::from_secs(20), pending)
        .await
        .unwrap()
        .unwrap();
    let result = &resp["result"];
    assert_eq!(result["summary"], "LSP-SUMMARY", "{resp}");
    assert_eq!(
        result["details"],
        json!({"readFiles": [], "modifiedFiles": []})
    );
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert!(events.iter().any(|e| e["event"]["type"] == "message_end"
        && pi_ai::join_text(
            &serde_json::from_value::<Vec<pi_ai::ContentBlock>>(
                e["event"]["message"]["content"].clone()
            )
            .unwrap_or_default()
        ) == "answer to the follow-up"));
    let summary_req = mock
        .requests()
        .into_iter()
        .find(|r| is_summary(&r.body))
        .unwrap();
    assert!(summary_prompt(&summary_req.body).contains("Additional focus: keep the word TRIPWIRE"));
    // The file: compaction with the id the answer named, then the follow-up's turn.
    let file = std::fs::read_dir(ws.path().join(".pi/sessions"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let e = entries(&file);
    let kinds: Vec<&str> = e
        .iter()
        .map(|e| {
            e["message"]["role"]
                .as_str()
                .unwrap_or_else(|| e["type"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "model_change",
            "thinking_level_change",
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "compaction",
            "user",
            "assistant"
        ]
    );
    assert_eq!(e[7]["firstKeptEntryId"], result["firstKeptEntryId"]);
    assert_eq!(
        e[7]["firstKeptEntryId"], e[5]["id"],
        "the second prompt is kept raw"
    );
    c.shutdown().await;
}

/// An overflow with nothing to compact (one short prompt: nothing older to summarise) leaves
/// the failed response out of the live context, as the session's recorder leaves it out of
/// the stored one with a `context_edit` (headless.rs; Pi 1.6's `_omitRecoveryAttempt` happens
/// before the compaction and nothing puts the attempt back). As Pi 1.6 (`_runAutoCompaction`
/// when `prepareCompaction` prepares nothing), no compaction starts and no compaction event
/// is sent: the run ends (`agent_end`) before the attempt is left out, and settles. The run's
/// outcome is the provider's error, the response is in the file, and the agent's context is
/// the prompt alone.
#[tokio::test]
async fn a_failed_overflow_compaction_leaves_the_response_out_of_the_live_context() {
    let dir = tmp("overflow-fails");
    let mock = fast_mock(vec![Step::Raw {
        status: 400,
        content_type: "application/json".into(),
        body: json!({"error": {"message": "This model's maximum context length is 4000 tokens. However, your messages resulted in 9000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}).to_string(),
    }])
    .await;
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 500,
        keep_recent_tokens: 10,
    };
    // A window that leaves an answer its floor (Pi 1.6's clamp keeps 4,096 of it free).
    let s = setup(&dir, &mock, 9_000, settings, "sys".into());
    let prompt = Message::user_text("hi");
    s.agent.prompt(vec![prompt.clone()]).unwrap();
    idle(&s.agent).await;
    assert_eq!(
        s.agent.last_outcome().unwrap().stop_reason,
        StopReason::Error
    );
    let e = entries(&s.path);
    let kinds: Vec<String> = e
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["type"].as_str().unwrap(),
                e["message"]["stopReason"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "model_change:",
            "thinking_level_change:",
            "message:",
            "message:error"
        ]
    );
    assert_eq!(
        s.sink.types(),
        [
            "agent_start",
            "turn_start",
            "message_start",
            "message_end:user",
            "message_start",
            "message_end:assistant",
            "turn_end",
            "agent_end",
            "attempt_left_out",
            "agent_settled"
        ]
    );
    assert_eq!(s.agent.messages(), [prompt]);
    drop(s.writer);
}

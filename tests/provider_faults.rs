//! Provider faults in the loop, end to end over loopback HTTP: the agent (pi-core) with a real
//! session file and real tools on a temp workspace, the mock model server sending cut streams
//! and tool-only summaries. Issue cases 18.10 (output budget), 18.11 (empty summaries) and
//! 19.1 (a cut stream is retried; its half-streamed call never runs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pi_ai::{Message, Model, StopReason};
use pi_core::agent::{
    Agent, AgentConfig, AgentEvent, CompactionConfig, CompactionSettings, EventSink, Tool,
};
use pi_core::compaction::SessionCompactor;
use pi_core::fs::DiskFs;
use pi_core::harness::Recorder;
use pi_core::session::SessionWriter;
use pi_core::tools::default_tools;
use pi_e2e::mock_model::{MockModel, Step};
use serde_json::{json, Value};

/// Persists as the server does (its [`Recorder`]; an attempt left out of the context written
/// as the session writes it) and keeps every event as JSON.
struct Persist {
    recorder: Recorder,
    events: Mutex<Vec<Value>>,
}

#[async_trait]
impl EventSink for Persist {
    async fn emit(&self, event: AgentEvent) {
        if matches!(event, AgentEvent::AttemptLeftOut) {
            self.recorder.leave_out().unwrap();
        }
        self.recorder.record_stamped(&event, None, None).unwrap();
        self.events
            .lock()
            .unwrap()
            .push(serde_json::to_value(&event).unwrap());
    }
}

impl Persist {
    /// Every event's type, in order.
    fn types(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap_or("").to_string())
            .collect()
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

/// A temporary folder for one test, removed when the test ends.
fn tmp(name: &str) -> pi_e2e::TempDir {
    pi_e2e::TempDir::new(&format!("faults-{name}"))
}

struct Setup {
    agent: Agent,
    sink: Arc<Persist>,
    path: PathBuf,
    _sub: pi_core::agent::Subscription,
}

fn setup(
    dir: &Path,
    mock: &MockModel,
    window: u64,
    tools: Vec<Arc<dyn Tool>>,
    compaction: Option<CompactionSettings>,
) -> Setup {
    let mut model = mock.completions_model(window, 4_096);
    model.input = vec!["text".into(), "image".into()];
    let writer =
        SessionWriter::create(&dir.join(".pi/sessions"), dir, "mock", "mock-1", "off").unwrap();
    let path = writer.path().to_path_buf();
    let writer = Arc::new(Mutex::new(writer));
    let mut cfg = AgentConfig::new(model, "sys".into(), tools);
    cfg.retry.policy.base_delay = Duration::from_millis(10);
    cfg.compaction = compaction.map(|settings| CompactionConfig {
        settings,
        compactor: Arc::new(SessionCompactor::new(writer.clone())),
    });
    let agent = Agent::new(cfg, Vec::new());
    let sink = Arc::new(Persist {
        recorder: Recorder::new(writer.clone()),
        events: Mutex::new(Vec::new()),
    });
    let sub = agent.subscribe(sink.clone());
    Setup {
        agent,
        sink,
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

/// `(role, stopReason, text or errorMessage)` of every message entry.
fn messages(path: &Path) -> Vec<Value> {
    entries(path)
        .iter()
        .filter(|e| e["type"] == "message")
        .map(|e| {
            let m = &e["message"];
            let text = match m["role"].as_str().unwrap() {
                "assistant" if m["stopReason"] == "error" => m["errorMessage"].clone(),
                _ => json!(m["content"]
                    .as_array()
                    .map(|a| a
                        .iter()
                        .filter_map(|b| b["text"].as_str())
                        .collect::<String>())
                    .unwrap_or_else(|| m["content"].as_str().unwrap_or("").to_string())),
            };
            json!([m["role"], m["stopReason"], text])
        })
        .collect()
}

fn sse_body(chunks: &[Value]) -> String {
    chunks
        .iter()
        .map(|c| format!("data: {c}\n\n"))
        .collect::<String>()
}

/// Case 19.1: a chat-completions stream cut inside a `write` call's arguments is a retryable
/// error: the loop retries, the half call never runs (no file is written), and the retry's
/// answer ends the turn.
#[tokio::test]
async fn a_cut_stream_is_retried_and_its_half_call_never_runs() {
    let guard = tmp("cut");
    let dir = guard.path();
    let call = |args: &str| json!({"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_w","type":"function","function":{"name":"write","arguments":args}}]},"finish_reason":null}]});
    // The body ends inside the arguments: no finish_reason, no [DONE].
    let cut = sse_body(&[
        json!({"id":"c1","choices":[{"index":0,"delta":{"content":"Writing."},"finish_reason":null}]}),
        call("{\"path\":\"out.txt\",\"content\":\"first half"),
    ]);
    let mock = MockModel::start(vec![
        Step::Raw {
            status: 200,
            content_type: "text/event-stream".into(),
            body: cut,
        },
        Step::text("Done after the retry."),
    ])
    .await;
    let tools = default_tools(Arc::new(DiskFs::new(dir.to_path_buf())), None);
    let s = setup(dir, &mock, 128_000, tools, None);
    s.agent
        .prompt(vec![Message::user_text("write out.txt")])
        .unwrap();
    idle(&s.agent).await;
    assert!(!dir.join("out.txt").exists());
    assert_eq!(s.sink.of_type("tool_execution_start"), Vec::<Value>::new());
    assert_eq!(
        messages(&s.path),
        vec![
            json!(["user", null, "write out.txt"]),
            json!([
                "assistant",
                "error",
                "stream ended before the response was complete (no finish_reason or [DONE])"
            ]),
            json!(["assistant", "stop", "Done after the retry."]),
        ]
    );
    let retries: Vec<Value> = s
        .sink
        .of_type("auto_retry_start")
        .iter()
        .map(|e| json!([e["attempt"], e["errorMessage"]]))
        .collect();
    assert_eq!(
        retries,
        vec![json!([
            1,
            "stream ended before the response was complete (no finish_reason or [DONE])"
        ])]
    );
    assert_eq!(mock.requests().len(), 2);
    mock.assert_paired();
}

/// Case 19.1, the complete-stream variant: a call whose arguments are not a complete JSON
/// object (a server that cut them but still said `tool_calls`) is answered with an error
/// result and never runs.
#[tokio::test]
async fn a_call_with_unfinished_arguments_is_answered_not_run() {
    let guard = tmp("unfinished");
    let dir = guard.path();
    let body = sse_body(&[
        json!({"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_ls","type":"function","function":{"name":"ls","arguments":"{\"path\":\"sr"}}]},"finish_reason":null}]}),
        json!({"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]) + "data: [DONE]\n\n";
    let mock = MockModel::start(vec![
        Step::Raw {
            status: 200,
            content_type: "text/event-stream".into(),
            body,
        },
        Step::text("ok"),
    ])
    .await;
    let tools = default_tools(Arc::new(DiskFs::new(dir.to_path_buf())), None);
    let s = setup(dir, &mock, 128_000, tools, None);
    s.agent.prompt(vec![Message::user_text("ls")]).unwrap();
    idle(&s.agent).await;
    assert_eq!(s.sink.of_type("tool_execution_start").len(), 1);
    let results: Vec<Value> = entries(&s.path)
        .iter()
        .filter(|e| e["message"]["role"] == "toolResult")
        .map(|e| {
            json!([
                e["message"]["toolCallId"],
                e["message"]["isError"],
                e["message"]["content"][0]["text"]
            ])
        })
        .collect();
    assert_eq!(
        results,
        vec![json!([
            "call_ls",
            true,
            pi_core::agent::UNFINISHED_ARGUMENTS_TEXT
        ])]
    );
}

/// STRM-04: a streamed answer whose tool call is complete, then a plain end of the body (no
/// `finish_reason`, no `[DONE]`; for Anthropic no `message_delta` / `message_stop`), is taken
/// as `toolUse`: the call runs once, nothing is retried, and the next answer ends the turn.
/// (A cut inside the arguments stays a retried cut:
/// `a_cut_stream_is_retried_and_its_half_call_never_runs`.)
#[tokio::test]
async fn a_plain_eof_after_a_complete_call_is_tool_use_not_a_retry() {
    let chat = sse_body(&[
        json!({"id":"c1","choices":[{"index":0,"delta":{"content":"Reading."},"finish_reason":null}]}),
        json!({"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_r","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.txt\"}"}}]},"finish_reason":null}]}),
    ]);
    let anthropic = [
        ("message_start", json!({"type":"message_start","message":{"id":"msg_1","role":"assistant","content":[],"usage":{"input_tokens":10,"output_tokens":1}}})),
        ("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
        ("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Reading."}})),
        ("content_block_stop", json!({"type":"content_block_stop","index":0})),
        ("content_block_start", json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_r","name":"read","input":{}}})),
        ("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"a.txt\"}"}})),
        ("content_block_stop", json!({"type":"content_block_stop","index":1})),
    ]
    .iter()
    .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
    .collect::<String>();
    for (api, body) in [
        (pi_ai::Api::OpenaiCompletions, chat),
        (pi_ai::Api::AnthropicMessages, anthropic),
    ] {
        let guard = tmp("plain-eof");
        let dir = guard.path();
        std::fs::write(dir.join("a.txt"), "alpha\n").unwrap();
        let mock = MockModel::start(vec![
            Step::Raw {
                status: 200,
                content_type: "text/event-stream".into(),
                body,
            },
            Step::text("It says alpha."),
        ])
        .await;
        let tools = default_tools(Arc::new(DiskFs::new(dir.to_path_buf())), None);
        let s = setup(dir, &mock, 128_000, tools, None);
        if api == pi_ai::Api::AnthropicMessages {
            let mut cfg = s.agent.config();
            cfg.model = Model::new(api, "mock", "mock-1", &mock.anthropic_base());
            cfg.model.api_key = Some("test-key".into());
            cfg.model.context_window = 128_000;
            cfg.model.max_tokens = 4_096;
            s.agent.set_config(cfg);
        }
        s.agent
            .prompt(vec![Message::user_text("read a.txt")])
            .unwrap();
        idle(&s.agent).await;
        assert_eq!(
            messages(&s.path),
            vec![
                json!(["user", null, "read a.txt"]),
                json!(["assistant", "toolUse", "Reading."]),
                json!(["toolResult", null, "alpha\n"]),
                json!(["assistant", "stop", "It says alpha."]),
            ],
            "{api:?}"
        );
        let runs: Vec<Value> = s
            .sink
            .of_type("tool_execution_start")
            .iter()
            .map(|e| json!([e["toolCallId"], e["toolName"], e["args"]]))
            .collect();
        assert_eq!(
            runs,
            vec![json!(["call_r", "read", {"path": "a.txt"}])],
            "{api:?}"
        );
        assert_eq!(s.sink.of_type("auto_retry_start"), Vec::<Value>::new());
        assert_eq!(mock.requests().len(), 2, "{api:?}");
        mock.assert_paired();
    }
}

fn is_summary(body: &Value) -> bool {
    body.to_string().contains("context summarization assistant")
}

/// Case 18.11: a summary model that answers with only a tool call is asked once more; a second
/// such answer fails the compaction with a clear error, no `compaction` entry is written and
/// the context stays as it was. An empty answer followed by a real one gives that summary.
#[tokio::test]
async fn tool_only_summaries_are_retried_once_then_fail_keeping_the_context() {
    let overflow = || {
        Step::Raw {
        status: 400,
        content_type: "application/json".into(),
        body: json!({"error": {"message": "This model's maximum context length is 4000 tokens. However, your messages resulted in 9000 tokens.", "code": "context_length_exceeded"}}).to_string(),
    }
    };
    for (answers, want_entries, want_error) in [
        (
            vec![Step::call("s1", "ls", json!({})), Step::call("s2", "ls", json!({}))],
            0,
            Some("Context overflow recovery failed: Summarization failed: the summary model answered with only a tool call twice; the context is kept as it was"),
        ),
        (vec![Step::text(""), Step::text("REAL SUMMARY")], 1, None),
    ] {
        let guard = tmp(&format!("summary-{want_entries}"));
        let dir = guard.path();
        let mock = MockModel::start(vec![
            Step::text("first answer"),
            overflow(),
            Step::text("recovered"),
        ])
        .await;
        let queue = Arc::new(Mutex::new(answers));
        let summaries = Arc::new(Mutex::new(0usize));
        let (q, n) = (queue.clone(), summaries.clone());
        mock.set_responder(Arc::new(move |body: &Value| {
            if !is_summary(body) {
                return None;
            }
            // The overflow's compaction keeps from the failed attempt (Pi 1.6's cut), so the
            // prompt before it is a split turn with its own prefix summary: answered here, and
            // not counted, so that the queue meets the history summary's requests only.
            if body.to_string().contains("earlier context from an ongoing conversation") {
                return Some(Step::text("PREFIX"));
            }
            *n.lock().unwrap() += 1;
            let mut q = q.lock().unwrap();
            Some(if q.is_empty() { Step::text("x") } else { q.remove(0) })
        }));
        let settings = CompactionSettings {
            enabled: true,
            reserve_tokens: 500,
            keep_recent_tokens: 10,
        };
        // A window that leaves the answers their floor (Pi's clamp keeps 4,096 of it free).
        let s = setup(dir, &mock, 9_000, Vec::new(), Some(settings));
        let long = |w: &str| format!("{w} ").repeat(300);
        s.agent.prompt(vec![Message::user_text(long("one"))]).unwrap();
        idle(&s.agent).await;
        let before = messages(&s.path);
        s.agent.prompt(vec![Message::user_text(long("two"))]).unwrap();
        idle(&s.agent).await;
        assert_eq!(*summaries.lock().unwrap(), 2);
        let compactions: Vec<Value> = entries(&s.path)
            .into_iter()
            .filter(|e| e["type"] == "compaction")
            .map(|e| e["summary"].clone())
            .collect();
        assert_eq!(compactions.len(), want_entries);
        let end = s.sink.of_type("compaction_end");
        assert_eq!(end[0]["errorMessage"].as_str(), want_error);
        if want_entries == 1 {
            assert!(compactions[0].as_str().unwrap().starts_with("REAL SUMMARY"));
        } else {
            // The context is as it was: the earlier messages are all still in the file's branch,
            // and the run ended on the provider's overflow error.
            assert_eq!(messages(&s.path)[..before.len()], before[..]);
            assert_eq!(
                s.agent.last_outcome().unwrap().stop_reason,
                StopReason::Error
            );
        }
    }
}

/// Case 18.10: a request never asks for more output than Pi 1.6's clamp leaves in the window;
/// when the window does not hold the floor (1,024 tokens) beside the input, without
/// compaction the turn fails with the figures and nothing is sent.
#[tokio::test]
async fn output_is_clamped_to_the_room_the_window_leaves() {
    let guard = tmp("budget");
    let dir = guard.path();
    let mock = MockModel::start(vec![Step::text("short answer")]).await;
    let s = setup(dir, &mock, 6_000, Vec::new(), None);
    let prompt = "word ".repeat(400);
    s.agent
        .prompt(vec![Message::user_text(prompt.clone())])
        .unwrap();
    idle(&s.agent).await;
    let sent = mock.requests()[0].body.clone();
    // Pi 1.6's `clampMaxTokensToContext`: input ceil(3 / 3.5) + ceil(2,000 / 3.5) = 573
    // tokens; 6,000 − 573 − its 4,096 margin leaves 1,331, below the model's 4,096.
    let input = 1 + (prompt.len() * 2).div_ceil(7);
    assert_eq!(input, 1 + 572);
    assert_eq!(
        sent["max_completion_tokens"],
        json!(1_331),
        "model maxTokens 4,096, window 6,000, input {input}"
    );
    // A window the input nearly fills: no request, a clear error.
    let guard = tmp("budget-full");
    let dir = guard.path();
    let mock = MockModel::start(vec![Step::text("never sent")]).await;
    let s = setup(dir, &mock, 4_000, Vec::new(), None);
    let prompt = "word ".repeat(2_400);
    s.agent
        .prompt(vec![Message::user_text(prompt.clone())])
        .unwrap();
    idle(&s.agent).await;
    assert_eq!(mock.requests().len(), 0);
    // The lower of the clamp's estimate (pi-ai 1.6's `estimateContextTokens`: ceil(3 / 3.5)
    // + ceil(12,000 / 3.5) = 3,430) and the threshold's (ceil(3 / 4) + 12,000 / 4 = 3,001);
    // the window holds 4,000 − 3,001 = 999 beside it.
    let estimate = 1 + prompt.len() / 4;
    let fits = 4_000 - estimate;
    assert_eq!(fits, 999);
    assert_eq!(
        s.agent.last_outcome().unwrap().error_message.as_deref(),
        Some(format!("The context (estimated at {estimate} tokens) leaves room for {fits} output tokens in the model's 4000-token window, less than the 1024 tokens a response needs. Compact the session, start a new one, or switch to a model with a larger context window.").as_str())
    );
}

/// Case 18.12: a request refused because of an image's size is classified, and the retry goes
/// without that image (a note in its place); the user sees why in the retry event.
#[tokio::test]
async fn an_image_refused_for_its_size_is_replaced_by_a_note() {
    let guard = tmp("image");
    let dir = guard.path();
    let refusal = r#"{"error":{"message":"Image too large: images must be at most 5 MB","type":"invalid_request_error","code":"image_too_large"}}"#;
    let mock = MockModel::start(vec![
        Step::Raw {
            status: 400,
            content_type: "application/json".into(),
            body: refusal.into(),
        },
        Step::text("I could not see the image."),
        Step::text("Still no image."),
    ])
    .await;
    let s = setup(dir, &mock, 128_000, Vec::new(), None);
    let big = "A".repeat(6 * 1024 * 1024);
    let small = "iVBORw0KGgo=".to_string();
    let prompt: Message = serde_json::from_value(json!({"role":"user","content":[
        {"type":"text","text":"what is in these?"},
        {"type":"image","data":big,"mimeType":"image/png"},
        {"type":"image","data":small,"mimeType":"image/png"}]}))
    .unwrap();
    s.agent.prompt(vec![prompt]).unwrap();
    idle(&s.agent).await;
    let reqs = mock.requests();
    assert_eq!(
        (reqs.len(), s.agent.last_outcome().unwrap().error_message),
        (2, None)
    );
    let user = |i: usize| -> Value {
        let parts = reqs[i].body["messages"][1]["content"].clone();
        json!(parts
            .as_array()
            .unwrap()
            .iter()
            .map(|p| match p["type"].as_str().unwrap() {
                "text" => p["text"].clone(),
                _ => json!(format!(
                    "image of {} bytes",
                    p["image_url"]["url"].as_str().unwrap().len()
                )),
            })
            .collect::<Vec<_>>())
    };
    assert_eq!(
        user(1),
        json!([
            "what is in these?",
            "[image removed: the provider refused a request with this image/png image (4608 KB) as too large]",
            format!("image of {} bytes", "data:image/png;base64,".len() + small.len())
        ])
    );
    let retry: Vec<Value> = s
        .sink
        .of_type("auto_retry_start")
        .iter()
        .map(|e| e["errorMessage"].clone())
        .collect();
    assert_eq!(
        retry,
        vec![json!(format!(
            "400: {} — retrying with 1 image(s) replaced by a note",
            // Pi 1.6's chat-completions wording: the body's `error` object after the status.
            serde_json::from_str::<Value>(refusal).unwrap()["error"]
        ))]
    );
    assert_eq!(
        s.agent.last_outcome().unwrap().stop_reason,
        StopReason::Stop
    );
    // Told as a retry (docs/protocol.md): the refused attempt's turn and run end, the images
    // replaced, the retry announced, the retry's run, its end told at its answer.
    let types = s.sink.types();
    let at = |t: &str| types.iter().position(|x| x == t).unwrap();
    assert_eq!(
        (
            at("turn_end") < at("images_replaced"),
            at("agent_end") < at("images_replaced"),
            types[at("images_replaced") + 1].as_str()
        ),
        (true, true, "auto_retry_start"),
        "{types:?}"
    );
    assert_eq!(
        s.sink.of_type("auto_retry_end"),
        vec![json!({"type": "auto_retry_end", "success": true, "attempt": 1})]
    );
    let replaced: Vec<Value> = s.sink.of_type("images_replaced");
    let note = "[image removed: the provider refused a request with this image/png image (4608 KB) as too large]";
    assert_eq!(
        replaced,
        vec![json!({"type": "images_replaced", "images": [{
            "hash": pi_core::session::image_hash(&big), "mimeType": "image/png", "note": note}]})]
    );
    // The file keeps the image in its entry (issue 29 item 10) and records the replacement as
    // Pi 1.6 records an edit of the context (item E): the refused message as it was, the
    // failed attempt, a `context_edit` of the message with the note in place of the image,
    // Pi 1.6's `context_edit` leaving the failed attempt out, then the answer; nothing written
    // again.
    let lines = entries(&s.path);
    let (before, written) = lines.split_at(lines.len() - 5);
    let parent = &before.last().unwrap()["id"];
    let content = |c: &Value| -> Value {
        json!(c
            .as_array()
            .unwrap()
            .iter()
            .map(|b| match b["type"].as_str().unwrap() {
                "text" => b["text"].clone(),
                _ => json!(format!("image {}", b["data"].as_str().unwrap().len())),
            })
            .collect::<Vec<_>>())
    };
    let shape: Vec<Value> = written
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "message" => json!({"parent": e["parentId"], "role": e["message"]["role"],
                "stopReason": e["message"]["stopReason"],
                "content": content(&e["message"]["content"])}),
            _ => json!({"parent": e["parentId"], "type": e["type"], "targetId": e["targetId"],
            "replacement": match &e["replacement"] {
                Value::Null => Value::Null,
                r => json!({"content": content(&r["content"])}),
            }}),
        })
        .collect();
    let small_image = format!("image {}", small.len());
    assert_eq!(
        shape,
        vec![
            json!({"parent": parent, "role": "user", "stopReason": null,
                "content": ["what is in these?", format!("image {}", big.len()), small_image]}),
            json!({"parent": written[0]["id"], "role": "assistant", "stopReason": "error",
                "content": []}),
            json!({"parent": written[1]["id"], "type": "context_edit", "targetId": written[0]["id"],
                "replacement": {"content": ["what is in these?", note, small_image]}}),
            json!({"parent": written[2]["id"], "type": "context_edit", "targetId": written[1]["id"],
                "replacement": null}),
            json!({"parent": written[3]["id"], "role": "assistant", "stopReason": "stop",
                "content": ["I could not see the image."]}),
        ]
    );
    // A session opened again from the file has the note, not the image, in its context.
    let (tree, _) = pi_core::session::read_tree(&s.path, false).unwrap();
    let context = serde_json::to_value(&tree.context(tree.last_id()).messages).unwrap();
    assert_eq!(
        content(&context[0]["content"]),
        json!(["what is in these?", note, small_image])
    );
    // The live session's next request goes without the image too (no second refusal).
    s.agent
        .prompt(vec![serde_json::from_value(
            json!({"role":"user","content":"and now?"}),
        )
        .unwrap()])
        .unwrap();
    idle(&s.agent).await;
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    let third = |i: usize| {
        let parts = reqs[2].body["messages"][i]["content"].clone();
        json!(parts
            .as_array()
            .unwrap()
            .iter()
            .map(|p| match p["type"].as_str().unwrap() {
                "text" => p["text"].clone(),
                _ => json!(format!(
                    "image of {} bytes",
                    p["image_url"]["url"].as_str().unwrap().len()
                )),
            })
            .collect::<Vec<_>>())
    };
    assert_eq!(third(1), user(1));
}

/// Case 18.12, a gateway's bare 413: an nginx "Request Entity Too Large" page names no image,
/// but the request holds one; the image goes first (a note in its place in the request; the
/// file keeps the image), instead of a compaction that cannot help and a prompt that fails
/// forever.
#[tokio::test]
async fn a_bare_413_for_a_request_with_an_image_replaces_the_image() {
    let guard = tmp("image-413");
    let dir = guard.path();
    let page = "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";
    let mock = MockModel::start(vec![bare_413(page), Step::text("No image now.")]).await;
    let s = setup(
        dir,
        &mock,
        128_000,
        Vec::new(),
        Some(CompactionSettings::default()),
    );
    let big = "B".repeat(3 * 1024 * 1024);
    let prompt: Message = serde_json::from_value(json!({"role":"user","content":[
        {"type":"text","text":"look"},
        {"type":"image","data":big,"mimeType":"image/jpeg"}]}))
    .unwrap();
    s.agent.prompt(vec![prompt]).unwrap();
    idle(&s.agent).await;
    let reqs = mock.requests();
    let note = "[image removed: the provider refused a request with this image/jpeg image (2304 KB) as too large]";
    assert_eq!(
        (
            reqs.len(),
            reqs[1].body["messages"][1]["content"].clone(),
            s.agent.last_outcome().unwrap().stop_reason
        ),
        (
            2,
            json!([{"type":"text","text":"look"},{"type":"text","text":note}]),
            StopReason::Stop
        )
    );
    assert!(s.sink.of_type("compaction_start").is_empty());
    assert_eq!(s.sink.of_type("images_replaced").len(), 1);
    // The file keeps the image in its entry; its context (a `context_edit`, issue 29 item E)
    // has the note, as the retry sent it.
    let context = assert_stored_image_and_context(
        &s.path,
        json!([{"type":"text","text":"look"},{"type":"image","data":big,"mimeType":"image/jpeg"}]),
        reqs[1].body["messages"][1]["content"].clone(),
    );
    assert_eq!(
        context.as_array().unwrap().last().unwrap()["content"],
        json!([{"type":"text","text":"No image now."}])
    );
}

/// A gateway's HTTP 413 with an HTML page that names nothing (no image, no limit).
fn bare_413(page: &str) -> Step {
    Step::Raw {
        status: 413,
        content_type: "text/html".into(),
        body: page.into(),
    }
}

/// The retry without the refused image refused again (a bare 413 with no image left: an
/// overflow, and nothing to compact): the retry announced is told as ended, failed, after the
/// run's end, as a last failure is (docs/protocol.md).
#[tokio::test]
async fn a_retry_without_the_image_refused_again_is_told_as_a_failed_retry() {
    let guard = tmp("image-413-twice");
    let dir = guard.path();
    let page = "<html><head><title>413 Request Entity Too Large</title></head></html>";
    let mock = MockModel::start(vec![bare_413(page), bare_413(page)]).await;
    let compaction = Some(CompactionSettings::default());
    let s = setup(dir, &mock, 128_000, Vec::new(), compaction);
    let prompt: Message = serde_json::from_value(json!({"role":"user","content":[
        {"type":"text","text":"look"},
        {"type":"image","data":"C".repeat(3 * 1024 * 1024),"mimeType":"image/jpeg"}]}))
    .unwrap();
    s.agent.prompt(vec![prompt]).unwrap();
    idle(&s.agent).await;
    assert_eq!(mock.requests().len(), 2);
    let last_error = s
        .sink
        .of_type("message_end")
        .iter()
        .rev()
        .find(|e| e["message"]["role"] == "assistant")
        .unwrap()["message"]["errorMessage"]
        .clone();
    assert!(last_error.is_string(), "{last_error}");
    assert_eq!(
        s.sink.of_type("auto_retry_end"),
        vec![
            json!({"type": "auto_retry_end", "success": false, "attempt": 1, "finalError": last_error})
        ]
    );
    let types = s.sink.types();
    let at = |t: &str| types.iter().rposition(|x| x == t).unwrap();
    assert!(at("agent_end") < at("auto_retry_end"), "{types:?}");
}

/// Issue 29 item 10: a 400 saying "input length exceeds" (no image named) while the request
/// holds an image: the retried request carries a note instead, the user is told, and the
/// session file still has the image in its entry, with a `context_edit` putting the note in the
/// context (issue 29 item E).
#[tokio::test]
async fn an_input_length_refusal_with_an_image_retries_without_it_and_keeps_the_file() {
    let guard = tmp("image-input-length");
    let dir = guard.path();
    let refusal = r#"{"error":{"message":"input length exceeds the maximum of 1048576 bytes","type":"invalid_request_error"}}"#;
    let mock = MockModel::start(vec![
        Step::Raw {
            status: 400,
            content_type: "application/json".into(),
            body: refusal.into(),
        },
        Step::text("Fine without it."),
    ])
    .await;
    let s = setup(dir, &mock, 128_000, Vec::new(), None);
    let img = "C".repeat(1024 * 1024);
    let prompt: Message = serde_json::from_value(json!({"role":"user","content":[
        {"type":"text","text":"see"},
        {"type":"image","data":img,"mimeType":"image/png"}]}))
    .unwrap();
    s.agent.prompt(vec![prompt]).unwrap();
    idle(&s.agent).await;
    let reqs = mock.requests();
    let note = "[image removed: the provider refused a request with this image/png image (768 KB) as too large]";
    assert_eq!(
        (
            reqs.len(),
            reqs[1].body["messages"][1]["content"].clone(),
            s.agent.last_outcome().unwrap().stop_reason
        ),
        (
            2,
            json!([{"type":"text","text":"see"},{"type":"text","text":note}]),
            StopReason::Stop
        )
    );
    assert_eq!(
        s.sink
            .of_type("auto_retry_start")
            .iter()
            .map(|e| e["errorMessage"].clone())
            .collect::<Vec<_>>(),
        vec![json!(format!(
            "400: {} — retrying with 1 image(s) replaced by a note",
            // Pi 1.6's chat-completions wording: the body's `error` object after the status.
            serde_json::from_str::<Value>(refusal).unwrap()["error"]
        ))]
    );
    // The entry keeps the image; the context built from the file has the note.
    assert_stored_image_and_context(
        &s.path,
        json!([{"type":"text","text":"see"},{"type":"image","data":img,"mimeType":"image/png"}]),
        json!([{"type":"text","text":"see"},{"type":"text","text":note}]),
    );
}

/// A gateway answering status 200 with a JSON error document (or an HTML page) instead of an
/// event stream: the provider's error is shown as it names it and classified as it says (an
/// invalid key is not retried; an overloaded server is, and the retry's answer ends the turn),
/// and a page that is no error at all is quoted and not retried. Before, each was retried as
/// "stream ended without a response" and the provider's message never reached the user.
#[tokio::test]
async fn a_200_answer_that_is_not_an_event_stream_tells_the_providers_error() {
    let openai_key = r#"{"error":{"message":"Invalid API key","type":"invalid_request_error","code":"invalid_api_key"}}"#;
    let anthropic_key =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let overloaded = r#"{"error":{"message":"upstream overloaded","type":"overloaded_error"}}"#;
    let page = "<html><body>Please sign in to the proxy</body></html>";
    let cases: Vec<(pi_ai::Api, &str, &str, bool, Vec<Value>)> = vec![
        (
            pi_ai::Api::OpenaiCompletions,
            "application/json",
            openai_key,
            false,
            vec![
                json!(["user", null, "hello"]),
                json!(["assistant", "error", "invalid_api_key: Invalid API key"]),
            ],
        ),
        (
            pi_ai::Api::AnthropicMessages,
            "application/json",
            anthropic_key,
            false,
            vec![
                json!(["user", null, "hello"]),
                json!([
                    "assistant",
                    "error",
                    "authentication_error: invalid x-api-key"
                ]),
            ],
        ),
        (
            pi_ai::Api::OpenaiCompletions,
            "text/html",
            page,
            false,
            vec![
                json!(["user", null, "hello"]),
                json!([
                    "assistant",
                    "error",
                    format!("HTTP 200 with a body that is not an event stream: {page}")
                ]),
            ],
        ),
        (
            pi_ai::Api::OpenaiCompletions,
            "application/json",
            overloaded,
            true,
            vec![
                json!(["user", null, "hello"]),
                json!([
                    "assistant",
                    "error",
                    "overloaded_error: upstream overloaded"
                ]),
                json!(["assistant", "stop", "Hello."]),
            ],
        ),
    ];
    for (api, content_type, body, retried, want) in cases {
        let guard = tmp("not-sse");
        let dir = guard.path();
        let mock = MockModel::start(vec![
            Step::Raw {
                status: 200,
                content_type: content_type.into(),
                body: body.into(),
            },
            Step::text("Hello."),
        ])
        .await;
        let s = setup(dir, &mock, 128_000, Vec::new(), None);
        if api == pi_ai::Api::AnthropicMessages {
            let mut cfg = s.agent.config();
            cfg.model = Model::new(api, "mock", "mock-1", &mock.anthropic_base());
            cfg.model.api_key = Some("test-key".into());
            cfg.model.context_window = 128_000;
            cfg.model.max_tokens = 4_096;
            s.agent.set_config(cfg);
        }
        s.agent.prompt(vec![Message::user_text("hello")]).unwrap();
        idle(&s.agent).await;
        assert_eq!(messages(&s.path), want, "{api:?} {body}");
        let retries: Vec<Value> = s
            .sink
            .of_type("auto_retry_start")
            .iter()
            .map(|e| json!([e["attempt"], e["errorMessage"]]))
            .collect();
        if retried {
            assert_eq!(
                retries,
                vec![json!([1, "overloaded_error: upstream overloaded"])],
                "{body}"
            );
            assert_eq!(mock.requests().len(), 2, "{body}");
        } else {
            assert_eq!(retries, Vec::<Value>::new(), "{api:?} {body}");
            assert_eq!(mock.requests().len(), 1, "{api:?} {body}");
        }
    }
}

/// Issue 29 item D, Pi 1.6's `estimateProjectedContextTokens`: usage reported before the
/// branch's latest `context_edit` (or compaction) counted a context that has changed since,
/// so the threshold is judged by characters / 4 instead. The same history, with its last
/// answer's usage above the threshold: taken as it is, it compacts first; marked as from
/// before an edit (`usage_from`, as a context built from such a file is), the prompt goes out
/// at once, no compaction.
#[tokio::test]
async fn usage_from_before_a_context_edit_does_not_trigger_the_threshold() {
    // The question before the answer (an anchor of Pi 1.6's estimate is no older than the
    // messages before it).
    let mut hello = Message::user_text("hello");
    if let Message::User(u) = &mut hello {
        u.timestamp = 0;
    }
    let history: Vec<Message> = vec![
        hello,
        serde_json::from_value(
            json!({"role":"assistant","content":[{"type":"text","text":"hi"}],
            "api":"openai-completions","provider":"mock","model":"mock-1",
            "usage":{"input":10500,"output":10,"cacheRead":0,"cacheWrite":0,"totalTokens":10510,
                "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},
            "stopReason":"stop","timestamp":1}),
        )
        .unwrap(),
    ];
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 2_000,
        keep_recent_tokens: 10,
    };
    let mut seen = Vec::new();
    for usage_from in [0, 2] {
        let guard = tmp(&format!("usage-from-{usage_from}"));
        let mock = MockModel::start(vec![Step::text("answer"), Step::text("again")]).await;
        let s = setup(guard.path(), &mock, 10_000, Vec::new(), Some(settings));
        s.agent.set_context(history.clone(), usage_from).unwrap();
        s.agent
            .prompt(vec![Message::user_text("one more")])
            .unwrap();
        idle(&s.agent).await;
        let answered = mock
            .requests()
            .iter()
            .any(|r| last_user_text(&r.body) == Some("one more"));
        seen.push((
            usage_from,
            s.sink.of_type("compaction_start").len(),
            answered,
        ));
    }
    // 10,510 + a few tokens is above 10,000 − 2,000 and the window itself: the prompt is
    // refused with the figures (the file holds none of this history, so there is nothing to
    // compact and, as Pi 1.6, no compaction is told); "hello", "hi" and "one more"
    // by characters / 4 (with the prompt "sys") are far below it: answered.
    assert_eq!(seen, vec![(0, 0, false), (2, 0, true)]);
}

/// The text of the last user message of a chat-completions request body.
fn last_user_text(body: &Value) -> Option<&str> {
    body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| {
            m["content"].as_str().or_else(|| {
                m["content"]
                    .as_array()
                    .and_then(|a| a.iter().find_map(|b| b["text"].as_str()))
            })
        })
}

/// The file at `path` keeps the first user entry's content as `stored` (the image in it, as
/// it was sent first); the context built from the file gives that message `context` (the
/// note in the image's place, from the `context_edit`). Returns that context's messages.
fn assert_stored_image_and_context(path: &Path, stored: Value, context: Value) -> Value {
    let (tree, _) = pi_core::session::read_tree(path, false).unwrap();
    let user = tree
        .entries
        .iter()
        .find(|e| e.role() == Some("user"))
        .unwrap();
    assert_eq!(user.raw()["message"]["content"], stored);
    let built = serde_json::to_value(&tree.context(tree.last_id()).messages).unwrap();
    assert_eq!(built[0]["content"], context);
    built
}

//! Pi 1.6's recoverable `length` stop (`isRecoverableLength`), end to end through `pi-lsp run`
//! and the loopback model: an answer cut below the model's `maxTokens` is left out of the
//! context (`context_edit`, `replacement: null`), the session compacted (reason `overflow`) and
//! the turn asked again once; a second cut answer ends the recovery with Pi's text. Each case
//! is checked against the real Pi 1.6.0 on the same script (`$PI16_REF_BIN`, required under
//! `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use pi_e2e::headless::{run_pi_in, Headless};
use pi_e2e::lsp_client::{start_with_mock, EditorBehavior};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{session_lines, TempDir};
use serde_json::{json, Value};

/// Pi 1.6's `compaction_end` error after a second recoverable `length` stop.
const RECOVERY_FAILED: &str =
    "Truncated response recovery failed after one compact-and-retry attempt.";

/// Pi 1.6's print-mode line after an answer cut at its output limit.
const TRUNCATED: &str = "Response was truncated: the model reached its output token limit.";

/// The second prompt: 800 characters more than "two", so the compaction keeps it and
/// summarises the first turn (`keepRecentTokens` 100).
fn second_prompt() -> String {
    format!("two {}", "x".repeat(800))
}

/// The first turn's answer: 2,000 characters more than "first answer", so that a summary
/// of the first turn makes the context smaller (an automatic compaction must, case CMP-04).
fn first_answer() -> String {
    format!("first answer {}", "y".repeat(2000))
}

fn is_summary(body: &Value) -> bool {
    body.to_string().contains("context summarization assistant")
}

/// The loopback model on `script`; every summary request is answered "SUMMARY".
async fn mock(script: Vec<Step>) -> MockModel {
    let mock = MockModel::start(script).await;
    mock.set_responder(Arc::new(|body: &Value| {
        is_summary(body).then(|| Step::text("SUMMARY"))
    }));
    mock
}

/// The conversation's requests (not the summaries'), each as `[role, text]` of its messages
/// after the system prompt.
fn conversation_requests(mock: &MockModel) -> Vec<Vec<(String, String)>> {
    mock.requests()
        .iter()
        .filter(|r| !is_summary(&r.body))
        .map(|r| {
            r.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] != "system")
                .map(|m| {
                    let text = match &m["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(parts) => {
                            parts.iter().filter_map(|p| p["text"].as_str()).collect()
                        }
                        _ => String::new(),
                    };
                    (m["role"].as_str().unwrap().to_string(), text)
                })
                .collect()
        })
        .collect()
}

/// Each entry as `type:role:stopReason:text`, from the first user message on (the file's
/// header, model, thinking level and system message are Pi's and ours alike elsewhere).
fn kinds(lines: &[Value]) -> Vec<String> {
    let first = lines
        .iter()
        .position(|e| e["message"]["role"] == "user")
        .unwrap();
    lines[first..]
        .iter()
        .map(|e| {
            let m = &e["message"];
            format!(
                "{}:{}:{}:{}",
                e["type"].as_str().unwrap(),
                m["role"].as_str().unwrap_or(""),
                m["stopReason"].as_str().unwrap_or(""),
                m["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .chars()
                    .take(12)
                    .collect::<String>()
            )
        })
        .collect()
}

/// The `context_edit` entries as `(targetId is the entry right before it, replacement)`.
fn edits(lines: &[Value]) -> Vec<(bool, Value)> {
    lines
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "context_edit")
        .map(|(i, e)| {
            (
                e["targetId"] == lines[i - 1]["id"] && e["parentId"] == lines[i - 1]["id"],
                e["replacement"].clone(),
            )
        })
        .collect()
}

/// The events of a `--json` run (ours) or `--mode json` run (Pi's) that tell the recovery:
/// each assistant `message_end` and compaction event as `[type, reason, willRetry,
/// errorMessage, whether a result is given, stopReason]`.
fn recovery_events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["type"].as_str().unwrap_or("").starts_with("compaction")
                || e["type"] == "message_end" && e["message"]["role"] == "assistant"
        })
        .map(|e| {
            json!([
                e["type"],
                e["reason"],
                e["willRetry"],
                e["errorMessage"],
                e["result"].is_object(),
                e["message"]["stopReason"]
            ])
        })
        .collect()
}

/// A run's events whole but for the streamed deltas (`message_update`) and Pi's session header
/// line: each as `[type, …]` with what tells the recovery — a message's role and stop reason
/// and first text (an answer's `message_start`: its role), `turn_end`'s stop reason and
/// number of results, `agent_end`'s number of messages (system messages left out), `entry_appended`'s entry (type, replacement, whether it names the left-out
/// answer's message), the compaction events' reason, `willRetry`, error and whether a result
/// is given, `agent_settled`'s `aborted`. `events` are Pi's `--mode json` / RPC lines or ours
/// (`--json` lines, the LSP `agent/event`s' `event`).
fn sequence(events: &[Value]) -> Vec<Value> {
    let text = |m: &Value| -> Value {
        m["content"]
            .as_array()
            .and_then(|c| c.iter().find_map(|b| b["text"].as_str()))
            .map(|t| t.chars().take(12).collect::<String>())
            .map_or(Value::Null, Value::from)
    };
    events
        .iter()
        .filter(|e| {
            !matches!(
                e["type"].as_str(),
                Some("message_update" | "session") | None
            )
        })
        // Pi 1.6 also sends a new session's stored system message as a message of its first
        // run (ours stores it without an event): not part of the recovery, left out.
        .filter(|e| e["message"]["role"] != "system")
        .map(|e| {
            let t = &e["type"];
            match t.as_str().unwrap() {
                // An answer's `message_start` is its empty start (Pi 1.6 marks it
                // `stopReason: "pending"`, ours `stop`): its role only.
                "message_start" => json!([t, e["message"]["role"], text(&e["message"])]),
                "message_end" => json!([
                    t,
                    e["message"]["role"],
                    e["message"]["stopReason"],
                    text(&e["message"])
                ]),
                "turn_end" => json!([
                    t,
                    e["message"]["stopReason"],
                    e["toolResults"].as_array().map(Vec::len)
                ]),
                "agent_end" => json!([
                    t,
                    e["messages"]
                        .as_array()
                        .map(|m| m.iter().filter(|m| m["role"] != "system").count())
                ]),
                "entry_appended" => json!([
                    t,
                    e["entry"]["type"],
                    e["entry"]["replacement"],
                    e["entry"]["targetId"].is_string() && e["entry"]["id"].is_string()
                ]),
                "compaction_start" => json!([t, e["reason"]]),
                "compaction_end" => json!([
                    t,
                    e["reason"],
                    e["willRetry"],
                    e["errorMessage"],
                    e["result"].is_object()
                ]),
                "agent_settled" => json!([t, e["aborted"]]),
                _ => json!([t]),
            }
        })
        .collect()
}

/// The JSON lines of a `--json` (ours) or `--mode json` (Pi's) run's stdout.
fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// Each `compaction` entry as `(position of its firstKeptEntryId in [`kinds`], summary)`.
fn compactions(lines: &[Value]) -> Vec<(Option<usize>, Value)> {
    let first = lines
        .iter()
        .position(|e| e["message"]["role"] == "user")
        .unwrap();
    lines
        .iter()
        .filter(|e| e["type"] == "compaction")
        .map(|c| {
            let kept = lines[first..]
                .iter()
                .position(|e| e["id"] == c["firstKeptEntryId"]);
            (kept, c["summary"].clone())
        })
        .collect()
}

/// The messages each summary request summarises: the serialised conversation's
/// `[Role]: text` lines (their first 24 characters), one list a request, sorted (Pi sends
/// a split turn's two requests at once).
fn summarised(mock: &MockModel) -> Vec<Vec<String>> {
    let mut all: Vec<Vec<String>> = mock
        .requests()
        .iter()
        .filter(|r| is_summary(&r.body))
        .map(|r| {
            let text = r.body.to_string();
            let body: Value = r.body.clone();
            let last = body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .cloned()
                .unwrap_or(Value::Null);
            let content = match &last["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                _ => text,
            };
            content
                .lines()
                .filter(|l| l.starts_with('[') && l.contains("]: "))
                .map(|l| l.chars().take(24).collect())
                .collect()
        })
        .collect();
    all.sort();
    all
}

/// `(exit code, stdout, last stderr line)`.
fn printed(out: &Output) -> (Option<i32>, String, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
            .to_string(),
    )
}

/// `pi-lsp run` in a fresh workspace with `keepRecentTokens` 100: "one", then `--continue`
/// with [`second_prompt`] (`extra` flags on the second run). Returns the second run's output
/// and the session file's lines.
fn ours(mock: &MockModel, name: &str, extra: &[&str]) -> (Output, Vec<Value>) {
    let h = Headless::new(name, &mock.models_json());
    std::fs::write(h.ws.join("f.txt"), "hello\n").unwrap();
    std::fs::write(
        h.agent.join("settings.json"),
        json!({"compaction": {"keepRecentTokens": 100}}).to_string(),
    )
    .unwrap();
    let first = h.run(&["--model", "mock/mock-1", "one"]);
    assert_eq!(printed(&first).0, Some(0), "{first:?}");
    let two = second_prompt();
    let mut args = vec!["--model", "mock/mock-1", "--continue"];
    args.extend_from_slice(extra);
    args.push(&two);
    let out = h.run(&args);
    (out, session_lines(&h.ws))
}

/// The cut answer (50 of 4,096 tokens) is left out, the session compacted and the turn asked
/// again: the file holds the cut answer, its `context_edit`, the compaction and the retried
/// answer; as in Pi 1.6 (`findProjectedCutPoint`) the compaction keeps from the left-out entry
/// and summarises the prompt as a split turn's prefix, so the retried request carries the
/// summary only, not the cut answer; print mode prints the retried answer only and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_length_stop_below_max_tokens_is_left_out_compacted_and_retried() {
    let mock = mock(vec![
        Step::text(&first_answer()),
        Step::length("cut answer", 50),
        Step::text("good answer"),
    ])
    .await;
    let (out, lines) = ours(&mock, "length-retry", &[]);
    assert_eq!(printed(&out).0, Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "good answer\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let two = second_prompt();
    assert_eq!(
        kinds(&lines),
        [
            "message:user::one",
            "message:assistant:stop:first answer",
            &format!("message:user::{}", &two[..12]),
            "message:assistant:length:cut answer",
            "context_edit:::",
            "compaction:::",
            "message:assistant:stop:good answer",
        ]
    );
    assert_eq!(edits(&lines), [(true, Value::Null)]);
    // Pi 1.6's cut past the left-out answer (`findProjectedCutPoint`): the kept part starts
    // at the left-out entry, the prompt is summarised as a split turn's prefix.
    assert_eq!(
        compactions(&lines),
        [(
            Some(3),
            json!("SUMMARY\n\n---\n\n**Turn Context (split turn):**\n\nSUMMARY")
        )]
    );
    assert_eq!(
        summarised(&mock),
        [
            vec!["[User]: one", "[Assistant]: first answe"],
            vec!["[User]: two xxxxxxxxxxxx"]
        ]
    );
    let s = |r: &str, t: &str| (r.to_string(), t.to_string());
    assert_eq!(
        conversation_requests(&mock),
        [
            vec![s("user", "one")],
            vec![s("user", "one"), s("assistant", &first_answer()), s("user", &two)],
            // The prompt is in the summary's turn prefix; the left-out answer is kept out.
            vec![s(
                "user",
                "The conversation history before this point was compacted into the following summary:\n\n<summary>\nSUMMARY\n\n---\n\n**Turn Context (split turn):**\n\nSUMMARY\n</summary>"
            )],
        ]
    );
    mock.assert_paired();
}

/// A cut answer, then another after the retry.
fn twice() -> Vec<Step> {
    vec![
        Step::text(&first_answer()),
        Step::length("cut answer", 50),
        Step::length("cut again", 50),
        Step::text("never asked"),
    ]
}

/// A second cut answer after the retry ends the recovery: exactly one retry, the second cut
/// answer kept (no second `context_edit`) and printed with Pi's "truncated" line, exit 1; the
/// events (`--json`) are the overflow compaction with `willRetry` and then Pi's
/// `compaction_end` error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_cut_answer_ends_the_recovery_with_pi_s_error() {
    let m = mock(twice()).await;
    let (out, lines) = ours(&m, "length-twice", &[]);
    let (code, stdout, _) = printed(&out);
    assert_eq!((code, stdout.as_str()), (Some(1), "cut again\n"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("\n{TRUNCATED}\n")),
        "{out:?}"
    );
    let tail: Vec<String> = kinds(&lines).split_off(3);
    assert_eq!(
        tail,
        [
            "message:assistant:length:cut answer",
            "context_edit:::",
            "compaction:::",
            "message:assistant:length:cut again",
        ]
    );
    assert_eq!(edits(&lines), [(true, Value::Null)]);
    assert_eq!(conversation_requests(&m).len(), 3);

    // The same with every event on stdout.
    let m = mock(twice()).await;
    let (out, _) = ours(&m, "length-twice-json", &["--json"]);
    assert_eq!(out.status.code(), Some(0));
    let n = Value::Null;
    assert_eq!(
        recovery_events(&out),
        [
            json!(["message_end", n, n, n, false, "length"]),
            json!(["compaction_start", "overflow", n, n, false, n]),
            json!(["compaction_end", "overflow", true, n, true, n]),
            json!(["message_end", n, n, n, false, "length"]),
            json!([
                "compaction_end",
                "overflow",
                false,
                RECOVERY_FAILED,
                false,
                n
            ]),
        ]
    );
    assert_eq!(conversation_requests(&m).len(), 3);
}

/// A cut answer, the retry reads a file, then a second cut answer.
fn again() -> Vec<Step> {
    vec![
        Step::text(&first_answer()),
        Step::length("cut answer", 50),
        Step::call("call_1", "read", json!({"path": "f.txt"})),
        Step::length("cut again", 50),
        Step::text("never asked"),
    ]
}

/// The one recovery is per user turn and an answer that is neither `error` nor `length`
/// clears it (Pi 1.6's `_overflowRecoveryAttempted`): after the retried answer's tool round a
/// second cut answer is left out too (a second `context_edit`), not kept with Pi's error.
/// Its compaction then finds nothing to summarise, as Pi 1.6.0's: the left-out entries are no
/// cut points and carry no tokens, the kept tool round is under `keepRecentTokens`, and the
/// cut moves back over the left-out entries to the start of the kept part. No retry, nothing
/// printed, exit 0 (Pi's print mode on the same script alike: `entries_and_output_are_pi_1_6_s`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_between_two_cut_answers_clears_the_one_recovery() {
    let m = mock(again()).await;
    let (out, lines) = ours(&m, "length-again", &[]);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref()
        ),
        (Some(0), ""),
        "{out:?}"
    );
    assert_eq!(
        kinds(&lines).split_off(3),
        [
            "message:assistant:length:cut answer",
            "context_edit:::",
            "compaction:::",
            "message:assistant:toolUse:",
            "message:toolResult::hello\n",
            "message:assistant:length:cut again",
            "context_edit:::",
        ]
    );
    assert_eq!(edits(&lines), [(true, Value::Null), (true, Value::Null)]);
    assert_eq!(conversation_requests(&m).len(), 4);
    // Only the first recovery's two summary requests (history, turn prefix).
    assert_eq!(summarised(&m).len(), 2);
}

/// Nothing older than the cut answer to summarise (a one-prompt session): the answer is left
/// out all the same and no retry follows; print mode prints nothing and exits 0 (Pi 1.6.0 on
/// the same script: the same entries, nothing printed, exit 0). An answer cut at the model's
/// own `maxTokens` is not recovered (headless.rs: printed with the "truncated" line, exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nothing_to_compact_the_cut_answer_is_left_out_and_not_printed() {
    let m = mock(vec![
        Step::length("cut answer", 50),
        Step::text("never asked"),
    ])
    .await;
    let (out, lines) = ours_small(&m, "length-small", &[]);
    assert_eq!(
        (out.status.code(), out.stdout.as_slice()),
        (Some(0), &b""[..]),
        "{out:?}"
    );
    assert_eq!(
        kinds(&lines),
        [
            "message:user::hi",
            "message:assistant:length:cut answer",
            "context_edit:::"
        ]
    );
    assert_eq!(edits(&lines), [(true, Value::Null)]);
    assert_eq!(conversation_requests(&m).len(), 1);
}

/// The script of the retried cut answer.
fn retried() -> Vec<Step> {
    vec![
        Step::text(&first_answer()),
        Step::length("cut answer", 50),
        Step::text("good answer"),
    ]
}

/// The agent's `settings.json` of the two-prompt cases: `keepRecentTokens` 100.
fn keep_100() -> Value {
    json!({"compaction": {"keepRecentTokens": 100}})
}

/// Ours over LSP in a fresh workspace with `settings` (the agent's `settings.json`): `prompts`
/// in one session on `mock/mock-1`, each run until `agent_settled`. Returns the last prompt's
/// events, the session file's lines and every `agent/attention` as `[reason, the message's
/// first 12 characters]`.
async fn lsp_run(
    m: &MockModel,
    name: &str,
    settings: &Value,
    prompts: &[String],
) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    let tmp = TempDir::new(name);
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(tmp.path().join("agent")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(tmp.path().join("agent/settings.json"), settings.to_string()).unwrap();
    let mut c = start_with_mock(&ws, m, EditorBehavior::default()).await;
    let mut sid: Option<String> = None;
    let mut events = Vec::new();
    for p in prompts {
        let params = match &sid {
            None => json!({"text": p, "model": "mock/mock-1"}),
            Some(id) => json!({"sessionId": id, "text": p}),
        };
        let r = c.request("agent/prompt", params).await.unwrap();
        sid = r["sessionId"].as_str().map(str::to_string).or(sid);
        events = c.events_until_settled(Duration::from_secs(60)).await;
    }
    let attention = c
        .log()
        .iter()
        .filter(|n| n["method"] == "agent/attention")
        .map(|n| {
            let message = n["params"]["message"].as_str().unwrap_or("");
            json!([
                n["params"]["reason"],
                message.chars().take(12).collect::<String>()
            ])
        })
        .collect();
    c.shutdown().await;
    (events, session_lines(&ws), attention)
}

/// Pi 1.6.0 in RPC mode in a fresh folder with `settings`: `prompts` in one session on
/// `mock/mock-1`. Returns the last prompt's events (responses left out).
fn rpc_run(
    pi: &Path,
    m: &MockModel,
    tmp: &Path,
    settings: &Value,
    prompts: &[String],
) -> Vec<Value> {
    let (ws, agent) = (tmp.join("ws"), tmp.join("agent"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), m.models_json().to_string()).unwrap();
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
    let events = tokio::task::block_in_place(|| {
        let sessions = tmp.join("sessions");
        let args = [OsStr::new("--session-dir"), sessions.as_os_str()];
        let mut rpc = pi_e2e::pi_rpc::PiRpc::start(pi, &ws, &agent, &args);
        let mut events = Vec::new();
        for p in prompts {
            events = rpc.prompt(p);
        }
        events
    });
    events
        .into_iter()
        .filter(|v| v["type"] != "response")
        .collect()
}

/// The editor's front door (LSP over stdio) gets the same recovery from the same loop, told as
/// Pi 1.6.0 tells it in RPC mode on the same script (compared whole but for the deltas): the
/// cut run ends (`turn_end`, `agent_end`), `entry_appended` tells the answer's `context_edit`,
/// the overflow compaction with `willRetry`, the retry as a new run (`agent_start` …
/// `agent_end`), `agent_settled` last; the session's last answer is the retried one, and the
/// only one `agent/attention` says finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_lsp_the_cut_answer_is_left_out_and_the_turn_retried() {
    let m = mock(retried()).await;
    let prompts = ["one".to_string(), second_prompt()];
    let (events, lines, attention) = lsp_run(&m, "length-lsp", &keep_100(), &prompts).await;
    // The user is told the run finished once, with the retried answer: the cut run's end is
    // not an end for them.
    assert_eq!(
        attention,
        [
            json!(["finished", "first answer"]),
            json!(["finished", "good answer"])
        ]
    );
    let events = sequence(&events);
    let n = Value::Null;
    let two: String = second_prompt().chars().take(12).collect();
    assert_eq!(
        events,
        [
            json!(["agent_start"]),
            json!(["turn_start"]),
            json!(["message_start", "user", two]),
            json!(["message_end", "user", n, two]),
            json!(["message_start", "assistant", n]),
            json!(["message_end", "assistant", "length", "cut answer"]),
            json!(["turn_end", "length", 0]),
            json!(["agent_end", 2]),
            json!(["entry_appended", "context_edit", n, true]),
            json!(["compaction_start", "overflow"]),
            json!(["compaction_end", "overflow", true, n, true]),
            json!(["agent_start"]),
            json!(["turn_start"]),
            json!(["message_start", "assistant", n]),
            json!(["message_end", "assistant", "stop", "good answer"]),
            json!(["turn_end", "stop", 0]),
            json!(["agent_end", 1]),
            json!(["agent_settled", false]),
        ],
        "{events:#?}"
    );
    assert_eq!(
        kinds(&lines).split_off(3),
        [
            "message:assistant:length:cut answer",
            "context_edit:::",
            "compaction:::",
            "message:assistant:stop:good answer",
        ]
    );
    assert_eq!(conversation_requests(&m).len(), 3);

    // Pi 1.6.0 in RPC mode, the same two prompts on the same script.
    let Some(pi) = pi_e2e::pi16_bin("length") else {
        return;
    };
    let their_mock = mock(retried()).await;
    let tmp = TempDir::new("length-lsp-pi16");
    let theirs = rpc_run(&pi, &their_mock, tmp.path(), &keep_100(), &prompts);
    assert_eq!(events, sequence(&theirs));
}

/// Over LSP, a cut answer with nothing older to summarise (a one-prompt session, the default
/// settings): the run
/// ends, `entry_appended` tells the answer's `context_edit`, no compaction event, no retry,
/// `agent_settled`; as Pi 1.6.0 in RPC mode on the same script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_lsp_a_cut_answer_with_nothing_to_compact_is_told_as_pi_tells_it() {
    let script = || vec![Step::length("cut answer", 50), Step::text("never asked")];
    let m = mock(script()).await;
    let prompts = ["hi".to_string()];
    let (events, lines, attention) = lsp_run(&m, "length-lsp-small", &json!({}), &prompts).await;
    // Told once the recovery is over (nothing was retried).
    assert_eq!(attention, [json!(["finished", "cut answer"])]);
    let events = sequence(&events);
    let n = Value::Null;
    assert_eq!(
        events,
        [
            json!(["agent_start"]),
            json!(["turn_start"]),
            json!(["message_start", "user", "hi"]),
            json!(["message_end", "user", n, "hi"]),
            json!(["message_start", "assistant", n]),
            json!(["message_end", "assistant", "length", "cut answer"]),
            json!(["turn_end", "length", 0]),
            json!(["agent_end", 2]),
            json!(["entry_appended", "context_edit", n, true]),
            json!(["agent_settled", false]),
        ],
        "{events:#?}"
    );
    assert_eq!(edits(&lines), [(true, Value::Null)]);
    assert_eq!(conversation_requests(&m).len(), 1);

    let Some(pi) = pi_e2e::pi16_bin("length") else {
        return;
    };
    let their_mock = mock(script()).await;
    let tmp = TempDir::new("length-lsp-small-pi16");
    let theirs = rpc_run(&pi, &their_mock, tmp.path(), &json!({}), &prompts);
    assert_eq!(events, sequence(&theirs));
}

/// The four scripts compared with Pi 1.6.0: a cut answer retried, cut twice, cut with nothing
/// to compact (`small`: a one-prompt session), cut again after a tool round.
fn scripts() -> [(&'static str, Vec<Step>); 4] {
    [
        (
            "retry",
            vec![
                Step::text(&first_answer()),
                Step::length("cut answer", 50),
                Step::text("good answer"),
            ],
        ),
        ("twice", twice()),
        (
            "small",
            vec![Step::length("cut answer", 50), Step::text("never asked")],
        ),
        ("again", again()),
    ]
}

/// `pi-lsp run` in a fresh workspace with the default settings: one prompt, "hi" (`extra`
/// flags before it). Returns its output and the session file's lines.
fn ours_small(mock: &MockModel, name: &str, extra: &[&str]) -> (Output, Vec<Value>) {
    let h = Headless::new(name, &mock.models_json());
    let args = [&["--model", "mock/mock-1"][..], extra, &["hi"]].concat();
    let out = h.run(&args);
    (out, session_lines(&h.ws))
}

/// Pi 1.6.0's print mode on `mock` in a fresh folder with `keepRecentTokens` 100: `-p one`, then
/// `-p --continue` with [`second_prompt`] (or only `-p hi`, with the default settings, when
/// `small`). Returns the last
/// run's output and its session file's lines.
fn theirs(
    pi: &Path,
    mock: &MockModel,
    tmp: &Path,
    small: bool,
    json_mode: bool,
) -> (Output, Vec<Value>) {
    let (ws, agent, sessions) = (tmp.join("ws"), tmp.join("agent"), tmp.join("sessions"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("f.txt"), "hello\n").unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), mock.models_json().to_string()).unwrap();
    if !small {
        std::fs::write(
            agent.join("settings.json"),
            json!({"compaction": {"keepRecentTokens": 100}}).to_string(),
        )
        .unwrap();
    }
    let run = |args: &[&str]| run_pi_in(pi, &ws, &agent, tmp, &sessions, args);
    let out = if small && json_mode {
        run(&["--mode", "json", "hi"])
    } else if small {
        run(&["-p", "hi"])
    } else {
        assert_eq!(run(&["-p", "one"]).status.code(), Some(0));
        let mode: &[&str] = if json_mode {
            &["--mode", "json"]
        } else {
            &["-p"]
        };
        run(&[mode, &["--continue", &second_prompt()]].concat())
    };
    let file = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let lines = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (out, lines)
}

/// The four cases against Pi 1.6.0 on the same scripts: the same entries (kind, role, stop
/// reason, text), the same `context_edit`s, the same stdout and exit code, the "truncated" line
/// on stderr alike; and the same recovery events (`--json` / Pi's `--mode json`) for the
/// second cut. Also the compactions' `firstKeptEntryId` (as the kept entry's position) and
/// summaries, every conversation request whole, and the messages each summary request
/// summarises: Pi 1.6's cut through the left-out entries (`findProjectedCutPoint`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_and_output_are_pi_1_6_s() {
    let Some(pi) = pi_e2e::pi16_bin("length") else {
        return;
    };
    let tmp = TempDir::new("length-pi16");
    for (name, script) in scripts() {
        let small = name == "small";
        let their_mock = mock(script.clone()).await;
        let (their_out, their_lines) =
            theirs(&pi, &their_mock, &tmp.path().join(name), small, false);
        let our_mock = mock(script).await;
        let (our_out, our_lines) = if small {
            ours_small(&our_mock, "length-pi16-small", &[])
        } else {
            ours(&our_mock, &format!("length-pi16-{name}"), &[])
        };
        // stderr: ours also says what the compaction did; the "truncated" line is Pi's.
        let said = |o: &Output| {
            let (code, stdout, _) = printed(o);
            let truncated = String::from_utf8_lossy(&o.stderr).contains(TRUNCATED);
            (code, stdout, truncated)
        };
        assert_eq!(edits(&our_lines), edits(&their_lines), "{name}");
        assert_eq!(said(&our_out), said(&their_out), "{name}");
        assert_eq!(kinds(&our_lines), kinds(&their_lines), "{name}");
        assert_eq!(
            conversation_requests(&our_mock),
            conversation_requests(&their_mock),
            "{name}"
        );
        assert_eq!(compactions(&our_lines), compactions(&their_lines), "{name}");
        assert_eq!(summarised(&our_mock), summarised(&their_mock), "{name}");
    }
    // The events of the second cut: Pi 1.6.0's `--mode json` and our `--json`.
    let their_mock = mock(twice()).await;
    let (their_out, _) = theirs(&pi, &their_mock, &tmp.path().join("json"), false, true);
    let our_mock = mock(twice()).await;
    let (our_out, _) = ours(&our_mock, "length-pi16-json", &["--json"]);
    assert_eq!(recovery_events(&our_out), recovery_events(&their_out));
    assert_eq!(recovery_events(&our_out).len(), 5);
}

/// The four cases' whole event sequences (`--json` / Pi's `--mode json`, all but the deltas)
/// against Pi 1.6.0 on the same scripts: the cut run ends (`turn_end`, `agent_end`), the
/// answer's `context_edit` is told by `entry_appended`, then the compaction (none when there
/// is nothing to compact), the retry as a new run (`agent_start` … `agent_end`), and
/// `agent_settled` last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_sequences_are_pi_1_6_s() {
    let Some(pi) = pi_e2e::pi16_bin("length") else {
        return;
    };
    let tmp = TempDir::new("length-pi16-events");
    for (name, script) in scripts() {
        let small = name == "small";
        let their_mock = mock(script.clone()).await;
        let (their_out, _) = theirs(&pi, &their_mock, &tmp.path().join(name), small, true);
        let our_mock = mock(script).await;
        let our_name = format!("length-pi16-events-{name}");
        let (our_out, _) = if small {
            ours_small(&our_mock, &our_name, &["--json"])
        } else {
            ours(&our_mock, &our_name, &["--json"])
        };
        assert_eq!(
            sequence(&json_lines(&our_out)),
            sequence(&json_lines(&their_out)),
            "{name}"
        );
    }
}

/// The script of the follow-up case: the first turn, the cut answer held until the gate
/// opens (the follow-up is queued meanwhile), the follow-up's answer.
fn follow_up_script(gate: &Arc<tokio::sync::Notify>) -> Vec<Step> {
    vec![
        Step::text(&first_answer()),
        Step::Gate(gate.clone(), Box::new(Step::length("cut answer", 50))),
        Step::text("answer three"),
        Step::text("never asked"),
    ]
}

/// Waits until `mock` has received `n` requests.
async fn requests_reach(mock: &MockModel, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while mock.requests().len() < n {
        assert!(std::time::Instant::now() < deadline, "no request {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ours over LSP: "one", then the second prompt whose cut answer is held while the
/// follow-up "three" is queued. Returns the second run's assistant `message_end`s and
/// compaction events as `[type, stopReason, text]`, and the session file's lines.
async fn ours_with_a_follow_up(
    m: &MockModel,
    gate: &Arc<tokio::sync::Notify>,
) -> (Vec<Value>, Vec<Value>) {
    let tmp = TempDir::new("length-follow-up");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(tmp.path().join("agent")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(
        tmp.path().join("agent/settings.json"),
        json!({"compaction": {"keepRecentTokens": 100}}).to_string(),
    )
    .unwrap();
    let mut c = start_with_mock(&ws, m, EditorBehavior::default()).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "one", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    c.run_until_end(Duration::from_secs(30)).await;
    c.request(
        "agent/prompt",
        json!({"sessionId": sid, "text": second_prompt()}),
    )
    .await
    .unwrap();
    requests_reach(m, 2).await;
    c.request("agent/followUp", json!({"sessionId": sid, "text": "three"}))
        .await
        .unwrap();
    gate.notify_one();
    let events = c
        .run_until_end(Duration::from_secs(30))
        .await
        .iter()
        .map(|e| e["event"].clone())
        .collect::<Vec<_>>();
    c.shutdown().await;
    (follow_up_events(&events), session_lines(&ws))
}

/// Of a run's events: the assistant `message_end`s and compaction events as `[type,
/// stopReason, text]`.
fn follow_up_events(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| {
            e["type"].as_str().unwrap_or("").starts_with("compaction")
                || e["type"] == "message_end" && e["message"]["role"] == "assistant"
        })
        .map(|e| {
            json!([
                e["type"],
                e["message"]["stopReason"],
                e["message"]["content"][0]["text"]
            ])
        })
        .collect()
}

/// Pi 1.6.0 the same way: `-p one`, then RPC mode on `--continue`: the second prompt, the
/// follow-up once the held request arrived, the gate opened, events read until
/// `agent_settled`. Returns what [`ours_with_a_follow_up`] returns.
async fn theirs_with_a_follow_up(
    pi: &Path,
    m: &MockModel,
    gate: &Arc<tokio::sync::Notify>,
    tmp: &Path,
) -> (Vec<Value>, Vec<Value>) {
    use std::io::{BufRead, Write};
    let (ws, agent, sessions) = (tmp.join("ws"), tmp.join("agent"), tmp.join("sessions"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), m.models_json().to_string()).unwrap();
    std::fs::write(
        agent.join("settings.json"),
        json!({"compaction": {"keepRecentTokens": 100}}).to_string(),
    )
    .unwrap();
    let dir = [OsStr::new("--session-dir"), sessions.as_os_str()];
    let first = run_pi_in(pi, &ws, &agent, tmp, &sessions, &["-p", "one"]);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let rpc = [
        OsStr::new("--mode"),
        OsStr::new("rpc"),
        OsStr::new("--continue"),
    ];
    let mut child = pi_e2e::headless::pi_command(pi, &ws, &agent, tmp, dir.iter().chain(&rpc))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str(&line) {
                if tx.send(v).is_err() {
                    break;
                }
            }
        }
    });
    let prompt = json!({"id": "p", "type": "prompt", "message": second_prompt()});
    writeln!(stdin, "{prompt}").unwrap();
    requests_reach(m, 2).await;
    writeln!(
        stdin,
        "{}",
        json!({"id": "f", "type": "follow_up", "message": "three"})
    )
    .unwrap();
    // The follow-up is queued (its response) before the held answer is let go.
    let mut events = Vec::new();
    loop {
        let v = tokio::task::block_in_place(|| rx.recv_timeout(Duration::from_secs(60))).unwrap();
        let queued = v["type"] == "response" && v["id"] == "f";
        events.push(v);
        if queued {
            break;
        }
    }
    gate.notify_one();
    loop {
        let v = tokio::task::block_in_place(|| rx.recv_timeout(Duration::from_secs(60))).unwrap();
        let settled = v["type"] == "agent_settled";
        events.push(v);
        if settled {
            break;
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let file = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let lines = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (follow_up_events(&events), lines)
}

/// A follow-up queued while a cut answer streams is answered before any recovery, as Pi
/// 1.6.0 does (its agent loop delivers queued messages before its run ends and
/// `_checkCompaction` runs; the user message then resets the one recovery): no
/// `context_edit`, no compaction, the cut answer stays in the context and the follow-up's
/// request carries it. Checked against Pi 1.6.0 in RPC mode on the same script: the same
/// events, entries and requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_queued_while_the_cut_answer_streams_comes_first_as_in_pi() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let m = mock(follow_up_script(&gate)).await;
    let (events, lines) = ours_with_a_follow_up(&m, &gate).await;
    assert_eq!(
        events,
        [
            json!(["message_end", "length", "cut answer"]),
            json!(["message_end", "stop", "answer three"]),
        ]
    );
    assert_eq!(
        kinds(&lines),
        [
            "message:user::one",
            "message:assistant:stop:first answer",
            "message:user::two xxxxxxxx",
            "message:assistant:length:cut answer",
            "message:user::three",
            "message:assistant:stop:answer three",
        ]
    );
    let requests = conversation_requests(&m);
    let roles: Vec<(&str, &str)> = requests[2]
        .iter()
        .map(|(role, text)| (role.as_str(), &text[..text.len().min(12)]))
        .collect();
    assert_eq!(
        roles,
        [
            ("user", "one"),
            ("assistant", "first answer"),
            ("user", "two xxxxxxxx"),
            ("assistant", "cut answer"),
            ("user", "three"),
        ]
    );
    assert_eq!(requests.len(), 3);

    let Some(pi) = pi_e2e::pi16_bin("length") else {
        return;
    };
    let tmp = TempDir::new("length-follow-up-pi16");
    let gate = Arc::new(tokio::sync::Notify::new());
    let their_mock = mock(follow_up_script(&gate)).await;
    let (their_events, their_lines) =
        theirs_with_a_follow_up(&pi, &their_mock, &gate, tmp.path()).await;
    assert_eq!(events, their_events);
    assert_eq!(kinds(&lines), kinds(&their_lines));
    assert_eq!(requests, conversation_requests(&their_mock));
}

//! What a client or user sees of a run, against the real Pi 1.6.0 on the same loopback script
//! (issue 29, "behaviour as Pi 1.6.0 tells it"): the whole `--mode json` event lines of Pi and
//! `pi-lsp run --json` (every event but the streamed deltas, values whole but for what differs
//! by run: times, entry ids, the session's folder), their exit codes, and print mode's stdout
//! and stderr (`pi -p`, `pi-lsp run`). Pi runs as `$PI16_REF_BIN` (required under `CI=true`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use pi_e2e::headless::{run_pi_in, Headless};
use pi_e2e::lsp_client::{start_with_mock, EditorBehavior};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::pi_rpc::PiRpc;
use pi_e2e::TempDir;
use serde_json::{json, Map, Value};

/// The tests' name when Pi 1.6.0 is missing.
const WHAT: &str = "Pi 1.6.0 event comparison";

/// `mock`'s `models.json` with `mock-1`'s context window set to `window`.
fn models(mock: &MockModel, window: u64) -> Value {
    let mut m = mock.models_json();
    m["providers"]["mock"]["models"][0]["contextWindow"] = json!(window);
    m
}

/// One side's run: its output and the lines of the session file it wrote (empty when it
/// wrote none).
struct Ran {
    out: Output,
    stored: Vec<Value>,
}

/// A loopback model's script: its steps, what every answer reports as its usage (`(input,
/// output)` tokens; the mock's default when `None`), and a prompt run first in print mode
/// (`first`), the compared run then going on with its session (`--continue`).
#[derive(Clone)]
struct Script {
    steps: Vec<Step>,
    usage: Option<(u64, u64)>,
    first: Option<&'static str>,
    /// The settings the first prompt runs with, when not the compared run's.
    first_settings: Option<Value>,
}

impl Script {
    fn of(steps: Vec<Step>) -> Script {
        Script {
            steps,
            usage: None,
            first: None,
            first_settings: None,
        }
    }

    async fn start(self) -> MockModel {
        let mock = MockModel::start(self.steps).await;
        if let Some((input, output)) = self.usage {
            mock.set_usage(input, output);
        }
        mock
    }
}

/// Pi 1.6.0 on a fresh loopback model playing `script`, in a fresh folder under `tmp` with
/// `settings` and `window`: `pi --session-dir … ARGS`.
async fn theirs(
    pi: &Path,
    tmp: &Path,
    script: Script,
    window: u64,
    settings: &Value,
    args: &[&str],
) -> Ran {
    let (first, first_settings) = (script.first, script.first_settings.clone());
    let mock = script.start().await;
    let (ws, agent, sessions) = (tmp.join("ws"), tmp.join("agent"), tmp.join("sessions"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), models(&mock, window).to_string()).unwrap();
    let write_settings = |s: &Value| std::fs::write(agent.join("settings.json"), s.to_string());
    write_settings(first_settings.as_ref().unwrap_or(settings)).unwrap();
    let run = |args: &[&str]| run_pi_in(pi, &ws, &agent, tmp, &sessions, args);
    let out = match first {
        None => run(args),
        Some(prompt) => {
            assert_eq!(run(&["-p", prompt]).status.code(), Some(0));
            write_settings(settings).unwrap();
            run(&[&["--continue"][..], args].concat())
        }
    };
    let stored = stored_lines(&sessions);
    Ran { out, stored }
}

/// The lines of the one session file in `dir` or its subfolders (none: empty).
fn stored_lines(dir: &Path) -> Vec<Value> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let paths: Vec<_> = rd.map(|e| e.unwrap().path()).collect();
    match paths
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
    {
        Some(f) => pi_e2e::json_lines(f),
        None => paths
            .iter()
            .filter(|p| p.is_dir())
            .map(|p| stored_lines(p))
            .find(|l| !l.is_empty())
            .unwrap_or_default(),
    }
}

/// `pi-lsp run --model mock/mock-1 ARGS` on a fresh loopback model playing `script`, in a
/// fresh workspace with `settings` and `window`.
async fn ours(name: &str, script: Script, window: u64, settings: &Value, args: &[&str]) -> Ran {
    let (first, first_settings) = (script.first, script.first_settings.clone());
    let mock = script.start().await;
    let h = Headless::new(name, &models(&mock, window));
    let write_settings = |s: &Value| std::fs::write(h.agent.join("settings.json"), s.to_string());
    write_settings(first_settings.as_ref().unwrap_or(settings)).unwrap();
    let model = ["--model", "mock/mock-1"];
    let out = match first {
        None => h.run(&[&model[..], args].concat()),
        Some(prompt) => {
            assert_eq!(
                h.run(&[&model[..], &[prompt]].concat()).status.code(),
                Some(0)
            );
            write_settings(settings).unwrap();
            h.run(&[&model[..], &["--continue"], args].concat())
        }
    };
    let stored = stored_lines(&h.ws.join(".pi/sessions"));
    Ran { out, stored }
}

/// Keys whose values differ from run to run (times, random ids, durations) and the session
/// folder Pi names: left out wherever they stand.
const PER_RUN: [&str; 5] = ["timestamp", "durationMs", "id", "parentId", "targetId"];

/// `v` without the [`PER_RUN`] keys, at every depth.
fn steady(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !PER_RUN.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), steady(v)))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(steady).collect()),
        other => other.clone(),
    }
}

/// A `--mode json` / `--json` run's event lines as [`steady_events`] takes them.
fn events(out: &Output) -> Vec<Value> {
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    steady_events(&lines)
}

/// `v` without pi-lsp's own `exitCode` in a `bash` result's `details` (docs/protocol.md), at
/// every depth; a `details` left empty goes too (Pi's has none then).
fn without_exit_code(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::Object(d)) = o.get_mut("details") {
                if d.remove("exitCode").is_some() && d.is_empty() {
                    o.remove("details");
                }
            }
            o.values_mut().for_each(without_exit_code);
        }
        Value::Array(a) => a.iter_mut().for_each(without_exit_code),
        _ => {}
    }
}

/// Events whole but for the [`PER_RUN`] keys: the session header by its keys, what streams
/// (`message_update`, a tool's `tool_execution_update`: as many as the output's pace makes)
/// left out; a system message (its sections name each side's own folders) as its role only,
/// and left out of `agent_end`'s `messages` (Pi's hold it, ours do not: docs/protocol.md).
/// `tool_execution_end`'s `durationMs` and its `bash` result's
/// `structuredContent.wall_time_seconds` are kept as `"<ms>"` / `"<s>"` (the key compared,
/// not the value); a `bash` result's `details.exitCode` (pi-lsp's own) is left out.
fn steady_events(all: &[Value]) -> Vec<Value> {
    all.iter()
        .filter(|e| {
            !matches!(
                e["type"].as_str(),
                Some("message_update" | "tool_execution_update")
            )
        })
        .map(|e| {
            // The session header (Pi 1.6's first `--mode json` record): its keys in order,
            // their values but `type` and `version` per run.
            if e["type"] == "session" {
                if let Value::Object(h) = e {
                    return Value::Object(
                        h.iter()
                            .map(|(k, v)| match k.as_str() {
                                "type" | "version" => (k.clone(), v.clone()),
                                _ => (k.clone(), json!(format!("<{k}>"))),
                            })
                            .collect(),
                    );
                }
            }
            let mut e = e.clone();
            if e["message"]["role"] == "system" {
                e["message"] = json!({"role": "system"});
            }
            if let Some(ms) = e["messages"].as_array_mut() {
                ms.retain(|m| m["role"] != "system");
            }
            without_exit_code(&mut e);
            let took = e.get("durationMs").is_some();
            let mut e = steady(&e);
            if took {
                e["durationMs"] = json!("<ms>");
            }
            if let Some(w) = e.pointer_mut("/result/structuredContent/wall_time_seconds") {
                *w = json!("<s>");
            }
            e
        })
        .collect()
}

/// Asserts `ours` and `theirs` are the same lists, showing the first place they differ.
fn assert_same(ours: &[Value], theirs: &[Value], what: &str) {
    for (i, (o, t)) in ours.iter().zip(theirs).enumerate() {
        assert_eq!(o, t, "{what}: event {i} differs");
    }
    assert_eq!(ours.len(), theirs.len(), "{what}: {ours:#?}\n{theirs:#?}");
}

/// Item (c): a threshold compaction with nothing to compact. Every answer reports 5,000 input
/// tokens on a 20,000-token window (threshold 20,000 − 16,384 reserve), so after a first prompt
/// the context is past the threshold when the second one runs; the conversation is inside the
/// kept recent tokens, so Pi 1.6's `prepareCompaction` prepares nothing and
/// `_runAutoCompaction` starts none: no `compaction_start` / `compaction_end`, the run as any
/// other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threshold_compaction_with_nothing_to_compact_is_not_told() {
    let Some(pi) = pi_e2e::pi16_bin(WHAT) else {
        return;
    };
    let tmp = TempDir::new("pi16-events-threshold");
    let script = Script {
        steps: vec![Step::text("first answer"), Step::text("done")],
        usage: Some((5_000, 10)),
        first: Some("one"),
        first_settings: None,
    };
    let settings = json!({});
    let args = ["--mode", "json", "two"];
    let t = theirs(&pi, tmp.path(), script.clone(), 20_000, &settings, &args).await;
    let o = ours(
        "pi16-events-threshold-ours",
        script,
        20_000,
        &settings,
        &["--json", "two"],
    )
    .await;
    let (o, t) = (events(&o.out), events(&t.out));
    assert!(t
        .iter()
        .all(|e| !e["type"].as_str().unwrap().starts_with("compaction")));
    assert_same(&o, &t, "threshold");
}

/// `e` with what names an entry of its own run (a compaction's `firstKeptEntryId`) kept as
/// `"<id>"`: the key compared, not the value.
fn without_entry_ids(mut e: Value) -> Value {
    for p in ["/result/firstKeptEntryId", "/firstKeptEntryId"] {
        if let Some(v) = e.pointer_mut(p) {
            *v = json!("<id>");
        }
    }
    e
}

/// The compared entries of a session file: every entry after the header as [`steady`]
/// takes it and [`without_entry_ids`], a system message as its role only (its sections name
/// each side's own folders), a compaction's kept entry named by its type and role.
fn steady_entries(stored: &[Value]) -> Vec<Value> {
    stored
        .iter()
        .filter(|e| e["type"] != "session")
        .map(|e| {
            let mut v = without_entry_ids(steady(e));
            if e["message"]["role"] == "system" {
                v["message"] = json!({"role": "system"});
            }
            if let Some(first) = e["firstKeptEntryId"].as_str() {
                let kept = stored.iter().find(|k| k["id"] == first).unwrap();
                v["firstKept"] = json!([kept["type"], kept["message"]["role"]]);
            }
            v
        })
        .collect()
}

/// Threshold compaction where Pi 1.6 runs it, after a run (`_handlePostAgentRun`): the second
/// prompt's answer reports 17,000 input tokens on a 20,000-token window with a 4,000-token
/// reserve, so after its `agent_end` the context is compacted (one summary request), before
/// the run settles. The events of that run and every stored entry, whole, are Pi 1.6.0's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threshold_compaction_runs_after_the_run_as_pi_runs_it() {
    let Some((types, ours_entries)) = threshold_compaction_as_pi("after", false).await else {
        return;
    };
    let end = types.iter().position(|t| t == "agent_end").unwrap();
    assert_eq!(
        types[end..],
        [
            "agent_end",
            "compaction_start",
            "compaction_end",
            "agent_settled"
        ][..],
        "{types:#?}"
    );
    assert_eq!(
        ours_entries,
        [
            "model_change",
            "thinking_level_change",
            "message:system",
            "message:user",
            "message:assistant",
            "message:user",
            "message:assistant",
            "compaction"
        ]
    );
}

/// Threshold compaction where Pi 1.6 runs it, before a prompt (`_prepareRun`): the first
/// prompt's answer (17,000 input tokens) ran with automatic compaction off; with it on, the
/// second prompt's run compacts first — after the session header, the compaction before the
/// run's `agent_start`, its
/// entry before the prompt's, `tokensBefore` without the prompt. Events and entries, whole,
/// are Pi 1.6.0's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threshold_compaction_runs_before_the_prompt_as_pi_runs_it() {
    let Some((types, ours_entries)) = threshold_compaction_as_pi("before", true).await else {
        return;
    };
    assert_eq!(
        types[..4],
        [
            "session",
            "compaction_start",
            "compaction_end",
            "agent_start"
        ][..],
        "{types:#?}"
    );
    assert_eq!(
        ours_entries,
        [
            "model_change",
            "thinking_level_change",
            "message:system",
            "message:user",
            "message:assistant",
            "compaction",
            "message:user",
            "message:assistant"
        ]
    );
}

/// The two threshold-compaction comparisons: a long first prompt (summarised; its answer
/// is what the kept recent tokens keep), then `two` in `--json` / `--mode json`. `before`:
/// the first answer reports 17,000 input tokens and runs with automatic compaction off, the
/// second 100; else the first 100, the second 17,000. Asserts the run's events and the
/// stored entries equal Pi 1.6.0's; returns Pi's event types and our entries' types (a
/// message as `message:<role>`), `None` without Pi 1.6.0 outside CI.
async fn threshold_compaction_as_pi(
    name: &str,
    before: bool,
) -> Option<(Vec<String>, Vec<String>)> {
    let pi = pi_e2e::pi16_bin(WHAT)?;
    let tmp = TempDir::new(&format!("pi16-events-{name}"));
    let first: &'static str = Box::leak(
        "Please read the plan and say what it does. "
            .repeat(50)
            .into_boxed_str(),
    );
    let answer = "The first answer explains the plan in some detail. ".repeat(5);
    let (first_usage, second_usage) = if before { (17_000, 100) } else { (100, 17_000) };
    // Pi's default tools on both sides.
    let settings = json!({
        "compaction": {"reserveTokens": 4_000, "keepRecentTokens": 50},
        "defaultTools": ["read", "bash", "edit", "write"],
    });
    let mut first_settings = settings.clone();
    first_settings["compaction"]["enabled"] = json!(false);
    let steps = if before {
        vec![
            Step::text_with_usage(&answer, first_usage, 10),
            Step::text_with_usage("## Goal\nThe summary.", 100, 10),
            Step::text_with_usage("done", second_usage, 10),
        ]
    } else {
        vec![
            Step::text_with_usage(&answer, first_usage, 10),
            Step::text_with_usage("done", second_usage, 10),
            Step::text_with_usage("## Goal\nThe summary.", 100, 10),
        ]
    };
    let script = Script {
        steps,
        usage: None,
        first: Some(first),
        first_settings: before.then_some(first_settings),
    };
    let args = ["--mode", "json", "two"];
    let t = theirs(&pi, tmp.path(), script.clone(), 20_000, &settings, &args).await;
    let o = ours(
        &format!("pi16-events-{name}-ours"),
        script,
        20_000,
        &settings,
        &["--json", "two"],
    )
    .await;
    // The stored prompt/tool checkpoint differs by what each side's prompt holds (Pi's docs
    // section, the folders' names): `estimatedTokensAfter`, which counts it, is compared net
    // of it, each side's checkpoint estimated as Pi estimates it.
    let checkpoint = |r: &Ran| -> i64 {
        let c = r.stored.iter().find(|e| e["type"] == "compaction").unwrap();
        pi_core::compaction::pi_estimate_tokens(&c["systemMessage"]) as i64
    };
    let (ours_checkpoint, theirs_checkpoint) = (checkpoint(&o), checkpoint(&t));
    let steady_all = |r: &Ran, own: i64| -> Vec<Value> {
        events(&r.out)
            .into_iter()
            .map(without_entry_ids)
            .map(|mut e| {
                if let Some(n) = e.pointer_mut("/result/estimatedTokensAfter") {
                    *n = json!(n.as_i64().unwrap() - own);
                }
                e
            })
            .collect()
    };
    let (oe, te) = (
        steady_all(&o, ours_checkpoint),
        steady_all(&t, theirs_checkpoint),
    );
    assert_same(&oe, &te, name);
    // Every entry, the system messages and the compaction's checkpoint as their role / keys.
    let entries = |r: &Ran| -> Vec<Value> {
        steady_entries(&r.stored)
            .into_iter()
            .map(|mut e| {
                if let Some(Value::Object(m)) = e.get_mut("systemMessage") {
                    let keys: Vec<&String> = m.keys().collect();
                    e["systemMessage"] = json!(keys);
                }
                e
            })
            .collect()
    };
    assert_same(&entries(&o), &entries(&t), &format!("{name}: entries"));
    let types = te
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect();
    let ours_entries = o
        .stored
        .iter()
        .filter(|e| e["type"] != "session")
        .map(|e| match e["message"]["role"].as_str() {
            Some(role) => format!("message:{role}"),
            None => e["type"].as_str().unwrap().to_string(),
        })
        .collect();
    Some((types, ours_entries))
}

/// A provider's HTTP error: `status` with an OpenAI-style error body saying `message`.
fn http_error(status: u16, message: &str) -> Step {
    Step::Raw {
        status,
        content_type: "application/json".into(),
        body: json!({"error": {"message": message}}).to_string(),
    }
}

/// Item (d): the exit code of each mode as Pi 1.6's `runPrintMode` sets it, for a refused
/// request (a 400, not retried) and an answer cut at the model's `maxTokens` (not recoverable):
/// `--mode json` (ours `--json`) exits 0 either way, its events say how the run ended; print
/// mode exits 1 and prints what Pi prints on stdout (the cut answer's text; nothing after an
/// error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_are_pi_1_6_s() {
    let Some(pi) = pi_e2e::pi16_bin(WHAT) else {
        return;
    };
    let tmp = TempDir::new("pi16-events-exit");
    let cases = [
        ("400", http_error(400, "bad request")),
        ("length", Step::length("cut answer", 4_096)),
    ];
    for (name, step) in cases {
        for (mode, theirs_args, ours_args) in [
            ("json", &["--mode", "json", "hi"][..], &["--json", "hi"][..]),
            ("print", &["-p", "hi"][..], &["hi"][..]),
        ] {
            let script = Script::of(vec![step.clone()]);
            let dir = tmp.path().join(format!("{name}-{mode}"));
            let t = theirs(&pi, &dir, script.clone(), 128_000, &json!({}), theirs_args).await;
            let our_name = format!("pi16-events-exit-{name}-{mode}");
            let o = ours(&our_name, script, 128_000, &json!({}), ours_args).await;
            let code = |r: &Ran| r.out.status.code();
            assert_eq!(code(&o), code(&t), "{name} {mode}");
            assert_eq!(
                code(&t),
                Some(if mode == "json" { 0 } else { 1 }),
                "{name} {mode}"
            );
            if mode == "print" {
                assert_eq!(o.out.stdout, t.out.stdout, "{name} {mode}");
            }
        }
    }
}

/// Settings on both sides: retries 10 ms apart (doubling), so a retried run stays fast.
fn fast_retries() -> Value {
    json!({"retry": {"baseDelayMs": 10}})
}

/// The retry scripts: a 500 then an answer; an overloaded 529 and a 429 (no `Retry-After`)
/// then an answer; four 500s (the three retries all fail).
fn retry_scripts() -> [(&'static str, Vec<Step>); 3] {
    [
        (
            "500",
            vec![http_error(500, "internal"), Step::text("ok after retry")],
        ),
        (
            "529-429",
            vec![
                http_error(529, "Overloaded"),
                http_error(429, "rate limited"),
                Step::text("fine"),
            ],
        ),
        ("failed", (0..4).map(|_| http_error(500, "boom")).collect()),
    ]
}

/// Item (b): a retried provider error is told as Pi 1.6 tells it in `--mode json` — the failed
/// attempt's run ends (`turn_end`, `agent_end` with `willRetry: true`), `auto_retry_start`,
/// the attempt's `context_edit` as `entry_appended`, the retry as a new run (`agent_start`,
/// `turn_start`); a success's `auto_retry_end` after its `message_end`, a last failure's after
/// its run's `agent_end` (`willRetry: false`); `agent_settled` last. Whole events, with the
/// exit code (0 for all three, item (d)).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_provider_error_is_told_as_pi_tells_it() {
    let Some(pi) = pi_e2e::pi16_bin(WHAT) else {
        return;
    };
    let tmp = TempDir::new("pi16-events-retry");
    for (name, steps) in retry_scripts() {
        let script = Script::of(steps);
        let args = ["--mode", "json", "hi"];
        let dir = tmp.path().join(name);
        let t = theirs(&pi, &dir, script.clone(), 128_000, &fast_retries(), &args).await;
        let our_name = format!("pi16-events-retry-{name}");
        let o = ours(
            &our_name,
            script,
            128_000,
            &fast_retries(),
            &["--json", "hi"],
        )
        .await;
        assert_eq!(o.out.status.code(), t.out.status.code(), "{name}");
        let (o, t) = (events(&o.out), events(&t.out));
        assert!(t.iter().any(|e| e["type"] == "auto_retry_start"), "{name}");
        assert_same(&o, &t, name);
    }
}

/// Ours over LSP (the editor's front door) in a fresh workspace with `settings`: one prompt
/// on `mock/mock-1`, its events until `agent_settled` as `agent/event` sends them.
async fn over_lsp(name: &str, script: Script, settings: &Value, prompt: &str) -> Vec<Value> {
    let mock = script.start().await;
    let tmp = TempDir::new(name);
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(tmp.path().join("agent")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(tmp.path().join("agent/settings.json"), settings.to_string()).unwrap();
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let params = json!({"text": prompt, "model": "mock/mock-1"});
    c.request("agent/prompt", params).await.unwrap();
    let events = c.events_until_settled(Duration::from_secs(30)).await;
    c.shutdown().await;
    events
}

/// Pi 1.6.0 in RPC mode in a fresh folder under `tmp` with `settings`: one prompt, its events
/// until `agent_settled` (responses left out).
async fn over_rpc(
    pi: &Path,
    tmp: &Path,
    script: Script,
    settings: &Value,
    prompt: &str,
) -> Vec<Value> {
    let mock = script.start().await;
    let (ws, agent) = (tmp.join("ws"), tmp.join("agent"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), mock.models_json().to_string()).unwrap();
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
    let events = tokio::task::block_in_place(|| {
        let sessions = tmp.join("sessions");
        let args = [OsStr::new("--session-dir"), sessions.as_os_str()];
        let mut rpc = PiRpc::start(pi, &ws, &agent, &args);
        rpc.prompt(prompt)
    });
    events
        .into_iter()
        .filter(|v| v["type"] != "response")
        .collect()
}

/// Item (b) over the editor's front door: a 500 then an answer, an overloaded 529 and a 429 then
/// an answer, as `agent/event` tells them, against Pi 1.6.0 in RPC mode on the same scripts;
/// whole events as [`a_retried_provider_error_is_told_as_pi_tells_it`] compares them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_lsp_a_retried_provider_error_is_told_as_pi_tells_it() {
    let Some(pi) = pi_e2e::pi16_bin(WHAT) else {
        return;
    };
    let tmp = TempDir::new("pi16-events-retry-rpc");
    for (name, steps) in retry_scripts().into_iter().take(2) {
        let script = Script::of(steps);
        let dir = tmp.path().join(name);
        let t = over_rpc(&pi, &dir, script.clone(), &fast_retries(), "hi").await;
        let o = over_lsp(
            &format!("pi16-events-lsp-{name}"),
            script,
            &fast_retries(),
            "hi",
        )
        .await;
        assert_same(&steady_events(&o), &steady_events(&t), name);
    }
}

/// Item (g): print mode's output against `pi -p` on the same scripts — an answer, a 500 retried
/// then answered, four 500s (the retries all fail): the same exit code and stdout byte for byte;
/// Pi's stderr (nothing, or its closing line: the error in its words) is the end of ours, and
/// every line before it is one of pi-lsp's own notes (`pi-lsp: …`: retries, where the session
/// went).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn print_mode_says_what_pi_says() {
    let Some(pi) = pi_e2e::pi16_bin(WHAT) else {
        return;
    };
    let tmp = TempDir::new("pi16-events-print");
    let cases = [
        ("answer", vec![Step::text("hello there")]),
        (
            "retried",
            vec![http_error(500, "internal"), Step::text("ok after retry")],
        ),
        ("failed", (0..4).map(|_| http_error(500, "boom")).collect()),
    ];
    for (name, steps) in cases {
        let script = Script::of(steps);
        let dir = tmp.path().join(name);
        let t = theirs(
            &pi,
            &dir,
            script.clone(),
            128_000,
            &fast_retries(),
            &["-p", "hi"],
        )
        .await;
        let our_name = format!("pi16-events-print-{name}");
        let o = ours(&our_name, script, 128_000, &fast_retries(), &["hi"]).await;
        assert_eq!(o.out.status.code(), t.out.status.code(), "{name}");
        assert_eq!(
            String::from_utf8_lossy(&o.out.stdout),
            String::from_utf8_lossy(&t.out.stdout),
            "{name}"
        );
        let (our_err, their_err) = (
            String::from_utf8_lossy(&o.out.stderr).into_owned(),
            String::from_utf8_lossy(&t.out.stderr).into_owned(),
        );
        let ours_lines: Vec<&str> = our_err.lines().collect();
        let theirs_lines: Vec<&str> = their_err.lines().collect();
        let (notes, closing) = ours_lines.split_at(ours_lines.len() - theirs_lines.len());
        assert_eq!(closing, theirs_lines.as_slice(), "{name}: {our_err}");
        assert!(
            notes.iter().all(|l| l.starts_with("pi-lsp: ")),
            "{name}: {our_err}"
        );
    }
}

/// Issue 29 (pi44 a): a tool round's events as Pi 1.6.0's `--mode json` tells them, whole:
/// `bash` exiting 3 (after writing a file), `read` of that file, `bash` exiting 0, an
/// answer. Each `tool_execution_end` carries `durationMs` (Pi's measured tool time: the key
/// on both sides, the value masked) and the result's `structuredContent` (`bash`: `{output,
/// truncated, exit_code, wall_time_seconds}`, `read`: the text), and the non-zero exit is a
/// result marked `isError: true` as Pi's. The stored tool results hold what Pi's hold: the
/// same keys (`durationMs`, no `structuredContent`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_round_s_end_events_carry_what_pi_s_carry() {
    let Some(pi) = pi_e2e::pi16_bin(WHAT) else {
        return;
    };
    let tmp = TempDir::new("pi16-events-tools");
    let script = Script::of(vec![
        Step::call(
            "c1",
            "bash",
            json!({"command": "printf 'hello\\n' > a.txt; printf 'ok\\n'; exit 3"}),
        ),
        Step::call("c2", "read", json!({"path": "a.txt"})),
        Step::call("c3", "bash", json!({"command": "printf 'fine'"})),
        Step::text("done"),
    ]);
    let args = ["--mode", "json", "go"];
    let t = theirs(&pi, tmp.path(), script.clone(), 128_000, &json!({}), &args).await;
    let o = ours(
        "pi16-events-tools-ours",
        script,
        128_000,
        &json!({}),
        &["--json", "go"],
    )
    .await;
    let (oe, te) = (events(&o.out), events(&t.out));
    let ends: Vec<&Value> = te
        .iter()
        .filter(|e| e["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends.len(), 3);
    assert!(ends.iter().all(|e| e["durationMs"] == "<ms>"));
    assert!(ends
        .iter()
        .all(|e| !e["result"]["structuredContent"].is_null()));
    assert_same(&oe, &te, "tool round");
    let results = |r: &Ran| -> Vec<Vec<String>> {
        r.stored
            .iter()
            .filter(|l| l["message"]["role"] == "toolResult")
            .map(|l| {
                let mut m = l["message"].clone();
                without_exit_code(&mut m);
                let mut keys: Vec<String> = m.as_object().unwrap().keys().cloned().collect();
                keys.sort();
                keys
            })
            .collect()
    };
    assert_eq!(results(&t).len(), 3);
    assert!(results(&t)
        .iter()
        .all(|k| k.contains(&"durationMs".to_string())));
    assert_eq!(results(&o), results(&t));
}

/// A Pi-format session file in `ws` without a stored system message: a question and an
/// answer whose usage says `total` tokens (as a file written before Pi 1.6, or by hand).
fn without_system_message(ws: &Path, total: u64) -> String {
    let at = "2026-01-01T00:00:00.000Z";
    let lines = [
        json!({"type": "session", "version": 3, "id": "0c0ffee0-0000-4000-8000-000000000001",
               "timestamp": at, "cwd": ws}),
        json!({"type": "message", "id": "a1", "parentId": null, "timestamp": at,
               "message": {"role": "user", "content": [{"type": "text", "text": "earlier question"}],
                           "timestamp": 1_767_225_600_000u64}}),
        json!({"type": "message", "id": "a2", "parentId": "a1", "timestamp": at,
               "message": {"role": "assistant", "content": [{"type": "text", "text": "earlier answer"}],
                           "api": "openai-completions", "provider": "mock", "model": "mock-1",
                           "usage": {"input": total - 100, "output": 100, "cacheRead": 0, "cacheWrite": 0,
                                     "totalTokens": total,
                                     "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
                           "stopReason": "stop", "timestamp": 1_767_225_601_000u64}}),
    ];
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Issue 29 (c): a resumed file without a stored system message, its last usage 45,000 of a
/// 64,000-token window (`maxTokens` 16,000, compaction off), continued with the same tools:
/// Pi 1.6's `clampMaxTokensToContext` counts the system message the run stores (after the
/// usage anchor) as input, and the request asks the same `max_completion_tokens` as Pi's —
/// below what the usage and the prompt alone leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_file_without_a_system_message_asks_pi_s_output_limit() {
    let Some(pi) = pi_e2e::pi16_bin(WHAT) else {
        return;
    };
    let settings = json!({"compaction": {"enabled": false}});
    let with_max = |mock: &MockModel| {
        let mut m = models(mock, 64_000);
        m["providers"]["mock"]["models"][0]["maxTokens"] = json!(16_000);
        m
    };
    let tools = ["--tools", "read,bash,edit,write"];
    // Pi's side.
    let tmp = TempDir::new("pi16-budget-pi16");
    let mock = MockModel::start(vec![Step::text("fine")]).await;
    let (ws, agent) = (tmp.path().join("ws"), tmp.path().join("agent"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), with_max(&mock).to_string()).unwrap();
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
    let file = tmp.path().join("resumed.jsonl");
    std::fs::write(&file, without_system_message(&ws, 45_000)).unwrap();
    let sessions = tmp.path().join("sessions");
    let args = [
        &["--session", file.to_str().unwrap(), "-p", "next"][..],
        &tools,
    ]
    .concat();
    let out = run_pi_in(&pi, &ws, &agent, tmp.path(), &sessions, &args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let theirs = mock.requests()[0].body["max_completion_tokens"].clone();
    // Ours.
    let mock = MockModel::start(vec![Step::text("fine")]).await;
    let mut h = Headless::new("pi16-budget-ours", &with_max(&mock));
    // The same prompt as Pi's: its `docs` section names Pi's package.
    let package = pi_e2e::pi16_package(&pi);
    h.env
        .push(("PI_PACKAGE_DIR", package.to_string_lossy().into_owned()));
    std::fs::write(h.agent.join("settings.json"), settings.to_string()).unwrap();
    let file = h.ws.join("resumed.jsonl");
    std::fs::write(&file, without_system_message(&h.ws, 45_000)).unwrap();
    let model = ["--model", "mock/mock-1"];
    let args = [
        &model[..],
        &["--session", file.to_str().unwrap(), "next"],
        &tools,
    ]
    .concat();
    let out = h.run(&args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ours = mock.requests()[0].body["max_completion_tokens"].clone();
    assert_eq!(ours, theirs);
    // Without the system message: 64,000 − 45,000 − ceil("next" / 3.5) − 4,096 = 14,902.
    assert!(ours.as_u64().unwrap() < 14_902, "{ours}");
}

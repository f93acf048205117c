//! Branch summaries against the real Pi 1.6.0 (issue 29): the same conversation on the same
//! loopback model, then the same tree navigations with a summary, on both sides; the summary
//! request bodies compared whole, and the `branch_summary` entries each side writes compared
//! whole but for ids and times. Pi runs in RPC mode (`--mode rpc`); as its RPC has no tree
//! navigation command, a small extension's `/bsum <entryId> <focus>` command calls the
//! command context's `navigateTree(id, {summarize: true, customInstructions})` (Pi's
//! `AgentSession.navigateTree`, the one `/tree` uses) and writes its outcome to a file. pi-lsp
//! runs over LSP (`agent/session/branch`). `$PI16_REF_BIN` (installed by `.ci/pi16.sh`) is
//! required under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pi_e2e::headless::pi_command;
use pi_e2e::json_lines;
use pi_e2e::lsp_client::{start_with_mock, EditorBehavior, LspClient};
use pi_e2e::mock_model::{Answer, MockModel, Step};
use pi_e2e::pi_rpc::PiRpc;
use pi_e2e::TempDir;
use serde_json::{json, Value};

/// The custom instructions of the first navigation.
const FOCUS: &str = "mention the file names";

/// What the summary model answers.
const SUMMARY: &str = "## Goal\nRead and edit files";

/// The extension giving Pi's RPC mode a tree navigation: `/bsum <entryId> [focus]`, its
/// outcome (`{"ok": result}` or `{"error": message}`) written to `$BSUM_OUT`.
const EXTENSION: &str = r#"import { writeFileSync } from "node:fs";
export default function (pi) {
  pi.registerCommand("bsum", {
    description: "navigate the tree with a branch summary",
    handler: async (args, ctx) => {
      const [target, ...focus] = args.trim().split(" ");
      let outcome;
      try {
        await ctx.waitForIdle();
        const r = await ctx.navigateTree(target, {
          summarize: true,
          customInstructions: focus.length > 0 ? focus.join(" ") : undefined,
        });
        outcome = { ok: r };
      } catch (e) {
        outcome = { error: String(e && e.message ? e.message : e) };
      }
      writeFileSync(process.env.BSUM_OUT, JSON.stringify(outcome));
    },
  });
  pi.registerCommand("nav", {
    description: "navigate the tree with navigateTree's options as JSON",
    handler: async (args, ctx) => {
      const { target, options } = JSON.parse(args);
      let outcome;
      try {
        await ctx.waitForIdle();
        outcome = { ok: await ctx.navigateTree(target, options) };
      } catch (e) {
        outcome = { error: String(e && e.message ? e.message : e) };
      }
      writeFileSync(process.env.BSUM_OUT, JSON.stringify(outcome));
    },
  });
}
"#;

fn is_summary(body: &Value) -> bool {
    body.to_string().contains("context summarization assistant")
}

/// The conversation: an answer with thinking, then a turn reading `b.txt` and editing
/// `a.txt`; every summary request answered [`SUMMARY`].
async fn mock() -> MockModel {
    mock_answering(Step::text(SUMMARY)).await
}

/// [`mock`] answering every summary request with `summary`.
async fn mock_answering(summary: Step) -> MockModel {
    let mock = MockModel::start(vec![
        Step::Answer(Answer {
            thinking: Some("Let me think.".into()),
            text: Some("One.".into()),
            ..Answer::default()
        }),
        Step::call("c1", "read", json!({"path": "b.txt"})),
        Step::edit("c2", "a.txt", "one", "ONE"),
        Step::text("Done."),
    ])
    .await;
    mock.set_responder(Arc::new(move |body: &Value| {
        is_summary(body).then(|| summary.clone())
    }));
    mock
}

const PROMPTS: [&str; 2] = ["First question?", "Read b.txt and edit a.txt."];

/// A workspace `dir/ws` holding `a.txt` and `b.txt`.
fn workspace(dir: &Path) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    std::fs::write(ws.join("b.txt"), "two\n").unwrap();
    ws
}

/// The entries of `file` the navigations aim at: the first user message, the first assistant
/// answer, the second user message.
fn targets(file: &Path) -> [String; 3] {
    let entries = json_lines(file);
    let id = |role: &str, n: usize| {
        entries
            .iter()
            .filter(|e| e["message"]["role"] == role)
            .nth(n)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    [id("user", 0), id("assistant", 0), id("user", 1)]
}

/// Pi 1.6.0 in RPC mode with the [`EXTENSION`].
struct Pi {
    rpc: PiRpc,
    outcome: PathBuf,
    sessions: PathBuf,
}

impl Pi {
    fn start(pi: &Path, dir: &Path, mock: &MockModel) -> Pi {
        let agent = dir.join("agent");
        let home = dir.join("home");
        let ws = workspace(dir);
        for d in [&agent, &home] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(agent.join("models.json"), mock.models_json().to_string()).unwrap();
        let extension = dir.join("bsum.ts");
        std::fs::write(&extension, EXTENSION).unwrap();
        let outcome = dir.join("outcome.json");
        let sessions = dir.join("sessions");
        let mut cmd = pi_command(pi, &ws, &agent, &home, ["--extension"]);
        cmd.arg(&extension)
            .arg("--session-dir")
            .arg(&sessions)
            .env("PI_PACKAGE_DIR", pi_e2e::pi16_package(pi))
            .env("BSUM_OUT", &outcome);
        Pi {
            rpc: PiRpc::spawn(cmd),
            outcome,
            sessions,
        }
    }

    fn send(&mut self, command: Value) {
        self.rpc.send(&command);
    }

    /// Reads Pi's output up to the first value `what` accepts; panics on a failed response.
    fn wait_for(&mut self, what: &dyn Fn(&Value) -> bool) -> Value {
        let seen = self.rpc.read_until(what);
        if let Some(failed) = seen.iter().find(|v| v["success"] == json!(false)) {
            panic!("{failed}");
        }
        seen.into_iter().next_back().unwrap()
    }

    fn prompt(&mut self, text: &str) {
        self.send(json!({"type": "prompt", "message": text}));
        self.wait_for(&|v| v["type"] == "agent_end");
    }

    /// The session file Pi writes.
    fn file(&self) -> PathBuf {
        let mut found = Vec::new();
        for d in std::fs::read_dir(&self.sessions).unwrap() {
            let d = d.unwrap().path();
            if d.is_dir() {
                for f in std::fs::read_dir(&d).unwrap() {
                    found.push(f.unwrap().path());
                }
            } else {
                found.push(d);
            }
        }
        found.retain(|f| f.extension().is_some_and(|x| x == "jsonl"));
        assert_eq!(found.len(), 1, "{found:?}");
        found.pop().unwrap()
    }

    /// `/bsum target focus`: the navigation's outcome as the extension wrote it.
    fn navigate(&mut self, target: &str, focus: Option<&str>) -> Value {
        let command = match focus {
            Some(f) => format!("/bsum {target} {f}"),
            None => format!("/bsum {target}"),
        };
        self.command(&command)
    }

    /// `/nav {target, options}`: `navigateTree(target, options)`'s outcome.
    fn navigate_with(&mut self, target: &str, options: &Value) -> Value {
        self.command(&format!(
            "/nav {}",
            json!({"target": target, "options": options})
        ))
    }

    /// Runs an extension command of [`EXTENSION`] and waits for the outcome it writes.
    fn command(&mut self, command: &str) -> Value {
        let _ = std::fs::remove_file(&self.outcome);
        self.send(json!({"type": "prompt", "message": command}));
        let start = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&self.outcome) {
                if let Ok(v) = serde_json::from_str::<Value>(&text) {
                    return v;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "Pi's navigation did not finish"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(self) {
        let status = self.rpc.close();
        assert!(status.success(), "Pi exited with {status}");
    }
}

/// pi-lsp over LSP on a workspace like Pi's.
struct Ours {
    c: LspClient,
    sid: String,
    file: PathBuf,
}

impl Ours {
    async fn start(dir: &Path, mock: &MockModel) -> Ours {
        let ws = workspace(dir);
        let mut c = start_with_mock(&ws, mock, EditorBehavior::default()).await;
        let r = c
            .request(
                "agent/prompt",
                json!({"text": PROMPTS[0], "model": "mock/mock-1"}),
            )
            .await
            .unwrap();
        let sid = r["sessionId"].as_str().unwrap().to_string();
        c.run_until_end(Duration::from_secs(30)).await;
        for text in &PROMPTS[1..] {
            c.request("agent/prompt", json!({"sessionId": sid, "text": text}))
                .await
                .unwrap();
            c.run_until_end(Duration::from_secs(30)).await;
        }
        let state = c
            .request("agent/state", json!({"sessionId": sid}))
            .await
            .unwrap();
        let file = PathBuf::from(state["sessionFile"].as_str().unwrap());
        Ours { c, sid, file }
    }

    async fn navigate(&mut self, target: &str, focus: Option<&str>) -> Result<Value, Value> {
        let mut params = json!({"sessionId": self.sid, "entryId": target, "summarize": true});
        if let Some(f) = focus {
            params["customInstructions"] = json!(f);
        }
        self.c.request("agent/session/branch", params).await
    }
}

/// The summary request bodies `mock` received, in order.
fn summaries(mock: &MockModel) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .map(|r| r.body)
        .filter(is_summary)
        .collect()
}

/// The `branch_summary` entries of `file` ([`named_entries`]).
fn summary_entries(file: &Path, targets: &[String; 3]) -> Vec<Value> {
    named_entries(file, targets, "branch_summary")
}

/// The entries of type `kind` of `file`, each without its id and time, its `parentId`,
/// `fromId` and `targetId` named: `"target N"` by position among `targets`, `"before target
/// 0"` (the first target's parent), `"last answer"` (the conversation's last message),
/// `"summary N"` (the branch summaries in order).
fn named_entries(file: &Path, targets: &[String; 3], kind: &str) -> Vec<Value> {
    let entries = json_lines(file);
    let mut names: Vec<(Value, String)> = targets
        .iter()
        .enumerate()
        .map(|(n, t)| (json!(t), format!("target {n}")))
        .collect();
    let before = &entries
        .iter()
        .find(|e| e["id"] == json!(targets[0]))
        .unwrap()["parentId"];
    if !before.is_null() {
        names.push((before.clone(), "before target 0".into()));
    }
    let last = entries.iter().rfind(|e| e["type"] == "message").unwrap();
    names.push((last["id"].clone(), "last answer".into()));
    for (n, e) in entries
        .iter()
        .filter(|e| e["type"] == "branch_summary")
        .enumerate()
    {
        names.push((e["id"].clone(), format!("summary {n}")));
    }
    let name = |v: &Value| match names.iter().find(|(id, _)| id == v) {
        Some((_, n)) => json!(n),
        None => v.clone(),
    };
    entries
        .into_iter()
        .filter(|e| e["type"] == kind)
        .map(|mut e| {
            let o = e.as_object_mut().unwrap();
            o.remove("id");
            o.remove("timestamp");
            for k in ["parentId", "fromId", "targetId"] {
                if let Some(v) = o.get(k) {
                    let named = name(v);
                    o.insert(k.into(), named);
                }
            }
            e
        })
        .collect()
}

/// Two navigations with a summary, on both sides: first to the second user message (the leaf
/// goes to its parent, the first answer; the summary covers what followed the message but not
/// the message itself, as Pi collects the entries left against the target's own path; tool
/// results left out, thinking left out, the focus as "Additional focus"), then to the first
/// user message (the first answer with its thinking and the first summary, as Pi's
/// `branchSummary` message, are left; its files carried into the new summary's lists). Each
/// summary request body is Pi's whole; each entry is Pi's whole but for ids and times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branch_summary_requests_and_entries_are_pi_1_6_s() {
    let Some(pi) = pi_e2e::pi16_bin("Pi 1.6.0 branch summary comparison") else {
        return;
    };
    let tmp = TempDir::new("branch-summary-pi16");
    let pi_mock = mock().await;
    let pi_dir = tmp.path().join("pi");
    let (pi_targets, pi_outcomes, pi_file) = tokio::task::block_in_place(|| {
        let mut p = Pi::start(&pi, &pi_dir, &pi_mock);
        for text in PROMPTS {
            p.prompt(text);
        }
        let file = p.file();
        let t = targets(&file);
        let first = p.navigate(&t[2], Some(FOCUS));
        let second = p.navigate(&t[0], None);
        p.stop();
        (t, [first, second], file)
    });
    for o in &pi_outcomes {
        assert_eq!(o["ok"]["cancelled"], json!(false), "{o}");
    }
    let our_mock = mock().await;
    let mut ours = Ours::start(&tmp.path().join("ours"), &our_mock).await;
    let our_targets = targets(&ours.file);
    let first = ours.navigate(&our_targets[2], Some(FOCUS)).await.unwrap();
    assert_eq!(first["editorText"], json!(PROMPTS[1]));
    ours.navigate(&our_targets[0], None).await.unwrap();
    let our_file = ours.file.clone();
    ours.c.shutdown().await;

    let theirs = summaries(&pi_mock);
    assert_eq!(theirs.len(), 2, "{theirs:#?}");
    assert_eq!(summaries(&our_mock), theirs);
    // What was compared, so a change on both sides cannot pass unseen.
    let text = |b: &Value| {
        b["messages"][1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(text(&theirs[0]).starts_with(
        "<conversation>\n[Assistant tool calls]: read(path=\"b.txt\")\n\n[Assistant tool calls]: edit("
    ));
    assert!(text(&theirs[0]).ends_with(&format!("\n\nAdditional focus: {FOCUS}")));
    assert!(text(&theirs[1]).starts_with(
        "<conversation>\n[Assistant]: One.\n\n[User]: The following is a summary of a branch that this conversation came back from:\n\n<summary>\nThe user explored"
    ));
    assert_eq!(theirs[0]["max_completion_tokens"], json!(4_096));

    let theirs = summary_entries(&pi_file, &pi_targets);
    assert_eq!(summary_entries(&our_file, &our_targets), theirs);
    assert_eq!(theirs.len(), 2);
    // Pi 1.6's `branchWithSummary`: attached where the leaf goes, `fromId` the leaf left.
    assert_eq!(
        [&theirs[0]["parentId"], &theirs[0]["fromId"]],
        [&json!("target 1"), &json!("last answer")]
    );
    assert_eq!(theirs[1]["fromId"], json!("summary 0"));
    assert_eq!(
        theirs[1]["details"],
        json!({"readFiles": ["b.txt"], "modifiedFiles": ["a.txt"]})
    );
}

/// A chat-completions summary answer stopped by `length` (its text partial).
fn cut_summary() -> Step {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "s1", "object": "chat.completion.chunk", "model": "mock-1",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let body = [
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "## Goal\nRead and"}), Value::Null),
        chunk(json!({}), json!("length")),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    Step::Raw {
        status: 200,
        content_type: "text/event-stream".into(),
        body,
    }
}

/// A branch summary that fails is worded as Pi 1.6 words it ("Branch summarization failed:
/// …", Pi's `getSummarizationFailure` label), on both sides the same message: a summary stopped
/// by `length` (partial, never written) and a provider's error. Nothing is written and the
/// leaf stays where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_branch_summary_is_worded_as_pi_1_6_words_it() {
    let Some(pi) = pi_e2e::pi16_bin("Pi 1.6.0 branch summary comparison") else {
        return;
    };
    let failures = [
        cut_summary(),
        Step::Raw {
            status: 400,
            content_type: "application/json".into(),
            body: json!({"error": {"message": "summaries are off today", "type": "invalid_request_error"}}).to_string(),
        },
    ];
    for (n, failure) in failures.into_iter().enumerate() {
        let tmp = TempDir::new(&format!("branch-summary-fails-{n}"));
        let pi_mock = mock_answering(failure.clone()).await;
        let pi_dir = tmp.path().join("pi");
        let (theirs, pi_lines) = tokio::task::block_in_place(|| {
            let mut p = Pi::start(&pi, &pi_dir, &pi_mock);
            for text in PROMPTS {
                p.prompt(text);
            }
            let file = p.file();
            let before = json_lines(&file);
            let outcome = p.navigate(&targets(&file)[2], None);
            let after = json_lines(&file);
            p.stop();
            assert_eq!(after, before, "Pi wrote nothing");
            (outcome["error"].clone(), after)
        });
        assert!(pi_lines.iter().all(|e| e["type"] != "branch_summary"));
        let our_mock = mock_answering(failure).await;
        let mut ours = Ours::start(&tmp.path().join("ours"), &our_mock).await;
        let before = json_lines(&ours.file);
        let t = targets(&ours.file);
        let err = ours.navigate(&t[2], None).await.unwrap_err();
        let state = ours
            .c
            .request("agent/state", json!({"sessionId": ours.sid}))
            .await
            .unwrap();
        let file = ours.file.clone();
        ours.c.shutdown().await;
        // The label, and after it the provider's error worded as Pi's chat-completions
        // client words it ("400: {error object}") or a summary cut by `length`, whole.
        let ours_msg = err["message"].as_str().unwrap();
        let label = |m: &str| m.split_once(": ").map(|(l, _)| l.to_string());
        assert_eq!(
            label(ours_msg),
            Some("Branch summarization failed".into()),
            "{err}"
        );
        assert_eq!(err["message"], theirs, "{err}");
        assert_eq!(err["code"], json!(-31007));
        assert_eq!(json_lines(&file), before);
        assert_eq!(state["leafId"], before.last().unwrap()["id"], "{state}");
        let theirs = theirs.as_str().unwrap();
        assert!(
            theirs.starts_with("Branch summarization failed: "),
            "{theirs}"
        );
        if n == 0 {
            assert_eq!(
                theirs,
                "Branch summarization failed: generation hit the token cap and the summary is incomplete"
            );
        }
    }
}

/// Pi 1.6's other `navigateTree` options and its `branchSummary.reserveTokens` setting, on both
/// sides with the same settings (`reserveTokens` 127,990 of the 128,000-token window: only the
/// newest message left fits): first to the second user message with a summary whose
/// `customInstructions` *replace* Pi's prompt (`replaceInstructions`) and a `label` (put on
/// the summary entry), then to the first user message without a summary and with a label (put
/// on the target). The summary request body is Pi's whole; the `branch_summary` and `label`
/// entries are Pi's whole but for ids and times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn navigate_options_and_the_reserve_setting_are_pi_1_6_s() {
    let Some(pi) = pi_e2e::pi16_bin("Pi 1.6.0 navigateTree options") else {
        return;
    };
    let tmp = TempDir::new("navigate-options-pi16");
    let settings = json!({"branchSummary": {"reserveTokens": 127_990}}).to_string();
    let focus = "List only the file names.";
    let first = json!({"summarize": true, "customInstructions": focus,
        "replaceInstructions": true, "label": "side trip"});
    let second = json!({"summarize": false, "label": "start"});
    let pi_mock = mock().await;
    let pi_dir = tmp.path().join("pi");
    std::fs::create_dir_all(pi_dir.join("agent")).unwrap();
    std::fs::write(pi_dir.join("agent/settings.json"), &settings).unwrap();
    let (pi_targets, pi_outcomes, pi_file) = tokio::task::block_in_place(|| {
        let mut p = Pi::start(&pi, &pi_dir, &pi_mock);
        for text in PROMPTS {
            p.prompt(text);
        }
        let file = p.file();
        let t = targets(&file);
        let one = p.navigate_with(&t[2], &first);
        let two = p.navigate_with(&t[0], &second);
        p.stop();
        (t, [one, two], file)
    });
    for o in &pi_outcomes {
        assert_eq!(o["ok"]["cancelled"], json!(false), "{o}");
    }
    let our_mock = mock().await;
    let our_dir = tmp.path().join("ours");
    std::fs::create_dir_all(our_dir.join("agent")).unwrap();
    std::fs::write(our_dir.join("agent/settings.json"), &settings).unwrap();
    let mut ours = Ours::start(&our_dir, &our_mock).await;
    let our_targets = targets(&ours.file);
    for (target, options) in [(&our_targets[2], &first), (&our_targets[0], &second)] {
        let mut params = options.clone();
        params["sessionId"] = json!(ours.sid);
        params["entryId"] = json!(target);
        ours.c
            .request("agent/session/branch", params)
            .await
            .unwrap();
    }
    let state = ours
        .c
        .request("agent/state", json!({"sessionId": ours.sid}))
        .await
        .unwrap();
    let our_file = ours.file.clone();
    ours.c.shutdown().await;

    let theirs = summaries(&pi_mock);
    assert_eq!(theirs.len(), 1, "{theirs:#?}");
    assert_eq!(summaries(&our_mock), theirs);
    // What was compared: Pi's prompt replaced by the instructions, and only the newest
    // message in the 10-token budget (the tool calls before it left out).
    let text = theirs[0]["messages"][1]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        text.ends_with(&format!("</conversation>\n\n{focus}")),
        "{text}"
    );
    assert_eq!(
        text,
        format!("<conversation>\n[Assistant]: Done.\n</conversation>\n\n{focus}")
    );
    let theirs = summary_entries(&pi_file, &pi_targets);
    assert_eq!(summary_entries(&our_file, &our_targets), theirs);
    assert_eq!(theirs.len(), 1);
    let their_labels = named_entries(&pi_file, &pi_targets, "label");
    assert_eq!(
        named_entries(&our_file, &our_targets, "label"),
        their_labels
    );
    assert_eq!(
        their_labels,
        [
            json!({"type": "label", "parentId": "summary 0", "targetId": "summary 0", "label": "side trip"}),
            json!({"type": "label", "parentId": "before target 0", "targetId": "target 0", "label": "start"}),
        ]
    );
    // The leaf is the last label entry, on both sides.
    let last = |file: &Path| json_lines(file).last().unwrap()["id"].clone();
    assert_eq!(state["leafId"], last(&our_file));
    assert_eq!(json_lines(&pi_file).last().unwrap()["type"], "label");
}

/// The `summarization_retry_*` events among `values`, whole.
fn retry_events(values: &[Value]) -> Vec<Value> {
    values
        .iter()
        .filter(|v| {
            v["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("summarization_retry"))
        })
        .cloned()
        .collect()
}

/// [`mock`] whose first summary request is answered with a 500, every later one [`SUMMARY`].
async fn mock_failing_once() -> MockModel {
    let mock = mock().await;
    let failed = std::sync::atomic::AtomicBool::new(false);
    mock.set_responder(Arc::new(move |body: &Value| {
        is_summary(body).then(|| {
            if failed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                Step::text(SUMMARY)
            } else {
                Step::Raw {
                    status: 500,
                    content_type: "application/json".into(),
                    body: json!({"error": {"message": "summary boom once"}}).to_string(),
                }
            }
        })
    }));
    mock
}

/// Issue 29 (b): a branch summary request that fails with a transient error (a 500) is retried
/// as Pi 1.6's `completeSummarization` retries it (`settings.retry`, its defaults on both
/// sides: 3 retries, 2 s first): the same events as Pi's — `summarization_retry_scheduled
/// {attempt: 1, maxAttempts: 3, delayMs: 2000, errorMessage}`,
/// `summarization_retry_attempt_start {source: "branchSummary"}`,
/// `summarization_retry_finished` — and the summary is written (two summary requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_summary_failing_once_is_retried_as_pi_1_6_retries_it() {
    let Some(pi) = pi_e2e::pi16_bin("Pi 1.6.0 branch summary comparison") else {
        return;
    };
    let tmp = TempDir::new("branch-summary-retry");
    let pi_mock = mock_failing_once().await;
    let pi_dir = tmp.path().join("pi");
    let theirs = tokio::task::block_in_place(|| {
        let mut p = Pi::start(&pi, &pi_dir, &pi_mock);
        for text in PROMPTS {
            p.prompt(text);
        }
        let file = p.file();
        let outcome = p.navigate(&targets(&file)[2], None);
        assert!(outcome.get("ok").is_some(), "{outcome}");
        let seen = p
            .rpc
            .read_until(|v| v["type"] == "summarization_retry_finished");
        p.stop();
        retry_events(&seen)
    });
    let our_mock = mock_failing_once().await;
    let mut ours = Ours::start(&tmp.path().join("ours"), &our_mock).await;
    let t = targets(&ours.file);
    ours.navigate(&t[2], None).await.unwrap();
    let events: Vec<Value> = ours
        .c
        .log()
        .into_iter()
        .filter(|m| m["method"] == "agent/event")
        .map(|m| m["params"]["event"].clone())
        .collect();
    let file = ours.file.clone();
    ours.c.shutdown().await;
    let ours = retry_events(&events);
    assert_eq!(ours, theirs);
    assert_eq!(
        ours,
        vec![
            json!({"type": "summarization_retry_scheduled", "attempt": 1, "maxAttempts": 3,
                   "delayMs": 2000, "errorMessage": theirs[0]["errorMessage"]}),
            json!({"type": "summarization_retry_attempt_start", "source": "branchSummary"}),
            json!({"type": "summarization_retry_finished"}),
        ]
    );
    assert_eq!(summaries(&our_mock).len(), 2);
    assert_eq!(summaries(&pi_mock).len(), 2);
    assert!(json_lines(&file)
        .iter()
        .any(|e| e["type"] == "branch_summary"));
}

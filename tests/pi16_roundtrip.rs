//! The outside check of issue 29, done here first: sessions the real Pi 1.6.0 writes
//! (`$PI16_REF_BIN`, RPC mode on the loopback model) of every kind — stored system messages,
//! thinking and model changes, a retried answer (`context_edit`), a tool round and two
//! parallel calls, a failed answer, a user shell command, a session name, images in a prompt
//! and in a tool result, a compaction, a tool-set change (an extension's `setActiveTools`), a
//! branch summary (an extension's `navigateTree` with `summarize`), a fork — opened and
//! continued both ways, key by key:
//!
//! - continued once by Pi (`pi -p --session`) and once here (`pi-lsp run --session`) from the
//!   same copy: the same entries appended after the same leaf (messages equal but for
//!   timestamps and durations), and the same request (system prompt, messages, tools, options);
//! - then each continues what the other wrote: the same request again;
//! - opened without a prompt, Pi's `get_state` / `get_messages` / `get_session_stats` equal
//!   pi-lsp's `agent/state` `messageCount`, `agent/messages` (a message a `context_edit`
//!   leaves out shown marked, by design) and `agent/session/stats` over LSP, and opening
//!   changes neither file.
//!
//! Also `run --thinking X` on a Pi file recording another level and `run --model M` on a Pi
//! file, as Pi 1.6.0 does them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pi_e2e::headless::pi_bare_command;
use pi_e2e::lsp_client::{agent_env, EditorBehavior, LspClient};
use pi_e2e::mock_model::MockModel;
use pi_e2e::mock_script::Script;
use pi_e2e::pi_rpc::PiRpc;
use pi_e2e::{json_lines, pi_lsp_bin, TempDir};
use serde_json::{json, Value};

/// The loopback model's script: answers by the prompt's first word; the first prompt no rule
/// takes (`hello`) is refused once as overloaded (Pi retries it and leaves the failed answer
/// out with a `context_edit`), every later one is answered `ok`.
const SCRIPT: &str = r###"{
  "rules": [
    {"when": {"contains": "<conversation>"}, "steps": [{"text": "## Goal\nThe summary."}]},
    {"when": {"firstWord": "tool"}, "steps": [{"toolCalls": [{"id": "call_r1", "name": "read", "arguments": {"path": "f.txt"}}]}, {"text": "Read it."}]},
    {"when": {"firstWord": "img"}, "steps": [{"toolCalls": [{"id": "call_i1", "name": "read", "arguments": {"path": "red.png"}}]}, {"text": "A red square."}]},
    {"when": {"firstWord": "two"}, "steps": [{"toolCalls": [{"id": "call_a", "name": "read", "arguments": {"path": "f.txt"}}, {"id": "call_b", "name": "bash", "arguments": {"command": "echo hi"}}]}, {"text": "Both done."}]},
    {"when": {"firstWord": "think"}, "steps": [{"thinking": "Let me think.", "text": "Thought."}]},
    {"when": {"firstWord": "fail"}, "steps": [{"status": 400, "error": "bad request here"}]}
  ],
  "steps": [{"status": 503, "error": "overloaded"}, {"text": "recovered"}],
  "default": {"text": "ok"}
}"###;

/// A Pi extension with two commands: `/nav ID` (`navigateTree` to ID with a branch summary)
/// and `/tools a,b` (`setActiveTools`, which stores a system message with the tool change).
const NAV_EXTENSION: &str = r#"export default function (pi: any) {
  pi.registerCommand("nav", {
    description: "navigate with a summary",
    handler: async (args: string, ctx: any) => { await ctx.navigateTree(args.trim(), { summarize: true }); },
  });
  pi.registerCommand("tools", {
    description: "set the active tools",
    handler: async (args: string) => { pi.setActiveTools(args.trim().split(",")); },
  });
}
"#;

/// One test's folders and model: `ws` (with `f.txt` and `red.png`), `agent` (models `mock-1`,
/// reasoning and images, and `mock-2`; compaction keeping 20 tokens; pi-lsp's own `todo` and
/// `plan-mode` off, which Pi does not have), the extension file, and the environment
/// pi-lsp runs with (Pi's package folder named as Pi names it, so both prompts carry its
/// `docs` section).
struct Lab {
    _tmp: TempDir,
    root: PathBuf,
    ws: PathBuf,
    agent: PathBuf,
    extension: PathBuf,
    env: Vec<(&'static str, String)>,
    pi: PathBuf,
    mock: MockModel,
}

impl Lab {
    async fn new(name: &str, pi: PathBuf) -> Lab {
        let tmp = TempDir::new(name);
        let root = tmp.path().to_path_buf();
        let ws = root.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("f.txt"), "alpha\nbeta\ngamma\n").unwrap();
        std::fs::copy(
            pi_e2e::fixtures().join("images/red-2x2.png"),
            ws.join("red.png"),
        )
        .unwrap();
        let mock = Script::parse(SCRIPT).unwrap().start().await;
        let mut models = mock.models_json();
        models["providers"]["mock"]["models"] = json!([
            {"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096, "reasoning": true, "input": ["text", "image"]},
            {"id": "mock-2", "contextWindow": 128000, "maxTokens": 4096}
        ]);
        let agent = root.join("agent");
        let package = pi_e2e::pi16_package(&pi).display().to_string();
        let env = agent_env(&agent, &models, &[("PI_PACKAGE_DIR", &package)]);
        std::fs::write(
            agent.join("settings.json"),
            json!({"compaction": {"keepRecentTokens": 20},
                "builtinExtensions": {"todo": false, "plan-mode": false}})
            .to_string(),
        )
        .unwrap();
        let extension = root.join("nav.ts");
        std::fs::write(&extension, NAV_EXTENSION).unwrap();
        Lab {
            _tmp: tmp,
            root,
            ws,
            agent,
            extension,
            env,
            pi,
            mock,
        }
    }

    /// Pi in RPC mode in the workspace with `args`.
    fn pi_rpc(&self, args: &[&OsStr]) -> PiRpc {
        PiRpc::start(&self.pi, &self.ws, &self.agent, args)
    }

    /// `pi -p --session FILE ARGS… TEXT`.
    fn pi_continue(&self, file: &Path, args: &[&str], text: &str) -> Output {
        let mut cmd = pi_bare_command(&self.pi, &self.ws, &self.agent, &self.root);
        cmd.arg("-p")
            .arg("--session")
            .arg(file)
            .args(args)
            .arg(text);
        succeeded(&mut cmd)
    }

    /// `pi-lsp run --session FILE ARGS… TEXT` in the workspace.
    fn us_continue(&self, file: &Path, args: &[&str], text: &str) -> Output {
        let mut cmd = Command::new(pi_lsp_bin());
        cmd.arg("run").arg("--workspace").arg(&self.ws);
        cmd.arg("--session").arg(file).args(args).arg(text);
        succeeded(cmd.envs(self.env.iter().map(|(k, v)| (k, v))))
    }

    /// The request bodies the model gets while `f` runs, whole.
    fn requests_of<T>(&self, f: impl FnOnce() -> T) -> (T, Vec<Value>) {
        let before = self.mock.requests().len();
        let out = tokio::task::block_in_place(f);
        let sent = self.mock.requests()[before..]
            .iter()
            .map(|r| r.body.clone())
            .collect();
        (out, sent)
    }
}

/// `v` with every number as an `f64` (`0` and `0.0` equal).
fn numbers_as_f64(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(numbers_as_f64).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), numbers_as_f64(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Runs `cmd` to its end and returns its output; panics with its stderr unless it succeeded.
fn succeeded(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// An appended entry as both harnesses must write it: its type, and its message (or its other
/// fields) without the values of the moment (`id`, `parentId`, `timestamp`, `durationMs`,
/// `responseId`).
fn comparable(e: &Value) -> Value {
    let mut e = e.clone();
    let o = e.as_object_mut().unwrap();
    for k in ["id", "parentId", "timestamp"] {
        o.remove(k);
    }
    if let Some(m) = o.get_mut("message").and_then(Value::as_object_mut) {
        for k in ["timestamp", "durationMs", "responseId"] {
            m.remove(k);
        }
    }
    e
}

/// The Pi 1.6.0 sessions of the check, each a file of its own under the lab's root:
/// `linear` (every kind on one branch, ending after a compaction and a tool change),
/// `summarized` (the same session later: back to an earlier prompt with a branch summary,
/// then a prompt there), `forked` (Pi's `fork` from the tool prompt, then a prompt).
fn pi_sessions(lab: &Lab) -> Vec<(&'static str, PathBuf)> {
    let png = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(lab.ws.join("red.png")).unwrap())
    };
    let image = json!({"images": [{"type": "image", "data": png, "mimeType": "image/png"}]});
    let mut pi = lab.pi_rpc(&["-e".as_ref(), lab.extension.as_os_str()]);
    pi.prompt("hello");
    pi.request(json!({"type": "set_session_name", "name": "every kind"}));
    pi.request(json!({"type": "bash", "command": "echo from-user"}));
    pi.request(json!({"type": "set_thinking_level", "level": "high"}));
    pi.prompt("think about it");
    pi.request(json!({"type": "set_model", "provider": "mock", "modelId": "mock-2"}));
    pi.prompt("tool read the file");
    pi.prompt("fail now");
    pi.request(json!({"type": "set_model", "provider": "mock", "modelId": "mock-1"}));
    pi.request(json!({"type": "set_thinking_level", "level": "low"}));
    pi.prompt_with("look at this", image.clone());
    pi.prompt("img show me");
    pi.prompt("two calls");
    pi.request(json!({"type": "compact"}));
    pi.prompt("after compact");
    pi.command("/tools read,bash,grep");
    pi.prompt("with grep");
    pi.prompt_with("and again", image);
    pi.prompt("think once more");
    let file = PathBuf::from(
        pi.request(json!({"type": "get_state"}))["sessionFile"]
            .as_str()
            .unwrap(),
    );
    let linear = lab.root.join("linear.jsonl");
    std::fs::copy(&file, &linear).unwrap();
    let entries = json_lines(&file);
    let user = |text: &str| -> String {
        entries
            .iter()
            .find(|e| e["message"]["role"] == "user" && e["message"]["content"][0]["text"] == text)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    pi.command(&format!("/nav {}", user("look at this")));
    pi.prompt("on the new branch");
    let summarized = lab.root.join("summarized.jsonl");
    std::fs::copy(&file, &summarized).unwrap();
    assert!(
        json_lines(&summarized)
            .iter()
            .any(|e| e["type"] == "branch_summary"),
        "Pi wrote no branch summary"
    );
    pi.request(json!({"type": "fork", "entryId": user("tool read the file")}));
    pi.prompt("in the fork");
    let fork_file = PathBuf::from(
        pi.request(json!({"type": "get_state"}))["sessionFile"]
            .as_str()
            .unwrap(),
    );
    let forked = lab.root.join("forked.jsonl");
    std::fs::copy(&fork_file, &forked).unwrap();
    drop(pi);
    vec![
        ("linear", linear),
        ("summarized", summarized),
        ("forked", forked),
    ]
}

/// Pi's view of `file` over RPC: `(messageCount, thinkingLevel, messages, stats without
/// sessionFile)`.
fn pi_view(lab: &Lab, file: &Path) -> (Value, Value, Value, Value) {
    let mut pi = PiRpc::open(&lab.pi, &lab.ws, &lab.agent, file);
    let state = pi.request(json!({"type": "get_state"}));
    let messages = pi.request(json!({"type": "get_messages"}));
    let mut stats = pi.request(json!({"type": "get_session_stats"}));
    // The copies' paths differ; everything else is compared.
    stats.as_object_mut().unwrap().remove("sessionFile");
    (
        state["messageCount"].clone(),
        state["thinkingLevel"].clone(),
        messages["messages"].clone(),
        stats,
    )
}

/// pi-lsp's view of `file` over LSP (`agent/session/open` by path): the same four, the stats
/// cut to Pi's keys.
async fn our_view(lab: &Lab, file: &Path, pi_stats: &Value) -> (Value, Value, Value, Value) {
    let mut c = LspClient::start(&pi_lsp_bin(), &lab.ws, &lab.env, EditorBehavior::default()).await;
    let state = c
        .request("agent/session/open", json!({"path": file}))
        .await
        .unwrap();
    let sid = state["sessionId"].as_str().unwrap().to_string();
    let messages = c.ask("agent/messages", &sid).await;
    let stats = c.ask("agent/session/stats", &sid).await;
    c.shutdown().await;
    // `agent/messages` shows a message a `context_edit` changes as stored, the edit marked
    // (`contextEdit`; docs/protocol.md); Pi's `get_messages` is the model's context: the
    // message left out, or its replacement.
    let messages: Vec<Value> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| {
            let Some(edit) = m.get("contextEdit") else {
                return Some(m.clone());
            };
            let replacement = edit.get("replacement").filter(|r| !r.is_null())?;
            let mut m = m.clone();
            m["content"] = replacement.clone();
            m.as_object_mut().unwrap().remove("contextEdit");
            Some(m)
        })
        .collect();
    let stats: serde_json::Map<String, Value> = pi_stats
        .as_object()
        .unwrap()
        .keys()
        .map(|k| (k.clone(), stats[k].clone()))
        .collect();
    (
        state["messageCount"].clone(),
        state["thinkingLevel"].clone(),
        Value::Array(messages),
        Value::Object(stats),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_16_sessions_of_every_kind_open_and_continue_alike_both_ways() {
    let Some(pi) =
        pi_e2e::pi16_bin("pi_16_sessions_of_every_kind_open_and_continue_alike_both_ways")
    else {
        return;
    };
    let lab = Lab::new("pi16-roundtrip", pi).await;
    let sessions = tokio::task::block_in_place(|| pi_sessions(&lab));
    for (kind, file) in sessions {
        let original = std::fs::read_to_string(&file).unwrap();
        let n = original.lines().count();
        let leaf = json_lines(&file).last().unwrap()["id"].clone();

        // Opened without a prompt: the same view, and neither file changes.
        let (theirs, ours) = (
            lab.root.join("view-pi.jsonl"),
            lab.root.join("view-us.jsonl"),
        );
        std::fs::write(&theirs, &original).unwrap();
        std::fs::write(&ours, &original).unwrap();
        let pi_sees = tokio::task::block_in_place(|| pi_view(&lab, &theirs));
        let we_see = our_view(&lab, &ours, &pi_sees.3).await;
        assert_eq!(
            (&we_see.0, &we_see.1),
            (&pi_sees.0, &pi_sees.1),
            "{kind}: messageCount, thinkingLevel"
        );
        let (ours_m, pi_m) = (we_see.2.as_array().unwrap(), pi_sees.2.as_array().unwrap());
        for (i, (o, p)) in ours_m.iter().zip(pi_m).enumerate() {
            assert_eq!(o, p, "{kind}: message {i}");
        }
        assert_eq!(ours_m.len(), pi_m.len(), "{kind}: messages");
        // Numbers as numbers (pi-lsp writes a cost of 0 as `0.0`, Pi as `0`).
        assert_eq!(
            numbers_as_f64(&we_see.3),
            numbers_as_f64(&pi_sees.3),
            "{kind}: stats"
        );
        assert_eq!(
            std::fs::read_to_string(&theirs).unwrap(),
            original,
            "{kind}"
        );
        assert_eq!(std::fs::read_to_string(&ours).unwrap(), original, "{kind}");

        // Continued once by each from the same copy.
        let (by_pi, by_us) = (
            lab.root.join(format!("{kind}-pi.jsonl")),
            lab.root.join(format!("{kind}-us.jsonl")),
        );
        std::fs::write(&by_pi, &original).unwrap();
        std::fs::write(&by_us, &original).unwrap();
        let (_, pi_sent) = lab.requests_of(|| lab.pi_continue(&by_pi, &[], "next"));
        let (out, we_sent) = lab.requests_of(|| lab.us_continue(&by_us, &[], "next"));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
        assert_eq!(we_sent, pi_sent, "{kind}: the continued request");
        let appended = |f: &Path| -> Vec<Value> { json_lines(f)[n..].to_vec() };
        let (pi_added, we_added) = (appended(&by_pi), appended(&by_us));
        assert_eq!(we_added[0]["parentId"], leaf, "{kind}");
        assert_eq!(pi_added[0]["parentId"], leaf, "{kind}");
        assert_eq!(
            we_added.iter().map(comparable).collect::<Vec<_>>(),
            pi_added.iter().map(comparable).collect::<Vec<_>>(),
            "{kind}: the entries appended"
        );

        // Each continues what the other wrote.
        let (_, pi_sent) = lab.requests_of(|| lab.pi_continue(&by_us, &[], "again"));
        let (_, we_sent) = lab.requests_of(|| lab.us_continue(&by_pi, &[], "again"));
        assert_eq!(we_sent, pi_sent, "{kind}: continuing the other's file");
    }
}

/// `--thinking X` on a Pi 1.6.0 file whose branch records another level: Pi 1.6.0 appends
/// `thinking_level_change` X right after the leaf (its `setThinkingLevel` after
/// `createAgentSession`, which restored the recorded level) and asks for X; the same level
/// appends nothing. `--model M` runs at M and appends no `model_change`. pi-lsp does exactly
/// that, checked side by side on copies of one file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_and_model_flags_on_a_pi_file_do_what_pi_does() {
    let Some(pi) = pi_e2e::pi16_bin("thinking_and_model_flags_on_a_pi_file_do_what_pi_does") else {
        return;
    };
    let lab = Lab::new("pi16-thinking-flag", pi).await;
    let file = tokio::task::block_in_place(|| {
        let mut pi = lab.pi_rpc(&[]);
        pi.prompt("hello");
        PathBuf::from(
            pi.request(json!({"type": "get_state"}))["sessionFile"]
                .as_str()
                .unwrap(),
        )
    });
    let original = std::fs::read_to_string(&file).unwrap();
    let n = original.lines().count();
    assert_eq!(
        json_lines(&file)
            .iter()
            .filter(|e| e["type"] == "thinking_level_change")
            .map(|e| e["thinkingLevel"].clone())
            .collect::<Vec<_>>(),
        [json!("medium")]
    );
    for level in ["high", "medium"] {
        let (by_pi, by_us) = (
            lab.root.join(format!("{level}-pi.jsonl")),
            lab.root.join(format!("{level}-us.jsonl")),
        );
        std::fs::write(&by_pi, &original).unwrap();
        std::fs::write(&by_us, &original).unwrap();
        let args = ["--thinking", level];
        let (_, pi_sent) = lab.requests_of(|| lab.pi_continue(&by_pi, &args, "next"));
        let (_, we_sent) = lab.requests_of(|| lab.us_continue(&by_us, &args, "next"));
        let kinds = |f: &Path| -> Vec<(Value, Value)> {
            json_lines(f)[n..]
                .iter()
                .map(|e| (e["type"].clone(), e["thinkingLevel"].clone()))
                .collect()
        };
        let mut expected = vec![
            (json!("message"), Value::Null),
            (json!("message"), Value::Null),
        ];
        if level == "high" {
            expected.insert(0, (json!("thinking_level_change"), json!("high")));
        }
        assert_eq!(kinds(&by_pi), expected, "Pi, --thinking {level}");
        assert_eq!(kinds(&by_us), expected, "pi-lsp, --thinking {level}");
        let effort = |sent: &[Value]| -> Vec<Value> {
            sent.iter().map(|b| b["reasoning_effort"].clone()).collect()
        };
        assert_eq!(effort(&pi_sent), [json!(level)]);
        assert_eq!(effort(&we_sent), [json!(level)]);
        assert_eq!(
            json_lines(&by_us)[n..].last().unwrap()["message"]["thinkingLevel"],
            json_lines(&by_pi)[n..].last().unwrap()["message"]["thinkingLevel"]
        );
    }

    // `--model` on the resumed file: the run's model, no `model_change` appended by either
    // (the answer names its model), the same request.
    let (by_pi, by_us) = (
        lab.root.join("model-pi.jsonl"),
        lab.root.join("model-us.jsonl"),
    );
    std::fs::write(&by_pi, &original).unwrap();
    std::fs::write(&by_us, &original).unwrap();
    let (_, pi_sent) = lab.requests_of(|| {
        lab.pi_continue(&by_pi, &["--provider", "mock", "--model", "mock-2"], "next")
    });
    let (_, we_sent) =
        lab.requests_of(|| lab.us_continue(&by_us, &["--model", "mock/mock-2"], "next"));
    assert_eq!(pi_sent[0]["model"], "mock-2");
    assert_eq!(we_sent, pi_sent);
    let added = |f: &Path| -> Vec<Value> { json_lines(f)[n..].iter().map(comparable).collect() };
    assert_eq!(added(&by_pi).len(), 2);
    assert_eq!(added(&by_us), added(&by_pi));
}

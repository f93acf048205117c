//! How a stored conversation goes over each wire, compared whole with Pi 1.6.0
//! (`$PI16_REF_BIN`): one crafted session file continued once by Pi (`pi -p --session`) and
//! once here (`pi-lsp run --session`) on the loopback model, and the conversation part of the
//! two requests (Anthropic's `messages`, chat completions' `messages` and Responses' `input`
//! without the system prompt, which differs by design: the tool set) asserted equal and
//! whole. Pi 1.6's pi-ai `convertMessages` of each provider is the rule. Also: models.json
//! `compat` flags per wire (the whole body but system prompt and tool texts, [`shape`]),
//! adaptive thinking by the flag, and the answers stored after an abort (during the
//! compaction before a prompt, while thinking) against Pi 1.6.0 in RPC mode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

#[path = "support/compacting.rs"]
mod compacting;

use pi_e2e::headless::{assert_success, pi_bare_command, run};
use pi_e2e::lsp_client::{agent_env, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::pi_rpc::PiRpc;
use pi_e2e::{pi16_bin, pi16_package, pi_lsp_bin, TempDir};
use serde_json::{json, Value};

/// A message entry of a crafted file: id `id`, after `parent` (`""`: the first entry).
fn entry(id: &str, parent: &str, message: Value) -> Value {
    let parent = Some(parent).filter(|p| !p.is_empty());
    json!({"type": "message", "id": id, "parentId": parent,
        "timestamp": "2026-12-01T00:00:01.000Z", "message": message})
}

/// A stored user message of one text block.
fn user(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1})
}

/// A stored assistant message of `content` from `model` (`provider/id`) on `api`.
fn assistant(model: &str, api: &str, content: Value, stop: &str) -> Value {
    let (provider, id) = model.split_once('/').unwrap();
    json!({"role": "assistant", "content": content, "api": api, "provider": provider,
        "model": id, "stopReason": stop, "timestamp": 2,
        "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}})
}

/// A stored tool result of `text` for call `id`.
fn result(id: &str, text: &str) -> Value {
    json!({"role": "toolResult", "toolCallId": id, "toolName": "read",
        "content": [{"type": "text", "text": text}], "isError": false, "timestamp": 3})
}

/// The conversation part of a request body: Anthropic's `messages`; chat completions'
/// `messages` and Responses' `input` without their system / developer messages.
fn conversation(body: &Value) -> Value {
    if let Some(input) = body.get("input") {
        return Value::Array(
            input
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] != "system" && m["role"] != "developer")
                .cloned()
                .collect(),
        );
    }
    if body.get("system").is_some() {
        return body["messages"].clone();
    }
    Value::Array(
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] != "system" && m["role"] != "developer")
            .cloned()
            .collect(),
    )
}

/// The conversation part of the request Pi 1.6.0 (`pi`) and pi-lsp each send when they
/// continue a file of `entries` (after the session header; the first entry's parent is
/// none) with `next` at `model` (`provider/id` of the loopback model's `models.json`, with a
/// third provider `mockresp`, openai-responses): (Pi's, ours).
async fn continued(pi: &Path, name: &str, model: &str, entries: &[Value]) -> (Value, Value) {
    let models = |mock: &MockModel| {
        let mut models = mock.models_json();
        models["providers"]["mockresp"] = json!({
            "baseUrl": mock.openai_base(), "api": "openai-responses", "apiKey": "test-key",
            "models": [{"id": "mock-resp-1", "contextWindow": 128000, "maxTokens": 4096}]
        });
        models
    };
    let (theirs, ours, _) = continued_bodies(pi, name, &models, model, entries, &[]).await;
    (conversation(&theirs), conversation(&ours))
}

/// The whole first request body Pi 1.6.0 and pi-lsp each send when they continue a file of
/// `entries` with `next` at `model`, the agent dir's models.json `models(mock)`, and `args`
/// given to both before the prompt: (Pi's, ours, (the answer Pi stored, ours)).
async fn continued_bodies(
    pi: &Path,
    name: &str,
    models: &dyn Fn(&MockModel) -> Value,
    model: &str,
    entries: &[Value],
    args: &[&str],
) -> (Value, Value, (Value, Value)) {
    let tmp = TempDir::new(name);
    let root = tmp.path();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![Step::text("done"), Step::text("done")]).await;
    let models = models(&mock);
    let agent = root.join("agent");
    let package = pi16_package(pi).display().to_string();
    let env = agent_env(&agent, &models, &[("PI_PACKAGE_DIR", &package)]);
    let header = json!({"type": "session", "version": 3,
        "id": "a0000000-0000-4000-8000-0000000000aa",
        "timestamp": "2026-12-01T00:00:00.000Z", "cwd": ws});
    let file: String = std::iter::once(&header)
        .chain(entries)
        .map(|e| format!("{e}\n"))
        .collect();
    let (theirs, ours) = (root.join("pi.jsonl"), root.join("ours.jsonl"));
    std::fs::write(&theirs, &file).unwrap();
    std::fs::write(&ours, &file).unwrap();
    let (provider, id) = model.split_once('/').unwrap();
    let mut cmd = pi_bare_command(pi, &ws, &agent, root);
    cmd.args(["-p", "--provider", provider, "--model", id, "--session"])
        .arg(&theirs)
        .args(args)
        .arg("next");
    let out = tokio::task::block_in_place(|| cmd.output().unwrap());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cmd = std::process::Command::new(pi_lsp_bin());
    cmd.arg("run")
        .arg("--workspace")
        .arg(&ws)
        .arg("--session")
        .arg(&ours);
    cmd.args(["--model", model])
        .args(args)
        .arg("next")
        .envs(env.iter().map(|(k, v)| (k, v)));
    let out = tokio::task::block_in_place(|| cmd.output().unwrap());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = mock.requests();
    assert_eq!(sent.len(), 2, "one request each");
    let answers = (last_answer_in(&theirs), last_answer_in(&ours));
    (sent[0].body.clone(), sent[1].body.clone(), answers)
}

/// Consecutive user-role messages of `turns` (a request's `messages` as [`conversation`] gives
/// them) merged into one, their blocks in order: what Anthropic's strict alternation and case
/// PAIR-05 ask of a request, from the turns Pi 1.6 sends separately.
fn merged_user_turns(turns: &Value) -> Value {
    let mut out: Vec<Value> = Vec::new();
    for m in turns.as_array().unwrap() {
        match out.last_mut() {
            Some(prev) if prev["role"] == "user" && m["role"] == "user" => {
                let more = m["content"].as_array().unwrap().clone();
                prev["content"].as_array_mut().unwrap().extend(more);
            }
            _ => out.push(m.clone()),
        }
    }
    Value::Array(out)
}

/// Anthropic: every user-side message (tool results, the steer after them, a bash execution, a
/// custom message, a compaction's summary, the kept user message after it, the new prompt) in
/// the one user turn between two assistant turns, as case PAIR-05 asks (Anthropic-compatible
/// endpoints that hold to strict alternation refuse two user turns in a row). Pi 1.6's
/// `convertMessages` sends each as a turn of its own (Anthropic's own API joins them): the
/// same blocks in the same order, which is what is compared — a deliberate difference, in the
/// changelog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_merges_back_to_back_user_turns_as_case_pair_05_asks() {
    let Some(pi) = pi16_bin("anthropic_merges_back_to_back_user_turns_as_case_pair_05_asks") else {
        return;
    };
    let m = "mockant/mock-ant-1";
    let api = "anthropic-messages";
    let calls = json!([
        {"type": "toolCall", "id": "toolu_1", "name": "read", "arguments": {"path": "a"}},
        {"type": "toolCall", "id": "toolu_2", "name": "read", "arguments": {"path": "b"}}]);
    let entries = [
        entry("u0", "", user("old question")),
        entry(
            "a0",
            "u0",
            assistant(
                m,
                api,
                json!([{"type": "text", "text": "old answer"}]),
                "stop",
            ),
        ),
        entry("u1", "a0", user("go")),
        entry("a1", "u1", assistant(m, api, calls, "toolUse")),
        entry("r1", "a1", result("toolu_1", "A")),
        entry("r2", "r1", result("toolu_2", "B")),
        entry("s1", "r2", user("STEERED text")),
        entry(
            "a2",
            "s1",
            assistant(m, api, json!([{"type": "text", "text": "ok"}]), "stop"),
        ),
        entry(
            "b1",
            "a2",
            json!({"role": "bashExecution", "command": "echo x", "output": "x\n",
            "exitCode": 0, "cancelled": false, "truncated": false, "timestamp": 4}),
        ),
        json!({"type": "custom_message", "id": "c1", "parentId": "b1",
            "timestamp": "2026-12-01T00:00:02.000Z", "customType": "k",
            "content": "custom context", "display": true}),
        json!({"type": "compaction", "id": "k1", "parentId": "c1",
            "timestamp": "2026-12-01T00:00:03.000Z", "summary": "## Goal\nOLD",
            "firstKeptEntryId": "u1", "tokensBefore": 400,
            "details": {"readFiles": [], "modifiedFiles": []}, "fromHook": false}),
    ];
    let (theirs, ours) = continued(&pi, "pi16req-anthropic", m, &entries).await;
    assert_eq!(ours, merged_user_turns(&theirs));
    let text = |t: &str| json!([{"type": "text", "text": t}]);
    assert_eq!(
        ours,
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "The conversation history before this point was \
                    compacted into the following summary:\n\n<summary>\n## Goal\nOLD\n</summary>"},
                {"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "b"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A", "is_error": false},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "B", "is_error": false},
                {"type": "text", "text": "STEERED text"}]},
            {"role": "assistant", "content": text("ok")},
            {"role": "user", "content": [
                {"type": "text", "text": "Ran `echo x`\n```\nx\n\n```"},
                {"type": "text", "text": "custom context"},
                {"type": "text", "text": "next", "cache_control": {"type": "ephemeral"}}]}
        ])
    );
}

/// A read of an empty file on `model` (`api`, the call's id `call_id`) and its answer.
fn empty_read(model: &str, api: &str, call_id: &str) -> Vec<Value> {
    let call =
        json!([{"type": "toolCall", "id": call_id, "name": "read", "arguments": {"path": "e"}}]);
    vec![
        entry("u1", "", user("read e")),
        entry("a1", "u1", assistant(model, api, call, "toolUse")),
        entry("r1", "a1", result(call_id, "")),
        entry(
            "a2",
            "r1",
            assistant(
                model,
                api,
                json!([{"type": "text", "text": "empty"}]),
                "stop",
            ),
        ),
    ]
}

/// A tool result without text or image (an empty file read) goes as Pi 1.6's
/// `(no tool output)` on chat completions and Responses, not as an image's placeholder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_tool_result_says_no_tool_output_on_the_openai_wires() {
    let Some(pi) = pi16_bin("an_empty_tool_result_says_no_tool_output_on_the_openai_wires") else {
        return;
    };
    let chat = empty_read("mock/mock-1", "openai-completions", "call_1");
    let (theirs, ours) = continued(&pi, "pi16req-empty-chat", "mock/mock-1", &chat).await;
    assert_eq!(ours, theirs);
    assert_eq!(
        ours,
        json!([
            {"role": "user", "content": [{"type": "text", "text": "read e"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "read", "arguments": "{\"path\":\"e\"}"}}]},
            {"role": "tool", "content": "(no tool output)", "tool_call_id": "call_1"},
            {"role": "assistant", "content": "empty"},
            {"role": "user", "content": [{"type": "text", "text": "next"}]}
        ])
    );
    let responses = empty_read("mockresp/mock-resp-1", "openai-responses", "call_1|fc_1");
    let (theirs, ours) = continued(
        &pi,
        "pi16req-empty-resp",
        "mockresp/mock-resp-1",
        &responses,
    )
    .await;
    assert_eq!(ours, theirs);
    assert_eq!(
        ours,
        json!([
            {"role": "user", "content": [{"type": "input_text", "text": "read e"}]},
            {"type": "function_call", "call_id": "call_1", "name": "read",
                "arguments": "{\"path\":\"e\"}", "id": "fc_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "(no tool output)"},
            {"type": "message", "role": "assistant", "status": "completed", "id": "msg_pi_3",
                "content": [{"type": "output_text", "text": "empty", "annotations": []}]},
            {"role": "user", "content": [{"type": "input_text", "text": "next"}]}
        ])
    );
}

/// On chat completions a stored user message whose only text is empty is left out, as Pi
/// 1.6's `convertMessages` leaves it (and the empty answer after it) out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_user_text_is_left_out_on_chat_completions() {
    let Some(pi) = pi16_bin("an_empty_user_text_is_left_out_on_chat_completions") else {
        return;
    };
    let (m, api) = ("mock/mock-1", "openai-completions");
    let entries = [
        entry("u1", "", user("hi")),
        entry(
            "a1",
            "u1",
            assistant(m, api, json!([{"type": "text", "text": "hello"}]), "stop"),
        ),
        entry("u2", "a1", user("")),
        entry(
            "a2",
            "u2",
            assistant(m, api, json!([{"type": "text", "text": ""}]), "stop"),
        ),
    ];
    let (theirs, ours) = continued(&pi, "pi16req-empty-user", m, &entries).await;
    assert_eq!(ours, theirs);
    assert_eq!(
        ours,
        json!([
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [{"type": "text", "text": "next"}]}
        ])
    );
}

/// The request bodies Pi 1.6.0 (`pi -p`, tools read, bash, edit, write) and pi-lsp
/// (`pi-lsp run`, the same tools) each send for `prompt` in a fresh workspace at the
/// chat-completions model, which answers each side with `steps`: (Pi's, ours).
async fn fresh(pi: &Path, name: &str, steps: &[Step], prompt: &str) -> (Vec<Value>, Vec<Value>) {
    let tmp = TempDir::new(name);
    let root = tmp.path();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script: Vec<Step> = steps.iter().chain(steps).cloned().collect();
    let mock = MockModel::start(script).await;
    let agent = root.join("agent");
    let package = pi16_package(pi).display().to_string();
    let env = agent_env(&agent, &mock.models_json(), &[("PI_PACKAGE_DIR", &package)]);
    let tools = ["--tools", "read,bash,edit,write"];
    let mut cmd = pi_bare_command(pi, &ws, &agent, root);
    cmd.args([
        "-p",
        "--provider",
        "mock",
        "--model",
        "mock-1",
        "--no-session",
    ])
    .args(tools)
    .arg(prompt);
    assert_success(&tokio::task::block_in_place(|| cmd.output().unwrap()));
    let theirs = mock.requests().len();
    assert_success(&run(
        &ws,
        &env,
        &[&["--model", "mock/mock-1"], &tools[..], &[prompt]].concat(),
    ));
    let sent: Vec<Value> = mock.requests().into_iter().map(|r| r.body).collect();
    (sent[..theirs].to_vec(), sent[theirs..].to_vec())
}

/// The `tool` messages of a chat-completions body, their spill file's path put aside
/// (`Full output: …` names a file of each side's own).
fn tool_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let text = m["content"].as_str().unwrap();
            match text.split_once(" Full output: ") {
                Some((head, _)) => format!("{head} Full output: …]"),
                None => text.to_string(),
            }
        })
        .collect()
}

/// The bash tool's tail counts lines as Pi 1.6's `truncateTail` does: a final newline ends the
/// last line (3,000 lines by the line limit: lines 1001-3000 of 3000; 1,500 lines of 52 bytes
/// by the byte limit: the 984 that fit in 50 KB, 517-1500 of 1500), an output without one
/// counts its last piece.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bash_tools_tail_counts_lines_as_pi() {
    let Some(pi) = pi16_bin("the_bash_tools_tail_counts_lines_as_pi") else {
        return;
    };
    let commands = [
        "seq 1 3000",
        "for i in $(seq 1 1500); do printf '%051d\\n' $i; done",
        "seq 1 2500; printf tail",
    ];
    let mut steps: Vec<Step> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| Step::call(&format!("call_{i}"), "bash", json!({"command": c})))
        .collect();
    steps.push(Step::text("done"));
    let (theirs, ours) = fresh(&pi, "pi16req-bash-tail", &steps, "run them").await;
    assert_eq!((theirs.len(), ours.len()), (4, 4));
    let (theirs, ours) = (tool_texts(&theirs[3]), tool_texts(&ours[3]));
    assert_eq!(ours, theirs);
    let lines = |from: u32, to: u32, form: fn(u32) -> String| {
        (from..=to).map(form).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(
        ours,
        [
            lines(1001, 3000, |n| n.to_string())
                + "\n\n[Showing lines 1001-3000 of 3000. Full output: …]",
            lines(517, 1500, |n| format!("{n:051}"))
                + "\n\n[Showing lines 517-1500 of 1500 (50.0KB limit). Full output: …]",
            lines(502, 2500, |n| n.to_string())
                + "\ntail\n\n[Showing lines 502-2501 of 2501. Full output: …]",
        ]
    );
}

/// The user's own command over the limits (`seq 1 3000`) keeps Pi 1.6's plain tail
/// (bash-executor.js): Pi RPC's `bash` and `agent/bash` give the same output (lines
/// 1001-3000, no notice inside it), `truncated`, exit code; our spill file holds the whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_command_keeps_pis_plain_tail() {
    let Some(pi) = pi16_bin("a_users_command_keeps_pis_plain_tail") else {
        return;
    };
    let tmp = TempDir::new("pi16req-user-bash");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![]).await;
    let agent = tmp.path().join("agent");
    let package = pi16_package(&pi).display().to_string();
    let env = agent_env(&agent, &mock.models_json(), &[("PI_PACKAGE_DIR", &package)]);
    let command = "seq 1 3000";
    let mut rpc = PiRpc::start(&pi, &ws, &agent, &[OsStr::new("--no-session")]);
    let theirs =
        tokio::task::block_in_place(|| rpc.request(json!({"type": "bash", "command": command})));
    rpc.close();
    let mut c = LspClient::start(&pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
    let sid = c
        .request("agent/session/new", json!({"model": "mock/mock-1"}))
        .await
        .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let ours = c
        .request("agent/bash", json!({"sessionId": sid, "command": command}))
        .await
        .unwrap();
    let tail = (1001..=3000)
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let seen = |r: &Value| json!([r["output"], r["exitCode"], r["cancelled"], r["truncated"]]);
    assert_eq!(seen(&ours), seen(&theirs));
    assert_eq!(seen(&ours), json!([tail, 0, false, true]));
    // Our spill file is whole when the answer comes (Pi ends its stream without waiting).
    let full = std::fs::read_to_string(ours["fullOutputPath"].as_str().unwrap()).unwrap();
    assert_eq!(full.len(), 13893);
}

/// A request body with what differs by design put aside: its conversation as
/// [`conversation`] gives it (no system prompt), and of its tools only each one's name and
/// `cache_control` mark (`toolMarks`; the descriptions differ).
fn shape(body: &Value) -> Value {
    let mut b = body.clone();
    let o = b.as_object_mut().unwrap();
    let marks = o.remove("tools").map(|tools| {
        tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let name = t.get("name").unwrap_or(&t["function"]["name"]).clone();
                json!([name, t.get("cache_control")])
            })
            .collect::<Value>()
    });
    for k in ["messages", "input", "system", "instructions"] {
        o.remove(k);
    }
    o.insert("conversation".into(), conversation(body));
    if let Some(marks) = marks {
        o.insert("toolMarks".into(), marks);
    }
    b
}

/// A crafted conversation on `model` (`provider/id`, wire `api`): a thinking answer with a
/// tool call (its thinking signed `thinking`), the call's result, a thinking answer with
/// text, a user message and an answer.
fn thinking_round(model: &str, api: &str, thinking: Value) -> Vec<Value> {
    let call =
        json!({"type": "toolCall", "id": "call_1", "name": "bash", "arguments": {"command": "ls"}});
    vec![
        entry("u1", "", user("first")),
        entry(
            "a1",
            "u1",
            assistant(model, api, json!([thinking, call]), "toolUse"),
        ),
        entry("r1", "a1", result("call_1", "a.txt\n")),
        entry(
            "a2",
            "r1",
            assistant(
                model,
                api,
                json!([thinking, {"type": "text", "text": "done"}]),
                "stop",
            ),
        ),
        entry("u2", "a2", user("second")),
        entry(
            "a3",
            "u2",
            assistant(model, api, json!([{"type": "text", "text": "ok"}]), "stop"),
        ),
    ]
}

/// One models.json `compat` set continued by Pi 1.6.0 and pi-lsp at thinking `high` (tools
/// read, bash, edit, write): a provider `c` of wire `api` at the loopback model with one
/// reasoning model `m1` (4,096 output tokens, `extra` keys beside its `compat`); the shaped
/// bodies ([`shape`]), asserted equal, and ours returned.
async fn compat_case(pi: &Path, name: &str, api: &str, compat: Value, extra: Value) -> Value {
    let thinking = match api {
        "openai-completions" => {
            json!({"type": "thinking", "thinking": "hmm", "thinkingSignature": "reasoning_content"})
        }
        _ => json!({"type": "thinking", "thinking": "hmm"}),
    };
    let entries = thinking_round("c/m1", api, thinking);
    let models = |mock: &MockModel| {
        let base = if api == "anthropic-messages" {
            mock.anthropic_base()
        } else {
            mock.openai_base()
        };
        let mut m = json!({"id": "m1", "reasoning": true, "contextWindow": 128000,
            "maxTokens": 4096, "compat": compat});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        json!({"providers": {"c": {"baseUrl": base, "api": api, "apiKey": "test-key",
            "models": [m]}}})
    };
    let args = ["--thinking", "high", "--tools", "read,bash,edit,write"];
    let (theirs, ours, _) = continued_bodies(pi, name, &models, "c/m1", &entries, &args).await;
    let (theirs, ours) = (shape(&theirs), shape(&ours));
    assert_eq!(ours, theirs, "{name}: {compat}");
    ours
}

/// The keys `keys` of `body` (absent ones as `null`).
fn pick(body: &Value, keys: &[&str]) -> Value {
    keys.iter()
        .map(|k| {
            (
                (*k).to_string(),
                body.get(*k).cloned().unwrap_or(Value::Null),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// models.json `compat` flags of `openai-completions` shape the request as Pi 1.6's pi-ai
/// `buildParams` / `convertMessages` does, each body whole (but the system prompt and tool
/// texts) equal to Pi 1.6.0's: `requiresNonNullAssistantContent` (a tool-call-only answer's
/// `content: ""`), every `thinkingFormat` (`zai`, `qwen`, `chat-template` with
/// `chatTemplateKwargs` variables, `baseten`, `together`, `ant-ling`, `string-thinking`),
/// `thinkingTokenBudgetField` (the level's budget capped to leave 1,024 of the 4,096),
/// `vllmPriority`, `openRouterRouting`, `vercelGatewayRouting`, `zaiToolStream`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_compat_flags_shape_the_body_as_pi() {
    let Some(pi) = pi16_bin("chat_completions_compat_flags_shape_the_body_as_pi") else {
        return;
    };
    let api = "openai-completions";
    let case = |name: &'static str, compat: Value, extra: Value| {
        let pi = pi.clone();
        async move { compat_case(&pi, name, api, compat, extra).await }
    };
    let ours = case(
        "compat-nonnull",
        json!({"requiresNonNullAssistantContent": true}),
        json!({}),
    )
    .await;
    assert_eq!(
        ours["conversation"][1],
        json!({"role": "assistant", "content": "", "reasoning_content": "hmm",
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]})
    );
    let keys = [
        "thinking",
        "reasoning_effort",
        "enable_thinking",
        "chat_template_kwargs",
        "chat_template_args",
        "reasoning",
        "thinking_budget",
        "priority",
        "provider",
        "providerOptions",
        "tool_stream",
    ];
    let want = |fields: Value| {
        let mut all = pick(&json!({}), &keys);
        for (k, v) in fields.as_object().unwrap() {
            all[k] = v.clone();
        }
        all
    };
    let ours = case(
        "compat-zai",
        json!({"thinkingFormat": "zai", "zaiToolStream": true}),
        json!({}),
    )
    .await;
    assert_eq!(
        pick(&ours, &keys),
        want(
            json!({"thinking": {"type": "enabled", "clear_thinking": false},
            "reasoning_effort": "high", "tool_stream": true})
        )
    );
    let ours = case("compat-qwen", json!({"thinkingFormat": "qwen"}), json!({})).await;
    assert_eq!(
        pick(&ours, &keys),
        want(json!({"enable_thinking": true, "reasoning_effort": "high"}))
    );
    let kwargs = json!({"enable_thinking": {"$var": "thinking.enabled"},
        "budget": {"$var": "thinking.budget"}, "level": {"$var": "thinking.effort"},
        "off_only": {"$var": "thinking.effort", "omitWhenOff": true},
        "literal": "$thinking.enabled"});
    let ours = case(
        "compat-chat-template",
        json!({"thinkingFormat": "chat-template", "chatTemplateKwargs": kwargs,
            "thinkingTokenBudgetField": "thinking_budget"}),
        json!({}),
    )
    .await;
    assert_eq!(
        pick(&ours, &keys),
        want(
            json!({"chat_template_kwargs": {"enable_thinking": true, "budget": 3072,
            "level": "high", "off_only": "high", "literal": "$thinking.enabled"},
            "thinking_budget": 3072})
        )
    );
    let ours = case(
        "compat-baseten",
        json!({"thinkingFormat": "baseten", "chatTemplateArgs": {"think": {"$var": "thinking.enabled"}}}),
        json!({"thinkingLevelMap": {"high": "H"}}),
    )
    .await;
    assert_eq!(
        pick(&ours, &keys),
        want(json!({"chat_template_args": {"think": true}, "reasoning_effort": "H"}))
    );
    let ours = case(
        "compat-together",
        json!({"thinkingFormat": "together", "vllmPriority": 5}),
        json!({}),
    )
    .await;
    assert_eq!(
        pick(&ours, &keys),
        want(json!({"reasoning": {"enabled": true}, "reasoning_effort": "high", "priority": 5}))
    );
    let ours = case(
        "compat-ant-ling",
        json!({"thinkingFormat": "ant-ling", "openRouterRouting": {"order": ["x"]},
            "vercelGatewayRouting": {"only": ["a"], "order": ["b"], "models": ["c"]}}),
        json!({"thinkingLevelMap": {"high": "H"}}),
    )
    .await;
    assert_eq!(
        pick(&ours, &keys),
        want(
            json!({"reasoning": {"effort": "H"}, "provider": {"order": ["x"]},
            "providerOptions": {"gateway": {"only": ["a"], "order": ["b"]}}})
        )
    );
    let ours = case(
        "compat-string-thinking",
        json!({"thinkingFormat": "string-thinking", "supportsThinkingTokenBudget": true}),
        json!({}),
    )
    .await;
    assert_eq!(pick(&ours, &keys), want(json!({"thinking": "high"})));
    assert_eq!(ours["thinking_token_budget"], json!(3072));
}

/// `anthropic-messages` compat: `supportsCacheControlOnTools: false` leaves the last tool
/// without its mark, and `allowEmptySignature` replays unsigned thinking as a thinking block
/// with `signature: ""` (not as text), both bodies equal to Pi 1.6.0's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_compat_flags_shape_the_body_as_pi() {
    let Some(pi) = pi16_bin("anthropic_compat_flags_shape_the_body_as_pi") else {
        return;
    };
    let ours = compat_case(
        &pi,
        "compat-anthropic",
        "anthropic-messages",
        json!({"supportsCacheControlOnTools": false, "allowEmptySignature": true}),
        json!({}),
    )
    .await;
    assert_eq!(
        ours["toolMarks"],
        json!([
            ["read", null],
            ["bash", null],
            ["edit", null],
            ["write", null]
        ])
    );
    assert_eq!(
        ours["conversation"][3],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": ""},
            {"type": "text", "text": "done"}]})
    );
}

/// `openai-responses` compat: `supportsMaxOutputTokens: false` sends no `max_output_tokens`;
/// `supportsMidConvoEffort` ends the input with a `configuration_update` item carrying the
/// level while `reasoning.effort` stays `medium`; both bodies equal to Pi 1.6.0's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_compat_flags_shape_the_body_as_pi() {
    let Some(pi) = pi16_bin("responses_compat_flags_shape_the_body_as_pi") else {
        return;
    };
    let api = "openai-responses";
    let ours = compat_case(
        &pi,
        "compat-resp-maxout",
        api,
        json!({"supportsMaxOutputTokens": false}),
        json!({}),
    )
    .await;
    assert_eq!(
        pick(&ours, &["max_output_tokens", "reasoning"]),
        json!({"max_output_tokens": null, "reasoning": {"effort": "high", "summary": "auto"}})
    );
    let ours = compat_case(
        &pi,
        "compat-resp-effort",
        api,
        json!({"supportsMidConvoEffort": true}),
        json!({}),
    )
    .await;
    let conversation = ours["conversation"].as_array().unwrap();
    assert_eq!(
        (
            conversation.last().unwrap(),
            &ours["reasoning"],
            &ours["max_output_tokens"]
        ),
        (
            &json!({"type": "configuration_update", "reasoning": {"effort": "high"}}),
            &json!({"effort": "medium", "summary": "auto"}),
            &json!(4096)
        )
    );
}

/// A models.json Anthropic model named like one that thinks adaptively (`claude-opus-4-6`,
/// `claude-sonnet-4-6`) but without `compat.forceAdaptiveThinking` thinks with a budget, as
/// Pi 1.6.0's `streamSimple` decides by the flag alone: `thinking.type: enabled` with the
/// level's budget and no `output_config`; with the flag, adaptive with the effort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_thinking_is_adaptive_by_the_flag_not_the_id() {
    let Some(pi) = pi16_bin("anthropic_thinking_is_adaptive_by_the_flag_not_the_id") else {
        return;
    };
    for (id, compat) in [
        ("claude-opus-4-6", json!({})),
        ("claude-sonnet-4-6", json!({})),
        ("claude-opus-4-7", json!({"forceAdaptiveThinking": true})),
    ] {
        let model = format!("c/{id}");
        let api = "anthropic-messages";
        let entries = [
            entry("u1", "", user("hi")),
            entry(
                "a1",
                "u1",
                assistant(
                    &model,
                    api,
                    json!([{"type": "text", "text": "hello"}]),
                    "stop",
                ),
            ),
        ];
        let models = |mock: &MockModel| {
            json!({"providers": {"c": {"baseUrl": mock.anthropic_base(), "api": api,
                "apiKey": "test-key", "models": [{"id": id, "reasoning": true,
                "contextWindow": 200000, "maxTokens": 32000, "compat": compat}]}}})
        };
        let args = ["--thinking", "high", "--tools", "read,bash,edit,write"];
        let (theirs, ours, _) =
            continued_bodies(&pi, "pi16req-adaptive", &models, &model, &entries, &args).await;
        let (theirs, ours) = (shape(&theirs), shape(&ours));
        assert_eq!(ours, theirs, "{id}");
        let want = if compat.get("forceAdaptiveThinking").is_some() {
            json!({"max_tokens": 32000, "thinking": {"type": "adaptive", "display": "summarized"},
                "output_config": {"effort": "high"}})
        } else {
            json!({"max_tokens": 32000, "output_config": null,
                "thinking": {"type": "enabled", "budget_tokens": 16384, "display": "summarized"}})
        };
        assert_eq!(
            pick(&ours, &["max_tokens", "thinking", "output_config"]),
            want,
            "{id}"
        );
    }
}

/// On `openai-responses` a stored user message of no content is left out without being
/// counted: the text items after it are numbered as Pi 1.6's `convertResponsesMessages`
/// numbers them (`msg_pi_1`, `msg_pi_2`, `msg_pi_4`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_item_ids_skip_an_empty_user_message() {
    let Some(pi) = pi16_bin("responses_item_ids_skip_an_empty_user_message") else {
        return;
    };
    let (m, api) = ("mockresp/mock-resp-1", "openai-responses");
    let text = |t: &str| json!([{"type": "text", "text": t}]);
    let entries = [
        entry("u1", "", user("first")),
        entry("a1", "u1", assistant(m, api, text("a0"), "stop")),
        entry(
            "u2",
            "a1",
            json!({"role": "user", "content": [], "timestamp": 1}),
        ),
        entry(
            "a2",
            "u2",
            assistant(m, api, text("after empty list"), "stop"),
        ),
        entry("u3", "a2", user("q")),
        entry("a3", "u3", assistant(m, api, text("a2"), "stop")),
    ];
    let (theirs, ours) = continued(&pi, "pi16req-resp-ids", m, &entries).await;
    assert_eq!(ours, theirs);
    let said = |t: &str, id: &str| {
        json!({"type": "message", "role": "assistant", "status": "completed", "id": id,
            "content": [{"type": "output_text", "text": t, "annotations": []}]})
    };
    let asked = |t: &str| json!({"role": "user", "content": [{"type": "input_text", "text": t}]});
    assert_eq!(
        ours,
        json!([
            asked("first"),
            said("a0", "msg_pi_1"),
            said("after empty list", "msg_pi_2"),
            asked("q"),
            said("a2", "msg_pi_4"),
            asked("next")
        ])
    );
}

/// The last assistant message of the one session file under `sessions`.
fn last_stored_answer(sessions: &Path) -> Value {
    let mut files = Vec::new();
    let mut dirs = vec![sessions.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                files.push(p);
            }
        }
    }
    assert_eq!(files.len(), 1, "{files:?}");
    last_answer_in(&files[0])
}

/// The last assistant message of the session file `file`.
fn last_answer_in(file: &Path) -> Value {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .rev()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "message" && v["message"]["role"] == "assistant")
        .unwrap()["message"]
        .clone()
}

/// An abort during the compaction before a prompt (a file whose last answer reported 59,005
/// tokens of a 64,000-token window, reserve 8,000): the run still starts and stores its prompt
/// and an aborted answer without asking the model, worded as Pi 1.6.0 words it — `This
/// operation was aborted` (its request's setup fails: the run was aborted at `agent_start`),
/// not `Request aborted`. Pi in RPC mode vs pi-lsp over LSP on copies of the file, the summary
/// request held open until the abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_during_the_compaction_before_a_prompt_is_stored_as_pi() {
    let Some(pi) = pi16_bin("an_abort_during_the_compaction_before_a_prompt_is_stored_as_pi")
    else {
        return;
    };
    let (m, api) = ("mock/mock-1", "openai-completions");
    let text = |t: &str| json!([{"type": "text", "text": t}]);
    let mut big = assistant(m, api, text("Two."), "stop");
    big["usage"] = json!({"input": 59_000, "output": 5, "cacheRead": 0, "cacheWrite": 0,
        "totalTokens": 59_005, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0,
        "total": 0}});
    let tmp = TempDir::new("pi16req-precompaction-abort");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let header = json!({"type": "session", "version": 3,
        "id": "a0000000-0000-4000-8000-0000000000ab",
        "timestamp": "2026-12-01T00:00:00.000Z", "cwd": ws});
    let lines = [
        header,
        json!({"type": "model_change", "id": "mc", "parentId": null,
            "timestamp": "2026-12-01T00:00:00.000Z", "provider": "mock", "modelId": "mock-1"}),
        json!({"type": "thinking_level_change", "id": "tl", "parentId": "mc",
            "timestamp": "2026-12-01T00:00:00.000Z", "thinkingLevel": "off"}),
        entry("u1", "tl", user("one")),
        entry("a1", "u1", assistant(m, api, text("One."), "stop")),
        entry("u2", "a1", user("two")),
        entry("a2", "u2", big),
    ];
    let file: String = lines.iter().map(|e| format!("{e}\n")).collect();
    let settings = json!({"compaction": {"keepRecentTokens": 1, "reserveTokens": 8_000}});
    let models = |mock: &MockModel| {
        let mut models = mock.models_json();
        models["providers"]["mock"]["models"][0]["contextWindow"] = json!(64_000);
        models
    };
    let hang = || vec![Step::Hang(String::new()), Step::Hang(String::new())];
    // Pi 1.6.0 in RPC mode.
    let pi_mock = MockModel::start(hang()).await;
    let agent = tmp.path().join("pi-agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), models(&pi_mock).to_string()).unwrap();
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
    let theirs_file = tmp.path().join("pi.jsonl");
    std::fs::write(&theirs_file, &file).unwrap();
    let theirs = tokio::task::block_in_place(|| {
        let mut p = PiRpc::open(&pi, &ws, &agent, &theirs_file);
        p.call(json!({"type": "prompt", "message": "three"}), |v| {
            v["type"] == "compaction_start"
        });
        p.call(json!({"type": "abort"}), |v| v["type"] == "agent_settled");
        p.close();
        last_answer_in(&theirs_file)
    });
    // pi-lsp over LSP.
    let our_mock = MockModel::start(hang()).await;
    let agent = tmp.path().join("our-agent");
    let env = agent_env(&agent, &models(&our_mock), &[]);
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
    let ours_file = tmp.path().join("ours.jsonl");
    std::fs::write(&ours_file, &file).unwrap();
    let mut c = LspClient::start(&pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
    let sid = c
        .request("agent/session/open", json!({"path": ours_file}))
        .await
        .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    c.request("agent/prompt", json!({"sessionId": sid, "text": "three"}))
        .await
        .unwrap();
    let deadline = std::time::Duration::from_secs(30);
    loop {
        let n = c
            .next_notification(deadline)
            .await
            .expect("no compaction_start");
        if n["method"] == "agent/event" && n["params"]["event"]["type"] == "compaction_start" {
            break;
        }
    }
    c.request("agent/abort", json!({"sessionId": sid}))
        .await
        .unwrap();
    c.events_until_settled(deadline).await;
    c.shutdown().await;
    let ours = last_answer_in(&ours_file);
    let fields = |m: &Value| {
        pick(
            m,
            &[
                "role",
                "content",
                "api",
                "provider",
                "model",
                "stopReason",
                "errorMessage",
            ],
        )
    };
    assert_eq!(fields(&ours), fields(&theirs));
    assert_eq!(
        fields(&ours),
        json!({"role": "assistant", "content": [], "api": "openai-completions",
            "provider": "mock", "model": "mock-1", "stopReason": "aborted",
            "errorMessage": "This operation was aborted"})
    );
    // Neither asked the model for the aborted run's answer (only the summary, which Pi may
    // abort before it is sent).
    for mock in [&pi_mock, &our_mock] {
        assert!(mock
            .requests()
            .iter()
            .all(|r| compacting::is_summary(&r.body)));
    }
}

/// Whether an agent event is a thinking delta (the answer is thinking).
#[derive(Default)]
struct SawThinking(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl pi_core::agent::EventSink for SawThinking {
    async fn emit(&self, event: pi_core::agent::AgentEvent) {
        if serde_json::to_value(&event).unwrap()["assistantMessageEvent"]["type"]
            == "thinking_delta"
        {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// An Anthropic answer aborted while it thinks (its signature not sent yet) keeps the
/// thinking block's `thinkingSignature: ""`, as Pi 1.6.0 stores it (pi-ai takes the block's
/// `signature ?? ""` from its start): Pi in RPC mode vs pi-lsp's agent, the whole stored
/// answer but its timestamp and level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_aborted_while_thinking_keeps_an_empty_signature_as_pi() {
    let Some(pi) = pi16_bin("an_answer_aborted_while_thinking_keeps_an_empty_signature_as_pi")
    else {
        return;
    };
    // "partial" streams, then the next delta waits 30 s: the abort comes meanwhile.
    let step = || {
        Step::Answer(pi_e2e::mock_model::Answer {
            thinking: Some("partial thought".into()),
            text: Some("never".into()),
            chunk: 7,
            chunk_delay: std::time::Duration::from_secs(30),
            ..Default::default()
        })
    };
    let tmp = TempDir::new("pi16req-abort-thinking");
    let pi_mock = MockModel::start(vec![step()]).await;
    let dir = tmp.path().join("pi");
    let (agent, home, ws) = (dir.join("agent"), dir.join("home"), dir.join("ws"));
    for d in [&agent, &home, &ws] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut models = pi_mock.models_json();
    models["providers"]["mockant"]["models"][0]["reasoning"] = json!(true);
    std::fs::write(agent.join("models.json"), models.to_string()).unwrap();
    let sessions = dir.join("sessions");
    let theirs = tokio::task::block_in_place(|| {
        let mut cmd = pi_bare_command(&pi, &ws, &agent, &home);
        cmd.args([
            "--provider",
            "mockant",
            "--model",
            "mock-ant-1",
            "--thinking",
            "high",
        ])
        .args(["--no-tools", "--session-dir"])
        .arg(&sessions)
        .env("PI_PACKAGE_DIR", pi_e2e::pi16_package(&pi));
        let mut p = PiRpc::spawn(cmd);
        p.call(json!({"type": "prompt", "message": "think"}), |v| {
            v["assistantMessageEvent"]["type"] == "thinking_delta"
        });
        p.call(json!({"type": "abort"}), |v| v["type"] == "agent_settled");
        p.close();
        last_stored_answer(&sessions)
    });
    let our_mock = MockModel::start(vec![step()]).await;
    let mut model = pi_ai::Model::new(
        pi_ai::Api::AnthropicMessages,
        "mockant",
        "mock-ant-1",
        &our_mock.anthropic_base(),
    );
    model.api_key = Some("test-key".into());
    model.reasoning = true;
    model.context_window = 200_000;
    model.max_tokens = 4_096;
    model.thinking_level = Some(pi_ai::models::ThinkingLevel::High);
    let odir = tmp.path().join("ours");
    let c = compacting::compacting_agent(
        &odir,
        &odir.join("sessions"),
        model,
        None,
        pi_core::agent::CompactionSettings::default(),
        None,
    );
    let saw = Arc::new(SawThinking::default());
    let _sub = c.agent.subscribe(saw.clone());
    c.agent
        .prompt(vec![pi_ai::Message::user_text("think")])
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while !saw.0.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("no thinking delta");
    assert!(c.agent.abort(), "nothing to abort");
    c.idle().await;
    let ours = serde_json::to_value(c.agent.messages().last().unwrap()).unwrap();
    let fields = |m: &Value| {
        pick(
            m,
            &[
                "role",
                "content",
                "api",
                "provider",
                "model",
                "stopReason",
                "errorMessage",
            ],
        )
    };
    assert_eq!(fields(&ours), fields(&theirs));
    assert_eq!(
        fields(&ours)["content"],
        json!([{"type": "thinking", "thinking": "partial", "thinkingSignature": ""}])
    );
}

/// `openai-responses` with `compat.supportsMidConvoEffort`: an answer of the model that stored
/// the effort it was told (`providerThinkingLevel`) gets its own `configuration_update` item
/// before its items, and the new answer stores the request's effort, as Pi 1.6.0 does: the
/// bodies (but system prompt and tool texts) and the stored answers' `providerThinkingLevel`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_replay_a_stored_effort_as_pi() {
    let Some(pi) = pi16_bin("responses_replay_a_stored_effort_as_pi") else {
        return;
    };
    let api = "openai-responses";
    let mut entries = thinking_round("c/m1", api, json!({"type": "thinking", "thinking": "hmm"}));
    entries[3]["message"]["providerThinkingLevel"] = json!("low");
    let models = |mock: &MockModel| {
        json!({"providers": {"c": {"baseUrl": mock.openai_base(), "api": api,
            "apiKey": "test-key", "models": [{"id": "m1", "reasoning": true,
            "contextWindow": 128000, "maxTokens": 4096,
            "compat": {"supportsMidConvoEffort": true}}]}}})
    };
    let args = ["--thinking", "high", "--tools", "read,bash,edit,write"];
    let (theirs, ours, (their_answer, our_answer)) =
        continued_bodies(&pi, "pi16req-resp-effort", &models, "c/m1", &entries, &args).await;
    let (theirs, ours) = (shape(&theirs), shape(&ours));
    assert_eq!(ours, theirs);
    let update = |e: &str| json!({"type": "configuration_update", "reasoning": {"effort": e}});
    let items = ours["conversation"].as_array().unwrap();
    let at = items.iter().position(|i| i == &update("low")).unwrap();
    assert_eq!(items[at + 1]["content"][0]["text"], json!("done"));
    assert_eq!(items.last().unwrap(), &update("high"));
    assert_eq!(
        (
            &our_answer["providerThinkingLevel"],
            &their_answer["providerThinkingLevel"]
        ),
        (&json!("high"), &json!("high"))
    );
}

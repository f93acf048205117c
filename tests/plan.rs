//! End to end, the built-in `todo` and `plan-mode` extensions over stdio (on by default): the
//! scripted model calls `todo` (add, toggle, clear) and the list follows a branch and a rewind
//! (`agent/plan/get`, `agent/plan` pushed); plan mode (`agent/plan/set`) takes `edit` and
//! `write` away and turns the search tools on (the same tool sets, stored system messages and
//! state entries as Pi 1.6.0's example, run side by side), blocks a destructive bash command, asks Pi's question after a `Plan:` answer, and each
//! of the three answers does what Pi's example does; `[DONE:n]` markers mark steps done;
//! `pi-lsp run --plan` prints the plan.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pi_e2e::lsp_client::{agent_env, start_with_mock, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{json_lines, pi_lsp_bin, session_lines, TempDir};
use serde_json::{json, Value};

fn workspace(tmp: &TempDir) -> PathBuf {
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
    ws
}

fn behavior(ui_answer: Option<Value>) -> EditorBehavior {
    EditorBehavior {
        ui_answer,
        ..Default::default()
    }
}

/// The tool names a recorded request offered the model.
fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .or(t["name"].as_str())
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `(id, text, done, status)` of a state's todos.
fn items(state: &Value) -> Vec<(u64, String, bool, String)> {
    state["todos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_u64().unwrap(),
                t["text"].as_str().unwrap().to_string(),
                t["done"].as_bool().unwrap(),
                t["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn item(id: u64, text: &str, done: bool, status: &str) -> (u64, String, bool, String) {
    (id, text.to_string(), done, status.to_string())
}

async fn plan_get(c: &mut LspClient, sid: &str) -> Value {
    c.request("agent/plan/get", json!({"sessionId": sid}))
        .await
        .unwrap()
}

/// Waits until the last `agent/plan` notification equals `want` (minus `sessionId`).
async fn pushed(c: &LspClient, sid: &str, want: &Value) {
    let t0 = Instant::now();
    loop {
        let last = c
            .log()
            .into_iter()
            .filter(|m| m["method"] == "agent/plan" && m["params"]["sessionId"] == sid)
            .map(|m| m["params"].clone())
            .next_back();
        if last.as_ref() == Some(want) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "agent/plan never pushed {want:#}; last {last:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn prompt(c: &mut LspClient, sid: Option<&str>, text: &str) -> String {
    let mut p = json!({ "text": text });
    if let Some(s) = sid {
        p["sessionId"] = json!(s);
    }
    let r = c.request("agent/prompt", p).await.unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    r["sessionId"].as_str().unwrap().to_string()
}

/// Waits until `cond` holds on the session file's lines.
async fn wait_lines(ws: &std::path::Path, what: &str, cond: impl Fn(&[Value]) -> bool) {
    let t0 = Instant::now();
    loop {
        let lines = session_lines(ws);
        if cond(&lines) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "never: {what}; lines {lines:#?}"
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todo_list_follows_the_branch_and_a_rewind() {
    let tmp = TempDir::new("plan-todo");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![
        Step::Tools(
            None,
            vec![
                (
                    "c1".into(),
                    "todo".into(),
                    json!({"action": "add", "text": "Write the parser"}),
                ),
                (
                    "c2".into(),
                    "todo".into(),
                    json!({"action": "add", "text": "Test the parser"}),
                ),
                (
                    "c3".into(),
                    "todo".into(),
                    json!({"action": "toggle", "id": 1}),
                ),
            ],
        ),
        Step::text("Two todos, one done."),
        Step::Tools(
            None,
            vec![
                (
                    "c4".into(),
                    "todo".into(),
                    json!({"action": "toggle", "id": 9}),
                ),
                ("c5".into(), "todo".into(), json!({"action": "clear"})),
            ],
        ),
        Step::text("Cleared."),
        Step::call("c6", "todo", json!({"action": "list"})),
        Step::text("Listed."),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, behavior(None)).await;
    let sid = prompt(&mut c, None, "plan the parser").await;

    // The tool is offered with Pi's schema.
    let body = &mock.requests()[0].body;
    let todo = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "todo")
        .unwrap();
    assert_eq!(
        todo["function"]["parameters"],
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["list", "add", "toggle", "clear"]},
            "text": {"type": "string", "description": "Todo text (for add)"},
            "id": {"type": "number", "description": "Todo ID (for toggle)"}},
            "required": ["action"]})
    );

    let after_first = json!({
        "sessionId": sid, "available": true, "mode": "off", "planModeAvailable": true,
        "todos": [
            {"id": 1, "text": "Write the parser", "done": true, "status": "completed", "priority": "medium"},
            {"id": 2, "text": "Test the parser", "done": false, "status": "in_progress", "priority": "medium"}],
        "nextId": 3, "completed": 1, "total": 2});
    assert_eq!(plan_get(&mut c, &sid).await, after_first);
    pushed(&c, &sid, &after_first).await;

    // The results as stored: Pi's text and details (plus status / priority).
    let lines = session_lines(&ws);
    let results: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"]["toolName"] == "todo")
        .collect();
    assert_eq!(
        results
            .iter()
            .map(|l| l["message"]["content"][0]["text"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec![
            "Added todo #1: Write the parser",
            "Added todo #2: Test the parser",
            "Todo #1 completed"
        ]
    );
    assert_eq!(
        results[2]["message"]["details"],
        json!({"action": "toggle", "nextId": 3, "todos": [
            {"id": 1, "text": "Write the parser", "done": true, "status": "completed", "priority": "medium"},
            {"id": 2, "text": "Test the parser", "done": false, "status": "in_progress", "priority": "medium"}]})
    );
    // The entry of the second prompt: the branch point later.
    let second_user = {
        prompt(&mut c, Some(&sid), "clear it").await;
        session_lines(&ws)
            .into_iter()
            .filter(|l| l["message"]["role"] == "user")
            .nth(1)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let lines = session_lines(&ws);
    let texts: Vec<&str> = lines
        .iter()
        .filter(|l| l["message"]["toolName"] == "todo")
        .skip(3)
        .map(|l| l["message"]["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, vec!["Todo #9 not found", "Cleared 2 todos"]);
    let cleared = json!({
        "sessionId": sid, "available": true, "mode": "off", "planModeAvailable": true,
        "todos": [], "nextId": 1, "completed": 0, "total": 0});
    assert_eq!(plan_get(&mut c, &sid).await, cleared);
    pushed(&c, &sid, &cleared).await;

    // Branch back before the second prompt: the list of that point.
    c.request(
        "agent/session/branch",
        json!({"sessionId": sid, "entryId": second_user}),
    )
    .await
    .unwrap();
    assert_eq!(plan_get(&mut c, &sid).await, after_first);
    pushed(&c, &sid, &after_first).await;

    // On the branch: list (the model sees the branch's list).
    prompt(&mut c, Some(&sid), "list them").await;
    let lines = session_lines(&ws);
    let listed = lines
        .iter()
        .rfind(|l| l["message"]["toolName"] == "todo")
        .unwrap();
    assert_eq!(
        listed["message"]["content"][0]["text"],
        "[x] #1: Write the parser\n[ ] #2: Test the parser"
    );
    // Rewind to the cleared branch's leaf: its (empty) list again.
    let cleared_leaf = lines
        .iter()
        .filter(|l| l["message"]["content"][0]["text"] == "Cleared.")
        .map(|l| l["id"].as_str().unwrap().to_string())
        .next()
        .unwrap();
    c.request(
        "agent/session/rewind",
        json!({"sessionId": sid, "entryId": cleared_leaf}),
    )
    .await
    .unwrap();
    assert_eq!(plan_get(&mut c, &sid).await, cleared);
    pushed(&c, &sid, &cleared).await;

    // /todos: one command, the list as a notification.
    let cmds = c
        .request("agent/extension/commands", json!({"sessionId": sid}))
        .await
        .unwrap();
    let names: Vec<&str> = cmds["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["todos", "plan"]);
    drop(c);
    // Reopened in a new server, the session shows the list of its leaf.
    let mut c = start_with_mock(&ws, &mock, behavior(None)).await;
    assert_eq!(plan_get(&mut c, &sid).await, cleared);
}

/// A session in plan mode that answers with a plan; `answer`: the user's choice.
async fn plan_session(
    answer: &str,
    script: Vec<Step>,
) -> (TempDir, PathBuf, MockModel, LspClient, String) {
    let tmp = TempDir::new("plan-mode");
    let ws = workspace(&tmp);
    let mock = MockModel::start(script).await;
    let mut c = start_with_mock(&ws, &mock, behavior(Some(json!({"value": answer})))).await;
    let r = c.request("agent/session/new", json!({})).await.unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let on = c
        .request("agent/plan/set", json!({"sessionId": sid, "enabled": true}))
        .await
        .unwrap();
    assert_eq!(on["mode"], "plan");
    prompt(&mut c, Some(&sid), "plan the greeting change").await;
    (tmp, ws, mock, c, sid)
}

const PLAN_TEXT: &str = "Here is what I found.\n\nPlan:\n1. Read the `notes.txt` file\n2. Change the **greeting** to bonjour\n3. Verify the new greeting\n";

fn plan_script(rest: Vec<Step>) -> Vec<Step> {
    let mut s = vec![
        Step::Tools(
            None,
            vec![
                (
                    "b1".into(),
                    "bash".into(),
                    json!({"command": "rm notes.txt"}),
                ),
                (
                    "b2".into(),
                    "bash".into(),
                    json!({"command": "cat notes.txt"}),
                ),
                (
                    "w1".into(),
                    "write".into(),
                    json!({"path": "x.txt", "content": "x"}),
                ),
            ],
        ),
        Step::text(PLAN_TEXT),
    ];
    s.extend(rest);
    s
}

fn steps(done: [bool; 3], statuses: [&str; 3]) -> Vec<(u64, String, bool, String)> {
    vec![
        item(1, "Notes.txt file", done[0], statuses[0]),
        item(2, "Change the greeting to bonjour", done[1], statuses[1]),
        item(3, "New greeting", done[2], statuses[2]),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_executes_the_plan_and_tracks_done_markers() {
    let (_tmp, ws, mock, mut c, sid) = plan_session(
        "Execute the plan (track progress)",
        plan_script(vec![
            Step::text("Read it. [DONE:1]"),
            Step::text("Changed it. [DONE:2]"),
            Step::text("Verified. [DONE:3]"),
        ]),
    )
    .await;
    // Plan mode: no write tools offered, the context message sent, rm blocked, cat run.
    let reqs = mock.requests();
    let names = tool_names(&reqs[0].body);
    assert!(
        !names.contains(&"edit".to_string()) && !names.contains(&"write".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"bash".to_string()) && names.contains(&"todo".to_string()),
        "{names:?}"
    );
    let sent = reqs[0].body["messages"].to_string();
    assert!(sent.contains("[PLAN MODE ACTIVE]"), "{sent}");
    let lines = session_lines(&ws);
    let result_of = |id: &str| {
        lines
            .iter()
            .find(|l| l["message"]["toolCallId"] == id)
            .map(|l| {
                l["message"]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .unwrap()
    };
    assert_eq!(
        result_of("b1"),
        "Plan mode: command blocked (not allowlisted). Use /plan to disable plan mode first.\nCommand: rm notes.txt"
    );
    assert_eq!(result_of("b2"), "hello\n");
    assert_eq!(result_of("w1"), "Tool write not found");
    assert!(ws.join("notes.txt").exists());
    // The context message is stored as Pi's hidden custom message.
    assert!(lines.iter().any(|l| l["type"] == "custom_message"
        && l["customType"] == "plan-mode-context"
        && l["display"] == false));
    // The editor is told it as what it is (Pi's role "custom", hidden), never as the user's
    // own message.
    let started: Vec<Value> = c
        .log()
        .into_iter()
        .filter(|m| {
            m["method"] == "agent/event"
                && m["params"]["event"]["type"] == "message_start"
                && ["user", "custom"].contains(
                    &m["params"]["event"]["message"]["role"]
                        .as_str()
                        .unwrap_or_default(),
                )
        })
        .map(|m| m["params"]["event"]["message"].clone())
        .collect();
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(started[0]["role"], "user");
    assert_eq!(started[0]["content"][0]["text"], "plan the greeting change");
    assert_eq!(started[1]["role"], "custom");
    assert_eq!(started[1]["customType"], "plan-mode-context");
    assert_eq!(started[1]["display"], false);
    assert!(
        started[1]["content"]
            .as_str()
            .is_some_and(|t| t.starts_with("[PLAN MODE ACTIVE]")),
        "{}",
        started[1]
    );
    assert!(started[1]["timestamp"].as_i64().is_some_and(|t| t > 0));

    // The question, Pi's wording.
    let t0 = Instant::now();
    let question = loop {
        if let Some(q) = c
            .log()
            .into_iter()
            .find(|m| m["method"] == "agent/ui/request")
        {
            break q["params"].clone();
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no question");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(question["method"], "select");
    assert_eq!(question["title"], "Plan mode - what next?");
    assert_eq!(
        question["options"],
        json!([
            "Execute the plan (track progress)",
            "Stay in plan mode",
            "Refine the plan"
        ])
    );
    // Executing: a run starts with Pi's execute message; every tool is back.
    c.run_until_end(Duration::from_secs(30)).await;
    wait_lines(&ws, "the first step done", |l| {
        l.iter()
            .any(|l| l["customType"] == "plan-mode" && l["data"]["todos"][0]["completed"] == true)
    })
    .await;
    let reqs = mock.requests();
    let names = tool_names(&reqs[2].body);
    assert!(
        names.contains(&"edit".to_string()) && names.contains(&"write".to_string()),
        "{names:?}"
    );
    let lines = session_lines(&ws);
    let exec = lines
        .iter()
        .find(|l| l["customType"] == "plan-mode-execute")
        .unwrap();
    assert_eq!(
        exec["content"],
        "Execute the plan.\n\nRemaining steps:\n1. Notes.txt file\n2. Change the greeting to bonjour\n3. New greeting\n\nStart with: Notes.txt file\nAfter completing a step, include a [DONE:n] tag in your response."
    );
    let state = plan_get(&mut c, &sid).await;
    assert_eq!(state["mode"], "executing");
    assert_eq!(
        items(&state),
        steps(
            [true, false, false],
            ["completed", "in_progress", "pending"]
        )
    );
    prompt(&mut c, Some(&sid), "go on").await;
    let state = plan_get(&mut c, &sid).await;
    assert_eq!(
        items(&state),
        steps(
            [true, true, false],
            ["completed", "completed", "in_progress"]
        )
    );
    // The execution context went with the prompt.
    let last = mock.requests().last().unwrap().body["messages"].to_string();
    assert!(
        last.contains("[EXECUTING PLAN - Full tool access enabled]"),
        "{last}"
    );
    assert!(
        !last.contains("[PLAN MODE ACTIVE]"),
        "stale plan-mode context sent"
    );
    prompt(&mut c, Some(&sid), "finish").await;
    let state = plan_get(&mut c, &sid).await;
    assert_eq!(state["mode"], "off");
    assert_eq!(
        items(&state),
        steps([true, true, true], ["completed", "completed", "completed"])
    );
    pushed(&c, &sid, &state).await;
    // Pi's plan-mode entry as the last word.
    let lines = session_lines(&ws);
    let last_entry = lines
        .iter()
        .rfind(|l| l["customType"] == "plan-mode")
        .unwrap();
    assert_eq!(last_entry["data"]["enabled"], false);
    assert_eq!(last_entry["data"]["executing"], false);
    assert_eq!(
        last_entry["data"]["todos"][2],
        json!({"step": 3, "text": "New greeting", "completed": true, "id": 3, "done": true,
            "status": "completed", "priority": "medium"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_stay_keeps_the_mode_and_the_steps() {
    let (_tmp, ws, mock, mut c, sid) = plan_session("Stay in plan mode", plan_script(vec![])).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let state = plan_get(&mut c, &sid).await;
    assert_eq!(state["mode"], "plan");
    assert_eq!(
        items(&state),
        steps([false, false, false], ["pending", "pending", "pending"])
    );
    assert_eq!(mock.requests().len(), 2, "no run after staying");
    drop(c);
    // Resumed: still in plan mode, the same steps; the write tools stay off.
    let mut c = start_with_mock(&ws, &mock, behavior(None)).await;
    assert_eq!(plan_get(&mut c, &sid).await["mode"], "plan");
    let off = c
        .request(
            "agent/plan/set",
            json!({"sessionId": sid, "enabled": false}),
        )
        .await
        .unwrap();
    assert_eq!(off["mode"], "off");
    assert_eq!(off["total"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_refine_sends_the_refinement() {
    let (_tmp, ws, mock, mut c, _sid) = plan_session(
        "Refine the plan",
        plan_script(vec![Step::text("Plan:\n1. Read the notes file first\n")]),
    )
    .await;
    // The editor dialog answers with the same value: it is the refinement.
    c.run_until_end(Duration::from_secs(30)).await;
    wait_lines(&ws, "the refinement", |l| {
        l.iter().any(|l| {
            l["message"]["role"] == "user"
                && l["message"]["content"][0]["text"] == "Refine the plan"
        })
    })
    .await;
    let lines = session_lines(&ws);
    assert!(lines.iter().any(|l| l["customType"] == "plan-todo-list"
        && l["content"] == "**Plan Steps (3):**\n\n1. ☐ Notes.txt file\n2. ☐ Change the greeting to bonjour\n3. ☐ New greeting"));
    let last = mock.requests().last().unwrap().body["messages"].to_string();
    assert!(last.contains("[PLAN MODE ACTIVE]"), "{last}");
}

#[test]
fn run_with_plan_prints_the_plan() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = TempDir::new("plan-run");
    let ws = workspace(&tmp);
    let mock = rt.block_on(MockModel::start(vec![Step::text(PLAN_TEXT)]));
    let env = agent_env(&tmp.path().join("agent"), &mock.models_json(), &[]);
    let out = std::process::Command::new(pi_lsp_bin())
        .args(["run", "--plan", "--model", "mock/mock-1", "--workspace"])
        .arg(&ws)
        .arg("plan the greeting change")
        .envs(env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        format!("{PLAN_TEXT}\n\nPlan (0/3):\n[ ] 1. Notes.txt file\n[ ] 2. Change the greeting to bonjour\n[ ] 3. New greeting\n")
    );
    let names = tool_names(&mock.requests()[0].body);
    assert!(!names.contains(&"write".to_string()), "{names:?}");
    drop(rt);
}

/// `pi-lsp run` in `ws` against `mock` with `args` before the prompt; its stdout (the run
/// must succeed).
fn run_headless(tmp: &TempDir, ws: &std::path::Path, mock: &MockModel, args: &[&str]) -> String {
    let env = agent_env(&tmp.path().join("agent"), &mock.models_json(), &[]);
    let out = std::process::Command::new(pi_lsp_bin())
        .args(["run", "--model", "mock/mock-1", "--workspace"])
        .arg(ws)
        .args(args)
        .envs(env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Pi 1.6 "Resumed sessions keep their active tools" (`_restoreToolsFromTranscript`), against
/// a file the real Pi 1.6.0 wrote with `pi -p --tools read,bash,ls` (and continued once:
/// its continued request offered `read`, `bash`, `ls` again). Continued here, the request
/// offers those three (and `todo`, an extension tool the file never mentions, which Pi's
/// rule turns on), not `defaultTools`' seven; `--tools +grep,-bash` applies on top of the
/// restored set (Pi 1.6.0 sent `read`, `ls`, `grep`); a `--tools` list of names selects
/// (Pi: `read`, `edit`).
#[test]
fn a_resumed_pi_16_session_keeps_the_tools_it_ran_with() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = TempDir::new("plan-kept-tools");
    let ws = workspace(&tmp);
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/sessions/pi16/pi-1.6.0-tools-read-bash-ls.jsonl"
    );
    let copy = |name: &str| {
        let to = tmp.path().join(name);
        std::fs::copy(fixture, &to).unwrap();
        to.display().to_string()
    };
    let mock = rt.block_on(MockModel::start(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
        Step::text("four"),
    ]));
    let (a, b) = (copy("a.jsonl"), copy("b.jsonl"));
    assert_eq!(
        run_headless(&tmp, &ws, &mock, &["--session", &a, "next"]),
        "one\n"
    );
    // The second continuation reads back what the first one stored (its system message, if any).
    run_headless(&tmp, &ws, &mock, &["--session", &a, "again"]);
    run_headless(
        &tmp,
        &ws,
        &mock,
        &["--session", &b, "--tools", "+grep,-bash", "next"],
    );
    run_headless(
        &tmp,
        &ws,
        &mock,
        &["--session", &b, "--tools", "read,edit", "next"],
    );
    let sent: Vec<Vec<String>> = mock
        .requests()
        .iter()
        .map(|r| tool_names(&r.body))
        .collect();
    assert_eq!(
        sent,
        [
            vec!["read", "bash", "ls", "todo"],
            vec!["read", "bash", "ls", "todo"],
            vec!["read", "ls", "todo", "grep"],
            vec!["read", "edit"],
        ]
    );
    drop(rt);
}

/// Plan mode's tool set is recorded in the stored system message, but it is never
/// taken for the user's choice: a session started in plan mode (`run --plan`), continued in
/// plan mode, then left (`/plan`) and continued, offers `edit` and `write` again, in another
/// process each time. A session whose tools were chosen outside plan mode (`defaultTools`
/// of two, then the setting removed) keeps that choice across plan mode.
#[test]
fn plan_mode_is_never_restored_as_the_sessions_tools() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = TempDir::new("plan-restore");
    let ws = workspace(&tmp);
    let mock = rt.block_on(MockModel::start(vec![
        Step::text(PLAN_TEXT),
        Step::text("still planning"),
        Step::text("back to work"),
        Step::text("chosen"),
        Step::text("chosen, planning"),
        Step::text("chosen again"),
    ]));
    run_headless(&tmp, &ws, &mock, &["--plan", "plan the greeting change"]);
    run_headless(&tmp, &ws, &mock, &["--continue", "go on"]);
    run_headless(&tmp, &ws, &mock, &["--continue", "/plan"]);
    run_headless(&tmp, &ws, &mock, &["--continue", "now change it"]);
    let all = [
        "read", "bash", "edit", "write", "grep", "find", "ls", "todo",
    ];
    let read_only = ["read", "bash", "grep", "find", "ls", "todo"];
    let sent = |from: usize| -> Vec<Vec<String>> {
        mock.requests()[from..]
            .iter()
            .map(|r| tool_names(&r.body))
            .collect()
    };
    assert_eq!(sent(0), [&read_only[..], &read_only[..], &all[..]]);

    // A choice made outside plan mode survives a plan: two built-in tools, kept after the
    // setting is gone, filtered in plan mode, back after it.
    let ws2 = tmp.path().join("ws2");
    std::fs::create_dir_all(&ws2).unwrap();
    let settings = tmp.path().join("agent/settings.json");
    std::fs::write(
        &settings,
        json!({"defaultTools": ["read", "edit"]}).to_string(),
    )
    .unwrap();
    run_headless(&tmp, &ws2, &mock, &["choose"]);
    std::fs::remove_file(&settings).unwrap();
    run_headless(&tmp, &ws2, &mock, &["--continue", "/plan"]);
    run_headless(&tmp, &ws2, &mock, &["--continue", "plan"]);
    run_headless(&tmp, &ws2, &mock, &["--continue", "/plan"]);
    run_headless(&tmp, &ws2, &mock, &["--continue", "work"]);
    // In plan mode `edit` goes and the search tools and `bash` come (Pi's example adds
    // them when registered but off).
    assert_eq!(
        sent(3),
        [
            vec!["read", "edit", "todo"],
            vec!["read", "todo", "bash", "grep", "find", "ls"],
            vec!["read", "edit", "todo"],
        ]
    );
    drop(rt);
}

/// Pi 1.6's plan-mode example records the tools active when plan mode is turned on
/// (`toolsBeforePlanMode` in its `plan-mode` entry) and leaving the plan restores exactly that
/// set (`setActiveTools(toolsBeforePlanMode)`), the field then left out of the entry. Pi 1.6.0
/// in RPC mode (`--tools read,bash,edit,write,ls`, the example loaded, `/plan`, an extension
/// deactivating `ls`, `/plan`) recorded `["read","bash","edit","write","ls"]` and had `ls`
/// active again after the plan: a tool the loadout lost while planning comes back. Here the
/// plan starts with `--plan --tools read,bash,edit,write,ls` and is left in another process
/// without `--tools`: the recorded set comes back (`ls` included, `grep`/`find` not), where
/// without the record `defaultTools` would have chosen.
#[test]
fn leaving_plan_mode_restores_the_tools_recorded_when_it_started() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = TempDir::new("plan-tools-before");
    let ws = workspace(&tmp);
    let mock = rt.block_on(MockModel::start(vec![
        Step::text("planning"),
        Step::text("working"),
    ]));
    let tools = "read,bash,edit,write,ls";
    run_headless(&tmp, &ws, &mock, &["--plan", "--tools", tools, "plan it"]);
    run_headless(&tmp, &ws, &mock, &["--continue", "/plan"]);
    run_headless(&tmp, &ws, &mock, &["--continue", "go"]);
    let states: Vec<Value> = session_lines(&ws)
        .into_iter()
        .filter(|l| l["type"] == "custom" && l["customType"] == "plan-mode")
        .map(|l| l["data"].clone())
        .collect();
    assert_eq!(
        states,
        [
            json!({"enabled": true, "todos": [], "executing": false, "nextId": 1,
                "toolsBeforePlanMode": ["read", "bash", "edit", "write", "ls"]}),
            json!({"enabled": false, "todos": [], "executing": false, "nextId": 1}),
        ]
    );
    let sent: Vec<Vec<String>> = mock
        .requests()
        .iter()
        .map(|r| tool_names(&r.body))
        .collect();
    assert_eq!(
        sent,
        [
            vec!["read", "bash", "ls"],
            vec!["read", "bash", "edit", "write", "ls", "todo"],
        ]
    );
    drop(rt);
}

/// Plan mode's tools as Pi 1.6.0's `examples/extensions/plan-mode` sets them, side by side on
/// one loopback model with Pi's default tools (`defaultTools` read, bash, edit, write; no
/// `todo`, which Pi does not have): a prompt, `/plan`, a prompt, `/plan`, a prompt. Both offer
/// read, bash, edit, write; then read, bash, grep, find, ls (`edit` / `write` off, the search
/// tools *added* though they were off); then the first four again. Both store the same system
/// messages (the first with every tool; then `grep`/`find`/`ls` added, `edit`/`write`
/// removed; then the reverse, each with the `tools` and `rules` sections) and the same
/// `plan-mode` state entries (`toolsBeforePlanMode` while planning; pi-lsp adds `nextId`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_tools_and_entries_are_pi_16s() {
    let Some(pi) = pi_e2e::pi16_bin("plan_mode_tools_and_entries_are_pi_16s") else {
        return;
    };
    let tmp = TempDir::new("plan-pi16");
    let mock = MockModel::start((0..6).map(|_| Step::text("ok")).collect()).await;
    let settings = json!({"defaultTools": ["read", "bash", "edit", "write"],
        "builtinExtensions": {"todo": false}});
    // Pi 1.6.0 with its example.
    let pi_ws = tmp.path().join("pi").join("ws");
    std::fs::create_dir_all(&pi_ws).unwrap();
    let pi_agent = tmp.path().join("pi").join("agent");
    let _ = agent_env(&pi_agent, &mock.models_json(), &[]);
    std::fs::write(pi_agent.join("settings.json"), settings.to_string()).unwrap();
    let example = pi_e2e::pi16_package(&pi).join("examples/extensions/plan-mode/index.ts");
    let pi_file = tokio::task::block_in_place(|| {
        let mut p = pi_e2e::pi_rpc::PiRpc::start(
            &pi,
            &pi_ws,
            &pi_agent,
            &["-e".as_ref(), example.as_os_str()],
        );
        p.prompt("hello");
        p.command("/plan");
        p.prompt("plan it");
        p.command("/plan");
        p.prompt("after");
        PathBuf::from(
            p.request(json!({"type": "get_state"}))["sessionFile"]
                .as_str()
                .unwrap(),
        )
    });
    let pi_sent: Vec<Vec<String>> = mock
        .requests()
        .iter()
        .map(|r| tool_names(&r.body))
        .collect();
    // pi-lsp: the first process's second message is `/plan` (a run has configured the
    // session's tools by then, as Pi's are active from its start).
    let runs: [&[&str]; 2] = [
        &["hello", "/plan", "plan it"],
        &["--continue", "/plan", "after"],
    ];
    ours_plan_alike(tmp.path(), &pi, &mock, &settings, &runs, &pi_sent, &pi_file);
}

/// pi-lsp's side of a plan-mode comparison with Pi 1.6.0 in `<tmp>/ours` on `mock`, with
/// `settings` and Pi's package folder named as Pi names it (`PI_PACKAGE_DIR`, for the same
/// `docs` section): each of `runs` is `pi-lsp run --model mock/mock-1 --workspace WS ARGS…`
/// run to its end. Then the tools each request offered equal Pi's (`pi_sent`: Pi's example's
/// sets, normal / planning / normal), and the stored system messages and `plan-mode` entries
/// equal those of Pi's file `pi_file`, whole.
fn ours_plan_alike(
    tmp: &Path,
    pi: &Path,
    mock: &MockModel,
    settings: &Value,
    runs: &[&[&str]],
    pi_sent: &[Vec<String>],
    pi_file: &Path,
) {
    let ws = tmp.join("ours").join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let agent = tmp.join("ours").join("agent");
    let package = pi_e2e::pi16_package(pi).display().to_string();
    let env = agent_env(&agent, &mock.models_json(), &[("PI_PACKAGE_DIR", &package)]);
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
    let run = |args: &[&str]| {
        let out = tokio::task::block_in_place(|| {
            std::process::Command::new(pi_lsp_bin())
                .args(["run", "--model", "mock/mock-1", "--workspace"])
                .arg(&ws)
                .args(args)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .output()
                .unwrap()
        });
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for args in runs {
        run(args);
    }
    let our_sent: Vec<Vec<String>> = mock.requests()[pi_sent.len()..]
        .iter()
        .map(|r| tool_names(&r.body))
        .collect();
    let normal = ["read", "bash", "edit", "write"];
    let planning = ["read", "bash", "grep", "find", "ls"];
    assert_eq!(pi_sent, [&normal[..], &planning[..], &normal[..]]);
    assert_eq!(our_sent, pi_sent);
    let theirs = stored(&json_lines(pi_file));
    assert_eq!(
        theirs,
        [
            json!({"added": normal, "removed": [], "sections": ["cwd", "docs", "preamble", "rules", "tools"]}),
            json!({"enabled": true, "todos": [], "executing": false, "toolsBeforePlanMode": normal}),
            json!({"added": ["grep", "find", "ls"], "removed": ["edit", "write"], "sections": ["rules", "tools"]}),
            json!({"enabled": false, "todos": [], "executing": false}),
            json!({"added": ["edit", "write"], "removed": ["grep", "find", "ls"], "sections": ["rules", "tools"]}),
        ]
    );
    assert_eq!(stored(&session_lines(&ws)), theirs);
}

/// The stored system messages (tools added, removed, sections named) and the `plan-mode`
/// state entries (less pi-lsp's `nextId`) of a session file's lines, in file order.
fn stored(lines: &[Value]) -> Vec<Value> {
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|t| t["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    lines
        .iter()
        .filter_map(|l| {
            if l["message"]["role"] == "system" {
                let m = &l["message"];
                let mut sections: Vec<&String> = m["sections"]
                    .as_object()
                    .map(|o| o.keys().collect())
                    .unwrap_or_default();
                sections.sort();
                Some(
                    json!({"added": names(&m["toolsAdded"]), "removed": names(&m["toolsRemoved"]),
                    "sections": sections}),
                )
            } else if l["customType"] == "plan-mode" {
                let mut data = l["data"].clone();
                data.as_object_mut().unwrap().remove("nextId");
                Some(data)
            } else {
                None
            }
        })
        .collect()
}

/// `/plan` as the first command of a process on a resumed file records the tools active then
/// as `toolsBeforePlanMode`, as Pi 1.6.0's example does (`pi.getActiveTools()`: the resumed
/// session's tools are active from its start): Pi in RPC mode — a prompt; a new process
/// (`--continue`) with `/plan` first, a prompt, `/plan`, a prompt — and `pi-lsp run` the same
/// (a prompt; `--continue /plan "plan it"`; `--continue /plan after`) store the same system
/// messages and `plan-mode` entries and offer the same tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_first_on_a_resumed_file_records_the_active_tools_as_pi_16_does() {
    let Some(pi) = pi_e2e::pi16_bin("plan_first_on_a_resumed_file") else {
        return;
    };
    let tmp = TempDir::new("plan-resumed-pi16");
    let mock = MockModel::start((0..6).map(|_| Step::text("ok")).collect()).await;
    let settings = json!({"defaultTools": ["read", "bash", "edit", "write"],
        "builtinExtensions": {"todo": false}});
    let pi_ws = tmp.path().join("pi").join("ws");
    std::fs::create_dir_all(&pi_ws).unwrap();
    let pi_agent = tmp.path().join("pi").join("agent");
    let _ = agent_env(&pi_agent, &mock.models_json(), &[]);
    std::fs::write(pi_agent.join("settings.json"), settings.to_string()).unwrap();
    let example = pi_e2e::pi16_package(&pi).join("examples/extensions/plan-mode/index.ts");
    let pi_file = tokio::task::block_in_place(|| {
        let e = ["-e".as_ref(), example.as_os_str()];
        let mut first = pi_e2e::pi_rpc::PiRpc::start(&pi, &pi_ws, &pi_agent, &e);
        first.prompt("hello");
        drop(first);
        let mut p = pi_e2e::pi_rpc::PiRpc::start(
            &pi,
            &pi_ws,
            &pi_agent,
            &[e[0], e[1], "--continue".as_ref()],
        );
        p.command("/plan");
        p.prompt("plan it");
        p.command("/plan");
        p.prompt("after");
        PathBuf::from(
            p.request(json!({"type": "get_state"}))["sessionFile"]
                .as_str()
                .unwrap(),
        )
    });
    let pi_sent: Vec<Vec<String>> = mock
        .requests()
        .iter()
        .map(|r| tool_names(&r.body))
        .collect();
    let runs: [&[&str]; 3] = [
        &["hello"],
        &["--continue", "/plan", "plan it"],
        &["--continue", "/plan", "after"],
    ];
    ours_plan_alike(tmp.path(), &pi, &mock, &settings, &runs, &pi_sent, &pi_file);
}

//! End to end, the `agent/*` methods beyond a single prompt: several sessions at once,
//! session files and trees, models and thinking levels, queues and their reports, user shell
//! commands, custom messages, usage, attention, and abort reports — the real `pi-lsp` binary
//! over stdio against the loopback mock model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::time::Duration;

use pi_e2e::lsp_client::{agent_env, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, TempDir};
use serde_json::{json, Value};

/// The mock's models.json plus a reasoning model `mock/mock-think`.
fn models(mock: &MockModel) -> Value {
    let mut m = mock.models_json();
    m["providers"]["mock"]["models"][0]["input"] = json!(["text", "image"]);
    m["providers"]["mock"]["models"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "mock-think", "reasoning": true, "contextWindow": 64000, "maxTokens": 4096}));
    m
}

async fn start(ws: &std::path::Path, mock: &MockModel) -> LspClient {
    let env = agent_env(&ws.join("../agent"), &models(mock), &[]);
    LspClient::start(&pi_lsp_bin(), ws, &env, EditorBehavior::default()).await
}

fn workspace(tmp: &TempDir) -> std::path::PathBuf {
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    ws
}

/// Collects every notification until `agent_end` of `session` (agent/* notifications that
/// follow it in the same burst are drained too).
async fn until_end(c: &mut LspClient, session: &str) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let n = c
            .next_notification(Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("no agent_end; got {out:#?}\n{}", c.stderr.lock().unwrap()));
        let end = n["method"] == "agent/event"
            && n["params"]["sessionId"] == session
            && n["params"]["event"]["type"] == "agent_end";
        out.push(n);
        if end {
            break;
        }
    }
    // The attention notice follows agent_end.
    while let Some(n) = c.next_notification(Duration::from_millis(300)).await {
        out.push(n);
    }
    out
}

fn of<'a>(notes: &'a [Value], method: &str) -> Vec<&'a Value> {
    notes.iter().filter(|n| n["method"] == method).collect()
}

fn texts_of_mock_request(mock: &MockModel, i: usize) -> Vec<(String, String)> {
    mock.requests()[i].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .map(|p| p["text"].as_str().unwrap_or("<image>").to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
                _ => String::new(),
            };
            (m["role"].as_str().unwrap().to_string(), content)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_stream_at_once_without_mixing_events() {
    let tmp = TempDir::new("two");
    let ws = workspace(&tmp);
    let alpha = "alpha ".repeat(30);
    let bravo = "bravo ".repeat(30);
    let mock = MockModel::start_with_delay(
        vec![Step::text(&alpha), Step::text(&bravo)],
        Duration::from_millis(15),
    )
    .await;
    let mut c = start(&ws, &mock).await;
    let a = c
        .request(
            "agent/session/new",
            json!({"model": "mock/mock-1", "name": "left panel"}),
        )
        .await
        .unwrap();
    let b = c
        .request("agent/session/new", json!({"model": "mock/mock-1"}))
        .await
        .unwrap();
    let (sa, sb) = (
        a["sessionId"].as_str().unwrap(),
        b["sessionId"].as_str().unwrap(),
    );
    assert_ne!(sa, sb);
    let ra = c
        .request("agent/prompt", json!({"sessionId": sa, "text": "one"}))
        .await
        .unwrap();
    let rb = c
        .request("agent/prompt", json!({"sessionId": sb, "text": "two"}))
        .await
        .unwrap();
    // Both stream: collect until both runs ended.
    let mut notes = Vec::new();
    let mut ended = 0;
    while ended < 2 {
        let n = c
            .next_notification(Duration::from_secs(20))
            .await
            .expect("events");
        if n["params"]["event"]["type"] == "agent_end" {
            ended += 1;
        }
        notes.push(n);
    }
    let events = of(&notes, "agent/event");
    let deltas = |sid: &str| -> (String, Vec<usize>) {
        let mut text = String::new();
        let mut at = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if e["params"]["sessionId"] == sid
                && e["params"]["event"]["assistantMessageEvent"]["type"] == "text_delta"
            {
                text.push_str(
                    e["params"]["event"]["assistantMessageEvent"]["delta"]
                        .as_str()
                        .unwrap(),
                );
                at.push(i);
            }
        }
        (text, at)
    };
    let (ta, ia) = deltas(sa);
    let (tb, ib) = deltas(sb);
    // Each session's deltas make exactly one of the two answers, never a mix.
    let mut got = [ta.clone(), tb.clone()];
    got.sort();
    assert_eq!(got, [alpha.clone(), bravo.clone()]);
    // Every event names its session and that session's run.
    for e in &events {
        let sid = e["params"]["sessionId"].as_str().unwrap();
        let run = if sid == sa {
            &ra["runId"]
        } else {
            &rb["runId"]
        };
        assert!(sid == sa || sid == sb);
        assert_eq!(&e["params"]["runId"], run);
    }
    // They streamed at the same time: each run's deltas interleave with the other's.
    assert!(
        ia.first() < ib.last() && ib.first() < ia.last(),
        "runs did not overlap: {ia:?} {ib:?}"
    );
    // The final messages match the deltas, per session.
    for (sid, text) in [(sa, &ta), (sb, &tb)] {
        let m = c
            .request("agent/messages", json!({"sessionId": sid}))
            .await
            .unwrap();
        // The stored system message, the prompt, the answer.
        assert_eq!(m["messages"][0]["role"], "system");
        assert_eq!(m["messages"][2]["content"][0]["text"], text.as_str());
        assert_eq!(m["messages"].as_array().unwrap().len(), 3);
    }
    // Each session has its own file and both are listed as open.
    let list = c.request("agent/session/list", json!({})).await.unwrap();
    let mut listed: Vec<(String, bool, Option<String>)> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["sessionId"].as_str().unwrap().to_string(),
                s["open"].as_bool().unwrap(),
                s["name"].as_str().map(str::to_string),
            )
        })
        .collect();
    listed.sort();
    let mut want = vec![
        (sa.to_string(), true, Some("left panel".to_string())),
        (sb.to_string(), true, None),
    ];
    want.sort();
    assert_eq!(listed, want);
    // Usage and attention name their session.
    for sid in [sa, sb] {
        let usage = of(&notes, "agent/usage")
            .into_iter()
            .filter(|n| n["params"]["sessionId"] == sid)
            .count();
        assert_eq!(usage, 1);
    }
    assert!(c.shutdown().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_tree_branch_fork_clone_label_name_stats_export() {
    let tmp = TempDir::new("tree");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("Goal: the second question."),
        Step::text("three"),
    ])
    .await;
    let mut c = start(&ws, &mock).await;
    let st = c
        .request("agent/session/new", json!({"model": "mock/mock-1"}))
        .await
        .unwrap();
    let sid = st["sessionId"].as_str().unwrap().to_string();
    let file = st["sessionFile"].as_str().unwrap().to_string();
    assert!(
        file.starts_with(&ws.join(".pi/sessions").display().to_string()),
        "{file}"
    );
    assert_eq!(
        st,
        json!({"sessionId": sid, "sessionFile": file, "model": {"provider": "mock", "id": "mock-1", "name": "mock-1",
            "api": "openai-completions", "baseUrl": mock.openai_base(), "reasoning": false, "input": ["text", "image"],
            "contextWindow": 128000, "maxTokens": 4096, "cost": {"input": 0.0, "output": 0.0, "cacheRead": 0.0, "cacheWrite": 0.0},
            "thinkingLevels": ["off"]}, "thinkingLevel": "off", "isStreaming": false,
            "steeringMode": "one-at-a-time", "followUpMode": "one-at-a-time", "autoRetryEnabled": true, "isRetrying": false, "autoCompactionEnabled": true, "isCompacting": false,
            "isBashRunning": false, "messageCount": 0, "pendingMessageCount": 0, "leafId": st["leafId"],
            "approvalPolicy": "approve-all"})
    );
    for text in ["first", "second"] {
        c.request("agent/prompt", json!({"sessionId": sid, "text": text}))
            .await
            .unwrap();
        until_end(&mut c, &sid).await;
    }
    let tree = c
        .request("agent/session/tree", json!({"sessionId": sid}))
        .await
        .unwrap();
    let entries = tree["entries"].as_array().unwrap();
    let shape: Vec<(String, Option<String>, Option<String>)> = entries
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["role"].as_str().map(str::to_string),
                e["preview"].as_str().map(str::to_string),
            )
        })
        .collect();
    let s = |x: &str| Some(x.to_string());
    assert_eq!(
        shape,
        vec![
            ("model_change".to_string(), None, None),
            ("thinking_level_change".to_string(), None, None),
            // Pi 1.6's stored system message: the prompt and tools of the first run.
            ("message".to_string(), s("system"), s("")),
            ("message".to_string(), s("user"), s("first")),
            ("message".to_string(), s("assistant"), s("one")),
            ("message".to_string(), s("user"), s("second")),
            ("message".to_string(), s("assistant"), s("two")),
        ]
    );
    let id = |i: usize| entries[i]["id"].as_str().unwrap().to_string();
    assert_eq!(tree["leafId"], id(6).as_str());
    for (i, e) in entries.iter().enumerate().skip(1) {
        assert_eq!(e["parentId"], id(i - 1).as_str());
    }

    // Labels and names.
    let l = c
        .request(
            "agent/session/label",
            json!({"sessionId": sid, "entryId": id(5), "label": "  q2 "}),
        )
        .await
        .unwrap();
    assert_eq!(l["labelEntryId"].as_str().unwrap().len(), 8);
    c.request(
        "agent/session/name",
        json!({"sessionId": sid, "name": "questions"}),
    )
    .await
    .unwrap();
    let tree2 = c
        .request("agent/session/tree", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(tree2["entries"][5]["label"], "q2");
    assert_eq!(
        c.request("agent/state", json!({"sessionId": sid}))
            .await
            .unwrap()["sessionName"],
        "questions"
    );

    // Bad input changes nothing.
    let e = c
        .request(
            "agent/session/label",
            json!({"sessionId": sid, "entryId": "nope", "label": "x"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (
            Some(-31005),
            Some(format!("entryId: no entry nope in session {sid}").as_str())
        )
    );
    let e = c
        .request(
            "agent/session/branch",
            json!({"sessionId": sid, "entryId": "nope"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31005);
    let e = c
        .request(
            "agent/session/name",
            json!({"sessionId": sid, "name": "  "}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (Some(-32602), Some("name: must not be empty"))
    );
    let e = c
        .request(
            "agent/session/branch",
            json!({"sessionId": sid, "entryId": id(3), "sumarize": true}),
        )
        .await
        .unwrap_err();
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("sumarize: unknown field"),
        "{e}"
    );
    let e = c
        .request("agent/state", json!({"sessionId": "missing"}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31002);
    let e = c
        .request("agent/session/open", json!({}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    let after_bad = c
        .request("agent/session/tree", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(after_bad, tree2);

    // Branch back to the first answer, with a summary of what is left behind.
    let br = c
        .request(
            "agent/session/branch",
            json!({"sessionId": sid, "entryId": id(4), "summarize": true, "customInstructions": "Keep names"}),
        )
        .await
        .unwrap();
    let summary = "The user explored a different conversation branch before returning here.\nSummary of that exploration:\n\nGoal: the second question.";
    assert_eq!(
        br,
        json!({"leafId": br["summaryEntryId"], "summaryEntryId": br["summaryEntryId"], "summary": summary, "messageCount": 4})
    );
    let req = texts_of_mock_request(&mock, 2);
    assert!(req[0]
        .1
        .starts_with("You are a context summarization assistant."));
    let asked = req[1].1.as_str();
    assert!(asked.starts_with("<conversation>\n[User]: second\n\n[Assistant]: two\n</conversation>\n\nCreate a structured summary"), "{asked}");
    assert!(asked.ends_with("\n\nAdditional focus: Keep names"));
    // The next prompt continues from there: first, one, the summary, third.
    c.request("agent/prompt", json!({"sessionId": sid, "text": "third"}))
        .await
        .unwrap();
    until_end(&mut c, &sid).await;
    let msgs = texts_of_mock_request(&mock, 3);
    assert_eq!(
        msgs[1..].iter().map(|m| m.1.as_str()).collect::<Vec<_>>()[..2],
        ["first", "one"]
    );
    assert!(msgs[3].1.contains("Goal: the second question."), "{msgs:?}");
    assert_eq!(msgs[4], ("user".to_string(), "third".to_string()));
    let m = c
        .request("agent/messages", json!({"sessionId": sid}))
        .await
        .unwrap();
    let roles: Vec<&str> = m["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "branchSummary",
            "user",
            "assistant"
        ]
    );
    assert_eq!(m["entryIds"][3], br["summaryEntryId"]);

    // Navigating to a user message puts the leaf at its parent and hands back its text.
    let br = c
        .request(
            "agent/session/branch",
            json!({"sessionId": sid, "entryId": id(3)}),
        )
        .await
        .unwrap();
    assert_eq!(
        br,
        json!({"leafId": id(2), "editorText": "first", "messageCount": 1})
    );

    // Fork at the second question: a new session with the path before it.
    let f = c
        .request(
            "agent/session/fork",
            json!({"sessionId": sid, "entryId": id(5)}),
        )
        .await
        .unwrap();
    assert_eq!(f["text"], "second");
    let fid = f["session"]["sessionId"].as_str().unwrap().to_string();
    assert_ne!(fid, sid);
    assert_eq!(f["session"]["parentSession"], file.as_str());
    assert_eq!(f["session"]["leafId"], id(4).as_str());
    let fm = c
        .request("agent/messages", json!({"sessionId": fid}))
        .await
        .unwrap();
    assert_eq!(fm["entryIds"], json!([id(2), id(3), id(4)]));
    // Clone: the active branch as it is (now ending before "first").
    let cl = c
        .request("agent/session/clone", json!({"sessionId": fid}))
        .await
        .unwrap();
    assert_eq!(cl["session"]["leafId"], id(4).as_str());
    assert_eq!(cl["session"]["messageCount"], 3);

    // Stats: Pi's get_session_stats (the model's context: messages, tokens, estimate), plus
    // every response in the fork's file.
    let stats = c
        .request("agent/session/stats", json!({"sessionId": fid}))
        .await
        .unwrap();
    assert_eq!(
        stats,
        json!({"sessionId": fid, "sessionFile": f["session"]["sessionFile"], "userMessages": 1, "assistantMessages": 1,
            "toolCalls": 0, "toolResults": 0, "totalMessages": 3,
            "tokens": {"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0, "total": 110},
            "cost": 0.0,
            "sessionTokens": {"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0, "total": 110},
            "sessionCost": 0.0,
            "contextUsage": {"tokens": 110, "contextWindow": 128000, "percent": 0.0859375}})
    );

    // Export: Markdown as content, HTML to a file.
    let md = c
        .request(
            "agent/session/export",
            json!({"sessionId": fid, "format": "markdown"}),
        )
        .await
        .unwrap();
    let content = md["content"].as_str().unwrap();
    assert!(
        content.contains("## User\n\nfirst\n\n## Assistant (mock-1)\n\none\n\n"),
        "{content}"
    );
    let ex = c
        .request(
            "agent/session/export",
            json!({"sessionId": sid, "format": "html", "outputPath": "out/session.html"}),
        )
        .await
        .unwrap();
    let path = ws.join("out/session.html");
    assert_eq!(
        ex,
        json!({"format": "html", "path": path.display().to_string()})
    );
    let html = std::fs::read_to_string(&path).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<title>questions</title>"));
    let e = c
        .request(
            "agent/session/export",
            json!({"sessionId": sid, "format": "pdf"}),
        )
        .await
        .unwrap_err();
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("format: unknown variant `pdf`"),
        "{e}"
    );

    // Close releases the file; the session opens again from it.
    let closed = c
        .request("agent/session/close", json!({"sessionId": fid}))
        .await
        .unwrap();
    assert_eq!(closed, json!({"closed": true, "dropped": []}));
    assert!(!std::path::Path::new(&format!(
        "{}.lock",
        f["session"]["sessionFile"].as_str().unwrap()
    ))
    .exists());
    let reopened = c
        .request(
            "agent/session/open",
            json!({"path": f["session"]["sessionFile"]}),
        )
        .await
        .unwrap();
    assert_eq!(reopened["sessionId"], fid.as_str());
    assert_eq!(reopened["messageCount"], 3);
    // Opening a session that is open here answers it as it is and keeps its lock.
    let again = c
        .request("agent/session/open", json!({"path": file}))
        .await
        .unwrap();
    assert_eq!(again["sessionId"], sid.as_str());
    assert!(std::path::Path::new(&format!("{file}.lock")).exists());
    mock.assert_paired();
    assert!(c.shutdown().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_thinking_queue_modes_and_retry_switch() {
    let tmp = TempDir::new("models");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::Raw {
        status: 500,
        content_type: "application/json".into(),
        body: "{\"error\":{\"message\":\"upstream exploded\"}}".into(),
    }])
    .await;
    let mut c = start(&ws, &mock).await;
    let list = c.request("agent/model/list", json!({})).await.unwrap();
    let ids: Vec<String> = list["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["provider"].as_str().unwrap(),
                m["id"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        ids,
        [
            "mock/mock-1",
            "mock/mock-think",
            "mockant/mock-ant-1",
            "scripted/demo"
        ]
    );
    assert_eq!(
        list["models"][1]["thinkingLevels"],
        json!(["off", "minimal", "low", "medium", "high"])
    );

    let sid = c
        .request("agent/session/new", json!({"model": "mock/mock-1"}))
        .await
        .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let e = c
        .request(
            "agent/model/set",
            json!({"sessionId": sid, "model": "nobody/none"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31003);
    assert!(e["message"].as_str().unwrap().starts_with("model: "), "{e}");
    let set = c
        .request(
            "agent/model/set",
            json!({"sessionId": sid, "model": "mock/mock-think"}),
        )
        .await
        .unwrap();
    assert_eq!(
        (set["model"]["id"].as_str(), set["thinkingLevel"].as_str()),
        (Some("mock-think"), Some("off"))
    );
    let t = c
        .request(
            "agent/thinking/set",
            json!({"sessionId": sid, "level": "xhigh"}),
        )
        .await
        .unwrap();
    assert_eq!(
        t,
        json!({"level": "high"}),
        "xhigh clamps to the highest supported level"
    );
    let t = c
        .request("agent/thinking/cycle", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(t, json!({"level": "off"}));
    let e = c
        .request(
            "agent/thinking/set",
            json!({"sessionId": sid, "level": "huge"}),
        )
        .await
        .unwrap_err();
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("level: unknown variant `huge`"),
        "{e}"
    );
    let cy = c
        .request("agent/model/cycle", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(cy["model"]["id"], "mock-ant-1");
    let cy = c
        .request(
            "agent/model/cycle",
            json!({"sessionId": sid, "direction": "backward"}),
        )
        .await
        .unwrap();
    assert_eq!(
        (cy["model"]["id"].as_str(), cy["thinkingLevel"].as_str()),
        (Some("mock-think"), Some("off"))
    );
    // A model without reasoning has nothing to cycle.
    c.request(
        "agent/model/set",
        json!({"sessionId": sid, "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    assert_eq!(
        c.request("agent/thinking/cycle", json!({"sessionId": sid}))
            .await
            .unwrap(),
        Value::Null
    );
    // The file records every change, so a resumed session gets them back.
    let lines: Vec<Value> = std::fs::read_to_string(
        c.request("agent/state", json!({"sessionId": sid}))
            .await
            .unwrap()["sessionFile"]
            .as_str()
            .unwrap(),
    )
    .unwrap()
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    let changes: Vec<String> = lines[1..]
        .iter()
        .map(|l| match l["type"].as_str().unwrap() {
            "model_change" => format!("model {}", l["modelId"].as_str().unwrap()),
            t => format!("{t} {}", l["thinkingLevel"].as_str().unwrap_or("")),
        })
        .collect();
    assert_eq!(
        changes,
        [
            "model mock-1",
            "thinking_level_change off",
            "model mock-think",
            "thinking_level_change high",
            "thinking_level_change off",
            "model mock-ant-1",
            "model mock-think",
            "model mock-1"
        ]
    );

    let m = c
        .request(
            "agent/queue/setModes",
            json!({"sessionId": sid, "steering": "all"}),
        )
        .await
        .unwrap();
    assert_eq!(m, json!({"steering": "all", "followUp": "one-at-a-time"}));
    let e = c
        .request(
            "agent/queue/setModes",
            json!({"sessionId": sid, "followUp": "some"}),
        )
        .await
        .unwrap_err();
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("followUp: unknown variant `some`"),
        "{e}"
    );

    // Retry off: a 500 ends the run at once, and the user is told it failed.
    assert_eq!(
        c.request(
            "agent/retry/set",
            json!({"sessionId": sid, "enabled": false})
        )
        .await
        .unwrap(),
        json!({"enabled": false})
    );
    assert_eq!(
        c.request("agent/retry/abort", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"cancelled": false})
    );
    let st = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(
        (
            st["autoRetryEnabled"].as_bool(),
            st["steeringMode"].as_str()
        ),
        (Some(false), Some("all"))
    );
    c.request("agent/prompt", json!({"sessionId": sid, "text": "go"}))
        .await
        .unwrap();
    let notes = until_end(&mut c, &sid).await;
    assert!(!of(&notes, "agent/event")
        .iter()
        .any(|n| n["params"]["event"]["type"] == "auto_retry_start"));
    assert_eq!(mock.requests().len(), 1);
    let att = of(&notes, "agent/attention");
    assert_eq!(att.len(), 1);
    assert_eq!(att[0]["params"]["reason"], "failed");
    assert!(
        att[0]["params"]["message"]
            .as_str()
            .unwrap()
            .contains("upstream exploded"),
        "{}",
        att[0]
    );
    assert!(c.shutdown().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_messages_report_queued_delivered_consumed_and_dropped() {
    let tmp = TempDir::new("queue");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![
        Step::call("call_1", "bash", json!({"command": "sleep 0.6"})),
        Step::text("steered"),
        Step::text("followed"),
        Step::text("noted"),
        Step::call("call_2", "bash", json!({"command": "sleep 0.6"})),
        Step::text("done"),
    ])
    .await;
    let mut c = start(&ws, &mock).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "look", "model": "mock/mock-1", "images": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    // Wait for the tool to run, then queue three messages.
    loop {
        let n = c.next_notification(Duration::from_secs(10)).await.unwrap();
        if n["params"]["event"]["type"] == "tool_execution_start" {
            break;
        }
    }
    let s1 = c
        .request("agent/steer", json!({"sessionId": sid, "text": "S1"}))
        .await
        .unwrap();
    assert_eq!(s1["runId"], r["runId"]);
    let f1 = c
        .request("agent/followUp", json!({"sessionId": sid, "text": "F1"}))
        .await
        .unwrap();
    let n1 = c
        .request(
            "agent/sendMessage",
            json!({"sessionId": sid, "customType": "note", "content": "N1", "details": {"k": 1}, "deliverAs": "followUp"}),
        )
        .await
        .unwrap();
    let st = c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(
        (
            st["isStreaming"].as_bool(),
            st["pendingMessageCount"].as_u64()
        ),
        (Some(true), Some(3))
    );
    let notes = until_end(&mut c, &sid).await;
    let updates: Vec<(String, String, Vec<String>, Vec<String>)> = of(&notes, "agent/queueUpdate")
        .iter()
        .map(|n| {
            let p = &n["params"];
            let list = |k: &str| {
                p[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect()
            };
            (
                p["text"].as_str().unwrap().to_string(),
                p["state"].as_str().unwrap().to_string(),
                list("steering"),
                list("followUp"),
            )
        })
        .collect();
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        updates,
        vec![
            ("S1".into(), "queued".into(), v(&["S1"]), v(&[])),
            ("F1".into(), "queued".into(), v(&["S1"]), v(&["F1"])),
            ("N1".into(), "queued".into(), v(&["S1"]), v(&["F1", "N1"])),
            ("S1".into(), "delivered".into(), v(&[]), v(&["F1", "N1"])),
            ("S1".into(), "consumed".into(), v(&[]), v(&["F1", "N1"])),
            ("F1".into(), "delivered".into(), v(&[]), v(&["N1"])),
            ("F1".into(), "consumed".into(), v(&[]), v(&["N1"])),
            ("N1".into(), "delivered".into(), v(&[]), v(&[])),
            ("N1".into(), "consumed".into(), v(&[]), v(&[])),
        ]
    );
    let queued: Vec<Value> = c
        .log()
        .iter()
        .filter(|m| m["method"] == "agent/queueUpdate" && m["params"]["state"] == "queued")
        .map(|m| m["params"]["queueId"].clone())
        .collect();
    assert_eq!(
        queued,
        [
            s1["queueId"].clone(),
            f1["queueId"].clone(),
            n1["queueId"].clone()
        ]
    );
    // The model saw the image, then each message in turn.
    let first = texts_of_mock_request(&mock, 0);
    assert_eq!(first[1], ("user".to_string(), "look|<image>".to_string()));
    assert_eq!(texts_of_mock_request(&mock, 3).last().unwrap().1, "N1");
    // The custom message is stored as a custom_message entry.
    let m = c
        .request("agent/messages", json!({"sessionId": sid}))
        .await
        .unwrap();
    let last_custom = m["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "custom")
        .unwrap()
        .clone();
    assert_eq!(
        (
            last_custom["customType"].clone(),
            last_custom["content"].clone(),
            last_custom["details"].clone()
        ),
        (json!("note"), json!("N1"), json!({"k": 1}))
    );
    // Usage per turn and per session: four responses of 110 tokens.
    // (The first came while the test waited for the tool to start: read the whole log.)
    let log = c.log();
    let usage = of(&log, "agent/usage");
    assert_eq!(usage.len(), 4);
    assert_eq!(
        usage[3]["params"],
        json!({"sessionId": sid, "runId": r["runId"], "turn": {"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 110, "cost": 0.0},
            "session": {"input": 400, "output": 40, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 440, "cost": 0.0},
            "contextTokens": 110, "contextWindow": 128000})
    );
    let att = of(&notes, "agent/attention");
    assert_eq!(
        att[0]["params"],
        json!({"sessionId": sid, "runId": r["runId"], "reason": "finished", "message": "noted"})
    );

    // Dropped: a follow-up cleared before delivery never reaches the model.
    c.request("agent/prompt", json!({"sessionId": sid, "text": "again"}))
        .await
        .unwrap();
    loop {
        let n = c.next_notification(Duration::from_secs(10)).await.unwrap();
        if n["params"]["event"]["type"] == "tool_execution_start" {
            break;
        }
    }
    let q = c
        .request("agent/followUp", json!({"sessionId": sid, "text": "never"}))
        .await
        .unwrap();
    let cleared = c
        .request("agent/queue/clear", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(
        cleared,
        json!({"dropped": [{"queueId": q["queueId"], "delivery": "followUp", "text": "never"}],
               "steering": [], "followUp": ["never"]})
    );
    until_end(&mut c, &sid).await;
    let states: Vec<Value> = c
        .log()
        .into_iter()
        .filter(|m| m["method"] == "agent/queueUpdate" && m["params"]["queueId"] == q["queueId"])
        .map(|m| m["params"]["state"].clone())
        .collect();
    assert_eq!(states, [json!("queued"), json!("dropped")]);
    assert!(mock
        .requests()
        .iter()
        .all(|r| !r.body.to_string().contains("never")));
    // Bad input.
    let e = c
        .request("agent/prompt", json!({"sessionId": sid, "text": "x", "images": [{"type": "image", "data": "AAAA", "mimeType": "text/plain"}]}))
        .await
        .unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (
            Some(-32602),
            Some("images[0].mimeType: expected an image/* type, got \"text/plain\"")
        )
    );
    let e = c
        .request(
            "agent/sendMessage",
            json!({"sessionId": sid, "customType": "", "content": "x"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e["message"], "customType: must not be empty");
    let e = c
        .request("agent/steer", json!({"sessionId": sid}))
        .await
        .unwrap_err();
    assert_eq!(e["message"], "missing field `text`");
    mock.assert_paired();
    assert!(c.shutdown().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_bash_enters_the_context_and_double_bang_stays_out() {
    let tmp = TempDir::new("bash");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![Step::text("seen")]).await;
    let mut c = start(&ws, &mock).await;
    let sid = c
        .request("agent/session/new", json!({"model": "mock/mock-1"}))
        .await
        .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let b = c
        .request(
            "agent/bash",
            json!({"sessionId": sid, "command": "echo hello"}),
        )
        .await
        .unwrap();
    assert_eq!(
        b,
        json!({"output": "hello\n", "exitCode": 0, "cancelled": false, "truncated": false, "entryId": b["entryId"]})
    );
    let hidden = c
        .request(
            "agent/bash",
            json!({"sessionId": sid, "command": "echo secret; exit 3", "excludeFromContext": true}),
        )
        .await
        .unwrap();
    assert_eq!(
        (hidden["output"].as_str(), hidden["exitCode"].as_i64()),
        (Some("secret\n"), Some(3))
    );
    // A second command while one runs is refused; abort stops the running one.
    let long = c
        .send_request(
            "agent/bash",
            json!({"sessionId": sid, "command": "sleep 20"}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = c
        .request("agent/bash", json!({"sessionId": sid, "command": "true"}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31006);
    assert_eq!(
        c.request("agent/bash/abort", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"aborted": true})
    );
    let long = tokio::time::timeout(Duration::from_secs(3), long)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            long["result"]["cancelled"].as_bool(),
            long["result"]["exitCode"].clone()
        ),
        (Some(true), Value::Null)
    );
    assert_eq!(
        c.request("agent/bash/abort", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"aborted": false})
    );
    // Custom messages on an idle session: appended at once, or kept for the next prompt.
    let now = c
        .request(
            "agent/sendMessage",
            json!({"sessionId": sid, "customType": "ctx", "content": [{"type": "text", "text": "context note"}]}),
        )
        .await
        .unwrap();
    assert_eq!(now, json!({"sessionId": sid, "entryId": now["entryId"]}));
    let later = c
        .request(
            "agent/sendMessage",
            json!({"sessionId": sid, "customType": "ctx", "content": "next-turn note", "deliverAs": "nextTurn", "display": false}),
        )
        .await
        .unwrap();
    assert_eq!(
        later,
        json!({"sessionId": sid, "queueId": later["queueId"]})
    );
    c.request(
        "agent/prompt",
        json!({"sessionId": sid, "text": "what did I run?"}),
    )
    .await
    .unwrap();
    let notes = until_end(&mut c, &sid).await;
    let msgs = texts_of_mock_request(&mock, 0);
    assert_eq!(
        msgs[1..],
        [
            (
                "user".to_string(),
                "Ran `echo hello`\n```\nhello\n\n```".to_string()
            ),
            (
                "user".to_string(),
                "Ran `sleep 20`\n(no output)\n\n(command cancelled)".to_string()
            ),
            ("user".to_string(), "context note".to_string()),
            ("user".to_string(), "next-turn note".to_string()),
            ("user".to_string(), "what did I run?".to_string()),
        ]
    );
    let states: Vec<&Value> = of(&notes, "agent/queueUpdate")
        .iter()
        .map(|n| &n["params"]["state"])
        .collect();
    assert_eq!(
        states,
        [&json!("queued"), &json!("delivered"), &json!("consumed")]
    );
    let entries = c
        .request("agent/session/tree", json!({"sessionId": sid}))
        .await
        .unwrap()["entries"]
        .clone();
    let customs = entries
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "custom_message")
        .count();
    assert_eq!(customs, 2, "{entries:#}");
    let m = c
        .request("agent/messages", json!({"sessionId": sid}))
        .await
        .unwrap();
    let bash: Vec<(String, bool)> = m["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "bashExecution")
        .map(|m| {
            (
                m["command"].as_str().unwrap().to_string(),
                m["excludeFromContext"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        bash,
        [
            ("echo hello".to_string(), false),
            ("echo secret; exit 3".to_string(), true),
            ("sleep 20".to_string(), false)
        ]
    );
    let e = c
        .request("agent/bash", json!({"sessionId": sid, "command": " "}))
        .await
        .unwrap_err();
    assert_eq!(e["message"], "command: must not be empty");
    assert!(c.shutdown().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_reports_applied_edits_and_a_busy_session_refuses_branching() {
    let tmp = TempDir::new("abortedits");
    let ws = workspace(&tmp);
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    let mock = MockModel::start(vec![
        Step::call(
            "call_edit",
            "edit",
            json!({"path": "a.txt", "edits": [{"oldText": "one", "newText": "two"}]}),
        ),
        Step::call("call_sleep", "bash", json!({"command": "sleep 30"})),
    ])
    .await;
    let mut c = start(&ws, &mock).await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "change it", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    loop {
        let n = c.next_notification(Duration::from_secs(10)).await.unwrap();
        if n["params"]["event"]["type"] == "tool_execution_start"
            && n["params"]["event"]["toolName"] == "bash"
        {
            break;
        }
    }
    let tree = c
        .request("agent/session/tree", json!({"sessionId": sid}))
        .await
        .unwrap();
    let e = c
        .request(
            "agent/session/branch",
            json!({"sessionId": sid, "entryId": tree["entries"][0]["id"]}),
        )
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31001);
    let e = c
        .request("agent/prompt", json!({"sessionId": sid, "text": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e["code"], -31001);
    let abort = c
        .request("agent/abort", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(
        abort,
        json!({"aborted": true, "runId": r["runId"],
            "stoppedToolCalls": [{"toolCallId": "call_sleep", "toolName": "bash", "args": {"command": "sleep 30"}}],
            "stoppedProcesses": [{"toolCallId": "call_sleep", "command": "sleep 30"}],
            "appliedEdits": [{"toolCallId": "call_edit", "toolName": "edit", "path": "a.txt"}],
            "queuedMessages": []})
    );
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "two\n");
    // The run already ended when abort answered; no attention for a user abort.
    let notes = until_end(&mut c, &sid).await;
    assert!(of(&notes, "agent/attention").is_empty());
    assert!(!c
        .request("agent/state", json!({"sessionId": sid}))
        .await
        .unwrap()["isStreaming"]
        .as_bool()
        .unwrap());
    mock.assert_paired();
    assert!(c.shutdown().await.success());
}

/// Pi's own sessions of the workspace (`<agent dir>/sessions/--<cwd>--/`) are listed beside
/// the workspace's and open by id.
#[tokio::test]
async fn pi_sessions_of_the_workspace_are_listed_and_open() {
    let tmp = TempDir::new("pi-dir");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![]).await;
    let agent = tmp.path().join("agent");
    let pi_dir = pi_core::session::pi_sessions_dir(&agent, &ws.canonicalize().unwrap());
    std::fs::create_dir_all(&pi_dir).unwrap();
    let name = "2026-11-30T16-52-40-958Z_01a22d5f-777e-775c-acc2-80c8f113e09a.jsonl";
    // Pi wrote it in this workspace: its header names it as the cwd.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/sessions/pi-0.73.1-tools.jsonl"
    ))
    .unwrap()
    .replacen(
        "/tmp/pi-study/ws2",
        &ws.canonicalize().unwrap().display().to_string(),
        1,
    );
    std::fs::write(pi_dir.join(name), text).unwrap();
    let mut c = start(&ws, &mock).await;
    let list = c.request("agent/session/list", json!({})).await.unwrap();
    let found: Vec<&Value> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["sessionId"] == "01a22d5f-777e-775c-acc2-80c8f113e09a")
        .collect();
    assert_eq!(found.len(), 1, "{list}");
    assert_eq!(
        std::path::Path::new(found[0]["sessionFile"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        pi_dir.join(name).canonicalize().unwrap()
    );
    let st = c
        .request(
            "agent/session/open",
            json!({"sessionId": "01a22d5f-777e-775c-acc2-80c8f113e09a"}),
        )
        .await
        .unwrap();
    assert!(st["messageCount"].as_u64().unwrap() > 0, "{st}");
    assert!(c.shutdown().await.success());
}

/// SESS-01 through the server: a session file with a torn last line opens, the line is set
/// aside in a `.corrupt` sidecar, and the user is told with `window/showMessage`.
#[tokio::test]
async fn a_repaired_session_file_is_reported_to_the_user() {
    let tmp = TempDir::new("torn");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![]).await;
    let dir = ws.join(".pi/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("2026-11-30T10-00-00-000Z_s1.jsonl");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fixtures/cases/SESS-01-torn-tail.jsonl"
        ),
        &file,
    )
    .unwrap();
    let mut c = start(&ws, &mock).await;
    let st = c
        .request(
            "agent/session/open",
            json!({"path": file.display().to_string()}),
        )
        .await
        .unwrap();
    assert_eq!(st["messageCount"], 1, "{st}");
    let mut shown = None;
    for _ in 0..50 {
        shown = c
            .log()
            .into_iter()
            .find(|m| m["method"] == "window/showMessage");
        if shown.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shown = shown.expect("a window/showMessage");
    assert_eq!(shown["params"]["type"], 2);
    let text = shown["params"]["message"].as_str().unwrap();
    assert!(
        text.contains("was repaired while opening")
            && text.contains("cut an unterminated last line"),
        "{text}"
    );
    assert!(dir
        .join("2026-11-30T10-00-00-000Z_s1.jsonl.corrupt")
        .exists());
    assert!(c.shutdown().await.success());
}

/// Two session files with one session id (a copy made by hand): opening the second by path while
/// the first is open is refused with both paths named, and never answers with (or writes into)
/// the first; opening the same file again returns the session already open.
#[tokio::test]
async fn a_second_file_with_an_open_sessions_id_is_refused_not_swapped() {
    let tmp = TempDir::new("same-id");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![]).await;
    let dir = ws.join(".pi/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/sessions/pi-0.73.1-tools.jsonl"
    );
    let first = dir.join("first.jsonl");
    let copy = dir.join("copy.jsonl");
    std::fs::copy(src, &first).unwrap();
    std::fs::copy(src, &copy).unwrap();
    let copy_bytes = std::fs::read(&copy).unwrap();
    let mut c = start(&ws, &mock).await;
    let st = c
        .request(
            "agent/session/open",
            json!({"path": first.display().to_string()}),
        )
        .await
        .unwrap();
    let id = st["sessionId"].as_str().unwrap().to_string();
    assert_eq!(
        std::path::Path::new(st["sessionFile"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        first.canonicalize().unwrap()
    );
    let err = c
        .request(
            "agent/session/open",
            json!({"path": copy.display().to_string()}),
        )
        .await
        .unwrap_err();
    assert_eq!(err["code"], -31004, "{err}");
    assert_eq!(
        err["message"],
        format!(
            "session file {} has the id {id} of the session open from {}; close that session first (a copied session file keeps its id)",
            copy.display(),
            first.display()
        ),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        copy_bytes,
        "the copy is untouched"
    );
    let again = c
        .request(
            "agent/session/open",
            json!({"path": first.display().to_string()}),
        )
        .await
        .unwrap();
    assert_eq!(again["sessionId"], id.as_str());
    assert!(c.shutdown().await.success());
}

/// `sessionDir` in (trusted) project settings moves the session files; untrusted, it is ignored.
#[tokio::test]
async fn session_dir_setting_moves_session_files_in_a_trusted_workspace() {
    let tmp = TempDir::new("session-dir");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![]).await;
    std::fs::create_dir_all(ws.join(".pi")).unwrap();
    std::fs::write(
        ws.join(".pi/settings.json"),
        json!({"sessionDir": "kept-sessions"}).to_string(),
    )
    .unwrap();
    for (trusted, expected) in [(true, "kept-sessions"), (false, ".pi/sessions")] {
        let env = agent_env(&ws.join("../agent"), &models(&mock), &[]);
        let behavior = EditorBehavior {
            initialization_options: Some(json!({"workspaceTrusted": trusted})),
            ..Default::default()
        };
        let mut c = LspClient::start(&pi_lsp_bin(), &ws, &env, behavior).await;
        let st = c
            .request("agent/session/new", json!({"model": "mock/mock-1"}))
            .await
            .unwrap();
        let file = std::path::PathBuf::from(st["sessionFile"].as_str().unwrap());
        assert_eq!(
            file.parent().unwrap().canonicalize().unwrap(),
            ws.join(expected).canonicalize().unwrap(),
            "trusted: {trusted}"
        );
        assert!(c.shutdown().await.success());
    }
}

/// The user's own shell commands (`agent/bash`) run outside the agent's sandbox: they may write
/// next to the workspace, where the agent's `bash` tool may not.
#[tokio::test]
async fn user_bash_runs_outside_the_agents_sandbox() {
    let tmp = TempDir::new("user-bash");
    let ws = workspace(&tmp);
    let mock = MockModel::start(vec![]).await;
    let mut c = start(&ws, &mock).await;
    let st = c
        .request("agent/session/new", json!({"model": "mock/mock-1"}))
        .await
        .unwrap();
    let sid = st["sessionId"].as_str().unwrap();
    let r = c
        .request(
            "agent/bash",
            json!({"sessionId": sid, "command": "touch ../made-by-the-user && echo done"}),
        )
        .await
        .unwrap();
    assert_eq!(r["exitCode"], 0, "{r}");
    assert_eq!(r["output"].as_str().unwrap().trim(), "done");
    assert!(tmp.path().join("made-by-the-user").exists());
    assert!(c.shutdown().await.success());
}

/// The `text_delta`s of `notes` (agent/event notifications of one run), in order.
fn text_deltas(notes: &[Value]) -> Vec<String> {
    of(notes, "agent/event")
        .into_iter()
        .filter(|n| n["params"]["event"]["assistantMessageEvent"]["type"] == "text_delta")
        .map(|n| {
            n["params"]["event"]["assistantMessageEvent"]["delta"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Deltas that arrive within one frame go out as one `message_update` whose delta is theirs
/// joined (the wire shape unchanged, nothing reordered: every delta before its block's
/// `text_end` and the `message_end`); `coalesceDeltasMs: 0` sends each as it came (the deltas
/// of one read from the model joined); a bad value fails `initialize` naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_within_a_frame_go_out_as_one_event_unless_the_client_opts_out() {
    let tmp = TempDir::new("coalesce");
    let ws = workspace(&tmp);
    let answer: String = (0..120).map(|i| format!("w{:03} ", i)).collect(); // 600 chars
    let chunks: Vec<String> = answer
        .chars()
        .collect::<Vec<_>>()
        .chunks(5)
        .map(|c| c.iter().collect())
        .collect();
    // The model's 120 chunks come 2 ms apart (≈ 240 ms). Coalesced with 100 ms frames, they
    // span a few frames even when a loaded machine stretches the stream fivefold (with the
    // default 16 ms frames the count hangs on the machine's load).
    let mock = MockModel::start(vec![Step::text(&answer), Step::text(&answer)]).await;
    let env = agent_env(&ws.join("../agent"), &models(&mock), &[]);
    for (options, coalesced) in [
        (Some(json!({"coalesceDeltasMs": 100})), true),
        (Some(json!({"coalesceDeltasMs": 0})), false),
    ] {
        let mut c = LspClient::start(
            &pi_lsp_bin(),
            &ws,
            &env,
            EditorBehavior {
                initialization_options: options,
                ..Default::default()
            },
        )
        .await;
        let r = c
            .request(
                "agent/prompt",
                json!({"text": "hi", "model": "mock/mock-1"}),
            )
            .await
            .unwrap();
        let sid = r["sessionId"].as_str().unwrap().to_string();
        let notes = until_end(&mut c, &sid).await;
        let deltas = text_deltas(&notes);
        assert_eq!(deltas.concat(), answer);
        if coalesced {
            // 120 chunks in ≈ 240 ms: a few events at most.
            assert!(deltas.len() * 4 <= chunks.len(), "{} events", deltas.len());
        } else {
            // Each as it came: the model's chunks (2 ms apart) one by one, or the ones a read
            // brought together joined; never a chunk cut or held for a later read.
            let mut ends: Vec<usize> = Vec::new();
            for d in &deltas {
                ends.push(ends.last().copied().unwrap_or(0) + d.len());
            }
            let mut chunk_ends = std::collections::HashSet::new();
            let mut at = 0;
            for ch in &chunks {
                at += ch.len();
                chunk_ends.insert(at);
            }
            assert!(ends.iter().all(|e| chunk_ends.contains(e)), "{deltas:?}");
            assert!(deltas.len() > 1, "{deltas:?}");
        }
        // No delta after the block's end or the message's end.
        let types: Vec<String> = of(&notes, "agent/event")
            .into_iter()
            .map(|n| {
                let e = &n["params"]["event"];
                match e["assistantMessageEvent"]["type"].as_str() {
                    Some(t) => t.to_string(),
                    None => e["type"].as_str().unwrap().to_string(),
                }
            })
            .collect();
        let last_delta = types.iter().rposition(|t| t == "text_delta").unwrap();
        let text_end = types.iter().position(|t| t == "text_end").unwrap();
        assert!(last_delta < text_end, "{types:?}");
        assert!(c.shutdown().await.success());
    }
    let Err((e, _c)) = LspClient::try_start(
        &pi_lsp_bin(),
        &ws,
        &env,
        EditorBehavior {
            initialization_options: Some(json!({"coalesceDeltasMs": "16"})),
            ..Default::default()
        },
    )
    .await
    else {
        panic!("initialize accepted a string");
    };
    assert_eq!(
        e,
        json!({"code": -32602, "message": "initializationOptions.coalesceDeltasMs: expected an integer from 0 to 1000 (milliseconds), got \"16\""})
    );
}

/// The delta window is a leading-edge throttle: with a window of a whole second, the first
/// text of an answer still reaches the client at once (not when the window ends), and what
/// streams within the window after it comes joined when the window ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_delta_after_a_quiet_window_goes_out_at_once() {
    let tmp = TempDir::new("leading-edge");
    let ws = workspace(&tmp);
    // "hello " at once, then the connection stays open: a trailing-edge window would hold
    // the first text for the whole second.
    let mock = MockModel::start(vec![Step::Hang("hello ".into())]).await;
    let env = agent_env(&ws.join("../agent"), &models(&mock), &[]);
    let mut c = LspClient::start(
        &pi_lsp_bin(),
        &ws,
        &env,
        EditorBehavior {
            initialization_options: Some(json!({"coalesceDeltasMs": 1000})),
            ..Default::default()
        },
    )
    .await;
    let r = c
        .request(
            "agent/prompt",
            json!({"text": "hi", "model": "mock/mock-1"}),
        )
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let mut started = None;
    let first_text = loop {
        let n = c
            .next_notification(Duration::from_secs(30))
            .await
            .expect("the answer's first text");
        if n["method"] != "agent/event" {
            continue;
        }
        let e = &n["params"]["event"];
        if e["type"] == "message_start" && e["message"]["role"] == "assistant" {
            started = Some(std::time::Instant::now());
        }
        if e["assistantMessageEvent"]["type"] == "text_delta" {
            break (
                started.expect("message_start first").elapsed(),
                e["assistantMessageEvent"]["delta"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    };
    // The first delta is the text's start (the mock may cut it anywhere).
    assert!(
        !first_text.1.is_empty() && "hello ".starts_with(&first_text.1),
        "{:?}",
        first_text.1
    );
    assert!(
        first_text.0 < Duration::from_millis(600),
        "the first text came {:?} after message_start, with a 1000 ms window",
        first_text.0
    );
    c.request("agent/abort", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert!(c.shutdown().await.success());
}

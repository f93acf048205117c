//! End to end, extensions in the editor server: the built-in tmux extension enabled by a
//! trusted project's settings, driven by the model over HTTP and by the user's `/tmux`
//! command over stdio; the extension UI round trip (`agent/ui/request`, and the
//! `window/showMessageRequest` fallback); `agent/extension/commands`; `extension_error`
//! events; the shared pane reaching the model as a `custom_message`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pi_e2e::lsp_client::{agent_env, start_with_mock, tool_result_text, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, session_lines, TempDir};
use serde_json::{json, Value};

/// Kills the private tmux server (and removes its socket file) when the test ends.
struct TmuxServer(String);

impl Drop for TmuxServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .output();
        #[cfg(unix)]
        let uid = {
            use std::os::unix::fs::MetadataExt as _;
            std::fs::metadata("/proc/self")
                .map(|m| m.uid())
                .unwrap_or(0)
        };
        #[cfg(not(unix))]
        let uid = 0;
        let dir = std::env::var_os("TMUX_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let _ = std::fs::remove_file(dir.join(format!("tmux-{uid}")).join(&self.0));
    }
}

fn tmux(socket: &str, args: &[&str]) -> String {
    let o = std::process::Command::new("tmux")
        .arg("-L")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// False (after saying so) when tmux is missing; under `CI=true` a missing tmux fails.
fn tmux_available() -> bool {
    let found = std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    pi_e2e::require(found, "tmux extension tests", "tmux")
}

/// A workspace whose project settings enable tmux on `socket`.
fn workspace(tmp: &TempDir, socket: &str) -> PathBuf {
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join(".pi")).unwrap();
    std::fs::write(
        ws.join(".pi/settings.json"),
        json!({"builtinExtensions": {"tmux": {"socket": socket}}}).to_string(),
    )
    .unwrap();
    ws
}

fn socket_name() -> String {
    format!(
        "pi-e2e-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn trusted(ui_answer: Option<Value>, message_action: Option<&str>) -> EditorBehavior {
    EditorBehavior {
        initialization_options: Some(json!({"workspaceTrusted": true})),
        ui_answer,
        message_action: message_action.map(str::to_string),
        ..Default::default()
    }
}

/// Waits until the pane of `session` shows `text`.
async fn wait_for_pane(socket: &str, session: &str, text: &str) {
    let t0 = Instant::now();
    loop {
        let out = tmux(
            socket,
            &["capture-pane", "-p", "-t", &format!("={session}:")],
        );
        if out.contains(text) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "pane never showed {text:?}: {out:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The server → client messages of `method` so far (requests and notifications).
fn sent(c: &LspClient, method: &str) -> Vec<Value> {
    c.log()
        .into_iter()
        .filter(|m| m["method"] == method)
        .map(|m| m["params"].clone())
        .collect()
}

/// [`sent`] once it holds `n` messages of `method` (notifications and responses travel on
/// separate channels inside the server, so a notification may trail the response).
async fn sent_n(c: &LspClient, method: &str, n: usize) -> Vec<Value> {
    let t0 = Instant::now();
    loop {
        let v = sent(c, method);
        if v.len() >= n || t0.elapsed() > Duration::from_secs(5) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts `web` through the model and returns the session id.
async fn start_web(c: &mut LspClient) -> String {
    let r = c
        .request("agent/prompt", json!({"text": "start the web server"}))
        .await
        .unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    r["sessionId"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn tmux_extension_over_stdio_with_ui_round_trip_and_commands() {
    if !tmux_available() {
        return;
    }
    let tmp = TempDir::new("ext-tmux");
    let socket = socket_name();
    let _server = TmuxServer(socket.clone());
    let ws = workspace(&tmp, &socket);
    let session = format!("{}web", pi_core::extension::tmux::session_prefix(&ws));
    let attach = format!("tmux -L {socket} attach -t {session}");
    let mock = MockModel::start(vec![
        Step::call(
            "call_1",
            "tmux_start",
            json!({"name": "web", "command": "sh -c 'echo ready; sleep 30'"}),
        ),
        Step::text("Started."),
        Step::text("It printed ready."),
    ])
    .await;
    let mut c = start_with_mock(&ws, &mock, trusted(Some(json!({"value": "web"})), None)).await;

    // The model starts a background process; the human can attach to the same session.
    let sid = start_web(&mut c).await;
    let tools: Vec<String> = mock.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        tools.ends_with(&[
            "tmux_start".into(),
            "tmux_capture".into(),
            "tmux_list".into(),
            "tmux_kill".into(),
            "todo".into()
        ]),
        "{tools:?}"
    );
    let system = mock.requests()[0].body["messages"][0]["content"].to_string();
    assert!(
        system.contains("- tmux_start: Start a long-running command in a background tmux session"),
        "{system}"
    );
    let events: Vec<Value> = c
        .log()
        .into_iter()
        .filter(|m| m["method"] == "agent/event")
        .map(|m| m["params"].clone())
        .collect();
    assert_eq!(
        tool_result_text(&events, "tmux_start"),
        (
            format!("Started `sh -c 'echo ready; sleep 30'` in tmux session web (tmux name {session}), in {}.\nRead its output with tmux_capture. The user can watch or type in the same pane with: {attach}", ws.display()),
            false
        )
    );
    assert_eq!(
        tmux(&socket, &["ls", "-F", "#{session_name}"]).trim(),
        session
    );
    wait_for_pane(&socket, &session, "ready").await;

    // The command is listed.
    assert_eq!(
        c.request("agent/extension/commands", json!({"sessionId": sid}))
            .await
            .unwrap(),
        json!({"commands": [{"name": "tmux",
            "description": "Background tmux sessions: /tmux [list | kill [NAME] | share [NAME]]",
            "source": "extension", "path": "<builtin:tmux>"},
            {"name": "todos", "description": "Show all todos on the current branch", "source": "extension", "path": "<builtin:todo>"},
            {"name": "plan", "description": "Toggle plan mode (read-only exploration)", "source": "extension", "path": "<builtin:plan-mode>"}]})
    );

    // `/tmux share` asks which session (the client answers "web"), then sends the pane to the
    // model with the next prompt; no run starts.
    let r = c
        .request(
            "agent/prompt",
            json!({"sessionId": sid, "text": "/tmux share"}),
        )
        .await
        .unwrap();
    assert_eq!(
        r,
        json!({"sessionId": sid, "runId": "", "queued": false, "command": "tmux", "disposition": "handled"})
    );
    assert_eq!(
        sent(&c, "agent/ui/request"),
        vec![
            json!({"sessionId": sid, "extension": "tmux", "method": "select",
            "title": "Share which tmux session with the model?", "options": ["web"]})
        ]
    );
    assert_eq!(
        sent(&c, "agent/attention")
            .into_iter()
            .filter(|a| a["reason"] == "question")
            .collect::<Vec<_>>(),
        vec![json!({"sessionId": sid, "reason": "question",
            "message": "tmux: Share which tmux session with the model?"})],
        "the question is announced"
    );
    assert_eq!(
        sent_n(&c, "agent/ui/notification", 1).await,
        vec![
            json!({"sessionId": sid, "extension": "tmux", "method": "notify",
            "message": "The output of tmux session web goes to the model with your next prompt.",
            "notifyType": "info"})
        ]
    );
    assert_eq!(mock.requests().len(), 2, "a command is not a prompt");
    c.request(
        "agent/prompt",
        json!({"sessionId": sid, "text": "What did it print?"}),
    )
    .await
    .unwrap();
    c.run_until_end(Duration::from_secs(30)).await;
    let shared = "The user shared the output of tmux session web:\n\nready";
    let last = mock.requests().last().unwrap().body.clone();
    let users: Vec<Value> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(
        users,
        vec![
            // User messages go out as Pi sends them: text blocks.
            json!([{"type": "text", "text": "start the web server"}]),
            json!([{"type": "text", "text": shared}]),
            json!([{"type": "text", "text": "What did it print?"}])
        ]
    );
    // The file holds the tmux state (custom) and the shared pane (custom_message), whole.
    let lines = session_lines(&ws);
    let custom: Vec<Value> = lines
        .iter()
        .filter(|l| l["type"] == "custom" || l["type"] == "custom_message")
        .map(|l| {
            let mut l = l.clone();
            for k in ["id", "parentId", "timestamp"] {
                l.as_object_mut().unwrap().remove(k);
            }
            l
        })
        .collect();
    let started_at = custom[0]["data"]["sessions"][0]["startedAt"].clone();
    assert!(started_at.is_string());
    assert_eq!(
        custom,
        vec![
            json!({"type": "custom", "customType": "tmux", "data": {"sessions": [{"name": "web",
                "session": session, "command": "sh -c 'echo ready; sleep 30'",
                "cwd": ws.display().to_string(), "startedAt": started_at}]}}),
            json!({"type": "custom_message", "customType": "tmux", "content": shared, "display": true,
                "details": {"name": "web", "session": session, "attach": attach, "running": true,
                    "exitStatus": null, "truncated": false}}),
        ]
    );

    // A failing command is an extension_error event; the server serves on.
    let r = c
        .request(
            "agent/prompt",
            json!({"sessionId": sid, "text": "/tmux stop"}),
        )
        .await
        .unwrap();
    assert_eq!(r["command"], "tmux");
    let t0 = Instant::now();
    let errors = loop {
        let errors: Vec<Value> = sent(&c, "agent/event")
            .into_iter()
            .filter(|p| p["event"]["type"] == "extension_error")
            .collect();
        if !errors.is_empty() || t0.elapsed() > Duration::from_secs(5) {
            break errors;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Numbered with the session's other events: its place among them.
    let seq = sent(&c, "agent/event")
        .into_iter()
        .filter(|p| p["sessionId"] == sid)
        .position(|p| p["event"]["type"] == "extension_error")
        .map_or(0, |i| i + 1);
    assert_eq!(
        errors,
        vec![
            json!({"sessionId": sid, "runId": last_run_id(&c, &sid), "seq": seq, "event": {"type": "extension_error",
            "extensionPath": "<builtin:tmux>", "event": "command:tmux",
            "error": "unknown /tmux action \"stop\": use list, kill [NAME] or share [NAME]"}})
        ]
    );

    // `/tmux kill web` stops it; tmux agrees.
    c.request(
        "agent/prompt",
        json!({"sessionId": sid, "text": "/tmux kill web"}),
    )
    .await
    .unwrap();
    assert!(!tmux(&socket, &["ls"]).contains(&session));
    assert_eq!(
        sent_n(&c, "agent/ui/notification", 2).await.last().unwrap()["message"],
        "Killed tmux session web."
    );
    assert!(c.shutdown().await.success());
}

/// The id of the session's last run (what `extension_error` events carry).
fn last_run_id(c: &LspClient, sid: &str) -> Value {
    let last = c
        .log()
        .into_iter()
        .rev()
        .find(|m| {
            m["method"] == "agent/event"
                && m["params"]["sessionId"] == sid
                && m["params"]["event"]["type"] == "agent_end"
        })
        .unwrap();
    last["params"]["runId"].clone()
}

#[tokio::test]
async fn ui_falls_back_to_show_message_request_and_untrusted_loads_nothing() {
    if !tmux_available() {
        return;
    }
    let tmp = TempDir::new("ext-fallback");
    let socket = socket_name();
    let _server = TmuxServer(socket.clone());
    let ws = workspace(&tmp, &socket);
    let session = format!("{}web", pi_core::extension::tmux::session_prefix(&ws));
    let mock = MockModel::start(vec![
        Step::call(
            "call_1",
            "tmux_start",
            json!({"name": "web", "command": "sh -c 'echo ready key=[$ANTHROPIC_API_KEY]; sleep 30'"}),
        ),
        Step::text("Started."),
    ])
    .await;
    // No agent/ui: the question becomes window/showMessageRequest with the sessions as
    // actions; the user picks "web". The server has a provider key in its environment.
    let env = agent_env(
        &ws.join("../agent"),
        &mock.models_json(),
        &[("ANTHROPIC_API_KEY", "sk-ant-e2e-secret-0123456789")],
    );
    let mut c = LspClient::start(&pi_lsp_bin(), &ws, &env, trusted(None, Some("web"))).await;
    let sid = start_web(&mut c).await;
    assert!(tmux(&socket, &["ls"]).contains(&session));
    // The tmux server the extension started did not get the key.
    wait_for_pane(&socket, &session, "ready key=[]").await;
    let r = c
        .request(
            "agent/prompt",
            json!({"sessionId": sid, "text": "/tmux kill"}),
        )
        .await
        .unwrap();
    assert_eq!(r["command"], "tmux");
    assert_eq!(
        sent(&c, "window/showMessageRequest"),
        vec![json!({"type": 3, "message": "Kill which tmux session?",
            "actions": [{"title": "web"}]})]
    );
    assert!(!tmux(&socket, &["ls"]).contains(&session));
    assert_eq!(
        sent_n(&c, "window/showMessage", 1).await.last().unwrap(),
        &json!({"type": 3, "message": "Killed tmux session web."})
    );
    assert!(sent(&c, "agent/ui/request").is_empty());
    assert!(c.shutdown().await.success());

    // The same project, untrusted: its settings (and so the extension) are ignored.
    let mock = MockModel::start(vec![Step::text("hi")]).await;
    let mut c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    let r = c
        .request("agent/prompt", json!({"text": "/tmux list"}))
        .await
        .unwrap();
    assert!(r.get("command").is_none(), "{r}");
    c.run_until_end(Duration::from_secs(30)).await;
    let sid = r["sessionId"].as_str().unwrap();
    assert_eq!(
        c.request("agent/extension/commands", json!({"sessionId": sid}))
            .await
            .unwrap(),
        // Only the built-ins on by default (todo, plan-mode); not the project's tmux.
        json!({"commands": [
            {"name": "todos", "description": "Show all todos on the current branch", "source": "extension", "path": "<builtin:todo>"},
            {"name": "plan", "description": "Toggle plan mode (read-only exploration)", "source": "extension", "path": "<builtin:plan-mode>"}]})
    );
    let tools = mock.requests()[0].body["tools"].to_string();
    assert!(!tools.contains("tmux_"), "{tools}");
    assert!(c.shutdown().await.success());
}

/// An editor dialog nobody waits for any more is withdrawn: `/tmux kill` asks which session
/// (`window/showMessageRequest`, the editor has no `agent/ui`); the client cancels the
/// `agent/prompt` that asked (`$/cancelRequest`) while the dialog is open. The prompt is
/// answered -32800 and the server sends `$/cancelRequest` with the dialog's own id, so the
/// editor closes it; nothing is killed.
#[tokio::test]
async fn an_open_dialog_is_withdrawn_when_its_request_is_cancelled() {
    if !tmux_available() {
        return;
    }
    let tmp = TempDir::new("ext-withdraw");
    let socket = socket_name();
    let _server = TmuxServer(socket.clone());
    let ws = workspace(&tmp, &socket);
    let session = format!("{}web", pi_core::extension::tmux::session_prefix(&ws));
    let mock = MockModel::start(vec![
        Step::call(
            "call_1",
            "tmux_start",
            json!({"name": "web", "command": "sh -c 'echo ready; sleep 30'"}),
        ),
        Step::text("Started."),
    ])
    .await;
    let behavior = EditorBehavior {
        hold_permissions: true,
        ..trusted(None, None)
    };
    let mut c = start_with_mock(&ws, &mock, behavior).await;
    let sid = start_web(&mut c).await;
    let answer = c
        .send_request(
            "agent/prompt",
            json!({"sessionId": sid, "text": "/tmux kill"}),
        )
        .await;
    let prompt_id = c.last_request_id();
    let dialog = loop {
        let m = c
            .next_notification(Duration::from_secs(10))
            .await
            .expect("no dialog");
        if m["method"] == "window/showMessageRequest" {
            break m;
        }
    };
    assert_eq!(
        dialog["params"],
        json!({"type": 3, "message": "Kill which tmux session?", "actions": [{"title": "web"}]})
    );
    c.notify("$/cancelRequest", json!({"id": prompt_id})).await;
    let response = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("the cancelled prompt was not answered")
        .unwrap();
    assert_eq!(response["error"]["code"], json!(-32800), "{response}");
    let withdrawn = sent_n(&c, "$/cancelRequest", 1).await;
    assert_eq!(withdrawn, vec![json!({"id": dialog["id"]})]);
    assert!(tmux(&socket, &["ls"]).contains(&session), "nothing killed");
    assert!(c.shutdown().await.success());
}

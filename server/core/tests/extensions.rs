//! In-process extensions through the real loop (scripted model): a test extension's tool,
//! `tool_call` blocking / rewriting, `tool_result` patching, event handlers, failures as
//! `extension_error`, commands and UI requests, `custom` entries and `custom_message`s in the
//! session file; and the built-in tmux extension driving a real tmux server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

#[path = "../../../tests/support/require.rs"]
mod require;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pi_ai::{Message, Model, ToolSpec};
use pi_core::agent::{
    AfterToolOverride, Agent, AgentConfig, AgentEvent, Delivery, EventSink, Tool, ToolContext,
    ToolError, ToolOutput,
};
use pi_core::extension::{
    append_custom_entry, custom_entries_of, CommandInfo, CustomMessage, Extension, ExtensionApi,
    ExtensionErrorInfo, ExtensionHost, Extensions, NotifyType, ToolCallAction, UiRequest,
    UiResponse,
};
use pi_core::session::SessionWriter;
use serde_json::{json, Value};

mod common;
use common::{tmp_dir, Tmp};

/// A host over a real session file: `custom` entries and idle-time custom messages are written
/// at once; UI requests are answered from `answers` and logged; errors are collected.
struct TestHost {
    cwd: PathBuf,
    writer: Arc<Mutex<SessionWriter>>,
    agent: Mutex<Option<Agent>>,
    ui_log: Mutex<Vec<UiRequest>>,
    answers: Mutex<Vec<UiResponse>>,
    errors: Mutex<Vec<ExtensionErrorInfo>>,
}

impl TestHost {
    fn new(cwd: &Path, writer: Arc<Mutex<SessionWriter>>) -> Arc<TestHost> {
        Arc::new(TestHost {
            cwd: cwd.to_path_buf(),
            writer,
            agent: Mutex::new(None),
            ui_log: Mutex::new(Vec::new()),
            answers: Mutex::new(Vec::new()),
            errors: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl ExtensionHost for TestHost {
    fn cwd(&self) -> PathBuf {
        self.cwd.clone()
    }
    fn session_id(&self) -> String {
        self.writer.lock().unwrap().id().to_string()
    }
    fn append_entry(&self, custom_type: &str, data: Value) -> Result<String, String> {
        append_custom_entry(&self.writer, custom_type, data)
    }
    fn custom_entries(&self, custom_type: &str) -> Vec<Value> {
        custom_entries_of(&self.writer, custom_type)
    }
    async fn send_message(&self, m: CustomMessage) -> Result<(), String> {
        let fields = serde_json::to_value(&m).unwrap();
        self.writer
            .lock()
            .unwrap()
            .append_raw("custom_message", fields.clone())
            .map_err(|e| e.to_string())?;
        let mut as_message = fields;
        as_message["role"] = json!("custom");
        as_message["timestamp"] = json!(1);
        let message = pi_core::session::convert_message(&as_message).unwrap();
        if let Some(a) = self.agent.lock().unwrap().as_ref() {
            a.enqueue(message, m.deliver_as.unwrap_or(Delivery::NextTurn));
        }
        Ok(())
    }
    fn has_ui(&self) -> bool {
        true
    }
    async fn ui(&self, _extension: &str, request: UiRequest) -> UiResponse {
        self.ui_log.lock().unwrap().push(request.clone());
        if !request.is_dialog() {
            return UiResponse::default();
        }
        self.answers
            .lock()
            .unwrap()
            .pop()
            .unwrap_or_else(UiResponse::cancelled)
    }
    async fn extension_error(&self, error: ExtensionErrorInfo) {
        self.errors.lock().unwrap().push(error);
    }
}

/// Writes every completed message to the session file (what the editor server's recorder does).
struct Recorder(Arc<Mutex<SessionWriter>>);

#[async_trait]
impl EventSink for Recorder {
    async fn emit(&self, event: AgentEvent) {
        if let AgentEvent::MessageEnd { message } = event {
            self.0.lock().unwrap().append_message(&message).unwrap();
        }
    }
}

/// `echo {text}`: answers the text; counts its calls in a `custom` entry and tells the model
/// about the count with the next prompt.
struct Echo {
    ctx: pi_core::extension::ExtensionContext,
    calls: Mutex<u32>,
}

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            constrained_sampling: None,
            name: "echo".into(),
            description: "echo".into(),
            parameters: json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}),
        }
    }
    async fn execute(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let n = {
            let mut c = self.calls.lock().unwrap();
            *c += 1;
            *c
        };
        self.ctx
            .append_entry("test-state", json!({"calls": n}))
            .map_err(ToolError::new)?;
        self.ctx
            .send_message(CustomMessage {
                custom_type: "test".into(),
                content: json!(format!("[test extension] echo ran {n} time(s)")),
                display: false,
                details: Some(json!({"calls": n})),
                deliver_as: Some(Delivery::NextTurn),
                trigger_turn: false,
            })
            .await
            .map_err(ToolError::new)?;
        Ok(ToolOutput::text(args["text"].as_str().unwrap_or_default()))
    }
}

/// The test extension.
struct TestExt {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Extension for TestExt {
    fn name(&self) -> &str {
        "test"
    }
    fn register(&self, api: &mut ExtensionApi) -> Result<(), String> {
        api.register_tool(Arc::new(Echo {
            ctx: api.context(),
            calls: Mutex::new(0),
        }));
        api.on_tool_call(|ev, _ctx| async move {
            Ok(match ev.input["text"].as_str() {
                Some("forbidden") => ToolCallAction::Block("blocked by the test extension".into()),
                Some("rewrite-me") => ToolCallAction::Rewrite(json!({"text": "rewritten"})),
                Some("panic") => panic!("handler bug"),
                _ => ToolCallAction::Continue,
            })
        });
        api.on_tool_result(|ev, _ctx| async move {
            if ev.tool_name != "echo" || ev.is_error {
                return Ok(None);
            }
            let text = pi_ai::join_text(&ev.content);
            Ok(Some(AfterToolOverride {
                content: Some(vec![pi_ai::ContentBlock::text(format!("{text} (checked)"))]),
                details: Some(json!({"checked": true})),
                ..Default::default()
            }))
        });
        let seen = self.seen.clone();
        api.on_event(move |ev, _ctx| {
            let seen = seen.clone();
            async move {
                let v = serde_json::to_value(&ev).unwrap();
                let mut t = v["type"].as_str().unwrap().to_string();
                if let Some(id) = v["toolCallId"].as_str() {
                    t = format!("{t}:{id}");
                }
                if t != "message_update" {
                    seen.lock().unwrap().push(t.clone());
                }
                if t == "turn_end" {
                    return Err("boom".into());
                }
                Ok(())
            }
        });
        api.register_command("hello", Some("Say hello"), |args, ctx| async move {
            ctx.notify(&format!("Hello {args}"), NotifyType::Info).await;
            let pick = ctx.select("Pick one", vec!["a".into(), "b".into()]).await;
            ctx.notify(&format!("picked {pick:?}"), NotifyType::Info)
                .await;
            Ok(())
        });
        api.register_command("fails", None, |_args, _ctx| async move {
            Err("the command failed".to_string())
        });
        Ok(())
    }
}

fn scripted(script: Value) -> Model {
    Model {
        script: Some(Arc::new(serde_json::from_value(script).unwrap())),
        ..Model::new(pi_ai::Api::Scripted, "scripted", "t", "")
    }
}

fn temp(name: &str) -> Tmp {
    tmp_dir(&format!("pi-ext-{name}-"))
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Strips the entry's id, parentId and timestamp.
fn body(mut v: Value) -> Value {
    for k in ["id", "parentId", "timestamp"] {
        v.as_object_mut().unwrap().remove(k);
    }
    v
}

/// The agent, its host, its extensions, its session writer, its listeners.
type Setup = (
    Agent,
    Arc<TestHost>,
    Arc<Extensions>,
    Arc<Mutex<SessionWriter>>,
    Vec<pi_core::agent::Subscription>,
);

/// An agent on `ws` with `extensions` loaded into its config and as a listener.
fn agent_with(ws: &Path, script: Value, exts: Vec<Arc<dyn Extension>>) -> Setup {
    let writer = Arc::new(Mutex::new(
        SessionWriter::create(&ws.join(".pi/sessions"), ws, "scripted", "t", "off").unwrap(),
    ));
    let host = TestHost::new(ws, writer.clone());
    let (set, errors) = Extensions::load(exts, host.clone());
    assert_eq!(errors, vec![]);
    let set = Arc::new(set);
    let mut cfg = AgentConfig::new(scripted(script), "sys".into(), Vec::new());
    cfg.tools.extend(set.tools());
    cfg.hooks = Some(set.clone());
    let agent = Agent::new(cfg, Vec::new());
    *host.agent.lock().unwrap() = Some(agent.clone());
    let subs = vec![
        agent.subscribe(Arc::new(Recorder(writer.clone()))),
        agent.subscribe(set.clone()),
    ];
    (agent, host, set, writer, subs)
}

async fn run(agent: &Agent, text: &str) {
    agent.prompt(vec![Message::user_text(text)]).unwrap();
    tokio::time::timeout(Duration::from_secs(30), agent.wait_for_idle())
        .await
        .expect("run did not end");
}

fn tool_results(messages: &[Message]) -> Vec<(String, String, bool, Option<Value>)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some((
                r.tool_call_id.clone(),
                pi_ai::join_text(&r.content),
                r.is_error,
                r.details.clone(),
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn test_extension_tools_hooks_events_entries_and_messages() {
    let ws = temp("loop");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script = json!({"responses": [
        {"toolCalls": [
            {"name": "echo", "arguments": {"text": "hi"}},
            {"name": "echo", "arguments": {"text": "forbidden"}},
            {"name": "echo", "arguments": {"text": "rewrite-me"}},
            {"name": "echo", "arguments": {"text": "panic"}}]},
        {"text": "done"},
        {"text": "second answer"}]});
    let (agent, host, set, writer, _subs) =
        agent_with(&ws, script, vec![Arc::new(TestExt { seen: seen.clone() })]);
    assert!(set.has_event_handlers());
    run(&agent, "go").await;

    // The tool ran; the before hook blocked one call and rewrote another; a panicking handler
    // blocked its call; the after hook patched the results of executed calls only.
    assert_eq!(
        tool_results(&agent.messages()),
        vec![
            (
                "scripted_1_0".into(),
                "hi (checked)".into(),
                false,
                Some(json!({"checked": true}))
            ),
            (
                "scripted_1_1".into(),
                "blocked by the test extension".into(),
                true,
                Some(json!({}))
            ),
            (
                "scripted_1_2".into(),
                "rewritten (checked)".into(),
                false,
                Some(json!({"checked": true}))
            ),
            (
                "scripted_1_3".into(),
                "Extension <builtin:test> failed, blocking execution: panicked: handler bug".into(),
                true,
                Some(json!({}))
            ),
        ]
    );
    // The event handler saw the run's events in order (its own failures did not stop it;
    // `message_update`s are left out of the record).
    let seen_now = seen.lock().unwrap().clone();
    assert_eq!(
        seen_now,
        vec![
            "agent_start",
            "turn_start",
            "message_start",
            "message_end",
            "message_start",
            "message_end",
            "tool_execution_start:scripted_1_0",
            "tool_execution_start:scripted_1_1",
            "tool_execution_end:scripted_1_1",
            "tool_execution_start:scripted_1_2",
            "tool_execution_start:scripted_1_3",
            "tool_execution_end:scripted_1_3",
            "tool_execution_end:scripted_1_0",
            "tool_execution_end:scripted_1_2",
            "message_start",
            "message_end",
            "message_start",
            "message_end",
            "message_start",
            "message_end",
            "message_start",
            "message_end",
            "turn_end",
            "turn_start",
            "message_start",
            "message_end",
            "turn_end",
            "agent_end",
            "agent_settled",
        ]
    );
    // Every failure became an extension_error; the loop went on.
    assert_eq!(
        *host.errors.lock().unwrap(),
        vec![
            ExtensionErrorInfo {
                extension_path: "<builtin:test>".into(),
                event: "tool_call".into(),
                error: "panicked: handler bug".into()
            },
            ExtensionErrorInfo {
                extension_path: "<builtin:test>".into(),
                event: "turn_end".into(),
                error: "boom".into()
            },
            ExtensionErrorInfo {
                extension_path: "<builtin:test>".into(),
                event: "turn_end".into(),
                error: "boom".into()
            },
        ]
    );
    // custom entries (state) and custom_message entries (model-visible) with whole values.
    let path = writer.lock().unwrap().path().to_path_buf();
    let file = lines(&path);
    let custom: Vec<Value> = file
        .iter()
        .filter(|l| l["type"] == "custom" || l["type"] == "custom_message")
        .cloned()
        .map(body)
        .collect();
    assert_eq!(
        custom,
        vec![
            json!({"type": "custom", "customType": "test-state", "data": {"calls": 1}}),
            json!({"type": "custom_message", "customType": "test", "content": "[test extension] echo ran 1 time(s)", "display": false, "details": {"calls": 1}}),
            json!({"type": "custom", "customType": "test-state", "data": {"calls": 2}}),
            json!({"type": "custom_message", "customType": "test", "content": "[test extension] echo ran 2 time(s)", "display": false, "details": {"calls": 2}}),
        ]
    );
    assert_eq!(
        custom_entries_of(&writer, "test-state"),
        vec![json!({"calls": 1}), json!({"calls": 2})]
    );
    // The next-turn custom messages reach the model with the next prompt, as user content.
    run(&agent, "again").await;
    let users: Vec<String> = agent
        .messages()
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(match &u.content {
                pi_ai::UserContent::Text(t) => t.clone(),
                pi_ai::UserContent::Blocks(b) => pi_ai::join_text(b),
            }),
            _ => None,
        })
        .collect();
    assert_eq!(
        users,
        vec![
            "go",
            "[test extension] echo ran 1 time(s)",
            "[test extension] echo ran 2 time(s)",
            "again"
        ]
    );

    // Commands: listed, run with their arguments, UI requests answered; a failing command
    // is an extension_error; other text is not a command.
    assert_eq!(
        set.commands(),
        vec![
            CommandInfo {
                name: "hello".into(),
                description: Some("Say hello".into()),
                source: "extension".into(),
                path: "<builtin:test>".into()
            },
            CommandInfo {
                name: "fails".into(),
                description: None,
                source: "extension".into(),
                path: "<builtin:test>".into()
            },
        ]
    );
    host.answers.lock().unwrap().push(UiResponse {
        value: Some("b".into()),
        ..Default::default()
    });
    assert_eq!(
        set.run_command("/hello  big world ").await.as_deref(),
        Some("hello")
    );
    assert_eq!(
        *host.ui_log.lock().unwrap(),
        vec![
            UiRequest::Notify {
                message: "Hello big world".into(),
                notify_type: NotifyType::Info
            },
            UiRequest::Select {
                title: "Pick one".into(),
                options: vec!["a".into(), "b".into()],
                timeout: None
            },
            UiRequest::Notify {
                message: "picked Some(\"b\")".into(),
                notify_type: NotifyType::Info
            },
        ]
    );
    assert_eq!(set.run_command("/fails").await.as_deref(), Some("fails"));
    assert_eq!(
        host.errors.lock().unwrap().last().unwrap(),
        &ExtensionErrorInfo {
            extension_path: "<builtin:test>".into(),
            event: "command:fails".into(),
            error: "the command failed".into()
        }
    );
    assert_eq!(set.run_command("/nope x").await, None);
    assert_eq!(set.run_command("hello").await, None);
    let _ = std::fs::remove_dir_all(&ws);
}

#[test]
fn builtin_extensions_come_from_settings() {
    use pi_core::extension::{builtin, builtins};
    let names = |exts: &[std::sync::Arc<dyn pi_core::extension::Extension>]| {
        exts.iter()
            .map(|e| e.name().to_string())
            .collect::<Vec<_>>()
    };
    let (exts, errors) = builtin(Some(&json!({"tmux": {"socket": "s1"}, "nope": {}})));
    // todo and plan-mode are on unless turned off.
    assert_eq!(names(&exts), vec!["tmux", "todo", "plan-mode"]);
    assert_eq!(
        errors,
        vec![ExtensionErrorInfo {
            extension_path: "<builtin:nope>".into(),
            event: "load".into(),
            error: "no built-in extension named \"nope\" (known: tmux, todo, plan-mode)".into()
        }]
    );
    let off = json!({"tmux": {"enabled": false}, "todo": false, "plan-mode": {"enabled": false}});
    let (exts, errors) = builtin(Some(&off));
    assert!(exts.is_empty() && errors.is_empty());
    assert!(builtins(Some(&off), None).plan.is_none());
    let (exts, errors) = builtin(Some(&json!({"tmux": {"socket": "a/b"}, "todo": false})));
    assert_eq!(names(&exts), vec!["plan-mode"]);
    assert_eq!(errors[0].event, "load");
    assert_eq!(names(&builtin(None).0), vec!["todo", "plan-mode"]);
    // Pi 1.6's `defaultTools` removes the todo tool with `-todo`; plain names do not.
    let b = builtins(None, Some(&json!(["+codemode", "-todo"])));
    assert_eq!(names(&b.extensions), vec!["plan-mode"]);
    assert!(b.plan.is_some());
    let b = builtins(None, Some(&json!(["read", "bash"])));
    assert_eq!(names(&b.extensions), vec!["todo", "plan-mode"]);
    // Pi's own `extensions` key (a list of paths) is not ours.
    let (exts, errors) = builtin(Some(&json!(["./ext.ts"])));
    assert_eq!(names(&exts), vec!["todo", "plan-mode"]);
    assert_eq!(errors[0].extension_path, "builtinExtensions");
}

/// Kills the private tmux server when the test ends, pass or fail.
struct TmuxServer(String);

impl Drop for TmuxServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .args(["-L", &self.0, "kill-server"])
            .output();
        // tmux leaves the socket file behind.
        let dir = std::env::var_os("TMUX_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        #[cfg(unix)]
        let uid = {
            use std::os::unix::fs::MetadataExt as _;
            std::fs::metadata("/proc/self")
                .map(|m| m.uid())
                .unwrap_or(0)
        };
        #[cfg(not(unix))]
        let uid = 0;
        let _ = std::fs::remove_file(dir.join(format!("tmux-{uid}")).join(&self.0));
    }
}

fn tmux(socket: &str, args: &[&str]) -> (bool, String) {
    let o = std::process::Command::new("tmux")
        .arg("-L")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

fn tmux_available() -> bool {
    let found = std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    require::require(found, "tmux extension tests", "tmux")
}

#[tokio::test]
async fn tmux_extension_drives_a_real_tmux_server() {
    if !tmux_available() {
        return;
    }
    let ws = temp("tmux");
    let socket = format!(
        "pi-ext-test-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    let _server = TmuxServer(socket.clone());
    let ext =
        pi_core::extension::tmux::TmuxExtension::from_settings(&json!({"socket": socket})).unwrap();
    let script = json!({"responses": [
        {"toolCalls": [{"name": "tmux_start", "arguments": {"name": "srv", "command": "sh -c 'echo ready; sleep 30'"}}]},
        {"text": "started"},
        {"toolCalls": [{"name": "tmux_capture", "arguments": {"name": "srv"}}, {"name": "tmux_list", "arguments": {}}]},
        {"text": "it is ready"},
        {"toolCalls": [{"name": "tmux_kill", "arguments": {"name": "srv"}}, {"name": "tmux_capture", "arguments": {"name": "srv"}}]},
        {"text": "stopped"}]});
    let (agent, host, set, writer, _subs) = agent_with(&ws, script, vec![Arc::new(ext)]);
    assert_eq!(
        set.tools()
            .iter()
            .map(|t| t.spec().name)
            .collect::<Vec<_>>(),
        vec!["tmux_start", "tmux_capture", "tmux_list", "tmux_kill"]
    );
    assert!(!set.has_event_handlers());
    let prefix = pi_core::extension::tmux::session_prefix(&ws);
    let session = format!("{prefix}srv");
    let attach = format!("tmux -L {socket} attach -t {session}");

    run(&agent, "start a server").await;
    let results = tool_results(&agent.messages());
    assert_eq!(
        results[0],
        (
            "scripted_1_0".into(),
            format!("Started `sh -c 'echo ready; sleep 30'` in tmux session srv (tmux name {session}), in {}.\nRead its output with tmux_capture. The user can watch or type in the same pane with: {attach}", ws.display()),
            false,
            Some(json!({"name": "srv", "session": session, "command": "sh -c 'echo ready; sleep 30'", "cwd": ws.display().to_string(), "attach": attach}))
        )
    );
    // The human sees the same session on the same server.
    let (ok, ls) = tmux(&socket, &["ls", "-F", "#{session_name}"]);
    assert!(ok, "{ls}");
    assert_eq!(ls.trim(), session);
    // Wait until the pane printed (the process runs on its own).
    let t0 = Instant::now();
    loop {
        let (_, out) = tmux(
            &socket,
            &["capture-pane", "-p", "-t", &format!("={session}:")],
        );
        if out.contains("ready") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "pane never printed: {out:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    run(&agent, "is it ready?").await;
    let results = tool_results(&agent.messages());
    assert_eq!(
        results[1],
        (
            "scripted_3_0".into(),
            "ready".into(),
            false,
            Some(
                json!({"name": "srv", "session": session, "attach": attach, "running": true, "exitStatus": null, "truncated": false})
            )
        )
    );
    assert_eq!(
        results[2],
        (
            "scripted_3_1".into(),
            format!("srv: running `sh -c 'echo ready; sleep 30'`; attach: {attach}"),
            false,
            Some(
                json!({"sessions": [{"name": "srv", "session": session, "command": "sh -c 'echo ready; sleep 30'", "running": true, "exitStatus": null, "attach": attach, "startedByAgent": true}]})
            )
        )
    );

    // The state entry is in the file, and a fresh extension instance restores it (resume).
    let path = writer.lock().unwrap().path().to_path_buf();
    let state: Vec<Value> = lines(&path)
        .into_iter()
        .filter(|l| l["type"] == "custom")
        .map(body)
        .collect();
    assert_eq!(state.len(), 1);
    let started = &state[0]["data"]["sessions"][0];
    assert_eq!(
        state[0],
        json!({"type": "custom", "customType": "tmux", "data": {"sessions": [{
            "name": "srv", "session": session, "command": "sh -c 'echo ready; sleep 30'",
            "cwd": ws.display().to_string(), "startedAt": started["startedAt"]}]}})
    );
    let again =
        pi_core::extension::tmux::TmuxExtension::from_settings(&json!({"socket": socket})).unwrap();
    let (resumed, errors) = Extensions::load(vec![Arc::new(again)], host.clone());
    assert_eq!(errors, vec![]);
    // Capturing and listing only read (never asked under auto-edit); start and kill execute.
    use pi_core::approval::ToolKind;
    let kinds: Vec<(String, ToolKind)> = resumed
        .tools()
        .iter()
        .map(|t| (t.spec().name, t.approval_kind()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("tmux_start".to_string(), ToolKind::Execute),
            ("tmux_capture".to_string(), ToolKind::ReadOnly),
            ("tmux_list".to_string(), ToolKind::ReadOnly),
            ("tmux_kill".to_string(), ToolKind::Execute),
        ]
    );
    let list = resumed.tools()[2]
        .execute(
            ToolContext {
                call_id: "c".into(),
                turn: 1,
                cancel: Default::default(),
                on_update: Arc::new(|_| {}),
                model_input: None,
            },
            json!({}),
        )
        .await
        .unwrap();
    assert_eq!(
        list.details.unwrap()["sessions"][0]["startedByAgent"],
        json!(true)
    );
    // The user's /tmux command lists the sessions as a notification.
    assert_eq!(set.run_command("/tmux").await.as_deref(), Some("tmux"));
    assert_eq!(
        host.ui_log.lock().unwrap().last().unwrap(),
        &UiRequest::Notify {
            message: format!("srv: running `sh -c 'echo ready; sleep 30'`; attach: {attach}"),
            notify_type: NotifyType::Info
        }
    );

    run(&agent, "stop it").await;
    let results = tool_results(&agent.messages());
    assert_eq!(
        results[3],
        (
            "scripted_5_0".into(),
            format!("Killed tmux session srv ({session})."),
            false,
            Some(json!({"name": "srv", "session": session}))
        )
    );
    assert_eq!(
        results[4],
        (
            "scripted_5_1".into(),
            "no tmux session srv in this workspace (tmux_list shows them)".into(),
            true,
            Some(json!({}))
        )
    );
    let (_, ls) = tmux(&socket, &["ls"]);
    assert!(!ls.contains(&session), "{ls}");
    // The state entries sit between tool calls and their results on the path; the model
    // context read back from the file is the conversation the agent had, pairs intact.
    let (tree, _) = pi_core::session::read_tree(&path, false).unwrap();
    let leaf = writer.lock().unwrap().leaf().unwrap().to_string();
    assert_eq!(tree.context(Some(&leaf)).messages, agent.messages());
    // The kill updated the state entry.
    let last = custom_entries_of(&writer, "tmux").pop().unwrap();
    assert_eq!(last, json!({"sessions": []}));
    assert_eq!(*host.errors.lock().unwrap(), vec![]);
    let _ = std::fs::remove_dir_all(&ws);
}

/// The product's own hooks chained before the extensions': the second sees what the first
/// rewrote and patched, and a block by either stops the call.
#[tokio::test]
async fn chained_hooks_run_in_order_and_compose() {
    use pi_core::agent::{AfterToolCall, AgentHooks, BeforeToolCall};
    use pi_core::extension::ChainedHooks;

    struct Own;
    #[async_trait]
    impl AgentHooks for Own {
        async fn before_tool_call(&self, call: BeforeToolCall<'_>) -> Result<(), String> {
            if call.args["text"] == "own-block" {
                return Err("blocked by the product".into());
            }
            if call.args["text"] == "a" {
                call.args["text"] = json!("rewrite-me");
            }
            Ok(())
        }
        async fn after_tool_call(
            &self,
            call: AfterToolCall<'_>,
        ) -> Result<Option<AfterToolOverride>, String> {
            Ok(Some(AfterToolOverride {
                content: Some(vec![pi_ai::ContentBlock::text("own content")]),
                is_error: Some(call.args["fail"] == true),
                ..Default::default()
            }))
        }
    }
    let ws = temp("chain");
    let writer = Arc::new(Mutex::new(
        SessionWriter::create(&ws.join(".pi/sessions"), &ws, "scripted", "t", "off").unwrap(),
    ));
    let host = TestHost::new(&ws, writer);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (set, _) = Extensions::load(vec![Arc::new(TestExt { seen })], host);
    let hooks = ChainedHooks(Arc::new(Own), Arc::new(set));
    let assistant = pi_ai::AssistantMessage::empty("scripted", "scripted", "t");
    let call = pi_ai::ToolCall::new("c1", "echo", json!({}));

    let mut args = json!({"text": "a"});
    hooks
        .before_tool_call(BeforeToolCall {
            assistant: &assistant,
            call: &call,
            args: &mut args,
        })
        .await
        .unwrap();
    // The product rewrote it, then the extension rewrote the product's value.
    assert_eq!(args, json!({"text": "rewritten"}));
    for (text, reason) in [
        ("own-block", "blocked by the product"),
        ("forbidden", "blocked by the test extension"),
    ] {
        let mut args = json!({ "text": text });
        let r = hooks
            .before_tool_call(BeforeToolCall {
                assistant: &assistant,
                call: &call,
                args: &mut args,
            })
            .await;
        assert_eq!(r, Err(reason.to_string()));
    }
    // The extension's tool_result handler skips error results: the product's patch (which
    // made it an error) stands alone.
    let out = ToolOutput::text("x");
    let patch = hooks
        .after_tool_call(AfterToolCall {
            assistant: &assistant,
            call: &call,
            args: &json!({"fail": true}),
            output: &out,
            is_error: false,
        })
        .await
        .unwrap();
    assert_eq!(
        patch,
        Some(AfterToolOverride {
            content: Some(vec![pi_ai::ContentBlock::text("own content")]),
            is_error: Some(true),
            ..Default::default()
        })
    );
    // Otherwise the extension patches on top of the product's patch.
    let patch = hooks
        .after_tool_call(AfterToolCall {
            assistant: &assistant,
            call: &call,
            args: &json!({}),
            output: &out,
            is_error: false,
        })
        .await
        .unwrap();
    assert_eq!(
        patch,
        Some(AfterToolOverride {
            content: Some(vec![pi_ai::ContentBlock::text("own content (checked)")]),
            details: Some(json!({"checked": true})),
            is_error: Some(false),
            terminate: None,
        })
    );
    let _ = std::fs::remove_dir_all(&ws);
}

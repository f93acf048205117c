//! The live session without stdio: [`AgentSession`] over a real session file, the scripted
//! model and the disk — queue states told in order, a custom message while idle and during a
//! run, abort and close, the user's shell command, label / fork / branch. (A save failure told
//! as a notice: `harness::sessions`' unit tests, which can poison the writer.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pi_ai::models::SCRIPTED_API;
use pi_ai::Model;
use pi_core::agent::{AgentEvent, WeakAgent};
use pi_core::approval::{ApprovalPolicy, Gate};
use pi_core::extension::{CustomMessage, ExtensionErrorInfo, ExtensionUi};
use pi_core::fs::{DiskFs, Fs};
use pi_core::harness::queue::{DeliverAs, QueueState};
use pi_core::harness::{
    AgentSession, Notice, PromptOutcome, SessionListener, SessionSetup, Tracker,
};
use pi_core::resources::WorkspaceConfig;
use pi_core::settings::Settings;
use pi_core::tools::BeforeBash;
use serde_json::{json, Value};

mod common;
use common::{tmp_dir, Tmp};

/// What the test's product saw: queue notices as `(text, state)` and event types.
#[derive(Default)]
struct Seen {
    queue: Mutex<Vec<(String, QueueState)>>,
    events: Mutex<Vec<String>>,
    save_failed: Mutex<Vec<String>>,
    /// Told when an `agent_end` arrives; the listener then holds the event `hold_end` long
    /// (the loop awaits its listeners, so the run stays in its ending state meanwhile).
    at_end: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    hold_end: Mutex<Duration>,
}

impl Seen {
    fn note(&self, n: &Notice) {
        match n {
            Notice::Queue { message, state, .. } => self
                .queue
                .lock()
                .unwrap()
                .push((message.text.clone(), *state)),
            Notice::SaveFailed { error } => self.save_failed.lock().unwrap().push(error.clone()),
            _ => {}
        }
    }
}

#[async_trait]
impl SessionListener for Seen {
    async fn event(&self, event: AgentEvent, notices: Vec<Notice>) {
        let kind = serde_json::to_value(&event).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_string();
        self.events.lock().unwrap().push(kind);
        for n in &notices {
            self.note(n);
        }
        if matches!(event, AgentEvent::AgentEnd { .. }) {
            let told = self.at_end.lock().unwrap().take();
            if let Some(tx) = told {
                let _ = tx.send(());
                let hold = *self.hold_end.lock().unwrap();
                tokio::time::sleep(hold).await;
            }
        }
    }
    async fn notice(&self, notice: Notice) {
        self.note(&notice);
    }
}

struct NoUi;

#[async_trait]
impl ExtensionUi for NoUi {
    async fn extension_error(&self, _error: ExtensionErrorInfo) {}
}

struct TestSetup {
    root: PathBuf,
    seen: Arc<Seen>,
}

impl SessionSetup for TestSetup {
    fn fs(&self, _session_id: &str) -> (Arc<dyn Fs>, Option<BeforeBash>) {
        (Arc::new(DiskFs::new(self.root.clone())), None)
    }
    fn gate(&self, _ws: &WorkspaceConfig, _id: &str, _tracker: &Arc<Tracker>) -> Arc<Gate> {
        Arc::new(Gate::new(
            ApprovalPolicy::ApproveAll,
            Vec::new(),
            None,
            None,
            "nobody asks",
        ))
    }
    fn default_policy(&self, _settings: &Settings) -> ApprovalPolicy {
        ApprovalPolicy::ApproveAll
    }
    fn extension_ui(&self, _session_id: &str) -> Arc<dyn ExtensionUi> {
        Arc::new(NoUi)
    }
    fn listeners(&self, _session_id: &str, _agent: &WeakAgent) -> Vec<Arc<dyn SessionListener>> {
        vec![self.seen.clone()]
    }
}

fn scripted(responses: Value) -> Model {
    Model {
        script: Some(Arc::new(
            serde_json::from_value(json!({ "responses": responses })).unwrap(),
        )),
        ..Model::new(SCRIPTED_API, "scripted", "demo", "")
    }
}

fn workspace(name: &str) -> (Tmp, Arc<WorkspaceConfig>) {
    let root = tmp_dir(&format!("pi-session-{name}-"));
    std::fs::create_dir_all(root.join("agent")).unwrap();
    let ws = Arc::new(WorkspaceConfig::new(
        root.to_path_buf(),
        Some(root.join("agent")),
        false,
    ));
    (root, ws)
}

fn session(root: &Path, ws: Arc<WorkspaceConfig>, model: Model) -> (Arc<AgentSession>, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let setup = Arc::new(TestSetup {
        root: root.to_path_buf(),
        seen: seen.clone(),
    });
    (AgentSession::create(ws, setup, model, None).unwrap(), seen)
}

/// The types of the session file's entries after the header, and each message's role.
fn file_kinds(s: &AgentSession) -> Vec<String> {
    let text = std::fs::read_to_string(s.file()).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            match v["type"].as_str().unwrap() {
                "message" => format!("message:{}", v["message"]["role"].as_str().unwrap()),
                other => other.to_string(),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_is_queued_delivered_consumed_and_stored_in_order() {
    let (root, ws) = workspace("steer");
    let (s, seen) = session(
        &root,
        ws,
        scripted(json!([
            {"toolCalls": [{"name": "bash", "arguments": {"command": "sleep 0.5"}}]},
            {"text": "done"}
        ])),
    );
    let run = s.prompt("go", Vec::new(), None, None).await.unwrap();
    assert!(matches!(run, PromptOutcome::Started { .. }), "{run:?}");
    // Steering sent while the tool runs goes in after the tool batch, before the next request.
    for _ in 0..200 {
        if seen
            .events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e == "tool_execution_start")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A prompt during the run without a behaviour is refused; with one it is queued.
    let busy = s.prompt("again", Vec::new(), None, None).await.unwrap_err();
    assert!(busy.to_string().contains("streamingBehavior"), "{busy}");
    let (queue_id, run_id) = s
        .queue_text("also this", Vec::new(), DeliverAs::Steer)
        .await
        .unwrap();
    assert!(!queue_id.is_empty());
    assert_eq!(run_id, s.run_id());
    s.wait_for_idle().await;
    assert_eq!(
        *seen.queue.lock().unwrap(),
        vec![
            ("also this".to_string(), QueueState::Queued),
            ("also this".to_string(), QueueState::Delivered),
            ("also this".to_string(), QueueState::Consumed),
        ]
    );
    assert_eq!(
        file_kinds(&s),
        [
            "model_change",
            "thinking_level_change",
            "message:system",
            "message:user",
            "message:assistant",
            "message:toolResult",
            "message:user",
            "message:assistant"
        ]
    );
    assert_eq!(s.status().pending_message_count, 0);
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_messages_bash_label_fork_branch_and_close_through_the_session() {
    let (root, ws) = workspace("ops");
    let (s, seen) = session(
        &root,
        ws,
        scripted(json!([{"text": "one"}, {"text": "two", "delayMs": 2000}])),
    );
    // Idle: a custom message is appended at once (and enters the context).
    let sent = s
        .send_custom_message(CustomMessage {
            custom_type: "note".into(),
            content: json!("remember this"),
            display: true,
            details: None,
            deliver_as: None,
            trigger_turn: false,
        })
        .await
        .unwrap();
    assert!(sent.entry_id.is_some() && sent.queue_id.is_none() && sent.run_id.is_none());
    assert_eq!(s.messages().len(), 1);
    // A bad one changes nothing and names the field.
    let bad = s
        .send_custom_message(CustomMessage {
            custom_type: "note".into(),
            content: json!([{"type": "video"}]),
            display: true,
            details: None,
            deliver_as: None,
            trigger_turn: false,
        })
        .await
        .unwrap_err();
    assert_eq!(
        bad.to_string(),
        "content[0].type: expected \"text\" or \"image\""
    );
    // The user's shell command: stored at once while idle, exit code and output.
    let out = s.bash("printf 'hi'; exit 3", false).await.unwrap();
    assert_eq!(
        (
            out.output.as_str(),
            out.exit_code,
            out.cancelled,
            out.entry_id.is_some()
        ),
        ("hi", Some(3), false, true)
    );
    s.prompt("first", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    let (tree, leaf) = s.tree().unwrap();
    let leaf = leaf.unwrap();
    let label = s.label(&leaf, Some("  done ")).unwrap();
    assert_eq!(tree.entries.len() + 1, s.tree().unwrap().0.entries.len());
    assert!(s.label("nope", Some("x")).is_err());
    // Fork at the first prompt: a new file holding what came before it, and its text.
    let first_user = tree
        .entries
        .iter()
        .find(|e| e.kind == "message" && e.role() == Some("user"))
        .unwrap()
        .id
        .clone();
    let (forked, text) = s.fork(&first_user).unwrap();
    assert!(forked.exists());
    assert_eq!(text.as_deref(), Some("first"));
    // Branch back before the prompt (no summary): the context loses the answer.
    let branched = s.branch(Some(&first_user), false, None).await.unwrap();
    assert_eq!(branched.editor_text.as_deref(), Some("first"));
    // Pi 1.6's count: the model context and the stored system message before the prompt.
    assert_eq!(branched.message_count, s.messages().len() + 1);
    assert_eq!(branched.message_count, s.message_count());
    assert!(!label.is_empty());
    // During a run: a custom message is queued as steering; close drops what is queued.
    s.prompt("second", Vec::new(), None, None).await.unwrap();
    let queued = s
        .send_custom_message(CustomMessage {
            custom_type: "note".into(),
            content: json!("later"),
            display: true,
            details: None,
            deliver_as: Some(DeliverAs::FollowUp),
            trigger_turn: false,
        })
        .await
        .unwrap();
    assert!(queued.queue_id.is_some() && queued.run_id.is_some());
    let report = tokio::time::timeout(Duration::from_secs(5), s.abort())
        .await
        .unwrap();
    assert!(report.aborted);
    assert_eq!(report.queued_messages.len(), 1);
    let dropped = s.close().await;
    assert_eq!(dropped.len(), 1);
    assert_eq!(
        seen.queue.lock().unwrap().last().cloned(),
        Some(("later".to_string(), QueueState::Dropped))
    );
    assert!(seen.save_failed.lock().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&root);
}

/// A session file opened again ([`pi_core::harness::open_file`] + [`AgentSession::resume`])
/// holds no model context until it is used: its message count comes from the file's tree and
/// equals the context built on first use, which is the one an open that builds it gives; a
/// custom message sent then joins the built context once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_builds_its_context_on_first_use() {
    let (root, ws) = workspace("deferred");
    let (s, _) = session(
        &root,
        ws.clone(),
        scripted(json!([
            {"toolCalls": [{"name": "read", "arguments": {"path": "a.txt"}}]},
            {"text": "done"}
        ])),
    );
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    s.prompt("go", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    let built = s.messages();
    assert_eq!(built.len(), 4);
    let file = s.file();
    s.close().await;
    drop(s);
    let eager = {
        let (_, loaded) = pi_core::session::SessionWriter::open(&file).unwrap();
        loaded.messages
    };
    assert_eq!(eager, built);
    let pi_core::harness::Opening::Opened { writer, loaded, .. } =
        pi_core::harness::open_file(&ws, &file, |_| None).unwrap()
    else {
        panic!("not opened");
    };
    assert!(loaded.deferred && loaded.messages.is_empty());
    let setup = Arc::new(TestSetup {
        root: root.to_path_buf(),
        seen: Arc::default(),
    });
    let r = AgentSession::resume(ws, setup, writer, loaded, None).unwrap();
    // The model context's four and the stored system message (Pi 1.6's count).
    assert_eq!(r.message_count(), 5);
    r.send_custom_message(CustomMessage {
        custom_type: "note".into(),
        content: json!("later"),
        display: true,
        details: None,
        deliver_as: None,
        trigger_turn: false,
    })
    .await
    .unwrap();
    let after = r.messages();
    assert_eq!(after.len(), 5);
    assert_eq!(after[..4], eager[..]);
    assert_eq!(r.message_count(), 6);
    r.close().await;
}

/// The branch a [`BranchOnEnd`] started: its new leaf, or the error's text.
type BranchTask = tokio::task::JoinHandle<Result<String, String>>;

/// Branches the session from inside its `agent_end` event, as a client that acts on the
/// `agent/event` it just received, while the run's loop is held in its last step.
struct BranchOnEnd {
    session: std::sync::OnceLock<std::sync::Weak<AgentSession>>,
    entry: String,
    outcome: Arc<Mutex<Option<BranchTask>>>,
}

#[async_trait]
impl pi_core::agent::EventSink for BranchOnEnd {
    async fn emit(&self, event: AgentEvent) {
        if !matches!(event, AgentEvent::AgentEnd { .. }) {
            return;
        }
        let s = self.session.get().and_then(|w| w.upgrade()).unwrap();
        let entry = self.entry.clone();
        *self.outcome.lock().unwrap() = Some(tokio::spawn(async move {
            s.branch(Some(&entry), false, None)
                .await
                .map(|o| o.leaf_id.unwrap_or_default())
                .map_err(|e| e.to_string())
        }));
        // The loop is still in the ending run while the client's branch arrives.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// A client that saw `agent_end` may move the leaf at once: the branch waits for the run's
/// last step instead of answering "is running" (found by an outside check: one in four
/// branches right after a run failed under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_sent_on_agent_end_waits_for_the_run_to_let_go() {
    let (root, ws) = workspace("settle");
    let (s, _) = session(
        &root,
        ws,
        scripted(json!([{"text": "one"}, {"text": "two"}])),
    );
    s.prompt("first", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    let (tree, leaf) = s.tree().unwrap();
    let first_answer = leaf.unwrap();
    let outcome = Arc::new(Mutex::new(None));
    let sink = Arc::new(BranchOnEnd {
        session: std::sync::OnceLock::new(),
        entry: first_answer.clone(),
        outcome: outcome.clone(),
    });
    sink.session.set(Arc::downgrade(&s)).unwrap();
    let _sub = s.subscribe(sink);
    s.prompt("second", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    let task = outcome.lock().unwrap().take().expect("agent_end was seen");
    let branched = task.await.unwrap();
    assert_eq!(branched, Ok(first_answer.clone()));
    assert!(tree.get(&first_answer).is_some());
    assert_eq!(s.tree().unwrap().1.as_deref(), Some(first_answer.as_str()));
    s.close().await;
}

/// Pi 1.6's `bash` exports the session's id and file, the model's provider and id and the
/// thinking level (`PI_SESSION_ID`, `PI_SESSION_FILE`, `PI_PROVIDER`, `PI_MODEL`,
/// `PI_REASONING_LEVEL`) to the model's commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_exports_the_session_variables_as_pi_1_6() {
    let (root, ws) = workspace("env");
    let (s, _seen) = session(
        &root,
        ws,
        scripted(json!([
            {"toolCalls": [{"name": "bash", "arguments": {"command": "env | grep -E '^PI_(SESSION_ID|SESSION_FILE|PROVIDER|MODEL|REASONING_LEVEL)=' | sort"}}]},
            {"text": "done"}
        ])),
    );
    s.prompt("env?", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    let result = s
        .messages()
        .into_iter()
        .find_map(|m| match m {
            pi_ai::Message::ToolResult(r) => Some(r),
            _ => None,
        })
        .unwrap();
    let text = match &result.content[0] {
        pi_ai::ContentBlock::Text(t) => t.text.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        text,
        format!(
            "PI_MODEL=demo\nPI_PROVIDER=scripted\nPI_REASONING_LEVEL=off\nPI_SESSION_FILE={}\nPI_SESSION_ID={}\n",
            s.file().display(),
            s.id()
        )
    );
}

/// Pi 1.6's compaction: the result carries `estimatedTokensAfter` (characters / 4 over the
/// rebuilt context) and the summary request's `usage`, which the `compaction` entry keeps
/// (before `fromHook`, as Pi 1.6 writes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_reports_estimated_tokens_after_and_writes_usage() {
    let (root, ws) = workspace("compact-usage");
    // One turn is all there is: keep less than it raw, so there is something to summarise.
    std::fs::write(
        root.join("agent/settings.json"),
        r#"{"compaction": {"keepRecentTokens": 1}}"#,
    )
    .unwrap();
    let (s, seen) = session(
        &root,
        ws,
        scripted(json!([{"text": "one"}, {"text": "SUMMARY"}])),
    );
    s.prompt("hello", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    let before = seen.events.lock().unwrap().len();
    let result = s.compact(None).await.unwrap();
    s.wait_for_idle().await;
    // A compaction asked for on its own sends no `agent_settled`: Pi 1.6 sends it at the end
    // of a prompt's run only.
    assert_eq!(
        seen.events.lock().unwrap()[before..],
        ["compaction_start", "compaction_end"]
    );
    let text = std::fs::read_to_string(s.file()).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    // Pi 1.6's `estimateMessagesTokens` of the context after it: the stored prompt/tool
    // checkpoint, the summary's text, the kept messages.
    let messages = s.messages();
    assert!(
        matches!(&messages[0], pi_ai::Message::User(_)),
        "the summary first"
    );
    let checkpoint = pi_core::compaction::pi_estimate_tokens(&last["systemMessage"]);
    let summary = (result.summary.encode_utf16().count() as u64).div_ceil(4);
    let kept: u64 = messages
        .iter()
        .skip(1)
        .map(pi_core::compaction::estimate_tokens)
        .sum();
    assert!(checkpoint > 0 && summary > 0 && kept > 0);
    assert_eq!(
        result.estimated_tokens_after,
        Some(checkpoint + summary + kept)
    );
    assert_eq!(result.usage, Some(pi_ai::Usage::default()));
    let keys: Vec<&str> = last
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "type",
            "id",
            "parentId",
            "timestamp",
            "summary",
            "firstKeptEntryId",
            "tokensBefore",
            "details",
            "usage",
            "fromHook",
            "systemMessage"
        ]
    );
    assert_eq!(
        last["usage"],
        serde_json::to_value(pi_ai::Usage::default()).unwrap()
    );
}

/// Pi 1.6's `agent_settled`: once per prompt, after the last run's `agent_end` — also when a
/// follow-up queued during the run makes the harness run again on its own — with `aborted`
/// telling a cancelled run from a finished one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_settled_comes_once_after_the_harness_stops_on_its_own() {
    let (root, ws) = workspace("settled");
    let (s, seen) = session(
        &root,
        ws,
        scripted(json!([
            {"text": "one", "delayMs": 300},
            {"text": "two"},
            {"text": "three", "delayMs": 5000}
        ])),
    );
    s.prompt("go", Vec::new(), None, None).await.unwrap();
    s.queue_text("after", Vec::new(), DeliverAs::FollowUp)
        .await
        .unwrap();
    s.wait_for_idle().await;
    let tail = |seen: &Seen| -> Vec<String> {
        seen.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e.as_str(), "agent_start" | "agent_end" | "agent_settled"))
            .cloned()
            .collect()
    };
    assert_eq!(tail(&seen), ["agent_start", "agent_end", "agent_settled"]);
    // An aborted run settles with `aborted: true`.
    let settled = Arc::new(Mutex::new(Vec::new()));
    struct Settled(Arc<Mutex<Vec<bool>>>);
    #[async_trait]
    impl pi_core::agent::EventSink for Settled {
        async fn emit(&self, event: AgentEvent) {
            if let AgentEvent::AgentSettled { aborted } = event {
                self.0.lock().unwrap().push(aborted);
            }
        }
    }
    let _sub = s.subscribe(Arc::new(Settled(settled.clone())));
    s.prompt("slow", Vec::new(), None, None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.abort().await;
    s.wait_for_idle().await;
    assert_eq!(*settled.lock().unwrap(), [true]);
    assert_eq!(
        serde_json::to_value(AgentEvent::AgentSettled { aborted: true }).unwrap(),
        json!({"type": "agent_settled", "aborted": true})
    );
}

/// Pi 1.6's `defaultTools`: `-name` removes a built-in tool, a plain list selects the tools,
/// `+name` puts one back (`todo` is the extension's, left on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_tools_select_and_remove_built_in_tools() {
    for (setting, want) in [
        (
            json!(["-grep", "-find", "-ls"]),
            vec!["read", "bash", "edit", "write", "todo"],
        ),
        (
            json!(["read", "bash", "+ls"]),
            vec!["read", "bash", "ls", "todo"],
        ),
    ] {
        let (root, ws) = workspace("default-tools");
        std::fs::write(
            root.join("agent/settings.json"),
            json!({ "defaultTools": setting }).to_string(),
        )
        .unwrap();
        let (s, _seen) = session(&root, ws, scripted(json!([])));
        let names: Vec<String> = s.config().tools.iter().map(|t| t.spec().name).collect();
        assert_eq!(names, want, "{setting}");
    }
}

/// Pi 1.6 restores the recorded tools at tree navigation too (`navigateTree` calls
/// `_restoreToolsFromTranscript`): a branch that ran with `defaultTools` `read`, `bash` gets
/// those back when the leaf moves to it, whatever the setting says now; moving back to the
/// branch that ran with every tool gives every tool again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_to_another_branch_restores_its_recorded_tools() {
    let (root, ws) = workspace("branch-tools");
    let settings = root.join("agent/settings.json");
    std::fs::write(
        &settings,
        json!({"defaultTools": ["read", "bash"]}).to_string(),
    )
    .unwrap();
    let (s, _seen) = session(
        &root,
        ws,
        scripted(json!([{"text": "one"}, {"text": "two"}])),
    );
    let names = || -> Vec<String> { s.config().tools.iter().map(|t| t.spec().name).collect() };
    s.prompt("one", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    let first = s.tree().unwrap().1;
    std::fs::remove_file(&settings).unwrap();
    let all = [
        "read", "bash", "edit", "write", "grep", "find", "ls", "todo",
    ];
    assert_eq!(names(), all);
    s.prompt("two", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    let second = s.tree().unwrap().1;
    s.branch(first.as_deref(), false, None).await.unwrap();
    assert_eq!(names(), ["read", "bash", "todo"]);
    s.branch(second.as_deref(), false, None).await.unwrap();
    assert_eq!(names(), all);
    s.close().await;
}

/// EDIT-08 across prompts: the model reads `f` in one prompt, the file changes on disk, and
/// its edit in the next prompt is refused saying so, with the lines that changed (each run
/// builds its tools afresh; what the model read is the session's). The file keeps the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_in_a_later_prompt_is_refused_when_the_file_changed_since_the_read() {
    let (root, ws) = workspace("stale");
    std::fs::write(root.join("f"), "x = 1\ny = 2\n").unwrap();
    let (s, _seen) = session(
        &root,
        ws,
        scripted(json!([
            {"toolCalls": [{"name": "read", "arguments": {"path": "f"}}]},
            {"text": "I read it."},
            {"toolCalls": [{"name": "edit", "arguments": {"path": "f", "edits": [{"oldText": "y = 2", "newText": "y = 5"}]}}]},
            {"text": "I will read it again."}
        ])),
    );
    s.prompt("read f", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    std::fs::write(root.join("f"), "x = 1\ny = 3\n").unwrap();
    s.prompt("set y to 5", Vec::new(), None, None)
        .await
        .unwrap();
    s.wait_for_idle().await;
    let results: Vec<(String, bool)> = s
        .messages()
        .into_iter()
        .filter_map(|m| match m {
            pi_ai::Message::ToolResult(r) => Some(r),
            _ => None,
        })
        .map(|r| match &r.content[0] {
            pi_ai::ContentBlock::Text(t) => (t.text.clone(), r.is_error),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        results,
        vec![
            ("x = 1\ny = 2\n".to_string(), false),
            ("f changed since you read it: it was changed on disk (the user, a command or another program changed the file). Nothing was changed by this edit. Read f again and redo the edit against its current text.\n\nLines changed since your read (-N: line N of the text you read, +N: line N of the current text):\n-2 y = 2\n+2 y = 3\n\nClosest text in the file, lines 2-2 (→ is a tab, · a space):\n    2  y·=·3\nYour oldText:\n       y·=·2".to_string(), true),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(root.join("f")).unwrap(),
        "x = 1\ny = 3\n"
    );
}

/// An editor offers *Retry* the moment it sees a failed run's `agent_end`; the loop still
/// settles its state then (here held 300 ms by a listener). `continue_run` sent at that
/// moment waits for it instead of calling the session busy; a custom message that triggers a
/// turn then starts (or joins) a run that answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_and_a_custom_message_sent_as_agent_end_arrives_are_not_refused_as_busy() {
    let (root, ws) = workspace("continue-at-end");
    let (s, seen) = session(
        &root,
        ws,
        scripted(json!([
            {"text": "half", "stopReason": "error"},
            {"text": "recovered"},
            {"text": "tested"},
            {"text": "noted"}
        ])),
    );
    *seen.hold_end.lock().unwrap() = Duration::from_millis(300);
    let (tx, rx) = tokio::sync::oneshot::channel();
    *seen.at_end.lock().unwrap() = Some(tx);
    s.prompt("fix the bug", Vec::new(), None, None)
        .await
        .unwrap();
    rx.await.unwrap();
    assert!(
        s.is_streaming(),
        "the run is still ending while its listener holds agent_end"
    );
    let run_id = s.continue_run().await.unwrap();
    assert!(!run_id.is_empty());
    s.wait_for_idle().await;

    let (tx, rx) = tokio::sync::oneshot::channel();
    *seen.at_end.lock().unwrap() = Some(tx);
    s.prompt("and the test", Vec::new(), None, None)
        .await
        .unwrap();
    rx.await.unwrap();
    let sent = s
        .send_custom_message(CustomMessage {
            custom_type: "note".into(),
            content: json!("a note"),
            display: true,
            details: None,
            deliver_as: None,
            trigger_turn: true,
        })
        .await
        .unwrap();
    assert!(sent.run_id.is_some(), "{sent:?}");
    s.wait_for_idle().await;
    let replies: Vec<(String, String)> = s
        .messages()
        .iter()
        .filter_map(|m| match m {
            pi_ai::types::Message::Assistant(a) => Some((format!("{:?}", a.stop_reason), a.text())),
            _ => None,
        })
        .collect();
    assert_eq!(
        replies,
        vec![
            ("Error".to_string(), "half".to_string()),
            ("Stop".to_string(), "recovered".to_string()),
            ("Stop".to_string(), "tested".to_string()),
            ("Stop".to_string(), "noted".to_string()),
        ]
    );
}

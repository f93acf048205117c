//! The built-in `todo` and `plan-mode` extensions in a live [`AgentSession`] without stdio:
//! the scripted model calls `todo`, writes a `Plan:` in plan mode, the user's answer (through
//! the product's `ExtensionUi`) executes it, `[DONE:n]` markers complete it; every change
//! reaches the product's listener as `Notice::Plan`, and a branch rebuilds the list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pi_ai::models::SCRIPTED_API;
use pi_ai::Model;
use pi_core::agent::{AgentEvent, WeakAgent};
use pi_core::approval::{ApprovalPolicy, Gate};
use pi_core::extension::plan::{PlanMode, PlanState, TodoStatus};
use pi_core::extension::{ExtensionErrorInfo, ExtensionUi, UiRequest, UiResponse};
use pi_core::fs::{DiskFs, Fs};
use pi_core::harness::{AgentSession, Notice, SessionListener, SessionSetup, Tracker};
use pi_core::resources::WorkspaceConfig;
use pi_core::settings::Settings;
use pi_core::tools::BeforeBash;
use serde_json::{json, Value};

mod common;
use common::tmp_dir;

#[derive(Default)]
struct Seen {
    plans: Mutex<Vec<PlanState>>,
    asked: Mutex<Vec<UiRequest>>,
    /// The session, to read its board when `agent_end` arrives.
    session: std::sync::OnceLock<std::sync::Weak<AgentSession>>,
    /// The plan mode as the board held it when each `agent_end` reached this listener.
    modes_at_end: Mutex<Vec<PlanMode>>,
}

#[async_trait]
impl SessionListener for Seen {
    async fn event(&self, event: AgentEvent, notices: Vec<Notice>) {
        if matches!(event, AgentEvent::AgentEnd { .. }) {
            if let Some(s) = self.session.get().and_then(std::sync::Weak::upgrade) {
                let mode = s.plan().unwrap().state().mode;
                self.modes_at_end.lock().unwrap().push(mode);
            }
        }
        for n in notices {
            self.notice(n).await;
        }
    }
    async fn notice(&self, notice: Notice) {
        if let Notice::Plan(s) = notice {
            self.plans.lock().unwrap().push(s);
        }
    }
}

/// A user who answers every `select` with `answer`.
struct User {
    answer: String,
    seen: Arc<Seen>,
}

#[async_trait]
impl ExtensionUi for User {
    fn has_ui(&self) -> bool {
        true
    }
    async fn ui(&self, _extension: &str, request: UiRequest) -> UiResponse {
        let dialog = request.is_dialog();
        self.seen.asked.lock().unwrap().push(request);
        if dialog {
            UiResponse {
                value: Some(self.answer.clone()),
                ..Default::default()
            }
        } else {
            UiResponse::default()
        }
    }
    async fn extension_error(&self, e: ExtensionErrorInfo) {
        panic!("extension error: {e:?}");
    }
}

struct Setup {
    root: PathBuf,
    seen: Arc<Seen>,
    answer: String,
}

impl SessionSetup for Setup {
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
        Arc::new(User {
            answer: self.answer.clone(),
            seen: self.seen.clone(),
        })
    }
    fn listeners(&self, _session_id: &str, _agent: &WeakAgent) -> Vec<Arc<dyn SessionListener>> {
        vec![self.seen.clone()]
    }
}

fn session(root: &Path, responses: Value, answer: &str) -> (Arc<AgentSession>, Arc<Seen>) {
    std::fs::create_dir_all(root.join("agent")).unwrap();
    let ws = Arc::new(WorkspaceConfig::new(
        root.to_path_buf(),
        Some(root.join("agent")),
        false,
    ));
    let model = Model {
        script: Some(Arc::new(
            serde_json::from_value(json!({ "responses": responses })).unwrap(),
        )),
        ..Model::new(SCRIPTED_API, "scripted", "demo", "")
    };
    let seen = Arc::new(Seen::default());
    let setup = Arc::new(Setup {
        root: root.to_path_buf(),
        seen: seen.clone(),
        answer: answer.into(),
    });
    let s = AgentSession::create(ws, setup, model, None).unwrap();
    seen.session.set(Arc::downgrade(&s)).unwrap();
    (s, seen)
}

fn items(s: &PlanState) -> Vec<(u64, &str, bool, TodoStatus)> {
    s.todos
        .iter()
        .map(|t| (t.id, t.text.as_str(), t.done, t.status))
        .collect()
}

/// Waits until the board's state satisfies `cond`.
async fn until(s: &AgentSession, cond: impl Fn(&PlanState) -> bool) -> PlanState {
    for _ in 0..500 {
        let st = s.plan().unwrap().state();
        if cond(&st) {
            return st;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never reached; now {:?}", s.plan().unwrap().state());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todo_calls_plan_execute_and_done_markers() {
    let root = tmp_dir("pi-plan-core-");
    let (s, seen) = session(
        &root,
        json!([
            {"toolCalls": [{"name": "todo", "arguments": {"action": "add", "text": "Old item"}}]},
            {"text": "Added."},
            {"text": "Plan:\n1. Read the main module\n2. Rename the helper function\n"},
            {"text": "Read it. [DONE:1]"},
            {"text": "Renamed. [DONE:2] All steps done."}
        ]),
        "Execute the plan (track progress)",
    );
    s.prompt("add a todo", Vec::new(), None, None)
        .await
        .unwrap();
    s.wait_for_idle().await;
    let added = s.plan().unwrap().state();
    assert_eq!(
        items(&added),
        vec![(1, "Old item", false, TodoStatus::InProgress)]
    );
    let after_todo = s.tree().unwrap().1.unwrap();

    s.plan().unwrap().set_plan_mode(true).await.unwrap();
    s.prompt("plan it", Vec::new(), None, None).await.unwrap();
    // The plan replaces the list, the user executes it, the first step gets done.
    let st = until(&s, |st| st.completed == 1).await;
    assert_eq!(st.mode, PlanMode::Executing);
    assert_eq!(
        items(&st),
        vec![
            (1, "Main module", true, TodoStatus::Completed),
            (
                2,
                "Rename the helper function",
                false,
                TodoStatus::InProgress
            )
        ]
    );
    s.wait_for_idle().await;
    s.prompt("continue", Vec::new(), None, None).await.unwrap();
    s.wait_for_idle().await;
    let st = until(&s, |st| st.mode == PlanMode::Off).await;
    assert_eq!((st.completed, st.total), (2, 2));
    // Pi's order: the extensions' handlers run before the listeners get an event, so the
    // listener that sees the last run's `agent_end` sees the plan finished by plan mode's
    // `agent_end` handler (runs: the todo call, the plan, its execution, "continue"; the
    // plan's end is left out: the user's answer comes from a task of its own).
    let modes = seen.modes_at_end.lock().unwrap().clone();
    assert_eq!(modes.len(), 4, "{modes:?}");
    assert_eq!(
        [modes[0], modes[2], modes[3]],
        [PlanMode::Off, PlanMode::Executing, PlanMode::Off]
    );
    // The question as Pi's example asks it.
    let asked = seen.asked.lock().unwrap().clone();
    assert!(asked.contains(&UiRequest::Select {
        title: "Plan mode - what next?".into(),
        options: vec![
            "Execute the plan (track progress)".into(),
            "Stay in plan mode".into(),
            "Refine the plan".into()
        ],
        timeout: None,
    }));
    // The listener saw the changes, ending with this state (told from its own task).
    for _ in 0..500 {
        if seen.plans.lock().unwrap().last() == Some(&st) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let plans = seen.plans.lock().unwrap().clone();
    assert_eq!(plans.last(), Some(&st));
    assert!(plans.iter().any(|p| p.mode == PlanMode::Plan));
    // Back on the branch right after the todo call: its list, not the plan's.
    s.branch(Some(&after_todo), false, None).await.unwrap();
    assert_eq!(s.plan().unwrap().state(), added);
}

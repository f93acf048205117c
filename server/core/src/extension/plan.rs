//! The one plan/todo list of a session, shared by the built-in `todo` and `plan-mode`
//! extensions (Pi's `examples/extensions/todo.ts` and `examples/extensions/plan-mode/`), and
//! what an edge subscribes to ([`PlanBoard::subscribe`]; the session also tells its listeners
//! every change as [`crate::harness::Notice::Plan`]).
//!
//! Where the list lives (so a branch or a rewind has exactly the list of its point in
//! history): the `details` of `todo` tool results (Pi's `TodoDetails`: `{action, todos: [{id,
//! text, done}], nextId, error?}`) and the `custom` entries `plan-mode` (Pi's `PlanModeState`:
//! `{enabled, todos: [{step, text, completed}], executing, toolsBeforePlanMode?}`). The list is
//! rebuilt from the active branch: the last of these two on the branch wins. Fields Pi's readers
//! do not know (`status`, `priority`, `id` and `done` in the plan-mode entry, `nextId`) are only
//! added, never in place of Pi's.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::ExtensionContext;

/// The `customType` of the plan-mode state entries (Pi's example's).
pub const PLAN_MODE_ENTRY: &str = "plan-mode";
/// The entries the state is rebuilt from: `custom` entries and the `todo` tool's results
/// (a long session's other results are not read back from its file).
pub const STATE_KINDS: &[&str] = &["custom", "toolResult:todo"];
/// The tool name of the todo extension (Pi's example's).
pub const TODO_TOOL: &str = "todo";

/// Where an item stands (ACP's `PlanEntryStatus` names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    #[default]
    Pending,
    InProgress,
    Completed,
}

/// How important an item is (ACP's `PlanEntryPriority` names). Items get `medium` unless
/// stored otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TodoPriority {
    High,
    #[default]
    Medium,
    Low,
}

/// One item of the list: Pi's `{id, text, done}` plus `status` and `priority`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TodoItem {
    /// 1.. in order of creation (plan steps are 1..n).
    pub id: u64,
    pub text: String,
    pub done: bool,
    /// Derived from `done` and the position: the first open item after the last done one is
    /// `in_progress` (none while the plan is being written in plan mode).
    #[serde(default)]
    pub status: TodoStatus,
    #[serde(default)]
    pub priority: TodoPriority,
}

/// The session's mode (Pi's example's `planModeEnabled` / `executionMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanMode {
    /// Normal: every tool.
    #[default]
    Off,
    /// Plan mode: `edit` / `write` off, the search tools on, bash's allow-list; the model
    /// writes a numbered `Plan:`.
    Plan,
    /// Executing an accepted plan: every tool, `[DONE:n]` markers tracked.
    Executing,
}

/// The plan/todo state of a session as the wire carries it (`agent/plan`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanState {
    pub mode: PlanMode,
    pub todos: Vec<TodoItem>,
    /// The id the next added item gets.
    pub next_id: u64,
    /// How many items are done.
    pub completed: usize,
    /// How many items there are.
    pub total: usize,
    /// Whether plan mode can be switched (the `plan-mode` extension is on).
    pub plan_mode_available: bool,
}

#[derive(Default)]
struct Inner {
    todos: Vec<TodoItem>,
    next_id: u64,
    enabled: bool,
    executing: bool,
    /// Tool name → kept in plan mode, from the runs' tool lists.
    read_only: Vec<(String, bool)>,
    /// The tools offered when plan mode was turned on (Pi's example's `toolsBeforePlanMode`),
    /// the loadout leaving it restores; `None` outside plan mode.
    tools_before: Option<Vec<String>>,
}

/// The shared list and mode of one session; cheap to share (`Arc`).
pub struct PlanBoard {
    inner: Mutex<Inner>,
    tx: watch::Sender<PlanState>,
    /// The plan-mode extension's context (to persist and ask from [`PlanBoard::set_plan_mode`]).
    pub(crate) plan_ctx: OnceLock<ExtensionContext>,
    /// Whether `/todos` is registered already (by one of the two extensions).
    pub(crate) todos_command: std::sync::atomic::AtomicBool,
    /// Whether the plan-mode extension is loaded (the mode can be switched).
    pub(crate) plan_mode_loaded: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for PlanBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanBoard")
            .field("state", &self.state())
            .finish()
    }
}

impl Default for PlanBoard {
    fn default() -> Self {
        PlanBoard {
            inner: Mutex::new(Inner {
                next_id: 1,
                ..Inner::default()
            }),
            tx: watch::Sender::new(PlanState {
                next_id: 1,
                ..PlanState::default()
            }),
            plan_ctx: OnceLock::new(),
            todos_command: Default::default(),
            plan_mode_loaded: Default::default(),
        }
    }
}

/// Sets every item's `status` from `done` and its position (see [`TodoItem::status`]).
fn set_statuses(todos: &mut [TodoItem], planning: bool) {
    let start = todos.iter().rposition(|t| t.done).map_or(0, |i| i + 1);
    let current = (!planning)
        .then(|| todos.iter().skip(start).position(|t| !t.done))
        .flatten()
        .map(|i| i + start);
    for (i, t) in todos.iter_mut().enumerate() {
        t.status = if t.done {
            TodoStatus::Completed
        } else if Some(i) == current {
            TodoStatus::InProgress
        } else {
            TodoStatus::Pending
        };
    }
}

impl Inner {
    fn state(&self) -> PlanState {
        let mut todos = self.todos.clone();
        set_statuses(&mut todos, self.enabled);
        PlanState {
            mode: if self.enabled {
                PlanMode::Plan
            } else if self.executing {
                PlanMode::Executing
            } else {
                PlanMode::Off
            },
            completed: todos.iter().filter(|t| t.done).count(),
            total: todos.len(),
            todos,
            next_id: self.next_id,
            plan_mode_available: false,
        }
    }
}

/// Reads `{id, text, done, priority?}` items (the todo tool's details).
fn todos_from_details(v: &Value) -> Option<Vec<TodoItem>> {
    v.as_array()?
        .iter()
        .map(|t| {
            Some(TodoItem {
                id: t["id"].as_f64()? as u64,
                text: t["text"].as_str()?.to_string(),
                done: t["done"].as_bool().unwrap_or(false),
                status: TodoStatus::Pending,
                priority: serde_json::from_value(t["priority"].clone()).unwrap_or_default(),
            })
        })
        .collect()
}

/// Reads Pi's plan-mode items `{step, text, completed}` (our `id` / `done` when present).
fn todos_from_plan_entry(v: &Value) -> Option<Vec<TodoItem>> {
    v.as_array()?
        .iter()
        .map(|t| {
            Some(TodoItem {
                id: t["id"].as_f64().or_else(|| t["step"].as_f64())? as u64,
                text: t["text"].as_str()?.to_string(),
                done: t["done"]
                    .as_bool()
                    .or_else(|| t["completed"].as_bool())
                    .unwrap_or(false),
                status: TodoStatus::Pending,
                priority: serde_json::from_value(t["priority"].clone()).unwrap_or_default(),
            })
        })
        .collect()
}

impl PlanBoard {
    /// A new, empty board.
    pub fn new() -> Arc<Self> {
        Arc::new(PlanBoard::default())
    }

    /// The state now.
    pub fn state(&self) -> PlanState {
        let mut s = self.inner.lock().state();
        s.plan_mode_available = self.has_plan_mode();
        s
    }

    /// A receiver of the state: `changed()` wakes on every change (an edge's subscription;
    /// a receiver that lags sees the newest state).
    pub fn subscribe(&self) -> watch::Receiver<PlanState> {
        self.tx.subscribe()
    }

    /// Whether plan mode is on.
    pub fn plan_mode(&self) -> bool {
        self.inner.lock().enabled
    }

    /// Whether the plan-mode extension is loaded.
    pub fn has_plan_mode(&self) -> bool {
        self.plan_mode_loaded
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Tells subscribers the state, if it changed.
    pub(crate) fn publish(&self) {
        let state = self.state();
        self.tx.send_if_modified(|s| {
            if *s == state {
                false
            } else {
                *s = state;
                true
            }
        });
    }

    /// Runs `f` on the state, then publishes.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut BoardMut) -> T) -> T {
        let out = {
            let mut g = self.inner.lock();
            let mut view = BoardMut { inner: &mut g };
            f(&mut view)
        };
        self.publish();
        out
    }

    /// Rebuilds the list and the mode from the active branch's raw entries (oldest first): the
    /// last `todo` result with details or `plan-mode` entry wins.
    pub fn rebuild(&self, branch: &[Value]) {
        {
            let mut g = self.inner.lock();
            g.todos.clear();
            g.next_id = 1;
            g.enabled = false;
            g.executing = false;
            g.tools_before = None;
            for e in branch {
                match e["type"].as_str() {
                    Some("message") => {
                        let m = &e["message"];
                        if m["role"] != "toolResult" || m["toolName"] != TODO_TOOL {
                            continue;
                        }
                        let d = &m["details"];
                        if let Some(todos) = todos_from_details(&d["todos"]) {
                            g.next_id = d["nextId"]
                                .as_f64()
                                .map(|n| n as u64)
                                .unwrap_or_else(|| next_after(&todos));
                            g.todos = todos;
                        }
                    }
                    Some("custom") if e["customType"] == PLAN_MODE_ENTRY => {
                        let d = &e["data"];
                        g.enabled = d["enabled"].as_bool().unwrap_or(false);
                        g.executing = d["executing"].as_bool().unwrap_or(false);
                        g.tools_before = tool_names(&d["toolsBeforePlanMode"]);
                        if let Some(todos) = todos_from_plan_entry(&d["todos"]) {
                            g.next_id = d["nextId"]
                                .as_f64()
                                .map(|n| n as u64)
                                .unwrap_or_else(|| next_after(&todos));
                            g.todos = todos;
                        }
                    }
                    _ => {}
                }
            }
        }
        self.publish();
    }

    /// The data of a `plan-mode` entry for the state now (Pi's shape plus our fields;
    /// `toolsBeforePlanMode` only while it is set, as Pi's `JSON.stringify` leaves out an
    /// `undefined` one).
    pub(crate) fn entry_data(&self) -> Value {
        let g = self.inner.lock();
        let s = g.state();
        let mut data = json!({
            "enabled": g.enabled,
            "todos": s.todos.iter().map(|t| json!({
                "step": t.id, "text": t.text, "completed": t.done,
                "id": t.id, "done": t.done, "status": t.status, "priority": t.priority,
            })).collect::<Vec<_>>(),
            "executing": g.executing,
            "nextId": g.next_id,
        });
        if let Some(tools) = &g.tools_before {
            data["toolsBeforePlanMode"] = json!(tools);
        }
        data
    }

    /// The names of every tool the session's runs have offered so far, in the order first
    /// seen (before plan mode's filter): what plan mode records when it is turned on.
    pub(crate) fn offered_tools(&self) -> Vec<String> {
        self.inner
            .lock()
            .read_only
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Which of `names` plan mode keeps (recorded when a run's tools are chosen).
    pub(crate) fn set_read_only<'a>(
        &self,
        tools: impl IntoIterator<Item = (std::borrow::Cow<'a, str>, bool)>,
    ) {
        // The run's own tools and its MCP tools are filtered apart (the latter before each
        // model request): each call adds to what is known, by name.
        let mut g = self.inner.lock();
        for (name, ro) in tools {
            match g.read_only.iter_mut().find(|(n, _)| **n == *name) {
                Some(slot) => slot.1 = ro,
                None => g.read_only.push((name.into_owned(), ro)),
            }
        }
    }

    /// Whether plan mode blocks the tool `name` (one plan mode turns off, `edit` / `write`,
    /// still offered by a run that started before plan mode; `bash` is checked command by
    /// command instead).
    pub(crate) fn blocks(&self, name: &str) -> bool {
        let g = self.inner.lock();
        g.enabled
            && name != "bash"
            && g.read_only
                .iter()
                .find(|(n, _)| n == name)
                .is_some_and(|(_, ro)| !ro)
    }
}

/// The tool names of a `toolsBeforePlanMode` array (`None`: not an array).
pub(crate) fn tool_names(v: &Value) -> Option<Vec<String>> {
    v.as_array().map(|a| {
        a.iter()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect()
    })
}

/// The id after the largest of `todos`.
fn next_after(todos: &[TodoItem]) -> u64 {
    todos.iter().map(|t| t.id).max().unwrap_or(0) + 1
}

/// Mutable access to a board's list and mode inside [`PlanBoard::with`].
pub(crate) struct BoardMut<'a> {
    inner: &'a mut Inner,
}

impl BoardMut<'_> {
    pub(crate) fn todos(&mut self) -> &mut Vec<TodoItem> {
        &mut self.inner.todos
    }
    pub(crate) fn next_id(&mut self) -> &mut u64 {
        &mut self.inner.next_id
    }
    pub(crate) fn enabled(&mut self) -> &mut bool {
        &mut self.inner.enabled
    }
    pub(crate) fn executing(&mut self) -> &mut bool {
        &mut self.inner.executing
    }
    pub(crate) fn tools_before(&mut self) -> &mut Option<Vec<String>> {
        &mut self.inner.tools_before
    }
    /// The list with statuses (as the tool's details carry it).
    pub(crate) fn snapshot(&self) -> Vec<TodoItem> {
        self.inner.state().todos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: u64, done: bool) -> TodoItem {
        TodoItem {
            id,
            text: format!("step {id}"),
            done,
            status: TodoStatus::Pending,
            priority: TodoPriority::Medium,
        }
    }

    #[test]
    fn the_first_open_item_after_the_last_done_one_is_in_progress() {
        let mut t = vec![item(1, true), item(2, false), item(3, true), item(4, false)];
        set_statuses(&mut t, false);
        let s: Vec<_> = t.iter().map(|t| t.status).collect();
        use TodoStatus::*;
        assert_eq!(s, vec![Completed, Pending, Completed, InProgress]);
        set_statuses(&mut t, true);
        let s: Vec<_> = t.iter().map(|t| t.status).collect();
        assert_eq!(s, vec![Completed, Pending, Completed, Pending]);
        let mut t = vec![item(1, false), item(2, false)];
        set_statuses(&mut t, false);
        assert_eq!(t[0].status, InProgress);
        assert_eq!(t[1].status, Pending);
    }

    #[test]
    fn rebuild_takes_the_last_of_todo_results_and_plan_entries() {
        let board = PlanBoard::new();
        let branch = vec![
            json!({"type": "message", "message": {"role": "toolResult", "toolName": "todo",
                "details": {"action": "add", "todos": [{"id": 1, "text": "a", "done": false}], "nextId": 2}}}),
            json!({"type": "custom", "customType": "plan-mode", "data": {"enabled": false, "executing": true,
                "todos": [{"step": 1, "text": "x", "completed": true}, {"step": 2, "text": "y", "completed": false}]}}),
        ];
        board.rebuild(&branch);
        let s = board.state();
        assert_eq!(s.mode, PlanMode::Executing);
        assert_eq!(
            s.todos
                .iter()
                .map(|t| (t.id, t.text.as_str(), t.done, t.status))
                .collect::<Vec<_>>(),
            vec![
                (1, "x", true, TodoStatus::Completed),
                (2, "y", false, TodoStatus::InProgress)
            ]
        );
        assert_eq!((s.next_id, s.completed, s.total), (3, 1, 2));
        board.rebuild(&branch[..1]);
        let s = board.state();
        assert_eq!(s.mode, PlanMode::Off);
        assert_eq!((s.next_id, s.total), (2, 1));
    }
}

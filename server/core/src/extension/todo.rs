//! The built-in `todo` extension: Pi's `examples/extensions/todo.ts` in Rust. The `todo` tool
//! (`{action: list | add | toggle | clear, text?, id?}`, Pi's schema, description and result
//! texts) keeps the session's list in its results' `details` (`{action, todos: [{id, text,
//! done, status, priority}], nextId, error?}`), so a branch or a rewind has the list of its
//! point in history and Pi's example rebuilds the same list from a file written here. The
//! list is the one plan mode seeds ([`super::plan`]). `/todos` shows it.

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::ToolSpec;
use serde_json::{json, Value};

use super::plan::{PlanBoard, TODO_TOOL};
use super::{Extension, ExtensionApi, ExtensionContext, NotifyType};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};

/// The extension's name in `builtinExtensions`.
pub const NAME: &str = "todo";

/// The `todo` extension over a session's shared [`PlanBoard`].
pub struct TodoExtension {
    pub(crate) board: Arc<PlanBoard>,
}

struct TodoTool {
    board: Arc<PlanBoard>,
}

/// The tool's result: Pi's text, and details with the list after the action.
fn output(board: &PlanBoard, action: &str, text: String, error: Option<String>) -> ToolOutput {
    board.with(|b| {
        let mut details = json!({
            "action": action,
            "todos": b.snapshot(),
            "nextId": *b.next_id(),
        });
        if let Some(e) = error {
            details["error"] = json!(e);
        }
        ToolOutput {
            content: vec![pi_ai::ContentBlock::text(text)],
            details: Some(details),
            terminate: false,
            ..Default::default()
        }
    })
}

#[async_trait]
impl Tool for TodoTool {
    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(TODO_TOOL)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            constrained_sampling: None,
            name: TODO_TOOL.into(),
            description: "Manage a todo list. Actions: list, add (text), toggle (id), clear".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["list", "add", "toggle", "clear"]},
                    "text": {"type": "string", "description": "Todo text (for add)"},
                    "id": {"type": "number", "description": "Todo ID (for toggle)"},
                },
                "required": ["action"],
            }),
        }
    }

    /// Each call sees the list the one before it left: a batch with `todo` runs in order.
    fn sequential(&self) -> bool {
        true
    }

    /// It changes only the list, never a file: never asked about, and kept in plan mode.
    fn approval_kind(&self) -> crate::approval::ToolKind {
        crate::approval::ToolKind::ReadOnly
    }

    async fn execute(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let action = args["action"].as_str().unwrap_or_default().to_string();
        let b = &self.board;
        Ok(match action.as_str() {
            "list" => {
                let text = b.with(|b| {
                    let t = b.snapshot();
                    if t.is_empty() {
                        "No todos".to_string()
                    } else {
                        t.iter()
                            .map(|t| {
                                format!(
                                    "[{}] #{}: {}",
                                    if t.done { "x" } else { " " },
                                    t.id,
                                    t.text
                                )
                            })
                            .collect::<Vec<_>>()
                            .join("\n")
                    }
                });
                output(b, "list", text, None)
            }
            "add" => match args["text"].as_str().filter(|t| !t.is_empty()) {
                None => output(
                    b,
                    "add",
                    "Error: text required for add".into(),
                    Some("text required".into()),
                ),
                Some(text) => {
                    let id = b.with(|b| {
                        let id = *b.next_id();
                        *b.next_id() += 1;
                        b.todos().push(super::plan::TodoItem {
                            id,
                            text: text.to_string(),
                            done: false,
                            status: Default::default(),
                            priority: Default::default(),
                        });
                        id
                    });
                    output(b, "add", format!("Added todo #{id}: {text}"), None)
                }
            },
            "toggle" => match args["id"].as_f64() {
                None => output(
                    b,
                    "toggle",
                    "Error: id required for toggle".into(),
                    Some("id required".into()),
                ),
                Some(id) => {
                    let found = b.with(|b| {
                        b.todos().iter_mut().find(|t| t.id as f64 == id).map(|t| {
                            t.done = !t.done;
                            (t.id, t.done)
                        })
                    });
                    let shown = js_number(id);
                    match found {
                        None => output(
                            b,
                            "toggle",
                            format!("Todo #{shown} not found"),
                            Some(format!("#{shown} not found")),
                        ),
                        Some((id, done)) => output(
                            b,
                            "toggle",
                            format!(
                                "Todo #{id} {}",
                                if done { "completed" } else { "uncompleted" }
                            ),
                            None,
                        ),
                    }
                }
            },
            "clear" => {
                let count = b.with(|b| {
                    let n = b.todos().len();
                    b.todos().clear();
                    *b.next_id() = 1;
                    n
                });
                output(b, "clear", format!("Cleared {count} todos"), None)
            }
            other => output(
                b,
                "list",
                format!("Unknown action: {other}"),
                Some(format!("unknown action: {other}")),
            ),
        })
    }
}

/// A number as JavaScript prints it (`3`, `2.5`).
fn js_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// The text `/todos` shows.
pub(crate) fn todos_text(board: &PlanBoard) -> String {
    let s = board.state();
    if s.todos.is_empty() {
        return "No todos yet. Ask the agent to add some!".into();
    }
    let mut out = format!("Todos: {}/{} completed", s.completed, s.total);
    for t in &s.todos {
        let mark = match t.status {
            super::plan::TodoStatus::Completed => "✓",
            super::plan::TodoStatus::InProgress => "▶",
            super::plan::TodoStatus::Pending => "○",
        };
        out.push_str(&format!("\n{mark} #{} {}", t.id, t.text));
    }
    out
}

/// Registers `/todos` once per session (both extensions would; Pi's examples each do).
pub(crate) fn register_todos_command(api: &mut ExtensionApi, board: &Arc<PlanBoard>) {
    if board
        .todos_command
        .swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        return;
    }
    let board = board.clone();
    api.register_command(
        "todos",
        Some("Show all todos on the current branch"),
        move |_args, ctx: ExtensionContext| {
            let text = todos_text(&board);
            async move {
                ctx.notify(&text, NotifyType::Info).await;
                Ok(())
            }
        },
    );
}

impl Extension for TodoExtension {
    fn name(&self) -> &str {
        NAME
    }

    fn register(&self, api: &mut ExtensionApi) -> Result<(), String> {
        api.register_tool(Arc::new(TodoTool {
            board: self.board.clone(),
        }));
        register_todos_command(api, &self.board);
        let board = self.board.clone();
        api.on_session_start(move |ctx| {
            board.rebuild(&ctx.branch_entries_of(super::plan::STATE_KINDS));
            Ok(())
        });
        let board = self.board.clone();
        api.on_session_tree(move |ctx| {
            board.rebuild(&ctx.branch_entries_of(super::plan::STATE_KINDS));
            Ok(())
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_names_itself_as_its_spec_does() {
        let t = TodoTool {
            board: PlanBoard::new(),
        };
        assert_eq!(
            (t.name().into_owned(), t.spec().name),
            ("todo".to_string(), "todo".to_string())
        );
    }
}

//! The built-in `plan-mode` extension: Pi's `examples/extensions/plan-mode/` in Rust.
//!
//! `/plan` (or [`PlanBoard::set_plan_mode`], a client's switch) changes the session's tools
//! as Pi 1.6.0's example does (`getPlanModeTools`): `edit` and `write` leave the tool list
//! from the next run (and are blocked if a running run still has them), every other active
//! tool stays but MCP tools not annotated `readOnlyHint: true` (plan mode is read-only), and `read`, `bash`, `grep`, `find`, `ls` (and a `questionnaire` tool) are
//! added when registered but off; `bash` runs only commands of Pi's example's allow-list. Each
//! prompt in plan mode carries Pi's hidden `plan-mode-context` message asking for a numbered
//! `Plan:`. At the end of a run the steps are extracted (they replace the session's todo list,
//! ids 1..n) and the user is asked "Execute the plan (track progress)" / "Stay in plan mode" /
//! "Refine the plan" (an extension `select`). Executing restores the tools and sends Pi's
//! `plan-mode-execute` message; `[DONE:n]` markers in the answers (and `todo` toggles) mark
//! steps done. The state is written as Pi's `plan-mode` custom entries.

use std::sync::Arc;

use regex::{Regex, RegexSet};
use serde_json::json;

use super::plan::{PlanBoard, PlanState, PLAN_MODE_ENTRY};
use super::{CustomMessage, Extension, ExtensionApi, ExtensionContext, NotifyType, ToolCallAction};
use crate::agent::{AgentEvent, Delivery, Tool};
use pi_ai::{ContentBlock, Message};

/// The extension's name in `builtinExtensions`.
pub const NAME: &str = "plan-mode";

/// The tools plan mode turns on when they are registered (Pi's example's `PLAN_MODE_TOOLS`),
/// in the order they are added after the active tools kept.
pub const PLAN_MODE_TOOLS: [&str; 6] = ["read", "bash", "grep", "find", "ls", "questionnaire"];
/// The tools plan mode turns off (Pi's example's `PLAN_MODE_DISABLED_TOOLS`).
pub const PLAN_MODE_DISABLED_TOOLS: [&str; 2] = ["edit", "write"];

/// The three answers of the question after a plan (Pi's example's wording).
pub const EXECUTE: &str = "Execute the plan (track progress)";
/// See [`EXECUTE`].
pub const STAY: &str = "Stay in plan mode";
/// See [`EXECUTE`].
pub const REFINE: &str = "Refine the plan";
/// The question's title.
pub const QUESTION: &str = "Plan mode - what next?";

/// The hidden message every prompt in plan mode carries (Pi's example's text, less the lines
/// about its `questionnaire` tool and `brave-search` skill, which are not here).
pub const PLAN_MODE_CONTEXT: &str = "[PLAN MODE ACTIVE]
You are in plan mode - a read-only exploration mode for safe code analysis.

Restrictions:
- Built-in edit and write tools are disabled
- Other currently active tools remain available
- Bash is restricted to an allowlist of read-only commands

Create a detailed numbered plan under a \"Plan:\" header:

Plan:
1. First step description
2. Second step description
...

Do NOT attempt to make changes - just describe what you would do.";

/// The `plan-mode` extension over a session's shared [`PlanBoard`].
pub struct PlanModeExtension {
    pub(crate) board: Arc<PlanBoard>,
}

// Pi's example's regular expressions, in three groups, each compiled when first needed: the
// bash allow-list when plan mode first checks a command, the `Plan:` extraction at the end of
// the first planning run, the progress markers when the first answer is read for them. Word
// boundaries and digits are ASCII, as JavaScript's `\b` and `\d` are (Pi's example is
// JavaScript); Unicode ones made compiling these the largest single cost of a short session
// (41 M of the 194 M instructions of a start and 50 tool rounds, callgrind). A pattern that did
// not compile leaves its group `None`: no command is safe, no step is read.

/// The bash allow-list (Pi's `DESTRUCTIVE_PATTERNS` and `SAFE_PATTERNS`).
struct BashPatterns {
    destructive: RegexSet,
    safe: RegexSet,
}

fn bash_patterns() -> Option<&'static BashPatterns> {
    static P: std::sync::OnceLock<Option<BashPatterns>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        Some(BashPatterns {
            destructive: RegexSet::new([
                r"(?i)(?-u:\b)rm(?-u:\b)", r"(?i)(?-u:\b)rmdir(?-u:\b)", r"(?i)(?-u:\b)mv(?-u:\b)", r"(?i)(?-u:\b)cp(?-u:\b)", r"(?i)(?-u:\b)mkdir(?-u:\b)",
                r"(?i)(?-u:\b)touch(?-u:\b)", r"(?i)(?-u:\b)chmod(?-u:\b)", r"(?i)(?-u:\b)chown(?-u:\b)", r"(?i)(?-u:\b)chgrp(?-u:\b)", r"(?i)(?-u:\b)ln(?-u:\b)",
                r"(?i)(?-u:\b)tee(?-u:\b)", r"(?i)(?-u:\b)truncate(?-u:\b)", r"(?i)(?-u:\b)dd(?-u:\b)", r"(?i)(?-u:\b)shred(?-u:\b)",
                r"(?i)(?-u:\b)npm\s+(install|uninstall|update|ci|link|publish)",
                r"(?i)(?-u:\b)yarn\s+(add|remove|install|publish)",
                r"(?i)(?-u:\b)pnpm\s+(add|remove|install|publish)",
                r"(?i)(?-u:\b)pip\s+(install|uninstall)",
                r"(?i)(?-u:\b)apt(-get)?\s+(install|remove|purge|update|upgrade)",
                r"(?i)(?-u:\b)brew\s+(install|uninstall|upgrade)",
                r"(?i)(?-u:\b)git\s+(add|commit|push|pull|merge|rebase|reset|checkout|branch\s+-[dD]|stash|cherry-pick|revert|tag|init|clone)",
                r"(?i)(?-u:\b)sudo(?-u:\b)", r"(?i)(?-u:\b)su(?-u:\b)", r"(?i)(?-u:\b)kill(?-u:\b)", r"(?i)(?-u:\b)pkill(?-u:\b)", r"(?i)(?-u:\b)killall(?-u:\b)",
                r"(?i)(?-u:\b)reboot(?-u:\b)", r"(?i)(?-u:\b)shutdown(?-u:\b)",
                r"(?i)(?-u:\b)systemctl\s+(start|stop|restart|enable|disable)",
                r"(?i)(?-u:\b)service\s+\S+\s+(start|stop|restart)",
                r"(?i)(?-u:\b)(vim?|nano|emacs|code|subl)(?-u:\b)",
        ])
            .ok()?,
            safe: RegexSet::new([
                r"^\s*cat(?-u:\b)", r"^\s*head(?-u:\b)", r"^\s*tail(?-u:\b)", r"^\s*less(?-u:\b)", r"^\s*more(?-u:\b)",
                r"^\s*grep(?-u:\b)", r"^\s*find(?-u:\b)", r"^\s*ls(?-u:\b)", r"^\s*pwd(?-u:\b)", r"^\s*echo(?-u:\b)",
                r"^\s*printf(?-u:\b)", r"^\s*wc(?-u:\b)", r"^\s*sort(?-u:\b)", r"^\s*uniq(?-u:\b)", r"^\s*diff(?-u:\b)",
                r"^\s*file(?-u:\b)", r"^\s*stat(?-u:\b)", r"^\s*du(?-u:\b)", r"^\s*df(?-u:\b)", r"^\s*tree(?-u:\b)",
                r"^\s*which(?-u:\b)", r"^\s*whereis(?-u:\b)", r"^\s*type(?-u:\b)", r"^\s*env(?-u:\b)", r"^\s*printenv(?-u:\b)",
                r"^\s*uname(?-u:\b)", r"^\s*whoami(?-u:\b)", r"^\s*id(?-u:\b)", r"^\s*date(?-u:\b)", r"^\s*cal(?-u:\b)",
                r"^\s*uptime(?-u:\b)", r"^\s*ps(?-u:\b)", r"^\s*top(?-u:\b)", r"^\s*htop(?-u:\b)", r"^\s*free(?-u:\b)",
                r"(?i)^\s*git\s+(status|log|diff|show|branch|remote|config\s+--get)",
                r"(?i)^\s*git\s+ls-",
                r"(?i)^\s*npm\s+(list|ls|view|info|search|outdated|audit)",
                r"(?i)^\s*yarn\s+(list|info|why|audit)",
                r"(?i)^\s*node\s+--version", r"(?i)^\s*python\s+--version",
                r"(?i)^\s*curl\s", r"(?i)^\s*wget\s+-O\s*-",
                r"^\s*jq(?-u:\b)", r"(?i)^\s*sed\s+-n", r"^\s*awk(?-u:\b)", r"^\s*rg(?-u:\b)", r"^\s*fd(?-u:\b)",
                r"^\s*bat(?-u:\b)", r"^\s*eza(?-u:\b)",
        ])
            .ok()?,
        })
    })
    .as_ref()
}

/// The `Plan:` section and its numbered steps (Pi's `extractTodoItems` and `cleanStepText`).
struct StepPatterns {
    plan_header: Regex,
    numbered: Regex,
    emphasis: Regex,
    code: Regex,
    verb: Regex,
    spaces: Regex,
}

fn step_patterns() -> Option<&'static StepPatterns> {
    static P: std::sync::OnceLock<Option<StepPatterns>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let r = |s: &str| Regex::new(s).ok();
        Some(StepPatterns {
            plan_header: r(r"(?i)\*{0,2}Plan:\*{0,2}\s*\n")?,
            numbered: r(r"(?m)^\s*([0-9]+)[.)]\s+(.+)$")?,
            emphasis: r(r"\*{1,2}([^*]+)\*{1,2}")?,
            code: r(r"`([^`]+)`")?,
            verb: r(r"(?i)^(Use|Run|Execute|Create|Write|Read|Check|Verify|Update|Modify|Add|Remove|Delete|Install)\s+(the\s+)?")?,
            spaces: r(r"\s+")?,
        })
    })
    .as_ref()
}

/// The progress markers: `[DONE:n]` and its variants (Pi's `extractDoneSteps`), and the whole
/// plan said done (Pi's `allStepsComplete`).
struct ProgressPatterns {
    done: [Regex; 3],
    all_done: [Regex; 2],
}

fn progress_patterns() -> Option<&'static ProgressPatterns> {
    static P: std::sync::OnceLock<Option<ProgressPatterns>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let r = |s: &str| Regex::new(s).ok();
        Some(ProgressPatterns {
            done: [
                r(r"(?i)\[DONE\s*:?\s*([0-9]+)\]")?,
                r(r"(?i)(?-u:\b)Done\s*:\s*([0-9]+)(?-u:\b)")?,
                r(r"(?i)(?-u:\b)Step\s*([0-9]+)\s+(?:is\s+)?(?:done|complete|completed|finished)(?-u:\b)")?,
            ],
            all_done: [
                r(r"(?i)(?:all|every)\s+steps?\s+(?:are|is\s+)?(?:done|complete|completed|finished)")?,
                r(r"(?i)(?-u:\b)(?:the\s+)?plan\s+(?:is\s+)?(?:complete|completed|done)(?-u:\b)")?,
            ],
        })
    })
    .as_ref()
}

/// Whether plan mode lets `bash` run `command` (Pi's `isSafeCommand`: on the allow-list and
/// nothing destructive, no output redirection).
pub fn is_safe_command(command: &str) -> bool {
    let Some(p) = bash_patterns() else {
        return false;
    };
    // Pi's `(^|[^<])>(?!>)` and `>>`: any `>` not right after `<`.
    let chars: Vec<char> = command.chars().collect();
    let redirect = command.contains(">>")
        || chars
            .iter()
            .enumerate()
            .any(|(i, c)| *c == '>' && (i == 0 || chars[i - 1] != '<'));
    !redirect && !p.destructive.is_match(command) && p.safe.is_match(command)
}

/// Pi's `cleanStepText`: markdown and a leading verb dropped, spaces collapsed, capitalised.
fn clean_step_text(p: &StepPatterns, text: &str) -> String {
    let t = p.emphasis.replace_all(text, "$1");
    let t = p.code.replace_all(&t, "$1");
    let t = p.verb.replace(&t, "");
    let t = p.spaces.replace_all(&t, " ");
    let t = t.trim();
    let mut c = t.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The numbered steps of the last `Plan:` section of `message` (Pi's `extractTodoItems`).
pub fn extract_steps(message: &str) -> Vec<String> {
    let Some(p) = step_patterns() else {
        return Vec::new();
    };
    let Some(last) = p.plan_header.find_iter(message).last() else {
        return Vec::new();
    };
    let section = &message[last.end()..];
    let mut out = Vec::new();
    for m in p.numbered.captures_iter(section) {
        let text = m[2].trim();
        let text = text
            .strip_suffix("**")
            .or_else(|| text.strip_suffix('*'))
            .unwrap_or(text)
            .trim();
        if text.chars().count() > 5 && !text.starts_with('/') && !text.starts_with('-') {
            let cleaned = clean_step_text(p, text);
            if cleaned.chars().count() > 3 {
                out.push(cleaned);
            }
        }
    }
    out
}

/// The step numbers `message` says are done (Pi's `extractDoneSteps`), without repeats.
pub fn done_steps(message: &str) -> Vec<u64> {
    let Some(p) = progress_patterns() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in &p.done {
        for c in r.captures_iter(message) {
            if let Ok(n) = c[1].parse::<u64>() {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
    }
    out
}

/// Whether `message` says the whole plan is done (Pi's `allStepsComplete`).
pub fn all_steps_complete(message: &str) -> bool {
    progress_patterns().is_some_and(|p| p.all_done.iter().any(|r| r.is_match(message)))
}

/// An assistant message's text and thinking (Pi's example reads both).
fn text_of(m: &Message) -> Option<String> {
    let Message::Assistant(a) = m else {
        return None;
    };
    Some(
        a.content
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => t.text.as_str(),
                ContentBlock::Thinking(t) => t.thinking.as_str(),
                _ => "",
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Writes the board's state as a `plan-mode` entry.
fn persist(board: &PlanBoard, ctx: &ExtensionContext) {
    if let Err(e) = ctx.append_entry(PLAN_MODE_ENTRY, board.entry_data()) {
        tracing::warn!("plan mode: the state was not saved: {e}");
    }
}

/// Shows the mode in the status line (Pi's example's `plan-mode` status).
async fn show_status(board: &PlanBoard, ctx: &ExtensionContext) {
    let s = board.state();
    let text = match s.mode {
        super::plan::PlanMode::Executing if s.total > 0 => {
            Some(format!("📋 {}/{}", s.completed, s.total))
        }
        super::plan::PlanMode::Plan => Some("⏸ plan".to_string()),
        _ => None,
    };
    ctx.set_status(NAME, text.as_deref()).await;
}

impl PlanBoard {
    /// Turns plan mode on or off (the `/plan` toggle's work, also for a client's switch):
    /// persisted as a `plan-mode` entry; tools change from the next run. Errors: the
    /// plan-mode extension is not loaded, or the entry could not be written.
    ///
    /// Written here rather than beside the board so that the board ([`super::plan`]) stays a
    /// leaf that plan mode and the `todo` tool both import.
    pub async fn set_plan_mode(&self, on: bool) -> Result<PlanState, String> {
        let ctx =
            self.plan_ctx.get().cloned().ok_or_else(|| {
                "plan mode is off in this workspace (builtinExtensions)".to_string()
            })?;
        set_mode(self, &ctx, on).await;
        Ok(self.state())
    }
}

/// Turns plan mode on or off (`/plan`, a client's switch), as Pi's `togglePlanMode` does
/// but keeping the list (it is the session's one todo list). On: the session's active tools
/// ([`ExtensionContext::active_tools`], Pi's `pi.getActiveTools()`: also when `/plan` comes
/// before any run, on a new session or a resumed file) are recorded as
/// `toolsBeforePlanMode` (Pi's `enablePlanModeTools`, unless already recorded; a host that
/// knows no active tools: those its runs offered); off: the record goes (Pi's
/// `restoreNormalModeTools`), and the branch's loadout is that recorded set again
/// ([`crate::harness::RecordedTools`] reads it from the entry), so a tool the loadout lost
/// while planning comes back, as Pi 1.6.0's example brings it back.
pub(crate) async fn set_mode(board: &PlanBoard, ctx: &ExtensionContext, on: bool) {
    let offered = if on && !board.plan_mode() {
        let active = ctx.active_tools();
        if active.is_empty() {
            board.offered_tools()
        } else {
            active
        }
    } else {
        Vec::new()
    };
    board.with(|b| {
        *b.enabled() = on;
        *b.executing() = false;
        if !on {
            *b.tools_before() = None;
        } else if b.tools_before().is_none() && !offered.is_empty() {
            *b.tools_before() = Some(offered);
        }
    });
    persist(board, ctx);
    let note = if on {
        "Plan mode enabled. Built-in write tools disabled."
    } else {
        "Plan mode disabled. Full access restored."
    };
    ctx.notify(note, NotifyType::Info).await;
    show_status(board, ctx).await;
}

/// Marks the steps `text` says are done; true when any changed.
fn mark_done(board: &PlanBoard, text: &str) -> bool {
    let steps = done_steps(text);
    if steps.is_empty() {
        return false;
    }
    board.with(|b| {
        let mut changed = false;
        for t in b.todos().iter_mut() {
            if !t.done && steps.contains(&t.id) {
                t.done = true;
                changed = true;
            }
        }
        changed
    })
}

/// The numbered list of the open steps.
fn remaining(board: &PlanBoard) -> String {
    board
        .state()
        .todos
        .iter()
        .filter(|t| !t.done)
        .map(|t| format!("{}. {}", t.id, t.text))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Pi's `plan-todo-list` message (shown, before executing or refining).
fn todo_list_message(board: &PlanBoard) -> CustomMessage {
    let s = board.state();
    let list = s
        .todos
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{}. ☐ {}", i + 1, t.text))
        .collect::<Vec<_>>()
        .join("\n");
    CustomMessage {
        custom_type: "plan-todo-list".into(),
        content: json!(format!("**Plan Steps ({}):**\n\n{list}", s.total)),
        display: true,
        details: None,
        deliver_as: Some(Delivery::FollowUp),
        trigger_turn: false,
    }
}

/// What the user chose after a plan; runs once the run has ended.
async fn after_plan(board: Arc<PlanBoard>, ctx: ExtensionContext) {
    let choice = ctx
        .select(
            QUESTION,
            vec![EXECUTE.to_string(), STAY.to_string(), REFINE.to_string()],
        )
        .await;
    ctx.wait_idle().await;
    match choice.as_deref() {
        Some(EXECUTE) => {
            let first = board.state().todos.into_iter().find(|t| !t.done);
            let Some(first) = first else { return };
            board.with(|b| {
                *b.enabled() = false;
                *b.executing() = true;
                *b.tools_before() = None;
            });
            persist(&board, &ctx);
            show_status(&board, &ctx).await;
            let exec = format!(
                "Execute the plan.\n\nRemaining steps:\n{}\n\nStart with: {}\nAfter completing a step, include a [DONE:n] tag in your response.",
                remaining(&board),
                first.text
            );
            let send = async {
                ctx.send_message(todo_list_message(&board)).await?;
                ctx.send_message(CustomMessage {
                    custom_type: "plan-mode-execute".into(),
                    content: json!(exec),
                    display: true,
                    details: None,
                    deliver_as: Some(Delivery::FollowUp),
                    trigger_turn: true,
                })
                .await
            };
            if let Err(e) = send.await {
                ctx.notify(&format!("Plan mode: {e}"), NotifyType::Error)
                    .await;
            }
        }
        Some(REFINE) => {
            let Some(text) = ctx.editor("Refine the plan:", Some("")).await else {
                return;
            };
            let text = text.trim();
            if text.is_empty() {
                return;
            }
            let sent = async {
                ctx.send_message(todo_list_message(&board)).await?;
                ctx.send_user_message(text).await
            };
            if let Err(e) = sent.await {
                ctx.notify(&format!("Plan mode: {e}"), NotifyType::Error)
                    .await;
            }
        }
        _ => {}
    }
}

/// The end of a run: a finished execution, or a plan to act on.
async fn on_agent_end(board: &Arc<PlanBoard>, ctx: &ExtensionContext, messages: &[Arc<Message>]) {
    let last = messages.iter().rev().find_map(|m| text_of(m));
    let s = board.state();
    if s.mode == super::plan::PlanMode::Executing && s.total > 0 {
        if last.as_deref().is_some_and(all_steps_complete) {
            board.with(|b| b.todos().iter_mut().for_each(|t| t.done = true));
        }
        let s = board.state();
        if s.completed == s.total {
            let list = s
                .todos
                .iter()
                .map(|t| format!("~~{}~~", t.text))
                .collect::<Vec<_>>()
                .join("\n");
            board.with(|b| *b.executing() = false);
            persist(board, ctx);
            show_status(board, ctx).await;
            let done = CustomMessage {
                custom_type: "plan-complete".into(),
                content: json!(format!("**Plan Complete!** ✓\n\n{list}")),
                display: true,
                details: None,
                deliver_as: Some(Delivery::NextTurn),
                trigger_turn: false,
            };
            if let Err(e) = ctx.send_message(done).await {
                tracing::warn!("plan mode: {e}");
            }
        }
        return;
    }
    if s.mode != super::plan::PlanMode::Plan {
        return;
    }
    let steps = last.as_deref().map(extract_steps).unwrap_or_default();
    if !steps.is_empty() {
        board.with(|b| {
            let n = steps.len() as u64;
            *b.todos() = steps
                .into_iter()
                .zip(1..)
                .map(|(text, id)| super::plan::TodoItem {
                    id,
                    text,
                    done: false,
                    status: Default::default(),
                    priority: Default::default(),
                })
                .collect();
            *b.next_id() = n + 1;
        });
        persist(board, ctx);
    } else if board.state().total == 0 {
        return;
    }
    if !ctx.has_ui() {
        return;
    }
    // Asked in its own task: the run ends now, and the answer may take the user a while.
    let (board, ctx) = (board.clone(), ctx.clone());
    tokio::spawn(after_plan(board, ctx));
}

/// Whether a user message carries the plan-mode context (Pi's check: any text with
/// `[PLAN MODE ACTIVE]`).
fn has_plan_context(content: &pi_ai::types::UserContent) -> bool {
    const MARK: &str = "[PLAN MODE ACTIVE]";
    match content {
        pi_ai::types::UserContent::Text(t) => t.contains(MARK),
        pi_ai::types::UserContent::Blocks(b) => b
            .iter()
            .any(|c| matches!(c, ContentBlock::Text(t) if t.text.contains(MARK))),
    }
}

/// Whether plan mode keeps the active tool `t`: every one but `edit` and `write`
/// ([`PLAN_MODE_DISABLED_TOOLS`], Pi 1.6.0's example; `bash` is checked command by command)
/// and but the tools that say [`Tool::off_in_plan_mode`] (MCP tools without `readOnlyHint`).
pub(crate) fn allowed_in_plan_mode(t: &Arc<dyn Tool>) -> bool {
    !PLAN_MODE_DISABLED_TOOLS.contains(&&*t.name()) && !t.off_in_plan_mode()
}

/// The active tools in plan mode (Pi's example's `getPlanModeTools` applied by
/// `setActiveTools`, whose `_applyToolLoadout` keeps the active tools asked for in their order
/// and appends the others): `tools` less `edit` / `write`, then each of [`PLAN_MODE_TOOLS`]
/// that is `registered` and not yet there.
pub(crate) fn plan_mode_tools(registered: &[Arc<dyn Tool>], tools: &mut Vec<Arc<dyn Tool>>) {
    tools.retain(allowed_in_plan_mode);
    for name in PLAN_MODE_TOOLS {
        if tools.iter().any(|t| t.name() == name) {
            continue;
        }
        if let Some(t) = registered.iter().find(|t| t.name() == name) {
            tools.push(t.clone());
        }
    }
}

impl Extension for PlanModeExtension {
    fn name(&self) -> &str {
        NAME
    }

    fn register(&self, api: &mut ExtensionApi) -> Result<(), String> {
        let _ = self.board.plan_ctx.set(api.context());
        self.board
            .plan_mode_loaded
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let b = self.board.clone();
        api.register_command(
            "plan",
            Some("Toggle plan mode (read-only exploration)"),
            move |_args, ctx| {
                let b = b.clone();
                async move {
                    let on = !b.plan_mode();
                    set_mode(&b, &ctx, on).await;
                    Ok(())
                }
            },
        );
        super::todo::register_todos_command(api, &self.board);
        let b = self.board.clone();
        api.filter_tools(move |registered, tools| {
            // Names only (no tool's spec built), and nothing allocated for a tool already
            // known: this runs at every configuration, plan mode on or off.
            b.set_read_only(tools.iter().map(|t| (t.name(), allowed_in_plan_mode(t))));
            if b.plan_mode() {
                plan_mode_tools(registered, tools);
            }
        });
        let b = self.board.clone();
        api.on_tool_call(move |ev, _ctx| {
            let b = b.clone();
            async move {
                if !b.plan_mode() {
                    return Ok(ToolCallAction::Continue);
                }
                if ev.tool_name == "bash" {
                    let command = ev.input["command"].as_str().unwrap_or_default();
                    if !is_safe_command(command) {
                        return Ok(ToolCallAction::Block(format!("Plan mode: command blocked (not allowlisted). Use /plan to disable plan mode first.\nCommand: {command}")));
                    }
                } else if b.blocks(&ev.tool_name) {
                    return Ok(ToolCallAction::Block(format!(
                        "Plan mode: {} is disabled (read-only exploration). Use /plan to disable plan mode first.",
                        ev.tool_name
                    )));
                }
                Ok(ToolCallAction::Continue)
            }
        });
        let b = self.board.clone();
        api.on_before_agent_start(move |_ctx| {
            let s = b.state();
            if s.mode == super::plan::PlanMode::Plan {
                vec![CustomMessage {
                    custom_type: "plan-mode-context".into(),
                    content: json!(PLAN_MODE_CONTEXT),
                    display: false,
                    details: None,
                    deliver_as: None,
                    trigger_turn: false,
                }]
            } else if s.mode == super::plan::PlanMode::Executing && s.completed < s.total {
                vec![CustomMessage {
                    custom_type: "plan-execution-context".into(),
                    content: json!(format!("[EXECUTING PLAN - Full tool access enabled]\n\nRemaining steps:\n{}\n\nExecute each step in order.\nAfter completing a step, include a [DONE:n] tag in your response.", remaining(&b))),
                    display: false,
                    details: None,
                    deliver_as: None,
                    trigger_turn: false,
                }]
            } else {
                Vec::new()
            }
        });
        let b = self.board.clone();
        api.on_context(move |messages| {
            if b.plan_mode() {
                return false;
            }
            // Pi's `context` handler: stale plan-mode context out of the request (a change
            // only when there was some).
            let before = messages.len();
            messages.retain(|m| match m {
                Message::User(u) => !has_plan_context(&u.content),
                _ => true,
            });
            messages.len() != before
        });
        let b = self.board.clone();
        let ends =
            |e: &AgentEvent| matches!(e, AgentEvent::TurnEnd { .. } | AgentEvent::AgentEnd { .. });
        api.on_event_where(ends, move |ev, ctx| {
            let b = b.clone();
            async move {
                match &ev {
                    AgentEvent::TurnEnd { message, .. }
                        if b.state().mode == super::plan::PlanMode::Executing =>
                    {
                        if let Some(text) = text_of(message) {
                            if mark_done(&b, &text) {
                                persist(&b, &ctx);
                                show_status(&b, &ctx).await;
                            }
                        }
                    }
                    AgentEvent::AgentEnd { messages, .. } => on_agent_end(&b, &ctx, messages).await,
                    _ => {}
                }
                Ok(())
            }
        });
        let b = self.board.clone();
        api.on_session_start(move |ctx| {
            b.rebuild(&ctx.branch_entries_of(super::plan::STATE_KINDS));
            Ok(())
        });
        let b = self.board.clone();
        api.on_session_tree(move |ctx| {
            b.rebuild(&ctx.branch_entries_of(super::plan::STATE_KINDS));
            Ok(())
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each group compiles on its own (registering compiles none of them).
    #[test]
    fn every_pattern_group_compiles() {
        assert!(bash_patterns().is_some());
        assert!(step_patterns().is_some());
        assert!(progress_patterns().is_some());
    }

    #[test]
    fn steps_come_from_the_last_plan_section() {
        let text = "Plan:\n1. draft\n\nThinking done.\n\n**Plan:**\n1. **Read** `src/main.rs` to find the entry\n2) Run the tests in `tests/`\n3. ok\n- 4. not a step\n4. /slash command here\n5. Update the README with usage";
        assert_eq!(
            extract_steps(text),
            vec![
                "Src/main.rs to find the entry",
                "Tests in tests/",
                "README with usage"
            ]
        );
        assert!(extract_steps("1. no header here at all").is_empty());
    }

    #[test]
    fn done_markers_as_pi_reads_them() {
        assert_eq!(
            done_steps("[DONE:1] then [done: 3] and [DONE 2], Done: 4; Step 5 is complete; Step 6 is not done; [DONE:1]"),
            vec![1, 3, 2, 4, 5]
        );
        // Pi's pattern: "are" must touch the word after it, so this one does not count.
        assert!(!all_steps_complete("All steps are done."));
        assert!(all_steps_complete("All steps done."));
        assert!(all_steps_complete("every step is complete"));
        assert!(all_steps_complete("The plan is complete"));
        assert!(!all_steps_complete("Step 1 complete"));
    }

    #[test]
    fn the_bash_allow_list() {
        for ok in [
            "ls -la",
            "git status",
            "rg foo src",
            "cat a.txt | wc -l",
            "sed -n 1,5p f",
        ] {
            assert!(is_safe_command(ok), "{ok}");
        }
        for no in [
            "rm -rf x",
            "echo hi > f",
            "cat a >> b",
            "git commit -m x",
            "npm install",
            "python script.py",
            "ls; touch x",
            "ls 2>&1",
        ] {
            assert!(!is_safe_command(no), "{no}");
        }
        assert!(is_safe_command("cat <f"));
    }
}

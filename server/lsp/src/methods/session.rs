//! `agent/session/*`, `agent/messages`, `agent/state`: sessions as files and trees (Pi's
//! `new_session`, `switch_session`, `fork`, `clone`, `get_fork_messages`, tree navigation,
//! labels, `set_session_name`, `get_session_stats`, `export_html`, `get_messages`,
//! `get_state`). Several sessions are open at once; each has its own file, agent, queue and
//! events.

use std::path::PathBuf;

use pi_core::harness::AgentSession;
use tower_lsp_server::jsonrpc::Result;

use super::queue::mode_name;
use super::{core_error, entry_text, invalid, model_info, tree};
use crate::ctx::Ctx;
use crate::protocol::{
    agent_error, codes, ContextUsage, ExportFormat, MessagesResult, SessionBranchParams,
    SessionBranchResult, SessionCloseResult, SessionExportParams, SessionExportResult,
    SessionForkParams, SessionForkResult, SessionInfo, SessionLabelParams, SessionLabelResult,
    SessionListParams, SessionListResult, SessionNameParams, SessionNameResult, SessionNewParams,
    SessionOpenParams, SessionParams, SessionState, SessionStatsResult, SessionTreeResult,
    TreeEntry,
};
use crate::state::sessions_error;

/// The state clients see of `s`.
pub(crate) fn session_state(s: &AgentSession) -> SessionState {
    let file = s.file().display().to_string();
    let tree = s.tree().ok();
    let leaf = tree.as_ref().and_then(|(_, leaf)| leaf.clone());
    let cwd = tree
        .as_ref()
        .and_then(|(t, _)| t.header["cwd"].as_str().map(str::to_string));
    let other_cwd =
        match pi_core::session::ownership(&s.file(), cwd.as_deref(), s.workspace().root()) {
            pi_core::session::Ownership::Workspace => None,
            pi_core::session::Ownership::Other(c) => Some(c),
            pi_core::session::Ownership::Unknown => Some(String::new()),
        };
    let status = s.status();
    let model = s.model();
    SessionState {
        session_id: s.id().to_string(),
        session_file: file,
        session_name: s.name(),
        parent_session: s.parent_session().map(str::to_string),
        model: model_info(&model),
        thinking_level: model
            .thinking_level
            .unwrap_or(pi_ai::models::ThinkingLevel::Off),
        is_streaming: status.is_streaming,
        run_id: status.run_id,
        steering_mode: mode_name(status.steering_mode),
        follow_up_mode: mode_name(status.follow_up_mode),
        auto_retry_enabled: s.auto_retry(),
        is_retrying: status.is_retrying,
        auto_compaction_enabled: s.auto_compaction(),
        is_compacting: status.is_compacting,
        is_bash_running: status.is_bash_running,
        message_count: s.message_count(),
        pending_message_count: status.pending_message_count,
        leaf_id: leaf,
        approval_policy: Some(status.approval_policy),
        other_cwd,
    }
}

fn io_error(e: impl std::fmt::Display) -> tower_lsp_server::jsonrpc::Error {
    agent_error(codes::SESSION_IO, e.to_string())
}

/// `agent/state {sessionId}` → [`SessionState`].
pub(crate) async fn agent_state(cx: Ctx, p: SessionParams) -> Result<SessionState> {
    let s = cx.session(&p.session_id).await?;
    Ok(session_state(&s))
}

/// `agent/messages {sessionId}` → the model's context as Pi's `get_messages` gives it
/// (summary first after a compaction; [`pi_core::session::context_agent_messages`]). For
/// display of a long session, `agent/session/history` pages the branch instead.
pub(crate) async fn agent_messages(cx: Ctx, p: SessionParams) -> Result<MessagesResult> {
    let s = cx.session(&p.session_id).await?;
    let sink = cx.output(s.id());
    // The file and what the client was sent, read together: no event is half way
    // between them meanwhile.
    let settled = s.events_settled().await;
    let (seq, streaming) = match sink {
        Some(sink) => sink.sent().await,
        None => (0, s.streaming_message()),
    };
    let (tree, leaf) = tree(&s)?;
    drop(settled);
    let (entry_ids, messages) = pi_core::session::context_agent_messages(&tree, leaf.as_deref())
        .into_iter()
        .unzip();
    Ok(MessagesResult {
        session_id: s.id().to_string(),
        messages,
        entry_ids,
        streaming_message: streaming
            .and_then(|m| serde_json::to_value(pi_ai::Message::Assistant(m)).ok()),
        seq,
    })
}

/// `agent/session/new {model?, thinkingLevel?, name?}` → the new session's state.
pub(crate) async fn session_new(cx: Ctx, p: SessionNewParams) -> Result<SessionState> {
    let name = match p.name.as_deref().map(str::trim) {
        Some("") => return Err(invalid("name", "must not be empty")),
        n => n,
    };
    let session = cx.create_session(p.model.as_deref(), p.thinking_level, name)?;
    Ok(session_state(&session))
}

/// `agent/session/list {}` → the workspace's session files (and Pi's own for this
/// folder) whose header's `cwd` is this workspace, most recent first ([`pi_core::harness::Sessions::list`]).
pub(crate) async fn session_list(cx: Ctx, _: SessionListParams) -> Result<SessionListResult> {
    let sessions = cx
        .sessions()?
        .list()
        .into_iter()
        .map(|l| SessionInfo {
            open: l.open,
            session_id: l.summary.id,
            session_file: l.summary.path.display().to_string(),
            name: l.summary.name,
            first_prompt: l.summary.first_prompt,
            parent_session: l.summary.parent_session,
            entry_count: l.summary.entry_count,
            last_activity: l.summary.last_activity_ms,
        })
        .collect();
    Ok(SessionListResult { sessions })
}

/// `agent/session/open {sessionId | path}` → the session's state (already open: as is).
pub(crate) async fn session_open(cx: Ctx, p: SessionOpenParams) -> Result<SessionState> {
    let sessions = cx.sessions()?;
    let session = match (&p.session_id, &p.path) {
        (Some(id), None) => sessions.open(id).await,
        (None, Some(path)) => sessions.open_path(&PathBuf::from(path)).await,
        _ => {
            return Err(invalid(
                "sessionId",
                "give exactly one of `sessionId` and `path`",
            ))
        }
    }
    .map_err(sessions_error)?;
    Ok(session_state(&session))
}

/// `agent/session/close {sessionId}`: aborts its run, drops its queue, releases its file
/// ([`pi_core::harness::Sessions::close`]).
pub(crate) async fn session_close(cx: Ctx, p: SessionParams) -> Result<SessionCloseResult> {
    let sessions = cx.sessions()?.clone();
    // Unknown id: an error before anything runs.
    if sessions
        .find(&p.session_id)
        .map_err(sessions_error)?
        .is_none()
    {
        return Ok(SessionCloseResult {
            closed: false,
            dropped: Vec::new(),
        });
    }
    // The close runs to its end in a task of its own: `$/cancelRequest` drops this
    // future, and a close stopped halfway (run aborted, session still open, queue kept)
    // is neither the state before nor after.
    let state = cx.shared();
    let id = p.session_id.clone();
    let close = tokio::spawn(async move {
        let dropped = sessions.close(&id).await;
        // Editor tools registered for this session only go with it.
        state.editor_tools.forget_session(&id);
        dropped
    });
    let dropped = close.await.map_err(|e| tower_lsp_server::jsonrpc::Error {
        code: tower_lsp_server::jsonrpc::ErrorCode::InternalError,
        message: format!("closing session {} failed: {e}", p.session_id).into(),
        data: None,
    })?;
    let dropped = dropped.map_err(sessions_error)?;
    Ok(SessionCloseResult {
        closed: dropped.is_some(),
        dropped: dropped.unwrap_or_default(),
    })
}

/// `agent/session/fork {sessionId, entryId}` → a new session holding the path to the
/// entry (to its parent for a user message, whose text is returned).
pub(crate) async fn session_fork(cx: Ctx, p: SessionForkParams) -> Result<SessionForkResult> {
    let session = cx.session(&p.session_id).await?;
    let (path, text) = session.fork(&p.entry_id).map_err(core_error)?;
    // Opened through the usual path so model and thinking come from the file.
    let new = cx.open_file(&path)?;
    Ok(SessionForkResult {
        session: session_state(&new),
        text,
    })
}

/// `agent/session/clone {sessionId}` → a new session holding the active branch.
pub(crate) async fn session_clone(cx: Ctx, p: SessionParams) -> Result<SessionForkResult> {
    let session = cx.session(&p.session_id).await?;
    let path = session.clone_branch().map_err(core_error)?;
    let new = cx.open_file(&path)?;
    Ok(SessionForkResult {
        session: session_state(&new),
        text: None,
    })
}

/// `agent/session/tree {sessionId}` → every entry, the leaf.
pub(crate) async fn session_tree(cx: Ctx, p: SessionParams) -> Result<SessionTreeResult> {
    let s = cx.session(&p.session_id).await?;
    let (tree, leaf_id) = tree(&s)?;
    let labels = tree.labels();
    let entries = tree
        .entries
        .iter()
        .map(|e| {
            let raw = e.raw();
            TreeEntry {
                id: e.id.to_string(),
                parent_id: e.parent_id.as_deref().map(str::to_string),
                kind: e.kind.to_string(),
                timestamp: raw["timestamp"].as_str().map(str::to_string),
                role: (e.kind == "message")
                    .then(|| e.role().map(str::to_string))
                    .flatten(),
                preview: entry_text(&raw).map(|t| t.chars().take(200).collect()),
                label: labels.get(e.id.as_str()).cloned(),
            }
        })
        .collect();
    Ok(SessionTreeResult {
        session_id: s.id().to_string(),
        leaf_id,
        entries,
    })
}

/// `agent/session/branch {sessionId, entryId, summarize?, customInstructions?,
/// replaceInstructions?, label?}`: moves the leaf (Pi 1.6's `navigateTree`;
/// [`AgentSession::branch_with`]); with `summarize`, the model summarises the branch left
/// behind first (a failed summary changes nothing; `$/cancelRequest` cancels it).
pub(crate) async fn session_branch(cx: Ctx, p: SessionBranchParams) -> Result<SessionBranchResult> {
    let session = cx.session(&p.session_id).await?;
    let options = pi_core::harness::NavigateOptions {
        custom_instructions: p.custom_instructions,
        replace_instructions: p.replace_instructions,
        label: p.label,
    };
    session
        .branch_with(p.entry_id.as_deref(), p.summarize, &options)
        .await
        .map_err(core_error)
}

/// `agent/session/label {sessionId, entryId, label}` → the `label` entry written.
pub(crate) async fn session_label(cx: Ctx, p: SessionLabelParams) -> Result<SessionLabelResult> {
    let session = cx.session(&p.session_id).await?;
    session.settle().await;
    let id = session
        .label(&p.entry_id, p.label.as_deref())
        .map_err(core_error)?;
    Ok(SessionLabelResult { label_entry_id: id })
}

/// `agent/session/name {sessionId, name}`.
pub(crate) async fn session_name(cx: Ctx, p: SessionNameParams) -> Result<SessionNameResult> {
    let name = p.name.trim();
    if name.is_empty() {
        return Err(invalid("name", "must not be empty"));
    }
    let session = cx.session(&p.session_id).await?;
    session.set_name(name).map_err(io_error)?;
    Ok(SessionNameResult {
        name: name.to_string(),
    })
}

/// `agent/session/stats {sessionId}` (Pi 1.6's `get_session_stats`, agent-session.js
/// `getSessionStats` / `getContextUsage`): counts of every message entry in the file,
/// tokens and cost of every response and `usage` entry, the context's estimate;
/// `sessionTokens` / `sessionCost` repeat `tokens` / `cost` (kept for older clients).
pub(crate) async fn session_stats(cx: Ctx, p: SessionParams) -> Result<SessionStatsResult> {
    let s = cx.session(&p.session_id).await?;
    let (tree, leaf) = tree(&s)?;
    // Pi 1.6's scope (`getSessionStats`): every `message` entry of the file, every branch
    // and compacted turn included; tokens and cost of every response and `usage` entry.
    let (mut users, mut assistants, mut results, mut total, mut tool_calls) = (0, 0, 0, 0, 0);
    for e in tree.entries.iter().filter(|e| e.kind == "message") {
        total += 1;
        match e.role() {
            Some("user") => users += 1,
            Some("toolResult") => results += 1,
            Some("assistant") => {
                assistants += 1;
                tool_calls += e.raw()["message"]["content"]
                    .as_array()
                    .map_or(0, |c| c.iter().filter(|b| b["type"] == "toolCall").count());
            }
            _ => {}
        }
    }
    let path = leaf.as_deref().map(|l| tree.path(l)).unwrap_or_default();
    let window = s.model().context_window;
    let context_usage = (window > 0).then(|| {
        // Pi: after the last compaction, only a response that came after it measures
        // the context; until then the figure is unknown.
        let unknown = path
            .iter()
            .rposition(|e| e.kind == "compaction")
            .is_some_and(|ci| {
                path[ci + 1..]
                    .iter()
                    .rev()
                    .filter(|e| e.role() == Some("assistant"))
                    .find(|e| {
                        let r = e.raw();
                        let stop = &r["message"]["stopReason"];
                        stop != "error" && stop != "aborted"
                    })
                    .and_then(|e| e.assistant().and_then(|a| a.usage()))
                    .is_none_or(|u| u.context_total() == 0)
            });
        if unknown {
            return ContextUsage {
                tokens: None,
                context_window: window,
                percent: None,
            };
        }
        let tokens = pi_core::compaction::pi_context_tokens(&path);
        ContextUsage {
            tokens: Some(tokens),
            context_window: window,
            percent: Some(tokens as f64 / window as f64 * 100.0),
        }
    });
    let file = pi_core::harness::file_usage(&tree);
    let stats_tokens = |t: &crate::protocol::UsageTotals| crate::protocol::StatsTokens {
        input: t.input,
        output: t.output,
        cache_read: t.cache_read,
        cache_write: t.cache_write,
        total: t.input + t.output + t.cache_read + t.cache_write,
    };
    let session_file = s.file().display().to_string();
    Ok(SessionStatsResult {
        session_id: s.id().to_string(),
        session_file,
        user_messages: users,
        assistant_messages: assistants,
        tool_calls,
        tool_results: results,
        total_messages: total,
        tokens: stats_tokens(&file),
        cost: file.cost,
        session_tokens: stats_tokens(&file),
        session_cost: file.cost,
        context_usage,
    })
}

/// `agent/session/export {sessionId, format, outputPath?}`.
pub(crate) async fn session_export(cx: Ctx, p: SessionExportParams) -> Result<SessionExportResult> {
    let session = cx.session(&p.session_id).await?;
    let (tree, leaf) = tree(&session)?;
    let content = match p.format {
        ExportFormat::Markdown => pi_core::export::to_markdown(&tree, leaf.as_deref()),
        ExportFormat::Html => pi_core::export::to_html(&tree, leaf.as_deref()),
    };
    match p.output_path {
        None => Ok(SessionExportResult {
            format: p.format,
            content: Some(content),
            path: None,
        }),
        Some(out) => {
            if out.trim().is_empty() {
                return Err(invalid("outputPath", "must not be empty"));
            }
            let path = PathBuf::from(&out);
            let path = if path.is_absolute() {
                path
            } else {
                cx.root().join(path)
            };
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| invalid("outputPath", format!("{}: {e}", parent.display())))?;
            }
            pi_core::fs::atomic_write(&path, content.as_bytes())
                .await
                .map_err(|e| invalid("outputPath", format!("{}: {e}", path.display())))?;
            Ok(SessionExportResult {
                format: p.format,
                content: None,
                path: Some(path.display().to_string()),
            })
        }
    }
}

//! `agent/session/*`, `agent/messages`, `agent/state`: sessions as files and trees (Pi's
//! `new_session`, `switch_session`, `fork`, `clone`, `get_fork_messages`, tree navigation,
//! labels, `set_session_name`, `get_session_stats`, `export_html`, `get_messages`,
//! `get_state`). Several sessions are open at once; each has its own file, agent, queue and
//! events.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pi_core::session::SessionTree;
use serde_json::{json, Value};
use tower_lsp_server::jsonrpc::Result;

use super::{entry_text, invalid, model_info, session_tree};
use crate::protocol::{
    agent_error, codes, parse_params, ContextUsage, ExportFormat, MessagesResult, QueueModeName,
    SessionBranchParams, SessionBranchResult, SessionCloseResult, SessionExportParams,
    SessionExportResult, SessionForkParams, SessionForkResult, SessionInfo, SessionLabelParams,
    SessionLabelResult, SessionListParams, SessionListResult, SessionNameParams, SessionNameResult,
    SessionNewParams, SessionOpenParams, SessionParams, SessionState, SessionStatsResult,
    SessionTreeResult, TreeEntry,
};
use crate::server::{lock, Backend, Session};
use pi_core::harness::sessions_dir;

fn mode_name(m: pi_core::QueueMode) -> QueueModeName {
    match m {
        pi_core::QueueMode::OneAtATime => QueueModeName::OneAtATime,
        pi_core::QueueMode::All => QueueModeName::All,
    }
}

/// The state clients see of `s`.
pub(crate) fn session_state(s: &Session) -> SessionState {
    let (file, leaf) = {
        let w = lock(s.writer());
        (w.path().display().to_string(), w.leaf().map(str::to_string))
    };
    let (steering, follow_up) = s.agent().queue_modes();
    SessionState {
        session_id: s.id().to_string(),
        session_file: file,
        session_name: s.name().map(str::to_string),
        parent_session: s.parent_session().map(str::to_string),
        model: model_info(s.model()),
        thinking_level: s
            .model()
            .thinking_level
            .unwrap_or(pi_ai::models::ThinkingLevel::Off),
        is_streaming: s.agent().is_streaming(),
        run_id: s.agent().run_id(),
        steering_mode: mode_name(steering),
        follow_up_mode: mode_name(follow_up),
        auto_retry_enabled: s.auto_retry(),
        is_retrying: s.tracker.retrying(),
        auto_compaction_enabled: s.auto_compaction(),
        is_compacting: s.agent().is_compacting(),
        is_bash_running: s.tracker.bash_running(),
        message_count: s.agent().message_count(),
        pending_message_count: s.tracker.queued().len(),
        leaf_id: leaf,
        approval_policy: Some(s.gate().policy()),
    }
}

/// An entry's ISO-8601 `timestamp` as Unix milliseconds (a number is kept; anything else is 0).
fn entry_millis(ts: &Value) -> Value {
    if ts.is_number() {
        return ts.clone();
    }
    json!(ts
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp_millis())
        .unwrap_or(0))
}

/// Messages of the path to `leaf` as Pi's `AgentMessage`s, with their entry ids.
fn path_messages(tree: &SessionTree, leaf: Option<&str>) -> (Vec<Value>, Vec<String>) {
    let mut messages = Vec::new();
    let mut ids = Vec::new();
    let Some(leaf) = leaf else {
        return (messages, ids);
    };
    for e in tree.path(leaf) {
        let r = &e.raw();
        let m = match e.kind.as_str() {
            "message" => r["message"].clone(),
            "custom_message" => json!({"role": "custom", "customType": r["customType"],
                "content": r["content"], "display": r["display"].as_bool().unwrap_or(true),
                "details": r["details"], "timestamp": entry_millis(&r["timestamp"])}),
            // Pi's createBranchSummaryMessage / createCompactionSummaryMessage /
            // createCustomMessage: the entry's ISO time as milliseconds.
            "branch_summary" => json!({"role": "branchSummary", "summary": r["summary"],
                "fromId": r["fromId"], "timestamp": entry_millis(&r["timestamp"])}),
            "compaction" => json!({"role": "compactionSummary", "summary": r["summary"],
                "tokensBefore": r["tokensBefore"], "timestamp": entry_millis(&r["timestamp"])}),
            _ => continue,
        };
        messages.push(m);
        ids.push(e.id.clone());
    }
    (messages, ids)
}

fn io_error(e: impl std::fmt::Display) -> tower_lsp_server::jsonrpc::Error {
    agent_error(codes::SESSION_IO, e.to_string())
}

fn busy(s: &Session, what: &str) -> tower_lsp_server::jsonrpc::Error {
    agent_error(
        codes::SESSION_BUSY,
        format!(
            "session {} is running {}; {what} waits until the run ends (or agent/abort it)",
            s.id(),
            s.agent().run_id().unwrap_or_default()
        ),
    )
}

impl Backend {
    /// `agent/state {sessionId}` → [`SessionState`].
    pub(crate) async fn agent_state(&self, params: Value) -> Result<SessionState> {
        let p: SessionParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let s = lock(&session);
        Ok(session_state(&s))
    }

    /// `agent/messages {sessionId}` → the model's context as Pi's `get_messages` gives it
    /// (summary first after a compaction; [`pi_core::session::context_agent_messages`]). For
    /// display of a long session, `agent/session/history` pages the branch instead.
    pub(crate) async fn agent_messages(&self, params: Value) -> Result<MessagesResult> {
        let p: SessionParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let s = lock(&session);
        let tree = session_tree(&s)?;
        let leaf = lock(s.writer()).leaf().map(str::to_string);
        let (entry_ids, messages) =
            pi_core::session::context_agent_messages(&tree, leaf.as_deref())
                .into_iter()
                .unzip();
        Ok(MessagesResult {
            session_id: s.id().to_string(),
            messages,
            entry_ids,
            streaming_message: s
                .agent()
                .streaming_message()
                .and_then(|m| serde_json::to_value(pi_ai::Message::Assistant(m)).ok()),
        })
    }

    /// `agent/session/new {model?, thinkingLevel?, name?}` → the new session's state.
    pub(crate) async fn session_new(&self, params: Value) -> Result<SessionState> {
        let p: SessionNewParams = parse_params(params)?;
        let name = match p.name.as_deref().map(str::trim) {
            Some("") => return Err(invalid("name", "must not be empty")),
            n => n,
        };
        let session = self.create_session(p.model.as_deref(), p.thinking_level, name)?;
        let s = lock(&session);
        Ok(session_state(&s))
    }

    /// `agent/session/list {}` → the workspace's session files, most recent first.
    pub(crate) async fn session_list(&self, params: Value) -> Result<SessionListResult> {
        let _: SessionListParams = parse_params(params)?;
        let open: Vec<String> = lock(&self.state.sessions).keys().cloned().collect();
        let root = self.state.root();
        let mut found = pi_core::session::list_sessions(&sessions_dir(&self.state.workspace()));
        // Pi's own sessions of this folder are listed too (and open by path or id).
        if let Some(agent) = pi_ai::models::agent_dir() {
            let pi_dir = pi_core::session::pi_sessions_dir(&agent, &root);
            if pi_dir != sessions_dir(&self.state.workspace()) {
                found.extend(pi_core::session::list_sessions(&pi_dir));
            }
        }
        let mut sessions: Vec<SessionInfo> = found
            .into_iter()
            .map(|x| SessionInfo {
                open: open.contains(&x.id),
                session_id: x.id,
                session_file: x.path.display().to_string(),
                name: x.name,
                first_prompt: x.first_prompt,
                parent_session: x.parent_session,
                entry_count: x.entry_count,
                last_activity: x.last_activity_ms,
            })
            .collect();
        sessions.sort_by_key(|s| std::cmp::Reverse(s.last_activity));
        Ok(SessionListResult { sessions })
    }

    /// `agent/session/open {sessionId | path}` → the session's state (already open: as is).
    pub(crate) async fn session_open(&self, params: Value) -> Result<SessionState> {
        let p: SessionOpenParams = parse_params(params)?;
        let session = match (&p.session_id, &p.path) {
            (Some(id), None) => self.session(id)?,
            (None, Some(path)) => {
                let path = PathBuf::from(path);
                let path = if path.is_absolute() {
                    path
                } else {
                    self.state.root().join(path)
                };
                if path.extension().is_none_or(|e| e != "jsonl") {
                    return Err(invalid("path", "expected a .jsonl session file"));
                }
                self.open_file(&path)?
            }
            _ => {
                return Err(invalid(
                    "sessionId",
                    "give exactly one of `sessionId` and `path`",
                ))
            }
        };
        let s = lock(&session);
        Ok(session_state(&s))
    }

    /// `agent/session/close {sessionId}`: aborts its run, drops its queue, releases its file.
    pub(crate) async fn session_close(&self, params: Value) -> Result<SessionCloseResult> {
        let p: SessionParams = parse_params(params)?;
        let session = lock(&self.state.sessions).get(&p.session_id).cloned();
        let Some(session) = session else {
            // Not open here: nothing to close, but a name that no file has is an error.
            if pi_core::session::find_session_file(
                &sessions_dir(&self.state.workspace()),
                &p.session_id,
            )
            .is_none()
            {
                return Err(agent_error(
                    codes::UNKNOWN_SESSION,
                    format!("no session {}", p.session_id),
                ));
            }
            return Ok(SessionCloseResult {
                closed: false,
                dropped: Vec::new(),
            });
        };
        // The close runs to its end in a task of its own: `$/cancelRequest` drops this
        // future, and a close stopped halfway (run aborted, session still open, queue kept)
        // is neither the state before nor after.
        let this = Backend {
            state: self.state.clone(),
        };
        let id = p.session_id.clone();
        let close = tokio::spawn(async move { this.close_now(&id, session).await });
        close.await.map_err(|e| tower_lsp_server::jsonrpc::Error {
            code: tower_lsp_server::jsonrpc::ErrorCode::InternalError,
            message: format!("closing session {} failed: {e}", p.session_id).into(),
            data: None,
        })
    }

    /// Aborts, stops the user's command, drops the queue and forgets the session.
    async fn close_now(&self, id: &str, session: Arc<Mutex<Session>>) -> SessionCloseResult {
        let (agent, tracker) = {
            let s = lock(&session);
            (s.agent().clone(), s.tracker.clone())
        };
        agent.abort();
        // The user's own shell command (`agent/bash`) goes too: left running it would write
        // its result into the file after the lock was released.
        if tracker.abort_bash() {
            let _ = tokio::time::timeout(crate::server::ABORT_WAIT, async {
                while tracker.bash_running() {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            })
            .await;
        }
        let _ = tokio::time::timeout(crate::server::ABORT_WAIT, agent.wait_for_idle()).await;
        let dropped = self.drop_queue(&session).await;
        lock(&self.state.sessions).remove(id);
        // Editor tools registered for this session only go with it.
        self.state.editor_tools.forget_session(id);
        SessionCloseResult {
            closed: true,
            dropped,
        }
    }

    /// `agent/session/fork {sessionId, entryId}` → a new session holding the path to the
    /// entry (to its parent for a user message, whose text is returned).
    pub(crate) async fn session_fork(&self, params: Value) -> Result<SessionForkResult> {
        let p: SessionForkParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let (writer, loaded, text) = {
            let s = lock(&session);
            let tree = session_tree(&s)?;
            let entry = tree.get(&p.entry_id).ok_or_else(|| {
                agent_error(
                    codes::UNKNOWN_ENTRY,
                    format!("entryId: no entry {} in session {}", p.entry_id, s.id()),
                )
            })?;
            let user = (entry.kind == "message" && entry.role() == Some("user"))
                || entry.kind == "custom_message";
            let (leaf, text) = if user {
                (entry.parent_id.clone(), entry_text(&entry.raw()))
            } else {
                (Some(entry.id.clone()), None)
            };
            let Some(leaf) = leaf else {
                return Err(invalid(
                    "entryId",
                    "the first entry has nothing before it to fork; use agent/session/new",
                ));
            };
            let (w, loaded) = lock(s.writer())
                .fork(&tree, &sessions_dir(&self.state.workspace()), Some(&leaf))
                .map_err(io_error)?;
            (w, loaded, text)
        };
        let new = self.adopt(&session, writer, loaded)?;
        let s = lock(&new);
        Ok(SessionForkResult {
            session: session_state(&s),
            text,
        })
    }

    /// `agent/session/clone {sessionId}` → a new session holding the active branch.
    pub(crate) async fn session_clone(&self, params: Value) -> Result<SessionForkResult> {
        let p: SessionParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let (writer, loaded) = {
            let s = lock(&session);
            let tree = session_tree(&s)?;
            let w = lock(s.writer());
            if w.leaf().is_none() {
                return Err(invalid(
                    "sessionId",
                    "the session has no entries to clone; use agent/session/new",
                ));
            }
            w.fork(&tree, &sessions_dir(&self.state.workspace()), None)
                .map_err(io_error)?
        };
        let new = self.adopt(&session, writer, loaded)?;
        let s = lock(&new);
        Ok(SessionForkResult {
            session: session_state(&s),
            text: None,
        })
    }

    /// Registers a forked file as a live session with the model of `from`.
    fn adopt(
        &self,
        from: &Arc<Mutex<Session>>,
        writer: pi_core::session::SessionWriter,
        loaded: pi_core::session::LoadedSession,
    ) -> Result<Arc<Mutex<Session>>> {
        let path = writer.path().to_path_buf();
        // Re-open through the usual path so model and thinking come from the file.
        drop(writer);
        let _ = (from, loaded);
        self.open_file(&path)
    }

    /// `agent/session/tree {sessionId}` → every entry, the leaf.
    pub(crate) async fn session_tree(&self, params: Value) -> Result<SessionTreeResult> {
        let p: SessionParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let s = lock(&session);
        let tree = session_tree(&s)?;
        let labels = tree.labels();
        let entries = tree
            .entries
            .iter()
            .map(|e| {
                let raw = e.raw();
                TreeEntry {
                    id: e.id.clone(),
                    parent_id: e.parent_id.clone(),
                    kind: e.kind.clone(),
                    timestamp: raw["timestamp"].as_str().map(str::to_string),
                    role: (e.kind == "message")
                        .then(|| e.role().map(str::to_string))
                        .flatten(),
                    preview: entry_text(&raw).map(|t| t.chars().take(200).collect()),
                    label: labels.get(&e.id).cloned(),
                }
            })
            .collect();
        let leaf_id = lock(s.writer()).leaf().map(str::to_string);
        Ok(SessionTreeResult {
            session_id: s.id().to_string(),
            leaf_id,
            entries,
        })
    }

    /// `agent/session/branch {sessionId, entryId, summarize?, customInstructions?}`: moves the
    /// leaf (Pi's tree navigation); with `summarize`, the model summarises the branch left
    /// behind first (a failed summary changes nothing).
    pub(crate) async fn session_branch(&self, params: Value) -> Result<SessionBranchResult> {
        let p: SessionBranchParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let (tree, old_leaf, target_leaf, editor_text, model) = {
            let s = lock(&session);
            if s.agent().is_streaming() {
                return Err(busy(&s, "moving the leaf"));
            }
            let tree = session_tree(&s)?;
            let (target_leaf, editor_text) = match &p.entry_id {
                None => (None, None),
                Some(id) => {
                    let e = tree.get(id).ok_or_else(|| {
                        agent_error(
                            codes::UNKNOWN_ENTRY,
                            format!("entryId: no entry {id} in session {}", s.id()),
                        )
                    })?;
                    let user = (e.kind == "message" && e.role() == Some("user"))
                        || e.kind == "custom_message";
                    if user {
                        (e.parent_id.clone(), entry_text(&e.raw()))
                    } else {
                        (Some(e.id.clone()), None)
                    }
                }
            };
            let old_leaf = lock(s.writer()).leaf().map(str::to_string);
            (tree, old_leaf, target_leaf, editor_text, s.model().clone())
        };
        // The entries being left: from the old leaf back to the common ancestor.
        let kept: std::collections::HashSet<&str> = target_leaf
            .as_deref()
            .map(|l| tree.path(l).into_iter().map(|e| e.id.as_str()).collect())
            .unwrap_or_default();
        let left: Vec<&pi_core::session::Entry> = old_leaf
            .as_deref()
            .map(|l| {
                tree.path(l)
                    .into_iter()
                    .filter(|e| !kept.contains(e.id.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        let summary = if p.summarize && !left.is_empty() {
            let s = crate::summary::branch_summary(&model, &left, p.custom_instructions.as_deref())
                .await
                .map_err(|e| agent_error(codes::SUMMARY_FAILED, e))?;
            Some(s)
        } else {
            None
        };
        let s = lock(&session);
        if s.agent().is_streaming() {
            return Err(busy(&s, "moving the leaf"));
        }
        let mut w = lock(s.writer());
        let summary_entry_id = match (&summary, &old_leaf) {
            (Some(text), Some(from)) => Some(
                w.branch_with_summary(&tree, target_leaf.as_deref(), from, text)
                    .map_err(io_error)?,
            ),
            _ => {
                w.branch(&tree, target_leaf.as_deref()).map_err(io_error)?;
                None
            }
        };
        let leaf = w.leaf().map(str::to_string);
        drop(w);
        let tree = session_tree(&s)?;
        let messages = if leaf.is_some() {
            tree.context(leaf.as_deref()).messages
        } else {
            Vec::new()
        };
        let count = messages.len();
        s.agent()
            .set_messages(messages)
            .map_err(|_| busy(&s, "moving the leaf"))?;
        Ok(SessionBranchResult {
            leaf_id: leaf,
            summary_entry_id,
            summary,
            editor_text,
            message_count: count,
        })
    }

    /// `agent/session/label {sessionId, entryId, label}` → the `label` entry written.
    pub(crate) async fn session_label(&self, params: Value) -> Result<SessionLabelResult> {
        let p: SessionLabelParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let s = lock(&session);
        let tree = session_tree(&s)?;
        if tree.get(&p.entry_id).is_none() {
            return Err(agent_error(
                codes::UNKNOWN_ENTRY,
                format!("entryId: no entry {} in session {}", p.entry_id, s.id()),
            ));
        }
        let label = p.label.as_deref().map(str::trim).filter(|l| !l.is_empty());
        let id = lock(s.writer())
            .label(&p.entry_id, label)
            .map_err(io_error)?;
        Ok(SessionLabelResult { label_entry_id: id })
    }

    /// `agent/session/name {sessionId, name}`.
    pub(crate) async fn session_name(&self, params: Value) -> Result<SessionNameResult> {
        let p: SessionNameParams = parse_params(params)?;
        let name = p.name.trim();
        if name.is_empty() {
            return Err(invalid("name", "must not be empty"));
        }
        let session = self.session(&p.session_id)?;
        lock(&session).set_name(name).map_err(io_error)?;
        Ok(SessionNameResult {
            name: name.to_string(),
        })
    }

    /// `agent/session/stats {sessionId}` (Pi's `get_session_stats`).
    pub(crate) async fn session_stats(&self, params: Value) -> Result<SessionStatsResult> {
        let p: SessionParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let s = lock(&session);
        let tree = session_tree(&s)?;
        let leaf = lock(s.writer()).leaf().map(str::to_string);
        let (messages, _) = path_messages(&tree, leaf.as_deref());
        let role = |r: &str| messages.iter().filter(|m| m["role"] == r).count();
        let tool_calls = messages
            .iter()
            .filter(|m| m["role"] == "assistant")
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "toolCall")
            .count();
        let context_usage = messages
            .iter()
            .rev()
            .filter(|m| {
                m["role"] == "assistant"
                    && m["stopReason"] != "error"
                    && m["stopReason"] != "aborted"
            })
            .find_map(|m| serde_json::from_value::<pi_ai::types::Usage>(m["usage"].clone()).ok())
            .map(|u| {
                let tokens = crate::tracker::context_tokens(&u);
                let window = s.model().context_window;
                ContextUsage {
                    tokens,
                    context_window: window,
                    percent: if window > 0 {
                        (tokens as f64 * 10000.0 / window as f64).round() / 100.0
                    } else {
                        0.0
                    },
                }
            });
        let tokens = super::file_usage(&tree);
        let session_file = lock(s.writer()).path().display().to_string();
        Ok(SessionStatsResult {
            session_id: s.id().to_string(),
            session_file,
            user_messages: role("user"),
            assistant_messages: role("assistant"),
            tool_calls,
            tool_results: role("toolResult"),
            total_messages: messages.len(),
            cost: tokens.cost,
            tokens: crate::protocol::StatsTokens {
                input: tokens.input,
                output: tokens.output,
                cache_read: tokens.cache_read,
                cache_write: tokens.cache_write,
                total: tokens.input + tokens.output + tokens.cache_read + tokens.cache_write,
            },
            context_usage,
        })
    }

    /// `agent/session/export {sessionId, format, outputPath?}`.
    pub(crate) async fn session_export(&self, params: Value) -> Result<SessionExportResult> {
        let p: SessionExportParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let (tree, leaf) = {
            let s = lock(&session);
            let tree = session_tree(&s)?;
            let leaf = lock(s.writer()).leaf().map(str::to_string);
            (tree, leaf)
        };
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
                    self.state.root().join(path)
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
}

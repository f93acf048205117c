//! Change-making calls that settle after their run stopped waiting ([`LateResults`]): an
//! editor answering `workspace/applyEdit` later than the abort's grace still applies the edit,
//! so its outcome is recorded whenever it comes — never a change silently in the buffer.
//!
//! - While the call is out, the abort report lists it under `pendingEdits`
//!   ([`Tracker::pending_edits`]) and its recorded result says it may still land.
//! - When it settles, a `custom` entry (`customType` [`LATE_RESULT_CUSTOM_TYPE`], `data:
//!   {toolCallId, toolName, message}` with `message` the call's real `toolResult`) is appended
//!   at the session's leaf and made durable; [`super::rewind`] reads an applied one as the
//!   change it is (Changes lists it, rewind undoes it). A session already closed gets the entry
//!   in its file all the same (opened for the append, then released).
//! - The product is told with [`Notice::LateResult`] (applied or not).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use async_trait::async_trait;
use pi_ai::{Message, ToolCall, ToolResultMessage};
use serde_json::json;

use super::queue::{AppliedEdit, Notice, Tracker};
use super::SessionListener;
use crate::agent::{LateResults, ToolOutput};
use crate::session::{EntryData, SessionWriter};

/// `customType` of the entry recording a late result (module docs).
pub const LATE_RESULT_CUSTOM_TYPE: &str = "pi-lsp.lateResult";

/// A session's [`LateResults`] (module docs).
pub(super) struct LateEdits {
    file: PathBuf,
    writer: Weak<Mutex<SessionWriter>>,
    tracker: Weak<Tracker>,
    listeners: OnceLock<Vec<Arc<dyn SessionListener>>>,
}

impl LateEdits {
    pub(super) fn new(
        file: PathBuf,
        writer: &Arc<Mutex<SessionWriter>>,
        tracker: &Arc<Tracker>,
    ) -> Self {
        LateEdits {
            file,
            writer: Arc::downgrade(writer),
            tracker: Arc::downgrade(tracker),
            listeners: OnceLock::new(),
        }
    }

    /// The product's listeners (made after the agent's configuration).
    pub(super) fn set_listeners(&self, listeners: Vec<Arc<dyn SessionListener>>) {
        let _ = self.listeners.set(listeners);
    }

    /// Appends the entry recording `data` and makes it durable: to the session's writer, or
    /// (the session closed) to its file opened for it.
    fn record(&self, data: serde_json::Value) -> Result<String, String> {
        let entry = EntryData::Custom {
            custom_type: LATE_RESULT_CUSTOM_TYPE.to_string(),
            data,
        };
        let append = |w: &mut SessionWriter| {
            let id = w.append(entry.clone()).map_err(|e| e.to_string())?;
            w.sync_now().map_err(|e| e.to_string())?;
            Ok(id)
        };
        if let Some(writer) = self.writer.upgrade() {
            let mut w = writer
                .lock()
                .map_err(|_| "the session writer failed".to_string())?;
            if w.is_open() {
                return append(&mut w);
            }
        }
        let (mut w, _) = SessionWriter::open(&self.file).map_err(|e| e.to_string())?;
        let id = append(&mut w);
        let closed = w.close().map_err(|e| e.to_string());
        let id = id?;
        closed.map(|_| id)
    }
}

#[async_trait]
impl LateResults for LateEdits {
    fn abandoned(&self, call: &ToolCall) {
        if let Some(t) = self.tracker.upgrade() {
            t.add_pending_edit(AppliedEdit {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                path: call.arguments["path"].as_str().unwrap_or("").to_string(),
            });
        }
    }

    async fn settled(&self, call: ToolCall, output: ToolOutput, is_error: bool) {
        if let Some(t) = self.tracker.upgrade() {
            t.settle_pending_edit(&call.id);
        }
        let path = call.arguments["path"].as_str().unwrap_or("").to_string();
        let text = pi_ai::join_text(&output.content);
        let result = Message::ToolResult(ToolResultMessage {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content: output.content,
            details: output.details,
            is_error,
            timestamp: pi_ai::types::now_millis(),
        });
        let data = json!({"toolCallId": call.id, "toolName": call.name, "message": result});
        let recorded = self.record(data);
        let message = match (&recorded, is_error) {
            (Ok(_), false) => format!(
                "the {} of {path} ({}) was applied by the editor after the run was aborted; it is recorded in the session",
                call.name, call.id
            ),
            (Ok(_), true) => format!(
                "the {} of {path} ({}), stopped by the abort, was not applied: {text}",
                call.name, call.id
            ),
            (Err(e), false) => format!(
                "the {} of {path} ({}) was applied by the editor after the run was aborted, but could not be recorded in the session: {e}",
                call.name, call.id
            ),
            (Err(e), true) => format!(
                "the {} of {path} ({}), stopped by the abort, was not applied ({text}); recording that failed: {e}",
                call.name, call.id
            ),
        };
        if recorded.is_err() {
            tracing::error!("{message}");
        } else {
            tracing::info!("{message}");
        }
        let notice = Notice::LateResult {
            tool_call_id: call.id,
            tool_name: call.name,
            path,
            applied: !is_error,
            entry_id: recorded.ok(),
            message,
        };
        for l in self.listeners.get().into_iter().flatten() {
            l.notice(notice.clone()).await;
        }
    }
}

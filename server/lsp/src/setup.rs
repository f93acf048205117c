//! What the editor adds to a session ([`pi_core::harness::SessionSetup`]): tools over the
//! editor's buffers ([`EditorFs`], with `bash` refused while buffers differ from disk), the
//! editor's guideline in the system prompt, questions and sandbox escalation asked through the
//! editor ([`crate::permissions`]), the editor's declared tools and `diagnostics`
//! ([`crate::editor_tools`]), extension UI over LSP ([`crate::extensions`]) and the events
//! sent as notifications ([`crate::sink`]).

use std::path::PathBuf;
use std::sync::Arc;

use pi_core::agent::{Tool, WeakAgent};
use pi_core::approval::{ApprovalPolicy, Gate};
use pi_core::extension::ExtensionUi;
use pi_core::fs::Fs;
use pi_core::harness::{MessageLevel, SessionListener, SessionSetup, Tracker};
use pi_core::resources::WorkspaceConfig;
use pi_core::sandbox::Approver;
use pi_core::settings::Settings;
use pi_core::tools::BeforeBash;
use tower_lsp_server::ls_types::MessageType;

use crate::editor_fs::EditorFs;
use crate::state::State;

/// The system prompt guideline that tells the model where its edits go.
pub const EDITOR_GUIDELINE: &str = "File edits are applied through the user's editor, where they can be reviewed and undone; read shows unsaved editor changes";

/// The editor's part of a session: the server's state.
pub(crate) struct LspSetup {
    pub(crate) st: Arc<State>,
}

impl SessionSetup for LspSetup {
    fn fs(&self, session_id: &str) -> (Arc<dyn Fs>, Option<BeforeBash>) {
        let st = &self.st;
        let root = st.root();
        let fs = Arc::new(
            EditorFs::new(root.clone(), st.client.clone(), st.docs(), st.caps())
                .with_workspace(st.workspace())
                .with_session(session_id),
        );
        let before: BeforeBash = {
            let fs = fs.clone();
            Arc::new(move || {
                let fs = fs.clone();
                let root = root.clone();
                Box::pin(async move {
                    let dirty = fs.dirty_buffers().await;
                    if dirty.is_empty() {
                        return Ok(());
                    }
                    let names: Vec<String> = dirty
                        .iter()
                        .map(|p| p.strip_prefix(&root).unwrap_or(p).display().to_string())
                        .collect();
                    Err(format!(
                        "{} open editor buffer(s) differ from disk (unsaved changes; this command sees the disk): {}",
                        names.len(),
                        names.join(", ")
                    ))
                })
            })
        };
        (fs, Some(before))
    }

    fn guidelines(&self) -> Vec<String> {
        vec![EDITOR_GUIDELINE.to_string()]
    }

    fn sandbox_approver(&self, session_id: &str) -> Option<Arc<dyn Approver>> {
        Some(Arc::new(crate::permissions::LspApprover::new(
            self.st.client.clone(),
            session_id.to_string(),
            self.st.caps().request_permission,
        )))
    }

    fn gate(&self, ws: &WorkspaceConfig, session_id: &str, tracker: &Arc<Tracker>) -> Arc<Gate> {
        crate::permissions::session_gate(
            ws,
            *self.st.init_approval.lock(),
            Arc::new(
                crate::permissions::LspApprover::new(
                    self.st.client.clone(),
                    session_id.to_string(),
                    self.st.caps().request_permission,
                )
                .with_tracker(tracker.clone()),
            ),
        )
    }

    fn default_policy(&self, settings: &Settings) -> ApprovalPolicy {
        crate::permissions::effective_default(*self.st.init_approval.lock(), settings)
    }

    fn late_tools(
        &self,
        session_id: &str,
        taken: &[String],
        allowed_dirs: &[PathBuf],
    ) -> Vec<Arc<dyn Tool>> {
        let st = &self.st;
        crate::editor_tools::session_tools(
            &st.editor_tools,
            &st.client,
            session_id,
            taken,
            crate::editor_tools::DiagnosticsContext {
                root: st.root(),
                allowed_dirs: allowed_dirs.to_vec(),
                docs: st.docs(),
                encoding: st.caps().encoding,
            },
        )
    }

    fn late_tools_generation(&self, _session_id: &str) -> u64 {
        self.st.editor_tools.generation()
    }

    fn extension_ui(&self, session_id: &str) -> Arc<dyn ExtensionUi> {
        Arc::new(crate::extensions::LspExtensionUi::new(
            &self.st,
            session_id.to_string(),
        ))
    }

    fn show_message(&self, level: MessageLevel, message: String) {
        let client = self.st.client.clone();
        let kind = match level {
            MessageLevel::Info => MessageType::INFO,
            MessageLevel::Warning => MessageType::WARNING,
        };
        tokio::spawn(async move { client.show_message(kind, message).await });
    }

    fn listeners(&self, session_id: &str, agent: &WeakAgent) -> Vec<Arc<dyn SessionListener>> {
        let sink = Arc::new(crate::sink::LspSink::new(
            self.st.clone(),
            session_id.to_string(),
            agent.clone(),
        ));
        let mut sinks = self.st.sinks.lock();
        sinks.retain(|_, s| s.strong_count() > 0);
        let output: Arc<dyn crate::state::SessionOutput> = sink.clone();
        let output = Arc::downgrade(&output);
        sinks.insert(session_id.to_string(), output);
        vec![sink as Arc<dyn SessionListener>]
    }
}

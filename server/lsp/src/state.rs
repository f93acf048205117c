//! [`State`]: what the server's parts share, and the small trait through which handlers reach
//! a session's event output ([`SessionOutput`], implemented by [`crate::sink::LspSink`]).
//!
//! A leaf of the crate's module graph: it holds the types of the modules below it (documents,
//! editor capabilities, editor tools, delta options) and imports nothing that imports it; the
//! modules above (handlers, sink, setup, extensions, the `LanguageServer` impl) receive it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use pi_ai::AssistantMessage;
use pi_core::agent::AgentEvent;
use pi_core::harness::sessions::Error as SessionsError;
use pi_core::harness::{AgentSession, Sessions};
use pi_core::resources::WorkspaceConfig;
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::{
    DidChangeTextDocumentParams, DidCloseTextDocumentParams, DidOpenTextDocumentParams,
};
use tower_lsp_server::Client;

use crate::documents::Documents;
use crate::editor_fs::EditorCaps;
use crate::protocol::{agent_error, codes, invalid};

/// A session's event output as handlers need it (the sink numbers every `agent/event`).
#[async_trait]
pub(crate) trait SessionOutput: Send + Sync {
    /// The `seq` of the last event sent and the streaming message as those events build it.
    async fn sent(&self) -> (u64, Option<AssistantMessage>);
    /// Sends `event` (not from the agent: an extension's error) numbered with the others.
    async fn send_extra(&self, run_id: String, event: AgentEvent);
}

/// What the server shares between its parts: the client handle, the open documents, the
/// editor's capabilities, the workspace and its sessions, the sessions' event outputs, the
/// editor's tools and the delta options. Handlers read it through [`crate::ctx::Ctx`].
pub struct State {
    pub(crate) client: Client,
    pub(crate) docs: Arc<Documents>,
    pub(crate) caps: Mutex<EditorCaps>,
    pub(crate) root: Mutex<PathBuf>,
    /// The workspace's configuration and trust (set by `initialize`).
    pub(crate) workspace: Mutex<Arc<WorkspaceConfig>>,
    /// `initializationOptions.approvalPolicy`: the editor's own setting.
    pub(crate) init_approval: Mutex<Option<pi_core::approval::ApprovalPolicy>>,
    /// The workspace's live sessions (set by `initialize`).
    pub(crate) sessions: std::sync::OnceLock<Arc<Sessions>>,
    /// Each session's event sink, by session id: `agent/messages` answers with what it sent
    /// ([`crate::sink::LspSink::sent`]); an extension's error is numbered by it.
    pub(crate) sinks: Mutex<HashMap<String, Weak<dyn SessionOutput>>>,
    /// Set once the client's `shutdown` request has been answered (the exit code depends on it).
    pub(crate) shutdown_received: Arc<AtomicBool>,
    /// The client answers `agent/ui/request` (`experimental.agent.ui`).
    pub(crate) extension_ui: AtomicBool,
    /// Tools the editor declared and whether it answers `agent/diagnostics`.
    pub(crate) editor_tools: crate::editor_tools::EditorTools,
    /// Between a successful `initialize` and `shutdown`: document sync is applied (by
    /// [`crate::dispatch::Dispatch`] in the read loop).
    pub(crate) accepting_sync: AtomicBool,
    /// `initializationOptions.coalesceDeltasMs` (see [`crate::sink`]).
    pub(crate) coalesce_ms: std::sync::atomic::AtomicU64,
    /// `initializationOptions.compactDeltas` and the sessions' `ref`s (see [`crate::delta`]).
    pub(crate) compact_deltas: crate::delta::CompactDeltas,
    /// Event frames written outside the LSP library's output buffer (see [`crate::transport`]).
    pub(crate) outside: Arc<crate::transport::Outside>,
    /// The sessions [`State::stop`] stopped, held until [`State::leave_to_exit`] (so that
    /// stopping does not drop them: see there).
    stopped: Mutex<Vec<Arc<AgentSession>>>,
}

impl State {
    /// A state before `initialize`: nothing open, the current folder as root, untrusted.
    /// `coalesce`: the deltas' window until `initialize` sets one ([`crate::sink::DEFAULT_COALESCE`]).
    pub(crate) fn new(client: Client, coalesce: Duration) -> State {
        State {
            client,
            docs: Arc::new(Documents::default()),
            caps: Mutex::new(EditorCaps::default()),
            root: Mutex::new(PathBuf::from(".")),
            workspace: Mutex::new(WorkspaceConfig::with_default_agent_dir(
                PathBuf::from("."),
                false,
            )),
            init_approval: Mutex::new(None),
            sessions: std::sync::OnceLock::new(),
            sinks: Mutex::new(HashMap::new()),
            shutdown_received: Default::default(),
            extension_ui: AtomicBool::new(false),
            editor_tools: Default::default(),
            accepting_sync: AtomicBool::new(false),
            coalesce_ms: std::sync::atomic::AtomicU64::new(coalesce.as_millis() as u64),
            compact_deltas: Default::default(),
            outside: Default::default(),
            stopped: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn caps(&self) -> EditorCaps {
        *self.caps.lock()
    }

    /// The open documents.
    pub(crate) fn docs(&self) -> Arc<Documents> {
        self.docs.clone()
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.root.lock().clone()
    }

    pub(crate) fn workspace(&self) -> Arc<WorkspaceConfig> {
        self.workspace.lock().clone()
    }

    /// Whether the client answers `agent/ui/request`.
    pub(crate) fn extension_ui(&self) -> bool {
        self.extension_ui.load(Ordering::Relaxed)
    }

    /// Whether document sync is applied now (after `initialize`, before `shutdown`).
    pub(crate) fn accepting_sync(&self) -> bool {
        self.accepting_sync.load(Ordering::SeqCst)
    }

    /// The workspace's live sessions; before `initialize` (which the library refuses every
    /// request before) an error.
    pub(crate) fn sessions(&self) -> Result<&Arc<Sessions>> {
        self.sessions.get().ok_or_else(|| {
            agent_error(
                codes::SESSION_IO,
                "the server is not initialized: no session is opened or created yet",
            )
        })
    }

    /// The live session `id`, if any (no file is touched).
    pub(crate) fn live_session(&self, id: &str) -> Option<Arc<AgentSession>> {
        self.sessions.get()?.get(id)
    }

    pub(crate) fn set_accepting_sync(&self, on: bool) {
        self.accepting_sync.store(on, Ordering::SeqCst);
    }

    /// `textDocument/didOpen`. Document sync never awaits: it is applied in arrival order.
    pub(crate) fn did_open(&self, p: DidOpenTextDocumentParams) {
        self.docs.open(
            p.text_document.uri,
            &p.text_document.text,
            p.text_document.version,
        );
    }

    /// `textDocument/didChange` (positions in the negotiated encoding).
    pub(crate) fn did_change(&self, p: DidChangeTextDocumentParams) {
        let enc = self.caps().encoding;
        self.docs.change(
            &p.text_document.uri,
            p.text_document.version,
            p.content_changes,
            enc,
        );
    }

    /// `textDocument/didClose`.
    pub(crate) fn did_close(&self, p: DidCloseTextDocumentParams) {
        self.docs.close(&p.text_document.uri);
    }

    /// How long a delta may wait for the next ones (zero: not at all).
    pub(crate) fn coalesce(&self) -> Duration {
        Duration::from_millis(self.coalesce_ms.load(Ordering::Relaxed))
    }

    /// Sets [`State::coalesce`] (`initializationOptions.coalesceDeltasMs`).
    pub(crate) fn set_coalesce(&self, window: Duration) {
        self.coalesce_ms
            .store(window.as_millis() as u64, Ordering::Relaxed);
    }

    /// The output of session `id`, while the session lives.
    pub(crate) fn output(&self, id: &str) -> Option<Arc<dyn SessionOutput>> {
        self.sinks.lock().get(id).and_then(Weak::upgrade)
    }

    /// The live session `id`, or the one resumed from its file ([`Sessions::open`]).
    pub(crate) async fn session(&self, id: &str) -> Result<Arc<AgentSession>> {
        self.sessions()?.open(id).await.map_err(sessions_error)
    }

    /// The session `id` when it is live here, `None` when only its file exists
    /// ([`Sessions::find`]).
    pub(crate) fn open_session(&self, id: &str) -> Result<Option<Arc<AgentSession>>> {
        self.sessions()?.find(id).map_err(sessions_error)
    }

    /// A new session ([`Sessions::create`]).
    pub(crate) fn create_session(
        &self,
        model: Option<&str>,
        thinking: Option<pi_ai::models::ThinkingLevel>,
        name: Option<&str>,
    ) -> Result<Arc<AgentSession>> {
        self.sessions()?
            .create(model, thinking, name)
            .map_err(sessions_error)
    }

    /// Opens the session file at `path` now ([`Sessions::open_file`]).
    pub(crate) fn open_file(&self, path: &Path) -> Result<Arc<AgentSession>> {
        self.sessions()?.open_file(path).map_err(sessions_error)
    }

    /// The server's part of going away: document sync stops, and every live session is
    /// stopped and forgotten ([`Sessions::stop_all`]: no request finds it any more, and none
    /// is opened or created from now on: `-31004`). Used by the `shutdown` request and by
    /// every way the process goes away ([`crate::shutdown`]).
    ///
    /// The stopped sessions are not dropped here: they are held until
    /// [`State::leave_to_exit`] (their files are closed and unlocked all the same).
    pub(crate) async fn stop(&self) -> pi_core::harness::sessions::StopReport {
        self.set_accepting_sync(false);
        match self.sessions() {
            Ok(sessions) => {
                self.stopped.lock().extend(sessions.all());
                sessions.stop_all().await
            }
            Err(_) => Default::default(),
        }
    }

    /// For the process about to exit once its protocol is done (the last frames written,
    /// every session stopped by [`State::stop`], so its file synced and unlocked): the
    /// stopped sessions are never dropped. The OS takes their memory back at exit at once;
    /// dropping them (a 100 MB session's entry tree, its index and shapes) cost 73 M
    /// instructions, ≈ 4 % of opening the file (docs/benchmarks.md, round 39). Returns how
    /// many were left.
    pub(crate) fn leave_to_exit(&self) -> usize {
        let stopped = std::mem::take(&mut *self.stopped.lock());
        let n = stopped.len();
        std::mem::forget(stopped);
        n
    }
}

/// The JSON-RPC error of a [`Sessions`] error.
pub(crate) fn sessions_error(e: SessionsError) -> tower_lsp_server::jsonrpc::Error {
    let code = match &e {
        SessionsError::Invalid { field, message } => return invalid(field, message),
        SessionsError::UnknownSession(_) => codes::UNKNOWN_SESSION,
        SessionsError::Model(_) => codes::MODEL_UNAVAILABLE,
        SessionsError::ShuttingDown | SessionsError::Session(_) | SessionsError::Closed(_) => {
            codes::SESSION_IO
        }
    };
    agent_error(code, e.to_string())
}

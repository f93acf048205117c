//! The LSP server: lifecycle, document sync, and the `agent/*` methods.
//!
//! Handlers answer quickly; a run goes on in its own task and streams `agent/event`
//! notifications (plus work-done progress when the client supports it). Each session has at
//! most one active run; a prompt during a run must say `streamingBehavior` and is queued.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pi_ai::Message;
use pi_core::agent::Delivery;
use pi_core::harness::{choose_model, sessions_dir, AgentSession, Opening};
use pi_core::resources::WorkspaceConfig;
use pi_core::session::{find_session_file, SessionError};
use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::{
    DidChangeTextDocumentParams, DidCloseTextDocumentParams, DidOpenTextDocumentParams,
    InitializeParams, InitializeResult, InitializedParams, MessageType, ServerCapabilities,
    ServerInfo, TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions,
};
use tower_lsp_server::{Client, LanguageServer, LspService};

use crate::documents::{uri_path, Documents};
use crate::editor_fs::EditorCaps;
use crate::protocol::{
    agent_error, codes, parse_params, AbortParams, AbortResult, CompactParams, CompactResult,
    DeliverAs, PromptParams, PromptResult, StreamingBehavior,
};
use crate::setup::LspSetup;
use crate::sink::send_queue_update;
use crate::tracker::Tracker;

/// One session of this server: the live conversation ([`AgentSession`], reached through
/// `Deref`) and what its user is shown besides the events ([`Tracker`]).
pub(crate) struct Session {
    core: AgentSession,
    pub(crate) tracker: Arc<Tracker>,
}

impl std::ops::Deref for Session {
    type Target = AgentSession;
    fn deref(&self) -> &AgentSession {
        &self.core
    }
}

impl std::ops::DerefMut for Session {
    fn deref_mut(&mut self) -> &mut AgentSession {
        &mut self.core
    }
}

/// Shared server state.
pub struct State {
    pub(crate) client: Client,
    docs: Arc<Documents>,
    caps: Mutex<EditorCaps>,
    root: Mutex<PathBuf>,
    /// The workspace's configuration and trust (set by `initialize`).
    workspace: Mutex<Arc<WorkspaceConfig>>,
    init_model: Mutex<Option<String>>,
    /// `initializationOptions.approvalPolicy`: the editor's own setting.
    pub(crate) init_approval: Mutex<Option<pi_core::approval::ApprovalPolicy>>,
    pub(crate) sessions: Mutex<HashMap<String, Arc<Mutex<Session>>>>,
    /// See [`Backend::shutdown_received`].
    shutdown_received: Arc<std::sync::atomic::AtomicBool>,
    /// The client answers `agent/ui/request` (`experimental.agent.ui`).
    extension_ui: std::sync::atomic::AtomicBool,
    /// Tools the editor declared and whether it answers `agent/diagnostics`.
    pub(crate) editor_tools: crate::editor_tools::EditorTools,
    /// Between a successful `initialize` and `shutdown`: document sync is applied (by
    /// [`crate::dispatch::Dispatch`] in the read loop).
    accepting_sync: std::sync::atomic::AtomicBool,
    /// Set when [`crate::shutdown::stop_server`] began: no session is opened or created any
    /// more (a request in flight must not take a file back, or fork it, while it is closed).
    going_away: std::sync::atomic::AtomicBool,
    /// `initializationOptions.coalesceDeltasMs` (see [`crate::sink`]).
    pub(crate) coalesce_ms: std::sync::atomic::AtomicU64,
}

/// The language server.
pub struct Backend {
    pub(crate) state: Arc<State>,
}

impl Backend {
    /// Set once the client's `shutdown` request has been answered. The binary exits with 0
    /// only when it is set, 1 otherwise (`exit` or end of input without `shutdown`; LSP 3.17
    /// "exit Notification").
    pub fn shutdown_received(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.state.shutdown_received.clone()
    }
}

/// The one method table: every client → server `agent/*` request with its handler. It makes
/// both the registrations ([`service`]) and [`METHODS`], the list `initialize` advertises in
/// `experimental.agent.methods`, so the two cannot disagree (the test
/// `every_advertised_method_is_registered` checks the running service against the list).
macro_rules! method_table {
    ($($name:literal => $handler:path,)*) => {
        /// Every client → server `agent/*` method, as advertised in `initialize`'s
        /// `experimental.agent.methods`.
        pub const METHODS: &[&str] = &[$($name),*];

        fn register(
            builder: tower_lsp_server::LspServiceBuilder<Backend>,
        ) -> tower_lsp_server::LspServiceBuilder<Backend> {
            builder$(.custom_method($name, $handler))*
        }
    };
}

method_table! {
    "agent/prompt" => Backend::agent_prompt,
    "agent/steer" => Backend::agent_steer,
    "agent/followUp" => Backend::agent_follow_up,
    "agent/abort" => Backend::agent_abort,
    "agent/sendMessage" => Backend::agent_send_message,
    "agent/messages" => Backend::agent_messages,
    "agent/state" => Backend::agent_state,
    "agent/session/new" => Backend::session_new,
    "agent/session/list" => Backend::session_list,
    "agent/session/open" => Backend::session_open,
    "agent/session/close" => Backend::session_close,
    "agent/session/fork" => Backend::session_fork,
    "agent/session/clone" => Backend::session_clone,
    "agent/session/tree" => Backend::session_tree,
    "agent/session/history" => Backend::session_history,
    "agent/session/changes" => Backend::session_changes,
    "agent/session/rewind" => Backend::session_rewind,
    "agent/session/branch" => Backend::session_branch,
    "agent/session/label" => Backend::session_label,
    "agent/session/name" => Backend::session_name,
    "agent/session/stats" => Backend::session_stats,
    "agent/session/export" => Backend::session_export,
    "agent/model/list" => Backend::model_list,
    "agent/model/set" => Backend::model_set,
    "agent/model/cycle" => Backend::model_cycle,
    "agent/thinking/set" => Backend::thinking_set,
    "agent/thinking/cycle" => Backend::thinking_cycle,
    "agent/queue/setModes" => Backend::queue_set_modes,
    "agent/queue/clear" => Backend::queue_clear,
    "agent/queue/remove" => Backend::queue_remove,
    "agent/queue/edit" => Backend::queue_edit,
    "agent/retry/set" => Backend::retry_set,
    "agent/retry/abort" => Backend::retry_abort,
    "agent/bash" => Backend::agent_bash,
    "agent/bash/abort" => Backend::bash_abort,
    "agent/compact" => Backend::agent_compact,
    "agent/compaction/set" => Backend::compaction_set,
    "agent/permissions/set" => Backend::permissions_set,
    "agent/extension/commands" => Backend::extension_commands,
    "agent/tools/register" => Backend::tools_register,
    "agent/tools/unregister" => Backend::tools_unregister,
    "agent/commands" => Backend::commands,
    "agent/session/forkMessages" => Backend::fork_messages,
    "agent/lastAssistantText" => Backend::last_assistant_text,
}

/// Builds the service with the `agent/*` methods registered.
pub fn service() -> (LspService<Backend>, tower_lsp_server::ClientSocket) {
    let builder = LspService::build(|client| {
        crate::logging::attach(client.clone());
        Backend {
            state: Arc::new(State {
                client,
                docs: Arc::new(Documents::default()),
                caps: Mutex::new(EditorCaps::default()),
                root: Mutex::new(PathBuf::from(".")),
                workspace: Mutex::new(WorkspaceConfig::with_default_agent_dir(
                    PathBuf::from("."),
                    false,
                )),
                init_model: Mutex::new(None),
                init_approval: Mutex::new(None),
                sessions: Mutex::new(HashMap::new()),
                shutdown_received: Default::default(),
                extension_ui: std::sync::atomic::AtomicBool::new(false),
                editor_tools: Default::default(),
                accepting_sync: std::sync::atomic::AtomicBool::new(false),
                going_away: std::sync::atomic::AtomicBool::new(false),
                coalesce_ms: crate::sink::default_coalesce_ms(),
            }),
        }
    });
    register(builder).finish()
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    pub(crate) fn caps(&self) -> EditorCaps {
        *lock(&self.caps)
    }

    /// The open documents.
    pub(crate) fn docs(&self) -> Arc<Documents> {
        self.docs.clone()
    }

    pub(crate) fn root(&self) -> PathBuf {
        lock(&self.root).clone()
    }

    pub(crate) fn workspace(&self) -> Arc<WorkspaceConfig> {
        lock(&self.workspace).clone()
    }

    pub(crate) fn init_model(&self) -> Option<String> {
        lock(&self.init_model).clone()
    }

    /// Whether the client answers `agent/ui/request`.
    pub(crate) fn extension_ui(&self) -> bool {
        self.extension_ui.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether document sync is applied now (after `initialize`, before `shutdown`).
    pub(crate) fn accepting_sync(&self) -> bool {
        self.accepting_sync
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Marks the server as going away (see [`State::refuse_if_going_away`]).
    pub(crate) fn set_going_away(&self) {
        self.going_away
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// `-31004` once the server is going away: no session is opened or created then.
    pub(crate) fn refuse_if_going_away(&self) -> Result<()> {
        if self.going_away.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(agent_error(
                codes::SESSION_IO,
                "the server is shutting down: no session is opened or created any more",
            ));
        }
        Ok(())
    }

    pub(crate) fn set_accepting_sync(&self, on: bool) {
        self.accepting_sync
            .store(on, std::sync::atomic::Ordering::SeqCst);
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
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        let editor = EditorCaps::from_client(&params.capabilities);
        self.state.extension_ui.store(
            crate::extensions::client_supports_ui(params.capabilities.experimental.as_ref()),
            std::sync::atomic::Ordering::Relaxed,
        );
        // Editor-side tools: declared in `initializationOptions.editorTools` (a bad list fails
        // `initialize` with InvalidParams naming the field); `diagnostics` when advertised.
        let declared =
            crate::editor_tools::decls_from_init(params.initialization_options.as_ref())?;
        // The other options are checked as strictly, before anything is set: an editor whose
        // `approvalPolicy: "ask"` was misspelt must not silently get the default.
        let (init_model, init_approval, init_trusted) =
            init_options(params.initialization_options.as_ref())?;
        let coalesce = crate::sink::coalesce_option(params.initialization_options.as_ref())
            .map_err(tower_lsp_server::jsonrpc::Error::invalid_params)?;
        self.state.editor_tools.register(None, declared);
        self.state.editor_tools.set_diagnostics(
            params
                .capabilities
                .experimental
                .as_ref()
                .and_then(|e| e.pointer("/agent/diagnostics"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
        );
        let encoding = editor.encoding;
        *lock(&self.state.caps) = editor;
        #[allow(deprecated)]
        let root = params
            .workspace_folders
            .as_ref()
            .and_then(|f| f.first())
            .and_then(|f| uri_path(&f.uri))
            .or_else(|| params.root_uri.as_ref().and_then(uri_path))
            .or_else(|| params.root_path.as_ref().map(PathBuf::from))
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("."));
        let root = root.canonicalize().unwrap_or(root);
        tracing::info!(
            "workspace root {}; position encoding {:?}",
            root.display(),
            encoding
        );
        // Project trust: `initializationOptions.workspaceTrusted: true` loads the project's own
        // configuration; anything else (unknown clients included) leaves it out.
        let trusted = init_trusted.unwrap_or(false);
        tracing::info!("workspace trusted: {trusted}");
        let ws = WorkspaceConfig::with_default_agent_dir(root.clone(), trusted);
        // ED-07: every other `file:` workspace folder is usable by the tools.
        let (folders, ignored) =
            crate::documents::folder_paths(params.workspace_folders.as_deref().unwrap_or(&[]));
        for uri in &ignored {
            tracing::warn!("workspace folder {uri} is not a file: folder; tools cannot use it");
        }
        ws.set_folders(folders);
        *lock(&self.state.workspace) = ws;
        *lock(&self.state.root) = root;
        *lock(&self.state.init_model) = init_model;
        // The editor's own approval setting.
        *lock(&self.state.init_approval) = init_approval;
        if let Some(window) = coalesce {
            self.state.set_coalesce(window);
        }
        self.state.set_accepting_sync(true);
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                position_encoding: Some(encoding.kind()),
                // Options, not the bare kind: clients read a bare kind as also asking for
                // `didSave` (vscode-languageclient, Neovim), which the server does not handle.
                text_document_sync: Some(TextDocumentSyncCapability::Options(
                    TextDocumentSyncOptions {
                        open_close: Some(true),
                        change: Some(TextDocumentSyncKind::INCREMENTAL),
                        will_save: None,
                        will_save_wait_until: None,
                        save: None,
                    },
                )),
                workspace: Some(tower_lsp_server::ls_types::WorkspaceServerCapabilities {
                    workspace_folders: Some(
                        tower_lsp_server::ls_types::WorkspaceFoldersServerCapabilities {
                            supported: Some(true),
                            change_notifications: Some(tower_lsp_server::ls_types::OneOf::Left(
                                true,
                            )),
                        },
                    ),
                    file_operations: None,
                }),
                experimental: Some(
                    serde_json::json!({"agent": {"version": 1, "methods": METHODS}}),
                ),
                ..ServerCapabilities::default()
            },
            server_info: Some(ServerInfo {
                name: "pi-lsp".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            offset_encoding: None,
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        let ws = self.state.workspace();
        if let Some(n) =
            pi_core::harness::untrusted_notice(&ws, "trust the workspace in the editor to load it")
        {
            tracing::warn!("{n}");
            self.state
                .client
                .show_message(MessageType::WARNING, n)
                .await;
        }
    }

    /// Stops every session as the process's going away does ([`crate::shutdown::stop_server`]:
    /// runs and user commands aborted, results written, process groups killed, files closed
    /// and unlocked). Run in a task of its own so that a cancelled request cannot stop it
    /// halfway.
    async fn shutdown(&self) -> Result<()> {
        self.state
            .shutdown_received
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let state = self.state.clone();
        let _ = tokio::spawn(async move { crate::shutdown::stop_server(&state).await }).await;
        Ok(())
    }

    // Document sync is applied by `Dispatch` in the read loop; these run only for a message
    // it left to the service. Mutate synchronously, before any await, so arrival order holds.
    async fn did_open(&self, p: DidOpenTextDocumentParams) {
        self.state.did_open(p);
    }

    async fn did_change(&self, p: DidChangeTextDocumentParams) {
        self.state.did_change(p);
    }

    async fn did_close(&self, p: DidCloseTextDocumentParams) {
        self.state.did_close(p);
    }

    /// ED-07: folders added and removed; the root (the first folder, where sessions live)
    /// stays.
    async fn did_change_workspace_folders(
        &self,
        p: tower_lsp_server::ls_types::DidChangeWorkspaceFoldersParams,
    ) {
        let ws = self.state.workspace();
        let (added, ignored) = crate::documents::folder_paths(&p.event.added);
        let (removed, _) = crate::documents::folder_paths(&p.event.removed);
        for uri in &ignored {
            tracing::warn!("workspace folder {uri} is not a file: folder; tools cannot use it");
        }
        if removed.iter().any(|r| r == ws.root()) {
            tracing::warn!(
                "the first workspace folder {} was removed; sessions and settings stay there",
                ws.root().display()
            );
        }
        let mut now: Vec<PathBuf> = ws.folders().read().map(|f| f.clone()).unwrap_or_default();
        now.retain(|f| !removed.contains(f));
        now.extend(added);
        tracing::info!(
            "workspace folders besides {}: {}",
            ws.root().display(),
            now.iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        ws.set_folders(now);
    }
}

impl Backend {
    /// `agent/prompt {text, images?, sessionId?, model?, streamingBehavior?}` →
    /// `{sessionId, runId, queued, queueId?, command?}` (`command` when `/name args` ran an
    /// extension command instead of a prompt; see [`crate::extensions`]).
    async fn agent_prompt(&self, params: Value) -> Result<PromptResult> {
        let mut p: PromptParams = parse_params(params)?;
        if p.text.starts_with('/') {
            // Extension commands come first (Pi: checked before templates and skills) and run
            // at once, also during a run.
            let session = match &p.session_id {
                Some(id) => self.session(id)?,
                None => self.create_session(p.model.as_deref(), None, None)?,
            };
            let (id, extensions) = {
                let s = lock(&session);
                (s.id().to_string(), s.extensions().clone())
            };
            if let Some(name) = extensions.run_command(&p.text).await {
                return Ok(PromptResult {
                    session_id: id,
                    run_id: String::new(),
                    queued: false,
                    queue_id: None,
                    command: Some(name),
                });
            }
            p.session_id = Some(id);
        }
        let text = pi_core::harness::expand_prompt(&self.state.workspace(), &p.text);
        let message = crate::methods::user_message(&text, p.images.as_deref(), "images")?;
        let session = match &p.session_id {
            Some(id) => self.session(id)?,
            None => self.create_session(p.model.as_deref(), None, None)?,
        };
        let (id, streaming) = {
            let s = lock(&session);
            (s.id().to_string(), s.agent().is_streaming())
        };
        if streaming {
            if let Some(b) = p.streaming_behavior {
                // The queued message joins the running run, which keeps its model: a `model`
                // asking for another one would be dropped without a word.
                if let Some(m) = &p.model {
                    if *m != lock(&session).model().full_id() {
                        return Err(crate::methods::invalid(
                            "model",
                            format!("cannot switch to {m:?} while a run is active: a queued prompt joins the running run, which keeps its model; switch with agent/model/set (from the next run) or after agent/abort"),
                        ));
                    }
                }
                let how = match b {
                    StreamingBehavior::Steer => DeliverAs::Steer,
                    StreamingBehavior::FollowUp => DeliverAs::FollowUp,
                };
                let (queue_id, run_id) = self.enqueue(&session, how, message, None).await;
                return Ok(PromptResult {
                    session_id: id,
                    run_id: run_id.unwrap_or_default(),
                    queued: true,
                    queue_id: Some(queue_id),
                    command: None,
                });
            }
        } else if let Some(m) = &p.model {
            let current = lock(&session).model().full_id();
            if *m != current {
                let (model, _) = choose_model(&self.state.workspace(), Some(m), None)
                    .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?;
                crate::methods::set_model(&session, model)?;
            }
        }
        let s = lock(&session);
        let busy = |s: &Session| {
            if s.is_rewinding() {
                return agent_error(
                    codes::SESSION_BUSY,
                    format!("session {} is rewinding (agent/session/rewind); send the prompt when it has answered", s.id()),
                );
            }
            agent_error(
                codes::SESSION_BUSY,
                format!("session {} is running {}; send streamingBehavior \"steer\" or \"followUp\" to queue this prompt, or agent/abort first", s.id(), s.agent().run_id().unwrap_or_default()),
            )
        };
        // Tools, caps and project instructions are read afresh for every prompt. While a run
        // is finishing (its agent_end already sent), the prompt starts the next run.
        let run_id = s.prompt(vec![message]).map_err(|_| busy(&s))?;
        Ok(PromptResult {
            session_id: s.id().to_string(),
            run_id,
            queued: false,
            queue_id: None,
            command: None,
        })
    }

    /// Queues `message` on `session` after telling the client (so `queued` always comes
    /// before `delivered`); returns the queue id and the active run id.
    pub(crate) async fn enqueue(
        &self,
        session: &Arc<Mutex<Session>>,
        how: DeliverAs,
        message: Message,
        entry: Option<(String, Value)>,
    ) -> (String, Option<String>) {
        let (sid, tracker) = {
            let s = lock(session);
            (s.id().to_string(), s.tracker.clone())
        };
        let report = tracker.queue(how, message.clone(), entry);
        send_queue_update(
            &self.state.client,
            &sid,
            &tracker,
            &report,
            crate::protocol::QueueState::Queued,
        )
        .await;
        let s = lock(session);
        let delivery = match how {
            DeliverAs::Steer => Delivery::Steer,
            DeliverAs::FollowUp => Delivery::FollowUp,
            DeliverAs::NextTurn => Delivery::NextTurn,
        };
        s.agent().enqueue(message, delivery);
        let run = s
            .agent()
            .is_streaming()
            .then(|| s.agent().run_id())
            .flatten();
        (report.queue_id, run)
    }

    /// The live session `id`, or the one resumed from its file in `.pi/sessions/` (or in Pi's
    /// own sessions folder of this workspace).
    pub(crate) fn session(&self, id: &str) -> Result<Arc<Mutex<Session>>> {
        // Bind first: the map's lock must be released before `resume` takes it.
        let known = lock(&self.state.sessions).get(id).cloned();
        match known {
            Some(s) => Ok(s),
            None => {
                let root = self.state.root();
                let path = find_session_file(&sessions_dir(&self.state.workspace()), id)
                    .or_else(|| {
                        // Pi's own sessions of this folder.
                        let agent = pi_ai::models::agent_dir()?;
                        find_session_file(&pi_core::session::pi_sessions_dir(&agent, &root), id)
                    })
                    .ok_or_else(|| {
                        agent_error(
                            codes::UNKNOWN_SESSION,
                            format!(
                                "no session {id} in {}",
                                sessions_dir(&self.state.workspace()).display()
                            ),
                        )
                    })?;
                self.open_file(&path)
            }
        }
    }

    /// A new session (and file) with `model` (default: the usual choice), `thinking` and
    /// `name`.
    pub(crate) fn create_session(
        &self,
        model: Option<&str>,
        thinking: Option<pi_ai::models::ThinkingLevel>,
        name: Option<&str>,
    ) -> Result<Arc<Mutex<Session>>> {
        let st = &self.state;
        st.refuse_if_going_away()?;
        let ws = st.workspace();
        let init_model = st.init_model();
        let (mut model, notice) = choose_model(&ws, model, init_model.as_deref())
            .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?;
        if let Some(n) = notice {
            let client = st.client.clone();
            tokio::spawn(async move { client.show_message(MessageType::INFO, n).await });
        }
        if let Some(level) = thinking {
            model.thinking_level = Some(model.clamp_thinking_level(level));
        }
        let tracker = Arc::new(Tracker::new(Default::default()));
        let setup = Arc::new(LspSetup {
            st: st.clone(),
            tracker: tracker.clone(),
        });
        let core = AgentSession::create(ws, setup, model, name)
            .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
        let id = core.id().to_string();
        let s = Arc::new(Mutex::new(Session { core, tracker }));
        lock(&st.sessions).insert(id, s.clone());
        Ok(s)
    }

    /// Opens the session file at `path` (or returns it when already open here).
    pub(crate) fn open_file(&self, path: &Path) -> Result<Arc<Mutex<Session>>> {
        let st = &self.state;
        st.refuse_if_going_away()?;
        let ws = st.workspace();
        let opening = pi_core::harness::open_file(&ws, path, |id| {
            let s = lock(&st.sessions).get(id).cloned()?;
            let s = lock(&s);
            let file = lock(s.core.writer()).path().to_path_buf();
            Some(file)
        });
        let (writer, loaded, notices) = match opening {
            Ok(Opening::Opened {
                writer,
                loaded,
                notices,
            }) => (writer, loaded, notices),
            Ok(Opening::AlreadyOpen(id)) => {
                if let Some(s) = lock(&st.sessions).get(&id).cloned() {
                    return Ok(s);
                }
                return Err(agent_error(
                    codes::SESSION_IO,
                    format!("session {id} was closed while it was being opened"),
                ));
            }
            Err(SessionError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(agent_error(
                    codes::UNKNOWN_SESSION,
                    format!("no session file {}", path.display()),
                ))
            }
            Err(e) => return Err(agent_error(codes::SESSION_IO, e.to_string())),
        };
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        for msg in notices {
            // A fork instead of a held file, repairs made while loading: told to the user,
            // not only logged (cases SESS-01, SESS-02, SESS-04).
            tracing::warn!("{msg}");
            let client = st.client.clone();
            tokio::spawn(async move { client.show_message(MessageType::WARNING, msg).await });
        }
        let tracker = Arc::new(Tracker::new(crate::methods::file_usage(&loaded.tree)));
        let setup = Arc::new(LspSetup {
            st: st.clone(),
            tracker: tracker.clone(),
        });
        let init_model = st.init_model();
        let core = AgentSession::resume(ws, setup, writer, loaded, init_model.as_deref())
            .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?;
        let id = core.id().to_string();
        let s = Arc::new(Mutex::new(Session { core, tracker }));
        Ok(lock(&st.sessions).entry(id).or_insert(s).clone())
    }

    /// `agent/compact {sessionId, instructions?}` → Pi's `CompactionResult`
    /// `{summary, firstKeptEntryId, tokensBefore, details}` once the `compaction` entry is written.
    /// The session is busy meanwhile (prompts need `streamingBehavior`; queued ones run after
    /// it); asked for during a run, it waits until the run settles. `agent/abort` cancels it.
    async fn agent_compact(&self, params: Value) -> Result<CompactResult> {
        let p: CompactParams = parse_params(params)?;
        // Like every session method: a session file not open yet is opened on first use.
        let session = self.session(&p.session_id)?;
        let (control, rx) = {
            let s = lock(&session);
            s.reconfigure();
            let (_, control, rx) = s.agent().compact(p.instructions).map_err(|_| {
                agent_error(
                    codes::SESSION_BUSY,
                    format!("session {} already has a compaction waiting", p.session_id),
                )
            })?;
            (control, rx)
        };
        // `$/cancelRequest` drops this future: the compaction is then cancelled as by
        // `agent/abort` (nothing is written), so a request answered "cancelled" never leaves a
        // compaction behind.
        let cancel_on_drop = control.cancel.clone().drop_guard();
        let outcome = rx.await;
        cancel_on_drop.disarm();
        match outcome {
            Ok(Ok(r)) => Ok(CompactResult(r)),
            Ok(Err(e)) => Err(agent_error(codes::COMPACTION_FAILED, e.to_string())),
            Err(_) => Err(agent_error(
                codes::COMPACTION_FAILED,
                "the compaction ended without a result",
            )),
        }
    }

    /// `agent/abort {sessionId}` → what was stopped; idempotent. Waits for the run to end
    /// (at most [`ABORT_WAIT`]) so the answer is complete.
    async fn agent_abort(&self, params: Value) -> Result<AbortResult> {
        let p: AbortParams = parse_params(params)?;
        let session = lock(&self.state.sessions).get(&p.session_id).cloned();
        let Some(session) = session else {
            // A session file that is not open has no run: nothing to stop (opening it just to
            // say so would take its lock). Only an id no file has is unknown.
            if find_session_file(&sessions_dir(&self.state.workspace()), &p.session_id).is_none() {
                return Err(agent_error(
                    codes::UNKNOWN_SESSION,
                    format!("no session {}", p.session_id),
                ));
            }
            return Ok(AbortResult {
                aborted: false,
                run_id: None,
                stopped_tool_calls: Vec::new(),
                stopped_processes: Vec::new(),
                applied_edits: Vec::new(),
                queued_messages: Vec::new(),
            });
        };
        let (agent, tracker) = {
            let s = lock(&session);
            (s.agent().clone(), s.tracker.clone())
        };
        let (calls, procs) = tracker.active();
        let run_id = agent.is_streaming().then(|| agent.run_id()).flatten();
        let aborted = agent.abort();
        if !aborted {
            return Ok(AbortResult {
                aborted,
                run_id: None,
                stopped_tool_calls: Vec::new(),
                stopped_processes: Vec::new(),
                applied_edits: Vec::new(),
                queued_messages: tracker.queued(),
            });
        }
        let _ = tokio::time::timeout(ABORT_WAIT, agent.wait_for_idle()).await;
        Ok(AbortResult {
            aborted,
            run_id,
            stopped_tool_calls: calls,
            stopped_processes: procs,
            applied_edits: tracker.edits(),
            queued_messages: tracker.queued(),
        })
    }
}

/// `initializationOptions.model`, `.approvalPolicy` and `.workspaceTrusted`, each `None` when
/// absent or `null`. A value of the wrong type or an unknown policy name is InvalidParams
/// naming the field (as a bad `editorTools` declaration is).
fn init_options(
    options: Option<&Value>,
) -> Result<(
    Option<String>,
    Option<pi_core::approval::ApprovalPolicy>,
    Option<bool>,
)> {
    let bad = |field: &str, why: String| {
        tower_lsp_server::jsonrpc::Error::invalid_params(format!(
            "initializationOptions.{field}: {why}"
        ))
    };
    let Some(o) = options.filter(|o| !o.is_null()) else {
        return Ok((None, None, None));
    };
    let Some(o) = o.as_object() else {
        return Err(tower_lsp_server::jsonrpc::Error::invalid_params(format!(
            "initializationOptions: expected an object, got {o}"
        )));
    };
    let get = |k: &str| o.get(k).filter(|v| !v.is_null());
    let model = match get("model") {
        None => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(v) => return Err(bad("model", format!("expected \"provider/id\", got {v}"))),
    };
    let approval = match get("approvalPolicy") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(pi_core::approval::ApprovalPolicy::parse)
                .ok_or_else(|| {
                    bad(
                        "approvalPolicy",
                        format!("expected \"ask\", \"auto-edit\" or \"approve-all\", got {v}"),
                    )
                })?,
        ),
    };
    let trusted = match get("workspaceTrusted") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            return Err(bad(
                "workspaceTrusted",
                format!("expected a boolean, got {v}"),
            ))
        }
    };
    Ok((model, approval, trusted))
}

/// How long `agent/abort` waits for the run to end before answering.
pub const ABORT_WAIT: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use tower_lsp_server::jsonrpc::{ErrorCode, Request};
    use tower_service::Service;

    /// `initialize` advertises exactly the method table, and every advertised method reaches
    /// a handler of the running service (by-position params are refused by every handler
    /// before it does anything, so no session is created).
    #[tokio::test]
    async fn every_advertised_method_is_registered() {
        let root = std::env::temp_dir().join(format!("pi-lsp-methods-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let (mut service, _socket) = service();
        let init = Request::build("initialize")
            .params(serde_json::json!({"capabilities": {}, "rootUri": null,
                "workspaceFolders": null, "rootPath": root.display().to_string()}))
            .id(1)
            .finish();
        let response = service.call(init).await.unwrap().unwrap();
        let (_, result) = response.into_parts();
        let advertised =
            result.unwrap()["capabilities"]["experimental"]["agent"]["methods"].clone();
        assert_eq!(advertised, serde_json::json!(METHODS));
        for (i, method) in METHODS.iter().enumerate() {
            let request = Request::build(*method)
                .params(serde_json::json!([1]))
                .id(i as i64 + 2)
                .finish();
            let response = service.call(request).await.unwrap().unwrap();
            let (_, result) = response.into_parts();
            let code = result.err().map(|e| e.code);
            assert_eq!(code, Some(ErrorCode::InvalidParams), "{method}");
        }
        let unknown = Request::build("agent/notAMethod")
            .params(serde_json::json!({}))
            .id(1000)
            .finish();
        let (_, result) = service.call(unknown).await.unwrap().unwrap().into_parts();
        assert_eq!(
            result.err().map(|e| e.code),
            Some(ErrorCode::MethodNotFound)
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}

//! The LSP server: lifecycle, document sync, and the `agent/*` methods.
//!
//! Handlers answer quickly; a run goes on in its own task and streams `agent/event`
//! notifications (plus work-done progress when the client supports it). Each session has at
//! most one active run; a prompt during a run must say `streamingBehavior` and is queued.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pi_ai::AssistantEvent;
use pi_ai::{Message, Model};
use pi_core::agent::{
    Agent, AgentConfig, AgentEvent, CompactionReason, Delivery, EventSink, Subscription, WeakAgent,
};
use pi_core::resources::WorkspaceConfig;
use pi_core::session::{find_session_file, read_tree, SessionError, SessionWriter};
use pi_core::tools::BeforeBash;
use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::{
    notification::Progress, DidChangeTextDocumentParams, DidCloseTextDocumentParams,
    DidOpenTextDocumentParams, InitializeParams, InitializeResult, InitializedParams, MessageType,
    NumberOrString, ProgressParams, ProgressParamsValue, ProgressToken, ServerCapabilities,
    ServerInfo, TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions,
    WorkDoneProgress, WorkDoneProgressBegin, WorkDoneProgressEnd, WorkDoneProgressReport,
};
use tower_lsp_server::{Client, LanguageServer, LspService};

use crate::documents::{uri_path, Documents};
use crate::editor_fs::{EditorCaps, EditorFs};
use crate::protocol::{
    agent_error, codes, parse_params, AbortParams, AbortResult, AgentEventNotification,
    AgentEventParams, AttentionNotification, AttentionParams, CompactParams, CompactResult,
    DeliverAs, PromptParams, PromptResult, QueueUpdateNotification, QueueUpdateParams,
    StreamingBehavior, UsageNotification, UsageParams,
};
use crate::runner::{choose_model, sessions_dir, Recorder};
use crate::tracker::{Notice, Tracker};

/// The state of one session in this server: its file, its [`Agent`] (at most one run) and
/// what its user is shown besides the events ([`Tracker`]).
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) writer: Arc<Mutex<SessionWriter>>,
    pub(crate) agent: Agent,
    pub(crate) model: Model,
    pub(crate) tracker: Arc<Tracker>,
    /// Automatic retry of transient provider failures (settings' `retry.enabled`, then
    /// `agent/retry/set`).
    pub(crate) auto_retry: bool,
    /// Automatic compaction on (settings' `compaction.enabled`, then `agent/compaction/set`).
    pub(crate) auto_compaction: bool,
    /// The session's name (`session_info`).
    pub(crate) name: Option<String>,
    /// The file this session was forked from (header `parentSession`).
    pub(crate) parent_session: Option<String>,
    /// The session's approval policy and "allow always" rules ([`crate::permissions`]).
    pub(crate) approval: Arc<pi_core::approval::Gate>,
    /// Keeps the session's event listener registered.
    _events: Subscription,
    /// The session's extensions (see [`crate::extensions`]).
    pub(crate) extensions: Arc<pi_core::extension::Extensions>,
    /// Keeps the extensions' event handlers registered (when they have any).
    _extension_events: Option<Subscription>,
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

/// Builds the service with the `agent/*` methods registered.
pub fn service() -> (LspService<Backend>, tower_lsp_server::ClientSocket) {
    LspService::build(|client| {
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
            }),
        }
    })
    .custom_method("agent/prompt", Backend::agent_prompt)
    .custom_method("agent/abort", Backend::agent_abort)
    .custom_method("agent/compact", Backend::agent_compact)
    .custom_method("agent/compaction/set", Backend::compaction_set)
    .custom_method("agent/steer", Backend::agent_steer)
    .custom_method("agent/followUp", Backend::agent_follow_up)
    .custom_method("agent/sendMessage", Backend::agent_send_message)
    .custom_method("agent/messages", Backend::agent_messages)
    .custom_method("agent/state", Backend::agent_state)
    .custom_method("agent/session/new", Backend::session_new)
    .custom_method("agent/session/list", Backend::session_list)
    .custom_method("agent/session/open", Backend::session_open)
    .custom_method("agent/session/close", Backend::session_close)
    .custom_method("agent/session/fork", Backend::session_fork)
    .custom_method("agent/session/clone", Backend::session_clone)
    .custom_method("agent/session/tree", Backend::session_tree)
    .custom_method("agent/session/branch", Backend::session_branch)
    .custom_method("agent/session/label", Backend::session_label)
    .custom_method("agent/session/name", Backend::session_name)
    .custom_method("agent/session/stats", Backend::session_stats)
    .custom_method("agent/session/export", Backend::session_export)
    .custom_method("agent/model/list", Backend::model_list)
    .custom_method("agent/model/set", Backend::model_set)
    .custom_method("agent/model/cycle", Backend::model_cycle)
    .custom_method("agent/thinking/set", Backend::thinking_set)
    .custom_method("agent/thinking/cycle", Backend::thinking_cycle)
    .custom_method("agent/queue/setModes", Backend::queue_set_modes)
    .custom_method("agent/queue/clear", Backend::queue_clear)
    .custom_method("agent/retry/set", Backend::retry_set)
    .custom_method("agent/retry/abort", Backend::retry_abort)
    .custom_method("agent/bash", Backend::agent_bash)
    .custom_method("agent/bash/abort", Backend::bash_abort)
    .custom_method("agent/permissions/set", Backend::permissions_set)
    .custom_method("agent/extension/commands", Backend::extension_commands)
    .custom_method("agent/tools/register", Backend::tools_register)
    .custom_method("agent/tools/unregister", Backend::tools_unregister)
    .custom_method("agent/commands", Backend::commands)
    .custom_method("agent/session/forkMessages", Backend::fork_messages)
    .custom_method("agent/lastAssistantText", Backend::last_assistant_text)
    .custom_method(crate::transport::PARSE_ERROR_METHOD, Backend::parse_error)
    .custom_method(
        crate::transport::INVALID_REQUEST_METHOD,
        Backend::invalid_request,
    )
    .finish()
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    fn caps(&self) -> EditorCaps {
        *lock(&self.caps)
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
                    serde_json::json!({"agent": {"version": 1, "methods": crate::protocol::METHODS}}),
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
            crate::runner::untrusted_notice(&ws, "trust the workspace in the editor to load it")
        {
            tracing::warn!("{n}");
            self.state
                .client
                .show_message(MessageType::WARNING, n)
                .await;
        }
    }

    async fn shutdown(&self) -> Result<()> {
        self.state
            .shutdown_received
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let sessions: Vec<Arc<Mutex<Session>>> =
            lock(&self.state.sessions).values().cloned().collect();
        for s in &sessions {
            lock(s).agent.abort();
        }
        for s in &sessions {
            let agent = lock(s).agent.clone();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(3), agent.wait_for_idle())
                .await;
        }
        // Dropping the sessions closes their files and removes their `.lock` files.
        drop(sessions);
        lock(&self.state.sessions).clear();
        Ok(())
    }

    // Document sync: mutate synchronously, before any await, so arrival order holds.
    async fn did_open(&self, p: DidOpenTextDocumentParams) {
        self.state.docs.open(
            p.text_document.uri,
            &p.text_document.text,
            p.text_document.version,
        );
    }

    async fn did_change(&self, p: DidChangeTextDocumentParams) {
        let enc = self.state.caps().encoding;
        self.state.docs.change(
            &p.text_document.uri,
            p.text_document.version,
            p.content_changes,
            enc,
        );
    }

    async fn did_close(&self, p: DidCloseTextDocumentParams) {
        self.state.docs.close(&p.text_document.uri);
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
                (s.id.clone(), s.extensions.clone())
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
        let text = crate::runner::expand_prompt(&self.state.workspace(), &p.text);
        let message = crate::methods::user_message(&text, p.images.as_deref(), "images")?;
        let session = match &p.session_id {
            Some(id) => self.session(id)?,
            None => self.create_session(p.model.as_deref(), None, None)?,
        };
        let (id, streaming) = {
            let s = lock(&session);
            (s.id.clone(), s.agent.is_streaming())
        };
        if streaming {
            if let Some(b) = p.streaming_behavior {
                // The queued message joins the running run, which keeps its model: a `model`
                // asking for another one would be dropped without a word.
                if let Some(m) = &p.model {
                    if *m != lock(&session).model.full_id() {
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
            let current = lock(&session).model.full_id();
            if *m != current {
                let (model, _) = choose_model(&self.state.workspace(), Some(m), None)
                    .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?;
                crate::methods::set_model(&self.state, &session, model)?;
            }
        }
        let s = lock(&session);
        let busy = |s: &Session| {
            agent_error(
                codes::SESSION_BUSY,
                format!("session {} is running {}; send streamingBehavior \"steer\" or \"followUp\" to queue this prompt, or agent/abort first", s.id, s.agent.run_id().unwrap_or_default()),
            )
        };
        if !s.agent.is_streaming() {
            // Tools, caps and project instructions are read afresh for every prompt.
            s.agent.set_config(session_config(&self.state, &s));
        }
        // While a run is finishing (its agent_end already sent), the prompt starts the next run.
        let (run_id, _) = s.agent.prompt(vec![message]).map_err(|_| busy(&s))?;
        Ok(PromptResult {
            session_id: s.id.clone(),
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
            (s.id.clone(), s.tracker.clone())
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
        s.agent.enqueue(message, delivery);
        let run = s.agent.is_streaming().then(|| s.agent.run_id()).flatten();
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
        let root = st.root();
        let init_model = st.init_model();
        let (mut model, notice) = choose_model(&st.workspace(), model, init_model.as_deref())
            .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?;
        if let Some(n) = notice {
            let client = st.client.clone();
            tokio::spawn(async move { client.show_message(MessageType::INFO, n).await });
        }
        if let Some(level) = thinking {
            model.thinking_level = Some(model.clamp_thinking_level(level));
        }
        let mut writer = SessionWriter::create(
            &sessions_dir(&self.state.workspace()),
            &root,
            &model.provider,
            &model.id,
            crate::runner::thinking_level_name(&model),
        )
        .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
        if let Some(n) = name {
            writer
                .set_name(n)
                .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
        }
        let id = writer.id().to_string();
        let mut session = new_session(
            st,
            id.clone(),
            writer,
            model,
            Vec::new(),
            Default::default(),
        );
        session.name = name.map(str::to_string);
        let s = Arc::new(Mutex::new(session));
        lock(&st.sessions).insert(id, s.clone());
        Ok(s)
    }

    /// Opens the session file at `path` (or returns it when already open here).
    pub(crate) fn open_file(&self, path: &Path) -> Result<Arc<Mutex<Session>>> {
        let init_model = self.state.init_model();
        // Open here already: that is the session (a second writer would take over its lock).
        if let Some(id) = header_id(path) {
            if let Some(s) = lock(&self.state.sessions).get(&id).cloned() {
                return Ok(s);
            }
        }
        let (writer, loaded) = match SessionWriter::open(path) {
            Ok(w) => w,
            // Another process appends to it: continue in a fork and say so (SESS-04).
            Err(SessionError::Locked { pid, .. }) => {
                let (tree, _) = read_tree(path, false)
                    .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
                let id = tree.header["id"].as_str().unwrap_or_default().to_string();
                // Open in this server already: that is the session.
                if let Some(s) = lock(&self.state.sessions).get(&id).cloned() {
                    return Ok(s);
                }
                let fork = SessionWriter::fork_from(
                    path,
                    &tree,
                    &sessions_dir(&self.state.workspace()),
                    None,
                )
                .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
                let msg = format!("pi-lsp: session {id} is open in another process ({pid}); continuing in a fork, session {}", fork.1.id);
                tracing::warn!("{msg}");
                let client = self.state.client.clone();
                tokio::spawn(async move { client.show_message(MessageType::WARNING, msg).await });
                fork
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
        let id = loaded.id.clone();
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        if !loaded.warnings.is_empty() {
            // Repairs (a torn last line set aside, damaged lines skipped, a migration) are told
            // to the user, not only logged (cases SESS-01, SESS-02).
            let msg = format!(
                "pi-lsp: session {} was repaired while opening: {}",
                loaded.id,
                loaded.warnings.join("; ")
            );
            let client = self.state.client.clone();
            tokio::spawn(async move { client.show_message(MessageType::WARNING, msg).await });
        }
        let wanted = loaded.model.as_ref().map(|(p, m)| format!("{p}/{m}"));
        let ws = self.state.workspace();
        let mut model = choose_model(&ws, wanted.as_deref(), None)
            .or_else(|_| choose_model(&ws, None, init_model.as_deref()))
            .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?
            .0;
        // The thinking level recorded on the session's path wins over the default.
        if let Some(level) = loaded
            .thinking_level
            .as_deref()
            .and_then(pi_ai::models::ThinkingLevel::parse)
        {
            model.thinking_level = Some(model.clamp_thinking_level(level));
        }
        let totals = crate::methods::file_usage(&loaded.tree);
        let mut session = new_session(
            &self.state,
            id.to_string(),
            writer,
            model,
            loaded.messages,
            totals,
        );
        session.name = loaded.name.clone();
        session.parent_session = loaded.tree.header["parentSession"]
            .as_str()
            .map(str::to_string);
        let s = Arc::new(Mutex::new(session));
        Ok(lock(&self.state.sessions)
            .entry(id.to_string())
            .or_insert(s)
            .clone())
    }

    /// Answers a frame the transport guard could not parse (see [`crate::transport`]).
    async fn parse_error(&self, params: Value) -> Result<Value> {
        let detail = params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("invalid message");
        Err(tower_lsp_server::jsonrpc::Error {
            code: tower_lsp_server::jsonrpc::ErrorCode::ParseError,
            message: format!("Parse error: {detail}").into(),
            data: None,
        })
    }

    /// Answers a frame that is JSON but not a JSON-RPC request (see [`crate::transport`]).
    async fn invalid_request(&self, params: Value) -> Result<Value> {
        let detail = params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("invalid message");
        Err(tower_lsp_server::jsonrpc::Error {
            code: tower_lsp_server::jsonrpc::ErrorCode::InvalidRequest,
            message: format!("Invalid request: {detail}").into(),
            data: None,
        })
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
            if !s.agent.is_streaming() {
                s.agent.set_config(session_config(&self.state, &s));
            }
            let (_, control, rx) = s.agent.compact(p.instructions).map_err(|_| {
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
            (s.agent.clone(), s.tracker.clone())
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

/// The `id` of a session file's header line.
fn header_id(path: &Path) -> Option<String> {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(std::fs::File::open(path).ok()?)
        .read_line(&mut line)
        .ok()?;
    let v: Value = serde_json::from_str(&line).ok()?;
    v["id"].as_str().map(str::to_string)
}

/// How long `agent/abort` waits for the run to end before answering.
pub const ABORT_WAIT: Duration = Duration::from_secs(5);

/// Sends `agent/queueUpdate` for `report` now in `state`.
pub(crate) async fn send_queue_update(
    client: &Client,
    session_id: &str,
    tracker: &Tracker,
    report: &crate::protocol::QueuedMessage,
    state: crate::protocol::QueueState,
) {
    let (steering, follow_up) = tracker.waiting();
    client
        .send_notification::<QueueUpdateNotification>(
            serde_json::to_value(QueueUpdateParams {
                session_id: session_id.to_string(),
                queue_id: report.queue_id.clone(),
                delivery: report.delivery,
                state,
                text: report.text.clone(),
                steering,
                follow_up,
            })
            .unwrap_or_default(),
        )
        .await;
}

/// The session's agent configuration: [`agent_config`] with the session's retry switch.
pub(crate) fn session_config(st: &Arc<State>, s: &Session) -> AgentConfig {
    // The default policy and the workspace rules follow the settings as they are now.
    let settings = st.workspace().settings();
    s.approval.refresh(
        crate::permissions::effective_default(*lock(&st.init_approval), &settings),
        pi_core::approval::rules_from_settings(&settings.merged),
    );
    let mut cfg = agent_config(
        st,
        s.model.clone(),
        &s.writer,
        &s.id,
        &s.approval,
        &s.extensions,
    );
    cfg.retry.enabled = s.auto_retry;
    if let Some(c) = cfg.compaction.as_mut() {
        c.settings.enabled = s.auto_compaction;
    }
    cfg
}

/// The agent configuration for a run in this workspace: editor-backed tools, the system prompt
/// and settings from the workspace's configuration (see [`crate::runner::agent_config`]),
/// `model`, and compaction into the session's file.
fn agent_config(
    st: &Arc<State>,
    model: Model,
    writer: &Arc<Mutex<SessionWriter>>,
    session_id: &str,
    approval: &Arc<pi_core::approval::Gate>,
    extensions: &Arc<pi_core::extension::Extensions>,
) -> AgentConfig {
    let root = st.root();
    let fs = Arc::new(EditorFs::new(
        root.clone(),
        st.client.clone(),
        st.docs.clone(),
        st.caps(),
    ));
    let before: BeforeBash = {
        let fs = fs.clone();
        let root = root.clone();
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
                    "{} open editor buffer(s) differ from disk: {}",
                    names.len(),
                    names.join(", ")
                ))
            })
        })
    };
    let approver: Arc<dyn pi_core::sandbox::Approver> =
        Arc::new(crate::permissions::LspApprover::new(
            st.client.clone(),
            session_id.to_string(),
            st.caps().request_permission,
        ));
    let ws = st.workspace();
    let diagnostics = |allowed: &[PathBuf]| crate::editor_tools::DiagnosticsContext {
        root: root.clone(),
        allowed_dirs: allowed.to_vec(),
        docs: st.docs.clone(),
        encoding: st.caps().encoding,
    };
    let mut cfg = crate::runner::agent_config_with(
        &ws,
        model,
        fs,
        Some(before),
        &[EDITOR_GUIDELINE.to_string()],
        Some((approver, session_id)),
        crate::runner::RunAdditions {
            approval: Some(approval.clone()),
            extra_tools: extensions.tools(),
            late_tools: Some(Box::new(|taken, allowed| {
                crate::editor_tools::session_tools(
                    &st.editor_tools,
                    &st.client,
                    session_id,
                    taken,
                    diagnostics(allowed),
                )
            })),
        },
    );
    cfg.compaction = Some(crate::runner::compaction_config(&ws, writer));
    if !extensions.is_empty() {
        // Extension handlers run as the loop's hooks (after any hooks of the product's own).
        let ext: Arc<dyn pi_core::agent::AgentHooks> = extensions.clone();
        cfg.hooks = Some(match cfg.hooks.take() {
            Some(own) => Arc::new(pi_core::extension::ChainedHooks(own, ext)),
            None => ext,
        });
    }
    cfg
}

/// The system prompt guideline that tells the model where its edits go.
pub const EDITOR_GUIDELINE: &str = "File edits are applied through the user's editor, where they can be reviewed and undone; read shows unsaved editor changes";

/// A session around `writer` with an agent on `messages` and its event listener; `totals`
/// is the usage already in the file.
fn new_session(
    st: &Arc<State>,
    id: String,
    writer: SessionWriter,
    model: Model,
    messages: Vec<Message>,
    totals: crate::protocol::UsageTotals,
) -> Session {
    let writer = Arc::new(Mutex::new(writer));
    let tracker = Arc::new(Tracker::new(totals));
    let approval = crate::permissions::session_gate(
        &st.workspace(),
        *lock(&st.init_approval),
        Arc::new(
            crate::permissions::LspApprover::new(
                st.client.clone(),
                id.clone(),
                st.caps().request_permission,
            )
            .with_tracker(tracker.clone()),
        ),
    );
    let extensions = crate::extensions::load(st, &id, &writer);
    let cfg = agent_config(st, model.clone(), &writer, &id, &approval, &extensions);
    let auto_retry = cfg.retry.enabled;
    let auto_compaction = cfg.compaction.as_ref().is_some_and(|c| c.settings.enabled);
    let agent = Agent::new(cfg, messages);
    let settings = st.workspace().settings();
    agent.set_queue_modes(settings.steering_mode, settings.follow_up_mode);
    let sink = LspSink {
        st: st.clone(),
        session_id: id.clone(),
        agent: agent.downgrade(),
        recorder: Recorder::new(writer.clone()),
        tracker: tracker.clone(),
        progress: Mutex::new(None),
        last_report: Mutex::new(None),
    };
    let events = agent.subscribe(Arc::new(sink));
    let extension_events = extensions
        .has_event_handlers()
        .then(|| agent.subscribe(extensions.clone()));
    Session {
        id,
        writer,
        agent,
        model,
        tracker,
        auto_retry,
        auto_compaction,
        name: None,
        parent_session: None,
        approval,
        _events: events,
        extensions,
        _extension_events: extension_events,
    }
}

/// Persists, reports progress, and forwards every event as `agent/event`.
struct LspSink {
    st: Arc<State>,
    session_id: String,
    agent: WeakAgent,
    recorder: Recorder,
    tracker: Arc<Tracker>,
    /// The work-done progress token of the active run.
    progress: Mutex<Option<ProgressToken>>,
    last_report: Mutex<Option<Instant>>,
}

/// Minimum interval between `$/progress` reports while text streams.
const REPORT_EVERY: Duration = Duration::from_millis(50);

impl LspSink {
    fn run_id(&self) -> String {
        self.agent
            .upgrade()
            .and_then(|a| a.run_id())
            .unwrap_or_default()
    }

    /// Creates the run's progress token when the client supports work-done progress.
    async fn create_progress(&self) {
        *lock(&self.progress) = None;
        if !self.st.caps().work_done_progress {
            return;
        }
        let t = NumberOrString::String(format!("pi-lsp/{}", self.run_id()));
        match self.st.client.create_work_done_progress(t.clone()).await {
            Ok(()) => *lock(&self.progress) = Some(t),
            Err(e) => tracing::warn!("window/workDoneProgress/create failed: {}", e.message),
        }
    }

    async fn progress(&self, value: WorkDoneProgress) {
        let token = lock(&self.progress).clone();
        if let Some(token) = &token {
            self.st
                .client
                .send_notification::<Progress>(ProgressParams {
                    token: token.clone(),
                    value: ProgressParamsValue::WorkDone(value),
                })
                .await;
        }
    }

    async fn report(&self, message: String, force: bool) {
        {
            let mut last = lock(&self.last_report);
            if !force && last.is_some_and(|t| t.elapsed() < REPORT_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        self.progress(WorkDoneProgress::Report(WorkDoneProgressReport {
            cancellable: Some(false),
            message: Some(message),
            percentage: None,
        }))
        .await;
    }
}

#[async_trait]
impl EventSink for LspSink {
    async fn emit(&self, event: AgentEvent) {
        let notices = self.tracker.on_event(&event);
        let substitute = match &event {
            AgentEvent::MessageEnd {
                message: m @ Message::User(_),
            } => self.tracker.substitute(m),
            _ => None,
        };
        let recorded = match substitute {
            // A delivered custom message or shell output is stored as what it is.
            Some((kind, fields)) => self.recorder.record_entry(&kind, fields),
            None => self.recorder.record(&event),
        };
        if let Err(e) = recorded {
            tracing::error!("session not saved: {e}");
            self.st
                .client
                .show_message(
                    MessageType::ERROR,
                    format!(
                        "pi-lsp: the session is no longer being saved ({e}); the run was stopped."
                    ),
                )
                .await;
            if let Some(a) = self.agent.upgrade() {
                a.abort();
            }
        }
        match &event {
            AgentEvent::AgentStart => {
                self.create_progress().await;
                self.progress(WorkDoneProgress::Begin(WorkDoneProgressBegin {
                    title: "pi agent".into(),
                    cancellable: Some(false),
                    message: Some("thinking…".into()),
                    percentage: None,
                }))
                .await
            }
            AgentEvent::MessageUpdate {
                assistant_message_event: AssistantEvent::TextDelta { delta, .. },
            } => {
                let line = delta
                    .lines()
                    .last()
                    .unwrap_or("")
                    .chars()
                    .take(80)
                    .collect::<String>();
                self.report(
                    if line.trim().is_empty() {
                        "writing…".into()
                    } else {
                        line
                    },
                    false,
                )
                .await
            }
            AgentEvent::ToolExecutionStart { tool_name, .. } => {
                self.report(format!("running {tool_name}"), true).await
            }
            AgentEvent::CompactionStart {
                reason: CompactionReason::Manual,
            } => {
                self.create_progress().await;
                self.progress(WorkDoneProgress::Begin(WorkDoneProgressBegin {
                    title: "pi agent".into(),
                    cancellable: Some(false),
                    message: Some("compacting the conversation…".into()),
                    percentage: None,
                }))
                .await
            }
            AgentEvent::CompactionStart { .. } => {
                self.report("compacting the conversation…".into(), true)
                    .await
            }
            AgentEvent::CompactionEnd {
                reason: CompactionReason::Manual,
                ..
            } => {
                self.progress(WorkDoneProgress::End(WorkDoneProgressEnd {
                    message: Some("compacted".into()),
                }))
                .await
            }
            _ => {}
        }
        if matches!(event, AgentEvent::AgentEnd { .. }) {
            // End the progress first so a client that sees agent_end has seen everything.
            self.progress(WorkDoneProgress::End(WorkDoneProgressEnd {
                message: Some("done".into()),
            }))
            .await;
        }
        let run_id = self.run_id();
        // Queue and usage notices describe this event: they follow it.
        self.st
            .client
            .send_notification::<AgentEventNotification>(
                serde_json::to_value(AgentEventParams {
                    session_id: self.session_id.clone(),
                    run_id: run_id.clone(),
                    event,
                })
                .unwrap_or_default(),
            )
            .await;
        for n in notices {
            match n {
                Notice::Queue { message, state } => {
                    send_queue_update(
                        &self.st.client,
                        &self.session_id,
                        &self.tracker,
                        &message,
                        state,
                    )
                    .await
                }
                Notice::Usage {
                    turn,
                    session,
                    context_tokens,
                } => {
                    self.st
                        .client
                        .send_notification::<UsageNotification>(
                            serde_json::to_value(UsageParams {
                                session_id: self.session_id.clone(),
                                run_id: run_id.clone(),
                                turn,
                                session,
                                context_tokens,
                                context_window: self
                                    .agent
                                    .upgrade()
                                    .map(|a| a.config().model.context_window)
                                    .unwrap_or_default(),
                            })
                            .unwrap_or_default(),
                        )
                        .await
                }
                Notice::Attention { reason, message } => {
                    self.st
                        .client
                        .send_notification::<AttentionNotification>(
                            serde_json::to_value(AttentionParams {
                                session_id: self.session_id.clone(),
                                run_id: Some(run_id.clone()),
                                reason,
                                message,
                            })
                            .unwrap_or_default(),
                        )
                        .await
                }
            }
        }
    }
}

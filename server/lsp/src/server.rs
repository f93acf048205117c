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
    Agent, AgentConfig, AgentEvent, Delivery, EventSink, Subscription, WeakAgent,
};
use pi_core::session::{find_session_file, read_tree, SessionError, SessionWriter};
use pi_core::tools::{default_tools, BeforeBash};
use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::{
    notification::Progress, DidChangeTextDocumentParams, DidCloseTextDocumentParams,
    DidOpenTextDocumentParams, InitializeParams, InitializeResult, InitializedParams, MessageType,
    NumberOrString, ProgressParams, ProgressParamsValue, ProgressToken, ServerCapabilities,
    ServerInfo, TextDocumentSyncCapability, TextDocumentSyncKind, WorkDoneProgress,
    WorkDoneProgressBegin, WorkDoneProgressEnd, WorkDoneProgressReport,
};
use tower_lsp_server::{Client, LanguageServer, LspService};

use crate::documents::{uri_path, Documents};
use crate::editor_fs::{EditorCaps, EditorFs};
use crate::protocol::{
    agent_error, codes, parse_params, AbortParams, AbortResult, AgentEventNotification,
    AgentEventParams, PromptParams, PromptResult, StreamingBehavior,
};
use crate::runner::{choose_model, sessions_dir, Recorder};

/// The state of one session in this server: its file and its [`Agent`] (at most one run).
struct Session {
    id: String,
    writer: Arc<Mutex<SessionWriter>>,
    agent: Agent,
    model: Model,
    /// Keeps the session's event listener registered.
    _events: Subscription,
}

/// Shared server state.
pub struct State {
    client: Client,
    docs: Arc<Documents>,
    caps: Mutex<EditorCaps>,
    root: Mutex<PathBuf>,
    init_model: Mutex<Option<String>>,
    sessions: Mutex<HashMap<String, Arc<Mutex<Session>>>>,
}

/// The language server.
pub struct Backend {
    state: Arc<State>,
}

/// Builds the service with the `agent/*` methods registered.
pub fn service() -> (LspService<Backend>, tower_lsp_server::ClientSocket) {
    LspService::build(|client| Backend {
        state: Arc::new(State {
            client,
            docs: Arc::new(Documents::default()),
            caps: Mutex::new(EditorCaps::default()),
            root: Mutex::new(PathBuf::from(".")),
            init_model: Mutex::new(None),
            sessions: Mutex::new(HashMap::new()),
        }),
    })
    .custom_method("agent/prompt", Backend::agent_prompt)
    .custom_method("agent/abort", Backend::agent_abort)
    .custom_method(crate::transport::PARSE_ERROR_METHOD, Backend::parse_error)
    .finish()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    fn caps(&self) -> EditorCaps {
        *lock(&self.caps)
    }

    fn root(&self) -> PathBuf {
        lock(&self.root).clone()
    }
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        let editor = EditorCaps::from_client(&params.capabilities);
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
        *lock(&self.state.root) = root;
        *lock(&self.state.init_model) = params
            .initialization_options
            .as_ref()
            .and_then(|o| o.get("model"))
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                position_encoding: Some(encoding.kind()),
                text_document_sync: Some(TextDocumentSyncCapability::Kind(
                    TextDocumentSyncKind::INCREMENTAL,
                )),
                experimental: Some(
                    serde_json::json!({"agent": {"version": 1, "methods": ["agent/prompt", "agent/abort"]}}),
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

    async fn initialized(&self, _: InitializedParams) {}

    async fn shutdown(&self) -> Result<()> {
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
}

impl Backend {
    /// `agent/prompt {text, sessionId?, model?, streamingBehavior?}` → `{sessionId, runId, queued}`.
    async fn agent_prompt(&self, params: Value) -> Result<PromptResult> {
        let p: PromptParams = parse_params(params)?;
        let st = &self.state;
        let root = st.root();
        let init_model = lock(&st.init_model).clone();
        let session = match &p.session_id {
            Some(id) => {
                // Bind first: the map's lock must be released before `resume` takes it.
                let known = lock(&st.sessions).get(id).cloned();
                match known {
                    Some(s) => s,
                    None => self.resume(id, &root, &init_model)?,
                }
            }
            None => {
                let (model, notice) =
                    choose_model(&root, p.model.as_deref(), init_model.as_deref())
                        .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?;
                if let Some(n) = notice {
                    let client = st.client.clone();
                    tokio::spawn(async move { client.show_message(MessageType::INFO, n).await });
                }
                let writer = SessionWriter::create(
                    &sessions_dir(&root),
                    &root,
                    &model.provider,
                    &model.id,
                    crate::runner::thinking_level_name(&model),
                )
                .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
                let id = writer.id().to_string();
                let s = Arc::new(Mutex::new(new_session(
                    st,
                    id.clone(),
                    writer,
                    model,
                    Vec::new(),
                )));
                lock(&st.sessions).insert(id, s.clone());
                s
            }
        };
        let message = Message::user_text(p.text);
        let mut s = lock(&session);
        let busy = |s: &Session| {
            agent_error(
                codes::SESSION_BUSY,
                format!("session {} is running {}; send streamingBehavior \"steer\" or \"followUp\" to queue this prompt, or agent/abort first", s.id, s.agent.run_id().unwrap_or_default()),
            )
        };
        let streaming = s.agent.is_streaming();
        if streaming {
            if let Some(b) = p.streaming_behavior {
                let how = match b {
                    StreamingBehavior::Steer => Delivery::Steer,
                    StreamingBehavior::FollowUp => Delivery::FollowUp,
                };
                s.agent.enqueue(message, how);
                return Ok(PromptResult {
                    session_id: s.id.clone(),
                    run_id: s.agent.run_id().unwrap_or_default(),
                    queued: true,
                });
            }
        } else {
            if let Some(m) = &p.model {
                if *m != s.model.full_id() {
                    let (model, _) = choose_model(&root, Some(m), None)
                        .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?;
                    lock(&s.writer)
                        .append_entry(
                            "model_change",
                            serde_json::json!({"provider": model.provider, "modelId": model.id}),
                        )
                        .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
                    s.model = model;
                }
            }
            // Tools, caps and project instructions are read afresh for every prompt.
            s.agent.set_config(agent_config(st, s.model.clone()));
        }
        // While a run is finishing (its agent_end already sent), the prompt starts the next run.
        let (run_id, _) = s.agent.prompt(vec![message]).map_err(|_| busy(&s))?;
        Ok(PromptResult {
            session_id: s.id.clone(),
            run_id,
            queued: false,
        })
    }

    fn resume(
        &self,
        id: &str,
        root: &Path,
        init_model: &Option<String>,
    ) -> Result<Arc<Mutex<Session>>> {
        let path = find_session_file(&sessions_dir(root), id).ok_or_else(|| {
            agent_error(
                codes::UNKNOWN_SESSION,
                format!("no session {id} in {}", sessions_dir(root).display()),
            )
        })?;
        let (writer, loaded) = match SessionWriter::open(&path) {
            Ok(w) => w,
            // Another process appends to it: continue in a fork and say so (SESS-04).
            Err(SessionError::Locked { pid, .. }) => {
                let (tree, _) = read_tree(&path, false)
                    .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
                let fork = SessionWriter::fork_from(&path, &tree, &sessions_dir(root), None)
                    .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
                let msg = format!("pi-lsp: session {id} is open in another process ({pid}); continuing in a fork, session {}", fork.1.id);
                tracing::warn!("{msg}");
                let client = self.state.client.clone();
                tokio::spawn(async move { client.show_message(MessageType::WARNING, msg).await });
                fork
            }
            Err(e) => return Err(agent_error(codes::SESSION_IO, e.to_string())),
        };
        let id = loaded.id.clone();
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        let wanted = loaded.model.as_ref().map(|(p, m)| format!("{p}/{m}"));
        let mut model = choose_model(root, wanted.as_deref(), None)
            .or_else(|_| choose_model(root, None, init_model.as_deref()))
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
        let s = Arc::new(Mutex::new(new_session(
            &self.state,
            id.to_string(),
            writer,
            model,
            loaded.messages,
        )));
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

    /// `agent/abort {sessionId}` → `{aborted}`; idempotent.
    async fn agent_abort(&self, params: Value) -> Result<AbortResult> {
        let p: AbortParams = parse_params(params)?;
        let session = lock(&self.state.sessions).get(&p.session_id).cloned();
        let Some(session) = session else {
            return Err(agent_error(
                codes::UNKNOWN_SESSION,
                format!("no session {}", p.session_id),
            ));
        };
        let aborted = lock(&session).agent.abort();
        Ok(AbortResult { aborted })
    }
}

/// The agent configuration for a run in this workspace: editor-backed tools, the system prompt
/// (re-reading AGENTS.md), `model`.
fn agent_config(st: &Arc<State>, model: Model) -> AgentConfig {
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
    let tools = default_tools(fs, Some(before));
    let specs: Vec<_> = tools.iter().map(|t| t.spec()).collect();
    let mut cfg = AgentConfig::new(model, pi_core::prompt::system_prompt(&root, &specs), tools);
    cfg.retry = crate::runner::retry_settings(&root);
    cfg
}

/// A session around `writer` with an agent on `messages` and its event listener.
fn new_session(
    st: &Arc<State>,
    id: String,
    writer: SessionWriter,
    model: Model,
    messages: Vec<Message>,
) -> Session {
    let agent = Agent::new(agent_config(st, model.clone()), messages);
    let writer = Arc::new(Mutex::new(writer));
    let sink = LspSink {
        st: st.clone(),
        session_id: id.clone(),
        agent: agent.downgrade(),
        recorder: Recorder::new(writer.clone()),
        progress: Mutex::new(None),
        last_report: Mutex::new(None),
    };
    let events = agent.subscribe(Arc::new(sink));
    Session {
        id,
        writer,
        agent,
        model,
        _events: events,
    }
}

/// Persists, reports progress, and forwards every event as `agent/event`.
struct LspSink {
    st: Arc<State>,
    session_id: String,
    agent: WeakAgent,
    recorder: Recorder,
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
        if let Err(e) = self.recorder.record(&event) {
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
            _ => {}
        }
        if matches!(event, AgentEvent::AgentEnd { .. }) {
            // End the progress first so a client that sees agent_end has seen everything.
            self.progress(WorkDoneProgress::End(WorkDoneProgressEnd {
                message: Some("done".into()),
            }))
            .await;
        }
        self.st
            .client
            .send_notification::<AgentEventNotification>(
                serde_json::to_value(AgentEventParams {
                    session_id: self.session_id.clone(),
                    run_id: self.run_id(),
                    event,
                })
                .unwrap_or_default(),
            )
            .await;
    }
}

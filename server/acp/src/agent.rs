//! The ACP agent: the requests of one connection mapped to [`AgentSession`] calls.
//!
//! | method | what |
//! |---|---|
//! | `initialize` | protocol version (1), capabilities, `agentInfo`, auth methods, `_meta.steering` |
//! | `authenticate` | nothing to do (keys come from the environment / models.json) |
//! | `session/new` | a Pi session file in the cwd's sessions folder |
//! | `session/load` | the session opened, its active branch replayed as updates, then it continues |
//! | `session/resume` | the session opened without a replay |
//! | `session/list` | the cwd's sessions (or those of the cwds this connection opened), paged |
//! | `session/close` / `session/delete` | run aborted and file released / file removed |
//! | `session/prompt` | one turn; a prompt sent while one runs waits for it (follow-up) |
//! | `session/cancel` | the run aborted (the prompt answers `cancelled`, so do prompts waiting) |
//! | `session/set_config_option` | `model`, `thought_level` |
//! | `_session/steering` | steering into the running turn |

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    CancelNotification, CloseSessionRequest, ContentBlock, DeleteSessionRequest,
    EmbeddedResourceResource, InitializeRequest, ListSessionsRequest, LoadSessionRequest,
    McpServer, NewSessionRequest, PromptRequest, ResumeSessionRequest, SessionConfigOptionValue,
    SessionUpdate, SetSessionConfigOptionRequest, ToolCallUpdate,
};
use parking_lot::Mutex;
use pi_ai::models::ThinkingLevel;
use pi_ai::types::ImageContent;
use pi_ai::{Message, Model, Registry, StopReason};
use pi_core::harness::{choose_model, AgentSession, Opening, PromptOutcome};
use pi_core::resources::WorkspaceConfig;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::rpc::{codes, parse_params, Conn, RpcError};
use crate::setup::{AcpSetup, ClientFsCaps};
use crate::updates::{chunk, send_update};
use crate::{sessions, tools};

/// Sessions per `session/list` page.
pub const LIST_PAGE: usize = 50;

/// Options of `pi-lsp acp`.
#[derive(Debug, Clone, Default)]
pub struct AcpOptions {
    /// Load the project's own configuration (`--trust`): `.pi/settings.json`, models.json,
    /// prompt templates, skills, SYSTEM.md of the session's cwd.
    pub trust: bool,
    /// The model (`provider/id`) new sessions start with (`--model`).
    pub model: Option<String>,
}

/// One session open on this connection.
pub struct Live {
    /// The harness session.
    pub session: Arc<AgentSession>,
    cwd: PathBuf,
    setup: Arc<AcpSetup>,
    next_ticket: AtomicU64,
    serving: watch::Sender<u64>,
    cancel_epoch: AtomicU64,
}

/// A prompt's place in its session's line, taken in arrival order.
pub struct Ticket {
    live: Arc<Live>,
    n: u64,
    epoch: u64,
}

/// The agent of one connection.
pub struct AcpAgent {
    conn: Arc<Conn>,
    opts: AcpOptions,
    fs_caps: Mutex<ClientFsCaps>,
    sessions: Mutex<HashMap<String, Arc<Live>>>,
    /// The cwds sessions were created or opened in over this connection.
    cwds: Mutex<Vec<PathBuf>>,
}

fn unknown_session(id: &str) -> RpcError {
    RpcError::new(codes::RESOURCE_NOT_FOUND, format!("unknown session: {id}"))
        .with_data(json!({"sessionId": id}))
}

/// `steering` reply outcomes (claude-agent-acp's vocabulary).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SteeringParams {
    session_id: String,
    prompt: Vec<ContentBlock>,
    #[serde(default, rename = "_meta")]
    _meta: Option<Value>,
}

impl AcpAgent {
    /// An agent answering over `conn`.
    pub fn new(conn: Arc<Conn>, opts: AcpOptions) -> AcpAgent {
        AcpAgent {
            conn,
            opts,
            fs_caps: Mutex::default(),
            sessions: Mutex::default(),
            cwds: Mutex::default(),
        }
    }

    /// The sessions open here.
    pub fn live_sessions(&self) -> Vec<Arc<Live>> {
        self.sessions.lock().values().cloned().collect()
    }

    /// Takes the next place in line of `params.sessionId`'s prompts (in the read loop, so
    /// prompts queue in arrival order); `None` when that session is not open here.
    pub fn ticket(&self, params: &Value) -> Option<Ticket> {
        let id = params.get("sessionId")?.as_str()?;
        let live = self.sessions.lock().get(id).cloned()?;
        let n = live.next_ticket.fetch_add(1, Ordering::SeqCst);
        let epoch = live.cancel_epoch.load(Ordering::SeqCst);
        Some(Ticket { live, n, epoch })
    }

    /// After `session/new`, `load` or `resume` answered: tells the client the session's
    /// commands (`available_commands_update`: prompt templates, skills as `skill:<name>`,
    /// extension commands).
    pub fn announce(&self, session_id: &str) {
        let Some(live) = self.sessions.lock().get(session_id).cloned() else {
            return;
        };
        let s = &live.session;
        let ws = s.workspace();
        let r = ws.resources();
        let cmd = |name: &str, description: &str, hint: Option<&String>| {
            let mut c = json!({"name": name, "description": description});
            if let Some(h) = hint {
                c["input"] = json!({"hint": h});
            }
            c
        };
        let mut cmds: Vec<Value> = r
            .prompt_templates
            .iter()
            .map(|t| cmd(&t.name, &t.description, t.argument_hint.as_ref()))
            .collect();
        if ws.settings().enable_skill_commands {
            cmds.extend(
                r.skills
                    .iter()
                    .map(|k| cmd(&format!("skill:{}", k.name), &k.description, None)),
            );
        }
        for c in s.extension_commands() {
            cmds.push(cmd(
                &c.name,
                c.description.as_deref().unwrap_or("extension command"),
                None,
            ));
        }
        self.conn.notify(
            "session/update",
            json!({"sessionId": session_id, "update": {"sessionUpdate": "available_commands_update", "availableCommands": cmds}}),
        );
    }

    /// Handles the notification `method`.
    pub fn notification(self: &Arc<Self>, method: &str, params: Value) {
        match method {
            "session/cancel" => match parse_params::<CancelNotification>(params) {
                Ok(p) => {
                    let live = self.sessions.lock().get(&*p.session_id.0).cloned();
                    match live {
                        Some(live) => {
                            live.cancel_epoch.fetch_add(1, Ordering::SeqCst);
                            tokio::spawn(async move {
                                live.session.abort().await;
                            });
                        }
                        None => {
                            tracing::warn!("session/cancel: unknown session {}", p.session_id.0)
                        }
                    }
                }
                Err(e) => tracing::warn!("session/cancel: {e}"),
            },
            other => tracing::debug!("notification {other} ignored"),
        }
    }

    /// Answers the request `method` (`session/prompt` answers through [`AcpAgent::prompt`]).
    pub async fn request(self: &Arc<Self>, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => self.initialize(parse_params(lenient_version(params))?),
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(parse_params(params)?).await,
            "session/load" => self.load(parse_params(params)?).await,
            "session/resume" => self.resume(parse_params(params)?).await,
            "session/list" => self.list(parse_params(params)?),
            "session/close" => self.close(parse_params(params)?).await,
            "session/delete" => self.delete(parse_params(params)?).await,
            "session/set_config_option" => self.set_config_option(parse_params(params)?),
            "_session/steering" => self.steering(parse_params(params)?).await,
            other => Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("method not found: {other}"),
            )),
        }
    }

    fn initialize(&self, p: InitializeRequest) -> Result<Value, RpcError> {
        let fs = &p.client_capabilities.fs;
        *self.fs_caps.lock() = ClientFsCaps {
            read: fs.read_text_file,
            write: fs.write_text_file,
        };
        // Version 1 is the one this agent speaks; a client asking for a later one gets 1.
        let version = p.protocol_version.as_u16().min(1);
        let ws = WorkspaceConfig::with_default_agent_dir(
            std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            self.opts.trust,
        );
        let configured = matches!(
            choose_model(&ws, self.opts.model.as_deref(), None),
            Ok((_, None))
        );
        // No key or models.json: the sessions run Pi's offline scripted demo until one is
        // configured; the method says how (ACP's "agent" auth: the agent handles it).
        let auth = if configured {
            json!([])
        } else {
            json!([{
                "id": "pi-provider-key",
                "name": "Configure a model provider",
                "description": "Set a provider key in the environment (e.g. ANTHROPIC_API_KEY, OPENAI_API_KEY) or add ~/.pi/agent/models.json, then restart the agent. Until then sessions use Pi's offline scripted demo model."
            }])
        };
        Ok(json!({
            "protocolVersion": version,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": true, "sse": false},
                "sessionCapabilities": {
                    "list": {}, "resume": {}, "close": {}, "delete": {},
                    "additionalDirectories": {}
                }
            },
            "authMethods": auth,
            "agentInfo": {"name": "pi-lsp", "title": "Pi (pi-lsp)", "version": env!("CARGO_PKG_VERSION")},
            "_meta": {"steering": {"supported": true}}
        }))
    }

    fn workspace(
        &self,
        cwd: &Path,
        field: &str,
        extra: &[PathBuf],
    ) -> Result<Arc<WorkspaceConfig>, RpcError> {
        if !cwd.is_absolute() {
            return Err(RpcError::invalid_params(format!(
                "{field}: must be an absolute path, got {}",
                cwd.display()
            )));
        }
        let root = cwd
            .canonicalize()
            .ok()
            .filter(|p| p.is_dir())
            .ok_or_else(|| {
                RpcError::invalid_params(format!("{field}: {} is not a folder", cwd.display()))
            })?;
        let ws = WorkspaceConfig::with_default_agent_dir(root.clone(), self.opts.trust);
        let mut folders = vec![root.clone()];
        for (i, d) in extra.iter().enumerate() {
            let d = d
                .canonicalize()
                .ok()
                .filter(|p| p.is_dir())
                .ok_or_else(|| {
                    RpcError::invalid_params(format!(
                        "additionalDirectories[{i}]: {} is not a folder",
                        d.display()
                    ))
                })?;
            folders.push(d);
        }
        if folders.len() > 1 {
            ws.set_folders(folders);
        }
        let mut cwds = self.cwds.lock();
        if !cwds.contains(&root) {
            cwds.push(root);
        }
        Ok(ws)
    }

    fn setup(&self, ws: &WorkspaceConfig) -> Arc<AcpSetup> {
        Arc::new(AcpSetup::new(
            self.conn.clone(),
            ws.root().to_path_buf(),
            *self.fs_caps.lock(),
        ))
    }

    fn register(&self, session: Arc<AgentSession>, setup: Arc<AcpSetup>) -> Arc<Live> {
        *setup.context_window.lock() = session.model().context_window;
        let live = Arc::new(Live {
            cwd: session.workspace().root().to_path_buf(),
            session,
            setup,
            next_ticket: AtomicU64::new(0),
            serving: watch::Sender::new(0),
            cancel_epoch: AtomicU64::new(0),
        });
        self.sessions
            .lock()
            .insert(live.session.id().to_string(), live.clone());
        live
    }

    /// MCP servers handed over by the client (`session/new` / `session/load` / `session/resume`
    /// `mcpServers`): each is converted with [`pi_core::mcp::acp_server`] and the valid ones
    /// start for this session (exposure `direct`; their tools join its runs). Invalid entries
    /// (e.g. `sse`) are reported to the user as an `agent_message_chunk` with Pi's validation
    /// message, and in `_meta.pi.mcpServersRejected` (`[{name, error}]`); the names started are
    /// in `_meta.pi.mcpServersStarted`. With MCP off (`mcp_off`: `--no-mcp` / `-builtin:mcp`)
    /// none start and the user is told (`_meta.pi.mcpOff`). `None` when the client handed none.
    fn start_mcp(
        &self,
        session_id: &str,
        cwd: &Path,
        mcp_off: bool,
        servers: &[McpServer],
    ) -> Option<Value> {
        if servers.is_empty() {
            return None;
        }
        if mcp_off {
            // `--no-mcp` or `-builtin:mcp`: none start, and the user is told.
            let names: Vec<String> = servers
                .iter()
                .map(|s| {
                    let v = serde_json::to_value(s).unwrap_or(Value::Null);
                    v["name"].as_str().unwrap_or("?").to_string()
                })
                .collect();
            let text = format!(
                "[pi-lsp: MCP is off (--no-mcp or \"-builtin:mcp\"); the editor's MCP servers were not started: {}]\n",
                names.join(", ")
            );
            send_update(&self.conn, session_id, chunk(text, false));
            return Some(json!({"pi": {"mcpServersStarted": [], "mcpOff": true}}));
        }
        let mut configs = Vec::new();
        let mut started = Vec::new();
        let mut rejected = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            let v = serde_json::to_value(s).unwrap_or(Value::Null);
            let name = v["name"].as_str().unwrap_or("?").to_string();
            match pi_core::mcp::acp_server(&v) {
                Ok(c) => {
                    started.push(name);
                    configs.push(c);
                }
                Err(e) => rejected.push(json!({"name": name, "index": i, "error": e})),
            }
        }
        if !rejected.is_empty() {
            let lines: Vec<String> = rejected
                .iter()
                .map(|r| {
                    format!(
                        "{}: {}",
                        r["name"].as_str().unwrap_or("?"),
                        r["error"].as_str().unwrap_or("")
                    )
                })
                .collect();
            let text = format!(
                "[pi-lsp: MCP servers from the editor not started: {}]\n",
                lines.join("; ")
            );
            tracing::warn!("{}", text.trim_end());
            send_update(&self.conn, session_id, chunk(text, false));
        }
        if !configs.is_empty() {
            let manager = pi_core::mcp::McpManager::for_session(cwd, configs);
            pi_core::mcp::set_session_servers(session_id, manager);
        }
        Some(json!({"pi": {"mcpServersStarted": started, "mcpServersRejected": rejected}}))
    }

    async fn new_session(self: &Arc<Self>, p: NewSessionRequest) -> Result<Value, RpcError> {
        let ws = self.workspace(&p.cwd, "cwd", &p.additional_directories)?;
        let (model, notice) = choose_model(&ws, self.opts.model.as_deref(), None)
            .map_err(|e| RpcError::new(codes::AUTH_REQUIRED, e.to_string()))?;
        if let Some(n) = notice {
            tracing::warn!("{n}");
        }
        let setup = self.setup(&ws);
        let session = AgentSession::create(ws, setup.clone(), model, None)
            .map_err(|e| RpcError::internal(e.to_string()))?;
        let live = self.register(session, setup);
        let id = live.session.id().to_string();
        let meta = self.start_mcp(
            &id,
            &live.cwd,
            pi_core::mcp::disabled(live.session.workspace()),
            &p.mcp_servers,
        );
        let mut out = json!({"sessionId": id, "configOptions": config_options(&live.session)});
        if let Some(m) = meta {
            out["_meta"] = m;
        }
        Ok(out)
    }

    /// Opens session `id` of `cwd` (already open here: that one).
    async fn open(
        &self,
        id: &str,
        cwd: &Path,
        extra: &[PathBuf],
    ) -> Result<(Arc<Live>, bool), RpcError> {
        if let Some(l) = self.sessions.lock().get(id).cloned() {
            return Ok((l, false));
        }
        let ws = self.workspace(cwd, "cwd", extra)?;
        let path = sessions::find(&ws, id).ok_or_else(|| unknown_session(id))?;
        pi_core::harness::sessions::wait_for_release(&path).await;
        let opening = pi_core::harness::open_file(&ws, &path, |id| {
            self.sessions.lock().get(id).map(|l| l.session.file())
        })
        .map_err(|e| RpcError::internal(e.to_string()))?;
        let (writer, loaded, notices) = match opening {
            Opening::Opened {
                writer,
                loaded,
                notices,
            } => (writer, loaded, notices),
            Opening::AlreadyOpen(id) => {
                return self
                    .sessions
                    .lock()
                    .get(&id)
                    .cloned()
                    .map(|l| (l, false))
                    .ok_or_else(|| unknown_session(&id))
            }
        };
        let setup = self.setup(&ws);
        let session = AgentSession::resume(
            ws,
            setup.clone(),
            writer,
            loaded,
            self.opts.model.as_deref(),
        )
        .map_err(|e| RpcError::new(codes::AUTH_REQUIRED, e.to_string()))?;
        let live = self.register(session, setup);
        for n in notices {
            send_update(
                &self.conn,
                live.session.id(),
                chunk(format!("[{n}]\n"), false),
            );
        }
        Ok((live, true))
    }

    async fn load(self: &Arc<Self>, p: LoadSessionRequest) -> Result<Value, RpcError> {
        let (live, _) = self
            .open(&p.session_id.0, &p.cwd, &p.additional_directories)
            .await?;
        replay(&self.conn, &live)?;
        // The session's plan/todo list as it stands, after the history.
        if let Some(board) = live.session.plan() {
            let state = board.state();
            if !state.todos.is_empty() {
                send_update(
                    &self.conn,
                    live.session.id(),
                    crate::updates::plan_update(&state),
                );
            }
        }
        let mut out = json!({"configOptions": config_options(&live.session)});
        if let Some(m) = self.start_mcp(
            live.session.id(),
            &live.cwd,
            pi_core::mcp::disabled(live.session.workspace()),
            &p.mcp_servers,
        ) {
            out["_meta"] = m;
        }
        Ok(out)
    }

    async fn resume(self: &Arc<Self>, p: ResumeSessionRequest) -> Result<Value, RpcError> {
        let (live, _) = self
            .open(&p.session_id.0, &p.cwd, &p.additional_directories)
            .await?;
        let mut out = json!({"configOptions": config_options(&live.session)});
        if let Some(m) = self.start_mcp(
            live.session.id(),
            &live.cwd,
            pi_core::mcp::disabled(live.session.workspace()),
            &p.mcp_servers,
        ) {
            out["_meta"] = m;
        }
        Ok(out)
    }

    fn list(&self, p: ListSessionsRequest) -> Result<Value, RpcError> {
        let cwds: Vec<PathBuf> = match &p.cwd {
            Some(c) => {
                let root = c
                    .canonicalize()
                    .ok()
                    .filter(|p| p.is_dir())
                    .ok_or_else(|| {
                        RpcError::invalid_params(format!("cwd: {} is not a folder", c.display()))
                    })?;
                vec![root]
            }
            // Without a cwd: only the projects this connection opened, never others'.
            None => self.cwds.lock().clone(),
        };
        let mut all: Vec<(PathBuf, pi_core::session::SessionSummary)> = cwds
            .iter()
            .flat_map(|c| {
                let ws = WorkspaceConfig::with_default_agent_dir(c.clone(), self.opts.trust);
                sessions::list(&ws)
                    .into_iter()
                    .map(|s| (c.clone(), s))
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by_key(|s| std::cmp::Reverse(s.1.last_activity_ms));
        let start = match &p.cursor {
            None => 0,
            Some(c) => c
                .strip_prefix("offset:")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n <= all.len())
                .ok_or_else(|| {
                    RpcError::invalid_params(format!(
                        "cursor: {c:?} is not a cursor this agent gave"
                    ))
                })?,
        };
        let page: Vec<Value> = all
            .iter()
            .skip(start)
            .take(LIST_PAGE)
            .map(|(cwd, s)| {
                let title = s.name.clone().or_else(|| s.first_prompt.clone());
                let updated =
                    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(s.last_activity_ms)
                        .map(|t| t.to_rfc3339());
                let mut v = json!({"sessionId": s.id, "cwd": cwd});
                if let Some(t) = title {
                    v["title"] = json!(t);
                }
                if let Some(u) = updated {
                    v["updatedAt"] = json!(u);
                }
                v["_meta"] = json!({"pi": {"path": s.path, "entryCount": s.entry_count}});
                v
            })
            .collect();
        let mut out = json!({"sessions": page});
        if start + LIST_PAGE < all.len() {
            out["nextCursor"] = json!(format!("offset:{}", start + LIST_PAGE));
        }
        Ok(out)
    }

    async fn close(&self, p: CloseSessionRequest) -> Result<Value, RpcError> {
        let live = self.sessions.lock().remove(&*p.session_id.0);
        let Some(live) = live else {
            return Err(unknown_session(&p.session_id.0));
        };
        live.cancel_epoch.fetch_add(1, Ordering::SeqCst);
        close_session(&live.session).await;
        Ok(json!({}))
    }

    async fn delete(&self, p: DeleteSessionRequest) -> Result<Value, RpcError> {
        let id = &*p.session_id.0;
        let live = self.sessions.lock().remove(id);
        let path = match &live {
            Some(l) => {
                l.cancel_epoch.fetch_add(1, Ordering::SeqCst);
                let path = l.session.file();
                close_session(&l.session).await;
                Some(path)
            }
            None => {
                let cwds = self.cwds.lock().clone();
                cwds.iter().find_map(|c| {
                    let ws = WorkspaceConfig::with_default_agent_dir(c.clone(), self.opts.trust);
                    sessions::find(&ws, id)
                })
            }
        };
        let path = path.ok_or_else(|| unknown_session(id))?;
        if pi_core::session::lock_held(&path) {
            return Err(RpcError::internal(format!(
                "session {id} is open in another process; not deleted"
            )));
        }
        std::fs::remove_file(&path)
            .map_err(|e| RpcError::internal(format!("{}: {e}", path.display())))?;
        Ok(json!({}))
    }

    fn set_config_option(&self, p: SetSessionConfigOptionRequest) -> Result<Value, RpcError> {
        let live = self
            .sessions
            .lock()
            .get(&*p.session_id.0)
            .cloned()
            .ok_or_else(|| unknown_session(&p.session_id.0))?;
        let value = match &p.value {
            SessionConfigOptionValue::ValueId { value } => value.0.to_string(),
            _ => {
                return Err(RpcError::invalid_params(
                    "value: expected a value id (a string)",
                ))
            }
        };
        let s = &live.session;
        match &*p.config_id.0 {
            "model" => {
                s.set_model_by_id(&value)
                    .map_err(|e| RpcError::invalid_params(format!("value: {e}")))?;
                *live.setup.context_window.lock() = s.model().context_window;
            }
            "thought_level" => {
                let level = ThinkingLevel::parse(&value).ok_or_else(|| {
                    RpcError::invalid_params(format!("value: unknown thinking level {value:?}"))
                })?;
                s.set_thinking_level(level)
                    .map_err(|e| RpcError::internal(e.to_string()))?;
            }
            other => {
                return Err(RpcError::invalid_params(format!(
                    "configId: unknown config option {other:?} (model, thought_level)"
                )))
            }
        }
        Ok(json!({"configOptions": config_options(s)}))
    }

    async fn steering(&self, p: SteeringParams) -> Result<Value, RpcError> {
        let live = self
            .sessions
            .lock()
            .get(&p.session_id)
            .cloned()
            .ok_or_else(|| unknown_session(&p.session_id))?;
        let (text, images) = prompt_input(&p.prompt, "prompt")?;
        if !live.session.is_streaming() {
            return Ok(json!({"outcome": "promptRequired"}));
        }
        live.session
            .queue_text(&text, images, pi_core::harness::queue::DeliverAs::Steer)
            .await
            .map_err(|e| RpcError::invalid_params(e.to_string()))?;
        Ok(json!({"outcome": "injected"}))
    }

    /// `session/prompt`: answers `id` itself, when its turn ends and before the next prompt
    /// of the session starts (so a follow-up's updates come after the earlier answer).
    pub async fn prompt(self: Arc<Self>, id: Value, params: Value, ticket: Option<Ticket>) {
        let p: PromptRequest = match parse_params(lenient_prompt(params)) {
            Ok(p) => p,
            Err(e) => {
                // Its place in line is given up.
                if let Some(t) = ticket {
                    release(&t);
                }
                return self.conn.respond(id, Err(e));
            }
        };
        let Some(t) = ticket else {
            return self.conn.respond(id, Err(unknown_session(&p.session_id.0)));
        };
        let result = self.run_turn(&p, &t).await;
        self.conn.respond(id, result);
        release(&t);
    }

    async fn run_turn(&self, p: &PromptRequest, t: &Ticket) -> Result<Value, RpcError> {
        let (text, images) = prompt_input(&p.prompt, "prompt")?;
        let live = &t.live;
        let mut rx = live.serving.subscribe();
        while *rx.borrow_and_update() < t.n {
            if rx.changed().await.is_err() {
                break;
            }
        }
        let cancelled = json!({"stopReason": "cancelled"});
        if live.cancel_epoch.load(Ordering::SeqCst) != t.epoch {
            return Ok(cancelled);
        }
        let s = &live.session;
        // A turn started by steering while idle, or a compaction, ends first.
        s.wait_for_idle().await;
        match s.prompt(&text, images, None, None).await {
            Ok(PromptOutcome::Command(_)) => return Ok(json!({"stopReason": "end_turn"})),
            Ok(_) => {}
            Err(e) => return Err(RpcError::internal(e.to_string())),
        }
        s.wait_for_idle().await;
        if live.cancel_epoch.load(Ordering::SeqCst) != t.epoch {
            return Ok(cancelled);
        }
        let outcome = s.last_outcome();
        let (reason, error) = outcome
            .map(|o| (o.stop_reason, o.error_message))
            .unwrap_or((StopReason::Stop, None));
        Ok(json!({"stopReason": match reason {
            StopReason::Stop | StopReason::ToolUse => "end_turn",
            StopReason::Length => "max_tokens",
            StopReason::Aborted => "cancelled",
            StopReason::Error => {
                return Err(RpcError::internal(error.unwrap_or_else(|| "the model request failed".into()))
                    .with_data(json!({"stopReason": "error"})));
            }
        }}))
    }

    /// Aborts every run, waits for them to settle and releases every session file (the
    /// client has gone, or the process is told to stop).
    pub async fn stop_all(&self) {
        let all: Vec<Arc<AgentSession>> = self
            .sessions
            .lock()
            .drain()
            .map(|(_, l)| l.session.clone())
            .collect();
        // The harness's own stop, as the LSP edge's: runs aborted and settled (bounded),
        // process groups killed, files synced and released.
        pi_core::harness::sessions::stop(&all).await;
    }
}

/// `protocolVersion` sent as a string of digits (`"1"`, as clients predating the integer
/// form do) is read as that number; the answer is always the integer.
fn lenient_version(mut params: Value) -> Value {
    if let Some(v) = params.get_mut("protocolVersion") {
        if let Some(n) = v.as_str().and_then(|s| s.trim().parse::<u16>().ok()) {
            *v = json!(n);
        }
    }
    params
}

/// A `session/prompt` carrying its blocks as `content` (the field's name in drafts before
/// ACP v1, still sent by some clients and by acplint 0.1.0) with no `prompt` is read as if
/// they were `prompt`.
fn lenient_prompt(mut params: Value) -> Value {
    if let Some(o) = params.as_object_mut() {
        if !o.contains_key("prompt") {
            if let Some(c) = o.remove("content") {
                o.insert("prompt".into(), c);
            }
        }
    }
    params
}

/// Gives the next prompt of the session its turn.
fn release(t: &Ticket) {
    t.live.serving.send_modify(|v| *v = (*v).max(t.n + 1));
}

/// Aborts `s`'s run, waits for it, and syncs and releases its file.
async fn close_session(s: &AgentSession) {
    // `close` syncs and releases the file before it returns.
    s.close().await;
    // The MCP servers the client handed to this session close with it.
    pi_core::mcp::forget_session(s.id());
}

/// The prompt's text and images as Pi takes them: text as is; a resource link as an `@path`
/// mention (the model reads it with its tools); an embedded text resource inline in a
/// `<file>` block; images as attachments. Audio is refused (not advertised).
pub fn prompt_input(
    blocks: &[ContentBlock],
    field: &str,
) -> Result<(String, Vec<ImageContent>), RpcError> {
    let mut text = String::new();
    let mut images = Vec::new();
    let mut push = |t: &str| {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(t);
    };
    for (i, b) in blocks.iter().enumerate() {
        match b {
            ContentBlock::Text(t) => push(&t.text),
            ContentBlock::Image(img) => {
                pi_core::harness::check_image(&img.mime_type, &img.data, &format!("{field}[{i}]"))
                    .map_err(|e| RpcError::invalid_params(e.to_string()))?;
                images.push(ImageContent {
                    data: img.data.clone(),
                    mime_type: img.mime_type.clone(),
                });
            }
            ContentBlock::ResourceLink(l) => {
                let path = l.uri.strip_prefix("file://").unwrap_or(&l.uri);
                push(&format!("@{path}"));
            }
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(t) => {
                    let path = t.uri.strip_prefix("file://").unwrap_or(&t.uri);
                    push(&format!("<file path=\"{path}\">\n{}\n</file>", t.text));
                }
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "{field}[{i}].resource: only text resources can be embedded"
                    )))
                }
            },
            ContentBlock::Audio(_) => {
                return Err(RpcError::invalid_params(format!(
                "{field}[{i}]: audio prompts are not supported (promptCapabilities.audio is false)"
            )))
            }
            _ => {
                return Err(RpcError::invalid_params(format!(
                    "{field}[{i}]: unsupported content block"
                )))
            }
        }
    }
    Ok((text, images))
}

/// The session's config options: `model` (the usable models) and `thought_level` (the model's
/// levels; absent for a model without reasoning).
pub fn config_options(s: &AgentSession) -> Value {
    let current = s.model();
    let mut models: Vec<Model> = Registry::load_files(&s.workspace().models_files())
        .usable_models()
        .collect();
    models.push(pi_core::harness::scripted_model());
    if !models.iter().any(|m| m.full_id() == current.full_id()) {
        models.insert(0, current.clone());
    }
    let mut out = vec![json!({
        "id": "model",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": current.full_id(),
        "options": models.iter().map(|m| json!({"value": m.full_id(), "name": m.name})).collect::<Vec<_>>()
    })];
    let levels = current.supported_thinking_levels();
    if current.reasoning && !levels.is_empty() {
        let now = current.thinking_level.unwrap_or(ThinkingLevel::Off);
        out.push(json!({
            "id": "thought_level",
            "name": "Thinking",
            "category": "thought_level",
            "type": "select",
            "currentValue": now.as_str(),
            "options": levels.iter().map(|l| json!({"value": l.as_str(), "name": l.as_str()})).collect::<Vec<_>>()
        }));
    }
    Value::Array(out)
}

/// Sends the session's active branch as updates: user text and images, the answer and its
/// thinking, each tool call with its final status and content. The branch is the session's
/// model context (built from the file on every core; after a compaction its summary comes
/// first, as the model sees it).
pub fn replay(conn: &Conn, live: &Live) -> Result<(), RpcError> {
    let s = &live.session;
    let id = s.id();
    let mut calls: HashMap<String, Value> = HashMap::new();
    for m in s.messages() {
        match m {
            Message::User(u) => {
                let blocks = match u.content {
                    pi_ai::UserContent::Text(t) => vec![pi_ai::ContentBlock::text(t)],
                    pi_ai::UserContent::Blocks(b) => b,
                };
                for b in blocks {
                    let c = match b {
                        pi_ai::ContentBlock::Text(t) => ContentBlock::from(t.text),
                        pi_ai::ContentBlock::Image(i) => ContentBlock::Image(
                            agent_client_protocol_schema::v1::ImageContent::new(
                                i.data,
                                i.mime_type,
                            ),
                        ),
                        _ => continue,
                    };
                    send_update(
                        conn,
                        id,
                        SessionUpdate::UserMessageChunk(
                            agent_client_protocol_schema::v1::ContentChunk::new(c),
                        ),
                    );
                }
            }
            Message::Assistant(a) => {
                for b in &a.content {
                    match b {
                        pi_ai::ContentBlock::Thinking(t) if !t.thinking.is_empty() => {
                            send_update(conn, id, chunk(t.thinking.clone(), true))
                        }
                        pi_ai::ContentBlock::Text(t) if !t.text.is_empty() => {
                            send_update(conn, id, chunk(t.text.clone(), false))
                        }
                        pi_ai::ContentBlock::ToolCall(c) => {
                            calls.insert(c.id.clone(), c.arguments.clone());
                            send_update(
                                conn,
                                id,
                                SessionUpdate::ToolCall(tools::announce(
                                    &live.cwd,
                                    &c.id,
                                    &c.name,
                                    &c.arguments,
                                )),
                            );
                        }
                        _ => {}
                    }
                }
            }
            Message::ToolResult(r) => {
                let args = calls.remove(&r.tool_call_id);
                let fields = tools::finished(
                    &live.cwd,
                    &r.tool_name,
                    args.as_ref(),
                    pi_ai::join_text(&r.content),
                    r.is_error,
                    None,
                );
                send_update(
                    conn,
                    id,
                    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(r.tool_call_id, fields)),
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_shapes_are_read_as_v1() {
        assert_eq!(
            lenient_version(json!({"protocolVersion": "1", "clientCapabilities": {}})),
            json!({"protocolVersion": 1, "clientCapabilities": {}})
        );
        assert_eq!(
            lenient_prompt(json!({"sessionId": "s", "content": [{"type": "text", "text": "hi"}]})),
            json!({"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]})
        );
        // v1's own field wins.
        assert_eq!(
            lenient_prompt(json!({"sessionId": "s", "prompt": [], "content": 1})),
            json!({"sessionId": "s", "prompt": [], "content": 1})
        );
    }

    #[test]
    fn prompt_blocks_become_pi_input() {
        let blocks: Vec<ContentBlock> = serde_json::from_value(json!([
            {"type": "text", "text": "look at"},
            {"type": "resource_link", "uri": "file:///ws/a.rs", "name": "a.rs"},
            {"type": "resource", "resource": {"uri": "file:///ws/b.txt", "text": "B"}},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
        ]))
        .unwrap();
        let (text, images) = prompt_input(&blocks, "prompt").unwrap();
        assert_eq!(
            text,
            "look at\n@/ws/a.rs\n<file path=\"/ws/b.txt\">\nB\n</file>"
        );
        assert_eq!(images.len(), 1);
        let audio: Vec<ContentBlock> = serde_json::from_value(
            json!([{"type": "audio", "mimeType": "audio/wav", "data": "AA=="}]),
        )
        .unwrap();
        assert_eq!(
            prompt_input(&audio, "prompt").unwrap_err().message,
            "prompt[0]: audio prompts are not supported (promptCapabilities.audio is false)"
        );
    }
}

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
    SessionUpdate, SetSessionConfigOptionRequest, SetSessionModeRequest, ToolCallUpdate,
};
use parking_lot::Mutex;
use pi_ai::models::ThinkingLevel;
use pi_ai::types::ImageContent;
use pi_ai::{Message, Model, Registry, StopReason};
use pi_core::approval::ApprovalPolicy;
use pi_core::harness::sessions::Error as HarnessError;
use pi_core::harness::{
    choose_model, AgentSession, OpenOptions, PromptOutcome, Sessions, WhenHeld,
};
use pi_core::mcp::manager::State;
use pi_core::resources::WorkspaceConfig;
use pi_core::session::SessionError;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::rpc::{codes, parse_params, Conn, RpcError};
use crate::setup::{AcpSetup, ClientFsCaps, PerSession};
use crate::tools;
use crate::updates::{chunk, send_update};

/// Sessions per `session/list` page.
pub const LIST_PAGE: usize = 50;

/// Options of `pi-lsp acp`.
#[derive(Debug, Clone, Default)]
pub struct AcpOptions {
    /// Trust every session's folder (`--trust`); without it a folder is trusted as Pi 1.6
    /// decides (`pi_core::trust`: its `trust.json`, then `defaultProjectTrust`). Trust loads
    /// the project's own configuration: `.pi/settings.json`, models.json,
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
    reg: Arc<FolderSessions>,
    per: Arc<PerSession>,
    next_ticket: AtomicU64,
    serving: watch::Sender<u64>,
    cancel_epoch: AtomicU64,
    /// The `configOptions` the client last got (answer or `config_option_update`).
    sent: Mutex<Option<Value>>,
}

/// One folder set's sessions: the harness's registry ([`Sessions`], as the LSP edge's) and
/// the ACP setup its sessions are built with.
pub struct FolderSessions {
    sessions: Arc<Sessions>,
    setup: Arc<AcpSetup>,
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
    /// The registries by folder set (the cwd, then `additionalDirectories`).
    registries: Mutex<HashMap<Vec<PathBuf>, Arc<FolderSessions>>>,
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
            registries: Mutex::default(),
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
        let mut cmds: Vec<Value> = vec![
            cmd(
                "model",
                "Switch the model (no argument: the next one)",
                Some(&"provider/id".to_string()),
            ),
            cmd(
                "thinking",
                "Set the thinking level (no argument: the next one)",
                Some(&"level".to_string()),
            ),
            cmd(
                "compact",
                "Compact the conversation now",
                Some(&"instructions".to_string()),
            ),
        ];
        cmds.extend(
            r.prompt_templates
                .iter()
                .map(|t| cmd(&t.name, &t.description, t.argument_hint.as_ref())),
        );
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
                    if !self.cancel(&p.session_id.0) {
                        tracing::warn!("session/cancel: unknown session {}", p.session_id.0)
                    }
                }
                Err(e) => tracing::warn!("session/cancel: {e}"),
            },
            other => tracing::debug!("notification {other} ignored"),
        }
    }

    /// Cancels session `id`'s run and the prompts waiting behind it; false when that session
    /// is not open here.
    fn cancel(&self, id: &str) -> bool {
        let live = self.sessions.lock().get(id).cloned();
        let Some(live) = live else {
            return false;
        };
        live.cancel_epoch.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            live.session.abort().await;
        });
        true
    }

    /// `session/cancel` sent as a request (with an id): ACP makes it a notification, so it is
    /// answered with -32600 saying so, but the run is cancelled all the same (a user's stop is
    /// never lost to the client's framing). Params of the wrong shape are -32602, an unknown
    /// session -32002, as for any request.
    fn cancel_request(&self, params: Value) -> Result<Value, RpcError> {
        let p: CancelNotification = parse_params(params)?;
        let id = &*p.session_id.0;
        if !self.cancel(id) {
            return Err(unknown_session(id));
        }
        Err(RpcError::new(
            codes::INVALID_REQUEST,
            "invalid request: session/cancel is a notification (send it without an id); the session's run was cancelled",
        )
        .with_data(json!({"method": "session/cancel", "sessionId": id, "cancelled": true})))
    }

    /// Answers the request `method` (`session/prompt` answers through [`AcpAgent::prompt`]).
    pub async fn request(self: &Arc<Self>, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "session/cancel" => self.cancel_request(params),
            "initialize" => self.initialize(parse_params(lenient_version(params))?),
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(parse_params(params)?).await,
            "session/load" => self.load(parse_params(params)?).await,
            "session/resume" => self.resume(parse_params(params)?).await,
            "session/list" => self.list(parse_params(params)?),
            "session/close" => self.close(parse_params(params)?).await,
            "session/delete" => self.delete(parse_params(params)?).await,
            "session/set_config_option" => self.set_config_option(parse_params(params)?).await,
            "session/set_mode" => self.set_mode(parse_params(params)?).await,
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
            compaction: p
                .client_capabilities
                .session
                .as_ref()
                .is_some_and(|s| s.compaction.is_some()),
            terminal: p.client_capabilities.terminal,
        };
        let version = negotiate_version(p.protocol_version.as_u16());
        let (ws, _) = WorkspaceConfig::with_project_trust(
            std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            self.opts.trust.then_some(true),
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

    /// The registry of the folder set `cwd` (+ `extra`, Zed's `additionalDirectories`):
    /// the one made earlier on this connection, else a new one. `field` names `cwd` in errors.
    fn registry(
        &self,
        cwd: &Path,
        field: &str,
        extra: &[PathBuf],
    ) -> Result<Arc<FolderSessions>, RpcError> {
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
        {
            let mut cwds = self.cwds.lock();
            if !cwds.contains(&root) {
                cwds.push(root.clone());
            }
        }
        let mut regs = self.registries.lock();
        if let Some(r) = regs.get(&folders) {
            return Ok(r.clone());
        }
        let (ws, _) =
            WorkspaceConfig::with_project_trust(root.clone(), self.opts.trust.then_some(true));
        if folders.len() > 1 {
            ws.set_folders(folders.clone());
        }
        let setup = Arc::new(AcpSetup::new(self.conn.clone(), root, *self.fs_caps.lock()));
        let reg = Arc::new(FolderSessions {
            sessions: Arc::new(Sessions::new(ws, setup.clone(), self.opts.model.clone())),
            setup,
        });
        regs.insert(folders, reg.clone());
        Ok(reg)
    }

    /// A registry to list or find the session files of `root` (one of this connection's
    /// when there is one; a new one opens nothing).
    fn lister(&self, root: &Path) -> Arc<Sessions> {
        if let Some(r) = self.registries.lock().iter().find(|(k, _)| k[0] == root) {
            return r.1.sessions.clone();
        }
        let (ws, _) = WorkspaceConfig::with_project_trust(
            root.to_path_buf(),
            self.opts.trust.then_some(true),
        );
        let setup = Arc::new(AcpSetup::new(
            self.conn.clone(),
            root.to_path_buf(),
            ClientFsCaps::default(),
        ));
        Arc::new(Sessions::new(ws, setup, None))
    }

    /// Makes `session` (of `reg`) live on this connection (the one already live when a
    /// concurrent open got there first), and tells its user what the registry said while
    /// opening it.
    fn register(&self, session: Arc<AgentSession>, reg: Arc<FolderSessions>) -> Arc<Live> {
        let id = session.id().to_string();
        let per = reg.setup.per_session(&id);
        *per.context_window.lock() = session.model().context_window;
        *per.title.lock() = session.name().or_else(|| first_prompt(&session));
        let live = {
            let mut map = self.sessions.lock();
            if let Some(l) = map.get(&id) {
                return l.clone();
            }
            let live = Arc::new(Live {
                cwd: session.workspace().root().to_path_buf(),
                session,
                reg,
                per,
                next_ticket: AtomicU64::new(0),
                serving: watch::Sender::new(0),
                cancel_epoch: AtomicU64::new(0),
                sent: Mutex::default(),
            });
            map.insert(id.clone(), live.clone());
            live
        };
        for n in live.reg.setup.take_notices() {
            send_update(&self.conn, &id, chunk(format!("[{n}]\n"), false));
        }
        live
    }

    /// MCP servers handed over by the client (`session/new` / `session/load` / `session/resume`
    /// `mcpServers`): each is converted with [`pi_core::mcp::acp_server`] and the valid ones
    /// start for this session (exposure `direct`; their tools join its runs), side by side;
    /// the answer waits for those with `direct` tools, at most Pi's startup wait
    /// ([`pi_core::mcp::manager::STARTUP_WAIT`]) from their start, once for all. Invalid entries
    /// (e.g. `sse`) are in `_meta.pi.mcpServersRejected` (`[{name, index, error}]`), those that
    /// failed to start (no such binary, an empty command, a handshake error) in
    /// `_meta.pi.mcpServersFailed` (`[{name, reason}]`); both are told to the user in one
    /// `agent_message_chunk`. `_meta.pi.mcpServersStarted` names the connected ones,
    /// `_meta.pi.mcpServersStarting` (only when any) those still connecting after the wait
    /// (a failure of one of these is told later in its own `agent_message_chunk`). With MCP off (`mcp_off`: `--no-mcp` / `-builtin:mcp`)
    /// none start and the user is told (`_meta.pi.mcpOff`). `None` when the client handed none.
    async fn start_mcp(
        &self,
        session_id: &str,
        cwd: &Path,
        ws: &pi_core::resources::WorkspaceConfig,
        servers: &[McpServer],
    ) -> Option<Value> {
        if servers.is_empty() {
            return None;
        }
        let mcp_off = pi_core::mcp::disabled(ws);
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
            register_handed_secrets(&v);
            // A stdio entry with a blank command names no program: refused as invalid.
            let blank = v.get("command").and_then(Value::as_str).map(str::trim) == Some("");
            let converted = if blank {
                Err("command: empty (a stdio server needs a program to run)".to_string())
            } else {
                pi_core::mcp::acp_server_in(ws, &v)
            };
            match converted {
                Ok(c) => {
                    started.push(name);
                    configs.push(c);
                }
                Err(e) => rejected.push(json!({"name": name, "index": i, "error": e})),
            }
        }
        let mut failed = Vec::new();
        let mut starting = Vec::new();
        if !configs.is_empty() {
            let manager = pi_core::mcp::McpManager::for_session(cwd, configs);
            // They all started connecting just now, side by side: the answer waits once, for
            // the servers with `direct` tools only, at most Pi's startup wait from their start
            // (the first prompt would wait for those anyway; issue 28). What is still
            // connecting then is `mcpServersStarting`, and told later if it fails.
            manager.wait_for_direct(&Default::default()).await;
            started.retain(|name| match outcome(&manager, name) {
                Outcome::Connected => true,
                Outcome::Connecting => {
                    starting.push(name.clone());
                    false
                }
                Outcome::Failed(reason) => {
                    failed.push(json!({"name": name, "reason": reason}));
                    false
                }
            });
            if !starting.is_empty() {
                self.report_late_failures(session_id, &manager, starting.clone());
            }
            pi_core::mcp::set_session_servers(session_id, manager);
        }
        let lines: Vec<String> = rejected
            .iter()
            .map(|r| (&r["name"], &r["error"]))
            .chain(failed.iter().map(|f| (&f["name"], &f["reason"])))
            .map(|(n, why)| {
                format!(
                    "{}: {}",
                    n.as_str().unwrap_or("?"),
                    why.as_str().unwrap_or("")
                )
            })
            .collect();
        if !lines.is_empty() {
            let text = format!(
                "[pi-lsp: MCP servers from the editor not started: {}]\n",
                lines.join("; ")
            );
            tracing::warn!("{}", text.trim_end());
            send_update(&self.conn, session_id, chunk(text, false));
        }
        let mut pi = json!({
            "mcpServersStarted": started,
            "mcpServersRejected": rejected,
            "mcpServersFailed": failed
        });
        if !starting.is_empty() {
            pi["mcpServersStarting"] = json!(starting);
        }
        Some(json!({ "pi": pi }))
    }

    /// Tells the user of session `session_id` about each server of `names` (still connecting
    /// when the session's answer went out) that then fails to start, each when it fails, in
    /// an `agent_message_chunk` worded as at the start. Each is watched at most
    /// [`LATE_MCP_WAIT`]; nothing is told once the session's servers were dropped (closed or
    /// deleted).
    fn report_late_failures(
        &self,
        session_id: &str,
        manager: &Arc<pi_core::mcp::McpManager>,
        names: Vec<String>,
    ) {
        let watches = names.into_iter().map(|name| {
            let conn = self.conn.clone();
            let manager = Arc::downgrade(manager);
            let session_id = session_id.to_string();
            async move {
                let deadline = tokio::time::Instant::now() + LATE_MCP_WAIT;
                while tokio::time::Instant::now() < deadline {
                    let Some(m) = manager.upgrade() else { return };
                    // Closed with its session (shut down, not failed): nobody to tell.
                    if m.server(&name).map(|s| s.status().0) == Some(State::Closed) {
                        return;
                    }
                    match outcome(&m, &name) {
                        Outcome::Connecting => {}
                        Outcome::Connected => return,
                        Outcome::Failed(reason) => {
                            let text = format!(
                                "[pi-lsp: MCP servers from the editor not started: {name}: {reason}]\n"
                            );
                            tracing::warn!("{}", text.trim_end());
                            send_update(&conn, &session_id, chunk(text, false));
                            return;
                        }
                    }
                    drop(m);
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        });
        tokio::spawn(futures::future::join_all(watches));
    }

    async fn new_session(self: &Arc<Self>, p: NewSessionRequest) -> Result<Value, RpcError> {
        let reg = self.registry(&p.cwd, "cwd", &p.additional_directories)?;
        let session = reg
            .sessions
            .create(self.opts.model.as_deref(), None, None)
            .map_err(|e| harness_error(e, ""))?;
        let live = self.register(session, reg);
        let mut out = self.opened_with_mcp(&live, &p.mcp_servers).await;
        out["sessionId"] = json!(live.session.id());
        Ok(out)
    }

    /// What `session/new`, `load` and `resume` answer besides the id: [`Self::opened`], with
    /// `_meta` from the client's MCP servers ([`Self::start_mcp`]) when it handed any.
    async fn opened_with_mcp(&self, live: &Live, servers: &[McpServer]) -> Value {
        let mut out = self.opened(live);
        if let Some(m) = self
            .start_mcp(
                live.session.id(),
                &live.cwd,
                live.session.workspace(),
                servers,
            )
            .await
        {
            out["_meta"] = m;
        }
        out
    }

    /// What `session/new`, `load` and `resume` answer besides the id: `configOptions` and
    /// `modes`.
    fn opened(&self, live: &Live) -> Value {
        let options = config_options(&live.session);
        *live.sent.lock() = Some(options.clone());
        json!({"configOptions": options, "modes": modes(&live.session)})
    }

    /// Opens session `id` of `cwd` through the folder set's registry (already open here:
    /// that one). The registry finds only this cwd's files and waits up to 3 s for another
    /// process to release one; a file still held then is refused (-32603 saying the session
    /// is open in another process, `data.reason: "sessionHeld"`), never forked: the client
    /// keeps using the id it asked for (docs/acp.md "Loading a session another process has
    /// open").
    async fn open(&self, id: &str, cwd: &Path, extra: &[PathBuf]) -> Result<Arc<Live>, RpcError> {
        if let Some(l) = self.sessions.lock().get(id).cloned() {
            return Ok(l);
        }
        let reg = self.registry(cwd, "cwd", extra)?;
        let session = reg
            .sessions
            .open_with(
                id,
                OpenOptions {
                    when_held: WhenHeld::Refuse,
                },
            )
            .await
            .map_err(|e| harness_error(e, id))?;
        Ok(self.register(session, reg))
    }

    async fn load(self: &Arc<Self>, p: LoadSessionRequest) -> Result<Value, RpcError> {
        let live = self
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
        Ok(self.opened_with_mcp(&live, &p.mcp_servers).await)
    }

    async fn resume(self: &Arc<Self>, p: ResumeSessionRequest) -> Result<Value, RpcError> {
        let live = self
            .open(&p.session_id.0, &p.cwd, &p.additional_directories)
            .await?;
        Ok(self.opened_with_mcp(&live, &p.mcp_servers).await)
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
                self.lister(c)
                    .list()
                    .into_iter()
                    .map(|l| (c.clone(), l.summary))
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
        close_session(&live).await;
        Ok(json!({}))
    }

    async fn delete(&self, p: DeleteSessionRequest) -> Result<Value, RpcError> {
        let id = &*p.session_id.0;
        let live = self.sessions.lock().remove(id);
        let path = match &live {
            Some(l) => {
                l.cancel_epoch.fetch_add(1, Ordering::SeqCst);
                let path = l.session.file();
                close_session(l).await;
                Some(path)
            }
            None => {
                let cwds = self.cwds.lock().clone();
                cwds.iter().find_map(|c| self.lister(c).file_of(id))
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

    async fn set_config_option(&self, p: SetSessionConfigOptionRequest) -> Result<Value, RpcError> {
        let live = self.live(&p.session_id.0)?;
        let value = match &p.value {
            SessionConfigOptionValue::ValueId { value } => value.0.to_string(),
            _ => {
                return Err(RpcError::invalid_params(
                    "value: expected a value id (a string)",
                ))
            }
        };
        let s = &live.session;
        if let Some(offered) = offered_values(&config_options(s), &p.config_id.0) {
            if !offered.contains(&value) {
                return Err(RpcError::invalid_params(format!(
                    "value: {value:?} is not offered for {}; offered: {}",
                    p.config_id.0,
                    offered.join(", ")
                ))
                .with_data(json!({"configId": &*p.config_id.0, "offered": offered})));
            }
        } else if &*p.config_id.0 == "thought_level" {
            return Err(RpcError::invalid_params(format!(
                "configId: {} has no thinking levels (no thought_level option)",
                s.model().full_id()
            )));
        }
        match &*p.config_id.0 {
            "model" => {
                s.set_model_by_id(&value)
                    .map_err(|e| RpcError::invalid_params(format!("value: {e}")))?;
            }
            "thought_level" => {
                let level = ThinkingLevel::parse(&value).ok_or_else(|| {
                    RpcError::invalid_params(format!("value: unknown thinking level {value:?}"))
                })?;
                s.set_thinking_level(level)
                    .map_err(|e| RpcError::internal(e.to_string()))?;
            }
            "mode" => set_mode(s, &value).await?,
            other => {
                return Err(RpcError::invalid_params(format!(
                    "configId: unknown config option {other:?} (model, thought_level, mode)"
                )))
            }
        }
        // The answer carries the options; the notification is for what else changed with
        // them (a mode's `current_mode_update`), so the client's view is whole.
        let options = config_options(s);
        self.sync(&live, Some(options.clone()));
        Ok(json!({"configOptions": options}))
    }

    /// `session/set_mode {sessionId, modeId}`: `plan` turns plan mode on; `ask`,
    /// `auto-edit`, `approve-all` turn it off and set the session's approval policy. Answers
    /// `{}` after `current_mode_update` (and `config_option_update`) went out.
    async fn set_mode(&self, p: SetSessionModeRequest) -> Result<Value, RpcError> {
        let live = self.live(&p.session_id.0)?;
        set_mode(&live.session, &p.mode_id.0).await?;
        self.sync(&live, None);
        Ok(json!({}))
    }

    /// The live session `id`, or -32002 naming it.
    fn live(&self, id: &str) -> Result<Arc<Live>, RpcError> {
        self.sessions
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| unknown_session(id))
    }

    /// Tells the client what changed in the session's options since it last heard, by
    /// whatever path (`session/set_config_option`, `session/set_mode`, `/model`, `/thinking`,
    /// an extension's command, plan mode left by the run): `config_option_update` with the
    /// whole list, and `current_mode_update` when the mode changed. `answered`: the options
    /// a response is carrying (no `config_option_update` for them then).
    fn sync(&self, live: &Live, answered: Option<Value>) {
        *live.per.context_window.lock() = live.session.model().context_window;
        let options = answered
            .clone()
            .unwrap_or_else(|| config_options(&live.session));
        let before = {
            let mut sent = live.sent.lock();
            if sent.as_ref() == Some(&options) {
                return;
            }
            sent.replace(options.clone())
        };
        let id = live.session.id();
        if answered.is_none() {
            self.conn.notify(
                "session/update",
                json!({"sessionId": id, "update": {"sessionUpdate": "config_option_update", "configOptions": options}}),
            );
        }
        let mode = |o: &Value| {
            o.as_array()
                .and_then(|a| a.iter().find(|x| x["id"] == "mode"))
                .map(|x| x["currentValue"].clone())
        };
        let now = mode(&options);
        if before.as_ref().and_then(mode) != now {
            if let Some(m) = now {
                self.conn.notify(
                    "session/update",
                    json!({"sessionId": id, "update": {"sessionUpdate": "current_mode_update", "currentModeId": m}}),
                );
            }
        }
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
        if let Some(r) = self.builtin_command(live, &text).await {
            self.sync(live, None);
            return r;
        }
        let started = s.prompt(&text, images, None, None).await;
        // An extension's command may have switched the model, the level or plan mode.
        self.sync(live, None);
        match started {
            Ok(PromptOutcome::Command(_)) => return Ok(json!({"stopReason": "end_turn"})),
            Ok(_) => {}
            Err(e) => return Err(RpcError::internal(e.to_string())),
        }
        s.wait_for_idle().await;
        self.sync(live, None);
        if live.cancel_epoch.load(Ordering::SeqCst) != t.epoch {
            return Ok(cancelled);
        }
        let outcome = s.last_outcome();
        let (reason, error) = outcome
            .map(|o| (o.stop_reason, o.error_message))
            .unwrap_or((StopReason::Stop, None));
        Ok(json!({"stopReason": match reason {
            // A run's outcome is never `pending` (a streamed message's start only).
            StopReason::Stop | StopReason::ToolUse | StopReason::Pending => "end_turn",
            StopReason::Length => "max_tokens",
            StopReason::Aborted => "cancelled",
            StopReason::Error => {
                return Err(RpcError::internal(error.unwrap_or_else(|| "the model request failed".into()))
                    .with_data(json!({"stopReason": "error"})));
            }
        }}))
    }

    /// The edge's own commands (advertised in `available_commands_update`), as Pi's
    /// interactive ones: `/model [provider/id]` (no argument: the next usable model, as Pi's
    /// model cycling), `/thinking [level]` (no argument: the model's next level, as Pi's
    /// cycling), `/compact [instructions]`. What they did is said in an
    /// `agent_message_chunk`; the prompt answers `end_turn` (a failure: -32602 / -32603 with
    /// the reason). `None`: not one of them.
    async fn builtin_command(&self, live: &Live, text: &str) -> Option<Result<Value, RpcError>> {
        let t = text.trim();
        let (name, arg) = t.split_once(char::is_whitespace).unwrap_or((t, ""));
        let arg = arg.trim();
        let s = &live.session;
        let said = match name {
            "/model" => {
                let r = if arg.is_empty() {
                    cycle_model(s)
                } else {
                    s.set_model_by_id(arg)
                        .map_err(|e| RpcError::invalid_params(e.to_string()))
                        .map(|()| true)
                };
                match r {
                    Ok(true) => format!("Model: {}", s.model().full_id()),
                    Ok(false) => "No other model to switch to.".to_string(),
                    Err(e) => return Some(Err(e)),
                }
            }
            "/thinking" => {
                let m = s.model();
                let levels = m.supported_thinking_levels();
                let level = if arg.is_empty() {
                    let now = m.thinking_level.unwrap_or(ThinkingLevel::Off);
                    match levels.iter().position(|l| *l == now) {
                        _ if levels.len() < 2 => None,
                        Some(i) => Some(levels[(i + 1) % levels.len()]),
                        None => levels.first().copied(),
                    }
                } else {
                    match ThinkingLevel::parse(arg) {
                        Some(l) => Some(l),
                        None => {
                            return Some(Err(RpcError::invalid_params(format!(
                                "prompt: unknown thinking level {arg:?}"
                            ))))
                        }
                    }
                };
                match level {
                    None => format!("{} has no thinking levels to switch.", m.full_id()),
                    Some(l) => match s.set_thinking_level(l) {
                        Ok(l) => format!("Thinking level: {}", l.as_str()),
                        Err(e) => return Some(Err(RpcError::internal(e.to_string()))),
                    },
                }
            }
            "/compact" => {
                let instructions = (!arg.is_empty()).then(|| arg.to_string());
                match s.compact(instructions).await {
                    Ok(r) => format!("Compacted ({} tokens before).", r.tokens_before),
                    Err(e) => return Some(Err(RpcError::internal(e.to_string()))),
                }
            }
            _ => return None,
        };
        send_update(&self.conn, s.id(), chunk(format!("[{said}]\n"), false));
        Some(Ok(json!({"stopReason": "end_turn"})))
    }

    /// Aborts every run, waits for them to settle and releases every session file (the
    /// client has gone, or the process is told to stop): every registry's
    /// [`Sessions::stop_all`] at once, as the LSP edge's (runs aborted and settled, bounded;
    /// process groups killed; files synced and released).
    pub async fn stop_all(&self) {
        self.sessions.lock().clear();
        let regs: Vec<Arc<FolderSessions>> =
            self.registries.lock().drain().map(|(_, r)| r).collect();
        futures::future::join_all(regs.iter().map(|r| r.sessions.stop_all())).await;
    }
}

/// The ACP protocol versions this agent speaks (ACP v1).
pub const PROTOCOL_VERSIONS: [u16; 1] = [1];

/// The latest of [`PROTOCOL_VERSIONS`].
pub const LATEST_PROTOCOL_VERSION: u16 = 1;

/// The version `initialize` answers for the client's `requested` one (ACP's version
/// negotiation): the requested version when the agent speaks it, else the latest it speaks
/// (0, a draft's, or 7, a future one, both get 1).
pub fn negotiate_version(requested: u16) -> u16 {
    if PROTOCOL_VERSIONS.contains(&requested) {
        requested
    } else {
        LATEST_PROTOCOL_VERSION
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

/// Registers the credentials an ACP client hands over with an MCP server (`session/new`,
/// `load`, `resume` `mcpServers[i]`) as secrets ([`pi_ai::keys::register_secret`]), so the
/// session file, the log, the updates and the tools' results never hold them (they are
/// redacted wherever a tool's output would carry them): every `headers` value, and the `env`
/// values whose names say they are credentials (`…KEY…`, `…TOKEN…`, `…SECRET…`,
/// `…PASSWORD…`, `…PASSWD…`, `…AUTH…`, `…CREDENTIAL…`, any case). Other `env` values (a
/// `NODE_ENV`, a path) are left alone: registering them would redact ordinary words.
pub fn register_handed_secrets(server: &Value) {
    const MARKS: [&str; 7] = [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "AUTH",
        "CREDENTIAL",
    ];
    let pairs = |k: &str| {
        server
            .get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for h in pairs("headers") {
        if let Some(v) = h["value"].as_str() {
            pi_ai::keys::register_secret(v);
        }
    }
    for e in pairs("env") {
        let name = e["name"].as_str().unwrap_or_default().to_ascii_uppercase();
        if MARKS.iter().any(|m| name.contains(m)) {
            if let Some(v) = e["value"].as_str() {
                pi_ai::keys::register_secret(v);
            }
        }
    }
}

/// How long a server handed over by the client that was still connecting when the session's
/// answer went out is waited for before its failure would no longer be told.
const LATE_MCP_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Where a handed-over MCP server stands.
enum Outcome {
    Connected,
    Connecting,
    /// Failed or closed: why (its error, else its state's name, else the configuration
    /// error naming it).
    Failed(String),
}

/// Where the server `name` of `manager` stands.
fn outcome(manager: &pi_core::mcp::McpManager, name: &str) -> Outcome {
    match manager.server(name).map(|s| s.status()) {
        Some((State::Connected, _)) => Outcome::Connected,
        Some((State::Connecting, _)) => Outcome::Connecting,
        Some((state, error)) => Outcome::Failed(error.unwrap_or_else(|| {
            serde_json::to_value(state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        })),
        None => Outcome::Failed(
            manager
                .config_errors()
                .into_iter()
                .find(|e| e.contains(name))
                .unwrap_or_else(|| "not accepted by the MCP configuration".to_string()),
        ),
    }
}

/// Gives the next prompt of the session its turn.
fn release(t: &Ticket) {
    t.live.serving.send_modify(|v| *v = (*v).max(t.n + 1));
}

/// Closes `live` through its registry (the run aborted, the file synced and released) and
/// forgets what ACP kept for it.
async fn close_session(live: &Live) {
    let id = live.session.id().to_string();
    if let Err(e) = live.reg.sessions.close(&id).await {
        tracing::warn!("session/close {id}: {e}");
    }
    live.reg.setup.forget(&id);
    // The MCP servers the client handed to this session close with it.
    pi_core::mcp::forget_session(&id);
}

/// A registry's error as JSON-RPC: an unknown session is -32002 naming `id` (and what the
/// registry found: another project's file…), a model that cannot be used -32000 (auth
/// required), a session another process holds -32603 saying so (`data`: `sessionId`,
/// `reason: "sessionHeld"`, the holder's `pid`, the file's `path`), the rest -32603.
fn harness_error(e: HarnessError, id: &str) -> RpcError {
    match e {
        HarnessError::UnknownSession(why) => {
            let mut err = unknown_session(id);
            err.data = Some(json!({"sessionId": id, "reason": why}));
            err
        }
        HarnessError::Session(SessionError::Locked { path, pid }) => RpcError::new(
            codes::INTERNAL_ERROR,
            format!(
                "session {id} is open in another process (pid {pid}); close it there, or wait for that process to exit, then load it again"
            ),
        )
        .with_data(json!({
            "sessionId": id,
            "reason": "sessionHeld",
            "pid": pid,
            "path": path,
        })),
        HarnessError::Model(m) => RpcError::new(codes::AUTH_REQUIRED, m),
        HarnessError::Invalid { field, message } => {
            RpcError::invalid_params(format!("{field}: {message}"))
        }
        other => RpcError::internal(other.to_string()),
    }
}

/// The prompt's text and images as Pi takes them: text as is; a resource link as an `@path`
/// mention (the model reads it with its tools); an embedded text resource inline in a
/// `<file>` block; images as attachments. Audio is refused (not advertised). A prompt with
/// nothing in it (no blocks, or only empty / whitespace text) is -32602 naming `field`.
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
                    data: img.data.as_str().into(),
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
    if text.trim().is_empty() && images.is_empty() {
        return Err(RpcError::invalid_params(format!(
            "{field}: empty: give text, an image or a resource"
        )));
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
    let m = modes(s);
    out.push(json!({
        "id": "mode",
        "name": "Mode",
        "category": "mode",
        "type": "select",
        "currentValue": m["currentModeId"],
        "options": m["availableModes"].as_array().map(|a| a.iter().map(|x| json!({"value": x["id"], "name": x["name"], "description": x["description"]})).collect::<Vec<_>>()).unwrap_or_default()
    }));
    Value::Array(out)
}

/// The `value`s of config option `id` in a `configOptions` list ([`config_options`]);
/// `None` when the list has no such option.
fn offered_values(options: &Value, id: &str) -> Option<Vec<String>> {
    let option = options.as_array()?.iter().find(|o| o["id"] == id)?;
    Some(
        option["options"]
            .as_array()?
            .iter()
            .filter_map(|o| o["value"].as_str().map(str::to_string))
            .collect(),
    )
}

/// The text of the session's first user message (on its file's active branch or not), as a
/// title.
fn first_prompt(s: &AgentSession) -> Option<String> {
    let (tree, _) = s.tree().ok()?;
    tree.entries.iter().find_map(|e| match e.message()? {
        Message::User(u) => crate::updates::title_of(&u.content.to_text()),
        _ => None,
    })
}

/// Switches `s` to the next model (Pi 1.6's `cycleModel`: settings' `enabledModels` when they
/// name any, else every usable model; the offline demo never); false when there is no other.
fn cycle_model(s: &AgentSession) -> Result<bool, RpcError> {
    s.cycle_model(false)
        .map(|cycled| cycled.is_some())
        .map_err(|e| RpcError::internal(e.to_string()))
}

/// The session's modes (ACP `SessionModeState`): the approval policies `ask` (edits and
/// commands ask first), `auto-edit` (edits apply, commands ask; the default here) and
/// `approve-all` (nothing asks; the bash sandbox still applies), and `plan` (Pi's plan mode:
/// read-only tools, the model writes a numbered plan) when the `plan-mode` extension is on.
/// The current one is `plan` while plan mode is on, else the policy in effect.
pub fn modes(s: &AgentSession) -> Value {
    let mut available = vec![
        json!({"id": "ask", "name": "Ask", "description": "Edits and commands ask first"}),
        json!({"id": "auto-edit", "name": "Auto-edit", "description": "Edits apply; commands ask"}),
        json!({"id": "approve-all", "name": "Approve all", "description": "Nothing asks (commands still run in the sandbox)"}),
    ];
    let board = s.plan().filter(|b| b.has_plan_mode());
    if board.is_some() {
        available.push(json!({"id": "plan", "name": "Plan", "description": "Read-only tools; the model writes a numbered plan"}));
    }
    let current = if board.is_some_and(|b| b.plan_mode()) {
        "plan"
    } else {
        match s.status().approval_policy {
            ApprovalPolicy::Ask => "ask",
            ApprovalPolicy::AutoEdit => "auto-edit",
            ApprovalPolicy::ApproveAll => "approve-all",
        }
    };
    json!({"currentModeId": current, "availableModes": available})
}

/// Switches session `s` to mode `id` (see [`modes`]); -32602 naming `modeId` for a mode it
/// does not have.
async fn set_mode(s: &AgentSession, id: &str) -> Result<(), RpcError> {
    let board = s.plan().filter(|b| b.has_plan_mode()).cloned();
    if id == "plan" {
        let b = board.ok_or_else(|| {
            RpcError::invalid_params(
                "modeId: plan mode is off in this workspace (builtinExtensions \"plan-mode\")",
            )
        })?;
        b.set_plan_mode(true)
            .await
            .map_err(|e| RpcError::invalid_params(format!("modeId: {e}")))?;
        return Ok(());
    }
    let policy = ApprovalPolicy::parse(id).ok_or_else(|| {
        RpcError::invalid_params(format!(
            "modeId: unknown mode {id:?} (ask, auto-edit, approve-all, plan)"
        ))
    })?;
    if let Some(b) = board.filter(|b| b.plan_mode()) {
        b.set_plan_mode(false)
            .await
            .map_err(|e| RpcError::invalid_params(format!("modeId: {e}")))?;
    }
    s.set_approval_policy(Some(policy));
    Ok(())
}

/// Sends the session's active branch as updates: user text and images, the answer and its
/// thinking, each tool call with its final status and content. The branch is the session's
/// model context (built from the file on every core; after a compaction its summary comes
/// first, as the model sees it).
pub fn replay(conn: &Conn, live: &Live) -> Result<(), RpcError> {
    let s = &live.session;
    let mut batch = crate::updates::Batch::new(conn, s.id());
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
                                i.data.to_string(),
                                i.mime_type,
                            ),
                        ),
                        _ => continue,
                    };
                    batch.push(SessionUpdate::UserMessageChunk(
                        agent_client_protocol_schema::v1::ContentChunk::new(c),
                    ));
                }
            }
            Message::Assistant(a) => {
                // The context is the replay's own copy: its blocks are moved, not cloned.
                for b in a.content {
                    match b {
                        pi_ai::ContentBlock::Thinking(t) if !t.thinking.is_empty() => {
                            batch.push(chunk(t.thinking, true))
                        }
                        pi_ai::ContentBlock::Text(t) if !t.text.is_empty() => {
                            batch.push(chunk(t.text, false))
                        }
                        pi_ai::ContentBlock::ToolCall(c) => {
                            batch.push(SessionUpdate::ToolCall(tools::announce(
                                &live.cwd,
                                &c.id,
                                &c.name,
                                &c.arguments,
                            )));
                            calls.insert(c.id, c.arguments);
                        }
                        _ => {}
                    }
                }
            }
            // Only a request carries one; a session's messages never do.
            Message::System(_) => {}
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
                batch.push(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    r.tool_call_id,
                    fields,
                )));
            }
        }
    }
    batch.finish();
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

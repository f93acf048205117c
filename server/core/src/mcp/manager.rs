//! The servers of one workspace, shared by its sessions ([`McpManager::for_workspace`]): one
//! connection (one process) per server, connected in the background when the first session
//! starts, reconnected on the next call after a failure or a dropped connection, closed on
//! [`shutdown_all`]. Servers handed to one session (ACP's `session/new.mcpServers`) live in
//! their own manager ([`McpManager::for_session`]), closed when the session's last handle goes.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::client::{ConnectError, Connection, Events};
use super::config::{self, Exposure, McpConfig, ServerConfig};
use super::groups::kill_all_groups;
use super::log::McpLog;

/// How long the first prompt waits for servers with `direct` tools (Pi's 10 s).
pub const STARTUP_WAIT: Duration = Duration::from_secs(10);

/// A server's state, as Pi 1.6 names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    Disabled,
    Connecting,
    Connected,
    Failed,
    Disconnected,
    NeedsAuth,
    Closed,
}

/// One server of a manager.
pub struct Server {
    pub config: ServerConfig,
    status: parking_lot::Mutex<(State, Option<String>)>,
    conn: tokio::sync::Mutex<Option<Arc<Connection>>>,
    /// The server's tools (`tools/list`) as JSON.
    tools: parking_lot::Mutex<Vec<Value>>,
    /// The last live connection's `has_resources` and instructions.
    info: parking_lot::Mutex<(bool, Option<String>)>,
    /// When its first connect began (the startup wait counts from there).
    started: parking_lot::Mutex<Option<Instant>>,
    /// Set when the state changes.
    changed: tokio::sync::Notify,
    /// The failure was reported.
    reported: std::sync::atomic::AtomicBool,
    manager: Weak<McpManager>,
}

/// What `agent/mcp/list` and `pi-lsp mcp list` show of a server.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    pub name: String,
    pub state: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `stdio` or `http`.
    pub transport: &'static str,
    pub exposure: Exposure,
    pub enabled: bool,
    /// `user`, `project` or `session`.
    pub scope: config::Scope,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<PathBuf>,
    pub tool_count: usize,
    /// Each tool: its server name, model name and effective exposure.
    pub tools: Vec<ToolInfo>,
}

/// One tool of a [`ServerInfo`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInfo {
    pub name: String,
    pub model_name: String,
    pub exposure: Exposure,
}

struct ServerEvents(Weak<Server>);

impl Events for ServerEvents {
    fn tools_changed(&self) {
        if let Some(s) = self.0.upgrade() {
            tokio::spawn(async move { s.refresh_tools().await });
        }
    }
    fn closed(&self) {}
}

impl Server {
    /// Server `config` of `manager`, not connected: `connecting` when enabled (its connection
    /// is started by the caller), else `disabled`.
    fn new(config: ServerConfig, manager: &Arc<McpManager>) -> Arc<Server> {
        let state = if config.enabled {
            State::Connecting
        } else {
            State::Disabled
        };
        Arc::new(Server {
            config,
            status: parking_lot::Mutex::new((state, None)),
            conn: Default::default(),
            tools: Default::default(),
            info: Default::default(),
            started: Default::default(),
            changed: Default::default(),
            reported: Default::default(),
            manager: Arc::downgrade(manager),
        })
    }

    /// State and error now.
    pub fn status(&self) -> (State, Option<String>) {
        self.status.lock().clone()
    }

    fn set(&self, state: State, error: Option<String>) {
        *self.status.lock() = (state, error);
        self.changed.notify_waiters();
        if let Some(m) = self.manager.upgrade() {
            m.generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The server's tools as JSON (empty until it connected).
    pub fn tools(&self) -> Vec<Value> {
        self.tools.lock().clone()
    }

    /// Whether the connected server offers resources.
    pub fn has_resources(&self) -> bool {
        self.info.lock().0
    }

    /// Whether any of its tools may be `direct` (the startup wait is for these).
    fn may_have_direct(&self) -> bool {
        self.config.exposure == Exposure::Direct
            || self
                .config
                .tool_exposure
                .iter()
                .any(|(_, e)| *e == Exposure::Direct)
    }

    /// The live connection, connecting (again) when there is none or it closed.
    pub async fn connection(self: &Arc<Self>) -> Result<Arc<Connection>, String> {
        let Some(manager) = self.manager.upgrade() else {
            return Err(format!("MCP server \"{}\" is shut down", self.config.name));
        };
        if !self.config.enabled {
            return Err(format!("MCP server \"{}\" is disabled.", self.config.name));
        }
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.is_closed() {
                return Ok(c.clone());
            }
            let why = c.closed_reason();
            if let Some(old) = slot.take() {
                self.report_once(&format!(
                    "MCP server \"{}\" disconnected: {why}",
                    self.config.name
                ));
                tokio::spawn(async move { old.close().await });
            }
        }
        if manager.shutdown.is_cancelled() {
            return Err(format!("MCP server \"{}\" is shut down", self.config.name));
        }
        self.started.lock().get_or_insert_with(Instant::now);
        self.set(State::Connecting, None);
        let events: Arc<dyn Events> = Arc::new(ServerEvents(Arc::downgrade(self)));
        let connected = Connection::connect(
            &self.config,
            &manager.base,
            manager.log.clone(),
            events,
            &manager.shutdown,
        )
        .await;
        match connected {
            Ok(c) => {
                let c = Arc::new(c);
                *self.info.lock() = (c.has_resources, c.instructions.clone());
                let tools = if c.has_tools {
                    match c.list_tools().await {
                        Ok(t) => t,
                        Err(e) => {
                            let e = format!("Failed to list tools: {e}");
                            self.fail(State::Failed, e.clone());
                            tokio::spawn(async move { c.close().await });
                            return Err(format!(
                                "MCP server \"{}\" failed to connect: {e}",
                                self.config.name
                            ));
                        }
                    }
                } else {
                    Vec::new()
                };
                *self.tools.lock() = tools;
                self.reported.store(false, Ordering::SeqCst);
                *slot = Some(c.clone());
                self.set(State::Connected, None);
                Ok(c)
            }
            Err(ConnectError::NeedsAuth(e)) => {
                self.fail(State::NeedsAuth, e.clone());
                Err(e)
            }
            Err(ConnectError::Failed(e)) => {
                let state = if manager.shutdown.is_cancelled() {
                    State::Closed
                } else {
                    State::Failed
                };
                self.fail(state, e.clone());
                Err(format!(
                    "MCP server \"{}\" failed to connect: {e}",
                    self.config.name
                ))
            }
        }
    }

    fn fail(&self, state: State, error: String) {
        self.set(state, Some(error.clone()));
        self.report_once(&format!("MCP server \"{}\": {error}", self.config.name));
    }

    /// Reports a failure once (until the server connects again): a warning in the log (the
    /// editor's output) and in the manager's reports.
    fn report_once(&self, text: &str) {
        if self.reported.swap(true, Ordering::SeqCst) {
            return;
        }
        super::report(text);
        if let Some(m) = self.manager.upgrade() {
            m.reports.lock().push(text.to_string());
        }
    }

    /// A call on `conn` failed with `error`: a timeout (the server hangs, or floods its output)
    /// closes the connection and marks the server failed, so the next call starts it again; a
    /// closed connection is marked disconnected.
    pub async fn call_failed(&self, conn: &Arc<Connection>, error: &str) {
        let timed_out = error.starts_with(super::client::TIMED_OUT);
        if !timed_out && !conn.is_closed() {
            return;
        }
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            slot.take();
            drop(slot);
            let state = if timed_out {
                State::Failed
            } else {
                State::Disconnected
            };
            self.set(state, Some(error.to_string()));
            let c = conn.clone();
            tokio::spawn(async move { c.close().await });
        }
    }

    /// Lists the tools again (after `notifications/tools/list_changed`).
    pub async fn refresh_tools(self: &Arc<Self>) {
        let c = self.conn.lock().await.clone();
        if let Some(c) = c {
            match c.list_tools().await {
                Ok(t) => {
                    *self.tools.lock() = t;
                    if let Some(m) = self.manager.upgrade() {
                        m.generation.fetch_add(1, Ordering::SeqCst);
                    }
                }
                Err(e) => self.set(
                    State::Connected,
                    Some(format!("Failed to refresh tools: {e}")),
                ),
            }
        }
    }

    /// Waits until the server is no longer connecting or `deadline` passed.
    async fn settled(&self, deadline: Instant) {
        loop {
            let notified = self.changed.notified();
            if self.status().0 != State::Connecting {
                return;
            }
            if tokio::time::timeout_at(deadline.into(), notified)
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Closes the connection (stdio: the process group).
    pub async fn close(&self) {
        let c = self.conn.lock().await.take();
        if let Some(c) = c {
            c.close().await;
        }
        if self.config.enabled {
            self.set(State::Closed, None);
        }
    }
}

/// The servers of one workspace (or one session); see the module docs.
pub struct McpManager {
    base: PathBuf,
    agent_dir: Option<PathBuf>,
    trusted: bool,
    /// VS Code's files read too (`vscodeMcpServers` on).
    vscode: Option<super::vscode::VscodeFiles>,
    log: Arc<McpLog>,
    servers: parking_lot::Mutex<Vec<Arc<Server>>>,
    config_errors: parking_lot::Mutex<Vec<String>>,
    /// Failures not shown yet ([`McpManager::take_reports`]).
    reports: parking_lot::Mutex<Vec<String>>,
    /// Bumped when a server's state or tools change.
    generation: AtomicU64,
    shutdown: CancellationToken,
    /// The codemode notice was given.
    codemode_noted: std::sync::atomic::AtomicBool,
}

fn registry() -> &'static parking_lot::Mutex<HashMap<PathBuf, Arc<McpManager>>> {
    static R: OnceLock<parking_lot::Mutex<HashMap<PathBuf, Arc<McpManager>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

fn session_managers() -> &'static parking_lot::Mutex<Vec<Weak<McpManager>>> {
    static R: OnceLock<parking_lot::Mutex<Vec<Weak<McpManager>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Closes every manager's servers (stdin closed → SIGTERM → SIGKILL, in parallel), then kills
/// what is left. For the process's shutdown.
pub async fn shutdown_all() {
    let mut all: Vec<Arc<McpManager>> = registry().lock().drain().map(|(_, m)| m).collect();
    all.extend(
        session_managers()
            .lock()
            .drain(..)
            .filter_map(|w| w.upgrade()),
    );
    futures::future::join_all(all.iter().map(|m| m.shutdown())).await;
    kill_all_groups();
}

impl McpManager {
    fn new(
        base: PathBuf,
        agent_dir: Option<PathBuf>,
        trusted: bool,
        vscode: Option<super::vscode::VscodeFiles>,
    ) -> Arc<McpManager> {
        let log = Arc::new(McpLog::new(agent_dir.as_ref().map(|a| a.join("mcp.log"))));
        Arc::new(McpManager {
            base,
            agent_dir,
            trusted,
            vscode,
            log,
            servers: Default::default(),
            config_errors: Default::default(),
            reports: Default::default(),
            generation: AtomicU64::new(0),
            shutdown: CancellationToken::new(),
            codemode_noted: Default::default(),
        })
    }

    /// The manager of the workspace `root` (one per root and trust, shared by its sessions),
    /// created with the configuration read now; its enabled servers start connecting in the
    /// background.
    pub fn for_workspace(
        root: &Path,
        agent_dir: Option<&Path>,
        trusted: bool,
        vscode: Option<super::vscode::VscodeFiles>,
    ) -> Arc<McpManager> {
        let mut reg = registry().lock();
        if let Some(m) = reg.get(root) {
            if m.trusted == trusted && m.agent_dir.as_deref() == agent_dir && m.vscode == vscode {
                return m.clone();
            }
        }
        let m = McpManager::new(
            root.to_path_buf(),
            agent_dir.map(Path::to_path_buf),
            trusted,
            vscode,
        );
        m.load(super::vscode::load_all(
            agent_dir,
            root,
            trusted,
            m.vscode.as_ref(),
        ));
        if let Some(old) = reg.insert(root.to_path_buf(), m.clone()) {
            tokio::spawn(async move { old.shutdown().await });
        }
        drop(reg);
        m.connect_all();
        m
    }

    /// A manager for servers handed to one session (ACP's `session/new.mcpServers`, already
    /// converted to [`ServerConfig`]s with [`config::validate`]; relative `cwd`s against
    /// `base`). Its servers start connecting now and are closed when the last handle is
    /// dropped or at [`shutdown_all`].
    pub fn for_session(base: &Path, servers: Vec<ServerConfig>) -> Arc<McpManager> {
        let servers = servers
            .into_iter()
            .map(|mut s| {
                s.scope = config::Scope::Session;
                s
            })
            .collect();
        Self::standalone(base, pi_ai::models::agent_dir().as_deref(), servers)
    }

    /// A manager of `servers` as given, not shared (`pi-lsp mcp list`, session servers).
    pub fn standalone(
        base: &Path,
        agent_dir: Option<&Path>,
        servers: Vec<ServerConfig>,
    ) -> Arc<McpManager> {
        let m = McpManager::new(
            base.to_path_buf(),
            agent_dir.map(Path::to_path_buf),
            false,
            None,
        );
        m.load(McpConfig {
            servers,
            ..McpConfig::default()
        });
        session_managers().lock().push(Arc::downgrade(&m));
        m.connect_all();
        m
    }

    fn load(self: &Arc<Self>, cfg: McpConfig) {
        for e in &cfg.errors {
            super::report(&format!("MCP configuration: {e}"));
        }
        *self.config_errors.lock() = cfg.errors.clone();
        self.reports.lock().extend(cfg.errors.iter().cloned());
        let servers = cfg
            .servers
            .into_iter()
            .map(|c| Server::new(c, self))
            .collect();
        *self.servers.lock() = servers;
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Starts connecting every enabled server in the background.
    pub fn connect_all(self: &Arc<Self>) {
        for s in self.servers() {
            if s.config.enabled {
                s.started.lock().get_or_insert_with(Instant::now);
                tokio::spawn(async move {
                    let _ = s.connection().await;
                });
            }
        }
    }

    /// The servers in configuration order.
    pub fn servers(&self) -> Vec<Arc<Server>> {
        self.servers.lock().clone()
    }

    /// The server named `name`.
    pub fn server(&self, name: &str) -> Option<Arc<Server>> {
        self.servers
            .lock()
            .iter()
            .find(|s| s.config.name == name)
            .cloned()
    }

    /// Configuration errors of the last load.
    pub fn config_errors(&self) -> Vec<String> {
        self.config_errors.lock().clone()
    }

    /// Failures and configuration errors not reported yet (each is returned once).
    pub fn take_reports(&self) -> Vec<String> {
        std::mem::take(&mut *self.reports.lock())
    }

    /// Changes when a server's state or tool list changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The once-per-manager notice that `codemode` exposure is served as `deferred`, when a
    /// server uses it and it was not given yet.
    pub fn take_codemode_notice(&self) -> Option<String> {
        let uses = self.servers().iter().any(|s| {
            s.config.enabled
                && (s.config.exposure == Exposure::Codemode
                    || s.config
                        .tool_exposure
                        .iter()
                        .any(|(_, e)| *e == Exposure::Codemode))
        });
        (uses && !self.codemode_noted.swap(true, Ordering::SeqCst)).then(|| {
            "MCP: codemode exposure is not available in pi-lsp yet; tools with codemode exposure are deferred (loaded with tool_search)".to_string()
        })
    }

    /// Waits (at most until [`STARTUP_WAIT`] after each began connecting) for the servers that
    /// may have `direct` tools, and for those with a tool in `loaded` (`tool_search` loaded it
    /// on the branch: it is declared from the run's first request, as a direct one).
    pub async fn wait_for_direct(&self, loaded: &std::collections::BTreeSet<String>) {
        let waits = self
            .servers()
            .into_iter()
            .filter(|s| {
                let prefix = super::naming::tool_name(&s.config.name, "", |_| false);
                s.config.enabled
                    && (s.may_have_direct() || loaded.iter().any(|n| n.starts_with(&prefix)))
            })
            .map(|s| async move {
                let start = (*s.started.lock()).unwrap_or_else(Instant::now);
                s.settled(start + STARTUP_WAIT).await;
            });
        futures::future::join_all(waits).await;
    }

    /// Waits for every enabled server to finish connecting (`tool_search`, resource tools and
    /// `pi-lsp mcp list`), at most `limit`.
    pub async fn wait_all(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let waits = self
            .servers()
            .into_iter()
            .filter(|s| s.config.enabled)
            .map(|s| async move {
                s.settled(deadline).await;
            });
        futures::future::join_all(waits).await;
    }

    /// Tool names of every server (Pi's naming: sanitized, hash suffix on collisions and over
    /// 64 characters), by `(server, tool)`.
    pub fn names(&self) -> BTreeMap<(String, String), String> {
        let mut owners: HashMap<String, (String, String)> = HashMap::new();
        let mut out = BTreeMap::new();
        for s in self.servers() {
            let server = &s.config.name;
            let tools: Vec<String> = s
                .tools()
                .iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
                .collect();
            let plain: Vec<String> = tools
                .iter()
                .map(|t| super::naming::tool_name(server, t, |_| false))
                .collect();
            let mut current: Vec<String> = Vec::new();
            for t in &tools {
                let owner = (server.clone(), t.clone());
                let name = super::naming::tool_name(server, t, |c| {
                    owners.get(c).is_some_and(|o| *o != owner)
                        || current.iter().any(|x| x == c)
                        || plain.iter().filter(|p| *p == c).count() > 1
                });
                owners.insert(name.clone(), owner.clone());
                current.push(name.clone());
                out.insert(owner, name);
            }
        }
        out
    }

    /// What `agent/mcp/list` shows.
    pub fn list(&self) -> Vec<ServerInfo> {
        let names = self.names();
        self.servers()
            .iter()
            .map(|s| {
                let (state, error) = s.status();
                let tools: Vec<ToolInfo> = s
                    .tools()
                    .iter()
                    .filter_map(|t| t.get("name").and_then(Value::as_str))
                    .map(|t| ToolInfo {
                        name: t.to_string(),
                        model_name: names
                            .get(&(s.config.name.clone(), t.to_string()))
                            .cloned()
                            .unwrap_or_default(),
                        exposure: s.config.tool_exposure(t),
                    })
                    .collect();
                ServerInfo {
                    name: s.config.name.clone(),
                    state,
                    error,
                    transport: match s.config.transport {
                        config::Transport::Stdio { .. } => "stdio",
                        config::Transport::Http { .. } => "http",
                    },
                    exposure: s.config.exposure,
                    enabled: s.config.enabled,
                    scope: s.config.scope,
                    source: s.config.source.clone(),
                    tool_count: tools.len(),
                    tools,
                }
            })
            .collect()
    }

    /// Reads the configuration again (after a change to a file) and reconnects the servers
    /// whose entry changed; the others keep their connection.
    pub async fn reload(self: &Arc<Self>) {
        let cfg = super::vscode::load_all(
            self.agent_dir.as_deref(),
            &self.base,
            self.trusted,
            self.vscode.as_ref(),
        );
        let old = self.servers();
        let mut keep: Vec<Arc<Server>> = Vec::new();
        let mut close: Vec<Arc<Server>> = Vec::new();
        for s in &old {
            if cfg.server(&s.config.name) == Some(&s.config) {
                keep.push(s.clone());
            } else {
                close.push(s.clone());
            }
        }
        for s in close {
            s.close().await;
        }
        let before = self.config_errors();
        for e in cfg.errors.iter().filter(|e| !before.contains(e)) {
            super::report(&format!("MCP configuration: {e}"));
        }
        *self.config_errors.lock() = cfg.errors.clone();
        let servers: Vec<Arc<Server>> = cfg
            .servers
            .into_iter()
            .map(|c| {
                if let Some(k) = keep.iter().find(|k| k.config.name == c.name) {
                    return k.clone();
                }
                let s = Server::new(c, self);
                if s.config.enabled {
                    let t = s.clone();
                    tokio::spawn(async move {
                        let _ = t.connection().await;
                    });
                }
                s
            })
            .collect();
        *self.servers.lock() = servers;
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Closes the connection of `name` and connects again now.
    pub async fn reconnect(&self, name: &str) -> Result<(), String> {
        let s = self
            .server(name)
            .ok_or_else(|| format!("no MCP server \"{name}\""))?;
        s.close().await;
        s.connection().await.map(|_| ())
    }

    /// Saves `patch` for `name` to the file that defines it (a project override when the
    /// server is a user entry overridden in this trusted project), then reloads.
    pub async fn update(self: &Arc<Self>, name: &str, patch: config::Patch) -> Result<(), String> {
        let s = self
            .server(name)
            .ok_or_else(|| format!("no MCP server \"{name}\""))?;
        let Some(path) = s.config.edit_path().map(Path::to_path_buf) else {
            return Err(format!(
                "MCP server \"{name}\" was handed over by the client; it has no file to save to"
            ));
        };
        let as_override = s.config.override_path.is_some();
        let p = path.clone();
        let n = name.to_string();
        tokio::task::spawn_blocking(move || config::update(&p, &n, patch, as_override))
            .await
            .map_err(|e| e.to_string())??;
        self.reload().await;
        Ok(())
    }

    /// Closes every server.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        futures::future::join_all(self.servers().iter().map(|s| s.close())).await;
    }
}

impl Drop for McpManager {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

//! One connection to one MCP server through `rmcp` (the official Rust SDK), client side.
//!
//! - stdio: pi-lsp spawns the child itself (in its own process tree: a process group, a job
//!   object on Windows, through [`crate::platform::process`]; stdin/stdout piped, stderr
//!   kept as a 2,000-character tail) and hands its pipes to rmcp's async read/write transport.
//!   Owning the process lets shutdown follow Pi 1.6: close stdin, after 500 ms SIGTERM to the
//!   group, 2 s later SIGKILL (servers started through `npx`/`uvx` wrappers stop with their
//!   children; on Windows the job is terminated at the SIGTERM step). A stdout line over 16 MiB (Pi's `DEFAULT_MAX_MESSAGE_BYTES`) ends the connection
//!   instead of being buffered: the pending calls fail at once and memory stays bounded.
//! - streamable HTTP: rmcp's reqwest transport over rustls (ring), with the configured headers;
//!   JSON bodies and SSE events over 16 MiB are refused by rmcp. A 401 or an `oauth` entry is
//!   "sign-in is not supported yet".
//!
//! Requests carry the server's timeout, reset by progress notifications (rmcp's
//! `reset_timeout_on_progress`); an abort sends `notifications/cancelled` and ends the call.

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

#[allow(deprecated)] // logging notifications: deprecated by SEP-2577, still sent by servers
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientRequest, LoggingMessageNotificationParam, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RoleClient, RunningService};
use rmcp::ClientHandler;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio_util::sync::CancellationToken;

use super::config::{resolve_value, ServerConfig, Transport};
use super::groups::{track_group, untrack_group};
use super::log::McpLog;
use crate::platform::process::{self, ProcessTree};

/// Largest message read from a server (Pi's 16 MiB).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Characters of a failed stdio server's stderr kept for its error.
pub const STDERR_TAIL_CHARS: usize = 2_000;
/// How long a stdio server gets to exit after its stdin closes, before SIGTERM.
const STDIN_CLOSE_GRACE: Duration = Duration::from_millis(500);
/// How long after SIGTERM the process group gets SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// How a request's timeout error starts (the server is then closed and marked failed).
pub const TIMED_OUT: &str = "MCP request timed out after";

/// The error of an HTTP server that needs OAuth sign-in.
pub fn sign_in_message(name: &str) -> String {
    format!("MCP server \"{name}\" requires sign-in, which pi-lsp does not support yet (sign-in is not supported yet); give it an Authorization header in mcp.json instead")
}

/// What a connection reports to its owner.
pub trait Events: Send + Sync {
    /// The server announced `notifications/tools/list_changed`.
    fn tools_changed(&self);
    /// The connection closed (the process exited, the stream ended) while it was in use.
    fn closed(&self);
}

/// rmcp's client handler: logging notifications to `mcp.log`, list changes to the owner.
struct Handler {
    server: String,
    log: Arc<McpLog>,
    events: Arc<dyn Events>,
}

#[allow(deprecated)]
impl ClientHandler for Handler {
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let v = serde_json::to_value(&params).unwrap_or(Value::Null);
        self.log.write(&self.server, &v);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.tools_changed();
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut c = rmcp::model::ClientConfig::default();
        c.client_info.name = "pi-lsp".into();
        c.client_info.version = env!("CARGO_PKG_VERSION").into();
        c.client_info.title = None;
        c.client_info.description = None;
        c.client_info.website_url = None;
        c.client_info.icons = None;
        c
    }
}

/// How long a failed connect waits for the server's last stderr lines.
const STDERR_SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

/// The tail of a child's stderr (at most [`STDERR_TAIL_CHARS`] characters kept).
#[derive(Default)]
pub struct StderrTail(parking_lot::Mutex<String>);

impl StderrTail {
    fn push(&self, bytes: &[u8]) {
        let mut t = self.0.lock();
        t.push_str(&String::from_utf8_lossy(bytes));
        let n = t.chars().count();
        if n > STDERR_TAIL_CHARS * 2 {
            let cut = t
                .char_indices()
                .nth(n - STDERR_TAIL_CHARS)
                .map(|(i, _)| i)
                .unwrap_or(0);
            t.replace_range(..cut, "");
        }
    }

    /// The last [`STDERR_TAIL_CHARS`] characters, trimmed, secrets redacted.
    pub fn tail(&self) -> String {
        let t = self.0.lock();
        let n = t.chars().count();
        let s: String = t
            .chars()
            .skip(n.saturating_sub(STDERR_TAIL_CHARS))
            .collect();
        pi_ai::keys::redact(s.trim())
    }
}

/// stdout of a child with a cap on one line's length: over [`MAX_MESSAGE_BYTES`] without a
/// newline, reading fails (the connection ends; see the module docs).
struct LineCap<R> {
    inner: R,
    since_newline: usize,
    over: Arc<std::sync::atomic::AtomicBool>,
}

impl<R: AsyncRead + Unpin> AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r {
            let new = &buf.filled()[before..];
            match memchr::memrchr(b'\n', new) {
                Some(i) => self.since_newline = new.len() - i - 1,
                None => self.since_newline += new.len(),
            }
            if self.since_newline > MAX_MESSAGE_BYTES {
                self.over.store(true, std::sync::atomic::Ordering::SeqCst);
                return Poll::Ready(Err(std::io::Error::other(format!(
                    "MCP stdio message exceeds {MAX_MESSAGE_BYTES} bytes"
                ))));
            }
        }
        r
    }
}

/// A stdio server's process and its tree (process group, or job object on Windows), stopped
/// as one on close.
struct Child {
    child: tokio::process::Child,
    tree: Option<ProcessTree>,
}

impl Child {
    /// SIGTERM to the group (Windows: the job terminated; it has no polite stop).
    fn terminate_tree(&self) {
        if let Some(t) = &self.tree {
            t.terminate();
        }
    }

    /// SIGKILL to the group (Windows: the job terminated).
    fn kill_tree(&self) {
        if let Some(t) = &self.tree {
            t.kill();
        }
    }
}

/// One live connection.
pub struct Connection {
    service: RunningService<RoleClient, Handler>,
    /// A stdio server's watcher: told to stop the process; answers when it is gone.
    child: parking_lot::Mutex<
        Option<(
            tokio::sync::oneshot::Sender<()>,
            tokio::sync::oneshot::Receiver<()>,
        )>,
    >,
    /// stderr of a stdio server.
    pub stderr: Arc<StderrTail>,
    /// A message over the cap ended the connection.
    oversized: Arc<std::sync::atomic::AtomicBool>,
    timeout: Duration,
    /// The server's `initialize` instructions.
    pub instructions: Option<String>,
    /// The server offers resources.
    pub has_resources: bool,
    /// The server offers tools.
    pub has_tools: bool,
}

/// Why a connect failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ConnectError {
    /// HTTP 401, or an `oauth` entry.
    NeedsAuth(String),
    /// Anything else (the stderr tail appended for stdio servers).
    Failed(String),
}

fn expand_home(v: &str) -> String {
    if v == "~" {
        return std::env::var("HOME").unwrap_or_else(|_| v.to_string());
    }
    match (v.strip_prefix("~/"), std::env::var("HOME")) {
        (Some(rest), Ok(h)) => format!("{h}/{rest}"),
        _ => v.to_string(),
    }
}

impl Connection {
    /// Connects to `cfg` (relative `cwd` against `base`) and completes `initialize`, within the
    /// server's timeout. `cancel` stops a connect in progress.
    pub async fn connect(
        cfg: &ServerConfig,
        base: &Path,
        log: Arc<McpLog>,
        events: Arc<dyn Events>,
        cancel: &CancellationToken,
    ) -> Result<Connection, ConnectError> {
        let name = &cfg.name;
        let handler = Handler {
            server: name.clone(),
            log,
            events,
        };
        let timeout = cfg.timeout();
        let stderr = Arc::new(StderrTail::default());
        let oversized = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let fail = |e: String, tail: &StderrTail| {
            let t = tail.tail();
            ConnectError::Failed(if t.is_empty() { e } else { format!("{e}\n{t}") })
        };
        match &cfg.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut resolved = HashMap::new();
                for (k, v) in env {
                    let v = resolve_value(v, &format!("MCP server \"{name}\" env \"{k}\""))
                        .map_err(ConnectError::Failed)?;
                    resolved.insert(k.clone(), v);
                }
                let dir = base.join(expand_home(cwd.as_deref().unwrap_or(".")));
                let mut cmd = tokio::process::Command::new(expand_home(command));
                cmd.args(args.iter().map(|a| expand_home(a)))
                    .envs(&resolved)
                    .current_dir(&dir)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .kill_on_drop(true);
                process::prepare(&mut cmd);
                let mut child = cmd
                    .spawn()
                    .map_err(|e| ConnectError::Failed(format!("failed to start {command}: {e}")))?;
                // The server's tree: its process group (its pid), or on Windows a job object
                // it is assigned to; none only when it already exited.
                let tree = child.id().and_then(|p| ProcessTree::adopt(p).ok());
                track_group(tree.as_ref());
                let (Some(stdin), Some(stdout), Some(mut err)) =
                    (child.stdin.take(), child.stdout.take(), child.stderr.take())
                else {
                    return Err(ConnectError::Failed("no pipes to the server".into()));
                };
                let tail = stderr.clone();
                let stderr_read = tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    while let Ok(n) = err.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        tail.push(&buf[..n]);
                    }
                });
                let reader = LineCap {
                    inner: stdout,
                    since_newline: 0,
                    over: oversized.clone(),
                };
                let transport =
                    rmcp::transport::async_rw::AsyncRwTransport::new_client(reader, stdin)
                        .with_max_line_length(usize::MAX);
                let mut guard = Some(Child { child, tree });
                let served = tokio::select! {
                    r = tokio::time::timeout(timeout, rmcp::serve_client(handler, transport)) => r,
                    _ = cancel.cancelled() => {
                        if let Some(c) = guard.take() { terminate(c, false).await; }
                        return Err(ConnectError::Failed("shut down while connecting".into()));
                    }
                };
                let service = match served {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        let msg = if oversized.load(std::sync::atomic::Ordering::SeqCst) {
                            format!("MCP stdio message exceeds {MAX_MESSAGE_BYTES} bytes")
                        } else {
                            match e {
                                rmcp::service::ClientInitializeError::TransportError { .. }
                                | rmcp::service::ClientInitializeError::ConnectionClosed(_) => {
                                    "Connection closed".to_string()
                                }
                                other => pi_ai::keys::redact(&other.to_string()),
                            }
                        };
                        if let Some(c) = guard.take() {
                            terminate(c, true).await;
                        }
                        // The server is gone: let its last stderr lines arrive (bounded, a
                        // grandchild may hold the pipe).
                        let _ = tokio::time::timeout(STDERR_SETTLE, stderr_read).await;
                        return Err(fail(msg, &stderr));
                    }
                    Err(_) => {
                        if let Some(c) = guard.take() {
                            terminate(c, true).await;
                        }
                        let _ = tokio::time::timeout(STDERR_SETTLE, stderr_read).await;
                        return Err(fail(
                            format!("no answer to initialize within {} s", cfg.timeout),
                            &stderr,
                        ));
                    }
                };
                Ok(Self::finish(service, guard, stderr, oversized, timeout))
            }
            Transport::Http {
                url,
                headers,
                oauth,
            } => {
                if *oauth {
                    return Err(ConnectError::NeedsAuth(sign_in_message(name)));
                }
                let mut custom = HashMap::new();
                let mut auth = None;
                for (k, v) in headers {
                    let v = resolve_value(v, &format!("MCP server \"{name}\" header \"{k}\""))
                        .map_err(ConnectError::Failed)?;
                    if k.eq_ignore_ascii_case("authorization") {
                        // rmcp sends `auth_header` as a bearer token; keep the value as written.
                        let hv = reqwest::header::HeaderValue::from_str(&v).map_err(|_| {
                            ConnectError::Failed(format!("header \"{k}\" is not a valid value"))
                        })?;
                        auth = Some(hv);
                        continue;
                    }
                    let hn =
                        reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                            ConnectError::Failed(format!("\"{k}\" is not a valid header name"))
                        })?;
                    let hv = reqwest::header::HeaderValue::from_str(&v).map_err(|_| {
                        ConnectError::Failed(format!("header \"{k}\" is not a valid value"))
                    })?;
                    custom.insert(hn, hv);
                }
                let _ = rustls::crypto::ring::default_provider().install_default();
                let mut default_headers = reqwest::header::HeaderMap::new();
                if let Some(a) = auth {
                    default_headers.insert(reqwest::header::AUTHORIZATION, a);
                }
                let client = reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(30))
                    .default_headers(default_headers)
                    .build()
                    .map_err(|e| ConnectError::Failed(e.to_string()))?;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
                config.custom_headers = custom;
                config.max_json_response_size = MAX_MESSAGE_BYTES;
                config.max_sse_event_size = MAX_MESSAGE_BYTES;
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
                let served = tokio::select! {
                    r = tokio::time::timeout(timeout, rmcp::serve_client(handler, transport)) => r,
                    _ = cancel.cancelled() => {
                        return Err(ConnectError::Failed("shut down while connecting".into()));
                    }
                };
                match served {
                    Ok(Ok(s)) => Ok(Self::finish(s, None, stderr, oversized, timeout)),
                    Ok(Err(e)) if e.is_authorization_required() => {
                        Err(ConnectError::NeedsAuth(sign_in_message(name)))
                    }
                    Ok(Err(e)) => Err(ConnectError::Failed(pi_ai::keys::redact(&e.to_string()))),
                    Err(_) => Err(ConnectError::Failed(format!(
                        "no answer to initialize within {} s",
                        cfg.timeout
                    ))),
                }
            }
        }
    }

    fn finish(
        service: RunningService<RoleClient, Handler>,
        child: Option<Child>,
        stderr: Arc<StderrTail>,
        oversized: Arc<std::sync::atomic::AtomicBool>,
        timeout: Duration,
    ) -> Connection {
        let info = service.peer().peer_info();
        // The watcher owns the process: when it exits on its own (children that inherited its
        // stdout would keep the pipe open), the connection ends at once and the group is
        // stopped; when told to stop, it ends the process as the module docs say.
        let child = child.map(|mut c| {
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
            let ct = service.cancellation_token();
            tokio::spawn(async move {
                tokio::select! {
                    _ = c.child.wait() => {
                        ct.cancel();
                        c.terminate_tree();
                        tokio::time::sleep(TERM_GRACE).await;
                        c.kill_tree();
                        untrack_group(c.tree.as_ref());
                    }
                    _ = stop_rx => {
                        ct.cancel();
                        terminate(c, false).await;
                    }
                }
                let _ = done_tx.send(());
            });
            (stop_tx, done_rx)
        });
        let instructions = info.as_ref().and_then(|i| i.instructions.clone());
        let caps = info.as_ref().map(|i| i.capabilities.clone());
        Connection {
            has_resources: caps.as_ref().is_some_and(|c| c.resources.is_some()),
            has_tools: caps.as_ref().is_none_or(|c| c.tools.is_some()),
            service,
            child: parking_lot::Mutex::new(child),
            stderr,
            oversized,
            timeout,
            instructions,
        }
    }

    /// Whether the connection is gone (the process exited, the transport closed).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// Why the connection is gone, for the server's error.
    pub fn closed_reason(&self) -> String {
        let mut why = if self.oversized.load(std::sync::atomic::Ordering::SeqCst) {
            format!("MCP stdio message exceeds {MAX_MESSAGE_BYTES} bytes")
        } else {
            "Connection closed".to_string()
        };
        let t = self.stderr.tail();
        if !t.is_empty() {
            why.push('\n');
            why.push_str(&t);
        }
        why
    }

    /// Every tool of the server (`tools/list`, all pages), as JSON.
    pub async fn list_tools(&self) -> Result<Vec<Value>, String> {
        let list = tokio::time::timeout(self.timeout, self.service.peer().list_all_tools())
            .await
            .map_err(|_| "tools/list timed out".to_string())?
            .map_err(|e| e.to_string())?;
        Ok(list
            .iter()
            .filter_map(|t| serde_json::to_value(t).ok())
            .collect())
    }

    /// Sends one request (as JSON `{method, params}`) with the server's timeout, reset by
    /// progress; `cancel` sends `notifications/cancelled` and ends the wait. The result as JSON.
    pub async fn request(
        &self,
        request: ClientRequest,
        cancel: &CancellationToken,
    ) -> Result<Value, String> {
        let peer = self.service.peer();
        let options = PeerRequestOptions::with_timeout(self.timeout).reset_timeout_on_progress();
        let handle = peer
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| self.error_text(&e))?;
        let id = handle.id.clone();
        let answer = tokio::select! {
            r = handle.await_response() => r,
            _ = cancel.cancelled() => {
                let n = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id),
                    Some("The user aborted the call".into()),
                ));
                let _ = tokio::time::timeout(Duration::from_secs(1), peer.send_notification(n.into())).await;
                return Err(crate::agent::ABORTED_TEXT.to_string());
            }
        };
        match answer {
            Ok(ServerResult::CallToolResult(r)) => {
                serde_json::to_value(&r).map_err(|e| e.to_string())
            }
            Ok(other) => serde_json::to_value(&other).map_err(|e| e.to_string()),
            Err(e) => Err(self.error_text(&e)),
        }
    }

    fn error_text(&self, e: &rmcp::ServiceError) -> String {
        match e {
            rmcp::ServiceError::Timeout { timeout } => {
                format!("{TIMED_OUT} {} s without progress", timeout.as_secs_f64())
            }
            rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_) => {
                if e.auth_challenge().is_some() {
                    return "sign-in is not supported yet".into();
                }
                self.closed_reason()
            }
            other => pi_ai::keys::redact(&other.to_string()),
        }
    }

    /// `tools/call` of `tool` with `args`.
    pub async fn call_tool(
        &self,
        tool: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<Value, String> {
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = args.as_object().cloned();
        let req = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        self.request(req, cancel).await
    }

    /// Closes the connection: the transport, then (stdio) the process group as the module
    /// docs say.
    pub async fn close(&self) {
        let child = self.child.lock().take();
        let ct = self.service.cancellation_token();
        ct.cancel();
        if let Some((stop, done)) = child {
            let _ = stop.send(());
            let _ = done.await;
        }
    }
}

/// Ends a stdio server: stdin closed (already, when the transport was dropped), SIGTERM to its
/// group after [`STDIN_CLOSE_GRACE`] (at once when `now`), SIGKILL [`TERM_GRACE`] later, and the
/// group once more after it exited (children that outlived it).
async fn terminate(mut c: Child, now: bool) {
    drop(c.child.stdin.take());
    if !now {
        if let Ok(Ok(_)) = tokio::time::timeout(STDIN_CLOSE_GRACE, c.child.wait()).await {
            c.terminate_tree();
            untrack_group(c.tree.as_ref());
            return;
        }
    }
    c.terminate_tree();
    if tokio::time::timeout(TERM_GRACE, c.child.wait())
        .await
        .is_err()
    {
        c.kill_tree();
        let _ = c.child.kill().await;
    }
    c.kill_tree();
    untrack_group(c.tree.as_ref());
}

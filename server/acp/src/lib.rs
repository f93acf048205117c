//! `pi-lsp acp`: the Pi harness as an Agent Client Protocol (v1) agent over stdio — the
//! same [`pi_core::harness::AgentSession`] the LSP edge drives, behind ACP's requests
//! (docs/acp.md).
//!
//! - [`rpc`]: newline-delimited JSON-RPC framing, the outgoing queue, client requests;
//! - [`agent`]: the methods (`initialize`, `session/*`, `_session/steering`);
//! - [`updates`]: events → `session/update`; [`tools`]: tool calls' kind, title, locations,
//!   diffs; [`ask`]: `session/request_permission`; [`client_fs`]: `fs/*` through the client;
//!   [`terminal`]: bash through the client's terminal (`terminal/*`, our sandbox launcher);
//! - [`setup`]: the ACP parts of the sessions of a folder set (opened through `pi_core::harness::Sessions`).

pub mod agent;
pub mod ask;
pub mod client_fs;
pub mod rpc;
pub mod setup;
pub mod terminal;
pub mod tools;
pub mod updates;

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

pub use agent::{AcpAgent, AcpOptions};
use rpc::{codes, Conn, Line, RpcError};

/// Serves ACP on `input` / `output` until the input ends (the client has gone) or `stop`
/// resolves; then aborts every run, lets it write its aborted results, and releases every
/// session file. Returns when the last message has been written.
pub async fn serve<R, W>(
    input: R,
    output: W,
    opts: AcpOptions,
    stop: impl std::future::Future<Output = ()>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (conn, writer) = Conn::new(output);
    let agent = Arc::new(AcpAgent::new(conn.clone(), opts));
    let (tx, mut rx) = mpsc::channel(64);
    let reader = tokio::spawn(rpc::read_lines(input, tx));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            line = rx.recv() => match line {
                Some(l) => on_line(&agent, &conn, l),
                None => break,
            },
            _ = &mut stop => break,
        }
    }
    tracing::info!("the client has gone: stopping every run");
    conn.gone.cancel();
    agent.stop_all().await;
    reader.abort();
    drop(agent);
    drop(conn);
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), writer).await;
}

fn on_line(agent: &Arc<AcpAgent>, conn: &Arc<Conn>, line: Line) {
    let bytes = match line {
        Line::TooLong(n) => {
            return conn.respond(
                Value::Null,
                Err(RpcError::new(
                    codes::INVALID_REQUEST,
                    format!(
                        "a line of {n} bytes is longer than the {} byte limit; it was skipped",
                        rpc::MAX_LINE
                    ),
                )),
            )
        }
        Line::Text(b) => b,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let msg: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return conn.respond(
                Value::Null,
                Err(RpcError::new(
                    codes::PARSE_ERROR,
                    format!("parse error: {e}"),
                )),
            )
        }
    };
    let Value::Object(mut obj) = msg else {
        return conn.respond(
            Value::Null,
            Err(RpcError::new(
                codes::INVALID_REQUEST,
                "a JSON-RPC message must be an object",
            )),
        );
    };
    let id = obj.remove("id");
    let valid_id = matches!(
        id,
        None | Some(Value::Null | Value::String(_) | Value::Number(_))
    );
    let method = obj.get("method").cloned();
    let params = obj.remove("params").unwrap_or(Value::Null);
    match (method, id) {
        (Some(Value::String(m)), Some(id)) if valid_id => {
            if m == "session/prompt" {
                let ticket = agent.ticket(&params);
                tokio::spawn(agent.clone().prompt(id, params, ticket));
            } else {
                let agent = agent.clone();
                let conn = conn.clone();
                tokio::spawn(async move {
                    let r = agent.request(&m, params.clone()).await;
                    let opened = match (&r, m.as_str()) {
                        (Ok(v), "session/new") => v["sessionId"].as_str().map(str::to_string),
                        (Ok(_), "session/load" | "session/resume") => {
                            params["sessionId"].as_str().map(str::to_string)
                        }
                        _ => None,
                    };
                    conn.respond(id, r);
                    // After the answer: the client knows the session by then.
                    if let Some(sid) = opened {
                        agent.announce(&sid);
                    }
                });
            }
        }
        (Some(Value::String(m)), None) => agent.notification(&m, params),
        (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
            obj.insert("id".into(), id);
            if !conn.on_response(&Value::Object(obj)) {
                tracing::warn!("a response to no request of ours");
            }
        }
        (m, id) => {
            let id = id.filter(|_| valid_id).unwrap_or(Value::Null);
            let why = match m {
                _ if !valid_id => "id: expected a string, a number or null",
                Some(_) => "method: expected a string",
                None => "not a request, a notification or a response (no method)",
            };
            conn.respond(
                id,
                Err(RpcError::new(
                    codes::INVALID_REQUEST,
                    format!("invalid request: {why}"),
                )),
            );
        }
    }
}

/// `pi-lsp acp` on stdin / stdout until stdin ends or SIGTERM / SIGINT / SIGHUP (Windows:
/// Ctrl-C, Ctrl-Break, console close, log-off, shutdown: `pi_core::platform::signals`);
/// returns the exit code (0; 128 + n for signal n).
pub async fn serve_stdio(opts: AcpOptions) -> i32 {
    let code = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let c = code.clone();
    let mut signals = pi_core::platform::signals::Signals::listen();
    let stop = async move {
        let n = signals.next().await;
        c.store(128 + n, std::sync::atomic::Ordering::SeqCst);
    };
    serve(tokio::io::stdin(), tokio::io::stdout(), opts, stop).await;
    let _ = json!(null);
    code.load(std::sync::atomic::Ordering::SeqCst)
}

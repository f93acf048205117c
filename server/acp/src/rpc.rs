//! JSON-RPC 2.0 over newline-delimited JSON (ACP's stdio transport): one message per line,
//! LF-split (a CR before the LF is dropped), UTF-8. [`read_lines`] frames the input with a
//! bound on a line's length ([`MAX_LINE`]: a longer line is skipped without being kept and
//! answered with an error), [`Conn`] writes every outgoing message through one ordered
//! queue and keeps the agent → client requests waiting for their answers.
//!
//! Error codes are JSON-RPC's: -32700 parse error, -32600 invalid request, -32601 method not
//! found, -32602 invalid params (the message names the field), -32603 internal error; ACP's
//! -32002 resource not found for an unknown session.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The longest line read (bytes, newline excluded): 64 MiB, room for a prompt with several
/// large images in base64. A longer line is read through and dropped, never held whole, and
/// answered with [`codes::INVALID_REQUEST`].
pub const MAX_LINE: usize = 64 << 20;

/// JSON-RPC and ACP error codes.
pub mod codes {
    /// Not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// JSON, but not a JSON-RPC request (or a line over [`super::MAX_LINE`]).
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Params of the wrong shape; the message names the field.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The agent failed (the message says how).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// ACP: authentication required (no model configured and none chosen).
    pub const AUTH_REQUIRED: i64 = -32000;
    /// ACP: a resource (a session) does not exist.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `code` and `message`.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// -32602 naming what is wrong.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(codes::INVALID_PARAMS, message)
    }

    /// -32603.
    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(codes::INTERNAL_ERROR, message)
    }

    /// This error with `data`.
    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

/// Parses `params` as `T`; a mismatch is -32602 naming the field's path (`prompt[0].text:
/// invalid type: integer, expected a string`). Missing params read as `{}`.
pub fn parse_params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            RpcError::invalid_params(format!("params: {inner}"))
        } else {
            RpcError::invalid_params(format!("{path}: {inner}"))
        }
    })
}

/// Appends the notification `method` with `params` to `out` as one line (serialized straight
/// into it, without an intermediate `Value`); false (and `out` as it was) when `params` cannot
/// be serialized (logged).
pub fn push_notification(out: &mut String, method: &str, params: &impl Serialize) -> bool {
    let start = out.len();
    let mut buf = std::mem::take(out).into_bytes();
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    let ok = serde_json::to_writer(&mut buf, method).is_ok() && {
        buf.extend_from_slice(b",\"params\":");
        serde_json::to_writer(&mut buf, params).is_ok()
    };
    if ok {
        buf.extend_from_slice(b"}\n");
    } else {
        tracing::error!("cannot serialize an outgoing {method} notification");
        buf.truncate(start);
    }
    // Only JSON text (UTF-8) was appended to a String's bytes.
    *out = String::from_utf8(buf).unwrap_or_default();
    ok
}

/// One line of input.
#[derive(Debug)]
pub enum Line {
    /// A line of at most [`MAX_LINE`] bytes (without its line end).
    Text(Vec<u8>),
    /// A line longer than [`MAX_LINE`]: its length; its bytes were not kept.
    TooLong(usize),
}

/// Reads `input` line by line into `tx` until its end (or a read error); a line holds at most
/// [`MAX_LINE`] bytes in memory. Returns when the input ended.
pub async fn read_lines<R: AsyncRead + Unpin>(input: R, tx: mpsc::Sender<Line>) {
    let mut r = BufReader::with_capacity(64 * 1024, input);
    let mut line: Vec<u8> = Vec::new();
    let mut skipped: Option<usize> = None;
    loop {
        let (done, used) = match r.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => match memchr(buf) {
                Some(i) => {
                    take(&mut line, &mut skipped, &buf[..i]);
                    (true, i + 1)
                }
                None => {
                    take(&mut line, &mut skipped, buf);
                    (false, buf.len())
                }
            },
        };
        r.consume(used);
        if done {
            let out = match skipped.take() {
                Some(n) => Line::TooLong(n),
                None => {
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    Line::Text(std::mem::take(&mut line))
                }
            };
            // A huge buffer is not kept for the next line.
            if tx.send(out).await.is_err() {
                return;
            }
        }
    }
    if let Some(n) = skipped {
        let _ = tx.send(Line::TooLong(n)).await;
    } else if !line.iter().all(u8::is_ascii_whitespace) {
        let _ = tx.send(Line::Text(line)).await;
    }
}

fn memchr(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

fn take(line: &mut Vec<u8>, skipped: &mut Option<usize>, part: &[u8]) {
    if let Some(n) = skipped {
        *n += part.len();
        return;
    }
    if line.len() + part.len() > MAX_LINE {
        *skipped = Some(line.len() + part.len());
        *line = Vec::new();
        return;
    }
    line.extend_from_slice(part);
}

/// The connection's outgoing side: every message goes through one queue to one writer task
/// (so frames never interleave), and agent → client requests wait for their answers here.
pub struct Conn {
    out: mpsc::UnboundedSender<String>,
    next_id: AtomicI64,
    pending: Mutex<HashMap<i64, oneshot::Sender<Result<Value, RpcError>>>>,
    /// Cancelled when the client has gone (its input ended): requests waiting fail at once.
    pub gone: CancellationToken,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").finish_non_exhaustive()
    }
}

impl Conn {
    /// A connection writing to `output`; returns it and the writer task's handle (it ends
    /// when every [`Conn`] is dropped, after writing what was queued).
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(
        output: W,
    ) -> (std::sync::Arc<Conn>, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let writer = tokio::spawn(async move {
            let mut w = tokio::io::BufWriter::with_capacity(64 * 1024, output);
            while let Some(first) = rx.recv().await {
                let mut ok = w.write_all(first.as_bytes()).await.is_ok();
                // Whatever else is queued goes in the same write.
                while ok {
                    match rx.try_recv() {
                        Ok(more) => ok = w.write_all(more.as_bytes()).await.is_ok(),
                        Err(_) => break,
                    }
                }
                if !ok || w.flush().await.is_err() {
                    tracing::warn!("stdout closed: the client is gone");
                    return;
                }
            }
        });
        let conn = std::sync::Arc::new(Conn {
            out: tx,
            next_id: AtomicI64::new(0),
            pending: Mutex::new(HashMap::new()),
            gone: CancellationToken::new(),
        });
        (conn, writer)
    }

    /// Queues one message (serialized on one line).
    pub fn send(&self, message: &Value) {
        match serde_json::to_string(message) {
            Ok(mut s) => {
                s.push('\n');
                let _ = self.out.send(s);
            }
            Err(e) => tracing::error!("cannot serialize an outgoing message: {e}"),
        }
    }

    /// Sends the notification `method` with `params`.
    pub fn notify(&self, method: &str, params: impl Serialize) {
        let mut line = String::new();
        if push_notification(&mut line, method, &params) {
            let _ = self.out.send(line);
        }
    }

    /// Queues `lines` (whole messages, each ending in a newline) as one write: a replay's
    /// thousands of updates go out in a few writes instead of one queue entry each.
    pub fn send_lines(&self, lines: String) {
        if !lines.is_empty() {
            let _ = self.out.send(lines);
        }
    }

    /// Answers the request `id`.
    pub fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let msg = match result {
            Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
        };
        self.send(&msg);
    }

    /// Sends the request `method` to the client and waits for its answer; fails at once when
    /// the client has gone. Dropping the future forgets the request (its late answer is
    /// ignored).
    pub async fn request(&self, method: &str, params: impl Serialize) -> Result<Value, RpcError> {
        if self.gone.is_cancelled() {
            return Err(RpcError::internal("the client has gone"));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        struct Forget<'a>(&'a Conn, i64);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.pending.lock().remove(&self.1);
            }
        }
        let _forget = Forget(self, id);
        let params = serde_json::to_value(params).unwrap_or(Value::Null);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        tokio::select! {
            r = rx => r.unwrap_or_else(|_| Err(RpcError::internal("the request was dropped"))),
            _ = self.gone.cancelled() => Err(RpcError::internal("the client has gone")),
        }
    }

    /// Routes a response from the client to its waiting request; false when no request of
    /// ours has that id.
    pub fn on_response(&self, msg: &Value) -> bool {
        let Some(id) = msg.get("id").and_then(Value::as_i64) else {
            return false;
        };
        let Some(tx) = self.pending.lock().remove(&id) else {
            return false;
        };
        let result = match msg.get("error") {
            Some(e) if !e.is_null() => Err(RpcError {
                code: e["code"].as_i64().unwrap_or(codes::INTERNAL_ERROR),
                message: e["message"].as_str().unwrap_or("error").to_string(),
                data: e.get("data").cloned(),
            }),
            _ => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
        };
        let _ = tx.send(result);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &'static [u8]) -> Vec<String> {
        let (tx, mut rx) = mpsc::channel(16);
        tokio::spawn(read_lines(input, tx));
        let mut out = Vec::new();
        while let Some(l) = rx.recv().await {
            out.push(match l {
                Line::Text(t) => String::from_utf8(t).unwrap(),
                Line::TooLong(n) => format!("<{n}>"),
            });
        }
        out
    }

    #[tokio::test]
    async fn lines_split_on_lf_and_drop_a_cr() {
        assert_eq!(
            lines(b"{\"a\":1}\r\n{\"b\":2}\n\nlast").await,
            vec!["{\"a\":1}", "{\"b\":2}", "", "last"]
        );
    }

    #[test]
    fn params_errors_name_the_field() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct P {
            a: Vec<Q>,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Q {
            text: String,
        }
        let e = parse_params::<P>(json!({"a": [{"text": 1}]})).unwrap_err();
        assert_eq!(e.code, codes::INVALID_PARAMS);
        assert_eq!(
            e.message,
            "a[0].text: invalid type: integer `1`, expected a string"
        );
    }
}

//! A guard in front of the LSP transport's input.
//!
//! `tower-lsp-server` 0.23 decodes frames with `tokio-util`'s `FramedRead`, which ends the whole
//! input stream after the first decode error: one frame whose body is not JSON would silently
//! stop the server. This guard re-frames stdin, passes valid frames through unchanged, and
//! replaces a body that is not a JSON object or array with a request for the internal method
//! [`PARSE_ERROR_METHOD`] with `id: null`, which the server answers with a JSON-RPC Parse error
//! (-32700, `id: null`, as JSON-RPC 2.0 §5.1 prescribes). Bytes that are not a frame at all are
//! skipped up to the next `Content-Length` header. A body that is JSON but not a JSON-RPC 2.0
//! message (no `"jsonrpc": "2.0"`, no `method` and no `result`/`error`, a batch array, which LSP
//! does not use) would also end the transport's stream: it becomes a request for
//! [`INVALID_REQUEST_METHOD`] carrying the message's own `id` (or `null`), answered with
//! Invalid Request (-32600).

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};

/// Internal method that answers with a Parse error.
pub const PARSE_ERROR_METHOD: &str = "agent/_parseError";

/// Internal method that answers with an Invalid Request error.
pub const INVALID_REQUEST_METHOD: &str = "agent/_invalidRequest";

/// Largest accepted frame body, in bytes (64 MiB); larger frames are answered with a Parse error
/// and skipped.
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

fn substitute(reason: &str) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": null, "method": PARSE_ERROR_METHOD, "params": {"message": reason}})
        .to_string()
        .into_bytes()
}

/// Why `v` is not a JSON-RPC 2.0 message the transport can take, or `None` when it is one.
fn invalid_message(v: &Value) -> Option<&'static str> {
    let Value::Object(o) = v else {
        return Some("a batch (JSON array) is not supported; send one message per frame");
    };
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some("\"jsonrpc\" must be \"2.0\"");
    }
    // The transport's ids are i64 or strings: a fraction, an exponent or a number past
    // i64 would fail its decoding and end the stream like a bad body.
    let id_ok = o
        .get("id")
        .is_none_or(|id| id.is_null() || id.is_i64() || id.is_string());
    if !id_ok {
        return Some("\"id\" must be an integer, a string or null");
    }
    match o.get("method") {
        Some(Value::String(_)) => match o.get("params") {
            None | Some(Value::Object(_)) | Some(Value::Array(_)) | Some(Value::Null) => None,
            Some(_) => Some("\"params\" must be an object or an array"),
        },
        Some(_) => Some("\"method\" must be a string"),
        None if o.contains_key("id") && (o.contains_key("result") || o.contains_key("error")) => {
            None
        }
        None => Some("a request needs a \"method\""),
    }
}

fn substitute_invalid(v: &Value, reason: &str) -> Vec<u8> {
    let id = match v.get("id") {
        Some(id) if id.is_i64() || id.is_string() => id.clone(),
        _ => Value::Null,
    };
    json!({"jsonrpc": "2.0", "id": id, "method": INVALID_REQUEST_METHOD, "params": {"message": reason}})
        .to_string()
        .into_bytes()
}

/// An `agent/*` request without `params` (JSON-RPC and LSP let a client leave them out, as
/// `vscode-jsonrpc`'s `sendRequest(method)` does) gets `"params": {}`: the transport refuses
/// a missing `params` before the method sees it, so `agent/session/list` and the other
/// methods whose params are all optional would be unreachable. `None`: pass the frame as it
/// is.
fn with_empty_params(v: &Value) -> Option<Vec<u8>> {
    let o = v.as_object()?;
    let agent = o
        .get("method")
        .and_then(Value::as_str)
        .is_some_and(|m| m.starts_with("agent/"));
    if !agent || !o.contains_key("id") || o.contains_key("params") {
        return None;
    }
    let mut o = o.clone();
    o.insert("params".into(), Value::Object(Default::default()));
    serde_json::to_vec(&o).ok()
}

async fn forward<R: AsyncRead + Unpin>(input: R, mut out: DuplexStream) -> std::io::Result<()> {
    let mut r = BufReader::new(input);
    loop {
        // Headers: lines until an empty one.
        let mut content_len: Option<usize> = None;
        let mut saw_header = false;
        loop {
            let mut line = Vec::new();
            if r.read_until(b'\n', &mut line).await? == 0 {
                return Ok(());
            }
            let text = String::from_utf8_lossy(&line);
            let mut t = text.trim_end_matches(['\r', '\n']);
            // Leftover bytes of a frame that had no Content-Length can precede the next header
            // on the same line: start at the header.
            if let Some(i) = t
                .to_ascii_lowercase()
                .find("content-length:")
                .filter(|i| *i > 0)
            {
                t = &t[i..];
                saw_header = true;
            }
            if t.is_empty() {
                if saw_header {
                    break;
                }
                continue;
            }
            saw_header = true;
            if let Some((k, v)) = t.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    content_len = v.trim().parse().ok();
                }
            }
        }
        let Some(len) = content_len else {
            tracing::warn!("skipping a frame without a valid Content-Length");
            continue;
        };
        let body = if len > MAX_FRAME {
            let mut sink = (&mut r).take(len as u64);
            tokio::io::copy(&mut sink, &mut tokio::io::sink()).await?;
            substitute(&format!(
                "frame of {len} bytes exceeds the {MAX_FRAME}-byte limit"
            ))
        } else {
            let mut body = vec![0u8; len];
            r.read_exact(&mut body).await?;
            match serde_json::from_slice::<Value>(&body) {
                Ok(v @ (Value::Object(_) | Value::Array(_))) => match invalid_message(&v) {
                    None => with_empty_params(&v).unwrap_or(body),
                    Some(reason) => substitute_invalid(&v, reason),
                },
                Ok(_) => substitute("the message is not a JSON object"),
                Err(e) => substitute(&format!("invalid JSON: {e}")),
            }
        };
        out.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
            .await?;
        out.write_all(&body).await?;
        out.flush().await?;
    }
}

/// Returns a reader of guarded frames read from `input` (a task does the copying).
pub fn guard_input<R: AsyncRead + Unpin + Send + 'static>(input: R) -> DuplexStream {
    let (reader, writer) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Err(e) = forward(input, writer).await {
            tracing::error!("reading the client's messages failed: {e}");
        }
    });
    reader
}

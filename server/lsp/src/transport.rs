//! A guard in front of the LSP transport.
//!
//! `tower-lsp-server` 0.23 decodes frames with `tokio-util`'s `FramedRead`, which ends the whole
//! input stream after the first decode error: one frame whose body is not JSON would silently
//! stop the server. This guard re-frames stdin and passes valid frames through unchanged (a
//! body with a lone UTF-16 surrogate escape such as `"\ud83d"`, what a JavaScript client
//! writes for a string cut inside an emoji, or invalid UTF-8 is passed on decoded lossily,
//! U+FFFD). Every other frame is answered by the guard itself, written between the server's
//! frames ([`guard`]), with a JSON-RPC error under the message's own `id` whenever the bytes
//! name one, else `id: null` (JSON-RPC 2.0 §5.1):
//! - a body that is not JSON: Parse error (-32700); the `id` is read from the members before
//!   the break, so a body cut by a too-short `Content-Length` is still answered under its id;
//! - JSON that is not a JSON-RPC 2.0 message (no `"jsonrpc": "2.0"`, no `method` and no
//!   `result`/`error`, a batch array, which LSP does not use): Invalid Request (-32600);
//! - framing faults, Invalid Request unless said otherwise: no or a bad `Content-Length` (the
//!   JSON object after the headers is the message), a `Content-Length` past [`MAX_FRAME`] (not
//!   waited for: the id is read from what arrived, reading resumes at the next header), a length
//!   longer than the message (it stalls for [`BODY_STALL`], or takes in the next frame's
//!   header), a header line over [`MAX_HEADER_LINE`] or more than [`MAX_HEADER_LINES`] lines
//!   (Parse error; the line is dropped as it arrives, never held).
//!
//! Bytes that are not a frame at all are skipped up to the next `Content-Length` header. The
//! guard's answers never go through the server, so a burst of `id: null` errors cannot collide
//! in the server's table of pending requests.
//!
//! Frames the server's events make (`agent/event`, `agent/delta`) are written outside the LSP
//! library's output buffer ([`Outside`]): `tower-lsp-server` encodes every frame into one
//! `BytesMut` that keeps the capacity of the largest frame it ever held (16 MiB after an 8 MB
//! message, for the connection's life), and builds a `serde_json::Value` of each notification
//! before its text. Such a frame is serialised once, straight to its bytes, and kept here; the
//! library carries only a small placeholder notification ([`OUTSIDE_METHOD`]) in its place, and
//! the guard's writer puts the frame's bytes where the placeholder was, so the order of every
//! frame is the order the server sent them in, and the frame's memory goes when it is written.
//! That writer is the library's own output ([`Output`]): the task that encodes the library's
//! frames writes them to stdout, with no second task or in-memory pipe between.
//!
//! [`stdio`] (the platform module's: `crate::platform::stdio`) gives the server's stdin and
//! stdout as non-blocking pipe (or Unix socket) I/O driven by the runtime's reactor when they
//! are pipes or sockets on Unix, so a message costs no hand-off to a blocking thread in either
//! direction; other kinds of stdio (a terminal, a regular file) and other OSes keep tokio's
//! blocking-thread stdio.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tower_lsp_server::ls_types::notification::Notification;

pub use crate::platform::stdio::{stdio, Restore, StdinReader, StdoutWriter};

/// Largest accepted frame body, in bytes (64 MiB); a larger declared `Content-Length` is
/// answered with Invalid Request at once and skipped.
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

/// The method of the placeholder notification that stands, in the LSP library's output, for a
/// frame kept in [`Outside`]; its params are `[slot]`. Never reaches the client.
pub(crate) const OUTSIDE_METHOD: &str = "$/pi-lsp/outside";

/// The placeholder notification (see [`OUTSIDE_METHOD`]).
enum OutsideNotification {}

impl Notification for OutsideNotification {
    type Params = [u64; 1];
    const METHOD: &'static str = OUTSIDE_METHOD;
}

/// Frames written outside the LSP library's output buffer (see the module doc), by slot, from
/// [`Outside::send`] until the guard's writer writes them. Inactive (every frame goes through
/// the library as usual) until a guard writes this connection's output ([`guard`]).
#[derive(Debug, Default)]
pub struct Outside {
    active: std::sync::atomic::AtomicBool,
    next: std::sync::atomic::AtomicU64,
    /// The kept frames by slot, in the order they were kept: the guard's writer takes them
    /// in nearly that order (placeholders of two sessions may cross), so a take looks from the
    /// front and finds its slot first or close to it.
    frames: parking_lot::Mutex<std::collections::VecDeque<(u64, Vec<u8>)>>,
}

impl Outside {
    /// Sends notification `N` with `params` to the client: serialised once into its frame and
    /// written by the guard in the order of the library's frames, or through the library
    /// (`client`) when no guard writes the output. A value that cannot be serialised is logged
    /// and not sent (as the library does).
    pub(crate) async fn send<N: Notification>(
        &self,
        client: &tower_lsp_server::Client,
        params: N::Params,
    ) {
        if !self.active.load(std::sync::atomic::Ordering::Acquire) {
            return client.send_notification::<N>(params).await;
        }
        let Some(frame) = notification_frame(N::METHOD, &params) else {
            return;
        };
        let slot = self.keep(frame);
        client
            .send_notification::<OutsideNotification>([slot])
            .await;
    }

    /// Whether a guard writes this connection's output (frames given to
    /// [`Outside::send_frame`] reach the client only then).
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sends `frame`, a whole notification frame (header and body), in the order of the
    /// library's frames. Only while [`Outside::is_active`]: the library cannot send bytes.
    pub(crate) async fn send_frame(&self, client: &tower_lsp_server::Client, frame: Vec<u8>) {
        let slot = self.keep(frame);
        client
            .send_notification::<OutsideNotification>([slot])
            .await;
    }

    /// Keeps `frame` until its placeholder is written; returns its slot.
    fn keep(&self, frame: Vec<u8>) -> u64 {
        let mut frames = self.frames.lock();
        // Numbered under the lock: the queue stays in slot order.
        let slot = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        frames.push_back((slot, frame));
        slot
    }

    /// The frame kept under `slot` (taken out).
    fn take(&self, slot: u64) -> Option<Vec<u8>> {
        let mut frames = self.frames.lock();
        let at = frames.iter().position(|(s, _)| *s == slot)?;
        let frame = frames.remove(at).map(|(_, frame)| frame);
        // The queue is not kept at the size of a burst.
        if frames.is_empty() && frames.capacity() > 64 {
            frames.shrink_to(0);
        }
        frame
    }

    /// The real frame for `frame` when it is a placeholder (`None` when it is not one; an
    /// empty frame when its slot is unknown, which cannot happen while the guard runs).
    /// `head`: the length of its header ([`frame_head`]).
    fn resolve(&self, frame: &[u8], head: usize) -> Option<Vec<u8>> {
        // Placeholders are small; a frame of any size is checked by its first bytes only.
        if frame.len() > 160 {
            return None;
        }
        let body = frame.get(head..)?;
        let slot = match placeholder_slot(body) {
            Some(slot) => slot,
            // Anything but the library's exact bytes is parsed (when it names the method).
            None => {
                memchr::memmem::find(body, OUTSIDE_METHOD.as_bytes())?;
                let v: Value = serde_json::from_slice(body).ok()?;
                if v.get("method").and_then(Value::as_str) != Some(OUTSIDE_METHOD) {
                    return None;
                }
                v.pointer("/params/0").and_then(Value::as_u64)?
            }
        };
        Some(self.take(slot).unwrap_or_else(|| {
            tracing::error!("frame {slot} to write is missing; skipped");
            Vec::new()
        }))
    }
}

/// The slot of a placeholder's `body` when it is exactly what the LSP library writes for one
/// (`{"jsonrpc":"2.0","method":"$/pi-lsp/outside","params":[N]}`: its `Request`'s fields in
/// that order, no spaces), read without parsing it into a `Value`; `None` for anything else
/// (which [`Outside::resolve`] then parses).
fn placeholder_slot(body: &[u8]) -> Option<u64> {
    const HEAD: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"$/pi-lsp/outside\",\"params\":[";
    let digits = body.strip_prefix(HEAD)?.strip_suffix(b"]}")?;
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The whole frame (header and body) of notification `method` with `params`, serialised
/// straight to bytes (no `Value` in between); `None` (logged) when `params` cannot be
/// serialised.
pub(crate) fn notification_frame<P: serde::Serialize>(method: &str, params: &P) -> Option<Vec<u8>> {
    notification_frame_with(method, |out| serde_json::to_writer(out, params))
}

/// The whole frame (header and body) of notification `method` whose params `write_params`
/// writes (one JSON value, as serde_json would serialise them: the frame is what
/// serialising `{"jsonrpc": "2.0", "method": method, "params": …}` gives); `None` (logged)
/// when `write_params` fails.
pub(crate) fn notification_frame_with(
    method: &str,
    write_params: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) -> Option<Vec<u8>> {
    frame_with(method, FRAME_CAPACITY, |out| {
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
        serde_json::to_writer(&mut *out, method)?;
        out.extend_from_slice(b",\"params\":");
        write_params(&mut *out)?;
        out.push(b'}');
        Ok(())
    })
}

/// The room a notification's frame is given at first, in bytes (header included): what a tool
/// round's events other than whole messages and its `agent/usage` take (frames of 200 to 420
/// bytes), so their bytes are written without growing the buffer (which costs a copy and a
/// `realloc` each time it doubles); a larger frame grows it as it is written.
pub(crate) const FRAME_CAPACITY: usize = 512;

/// Room for the `Content-Length` header in front of a body being written: the longest header
/// (`Content-Length: ` with 19 digits and the blank line) fits.
const HEADER_ROOM: usize = 40;

/// The whole frame (header and body) whose body `write_body` writes (a whole JSON-RPC
/// message), in a buffer of `capacity` bytes at first (more when it needs more); `None`
/// (logged, naming `method`) when `write_body` fails.
pub(crate) fn frame_with(
    method: &str,
    capacity: usize,
    write_body: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) -> Option<Vec<u8>> {
    // Room for the header first: the body is written after it, then the length put in front.
    let mut out = Vec::with_capacity(capacity.max(HEADER_ROOM + 64));
    out.resize(HEADER_ROOM, b' ');
    if let Err(e) = write_body(&mut out) {
        tracing::error!("{method} not sent: its params cannot be serialised: {e}");
        return None;
    }
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(out.len() - HEADER_ROOM).as_bytes();
    let start = HEADER_ROOM - (b"Content-Length: \r\n\r\n".len() + digits.len());
    let mut at = start;
    for part in [&b"Content-Length: "[..], digits, b"\r\n\r\n"] {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    out.drain(..start);
    Some(out)
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

/// Longest header line accepted, in bytes (LSP headers are a few dozen bytes).
pub const MAX_HEADER_LINE: usize = 8 * 1024;

/// Most header lines in one frame's header block.
pub const MAX_HEADER_LINES: usize = 32;

/// How long a frame's body may stall (no byte arriving) before the bytes already there are
/// checked for a complete message whose declared `Content-Length` was too long.
pub const BODY_STALL: Duration = Duration::from_millis(500);

/// Bytes of an unreadable body looked at for its request `id`.
const ID_PEEK: usize = 64 * 1024;

/// A JSON-RPC error response the guard writes itself (not through the server).
fn error_frame(id: &Value, code: i64, message: &str) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id})
        .to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// JSON-RPC 2.0 Parse error.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0 Invalid Request.
const INVALID_REQUEST: i64 = -32600;

/// The top-level `id` of a JSON-RPC message whose text is `bytes` (maybe cut or invalid
/// further on): the members are read in order until `id`, so a body that breaks after its id
/// still names it. Only integer and string ids count.
fn peek_id(bytes: &[u8]) -> Option<Value> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Find<'a>(&'a mut Option<Value>);
    impl<'de> Visitor<'de> for Find<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON-RPC message")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "id" {
                    let v: Value = map.next_value()?;
                    if v.is_i64() || v.is_string() {
                        *self.0 = Some(v);
                    }
                    return Err(serde::de::Error::custom("id found"));
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }
    let mut found = None;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(ID_PEEK)]);
    let _ = serde_json::Deserializer::from_str(&text).deserialize_map(Find(&mut found));
    found
}

/// Parses a frame body: strict JSON, else with lone UTF-16 surrogate escapes (a string cut
/// inside an emoji by a JavaScript client) and invalid UTF-8 read as U+FFFD. `Ok(Some(bytes))`
/// when the body had to be rewritten so the transport can decode it.
fn parse_body(body: &[u8]) -> Result<(Value, bool), serde_json::Error> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => Ok((v, false)),
        Err(e) => {
            let text = String::from_utf8_lossy(body);
            match pi_ai::json::parse_lossy(&text) {
                Ok(v) => Ok((v, true)),
                Err(_) => Err(e),
            }
        }
    }
}

/// The length of the first JSON value at the start of `bytes` (after whitespace), if `bytes`
/// holds a complete one.
fn first_value_len(bytes: &[u8]) -> Option<usize> {
    let mut it = serde_json::Deserializer::from_slice(bytes).into_iter::<serde::de::IgnoredAny>();
    match it.next() {
        Some(Ok(_)) => Some(it.byte_offset()),
        _ => None,
    }
}

/// The input side of the guard: the client's bytes, buffered, with the reads the framing needs.
struct Input<R> {
    r: R,
    buf: Vec<u8>,
    /// Start of the unread bytes in `buf`.
    pos: usize,
    eof: bool,
}

impl<R: AsyncRead + Unpin> Input<R> {
    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            // A large frame's buffer is not kept for the small ones after it.
            if self.buf.capacity() > 1 << 20 {
                self.buf.shrink_to(64 * 1024);
            }
        } else if self.pos > 64 * 1024 && self.pos * 2 > self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    /// Reads more bytes; `false` at the end of the input.
    async fn fill(&mut self) -> std::io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        let mut chunk = [0u8; 64 * 1024];
        let n = self.r.read(&mut chunk).await?;
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(true)
    }

    /// [`Input::fill`] that gives up after `stall`: `Ok(None)` when nothing came.
    async fn fill_within(&mut self, stall: Duration) -> std::io::Result<Option<bool>> {
        match tokio::time::timeout(stall, self.fill()).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The next line (without its `\n` / `\r\n`), or `Err(len)` when it is longer than
    /// [`MAX_HEADER_LINE`] (its bytes are dropped up to its end, never held); `Ok(None)` at the
    /// end of the input.
    async fn header_line(&mut self) -> std::io::Result<Option<Result<String, usize>>> {
        let mut dropped = 0usize;
        loop {
            if let Some(i) = memchr::memchr(b'\n', self.pending()) {
                if dropped > 0 || i > MAX_HEADER_LINE {
                    let cr = usize::from(i > 0 && self.pending()[i - 1] == b'\r');
                    self.consume(i + 1);
                    return Ok(Some(Err(dropped + i - cr)));
                }
                let line = String::from_utf8_lossy(&self.pending()[..i])
                    .trim_end_matches('\r')
                    .to_string();
                self.consume(i + 1);
                return Ok(Some(Ok(line)));
            }
            if self.pending().len() > MAX_HEADER_LINE {
                dropped += self.pending().len();
                let n = self.pending().len();
                self.consume(n);
            }
            if !self.fill().await? {
                return Ok(None);
            }
        }
    }
}

/// Why a frame could not be passed on, answered by the guard under `id`.
struct Refusal {
    id: Value,
    code: i64,
    message: String,
}

async fn forward<R: AsyncRead + Unpin>(
    input: R,
    mut out: DuplexStream,
    errors: mpsc::UnboundedSender<Vec<u8>>,
) -> std::io::Result<()> {
    let mut input = Input {
        r: input,
        buf: Vec::new(),
        pos: 0,
        eof: false,
    };
    let refuse = |r: Refusal| {
        tracing::warn!("refused a client frame: {}", r.message);
        let _ = errors.send(error_frame(&r.id, r.code, &r.message));
    };
    loop {
        // Headers: lines until an empty one, each and all bounded.
        let mut content_len: Option<Result<u64, String>> = None;
        let mut saw_header = false;
        let mut lines = 0usize;
        let mut bad_header: Option<String> = None;
        loop {
            let line = match input.header_line().await? {
                None => return Ok(()),
                Some(Ok(line)) => line,
                Some(Err(len)) => {
                    bad_header = Some(format!(
                        "a header line of {len} bytes exceeds the {MAX_HEADER_LINE}-byte limit"
                    ));
                    saw_header = true;
                    continue;
                }
            };
            let mut t = line.as_str();
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
            lines += 1;
            if lines > MAX_HEADER_LINES {
                bad_header.get_or_insert_with(|| {
                    format!("more than {MAX_HEADER_LINES} header lines in one frame")
                });
            }
            if let Some((k, v)) = t.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    let v = v.trim();
                    content_len = Some(
                        v.parse::<u64>()
                            .map_err(|_| format!("invalid Content-Length {v:.40}")),
                    );
                }
            }
        }
        if let Some(message) = bad_header {
            refuse(Refusal {
                id: Value::Null,
                code: PARSE_ERROR,
                message: format!("Parse error: {message}"),
            });
            continue;
        }
        let len = match content_len {
            Some(Ok(len)) => len,
            other => {
                // No usable length: a JSON object right after the headers is the message the
                // client meant; answer it under its id and go on after it.
                let why = match other {
                    Some(Err(e)) => e,
                    _ => "no Content-Length header".to_string(),
                };
                let id = unframed_message(&mut input).await?;
                refuse(Refusal {
                    id: id.unwrap_or(Value::Null),
                    code: INVALID_REQUEST,
                    message: format!("Invalid request: {why}"),
                });
                continue;
            }
        };
        if len > MAX_FRAME as u64 {
            // The body is not waited for (it may never come): its id is read from what is
            // there, and reading goes on at the next header.
            let _ = input.fill_within(BODY_STALL).await?;
            let id = peek_id(input.pending());
            refuse(Refusal {
                id: id.unwrap_or(Value::Null),
                code: INVALID_REQUEST,
                message: format!(
                    "Invalid request: frame of {len} bytes exceeds the {MAX_FRAME}-byte limit"
                ),
            });
            continue;
        }
        let len = len as usize;
        // The body. A body that stops growing short of its length may be a whole message
        // whose declared length was too long: then it is answered, not waited for forever.
        let mut stalled = false;
        while input.pending().len() < len {
            match input.fill_within(BODY_STALL).await? {
                Some(true) => {}
                Some(false) => break,
                None => {
                    if first_value_len(input.pending()).is_some() {
                        stalled = true;
                        break;
                    }
                }
            }
        }
        let have = input.pending().len();
        if have < len {
            // Too long a length (stalled, or the input ended): answer the message that is
            // there, continue after it.
            let at = first_value_len(input.pending());
            let id = peek_id(input.pending());
            if let Some(n) = at {
                input.consume(n);
            } else {
                input.consume(have);
            }
            if stalled || at.is_some() || id.is_some() {
                refuse(Refusal {
                    id: id.unwrap_or(Value::Null),
                    code: INVALID_REQUEST,
                    message: format!(
                        "Invalid request: Content-Length {len} but the message has {} bytes",
                        at.unwrap_or(have)
                    ),
                });
            }
            if input.eof && input.pending().is_empty() {
                return Ok(());
            }
            continue;
        }
        let body = input.pending()[..len].to_vec();
        let body = match parse_body(&body) {
            Ok((v @ Value::Object(_), rewritten)) => match invalid_message(&v) {
                None => match with_empty_params(&v) {
                    Some(b) => b,
                    None if rewritten => serde_json::to_vec(&v).unwrap_or(body),
                    None => body,
                },
                Some(reason) => {
                    input.consume(len);
                    refuse(Refusal {
                        id: id_of(&v),
                        code: INVALID_REQUEST,
                        message: format!("Invalid request: {reason}"),
                    });
                    continue;
                }
            },
            Ok((v @ Value::Array(_), _)) => {
                input.consume(len);
                refuse(Refusal {
                    id: Value::Null,
                    code: INVALID_REQUEST,
                    message: format!(
                        "Invalid request: {}",
                        invalid_message(&v).unwrap_or("a batch is not supported")
                    ),
                });
                continue;
            }
            Ok(_) => {
                input.consume(len);
                refuse(Refusal {
                    id: Value::Null,
                    code: PARSE_ERROR,
                    message: "Parse error: the message is not a JSON object".into(),
                });
                continue;
            }
            Err(e) => {
                // A length shorter than the message, or a longer one swallowing the next
                // frame: answer what can be tied to an id, resume at the next header.
                let first = first_value_len(&body);
                let id = peek_id(&body);
                match first {
                    Some(n) if body[n..].trim_ascii_start().starts_with(b"Content-Length") => {
                        // The length took in the next frame: answer this message, re-read the
                        // rest as input.
                        input.consume(n);
                        refuse(Refusal {
                            id: id.unwrap_or(Value::Null),
                            code: INVALID_REQUEST,
                            message: format!(
                                "Invalid request: Content-Length {len} but the message has {n} bytes"
                            ),
                        });
                    }
                    _ => {
                        input.consume(len);
                        refuse(Refusal {
                            id: id.unwrap_or(Value::Null),
                            code: PARSE_ERROR,
                            message: format!("Parse error: invalid JSON: {e}"),
                        });
                    }
                }
                continue;
            }
        };
        input.consume(len);
        out.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
            .await?;
        out.write_all(&body).await?;
        out.flush().await?;
    }
}

/// The `id` of a message, when it is one the transport can carry (integer or string).
fn id_of(v: &Value) -> Value {
    match v.get("id") {
        Some(id) if id.is_i64() || id.is_string() => id.clone(),
        _ => Value::Null,
    }
}

/// After a header block without a usable length: reads the JSON object that follows (bounded
/// by [`MAX_FRAME`], waiting at most [`BODY_STALL`] for each read) and returns its id; the
/// object's bytes are consumed. Anything else is left for the next header search.
async fn unframed_message<R: AsyncRead + Unpin>(
    input: &mut Input<R>,
) -> std::io::Result<Option<Value>> {
    loop {
        let p = input.pending();
        let start = p.iter().position(|b| !b.is_ascii_whitespace());
        match start {
            Some(s) if p[s] != b'{' => return Ok(None),
            Some(s) => {
                if let Some(n) = first_value_len(&p[s..]) {
                    let id = peek_id(&p[s..s + n]);
                    input.consume(s + n);
                    return Ok(id);
                }
                if p.len() > MAX_FRAME {
                    return Ok(peek_id(&p[s..]));
                }
            }
            None => {}
        }
        match input.fill_within(BODY_STALL).await? {
            Some(true) => {}
            _ => return Ok(start.and_then(|s| peek_id(&input.pending()[s..]))),
        }
    }
}

/// The server's output to the client (`out`, stdout): the LSP library writes its frames here,
/// as a byte stream, and they go to `out` from the same task, in the same order, with each
/// placeholder replaced by its kept frame ([`Outside`]) and the guard's own answers (`errors`)
/// put between two frames. No task of its own and no in-memory pipe: the frames the library
/// encodes at once go out in one write when it flushes (every time its queue runs dry), and a
/// run's event costs one hand-off (the run's task to the server's) instead of two.
///
/// Back-pressure: at most [`MAX_PENDING`] bytes wait for `out` before the library's writes
/// wait too. A frame longer than any placeholder passes straight through as its bytes come,
/// so a large answer is never held twice.
/// When the library lets go of the writer (the server stopped), what is still pending goes to
/// the task [`guard`] returns.
pub struct Output<W> {
    inner: Option<OutputInner<W>>,
    done: Option<tokio::sync::oneshot::Sender<OutputInner<W>>>,
}

/// What [`Output`] holds; handed to [`guard`]'s task when the library drops it.
struct OutputInner<W> {
    out: W,
    errors: mpsc::UnboundedReceiver<Vec<u8>>,
    errors_open: bool,
    outside: std::sync::Arc<Outside>,
    /// The library's bytes of a frame not yet whole: a header, or a small frame's body.
    partial: Vec<u8>,
    /// Bytes of the current large frame still to come, passed to `pending` as they arrive.
    through: usize,
    /// Bytes for `out` (whole frames, and the part of a large frame that arrived), from `at`.
    pending: Vec<u8>,
    at: usize,
    /// Where in `pending` the large frame still coming (`through` > 0) starts.
    open_from: usize,
}

/// The most bytes waiting for stdout before the LSP library's writes wait too (1 MiB).
const MAX_PENDING: usize = 1 << 20;

/// The largest body a placeholder has (`{"jsonrpc":"2.0","method":"$/pi-lsp/outside","params":[N]}`
/// with N of up to 20 digits, spaced or not): a frame whose body is longer is not one.
const PLACEHOLDER_MAX: usize = 120;

/// The capacity of the pending buffer kept after a write (more is let go).
const KEEP_CAPACITY: usize = 256 * 1024;

impl<W: AsyncWrite + Unpin> OutputInner<W> {
    /// Takes the library's bytes `buf` (any cut of its frames).
    fn take(&mut self, mut buf: &[u8]) {
        while !buf.is_empty() {
            if self.through > 0 {
                let n = self.through.min(buf.len());
                self.pending.extend_from_slice(&buf[..n]);
                self.through -= n;
                buf = &buf[n..];
                continue;
            }
            if self.partial.is_empty() {
                // At a frame's start: whole frames straight from `buf`.
                if let Some((head, len)) = frame_head(buf) {
                    if buf.len() >= head + len {
                        self.push_frame(&buf[..head + len], head);
                        buf = &buf[head + len..];
                        continue;
                    }
                }
            }
            // The rest of `buf` (not a whole frame) waits with the frame's start.
            self.partial.extend_from_slice(buf);
            buf = &[];
            self.settle_partial();
        }
    }

    /// Moves whole frames out of `partial`, and a large frame's start (its header known) on
    /// to `pending` (the rest of it then passes through).
    fn settle_partial(&mut self) {
        loop {
            let Some((head, len)) = frame_head(&self.partial) else {
                return;
            };
            if self.partial.len() >= head + len {
                let partial = std::mem::take(&mut self.partial);
                self.push_frame(&partial[..head + len], head);
                self.partial = partial;
                self.partial.drain(..head + len);
                if self.partial.is_empty() {
                    if self.partial.capacity() > KEEP_CAPACITY {
                        self.partial = Vec::new();
                    }
                    return;
                }
                continue;
            }
            if len > PLACEHOLDER_MAX {
                self.through = head + len - self.partial.len();
                self.open_from = self.pending.len();
                self.pending.extend_from_slice(&self.partial);
                self.partial.clear();
            }
            return;
        }
    }

    /// Queues the whole `frame` (its header `head` bytes long) for `out`: the kept frame when
    /// it is a placeholder.
    fn push_frame(&mut self, frame: &[u8], head: usize) {
        match self.outside.resolve(frame, head) {
            // A kept frame with nothing before it is written from its own buffer.
            Some(kept) if self.at == self.pending.len() => {
                self.pending = kept;
                self.at = 0;
            }
            Some(kept) => self.pending.extend_from_slice(&kept),
            None => self.pending.extend_from_slice(frame),
        }
    }

    /// At a frame boundary, the guard's answers that came in join the pending bytes (and
    /// `cx` is woken for the next).
    fn take_errors(&mut self, cx: &mut std::task::Context<'_>) {
        if self.through > 0 || !self.partial.is_empty() {
            return;
        }
        while self.errors_open {
            match self.errors.poll_recv(cx) {
                std::task::Poll::Ready(Some(frame)) => self.pending.extend_from_slice(&frame),
                std::task::Poll::Ready(None) => self.errors_open = false,
                std::task::Poll::Pending => break,
            }
        }
    }

    /// Writes the pending bytes to `out`.
    fn poll_drain(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        while self.at < self.pending.len() {
            let n = std::task::ready!(
                std::pin::Pin::new(&mut self.out).poll_write(cx, &self.pending[self.at..])
            )?;
            if n == 0 {
                return std::task::Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.at += n;
        }
        self.at = 0;
        self.open_from = 0;
        self.pending.clear();
        if self.pending.capacity() > KEEP_CAPACITY {
            self.pending = Vec::new();
        }
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_flush(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.take_errors(cx);
        std::task::ready!(self.poll_drain(cx))?;
        std::pin::Pin::new(&mut self.out).poll_flush(cx)
    }

    /// After the library let go: its last whole frames, then the guard's answers still queued.
    async fn finish(mut self) -> std::io::Result<()> {
        // A frame the library did not finish is left out (what of it was written stays).
        if self.through > 0 {
            self.pending.truncate(self.open_from.max(self.at));
            self.through = 0;
        }
        self.partial.clear();
        while let Ok(frame) = self.errors.try_recv() {
            self.pending.extend_from_slice(&frame);
        }
        std::future::poll_fn(|cx| self.poll_drain(cx)).await?;
        self.out.flush().await
    }
}

impl<W> Drop for Output<W> {
    fn drop(&mut self) {
        if let (Some(inner), Some(done)) = (self.inner.take(), self.done.take()) {
            let _ = done.send(inner);
        }
    }
}

impl<W: AsyncWrite + Unpin> Output<W> {
    fn inner(&mut self) -> std::io::Result<&mut OutputInner<W>> {
        self.inner
            .as_mut()
            .ok_or_else(|| std::io::ErrorKind::BrokenPipe.into())
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Output<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let inner = self.inner()?;
        if inner.pending.len() - inner.at >= MAX_PENDING {
            std::task::ready!(inner.poll_drain(cx))?;
        }
        inner.take(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.inner()?.poll_flush(cx)
    }

    /// Writes what is pending; `out` itself stays open (the process's stdout).
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.inner()?.poll_flush(cx)
    }
}

/// The start of a frame the library wrote: the length of its header (blank line included) and
/// its body's `Content-Length` (0 when the header names none), once the header is whole.
fn frame_head(buf: &[u8]) -> Option<(usize, usize)> {
    // The header the LSP library writes (and `notification_frame_with`): read in place.
    const LENGTH: &[u8] = b"Content-Length: ";
    if let Some(rest) = buf.strip_prefix(LENGTH) {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if (1..=19).contains(&digits) && rest[digits..].starts_with(b"\r\n\r\n") {
            let len = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
            return Some((LENGTH.len() + digits + 4, len));
        }
    }
    let end = memchr::memmem::find(buf, b"\r\n\r\n")? + 4;
    let len = std::str::from_utf8(&buf[..end])
        .ok()
        .and_then(|h| {
            h.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        })
        .unwrap_or(0);
    Some((end, len))
}

/// The guarded transport: returns the reader the LSP server reads its frames from, the writer
/// it writes its frames to ([`Output`]: straight to `output`), and a task that ends when
/// everything was written to `output` after the server let go of the writer (await it before
/// exiting). Frames the guard refuses are answered on `output` by the guard itself, between the
/// server's frames: a Parse error (-32700) or Invalid Request (-32600) under the message's own
/// `id` whenever the bytes name one (also for a body cut or swollen by a wrong
/// `Content-Length`), else `id: null`.
///
/// Frames kept in `outside` ([`Outside::send`]) are written in their placeholders' places; from
/// this call on `outside` keeps them.
pub fn guard<R, W>(
    input: R,
    output: W,
    outside: std::sync::Arc<Outside>,
) -> (DuplexStream, Output<W>, tokio::task::JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    outside
        .active
        .store(true, std::sync::atomic::Ordering::Release);
    let (server_in, guard_out) = tokio::io::duplex(1 << 20);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        if let Err(e) = forward(input, guard_out, tx).await {
            tracing::error!("reading the client's messages failed: {e}");
        }
    });
    let (done, last) = tokio::sync::oneshot::channel();
    let writer = tokio::spawn(async move {
        if let Ok(inner) = last.await {
            if let Err(e) = OutputInner::finish(inner).await {
                tracing::debug!("writing to the client failed: {e}");
            }
        }
    });
    let out = Output {
        inner: Some(OutputInner {
            out: output,
            errors: rx,
            errors_open: true,
            outside,
            partial: Vec::new(),
            through: 0,
            pending: Vec::new(),
            at: 0,
            open_from: 0,
        }),
        done: Some(done),
    };
    (server_in, out, writer)
}

/// Polls `out` as the LSP library's output loop does while its queue is empty (a flush, then
/// waiting to be woken), so the guard's answers are written while the server writes nothing.
#[cfg(test)]
pub(crate) fn idle_library<W>(mut out: Output<W>) -> tokio::task::JoinHandle<()>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(std::future::poll_fn(move |cx| {
        let _ = std::pin::Pin::new(&mut out).poll_flush(cx);
        std::task::Poll::Pending
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader};

    /// One frame the server wrote (its own well-formed `Content-Length` framing), header
    /// included; `None` at the end.
    async fn read_frame(r: &mut BufReader<DuplexStream>) -> std::io::Result<Option<Vec<u8>>> {
        let mut frame = Vec::new();
        let mut len = 0usize;
        loop {
            let start = frame.len();
            if r.read_until(b'\n', &mut frame).await? == 0 {
                return Ok(None);
            }
            let line = &frame[start..];
            if line == b"\r\n" || line == b"\n" {
                break;
            }
            if let Some(v) = std::str::from_utf8(line)
                .ok()
                .and_then(|l| l.split_once(':'))
                .filter(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
            {
                len = v.1.trim().parse().unwrap_or(0);
            }
        }
        let at = frame.len();
        frame.resize(at + len, 0);
        r.read_exact(&mut frame[at..]).await?;
        Ok(Some(frame))
    }

    /// A frame as a client sends it.
    fn frame(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    /// A placeholder as the LSP library serialises its request is read without a `Value`, and
    /// anything else is left to the parse (which gives the same slot for the same message).
    #[test]
    fn placeholder_slots_are_read_from_the_library_s_bytes() {
        let library = |slot: u64| {
            let r = tower_lsp_server::jsonrpc::Request::build(OUTSIDE_METHOD)
                .params(json!([slot]))
                .finish();
            serde_json::to_vec(&r).unwrap()
        };
        assert_eq!(
            String::from_utf8(library(42)).unwrap(),
            r#"{"jsonrpc":"2.0","method":"$/pi-lsp/outside","params":[42]}"#
        );
        assert_eq!(placeholder_slot(&library(0)), Some(0));
        assert_eq!(placeholder_slot(&library(u64::MAX / 2)), Some(u64::MAX / 2));
        for other in [
            r#"{"jsonrpc":"2.0","method":"$/pi-lsp/outside","params":[]}"#,
            r#"{"jsonrpc":"2.0","method":"$/pi-lsp/outside","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","method":"$/pi-lsp/outside","params":[-1]}"#,
            r#"{"jsonrpc":"2.0", "method":"$/pi-lsp/outside","params":[1]}"#,
            r#"{"jsonrpc":"2.0","method":"$/pi-lsp/outsider","params":[1]}"#,
            r#"{"jsonrpc":"2.0","method":"$/pi-lsp/outside","params":[99999999999999999999]}"#,
        ] {
            assert_eq!(placeholder_slot(other.as_bytes()), None, "{other}");
        }
        // Through `resolve`: the kept frame for the library's placeholder, spaced or not.
        let outside = Outside::default();
        let kept = notification_frame("agent/event", &json!({"seq": 1})).unwrap();
        let spaced = frame(r#"{"method": "$/pi-lsp/outside", "jsonrpc": "2.0", "params": [1]}"#);
        let (a, b) = (outside.keep(kept.clone()), outside.keep(kept.clone()));
        assert_eq!((a, b), (0, 1));
        let mut placeholder = format!("Content-Length: {}\r\n\r\n", library(0).len()).into_bytes();
        placeholder.extend(library(0));
        let head_of = |f: &[u8]| frame_head(f).unwrap().0;
        assert_eq!(
            outside.resolve(&placeholder, head_of(&placeholder)),
            Some(kept.clone())
        );
        assert_eq!(outside.resolve(&spaced, head_of(&spaced)), Some(kept));
        let answer = frame(r#"{"jsonrpc":"2.0","id":1,"result":null}"#);
        assert_eq!(outside.resolve(&answer, head_of(&answer)), None);
    }

    /// A frame kept outside the library's buffer is written where its placeholder was, whole
    /// and in order with the frames around it (the placeholder itself never reaches the
    /// client), and is let go once written; a large one after small ones goes in a write of
    /// its own.
    #[tokio::test]
    async fn kept_frames_are_written_in_their_placeholders_places() {
        let outside = std::sync::Arc::new(Outside::default());
        let (_client_w, guard_r) = tokio::io::duplex(16);
        let (client_r, guard_w) = tokio::io::duplex(1 << 16);
        let (_server_in, mut server_out, written) = guard(guard_r, guard_w, outside.clone());
        let huge = "x".repeat(8 * 1024 * 1024);
        let small = notification_frame("agent/event", &json!({"seq": 1})).unwrap();
        let big = notification_frame("agent/event", &json!({"seq": 2, "text": huge})).unwrap();
        let placeholder = |slot: u64| notification_frame(OUTSIDE_METHOD, &[slot]).unwrap();
        let (a, b) = (outside.keep(small.clone()), outside.keep(big.clone()));
        let reader = tokio::spawn(all_frames(client_r));
        let mut wire = frame(r#"{"jsonrpc":"2.0","id":1,"result":null}"#);
        wire.extend(placeholder(a));
        wire.extend(placeholder(b));
        wire.extend(frame(r#"{"jsonrpc":"2.0","id":2,"result":null}"#));
        server_out.write_all(&wire).await.unwrap();
        drop(server_out);
        written.await.unwrap();
        let got = reader.await.unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], frame(r#"{"jsonrpc":"2.0","id":1,"result":null}"#));
        assert_eq!(got[1], small);
        assert_eq!(got[2], big);
        assert_eq!(got[3], frame(r#"{"jsonrpc":"2.0","id":2,"result":null}"#));
        assert!(outside.frames.lock().is_empty());
    }

    /// A frame serialised straight to bytes is the notification the library would send:
    /// `Content-Length` of the body, and the body's members.
    #[test]
    fn notification_frames_are_whole_lsp_frames() {
        let params = json!({"sessionId": "s", "seq": 3, "event": {"type": "agent_start"}});
        let f = notification_frame("agent/event", &params).unwrap();
        let at = memchr::memmem::find(&f, b"\r\n\r\n").unwrap() + 4;
        assert_eq!(
            std::str::from_utf8(&f[..at]).unwrap(),
            format!("Content-Length: {}\r\n\r\n", f.len() - at)
        );
        let body: Value = serde_json::from_slice(&f[at..]).unwrap();
        assert_eq!(
            body,
            json!({"jsonrpc": "2.0", "method": "agent/event", "params": params})
        );
    }

    /// A frame's start is known once its header is whole: the header's length (blank line
    /// included) and the body's `Content-Length` (0 when none is named).
    #[test]
    fn frame_heads_are_read_once_whole() {
        let one = frame(r#"{"a":1}"#);
        assert_eq!(frame_head(&one), Some((one.len() - 7, 7)));
        assert_eq!(frame_head(&one[..one.len() - 1]), Some((one.len() - 7, 7)));
        assert_eq!(frame_head(b"Content-Length: 5\r\n"), None);
        assert_eq!(frame_head(b"X-Other: 1\r\n\r\n{}"), Some((14, 0)));
        assert_eq!(frame_head(b""), None);
        // Headers other than the library's own form, read by the general path.
        assert_eq!(
            frame_head(b"content-length:  12 \r\nContent-Type: x\r\n\r\n"),
            Some((41, 12))
        );
        assert_eq!(
            frame_head(b"Content-Length: 12\r\nX: y\r\n\r\n"),
            Some((28, 12))
        );
        assert_eq!(frame_head(b"Content-Length: \r\n\r\n"), Some((20, 0)));
        assert_eq!(frame_head(b"Content-Length: 123"), None);
        assert_eq!(frame_head(b"Content-Length: 123\r\n\r"), None);
    }

    /// The library's bytes cut anywhere (one byte per write, or all at once) reach the client
    /// as the same frames: placeholders replaced by their kept frames, a large frame passed
    /// through whole, the kept frames let go once written.
    #[tokio::test]
    async fn the_library_s_bytes_reach_the_client_whatever_their_cuts() {
        let huge = "y".repeat(300 * 1024);
        for step in [1usize, 7, 4096, usize::MAX] {
            let outside = std::sync::Arc::new(Outside::default());
            let (_client_w, guard_r) = tokio::io::duplex(16);
            let (client_r, guard_w) = tokio::io::duplex(1 << 16);
            let (_server_in, mut server_out, written) = guard(guard_r, guard_w, outside.clone());
            let kept = notification_frame("agent/event", &json!({"seq": 1})).unwrap();
            let slot = outside.keep(kept.clone());
            let first = frame(r#"{"jsonrpc":"2.0","id":1,"result":null}"#);
            let large = frame(&format!(r#"{{"jsonrpc":"2.0","id":2,"result":"{huge}"}}"#));
            let mut wire = first.clone();
            wire.extend(notification_frame(OUTSIDE_METHOD, &[slot]).unwrap());
            wire.extend(&large);
            let reader = tokio::spawn(all_frames(client_r));
            for chunk in wire.chunks(step.min(wire.len())) {
                server_out.write_all(chunk).await.unwrap();
                if step < 100 {
                    server_out.flush().await.unwrap();
                }
            }
            server_out.flush().await.unwrap();
            drop(server_out);
            written.await.unwrap();
            let got = reader.await.unwrap();
            assert_eq!(got, vec![first, kept, large], "writes of {step} bytes");
            assert!(outside.frames.lock().is_empty());
        }
    }

    /// A guard's answer reaches the client while the server writes nothing: the writer's task
    /// (here one that only flushes, as the library's does when its queue is empty) is woken
    /// for it.
    #[tokio::test]
    async fn a_guard_answer_is_written_while_the_server_is_idle() {
        let (mut client_w, guard_r) = tokio::io::duplex(1 << 16);
        let (client_r, guard_w) = tokio::io::duplex(1 << 16);
        let (_server_in, server_out, _written) = guard(guard_r, guard_w, Default::default());
        let _idle = idle_library(server_out);
        tokio::task::yield_now().await;
        client_w
            .write_all(&frame(r#"{"jsonrpc":"2.0","id":5,"method":"x""#))
            .await
            .unwrap();
        let mut r = BufReader::new(client_r);
        let answer = tokio::time::timeout(Duration::from_secs(5), read_frame_of(&mut r))
            .await
            .expect("the answer is written while the server is idle");
        let answer = answer.expect("a frame");
        assert_eq!(
            (&answer["id"], &answer["error"]["code"]),
            (&json!(5), &json!(PARSE_ERROR))
        );
        assert!(answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Parse error: ")));
    }

    /// Feeds `input` to a guard whose server side echoes nothing, and returns the frames the
    /// server received (bodies) and the guard's own answers (bodies), once the input ended.
    async fn run_guard(input: Vec<u8>) -> (Vec<Value>, Vec<Value>) {
        let (mut client_w, guard_r) = tokio::io::duplex(1 << 16);
        let (client_r, guard_w) = tokio::io::duplex(1 << 16);
        let (server_in, server_out, written) = guard(guard_r, guard_w, Default::default());
        let feed = tokio::spawn(async move {
            client_w.write_all(&input).await.unwrap();
            client_w.shutdown().await.unwrap();
        });
        let mut server_in = BufReader::new(server_in);
        let mut got = Vec::new();
        let (tx, _unused) = tokio::io::duplex(16);
        drop(tx);
        loop {
            let mut header = String::new();
            if server_in.read_line(&mut header).await.unwrap() == 0 {
                break;
            }
            let len: usize = header
                .trim()
                .strip_prefix("Content-Length: ")
                .unwrap()
                .parse()
                .unwrap();
            let mut blank = String::new();
            server_in.read_line(&mut blank).await.unwrap();
            let mut body = vec![0u8; len];
            server_in.read_exact(&mut body).await.unwrap();
            got.push(serde_json::from_slice(&body).unwrap());
        }
        feed.await.unwrap();
        drop(server_out);
        written.await.unwrap();
        let mut answers = Vec::new();
        let mut r = BufReader::new(client_r);
        while let Some(frame) = read_frame_of(&mut r).await {
            answers.push(frame);
        }
        (got, answers)
    }

    /// Every frame the client end receives until it closes, header and body, in order.
    async fn all_frames(client_r: DuplexStream) -> Vec<Vec<u8>> {
        let mut r = BufReader::new(client_r);
        let mut got = Vec::new();
        while let Some(frame) = read_frame(&mut r).await.unwrap() {
            got.push(frame);
        }
        got
    }

    async fn read_frame_of(r: &mut BufReader<DuplexStream>) -> Option<Value> {
        let frame = read_frame(r).await.unwrap()?;
        let at = frame.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        Some(serde_json::from_slice(&frame[at..]).unwrap())
    }

    fn answer(id: Value, code: i64, message: &str) -> Value {
        json!({"jsonrpc":"2.0","error":{"code":code,"message":message},"id":id})
    }

    fn req(id: i64) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"agent/state","params":{{}}}}"#)
    }

    #[tokio::test]
    async fn framing_faults_are_answered_under_their_ids_and_reading_goes_on() {
        let mut input = Vec::new();
        // A declared length that can never come, with the start of a request after it.
        input.extend(
            b"Content-Length: 1000000000000\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"",
        );
        input.extend(b"\r\n");
        input.extend(frame(&req(2)));
        // No Content-Length at all.
        input.extend(format!("Content-Type: application/json\r\n\r\n{}", req(3)).into_bytes());
        input.extend(frame(&req(4)));
        // A length too short (the body is cut), then a too-long one taking in the next frame.
        let r5 = req(5);
        input.extend(format!("Content-Length: 28\r\n\r\n{r5}").into_bytes());
        let r6 = req(6);
        input.extend(format!("Content-Length: {}\r\n\r\n{r6}", r6.len() + 30).into_bytes());
        input.extend(frame(&req(7)));
        // A lone surrogate escape in a string: passed on lossily.
        input.extend(frame(
            r#"{"jsonrpc":"2.0","id":8,"method":"agent/x","params":{"t":"a\ud83d"}}"#,
        ));
        // A header line far past the limit, then a good frame.
        input.extend(vec![b'X'; 3 * MAX_HEADER_LINE]);
        input.extend(b"\r\n\r\n");
        input.extend(frame(&req(9)));
        // A burst of bad bodies: each answered, none lost.
        for _ in 0..5 {
            input.extend(frame("nope!"));
        }
        input.extend(frame(&req(10)));
        // A length longer than the last message, and the input ends.
        let r11 = req(11);
        input.extend(format!("Content-Length: {}\r\n\r\n{r11}", r11.len() + 10).into_bytes());
        let (passed, answers) = run_guard(input).await;
        let ids: Vec<Value> = passed.iter().map(|m| m["id"].clone()).collect();
        assert_eq!(
            ids,
            [json!(2), json!(4), json!(7), json!(8), json!(9), json!(10)]
        );
        assert_eq!(passed[3]["params"]["t"], "a\u{fffd}");
        let bad = "Parse error: invalid JSON: expected ident at line 1 column 2";
        let mut want = vec![
            answer(json!(1), INVALID_REQUEST, "Invalid request: frame of 1000000000000 bytes exceeds the 67108864-byte limit"),
            answer(json!(3), INVALID_REQUEST, "Invalid request: no Content-Length header"),
            answer(json!(5), PARSE_ERROR, "Parse error: invalid JSON: EOF while parsing a string at line 1 column 28"),
            answer(json!(6), INVALID_REQUEST, &format!("Invalid request: Content-Length {} but the message has {} bytes", r6.len() + 30, r6.len())),
            answer(Value::Null, PARSE_ERROR, &format!("Parse error: a header line of {} bytes exceeds the {MAX_HEADER_LINE}-byte limit", 3 * MAX_HEADER_LINE)),
        ];
        want.extend(vec![answer(Value::Null, PARSE_ERROR, bad); 5]);
        want.push(answer(
            json!(11),
            INVALID_REQUEST,
            &format!(
                "Invalid request: Content-Length {} but the message has {} bytes",
                r11.len() + 10,
                r11.len()
            ),
        ));
        assert_eq!(answers, want);
    }
}

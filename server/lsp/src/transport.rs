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
//!
//! [`stdio`] gives the server's stdin and stdout as non-blocking pipe (or Unix socket) I/O
//! driven by the runtime's reactor when they are pipes or sockets, so a message costs no hand-off
//! to a blocking thread in either direction; other kinds of stdio (a terminal, a regular file)
//! keep tokio's blocking-thread stdio.

use std::fs::File;
use std::io::IsTerminal;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::{json, Value};
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
    ReadBuf,
};
use tokio::net::unix::pipe;

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

/// The server's stdin: a non-blocking pipe or Unix socket on the reactor, or tokio's stdin.
pub enum StdinReader {
    /// A pipe (`O_NONBLOCK` set on it).
    Pipe(pipe::Receiver),
    /// A Unix socket (as `libuv`-based editors, VS Code among them, give their children).
    Socket(tokio::net::UnixStream),
    /// Anything else: tokio's stdin (reads on a blocking thread).
    Blocking(tokio::io::Stdin),
}

/// The server's stdout: a non-blocking pipe or Unix socket on the reactor, or tokio's stdout.
pub enum StdoutWriter {
    /// A pipe (`O_NONBLOCK` set on it).
    Pipe(pipe::Sender),
    /// A Unix socket.
    Socket(tokio::net::UnixStream),
    /// Anything else: tokio's stdout (writes on a blocking thread).
    Blocking(tokio::io::Stdout),
}

impl AsyncRead for StdinReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdinReader::Pipe(r) => Pin::new(r).poll_read(cx, buf),
            StdinReader::Socket(r) => Pin::new(r).poll_read(cx, buf),
            StdinReader::Blocking(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for StdoutWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            StdoutWriter::Pipe(w) => Pin::new(w).poll_write(cx, buf),
            StdoutWriter::Socket(w) => Pin::new(w).poll_write(cx, buf),
            StdoutWriter::Blocking(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            StdoutWriter::Pipe(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            StdoutWriter::Socket(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            StdoutWriter::Blocking(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            StdoutWriter::Pipe(w) => w.is_write_vectored(),
            StdoutWriter::Socket(w) => w.is_write_vectored(),
            StdoutWriter::Blocking(w) => w.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdoutWriter::Pipe(w) => Pin::new(w).poll_flush(cx),
            StdoutWriter::Socket(w) => Pin::new(w).poll_flush(cx),
            StdoutWriter::Blocking(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdoutWriter::Pipe(w) => Pin::new(w).poll_shutdown(cx),
            StdoutWriter::Socket(w) => Pin::new(w).poll_shutdown(cx),
            StdoutWriter::Blocking(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

/// What kind of file an fd is: a pipe, a Unix socket, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pipe,
    UnixSocket,
    Other,
}

/// A duplicate of `fd` and its kind; `None` when it cannot be duplicated or inspected.
fn inspect(fd: std::os::fd::BorrowedFd<'_>) -> Option<(OwnedFd, Kind, (u64, u64))> {
    let owned = fd.try_clone_to_owned().ok()?;
    let file = File::from(owned);
    let meta = file.metadata().ok()?;
    let id = (meta.dev(), meta.ino());
    let owned = OwnedFd::from(file);
    let kind = if meta.file_type().is_fifo() {
        Kind::Pipe
    } else if meta.file_type().is_socket() {
        // Only Unix-domain sockets (local_addr fails on other families).
        let probe = std::os::unix::net::UnixStream::from(owned.try_clone().ok()?);
        if probe.local_addr().is_ok() {
            Kind::UnixSocket
        } else {
            Kind::Other
        }
    } else {
        Kind::Other
    };
    Some((owned, kind, id))
}

fn unix_stream(fd: OwnedFd) -> std::io::Result<tokio::net::UnixStream> {
    let s = std::os::unix::net::UnixStream::from(fd);
    s.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(s)
}

/// Duplicates of the stdio fds made non-blocking, to make blocking again at exit.
#[derive(Debug, Default)]
pub struct Restore {
    fds: Vec<(OwnedFd, Kind)>,
}

impl Restore {
    /// Clears `O_NONBLOCK` again on the stdio fds [`stdio`] set it on (the flag belongs to the
    /// open file, which a parent process may share). Needs the runtime (the pipe is registered
    /// with the reactor on the way). Errors are logged.
    pub fn blocking_again(self) {
        for (fd, kind) in self.fds {
            let r = match kind {
                Kind::Pipe => pipe::Receiver::from_owned_fd_unchecked(fd)
                    .and_then(pipe::Receiver::into_blocking_fd)
                    .map(drop),
                Kind::UnixSocket => std::os::unix::net::UnixStream::from(fd).set_nonblocking(false),
                Kind::Other => Ok(()),
            };
            if let Err(e) = r {
                tracing::debug!("could not make a stdio fd blocking again: {e}");
            }
        }
    }
}

/// A reactor-driven reader of `fd` when it is a pipe or a Unix-domain socket (made
/// non-blocking), with a duplicate of the fd for [`Restore`]; `None` for anything else or when
/// it cannot be set up.
fn nonblocking_reader(fd: std::os::fd::BorrowedFd<'_>) -> Option<(StdinReader, (OwnedFd, Kind))> {
    let (fd, kind, _) = inspect(fd)?;
    let keep = fd.try_clone().ok()?;
    let r = match kind {
        Kind::Pipe => pipe::Receiver::from_owned_fd(fd).map(StdinReader::Pipe),
        Kind::UnixSocket => unix_stream(fd).map(StdinReader::Socket),
        Kind::Other => return None,
    };
    match r {
        Ok(r) => Some((r, (keep, kind))),
        Err(e) => {
            tracing::debug!("stdin stays on blocking reads: {e}");
            None
        }
    }
}

/// A reactor-driven writer of `fd` when it is a pipe or a Unix-domain socket that is not the
/// same file as `stderr` (made non-blocking), with a duplicate of the fd for [`Restore`];
/// `None` for anything else or when it cannot be set up.
fn nonblocking_writer(
    fd: std::os::fd::BorrowedFd<'_>,
    stderr: std::os::fd::BorrowedFd<'_>,
) -> Option<(StdoutWriter, (OwnedFd, Kind))> {
    let (fd, kind, id) = inspect(fd)?;
    if inspect(stderr).is_some_and(|(_, _, e)| e == id) {
        return None;
    }
    let keep = fd.try_clone().ok()?;
    let w = match kind {
        Kind::Pipe => pipe::Sender::from_owned_fd(fd).map(StdoutWriter::Pipe),
        Kind::UnixSocket => unix_stream(fd).map(StdoutWriter::Socket),
        Kind::Other => return None,
    };
    match w {
        Ok(w) => Some((w, (keep, kind))),
        Err(e) => {
            tracing::debug!("stdout stays on blocking writes: {e}");
            None
        }
    }
}

/// The server's stdin and stdout for the LSP transport (call inside the runtime).
///
/// A pipe or Unix-domain socket is duplicated, set non-blocking (`O_NONBLOCK`) and driven by
/// the reactor: a message is read or written with direct system calls on the runtime's own
/// threads instead of a hand-off to a blocking thread per operation. Anything else — a terminal
/// (setting a terminal non-blocking would affect the shell sharing it), a regular file, or a
/// stdout that is the same file as stderr (the logs write to stderr with blocking writes) —
/// keeps tokio's stdio. The returned [`Restore`] clears the flag again at exit.
pub fn stdio() -> (StdinReader, StdoutWriter, Restore) {
    let mut restore = Restore::default();
    let stdin = std::io::stdin();
    let input = match (!stdin.is_terminal())
        .then(|| nonblocking_reader(stdin.as_fd()))
        .flatten()
    {
        Some((r, keep)) => {
            restore.fds.push(keep);
            r
        }
        None => StdinReader::Blocking(tokio::io::stdin()),
    };
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let output = match (!stdout.is_terminal())
        .then(|| nonblocking_writer(stdout.as_fd(), stderr.as_fd()))
        .flatten()
    {
        Some((w, keep)) => {
            restore.fds.push(keep);
            w
        }
        None => StdoutWriter::Blocking(tokio::io::stdout()),
    };
    let kind = |blocking: bool, pipe: bool| match (blocking, pipe) {
        (true, _) => "blocking stdio",
        (false, true) => "non-blocking pipe",
        (false, false) => "non-blocking Unix socket",
    };
    tracing::debug!(
        "stdin: {}, stdout: {}",
        kind(
            matches!(input, StdinReader::Blocking(_)),
            matches!(input, StdinReader::Pipe(_))
        ),
        kind(
            matches!(output, StdoutWriter::Blocking(_)),
            matches!(output, StdoutWriter::Pipe(_))
        )
    );
    (input, output, restore)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame as a client sends it.
    fn frame(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    #[tokio::test]
    async fn pipes_are_read_and_written_without_blocking_threads_and_made_blocking_again() {
        use std::io::{Read, Write};
        // stdin: a pipe, read through the guard.
        let (rx, mut tx) = std::io::pipe().unwrap();
        let (reader, keep_r) = nonblocking_reader(rx.as_fd()).unwrap();
        assert!(matches!(reader, StdinReader::Pipe(_)));
        let mut guarded = BufReader::new(guard_input(reader));
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"x"}"#;
        tx.write_all(&[frame(body), b"Content-Length: 5\r\n\r\nnope!".to_vec()].concat())
            .unwrap();
        let mut got = vec![0u8; frame(body).len()];
        guarded.read_exact(&mut got).await.unwrap();
        assert_eq!(got, frame(body));
        let parse_error = substitute("invalid JSON: expected ident at line 1 column 2");
        let want = [
            format!("Content-Length: {}\r\n\r\n", parse_error.len()).into_bytes(),
            parse_error,
        ]
        .concat();
        let mut got = vec![0u8; want.len()];
        guarded.read_exact(&mut got).await.unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
        // stdout: a pipe (stderr is another file), written with one frame per write.
        let (mut out_rx, out_tx) = std::io::pipe().unwrap();
        let (err_rx, _err_tx) = std::io::pipe().unwrap();
        let (mut writer, keep_w) = nonblocking_writer(out_tx.as_fd(), err_rx.as_fd()).unwrap();
        assert!(matches!(writer, StdoutWriter::Pipe(_)));
        writer.write_all(&frame(body)).await.unwrap();
        writer.flush().await.unwrap();
        let mut got = vec![0u8; frame(body).len()];
        out_rx.read_exact(&mut got).unwrap();
        assert_eq!(got, frame(body));
        // stdout that is stderr (`2>&1`): not touched.
        assert!(nonblocking_writer(out_tx.as_fd(), out_tx.as_fd()).is_none());
        // The flag is on the shared open file: another duplicate of the empty pipe does not
        // block now; after `blocking_again` a read waits for data.
        let mut probe = File::from(OwnedFd::from(rx.try_clone().unwrap()));
        let mut buf = [0u8; 1];
        assert_eq!(
            probe.read(&mut buf).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
        Restore {
            fds: vec![keep_r, keep_w],
        }
        .blocking_again();
        let reading = std::thread::spawn(move || probe.read(&mut buf).map(|n| (n, buf)));
        std::thread::sleep(std::time::Duration::from_millis(50));
        tx.write_all(b"z").unwrap();
        assert_eq!(reading.join().unwrap().unwrap(), (1, *b"z"));
    }

    #[tokio::test]
    async fn unix_sockets_are_used_and_other_files_keep_tokio_stdio() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (reader, _) = nonblocking_reader(a.as_fd()).unwrap();
        assert!(matches!(reader, StdinReader::Socket(_)));
        let body = r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#;
        std::io::Write::write_all(&mut b, &frame(body)).unwrap();
        let mut guarded = guard_input(reader);
        let mut got = vec![0u8; frame(body).len()];
        guarded.read_exact(&mut got).await.unwrap();
        assert_eq!(got, frame(body));
        let (err_rx, _err_tx) = std::io::pipe().unwrap();
        let (writer, _) = nonblocking_writer(b.as_fd(), err_rx.as_fd()).unwrap();
        assert!(matches!(writer, StdoutWriter::Socket(_)));
        // A regular file is not pollable: tokio's blocking stdio stays.
        let dir = std::env::temp_dir().join(format!("pi-lsp-transport-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = File::create(dir.join("out")).unwrap();
        assert!(nonblocking_reader(file.as_fd()).is_none());
        assert!(nonblocking_writer(file.as_fd(), err_rx.as_fd()).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

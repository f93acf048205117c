//! The server's stdio on Linux and macOS: pipes and Unix-domain sockets made non-blocking and
//! driven by the reactor; anything else is tokio's stdio (see `mod.rs`).

use std::fs::File;
use std::io::IsTerminal;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;

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
    use crate::transport::guard;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};

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
        let (client_side, guard_side) = tokio::io::duplex(1 << 16);
        let (server_in, server_out, _written) = guard(reader, guard_side, Default::default());
        // The LSP library polls its writer; the guard's answers go out through it.
        let _library = crate::transport::idle_library(server_out);
        let mut guarded = BufReader::new(server_in);
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"x"}"#;
        tx.write_all(&[frame(body), b"Content-Length: 5\r\n\r\nnope!".to_vec()].concat())
            .unwrap();
        let mut got = vec![0u8; frame(body).len()];
        guarded.read_exact(&mut got).await.unwrap();
        assert_eq!(got, frame(body));
        // The bad frame is answered by the guard on the output, not passed to the server.
        let want = serde_json::json!({"jsonrpc": "2.0", "error": {"code": -32700,
            "message": "Parse error: invalid JSON: expected ident at line 1 column 2"}, "id": null})
        .to_string();
        let want = format!("Content-Length: {}\r\n\r\n{want}", want.len());
        let mut client = BufReader::new(client_side);
        let mut got = vec![0u8; want.len()];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want);
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
        let (_client_side, guard_side) = tokio::io::duplex(1 << 16);
        let (mut guarded, _server_out, _written) = guard(reader, guard_side, Default::default());
        let mut got = vec![0u8; frame(body).len()];
        guarded.read_exact(&mut got).await.unwrap();
        assert_eq!(got, frame(body));
        let (err_rx, _err_tx) = std::io::pipe().unwrap();
        let (writer, _) = nonblocking_writer(b.as_fd(), err_rx.as_fd()).unwrap();
        assert!(matches!(writer, StdoutWriter::Socket(_)));
        // A regular file is not pollable: tokio's blocking stdio stays.
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        let file = File::create(dir.join("out")).unwrap();
        assert!(nonblocking_reader(file.as_fd()).is_none());
        assert!(nonblocking_writer(file.as_fd(), err_rx.as_fd()).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! The server's stdio on Windows (and any non-Unix OS): tokio's stdin and stdout, which read
//! and write on blocking threads (Windows anonymous pipes cannot be registered with the
//! reactor). The same items as `unix.rs`.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The server's stdin: tokio's.
pub enum StdinReader {
    /// tokio's stdin (reads on a blocking thread).
    Blocking(tokio::io::Stdin),
}

/// The server's stdout: tokio's.
pub enum StdoutWriter {
    /// tokio's stdout (writes on a blocking thread).
    Blocking(tokio::io::Stdout),
}

impl AsyncRead for StdinReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
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
            StdoutWriter::Blocking(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdoutWriter::Blocking(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            StdoutWriter::Blocking(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

/// Nothing to restore: stdio was not changed.
#[derive(Debug, Default)]
pub struct Restore;

impl Restore {
    /// Does nothing (the flags were never changed).
    pub fn blocking_again(self) {}
}

/// tokio's stdin and stdout (call inside the runtime).
pub fn stdio() -> (StdinReader, StdoutWriter, Restore) {
    tracing::debug!("stdin: blocking stdio, stdout: blocking stdio");
    (
        StdinReader::Blocking(tokio::io::stdin()),
        StdoutWriter::Blocking(tokio::io::stdout()),
        Restore,
    )
}

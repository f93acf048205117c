//! The one way the server goes away (case LSPX-03): the LSP `shutdown` request, the `exit`
//! notification (with or without `shutdown` before it), the end of stdin (the editor died or
//! closed the pipe) and the signals SIGTERM, SIGHUP and SIGINT all end in [`stop_server`]
//! ([`pi_core::harness::Sessions::stop_all`]), and so does `pi-lsp run` on SIGTERM, SIGHUP or
//! SIGINT.
//!
//! [`pi_core::harness::sessions::stop`], within [`STOP_BUDGET`]:
//! 1. aborts every run of every session (a tool running, a stream from the model, a permission
//!    question, a compaction) and the user's `agent/bash` command of each session;
//! 2. waits for the runs to settle: the run's own abort path kills the command's process group
//!    and writes the paired tool results (aborted, `isError: true`, Pi's `Command aborted`) and
//!    the aborted assistant entry, and the user's command writes its `bashExecution` entry
//!    (`cancelled: true`);
//! 3. kills every process group a `bash` command of this process was started in that still has
//!    a live member ([`pi_core::tools::kill_all_groups`]: a run that did not settle in time, and
//!    background children a finished command left behind);
//! 4. closes every session writer (`SessionWriter::close`: `fdatasync`, then the `.lock`
//!    file's `flock` is released and the file removed).
//!
//! The caller then exits, without dropping the stopped sessions (`State::leave_to_exit`: the
//! OS takes their memory back at once). The exit codes ([`exit_code`]): 0 after `shutdown` then `exit` (or the
//! end of the input after `shutdown`), 1 for `exit` or the end of the input without `shutdown`
//! (LSP 3.17 "exit Notification"), 128 + the signal's number for a signal (129 SIGHUP,
//! 130 SIGINT, 143 SIGTERM), as shells report a process a signal ended. A second signal while
//! the stop runs ends the process at once (groups killed with SIGKILL first).
//!
//! The stop itself is the sessions' own (`pi_core::harness::sessions::stop`): this module
//! decides when, and how the process ends.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

pub use pi_core::harness::sessions::STOP_BUDGET;

/// How long the server waits for its last frames to reach the client before it exits.
pub const FLUSH_BUDGET: Duration = Duration::from_millis(200);

/// Why the process is going away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The `exit` notification.
    Exit,
    /// The end of stdin (or a read error on it).
    InputEnded,
    /// A signal, by number (`SIGTERM` = 15, `SIGHUP` = 1, `SIGINT` = 2).
    Signal(i32),
}

/// The process's exit code for `cause`; `shutdown_received`: the `shutdown` request was
/// answered before. See the module doc.
pub fn exit_code(cause: Cause, shutdown_received: bool) -> i32 {
    match cause {
        Cause::Signal(n) => 128 + n,
        Cause::Exit | Cause::InputEnded if shutdown_received => 0,
        Cause::Exit | Cause::InputEnded => 1,
    }
}

/// Where the causes are reported (the read side is the binary's main task).
#[derive(Debug, Clone)]
pub struct Causes(mpsc::UnboundedSender<Cause>);

impl Causes {
    /// A reporter and the receiver of what it reports.
    pub fn channel() -> (Causes, mpsc::UnboundedReceiver<Cause>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Causes(tx), rx)
    }

    /// Reports `cause` (nothing happens when nobody listens any more).
    pub fn report(&self, cause: Cause) {
        let _ = self.0.send(cause);
    }
}

/// The signals that end the process (per OS: `crate::platform::signals`).
pub use crate::platform::signals::Signals;

/// Reports every signal `signals` receives to `causes` as [`Cause::Signal`], from a task of
/// its own (call inside the runtime): the serve loop waits on the causes alone, and the signal
/// streams are polled only when a signal comes, not at every wake of the LSP library's future
/// the loop also polls. Forwards until the process ends.
pub fn forward_signals(mut signals: Signals, causes: Causes) {
    tokio::spawn(async move {
        loop {
            let n = signals.next().await;
            causes.report(Cause::Signal(n));
        }
    });
}

/// A reader that reports [`Cause::InputEnded`] once, when a read of the inner reader returns
/// the end (0 bytes) or an error: stdin closing is seen at once, even while handlers are still
/// in flight (the LSP library only returns after they all finished).
pub struct WatchEnd<R> {
    inner: R,
    causes: Option<Causes>,
}

impl<R> WatchEnd<R> {
    /// Wraps `inner`; the end is reported to `causes`.
    pub fn new(inner: R, causes: Causes) -> WatchEnd<R> {
        WatchEnd {
            inner,
            causes: Some(causes),
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for WatchEnd<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        let ended = match &r {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            if let Some(c) = this.causes.take() {
                c.report(Cause::InputEnded);
            }
        }
        r
    }
}

/// What [`crate::state::State::stop`] did ([`pi_core::harness::Sessions::stop_all`]).
pub use pi_core::harness::sessions::StopReport as Report;

/// Serves LSP on stdin/stdout until the process goes away (see the module doc); returns the
/// exit code. Call inside the runtime; the caller exits with the code (without waiting for the
/// runtime's blocking stdin thread).
pub async fn serve_stdio() -> i32 {
    let (causes, mut reported) = Causes::channel();
    forward_signals(Signals::listen(), causes.clone());
    let (service, socket) = crate::server::service();
    let state = service.inner().state.clone();
    let shutdown_received = service.inner().shutdown_received();
    // Non-blocking pipes when stdin/stdout are pipes or sockets (see `transport::stdio`).
    let (stdin, stdout, restore) = crate::transport::stdio();
    let (input, output, written) = crate::transport::guard(
        WatchEnd::new(stdin, causes.clone()),
        stdout,
        state.outside.clone(),
    );
    // Document sync in the read loop, and no small limit on handlers in flight: a long request
    // never holds up another message (see `dispatch`).
    let serve = tower_lsp_server::Server::new(input, output, socket)
        .concurrency_level(crate::dispatch::MAX_IN_FLIGHT)
        .serve(
            crate::dispatch::Dispatch::new(service, state.clone()).on_exit({
                let causes = causes.clone();
                move || causes.report(Cause::Exit)
            }),
        );
    let mut serve = Box::pin(serve);
    let mut served = false;
    let cause = tokio::select! {
        // The library returns once the input ended and every handler finished.
        _ = &mut serve => {
            served = true;
            Cause::InputEnded
        }
        // `exit`, the end of the input, or a signal (forwarded: `forward_signals`).
        Some(c) = reported.recv() => c,
    };
    tracing::debug!("going away ({cause:?}): stopping every session");
    // The server keeps serving meanwhile: handlers in flight (a user's command) store their
    // results and answer.
    let stopping = state.stop();
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            _ = &mut stopping => break,
            _ = &mut serve, if !served => served = true,
            // A signal while stopping ends the process at once; another `exit` or the end
            // of the input changes nothing.
            Some(c) = reported.recv() => if let Cause::Signal(n) = c {
                tracing::warn!("signal {n} while stopping: exiting at once");
                restore.blocking_again();
                exit_now(128 + n);
            }
        }
    }
    let code = exit_code(
        cause,
        shutdown_received.load(std::sync::atomic::Ordering::SeqCst),
    );
    // Log lines and events still on their way to the transport go out first (a notification
    // sent once the transport is gone is an error line on stderr), then the last frames reach
    // the client, if it still reads.
    if !served {
        let _ = tokio::time::timeout(Duration::from_millis(20), &mut serve).await;
    }
    drop(serve);
    let _ = tokio::time::timeout(FLUSH_BUDGET, written).await;
    restore.blocking_again();
    // The protocol is done and every file closed: what the sessions hold is left to the
    // process's exit, not dropped (see `State::leave_to_exit`).
    let left = state.leave_to_exit();
    tracing::debug!("exiting with {left} stopped session(s) left to the OS");
    code
}

/// Ends the process now after a second signal: every recorded process group gets SIGKILL.
pub fn exit_now(code: i32) -> ! {
    pi_core::tools::kill_all_groups_now();
    pi_core::mcp::kill_all_groups();
    pi_core::sandbox::remove_temp_folders();
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(
            [
                exit_code(Cause::Exit, true),
                exit_code(Cause::Exit, false),
                exit_code(Cause::InputEnded, true),
                exit_code(Cause::InputEnded, false),
                exit_code(Cause::Signal(15), true),
                exit_code(Cause::Signal(1), false),
                exit_code(Cause::Signal(2), false),
            ],
            [0, 1, 0, 1, 143, 129, 130]
        );
    }

    #[tokio::test]
    async fn the_end_of_the_input_is_reported_once() {
        use tokio::io::AsyncReadExt;
        let (causes, mut rx) = Causes::channel();
        let mut r = WatchEnd::new(&b"abc"[..], causes);
        let mut buf = Vec::new();
        r.read_to_end(&mut buf).await.unwrap();
        assert_eq!(r.read(&mut [0u8; 4]).await.unwrap(), 0);
        drop(r);
        assert_eq!(
            (buf, rx.recv().await, rx.recv().await),
            (b"abc".to_vec(), Some(Cause::InputEnded), None)
        );
    }
}

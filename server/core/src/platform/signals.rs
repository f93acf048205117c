//! The signals that end the server, one interface per OS: `Signals::listen()` (inside the
//! runtime), `Signals::next().await -> i32` (the number the exit code is 128 + of).
//!
//! | | Linux, macOS | Windows (`tokio::signal::windows`) |
//! |---|---|---|
//! | the editor stops the server | `SIGTERM` (15) | — (editors end a Windows child by closing its pipes, or `TerminateProcess`, which no process sees) |
//! | the terminal / console goes away | `SIGHUP` (1) | console close (`CTRL_CLOSE_EVENT`), reported as 1 |
//! | interrupt | `SIGINT` (2) | Ctrl-C, reported as 2 |
//! | break | — | Ctrl-Break, reported as 21 (the C runtime's `SIGBREAK`) |
//! | log-off / shutdown | `SIGTERM` from the system | `CTRL_LOGOFF_EVENT` / `CTRL_SHUTDOWN_EVENT`, reported as 15 |
//!
//! Windows gives a console-close, log-off or shutdown handler a few seconds before it ends the
//! process: the stop budget (1.2 s, pi-lsp's `shutdown::STOP_BUDGET`) fits in it. The Windows half is
//! unproven here (docs/platforms.md).

/// The signals that end the process, listened to from [`Signals::listen`] on (before it, their
/// default action applies).
pub struct Signals {
    listeners: Vec<(i32, Listener)>,
}

/// `SIGHUP`, `SIGINT`, `SIGTERM` (Linux and the BSDs agree), and the C runtime's `SIGBREAK`.
pub mod signo {
    /// Hang-up (Windows: console close).
    pub const SIGHUP: i32 = 1;
    /// Interrupt (Windows: Ctrl-C).
    pub const SIGINT: i32 = 2;
    /// Terminate (Windows: log-off, shutdown).
    pub const SIGTERM: i32 = 15;
    /// Windows' Ctrl-Break.
    pub const SIGBREAK: i32 = 21;
    /// File-size limit exceeded (Linux and macOS: 25).
    pub const SIGXFSZ: i32 = 25;
}

/// Keeps `SIGXFSZ` from ending the process (call it once, inside the runtime). A write past the
/// file-size limit (`ulimit -f`, `RLIMIT_FSIZE`) raises `SIGXFSZ`, whose default action ends the
/// process at once: a session append cut off mid-line, the tool result lost, the lock left
/// behind. With a handler installed (tokio's, which stays for the process's lifetime) the write
/// fails with `EFBIG` instead, and the session writer handles that as it does a full disk: the
/// file is cut back to its last whole line and the entry kept in memory (docs/protocol.md,
/// `unsaved`). A handler, not `SIG_IGN`: an ignored signal would stay ignored in the commands
/// the agent runs, a handler is reset for them on `exec`. Windows has no such signal.
pub fn survive_file_size_limit() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Err(e) = signal(SignalKind::from_raw(signo::SIGXFSZ)) {
            tracing::warn!("cannot handle SIGXFSZ (a write past the file-size limit will end the process): {e}");
        }
    }
}

/// One Unix signal stream.
#[cfg(unix)]
struct Listener(tokio::signal::unix::Signal);

#[cfg(unix)]
impl Listener {
    async fn recv(&mut self) {
        self.0.recv().await;
    }
}

#[cfg(unix)]
fn listeners() -> Vec<(i32, std::io::Result<Listener>)> {
    use tokio::signal::unix::{signal, SignalKind};
    let one = |k: SignalKind| signal(k).map(Listener);
    vec![
        (signo::SIGTERM, one(SignalKind::terminate())),
        (signo::SIGHUP, one(SignalKind::hangup())),
        (signo::SIGINT, one(SignalKind::interrupt())),
    ]
}

/// One Windows console event stream (each has its own tokio type).
#[cfg(windows)]
enum Listener {
    C(tokio::signal::windows::CtrlC),
    Break(tokio::signal::windows::CtrlBreak),
    Close(tokio::signal::windows::CtrlClose),
    Logoff(tokio::signal::windows::CtrlLogoff),
    Shutdown(tokio::signal::windows::CtrlShutdown),
}

#[cfg(windows)]
impl Listener {
    async fn recv(&mut self) {
        match self {
            Listener::C(s) => s.recv().await,
            Listener::Break(s) => s.recv().await,
            Listener::Close(s) => s.recv().await,
            Listener::Logoff(s) => s.recv().await,
            Listener::Shutdown(s) => s.recv().await,
        };
    }
}

#[cfg(windows)]
fn listeners() -> Vec<(i32, std::io::Result<Listener>)> {
    use tokio::signal::windows;
    vec![
        (signo::SIGINT, windows::ctrl_c().map(Listener::C)),
        (signo::SIGBREAK, windows::ctrl_break().map(Listener::Break)),
        (signo::SIGHUP, windows::ctrl_close().map(Listener::Close)),
        (signo::SIGTERM, windows::ctrl_logoff().map(Listener::Logoff)),
        (
            signo::SIGTERM,
            windows::ctrl_shutdown().map(Listener::Shutdown),
        ),
    ]
}

impl Signals {
    /// Starts listening (inside the runtime). A signal that cannot be listened to is logged
    /// and keeps its default action.
    pub fn listen() -> Signals {
        let listeners = listeners()
            .into_iter()
            .filter_map(|(n, l)| match l {
                Ok(l) => Some((n, l)),
                Err(e) => {
                    tracing::warn!("cannot listen to signal {n}: {e}");
                    None
                }
            })
            .collect();
        Signals { listeners }
    }

    /// The next signal's number (pending forever when none can be listened to).
    pub async fn next(&mut self) -> i32 {
        if self.listeners.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.listeners.iter_mut().map(|(n, l)| {
            let n = *n;
            Box::pin(async move {
                l.recv().await;
                n
            })
        });
        futures::future::select_all(waits).await.0
    }
}

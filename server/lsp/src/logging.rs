//! Where the server's log lines go. Editors show a language server's stderr as errors (Neovim
//! warns on every stderr line, VS Code opens its output channel), so informational lines must
//! not go there by default.
//!
//! - Warnings and errors go to stderr.
//! - Informational and debug lines go to the client as `window/logMessage` (type 3 `Info` for
//!   `info`, 4 `Log` for `debug` and `trace`) once [`attach`] has been given the client; lines
//!   logged before that (during `initialize`) are kept, at most [`PENDING_MAX`] of them, and
//!   sent when it is attached.
//! - `PI_LSP_LOG` (an `EnvFilter` directive such as `debug` or `pi_core=trace`) chooses the
//!   level of both and, when set, also sends every line at that level to stderr as before.
//!   Unset (or empty) it is `info` for `window/logMessage` and `warn` for stderr.
//!
//! Lines of the LSP library itself never go to `window/logMessage` (sending one logs one).

use parking_lot::Mutex;
use std::fmt::Write as _;

use tokio::sync::mpsc::UnboundedSender;
use tower_lsp_server::ls_types::MessageType;
use tower_lsp_server::Client;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Lines kept before the client is attached; older ones are dropped.
pub const PENDING_MAX: usize = 1000;

enum Sink {
    /// No client yet: lines wait here.
    Pending(Vec<(MessageType, String)>),
    /// Lines go to the forwarding task.
    Live(UnboundedSender<(MessageType, String)>),
    /// No client will come (headless `run`): informational lines are dropped.
    Off,
}

static SINK: Mutex<Sink> = Mutex::new(Sink::Pending(Vec::new()));

fn sink() -> parking_lot::MutexGuard<'static, Sink> {
    SINK.lock()
}

/// What reaches stderr when `PI_LSP_LOG` is unset: warnings and errors, except the LSP
/// library's client handle, whose one error line ("failed to send notification") means the
/// client's connection is already gone: a notification that was on its way while the editor
/// shut the server down (its only other line is about `telemetry/event`, which we never send).
const STDERR_DEFAULT: &str = "warn,tower_lsp_server::service::client=off";

/// The directive that turns that line off, added to a `PI_LSP_LOG` that does not name the
/// library.
const SEND_FAILURES_OFF: &str = "tower_lsp_server::service::client=off";

/// The `PI_LSP_LOG` directive when set and not empty.
fn directive() -> Option<String> {
    std::env::var("PI_LSP_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty())
}

fn filter(default: &str) -> EnvFilter {
    directive()
        .and_then(|d| EnvFilter::try_new(quiet_send_failures(d)).ok())
        .unwrap_or_else(|| EnvFilter::new(default))
}

/// `directive` with the library's send-failure line turned off ([`STDERR_DEFAULT`] says why),
/// unless the directive names the library itself.
fn quiet_send_failures(directive: String) -> String {
    if directive.contains("tower_lsp_server") {
        directive
    } else {
        format!("{directive},{SEND_FAILURES_OFF}")
    }
}

/// Installs the global subscriber. `to_client`: informational lines are meant for an LSP
/// client (the server); else (headless `run`) they are dropped unless `PI_LSP_LOG` sends them
/// to stderr.
pub fn init(to_client: bool) {
    if !to_client {
        *sink() = Sink::Off;
    }
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(filter(STDERR_DEFAULT));
    let client = ClientLayer.with_filter(filter("info"));
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(client)
        .try_init();
}

/// Sends the informational lines to `client` from now on (and those logged before). Called
/// when the service is built; outside a tokio runtime it does nothing.
pub fn attach(client: Client) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(MessageType, String)>();
    let pending = {
        let mut s = sink();
        match std::mem::replace(&mut *s, Sink::Live(tx)) {
            Sink::Pending(p) => p,
            Sink::Live(_) | Sink::Off => Vec::new(),
        }
    };
    rt.spawn(async move {
        for (typ, m) in pending {
            client.log_message(typ, m).await;
        }
        while let Some((typ, m)) = rx.recv().await {
            client.log_message(typ, m).await;
        }
    });
}

/// The layer that hands informational lines to [`SINK`].
struct ClientLayer;

impl<S: Subscriber> Layer<S> for ClientLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let level = *meta.level();
        if level <= Level::WARN || meta.target().starts_with("tower_lsp") {
            // Warnings and errors are stderr's; the LSP library logs while sending.
            return;
        }
        let typ = if level == Level::INFO {
            MessageType::INFO
        } else {
            MessageType::LOG
        };
        let mut text = Text(String::new());
        event.record(&mut text);
        let line = format!("{} {}: {}", level, meta.target(), text.0);
        let mut s = sink();
        match &mut *s {
            Sink::Pending(p) => {
                if p.len() >= PENDING_MAX {
                    p.remove(0);
                }
                p.push((typ, line));
            }
            Sink::Live(tx) => {
                let _ = tx.send((typ, line));
            }
            Sink::Off => {}
        }
    }
}

/// An event's message and fields as one line (`message key=value …`).
struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

//! [`Ctx`]: what an `agent/*` handler may read and do — the workspace's sessions, the client
//! handle for notifications and for server → client requests ([`crate::client`]), the
//! editor's capabilities and configuration, the open documents — and, for a handler the
//! method table runs in its own task, the request's cancellation.
//!
//! A handler is `async fn(Ctx, Params) -> Result<Result>` (see [`crate::methods`]); it never
//! sees the `LanguageServer` type, so handler modules import this leaf and nothing above it.

use std::ops::Deref;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::state::State;

/// A handler's context: read-only access to the server's [`State`] (through `Deref`) and the
/// request's [`CancellationToken`].
pub(crate) struct Ctx {
    state: Arc<State>,
    cancel: Option<CancellationToken>,
}

impl Ctx {
    /// The context of one request; `cancel` fires when the client cancels it
    /// (`$/cancelRequest`) — given to handlers the table marks `spawned`.
    pub(crate) fn new(state: Arc<State>, cancel: Option<CancellationToken>) -> Ctx {
        Ctx { state, cancel }
    }

    /// The server's state, for work that outlives the request (a task of its own).
    pub(crate) fn shared(&self) -> Arc<State> {
        self.state.clone()
    }

    /// The request's cancellation (`None` for an inline handler, whose future is simply
    /// dropped when the request is cancelled).
    #[allow(dead_code)]
    pub(crate) fn cancellation(&self) -> Option<&CancellationToken> {
        self.cancel.as_ref()
    }
}

impl Deref for Ctx {
    type Target = State;

    fn deref(&self) -> &State {
        &self.state
    }
}

/// The server type the method table registers its handlers on: it gives each request its
/// [`State`] (implemented by [`crate::server::Backend`]).
pub trait Served: Send + Sync + 'static {
    /// The state handlers share.
    fn state(&self) -> &Arc<State>;
}

//! The server's way to its sessions: [`pi_core::harness::Sessions`] (the one registry of the
//! workspace's live sessions, built by `initialize` with the editor's [`crate::setup::LspSetup`])
//! reached from handlers, and its errors as JSON-RPC errors.

use std::path::Path;
use std::sync::Arc;

use pi_core::harness::sessions::Error as SessionsError;
use pi_core::harness::{AgentSession, Sessions};
use tower_lsp_server::jsonrpc::Result;

use crate::protocol::{agent_error, codes};
use crate::server::Backend;

/// The JSON-RPC error of a [`Sessions`] error.
pub(crate) fn sessions_error(e: SessionsError) -> tower_lsp_server::jsonrpc::Error {
    let code = match &e {
        SessionsError::Invalid { field, message } => {
            return crate::methods::invalid(field, message)
        }
        SessionsError::UnknownSession(_) => codes::UNKNOWN_SESSION,
        SessionsError::Model(_) => codes::MODEL_UNAVAILABLE,
        SessionsError::ShuttingDown | SessionsError::Session(_) | SessionsError::Closed(_) => {
            codes::SESSION_IO
        }
    };
    agent_error(code, e.to_string())
}

impl Backend {
    /// The workspace's sessions (set by `initialize`).
    pub(crate) fn sessions(&self) -> Result<&Arc<Sessions>> {
        self.state.sessions()
    }

    /// The live session `id`, or the one resumed from its file ([`Sessions::open`]).
    pub(crate) async fn session(&self, id: &str) -> Result<Arc<AgentSession>> {
        self.sessions()?.open(id).await.map_err(sessions_error)
    }

    /// The session `id` when it is live here, `None` when only its file exists
    /// ([`Sessions::find`]).
    pub(crate) fn open_session(&self, id: &str) -> Result<Option<Arc<AgentSession>>> {
        self.sessions()?.find(id).map_err(sessions_error)
    }

    /// A new session ([`Sessions::create`]).
    pub(crate) fn create_session(
        &self,
        model: Option<&str>,
        thinking: Option<pi_ai::models::ThinkingLevel>,
        name: Option<&str>,
    ) -> Result<Arc<AgentSession>> {
        self.sessions()?
            .create(model, thinking, name)
            .map_err(sessions_error)
    }

    /// Opens the session file at `path` now ([`Sessions::open_file`]).
    pub(crate) fn open_file(&self, path: &Path) -> Result<Arc<AgentSession>> {
        self.sessions()?.open_file(path).map_err(sessions_error)
    }
}

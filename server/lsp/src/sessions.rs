//! The server's open sessions, by id: found (or resumed from their file on first use),
//! created, opened from a file. Each is a [`pi_core::harness::AgentSession`] built with the
//! editor's [`LspSetup`].

use std::path::Path;
use std::sync::Arc;

use pi_core::harness::{choose_model, sessions_dir, AgentSession, Opening};
use pi_core::session::{find_session_file, SessionError};
use std::time::{Duration, Instant};
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::MessageType;

use crate::protocol::{agent_error, codes};
use crate::server::Backend;
use crate::setup::LspSetup;

impl Backend {
    /// The live session `id`, or the one resumed from its file in `.pi/sessions/` (or in Pi's
    /// own sessions folder of this workspace).
    ///
    /// A file another process holds is waited for, up to [`RELEASE_WAIT`], before the session
    /// continues in a fork: a window reload starts the new server while the old one still
    /// saves and exits.
    pub(crate) async fn session(&self, id: &str) -> Result<Arc<AgentSession>> {
        // Bind first: the map's lock must be released before `open_file` takes it.
        let known = self.state.sessions.lock().get(id).cloned();
        if let Some(s) = known {
            return Ok(s);
        }
        let path = self.session_file(id).ok_or_else(|| {
            agent_error(
                codes::UNKNOWN_SESSION,
                match self.other_projects_file(id) {
                    Some((file, cwd)) => format!(
                        "session {id} is another project's ({cwd}); open it by its path ({}) to continue it here",
                        file.display()
                    ),
                    None => format!(
                        "no session {id} in {}",
                        sessions_dir(&self.state.workspace()).display()
                    ),
                },
            )
        })?;
        wait_for_release(&path).await;
        self.open_file(&path)
    }

    /// The session `id` when it is open here; `None` when only its file exists (it has no
    /// run to stop and nothing to close: opening it just to say so would take its lock);
    /// UNKNOWN_SESSION when no file has that id.
    pub(crate) fn open_session(&self, id: &str) -> Result<Option<Arc<AgentSession>>> {
        let open = self.state.sessions.lock().get(id).cloned();
        if open.is_none() && self.session_file(id).is_none() {
            return Err(agent_error(
                codes::UNKNOWN_SESSION,
                format!("no session {id}"),
            ));
        }
        Ok(open)
    }

    /// The file of session `id` in the workspace's sessions folder, or in Pi's own sessions
    /// folder of this workspace; only a file of this workspace (another project's file in
    /// a shared folder is opened by its path: [`pi_core::session::Ownership`]).
    pub(crate) fn session_file(&self, id: &str) -> Option<std::path::PathBuf> {
        let root = self.state.root();
        let ours = |p: std::path::PathBuf| {
            (pi_core::session::file_ownership(&p, &root) == pi_core::session::Ownership::Workspace)
                .then_some(p)
        };
        find_session_file(&sessions_dir(&self.state.workspace()), id)
            .and_then(ours)
            .or_else(|| {
                let agent = pi_ai::models::agent_dir()?;
                find_session_file(&pi_core::session::pi_sessions_dir(&agent, &root), id)
                    .and_then(ours)
            })
    }

    /// The file of session `id` in the folders [`Backend::session_file`] searches when it is
    /// another project's, with the `cwd` its header names (for the error that says so).
    fn other_projects_file(&self, id: &str) -> Option<(std::path::PathBuf, String)> {
        let root = self.state.root();
        let mut dirs = vec![sessions_dir(&self.state.workspace())];
        dirs.extend(
            pi_ai::models::agent_dir().map(|a| pi_core::session::pi_sessions_dir(&a, &root)),
        );
        dirs.iter().find_map(|d| {
            let p = find_session_file(d, id)?;
            match pi_core::session::file_ownership(&p, &root) {
                pi_core::session::Ownership::Other(cwd) => Some((p, cwd)),
                pi_core::session::Ownership::Unknown => Some((p, "no cwd named".into())),
                pi_core::session::Ownership::Workspace => None,
            }
        })
    }

    /// A new session (and file) with `model` (default: the usual choice), `thinking` and
    /// `name`.
    pub(crate) fn create_session(
        &self,
        model: Option<&str>,
        thinking: Option<pi_ai::models::ThinkingLevel>,
        name: Option<&str>,
    ) -> Result<Arc<AgentSession>> {
        let st = &self.state;
        st.refuse_if_going_away()?;
        let ws = st.workspace();
        let (mut model, notice) = choose_model(&ws, model, st.init_model().as_deref())
            .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?;
        if let Some(n) = notice {
            let client = st.client.clone();
            tokio::spawn(async move { client.show_message(MessageType::INFO, n).await });
        }
        if let Some(level) = thinking {
            model.thinking_level = Some(model.clamp_thinking_level(level));
        }
        let setup = Arc::new(LspSetup { st: st.clone() });
        let s = AgentSession::create(ws, setup, model, name)
            .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
        st.sessions.lock().insert(s.id().to_string(), s.clone());
        Ok(s)
    }

    /// Opens the session file at `path` (or returns it when already open here).
    pub(crate) fn open_file(&self, path: &Path) -> Result<Arc<AgentSession>> {
        let st = &self.state;
        st.refuse_if_going_away()?;
        let ws = st.workspace();
        let opening = pi_core::harness::open_file(&ws, path, |id| {
            let s = st.sessions.lock().get(id).cloned()?;
            Some(s.file())
        });
        let (writer, loaded, notices) = match opening {
            Ok(Opening::Opened {
                writer,
                loaded,
                notices,
            }) => (writer, loaded, notices),
            Ok(Opening::AlreadyOpen(id)) => {
                return st.sessions.lock().get(&id).cloned().ok_or_else(|| {
                    agent_error(
                        codes::SESSION_IO,
                        format!("session {id} was closed while it was being opened"),
                    )
                })
            }
            Err(SessionError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(agent_error(
                    codes::UNKNOWN_SESSION,
                    format!("no session file {}", path.display()),
                ))
            }
            Err(e) => return Err(agent_error(codes::SESSION_IO, e.to_string())),
        };
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        for msg in notices {
            // A fork instead of a held file, repairs made while loading: told to the user,
            // not only logged (cases SESS-01, SESS-02, SESS-04).
            tracing::warn!("{msg}");
            let client = st.client.clone();
            tokio::spawn(async move { client.show_message(MessageType::WARNING, msg).await });
        }
        let setup = Arc::new(LspSetup { st: st.clone() });
        let s = AgentSession::resume(ws, setup, writer, loaded, st.init_model().as_deref())
            .map_err(|e| agent_error(codes::MODEL_UNAVAILABLE, e.to_string()))?;
        let id = s.id().to_string();
        Ok(st.sessions.lock().entry(id).or_insert(s).clone())
    }
}

/// How long opening a session waits for another process to release its file before it
/// continues in a fork (SESS-04). A server told to exit ends in well under this (LSPX-03:
/// its run aborted and paired, its lines saved, within 2 s), so a window reload finds its
/// session whole; a file a live process keeps open costs this wait once, then the fork.
pub(crate) const RELEASE_WAIT: Duration = Duration::from_secs(3);

/// Resolves when no other process holds the session file at `path`, or after
/// [`RELEASE_WAIT`]; polls without blocking a worker thread.
pub(crate) async fn wait_for_release(path: &Path) {
    let deadline = Instant::now() + RELEASE_WAIT;
    while pi_core::session::lock_held(path) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

//! [`Sessions`]: the one registry of a workspace's live sessions, shared by every front door
//! (the LSP edge, the headless `run`, an ACP edge).
//!
//! # How an edge uses it
//!
//! 1. Build one `Sessions` per workspace with the edge's [`SessionSetup`]
//!    ([`Sessions::new`]): the setup says what differs in this product (file system, who is
//!    asked, tools of its own) and, through [`SessionSetup::listeners`], where each session's
//!    events and notices go — that is how an edge *subscribes to events*: every session the
//!    registry opens or creates gets the setup's listeners before its first event, so nothing
//!    is missed. (For raw agent events besides those, [`AgentSession::subscribe`].) What the
//!    user should be told while opening (a fork made because another process holds the file,
//!    repairs, the model chosen instead of the one asked for) reaches
//!    [`SessionSetup::show_message`].
//! 2. Map the protocol's requests to calls: a new session [`Sessions::create`]; a session by
//!    id [`Sessions::open`] (live, or resumed from its file in `.pi/sessions/` or in Pi's own
//!    folder for this workspace, after waiting for another process to release it); by path
//!    [`Sessions::open_path`]; the list [`Sessions::list`]; closing [`Sessions::close`]. Then
//!    call the [`AgentSession`] itself (prompt, abort, queue, model, …): no edge needs the
//!    session's writer, tracker or agent.
//! 3. When the process goes away, [`Sessions::stop_all`] (bounded by [`STOP_BUDGET`]): from
//!    then on nothing is opened or created ([`Error::ShuttingDown`]).
//!
//! Errors are [`Error`]; an edge maps each variant to its own error codes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use pi_ai::models::ThinkingLevel;

use super::{
    choose_model, open_file_with, sessions_dir, setup, AgentSession, Opening, SessionSetup,
};
use crate::harness::queue::QueuedMessage;
use crate::resources::WorkspaceConfig;
use crate::session::EntryData;
use crate::session::{
    file_ownership, find_session_file, list_workspace_sessions, lock_held, pi_sessions_dir,
    ListCache, Ownership,
};
use crate::session::{SessionError, SessionSummary};

/// How long opening a session waits for another process to release its file before it
/// continues in a fork (SESS-04). A server told to exit ends in well under this (LSPX-03:
/// its run aborted and paired, its lines saved, within 2 s), so a window reload finds its
/// session whole; a file a live process keeps open costs this wait once, then the fork.
pub const RELEASE_WAIT: Duration = Duration::from_secs(3);

/// How long [`Sessions::stop_all`] waits for the runs and user commands to settle before it
/// kills what is left: the whole stop (kill grace and syncs included) stays well within 2 s.
pub const STOP_BUDGET: Duration = Duration::from_millis(1200);

/// What [`Sessions::open_with`] does with a session file another process holds (after
/// waiting [`RELEASE_WAIT`] for it to be released).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenHeld {
    /// Continue in a fork (a new id, told through [`SessionSetup::show_message`]; SESS-04):
    /// the LSP edge and headless, whose clients follow the id they are answered.
    #[default]
    Fork,
    /// Refuse with [`Error::Session`]`(`[`SessionError::Locked`]`)` (the holder's pid and the
    /// file): the client asked for this id and keeps using it (ACP).
    Refuse,
}

/// How [`Sessions::open_with`] opens a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenOptions {
    /// A file another process holds: fork it (default) or refuse.
    pub when_held: WhenHeld,
}

/// Why [`Sessions`] could not give a session.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No live session and no session file has this id (or no file is at this path).
    #[error("{0}")]
    UnknownSession(String),
    /// A value given is wrong (`field` names it).
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    /// [`Sessions::stop_all`] began: nothing is opened or created any more.
    #[error("the server is shutting down: no session is opened or created any more")]
    ShuttingDown,
    /// The model asked for (or any model) cannot be used.
    #[error("{0}")]
    Model(String),
    /// The session file could not be created, read or locked.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The session was closed while it was being opened.
    #[error("session {0} was closed while it was being opened")]
    Closed(String),
}

/// One line of [`Sessions::list`].
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// What the file says (header, name, first prompt, modification time).
    pub summary: SessionSummary,
    /// The session is live in this registry.
    pub open: bool,
}

/// What [`Sessions::stop_all`] (and [`stop`]) did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// Sessions that had a run, a compaction or a user command to stop.
    pub aborted: usize,
    /// Sessions whose run or user command had not settled within [`STOP_BUDGET`].
    pub unsettled: Vec<String>,
    /// Process groups still alive after the runs settled (killed then).
    pub groups_killed: usize,
    /// Writers that failed their final sync (the lock was released anyway).
    pub sync_failures: usize,
}

/// The live sessions of one workspace; see the module doc. Every method takes `&self`; share
/// it as `Arc<Sessions>`.
pub struct Sessions {
    ws: Arc<WorkspaceConfig>,
    setup: Arc<dyn SessionSetup>,
    /// The model a product asks for by default (`provider/id`), after the workspace's own
    /// choice ([`choose_model`]).
    default_model: Option<String>,
    live: Mutex<HashMap<String, Arc<AgentSession>>>,
    /// Set by [`Sessions::stop_all`]: a request in flight must not take a file back, or fork
    /// it, while it is closed.
    going_away: AtomicBool,
    /// What the last lists learned of the session files ([`Sessions::list`] reads only what
    /// was appended since).
    listed: ListCache,
}

impl Sessions {
    /// The registry of `ws`'s sessions, each built with `setup`; `default_model`: the model
    /// the product asks for when a request names none (the editor's `initializationOptions`).
    pub fn new(
        ws: Arc<WorkspaceConfig>,
        setup: Arc<dyn SessionSetup>,
        default_model: Option<String>,
    ) -> Sessions {
        Sessions {
            ws,
            setup,
            default_model,
            live: Mutex::new(HashMap::new()),
            going_away: AtomicBool::new(false),
            listed: ListCache::default(),
        }
    }

    /// The workspace the sessions run in.
    pub fn workspace(&self) -> &Arc<WorkspaceConfig> {
        &self.ws
    }

    /// The live session `id`, if it is open here (no file is touched).
    pub fn get(&self, id: &str) -> Option<Arc<AgentSession>> {
        self.live.lock().get(id).cloned()
    }

    /// Every live session (in no particular order).
    pub fn all(&self) -> Vec<Arc<AgentSession>> {
        self.live.lock().values().cloned().collect()
    }

    /// The live session `id`, or the one resumed from its file in `.pi/sessions/` (or in
    /// Pi's own sessions folder of this workspace). A file another process holds is waited
    /// for, up to [`RELEASE_WAIT`], before the session continues in a fork: a window reload
    /// starts the new server while the old one still saves and exits.
    pub async fn open(&self, id: &str) -> Result<Arc<AgentSession>, Error> {
        self.open_with(id, OpenOptions::default()).await
    }

    /// [`Sessions::open`] with `options`: with [`WhenHeld::Refuse`], a file another process
    /// still holds after [`RELEASE_WAIT`] is [`Error::Session`]`(`[`SessionError::Locked`]`)`
    /// (nothing forked, nothing written).
    pub async fn open_with(
        &self,
        id: &str,
        options: OpenOptions,
    ) -> Result<Arc<AgentSession>, Error> {
        if let Some(s) = self.get(id) {
            return Ok(s);
        }
        let path = self.file_of(id).ok_or_else(|| {
            Error::UnknownSession(match self.other_projects_file(id) {
                Some((file, cwd)) => format!(
                    "session {id} is another project's ({cwd}); open it by its path ({}) to continue it here",
                    file.display()
                ),
                None => format!("no session {id} in {}", sessions_dir(&self.ws).display()),
            })
        })?;
        wait_for_release(&path).await;
        self.open_file_with(&path, options, (None, None))
    }

    /// The session `id` when it is live here; `None` when only its file exists (it has no
    /// run to stop and nothing to close: opening it just to say so would take its lock);
    /// [`Error::UnknownSession`] when no file has that id.
    pub fn find(&self, id: &str) -> Result<Option<Arc<AgentSession>>, Error> {
        let open = self.get(id);
        if open.is_none() && self.file_of(id).is_none() {
            return Err(Error::UnknownSession(format!("no session {id}")));
        }
        Ok(open)
    }

    /// The file of session `id` in the workspace's sessions folder, or in Pi's own sessions
    /// folder of this workspace; only a file of this workspace (Pi's folder name is derived
    /// from the cwd with `/` → `-`, so `/a/b-c` and `/a/b/c` share one: another project's file
    /// there is opened only by its path, [`crate::session::Ownership`]).
    pub fn file_of(&self, id: &str) -> Option<PathBuf> {
        let root = self.ws.root();
        let ours = |p: PathBuf| (file_ownership(&p, root) == Ownership::Workspace).then_some(p);
        find_session_file(&sessions_dir(&self.ws), id)
            .and_then(ours)
            .or_else(|| {
                let agent = pi_ai::models::agent_dir()?;
                find_session_file(&pi_sessions_dir(&agent, root), id).and_then(ours)
            })
    }

    /// The file of session `id` when it is another project's (in a folder [`Sessions::file_of`]
    /// searches), with the `cwd` its header names — for the error that says whose it is.
    fn other_projects_file(&self, id: &str) -> Option<(PathBuf, String)> {
        let root = self.ws.root();
        let mut dirs = vec![sessions_dir(&self.ws)];
        dirs.extend(pi_ai::models::agent_dir().map(|a| pi_sessions_dir(&a, root)));
        dirs.iter().find_map(|d| {
            let p = find_session_file(d, id)?;
            match file_ownership(&p, root) {
                Ownership::Other(cwd) => Some((p, cwd)),
                Ownership::Unknown => Some((p, "no cwd named".into())),
                Ownership::Workspace => None,
            }
        })
    }

    /// A new session (and file) with `model` (`provider/id`; default: the usual choice),
    /// `thinking` (clamped to the model) and `name`. A model chosen instead of the one asked
    /// for is told through [`SessionSetup::show_message`].
    pub fn create(
        &self,
        model: Option<&str>,
        thinking: Option<ThinkingLevel>,
        name: Option<&str>,
    ) -> Result<Arc<AgentSession>, Error> {
        self.create_in(model, thinking, name, None)
    }

    /// [`Sessions::create`] with the new session's file at `at` (which must not exist;
    /// `None`: a new file in the sessions folder): `pi-lsp run --session <new path>`, as Pi
    /// 1.6 keeps a new session at the path `--session` names.
    pub fn create_in(
        &self,
        model: Option<&str>,
        thinking: Option<ThinkingLevel>,
        name: Option<&str>,
        at: Option<&Path>,
    ) -> Result<Arc<AgentSession>, Error> {
        self.refuse_if_going_away()?;
        // Pi 1.6 (`buildSessionOptions`): a new session nobody chose a model for starts in
        // settings' `enabledModels` scope, at its pattern's level when it gives one.
        let scope = match (model, &self.default_model) {
            (None, None) => super::scope::workspace_scope(&self.ws),
            _ => None,
        };
        for w in scope.iter().flat_map(|s| &s.warnings) {
            self.setup.show_message(MessageLevel::Warning, w.clone());
        }
        let settings = self.ws.settings();
        let scoped = scope
            .as_ref()
            .and_then(|s| super::scope::startup_choice(s, &settings));
        let (mut model, notice) = match scoped {
            Some(chosen) => {
                let id = chosen.model.full_id();
                let (mut m, notice) = choose_model(&self.ws, Some(id.as_str()), None)
                    .map_err(|e| Error::Model(e.to_string()))?;
                if let Some(level) = chosen.thinking_level {
                    m.thinking_level = Some(m.clamp_thinking_level(level));
                }
                (m, notice)
            }
            None => choose_model(&self.ws, model, self.default_model.as_deref())
                .map_err(|e| Error::Model(e.to_string()))?,
        };
        if let Some(n) = notice {
            self.setup.show_message(MessageLevel::Info, n.to_string());
        }
        if let Some(level) = thinking {
            model.thinking_level = Some(model.clamp_thinking_level(level));
        }
        let s = AgentSession::create_in(self.ws.clone(), self.setup.clone(), model, name, at)?;
        self.live.lock().insert(s.id().to_string(), s.clone());
        Ok(s)
    }

    /// Opens the session file at `path` (relative: to the workspace root; it must end in
    /// `.jsonl`), or returns its session when live here. A file another process holds is
    /// waited for first, as [`Sessions::open`] does.
    pub async fn open_path(&self, path: &Path) -> Result<Arc<AgentSession>, Error> {
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.ws.root().join(path)
        };
        if path.extension().is_none_or(|e| e != "jsonl") {
            return Err(Error::Invalid {
                field: "path",
                message: "expected a .jsonl session file".into(),
            });
        }
        let canonical = std::fs::canonicalize(&path).ok();
        let open_here = self
            .all()
            .iter()
            .any(|s| s.file() == path || std::fs::canonicalize(s.file()).ok() == canonical);
        if !open_here {
            // Another process releasing it (a window reload): resumed, not forked.
            wait_for_release(&path).await;
        }
        self.open_file(&path)
    }

    /// Opens the session file at `path` now (or returns its session when live here): a file
    /// another process holds is continued in a fork at once (a fork or clone just written
    /// by this process needs no wait). Repairs made while loading and a fork are told
    /// through [`SessionSetup::show_message`] (cases SESS-01, SESS-02, SESS-04).
    pub fn open_file(&self, path: &Path) -> Result<Arc<AgentSession>, Error> {
        self.open_file_with(path, OpenOptions::default(), (None, None))
    }

    /// [`Sessions::open_file`] for a run with the model and thinking level asked for (`run
    /// --session F --model M --thinking X`, Pi 1.6's `createAgentSession` options).
    ///
    /// `model` (`provider/id`, or an id) is the model the session runs at instead of the one
    /// its branch restores, recorded nowhere (Pi 1.6.0 appends no `model_change` for
    /// `--model` on a resumed file; the answers name the model they came from); an unknown
    /// model is [`Error::Model`]. `thinking` is what a file with messages and no recorded level
    /// gets recorded instead of the default (Pi 1.6 appends the level it runs at,
    /// `options.thinkingLevel` first); a file that records a level keeps it here (set the
    /// level afterwards: Pi 1.6.0 then appends the one asked for when it differs).
    pub fn open_file_for_run(
        &self,
        path: &Path,
        model: Option<&str>,
        thinking: Option<ThinkingLevel>,
    ) -> Result<Arc<AgentSession>, Error> {
        let model = match model {
            None => None,
            Some(m) => Some(
                choose_model(&self.ws, Some(m), None)
                    .map_err(|e| Error::Model(format!("model: {e}")))?
                    .0,
            ),
        };
        self.open_file_with(path, OpenOptions::default(), (model, thinking))
    }

    /// [`Sessions::open_file`] with `options` (with [`WhenHeld::Refuse`], a held file is
    /// [`SessionError::Locked`] at once) and the run's model and thinking level
    /// ([`Sessions::open_file_for_run`]).
    fn open_file_with(
        &self,
        path: &Path,
        options: OpenOptions,
        (model, thinking): (Option<pi_ai::Model>, Option<ThinkingLevel>),
    ) -> Result<Arc<AgentSession>, Error> {
        self.refuse_if_going_away()?;
        let fork = options.when_held == WhenHeld::Fork;
        let opening = open_file_with(&self.ws, path, |id| Some(self.get(id)?.file()), fork);
        let (writer, mut loaded, notices) = match opening {
            Ok(Opening::Opened {
                writer,
                loaded,
                notices,
            }) => (writer, loaded, notices),
            Ok(Opening::AlreadyOpen(id)) => return self.get(&id).ok_or(Error::Closed(id)),
            Err(SessionError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(Error::UnknownSession(format!(
                    "no session file {}",
                    path.display()
                )))
            }
            Err(e) => return Err(Error::Session(e)),
        };
        // Said once, by the product (`show_message`): each notice already holds the repair's
        // warnings; the log keeps them at debug level only.
        for w in &loaded.warnings {
            tracing::debug!("{w}");
        }
        for msg in notices {
            tracing::debug!("{msg}");
            self.setup.show_message(MessageLevel::Warning, msg);
        }
        let recorded = loaded.thinking_level.is_some();
        if let Some(m) = &model {
            loaded.model = Some((m.provider.clone(), m.id.clone()));
        }
        let s = AgentSession::resume(
            self.ws.clone(),
            self.setup.clone(),
            writer,
            loaded,
            self.default_model.as_deref(),
        )
        .map_err(|e| Error::Model(e.to_string()))?;
        if !recorded {
            record_missing_thinking_level(&s, thinking).map_err(Error::Session)?;
        }
        let id = s.id().to_string();
        Ok(self.live.lock().entry(id).or_insert(s).clone())
    }

    /// The workspace's session files — its `.pi/sessions/` and Pi's own sessions folder for
    /// it — whose header's `cwd` is this workspace (another project's files sharing Pi's
    /// folder are left out: [`crate::session::Ownership`]), most recent activity first, each
    /// marked when live here.
    pub fn list(&self) -> Vec<Listed> {
        let root = self.ws.root();
        let mut dirs = vec![sessions_dir(&self.ws)];
        dirs.extend(pi_ai::models::agent_dir().map(|a| pi_sessions_dir(&a, root)));
        let found = list_workspace_sessions(&dirs, root, &self.listed);
        let live = self.live.lock();
        let mut out: Vec<Listed> = found
            .into_iter()
            .map(|summary| Listed {
                open: live.contains_key(&summary.id),
                summary,
            })
            .collect();
        out.sort_by_key(|l| std::cmp::Reverse(l.summary.last_activity_ms));
        out
    }

    /// Closes the live session `id` ([`AgentSession::close`]: its run aborted, its queue
    /// dropped, its file synced and released: later appends through a session still held
    /// elsewhere fail) and forgets it; returns the dropped queue, or `None`
    /// when it was not live (its file exists: nothing to close). [`Error::UnknownSession`]
    /// when no file has that id. Run it to its end (in a task of its own when the request
    /// can be cancelled): a close stopped halfway is neither the state before nor after.
    pub async fn close(&self, id: &str) -> Result<Option<Vec<QueuedMessage>>, Error> {
        let Some(session) = self.find(id)? else {
            return Ok(None);
        };
        let dropped = session.close().await;
        self.live.lock().remove(id);
        Ok(Some(dropped))
    }

    /// [`Error::ShuttingDown`] once [`Sessions::stop_all`] began.
    pub fn refuse_if_going_away(&self) -> Result<(), Error> {
        if self.going_away.load(Ordering::SeqCst) {
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }

    /// Stops every live session as the process goes away ([`stop`]) and forgets them; from
    /// the start nothing is opened or created any more. Returns within [`STOP_BUDGET`] plus
    /// the kill grace.
    pub async fn stop_all(&self) -> StopReport {
        self.going_away.store(true, Ordering::SeqCst);
        let sessions: Vec<_> = self.live.lock().drain().map(|(_, s)| s).collect();
        let report = stop(&sessions).await;
        if report.aborted > 0 || report.groups_killed > 0 {
            tracing::debug!(
                "stopped {} session(s) with work in progress; {} process group(s) killed; {} not settled in time",
                report.aborted,
                report.groups_killed,
                report.unsettled.len()
            );
        }
        report
    }
}

/// How much a message for the user matters ([`SessionSetup::show_message`]; LSP's
/// `MessageType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageLevel {
    /// Information (a model chosen instead of the one asked for).
    Info,
    /// Something went differently than asked (a fork instead of a held file, repairs).
    Warning,
}

/// Stops `sessions`, within [`STOP_BUDGET`] plus the kill grace (case LSPX-03), in this
/// order:
/// 1. aborts every run of every session (a tool running, a stream from the model, a
///    permission question, a compaction) and the user's own shell command of each;
/// 2. waits for them to settle: the run's own abort path kills the command's process group
///    and writes the paired tool results (aborted, `isError: true`, Pi's `Command aborted`)
///    and the aborted assistant entry, and the user's command writes its `bashExecution`
///    entry (`cancelled: true`);
/// 3. kills every process group a `bash` command of this process was started in that still
///    has a live member ([`crate::tools::kill_all_groups`]: a run that did not settle in
///    time, and background children a finished command left behind);
/// 4. closes every session writer (`fdatasync`, then the `.lock` file's `flock` is released
///    and the file removed).
pub async fn stop(sessions: &[Arc<AgentSession>]) -> StopReport {
    let deadline = tokio::time::Instant::now() + STOP_BUDGET;
    let mut report = StopReport::default();
    for s in sessions {
        if s.abort_for_stop() {
            report.aborted += 1;
        }
    }
    let settled = futures::future::join_all(sessions.iter().map(|s| async move {
        tokio::time::timeout_at(deadline, s.settle_all())
            .await
            .is_ok()
    }))
    .await;
    for (s, ok) in sessions.iter().zip(settled) {
        if !ok {
            tracing::warn!(
                "session {}: its run did not end within {} ms of the abort; its processes are killed and the file closed as it is",
                s.id(),
                STOP_BUDGET.as_millis()
            );
            report.unsettled.push(s.id().to_string());
        }
    }
    report.groups_killed = crate::tools::kill_all_groups().await;
    // MCP servers: stdin closed, then terminate, then kill (pi_core::mcp).
    crate::mcp::shutdown_all().await;
    for s in sessions {
        if let Err(e) = s.close_file() {
            tracing::warn!("session {}: final sync failed: {e}", s.id());
            report.sync_failures += 1;
        }
    }
    report
}

/// Resolves when no other process holds the session file at `path`, or after
/// [`RELEASE_WAIT`]; polls without blocking a worker thread.
pub async fn wait_for_release(path: &Path) {
    let deadline = tokio::time::Instant::now() + RELEASE_WAIT;
    while lock_held(path) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl AgentSession {
    /// Step 1 of [`stop`]: aborts the run and the user's command; whether there was work.
    fn abort_for_stop(&self) -> bool {
        let run = self.agent.abort();
        let command = self.tracker.abort_bash();
        run || command || self.agent.is_streaming()
    }

    /// Step 2 of [`stop`]: the run idle and the user's command ended.
    async fn settle_all(&self) {
        let run = self.agent.wait_for_idle();
        let command = async {
            while self.tracker.bash_running() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        futures::future::join(run, command).await;
    }

    /// Step 4 of [`stop`]: the file synced and released (even when a writer panicked
    /// holding it: closing appends nothing, it syncs what is written and unlocks).
    pub(super) fn close_file(&self) -> Result<(), SessionError> {
        crate::session::lock_writer_for_close(&self.writer).close()
    }
}

/// Pi 1.6's "restore missing settings metadata for older sessions" (`createAgentSession`,
/// `dist/core/sdk.js`): a resumed file with messages but no `thinking_level_change` on its
/// branch runs at `defaultThinkingLevel`, else `medium`, clamped to the model
/// ([`setup::resumed_thinking_level`]) — or at `asked` (`--thinking`), clamped, when given —
/// and gets that level appended at once, as the next entry after its leaf (before the run's
/// prompt; also `off` for a model without reasoning). Called for a file whose branch records
/// no level ([`crate::session::LoadedSession::thinking_level`] `None`).
fn record_missing_thinking_level(
    s: &AgentSession,
    asked: Option<ThinkingLevel>,
) -> Result<(), SessionError> {
    let mut w = s.lock_writer()?;
    let Some(leaf) = w.leaf().map(str::to_string) else {
        return Ok(());
    };
    if w.tree().agent_message_count(Some(&leaf)) == 0 {
        return Ok(());
    }
    let mut model = s.model();
    let level = match asked {
        Some(level) => model.clamp_thinking_level(level),
        None => setup::resumed_thinking_level(&s.ws.settings(), &model),
    };
    w.append(EntryData::ThinkingLevelChange {
        thinking_level: level.as_str().to_string(),
    })?;
    drop(w);
    model.thinking_level = Some(level);
    s.live.lock().model = model;
    s.install_config();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{AgentEvent, WeakAgent};
    use crate::approval::{ApprovalPolicy, Gate};
    use crate::extension::{ExtensionErrorInfo, ExtensionUi};
    use crate::fs::{DiskFs, Fs};
    use crate::harness::{Notice, SessionListener, Tracker};
    use crate::settings::Settings;
    use crate::tools::BeforeBash;

    /// Remembers the save failures it is told.
    #[derive(Default)]
    struct Failures(parking_lot::Mutex<Vec<String>>);

    #[async_trait::async_trait]
    impl SessionListener for Failures {
        async fn event(&self, _event: AgentEvent, notices: Vec<Notice>) {
            for n in notices {
                self.notice(n).await;
            }
        }
        async fn notice(&self, notice: Notice) {
            if let Notice::SaveFailed { error } = notice {
                self.0.lock().push(error);
            }
        }
    }

    struct NoUi;

    #[async_trait::async_trait]
    impl ExtensionUi for NoUi {
        async fn extension_error(&self, _error: ExtensionErrorInfo) {}
    }

    struct Setup {
        root: PathBuf,
        failures: Arc<Failures>,
    }

    /// The sessions of an untrusted workspace at `dir` (its agent folder inside it), whose
    /// listener collects the failures told into `failures`.
    fn sessions_at(dir: &std::path::Path, failures: Arc<Failures>) -> Sessions {
        let root = dir.canonicalize().unwrap();
        std::fs::create_dir_all(root.join("agent")).unwrap();
        let ws = Arc::new(WorkspaceConfig::new(
            root.clone(),
            Some(root.join("agent")),
            false,
        ));
        Sessions::new(ws, Arc::new(Setup { root, failures }), None)
    }

    impl SessionSetup for Setup {
        fn fs(&self, _session_id: &str) -> (Arc<dyn Fs>, Option<BeforeBash>) {
            (Arc::new(DiskFs::new(self.root.clone())), None)
        }
        fn gate(&self, _ws: &WorkspaceConfig, _id: &str, _t: &Arc<Tracker>) -> Arc<Gate> {
            Arc::new(Gate::new(
                ApprovalPolicy::ApproveAll,
                Vec::new(),
                None,
                None,
                "nobody asks",
            ))
        }
        fn default_policy(&self, _settings: &Settings) -> ApprovalPolicy {
            ApprovalPolicy::ApproveAll
        }
        fn extension_ui(&self, _session_id: &str) -> Arc<dyn ExtensionUi> {
            Arc::new(NoUi)
        }
        fn listeners(&self, _id: &str, _agent: &WeakAgent) -> Vec<Arc<dyn SessionListener>> {
            vec![self.failures.clone()]
        }
    }

    /// What happens to a new session between its creation and its first prompt.
    #[derive(Clone, Copy)]
    enum Between {
        Nothing,
        /// Auto retry turned off: a configuration of its own is made then.
        Switch,
        /// A settings file written.
        Settings,
        /// Plan mode turned on (its tool filter changes the tools).
        Plan,
        /// The workspace's `AGENTS.md` written.
        Instructions,
    }

    /// What a case of [`a_start_builds_the_configuration_only_when_what_it_was_built_from_changed`]
    /// saw: (configurations built by the first prompt's start, whether the run started on the
    /// configuration installed before the prompt, its retry switch, its compaction reserve,
    /// whether its system prompt holds the `AGENTS.md` written, configurations built by a
    /// later prompt).
    async fn first_and_later_prompt(
        sessions: &Sessions,
        (settings, agents_md): (&Path, &Path),
        text: &str,
        between: Between,
    ) -> (u64, bool, bool, u64, bool, u64) {
        let s = sessions.create(None, None, None).unwrap();
        match between {
            Between::Nothing => {}
            Between::Switch => s.set_auto_retry(false),
            Between::Settings => {
                std::fs::write(settings, r#"{"compaction": {"reserveTokens": 4096}}"#).unwrap()
            }
            Between::Plan => {
                s.plan().unwrap().set_plan_mode(true).await.unwrap();
            }
            Between::Instructions => std::fs::write(agents_md, "Use tabs.\n").unwrap(),
        }
        let (before, built) = (s.agent_handle().config_generation(), s.config_builds());
        s.prompt(text, Vec::new(), None, None).await.unwrap();
        let (same, retry, reserve, told) =
            s.agent_handle().with_config_generation(|c, generation| {
                let reserve = c.compaction.as_ref().map(|c| c.settings.reserve_tokens);
                let told = c.system_prompt.contains("Use tabs.");
                (
                    generation == before,
                    c.retry.enabled,
                    reserve.unwrap_or(0),
                    told,
                )
            });
        let by_start = s.config_builds() - built;
        tokio::time::timeout(Duration::from_secs(5), s.wait_for_idle())
            .await
            .unwrap();
        let built = s.config_builds();
        s.prompt("again", Vec::new(), None, None).await.unwrap();
        let by_later = s.config_builds() - built;
        tokio::time::timeout(Duration::from_secs(5), s.wait_for_idle())
            .await
            .unwrap();
        let _ = std::fs::remove_file(settings);
        let _ = std::fs::remove_file(agents_md);
        (by_start, same, retry, reserve, told, by_later)
    }

    /// A start builds the run's configuration only when what the one installed last was built
    /// from changed, whichever front door created the session (nothing to set): a new
    /// session's first prompt runs on the configuration its creation built, and a prompt after
    /// a switch turned runs on the one that made; a settings file or `AGENTS.md` written in
    /// between, plan mode turned on in between, or a `/` text (an extension command may change what the
    /// configuration reads) make the start build afresh, and so does every later prompt (a run
    /// may change what the configuration reads).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_start_builds_the_configuration_only_when_what_it_was_built_from_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let sessions = sessions_at(tmp.path(), Arc::default());
        let root = tmp.path().canonicalize().unwrap();
        let files = (&*root.join("agent/settings.json"), &*root.join("AGENTS.md"));
        let reserve = crate::config::types::CompactionSettings::default().reserve_tokens;
        let mut seen = Vec::new();
        for (text, between) in [
            ("go", Between::Nothing),
            ("go", Between::Switch),
            ("/go", Between::Nothing),
            ("go", Between::Settings),
            ("go", Between::Plan),
            ("go", Between::Instructions),
        ] {
            seen.push(first_and_later_prompt(&sessions, files, text, between).await);
        }
        assert_eq!(
            seen,
            [
                (0, true, true, reserve, false, 1),
                (0, true, false, reserve, false, 1),
                (1, false, true, reserve, false, 1),
                (1, false, true, 4096, false, 1),
                (1, false, true, reserve, false, 1),
                (1, false, true, reserve, true, 1),
            ]
        );
        sessions.stop_all().await;
    }

    /// The one poison policy on the whole session: a writer poisoned by a panic mid-append is
    /// written on no more (the run stops, the user is told), and the stop still syncs it and
    /// releases the file.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_that_cannot_save_says_so_stops_the_run_and_still_releases_its_file() {
        let tmp = tempfile::tempdir().unwrap();
        let failures = Arc::new(Failures::default());
        let sessions = sessions_at(tmp.path(), failures.clone());
        let s = sessions.create(None, None, None).unwrap();
        let file = s.file();
        let w = s.writer.clone();
        let _ = std::thread::spawn(move || {
            let _guard = w.lock().unwrap();
            panic!("poison the writer");
        })
        .join();
        s.prompt("go", Vec::new(), None, None).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), s.wait_for_idle())
            .await
            .unwrap();
        let told = failures.0.lock().clone();
        assert!(!told.is_empty(), "no save failure told");
        assert!(told[0].contains("panicked while appending"), "{told:?}");
        assert!(matches!(s.set_name("x"), Err(SessionError::Io { .. })));
        assert_eq!(s.file(), file);
        assert!(lock_held(&file));
        assert_eq!(sessions.stop_all().await, StopReport::default());
        assert!(!lock_held(&file));
    }
}

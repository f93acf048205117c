//! What ACP adds to its sessions ([`SessionSetup`], one per workspace registry): the file system through the client when it
//! offers one ([`ClientFs`]), bash through the client's terminal when it offers one
//! ([`TerminalExecutor`]), questions as `session/request_permission` ([`AcpAsker`]), the
//! events as `session/update` ([`AcpSink`]), extension dialogs unavailable (ACP has no such
//! request; extension failures are logged).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use pi_core::agent::WeakAgent;
use pi_core::approval::{ApprovalPolicy, Asker, Gate};
use pi_core::extension::{ExtensionErrorInfo, ExtensionUi};
use pi_core::fs::{DiskFs, Fs};
use pi_core::harness::{MessageLevel, SessionListener, SessionSetup, Tracker};
use pi_core::resources::WorkspaceConfig;
use pi_core::sandbox::Approver;
use pi_core::settings::Settings;
use pi_core::tools::{BashExecutor, BeforeBash};

use crate::ask::AcpAsker;
use crate::client_fs::ClientFs;
use crate::rpc::Conn;
use crate::terminal::TerminalExecutor;
use crate::updates::{AcpSink, Terminals};

/// The system prompt guideline when edits go through the client's buffers.
pub const CLIENT_FS_GUIDELINE: &str = "File edits are applied through the user's editor, where they can be reviewed and undone; read shows unsaved editor changes";

/// The client's capabilities a session's parts follow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientFsCaps {
    /// `fs.readTextFile`.
    pub read: bool,
    /// `fs.writeTextFile`.
    pub write: bool,
    /// `session.compaction`: the client takes `compaction_update`.
    pub compaction: bool,
    /// `terminal`: bash runs through `terminal/*` ([`crate::terminal`]).
    pub terminal: bool,
}

/// What ACP keeps per session besides the harness's own: who asks its questions and its
/// model's context window (for `usage_update.size`).
pub struct PerSession {
    /// Asks the client (`session/request_permission`) for this session.
    pub asker: Arc<AcpAsker>,
    /// The model's context window in tokens (the edge keeps it current).
    pub context_window: Arc<Mutex<u64>>,
    /// The session's title: its name, else its first prompt (the edge sets it on opening;
    /// the sink from the first prompt when empty).
    pub title: Arc<Mutex<Option<String>>>,
    /// The session's calls running in the client's terminal (the executor notes them, the
    /// sink shows them as the terminal).
    pub terminals: Terminals,
    /// Runs the session's bash commands in the client's terminal (made on first use).
    executor: Mutex<Option<Arc<TerminalExecutor>>>,
}

/// The ACP setup of one workspace's [`pi_core::harness::Sessions`]: one per folder set this
/// connection opens sessions in. Every hook is told the session's id, so the parts that name
/// it on the wire (`fs/*`, `session/request_permission`, `session/update`) are made per
/// session; messages said while a session is being opened wait in [`AcpSetup::take_notices`].
pub struct AcpSetup {
    conn: Arc<Conn>,
    root: PathBuf,
    fs_caps: ClientFsCaps,
    per: Mutex<HashMap<String, Arc<PerSession>>>,
    notices: Mutex<Vec<String>>,
}

impl AcpSetup {
    /// The setup of sessions in `root` over `conn`.
    pub fn new(conn: Arc<Conn>, root: PathBuf, fs_caps: ClientFsCaps) -> AcpSetup {
        AcpSetup {
            conn,
            root,
            fs_caps,
            per: Mutex::default(),
            notices: Mutex::default(),
        }
    }

    /// Session `id`'s ACP state (made on first use).
    pub fn per_session(&self, id: &str) -> Arc<PerSession> {
        self.per
            .lock()
            .entry(id.to_string())
            .or_insert_with(|| {
                Arc::new(PerSession {
                    asker: Arc::new(AcpAsker::new(
                        self.conn.clone(),
                        id.to_string(),
                        self.root.clone(),
                    )),
                    context_window: Arc::new(Mutex::new(0)),
                    title: Arc::default(),
                    terminals: Terminals::default(),
                    executor: Mutex::default(),
                })
            })
            .clone()
    }

    /// Forgets session `id`'s state (it was closed).
    pub fn forget(&self, id: &str) {
        self.per.lock().remove(id);
    }

    /// The messages the registry said while opening or creating a session (a fork, repairs, a
    /// model chosen instead of the one asked for), for the edge to tell that session's user.
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.notices.lock())
    }
}

impl SessionSetup for AcpSetup {
    fn fs(&self, session_id: &str) -> (Arc<dyn Fs>, Option<BeforeBash>) {
        if self.fs_caps.read || self.fs_caps.write {
            let fs = ClientFs::new(
                self.conn.clone(),
                session_id.to_string(),
                self.root.clone(),
                self.fs_caps.read,
                self.fs_caps.write,
            );
            (Arc::new(fs), None)
        } else {
            (Arc::new(DiskFs::new(self.root.clone())), None)
        }
    }

    fn guidelines(&self) -> Vec<String> {
        if self.fs_caps.write {
            vec![CLIENT_FS_GUIDELINE.to_string()]
        } else {
            Vec::new()
        }
    }

    fn sandbox_approver(&self, session_id: &str) -> Option<Arc<dyn Approver>> {
        Some(self.per_session(session_id).asker.clone())
    }

    /// The client's terminal when it offers one (`clientCapabilities.terminal`), with this
    /// binary as the launcher; else `None` (bash runs here).
    fn bash_executor(&self, session_id: &str) -> Option<Arc<dyn BashExecutor>> {
        if !self.fs_caps.terminal {
            return None;
        }
        let per = self.per_session(session_id);
        let mut slot = per.executor.lock();
        if slot.is_none() {
            let launcher = match std::env::current_exe() {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!("terminal: cannot find this binary ({e}); bash runs here");
                    return None;
                }
            };
            *slot = TerminalExecutor::new(
                self.conn.clone(),
                session_id.to_string(),
                launcher,
                per.terminals.clone(),
            )
            .map(Arc::new);
        }
        slot.clone().map(|e| e as Arc<dyn BashExecutor>)
    }

    fn gate(&self, ws: &WorkspaceConfig, session_id: &str, tracker: &Arc<Tracker>) -> Arc<Gate> {
        let asker = self.per_session(session_id).asker.clone();
        asker.set_tracker(tracker.clone());
        let settings = ws.settings();
        Arc::new(Gate::new(
            self.default_policy(&settings),
            pi_core::approval::rules_from_settings(&settings.merged),
            Some(asker as Arc<dyn Asker>),
            ws.trusted().then(|| ws.root().to_path_buf()),
            "nobody can be asked for approval here",
        ))
    }

    /// The settings' `approvalPolicy`, else the editor default (edits apply, commands ask).
    fn default_policy(&self, settings: &Settings) -> ApprovalPolicy {
        settings
            .approval_policy
            .unwrap_or(pi_core::approval::EDITOR_DEFAULT)
    }

    fn extension_ui(&self, _session_id: &str) -> Arc<dyn ExtensionUi> {
        Arc::new(AcpExtensionUi)
    }

    fn listeners(&self, session_id: &str, _agent: &WeakAgent) -> Vec<Arc<dyn SessionListener>> {
        let per = self.per_session(session_id);
        vec![Arc::new(AcpSink::new(
            self.conn.clone(),
            session_id.to_string(),
            self.root.clone(),
            per.context_window.clone(),
            per.title.clone(),
            self.fs_caps.compaction,
            per.terminals.clone(),
        ))]
    }

    /// Kept for the session being opened: the edge sends it as an `agent_message_chunk`
    /// once the client knows the session.
    fn show_message(&self, _level: MessageLevel, message: String) {
        tracing::info!("{message}");
        self.notices.lock().push(message);
    }
}

/// Extensions under ACP: no dialogs (cancelled, as without a UI), failures logged.
struct AcpExtensionUi;

#[async_trait]
impl ExtensionUi for AcpExtensionUi {
    async fn extension_error(&self, e: ExtensionErrorInfo) {
        tracing::warn!(
            "extension {} failed ({}): {}",
            e.extension_path,
            e.event,
            e.error
        );
    }
}

//! What ACP adds to a session ([`SessionSetup`]): the file system through the client when it
//! offers one ([`ClientFs`]), questions as `session/request_permission` ([`AcpAsker`]), the
//! events as `session/update` ([`AcpSink`]), extension dialogs unavailable (ACP has no such
//! request; extension failures are logged).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use parking_lot::Mutex;
use pi_core::agent::WeakAgent;
use pi_core::approval::{ApprovalPolicy, Asker, Gate};
use pi_core::extension::{ExtensionErrorInfo, ExtensionUi};
use pi_core::fs::{DiskFs, Fs};
use pi_core::harness::{SessionListener, SessionSetup, Tracker};
use pi_core::resources::WorkspaceConfig;
use pi_core::sandbox::Approver;
use pi_core::settings::Settings;
use pi_core::tools::BeforeBash;

use crate::ask::AcpAsker;
use crate::client_fs::ClientFs;
use crate::rpc::Conn;
use crate::updates::AcpSink;

/// The system prompt guideline when edits go through the client's buffers.
pub const CLIENT_FS_GUIDELINE: &str = "File edits are applied through the user's editor, where they can be reviewed and undone; read shows unsaved editor changes";

/// The client's file system capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientFsCaps {
    /// `fs.readTextFile`.
    pub read: bool,
    /// `fs.writeTextFile`.
    pub write: bool,
}

/// One session's ACP setup.
pub struct AcpSetup {
    conn: Arc<Conn>,
    root: PathBuf,
    fs_caps: ClientFsCaps,
    /// The session's id, known once its file exists (set when the session is built).
    pub session_id: Arc<OnceLock<String>>,
    asker: Arc<AcpAsker>,
    /// The model's context window in tokens (the session keeps it current).
    pub context_window: Arc<Mutex<u64>>,
}

impl AcpSetup {
    /// The setup of a session in `root` over `conn`.
    pub fn new(conn: Arc<Conn>, root: PathBuf, fs_caps: ClientFsCaps) -> AcpSetup {
        let session_id = Arc::new(OnceLock::new());
        let asker = Arc::new(AcpAsker::new(
            conn.clone(),
            session_id.clone(),
            root.clone(),
        ));
        AcpSetup {
            conn,
            root,
            fs_caps,
            session_id,
            asker,
            context_window: Arc::new(Mutex::new(0)),
        }
    }
}

impl SessionSetup for AcpSetup {
    fn fs(&self) -> (Arc<dyn Fs>, Option<BeforeBash>) {
        if self.fs_caps.read || self.fs_caps.write {
            let fs = ClientFs::new(
                self.conn.clone(),
                self.session_id.clone(),
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
        let _ = self.session_id.set(session_id.to_string());
        Some(self.asker.clone())
    }

    fn gate(&self, ws: &WorkspaceConfig, session_id: &str, tracker: &Arc<Tracker>) -> Arc<Gate> {
        let _ = self.session_id.set(session_id.to_string());
        self.asker.set_tracker(tracker.clone());
        let settings = ws.settings();
        Arc::new(Gate::new(
            self.default_policy(&settings),
            pi_core::approval::rules_from_settings(&settings.merged),
            Some(self.asker.clone() as Arc<dyn Asker>),
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
        let _ = self.session_id.set(session_id.to_string());
        vec![Arc::new(AcpSink::new(
            self.conn.clone(),
            session_id.to_string(),
            self.root.clone(),
            self.context_window.clone(),
        ))]
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

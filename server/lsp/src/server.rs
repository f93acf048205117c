//! The LSP server: lifecycle, document sync, and the one method table of the `agent/*`
//! methods (their handlers are in [`crate::methods`]; the sessions they work on are
//! [`pi_core::harness::AgentSession`]s, kept by [`crate::sessions`]).
//!
//! Handlers answer quickly; a run goes on in its own task and streams `agent/event`
//! notifications (plus work-done progress when the client supports it). Each session has at
//! most one active run; a prompt during a run must say `streamingBehavior` and is queued.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use pi_core::harness::{AgentSession, Sessions};
use pi_core::resources::WorkspaceConfig;
use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::{
    DidChangeTextDocumentParams, DidCloseTextDocumentParams, DidOpenTextDocumentParams,
    InitializeParams, InitializeResult, InitializedParams, MessageType, ServerCapabilities,
    ServerInfo, TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions,
};
use tower_lsp_server::{Client, LanguageServer, LspService};

use crate::documents::{uri_path, Documents};
use crate::editor_fs::EditorCaps;
use crate::protocol::{agent_error, codes};

/// Shared server state.
pub struct State {
    pub(crate) client: Client,
    docs: Arc<Documents>,
    caps: Mutex<EditorCaps>,
    root: Mutex<PathBuf>,
    /// The workspace's configuration and trust (set by `initialize`).
    workspace: Mutex<Arc<WorkspaceConfig>>,
    /// `initializationOptions.approvalPolicy`: the editor's own setting.
    pub(crate) init_approval: Mutex<Option<pi_core::approval::ApprovalPolicy>>,
    /// The workspace's live sessions (set by `initialize`).
    sessions: std::sync::OnceLock<Arc<Sessions>>,
    /// Each session's event sink, by session id: `agent/messages` answers with what it sent
    /// ([`crate::sink::LspSink::sent`]); an extension's error is numbered by it.
    pub(crate) sinks: Mutex<HashMap<String, std::sync::Weak<crate::sink::LspSink>>>,
    /// See [`Backend::shutdown_received`].
    shutdown_received: Arc<AtomicBool>,
    /// The client answers `agent/ui/request` (`experimental.agent.ui`).
    extension_ui: AtomicBool,
    /// Tools the editor declared and whether it answers `agent/diagnostics`.
    pub(crate) editor_tools: crate::editor_tools::EditorTools,
    /// Between a successful `initialize` and `shutdown`: document sync is applied (by
    /// [`crate::dispatch::Dispatch`] in the read loop).
    accepting_sync: AtomicBool,
    /// `initializationOptions.coalesceDeltasMs` (see [`crate::sink`]).
    pub(crate) coalesce_ms: std::sync::atomic::AtomicU64,
    /// `initializationOptions.compactDeltas` and the sessions' `ref`s (see [`crate::delta`]).
    pub(crate) compact_deltas: crate::delta::CompactDeltas,
}

/// The language server.
pub struct Backend {
    pub(crate) state: Arc<State>,
}

impl Backend {
    /// Set once the client's `shutdown` request has been answered. The binary exits with 0
    /// only when it is set, 1 otherwise (`exit` or end of input without `shutdown`; LSP 3.17
    /// "exit Notification").
    pub fn shutdown_received(&self) -> Arc<AtomicBool> {
        self.state.shutdown_received.clone()
    }
}

/// The one method table: every client → server `agent/*` request with its handler. It makes
/// both the registrations ([`service`]) and [`METHODS`], the list `initialize` advertises in
/// `experimental.agent.methods`, so the two cannot disagree (the test
/// `every_advertised_method_is_registered` checks the running service against the list).
macro_rules! method_table {
    ($($name:literal => $handler:path,)*) => {
        /// Every client → server `agent/*` method, as advertised in `initialize`'s
        /// `experimental.agent.methods`.
        pub const METHODS: &[&str] = &[$($name),*];

        fn register(
            builder: tower_lsp_server::LspServiceBuilder<Backend>,
        ) -> tower_lsp_server::LspServiceBuilder<Backend> {
            builder$(.custom_method($name, $handler))*
        }
    };
}

method_table! {
    "agent/prompt" => Backend::agent_prompt,
    "agent/steer" => Backend::agent_steer,
    "agent/followUp" => Backend::agent_follow_up,
    "agent/abort" => Backend::agent_abort,
    "agent/sendMessage" => Backend::agent_send_message,
    "agent/messages" => Backend::agent_messages,
    "agent/state" => Backend::agent_state,
    "agent/session/new" => Backend::session_new,
    "agent/session/list" => Backend::session_list,
    "agent/session/open" => Backend::session_open,
    "agent/session/close" => Backend::session_close,
    "agent/session/fork" => Backend::session_fork,
    "agent/session/clone" => Backend::session_clone,
    "agent/session/tree" => Backend::session_tree,
    "agent/session/history" => Backend::session_history,
    "agent/session/changes" => Backend::session_changes,
    "agent/session/rewind" => Backend::session_rewind,
    "agent/session/branch" => Backend::session_branch,
    "agent/session/label" => Backend::session_label,
    "agent/session/name" => Backend::session_name,
    "agent/session/stats" => Backend::session_stats,
    "agent/session/export" => Backend::session_export,
    "agent/model/list" => Backend::model_list,
    "agent/model/set" => Backend::model_set,
    "agent/model/cycle" => Backend::model_cycle,
    "agent/thinking/set" => Backend::thinking_set,
    "agent/thinking/cycle" => Backend::thinking_cycle,
    "agent/queue/setModes" => Backend::queue_set_modes,
    "agent/queue/clear" => Backend::queue_clear,
    "agent/queue/remove" => Backend::queue_remove,
    "agent/queue/edit" => Backend::queue_edit,
    "agent/retry/set" => Backend::retry_set,
    "agent/retry/abort" => Backend::retry_abort,
    "agent/continue" => Backend::agent_continue,
    "agent/bash" => Backend::agent_bash,
    "agent/bash/abort" => Backend::bash_abort,
    "agent/compact" => Backend::agent_compact,
    "agent/compaction/set" => Backend::compaction_set,
    "agent/permissions/set" => Backend::permissions_set,
    "agent/extension/commands" => Backend::extension_commands,
    "agent/tools/register" => Backend::tools_register,
    "agent/tools/unregister" => Backend::tools_unregister,
    "agent/commands" => Backend::commands,
    "agent/session/forkMessages" => Backend::fork_messages,
    "agent/lastAssistantText" => Backend::last_assistant_text,
    "agent/mcp/list" => Backend::mcp_list,
    "agent/mcp/enable" => Backend::mcp_enable,
    "agent/mcp/disable" => Backend::mcp_disable,
    "agent/mcp/setExposure" => Backend::mcp_set_exposure,
    "agent/mcp/reconnect" => Backend::mcp_reconnect,
    "agent/plan/get" => Backend::plan_get,
    "agent/plan/set" => Backend::plan_set,
}

/// Builds the service with the `agent/*` methods registered.
pub fn service() -> (LspService<Backend>, tower_lsp_server::ClientSocket) {
    let builder = LspService::build(|client| {
        crate::logging::attach(client.clone());
        Backend {
            state: Arc::new(State {
                client,
                docs: Arc::new(Documents::default()),
                caps: Mutex::new(EditorCaps::default()),
                root: Mutex::new(PathBuf::from(".")),
                workspace: Mutex::new(WorkspaceConfig::with_default_agent_dir(
                    PathBuf::from("."),
                    false,
                )),
                init_approval: Mutex::new(None),
                sessions: std::sync::OnceLock::new(),
                sinks: Mutex::new(HashMap::new()),
                shutdown_received: Default::default(),
                extension_ui: AtomicBool::new(false),
                editor_tools: Default::default(),
                accepting_sync: AtomicBool::new(false),
                coalesce_ms: crate::sink::default_coalesce_ms(),
                compact_deltas: Default::default(),
            }),
        }
    });
    register(builder).finish()
}

impl State {
    pub(crate) fn caps(&self) -> EditorCaps {
        *self.caps.lock()
    }

    /// The open documents.
    pub(crate) fn docs(&self) -> Arc<Documents> {
        self.docs.clone()
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.root.lock().clone()
    }

    pub(crate) fn workspace(&self) -> Arc<WorkspaceConfig> {
        self.workspace.lock().clone()
    }

    /// Whether the client answers `agent/ui/request`.
    pub(crate) fn extension_ui(&self) -> bool {
        self.extension_ui.load(Ordering::Relaxed)
    }

    /// Whether document sync is applied now (after `initialize`, before `shutdown`).
    pub(crate) fn accepting_sync(&self) -> bool {
        self.accepting_sync.load(Ordering::SeqCst)
    }

    /// The workspace's live sessions; before `initialize` (which the library refuses every
    /// request before) an error.
    pub(crate) fn sessions(&self) -> Result<&Arc<Sessions>> {
        self.sessions.get().ok_or_else(|| {
            agent_error(
                codes::SESSION_IO,
                "the server is not initialized: no session is opened or created yet",
            )
        })
    }

    /// The live session `id`, if any (no file is touched).
    pub(crate) fn live_session(&self, id: &str) -> Option<Arc<AgentSession>> {
        self.sessions.get()?.get(id)
    }

    pub(crate) fn set_accepting_sync(&self, on: bool) {
        self.accepting_sync.store(on, Ordering::SeqCst);
    }

    /// `textDocument/didOpen`. Document sync never awaits: it is applied in arrival order.
    pub(crate) fn did_open(&self, p: DidOpenTextDocumentParams) {
        self.docs.open(
            p.text_document.uri,
            &p.text_document.text,
            p.text_document.version,
        );
    }

    /// `textDocument/didChange` (positions in the negotiated encoding).
    pub(crate) fn did_change(&self, p: DidChangeTextDocumentParams) {
        let enc = self.caps().encoding;
        self.docs.change(
            &p.text_document.uri,
            p.text_document.version,
            p.content_changes,
            enc,
        );
    }

    /// `textDocument/didClose`.
    pub(crate) fn did_close(&self, p: DidCloseTextDocumentParams) {
        self.docs.close(&p.text_document.uri);
    }
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        let editor = EditorCaps::from_client(&params.capabilities);
        self.state.extension_ui.store(
            crate::extensions::client_supports_ui(params.capabilities.experimental.as_ref()),
            Ordering::Relaxed,
        );
        // Editor-side tools: declared in `initializationOptions.editorTools` (a bad list fails
        // `initialize` with InvalidParams naming the field); `diagnostics` when advertised.
        let declared =
            crate::editor_tools::decls_from_init(params.initialization_options.as_ref())?;
        // The other options are checked as strictly, before anything is set: an editor whose
        // `approvalPolicy: "ask"` was misspelt must not silently get the default.
        let (init_model, init_approval, init_trusted) =
            init_options(params.initialization_options.as_ref())?;
        let coalesce = crate::sink::coalesce_option(params.initialization_options.as_ref())
            .map_err(tower_lsp_server::jsonrpc::Error::invalid_params)?;
        let compact = crate::delta::compact_option(params.initialization_options.as_ref())
            .map_err(tower_lsp_server::jsonrpc::Error::invalid_params)?;
        crate::methods::mcp::init(params.initialization_options.as_ref(), &self.state.client)?;
        self.state.editor_tools.register(None, declared);
        self.state.editor_tools.set_diagnostics(
            params
                .capabilities
                .experimental
                .as_ref()
                .and_then(|e| e.pointer("/agent/diagnostics"))
                .and_then(Value::as_bool)
                .unwrap_or(false),
        );
        let encoding = editor.encoding;
        *self.state.caps.lock() = editor;
        #[allow(deprecated)]
        let root = params
            .workspace_folders
            .as_ref()
            .and_then(|f| f.first())
            .and_then(|f| uri_path(&f.uri))
            .or_else(|| params.root_uri.as_ref().and_then(uri_path))
            .or_else(|| params.root_path.as_ref().map(PathBuf::from))
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("."));
        let root = root.canonicalize().unwrap_or(root);
        tracing::info!(
            "workspace root {}; position encoding {:?}",
            root.display(),
            encoding
        );
        // Project trust: `initializationOptions.workspaceTrusted: true` loads the project's own
        // configuration; anything else (unknown clients included) leaves it out.
        let trusted = init_trusted.unwrap_or(false);
        tracing::info!("workspace trusted: {trusted}");
        let ws = WorkspaceConfig::with_default_agent_dir(root.clone(), trusted);
        // ED-07: every other `file:` workspace folder is usable by the tools.
        let (folders, ignored) =
            crate::documents::folder_paths(params.workspace_folders.as_deref().unwrap_or(&[]));
        for uri in &ignored {
            tracing::warn!("workspace folder {uri} is not a file: folder; tools cannot use it");
        }
        ws.set_folders(folders);
        *self.state.workspace.lock() = ws.clone();
        *self.state.root.lock() = root;
        let setup = Arc::new(crate::setup::LspSetup {
            st: self.state.clone(),
        });
        if self
            .state
            .sessions
            .set(Arc::new(Sessions::new(ws, setup, init_model)))
            .is_err()
        {
            return Err(tower_lsp_server::jsonrpc::Error::invalid_request());
        }
        // The editor's own approval setting.
        *self.state.init_approval.lock() = init_approval;
        if let Some(window) = coalesce {
            self.state.set_coalesce(window);
        }
        self.state.compact_deltas.set(compact);
        self.state.set_accepting_sync(true);
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                position_encoding: Some(encoding.kind()),
                // Options, not the bare kind: clients read a bare kind as also asking for
                // `didSave` (vscode-languageclient, Neovim), which the server does not handle.
                text_document_sync: Some(TextDocumentSyncCapability::Options(
                    TextDocumentSyncOptions {
                        open_close: Some(true),
                        change: Some(TextDocumentSyncKind::INCREMENTAL),
                        will_save: None,
                        will_save_wait_until: None,
                        save: None,
                    },
                )),
                workspace: Some(tower_lsp_server::ls_types::WorkspaceServerCapabilities {
                    workspace_folders: Some(
                        tower_lsp_server::ls_types::WorkspaceFoldersServerCapabilities {
                            supported: Some(true),
                            change_notifications: Some(tower_lsp_server::ls_types::OneOf::Left(
                                true,
                            )),
                        },
                    ),
                    file_operations: None,
                }),
                experimental: Some(
                    serde_json::json!({"agent": {"version": 1, "methods": METHODS}}),
                ),
                ..ServerCapabilities::default()
            },
            server_info: Some(ServerInfo {
                name: "pi-lsp".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            offset_encoding: None,
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        let ws = self.state.workspace();
        if let Some(n) =
            pi_core::harness::untrusted_notice(&ws, "trust the workspace in the editor to load it")
        {
            tracing::warn!("{n}");
            self.state
                .client
                .show_message(MessageType::WARNING, n)
                .await;
        }
    }

    /// Stops every session as the process's going away does ([`crate::shutdown::stop_server`]:
    /// runs and user commands aborted, results written, process groups killed, files closed
    /// and unlocked). Run in a task of its own so that a cancelled request cannot stop it
    /// halfway.
    async fn shutdown(&self) -> Result<()> {
        self.state.shutdown_received.store(true, Ordering::SeqCst);
        let state = self.state.clone();
        let _ = tokio::spawn(async move { crate::shutdown::stop_server(&state).await }).await;
        Ok(())
    }

    // Document sync is applied by `Dispatch` in the read loop; these run only for a message
    // it left to the service. Mutate synchronously, before any await, so arrival order holds.
    async fn did_open(&self, p: DidOpenTextDocumentParams) {
        self.state.did_open(p);
    }

    async fn did_change(&self, p: DidChangeTextDocumentParams) {
        self.state.did_change(p);
    }

    async fn did_close(&self, p: DidCloseTextDocumentParams) {
        self.state.did_close(p);
    }

    /// ED-07: folders added and removed; the root (the first folder, where sessions live)
    /// stays.
    async fn did_change_workspace_folders(
        &self,
        p: tower_lsp_server::ls_types::DidChangeWorkspaceFoldersParams,
    ) {
        let ws = self.state.workspace();
        let (added, ignored) = crate::documents::folder_paths(&p.event.added);
        let (removed, _) = crate::documents::folder_paths(&p.event.removed);
        for uri in &ignored {
            tracing::warn!("workspace folder {uri} is not a file: folder; tools cannot use it");
        }
        if removed.iter().any(|r| r == ws.root()) {
            tracing::warn!(
                "the first workspace folder {} was removed; sessions and settings stay there",
                ws.root().display()
            );
        }
        let mut now: Vec<PathBuf> = ws.folders().read().map(|f| f.clone()).unwrap_or_default();
        now.retain(|f| !removed.contains(f));
        now.extend(added);
        tracing::info!(
            "workspace folders besides {}: {}",
            ws.root().display(),
            now.iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        ws.set_folders(now);
    }
}

/// `initializationOptions.model`, `.approvalPolicy` and `.workspaceTrusted`, each `None` when
/// absent or `null`. A value of the wrong type or an unknown policy name is InvalidParams
/// naming the field (as a bad `editorTools` declaration is).
fn init_options(
    options: Option<&Value>,
) -> Result<(
    Option<String>,
    Option<pi_core::approval::ApprovalPolicy>,
    Option<bool>,
)> {
    let bad = |field: &str, why: String| {
        tower_lsp_server::jsonrpc::Error::invalid_params(format!(
            "initializationOptions.{field}: {why}"
        ))
    };
    let Some(o) = options.filter(|o| !o.is_null()) else {
        return Ok((None, None, None));
    };
    let Some(o) = o.as_object() else {
        return Err(tower_lsp_server::jsonrpc::Error::invalid_params(format!(
            "initializationOptions: expected an object, got {o}"
        )));
    };
    let get = |k: &str| o.get(k).filter(|v| !v.is_null());
    let model = match get("model") {
        None => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(v) => return Err(bad("model", format!("expected \"provider/id\", got {v}"))),
    };
    let approval = match get("approvalPolicy") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(pi_core::approval::ApprovalPolicy::parse)
                .ok_or_else(|| {
                    bad(
                        "approvalPolicy",
                        format!("expected \"ask\", \"auto-edit\" or \"approve-all\", got {v}"),
                    )
                })?,
        ),
    };
    let trusted = match get("workspaceTrusted") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            return Err(bad(
                "workspaceTrusted",
                format!("expected a boolean, got {v}"),
            ))
        }
    };
    Ok((model, approval, trusted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_lsp_server::jsonrpc::{ErrorCode, Request};
    use tower_service::Service;

    /// `initialize` advertises exactly the method table, and every advertised method reaches
    /// a handler of the running service (by-position params are refused by every handler
    /// before it does anything, so no session is created).
    #[tokio::test]
    async fn every_advertised_method_is_registered() {
        let root_tmp = tempfile::tempdir().unwrap();
        let root = root_tmp.path().to_path_buf();
        std::fs::create_dir_all(&root).unwrap();
        let (mut service, _socket) = service();
        let init = Request::build("initialize")
            .params(serde_json::json!({"capabilities": {}, "rootUri": null,
                "workspaceFolders": null, "rootPath": root.display().to_string()}))
            .id(1)
            .finish();
        let response = service.call(init).await.unwrap().unwrap();
        let (_, result) = response.into_parts();
        let advertised =
            result.unwrap()["capabilities"]["experimental"]["agent"]["methods"].clone();
        assert_eq!(advertised, serde_json::json!(METHODS));
        for (i, method) in METHODS.iter().enumerate() {
            let request = Request::build(*method)
                .params(serde_json::json!([1]))
                .id(i as i64 + 2)
                .finish();
            let response = service.call(request).await.unwrap().unwrap();
            let (_, result) = response.into_parts();
            let code = result.err().map(|e| e.code);
            assert_eq!(code, Some(ErrorCode::InvalidParams), "{method}");
        }
        let unknown = Request::build("agent/notAMethod")
            .params(serde_json::json!({}))
            .id(1000)
            .finish();
        let (_, result) = service.call(unknown).await.unwrap().unwrap().into_parts();
        assert_eq!(
            result.err().map(|e| e.code),
            Some(ErrorCode::MethodNotFound)
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}

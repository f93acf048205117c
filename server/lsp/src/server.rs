//! The LSP server: lifecycle (`initialize` and its options, `shutdown`), document sync,
//! workspace folders; the `agent/*` methods are registered from [`crate::methods`]'s one
//! table (the sessions they work on are [`pi_core::harness::AgentSession`]s in the workspace's
//! [`pi_core::harness::Sessions`], kept in [`State`]).
//!
//! Handlers answer quickly; a run goes on in its own task and streams `agent/event`
//! notifications (plus work-done progress when the client supports it). Each session has at
//! most one active run; a prompt during a run must say `streamingBehavior` and is queued.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pi_core::harness::Sessions;
use pi_core::resources::WorkspaceConfig;
use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::{
    DidChangeTextDocumentParams, DidCloseTextDocumentParams, DidOpenTextDocumentParams,
    InitializeParams, InitializeResult, InitializedParams, MessageType, ServerCapabilities,
    ServerInfo, TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions,
};
use tower_lsp_server::{LanguageServer, LspService};

use crate::ctx::Served;
use crate::documents::uri_path;
use crate::editor_fs::EditorCaps;
pub use crate::methods::METHODS;
pub use crate::state::State;

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

/// Builds the service with the `agent/*` methods of [`crate::methods`]'s table registered.
pub fn service() -> (LspService<Backend>, tower_lsp_server::ClientSocket) {
    let builder = LspService::build(|client| {
        crate::logging::attach(client.clone());
        Backend {
            state: Arc::new(State::new(client, crate::sink::DEFAULT_COALESCE)),
        }
    });
    crate::methods::register(builder).finish()
}

impl Served for Backend {
    fn state(&self) -> &Arc<State> {
        &self.state
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
        // Project trust: the editor's own (`initializationOptions.workspaceTrusted`) wins;
        // without it, as Pi 1.6 decides (its trust store, then `defaultProjectTrust`), so a
        // folder trusted or refused in Pi is trusted or refused here.
        let (ws, trust) = WorkspaceConfig::with_project_trust(root.clone(), init_trusted);
        tracing::info!("workspace trusted: {} ({:?})", trust.trusted, trust.source);
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

    /// Stops every session as the process's going away does ([`State::stop`]:
    /// runs and user commands aborted, results written, process groups killed, files closed
    /// and unlocked). Run in a task of its own so that a cancelled request cannot stop it
    /// halfway.
    async fn shutdown(&self) -> Result<()> {
        self.state.shutdown_received.store(true, Ordering::SeqCst);
        let state = self.state.clone();
        let _ = tokio::spawn(async move { state.stop().await }).await;
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

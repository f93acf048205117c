//! `fs_probe`: a minimal LSP server over stdio that exposes the editor file system's resource
//! operations, which none of Pi's seven tools performs (the model renames and deletes with
//! `bash`), so the end-to-end tests can drive [`EditorFs::rename`] and [`EditorFs::delete`]
//! through a real LSP client.
//!
//! It negotiates capabilities exactly as `pi-lsp` does ([`EditorCaps::from_client`]), keeps
//! open documents in [`Documents`], and answers:
//! - `probe/rename {from, to}` → `{ok: true}` or `{ok: false, error}`;
//! - `probe/delete {path}` → the same.
//!
//! Paths are absolute. Not part of the product.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pi_core::fs::Fs;
use pi_lsp::documents::Documents;
use pi_lsp::editor_fs::{EditorCaps, EditorFs};
use serde_json::{json, Value};
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::{
    DidChangeTextDocumentParams, DidCloseTextDocumentParams, DidOpenTextDocumentParams,
    InitializeParams, InitializeResult, ServerCapabilities, TextDocumentSyncCapability,
    TextDocumentSyncKind,
};
use tower_lsp_server::{Client, LanguageServer, LspService, Server};

struct Probe {
    client: Client,
    docs: Arc<Documents>,
    caps: Mutex<EditorCaps>,
    root: Mutex<PathBuf>,
}

impl Probe {
    fn fs(&self) -> EditorFs {
        let caps = *self.caps.lock().unwrap_or_else(|p| p.into_inner());
        let root = self.root.lock().unwrap_or_else(|p| p.into_inner()).clone();
        EditorFs::new(root, self.client.clone(), self.docs.clone(), caps)
    }

    fn answer(r: std::result::Result<(), pi_core::fs::FsError>) -> Value {
        match r {
            Ok(()) => json!({"ok": true}),
            Err(e) => json!({"ok": false, "error": e.to_string()}),
        }
    }

    async fn rename(&self, p: Value) -> Result<Value> {
        let from = PathBuf::from(p["from"].as_str().unwrap_or_default());
        let to = PathBuf::from(p["to"].as_str().unwrap_or_default());
        Ok(Self::answer(
            self.fs().rename(&from, &to, "pi: probe rename").await,
        ))
    }

    async fn delete(&self, p: Value) -> Result<Value> {
        let path = PathBuf::from(p["path"].as_str().unwrap_or_default());
        Ok(Self::answer(
            self.fs().delete(&path, "pi: probe delete").await,
        ))
    }
}

impl LanguageServer for Probe {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        let caps = EditorCaps::from_client(&params.capabilities);
        *self.caps.lock().unwrap_or_else(|p| p.into_inner()) = caps;
        #[allow(deprecated)]
        if let Some(root) = params
            .root_uri
            .as_ref()
            .and_then(pi_lsp::documents::uri_path)
        {
            *self.root.lock().unwrap_or_else(|p| p.into_inner()) = root;
        }
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                position_encoding: Some(caps.encoding.kind()),
                text_document_sync: Some(TextDocumentSyncCapability::Kind(
                    TextDocumentSyncKind::INCREMENTAL,
                )),
                ..Default::default()
            },
            server_info: None,
            offset_encoding: None,
        })
    }

    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }

    async fn did_open(&self, p: DidOpenTextDocumentParams) {
        self.docs.open(
            p.text_document.uri,
            &p.text_document.text,
            p.text_document.version,
        );
    }

    async fn did_change(&self, p: DidChangeTextDocumentParams) {
        let enc = self.caps.lock().unwrap_or_else(|p| p.into_inner()).encoding;
        self.docs.change(
            &p.text_document.uri,
            p.text_document.version,
            p.content_changes,
            enc,
        );
    }

    async fn did_close(&self, p: DidCloseTextDocumentParams) {
        self.docs.close(&p.text_document.uri);
    }
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (service, socket) = LspService::build(|client| Probe {
            client,
            docs: Arc::new(Documents::default()),
            caps: Mutex::new(EditorCaps::default()),
            root: Mutex::new(PathBuf::from(".")),
        })
        .custom_method("probe/rename", Probe::rename)
        .custom_method("probe/delete", Probe::delete)
        .finish();
        Server::new(tokio::io::stdin(), tokio::io::stdout(), socket)
            .serve(service)
            .await;
    });
    Ok(())
}

//! Open documents: the editor's unsaved text, as ropes with versions.
//!
//! `didOpen` / `didChange` / `didClose` are applied synchronously inside the notification
//! handler, before it first awaits, so they take effect strictly in arrival order (tower-lsp
//! starts handlers in order). Waiters can block until a document passes a version, which is how
//! an `applyEdit` learns that the client's `didChange` for it has arrived.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use ropey::Rope;
use tokio::sync::watch;
use tower_lsp_server::ls_types::{TextDocumentContentChangeEvent, Uri};

use crate::positions::{position_to_char, Encoding};

/// One open document.
#[derive(Debug, Clone)]
pub struct Document {
    pub uri: Uri,
    pub text: Rope,
    pub version: i32,
}

/// All open documents, keyed by file path.
#[derive(Debug)]
pub struct Documents {
    docs: Mutex<HashMap<PathBuf, Document>>,
    /// Bumped on every change; waiters re-check their condition.
    changes: watch::Sender<u64>,
}

impl Default for Documents {
    fn default() -> Self {
        Documents {
            docs: Mutex::new(HashMap::new()),
            changes: watch::channel(0).0,
        }
    }
}

/// The file path of a `file:` URI.
pub fn uri_path(uri: &Uri) -> Option<PathBuf> {
    uri.to_file_path().map(|p| p.into_owned())
}

impl Documents {
    fn bump(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// `textDocument/didOpen`.
    pub fn open(&self, uri: Uri, text: &str, version: i32) {
        let Some(path) = uri_path(&uri) else { return };
        if let Ok(mut d) = self.docs.lock() {
            d.insert(
                path,
                Document {
                    uri,
                    text: Rope::from_str(text),
                    version,
                },
            );
        }
        self.bump();
    }

    /// `textDocument/didChange`: applies `changes` in order (full or incremental).
    pub fn change(
        &self,
        uri: &Uri,
        version: i32,
        changes: Vec<TextDocumentContentChangeEvent>,
        enc: Encoding,
    ) {
        let Some(path) = uri_path(uri) else { return };
        if let Ok(mut d) = self.docs.lock() {
            if let Some(doc) = d.get_mut(&path) {
                for ch in changes {
                    match ch.range {
                        None => doc.text = Rope::from_str(&ch.text),
                        Some(r) => {
                            let start = position_to_char(&doc.text, r.start, enc);
                            let end = position_to_char(&doc.text, r.end, enc).max(start);
                            doc.text.remove(start..end);
                            doc.text.insert(start, &ch.text);
                        }
                    }
                }
                doc.version = version;
            }
        }
        self.bump();
    }

    /// `textDocument/didClose`.
    pub fn close(&self, uri: &Uri) {
        let Some(path) = uri_path(uri) else { return };
        if let Ok(mut d) = self.docs.lock() {
            d.remove(&path);
        }
        self.bump();
    }

    /// A copy of the open document at `path`.
    pub fn get(&self, path: &Path) -> Option<Document> {
        self.docs.lock().ok()?.get(path).cloned()
    }

    /// Paths of all open documents.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.docs
            .lock()
            .map(|d| d.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Waits until the document at `path` has a version other than `version` (or closed), at
    /// most `timeout`. Returns true when it did.
    pub async fn wait_past(&self, path: &Path, version: i32, timeout: Duration) -> bool {
        let mut rx = self.changes.subscribe();
        let check = |s: &Self| s.get(path).map(|d| d.version != version).unwrap_or(true);
        tokio::time::timeout(timeout, async {
            loop {
                if check(self) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await
        .is_ok()
    }
}

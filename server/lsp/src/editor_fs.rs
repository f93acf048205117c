//! `EditorFs`: the file system tools see when an editor is attached.
//!
//! - Reads return an open buffer's text (unsaved changes included) with its version; other
//!   files come from disk.
//! - Edits become one `workspace/applyEdit`: a `TextDocumentEdit` versioned with the buffer
//!   version the edit was computed on (ranges in the negotiated encoding), or `version: null`
//!   for a file that is not open; a new file is a `CreateFile` followed by its text when the
//!   client supports resource operations (else it is written to disk directly).
//! - Every `workspace/applyEdit` carries a `label` naming the turn and tool call
//!   (`pi: turn 3 · edit notes.txt (call_1)`), so the editor's undo reverts one agent step.
//! - `applied: false` (with `failureReason` and `failedChange` when given) is an error the model
//!   sees; the buffer is not assumed to have changed. When the client refused an edit to an open
//!   buffer whose text is unchanged (only its version moved), the edit is sent once more with
//!   the fresh version (LSP-02); when the text changed, the model is told to read again.
//! - After `applied: true` the disk holds the buffer's text before the next tool runs: clients
//!   that advertise `experimental.agent.saveDocument` are asked to save; otherwise (or when
//!   saving fails) the server writes the buffer's text itself (LSP-03).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pi_core::fs::{
    apply_replacements, atomic_write, decode_text, FileSnapshot, Fs, FsError, TextReplace,
    WriteKind,
};
use tower_lsp_server::ls_types::request::ApplyWorkspaceEdit;
use tower_lsp_server::ls_types::{
    ApplyWorkspaceEditParams, CreateFile, CreateFileOptions, DocumentChangeOperation,
    DocumentChanges, OneOf, OptionalVersionedTextDocumentIdentifier, Position, Range, ResourceOp,
    TextDocumentEdit, TextEdit, Uri, WorkspaceEdit,
};
use tower_lsp_server::Client;

use crate::documents::Documents;
use crate::positions::{offset_to_position, Encoding};
use crate::protocol::{SaveDocumentParams, SaveDocumentRequest};

/// What the client said it can do (from `initialize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EditorCaps {
    pub encoding: Encoding,
    /// `workspace.workspaceEdit.documentChanges`.
    pub document_changes: bool,
    /// `workspace.workspaceEdit.resourceOperations` includes `create`.
    pub create_file: bool,
    /// `experimental.agent.saveDocument`.
    pub save_request: bool,
    /// `window.workDoneProgress`.
    pub work_done_progress: bool,
    /// `experimental.agent.requestPermission` (see [`crate::permissions`]).
    pub request_permission: bool,
}

impl Default for EditorCaps {
    fn default() -> Self {
        EditorCaps {
            encoding: Encoding::Utf16,
            document_changes: false,
            create_file: false,
            save_request: false,
            work_done_progress: false,
            request_permission: false,
        }
    }
}

/// How long to wait for the client's `didChange` after it applied an edit.
const CHANGE_WAIT: Duration = Duration::from_secs(2);

/// The editor-backed file system.
pub struct EditorFs {
    root: PathBuf,
    client: Client,
    docs: Arc<Documents>,
    caps: EditorCaps,
}

fn uri_of(path: &Path) -> Result<Uri, FsError> {
    Uri::from_file_path(path)
        .ok_or_else(|| FsError::Io(format!("{} cannot be named as a file URI", path.display())))
}

impl EditorFs {
    pub fn new(root: PathBuf, client: Client, docs: Arc<Documents>, caps: EditorCaps) -> Self {
        EditorFs {
            root,
            client,
            docs,
            caps,
        }
    }

    fn text_edits(&self, base: &str, edits: &[TextReplace]) -> Vec<TextEdit> {
        edits
            .iter()
            .map(|e| TextEdit {
                range: Range {
                    start: offset_to_position(base, e.range.start, self.caps.encoding),
                    end: offset_to_position(base, e.range.end, self.caps.encoding),
                },
                new_text: e.new_text.clone(),
            })
            .collect()
    }

    fn workspace_edit(
        &self,
        uri: Uri,
        version: Option<i32>,
        edits: Vec<TextEdit>,
        create: bool,
    ) -> WorkspaceEdit {
        if self.caps.document_changes {
            let doc_edit = TextDocumentEdit {
                text_document: OptionalVersionedTextDocumentIdentifier {
                    uri: uri.clone(),
                    version,
                },
                edits: edits.into_iter().map(OneOf::Left).collect(),
            };
            let changes = if create {
                DocumentChanges::Operations(vec![
                    DocumentChangeOperation::Op(ResourceOp::Create(CreateFile {
                        uri,
                        options: Some(CreateFileOptions {
                            overwrite: Some(false),
                            ignore_if_exists: Some(true),
                        }),
                        annotation_id: None,
                    })),
                    DocumentChangeOperation::Edit(doc_edit),
                ])
            } else {
                DocumentChanges::Edits(vec![doc_edit])
            };
            WorkspaceEdit {
                changes: None,
                document_changes: Some(changes),
                change_annotations: None,
            }
        } else {
            WorkspaceEdit {
                changes: Some(HashMap::from([(uri, edits)])),
                document_changes: None,
                change_annotations: None,
            }
        }
    }

    async fn apply(&self, edit: WorkspaceEdit, label: &str) -> Result<(), FsError> {
        let resp = self
            .client
            .send_request::<ApplyWorkspaceEdit>(ApplyWorkspaceEditParams {
                label: Some(label.to_string()),
                edit,
            })
            .await
            .map_err(|e| FsError::Rejected(format!("workspace/applyEdit failed: {}", e.message)))?;
        if resp.applied {
            return Ok(());
        }
        let mut why = resp
            .failure_reason
            .unwrap_or_else(|| "no reason given".into());
        if let Some(i) = resp.failed_change {
            why.push_str(&format!(" (change {i} of the edit failed)"));
        }
        Err(FsError::Rejected(why))
    }

    /// Makes the disk hold the buffer's text after an applied edit (see module docs).
    async fn settle(
        &self,
        path: &Path,
        uri: Uri,
        sent_version: Option<i32>,
        expected: &str,
    ) -> Result<(), FsError> {
        if let Some(v) = sent_version {
            if !self.docs.wait_past(path, v, CHANGE_WAIT).await {
                // LSP clients send didChange for edits they apply. One that does not is trusted
                // on its `applied: true`: the disk gets the text the edit produces. (Neovim
                // answers `applied: true` even for an edit it skipped as stale; the Neovim test
                // fails on this warning.)
                tracing::warn!(
                    "no didChange for {} after applyEdit; writing the edited text",
                    path.display()
                );
            }
        }
        if self.caps.save_request {
            match self
                .client
                .send_request::<SaveDocumentRequest>(SaveDocumentParams { uri })
                .await
            {
                Ok(r) if r.saved => return Ok(()),
                Ok(_) => tracing::warn!("client did not save {}; writing it", path.display()),
                Err(e) => tracing::warn!(
                    "agent/saveDocument failed for {}: {}; writing it",
                    path.display(),
                    e.message
                ),
            }
        }
        // An open buffer's text (it may hold the user's unsaved typing too: saving writes the
        // buffer, as the editor would); for a file that was not open, the text we sent.
        let text = match (sent_version, self.docs.get(path)) {
            (Some(v), Some(d)) if d.version != v => d.text.to_string(),
            _ => expected.to_string(),
        };
        atomic_write(path, text.as_bytes()).await
    }

    async fn disk_text(path: &Path) -> Result<Option<String>, FsError> {
        match tokio::fs::read(path).await {
            Ok(b) => Ok(Some(decode_text(b))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(FsError::Io(format!("{}: {e}", path.display()))),
        }
    }

    /// Open buffers whose text differs from the disk, for the warning `bash` shows.
    pub async fn dirty_buffers(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for path in self.docs.paths() {
            if let Some(doc) = self.docs.get(&path) {
                if Self::disk_text(&path).await.ok().flatten().as_deref()
                    != Some(&doc.text.to_string())
                {
                    out.push(path);
                }
            }
        }
        out
    }
}

#[async_trait]
impl Fs for EditorFs {
    fn root(&self) -> &Path {
        &self.root
    }

    async fn read(&self, path: &Path) -> Result<FileSnapshot, FsError> {
        if let Some(doc) = self.docs.get(path) {
            return Ok(FileSnapshot {
                text: doc.text.to_string(),
                version: Some(doc.version),
            });
        }
        match Self::disk_text(path).await? {
            Some(text) => Ok(FileSnapshot {
                text,
                version: None,
            }),
            None => Err(FsError::NotFound(path.to_path_buf())),
        }
    }

    async fn replace(
        &self,
        path: &Path,
        base: &FileSnapshot,
        edits: Vec<TextReplace>,
        label: &str,
    ) -> Result<(), FsError> {
        let uri = uri_of(path)?;
        let current = self.read(path).await?;
        if current.version != base.version || current.text != base.text {
            return Err(FsError::Stale(path.to_path_buf()));
        }
        let expected = apply_replacements(&base.text, &edits);
        let text_edits = self.text_edits(&base.text, &edits);
        let edit = self.workspace_edit(uri.clone(), base.version, text_edits.clone(), false);
        let mut sent_version = base.version;
        if let Err(first) = self.apply(edit, label).await {
            // LSP-02: retry once when only the version moved; refuse when the text changed.
            let now = self.read(path).await?;
            if now.text != base.text {
                return Err(FsError::Stale(path.to_path_buf()));
            }
            if now.version == base.version {
                return Err(first);
            }
            let edit = self.workspace_edit(uri.clone(), now.version, text_edits, false);
            self.apply(edit, label).await?;
            sent_version = now.version;
        }
        self.settle(path, uri, sent_version, &expected).await
    }

    async fn write(&self, path: &Path, text: &str, label: &str) -> Result<WriteKind, FsError> {
        let uri = uri_of(path)?;
        let current = match self.docs.get(path) {
            Some(doc) => Some(FileSnapshot {
                text: doc.text.to_string(),
                version: Some(doc.version),
            }),
            None => Self::disk_text(path).await?.map(|t| FileSnapshot {
                text: t,
                version: None,
            }),
        };
        match current {
            Some(base) => {
                let all = TextReplace {
                    range: 0..base.text.len(),
                    new_text: text.to_string(),
                };
                let edit = self.workspace_edit(
                    uri.clone(),
                    base.version,
                    self.text_edits(&base.text, &[all]),
                    false,
                );
                self.apply(edit, label).await?;
                self.settle(path, uri, base.version, text).await?;
                Ok(WriteKind::Overwritten)
            }
            None if self.caps.document_changes && self.caps.create_file => {
                if let Some(parent) = path.parent() {
                    tokio::fs::create_dir_all(parent)
                        .await
                        .map_err(|e| FsError::Io(format!("{}: {e}", parent.display())))?;
                }
                let insert = TextEdit {
                    range: Range {
                        start: Position::default(),
                        end: Position::default(),
                    },
                    new_text: text.to_string(),
                };
                self.apply(
                    self.workspace_edit(uri.clone(), None, vec![insert], true),
                    label,
                )
                .await?;
                self.settle(path, uri, None, text).await?;
                Ok(WriteKind::Created)
            }
            None => {
                atomic_write(path, text.as_bytes()).await?;
                Ok(WriteKind::Created)
            }
        }
    }
}

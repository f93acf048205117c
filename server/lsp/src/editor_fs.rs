//! `EditorFs`: the file system tools see when an editor is attached.
//!
//! - Reads return an open buffer's text (unsaved changes included) with its version; other
//!   files come from disk.
//! - Edits become one `workspace/applyEdit`: a `TextDocumentEdit` versioned with the buffer
//!   version the edit was computed on (ranges in the negotiated encoding), or `version: null`
//!   for a file that is not open; a new file is a `CreateFile` followed by its text when the
//!   client supports resource operations (else it is written to disk directly).
//! - Files the client has not opened get a `workspace/applyEdit` only from a client that
//!   declares `experimental.agent.syncsAllDocuments: true` (every buffer it holds is open on
//!   the server, so a file not open is not held modified anywhere). For any other client
//!   (Neovim attaches buffers one at a time) the server writes such a file on disk itself:
//!   an unversioned edit could land on a buffer the server never saw, with other text; the
//!   editor's own changed-on-disk check then protects that buffer.
//! - Every `workspace/applyEdit` carries a `label` naming the turn, the tool call and the
//!   session (`pi: turn 3 · edit notes.txt (call_1) · session <id>`: tool call ids are unique
//!   only within a session), so the editor's undo reverts one agent step and files it under
//!   its session;
//!   with `documentChanges` and `workspace.workspaceEdit.changeAnnotationSupport` its edits
//!   and resource operations are also annotated with that label (one change annotation, no
//!   confirmation asked).
//! - `applied: false` (with `failureReason` and `failedChange` when given) is an error the model
//!   sees; the buffer is not assumed to have changed. When the client refused an edit to an open
//!   buffer whose text is unchanged (only its version moved), the edit is sent once more with
//!   the fresh version (LSP-02); when the text changed, the model is told to read again.
//! - After `applied: true` the disk holds the buffer's text before the next tool runs: clients
//!   that advertise `experimental.agent.saveDocument` are asked to save; otherwise (or when
//!   saving fails) the server writes the buffer's text itself (LSP-03) and tells the client with
//!   `agent/didWriteDocument {uri, version}` so it does not report a conflict with the disk.
//! - A buffer that already held the user's unsaved changes is not saved with them unless
//!   `saveUserChanges` says so (see [`pi_core::unsaved`]): the disk gets the agent's change
//!   merged onto its own text ([`DidMergeToDisk`]), or, when the change touches the user's
//!   unsaved lines, the user is asked (`window/showMessageRequest`).
//! - Renames and deletes are `RenameFile` / `DeleteFile` operations when the client advertises
//!   them (`workspace.workspaceEdit.resourceOperations` and `documentChanges`), else done on
//!   disk; none of Pi's tools performs them (see [`Fs::rename`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pi_core::fs::{
    apply_replacements, atomic_write, decode_file, disk_delete, disk_rename, encode_text,
    overwrite_in_place_with, write_all_chunks, FileSnapshot, Fs, FsError, TextEncoding,
    TextReplace, WriteKind, UTF8_BOM,
};
use pi_core::unsaved::{merge_onto_disk, SaveUserChanges};
use ropey::Rope;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::request::ApplyWorkspaceEdit;
use tower_lsp_server::ls_types::{
    AnnotatedTextEdit, ApplyWorkspaceEditParams, ChangeAnnotation, ClientCapabilities, CreateFile,
    CreateFileOptions, DeleteFile, DeleteFileOptions, DocumentChangeOperation, DocumentChanges,
    OneOf, OptionalVersionedTextDocumentIdentifier, Position, Range, RenameFile, RenameFileOptions,
    ResourceOp, ResourceOperationKind, TextDocumentEdit, TextEdit, Uri, WorkspaceEdit,
};
use tower_lsp_server::Client;

use crate::documents::Documents;
use crate::positions::{
    offset_to_position, offsets_to_positions, rope_offset_to_position, Encoding,
};
use crate::protocol::{SaveDocumentParams, SaveDocumentRequest};

/// What the client said it can do (from `initialize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EditorCaps {
    pub encoding: Encoding,
    /// `workspace.workspaceEdit.documentChanges`.
    pub document_changes: bool,
    /// `workspace.workspaceEdit.resourceOperations` includes `create`.
    pub create_file: bool,
    /// `workspace.workspaceEdit.resourceOperations` includes `rename`.
    pub rename_file: bool,
    /// `workspace.workspaceEdit.resourceOperations` includes `delete`.
    pub delete_file: bool,
    /// `experimental.agent.saveDocument`.
    pub save_request: bool,
    /// `window.workDoneProgress`.
    pub work_done_progress: bool,
    /// `experimental.agent.requestPermission` (see [`crate::permissions`]).
    pub request_permission: bool,
    /// `experimental.agent.syncsAllDocuments`: every buffer the client holds is open on the
    /// server (see the module docs).
    pub syncs_all_documents: bool,
    /// `workspace.workspaceEdit.changeAnnotationSupport`.
    pub change_annotations: bool,
    /// `experimental.agent.saveUserChanges`: the editor's own `saveUserChanges` setting
    /// (`"ask"`, `"always"`, `"never"`; see [`pi_core::unsaved`]), `None` when not sent.
    pub save_user_changes: Option<SaveUserChanges>,
}

impl Default for EditorCaps {
    fn default() -> Self {
        EditorCaps {
            encoding: Encoding::Utf16,
            document_changes: false,
            create_file: false,
            rename_file: false,
            delete_file: false,
            save_request: false,
            work_done_progress: false,
            request_permission: false,
            syncs_all_documents: false,
            change_annotations: false,
            save_user_changes: None,
        }
    }
}

impl EditorCaps {
    /// What the client's `initialize` capabilities offer: the position encoding (see
    /// [`Encoding::negotiate`]), `workspace.workspaceEdit.documentChanges` and
    /// `resourceOperations`, `experimental.agent.saveDocument`, `window.workDoneProgress`,
    /// `experimental.agent.requestPermission`, `experimental.agent.syncsAllDocuments`,
    /// `workspace.workspaceEdit.changeAnnotationSupport`.
    pub fn from_client(caps: &ClientCapabilities) -> EditorCaps {
        let ws_edit = caps
            .workspace
            .as_ref()
            .and_then(|w| w.workspace_edit.as_ref());
        let op = |kind: ResourceOperationKind| {
            ws_edit
                .and_then(|w| w.resource_operations.as_ref())
                .is_some_and(|ops| ops.contains(&kind))
        };
        EditorCaps {
            encoding: Encoding::negotiate(
                caps.general
                    .as_ref()
                    .and_then(|g| g.position_encodings.as_deref()),
            ),
            document_changes: ws_edit.and_then(|w| w.document_changes).unwrap_or(false),
            create_file: op(ResourceOperationKind::Create),
            rename_file: op(ResourceOperationKind::Rename),
            delete_file: op(ResourceOperationKind::Delete),
            save_request: caps
                .experimental
                .as_ref()
                .and_then(|e| e.pointer("/agent/saveDocument"))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            work_done_progress: caps
                .window
                .as_ref()
                .and_then(|w| w.work_done_progress)
                .unwrap_or(false),
            request_permission: crate::permissions::client_supports(caps.experimental.as_ref()),
            syncs_all_documents: caps
                .experimental
                .as_ref()
                .and_then(|e| e.pointer("/agent/syncsAllDocuments"))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            change_annotations: ws_edit.is_some_and(|w| w.change_annotation_support.is_some()),
            save_user_changes: caps
                .experimental
                .as_ref()
                .and_then(|e| e.pointer("/agent/saveUserChanges"))
                .and_then(serde_json::Value::as_str)
                .and_then(SaveUserChanges::parse),
        }
    }
}

/// How long to wait for the client's `didChange` after it applied an edit.
const CHANGE_WAIT: Duration = Duration::from_secs(2);

/// `agent/didWriteDocument` (server → client notification, params
/// [`DidWriteDocumentParams`]): the server wrote an open buffer's text to disk itself because the
/// client could not save it on request. The disk now holds exactly the buffer at `version`; a
/// client should treat the buffer as saved at that version rather than report the file as
/// changed on disk (a save conflict).
pub enum DidWriteDocument {}

/// Params of [`DidWriteDocument`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DidWriteDocumentParams {
    pub uri: Uri,
    pub version: i32,
}

impl Notification for DidWriteDocument {
    type Params = DidWriteDocumentParams;
    const METHOD: &'static str = "agent/didWriteDocument";
}

/// `agent/didMergeToDisk` (server → client notification, params [`DidMergeToDiskParams`]): an
/// agent edit landed in a buffer that holds the user's unsaved changes, and the disk got only the
/// agent's change, merged onto the disk's own text (`saveUserChanges` is `never`, or `ask` and
/// not answered yet; see [`pi_core::unsaved`]). The buffer stays modified: the user's changes
/// are still theirs to save. The client should not report the file's change on disk as a
/// conflict (Neovim's W11/W12, VS Code's "the content of the file is newer"): when the user
/// saves the buffer later, the client may set the file's modification time back to
/// `previousMtime` just before its save writes, so the editor's own check passes.
pub enum DidMergeToDisk {}

/// A file's modification time: seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileTime {
    pub sec: i64,
    pub nsec: u32,
}

/// Params of [`DidMergeToDisk`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DidMergeToDiskParams {
    pub uri: Uri,
    /// The buffer's version the merge was made for (the agent's edit applied).
    pub version: i32,
    /// The file's modification time before the server wrote it (what the editor last saw);
    /// `None` when it could not be read.
    pub previous_mtime: Option<FileTime>,
}

impl Notification for DidMergeToDisk {
    type Params = DidMergeToDiskParams;
    const METHOD: &'static str = "agent/didMergeToDisk";
}

/// The answers of "Save your changes too?" (asked once per file per session).
pub const SAVE_MINE: &str = "Save mine too";
/// Keep the user's changes unsaved (the disk gets only the agent's changes).
pub const KEEP_MINE_UNSAVED: &str = "Keep mine unsaved";
/// For an agent change that overlaps the user's unsaved lines: not on disk.
pub const KEEP_IN_BUFFER: &str = "Keep Pi's change in the buffer only";

/// The session's choices about the user's unsaved changes (see [`pi_core::unsaved`]).
#[derive(Default)]
struct UnsavedChoices {
    /// The user's answer per file in this session ([`SaveUserChanges::Always`] or `Never`).
    per_file: HashMap<PathBuf, SaveUserChanges>,
    /// Files already asked about (the question once per file per session).
    asked: std::collections::HashSet<PathBuf>,
    /// Files whose last agent change is in the buffer only (it overlapped the user's lines).
    buffer_only: std::collections::HashSet<PathBuf>,
}

/// What happens on disk after an agent edit of a buffer with the user's unsaved changes.
enum UserChanges {
    /// The disk gets this text (the agent's change merged onto it) in its encoding; `ask`:
    /// the user is asked once whether to save theirs too.
    Merge {
        disk: String,
        encoding: TextEncoding,
        ask: bool,
    },
    /// The agent's change touches the user's unsaved lines (1-based, in the buffer).
    Overlap((usize, usize)),
}

/// The file's modification time, `None` when it cannot be read.
async fn mtime_of(path: &Path) -> Option<FileTime> {
    let m = tokio::fs::metadata(path).await.ok()?.modified().ok()?;
    let d = m.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(FileTime {
        sec: i64::try_from(d.as_secs()).ok()?,
        nsec: d.subsec_nanos(),
    })
}

/// Asks the client to save the buffer of `uri` (file `path`) with `agent/saveDocument` when it
/// advertised it (`caps.save_request`); true when it says it saved. A refusal or a failed
/// request is logged as a warning (the caller then writes the text itself).
async fn client_saved(client: &Client, caps: EditorCaps, path: &Path, uri: &Uri) -> bool {
    if !caps.save_request {
        return false;
    }
    match crate::client::request::<SaveDocumentRequest>(
        client,
        SaveDocumentParams { uri: uri.clone() },
        None,
    )
    .await
    .into_result()
    {
        Ok(r) if r.saved => return true,
        Ok(_) => tracing::warn!("client did not save {}; writing it", path.display()),
        Err(e) => tracing::warn!(
            "agent/saveDocument failed for {}: {}; writing it",
            path.display(),
            e.message
        ),
    }
    false
}

/// Asks the client to save the open buffer at `path` (`agent/saveDocument`), else writes the
/// buffer's text itself and says so (`agent/didWriteDocument`).
async fn save_buffer(
    client: &Client,
    docs: &Documents,
    caps: EditorCaps,
    path: &Path,
    uri: Uri,
    encoding: &TextEncoding,
) -> Result<(), FsError> {
    if client_saved(client, caps, path, &uri).await {
        return Ok(());
    }
    let Some(d) = docs.get(path) else {
        return Ok(());
    };
    write_rope(path, d.text, encoding).await?;
    client
        .send_notification::<DidWriteDocument>(DidWriteDocumentParams {
            uri,
            version: d.version,
        })
        .await;
    Ok(())
}

/// Writes an open buffer's text over the file at `path` in place, as the editor's own save
/// would, from the rope's chunks handed to `writev` (no whole-text copy, not even into a write
/// buffer; the rope clone shares its nodes). See [`overwrite_in_place_with`] for why not a temp
/// file and rename.
async fn write_rope(path: &Path, rope: Rope, encoding: &TextEncoding) -> Result<(), FsError> {
    if !encoding.is_utf8() {
        // ED-04: in the file's own encoding (refused, nothing written, when it cannot be).
        let text = String::from(&rope);
        let bytes = encode_text(path, &text, encoding)?.into_owned();
        return overwrite_in_place_with(path, move |w| w.write_all(&bytes)).await;
    }
    // Editors show a UTF-8 file's BOM as no text at all: the buffer lacks what the disk
    // starts with (`encoding.bom`, found when the disk was read), and the file keeps it (case
    // EDIT-02).
    let bom = encoding.bom && !(rope.len_chars() > 0 && rope.char(0) == '\u{FEFF}');
    overwrite_in_place_with(path, move |w| {
        let mut chunks: Vec<&[u8]> = Vec::new();
        if bom {
            chunks.push(UTF8_BOM);
        }
        chunks.extend(rope.chunks().map(str::as_bytes));
        write_all_chunks(w, &chunks)
    })
    .await
}

/// Whether an open buffer's text is the file's text on disk: the same, or the same but for a
/// UTF-8 BOM the disk starts with, which editors do not show in the buffer (case EDIT-02).
fn same_as_disk<B: PartialEq<str> + ?Sized>(buffer: &B, disk: &str) -> bool {
    *buffer == *disk
        || disk
            .strip_prefix('\u{FEFF}')
            .is_some_and(|rest| *buffer == *rest)
}

/// Asks the user `message` with `actions` (`window/showMessageRequest`); the chosen action's
/// title, `None` when dismissed or when the client cannot ask.
async fn ask_user(client: &Client, message: String, actions: &[&str]) -> Option<String> {
    use tower_lsp_server::ls_types::request::ShowMessageRequest;
    use tower_lsp_server::ls_types::{MessageActionItem, MessageType, ShowMessageRequestParams};
    let params = ShowMessageRequestParams {
        typ: MessageType::WARNING,
        message,
        actions: Some(
            actions
                .iter()
                .map(|a| MessageActionItem {
                    title: (*a).to_string(),
                    properties: HashMap::new(),
                })
                .collect(),
        ),
    };
    match crate::client::request::<ShowMessageRequest>(client, params, None).await {
        crate::client::Reply::Result(Some(item)) => Some(item.title),
        _ => None,
    }
}

/// The editor-backed file system.
pub struct EditorFs {
    root: PathBuf,
    client: Client,
    docs: Arc<Documents>,
    caps: EditorCaps,
    /// The workspace's settings (`saveUserChanges`), when known.
    workspace: Option<Arc<pi_core::resources::WorkspaceConfig>>,
    choices: Arc<parking_lot::Mutex<UnsavedChoices>>,
    /// The session whose tools these are, named in every edit's label.
    session_id: Option<String>,
}

fn uri_of(path: &Path) -> Result<Uri, FsError> {
    // A canonical Windows path may carry `\\?\`, which a `file:` URI cannot (platform::paths).
    Uri::from_file_path(pi_core::platform::paths::simplified(path))
        .ok_or_else(|| FsError::Io(format!("{} cannot be named as a file URI", path.display())))
}

impl EditorFs {
    pub fn new(root: PathBuf, client: Client, docs: Arc<Documents>, caps: EditorCaps) -> Self {
        EditorFs {
            root,
            client,
            docs,
            caps,
            workspace: None,
            choices: Arc::default(),
            session_id: None,
        }
    }

    /// Names `session_id` in every `workspace/applyEdit` label (` · session <id>` after the
    /// tool's own label), so a client files each edit under its session.
    pub fn with_session(mut self, session_id: &str) -> Self {
        self.session_id = Some(session_id.to_string());
        self
    }

    /// The label sent for a tool's `label`: with the session when known.
    fn edit_label(&self, label: &str) -> String {
        match &self.session_id {
            Some(id) => format!("{label} · session {id}"),
            None => label.to_string(),
        }
    }

    /// Reads `saveUserChanges` from this workspace's settings (project over user).
    pub fn with_workspace(mut self, ws: Arc<pi_core::resources::WorkspaceConfig>) -> Self {
        self.workspace = Some(ws);
        self
    }

    /// `path` as the user knows it: relative to the workspace root when inside it.
    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// `saveUserChanges` in force for `path`: the session's answer for the file > the editor's
    /// setting > the settings files (project over user) > `ask`.
    fn save_policy(&self, path: &Path) -> SaveUserChanges {
        let session = self.choices.lock().per_file.get(path).copied();
        let settings = self
            .workspace
            .as_ref()
            .and_then(|w| w.settings().save_user_changes);
        SaveUserChanges::resolve(session, self.caps.save_user_changes, settings)
    }

    /// What the disk gets when the agent's `edits` of the open buffer `base` land: `None` when
    /// the buffer holds no unsaved change of the user's (or they are to be saved: `always`), so
    /// saving the buffer writes only the agent's change. Also the encoding to save the buffer
    /// in: for a UTF-8 buffer, the disk's as this read found it (whether it starts with a BOM
    /// the buffer does not show, case EDIT-02), else `base`'s.
    async fn user_changes(
        &self,
        path: &Path,
        base: &FileSnapshot,
        edits: &[TextReplace],
    ) -> Result<(Option<UserChanges>, TextEncoding), FsError> {
        let disk = Self::disk_text(path).await?;
        let encoding = match &disk {
            Some((_, e)) if e.is_utf8() && base.encoding.is_utf8() => *e,
            _ => base.encoding,
        };
        if disk
            .as_ref()
            .is_some_and(|(t, _)| same_as_disk(base.text.as_str(), t))
        {
            return Ok((None, encoding));
        }
        let policy = self.save_policy(path);
        if policy == SaveUserChanges::Always {
            return Ok((None, encoding));
        }
        let Some((disk, disk_encoding)) = disk else {
            // A buffer for a file not on disk: all of it is the user's unsaved text.
            let lines = base.text.lines().count().max(1);
            return Ok((Some(UserChanges::Overlap((1, lines))), encoding));
        };
        let changes = match merge_onto_disk(&base.text, &disk, edits) {
            Ok(merged) => UserChanges::Merge {
                disk: merged,
                encoding: disk_encoding,
                ask: policy == SaveUserChanges::Ask && !self.choices.lock().asked.contains(path),
            },
            Err(o) => UserChanges::Overlap(o.lines),
        };
        Ok((Some(changes), encoding))
    }

    /// Writes the agent's change merged onto the disk's text (`merged`) in place, as an
    /// editor's save would, and tells the client ([`DidMergeToDisk`]); then, under `ask`,
    /// asks the user once (in the background) whether to save their changes too.
    async fn write_merged(
        &self,
        path: &Path,
        uri: Uri,
        sent_version: Option<i32>,
        merged: String,
        encoding: TextEncoding,
        ask: bool,
    ) -> Result<(), FsError> {
        if let Some(v) = sent_version {
            self.docs.wait_past(path, v, CHANGE_WAIT).await;
        }
        let previous_mtime = mtime_of(path).await;
        let bytes = encode_text(path, &merged, &encoding)?.into_owned();
        overwrite_in_place_with(path, move |w| w.write_all(&bytes)).await?;
        self.choices.lock().buffer_only.remove(path);
        let version = self
            .docs
            .get(path)
            .map(|d| d.version)
            .or(sent_version)
            .unwrap_or(0);
        self.client
            .send_notification::<DidMergeToDisk>(DidMergeToDiskParams {
                uri: uri.clone(),
                version,
                previous_mtime,
            })
            .await;
        if ask {
            self.choices.lock().asked.insert(path.to_path_buf());
            let (client, docs, caps, choices) = (
                self.client.clone(),
                self.docs.clone(),
                self.caps,
                self.choices.clone(),
            );
            let (path, shown) = (path.to_path_buf(), self.shown(path));
            tokio::spawn(async move {
                let message = format!(
                    "Pi changed {shown}, where you have unsaved changes. Pi's change is on disk; yours are still unsaved in the editor. Save yours too?"
                );
                let answer = ask_user(&client, message, &[SAVE_MINE, KEEP_MINE_UNSAVED]).await;
                let choice = match answer.as_deref() {
                    Some(SAVE_MINE) => SaveUserChanges::Always,
                    _ => SaveUserChanges::Never,
                };
                choices.lock().per_file.insert(path.clone(), choice);
                if choice == SaveUserChanges::Always {
                    if let Err(e) = save_buffer(&client, &docs, caps, &path, uri, &encoding).await {
                        tracing::warn!("saving {} as asked: {e}", path.display());
                    }
                }
            });
        }
        Ok(())
    }

    /// LSP edits for byte-range `edits` of `base` (a file that is not open), positions found in
    /// one pass over the text.
    fn text_edits(&self, base: &str, edits: &[TextReplace]) -> Vec<TextEdit> {
        let offsets: Vec<usize> = edits
            .iter()
            .flat_map(|e| [e.range.start, e.range.end])
            .collect();
        let pos = offsets_to_positions(base, &offsets, self.caps.encoding);
        edits
            .iter()
            .zip(pos.chunks(2))
            .map(|(e, p)| TextEdit {
                range: Range {
                    start: p[0],
                    end: p.get(1).copied().unwrap_or(p[0]),
                },
                new_text: e.new_text.clone(),
            })
            .collect()
    }

    /// LSP edits for byte-range `edits` of an open buffer's `rope`, from the rope's indexes.
    fn rope_text_edits(&self, rope: &Rope, edits: &[TextReplace]) -> Vec<TextEdit> {
        let enc = self.caps.encoding;
        edits
            .iter()
            .map(|e| TextEdit {
                range: Range {
                    start: rope_offset_to_position(rope, e.range.start, enc),
                    end: rope_offset_to_position(rope, e.range.end, enc),
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

    /// A workspace edit of one resource operation.
    fn resource_edit(op: ResourceOp) -> WorkspaceEdit {
        WorkspaceEdit {
            changes: None,
            document_changes: Some(DocumentChanges::Operations(vec![
                DocumentChangeOperation::Op(op),
            ])),
            change_annotations: None,
        }
    }

    /// `edit` with every text edit and resource operation annotated with `label` (one change
    /// annotation, no confirmation), for a client that supports annotations.
    fn annotate(&self, mut edit: WorkspaceEdit, label: &str) -> WorkspaceEdit {
        const ID: &str = "pi";
        if !self.caps.change_annotations {
            return edit;
        }
        let annotate_edits = |e: &mut TextDocumentEdit| {
            for te in &mut e.edits {
                if let OneOf::Left(plain) = te {
                    *te = OneOf::Right(AnnotatedTextEdit {
                        text_edit: plain.clone(),
                        annotation_id: ID.to_string(),
                    });
                }
            }
        };
        match &mut edit.document_changes {
            Some(DocumentChanges::Edits(edits)) => edits.iter_mut().for_each(annotate_edits),
            Some(DocumentChanges::Operations(ops)) => {
                for op in ops {
                    match op {
                        DocumentChangeOperation::Edit(e) => annotate_edits(e),
                        DocumentChangeOperation::Op(ResourceOp::Create(c)) => {
                            c.annotation_id = Some(ID.into())
                        }
                        DocumentChangeOperation::Op(ResourceOp::Rename(r)) => {
                            r.annotation_id = Some(ID.into())
                        }
                        DocumentChangeOperation::Op(ResourceOp::Delete(d)) => {
                            d.annotation_id = Some(ID.into())
                        }
                    }
                }
            }
            None => return edit,
        }
        edit.change_annotations = Some(HashMap::from([(
            ID.to_string(),
            ChangeAnnotation {
                label: label.to_string(),
                needs_confirmation: Some(false),
                description: None,
            },
        )]));
        edit
    }

    async fn apply(&self, edit: WorkspaceEdit, label: &str) -> Result<(), FsError> {
        let label = &self.edit_label(label);
        let edit = self.annotate(edit, label);
        let resp = crate::client::request::<ApplyWorkspaceEdit>(
            &self.client,
            ApplyWorkspaceEditParams {
                label: Some(label.to_string()),
                edit,
            },
            None,
        )
        .await
        .into_result()
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
    /// `expected` gives the text the edit produces, used when the file was not open or the
    /// client sent no `didChange`; it is only computed then.
    async fn settle(
        &self,
        path: &Path,
        uri: Uri,
        sent_version: Option<i32>,
        encoding: TextEncoding,
        expected: impl FnOnce() -> String,
    ) -> Result<(), FsError> {
        let started = std::time::Instant::now();
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
        if client_saved(&self.client, self.caps, path, &uri).await {
            return Ok(());
        }
        // An open buffer's text (it may hold the user's unsaved typing too: saving writes the
        // buffer, as the editor would), written from the rope's chunks; for a file that was not
        // open, the text we sent.
        match (sent_version, self.docs.get(path)) {
            (Some(v), Some(d)) if d.version != v => {
                let waited = started.elapsed();
                write_rope(path, d.text, &encoding).await?;
                tracing::debug!(
                    wait_us = waited.as_micros() as u64,
                    write_us = (started.elapsed() - waited).as_micros() as u64,
                    "buffer written to {}",
                    path.display()
                );
                self.client
                    .send_notification::<DidWriteDocument>(DidWriteDocumentParams {
                        uri,
                        version: d.version,
                    })
                    .await;
                Ok(())
            }
            _ => {
                let text = expected();
                let bytes = encode_text(path, &text, &encoding)?;
                atomic_write(path, &bytes).await
            }
        }
    }

    /// The file's text on disk (decoded as [`decode_file`] finds), `None` when it is missing.
    async fn disk_text(path: &Path) -> Result<Option<(String, TextEncoding)>, FsError> {
        match tokio::fs::read(path).await {
            Ok(b) => {
                let d = decode_file(b);
                Ok(Some((d.text, d.encoding)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(FsError::Io(format!("{}: {e}", path.display()))),
        }
    }

    /// The encoding of the file on disk under the open buffer at `path`: found when the buffer
    /// opened ([`Documents::encoding`]), else now (and kept); UTF-8 for a file not on disk.
    async fn buffer_encoding(&self, path: &Path) -> TextEncoding {
        if let Some(e) = self.docs.encoding(path) {
            return e;
        }
        let found = match tokio::fs::read(path).await {
            Ok(b) => pi_core::fs::detect_encoding(&b),
            Err(_) => TextEncoding::UTF8,
        };
        self.docs.set_encoding(path, found);
        found
    }

    /// Open buffers whose text differs from the disk, for the warning `bash` shows.
    pub async fn dirty_buffers(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for path in self.docs.paths() {
            if let Some(doc) = self.docs.get(&path) {
                let same = Self::disk_text(&path)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|(disk, _)| same_as_disk(&doc.text, &disk));
                if !same {
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

    fn has_buffer(&self, path: &Path) -> bool {
        self.docs.get(path).is_some()
    }

    fn buffer_paths(&self) -> Vec<PathBuf> {
        self.docs.paths()
    }

    async fn unsaved_note(&self, path: &Path) -> Option<String> {
        let doc = self.docs.get(path)?;
        let shown = self.shown(path);
        if self.choices.lock().buffer_only.contains(path) {
            return Some(format!(
                "Note: your last change to {shown} is in the editor only, not on disk: it touches lines the user changed and has not saved, and the user kept it out of the file. bash and other programs see the file without it."
            ));
        }
        let same = Self::disk_text(path)
            .await
            .ok()
            .flatten()
            .is_some_and(|(disk, _)| same_as_disk(&doc.text, &disk));
        (!same).then(|| {
            format!(
                "Note: the user has unsaved changes to {shown} in the editor. read and edit use the editor's text; the file on disk differs by those changes (bash and other programs see the disk)."
            )
        })
    }

    async fn read(&self, path: &Path) -> Result<FileSnapshot, FsError> {
        // The buffer's shared contiguous text (no copy when it is already made for this version).
        if let Some((text, version)) = self.docs.text(path) {
            return Ok(FileSnapshot {
                text,
                version: Some(version),
                encoding: self.buffer_encoding(path).await,
            });
        }
        match Self::disk_text(path).await? {
            Some((text, encoding)) => Ok(FileSnapshot {
                text: Arc::new(text),
                version: None,
                encoding,
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
        let started = std::time::Instant::now();
        let mut uri = uri_of(path)?;
        if !base.encoding.is_utf8() {
            // ED-04: the new text must be writable in the file's encoding, checked before the
            // editor changes anything (refused for a file whose bytes could not be decoded).
            for e in &edits {
                encode_text(path, &e.new_text, &base.encoding)?;
            }
        }
        // The edit goes to what the file is now: the open buffer (same text as `base`: the same
        // shared text, or else compared chunk by chunk without copying; a moved version with
        // the same text is fine and is the version sent), under the URI the editor opened it
        // as (another name of the file, ED-01), else the disk.
        let (version, text_edits) = match self.docs.get(path) {
            Some(doc) => {
                uri = doc.uri.clone();
                let same = doc
                    .flat
                    .as_ref()
                    .is_some_and(|f| Arc::ptr_eq(f, &base.text))
                    || doc.text == base.text.as_str();
                if !same {
                    return Err(FsError::Stale(path.to_path_buf()));
                }
                (Some(doc.version), self.rope_text_edits(&doc.text, &edits))
            }
            None => {
                let disk = Self::disk_text(path).await?;
                if disk.as_ref().map(|(t, e)| (t.as_str(), e))
                    != Some((base.text.as_str(), &base.encoding))
                {
                    return Err(FsError::Stale(path.to_path_buf()));
                }
                if !base.encoding.is_utf8() || !self.caps.syncs_all_documents {
                    // A file in another encoding that the editor has not opened is written on
                    // disk in its encoding: an editor opening it for the edit may decode it
                    // otherwise and save it back damaged. So is any file a client that does
                    // not open every buffer to the server has not opened (module docs).
                    let text = apply_replacements(&base.text, &edits);
                    let bytes = encode_text(path, &text, &base.encoding)?;
                    return atomic_write(path, &bytes).await;
                }
                (None, self.text_edits(&base.text, &edits))
            }
        };
        // The user's unsaved changes in the buffer stay theirs (`saveUserChanges`).
        // And the encoding the buffer is saved in, from that same read of the disk.
        let (user, encoding) = match version {
            Some(_) => self.user_changes(path, base, &edits).await?,
            None => (None, base.encoding),
        };
        let checked = started.elapsed();
        let edit = self.workspace_edit(uri.clone(), version, text_edits.clone(), false);
        let mut sent_version = version;
        if let Err(first) = self.apply(edit, label).await {
            // LSP-02: retry once when only the version moved; refuse when the text changed.
            let Some(now) = self.docs.get(path) else {
                return Err(first);
            };
            if now.text != base.text.as_str() {
                return Err(FsError::Stale(path.to_path_buf()));
            }
            if Some(now.version) == version {
                return Err(first);
            }
            let edit = self.workspace_edit(uri.clone(), Some(now.version), text_edits, false);
            self.apply(edit, label).await?;
            sent_version = Some(now.version);
        }
        let applied = started.elapsed();
        match user {
            None => {
                self.settle(path, uri, sent_version, encoding, || {
                    apply_replacements(&base.text, &edits)
                })
                .await?
            }
            Some(UserChanges::Merge {
                disk,
                encoding,
                ask,
            }) => {
                self.write_merged(path, uri, sent_version, disk, encoding, ask)
                    .await?
            }
            Some(UserChanges::Overlap((first, last))) => {
                let lines = if first == last {
                    format!("line {first}")
                } else {
                    format!("lines {first}–{last}")
                };
                let message = format!(
                    "Pi's change to {} ({lines}) touches lines you changed and have not saved. Save your changes with it, or keep Pi's change in the editor only (not on disk)?",
                    self.shown(path)
                );
                let answer = ask_user(&self.client, message, &[SAVE_MINE, KEEP_IN_BUFFER]).await;
                if answer.as_deref() == Some(SAVE_MINE) {
                    self.choices.lock().buffer_only.remove(path);
                    self.settle(path, uri, sent_version, encoding, || {
                        apply_replacements(&base.text, &edits)
                    })
                    .await?
                } else {
                    self.choices.lock().buffer_only.insert(path.to_path_buf());
                }
            }
        }
        tracing::debug!(
            check_us = checked.as_micros() as u64,
            apply_edit_us = (applied - checked).as_micros() as u64,
            settle_us = (started.elapsed() - applied).as_micros() as u64,
            "replace {}",
            path.display()
        );
        Ok(())
    }

    /// Replaces the whole text (see module docs). A file in an encoding other than UTF-8
    /// keeps it (ED-04): the text is checked against the encoding before the editor changes
    /// anything, and one the editor has not opened is written on disk directly; a file whose
    /// bytes could not be decoded is replaced by UTF-8 text (the whole content is new).
    async fn write(&self, path: &Path, text: &str, label: &str) -> Result<WriteKind, FsError> {
        let mut uri = uri_of(path)?;
        // The whole current text is replaced: its end position from the buffer's rope, or from
        // the disk text of a file that is not open.
        let current = match self.docs.get(path) {
            Some(doc) => {
                uri = doc.uri.clone();
                let end =
                    rope_offset_to_position(&doc.text, doc.text.len_bytes(), self.caps.encoding);
                Some((Some(doc.version), end, self.buffer_encoding(path).await))
            }
            None => Self::disk_text(path)
                .await?
                .map(|(t, e)| (None, offset_to_position(&t, t.len(), self.caps.encoding), e)),
        };
        match current {
            Some((version, end, encoding)) => {
                let encoding = if encoding.exact {
                    encoding
                } else {
                    TextEncoding::UTF8
                };
                // Checked against the file's encoding before the editor changes anything; a
                // file that is not open is written on disk in it, and so is every file a
                // client that does not open all its buffers to the server has not opened.
                if !encoding.is_utf8() || (version.is_none() && !self.caps.syncs_all_documents) {
                    let bytes = encode_text(path, text, &encoding)?;
                    if version.is_none() {
                        atomic_write(path, &bytes).await?;
                        return Ok(WriteKind::Overwritten);
                    }
                }
                let all = TextEdit {
                    range: Range {
                        start: Position::default(),
                        end,
                    },
                    new_text: text.to_string(),
                };
                let edit = self.workspace_edit(uri.clone(), version, vec![all], false);
                self.apply(edit, label).await?;
                self.settle(path, uri, version, encoding, || text.to_string())
                    .await?;
                Ok(WriteKind::Overwritten)
            }
            None if self.caps.document_changes
                && self.caps.create_file
                && self.caps.syncs_all_documents =>
            {
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
                self.settle(path, uri, None, TextEncoding::UTF8, || text.to_string())
                    .await?;
                Ok(WriteKind::Created)
            }
            None => {
                atomic_write(path, text.as_bytes()).await?;
                Ok(WriteKind::Created)
            }
        }
    }

    /// A `RenameFile` (never overwriting) when the client advertises `rename` with
    /// `documentChanges`, so an open buffer moves along and the editor can undo it; else on disk.
    /// After an applied rename the disk agrees: when the client left the file in place, the
    /// server renames it.
    async fn rename(&self, from: &Path, to: &Path, label: &str) -> Result<(), FsError> {
        if !(self.caps.document_changes && self.caps.rename_file) {
            return disk_rename(from, to).await;
        }
        if tokio::fs::symlink_metadata(from).await.is_err() && self.docs.get(from).is_none() {
            return Err(FsError::NotFound(from.to_path_buf()));
        }
        if tokio::fs::symlink_metadata(to).await.is_ok() || self.docs.get(to).is_some() {
            return Err(FsError::Io(format!("{} already exists", to.display())));
        }
        if let Some(parent) = to.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| FsError::Io(format!("{}: {e}", parent.display())))?;
        }
        let op = ResourceOp::Rename(RenameFile {
            old_uri: uri_of(from)?,
            new_uri: uri_of(to)?,
            options: Some(RenameFileOptions {
                overwrite: Some(false),
                ignore_if_exists: Some(false),
            }),
            annotation_id: None,
        });
        self.apply(Self::resource_edit(op), label).await?;
        if tokio::fs::symlink_metadata(to).await.is_err()
            && tokio::fs::symlink_metadata(from).await.is_ok()
        {
            disk_rename(from, to).await?;
        }
        Ok(())
    }

    /// A `DeleteFile` when the client advertises `delete` with `documentChanges`, so the editor
    /// closes the buffer; else on disk. After an applied delete the file is gone from disk.
    async fn delete(&self, path: &Path, label: &str) -> Result<(), FsError> {
        if !(self.caps.document_changes && self.caps.delete_file) {
            return disk_delete(path).await;
        }
        let meta = tokio::fs::symlink_metadata(path)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => FsError::NotFound(path.to_path_buf()),
                _ => FsError::Io(format!("{}: {e}", path.display())),
            })?;
        if meta.is_dir() {
            return Err(FsError::Io(format!(
                "{} is a folder; only files can be deleted",
                path.display()
            )));
        }
        let op = ResourceOp::Delete(DeleteFile {
            uri: uri_of(path)?,
            options: Some(DeleteFileOptions {
                recursive: Some(false),
                ignore_if_not_exists: Some(false),
            }),
            annotation_id: None,
        });
        self.apply(Self::resource_edit(op), label).await?;
        if tokio::fs::symlink_metadata(path).await.is_ok() {
            disk_delete(path).await?;
        }
        Ok(())
    }
}

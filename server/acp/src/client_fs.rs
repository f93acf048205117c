//! The file system through the ACP client ([`ClientFs`], a [`pi_core::fs::Fs`]) when it
//! advertises `fs.readTextFile` / `fs.writeTextFile`: the agent reads the editor's text,
//! unsaved changes included (`fs/read_text_file`), and its edits land in the editor's buffers
//! (`fs/write_text_file`). An edit is computed on a snapshot and written only if the client's
//! text still equals it (else [`FsError::Stale`]: the model reads again; never the wrong text).
//! What the client does not offer goes to the disk (a client with reads but no writes gets
//! its buffers read and writes on disk only when no buffer differs from disk is not
//! knowable — so writes then go to the disk, as ACP says for agents without the capability).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use pi_core::fs::{DiskFs, FileSnapshot, Fs, FsError, TextReplace, WriteKind};
use serde_json::{json, Value};

use crate::rpc::Conn;

/// See the module doc.
pub struct ClientFs {
    conn: Arc<Conn>,
    session_id: String,
    disk: DiskFs,
    read: bool,
    write: bool,
}

impl ClientFs {
    /// Over `conn` for session `session_id`; `read` / `write`: the client's
    /// `fs.readTextFile` / `fs.writeTextFile`.
    pub fn new(
        conn: Arc<Conn>,
        session_id: String,
        root: PathBuf,
        read: bool,
        write: bool,
    ) -> ClientFs {
        ClientFs {
            conn,
            session_id,
            disk: DiskFs::new(root),
            read,
            write,
        }
    }

    async fn client_read(&self, path: &Path) -> Result<String, FsError> {
        let params = json!({"sessionId": self.session_id, "path": path});
        match self.conn.request("fs/read_text_file", params).await {
            Ok(v) => match v.get("content").and_then(Value::as_str) {
                Some(c) => Ok(c.to_string()),
                None => Err(FsError::Io(format!(
                    "{}: the client's fs/read_text_file answer has no content",
                    path.display()
                ))),
            },
            // The client cannot read it: a file that does not exist is NotFound (the write
            // tool creates files), anything else says what the client said.
            Err(e) => {
                if tokio::fs::symlink_metadata(path).await.is_err() {
                    Err(FsError::NotFound(path.to_path_buf()))
                } else {
                    Err(FsError::Io(format!("{}: {}", path.display(), e.message)))
                }
            }
        }
    }

    async fn client_write(&self, path: &Path, text: &str) -> Result<(), FsError> {
        let params = json!({"sessionId": self.session_id, "path": path, "content": text});
        self.conn
            .request("fs/write_text_file", params)
            .await
            .map(|_| ())
            .map_err(|e| FsError::Rejected(format!("{}: {}", path.display(), e.message)))
    }
}

#[async_trait]
impl Fs for ClientFs {
    fn root(&self) -> &Path {
        self.disk.root()
    }

    async fn read(&self, path: &Path) -> Result<FileSnapshot, FsError> {
        if !self.read {
            return self.disk.read(path).await;
        }
        let text = self.client_read(path).await?;
        Ok(FileSnapshot {
            text: Arc::new(text),
            version: None,
            encoding: pi_core::fs::TextEncoding::UTF8,
        })
    }

    async fn replace(
        &self,
        path: &Path,
        base: &FileSnapshot,
        edits: Vec<TextReplace>,
        label: &str,
    ) -> Result<(), FsError> {
        if !self.write {
            return self.disk.replace(path, base, edits, label).await;
        }
        // The client's current text must be what the edit was computed on.
        let now = self.read(path).await?;
        if *now.text != *base.text {
            return Err(FsError::Stale(path.to_path_buf()));
        }
        let text = pi_core::fs::apply_replacements(&base.text, &edits);
        self.client_write(path, &text).await
    }

    async fn write(&self, path: &Path, text: &str, label: &str) -> Result<WriteKind, FsError> {
        if !self.write {
            return self.disk.write(path, text, label).await;
        }
        let existed = tokio::fs::symlink_metadata(path).await.is_ok();
        self.client_write(path, text).await?;
        Ok(if existed {
            WriteKind::Overwritten
        } else {
            WriteKind::Created
        })
    }

    fn has_buffer(&self, _path: &Path) -> bool {
        self.read
    }
}

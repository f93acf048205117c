//! Open documents: the editor's unsaved text, as ropes with versions.
//!
//! `didOpen` / `didChange` / `didClose` are applied synchronously inside the notification
//! handler, before it first awaits, so they take effect strictly in arrival order (tower-lsp
//! starts handlers in order). Waiters can block until a document passes a version, which is how
//! an `applyEdit` learns that the client's `didChange` for it has arrived.
//!
//! Besides the rope (cheap edits, line indexes), a document keeps its text as one contiguous
//! `String` for the version it was made for ([`Document::flat`]): made at `didOpen` and at a
//! full-text `didChange`, dropped at an incremental one and made again on the next
//! [`Documents::text`]. Tools read and match that shared copy instead of copying the rope out
//! on every read (a 2.4 MB buffer costs about 1.5 ms to copy in a fresh process).
//! Only `file:` documents are buffers of files (case ED-02). Documents of any other scheme
//! (`git:` and `vscode-userdata:` from VS Code's diff and timeline views, Neovim fugitive's
//! `fugitive:`, `untitled:`) name the same path but hold other text (the HEAD copy, an index
//! stage, a new unsaved buffer): they are tracked apart, by URI, are never read or edited as
//! the file, and closing one never forgets the file's buffer.
//!
//! File documents are matched by real location (case ED-01): the key is the path with every
//! symlink followed ([`real_key`]), so a buffer opened through a symlinked folder or a
//! symlinked workspace root (`/var` → `/private/var` on macOS) is the buffer a tool reaches
//! under any other name of the same file. The document keeps the URI the editor opened it
//! under ([`Document::uri`]); edits are sent to that URI.
//!
//! One file may be open under several URIs at once (through a symlinked folder and its real
//! path; `file:///w/a%2Eb` and `file:///w/a.b`): each URI is its own document with its own
//! text and version, and the file's buffer is the one the editor touched last (opened or
//! changed), which is the text tools read and the URI edits go to. Closing one of them
//! leaves the others open; the file's buffer is then the latest of those left.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ropey::Rope;
use tokio::sync::watch;
use tower_lsp_server::ls_types::{TextDocumentContentChangeEvent, Uri};

use crate::positions::{position_to_char, Encoding};

/// One open document.
#[derive(Debug, Clone)]
pub struct Document {
    /// The URI the editor opened it under (for a file, one of its names; edits go here).
    pub uri: Uri,
    pub text: Rope,
    pub version: i32,
    /// The same text as one `String`, when already made for this version (see module docs).
    pub flat: Option<Arc<String>>,
    /// Bumped by every change applied to this document (versions come from the client and
    /// are not trusted to move on every change).
    pub generation: u64,
}

#[derive(Debug, Default)]
struct Maps {
    /// `file:` documents by real path ([`real_key`]): every URI the file is open under, the
    /// one touched last at the end (the file's buffer).
    files: HashMap<PathBuf, Vec<Document>>,
    /// The key in `files` of each open `file:` URI (so changes and closes need no file system
    /// look-up).
    keys: HashMap<Uri, PathBuf>,
    /// Documents of every other scheme, by URI: never a file's buffer.
    others: HashMap<Uri, Document>,
    /// URIs whose document was dropped by [`Documents::distrust`]: the editor still has them
    /// open, so the next full-text `didChange` makes them documents again.
    distrusted: HashSet<Uri>,
}

/// Encodings of open buffers' files on disk, by real path (see [`Documents::encoding`]).
type Encodings = Arc<Mutex<HashMap<PathBuf, pi_core::fs::TextEncoding>>>;

/// All open documents: file buffers keyed by real path, other schemes apart.
#[derive(Debug)]
pub struct Documents {
    maps: Mutex<Maps>,
    /// Bumped on every change; waiters re-check their condition.
    changes: watch::Sender<u64>,
    /// The encoding of each open buffer's file on disk (ED-04), found in the background when
    /// the buffer opens, so no tool call pays for reading the file to learn it.
    encodings: Encodings,
}

impl Default for Documents {
    fn default() -> Self {
        Documents {
            maps: Mutex::new(Maps::default()),
            changes: watch::channel(0).0,
            encodings: Arc::default(),
        }
    }
}

/// The file path of a `file:` URI; `None` for every other scheme (`git:`, `fugitive:`,
/// `untitled:`, …), whose path is not a file's (ED-02).
pub fn uri_path(uri: &Uri) -> Option<PathBuf> {
    let is_file = uri
        .as_str()
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("file:"));
    if !is_file {
        return None;
    }
    uri.to_file_path().map(|p| p.into_owned())
}

/// The key a file is known by: `path` with every symlink followed (`realpath`); for a path
/// that does not exist (yet, or any more), its parent's real path joined with its name, else
/// the path as given.
pub fn real_key(path: &Path) -> PathBuf {
    use pi_core::platform::paths::canonicalize;
    if let Ok(real) = canonicalize(path) {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => match canonicalize(parent) {
            Ok(p) => p.join(name),
            Err(_) => path.to_path_buf(),
        },
        _ => path.to_path_buf(),
    }
}

/// The paths of `workspaceFolders` entries (case ED-07), canonical, in order, and the URIs of
/// those that are not `file:` folders (which tools cannot reach; said in the log).
pub fn folder_paths(
    folders: &[tower_lsp_server::ls_types::WorkspaceFolder],
) -> (Vec<PathBuf>, Vec<String>) {
    let mut paths = Vec::new();
    let mut ignored = Vec::new();
    for f in folders {
        match uri_path(&f.uri) {
            Some(p) => paths.push(pi_core::platform::paths::canonicalize(&p).unwrap_or(p)),
            None => ignored.push(f.uri.as_str().to_string()),
        }
    }
    (paths, ignored)
}

impl Documents {
    fn bump(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// `textDocument/didOpen`: a `file:` document becomes the buffer of its file (matched by
    /// real location); any other scheme is tracked apart.
    pub fn open(&self, uri: Uri, text: &str, version: i32) {
        let doc = Document {
            uri: uri.clone(),
            text: Rope::from_str(text),
            version,
            flat: Some(Arc::new(text.to_string())),
            generation: 0,
        };
        let key = uri_path(&uri).map(|p| real_key(&p));
        if let Some(key) = &key {
            self.detect_encoding(key.clone());
        }
        if let Ok(mut m) = self.maps.lock() {
            m.distrusted.remove(&uri);
            match key {
                Some(key) => {
                    if let Some(old) = m.keys.insert(uri.clone(), key.clone()) {
                        // Opened again (without a close): under its new key only.
                        Self::remove_uri(&mut m, &old, &uri);
                    }
                    let docs = m.files.entry(key).or_default();
                    docs.retain(|d| d.uri != uri);
                    docs.push(doc);
                }
                None => {
                    m.others.insert(uri, doc);
                }
            }
        }
        self.bump();
    }

    /// `textDocument/didChange`: applies `changes` in order (full or incremental) to the
    /// document opened as `uri`. A document dropped by [`Documents::distrust`] is made again
    /// from the last full-text change (the incremental ones after it applied); incremental
    /// changes alone leave it dropped (their base is unknown).
    pub fn change(
        &self,
        uri: &Uri,
        version: i32,
        mut changes: Vec<TextDocumentContentChangeEvent>,
        enc: Encoding,
    ) {
        let full = changes.iter().rposition(|c| c.range.is_none());
        let recovered = match (self.maps.lock(), full) {
            (Ok(mut m), Some(i)) if m.distrusted.contains(uri) => {
                m.distrusted.remove(uri);
                Some(changes.drain(..=i).next_back().map(|c| c.text))
            }
            _ => None,
        };
        if let Some(Some(text)) = recovered {
            tracing::info!(
                "{}: the editor sent its whole text again: the buffer is used again",
                uri.as_str()
            );
            self.open(uri.clone(), &text, version);
        }
        if let Ok(mut m) = self.maps.lock() {
            let m = &mut *m;
            let doc = match m.keys.get(uri) {
                Some(key) => m.files.get_mut(key).and_then(|docs| {
                    // The document changed becomes the file's buffer (the last one).
                    let i = docs.iter().position(|d| d.uri == *uri)?;
                    let doc = docs.remove(i);
                    docs.push(doc);
                    docs.last_mut()
                }),
                None => m.others.get_mut(uri),
            };
            if let Some(doc) = doc {
                for ch in changes {
                    match ch.range {
                        None => {
                            doc.text = Rope::from_str(&ch.text);
                            doc.flat = Some(Arc::new(ch.text));
                        }
                        Some(r) => {
                            doc.flat = None;
                            let start = position_to_char(&doc.text, r.start, enc);
                            let end = position_to_char(&doc.text, r.end, enc).max(start);
                            doc.text.remove(start..end);
                            doc.text.insert(start, &ch.text);
                        }
                    }
                }
                doc.version = version;
                doc.generation += 1;
            }
        }
        self.bump();
    }

    /// Drops the document opened as `uri` because a change to it could not be applied (a
    /// `didChange` whose content change has no `text`): its text can no longer be trusted,
    /// so tools read the file from disk (and edit it there) until the editor sends the whole
    /// text again (`didOpen`, or a full-text `didChange`). Returns whether it was open.
    pub fn distrust(&self, uri: &Uri) -> bool {
        let open = match self.maps.lock() {
            Ok(mut m) => {
                let open = match m.keys.remove(uri) {
                    Some(key) => {
                        Self::remove_uri(&mut m, &key, uri);
                        true
                    }
                    None => m.others.remove(uri).is_some(),
                };
                if open {
                    m.distrusted.insert(uri.clone());
                }
                open
            }
            Err(_) => false,
        };
        self.bump();
        open
    }

    /// `textDocument/didClose`: forgets the document opened as `uri`. The file stays open
    /// under its other URIs (closing a `git:` view of a file, or the file's symlinked name,
    /// leaves its other buffers alone).
    pub fn close(&self, uri: &Uri) {
        if let Ok(mut m) = self.maps.lock() {
            m.distrusted.remove(uri);
            match m.keys.remove(uri) {
                Some(key) => Self::remove_uri(&mut m, &key, uri),
                None => {
                    m.others.remove(uri);
                }
            }
        }
        self.bump();
    }

    /// Removes the document `uri` of the file `key` (and the file when it was its last).
    fn remove_uri(m: &mut Maps, key: &Path, uri: &Uri) {
        if let Some(docs) = m.files.get_mut(key) {
            docs.retain(|d| d.uri != *uri);
            if docs.is_empty() {
                m.files.remove(key);
            }
        }
    }

    /// The key of `path` in the file map: its real path, or the path itself when it is a key
    /// already (a file deleted since it was opened).
    fn key(m: &Maps, path: &Path) -> Option<PathBuf> {
        // No file open: nothing to resolve the path for (a tool round with no buffers open
        // costs no `realpath` here).
        if m.files.is_empty() {
            return None;
        }
        if m.files.contains_key(path) {
            return Some(path.to_path_buf());
        }
        let real = real_key(path);
        m.files.contains_key(&real).then_some(real)
    }

    /// A copy of the open buffer of the file at `path` (under any of its names): of the
    /// URIs it is open under, the one touched last.
    pub fn get(&self, path: &Path) -> Option<Document> {
        let m = self.maps.lock().ok()?;
        let key = Self::key(&m, path)?;
        m.files.get(&key).and_then(|d| d.last()).cloned()
    }

    /// The URIs the file at `path` is open under, the file's buffer last.
    pub fn uris(&self, path: &Path) -> Vec<Uri> {
        let Ok(m) = self.maps.lock() else {
            return Vec::new();
        };
        Self::key(&m, path)
            .and_then(|k| m.files.get(&k))
            .map(|docs| docs.iter().map(|d| d.uri.clone()).collect())
            .unwrap_or_default()
    }

    /// Finds the encoding of the file at `key` on a blocking thread (when there is a runtime)
    /// and keeps it for [`Documents::encoding`]. A file not on disk is UTF-8.
    fn detect_encoding(&self, key: PathBuf) {
        let encodings = self.encodings.clone();
        let find = move || {
            let found = std::fs::read(&key)
                .map(|b| pi_core::fs::detect_encoding(&b))
                .unwrap_or(pi_core::fs::TextEncoding::UTF8);
            if let Ok(mut e) = encodings.lock() {
                e.insert(key, found);
            }
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(tokio::task::spawn_blocking(find));
        }
    }

    /// The encoding of the open buffer's file at `path` on disk, when already found.
    pub fn encoding(&self, path: &Path) -> Option<pi_core::fs::TextEncoding> {
        let key = {
            let m = self.maps.lock().ok()?;
            Self::key(&m, path)?
        };
        self.encodings.lock().ok()?.get(&key).copied()
    }

    /// Keeps `encoding` as the encoding of the open buffer's file at `path`.
    pub fn set_encoding(&self, path: &Path, encoding: pi_core::fs::TextEncoding) {
        let key = match self.maps.lock() {
            Ok(m) => Self::key(&m, path),
            Err(_) => None,
        };
        if let (Some(key), Ok(mut e)) = (key, self.encodings.lock()) {
            e.insert(key, encoding);
        }
    }

    /// A copy of the open document `uri` of any scheme (a `git:` view included).
    pub fn get_uri(&self, uri: &Uri) -> Option<Document> {
        let m = self.maps.lock().ok()?;
        match m.keys.get(uri) {
            Some(key) => m
                .files
                .get(key)
                .and_then(|docs| docs.iter().find(|d| d.uri == *uri))
                .cloned(),
            None => m.others.get(uri).cloned(),
        }
    }

    /// The URIs of the open documents that are not files' buffers.
    pub fn other_uris(&self) -> Vec<Uri> {
        self.maps
            .lock()
            .map(|m| m.others.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The open buffer's whole text as one shared `String` and its version: the kept copy
    /// when there is one, else made from the rope (outside the lock) and kept, unless the
    /// document changed meanwhile.
    pub fn text(&self, path: &Path) -> Option<(Arc<String>, i32)> {
        let doc = self.get(path)?;
        if let Some(flat) = doc.flat {
            return Some((flat, doc.version));
        }
        let flat = Arc::new(String::from(&doc.text));
        if let Ok(mut m) = self.maps.lock() {
            if let Some(key) = Self::key(&m, path) {
                if let Some(now) = m.files.get_mut(&key).and_then(|d| d.last_mut()) {
                    if now.uri == doc.uri && now.generation == doc.generation && now.flat.is_none()
                    {
                        now.flat = Some(flat.clone());
                    }
                }
            }
        }
        Some((flat, doc.version))
    }

    /// Real paths of all open file buffers.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.maps
            .lock()
            .map(|m| m.files.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Waits until the buffer of the file at `path` has a version other than `version` (or
    /// closed), at most `timeout`. Returns true when it did.
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

#[cfg(test)]
mod tests {
    use super::*;
    use tower_lsp_server::ls_types::{Position, Range};

    #[test]
    fn ed02_other_schemes_are_apart_and_closing_them_keeps_the_file_buffer() {
        let docs = Documents::default();
        let file: Uri = "file:///w/src/a.txt".parse().unwrap();
        let git: Uri = "git:/w/src/a.txt?%7B%22ref%22%3A%22HEAD%22%7D"
            .parse()
            .unwrap();
        let fug: Uri = "fugitive:///w/.git//0/src/a.txt".parse().unwrap();
        let untitled: Uri = "untitled:Untitled-1".parse().unwrap();
        let path = Path::new("/w/src/a.txt");
        docs.open(file.clone(), "working\n", 5);
        docs.open(git.clone(), "HEAD\n", 1);
        docs.open(fug.clone(), "index\n", 1);
        docs.open(untitled.clone(), "scratch\n", 1);
        assert_eq!(
            docs.text(path).unwrap(),
            (Arc::new("working\n".to_string()), 5)
        );
        assert_eq!(docs.get_uri(&git).unwrap().text.to_string(), "HEAD\n");
        assert_eq!(docs.paths(), vec![PathBuf::from("/w/src/a.txt")]);
        let full = |t: &str| TextDocumentContentChangeEvent {
            range: None,
            range_length: None,
            text: t.into(),
        };
        // A change of the git view changes only the git view.
        docs.change(&git, 2, vec![full("HEAD 2\n")], Encoding::Utf16);
        assert_eq!(docs.text(path).unwrap().0.as_str(), "working\n");
        docs.close(&git);
        docs.close(&fug);
        docs.close(&untitled);
        assert_eq!(docs.text(path).unwrap().0.as_str(), "working\n");
        let mut others = docs.other_uris();
        others.sort();
        assert!(others.is_empty());
        docs.close(&file);
        assert!(docs.get(path).is_none());
        assert_eq!(
            uri_path(&"FILE:///w/x".parse().unwrap()),
            Some(PathBuf::from("/w/x"))
        );
        assert_eq!(uri_path(&git), None);
    }

    #[test]
    fn a_distrusted_document_is_dropped_until_the_editor_sends_its_whole_text() {
        let docs = Documents::default();
        let file: Uri = "file:///w/src/b.txt".parse().unwrap();
        let path = Path::new("/w/src/b.txt");
        let change = |range: Option<Range>, t: &str| TextDocumentContentChangeEvent {
            range,
            range_length: None,
            text: t.into(),
        };
        let at = |l, c| Range {
            start: Position::new(l, c),
            end: Position::new(l, c),
        };
        docs.open(file.clone(), "one\n", 1);
        assert!(docs.distrust(&file));
        // Dropped: reads go to disk; an incremental change has no base and keeps it dropped.
        assert!(docs.get(path).is_none());
        docs.change(&file, 3, vec![change(Some(at(0, 0)), "x")], Encoding::Utf16);
        assert!(docs.get(path).is_none());
        assert_eq!(docs.uris(path), Vec::<Uri>::new());
        // A full-text change makes it a document again, the later incremental ones applied.
        docs.change(
            &file,
            4,
            vec![
                change(Some(at(0, 0)), "lost"),
                change(None, "two\n"),
                change(Some(at(0, 3)), "!"),
            ],
            Encoding::Utf16,
        );
        let (text, version) = docs.text(path).unwrap();
        assert_eq!((text.as_str(), version), ("two!\n", 4));
        assert_eq!(docs.uris(path), vec![file.clone()]);
        // Not open (or closed since): nothing to drop, and a later change opens nothing.
        docs.close(&file);
        assert!(!docs.distrust(&file));
        docs.change(&file, 5, vec![change(None, "three\n")], Encoding::Utf16);
        assert!(docs.get(path).is_none());
    }

    #[cfg(unix)] // symlinks / inode numbers: Unix APIs
    #[test]
    fn ed01_a_buffer_opened_through_a_symlink_is_found_by_its_real_path() {
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("real")).unwrap();
        let dir = dir.canonicalize().unwrap();
        std::fs::write(dir.join("real/a.txt"), "disk\n").unwrap();
        let _ = std::os::unix::fs::symlink(dir.join("real"), dir.join("link"));
        let docs = Documents::default();
        let via_link = Uri::from_file_path(dir.join("link/a.txt")).unwrap();
        docs.open(via_link.clone(), "buffer\n", 1);
        let doc = docs.get(&dir.join("real/a.txt")).unwrap();
        assert_eq!(
            (doc.uri, doc.text.to_string()),
            (via_link.clone(), "buffer\n".into())
        );
        assert!(docs.get(&dir.join("link/a.txt")).is_some());
        docs.close(&via_link);
        assert!(docs.get(&dir.join("real/a.txt")).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)] // symlinks / inode numbers: Unix APIs
    #[test]
    fn one_file_open_under_two_uris_keeps_both_and_closing_one_keeps_the_other() {
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("real")).unwrap();
        let dir = dir.canonicalize().unwrap();
        std::fs::write(dir.join("real/a.txt"), "disk\n").unwrap();
        let _ = std::os::unix::fs::symlink(dir.join("real"), dir.join("link"));
        let docs = Documents::default();
        let real = Uri::from_file_path(dir.join("real/a.txt")).unwrap();
        let link = Uri::from_file_path(dir.join("link/a.txt")).unwrap();
        // The same path spelt with a percent-encoded letter.
        let encoded: Uri = format!("file://{}/real/%61.txt", dir.display())
            .parse()
            .unwrap();
        let path = dir.join("real/a.txt");
        let full = |t: &str| TextDocumentContentChangeEvent {
            range: None,
            range_length: None,
            text: t.into(),
        };
        docs.open(real.clone(), "one\n", 1);
        docs.open(link.clone(), "two\n", 7);
        docs.open(encoded.clone(), "three\n", 3);
        let now = |d: &Documents| d.get(&path).map(|d| (d.uri, d.text.to_string(), d.version));
        assert_eq!(now(&docs), Some((encoded.clone(), "three\n".into(), 3)));
        assert_eq!(
            docs.uris(&path),
            vec![real.clone(), link.clone(), encoded.clone()]
        );
        // A change makes its document the file's buffer.
        docs.change(&real, 2, vec![full("one b\n")], Encoding::Utf16);
        assert_eq!(now(&docs), Some((real.clone(), "one b\n".into(), 2)));
        assert_eq!(
            docs.text(&path).unwrap(),
            (Arc::new("one b\n".to_string()), 2)
        );
        assert_eq!(docs.get_uri(&link).unwrap().text.to_string(), "two\n");
        // Closing the buffer's URI leaves the others; the latest of them is the buffer.
        docs.close(&real);
        assert_eq!(now(&docs), Some((encoded.clone(), "three\n".into(), 3)));
        docs.close(&encoded);
        assert_eq!(now(&docs), Some((link.clone(), "two\n".into(), 7)));
        assert_eq!(docs.paths(), vec![path.clone()]);
        docs.close(&link);
        assert!(docs.get(&path).is_none());
        assert!(docs.paths().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shared_text_is_kept_per_version_and_remade_after_an_incremental_change() {
        let docs = Documents::default();
        let uri: Uri = "file:///w/a.txt".parse().unwrap();
        let path = Path::new("/w/a.txt");
        docs.open(uri.clone(), "one\ntwo\n", 1);
        let (a, v) = docs.text(path).unwrap();
        let (b, _) = docs.text(path).unwrap();
        assert_eq!((a.as_str(), v), ("one\ntwo\n", 1));
        assert!(Arc::ptr_eq(&a, &b));
        let change = TextDocumentContentChangeEvent {
            range: Some(Range {
                start: Position::new(1, 0),
                end: Position::new(1, 3),
            }),
            range_length: None,
            text: "TWO".into(),
        };
        docs.change(&uri, 2, vec![change], Encoding::Utf16);
        assert!(docs.get(path).unwrap().flat.is_none());
        let (c, v) = docs.text(path).unwrap();
        assert_eq!((c.as_str(), v), ("one\nTWO\n", 2));
        assert!(Arc::ptr_eq(&c, &docs.text(path).unwrap().0));
        let full = TextDocumentContentChangeEvent {
            range: None,
            range_length: None,
            text: "all new".into(),
        };
        docs.change(&uri, 3, vec![full], Encoding::Utf16);
        assert_eq!(
            docs.text(path).unwrap(),
            (Arc::new("all new".to_string()), 3)
        );
        // A snapshot taken before a change is not the buffer's text any more.
        assert!(!Arc::ptr_eq(&c, &docs.text(path).unwrap().0));
    }
}

//! The one writer of a session file: `.lock` held with an OS lock, appends, background sync, branch/label/name/fork, images written again.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pi_ai::Message;
use serde_json::{json, Value};

use super::*;

/// What a loaded session holds on its active branch (root to the last entry).
#[derive(Debug, Clone, Default)]
pub struct LoadedSession {
    pub id: String,
    pub cwd: Option<String>,
    pub messages: Vec<Message>,
    /// `(provider, modelId)` from the last `model_change` or assistant message on the path.
    pub model: Option<(String, String)>,
    /// From the last `thinking_level_change` on the path; `None` when the branch records
    /// no level (the session then runs at the default level and records it on resume).
    pub thinking_level: Option<String>,
    /// Damage found and repaired while loading, for the user to see.
    pub warnings: Vec<String>,
    /// The session's name (`session_info`), if any.
    pub name: Option<String>,
    /// The whole tree, every entry as stored (shared with the writer until it appends).
    pub tree: std::sync::Arc<SessionTree>,
    /// Opened with [`SessionWriter::open_deferred`]: `messages` is empty, the context is to be
    /// built from the writer when needed.
    pub deferred: bool,
}

/// A message's JSON as `serde_json` serialises it (pi-ai's derived serialisation: the bytes a
/// `message` entry's line holds after `"message":`, stamps aside), made once and shared by
/// whoever writes that message whole: the session file's line
/// ([`SessionWriter::append_message_json`]) and a product's events
/// ([`crate::harness::SessionListener::event_json`]). It names the message it was made from
/// (the same `Arc`: [`MessageJson::is_of`]), so nobody takes it for another; cloning it
/// shares the bytes.
#[derive(Debug, Clone)]
pub struct MessageJson(Arc<MessageJsonInner>);

#[derive(Debug)]
struct MessageJsonInner {
    message: Arc<Message>,
    bytes: Vec<u8>,
}

impl MessageJson {
    /// Room for a tool round's messages (a result, an answer with its call) without growing.
    const CAPACITY: usize = 512;

    /// `message` serialised; an error when it does not serialise (a [`Message::System`]).
    pub fn new(message: &Arc<Message>) -> serde_json::Result<MessageJson> {
        let mut bytes = Vec::with_capacity(Self::CAPACITY);
        serde_json::to_writer(&mut bytes, &**message)?;
        // Kept while the run goes on (the LSP sink's repeats): no spare room kept with it.
        bytes.shrink_to_fit();
        Ok(MessageJson(Arc::new(MessageJsonInner {
            message: message.clone(),
            bytes,
        })))
    }

    /// Whether this is the JSON of `message` (the same `Arc`, not an equal message).
    pub fn is_of(&self, message: &Arc<Message>) -> bool {
        Arc::ptr_eq(&self.0.message, message)
    }

    /// The message it was made from.
    pub fn message(&self) -> &Arc<Message> {
        &self.0.message
    }

    /// The message's JSON.
    pub fn bytes(&self) -> &[u8] {
        &self.0.bytes
    }
}

/// Room for a `message` line's bytes besides the message: its head up to `"message":`
/// ([`SessionWriter::message_line_head`], about 100 bytes), Pi 1.6's stamps and the end.
const LINE_HEAD: usize = 160;

/// Whether `text` holds U+2028 or U+2029: both are `E2 80 A8` / `E2 80 A9` in UTF-8, found
/// by one search for their first byte (`memchr`), not a decode of every character.
fn has_line_separator(text: &[u8]) -> bool {
    memchr::memchr_iter(0xE2, text)
        .any(|i| matches!(text.get(i + 1..i + 3), Some([0x80, 0xA8 | 0xA9])))
}

/// The single writer of one session file.
#[derive(Debug)]
pub struct SessionWriter {
    path: PathBuf,
    file: std::fs::File,
    id: String,
    leaf: Option<String>,
    /// Tool-call ids of the latest assistant message on the branch that have no result yet.
    open_calls: Vec<String>,
    /// Every entry of the file, kept current on each append (the header included).
    tree: std::sync::Arc<SessionTree>,
    /// Bytes of the file up to the end of its last whole line (what every append starts from).
    whole_len: u64,
    /// A failed append may have left part of a line that could not be cut off yet.
    torn: bool,
    /// Lines of entries appended while the file could not take them (disk full, file-size
    /// limit), oldest first, each with its newline. The entries are the session's all the
    /// same (in the tree, the leaf past them); every later write, [`SessionWriter::flush_unsaved`]
    /// and [`SessionWriter::close`] write these first, so once space frees nothing is lost.
    unsaved: Vec<String>,
    /// This file's place in the background syncer (see [`SessionWriter::sync`]).
    syncer: Option<Arc<SyncState>>,
    /// The file's lock; `None` once [`SessionWriter::close`] released it (nothing more is
    /// written then).
    lock: Option<LockFile>,
    /// How images are written (and, on open, how many turns keep theirs).
    images: ImageOptions,
    /// Pi 0.73.1's format (`sessions.format: "pi-0.73"`): none of Pi 1.6's additions (the
    /// `usage` of compaction and branch summaries) are written.
    pi073: bool,
    /// The configuration (a number naming it, [`crate::agent::Agent::config_generation`])
    /// whose system message the branch was last found to hold, and the leaf it was found at
    /// ([`SessionWriter::system_checked`]).
    system_checked: Option<(u64, Option<String>)>,
    /// The system message last stored and not yet told as events
    /// ([`SessionWriter::take_untold_system`]).
    untold_system: Option<Value>,
    /// The system prompt the branch's stored system messages render when it differs from the
    /// run's own only in the order of its sections ([`SessionWriter::set_replayed_prompt`]).
    replayed_prompt: Option<String>,
}

/// One file's background `fdatasync` state: a clone of the writer's file, whether a sync is
/// queued, and the error of the last background sync (reported by the next `sync`).
#[derive(Debug)]
pub(super) struct SyncState {
    file: std::fs::File,
    pending: std::sync::atomic::AtomicBool,
    error: std::sync::Mutex<Option<std::io::Error>>,
    /// When the last sync was queued (for [`SessionWriter::sync_turn`]).
    queued_at: std::sync::Mutex<Option<std::time::Instant>>,
}

/// The shortest time between two background syncs asked for by turn ends inside one run
/// ([`SessionWriter::sync_turn`]): a run of fast tool rounds costs one `fdatasync` per this
/// interval, not one per round, and a run's end always syncs.
pub const TURN_SYNC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The one background thread that runs queued `fdatasync`s, in request order; `None` when it
/// could not be started (syncs are then done in place).
pub(super) fn syncer() -> Option<&'static std::sync::mpsc::Sender<Arc<SyncState>>> {
    static SYNCER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Arc<SyncState>>>> =
        std::sync::OnceLock::new();
    SYNCER
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<Arc<SyncState>>();
            std::thread::Builder::new()
                .name("session-sync".into())
                .stack_size(64 * 1024)
                .spawn(move || {
                    while let Ok(s) = rx.recv() {
                        s.pending.store(false, std::sync::atomic::Ordering::SeqCst);
                        if let Err(e) = s.file.sync_data() {
                            tracing::warn!("background session sync failed: {e}");
                            if let Ok(mut slot) = s.error.lock() {
                                *slot = Some(e);
                            }
                        }
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// `<file>.lock`, held with an OS lock (std's `File::try_lock`: `flock` on Unix, `LockFileEx` on
/// Windows; exclusive) for as long as the writer lives:
/// the kernel releases it when the process dies, however it dies, so a dead writer's lock is
/// always taken over and a live one never (case SESSX-01: a pid in the file, reused after a
/// container restart, used to fork the session on every resume). The file's text is the
/// owner's pid, for the error message only; it is removed on drop. A second writer of the same
/// file in the same process is refused too (the lock belongs to the open file).
#[derive(Debug)]
pub(super) struct LockFile {
    path: PathBuf,
    _file: std::fs::File,
}

impl LockFile {
    fn acquire(session: &Path) -> Result<LockFile, SessionError> {
        let path = session.with_extension("jsonl.lock");
        let io_err = |source| SessionError::Io {
            path: path.clone(),
            source,
        };
        // A few rounds: a lock file removed by its owner between our open and our lock is a
        // file nobody will look at again; take the one at the path.
        for _ in 0..8 {
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io_err)?;
            match f.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let pid = std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|t| t.trim().parse().ok())
                        .unwrap_or(0);
                    return Err(SessionError::Locked {
                        path: session.to_path_buf(),
                        pid,
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io_err(e)),
            }
            // Still the file at the path (not one its owner removed meanwhile)?
            if !crate::platform::fs::same_file(&f, &path) {
                continue;
            }
            f.set_len(0).map_err(io_err)?;
            writeln!(f, "{}", std::process::id()).map_err(io_err)?;
            return Ok(LockFile { path, _file: f });
        }
        Err(SessionError::Locked {
            path: session.to_path_buf(),
            pid: 0,
        })
    }
}

/// True when the session file at `session` is held by another writer ([`LockFile`]): another
/// process, or another open of it in this one. Reads only (an absent lock file means free).
/// It tests by taking the lock for an instant, so call it only to decide whether to wait.
pub fn lock_held(session: &Path) -> bool {
    let path = session.with_extension("jsonl.lock");
    let Ok(f) = std::fs::File::open(&path) else {
        return false;
    };
    match f.try_lock() {
        Ok(()) => {
            let _ = f.unlock();
            false
        }
        Err(std::fs::TryLockError::WouldBlock) => true,
        Err(std::fs::TryLockError::Error(_)) => false,
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Removed while still locked (the file closes after this): whoever opened it before
        // the removal finds it is no longer the file at the path and tries again.
        let _ = std::fs::remove_file(&self.path);
    }
}

impl SessionWriter {
    /// Creates a new session file in `dir` for a workspace at `cwd`, with its header,
    /// `model_change` and `thinking_level_change` entries.
    pub fn create(
        dir: &Path,
        cwd: &Path,
        provider: &str,
        model_id: &str,
        thinking_level: &str,
    ) -> Result<Self, SessionError> {
        let header = new_header(cwd, None);
        let w = Self::create_with_header(dir, header)?;
        w.started(provider, model_id, thinking_level)
    }

    /// [`SessionWriter::create`] at the file `path`, which must not exist (its folder is
    /// created when missing): Pi 1.6's `SessionManager.open` of a path that does not exist,
    /// a new session kept there (`pi --session <new path>`).
    pub fn create_at(
        path: &Path,
        cwd: &Path,
        provider: &str,
        model_id: &str,
        thinking_level: &str,
    ) -> Result<Self, SessionError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let w = Self::create_file(path.to_path_buf(), new_header(cwd, None))?;
        w.started(provider, model_id, thinking_level)
    }

    /// `self` with a new session's first entries: `model_change`, `thinking_level_change`.
    fn started(
        mut self,
        provider: &str,
        model_id: &str,
        thinking_level: &str,
    ) -> Result<Self, SessionError> {
        let w = &mut self;
        w.append(EntryData::ModelChange {
            provider: provider.to_string(),
            model_id: model_id.to_string(),
        })?;
        w.append(EntryData::ThinkingLevelChange {
            thinking_level: thinking_level.to_string(),
        })?;
        Ok(self)
    }

    fn create_with_header(dir: &Path, header: Value) -> Result<Self, SessionError> {
        ensure_sessions_dir(dir)?;
        let id = header["id"].as_str().unwrap_or_default();
        let ts = header["timestamp"]
            .as_str()
            .unwrap_or_default()
            .replace([':', '.'], "-");
        let path = dir.join(format!("{ts}_{id}.jsonl"));
        Self::create_file(path, header)
    }

    /// A new file at `path` (which must not exist) holding `header`, locked and open for
    /// appending.
    fn create_file(path: PathBuf, header: Value) -> Result<Self, SessionError> {
        let id = header["id"].as_str().unwrap_or_default().to_string();
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let lock = LockFile::acquire(&path)?;
        let syncer = sync_state(&file);
        let mut w = SessionWriter {
            path,
            file,
            id,
            leaf: None,
            open_calls: Vec::new(),
            tree: Arc::new(SessionTree::new(header.clone())),
            whole_len: 0,
            torn: false,
            unsaved: Vec::new(),
            syncer,
            lock: Some(lock),
            images: ImageOptions::default(),
            pi073: false,
            system_checked: None,
            untold_system: None,
            replayed_prompt: None,
        };
        w.write_line(&header)?;
        Ok(w)
    }

    /// Opens an existing file for appending (taking its lock), repairing a torn tail first, and
    /// loads the branch ending at its last entry, with the default [`ImageOptions`].
    pub fn open(path: &Path) -> Result<(Self, LoadedSession), SessionError> {
        Self::open_with(path, ImageOptions::default())
    }

    /// [`SessionWriter::open`] with `images`: the writer stores images as they say, and the
    /// loaded context holds the bytes of the images within their window only (older ones are
    /// [`IMAGE_DROPPED_NOTE`], see [`image_window`]); loading keeps no other image bytes in
    /// memory (case SESS-05), the file keeps them all.
    pub fn open_with(
        path: &Path,
        images: ImageOptions,
    ) -> Result<(Self, LoadedSession), SessionError> {
        Self::open_inner(path, images, false)
    }

    /// [`SessionWriter::open_with`] without building the model context: the loaded session's
    /// `messages` are empty and `deferred` is set; the context is the writer's
    /// [`SessionWriter::context`] when it is needed, and [`SessionTree::message_count`] counts
    /// it before. What stays in memory is the tree (no message text), so a long session opens
    /// in the time it takes to read its lines once, and costs memory for its context only when
    /// a run or a client asks for it.
    pub fn open_deferred(
        path: &Path,
        images: ImageOptions,
    ) -> Result<(Self, LoadedSession), SessionError> {
        Self::open_inner(path, images, true)
    }

    fn open_inner(
        path: &Path,
        images: ImageOptions,
        deferred: bool,
    ) -> Result<(Self, LoadedSession), SessionError> {
        let lock = LockFile::acquire(path)?;
        let mut l = load_file(path, true, deferred)?;
        if images.storage == ImageStorage::Inline
            && l.assets_read > 0
            && l.tree.header["version"].as_u64() == Some(SESSION_VERSION)
        {
            // An older pi-lsp kept this file's large images in assets/, which Pi cannot read:
            // written once more with them inline (the original kept beside it), then loaded
            // from the new text.
            let backup = write_inline(path, &l.tree)?;
            let mut again = load_file(path, true, deferred)?;
            let mut warnings = std::mem::take(&mut l.warnings);
            warnings.push(format!(
                "rewrote {} with the {} image line(s) kept in assets/ inline, as Pi reads them; the original is kept at {}",
                path.display(),
                l.assets_read,
                backup.display()
            ));
            again.warnings = warnings;
            l = again;
        }
        let Loaded {
            mut tree,
            messages,
            mut warnings,
            stripped,
            ..
        } = l;
        if tree.header["version"].as_u64().unwrap_or(1) < SESSION_VERSION {
            // Appending v3 entries to an older file would mix formats: rewrite it as v3 once,
            // keeping the original beside it.
            let backup = migrate_file(path, &mut tree)?;
            warnings.push(format!(
                "rewrote {} as a version {SESSION_VERSION} session; the original is kept at {}",
                path.display(),
                backup.display()
            ));
        }
        warnings.extend(reparent_orphan_results(&mut tree, messages.as_deref()));
        let leaf = tree.last_id().map(str::to_string);
        let mut ctx = match messages {
            _ if deferred => tree.settings(leaf.as_deref()),
            Some(mut parsed) => {
                restore_images(
                    &tree,
                    leaf.as_deref(),
                    &mut parsed,
                    &stripped,
                    images.keep_turns,
                );
                tree.context_parsed(leaf.as_deref(), parsed)
            }
            None => tree.context(leaf.as_deref()),
        };
        image_window(&mut ctx.messages, images.keep_turns);
        let loaded = LoadedSession {
            id: tree.header["id"].as_str().unwrap_or_default().to_string(),
            cwd: tree.header["cwd"].as_str().map(str::to_string),
            messages: ctx.messages,
            model: ctx.model,
            thinking_level: ctx.thinking_level,
            warnings,
            name: tree.name(),
            tree: Arc::new(tree),
            deferred,
        };
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io(path))?;
        // Loading repaired the tail: the file ends with a whole line.
        let whole_len = file.metadata().map_err(io(path))?.len();
        let syncer = sync_state(&file);
        let mut writer = SessionWriter {
            path: path.to_path_buf(),
            file,
            id: loaded.id.clone(),
            leaf: None,
            open_calls: Vec::new(),
            tree: loaded.tree.clone(),
            whole_len,
            torn: false,
            unsaved: Vec::new(),
            syncer,
            lock: Some(lock),
            images,
            pi073: false,
            system_checked: None,
            untold_system: None,
            replayed_prompt: None,
        };
        let tree = writer.tree.clone();
        writer.set_leaf(&tree, leaf.as_deref());
        Ok((writer, loaded))
    }

    /// Moves the leaf (where the next entry attaches) to `leaf` (`None`: before the first
    /// entry), and recomputes which tool calls are open there.
    fn set_leaf(&mut self, tree: &SessionTree, leaf: Option<&str>) {
        self.leaf = leaf.map(str::to_string);
        self.open_calls.clear();
        let Some(leaf) = leaf else { return };
        let mut answered = HashSet::new();
        for e in tree.ancestors(leaf).filter(|e| e.kind == "message") {
            let raw = e.raw();
            let m = &raw["message"];
            match m["role"].as_str() {
                Some("toolResult") => {
                    answered.insert(m["toolCallId"].as_str().unwrap_or_default().to_string());
                }
                Some("assistant") => {
                    self.open_calls = m["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|b| b["type"] == "toolCall")
                        .filter_map(|b| b["id"].as_str())
                        .filter(|id| !answered.contains(*id))
                        .map(str::to_string)
                        .collect();
                    return;
                }
                _ => return,
            }
        }
    }

    /// Branches: the next entry attaches at `entry` (an existing id, or `None` for before the
    /// first entry). Nothing is written; the abandoned branch stays in the file.
    pub fn branch(&mut self, tree: &SessionTree, entry: Option<&str>) -> Result<(), SessionError> {
        if let Some(id) = entry {
            if tree.get(id).is_none() {
                return Err(SessionError::UnknownEntry(id.to_string()));
            }
        }
        self.set_leaf(tree, entry);
        Ok(())
    }

    /// Keeps the file in Pi 0.73.1's format from now on (`sessions.format: "pi-0.73"`): Pi
    /// 1.6's additions are left out of what is written.
    pub fn set_pi073_format(&mut self, on: bool) {
        self.pi073 = on;
    }

    /// Whether Pi 1.6's additions are written (see [`SessionWriter::set_pi073_format`]).
    pub fn writes_pi16(&self) -> bool {
        !self.pi073
    }

    /// Branches at `entry` and writes a `branch_summary` there carrying what the abandoned
    /// branch concluded, as Pi 1.6.0's `branchWithSummary` writes it: `fromId` is the leaf
    /// being left (`"root"` when there is none), the summary's parent `entry`, `details` Pi's
    /// `{readFiles, modifiedFiles}` (or `Null` to leave it out), `fromHook: false`, and (Pi
    /// 1.6) the summary request's `usage` when one was made. Returns the summary entry's id.
    pub fn branch_with_summary(
        &mut self,
        tree: &SessionTree,
        entry: Option<&str>,
        summary: &str,
        details: Value,
        usage: Option<pi_ai::Usage>,
    ) -> Result<String, SessionError> {
        // Pi 1.6's `usage`, not in a file kept in Pi 0.73.1's format.
        let usage = usage.filter(|_| self.writes_pi16());
        let from_id = self.leaf().unwrap_or("root").to_string();
        self.branch(tree, entry)?;
        self.append(EntryData::BranchSummary {
            from_id,
            summary: summary.to_string(),
            details: (!details.is_null()).then_some(details),
            from_hook: false,
            usage,
        })
    }

    /// Sets (or with `None` clears) the label of entry `target`.
    pub fn label(&mut self, target: &str, label: Option<&str>) -> Result<String, SessionError> {
        self.append(EntryData::Label {
            target_id: target.to_string(),
            label: label.map(str::to_string),
        })
    }

    /// Names the session (`session_info`).
    pub fn set_name(&mut self, name: &str) -> Result<String, SessionError> {
        self.append(EntryData::SessionInfo {
            name: name.to_string(),
        })
    }

    /// Forks into a new file in `dir` (see [`SessionWriter::fork_from`]) at `leaf` (default:
    /// the current leaf). This file is not written.
    pub fn fork(
        &self,
        tree: &SessionTree,
        dir: &Path,
        leaf: Option<&str>,
    ) -> Result<(SessionWriter, LoadedSession), SessionError> {
        let leaf = leaf.map(str::to_string).or_else(|| self.leaf.clone());
        Self::fork_from_with(&self.path, tree, dir, leaf.as_deref(), self.images)
    }

    /// The image settings of this writer.
    pub fn image_options(&self) -> ImageOptions {
        self.images
    }

    /// Sets how later appends store images (the loaded context is not changed).
    pub fn set_image_options(&mut self, images: ImageOptions) {
        self.images = images;
    }

    /// A new session file in `dir` whose header's `parentSession` names `parent`, holding the
    /// entries of `tree`'s path to `leaf` (default: its last entry) with their ids. `parent` is
    /// never written (it may be locked by another process). Default [`ImageOptions`].
    pub fn fork_from(
        parent: &Path,
        tree: &SessionTree,
        dir: &Path,
        leaf: Option<&str>,
    ) -> Result<(SessionWriter, LoadedSession), SessionError> {
        Self::fork_from_with(parent, tree, dir, leaf, ImageOptions::default())
    }

    /// [`SessionWriter::fork_from`] with `images`: lines are copied byte for byte, except
    /// that with [`ImageStorage::Assets`] large images move to the new folder's `assets/`;
    /// with [`ImageStorage::Inline`] images an older pi-lsp kept in `assets/` are written
    /// inline (the loaded entry holds their bytes), so Pi can read the fork.
    pub fn fork_from_with(
        parent: &Path,
        tree: &SessionTree,
        dir: &Path,
        leaf: Option<&str>,
        images: ImageOptions,
    ) -> Result<(SessionWriter, LoadedSession), SessionError> {
        let path = Self::write_fork(parent, tree, dir, leaf, images)?;
        SessionWriter::open_with(&path, images)
    }

    /// Writes the fork [`SessionWriter::fork_from_with`] opens and returns its path: a new
    /// session file in `dir` whose header's `parentSession` names `parent`, holding the
    /// entries of `tree`'s path to `leaf` (default: its last entry), their lines as stored
    /// (read back from the loaded file in runs, written a megabyte at a time), except that
    /// with [`ImageStorage::Assets`] large images move to the new folder's `assets/`. The
    /// file is synced and released (opening it is the caller's: [`SessionWriter::open_deferred`]
    /// keeps only the tree, as a plain open does).
    pub fn write_fork(
        parent: &Path,
        tree: &SessionTree,
        dir: &Path,
        leaf: Option<&str>,
        images: ImageOptions,
    ) -> Result<PathBuf, SessionError> {
        /// Lines are written when this many bytes of them are waiting.
        const BATCH: usize = 1 << 20;
        let cwd = tree.header["cwd"]
            .as_str()
            .map(PathBuf::from)
            .unwrap_or_default();
        let mut w = Self::create_with_header(dir, new_header(&cwd, Some(parent)))?;
        if let Some(leaf) = leaf.or(tree.last_id()) {
            // Whole lines joined by newlines, written with one `write` a batch.
            let mut batch = String::new();
            let mut failed = None;
            tree.path_texts(leaf, &mut |e, text| {
                if failed.is_some() {
                    return;
                }
                let moved = if images.storage == ImageStorage::Assets
                    && text.len() > IMAGE_INLINE_LIMIT
                    && text.contains("\"image\"")
                {
                    // The line holds an image to move to the new folder's assets.
                    let mut line = e.raw();
                    match store_large_images(&mut line, &dir.join(ASSETS_DIR)) {
                        Ok(_) => Some(line.to_string()),
                        Err(err) => {
                            failed = Some(err);
                            return;
                        }
                    }
                } else {
                    None
                };
                if !batch.is_empty() {
                    batch.push('\n');
                }
                batch.push_str(moved.as_deref().unwrap_or(text));
                if batch.len() >= BATCH {
                    failed = w.write_text(&std::mem::take(&mut batch)).err();
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
            if !batch.is_empty() {
                w.write_text(&batch)?;
            }
        }
        w.sync_now()?;
        Ok(w.path.clone())
    }

    /// The session id (the header's `id`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current leaf.
    pub fn leaf(&self) -> Option<&str> {
        self.leaf.as_deref()
    }

    /// Whether the branch at the current leaf was found to hold the system message of
    /// configuration `generation` ([`SessionWriter::mark_system_checked`]; the number is the
    /// caller's, [`crate::agent::Agent::config_generation`]). Any later entry, or another
    /// leaf, makes it unchecked: the entries up to a leaf never change, so the check holds
    /// while the leaf and the configuration stay.
    pub fn system_checked(&self, generation: u64) -> bool {
        self.system_checked
            .as_ref()
            .is_some_and(|(g, leaf)| *g == generation && leaf.as_deref() == self.leaf.as_deref())
    }

    /// Notes that the branch at the current leaf holds the system message (prompt and tools)
    /// of configuration `generation` (see [`SessionWriter::system_checked`]).
    pub fn mark_system_checked(&mut self, generation: u64) {
        self.system_checked = Some((generation, self.leaf.clone()));
    }

    /// Notes `message` (a stored system message, as the file holds it) as stored and not yet
    /// told: Pi 1.6 sends it as `message_start` / `message_end` in the run it starts.
    pub fn set_untold_system(&mut self, message: Value) {
        self.untold_system = Some(message);
    }

    /// Notes the system prompt the branch's stored system messages render (Pi 1.6 sends that
    /// one: `getCurrentSystemPrompt`, sections in stored order), `None` when it is the run's own.
    pub fn set_replayed_prompt(&mut self, prompt: Option<String>) {
        self.replayed_prompt = prompt;
    }

    /// The prompt noted by [`Self::set_replayed_prompt`].
    pub fn replayed_prompt(&self) -> Option<&str> {
        self.replayed_prompt.as_deref()
    }

    /// The system message stored since the last call, if any ([`Self::set_untold_system`]).
    pub fn take_untold_system(&mut self) -> Option<Value> {
        self.untold_system.take()
    }

    /// One line with one `write`. U+2028 / U+2029 are escaped so line-oriented JavaScript
    /// readers cannot split an entry.
    fn write_line(&mut self, v: &Value) -> Result<(), SessionError> {
        self.write_text(&v.to_string())
    }

    /// One line of JSON `text` with one `write` (U+2028 / U+2029 escaped as in
    /// [`SessionWriter::write_line`]). A write that fails (disk full, file-size limit) is cut
    /// back to the last whole line at once, or, when even that fails, before the next write, so
    /// a later entry never continues a torn fragment (issue 19.4).
    fn write_text(&mut self, text: &str) -> Result<(), SessionError> {
        if self.lock.is_none() {
            return Err(SessionError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(
                    "the session was closed (its lock released); nothing more is written",
                ),
            });
        }
        let separated = has_line_separator(text.as_bytes());
        let mut line = if separated {
            text.replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029")
        } else {
            let mut l = String::with_capacity(text.len() + 1);
            l.push_str(text);
            l
        };
        line.push('\n');
        // After a failure, lines keep their order: this one waits behind the unsaved ones.
        if !self.unsaved.is_empty() {
            self.unsaved.push(line);
            return self.flush_unsaved();
        }
        // Nothing waits: written at once, kept to be written again only when it fails.
        let written = self.write_whole(&line);
        if written.is_err() {
            self.unsaved.push(line);
        }
        written
    }

    /// Writes the lines of entries the file could not take before (see `unsaved`), oldest
    /// first; `Err` when the file still cannot take them (they stay in memory for the next
    /// try). Called by every append; the recorder also calls it at turn and run ends.
    pub fn flush_unsaved(&mut self) -> Result<(), SessionError> {
        while !self.unsaved.is_empty() {
            let line = std::mem::take(&mut self.unsaved[0]);
            let written = self.write_whole(&line);
            self.unsaved[0] = line;
            written?;
            self.unsaved.remove(0);
        }
        Ok(())
    }

    /// Entries appended that the file has not taken yet (see `unsaved`).
    pub fn unsaved_count(&self) -> usize {
        self.unsaved.len()
    }

    /// One whole line (with its newline) with one `write`; cut back on failure (see
    /// [`SessionWriter::write_text`]).
    fn write_whole(&mut self, line: &str) -> Result<(), SessionError> {
        if self.torn {
            self.file.set_len(self.whole_len).map_err(io(&self.path))?;
            self.torn = false;
        }
        match self.file.write_all(line.as_bytes()) {
            Ok(()) => {
                self.whole_len += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                if let Err(cut) = self.file.set_len(self.whole_len) {
                    tracing::warn!(
                        "{}: could not cut a failed append back yet: {cut}",
                        self.path.display()
                    );
                    self.torn = true;
                }
                Err(SessionError::Io {
                    path: self.path.clone(),
                    source: e,
                })
            }
        }
    }

    /// A new entry id: 8 random hex digits, as Pi's (the first 8 of a v4 UUID's), unused in
    /// this file ([`entry_id_bits`]: no `getrandom` call per entry).
    fn new_id(&mut self) -> String {
        loop {
            let id = format!("{:08x}", entry_id_bits());
            if self.tree.get(&id).is_none() {
                return id;
            }
        }
    }

    /// Appends the entry `data` under the current leaf; returns its id.
    pub fn append(&mut self, data: EntryData) -> Result<String, SessionError> {
        let (kind, fields) = data.into_parts();
        self.append_raw(&kind, fields)
    }

    /// Appends an entry of `kind` with `fields` as given (an object; entries copied from
    /// another branch, tests' fixtures) under the current leaf; returns its id. The harness
    /// writes what it knows through [`SessionWriter::append`].
    pub fn append_raw(&mut self, kind: &str, fields: Value) -> Result<String, SessionError> {
        let id = self.new_id();
        let mut entry =
            json!({"type": kind, "id": id, "parentId": self.leaf, "timestamp": iso_now()});
        if let (Some(e), Value::Object(f)) = (entry.as_object_mut(), fields) {
            e.extend(f);
        }
        // With assets storage, large images go to the assets folder once; the line names them
        // (SESS-05). The in-memory tree keeps the whole entry.
        let text = entry.to_string();
        let assets = self.path.parent().map(|d| d.join(ASSETS_DIR));
        let large = self.images.storage == ImageStorage::Assets
            && image_blocks(&mut entry).iter().any(|b| {
                b["data"]
                    .as_str()
                    .is_some_and(|d| d.len() > IMAGE_INLINE_LIMIT)
            });
        let written = match assets {
            Some(assets) if large => {
                let mut line = entry.clone();
                store_large_images(&mut line, &assets)?;
                self.write_line(&line)
            }
            _ => self.write_text(&text),
        };
        // A line the file could not take yet still makes the entry the session's: it waits in
        // memory (`unsaved`) and is written before anything after it; the error is returned.
        if let Some(e) = Entry::from_value_text(&entry, text) {
            Arc::make_mut(&mut self.tree).push_entry(e);
        }
        self.leaf = Some(id.clone());
        written.map(|()| id)
    }

    /// Every entry of the file as written so far (this writer's appends included).
    pub fn tree(&self) -> &SessionTree {
        &self.tree
    }

    /// [`SessionWriter::tree`] as a shared snapshot: cheap to take (no file read; entries are
    /// copied only when this writer appends while the snapshot is alive).
    pub fn tree_snapshot(&self) -> std::sync::Arc<SessionTree> {
        self.tree.clone()
    }

    /// The entries from the root to the current leaf.
    pub fn branch_path(&self) -> Vec<&Entry> {
        match &self.leaf {
            Some(l) => self.tree.path(l),
            None => Vec::new(),
        }
    }

    /// The model context at the current leaf, every image with its bytes (what the file
    /// holds; a client's view of it).
    pub fn context(&self) -> SessionContext {
        match &self.leaf {
            Some(l) => self.tree.context(Some(l)),
            None => SessionContext::default(),
        }
    }

    /// The model context at the current leaf as an agent holds it: the bytes of the images
    /// within the writer's image window only, older ones [`IMAGE_DROPPED_NOTE`]
    /// ([`SessionTree::context_windowed`], [`image_window`]), exactly as
    /// [`SessionWriter::open_with`] loads it, and read without holding the older images'
    /// bytes (case SESS-05).
    pub fn agent_context(&self) -> SessionContext {
        match &self.leaf {
            Some(l) => {
                let mut ctx = self.tree.context_windowed(Some(l), self.images.keep_turns);
                image_window(&mut ctx.messages, self.images.keep_turns);
                ctx
            }
            None => SessionContext::default(),
        }
    }

    /// Appends a `message` entry; returns its id. A tool result must answer an open call of
    /// the latest assistant message on this branch (case PAIR-02), else nothing is written.
    pub fn append_message(&mut self, message: &Message) -> Result<String, SessionError> {
        self.append_message_stamped(message, serde_json::Map::new())
    }

    /// [`SessionWriter::append_message`] with `stamps` added to the stored message (Pi 1.6's
    /// `durationMs` and `thinkingLevel`; none: the message as pi-ai serializes it).
    pub fn append_message_stamped(
        &mut self,
        message: &Message,
        stamps: serde_json::Map<String, Value>,
    ) -> Result<String, SessionError> {
        self.append_message_json(message, stamps, None)
    }

    /// [`SessionWriter::append_message_stamped`] with `json`, the caller's [`MessageJson`]
    /// bytes of `message` (what `serde_json` writes for it): the line holds them in place of
    /// the message serialised again, the same bytes. Not used for a message stored otherwise
    /// than as given (a user message's text is stored as a text block; one with images).
    pub fn append_message_json(
        &mut self,
        message: &Message,
        stamps: serde_json::Map<String, Value>,
        json: Option<&[u8]>,
    ) -> Result<String, SessionError> {
        match message {
            Message::ToolResult(r) => {
                match self.open_calls.iter().position(|c| *c == r.tool_call_id) {
                    Some(i) => {
                        self.open_calls.remove(i);
                    }
                    None => return Err(SessionError::UnpairedResult(r.tool_call_id.clone())),
                }
            }
            Message::Assistant(a) => {
                self.open_calls = a.tool_calls().iter().map(|c| c.id.clone()).collect()
            }
            Message::User(_) => self.open_calls.clear(),
            // Only a request carries one; it does not serialise, so its append fails below.
            Message::System(_) => {}
        }
        let blocks = match message {
            // Pi writes a user message's text as one text block (a bare string is still read).
            Message::User(pi_ai::UserMessage {
                content: pi_ai::UserContent::Text(t),
                timestamp,
            }) => Some(Message::User(pi_ai::UserMessage {
                content: pi_ai::UserContent::Blocks(vec![pi_ai::ContentBlock::text(t.clone())]),
                timestamp: *timestamp,
            })),
            _ => None,
        };
        let json = json.filter(|_| blocks.is_none());
        let message = blocks.as_ref().unwrap_or(message);
        if let Some(id) = self.append_message_line(message, &stamps, json)? {
            return Ok(id);
        }
        // Stamped: serialised once (no copy of the message first), the stamps added.
        let stamped = if stamps.is_empty() {
            None
        } else {
            match serde_json::to_value(message) {
                Ok(Value::Object(mut m)) => {
                    m.extend(stamps);
                    Some(StoredMessage::Json(Value::Object(m)))
                }
                _ => None,
            }
        };
        let message = stamped.unwrap_or_else(|| StoredMessage::Message(Box::new(message.clone())));
        self.append(EntryData::Message { message })
    }

    /// Writes the start of a `message` entry's line with id `id` under the current leaf, up
    /// to its `"message":` key (the message follows, then `}`): the keys in the order
    /// [`SessionWriter::append`] writes them.
    /// `id` is one of [`SessionWriter::new_id`]'s and the time [`iso_now`]'s: hex digits, and
    /// digits and `-:.TZ`, which JSON writes as they are (no escape to look for).
    fn message_line_head(&self, id: &str, out: &mut Vec<u8>) -> serde_json::Result<()> {
        /// `text`, which needs no escape, as a JSON string.
        fn plain(out: &mut Vec<u8>, text: &str) {
            debug_assert!(text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-:.".contains(&b)));
            out.push(b'"');
            out.extend_from_slice(text.as_bytes());
            out.push(b'"');
        }
        out.extend_from_slice(b"{\"type\":\"message\",\"id\":");
        plain(out, id);
        out.extend_from_slice(b",\"parentId\":");
        serde_json::to_writer(&mut *out, &self.leaf)?;
        out.extend_from_slice(b",\"timestamp\":");
        plain(out, &iso_now());
        out.extend_from_slice(b",\"message\":");
        Ok(())
    }

    /// Appends a `message` entry holding `message` as given (a stored system message,
    /// [`crate::harness::recorder`]'s `store_system`), borrowed: the line is written straight
    /// from it, as [`SessionWriter::append`] of `EntryData::Message` with
    /// `StoredMessage::Json(message.clone())` writes it (the same keys in the same order), with
    /// no copy of the message and no `Value` of the entry; the tree's entry is made from the
    /// message's fields as a parse of the line reads them. A message whose `content` is not a
    /// string (it may hold images, which may go to the assets folder) goes through
    /// [`SessionWriter::append`]. Returns the entry's id.
    pub fn append_message_value(&mut self, message: &Value) -> Result<String, SessionError> {
        if !message.get("content").is_some_and(Value::is_string) {
            return self.append(EntryData::Message {
                message: StoredMessage::Json(message.clone()),
            });
        }
        let id = self.new_id();
        let mut out = Vec::with_capacity(256);
        let line = (|| {
            self.message_line_head(&id, &mut out)?;
            serde_json::to_writer(&mut out, message)?;
            out.push(b'}');
            Ok::<_, serde_json::Error>(())
        })();
        let text = match line.map(|()| String::from_utf8(out)) {
            Ok(Ok(text)) => text,
            _ => {
                return self.append(EntryData::Message {
                    message: StoredMessage::Json(message.clone()),
                })
            }
        };
        let written = self.write_text(&text);
        let parts = line::LineParts {
            kind: Some("message".into()),
            id: Some(id.as_str().into()),
            parent_id: self.leaf.as_deref().map(Into::into),
            message: Some(line::message_from_value(message, false)),
        };
        if let Some(e) = Entry::from_parts_text(parts, text) {
            Arc::make_mut(&mut self.tree).push_entry(e);
        }
        self.leaf = Some(id.clone());
        written.map(|()| id)
    }

    /// The usual `message` entry written straight from `message` to its line, with no
    /// `serde_json::Value` of the entry: the line is the text [`SessionWriter::append_raw`]
    /// writes for the same entry (its keys in the same order, `stamps` after the message's own
    /// keys: only keys the message types never serialise, `durationMs` and `thinkingLevel`),
    /// and the tree's entry is made from the message's fields it keeps (type, ids, role, an
    /// assistant's provider, model and usage, a result's tool name), as a parse of the line
    /// reads them, with no `Value` in between. `Ok(None)` for what this
    /// path leaves to [`SessionWriter::append`]: a message with images (they may go to the
    /// assets folder) and a system message (it does not serialise).
    fn append_message_line(
        &mut self,
        message: &Message,
        stamps: &serde_json::Map<String, Value>,
        json: Option<&[u8]>,
    ) -> Result<Option<String>, SessionError> {
        let (role, assistant, tool) = match message {
            Message::Assistant(a) if !has_image(&a.content) => (
                "assistant",
                Some(line::AssistantInfo::new(
                    Some(&a.provider),
                    Some(&a.model),
                    Some(a.usage.clone()),
                )),
                0,
            ),
            Message::ToolResult(r) if !has_image(&r.content) => {
                ("toolResult", None, line::tool_hash(&r.tool_name))
            }
            Message::User(pi_ai::UserMessage {
                content: pi_ai::UserContent::Blocks(b),
                ..
            }) if !has_image(b) => ("user", None, 0),
            _ => return Ok(None),
        };
        let id = self.new_id();
        let mut out =
            Vec::with_capacity(LINE_HEAD + json.map_or(MessageJson::CAPACITY, <[u8]>::len));
        let line = (|| {
            self.message_line_head(&id, &mut out)?;
            match json {
                Some(json) => out.extend_from_slice(json),
                None => serde_json::to_writer(&mut out, message)?,
            }
            if !stamps.is_empty() && out.pop() == Some(b'}') {
                for (k, v) in stamps {
                    out.push(b',');
                    serde_json::to_writer(&mut out, k)?;
                    out.push(b':');
                    serde_json::to_writer(&mut out, v)?;
                }
                out.push(b'}');
            }
            out.push(b'}');
            Ok::<_, serde_json::Error>(())
        })();
        if line.is_err() {
            return Ok(None);
        }
        // Only JSON was written: valid UTF-8.
        let Ok(text) = String::from_utf8(out) else {
            return Ok(None);
        };
        let written = self.write_text(&text);
        let parts = line::LineParts {
            kind: Some("message".into()),
            id: Some(id.as_str().into()),
            parent_id: self.leaf.as_deref().map(Into::into),
            message: Some(line::MessageParts {
                role: Some(role.into()),
                message: None,
                assistant,
                summary: None,
                tool,
            }),
        };
        if let Some(e) = Entry::from_parts_text(parts, text) {
            Arc::make_mut(&mut self.tree).push_entry(e);
        }
        self.leaf = Some(id.clone());
        written.map(|()| Some(id))
    }

    /// Case 18.12 (issue 29 item E): a request was refused for the size of the images hashed
    /// in `replaced` ([`image_hash`] of their base64 data → the text note that takes each
    /// one's place). Each entry on the branch whose model-visible content holds one of them
    /// (a user message, a tool result, a custom message) gets a Pi 1.6 `context_edit` whose
    /// replacement is that content with a text block holding the note in place of each such
    /// image (`{"content": blocks}`, as Pi 1.6's `appendContextEdit` writes it; an entry
    /// already edited has its edited content changed so; one left out is left alone). The
    /// entries keep their images in the file and in the history; the model context built
    /// from the file, here or in Pi 1.6, has the notes, so a resumed session never sends the
    /// refused images again. Returns how many edits were appended.
    pub fn edit_out_images(
        &mut self,
        replaced: &HashMap<String, String>,
    ) -> Result<usize, SessionError> {
        let path = self.branch_path();
        let edits = ContextEdits::on_path(&path);
        let mut planned = Vec::new();
        for e in &path {
            if !matches!(e.kind.as_str(), "message" | "custom_message") {
                continue;
            }
            let mut content = match edits.as_ref().and_then(|x| x.get(&e.id)) {
                Some((_, r)) if r.is_null() => continue,
                Some((_, r)) => r
                    .as_object()
                    .and_then(|o| o.get("content"))
                    .unwrap_or(r)
                    .clone(),
                None => {
                    let raw = e.raw();
                    let visible = match e.kind.as_str() {
                        "message" => {
                            matches!(raw["message"]["role"].as_str(), Some("user" | "toolResult"))
                        }
                        _ => true,
                    };
                    if !visible {
                        continue;
                    }
                    match e.kind.as_str() {
                        "message" => raw["message"]["content"].clone(),
                        _ => raw["content"].clone(),
                    }
                }
            };
            let mut hit = false;
            for b in content.as_array_mut().into_iter().flatten() {
                if b["type"] != "image" {
                    continue;
                }
                if let Some(note) = b["data"]
                    .as_str()
                    .and_then(|d| replaced.get(&image_hash(d)))
                {
                    *b = json!({"type": "text", "text": note});
                    hit = true;
                }
            }
            if hit {
                planned.push((e.id.to_string(), content));
            }
        }
        let n = planned.len();
        for (target_id, content) in planned {
            self.append(EntryData::ContextEdit {
                target_id,
                replacement: Some(json!({ "content": content })),
            })?;
        }
        Ok(n)
    }

    /// Makes the appended entries durable without waiting: an `fdatasync` is queued on the
    /// background syncer (one at a time per file; a request while one is queued joins it), so
    /// the agent loop never blocks on the disk at a turn end. The error of an earlier background
    /// sync is returned here. Use [`SessionWriter::sync_now`] before acknowledging what must
    /// be on disk already (a compaction, a fork); dropping the writer syncs in place too.
    pub fn sync(&self) -> Result<(), SessionError> {
        let Some(state) = &self.syncer else {
            return self.sync_now();
        };
        if let Some(e) = state.error.lock().ok().and_then(|mut e| e.take()) {
            return Err(SessionError::Io {
                path: self.path.clone(),
                source: e,
            });
        }
        if let Ok(mut at) = state.queued_at.lock() {
            *at = Some(std::time::Instant::now());
        }
        if !state
            .pending
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let sent = syncer().is_some_and(|tx| tx.send(state.clone()).is_ok());
            if !sent {
                state
                    .pending
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                return self.sync_now();
            }
        }
        Ok(())
    }

    /// The sync of a turn's end inside a run: [`SessionWriter::sync`], unless a sync was
    /// queued less than [`TURN_SYNC_INTERVAL`] ago (then nothing: the entries are written, one
    /// `write` each, and the next turn end past the interval or the run's end makes them
    /// durable). The error of an earlier background sync is returned either way.
    pub fn sync_turn(&self) -> Result<(), SessionError> {
        let Some(state) = &self.syncer else {
            return self.sync();
        };
        let recent = state
            .queued_at
            .lock()
            .ok()
            .and_then(|at| *at)
            .is_some_and(|at| at.elapsed() < TURN_SYNC_INTERVAL);
        if !recent {
            return self.sync();
        }
        match state.error.lock().ok().and_then(|mut e| e.take()) {
            Some(e) => Err(SessionError::Io {
                path: self.path.clone(),
                source: e,
            }),
            None => Ok(()),
        }
    }

    /// Flushes appended entries to stable storage before returning (`fdatasync`).
    pub fn sync_now(&self) -> Result<(), SessionError> {
        self.file.sync_data().map_err(io(&self.path))
    }

    /// Ends this writer's hold on the file, as when the process goes away: every appended
    /// entry is made durable (`fdatasync`; entries are written unbuffered, one `write` each),
    /// then the lock is released and the `.lock` file removed, even while other owners of this
    /// writer remain. Every later append fails with an I/O error saying the session was closed
    /// (another process may own the file by then). Idempotent; the sync's error is returned
    /// (the lock is released either way).
    pub fn close(&mut self) -> Result<(), SessionError> {
        if self.lock.is_none() {
            return Ok(());
        }
        let flushed = self.flush_unsaved();
        let synced = self.sync_now();
        self.lock = None;
        flushed.and(synced)
    }

    /// False once [`SessionWriter::close`] released the file.
    pub fn is_open(&self) -> bool {
        self.lock.is_some()
    }
}

impl Drop for SessionWriter {
    fn drop(&mut self) {
        if self.lock.is_some() {
            // Each of these entries' append failed and was returned to its caller, which
            // told the user (`Notice::SaveFailed`); this last try is logged at debug, not
            // told a second time.
            if let Err(e) = self.flush_unsaved() {
                tracing::debug!(
                    "{}: {} entries could not be saved: {e}",
                    self.path.display(),
                    self.unsaved.len()
                );
            }
        }
        if let Err(e) = self.file.sync_data() {
            tracing::warn!("{}: final sync failed: {e}", self.path.display());
        }
    }
}

/// A background-sync slot for `file` (a clone of its descriptor), or `None` when the descriptor
/// cannot be cloned or the syncer thread is not running (syncs are then done in place).
pub(super) fn sync_state(file: &std::fs::File) -> Option<Arc<SyncState>> {
    syncer()?;
    Some(Arc::new(SyncState {
        file: file.try_clone().ok()?,
        pending: std::sync::atomic::AtomicBool::new(false),
        error: std::sync::Mutex::new(None),
        queued_at: std::sync::Mutex::new(None),
    }))
}

/// 32 random bits for an entry id: SplitMix64 over a per-process state seeded once from the
/// OS's random source (a v4 UUID), so an id costs no system call; ids stay unpredictable across
/// processes and are checked against the file's own ids ([`SessionWriter::new_id`]).
fn entry_id_bits() -> u32 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: std::sync::OnceLock<AtomicU64> = std::sync::OnceLock::new();
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
    let state = STATE.get_or_init(|| AtomicU64::new(uuid::Uuid::new_v4().as_u64_pair().0));
    let mut z = state
        .fetch_add(GAMMA, Ordering::Relaxed)
        .wrapping_add(GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 32) as u32
}

/// Whether `blocks` hold an image.
fn has_image(blocks: &[pi_ai::ContentBlock]) -> bool {
    blocks
        .iter()
        .any(|b| matches!(b, pi_ai::ContentBlock::Image(_)))
}

pub(super) fn new_header(cwd: &Path, parent: Option<&Path>) -> Value {
    let mut h = json!({"type":"session","version":SESSION_VERSION,"id":uuid::Uuid::now_v7().to_string(),"timestamp":iso_now(),"cwd":cwd.display().to_string()});
    if let Some(p) = parent {
        h["parentSession"] = Value::String(p.display().to_string());
    }
    h
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod sync_tests {
    use super::*;

    /// The line `SessionWriter::append` writes for a `message` entry (serde's serialisation
    /// with the separators JavaScript escapes escaped), to compare a fast append's line with.
    fn message_line(
        id: &str,
        parent: &Option<String>,
        timestamp: &Value,
        message: Value,
    ) -> String {
        let mut want = json!({"type":"message","id":id,"parentId":parent,"timestamp":timestamp});
        want.as_object_mut()
            .unwrap()
            .insert("message".into(), message);
        want.to_string()
            .replace('\u{2028}', "\\u2028")
            .replace('\u{2029}', "\\u2029")
    }

    /// When the writer's last sync was queued, if it has a background syncer.
    fn queued_at(w: &SessionWriter) -> Option<std::time::Instant> {
        *w.syncer.as_ref().unwrap().queued_at.lock().unwrap()
    }

    /// A turn end right after a sync queues none (the run's fast rounds cost one `fdatasync`
    /// per interval); a run's end (`sync`) always queues one; a turn end past the interval
    /// queues one again.
    #[test]
    fn turn_ends_sync_at_most_once_per_interval_and_run_ends_always() {
        let dir = tempfile::tempdir().unwrap();
        let w = SessionWriter::create(dir.path(), dir.path(), "p", "m", "off").unwrap();
        assert!(w.syncer.is_some(), "the background syncer runs in tests");
        w.sync_turn().unwrap();
        let first = queued_at(&w).unwrap();
        w.sync_turn().unwrap();
        assert_eq!(queued_at(&w), Some(first), "a turn end within the interval");
        std::thread::sleep(std::time::Duration::from_millis(2));
        w.sync().unwrap();
        let second = queued_at(&w).unwrap();
        assert!(second > first, "a run's end always syncs");
        std::thread::sleep(TURN_SYNC_INTERVAL + std::time::Duration::from_millis(50));
        w.sync_turn().unwrap();
        assert!(
            queued_at(&w).unwrap() > second,
            "a turn end past the interval"
        );
    }

    /// A message appended on the direct path is the line the `Value` path writes for it, key
    /// for key and byte for byte, and the tree's entry reads as the entry of that line: role,
    /// an assistant's provider, model and usage, a result's tool; the file reopens to the same
    /// messages. Images and system messages take the `Value` path. The same again with each
    /// message's [`MessageJson`] given (`append_message_json`): the same lines (a user
    /// message's text, stored as a block, and an image message do not use it).
    #[test]
    fn messages_are_written_as_the_value_path_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SessionWriter::create(dir.path(), dir.path(), "p", "m", "off").unwrap();
        let user = Message::user_text("read it \u{2028} please");
        let assistant: Message = serde_json::from_value(json!({"role":"assistant","content":[
            {"type":"text","text":"ok"},{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a.txt"}}],
            "api":"openai-completions","provider":"mock","model":"mock-1",
            "usage":{"input":10,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":12,
                "cost":{"input":0.5,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.5}},
            "stopReason":"toolUse","timestamp":5})).unwrap();
        let result: Message = serde_json::from_value(json!({"role":"toolResult","toolCallId":"c1",
            "toolName":"read","content":[{"type":"text","text":"héllo\n"}],"details":{"b":1,"a":[2]},
            "isError":false,"timestamp":6})).unwrap();
        let mut stamps = serde_json::Map::new();
        stamps.insert("durationMs".into(), json!(3));
        stamps.insert("thinkingLevel".into(), json!("off"));
        let image: Message = serde_json::from_value(json!({"role":"user","content":[
            {"type":"image","data":"aGk=","mimeType":"image/png"}],"timestamp":7}))
        .unwrap();
        let cases = [
            (user, serde_json::Map::new()),
            (assistant, stamps.clone()),
            (result, stamps),
            (image, serde_json::Map::new()),
        ];
        for ((message, stamps), with_json) in cases
            .iter()
            .map(|c| (c, false))
            .chain(cases.iter().map(|c| (c, true)))
        {
            let parent = w.leaf().map(str::to_string);
            let id = if with_json {
                let json = MessageJson::new(&Arc::new(message.clone())).unwrap();
                assert_eq!(json.bytes(), serde_json::to_vec(message).unwrap());
                w.append_message_json(message, stamps.clone(), Some(json.bytes()))
                    .unwrap()
            } else {
                w.append_message_stamped(message, stamps.clone()).unwrap()
            };
            let text = std::fs::read_to_string(w.path()).unwrap();
            let line = text.lines().last().unwrap();
            let v: Value = serde_json::from_str(line).unwrap();
            // The `Value` path's line for the same entry.
            let stored = match message {
                Message::User(u) => Message::User(pi_ai::UserMessage {
                    content: match &u.content {
                        pi_ai::UserContent::Text(t) => {
                            pi_ai::UserContent::Blocks(vec![pi_ai::ContentBlock::text(t.clone())])
                        }
                        b => b.clone(),
                    },
                    timestamp: u.timestamp,
                }),
                m => m.clone(),
            };
            let mut m = serde_json::to_value(&stored).unwrap();
            m.as_object_mut().unwrap().extend(stamps.clone());
            assert_eq!(line, message_line(&id, &parent, &v["timestamp"], m));
            let e = w.tree().get(&id).unwrap();
            let from_line = Entry::from_value(&v).unwrap();
            assert_eq!(e.id, from_line.id);
            assert_eq!(e.parent_id, from_line.parent_id);
            assert_eq!(e.kind, from_line.kind);
            assert_eq!(e.role(), from_line.role());
            assert_eq!(e.assistant(), from_line.assistant());
            assert_eq!(e.tool_is("read"), from_line.tool_is("read"));
            assert_eq!(e.tool_is("bash"), from_line.tool_is("bash"));
            assert_eq!(e.message(), from_line.message());
        }
        assert!(w
            .tree()
            .get(w.leaf().unwrap())
            .unwrap()
            .assistant()
            .is_none());
        let path = w.path().to_path_buf();
        w.close().unwrap();
        drop(w);
        let (_, loaded) = SessionWriter::open(&path).unwrap();
        assert_eq!(loaded.messages.len(), 8);
        // The assistant message reads its `thinkingLevel` stamp back (Pi 1.6's field).
        let mut stamped = cases[1].0.clone();
        if let Message::Assistant(a) = &mut stamped {
            a.thinking_level = Some("off".into());
        }
        for at in [0, 4] {
            assert_eq!(loaded.messages[at + 1], stamped);
            assert_eq!(loaded.messages[at + 2], cases[2].0);
        }
    }

    /// A stored system message written from the borrowed `Value` is the line the `Value` path
    /// (`append` of `StoredMessage::Json`) writes for it, byte for byte (ids and time aside),
    /// and its tree entry reads as a parse of that line does; one whose content is not a
    /// string goes through that path.
    #[test]
    fn a_system_message_is_written_from_its_value_as_the_value_path_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SessionWriter::create(dir.path(), dir.path(), "p", "m", "off").unwrap();
        let system = json!({"role":"system","content":"","sections":{"prompt":"You are \u{2028} pi.","cwd":"x"},
            "timestamp":5,"toolsAdded":[{"name":"read","description":"Read","parameters":{"type":"object"},
            "constrainedSampling":{"type":"json_schema","strict":"prefer"}}]});
        let blocks = json!({"role":"system","content":[{"type":"text","text":"t"}],"timestamp":6});
        for message in [&system, &blocks] {
            let parent = w.leaf().map(str::to_string);
            let id = w.append_message_value(message).unwrap();
            let text = std::fs::read_to_string(w.path()).unwrap();
            let line = text.lines().last().unwrap();
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                line,
                message_line(&id, &parent, &v["timestamp"], (*message).clone())
            );
            let e = w.tree().get(&id).unwrap();
            let from_line = Entry::from_value(&v).unwrap();
            assert_eq!(
                (&e.id, &e.parent_id, &e.kind, e.role(), e.assistant()),
                (
                    &from_line.id,
                    &from_line.parent_id,
                    &from_line.kind,
                    from_line.role(),
                    from_line.assistant()
                )
            );
            assert_eq!(e.message(), from_line.message());
            assert_eq!(e.raw(), v);
            assert_eq!(w.leaf(), Some(id.as_str()));
        }
    }

    /// U+2028 and U+2029 are found wherever they are; other characters starting with the
    /// same bytes (U+2014, U+2027, U+202A) and a cut sequence are not taken for them.
    #[test]
    fn line_separators_are_found_by_their_bytes() {
        for (text, want) in [
            ("", false),
            ("plain", false),
            ("a — b ‧ c \u{202A}", false),
            ("\u{2028}", true),
            ("x\u{2029}", true),
            ("— \u{2029} —", true),
            ("é😀\u{2028}", true),
        ] {
            assert_eq!(has_line_separator(text.as_bytes()), want, "{text:?}");
        }
        assert!(!has_line_separator(&[b'a', 0xE2, 0x80]));
        assert!(!has_line_separator(&[0xE2]));
    }

    /// Entry ids are 8 hex digits, as Pi's, and differ from one another.
    #[test]
    fn entry_ids_are_eight_distinct_hex_digits() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SessionWriter::create(dir.path(), dir.path(), "p", "m", "off").unwrap();
        let ids: HashSet<String> = (0..2000).map(|_| w.new_id()).collect();
        assert_eq!(ids.len(), 2000);
        assert!(ids.iter().all(|i| i.len() == 8
            && i.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())));
    }
}

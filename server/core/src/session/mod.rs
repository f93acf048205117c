//! Sessions as Pi v3 JSONL files (docs/design.md#sessions-branching-and-compaction "Session files"; Pi 0.73.1
//! `docs/session-format.md`).
//!
//! A file is named `<ISO time with : and . as ->_<uuid v7>.jsonl`; its first line is the header
//! `{"type":"session","version":3,"id","timestamp","cwd"}`, then `model_change` and
//! `thinking_level_change`, then one `message` entry per completed message. Every entry has an
//! 8-hex `id` and the `parentId` of the entry before it on the active branch. Entries are written
//! with one `write` of `json + "\n"` each, in completion order; [`SessionWriter::sync`] makes
//! them durable in the background (called at turn end, off the loop's path),
//! [`SessionWriter::sync_now`] before an answer that needs them on disk. A failed append is cut
//! back to the last whole line before anything else is written.
//!
//! Loading tolerates damage (cases SESS-01, SESS-02): an unterminated last line that does not
//! parse is moved to a `.corrupt` sidecar and cut off before anything is appended; unparseable
//! or NUL-filled lines in the middle are skipped and counted in a warning.

mod entry_data;
mod line;
mod list;
mod read;
mod shared;
mod tree;
mod view;

pub use entry_data::{BashExecution, EntryData, StoredMessage};
pub use line::AssistantInfo;
pub use list::{list_sessions, SessionSummary};
pub use shared::{lock_writer, lock_writer_for_close};
pub use tree::{
    bash_execution_text, convert_message, entry_message, path_messages, path_messages_with, Entry,
    SessionContext, SessionTree,
};
pub use view::{
    agent_message, context_agent_messages, context_entries, HistoryError, HistoryPage,
    HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT,
};

/// Pi's wrappers of summaries in the model context.
pub mod tree_prefixes {
    pub use super::tree::{
        BRANCH_SUMMARY_PREFIX, BRANCH_SUMMARY_SUFFIX, COMPACTION_SUMMARY_PREFIX,
        COMPACTION_SUMMARY_SUFFIX,
    };
}

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pi_ai::Message;
use serde_json::{json, Value};

/// With [`ImageStorage::Assets`], images whose base64 text is longer than this (in bytes) are
/// stored once in the sessions folder's `assets/` (named by content hash) instead of inline in
/// the entry (case SESS-05).
pub const IMAGE_INLINE_LIMIT: usize = 256 * 1024;

/// The folder beside the session files that holds large images ([`ImageStorage::Assets`]).
pub const ASSETS_DIR: &str = "assets";

/// Field of an image block whose bytes are in `assets/` (its `data` is then empty). Pi 0.73.1
/// does not know it: it sends such an image as an empty data URL. Files holding it are still
/// read here (the bytes are read back from `assets/`), and a fork or clone of them is written
/// inline.
pub const ASSET_FIELD: &str = "piLspAsset";

/// How a session file holds images (setting `sessions.imageStorage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ImageStorage {
    /// `"inline"` (default): base64 in the entry, exactly as Pi writes it, so Pi resumes the
    /// file and sends the image.
    #[default]
    Inline,
    /// `"assets"`: images over [`IMAGE_INLINE_LIMIT`] go to `assets/` beside the session file
    /// and the entry keeps `data: ""` with [`ASSET_FIELD`]. Smaller files, but Pi 0.73.1 cannot
    /// read those images.
    Assets,
}

/// The default of `sessions.imageTurns`: the images of the last 10 user messages go to the
/// model.
pub const DEFAULT_IMAGE_TURNS: usize = 10;

/// What replaces an image that is older than the image window in the model context (case
/// SESS-05: the context builder drops old images after N turns; the file keeps them).
pub const IMAGE_DROPPED_NOTE: &str =
    "(image omitted from the context: older than the last user turns that keep their images; it stays in the session file)";

/// Image settings of sessions (`sessions.imageStorage`, `sessions.imageTurns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageOptions {
    /// Where image bytes are written.
    pub storage: ImageStorage,
    /// Images of the last this many user messages of the context go to the model, older ones
    /// are replaced by [`IMAGE_DROPPED_NOTE`]; `None` (setting `0`): every image, as Pi.
    pub keep_turns: Option<usize>,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            storage: ImageStorage::Inline,
            keep_turns: Some(DEFAULT_IMAGE_TURNS),
        }
    }
}

impl ImageOptions {
    /// Reads `sessions.imageStorage` (`"inline"` | `"assets"`) and `sessions.imageTurns` (a
    /// whole number; `0` keeps every image) from merged settings. A wrong value keeps the
    /// default and is returned as a warning.
    pub fn from_settings(merged: &serde_json::Map<String, Value>) -> (ImageOptions, Vec<String>) {
        let mut o = ImageOptions::default();
        let mut warnings = Vec::new();
        let Some(s) = merged.get("sessions") else {
            return (o, warnings);
        };
        match s.get("imageStorage") {
            None => {}
            Some(v) if v == "inline" => o.storage = ImageStorage::Inline,
            Some(v) if v == "assets" => o.storage = ImageStorage::Assets,
            Some(v) => warnings.push(format!(
                "settings: sessions.imageStorage must be \"inline\" or \"assets\", not {v}"
            )),
        }
        match s.get("imageTurns") {
            None => {}
            Some(v) => match v.as_u64() {
                Some(0) => o.keep_turns = None,
                Some(n) => o.keep_turns = Some(usize::try_from(n).unwrap_or(usize::MAX)),
                None => warnings.push(format!(
                    "settings: sessions.imageTurns must be a whole number (0: every image), not {v}"
                )),
            },
        }
        (o, warnings)
    }
}

/// The model-context image window (case SESS-05): every image block (in user messages and
/// tool results) before the `keep_turns`-th last user message of `messages` is replaced by a
/// text block [`IMAGE_DROPPED_NOTE`], and so is any image whose data is empty anywhere (never
/// sent as an empty image). `None` keeps every image with data. Returns how many images were
/// replaced. Idempotent.
pub fn image_window(messages: &mut [Message], keep_turns: Option<usize>) -> usize {
    use pi_ai::{ContentBlock, UserContent};
    let start = keep_turns.map_or(0, |n| {
        let mut seen = 0;
        messages
            .iter()
            .rposition(|m| {
                if matches!(m, Message::User(_)) {
                    seen += 1;
                }
                seen == n.max(1)
            })
            .unwrap_or(0)
    });
    let mut replaced = 0;
    for (k, m) in messages.iter_mut().enumerate() {
        let blocks = match m {
            Message::User(u) => match &mut u.content {
                UserContent::Blocks(b) => b,
                UserContent::Text(_) => continue,
            },
            Message::ToolResult(r) => &mut r.content,
            Message::Assistant(_) => continue,
        };
        for b in blocks.iter_mut() {
            if let ContentBlock::Image(i) = b {
                if k < start || i.data.is_empty() {
                    *b = ContentBlock::text(IMAGE_DROPPED_NOTE);
                    replaced += 1;
                }
            }
        }
    }
    replaced
}

/// Loading keeps no image bytes over this (base64 length) in the messages it parses; the
/// ones the image window keeps are read back from their lines afterwards.
const LOAD_IMAGE_KEEP: usize = 16 * 1024;

/// Empties the data of the large images of `message` (see [`LOAD_IMAGE_KEEP`]); true when
/// one was emptied.
fn strip_image_data(message: &mut Message) -> bool {
    use pi_ai::{ContentBlock, UserContent};
    let blocks = match message {
        Message::User(u) => match &mut u.content {
            UserContent::Blocks(b) => b,
            UserContent::Text(_) => return false,
        },
        Message::ToolResult(r) => &mut r.content,
        Message::Assistant(_) => return false,
    };
    let mut stripped = false;
    for b in blocks.iter_mut() {
        if let ContentBlock::Image(i) = b {
            if i.data.len() > LOAD_IMAGE_KEEP {
                i.data = String::new();
                stripped = true;
            }
        }
    }
    stripped
}

/// Puts back the image bytes loading left out (`stripped`: entry indices) of the `message`
/// entries on the path to `leaf` that lie within the image window (from the `keep_turns`-th
/// last user message entry of the path on; every one for `None`), reading their lines again.
fn restore_images(
    tree: &SessionTree,
    leaf: Option<&str>,
    parsed: &mut [Option<Message>],
    stripped: &[usize],
    keep_turns: Option<usize>,
) {
    if stripped.is_empty() {
        return;
    }
    let Some(leaf) = leaf else { return };
    let path = tree.path_indices(leaf);
    let start = keep_turns.map_or(0, |n| {
        let mut seen = 0;
        path.iter()
            .rposition(|&i| {
                if tree.entries[i].kind == "message" && tree.entries[i].role() == Some("user") {
                    seen += 1;
                }
                seen == n.max(1)
            })
            .unwrap_or(0)
    });
    let recent: HashSet<usize> = path[start..].iter().copied().collect();
    for &i in stripped.iter().filter(|i| recent.contains(i)) {
        if let (Some(slot), Some(m)) = (parsed.get_mut(i), tree.entries[i].message()) {
            *slot = Some(m);
        }
    }
}

/// Load-time repair of case PAIR-02: a tool result on the loaded branch hangs under an entry
/// that is not the assistant message that called it (an older writer attached a late result
/// to an aborted message), so the resumed branch would lose the conversation since that
/// message. When exactly one assistant entry declares the call and no result of its own
/// answers it, the result (with the results and entries after it) is read under that message,
/// in memory only: the file is not changed, the line keeps its `parentId`. `parsed`: the
/// messages loading parsed, by entry index (else the lines are read). Returns one warning per
/// result moved.
fn reparent_orphan_results(
    tree: &mut SessionTree,
    parsed: Option<&[Option<Message>]>,
) -> Vec<String> {
    // Messages are looked at only for tool results and the entries they hang under: the role
    // is known without parsing, and parsed messages are borrowed, not copied.
    fn with_message<T>(
        tree: &SessionTree,
        parsed: Option<&[Option<Message>]>,
        i: usize,
        f: impl FnOnce(&Message) -> Option<T>,
    ) -> Option<T> {
        match parsed.and_then(|p| p.get(i)) {
            Some(m) => m.as_ref().and_then(f),
            None => tree.entries[i].message().as_ref().and_then(f),
        }
    }
    let result_call = |tree: &SessionTree, i: usize| -> Option<String> {
        if tree.entries[i].role() != Some("toolResult") {
            return None;
        }
        with_message(tree, parsed, i, |m| match m {
            Message::ToolResult(r) => Some(r.tool_call_id.clone()),
            _ => None,
        })
    };
    let declares = |tree: &SessionTree, i: usize, call: &str| -> bool {
        tree.entries[i].role() == Some("assistant")
            && with_message(tree, parsed, i, |m| match m {
                Message::Assistant(a) => Some(a.tool_calls().iter().any(|c| c.id == call)),
                _ => None,
            })
            .unwrap_or(false)
    };
    let mut warnings = Vec::new();
    let mut index: Option<CallIndex> = None;
    // Walk the branch from its leaf; a moved result changes the branch, so walk again (a few
    // times at most).
    'walk: for _ in 0..8 {
        let Some(leaf) = tree.last_id().map(str::to_string) else {
            break;
        };
        let path = tree.path_indices(&leaf);
        for (pos, &i) in path.iter().enumerate().rev() {
            let p = pos.checked_sub(1).map(|k| path[k]);
            if follows_its_call(tree, i, p) {
                continue;
            }
            let Some(call) = result_call(tree, i) else {
                continue;
            };
            let fine = p.is_some_and(|p| {
                tree.entries[p].role() == Some("toolResult") || declares(tree, p, &call)
            });
            if fine {
                continue;
            }
            // Candidates by the call's hash (a deferred load's summaries), read to be sure;
            // entries without a summary are all candidates.
            let index = index.get_or_insert_with(|| CallIndex::new(tree));
            let h = line::call_hash(&call);
            let mut owners = index
                .candidates(&index.declared, h)
                .filter(|&k| declares(tree, k, &call));
            let (Some(owner), None) = (owners.next(), owners.next()) else {
                continue;
            };
            let owner_id = tree.entries[owner].id.clone();
            let answered = index.candidates(&index.results, h).any(|k| {
                tree.entries[k].parent_id.as_deref() == Some(owner_id.as_str())
                    && result_call(tree, k).as_deref() == Some(call.as_str())
            });
            if answered {
                continue;
            }
            let old = tree.entries[i]
                .parent_id
                .clone()
                .unwrap_or_else(|| "null".into());
            let id = tree.entries[i].id.clone();
            tree.set_parent(i, Some(owner_id.clone()));
            warnings.push(format!(
                "tool result {id} (call {call}) was attached under {old}, not under the message that called it; it is read under {owner_id}"
            ));
            continue 'walk;
        }
        break;
    }
    warnings
}

/// The `message` entries of a tree by the [`line::call_hash`] of the tool calls they name (from
/// a deferred load's summaries): assistant messages by their calls, tool results by theirs;
/// entries without a summary apart (they may name any call).
struct CallIndex {
    declared: HashMap<u64, Vec<usize>>,
    results: HashMap<u64, Vec<usize>>,
    unsummarized: Vec<usize>,
}

impl CallIndex {
    fn new(tree: &SessionTree) -> CallIndex {
        let mut index = CallIndex {
            declared: HashMap::new(),
            results: HashMap::new(),
            unsummarized: Vec::new(),
        };
        for (k, e) in tree.entries.iter().enumerate() {
            let map = match e.role() {
                Some("assistant") => &mut index.declared,
                Some("toolResult") => &mut index.results,
                _ => continue,
            };
            match e.summary() {
                Some(s) => {
                    for h in s.calls.iter() {
                        let at = map.entry(*h).or_default();
                        // (Once per entry, whatever its calls repeat.)
                        if at.last() != Some(&k) {
                            at.push(k);
                        }
                    }
                }
                None => index.unsummarized.push(k),
            }
        }
        index
    }

    /// The entries of `map` under `hash`, then those without a summary (each entry once).
    fn candidates<'a>(
        &'a self,
        map: &'a HashMap<u64, Vec<usize>>,
        hash: u64,
    ) -> impl Iterator<Item = usize> + 'a {
        map.get(&hash)
            .into_iter()
            .flatten()
            .chain(&self.unsummarized)
            .copied()
    }
}

/// Whether entry `i` is not a tool result, or (as a deferred load's summaries show) one right
/// under another result or under the assistant message that names its call: nothing for
/// [`reparent_orphan_results`] to read. False when the summaries do not tell.
fn follows_its_call(tree: &SessionTree, i: usize, parent: Option<usize>) -> bool {
    let e = &tree.entries[i];
    if e.role() != Some("toolResult") {
        return true;
    }
    let (Some(summary), Some(p)) = (e.summary(), parent.map(|p| &tree.entries[p])) else {
        return false;
    };
    let [call] = &*summary.calls else {
        return false;
    };
    match (p.role(), p.summary()) {
        (Some("toolResult"), _) => true,
        (Some("assistant"), Some(ps)) => ps.calls.contains(call),
        _ => false,
    }
}

/// The image blocks of a stored entry (message content, custom message content).
fn image_blocks(entry: &mut Value) -> Vec<&mut Value> {
    let mut out = Vec::new();
    let content = if entry["type"] == "message" {
        entry.get_mut("message").and_then(|m| m.get_mut("content"))
    } else {
        entry.get_mut("content")
    };
    if let Some(Value::Array(blocks)) = content {
        for b in blocks.iter_mut() {
            if b["type"] == "image" {
                out.push(b);
            }
        }
    }
    out
}

/// The name of an image's base64 `data` for [`SessionWriter::replace_images`]: `xxh3:` and
/// the 16 hex digits of its xxh3-64 hash.
pub fn image_hash(data: &str) -> String {
    format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(data.as_bytes()))
}

/// Moves images over [`IMAGE_INLINE_LIMIT`] of `entry` into `assets` (written once, by content
/// hash, through a temporary file) and leaves `{"type":"image","mimeType","data":"",
/// "piLspAsset":"assets/<hash>.<ext>"}` in their place.
fn store_large_images(entry: &mut Value, assets: &Path) -> Result<(), SessionError> {
    use base64::Engine as _;
    for b in image_blocks(entry) {
        let Some(data) = b["data"].as_str().filter(|d| d.len() > IMAGE_INLINE_LIMIT) else {
            continue;
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
            continue;
        };
        let ext = match b["mimeType"].as_str().unwrap_or("") {
            "image/png" => "png",
            "image/jpeg" => "jpg",
            "image/gif" => "gif",
            "image/webp" => "webp",
            _ => "bin",
        };
        let name = format!("{:032x}.{ext}", xxhash_rust::xxh3::xxh3_128(&bytes));
        let file = assets.join(&name);
        if !file.exists() {
            std::fs::create_dir_all(assets).map_err(io(assets))?;
            let tmp = assets.join(format!("{name}.tmp{}", std::process::id()));
            std::fs::write(&tmp, &bytes).map_err(io(&tmp))?;
            std::fs::rename(&tmp, &file).map_err(io(&file))?;
        }
        b["data"] = Value::String(String::new());
        b[ASSET_FIELD] = Value::String(format!("{ASSETS_DIR}/{name}"));
    }
    Ok(())
}

/// Puts the bytes of images stored in `dir`'s assets back into `entry`; a missing asset
/// becomes a text block saying so (and a warning), never an empty image.
fn load_images(entry: &mut Value, dir: &Path, warnings: &mut Vec<String>) -> bool {
    use base64::Engine as _;
    let mut changed = false;
    for b in image_blocks(entry) {
        let Some(rel) = b[ASSET_FIELD].as_str().map(str::to_string) else {
            continue;
        };
        changed = true;
        // Only names inside the assets folder are followed.
        let name = rel.strip_prefix(&format!("{ASSETS_DIR}/")).unwrap_or("");
        let ok_name = !name.is_empty() && !name.contains(['/', '\\']) && !name.starts_with('.');
        match ok_name.then(|| std::fs::read(dir.join(ASSETS_DIR).join(name))) {
            Some(Ok(bytes)) => {
                b["data"] = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
                if let Some(o) = b.as_object_mut() {
                    o.remove(ASSET_FIELD);
                }
            }
            _ => {
                warnings.push(format!("image {rel} is missing from {}", dir.display()));
                *b = json!({"type": "text", "text": format!("[image {rel} is missing]")});
            }
        }
    }
    changed
}

/// Pi's session format version written here.
pub const SESSION_VERSION: u64 = 3;

/// The content of the `.gitignore` written into a sessions folder.
pub const SESSIONS_GITIGNORE: &str =
    "# pi-lsp sessions: kept out of git by default. Sessions are not a secret store.\n*\n";

fn iso_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Errors of session files.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("session file {0} has no session header")]
    NoHeader(PathBuf),
    /// Another live process appends to this file (SESS-04).
    #[error("session file {path} is in use by process {pid}")]
    Locked { path: PathBuf, pid: u32 },
    /// A tool result whose call is not open on the current branch (PAIR-02).
    #[error("refusing to append a result for tool call {0}: its call is not the latest assistant message on this branch")]
    UnpairedResult(String),
    #[error("no entry {0} in this session")]
    UnknownEntry(String),
    /// The file's header names the id of a session open here from another file (a session file
    /// copied by hand keeps its id); sessions are addressed by id, so it is not opened.
    #[error("session file {path} has the id {id} of the session open from {other}; close that session first (a copied session file keeps its id)")]
    IdInUse {
        id: String,
        path: PathBuf,
        other: PathBuf,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SessionError + '_ {
    move |source| SessionError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `.gitignore` into `dir` (creating it) unless one exists.
pub fn ensure_sessions_dir(dir: &Path) -> Result<(), SessionError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let gi = dir.join(".gitignore");
    if !gi.exists() {
        std::fs::write(&gi, SESSIONS_GITIGNORE).map_err(io(&gi))?;
    }
    Ok(())
}

/// What a loaded session holds on its active branch (root to the last entry).
#[derive(Debug, Clone, Default)]
pub struct LoadedSession {
    pub id: String,
    pub cwd: Option<String>,
    pub messages: Vec<Message>,
    /// `(provider, modelId)` from the last `model_change` or assistant message on the path.
    pub model: Option<(String, String)>,
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
    /// This file's place in the background syncer (see [`SessionWriter::sync`]).
    syncer: Option<Arc<SyncState>>,
    /// The file's lock; `None` once [`SessionWriter::close`] released it (nothing more is
    /// written then).
    lock: Option<LockFile>,
    /// How images are written (and, on open, how many turns keep theirs).
    images: ImageOptions,
}

/// One file's background `fdatasync` state: a clone of the writer's file, whether a sync is
/// queued, and the error of the last background sync (reported by the next `sync`).
#[derive(Debug)]
struct SyncState {
    file: std::fs::File,
    pending: std::sync::atomic::AtomicBool,
    error: std::sync::Mutex<Option<std::io::Error>>,
}

/// The one background thread that runs queued `fdatasync`s, in request order; `None` when it
/// could not be started (syncs are then done in place).
fn syncer() -> Option<&'static std::sync::mpsc::Sender<Arc<SyncState>>> {
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

/// `<file>.lock`, held with an OS lock (`flock`, exclusive) for as long as the writer lives:
/// the kernel releases it when the process dies, however it dies, so a dead writer's lock is
/// always taken over and a live one never (case SESSX-01: a pid in the file, reused after a
/// container restart, used to fork the session on every resume). The file's text is the
/// owner's pid, for the error message only; it is removed on drop. A second writer of the same
/// file in the same process is refused too (the lock belongs to the open file).
#[derive(Debug)]
struct LockFile {
    path: PathBuf,
    _file: std::fs::File,
}

impl LockFile {
    fn acquire(session: &Path) -> Result<LockFile, SessionError> {
        use std::os::unix::fs::MetadataExt;
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
            let same = match (f.metadata(), std::fs::metadata(&path)) {
                (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
                _ => false,
            };
            if !same {
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
        let mut w = Self::create_with_header(dir, header)?;
        w.append(EntryData::ModelChange {
            provider: provider.to_string(),
            model_id: model_id.to_string(),
        })?;
        w.append(EntryData::ThinkingLevelChange {
            thinking_level: thinking_level.to_string(),
        })?;
        Ok(w)
    }

    fn create_with_header(dir: &Path, header: Value) -> Result<Self, SessionError> {
        ensure_sessions_dir(dir)?;
        let id = header["id"].as_str().unwrap_or_default().to_string();
        let ts = header["timestamp"]
            .as_str()
            .unwrap_or_default()
            .replace([':', '.'], "-");
        let path = dir.join(format!("{ts}_{id}.jsonl"));
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
            syncer,
            lock: Some(lock),
            images: ImageOptions::default(),
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
        let mut l = load(path, true, deferred)?;
        if images.storage == ImageStorage::Inline
            && l.assets_read > 0
            && l.tree.header["version"].as_u64() == Some(SESSION_VERSION)
        {
            // An older pi-lsp kept this file's large images in assets/, which Pi cannot read:
            // written once more with them inline (the original kept beside it), then loaded
            // from the new text.
            let backup = write_inline(path, &l.tree)?;
            let mut again = load(path, true, deferred)?;
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
            thinking_level: Some(ctx.thinking_level),
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
            syncer,
            lock: Some(lock),
            images,
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

    /// Branches at `entry` and writes a `branch_summary` there carrying what the abandoned
    /// branch concluded, as Pi 0.73.1's `branchWithSummary` writes it: `fromId` is the entry
    /// the summary is attached to (`"root"` for `None`), `details` Pi's `{readFiles,
    /// modifiedFiles}` (or `Null` to leave it out), `fromHook: false`. Returns the summary
    /// entry's id.
    pub fn branch_with_summary(
        &mut self,
        tree: &SessionTree,
        entry: Option<&str>,
        summary: &str,
        details: Value,
    ) -> Result<String, SessionError> {
        self.branch(tree, entry)?;
        self.append(EntryData::BranchSummary {
            from_id: entry.unwrap_or("root").to_string(),
            summary: summary.to_string(),
            details: (!details.is_null()).then_some(details),
            from_hook: false,
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
        let cwd = tree.header["cwd"]
            .as_str()
            .map(PathBuf::from)
            .unwrap_or_default();
        let mut w = Self::create_with_header(dir, new_header(&cwd, Some(parent)))?;
        if let Some(leaf) = leaf.or(tree.last_id()) {
            for e in tree.path(leaf) {
                // The line as stored, byte for byte, unless it holds an image to move to the
                // new folder's assets.
                let text = e.text();
                if images.storage == ImageStorage::Assets
                    && text.len() > IMAGE_INLINE_LIMIT
                    && text.contains("\"image\"")
                {
                    let mut line = e.raw();
                    store_large_images(&mut line, &dir.join(ASSETS_DIR))?;
                    w.write_line(&line)?;
                } else {
                    w.write_text(&text)?;
                }
            }
        }
        w.sync_now()?;
        let path = w.path.clone();
        drop(w);
        SessionWriter::open_with(&path, images)
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
        if self.torn {
            self.file.set_len(self.whole_len).map_err(io(&self.path))?;
            self.torn = false;
        }
        let mut line = if text.contains(['\u{2028}', '\u{2029}']) {
            text.replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029")
        } else {
            let mut l = String::with_capacity(text.len() + 1);
            l.push_str(text);
            l
        };
        line.push('\n');
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

    fn new_id(&mut self) -> String {
        loop {
            let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
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
        match assets {
            Some(assets) if large => {
                let mut line = entry.clone();
                store_large_images(&mut line, &assets)?;
                self.write_line(&line)?;
            }
            _ => self.write_text(&text)?,
        }
        if let Some(e) = Entry::from_value_text(&entry, text) {
            Arc::make_mut(&mut self.tree).push_entry(e);
        }
        self.leaf = Some(id.clone());
        Ok(id)
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

    /// The model context at the current leaf.
    pub fn context(&self) -> SessionContext {
        match &self.leaf {
            Some(l) => self.tree.context(Some(l)),
            None => SessionContext {
                thinking_level: "off".into(),
                ..Default::default()
            },
        }
    }

    /// Appends a `message` entry; returns its id. A tool result must answer an open call of
    /// the latest assistant message on this branch (case PAIR-02), else nothing is written.
    pub fn append_message(&mut self, message: &Message) -> Result<String, SessionError> {
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
        }
        let message = match message {
            // Pi writes a user message's text as one text block (a bare string is still read).
            Message::User(pi_ai::UserMessage {
                content: pi_ai::UserContent::Text(t),
                timestamp,
            }) => Message::User(pi_ai::UserMessage {
                content: pi_ai::UserContent::Blocks(vec![pi_ai::ContentBlock::text(t.clone())]),
                timestamp: *timestamp,
            }),
            m => m.clone(),
        };
        self.append(EntryData::Message {
            message: StoredMessage::Message(message),
        })
    }

    /// Case 18.12: a request was refused for the size of the images hashed in `replaced`
    /// ([`image_hash`] of their base64 data → the text note that takes each one's place). The
    /// branch is written again from the first entry on it holding one of those images,
    /// as Pi records any changed history (append-only, a sibling branch; nothing is rewritten):
    /// the leaf moves to that entry's parent, then every entry from there to the old leaf is
    /// appended again under new ids, each image of `replaced` as a text block with its note,
    /// references to copied entries (`firstKeptEntryId`, `targetId`, `fromId`) following them,
    /// the entries' own timestamps kept. A last assistant entry that failed (`stopReason:
    /// "error"`: the refused attempt) stays on the old branch only. Pi (and this loader)
    /// resuming the file then sees the notes, never the refused images again; the old branch
    /// keeps the images and the refusal. Returns the new leaf, or `None` when no entry on the
    /// branch holds such an image (nothing is written).
    pub fn replace_images(
        &mut self,
        replaced: &HashMap<String, String>,
    ) -> Result<Option<String>, SessionError> {
        let mut path: Vec<Value> = self.branch_path().iter().map(|e| e.raw()).collect();
        let holds = |v: &mut Value| {
            let mut hit = false;
            for b in image_blocks(v) {
                if let Some(note) = b["data"]
                    .as_str()
                    .and_then(|d| replaced.get(&image_hash(d)))
                {
                    *b = json!({"type": "text", "text": note});
                    hit = true;
                }
            }
            hit
        };
        let mut first = None;
        for (i, v) in path.iter_mut().enumerate() {
            if holds(v) && first.is_none() {
                first = Some(i);
            }
        }
        let Some(first) = first else {
            return Ok(None);
        };
        if path.last().is_some_and(|v| {
            v["type"] == "message"
                && v["message"]["role"] == "assistant"
                && v["message"]["stopReason"] == "error"
        }) {
            path.pop();
        }
        let parent = path[first]["parentId"].as_str().map(str::to_string);
        let mut ids: HashMap<String, String> = HashMap::new();
        self.leaf = parent;
        for mut v in path.into_iter().skip(first) {
            let old = v["id"].as_str().unwrap_or_default().to_string();
            let kind = v["type"].as_str().unwrap_or("message").to_string();
            if let Some(o) = v.as_object_mut() {
                o.remove("id");
                o.remove("parentId");
                o.remove("type");
                for key in ["firstKeptEntryId", "targetId", "fromId"] {
                    if let Some(new) = o.get(key).and_then(Value::as_str).and_then(|r| ids.get(r)) {
                        o.insert(key.to_string(), Value::String(new.clone()));
                    }
                }
            }
            let new = self.append_raw(&kind, v)?;
            ids.insert(old, new);
        }
        // The copied branch ends where a request was about to go: every call has its result.
        self.open_calls.clear();
        Ok(self.leaf.clone())
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
        let synced = self.sync_now();
        self.lock = None;
        synced
    }

    /// False once [`SessionWriter::close`] released the file.
    pub fn is_open(&self) -> bool {
        self.lock.is_some()
    }
}

impl Drop for SessionWriter {
    fn drop(&mut self) {
        if let Err(e) = self.file.sync_data() {
            tracing::warn!("{}: final sync failed: {e}", self.path.display());
        }
    }
}

/// A background-sync slot for `file` (a clone of its descriptor), or `None` when the descriptor
/// cannot be cloned or the syncer thread is not running (syncs are then done in place).
fn sync_state(file: &std::fs::File) -> Option<Arc<SyncState>> {
    syncer()?;
    Some(Arc::new(SyncState {
        file: file.try_clone().ok()?,
        pending: std::sync::atomic::AtomicBool::new(false),
        error: std::sync::Mutex::new(None),
    }))
}

fn new_header(cwd: &Path, parent: Option<&Path>) -> Value {
    let mut h = json!({"type":"session","version":SESSION_VERSION,"id":uuid::Uuid::now_v7().to_string(),"timestamp":iso_now(),"cwd":cwd.display().to_string()});
    if let Some(p) = parent {
        h["parentSession"] = Value::String(p.display().to_string());
    }
    h
}

/// Reads and parses a session file. With `repair`, an unterminated last line that does not
/// parse is moved to a `.corrupt` sidecar and cut off (SESS-01), and a complete last line
/// without its newline gets one; damaged middle lines are skipped and counted (SESS-02).
pub fn read_tree(path: &Path, repair: bool) -> Result<(SessionTree, Vec<String>), SessionError> {
    let l = load(path, repair, true)?;
    Ok((l.tree, l.warnings))
}

/// A loaded session file.
struct Loaded {
    tree: SessionTree,
    /// The model-visible messages of the `message` entries, by entry index, as parsed while
    /// loading (`None` for older files, whose entries are migrated first).
    messages: Option<Vec<Option<Message>>>,
    warnings: Vec<String>,
    /// Indices of the entries of `messages` whose large images' bytes were left out
    /// ([`strip_image_data`]); [`restore_images`] reads back the ones a context needs.
    stripped: Vec<usize>,
    /// Entry lines naming images in `assets/` (the older pi-lsp form) whose bytes were all
    /// read back; 0 when one was missing.
    assets_read: usize,
}

/// A line made ready for the tree where it was parsed ([`read::lines`]'s `finish`).
// Held a piece at a time, most of them entries: boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
enum Placed {
    /// A v3 entry with its model-visible message (none when deferred), and whether that
    /// message's large image bytes were left out.
    Entry(Entry, Option<Message>, bool),
    /// A v3 line without id or type.
    NoEntry,
    /// Any other line, placed on the loading thread.
    Line(read::Line),
}

/// One line of a file, parsed.
enum ParsedLine {
    /// A version 3 entry line.
    Parts(Box<line::LineParts>),
    /// A line read as a whole value: older files (migrated), lines naming assets.
    Value(Value),
    /// Not a JSON object, NUL-filled, not UTF-8.
    Damaged,
}

/// [`read_tree`], keeping the messages parsed on the way; `deferred`: keeping only their
/// summaries ([`line::MessageSummary`]: the context is built later, from the file).
fn load(path: &Path, repair: bool, deferred: bool) -> Result<Loaded, SessionError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    let size = file.metadata().map_err(io(path))?.len() as usize;
    let mut warnings = Vec::new();
    let mut good_len = size;
    if let Some((start, tail)) = read::tail(&file, size).map_err(io(path))? {
        good_len = start + tail.len();
        if serde_json::from_slice::<Value>(&tail).is_err() {
            good_len = start;
            if repair {
                let sidecar = path.with_extension("jsonl.corrupt");
                std::fs::write(&sidecar, &tail).map_err(io(&sidecar))?;
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io(path))?;
                f.set_len(start as u64).map_err(io(path))?;
                warnings.push(format!(
                    "cut an unterminated last line ({} bytes) off {}; it was saved to {}",
                    tail.len(),
                    path.display(),
                    sidecar.display()
                ));
            }
        } else if repair {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(io(path))?;
            f.write_all(b"\n").map_err(io(path))?;
        }
    }
    // The header: the first line that is an object (damaged lines before it are skipped).
    let mut skipped = 0;
    let mut header = None;
    let pos = read::scan_lines(&file, good_len, |text| {
        if text.iter().all(u8::is_ascii_whitespace) {
            return false;
        }
        match serde_json::from_slice::<Value>(text) {
            Ok(v) if v.is_object() => {
                header = Some(v);
                true
            }
            _ => {
                skipped += 1;
                false
            }
        }
    })
    .map_err(io(path))?
    .unwrap_or(good_len);
    let Some(header) = header.filter(|h| h["type"] == "session") else {
        return Err(SessionError::NoHeader(path.to_path_buf()));
    };
    let version = header["version"].as_u64().unwrap_or(1);
    let v3 = version >= 3;
    let dir = path.parent();
    let mut image_warnings = Vec::new();
    let mut asset_lines = 0;
    let src = Arc::new(tree::FileText::new(file, path));
    let mut tree = SessionTree::new(header);
    let mut values = Vec::new();
    let mut messages: Vec<Option<Message>> = Vec::new();
    let mut stripped = Vec::new();
    // A v3 line parsed into its parts becomes its entry on the thread that parsed it (what
    // it drops is freed there): its message summarized (deferred) or its image bytes left out.
    let finish = |l: read::Line| match l.parsed {
        ParsedLine::Parts(parts) => match Entry::from_file(&src, l.offset, l.len, l.hash, *parts) {
            Some((mut entry, message)) if deferred => {
                entry.summarize(message.as_ref());
                Placed::Entry(entry, None, false)
            }
            Some((entry, mut message)) => {
                let stripped = message.as_mut().is_some_and(strip_image_data);
                Placed::Entry(entry, message, stripped)
            }
            None => Placed::NoEntry,
        },
        _ => Placed::Line(l),
    };
    // Each piece's lines as soon as they are parsed, in file order.
    let mut take = |k: usize, n: usize, lines: Vec<Placed>| {
        if k == 0 {
            // As many lines in every piece as in the first.
            let guess = lines.len().saturating_mul(n).saturating_add(16);
            if v3 {
                tree.reserve(guess);
                if !deferred {
                    messages.reserve(guess);
                }
            } else {
                values.reserve(guess);
            }
        }
        for placed in lines {
            let (entry, message, strip) = match placed {
                Placed::Entry(entry, message, strip) => (entry, message, strip),
                Placed::NoEntry => {
                    tree.warnings
                        .push("skipped an entry without id or type".into());
                    continue;
                }
                Placed::Line(read::Line {
                    offset,
                    len,
                    hash,
                    parsed,
                }) => {
                    let entry = match parsed {
                        // Older files are migrated as values first.
                        ParsedLine::Value(mut v) if !v3 => {
                            if let Some(dir) = dir {
                                load_images(&mut v, dir, &mut image_warnings);
                            }
                            values.push(v);
                            continue;
                        }
                        ParsedLine::Parts(parts) => {
                            Entry::from_file(&src, offset, len, hash, *parts)
                        }
                        ParsedLine::Value(mut v) => {
                            let changed =
                                dir.is_some_and(|d| load_images(&mut v, d, &mut image_warnings));
                            if changed {
                                asset_lines += 1;
                                Entry::from_value_converted(&v)
                            } else {
                                // Unchanged: the entry keeps its line as stored.
                                let parts = line::line_from_value(&v, true);
                                Entry::from_file(&src, offset, len, hash, parts)
                            }
                        }
                        ParsedLine::Damaged => {
                            skipped += 1;
                            continue;
                        }
                    };
                    let Some((mut entry, mut message)) = entry else {
                        tree.warnings
                            .push("skipped an entry without id or type".into());
                        continue;
                    };
                    if deferred {
                        entry.summarize(message.take().as_ref());
                    }
                    // Image bytes are not kept while loading (SESS-05); the context reads
                    // back those it sends.
                    let strip = message.as_mut().is_some_and(strip_image_data);
                    (entry, message, strip)
                }
            };
            if deferred {
                tree.push_entry(entry);
                continue;
            }
            let i = tree.push_entry(entry);
            if strip {
                stripped.push(i);
            }
            match messages.get_mut(i) {
                Some(slot) => *slot = message,
                None => messages.push(message),
            }
        }
    };
    read::lines(
        &src.file,
        pos.min(good_len),
        good_len,
        |buf, lines| parse_lines(buf, lines, v3, deferred),
        finish,
        &mut take,
    )
    .map_err(io(path))?;
    let (tree, messages) = if v3 {
        (tree, (!deferred).then_some(messages))
    } else {
        (
            SessionTree::from_values(tree.header, values, Vec::new()),
            None,
        )
    };
    if skipped > 0 {
        warnings.push(format!(
            "skipped {skipped} damaged line(s) in {}",
            path.display()
        ));
    }
    // Every image it names read back: the file could be written inline.
    let assets_read = if image_warnings.is_empty() {
        asset_lines
    } else {
        0
    };
    warnings.extend(image_warnings);
    warnings.extend(tree.warnings.iter().cloned());
    Ok(Loaded {
        tree,
        messages,
        warnings,
        stripped,
        assets_read,
    })
}

/// Parses the entry lines `buf[start..end]` of `lines` (after the header), in order: v3 lines
/// in one pass over the buffer ([`line::parse_many`]), any line it does not take one by one.
/// `deferred`: the messages are summarized ([`line::LineParts::summarize`]) where they were
/// parsed (the thread that reads the piece).
fn parse_lines(buf: &[u8], lines: &[(usize, usize)], v3: bool, deferred: bool) -> Vec<ParsedLine> {
    if !v3 {
        return lines
            .iter()
            .map(|&(s, e)| parse_line(&buf[s..e], false))
            .collect();
    }
    line::parse_many(buf, lines, deferred)
        .into_iter()
        .zip(lines)
        .map(|(parts, &(s, e))| match parts {
            Some(parts) => ParsedLine::Parts(Box::new(parts)),
            None => parse_line(&buf[s..e], true),
        })
        .map(|mut line| {
            if let (true, ParsedLine::Parts(parts)) = (deferred, &mut line) {
                parts.summarize();
            }
            line
        })
        .collect()
}

/// Parses one entry line (after the header). `v3` lines are parsed straight into entries and
/// messages; older ones into values (they are migrated). Lines the fast path does not take
/// (images kept in assets among them) are read as values.
fn parse_line(line: &[u8], v3: bool) -> ParsedLine {
    let object = |v: Value| {
        if v.is_object() {
            ParsedLine::Value(v)
        } else {
            ParsedLine::Damaged
        }
    };
    let Ok(text) = std::str::from_utf8(line) else {
        return ParsedLine::Damaged;
    };
    match v3.then(|| line::parse_fast(text)).flatten() {
        Some(parts) => ParsedLine::Parts(Box::new(parts)),
        None => serde_json::from_str(text).map_or(ParsedLine::Damaged, object),
    }
}

/// Writes the v3 session file `path` again from its loaded `tree` (whose entries hold the
/// images an older pi-lsp kept in `assets/` inline): the original is copied to
/// `<file>.assets.bak` first, the new text goes to a temporary file renamed over the
/// original. Lines are the entries' text as loaded (unchanged ones byte for byte). Returns
/// the backup's path.
fn write_inline(path: &Path, tree: &SessionTree) -> Result<PathBuf, SessionError> {
    let backup = path.with_extension("jsonl.assets.bak");
    std::fs::copy(path, &backup).map_err(io(&backup))?;
    let tmp = path.with_extension("jsonl.inline");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io(&tmp))?);
    let header = tree.header.to_string();
    for line in std::iter::once(header.as_str().into()).chain(tree.entries.iter().map(|e| e.text()))
    {
        let line = line
            .replace('\u{2028}', "\\u2028")
            .replace('\u{2029}', "\\u2029");
        out.write_all(line.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .map_err(io(&tmp))?;
    }
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    Ok(backup)
}

/// Rewrites an older (v1/v2) session file as v3 from its migrated `tree`: the original is
/// copied to `<file>.v<N>.bak` first, the new text is written to a temporary file and renamed
/// over the original. Returns the backup's path.
fn migrate_file(path: &Path, tree: &mut SessionTree) -> Result<PathBuf, SessionError> {
    let version = tree.header["version"].as_u64().unwrap_or(1);
    let backup = path.with_extension(format!("jsonl.v{version}.bak"));
    std::fs::copy(path, &backup).map_err(io(&backup))?;
    tree.header["version"] = json!(SESSION_VERSION);
    let mut text = String::new();
    let header = tree.header.to_string();
    for line in std::iter::once(header.as_str().into()).chain(tree.entries.iter().map(|e| e.text()))
    {
        text.push_str(
            &line
                .replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029"),
        );
        text.push('\n');
    }
    let tmp = path.with_extension("jsonl.migrating");
    std::fs::write(&tmp, text).map_err(io(&tmp))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    Ok(backup)
}

/// Pi's own sessions folder for a workspace: `<agent dir>/sessions/--<cwd>--/`, the cwd without
/// its leading separator and with `/`, `\` and `:` replaced by `-` (Pi's
/// `getDefaultSessionDir`). Sessions there are listed and opened like the workspace's own.
pub fn pi_sessions_dir(agent_dir: &Path, cwd: &Path) -> PathBuf {
    let cwd = cwd.to_string_lossy();
    let trimmed = cwd
        .strip_prefix('/')
        .or_else(|| cwd.strip_prefix('\\'))
        .unwrap_or(&cwd);
    let safe: String = trimmed
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect();
    agent_dir.join("sessions").join(format!("--{safe}--"))
}

/// Finds the file of session `id` in `dir`: one named `…_<id>.jsonl` (how Pi and this server
/// name them), else a `.jsonl` whose header (its first line) has that `id`, as the session
/// list reads it (a file copied or renamed by hand).
pub fn find_session_file(dir: &Path, id: &str) -> Option<PathBuf> {
    let suffix = format!("_{id}.jsonl");
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    if let Some(p) = files.iter().find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(&suffix))
    }) {
        return Some(p.clone());
    }
    let header_id = |p: &Path| -> Option<String> {
        use std::io::{BufRead, Read};
        let f = std::fs::File::open(p).ok()?;
        let mut line = Vec::new();
        std::io::BufReader::new(f.take(64 * 1024))
            .read_until(b'\n', &mut line)
            .ok()?;
        let v: Value = serde_json::from_slice(&line).ok()?;
        (v["type"] == "session").then(|| v["id"].as_str().map(str::to_string))?
    };
    let mut files = files;
    files.sort();
    files
        .into_iter()
        .find(|p| header_id(p).as_deref() == Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary folder, removed on drop (also when the test fails).
    struct Tmp(tempfile::TempDir);

    impl std::ops::Deref for Tmp {
        type Target = Path;
        fn deref(&self) -> &Path {
            self.0.path()
        }
    }

    impl AsRef<Path> for Tmp {
        fn as_ref(&self) -> &Path {
            self.0.path()
        }
    }

    fn tmp(name: &str) -> Tmp {
        Tmp(tempfile::Builder::new()
            .prefix(&format!("pi-core-session-{name}-"))
            .tempdir()
            .unwrap())
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/../../fixtures/cases/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn torn_tail_is_cut_before_append() {
        // SESS-01
        let d = tmp("torn");
        let p = d.join("s.jsonl");
        std::fs::write(&p, fixture("SESS-01-torn-tail.jsonl")).unwrap();
        let (mut w, loaded) = SessionWriter::open(&p).unwrap();
        assert_eq!(
            loaded.messages,
            vec![serde_json::from_value::<Message>(json!({"role":"user","content":"hi"})).unwrap()]
        );
        assert_eq!(loaded.warnings.len(), 1);
        w.append_message(&Message::user_text("again")).unwrap();
        drop(w); // one writer per file: the first lets go of its lock
        let (_, reloaded) = SessionWriter::open(&p).unwrap();
        assert_eq!(reloaded.messages.len(), 2);
        assert!(reloaded.warnings.is_empty());
        assert!(d.join("s.jsonl.corrupt").exists());
    }

    #[test]
    fn nul_block_is_skipped_and_later_entries_load() {
        // SESS-02
        let d = tmp("nul");
        let p = d.join("s.jsonl");
        std::fs::write(&p, fixture("SESS-02-nul-block.jsonl")).unwrap();
        let (_, loaded) = SessionWriter::open(&p).unwrap();
        assert_eq!(
            loaded.warnings,
            vec![format!("skipped 1 damaged line(s) in {}", p.display())]
        );
        assert_eq!(loaded.messages.len(), 3);
    }

    #[test]
    fn older_files_are_rewritten_as_v3_with_a_backup_before_appending() {
        let d = tmp("migrate");
        let p = d.join("old.jsonl");
        let v1 = concat!(
            "{\"type\":\"session\",\"id\":\"old\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/ws\"}\n",
            "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:01.000Z\",\"message\":{\"role\":\"user\",\"content\":\"one\"}}\n",
            "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:02.000Z\",\"message\":{\"role\":\"hookMessage\",\"customType\":\"x\",\"content\":\"two\",\"display\":false}}\n"
        );
        std::fs::write(&p, v1).unwrap();
        let (mut w, loaded) = SessionWriter::open(&p).unwrap();
        assert_eq!(loaded.messages.len(), 2);
        let backup = d.join("old.jsonl.v1.bak");
        assert_eq!(std::fs::read_to_string(&backup).unwrap(), v1);
        assert!(
            loaded.warnings.iter().any(|w| w.contains("rewrote")),
            "{:?}",
            loaded.warnings
        );
        w.append_message(&Message::user_text("three")).unwrap();
        drop(w);
        let lines: Vec<Value> = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["version"], 3);
        assert_eq!(lines[1]["id"], "00000001");
        assert_eq!(lines[2]["parentId"], "00000001");
        assert_eq!(lines[2]["message"]["role"], "custom");
        assert_eq!(lines[3]["parentId"], lines[2]["id"]);
        // Reopened: no second migration, the three messages on one path.
        let (_, again) = SessionWriter::open(&p).unwrap();
        assert!(again.warnings.is_empty(), "{:?}", again.warnings);
        assert_eq!(again.messages.len(), 3);
    }

    #[test]
    fn large_images_are_stored_once_beside_the_session() {
        use base64::Engine as _;
        let d = tmp("assets");
        let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
        w.set_image_options(ImageOptions {
            storage: ImageStorage::Assets,
            keep_turns: None,
        });
        let bytes: Vec<u8> = (0..600_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let msg: Message = serde_json::from_value(json!({"role":"user","content":[
            {"type":"text","text":"what is in this screenshot?"},
            {"type":"image","data":data,"mimeType":"image/png"}],"timestamp":1}))
        .unwrap();
        let small: Message = serde_json::from_value(json!({"role":"user","content":[
            {"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}],"timestamp":2}))
        .unwrap();
        w.append_message(&msg).unwrap();
        w.append_message(&msg).unwrap();
        w.append_message(&small).unwrap();
        // The writer's own context keeps the whole image.
        assert_eq!(w.context().messages[0], msg);
        let path = w.path().to_path_buf();
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() < 4_000, "lines stay small: {} bytes", text.len());
        let assets: Vec<PathBuf> = std::fs::read_dir(d.join(ASSETS_DIR))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(assets.len(), 1, "stored once: {assets:?}");
        assert_eq!(std::fs::read(&assets[0]).unwrap(), bytes);
        assert!(text.contains("iVBORw0KGgo="), "small images stay inline");
        let assets_opts = ImageOptions {
            storage: ImageStorage::Assets,
            keep_turns: None,
        };
        // Opened with assets storage: read back, the file as it is.
        let (w, loaded) = SessionWriter::open_with(&path, assets_opts).unwrap();
        assert_eq!(
            loaded.messages,
            vec![msg.clone(), msg.clone(), small.clone()]
        );
        assert_eq!(loaded.warnings, Vec::<String>::new());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        // A fork or clone with inline storage writes the images inline, as Pi reads them; the
        // original file is not changed.
        let fork_dir = tmp("assets-fork");
        let (fork, forked) = SessionWriter::fork_from_with(
            &path,
            &loaded.tree,
            &fork_dir,
            None,
            ImageOptions::default(),
        )
        .unwrap();
        assert_eq!(
            forked.messages,
            vec![msg.clone(), msg.clone(), small.clone()]
        );
        let contents = |file: &Path| -> Vec<Value> {
            std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .filter(|v| v["type"] == "message")
                .map(|v| v["message"]["content"].clone())
                .collect()
        };
        let inline = json!([{"type":"text","text":"what is in this screenshot?"},
            {"type":"image","data":data,"mimeType":"image/png"}]);
        assert_eq!(contents(fork.path())[..2], [inline.clone(), inline.clone()]);
        assert!(!std::fs::read_to_string(fork.path())
            .unwrap()
            .contains(ASSET_FIELD));
        assert!(!fork_dir.join(ASSETS_DIR).exists());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        drop((w, fork));

        // A missing asset becomes a visible text block and a warning, never an empty image;
        // such a file is not rewritten.
        let kept = d.join("kept.png");
        std::fs::rename(&assets[0], &kept).unwrap();
        let (tree, warnings) = read_tree(&path, false).unwrap();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        match &tree.context(None).messages[0] {
            Message::User(u) => assert!(u.content.to_text().contains("is missing]")),
            m => panic!("{m:?}"),
        }
        drop(SessionWriter::open(&path).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        std::fs::rename(&kept, &assets[0]).unwrap();

        // Opened for appending with inline storage (the default), the file is written again
        // with its images inline, once (the original kept beside it), so Pi can resume it.
        let (mut w, loaded) = SessionWriter::open(&path).unwrap();
        assert_eq!(
            loaded.messages,
            vec![msg.clone(), msg.clone(), small.clone()]
        );
        let backup = path.with_extension("jsonl.assets.bak");
        assert_eq!(
            loaded.warnings,
            vec![format!(
                "rewrote {} with the 2 image line(s) kept in assets/ inline, as Pi reads them; the original is kept at {}",
                path.display(),
                backup.display()
            )]
        );
        assert_eq!(std::fs::read_to_string(&backup).unwrap(), text);
        assert_eq!(
            contents(&path),
            vec![
                inline.clone(),
                inline,
                serde_json::to_value(&small).unwrap()["content"].clone()
            ]
        );
        w.append_message(&Message::user_text("after")).unwrap();
        drop(w);
        let (_, again) = SessionWriter::open(&path).unwrap();
        assert_eq!(again.warnings, Vec::<String>::new());
        assert_eq!(again.messages.len(), 4);
    }

    /// A user message with `text` and an image of `n` pseudo-random bytes (base64 over the
    /// loader's keep limit).
    fn image_message(text: &str, n: usize, seed: u8, ts: i64) -> Message {
        use base64::Engine as _;
        let bytes: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        serde_json::from_value(json!({"role":"user","content":[
            {"type":"text","text":text},
            {"type":"image","data":data,"mimeType":"image/png"}],"timestamp":ts}))
        .unwrap()
    }

    #[test]
    fn images_are_written_inline_by_default_as_pi_writes_them() {
        let d = tmp("inline");
        let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
        assert_eq!(w.image_options(), ImageOptions::default());
        let msg = image_message("look", 600_000, 1, 1);
        w.append_message(&msg).unwrap();
        let path = w.path().to_path_buf();
        drop(w);
        let lines: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // Exactly Pi's shape: the base64 in `data`, nothing else beside it.
        assert_eq!(
            lines[3]["message"],
            json!({"role":"user","content":serde_json::to_value(&msg).unwrap()["content"],"timestamp":1})
        );
        assert_eq!(
            lines[3]["message"]["content"][1]["data"]
                .as_str()
                .unwrap()
                .len(),
            800_000
        );
        assert!(!d.join(ASSETS_DIR).exists());
        let (_, loaded) = SessionWriter::open(&path).unwrap();
        assert_eq!(loaded.messages, vec![msg]);
    }

    #[test]
    fn opening_keeps_the_images_of_the_last_turns_only() {
        let d = tmp("window");
        let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
        let msgs: Vec<Message> = (0..5)
            .map(|i| image_message(&format!("turn {i}"), 30_000, i as u8, i))
            .collect();
        for m in &msgs {
            w.append_message(m).unwrap();
            w.append_message(&Message::Assistant(pi_ai::AssistantMessage::empty(
                "openai-completions",
                "mock",
                "m1",
            )))
            .unwrap();
        }
        let path = w.path().to_path_buf();
        drop(w);
        let dropped = |i: i64| -> Message {
            serde_json::from_value(json!({"role":"user","content":[
                {"type":"text","text":format!("turn {i}")},
                {"type":"text","text":IMAGE_DROPPED_NOTE}],"timestamp":i}))
            .unwrap()
        };
        let users = |l: &LoadedSession| -> Vec<Message> {
            l.messages
                .iter()
                .filter(|m| matches!(m, Message::User(_)))
                .cloned()
                .collect()
        };
        let two = ImageOptions {
            storage: ImageStorage::Inline,
            keep_turns: Some(2),
        };
        let (w, loaded) = SessionWriter::open_with(&path, two).unwrap();
        assert_eq!(
            users(&loaded),
            vec![
                dropped(0),
                dropped(1),
                dropped(2),
                msgs[3].clone(),
                msgs[4].clone()
            ]
        );
        assert_eq!(w.image_options(), two);
        // The file keeps every image; the view a client is shown too.
        assert_eq!(
            w.context()
                .messages
                .into_iter()
                .filter(|m| matches!(m, Message::User(_)))
                .collect::<Vec<_>>(),
            msgs
        );
        drop(w);
        let every = ImageOptions {
            storage: ImageStorage::Inline,
            keep_turns: None,
        };
        let (_, loaded) = SessionWriter::open_with(&path, every).unwrap();
        assert_eq!(users(&loaded), msgs);
        // The window on a live context: the same result, idempotent; an empty image is never
        // sent.
        let mut live = loaded.messages.clone();
        assert_eq!(image_window(&mut live, Some(2)), 3);
        assert_eq!(image_window(&mut live, Some(2)), 0);
        let mut empty = vec![image_message("e", 0, 0, 9)];
        assert_eq!(image_window(&mut empty, None), 1);
        assert_eq!(
            empty,
            vec![
                serde_json::from_value::<Message>(json!({"role":"user","content":[
            {"type":"text","text":"e"},{"type":"text","text":IMAGE_DROPPED_NOTE}],"timestamp":9}))
                .unwrap()
            ]
        );
    }

    #[test]
    fn image_settings_are_read_with_their_defaults() {
        let read = |v: Value| ImageOptions::from_settings(v.as_object().unwrap());
        assert_eq!(read(json!({})), (ImageOptions::default(), vec![]));
        assert_eq!(
            read(json!({"sessions": {"imageStorage": "assets", "imageTurns": 0}})),
            (
                ImageOptions {
                    storage: ImageStorage::Assets,
                    keep_turns: None
                },
                vec![]
            )
        );
        assert_eq!(
            read(json!({"sessions": {"imageStorage": "disk", "imageTurns": -1}})),
            (
                ImageOptions::default(),
                vec![
                    "settings: sessions.imageStorage must be \"inline\" or \"assets\", not \"disk\"".to_string(),
                    "settings: sessions.imageTurns must be a whole number (0: every image), not -1".to_string()
                ]
            )
        );
    }

    #[test]
    fn entries_read_their_lines_from_the_file_and_a_changed_line_reads_empty() {
        let d = tmp("changed");
        let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
        let a = w.append_message(&Message::user_text("first")).unwrap();
        w.append_message(&Message::user_text("second")).unwrap();
        let path = w.path().to_path_buf();
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        let (tree, _) = read_tree(&path, false).unwrap();
        let stored: Vec<_> = tree.entries.iter().map(|e| e.text()).collect();
        assert_eq!(stored, text.lines().skip(1).collect::<Vec<_>>());
        // Another program rewrites the first message in place (same length): that entry's text
        // is gone, nothing panics, the others still read.
        std::fs::write(&path, text.replace("\"first\"", "\"FIRST\"")).unwrap();
        let e = tree.get(&a).unwrap();
        assert_eq!(e.text(), "");
        assert_eq!(e.raw(), Value::Null);
        assert_eq!(e.message(), None);
        assert_eq!(tree.entries[3].text(), text.lines().nth(4).unwrap());
        // Cut short: the last entry is gone too.
        std::fs::write(&path, &text[..text.len() / 2]).unwrap();
        assert_eq!(tree.entries[3].text(), "");
    }

    #[test]
    fn messages_taken_from_loading_equal_the_context_built_from_the_tree_at_every_leaf() {
        let d = tmp("parsed");
        let p = d.join("s.jsonl");
        let user = |id: &str, parent: Option<&str>, text: &str| json!({"type":"message","id":id,"parentId":parent,"message":{"role":"user","content":text,"timestamp":1}});
        let assistant = |id: &str, parent: &str, model: &str| json!({"type":"message","id":id,"parentId":parent,"message":{"role":"assistant","content":[{"type":"text","text":id}],"provider":"p","model":model,"stopReason":"stop","timestamp":2}});
        let lines = [
            json!({"type":"session","version":3,"id":"s","cwd":"/ws"}),
            json!({"type":"model_change","id":"m0","parentId":null,"provider":"p","modelId":"m0"}),
            json!({"type":"thinking_level_change","id":"t0","parentId":"m0","thinkingLevel":"high"}),
            user("a", Some("t0"), "one"),
            assistant("b", "a", "m1"),
            user("c", Some("b"), "off the later branch"),
            assistant("d", "c", "m2"),
            user("e", Some("b"), "two"),
            json!({"type":"custom_message","id":"x","parentId":"e","customType":"ext","content":"note","display":true}),
            assistant("f", "x", "m3"),
            json!({"type":"compaction","id":"k","parentId":"d","summary":"sum","firstKeptEntryId":"c","tokensBefore":9}),
            user("g", Some("k"), "after compaction"),
            json!({"type":"message","id":"h","parentId":"e","message":{"role":"bashExecution","command":"ls","output":"","exitCode":0,"excludeFromContext":true}}),
            user("i", Some("h"), "three"),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&p, text).unwrap();
        let loaded = load(&p, false, false).unwrap();
        let deferred = load(&p, false, true).unwrap();
        assert!(deferred.messages.is_none());
        let ids: Vec<String> = loaded.tree.entries.iter().map(|e| e.id.clone()).collect();
        assert_eq!(ids.len(), lines.len() - 1);
        for id in &ids {
            let again = load(&p, false, false).unwrap();
            let taken = again.tree.context_parsed(Some(id), again.messages.unwrap());
            let built = loaded.tree.context(Some(id));
            assert_eq!(taken, built, "leaf {id}");
            // A deferred load counts the same context without building it, and builds the
            // same one from the file.
            assert_eq!(
                deferred.tree.message_count(Some(id)),
                built.messages.len(),
                "leaf {id}"
            );
            assert_eq!(deferred.tree.context(Some(id)), built, "leaf {id}");
            let settings = deferred.tree.settings(Some(id));
            assert_eq!(
                (settings.model, settings.thinking_level),
                (built.model, built.thinking_level),
                "leaf {id}"
            );
        }
        let at_i = loaded.tree.context(Some("i"));
        assert_eq!(at_i.messages.len(), 4);
        assert_eq!(at_i.model, Some(("p".into(), "m1".into())));
        assert_eq!(at_i.thinking_level, "high");
    }

    /// A session of the entry shapes Pi writes beside plain read rounds: thinking, several
    /// blocks and calls per answer, bash results with details, edits, images, user strings,
    /// labels, model and thinking changes, a compaction, a branch summary, custom and
    /// extended-role messages, side branches, a result under the wrong entry (PAIR-02), a
    /// message whose role is not its first key, a damaged line.
    fn mixed_session() -> Vec<u8> {
        let usage = json!({"input":3,"output":120,"cacheRead":20000,"cacheWrite":512,"totalTokens":20635,"cost":{"input":0.000009,"output":0.0018,"cacheRead":0.006,"cacheWrite":0.00192,"total":0.009729}});
        let img = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
        let msg = |id: &str, parent: &str, m: Value| json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:00.000Z","message":m});
        let answer = |content: Value, model: &str, stop: &str| json!({"role":"assistant","content":content,"api":"anthropic-messages","provider":"anthropic","model":model,"usage":usage,"stopReason":stop,"timestamp":2});
        let result = |call: &str, tool: &str, content: Value, details: Value| json!({"role":"toolResult","toolCallId":call,"toolName":tool,"content":content,"details":details,"isError":false,"timestamp":3});
        let lines = [
            json!({"type":"session","version":3,"id":"mixed","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/ws"}),
            json!({"type":"model_change","id":"m0","parentId":null,"provider":"anthropic","modelId":"claude-a"}),
            json!({"type":"thinking_level_change","id":"t0","parentId":"m0","thinkingLevel":"medium"}),
            msg(
                "u1",
                "t0",
                json!({"role":"user","content":"fix the build \"now\"\n","timestamp":1}),
            ),
            msg(
                "a1",
                "u1",
                answer(
                    json!([{"type":"thinking","thinking":"look first","thinkingSignature":"sig"},{"type":"text","text":"Reading."},{"type":"toolCall","id":"toolu_1","name":"read","arguments":{"path":"a.rs"}},{"type":"toolCall","id":"toolu_2","name":"bash","arguments":{"command":"cargo build 2>&1 | tail -5"}}]),
                    "claude-a",
                    "toolUse",
                ),
            ),
            msg(
                "r1",
                "a1",
                result(
                    "toolu_1",
                    "read",
                    json!([{"type":"text","text":"fn main() {}\n"}]),
                    Value::Null,
                ),
            ),
            msg(
                "r2",
                "r1",
                result(
                    "toolu_2",
                    "bash",
                    json!([{"type":"text","text":"error[E0425]\n\nCommand exited with code 101"}]),
                    json!({"exitCode":101,"truncation":null}),
                ),
            ),
            json!({"type":"label","id":"l1","parentId":"r2","targetId":"a1","label":"first try"}),
            msg(
                "a2",
                "l1",
                answer(
                    json!([{"type":"toolCall","id":"toolu_3","name":"edit","arguments":{"path":"a.rs","oldText":"fn main() {}","newText":"fn main() { run(); }"}}]),
                    "claude-a",
                    "toolUse",
                ),
            ),
            msg(
                "r3",
                "a2",
                result(
                    "toolu_3",
                    "edit",
                    json!([{"type":"text","text":"Successfully replaced text in a.rs."}]),
                    json!({"diff":"-1 fn main() {}\n+1 fn main() { run(); }","firstChangedLine":1}),
                ),
            ),
            msg(
                "u2",
                "r3",
                json!({"role":"user","content":[{"type":"text","text":"and this screenshot?"},{"type":"image","data":img,"mimeType":"image/png"}],"timestamp":4}),
            ),
            json!({"type":"model_change","id":"m1","parentId":"u2","provider":"openai","modelId":"gpt-b"}),
            msg(
                "a3",
                "m1",
                json!({"role":"assistant","content":[{"type":"thinking","thinking":"","thinkingSignature":"opaque","redacted":true},{"type":"text","text":"A chart.","textSignature":"ts"},{"type":"toolCall","id":"call_4","name":"read","arguments":{"path":"chart.png"}}],"api":"openai-responses","provider":"openai","model":"gpt-b","usage":usage,"stopReason":"toolUse","responseId":"resp_1","timestamp":5}),
            ),
            msg(
                "r4",
                "a3",
                result(
                    "call_4",
                    "read",
                    json!([{"type":"text","text":"Read image file [image/png]"},{"type":"image","data":img,"mimeType":"image/png"}]),
                    Value::Null,
                ),
            ),
            // A side branch from a1's results, with a user shell command and an extension's message.
            msg(
                "u3",
                "r2",
                json!({"role":"user","content":"try another way","timestamp":6}),
            ),
            msg(
                "x1",
                "u3",
                json!({"role":"bashExecution","command":"ls","output":"a.rs\n","exitCode":0,"cancelled":false,"truncated":false,"timestamp":7}),
            ),
            msg(
                "x2",
                "x1",
                json!({"role":"bashExecution","command":"env","output":"SECRET","exitCode":0,"excludeFromContext":true,"timestamp":7}),
            ),
            msg(
                "x3",
                "x2",
                json!({"role":"custom","customType":"ext","content":"a note","display":true,"timestamp":8}),
            ),
            json!({"type":"custom_message","id":"cm","parentId":"x3","customType":"ext","content":[{"type":"text","text":"shown"}],"display":true,"timestamp":"2026-01-01T00:00:01.000Z"}),
            msg(
                "a4",
                "cm",
                answer(
                    json!([{"type":"text","text":"Done another way."}]),
                    "claude-a",
                    "stop",
                ),
            ),
            // Back on the main branch: a branch summary, a compaction, a message with its role
            // later, an aborted answer and a result attached under the wrong entry.
            json!({"type":"branch_summary","id":"bs","parentId":"r4","fromId":"a4","summary":"tried ls","timestamp":"2026-01-01T00:00:02.000Z"}),
            json!({"type":"compaction","id":"k1","parentId":"bs","summary":"built, edited, looked at a chart","firstKeptEntryId":"u2","tokensBefore":50000,"timestamp":"2026-01-01T00:00:03.000Z"}),
            msg(
                "u4",
                "k1",
                json!({"content":"role later","role":"user","timestamp":9}),
            ),
            msg(
                "a5",
                "u4",
                json!({"role":"assistant","content":[{"type":"toolCall","id":"call_5","name":"bash","arguments":{"command":"sleep 100"}}],"api":"x","provider":"openai","model":"gpt-b","stopReason":"aborted","errorMessage":"Request was aborted","timestamp":10}),
            ),
            msg(
                "u5",
                "a5",
                json!({"role":"user","content":"never mind","timestamp":11}),
            ),
            msg(
                "r5",
                "u5",
                result(
                    "call_5",
                    "bash",
                    json!("Command aborted"),
                    json!({"exitCode":null}),
                ),
            ),
            msg(
                "a6",
                "r5",
                answer(
                    json!([{"type":"text","text":"ok"},{"type":"text","text":"two blocks"}]),
                    "gpt-b",
                    "stop",
                ),
            ),
        ];
        let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        text.insert_str(
            text.find("{\"type\":\"label\"").unwrap(),
            "{\"type\":\"message\",\"id\":\n",
        );
        text.into_bytes()
    }

    /// Every recorded file (damaged, mispaired, written by Pi, compacted, v1) opened with its
    /// context deferred: the same tree, warnings, model and thinking level as an open that
    /// builds it, no messages held, the context counted without building it and built the same
    /// from the file later.
    #[test]
    fn a_deferred_open_gives_what_an_open_gives_when_the_context_is_built() {
        let d = tmp("deferred");
        let root = format!("{}/../../fixtures", env!("CARGO_MANIFEST_DIR"));
        let v1 = concat!(
            "{\"type\":\"session\",\"id\":\"old\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/ws\"}\n",
            "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:01.000Z\",\"message\":{\"role\":\"user\",\"content\":\"one\"}}\n",
            "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:02.000Z\",\"message\":{\"role\":\"hookMessage\",\"customType\":\"x\",\"content\":\"two\",\"display\":false}}\n"
        );
        let mut files: Vec<(String, Vec<u8>)> = [
            "cases/SESS-01-torn-tail.jsonl",
            "cases/SESS-02-nul-block.jsonl",
            "cases/PAIR-01-1.jsonl",
            "cases/PAIR-02-1.jsonl",
            "sessions/compacted-branches.jsonl",
            "sessions/pi-0.73.1-anthropic-read.jsonl",
            "sessions/pi-0.73.1-openai-read.jsonl",
            "sessions/pi-0.73.1-tools.jsonl",
        ]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(format!("{root}/{f}")).unwrap()))
        .collect();
        // PAIR-02's case is entries only: behind a header and the user entry it names.
        for (name, bytes) in files.iter_mut() {
            if name.contains("PAIR-02") {
                let head = concat!(
                    "{\"type\":\"session\",\"version\":3,\"id\":\"p2\",\"cwd\":\"/ws\"}\n",
                    "{\"type\":\"message\",\"id\":\"u0\",\"parentId\":null,\"message\":{\"role\":\"user\",\"content\":\"start\"}}\n"
                );
                bytes.splice(0..0, head.bytes());
            }
        }
        files.push(("v1".into(), v1.as_bytes().to_vec()));
        files.push(("mixed".into(), mixed_session()));
        for (n, (name, bytes)) in files.iter().enumerate() {
            let (a, b) = (d.join(format!("{n}a.jsonl")), d.join(format!("{n}b.jsonl")));
            std::fs::write(&a, bytes).unwrap();
            std::fs::write(&b, bytes).unwrap();
            let (wa, built) = SessionWriter::open(&a).unwrap();
            let (wb, deferred) = SessionWriter::open_deferred(&b, ImageOptions::default()).unwrap();
            assert!(deferred.deferred && !built.deferred, "{name}");
            assert!(deferred.messages.is_empty(), "{name}");
            let renamed = |w: &[String]| -> Vec<String> {
                w.iter()
                    .map(|s| s.replace(&format!("{n}b.jsonl"), &format!("{n}a.jsonl")))
                    .collect()
            };
            assert_eq!(renamed(&deferred.warnings), built.warnings, "{name}");
            assert_eq!(
                (&deferred.model, &deferred.thinking_level, &deferred.name),
                (&built.model, &built.thinking_level, &built.name),
                "{name}"
            );
            assert_eq!(wb.leaf(), wa.leaf(), "{name}");
            assert_eq!(
                wb.tree().message_count(wb.leaf()),
                built.messages.len(),
                "{name}"
            );
            assert_eq!(wb.context().messages, built.messages, "{name}");
            if name == "mixed" {
                // The damaged line skipped, r5 read under the call it answers.
                assert_eq!(
                    built.warnings,
                    [
                        format!("skipped 1 damaged line(s) in {}", a.display()),
                        "tool result r5 (call call_5) was attached under u5, not under the message that called it; it is read under a5".into()
                    ],
                    "{name}"
                );
                // The compaction's summary; u2, a3, r4 kept; the branch summary; after the
                // compaction u4, a5, r5 (u5 is off the branch now), a6.
                assert_eq!(built.messages.len(), 9, "{name}");
            }
            // At every leaf: the count without building, and the context built from the file.
            for e in &wa.tree().entries {
                let full = wa.tree().context(Some(&e.id));
                let leaf = Some(e.id.as_str());
                assert_eq!(
                    wb.tree().message_count(leaf),
                    full.messages.len(),
                    "{name} at {}",
                    e.id
                );
                assert_eq!(wb.tree().context(leaf), full, "{name} at {}", e.id);
            }
            let ids = |w: &SessionWriter| -> Vec<(String, Option<String>)> {
                w.tree()
                    .entries
                    .iter()
                    .map(|e| (e.id.clone(), e.parent_id.clone()))
                    .collect()
            };
            assert_eq!(ids(&wb), ids(&wa), "{name}");
            assert_eq!(
                std::fs::read(&b).unwrap(),
                std::fs::read(&a).unwrap(),
                "{name}"
            );
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn pi_sessions_dir_is_named_as_pi_names_it() {
        assert_eq!(
            pi_sessions_dir(Path::new("/home/u/.pi/agent"), Path::new("/work/my-app")),
            PathBuf::from("/home/u/.pi/agent/sessions/--work-my-app--")
        );
    }

    #[test]
    fn created_file_has_pi_shape_and_reopens() {
        let d = tmp("create");
        let mut w = SessionWriter::create(&d, Path::new("/ws"), "mock", "m1", "off").unwrap();
        let a = w.append_message(&Message::user_text("hello")).unwrap();
        let text = std::fs::read_to_string(w.path()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["type"], "session");
        assert_eq!(lines[0]["version"], 3);
        assert_eq!(lines[1]["type"], "model_change");
        assert_eq!(lines[1]["parentId"], Value::Null);
        assert_eq!(lines[2]["parentId"], lines[1]["id"]);
        assert_eq!(lines[3]["id"], a.as_str());
        assert_eq!(lines[3]["parentId"], lines[2]["id"]);
        assert_eq!(a.len(), 8);
        assert_eq!(
            std::fs::read_to_string(d.join(".gitignore")).unwrap(),
            SESSIONS_GITIGNORE
        );
        let (path, id) = (w.path().to_path_buf(), w.id().to_string());
        drop(w); // one writer per file: the first lets go of its lock
        let (_, loaded) = SessionWriter::open(&path).unwrap();
        assert_eq!(loaded.model, Some(("mock".into(), "m1".into())));
        assert_eq!(find_session_file(&d, &id).as_deref(), Some(path.as_path()));
        // A file renamed by hand is found by its header's id, as the session list shows it.
        let renamed = d.join("copied-by-hand.jsonl");
        std::fs::write(
            &renamed,
            "{\"type\":\"session\",\"version\":3,\"id\":\"s1\",\"cwd\":\"/tmp/p\"}\n",
        )
        .unwrap();
        assert_eq!(find_session_file(&d, "s1"), Some(renamed));
        assert_eq!(find_session_file(&d, "s2"), None);
    }
}

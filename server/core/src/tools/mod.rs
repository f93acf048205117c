//! The coding tools: `read`, `write`, `edit`, `bash`, `grep`, `find`, `ls`, with Pi 0.73.1's
//! names, parameter schemas and result texts. File tools go through [`crate::fs::Fs`]; only
//! `bash` spawns processes.

mod bash;
mod edit;
mod edit_match;
pub mod file_change;
mod find;
mod grep;
mod ls;
mod read;
mod write;

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use bash::{
    kill_all_groups, kill_all_groups_now, kill_group, without_truncation_notice, BashEnd,
    BashExecutor, BashRun, BashTool, BeforeBash, BASH_GUIDELINE, KILL_GRACE,
};
pub(crate) use edit::minimal_replace;
pub use edit::EditTool;
pub use find::FindTool;
pub use grep::GrepTool;
pub use ls::LsTool;
pub(crate) use read::process_prompt_image;
pub use read::{sniff_image, ReadTool};
pub use write::WriteTool;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::agent::{Tool, ToolError};
use crate::fs::Fs;

/// Pi's output limits: 2,000 lines or 50 KB, whichever is hit first.
pub const MAX_LINES: usize = 2000;
/// Pi's output byte limit (50 KB).
pub const MAX_BYTES: usize = 50 * 1024;

/// What the model last saw of each file, for stale-read protection (case EDIT-08): a hash of
/// the whole text at the time of the model's last `read` (or of the text its own successful
/// `edit` / `write` produced), keyed by resolved path, and the text itself when a `read` gave
/// it and it is at most [`SEEN_TEXT_LIMIT`] bytes (so a refusal can say which lines changed).
/// One tracker per tool set, i.e. per session.
#[derive(Debug, Default)]
pub struct ReadTracker {
    seen: Mutex<HashMap<PathBuf, Seen>>,
}

/// What the model last saw of one file.
#[derive(Debug)]
struct Seen {
    /// [`text_hash`] of the text; `None` when only the time is known ([`ReadTracker::seed`]).
    hash: Option<u64>,
    /// When the model read it (ms since the epoch), for a read before this process.
    at: Option<i64>,
    /// The text, when it was read and small enough.
    text: Option<Arc<str>>,
}

/// Largest text a [`ReadTracker`] keeps to show what changed since the read, in bytes.
pub const SEEN_TEXT_LIMIT: usize = 64 * 1024;

/// Most changed lines a stale-read refusal lists.
const CHANGED_LINES_SHOWN: usize = 12;

/// XXH3 of the text: fast on megabytes (a 2.4 MB buffer in a fraction of a millisecond).
pub fn text_hash(text: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// [`text_hash`] of the text `edits` (non-overlapping, sorted by start) make of `text`, hashed
/// piece by piece (streaming XXH3 gives the one-shot value) so the edited text is never built.
pub fn text_hash_after(text: &str, edits: &[crate::fs::TextReplace]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut pos = 0;
    for e in edits {
        h.update(&text.as_bytes()[pos..e.range.start]);
        h.update(e.new_text.as_bytes());
        pos = e.range.end;
    }
    h.update(&text.as_bytes()[pos..]);
    h.digest()
}

impl ReadTracker {
    /// Records that the model now knows `text` as the content of `path`.
    pub fn record(&self, path: &Path, text: &str) {
        let seen = Seen {
            hash: Some(text_hash(text)),
            at: None,
            text: (text.len() <= SEEN_TEXT_LIMIT).then(|| Arc::from(text)),
        };
        if let Ok(mut m) = self.seen.lock() {
            m.insert(path.to_path_buf(), seen);
        }
    }

    /// Records that the model now knows the text whose [`text_hash`] is `hash` as `path`'s
    /// content (after its own edit, without building the edited text).
    pub fn record_hash(&self, path: &Path, hash: u64) {
        if let Ok(mut m) = self.seen.lock() {
            m.insert(
                path.to_path_buf(),
                Seen {
                    hash: Some(hash),
                    at: None,
                    text: None,
                },
            );
        }
    }

    /// True when the model read `path` and its current `text` differs from what it read;
    /// false when it matches or the model never read the file (Pi allows edits without a read).
    /// A read known only by its time ([`ReadTracker::seed`]) counts as changed when `on_disk`
    /// (the text is the disk's, not an editor buffer's) and the file was modified after it.
    pub fn changed_since_read(&self, path: &Path, text: &str, on_disk: bool) -> bool {
        let (hash, at) = match self
            .seen
            .lock()
            .ok()
            .and_then(|m| m.get(path).map(|s| (s.hash, s.at)))
        {
            Some(seen) => seen,
            None => return false,
        };
        match (hash, at) {
            (Some(h), _) => h != text_hash(text),
            (None, Some(at)) if on_disk => std::fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .is_some_and(|t| t.as_millis() as i64 > at),
            _ => false,
        }
    }

    /// Seeds the tracker from the conversation of a session opened from its file: what the
    /// model knew of each file before this process. The last `read` of a file is known by its
    /// result's time (the file changed since when it was modified later), the last `edit` /
    /// `write` by the hash of the text it made (`details.fileChange.hashAfter`). Failed calls
    /// are left out; `read` paths resolve under `root` as the tools resolve them.
    pub fn seed(&self, root: &Path, messages: &[pi_ai::Message]) {
        use pi_ai::{ContentBlock, Message};
        let mut calls: HashMap<&str, (&str, &str)> = HashMap::new();
        let mut found: Vec<(PathBuf, Seen)> = Vec::new();
        for m in messages {
            match m {
                Message::Assistant(a) => {
                    for b in &a.content {
                        if let ContentBlock::ToolCall(c) = b {
                            if let Some(p) = c.arguments.get("path").and_then(Value::as_str) {
                                calls.insert(c.id.as_str(), (c.name.as_str(), p));
                            }
                        }
                    }
                }
                Message::ToolResult(r) if !r.is_error => {
                    let Some(&(name, p)) = calls.get(r.tool_call_id.as_str()) else {
                        continue;
                    };
                    let change = r.details.as_ref().and_then(|d| d.get("fileChange"));
                    match name {
                        "read" => found.push((
                            normalize(&root.join(expand_home(p))),
                            Seen {
                                hash: None,
                                at: Some(r.timestamp),
                                text: None,
                            },
                        )),
                        "edit" | "write" => {
                            let hash = change
                                .and_then(|c| c.get("hashAfter"))
                                .and_then(Value::as_str)
                                .and_then(|h| h.strip_prefix("xxh3:"))
                                .and_then(|h| u64::from_str_radix(h, 16).ok());
                            let path = change
                                .and_then(|c| c.get("path"))
                                .and_then(Value::as_str)
                                .map(PathBuf::from);
                            if let (Some(hash), Some(path)) = (hash, path) {
                                found.push((
                                    path,
                                    Seen {
                                        hash: Some(hash),
                                        at: None,
                                        text: None,
                                    },
                                ));
                            }
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        if let Ok(mut m) = self.seen.lock() {
            for (path, seen) in found {
                m.insert(path, seen);
            }
        }
    }

    /// The lines of `path` that differ between what the model read and `text` now, in words a
    /// model can act on: `Lines changed since your read (line numbers of the current text):`
    /// then each removed line as `-N old` (N: its line in the text read) and each added one as
    /// `+N new`, at most [`CHANGED_LINES_SHOWN`] of them (`… and K more changed lines`).
    /// `None` when the text read was not kept (large, or known from the model's own edit).
    pub fn changes_since_read(&self, path: &Path, text: &str) -> Option<String> {
        let before = self
            .seen
            .lock()
            .ok()
            .and_then(|m| m.get(path).and_then(|s| s.text.clone()))?;
        let diff = similar::TextDiff::from_lines(&*before, text);
        let mut lines = Vec::new();
        let mut more = 0usize;
        for change in diff.iter_all_changes() {
            let (sign, no) = match change.tag() {
                similar::ChangeTag::Equal => continue,
                similar::ChangeTag::Delete => ('-', change.old_index()),
                similar::ChangeTag::Insert => ('+', change.new_index()),
            };
            if lines.len() == CHANGED_LINES_SHOWN {
                more += 1;
                continue;
            }
            let value = change.value();
            let value = value.strip_suffix('\n').unwrap_or(value);
            let value = value.strip_suffix('\r').unwrap_or(value);
            lines.push(format!("{sign}{} {value}", no.map_or(0, |n| n + 1)));
        }
        if lines.is_empty() {
            return None;
        }
        let mut out = String::from(
            "Lines changed since your read (-N: line N of the text you read, +N: line N of the current text):\n",
        );
        out.push_str(&lines.join("\n"));
        if more > 0 {
            out.push_str(&format!("\n… and {more} more changed lines"));
        }
        Some(out)
    }
}

/// State shared by the file tools of one tool set: the read tracker and the folders outside
/// the workspace the user allowed.
#[derive(Debug, Default)]
pub struct ToolState {
    /// What the model last read of each file: the session's, shared by the tool sets of its
    /// runs (each run builds its tools afresh; a read in one prompt and an edit in the next
    /// are one conversation, case EDIT-08).
    pub reads: Arc<ReadTracker>,
    /// Folders outside the workspace that tools may use (absolute; from settings).
    pub allowed_dirs: Vec<PathBuf>,
    /// The session's approval gate: `edit` / `write` ask it with their proposed change
    /// ([`crate::approval::Gate::approve_change`]); `None`: they never ask.
    pub approval: Option<Arc<crate::approval::Gate>>,
    /// The other folders of a multi-root workspace (absolute, canonical; case ED-07), shared
    /// with whoever follows the editor's folder changes
    /// ([`crate::resources::WorkspaceConfig::folders`]): tools accept paths in the union of
    /// the root, these and [`ToolState::allowed_dirs`].
    pub folders: Arc<std::sync::RwLock<Vec<PathBuf>>>,
    /// What `bash` exports about the session (Pi 1.6's `PI_SESSION_ID`, `PI_SESSION_FILE`,
    /// `PI_PROVIDER`, `PI_MODEL`, `PI_REASONING_LEVEL`; [`session_env`]); empty: none.
    pub session_env: Vec<(String, String)>,
    /// Where `bash` runs its commands when not here (an ACP client's terminal); `None`: here.
    pub bash_executor: Option<Arc<dyn BashExecutor>>,
    /// The workspace root's real location, found at the first path this tool set resolves
    /// ([`RootReal`]): not canonicalised again at every call.
    pub root_real: RootReal,
    /// `images.autoResize: false` (Pi 1.6's `read: { autoResizeImages }`): `read` sends an
    /// image at its own size (converted only when providers do not take its type); `false`
    /// (the default): fitted to 2000×2000 / 4.5 MB.
    pub images_unresized: bool,
}

/// A workspace root and its real location ([`crate::platform::paths::canonicalize`]: every
/// symlink followed), found once per tool set (a tool set is built per run configuration,
/// [`crate::harness`]) and kept: resolving a tool's path then walks only the components
/// below the root ([`resolve_path_among_real`]) instead of canonicalising the root and
/// walking every component from `/` at every call (a `readlink` and a `statx` per component
/// of the root, each call; docs/benchmarks.md, "Round 44"). A root that cannot be
/// canonicalised (not there yet) is not kept: it is tried again at the next call.
#[derive(Debug, Default)]
pub struct RootReal(std::sync::OnceLock<(PathBuf, PathBuf)>);

impl RootReal {
    /// The real location of `root`: the one kept when `root` is the root it was found for,
    /// else canonicalised now (and kept when nothing is kept yet); `None` when `root` cannot
    /// be canonicalised.
    pub fn of(&self, root: &Path) -> Option<std::borrow::Cow<'_, Path>> {
        use std::borrow::Cow;
        if let Some((r, real)) = self.0.get() {
            if r == root {
                return Some(Cow::Borrowed(real.as_path()));
            }
        }
        let real = crate::platform::paths::canonicalize(root).ok()?;
        match self.0.get() {
            None => {
                let _ = self.0.set((root.to_path_buf(), real.clone()));
                Some(Cow::Owned(real))
            }
            Some(_) => Some(Cow::Owned(real)),
        }
    }
}

/// Pi 1.6's session variables for `bash` (`resolveSpawnContext`): the session's id, its file
/// (when it has one), the model's provider and id, and the thinking level (`off` included).
pub fn session_env(
    session_id: &str,
    session_file: Option<&Path>,
    model: &pi_ai::Model,
) -> Vec<(String, String)> {
    let mut env = vec![("PI_SESSION_ID".to_string(), session_id.to_string())];
    if let Some(f) = session_file {
        env.push(("PI_SESSION_FILE".into(), f.display().to_string()));
    }
    env.push(("PI_PROVIDER".into(), model.provider.clone()));
    env.push(("PI_MODEL".into(), model.id.clone()));
    env.push((
        "PI_REASONING_LEVEL".into(),
        model
            .thinking_level
            .map(|l| l.as_str())
            .unwrap_or("off")
            .to_string(),
    ));
    env
}

impl ToolState {
    /// Every folder outside the root that tools may use: the workspace's other folders, then
    /// `allowedDirs`.
    pub fn allowed(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self.folders.read().map(|f| f.clone()).unwrap_or_default();
        out.extend(self.allowed_dirs.iter().cloned());
        out
    }

    /// [`resolve_path_in`] for this tool set: `input` resolved against `root`, accepted inside
    /// `root`, the workspace's other folders or `allowedDirs`; a refusal names every workspace
    /// folder (case ED-07: a multi-root workspace's error names them all, not the first).
    /// The root's real location is found once ([`ToolState::root_real`]).
    pub fn resolve(&self, root: &Path, input: &str) -> Result<PathBuf, ToolError> {
        let folders = self.folders.read();
        let folders: &[PathBuf] = folders.as_deref().map_or(&[], |f| f.as_slice());
        let root_real = self.root_real.of(root);
        resolve_path_among_real(
            root,
            root_real.as_deref(),
            folders,
            &self.allowed_dirs,
            input,
        )
    }

    /// State for a trusted workspace: `allowedDirs` from its merged settings
    /// ([`crate::settings`]: the workspace's `.pi/settings.json` over the agent dir's; paths
    /// relative to the file's folder, `~` expanded). Servers pass the loaded settings'
    /// `allowed_dirs` instead, which respects project trust.
    pub fn for_workspace(root: &Path) -> Self {
        let files =
            crate::settings::SettingsFiles::new(pi_ai::models::agent_dir().as_deref(), root, true);
        ToolState {
            reads: Arc::default(),
            allowed_dirs: crate::settings::Settings::load(&files).allowed_dirs,
            approval: None,
            folders: Arc::default(),
            session_env: Vec::new(),
            bash_executor: None,
            root_real: RootReal::default(),
            images_unresized: false,
        }
    }
}

/// The default tool set over `fs`; `before_bash` runs before every command (the editor uses it to
/// bring the disk up to date with buffers the agent edited). Creates a fresh [`ToolState`] from
/// the workspace settings.
pub fn default_tools(fs: Arc<dyn Fs>, before_bash: Option<BeforeBash>) -> Vec<Arc<dyn Tool>> {
    let state = Arc::new(ToolState::for_workspace(fs.root()));
    tools_with_state(fs, before_bash, state)
}

/// [`default_tools`] for session `session_id` whose `bash` asks `approver` before running a
/// command outside the sandbox ([`crate::sandbox`]; the policy comes from the workspace
/// settings, the temp folder is the session's: [`crate::sandbox::Sandbox::for_session`]).
pub fn default_tools_with_approver(
    fs: Arc<dyn Fs>,
    before_bash: Option<BeforeBash>,
    approver: Arc<dyn crate::sandbox::Approver>,
    session_id: &str,
) -> Vec<Arc<dyn Tool>> {
    let root = fs.root().to_path_buf();
    let sandbox = crate::sandbox::Sandbox::for_session(
        &root,
        &crate::sandbox::SandboxSettings::for_workspace(&root),
        session_id,
    );
    let bash = BashTool::with_sandbox(root.clone(), before_bash, sandbox, Some(approver));
    let state = Arc::new(ToolState::for_workspace(&root));
    tool_set(fs, Arc::new(bash), state)
}

/// The default tool set sharing `state` (see [`default_tools`]).
/// The seven tools with `state` (allowed folders, read tracking) and a `bash` confined by
/// `sandbox` settings; with `approver`, `bash` asks before running a command outside the
/// sandbox. `session_id` names the session's temp folder (empty: one for this tool set).
pub fn tools_for_session(
    fs: Arc<dyn Fs>,
    before_bash: Option<BeforeBash>,
    state: Arc<ToolState>,
    sandbox: &crate::sandbox::SandboxSettings,
    approver: Option<Arc<dyn crate::sandbox::Approver>>,
    session_id: &str,
) -> Vec<Arc<dyn Tool>> {
    let root = fs.root().to_path_buf();
    let sandbox = if session_id.is_empty() {
        crate::sandbox::Sandbox::new(&root, sandbox)
    } else {
        crate::sandbox::Sandbox::for_session(&root, sandbox, session_id)
    }
    .with_folders(state.folders.clone());
    let bash = BashTool::with_sandbox(root, before_bash, sandbox, approver)
        .with_session_env(state.session_env.clone())
        .with_executor(state.bash_executor.clone());
    tool_set(fs, Arc::new(bash), state)
}

pub fn tools_with_state(
    fs: Arc<dyn Fs>,
    before_bash: Option<BeforeBash>,
    state: Arc<ToolState>,
) -> Vec<Arc<dyn Tool>> {
    let bash = Arc::new(BashTool::new(fs.root().to_path_buf(), before_bash));
    tool_set(fs, bash, state)
}

fn tool_set(fs: Arc<dyn Fs>, bash: Arc<BashTool>, state: Arc<ToolState>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadTool::new(fs.clone(), state.clone())),
        bash,
        Arc::new(EditTool::new(fs.clone(), state.clone())),
        Arc::new(WriteTool::new(fs.clone(), state.clone())),
        Arc::new(GrepTool::new(fs.clone(), state.clone())),
        Arc::new(FindTool::new(fs.root().to_path_buf(), state.clone())),
        Arc::new(LsTool::new(fs, state)),
    ]
}

/// Parses tool arguments into `T`; failures read like Pi's validation errors.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args.clone()).map_err(|e| {
        ToolError::new(format!(
            "Validation failed for tool \"{tool}\":\n  - {e}\n\nReceived arguments:\n{}",
            serde_json::to_string_pretty(&args).unwrap_or_default()
        ))
    })
}

/// Removes `.` and resolves `..` lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `~` and `~/…` with the home folder; a leading `@` dropped (Pi's `expandPath`).
fn expand_home(input: &str) -> PathBuf {
    let input = input.strip_prefix('@').unwrap_or(input);
    if input == "~" || input.starts_with("~/") {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        home.join(input.trim_start_matches('~').trim_start_matches('/'))
    } else {
        PathBuf::from(input)
    }
}

/// Resolves a tool's `path` argument: `~` expanded, relative to `root`, symlinks of existing
/// ancestors followed, and refused when the result lies outside the workspace.
pub fn resolve_path(root: &Path, input: &str) -> Result<PathBuf, ToolError> {
    resolve_path_in(root, &[], input)
}

/// Most symlinks followed in one path before giving up (Linux's `MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;

/// Where `path` (absolute, lexically normalised) really leads, as the kernel would resolve it
/// when opening or creating it: every existing component's symlink is followed, dangling
/// symlinks included (their target is where a write would land), and a `..` inside a link's
/// target applies to the resolved folder. Components that do not exist are kept as written. `None` on a symlink
/// loop.
fn real_path(path: &Path) -> Option<PathBuf> {
    real_path_from(PathBuf::from("/"), path)
}

/// [`real_path`] of `start` joined with `rest`, where `start` is already a real path (every
/// symlink of it followed: the walk does not look at its components again).
fn real_path_from(start: PathBuf, rest: &Path) -> Option<PathBuf> {
    let mut pending: Vec<std::ffi::OsString> = Vec::new();
    let push_all = |p: &Path, pending: &mut Vec<std::ffi::OsString>| {
        // Stored reversed: the next component is at the end.
        let at = pending.len();
        pending.extend(p.components().filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        }));
        pending[at..].reverse();
    };
    push_all(rest, &mut pending);
    let mut cur = start;
    let mut hops = 0;
    while let Some(c) = pending.pop() {
        if c == ".." {
            cur.pop();
            continue;
        }
        cur.push(&c);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINKS {
                    return None;
                }
                let target = std::fs::read_link(&cur).ok()?;
                cur.pop();
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push_all(&target, &mut pending);
            }
            _ => {}
        }
    }
    Some(cur)
}

/// [`resolve_path`], also accepting paths inside one of `allowed_dirs` (absolute, canonical
/// folders the user allowed in settings).
///
/// The rule (docs/security.md): the path is joined to `root` and `.` / `..` are applied
/// lexically; the result is what the tool opens. That path is accepted only when its real
/// location ([`real_path`]: every symlink followed, also dangling ones and chains, `..` after
/// a symlink applied to its target) lies inside the real workspace root or an allowed folder.
/// Only `/` separates components: look-alikes such as U+2215 `∕` or U+FF0F `／` are ordinary
/// file name characters.
pub fn resolve_path_in(
    root: &Path,
    allowed_dirs: &[PathBuf],
    input: &str,
) -> Result<PathBuf, ToolError> {
    resolve_path_among(root, &[], allowed_dirs, input)
}

/// [`resolve_path_in`] in a multi-root workspace: `folders` are the workspace's folders other
/// than `root` (absolute, canonical), accepted like `allowed_dirs`; the refusal names `root`
/// and every one of them ("outside the workspace folders A, B and C").
pub fn resolve_path_among(
    root: &Path,
    folders: &[PathBuf],
    allowed_dirs: &[PathBuf],
    input: &str,
) -> Result<PathBuf, ToolError> {
    let root_real = crate::platform::paths::canonicalize(root).ok();
    resolve_path_among_real(root, root_real.as_deref(), folders, allowed_dirs, input)
}

/// [`resolve_path_among`] with the root's real location given (`root_real`: `root`
/// canonicalised, [`RootReal`]; `None` when it could not be, then the root lexically
/// normalised stands for it). A path under `root` as written (after `.` / `..` are applied
/// to the text) is walked from `root_real` over its components below the root only: the
/// same real path the walk from `/` finds while the root leads where it led when
/// canonicalised. Any other path is walked from `/`.
pub fn resolve_path_among_real(
    root: &Path,
    root_real: Option<&Path>,
    folders: &[PathBuf],
    allowed_dirs: &[PathBuf],
    input: &str,
) -> Result<PathBuf, ToolError> {
    let expanded = expand_home(input);
    let joined = normalize(&root.join(expanded));
    // Not canonicalised (the root is not there): the root lexically normalised stands for it
    // in the comparison, and every path is walked from `/`.
    let known = root_real.is_some_and(Path::is_absolute);
    let normalized_root;
    let root_real = match root_real {
        Some(r) => r,
        None => {
            normalized_root = normalize(root);
            &normalized_root
        }
    };
    // Compared as the OS names files: without `\\?\`, drive letters and (Windows, macOS) case
    // folded (`platform::paths`).
    let inside = |real: &Path| {
        use crate::platform::paths::starts_with;
        starts_with(real, root_real)
            || folders.iter().any(|d| starts_with(real, d))
            || allowed_dirs.iter().any(|d| starts_with(real, d))
    };
    // Below a root that is absolute and written without `.` or `..` (the walk of its own
    // components is then exactly what canonicalising it did); Unix paths only (elsewhere the
    // walk from `/` stays as it was).
    let rest = joined.strip_prefix(root).ok();
    let from_root = cfg!(unix)
        && known
        && rest.is_some()
        && root.is_absolute()
        && root
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let real = match rest.filter(|_| from_root) {
        Some(rest) => real_path_from(root_real.to_path_buf(), rest),
        None => real_path(&joined),
    };
    match real {
        Some(real) if inside(&real) => {
            // Keep the caller's spelling under the root so editor URIs match what it opened.
            Ok(if rest.is_some() { joined } else { real })
        }
        Some(_) if folders.is_empty() => Err(ToolError::new(format!(
            "Path {input} is outside the workspace {}; only files inside it (or in a folder listed in allowedDirs of .pi/settings.json) can be used.",
            root.display()
        ))),
        Some(_) => {
            let mut names: Vec<String> = std::iter::once(root)
                .chain(folders.iter().map(PathBuf::as_path))
                .map(|p| p.display().to_string())
                .collect();
            let last = names.pop().unwrap_or_default();
            Err(ToolError::new(format!(
                "Path {input} is outside the workspace folders {} and {last}; only files inside them (or in a folder listed in allowedDirs of .pi/settings.json) can be used.",
                names.join(", ")
            )))
        }
        None => Err(ToolError::new(format!(
            "Path {input} cannot be resolved: too many levels of symbolic links."
        ))),
    }
}

/// Pi's `truncateHead` without a line limit: whole lines of `text` within [`MAX_BYTES`], and
/// whether anything was cut.
pub(crate) fn head_bytes(text: &str) -> (String, bool) {
    if text.len() <= MAX_BYTES {
        return (text.to_string(), false);
    }
    let mut out = String::new();
    for (i, line) in text.split('\n').enumerate() {
        let add = line.len() + usize::from(i > 0);
        if out.len() + add > MAX_BYTES {
            break;
        }
        if i > 0 {
            out.push('\n');
        }
        out.push_str(line);
    }
    (out, true)
}

/// The walk `grep` and `find` share: hidden files included, `.gitignore` / `.ignore` /
/// `.git/info/exclude` respected even outside a git repository, `.git` itself skipped, entries
/// in name order; `glob` (gitignore-style, as `rg --glob`) filters files when given.
pub(crate) fn walker(path: &Path, glob: Option<&str>) -> Result<ignore::WalkBuilder, ToolError> {
    let mut b = ignore::WalkBuilder::new(path);
    b.hidden(false)
        .require_git(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|e| e.file_name() != ".git");
    if let Some(g) = glob {
        let mut ov = ignore::overrides::OverrideBuilder::new(path);
        ov.add(g)
            .map_err(|e| ToolError::new(format!("Invalid glob {g}: {e}")))?;
        b.overrides(
            ov.build()
                .map_err(|e| ToolError::new(format!("Invalid glob {g}: {e}")))?,
        );
    }
    Ok(b)
}

/// The path as the model should see it: relative to `root` when inside it.
pub(crate) fn display_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

/// A search tool's result as Pi writes it: `text`, then the notices joined in one bracketed
/// line, and `details` only when something was limited or cut.
pub(crate) fn search_output(
    mut text: String,
    notices: &[String],
    details: serde_json::Map<String, Value>,
) -> crate::agent::ToolOutput {
    if !notices.is_empty() {
        text.push_str(&format!("\n\n[{}]", notices.join(". ")));
    }
    crate::agent::ToolOutput {
        content: vec![pi_ai::ContentBlock::text(text)],
        details: (!details.is_empty()).then_some(Value::Object(details)),
        terminate: false,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool's `name()` (what selections and plan mode compare) is its spec's name, for each
    /// built-in tool (they answer it without building the spec).
    #[test]
    fn each_tool_names_itself_as_its_spec_does() {
        let tmp = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(crate::fs::DiskFs::new(tmp.path().to_path_buf()));
        let tools = default_tools(fs, None);
        let names: Vec<(String, String)> = tools
            .iter()
            .map(|t| (t.name().into_owned(), t.spec().name))
            .collect();
        let expected: Vec<(String, String)> =
            ["read", "bash", "edit", "write", "grep", "find", "ls"]
                .iter()
                .map(|n| (n.to_string(), n.to_string()))
                .collect();
        assert_eq!(names, expected);
    }

    #[cfg(unix)] // a symlink: a Unix API
    #[test]
    fn paths_are_confined() {
        let root_tmp = tempfile::tempdir().unwrap();
        let root = root_tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        assert_eq!(
            resolve_path(&root, "sub/../a.txt").unwrap(),
            root.join("a.txt")
        );
        assert_eq!(
            resolve_path(&root, "new/dir/f.txt").unwrap(),
            root.join("new/dir/f.txt")
        );
        assert!(resolve_path(&root, "../outside.txt").is_err());
        assert!(resolve_path(&root, "/etc/passwd").is_err());
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        assert!(resolve_path(&root, "link/passwd").is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A tool set's resolution, which finds the root's real location once and walks only
    /// below it, answers every path as the walk from `/` does (accepted: the same path;
    /// refused: the same words), for a plain root and a symlinked one: `..` in and out, links
    /// inside and out, chains, dangling ones, a loop, absolute paths, the root itself; and it
    /// keeps nothing for a root that is not there yet.
    #[cfg(unix)] // symlinks: a Unix API
    #[test]
    fn a_kept_root_resolves_every_path_as_the_walk_from_the_top_does() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("src/deep")).unwrap();
        std::fs::create_dir_all(base.join("out")).unwrap();
        std::fs::write(ws.join("src/a.txt"), "a").unwrap();
        std::fs::write(base.join("out/s.txt"), "s").unwrap();
        symlink(base.join("out"), ws.join("out-dir")).unwrap();
        symlink("src/a.txt", ws.join("in-link")).unwrap();
        symlink("../in-link", ws.join("src/chain")).unwrap();
        symlink("../../out/new.txt", ws.join("src/dangling")).unwrap();
        symlink("../ws/src", ws.join("src/deep/back")).unwrap();
        symlink("loop-b", ws.join("loop-a")).unwrap();
        symlink("loop-a", ws.join("loop-b")).unwrap();
        symlink(&ws, base.join("ws-link")).unwrap();
        let inputs = [
            ".",
            "src/a.txt",
            "src/../src/a.txt",
            "in-link",
            "src/chain",
            "src/dangling",
            "src/deep/back/a.txt",
            "src/deep/back/../../out/s.txt",
            "out-dir/s.txt",
            "out-dir/../ws/src/a.txt",
            "loop-a",
            "new/dir/f.txt",
            "../out/s.txt",
            "../ws/src/a.txt",
            "../ws-link/src/a.txt",
            "/etc/passwd",
        ];
        let shown = |r: Result<PathBuf, ToolError>| r.map_err(|e| e.message);
        for root in [ws.clone(), base.join("ws-link")] {
            let state = ToolState::default();
            let mut all: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
            all.push(ws.join("src/a.txt").display().to_string());
            all.push(base.join("ws-link/in-link").display().to_string());
            for input in &all {
                assert_eq!(
                    shown(state.resolve(&root, input)),
                    shown(resolve_path_among(&root, &[], &[], input)),
                    "{} {input}",
                    root.display()
                );
            }
            assert_eq!(
                state.root_real.of(&root).as_deref(),
                Some(ws.as_path()),
                "{}",
                root.display()
            );
        }
        // A root not there yet: nothing kept, found once it is.
        let later = base.join("later");
        let state = ToolState::default();
        assert_eq!(
            shown(state.resolve(&later, "x.txt")),
            shown(resolve_path_among(&later, &[], &[], "x.txt"))
        );
        assert!(state.root_real.0.get().is_none());
        std::fs::create_dir_all(&later).unwrap();
        assert_eq!(state.resolve(&later, "x.txt").unwrap(), later.join("x.txt"));
        assert_eq!(
            state.root_real.0.get(),
            Some(&(later.clone(), later.clone()))
        );
    }
}

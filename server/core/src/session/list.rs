//! Listing the sessions of a folder without parsing every file whole: the header line, a scan
//! of the other lines that parses only the first user message, `session_info` entries and
//! each message's role and times, and the file's modification time.
//!
//! **Order.** As Pi 1.6's session list (`SessionManager.list`, the `--resume` picker:
//! `buildSessionInfo`'s `modified`, `core/session-manager.js`), newest first by the latest
//! user or assistant message's time (its `timestamp` when a number, else its entry's), else
//! the header's `timestamp`, else the file's modification time; equal times by file name,
//! the later name first (Pi reads the folder in that order and sorts stably). A file's
//! modification time alone orders `--continue` (Pi's `findMostRecentSession`):
//! [`SessionSummary::modified_ms`].
//!
//! **Whose a session is.** Pi names a workspace's sessions folder after its cwd with `/` → `-`
//! ([`super::pi_sessions_dir`]), so `/a/b-c` and `/a/b/c` share one folder, and a configured
//! `sessionDir` may hold several projects' files. A file belongs to a workspace when its
//! header's `cwd` is the workspace's folder, compared as paths after resolving symlinks
//! (`/ws/` = `/ws` = a link to it); a file inside the workspace whose header has no `cwd`, or
//! names a folder that no longer exists (the project was moved), is the workspace's too.
//! [`list_workspace_sessions`] lists only the workspace's files; another project's file is
//! opened only by its path, its [`Ownership::Other`] cwd said in the reply.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Deserialize as _;
use serde_json::Value;

use super::convert::convert_message;

/// One line of a session list.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    pub path: PathBuf,
    pub id: String,
    pub cwd: Option<String>,
    pub parent_session: Option<String>,
    /// From the last `session_info` entry.
    pub name: Option<String>,
    /// Text of the first user message (at most 200 chars).
    pub first_prompt: Option<String>,
    /// Entries after the header.
    pub entry_count: usize,
    /// `message` entries (every role, stored system messages included): the count Pi 1.6's
    /// session list (`SessionManager.list`, its `--resume` picker) gives as `messageCount`.
    pub message_count: usize,
    /// When the session was last active, milliseconds since the epoch: Pi 1.6's `modified`
    /// (module docs, "Order") — [`SessionSummary::latest_message_ms`] when above 0, else
    /// [`SessionSummary::created_ms`], else [`SessionSummary::modified_ms`]. Lists are
    /// sorted by it, newest first.
    pub last_activity_ms: i64,
    /// The latest time of a user or assistant message (Pi 1.6's `getMessageActivityTime`:
    /// the message's numeric `timestamp`, else its entry's ISO `timestamp`), at least 0;
    /// `None` without one.
    pub latest_message_ms: Option<i64>,
    /// The header's `timestamp` (Pi's `created`), when it is a time.
    pub created_ms: Option<i64>,
    /// The file's modification time, milliseconds since the epoch (what `--continue`
    /// orders by, as Pi 1.6's `findMostRecentSession`).
    pub modified_ms: i64,
}

impl SessionSummary {
    /// Pi 1.6's `modified` for this session with the file's modification time `mtime_ms`
    /// ([`SessionSummary::last_activity_ms`]).
    fn activity(&self, mtime_ms: i64) -> i64 {
        match (self.latest_message_ms, self.created_ms) {
            (Some(t), _) if t > 0 => t,
            (_, Some(c)) => c,
            _ => mtime_ms,
        }
    }
}

/// An ISO time as JavaScript's `new Date(text).getTime()` reads Pi's (`None`: not a time).
fn iso_millis(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|d| d.timestamp_millis())
}

/// What listing reads of a `message` entry: the entry's time and the message's role, time
/// and whether it has `content` (the content itself skipped, not kept).
#[derive(serde::Deserialize)]
struct MessageEntry {
    #[serde(default)]
    timestamp: Value,
    #[serde(default)]
    message: Option<MessageHead>,
}

/// See [`MessageEntry`].
#[derive(serde::Deserialize)]
struct MessageHead {
    #[serde(default)]
    role: Value,
    #[serde(default)]
    timestamp: Value,
    #[serde(default, deserialize_with = "present")]
    content: bool,
}

/// `true` for a key that is there, whatever its value (JavaScript's `"content" in message`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// Pi 1.6's `getMessageActivityTime` of a `message` entry's line: a user or assistant
/// message with content → its numeric `timestamp` (whole milliseconds), else its entry's ISO
/// `timestamp`; anything else → `None`.
fn message_activity(line: &[u8]) -> Option<i64> {
    // A line without either role's string is not one (tool results' lines are not parsed).
    let roles = [&b"\"user\""[..], &b"\"assistant\""[..]];
    if !roles
        .iter()
        .any(|r| memchr::memmem::find(line, r).is_some())
    {
        return None;
    }
    let e: MessageEntry = serde_json::from_slice(line).ok()?;
    let m = e.message?;
    if !m.content || !matches!(m.role.as_str(), Some("user" | "assistant")) {
        return None;
    }
    match m.timestamp.as_f64() {
        Some(t) => Some(t as i64),
        None => e.timestamp.as_str().and_then(iso_millis),
    }
}

/// What listing learned of one session file, kept by a [`ListCache`] so that the next list
/// reads only what was appended since (session files are append-only).
#[derive(Debug, Clone)]
struct Scanned {
    /// The summary of the whole lines up to `end`.
    summary: SessionSummary,
    /// Bytes scanned: the end of the last line that ended with `\n`.
    end: u64,
    /// The file's length and modification time when it was scanned.
    len: u64,
    modified: std::time::SystemTime,
    /// The last bytes before `end` (at most [`TAIL_CHECK`]): still there, the file was only
    /// appended to since.
    tail: Vec<u8>,
}

/// How many bytes before a cached scan's end must be unchanged for the scan to go on from
/// there ([`Scanned::tail`]).
const TAIL_CHECK: u64 = 64;

/// The summaries of the session files listed before, by path (case SESS-05: listing reads a
/// file's header and what was appended since the last list, not every byte each time). Files
/// that are gone are forgotten at the next list of their folder. One per workspace registry
/// ([`crate::harness::Sessions`]); a one-shot list uses a fresh one.
#[derive(Debug, Default)]
pub struct ListCache {
    files: parking_lot::Mutex<std::collections::HashMap<PathBuf, Scanned>>,
}

/// Applies one line (without its `\n`) of a session file after the header to `s`: counts it,
/// and reads the first user message's text and the latest `session_info` name from it.
fn apply_line(s: &mut SessionSummary, line: &[u8]) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    s.entry_count += 1;
    // Pi and pi-lsp write `type` first; another key order is parsed to be sure.
    if line.starts_with(br#"{"type":"message","#)
        || (memchr::memmem::find(line, br#""message""#).is_some()
            && serde_json::from_slice::<Value>(line).is_ok_and(|v| v["type"] == "message"))
    {
        s.message_count += 1;
        if let Some(t) = message_activity(line) {
            // Pi: `Math.max(lastActivityTime ?? 0, activityTime)`.
            s.latest_message_ms = Some(s.latest_message_ms.unwrap_or(0).max(t));
        }
    }
    let is_info = memchr::memmem::find(line, b"\"session_info\"").is_some();
    let wants_prompt =
        s.first_prompt.is_none() && memchr::memmem::find(line, b"\"user\"").is_some();
    if !is_info && !wants_prompt {
        return;
    }
    let Ok(v) = serde_json::from_slice::<Value>(line) else {
        return;
    };
    if v["type"] == "session_info" {
        // Pi 1.6's `buildSessionInfo`: the latest entry's name, trimmed; an empty or missing
        // one clears it.
        s.name = v["name"]
            .as_str()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string);
    } else if v["type"] == "message" && v["message"]["role"] == "user" {
        if let Some(pi_ai::Message::User(u)) = convert_message(&v["message"]) {
            s.first_prompt = Some(u.content.to_text().chars().take(200).collect());
        }
    }
}

/// The summary of the session file at `path` (`None`: not a session file, or unreadable),
/// going on from `before` (this file's last scan) when the file was only appended to since,
/// and the scan to keep for the next list. One line at a time in one reused buffer: memory is
/// the longest line's, whatever the file's size.
fn summarize(path: &Path, before: Option<&Scanned>) -> Option<(SessionSummary, Scanned)> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    let (len, modified) = (meta.len(), meta.modified().ok()?);
    let mtime = chrono::DateTime::<chrono::Utc>::from(modified).timestamp_millis();
    if let Some(b) = before.filter(|b| b.len == len && b.modified == modified) {
        let mut s = b.summary.clone();
        s.modified_ms = mtime;
        s.last_activity_ms = s.activity(mtime);
        return Some((s, b.clone()));
    }
    // Appended to since (the bytes before the last scan's end are as they were): scanned on
    // from there; else (new, rewritten, cut) from the start.
    let appended = before.filter(|b| {
        let from = b.end - b.tail.len() as u64;
        let mut got = vec![0; b.tail.len()];
        b.end > 0
            && len >= b.end
            && crate::platform::fs::read_exact_at(&file, &mut got, from).is_ok()
            && got == b.tail
    });
    let mut line = Vec::new();
    let (mut s, mut end) = match appended {
        Some(b) => {
            file.seek(SeekFrom::Start(b.end)).ok()?;
            (b.summary.clone(), b.end)
        }
        None => {
            let mut reader = BufReader::new(&mut file);
            reader.read_until(b'\n', &mut line).ok()?;
            let header: Value = serde_json::from_slice(&line).ok()?;
            if header["type"] != "session" {
                return None;
            }
            // A header without its `\n` is the whole file: scanned from the start next time.
            let end = if line.ends_with(b"\n") {
                line.len() as u64
            } else {
                0
            };
            drop(reader);
            file.seek(SeekFrom::Start(line.len() as u64)).ok()?;
            let s = SessionSummary {
                path: path.to_path_buf(),
                id: header["id"].as_str()?.to_string(),
                cwd: header["cwd"].as_str().map(str::to_string),
                parent_session: header["parentSession"].as_str().map(str::to_string),
                name: None,
                first_prompt: None,
                entry_count: 0,
                message_count: 0,
                last_activity_ms: mtime,
                latest_message_ms: None,
                created_ms: header["timestamp"].as_str().and_then(iso_millis),
                modified_ms: mtime,
            };
            (s, end)
        }
    };
    let mut reader = BufReader::with_capacity(256 << 10, file);
    let mut torn = None;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(n) if line.ends_with(b"\n") => {
                apply_line(&mut s, &line[..n - 1]);
                end += n as u64;
            }
            // A last line without its `\n` (torn, or being written): counted now, scanned
            // again next time.
            Ok(_) => {
                let mut t = s.clone();
                apply_line(&mut t, &line);
                torn = Some(t);
                break;
            }
        }
    }
    let tail_from = end.saturating_sub(TAIL_CHECK);
    let mut tail = vec![0; (end - tail_from) as usize];
    crate::platform::fs::read_exact_at(reader.get_ref(), &mut tail, tail_from).ok()?;
    let mut out = torn.unwrap_or_else(|| s.clone());
    out.modified_ms = mtime;
    out.last_activity_ms = out.activity(mtime);
    let scanned = Scanned {
        summary: s,
        end,
        len,
        modified,
        tail,
    };
    Some((out, scanned))
}

/// The list's order (module docs, "Order"): the latest activity first; equal ones by file
/// name, the later first, as Pi 1.6 lists a folder; then by path.
fn newest_first(a: &SessionSummary, b: &SessionSummary) -> std::cmp::Ordering {
    b.last_activity_ms
        .cmp(&a.last_activity_ms)
        .then_with(|| b.path.file_name().cmp(&a.path.file_name()))
        .then_with(|| b.path.cmp(&a.path))
}

/// Whose a session file is, for the workspace at `root` (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// The workspace's own.
    Workspace,
    /// Another folder's: the header's `cwd` as written.
    Other(String),
    /// A file outside the workspace whose header names no `cwd`: nobody's known.
    Unknown,
}

/// The path `p` with symlinks resolved; a path that does not exist (or cannot be resolved) is
/// compared by its components (so a trailing `/` or `.` does not matter).
fn resolved(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.components().collect())
}

/// Whose the session file at `file`, with header `cwd`, is for the workspace at `root`
/// (module docs).
pub fn ownership(file: &Path, cwd: Option<&str>, root: &Path) -> Ownership {
    let root = resolved(root);
    let inside = file
        .parent()
        .map(resolved)
        .is_some_and(|d| d.starts_with(&root));
    match cwd.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) => {
            let path = Path::new(c);
            if resolved(path) == root || (inside && !path.exists()) {
                Ownership::Workspace
            } else {
                Ownership::Other(c.to_string())
            }
        }
        None if inside => Ownership::Workspace,
        None => Ownership::Unknown,
    }
}

/// The `cwd` of the session header of the file at `path` (`Ok(None)`: the header has none);
/// an error when the file cannot be read or does not start with a session header.
pub fn header_cwd(path: &Path) -> std::io::Result<Option<String>> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let mut line = Vec::new();
    BufReader::new(f.take(64 * 1024)).read_until(b'\n', &mut line)?;
    let v: Value = serde_json::from_slice(&line).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: no session header: {e}", path.display()),
        )
    })?;
    if v["type"] != "session" {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: no session header", path.display()),
        ));
    }
    Ok(v["cwd"].as_str().map(str::to_string))
}

/// Whose the session file at `path` is for the workspace at `root` ([`ownership`] of its
/// header's `cwd`); `Unknown` when its header cannot be read.
pub fn file_ownership(path: &Path, root: &Path) -> Ownership {
    match header_cwd(path) {
        Ok(cwd) => ownership(path, cwd.as_deref(), root),
        Err(_) => Ownership::Unknown,
    }
}

/// The sessions of the workspace at `root` found in `dirs` (each listed once, however many
/// names the folders have), newest activity first: only the files that are the workspace's
/// ([`ownership`]); another project's sharing a folder are left out. `cache`: what earlier
/// lists learned ([`ListCache`]; a file appended to since is read from where they stopped).
pub fn list_workspace_sessions(
    dirs: &[PathBuf],
    root: &Path,
    cache: &ListCache,
) -> Vec<SessionSummary> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut out = Vec::new();
    for d in dirs {
        let r = resolved(d);
        if seen.contains(&r) {
            continue;
        }
        seen.push(r);
        out.extend(
            list_sessions_cached(d, cache)
                .into_iter()
                .filter(|s| ownership(&s.path, s.cwd.as_deref(), root) == Ownership::Workspace),
        );
    }
    out.sort_by(newest_first);
    out
}

/// Pi 1.6's last resort for a `--session <id>` argument (`resolveSessionPath`'s global match
/// over `SessionManager.listAll`): among the sessions of every project's folder in Pi's
/// sessions folder `root` (`<agent dir>/sessions/*/`), the one whose id is `id`, else the
/// first in the list's order ([`SessionSummary::last_activity_ms`]) whose id starts with it.
pub fn find_in_all_projects(root: &Path, id: &str) -> Option<SessionSummary> {
    let mut all: Vec<SessionSummary> = std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|d| d.is_dir())
        .flat_map(|d| list_sessions(&d))
        .collect();
    all.sort_by(newest_first);
    let exact = all.iter().position(|s| s.id == id);
    let i = exact.or_else(|| all.iter().position(|s| s.id.starts_with(id)))?;
    Some(all.swap_remove(i))
}

/// The sessions in `dir` (files `*.jsonl` with a session header), newest activity first,
/// whoever's they are (see [`list_workspace_sessions`]). Unreadable files are skipped. Every
/// file is read whole: a list made again and again keeps a [`ListCache`]
/// ([`list_sessions_cached`]).
pub fn list_sessions(dir: &Path) -> Vec<SessionSummary> {
    list_sessions_cached(dir, &ListCache::default())
}

/// [`list_sessions`] with what earlier lists learned (`cache`): a file unchanged since is not
/// read again, a file appended to is read from where the last list stopped, any other from
/// its start; files are read on a few threads at once (at most 4, one line at a time each).
/// The cache forgets the files of `dir` that are gone.
pub fn list_sessions_cached(dir: &Path, cache: &ListCache) -> Vec<SessionSummary> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let paths: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    let before: Vec<Option<Scanned>> = {
        let files = cache.files.lock();
        paths.iter().map(|p| files.get(p).cloned()).collect()
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(paths.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let scans: Vec<(usize, SessionSummary, Scanned)> = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                sc.spawn(|| {
                    let mut got = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(p) = paths.get(i) else { break };
                        if let Some((s, scanned)) = summarize(p, before[i].as_ref()) {
                            got.push((i, s, scanned));
                        }
                    }
                    got
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    let mut out = Vec::with_capacity(scans.len());
    {
        let mut files = cache.files.lock();
        files.retain(|p, _| p.parent() != Some(dir) || paths.contains(p));
        for (i, s, scanned) in scans {
            files.insert(paths[i].clone(), scanned);
            out.push(s);
        }
    }
    out.sort_by(newest_first);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list kept in a [`ListCache`] gives what a fresh list gives after every kind of change
    /// (lines appended, a name set, a torn last line then completed, a file cut and rewritten,
    /// a file removed), and reads an appended file from where it stopped: a byte changed in
    /// place before that point (no session file is written so) is not read again.
    #[test]
    fn a_cached_list_reads_what_was_appended_and_equals_a_fresh_list() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("s.jsonl");
        let header = r#"{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/ws"}"#;
        let user = |id: &str, text: &str| {
            format!(
                r#"{{"type":"message","id":"{id}","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"{text}","timestamp":1}}}}"#
            )
        };
        let info = |name: &str| {
            format!(
                r#"{{"type":"session_info","id":"i{name}","parentId":null,"timestamp":"2026-01-01T00:00:02.000Z","name":"{name}"}}"#
            )
        };
        let cache = ListCache::default();
        // A header alone, without its `\n`: a session of no entries, listed again from the start.
        std::fs::write(&path, header).unwrap();
        let alone = list_sessions_cached(dir, &cache);
        assert_eq!(alone, list_sessions(dir));
        assert_eq!((alone[0].entry_count, alone[0].message_count), (0, 0));
        let write = |lines: &[String], tail: &str| {
            let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            text.push_str(tail);
            std::fs::write(&path, text).unwrap();
        };
        let check = |what: &str, count: (usize, usize), name: Option<&str>, prompt: &str| {
            let cached = list_sessions_cached(dir, &cache);
            assert_eq!(cached, list_sessions(dir), "{what}");
            let s = &cached[0];
            assert_eq!(
                (
                    s.entry_count,
                    s.message_count,
                    s.name.as_deref(),
                    s.first_prompt.as_deref()
                ),
                (count.0, count.1, name, Some(prompt)),
                "{what}"
            );
        };
        let mut lines = vec![header.to_string(), user("u1", "hello")];
        write(&lines, "");
        check("new", (1, 1), None, "hello");
        check("unchanged", (1, 1), None, "hello");
        lines.push(info("first"));
        lines.push(user("u2", "again"));
        write(&lines, "");
        check("appended", (3, 2), Some("first"), "hello");
        // Torn: counted as a fresh list counts it, then read again once whole.
        write(&lines, &info("second")[..30]);
        check("torn last line", (4, 2), Some("first"), "hello");
        lines.push(info("second"));
        write(&lines, "");
        check("completed", (4, 2), Some("second"), "hello");
        // Pi 1.6: the latest name, trimmed; an empty one clears it.
        lines.push(info("  spaced  "));
        write(&lines, "");
        check("trimmed name", (5, 2), Some("spaced"), "hello");
        lines.push(info(""));
        write(&lines, "");
        check("name cleared", (6, 2), None, "hello");
        // Changed in place before the point the cache reached, and appended to: not read
        // again (a fresh list sees the change).
        lines[1] = user("u1", "jello");
        lines.push(user("u3", "third"));
        write(&lines, "");
        let cached = list_sessions_cached(dir, &cache);
        assert_eq!(cached[0].first_prompt.as_deref(), Some("hello"));
        assert_eq!((cached[0].entry_count, cached[0].message_count), (7, 3));
        assert_eq!(list_sessions(dir)[0].first_prompt.as_deref(), Some("jello"));
        // Cut and rewritten: read from the start.
        let short = vec![header.to_string(), user("u9", "other")];
        write(&short, "");
        check("rewritten shorter", (1, 1), None, "other");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(list_sessions_cached(dir, &cache), Vec::new());
        assert!(cache.files.lock().is_empty());
    }

    /// Pi 1.6's `modified` and order (module docs): a user or assistant message's numeric
    /// time, else its entry's; other roles and messages without content not counted; the
    /// header's time without one; the file's time without either; equal times by name, the
    /// later first. A list from the cache (unchanged files) says the same.
    #[test]
    fn sessions_are_ordered_by_their_latest_message_then_header_then_file_time() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let header = |ts: &str| {
            let ts = if ts.is_empty() {
                String::new()
            } else {
                format!(r#","timestamp":"{ts}""#)
            };
            format!(r#"{{"type":"session","version":3,"id":"x"{ts},"cwd":"/ws"}}"#)
        };
        let msg = |role: &str, entry_ts: &str, ts: &str, content: bool| {
            let content = if content { r#","content":[]"# } else { "" };
            format!(
                r#"{{"type":"message","id":"m","parentId":null,"timestamp":"{entry_ts}","message":{{"role":"{role}","timestamp":{ts}{content}}}}}"#
            )
        };
        let files = [
            // Numeric message time: 2026-06-01; a later tool result does not count.
            (
                "a",
                vec![
                    header("2026-01-01T00:00:00.000Z"),
                    msg("user", "2026-01-01T00:00:00.000Z", "1780272000000", true),
                    msg(
                        "toolResult",
                        "2027-01-01T00:00:00.000Z",
                        "1798761600000",
                        true,
                    ),
                ],
            ),
            // A time that is not a number: the entry's, 2026-03-01; one without content
            // does not count.
            (
                "b",
                vec![
                    header("2026-01-01T00:00:00.000Z"),
                    msg("assistant", "2026-03-01T00:00:00.000Z", "\"x\"", true),
                    msg("user", "2027-01-01T00:00:00.000Z", "1798761600000", false),
                ],
            ),
            // The header's time, 2026-04-01; `c3`, the same time: before `c` (the later name).
            ("c", vec![header("2026-04-01T00:00:00.000Z")]),
            ("c3", vec![header("2026-04-01T00:00:00.000Z")]),
            // Neither: the file's time (now: first).
            ("d", vec![header("")]),
        ];
        for (name, lines) in &files {
            let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
            std::fs::write(dir.join(format!("{name}.jsonl")), body).unwrap();
        }
        let file_time = list_sessions(dir)
            .into_iter()
            .find(|s| s.path.ends_with("d.jsonl"))
            .unwrap()
            .modified_ms;
        let cache = ListCache::default();
        for _ in 0..2 {
            let got: Vec<(String, i64)> = list_sessions_cached(dir, &cache)
                .into_iter()
                .map(|s| {
                    let name = s.path.file_stem().unwrap().to_string_lossy().into_owned();
                    (name, s.last_activity_ms)
                })
                .collect();
            let want: Vec<(String, i64)> = [
                ("d", file_time),
                ("a", 1_780_272_000_000),
                ("c3", 1_775_001_600_000),
                ("c", 1_775_001_600_000),
                ("b", 1_772_323_200_000),
            ]
            .iter()
            .map(|(n, t)| (n.to_string(), *t))
            .collect();
            assert_eq!(got, want);
        }
    }

    /// Whose a file is: the header's `cwd` against the workspace after resolving symlinks, a
    /// trailing `/` ignored; without `cwd` only inside the workspace; a moved project's own
    /// files stay its own; a sibling whose Pi folder name collides is another's.
    #[test]
    #[cfg(unix)] // makes a symlink: Windows needs a privilege for it
    fn ownership_by_resolved_cwd() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let ws = base.join("a/b/c");
        let sibling = base.join("a/b-c");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&sibling).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&ws, &link).unwrap();
        let shared = base.join("agent/sessions/--a-b-c--/s.jsonl");
        let own = ws.join(".pi/sessions/s.jsonl");
        std::fs::create_dir_all(own.parent().unwrap()).unwrap();
        let s = |p: &Path| p.display().to_string();
        let cases: Vec<(&Path, Option<String>, Ownership)> = vec![
            (&shared, Some(s(&ws)), Ownership::Workspace),
            (&shared, Some(format!("{}/", s(&ws))), Ownership::Workspace),
            (&shared, Some(s(&link)), Ownership::Workspace),
            (
                &shared,
                Some(format!("{}/./", s(&link))),
                Ownership::Workspace,
            ),
            (&shared, Some(s(&sibling)), Ownership::Other(s(&sibling))),
            (&shared, None, Ownership::Unknown),
            (&shared, Some("  ".into()), Ownership::Unknown),
            (
                &shared,
                Some("/gone/away".into()),
                Ownership::Other("/gone/away".into()),
            ),
            (&own, None, Ownership::Workspace),
            (&own, Some("/gone/away".into()), Ownership::Workspace),
            (&own, Some(s(&sibling)), Ownership::Other(s(&sibling))),
        ];
        for (file, cwd, want) in cases {
            assert_eq!(
                ownership(file, cwd.as_deref(), &ws),
                want,
                "{file:?} {cwd:?}"
            );
            // The workspace named through its link, with a trailing slash, is the same.
            assert_eq!(
                ownership(file, cwd.as_deref(), Path::new(&format!("{}/", s(&link)))),
                want,
                "{file:?} {cwd:?} via the link"
            );
        }
    }
}

//! Listing the sessions of a folder without parsing every file whole: the header line, a scan
//! of the other lines that parses only the first user message and `session_info` entries, and
//! the file's modification time.
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
    /// File modification time, milliseconds since the epoch.
    pub last_activity_ms: i64,
}

fn summarize(path: &Path) -> Option<SessionSummary> {
    let file = std::fs::File::open(path).ok()?;
    let modified = file.metadata().ok()?.modified().ok()?;
    let mut lines = BufReader::new(file).split(b'\n');
    let header: Value = serde_json::from_slice(&lines.next()?.ok()?).ok()?;
    if header["type"] != "session" {
        return None;
    }
    let mut s = SessionSummary {
        path: path.to_path_buf(),
        id: header["id"].as_str()?.to_string(),
        cwd: header["cwd"].as_str().map(str::to_string),
        parent_session: header["parentSession"].as_str().map(str::to_string),
        name: None,
        first_prompt: None,
        entry_count: 0,
        message_count: 0,
        last_activity_ms: chrono::DateTime::<chrono::Utc>::from(modified).timestamp_millis(),
    };
    for line in lines.map_while(Result::ok) {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        s.entry_count += 1;
        // Pi and pi-lsp write `type` first; another key order is parsed to be sure.
        if line.starts_with(br#"{"type":"message","#)
            || (memchr_find(&line, br#""message""#)
                && serde_json::from_slice::<Value>(&line).is_ok_and(|v| v["type"] == "message"))
        {
            s.message_count += 1;
        }
        let is_info = memchr_find(&line, b"\"session_info\"");
        let wants_prompt = s.first_prompt.is_none() && memchr_find(&line, b"\"user\"");
        if !is_info && !wants_prompt {
            continue;
        }
        let Ok(v) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if v["type"] == "session_info" {
            if let Some(n) = v["name"].as_str() {
                s.name = Some(n.to_string());
            }
        } else if v["type"] == "message" && v["message"]["role"] == "user" {
            if let Some(pi_ai::Message::User(u)) = convert_message(&v["message"]) {
                s.first_prompt = Some(u.content.to_text().chars().take(200).collect());
            }
        }
    }
    Some(s)
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
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
/// ([`ownership`]); another project's sharing a folder are left out.
pub fn list_workspace_sessions(dirs: &[PathBuf], root: &Path) -> Vec<SessionSummary> {
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut out = Vec::new();
    for d in dirs {
        let r = resolved(d);
        if seen.contains(&r) {
            continue;
        }
        seen.push(r);
        out.extend(
            list_sessions(d)
                .into_iter()
                .filter(|s| ownership(&s.path, s.cwd.as_deref(), root) == Ownership::Workspace),
        );
    }
    out.sort_by(|a, b| {
        b.last_activity_ms
            .cmp(&a.last_activity_ms)
            .then_with(|| a.path.cmp(&b.path))
    });
    out
}

/// The sessions in `dir` (files `*.jsonl` with a session header), newest activity first,
/// whoever's they are (see [`list_workspace_sessions`]). Unreadable files are skipped.
pub fn list_sessions(dir: &Path) -> Vec<SessionSummary> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<SessionSummary> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .filter_map(|p| summarize(&p))
        .collect();
    out.sort_by(|a, b| {
        b.last_activity_ms
            .cmp(&a.last_activity_ms)
            .then_with(|| a.path.cmp(&b.path))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whose a file is: the header's `cwd` against the workspace after resolving symlinks, a
    /// trailing `/` ignored; without `cwd` only inside the workspace; a moved project's own
    /// files stay its own; a sibling whose Pi folder name collides is another's.
    #[test]
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

//! Listing the sessions of a folder without parsing every file whole: the header line, a scan
//! of the other lines that parses only the first user message and `session_info` entries, and
//! the file's modification time.

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
        last_activity_ms: chrono::DateTime::<chrono::Utc>::from(modified).timestamp_millis(),
    };
    for line in lines.map_while(Result::ok) {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        s.entry_count += 1;
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

/// The sessions in `dir` (files `*.jsonl` with a session header), newest activity first.
/// Unreadable files are skipped.
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

//! Sessions as Pi v3 JSONL files (seed §4 "A session JSONL example"; Pi 0.73.1
//! `docs/session-format.md`).
//!
//! A file is named `<ISO time with : and . as ->_<uuid v7>.jsonl`; its first line is the header
//! `{"type":"session","version":3,"id","timestamp","cwd"}`, then `model_change` and
//! `thinking_level_change`, then one `message` entry per completed message. Every entry has an
//! 8-hex `id` and the `parentId` of the entry before it on the active branch. Entries are written
//! with one `write` of `json + "\n"` each, in completion order; [`SessionWriter::sync`] makes
//! them durable (called at turn end).
//!
//! Loading tolerates damage (cases SESS-01, SESS-02): an unterminated last line that does not
//! parse is moved to a `.corrupt` sidecar and cut off before anything is appended; unparseable
//! or NUL-filled lines in the middle are skipped and counted in a warning.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use pi_ai::Message;
use serde_json::{json, Value};

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
}

/// The single writer of one session file.
#[derive(Debug)]
pub struct SessionWriter {
    path: PathBuf,
    file: std::fs::File,
    id: String,
    leaf: Option<String>,
    ids: HashSet<String>,
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
        ensure_sessions_dir(dir)?;
        let id = uuid::Uuid::now_v7().to_string();
        let ts = iso_now();
        let name = format!("{}_{id}.jsonl", ts.replace([':', '.'], "-"));
        let path = dir.join(name);
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let mut w = SessionWriter {
            path,
            file,
            id: id.clone(),
            leaf: None,
            ids: HashSet::new(),
        };
        w.write_line(&json!({"type":"session","version":SESSION_VERSION,"id":id,"timestamp":ts,"cwd":cwd.display().to_string()}))?;
        w.append_entry(
            "model_change",
            json!({"provider": provider, "modelId": model_id}),
        )?;
        w.append_entry(
            "thinking_level_change",
            json!({"thinkingLevel": thinking_level}),
        )?;
        Ok(w)
    }

    /// Opens an existing file for appending, repairing a torn tail first, and loads its active
    /// branch.
    pub fn open(path: &Path) -> Result<(Self, LoadedSession), SessionError> {
        let bytes = std::fs::read(path).map_err(io(path))?;
        let mut loaded = LoadedSession::default();
        let mut good_len = bytes.len();
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            let start = bytes
                .iter()
                .rposition(|b| *b == b'\n')
                .map(|i| i + 1)
                .unwrap_or(0);
            let tail = &bytes[start..];
            if serde_json::from_slice::<Value>(tail).is_err() {
                let sidecar = path.with_extension("jsonl.corrupt");
                std::fs::write(&sidecar, tail).map_err(io(&sidecar))?;
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io(path))?;
                f.set_len(start as u64).map_err(io(path))?;
                good_len = start;
                loaded.warnings.push(format!(
                    "cut an unterminated last line ({} bytes) off {}; it was saved to {}",
                    tail.len(),
                    path.display(),
                    sidecar.display()
                ));
            } else {
                // A complete last entry without its newline: terminate it before appending.
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map_err(io(path))?;
                f.write_all(b"\n").map_err(io(path))?;
            }
        }
        let mut skipped = 0usize;
        let mut entries: Vec<Value> = Vec::new();
        for line in bytes[..good_len].split(|b| *b == b'\n') {
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            match serde_json::from_slice::<Value>(line) {
                Ok(v) if v.is_object() => entries.push(v),
                _ => skipped += 1,
            }
        }
        if skipped > 0 {
            loaded.warnings.push(format!(
                "skipped {skipped} damaged line(s) in {}",
                path.display()
            ));
        }
        let header = entries
            .first()
            .filter(|h| h["type"] == "session")
            .ok_or_else(|| SessionError::NoHeader(path.to_path_buf()))?;
        loaded.id = header["id"].as_str().unwrap_or_default().to_string();
        loaded.cwd = header["cwd"].as_str().map(str::to_string);
        let mut by_id: HashMap<String, &Value> = HashMap::new();
        let mut last = None;
        for e in &entries[1..] {
            if let Some(id) = e["id"].as_str() {
                by_id.insert(id.to_string(), e);
                last = Some(id.to_string());
            }
        }
        let mut path_entries = Vec::new();
        let mut cur = last.clone();
        let mut guard = HashSet::new();
        while let Some(id) = cur {
            if !guard.insert(id.clone()) {
                break;
            }
            let Some(e) = by_id.get(&id) else { break };
            path_entries.push(*e);
            cur = e["parentId"].as_str().map(str::to_string);
        }
        path_entries.reverse();
        for e in path_entries {
            match e["type"].as_str() {
                Some("message") => match serde_json::from_value::<Message>(e["message"].clone()) {
                    Ok(m) => {
                        if let Message::Assistant(a) = &m {
                            loaded.model = Some((a.provider.clone(), a.model.clone()));
                        }
                        loaded.messages.push(m);
                    }
                    Err(err) => loaded
                        .warnings
                        .push(format!("entry {}: unreadable message: {err}", e["id"])),
                },
                Some("model_change") => {
                    if let (Some(p), Some(m)) = (e["provider"].as_str(), e["modelId"].as_str()) {
                        loaded.model = Some((p.to_string(), m.to_string()));
                    }
                }
                Some("thinking_level_change") => {
                    loaded.thinking_level = e["thinkingLevel"].as_str().map(str::to_string)
                }
                _ => {}
            }
        }
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io(path))?;
        let writer = SessionWriter {
            path: path.to_path_buf(),
            file,
            id: loaded.id.clone(),
            leaf: last,
            ids: by_id.keys().cloned().collect(),
        };
        Ok((writer, loaded))
    }

    /// The session id (the header's `id`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write_line(&mut self, v: &Value) -> Result<(), SessionError> {
        let mut line = v.to_string();
        line.push('\n');
        self.file.write_all(line.as_bytes()).map_err(io(&self.path))
    }

    fn new_id(&mut self) -> String {
        loop {
            let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
            if self.ids.insert(id.clone()) {
                return id;
            }
        }
    }

    /// Appends an entry of `kind` with `fields` under the current leaf; returns its id.
    pub fn append_entry(&mut self, kind: &str, fields: Value) -> Result<String, SessionError> {
        let id = self.new_id();
        let mut entry =
            json!({"type": kind, "id": id, "parentId": self.leaf, "timestamp": iso_now()});
        if let (Some(e), Value::Object(f)) = (entry.as_object_mut(), fields) {
            e.extend(f);
        }
        self.write_line(&entry)?;
        self.leaf = Some(id.clone());
        Ok(id)
    }

    /// Appends a `message` entry; returns its id.
    pub fn append_message(&mut self, message: &Message) -> Result<String, SessionError> {
        let m = serde_json::to_value(message).unwrap_or(Value::Null);
        self.append_entry("message", json!({ "message": m }))
    }

    /// Flushes appended entries to stable storage.
    pub fn sync(&self) -> Result<(), SessionError> {
        self.file.sync_data().map_err(io(&self.path))
    }
}

/// Finds the file of session `id` in `dir` (named `…_<id>.jsonl`).
pub fn find_session_file(dir: &Path, id: &str) -> Option<PathBuf> {
    let suffix = format!("_{id}.jsonl");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(&suffix))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pi-core-session-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
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
        let (_, loaded) = SessionWriter::open(w.path()).unwrap();
        assert_eq!(loaded.model, Some(("mock".into(), "m1".into())));
        assert_eq!(find_session_file(&d, w.id()).as_deref(), Some(w.path()));
    }
}

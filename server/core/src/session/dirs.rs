//! Where sessions live: Pi's own sessions folder for a workspace, finding a session file by id.

use std::path::{Path, PathBuf};

use serde_json::Value;

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

//! Where the sessions of a cwd are: the workspace's sessions folder (`.pi/sessions/`, or the
//! `sessionDir` setting / `$PI_CODING_AGENT_SESSION_DIR`) and Pi's own folder for that cwd
//! (`~/.pi/agent/sessions/--<cwd>--/`). Only files whose header `cwd` is this cwd are listed
//! or opened by id (Pi's folder names collide: `/a/b-c` and `/a/b/c` share one).
//!
//! A thin layer over pi-core's session files, kept small and replaceable by
//! `pi_core::harness::Sessions` once that registry can serve ACP: it holds one
//! `SessionSetup` per workspace, and `SessionSetup::fs` is not told the session's id, which
//! ACP's `fs/*` requests carry; and its list is not filtered by the header's cwd yet.

use std::path::{Path, PathBuf};

use pi_core::harness::sessions_dir;
use pi_core::resources::WorkspaceConfig;
use pi_core::session::SessionSummary;

/// The folders holding `ws`'s sessions (its own, then Pi's for the same cwd).
pub fn folders(ws: &WorkspaceConfig) -> Vec<PathBuf> {
    let mut out = vec![sessions_dir(ws)];
    if let Some(agent) = pi_ai::models::agent_dir() {
        let pi = pi_core::session::pi_sessions_dir(&agent, ws.root());
        if !out.contains(&pi) {
            out.push(pi);
        }
    }
    out
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
}

/// The sessions of `ws`'s cwd, newest activity first.
pub fn list(ws: &WorkspaceConfig) -> Vec<SessionSummary> {
    let mut all: Vec<SessionSummary> = folders(ws)
        .iter()
        .flat_map(|d| pi_core::session::list_sessions(d))
        .filter(|s| {
            s.cwd
                .as_deref()
                .is_some_and(|c| same_dir(Path::new(c), ws.root()))
        })
        .collect();
    all.sort_by_key(|s| std::cmp::Reverse(s.last_activity_ms));
    all.dedup_by(|a, b| a.id == b.id);
    all
}

/// The file of session `id` of `ws`'s cwd.
pub fn find(ws: &WorkspaceConfig, id: &str) -> Option<PathBuf> {
    folders(ws)
        .iter()
        .filter_map(|d| pi_core::session::find_session_file(d, id))
        .find(|p| header_cwd(p).is_some_and(|c| same_dir(Path::new(&c), ws.root())))
}

fn header_cwd(path: &Path) -> Option<String> {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(std::fs::File::open(path).ok()?)
        .read_line(&mut line)
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&line).ok()?;
    v["cwd"].as_str().map(str::to_string)
}

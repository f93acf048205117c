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

mod context_edit;
mod convert;
mod dirs;
mod entry_data;
mod images;
mod line;
mod list;
mod load;
mod read;
mod repair;
mod shared;
mod system_message;
mod tree;
mod view;
mod writer;

pub use context_edit::ContextEdits;
pub use entry_data::{BashExecution, EntryData, StoredMessage};
pub use line::AssistantInfo;
pub use list::{
    file_ownership, find_in_all_projects, header_cwd, list_sessions, list_sessions_cached,
    list_workspace_sessions, ownership, ListCache, Ownership, SessionSummary,
};
pub use shared::{lock_writer, lock_writer_for_close};
pub use system_message::{
    is_system, leading_text, path_system_layout, system_message_count, to_system_message,
    writes_pi16, SystemLayout, SystemState, PROMPT_SECTION,
};
pub use tree::{
    bash_execution_text, convert_message, entry_message, path_messages, path_messages_with, Entry,
    EntryKind, EntryShape, SessionContext, SessionTree,
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

use std::path::{Path, PathBuf};

pub use dirs::*;
pub use images::*;
pub use load::*;
use repair::*;
pub use writer::*;

/// Pi's session format version written here.
pub const SESSION_VERSION: u64 = 3;

/// The content of the `.gitignore` written into a sessions folder.
pub const SESSIONS_GITIGNORE: &str =
    "# pi-lsp sessions: kept out of git by default. Sessions are not a secret store.\n*\n";

pub(super) fn iso_now() -> String {
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

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SessionError + '_ {
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

#[cfg(test)]
mod tests;

//! Changes and rewind (checkpoints): the edits the agent applied on a session's active branch,
//! and moving the branch back (or forward again) together with the files.
//!
//! **Changes** ([`changes_at`], [`AgentSession::changes`]) are read from the session file
//! alone, so they survive a reopen: every successful `edit` / `write` result on the path from
//! the root to the leaf, in order, with its `details.fileChange` record (hashes and exact
//! replaced ranges, [`crate::tools::file_change`]) and its unified diff
//! (`details.unifiedDiff`). A result written without a record (by Pi itself, or by an older
//! pi-lsp) is listed with what it has (its path from the call's arguments, its diff, no
//! hashes) and cannot be reverted. A change the editor applied after its run was aborted is
//! read from the entry recording its late result ([`super::late`]), where that entry is. Changes made by `bash` commands are not tool edits and
//! are not listed.
//!
//! **Rewind** ([`AgentSession::begin_rewind`], [`Rewind::apply_files`],
//! [`AgentSession::finish_rewind`]; [`AgentSession::rewind`] does all three) to an entry `E`:
//! - `E` on the active branch: the leaf moves to before `E` (its parent, as Pi's branch does)
//!   and the agent's changes from `E` on are reverted;
//! - `E` off the active branch (the `previousLeafId` of an earlier rewind, or another
//!   branch's leaf): the leaf moves to `E` itself; the changes of the active branch after the
//!   two branches' common entry are reverted and those of `E`'s branch after it re-applied —
//!   so rewinding to the old leaf undoes a rewind.
//!
//! Files are handled one at a time, each as one [`Fs`] operation (one labelled
//! `workspace/applyEdit` in an editor: one undo step), computed from the records: the
//! current text is checked against the agent's last change (its hash after; a file the
//! user or a command changed since is **refused** and kept as it is), each change is undone
//! (newest first) or redone (oldest first) exactly, checking every hash on the way (a file
//! changed between two of the agent's edits is refused: it cannot be reverted exactly), and
//! the result replaces the text. A file the agent created is deleted only when
//! [`RewindOptions::delete_created`] says the client can do it undoably (else refused); a
//! file to re-create is written. A file already holding the target text is `unchanged`.
//!
//! Nothing is deleted from the session file. The new position is recorded by a `custom`
//! entry (`customType` [`REWIND_CUSTOM_TYPE`], `data: {fromId, entryId, files}`) written at
//! the target, which becomes the leaf: Pi and pi-lsp resume a session at its last entry, so
//! the rewind survives a reopen, and custom entries are not part of the model's context.
//! The files are done before the leaf moves, so an interrupted rewind leaves the session
//! where it was, and asking again finishes it (files already reverted are `unchanged`).
//! While a rewind runs, [`AgentSession::prompt`] is refused; a rewind is refused while a run
//! or a compaction is active.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::AgentSession;
use crate::approval::content_hash;
use crate::fs::{Fs, FsError, TextReplace};
use crate::session::{Entry, EntryData, SessionError, SessionTree};
use crate::tools::file_change::{FileChange, DETAILS_KEY};

/// `customType` of the entry a rewind writes at its target.
pub const REWIND_CUSTOM_TYPE: &str = "pi-lsp.rewind";

/// One change the agent applied to a file (`agent/session/changes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The tool call that made it.
    pub tool_call_id: String,
    /// `edit` or `write`.
    pub tool_name: String,
    /// The file as tools show it: relative to the workspace root inside it, else absolute.
    pub path: String,
    /// The file, absolute.
    pub absolute_path: String,
    /// The entry of the tool result.
    pub entry_id: String,
    /// Unified diff of the change (`details.unifiedDiff`; long lines clipped, SESSX-03), or
    /// `""` when the result has none.
    pub diff: String,
    /// `xxh3:<16 hex>` of the text before; `null` when the change created the file or was
    /// recorded without hashes.
    pub hash_before: Option<String>,
    /// `xxh3:<16 hex>` of the text after; `null` when recorded without hashes.
    pub hash_after: Option<String>,
    /// The change created the file.
    pub created: bool,
    /// The record that lets it be undone and redone (`None`: it cannot be).
    #[serde(skip)]
    pub record: Option<FileChange>,
    /// A created file's text (the `write` call's `content`).
    #[serde(skip)]
    content: Option<String>,
    /// Index of the result's entry on the path it was read from.
    #[serde(skip)]
    at: usize,
}

/// What happened to one file in a rewind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "lowercase")]
pub enum FileStatus {
    /// The agent's changes were undone.
    Reverted,
    /// The agent's changes were applied again (a rewind forward).
    Reapplied,
    /// Left as it is; `reason` says why.
    Refused,
    /// The file already held the target text.
    Unchanged,
}

/// One file of a rewind's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct FileOutcome {
    /// As in [`Change::path`].
    pub path: String,
    pub status: FileStatus,
    /// Why a file was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A finished rewind (`agent/session/rewind`'s answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct RewindOutcome {
    /// The leaf before the rewind: rewinding to it undoes this rewind.
    pub previous_leaf_id: Option<String>,
    /// The leaf now (the rewind's `custom` entry, see the module docs).
    pub leaf_id: Option<String>,
    /// Every file the agent changed between the two positions, in the order first changed.
    pub files: Vec<FileOutcome>,
}

/// How a rewind may change files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RewindOptions {
    /// Files the agent created may be deleted ([`Fs::delete`]): the client applies deletes
    /// as undoable edits (an editor advertising `DeleteFile`). Else such files are refused.
    pub delete_created: bool,
}

/// Why a rewind was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    /// A run, a compaction or another rewind is active.
    #[error("{0}")]
    Busy(String),
    /// The entry is not in the session.
    #[error("no entry {0} in this session")]
    UnknownEntry(String),
    /// The session file could not be written.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// The changes on the path of `tree` from the root to `leaf` (see the module docs); paths
/// shown relative to `root`.
pub fn changes_at(tree: &SessionTree, leaf: Option<&str>, root: &Path) -> Vec<Change> {
    let path = leaf.map(|l| tree.path(l)).unwrap_or_default();
    changes_on(&path, root)
}

fn changes_on(path: &[&Entry], root: &Path) -> Vec<Change> {
    let mut out = Vec::new();
    for (i, e) in path.iter().enumerate() {
        let late = e.kind == "custom";
        if !(e.kind == "message" && e.role() == Some("toolResult") || late) {
            continue;
        }
        let raw = e.raw();
        if late && raw["customType"] != super::late::LATE_RESULT_CUSTOM_TYPE {
            continue;
        }
        // A late result's entry holds the call's real result ([`super::late`]).
        let m = if late {
            &raw["data"]["message"]
        } else {
            &raw["message"]
        };
        if m["isError"].as_bool().unwrap_or(false) {
            continue;
        }
        let tool = m["toolName"].as_str().unwrap_or_default();
        let record: Option<FileChange> = m["details"]
            .get(DETAILS_KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        if record.is_none() && !matches!(tool, "edit" | "write") {
            continue;
        }
        let call_id = m["toolCallId"].as_str().unwrap_or_default().to_string();
        let needs_args = record.as_ref().is_none_or(FileChange::created);
        let args = if needs_args {
            call_arguments(&path[..i], &call_id)
        } else {
            Value::Null
        };
        let file = match &record {
            Some(r) => r.path.clone(),
            None => match args["path"].as_str() {
                Some(p) => {
                    let p = Path::new(p.strip_prefix('@').unwrap_or(p));
                    if p.is_absolute() {
                        p.to_path_buf()
                    } else {
                        root.join(p)
                    }
                }
                None => continue,
            },
        };
        let diff = m["details"]["unifiedDiff"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let content = record
            .as_ref()
            .filter(|r| r.created())
            .and_then(|_| args["content"].as_str().map(str::to_string));
        out.push(Change {
            tool_call_id: call_id,
            tool_name: tool.to_string(),
            path: shown(root, &file),
            absolute_path: file.display().to_string(),
            entry_id: e.id.to_string(),
            diff,
            hash_before: record.as_ref().and_then(|r| r.hash_before.clone()),
            hash_after: record.as_ref().map(|r| r.hash_after.clone()),
            created: record.as_ref().is_some_and(FileChange::created),
            record,
            content,
            at: i,
        });
    }
    out
}

/// The arguments of tool call `id` in the latest assistant message of `before` that made it
/// (a late result's entry may come after later turns, [`super::late`]).
fn call_arguments(before: &[&Entry], id: &str) -> Value {
    before
        .iter()
        .rev()
        .filter(|e| e.kind == "message" && e.role() == Some("assistant"))
        .find_map(|a| {
            let raw = a.raw();
            raw["message"]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|b| b["type"] == "toolCall" && b["id"] == id)
                .map(|b| b["arguments"].clone())
        })
        .unwrap_or(Value::Null)
}

fn shown(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| file.display().to_string())
}

/// One file's part of a rewind: the changes to undo (in path order; undone newest first)
/// and to redo (in path order).
#[derive(Debug, Clone)]
struct FilePlan {
    file: PathBuf,
    shown: String,
    undo: Vec<Change>,
    redo: Vec<Change>,
}

/// A rewind in progress: planned by [`AgentSession::begin_rewind`], its files done by
/// [`Rewind::apply_files`] (without the session), finished by
/// [`AgentSession::finish_rewind`]. Dropping it unfinished leaves the session as it was.
pub struct Rewind {
    fs: Arc<dyn Fs>,
    options: RewindOptions,
    entry_id: String,
    from: Option<String>,
    to: Option<String>,
    plans: Vec<FilePlan>,
    outcomes: Vec<FileOutcome>,
    _guard: RewindGuard,
}

/// Clears the session's "rewinding" flag when the rewind ends, however it ends.
struct RewindGuard(Arc<AtomicBool>);

impl Drop for RewindGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Rewind {
    /// The leaf the rewind starts from.
    pub fn from(&self) -> Option<&str> {
        self.from.as_deref()
    }

    /// Where the leaf goes (before the rewind's own entry is written there).
    pub fn to(&self) -> Option<&str> {
        self.to.as_deref()
    }

    /// Reverts / re-applies each file (see the module docs); the outcomes are kept for
    /// [`AgentSession::finish_rewind`].
    pub async fn apply_files(&mut self) {
        let mut outcomes = Vec::with_capacity(self.plans.len());
        for plan in &self.plans {
            let (status, reason) = match rewind_file(&*self.fs, plan, self.options).await {
                Ok(status) => (status, None),
                Err(why) => (FileStatus::Refused, Some(why)),
            };
            if let Some(r) = &reason {
                tracing::info!("rewind: {} kept: {r}", plan.shown);
            }
            outcomes.push(FileOutcome {
                path: plan.shown.clone(),
                status,
                reason,
            });
        }
        self.outcomes = outcomes;
    }
}

/// Label of one file's editor change.
fn label(redo: bool, shown: &str) -> String {
    if redo {
        format!("Pi: reapply {shown}")
    } else {
        format!("Pi: rewind {shown}")
    }
}

/// The changes of `list` with their records; `Err` names one recorded without it.
fn with_records(list: &[Change]) -> Result<Vec<(&Change, &FileChange)>, String> {
    list.iter()
        .map(|c| {
            c.record.as_ref().map(|r| (c, r)).ok_or_else(|| {
                format!(
                    "the {} of call {} was recorded without its change (by Pi, or an older pi-lsp): it cannot be undone exactly",
                    c.tool_name, c.tool_call_id
                )
            })
        })
        .collect()
}

/// Does one file; `Err` is the reason it was refused.
async fn rewind_file(
    fs: &dyn Fs,
    plan: &FilePlan,
    options: RewindOptions,
) -> Result<FileStatus, String> {
    let undo = with_records(&plan.undo)?;
    let redo = with_records(&plan.redo)?;
    let snapshot = match fs.read(&plan.file).await {
        Ok(s) => Some(s),
        Err(FsError::NotFound(_)) => None,
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    let current: Option<&str> = snapshot.as_ref().map(|s| s.text.as_str());
    let hash_now = current.map(content_hash);
    // What the file holds after the agent's last change on the active branch, and what it
    // should hold at the target.
    let expected = match undo.last() {
        Some((_, r)) => Some(r.hash_after.clone()),
        None => redo.first().and_then(|(_, r)| r.hash_before.clone()),
    };
    let target_hash = match redo.last() {
        Some((_, r)) => Some(r.hash_after.clone()),
        None => undo.first().and_then(|(_, r)| r.hash_before.clone()),
    };
    if hash_now == target_hash {
        return Ok(FileStatus::Unchanged);
    }
    if hash_now != expected {
        let last = undo
            .last()
            .or(redo.first())
            .map(|(c, _)| c.tool_call_id.as_str())
            .unwrap_or_default();
        // Which lines, in words (never the hashes).
        let what = match (current, &expected, undo.last()) {
            (None, _, _) => "the file was deleted".to_string(),
            (Some(_), None, _) => "the file exists again".to_string(),
            (Some(now), Some(_), Some((_, r))) => where_changed(now, r, true),
            (Some(now), Some(_), None) => match redo.first() {
                Some((_, r)) => where_changed(now, r, false),
                None => "its text is not what the agent left".to_string(),
            },
        };
        return Err(format!(
            "changed since the agent's change ({last}): {what}; kept as it is"
        ));
    }
    // Undo newest first, then redo oldest first, every step checked against its hashes.
    let mut text: Option<String> = current.map(str::to_string);
    let between = |c: &Change| {
        format!(
            "changed between the agent's changes (before {}), by a command or by hand: it cannot be undone exactly; kept as it is",
            c.tool_call_id
        )
    };
    for (k, &(c, r)) in undo.iter().enumerate().rev() {
        if text.as_deref().map(content_hash).as_ref() != Some(&r.hash_after) {
            return Err(between(undo.get(k + 1).map_or(c, |n| n.0)));
        }
        text = match (&text, r.created()) {
            (_, true) => None,
            (Some(t), false) => Some(r.undo(t).ok_or_else(|| between(c))?),
            (None, false) => return Err(between(c)),
        };
        if text.as_deref().map(content_hash) != r.hash_before {
            return Err(between(c));
        }
    }
    for &(c, r) in &redo {
        if text.as_deref().map(content_hash) != r.hash_before {
            return Err(between(c));
        }
        text = match (&text, r.created()) {
            (None, true) => c.content.clone(),
            (Some(t), false) => r.redo(t),
            _ => None,
        };
        if text.as_deref().map(content_hash).as_ref() != Some(&r.hash_after) {
            return Err(format!(
                "the {} of call {} cannot be applied again exactly",
                c.tool_name, c.tool_call_id
            ));
        }
    }
    let redo = !redo.is_empty();
    let done = if redo {
        FileStatus::Reapplied
    } else {
        FileStatus::Reverted
    };
    let label = label(redo, &plan.shown);
    match (snapshot, text) {
        (Some(snap), Some(target)) => {
            let edits = line_edits(&snap.text, &target);
            fs.replace(&plan.file, &snap, edits, &label)
                .await
                .map_err(|e| e.to_string())?;
        }
        (Some(_), None) => {
            if !options.delete_created {
                return Err("the agent created it; deleting it needs a client that applies file deletes (workspace.workspaceEdit.resourceOperations with \"delete\"); kept as it is".into());
            }
            fs.delete(&plan.file, &label)
                .await
                .map_err(|e| e.to_string())?;
        }
        (None, Some(target)) => {
            fs.write(&plan.file, &target, &label)
                .await
                .map_err(|e| e.to_string())?;
        }
        (None, None) => return Ok(FileStatus::Unchanged),
    }
    Ok(done)
}

/// The replacements that make `after` of `before`: one per changed run of lines, each
/// trimmed to its changed characters, so an editor keeps its marks on the rest.
pub(crate) fn line_edits(before: &str, after: &str) -> Vec<TextReplace> {
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .timeout(std::time::Duration::from_secs(2))
        .diff_lines(before, after);
    let starts = |text: &str| -> Vec<usize> {
        let mut v = vec![0];
        v.extend(text.split_inclusive('\n').scan(0, |pos, l| {
            *pos += l.len();
            Some(*pos)
        }));
        v
    };
    let (bs, as_) = (starts(before), starts(after));
    let mut out: Vec<TextReplace> = Vec::new();
    for op in diff.ops() {
        if op.tag() == similar::DiffTag::Equal {
            continue;
        }
        let (o, n) = (op.old_range(), op.new_range());
        let range = bs[o.start]..bs[o.end];
        let new = &after[as_[n.start]..as_[n.end]];
        let t = crate::tools::minimal_replace(&before[range.clone()], new);
        let edit = TextReplace {
            range: range.start + t.range.start..range.start + t.range.end,
            new_text: t.new_text,
        };
        match out.last_mut() {
            // Adjacent runs (a delete next to an insert) become one replacement.
            Some(last) if last.range.end == edit.range.start => {
                last.range.end = edit.range.end;
                last.new_text.push_str(&edit.new_text);
            }
            _ => out.push(edit),
        }
    }
    out
}

impl AgentSession {
    /// The agent's changes on the active branch ([`changes_at`]).
    pub fn changes(&self) -> Vec<Change> {
        let (tree, leaf) = match crate::session::lock_writer(&self.writer) {
            Ok(w) => (w.tree_snapshot(), w.leaf().map(str::to_string)),
            Err(_) => return Vec::new(),
        };
        changes_at(&tree, leaf.as_deref(), self.ws.root())
    }

    /// Whether a rewind of this session is in progress.
    pub fn is_rewinding(&self) -> bool {
        self.rewinding.load(Ordering::SeqCst)
    }

    /// Plans a rewind to `entry_id` (see the module docs) and marks the session as rewinding
    /// until the returned [`Rewind`] is finished or dropped. Refused while a run, a compaction
    /// or another rewind is active, and for an unknown entry; nothing changes then.
    pub fn begin_rewind(
        &self,
        entry_id: &str,
        options: RewindOptions,
    ) -> Result<Rewind, RewindError> {
        let busy = |what: String| {
            RewindError::Busy(format!(
                "session {} is {what}; rewind waits until it ends (or agent/abort it)",
                self.id
            ))
        };
        if self.agent.is_streaming() {
            return Err(busy(format!(
                "running {}",
                self.agent.run_id().unwrap_or_default()
            )));
        }
        if self.agent.is_compacting() {
            return Err(busy("compacting".into()));
        }
        let (tree, from) = {
            let w = self.lock_writer()?;
            (w.tree_snapshot(), w.leaf().map(str::to_string))
        };
        let entry = tree
            .get(entry_id)
            .ok_or_else(|| RewindError::UnknownEntry(entry_id.to_string()))?;
        let from_path = from.as_deref().map(|l| tree.path(l)).unwrap_or_default();
        let on_branch = from_path.iter().any(|e| e.id == entry_id);
        let to = if on_branch {
            entry.parent_id.as_deref().map(str::to_string)
        } else {
            Some(entry.id.to_string())
        };
        let to_path = to.as_deref().map(|l| tree.path(l)).unwrap_or_default();
        let common = from_path
            .iter()
            .zip(&to_path)
            .take_while(|(a, b)| a.id == b.id)
            .count();
        let root = self.ws.root();
        let undo: Vec<Change> = changes_on(&from_path, root)
            .into_iter()
            .filter(|c| c.at >= common)
            .collect();
        let redo: Vec<Change> = changes_on(&to_path, root)
            .into_iter()
            .filter(|c| c.at >= common)
            .collect();
        let mut plans: Vec<FilePlan> = Vec::new();
        for (c, is_redo) in undo
            .into_iter()
            .map(|c| (c, false))
            .chain(redo.into_iter().map(|c| (c, true)))
        {
            let file = PathBuf::from(&c.absolute_path);
            let i = match plans.iter().position(|p| p.file == file) {
                Some(i) => i,
                None => {
                    plans.push(FilePlan {
                        file,
                        shown: c.path.clone(),
                        undo: Vec::new(),
                        redo: Vec::new(),
                    });
                    plans.len() - 1
                }
            };
            if is_redo {
                plans[i].redo.push(c);
            } else {
                plans[i].undo.push(c);
            }
        }
        if self.rewinding.swap(true, Ordering::SeqCst) {
            return Err(busy("rewinding".into()));
        }
        let guard = RewindGuard(self.rewinding.clone());
        // Checked again now that no prompt can start.
        if self.agent.is_streaming() {
            return Err(busy(format!(
                "running {}",
                self.agent.run_id().unwrap_or_default()
            )));
        }
        Ok(Rewind {
            fs: self.setup.fs(&self.id).0,
            options,
            entry_id: entry_id.to_string(),
            from,
            to,
            plans,
            outcomes: Vec::new(),
            _guard: guard,
        })
    }

    /// Moves the leaf to the rewind's target and writes its `custom` entry there (the new
    /// leaf), then gives the agent the context of the new position.
    pub fn finish_rewind(&self, rewind: Rewind) -> Result<RewindOutcome, RewindError> {
        let leaf = {
            let mut w = self.lock_writer()?;
            let tree = w.tree_snapshot();
            w.branch(&tree, rewind.to.as_deref())?;
            w.append(EntryData::Custom {
                custom_type: REWIND_CUSTOM_TYPE.to_string(),
                data: json!({"fromId": rewind.from, "entryId": rewind.entry_id, "files": rewind.outcomes}),
            })?;
            w.sync()?;
            w.leaf().map(str::to_string)
        };
        let context = {
            let w = self.lock_writer()?;
            w.agent_context()
        };
        if self
            .set_messages(context.messages, context.usage_from)
            .is_err()
        {
            tracing::warn!(
                "session {}: a run started during the rewind; it keeps its context",
                self.id
            );
        }
        Ok(RewindOutcome {
            previous_leaf_id: rewind.from.clone(),
            leaf_id: leaf,
            files: rewind.outcomes.clone(),
        })
    }

    /// [`AgentSession::begin_rewind`], [`Rewind::apply_files`] and
    /// [`AgentSession::finish_rewind`] in one, for an owner that can hold the session across
    /// the file work.
    pub async fn rewind(
        &self,
        entry_id: &str,
        options: RewindOptions,
    ) -> Result<RewindOutcome, RewindError> {
        let mut r = self.begin_rewind(entry_id, options)?;
        r.apply_files().await;
        self.finish_rewind(r)
    }
}

/// Where `now` (a file's text) is not what the agent's change `r` left (`after`) or started
/// from (`!after`), in words for a person: the lines of the change's ranges that differ, else
/// that lines around it do. Never a hash.
fn where_changed(now: &str, r: &FileChange, after: bool) -> String {
    let line_at = |at: usize| {
        now.get(..at.min(now.len()))
            .unwrap_or(now)
            .matches('\n')
            .count()
            + 1
    };
    let mut differ: Vec<usize> = Vec::new();
    let mut kept: Vec<usize> = Vec::new();
    let mut shift: isize = 0;
    for e in &r.edits {
        let (at, want) = if after {
            let Some(at) = e.at.checked_add_signed(shift) else {
                break;
            };
            shift += e.new_text.len() as isize - e.old_text.len() as isize;
            (at, e.new_text.as_str())
        } else {
            (e.at, e.old_text.as_str())
        };
        let line = line_at(at);
        if now.get(at..at + want.len()) == Some(want) {
            kept.push(line);
        } else {
            differ.push(line);
        }
    }
    let list = |v: &[usize]| {
        let mut v = v.to_vec();
        v.dedup();
        let names: Vec<String> = v.iter().map(usize::to_string).collect();
        if names.len() == 1 {
            format!("line {}", names[0])
        } else {
            format!("lines {}", names.join(", "))
        }
    };
    let whose = if after {
        "the agent's text"
    } else {
        "the text the agent's change was made on"
    };
    match (differ.is_empty(), kept.is_empty()) {
        (false, _) => {
            let verb = if differ.len() == 1 {
                "differs"
            } else {
                "differ"
            };
            format!("{} now {verb} from {whose}", list(&differ))
        }
        (true, false) => format!(
            "lines around the agent's change ({}) were changed since",
            list(&kept)
        ),
        (true, true) => format!("its text is not {whose}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{apply_replacements, DiskFs};

    /// A change of `file` from `before` to `after` (one replacement), by call `id`.
    fn change(file: &Path, id: &str, before: Option<&str>, after: &str) -> Change {
        let record = match before {
            Some(b) => {
                let r = crate::tools::minimal_replace(b, after);
                FileChange::of_plan(
                    file.to_path_buf(),
                    b,
                    &[r],
                    content_hash(b),
                    content_hash(after),
                )
            }
            None => FileChange {
                path: file.to_path_buf(),
                hash_before: None,
                hash_after: content_hash(after),
                edits: Vec::new(),
            },
        };
        Change {
            tool_call_id: id.into(),
            tool_name: if before.is_some() { "edit" } else { "write" }.into(),
            path: "f".into(),
            absolute_path: file.display().to_string(),
            entry_id: format!("e-{id}"),
            diff: String::new(),
            hash_before: record.hash_before.clone(),
            hash_after: Some(record.hash_after.clone()),
            created: before.is_none(),
            content: before.is_none().then(|| after.to_string()),
            record: Some(record),
            at: 0,
        }
    }

    fn plan(file: &Path, undo: Vec<Change>, redo: Vec<Change>) -> FilePlan {
        FilePlan {
            file: file.to_path_buf(),
            shown: "f".into(),
            undo,
            redo,
        }
    }

    #[tokio::test]
    async fn each_file_is_undone_redone_or_refused_by_its_hashes() {
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        let fs = DiskFs::new(dir.clone());
        let f = dir.join("f");
        let (v0, v1, v2) = ("a\nb\nc\n", "A\nb\nc\n", "A\nb\nC\n");
        let c1 = change(&f, "c1", Some(v0), v1);
        let c2 = change(&f, "c2", Some(v1), v2);
        let opts = RewindOptions::default();
        let read = || std::fs::read_to_string(&f).ok();
        // Two changes undone at once, then redone.
        std::fs::write(&f, v2).unwrap();
        let both = plan(&f, vec![c1.clone(), c2.clone()], vec![]);
        assert_eq!(
            rewind_file(&fs, &both, opts).await,
            Ok(FileStatus::Reverted)
        );
        assert_eq!(read().as_deref(), Some(v0));
        // Already there: unchanged.
        assert_eq!(
            rewind_file(&fs, &both, opts).await,
            Ok(FileStatus::Unchanged)
        );
        let forward = plan(&f, vec![], vec![c1.clone(), c2.clone()]);
        assert_eq!(
            rewind_file(&fs, &forward, opts).await,
            Ok(FileStatus::Reapplied)
        );
        assert_eq!(read().as_deref(), Some(v2));
        // Changed by hand since the last change: refused, kept.
        std::fs::write(&f, "A\nb\nC\nmine\n").unwrap();
        let err = rewind_file(&fs, &both, opts).await.unwrap_err();
        assert_eq!(
            err,
            // In words, never hashes: the agent's line 3 is intact, a line was added after it.
            "changed since the agent's change (c2): lines around the agent's change (line 3) were changed since; kept as it is"
        );
        assert_eq!(read().as_deref(), Some("A\nb\nC\nmine\n"));
        // Changed between the two changes (a command ran in between): refused, kept.
        let c2_after_cmd = change(&f, "c2", Some("A\nb\nc\n# fmt\n"), "A\nb\nC\n# fmt\n");
        std::fs::write(&f, "A\nb\nC\n# fmt\n").unwrap();
        let broken = plan(&f, vec![c1.clone(), c2_after_cmd], vec![]);
        assert_eq!(
            rewind_file(&fs, &broken, opts).await.unwrap_err(),
            "changed between the agent's changes (before c2), by a command or by hand: it cannot be undone exactly; kept as it is"
        );
        assert_eq!(read().as_deref(), Some("A\nb\nC\n# fmt\n"));
        // A change recorded without its record.
        let mut legacy = c1.clone();
        legacy.record = None;
        assert_eq!(
            rewind_file(&fs, &plan(&f, vec![legacy], vec![]), opts).await.unwrap_err(),
            "the edit of call c1 was recorded without its change (by Pi, or an older pi-lsp): it cannot be undone exactly"
        );
        // A created file: deleted only when allowed, written again forward.
        let g = dir.join("g");
        let created = change(&g, "w1", None, "new\n");
        std::fs::write(&g, "new\n").unwrap();
        let undo_create = FilePlan {
            file: g.clone(),
            ..plan(&g, vec![created.clone()], vec![])
        };
        assert!(rewind_file(&fs, &undo_create, opts)
            .await
            .unwrap_err()
            .starts_with("the agent created it;"));
        assert!(g.exists());
        let allow = RewindOptions {
            delete_created: true,
        };
        assert_eq!(
            rewind_file(&fs, &undo_create, allow).await,
            Ok(FileStatus::Reverted)
        );
        assert!(!g.exists());
        let redo_create = plan(&g, vec![], vec![created]);
        assert_eq!(
            rewind_file(&fs, &redo_create, opts).await,
            Ok(FileStatus::Reapplied)
        );
        assert_eq!(std::fs::read_to_string(&g).unwrap(), "new\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn line_edits_make_the_target_exactly_with_small_replacements() {
        let cases = [
            ("a\nb\nc\n", "a\nB\nc\n"),
            ("a\nb\nc\n", "a\nc\n"),
            ("a\nc\n", "a\nb\nc\n"),
            ("", "new\n"),
            ("old\n", ""),
            ("x\r\ny\r\n", "x\r\nY\r\n"),
            ("no newline", "no newline!"),
            ("1\n2\n3\n4\n5\n6\n", "0\n2\n3\n4\n5\n7\n"),
        ];
        for (before, after) in cases {
            let edits = line_edits(before, after);
            assert_eq!(apply_replacements(before, &edits), after, "{before:?}");
        }
        let long = format!("{}X{}", "a".repeat(100_000), "b".repeat(100_000));
        let edits = line_edits(&long, &long.replace('X', "Y"));
        assert_eq!(
            edits,
            vec![TextReplace {
                range: 100_000..100_001,
                new_text: "Y".into()
            }]
        );
        let edits = line_edits("1\n2\n3\n4\n5\n6\n", "0\n2\n3\n4\n5\n7\n");
        assert_eq!(
            edits,
            vec![
                TextReplace {
                    range: 0..1,
                    new_text: "0".into()
                },
                TextReplace {
                    range: 10..11,
                    new_text: "7".into()
                }
            ]
        );
    }
}

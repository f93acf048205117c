//! `details.fileChange`: what a successful `edit` / `write` changed, recorded in its tool
//! result so the session file alone can list the agent's changes and undo or redo them
//! exactly ([`crate::harness::rewind`]), also after the session is reopened.
//!
//! Shape (camelCase JSON): `{path, hashBefore, hashAfter, edits: [{at, oldText, newText}]}`.
//! `path` is the file as the tool resolved it (absolute). `hashBefore` / `hashAfter` are
//! `xxh3:<16 hex digits>` of the whole text (as decoded, see [`crate::fs::decode_file`])
//! before and after, the same hashes the approval gate shows ([`crate::approval::content_hash`]);
//! `hashBefore` is `null` when the tool created the file. `edits` are the replaced ranges,
//! ascending and non-overlapping: `at` is a byte offset into the text before, `oldText` the
//! bytes replaced there and `newText` what replaced them — only the changed region (an edit's
//! matched ranges; a `write` less the common prefix and suffix), so a one-byte change of a
//! large file records a few bytes (case SESSX-03). A created file records no edits: its text
//! is the `write` call's `content`.
//!
//! Pi 0.73.1 ignores detail keys it does not know, so a session with these records still
//! resumes in Pi (`tests/pi_parity.rs` allows exactly this key besides `unifiedDiff`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::fs::TextReplace;

/// The key under a tool result's `details`.
pub const DETAILS_KEY: &str = "fileChange";

/// One replaced range of a [`FileChange`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replaced {
    /// Byte offset into the text before the change.
    pub at: usize,
    /// The text that was there.
    pub old_text: String,
    /// The text put in its place.
    pub new_text: String,
}

/// What one `edit` / `write` changed in one file (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    /// The file (absolute).
    pub path: PathBuf,
    /// Hash of the text before; `None` when the file was created.
    pub hash_before: Option<String>,
    /// Hash of the text after.
    pub hash_after: String,
    /// The replaced ranges, ascending, against the text before (empty for a created file).
    #[serde(default)]
    pub edits: Vec<Replaced>,
}

impl FileChange {
    /// The record of `plan` applied to `before` (whose hash is `hash_before`), giving a text
    /// whose hash is `hash_after`.
    pub fn of_plan(
        path: PathBuf,
        before: &str,
        plan: &[TextReplace],
        hash_before: String,
        hash_after: String,
    ) -> FileChange {
        FileChange {
            path,
            hash_before: Some(hash_before),
            hash_after,
            edits: plan
                .iter()
                .map(|r| Replaced {
                    at: r.range.start,
                    old_text: before[r.range.clone()].to_string(),
                    new_text: r.new_text.clone(),
                })
                .collect(),
        }
    }

    /// True when the change created the file.
    pub fn created(&self) -> bool {
        self.hash_before.is_none()
    }

    /// The record as a `details` value.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The text after the change, made from `before`; `None` when a replaced range is not in
    /// `before` as recorded (the text is not the one the change was made on).
    pub fn redo(&self, before: &str) -> Option<String> {
        let mut out = String::with_capacity(before.len());
        let mut pos = 0;
        for e in &self.edits {
            let end = e.at.checked_add(e.old_text.len())?;
            if e.at < pos || before.get(e.at..end)? != e.old_text {
                return None;
            }
            out.push_str(before.get(pos..e.at)?);
            out.push_str(&e.new_text);
            pos = end;
        }
        out.push_str(before.get(pos..)?);
        Some(out)
    }

    /// The text before the change, made from `after`; `None` when a replaced range does not
    /// hold its `newText` in `after` (the text is not the one the change made).
    pub fn undo(&self, after: &str) -> Option<String> {
        let mut out = String::with_capacity(after.len());
        let mut pos = 0;
        // Where each range starts in the text after: shifted by the earlier ranges' growth.
        let mut shift: isize = 0;
        for e in &self.edits {
            let at = e.at.checked_add_signed(shift)?;
            let end = at.checked_add(e.new_text.len())?;
            if at < pos || after.get(at..end)? != e.new_text {
                return None;
            }
            out.push_str(after.get(pos..at)?);
            out.push_str(&e.old_text);
            pos = end;
            shift += e.new_text.len() as isize - e.old_text.len() as isize;
        }
        out.push_str(after.get(pos..)?);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_and_redo_are_exact_inverses() {
        let before = "alpha\nbeta\ngamma\nbeta2\n";
        let plan = vec![
            TextReplace {
                range: 6..10,
                new_text: "BETA-LONGER".into(),
            },
            TextReplace {
                range: 17..22,
                new_text: "b".into(),
            },
        ];
        let c = FileChange::of_plan(
            "/w/f".into(),
            before,
            &plan,
            "xxh3:0".into(),
            "xxh3:1".into(),
        );
        assert_eq!(
            c.edits,
            vec![
                Replaced {
                    at: 6,
                    old_text: "beta".into(),
                    new_text: "BETA-LONGER".into()
                },
                Replaced {
                    at: 17,
                    old_text: "beta2".into(),
                    new_text: "b".into()
                }
            ]
        );
        let after = c.redo(before).unwrap();
        assert_eq!(after, "alpha\nBETA-LONGER\ngamma\nb\n");
        assert_eq!(c.undo(&after).unwrap(), before);
        // Not the text the change was made on / made.
        assert_eq!(c.redo(&after), None);
        assert_eq!(c.undo(before), None);
        assert_eq!(c.undo(""), None);
        let v = c.to_value();
        assert_eq!(
            v,
            serde_json::json!({"path": "/w/f", "hashBefore": "xxh3:0", "hashAfter": "xxh3:1",
                "edits": [{"at": 6, "oldText": "beta", "newText": "BETA-LONGER"},
                          {"at": 17, "oldText": "beta2", "newText": "b"}]})
        );
        assert_eq!(serde_json::from_value::<FileChange>(v).unwrap(), c);
    }
}

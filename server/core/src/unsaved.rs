//! The user's unsaved editor changes when the agent edits the same file.
//!
//! An editor buffer may hold text the user typed and has not saved. When an agent edit lands in
//! that buffer, the product must not save the user's typing without asking (the user's unsaved
//! text is theirs). The setting `saveUserChanges` says what happens:
//!
//! - `ask` (the default): the user is asked once per file per session; until they answer, as
//!   `never`;
//! - `always`: the buffer is saved as it is (the user's changes and the agent's);
//! - `never`: the disk gets the agent's change merged onto the disk's own text
//!   ([`merge_onto_disk`]); the buffer keeps the user's changes unsaved.
//!
//! Precedence (for this key as for `approvalPolicy`): a session's own choice > the editor's
//! setting > the project's `.pi/settings.json` > the user's settings (the last two merged by
//! [`crate::settings::Settings`]); a session-only choice is not inherited by other sessions.

use crate::fs::TextReplace;

/// `saveUserChanges`: what an agent edit does with the user's unsaved changes in the buffer it
/// edits (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SaveUserChanges {
    /// Ask once per file per session (default); `never` until answered.
    #[default]
    Ask,
    /// Save the buffer, the user's changes with the agent's.
    Always,
    /// Keep the user's changes unsaved; the disk gets only the agent's change.
    Never,
}

impl SaveUserChanges {
    /// Parses the setting's value: `"ask"`, `"always"` or `"never"`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ask" => Some(Self::Ask),
            "always" => Some(Self::Always),
            "never" => Some(Self::Never),
            _ => None,
        }
    }

    /// The setting's value as written in `settings.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ask => "ask",
            Self::Always => "always",
            Self::Never => "never",
        }
    }

    /// The value in force: the first of `session` (the session's own choice), `editor` (the
    /// client's setting) and `settings` (project over user, already merged) that is set, else
    /// [`SaveUserChanges::Ask`].
    pub fn resolve(session: Option<Self>, editor: Option<Self>, settings: Option<Self>) -> Self {
        session.or(editor).or(settings).unwrap_or_default()
    }
}

/// Why an agent edit could not be merged onto the disk's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// 1-based line numbers in the buffer (before the agent's edit) of the first agent edit
    /// that touches lines the user changed and has not saved: `first..=last`.
    pub lines: (usize, usize),
}

/// Byte offset where each line of `text` starts, plus `text.len()` at the end.
fn line_starts(text: &str) -> Vec<usize> {
    let mut v = vec![0];
    v.extend(
        text.bytes()
            .enumerate()
            .filter(|(_, b)| *b == b'\n')
            .map(|(i, _)| i + 1),
    );
    if *v.last().unwrap_or(&0) != text.len() {
        v.push(text.len());
    }
    v
}

/// 1-based line of byte `offset` in a text with `starts` ([`line_starts`]).
fn line_of(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset).max(1)
}

/// The disk's new text when the agent's `edits` (byte ranges of `buffer`, the buffer's text
/// before the edit) are applied onto `disk` (the file's text on disk, which lacks the user's
/// unsaved changes that `buffer` holds).
///
/// Line-based: the lines `buffer` and `disk` have in common (a line diff) carry each edit over;
/// an edit that touches a line the user changed (or the place where the user removed lines) is
/// an [`Overlap`]: merging it would guess at the user's intent, so nothing is merged.
pub fn merge_onto_disk(buffer: &str, disk: &str, edits: &[TextReplace]) -> Result<String, Overlap> {
    use similar::{DiffOp, TextDiff};
    let b_starts = line_starts(buffer);
    let d_starts = line_starts(disk);
    // The byte spans of `buffer` equal to a span of `disk`: (buffer start, buffer end, disk start).
    let diff = TextDiff::from_lines(disk, buffer);
    let mut same: Vec<(usize, usize, usize)> = Vec::new();
    for op in diff.ops() {
        if let DiffOp::Equal {
            old_index,
            new_index,
            len,
        } = *op
        {
            let bs = b_starts.get(new_index).copied().unwrap_or(buffer.len());
            let be = b_starts
                .get(new_index + len)
                .copied()
                .unwrap_or(buffer.len());
            let ds = d_starts.get(old_index).copied().unwrap_or(disk.len());
            same.push((bs, be, ds));
        }
    }
    let mut moved = Vec::with_capacity(edits.len());
    for e in edits {
        let (s, t) = (e.range.start, e.range.end);
        // An edit inside one common span (an insertion at a span's end is inside it only when
        // nothing the user changed follows: the span reaches the end of the buffer).
        let span = same.iter().find(|(bs, be, _)| {
            *bs <= s && t <= *be && (s < *be || t < *be || *be == buffer.len())
        });
        match span {
            Some((bs, _, ds)) => moved.push(TextReplace {
                range: ds + (s - bs)..ds + (t - bs),
                new_text: e.new_text.clone(),
            }),
            None => {
                let first = line_of(&b_starts, s);
                let last = line_of(&b_starts, t.saturating_sub(1).max(s));
                return Err(Overlap {
                    lines: (first, last.max(first)),
                });
            }
        }
    }
    Ok(crate::fs::apply_replacements(disk, &moved))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(buffer: &str, old: &str, new: &str) -> TextReplace {
        let start = buffer.find(old).unwrap();
        TextReplace {
            range: start..start + old.len(),
            new_text: new.into(),
        }
    }

    #[test]
    fn precedence_is_session_editor_settings_then_ask() {
        use SaveUserChanges::*;
        assert_eq!(
            SaveUserChanges::resolve(Some(Never), Some(Always), Some(Always)),
            Never
        );
        assert_eq!(
            SaveUserChanges::resolve(None, Some(Always), Some(Never)),
            Always
        );
        assert_eq!(SaveUserChanges::resolve(None, None, Some(Never)), Never);
        assert_eq!(SaveUserChanges::resolve(None, None, None), Ask);
        assert_eq!(SaveUserChanges::parse("sometimes"), None);
        for v in [Ask, Always, Never] {
            assert_eq!(SaveUserChanges::parse(v.as_str()), Some(v));
        }
    }

    #[test]
    fn an_edit_away_from_the_users_lines_lands_on_the_disk_text() {
        let disk = "one\ntwo\nthree\nfour\n";
        // The user added a line after "one" and changed "four".
        let buffer = "one\nmine\ntwo\nthree\nFOUR!\n";
        let e = edit(buffer, "three", "THREE");
        assert_eq!(
            merge_onto_disk(buffer, disk, &[e]).unwrap(),
            "one\ntwo\nTHREE\nfour\n"
        );
        // Two edits, one at the very start, one inserting at the end of the last common line.
        let e1 = edit(buffer, "one", "ONE");
        let e2 = edit(buffer, "two\n", "two\n2b\n");
        assert_eq!(
            merge_onto_disk(buffer, disk, &[e1, e2]).unwrap(),
            "ONE\ntwo\n2b\nthree\nfour\n"
        );
    }

    #[test]
    fn an_edit_on_the_users_lines_is_an_overlap() {
        let disk = "one\ntwo\nthree\n";
        let buffer = "one\ntwo (mine)\nthree\n";
        let e = edit(buffer, "two (mine)", "2");
        assert_eq!(
            merge_onto_disk(buffer, disk, &[e]),
            Err(Overlap { lines: (2, 2) })
        );
        // Spanning a common line and the user's line.
        let e = edit(buffer, "one\ntwo", "x");
        assert_eq!(
            merge_onto_disk(buffer, disk, &[e]),
            Err(Overlap { lines: (1, 2) })
        );
    }

    #[test]
    fn an_unchanged_buffer_merges_to_the_plain_result() {
        let text = "a\nb\nc";
        let e = edit(text, "c", "C");
        assert_eq!(merge_onto_disk(text, text, &[e]).unwrap(), "a\nb\nC");
    }
}

//! `edit {path, edits: [{oldText, newText}]}` (and the single `oldText`/`newText` form): exact
//! text replacement against the file's current text (an open buffer's unsaved text included).
//!
//! Rules (Pi 0.73.1 and cases EDIT-01..08): every `oldText` is matched against the original
//! text, not after earlier edits; it must match exactly once, counting matches at every start
//! offset (so `foo\nfoo\n` in `foo\nfoo\nfoo\n` is two matches); edits must not overlap;
//! `\n` in `oldText` / `newText` means the line ending of the line where the match starts (Pi
//! 1.6's `getLineEndingAt`; lines the match spans keep their own), and only the matched ranges
//! change, so other lines keep theirs (also in mixed CRLF / LF / lone-CR files), a BOM stays once and a
//! missing final newline stays missing. Exact match first, then Pi's normalised fallback, then
//! a whitespace-tolerant line match (see [`super::edit_match`]). Matching is substring matching:
//! a partial line is fine when it is unique. A failed edit never changes the file.
//!
//! Stale reads (EDIT-08): the edit is matched against the text as it is now (the editor's
//! buffer when the file is open). When the model read the file and its text changed since (the
//! user typed in the buffer, a command rewrote it) and the edit's `oldText` no longer matches,
//! it is refused and the model is told to read again, with the changed lines and the current
//! text near the edit; when `oldText` still matches, the edit is made and its result says the
//! file had changed. The result's `details.diff` is Pi's own
//! numbered-line diff (`generateDiffString`: `+N line`, `-N line`, ` N line`, ` ... ` for skipped
//! context, 4 lines of context, numbers padded to the width of the longer text's line count),
//! which Pi's interface draws when it resumes the session; `details.firstChangedLine` is the
//! 1-based line of the first change in the new text (Pi's), `details.patch` Pi 1.6's unified
//! patch (of the text without its byte order mark, with LF line ends; Pi's numbered diff leaves
//! the mark out too), and `details.unifiedDiff` the same
//! change as a unified diff (`similar`, 4 lines of context) for editors; `details.fileChange`
//! records the change exactly, with the text's hashes before and after (see
//! [`super::file_change`]).

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Value};

use super::edit_match::{self, closest_region, MatchError};
use super::{display_path, parse_args, text_hash_after, ToolState};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};
use crate::approval::{content_hash, recheck, ProposedChange};
#[cfg(test)]
use crate::fs::apply_replacements;
use crate::fs::{Fs, TextReplace};

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct EditSpec {
    old_text: String,
    new_text: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Args {
    path: String,
    #[serde(default)]
    edits: Vec<EditSpec>,
    old_text: Option<String>,
    new_text: Option<String>,
}

/// The `edit` tool.
pub struct EditTool {
    fs: Arc<dyn Fs>,
    state: Arc<ToolState>,
}

impl EditTool {
    /// An edit tool over `fs`, checking and updating `state.reads`.
    pub fn new(fs: Arc<dyn Fs>, state: Arc<ToolState>) -> Self {
        EditTool { fs, state }
    }
}

/// Lines of unchanged context in `details.diff`.
const DIFF_CONTEXT: usize = 4;

/// `diff` with every hunk header's line numbers moved down by `skipped_lines` (the lines cut off
/// before the diffed region).
fn shift_hunks(diff: String, skipped_lines: usize) -> String {
    if skipped_lines == 0 {
        return diff;
    }
    let shift = |part: &str, sign: char| -> String {
        let body = part.trim_start_matches(sign);
        let (start, rest) = body
            .split_once(',')
            .map_or((body, None), |(s, r)| (s, Some(r)));
        let start = start
            .parse::<usize>()
            .map(|n| n + skipped_lines)
            .unwrap_or(0);
        match rest {
            Some(r) => format!("{sign}{start},{r}"),
            None => format!("{sign}{start}"),
        }
    };
    diff.split_inclusive('\n')
        .map(|line| {
            let Some(inner) = line.strip_prefix("@@ ").and_then(|l| l.split_once(" @@")) else {
                return line.to_string();
            };
            let (ranges, tail) = inner;
            let mut parts = ranges.split(' ');
            match (parts.next(), parts.next()) {
                (Some(o), Some(n)) => format!("@@ {} {} @@{tail}", shift(o, '-'), shift(n, '+')),
                _ => line.to_string(),
            }
        })
        .collect()
}

/// The unified diff of applying `plan` (non-overlapping, sorted by start, non-empty) to `text`
/// (the same as [`unified_diff`] of `text` and the edited text) and the 1-based line of the
/// first replaced range. Only the region from [`DIFF_CONTEXT`] lines before the first range
/// to [`DIFF_CONTEXT`] lines after the last one is diffed and rebuilt; the edited whole text
/// is never made, and the only whole-text pass is one newline count up to the region.
pub(crate) fn plan_diff(name: &str, text: &str, plan: &[TextReplace]) -> (String, usize) {
    let d = plan_diffs(name, text, plan);
    (d.unified, d.first_line)
}

/// The diffs of one edit: unified, Pi's numbered-line form and its first changed line.
pub(crate) struct EditDiffs {
    pub unified: String,
    /// 1-based line of the first replaced range (in the original text).
    pub first_line: usize,
    /// Pi's `generateDiffString` output.
    pub numbered: String,
    /// Pi's `firstChangedLine`: the new text's line number at the first change.
    pub first_changed: usize,
    /// Pi 1.6's `patch`: the unified patch of the text without its byte order mark and with
    /// LF line ends (jsdiff's `formatPatch` with file headers only; [`pi_patch`]).
    pub patch: String,
}

/// [`plan_diff`] plus Pi's numbered-line diff of the same region.
pub(crate) fn plan_diffs(name: &str, text: &str, plan: &[TextReplace]) -> EditDiffs {
    let b = text.as_bytes();
    let (Some(first), Some(last)) = (plan.first(), plan.last()) else {
        return EditDiffs {
            unified: String::new(),
            first_line: 1,
            numbered: String::new(),
            first_changed: 1,
            patch: String::new(),
        };
    };
    let (first, last) = (first.range.start, last.range.end);
    // Region start: the start of the first range's line, then DIFF_CONTEXT lines more.
    let mut pre = memchr::memrchr(b'\n', &b[..first]).map_or(0, |i| i + 1);
    for _ in 0..DIFF_CONTEXT {
        if pre == 0 {
            break;
        }
        pre = memchr::memrchr(b'\n', &b[..pre - 1]).map_or(0, |i| i + 1);
    }
    // Region end: the end of the last range's line (just after its newline), then
    // DIFF_CONTEXT lines more.
    let mut post = if last > 0 && b[last - 1] == b'\n' {
        last
    } else {
        memchr::memchr(b'\n', &b[last..]).map_or(b.len(), |i| last + i + 1)
    };
    for _ in 0..DIFF_CONTEXT {
        if post == b.len() {
            break;
        }
        post = memchr::memchr(b'\n', &b[post..]).map_or(b.len(), |i| post + i + 1);
    }
    let skipped_lines = memchr::memchr_iter(b'\n', &b[..pre]).count();
    let first_line = skipped_lines + memchr::memchr_iter(b'\n', &b[pre..first]).count() + 1;
    let old_mid = &text[pre..post];
    let mut new_mid = String::with_capacity(old_mid.len());
    let mut pos = pre;
    // Where the changes are in each side of the region (for clipping long lines).
    let mut old_changes = Vec::with_capacity(plan.len());
    let mut new_changes = Vec::with_capacity(plan.len());
    for r in plan {
        new_mid.push_str(&text[pos..r.range.start]);
        let at = new_mid.len();
        new_mid.push_str(&r.new_text);
        old_changes.push(r.range.start - pre..r.range.end - pre);
        new_changes.push(at..new_mid.len());
        pos = r.range.end;
    }
    new_mid.push_str(&text[pos..post]);
    // SESSX-03: lines longer than LONG_LINE (minified code) are shown clipped around the
    // changes, the elided bytes counted, so a 1-byte edit of a 1 MB line is a diff of a few
    // hundred bytes (in the session, in events and in permission requests).
    let (old_clipped, new_clipped);
    let (old_mid, new_mid): (&str, &str) = if has_long_line(old_mid) || has_long_line(&new_mid) {
        old_clipped = clip_long_lines(old_mid, &old_changes);
        new_clipped = clip_long_lines(&new_mid, &new_changes);
        (&old_clipped, &new_clipped)
    } else {
        (old_mid, &new_mid)
    };
    let td = similar::TextDiff::from_lines(old_mid, new_mid);
    let diff = td
        .unified_diff()
        .context_radius(DIFF_CONTEXT)
        .header(name, name)
        .to_string();
    // Pi numbers lines of `split("\n")`: newlines + 1 on each side.
    let old_lines = memchr::memchr_iter(b'\n', b).count() + 1;
    let removed: usize = plan
        .iter()
        .map(|r| memchr::memchr_iter(b'\n', &b[r.range.clone()]).count())
        .sum();
    let added: usize = plan
        .iter()
        .map(|r| memchr::memchr_iter(b'\n', r.new_text.as_bytes()).count())
        .sum();
    let new_lines = old_lines + added - removed.min(old_lines + added);
    let width = old_lines.max(new_lines).to_string().len();
    let hidden_after = memchr::memchr_iter(b'\n', &b[post..]).count()
        + usize::from(post < b.len() && !b.ends_with(b"\n"));
    let (numbered, first_changed) = numbered_diff(&td, skipped_lines, hidden_after, width);
    EditDiffs {
        unified: shift_hunks(diff, skipped_lines),
        first_line,
        numbered,
        first_changed,
        patch: pi_patch(&td, name, skipped_lines),
    }
}

/// A line of the diffed text as Pi 1.6 diffs it: its end (`\n`, `\r\n`) off, and the file's
/// byte order mark off its first line (`number`: the line's 1-based number in its text; Pi's
/// `edit` splits the mark off before it matches or diffs).
fn pi_line(line: &str, number: usize) -> &str {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    match number {
        1 => line.strip_prefix('\u{feff}').unwrap_or(line),
        _ => line,
    }
}

/// Pi 1.6's `details.patch` (`generateEditDiff`: jsdiff's `formatPatch` with
/// `FILE_HEADERS_ONLY`) of the region diff `td`, which starts after `skipped` lines of the
/// text: `--- name` / `+++ name`, each hunk's `@@ -start,lines +start,lines @@` (a side of no
/// lines numbered one lower, jsdiff's quirk), its lines as [`pi_line`] gives them, and
/// `\ No newline at end of file` after a last line without one.
fn pi_patch<'a>(td: &similar::TextDiff<'a, 'a, 'a, str>, name: &str, skipped: usize) -> String {
    use similar::ChangeTag;
    let mut out = vec![format!("--- {name}"), format!("+++ {name}")];
    for hunk in td.unified_diff().context_radius(DIFF_CONTEXT).iter_hunks() {
        let ops = hunk.ops();
        let (Some(first), Some(last)) = (ops.first(), ops.last()) else {
            continue;
        };
        let side = |start: usize, end: usize| {
            let lines = end - start;
            let shown = skipped + start + usize::from(lines > 0);
            format!("{shown},{lines}")
        };
        out.push(format!(
            "@@ -{} +{} @@",
            side(first.old_range().start, last.old_range().end),
            side(first.new_range().start, last.new_range().end)
        ));
        for change in hunk.iter_changes() {
            let (sign, index) = match change.tag() {
                ChangeTag::Delete => ('-', change.old_index()),
                ChangeTag::Insert => ('+', change.new_index()),
                ChangeTag::Equal => (' ', change.old_index()),
            };
            let number = skipped + index.unwrap_or(0) + 1;
            out.push(format!("{sign}{}", pi_line(change.value(), number)));
            if !change.value().ends_with('\n') {
                out.push("\\ No newline at end of file".into());
            }
        }
    }
    out.join("\n") + "\n"
}

/// One context line (numbered by the old text) of Pi's numbered diff.
fn push_context(
    out: &mut Vec<String>,
    (old_no, new_no): (&mut usize, &mut usize),
    l: &str,
    width: usize,
) {
    out.push(format!(" {old_no:>width$} {}", pi_line(l, *old_no)));
    *old_no += 1;
    *new_no += 1;
}

/// Pi's `generateDiffString` over a diff of a region that starts after `hidden_before` lines
/// of the text and ends `hidden_after` lines before its end (those count as context that is
/// skipped). Returns the text and the new text's line number at the first change.
fn numbered_diff(
    td: &similar::TextDiff<'_, '_, '_, str>,
    hidden_before: usize,
    hidden_after: usize,
    width: usize,
) -> (String, usize) {
    use similar::ChangeTag;
    // Runs of equal / removed / added lines, as jsdiff's `diffLines` parts.
    let mut parts: Vec<(ChangeTag, Vec<&str>)> = Vec::new();
    for op in td.ops() {
        for change in td.iter_changes(op) {
            let line = change.value();
            let line = line.strip_suffix('\n').unwrap_or(line);
            let line = line.strip_suffix('\r').unwrap_or(line);
            match parts.last_mut() {
                Some((tag, lines)) if *tag == change.tag() => lines.push(line),
                _ => parts.push((change.tag(), vec![line])),
            }
        }
    }
    let n = parts.len();
    let mut out: Vec<String> = Vec::new();
    let mut old_no = hidden_before + 1;
    let mut new_no = hidden_before + 1;
    let mut first_changed = None;
    let mut last_was_change = false;
    let blank = " ".repeat(width);
    let ctx = DIFF_CONTEXT;
    for (i, (tag, lines)) in parts.iter().enumerate() {
        match tag {
            ChangeTag::Insert | ChangeTag::Delete => {
                first_changed.get_or_insert(new_no);
                for l in lines {
                    if *tag == ChangeTag::Insert {
                        out.push(format!("+{new_no:>width$} {}", pi_line(l, new_no)));
                        new_no += 1;
                    } else {
                        out.push(format!("-{old_no:>width$} {}", pi_line(l, old_no)));
                        old_no += 1;
                    }
                }
                last_was_change = true;
            }
            ChangeTag::Equal => {
                let next_is_change = i + 1 < n && parts[i + 1].0 != ChangeTag::Equal;
                let before = if i == 0 { hidden_before } else { 0 };
                let after = if i + 1 == n { hidden_after } else { 0 };
                let total = before + lines.len() + after;
                if last_was_change && next_is_change {
                    if lines.len() <= ctx * 2 {
                        for l in lines {
                            push_context(&mut out, (&mut old_no, &mut new_no), l, width);
                        }
                    } else {
                        for l in &lines[..ctx] {
                            push_context(&mut out, (&mut old_no, &mut new_no), l, width);
                        }
                        out.push(format!(" {blank} ..."));
                        let skip = lines.len() - 2 * ctx;
                        old_no += skip;
                        new_no += skip;
                        for l in &lines[lines.len() - ctx..] {
                            push_context(&mut out, (&mut old_no, &mut new_no), l, width);
                        }
                    }
                } else if last_was_change {
                    let shown = lines.len().min(ctx);
                    for l in &lines[..shown] {
                        push_context(&mut out, (&mut old_no, &mut new_no), l, width);
                    }
                    if total > shown {
                        out.push(format!(" {blank} ..."));
                    }
                    old_no += lines.len() - shown;
                    new_no += lines.len() - shown;
                } else if next_is_change {
                    let shown = lines.len().min(ctx);
                    if total > shown {
                        out.push(format!(" {blank} ..."));
                    }
                    old_no += lines.len() - shown;
                    new_no += lines.len() - shown;
                    for l in &lines[lines.len() - shown..] {
                        push_context(&mut out, (&mut old_no, &mut new_no), l, width);
                    }
                } else {
                    old_no += lines.len();
                    new_no += lines.len();
                }
                last_was_change = false;
            }
        }
    }
    (out.join("\n"), first_changed.unwrap_or(hidden_before + 1))
}

/// The one replacement that makes `after` of `before`: the whole text less the longest common
/// prefix and suffix (on character boundaries), so a `write` that changes one byte of a large
/// file diffs (and clips) only around that byte.
pub(crate) fn minimal_replace(before: &str, after: &str) -> TextReplace {
    let (a, b) = (before.as_bytes(), after.as_bytes());
    let mut pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    while !(before.is_char_boundary(pre) && after.is_char_boundary(pre)) {
        pre -= 1;
    }
    let max_suf = a.len().min(b.len()) - pre;
    let mut suf = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suf)
        .take_while(|(x, y)| x == y)
        .count();
    while !(before.is_char_boundary(a.len() - suf) && after.is_char_boundary(b.len() - suf)) {
        suf -= 1;
    }
    TextReplace {
        range: pre..a.len() - suf,
        new_text: after[pre..b.len() - suf].to_string(),
    }
}

/// Lines longer than this (bytes) are clipped in diffs ([`clip_long_lines`]).
pub(crate) const LONG_LINE: usize = 1024;
/// Bytes of a clipped line kept on each side of a change, and at the start of an unchanged one.
pub(crate) const CLIP_CONTEXT: usize = 160;

fn has_long_line(text: &str) -> bool {
    text.len() > LONG_LINE && text.split_inclusive('\n').any(|l| l.len() > LONG_LINE)
}

/// `text` (one side of a diffed region) with every line longer than [`LONG_LINE`] bytes cut
/// to what a reader needs: [`CLIP_CONTEXT`] bytes around each end of every change in it
/// (`changes`: byte ranges of `text`), or the line's first [`CLIP_CONTEXT`] bytes when it has
/// none; each elided run becomes `[… N bytes …]`. Both sides of a diff are clipped by the same
/// rule, so an unchanged long line reads the same on both and a changed one shows its change.
/// Cuts fall on character boundaries; line ends are kept.
pub(crate) fn clip_long_lines(text: &str, changes: &[std::ops::Range<usize>]) -> String {
    let floor = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let ceil = |mut i: usize| {
        while i < text.len() && !text.is_char_boundary(i) {
            i += 1;
        }
        i
    };
    let mut out = String::new();
    let mut ls = 0;
    for line in text.split_inclusive('\n') {
        let le = ls + line.len();
        if line.len() <= LONG_LINE {
            out.push_str(line);
            ls = le;
            continue;
        }
        let body_end = le - usize::from(line.ends_with('\n'));
        // Kept windows in this line, from the changes touching it.
        let mut keep: Vec<(usize, usize)> = Vec::new();
        for c in changes {
            if c.end < ls || c.start > body_end {
                continue;
            }
            for at in [c.start, c.end] {
                if at >= ls && at <= body_end {
                    keep.push((
                        at.saturating_sub(CLIP_CONTEXT).max(ls),
                        (at + CLIP_CONTEXT).min(body_end),
                    ));
                }
            }
        }
        if keep.is_empty() {
            keep.push((ls, (ls + CLIP_CONTEXT).min(body_end)));
        }
        keep.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (a, b) in keep {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let mut at = ls;
        for (a, b) in merged {
            let (a, b) = (floor(a).max(at), ceil(b));
            if a > at {
                out.push_str(&format!("[… {} bytes …]", a - at));
            }
            out.push_str(&text[a..b]);
            at = b;
        }
        if at < body_end {
            out.push_str(&format!("[… {} bytes …]", body_end - at));
        }
        out.push_str(&text[body_end..le]);
        ls = le;
    }
    out
}

/// Plans the replacements of `edits` in `text` (see [`super::edit_match`] for the matching
/// levels), or says why none can be made. Errors use Pi 0.73.1's texts, with the starting
/// lines of duplicate matches and the closest region of a missing one added.
pub(crate) fn plan_edits(
    text: &str,
    edits: &[(String, String)],
    shown: &str,
) -> Result<Vec<TextReplace>, String> {
    let many = edits.len() > 1;
    let mut out: Vec<(usize, TextReplace)> = Vec::new();
    for (i, (old, new)) in edits.iter().enumerate() {
        if old.is_empty() {
            return Err(if many {
                format!("edits[{i}].oldText must not be empty in {shown}.")
            } else {
                format!("oldText must not be empty in {shown}.")
            });
        }
        match edit_match::find(text, old, new) {
            Ok(found) => out.push((
                i,
                TextReplace {
                    range: found.range,
                    new_text: found.new_text,
                },
            )),
            Err(MatchError::NotFound { closest }) => {
                let mut msg = if many {
                    format!("Could not find edits[{i}] in {shown}. The oldText must match exactly including all whitespace and newlines.")
                } else {
                    format!("Could not find the exact text in {shown}. The old text must match exactly including all whitespace and newlines.")
                };
                if let Some(c) = closest {
                    msg.push_str("\n\n");
                    msg.push_str(&c);
                }
                return Err(msg);
            }
            Err(MatchError::NotUnique { lines }) => {
                let n = lines.len();
                let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
                return Err(if many {
                    format!(
                        "Found {n} occurrences of edits[{i}] in {shown} (starting at lines {}). Each oldText must be unique. Please provide more context to make it unique.",
                        lines.join(", ")
                    )
                } else {
                    format!(
                        "Found {n} occurrences of the text in {shown} (starting at lines {}). The text must be unique. Please provide more context to make it unique.",
                        lines.join(", ")
                    )
                });
            }
        }
    }
    out.sort_by_key(|(_, r)| r.range.start);
    for w in out.windows(2) {
        if w[1].1.range.start < w[0].1.range.end {
            return Err(format!(
                "edits[{}] and edits[{}] overlap in {shown}. Merge them into one edit or target disjoint regions.",
                w[0].0.min(w[1].0),
                w[0].0.max(w[1].0)
            ));
        }
    }
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

#[async_trait]
impl Tool for EditTool {
    /// Pi's `promptSnippet` of `edit` (`core/tools/edit.js`, 1.6).
    fn prompt_snippet(&self) -> Option<String> {
        Some("Make precise file edits with exact text replacement, including multiple disjoint edits in one call".into())
    }

    /// Pi's `promptGuidelines` of `edit` (`core/tools/edit.js`, 1.6).
    fn prompt_guidelines(&self) -> Vec<String> {
        [
            "Use edit for targeted changes. Batch changes to one file in a single call.",
            "Each edits[].oldText must exactly and uniquely match the original file. Keep matches short and non-overlapping; merge nearby changes without including large unchanged regions.",
        ]
        .map(String::from)
        .to_vec()
    }

    /// For the approval policy: changes files, asking with its change.
    fn approval_kind(&self) -> crate::approval::ToolKind {
        crate::approval::ToolKind::Edit
    }

    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed("edit")
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
 // Pi 1.6: `constrainedSampling: { type: "json_schema", strict: "prefer" }`.
 constrained_sampling: Some(pi_ai::ConstrainedSampling::PREFER_JSON_SCHEMA),
            name: "edit".into(),
            description: "Edit a single file using exact text replacement. Every edits[].oldText must match a unique, non-overlapping region of the original file. If two changes affect the same block or nearby lines, merge them into one edit instead of emitting overlapping edits. Do not include large unchanged regions just to connect distant changes.".into(),
            parameters: json!({"type":"object","required":["path","edits"],"properties":{
                "path":{"type":"string","description":"Path to the file to edit (relative or absolute)"},
                "edits":{"type":"array","items":{"type":"object","required":["oldText","newText"],"properties":{
                    "oldText":{"type":"string","description":"Exact text for one targeted replacement. It must be unique in the original file and must not overlap with any other edits[].oldText in the same call."},
                    "newText":{"type":"string","description":"Replacement text for this targeted edit."}}},
                    "description":"One or more targeted replacements. Each edit is matched against the original file, not incrementally. Do not include overlapping or nested edits. If two changes touch the same block or nearby lines, merge them into one edit instead."}}}),
        }
    }

    /// Mutates the workspace: a batch containing it runs in call order.
    fn sequential(&self) -> bool {
        true
    }

    /// Pi's `prepareEditArguments`: `edits` sent as a JSON string is parsed; the legacy
    /// top-level `oldText` / `newText` pair is appended to `edits`.
    fn prepare_arguments(&self, args: Value) -> Value {
        let Value::Object(mut m) = args else {
            return args;
        };
        // Pi 1.6's `prepareEditArguments`: `edits` sent as a JSON string, or as one edit
        // object instead of a one-element array, becomes the array.
        let single = |v: &Value| {
            v.as_object().is_some_and(|o| {
                o.get("oldText").is_some_and(Value::is_string)
                    && o.get("newText").is_some_and(Value::is_string)
            })
        };
        match m.get("edits") {
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Array(_)) => {
                    m.insert("edits".into(), v);
                }
                Ok(v) if single(&v) => {
                    m.insert("edits".into(), Value::Array(vec![v]));
                }
                _ => {}
            },
            Some(v) if single(v) => {
                let v = v.clone();
                m.insert("edits".into(), Value::Array(vec![v]));
            }
            _ => {}
        }
        if let (Some(Value::String(_)), Some(Value::String(_))) =
            (m.get("oldText"), m.get("newText"))
        {
            let old = m.remove("oldText").unwrap_or_default();
            let new = m.remove("newText").unwrap_or_default();
            let mut edits = match m.remove("edits") {
                Some(Value::Array(a)) => a,
                _ => Vec::new(),
            };
            edits.push(json!({"oldText": old, "newText": new}));
            m.insert("edits".into(), Value::Array(edits));
        }
        Value::Object(m)
    }

    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let started = std::time::Instant::now();
        let a: Args = parse_args("edit", args)?;
        let mut edits: Vec<(String, String)> = a
            .edits
            .into_iter()
            .map(|e| (e.old_text, e.new_text))
            .collect();
        if let (Some(o), Some(n)) = (a.old_text, a.new_text) {
            edits.push((o, n));
        }
        if edits.is_empty() {
            return Err(ToolError::new(
                "Edit tool input is invalid. edits must contain at least one replacement.",
            ));
        }
        let path = self.state.resolve(self.fs.root(), &a.path)?;
        let shown = display_path(self.fs.root(), &path);
        let mut snap = self
            .fs
            .read(&path)
            .await
            .map_err(|e| ToolError::new(format!("Could not edit file: {shown}. {e}")))?;
        // Case EDIT-08: the text changed since the model read it (or since its own last edit
        // made it). The edit is matched against the text as it is now (the editor's buffer,
        // unsaved typing included); when it no longer applies there, it is refused saying what
        // changed. When it still applies, the user's other changes (typing elsewhere in the
        // buffer, an undo of an earlier agent edit) do not block it: it goes on to the
        // approval question, which shows the diff against the current text, and its result
        // says the file had changed.
        let stale = self
            .state
            .reads
            .changed_since_read(&path, &snap.text, snap.version.is_none())
            .then(|| {
                // Where the change is: the editor's buffer (the user typing, unsaved changes
                // included) or the file on disk (another program, a command, the user's save).
                let r#where = if snap.version.is_some() {
                    "in the editor (the user changed the open buffer)"
                } else {
                    "on disk (the user, a command or another program changed the file)"
                };
                (
                    r#where,
                    self.state.reads.changes_since_read(&path, &snap.text),
                )
            });
        let read_at = started.elapsed();
        // Compute the change: the replacements, its diff and the hash of the text it makes,
        // from the plan alone (the edited whole text is never built).
        let mut plan = match plan_edits(&snap.text, &edits, &shown) {
            Ok(plan) => plan,
            Err(e) => {
                let Some((r#where, changes)) = &stale else {
                    return Err(ToolError::new(e));
                };
                let mut msg = format!("{shown} changed since you read it: it was changed {where}. Nothing was changed by this edit. Read {shown} again and redo the edit against its current text.");
                if let Some(changes) = changes {
                    msg.push_str("\n\n");
                    msg.push_str(changes);
                }
                if let Some(region) = closest_region(&snap.text, &edits[0].0) {
                    msg.push_str("\n\n");
                    msg.push_str(&region);
                }
                return Err(ToolError::new(msg));
            }
        };
        refuse_identical(&snap.text, &plan, edits.len(), &shown)?;
        let planned_at = started.elapsed();
        let mut diffs = plan_diffs(&shown, &snap.text, &plan);
        let diff = diffs.unified.clone();
        let mut after_hash = text_hash_after(&snap.text, &plan);
        let diffed_at = started.elapsed();
        // Apply it.
        let count = plan.len();
        // Approval step (crate::approval), between computing the change and applying it: when
        // the user was asked, the text must still be the one the question showed.
        let mut asked = false;
        if let Some(gate) = &self.state.approval {
            asked = gate
                .approve_change("edit", &ctx.call_id, &ctx.cancel, || ProposedChange {
                    path: shown.clone(),
                    diff: diff.clone(),
                    old_hash: Some(content_hash(&snap.text)),
                    new_hash: format!("xxh3:{after_hash:016x}"),
                })
                .await
                .map_err(ToolError::new)?;
            if asked {
                let now = recheck(&*self.fs, &path, &shown, Some(&snap.text))
                    .await
                    .map_err(ToolError::new)?;
                snap = now.unwrap_or(snap);
            }
        }
        let label = format!("pi: turn {} · edit {shown} ({})", ctx.turn, ctx.call_id);
        // The editor's buffer moved on between the read above and the apply: the user typed
        // while `workspace/applyEdit` was under way (LSP-02), and the editor answered
        // `applied: false`. When nobody was shown this edit's diff, it is planned once more
        // against the text as it is now and applied there if its `oldText` still matches
        // (case EDIT-08: edits are matched against the live buffer); an edit the user approved
        // is never applied in another form than the one they saw.
        let stale_apply = || {
            ToolError::new(format!(
                "{shown} changed while the edit was being applied (the user typed in it, or a program changed it). Nothing was changed by this edit. Read {shown} again and redo the edit against its current text."
            ))
        };
        let mut replanned = false;
        let record = loop {
            let record = super::file_change::FileChange::of_plan(
                path.clone(),
                &snap.text,
                &plan,
                content_hash(&snap.text),
                format!("xxh3:{after_hash:016x}"),
            );
            match self.fs.replace(&path, &snap, plan, &label).await {
                Ok(()) => break record,
                Err(crate::fs::FsError::Stale(_)) if !asked && !replanned => {
                    replanned = true;
                    snap = self.fs.read(&path).await.map_err(|e| {
                        ToolError::new(format!("Could not edit file: {shown}. {e}"))
                    })?;
                    plan = plan_edits(&snap.text, &edits, &shown).map_err(|_| stale_apply())?;
                    refuse_identical(&snap.text, &plan, edits.len(), &shown)?;
                    diffs = plan_diffs(&shown, &snap.text, &plan);
                    after_hash = text_hash_after(&snap.text, &plan);
                }
                Err(crate::fs::FsError::Stale(_)) => return Err(stale_apply()),
                Err(e) => return Err(ToolError::new(e.to_string())),
            }
        };
        self.state.reads.record_hash(&path, after_hash);
        // The server's own time for the edit and its phases (the tools bench reads them).
        tracing::debug!(
            elapsed_us = started.elapsed().as_micros() as u64,
            read_us = read_at.as_micros() as u64,
            plan_us = (planned_at - read_at).as_micros() as u64,
            diff_us = (diffed_at - planned_at).as_micros() as u64,
            replace_us = (started.elapsed() - diffed_at).as_micros() as u64,
            "edit {shown}: {count} block(s)"
        );
        let mut said = format!("Successfully replaced {count} block(s) in {shown}.");
        if let Some((r#where, changes)) = &stale {
            said.push_str(&format!("\n\nNote: {shown} had changed since you read it (it was changed {where}); your oldText still matched its current text, and the edit was made there."));
            if let Some(changes) = changes {
                said.push_str("\n\n");
                said.push_str(changes);
            }
        }
        if replanned {
            said.push_str(&format!("\n\nNote: {shown} changed while the edit was being applied (the user typed in it, or a program changed it); your oldText still matched its new text, and the edit was made there."));
        }
        if let Some(note) = self.fs.unsaved_note(&path).await {
            said.push_str("\n\n");
            said.push_str(&note);
        }
        Ok(ToolOutput {
            terminate: false,
            content: vec![pi_ai::ContentBlock::text(said)],
            details: Some(json!({"diff": diffs.numbered, "patch": diffs.patch,
                "firstChangedLine": diffs.first_changed,
                "unifiedDiff": diffs.unified, super::file_change::DETAILS_KEY: record.to_value()})),
            ..Default::default()
        })
    }
}

/// Refuses a plan whose replacements leave `text` as it is (Pi's "No changes made" error).
fn refuse_identical(
    text: &str,
    plan: &[TextReplace],
    edits: usize,
    shown: &str,
) -> Result<(), ToolError> {
    if plan.iter().all(|r| text[r.range.clone()] == r.new_text) {
        return Err(ToolError::new(if edits == 1 {
            format!("No changes made to {shown}. The replacement produced identical content. This might indicate an issue with special characters or the text not existing as expected.")
        } else {
            format!("No changes made to {shown}. The replacements produced identical content.")
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `details.diff` is Pi's numbered-line diff: the expected texts are what Pi 0.73.1's
    /// `generateDiffString` returns for the same old and new texts (run with node).
    #[test]
    #[allow(clippy::type_complexity)]
    fn numbered_diff_is_pis_generate_diff_string() {
        let twenty: String = (1..=20).map(|i| format!("{i}\n")).collect();
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str, usize);
        let cases: [Case; 4] = [
            ("alpha\nbeta\ngamma\n", &[("beta", "BETA")], " 1 alpha\n-2 beta\n+2 BETA\n 3 gamma", 2),
            (
                &twenty,
                &[("\n8\n", "\nEIGHT\n"), ("\n19\n", "\nNINETEEN\n")],
                "    ...\n  4 4\n  5 5\n  6 6\n  7 7\n- 8 8\n+ 8 EIGHT\n  9 9\n 10 10\n 11 11\n 12 12\n    ...\n 15 15\n 16 16\n 17 17\n 18 18\n-19 19\n+19 NINETEEN\n 20 20",
                8,
            ),
            ("a\nb\nc", &[("c", "c\nd")], " 1 a\n 2 b\n-3 c\n+3 c\n+4 d", 3),
            ("x\ny\n", &[("x\n", "")], "-1 x\n 2 y", 1),
        ];
        for (before, edits, want, line) in cases {
            let edits: Vec<(String, String)> = edits
                .iter()
                .map(|(o, n)| (o.to_string(), n.to_string()))
                .collect();
            let plan = plan_edits(before, &edits, "f").unwrap();
            let d = plan_diffs("f", before, &plan);
            assert_eq!(d.numbered, want, "{before:?} {edits:?}");
            assert_eq!(d.first_changed, line);
            assert_eq!(d.unified, plan_diff("f", before, &plan).0);
        }
    }

    fn e(o: &str, n: &str) -> Vec<(String, String)> {
        vec![(o.to_string(), n.to_string())]
    }

    #[test]
    fn crlf_file_keeps_its_line_ends() {
        // EDIT-01
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/cases/EDIT-01-crlf.txt"
        ))
        .unwrap();
        let plan = plan_edits(&text, &e("alpha\nbeta", "ALPHA\nBETA"), "f").unwrap();
        assert_eq!(apply_replacements(&text, &plan), "ALPHA\r\nBETA\r\ngamma");
    }

    #[test]
    fn overlapping_repeats_count_as_two() {
        // EDIT-03
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/cases/EDIT-03-overlap.txt"
        ))
        .unwrap();
        assert_eq!(
            plan_edits(&text, &e("foo\nfoo\n", "replacement"), "f").unwrap_err(),
            "Found 2 occurrences of the text in f (starting at lines 1, 2). The text must be unique. Please provide more context to make it unique."
        );
    }

    /// `plan_diff` of the plan `edits` make of `before` against a diff of the whole texts,
    /// and its first line against a count over the text.
    fn assert_plan_diff_is_whole_diff(before: &str, edits: &[(&str, &str)]) {
        let edits: Vec<(String, String)> = edits
            .iter()
            .map(|(o, n)| (o.to_string(), n.to_string()))
            .collect();
        let plan = plan_edits(before, &edits, "f").unwrap();
        let after = apply_replacements(before, &plan);
        let whole = similar::TextDiff::from_lines(before, &after)
            .unified_diff()
            .context_radius(4)
            .header("f", "f")
            .to_string();
        let (diff, line) = plan_diff("f", before, &plan);
        assert_eq!(diff, whole, "{edits:?}");
        let want_line = before[..plan[0].range.start].matches('\n').count() + 1;
        assert_eq!(line, want_line, "{edits:?}");
        assert_eq!(
            text_hash_after(before, &plan),
            super::super::text_hash(&after),
            "{edits:?}"
        );
    }

    #[test]
    fn diff_of_the_region_matches_a_whole_diff() {
        let before: String = (1..=60).map(|i| format!("line {i}\n")).collect();
        for edits in [
            vec![("line 30\n", "LINE 30\nextra\n")],
            vec![("line 1\n", "")],
            vec![("line 60\n", "end")],
            vec![("line 3\n", "3\n")],
            vec![("ne 3\n", "NE 3\n")],
            vec![("line 5\n", "five\n"), ("line 9\n", "nine\n")],
            vec![("line 2\n", "two\n"), ("line 50\n", "")],
            vec![("line 59\nline 60\n", "last")],
        ] {
            assert_plan_diff_is_whole_diff(&before, &edits);
        }
        // No final newline, CRLF.
        let tail = "a\nb\nc\nd\ne\nf\ng";
        assert_plan_diff_is_whole_diff(tail, &[("g", "G\n")]);
        assert_plan_diff_is_whole_diff(tail, &[("f\ng", "f")]);
        let crlf = "a\r\nb\r\nc\r\nd\r\ne\r\nf\r\ng\r\nh\r\ni\r\nj\r\n";
        assert_plan_diff_is_whole_diff(crlf, &[("e\nf", "E\nF\nX")]);
        assert_plan_diff_is_whole_diff(crlf, &[("j\n", "")]);
    }

    #[test]
    fn diff_of_the_region_of_a_large_text_matches_a_whole_diff() {
        let before: String = (1..=3000).map(|i| format!("row {i} 🦊\n")).collect();
        for edits in [
            vec![("row 1 🦊\n", "first\n")],
            vec![("row 455 🦊\n", "row 455 🦊\nadded\n")],
            vec![("row 1500 🦊\nrow 1501 🦊\n", "joined\n")],
            vec![("row 3000 🦊\n", "row 3000 🦊")],
            vec![("row 10 🦊\n", "ten\n"), ("row 2990 🦊\n", "")],
        ] {
            assert_plan_diff_is_whole_diff(&before, &edits);
        }
    }

    #[test]
    fn sessx03_diff_of_a_one_byte_edit_of_a_megabyte_line_is_small() {
        // A minified file: one 1 MB line; one byte changes in its middle.
        let mut text = String::new();
        for i in 0..80_000 {
            text.push_str(&format!("v{i}=1;"));
        }
        text.push('\n');
        let at = text.find("v40000=1;").unwrap() + "v40000=".len();
        let plan = vec![TextReplace {
            range: at..at + 1,
            new_text: "2".into(),
        }];
        let (diff, line) = plan_diff("m.js", &text, &plan);
        assert_eq!(line, 1);
        assert!(diff.len() < 1200, "{} bytes", diff.len());
        let lines: Vec<&str> = diff.lines().collect();
        assert_eq!(lines[..3], ["--- m.js", "+++ m.js", "@@ -1 +1 @@"]);
        let (old, new) = (lines[3], lines[4]);
        assert!(old.starts_with("-[… ") && new.starts_with("+[… "), "{old}");
        assert!(
            old.contains("v40000=1;") && new.contains("v40000=2;"),
            "{old}\n{new}"
        );
        // The elided byte counts add up to the line.
        let count = |l: &str| -> usize {
            l.split("[… ")
                .skip(1)
                .map(|p| p.split(' ').next().unwrap().parse::<usize>().unwrap())
                .sum()
        };
        let shown = |l: &str| -> usize {
            let mut s = l[1..].to_string();
            while let Some(i) = s.find("[… ") {
                let j = s[i..].find(" …]").unwrap() + i + " …]".len();
                s.replace_range(i..j, "");
            }
            s.len()
        };
        assert_eq!(count(old) + shown(old), text.len() - 1);
        assert_eq!(count(new) + shown(new), text.len() - 1);
        // Long unchanged context lines are clipped the same on both sides (not shown changed).
        let two = format!("{}\nshort\n", "x".repeat(5000));
        let at = two.find("short").unwrap();
        let plan = vec![TextReplace {
            range: at..at + 5,
            new_text: "SHORT".into(),
        }];
        let (diff, _) = plan_diff("t", &two, &plan);
        assert_eq!(
            diff,
            format!(
                "--- t\n+++ t\n@@ -1,2 +1,2 @@\n {}[… 4840 bytes …]\n-short\n+SHORT\n",
                "x".repeat(160)
            )
        );
    }

    #[test]
    fn overlapping_edits_are_refused() {
        let edits = vec![
            ("abc".to_string(), "x".to_string()),
            ("cde".to_string(), "y".to_string()),
        ];
        assert_eq!(
            plan_edits("abcdef", &edits, "f").unwrap_err(),
            "edits[0] and edits[1] overlap in f. Merge them into one edit or target disjoint regions."
        );
    }

    #[test]
    fn missing_text_reports_and_plans_nothing() {
        assert_eq!(
            plan_edits("x = 1\n", &e("y = 2", "y = 5"), "f").unwrap_err(),
            "Could not find the exact text in f. The old text must match exactly including all whitespace and newlines.\n\nClosest text in the file, lines 1-1 (→ is a tab, · a space):\n    1  x·=·1\nYour oldText:\n       y·=·2"
        );
    }
}

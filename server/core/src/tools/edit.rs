//! `edit {path, edits: [{oldText, newText}]}` (and the single `oldText`/`newText` form): exact
//! text replacement against the file's current text (an open buffer's unsaved text included).
//!
//! Rules (Pi 0.73.1 and cases EDIT-01..08): every `oldText` is matched against the original
//! text, not after earlier edits; it must match exactly once, counting matches at every start
//! offset (so `foo\nfoo\n` in `foo\nfoo\nfoo\n` is two matches); edits must not overlap;
//! `\n` in `oldText` / `newText` means the file's line ending (its first one, as Pi detects
//! it), and only the matched ranges change, so other lines keep theirs, a BOM stays once and a
//! missing final newline stays missing. Exact match first, then Pi's normalised fallback, then
//! a whitespace-tolerant line match (see [`super::edit_match`]). Matching is substring matching:
//! a partial line is fine when it is unique. A failed edit never changes the file.
//!
//! Stale reads (EDIT-08): when the model read the file and its text changed since (the user
//! typed in the buffer, a command rewrote it), the edit is refused and the model is told to read
//! again; the current text near the edit is shown. The result's `details.diff` is a unified
//! diff (`similar`, 4 lines of context) and `details.firstChangedLine` the 1-based line.

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Value};

use super::edit_match::{self, closest_region, MatchError};
use super::{display_path, parse_args, resolve_path_in, ToolState};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};
use crate::approval::{content_hash, recheck, ProposedChange};
use crate::fs::{apply_replacements, Fs, TextReplace};

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

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Lines of unchanged context in `details.diff`.
const DIFF_CONTEXT: usize = 4;

/// Blocks compared with `memcmp` before the byte-wise tail of [`common_prefix`].
const BLOCK: usize = 4096;

/// Length of the common prefix of `a` and `b` (block-wise, then byte-wise).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= n && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Length of the common suffix of `a` and `b`, at most `max`.
fn common_suffix(a: &[u8], b: &[u8], max: usize) -> usize {
    let n = a.len().min(b.len()).min(max);
    let (ea, eb) = (a.len(), b.len());
    let mut i = 0;
    while i + BLOCK <= n && a[ea - i - BLOCK..ea - i] == b[eb - i - BLOCK..eb - i] {
        i += BLOCK;
    }
    i + a[..ea - i]
        .iter()
        .rev()
        .zip(b[..eb - i].iter().rev())
        .take(n - i)
        .take_while(|(x, y)| x == y)
        .count()
}

/// The unified diff (`similar`, [`DIFF_CONTEXT`] lines of context) of `before` → `after`,
/// computed only on the changed middle: common leading and trailing lines (beyond the context)
/// are cut off first and the hunk headers shifted back, so a one-line edit of a 50,000-line
/// file does not diff 50,000 lines.
pub(crate) fn unified_diff(name: &str, before: &str, after: &str) -> String {
    let (b, a) = (before.as_bytes(), after.as_bytes());
    // Common prefix, cut back to a line start, then DIFF_CONTEXT lines more.
    let mut pre = common_prefix(b, a);
    pre = memchr::memrchr(b'\n', &b[..pre]).map_or(0, |i| i + 1);
    for _ in 0..DIFF_CONTEXT {
        if pre == 0 {
            break;
        }
        pre = memchr::memrchr(b'\n', &b[..pre - 1]).map_or(0, |i| i + 1);
    }
    let skipped_lines = memchr::memchr_iter(b'\n', &b[..pre]).count();
    // Common suffix (not overlapping the prefix), starting at a line start, plus context.
    let max_suf = (b.len() - pre).min(a.len() - pre);
    let mut suf = common_suffix(b, a, max_suf);
    // Keep the cut just after a newline in both texts.
    while suf > 0 && b[b.len() - suf - 1] != b'\n' {
        suf -= 1;
    }
    for _ in 0..DIFF_CONTEXT {
        if suf == 0 {
            break;
        }
        let rest = &b[b.len() - suf..];
        suf -= memchr::memchr(b'\n', rest).map_or(suf, |i| i + 1);
    }
    let old_mid = &before[pre..before.len() - suf];
    let new_mid = &after[pre..after.len() - suf];
    let diff = similar::TextDiff::from_lines(old_mid, new_mid)
        .unified_diff()
        .context_radius(DIFF_CONTEXT)
        .header(name, name)
        .to_string();
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
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "edit".into(),
            description: "Edit a single file using exact text replacement. Every edits[].oldText must match a unique, non-overlapping region of the original file. If two changes affect the same block or nearby lines, merge them into one edit instead of emitting overlapping edits. Do not include large unchanged regions just to connect distant changes.".into(),
            parameters: json!({"type":"object","required":["path","edits"],"properties":{
                "path":{"type":"string","description":"Path to the file to edit (relative or absolute)"},
                "edits":{"type":"array","items":{"type":"object","required":["oldText","newText"],"properties":{
                    "oldText":{"type":"string","description":"Exact text for one targeted replacement. It must be unique in the original file and must not overlap with any other edits[].oldText in the same call."},
                    "newText":{"type":"string","description":"Replacement text for this targeted edit."}},"additionalProperties":false},
                    "description":"One or more targeted replacements. Each edit is matched against the original file, not incrementally. Do not include overlapping or nested edits. If two changes touch the same block or nearby lines, merge them into one edit instead."}},
                "additionalProperties":false}),
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
        if let Some(Value::String(s)) = m.get("edits") {
            if let Ok(v @ Value::Array(_)) = serde_json::from_str::<Value>(s) {
                m.insert("edits".into(), v);
            }
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
        let path = resolve_path_in(self.fs.root(), &self.state.allowed_dirs, &a.path)?;
        let shown = display_path(self.fs.root(), &path);
        let mut snap = self
            .fs
            .read(&path)
            .await
            .map_err(|e| ToolError::new(format!("Could not edit file: {shown}. {e}")))?;
        if self.state.reads.changed_since_read(&path, &snap.text) {
            let mut msg = format!("{shown} changed since you read it (edited in the editor, on disk or by a command); nothing was changed. Read it again and redo the edit against the current text.");
            if let Some(region) = closest_region(&snap.text, &edits[0].0) {
                msg.push_str("\n\n");
                msg.push_str(&region);
            }
            return Err(ToolError::new(msg));
        }
        let read_at = started.elapsed();
        let plan = plan_edits(&snap.text, &edits, &shown).map_err(ToolError::new)?;
        let after = apply_replacements(&snap.text, &plan);
        let planned_at = started.elapsed();
        if after == snap.text {
            return Err(ToolError::new(if edits.len() == 1 {
                format!("No changes made to {shown}. The replacement produced identical content. This might indicate an issue with special characters or the text not existing as expected.")
            } else {
                format!("No changes made to {shown}. The replacements produced identical content.")
            }));
        }
        let first_changed = plan
            .first()
            .map(|r| line_of(&snap.text, r.range.start))
            .unwrap_or(1);
        let count = plan.len();
        // Approval step (crate::approval), between computing the change and applying it: when
        // the user was asked, the text must still be the one the question showed.
        if let Some(gate) = &self.state.approval {
            let asked = gate
                .approve_change("edit", &ctx.call_id, &ctx.cancel, || ProposedChange {
                    path: shown.clone(),
                    diff: unified_diff(&shown, &snap.text, &after),
                    old_hash: Some(content_hash(&snap.text)),
                    new_hash: content_hash(&after),
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
        self.fs
            .replace(&path, &snap, plan, &label)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
        let replaced_at = started.elapsed();
        self.state.reads.record(&path, &after);
        let diff = unified_diff(&shown, &snap.text, &after);
        // The server's own time for the edit and its phases (the tools bench reads them).
        tracing::debug!(
            elapsed_us = started.elapsed().as_micros() as u64,
            read_us = read_at.as_micros() as u64,
            plan_us = (planned_at - read_at).as_micros() as u64,
            replace_us = (replaced_at - planned_at).as_micros() as u64,
            diff_us = (started.elapsed() - replaced_at).as_micros() as u64,
            "edit {shown}: {count} block(s)"
        );
        Ok(ToolOutput {
            terminate: false,
            content: vec![pi_ai::ContentBlock::text(format!(
                "Successfully replaced {count} block(s) in {shown}."
            ))],
            details: Some(json!({"diff": diff, "firstChangedLine": first_changed})),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn diff_of_the_middle_matches_a_whole_diff() {
        let before: String = (1..=60).map(|i| format!("line {i}\n")).collect();
        for (from, to) in [
            ("line 30\n", "LINE 30\nextra\n"),
            ("line 1\n", ""),
            ("line 60\n", "end"),
            ("line 3\n", "3\n"),
        ] {
            let after = before.replacen(from, to, 1);
            let whole = similar::TextDiff::from_lines(&before, &after)
                .unified_diff()
                .context_radius(4)
                .header("f", "f")
                .to_string();
            assert_eq!(unified_diff("f", &before, &after), whole, "{from:?}");
        }
    }

    #[test]
    fn diff_of_the_middle_of_a_large_text_matches_a_whole_diff() {
        // Over many 4 KB blocks, so the block-wise prefix and suffix scans are exercised.
        let before: String = (1..=3000).map(|i| format!("row {i} 🦊\n")).collect();
        for (from, to) in [
            ("row 1 🦊\n", "first\n"),
            ("row 455 🦊\n", "row 455 🦊\nadded\n"),
            ("row 1500 🦊\nrow 1501 🦊\n", "joined\n"),
            ("row 3000 🦊\n", "row 3000 🦊"),
        ] {
            let after = before.replacen(from, to, 1);
            let whole = similar::TextDiff::from_lines(&before, &after)
                .unified_diff()
                .context_radius(4)
                .header("f", "f")
                .to_string();
            assert_eq!(unified_diff("f", &before, &after), whole, "{from:?}");
        }
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

//! `edit {path, edits: [{oldText, newText}]}` (and the single `oldText`/`newText` form): exact
//! text replacement against the file's current text (an open buffer's unsaved text included).
//!
//! Rules (Pi 0.73.1 and cases EDIT-01, EDIT-03): every `oldText` is matched against the original
//! text, not after earlier edits; it must match exactly once, counting matches at every start
//! offset (so `foo\nfoo\n` in `foo\nfoo\nfoo\n` is two matches); edits must not overlap; in a
//! CRLF file, `\n` in `oldText` / `newText` means the file's `\r\n`. Matching is substring
//! matching: a partial line is fine when it is unique. A failed edit never changes the file.
//! The result's `details.diff` is a unified diff (`similar`).

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{display_path, parse_args, resolve_path};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};
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
}

impl EditTool {
    pub fn new(fs: Arc<dyn Fs>) -> Self {
        EditTool { fs }
    }
}

/// Byte offsets of every match of `needle` in `hay`, overlapping ones included.
pub(crate) fn find_all(hay: &str, needle: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = hay[from..].find(needle) {
        let at = from + i;
        out.push(at);
        // Advance one char, not one match, so overlapping repeats count.
        from = at + hay[at..].chars().next().map(char::len_utf8).unwrap_or(1);
        if from > hay.len() {
            break;
        }
    }
    out
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Plans the replacements of `edits` in `text`, or says why none can be made.
pub(crate) fn plan_edits(
    text: &str,
    edits: &[(String, String)],
    shown: &str,
) -> Result<Vec<TextReplace>, String> {
    let crlf = text.contains("\r\n");
    let many = edits.len() > 1;
    let mut out: Vec<(usize, TextReplace)> = Vec::new();
    for (i, (old, new)) in edits.iter().enumerate() {
        let fix = |s: &str| {
            if crlf && !s.contains('\r') {
                s.replace('\n', "\r\n")
            } else {
                s.to_string()
            }
        };
        let (old, new) = (fix(old), fix(new));
        let which = if many {
            format!("edits[{i}]")
        } else {
            "the text".to_string()
        };
        if old.is_empty() {
            return Err(format!(
                "oldText of {which} is empty; give the exact text to replace in {shown}."
            ));
        }
        let hits = find_all(text, &old);
        match hits.len() {
            0 if many => return Err(format!("Could not find edits[{i}] in {shown}. The oldText must match exactly including all whitespace and newlines.")),
            0 => return Err(format!("Could not find the exact text in {shown}. The old text must match exactly including all whitespace and newlines.")),
            1 => {}
            n => {
                let lines: Vec<String> = hits.iter().map(|h| line_of(text, *h).to_string()).collect();
                return Err(format!(
                    "Found {n} occurrences of {which} in {shown} (starting at lines {}). The text must be unique. Please provide more context to make it unique.",
                    lines.join(", ")
                ));
            }
        }
        let start = hits[0];
        out.push((
            i,
            TextReplace {
                range: start..start + old.len(),
                new_text: new,
            },
        ));
    }
    out.sort_by_key(|(_, r)| r.range.start);
    for w in out.windows(2) {
        if w[1].1.range.start < w[0].1.range.end {
            return Err(format!(
                "edits[{}] and edits[{}] overlap in {shown}. Merge them into one edit.",
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

    async fn execute(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
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
            return Err(ToolError::new("Validation failed for tool \"edit\":\n  - edits: must have at least one {oldText, newText} entry"));
        }
        let path = resolve_path(self.fs.root(), &a.path)?;
        let shown = display_path(self.fs.root(), &path);
        let snap = self
            .fs
            .read(&path)
            .await
            .map_err(|e| ToolError::new(format!("Could not edit file: {shown}. {e}")))?;
        let plan = plan_edits(&snap.text, &edits, &shown).map_err(ToolError::new)?;
        let after = apply_replacements(&snap.text, &plan);
        if after == snap.text {
            return Err(ToolError::new(format!(
                "No changes made to {shown}. The replacement text is identical to the original."
            )));
        }
        let first_changed = plan
            .first()
            .map(|r| line_of(&snap.text, r.range.start))
            .unwrap_or(1);
        let count = plan.len();
        self.fs
            .replace(&path, &snap, plan)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
        let diff = similar::TextDiff::from_lines(&snap.text, &after)
            .unified_diff()
            .context_radius(4)
            .header(&shown, &shown)
            .to_string();
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
    fn overlapping_edits_are_refused() {
        let edits = vec![
            ("abc".to_string(), "x".to_string()),
            ("cde".to_string(), "y".to_string()),
        ];
        assert_eq!(
            plan_edits("abcdef", &edits, "f").unwrap_err(),
            "edits[0] and edits[1] overlap in f. Merge them into one edit."
        );
    }

    #[test]
    fn missing_text_reports_and_plans_nothing() {
        assert_eq!(
            plan_edits("x = 1\n", &e("y = 2", "y = 5"), "f").unwrap_err(),
            "Could not find the exact text in f. The old text must match exactly including all whitespace and newlines."
        );
    }
}

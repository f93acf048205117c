//! `write {path, content}`: creates or overwrites a file, creating parent folders; through the
//! editor when one is attached.
//!
//! Case EDIT-06: when an overwrite shrinks a file by more than 90 % and the new content holds a
//! placeholder such as `... existing code ...` (the model meant "keep the rest"), the write
//! still happens (as in Pi) but the old text is first copied to a temp file and the result
//! warns and names that copy.
//!
//! The result's `details` carry the change for editors and rewinds: `unifiedDiff` and
//! `fileChange` (see [`super::file_change`]); Pi's own `write` has no details.

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Value};

use super::edit::{minimal_replace, plan_diff};
use super::file_change::{FileChange, DETAILS_KEY};
use super::{display_path, parse_args, ToolState};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};
use crate::approval::{content_hash, recheck, ProposedChange};
use crate::fs::Fs;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

/// The `write` tool.
pub struct WriteTool {
    fs: Arc<dyn Fs>,
    state: Arc<ToolState>,
}

impl WriteTool {
    /// A write tool over `fs`; the written text is recorded in `state.reads`.
    pub fn new(fs: Arc<dyn Fs>, state: Arc<ToolState>) -> Self {
        WriteTool { fs, state }
    }
}

/// True for text that looks like an elision placeholder (`// ... existing code ...`,
/// `# ... rest unchanged ...`).
fn has_placeholder(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim().to_ascii_lowercase();
        (t.contains("...") || t.contains('…'))
            && (t.contains("existing") || t.contains("unchanged") || t.contains("rest of"))
    })
}

/// `details` of a write of `after` over `before` (`None`: a new file): the unified diff
/// (`unifiedDiff`, clipped like an edit's) and the change record (`fileChange`, see
/// [`super::file_change`]).
fn change_details(
    path: std::path::PathBuf,
    shown: &str,
    before: Option<&str>,
    after: &str,
) -> Value {
    let change = minimal_replace(before.unwrap_or(""), after);
    let plan = [change];
    let diff = if plan[0].range.is_empty() && plan[0].new_text.is_empty() {
        String::new()
    } else {
        plan_diff(shown, before.unwrap_or(""), &plan).0
    };
    let record = match before {
        Some(b) => FileChange::of_plan(path, b, &plan, content_hash(b), content_hash(after)),
        None => FileChange {
            path,
            hash_before: None,
            hash_after: content_hash(after),
            edits: Vec::new(),
        },
    };
    json!({"unifiedDiff": diff, DETAILS_KEY: record.to_value()})
}

#[async_trait]
impl Tool for WriteTool {
    /// Pi's `promptSnippet` of `write` (`core/tools/write.js`, 1.6).
    fn prompt_snippet(&self) -> Option<String> {
        Some("Create or overwrite files".into())
    }

    /// Pi's `promptGuidelines` of `write` (`core/tools/write.js`, 1.6).
    fn prompt_guidelines(&self) -> Vec<String> {
        ["Use write only for new files or complete rewrites."]
            .map(String::from)
            .to_vec()
    }

    /// For the approval policy: changes files, asking with its change.
    fn approval_kind(&self) -> crate::approval::ToolKind {
        crate::approval::ToolKind::Edit
    }

    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed("write")
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
 // Pi 1.6: `constrainedSampling: { type: "json_schema", strict: "prefer" }`.
 constrained_sampling: Some(pi_ai::ConstrainedSampling::PREFER_JSON_SCHEMA),
            name: "write".into(),
            description: "Write content to a file. Creates the file if it doesn't exist, overwrites if it does. Automatically creates parent directories.".into(),
            parameters: json!({"type":"object","required":["path","content"],"properties":{
                "path":{"type":"string","description":"Path to the file to write (relative or absolute)"},
                "content":{"type":"string","description":"Content to write to the file"}}}),
        }
    }

    /// Mutates the workspace: a batch containing it runs in call order.
    fn sequential(&self) -> bool {
        true
    }

    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("write", args)?;
        let path = self.state.resolve(self.fs.root(), &a.path)?;
        let shown = display_path(self.fs.root(), &path);
        let mut warning = String::new();
        // The text replaced (for the change record; `None` for a new file, `Err` when it
        // cannot be read as text, which leaves the write without a record).
        let mut before = match self.fs.read(&path).await {
            Ok(s) => Ok(Some(s.text)),
            Err(crate::fs::FsError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        };
        if let Ok(Some(old)) = &before {
            if old.len() > 10 * a.content.len().max(1) && has_placeholder(&a.content) {
                let copy = std::env::temp_dir().join(format!(
                    "pi-write-backup-{}-{}",
                    uuid::Uuid::new_v4(),
                    path.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                ));
                let saved = crate::fs::atomic_write(&copy, old.as_bytes()).await.is_ok();
                warning = format!(
                    "\n\n[Warning: the new content is {} bytes, the old file was {} bytes, and it contains a placeholder like \"... existing code ...\": the omitted code is now gone from {shown}.{} Write the complete file, or use edit for partial changes.]",
                    a.content.len(),
                    old.len(),
                    if saved { format!(" The previous text was saved to {}.", copy.display()) } else { String::new() }
                );
            }
        }
        // Writing over a buffer that holds the user's unsaved text always asks, whatever the
        // policy, showing what is lost (the user's unsaved text is theirs).
        let mut replaced_unsaved = false;
        if let Some(gate) = self
            .state
            .approval
            .as_ref()
            .filter(|_| self.fs.has_buffer(&path))
        {
            if self.fs.unsaved_note(&path).await.is_some() {
                let old = self.fs.read(&path).await.ok().map(|s| s.text);
                let old = old.as_ref().map(|t| t.as_str()).unwrap_or("");
                let change = minimal_replace(old, &a.content);
                let lost = old[change.range.clone()].lines().count();
                let reason = format!(
                    "write replaces {shown}, whose editor buffer holds unsaved text of the user's: {lost} line(s) of it are lost (the − lines)"
                );
                let proposed = ProposedChange {
                    path: shown.clone(),
                    diff: plan_diff(&shown, old, &[change]).0,
                    old_hash: Some(content_hash(old)),
                    new_hash: content_hash(&a.content),
                };
                gate.approve_overwrite(
                    "write",
                    &ctx.call_id,
                    json!({"path": a.path, "content": a.content}),
                    &ctx.cancel,
                    reason,
                    proposed,
                )
                .await
                .map_err(ToolError::new)?;
                let now = recheck(&*self.fs, &path, &shown, Some(old))
                    .await
                    .map_err(ToolError::new)?;
                before = Ok(now.map(|s| s.text));
                replaced_unsaved = true;
            }
        }
        // Approval step (crate::approval), between computing the change and applying it: when
        // the user was asked, the file must still be the one the question showed.
        if let Some(gate) = self
            .state
            .approval
            .as_ref()
            .filter(|g| g.is_deferred(&ctx.call_id))
        {
            let old = self.fs.read(&path).await.ok().map(|s| s.text);
            let old = old.as_ref().map(|t| t.as_str());
            gate.approve_change("write", &ctx.call_id, &ctx.cancel, || ProposedChange {
                path: shown.clone(),
                diff: {
                    let before = old.unwrap_or("");
                    let change = minimal_replace(before, &a.content);
                    if change.range.is_empty() && change.new_text.is_empty() {
                        String::new()
                    } else {
                        plan_diff(&shown, before, &[change]).0
                    }
                },
                old_hash: old.map(content_hash),
                new_hash: content_hash(&a.content),
            })
            .await
            .map_err(ToolError::new)?;
            let now = recheck(&*self.fs, &path, &shown, old)
                .await
                .map_err(ToolError::new)?;
            before = Ok(now.map(|s| s.text));
        }
        let label = format!("pi: turn {} · write {shown} ({})", ctx.turn, ctx.call_id);
        self.fs
            .write(&path, &a.content, &label)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
        self.state.reads.record(&path, &a.content);
        // Pi 1.6's words (`write.js`; 0.73.1 named the bytes).
        let mut out = ToolOutput::text(format!(
            "Successfully wrote to {shown}{}{warning}",
            if replaced_unsaved {
                ". The editor's buffer held unsaved text of the user's; the user allowed replacing it"
            } else {
                ""
            },
        ));
        if let Ok(before) = before {
            out.details = Some(change_details(
                path,
                &shown,
                before.as_deref().map(|t| t.as_str()),
                &a.content,
            ));
        }
        Ok(out)
    }
}

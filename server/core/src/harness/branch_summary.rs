//! Branch summaries written by the model, as Pi 1.6.0's `core/compaction/branch-summarization`
//! (`prepareBranchEntries`, `generateBranchSummary`): when the user leaves a branch, the
//! entries left behind become Pi's agent messages (no tool results: the call says what was
//! done; each entry's `context_edit` among them applied; earlier branch summaries and
//! compactions as their summary messages), newest first within a token budget, serialised with
//! Pi's serializer, and sent with the one summarisation system prompt
//! ([`crate::compaction::SUMMARIZATION_SYSTEM_PROMPT`]) and Pi's branch instructions, asking no
//! cache (as every summary request: [`crate::compaction::complete_summary`]). The answer is
//! stored as a `branch_summary` entry at the new position with Pi's preamble and the files the
//! left entries read and changed.
//!
//! Pi 1.6 routes a branch summary under a fresh session id (`completeSummarization`'s
//! `sessionId ?? uuidv7()`), but with `cacheRetention: "none"` no wire it speaks sends it (no
//! `prompt_cache_key`, no session or affinity headers, also under `PI_CACHE_RETENTION=long`:
//! the request's explicit retention wins), so the request here names no session.

use std::collections::HashMap;

use pi_ai::{Message, Model, Usage};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::compaction::{
    complete_summary, format_file_operations, pi_estimate_tokens, replace_value_content,
    serialize_conversation_as_pi, summary_context, CompactionError, FileOps, SummaryKind,
    SummaryRetry, DEFAULT_RESERVE_TOKENS,
};
use crate::session::{convert_message, Entry};

/// Pi's `BRANCH_SUMMARY_PREAMBLE`, put before the model's summary.
pub const PREAMBLE: &str =
    "The user explored a different conversation branch before returning here.\nSummary of that exploration:\n\n";

/// Pi's `BRANCH_SUMMARY_PROMPT` (the same bytes in Pi 0.73.1 and 1.6.0). The request asks
/// Pi 1.6's output limit ([`crate::compaction::summary_max_tokens`]), as its history summary.
const INSTRUCTIONS: &str = "Create a structured summary of this conversation branch for context when returning later.\n\nUse this EXACT format:\n\n## Goal\n[What was the user trying to accomplish in this branch?]\n\n## Constraints & Preferences\n- [Any constraints, preferences, or requirements mentioned]\n- [Or \"(none)\" if none were mentioned]\n\n## Progress\n### Done\n- [x] [Completed tasks/changes]\n\n### In Progress\n- [ ] [Work that was started but not finished]\n\n### Blocked\n- [Issues preventing progress, if any]\n\n## Key Decisions\n- **[Decision]**: [Brief rationale]\n\n## Next Steps\n1. [What should happen next to continue this work]\n\nKeep each section concise. Preserve exact file paths, function names, and error messages.";

/// Pi's summary of a branch left with nothing to summarise (without the preamble, as Pi).
pub const NO_CONTENT: &str = "No content to summarize";

/// Pi 1.6's `branchSummary.reserveTokens` default: the summarised messages are at most the
/// context window (128,000 when unknown) less this many tokens (`generateBranchSummary`).
pub const RESERVE_TOKENS: u64 = DEFAULT_RESERVE_TOKENS;

/// How a branch summary is asked for (Pi 1.6's `navigateTree` options and
/// `branchSummary` settings as `generateBranchSummary` takes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryOptions {
    /// Pi's `customInstructions`: "Additional focus" after Pi's prompt; an empty one adds
    /// nothing.
    pub custom_instructions: Option<String>,
    /// Pi's `replaceInstructions`: the custom instructions stand instead of Pi's prompt
    /// (only when there are some).
    pub replace_instructions: bool,
    /// `branchSummary.reserveTokens`: the left messages summarised are at most the context
    /// window less these tokens ([`RESERVE_TOKENS`] by default).
    pub reserve_tokens: u64,
}

impl Default for SummaryOptions {
    fn default() -> Self {
        SummaryOptions {
            custom_instructions: None,
            replace_instructions: false,
            reserve_tokens: RESERVE_TOKENS,
        }
    }
}

/// A branch summary as the `branch_summary` entry stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchSummary {
    /// Pi's preamble, the model's summary and the `<read-files>` / `<modified-files>` lists;
    /// or [`NO_CONTENT`] when the left entries hold no message.
    pub summary: String,
    /// `{readFiles, modifiedFiles}` (both empty for [`NO_CONTENT`]).
    pub details: Value,
    /// The summary request's usage; `None` when nothing was asked.
    pub usage: Option<Usage>,
}

/// Pi 1.6's agent message (as stored: the JSON of a message, or Pi's `custom` /
/// `branchSummary` / `compactionSummary` message) of entry `e` for a branch summary
/// (`getMessageFromEntry`): none for a tool result (its call says what was done) or an entry
/// holding no message; a message or custom message that `edits` (target id → replacement, the
/// left entries' latest `context_edit` each) leaves out gives none, one it replaces gets the
/// replacement's content.
fn agent_message(e: &Entry, edits: &HashMap<String, Value>) -> Option<Value> {
    let raw = e.raw();
    let mut m = match e.kind.as_str() {
        "message" if e.role() == Some("toolResult") => return None,
        "message" => raw["message"].clone(),
        "custom_message" => json!({"role": "custom", "content": raw["content"]}),
        "branch_summary" => {
            return Some(json!({"role": "branchSummary", "summary": raw["summary"]}))
        }
        "compaction" => {
            return Some(json!({"role": "compactionSummary", "summary": raw["summary"]}))
        }
        _ => return None,
    };
    match edits.get(e.id.as_str()) {
        Some(r) if r.is_null() => None,
        Some(r) => {
            replace_value_content(&mut m, r);
            Some(m)
        }
        None => Some(m),
    }
}

/// What Pi 1.6's `prepareBranchEntries` makes of `entries` (chronological) with a budget of
/// `token_budget` tokens (0: none): the messages summarised, oldest first (`None` for one the
/// model never sees, a system message or a `!!` command's output, which still counts), and
/// the files read and changed. The file lists gather every pi-written (not `fromHook`) branch
/// summary's `details` among the entries, then the `read` / `write` / `edit` calls of the
/// messages walked from the newest; the walk stops at the first message over the budget (a
/// summary entry still goes in while under 90 % of it).
fn prepare_branch_entries(
    entries: &[&Entry],
    token_budget: u64,
) -> (Vec<Option<Message>>, FileOps) {
    let mut ops = FileOps::default();
    for e in entries.iter().filter(|e| e.kind == "branch_summary") {
        let r = e.raw();
        if r["fromHook"] == true || !r["details"].is_object() {
            continue;
        }
        let files = |k: &str| -> Vec<String> {
            r["details"][k]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        };
        ops.read.extend(files("readFiles"));
        ops.edited.extend(files("modifiedFiles"));
    }
    let mut edits = HashMap::new();
    for e in entries.iter().filter(|e| e.kind == "context_edit") {
        let mut raw = e.raw();
        if let Some(target) = raw["targetId"].as_str().map(str::to_string) {
            let replacement = raw
                .as_object_mut()
                .and_then(|o| o.remove("replacement"))
                .unwrap_or(Value::Null);
            edits.insert(target, replacement);
        }
    }
    let mut picked = Vec::new();
    let mut total = 0u64;
    for e in entries.iter().rev() {
        let Some(m) = agent_message(e, &edits) else {
            continue;
        };
        let message = convert_message(&m);
        if m["role"] == "assistant" {
            if let Some(a) = &message {
                ops.add_calls(a);
            }
        }
        let tokens = pi_estimate_tokens(&m);
        if token_budget > 0 && total + tokens > token_budget {
            let summary = matches!(e.kind.as_str(), "compaction" | "branch_summary");
            if summary && (total as f64) < token_budget as f64 * 0.9 {
                picked.push(message);
            }
            break;
        }
        picked.push(message);
        total += tokens;
    }
    picked.reverse();
    (picked, ops)
}

/// [`branch_summary_with`] with `custom_instructions` as Pi's "Additional focus" and Pi's
/// default reserve.
pub async fn branch_summary(
    model: &Model,
    entries: &[&Entry],
    custom_instructions: Option<&str>,
    cancel: &CancellationToken,
) -> Result<BranchSummary, String> {
    let options = SummaryOptions {
        custom_instructions: custom_instructions.map(str::to_string),
        ..SummaryOptions::default()
    };
    branch_summary_with(model, entries, &options, SummaryRetry::default(), cancel).await
}

/// Asks `model` to summarise `entries` (the entries left, chronological; `cancel` stops it)
/// as Pi 1.6's `generateBranchSummary`: the newest messages that fit the context window
/// (128,000 when unknown) less `options.reserve_tokens`; Pi's prompt, with the custom
/// instructions as its "Additional focus", or instead of it with `replace_instructions`
/// ([`SummaryOptions`]). An answer without text is asked for once more; a second one fails
/// the summary: no empty summary is written (case 18.11). The request is retried as `retry`
/// says (Pi 1.6's `completeSummarization`). A failure is worded as Pi's,
/// "Branch summarization failed: …" ([`SummaryKind::Branch`]).
pub async fn branch_summary_with(
    model: &Model,
    entries: &[&Entry],
    options: &SummaryOptions,
    retry: SummaryRetry<'_>,
    cancel: &CancellationToken,
) -> Result<BranchSummary, String> {
    let window = match model.context_window {
        0 => 128_000,
        w => w,
    };
    let (picked, ops) =
        prepare_branch_entries(entries, window.saturating_sub(options.reserve_tokens));
    if picked.is_empty() {
        return Ok(BranchSummary {
            summary: NO_CONTENT.to_string(),
            details: json!({"readFiles": [], "modifiedFiles": []}),
            usage: None,
        });
    }
    let messages: Vec<Message> = picked.into_iter().flatten().collect();
    let conversation = serialize_conversation_as_pi(&messages);
    // Pi: `replaceInstructions && customInstructions` (an empty string is false there).
    let instructions = match options
        .custom_instructions
        .as_deref()
        .filter(|c| !c.is_empty())
    {
        Some(c) if options.replace_instructions => c.to_string(),
        Some(c) => format!("{INSTRUCTIONS}\n\nAdditional focus: {c}"),
        None => INSTRUCTIONS.to_string(),
    };
    let context = summary_context(format!(
        "<conversation>\n{conversation}\n</conversation>\n\n{instructions}"
    ));
    let (text, usage) = complete_summary(model, &context, SummaryKind::Branch, retry, cancel)
        .await
        .map_err(|e| match e {
            CompactionError::Cancelled => "Branch summarization was cancelled".to_string(),
            e => e.to_string(),
        })?;
    let (read, modified) = ops.lists();
    Ok(BranchSummary {
        summary: format!(
            "{PREAMBLE}{text}{}",
            format_file_operations(&read, &modified)
        ),
        details: json!({"readFiles": read, "modifiedFiles": modified}),
        usage: Some(usage),
    })
}

//! Branch summaries written by the model (Pi 0.73.1 `compaction/branch-summarization`): when
//! the user leaves a branch, the entries left behind are serialised as text with the one
//! conversation serializer of compaction ([`serialize_conversation`]), sent with the one
//! summarisation system prompt ([`crate::compaction::SUMMARIZATION_SYSTEM_PROMPT`]) and Pi's
//! branch instructions, and the answer is stored as a `branch_summary` entry at the new
//! position with Pi's preamble.

use pi_ai::{Message, Model};
use tokio_util::sync::CancellationToken;

use crate::compaction::{complete_summary, serialize_conversation, summary_context};
use crate::session::{convert_message, Entry};

/// Pi's `BRANCH_SUMMARY_PREAMBLE`, put before the model's summary.
pub const PREAMBLE: &str =
    "The user explored a different conversation branch before returning here.\nSummary of that exploration:\n\n";

/// Pi's `BRANCH_SUMMARY_PROMPT` (the same bytes in Pi 0.73.1 and 1.6.0). The request asks
/// Pi 1.6's output limit ([`crate::compaction::summary_max_tokens`]), as its history summary.
const INSTRUCTIONS: &str = "Create a structured summary of this conversation branch for context when returning later.\n\nUse this EXACT format:\n\n## Goal\n[What was the user trying to accomplish in this branch?]\n\n## Constraints & Preferences\n- [Any constraints, preferences, or requirements mentioned]\n- [Or \"(none)\" if none were mentioned]\n\n## Progress\n### Done\n- [x] [Completed tasks/changes]\n\n### In Progress\n- [ ] [Work that was started but not finished]\n\n### Blocked\n- [Issues preventing progress, if any]\n\n## Key Decisions\n- **[Decision]**: [Brief rationale]\n\n## Next Steps\n1. [What should happen next to continue this work]\n\nKeep each section concise. Preserve exact file paths, function names, and error messages.";

/// The messages of `entries` the summary covers: messages, custom messages, and earlier
/// branch summaries (as user text).
fn messages_of(entries: &[&Entry]) -> Vec<Message> {
    entries
        .iter()
        .filter_map(|e| match e.kind.as_str() {
            "message" => e.message(),
            "custom_message" => {
                let mut v = e.raw();
                v["role"] = serde_json::json!("custom");
                convert_message(&v)
            }
            "branch_summary" => e.raw()["summary"]
                .as_str()
                .map(|s| Message::user_text(s.to_string())),
            _ => None,
        })
        .collect()
}

/// Pi's summary of a branch left with nothing to summarise (without the preamble, as Pi).
pub const NO_CONTENT: &str = "No content to summarize";

/// Asks `model` to summarise `entries` (`cancel` stops it); the summary with Pi's preamble and
/// the summary request's usage (none when nothing was asked), or why it failed. An answer without text is asked for once more; a second one fails the
/// summary: no empty summary is written (case 18.11).
pub async fn branch_summary(
    model: &Model,
    entries: &[&Entry],
    custom_instructions: Option<&str>,
    cancel: &CancellationToken,
) -> Result<(String, Option<pi_ai::Usage>), String> {
    let conversation = serialize_conversation(&messages_of(entries));
    if conversation.is_empty() {
        return Ok((NO_CONTENT.to_string(), None));
    }
    let instructions = match custom_instructions.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) => format!("{INSTRUCTIONS}\n\nAdditional focus: {c}"),
        None => INSTRUCTIONS.to_string(),
    };
    let context = summary_context(format!(
        "<conversation>\n{conversation}\n</conversation>\n\n{instructions}"
    ));
    complete_summary(model, &context, cancel)
        .await
        .map(|(text, usage)| (format!("{PREAMBLE}{text}"), Some(usage)))
        .map_err(|e| format!("the branch summary failed: {e}"))
}

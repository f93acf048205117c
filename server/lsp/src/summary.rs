//! Branch summaries written by the model (Pi 0.73.1 `compaction/branch-summarization`): when
//! the user leaves a branch, the entries left behind are serialised as text (so the model
//! does not continue the conversation), sent with Pi's summarisation system prompt and
//! instructions, and the answer is stored as a `branch_summary` entry at the new position
//! with Pi's preamble.

use pi_ai::{Context, Message, Model, StopReason, StreamOptions};
use pi_core::session::{convert_message, Entry};
use tokio_util::sync::CancellationToken;

/// Pi's `SUMMARIZATION_SYSTEM_PROMPT`.
const SYSTEM_PROMPT: &str = "You are a context summarization assistant. Your task is to read a conversation between a user and an AI coding assistant, then produce a structured summary following the exact format specified.\n\nDo NOT continue the conversation. Do NOT respond to any questions in the conversation. ONLY output the structured summary.";

/// Pi's `BRANCH_SUMMARY_PREAMBLE`, put before the model's summary.
pub const PREAMBLE: &str =
    "The user explored a different conversation branch before returning here.\nSummary of that exploration:\n\n";

/// Pi's summary of a branch left with nothing to summarise (without the preamble, as Pi).
pub const NO_CONTENT: &str = "No content to summarize";

/// Pi's `BRANCH_SUMMARY_PROMPT`.
const INSTRUCTIONS: &str = "Create a structured summary of this conversation branch for context when returning later.\n\nUse this EXACT format:\n\n## Goal\n[What was the user trying to accomplish in this branch?]\n\n## Constraints & Preferences\n- [Any constraints, preferences, or requirements mentioned]\n- [Or \"(none)\" if none were mentioned]\n\n## Progress\n### Done\n- [x] [Completed tasks/changes]\n\n### In Progress\n- [ ] [Work that was started but not finished]\n\n### Blocked\n- [Issues preventing progress, if any]\n\n## Key Decisions\n- **[Decision]**: [Brief rationale]\n\n## Next Steps\n1. [What should happen next to continue this work]\n\nKeep each section concise. Preserve exact file paths, function names, and error messages.";

/// Longest tool result kept in the serialised conversation, in characters.
const MAX_RESULT_CHARS: usize = 2000;

/// The conversation of `entries` as Pi's `serializeConversation` writes it.
pub fn serialize(entries: &[&Entry]) -> String {
    let mut parts = Vec::new();
    for e in entries {
        let m = match e.kind.as_str() {
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
        };
        match m {
            Some(Message::User(u)) => {
                let t = u.content.to_text();
                if !t.is_empty() {
                    parts.push(format!("[User]: {t}"));
                }
            }
            Some(Message::Assistant(a)) => {
                let mut thinking = Vec::new();
                let mut text = Vec::new();
                let mut calls = Vec::new();
                for b in &a.content {
                    match b {
                        pi_ai::ContentBlock::Text(t) => text.push(t.text.clone()),
                        pi_ai::ContentBlock::Thinking(t) => thinking.push(t.thinking.clone()),
                        pi_ai::ContentBlock::ToolCall(c) => {
                            let args = c
                                .arguments
                                .as_object()
                                .map(|o| {
                                    o.iter()
                                        .map(|(k, v)| format!("{k}={v}"))
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                })
                                .unwrap_or_default();
                            calls.push(format!("{}({args})", c.name));
                        }
                        _ => {}
                    }
                }
                if !thinking.is_empty() {
                    parts.push(format!("[Assistant thinking]: {}", thinking.join("\n")));
                }
                if !text.is_empty() {
                    parts.push(format!("[Assistant]: {}", text.join("\n")));
                }
                if !calls.is_empty() {
                    parts.push(format!("[Assistant tool calls]: {}", calls.join("; ")));
                }
            }
            Some(Message::ToolResult(r)) => {
                let t: String = pi_ai::join_text(&r.content)
                    .chars()
                    .take(MAX_RESULT_CHARS)
                    .collect();
                if !t.is_empty() {
                    parts.push(format!("[Tool result]: {t}"));
                }
            }
            None => {}
        }
    }
    parts.join("\n\n")
}

/// Asks `model` to summarise `entries`; the summary with Pi's preamble, or why it failed.
pub async fn branch_summary(
    model: &Model,
    entries: &[&Entry],
    custom_instructions: Option<&str>,
) -> Result<String, String> {
    let conversation = serialize(entries);
    if conversation.is_empty() {
        return Ok(NO_CONTENT.to_string());
    }
    let instructions = match custom_instructions.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) => format!("{INSTRUCTIONS}\n\nAdditional focus: {c}"),
        None => INSTRUCTIONS.to_string(),
    };
    let context = Context {
        system_prompt: SYSTEM_PROMPT.to_string(),
        messages: vec![Message::user_text(format!(
            "<conversation>\n{conversation}\n</conversation>\n\n{instructions}"
        ))],
        tools: Vec::new(),
    };
    // An answer without text (empty, or only a tool call) is asked for once more; a second
    // one fails the summary: no empty summary is written (case 18.11).
    for attempt in 1..=2 {
        let m = pi_ai::stream(
            model,
            &context,
            StreamOptions {
                cancel: CancellationToken::new(),
                max_tokens: Some(2048),
                ..StreamOptions::default()
            },
        )
        .result()
        .await;
        match m.stop_reason {
            StopReason::Error | StopReason::Aborted => {
                return Err(format!(
                    "the branch summary failed: {}",
                    m.error_message
                        .as_deref()
                        .unwrap_or("the model request failed")
                ))
            }
            _ if m.text().trim().is_empty() => {
                tracing::warn!("the branch summary model answered with no text ({attempt} of 2)");
            }
            _ => return Ok(format!("{PREAMBLE}{}", m.text())),
        }
    }
    Err("the branch summary failed: the model answered with no text twice".into())
}

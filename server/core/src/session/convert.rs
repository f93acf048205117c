//! Stored messages converted to what the model sees (every role Pi writes), and Pi's wrappers of summaries.

use pi_ai::{ContentBlock, Message, UserContent, UserMessage};
use serde::Deserialize;
use serde_json::Value;

/// Pi's prefix of a compaction summary in the model context.
pub const COMPACTION_SUMMARY_PREFIX: &str =
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
/// Pi's suffix of a compaction summary.
pub const COMPACTION_SUMMARY_SUFFIX: &str = "\n</summary>";
/// Pi's prefix of a branch summary in the model context.
pub const BRANCH_SUMMARY_PREFIX: &str =
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
/// Pi's suffix of a branch summary.
pub const BRANCH_SUMMARY_SUFFIX: &str = "</summary>";

pub(super) fn str_of(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

pub(super) fn user(text: String, timestamp: i64) -> Message {
    Message::User(UserMessage {
        content: UserContent::Blocks(vec![ContentBlock::text(text)]),
        timestamp,
    })
}

pub(super) fn user_content(content: &Value, timestamp: i64) -> Option<Message> {
    let content = UserContent::deserialize(content).ok()?;
    let content = match content {
        UserContent::Text(t) => UserContent::Blocks(vec![ContentBlock::text(t)]),
        b => b,
    };
    Some(Message::User(UserMessage { content, timestamp }))
}

pub(super) fn millis(entry_ts: &Value) -> i64 {
    entry_ts
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|d| d.timestamp_millis())
        .unwrap_or(0)
}

/// Pi's text for a `bashExecution` message.
pub fn bash_execution_text(m: &Value) -> String {
    let mut text = format!("Ran `{}`\n", m["command"].as_str().unwrap_or(""));
    match m["output"].as_str().filter(|o| !o.is_empty()) {
        Some(o) => text.push_str(&format!("```\n{o}\n```")),
        None => text.push_str("(no output)"),
    }
    if m["cancelled"].as_bool() == Some(true) {
        text.push_str("\n\n(command cancelled)");
    } else if let Some(code) = m["exitCode"].as_i64().filter(|c| *c != 0) {
        text.push_str(&format!("\n\nCommand exited with code {code}"));
    }
    if m["truncated"].as_bool() == Some(true) {
        if let Some(p) = m["fullOutputPath"].as_str() {
            text.push_str(&format!("\n\n[Output truncated. Full output: {p}]"));
        }
    }
    text
}

/// Converts one stored message (any role Pi writes) to what the model sees, or `None` when it
/// is not model-visible.
pub fn convert_message(m: &Value) -> Option<Message> {
    let ts = m["timestamp"].as_i64().unwrap_or(0);
    match m["role"].as_str()? {
        // Deserialized from the borrowed value: no copy of the stored JSON.
        "user" | "assistant" | "toolResult" => Message::deserialize(m).ok(),
        "bashExecution" if m["excludeFromContext"].as_bool() == Some(true) => None,
        "bashExecution" => Some(user(bash_execution_text(m), ts)),
        "custom" | "hookMessage" => user_content(&m["content"], ts),
        "branchSummary" => Some(user(
            format!(
                "{BRANCH_SUMMARY_PREFIX}{}{BRANCH_SUMMARY_SUFFIX}",
                m["summary"].as_str().unwrap_or("")
            ),
            ts,
        )),
        "compactionSummary" => Some(user(
            format!(
                "{COMPACTION_SUMMARY_PREFIX}{}{COMPACTION_SUMMARY_SUFFIX}",
                m["summary"].as_str().unwrap_or("")
            ),
            ts,
        )),
        _ => None,
    }
}

//! `context_edit` entries (Pi 1.6 `docs/session-format.md` "ContextEditEntry",
//! `buildSessionProjection`): an append-only edit of one earlier context-producing entry that
//! changes only the model's future context. `replacement: null` leaves the target out of the
//! context; any other replacement replaces only the target message's content. Pi 1.6's
//! `SessionManager.appendContextEdit` writes it as `{"content": string | blocks}`; a bare string
//! or block list is read the same way. A string for an assistant or tool result becomes one text
//! block, as those roles hold block lists. When
//! several edits on the active branch target the same entry, the latest wins; edits off the
//! branch do nothing. The target entry itself is never changed: history, exports and session
//! accounting show it as stored.

use std::collections::HashMap;

use pi_ai::{ContentBlock, Message, UserContent};
use serde::Deserialize;
use serde_json::Value;

/// The latest edit of each target on one path: target id → (edit entry id, replacement).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContextEdits(pub(super) HashMap<String, (String, Value)>);

impl ContextEdits {
    /// The edit of entry `id`: `(edit entry id, replacement)`.
    pub fn get(&self, id: &str) -> Option<&(String, Value)> {
        self.0.get(id)
    }

    /// Whether entry `id` is left out of the context (`replacement: null`).
    pub fn omits(&self, id: &str) -> bool {
        self.get(id).is_some_and(|(_, r)| r.is_null())
    }

    /// `message` (the model-visible message of `entry`) with the entry's edit applied: `None`
    /// when the edit omits it; its content replaced when the edit replaces it and the entry
    /// holds editable content, as Pi 1.6's `projectContextEntry`: a `message` of role user,
    /// assistant or tool result, or a `custom_message` (whose string becomes one text block,
    /// as Pi's `convertToLlm` turns a custom message's string into a user message's block);
    /// any other entry (a user's `!` command, a branch summary) is kept as it is.
    pub fn apply(&self, entry: &super::Entry, message: Option<Message>) -> Option<Message> {
        match self.get(&entry.id) {
            None => message,
            Some((_, r)) if r.is_null() => None,
            Some((_, r)) => message.map(|m| match edit_target(entry) {
                Some(Target::Message) => replace_content(m, r),
                Some(Target::Custom) => replace_content(m, &as_blocks(r)),
                None => m,
            }),
        }
    }
}

/// What an edit of an entry replaces ([`ContextEdits::apply`]).
enum Target {
    /// A `message` entry of role user, assistant or tool result.
    Message,
    /// A `custom_message` entry.
    Custom,
}

fn edit_target(entry: &super::Entry) -> Option<Target> {
    match entry.kind.as_str() {
        "custom_message" => Some(Target::Custom),
        "message" => matches!(entry.role(), Some("user" | "assistant" | "toolResult"))
            .then_some(Target::Message),
        _ => None,
    }
}

/// A replacement whose text content is one text block (a string, bare or as `content`).
fn as_blocks(replacement: &Value) -> Value {
    match content_of(replacement) {
        Value::String(t) => serde_json::json!([{"type": "text", "text": t}]),
        _ => replacement.clone(),
    }
}

/// The content a replacement gives: Pi 1.6's `{"content": …}`, or the value itself.
fn content_of(replacement: &Value) -> &Value {
    match replacement {
        Value::Object(o) => o.get("content").unwrap_or(replacement),
        other => other,
    }
}

/// `m` with its content replaced by `replacement`: Pi 1.6's `{"content": string | blocks}`, or
/// the string or blocks themselves; a replacement that is none of these keeps the message as it
/// was.
pub fn replace_content(m: Message, replacement: &Value) -> Message {
    let Ok(content) = UserContent::deserialize(content_of(replacement)) else {
        tracing::warn!("context_edit replacement is neither text nor content blocks: ignored");
        return m;
    };
    let blocks = |c: UserContent| match c {
        UserContent::Text(t) => vec![ContentBlock::text(t)],
        UserContent::Blocks(b) => b,
    };
    match m {
        Message::User(mut u) => {
            u.content = content;
            Message::User(u)
        }
        Message::Assistant(mut a) => {
            a.content = blocks(content);
            Message::Assistant(a)
        }
        Message::ToolResult(mut r) => {
            r.content = blocks(content);
            Message::ToolResult(r)
        }
        // Never in a session's context (stored system messages are entries of their own).
        Message::System(s) => Message::System(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replacements_keep_role_and_metadata_and_wrap_strings_for_block_roles() {
        let a: Message = serde_json::from_value(json!({"role":"assistant","content":[{"type":"text","text":"long"}],"api":"x","provider":"p","model":"m","usage":{},"stopReason":"stop","timestamp":4})).unwrap();
        let Message::Assistant(got) = replace_content(a, &json!("short")) else {
            panic!("role changed")
        };
        assert_eq!(got.content, vec![ContentBlock::text("short")]);
        assert_eq!((got.model.as_str(), got.timestamp), ("m", 4));
        let u: Message =
            serde_json::from_value(json!({"role":"user","content":"a","timestamp":1})).unwrap();
        assert_eq!(
            serde_json::to_value(replace_content(u, &json!("b"))).unwrap(),
            json!({"role":"user","content":"b","timestamp":1})
        );
    }

    /// Pi 1.6's writer wraps the content: `{"content": string | blocks}`.
    #[test]
    fn pi_16s_wrapped_replacement_replaces_the_content() {
        let u: Message =
            serde_json::from_value(json!({"role":"user","content":"a","timestamp":1})).unwrap();
        let blocks = json!([{"type": "text", "text": "b"}]);
        assert_eq!(
            serde_json::to_value(replace_content(u.clone(), &json!({ "content": blocks })))
                .unwrap(),
            json!({"role":"user","content":blocks,"timestamp":1})
        );
        assert_eq!(
            serde_json::to_value(replace_content(u.clone(), &json!({"content": "c"}))).unwrap(),
            json!({"role":"user","content":"c","timestamp":1})
        );
        // An object without content keeps the message.
        assert_eq!(replace_content(u.clone(), &json!({"text": "d"})), u);
    }
}

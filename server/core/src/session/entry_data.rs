//! What the harness appends to a session file: one typed value per entry kind, written with
//! Pi's keys in Pi's order (`type`, `id`, `parentId`, `timestamp` come from the writer). The
//! fields Pi 1.6 added (`systemMessage` and `usage` on a compaction, `usage` on a branch
//! summary) are left out when absent, as Pi 0.73.1 wrote them.

use serde::Serialize;
use serde_json::Value;

/// The data of one entry to append ([`super::SessionWriter::append`]); the `type` is the
/// variant's name in snake case, the fields are Pi's (camelCase).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum EntryData {
    /// A conversation message (`message`).
    Message { message: StoredMessage },
    /// The session's model changed (`model_change`).
    ModelChange { provider: String, model_id: String },
    /// The thinking level changed (`thinking_level_change`; Pi's level names, `off` included).
    ThinkingLevelChange { thinking_level: String },
    /// A compaction (`compaction`): the summary replaces the entries before
    /// `firstKeptEntryId`; `details` is `{readFiles, modifiedFiles}`; `fromHook` is Pi's (true
    /// only when an extension made it).
    Compaction {
        summary: String,
        first_kept_entry_id: String,
        tokens_before: u64,
        details: Value,
        /// Pi 1.6: the usage of the summary requests (before `fromHook`, as Pi 1.6 writes it).
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<pi_ai::Usage>,
        from_hook: bool,
        /// Pi 1.6: the complete prompt/tool checkpoint at the boundary
        /// ([`super::SystemState::checkpoint`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        system_message: Option<Value>,
    },
    /// What an abandoned branch concluded (`branch_summary`), attached at `fromId` (`"root"`
    /// for the root); `details` `{readFiles, modifiedFiles}` when known.
    BranchSummary {
        from_id: String,
        summary: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
        /// Pi 1.6: the usage of the summary request (before `fromHook`, as Pi 1.6 writes it).
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<pi_ai::Usage>,
        from_hook: bool,
    },
    /// Sets (or, without `label`, clears) the label of entry `targetId` (`label`).
    Label {
        target_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// Names the session (`session_info`).
    SessionInfo { name: String },
    /// Pi 1.6's `context_edit`: on the active branch, the model's context shows entry
    /// `targetId` with `replacement`'s content, or without it when `replacement` is `null`
    /// (written so as Pi 1.6 writes it for a failed response before it is retried); the entry
    /// itself stays in the file and in the history.
    ContextEdit {
        target_id: String,
        replacement: Option<Value>,
    },
    /// An extension's (or the harness's) state (`custom`): never in the model's context.
    Custom { custom_type: String, data: Value },
    /// A custom message (`custom_message`): in the model's context as a user message.
    /// `content` is a string or text / image blocks (Pi's shapes).
    CustomMessage {
        custom_type: String,
        content: Value,
        display: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
}

/// The `message` of a `message` entry: one of pi-ai's roles, or Pi's `bashExecution` (the
/// user's own shell command).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StoredMessage {
    /// Boxed: an assistant message is several times the size of the other variants.
    Message(Box<pi_ai::Message>),
    BashExecution(BashExecution),
    /// A message as JSON with fields pi-ai's types do not hold: an assistant message or tool
    /// result with Pi 1.6's `durationMs` / `thinkingLevel` (see
    /// [`super::SessionWriter::append_message_stamped`]), a stored system message
    /// ([`super::SystemState::patch_to`]).
    Json(Value),
}

/// Pi's `bashExecution` message: a command the user ran (`!cmd`), its output (truncated as Pi
/// truncates it), `exitCode` (`None` when it was killed), whether it was cancelled, and where
/// the full output went when it was cut. `excludeFromContext` (`!!cmd`) keeps it from the
/// model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename = "bashExecution", rename_all = "camelCase")]
pub struct BashExecution {
    pub command: String,
    pub output: String,
    pub exit_code: Option<i32>,
    pub cancelled: bool,
    pub truncated: bool,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_output_path: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exclude_from_context: bool,
}

impl EntryData {
    /// The entry's `type` and its fields (an object), as the writer puts them on the line.
    pub(crate) fn into_parts(self) -> (String, Value) {
        // A message already held as JSON (every assistant message and tool result of a run:
        // they carry Pi 1.6's stamps) is moved in as it is: serialising the enum would copy
        // it value by value into the same JSON.
        if let EntryData::Message {
            message: StoredMessage::Json(message),
        } = self
        {
            let mut fields = serde_json::Map::new();
            fields.insert("message".into(), message);
            return ("message".into(), Value::Object(fields));
        }
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        let kind = v
            .as_object_mut()
            .and_then(|o| o.shift_remove("type"))
            .and_then(|t| t.as_str().map(str::to_string))
            .unwrap_or_default();
        (kind, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_json_message_is_moved_in_as_serialising_it_would_give() {
        let message = json!({"role":"toolResult","toolCallId":"c1","toolName":"read",
            "content":[{"type":"text","text":"hé"}],"isError":false,"timestamp":1,"durationMs":2.5});
        let data = EntryData::Message {
            message: StoredMessage::Json(message.clone()),
        };
        let mut whole = serde_json::to_value(&data).unwrap();
        whole.as_object_mut().unwrap().shift_remove("type");
        let (kind, v) = data.into_parts();
        assert_eq!(kind, "message");
        assert_eq!(v, whole);
        assert_eq!(v.to_string(), whole.to_string());
        assert_eq!(v, json!({ "message": message }));
    }

    #[test]
    fn entries_serialize_with_pis_keys_in_pis_order() {
        let (kind, v) = EntryData::BranchSummary {
            from_id: "root".into(),
            summary: "s".into(),
            details: None,
            from_hook: false,
            usage: None,
        }
        .into_parts();
        assert_eq!(kind, "branch_summary");
        assert_eq!(
            v.to_string(),
            r#"{"fromId":"root","summary":"s","fromHook":false}"#
        );
        let (kind, v) = EntryData::Message {
            message: StoredMessage::BashExecution(BashExecution {
                command: "ls".into(),
                output: "a\n".into(),
                exit_code: Some(0),
                cancelled: false,
                truncated: false,
                timestamp: 5,
                full_output_path: None,
                exclude_from_context: false,
            }),
        }
        .into_parts();
        assert_eq!(kind, "message");
        assert_eq!(
            v,
            json!({"message": {"role": "bashExecution", "command": "ls", "output": "a\n",
                "exitCode": 0, "cancelled": false, "truncated": false, "timestamp": 5}})
        );
        let (kind, v) = EntryData::Label {
            target_id: "e1".into(),
            label: None,
        }
        .into_parts();
        assert_eq!((kind.as_str(), v), ("label", json!({"targetId": "e1"})));
    }
}

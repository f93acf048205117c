//! How Pi's tool calls look in ACP: the `kind` (read / edit / delete / move / search /
//! execute / fetch / think / other), a title a person reads, `locations` (absolute paths, with
//! the 1-based line a `read` starts at), and the content of a finished call (its text; for
//! `edit` / `write` a `diff` per change).

use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::{
    ContentBlock, Diff, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus,
    ToolCallUpdateFields, ToolKind,
};
use serde_json::Value;

/// The ACP kind of Pi's tool `name` (extension tools: `other`; editor-like names by name).
pub fn kind(name: &str) -> ToolKind {
    match name {
        "read" => ToolKind::Read,
        "edit" | "write" => ToolKind::Edit,
        "bash" => ToolKind::Execute,
        "grep" | "find" | "ls" => ToolKind::Search,
        "fetch" | "web_fetch" | "webfetch" => ToolKind::Fetch,
        "delete" | "rm" => ToolKind::Delete,
        "move" | "mv" | "rename" => ToolKind::Move,
        "think" | "todo" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

fn abs(cwd: &Path, p: &str) -> PathBuf {
    let p = p.strip_prefix('@').unwrap_or(p);
    let path = Path::new(p);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// A short title: `Read src/main.rs:10`, `Edit notes.txt`, `` `cargo test` ``, `grep "foo" in src`.
pub fn title(name: &str, args: &Value) -> String {
    let path = str_arg(args, "path");
    match (name, path) {
        ("read", Some(p)) => match args.get("offset").and_then(Value::as_u64) {
            Some(o) => format!("Read {p}:{o}"),
            None => format!("Read {p}"),
        },
        ("edit", Some(p)) => format!("Edit {p}"),
        ("write", Some(p)) => format!("Write {p}"),
        ("bash", _) => match str_arg(args, "command") {
            Some(c) => format!("`{}`", first_line(c, 200)),
            None => "bash".into(),
        },
        ("grep", _) => format!(
            "grep {:?}{}",
            str_arg(args, "pattern").unwrap_or_default(),
            path.map(|p| format!(" in {p}")).unwrap_or_default()
        ),
        ("find", _) => format!(
            "find {}{}",
            str_arg(args, "pattern").unwrap_or("*"),
            path.map(|p| format!(" in {p}")).unwrap_or_default()
        ),
        ("ls", _) => format!("ls {}", path.unwrap_or(".")),
        (other, Some(p)) => format!("{other} {p}"),
        (other, None) => other.to_string(),
    }
}

fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(max).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// The files a call touches (absolute paths; `read` with its 1-based start line).
pub fn locations(cwd: &Path, name: &str, args: &Value) -> Vec<ToolCallLocation> {
    let Some(p) = str_arg(args, "path") else {
        return if matches!(name, "grep" | "find" | "ls") {
            vec![ToolCallLocation::new(cwd.to_path_buf())]
        } else {
            Vec::new()
        };
    };
    let mut loc = ToolCallLocation::new(abs(cwd, p));
    if name == "read" {
        let line = args
            .get("offset")
            .and_then(Value::as_u64)
            .and_then(|o| u32::try_from(o).ok())
            .unwrap_or(1);
        loc = loc.line(line);
    }
    vec![loc]
}

/// The `diff` contents of an `edit` / `write` call from its arguments: one per replaced text
/// (`oldText` → `newText`; Pi 1.6's `edits: [{oldText, newText}]` too), the whole new text
/// for `write` (`oldText` absent: a new or overwritten file).
pub fn diffs(cwd: &Path, name: &str, args: &Value) -> Vec<ToolCallContent> {
    let Some(p) = str_arg(args, "path") else {
        return Vec::new();
    };
    let path = abs(cwd, p);
    match name {
        "write" => match str_arg(args, "content") {
            Some(c) => vec![ToolCallContent::Diff(Diff::new(path, c))],
            None => Vec::new(),
        },
        "edit" => {
            let one = |e: &Value| {
                let new = str_arg(e, "newText")?;
                let old = str_arg(e, "oldText").map(str::to_string);
                Some(ToolCallContent::Diff(
                    Diff::new(path.clone(), new).old_text(old),
                ))
            };
            match args.get("edits").and_then(Value::as_array) {
                Some(list) => list.iter().filter_map(one).collect(),
                None => one(args).into_iter().collect(),
            }
        }
        _ => Vec::new(),
    }
}

/// Text content of a tool result.
pub fn text_content(text: String) -> ToolCallContent {
    ToolCallContent::from(ContentBlock::from(text))
}

/// The `tool_call` announcing a call (status `pending`: it may still ask for permission).
pub fn announce(cwd: &Path, id: &str, name: &str, args: &Value) -> ToolCall {
    ToolCall::new(id.to_string(), title(name, args))
        .kind(kind(name))
        .status(ToolCallStatus::Pending)
        .locations(locations(cwd, name, args))
        .raw_input(Some(args.clone()))
}

/// The client's terminal `terminal_id` as a call's content (`{type: "terminal", terminalId}`).
pub fn terminal_content(terminal_id: String) -> ToolCallContent {
    ToolCallContent::Terminal(agent_client_protocol_schema::v1::Terminal::new(terminal_id))
}

/// The fields of a finished call: status, content (text, plus the diffs of a successful
/// edit), raw output.
pub fn finished(
    cwd: &Path,
    name: &str,
    args: Option<&Value>,
    text: String,
    is_error: bool,
    details: Option<Value>,
) -> ToolCallUpdateFields {
    let mut content = Vec::new();
    if !is_error {
        if let Some(a) = args {
            content.extend(diffs(cwd, name, a));
        }
    }
    if !text.is_empty() {
        content.push(text_content(text.clone()));
    }
    let mut raw = serde_json::json!({"content": text, "isError": is_error});
    if let Some(d) = details {
        raw["details"] = d;
    }
    ToolCallUpdateFields::new()
        .status(if is_error {
            ToolCallStatus::Failed
        } else {
            ToolCallStatus::Completed
        })
        .content(content)
        .raw_output(Some(raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_read_is_announced_with_its_kind_title_and_line() {
        let t = announce(
            Path::new("/ws"),
            "c1",
            "read",
            &json!({"path": "src/a.rs", "offset": 10}),
        );
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({
                "toolCallId": "c1", "title": "Read src/a.rs:10", "kind": "read",
                "locations": [{"path": "/ws/src/a.rs", "line": 10}],
                "rawInput": {"path": "src/a.rs", "offset": 10}
            })
        );
    }

    #[test]
    fn an_edit_finishes_with_a_diff_per_change() {
        let f = finished(
            Path::new("/ws"),
            "edit",
            Some(&json!({"path": "n.txt", "oldText": "a", "newText": "b"})),
            "Edited n.txt".into(),
            false,
            None,
        );
        assert_eq!(
            serde_json::to_value(&f).unwrap(),
            json!({
                "status": "completed",
                "content": [
                    {"type": "diff", "path": "/ws/n.txt", "oldText": "a", "newText": "b"},
                    {"type": "content", "content": {"type": "text", "text": "Edited n.txt"}}
                ],
                "rawOutput": {"content": "Edited n.txt", "isError": false}
            })
        );
    }

    #[test]
    fn kinds_follow_the_tool() {
        let k = |n| serde_json::to_value(kind(n)).unwrap();
        assert_eq!(
            [
                "read",
                "edit",
                "write",
                "bash",
                "grep",
                "find",
                "ls",
                "tmux_start"
            ]
            .map(k),
            ["read", "edit", "edit", "execute", "search", "search", "search", "other"]
                .map(|s| json!(s))
        );
    }
}

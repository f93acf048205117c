//! What clients are shown of a session tree: the model's context as Pi's `get_messages` gives
//! it ([`context_agent_messages`]) and pages of the active branch's entries for display
//! ([`SessionTree::history`]).
//!
//! Pi 0.73.1 `buildSessionContext` (session-manager.js) and `createCustomMessage` /
//! `createBranchSummaryMessage` / `createCompactionSummaryMessage` (messages.js) are the rule for
//! the first: with a `compaction` on the path (the last one), its summary comes first, then the
//! entries from its `firstKeptEntryId` up to it, then everything after it; `message` entries
//! give their `message` as stored, `custom_message` a `custom` message, `branch_summary` (with
//! a summary) a `branchSummary` message; other entries give nothing.

use serde_json::{json, Map, Value};

use super::tree::{Entry, SessionTree};

/// Largest page [`SessionTree::history`] returns.
pub const HISTORY_MAX_LIMIT: usize = 500;
/// Page size when the client gives none.
pub const HISTORY_DEFAULT_LIMIT: usize = 50;

/// The entries of a root-to-leaf `path` that make the model's context, in context order
/// (Pi's `buildSessionContext`): the last `compaction` first, then the kept entries from its
/// `firstKeptEntryId` (none when that id is not on the path before it), then the entries
/// after it; without a compaction every entry of the path. Entries that give no message are
/// left out (see [`agent_message`]).
pub fn context_entries<'a>(path: &[&'a Entry]) -> Vec<&'a Entry> {
    let gives = |e: &&Entry| agent_message_kind(e);
    let Some(ci) = path.iter().rposition(|e| e.kind == "compaction") else {
        return path.iter().copied().filter(gives).collect();
    };
    let first_kept = path[ci].raw()["firstKeptEntryId"]
        .as_str()
        .map(str::to_string);
    let start = path[..ci]
        .iter()
        .position(|e| Some(e.id.as_str()) == first_kept.as_deref())
        .unwrap_or(ci);
    // Pi 1.6: the compaction's checkpoint stands for the system messages it kept.
    std::iter::once(path[ci])
        .chain(
            path[start..ci]
                .iter()
                .copied()
                .filter(|e| gives(e) && !super::is_system(e)),
        )
        .chain(path[ci + 1..].iter().copied().filter(gives))
        .collect()
}

/// Whether `e` can give a context message (before reading its text).
fn agent_message_kind(e: &&Entry) -> bool {
    matches!(
        e.kind.as_str(),
        "message" | "custom_message" | "branch_summary" | "compaction"
    )
}

/// Pi's timestamp of a summary or custom message: `new Date(entry.timestamp).getTime()`
/// (milliseconds; `null` where JavaScript gets `NaN`).
fn millis(ts: &Value) -> Value {
    ts.as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|d| json!(d.timestamp_millis()))
        .unwrap_or(Value::Null)
}

/// The `AgentMessage` JSON Pi's `get_messages` gives for entry `e` of the context:
/// `message` → its `message` as stored; `custom_message` → `{role: "custom", customType,
/// content, display?, details?, timestamp}`; `branch_summary` with a non-empty summary →
/// `{role: "branchSummary", summary, fromId, timestamp}`; `compaction` →
/// `{role: "compactionSummary", summary, tokensBefore, timestamp}` (timestamps in ms). Any other
/// entry: `None`.
pub fn agent_message(e: &Entry) -> Option<Value> {
    if !agent_message_kind(&e) {
        return None;
    }
    let mut raw = e.raw();
    let r = raw.as_object_mut()?;
    let mut take = |k: &str| r.remove(k);
    let mut out = Map::new();
    match e.kind.as_str() {
        "message" => return take("message"),
        "custom_message" => {
            out.insert("role".into(), json!("custom"));
            out.insert("customType".into(), take("customType").unwrap_or_default());
            out.insert("content".into(), take("content").unwrap_or_default());
            // JSON.stringify leaves out what is `undefined`.
            if let Some(d) = take("display") {
                out.insert("display".into(), d);
            }
            if let Some(d) = take("details") {
                out.insert("details".into(), d);
            }
        }
        "branch_summary" => {
            let summary = take("summary").filter(|s| s.as_str().is_some_and(|s| !s.is_empty()))?;
            out.insert("role".into(), json!("branchSummary"));
            out.insert("summary".into(), summary);
            if let Some(f) = take("fromId") {
                out.insert("fromId".into(), f);
            }
        }
        _ => {
            out.insert("role".into(), json!("compactionSummary"));
            out.insert("summary".into(), take("summary").unwrap_or_default());
            if let Some(t) = take("tokensBefore") {
                out.insert("tokensBefore".into(), t);
            }
        }
    }
    out.insert(
        "timestamp".into(),
        millis(&take("timestamp").unwrap_or_default()),
    );
    Some(Value::Object(out))
}

/// The model's context at `leaf` as Pi's `get_messages` shows it: `(entry id, AgentMessage)`
/// pairs in context order ([`context_entries`], [`agent_message`]). `None` leaf: empty (Pi:
/// "navigated to before first entry").
pub fn context_agent_messages(tree: &SessionTree, leaf: Option<&str>) -> Vec<(String, Value)> {
    let Some(leaf) = leaf else {
        return Vec::new();
    };
    let path = tree.path(leaf);
    let edits = super::ContextEdits::on_path(&path);
    let mut out = Vec::new();
    for e in context_entries(&path) {
        if e.kind == "compaction" {
            // Pi 1.6: the complete system checkpoint, then the summary.
            if let Some(m) = e.raw().get("systemMessage") {
                out.push((e.id.to_string(), m.clone()));
            }
        }
        let Some(mut m) = agent_message(e) else {
            continue;
        };
        // A `context_edit` changes the model's context only: the message is shown as stored,
        // marked with the edit (`contextEdit: {id, replacement}`; null: left out).
        if let Some((id, replacement)) = edits.as_ref().and_then(|x| x.get(&e.id)) {
            if let Some(o) = m.as_object_mut() {
                o.insert(
                    "contextEdit".into(),
                    json!({"id": id, "replacement": replacement}),
                );
            }
        }
        out.push((e.id.to_string(), m));
    }
    out
}

/// One page of a branch's entries ([`SessionTree::history`]).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryPage {
    /// The entries as stored in the file (`{type, id, parentId, timestamp, …}`), oldest first.
    pub entries: Vec<Value>,
    /// Older entries exist on the branch before the first one of this page.
    pub has_more: bool,
}

/// Why a history page cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// `beforeEntryId` is not an entry of the root-to-leaf path.
    #[error("entry {0} is not on the active branch")]
    NotOnBranch(String),
}

impl SessionTree {
    /// The `limit` (clamped to 1..=[`HISTORY_MAX_LIMIT`]) newest entries of the root-to-`leaf`
    /// path strictly before `before` (`None`: up to and including the leaf), oldest first, as
    /// stored. Every entry type stays in place (compactions, branch summaries, labels, model
    /// changes…): this is the branch for display, not the model's context. A `None` leaf has
    /// no entries. Cost: one walk of the path (by id) plus reading the page's lines.
    pub fn history(
        &self,
        leaf: Option<&str>,
        before: Option<&str>,
        limit: usize,
    ) -> Result<HistoryPage, HistoryError> {
        let limit = limit.clamp(1, HISTORY_MAX_LIMIT);
        let Some(leaf) = leaf else {
            return match before {
                Some(b) => Err(HistoryError::NotOnBranch(b.to_string())),
                None => Ok(HistoryPage {
                    entries: Vec::new(),
                    has_more: false,
                }),
            };
        };
        // Leaf first: the page is the first `limit` after skipping to `before`.
        let mut walk = self.ancestors(leaf);
        if let Some(b) = before {
            if !walk.by_ref().any(|e| e.id == b) {
                return Err(HistoryError::NotOnBranch(b.to_string()));
            }
        }
        let mut page: Vec<&Entry> = walk.by_ref().take(limit).collect();
        let has_more = walk.next().is_some();
        page.reverse();
        Ok(HistoryPage {
            entries: page.into_iter().map(Entry::raw).collect(),
            has_more,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(lines: Value) -> SessionTree {
        let mut v = lines.as_array().unwrap().clone();
        let header = v.remove(0);
        SessionTree::from_values(header, v, Vec::new())
    }

    /// A compacted session: u1 a1 u2 a2 | compaction (kept from u2) | u3 a3, plus a label,
    /// a custom message and a branch summary.
    fn compacted() -> SessionTree {
        tree(json!([
            {"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"},
            {"type":"model_change","id":"m0","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","provider":"p","modelId":"m"},
            {"type":"message","id":"u1","parentId":"m0","timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"one","timestamp":1}},
            {"type":"message","id":"a1","parentId":"u1","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"r1"}],"stopReason":"stop","timestamp":2}},
            {"type":"message","id":"u2","parentId":"a1","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"user","content":"two","timestamp":3}},
            {"type":"message","id":"a2","parentId":"u2","timestamp":"2026-01-01T00:00:04.000Z","message":{"role":"assistant","content":[{"type":"text","text":"r2"}],"stopReason":"stop","timestamp":4}},
            {"type":"compaction","id":"c1","parentId":"a2","timestamp":"2026-01-01T00:00:05.000Z","summary":"S","firstKeptEntryId":"u2","tokensBefore":900},
            {"type":"label","id":"l1","parentId":"c1","timestamp":"2026-01-01T00:00:06.000Z","targetId":"u1","label":"start"},
            {"type":"custom_message","id":"x1","parentId":"l1","timestamp":"2026-01-01T00:00:07.000Z","customType":"note","content":"hey","display":true},
            {"type":"branch_summary","id":"b1","parentId":"x1","timestamp":"2026-01-01T00:00:08.000Z","fromId":"zz","summary":"B"},
            {"type":"branch_summary","id":"b2","parentId":"b1","timestamp":"2026-01-01T00:00:08.500Z","fromId":"zz","summary":""},
            {"type":"message","id":"u3","parentId":"b2","timestamp":"2026-01-01T00:00:09.000Z","message":{"role":"user","content":"three","timestamp":9}},
        ]))
    }

    #[test]
    fn context_is_summary_first_then_kept_then_after_as_pi() {
        let t = compacted();
        let got = context_agent_messages(&t, Some("u3"));
        assert_eq!(
            got,
            vec![
                (
                    "c1".to_string(),
                    json!({"role":"compactionSummary","summary":"S","tokensBefore":900,"timestamp":1767225605000i64})
                ),
                (
                    "u2".to_string(),
                    json!({"role":"user","content":"two","timestamp":3})
                ),
                (
                    "a2".to_string(),
                    json!({"role":"assistant","content":[{"type":"text","text":"r2"}],"stopReason":"stop","timestamp":4})
                ),
                (
                    "x1".to_string(),
                    json!({"role":"custom","customType":"note","content":"hey","display":true,"timestamp":1767225607000i64})
                ),
                (
                    "b1".to_string(),
                    json!({"role":"branchSummary","summary":"B","fromId":"zz","timestamp":1767225608000i64})
                ),
                (
                    "u3".to_string(),
                    json!({"role":"user","content":"three","timestamp":9})
                ),
            ]
        );
        assert_eq!(context_agent_messages(&t, None), Vec::new());
        // The context's length is the agent's message count.
        assert_eq!(
            got.len(),
            t.context(Some("u3")).messages.len(),
            "{:?}",
            t.context(Some("u3")).messages
        );
    }

    #[test]
    fn a_first_kept_id_off_the_path_keeps_nothing_before_the_summary() {
        let t = tree(json!([
            {"type":"session","version":3,"id":"s"},
            {"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"one","timestamp":1}},
            {"type":"compaction","id":"c1","parentId":"u1","timestamp":"bad","summary":"S","firstKeptEntryId":"nope","tokensBefore":5},
            {"type":"message","id":"u2","parentId":"c1","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"user","content":"two","timestamp":3}},
        ]));
        let ids: Vec<Value> = context_agent_messages(&t, Some("u2"))
            .into_iter()
            .map(|(id, m)| json!([id, m["role"], m["timestamp"]]))
            .collect();
        assert_eq!(
            ids,
            vec![
                json!(["c1", "compactionSummary", null]),
                json!(["u2", "user", 3])
            ]
        );
    }

    fn ids(p: &HistoryPage) -> Vec<&str> {
        p.entries
            .iter()
            .map(|e| e["id"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn history_pages_walk_back_from_the_leaf_with_every_entry_in_place() {
        let t = compacted();
        let p = t.history(Some("u3"), None, 4).unwrap();
        assert_eq!(ids(&p), ["x1", "b1", "b2", "u3"]);
        assert!(p.has_more);
        assert_eq!(p.entries[0], t.get("x1").unwrap().raw());
        let p = t.history(Some("u3"), Some("x1"), 4).unwrap();
        assert_eq!(ids(&p), ["u2", "a2", "c1", "l1"]);
        assert!(p.has_more);
        let p = t.history(Some("u3"), Some("u2"), 4).unwrap();
        assert_eq!(ids(&p), ["m0", "u1", "a1"]);
        assert!(!p.has_more);
        let p = t.history(Some("u3"), Some("m0"), 4).unwrap();
        assert_eq!(
            p,
            HistoryPage {
                entries: vec![],
                has_more: false
            }
        );
        // Exactly the rest: no more.
        let p = t.history(Some("u3"), None, 11).unwrap();
        assert_eq!(p.entries.len(), 11);
        assert!(!p.has_more);
        // 0 reads as 1; more than the maximum as the maximum.
        assert_eq!(ids(&t.history(Some("u3"), None, 0).unwrap()), ["u3"]);
        assert_eq!(
            t.history(Some("u3"), None, 100_000).unwrap().entries.len(),
            11
        );
        // Another branch's entry, or none, is refused.
        assert_eq!(
            t.history(Some("a1"), Some("u3"), 4),
            Err(HistoryError::NotOnBranch("u3".into()))
        );
        assert_eq!(
            t.history(None, Some("u3"), 4),
            Err(HistoryError::NotOnBranch("u3".into()))
        );
        assert_eq!(
            t.history(None, None, 4),
            Ok(HistoryPage {
                entries: vec![],
                has_more: false
            })
        );
    }
}

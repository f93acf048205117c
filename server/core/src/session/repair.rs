//! Load-time repair of a tool result under the wrong entry (case PAIR-02).

use std::collections::HashMap;

use pi_ai::Message;

use super::*;

/// Load-time repair of case PAIR-02: a tool result on the loaded branch hangs under an entry
/// that is not the assistant message that called it (an older writer attached a late result
/// to an aborted message), so the resumed branch would lose the conversation since that
/// message. When exactly one assistant entry declares the call and no result of its own
/// answers it, the result (with the results and entries after it) is read under that message,
/// in memory only: the file is not changed, the line keeps its `parentId`. `parsed`: the
/// messages loading parsed, by entry index (else the lines are read). Returns one warning per
/// result moved.
pub(super) fn reparent_orphan_results(
    tree: &mut SessionTree,
    parsed: Option<&[Option<Message>]>,
) -> Vec<String> {
    // Messages are looked at only for tool results and the entries they hang under: the role
    // is known without parsing, and parsed messages are borrowed, not copied.
    fn with_message<T>(
        tree: &SessionTree,
        parsed: Option<&[Option<Message>]>,
        i: usize,
        f: impl FnOnce(&Message) -> Option<T>,
    ) -> Option<T> {
        match parsed.and_then(|p| p.get(i)) {
            Some(m) => m.as_ref().and_then(f),
            None => tree.entries[i].message().as_ref().and_then(f),
        }
    }
    let result_call = |tree: &SessionTree, i: usize| -> Option<String> {
        if tree.entries[i].role() != Some("toolResult") {
            return None;
        }
        with_message(tree, parsed, i, |m| match m {
            Message::ToolResult(r) => Some(r.tool_call_id.clone()),
            _ => None,
        })
    };
    let declares = |tree: &SessionTree, i: usize, call: &str| -> bool {
        tree.entries[i].role() == Some("assistant")
            && with_message(tree, parsed, i, |m| match m {
                Message::Assistant(a) => Some(a.tool_calls().iter().any(|c| c.id == call)),
                _ => None,
            })
            .unwrap_or(false)
    };
    let mut warnings = Vec::new();
    let mut index: Option<CallIndex> = None;
    // Walk the branch from its leaf; a moved result changes the branch, so walk again (a few
    // times at most).
    'walk: for _ in 0..8 {
        let Some(leaf) = tree.last_id().map(str::to_string) else {
            break;
        };
        let path = tree.path_indices(&leaf);
        for (pos, &i) in path.iter().enumerate().rev() {
            let p = pos.checked_sub(1).map(|k| path[k]);
            if follows_its_call(tree, i, p) {
                continue;
            }
            let Some(call) = result_call(tree, i) else {
                continue;
            };
            let fine = p.is_some_and(|p| {
                tree.entries[p].role() == Some("toolResult") || declares(tree, p, &call)
            });
            if fine {
                continue;
            }
            // Candidates by the call's hash (a deferred load's summaries), read to be sure;
            // entries without a summary are all candidates.
            let index = index.get_or_insert_with(|| CallIndex::new(tree));
            let h = line::call_hash(&call);
            let mut owners = index
                .candidates(&index.declared, h)
                .filter(|&k| declares(tree, k, &call));
            let (Some(owner), None) = (owners.next(), owners.next()) else {
                continue;
            };
            let owner_id = tree.entries[owner].id.clone();
            let answered = index.candidates(&index.results, h).any(|k| {
                tree.entries[k].parent_id.as_deref() == Some(owner_id.as_str())
                    && result_call(tree, k).as_deref() == Some(call.as_str())
            });
            if answered {
                continue;
            }
            let old = tree.entries[i]
                .parent_id
                .clone()
                .unwrap_or_else(|| "null".into());
            let id = tree.entries[i].id.clone();
            tree.set_parent(i, Some(owner_id.as_str().into()));
            warnings.push(format!(
                "tool result {id} (call {call}) was attached under {old}, not under the message that called it; it is read under {owner_id}"
            ));
            continue 'walk;
        }
        break;
    }
    warnings
}

/// The `message` entries of a tree by the [`line::call_hash`] of the tool calls they name (from
/// a deferred load's summaries): assistant messages by their calls, tool results by theirs;
/// entries without a summary apart (they may name any call).
struct CallIndex {
    declared: HashMap<u64, Vec<usize>>,
    results: HashMap<u64, Vec<usize>>,
    unsummarized: Vec<usize>,
}

impl CallIndex {
    fn new(tree: &SessionTree) -> CallIndex {
        let mut index = CallIndex {
            declared: HashMap::new(),
            results: HashMap::new(),
            unsummarized: Vec::new(),
        };
        for (k, e) in tree.entries.iter().enumerate() {
            let map = match e.role() {
                Some("assistant") => &mut index.declared,
                Some("toolResult") => &mut index.results,
                _ => continue,
            };
            match e.summary() {
                Some(s) => {
                    for h in s.calls.iter() {
                        let at = map.entry(*h).or_default();
                        // (Once per entry, whatever its calls repeat.)
                        if at.last() != Some(&k) {
                            at.push(k);
                        }
                    }
                }
                None => index.unsummarized.push(k),
            }
        }
        index
    }

    /// The entries of `map` under `hash`, then those without a summary (each entry once).
    fn candidates<'a>(
        &'a self,
        map: &'a HashMap<u64, Vec<usize>>,
        hash: u64,
    ) -> impl Iterator<Item = usize> + 'a {
        map.get(&hash)
            .into_iter()
            .flatten()
            .chain(&self.unsummarized)
            .copied()
    }
}

/// Whether entry `i` is not a tool result, or (as a deferred load's summaries show) one right
/// under another result or under the assistant message that names its call: nothing for
/// [`reparent_orphan_results`] to read. False when the summaries do not tell.
pub(super) fn follows_its_call(tree: &SessionTree, i: usize, parent: Option<usize>) -> bool {
    let e = &tree.entries[i];
    if e.role() != Some("toolResult") {
        return true;
    }
    let (Some(summary), Some(p)) = (e.summary(), parent.map(|p| &tree.entries[p])) else {
        return false;
    };
    let [call] = &*summary.calls else {
        return false;
    };
    match (p.role(), p.summary()) {
        (Some("toolResult"), _) => true,
        (Some("assistant"), Some(ps)) => ps.calls.contains(call),
        _ => false,
    }
}

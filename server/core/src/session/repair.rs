//! Load-time repair of a tool result under the wrong entry (case PAIR-02).

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
/// entries without a summary apart (they may name any call). Each list is sorted `(low 32 bits
/// of the hash) << 32 | entry index` values (8 bytes a call: a map of vectors cost about 110
/// bytes a call, 14 MiB for a 100 MB session); a candidate whose hash only shares its low bits
/// is read and dropped by the caller, as one without a summary is.
struct CallIndex {
    declared: Vec<u64>,
    results: Vec<u64>,
    unsummarized: Vec<usize>,
}

impl CallIndex {
    fn new(tree: &SessionTree) -> CallIndex {
        let mut index = CallIndex {
            declared: Vec::new(),
            results: Vec::new(),
            unsummarized: Vec::new(),
        };
        for (k, e) in tree.entries.iter().enumerate() {
            let list = match e.role() {
                Some("assistant") => &mut index.declared,
                Some("toolResult") => &mut index.results,
                _ => continue,
            };
            match (e.summary(), u32::try_from(k)) {
                (Some(s), Ok(k32)) => list.extend(
                    s.calls
                        .iter()
                        .map(|h| (h & 0xffff_ffff) << 32 | u64::from(k32)),
                ),
                _ => index.unsummarized.push(k),
            }
        }
        for list in [&mut index.declared, &mut index.results] {
            // In entry order under each hash; once per entry, whatever its calls repeat.
            list.sort_unstable();
            list.dedup();
            list.shrink_to_fit();
        }
        index
    }

    /// The entries of `list` under `hash` (in file order), then those without a summary
    /// (each entry once).
    fn candidates<'a>(&'a self, list: &'a [u64], hash: u64) -> impl Iterator<Item = usize> + 'a {
        let key = (hash & 0xffff_ffff) << 32;
        let from = list.partition_point(|&x| x < key);
        list[from..]
            .iter()
            .take_while(move |&&x| x >> 32 == key >> 32)
            .map(|&x| (x & 0xffff_ffff) as usize)
            .chain(self.unsummarized.iter().copied())
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

//! Compaction arithmetic (seed §4 "Compaction changes context, not history"; Pi 0.73.1
//! `core/compaction/compaction.js`): token estimates, the trigger, and the cut point. The
//! summary request and the `compaction` entry build on these.
//!
//! - A message's size is estimated as `ceil(chars / 4)` (text, thinking, tool names and JSON
//!   arguments, tool-result text); an image counts 1,200 tokens.
//! - Context tokens are anchored on the latest assistant usage that is valid (not error or
//!   aborted) plus estimates of the messages after it; without usage, the whole context is
//!   estimated.
//! - Compaction is due when context tokens > context window − reserve tokens.
//! - The cut walks back from the newest message until `keep_recent_tokens` are kept and moves
//!   to the nearest valid cut point at or after that message: a user or assistant message,
//!   never a tool result, so the kept suffix never starts with a result whose call was
//!   summarised (case CMP-01). A tail larger than the budget that cannot be split is kept whole
//!   from the call, and the split turn's start is reported so everything before it can be
//!   summarised (case CMP-02).

use pi_ai::{ContentBlock, Message, StopReason, UserContent};

/// Pi's defaults: tokens reserved for the answer and the summary.
pub const DEFAULT_RESERVE_TOKENS: u64 = 16_384;
/// Pi's default of recent context kept raw.
pub const DEFAULT_KEEP_RECENT_TOKENS: u64 = 20_000;
/// Estimated tokens of one image.
pub const IMAGE_TOKENS: u64 = 1_200;

fn blocks_chars(blocks: &[ContentBlock]) -> (u64, u64) {
    let mut chars = 0u64;
    let mut images = 0u64;
    for b in blocks {
        match b {
            ContentBlock::Text(t) => chars += t.text.chars().count() as u64,
            ContentBlock::Thinking(t) => chars += t.thinking.chars().count() as u64,
            ContentBlock::ToolCall(c) => {
                chars += (c.name.chars().count() + c.arguments.to_string().chars().count()) as u64
            }
            ContentBlock::Image(_) => images += 1,
        }
    }
    (chars, images)
}

/// Estimated tokens of one message (`ceil(chars / 4)`, images 1,200 each).
pub fn estimate_tokens(m: &Message) -> u64 {
    let (chars, images) = match m {
        Message::User(u) => match &u.content {
            UserContent::Text(t) => (t.chars().count() as u64, 0),
            UserContent::Blocks(b) => blocks_chars(b),
        },
        Message::Assistant(a) => blocks_chars(&a.content),
        Message::ToolResult(r) => blocks_chars(&r.content),
    };
    chars.div_ceil(4) + images * IMAGE_TOKENS
}

/// Tokens of `messages` as the provider will count them: the latest valid usage plus
/// estimates of what came after it, or an estimate of everything.
pub fn context_tokens(messages: &[Message]) -> u64 {
    let anchor = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match m {
            Message::Assistant(a)
                if !matches!(a.stop_reason, StopReason::Error | StopReason::Aborted) =>
            {
                let u = &a.usage;
                let total = if u.total_tokens > 0 {
                    u.total_tokens
                } else {
                    u.input + u.output + u.cache_read + u.cache_write
                };
                (total > 0).then_some((i, total))
            }
            _ => None,
        });
    match anchor {
        Some((i, total)) => total + messages[i + 1..].iter().map(estimate_tokens).sum::<u64>(),
        None => messages.iter().map(estimate_tokens).sum(),
    }
}

/// True when compaction is due: `tokens > context_window - reserve`.
pub fn should_compact(tokens: u64, context_window: u64, reserve: u64) -> bool {
    tokens > context_window.saturating_sub(reserve)
}

/// Where compaction cuts the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutPoint {
    /// Index of the first message kept raw (`0`: nothing can be summarised).
    pub first_kept: usize,
    /// When the cut splits a turn (the first kept message is not a user message): the index of
    /// the user message that started it, whose earlier part gets its own summary (Pi's
    /// `isSplitTurn` / `turnStartIndex`).
    pub turn_start: Option<usize>,
}

/// The cut point keeping about the last `keep_recent_tokens` raw (see the module docs).
pub fn find_cut_point(messages: &[Message], keep_recent_tokens: u64) -> CutPoint {
    let valid = |i: usize| !matches!(messages[i], Message::ToolResult(_));
    let mut acc = 0u64;
    let mut first_kept = 0;
    for i in (0..messages.len()).rev() {
        acc += estimate_tokens(&messages[i]);
        if acc >= keep_recent_tokens {
            // The nearest valid cut point at or after i; with only results after i, the
            // assistant that made those calls (the pair cannot be split).
            first_kept = (i..messages.len())
                .find(|&c| valid(c))
                .or_else(|| (0..i).rev().find(|&c| valid(c)))
                .unwrap_or(0);
            break;
        }
    }
    let turn_start = match messages.get(first_kept) {
        Some(Message::User(_)) | None => None,
        Some(_) => (0..first_kept)
            .rev()
            .find(|&c| matches!(messages[c], Message::User(_))),
    };
    CutPoint {
        first_kept,
        turn_start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(v: serde_json::Value) -> Vec<Message> {
        serde_json::from_value(v).unwrap()
    }

    fn text(n: usize) -> String {
        "x".repeat(n * 4)
    }

    #[test]
    fn cmp01_cut_never_lands_on_a_tool_result() {
        // [u1, a1{c1,c2}, r(c1), r(c2), a2, u2, a3]; the naive cut falls on r(c1).
        let m = msgs(json!([
            {"role":"user","content":text(1000)},
            {"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}},{"type":"toolCall","id":"c2","name":"read","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"text","text":text(300)}],"isError":false},
            {"role":"toolResult","toolCallId":"c2","toolName":"read","content":[{"type":"text","text":text(300)}],"isError":false},
            {"role":"assistant","content":[{"type":"text","text":text(100)}],"stopReason":"stop"},
            {"role":"user","content":text(100)},
            {"role":"assistant","content":[{"type":"text","text":text(100)}],"stopReason":"stop"}
        ]));
        // Budget 700: accumulating from the end reaches 700 inside r(c1) (index 2).
        let cut = find_cut_point(&m, 700);
        assert_eq!(
            cut,
            CutPoint {
                first_kept: 4,
                turn_start: Some(0)
            },
            "the kept suffix starts at a2, after both results"
        );
        assert!(!matches!(m[cut.first_kept], Message::ToolResult(_)));
    }

    #[test]
    fn cmp02_oversized_tail_is_kept_whole() {
        // keepRecent 20,000; old turns; then user (3k), assistant call, four results of 22k total.
        let mut v = Vec::new();
        for _ in 0..10 {
            v.push(json!({"role":"user","content":text(10_000)}));
            v.push(json!({"role":"assistant","content":[{"type":"text","text":text(15_000)}],"stopReason":"stop"}));
        }
        v.push(json!({"role":"user","content":text(3_000)}));
        let calls: Vec<_> = (0..4)
            .map(|i| json!({"type":"toolCall","id":format!("c{i}"),"name":"read","arguments":{}}))
            .collect();
        v.push(json!({"role":"assistant","content":calls,"stopReason":"toolUse"}));
        for i in 0..4 {
            v.push(json!({"role":"toolResult","toolCallId":format!("c{i}"),"toolName":"read","content":[{"type":"text","text":text(5_500)}],"isError":false}));
        }
        let m = msgs(serde_json::Value::Array(v));
        let cut = find_cut_point(&m, DEFAULT_KEEP_RECENT_TOKENS);
        // The results exceed the budget and cannot be split from their call: the tail from the
        // call (21) is kept whole; the turn's user message (20) is the split turn's start, and
        // everything before it is summarised — never "nothing to compact".
        assert_eq!(
            cut,
            CutPoint {
                first_kept: 21,
                turn_start: Some(20)
            }
        );
    }

    #[test]
    fn tokens_anchor_on_the_last_valid_usage() {
        let m = msgs(json!([
            {"role":"user","content":text(10)},
            {"role":"assistant","content":[{"type":"text","text":"a"}],"stopReason":"stop","usage":{"input":1000,"output":50,"cacheRead":0,"cacheWrite":0,"totalTokens":1050}},
            {"role":"user","content":text(25)},
            {"role":"assistant","content":[],"stopReason":"error","usage":{"input":99999,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":99999}}
        ]));
        assert_eq!(context_tokens(&m), 1050 + 25);
        // Due only strictly above window − reserve.
        assert!(!should_compact(1075, 16_384 + 1075, 16_384));
        assert!(should_compact(1076, 16_384 + 1075, 16_384));
        assert!(should_compact(120_000, 128_000, DEFAULT_RESERVE_TOKENS));
        assert_eq!(context_tokens(&m[..1]), 10);
    }
}

//! Compaction arithmetic (docs/design.md#sessions-branching-and-compaction "Compaction changes context, not history"; Pi 0.73.1
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
//!   summarised (case CMP-02). When the cut would summarise nothing although the kept part is
//!   over the budget (one huge old turn, then a small tail), it moves later, to where the kept
//!   part fits, splitting that turn if need be (see `cut_items`; Pi 1.6 gives up there).
//! - The kept tail is `keepRecentTokens`, or half the room the threshold leaves after the
//!   system prompt and tools when that is smaller ([`keep_budget`]): on a 32k window with the
//!   default settings (threshold 16,384, keep 20,000) the cut then falls inside the running turn
//!   at a call/result boundary instead of keeping everything (cases CTX-03, CMP-02).
//! - No summary request is sent with nothing to summarise: when everything is in the kept tail,
//!   [`prepare`] says so in words ([`CompactionError::AllKept`] when it fits the budget,
//!   [`CompactionError::Uncuttable`] when it is over it but has no later cut point; Pi 1.6's
//!   `prepareCompaction` returns nothing then).

use std::collections::BTreeSet;

use pi_ai::{
    CacheRetention, ContentBlock, Context, Message, Model, StopReason, StreamOptions, UserContent,
};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use std::sync::{Arc, Mutex};

pub use crate::config::types::{
    CompactionSettings, DEFAULT_KEEP_RECENT_TOKENS, DEFAULT_RESERVE_TOKENS,
};
use crate::session::{entry_message, path_messages_with, Entry, SessionWriter};

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
                chars += c.name.chars().count() as u64 + json_chars(&c.arguments)
            }
            ContentBlock::Image(_) => images += 1,
        }
    }
    (chars, images)
}

/// The characters of `v` serialised compactly (`v.to_string().chars().count()`), counted as
/// they are written: no string is built.
fn json_chars(v: &Value) -> u64 {
    /// Counts the characters of the UTF-8 written to it (bytes that do not continue one).
    struct Chars(u64);
    impl std::io::Write for Chars {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.iter().filter(|&&b| (b as i8) >= -0x40).count() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Chars(0);
    match serde_json::to_writer(&mut n, v) {
        Ok(()) => n.0,
        Err(_) => v.to_string().chars().count() as u64,
    }
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
        Message::System(s) => (s.update_text().chars().count() as u64, 0),
    };
    chars.div_ceil(4) + images * IMAGE_TOKENS
}

/// Tokens of `messages` as the provider will count them: the latest valid usage plus
/// estimates of what came after it, or an estimate of everything.
pub fn context_tokens(messages: &[Message]) -> u64 {
    context_tokens_anchored(messages).unwrap_or_else(|| messages.iter().map(estimate_tokens).sum())
}

/// Tokens of a whole request: anchored on the latest valid usage at or after `usage_from` (older
/// usage describes a context that compaction replaced) plus estimates of the later messages;
/// without such usage, `ceil(chars / 4)` of the system prompt, the tool specs and every message.
pub fn request_tokens(
    system_prompt: &str,
    tools: &[pi_ai::ToolSpec],
    messages: &[Message],
    usage_from: usize,
) -> u64 {
    request_tokens_counted(system_prompt, tools_chars(tools), messages, usage_from)
}

/// Characters of the tool specs as [`request_tokens`] counts them: each tool's name,
/// description and JSON schema (serialised). A run counts them once per tool set.
pub fn tools_chars(tools: &[pi_ai::ToolSpec]) -> u64 {
    tools
        .iter()
        .map(|t| {
            (t.name.chars().count() + t.description.chars().count()) as u64
                + json_chars(&t.parameters)
        })
        .sum()
}

/// [`request_tokens`] with the tool specs' characters already counted ([`tools_chars`]).
pub fn request_tokens_counted(
    system_prompt: &str,
    tools_chars: u64,
    messages: &[Message],
    usage_from: usize,
) -> u64 {
    let from = usage_from.min(messages.len());
    let anchored = context_tokens_anchored(&messages[from..]);
    if let Some(t) = anchored {
        return t;
    }
    let fixed = (system_prompt.chars().count() as u64 + tools_chars).div_ceil(4);
    fixed + messages.iter().map(estimate_tokens).sum::<u64>()
}

fn context_tokens_anchored(messages: &[Message]) -> Option<u64> {
    let (i, total) = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match m {
            Message::Assistant(a)
                if !matches!(a.stop_reason, StopReason::Error | StopReason::Aborted) =>
            {
                let total = a.usage.context_total();
                (total > 0).then_some((i, total))
            }
            _ => None,
        })?;
    Some(total + messages[i + 1..].iter().map(estimate_tokens).sum::<u64>())
}

/// True when compaction is due: `tokens > context_window - reserve` ([`threshold`]).
pub fn should_compact(tokens: u64, context_window: u64, reserve: u64) -> bool {
    tokens > threshold(context_window, reserve)
}

/// The threshold, in tokens: context window − `reserve` (`compaction.reserveTokens`), as Pi
/// 1.6's `shouldCompact` (`contextTokens > contextWindow - reserveTokens`): the reserve is
/// taken as it is, also when it is half the window or more (Pi does not shrink it for a small
/// window; a window at most the reserve has a threshold of 0, so every turn compacts once, as
/// in Pi). Compaction is due above it ([`should_compact`]), a threshold compaction must bring
/// the context under it (case CMP-04), and the kept tail is at most half of what it leaves
/// ([`keep_budget`]). 0 for an unknown window (0) whatever the reserve.
pub fn threshold(context_window: u64, reserve: u64) -> u64 {
    context_window.saturating_sub(reserve)
}

/// The tokens a compaction keeps raw: `keep_recent_tokens` (Pi's `compaction.keepRecentTokens`),
/// or half the room left under the threshold (context window − reserve −
/// `fixed_tokens` of system prompt and tool specs) when that is smaller, so the kept tail plus the
/// summary fit under the threshold and the cut falls inside a long turn (at an assistant
/// message, never between a call and its result) rather than keeping all of it. A window of 0
/// (unknown) keeps `keep_recent_tokens`, and so does a threshold that leaves no room at all
/// beside the system prompt and tools (a window at most the reserve, a prompt over the
/// threshold): no compaction can bring such a context under it, and summarising all but the
/// last message would cost a summary request after every answer for nothing, so what is
/// compacted then is what Pi 1.6 compacts. Pi 1.6 keeps `keepRecentTokens` whatever the
/// window, so on a 32,768-token model with its defaults (threshold 16,384) a long turn cannot
/// be compacted at all (case CTX-03 / CMP-02).
pub fn keep_budget(
    keep_recent_tokens: u64,
    context_window: u64,
    reserve_tokens: u64,
    fixed_tokens: u64,
) -> u64 {
    let room = threshold(context_window, reserve_tokens).saturating_sub(fixed_tokens);
    if context_window == 0 || room == 0 {
        return keep_recent_tokens;
    }
    keep_recent_tokens.min(room / 2)
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

/// What the cut-point search needs to know of one entry (or message).
#[derive(Debug, Clone, Copy, Default)]
struct CutItem {
    /// Estimated tokens for message entries; `None` for entries that are not messages.
    tokens: Option<u64>,
    /// The kept suffix may begin here (not a tool result).
    cut: bool,
    /// A user-side message that starts a turn (user, bashExecution, branch summary, custom
    /// message).
    turn_start: bool,
    /// A plain `user` message: cutting here splits no turn.
    user: bool,
    /// A `compaction` entry: the backward scan over non-message entries stops here.
    compaction: bool,
    /// An entry with model-visible messages of its own that a `context_edit` leaves out
    /// (`replacement: null`; Pi's `isOmitted`).
    omitted: bool,
    /// An omitted `message` entry of an assistant message (a left-out recovery attempt).
    omitted_assistant: bool,
    /// An entry with no model-visible message of its own (metadata, `context_edit`s; Pi's
    /// `!isIntrinsicallyVisible`).
    hidden: bool,
    /// A `context_edit` that replaces (not omits) an entry: the projected index of its target,
    /// `usize::MAX` when the target is not in the projection.
    replaces: Option<usize>,
}

/// Pi 1.6's `findCutPoint` over `items[start..end]`, with two changes, both for a context over
/// the budget that Pi would leave whole ("nothing to compact" while over the threshold, case
/// CMP-02):
///
/// 1. When only tool results lie after the budget point, the assistant that made those calls
///    is kept with them (Pi 0.73.1 kept everything; Pi 1.6 does the same as here).
/// 2. When Pi's cut summarises nothing (it lands on the first message because the oldest
///    message alone reaches the budget: one huge old turn, then a small tail) although the
///    kept part is over `keep_recent_tokens`, the cut moves to the earliest later valid cut
///    point (a user or assistant message, never a tool result) whose kept part fits the
///    budget — as the budget was reached only at the first message, that is the next valid
///    cut point — or, should none fit, the last one (the smallest kept part). A cut at an
///    assistant splits its turn, whose start is then summarised as Pi's turn prefix
///    (`turn_start`). Pi 1.6 returns no compaction there, so an overflowing session stays
///    stuck ("nothing to compact" on every retry).
///
/// "Nothing to summarise" is left only when no later cut point exists (one message, or one
/// user message and its results) or the kept part fits the budget.
fn cut_items(items: &[CutItem], start: usize, end: usize, keep_recent_tokens: u64) -> CutPoint {
    let first_cut = (start..end).find(|&i| items[i].cut);
    let Some(first_cut) = first_cut else {
        return CutPoint {
            first_kept: start,
            turn_start: None,
        };
    };
    let mut cut = first_cut;
    let mut acc = 0u64;
    let mut exceeded = false;
    for i in (start..end).rev() {
        let Some(t) = items[i].tokens else { continue };
        acc += t;
        if acc >= keep_recent_tokens {
            exceeded = true;
            cut = (i..end)
                .find(|&c| items[c].cut)
                .or_else(|| (start..i).rev().find(|&c| items[c].cut))
                .unwrap_or(first_cut);
            break;
        }
    }
    if exceeded && recovery_omission_suffix(items, cut + 1, end) {
        cut += 1;
    }
    // Change 2: a cut that summarises nothing while the kept part is over the budget.
    let visible = |i: usize| !items[i].compaction && (items[i].tokens.is_some() || items[i].cut);
    let kept_tokens = |c: usize| -> u64 { items[c..end].iter().filter_map(|i| i.tokens).sum() };
    if !(start..cut).any(visible) && kept_tokens(cut) > keep_recent_tokens {
        let later: Vec<usize> = (cut + 1..end).filter(|&c| items[c].cut).collect();
        if let Some(&last) = later.last() {
            cut = later
                .iter()
                .copied()
                .find(|&c| kept_tokens(c) <= keep_recent_tokens)
                .unwrap_or(last);
        }
    }
    // Non-message entries just before the cut (model or thinking-level changes, labels) stay
    // with the kept part.
    while cut > start {
        let prev = items[cut - 1];
        if prev.compaction || prev.tokens.is_some() {
            break;
        }
        cut -= 1;
    }
    let turn_start = if items[cut].user {
        None
    } else {
        (start..=cut).rev().find(|&i| items[i].turn_start)
    };
    CutPoint {
        first_kept: cut,
        turn_start,
    }
}

/// Pi 1.6's `isRecoveryOmissionSuffix` (`findProjectedCutPoint`, core/compaction/compaction.js)
/// over `items[from..end]`, the entries after the budget's cut: a closed suffix holding a
/// left-out assistant answer (a recovery attempt) and otherwise only left-out entries and
/// entries with no message of their own (its `context_edit`s), with no compaction and no
/// `context_edit` that replaces an entry outside the left-out ones. The cut then moves one
/// entry on, past the unsent-looking input: the prompt the left-out answer answered goes to
/// the summary (as a split turn's prefix) and the kept part starts at the left-out entry.
fn recovery_omission_suffix(items: &[CutItem], from: usize, end: usize) -> bool {
    let suffix = from..end;
    let omitted_here = |k: usize| suffix.contains(&k) && items[k].omitted;
    let external_replacement = suffix
        .clone()
        .any(|k| items[k].replaces.is_some_and(|t| !omitted_here(t)));
    !external_replacement
        && suffix.clone().any(|k| items[k].omitted_assistant)
        && suffix
            .clone()
            .all(|k| !items[k].compaction && (items[k].hidden || items[k].omitted))
}

fn message_item(m: &Message) -> CutItem {
    CutItem {
        tokens: Some(estimate_tokens(m)),
        cut: !matches!(m, Message::ToolResult(_)),
        turn_start: matches!(m, Message::User(_)),
        user: matches!(m, Message::User(_)),
        ..CutItem::default()
    }
}

/// The cut point keeping about the last `keep_recent_tokens` raw (see the module docs).
pub fn find_cut_point(messages: &[Message], keep_recent_tokens: u64) -> CutPoint {
    let items: Vec<CutItem> = messages.iter().map(message_item).collect();
    if items.is_empty() {
        return CutPoint {
            first_kept: 0,
            turn_start: None,
        };
    }
    cut_items(&items, 0, items.len(), keep_recent_tokens)
}

/// The cut facts of entry `e` whose projected messages count `tokens` ([`entry_tokens`]);
/// `omitted` when a `context_edit` leaves the entry out (`replacement: null`), `replaces` the
/// projected index of the entry a `context_edit` entry `e` replaces (see [`CutItem`]). A
/// left-out entry is neither a cut point nor counted (Pi 1.6 cuts its projection, whose
/// left-out entries have no messages); a stored system message counts (Pi's projection holds
/// it) but is no cut point (Pi: prompt state, not conversation); a custom message and a branch
/// summary count their text and are cut points that start a turn.
fn entry_item(e: &Entry, tokens: u64, omitted: bool, replaces: Option<usize>) -> CutItem {
    let visible = match e.kind.as_str() {
        "message" | "custom_message" | "compaction" => true,
        "branch_summary" => e.raw()["summary"].as_str().is_some_and(|s| !s.is_empty()),
        _ => false,
    };
    if omitted && visible && e.kind != "compaction" {
        return CutItem {
            omitted: true,
            omitted_assistant: e.kind == "message" && e.role() == Some("assistant"),
            ..CutItem::default()
        };
    }
    match e.kind.as_str() {
        "message" => {
            let role = e.role().unwrap_or("");
            CutItem {
                tokens: Some(tokens),
                cut: !matches!(role, "toolResult" | "system"),
                turn_start: matches!(role, "user" | "bashExecution"),
                user: role == "user",
                ..CutItem::default()
            }
        }
        "branch_summary" | "custom_message" if visible => CutItem {
            tokens: Some(tokens),
            cut: true,
            turn_start: true,
            ..CutItem::default()
        },
        "compaction" => CutItem {
            compaction: true,
            ..CutItem::default()
        },
        _ => CutItem {
            hidden: true,
            replaces,
            ..CutItem::default()
        },
    }
}

/// Pi 1.6's `estimateTokens` summed over the projected messages of entry `e` (the cut's count
/// in `findProjectedCutPoint`): a message entry its stored message (any role, a system message
/// included), a custom message its content, a branch summary its summary ([`pi_estimate_tokens`]
/// of Pi's `custom` / `branchSummary` message); the entry's `replacement` (a `context_edit`'s,
/// not null) applied first ([`replace_value_content`]). Other entries (a compaction inside the
/// kept range among them) count 0.
fn entry_tokens(e: &Entry, replacement: Option<&Value>) -> u64 {
    let raw = match e.kind.as_str() {
        "message" | "custom_message" | "branch_summary" => e.raw(),
        _ => return 0,
    };
    let mut m = match e.kind.as_str() {
        "message" => raw["message"].clone(),
        "custom_message" => serde_json::json!({"role": "custom", "content": raw["content"]}),
        _ => serde_json::json!({"role": "branchSummary", "summary": raw["summary"]}),
    };
    if let Some(r) = replacement.filter(|r| !r.is_null()) {
        replace_value_content(&mut m, r);
    }
    pi_estimate_tokens(&m)
}

/// A compaction the [`Compactor`] wrote summaries for but has not committed.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionProposal {
    pub result: CompactionResult,
    /// The model context after the compaction (summary, kept messages).
    pub messages: Vec<Message>,
    /// What the proposal was computed on (the compactor's own token, e.g. the leaf entry id);
    /// a commit on a history that moved since is refused.
    pub basis: Option<String>,
}

/// Produces and commits compactions (docs/design.md#sessions-branching-and-compaction "Compaction changes context, not history"). The
/// loop decides when (threshold before each request, overflow), checks a proposal (it must
/// shrink the context and fit under the threshold, case CMP-04), then commits it.
#[async_trait::async_trait]
pub trait Compactor: Send + Sync {
    /// Prepares the cut and writes the summaries for the history as it is now, each request
    /// retried as `retry` says ([`summarize`]); appends nothing.
    async fn propose(
        &self,
        model: &Model,
        settings: &CompactionSettings,
        instructions: Option<&str>,
        retry: SummaryRetry<'_>,
        cancel: &CancellationToken,
    ) -> Result<CompactionProposal, CompactionError>;
    /// Appends the `compaction` entry; returns the model context after it.
    fn commit(&self, proposal: &CompactionProposal) -> Result<Vec<Message>, CompactionError>;
    /// Whether the history as it is now has anything to compact, asked before an automatic
    /// (threshold or overflow) compaction starts: Pi 1.6's `_runAutoCompaction` emits no `compaction_start` when
    /// `prepareCompaction` prepares nothing. `Err` says why not (an error [`prepare`] gives:
    /// [`CompactionError::AlreadyCompacted`], [`CompactionError::NothingToCompact`],
    /// [`CompactionError::AllKept`], [`CompactionError::Uncuttable`]); sends nothing and
    /// appends nothing. The default: there is (the proposal says otherwise).
    fn check(&self, _settings: &CompactionSettings) -> Result<(), CompactionError> {
        Ok(())
    }
}

/// Files the summarised part read and changed (Pi's `fileOps`, paths as the model wrote them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileOps {
    pub read: BTreeSet<String>,
    pub written: BTreeSet<String>,
    pub edited: BTreeSet<String>,
}

impl FileOps {
    /// Adds the `path` of every `read`, `write` and `edit` call in `m`.
    pub fn add_calls(&mut self, m: &Message) {
        let Message::Assistant(a) = m else { return };
        for c in a.tool_calls() {
            let Some(path) = c.arguments.get("path").and_then(Value::as_str) else {
                continue;
            };
            let set = match c.name.as_str() {
                "read" => &mut self.read,
                "write" => &mut self.written,
                "edit" => &mut self.edited,
                _ => continue,
            };
            set.insert(path.to_string());
        }
    }

    /// `(read only, modified)`, each sorted (Pi's `computeFileLists`).
    pub fn lists(&self) -> (Vec<String>, Vec<String>) {
        let modified: BTreeSet<&String> = self.edited.iter().chain(&self.written).collect();
        let read = self
            .read
            .iter()
            .filter(|f| !modified.contains(f))
            .cloned()
            .collect();
        (read, modified.into_iter().cloned().collect())
    }
}

/// Pi's `formatFileOperations`: `<read-files>` and `<modified-files>` blocks after the summary.
pub fn format_file_operations(read: &[String], modified: &[String]) -> String {
    let mut sections = Vec::new();
    if !read.is_empty() {
        sections.push(format!("<read-files>\n{}\n</read-files>", read.join("\n")));
    }
    if !modified.is_empty() {
        sections.push(format!(
            "<modified-files>\n{}\n</modified-files>",
            modified.join("\n")
        ));
    }
    if sections.is_empty() {
        return String::new();
    }
    format!("\n\n{}", sections.join("\n\n"))
}

/// Why a compaction could not be prepared or produced. Nothing is appended in any case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactionError {
    #[error("Already compacted")]
    AlreadyCompacted,
    #[error("Nothing to compact (session too small)")]
    NothingToCompact,
    /// Every message since the last compaction (or of the branch) is in the kept recent part,
    /// so a summary would have nothing to read; no summary request is sent. `messages` and
    /// `tokens` (`ceil(chars / 4)` estimates) are of that part; `keep_recent_tokens` is the
    /// budget used ([`keep_budget`]).
    #[error("Nothing to compact: {what} ({messages} messages, about {tokens} tokens) fit in the recent part kept as it is (up to {keep_recent_tokens} tokens, compaction.keepRecentTokens), so there is nothing older to summarise; no summary request was sent")]
    AllKept {
        /// `"the conversation"` or `"the messages since the last compaction"`.
        what: String,
        messages: usize,
        tokens: u64,
        keep_recent_tokens: u64,
    },
    /// The kept part is over the budget but cannot start later: after its first message there
    /// is no user or assistant message to cut at (one message, or one user message and tool
    /// results), so nothing older can be summarised; no summary request is sent. Figures as in
    /// [`CompactionError::AllKept`].
    #[error("Nothing to compact: {what} ({}, about {tokens} tokens) is over the {keep_recent_tokens} tokens kept as they are (compaction.keepRecentTokens), but it cannot be cut after its first message (the kept part must start at a user or assistant message), so there is nothing older to summarise; no summary request was sent", count_messages(.messages))]
    Uncuttable {
        /// `"the conversation"` or `"the messages since the last compaction"`.
        what: String,
        messages: usize,
        tokens: u64,
        keep_recent_tokens: u64,
    },
    /// A summary request failed; the message starts with Pi 1.6's label of the summary that
    /// failed ([`SummaryKind::label`]): "Summarization failed: …", "Turn prefix summarization
    /// failed: …", "Branch summarization failed: …" (`getSummarizationFailure`).
    #[error("{0}")]
    SummaryFailed(String),
    #[error("Compaction cancelled")]
    Cancelled,
    /// An automatic compaction whose summary would not make the context smaller (case CMP-04).
    /// Figures are `ceil(chars / 4)` estimates of the messages (Pi's `estimateTokens`),
    /// besides `fixed` tokens of system prompt and tool specs that compaction cannot shrink.
    #[error("compaction would not shrink the context: its messages are about {before} tokens and would be about {after} after (the summary plus the kept recent messages; compaction.keepRecentTokens is {keep_recent_tokens}), beside {fixed} tokens of system prompt and tools; nothing was written")]
    NoProgress {
        before: u64,
        after: u64,
        fixed: u64,
        keep_recent_tokens: u64,
    },
    /// Even the compacted context is over the threshold (case CMP-04).
    #[error("the context does not fit even after compaction: system prompt + summary + the minimum kept tail are {after} tokens, over the limit of {limit} (context window − reserve tokens); start a new session, switch to a model with a larger context window, or lower compaction.keepRecentTokens or compaction.reserveTokens")]
    DoesNotFit { after: u64, limit: u64 },
    #[error("session: {0}")]
    Session(String),
}

/// "1 message", "N messages".
fn count_messages(n: &usize) -> String {
    if *n == 1 {
        "1 message".into()
    } else {
        format!("{n} messages")
    }
}

/// What a compaction summarises and keeps, computed from the branch (Pi's `prepareCompaction`).
#[derive(Debug, Clone, PartialEq)]
pub struct Preparation {
    /// Where the kept raw context begins.
    pub first_kept_entry_id: String,
    /// Messages folded into the history summary.
    pub messages_to_summarize: Vec<Message>,
    /// The early part of a turn cut in two (summarised separately).
    pub turn_prefix_messages: Vec<Message>,
    pub is_split_turn: bool,
    /// Context tokens of the branch before compaction.
    pub tokens_before: u64,
    /// The summary of the compaction before this one, folded into the new summary.
    pub previous_summary: Option<String>,
    pub file_ops: FileOps,
}

/// Prepares a compaction of the branch `path` (root to leaf), keeping about
/// `keep_recent_tokens` raw. The kept part starts after the previous compaction's kept part;
/// the previous summary and its file lists are folded in. The cut is chosen on the branch's
/// projection, as Pi 1.6's `prepareCompaction`: the previous compaction's kept entries (no
/// stored system messages) and the entries after it, each with its `context_edit` applied;
/// see `CutItem` and `recovery_omission_suffix` (docs/design.md "Compaction cuts the
/// projection").
pub fn prepare(path: &[&Entry], keep_recent_tokens: u64) -> Result<Preparation, CompactionError> {
    if path.last().is_some_and(|e| e.kind == "compaction") {
        return Err(CompactionError::AlreadyCompacted);
    }
    let prev = path.iter().rposition(|e| e.kind == "compaction");
    let mut previous_summary = None;
    let mut file_ops = FileOps::default();
    let mut start = 0;
    if let Some(pi) = prev {
        let p = &path[pi].raw();
        previous_summary = p["summary"].as_str().map(str::to_string);
        let first = p["firstKeptEntryId"].as_str();
        start = path[..pi]
            .iter()
            .position(|e| Some(e.id.as_str()) == first)
            .unwrap_or(pi + 1);
        if p["fromHook"].as_bool() != Some(true) {
            let strings = |k: &str| -> Vec<String> {
                p["details"][k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            };
            file_ops.read.extend(strings("readFiles"));
            file_ops.edited.extend(strings("modifiedFiles"));
        }
    }
    // Pi 1.6 cuts the branch's projection (`buildSessionProjection`): the kept entries of the
    // previous compaction (without stored system messages) followed by every entry after it,
    // each with its `context_edit` applied. `idx` maps projected positions to `path` indices.
    let idx: Vec<usize> = match prev {
        Some(pi) => (start..pi)
            .filter(|&k| !(path[k].kind == "message" && path[k].role() == Some("system")))
            .chain(pi + 1..path.len())
            .collect(),
        None => (0..path.len()).collect(),
    };
    let edits = crate::session::ContextEdits::on_path(path);
    // Each entry's message is parsed once, its edit applied.
    let mut messages: Vec<Option<Message>> = idx
        .iter()
        .map(|&k| {
            let m = entry_message(path[k]);
            match &edits {
                Some(x) => x.apply(path[k], m),
                None => m,
            }
        })
        .collect();
    let position = |id: &str| idx.iter().position(|&k| path[k].id.as_str() == id);
    let items: Vec<CutItem> = idx
        .iter()
        .map(|&k| {
            let e = path[k];
            let edit = edits.as_ref().and_then(|x| x.get(&e.id)).map(|(_, r)| r);
            let omitted = edit.is_some_and(Value::is_null);
            let replaces = (e.kind == "context_edit")
                .then(|| e.raw())
                .filter(|r| !r["replacement"].is_null())
                .map(|r| {
                    r["targetId"]
                        .as_str()
                        .and_then(position)
                        .unwrap_or(usize::MAX)
                });
            let tokens = if omitted { 0 } else { entry_tokens(e, edit) };
            entry_item(e, tokens, omitted, replaces)
        })
        .collect();
    let end = idx.len();
    // Pi compacts any branch that has entries after the previous kept part, also when all of
    // them are kept (a one-turn session): the summary then covers nothing older. A branch with
    // no message at all has nothing to summarise or keep.
    if !idx.iter().any(|&k| path[k].kind == "message") {
        return Err(CompactionError::NothingToCompact);
    }
    let cut = cut_items(&items, 0, end, keep_recent_tokens);
    let tokens_before = pi_context_tokens(path);
    // Pi's `getMessagesFromProjectedEntryForCompaction`: no compaction summaries, no system
    // messages (prompt state, not conversation).
    // Moved out of `messages` (the two ranges do not overlap): a long history is not held
    // twice. Nothing is taken when both come out empty, so the check below still sees them.
    let mut for_summary = |k: usize| -> Option<Message> {
        let wanted = path[idx[k]].kind != "compaction"
            && matches!(&messages[k], Some(m) if !matches!(m, Message::System(_)));
        if wanted {
            messages[k].take()
        } else {
            None
        }
    };
    let history_end = cut.turn_start.unwrap_or(cut.first_kept);
    let messages_to_summarize: Vec<Message> =
        (0..history_end).filter_map(&mut for_summary).collect();
    let turn_prefix_messages: Vec<Message> = match cut.turn_start {
        Some(ts) => (ts..cut.first_kept).filter_map(&mut for_summary).collect(),
        None => Vec::new(),
    };
    // Nothing older than the kept part: a summary request would carry an empty conversation
    // (Pi 1.6's `prepareCompaction` returns nothing here).
    if messages_to_summarize.is_empty() && turn_prefix_messages.is_empty() {
        let kept: Vec<&Message> = (0..end)
            .filter(|&k| path[idx[k]].kind == "message")
            .filter_map(|k| messages[k].as_ref())
            .collect();
        let what = if prev.is_some() {
            "the messages since the last compaction".into()
        } else {
            "the conversation".into()
        };
        let tokens: u64 = kept.iter().map(|m| estimate_tokens(m)).sum();
        // Over the budget only when no later cut point exists ([`cut_items`]).
        return Err(if tokens > keep_recent_tokens {
            CompactionError::Uncuttable {
                what,
                messages: kept.len(),
                tokens,
                keep_recent_tokens,
            }
        } else {
            CompactionError::AllKept {
                what,
                messages: kept.len(),
                tokens,
                keep_recent_tokens,
            }
        });
    }
    for m in messages_to_summarize.iter().chain(&turn_prefix_messages) {
        file_ops.add_calls(m);
    }
    Ok(Preparation {
        first_kept_entry_id: path[idx[cut.first_kept]].id.to_string(),
        is_split_turn: cut.turn_start.is_some() && !turn_prefix_messages.is_empty(),
        messages_to_summarize,
        turn_prefix_messages,
        tokens_before,
        previous_summary,
        file_ops,
    })
}

/// Pi's `estimateTokens` of one stored message (any role, as in the file): `ceil(chars / 4)`
/// with chars counted in UTF-16 units as JavaScript does; a `bashExecution` counts its command
/// and output, summaries their text, an image of a user message, tool result or custom
/// message 4,800 chars (Pi 1.6's `estimateTextAndImageContentChars`), a system message its
/// content, its sections' text and the JSON of the tools it adds.
pub fn pi_estimate_tokens(m: &Value) -> u64 {
    let len = |v: &Value| v.as_str().map_or(0, |s| s.encode_utf16().count() as u64);
    let texts = |content: &Value, images: u64| -> u64 {
        match content {
            Value::String(s) => s.encode_utf16().count() as u64,
            Value::Array(blocks) => blocks
                .iter()
                .map(|b| match b["type"].as_str() {
                    Some("text") => len(&b["text"]),
                    Some("image") => images,
                    _ => 0,
                })
                .sum(),
            _ => 0,
        }
    };
    let chars = match m["role"].as_str().unwrap_or("") {
        "user" => texts(&m["content"], 4800),
        "assistant" => m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| match b["type"].as_str() {
                Some("text") => len(&b["text"]),
                Some("thinking") => len(&b["thinking"]),
                Some("toolCall") => {
                    len(&b["name"]) + b["arguments"].to_string().encode_utf16().count() as u64
                }
                _ => 0,
            })
            .sum(),
        "custom" | "toolResult" => texts(&m["content"], 4800),
        "bashExecution" => len(&m["command"]) + len(&m["output"]),
        "branchSummary" | "compactionSummary" => len(&m["summary"]),
        // Pi 1.6: its content, every section's text and the JSON of the tools it adds.
        "system" => {
            texts(&m["content"], 4800)
                + m["sections"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(_, v)| len(v))
                    .sum::<u64>()
                + match &m["toolsAdded"] {
                    Value::Null => 0,
                    t => t.to_string().encode_utf16().count() as u64,
                }
        }
        _ => 0,
    };
    chars.div_ceil(4)
}

/// pi-ai 1.6's `estimateMessageTokens` of a stored system message (`role: "system"`, as in
/// the file): `ceil(chars / 3.5)` of `getSystemMessageText` (its content and every section's
/// text that is not `null`, the non-empty ones joined by a blank line), plus the same of the
/// JSON of `toolsAdded` and of `toolsRemoved`, each rounded up on its own; characters in
/// UTF-16 units as JavaScript counts them.
pub fn pi_system_message_tokens(m: &Value) -> u64 {
    let tokens = |chars: usize| (chars as u64 * 2).div_ceil(7);
    let utf16 = |s: &str| s.encode_utf16().count();
    let content = match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    let mut parts = vec![content.as_str()];
    if let Some(sections) = m["sections"].as_object() {
        parts.extend(sections.values().filter_map(Value::as_str));
    }
    let text: usize = parts
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| utf16(p))
        .sum::<usize>()
        + 2 * parts
            .iter()
            .filter(|p| !p.is_empty())
            .count()
            .saturating_sub(1);
    let tools = |v: &Value| match v {
        Value::Array(a) if !a.is_empty() => tokens(utf16(&v.to_string())),
        _ => 0,
    };
    tokens(text) + tools(&m["toolsAdded"]) + tools(&m["toolsRemoved"])
}

/// Pi 1.6's `estimateProjectedContextTokens(buildSessionProjection(path), path)`, the figure
/// Pi writes as a compaction's `tokensBefore` (`core/compaction/compaction.js`):
///
/// - the latest assistant usage in the context whose total (`totalTokens`, else the sum of
///   input, output, cache read and cache write) is above 0 and whose `stopReason` is not
///   `error` or `aborted` (Pi's `getAssistantUsage`), plus [`pi_estimate_tokens`] of every
///   message after it;
/// - an aborted, errored or usage-less last answer (an imported turn) is skipped for the one
///   before it, so `tokensBefore` is never just the few tokens after a usage of 0;
/// - without such usage, or when that usage's entry comes before the branch's latest
///   `compaction` or `context_edit` entry (it counted a context that has since changed), the
///   estimate of the whole context: the current system message (Pi's
///   `getCurrentSystemMessage`) plus every other message.
///
/// `context_edit`s apply as in the context: an omitted entry is not counted, a replaced one
/// counts its replacement.
pub fn pi_context_tokens(path: &[&Entry]) -> u64 {
    // Walked from the end, one stored message at a time (a long session's messages are never
    // all held): the estimates after the anchor are summed until the anchor is met; an
    // anchor that does not count (before the latest compaction or context_edit) means the
    // whole context's estimate, which the same walk sums for every message but system ones.
    let mut picked = Vec::new();
    path_messages_with(path, None, |k, _| {
        picked.push(k);
        None
    });
    let edits = crate::session::ContextEdits::on_path(path);
    let invalidated_after = path
        .iter()
        .rposition(|e| e.kind == "compaction" || e.kind == "context_edit");
    let mut after_anchor = 0u64;
    let mut not_system = 0u64;
    let mut anchor_met = false;
    for &k in picked.iter().rev() {
        let e = path[k];
        let mut r = e.raw();
        let mut m = match e.kind.as_str() {
            "message" => r["message"].take(),
            "custom_message" => {
                serde_json::json!({"role": "custom", "content": r["content"].take()})
            }
            "branch_summary" => {
                serde_json::json!({"role": "branchSummary", "summary": r["summary"].take()})
            }
            _ => continue,
        };
        if let Some((_, replacement)) = edits.as_ref().and_then(|x| x.get(&e.id)) {
            if replacement.is_null() {
                continue;
            }
            replace_value_content(&mut m, replacement);
        }
        if !anchor_met {
            if let Some(total) = usage_total(&m) {
                anchor_met = true;
                if invalidated_after.is_none_or(|x| k > x) {
                    return total + after_anchor;
                }
            }
        }
        let tokens = pi_estimate_tokens(&m);
        if !anchor_met {
            after_anchor += tokens;
        }
        if m["role"] != "system" {
            not_system += tokens;
        }
    }
    // No anchor that counts: the compaction summary, the current system message and every
    // other message.
    let summary = path
        .iter()
        .rposition(|e| e.kind == "compaction")
        .map(|ci| {
            pi_estimate_tokens(
                &serde_json::json!({"role": "compactionSummary", "summary": path[ci].raw()["summary"]}),
            )
        })
        .unwrap_or(0);
    let system = crate::session::SystemState::of_path(path);
    let system_tokens = if system.seen {
        pi_estimate_tokens(&system.checkpoint(0))
    } else {
        0
    };
    system_tokens + summary + not_system
}

/// Pi 1.6's `getAssistantUsage` on a stored message: the usage total of an assistant answer
/// that is not an error or aborted (`totalTokens`, else input + output + cache read + cache
/// write), `None` when that total is 0 or the message is not such an answer.
fn usage_total(m: &Value) -> Option<u64> {
    if m["role"] != "assistant" || m["stopReason"] == "error" || m["stopReason"] == "aborted" {
        return None;
    }
    let u = &m["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    let total = match n("totalTokens") {
        0 => n("input") + n("output") + n("cacheRead") + n("cacheWrite"),
        t => t,
    };
    (total > 0).then_some(total)
}

/// Pi 1.6's `projectContextEntry` on a stored message `m` (any role, as in the file) whose
/// entry a `context_edit` replaces (`replacement` not null): a user, assistant, tool-result or
/// custom message gets the replacement's content (Pi 1.6 writes `{"content": string | blocks}`;
/// a bare string or block list is read the same way, as [`crate::session::ContextEdits`] reads
/// it), a string becoming one text block for an assistant or a tool result; any other message
/// is kept as it is.
pub(crate) fn replace_value_content(m: &mut Value, replacement: &Value) {
    let role = m["role"].as_str().unwrap_or("");
    if !matches!(role, "user" | "assistant" | "toolResult" | "custom") {
        return;
    }
    let blocks = matches!(role, "assistant" | "toolResult");
    let content = match replacement {
        Value::Object(o) => o.get("content").unwrap_or(&Value::Null),
        other => other,
    };
    m["content"] = match content {
        Value::String(t) if blocks => serde_json::json!([{"type": "text", "text": t}]),
        other => other.clone(),
    };
}

/// Tool results longer than this are cut in the summary request (Pi's `TOOL_RESULT_MAX_CHARS`).
pub const TOOL_RESULT_MAX_CHARS: usize = 2_000;

fn truncate_for_summary(text: &str, max_chars: usize) -> String {
    let n = text.chars().count();
    if n <= max_chars {
        return text.to_string();
    }
    let head: String = text.chars().take(max_chars).collect();
    format!(
        "{head}\n\n[... {} more characters truncated]",
        n - max_chars
    )
}

/// Pi 1.6's `serializeConversation`: the messages as tagged text, so the summariser does not
/// continue the conversation; thinking is left out (Pi 1.6: providers return summaries of the
/// real reasoning, and replayed thinking can make the request larger than the context it
/// summarises). A call whose result is not among `messages` is marked as interrupted, so no
/// compaction's summary request carries an unanswered call (case CMP-01).
pub fn serialize_conversation(messages: &[Message]) -> String {
    serialize(messages, true)
}

/// Pi 1.6's `serializeConversation` as it is, for the branch summary, whose messages never
/// hold tool results (Pi's `prepareBranchEntries` leaves them out: the call says what was
/// done): no call is marked as interrupted.
pub(crate) fn serialize_conversation_as_pi(messages: &[Message]) -> String {
    serialize(messages, false)
}

/// [`serialize_conversation`]; `mark_unanswered`: a call without its result gets an
/// "interrupted" line.
fn serialize(messages: &[Message], mark_unanswered: bool) -> String {
    let answered: BTreeSet<&str> = messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some(r.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    let mut parts: Vec<String> = Vec::new();
    for m in messages {
        match m {
            // Not part of the conversation being summarised: the prompt is the harness's.
            Message::System(_) => {}
            Message::User(u) => {
                let text = match &u.content {
                    UserContent::Text(t) => t.clone(),
                    UserContent::Blocks(b) => b
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) => Some(t.text.as_str()),
                            _ => None,
                        })
                        .collect(),
                };
                if !text.is_empty() {
                    parts.push(format!("[User]: {text}"));
                }
            }
            Message::Assistant(a) => {
                let mut texts = Vec::new();
                let mut calls = Vec::new();
                let mut open = Vec::new();
                for b in &a.content {
                    match b {
                        ContentBlock::Text(t) => texts.push(t.text.as_str()),
                        ContentBlock::Thinking(_) => {}
                        ContentBlock::ToolCall(c) => {
                            let args = match &c.arguments {
                                Value::Object(o) => o
                                    .iter()
                                    .map(|(k, v)| format!("{k}={v}"))
                                    .collect::<Vec<_>>()
                                    .join(", "),
                                other => other.to_string(),
                            };
                            calls.push(format!("{}({args})", c.name));
                            if mark_unanswered && !answered.contains(c.id.as_str()) {
                                open.push(c.name.clone());
                            }
                        }
                        ContentBlock::Image(_) => {}
                    }
                }
                if !texts.is_empty() {
                    parts.push(format!("[Assistant]: {}", texts.join("\n")));
                }
                if !calls.is_empty() {
                    parts.push(format!("[Assistant tool calls]: {}", calls.join("; ")));
                }
                for name in open {
                    parts.push(format!(
                        "[Tool result]: ({name} was interrupted; it has no result)"
                    ));
                }
            }
            Message::ToolResult(r) => {
                let text: String = r
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text(t) => Some(t.text.as_str()),
                        _ => None,
                    })
                    .collect();
                if !text.is_empty() {
                    parts.push(format!(
                        "[Tool result]: {}",
                        truncate_for_summary(&text, TOOL_RESULT_MAX_CHARS)
                    ));
                }
            }
        }
    }
    parts.join("\n\n")
}

/// Pi 1.6's system prompt of every summary request (`SUMMARIZATION_SYSTEM_PROMPT` in its
/// `compaction/utils`; Pi 0.73 said "an AI coding assistant").
pub const SUMMARIZATION_SYSTEM_PROMPT: &str = "You are a context summarization assistant. Your task is to read a conversation between a user and an AI assistant, then produce a structured summary following the exact format specified.\n\nDo NOT continue the conversation. Do NOT respond to any questions in the conversation. ONLY output the structured summary.";

/// Pi's instructions for a first summary.
pub const SUMMARIZATION_PROMPT: &str = include_str!("compaction/summarize.txt");
/// Pi's instructions for folding new messages into a previous summary.
pub const UPDATE_SUMMARIZATION_PROMPT: &str = include_str!("compaction/update.txt");
/// Pi 1.6's instructions for the early part of a split turn (`TURN_PREFIX_SUMMARIZATION_PROMPT`).
pub const TURN_PREFIX_SUMMARIZATION_PROMPT: &str = include_str!("compaction/turn_prefix.txt");

fn with_instructions(base: &str, instructions: Option<&str>) -> String {
    match instructions.map(str::trim).filter(|i| !i.is_empty()) {
        Some(i) => format!("{base}\n\nAdditional focus: {i}"),
        None => base.to_string(),
    }
}

pub(crate) fn summary_context(text: String) -> Context {
    Context {
        system_prompt: SUMMARIZATION_SYSTEM_PROMPT.to_string(),
        messages: vec![Message::User(pi_ai::UserMessage {
            content: UserContent::Blocks(vec![ContentBlock::text(text)]),
            timestamp: chrono::Utc::now().timestamp_millis(),
        })],
        tools: Vec::new(),
    }
}

/// The history summary request (Pi's `generateSummary`): the conversation in tags, the previous
/// summary when there is one, Pi's (update) instructions, and the user's custom instructions.
pub fn history_request(
    messages: &[Message],
    previous_summary: Option<&str>,
    instructions: Option<&str>,
) -> Context {
    let base = if previous_summary.is_some() {
        UPDATE_SUMMARIZATION_PROMPT
    } else {
        SUMMARIZATION_PROMPT
    };
    let mut text = format!(
        "<conversation>\n{}\n</conversation>\n\n",
        serialize_conversation(messages)
    );
    if let Some(p) = previous_summary {
        text.push_str(&format!("<previous-summary>\n{p}\n</previous-summary>\n\n"));
    }
    text.push_str(&with_instructions(base, instructions));
    summary_context(text)
}

/// The split-turn prefix request (Pi 1.6's `generateTurnPrefixSummary`): `# Conversation`, the
/// serialised messages, `# Instructions` and Pi's instructions, then the user's custom
/// instructions as `Additional focus: …` (Pi 1.6 carries them here too: case CMP-07).
pub fn turn_prefix_request(messages: &[Message], instructions: Option<&str>) -> Context {
    summary_context(format!(
        "# Conversation\n{}\n\n# Instructions\n{}",
        serialize_conversation(messages),
        with_instructions(TURN_PREFIX_SUMMARIZATION_PROMPT, instructions)
    ))
}

/// The output limit of a summary request, in tokens, as Pi 1.6 asks it: its summary requests
/// name no `maxTokens` (`completeSummarization`; "summaries use the model's output limit",
/// pi #9512), so pi-ai's `buildBaseOptions` asks the model's `maxTokens` clamped by
/// `clampMaxTokensToContext` to what the window leaves ([`pi_ai::pi_output_limit`] of
/// `estimateContextTokens`: the system prompt's and the one user text's characters / 3.5,
/// rounded up, each). A model without a known window gets its `maxTokens`.
pub fn summary_max_tokens(model: &Model, context: &Context) -> u64 {
    if model.context_window == 0 {
        return model.max_tokens.max(1);
    }
    let tokens = |s: &str| (s.encode_utf16().count() as u64 * 2).div_ceil(7);
    let input = tokens(&context.system_prompt)
        + context
            .messages
            .iter()
            .map(|m| match m {
                Message::User(u) => match &u.content {
                    UserContent::Text(t) => tokens(t),
                    UserContent::Blocks(b) => {
                        let chars: u64 = b
                            .iter()
                            .map(|b| match b {
                                ContentBlock::Text(t) => t.text.encode_utf16().count() as u64,
                                _ => 4_800,
                            })
                            .sum();
                        (chars * 2).div_ceil(7)
                    }
                },
                _ => 0,
            })
            .sum::<u64>();
    model
        .max_tokens
        .min(pi_ai::pi_output_limit(model.context_window, input))
        .max(1)
}

/// Why a summary stopped by `length` fails (Pi 1.6's `getSummarizationFailure`, after the
/// summary's label: [`SummaryKind::failed`]).
pub const SUMMARY_CUT: &str = "generation hit the token cap and the summary is incomplete";

/// Which summary a request writes. Pi 1.6 names each in its failures
/// (`getSummarizationFailure(response, label)` in `core/compaction/compaction.js` and
/// `branch-summarization.js`): a compaction's history summary, a split turn's prefix summary,
/// a branch summary. A compaction's failure reaches the client in `compaction_end`'s
/// `errorMessage` after the compaction's own label ("Compaction failed: ", "Auto-compaction
/// failed: ", "Context overflow recovery failed: "); a branch summary's is the error of the
/// tree navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummaryKind {
    /// Pi's `generateSummary`: "Summarization".
    History,
    /// Pi's `generateTurnPrefixSummary`: "Turn prefix summarization".
    TurnPrefix,
    /// Pi's `generateBranchSummary`: "Branch summarization".
    Branch,
}

impl SummaryKind {
    /// Pi 1.6's label of this summary in its failures.
    pub fn label(self) -> &'static str {
        match self {
            SummaryKind::History => "Summarization",
            SummaryKind::TurnPrefix => "Turn prefix summarization",
            SummaryKind::Branch => "Branch summarization",
        }
    }

    /// The failure `why` of this summary as Pi 1.6 words it: `"<label> failed: <why>"`.
    pub fn failed(self, why: &str) -> CompactionError {
        CompactionError::SummaryFailed(format!("{} failed: {why}", self.label()))
    }
}

/// One summary completion asking [`summary_max_tokens`] (Pi 1.6's limit); the text is capped at
/// `4 ×` the model's `maxTokens` characters (the most Pi asks before clamping to the window)
/// even when a provider ignores the limit, so summaries cannot grow without bound (CMP-04). The
/// cap is not the clamped limit: that one is small exactly when the summarised conversation
/// fills the window, while the summary replaces that conversation. An answer without text (empty, or only a tool call) is asked for
/// once more; a second one fails the compaction with [`CompactionError::SummaryFailed`], so no
/// empty summary ever replaces the context (case 18.11).
pub(crate) async fn complete_summary(
    model: &Model,
    context: &Context,
    kind: SummaryKind,
    retry: SummaryRetry<'_>,
    cancel: &CancellationToken,
) -> Result<(String, pi_ai::Usage), CompactionError> {
    let max_tokens = summary_max_tokens(model, context);
    let mut empty_answers = 0;
    // Every request's usage counts (Pi 1.6 writes the summary calls' usage on the entry): the
    // one answer's as it is, those of an answer asked again combined (Pi's `combineUsage`).
    let mut usage: Option<pi_ai::Usage> = None;
    let text = loop {
        let m = summary_request(model, context, max_tokens, retry, cancel).await;
        usage = Some(match usage {
            None => m.usage.clone(),
            Some(u) => combine_usage(&u, &m.usage),
        });
        match m.stop_reason {
            StopReason::Aborted => return Err(CompactionError::Cancelled),
            StopReason::Error => {
                return Err(kind.failed(m.error_message.as_deref().unwrap_or("Unknown error")))
            }
            // Pi 1.6's `getSummarizationFailure`: a summary stopped at its output limit is
            // partial and never becomes a checkpoint.
            StopReason::Length => return Err(kind.failed(SUMMARY_CUT)),
            _ => {}
        }
        if cancel.is_cancelled() {
            return Err(CompactionError::Cancelled);
        }
        let text = m
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        if !text.trim().is_empty() {
            break text;
        }
        empty_answers += 1;
        let what = if m.tool_calls().is_empty() {
            "no text"
        } else {
            "only a tool call"
        };
        tracing::warn!("the summary model answered with {what} (attempt {empty_answers} of 2)");
        if empty_answers == 2 {
            return Err(kind.failed(&format!(
                "the summary model answered with {what} twice; the context is kept as it was"
            )));
        }
    };
    let most = model.max_tokens.max(max_tokens);
    let cap = (most * 4) as usize;
    let text = if text.chars().count() > cap {
        let head: String = text.chars().take(cap).collect();
        format!("{head}\n\n[summary cut at {most} tokens]")
    } else {
        text
    };
    Ok((text, usage.unwrap_or_default()))
}

/// What a summary request's retries are told to (Pi 1.6's `_summarizationRetryCallbacks`,
/// whose `summarization_retry_*` events the agent's side sends).
#[async_trait::async_trait]
pub trait SummaryRetryListener: Send + Sync {
    /// Retry `attempt` of at most `max_attempts` follows after `delay_ms` milliseconds, for the
    /// failure `error_message` (pi-ai's `onRetryScheduled`).
    async fn scheduled(&self, attempt: u32, max_attempts: u32, delay_ms: u64, error_message: &str);
    /// The wait is over and the request is sent again (`onRetryAttemptStart`).
    async fn attempt_start(&self);
    /// The retries are over: an answer came, the last attempt failed, or the wait or the
    /// request was aborted (`onRetryFinished`, once after a first retry was scheduled).
    async fn finished(&self);
}

/// How a summary request retries a transient failure: Pi 1.6's `completeSummarization`
/// wraps every summary request (a compaction's history and turn-prefix summaries, a branch
/// summary) in pi-ai's `retryAssistantCall` with `settings.retry`. The default: no retry.
#[derive(Clone, Copy, Default)]
pub struct SummaryRetry<'a> {
    /// The retry budget and backoff (`settings.retry`: `maxRetries`, `baseDelayMs`, the
    /// longest delay); `None` when retrying is off (`retry.enabled` false).
    pub policy: Option<&'a pi_ai::RetryPolicy>,
    /// Who is told of the retries; `None`: nobody.
    pub listener: Option<&'a dyn SummaryRetryListener>,
}

/// One summary request, retried as pi-ai 1.6's `retryAssistantCall` retries it: an answer
/// that is not an error returns at once; an error that is not transient
/// ([`pi_ai::ProviderError::is_retryable`] of its `errorMessage`), or the last allowed one,
/// returns as it is; otherwise retry `n` waits `baseDelayMs · 2^(n-1)` (Pi's `retryDelayMs`,
/// at most the policy's longest delay; no jitter, no `Retry-After`) and sends it again. An
/// abort during the wait returns the failed answer as `aborted`. The listener hears
/// `scheduled` before each wait, `attempt_start` after it, `finished` once at the end when a
/// retry was scheduled.
async fn summary_request(
    model: &Model,
    context: &Context,
    max_tokens: u64,
    retry: SummaryRetry<'_>,
    cancel: &CancellationToken,
) -> pi_ai::AssistantMessage {
    // Pi 1.6's summaries pass no `thinkingBudgets`: pi-ai's default budgets.
    let plain;
    let model = if model.thinking_budgets == pi_ai::models::ThinkingBudgets::default() {
        model
    } else {
        plain = Model {
            thinking_budgets: pi_ai::models::ThinkingBudgets::default(),
            ..model.clone()
        };
        &plain
    };
    let max_attempts = retry.policy.map_or(0, |p| p.max_retries);
    let mut attempt = 0u32;
    loop {
        let stream = pi_ai::stream(
            model,
            context,
            StreamOptions {
                cancel: cancel.child_token(),
                // The model's limit, clamped to the window's room (a thinking budget
                // included), as pi-ai 1.6's `buildBaseOptions` asks it.
                output_room: (model.context_window > 0).then_some(max_tokens),
                // Pi 1.6's `completeSummarization`: summary requests cache nothing (no
                // `cache_control`, no `prompt_cache_key`, no session headers).
                cache_retention: Some(CacheRetention::None),
                ..StreamOptions::default()
            },
        );
        let mut m = stream.result().await;
        let retryable = m.stop_reason == StopReason::Error
            && pi_ai::errors::classify_message(&m, 0).is_some_and(|e| e.is_retryable());
        if !retryable || attempt >= max_attempts || cancel.is_cancelled() {
            if attempt > 0 {
                if let Some(l) = retry.listener {
                    l.finished().await;
                }
            }
            return m;
        }
        attempt += 1;
        let why = m
            .error_message
            .clone()
            .unwrap_or_else(|| "Unknown error".into());
        let delay = retry.policy.map_or(std::time::Duration::ZERO, |p| {
            p.base_delay
                .saturating_mul(2u32.saturating_pow(attempt - 1))
                .min(p.max_delay)
        });
        if let Some(l) = retry.listener {
            l.scheduled(attempt, max_attempts, delay.as_millis() as u64, &why)
                .await;
        }
        if pi_ai::RetryPolicy::wait(delay, cancel).await.is_err() {
            if let Some(l) = retry.listener {
                l.finished().await;
            }
            m.stop_reason = StopReason::Aborted;
            m.error_message = None;
            return m;
        }
        if let Some(l) = retry.listener {
            l.attempt_start().await;
        }
    }
}

/// Pi 1.6's `combineUsage` (`core/usage-totals.js`): the sum of two usages, field by field;
/// `cacheWrite1h` and `reasoning` kept when either side reports them, `totalFromProvider`
/// true only when both are.
pub(crate) fn combine_usage(first: &pi_ai::Usage, second: &pi_ai::Usage) -> pi_ai::Usage {
    let either = |a: Option<u64>, b: Option<u64>| {
        (a.is_some() || b.is_some()).then(|| a.unwrap_or(0) + b.unwrap_or(0))
    };
    pi_ai::Usage {
        input: first.input + second.input,
        output: first.output + second.output,
        cache_read: first.cache_read + second.cache_read,
        cache_write: first.cache_write + second.cache_write,
        cache_write_1h: either(first.cache_write_1h, second.cache_write_1h),
        reasoning: either(first.reasoning, second.reasoning),
        total_tokens: first.total_tokens + second.total_tokens,
        cost: pi_ai::types::Cost {
            input: first.cost.input + second.cost.input,
            output: first.cost.output + second.cost.output,
            cache_read: first.cost.cache_read + second.cost.cache_read,
            cache_write: first.cost.cache_write + second.cost.cache_write,
            total: first.cost.total + second.cost.total,
            total_from_provider: Some(
                first.cost.total_from_provider == Some(true)
                    && second.cost.total_from_provider == Some(true),
            ),
        },
    }
}

/// A compaction's outcome, as Pi's `CompactionResult` (the `compaction` entry's fields).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CompactionResult {
    pub summary: String,
    pub first_kept_entry_id: String,
    pub tokens_before: u64,
    /// Pi 1.6: tokens of the context rebuilt after the compaction, estimated as Pi estimates
    /// (`estimateMessagesTokens`: characters / 4 per message, not a provider's count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_tokens_after: Option<u64>,
    /// Pi 1.6: the usage of the summary requests (written on the `compaction` entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<pi_ai::Usage>,
    /// `{readFiles, modifiedFiles}`.
    #[cfg_attr(
        feature = "ts",
        ts(type = "{ readFiles: Array<string>, modifiedFiles: Array<string> }")
    )]
    pub details: Value,
}

/// Writes the summaries for `prep` (Pi's `compact`): the history summary (first or update) and,
/// for a split turn, then the turn-prefix summary (one after the other, as Pi 1.6: a failed
/// first one stops before the second), each retried as `retry` says; then the file lists.
/// Each asks Pi 1.6's output limit ([`summary_max_tokens`]), not Pi 0.73's share of
/// `compaction.reserveTokens`.
pub async fn summarize(
    model: &Model,
    prep: &Preparation,
    instructions: Option<&str>,
    retry: SummaryRetry<'_>,
    cancel: &CancellationToken,
) -> Result<CompactionResult, CompactionError> {
    let history = async {
        // A split turn with nothing older than it: the previous summary (or Pi's "No prior
        // history.") stands for the history, with no request (Pi 1.6's `compact`), so no
        // summary request carries an empty conversation. ([`prepare`] refuses the unsplit
        // case.)
        if prep.is_split_turn && prep.messages_to_summarize.is_empty() {
            let text = prep
                .previous_summary
                .clone()
                .unwrap_or_else(|| "No prior history.".to_string());
            return Ok((text, None));
        }
        let ctx = history_request(
            &prep.messages_to_summarize,
            prep.previous_summary.as_deref(),
            instructions,
        );
        complete_summary(model, &ctx, SummaryKind::History, retry, cancel)
            .await
            .map(|(text, usage)| (text, Some(usage)))
    };
    // One after the other, as Pi 1.6's `compact` asks them: the history, then the turn
    // prefix; a failed history summary ends the compaction before the second request.
    let summary = if prep.is_split_turn {
        let (h, hu) = history.await?;
        let ctx = turn_prefix_request(&prep.turn_prefix_messages, instructions);
        let (p, pu) = complete_summary(model, &ctx, SummaryKind::TurnPrefix, retry, cancel).await?;
        // Pi 1.6's `compact`: the prefix's usage alone when no history request was made.
        let usage = match hu {
            Some(hu) => combine_usage(&hu, &pu),
            None => pu,
        };
        (
            format!("{h}\n\n---\n\n**Turn Context (split turn):**\n\n{p}"),
            Some(usage),
        )
    } else {
        let (h, u) = history.await?;
        (h, u)
    };
    let (summary, usage) = summary;
    let (read, modified) = prep.file_ops.lists();
    Ok(CompactionResult {
        summary: format!("{summary}{}", format_file_operations(&read, &modified)),
        first_kept_entry_id: prep.first_kept_entry_id.clone(),
        tokens_before: prep.tokens_before,
        estimated_tokens_after: None,
        usage,
        details: serde_json::json!({"readFiles": read, "modifiedFiles": modified}),
    })
}

/// The [`Compactor`] of a session file: prepares from the branch ending at the writer's leaf,
/// summarises with the run's model, and appends Pi's `compaction` entry
/// (`{summary, firstKeptEntryId, tokensBefore, details}`) with the writer, flushed at once.
pub struct SessionCompactor {
    writer: Arc<Mutex<SessionWriter>>,
}

impl SessionCompactor {
    pub fn new(writer: Arc<Mutex<SessionWriter>>) -> Self {
        SessionCompactor { writer }
    }

    /// The writer ([`crate::session::lock_writer`]: a poisoned one is an error).
    fn writer(&self) -> Result<std::sync::MutexGuard<'_, SessionWriter>, CompactionError> {
        crate::session::lock_writer(&self.writer)
            .map_err(|e| CompactionError::Session(e.to_string()))
    }
}

#[async_trait::async_trait]
impl Compactor for SessionCompactor {
    async fn propose(
        &self,
        model: &Model,
        settings: &CompactionSettings,
        instructions: Option<&str>,
        retry: SummaryRetry<'_>,
        cancel: &CancellationToken,
    ) -> Result<CompactionProposal, CompactionError> {
        let (path, leaf): (Vec<Entry>, Option<String>) = {
            let w = self.writer()?;
            (
                w.branch_path().into_iter().cloned().collect(),
                w.leaf().map(str::to_string),
            )
        };
        let refs: Vec<&Entry> = path.iter().collect();
        let prep = prepare(&refs, settings.keep_recent_tokens)?;
        drop(refs);
        drop(path);
        let mut result = summarize(model, &prep, instructions, retry, cancel).await?;
        let w = self.writer()?;
        if w.leaf() != leaf.as_deref() {
            return Err(CompactionError::Session(
                "the session moved on while the summary was written".into(),
            ));
        }
        let messages = w
            .tree()
            .context_after_compaction(
                leaf.as_deref(),
                &result.summary,
                &result.first_kept_entry_id,
            )
            .messages;
        // Pi 1.6's `estimatedTokensAfter` (`estimateMessagesTokens` of the projection after
        // the compaction): the prompt/tool checkpoint the entry stores (`commit`), the summary
        // as its text alone (Pi's `compactionSummary` message; ours, first, carries Pi's
        // wrapper text for the model), then every kept message.
        let checkpoint = w.tree().system_state(leaf.as_deref()).checkpoint_tokens();
        let summary = (result.summary.encode_utf16().count() as u64).div_ceil(4);
        let kept: u64 = messages.iter().skip(1).map(estimate_tokens).sum();
        result.estimated_tokens_after = Some(checkpoint + summary + kept);
        Ok(CompactionProposal {
            result,
            messages,
            basis: leaf,
        })
    }

    /// [`prepare`] on the branch as it stands; a writer that cannot be read answers yes (the
    /// proposal then reports it).
    fn check(&self, settings: &CompactionSettings) -> Result<(), CompactionError> {
        let Ok(w) = self.writer() else {
            return Ok(());
        };
        let path = w.branch_path();
        prepare(&path, settings.keep_recent_tokens).map(|_| ())
    }

    fn commit(&self, p: &CompactionProposal) -> Result<Vec<Message>, CompactionError> {
        let mut w = self.writer()?;
        if w.leaf() != p.basis.as_deref() {
            return Err(CompactionError::Session(
                "the session moved on while the summary was written".into(),
            ));
        }
        let r = &p.result;
        // Pi 1.6: the complete prompt/tool checkpoint at the boundary, when the branch stores
        // its prompt (a file written as Pi 0.73.1 wrote them has none).
        let system = w.tree().system_state(w.leaf());
        let pi16 = w.writes_pi16();
        let system_message = system
            .seen
            .then(|| system.checkpoint(pi_ai::types::now_millis()));
        w.append(crate::session::EntryData::Compaction {
            summary: r.summary.clone(),
            first_kept_entry_id: r.first_kept_entry_id.clone(),
            tokens_before: r.tokens_before,
            details: r.details.clone(),
            // Pi's `fromHook`: false unless an extension's session_before_compact made it.
            from_hook: false,
            // Pi 1.6's `usage`, not in a file kept in Pi 0.73.1's format.
            usage: r.usage.clone().filter(|_| pi16),
            system_message,
        })
        .and_then(|_| w.sync_now())
        .map_err(|e| CompactionError::Session(e.to_string()))?;
        Ok(w.agent_context().messages)
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
    fn json_characters_are_counted_as_the_serialised_string_has_them() {
        for v in [
            json!({}),
            json!({"path":"small.txt","n":[1,2.5,null,true]}),
            json!({"text":"héllo — 日本語 🎉","quote":"a\"b\\c\n\u{0001}"}),
            json!("plain"),
        ] {
            assert_eq!(json_chars(&v), v.to_string().chars().count() as u64, "{v}");
        }
    }

    /// Figures from Pi 1.6.0 itself: pi-ai's `clampMaxTokensToContext` on the
    /// `normalizeContext` of the summary system prompt and one user text of `n` × "x" and an
    /// "é", for a model of `contextWindow`/`maxTokens` (run with node against Pi 1.6.0's dist).
    #[test]
    fn summary_output_limit_is_pi_1_6_s_clamp_of_the_model_s_limit() {
        for (window, max, n, expected) in [
            (20_000, 32_000, 1_000, 15_529),
            (200_000, 4_096, 10, 4_096),
            (40_000, 64_000, 50_000, 21_529),
            (16_000, 8_000, 60_000, 1),
            (0, 8_192, 10, 8_192),
        ] {
            let mut model = Model::new(pi_ai::Api::AnthropicMessages, "p", "m", "http://x");
            model.context_window = window;
            model.max_tokens = max;
            let ctx = summary_context(format!("{}é", "x".repeat(n)));
            assert_eq!(
                summary_max_tokens(&model, &ctx),
                expected,
                "{window} {max} {n}"
            );
        }
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
    fn keep_budget_leaves_room_under_the_threshold() {
        // A 32k window with Pi's defaults: threshold 16,384; 1,500 tokens of prompt and tools
        // leave 14,884, half of it kept raw.
        assert_eq!(keep_budget(20_000, 32_768, 16_384, 1_500), 7_442);
        // A 200k window keeps keepRecentTokens; an unknown window too.
        assert_eq!(keep_budget(20_000, 200_000, 16_384, 1_500), 20_000);
        assert_eq!(keep_budget(20_000, 0, 16_384, 1_500), 20_000);
        // A system prompt over the threshold, or a window at most the reserve, leaves no
        // room: keepRecentTokens as Pi keeps it.
        assert_eq!(keep_budget(200, 18_000, 6_300, 12_000), 200);
        assert_eq!(keep_budget(20_000, 12_000, 16_384, 1_500), 20_000);
        // One token of room keeps none.
        assert_eq!(keep_budget(20_000, 18_000, 6_300, 11_699), 0);
        // The budget cuts inside a long turn: [u, a{c1}, r(c1), a{c2}, r(c2), a{c3}, r(c3)].
        let mut v = vec![json!({"role":"user","content":text(100)})];
        for i in 1..=3 {
            v.push(json!({"role":"assistant","content":[{"type":"toolCall","id":format!("c{i}"),"name":"read","arguments":{}}],"stopReason":"toolUse"}));
            v.push(json!({"role":"toolResult","toolCallId":format!("c{i}"),"toolName":"read","content":[{"type":"text","text":text(4_000)}],"isError":false}));
        }
        let m = msgs(serde_json::Value::Array(v));
        assert_eq!(
            find_cut_point(&m, 20_000),
            CutPoint {
                first_kept: 0,
                turn_start: None
            },
            "keepRecentTokens keeps all of it"
        );
        assert_eq!(
            find_cut_point(&m, keep_budget(20_000, 32_768, 16_384, 1_500)),
            CutPoint {
                first_kept: 5,
                turn_start: Some(0)
            },
            "the budget keeps the last call with its result"
        );
    }

    /// Session entries (`type: message` unless the value has a `type`) chained by `parentId`.
    fn entries(v: serde_json::Value) -> Vec<Entry> {
        let mut parent: Option<String> = None;
        let mut out = Vec::new();
        for (i, mut e) in v.as_array().unwrap().iter().cloned().enumerate() {
            let id = e["id"]
                .as_str()
                .map_or_else(|| format!("e{i}"), str::to_string);
            if e.get("type").is_none() {
                if let Some(o) = e.as_object_mut() {
                    o.remove("id");
                }
                e = json!({"type":"message","message":e});
            }
            e["id"] = json!(id);
            e["parentId"] = json!(parent);
            e["timestamp"] = json!("2026-01-01T00:00:00.000Z");
            out.push(Entry::from_value(&e).unwrap());
            parent = Some(id);
        }
        out
    }

    /// The one-huge-old-turn session of the report: user ≈30k tokens, assistant ≈15k (no
    /// usage: an imported turn), then case PAIR-01 (an aborted call) and the new prompt.
    fn one_huge_turn() -> Vec<Entry> {
        entries(json!([
            {"id":"u0","role":"user","content":text(30_000),"timestamp":1},
            {"id":"a0","role":"assistant","content":[{"type":"text","text":text(15_000)}],"stopReason":"stop","timestamp":2},
            {"id":"e1","role":"user","content":"run the tests","timestamp":3},
            {"id":"e2","role":"assistant","content":[{"type":"toolCall","id":"toolu_01A","name":"bash","arguments":{"command":"sleep 60"}}],"stopReason":"aborted","timestamp":4},
            {"id":"e3","role":"user","content":"never mind, list files","timestamp":5},
            {"id":"u4","role":"user","content":"next","timestamp":6}
        ]))
    }

    #[test]
    fn cmp02_one_huge_old_turn_is_cut_after_its_start_not_kept_whole() {
        let path = one_huge_turn();
        let refs: Vec<&Entry> = path.iter().collect();
        let messages: Vec<Message> = path.iter().filter_map(entry_message).collect();
        // Tokens: 30,000 + 15,000 + 4 ("run the tests") + 7 (bash + its JSON) + 6 + 1.
        assert_eq!(
            messages.iter().map(estimate_tokens).collect::<Vec<_>>(),
            [30_000, 15_000, 4, 7, 6, 1]
        );
        // Pi 1.6 cuts at u0 (the oldest message alone reaches the budget): nothing older to
        // summarise while 45,018 tokens are kept. The kept part from a0 (15,018) fits.
        assert_eq!(
            find_cut_point(&messages, 20_000),
            CutPoint {
                first_kept: 1,
                turn_start: Some(0)
            }
        );
        let prep = prepare(&refs, 20_000).unwrap();
        let expected = Preparation {
            first_kept_entry_id: "a0".into(),
            messages_to_summarize: Vec::new(),
            turn_prefix_messages: vec![messages[0].clone()],
            is_split_turn: true,
            // No usage anywhere: the estimate of the whole context.
            tokens_before: 45_018,
            previous_summary: None,
            file_ops: FileOps::default(),
        };
        assert_eq!(prep, expected);
        // The turn-prefix request carries the huge user message (and only it).
        let ctx = turn_prefix_request(&prep.turn_prefix_messages, None);
        let Message::User(u) = &ctx.messages[0] else {
            panic!("{:?}", ctx.messages)
        };
        assert_eq!(
            u.content,
            UserContent::Blocks(vec![ContentBlock::text(format!(
                "# Conversation\n[User]: {}\n\n# Instructions\n{TURN_PREFIX_SUMMARIZATION_PROMPT}",
                text(30_000)
            ))])
        );

        // A smaller budget (agent/compact on a 32k window): the budget is reached at a0, so
        // Pi's own cut applies (a0, the turn split), and its kept part stays over the budget
        // as Pi keeps it.
        assert_eq!(prepare(&refs, 7_370).unwrap(), expected);
        // Budget 5: reached at e3, a user message: u0..e2 are summarised, no turn is split.
        let prep = prepare(&refs, 5).unwrap();
        assert_eq!(
            prep,
            Preparation {
                first_kept_entry_id: "e3".into(),
                messages_to_summarize: messages[..4].to_vec(),
                turn_prefix_messages: Vec::new(),
                is_split_turn: false,
                ..expected.clone()
            }
        );
        assert_eq!(
            serialize_conversation(&prep.messages_to_summarize),
            format!(
                "[User]: {}\n\n[Assistant]: {}\n\n[User]: run the tests\n\n[Assistant tool calls]: bash(command=\"sleep 60\")\n\n[Tool result]: (bash was interrupted; it has no result)",
                text(30_000),
                text(15_000)
            )
        );
    }

    #[test]
    fn nothing_to_compact_only_without_a_later_cut_and_said_without_contradiction() {
        // One message over the budget: no later cut point.
        let path = entries(json!([{"role":"user","content":text(30_000),"timestamp":1}]));
        let refs: Vec<&Entry> = path.iter().collect();
        let err = prepare(&refs, 20_000).unwrap_err();
        assert_eq!(
            err,
            CompactionError::Uncuttable {
                what: "the conversation".into(),
                messages: 1,
                tokens: 30_000,
                keep_recent_tokens: 20_000
            }
        );
        assert_eq!(err.to_string(), "Nothing to compact: the conversation (1 message, about 30000 tokens) is over the 20000 tokens kept as they are (compaction.keepRecentTokens), but it cannot be cut after its first message (the kept part must start at a user or assistant message), so there is nothing older to summarise; no summary request was sent");
        // Under the budget: all of it is kept, and the text says it fits.
        let path = entries(json!([
            {"role":"user","content":text(3),"timestamp":1},
            {"role":"assistant","content":[{"type":"text","text":text(2)}],"stopReason":"stop","timestamp":2}
        ]));
        let refs: Vec<&Entry> = path.iter().collect();
        assert_eq!(
            prepare(&refs, 20_000).unwrap_err(),
            CompactionError::AllKept {
                what: "the conversation".into(),
                messages: 2,
                tokens: 5,
                keep_recent_tokens: 20_000
            }
        );
    }

    #[test]
    fn tokens_before_skips_a_last_answer_without_usage() {
        let usage =
            json!({"input":50_000,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":50_000});
        let base = |last: serde_json::Value| {
            entries(json!([
                {"role":"user","content":text(10),"timestamp":1},
                {"role":"assistant","content":[{"type":"text","text":text(100)}],"stopReason":"stop","usage":usage,"timestamp":2},
                {"role":"user","content":text(20),"timestamp":3},
                last,
                {"role":"user","content":text(3),"timestamp":5}
            ]))
        };
        let tokens = |path: &[Entry]| pi_context_tokens(&path.iter().collect::<Vec<_>>());
        // An imported answer (no usage), an aborted one and an errored one (usage of the
        // failed request) all fall back to the usage before them plus what follows it.
        for last in [
            json!({"role":"assistant","content":[{"type":"text","text":text(5)}],"stopReason":"stop","timestamp":4}),
            json!({"role":"assistant","content":[{"type":"text","text":text(5)}],"stopReason":"stop","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0},"timestamp":4}),
            json!({"role":"assistant","content":[{"type":"text","text":text(5)}],"stopReason":"aborted","usage":{"input":9,"output":9,"cacheRead":0,"cacheWrite":0,"totalTokens":18},"timestamp":4}),
            json!({"role":"assistant","content":[{"type":"text","text":text(5)}],"stopReason":"error","usage":{"input":99_999,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":99_999},"timestamp":4}),
        ] {
            assert_eq!(tokens(&base(last.clone())), 50_000 + 20 + 5 + 3, "{last}");
        }
        // No usage at all: the whole context estimated (not the 3 tokens after the last answer).
        let path = entries(json!([
            {"role":"user","content":text(10),"timestamp":1},
            {"role":"assistant","content":[{"type":"text","text":text(100)}],"stopReason":"stop","timestamp":2},
            {"role":"user","content":text(3),"timestamp":3}
        ]));
        assert_eq!(tokens(&path), 113);
        // Usage from before the latest compaction counted a context that is gone: the summary
        // and the kept messages are estimated instead.
        let mut path = base(
            json!({"role":"assistant","content":[{"type":"text","text":text(5)}],"stopReason":"stop","timestamp":4}),
        );
        let c = json!({"type":"compaction","id":"k","parentId":"e4","timestamp":"2026-01-01T00:00:00.000Z","summary":text(7),"firstKeptEntryId":"e1","tokensBefore":1});
        path.push(Entry::from_value(&c).unwrap());
        let u = json!({"type":"message","id":"u9","parentId":"k","timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":text(2),"timestamp":6}});
        path.push(Entry::from_value(&u).unwrap());
        // Summary 7 (its text as Pi counts it), e1 100 (its usage no longer counts), e2 20,
        // e3 5, e4 3, u9 2.
        assert_eq!(tokens(&path), 7 + 100 + 20 + 5 + 3 + 2);
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
        assert!(!should_compact(183_616, 200_000, 16_384));
        assert!(should_compact(183_617, 200_000, 16_384));
        // The reserve as it is (Pi 1.6's `shouldCompact`): a 16,000-token model with the
        // default reserve is over its threshold (0) with any context.
        assert_eq!(threshold(200_000, 16_384), 183_616);
        assert_eq!(threshold(16_000, 16_384), 0);
        assert_eq!(threshold(32_768, 16_384), 16_384);
        assert_eq!(threshold(0, 16_384), 0);
        assert!(should_compact(1, 16_000, 16_384));
        assert!(!should_compact(16_384, 32_768, 16_384));
        assert!(should_compact(16_385, 32_768, 16_384));
        assert!(should_compact(120_000, 128_000, DEFAULT_RESERVE_TOKENS));
        assert_eq!(context_tokens(&m[..1]), 10);
    }
}

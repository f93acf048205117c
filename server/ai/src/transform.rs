//! Provider-neutral preparation of a stored conversation for one target model (Conformance exercise 5 (docs/design.md#conformance-exercises),
//! "Provider-neutral replay"), applied by every adapter before wire conversion.
//!
//! The stored messages are never changed: this builds the request's own copy. Rules follow Pi
//! 0.73.1 `pi-ai/dist/providers/transform-messages.js` and the cases PAIR-01/02/04/07/08:
//! - assistant turns that ended in `error` are dropped (they are incomplete; replaying them
//!   makes providers reject the request), and with them any results of their calls; so are
//!   `aborted` turns without tool calls;
//! - an `aborted` turn with tool calls keeps its calls (and text; its thinking is dropped, it may
//!   be unsigned) and each call without a result gets [`ABORTED_RESULT_TEXT`] as an error
//!   result, so the model sees what it had started and that the user stopped it (PAIR-01: the
//!   next user message then begins with those results);
//! - the first user message after a dropped `aborted` turn starts with [`INTERRUPTED_NOTE`],
//!   so the model answers the new message instead of resuming the cancelled task (PAIR-05);
//! - every remaining tool call gets exactly one result right after its assistant message, in
//!   call order; a call without one gets a synthetic error result, Pi's text
//!   [`MISSING_RESULT_TEXT`] (PAIR-01, PAIR-04: before the next user message); results whose
//!   call is not in the preceding assistant message are dropped (PAIR-02);
//! - thinking is kept (with its signature) only for the model that wrote it; for another model
//!   it is dropped, as Pi 1.6 does (`transform-messages.js`: signatures and encrypted reasoning
//!   are only valid for the model that wrote them, and readable thinking sent as plain text
//!   reads to the new model as part of the visible reply; Pi 0.73.1 sent it as text);
//! - every tool call carries an id no other call of the request has: a repeated id (the same
//!   message stored twice, two calls sharing one id) is renamed on the call and its result
//!   ([`unique_call_ids`]), and two results of one id pair with their calls in turn;
//! - tool-call ids are rewritten to what the target accepts ([`IdFormat`]), with a stable
//!   hash when an id must be shortened, collision-checked within the request, and the matching
//!   results remapped the same way (PAIR-07, PAIR-08).

use std::collections::{HashMap, HashSet, VecDeque};

use crate::models::{Api, Model};
use crate::types::{
    AssistantMessage, ContentBlock, Message, StopReason, ToolResultMessage, UserContent,
};

/// Text of a synthetic result for a call that has no recorded outcome (Pi's wording).
pub const MISSING_RESULT_TEXT: &str = "No result provided";

/// Text of a synthetic result for a call of an aborted turn that has no recorded outcome
/// (case PAIR-01).
pub const ABORTED_RESULT_TEXT: &str = "aborted by user";

/// Text put before the first user message after a cancelled turn (case PAIR-05); request only.
pub const INTERRUPTED_NOTE: &str =
    "[The previous task was interrupted by the user before it finished. Respond to the message below.]";

/// The tool-call id shape a provider accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdFormat {
    /// Anthropic `tool_use.id`: `^[a-zA-Z0-9_-]+$`, at most 64 characters.
    Anthropic,
    /// OpenAI Chat Completions `tool_calls[].id`: at most 40 characters (Pi: the part before a
    /// `|` of a Responses id); characters outside `[A-Za-z0-9_-]` are replaced too.
    OpenAiChat,
    /// OpenAI Responses `call_id`: at most 64 characters of `[A-Za-z0-9_-]`.
    OpenAiResponses,
    /// Mistral: exactly 9 characters of `[A-Za-z0-9]` (Pi's Mistral normaliser).
    Mistral,
}

impl IdFormat {
    /// The id format `model` needs: by `api`; for `openai-completions`, `compat.toolCallIdFormat`
    /// = `"mistral"` (this crate's flag; Pi has a separate Mistral api), a `mistral` provider or
    /// a `mistral.ai` base URL select [`IdFormat::Mistral`].
    pub fn for_model(model: &Model) -> IdFormat {
        match model.api {
            Api::AnthropicMessages => IdFormat::Anthropic,
            Api::OpenaiResponses => IdFormat::OpenAiResponses,
            _ => {
                let flag = model
                    .compat
                    .get("toolCallIdFormat")
                    .and_then(serde_json::Value::as_str);
                if flag == Some("mistral")
                    || (flag.is_none()
                        && (model.provider == "mistral" || model.base_url.contains("mistral.ai")))
                {
                    IdFormat::Mistral
                } else {
                    IdFormat::OpenAiChat
                }
            }
        }
    }

    fn max_len(self) -> usize {
        match self {
            IdFormat::Anthropic | IdFormat::OpenAiResponses => 64,
            IdFormat::OpenAiChat => 40,
            IdFormat::Mistral => 9,
        }
    }

    fn allowed(self, c: char) -> bool {
        c.is_ascii_alphanumeric() || (self != IdFormat::Mistral && (c == '_' || c == '-'))
    }

    /// True when `id` already has this shape (it is then sent unchanged). For Responses a
    /// stored `{call_id}|{item_id}` pair (Pi's convention) is checked part by part.
    pub fn accepts(self, id: &str) -> bool {
        if self == IdFormat::OpenAiResponses {
            if let Some((call, item)) = id.split_once('|') {
                return IdFormat::Anthropic.accepts(call)
                    && IdFormat::Anthropic.accepts(item)
                    && item.starts_with("fc");
            }
        }
        let len_ok = match self {
            IdFormat::Mistral => id.len() == 9,
            _ => !id.is_empty() && id.len() <= self.max_len(),
        };
        len_ok && id.chars().all(|c| self.allowed(c))
    }

    /// The id for `attempt` (0 first; higher after a collision). Ids already of this shape
    /// are kept; otherwise bad characters become `_` (dropped for Mistral) and an id that is
    /// then too long, empty, or collided is cut and given a stable hash suffix.
    fn derive(self, id: &str, attempt: u32) -> String {
        if attempt == 0 && self.accepts(id) {
            return id.to_string();
        }
        if let (IdFormat::OpenAiResponses, Some((call, item))) = (self, id.split_once('|')) {
            // Keep the pair: the call id shaped like any id, the item id `fc_<hash>` (Pi).
            let call = IdFormat::Anthropic.derive(call, attempt);
            let item = if item.starts_with("fc") && IdFormat::Anthropic.accepts(item) {
                item.to_string()
            } else {
                format!("fc_{}", short_hash(item))
            };
            return format!("{call}|{item}");
        }
        let base = match (self, id.split_once('|')) {
            // Pi: a Responses id `{call_id}|{item_id}` replays as its call id.
            (IdFormat::OpenAiChat, Some((call, _))) => call,
            _ => id,
        };
        let cleaned: String = match self {
            IdFormat::Mistral => base.chars().filter(|c| c.is_ascii_alphanumeric()).collect(),
            _ => base
                .chars()
                .map(|c| if self.allowed(c) { c } else { '_' })
                .collect(),
        };
        if attempt == 0 && self.accepts(&cleaned) {
            return cleaned;
        }
        let seed_base = if cleaned.is_empty() { id } else { &cleaned };
        let seed = if attempt == 0 {
            seed_base.to_string()
        } else {
            format!("{seed_base}:{attempt}")
        };
        let hash: String = short_hash(&seed)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        match self {
            IdFormat::Mistral => {
                let mut h = hash;
                while h.len() < 9 {
                    h.push('0');
                }
                h.truncate(9);
                h
            }
            _ => {
                let keep = self.max_len().saturating_sub(hash.len() + 1);
                let prefix: String = cleaned.chars().take(keep).collect();
                let mut out = if prefix.is_empty() {
                    hash
                } else {
                    format!("{prefix}_{hash}")
                };
                out.truncate(self.max_len());
                out
            }
        }
    }
}

/// Pi's `shortHash` (`pi-ai/dist/utils/hash.js`): two 32-bit multiplicative hashes over the
/// UTF-16 code units, written in base 36. Same input, same output, across runs and with Pi.
pub fn short_hash(s: &str) -> String {
    let mut h1: u32 = 0xdead_beef;
    let mut h2: u32 = 0x41c6_ce57;
    for ch in s.encode_utf16() {
        let ch = u32::from(ch);
        h1 = (h1 ^ ch).wrapping_mul(2_654_435_761);
        h2 = (h2 ^ ch).wrapping_mul(1_597_334_677);
    }
    h1 = (h1 ^ (h1 >> 16)).wrapping_mul(2_246_822_507)
        ^ (h2 ^ (h2 >> 13)).wrapping_mul(3_266_489_909);
    h2 = (h2 ^ (h2 >> 16)).wrapping_mul(2_246_822_507)
        ^ (h1 ^ (h1 >> 13)).wrapping_mul(3_266_489_909);
    format!("{}{}", base36(h2), base36(h1))
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

/// Maps stored tool-call ids to wire ids for one request: stable, and never two stored ids to
/// the same wire id.
#[derive(Debug)]
pub struct IdMap {
    format: IdFormat,
    forward: HashMap<String, String>,
    owner: HashMap<String, String>,
}

impl IdMap {
    /// An empty map for `format`.
    pub fn new(format: IdFormat) -> Self {
        IdMap {
            format,
            forward: HashMap::new(),
            owner: HashMap::new(),
        }
    }

    /// The wire id of stored id `id`.
    pub fn map(&mut self, id: &str) -> String {
        if let Some(w) = self.forward.get(id) {
            return w.clone();
        }
        let mut attempt = 0;
        loop {
            let candidate = self.format.derive(id, attempt);
            match self.owner.get(&candidate) {
                Some(o) if o != id => attempt += 1,
                _ => {
                    self.owner.insert(candidate.clone(), id.to_string());
                    self.forward.insert(id.to_string(), candidate.clone());
                    return candidate;
                }
            }
        }
    }
}

fn same_model(a: &AssistantMessage, model: &Model) -> bool {
    a.provider == model.provider && a.api == model.api && a.model == model.id
}

/// Rewrites one assistant message for `model` (thinking per model, ids per format). Takes the
/// message by value: the request's copy of the history is rewritten in place, not copied again.
fn convert_assistant(mut a: AssistantMessage, model: &Model, ids: &mut IdMap) -> AssistantMessage {
    let same = same_model(&a, model);
    a.content = std::mem::take(&mut a.content)
        .into_iter()
        .filter_map(|b| match b {
            ContentBlock::Thinking(_) if !same => None,
            // Pi 1.6 keeps a redacted or signed block (a non-empty signature: an aborted
            // Anthropic answer's `""` signs nothing) even when its text is empty.
            ContentBlock::Thinking(t)
                if t.redacted
                    || t.thinking_signature
                        .as_deref()
                        .is_some_and(|s| !s.is_empty()) =>
            {
                Some(ContentBlock::Thinking(t))
            }
            ContentBlock::Thinking(t) if t.thinking.trim().is_empty() => None,
            ContentBlock::Thinking(t) => Some(ContentBlock::Thinking(t)),
            ContentBlock::Text(t) if !same && t.text_signature.is_some() => {
                Some(ContentBlock::text(t.text))
            }
            ContentBlock::ToolCall(mut c) => {
                c.id = ids.map(&c.id);
                Some(ContentBlock::ToolCall(c))
            }
            other => Some(other),
        })
        .collect();
    a
}

/// Placeholder for an image in a user message sent to a model without image input (Pi).
pub const USER_IMAGE_PLACEHOLDER: &str = "(image omitted: model does not support images)";
/// Placeholder for an image in a tool result sent to a model without image input (Pi).
pub const TOOL_IMAGE_PLACEHOLDER: &str = "(tool image omitted: model does not support images)";

/// Replaces image blocks with `placeholder` text, one placeholder per run of images (Pi's
/// `replaceImagesWithPlaceholder`). Blocks without an image are given back as they are.
fn without_images(blocks: Vec<ContentBlock>, placeholder: &str) -> Vec<ContentBlock> {
    if !blocks.iter().any(|b| matches!(b, ContentBlock::Image(_))) {
        return blocks;
    }
    let mut out = Vec::with_capacity(blocks.len());
    let mut previous_was_placeholder = false;
    for b in blocks {
        if let ContentBlock::Image(_) = b {
            if !previous_was_placeholder {
                out.push(ContentBlock::text(placeholder));
            }
            previous_was_placeholder = true;
            continue;
        }
        previous_was_placeholder = matches!(&b, ContentBlock::Text(t) if t.text == placeholder);
        out.push(b);
    }
    out
}

/// The request's view of `messages` for `model` (see the module docs). Images go only to
/// models whose `input` includes `image`; for others they become placeholder text. Pure;
/// `messages` is not changed.
pub fn transform_messages(messages: &[Message], model: &Model) -> Vec<Message> {
    Transform::new(model).extend(model, messages)
}

/// [`transform_messages`] as a scan that can go on: [`Transform::extend`] with a history's
/// messages gives their request view; later messages appended to that history, given to
/// `extend` again, give what the whole history's view adds to it, when
/// [`Transform::can_extend`] says the messages already given keep their view whatever
/// follows. The state carried: the pairing scan's "interrupted" flag, the tool-call ids seen
/// (for [`unique_call_ids`]) and the wire ids given ([`IdMap`]). A tool round then transforms
/// its new messages, not the whole history. Every call must pass the same model as
/// [`Transform::new`].
#[derive(Debug)]
pub struct Transform {
    ids: IdMap,
    images: bool,
    interrupted: bool,
    unique: UniqueIds,
    /// What the last message given was (`None`: none yet).
    last: Option<LastKind>,
}

/// The kind of the last message a [`Transform`] was given: whether messages appended after
/// it can change the request view of those before (see [`Transform::can_extend`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum LastKind {
    /// A user or system message: the pairing scan never looks past it.
    Closed,
    /// A tool result, or an assistant message without tool calls: closed unless more tool
    /// results follow (they would join its run).
    OpenToResults,
    /// An assistant message with tool calls: its results (or their synthetic stand-ins)
    /// depend on what follows.
    Open,
}

impl Transform {
    /// A scan of an empty history for `model`.
    pub fn new(model: &Model) -> Transform {
        Transform {
            ids: IdMap::new(IdFormat::for_model(model)),
            images: model.input.iter().any(|k| k == "image"),
            interrupted: false,
            unique: UniqueIds::default(),
            last: None,
        }
    }

    /// Whether `next`, appended to the messages given so far, leaves their request view as
    /// [`Transform::extend`] gave it: true unless the last message given was an assistant
    /// message with tool calls, or `next` starts with tool results after a tool result or an
    /// assistant message, or a tool-call id was renamed so far (a rename checks the ids of
    /// the whole request, later ones included).
    pub fn can_extend(&self, next: &[Message]) -> bool {
        if self.unique.renamed {
            return false;
        }
        match self.last {
            None | Some(LastKind::Closed) => true,
            Some(LastKind::OpenToResults) => !matches!(next.first(), Some(Message::ToolResult(_))),
            Some(LastKind::Open) => false,
        }
    }

    /// The request view of `messages`, which follow the messages given before (see the type's
    /// docs).
    pub fn extend(&mut self, model: &Model, messages: &[Message]) -> Vec<Message> {
        let (mut paired, interrupted) = pair_from(messages, self.interrupted);
        self.interrupted = interrupted;
        self.unique.run(&mut paired);
        if let Some(m) = messages.last() {
            self.last = Some(match m {
                Message::User(_) | Message::System(_) => LastKind::Closed,
                Message::Assistant(a) if !a.tool_calls().is_empty() => LastKind::Open,
                Message::Assistant(_) | Message::ToolResult(_) => LastKind::OpenToResults,
            });
        }
        let images = self.images;
        let ids = &mut self.ids;
        paired
            .into_iter()
            .map(|m| match m {
                Message::Assistant(a) => Message::Assistant(convert_assistant(a, model, ids)),
                Message::ToolResult(mut r) => {
                    r.tool_call_id = ids.map(&r.tool_call_id);
                    if !images {
                        r.content =
                            without_images(std::mem::take(&mut r.content), TOOL_IMAGE_PLACEHOLDER);
                    }
                    Message::ToolResult(r)
                }
                Message::User(mut u) => {
                    if let (false, UserContent::Blocks(b)) = (images, &mut u.content) {
                        *b = without_images(std::mem::take(b), USER_IMAGE_PLACEHOLDER);
                    }
                    Message::User(u)
                }
                Message::System(s) => Message::System(s),
            })
            .collect()
    }
}

/// Gives every tool call of `paired` (the output of [`pair_tool_results`]: each assistant
/// message's results right after it, in call order) an id no other call of the request has:
/// a repeated id (the same assistant message stored under two entries, two calls sharing one
/// id) becomes `{id}_{n}`, and the result paired with that call gets the same id. Providers
/// reject a request that carries one tool-call id twice (case 18.9).
pub fn unique_call_ids(mut paired: Vec<Message>) -> Vec<Message> {
    UniqueIds::default().run(&mut paired);
    paired
}

/// The state of [`unique_call_ids`]' scan: the ids of the request's calls (`taken`, and
/// their call parts), those already sent (`seen`, and their call parts: two Responses ids
/// differing only in their item part still share one `call_id` on the wire), and whether a
/// call was renamed.
#[derive(Debug, Default)]
struct UniqueIds {
    taken: HashSet<String>,
    taken_calls: HashSet<String>,
    seen: HashSet<String>,
    seen_calls: HashSet<String>,
    renamed: bool,
}

impl UniqueIds {
    /// Adds the calls of `paired` to the request's ids, then renames the repeated ones of
    /// `paired` (and their results).
    fn run(&mut self, paired: &mut [Message]) {
        for m in paired.iter() {
            if let Message::Assistant(a) = m {
                for b in &a.content {
                    if let ContentBlock::ToolCall(c) = b {
                        if !self.taken.contains(&c.id) {
                            self.taken_calls.insert(call_part(&c.id).to_string());
                            self.taken.insert(c.id.clone());
                        }
                    }
                }
            }
        }
        let mut i = 0;
        while i < paired.len() {
            let Message::Assistant(a) = &mut paired[i] else {
                i += 1;
                continue;
            };
            let mut renamed: Vec<Option<String>> = Vec::new();
            for b in a.content.iter_mut() {
                let ContentBlock::ToolCall(c) = b else {
                    continue;
                };
                let call = call_part(&c.id);
                if !self.seen_calls.contains(call) && !self.seen.contains(&c.id) {
                    self.seen_calls.insert(call.to_string());
                    self.seen.insert(c.id.clone());
                    renamed.push(None);
                    continue;
                }
                let mut n = 2;
                let fresh = loop {
                    // A Responses id `{call_id}|{item_id}` (Pi's convention) is renamed in both
                    // parts: the request sends the call id and the item id apart, and each must
                    // be unique there.
                    let candidate = match c.id.split_once('|') {
                        Some((call, item)) => format!("{call}_{n}|{item}_{n}"),
                        None => format!("{}_{n}", c.id),
                    };
                    let clash = self.taken.contains(&candidate)
                        || self.taken_calls.contains(call_part(&candidate))
                        || self.seen.contains(&candidate)
                        || self.seen_calls.contains(call_part(&candidate));
                    if !clash {
                        break candidate;
                    }
                    n += 1;
                };
                self.renamed = true;
                self.seen_calls.insert(call_part(&fresh).to_string());
                self.seen.insert(fresh.clone());
                c.id = fresh.clone();
                renamed.push(Some(fresh));
            }
            for (k, new_id) in renamed.into_iter().enumerate() {
                match (new_id, paired.get_mut(i + 1 + k)) {
                    (Some(id), Some(Message::ToolResult(r))) => r.tool_call_id = id,
                    (_, Some(Message::ToolResult(_))) => {}
                    _ => break,
                }
            }
            i += 1;
        }
    }
}

/// The call-id part of a stored id: before the `|` of a Responses `{call_id}|{item_id}`.
fn call_part(id: &str) -> &str {
    id.split('|').next().unwrap_or_default()
}

/// Pairing repair alone (no per-model rewriting): failed turns dropped, every call answered
/// right after its message in call order, orphan results dropped (see module docs).
pub fn pair_tool_results(messages: &[Message]) -> Vec<Message> {
    pair_from(messages, false).0
}

/// [`pair_tool_results`]' scan entered with `interrupted` (a dropped aborted turn before
/// `messages`, not yet followed by a user message); also returns that flag at the end.
fn pair_from(messages: &[Message], mut interrupted: bool) -> (Vec<Message>, bool) {
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant(a) => {
                // The same assistant message stored twice in a row (two entries, nothing
                // between them): only the second copy is sent, with the results that follow
                // it; answering the first copy's calls "No result provided" would show the
                // model calls it never made twice (case 18.9).
                if let Some(Message::Assistant(next)) = messages.get(i + 1) {
                    if !a.tool_calls().is_empty() && next.content == a.content {
                        i += 1;
                        continue;
                    }
                }
                let aborted = a.stop_reason == StopReason::Aborted;
                let keep_aborted = aborted && !a.tool_calls().is_empty();
                if a.stop_reason == StopReason::Error || (aborted && !keep_aborted) {
                    interrupted |= aborted;
                    i += 1;
                    continue;
                }
                interrupted = false;
                if keep_aborted {
                    let mut kept = a.clone();
                    kept.content
                        .retain(|b| !matches!(b, ContentBlock::Thinking(_)));
                    kept.stop_reason = StopReason::ToolUse;
                    out.push(Message::Assistant(kept));
                } else {
                    out.push(messages[i].clone());
                }
                let missing = if keep_aborted {
                    ABORTED_RESULT_TEXT
                } else {
                    MISSING_RESULT_TEXT
                };
                let calls = a.tool_calls();
                let mut j = i + 1;
                // Results by id, in order: two calls sharing an id take their results in turn.
                let mut results: HashMap<&str, VecDeque<&ToolResultMessage>> = HashMap::new();
                while let Some(Message::ToolResult(r)) = messages.get(j) {
                    results
                        .entry(r.tool_call_id.as_str())
                        .or_default()
                        .push_back(r);
                    j += 1;
                }
                for c in calls {
                    match results.get_mut(c.id.as_str()).and_then(VecDeque::pop_front) {
                        Some(r) => out.push(Message::ToolResult(r.clone())),
                        None => out.push(Message::ToolResult(ToolResultMessage {
                            tool_call_id: c.id.clone(),
                            tool_name: c.name.clone(),
                            content: vec![ContentBlock::text(missing)],
                            details: None,
                            is_error: true,
                            timestamp: a.timestamp,
                        })),
                    }
                }
                i = j;
            }
            // A result not directly after its call's assistant message is an orphan.
            Message::ToolResult(_) => i += 1,
            // A later system message stays at its place.
            Message::System(_) => {
                out.push(messages[i].clone());
                i += 1;
            }
            Message::User(u) => {
                let mut u = u.clone();
                if std::mem::take(&mut interrupted) {
                    let mut blocks = vec![ContentBlock::text(INTERRUPTED_NOTE)];
                    match u.content {
                        UserContent::Text(t) => blocks.push(ContentBlock::text(t)),
                        UserContent::Blocks(b) => blocks.extend(b),
                    }
                    u.content = UserContent::Blocks(blocks);
                }
                out.push(Message::User(u));
                i += 1;
            }
        }
    }
    (out, interrupted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(v: serde_json::Value) -> Vec<Message> {
        serde_json::from_value(v).unwrap()
    }

    fn roles(m: &[Message]) -> Vec<&'static str> {
        m.iter()
            .map(|m| match m {
                Message::User(_) => "user",
                Message::Assistant(_) => "assistant",
                Message::ToolResult(_) => "toolResult",
                Message::System(_) => "system",
            })
            .collect()
    }

    #[test]
    fn pair04_interrupted_call_answered_before_next_user() {
        let m = msgs(json!([
            {"role":"user","content":"list PRs"},
            {"role":"assistant","content":[{"type":"toolCall","id":"call_F8","name":"bash","arguments":{"command":"gh pr list"}}],"stopReason":"toolUse"},
            {"role":"user","content":"retry"}
        ]));
        let out = pair_tool_results(&m);
        assert_eq!(roles(&out), ["user", "assistant", "toolResult", "user"]);
        assert_eq!(
            serde_json::to_value(&out[2]).unwrap(),
            json!({"role":"toolResult","toolCallId":"call_F8","toolName":"bash",
            "content":[{"type":"text","text":"No result provided"}],"isError":true,"timestamp":0})
        );
    }

    #[test]
    fn pair01_aborted_turn_keeps_its_call_answered_aborted_by_user() {
        // The case's file: no result was stored for the aborted call.
        let m = msgs(json!([
            {"role":"user","content":"run the tests"},
            {"role":"assistant","content":[
                {"type":"thinking","thinking":"run them"},
                {"type":"toolCall","id":"toolu_01A","name":"bash","arguments":{"command":"sleep 60"}}],"stopReason":"aborted"},
            {"role":"user","content":"never mind, list files"}
        ]));
        let out = pair_tool_results(&m);
        assert_eq!(
            serde_json::to_value(&out).unwrap(),
            json!([
                {"role":"user","content":"run the tests","timestamp":0},
                {"role":"assistant","content":[
                    {"type":"toolCall","id":"toolu_01A","name":"bash","arguments":{"command":"sleep 60"}}],
                 "api":"","provider":"","model":"","usage":out_usage(&out[1]),"stopReason":"toolUse","timestamp":0},
                {"role":"toolResult","toolCallId":"toolu_01A","toolName":"bash",
                 "content":[{"type":"text","text":"aborted by user"}],"isError":true,"timestamp":0},
                {"role":"user","content":"never mind, list files","timestamp":0}
            ])
        );
        // A result stored for it (our loop writes one at abort time) is kept as it is.
        let m = msgs(json!([
            {"role":"user","content":"run the tests"},
            {"role":"assistant","content":[{"type":"toolCall","id":"toolu_01A","name":"bash","arguments":{"command":"sleep 60"}}],"stopReason":"aborted"},
            {"role":"toolResult","toolCallId":"toolu_01A","toolName":"bash","content":"Tool execution was aborted by the user.","isError":true},
            {"role":"user","content":"never mind, list files"}
        ]));
        let out = pair_tool_results(&m);
        assert_eq!(roles(&out), ["user", "assistant", "toolResult", "user"]);
        assert_eq!(out[2], m[2]);
        assert_eq!(out[3], m[3]);
        // An aborted turn without calls is still dropped, and the note goes first.
        let m = msgs(json!([
            {"role":"user","content":"explain"},
            {"role":"assistant","content":[{"type":"text","text":"The reas"}],"stopReason":"aborted"},
            {"role":"user","content":"never mind"}
        ]));
        let out = pair_tool_results(&m);
        assert_eq!(roles(&out), ["user", "user"]);
        assert_eq!(
            out[1],
            msgs(json!([{"role":"user","content":[
                {"type":"text","text":INTERRUPTED_NOTE},
                {"type":"text","text":"never mind"}]}]))[0]
        );
    }

    /// Every history here, cut at every point: when `can_extend` says the first part keeps
    /// its view, the view of the first part followed by what `extend` gives for the rest is
    /// the whole history's view; and the tool-round shape (results, then an assistant
    /// message) is one that can be extended.
    #[test]
    fn extending_a_transform_gives_the_whole_historys_view() {
        let call = |id: &str, stop: &str| {
            json!({"role":"assistant","content":[{"type":"thinking","thinking":"hm","thinkingSignature":"reasoning_content"},
                {"type":"toolCall","id":id,"name":"read","arguments":{"path":"a"}}],
                "api":"openai-completions","provider":"mock","model":"mock-1","stopReason":stop})
        };
        let result = |id: &str| {
            json!({"role":"toolResult","toolCallId":id,"toolName":"read",
                "content":[{"type":"text","text":"x"},{"type":"image","data":"AA==","mimeType":"image/png"}],"isError":false})
        };
        let user = |t: &str| json!({"role":"user","content":t});
        let text = |stop: &str| json!({"role":"assistant","content":[{"type":"text","text":"ok"}],"stopReason":stop});
        // Read as a system message below (it has no JSON form).
        let system = user("@system");
        let long_id = "call_with_a_very_long_id_that_openai_chat_would_cut_0123456789";
        let histories = vec![
            // Tool rounds.
            json!([
                user("go"),
                call("c1", "toolUse"),
                result("c1"),
                call("c2", "toolUse"),
                result("c2"),
                call("c3", "toolUse"),
                result("c3"),
                text("stop")
            ]),
            // Two calls in one message, results in the other order, one missing.
            json!([user("go"), {"role":"assistant","content":[
                {"type":"toolCall","id":"a","name":"read","arguments":{}},
                {"type":"toolCall","id":"b","name":"read","arguments":{}}],"stopReason":"toolUse"},
                result("b"), result("a"), user("next"), call("c", "toolUse"), user("again")]),
            // Aborted and failed turns, an orphan result, a system message.
            json!([
                user("go"),
                text("aborted"),
                result("zz"),
                user("then"),
                call("d", "aborted"),
                user("more"),
                text("error"),
                system,
                user("last"),
                call("e", "toolUse"),
                result("e")
            ]),
            // Repeated ids (renamed), the same message stored twice, long ids.
            json!([
                user("go"),
                call("dup", "toolUse"),
                result("dup"),
                call("dup", "toolUse"),
                result("dup"),
                call("dup_2", "toolUse"),
                result("dup_2"),
                call(long_id, "toolUse"),
                call(long_id, "toolUse"),
                result(long_id),
                user("end")
            ]),
            json!([
                user("go"),
                call(long_id, "toolUse"),
                result(long_id),
                call("x|fc_1", "toolUse"),
                result("x|fc_1"),
                text("stop"),
                user("bye")
            ]),
        ];
        let mut models = Vec::new();
        for (provider, input) in [("mock", vec!["text"]), ("mistral", vec!["text", "image"])] {
            let mut m = Model::new(Api::OpenaiCompletions, provider, "mock-1", "http://x/v1");
            m.input = input.into_iter().map(String::from).collect();
            models.push(m);
        }
        let mut extended = 0;
        for h in histories {
            let h: Vec<Message> = msgs(h)
                .into_iter()
                .map(|m| match m {
                    Message::User(u) if u.content == UserContent::Text("@system".into()) => {
                        Message::System(crate::types::SystemMessage {
                            content: "patch".into(),
                            sections: vec![("tools".into(), None)],
                        })
                    }
                    m => m,
                })
                .collect();
            for model in &models {
                let whole = transform_messages(&h, model);
                for cut in 0..=h.len() {
                    let mut t = Transform::new(model);
                    let mut view = t.extend(model, &h[..cut]);
                    if !t.can_extend(&h[cut..]) {
                        continue;
                    }
                    view.extend(t.extend(model, &h[cut..]));
                    assert_eq!(view, whole, "cut at {cut} of {h:?}");
                    extended += 1;
                }
            }
        }
        assert!(extended > 40, "only {extended} cuts could be extended");
        // The tool round: the history so far ends with a result, the next message is the
        // model's answer.
        let h = msgs(json!([user("go"), call("c1", "toolUse"), result("c1")]));
        let mut t = Transform::new(&models[0]);
        t.extend(&models[0], &h);
        assert!(t.can_extend(&msgs(json!([call("c2", "toolUse"), result("c2")]))));
        assert!(!t.can_extend(&msgs(json!([result("c1")]))));
    }

    fn out_usage(m: &Message) -> serde_json::Value {
        match m {
            Message::Assistant(a) => serde_json::to_value(&a.usage).unwrap(),
            _ => serde_json::Value::Null,
        }
    }

    #[test]
    fn pair05_results_first_and_a_note_after_a_cancelled_turn() {
        // The turn's calls were answered, then the next response was aborted; the user asks
        // something new. Results stay right after their call; the new message carries the note.
        let m = msgs(json!([
            {"role":"user","content":"fix the build"},
            {"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"bash","arguments":{"command":"make"}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"t1","toolName":"bash","content":[{"type":"text","text":"ok"}],"isError":false},
            {"role":"assistant","content":[{"type":"text","text":"The bui"}],"stopReason":"aborted"},
            {"role":"user","content":"what's 2+2"}
        ]));
        let out = pair_tool_results(&m);
        assert_eq!(roles(&out), ["user", "assistant", "toolResult", "user"]);
        assert_eq!(
            out[3],
            msgs(json!([{"role":"user","content":[
                {"type":"text","text":INTERRUPTED_NOTE},
                {"type":"text","text":"what's 2+2"}]}]))[0]
        );
        // Steering after results (no cancelled turn) gets no note.
        let steer = msgs(json!([
            {"role":"user","content":"fix the build"},
            {"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"bash","arguments":{"command":"make"}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"t1","toolName":"bash","content":[{"type":"text","text":"ok"}],"isError":false},
            {"role":"user","content":"use yarn"}
        ]));
        assert_eq!(pair_tool_results(&steer), steer);
    }

    #[test]
    fn pair02_orphan_result_dropped_and_real_call_repaired() {
        let m = msgs(json!([
            {"role":"user","content":"hi"},
            {"role":"assistant","content":[],"stopReason":"aborted"},
            {"role":"toolResult","toolCallId":"call_9","toolName":"ls","content":"a.txt"},
            {"role":"user","content":"try again"},
            {"role":"assistant","content":[{"type":"toolCall","id":"call_9","name":"ls","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"call_9","toolName":"ls","content":"a.txt"}
        ]));
        assert_eq!(
            roles(&pair_tool_results(&m)),
            ["user", "user", "assistant", "toolResult"]
        );
    }

    #[test]
    fn images_become_placeholders_for_text_only_models() {
        let stored = msgs(json!([
            {"role":"user","content":[{"type":"text","text":"see"},
                {"type":"image","data":"AA==","mimeType":"image/png"},
                {"type":"image","data":"AA==","mimeType":"image/png"}]},
            {"role":"assistant","content":[{"type":"toolCall","id":"c","name":"read","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"c","toolName":"read","content":[{"type":"image","data":"AA==","mimeType":"image/png"}],"isError":false}
        ]));
        let text_only = Model::new(crate::Api::OpenaiCompletions, "p", "m", "");
        let out = serde_json::to_value(transform_messages(&stored, &text_only)).unwrap();
        assert_eq!(
            out[0]["content"],
            json!([{"type":"text","text":"see"},{"type":"text","text":USER_IMAGE_PLACEHOLDER}])
        );
        assert_eq!(
            out[2]["content"],
            json!([{"type":"text","text":TOOL_IMAGE_PLACEHOLDER}])
        );
        let vision = Model {
            input: vec!["text".into(), "image".into()],
            ..text_only
        };
        let out = serde_json::to_value(transform_messages(&stored, &vision)).unwrap();
        assert_eq!(out[0]["content"][2]["type"], "image");
    }

    #[test]
    fn short_hash_matches_pi() {
        // Values computed with Pi 0.73.1's shortHash under Node.
        assert_eq!(short_hash(""), "k4n83c7h0j2b");
        assert_eq!(
            short_hash("call_PTLP8xhu3uwZk4l3nlnrrJha"),
            "105fxq51ng7aht"
        );
        assert_eq!(short_hash("🦊x"), "1hlesqk123uaq9");
    }

    #[test]
    fn pair07_mistral_ids_are_nine_alphanumerics_stable_and_distinct() {
        let mut a = IdMap::new(IdFormat::Mistral);
        let id = a.map("call_PTLP8xhu3uwZk4l3nlnrrJha");
        // The id Pi's Mistral adapter sends for the same stored id.
        assert_eq!(id, "qfc5g71qg");
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric()));
        // Stable across requests (a fresh map gives the same id).
        assert_eq!(
            IdMap::new(IdFormat::Mistral).map("call_PTLP8xhu3uwZk4l3nlnrrJha"),
            id
        );
        // Already valid ids are kept; equal-after-cleaning ids do not collide.
        assert_eq!(a.map("abcDEF123"), "abcDEF123");
        let x = a.map("abc-DEF-123");
        assert_ne!(x, "abcDEF123");
        assert_eq!(x.len(), 9);
        assert_eq!(a.map("abc-DEF-123"), x);
    }

    #[test]
    fn pair08_ids_per_target() {
        let long = format!(
            "call_abc123|fc_{}",
            "0123456789abcdef"
                .repeat(4)
                .chars()
                .take(60)
                .collect::<String>()
        );
        let mut anth = IdMap::new(IdFormat::Anthropic);
        assert_eq!(anth.map("functions.read:0"), "functions_read_0");
        let a = anth.map(&long);
        assert!(a.len() <= 64 && IdFormat::Anthropic.accepts(&a), "{a}");
        let mut chat = IdMap::new(IdFormat::OpenAiChat);
        assert_eq!(chat.map(&long), "call_abc123");
        assert_eq!(chat.map("functions.read:0"), "functions_read_0");
        let very_long = "x".repeat(100);
        let c = chat.map(&very_long);
        assert!(c.len() <= 40 && c.starts_with("xxxx"), "{c}");
        let mut resp = IdMap::new(IdFormat::OpenAiResponses);
        // Responses keeps Pi's `{call_id}|{item_id}` pair, each part valid on its own.
        let r = resp.map(&long);
        let (call, item) = r.split_once('|').unwrap();
        assert_eq!(call, "call_abc123");
        assert!(item.starts_with("fc_") && item.len() <= 64, "{r}");
        assert_eq!(resp.map("functions.read:0"), "functions_read_0");
        // Two ids that clean to the same text get different wire ids.
        let mut anth = IdMap::new(IdFormat::Anthropic);
        let p = anth.map("a.b");
        let q = anth.map("a:b");
        assert_ne!(p, q);
    }

    #[test]
    fn replay_across_models_drops_thinking_and_rewrites_ids_but_not_the_store() {
        let stored = msgs(json!([
            {"role":"user","content":"go"},
            {"role":"assistant","api":"openai-completions","provider":"local","model":"qwen","content":[
                {"type":"thinking","thinking":"plan","thinkingSignature":"reasoning_content"},
                {"type":"thinking","thinking":"","thinkingSignature":"sig"},
                {"type":"thinking","thinking":"[Reasoning redacted]","thinkingSignature":"opaque","redacted":true},
                {"type":"toolCall","id":"functions.read:0","name":"read","arguments":{"path":"a"}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"functions.read:0","toolName":"read","content":"A","isError":false}
        ]));
        let before = stored.clone();
        let claude = Model::new(
            crate::Api::AnthropicMessages,
            "anthropic",
            "claude-sonnet-4-5",
            "",
        );
        let out = serde_json::to_value(transform_messages(&stored, &claude)).unwrap();
        assert_eq!(stored, before);
        // Pi 1.6 drops another model's thinking, readable, signed or redacted.
        assert_eq!(
            out[1]["content"],
            json!([{"type":"toolCall","id":"functions_read_0","name":"read","arguments":{"path":"a"}}])
        );
        assert_eq!(out[2]["toolCallId"], "functions_read_0");
        // The same model keeps its own thinking as is.
        let qwen = Model::new(crate::Api::OpenaiCompletions, "local", "qwen", "");
        let same = serde_json::to_value(transform_messages(&stored, &qwen)).unwrap();
        assert_eq!(
            same[1]["content"][0],
            json!({"type":"thinking","thinking":"plan","thinkingSignature":"reasoning_content"})
        );
        assert_eq!(same[1]["content"][2]["redacted"], true);
    }

    fn call_ids(v: &serde_json::Value) -> Vec<(String, String)> {
        v.as_array()
            .unwrap()
            .iter()
            .flat_map(|m| match m["role"].as_str().unwrap() {
                "assistant" => m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|b| b["type"] == "toolCall")
                    .map(|b| ("call".to_string(), b["id"].as_str().unwrap().to_string()))
                    .collect(),
                "toolResult" => vec![(
                    "result".to_string(),
                    format!(
                        "{}={}",
                        m["toolCallId"].as_str().unwrap(),
                        m["content"][0]["text"].as_str().unwrap_or("")
                    ),
                )],
                _ => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn duplicate_call_ids_are_remapped_on_call_and_result() {
        let model = Model::new(crate::Api::AnthropicMessages, "anthropic", "c", "");
        // The same assistant message stored under two entries (its result after the second):
        // one copy goes, answered by its real result; a second copy of the result is dropped.
        let twice = msgs(json!([
            {"role":"user","content":"go"},
            {"role":"assistant","content":[{"type":"toolCall","id":"toolu_1","name":"ls","arguments":{}}],"stopReason":"toolUse"},
            {"role":"assistant","content":[{"type":"toolCall","id":"toolu_1","name":"ls","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"toolu_1","toolName":"ls","content":[{"type":"text","text":"a.txt"}],"isError":false},
            {"role":"toolResult","toolCallId":"toolu_1","toolName":"ls","content":[{"type":"text","text":"a.txt"}],"isError":false}
        ]));
        let out = serde_json::to_value(transform_messages(&twice, &model)).unwrap();
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            call_ids(&out),
            pairs(&[("call", "toolu_1"), ("result", "toolu_1=a.txt")])
        );
        // The same message stored twice with its result after each copy: both are real turns,
        // the second renamed on call and result.
        let both = msgs(json!([
            {"role":"user","content":"go"},
            {"role":"assistant","content":[{"type":"toolCall","id":"toolu_1","name":"ls","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"toolu_1","toolName":"ls","content":[{"type":"text","text":"a"}],"isError":false},
            {"role":"assistant","content":[{"type":"toolCall","id":"toolu_1","name":"ls","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"toolu_1","toolName":"ls","content":[{"type":"text","text":"b"}],"isError":false}
        ]));
        let out = serde_json::to_value(transform_messages(&both, &model)).unwrap();
        assert_eq!(
            call_ids(&out),
            pairs(&[
                ("call", "toolu_1"),
                ("result", "toolu_1=a"),
                ("call", "toolu_1_2"),
                ("result", "toolu_1_2=b"),
            ])
        );
        // Responses ids (`call_id|item_id`, Pi's convention) sharing one call id: renamed in
        // both parts, so the request's `call_id`s and item ids are each unique.
        let responses = Model::new(crate::Api::OpenaiResponses, "openai", "r", "");
        let shared_resp = msgs(json!([
            {"role":"user","content":"go"},
            {"role":"assistant","content":[
                {"type":"toolCall","id":"call_s|fc_s","name":"ls","arguments":{}},
                {"type":"toolCall","id":"call_s|fc_s","name":"ls","arguments":{"path":"."}},
                {"type":"toolCall","id":"call_s|fc_t","name":"ls","arguments":{"path":"x"}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"call_s|fc_s","toolName":"ls","content":[{"type":"text","text":"1"}],"isError":false},
            {"role":"toolResult","toolCallId":"call_s|fc_s","toolName":"ls","content":[{"type":"text","text":"2"}],"isError":false},
            {"role":"toolResult","toolCallId":"call_s|fc_t","toolName":"ls","content":[{"type":"text","text":"3"}],"isError":false}
        ]));
        let out = serde_json::to_value(transform_messages(&shared_resp, &responses)).unwrap();
        assert_eq!(
            call_ids(&out),
            pairs(&[
                ("call", "call_s|fc_s"),
                ("call", "call_s_2|fc_s_2"),
                ("call", "call_s_3|fc_t_3"),
                ("result", "call_s|fc_s=1"),
                ("result", "call_s_2|fc_s_2=2"),
                ("result", "call_s_3|fc_t_3=3"),
            ])
        );
        // Two calls sharing one id in one message: results taken in turn, the second renamed
        // (past an id that is already taken elsewhere).
        let shared = msgs(json!([
            {"role":"user","content":"go"},
            {"role":"assistant","content":[
                {"type":"toolCall","id":"c","name":"read","arguments":{"path":"a"}},
                {"type":"toolCall","id":"c","name":"read","arguments":{"path":"b"}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"c","toolName":"read","content":[{"type":"text","text":"A"}],"isError":false},
            {"role":"toolResult","toolCallId":"c","toolName":"read","content":[{"type":"text","text":"B"}],"isError":false},
            {"role":"assistant","content":[{"type":"toolCall","id":"c_2","name":"ls","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"c_2","toolName":"ls","content":[{"type":"text","text":"L"}],"isError":false}
        ]));
        let out = serde_json::to_value(transform_messages(&shared, &model)).unwrap();
        assert_eq!(
            call_ids(&out),
            pairs(&[
                ("call", "c"),
                ("call", "c_3"),
                ("result", "c=A"),
                ("result", "c_3=B"),
                ("call", "c_2"),
                ("result", "c_2=L"),
            ])
        );
        // The stored messages are unchanged.
        assert_eq!(
            serde_json::to_value(&shared).unwrap()[1]["content"][1]["id"],
            "c"
        );
    }
}

//! One entry line parsed straight into what the tree and the model context need: the entry's
//! `type`, `id`, `parentId`, and for `message` entries the role, the model-visible
//! [`Message`] and what the harness reads of an assistant message (provider, model, usage).
//!
//! The fast path deserializes the line text directly into `pi_ai` types, with no
//! `serde_json::Value` in between and without serde's buffering of internally tagged enums
//! (`role`, block `type`): the tag is read first and the rest of the object goes straight to
//! the variant's fields. Whatever the fast path does not take as written by Pi (a tag that is
//! not the first key or repeated, an extended role, a message that does not convert) is
//! answered from a `Value` exactly as [`super::convert_message`] does, so both paths give the
//! same result (tested against each other).

use std::fmt;

use compact_str::CompactString;
use pi_ai::{
    AssistantMessage, ContentBlock, ImageContent, Message, StopReason, TextContent,
    ThinkingContent, ToolCall, ToolResultMessage, Usage, UserContent, UserMessage,
};
use serde::de::value::{BorrowedStrDeserializer, MapAccessDeserializer, StringDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::convert::convert_message;

/// What the harness reads of an assistant message without parsing its line again: its
/// `provider`, `model` and `usage`. A loaded tree keeps one (boxed) per assistant entry, so it
/// is kept small (72 bytes instead of 136): the provider and model names are shared by the
/// messages that name the same ones (one allocation per run of messages of one model, not
/// per message), the usage's token counts are kept as 32 bits when they all fit (the whole
/// [`Usage`] in a box of its own when one does not). Reads give back exactly what was stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssistantInfo {
    names: Option<std::sync::Arc<ModelNames>>,
    usage: PackedUsage,
}

/// `message.provider` and `message.model` of an assistant message, shared ([`AssistantInfo`]).
#[derive(Debug, PartialEq)]
struct ModelNames {
    provider: Option<Box<str>>,
    model: Option<Box<str>>,
}

/// A [`Usage`] as [`AssistantInfo`] keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
enum PackedUsage {
    /// No usage (or one that does not read as Pi's).
    #[default]
    None,
    /// Input, output, cache read, cache write, total tokens; then the cost's input, output,
    /// cache read, cache write and total; then Pi 1.6's optional fields as [`Extras`] bits (a
    /// `reasoning` or `cacheWrite1h` other than 0 makes the usage [`PackedUsage::Full`]).
    Small {
        tokens: [u32; 5],
        cost: [f64; 5],
        extras: u8,
    },
    /// A usage with a token count past `u32::MAX`, or a `reasoning` / `cacheWrite1h` count
    /// other than 0.
    Full(Box<Usage>),
}

/// The bits of [`PackedUsage::Small`]'s `extras`: which of Pi 1.6's optional usage fields are
/// present (each at 0) and `cost.totalFromProvider`.
struct Extras;

impl Extras {
    const REASONING_0: u8 = 1;
    const CACHE_WRITE_1H_0: u8 = 2;
    const FROM_PROVIDER_FALSE: u8 = 4;
    const FROM_PROVIDER_TRUE: u8 = 8;

    /// The bits of `u`, or `None` when a field holds more than a bit can say.
    fn of(u: &Usage) -> Option<u8> {
        let zero_or_absent = |v: Option<u64>, bit: u8| match v {
            None => Some(0),
            Some(0) => Some(bit),
            Some(_) => None,
        };
        let provider = match u.cost.total_from_provider {
            None => 0,
            Some(false) => Self::FROM_PROVIDER_FALSE,
            Some(true) => Self::FROM_PROVIDER_TRUE,
        };
        Some(
            zero_or_absent(u.reasoning, Self::REASONING_0)?
                | zero_or_absent(u.cache_write_1h, Self::CACHE_WRITE_1H_0)?
                | provider,
        )
    }
}

impl AssistantInfo {
    /// The info of an assistant message with these fields. Names equal to the last ones made
    /// on this thread share their allocation.
    pub fn new(provider: Option<&str>, model: Option<&str>, usage: Option<Usage>) -> Self {
        AssistantInfo {
            names: shared_names(provider, model),
            usage: match usage {
                None => PackedUsage::None,
                Some(u) => {
                    let tokens = [
                        u.input,
                        u.output,
                        u.cache_read,
                        u.cache_write,
                        u.total_tokens,
                    ];
                    match (tokens.map(u32::try_from), Extras::of(&u)) {
                        ([Ok(a), Ok(b), Ok(c), Ok(d), Ok(e)], Some(extras)) => PackedUsage::Small {
                            tokens: [a, b, c, d, e],
                            cost: [
                                u.cost.input,
                                u.cost.output,
                                u.cost.cache_read,
                                u.cost.cache_write,
                                u.cost.total,
                            ],
                            extras,
                        },
                        _ => PackedUsage::Full(Box::new(u)),
                    }
                }
            },
        }
    }

    /// `message.provider` when it is a string.
    pub fn provider(&self) -> Option<&str> {
        self.names.as_ref()?.provider.as_deref()
    }

    /// `message.model` when it is a string.
    pub fn model(&self) -> Option<&str> {
        self.names.as_ref()?.model.as_deref()
    }

    /// `message.usage` when it reads as Pi's usage.
    pub fn usage(&self) -> Option<Usage> {
        match &self.usage {
            PackedUsage::None => None,
            PackedUsage::Small {
                tokens,
                cost,
                extras,
            } => Some(Usage {
                input: tokens[0].into(),
                output: tokens[1].into(),
                cache_read: tokens[2].into(),
                cache_write: tokens[3].into(),
                cache_write_1h: (extras & Extras::CACHE_WRITE_1H_0 != 0).then_some(0),
                reasoning: (extras & Extras::REASONING_0 != 0).then_some(0),
                total_tokens: tokens[4].into(),
                cost: pi_ai::types::Cost {
                    input: cost[0],
                    output: cost[1],
                    cache_read: cost[2],
                    cache_write: cost[3],
                    total: cost[4],
                    total_from_provider: if extras & Extras::FROM_PROVIDER_TRUE != 0 {
                        Some(true)
                    } else if extras & Extras::FROM_PROVIDER_FALSE != 0 {
                        Some(false)
                    } else {
                        None
                    },
                },
            }),
            PackedUsage::Full(u) => Some((**u).clone()),
        }
    }
}

/// The names of [`AssistantInfo::new`]: the last ones made on this thread when they are the
/// same (a loader's thread reads many messages of one model in a row), else new ones.
fn shared_names(provider: Option<&str>, model: Option<&str>) -> Option<std::sync::Arc<ModelNames>> {
    use std::cell::RefCell;
    use std::sync::Arc;
    thread_local! {
        static LAST: RefCell<Option<Arc<ModelNames>>> = const { RefCell::new(None) };
    }
    if provider.is_none() && model.is_none() {
        return None;
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some(n) = last
            .as_ref()
            .filter(|n| n.provider.as_deref() == provider && n.model.as_deref() == model)
        {
            return Some(n.clone());
        }
        let n = Arc::new(ModelNames {
            provider: provider.map(Into::into),
            model: model.map(Into::into),
        });
        *last = Some(n.clone());
        Some(n)
    })
}

/// The parts of one `message` entry's `message` object.
#[derive(Debug, Default)]
pub(crate) struct MessageParts {
    /// `role` when it is a string.
    pub role: Option<CompactString>,
    /// What the model sees ([`super::convert_message`]); `None` when not model-visible.
    /// Boxed: a line's parts are moved several times on their way into the tree, and a
    /// deferred load never has one.
    pub message: Option<Box<Message>>,
    /// For `role: "assistant"`.
    pub assistant: Option<AssistantInfo>,
    /// What a deferred load keeps instead of `message` ([`LineParts::summarize`]).
    pub summary: Option<MessageSummary>,
    /// For `role: "toolResult"`: the [`tool_hash`] of its `toolName` (0 otherwise), so
    /// readers of one tool's results skip the others without reading them.
    pub tool: u64,
}

/// What a deferred load (the model context built on first use) keeps of a `message` entry's
/// model-visible message instead of the message: whether there is one (to count the context
/// without building it), and the XXH3 of its tool-call ids (a result's `toolCallId`, an
/// assistant message's calls), enough to see that a result follows its call (PAIR-02) without
/// reading the line again.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct MessageSummary {
    /// The entry has a model-visible message.
    pub visible: bool,
    /// [`call_hash`] of each tool-call id it names.
    pub calls: CallHashes,
}

/// The [`call_hash`]es of a message's tool-call ids (a slice): one kept in place (a result,
/// an answer with one call: most messages of a long session), more in a box of their own.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallHashes {
    One(u64),
    Many(Box<[u64]>),
}

impl Default for CallHashes {
    fn default() -> CallHashes {
        CallHashes::Many(Box::default())
    }
}

impl std::ops::Deref for CallHashes {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        match self {
            CallHashes::One(h) => std::slice::from_ref(h),
            CallHashes::Many(b) => b,
        }
    }
}

impl FromIterator<u64> for CallHashes {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> CallHashes {
        CallHashes::from(iter.into_iter().collect::<Vec<u64>>())
    }
}

impl From<Vec<u64>> for CallHashes {
    fn from(v: Vec<u64>) -> CallHashes {
        match *v {
            [one] => CallHashes::One(one),
            _ => CallHashes::Many(v.into_boxed_slice()),
        }
    }
}

impl MessageSummary {
    /// The summary of a converted message (`None`: not model-visible).
    pub(crate) fn of(message: Option<&Message>) -> MessageSummary {
        let calls = match message {
            Some(Message::ToolResult(r)) => vec![call_hash(&r.tool_call_id)],
            Some(Message::Assistant(a)) => {
                a.tool_calls().iter().map(|c| call_hash(&c.id)).collect()
            }
            _ => Vec::new(),
        };
        MessageSummary {
            visible: message.is_some(),
            calls: CallHashes::from(calls),
        }
    }
}

/// The XXH3 of a tool-call id, as [`MessageSummary`] keeps it.
pub(crate) fn call_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

/// The XXH3 of a tool result's `toolName`, as the tree keeps it per entry
/// ([`super::Entry::tool_is`]).
pub(crate) fn tool_hash(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

impl LineParts {
    /// Replaces the model-visible message of a `message` entry by its [`MessageSummary`]
    /// (unless the line was parsed into its summary already).
    pub(crate) fn summarize(&mut self) {
        if let Some(m) = self.message.as_mut() {
            if m.summary.is_none() {
                m.summary = Some(MessageSummary::of(m.message.take().as_deref()));
            }
        }
    }
}

/// The parts of one entry line.
#[derive(Debug, Default)]
pub(crate) struct LineParts {
    /// `type` when it is a string.
    pub kind: Option<CompactString>,
    /// `id` when it is a string (Pi's 8 hex characters: kept inline).
    pub id: Option<CompactString>,
    /// `parentId` when it is a string.
    pub parent_id: Option<CompactString>,
    /// For `message` entries (`None` otherwise).
    pub message: Option<MessageParts>,
}

fn str_of(v: &Value, k: &str) -> Option<CompactString> {
    v.get(k).and_then(Value::as_str).map(CompactString::from)
}

/// The parts of a stored `message` object, from its `Value`; with `convert`, the model-visible
/// message too.
pub(crate) fn message_from_value(m: &Value, convert: bool) -> MessageParts {
    let role = str_of(m, "role");
    let assistant = (role.as_deref() == Some("assistant")).then(|| {
        AssistantInfo::new(
            m.get("provider").and_then(Value::as_str),
            m.get("model").and_then(Value::as_str),
            m.get("usage").and_then(|u| Usage::deserialize(u).ok()),
        )
    });
    let tool = match role.as_deref() {
        Some("toolResult") => tool_hash(m.get("toolName").and_then(Value::as_str).unwrap_or("")),
        _ => 0,
    };
    MessageParts {
        role,
        message: if convert {
            convert_message(m).map(Box::new)
        } else {
            None
        },
        assistant,
        summary: None,
        tool,
    }
}

/// The parts of an entry from its `Value`.
pub(crate) fn line_from_value(v: &Value, convert: bool) -> LineParts {
    let kind = str_of(v, "type");
    let message =
        (kind.as_deref() == Some("message")).then(|| message_from_value(&v["message"], convert));
    LineParts {
        kind,
        id: str_of(v, "id"),
        parent_id: str_of(v, "parentId"),
        message,
    }
}

/// Parses one line on the fast path; `None` when the line needs the `Value` path (which may
/// still find it valid).
pub(crate) fn parse_fast(text: &str) -> Option<LineParts> {
    let mut de = serde_json::Deserializer::from_str(text);
    let parts = de.deserialize_map(LineVisitor { summary: false }).ok()?;
    de.end().ok()?;
    Some(parts)
}

/// [`parse_fast`] of the lines `buf[start..end]` of `lines` (non-blank, in order), in one pass
/// of one deserializer over `buf` (its buffer for strings with escapes is reused, not grown
/// again for each line): `None` for a line that needs [`parse_fast`] or the `Value` path on its
/// own (a damaged line, a line the fast path does not take, a value that does not end on its
/// line); the pass starts again at the next line.
///
/// `summary`: a `message` entry's message is read into its [`MessageSummary`] only (see
/// [`SummarySeed`]: nothing of its content is kept or built); a message it does not take as
/// Pi writes it (an extended role, a tag that is not the first key) leaves the line to the
/// other paths, whose message is then summarized ([`LineParts::summarize`]): the same
/// summary either way.
#[cfg(test)]
pub(crate) fn parse_many(
    buf: &[u8],
    lines: &[(usize, usize)],
    summary: bool,
) -> Vec<Option<LineParts>> {
    let mut out = Vec::with_capacity(lines.len());
    parse_each(buf, lines, summary, &mut |parts| out.push(parts));
    out
}

/// [`parse_many`], handing each line's result to `emit` as soon as it is parsed (one call per
/// line of `lines`, in order) instead of collecting them: a loader's piece of the file is
/// turned into its entries with no buffer of parts in between (each `LineParts` is about half
/// a kilobyte: a piece's worth of them was a fresh allocation, its pages faulted in, per piece).
pub(crate) fn parse_each(
    buf: &[u8],
    lines: &[(usize, usize)],
    summary: bool,
    emit: &mut dyn FnMut(Option<LineParts>),
) {
    if summary {
        parse_each_as::<true>(buf, lines, emit)
    } else {
        parse_each_as::<false>(buf, lines, emit)
    }
}

/// [`parse_each`], `SUMMARY` saying whether messages are read into their summaries.
fn parse_each_as<const SUMMARY: bool>(
    buf: &[u8],
    lines: &[(usize, usize)],
    emit: &mut dyn FnMut(Option<LineParts>),
) {
    /// An entry line through [`LineVisitor`].
    struct Parts<const S: bool>(LineParts);
    impl<'de, const S: bool> Deserialize<'de> for Parts<S> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_map(LineVisitor { summary: S }).map(Parts)
        }
    }
    // Valid UTF-8 as a whole (else each line is read on its own): checked by `simdutf8`, the
    // same answer as `std::str::from_utf8` (tested), a third of its instructions on a CPU
    // with SSE 4.2 or AVX2 (docs/benchmarks.md, round 38).
    let Ok(text) = simdutf8::basic::from_utf8(buf) else {
        lines.iter().for_each(|_| emit(None));
        return;
    };
    // Summaries' strings read as bytes when no line has a control character ([`Str`]).
    let no_control = SUMMARY && !lines.iter().any(|&(s, e)| has_control(&buf[s..e]));
    NO_CONTROL.with(|c| c.set(no_control));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            NO_CONTROL.with(|c| c.set(false));
        }
    }
    let _reset = Reset;
    let json_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let mut done = 0;
    while let Some(&(start, _)) = lines.get(done) {
        let Some(rest) = text.get(start..) else {
            lines[done..].iter().for_each(|_| emit(None));
            return;
        };
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Parts<SUMMARY>>();
        while let Some(&(_, end)) = lines.get(done) {
            let ok = match stream.next() {
                Some(Ok(Parts(parts))) => {
                    let at = start + stream.byte_offset();
                    (at <= end && buf[at..end].iter().all(json_space)).then_some(parts)
                }
                _ => None,
            };
            let restart = ok.is_none();
            emit(ok);
            done += 1;
            if restart {
                break;
            }
        }
    }
}

/// Parses one line: the fast path, else through a `Value`; `None` when it is not a JSON object.
pub(crate) fn parse(text: &str) -> Option<LineParts> {
    parse_fast(text).or_else(|| match serde_json::from_str::<Value>(text) {
        Ok(v) if v.is_object() => Some(line_from_value(&v, true)),
        _ => None,
    })
}

/// A map key, borrowed from the input when it has no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        d.deserialize_str(V)
    }
}

/// Any JSON value; `Some` when it is a string (as `Value::as_str`).
struct AnyStr;

impl<'de> DeserializeSeed<'de> for AnyStr {
    type Value = Option<CompactString>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<CompactString>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AnyStr {
    type Value = Option<CompactString>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(CompactString::from(v)))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(CompactString::from(v)))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// The rest of an object whose tag was read first; a second occurrence of the tag is an error
/// (the `Value` path then decides, as it keeps the last one).
struct Rest<A> {
    map: A,
    tag: &'static str,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Rest<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.map.next_key::<Key<'de>>()? else {
            return Ok(None);
        };
        if key.as_str() == self.tag {
            return Err(de::Error::custom("repeated tag"));
        }
        match key {
            Key::Borrowed(s) => seed.deserialize(BorrowedStrDeserializer::new(s)).map(Some),
            Key::Owned(s) => seed.deserialize(StringDeserializer::new(s)).map(Some),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// The rest of a tagged object deserialized as `T`'s fields.
fn rest<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
    map: A,
    tag: &'static str,
) -> Result<T, A::Error> {
    T::deserialize(MapAccessDeserializer::new(Rest { map, tag }))
}

/// An object whose first key was not its tag, as a `Value` (the first key already read).
fn collect<'de, A: MapAccess<'de>>(first: Key<'de>, mut map: A) -> Result<Value, A::Error> {
    let mut obj = Map::new();
    let v: Value = map.next_value()?;
    obj.insert(first.as_str().to_string(), v);
    while let Some((k, v)) = map.next_entry::<String, Value>()? {
        obj.insert(k, v);
    }
    Ok(Value::Object(obj))
}

/// An entry line: `type`, `id`, `parentId`, and a `message` entry's message (`summary`: its
/// [`MessageSummary`] only, [`SummarySeed`]; else built, [`MessageSeed`]).
struct LineVisitor {
    summary: bool,
}

impl<'de> Visitor<'de> for LineVisitor {
    type Value = LineParts;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an entry object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LineParts, A::Error> {
        let mut out = LineParts::default();
        let mut skipped_message = false;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                "type" => out.kind = map.next_value_seed(AnyStr)?,
                "id" => out.id = map.next_value_seed(AnyStr)?,
                "parentId" => out.parent_id = map.next_value_seed(AnyStr)?,
                "message" if out.kind.as_deref() == Some("message") => {
                    out.message = Some(if self.summary {
                        map.next_value_seed(SummarySeed)?
                    } else {
                        map.next_value_seed(MessageSeed)?
                    })
                }
                _ => {
                    skipped_message |= key.as_str() == "message";
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if out.kind.as_deref() == Some("message") {
            if skipped_message {
                return Err(de::Error::custom("message before its type"));
            }
            // A message entry without a message: nothing model-visible.
            out.message.get_or_insert_with(|| MessageParts {
                summary: self.summary.then(MessageSummary::default),
                ..Default::default()
            });
        } else {
            out.message = None;
        }
        Ok(out)
    }
}

struct MessageSeed;

impl<'de> DeserializeSeed<'de> for MessageSeed {
    type Value = MessageParts;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<MessageParts, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MessageSeed {
    type Value = MessageParts;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MessageParts, A::Error> {
        let Some(first) = map.next_key::<Key<'de>>()? else {
            return Ok(MessageParts::default());
        };
        if first.as_str() != "role" {
            return Ok(message_from_value(&collect(first, map)?, true));
        }
        let role: String = map.next_value()?;
        let message = match role.as_str() {
            "user" => {
                let f: UserFields = rest(map, "role")?;
                Message::User(UserMessage {
                    content: f.content,
                    timestamp: f.timestamp,
                })
            }
            "assistant" => {
                let f: AssistantFields = rest(map, "role")?;
                let info =
                    AssistantInfo::new(f.provider.as_deref(), f.model.as_deref(), f.usage.clone());
                let m = Message::Assistant(AssistantMessage {
                    content: f.content,
                    api: f.api,
                    provider: f.provider.unwrap_or_default(),
                    model: f.model.unwrap_or_default(),
                    response_id: f.response_id,
                    response_model: f.response_model,
                    raw_stop_reason: f.raw_stop_reason,
                    usage: f.usage.unwrap_or_default(),
                    stop_reason: f.stop_reason,
                    error_message: f.error_message,
                    timestamp: f.timestamp,
                    thinking_level: f.thinking_level,
                    provider_thinking_level: f.provider_thinking_level.map(Box::new),
                });
                return Ok(MessageParts {
                    role: Some(CompactString::from(role.as_str())),
                    message: Some(Box::new(m)),
                    assistant: Some(info),
                    summary: None,
                    tool: 0,
                });
            }
            "toolResult" => {
                let f: ToolResultFields = rest(map, "role")?;
                Message::ToolResult(ToolResultMessage {
                    tool_call_id: f.tool_call_id,
                    tool_name: f.tool_name,
                    content: f.content,
                    details: f.details,
                    is_error: f.is_error,
                    timestamp: f.timestamp,
                })
            }
            _ => {
                // Extended roles are small and converted from their value.
                let map = RoleFirst {
                    role: Some(role),
                    map,
                };
                let v = collect(Key::Borrowed("role"), map)?;
                return Ok(message_from_value(&v, true));
            }
        };
        let tool = match &message {
            Message::ToolResult(r) => tool_hash(&r.tool_name),
            _ => 0,
        };
        Ok(MessageParts {
            role: Some(CompactString::from(role.as_str())),
            message: Some(Box::new(message)),
            assistant: None,
            summary: None,
            tool,
        })
    }
}

/// A map whose first value (the role, already read) is handed out again.
struct RoleFirst<A> {
    role: Option<String>,
    map: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for RoleFirst<A> {
    type Error = A::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.map.next_key_seed(seed)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.role.take() {
            Some(r) => seed.deserialize(StringDeserializer::new(r)),
            None => self.map.next_value_seed(seed),
        }
    }
}

#[derive(Deserialize)]
struct UserFields {
    #[serde(deserialize_with = "user_content")]
    content: UserContent,
    #[serde(default)]
    timestamp: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AssistantFields {
    #[serde(deserialize_with = "blocks")]
    content: Vec<ContentBlock>,
    #[serde(default)]
    api: String,
    #[serde(default, deserialize_with = "some")]
    provider: Option<String>,
    #[serde(default, deserialize_with = "some")]
    model: Option<String>,
    #[serde(default)]
    response_id: Option<String>,
    #[serde(default)]
    response_model: Option<String>,
    #[serde(default, deserialize_with = "some")]
    usage: Option<Usage>,
    stop_reason: StopReason,
    #[serde(default)]
    raw_stop_reason: Option<String>,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    timestamp: i64,
    #[serde(default)]
    thinking_level: Option<String>,
    #[serde(default)]
    provider_thinking_level: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolResultFields {
    tool_call_id: String,
    #[serde(default)]
    tool_name: String,
    #[serde(deserialize_with = "blocks_or_string")]
    content: Vec<ContentBlock>,
    #[serde(default)]
    details: Option<Value>,
    #[serde(default)]
    is_error: bool,
    #[serde(default)]
    timestamp: i64,
}

#[derive(Deserialize)]
struct ImageFields {
    data: String,
    #[serde(rename = "mimeType")]
    mime_type: String,
    #[serde(rename = "piLspAsset", default)]
    asset: Option<IgnoredAny>,
}

/// A present field that must have `T`'s shape (`null` is not `None`).
fn some<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

fn user_content<'de, D: Deserializer<'de>>(d: D) -> Result<UserContent, D::Error> {
    d.deserialize_any(ContentVisitor)
}

fn blocks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ContentBlock>, D::Error> {
    d.deserialize_seq(BlocksVisitor)
}

fn blocks_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ContentBlock>, D::Error> {
    Ok(match d.deserialize_any(ContentVisitor)? {
        UserContent::Text(t) => vec![ContentBlock::text(t)],
        UserContent::Blocks(b) => b,
    })
}

/// `UserContent`: a string or a list of blocks.
struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = UserContent;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or a list of content blocks")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<UserContent, E> {
        Ok(UserContent::Text(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<UserContent, E> {
        Ok(UserContent::Text(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<UserContent, A::Error> {
        BlocksVisitor.visit_seq(seq).map(UserContent::Blocks)
    }
}

struct BlocksVisitor;

impl<'de> Visitor<'de> for BlocksVisitor {
    type Value = Vec<ContentBlock>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of content blocks")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<ContentBlock>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(b) = seq.next_element_seed(BlockSeed)? {
            out.push(b);
        }
        Ok(out)
    }
}

struct BlockSeed;

impl<'de> DeserializeSeed<'de> for BlockSeed {
    type Value = ContentBlock;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ContentBlock, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BlockSeed {
    type Value = ContentBlock;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a content block")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContentBlock, A::Error> {
        let Some(first) = map.next_key::<Key<'de>>()? else {
            return Err(de::Error::missing_field("type"));
        };
        if first.as_str() != "type" {
            return ContentBlock::deserialize(collect(first, map)?).map_err(de::Error::custom);
        }
        let kind: Key<'de> = map.next_value()?;
        Ok(match kind.as_str() {
            "text" => ContentBlock::Text(rest::<TextContent, _>(map, "type")?),
            "thinking" => ContentBlock::Thinking(rest::<ThinkingContent, _>(map, "type")?),
            "image" => {
                let f: ImageFields = rest(map, "type")?;
                if f.asset.is_some() {
                    // Its bytes are in the assets folder: the loader reads it as a value.
                    return Err(de::Error::custom("image kept in assets"));
                }
                ContentBlock::Image(ImageContent {
                    data: f.data.into(),
                    mime_type: f.mime_type,
                })
            }
            "toolCall" => ContentBlock::ToolCall(rest::<ToolCall, _>(map, "type")?),
            other => {
                return Err(de::Error::unknown_variant(
                    other,
                    &["text", "thinking", "image", "toolCall"],
                ))
            }
        })
    }
}

/// A `message` entry's message read into its [`MessageSummary`] (and, for an assistant
/// message, its [`AssistantInfo`]) without building it: every field [`MessageSeed`] reads is
/// checked the same way (the same names, defaults and types, through serde's derive as there),
/// but a string is checked and not kept, a `Value` is walked and not built, and a tool call's
/// id is kept as its [`call_hash`] only. It takes what [`MessageSeed`] takes as Pi writes it
/// (the role first, then `user` / `assistant` / `toolResult`); anything else is an error, and
/// the line goes to the other paths (whose message is then summarized), so a summary never
/// differs from the one of the built message (tested against each other on generated lines).
struct SummarySeed;

impl<'de> DeserializeSeed<'de> for SummarySeed {
    type Value = MessageParts;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<MessageParts, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SummarySeed {
    type Value = MessageParts;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MessageParts, A::Error> {
        let Some(first) = map.next_key::<Key<'de>>()? else {
            // No role: nothing model-visible.
            return Ok(MessageParts {
                summary: Some(MessageSummary::default()),
                ..Default::default()
            });
        };
        if first.as_str() != "role" {
            return Err(de::Error::custom("role not first"));
        }
        let role: Key<'de> = map.next_value()?;
        let mut tool = 0;
        let (calls, assistant) = match role.as_str() {
            "user" => {
                let _: SkimUser = skim_rest(map)?;
                (Vec::new(), None)
            }
            "assistant" => {
                let f: SkimAssistant = skim_rest(map)?;
                let info = AssistantInfo::new(f.provider.as_deref(), f.model.as_deref(), f.usage);
                (f.content.0, Some(info))
            }
            "toolResult" => {
                let f: SkimToolResult = skim_rest(map)?;
                tool = f.tool_name.0;
                (vec![f.tool_call_id.0], None)
            }
            _ => return Err(de::Error::custom("an extended role")),
        };
        Ok(MessageParts {
            role: Some(CompactString::from(role.as_str())),
            message: None,
            assistant,
            summary: Some(MessageSummary {
                visible: true,
                calls: CallHashes::from(calls),
            }),
            tool,
        })
    }
}

std::thread_local! {
    /// Set while [`parse_each_as`] reads lines with no byte below 0x20 ([`has_control`]):
    /// a [`Str`] is then read as serde_json reads bytes (its string scan stops at `"` and `\`
    /// only, a vectorised search, instead of checking every byte for control characters as
    /// a `String` is read); the lines' bytes were checked for control characters before.
    static NO_CONTROL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether `bytes` hold a byte below 0x20 (a control character: never in a JSON string, and
/// outside strings only as whitespace). Eight bytes at a time, 32 a step.
pub(crate) fn has_control(bytes: &[u8]) -> bool {
    const LOW: u64 = u64::from_ne_bytes([0x20; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte below 0x20 borrows when 0x20 is taken from it and has its high bit clear.
    let below = |w: u64| w.wrapping_sub(LOW) & !w;
    let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().unwrap_or([0x20; 8]));
    let mut blocks = bytes.chunks_exact(32);
    for b in &mut blocks {
        let any = below(word(&b[0..8]))
            | below(word(&b[8..16]))
            | below(word(&b[16..24]))
            | below(word(&b[24..32]));
        if any & HIGH != 0 {
            return true;
        }
    }
    blocks.remainder().iter().any(|b| *b < 0x20)
}

/// A JSON string, checked as a `String` field reads it, not kept.
#[derive(Default)]
struct Str;

impl<'de> Deserialize<'de> for Str {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Str, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Str;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Str, E> {
                Ok(Str)
            }
            // Read as bytes ([`NO_CONTROL`]): in place, a part of the line, which is UTF-8.
            fn visit_borrowed_bytes<E: de::Error>(self, _: &[u8]) -> Result<Str, E> {
                Ok(Str)
            }
            // With escapes: a lone surrogate (`\ud800`), which a `String` refuses, comes
            // back as bytes that are not UTF-8.
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Str, E> {
                std::str::from_utf8(v)
                    .map(|_| Str)
                    .map_err(|_| E::custom("a lone surrogate"))
            }
        }
        if NO_CONTROL.with(std::cell::Cell::get) {
            d.deserialize_bytes(V)
        } else {
            d.deserialize_string(V)
        }
    }
}

/// A tool-call id (a JSON string) as its [`call_hash`].
struct CallId(u64);

impl<'de> Deserialize<'de> for CallId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CallId, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = CallId;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<CallId, E> {
                Ok(CallId(call_hash(v)))
            }
        }
        d.deserialize_string(V)
    }
}

/// A tool result's `toolName` (a JSON string; `""` when absent) as its [`tool_hash`].
struct ToolName(u64);

impl Default for ToolName {
    fn default() -> ToolName {
        ToolName(tool_hash(""))
    }
}

impl<'de> Deserialize<'de> for ToolName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolName, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ToolName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolName, E> {
                Ok(ToolName(tool_hash(v)))
            }
        }
        d.deserialize_string(V)
    }
}

/// Any JSON value, checked as a `serde_json::Value` reads it (every number and string
/// parsed, keys as strings), not built.
struct AnyValue;

impl<'de> Deserialize<'de> for AnyValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AnyValue, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AnyValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any valid JSON value")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<AnyValue, E> {
                Ok(AnyValue)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<AnyValue, E> {
                Ok(AnyValue)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<AnyValue, E> {
                Ok(AnyValue)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<AnyValue, E> {
                Ok(AnyValue)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<AnyValue, E> {
                Ok(AnyValue)
            }
            fn visit_none<E: de::Error>(self) -> Result<AnyValue, E> {
                Ok(AnyValue)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<AnyValue, D::Error> {
                AnyValue::deserialize(d)
            }
            fn visit_unit<E: de::Error>(self) -> Result<AnyValue, E> {
                Ok(AnyValue)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnyValue, A::Error> {
                while seq.next_element::<AnyValue>()?.is_some() {}
                Ok(AnyValue)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyValue, A::Error> {
                while map.next_entry::<Str, AnyValue>()?.is_some() {}
                Ok(AnyValue)
            }
        }
        d.deserialize_any(V)
    }
}

/// A tagged object's tag met again among its other fields (a field of each skimmed struct
/// named as the tag): always refused, as [`Rest`] refuses it (the other paths then decide; the
/// `Value` path keeps the last one).
#[derive(Default)]
struct Repeated;

impl<'de> Deserialize<'de> for Repeated {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Repeated, D::Error> {
        Err(de::Error::custom("repeated tag"))
    }
}

/// The rest of a tagged object (its tag read) as the skimmed struct `T`'s fields, read
/// straight from the JSON map: `T` refuses its tag met again (a [`Repeated`] field) and serde's
/// derive refuses any other field met twice, as [`rest`] does, without [`Rest`]'s key
/// compare and second dispatch per key.
fn skim_rest<'de, T: Deserialize<'de>, A: MapAccess<'de>>(map: A) -> Result<T, A::Error> {
    T::deserialize(MapAccessDeserializer::new(map))
}

/// [`UserFields`], skimmed.
#[derive(Deserialize)]
#[allow(dead_code)]
struct SkimUser {
    /// The tag again: refused.
    #[serde(rename = "role", default)]
    _role: Repeated,
    #[serde(deserialize_with = "skim_content")]
    content: Calls,
    #[serde(default)]
    timestamp: i64,
}

/// [`AssistantFields`], skimmed (what [`AssistantInfo`] holds kept).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct SkimAssistant {
    /// The tag again: refused.
    #[serde(rename = "role", default)]
    _role: Repeated,
    #[serde(deserialize_with = "skim_blocks")]
    content: Calls,
    #[serde(default)]
    api: Str,
    #[serde(default, deserialize_with = "some")]
    provider: Option<CompactString>,
    #[serde(default, deserialize_with = "some")]
    model: Option<CompactString>,
    #[serde(default)]
    response_id: Option<Str>,
    #[serde(default)]
    response_model: Option<Str>,
    #[serde(default, deserialize_with = "some")]
    usage: Option<Usage>,
    stop_reason: StopReason,
    #[serde(default)]
    raw_stop_reason: Option<Str>,
    #[serde(default)]
    error_message: Option<Str>,
    #[serde(default)]
    timestamp: i64,
}

/// [`ToolResultFields`], skimmed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct SkimToolResult {
    /// The tag again: refused.
    #[serde(rename = "role", default)]
    _role: Repeated,
    tool_call_id: CallId,
    #[serde(default)]
    tool_name: ToolName,
    #[serde(deserialize_with = "skim_content")]
    content: Calls,
    #[serde(default)]
    details: Option<AnyValue>,
    #[serde(default)]
    is_error: bool,
    #[serde(default)]
    timestamp: i64,
}

/// [`TextContent`], skimmed.
#[derive(Deserialize)]
#[allow(dead_code)]
struct SkimText {
    /// The tag again: refused.
    #[serde(rename = "type", default)]
    _type: Repeated,
    text: Str,
    #[serde(rename = "textSignature", default)]
    text_signature: Option<Str>,
}

/// [`ThinkingContent`], skimmed.
#[derive(Deserialize)]
#[allow(dead_code)]
struct SkimThinking {
    /// The tag again: refused.
    #[serde(rename = "type", default)]
    _type: Repeated,
    thinking: Str,
    #[serde(rename = "thinkingSignature", default)]
    thinking_signature: Option<Str>,
    #[serde(default)]
    redacted: bool,
}

/// [`ImageFields`], skimmed.
#[derive(Deserialize)]
#[allow(dead_code)]
struct SkimImage {
    /// The tag again: refused.
    #[serde(rename = "type", default)]
    _type: Repeated,
    data: Str,
    #[serde(rename = "mimeType")]
    mime_type: Str,
    #[serde(rename = "piLspAsset", default)]
    asset: Option<IgnoredAny>,
}

/// [`ToolCall`], skimmed: its id as its hash.
#[derive(Deserialize)]
#[allow(dead_code)]
struct SkimToolCall {
    /// The tag again: refused.
    #[serde(rename = "type", default)]
    _type: Repeated,
    id: CallId,
    name: Str,
    arguments: AnyValue,
    #[serde(rename = "rawArguments", default)]
    raw_arguments: Option<Str>,
}

/// The [`call_hash`]es of the tool calls of a content list, in order.
struct Calls(Vec<u64>);

fn skim_content<'de, D: Deserializer<'de>>(d: D) -> Result<Calls, D::Error> {
    d.deserialize_any(SkimContentVisitor)
}

fn skim_blocks<'de, D: Deserializer<'de>>(d: D) -> Result<Calls, D::Error> {
    d.deserialize_seq(SkimContentVisitor)
}

/// [`ContentVisitor`] (and [`BlocksVisitor`] for a list), skimmed.
struct SkimContentVisitor;

impl<'de> Visitor<'de> for SkimContentVisitor {
    type Value = Calls;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or a list of content blocks")
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Calls, E> {
        Ok(Calls(Vec::new()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Calls, A::Error> {
        let mut calls = Vec::new();
        while let Some(call) = seq.next_element_seed(SkimBlockSeed)? {
            calls.extend(call);
        }
        Ok(Calls(calls))
    }
}

/// [`BlockSeed`], skimmed: a tool call's [`call_hash`], `None` for other blocks.
struct SkimBlockSeed;

impl<'de> DeserializeSeed<'de> for SkimBlockSeed {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for SkimBlockSeed {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a content block")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        let Some(first) = map.next_key::<Key<'de>>()? else {
            return Err(de::Error::missing_field("type"));
        };
        if first.as_str() != "type" {
            // Read through a value by the other paths.
            return Err(de::Error::custom("type not first"));
        }
        let kind: Key<'de> = map.next_value()?;
        Ok(match kind.as_str() {
            "text" => skim_rest::<SkimText, _>(map).map(|_| None)?,
            "thinking" => skim_rest::<SkimThinking, _>(map).map(|_| None)?,
            "image" => {
                let f: SkimImage = skim_rest(map)?;
                if f.asset.is_some() {
                    return Err(de::Error::custom("image kept in assets"));
                }
                None
            }
            "toolCall" => Some(skim_rest::<SkimToolCall, _>(map)?.id.0),
            other => {
                return Err(de::Error::unknown_variant(
                    other,
                    &["text", "thinking", "image", "toolCall"],
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The fast path and the `Value` path agree on `line`.
    fn same(line: &Value) {
        let text = line.to_string();
        let slow = line_from_value(line, true);
        let fast = parse(&text).unwrap();
        assert_eq!(fast.kind, slow.kind, "{text}");
        assert_eq!(fast.id, slow.id, "{text}");
        assert_eq!(fast.parent_id, slow.parent_id, "{text}");
        let (f, s) = (
            fast.message.unwrap_or_default(),
            slow.message.unwrap_or_default(),
        );
        assert_eq!(f.role, s.role, "{text}");
        assert_eq!(f.message, s.message, "{text}");
        assert_eq!(f.assistant, s.assistant, "{text}");
        same_summary(&text);
    }

    /// The summary of `text` read straight into it ([`parse_many`] with `summary`), when that
    /// path takes the line, equals the summary of the message the full conversion builds
    /// ([`parse`], then [`LineParts::summarize`]); true when it took it.
    fn same_summary(text: &str) -> bool {
        let fast = parse_many(text.as_bytes(), &[(0, text.len())], true)
            .pop()
            .unwrap();
        let Some(fast) = fast else {
            return false;
        };
        let Some(mut full) = parse(text) else {
            panic!("the summary path took a line the full conversion refuses: {text}");
        };
        full.summarize();
        assert_eq!(fast.kind, full.kind, "{text}");
        assert_eq!(fast.id, full.id, "{text}");
        assert_eq!(fast.parent_id, full.parent_id, "{text}");
        let (f, s) = (
            fast.message.unwrap_or_default(),
            full.message.unwrap_or_default(),
        );
        assert!(f.message.is_none() && s.message.is_none(), "{text}");
        assert_eq!(f.role, s.role, "{text}");
        assert_eq!(f.assistant, s.assistant, "{text}");
        assert_eq!(f.summary, s.summary, "{text}");
        true
    }

    /// A small deterministic generator (xorshift64*) of entry lines as JSON text: the shapes
    /// Pi writes, each part now and then of another type, dropped, repeated, moved or joined
    /// by an unknown field, with strings `serde_json::Value` refuses (a lone surrogate) and
    /// numbers it refuses (out of range) among them.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        /// True with probability `p` percent.
        fn p(&mut self, p: u64) -> bool {
            self.next() % 100 < p
        }
        fn pick(&mut self, xs: &[&str]) -> String {
            xs[(self.next() % xs.len() as u64) as usize].to_string()
        }
        fn string(&mut self) -> String {
            if self.p(2) {
                return r#""\ud800 lone""#.into();
            }
            self.pick(&[
                r#""plain text""#,
                r#""""#,
                r#""line\nbreak \"quoted\" \\ tab\t""#,
                r#""caf\u00e9 \ud83d\ude00 é 😀""#,
                r#""call_1""#,
                r#""c\u0031""#,
            ])
        }
        /// Any JSON value text.
        fn value(&mut self, depth: u32) -> String {
            match self.next() % if depth > 2 { 7 } else { 9 } {
                0 => "null".into(),
                1 => self.pick(&["true", "false"]),
                2 if self.p(10) => self.pick(&["1e400", "-1e400"]),
                2 => self.pick(&[
                    "0",
                    "-1",
                    "18446744073709551615",
                    "1.5",
                    "-0",
                    "2e-400",
                    "123456789012345678901234567890",
                ]),
                3 => self.string(),
                4 => "{}".into(),
                5 => "[]".into(),
                6 => self.pick(&["7", r#""x""#]),
                7 => format!("[{},{}]", self.value(depth + 1), self.value(depth + 1)),
                _ => format!(
                    r#"{{"k":{},"path":{}}}"#,
                    self.value(depth + 1),
                    self.string()
                ),
            }
        }
        /// An object of `fields`: now and then one dropped, repeated, or an unknown one
        /// added; shuffled now and then (always, unless `keep_first`).
        fn object(&mut self, mut fields: Vec<(String, String)>, keep_first: bool) -> String {
            if self.p(8) && fields.len() > 1 {
                let k = 1 + (self.next() as usize) % (fields.len() - 1);
                fields.remove(k);
            }
            if self.p(5) && !fields.is_empty() {
                let k = (self.next() as usize) % fields.len();
                let dup = (fields[k].0.clone(), self.value(1));
                fields.push(dup);
            }
            if self.p(10) {
                let k = self.pick(&["extra", "piLspAsset", "cost", "0"]);
                let v = self.value(0);
                fields.push((k, v));
            }
            if !keep_first || self.p(4) {
                let n = fields.len();
                for i in 0..n {
                    let j = (self.next() as usize) % n;
                    fields.swap(i, j);
                }
            }
            let body: Vec<String> = fields
                .into_iter()
                .map(|(k, v)| format!("{k:?}:{v}"))
                .collect();
            format!("{{{}}}", body.join(","))
        }
        /// `right` mostly, now and then any value.
        fn or_any(&mut self, right: String) -> String {
            if self.p(3) {
                self.value(0)
            } else {
                right
            }
        }
        fn any_string(&mut self) -> String {
            let s = self.string();
            self.or_any(s)
        }
        fn block(&mut self) -> String {
            let kind = self.pick(&[
                "text", "text", "thinking", "toolCall", "toolCall", "image", "video",
            ]);
            let mut f = vec![("type".to_string(), format!("{kind:?}"))];
            match kind.as_str() {
                "text" => {
                    f.push(("text".into(), self.any_string()));
                    if self.p(20) {
                        f.push(("textSignature".into(), self.any_string()));
                    }
                }
                "thinking" => {
                    f.push(("thinking".into(), self.any_string()));
                    f.push(("thinkingSignature".into(), self.any_string()));
                    if self.p(20) {
                        let b = self.pick(&["true", "false"]);
                        f.push(("redacted".into(), self.or_any(b)));
                    }
                }
                "image" => {
                    f.push(("data".into(), self.or_any(r#""iVBORw0KGgo=""#.into())));
                    f.push(("mimeType".into(), self.or_any(r#""image/png""#.into())));
                }
                "toolCall" => {
                    f.push(("id".into(), self.any_string()));
                    f.push(("name".into(), self.or_any(r#""bash""#.into())));
                    f.push(("arguments".into(), self.value(0)));
                    if self.p(10) {
                        f.push(("rawArguments".into(), self.any_string()));
                    }
                }
                _ => {}
            }
            self.object(f, true)
        }
        fn blocks(&mut self) -> String {
            let n = self.next() % 4;
            let b: Vec<String> = (0..n).map(|_| self.block()).collect();
            format!("[{}]", b.join(","))
        }
        fn content(&mut self) -> String {
            if self.p(30) {
                self.string()
            } else {
                let b = self.blocks();
                self.or_any(b)
            }
        }
        fn usage(&mut self) -> String {
            let bad = self.p(10);
            let cost = format!(
                r#"{{"input":{},"output":0,"cacheRead":0,"cacheWrite":0,"total":0.5}}"#,
                match bad {
                    true => self.pick(&[r#""x""#, "1e400"]),
                    false => self.pick(&["0.001", "1"]),
                }
            );
            let input = match self.p(10) {
                true => self.pick(&["-1", "1.5", r#""x""#]),
                false => self.pick(&["100", "0"]),
            };
            let f = vec![
                ("input".to_string(), input),
                ("output".into(), "10".into()),
                ("cacheRead".into(), "0".into()),
                ("cacheWrite".into(), "0".into()),
                ("totalTokens".into(), "110".into()),
                ("cost".into(), cost),
            ];
            let u = self.object(f, false);
            self.or_any(u)
        }
        fn message(&mut self) -> String {
            let role = self.pick(&[
                "user",
                "assistant",
                "assistant",
                "toolResult",
                "toolResult",
                "bashExecution",
                "custom",
                "compactionSummary",
                "other",
            ]);
            let mut f = vec![("role".to_string(), self.or_any(format!("{role:?}")))];
            let ts = match self.p(10) {
                true => self.pick(&["1.5", r#""t""#, "99999999999999999999"]),
                false => self.pick(&["1", "-3", "1785232802000"]),
            };
            match role.as_str() {
                "user" => f.push(("content".into(), self.content())),
                "assistant" => {
                    let b = self.blocks();
                    f.push(("content".into(), self.or_any(b)));
                    f.push(("api".into(), self.or_any(r#""openai-completions""#.into())));
                    f.push(("provider".into(), self.or_any(r#""mock""#.into())));
                    f.push(("model".into(), self.or_any(r#""mock-1""#.into())));
                    f.push(("usage".into(), self.usage()));
                    let stop =
                        self.pick(&["stop", "toolUse", "length", "error", "aborted", "bogus"]);
                    f.push(("stopReason".into(), self.or_any(format!("{stop:?}"))));
                    if self.p(20) {
                        f.push(("errorMessage".into(), self.string()));
                        f.push(("responseId".into(), self.string()));
                        f.push(("responseModel".into(), self.or_any("null".into())));
                    }
                }
                "toolResult" => {
                    f.push(("toolCallId".into(), self.any_string()));
                    f.push(("toolName".into(), self.or_any(r#""read""#.into())));
                    f.push(("content".into(), self.content()));
                    if self.p(50) {
                        f.push(("details".into(), self.value(0)));
                    }
                    f.push(("isError".into(), self.or_any("false".into())));
                }
                "bashExecution" => {
                    f.push(("command".into(), self.string()));
                    f.push(("output".into(), self.string()));
                    f.push(("exitCode".into(), "1".into()));
                    let x = self.pick(&["true", "false"]);
                    f.push(("excludeFromContext".into(), x));
                }
                "custom" => {
                    f.push(("customType".into(), r#""x""#.into()));
                    f.push(("content".into(), self.content()));
                }
                _ => f.push(("summary".into(), self.string())),
            }
            f.push(("timestamp".into(), ts));
            self.object(f, true)
        }
        fn line(&mut self) -> String {
            let kind = self.pick(&[
                "message",
                "message",
                "message",
                "message",
                "label",
                "model_change",
                "compaction",
            ]);
            let parent = self.pick(&["null", r#""p1""#]);
            let mut f = vec![
                ("type".to_string(), self.or_any(format!("{kind:?}"))),
                ("id".into(), self.or_any(r#""a1b2c3d4""#.into())),
                ("parentId".into(), self.or_any(parent)),
                ("timestamp".into(), r#""2026-01-01T00:00:00.000Z""#.into()),
            ];
            match kind.as_str() {
                "message" => {
                    let m = self.message();
                    let m = if self.p(3) { self.value(0) } else { m };
                    f.push(("message".into(), m));
                }
                "label" => f.push(("targetId".into(), r#""p1""#.into())),
                "model_change" => f.push(("provider".into(), r#""p""#.into())),
                _ => f.push(("summary".into(), self.string())),
            }
            self.object(f, true)
        }
    }

    #[test]
    fn summaries_equal_the_full_conversion_on_generated_lines() {
        let mut gen = Gen(0x9E37_79B9_7F4A_7C15);
        let (mut taken, mut messages, mut visible) = (0, 0, 0);
        for _ in 0..40_000 {
            let text = gen.line();
            if same_summary(&text) {
                taken += 1;
                if let Some(m) = parse(&text).and_then(|p| p.message) {
                    messages += 1;
                    visible += usize::from(m.message.is_some());
                }
            }
        }
        // Many generated lines are damaged somewhere; enough are whole messages for the
        // comparison to mean something.
        assert!(
            taken > 15_000 && messages > 4_000 && visible > 3_500,
            "{taken} {messages} {visible}"
        );
    }

    #[test]
    fn lines_as_pi_writes_them_are_read_into_their_summaries() {
        let lines = [
            // Thinking, text, two calls; usage with costs.
            json!({"type":"message","id":"b","parentId":"a","timestamp":"t","message":{"role":"assistant","content":[{"type":"thinking","thinking":"let me see\n","thinkingSignature":"EqQBCkYIBxgCKkB"},{"type":"text","text":"I'll read both."},{"type":"toolCall","id":"toolu_01","name":"read","arguments":{"path":"a.rs"}},{"type":"toolCall","id":"toolu_02","name":"bash","arguments":{"command":"ls -la","timeout":30}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":3,"output":120,"cacheRead":20000,"cacheWrite":512,"totalTokens":20635,"cost":{"input":0.000009,"output":0.0018,"cacheRead":0.006,"cacheWrite":0.00192,"total":0.009729}},"stopReason":"toolUse","timestamp":1785232802000i64}}),
            // A bash result with details (an error), an edit result with a diff.
            json!({"type":"message","id":"c","parentId":"b","timestamp":"t","message":{"role":"toolResult","toolCallId":"toolu_02","toolName":"bash","content":[{"type":"text","text":"total 0\n\nCommand exited with code 1"}],"details":{"exitCode":1,"truncation":null,"fullOutputPath":"/tmp/x"},"isError":true,"timestamp":3}}),
            json!({"type":"message","id":"d","parentId":"c","timestamp":"t","message":{"role":"toolResult","toolCallId":"toolu_01","toolName":"edit","content":[{"type":"text","text":"Successfully replaced text in a.rs."}],"details":{"diff":"-1 a\n+1 b","firstChangedLine":1,"fileChange":{"path":"a.rs","before":"x","after":"y"}},"isError":false,"timestamp":3}}),
            // A read of an image: a text and an image block.
            json!({"type":"message","id":"e","parentId":"d","timestamp":"t","message":{"role":"toolResult","toolCallId":"toolu_03","toolName":"read","content":[{"type":"text","text":"Read image file [image/png]"},{"type":"image","data":"iVBORw0KGgoAAAANSUhEUg==","mimeType":"image/png"}],"isError":false,"timestamp":3}}),
            // User text with an image; a plain string.
            json!({"type":"message","id":"f","parentId":"e","timestamp":"t","message":{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image","data":"R0lGODlhAQABAAAAACw=","mimeType":"image/gif"}],"timestamp":4}}),
            json!({"type":"message","id":"g","parentId":"f","timestamp":"t","message":{"role":"user","content":"caf\u{e9} \u{1F600} \"quoted\"","timestamp":4}}),
            // An aborted answer with an error message and no usage.
            json!({"type":"message","id":"h","parentId":"g","timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"partial"}],"api":"openai-responses","provider":"openai","model":"gpt-5","stopReason":"aborted","errorMessage":"Request was aborted","responseId":"resp_1","timestamp":5}}),
            // Redacted thinking, a text signature.
            json!({"type":"message","id":"i","parentId":"h","timestamp":"t","message":{"role":"assistant","content":[{"type":"thinking","thinking":"","thinkingSignature":"opaque","redacted":true},{"type":"text","text":"ok","textSignature":"sig"}],"api":"x","provider":"p","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":6}}),
        ];
        for l in &lines {
            let text = l.to_string();
            assert!(same_summary(&text), "left to the other paths: {text}");
        }
        let summary = |l: &Value| {
            let t = l.to_string();
            let p = parse_many(t.as_bytes(), &[(0, t.len())], true).pop();
            p.flatten().and_then(|p| p.message).and_then(|m| m.summary)
        };
        let calls = |ids: &[&str]| ids.iter().map(|i| call_hash(i)).collect::<CallHashes>();
        let visible = |ids: &[&str]| {
            Some(MessageSummary {
                visible: true,
                calls: calls(ids),
            })
        };
        assert_eq!(summary(&lines[0]), visible(&["toolu_01", "toolu_02"]));
        assert_eq!(summary(&lines[1]), visible(&["toolu_02"]));
        assert_eq!(summary(&lines[4]), visible(&[]));
        // Extended roles, a role or a block type that is not the first key: left to the
        // other paths (and summarized there).
        for text in [
            r#"{"type":"message","id":"r","parentId":"b","message":{"role":"bashExecution","command":"ls","output":"","exitCode":1,"excludeFromContext":true,"timestamp":3}}"#,
            r#"{"type":"message","id":"r","parentId":"b","message":{"content":"role later","role":"user"}}"#,
            r#"{"type":"message","id":"r","parentId":"b","message":{"role":"user","content":[{"text":"type later","type":"text"}]}}"#,
        ] {
            assert!(!same_summary(text), "{text}");
        }
    }

    /// The piece's UTF-8 check (`simdutf8`) answers as `std::str::from_utf8` on every kind of
    /// byte string: ASCII, every UTF-8 length, and each way a sequence is not UTF-8 (a lone
    /// continuation byte, a sequence cut short or cut at the end, an overlong form, an encoded
    /// surrogate, past U+10FFFF, 0xFE/0xFF), at every place in pieces long enough for its
    /// vector paths; and a piece that is not UTF-8 leaves its lines to be read one by one.
    #[test]
    fn the_piece_utf8_check_answers_as_std() {
        let good: [&[u8]; 5] = [
            b"a",
            "\u{e9}".as_bytes(),
            "\u{20ac}".as_bytes(),
            "\u{1f600}".as_bytes(),
            b"\x7f",
        ];
        let bad: [&[u8]; 9] = [
            b"\x80",
            b"\xc3",
            b"\xe2\x82",
            b"\xf0\x9f\x98",
            b"\xc0\xaf",
            b"\xe0\x80\xaf",
            b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80",
            b"\xff",
        ];
        let mut gen = Gen(11);
        for len in [0usize, 1, 7, 15, 16, 31, 32, 33, 63, 64, 65, 127, 200, 1000] {
            for _ in 0..40 {
                let mut bytes = Vec::new();
                while bytes.len() < len {
                    let piece = good[(gen.next() % good.len() as u64) as usize];
                    bytes.extend_from_slice(piece);
                }
                let check = |bytes: &[u8]| {
                    assert_eq!(
                        simdutf8::basic::from_utf8(bytes).is_ok(),
                        std::str::from_utf8(bytes).is_ok(),
                        "{bytes:?}"
                    );
                };
                check(&bytes);
                for b in bad {
                    let at = (gen.next() % (bytes.len() as u64 + 1)) as usize;
                    let mut broken = bytes.clone();
                    broken.splice(at..at, b.iter().copied());
                    check(&broken);
                    // At the very end: a sequence cut by the piece's end.
                    let mut end = bytes.clone();
                    end.extend_from_slice(b);
                    check(&end);
                }
            }
        }
        // A piece with a line that is not UTF-8: no line read in the one pass.
        let line = r#"{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"hi","timestamp":1}}"#;
        let mut piece = format!("{line}\n").into_bytes();
        piece.extend_from_slice(b"{\"type\":\"x\",\"id\":\"\xff\"}\n");
        piece.extend_from_slice(format!("{line}\n").as_bytes());
        let bounds = [
            (0, line.len()),
            (line.len() + 1, piece.len() - line.len() - 2),
            (piece.len() - line.len() - 1, piece.len() - 1),
        ];
        let got = parse_many(&piece, &bounds, true);
        assert!(got.iter().all(Option::is_none));
        // Without it, every line is.
        let whole = format!("{line}\n{line}\n");
        let got = parse_many(
            whole.as_bytes(),
            &[(0, line.len()), (line.len() + 1, whole.len() - 1)],
            true,
        );
        assert!(got.iter().all(Option::is_some));
    }

    /// Lines whose strings the summary reads as bytes ([`NO_CONTROL`]) give what the full
    /// conversion gives: a control character in a string (refused by JSON, so by both paths)
    /// or a lone surrogate escape is never taken, escapes and tabs between tokens are, and a
    /// piece with one line holding a control character reads every line as before.
    #[test]
    fn summaries_read_strings_as_bytes_only_where_a_string_would_read_the_same() {
        let result = |text: &str, body: &str| {
            format!(r#"{{"type":"message","id":"r","parentId":"b","message":{{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{{"type":"text","text":"{body}"}}],"isError":false,"timestamp":3}}}}"#)
                .replace("TEXT", text)
        };
        let long = "lorem ipsum ".repeat(40);
        let taken = [
            result(&long, "TEXT"),
            result(&long, r#"TEXT \n \t \" \\ caf\u00e9 \ud83d\ude00 end"#),
            result("", "TEXT"),
        ];
        for text in &taken {
            assert!(!has_control(text.as_bytes()));
            assert!(same_summary(text), "left to the other paths: {text}");
        }
        // Tabs and carriage returns between tokens: valid JSON, read the strict way.
        let spaced = taken[0].replace(r#""isError":"#, "\t\"isError\":\r");
        assert!(has_control(spaced.as_bytes()));
        assert!(same_summary(&spaced), "{spaced}");
        let refused = [
            result(&long, "TEXT \u{1} raw"),
            result(&long, "TEXT \t raw tab"),
            result(&long, "TEXT \u{1f}"),
            result(&long, r"TEXT \ud800 lone"),
            result(&long, r"TEXT \udc00"),
        ];
        for text in &refused {
            assert!(!same_summary(text), "{text}");
            assert!(parse(text).is_none(), "{text}");
        }
        // A tag met again (the skimmed structs read their fields straight from the map):
        // left to the other paths, which keep the last one.
        for text in [
            taken[0].replace(
                r#""toolName":"read","#,
                r#""toolName":"read","role":"user","#,
            ),
            taken[0].replace(r#""toolName":"read","#, r#""toolName":"read","role":null,"#),
            taken[0].replace(r#"{"type":"text","#, r#"{"type":"text","type":"text","#),
            taken[0].replace(r#""isError":false,"#, r#""isError":false,"isError":false,"#),
        ] {
            assert!(!same_summary(&text), "{text}");
        }
        // In one piece: a line with a control character leaves every line to the strict
        // reading; the others are still read into their summaries.
        let mut piece = String::new();
        let mut bounds = Vec::new();
        for text in taken.iter().chain([&refused[0]]).chain(taken.iter()) {
            bounds.push((piece.len(), piece.len() + text.len()));
            piece.push_str(text);
            piece.push('\n');
        }
        let got = parse_many(piece.as_bytes(), &bounds, true);
        let ok: Vec<bool> = got.iter().map(Option::is_some).collect();
        assert_eq!(ok, [true, true, true, false, true, true, true]);
        assert!(!NO_CONTROL.with(std::cell::Cell::get));
        // The check itself, against the plain one, at every length and place.
        let mut gen = Gen(7);
        for len in 0..100 {
            for _ in 0..20 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| match gen.next() % 8 {
                        0 => (gen.next() % 0x20) as u8,
                        1 => 0x80 | (gen.next() % 0x80) as u8,
                        _ => 0x20 + (gen.next() % 0x60) as u8,
                    })
                    .collect();
                assert_eq!(
                    has_control(&bytes),
                    bytes.iter().any(|b| *b < 0x20),
                    "{bytes:?}"
                );
            }
        }
    }

    #[test]
    fn fast_and_value_paths_agree() {
        let lines = [
            json!({"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"hi","timestamp":1}}),
            json!({"type":"message","id":"a","parentId":"p","message":{"role":"user","content":[{"type":"text","text":"x\n\"y\""},{"type":"image","data":"AAAA","mimeType":"image/png"}]}}),
            json!({"type":"message","id":"b","parentId":"a","message":{"role":"assistant","content":[{"type":"thinking","thinking":"hm","thinkingSignature":"s"},{"type":"text","text":"ok","textSignature":"t"},{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a"}}],"api":"x","provider":"p","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0.1,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.1}},"stopReason":"toolUse","timestamp":2,"extra":{"k":[1,2]}}}),
            json!({"type":"message","id":"b","parentId":"a","message":{"role":"assistant","content":[],"stopReason":"stop"}}),
            json!({"type":"message","id":"b","parentId":"a","message":{"role":"assistant","content":[],"stopReason":"stop","provider":null}}),
            json!({"type":"message","id":"b","parentId":"a","message":{"role":"assistant","content":[],"stopReason":"bogus","provider":"p"}}),
            json!({"type":"message","id":"b","parentId":"a","message":{"role":"assistant","content":"text","stopReason":"stop","usage":{"input":"x"}}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"role":"toolResult","toolCallId":"c1","toolName":"read","content":"plain","isError":true,"details":{"d":1}}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"text":"type later","type":"text"}]}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"role":"toolResult","toolName":"read","content":[]}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"role":"toolResult","toolCallId":"c1","content":"no tool name"}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"content":"role later","role":"user"}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"role":"user","content":[{"type":"video"}]}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"role":"bashExecution","command":"ls","output":"","exitCode":1,"timestamp":3}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"role":"custom","customType":"x","content":"c","display":true}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"role":"compactionSummary","summary":"s"}}),
            json!({"type":"message","id":"r","parentId":"b","message":{"role":"somethingNew"}}),
            json!({"type":"message","id":"r","parentId":"b","message":{}}),
            json!({"type":"message","id":"r","parentId":"b","message":"not an object"}),
            json!({"type":"message","id":"r","parentId":"b"}),
            json!({"message":{"role":"user","content":"type later"},"type":"message","id":"x"}),
            json!({"type":"model_change","id":"m","parentId":null,"provider":"p","modelId":"m","message":{"role":"user"}}),
            json!({"type":"label","id":7,"parentId":["x"],"targetId":"a"}),
            json!({"id":"noType"}),
        ];
        for l in &lines {
            same(l);
        }
        // Lines as Pi writes them take the fast path.
        for l in &lines[..4] {
            assert!(parse_fast(&l.to_string()).is_some(), "{l}");
        }
        // A repeated tag is left to the Value path (which keeps the last one).
        let text = r#"{"type":"message","id":"d","message":{"role":"user","content":"a","role":"assistant"}}"#;
        assert!(parse_fast(text).is_none());
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            parse(text).unwrap().message.unwrap().role,
            str_of(&v["message"], "role")
        );
    }

    #[test]
    fn lines_parsed_in_one_pass_are_parsed_as_each_alone() {
        let user = |id: &str| {
            json!({"type":"message","id":id,"parentId":null,"message":{"role":"user","content":"a\nb \"q\"","timestamp":1}}).to_string()
        };
        let lines = [
            user("u1"),
            "\0\0\0".to_string(),
            user("u2"),
            r#"{"type":"label","id":"x","targetId":"u1"} trailing"#.to_string(),
            user("u3"),
            r#"{"type":"message","id":"s","#.to_string(),
            r#""parentId":null}"#.to_string(),
            user("u4"),
            "[1]".to_string(),
            r#"  {"type":"custom","id":"c","data":{"k":[1,{"a":null}]}}  "#.to_string(),
            user("u5"),
            "\u{c}".to_string(),
            user("u6"),
            r#"{"type":"message","id":"d","message":{"role":"user","content":"a","role":"assistant"}}"#.to_string(),
            user("u7"),
        ];
        let text = lines.join("\n");
        let mut bounds = Vec::new();
        let mut pos = 0;
        for l in &lines {
            if !l.bytes().all(|b| b.is_ascii_whitespace()) {
                bounds.push((pos, pos + l.len()));
            }
            pos += l.len() + 1;
        }
        let many = parse_many(text.as_bytes(), &bounds, false);
        assert_eq!(many.len(), bounds.len());
        let taken: Vec<bool> = many.iter().map(Option::is_some).collect();
        // Every line after a damaged one is taken again; only the line after a form feed
        // (blank to the loader, not JSON whitespace) is left to the line-by-line path.
        assert_eq!(
            taken,
            [
                true, false, true, false, true, false, false, true, false, true, true, false,
                false, true
            ]
        );
        // A piece that is not UTF-8 as a whole leaves every line to the line-by-line path.
        let mut bad = br#"{"type":"custom","id":"a"}"#.to_vec();
        let n = bad.len();
        bad.extend_from_slice(b"\n\xff\n");
        assert!(parse_many(&bad, &[(0, n), (n + 1, n + 2)], false)
            .iter()
            .all(Option::is_none));
        for (parts, &(s, e)) in many.into_iter().zip(&bounds) {
            let line = &text[s..e];
            let alone = parse_fast(line);
            match parts {
                Some(p) => assert_eq!(format!("{p:?}"), format!("{:?}", alone.unwrap()), "{line}"),
                None => assert!(
                    line.contains("u6") || alone.is_none(),
                    "left out but parses alone: {line}"
                ),
            }
        }
    }

    #[test]
    fn damaged_lines_do_not_parse() {
        for text in ["{\"type\":\"message\"", "[1]", "\"x\"", "{} x", "\0\0\0"] {
            assert!(parse(text).is_none(), "{text:?}");
        }
    }
}

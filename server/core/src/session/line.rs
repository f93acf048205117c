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

use pi_ai::{
    AssistantMessage, ContentBlock, ImageContent, Message, StopReason, TextContent,
    ThinkingContent, ToolCall, ToolResultMessage, Usage, UserContent, UserMessage,
};
use serde::de::value::{BorrowedStrDeserializer, MapAccessDeserializer, StringDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::tree::convert_message;

/// What the harness reads of an assistant message without parsing its line again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssistantInfo {
    /// `message.provider` when it is a string.
    pub provider: Option<String>,
    /// `message.model` when it is a string.
    pub model: Option<String>,
    /// `message.usage` when it reads as Pi's usage.
    pub usage: Option<Usage>,
}

/// The parts of one `message` entry's `message` object.
#[derive(Debug, Default)]
pub(crate) struct MessageParts {
    /// `role` when it is a string.
    pub role: Option<String>,
    /// What the model sees ([`super::convert_message`]); `None` when not model-visible.
    pub message: Option<Message>,
    /// For `role: "assistant"`.
    pub assistant: Option<AssistantInfo>,
    /// What a deferred load keeps instead of `message` ([`LineParts::summarize`]).
    pub summary: Option<MessageSummary>,
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
    pub calls: Box<[u64]>,
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
            calls: calls.into_boxed_slice(),
        }
    }
}

/// The XXH3 of a tool-call id, as [`MessageSummary`] keeps it.
pub(crate) fn call_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

impl LineParts {
    /// Replaces the model-visible message of a `message` entry by its [`MessageSummary`].
    pub(crate) fn summarize(&mut self) {
        if let Some(m) = self.message.as_mut() {
            m.summary = Some(MessageSummary::of(m.message.take().as_ref()));
        }
    }
}

/// The parts of one entry line.
#[derive(Debug, Default)]
pub(crate) struct LineParts {
    /// `type` when it is a string.
    pub kind: Option<String>,
    /// `id` when it is a string.
    pub id: Option<String>,
    /// `parentId` when it is a string.
    pub parent_id: Option<String>,
    /// For `message` entries (`None` otherwise).
    pub message: Option<MessageParts>,
}

fn str_of(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

/// The parts of a stored `message` object, from its `Value`; with `convert`, the model-visible
/// message too.
pub(crate) fn message_from_value(m: &Value, convert: bool) -> MessageParts {
    let role = str_of(m, "role");
    let assistant = (role.as_deref() == Some("assistant")).then(|| AssistantInfo {
        provider: str_of(m, "provider"),
        model: str_of(m, "model"),
        usage: m.get("usage").and_then(|u| Usage::deserialize(u).ok()),
    });
    MessageParts {
        role,
        message: if convert { convert_message(m) } else { None },
        assistant,
        summary: None,
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
    let parts = de.deserialize_map(LineVisitor).ok()?;
    de.end().ok()?;
    Some(parts)
}

/// [`parse_fast`] of the lines `buf[start..end]` of `lines` (non-blank, in order), in one pass
/// of one deserializer over `buf` (its buffer for strings with escapes is reused, not grown
/// again for each line): `None` for a line that needs [`parse_fast`] or the `Value` path on its
/// own (a damaged line, a line the fast path does not take, a value that does not end on its
/// line); the pass starts again at the next line.
pub(crate) fn parse_many(buf: &[u8], lines: &[(usize, usize)]) -> Vec<Option<LineParts>> {
    /// An entry line through [`LineVisitor`].
    struct Parts(LineParts);
    impl<'de> Deserialize<'de> for Parts {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Parts, D::Error> {
            d.deserialize_map(LineVisitor).map(Parts)
        }
    }
    // Valid UTF-8 as a whole (else each line is read on its own).
    let Ok(text) = std::str::from_utf8(buf) else {
        return lines.iter().map(|_| None).collect();
    };
    let json_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let mut out = Vec::with_capacity(lines.len());
    while let Some(&(start, _)) = lines.get(out.len()) {
        let Some(rest) = text.get(start..) else {
            out.resize_with(lines.len(), || None);
            break;
        };
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Parts>();
        while let Some(&(_, end)) = lines.get(out.len()) {
            let ok = match stream.next() {
                Some(Ok(Parts(parts))) => {
                    let at = start + stream.byte_offset();
                    (at <= end && buf[at..end].iter().all(json_space)).then_some(parts)
                }
                _ => None,
            };
            let restart = ok.is_none();
            out.push(ok);
            if restart {
                break;
            }
        }
    }
    out
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
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AnyStr {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(v))
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

struct LineVisitor;

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
                    out.message = Some(map.next_value_seed(MessageSeed)?)
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
            out.message.get_or_insert_with(MessageParts::default);
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
                let info = AssistantInfo {
                    provider: f.provider.clone(),
                    model: f.model.clone(),
                    usage: f.usage.clone(),
                };
                let m = Message::Assistant(AssistantMessage {
                    content: f.content,
                    api: f.api,
                    provider: f.provider.unwrap_or_default(),
                    model: f.model.unwrap_or_default(),
                    response_id: f.response_id,
                    response_model: f.response_model,
                    usage: f.usage.unwrap_or_default(),
                    stop_reason: f.stop_reason,
                    error_message: f.error_message,
                    timestamp: f.timestamp,
                });
                return Ok(MessageParts {
                    role: Some(role),
                    message: Some(m),
                    assistant: Some(info),
                    summary: None,
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
        Ok(MessageParts {
            role: Some(role),
            message: Some(message),
            assistant: None,
            summary: None,
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
    error_message: Option<String>,
    #[serde(default)]
    timestamp: i64,
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
                    data: f.data,
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
        let many = parse_many(text.as_bytes(), &bounds);
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
        assert!(parse_many(&bad, &[(0, n), (n + 1, n + 2)])
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

//! A conversation's previous request kept for its next one, for the `anthropic-messages` and
//! `openai-responses` adapters (the `openai-completions` adapter keeps its own,
//! [`super::openai_completions::request_bytes`], whose steps carry more state): the history
//! as given, its [`Transform`] state, the transformed history, the converted messages
//! serialised and where each conversion step ended in them, and the tool list's bytes. A tool
//! round then transforms, converts and serialises its new messages, not the whole history;
//! the bytes sent are those of the adapter's `build_request` serialised (each adapter's tests
//! compare them request after request).
//!
//! A *step boundary* is a transformed message where an adapter's conversion starts afresh:
//! the values before it depend only on the messages before it and the boundary message
//! itself, and converting from the boundary with no state gives the values after it. The
//! adapter says where they are (its `convert` calls `step(next, out)` at each one: `next` the
//! boundary's index, `out` how many values it had pushed before it).

use serde_json::Value;

use crate::models::Model;
use crate::transform::Transform;
use crate::types::{Message, ToolSpec};

/// What the previous request of a conversation left for the next ([`request_bytes`]). Memory:
/// about the history twice more and its serialised form once.
#[derive(Debug)]
pub(crate) struct Prefix {
    key: PrefixKey,
    /// The history of the last request, as given.
    input: Vec<Message>,
    /// The transform's state after `input`.
    transform: Transform,
    /// `input` transformed.
    msgs: Vec<Message>,
    /// The converted messages serialised, comma-separated, without brackets.
    bytes: Vec<u8>,
    /// Each step boundary: the index of its transformed message and `bytes.len()` before it.
    steps: Vec<(usize, usize)>,
    /// The last request's tool specs, what else shaped their value, and its bytes.
    tools: Option<ToolBytes>,
}

/// A request's tool list: its specs, the [`crate::StreamOptions::tools_generation`] they were
/// last given with, what else shaped their value, and its bytes.
#[derive(Debug)]
struct ToolBytes {
    specs: Vec<ToolSpec>,
    generation: u64,
    salt: Value,
    bytes: Vec<u8>,
}

/// The facts of a model that conversion reads (its wire format included: one slot serves a
/// conversation whichever adapter its model uses; chat completions keys its own cache with it
/// too, beside its `Compat`).
#[derive(Debug, PartialEq)]
pub(super) struct PrefixKey {
    api: crate::models::Api,
    provider: String,
    id: String,
    base_url: String,
    reasoning: bool,
    input: Vec<String>,
    compat: Value,
    /// The level and whether the key is an API key (`sk-…`): Responses answers replay their
    /// stored effort depending on both.
    thinking_level: Option<crate::models::ThinkingLevel>,
    api_key_sk: bool,
}

impl PrefixKey {
    pub(super) fn of(model: &Model) -> PrefixKey {
        PrefixKey {
            api: model.api,
            provider: model.provider.clone(),
            id: model.id.clone(),
            base_url: model.base_url.clone(),
            reasoning: model.reasoning,
            input: model.input.clone(),
            compat: model.compat.clone(),
            thinking_level: model.thinking_level,
            api_key_sk: api_key_sk(model),
        }
    }

    /// Whether this is [`PrefixKey::of`] `model`, compared in place (a request to the same
    /// model, the usual case, copies nothing).
    pub(super) fn is_of(&self, model: &Model) -> bool {
        self.api == model.api
            && self.provider == model.provider
            && self.id == model.id
            && self.base_url == model.base_url
            && self.reasoning == model.reasoning
            && self.input == model.input
            && self.compat == model.compat
            && self.thinking_level == model.thinking_level
            && self.api_key_sk == api_key_sk(model)
    }
}

/// Whether `model`'s key is an API key (`sk-…`; a ChatGPT sign-in's is not).
fn api_key_sk(model: &Model) -> bool {
    model
        .api_key
        .as_deref()
        .is_some_and(|k| k.starts_with("sk-"))
}

/// What [`request_bytes`] puts into a request besides its messages.
pub(crate) struct Shell<'a> {
    /// The body with an empty array under `list` and, when there are tools, an empty
    /// `"tools":[]`.
    pub body: Value,
    /// The key of the messages' array (`messages`, `input`).
    pub list: &'static str,
    /// A value that goes first in that array (the Responses system prompt).
    pub lead: Option<Value>,
    /// A value that goes last in that array (the Responses `configuration_update` item).
    pub trail: Option<Value>,
    /// The tool specs (empty: none) and what else shapes their value (compared with the
    /// previous request's before its bytes are reused).
    pub tools: &'a [ToolSpec],
    pub tools_salt: Value,
    /// [`crate::StreamOptions::tools_generation`]: the specs are not compared with the
    /// previous request's when both came with the same non-zero number.
    pub tools_generation: u64,
    /// [`crate::StreamOptions::history_kept`]: that many leading messages of the history are
    /// taken as the previous request's without comparing them.
    pub history_kept: usize,
}

/// The bytes of the request whose body is `shell.body` with the converted `history` under
/// `shell.list` (after `shell.lead`) and the tool list `tools_value()` under `tools`, the same
/// bytes as serialising that body whole, reusing what `slot` kept of the previous request
/// (see the module docs): when the previous history is a prefix of `history` (message by
/// message) and [`Transform::can_extend`] says its request view stays, only the new messages
/// are transformed, continuing its state; otherwise the whole history is, and the shared part
/// is the longest equal prefix of the two transformed histories. The kept bytes are cut back
/// to the last step boundary before the first difference, and `convert(msgs, start, out,
/// step)` converts the transformed messages from that boundary (`start`, or 0) onto `out`.
/// A different model starts over. `None` when the shell's empty arrays are not found (the
/// caller serialises the whole body).
pub(crate) fn request_bytes(
    slot: &std::sync::Mutex<Option<Prefix>>,
    model: &Model,
    history: &[Message],
    shell: Shell<'_>,
    tools_value: impl FnOnce() -> Value,
    convert: impl FnOnce(&[Message], usize, &mut Vec<Value>, &mut dyn FnMut(usize, usize)),
) -> Result<Option<Vec<u8>>, serde_json::Error> {
    let shell_bytes = serde_json::to_vec(&shell.body)?;
    let list = format!("\"{}\":[]", shell.list);
    let Some(list_at) = find(&shell_bytes, list.as_bytes(), 0) else {
        return Ok(None);
    };
    let list_at = list_at + list.len() - 1;
    const TOOLS: &[u8] = b"\"tools\":[]";
    let tools_at = if shell.tools.is_empty() {
        None
    } else {
        match find(&shell_bytes, TOOLS, list_at) {
            Some(at) => Some(at + TOOLS.len() - 1),
            None => return Ok(None),
        }
    };
    let mut guard = slot.lock().ok();
    let prior = guard
        .as_mut()
        .and_then(|s| s.take())
        .filter(|p| p.key.is_of(model));
    let (mut p, same) = match prior {
        Some(mut p)
            if p.input.len() <= history.len()
                && p.transform.can_extend(&history[p.input.len()..])
                && (p.input.len() <= shell.history_kept
                    || p.input[..] == history[..p.input.len()]) =>
        {
            let new = &history[p.input.len()..];
            let tail = p.transform.extend(model, new);
            p.input.extend_from_slice(new);
            let same = p.msgs.len();
            p.msgs.extend(tail);
            (p, same)
        }
        prior => {
            let mut transform = Transform::new(model);
            let msgs = transform.extend(model, history);
            let (key, same, bytes, steps, tools) = match prior {
                Some(p) => (
                    p.key,
                    p.msgs.iter().zip(&msgs).take_while(|(a, b)| a == b).count(),
                    p.bytes,
                    p.steps,
                    p.tools,
                ),
                None => (PrefixKey::of(model), 0, Vec::new(), Vec::new(), None),
            };
            let p = Prefix {
                key,
                input: history.to_vec(),
                transform,
                msgs,
                bytes,
                steps,
                tools,
            };
            (p, same)
        }
    };
    let start = match p.steps.iter().rposition(|s| s.0 < same) {
        Some(n) => {
            p.bytes.truncate(p.steps[n].1);
            p.steps.truncate(n + 1);
            p.steps[n].0
        }
        None => {
            p.bytes.clear();
            p.steps.clear();
            0
        }
    };
    let mut out = Vec::new();
    let mut new_steps = Vec::new();
    convert(&p.msgs, start, &mut out, &mut |next, n| {
        if next > start {
            new_steps.push((next, n));
        }
    });
    let base = p.bytes.len();
    let mut ends = Vec::with_capacity(out.len());
    // Each value is dropped once written: the converted messages (an image's data URL is
    // a copy of its base64) and their bytes are not all held at once (case SESS-05).
    for v in out.drain(..) {
        if !p.bytes.is_empty() {
            p.bytes.push(b',');
        }
        serde_json::to_writer(&mut p.bytes, &v)?;
        ends.push(p.bytes.len());
    }
    drop(out);
    for (next, n) in new_steps {
        let len = n.checked_sub(1).map_or(base, |k| ends[k]);
        p.steps.push((next, len));
    }
    let tools = match tools_at {
        None => None,
        Some(_) => Some(match p.tools.take() {
            Some(t)
                if t.salt == shell.tools_salt
                    && ((shell.tools_generation != 0
                        && t.generation == shell.tools_generation)
                        || t.specs == shell.tools) =>
            {
                ToolBytes {
                    generation: shell.tools_generation,
                    ..t
                }
            }
            _ => ToolBytes {
                bytes: serde_json::to_vec(&tools_value())?,
                specs: shell.tools.to_vec(),
                generation: shell.tools_generation,
                salt: shell.tools_salt,
            },
        }),
    };
    let lead = shell.lead.as_ref().map(serde_json::to_vec).transpose()?;
    let trail = shell.trail.as_ref().map(serde_json::to_vec).transpose()?;
    let tool_bytes = tools.as_ref().map_or(&[][..], |t| &t.bytes[..]);
    let mut body = Vec::with_capacity(
        shell_bytes.len()
            + p.bytes.len()
            + lead.as_ref().map_or(0, Vec::len)
            + trail.as_ref().map_or(0, |t| t.len() + 1)
            + tool_bytes.len(),
    );
    body.extend_from_slice(&shell_bytes[..list_at]);
    if let Some(lead) = &lead {
        body.extend_from_slice(lead);
        if !p.bytes.is_empty() {
            body.push(b',');
        }
    }
    body.extend_from_slice(&p.bytes);
    if let Some(trail) = &trail {
        if lead.is_some() || !p.bytes.is_empty() {
            body.push(b',');
        }
        body.extend_from_slice(trail);
    }
    match tools_at {
        Some(at) => {
            body.extend_from_slice(&shell_bytes[list_at..at]);
            // The tool list's bytes are a whole array: put in for the empty one.
            body.pop();
            body.extend_from_slice(tool_bytes);
            body.extend_from_slice(&shell_bytes[at + 1..]);
        }
        None => body.extend_from_slice(&shell_bytes[list_at..]),
    }
    p.tools = tools;
    if let Some(slot) = guard.as_mut() {
        **slot = Some(p);
    }
    Ok(Some(body))
}

/// Where `needle` first occurs in `hay` at or after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| at + from)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::openai_completions::RequestCache;
    use super::super::{anthropic_messages, openai_responses, StreamOptions};
    use crate::models::{Api, Model};
    use crate::types::{Context, Message, SystemMessage, ToolSpec};
    use serde_json::{json, Value};

    fn msg(v: Value) -> Message {
        serde_json::from_value(v).unwrap()
    }

    fn call(id: &str, api: &str, thinking: bool) -> Message {
        let mut content = vec![
            json!({"type":"text","text":format!("reading {id}")}),
            json!({"type":"toolCall","id":id,"name":"read","arguments":{"path":"small.txt"}}),
        ];
        if thinking {
            content.insert(
                0,
                json!({"type":"thinking","thinking":"let me see","thinkingSignature":"sig"}),
            );
        }
        msg(json!({"role":"assistant","content":content,
            "api":api,"provider":"mock","model":"mock-1",
            "usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,
                     "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},
            "stopReason":"toolUse","timestamp":1}))
    }

    fn result(id: &str, image: bool) -> Message {
        let mut content = vec![json!({"type":"text","text":format!("hello \"{id}\"\n")})];
        if image {
            content.push(json!({"type":"image","data":"aGk=","mimeType":"image/png"}));
        }
        msg(
            json!({"role":"toolResult","toolCallId":id,"toolName":"read","content":content,
                   "isError":false,"timestamp":2}),
        )
    }

    fn user(text: &str) -> Message {
        msg(json!({"role":"user","content":text,"timestamp":3}))
    }

    fn patch(section: &str) -> Message {
        Message::System(SystemMessage {
            content: String::new(),
            sections: vec![(section.into(), Some(format!("Rule {section}.")))],
        })
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                constrained_sampling: None,
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
            },
            ToolSpec {
                constrained_sampling: None,
                name: "ls".into(),
                description: "List".into(),
                parameters: json!({"type":"object","properties":{}}),
            },
        ]
    }

    fn model(api: Api) -> Model {
        let mut m = Model::new(api, "mock", "mock-1", "http://x/v1");
        m.input = vec!["text".into(), "image".into()];
        m
    }

    /// The request bytes of `context` for `m`, through the cache and built whole.
    fn both(m: &Model, context: &Context, cache: &RequestCache) -> (String, String) {
        let opts = StreamOptions::default();
        let (cached, whole) = match m.api {
            Api::AnthropicMessages => (
                anthropic_messages::request_bytes(m, context, &opts, cache).unwrap(),
                serde_json::to_vec(&anthropic_messages::build_request(m, context, &opts)).unwrap(),
            ),
            _ => (
                openai_responses::request_bytes(m, context, &opts, cache).unwrap(),
                serde_json::to_vec(&openai_responses::build_request(m, context, &opts)).unwrap(),
            ),
        };
        (
            String::from_utf8(cached).unwrap(),
            String::from_utf8(whole).unwrap(),
        )
    }

    /// Responses through the cache: the `configuration_update` item that ends the input
    /// (`compat.supportsMidConvoEffort`) and the `msg_pi_<n>` numbering after a user message
    /// of no content (not counted, as Pi 1.6) give the whole request's bytes at every
    /// round, with and without a system prompt.
    #[test]
    fn responses_trail_and_numbering_match_the_whole_request() {
        let mut m = model(Api::OpenaiResponses);
        m.reasoning = true;
        m.compat = json!({"supportsMidConvoEffort": true});
        m.thinking_level = Some(crate::models::ThinkingLevel::High);
        let answer = |t: &str| {
            msg(
                json!({"role":"assistant","content":[{"type":"text","text":t}],
                "api":"openai-responses","provider":"mock","model":"mock-1",
                "stopReason":"stop","timestamp":1}),
            )
        };
        let empty = msg(json!({"role":"user","content":[],"timestamp":3}));
        for prompt in ["You are a helper.", ""] {
            let cache = RequestCache::default();
            let mut h = vec![user("one")];
            for next in [
                answer("a"),
                empty.clone(),
                answer("b"),
                user("two"),
                answer("c"),
            ] {
                let context = Context {
                    system_prompt: prompt.into(),
                    messages: h.clone(),
                    tools: tools(),
                };
                let (cached, whole) = both(&m, &context, &cache);
                assert_eq!(cached, whole);
                h.push(next);
            }
            let context = Context {
                system_prompt: prompt.into(),
                messages: h,
                tools: Vec::new(),
            };
            let (cached, whole) = both(&m, &context, &cache);
            assert_eq!(cached, whole);
            let body: Value = serde_json::from_str(&whole).unwrap();
            let ids: Vec<&Value> = body["input"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|i| i.get("id"))
                .collect();
            assert_eq!(
                ids,
                [&json!("msg_pi_1"), &json!("msg_pi_2"), &json!("msg_pi_4")]
            );
            assert_eq!(
                (
                    body["input"].as_array().unwrap().last().unwrap(),
                    &body["reasoning"]
                ),
                (
                    &json!({"type":"configuration_update","reasoning":{"effort":"high"}}),
                    &json!({"effort":"medium","summary":"auto"})
                )
            );
        }
    }

    /// Replaces the first `from` in the kept message bytes by `to` (same length).
    fn mark(cache: &RequestCache, from: &[u8], to: &[u8]) {
        let mut slot = cache.steps.lock().unwrap();
        let bytes = &mut slot.as_mut().unwrap().bytes;
        let at = bytes.windows(from.len()).position(|w| w == from).unwrap();
        bytes[at..at + to.len()].copy_from_slice(to);
    }

    /// For both adapters: a history the caller vouches for ([`StreamOptions::history_kept`])
    /// and a tool list given with the previous request's [`StreamOptions::tools_generation`]
    /// are taken as that request's without comparing them (the kept copies, altered here
    /// behind the cache's back, stay so); without the vouch, or with another number, they are
    /// compared, found different and built again. The bytes are the whole request's each
    /// time.
    #[test]
    fn a_vouched_history_and_tool_list_are_taken_without_comparing_them() {
        for api in [Api::AnthropicMessages, Api::OpenaiResponses] {
            let m = model(api);
            let wire = api.as_str();
            let cache = RequestCache::default();
            let send = |messages: &[Message], kept: usize, generation: u64| {
                let context = Context {
                    system_prompt: "You are a helper.".into(),
                    messages: messages.to_vec(),
                    tools: tools(),
                };
                let opts = StreamOptions {
                    history_kept: kept,
                    tools_generation: generation,
                    ..StreamOptions::default()
                };
                let (cached, whole) = match api {
                    Api::AnthropicMessages => (
                        anthropic_messages::request_bytes(&m, &context, &opts, &cache).unwrap(),
                        serde_json::to_vec(&anthropic_messages::build_request(&m, &context, &opts))
                            .unwrap(),
                    ),
                    _ => (
                        openai_responses::request_bytes(&m, &context, &opts, &cache).unwrap(),
                        serde_json::to_vec(&openai_responses::build_request(&m, &context, &opts))
                            .unwrap(),
                    ),
                };
                assert_eq!(
                    String::from_utf8(cached).unwrap(),
                    String::from_utf8(whole).unwrap(),
                    "{wire}"
                );
            };
            let kept = || {
                let slot = cache.steps.lock().unwrap();
                let p = slot.as_ref().unwrap();
                let t = p.tools.as_ref().unwrap();
                (
                    p.input[0].clone(),
                    t.specs[0].description.clone(),
                    t.generation,
                )
            };
            let alter = || {
                let mut slot = cache.steps.lock().unwrap();
                let p = slot.as_mut().unwrap();
                p.input[0] = user("altered");
                p.tools.as_mut().unwrap().specs[0].description = "altered".into();
            };
            let mut h = vec![user("rounds please")];
            send(&h, 0, 3);
            alter();
            h.push(call("call_1", wire, false));
            h.push(result("call_1", false));
            send(&h, 1, 3);
            assert_eq!(
                kept(),
                (user("altered"), "altered".into(), 3),
                "{wire}: taken as sent"
            );
            h.push(call("call_2", wire, false));
            h.push(result("call_2", false));
            send(&h, 0, 4);
            assert_eq!(
                kept(),
                (user("rounds please"), "Read a file".into(), 4),
                "{wire}: compared and built again"
            );
            alter();
            send(&h, 0, 0);
            assert_eq!(
                kept(),
                (user("rounds please"), "Read a file".into(), 0),
                "{wire}: compared and built again"
            );
        }
    }

    /// For both adapters, every request of a conversation built through the cache is byte for
    /// byte the request built whole — tool rounds (with thinking, images, an unanswered call
    /// the transform answers, results merged into one user turn), system messages held back
    /// to the next assistant turn (Anthropic) or in place (Responses), the history replaced
    /// (compaction), the tool list and the prompt changed, the model and its API switched —
    /// and the shared part is reused (a mark put in the kept bytes is sent).
    #[test]
    fn cached_request_bytes_equal_the_whole_request() {
        for api in [Api::AnthropicMessages, Api::OpenaiResponses] {
            let m = model(api);
            let wire = api.as_str();
            let cache = RequestCache::default();
            let mut context = Context {
                system_prompt: "You are a helper.".into(),
                messages: vec![user("rounds please")],
                tools: tools(),
            };
            let check = |context: &Context, m: &Model| {
                let (cached, whole) = both(m, context, &cache);
                assert_eq!(cached, whole, "{wire}: {} messages", context.messages.len());
            };
            check(&context, &m);
            for k in 0..6 {
                let id = format!("call_{k}");
                context.messages.push(call(&id, wire, k % 2 == 1));
                check(&context, &m);
                context.messages.push(result(&id, k == 3));
                if k == 2 {
                    context.messages.push(patch("two"));
                }
                check(&context, &m);
            }
            // Two results in one run (one user turn for Anthropic), then a user message.
            context.messages.push(call("call_a", wire, false));
            context.messages.push(result("call_a", false));
            check(&context, &m);
            context.messages.push(result("call_a", true));
            check(&context, &m);
            context.messages.push(patch("three"));
            context.messages.push(user("and now?"));
            check(&context, &m);
            // Reuse: the kept bytes of the first turn are what the next request sends.
            mark(&cache, b"rounds please", b"ROUNDS PLEASE");
            context.messages.push(call("call_b", wire, false));
            context.messages.push(result("call_b", false));
            let (sent, _) = both(&m, &context, &cache);
            assert!(
                sent.contains("ROUNDS PLEASE") && !sent.contains("rounds please"),
                "{wire}: {sent}"
            );
            mark(&cache, b"ROUNDS PLEASE", b"rounds please");
            check(&context, &m);
            // The tool list is kept while unchanged: marked, the next request sends the mark.
            {
                let mut slot = cache.steps.lock().unwrap();
                let t = &mut slot.as_mut().unwrap().tools.as_mut().unwrap().bytes;
                let at = t.windows(4).position(|w| w == b"Read").unwrap();
                t[at..at + 4].copy_from_slice(b"READ");
            }
            context.messages.push(user("more"));
            let (sent, _) = both(&m, &context, &cache);
            assert!(sent.contains("READ a file"), "{wire}: {sent}");
            // Another tool list and prompt: built again.
            context.tools[0].description = "Read a file.".into();
            context.system_prompt = "You help.".into();
            check(&context, &m);
            context.tools.clear();
            check(&context, &m);
            context.system_prompt.clear();
            check(&context, &m);
            // Compaction: the history replaced from the start; then changed in its first turn.
            context.tools = tools();
            context.system_prompt = "You are a helper.".into();
            context.messages = vec![user("summary of the above"), call("call_c", wire, false)];
            check(&context, &m);
            context.messages.push(result("call_c", false));
            check(&context, &m);
            context.messages[0] = user("another summary");
            check(&context, &m);
            // A repeated call id (renamed in the request).
            context.messages.push(call("call_c", wire, false));
            context.messages.push(result("call_c", false));
            check(&context, &m);
            context.messages.clear();
            check(&context, &m);
            // Another model, then the other API, on the same cache.
            context.messages = vec![user("hi"), call("call_d", wire, true)];
            context.messages.push(result("call_d", false));
            let mut reasoning = m.clone();
            reasoning.reasoning = true;
            check(&context, &reasoning);
            let other = model(match api {
                Api::AnthropicMessages => Api::OpenaiResponses,
                _ => Api::AnthropicMessages,
            });
            check(&context, &other);
            check(&context, &m);
        }
    }
}

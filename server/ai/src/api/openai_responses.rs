//! The `openai-responses` wire format: `POST {baseUrl}/responses` with `stream: true`.
//!
//! Source of the shapes: OpenAI's Responses API streaming events (`response.created`,
//! `response.output_item.added|done`, `response.output_text.delta`,
//! `response.reasoning_summary_text.delta`, `response.function_call_arguments.delta|done`,
//! `response.completed`, `response.failed`, `error`) and Pi 0.73.1's
//! `openai-responses-shared.js` for how they map onto Pi's message: a tool call's id is stored
//! as `{call_id}|{item_id}`; a reasoning item is kept whole (JSON) as the thinking block's
//! signature and replayed verbatim to the same model; a message item's id is kept as the text
//! block's signature `{"v":1,"id":…}`.

use serde_json::{json, Value};

use super::lenient::{whole, Str, U64};
use super::{join_url, open_sse, read_chunk, CacheRetention, Chunk, StreamOptions};
use crate::errors::{classify_stream_error, ProviderError};
use crate::models::{Model, ThinkingLevel};
use crate::stream::MessageBuilder;
use crate::transform::transform_messages;
use crate::types::{
    ContentBlock, Context, ImageContent, Message, StopReason, ToolSpec, Usage, UserContent,
};

fn input_image(i: &ImageContent) -> Value {
    json!({"type":"input_image","detail":"auto","image_url":format!("data:{};base64,{}", i.mime_type, i.data)})
}

/// The item id kept in a text block's `textSignature` (`{"v":1,"id":…}` or a bare id).
fn text_item_id(sig: Option<&str>) -> Option<String> {
    let sig = sig?;
    if sig.starts_with('{') {
        if let Ok(v) = serde_json::from_str::<Value>(sig) {
            return v.get("id").and_then(Value::as_str).map(str::to_string);
        }
    }
    Some(sig.to_string())
}

/// The role of the system prompt and later system messages (Pi's `instructionRole`):
/// `developer` for a reasoning model unless `compat.supportsDeveloperRole` is false, else
/// `system`.
fn instruction_role(model: &Model) -> &'static str {
    let developer = model
        .compat
        .get("supportsDeveloperRole")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    if model.reasoning && developer {
        "developer"
    } else {
        "system"
    }
}

/// Converts provider-neutral messages to Responses `input` items (after the system one), after
/// [`transform_messages`]. A [`Message::System`] goes in place as an input message of the
/// instruction role with Pi 1.6's wording ([`crate::SystemMessage::update_text`]).
pub fn convert_messages(model: &Model, messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::new();
    convert_from(
        model,
        &transform_messages(messages, model),
        0,
        &mut out,
        &mut |_, _| {},
    );
    out
}

/// A reasoning item kept as a thinking block's signature (only one recorded by this API can
/// be replayed).
fn reasoning_item(signature: Option<&str>) -> Option<Value> {
    signature
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .filter(|v| v.get("type").and_then(Value::as_str) == Some("reasoning"))
}

/// Whether `m` numbers as a message in Pi 1.6's `convertResponsesMessages` (its `msgIndex`,
/// which names text items without an id `msg_pi_<index>`): a user message of no content and
/// an assistant message that sends no item are skipped without being counted.
fn numbered(m: &Message) -> bool {
    match m {
        Message::System(_) | Message::ToolResult(_) => true,
        Message::User(u) => match &u.content {
            UserContent::Text(_) => true,
            UserContent::Blocks(b) => b
                .iter()
                .any(|b| matches!(b, ContentBlock::Text(_) | ContentBlock::Image(_))),
        },
        Message::Assistant(a) => a.content.iter().any(|b| match b {
            ContentBlock::Text(_) | ContentBlock::ToolCall(_) => true,
            ContentBlock::Thinking(t) => reasoning_item(t.thinking_signature.as_deref()).is_some(),
            ContentBlock::Image(_) => false,
        }),
    }
}

/// The loop of [`convert_messages`] over already transformed `msgs` from `start`, pushing onto
/// `out`. Every message is a step boundary (its items depend on it and on how many messages
/// before it are [`numbered`]): `step(i, n)` tells each message `i` after `start` with the `n`
/// items pushed before it.
fn convert_from(
    model: &Model,
    msgs: &[Message],
    start: usize,
    out: &mut Vec<Value>,
    step: &mut dyn FnMut(usize, usize),
) {
    let takes_images = model.input.iter().any(|k| k == "image");
    // Pi 1.6: with a `configuration_update` effort, each answer of this model that stored one
    // gets its own before its items.
    let effort_updates = effort_updates(model);
    let mut index = msgs[..start.min(msgs.len())]
        .iter()
        .filter(|m| numbered(m))
        .count();
    for (at, m) in msgs.iter().enumerate().skip(start) {
        step(at, out.len());
        let before = out.len();
        match m {
            Message::System(s) => {
                let text = s.update_text();
                if !text.is_empty() {
                    out.push(json!({"role": instruction_role(model), "content": text}));
                }
            }
            Message::User(u) => {
                let content: Vec<Value> = match &u.content {
                    UserContent::Text(t) => vec![json!({"type":"input_text","text":t})],
                    UserContent::Blocks(b) => b
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) => {
                                Some(json!({"type":"input_text","text":t.text}))
                            }
                            ContentBlock::Image(i) => Some(input_image(i)),
                            _ => None,
                        })
                        .collect(),
                };
                if !content.is_empty() {
                    out.push(json!({"role":"user","content":content}));
                }
            }
            Message::Assistant(a) => {
                let mut texts = 0usize;
                let same_model =
                    a.provider == model.provider && a.api == model.api && a.model == model.id;
                for b in &a.content {
                    match b {
                        ContentBlock::Thinking(t) => {
                            if let Some(item) = reasoning_item(t.thinking_signature.as_deref()) {
                                out.push(item);
                            }
                        }
                        ContentBlock::Text(t) => {
                            let id = match text_item_id(t.text_signature.as_deref()) {
                                Some(id) if id.len() <= 64 => id,
                                Some(id) => format!("msg_{}", crate::transform::short_hash(&id)),
                                // Pi 1.6 uses `msg_pi_<message index>`, and for a later
                                // text block of the same message `msg_pi_<index>_<block>`.
                                None if texts == 0 => format!("msg_pi_{index}"),
                                None => format!("msg_pi_{index}_{texts}"),
                            };
                            texts += 1;
                            out.push(json!({"type":"message","role":"assistant",
                                "content":[{"type":"output_text","text":t.text,"annotations":[]}],
                                "status":"completed","id":id}));
                        }
                        ContentBlock::ToolCall(c) => {
                            let (call_id, item_id) = match c.id.split_once('|') {
                                Some((call, item)) => (call, Some(item)),
                                None => (c.id.as_str(), None),
                            };
                            let mut item = json!({"type":"function_call","call_id":call_id,
                                "name":c.name,"arguments":c.arguments.to_string()});
                            // An item id is only meaningful to the model that produced it.
                            if let Some(id) = item_id.filter(|i| same_model && i.starts_with("fc"))
                            {
                                item["id"] = json!(id);
                            }
                            out.push(item);
                        }
                        ContentBlock::Image(_) => {}
                    }
                }
                if let Some(effort) = a
                    .provider_thinking_level
                    .as_deref()
                    .map(String::as_str)
                    .filter(|_| effort_updates && same_model && out.len() > before)
                {
                    out.insert(
                        before,
                        json!({"type": "configuration_update", "reasoning": {"effort": effort}}),
                    );
                }
            }
            Message::ToolResult(r) => {
                let has_images = r
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Image(_)));
                let call_id = r.tool_call_id.split('|').next().unwrap_or_default();
                let output = if has_images && takes_images {
                    let mut parts = Vec::new();
                    let text = crate::types::join_text(&r.content);
                    if !text.trim().is_empty() {
                        parts.push(json!({"type":"input_text","text":text}));
                    }
                    parts.extend(r.content.iter().filter_map(|b| match b {
                        ContentBlock::Image(i) => Some(input_image(i)),
                        _ => None,
                    }));
                    Value::Array(parts)
                } else {
                    json!(super::tool_result_text(&r.content))
                };
                out.push(json!({"type":"function_call_output","call_id":call_id,"output":output}));
            }
        }
        // Pi 1.6 counts every message but a user or assistant one that sent nothing.
        if out.len() > before || matches!(m, Message::System(_) | Message::ToolResult(_)) {
            index += 1;
        }
    }
}

/// The request body for `context` (pure; no I/O), shaped like Pi's: `store: false`,
/// `prompt_cache_key` for a session ([`prompt_cache_key`]),
/// `max_output_tokens` (at least 16; none with `compat.supportsMaxOutputTokens: false`),
/// tools (`strict: false` only where the model supports strict mode), and the thinking level as
/// `reasoning.effort` (with `summary: "auto"` and encrypted reasoning included) or, for `off`,
/// the model's `off` value (`none` by default; nothing when the model maps `off` to null);
/// with `compat.supportsMidConvoEffort` the level goes as a last `configuration_update` input
/// item and `reasoning.effort` is `medium` ([`configuration_update_effort`]).
pub fn build_request(model: &Model, context: &Context, options: &StreamOptions) -> Value {
    let mut input = Vec::new();
    if let Some(system) = system_item(model, context) {
        input.push(system);
    }
    input.extend(convert_messages(model, &context.messages));
    input.extend(configuration_update(model));
    body_around(
        model,
        context,
        options,
        input,
        tools_value(&context.tools, supports_strict_mode(model)),
    )
}

/// The same bytes as `serde_json::to_vec(&build_request(model, context, options))`, reusing
/// what `cache` kept of the conversation's previous request ([`super::prefix`]): the items of
/// the history both requests share are not transformed, converted or serialised again, nor
/// the tool list while it is unchanged.
pub fn request_bytes(
    model: &Model,
    context: &Context,
    options: &StreamOptions,
    cache: &super::openai_completions::RequestCache,
) -> Result<Vec<u8>, serde_json::Error> {
    let shell = super::prefix::Shell {
        body: body_around(model, context, options, Vec::new(), json!([])),
        list: "input",
        lead: system_item(model, context),
        trail: configuration_update(model),
        tools: &context.tools,
        tools_salt: Value::Bool(supports_strict_mode(model)),
        tools_generation: options.tools_generation,
        history_kept: options.history_kept,
    };
    let bytes = super::prefix::request_bytes(
        &cache.steps,
        model,
        &context.messages,
        shell,
        || tools_value(&context.tools, supports_strict_mode(model)),
        |msgs, start, out, step| convert_from(model, msgs, start, out, step),
    )?;
    match bytes {
        Some(bytes) => Ok(bytes),
        None => serde_json::to_vec(&build_request(model, context, options)),
    }
}

/// The system prompt's input item, when there is a prompt.
fn system_item(model: &Model, context: &Context) -> Option<Value> {
    (!context.system_prompt.is_empty())
        .then(|| json!({"role":instruction_role(model),"content":context.system_prompt}))
}

/// Whether the model's tools carry `strict` (Pi 1.6's `supportsStrictMode` for this API:
/// `compat.supportsStrictMode`, false when unset; the catalogue's OpenAI models set it).
fn supports_strict_mode(model: &Model) -> bool {
    model
        .compat
        .get("supportsStrictMode")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The request's `tools`: each spec as a `function`, with `strict` only when `supported`
/// ([`supports_strict_mode`]; Pi 1.6's `convertResponsesTools`: a server that does not know
/// the field never sees it): `true` with the strict schema for a tool that asks for
/// JSON-schema sampling and has a strict form ([`super::strict::tool_parameters`]), else
/// `false`.
fn tools_value(tools: &[ToolSpec], supported: bool) -> Value {
    tools
        .iter()
        .map(|t| {
            let (parameters, strict) = super::strict::tool_parameters(t, supported, None);
            let mut f = json!({"type":"function","name":t.name,"description":t.description,
            "parameters":parameters});
            if supported {
                f["strict"] = Value::Bool(strict);
            }
            f
        })
        .collect()
}

/// The request body with `input`, and `tools` when there are tools.
fn body_around(
    model: &Model,
    context: &Context,
    options: &StreamOptions,
    input: Vec<Value>,
    tools: Value,
) -> Value {
    let mut body = json!({
        "model": model.id,
        "input": input,
        "stream": true,
        "store": false,
    });
    // Pi 1.6: none with `compat.supportsMaxOutputTokens: false` or a ChatGPT sign-in; at
    // least OpenAI's minimum of 16.
    if compat_flag(model, "supportsMaxOutputTokens", true) && !is_chatgpt_sign_in(model) {
        body["max_output_tokens"] = json!(options.output_tokens(model).max(16));
    }
    let retention = options.cache_retention();
    if let Some(key) = prompt_cache_key(model, retention, options.session_id.as_deref()) {
        body["prompt_cache_key"] = Value::String(key);
    }
    if !is_chatgpt_sign_in(model) {
        if let Some(r) = prompt_cache_retention(model, retention) {
            body["prompt_cache_retention"] = json!(r);
        }
        if let Some(o) = prompt_cache_options(model, retention) {
            body["prompt_cache_options"] = o;
        }
    }
    if !context.tools.is_empty() {
        body["tools"] = tools;
    }
    if let Some(level) = model.thinking_level.filter(|_| model.reasoning) {
        let level = model.clamp_thinking_level(level);
        if level == ThinkingLevel::Off {
            let off = model.thinking_level_map.as_ref().and_then(|m| m.get("off"));
            if !matches!(off, Some(Value::Null)) {
                body["reasoning"] =
                    json!({"effort": off.and_then(Value::as_str).unwrap_or("none")});
            }
        } else {
            let effort = match configuration_update_effort(model) {
                // The level travels in the `configuration_update` item; the request's own
                // effort stays fixed (Pi 1.6's `CONFIGURATION_UPDATE_REQUEST_EFFORT`).
                Some(_) => json!("medium"),
                None => mapped_effort(model, level),
            };
            body["reasoning"] = json!({"effort": effort, "summary": "auto"});
            body["include"] = json!(["reasoning.encrypted_content"]);
        }
    }
    // Pi 1.6's `resolveSamplingParams`: last, over the named fields.
    model.apply_sampling_params(&mut body);
    body
}

/// `thinkingLevelMap[level] ?? level`: the level's provider value, the level's name when the
/// map has none (or `null`).
fn mapped_effort(model: &Model, level: ThinkingLevel) -> Value {
    model
        .thinking_level_map
        .as_ref()
        .and_then(|m| m.get(level.as_str()))
        .filter(|v| !v.is_null())
        .cloned()
        .unwrap_or_else(|| json!(level.as_str()))
}

/// Pi 1.6's `getConfigurationUpdateEffort`: for a model with `compat.supportsMidConvoEffort`
/// asked to think (its level clamped, not `off`) and not signed in with ChatGPT, the level's
/// provider value ([`mapped_effort`]), which goes as a `configuration_update` input item at the
/// end of the input ([`configuration_update`]) while `reasoning.effort` stays `medium`.
fn configuration_update_effort(model: &Model) -> Option<Value> {
    if !compat_flag(model, "supportsMidConvoEffort", false) || is_chatgpt_sign_in(model) {
        return None;
    }
    let level = model.clamp_thinking_level(model.thinking_level?);
    (level != ThinkingLevel::Off).then(|| mapped_effort(model, level))
}

/// Whether answers that stored a `providerThinkingLevel` get their `configuration_update`
/// item before their own (a Responses model with [`configuration_update_effort`]).
fn effort_updates(model: &Model) -> bool {
    model.api == crate::models::Api::OpenaiResponses && configuration_update_effort(model).is_some()
}

/// The `configuration_update` input item Pi 1.6 ends the input with for a model with
/// [`configuration_update_effort`].
fn configuration_update(model: &Model) -> Option<Value> {
    configuration_update_effort(model)
        .map(|effort| json!({"type": "configuration_update", "reasoning": {"effort": effort}}))
}

/// Pi 1.6's `prompt_cache_key` limit, in characters (`OPENAI_PROMPT_CACHE_KEY_MAX_LENGTH`).
const PROMPT_CACHE_KEY_MAX_CHARS: usize = 64;

/// The request's `prompt_cache_key` (Pi 1.6's `buildParams`): the session id, cut to
/// [`PROMPT_CACHE_KEY_MAX_CHARS`] characters; `None` without a session id, with
/// `compat.promptCacheKeyMode` `"disabled"`, or for a request with [`CacheRetention::None`]
/// (summary requests).
fn prompt_cache_key(
    model: &Model,
    retention: CacheRetention,
    session_id: Option<&str>,
) -> Option<String> {
    let disabled = model
        .compat
        .get("promptCacheKeyMode")
        .and_then(Value::as_str)
        == Some("disabled")
        || retention == CacheRetention::None;
    session_id
        .filter(|_| !disabled)
        .map(|id| id.chars().take(PROMPT_CACHE_KEY_MAX_CHARS).collect())
}

/// A `compat` flag of the model, `default` when unset.
fn compat_flag(model: &Model, key: &str, default: bool) -> bool {
    model
        .compat
        .get(key)
        .and_then(Value::as_bool)
        .unwrap_or(default)
}

/// Pi 1.6's `isChatGPTSignIn`: provider `openai` at `https://api.openai.com/v1` with a key
/// that is not an API key (`sk-…`); such requests carry no `prompt_cache_retention` /
/// `prompt_cache_options`.
fn is_chatgpt_sign_in(model: &Model) -> bool {
    model.provider == "openai"
        && model.base_url == "https://api.openai.com/v1"
        && model
            .api_key
            .as_deref()
            .is_some_and(|k| !k.starts_with("sk-"))
}

/// Pi 1.6's `getPromptCacheRetention`: `"24h"` for [`CacheRetention::Long`] when the model's
/// `compat.supportsLongCacheRetention` (default true) and not
/// `compat.supportsExplicitPromptCacheMode` (default false).
fn prompt_cache_retention(model: &Model, retention: CacheRetention) -> Option<&'static str> {
    (retention == CacheRetention::Long
        && compat_flag(model, "supportsLongCacheRetention", true)
        && !compat_flag(model, "supportsExplicitPromptCacheMode", false))
    .then_some("24h")
}

/// Pi 1.6's `getPromptCacheOptions`, for a model with
/// `compat.supportsExplicitPromptCacheMode`: `{"mode":"explicit"}` for
/// [`CacheRetention::None`], `{"ttl":"30m"}` for [`CacheRetention::Long`] when
/// `compat.supportsLongCacheRetention` (default true); else nothing.
fn prompt_cache_options(model: &Model, retention: CacheRetention) -> Option<Value> {
    if !compat_flag(model, "supportsExplicitPromptCacheMode", false) {
        return None;
    }
    match retention {
        CacheRetention::None => Some(json!({"mode":"explicit"})),
        CacheRetention::Long if compat_flag(model, "supportsLongCacheRetention", true) => {
            Some(json!({"ttl":"30m"}))
        }
        CacheRetention::Long | CacheRetention::Short => None,
    }
}

/// The session headers Pi 1.6 adds for a session id (`createClient`): with the `openrouter`
/// session-affinity format `x-session-id`; otherwise `x-client-request-id`, and `session-id`
/// too with the `openai` format. The format is `compat.sessionAffinityFormat`, else
/// `openrouter` for OpenRouter (the provider, or its URL) and `openai` for the rest.
pub fn session_headers(model: &Model, session_id: &str) -> Vec<(String, String)> {
    let format = match model
        .compat
        .get("sessionAffinityFormat")
        .and_then(Value::as_str)
    {
        Some(f) => f,
        None if model.provider == "openrouter" || model.base_url.contains("openrouter.ai") => {
            "openrouter"
        }
        None => "openai",
    };
    let id = session_id.to_string();
    match format {
        "openrouter" => vec![("x-session-id".into(), id)],
        "openai" => vec![
            ("session-id".into(), id.clone()),
            ("x-client-request-id".into(), id),
        ],
        _ => vec![("x-client-request-id".into(), id)],
    }
}

/// The request headers: the key as a bearer, the model's own headers, then
/// [`session_headers`] for `session_id` (replacing a model header of the same name, as Pi's
/// do).
pub fn request_headers(model: &Model, session_id: Option<&str>) -> Vec<(String, String)> {
    let session = session_id
        .map(|id| session_headers(model, id))
        .unwrap_or_default();
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Some(k) = &model.api_key {
        headers.push(("authorization".into(), format!("Bearer {k}")));
    }
    headers.extend(
        model
            .headers
            .iter()
            .filter(|(k, _)| !session.iter().any(|(s, _)| s.eq_ignore_ascii_case(k)))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    headers.extend(session);
    headers
}

/// One streamed event, read borrowed ([`read_chunk`]): the fields [`stream_body`] reads, each
/// as `Value`'s accessors read it. What comes once per item or response (`item`, `response`) is
/// kept whole, boxed (see [`whole`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct StreamEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(borrow)]
    delta: Str<'a>,
    #[serde(borrow)]
    arguments: Str<'a>,
    output_index: U64,
    item: Option<Box<Value>>,
    response: Option<Box<Value>>,
    #[serde(borrow)]
    code: Str<'a>,
    #[serde(borrow)]
    message: Str<'a>,
}

/// Reads the stream into `b`: `Ok(Some(reason))` for a complete response, `Ok(None)` when the
/// consumer went away, `Err` for a failure (the partial content stays in `b`).
pub(super) async fn stream_body(
    request: super::Request<'_>,
    b: &mut MessageBuilder,
) -> Result<Option<StopReason>, ProviderError> {
    let (model, body, headers, cancel, timeout, endpoint) = request.parts();
    let url = join_url(&model.base_url, "responses");
    // Pi 1.6 stores the effort a `configuration_update` item told the model on the answer.
    if let Some(effort) = configuration_update_effort(model) {
        b.with_message(|m| {
            m.provider_thinking_level = effort.as_str().map(|e| Box::new(e.to_string()))
        });
    }
    let mut sse = open_sse(
        &crate::errors::HttpWording::Responses {
            provider: model.provider.clone(),
        },
        &url,
        endpoint,
        headers,
        body,
        cancel,
        timeout,
    )
    .await?;
    // The block the current output item streams into, and the argument text so far.
    let mut current: Option<String> = None;
    let mut args = String::new();
    let mut reason: Option<StopReason> = None;
    // Where an event read through its `Value` is written out again (rare: see `read_chunk`).
    let mut spill = String::new();
    while let Some(ev) = match sse.queued() {
        Some(ev) => Some(ev),
        None => sse.next(cancel, b).await?,
    } {
        let data: StreamEvent = match read_chunk(&ev, &mut spill)? {
            Some(Chunk::Read(d)) => d,
            // The format's end is `response.completed` / `response.incomplete`; some proxies
            // add `[DONE]` after it.
            Some(Chunk::Skip) | None => continue,
        };
        let kind = data.kind.as_str().unwrap_or(ev.event.as_str());
        let str_of =
            |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let delta = data.delta.as_str().unwrap_or("");
        let step = match kind {
            "response.created" => {
                let id = str_of(whole(&data.response), "id");
                b.with_message(|m| m.response_id = Some(id));
                Ok(())
            }
            "response.output_item.added" => {
                let item = whole(&data.item);
                let key = format!("o{}", data.output_index.0.unwrap_or(0));
                current = Some(key.clone());
                match item.get("type").and_then(Value::as_str) {
                    Some("reasoning") => b.thinking_delta(&key, "").await,
                    Some("message") => b.text_delta(&key, "").await,
                    Some("function_call") => {
                        let id = format!("{}|{}", str_of(item, "call_id"), str_of(item, "id"));
                        args = str_of(item, "arguments");
                        let r = b
                            .tool_call_start(&key, &id, &str_of(item, "name"), None)
                            .await;
                        if args.is_empty() {
                            r
                        } else {
                            let a = args.clone();
                            r.and(b.tool_call_delta(&key, &a).await)
                        }
                    }
                    _ => {
                        current = None;
                        Ok(())
                    }
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                match &current {
                    Some(k) if b.append_delta(k, true, delta) => Ok(()),
                    Some(k) => b.thinking_delta(k, delta).await,
                    None => Ok(()),
                }
            }
            "response.reasoning_summary_part.done" => match &current {
                Some(k) => b.thinking_delta(k, "\n\n").await,
                None => Ok(()),
            },
            "response.output_text.delta" | "response.refusal.delta" => match &current {
                Some(k) if b.append_delta(k, false, delta) => Ok(()),
                Some(k) => b.text_delta(k, delta).await,
                None => Ok(()),
            },
            "response.function_call_arguments.delta" => match &current {
                Some(k) => {
                    args.push_str(delta);
                    b.tool_call_delta(k, delta).await
                }
                None => Ok(()),
            },
            "response.function_call_arguments.done" => match &current {
                Some(k) => {
                    let full = data.arguments.as_str().unwrap_or("").to_string();
                    match full.strip_prefix(args.as_str()) {
                        Some(rest) if !rest.is_empty() => {
                            let rest = rest.to_string();
                            args = full;
                            b.tool_call_delta(k, &rest).await
                        }
                        _ => Ok(()),
                    }
                }
                None => Ok(()),
            },
            "response.output_item.done" => {
                let item = whole(&data.item);
                let key = current.take();
                match (key, item.get("type").and_then(Value::as_str)) {
                    (Some(k), Some("reasoning")) => {
                        let join = |field: &str| {
                            item[field]
                                .as_array()
                                .map(|parts| {
                                    parts
                                        .iter()
                                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                                        .collect::<Vec<_>>()
                                        .join("\n\n")
                                })
                                .unwrap_or_default()
                        };
                        let summary = join("summary");
                        let text = if summary.is_empty() {
                            join("content")
                        } else {
                            summary
                        };
                        b.settle_block(&k, Some(text), Some(item.to_string()));
                        b.end_block(&k).await
                    }
                    (Some(k), Some("message")) => {
                        let text: String = item["content"]
                            .as_array()
                            .map(|parts| {
                                parts
                                    .iter()
                                    .filter_map(|p| {
                                        p.get("text")
                                            .or_else(|| p.get("refusal"))
                                            .and_then(Value::as_str)
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        let mut sig = json!({"v":1,"id":str_of(item, "id")});
                        if let Some(phase) = item.get("phase").filter(|p| p.is_string()) {
                            sig["phase"] = phase.clone();
                        }
                        b.settle_block(&k, Some(text), Some(sig.to_string()));
                        b.end_block(&k).await
                    }
                    (Some(k), Some("function_call")) => {
                        let full = str_of(item, "arguments");
                        let r = match full.strip_prefix(args.as_str()) {
                            Some(rest) if !rest.is_empty() => {
                                let rest = rest.to_string();
                                b.tool_call_delta(&k, &rest).await
                            }
                            _ => Ok(()),
                        };
                        args.clear();
                        r.and(b.end_block(&k).await)
                    }
                    _ => Ok(()),
                }
            }
            "response.completed" | "response.incomplete" => {
                let resp = whole(&data.response);
                if let Some(id) = resp.get("id").and_then(Value::as_str) {
                    b.with_message(|m| m.response_id = Some(id.to_string()));
                }
                // Pi 1.6 (`openai-responses-shared.js` `finalizeResponse`): cached and
                // cache-write tokens are part of `input_tokens`; reasoning tokens part of
                // `output_tokens`; the cost computed whether or not usage came.
                let u = &resp["usage"];
                if u.is_object() {
                    let n = |v: &Value| v.as_u64().unwrap_or(0);
                    let cached = n(&u["input_tokens_details"]["cached_tokens"]);
                    let cache_write = n(&u["input_tokens_details"]["cache_write_tokens"]);
                    b.set_usage(Usage {
                        input: n(&u["input_tokens"]).saturating_sub(cached + cache_write),
                        output: n(&u["output_tokens"]),
                        cache_read: cached,
                        cache_write,
                        reasoning: Some(n(&u["output_tokens_details"]["reasoning_tokens"])),
                        ..Usage::default()
                    });
                } else {
                    b.with_message(|m| m.usage.cost.total_from_provider = Some(false));
                }
                // The provider's status, with the reason of an incomplete response.
                let status = resp.get("status").and_then(Value::as_str);
                let raw = match (status, resp["incomplete_details"]["reason"].as_str()) {
                    (Some(s), Some(why)) => Some(format!("{s}.{why}")),
                    (s, _) => s.map(str::to_string),
                };
                b.with_message(|m| m.raw_stop_reason = raw);
                reason = Some(match resp.get("status").and_then(Value::as_str) {
                    Some("incomplete") => StopReason::Length,
                    Some("failed") | Some("cancelled") => StopReason::Error,
                    _ => StopReason::Stop,
                });
                break;
            }
            "response.failed" => {
                let resp = whole(&data.response);
                let status = resp["status"].as_str().map(str::to_string);
                b.with_message(|m| m.raw_stop_reason = status);
                let e = &resp["error"];
                if e.is_object() {
                    return Err(classify_stream_error(
                        e.get("code").and_then(Value::as_str),
                        e.get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("no message"),
                    ));
                }
                let why = resp["incomplete_details"]["reason"]
                    .as_str()
                    .unwrap_or("unknown");
                return Err(ProviderError::Provider {
                    message: format!("incomplete: {why}"),
                });
            }
            "error" => {
                return Err(classify_stream_error(
                    data.code.as_str(),
                    data.message.as_str().unwrap_or("Unknown error"),
                ));
            }
            _ => Ok(()),
        };
        if step.is_err() {
            return Ok(None);
        }
    }
    match reason {
        Some(StopReason::Error) => Err(ProviderError::Provider {
            message: "response failed".into(),
        }),
        Some(StopReason::Stop) if b.has_tool_calls() => Ok(Some(StopReason::ToolUse)),
        Some(r) => Ok(Some(r)),
        // No `response.completed`: finished when what streamed is complete, else cut (STRM-04).
        None => super::end::judge(
            model,
            b,
            super::end::UnmarkedEnd {
                clean: sse.ended_cleanly(),
                ends_blocks: true,
                cut: "stream ended before the response was complete",
                empty: "stream ended before the response was complete",
            },
        )
        .map(Some),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::openai_completions::RequestCache;
    use crate::types::SystemMessage;

    /// The openai-responses model `p/m` at an unreachable loopback address, as each test here
    /// starts from.
    fn test_model() -> Model {
        Model::new(
            crate::Api::OpenaiResponses,
            "p",
            "m",
            "http://127.0.0.1:1/v1",
        )
    }

    /// The request `model` sends for `ctx` with `opts`, as a `Value`; asserts first that the
    /// request bytes built through `cache` (a conversation's cache, kept between calls) are
    /// that same request.
    fn sent_request(
        model: &Model,
        ctx: &Context,
        opts: &StreamOptions,
        cache: &RequestCache,
    ) -> Value {
        let cached = request_bytes(model, ctx, opts, cache).unwrap();
        let whole = build_request(model, ctx, opts);
        assert_eq!(serde_json::from_slice::<Value>(&cached).unwrap(), whole);
        whole
    }

    /// Each field the stream reads, read borrowed, equals what the `Value` reading gives
    /// (escapes, a duplicated key, a lone surrogate, `null` and ill-typed fields).
    #[test]
    fn events_read_borrowed_as_their_value_reads_them() {
        for data in [
            r#"{"type":"response.output_text.delta","delta":"a\nb","output_index":0}"#,
            r#"{"type":"response.output_text.delta","delta":"x","delta":"y"}"#,
            r#"{"type":"response.reasoning_text.delta","delta":"\ud800z"}"#,
            r#"{"type":"response.output_item.added","output_index":2,"item":{"type":"function_call","call_id":"c","id":"i","name":"n","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.done","arguments":"{\"a\":1}"}"#,
            r#"{"type":"response.completed","response":{"id":"r","status":"completed","usage":{"input_tokens":3}}}"#,
            r#"{"type":"error","code":"rate_limit","message":"slow down"}"#,
            r#"{"type":null,"delta":7,"output_index":-2,"item":null,"response":"x","code":[1]}"#,
        ] {
            let ev = crate::api::Event {
                data: data.into(),
                ..Default::default()
            };
            let v = crate::json::parse_lossy(data).unwrap();
            let mut spill = String::new();
            let Some(Chunk::Read(e)) = read_chunk::<StreamEvent>(&ev, &mut spill).unwrap() else {
                panic!("not read: {data}");
            };
            let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
            let got = (
                [&e.kind, &e.delta, &e.arguments, &e.code, &e.message]
                    .map(|s| s.as_str().map(str::to_string)),
                e.output_index.0,
                [whole(&e.item), whole(&e.response)].map(Value::clone),
            );
            let want = (
                ["type", "delta", "arguments", "code", "message"].map(field),
                v["output_index"].as_u64(),
                [&v["item"], &v["response"]].map(Value::clone),
            );
            assert_eq!(got, want, "{data}");
        }
    }

    /// A later system message goes in place as an input message of the instruction role, in
    /// Pi 1.6's wording; the leading prompt stays the request's first item.
    #[test]
    fn later_system_messages_go_in_place_with_the_instruction_role() {
        let mut model = test_model();
        let patch = Message::System(SystemMessage {
            content: String::new(),
            sections: vec![
                ("rules".into(), Some("Be brief.".into())),
                ("old".into(), None),
            ],
        });
        let ctx = Context {
            system_prompt: "Lead.".into(),
            messages: vec![Message::user_text("hi"), patch],
            tools: Vec::new(),
        };
        let text = "Updated system prompt section \"rules\":\n\nBe brief.\n\nRemoved system prompt section \"old\".";
        let input =
            |model: &Model| build_request(model, &ctx, &StreamOptions::default())["input"].clone();
        assert_eq!(
            input(&model),
            json!([
                {"role": "system", "content": "Lead."},
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"role": "system", "content": text}
            ])
        );
        model.reasoning = true;
        assert_eq!(
            input(&model)[2],
            json!({"role": "developer", "content": text})
        );
        model.compat = json!({"supportsDeveloperRole": false});
        assert_eq!(
            input(&model)[0],
            json!({"role": "system", "content": "Lead."})
        );
        assert_eq!(input(&model)[2], json!({"role": "system", "content": text}));
    }

    /// The session id as Pi 1.6 sends it: `prompt_cache_key` cut to 64 characters, none with
    /// `compat.promptCacheKeyMode: "disabled"`; session headers per affinity format, replacing
    /// a model header of the same name.
    #[test]
    fn session_id_as_prompt_cache_key_and_headers() {
        let mut model = test_model();
        let long: String = "é".repeat(70);
        let short = CacheRetention::Short;
        assert_eq!(
            prompt_cache_key(&model, short, Some(&long)),
            Some("é".repeat(64))
        );
        assert_eq!(prompt_cache_key(&model, short, None), None);
        assert_eq!(
            prompt_cache_key(&model, CacheRetention::None, Some("s1")),
            None
        );
        model.api_key = Some("k".into());
        model
            .headers
            .insert("Session-Id".into(), "from-models-json".into());
        model.headers.insert("x-extra".into(), "1".into());
        assert_eq!(
            request_headers(&model, Some("s1")),
            vec![
                ("authorization".to_string(), "Bearer k".to_string()),
                ("x-extra".into(), "1".into()),
                ("session-id".into(), "s1".into()),
                ("x-client-request-id".into(), "s1".into()),
            ]
        );
        assert_eq!(
            request_headers(&model, None)[1],
            ("Session-Id".to_string(), "from-models-json".to_string())
        );
        model.compat = json!({"promptCacheKeyMode": "disabled", "sessionAffinityFormat": "other"});
        assert_eq!(prompt_cache_key(&model, short, Some("s1")), None);
        assert_eq!(
            session_headers(&model, "s1"),
            vec![("x-client-request-id".to_string(), "s1".to_string())]
        );
        model.compat = json!({});
        model.base_url = "https://openrouter.ai/api/v1".into();
        assert_eq!(
            session_headers(&model, "s1"),
            vec![("x-session-id".to_string(), "s1".to_string())]
        );
    }

    /// Pi 1.6's prompt-cache fields per retention, each body compared whole: `short` the
    /// session's `prompt_cache_key` only; `long` also `prompt_cache_retention: "24h"` (not
    /// where the server does not keep it, nor for a ChatGPT sign-in); `none` neither; with
    /// `compat.supportsExplicitPromptCacheMode`, `prompt_cache_options` instead of the
    /// retention (`{"mode":"explicit"}` for `none`, `{"ttl":"30m"}` for `long`).
    #[test]
    fn prompt_cache_fields_follow_the_requests_retention() {
        let mut model = test_model();
        let ctx = Context {
            system_prompt: String::new(),
            messages: vec![Message::user_text("hi")],
            tools: Vec::new(),
        };
        let cache = RequestCache::default();
        let sent = |model: &Model, retention: CacheRetention| -> Value {
            let opts = StreamOptions {
                session_id: Some("s1".into()),
                cache_retention: Some(retention),
                ..StreamOptions::default()
            };
            sent_request(model, &ctx, &opts, &cache)
        };
        let max = model.default_max_tokens();
        let body = |extra: Value| {
            let mut b = json!({
                "model": "m",
                "input": [{"role":"user","content":[{"type":"input_text","text":"hi"}]}],
                "stream": true,
                "store": false,
                "max_output_tokens": max,
            });
            for (k, v) in extra.as_object().unwrap() {
                b[k] = v.clone();
            }
            b
        };
        use CacheRetention::{Long, None as NoCache, Short};
        assert_eq!(sent(&model, Short), body(json!({"prompt_cache_key": "s1"})));
        assert_eq!(
            sent(&model, Long),
            body(json!({"prompt_cache_key": "s1", "prompt_cache_retention": "24h"}))
        );
        assert_eq!(sent(&model, NoCache), body(json!({})));
        model.compat = json!({"supportsLongCacheRetention": false});
        assert_eq!(sent(&model, Long), body(json!({"prompt_cache_key": "s1"})));
        model.compat = json!({"supportsExplicitPromptCacheMode": true});
        assert_eq!(
            sent(&model, Long),
            body(json!({"prompt_cache_key": "s1", "prompt_cache_options": {"ttl": "30m"}}))
        );
        assert_eq!(
            sent(&model, NoCache),
            body(json!({"prompt_cache_options": {"mode": "explicit"}}))
        );
        model.compat = json!({});
        model.provider = "openai".into();
        model.base_url = "https://api.openai.com/v1".into();
        model.api_key = Some("oauth-token".into());
        // A ChatGPT sign-in's request has no `max_output_tokens` either (Pi 1.6's
        // `omitUnsupportedFields`).
        let mut signed_in = body(json!({"prompt_cache_key": "s1"}));
        signed_in
            .as_object_mut()
            .unwrap()
            .remove("max_output_tokens");
        assert_eq!(sent(&model, Long), signed_in);
    }

    /// Tools carry `strict: false` only for a model with `compat.supportsStrictMode` (the
    /// catalogue's OpenAI models), as Pi 1.6.0 sends them (checked against the real Pi on a
    /// loopback server: a models.json model's tools have no `strict`); the cached request
    /// bytes follow a change of the flag between two requests of one conversation.
    #[test]
    fn tools_are_strict_only_where_the_model_supports_it() {
        let mut model = test_model();
        let ctx = Context {
            system_prompt: "Lead.".into(),
            messages: vec![Message::user_text("hi")],
            tools: vec![ToolSpec {
                constrained_sampling: None,
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
            }],
        };
        let opts = StreamOptions::default();
        let cache = RequestCache::default();
        let sent = |model: &Model| sent_request(model, &ctx, &opts, &cache)["tools"].clone();
        let tool = json!({"type":"function","name":"read","description":"Read a file",
            "parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}});
        assert_eq!(sent(&model), json!([tool]));
        model.compat = json!({"supportsStrictMode": true});
        let mut strict = tool.clone();
        strict["strict"] = json!(false);
        assert_eq!(sent(&model), json!([strict]));
        model.compat = json!({"supportsStrictMode": false});
        assert_eq!(sent(&model), json!([tool]));
    }
}

//! The `anthropic-messages` wire format: `POST {baseUrl}/v1/messages` with `stream: true`.
//!
//! Source of the shapes: Anthropic's Messages API streaming reference (events `message_start`,
//! `content_block_start|delta|stop`, `message_delta`, `message_stop`, `ping`, `error`). Tool
//! results travel as `tool_result` blocks in a user turn; consecutive user-role messages are
//! merged (results first) because the API needs strict alternation (case PAIR-05).

use serde_json::{json, Value};

use super::lenient::{whole, Obj, Str, U64};
use super::{open_sse, read_chunk, CacheRetention, Chunk, StreamOptions};
use crate::errors::{classify_stream_error, ProviderError};
use crate::models::{Model, ThinkingLevel};
use crate::stream::MessageBuilder;
use crate::transform::transform_messages;
use crate::types::{ContentBlock, Context, Message, StopReason, ToolSpec, Usage, UserContent};

/// The `anthropic-version` header value sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Beta flags sent with an OAuth token (`sk-ant-oat…`), as Pi does.
const OAUTH_BETAS: &str = "claude-code-20250219,oauth-2025-04-20";

/// Pi 1.6's `getCacheControl`: the request's `cache_control` value for its
/// [`StreamOptions::cache_retention`] — none for [`CacheRetention::None`] (the request carries
/// no mark at all: summary requests), ephemeral otherwise, with a 1 h `ttl` for
/// [`CacheRetention::Long`] unless the model's `compat.supportsLongCacheRetention` is false.
fn cache_control(model: &Model, options: &StreamOptions) -> Option<Value> {
    match options.cache_retention() {
        CacheRetention::None => None,
        CacheRetention::Long
            if model
                .compat
                .get("supportsLongCacheRetention")
                .and_then(Value::as_bool)
                .unwrap_or(true) =>
        {
            Some(json!({"type":"ephemeral","ttl":"1h"}))
        }
        CacheRetention::Long | CacheRetention::Short => Some(json!({"type":"ephemeral"})),
    }
}

/// `compat.allowEmptySignature` (Pi 1.6's `getAnthropicCompat`, default false).
fn allow_empty_signature(model: &Model) -> bool {
    model.compat.get("allowEmptySignature") == Some(&Value::Bool(true))
}

fn image(i: &crate::types::ImageContent) -> Value {
    json!({"type":"image","source":{"type":"base64","media_type":i.mime_type,"data":&*i.data}})
}

fn user_blocks(content: &UserContent) -> Vec<Value> {
    match content {
        UserContent::Text(t) if t.trim().is_empty() => Vec::new(),
        UserContent::Text(t) => vec![json!({"type":"text","text":t})],
        UserContent::Blocks(b) => b
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) if t.text.trim().is_empty() => None,
                ContentBlock::Text(t) => Some(json!({"type":"text","text":t.text})),
                ContentBlock::Image(i) => Some(image(i)),
                _ => None,
            })
            .collect(),
    }
}

/// A tool result's `content`: a string when it is text only, else text and image blocks
/// (a lone image gets Pi's "(see attached image)" text first).
fn result_content(blocks: &[ContentBlock]) -> Value {
    if !blocks.iter().any(|b| matches!(b, ContentBlock::Image(_))) {
        return Value::String(crate::types::join_text(blocks));
    }
    let mut out: Vec<Value> = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(json!({"type":"text","text":t.text})),
            ContentBlock::Image(i) => Some(image(i)),
            _ => None,
        })
        .collect();
    if !blocks.iter().any(|b| matches!(b, ContentBlock::Text(_))) {
        out.insert(0, json!({"type":"text","text":"(see attached image)"}));
    }
    Value::Array(out)
}

/// One assistant block as Pi 1.6's `convertMessages` sends it. Thinking with a signature goes
/// as thinking (even when its text is empty); thinking without one (an aborted stream's) goes
/// as text, or with `allow_empty_signature` (`compat.allowEmptySignature`) as thinking with
/// `"signature": ""`; without text or signature it is left out.
fn assistant_block(b: &ContentBlock, allow_empty_signature: bool) -> Option<Value> {
    match b {
        ContentBlock::Text(t) if t.text.trim().is_empty() => None,
        ContentBlock::Text(t) => Some(json!({"type":"text","text":t.text})),
        ContentBlock::Thinking(t) if t.redacted => Some(
            json!({"type":"redacted_thinking","data":t.thinking_signature.as_deref().unwrap_or("")}),
        ),
        ContentBlock::Thinking(t) => match t.thinking_signature.as_deref() {
            Some(sig) if !sig.trim().is_empty() => {
                Some(json!({"type":"thinking","thinking":t.thinking,"signature":sig}))
            }
            _ if t.thinking.trim().is_empty() => None,
            _ if allow_empty_signature => {
                Some(json!({"type":"thinking","thinking":t.thinking,"signature":""}))
            }
            // Thinking without a signature cannot be replayed as thinking: send it as text.
            _ => Some(json!({"type":"text","text":t.thinking})),
        },
        ContentBlock::ToolCall(c) => {
            Some(json!({"type":"tool_use","id":c.id,"name":c.name,"input":c.arguments}))
        }
        ContentBlock::Image(_) => None,
    }
}

/// Converts provider-neutral messages to Anthropic `messages` for `model`, after
/// [`transform_messages`]: tool results go as `tool_result` blocks in a user turn, and
/// consecutive user-role turns are merged (results first) for strict alternation (PAIR-05).
/// With `cache` the last block of the last user turn gets `cache_control` (Pi).
///
/// A [`Message::System`] goes as a `system`-role message of one text block (Pi 1.6's
/// wording, [`crate::SystemMessage::update_text`]), held back until just before the next
/// assistant message sent (or the end), as Pi 1.6 does: Anthropic wants `tool_result` blocks
/// right after their `tool_use`.
pub fn convert_messages(model: &Model, messages: &[Message], cache: Option<&Value>) -> Vec<Value> {
    let mut out = Vec::new();
    convert_from(
        &transform_messages(messages, model),
        0,
        cache,
        allow_empty_signature(model),
        &mut out,
        &mut |_, _| {},
    );
    out
}

/// The loop of [`convert_messages`] over already transformed `msgs` from `start` (0 or a step
/// boundary), pushing onto `out`. A step boundary is an assistant message that sends blocks:
/// the turns before it are whole there (no later result merges into them, no held-back
/// system message follows them, and they are not the last turn, which alone gets the cache
/// mark); `step(i, n)` tells each boundary `i` after `start` with the `n` turns pushed before
/// it.
fn convert_from(
    msgs: &[Message],
    start: usize,
    cache: Option<&Value>,
    allow_empty_signature: bool,
    values: &mut Vec<Value>,
    step: &mut dyn FnMut(usize, usize),
) {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut pending: Vec<Vec<Value>> = Vec::new();
    for (i, m) in msgs.iter().enumerate().skip(start) {
        let (role, blocks) = match m {
            Message::System(s) => {
                let text = s.update_text();
                if !text.is_empty() {
                    pending.push(vec![json!({"type":"text","text":text})]);
                }
                continue;
            }
            Message::User(u) => ("user", user_blocks(&u.content)),
            Message::Assistant(a) => (
                "assistant",
                a.content
                    .iter()
                    .filter_map(|b| assistant_block(b, allow_empty_signature))
                    .collect(),
            ),
            Message::ToolResult(r) => (
                "user",
                vec![json!({"type":"tool_result","tool_use_id":r.tool_call_id,
                    "content":result_content(&r.content),"is_error":r.is_error})],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        if role == "assistant" {
            out.extend(pending.drain(..).map(|b| ("system", b)));
            step(i, out.len());
        }
        match out.last_mut() {
            Some((last, prev)) if *last == role && role == "user" => prev.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.extend(pending.drain(..).map(|b| ("system", b)));
    if let (Some(cc), Some(("user" | "system", blocks))) = (cache, out.last_mut()) {
        if let Some(last) = blocks.last_mut() {
            last["cache_control"] = cc.clone();
        }
    }
    values.extend(
        out.into_iter()
            .map(|(role, content)| json!({"role": role, "content": content})),
    );
}

/// The first system block Pi sends with an OAuth token.
const OAUTH_IDENTITY: &str = "You are Claude Code, Anthropic's official CLI for Claude.";

/// Whether `model` thinks adaptively: Pi 1.6's `compat.forceAdaptiveThinking === true`
/// (`streamSimple` in pi-ai's `anthropic-messages.js`), set by the catalogue for the models
/// that have it; a models.json model without the flag thinks with a budget, whatever its id
/// (Pi 1.6.0 sends a custom `claude-opus-4-6` budget thinking).
fn is_adaptive(model: &Model) -> bool {
    model.compat.get("forceAdaptiveThinking") == Some(&Value::Bool(true))
}

/// Whether a request for `model` asks for thinking: a reasoning model whose level, clamped
/// to what the model has, is not `off` (Pi's `thinkingEnabled`).
fn thinking_enabled(model: &Model) -> bool {
    model
        .thinking_level
        .filter(|_| model.reasoning)
        .is_some_and(|level| model.clamp_thinking_level(level) != ThinkingLevel::Off)
}

/// Maps the model's thinking level onto the request (Pi `streamSimpleAnthropic`): `off` →
/// `thinking: {type: disabled}`; adaptive models (`compat.forceAdaptiveThinking`) →
/// `thinking: {type: adaptive}` plus `output_config.effort` (minimal/low → low, medium, high;
/// `xhigh` / `max` as `thinkingLevelMap` names them, else high: Pi's
/// `mapThinkingLevelToEffort`);
/// older models → `thinking: {type: enabled, budget_tokens}` (the level's budget of
/// [`Model::thinking_budgets`], settings `thinkingBudgets`) with `max_tokens` raised by the
/// budget (capped at the model's limit, keeping 1,024 tokens of output; a budget cut to 0
/// goes as 1,024, Pi's `thinkingBudgetTokens || 1024`).
fn apply_thinking(model: &Model, options: &StreamOptions, body: &mut Value) {
    let Some(level) = model.thinking_level.filter(|_| model.reasoning) else {
        return;
    };
    let level = model.clamp_thinking_level(level);
    if level == ThinkingLevel::Off {
        body["thinking"] = json!({"type":"disabled"});
        return;
    }
    if is_adaptive(model) {
        let effort = model.mapped_thinking_value(level).unwrap_or_else(|| {
            match level {
                ThinkingLevel::Minimal | ThinkingLevel::Low => "low",
                ThinkingLevel::Medium => "medium",
                _ => "high",
            }
            .to_string()
        });
        body["thinking"] = json!({"type":"adaptive","display":"summarized"});
        body["output_config"] = json!({"effort": effort});
        return;
    }
    let base = options.output_tokens(model);
    let mut budget = model.thinking_budgets.for_level(level);
    let mut max_tokens = (base + budget).min(model.max_tokens.max(1));
    if let Some(room) = options.output_room {
        max_tokens = max_tokens.min(room);
    }
    if max_tokens <= budget {
        budget = max_tokens.saturating_sub(1_024);
    }
    // Pi 1.6 sends `thinkingBudgetTokens || 1024`: a budget cut to nothing asks for 1,024.
    if budget == 0 {
        budget = 1_024;
    }
    body["max_tokens"] = json!(max_tokens);
    body["thinking"] = json!({"type":"enabled","budget_tokens":budget,"display":"summarized"});
}

/// True for an Anthropic OAuth token (Claude subscription), which authenticates as a bearer.
pub fn is_oauth_token(key: &str) -> bool {
    key.contains("sk-ant-oat")
}

/// The request body for `context` (pure; no I/O). As Pi: `cache_control` ([`cache_control`],
/// none with [`CacheRetention::None`]) on the system prompt, the last tool and the last user
/// block; tools with `eager_input_streaming` unless `compat.supportsEagerToolInputStreaming`
/// is false; schemas reduced to `{type, properties, required}`.
pub fn build_request(model: &Model, context: &Context, options: &StreamOptions) -> Value {
    let cc = cache_control(model, options);
    let messages = convert_messages(model, &context.messages, cc.as_ref());
    let mut body = body_around(model, context, options, cc.as_ref(), messages);
    if !context.tools.is_empty() {
        body["tools"] = tools_value(model, &context.tools, cc.as_ref());
    }
    body
}

/// The same bytes as `serde_json::to_vec(&build_request(model, context, options))`, reusing
/// what `cache` kept of the conversation's previous request ([`super::prefix`]): the turns of
/// the history both requests share are not transformed, converted or serialised again, nor
/// the tool list while it is unchanged.
pub fn request_bytes(
    model: &Model,
    context: &Context,
    options: &StreamOptions,
    cache: &super::openai_completions::RequestCache,
) -> Result<Vec<u8>, serde_json::Error> {
    let cc = cache_control(model, options);
    let allow_empty = allow_empty_signature(model);
    let mut body = body_around(model, context, options, cc.as_ref(), Vec::new());
    if !context.tools.is_empty() {
        body["tools"] = json!([]);
    }
    let shell = super::prefix::Shell {
        body,
        list: "messages",
        lead: None,
        trail: None,
        tools: &context.tools,
        // The tool list's bytes hold the mark: kept only for the same one (`null`: none).
        tools_salt: cc.clone().unwrap_or(Value::Null),
        tools_generation: options.tools_generation,
        history_kept: options.history_kept,
    };
    let bytes = super::prefix::request_bytes(
        &cache.steps,
        model,
        &context.messages,
        shell,
        || tools_value(model, &context.tools, cc.as_ref()),
        |msgs, start, out, step| convert_from(msgs, start, cc.as_ref(), allow_empty, out, step),
    )?;
    match bytes {
        Some(bytes) => Ok(bytes),
        None => serde_json::to_vec(&build_request(model, context, options)),
    }
}

/// The request body with `messages`, without its tools.
fn body_around(
    model: &Model,
    context: &Context,
    options: &StreamOptions,
    cc: Option<&Value>,
    messages: Vec<Value>,
) -> Value {
    let mut body = json!({
        "model": model.id,
        "messages": messages,
        "max_tokens": options.output_tokens(model),
        "stream": true,
    });
    let mut system = Vec::new();
    let block = |text: &str| {
        let mut b = json!({"type":"text","text":text});
        if let Some(cc) = cc {
            b["cache_control"] = cc.clone();
        }
        b
    };
    if model.api_key.as_deref().is_some_and(is_oauth_token) {
        // An OAuth (subscription) token is only accepted with this identity first (Pi).
        system.push(block(OAUTH_IDENTITY));
    }
    if !context.system_prompt.is_empty() {
        system.push(block(&context.system_prompt));
    }
    if !system.is_empty() {
        body["system"] = Value::Array(system);
    }
    apply_thinking(model, options, &mut body);
    body
}

/// Keywords Anthropic's strict tool use refuses (Pi 1.6's `isAnthropicStrictUnsupportedKeyword`):
/// numeric and size bounds, `minItems` other than 0 or 1, a `format` it does not know.
fn anthropic_strict_unsupported(key: &str, value: &Value) -> bool {
    const KEYWORDS: [&str; 11] = [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "maxItems",
        "uniqueItems",
        "minContains",
        "maxContains",
        "minProperties",
        "maxProperties",
    ];
    const FORMATS: [&str; 10] = [
        "date-time",
        "time",
        "date",
        "duration",
        "email",
        "hostname",
        "uri",
        "ipv4",
        "ipv6",
        "uuid",
    ];
    match key {
        _ if KEYWORDS.contains(&key) => true,
        "minItems" => !(value == 0 || value == 1),
        "format" => !value.as_str().is_some_and(|f| FORMATS.contains(&f)),
        _ => false,
    }
}

/// The request's `tools`: name, description, `eager_input_streaming` unless
/// `compat.supportsEagerToolInputStreaming` is false, `strict: true` for a tool that asks for
/// JSON-schema sampling when `compat.supportsStrictTools` is true and its schema has a strict
/// form Anthropic takes, the schema as `{type, properties, required}` plus its
/// `additionalProperties`, `$defs` and `definitions` (a strict one: its strict form with those
/// keys set so), `cc` (when the request has one, unless `compat.supportsCacheControlOnTools`
/// is false) on the last (Pi 1.6's `convertTools`).
fn tools_value(model: &Model, tools: &[ToolSpec], cc: Option<&Value>) -> Value {
    let flag = |name: &str, default: bool| {
        model
            .compat
            .get(name)
            .and_then(Value::as_bool)
            .unwrap_or(default)
    };
    let eager = flag("supportsEagerToolInputStreaming", true);
    let supports_strict = flag("supportsStrictTools", false);
    // `compat.supportsCacheControlOnTools: false`: no mark on the last tool.
    let cc = cc.filter(|_| flag("supportsCacheControlOnTools", true));
    let n = tools.len();
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut tool = json!({"name":t.name,"description":t.description});
            if eager {
                tool["eager_input_streaming"] = Value::Bool(true);
            }
            let (parameters, strict) = super::strict::tool_parameters(
                t,
                supports_strict,
                Some(anthropic_strict_unsupported),
            );
            let mut schema = if strict {
                tool["strict"] = Value::Bool(true);
                parameters.as_object().cloned().unwrap_or_default()
            } else {
                serde_json::Map::new()
            };
            schema.insert("type".into(), json!("object"));
            let given = |key: &str| parameters.get(key).cloned();
            schema.insert(
                "properties".into(),
                given("properties").unwrap_or_else(|| json!({})),
            );
            schema.insert(
                "required".into(),
                given("required").unwrap_or_else(|| json!([])),
            );
            for key in ["additionalProperties", "$defs", "definitions"] {
                if let Some(v) = given(key) {
                    schema.insert(key.into(), v);
                }
            }
            tool["input_schema"] = Value::Object(schema);
            if let Some(cc) = cc.filter(|_| i + 1 == n) {
                tool["cache_control"] = cc.clone();
            }
            tool
        })
        .collect()
}

/// Anthropic `stop_reason` → Pi's stop reason (`refusal` / `sensitive` are errors).
fn map_stop(reason: &str) -> StopReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => StopReason::Length,
        "tool_use" => StopReason::ToolUse,
        "refusal" | "sensitive" => StopReason::Error,
        _ => StopReason::Stop,
    }
}

/// The error message of a `stop_reason` [`map_stop`] makes an error, as Pi 1.6's
/// `mapStopReason` words it: a refusal's `stop_details.explanation`, else "The model refused
/// to complete the request"; `sensitive` → "Provider stopped with: sensitive". Empty for the
/// other reasons.
fn stop_error(reason: &str, details: &Value) -> String {
    match reason {
        "refusal" => details
            .get("explanation")
            .and_then(Value::as_str)
            .filter(|e| !e.is_empty())
            .unwrap_or("The model refused to complete the request")
            .to_string(),
        "sensitive" => "Provider stopped with: sensitive".to_string(),
        _ => String::new(),
    }
}

/// Reads an event's `usage` into `into`: only the counts present (a proxy's `message_delta`
/// may leave out what `message_start` gave), as Pi 1.6 reads them: one-hour cache writes
/// (`cache_creation.ephemeral_1h_input_tokens`, 0 when `message_start` names none) and the
/// thinking tokens of a `message_delta` (`output_tokens_details.thinking_tokens`, part of
/// `output_tokens`) as `reasoning` when reported.
fn read_usage(u: &Value, into: &mut Usage, start: bool) {
    let get = |k: &str| u.get(k).and_then(Value::as_u64);
    let long_write = u["cache_creation"]["ephemeral_1h_input_tokens"].as_u64();
    if start || long_write.is_some() {
        into.cache_write_1h = Some(long_write.unwrap_or(0));
    }
    if let Some(v) = u["output_tokens_details"]["thinking_tokens"]
        .as_u64()
        .filter(|_| !start)
    {
        into.reasoning = Some(v);
    }
    if let Some(v) = get("input_tokens") {
        into.input = v;
    }
    if let Some(v) = get("output_tokens") {
        into.output = v;
    }
    if let Some(v) = get("cache_read_input_tokens") {
        into.cache_read = v;
    }
    if let Some(v) = get("cache_creation_input_tokens") {
        into.cache_write = v;
    }
}

/// One streamed event, read borrowed ([`read_chunk`]): the fields [`stream_body`] reads, each
/// as `Value`'s accessors read it. What comes once per message or block (`message`,
/// `content_block`, `usage`, `error`) is kept whole, boxed (the struct stays small); an absent
/// or `null` one reads as `Value::Null`, as indexing the `Value` would.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct StreamEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Str<'a>,
    index: U64,
    message: Option<Box<Value>>,
    content_block: Option<Box<Value>>,
    /// Boxed: its six strings are most of the event's size, and an event struct that large
    /// is copied many times as the layers of the reading return it (see
    /// `openai_completions::ChunkChoice`).
    #[serde(borrow)]
    delta: Obj<Box<EventDelta<'a>>>,
    usage: Option<Box<Value>>,
    error: Option<Box<Value>>,
}

/// `delta` of a [`StreamEvent`]: a `content_block_delta`'s or a `message_delta`'s.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct EventDelta<'a> {
    #[serde(borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(borrow)]
    text: Str<'a>,
    #[serde(borrow)]
    thinking: Str<'a>,
    #[serde(borrow)]
    signature: Str<'a>,
    #[serde(borrow)]
    partial_json: Str<'a>,
    #[serde(borrow)]
    stop_reason: Str<'a>,
    /// A `message_delta`'s `stop_details` (a refusal's `explanation`).
    stop_details: Option<Box<Value>>,
}

/// Pi 1.6's `interleaved-thinking` beta: thinking between tool calls on budget-thinking
/// models (adaptive thinking interleaves without it).
const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";

/// Pi 1.6's `fine-grained-tool-streaming` beta, asked for instead of the tools'
/// `eager_input_streaming` when `compat.supportsEagerToolInputStreaming` is false.
const FINE_GRAINED_TOOL_STREAMING_BETA: &str = "fine-grained-tool-streaming-2025-05-14";

/// The `anthropic-beta` features of a request, comma-joined; `None` for none (Pi 1.6's
/// `getBetaFeatures`): an `anthropic-beta` header among the model's `headers` (models.json)
/// replaces the list (its comma-separated names trimmed, empty ones and repeats dropped);
/// else the OAuth betas for an OAuth token, fine-grained tool streaming when the request has
/// tools and the model streams tool input without `eager_input_streaming`, and interleaved
/// thinking when the request asks for budget thinking ([`thinking_enabled`], not
/// [`is_adaptive`]).
fn beta_features(model: &Model, has_tools: bool) -> Option<String> {
    let mut features: Vec<&str> = Vec::new();
    let configured = model
        .headers
        .iter()
        .rfind(|(k, _)| k.eq_ignore_ascii_case("anthropic-beta"));
    if let Some((_, list)) = configured {
        features.extend(list.split(',').map(str::trim).filter(|f| !f.is_empty()));
    } else {
        if model.api_key.as_deref().is_some_and(is_oauth_token) {
            features.extend(OAUTH_BETAS.split(','));
        }
        let eager = model
            .compat
            .get("supportsEagerToolInputStreaming")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        if has_tools && !eager {
            features.push(FINE_GRAINED_TOOL_STREAMING_BETA);
        }
        if thinking_enabled(model) && !is_adaptive(model) {
            features.push(INTERLEAVED_THINKING_BETA);
        }
    }
    let mut seen = Vec::with_capacity(features.len());
    for f in features {
        if !seen.contains(&f) {
            seen.push(f);
        }
    }
    (!seen.is_empty()).then(|| seen.join(","))
}

/// Pi 1.6's session affinity header for `anthropic-messages` (`createClient`): with
/// `compat.sendSessionAffinityHeaders` (default: OpenRouter, the provider or its URL) and a
/// request that caches (not [`CacheRetention::None`]), the session id as `x-session-id` with
/// the `openrouter` `compat.sessionAffinityFormat` (OpenRouter's default), else as
/// `x-session-affinity`.
pub fn session_headers(model: &Model, options: &StreamOptions) -> Vec<(String, String)> {
    let openrouter = model.provider == "openrouter" || model.base_url.contains("openrouter.ai");
    let send = model
        .compat
        .get("sendSessionAffinityHeaders")
        .and_then(Value::as_bool)
        .unwrap_or(openrouter);
    let Some(id) = options
        .session_id
        .as_deref()
        .filter(|_| send && options.cache_retention() != CacheRetention::None)
    else {
        return Vec::new();
    };
    let format = model
        .compat
        .get("sessionAffinityFormat")
        .and_then(Value::as_str)
        .or(openrouter.then_some("openrouter"));
    let name = if format == Some("openrouter") {
        "x-session-id"
    } else {
        "x-session-affinity"
    };
    vec![(name.to_string(), id.to_string())]
}

/// The request headers for `context` on `model`: version, key (`x-api-key`, or a bearer for
/// an OAuth token), the model's own headers, and one `anthropic-beta` with
/// [`beta_features`] (a model's own `anthropic-beta` is folded into it, never sent twice).
pub fn request_headers(model: &Model, context: &Context) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> =
        vec![("anthropic-version".into(), ANTHROPIC_VERSION.into())];
    match &model.api_key {
        Some(k) if is_oauth_token(k) => {
            headers.push(("authorization".into(), format!("Bearer {k}")));
        }
        Some(k) => headers.push(("x-api-key".into(), k.clone())),
        None => {}
    }
    headers.extend(
        model
            .headers
            .iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("anthropic-beta"))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    if let Some(betas) = beta_features(model, !context.tools.is_empty()) {
        headers.push(("anthropic-beta".into(), betas));
    }
    headers
}

/// Reads the stream into `b`: `Ok(Some(reason))` for a complete response, `Ok(None)` when the
/// consumer went away, `Err` for a failure (the partial content stays in `b`).
pub(super) async fn stream_body(
    request: super::Request<'_>,
    b: &mut MessageBuilder,
) -> Result<Option<StopReason>, ProviderError> {
    let (model, body, headers, cancel, timeout, endpoint) = request.parts();
    let base = model.base_url.trim_end_matches('/');
    let url = if base.ends_with("/v1") {
        format!("{base}/messages")
    } else {
        format!("{base}/v1/messages")
    };
    let mut sse = open_sse(
        &crate::errors::HttpWording::Anthropic,
        &url,
        endpoint,
        headers,
        body,
        cancel,
        timeout,
    )
    .await?;
    let mut usage = Usage::default();
    let mut stop: Option<(StopReason, String)> = None;
    let mut saw_stop = false;
    // Where an event read through its `Value` is written out again (rare: see `read_chunk`).
    let mut spill = String::new();
    // The block key: the event's `index` in decimal, empty without one.
    let mut key = String::new();
    let no_delta = EventDelta::default();
    while let Some(ev) = match sse.queued() {
        Some(ev) => Some(ev),
        None => sse.next(cancel, b).await?,
    } {
        if ev.event == "ping" {
            continue;
        }
        let data: StreamEvent = match read_chunk(&ev, &mut spill)? {
            Some(Chunk::Read(d)) => d,
            Some(Chunk::Skip) | None => continue,
        };
        let kind = data.kind.as_str().unwrap_or(ev.event.as_str());
        key.clear();
        if let Some(i) = data.index.0 {
            use std::fmt::Write;
            let _ = write!(key, "{i}");
        }
        let d = data.delta.0.as_deref().unwrap_or(&no_delta);
        let step = match kind {
            "message_start" => {
                let m = whole(&data.message);
                if let Some(id) = m.get("id").and_then(Value::as_str) {
                    b.with_message(|msg| msg.response_id = Some(id.to_string()));
                }
                // Pi 1.6's `responseModel`: the model `message_start` names when it is not
                // the one asked for (a fallback answered).
                if let Some(name) = m.get("model").and_then(Value::as_str) {
                    if name != model.id {
                        b.with_message(|msg| msg.response_model = Some(name.to_string()));
                    }
                }
                read_usage(&m["usage"], &mut usage, true);
                b.set_usage(usage.clone());
                Ok(())
            }
            "content_block_start" => {
                let cb = whole(&data.content_block);
                match cb.get("type").and_then(Value::as_str) {
                    Some("text") => b.text_delta(&key, cb["text"].as_str().unwrap_or("")).await,
                    Some("thinking") => {
                        let r = b
                            .thinking_delta(&key, cb["thinking"].as_str().unwrap_or(""))
                            .await;
                        // Pi 1.6 stores the block's `signature ?? ""` from its start: an answer
                        // aborted before the signature came keeps `thinkingSignature: ""`.
                        b.thinking_signature(&key, cb["signature"].as_str().unwrap_or(""));
                        r
                    }
                    Some("redacted_thinking") => {
                        let r = b.thinking_delta(&key, "").await;
                        b.thinking_signature(&key, cb["data"].as_str().unwrap_or(""));
                        b.mark_redacted(&key);
                        r
                    }
                    Some("tool_use") | Some("server_tool_use") => {
                        b.tool_call_start(
                            &key,
                            cb["id"].as_str().unwrap_or(""),
                            cb["name"].as_str().unwrap_or(""),
                            cb.get("input").cloned(),
                        )
                        .await
                    }
                    _ => Ok(()),
                }
            }
            "content_block_delta" => match d.kind.as_str() {
                Some("text_delta") => {
                    let t = d.text.as_str().unwrap_or("");
                    if b.append_delta(&key, false, t) {
                        Ok(())
                    } else {
                        b.text_delta(&key, t).await
                    }
                }
                Some("thinking_delta") => {
                    let t = d.thinking.as_str().unwrap_or("");
                    if b.append_delta(&key, true, t) {
                        Ok(())
                    } else {
                        b.thinking_delta(&key, t).await
                    }
                }
                Some("signature_delta") => {
                    b.thinking_signature(&key, d.signature.as_str().unwrap_or(""));
                    Ok(())
                }
                Some("input_json_delta") => {
                    b.tool_call_delta(&key, d.partial_json.as_str().unwrap_or(""))
                        .await
                }
                _ => Ok(()),
            },
            "content_block_stop" => b.end_block(&key).await,
            "message_delta" => {
                if let Some(r) = d.stop_reason.as_str() {
                    stop = Some((map_stop(r), stop_error(r, whole(&d.stop_details))));
                    b.with_message(|m| m.raw_stop_reason = Some(r.to_string()));
                }
                read_usage(whole(&data.usage), &mut usage, false);
                b.set_usage(usage.clone());
                if crate::models::is_openrouter(model) && data.usage.is_some() {
                    let reported = whole(&data.usage);
                    b.with_message(|m| {
                        crate::models::apply_openrouter_reported_cost(&mut m.usage.cost, reported)
                    });
                }
                Ok(())
            }
            "message_stop" => {
                saw_stop = true;
                break;
            }
            "error" => {
                let e = whole(&data.error);
                return Err(classify_stream_error(
                    e.get("type").and_then(Value::as_str),
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("provider error"),
                ));
            }
            _ => Ok(()),
        };
        if step.is_err() {
            return Ok(None);
        }
    }
    b.set_usage(usage);
    match stop {
        Some((StopReason::Error, message)) => Err(ProviderError::Provider { message }),
        Some((reason, _)) => Ok(Some(reason)),
        None if saw_stop => Ok(Some(StopReason::Stop)),
        // No end marker: finished when what streamed is complete, else cut (STRM-04).
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
    use super::*;

    /// The request's `cache_control` marks per retention, as Pi 1.6's `getCacheControl`: the
    /// system prompt, the last tool and the last user block carry `{"type":"ephemeral"}`
    /// (short), with `"ttl":"1h"` (long, unless `compat.supportsLongCacheRetention` is false);
    /// none anywhere for `none`. The cached request is the whole one byte for byte, also when
    /// the retention changes between two requests of one conversation.
    #[test]
    fn cache_marks_follow_the_requests_retention() {
        let mut model = Model::new(crate::Api::AnthropicMessages, "a", "m", "http://x");
        let ctx = Context {
            system_prompt: "Lead.".into(),
            messages: vec![Message::user_text("hi")],
            tools: vec![ToolSpec {
                constrained_sampling: None,
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({"type":"object","properties":{},"required":[]}),
            }],
        };
        let cache = crate::api::openai_completions::RequestCache::default();
        let sent = |model: &Model, retention: CacheRetention| -> Value {
            let opts = StreamOptions {
                cache_retention: Some(retention),
                ..StreamOptions::default()
            };
            let whole = serde_json::to_vec(&build_request(model, &ctx, &opts)).unwrap();
            let cached = request_bytes(model, &ctx, &opts, &cache).unwrap();
            assert_eq!(
                String::from_utf8(cached).unwrap(),
                String::from_utf8(whole.clone()).unwrap()
            );
            serde_json::from_slice(&whole).unwrap()
        };
        let max = model.default_max_tokens();
        let body = |cc: Option<Value>| {
            let mut b = json!({
                "model": "m",
                "messages": [{"role":"user","content":[{"type":"text","text":"hi"}]}],
                "max_tokens": max,
                "stream": true,
                "system": [{"type":"text","text":"Lead."}],
                "tools": [{"name":"read","description":"Read a file","eager_input_streaming":true,
                           "input_schema":{"type":"object","properties":{},"required":[]}}],
            });
            if let Some(cc) = cc {
                b["messages"][0]["content"][0]["cache_control"] = cc.clone();
                b["system"][0]["cache_control"] = cc.clone();
                b["tools"][0]["cache_control"] = cc;
            }
            b
        };
        let short = json!({"type":"ephemeral"});
        let long = json!({"type":"ephemeral","ttl":"1h"});
        assert_eq!(
            sent(&model, CacheRetention::Short),
            body(Some(short.clone()))
        );
        assert_eq!(sent(&model, CacheRetention::None), body(None));
        assert_eq!(sent(&model, CacheRetention::Long), body(Some(long)));
        model.compat = json!({"supportsLongCacheRetention": false});
        assert_eq!(sent(&model, CacheRetention::Long), body(Some(short)));
    }

    /// Each field the stream reads, read borrowed, equals what the `Value` reading gives:
    /// escapes, a duplicated key (the last wins), a lone surrogate (lossy), `null` and
    /// ill-typed fields, a negative or fractional index.
    #[test]
    fn events_read_borrowed_as_their_value_reads_them() {
        for data in [
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a\"b"}}"#,
            r#"{"type":"content_block_delta","index":0,"index":2,"delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"\ud800z"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#,
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3}}}"#,
            r#"{"type":"message_start","message":null,"index":-1,"error":null}"#,
            r#"{"type":7,"index":1.5,"delta":"text","usage":[1]}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
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
            let d = e.delta.0.unwrap_or_default();
            let field = |o: &Value, k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
            let got = (
                e.kind.as_str().map(str::to_string),
                e.index.0,
                [
                    &d.kind,
                    &d.text,
                    &d.thinking,
                    &d.signature,
                    &d.partial_json,
                    &d.stop_reason,
                ]
                .map(|s| s.as_str().map(str::to_string)),
                [
                    whole(&e.message),
                    whole(&e.content_block),
                    whole(&e.usage),
                    whole(&e.error),
                ]
                .map(Value::clone),
            );
            let want = (
                field(&v, "type"),
                v.get("index").and_then(Value::as_u64),
                [
                    "type",
                    "text",
                    "thinking",
                    "signature",
                    "partial_json",
                    "stop_reason",
                ]
                .map(|k| field(&v["delta"], k)),
                [&v["message"], &v["content_block"], &v["usage"], &v["error"]].map(Value::clone),
            );
            assert_eq!(got, want, "{data}");
        }
    }

    #[test]
    fn thinking_levels_map_to_budget_or_adaptive_effort() {
        let ctx = Context::default();
        let opts = StreamOptions::default();
        let mut m = Model::new(
            crate::Api::AnthropicMessages,
            "anthropic",
            "claude-sonnet-4-5",
            "",
        );
        m.reasoning = true;
        m.max_tokens = 64_000;
        m.thinking_level = Some(ThinkingLevel::Medium);
        let b = build_request(&m, &ctx, &opts);
        // Pi 1.6.0: the model's whole 64,000 (its budget inside), not 32,000 + the budget.
        assert_eq!(
            (b["max_tokens"].clone(), b["thinking"].clone()),
            (
                json!(64_000),
                json!({"type":"enabled","budget_tokens":8192,"display":"summarized"})
            )
        );
        m.thinking_level = Some(ThinkingLevel::Off);
        assert_eq!(
            build_request(&m, &ctx, &opts)["thinking"],
            json!({"type":"disabled"})
        );
        // An adaptive model's id without the catalogue's flag thinks with a budget (Pi 1.6.0).
        m.id = "claude-opus-4-7".into();
        m.thinking_level = Some(ThinkingLevel::High);
        assert_eq!(
            build_request(&m, &ctx, &opts)["thinking"],
            json!({"type":"enabled","budget_tokens":16384,"display":"summarized"})
        );
        m.compat = json!({"forceAdaptiveThinking": true});
        m.thinking_level_map = Some(json!({"xhigh":"xhigh"}));
        m.thinking_level = Some(ThinkingLevel::Xhigh);
        let b = build_request(&m, &ctx, &opts);
        assert_eq!(
            (b["thinking"].clone(), b["output_config"].clone()),
            (
                json!({"type":"adaptive","display":"summarized"}),
                json!({"effort":"xhigh"})
            )
        );
        m.thinking_level = Some(ThinkingLevel::Minimal);
        assert_eq!(
            build_request(&m, &ctx, &opts)["output_config"],
            json!({"effort":"low"})
        );
        // Pi 1.6's `max`: the map's value where the model has it; clamped to xhigh where not.
        m.thinking_level = Some(ThinkingLevel::Max);
        assert_eq!(
            build_request(&m, &ctx, &opts)["output_config"],
            json!({"effort":"xhigh"})
        );
        m.thinking_level_map = Some(json!({"xhigh":"xhigh","max":"max"}));
        assert_eq!(
            build_request(&m, &ctx, &opts)["output_config"],
            json!({"effort":"max"})
        );
        // The catalogue's flag decides, whatever the id says.
        m.id = "my-proxy-model".into();
        m.compat = json!({"forceAdaptiveThinking": true});
        assert_eq!(
            build_request(&m, &ctx, &opts)["thinking"],
            json!({"type":"adaptive","display":"summarized"})
        );
        m.id = "claude-opus-4-7".into();
        m.compat = json!({"forceAdaptiveThinking": false});
        m.thinking_level = Some(ThinkingLevel::High);
        assert_eq!(
            build_request(&m, &ctx, &opts)["thinking"]["type"],
            json!("enabled")
        );
        m.compat = Value::Null;
        // Without reasoning nothing is sent.
        m.reasoning = false;
        assert!(build_request(&m, &ctx, &opts).get("thinking").is_none());
    }

    #[test]
    fn oauth_token_uses_bearer_and_identity() {
        let mut m = Model::new(crate::Api::AnthropicMessages, "anthropic", "c", "");
        m.api_key = Some("sk-ant-oat01-x".into());
        let ctx = Context {
            system_prompt: "S".into(),
            ..Context::default()
        };
        let b = build_request(&m, &ctx, &StreamOptions::default());
        assert_eq!(b["system"][0]["text"], OAUTH_IDENTITY);
        assert_eq!(b["system"][1]["text"], "S");
        let h = request_headers(&m, &ctx);
        assert_eq!(
            h,
            vec![
                ("anthropic-version".into(), ANTHROPIC_VERSION.into()),
                ("authorization".into(), "Bearer sk-ant-oat01-x".into()),
                (
                    "anthropic-beta".into(),
                    "claude-code-20250219,oauth-2025-04-20".into()
                ),
            ]
        );
    }

    /// The `anthropic-beta` header as Pi 1.6.0 sends it (`getBetaFeatures`, checked against
    /// the real Pi on a loopback server): interleaved thinking for budget thinking, none for
    /// `off`, a non-reasoning model or adaptive thinking; fine-grained tool streaming for a
    /// request with tools when the model takes no `eager_input_streaming`; OAuth's betas first;
    /// a models.json `anthropic-beta` replacing the list, once, trimmed and without repeats.
    #[test]
    fn beta_header_as_pi_1_6() {
        let tool = ToolSpec {
            constrained_sampling: None,
            name: "read".into(),
            description: "Read".into(),
            parameters: json!({"type":"object","properties":{}}),
        };
        let with_tools = Context {
            tools: vec![tool],
            ..Context::default()
        };
        let bare = Context::default();
        let model = |id: &str, reasoning: bool, level: ThinkingLevel, compat: Value| {
            let mut m = Model::new(crate::Api::AnthropicMessages, "anth", id, "");
            m.api_key = Some("sk-test".into());
            m.reasoning = reasoning;
            m.thinking_level = Some(level);
            m.compat = compat;
            m
        };
        let beta = |m: &Model, c: &Context| -> Vec<String> {
            request_headers(m, c)
                .into_iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("anthropic-beta"))
                .map(|(_, v)| v)
                .collect()
        };
        let interleaved = vec!["interleaved-thinking-2025-05-14".to_string()];
        let budget = model("claude-sonnet-4-5", true, ThinkingLevel::Medium, json!({}));
        assert_eq!(beta(&budget, &bare), interleaved);
        assert_eq!(beta(&budget, &with_tools), interleaved);
        let off = model("claude-sonnet-4-5", true, ThinkingLevel::Off, json!({}));
        assert_eq!(beta(&off, &with_tools), Vec::<String>::new());
        let plain = model("claude-mock", false, ThinkingLevel::High, json!({}));
        assert_eq!(beta(&plain, &with_tools), Vec::<String>::new());
        let adaptive = model(
            "claude-next",
            true,
            ThinkingLevel::High,
            json!({"forceAdaptiveThinking": true}),
        );
        assert_eq!(beta(&adaptive, &with_tools), Vec::<String>::new());
        let no_eager = model(
            "claude-sonnet-4-5",
            true,
            ThinkingLevel::Low,
            json!({"supportsEagerToolInputStreaming": false}),
        );
        assert_eq!(
            beta(&no_eager, &with_tools),
            vec!["fine-grained-tool-streaming-2025-05-14,interleaved-thinking-2025-05-14"]
        );
        assert_eq!(beta(&no_eager, &bare), interleaved);
        let mut oauth = budget.clone();
        oauth.api_key = Some("sk-ant-oat01-x".into());
        assert_eq!(
            beta(&oauth, &bare),
            vec!["claude-code-20250219,oauth-2025-04-20,interleaved-thinking-2025-05-14"]
        );
        let mut configured = oauth.clone();
        configured.headers.insert(
            "Anthropic-Beta".into(),
            " files-api, ,files-api,x-1 ".into(),
        );
        configured.headers.insert("x-extra".into(), "1".into());
        assert_eq!(
            request_headers(&configured, &with_tools),
            vec![
                ("anthropic-version".into(), ANTHROPIC_VERSION.into()),
                ("authorization".into(), "Bearer sk-ant-oat01-x".into()),
                ("x-extra".into(), "1".into()),
                ("anthropic-beta".into(), "files-api,x-1".into()),
            ]
        );
    }

    /// `max_tokens` as Pi 1.6.0 asks for it (checked against the real Pi on a loopback
    /// server): the model's whole `maxTokens` (64,000, no 32,000 cap), with budget thinking
    /// too (the budget fits inside it), and the budget cut to leave 1,024 tokens of answer
    /// when the limit is smaller than the budget.
    #[test]
    fn max_tokens_as_pi_1_6() {
        let sent = |max_tokens: u64, level: ThinkingLevel| {
            let mut m = Model::new(crate::Api::AnthropicMessages, "anth", "claude-mock", "");
            m.reasoning = true;
            m.max_tokens = max_tokens;
            m.thinking_level = Some(level);
            let b = build_request(&m, &Context::default(), &StreamOptions::default());
            (b["max_tokens"].clone(), b["thinking"].clone())
        };
        assert_eq!(
            sent(64_000, ThinkingLevel::Off),
            (json!(64_000), json!({"type":"disabled"}))
        );
        assert_eq!(
            sent(64_000, ThinkingLevel::Medium),
            (
                json!(64_000),
                json!({"type":"enabled","budget_tokens":8192,"display":"summarized"})
            )
        );
        assert_eq!(
            sent(4_096, ThinkingLevel::Medium),
            (
                json!(4_096),
                json!({"type":"enabled","budget_tokens":3072,"display":"summarized"})
            )
        );
        assert_eq!(
            sent(2_000, ThinkingLevel::High),
            (
                json!(2_000),
                json!({"type":"enabled","budget_tokens":976,"display":"summarized"})
            )
        );
        // No room for a budget beside 1,024 tokens of answer: Pi 1.6.0 asks for 1,024.
        for max_tokens in [1_000, 1_024] {
            assert_eq!(
                sent(max_tokens, ThinkingLevel::High),
                (
                    json!(max_tokens),
                    json!({"type":"enabled","budget_tokens":1024,"display":"summarized"})
                )
            );
        }
    }

    /// A refusal or a `sensitive` stop is an error worded as Pi 1.6 words it.
    #[test]
    fn refusal_and_sensitive_stops_are_worded_as_pi() {
        assert_eq!(map_stop("refusal"), StopReason::Error);
        assert_eq!(
            stop_error("refusal", &Value::Null),
            "The model refused to complete the request"
        );
        assert_eq!(
            stop_error(
                "refusal",
                &json!({"type":"refusal","explanation":"Policy X"})
            ),
            "Policy X"
        );
        assert_eq!(
            stop_error("sensitive", &Value::Null),
            "Provider stopped with: sensitive"
        );
        assert_eq!(stop_error("end_turn", &Value::Null), "");
    }

    #[test]
    fn tool_results_and_next_user_merge_results_first() {
        let m: Vec<Message> = serde_json::from_value(json!([
            {"role":"user","content":"q"},
            {"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"ls","arguments":{}}],"stopReason":"toolUse"},
            {"role":"toolResult","toolCallId":"t1","toolName":"ls","content":[{"type":"text","text":"a"}],"isError":false},
            {"role":"user","content":"what's 2+2"}
        ]))
        .unwrap();
        let model = Model::new(crate::Api::AnthropicMessages, "anthropic", "c", "");
        assert_eq!(
            Value::Array(convert_messages(
                &model,
                &m,
                Some(&json!({"type":"ephemeral"}))
            )),
            json!([
                {"role":"user","content":[{"type":"text","text":"q"}]},
                {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{}}]},
                {"role":"user","content":[
                    {"type":"tool_result","tool_use_id":"t1","content":"a","is_error":false},
                    {"type":"text","text":"what's 2+2","cache_control":{"type":"ephemeral"}}]}
            ])
        );
    }
}

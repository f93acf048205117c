//! The `openai-completions` wire format: `POST {baseUrl}/chat/completions` with `stream: true`,
//! for OpenAI and the servers that copy it (ollama, llama.cpp, vLLM, …).
//!
//! Source of the shapes: OpenAI's Chat Completions streaming reference, plus the quirks of real
//! servers recorded in the cases: tool-call deltas without `index` (STRM-01: an explicit index
//! wins; else a new `id` opens a new call; else the fragment continues the last call),
//! arguments sent as an object (STRM-03), a stream that ends with `[DONE]` but without
//! `finish_reason` (STRM-04: tool calls → `toolUse`, text → `stop` unless
//! `compat.requireFinishReason`, nothing → error), and reasoning in `reasoning_content` or
//! `reasoning` (STRM-06). A body that ends with neither `[DONE]` nor a finish reason is judged
//! by [`super::end`]: finished when what streamed is complete (STRM-04's plain EOF), else cut, a
//! retryable error (case 19.1). Outbound `arguments` are always a JSON string.

use serde_json::{json, Value};

use super::lenient::{First, Obj, Str};
use super::prefix::PrefixKey;
use super::{join_url, open_sse, read_chunk, CacheRetention, Chunk, StreamOptions};
use crate::errors::{classify_stream_error, ProviderError};
use crate::models::{Model, ThinkingLevel};
use crate::stream::MessageBuilder;
use crate::transform::{transform_messages, Transform};
use crate::types::{ContentBlock, Context, Message, StopReason, ToolSpec, Usage, UserContent};

/// Pi's resolved `compat` flags for OpenAI-compatible servers (`openai-completions.js`
/// `getCompat`): explicit `compat` keys of models.json win over what the provider name and base
/// URL suggest. Same keys and meanings as Pi's, so a Pi models.json works unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct Compat {
    pub supports_store: bool,
    pub supports_developer_role: bool,
    pub supports_usage_in_streaming: bool,
    /// `max_completion_tokens` or `max_tokens`.
    pub max_tokens_field: String,
    pub requires_tool_result_name: bool,
    pub requires_assistant_after_tool_result: bool,
    pub requires_thinking_as_text: bool,
    pub requires_reasoning_content_on_assistant_messages: bool,
    pub supports_strict_mode: bool,
    /// Whether `reasoning_effort` is accepted (OpenAI style).
    pub supports_reasoning_effort: bool,
    /// `compat.requiresNonNullAssistantContent`: an assistant message of tool calls only
    /// carries `"content": ""` instead of `null`.
    pub requires_non_null_assistant_content: bool,
    /// `compat.requiresToolsWithToolHistory`: `"tools": []` when the request has no tools but
    /// its history has tool calls or results (proxies in front of Anthropic).
    pub requires_tools_with_tool_history: bool,
    /// How thinking is switched (Pi 1.6's `thinkingFormat`, [`apply_reasoning`]): `openai`,
    /// `deepseek`, `zai`, `qwen`, `qwen-chat-template`, `chat-template`, `baseten`,
    /// `openrouter`, `ant-ling`, `together`, `string-thinking`; any other value as `openai`.
    pub thinking_format: String,
    /// `compat.chatTemplateKwargs` (format `chat-template`): the `chat_template_kwargs`
    /// object's entries before resolution ([`chat_template_values`]).
    pub chat_template_kwargs: serde_json::Map<String, Value>,
    /// `compat.chatTemplateArgs` (format `baseten`): the `chat_template_args` entries.
    pub chat_template_args: serde_json::Map<String, Value>,
    /// `compat.zaiToolStream`: `"tool_stream": true` beside a non-empty tool list.
    pub zai_tool_stream: bool,
    /// The top-level field that caps reasoning with the level's thinking budget:
    /// `compat.thinkingTokenBudgetField`, else `thinking_token_budget` with
    /// `compat.supportsThinkingTokenBudget`, else none (Pi 1.6's
    /// `resolveThinkingTokenBudgetField`).
    pub thinking_token_budget_field: Option<String>,
    /// `compat.vllmPriority`: sent as `priority`, whatever its JSON value.
    pub vllm_priority: Option<Value>,
    /// `compat.cacheControlFormat`: `"anthropic"` puts Anthropic's `cache_control` marks on
    /// the system prompt, the last tool and the last conversation message with text (Pi 1.6
    /// detects it for OpenRouter's `anthropic/…` models).
    pub cache_control_format: Option<String>,
    /// `compat.supportsLongCacheRetention`: a long retention gets `prompt_cache_retention:
    /// "24h"` and a 1 h `cache_control` ttl (false for Together, Cloudflare, NVIDIA, Ant Ling).
    pub supports_long_cache_retention: bool,
    /// `compat.promptCacheKeyMode`: `enabled`, `disabled`, or (unset) `auto`: a
    /// `prompt_cache_key` for `api.openai.com`, or with a long retention the server keeps.
    pub prompt_cache_key_mode: Option<String>,
    /// `compat.sendSessionAffinityHeaders` (OpenRouter's by default): the session id in
    /// headers ([`session_headers`]).
    pub send_session_affinity_headers: bool,
    /// `compat.sessionAffinityFormat`: `openrouter` (OpenRouter's default) or `openai`.
    pub session_affinity_format: String,
}

impl Compat {
    /// The flags for `model`.
    pub fn for_model(model: &Model) -> Compat {
        let p = model.provider.as_str();
        let url = model.base_url.as_str();
        // Pi 1.6's `detectCompat`, host by host.
        let zai = p == "zai"
            || p == "zai-coding-cn"
            || url.contains("api.z.ai")
            || url.contains("open.bigmodel.cn");
        let together =
            p == "together" || url.contains("api.together.ai") || url.contains("api.together.xyz");
        let moonshot = p == "moonshotai" || p == "moonshotai-cn" || url.contains("api.moonshot.");
        let cf_gateway = p == "cloudflare-ai-gateway" || url.contains("gateway.ai.cloudflare.com");
        let cf_workers = p == "cloudflare-workers-ai" || url.contains("api.cloudflare.com");
        let nvidia = p == "nvidia" || url.contains("integrate.api.nvidia.com");
        let ant_ling = p == "ant-ling" || url.contains("api.ant-ling.com");
        let cerebras = p == "cerebras" || url.contains("cerebras.ai");
        let deepseek = p == "deepseek" || url.to_lowercase().contains("deepseek.com");
        let grok = p == "xai" || url.contains("api.x.ai");
        let non_standard = nvidia
            || cerebras
            || grok
            || together
            || url.contains("chutes.ai")
            || deepseek
            || zai
            || moonshot
            || p == "opencode"
            || url.contains("opencode.ai")
            || cf_workers
            || cf_gateway
            || ant_ling;
        let use_max_tokens = url.contains("chutes.ai")
            || deepseek
            || moonshot
            || cf_gateway
            || together
            || nvidia
            || ant_ling
            || zai;
        let openrouter = p == "openrouter" || url.contains("openrouter.ai");
        let short_cache_only = together || cf_workers || cf_gateway || nvidia || ant_ling;
        let c = &model.compat;
        // JavaScript's `??`: an explicit `null` is unset.
        let set = |k: &str| c.get(k).filter(|v| !v.is_null());
        let text = |k: &str| set(k).and_then(Value::as_str).map(str::to_string);
        let flag = |k: &str, d: bool| set(k).map_or(d, truthy);
        let object = |k: &str| {
            set(k)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        Compat {
            supports_store: flag("supportsStore", !non_standard),
            // Pi 1.6 (`detectCompat`): the developer role is OpenAI's; other hosts' chat
            // templates (ollama, llama.cpp, vLLM…) often reject it, and all take `system`.
            supports_developer_role: flag(
                "supportsDeveloperRole",
                p == "openai" || url.contains("api.openai.com"),
            ),
            supports_usage_in_streaming: flag("supportsUsageInStreaming", true),
            // Pi 1.6 sends `max_tokens` for that value and `max_completion_tokens` for any
            // other.
            max_tokens_field: if text("maxTokensField")
                .map_or(use_max_tokens, |f| f == "max_tokens")
            {
                "max_tokens"
            } else {
                "max_completion_tokens"
            }
            .to_string(),
            requires_tool_result_name: flag("requiresToolResultName", false),
            requires_assistant_after_tool_result: flag("requiresAssistantAfterToolResult", false),
            requires_thinking_as_text: flag("requiresThinkingAsText", false),
            requires_reasoning_content_on_assistant_messages: flag(
                "requiresReasoningContentOnAssistantMessages",
                deepseek,
            ),
            // Pi 1.6 (`detectCompat`): "OpenAI compatibility alone does not imply strict
            // JSON-schema tool support": no `strict` unless the model's compat asks for it.
            supports_strict_mode: flag("supportsStrictMode", false),
            supports_reasoning_effort: flag(
                "supportsReasoningEffort",
                !(grok || zai || moonshot || together || cf_gateway || nvidia || ant_ling),
            ),
            requires_non_null_assistant_content: flag("requiresNonNullAssistantContent", false),
            requires_tools_with_tool_history: flag("requiresToolsWithToolHistory", false),
            thinking_format: text("thinkingFormat").unwrap_or_else(|| {
                if deepseek {
                    "deepseek"
                } else if zai {
                    "zai"
                } else if together {
                    "together"
                } else if ant_ling {
                    "ant-ling"
                } else if openrouter {
                    "openrouter"
                } else {
                    "openai"
                }
                .to_string()
            }),
            chat_template_kwargs: object("chatTemplateKwargs"),
            chat_template_args: object("chatTemplateArgs"),
            zai_tool_stream: flag("zaiToolStream", false),
            thinking_token_budget_field: text("thinkingTokenBudgetField")
                .filter(|f| !f.is_empty())
                .or_else(|| {
                    flag("supportsThinkingTokenBudget", false)
                        .then(|| "thinking_token_budget".to_string())
                }),
            vllm_priority: set("vllmPriority").cloned(),
            cache_control_format: text("cacheControlFormat").or_else(|| {
                (p == "openrouter" && model.id.starts_with("anthropic/"))
                    .then(|| "anthropic".to_string())
            }),
            supports_long_cache_retention: flag("supportsLongCacheRetention", !short_cache_only),
            prompt_cache_key_mode: text("promptCacheKeyMode"),
            send_session_affinity_headers: flag("sendSessionAffinityHeaders", openrouter),
            session_affinity_format: text("sessionAffinityFormat")
                .unwrap_or_else(|| if openrouter { "openrouter" } else { "openai" }.to_string()),
        }
    }
}

/// JavaScript's truthiness of a JSON value (how Pi 1.6 tests a `compat` flag).
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

fn data_url(i: &crate::types::ImageContent) -> Value {
    json!({"type":"image_url","image_url":{"url":format!("data:{};base64,{}", i.mime_type, i.data)}})
}

/// Converts provider-neutral messages to chat-completions `messages` (after the system one),
/// after [`transform_messages`], with Pi's rules: assistant text as one string (`null` when
/// only tool calls), thinking replayed in the field it streamed in (its signature, e.g.
/// `reasoning_content`) or as text with `requiresThinkingAsText`, arguments as a JSON string,
/// tool results as `tool` messages (images follow in a user message when the model takes
/// images). A [`Message::System`] goes in place as a message of the request's instruction
/// role (`developer` for a reasoning model with `supportsDeveloperRole`, else `system`) with
/// Pi 1.6's wording ([`crate::SystemMessage::update_text`]).
pub fn convert_messages(model: &Model, compat: &Compat, messages: &[Message]) -> Vec<Value> {
    let msgs = transform_messages(messages, model);
    let mut out = Vec::new();
    convert_from(model, compat, &msgs, 0, false, &mut out, |_| {});
    out
}

/// Where one step of [`convert_from`] left off: the index of the next transformed message,
/// how many values were out by then, and whether the step ended on tool results (the state
/// the next step starts from).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Step {
    next: usize,
    out: usize,
    last_was_result: bool,
}

/// The loop of [`convert_messages`] over already transformed `msgs` from `start`, entering with
/// `last_was_result`, pushing onto `out` and telling `step` where each step ended. A step is
/// one message, or a run of tool results together; its values depend only on the messages it
/// covers, the message right after it (which ends a run) and the state it entered with.
fn convert_from(
    model: &Model,
    compat: &Compat,
    msgs: &[Message],
    start: usize,
    mut last_was_result: bool,
    out: &mut Vec<Value>,
    mut step: impl FnMut(Step),
) {
    let takes_images = model.input.iter().any(|k| k == "image");
    let mut i = start;
    while i < msgs.len() {
        let m = &msgs[i];
        if compat.requires_assistant_after_tool_result
            && last_was_result
            && matches!(m, Message::User(_))
        {
            out.push(json!({"role":"assistant","content":"I have processed the tool results."}));
        }
        let was_result = std::mem::replace(&mut last_was_result, false);
        match m {
            Message::System(sm) => {
                let text = sm.update_text();
                if !text.is_empty() {
                    out.push(json!({"role": instruction_role(model, compat), "content": text}));
                }
            }
            Message::User(u) => match &u.content {
                UserContent::Text(t) => out.push(json!({"role":"user","content":t})),
                // Pi 1.6 leaves out empty text blocks (whitespace is kept), and a message
                // left with nothing, which then does not count as the last role.
                UserContent::Blocks(blocks) => {
                    let parts: Vec<Value> = blocks
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text(t) if t.text.is_empty() => None,
                            ContentBlock::Text(t) => Some(json!({"type":"text","text":t.text})),
                            ContentBlock::Image(i) => Some(data_url(i)),
                            _ => None,
                        })
                        .collect();
                    if parts.is_empty() {
                        last_was_result = was_result;
                    } else {
                        out.push(json!({"role":"user","content":parts}));
                    }
                }
            },
            Message::Assistant(a) => {
                let text: String = a
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text(t) if !t.text.trim().is_empty() => Some(t.text.as_str()),
                        _ => None,
                    })
                    .collect();
                let thinking: Vec<&crate::types::ThinkingContent> = a
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Thinking(t) if !t.thinking.trim().is_empty() => Some(t),
                        _ => None,
                    })
                    .collect();
                let mut msg = json!({"role":"assistant","content":
                    if compat.requires_assistant_after_tool_result
                        || compat.requires_non_null_assistant_content { json!("") } else { Value::Null }});
                if !text.is_empty() {
                    msg["content"] = Value::String(text.clone());
                }
                if !thinking.is_empty() {
                    if compat.requires_thinking_as_text {
                        let joined: Vec<&str> =
                            thinking.iter().map(|t| t.thinking.as_str()).collect();
                        let mut parts = vec![json!({"type":"text","text":joined.join("\n\n")})];
                        if !text.is_empty() {
                            parts.push(json!({"type":"text","text":text}));
                        }
                        msg["content"] = Value::Array(parts);
                    } else if let Some(field) = thinking[0]
                        .thinking_signature
                        .as_deref()
                        .filter(|s| !s.is_empty())
                    {
                        let joined: Vec<&str> =
                            thinking.iter().map(|t| t.thinking.as_str()).collect();
                        msg[field] = Value::String(joined.join("\n"));
                    }
                }
                let calls: Vec<Value> = a
                    .tool_calls()
                    .iter()
                    .map(|c| json!({"id":c.id,"type":"function","function":{"name":c.name,"arguments":c.arguments.to_string()}}))
                    .collect();
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                if compat.requires_reasoning_content_on_assistant_messages
                    && model.reasoning
                    && msg.get("reasoning_content").is_none()
                {
                    msg["reasoning_content"] = json!("");
                }
                let has_content = match &msg["content"] {
                    Value::String(s) => !s.is_empty(),
                    Value::Array(a) => !a.is_empty(),
                    _ => false,
                };
                if has_content || msg.get("tool_calls").is_some() {
                    out.push(msg);
                }
            }
            Message::ToolResult(_) => {
                let mut images = Vec::new();
                while let Some(Message::ToolResult(r)) = msgs.get(i) {
                    let mut tm = json!({"role":"tool",
                        "content": super::tool_result_text(&r.content),
                        "tool_call_id": r.tool_call_id});
                    if compat.requires_tool_result_name && !r.tool_name.is_empty() {
                        tm["name"] = json!(r.tool_name);
                    }
                    out.push(tm);
                    if takes_images {
                        images.extend(r.content.iter().filter_map(|b| match b {
                            ContentBlock::Image(img) => Some(data_url(img)),
                            _ => None,
                        }));
                    }
                    i += 1;
                }
                if images.is_empty() {
                    last_was_result = true;
                } else {
                    if compat.requires_assistant_after_tool_result {
                        out.push(json!({"role":"assistant","content":"I have processed the tool results."}));
                    }
                    let mut parts =
                        vec![json!({"type":"text","text":"Attached image(s) from tool result:"})];
                    parts.extend(images);
                    out.push(json!({"role":"user","content":parts}));
                }
                step(Step {
                    next: i,
                    out: out.len(),
                    last_was_result,
                });
                continue;
            }
        }
        i += 1;
        step(Step {
            next: i,
            out: out.len(),
            last_was_result,
        });
    }
}

/// The role of the system prompt and later system messages (Pi's `instructionRole`):
/// `developer` for a reasoning model when the server takes it, else `system`.
fn instruction_role(model: &Model, compat: &Compat) -> &'static str {
    if model.reasoning && compat.supports_developer_role {
        "developer"
    } else {
        "system"
    }
}

/// The request body for `context` (pure; no I/O), shaped like Pi's.
pub fn build_request(model: &Model, context: &Context, options: &StreamOptions) -> Value {
    let compat = Compat::for_model(model);
    let mut messages = Vec::new();
    if let Some(m) = system_message(model, &compat, context) {
        messages.push(m);
    }
    messages.extend(convert_messages(model, &compat, &context.messages));
    let mut body = body_around(model, &compat, context, options, messages, true);
    if let Some(cc) = cache_control(&compat, options) {
        apply_cache_control(&mut body, &cc);
    }
    body
}

/// Pi 1.6's `getCompatCacheControl`: with `compat.cacheControlFormat: "anthropic"`, the
/// Anthropic `cache_control` value for the request's [`StreamOptions::cache_retention`]
/// (ephemeral; a 1 h `ttl` for [`CacheRetention::Long`] where the server keeps it); none for
/// [`CacheRetention::None`] or another format.
fn cache_control(compat: &Compat, options: &StreamOptions) -> Option<Value> {
    if compat.cache_control_format.as_deref() != Some("anthropic") {
        return None;
    }
    match options.cache_retention() {
        CacheRetention::None => None,
        CacheRetention::Long if compat.supports_long_cache_retention => {
            Some(json!({"type":"ephemeral","ttl":"1h"}))
        }
        CacheRetention::Long | CacheRetention::Short => Some(json!({"type":"ephemeral"})),
    }
}

/// Pi 1.6's `applyAnthropicCacheControl` on a whole body: `cc` on the first system/developer
/// message, the last tool, and the last user/assistant/tool message that holds text (a string
/// content becomes one text part carrying it; in an array, its last text part).
fn apply_cache_control(body: &mut Value, cc: &Value) {
    fn mark(message: &mut Value, cc: &Value) -> bool {
        match &mut message["content"] {
            Value::String(t) if t.is_empty() => false,
            Value::String(t) => {
                let text = std::mem::take(t);
                message["content"] = json!([{"type":"text","text":text,"cache_control":cc}]);
                true
            }
            Value::Array(parts) => match parts.iter_mut().rev().find(|p| p["type"] == "text") {
                Some(part) => {
                    part["cache_control"] = cc.clone();
                    true
                }
                None => false,
            },
            _ => false,
        }
    }
    if let Some(messages) = body["messages"].as_array_mut() {
        if let Some(m) = messages
            .iter_mut()
            .find(|m| m["role"] == "system" || m["role"] == "developer")
        {
            mark(m, cc);
        }
    }
    if let Some(last) = body["tools"].as_array_mut().and_then(|t| t.last_mut()) {
        last["cache_control"] = cc.clone();
    }
    if let Some(messages) = body["messages"].as_array_mut() {
        for m in messages.iter_mut().rev() {
            let role = m["role"].as_str().unwrap_or("");
            if matches!(role, "user" | "assistant" | "tool") && mark(m, cc) {
                break;
            }
        }
    }
}

/// Pi 1.6's `prompt_cache_key` / `prompt_cache_retention` for `openai-completions`: the key
/// (the session id, cut to 64 characters) unless the retention is [`CacheRetention::None`],
/// when `compat.promptCacheKeyMode` is `enabled`, or `auto` (unset) and the server is
/// `api.openai.com` or the retention is long and the server keeps it; `"24h"` for a long
/// retention the server keeps.
fn apply_prompt_cache(model: &Model, compat: &Compat, options: &StreamOptions, body: &mut Value) {
    let retention = options.cache_retention();
    let long = retention == CacheRetention::Long && compat.supports_long_cache_retention;
    let key_supported = match compat.prompt_cache_key_mode.as_deref() {
        Some("enabled") => true,
        None | Some("auto") => model.base_url.contains("api.openai.com") || long,
        Some(_) => false,
    };
    if retention != CacheRetention::None && key_supported {
        if let Some(id) = &options.session_id {
            body["prompt_cache_key"] = json!(id.chars().take(64).collect::<String>());
        }
    }
    if long {
        body["prompt_cache_retention"] = json!("24h");
    }
}

/// Pi 1.6's session affinity headers for `openai-completions` (`createClient`), only with
/// `compat.sendSessionAffinityHeaders` and a request that caches (not
/// [`CacheRetention::None`]): `x-session-id` with the `openrouter` format; otherwise
/// `x-client-request-id` and `x-session-affinity`, and `session_id` first with the `openai`
/// format.
///
/// Reads only the two compat keys it needs (not [`Compat::for_model`]: every request asks).
pub fn session_headers(model: &Model, options: &StreamOptions) -> Vec<(String, String)> {
    let openrouter = || model.provider == "openrouter" || model.base_url.contains("openrouter.ai");
    let Some(id) = options
        .session_id
        .as_deref()
        .filter(|_| {
            model
                .compat
                .get("sendSessionAffinityHeaders")
                .and_then(Value::as_bool)
                .unwrap_or_else(openrouter)
        })
        .filter(|_| options.cache_retention() != CacheRetention::None)
    else {
        return Vec::new();
    };
    let id = id.to_string();
    let format = match model
        .compat
        .get("sessionAffinityFormat")
        .and_then(Value::as_str)
    {
        Some(f) => f,
        None if openrouter() => "openrouter",
        None => "openai",
    };
    match format {
        "openrouter" => vec![("x-session-id".into(), id)],
        format => {
            let mut h = Vec::new();
            if format == "openai" {
                h.push(("session_id".into(), id.clone()));
            }
            h.push(("x-client-request-id".into(), id.clone()));
            h.push(("x-session-affinity".into(), id));
            h
        }
    }
}

/// The system prompt's message, when there is a prompt.
fn system_message(model: &Model, compat: &Compat, context: &Context) -> Option<Value> {
    (!context.system_prompt.is_empty()).then(|| {
        let role = instruction_role(model, compat);
        json!({"role":role,"content":context.system_prompt})
    })
}

/// The same bytes as `serde_json::to_vec(&build_request(model, context, options))`, reusing
/// what `cache` kept of the previous request: the messages of the history both requests share
/// are not transformed, converted or serialised again (a tool round then costs the new
/// messages, not the whole history), and neither are the system prompt and the tool specs
/// when they are unchanged (each compared whole with the previous request's; the tool specs
/// not compared when they come with the previous request's [`StreamOptions::tools_generation`]).
///
/// The history: when the previous request's history is a prefix of this one (compared
/// message by message, unless the caller vouches for it: [`StreamOptions::history_kept`]) and [`Transform::can_extend`] says its request view stays as it was,
/// only the new messages go through the transform, continuing its state; otherwise the whole
/// history is transformed and the shared part is the longest equal prefix of the two
/// transformed histories. Either way the serialised messages are cut back to the last
/// conversion step that ended before the first difference. A different model or compat
/// starts over.
pub fn request_bytes(
    model: &Model,
    context: &Context,
    options: &StreamOptions,
    cache: &RequestCache,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut slot = cache.slot.lock().ok();
    // The previous request's state when it was to this model; its `Compat` then holds (the
    // key holds everything `Compat::for_model` reads): resolved once per model, not per
    // request.
    let prior = slot
        .as_mut()
        .and_then(|s| s.take())
        .filter(|p| p.key.is_of(model));
    let compat = match &prior {
        Some(p) => p.compat.clone(),
        None => Compat::for_model(model),
    };
    if cache_control(&compat, options).is_some() {
        // Anthropic-format cache marks go on the last message with text, which may be a
        // cached one.
        if let (Some(slot), Some(p)) = (slot.as_mut(), prior) {
            **slot = Some(p);
        }
        return serde_json::to_vec(&build_request(model, context, options));
    }
    let history = &context.messages;
    let (mut p, same) = match prior {
        Some(mut p)
            if p.input.len() <= history.len()
                && p.transform.can_extend(&history[p.input.len()..])
                && (p.input.len() <= options.history_kept
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
            let (key, same, bytes, steps, tools, system) = match prior {
                Some(p) => (
                    p.key,
                    p.msgs.iter().zip(&msgs).take_while(|(a, b)| a == b).count(),
                    p.bytes,
                    p.steps,
                    p.tools,
                    p.system,
                ),
                None => (PrefixKey::of(model), 0, Vec::new(), Vec::new(), None, None),
            };
            let p = Prefix {
                key,
                compat: compat.clone(),
                input: history.clone(),
                transform,
                msgs,
                bytes,
                steps,
                tools,
                system,
            };
            (p, same)
        }
    };
    let entry = match p.steps.iter().rposition(|s| s.0.next < same) {
        Some(n) => {
            p.bytes.truncate(p.steps[n].1);
            p.steps.truncate(n + 1);
            p.steps[n].0
        }
        None => {
            p.bytes.clear();
            p.steps.clear();
            Step::default()
        }
    };
    let mut out = Vec::new();
    let mut new_steps = Vec::new();
    convert_from(
        model,
        &compat,
        &p.msgs,
        entry.next,
        entry.last_was_result,
        &mut out,
        |s| new_steps.push(s),
    );
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
    for s in new_steps {
        let len = s.out.checked_sub(1).map_or(base, |k| ends[k]);
        p.steps.push((s, len));
    }
    let Some(shell) = spliced_shell(model, &compat, context, options, &mut p.tools)? else {
        return serde_json::to_vec(&build_request(model, context, options));
    };
    let (at, shell) = shell;
    let role = instruction_role(model, &compat);
    let system = match p.system.take() {
        Some(s)
            if !context.system_prompt.is_empty() && s.0 == role && s.1 == context.system_prompt =>
        {
            Some(s)
        }
        _ => system_message(model, &compat, context)
            .map(|m| serde_json::to_vec(&m))
            .transpose()?
            .map(|bytes| (role, context.system_prompt.clone(), bytes)),
    };
    let mut body = Vec::with_capacity(
        shell.len() + p.bytes.len() + system.as_ref().map_or(0, |s| s.2.len()) + 1,
    );
    body.extend_from_slice(&shell[..at]);
    if let Some(system) = &system {
        body.extend_from_slice(&system.2);
        if !p.bytes.is_empty() {
            body.push(b',');
        }
    }
    body.extend_from_slice(&p.bytes);
    body.extend_from_slice(&shell[at..]);
    p.system = system;
    if let Some(slot) = slot.as_mut() {
        **slot = Some(p);
    }
    Ok(body)
}

/// The request body around its messages, serialised, and where in it the messages go (just
/// inside `"messages":[`): built with an empty `messages` and no tools, the tool list then
/// put in as the body's last key from `tools` (the previous request's specs, their strict
/// flag and bytes) when the specs and flag are the same, else serialised and kept there.
/// `None` when the empty `messages` cannot be found (the caller builds the whole body).
fn spliced_shell(
    model: &Model,
    compat: &Compat,
    context: &Context,
    options: &StreamOptions,
    tools: &mut Option<ToolBytes>,
) -> Result<Option<(usize, Vec<u8>)>, serde_json::Error> {
    let mut shell = serde_json::to_vec(&body_around(
        model,
        compat,
        context,
        options,
        Vec::new(),
        false,
    ))?;
    const EMPTY: &[u8] = b"\"messages\":[]";
    let Some(at) = shell.windows(EMPTY.len()).position(|w| w == EMPTY) else {
        return Ok(None);
    };
    if !context.tools.is_empty() {
        let strict = compat.supports_strict_mode;
        let generation = options.tools_generation;
        let bytes = match tools.take() {
            Some(t)
                if t.strict == strict
                    && ((generation != 0 && t.generation == generation)
                        || t.specs == context.tools) =>
            {
                ToolBytes { generation, ..t }
            }
            _ => ToolBytes {
                specs: context.tools.clone(),
                generation,
                strict,
                bytes: serde_json::to_vec(&tools_value(compat, &context.tools))?,
            },
        };
        if shell.pop() != Some(b'}') {
            return Ok(None);
        }
        shell.extend_from_slice(b",\"tools\":");
        shell.extend_from_slice(&bytes.bytes);
        shell.push(b'}');
        *tools = Some(bytes);
    }
    Ok(Some((at + EMPTY.len() - 1, shell)))
}

/// What one conversation's previous request left for its next one ([`request_bytes`]): its
/// history as given and its [`Transform`] state, the transformed history, those messages
/// serialised (comma-separated, without brackets) and where each conversion step ended in
/// them; the system prompt's and the tool list's bytes. One per conversation: the agent loop
/// keeps one for its run; requests of other conversations must not share it (they would only
/// evict each other). Memory: about the history twice more and its serialised form once.
#[derive(Debug, Default)]
pub struct RequestCache {
    slot: std::sync::Mutex<Option<Prefix>>,
    /// The same for an `anthropic-messages` or `openai-responses` model
    /// ([`super::prefix::request_bytes`]).
    pub(crate) steps: std::sync::Mutex<Option<super::prefix::Prefix>>,
    /// The conversation's model's endpoint, parsed once ([`super::UrlSlot`]).
    pub(crate) url: super::UrlSlot,
}

#[derive(Debug)]
struct Prefix {
    key: PrefixKey,
    compat: Compat,
    /// The history of the last request, as given.
    input: Vec<Message>,
    /// The transform's state after `input`.
    transform: Transform,
    /// `input` transformed.
    msgs: Vec<Message>,
    bytes: Vec<u8>,
    /// After each step: where it ended and `bytes.len()` then.
    steps: Vec<(Step, usize)>,
    /// The last request's tool list.
    tools: Option<ToolBytes>,
    /// The last request's system message: its role, the prompt and the message's bytes.
    system: Option<(&'static str, String, Vec<u8>)>,
}

/// A tool list serialised: the specs (and the [`StreamOptions::tools_generation`] they were
/// last given with), whether `strict: false` was added, the bytes.
#[derive(Debug)]
struct ToolBytes {
    specs: Vec<ToolSpec>,
    generation: u64,
    strict: bool,
    bytes: Vec<u8>,
}

/// The request body around `messages`: model, stream options, output limit, reasoning, tools.
fn body_around(
    model: &Model,
    compat: &Compat,
    context: &Context,
    options: &StreamOptions,
    messages: Vec<Value>,
    with_tools: bool,
) -> Value {
    let mut body = json!({
        "model": model.id,
        "messages": messages,
        "stream": true,
    });
    if compat.supports_usage_in_streaming {
        body["stream_options"] = json!({"include_usage": true});
    }
    if compat.supports_store {
        body["store"] = json!(false);
    }
    let output = options.output_tokens(model);
    body[compat.max_tokens_field.as_str()] = json!(output);
    apply_prompt_cache(model, compat, options, &mut body);
    if !context.tools.is_empty() {
        if compat.zai_tool_stream {
            body["tool_stream"] = json!(true);
        }
    } else if compat.requires_tools_with_tool_history
        && context.messages.iter().any(|m| match m {
            Message::ToolResult(_) => true,
            Message::Assistant(a) => !a.tool_calls().is_empty(),
            Message::User(_) | Message::System(_) => false,
        })
    {
        // Proxies in front of Anthropic need `tools` whenever the history has tool turns.
        body["tools"] = json!([]);
    }
    if let Some(priority) = &compat.vllm_priority {
        body["priority"] = priority.clone();
    }
    apply_reasoning(model, compat, output, &mut body);
    apply_routing(model, &mut body);
    // Pi 1.6's `resolveSamplingParams`: last over the named fields (before the tools, which
    // `request_bytes` puts in as the last key).
    model.apply_sampling_params(&mut body);
    // The last key: `request_bytes` puts the list in after serialising the rest.
    if with_tools && !context.tools.is_empty() {
        body["tools"] = tools_value(compat, &context.tools);
    }
    body
}

/// Pi 1.6's provider routing fields, read from the model's `compat` as given (not the
/// resolved flags): `compat.openRouterRouting` (any value JavaScript holds true, `{}` too)
/// as `provider`; `compat.vercelGatewayRouting` with `only` or `order` as
/// `providerOptions.gateway` holding those two.
fn apply_routing(model: &Model, body: &mut Value) {
    if let Some(routing) = model.compat.get("openRouterRouting").filter(|v| truthy(v)) {
        body["provider"] = routing.clone();
    }
    if let Some(routing) = model
        .compat
        .get("vercelGatewayRouting")
        .filter(|v| truthy(v))
    {
        let mut gateway = serde_json::Map::new();
        for key in ["only", "order"] {
            if let Some(v) = routing.get(key).filter(|v| truthy(v)) {
                gateway.insert(key.to_string(), v.clone());
            }
        }
        if !gateway.is_empty() {
            body["providerOptions"] = json!({ "gateway": gateway });
        }
    }
}

/// The request's `tools`: each spec as a `function`, with `strict` where the server takes it
/// (`compat.supportsStrictMode`): `true` with the strict schema for a tool that asks for
/// JSON-schema sampling and has a strict form, else `false` (Pi 1.6's `convertTools`,
/// [`super::strict::tool_parameters`]).
fn tools_value(compat: &Compat, tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            let (parameters, strict) =
                super::strict::tool_parameters(t, compat.supports_strict_mode, None);
            let mut f = json!({"name":t.name,"description":t.description,"parameters":parameters});
            if compat.supports_strict_mode {
                f["strict"] = json!(strict);
            }
            json!({"type":"function","function":f})
        })
        .collect()
}

/// Maps the model's thinking level onto the request per `compat.thinkingFormat`, as Pi 1.6's
/// `buildParams` does; nothing for a model that does not reason or when no level is set. The
/// effort is the level clamped to the model's, none for `off`; "mapped" is its
/// `thinkingLevelMap` value (`null` there: a level the provider lacks):
/// - `zai`: `thinking` `{type: enabled, clear_thinking: false}` / `{type: disabled}`, and
///   with `supportsReasoningEffort` the mapped (else the level) string as `reasoning_effort`;
/// - `qwen`: `enable_thinking`, and `reasoning_effort` as for `zai`;
/// - `qwen-chat-template`: `chat_template_kwargs` `{enable_thinking, preserve_thinking: true}`;
/// - `chat-template` / `baseten`: `chat_template_kwargs` / `chat_template_args` from
///   `compat.chatTemplateKwargs` / `chatTemplateArgs` ([`chat_template_values`]); `baseten`
///   also the mapped (off: `off`'s) string as `reasoning_effort`;
/// - `deepseek`: `thinking.type` enabled / disabled (none when `off` maps to `null`) and the
///   mapped effort as `reasoning_effort`;
/// - `openrouter`: `reasoning.effort`, the mapped level, or for `off` `off`'s value or `none`;
/// - `ant-ling`: `reasoning.effort` when the level maps to a string;
/// - `together`: `reasoning.enabled` and the mapped effort as `reasoning_effort`;
/// - `string-thinking`: `thinking` as a string (the mapped level; `off`: its value or `none`);
/// - otherwise (`openai`) with `supportsReasoningEffort`: `reasoning_effort`, the mapped
///   level, or for `off` `off`'s value when it is a string.
///
/// Then, whatever the format, the level's thinking budget ([`Model::thinking_budgets`],
/// settings `thinkingBudgets`) capped to leave 1,024 tokens of the request's `output` limit
/// under [`Compat::thinking_token_budget_field`] when it is more than 0.
fn apply_reasoning(model: &Model, compat: &Compat, output: u64, body: &mut Value) {
    let Some(level) = model.thinking_level.filter(|_| model.reasoning) else {
        return;
    };
    let level = model.clamp_thinking_level(level);
    let effort = (level != ThinkingLevel::Off).then_some(level);
    let map = |l: &str| -> Option<Value> {
        model
            .thinking_level_map
            .as_ref()
            .and_then(|m| m.get(l))
            .cloned()
    };
    // `map[level] ?? level`: the mapped value unless absent or `null`.
    let mapped_or_level = |e: ThinkingLevel| -> Value {
        map(e.as_str())
            .filter(|v| !v.is_null())
            .unwrap_or_else(|| json!(e.as_str()))
    };
    // `map.off !== null`: `off` is not marked unsupported.
    let off_allowed = map("off").is_none_or(|v| !v.is_null());
    let sre = compat.supports_reasoning_effort;
    let budget = effort.and_then(|e| {
        let b = model
            .thinking_budgets
            .for_level(e)
            .min(output.saturating_sub(1_024));
        (b > 0).then_some(b)
    });
    match compat.thinking_format.as_str() {
        "zai" => {
            body["thinking"] = match effort {
                Some(_) => json!({"type": "enabled", "clear_thinking": false}),
                None => json!({"type": "disabled"}),
            };
            if let Some(e) = effort.filter(|_| sre) {
                // `mapped === undefined ? level : mapped`, kept only as a string.
                let v = map(e.as_str()).unwrap_or_else(|| json!(e.as_str()));
                if v.is_string() {
                    body["reasoning_effort"] = v;
                }
            }
        }
        "qwen" => {
            body["enable_thinking"] = json!(effort.is_some());
            if let Some(e) = effort.filter(|_| sre) {
                let v = mapped_or_level(e);
                if v.is_string() {
                    body["reasoning_effort"] = v;
                }
            }
        }
        "qwen-chat-template" => {
            body["chat_template_kwargs"] =
                json!({"enable_thinking": effort.is_some(), "preserve_thinking": true});
        }
        "chat-template" => {
            if let Some(v) =
                chat_template_values(model, effort, &compat.chat_template_kwargs, budget)
            {
                body["chat_template_kwargs"] = v;
            }
        }
        "baseten" => {
            if let Some(v) = chat_template_values(model, effort, &compat.chat_template_args, budget)
            {
                body["chat_template_args"] = v;
            }
            if sre {
                let v = match effort {
                    Some(e) => map(e.as_str()).unwrap_or_else(|| json!(e.as_str())),
                    None => map("off").unwrap_or(Value::Null),
                };
                if v.is_string() {
                    body["reasoning_effort"] = v;
                }
            }
        }
        "deepseek" => {
            if effort.is_some() {
                body["thinking"] = json!({"type": "enabled"});
            } else if off_allowed {
                body["thinking"] = json!({"type": "disabled"});
            }
            if let Some(e) = effort.filter(|_| sre) {
                body["reasoning_effort"] = mapped_or_level(e);
            }
        }
        "openrouter" => match effort {
            Some(e) => body["reasoning"] = json!({"effort": mapped_or_level(e)}),
            None if off_allowed => {
                body["reasoning"] = json!({"effort": map("off").unwrap_or(json!("none"))})
            }
            None => {}
        },
        "ant-ling" => {
            if let Some(v) = effort
                .and_then(|e| map(e.as_str()))
                .filter(Value::is_string)
            {
                body["reasoning"] = json!({ "effort": v });
            }
        }
        "together" => {
            body["reasoning"] = json!({"enabled": effort.is_some()});
            if let Some(e) = effort.filter(|_| sre) {
                body["reasoning_effort"] = mapped_or_level(e);
            }
        }
        "string-thinking" => match effort {
            Some(e) => body["thinking"] = mapped_or_level(e),
            None if off_allowed => body["thinking"] = map("off").unwrap_or(json!("none")),
            None => {}
        },
        _ if sre => match effort {
            Some(e) => body["reasoning_effort"] = mapped_or_level(e),
            None => {
                if let Some(off) = map("off").filter(Value::is_string) {
                    body["reasoning_effort"] = off;
                }
            }
        },
        _ => {}
    }
    if let (Some(field), Some(budget)) = (&compat.thinking_token_budget_field, budget) {
        body[field.as_str()] = json!(budget);
    }
}

/// Pi 1.6's `buildChatTemplateValues`: each entry of `values` resolved — a value that is not
/// an object (or array) as it is; an object with `omitWhenOff` left out when thinking is off;
/// `{"$var": "thinking.enabled"}` whether it is on; `{"$var": "thinking.budget"}` the
/// thinking budget (left out without one); any other object the level's `thinkingLevelMap`
/// value (`off`'s when off; the level itself when unmapped; left out when it maps to a
/// non-string). `None` when nothing is left.
fn chat_template_values(
    model: &Model,
    effort: Option<ThinkingLevel>,
    values: &serde_json::Map<String, Value>,
    budget: Option<u64>,
) -> Option<Value> {
    let mut out = serde_json::Map::new();
    for (key, value) in values {
        let resolved = match value {
            Value::Object(_) | Value::Array(_) => {
                if effort.is_none() && value.get("omitWhenOff").is_some_and(truthy) {
                    None
                } else if value.get("$var") == Some(&json!("thinking.enabled")) {
                    Some(json!(effort.is_some()))
                } else if value.get("$var") == Some(&json!("thinking.budget")) {
                    budget.map(|b| json!(b))
                } else {
                    let level = effort.map_or("off", ThinkingLevel::as_str);
                    let mapped = model.thinking_level_map.as_ref().and_then(|m| m.get(level));
                    match mapped {
                        None => effort.map(|e| json!(e.as_str())),
                        Some(v) if v.is_string() => Some(v.clone()),
                        Some(_) => None,
                    }
                }
            }
            other => Some(other.clone()),
        };
        if let Some(v) = resolved {
            out.insert(key.clone(), v);
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// `finish_reason` → stop reason, or the error text for a failure reason (Pi's mapping).
fn map_finish(reason: &str) -> Result<StopReason, String> {
    match reason {
        "stop" | "end" => Ok(StopReason::Stop),
        "length" => Ok(StopReason::Length),
        "tool_calls" | "function_call" => Ok(StopReason::ToolUse),
        other => Err(format!("Provider finish_reason: {other}")),
    }
}

/// Pi 1.6's `parseChunkUsage`: cache reads are `prompt_tokens_details.cached_tokens`, else
/// DeepSeek's `prompt_cache_hit_tokens`, else Kimi's top-level `cached_tokens` (a reported 0
/// stops the search, as JavaScript's `??`); cache writes `prompt_tokens_details.
/// cache_write_tokens`, counted apart from the reads (not subtracted from them); `input` the
/// prompt's rest; `reasoning` `completion_tokens_details.reasoning_tokens`, else a top-level
/// `reasoning_tokens`, else 0 (part of `output`).
fn parse_usage(u: &Value) -> Usage {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let prompt = n(&u["prompt_tokens"]);
    let present = |v: &Value| (!v.is_null()).then(|| n(v));
    let cache_read = present(&u["prompt_tokens_details"]["cached_tokens"])
        .or_else(|| present(&u["prompt_cache_hit_tokens"]))
        .or_else(|| present(&u["cached_tokens"]))
        .unwrap_or(0);
    let cache_write = n(&u["prompt_tokens_details"]["cache_write_tokens"]);
    // JavaScript's `||`: a 0 in the first field falls through to the second.
    let reasoning = match n(&u["completion_tokens_details"]["reasoning_tokens"]) {
        0 => n(&u["reasoning_tokens"]),
        r => r,
    };
    Usage {
        input: prompt.saturating_sub(cache_read + cache_write),
        output: n(&u["completion_tokens"]),
        cache_read,
        cache_write,
        reasoning: Some(reasoning),
        ..Usage::default()
    }
}

/// One streamed chunk, read borrowed ([`read_chunk`]): the fields [`stream_body`] reads, each
/// as `Value`'s accessors read it (`error` and `usage` kept whole; they come once). The
/// `Value`s that come rarely are boxed: the chunk structs stay small, and reading one moves
/// them several times.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct StreamChunk<'a> {
    error: Option<Box<Value>>,
    #[serde(borrow)]
    id: Str<'a>,
    #[serde(borrow)]
    model: Str<'a>,
    usage: Option<Box<Value>>,
    /// `choices[0]`; the other choices are not read.
    #[serde(borrow)]
    choices: First<ChunkChoice<'a>>,
}

/// `choices[0]` of a [`StreamChunk`]. The delta is boxed: its four strings make it the bulk
/// of a chunk, and a chunk struct of 200 bytes was copied (`memcpy`) a dozen times per chunk
/// as the layers of the reading return it; one allocation costs less (callgrind: about 300
/// fewer instructions per chunk, docs/benchmarks.md round 36).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ChunkChoice<'a> {
    #[serde(borrow)]
    finish_reason: Str<'a>,
    #[serde(borrow)]
    delta: Obj<Box<ChunkDelta<'a>>>,
    usage: Option<Box<Value>>,
}

/// `choices[0].delta` of a [`StreamChunk`]; tool-call fragments kept as `Value`s.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ChunkDelta<'a> {
    #[serde(borrow)]
    content: Str<'a>,
    #[serde(borrow)]
    reasoning_content: Str<'a>,
    #[serde(borrow)]
    reasoning: Str<'a>,
    #[serde(borrow)]
    reasoning_text: Str<'a>,
    tool_calls: Option<Box<Value>>,
}

/// Reads the stream into `b`: `Ok(Some(reason))` for a complete response, `Ok(None)` when the
/// consumer went away, `Err` for a failure (the partial content stays in `b`).
pub(super) async fn stream_body(
    request: super::Request<'_>,
    b: &mut MessageBuilder,
) -> Result<Option<StopReason>, ProviderError> {
    let (model, body, session, cancel, timeout, endpoint) = request.parts();
    let url = join_url(&model.base_url, "chat/completions");
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
    headers.extend(session.iter().cloned());
    let mut sse = open_sse(
        &crate::errors::HttpWording::Completions,
        &url,
        endpoint,
        &headers,
        body,
        cancel,
        timeout,
    )
    .await?;
    let mut finish: Option<Result<StopReason, String>> = None;
    // Key of the tool call the last id-less, index-less fragment continues (STRM-01).
    let mut last_call: Option<(String, String)> = None; // (key, id)
    let mut have_response_id = false;
    let mut have_response_model = false;
    let mut thinking_open = false;
    // The stream's end marker was seen: `[DONE]` or a finish reason (case 19.1).
    let mut done = false;
    // Where a chunk read through its `Value` is written out again (rare: see `read_chunk`).
    let mut spill = String::new();
    // What a choice without a delta reads as (made once, not per chunk).
    let no_delta = ChunkDelta::default();
    while let Some(ev) = match sse.queued() {
        Some(ev) => Some(ev),
        None => sse.next(cancel, b).await?,
    } {
        let chunk: StreamChunk = match read_chunk(&ev, &mut spill)? {
            Some(Chunk::Read(c)) => c,
            Some(Chunk::Skip) => continue,
            None => {
                done = true;
                break;
            }
        };
        if let Some(err) = chunk.error.as_ref().filter(|e| !e.is_null()) {
            let text = err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| err.to_string());
            let kind = err
                .get("code")
                .and_then(Value::as_str)
                .or_else(|| err.get("type").and_then(Value::as_str));
            return Err(classify_stream_error(kind, &text));
        }
        if !have_response_id {
            if let Some(id) = chunk.id.as_str() {
                have_response_id = true;
                b.with_message(|m| m.response_id = Some(id.to_string()));
            }
        }
        // Pi's `responseModel`: the first chunk model that is not the requested id.
        if !have_response_model {
            if let Some(name) = chunk
                .model
                .as_str()
                .filter(|n| !n.is_empty() && *n != model.id)
            {
                have_response_model = true;
                b.with_message(|m| m.response_model = Some(name.to_string()));
            }
        }
        let choice = chunk.choices.0.as_ref();
        // Usage usually comes in a final `choices: []` chunk; some servers put it on the choice.
        if let Some(u) = chunk.usage.as_ref().filter(|u| u.is_object()).or_else(|| {
            choice
                .and_then(|c| c.usage.as_ref())
                .filter(|u| u.is_object())
        }) {
            b.set_usage(parse_usage(u));
            if crate::models::is_openrouter(model) {
                b.with_message(|m| {
                    crate::models::apply_openrouter_reported_cost(&mut m.usage.cost, u)
                });
            }
        }
        let Some(choice) = choice else {
            continue;
        };
        if let Some(r) = choice.finish_reason.as_str() {
            finish = Some(map_finish(r));
            b.with_message(|m| m.raw_stop_reason = Some(r.to_string()));
        }
        let delta = choice.delta.0.as_deref().unwrap_or(&no_delta);
        let mut step = Ok(());
        if let Some(t) = delta.content.as_str().filter(|t| !t.is_empty()) {
            if !b.append_delta("text", false, t) {
                step = step.and(b.text_delta("text", t).await);
            }
        }
        // The first non-empty reasoning field of the chunk (Pi: some servers send the same
        // text in two fields); the field name becomes the block's signature for replay.
        if let Some((field, t)) = [
            ("reasoning_content", &delta.reasoning_content),
            ("reasoning", &delta.reasoning),
            ("reasoning_text", &delta.reasoning_text),
        ]
        .into_iter()
        .find_map(|(f, v)| v.as_str().filter(|t| !t.is_empty()).map(|t| (f, t)))
        {
            if !b.append_delta("thinking", true, t) {
                step = step.and(b.thinking_delta("thinking", t).await);
            }
            if !thinking_open {
                thinking_open = true;
                b.thinking_signature("thinking", field);
            }
        }
        if let Some(calls) = delta.tool_calls.as_ref().and_then(|v| v.as_array()) {
            for tc in calls {
                let id = tc
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty());
                let name = tc["function"].get("name").and_then(Value::as_str);
                let key = match (tc.get("index").and_then(Value::as_u64), id, &last_call) {
                    (Some(i), _, _) => format!("i{i}"),
                    (None, Some(id), Some((k, last_id))) if id == last_id => k.clone(),
                    (None, Some(id), _) => format!("id:{id}"),
                    (None, None, Some((k, _))) => k.clone(),
                    (None, None, None) => "i0".to_string(),
                };
                if !b.is_open(&key) {
                    step = step.and(
                        b.tool_call_start(&key, id.unwrap_or(""), name.unwrap_or(""), None)
                            .await,
                    );
                } else {
                    b.tool_call_fill(&key, id, name);
                }
                let known_id = id.map(str::to_string).or_else(|| {
                    last_call
                        .as_ref()
                        .filter(|(k, _)| *k == key)
                        .map(|(_, i)| i.clone())
                });
                last_call = Some((key.clone(), known_id.unwrap_or_default()));
                match tc["function"].get("arguments") {
                    Some(Value::String(s)) => step = step.and(b.tool_call_delta(&key, s).await),
                    Some(v @ Value::Object(_)) => {
                        step = step.and(b.tool_call_delta(&key, &v.to_string()).await)
                    }
                    _ => {}
                }
            }
        }
        if step.is_err() {
            return Ok(None);
        }
    }
    // Calls without an id get a stable one so results can pair with them.
    b.with_message(|m| {
        let mut n = 0;
        for block in m.content.iter_mut() {
            if let ContentBlock::ToolCall(c) = block {
                n += 1;
                if c.id.is_empty() {
                    c.id = format!("call_{n}");
                }
            }
        }
    });
    let has_calls = b.has_tool_calls();
    let has_text = b.has_text();
    // A body that ends with neither `[DONE]` nor a finish reason: finished when what streamed
    // is complete, else cut (a retryable error; case 19.1, STRM-04: `end::judge`).
    if !done && finish.is_none() {
        return super::end::judge(
            model,
            b,
            super::end::UnmarkedEnd {
                clean: sse.ended_cleanly(),
                ends_blocks: false,
                cut: "stream ended before the response was complete (no finish_reason or [DONE])",
                empty: "stream ended without a response",
            },
        )
        .map(Some);
    }
    let reason = match finish {
        Some(Err(message)) => return Err(ProviderError::Provider { message }),
        Some(Ok(StopReason::Stop)) if has_calls => StopReason::ToolUse,
        Some(Ok(r)) => r,
        // STRM-04: `[DONE]` without a finish_reason. Calls → toolUse (their arguments were
        // parsed when their blocks closed; an unparsable one never runs), text → stop
        // (lenient, with a warning: servers that never send a finish reason for plain text;
        // `compat.requireFinishReason: true` makes it a retryable error), nothing → retryable
        // error.
        None if has_calls => StopReason::ToolUse,
        None if has_text
            && model
                .compat
                .get("requireFinishReason")
                .and_then(Value::as_bool)
                == Some(true) =>
        {
            return Err(ProviderError::Network {
                message: "stream ended without finish_reason".into(),
            })
        }
        None if has_text => {
            tracing::warn!(
                "{}/{}: text-only stream ended without finish_reason; treating it as stop",
                model.provider,
                model.id
            );
            StopReason::Stop
        }
        None => {
            return Err(ProviderError::Network {
                message: "stream ended without a response".into(),
            })
        }
    };
    Ok(Some(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reasoning_model(provider: &str) -> Model {
        let mut m = Model::new(crate::Api::OpenaiCompletions, provider, "m", "http://x/v1");
        m.reasoning = true;
        m
    }

    #[test]
    fn thinking_levels_per_format() {
        let ctx = Context::default();
        let opts = StreamOptions::default();
        let mut m = reasoning_model("openai");
        m.thinking_level_map = Some(json!({"off": null, "xhigh": "xhigh"}));
        m.thinking_level = Some(ThinkingLevel::High);
        assert_eq!(build_request(&m, &ctx, &opts)["reasoning_effort"], "high");
        m.thinking_level = Some(ThinkingLevel::Off); // unsupported: clamped up to minimal
        assert_eq!(
            build_request(&m, &ctx, &opts)["reasoning_effort"],
            "minimal"
        );
        m.thinking_level = None;
        assert!(build_request(&m, &ctx, &opts)
            .get("reasoning_effort")
            .is_none());
        let mut d = reasoning_model("deepseek");
        d.thinking_level = Some(ThinkingLevel::Off);
        let b = build_request(&d, &ctx, &opts);
        assert_eq!(
            (b["thinking"].clone(), b.get("reasoning_effort").cloned()),
            (json!({"type":"disabled"}), None)
        );
        // Z.ai (detected: no `reasoning_effort`) switches thinking with its `thinking` object.
        let mut z = reasoning_model("zai");
        z.thinking_level = Some(ThinkingLevel::Low);
        let b = build_request(&z, &ctx, &opts);
        assert_eq!(
            (
                b["thinking"].clone(),
                b.get("reasoning_effort"),
                b.get("enable_thinking")
            ),
            (json!({"type":"enabled","clear_thinking":false}), None, None)
        );
        z.thinking_level = Some(ThinkingLevel::Off);
        assert_eq!(
            build_request(&z, &ctx, &opts)["thinking"],
            json!({"type":"disabled"})
        );
        let mut q = reasoning_model("local");
        q.compat = json!({"thinkingFormat": "qwen"});
        q.thinking_level = Some(ThinkingLevel::High);
        let b = build_request(&q, &ctx, &opts);
        assert_eq!(
            (b["enable_thinking"].clone(), b["reasoning_effort"].clone()),
            (json!(true), json!("high"))
        );
        let mut o = reasoning_model("openrouter");
        o.thinking_level = Some(ThinkingLevel::Off);
        assert_eq!(
            build_request(&o, &ctx, &opts)["reasoning"],
            json!({"effort":"none"})
        );
    }

    /// Pi 1.6's `chat-template` values, thinking budget field, priority and routing: each
    /// variable resolved, the budget capped to leave 1,024 of the output limit, the routing
    /// objects as given.
    #[test]
    fn chat_template_budget_priority_and_routing() {
        let ctx = Context::default();
        let opts = StreamOptions::default();
        let mut m = reasoning_model("local");
        m.max_tokens = 4_096;
        m.compat = json!({"thinkingFormat": "chat-template",
            "chatTemplateKwargs": {"on": {"$var": "thinking.enabled"},
                "budget": {"$var": "thinking.budget"}, "level": {}, "lit": 3,
                "gone": {"omitWhenOff": true}},
            "thinkingTokenBudgetField": "thinking_budget", "vllmPriority": 5,
            "openRouterRouting": {}, "vercelGatewayRouting": {"order": ["b"]}});
        m.thinking_level = Some(ThinkingLevel::Medium);
        let b = build_request(&m, &ctx, &opts);
        assert_eq!(
            (
                b["chat_template_kwargs"].clone(),
                b["thinking_budget"].clone(),
                b["priority"].clone(),
                b["provider"].clone(),
                b["providerOptions"].clone()
            ),
            (
                json!({"on": true, "budget": 3072, "level": "medium", "lit": 3, "gone": "medium"}),
                json!(3072),
                json!(5),
                json!({}),
                json!({"gateway": {"order": ["b"]}})
            )
        );
        m.thinking_level = Some(ThinkingLevel::Off);
        let b = build_request(&m, &ctx, &opts);
        assert_eq!(
            (b["chat_template_kwargs"].clone(), b.get("thinking_budget")),
            (json!({"on": false, "lit": 3}), None)
        );
    }

    /// `"tools": []` goes with tool history only when `compat.requiresToolsWithToolHistory`
    /// asks for it, as Pi 1.6; a tool-call-only answer's content is `""` with
    /// `requiresNonNullAssistantContent`.
    #[test]
    fn tool_history_and_non_null_content() {
        let opts = StreamOptions::default();
        let ctx = Context {
            system_prompt: String::new(),
            messages: vec![call("c1", "m"), result("c1", false)],
            tools: Vec::new(),
        };
        let mut m = Model::new(crate::Api::OpenaiCompletions, "local", "m", "http://x/v1");
        assert!(build_request(&m, &ctx, &opts).get("tools").is_none());
        m.compat = json!({"requiresToolsWithToolHistory": true});
        assert_eq!(build_request(&m, &ctx, &opts)["tools"], json!([]));
        let mut ctx = ctx;
        ctx.messages[0] = msg(json!({"role":"assistant","content":[
            {"type":"toolCall","id":"c1","name":"read","arguments":{}}],
            "api":"openai-completions","provider":"local","model":"m",
            "stopReason":"toolUse","timestamp":1}));
        m.compat = json!({"requiresNonNullAssistantContent": true});
        assert_eq!(
            build_request(&m, &ctx, &opts)["messages"][0]["content"],
            json!("")
        );
        m.compat = json!({});
        assert_eq!(
            build_request(&m, &ctx, &opts)["messages"][0]["content"],
            Value::Null
        );
    }

    fn msg(v: Value) -> Message {
        serde_json::from_value(v).unwrap()
    }

    fn call(id: &str, model: &str) -> Message {
        msg(json!({"role":"assistant","content":[
            {"type":"text","text":format!("reading {id}")},
            {"type":"toolCall","id":id,"name":"read","arguments":{"path":"small.txt"}}],
            "api":"openai-completions","provider":"mock","model":model,
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

    /// Pi 1.6's prompt caching on `openai-completions`, each body compared whole (the cached
    /// request byte for byte the whole one): an OpenRouter `anthropic/…` model gets
    /// Anthropic-format `cache_control` on the system prompt, the last tool and the last
    /// message with text (a string content made one text part), a 1 h `ttl` when long; an
    /// `api.openai.com` server the session's `prompt_cache_key` (and `"24h"` when long);
    /// `none` gets none of them. Session affinity headers only where the compat sends them
    /// and never for `none`.
    #[test]
    fn prompt_caching_follows_the_requests_retention() {
        let ctx = Context {
            system_prompt: "Lead.".into(),
            messages: vec![user("hi"), call("call_1", "m"), result("call_1", false)],
            tools: vec![crate::types::ToolSpec {
                constrained_sampling: None,
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({"type":"object"}),
            }],
        };
        let cache = RequestCache::default();
        let opts = |retention| StreamOptions {
            session_id: Some("s1".into()),
            cache_retention: Some(retention),
            ..StreamOptions::default()
        };
        let sent = |m: &Model, retention| -> Value {
            assert_cached_is_whole(m, &ctx, &opts(retention), &cache);
            build_request(m, &ctx, &opts(retention))
        };
        let mut router = Model::new(
            crate::Api::OpenaiCompletions,
            "openrouter",
            "anthropic/claude-x",
            "https://openrouter.ai/api/v1",
        );
        router.compat = json!({"supportsStrictMode": false});
        let plain = sent(&router, CacheRetention::None);
        assert_eq!(plain.get("prompt_cache_key"), None);
        let marked = |cc: Value| {
            let mut b = plain.clone();
            b["messages"][0]["content"] =
                json!([{"type":"text","text":"Lead.","cache_control":cc}]);
            let text = b["messages"][3]["content"].as_str().unwrap().to_string();
            b["messages"][3]["content"] = json!([{"type":"text","text":text,"cache_control":cc}]);
            b["tools"][0]["cache_control"] = cc;
            b
        };
        assert_eq!(
            sent(&router, CacheRetention::Short),
            marked(json!({"type":"ephemeral"}))
        );
        let mut long = marked(json!({"type":"ephemeral","ttl":"1h"}));
        long["prompt_cache_retention"] = json!("24h");
        long["prompt_cache_key"] = json!("s1");
        assert_eq!(sent(&router, CacheRetention::Long), long);
        let headers = |m: &Model, retention| session_headers(m, &opts(retention));
        assert_eq!(
            headers(&router, CacheRetention::Short),
            [("x-session-id".to_string(), "s1".to_string())]
        );
        assert_eq!(headers(&router, CacheRetention::None), []);

        let mut openai = mock_1();
        openai.base_url = "https://api.openai.com/v1".into();
        let plain = sent(&openai, CacheRetention::None);
        let mut keyed = plain.clone();
        keyed["prompt_cache_key"] = json!("s1");
        assert_eq!(sent(&openai, CacheRetention::Short), keyed);
        keyed["prompt_cache_retention"] = json!("24h");
        assert_eq!(sent(&openai, CacheRetention::Long), keyed);
        assert_eq!(headers(&openai, CacheRetention::Short), []);
        openai.compat = json!({"sendSessionAffinityHeaders": true});
        assert_eq!(
            headers(&openai, CacheRetention::Short),
            [
                ("session_id".to_string(), "s1".to_string()),
                ("x-client-request-id".to_string(), "s1".to_string()),
                ("x-session-affinity".to_string(), "s1".to_string()),
            ]
        );
        // A local server: no key unless asked for (`promptCacheKeyMode: "enabled"`).
        let local = mock_1();
        assert_eq!(
            sent(&local, CacheRetention::Short).get("prompt_cache_key"),
            None
        );
    }

    /// The `openai-completions` model `mock/mock-1` the request-cache tests build for.
    fn mock_1() -> Model {
        Model::new(
            crate::Api::OpenaiCompletions,
            "mock",
            "mock-1",
            "http://x/v1",
        )
    }

    /// Asserts that the request `cache` builds for `context` is byte for byte the whole
    /// request ([`build_request`]).
    fn assert_cached_is_whole(
        m: &Model,
        context: &Context,
        opts: &StreamOptions,
        cache: &RequestCache,
    ) {
        let whole = serde_json::to_vec(&build_request(m, context, opts)).unwrap();
        let cached = request_bytes(m, context, opts, cache).unwrap();
        assert_eq!(
            String::from_utf8(cached).unwrap(),
            String::from_utf8(whole).unwrap()
        );
    }

    /// A history the caller vouches for ([`StreamOptions::history_kept`]) is taken as the
    /// cache's without comparing it (the kept copy, altered here behind the cache's back,
    /// stays as it was); without the vouch it is compared, found different and built again.
    /// The bytes are the whole request's either way.
    #[test]
    fn a_vouched_history_is_taken_as_sent_without_comparing_it() {
        let m = mock_1();
        let cache = RequestCache::default();
        let send = |history: &[Message], kept: usize| {
            let context = Context {
                system_prompt: "You are a helper.".into(),
                messages: history.to_vec(),
                tools: Vec::new(),
            };
            let opts = StreamOptions {
                history_kept: kept,
                ..StreamOptions::default()
            };
            assert_cached_is_whole(&m, &context, &opts, &cache);
        };
        let kept_first = || cache.slot.lock().unwrap().as_ref().unwrap().input[0].clone();
        let alter = || cache.slot.lock().unwrap().as_mut().unwrap().input[0] = user("altered");
        let mut h = vec![user("rounds please")];
        send(&h, 0);
        alter();
        h.push(call("call_1", "mock-1"));
        h.push(result("call_1", false));
        send(&h, 1);
        assert_eq!(kept_first(), user("altered"), "taken as sent");
        h.push(call("call_2", "mock-1"));
        h.push(result("call_2", false));
        send(&h, 0);
        assert_eq!(
            kept_first(),
            user("rounds please"),
            "compared and built again"
        );
    }

    /// A tool list given with the previous request's [`StreamOptions::tools_generation`] is
    /// taken as that request's without comparing the specs (the kept specs, altered here
    /// behind the cache's back, stay so); given with 0 or another number they are compared,
    /// and another list is serialised again. The bytes are the whole request's each time.
    #[test]
    fn a_tool_list_of_the_same_generation_is_not_compared() {
        let m = mock_1();
        let cache = RequestCache::default();
        let spec = |description: &str| crate::types::ToolSpec {
            constrained_sampling: None,
            name: "read".into(),
            description: description.into(),
            parameters: json!({"type":"object","properties":{"path":{"type":"string"}}}),
        };
        let send = |tools: Vec<crate::types::ToolSpec>, generation: u64| {
            let context = Context {
                system_prompt: "You are a helper.".into(),
                messages: vec![user("rounds please")],
                tools,
            };
            let opts = StreamOptions {
                tools_generation: generation,
                ..StreamOptions::default()
            };
            assert_cached_is_whole(&m, &context, &opts, &cache);
        };
        let kept = || {
            let slot = cache.slot.lock().unwrap();
            let t = slot.as_ref().unwrap().tools.as_ref().unwrap();
            (t.specs[0].description.clone(), t.generation)
        };
        let alter = || {
            let mut slot = cache.slot.lock().unwrap();
            slot.as_mut().unwrap().tools.as_mut().unwrap().specs[0].description = "altered".into()
        };
        send(vec![spec("Read a file")], 7);
        alter();
        send(vec![spec("Read a file")], 7);
        assert_eq!(kept(), ("altered".into(), 7), "taken without comparing");
        send(vec![spec("Read a file")], 0);
        assert_eq!(
            kept(),
            ("Read a file".into(), 0),
            "compared and built again"
        );
        alter();
        send(vec![spec("Read a file")], 8);
        assert_eq!(
            kept(),
            ("Read a file".into(), 8),
            "another number: compared"
        );
        send(vec![spec("Read a file, any file")], 9);
        assert_eq!(kept(), ("Read a file, any file".into(), 9));
        send(vec![spec("Read a file, any file")], 9);
        assert_eq!(kept(), ("Read a file, any file".into(), 9));
    }

    /// Every request of a conversation built through the cache is byte for byte the request
    /// built whole — as history grows by tool rounds, when a later message changes how an
    /// earlier one converts (an orphan call answered later, results followed by a user message
    /// under `requiresAssistantAfterToolResult`, images after results), when the history is
    /// replaced (compaction) and when the model changes — and the cache is reused.
    #[test]
    fn cached_request_bytes_equal_the_whole_request() {
        let mut m = mock_1();
        m.input = vec!["text".into(), "image".into()];
        let tools = vec![crate::types::ToolSpec {
            constrained_sampling: None,
            name: "read".into(),
            description: "Read a file".into(),
            parameters: json!({"type":"object","properties":{"path":{"type":"string"}}}),
        }];
        let cache = RequestCache::default();
        let opts = StreamOptions::default();
        let check = |m: &Model, history: &[Message], prompt: &str| {
            let context = Context {
                system_prompt: prompt.into(),
                messages: history.to_vec(),
                tools: tools.clone(),
            };
            let whole = serde_json::to_vec(&build_request(m, &context, &opts)).unwrap();
            let cached = request_bytes(m, &context, &opts, &cache).unwrap();
            assert_eq!(
                String::from_utf8(cached).unwrap(),
                String::from_utf8(whole).unwrap(),
                "history of {} messages",
                history.len()
            );
        };
        let mut h = vec![user("rounds please")];
        check(&m, &h, "You are a helper.");
        for k in 0..6 {
            let id = format!("call_{k}");
            h.push(call(&id, "mock-1"));
            // The request with the call still unanswered (the transform adds its result).
            check(&m, &h, "You are a helper.");
            h.push(result(&id, k == 3));
            check(&m, &h, "You are a helper.");
        }
        let steps = cache.slot.lock().unwrap().as_ref().unwrap().steps.len();
        assert_eq!(steps, 13, "one step per message of the history");
        // Reuse: the kept bytes of the first message are what the next request sends.
        let mark = |from: &[u8], to: &[u8]| {
            let mut slot = cache.slot.lock().unwrap();
            let bytes = &mut slot.as_mut().unwrap().bytes;
            let at = bytes.windows(from.len()).position(|w| w == from).unwrap();
            bytes[at..at + to.len()].copy_from_slice(to);
        };
        mark(b"rounds please", b"ROUNDS PLEASE");
        h.push(user("more"));
        let context = Context {
            system_prompt: "You are a helper.".into(),
            messages: h.clone(),
            tools: tools.clone(),
        };
        let sent = String::from_utf8(request_bytes(&m, &context, &opts, &cache).unwrap()).unwrap();
        assert!(sent.contains("ROUNDS PLEASE") && !sent.contains("rounds please"));
        mark(b"ROUNDS PLEASE", b"rounds please");
        // A user message after tool results, with the assistant filler the compat asks for.
        let mut filler = m.clone();
        filler.compat =
            json!({"requiresAssistantAfterToolResult": true, "requiresToolResultName": true});
        check(&filler, &h, "You are a helper.");
        h.push(user("and now?"));
        check(&filler, &h, "You are a helper.");
        // Two results in one run, then more appended to the run.
        h.push(call("call_a", "mock-1"));
        h.push(result("call_a", false));
        check(&filler, &h, "");
        h.push(result("call_a", true));
        check(&filler, &h, "");
        // Compaction: the history is replaced from the start; a different model's calls.
        let mut short = vec![user("summary of the above"), call("call_b", "other")];
        check(&m, &short, "You are a helper.");
        short.push(result("call_b", false));
        check(&m, &short, "You are a helper.");
        short[0] = user("another summary");
        check(&m, &short, "You are a helper.");
        check(&m, &[], "");
        // The tool list and the system prompt's message are kept between requests: marked
        // in the cache, the next request with the same ones sends the marks.
        let h = vec![user("tools")];
        check(&m, &h, "You are a helper.");
        {
            let mut slot = cache.slot.lock().unwrap();
            let p = slot.as_mut().unwrap();
            let tools = &mut p.tools.as_mut().unwrap().bytes;
            let at = tools.windows(4).position(|w| w == b"Read").unwrap();
            tools[at..at + 4].copy_from_slice(b"READ");
            let system = &mut p.system.as_mut().unwrap().2;
            let at = system.windows(3).position(|w| w == b"You").unwrap();
            system[at..at + 3].copy_from_slice(b"YOU");
        }
        let context = Context {
            system_prompt: "You are a helper.".into(),
            messages: h.clone(),
            tools: tools.clone(),
        };
        let sent = String::from_utf8(request_bytes(&m, &context, &opts, &cache).unwrap()).unwrap();
        assert!(
            sent.contains("READ a file") && sent.contains("YOU are"),
            "{sent}"
        );
        // Another tool list, another prompt: built again.
        let mut other = tools.clone();
        other[0].description = "Read a file.".into();
        let context = Context {
            system_prompt: "You help.".into(),
            messages: h.clone(),
            tools: other,
        };
        let whole = serde_json::to_vec(&build_request(&m, &context, &opts)).unwrap();
        let cached = request_bytes(&m, &context, &opts, &cache).unwrap();
        assert_eq!(
            String::from_utf8(cached).unwrap(),
            String::from_utf8(whole).unwrap()
        );
        check(&m, &h, "You are a helper.");
        // Tool rounds extend the kept transform: the kept history grows by the new messages.
        let mut h = h;
        for k in 0..3 {
            let id = format!("call_r{k}");
            h.push(call(&id, "mock-1"));
            h.push(result(&id, false));
            check(&m, &h, "You are a helper.");
            assert_eq!(cache.slot.lock().unwrap().as_ref().unwrap().input, h);
        }
        // A repeated id (renamed in the request) and a strict-mode change.
        h.push(call("call_r0", "mock-1"));
        h.push(result("call_r0", false));
        check(&m, &h, "You are a helper.");
        h.push(call("call_r9", "mock-1"));
        h.push(result("call_r9", false));
        check(&m, &h, "You are a helper.");
        let mut strict = m.clone();
        strict.compat = json!({"supportsStrictMode": true});
        check(&strict, &h, "You are a helper.");
    }

    /// The borrowed chunk reading reads every field [`stream_body`] reads as the `Value`
    /// reading does: escaped strings (owned, decoded), `null`s, unknown fields at every level,
    /// fields of the wrong kind, a `delta` that is not an object, `choices` that is not an
    /// array or whose first element is not an object; a string without escapes is borrowed
    /// from the event's data.
    #[test]
    fn chunks_read_borrowed_as_the_value_reading_reads_them() {
        use super::super::lenient::whole;
        for data in [
            r#"{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"abcdefg "},"finish_reason":null}]}"#,
            r#"{"id":"c\"1\"","model":"m\u00e9","choices":[{"delta":{"content":"a\nb\t\"q\" \\ \u00e9 \ud83d\ude00"},"finish_reason":"stop"}]}"#,
            r#"  {"choices":[{"delta":{"content":null,"reasoning_content":"","reasoning":"r\/1","reasoning_text":"t"}}],"usage":null}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"read","arguments":"{\"path\":"}}]},"usage":{"prompt_tokens":3}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            r#"{"error":{"message":"too long","code":"context_length_exceeded"},"choices":null}"#,
            r#"{"choices":[{"delta":"text","finish_reason":7},{"delta":{"content":"second"}}],"id":5,"model":["x"]}"#,
            r#"{"choices":[7,{"delta":{"content":"second"}}]}"#,
            r#"{"choices":{"0":{"delta":{"content":"x"}}},"extra":{"nested":[1,{"a":null}],"more":"\u0041"}}"#,
            r#"{"choices":[{"delta":{"content":"x","unknown":{"deep":[[],{}]},"role":"assistant"},"logprobs":null,"extra":true}],"system_fingerprint":"fp"}"#,
        ] {
            let ev = crate::api::Event {
                data: data.into(),
                ..Default::default()
            };
            let v = crate::json::parse_lossy(data.trim()).unwrap();
            // Read straight from the data, not through the `Value` fallback.
            assert!(serde_json::from_str::<StreamChunk>(data).is_ok(), "{data}");
            let mut spill = String::new();
            let Some(Chunk::Read(c)) = read_chunk::<StreamChunk>(&ev, &mut spill).unwrap() else {
                panic!("not read: {data}");
            };
            let choice = c.choices.0.as_ref();
            let delta = choice.and_then(|c| c.delta.0.as_deref());
            let text = |s: &Str| s.as_str().map(str::to_string);
            let got = (
                [text(&c.id), text(&c.model)],
                choice.is_some(),
                choice.and_then(|c| text(&c.finish_reason)),
                delta.is_some(),
                delta.map(|d| {
                    [
                        &d.content,
                        &d.reasoning_content,
                        &d.reasoning,
                        &d.reasoning_text,
                    ]
                    .map(text)
                }),
                [
                    whole(&c.error),
                    whole(&c.usage),
                    choice.map_or(&Value::Null, |c| whole(&c.usage)),
                    delta.map_or(&Value::Null, |d| whole(&d.tool_calls)),
                ]
                .map(Value::clone),
            );
            let field = |o: &Value, k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
            let vc = v["choices"].get(0).filter(|c| c.is_object());
            let vd = vc.and_then(|c| c.get("delta")).filter(|d| d.is_object());
            let want = (
                [field(&v, "id"), field(&v, "model")],
                vc.is_some(),
                vc.and_then(|c| field(c, "finish_reason")),
                vd.is_some(),
                vd.map(|d| {
                    [
                        "content",
                        "reasoning_content",
                        "reasoning",
                        "reasoning_text",
                    ]
                    .map(|k| field(d, k))
                }),
                [
                    v["error"].clone(),
                    v["usage"].clone(),
                    vc.map_or(Value::Null, |c| c["usage"].clone()),
                    vd.map_or(Value::Null, |d| d["tool_calls"].clone()),
                ],
            );
            assert_eq!(got, want, "{data}");
        }
        // Without escapes a string is the data's own bytes; with them, an owned decoded copy.
        let ev = crate::api::Event {
            data: r#"{"choices":[{"delta":{"content":"plain","reasoning":"esc\naped"}}]}"#.into(),
            ..Default::default()
        };
        let mut spill = String::new();
        let Some(Chunk::Read(c)) = read_chunk::<StreamChunk>(&ev, &mut spill).unwrap() else {
            panic!("not read");
        };
        let d = c.choices.0.unwrap().delta.0.unwrap();
        assert!(matches!(
            d.content.0,
            Some(std::borrow::Cow::Borrowed("plain"))
        ));
        assert!(
            matches!(&d.reasoning.0, Some(std::borrow::Cow::Owned(s)) if s == "esc\naped"),
            "{:?}",
            d.reasoning
        );
    }
}

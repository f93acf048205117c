//! Typed provider failures, their classification, and the retry policy the agent loop applies.
//!
//! Every failed response still ends as a terminal `error` event whose message carries
//! `stopReason` `error` / `aborted` and the human-readable `errorMessage` (docs/design.md#model-io-and-streaming: failures are
//! encoded in the stream). The typed [`ProviderError`] travels beside it:
//! - live: on [`crate::AssistantEvent::Error`]'s `failure` field (never serialized to the editor);
//! - from a stored message (a session reloaded from disk): [`classify_message`] re-derives the
//!   class from `stopReason`, `errorMessage` and usage, so both paths agree.
//!
//! Sources of the rules: Pi 0.73.1 `pi-ai/dist/utils/overflow.js` (overflow texts, the
//! non-overflow exclusions, silent overflow `input + cacheRead > contextWindow`), Pi's
//! `agent-session.js` `_isRetryableError` (what is retried: overloaded, rate limits, 5xx, network;
//! never overflow) and its retry settings (3 retries, 2 s base delay, doubling), plus case CTX-01
//! and STRM-10 in the shared cases.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use regex::RegexSet;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::types::{AssistantMessage, StopReason};

/// Text of [`ProviderError::Aborted`], as Pi writes it into `errorMessage` when the stream was
/// cut while its body was read (Pi's providers: `throw new Error("Request was aborted")`).
pub const ABORTED_TEXT: &str = "Request was aborted";

/// Text of [`ProviderError::AbortedBeforeResponse`]: Pi 1.6.0's `errorMessage` for a request
/// aborted before the provider answered, on every wire (pi-ai's `retryProviderRequest` turns
/// the SDK's abort into its `createAbortError()`), e.g. the request after a tool call the user
/// aborted.
pub const ABORTED_BEFORE_RESPONSE_TEXT: &str = "Request aborted";

/// Pi 0.73.1's text for a request aborted before the provider answered (the OpenAI and
/// Anthropic SDKs' `APIUserAbortError`), still read back as [`ProviderError::AbortedBeforeResponse`].
pub const ABORTED_BEFORE_RESPONSE_TEXT_0_73: &str = "Request was aborted.";

/// Pi 1.6.0's `errorMessage` for an `anthropic-messages` stream aborted while its body was
/// read: the fetch body read's `AbortError` (Node's words), which pi-ai passes on.
pub const ANTHROPIC_ABORTED_TEXT: &str = "This operation was aborted";

/// Pi 1.6.0's `errorMessage` for a run aborted before its first request was made (an abort
/// during the compaction before the prompt: Pi's `agent_start` then aborts the run), on every
/// wire: the request's setup (pi-ai `lazyStream`, auth resolution) fails with Node's
/// `AbortError`, whose words these are.
pub const SETUP_ABORTED_TEXT: &str = "This operation was aborted";

/// Pi 1.6.0's `errorMessage` for an `openai-responses` stream aborted while its body was read:
/// the SDK's stream ends quietly on an abort, and pi-ai's end-of-stream check words it.
pub const RESPONSES_ABORTED_TEXT: &str =
    "OpenAI Responses stream ended before a terminal response event";

/// The `errorMessage` Pi 1.6.0 stores for an abort (`failure` [`ProviderError::Aborted`] or
/// [`ProviderError::AbortedBeforeResponse`]) of a request on wire `api` (the message's `api`
/// string); `None` for any other failure (its [`ProviderError::message`] is stored). Before
/// the response: [`ABORTED_BEFORE_RESPONSE_TEXT`] on every wire. While the body was read:
/// [`ANTHROPIC_ABORTED_TEXT`] (`anthropic-messages`), [`RESPONSES_ABORTED_TEXT`]
/// (`openai-responses`), else [`ABORTED_TEXT`] (`openai-completions`: pi-ai checks the signal
/// between chunks and throws `Request was aborted`). Measured against Pi 1.6.0's RPC `abort`
/// on the loopback model, per wire, before the status line and mid-stream.
pub fn abort_error_message(failure: &ProviderError, api: &str) -> Option<&'static str> {
    match failure {
        ProviderError::AbortedBeforeResponse => Some(ABORTED_BEFORE_RESPONSE_TEXT),
        ProviderError::Aborted => Some(match api {
            "anthropic-messages" => ANTHROPIC_ABORTED_TEXT,
            "openai-responses" => RESPONSES_ABORTED_TEXT,
            _ => ABORTED_TEXT,
        }),
        _ => None,
    }
}

/// A typed failure of one model request.
///
/// `Display` (and [`ProviderError::message`]) is the text stored as the message's
/// `errorMessage`; `retry_after_ms` is the server's requested wait (`retry-after-ms` or
/// `retry-after` header), in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum ProviderError {
    /// HTTP 429 or a rate-limit text. Retryable.
    #[error("{message}")]
    RateLimited {
        status: Option<u16>,
        retry_after_ms: Option<u64>,
        message: String,
    },
    /// The provider is overloaded (HTTP 529, Anthropic `overloaded_error`). Retryable.
    #[error("{message}")]
    Overloaded {
        status: Option<u16>,
        retry_after_ms: Option<u64>,
        message: String,
    },
    /// The request does not fit the model's context window (explicit text or silent overflow).
    /// Never retried as is: the loop compacts first (case CTX-01).
    #[error("{message}")]
    ContextOverflow {
        status: Option<u16>,
        message: String,
    },
    /// The provider refused the request because of an image in it (too many bytes, too many
    /// pixels), even when it says so with HTTP 413. Not retryable as is and not an overflow
    /// (compaction keeps images): the image has to leave the request (case 18.12).
    #[error("{message}")]
    ImageTooLarge {
        status: Option<u16>,
        message: String,
    },
    /// The key is missing, wrong or lacks permission (HTTP 401 / 403). Not retryable.
    #[error("{message}")]
    Auth {
        status: Option<u16>,
        message: String,
    },
    /// Any other HTTP error status, with the (truncated) body in `message`. 408, 409, 425 and
    /// 5xx are retryable; other 4xx are not.
    #[error("{message}")]
    Http {
        status: u16,
        retry_after_ms: Option<u64>,
        message: String,
    },
    /// The connection failed or the stream ended early (no response, cut mid-message).
    /// Retryable.
    #[error("{message}")]
    Network { message: String },
    /// The provider sent something that is not valid for its wire format. Not retryable.
    #[error("{message}")]
    Parse { message: String },
    /// The provider reported a failure that fits no class above (refusal, content filter, an
    /// unknown in-stream error). Not retryable.
    #[error("{message}")]
    Provider { message: String },
    /// The request was cancelled through `StreamOptions::cancel` while its answer streamed.
    #[error("Request was aborted")]
    Aborted,
    /// The request was cancelled before the provider answered (Pi 1.6's text then:
    /// [`ABORTED_BEFORE_RESPONSE_TEXT`]). Its class and stop reason are `aborted`.
    #[error("Request aborted")]
    AbortedBeforeResponse,
}

/// The class of a [`ProviderError`], without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorClass {
    RateLimited,
    Overloaded,
    ContextOverflow,
    ImageTooLarge,
    Auth,
    Http,
    Network,
    Parse,
    Provider,
    Aborted,
}

impl ProviderError {
    /// The text stored as `errorMessage`.
    /// Known secrets and credential header values are redacted ([`crate::keys::redact`]).
    pub fn message(&self) -> String {
        crate::keys::redact(&self.to_string())
    }

    /// The class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            ProviderError::RateLimited { .. } => ErrorClass::RateLimited,
            ProviderError::Overloaded { .. } => ErrorClass::Overloaded,
            ProviderError::ContextOverflow { .. } => ErrorClass::ContextOverflow,
            ProviderError::ImageTooLarge { .. } => ErrorClass::ImageTooLarge,
            ProviderError::Auth { .. } => ErrorClass::Auth,
            ProviderError::Http { .. } => ErrorClass::Http,
            ProviderError::Network { .. } => ErrorClass::Network,
            ProviderError::Parse { .. } => ErrorClass::Parse,
            ProviderError::Provider { .. } => ErrorClass::Provider,
            ProviderError::Aborted | ProviderError::AbortedBeforeResponse => ErrorClass::Aborted,
        }
    }

    /// The HTTP status the error came with, if any.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::RateLimited { status, .. }
            | ProviderError::Overloaded { status, .. }
            | ProviderError::ContextOverflow { status, .. }
            | ProviderError::ImageTooLarge { status, .. }
            | ProviderError::Auth { status, .. } => *status,
            ProviderError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The wait the server asked for before a retry.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after_ms, .. }
            | ProviderError::Overloaded { retry_after_ms, .. }
            | ProviderError::Http { retry_after_ms, .. } => {
                retry_after_ms.map(Duration::from_millis)
            }
            _ => None,
        }
    }

    /// The stop reason of the terminal message: `aborted` for [`ProviderError::Aborted`],
    /// else `error`.
    pub fn stop_reason(&self) -> StopReason {
        match self {
            ProviderError::Aborted | ProviderError::AbortedBeforeResponse => StopReason::Aborted,
            _ => StopReason::Error,
        }
    }

    /// True when sending the same request again may succeed (rate limit, overload, 408 / 409 /
    /// 425 / 5xx, network). Never for overflow, auth, parse, aborted or other 4xx.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::RateLimited { .. }
            | ProviderError::Overloaded { .. }
            | ProviderError::Network { .. } => true,
            ProviderError::Http { status, .. } => {
                matches!(status, 408 | 409 | 425) || (500..600).contains(status)
            }
            _ => false,
        }
    }
}

/// Overflow texts (Pi's `OVERFLOW_PATTERNS`, plus OpenAI's `maximum context length is`
/// wording and the `context_length_exceeded` code of case CTX-01).
static OVERFLOW: LazyLock<RegexSet> = LazyLock::new(|| {
    set(&[
        r"(?i)prompt is too long",                                  // Anthropic
        r"(?i)request_too_large",                                   // Anthropic 413
        r"(?i)input is too long for requested model",               // Bedrock
        r"(?i)exceeds the context window",                          // OpenAI
        r"(?i)input token count.*exceeds the maximum",              // Gemini
        r"(?i)maximum prompt length is \d+",                        // xAI
        r"(?i)reduce the length of the messages",                   // Groq
        r"(?i)maximum context length is \d+",                       // OpenAI chat, OpenRouter, vLLM
        r"(?i)exceeds the limit of \d+",                            // Copilot
        r"(?i)exceeds the available context size",                  // llama.cpp
        r"(?i)greater than the context length",                     // LM Studio
        r"(?i)context window exceeds limit",                        // MiniMax
        r"(?i)exceeded model token limit",                          // Kimi
        r"(?i)too large for model with \d+ maximum context length", // Mistral
        r"(?i)model_context_window_exceeded",                       // z.ai
        r"(?i)prompt too long; exceeded (?:max )?context length",   // ollama
        r"(?i)context[_ ]length[_ ]exceeded",                       // OpenAI code, generic
        r"(?i)too many tokens",
        r"(?i)token limit exceeded",
        r"(?i)^4(?:00|13)\s*(?:status code)?\s*\(no body\)", // Cerebras
    ])
});

/// Texts that are never overflow even when an overflow text also matches (Pi's
/// `NON_OVERFLOW_PATTERNS`).
static NON_OVERFLOW: LazyLock<RegexSet> = LazyLock::new(|| {
    set(&[
        r"(?i)^(Throttling error|Service unavailable):",
        r"(?i)rate limit",
        r"(?i)too many requests",
    ])
});

/// Builds a set from literal patterns; the patterns here always compile, an empty set is the
/// (unreachable) fallback.
fn set(patterns: &[&str]) -> RegexSet {
    RegexSet::new(patterns).unwrap_or_else(|_| RegexSet::empty())
}

/// Refusals of a request because of an image in it: Anthropic's `image exceeds 5 MB
/// maximum` / `image dimensions exceed max allowed size`, OpenAI's `image_too_large` and
/// "Image too large" wordings, Bedrock's `image exceeds max pixels`, and the like.
static IMAGE_TOO_LARGE: LazyLock<RegexSet> = LazyLock::new(|| {
    set(&[
        r"(?i)image[^.\n]{0,60}\b(exceeds?|too (large|big)|dimensions exceed|larger than)",
        r"(?i)image_too_large|image_size_exceeded|(too large|too big)[^.\n]{0,30}\bimage",
    ])
});

/// True when `text` says a request was refused because of an image's size.
pub fn is_image_too_large_text(text: &str) -> bool {
    IMAGE_TOO_LARGE.is_match(text)
}

/// Refusals of a request for its size that an image may cause: "input length exceeds",
/// "request too large" / "request entity too large", "payload too large", "request size
/// exceeds", "content too large", "body too large", Anthropic's `request_too_large`.
static REQUEST_TOO_LARGE: LazyLock<RegexSet> = LazyLock::new(|| {
    set(&[
        r"(?i)input length exceeds|request(?: entity)? too large|request_too_large|payload too large",
        r"(?i)request size exceeds|(?:content|body) too large|exceeds the maximum (?:request|payload|body) size",
    ])
});

/// True when `failure` refused the request for its size in a way images can cause (case
/// 18.12, issue 29 item 10): an image named as too large ([`ErrorClass::ImageTooLarge`]), a
/// 413 of any wording (a gateway's bare "Request Entity Too Large" page names nothing), or a
/// 400 / unknown status whose text says the request or its input is too large ("input length
/// exceeds", "request too large", "payload too large" and kin). With images in the request,
/// they go first; without, the error is what its class says.
pub fn is_size_refusal(failure: &ProviderError) -> bool {
    if failure.class() == ErrorClass::ImageTooLarge {
        return true;
    }
    match failure.status() {
        Some(413) => true,
        Some(400) | None => REQUEST_TOO_LARGE.is_match(&failure.message()),
        _ => false,
    }
}

static OVERLOADED: LazyLock<RegexSet> = LazyLock::new(|| set(&[r"(?i)overloaded"]));
static RATE_LIMIT: LazyLock<RegexSet> =
    LazyLock::new(|| set(&[r"(?i)rate.?limit|too many requests"]));
static AUTH: LazyLock<RegexSet> = LazyLock::new(|| {
    set(&[
        r"(?i)authentication_error|permission_error|invalid.{0,12}api.?key|incorrect api key|unauthorized",
    ])
});
/// Pi's retryable residue: server and network failures named in the text.
static TRANSIENT: LazyLock<RegexSet> = LazyLock::new(|| {
    set(&[
        r"(?i)provider.?returned.?error|\b50[0234]\b|service.?unavailable|server.?error|internal.?error|api_error|network.?error|connection.?(error|refused|lost|reset)|other side closed|fetch failed|upstream.?connect|reset before headers|socket hang up|ended without|ended before|stream read failed|request to .* failed|timed? out|timeout|terminated",
    ])
});

/// The status of a stored HTTP error message: Pi 1.6's `<status>: …` / `<status> …` /
/// `<prefix> API error (<status>): …` ([`http_error_message`]), or `HTTP <status>: …` as
/// earlier versions of this crate wrote it.
fn http_status(text: &str) -> Option<u16> {
    // Three digits, 100–599, followed by what `after` allows.
    let status_at = |rest: &str, after: &dyn Fn(&str) -> bool| -> Option<u16> {
        let digits = rest.get(..3)?;
        let status: u16 = digits.parse().ok()?;
        ((100..600).contains(&status) && digits.bytes().all(|b| b.is_ascii_digit()))
            .then_some(status)
            .filter(|_| after(&rest[3..]))
    };
    let leading = text.strip_prefix("HTTP ").unwrap_or(text);
    let ends = |r: &str| r.is_empty() || r.starts_with([':', ' ', '\n']);
    if let Some(status) = status_at(leading, &ends) {
        return Some(status);
    }
    let first_line = text.lines().next().unwrap_or_default();
    let (_, rest) = first_line.split_once(" API error (")?;
    status_at(rest, &|r: &str| r.starts_with("): "))
}

/// True when `text` names a context overflow (and is not a rate-limit text).
pub fn is_overflow_text(text: &str) -> bool {
    !NON_OVERFLOW.is_match(text) && OVERFLOW.is_match(text)
}

/// How a wire words an HTTP error response in `errorMessage`: as Pi 1.6.0's pi-ai does through
/// the provider SDK it uses for that wire (see [`http_error_message`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpWording {
    /// openai-completions (the `openai` SDK, pi-ai's `formatProviderError` without a prefix):
    /// `400: {"message":"…"}` for a JSON body with an `error` object, `400 text` otherwise.
    Completions,
    /// openai-responses (the `openai` SDK, `formatProviderError` with the prefix
    /// `<provider> API error`, `OpenAI API error` for provider `openai`):
    /// `mock API error (400): {"message":"…"}`, `mock API error (503): 503 text`.
    Responses {
        /// The model's provider as Pi names it in the prefix.
        provider: String,
    },
    /// anthropic-messages (the `@anthropic-ai/sdk` message as is): `400 {whole JSON body}`,
    /// `400 text`.
    Anthropic,
}

/// The longest body pi-ai quotes after the status (`MAX_PROVIDER_ERROR_BODY_CHARS`), in
/// UTF-16 code units as JavaScript counts a string's length.
const MAX_PROVIDER_ERROR_BODY_CHARS: usize = 4_000;

/// JavaScript's truthiness of a parsed JSON value (`null`, `false`, `0`, `""` are false).
fn truthy(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// The SDKs' `APIError.makeMessage(status, error, message)` (the `openai` and
/// `@anthropic-ai/sdk` packages word it alike): the error's `message` (a string as is, else
/// its JSON), else the error's JSON, else the non-JSON body text, after the status and a
/// space; `<status> status code (no body)` when that is empty.
fn sdk_message(status: u16, error: Option<&serde_json::Value>, text: Option<&str>) -> String {
    let msg = match error {
        Some(e) if e.get("message").is_some_and(truthy) => match &e["message"] {
            serde_json::Value::String(s) => s.clone(),
            m => m.to_string(),
        },
        Some(e) if truthy(e) => e.to_string(),
        _ => text.unwrap_or_default().to_string(),
    };
    if msg.is_empty() {
        format!("{status} status code (no body)")
    } else {
        format!("{status} {msg}")
    }
}

/// pi-ai 1.6's `truncateErrorText(text, MAX_PROVIDER_ERROR_BODY_CHARS)`: `text` whole when
/// it has at most 4,000 UTF-16 code units, else its first 4,000 and
/// `... [truncated <rest> chars]` (a character that would be split is left out, as pi-ai's
/// `ownedSlice` keeps surrogate pairs whole).
fn truncate_error_text(text: &str) -> String {
    let units: usize = text.chars().map(char::len_utf16).sum();
    if units <= MAX_PROVIDER_ERROR_BODY_CHARS {
        return text.to_string();
    }
    let mut taken = 0;
    let mut end = 0;
    for (i, c) in text.char_indices() {
        if taken + c.len_utf16() > MAX_PROVIDER_ERROR_BODY_CHARS {
            break;
        }
        taken += c.len_utf16();
        end = i + c.len_utf8();
    }
    format!(
        "{}... [truncated {} chars]",
        &text[..end],
        units - MAX_PROVIDER_ERROR_BODY_CHARS
    )
}

/// The `errorMessage` Pi 1.6.0 stores for an HTTP error response with `status` and `body` on
/// the wire worded by `wording` (before redaction).
///
/// The SDK reads the body as JSON when it parses (and is truthy) and builds its message
/// ([`sdk_message`]) from the body's `error` member (`openai`) or the whole body
/// (`@anthropic-ai/sdk`); a body that does not parse is quoted as text. pi-ai's
/// `normalizeProviderError` + `formatProviderError` then, for the `openai` wires, replace the
/// SDK's text after the status by the `error` object's JSON (trimmed, cut at 4,000
/// characters) when the SDK's text does not already hold it: `<status>: <json>`, or with the
/// Responses prefix `<prefix> (<status>): <json>` (`<prefix> (<status>): <SDK message>` when
/// it does). Chat completions also append `error.metadata.raw` on its own line when the text
/// does not hold it (OpenRouter's detail). Sources: pi-ai `utils/error-body.js`,
/// `api/openai-completions.js`, `api/openai-responses.js`, `api/anthropic-messages.js`; the
/// SDKs' `core/error.js` and their `makeStatusError` callers.
pub fn http_error_message(wording: &HttpWording, status: u16, body: &str) -> String {
    let parsed = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .filter(truthy);
    let text = parsed.is_none().then_some(body);
    if *wording == HttpWording::Anthropic {
        return sdk_message(status, parsed.as_ref(), text);
    }
    let error = parsed.as_ref().and_then(|p| p.get("error"));
    let message = sdk_message(status, error, text);
    // pi-ai's `extractBody`: the `error` member's JSON when it is a non-empty object.
    let quoted = error
        .and_then(serde_json::Value::as_object)
        .filter(|o| !o.is_empty())
        .map(|o| truncate_error_text(serde_json::Value::Object(o.clone()).to_string().trim()));
    let carries = quoted.as_ref().is_none_or(|q| message.contains(q.as_str()));
    let mut out = match (wording, quoted) {
        (HttpWording::Responses { provider }, quoted) => {
            let prefix = if provider == "openai" {
                "OpenAI"
            } else {
                provider.as_str()
            };
            match quoted {
                Some(q) if !carries => format!("{prefix} API error ({status}): {q}"),
                _ => format!("{prefix} API error ({status}): {message}"),
            }
        }
        (_, Some(q)) if !carries => format!("{status}: {q}"),
        _ => message,
    };
    if *wording == HttpWording::Completions {
        let raw = error
            .and_then(|e| e.get("metadata"))
            .and_then(|m| m.get("raw"))
            .filter(|r| truthy(r));
        let raw = match raw {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Object(_)) => Some("[object Object]".to_string()),
            Some(serde_json::Value::Array(_)) | None => None,
            Some(other) => Some(other.to_string()),
        };
        if let Some(raw) = raw.filter(|r| !out.contains(r.as_str())) {
            out.push('\n');
            out.push_str(&raw);
        }
    }
    out
}

/// Classifies an HTTP error response as [`classify_http_as`] does, worded as chat
/// completions word it ([`HttpWording::Completions`]).
pub fn classify_http(
    status: u16,
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    body: &str,
) -> ProviderError {
    classify_http_as(
        &HttpWording::Completions,
        status,
        retry_after_ms,
        retry_after,
        body,
    )
}

/// Classifies an HTTP error response. `retry_after` is the raw `retry-after-ms` (preferred,
/// milliseconds) or `retry-after` (seconds or an HTTP date) header value; `body` is the
/// response body. The error message is Pi 1.6.0's for the wire ([`http_error_message`]) with
/// known secrets and credential header values redacted ([`crate::keys::redact`]).
///
/// Rules (CTX-01, STRM-10): an overflow text wins over the status (a 400 "prompt is too long"
/// is overflow; a 400 about an invalid `max_tokens` is not); 413 is overflow (request too
/// large); 401 / 403 are auth; 429 is rate-limited unless the body says overloaded; 529 or an
/// `overloaded` body is overloaded; everything else is [`ProviderError::Http`].
pub fn classify_http_as(
    wording: &HttpWording,
    status: u16,
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    body: &str,
) -> ProviderError {
    let message = crate::keys::redact(&http_error_message(wording, status, body));
    let retry_after_ms = parse_retry_after(retry_after_ms, retry_after, SystemTime::now());
    if matches!(status, 400 | 413 | 422) && is_image_too_large_text(body) {
        return ProviderError::ImageTooLarge {
            status: Some(status),
            message,
        };
    }
    if is_overflow_text(body) || status == 413 {
        return ProviderError::ContextOverflow {
            status: Some(status),
            message,
        };
    }
    match status {
        401 | 403 => ProviderError::Auth {
            status: Some(status),
            message,
        },
        529 => ProviderError::Overloaded {
            status: Some(status),
            retry_after_ms,
            message,
        },
        _ if OVERLOADED.is_match(body) => ProviderError::Overloaded {
            status: Some(status),
            retry_after_ms,
            message,
        },
        429 => ProviderError::RateLimited {
            status: Some(status),
            retry_after_ms,
            message,
        },
        _ => ProviderError::Http {
            status,
            retry_after_ms,
            message,
        },
    }
}

/// Classifies an error reported inside a stream after HTTP 200 (Anthropic's `error` event,
/// an OpenAI-style `{"error":{…}}` chunk), from the provider's error `type` / `code` and text.
/// The stored message is `<type>: <text>` when a type is given.
pub fn classify_stream_error(kind: Option<&str>, text: &str) -> ProviderError {
    let message = crate::keys::redact(&match kind.filter(|k| !k.is_empty()) {
        Some(k) => format!("{k}: {text}"),
        None => text.to_string(),
    });
    match kind.unwrap_or("") {
        "overloaded_error" => ProviderError::Overloaded {
            status: None,
            retry_after_ms: None,
            message,
        },
        "rate_limit_error" | "rate_limit_exceeded" => ProviderError::RateLimited {
            status: None,
            retry_after_ms: None,
            message,
        },
        "context_length_exceeded" | "request_too_large" => ProviderError::ContextOverflow {
            status: None,
            message,
        },
        "authentication_error" | "permission_error" | "invalid_api_key" => ProviderError::Auth {
            status: None,
            message,
        },
        "api_error" | "server_error" => ProviderError::Http {
            status: 500,
            retry_after_ms: None,
            message,
        },
        _ => classify_text(&message),
    }
}

/// Classifies a stored `errorMessage` (no status or headers at hand): overflow, overloaded,
/// rate limit, auth, `HTTP <status>: …` (as this crate writes it), transient server or network
/// texts (Pi's retryable list), else [`ProviderError::Provider`].
pub fn classify_text(text: &str) -> ProviderError {
    let message = crate::keys::redact(text);
    let status = http_status(text);
    if text == ABORTED_TEXT || text == ANTHROPIC_ABORTED_TEXT {
        return ProviderError::Aborted;
    }
    if text == ABORTED_BEFORE_RESPONSE_TEXT || text == ABORTED_BEFORE_RESPONSE_TEXT_0_73 {
        return ProviderError::AbortedBeforeResponse;
    }
    if matches!(status, None | Some(400 | 413 | 422)) && is_image_too_large_text(text) {
        return ProviderError::ImageTooLarge { status, message };
    }
    if is_overflow_text(text) || status == Some(413) {
        return ProviderError::ContextOverflow { status, message };
    }
    if OVERLOADED.is_match(text) || status == Some(529) {
        return ProviderError::Overloaded {
            status,
            retry_after_ms: None,
            message,
        };
    }
    if RATE_LIMIT.is_match(text) || status == Some(429) {
        return ProviderError::RateLimited {
            status,
            retry_after_ms: None,
            message,
        };
    }
    if AUTH.is_match(text) || matches!(status, Some(401 | 403)) {
        return ProviderError::Auth { status, message };
    }
    if let Some(status) = status {
        return ProviderError::Http {
            status,
            retry_after_ms: None,
            message,
        };
    }
    if TRANSIENT.is_match(text) {
        return ProviderError::Network { message };
    }
    if text.starts_with("invalid JSON") {
        return ProviderError::Parse { message };
    }
    ProviderError::Provider { message }
}

/// The failure a stored assistant message stands for, or `None` for a usable response.
///
/// `stopReason: "aborted"` → [`ProviderError::Aborted`]; `"error"` → [`classify_text`] of its
/// `errorMessage`; a successful `stop` whose `input + cacheRead` exceeds `context_window`
/// (tokens; 0 = unknown) is a silent overflow (Pi: z.ai and similar servers accept too-long
/// prompts); a `length` stop with no output and a full window is the truncating-server variant.
pub fn classify_message(message: &AssistantMessage, context_window: u64) -> Option<ProviderError> {
    let input = message.usage.input + message.usage.cache_read;
    match message.stop_reason {
        StopReason::Aborted => Some(ProviderError::Aborted),
        StopReason::Error => Some(classify_text(
            message.error_message.as_deref().unwrap_or("unknown error"),
        )),
        StopReason::Stop if context_window > 0 && input > context_window => {
            Some(ProviderError::ContextOverflow {
                status: None,
                message: format!(
                    "silent context overflow: {input} input tokens > {context_window} context window"
                ),
            })
        }
        StopReason::Length
            if context_window > 0
                && message.usage.output == 0
                && input as f64 >= context_window as f64 * 0.99 =>
        {
            Some(ProviderError::ContextOverflow {
                status: None,
                message: format!(
                    "context overflow: {input} input tokens fill the {context_window}-token window"
                ),
            })
        }
        _ => None,
    }
}

/// Longest error body kept in an error message, in bytes.
pub const MAX_ERROR_BODY: usize = 2_000;

/// `body` trimmed and cut to [`MAX_ERROR_BODY`] bytes (at a character boundary), as error
/// messages quote a provider's body.
pub(crate) fn truncate_body(body: &str) -> String {
    let body = body.trim();
    if body.len() <= MAX_ERROR_BODY {
        return body.to_string();
    }
    let mut cut = MAX_ERROR_BODY;
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &body[..cut])
}

/// Parses `retry-after-ms` (milliseconds) or `retry-after` (delta-seconds or an HTTP date,
/// RFC 9110 §10.2.3) into milliseconds from `now`.
pub fn parse_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: SystemTime,
) -> Option<u64> {
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(ms as u64);
        }
    }
    let v = retry_after?.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then_some((secs * 1000.0) as u64);
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(now)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    )
}

/// When and how often the agent loop retries a failed request (Pi: `retry.maxRetries` 3,
/// `retry.baseDelayMs` 2000, doubling per attempt).
///
/// Only [`ProviderError::is_retryable`] errors are retried, never context overflow. The delay
/// of retry `n` (1-based) is `base_delay · 2^(n-1)`, capped at `max_delay`, then scaled by a
/// random factor in `[1 - jitter, 1]`. A server's `Retry-After` replaces the computed delay;
/// one longer than `max_delay` ends the retries (waiting that long would look like a hang).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// Delay before the first retry.
    pub base_delay: Duration,
    /// Cap of one delay, and the longest `Retry-After` honoured.
    pub max_delay: Duration,
    /// Fraction of the delay that is randomised away (0.0 ..= 1.0).
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(2_000),
            max_delay: Duration::from_secs(60),
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based) after `error`, or `None` when the loop
    /// must not retry (not retryable, retries used up, or `Retry-After` beyond `max_delay`).
    pub fn delay(&self, retry: u32, error: &ProviderError) -> Option<Duration> {
        self.delay_with_unit(retry, error, random_unit())
    }

    /// [`RetryPolicy::delay`] with the random factor given (`unit` in `[0, 1)`), for tests.
    pub fn delay_with_unit(
        &self,
        retry: u32,
        error: &ProviderError,
        unit: f64,
    ) -> Option<Duration> {
        if retry == 0 || retry > self.max_retries || !error.is_retryable() {
            return None;
        }
        if let Some(wait) = error.retry_after() {
            return (wait <= self.max_delay).then_some(wait);
        }
        let exp = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry.saturating_sub(1)));
        let capped = exp.min(self.max_delay);
        let jitter = self.jitter.clamp(0.0, 1.0);
        Some(capped.mul_f64(1.0 - jitter * unit.clamp(0.0, 1.0)))
    }

    /// Sleeps `delay`, or returns `Err(ProviderError::Aborted)` as soon as `cancel` fires
    /// (STRM-10: abort cancels the wait).
    pub async fn wait(delay: Duration, cancel: &CancellationToken) -> Result<(), ProviderError> {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(ProviderError::Aborted),
            _ = tokio::time::sleep(delay) => Ok(()),
        }
    }
}

/// A number in `[0, 1)` from the standard library's randomly keyed hasher (no RNG crate).
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Usage;

    #[test]
    fn ctx01_http_classification_table() {
        let cases: &[(u16, &str, ErrorClass)] = &[
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"}}"#,
                ErrorClass::ContextOverflow,
            ),
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
                ErrorClass::ContextOverflow,
            ),
            (
                400,
                r#"{"error":{"code":"context_length_exceeded","message":"Input too long"}}"#,
                ErrorClass::ContextOverflow,
            ),
            (
                400,
                r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#,
                ErrorClass::ContextOverflow,
            ),
            (
                400,
                r#"{"error":"prompt too long; exceeded max context length by 1200 tokens"}"#,
                ErrorClass::ContextOverflow,
            ),
            (
                400,
                r#"{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 40000 tokens","type":"BadRequestError","code":400}"#,
                ErrorClass::ContextOverflow,
            ),
            (
                400,
                r#"{"error":"The number of tokens to keep from the initial prompt is greater than the context length"}"#,
                ErrorClass::ContextOverflow,
            ),
            (
                400,
                r#"{"error":{"message":"This endpoint's maximum context length is 200000 tokens. However, you requested about 210000 tokens","code":400}}"#,
                ErrorClass::ContextOverflow,
            ),
            (
                413,
                r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
                ErrorClass::ContextOverflow,
            ),
            (
                400,
                r#"{"error":{"message":"max_tokens is too large: 200000. This model supports at most 16384 completion tokens.","type":"invalid_request_error","param":"max_tokens","code":"invalid_value"}}"#,
                ErrorClass::Http,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5"}}"#,
                ErrorClass::Http,
            ),
            (
                429,
                r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#,
                ErrorClass::RateLimited,
            ),
            (
                429,
                r#"{"error":{"message":"Too many tokens per minute, rate limit exceeded"}}"#,
                ErrorClass::RateLimited,
            ),
            (
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                ErrorClass::Overloaded,
            ),
            (
                503,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                ErrorClass::Overloaded,
            ),
            (
                401,
                r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
                ErrorClass::Auth,
            ),
            (403, "forbidden", ErrorClass::Auth),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content.1.image.source.base64: image exceeds 5 MB maximum: 7340032 bytes > 5242880 bytes"}}"#,
                ErrorClass::ImageTooLarge,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.2.content.0.image: image dimensions exceed max allowed size: 8000 pixels"}}"#,
                ErrorClass::ImageTooLarge,
            ),
            (
                413,
                r#"{"error":{"message":"Image too large: the request's image is 21 MB","type":"invalid_request_error","code":"image_too_large"}}"#,
                ErrorClass::ImageTooLarge,
            ),
            (500, "internal error", ErrorClass::Http),
        ];
        for (status, body, class) in cases {
            let e = classify_http(*status, None, None, body);
            assert_eq!(e.class(), *class, "{status} {body}");
            assert_eq!(e.status(), Some(*status));
            // The stored text classifies the same way when the session is reloaded.
            assert_eq!(
                classify_text(&e.message()).class(),
                *class,
                "{status} {body}"
            );
        }
    }

    /// Each wire's wording of each kind of error body, as Pi 1.6.0 stored them (its session
    /// files, the loopback server answering each status and body; tests/pi16_wire.rs checks
    /// the same against the real Pi).
    #[test]
    fn http_errors_are_worded_as_pi_1_6_words_them() {
        let openai_json = r#"{"error": {"message": "bad thing", "type": "invalid_request_error"}}"#;
        let ant_json = r#"{"type":"error","error": {"type": "invalid_request_error", "message": "bad thing"}}"#;
        let responses = HttpWording::Responses {
            provider: "mockresp".into(),
        };
        let cases: &[(&HttpWording, u16, &str, &str)] = &[
            (&HttpWording::Completions, 400, openai_json, r#"400: {"message":"bad thing","type":"invalid_request_error"}"#),
            (&HttpWording::Completions, 400, ant_json, r#"400: {"type":"invalid_request_error","message":"bad thing"}"#),
            (&HttpWording::Completions, 400, "plain failure text", "400 plain failure text"),
            (&HttpWording::Completions, 503, "upstream down", "503 upstream down"),
            (&HttpWording::Completions, 500, "", "500 status code (no body)"),
            (&HttpWording::Completions, 400, r#"{"detail":"x"}"#, "400 status code (no body)"),
            (&HttpWording::Completions, 400, r#"{"error":"bad"}"#, r#"400 "bad""#),
            (&HttpWording::Completions, 400, r#"{"error":{"code":5}}"#, r#"400 {"code":5}"#),
            (&HttpWording::Completions, 400, "null", "400 null"),
            (
                &HttpWording::Completions,
                502,
                r#"{"error":{"message":"Provider returned error","metadata":{"raw":"upstream said no"}}}"#,
                "502: {\"message\":\"Provider returned error\",\"metadata\":{\"raw\":\"upstream said no\"}}",
            ),
            (&responses, 400, openai_json, r#"mockresp API error (400): {"message":"bad thing","type":"invalid_request_error"}"#),
            (&responses, 400, "plain failure text", "mockresp API error (400): 400 plain failure text"),
            (&responses, 500, "", "mockresp API error (500): 500 status code (no body)"),
            (&HttpWording::Responses { provider: "openai".into() }, 429, "slow", "OpenAI API error (429): 429 slow"),
            (&HttpWording::Anthropic, 400, openai_json, r#"400 {"error":{"message":"bad thing","type":"invalid_request_error"}}"#),
            (&HttpWording::Anthropic, 400, ant_json, r#"400 {"type":"error","error":{"type":"invalid_request_error","message":"bad thing"}}"#),
            (&HttpWording::Anthropic, 400, r#"{"message":"top"}"#, "400 top"),
            (&HttpWording::Anthropic, 502, "<html><body>Bad Gateway</body></html>", "502 <html><body>Bad Gateway</body></html>"),
            (&HttpWording::Anthropic, 500, "", "500 status code (no body)"),
        ];
        for (wording, status, body, want) in cases {
            assert_eq!(
                http_error_message(wording, *status, body),
                *want,
                "{wording:?} {status} {body}"
            );
        }
        // The body after the status is cut at 4,000 UTF-16 units, as pi-ai cuts it.
        let long = format!(r#"{{"error":{{"message":"{}"}}}}"#, "é".repeat(5_000));
        let got = http_error_message(&HttpWording::Completions, 400, &long);
        let quoted = format!(r#"{{"message":"{}"}}"#, "é".repeat(5_000));
        assert_eq!(
            got,
            format!(
                "400: {}... [truncated {} chars]",
                quoted.chars().take(4_000).collect::<String>(),
                quoted.chars().count() - 4_000
            )
        );
        // Statuses read back from the stored wordings.
        for (text, status) in [
            ("400: {}", Some(400)),
            ("429 slow down", Some(429)),
            ("mockresp API error (503): 503 upstream down", Some(503)),
            ("HTTP 401: no", Some(401)),
            ("4000 tokens", None),
            ("overloaded_error: Overloaded", None),
        ] {
            assert_eq!(http_status(text), status, "{text}");
        }
        assert_eq!(
            classify_text("429 slow down").class(),
            ErrorClass::RateLimited
        );
        assert_eq!(classify_text("401 no").class(), ErrorClass::Auth);
        assert!(classify_text("mockresp API error (503): 503 upstream down").is_retryable());
    }

    #[test]
    fn retryable_classes() {
        let retryable = |s: u16, b: &str| classify_http(s, None, None, b).is_retryable();
        assert!(retryable(429, "slow down"));
        assert!(retryable(529, "overloaded"));
        assert!(retryable(500, "oops"));
        assert!(retryable(503, "unavailable"));
        assert!(retryable(408, ""));
        assert!(!retryable(400, "bad request"));
        assert!(!retryable(400, "prompt is too long: 1 tokens > 0 maximum"));
        assert!(!retryable(401, "no"));
        assert!(!retryable(413, ""));
        assert!(classify_stream_error(Some("overloaded_error"), "Overloaded").is_retryable());
        assert!(classify_stream_error(Some("api_error"), "Internal server error").is_retryable());
        assert!(!classify_stream_error(
            Some("invalid_request_error"),
            "prompt is too long: 5 tokens > 4 maximum"
        )
        .is_retryable());
        assert!(classify_text("stream ended before the response was complete").is_retryable());
        assert!(!ProviderError::Aborted.is_retryable());
    }

    #[test]
    fn retry_after_headers() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(parse_retry_after(None, Some("2"), now), Some(2_000));
        assert_eq!(parse_retry_after(Some("1500"), Some("2"), now), Some(1_500));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(parse_retry_after(None, Some(&later), now), Some(7_000));
        assert_eq!(parse_retry_after(None, Some("soon"), now), None);
        let e = classify_http(429, None, Some("2"), "{}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn retry_policy_backoff_jitter_and_retry_after() {
        let p = RetryPolicy::default();
        let e = classify_http(503, None, None, "unavailable");
        assert_eq!(p.delay_with_unit(1, &e, 0.0), Some(Duration::from_secs(2)));
        assert_eq!(p.delay_with_unit(2, &e, 0.0), Some(Duration::from_secs(4)));
        assert_eq!(p.delay_with_unit(3, &e, 0.0), Some(Duration::from_secs(8)));
        assert_eq!(p.delay_with_unit(4, &e, 0.0), None);
        assert_eq!(
            p.delay_with_unit(1, &e, 0.5),
            Some(Duration::from_millis(1_800))
        );
        let d = p.delay(2, &e).unwrap();
        assert!(d >= Duration::from_millis(3_200) && d <= Duration::from_secs(4));
        let capped = RetryPolicy {
            max_retries: 10,
            ..RetryPolicy::default()
        };
        assert_eq!(
            capped.delay_with_unit(9, &e, 0.0),
            Some(Duration::from_secs(60))
        );
        let ra = classify_http(429, None, Some("2"), "{}");
        assert_eq!(p.delay_with_unit(1, &ra, 0.9), Some(Duration::from_secs(2)));
        let too_long = classify_http(429, None, Some("3600"), "{}");
        assert_eq!(p.delay_with_unit(1, &too_long, 0.0), None);
        let overflow = classify_http(400, None, None, "prompt is too long");
        assert_eq!(p.delay_with_unit(1, &overflow, 0.0), None);
    }

    #[tokio::test]
    async fn abort_cancels_the_retry_wait() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert_eq!(
            RetryPolicy::wait(Duration::from_secs(60), &cancel).await,
            Err(ProviderError::Aborted)
        );
    }

    #[test]
    fn stored_messages_and_silent_overflow() {
        let mut m = AssistantMessage::empty("a", "p", "m");
        assert_eq!(classify_message(&m, 1000), None);
        m.usage = Usage {
            input: 900,
            cache_read: 200,
            ..Usage::default()
        };
        assert_eq!(
            classify_message(&m, 1000).map(|e| e.class()),
            Some(ErrorClass::ContextOverflow)
        );
        assert_eq!(classify_message(&m, 0), None);
        m.stop_reason = StopReason::Error;
        m.error_message = Some("overloaded_error: Overloaded".into());
        assert_eq!(
            classify_message(&m, 1000).map(|e| e.class()),
            Some(ErrorClass::Overloaded)
        );
        m.stop_reason = StopReason::Aborted;
        assert_eq!(classify_message(&m, 1000), Some(ProviderError::Aborted));
    }

    #[test]
    fn size_refusals_that_images_can_cause() {
        let refused =
            |status: u16, body: &str| is_size_refusal(&classify_http(status, None, None, body));
        assert!(refused(
            400,
            r#"{"error":{"message":"input length exceeds the limit"}}"#
        ));
        assert!(refused(400, "Request too large for gpt-x"));
        assert!(refused(413, "Payload Too Large"));
        assert!(refused(413, "<html>413 Request Entity Too Large</html>"));
        assert!(refused(400, r#"{"error":{"code":"image_too_large"}}"#));
        assert!(refused(413, "anything at all"));
        assert!(!refused(400, "invalid max_tokens"));
        assert!(!refused(429, "request too large for the rate limit"));
        assert!(!refused(500, "payload too large"));
        assert!(is_size_refusal(&classify_text(
            "request_too_large: request exceeds the maximum size"
        )));
    }
}
